/* SPDX-License-Identifier: BSD-3-Clause */
/* persist.h -- what lets leases outlive the agent's process
 * (docs/restarts.md): the state directory, the journal of its connections
 * and leases kept while the agent runs, and the takeover of a
 * predecessor's at start. */
#ifndef DLOCKD_PERSIST_H
#define DLOCKD_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "core.h"
#include "journal.h"
#include "server.h"
#include "statedir.h"

struct persist_prev; /* what the predecessor's journal held */

struct persist {
    bool on; /* a state directory is kept */
    struct statedir dir;
    struct journal journal;
    bool journal_ok;    /* open, not broken */
    bool store_changed; /* the predecessor left for another Redis */
    const struct config *cfg;
    struct persist_prev *prev; /* until the takeover */
};

/* Opens and locks the state directory of cfg (none when state_dir is
 * empty: p->on stays false) and reads what a predecessor left there. With
 * successor, a running agent is asked to leave first (statedir_open()).
 * 0, or -1 with err set. */
int persist_open(struct persist *p, const struct config *cfg, bool successor, char *err,
                 size_t errlen);
/* Takes the predecessor's connections and leases over: each connection
 * whose process lives on, and that can resume, waits detached in s for its
 * client; each of its leases that is still valid is adopted by k; every
 * other lease's key is released. Then the directory holds nothing else.
 * The server's state directory is set. */
void persist_takeover(struct persist *p, struct core *k, struct server *s, uint64_t now);

/* Records, from the server's and the core's hooks. */
void persist_conn(struct persist *p, const struct conn *c);
void persist_conn_end(struct persist *p, const struct conn *c);
void persist_lease(struct persist *p, const struct conn *c, const struct lease *le, bool live);

/* A stop: nothing is left for a successor (the directory goes). */
void persist_remove(struct persist *p);
/* Closes what is open; the files stay (a restart). */
void persist_close(struct persist *p);

#endif
