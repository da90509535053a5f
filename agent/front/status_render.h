/* SPDX-License-Identifier: BSD-3-Clause */
/* status_render.h -- the status socket's answers rendered from a snapshot of
 * the agent (docs/status.md): text tables, JSON and Prometheus metrics, each
 * field described once, in one table, for all three. No I/O. */
#ifndef DLOCKD_STATUS_RENDER_H
#define DLOCKD_STATUS_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "stats.h"

/* Growable text; oom is set, and the text left short, when memory ran out. */
struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One lease held through this agent, as the status shows it. */
struct status_lease {
    const char *name;
    uint8_t state; /* DLOCK_STATE_* */
    uint64_t fence;
    int32_t pid;
    uint32_t uid;
    const char *comm;
    uint64_t granted_at, deadline; /* agent clock, ns */
    uint32_t ttl_ms, renewals;
    uint32_t waiters; /* local waiters for the name */
};

/* The agent as one query sees it. */
struct status_snapshot {
    uint64_t now, started; /* agent clock, ns */
    const char *mode;      /* "single", "quorum", ... */
    bool quorum;           /* nodes count toward majorities */
    unsigned connections;
    size_t leases;
    struct agent_stats stats;
    /* Sentinel mode: the master and up to CONFIG_MAX_NODES sentinels. */
    struct backend_node nodes[CONFIG_MAX_NODES + 1];
    size_t nnodes;
};

/* Where the snapshot comes from (the agent's loop provides it). */
typedef void (*status_lease_fn)(void *fnarg, const struct status_lease *l);
struct status_source {
    const struct config *cfg;
    void *arg;
    void (*snapshot)(void *arg, struct status_snapshot *out);
    /* Calls fn for every lease held through the agent. */
    void (*each_lease)(void *arg, status_lease_fn fn, void *fnarg);
    /* Reads what the store holds for a name (the "holder" query). */
    int (*lookup)(void *arg, const char *name, size_t len, backend_lookup_cb cb, void *cbarg);
};

/* Who asks: a peer that may not see all leases sees its own uid's only. */
struct asker {
    bool all;
    uint32_t uid;
};

/* The answers. pattern: an fnmatch(3) glob over names, NULL for all. */
void render_status_text(const struct status_source *src, const struct asker *who, struct sbuf *b);
void render_status_json(const struct status_source *src, const struct asker *who, struct sbuf *b);
void render_leases_text(const struct status_source *src, const struct asker *who,
                        const char *pattern, struct sbuf *b);
void render_leases_json(const struct status_source *src, const struct asker *who,
                        const char *pattern, struct sbuf *b);
void render_metrics(const struct status_source *src, struct sbuf *b);
/* What the store holds for name (the name as the client sent it). */
void render_holder(const char *name, int err, const struct backend_holder *h, bool json,
                   struct sbuf *b);

#endif
