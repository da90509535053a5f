/* SPDX-License-Identifier: BSD-3-Clause */
/* core.h -- dlock's lock logic as a pure state machine: FIFO acquire queues
 * with one acquire in flight per name, leases (HELD, JEOPARDY, LOST,
 * released) with batched renewal, bounded-hold and progress deadlines, the
 * validity arithmetic, releases that are retried until confirmed or expired,
 * and waiters that ride out an outage.
 *
 * The core does no I/O and reads no clock. Every entry point takes the time
 * now (CLOCK_BOOTTIME ns in dlockd, virtual time in the simulator); effects
 * go out through struct core_env (clients, lease pages, randomness) and
 * struct backend (the store); results come back through the backend's
 * callbacks, stamped with their arrival time. The driver calls core_tick()
 * once core_next_due() has come. (docs/architecture.md) */
#ifndef DLOCKD_CORE_H
#define DLOCKD_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "backend.h"
#include "config.h"
#include "planted.h"
#include "stats.h"
#include "table.h"
#include "theap.h"
#include "wire.h"

/* What the clients of one uid hold and wait for together (per-uid limits).
 * The driver owns it and points every client of that uid at it. */
struct core_account {
    uint32_t leases, waiters;
    /* Their claim on the renewal pipeline: the sum of renew_load(ttl). */
    uint64_t load;
};

/* One client (a connection in dlockd) as the core sees it. The driver fills
 * the identity and zeroes the rest; the core owns the lists. */
struct core_client {
    LIST_HEAD(, lease) leases;
    LIST_HEAD(, waiter) waiters;
    uint32_t nleases, nwaiters;
    struct core_account *acct; /* may be NULL: no per-uid accounting */
    int32_t pid;
    uint32_t uid;
    const uint32_t *gids; /* gid and supplementary groups, for the policy */
    size_t ngids;
    char comm[16]; /* one word, for holder records and logs */
    /* What the client says it does (HELLO, version 3), printable; shown in
     * the lease list instead of comm when not empty. */
    char label[65];
    /* The limits the client was told at HELLO (0: the config's): a reload
     * changes them for new connections only. */
    uint32_t max_leases, max_name_len;
};

/* Effects out of the core. Each is called synchronously, from inside a core
 * entry point, and must not call back into the core. */
struct core_env {
    void *arg;
    /* Answers and events for a client. */
    void (*granted)(void *arg, struct core_client *c, uint32_t req_id,
                    const struct wire_granted *g);
    void (*error)(void *arg, struct core_client *c, uint32_t req_id, int code, const char *msg);
    void (*ok)(void *arg, struct core_client *c, uint32_t req_id);
    void (*event)(void *arg, struct core_client *c, const struct wire_event *ev);
    /* The client's lease page: a free slot (UINT32_MAX: none), freeing one,
     * showing a lease in it, and the client's last touch of it (untrusted). */
    uint32_t (*slot_alloc)(void *arg, struct core_client *c);
    void (*slot_free)(void *arg, struct core_client *c, uint32_t slot);
    void (*slot_write)(void *arg, struct core_client *c, uint32_t slot, uint32_t state,
                       uint64_t lease_id, uint64_t fence, uint64_t deadline);
    uint64_t (*slot_touched)(void *arg, struct core_client *c, uint32_t slot);
    /* A lease to keep a record of for a successor (docs/restarts.md): new,
     * or its holds changed (live), or ended (!live); called after the lease
     * page shows the change. May be NULL. */
    void (*lease_kept)(void *arg, struct core_client *c, const struct lease *le, bool live);
    /* 64 unpredictable bits (tokens are made of them): 0, or -1 when there
     * are none to give (the acquire then fails with DLOCK_ENOMEM). */
    int (*random)(void *arg, uint64_t *out);
};

struct orphan;

/* The keep-alives whose send times the core keeps (core.keepalive_sent). */
#define CORE_KEEPALIVE_KEPT 8

