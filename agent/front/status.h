/* SPDX-License-Identifier: BSD-3-Clause */
/* status.h -- the agent's read-only status socket for operators: leases,
 * Redis nodes, counters and Prometheus metrics (docs/status.md). */
#ifndef DLOCKD_STATUS_H
#define DLOCKD_STATUS_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "listener.h"
#include "status_render.h"

struct sconn;

#define STATUS_CONNS 16 /* queries at once, per listener; more are turned away */

struct status {
    struct ev_loop *loop;
    struct status_source src;
    int lfd; /* -1 when there is no status socket */
    struct listener lst;
    LIST_HEAD(, sconn) conns;
    unsigned nconns[2]; /* open queries: [0] status socket, [1] HTTP */
    unsigned listings;  /* answers being rendered a part at a time */
    char path[108];
    bool inherited;  /* passed by the service manager */
    int hfd;         /* the HTTP metrics listener, -1 when off */
    char haddr[300]; /* its address */
    uint64_t serial;
    struct listener hlst;
    /* Starts a reload ("reload" request); NULL: none can be asked for. */
    void (*reload)(void *arg);
    void *reload_arg;
    /* The per-name gauges as last rendered, and when (loop time): their
     * walk of the lock table runs once a second at most. */
    struct sbuf names;
    double names_at;
};

/* Listens on path (nothing when path is empty). 0, or -1 (logged). */
int status_open(struct status *st, struct ev_loop *loop, const struct status_source *src,
                const char *path, unsigned mode);
/* Also serves GET /metrics over HTTP at "host:port" (nothing when addr is
 * empty). Call after status_open. 0, or -1 (logged). */
int status_open_http(struct status *st, const char *addr);
/* Moves the HTTP metrics listener to addr ("" for none): the new one is
 * opened before the old one is closed, and on failure the old one stays.
 * 0, or -1 with why in why. */
int status_move_http(struct status *st, const char *addr, char *why, size_t len);
/* "reload" requests (from the agent's own uid or root) call fn(arg), which
 * starts a reload or notes that one more is wanted; the queries wait until
 * status_reload_done() gives them the outcome. */
void status_on_reload(struct status *st, void (*fn)(void *arg), void *arg);
/* The outcome of the reloads asked for (lines of text, "error: ..." when the
 * file was refused) goes to every query waiting for it. */
void status_reload_done(struct status *st, const char *answer);
/* The same, sending the answers at once (the agent is about to re-execute
 * itself, and the loop will not turn again): what a socket does not take
 * at once is lost. */
void status_reload_done_now(struct status *st, const char *answer);
/* Stops listening, removes the socket file, drops open queries. */
void status_close(struct status *st);

#endif
