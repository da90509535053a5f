/* SPDX-License-Identifier: BSD-3-Clause */
/* backend.h -- the interface between the agent and a lock store. The Redis
 * single-node backend implements it, and the quorum backend on top of it.
 *
 * Every operation either returns an error at once (and never calls its
 * callback) or returns 0 and calls its callback exactly once later, from the
 * event loop, with err 0 and the operation's result, or err < 0 (a DLOCK_E*
 * code) when the store could not answer. */
#ifndef DLOCKD_BACKEND_H
#define DLOCKD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct backend;

/* result: acquire: > 0 when taken by us (the grant's fencing token), else
 * -(remaining PTTL in ms), or 0 if unknown, while someone else holds it;
 * renew and release: 1 done, 0 not our token. */
typedef void (*backend_cb)(void *arg, int err, long long result);

/* What the backend tells the agent without being asked. */
struct backend_events {
    void *arg;
    /* A release notice for a lock name (not NUL-terminated). */
    void (*on_notice)(void *arg, const char *name, size_t len);
    /* The notice subscription was (re)established: notices may have been
     * missed, so every waiter should try again. */
    void (*on_subscribed)(void *arg);
    /* Commands can be sent again after the store was unreachable. */
    void (*on_ready)(void *arg);
};

/* The health of one Redis node, for operators. */
struct backend_node {
    char addr[300];
    bool connected;            /* the command link is set up */
    bool subscribed;           /* the release notices arrive */
    uint64_t last_rtt_ns;      /* of the last command answered */
    int last_error;            /* DLOCK_E* code of the last failure, 0 if none */
    char last_error_text[160]; /* what Redis or the connection said */
    uint64_t excluded_until;   /* agent clock (CLOCK_BOOTTIME) ns: no quorum counts it before */
    char run_id[41];           /* the server's run id, empty before the first INFO */
    /* Quorum mode: appendonly yes with appendfsync always, as its last command
     * link read it: a restart loses no acknowledged write, so none excludes it. */
    bool durable;
};

/* What the store holds for a lock name right now: the lock key's value (a
 * dlock token, or whatever another client stored), dlock's holder record
 * ("TOKEN HOST PID UID COMMAND", empty when none), the key's PTTL, and on
 * how many of how many nodes that value is. value is empty when free. */
#define BACKEND_RECORD_MAX 256
struct backend_holder {
    char value[BACKEND_RECORD_MAX];
    char record[BACKEND_RECORD_MAX];
    long long pttl;
    unsigned nodes_holding, nodes;
    bool undetermined; /* quorum mode: no value (or absence) on a majority */
};
typedef void (*backend_lookup_cb)(void *arg, int err, const struct backend_holder *h);

struct backend_ops {
    /* holder: the holder record stored beside the key while it is held. */
    int (*acquire)(struct backend *b, const char *name, size_t len, const char *token,
                   const char *holder, uint32_t ttl_ms, backend_cb cb, void *arg);
    int (*renew)(struct backend *b, const char *name, size_t len, const char *token,
                 uint32_t ttl_ms, backend_cb cb, void *arg);
    /* Compare-and-delete, then (with notify) publish a release notice for
     * the waiters. cb may be NULL. */
    int (*release)(struct backend *b, const char *name, size_t len, const char *token, bool notify,
                   backend_cb cb, void *arg);
    /* Reads the lock key and its holder record. */
    int (*lookup)(struct backend *b, const char *name, size_t len, backend_lookup_cb cb, void *arg);
    /* Writes what the operations of this loop turn queued (called once per
     * turn, before the loop blocks; may run callbacks on a broken link). */
    void (*flush)(struct backend *b);
    /* Commands sent and not yet answered (for a clean shutdown). */
    size_t (*pending)(const struct backend *b);
    /* Fills up to max entries with the health of each node; returns the
     * number of nodes. */
    size_t (*nodes)(const struct backend *b, struct backend_node *out, size_t max);
    void (*destroy)(struct backend *b);
};

struct backend {
    const struct backend_ops *ops;
    /* An acquire that did not grant may still have set the key on some
     * nodes: the agent releases after every such acquire, not only after
     * unanswered ones. */
    bool release_after_miss;
};

#endif
