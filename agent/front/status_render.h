/* SPDX-License-Identifier: BSD-3-Clause */
/* status_render.h -- the status socket's answers rendered from what the
 * agent shows of itself (docs/status.md): text tables, JSON and Prometheus
 * metrics, each field described once, in one table, for all three; the
 * listings a part at a time. No I/O. */
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
    uint8_t kind;     /* enum lock_kind (core/kind.h) */
    uint32_t permits; /* a semaphore's permits, else 0 */
    uint32_t holds;   /* re-entrant holds of the lease (1 when not re-entered) */
};

/* The agent as one query sees it. */
struct status_snapshot {
    uint64_t now, started; /* agent clock, ns */
    const char *mode;      /* "single", "quorum", ... */
    bool quorum;           /* nodes count toward majorities */
    unsigned connections;
    size_t leases;
    uint64_t leases_by_kind[LOCK_SEMAPHORE + 1]; /* per enum lock_kind */
    struct agent_stats stats;
    /* Sentinel mode: the master and up to CONFIG_MAX_NODES sentinels. */
    struct backend_node nodes[CONFIG_MAX_NODES + 1];
    size_t nnodes;
};

/* Where the snapshot comes from (the agent's loop provides it). A lease
 * function returns false to end the current part of a walk early. */
typedef bool (*status_lease_fn)(void *fnarg, const struct status_lease *l);
/* One name the agent knows (held or waited for here): its local waiters
 * and leases. False ends the walk. */
typedef bool (*status_name_fn)(void *fnarg, const char *name, uint32_t waiters, uint32_t leases);
struct status_source {
    const struct config *cfg;
    void *arg;
    void (*snapshot)(void *arg, struct status_snapshot *out);
    /* Calls fn for the leases of the next part of a walk over every lock
     * held or waited for through the agent, about `budget` locks (held or
     * not) at a time; the walk goes on across calls and loop turns while
     * leases come and go. *cursor = 0 starts it; false once it is complete.
     * A lease held throughout the walk is seen exactly once, one granted or
     * ended meanwhile at most once. */
    bool (*walk_leases)(void *arg, uint64_t *cursor, size_t budget, status_lease_fn fn,
                        void *fnarg);
    /* Calls fn for the lease on one name, when one is held through the agent. */
    void (*find_lease)(void *arg, const char *name, status_lease_fn fn, void *fnarg);
    /* Reads what the store holds for a name (the "holder" query). */
    int (*lookup)(void *arg, const char *name, size_t len, backend_lookup_cb cb, void *cbarg);
    /* Calls fn for every name held or waited for through the agent, all at
     * once, until fn returns false (the opt-in per-name metrics). May be
     * NULL. */
    void (*walk_names)(void *arg, status_name_fn fn, void *fnarg);
    /* Forces the release of a name, whoever holds it (the "release-force"
     * query, which the policy let uid ask for; uid and pid for the log): cb
     * gets what the key held before. NULL: not available. */
    int (*force)(void *arg, const char *name, size_t len, uint32_t uid, int pid,
                 backend_lookup_cb cb, void *cbarg);
};

/* Who asks: a peer that may not see all leases sees its own uid's only. */
struct asker {
    bool all;
    uint32_t uid;
};

/* The answers that list leases. Each is rendered a part at a time, as the
 * peer reads: the head (the agent, its nodes and counters: one snapshot)
 * in the first part, then the leases of a walk over the lock table a slice
 * at a time, each lease as it is when its line is written, then the tail.
 * So a long listing is no snapshot of one instant. */
enum status_query { SQ_STATUS, SQ_STATUS_JSON, SQ_LEASES, SQ_LEASES_JSON };

#define STATUS_PATTERN_MAX 255

struct status_answer {
    enum status_query query;
    struct asker who;
    char pattern[STATUS_PATTERN_MAX + 1]; /* an fnmatch(3) glob; "" for all */
    bool literal;                         /* the pattern is a name: one lookup, no walk */
    uint8_t part;                         /* the next to write: head, leases, tail, or done */
    bool listed;                          /* a lease was written (JSON: the commas) */
    uint64_t cursor;                      /* of the walk */
};

/* An answer to query from who; pattern (leases queries only) may be NULL
 * for all leases. */
void status_answer_init(struct status_answer *a, enum status_query query, const struct asker *who,
                        const char *pattern);
/* Appends the next part of the answer to b: at most `budget` locks walked,
 * and no more leases once b holds `high` bytes (a lease's line may end past
 * it). Returns true when the answer is complete. */
bool status_answer_next(const struct status_source *src, struct status_answer *a, size_t budget,
                        size_t high, struct sbuf *b);
/* The agent's process as /proc shows it (status.c reads it). */
struct process_stats {
    bool ok;             /* read: else no process_* metrics */
    double cpu_seconds;  /* user + system */
    double start_time;   /* since the epoch, s */
    uint64_t rss, vsize; /* bytes */
    uint64_t open_fds;   /* descriptors open now */
    uint64_t max_fds;    /* RLIMIT_NOFILE's soft limit */
};

/* Whether the agent can take locks now, as its Redis links say: single and
 * sentinel mode, the master's command link is up; quorum, a majority of the
 * nodes is up and counts; cluster, the command link to every master that
 * serves slots is up. */
struct health {
    bool ready;
    const char *mode;
    unsigned up, needed; /* nodes that count and are up; needed for locks */
    char reason[200];    /* when not ready */
};
void health_of(const struct status_snapshot *s, struct health *h);

/* The readiness answer: one line ("ready: ..." or "not ready: ..."), and
 * with verbose one line per node after it; or (json) one JSON object.
 * Returns whether the agent is ready. */
enum health_form { HEALTH_LINE, HEALTH_VERBOSE, HEALTH_JSON };
bool render_health(const struct status_source *src, enum health_form form, struct sbuf *b);

/* The metrics: counters, histograms, per-node gauges, the process's
 * (proc, may be NULL) and, when configured and names is set, per-name
 * gauges for at most metrics_names_max names; rendered at once. */
void render_metrics(const struct status_source *src, const struct process_stats *proc, bool names,
                    struct sbuf *b);
/* The per-name gauges alone (nothing unless metrics_names is set): a walk
 * of the whole lock table. */
void render_per_name(const struct status_source *src, struct sbuf *b);
/* What the store holds for name (the name as the client sent it). */
void render_holder(const char *name, int err, const struct backend_holder *h, bool json,
                   struct sbuf *b);

#endif
