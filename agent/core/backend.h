/* SPDX-License-Identifier: BSD-3-Clause */
/* backend.h -- what the core needs from a lock store: the one seam between
 * the lock logic and Redis (docs/architecture.md). The single-node Redis
 * backend implements it; the quorum backend implements it on top of N
 * single-node backends, through this same interface; the simulator
 * implements it over its model of Redis.
 *
 * Every operation either returns an error at once (a DLOCK_E* code; the
 * callback is never called) or returns 0 and calls its callback exactly once
 * later, from the event loop (never from inside the call), with the result. */
#ifndef DLOCKD_BACKEND_H
#define DLOCKD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kind.h"
#include "stats.h"

struct backend;
struct backend_holder;

/* The longest agent id of the waiting-hosts record. */
#define BACKEND_WAITER_ID_MAX 16
/* The longest life of an entry of the waiting-hosts record: the store's
 * scripts hold every agent to it, whatever its settings (docs/protocol.md). */
#define BACKEND_WAIT_ENTRY_MAX_MS 3000
/* An entry bound to its agent's keep-alive key (backend_ops.keepalive)
 * counts only while that key exists, and the key lives
 * BACKEND_WAIT_ENTRY_MAX_MS from its last refresh; the entry's own expiry,
 * refreshed by the agent's acquires, is at most this: the bound on an entry
 * whose removal was lost while its agent lives on. */
#define BACKEND_WAIT_BOUND_MAX_MS 60000
/* How often an agent with bound entries refreshes its keep-alive key. */
#define BACKEND_KEEPALIVE_EVERY_MS 1000

/* What a request asks of the store. */
enum backend_op {
    /* Takes the key (SET NX with the holder record); the fencing token is at
     * least req->floor. */
    BACKEND_ACQUIRE,
    /* Extends the key to ttl_ms while it holds token. */
    BACKEND_RENEW,
    /* Compare-and-delete, then (with notify) a release notice. */
    BACKEND_RELEASE,
    /* Raises the fencing mark of the key's slot to req->fence while the key
     * holds token (the quorum's write-back). */
    BACKEND_FENCE,
    /* Reads the lock key and its holder record (for operators): the result's
     * holder says what the store holds. */
    BACKEND_LOOKUP,
    /* Deletes the lock key whoever holds it (an operator's forced release,
     * docs/status.md): the result's holder says what it held before. */
    BACKEND_FORCE,
};

/* One request; the strings are copied before the call returns. */
struct backend_req {
    enum backend_op op;
    enum lock_kind kind; /* which kind of lock the key is */
    uint32_t limit;      /* LOCK_SEMAPHORE: the most holders; else 0 */
    const char *name;    /* the lock name, not NUL-terminated */
    size_t len;
    const char *token; /* our token for the key: 32 hex characters */
    /* acquire: who holds it ("HOST PID UID COMMAND"), stored after the token
     * in the key's value */
    const char *holder;
    uint32_t ttl_ms; /* acquire, renew, fence: the key's TTL from now */
    bool notify;     /* release: publish a release notice for waiters */
    uint64_t floor;  /* acquire: the fencing token is at least this (0: the node's clock) */
    /* acquire: the tokens after the grant's own reserved for handoffs within
     * the agent (the slot's mark is raised to the token + block) */
    uint32_t block;
    /* acquire: the agent's id in the name's waiting-hosts record (NULL:
     * none), and for how long a waiting acquire that does not get the lock
     * joins the record (0: a try-once acquire, which neither joins nor jumps
     * it) */
    const char *waiter_id;
    uint32_t want_ms;
    /* acquire: the entry is bound to the agent's keep-alive key (want_ms up
     * to BACKEND_WAIT_BOUND_MAX_MS); only when the store has a keepalive op */
    bool bound;
    uint64_t fence; /* fence: raise the slot's high-water mark to at least this */
    /* acquire, renew: the lease's holds (re-entrant acquires), which a key
     * in Redisson's format shows as its hold count (0 reads as 1) */
    uint32_t holds;
    bool asking; /* Redis Cluster: send ASKING first (the answer to an ASK redirect) */
};

enum backend_outcome {
    BACKEND_DONE,     /* acquire: taken by us; renew: extended; release: deleted; fence: raised */
    BACKEND_TAKEN,    /* acquire: someone else holds the key */
    BACKEND_NOT_OURS, /* renew, release, fence: the key is gone or holds another token */
    /* acquire: the name is held as another counted kind (shared against a
     * semaphore), or as a semaphore with another limit: never granted as asked */
    BACKEND_MISMATCH,
};