struct core {
    const struct config *cfg;
    struct core_env env;
    struct backend *backend;
    struct table table;
    struct theap timers;
    struct agent_stats stats;
    struct orphan *orphans;    /* releases to retry when the store is back */
    struct tnode orphan_retry; /* TK_AGENT: retry them while the link is up */
    unsigned ready_seq;        /* counts the times the store came back */
    uint64_t down_since;       /* store unreachable since, 0 while it answers */
    int down_err;              /* then: DLOCK_EUNAVAIL or DLOCK_ENOQUORUM */
    char store_why[128];       /* what the store said of the last acquire's failure */
    bool shutting_down;
    /* Since core_shutdown(): releases the store confirmed (deleted, or the
     * key was already gone), and those that could not be sent or got no
     * answer (their keys expire by their TTL). */
    size_t stop_answered, stop_unsent;
    struct lock *kept;     /* locks kept for a handoff in this loop turn */
    unsigned turn_retries; /* renewals of leases in jeopardy sent at retries_at */
    uint64_t retries_at;
    uint64_t leases_by_kind[LOCK_SEMAPHORE + 1]; /* leases held now, per enum lock_kind */
    char host[64];                               /* for holder records */
    /* This agent's id in the waiting-hosts records of the store. */
    char waiter_id[BACKEND_WAITER_ID_MAX + 1];
    /* TK_KEEPALIVE: the refresh of the agent's keep-alive key, which its
     * bound entries count by (backend_ops.keepalive), while an entry that
     * an acquire may have written lives: until keepalive_until. */
    struct tnode keepalive;
    uint64_t keepalive_until;
    /* The keep-alive's sequence numbers (the key's value; the first one
     * random, so that no earlier run's value reads as one of ours) and the
     * send times of the last CORE_KEEPALIVE_KEPT: a grant on release is
     * valid from the send of the keep-alive whose number it reports. */
    uint64_t keepalive_seq;
    uint64_t keepalive_sent[CORE_KEEPALIVE_KEPT];
    /* The notice link is down (core_unsubscribed()) until it is set up
     * anew (core_resubscribed()): no release notice can come meanwhile. */
    bool notices_down;
};

/* Sets the core up; the backend may be attached later (core_attach_backend),
 * before the first request. 0, or -1 when out of memory.
 *
 * Times are nanoseconds on one clock that never goes back, and never 0 (0
 * means "none" in the core's records): CLOCK_BOOTTIME in dlockd. */
int core_init(struct core *k, const struct config *cfg, const struct core_env *env,
              struct backend *backend, uint64_t seed, const char *host);
void core_attach_backend(struct core *k, struct backend *backend);
/* Frees every lock, lease, waiter and pending release (nothing is sent).
 * Requests in flight hold references into the core: destroy the backend
 * first, and it must answer each of them (an error will do) as it goes. */
void core_free(struct core *k);

/* At the end of each loop turn, before the backend's batch is sent: locks
 * released in the turn that no local acquire took over are released to the
 * store. */
void core_flush(struct core *k, uint64_t now);

/* Requests of a client; the answer goes out through env (at once or later). */
void core_acquire(struct core *k, struct core_client *c, uint32_t req_id,
                  const struct wire_acquire *m, uint64_t now);
void core_release(struct core *k, struct core_client *c, uint32_t req_id, uint64_t lease_id,
                  uint64_t now);
/* Cancels c's acquire req_id if it still waits (answered DLOCK_ECANCELED, as
 * a wait that ran out would be, its place in the queue given up); an acquire
 * already answered is left alone, and nothing else is answered. */
void core_cancel(struct core *k, struct core_client *c, uint32_t req_id, uint64_t now);
/* Drops every waiter and releases every lease of c. With a reason (the agent
 * is stopping), waiters get it as their answer and holders a LOST event;
 * with 0, the client is gone and nobody is told. */
void core_client_drop(struct core *k, struct core_client *c, int reason, uint64_t now);
/* After a reload: c's waiters that the policy no longer allows fail with
 * DLOCK_EDENIED (leases stay until released). */
void core_client_policy(struct core *k, struct core_client *c, uint64_t now);

/* A lease that a predecessor of this agent granted (it restarted or
 * crashed), as its records say, taken over for client c: its holder goes on
 * holding it with the same id, page slot, token, fencing token and holds.
 * It is kept in jeopardy, valid until the predecessor's deadline, while a
 * renewal sent at once checks that the key still holds its token: HELD
 * when it does, LOST when the key is gone or another's (its key left
 * alone), and retried until the deadline while the store is unreachable.
 * With doubt (a store that may have failed over unseen meanwhile) it is
 * not shown valid until that renewal confirms it. 0, or an error when it
 * cannot be taken over (expired, its id or slot in use, a holder of the
 * name it cannot share the name with, out of memory): the caller then
 * releases its key. */
struct core_adopted {
    uint64_t lease_id;
    uint32_t slot;
    const char *name;
    uint16_t name_len;
    const char *token; /* TOKEN_HEX digits */
    struct admit_ask ask;
    uint64_t holder_id;
    uint32_t holds;
    uint32_t ttl_ms;
    uint64_t fence;
    uint64_t deadline;   /* the predecessor's, from the lease page */
    uint64_t hold_until; /* 0 = never */
    uint64_t progress_ns;
    bool doubt;
};
int core_adopt(struct core *k, struct core_client *c, const struct core_adopted *a, uint64_t now);
/* A predecessor's lease that is not taken over (its holder is gone, or
 * core_adopt() refused it): its key is released, unless a lease taken over
 * shares it (the shared holders of one grant). The token is TOKEN_HEX
 * digits. */