struct backend_result {
    int err;                      /* 0, or DLOCK_E* when the store gave no answer */
    enum backend_outcome outcome; /* when err is 0 */
    uint64_t fence;               /* acquire DONE: the grant's fencing token */
    long long pttl_ms;            /* acquire TAKEN: the holder's remaining TTL, 0 unknown */
    uint64_t at;                  /* agent clock (CLOCK_BOOTTIME ns) of the answer */
    /* release DONE of a key in another client's format: how many clients
     * heard its message (PUBLISH's count), this agent's own subscription
     * included; else 0 */
    uint32_t listeners;
    /* With err from a Redis error reply: its text ("MOVED 42 10.0.0.2:6379",
     * "TRYAGAIN ..."), or what else failed ("WAIT: 0 of 1 replicas
     * acknowledged ..."); valid during the callback only; else NULL. */
    const char *error_text;
    /* lookup, force: what the key held (valid during the callback only);
     * NULL with err. */
    const struct backend_holder *holder;
};
typedef void (*backend_cb)(void *arg, const struct backend_result *r);

/* Which lock names a failover may have cost their keys. */
typedef bool (*backend_affected_fn)(void *farg, const char *name, size_t len);

/* A grant on release (docs/redis.md, "Grant on release"): a release handed
 * the key of a name to the oldest entry of its waiting-hosts record, the
 * entry of agent `to`, with the key's value its entry carried (token),
 * the fencing token the release made (fence), the value of that agent's
 * keep-alive key when it did (seq: the keep-alive's sequence number), and
 * the TTL and block of the entry. */
struct backend_grant {
    char to[BACKEND_WAITER_ID_MAX + 1];
    char token[33];
    uint64_t fence;
    uint64_t seq;
    uint32_t ttl_ms;
    uint32_t block;
};

/* What the backend tells its user without being asked. */
struct backend_events {
    void *arg;
    /* A release notice for a lock name (not NUL-terminated); with grant
     * (else NULL), the release granted the name's key to the agent it
     * names: the name is taken. */
    void (*on_notice)(void *arg, const char *name, size_t len, const struct backend_grant *grant);
    /* The notice subscriptions were lost and the link set up anew: the store
     * keeps no list of the names asked for (the core alone does), so the core
     * asks for each again; notices may have been missed, so every waiter
     * tries again. */
    void (*on_subscribed)(void *arg);
    /* The notice link went down: no notice comes until on_subscribed, so
     * the core keeps its waiters' fallback retry short meanwhile. May be
     * NULL in stores whose waiters' guard never relies on the link (Redis
     * Cluster, quorum mode: backend_ops.keepalive NULL). */
    void (*on_unsubscribed)(void *arg);
    /* The store forgot one name's subscription (Redis Cluster: its slot
     * moved): the core asks for it again. May be NULL in stores that never
     * do. */
    void (*on_unwatched)(void *arg, const char *name, size_t len);
    /* Commands can be sent again after the store was unreachable. */
    void (*on_ready)(void *arg);
    /* The store failed over (a replica became the master; replication is
     * asynchronous): the keys of the names for which affected(farg, ...) is
     * true (every name when affected is NULL) may be gone. The backend
     * answers every command sent before the failover with an error, never
     * with the old master's word, so only renewals sent after this call can
     * confirm a key. affected and farg are valid during the call only. May
     * be NULL for stores that never fail over. */
    void (*on_doubt)(void *arg, backend_affected_fn affected, void *farg);
};

/* The health of one Redis node, for operators. */
struct backend_node {
    char addr[300];
    bool connected;            /* the command link is set up */
    bool subscribed;           /* the release notices arrive */
    uint64_t last_rtt_ns;      /* of the last command answered */
    int last_error;            /* DLOCK_E* code of the last failure, 0 if none */
    char last_error_text[400]; /* what Redis or the connection said */
    uint64_t excluded_until;   /* agent clock (CLOCK_BOOTTIME) ns: no quorum counts it before */
    char run_id[41];           /* the server's run id, empty before the first INFO */
    /* Quorum mode: appendonly yes with appendfsync always, as its last command
     * link read it: a restart loses no acknowledged write, so none excludes it. */
    bool durable;
    struct histo command; /* round trips of its commands answered (send -> reply) */
};

/* What the store holds for a lock name right now: the lock key's value (a
 * dlock token, or whatever another client stored), dlock's holder record
 * ("TOKEN HOST PID UID COMMAND", the whole value of a dlock key; empty when
 * none), the key's PTTL, and on
 * how many of how many nodes that value is. value is empty when free. */
#define BACKEND_RECORD_MAX 256
/* A shared or semaphore key's live permits that a lookup shows at most (it
 * counts them all), and the longest kind it names. */
#define BACKEND_PERMITS_SHOWN 8
#define BACKEND_KIND_MAX      24
/* One live permit of such a key. */
struct backend_permit {
    char token[33];
    long long pttl_ms;               /* until it lapses, by the server's clock */
    char record[BACKEND_RECORD_MAX]; /* "TOKEN HOST PID UID COMMAND" */
    /* A Redisson-format key: record is the holder's field ("ID:THREAD";
     * token is dlock's token when the field is dlock's), holds its count. */
    unsigned holds;
};
struct backend_holder {
    char value[BACKEND_RECORD_MAX];
    char record[BACKEND_RECORD_MAX];
    long long pttl;
    unsigned nodes_holding, nodes;
    bool undetermined; /* quorum mode: no value (or absence) on a majority */
    /* A shared or semaphore key: its kind ("shared", "sem:N"; then value is
     * the kind too, record the first permit's, pttl the latest permit's),
     * or a hash in Redisson's format ("redisson", "redisson:read",
     * "redisson:write"), else empty; its live permits (Redisson's holder
     * fields), and the first `shown` of them. */
    char kind[BACKEND_KIND_MAX];
    unsigned permits, shown;
    struct backend_permit permit[BACKEND_PERMITS_SHOWN];
};
typedef void (*backend_lookup_cb)(void *arg, int err, const struct backend_holder *h);

/* Whether a lookup (or a forced release) found the name free: no value, no
 * permit, and not undetermined. */
static inline bool backend_holder_free(const struct backend_holder *h)
{
    return !h->value[0] && !h->permits && !h->undetermined;
}

struct backend_ops {
    /* One operation on a lock's key, the one req->op names, for a lock of
     * req->kind. Layers that only route requests (cluster, sentinel) forward
     * any operation as it is. A store that cannot do it answers
     * DLOCK_EBACKEND at once (the quorum layer has no BACKEND_FENCE of its
     * own: it sends it to its nodes). cb may be NULL for a release. */
    int (*op)(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg);
    /* Release notices for name are wanted (on) or no longer (off): the
     * backend subscribes to the name's channel, and says it is subscribed
     * with a notice for the name (a release may have come just before), and
     * again after every resubscription. May be NULL: notices for every name
     * arrive without asking. */
    int (*watch)(struct backend *b, const char *name, size_t len, bool on);
    /* The agent (req->waiter_id) no longer waits for req->name: its entry
     * leaves the name's waiting-hosts record, so that other hosts need not
     * wait for it to lapse. Nothing answers; may be NULL. */
    void (*leave)(struct backend *b, const struct backend_req *req);
    /* The agent (waiter_id) lives: its keep-alive key is set to seq (the
     * keep-alive's sequence number, which a grant on release reports back)
     * to expire in ttl_ms, so that its entries bound to it count that long.
     * Nothing answers. NULL: the store cannot bind entries (Redis Cluster,
     * where a script names every key it reads; quorum mode, where each node
     * has a view of its own): each entry lives by its own expiry, refreshed
     * per name. */
    void (*keepalive)(struct backend *b, const char *waiter_id, uint32_t ttl_ms, uint64_t seq);
    /* Reads the lock key and its holder record. */
    int (*lookup)(struct backend *b, const char *name, size_t len, backend_lookup_cb cb, void *arg);
    /* Deletes the lock key whoever holds it (an operator's forced release:
     * every node in quorum mode), and answers what it held (value empty:
     * nothing). May be NULL: the store cannot. */
    int (*force)(struct backend *b, const char *name, size_t len, backend_lookup_cb cb, void *arg);
    /* Writes what the operations of this loop turn queued (called once per
     * turn, before the loop blocks; may run callbacks on a broken link). */
    void (*flush)(struct backend *b);
    /* Commands sent and not yet answered (for a clean shutdown). */
    size_t (*pending)(const struct backend *b);
    /* Fills up to max entries with the health of each node; returns the
     * number of nodes. */
    size_t (*nodes)(const struct backend *b, struct backend_node *out, size_t max);
    /* Whether the store counts toward quorums at now (a node within the
     * exclusion after its restart does not). May be NULL: always. */
    bool (*counts)(const struct backend *b, uint64_t now);
    /* Why acquires fail with DLOCK_ENOQUORUM at now, when nodes are excluded
     * after a restart ("K of N nodes are excluded ...; the first joins
     * quorums in S s") into buf; false when that is not the reason. May be NULL. */
    bool (*excluded)(const struct backend *b, uint64_t now, char *buf, size_t len);
    /* A reload changed settings in the config the store was made with: what
     * it keeps of them (a timer's period, a copy) follows. May be NULL: the
     * store reads them where it uses them. */
    void (*reconfigured)(struct backend *b);
    void (*destroy)(struct backend *b);
};

struct backend {
    const struct backend_ops *ops;
    /* An acquire that did not grant may still have set the key on some
     * nodes: the core releases after every such acquire, not only after
     * unanswered ones. */
    bool release_after_miss;
    /* The kinds of lock beyond LOCK_EXCLUSIVE (which every store keeps) that
     * it can keep: BACKEND_KIND() bits. The core refuses the others. */
    uint32_t kinds;
};
#define BACKEND_KIND(kind) (1u << (kind))

#endif