void core_release_key(struct core *k, const char *name, uint16_t name_len, const char *token,
                      const struct admit_ask *ask, uint32_t ttl_ms, uint64_t now);
/* Client c came back after an agent restart (its connection resumed): it
 * gets an EVENT for each of its leases, with the state and deadline they
 * have now. */
void core_client_resumed(struct core *k, struct core_client *c);

/* Events of the store. */
void core_notice(struct core *k, const char *name, size_t len, uint64_t now);
/* An operator forced the release of name: its key was deleted in the store
 * (the command is sent before this call, so that the acquires of the local
 * waiters go after it). Every local lease of the name is LOST
 * (DLOCK_ELOST), its key not released again, and a key kept for a handoff
 * is handed to nobody. Fills up to max of the leases lost (their holder's
 * pid and fencing token) into out; returns how many were lost. */
struct core_forced {
    int pid;
    uint32_t uid;
    uint64_t fence;
};
size_t core_force(struct core *k, const char *name, size_t len, struct core_forced *out, size_t max,
                  uint64_t now);
/* A release handed name's key over in the store (a grant on release,
 * docs/redis.md): to this agent's waiter when the grant names this agent,
 * its pending token, and a keep-alive whose send time is known; else the
 * name is taken, and a key granted to this agent that it cannot use is
 * handed back (or taken by its next acquire). */
void core_grant(struct core *k, const char *name, size_t len, const struct backend_grant *g,
                uint64_t now);
void core_resubscribed(struct core *k, uint64_t now);
/* The store's notice link went down (struct backend_events.on_unsubscribed):
 * until core_resubscribed() no notice comes, so the waiters' fallback retry
 * keeps the retry_max_ms cap, and a retry due later than that comes at once
 * (on the next core_tick()). */
void core_unsubscribed(struct core *k, uint64_t now);
/* The store forgot that one name's notices are wanted (its slot moved):
 * the core asks again, and its waiters try again. */
void core_unwatched(struct core *k, const char *name, size_t len, uint64_t now);
void core_store_ready(struct core *k, uint64_t now);
/* The store failed over (struct backend_events.on_doubt): the leases on the
 * names affected says (all with NULL) are in doubt until renewed. */
void core_doubt(struct core *k, bool (*affected)(void *farg, const char *name, size_t len),
                void *farg, uint64_t now);

/* Runs every timer due at now. */
void core_tick(struct core *k, uint64_t now);
/* When core_tick is next due, 0 when no timer is set. */
uint64_t core_next_due(const struct core *k);

/* The agent stops: no new acquires (DLOCK_ESHUTDOWN); the driver then drops
 * each client with core_client_drop(..., DLOCK_ESHUTDOWN, now). */
void core_shutdown(struct core *k);

/* A lock as the status socket shows it: copies, valid during the call. */
struct core_lock_view {
    const char *name;
    uint16_t name_len;
    const struct core_client *holder; /* the local holder's client, or NULL */
    uint32_t waiters;                 /* local waiters queued */
    bool acquiring;                   /* an acquire is in flight */
    uint32_t nholders;                /* local holders (leases) */
    uint8_t kind;                     /* enum lock_kind of the lease, when holder is set */
    uint32_t permits;                 /* a semaphore's permits */
    uint32_t holds;                   /* the lease's re-entrant holds */
    /* The local lease, when holder is set: */
    uint8_t state; /* DLOCK_STATE_HELD or DLOCK_STATE_JEOPARDY */
    uint64_t fence, granted_at, deadline;
    uint32_t ttl_ms, renewals;
};
/* Called with each lock of a walk, once per local holder (once with holder
 * NULL when it has none); false stops the walk after the lock's hash bucket
 * (the rest of the bucket is still visited). */
typedef bool (*core_lock_fn)(void *arg, const struct core_lock_view *v);
/* Calls fn for the locks the core knows (held here, waited for, or both), in
 * no particular order, a part at a time: a walk may be spread over many
 * calls, in different loop turns, while locks come and go in between. Start
 * with *cursor = 0; each call does about `budget` units of work (a lock or a
 * bucket of the table each), leaves in *cursor where to go on, and returns
 * false once the walk is complete. A lock known from the first call to the
 * last is visited exactly once; one added or removed meanwhile at most once
 * (table_walk()). */
bool core_walk_locks(const struct core *k, uint64_t *cursor, size_t budget, core_lock_fn fn,
                     void *arg);
/* Calls fn for the lock of one name, when the core knows it; whether it
 * did. */
bool core_find_lock(const struct core *k, const char *name, size_t len, core_lock_fn fn, void *arg);

#endif
