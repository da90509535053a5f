/* SPDX-License-Identifier: BSD-3-Clause */
/* table.h -- the agent's lease table: locks by name, leases by id, FIFO
 * waiter queues, and the validity arithmetic (docs/protocol.md, "GRANTED").
 * Pure: no I/O; times are CLOCK_BOOTTIME nanoseconds passed in. */
#ifndef DLOCKD_TABLE_H
#define DLOCKD_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "admit.h"
#include "theap.h"
#include "util.h"

#define TOKEN_HEX   32 /* 128 random bits as lowercase hex: to the store and the journal */
#define TOKEN_BYTES 16 /* the same bits as a lease or lock keeps them */

/* A kept token as the TOKEN_HEX lowercase hex digits (and a NUL) it stands
 * for, and back: 0, or -1 when hex is not TOKEN_HEX lowercase hex digits. */
void token_hex(const uint8_t raw[TOKEN_BYTES], char out[TOKEN_HEX + 1]);
int token_raw(const char *hex, uint8_t raw[TOKEN_BYTES]);

enum tkind { TK_LEASE = 1, TK_WAITER = 2, TK_LOCK = 3, TK_AGENT = 4, TK_KEEPALIVE = 5 };

struct lock;
struct core_client;
struct lease;

/* A request waiting for a lock, in the lock's FIFO queue. */
struct waiter {
    struct tnode timer; /* wait deadline; not queued when waiting forever */
    struct waiter *qnext, *qprev;
    LIST_ENTRY(waiter) olink; /* the owner's list */
    struct lock *lock;
    struct core_client *owner;
    uint32_t req_id;
    uint32_t ttl_ms;
    uint32_t max_hold_ms; /* 0 = none */
    uint32_t progress_ms; /* 0 = none */
    bool try_once;
    struct admit_ask ask; /* the kind asked for */
    uint64_t holder_id;   /* re-entrant: the owner within the client (0: the client) */
    uint64_t since;       /* when the request came (the queue wait's start) */
};

/* A lease held for a local owner. One per held lease: the fields are in
 * order of size so that nothing pads them (tests/test_table.c holds
 * its size to a budget). */
struct lease {
    struct tnode timer; /* next renewal, or the deadline while one is in flight */
    uint64_t id;        /* slot index and generation, see table_lease_find */
    struct lock *lock;
    struct core_client *owner;
    LIST_ENTRY(lease) olink; /* the owner's list */
    LIST_ENTRY(lease) hlink; /* the lock's holders */
    uint64_t deadline;       /* validity end, ns */
    uint64_t renew_sent;     /* send time of the renewal in flight, 0 if none */
    uint64_t fence;          /* fencing token of the grant */
    uint64_t granted_at;     /* send time of the acquire */
    uint64_t hold_until;     /* renewal stops then (max hold), 0 = never */
    uint64_t progress_ns;    /* renewal stops without a touch this long, 0 = off */
    /* When the store failed over under the lease, 0 if it did not: the key
     * may be gone, so the lease is shown invalid until a renewal sent after
     * then confirms it. */
    uint64_t doubt_since;
    uint64_t holder_id;   /* re-entrant: the owner within the client (0: the client) */
    struct admit_ask ask; /* the kind it is held as */
    uint32_t slot;        /* in the owner's lease page */
    uint32_t ttl_ms;
    uint32_t renewals;   /* that succeeded */
    uint32_t holds;      /* re-entrant holds: 1, plus one per re-entry */
    uint32_t holds_sent; /* the holds that the last renewal (or the grant) wrote */
    int16_t stopped;     /* why renewal stopped (a DLOCK_E code), 0 while it goes on */
    uint8_t state;       /* DLOCK_STATE_HELD or DLOCK_STATE_JEOPARDY */
    /* The token of the key (or of the store's permit) that the lease holds:
     * local shared holders of one grant from the store share it. */
    uint8_t token[TOKEN_BYTES];
};

/* Where a lock stands on this agent; exactly one at a time. */
/* The most "taken" answers a lock counts (its attempts field). */
#define LOCK_ATTEMPTS_MAX 15

enum lock_phase {
    LOCK_IDLE,      /* no local holder, nothing in flight: the next waiter's acquire may go */
    LOCK_ACQUIRING, /* an acquire is in flight for the first waiter (acq_for) */
    LOCK_BACKOFF,   /* taken elsewhere, or the store is down: waiters wait for a release
                       notice or the fallback retry (the retry timer is set) */
    LOCK_HELD,      /* local holders hold the key (holders is not empty) */
    LOCK_KEPT,      /* its holder released it in this loop turn; the key is kept for a
                       local waiter until the turn ends (core_flush) */
};

/* A lock name known to this agent: held locally, waited for, or both. One
 * per held name, allocated with its name: the fields are in order of size
 * so that nothing pads them, the flags are bit-fields, and the allocation
 * ends with the name (table_lock_get; tests/test_table.c holds the
 * size to a budget). */
struct lock {
    struct lock *hnext;         /* hash chain */
    LIST_HEAD(, lease) holders; /* not empty in LOCK_HELD, and beside an acquire in flight */
    struct waiter *qhead, *qtail;
    struct waiter *acq_for; /* waiter the in-flight acquire is for (may be NULL) */
    struct lock *kept_next; /* on the core's list of kept locks */
    struct tnode retry;     /* fallback retry: queued exactly in LOCK_BACKOFF */
    /* What one phase needs at a time, in the same bytes: LOCK_ACQUIRING the
     * acquire's (read as its answer comes), LOCK_KEPT the released lease's
     * (no acquire is in flight while a lock has an exclusive holder, which
     * may_keep() asks of a kept key). */
    union {
        struct {
            uint64_t acq_sent;   /* send time of the in-flight acquire */
            uint32_t acq_ttl_ms; /* its TTL */
            uint16_t acq_block;  /* the tokens it reserves for handoffs and joins
                                    (cohort_handoffs) */
        };
        /* LOCK_KEPT: the released lease's validity and next renewal (its TTL
         * is kept_ttl_ms, the key's token acq_token), for a local acquire in
         * the same turn. */
        struct {
            uint64_t kept_deadline, kept_renew_due;
        };
    };
    /* Cohort handoff (docs/architecture.md): after the last grant from the
     * store (sent at cohort_start), the next token reserved with it and how
     * many are left (cohort_left). Set at the grant, so that an acquire sent
     * beside the holders (a reader's, a permit's) does not change them. */
    uint64_t cohort_start;
    uint64_t cohort_next;
    /* The shared or semaphore waiters in the queue, and what they ask (all
     * alike: admit_compatible()); nholders' kind is in each lease. */
    struct admit_ask counted;
    struct admit_ask acq_ask; /* the kind the in-flight acquire asks the store for */
    uint32_t hash;            /* name_hash()'s low bits: the bucket's are among them */
    uint32_t nholders;
    uint32_t nwaiters; /* in the queue */
    uint32_t ncounted;
    uint32_t kept_ttl_ms;
    uint16_t cohort_left;
    enum lock_phase phase : 3;
    bool notice_missed : 1; /* a release notice came while acquiring */
    /* An operator forced the release while an acquire was in flight: sent
     * before the forced release, the acquire reached the store first, so a
     * grant it brings back was deleted (core_force()). */
    bool forced : 1;
    bool watched : 1; /* the store was asked for the name's release notices */
    bool joined : 1;  /* a waiting acquire may have joined the waiting-hosts record */
    /* A key in another client's format (docs/redisson.md): the last
     * release's message was heard by other clients than this agent (their
     * waiters are in no record of ours), so the next acquire after a local
     * release waits a moment (yield_next), that one of them may go first. */
    bool others_listen : 1;
    bool yield_next : 1;
    bool kept_listed : 1; /* on the core's list of kept locks (until core_flush) */
    /* A notice of the name came over its subscription since it was last
     * asked for: releases wake the waiters, the fallback retry slows down
     * (pace.h); and the "taken" answers since the last notice or grant
     * (LOCK_ATTEMPTS_MAX at most). */
    bool confirmed : 1;
    unsigned attempts : 4;
    /* acq_token is the waiters' pending token: asked with, not granted, not
     * withdrawn. The next acquire asks with it again (with the same kind),
     * so that the entry it wrote in the waiting-hosts record names the token
     * the agent takes a grant on release for (docs/redis.md). */
    bool token_pending : 1;
    uint16_t name_len;
    uint8_t cohort_token[TOKEN_BYTES]; /* the cohort's grant's key (readers join only it) */
    uint8_t acq_token[TOKEN_BYTES];
    char name[]; /* NUL-terminated */
};

/* Objects of one size, from chunks of the table's own (table.c). */
struct table_pool {
    void *free;      /* returned objects, linked through their first word */
    char *cur, *end; /* not handed out yet, in the newest chunk */
    void *chunks;    /* the chunks, newest first */
    size_t used;     /* objects handed out */
    uint32_t nchunks;
};

struct table {
    struct lock **buckets;
    size_t nbuckets, nlocks;
    uint64_t seed;
    struct lease **slots; /* lease by slot index */
    uint32_t *gens;       /* generation per slot */
    /* The generation a new slot starts from, from the seed: a successor
     * agent's new lease ids do not repeat its predecessor's, which a
     * resumed client may still know. */
    uint32_t gen_base;
    uint32_t *free_slots; /* stack of free slot indexes */
    uint32_t nslots, nfree, slot_cap;
    size_t nleases;
    /* Leases and locks by size, in steps of TABLE_POOL_GRAIN bytes up to
     * TABLE_POOL_MAX (larger locks are allocated one by one). */
    struct table_pool *pools;
};

#define TABLE_POOL_GRAIN 8
#define TABLE_POOL_MAX   512

int table_init(struct table *t, uint64_t seed);
void table_free(struct table *t); /* frees every lock, lease and waiter */

/* The bytes a lock with a name of len bytes needs, and the bytes it takes
 * in the table's pools (rounded up to TABLE_POOL_GRAIN). */
size_t lock_alloc_size(size_t len);
size_t table_pool_size(size_t n);

/* Lock lookup and creation; a lock is freed by table_lock_release_if_idle. */
struct lock *table_lock_find(const struct table *t, const char *name, size_t len);
struct lock *table_lock_get(struct table *t, const char *name, size_t len); /* find or create */
/* Frees l if nothing refers to it (LOCK_IDLE, no waiters, not listed as
 * kept).
 * Returns true when it was freed. */
bool table_lock_release_if_idle(struct table *t, struct lock *l);

/* A walk over the locks that may go on in later calls, while locks are
 * added and removed (and the table grows) in between. The cursor names the
 * next bucket in reverse-bit order (as Redis' SCAN does), so a growth of
 * the table between two calls neither repeats nor skips a bucket: every lock
 * present from the first call to the last is visited exactly once, one added
 * or removed meanwhile at most once. Start with *cursor = 0. Each call visits
 * whole buckets, from *cursor on, until `budget` units are spent (a bucket
 * costs one, each of its locks one more) or fn returns false (the rest of
 * that bucket is still visited); it leaves in *cursor where to go on and
 * returns false once the walk is complete. The table is not changed. */
bool table_walk(const struct table *t, uint64_t *cursor, size_t budget,
                bool (*fn)(void *arg, const struct lock *l), void *arg);

/* Leases: create (one more holder of l, id assigned), find by id, remove
 * (from l's holders) and free. */
struct lease *table_lease_new(struct table *t, struct lock *l, struct core_client *owner);
/* A lease with the given id, as a predecessor of the agent numbered it (its
 * slot index and generation): NULL when that slot is in use or out of
 * memory. Later leases of the slot get later generations. */
struct lease *table_lease_new_id(struct table *t, struct lock *l, struct core_client *owner,
                                 uint64_t id);
struct lease *table_lease_find(const struct table *t, uint64_t id);
void table_lease_free(struct table *t, struct lease *le);

/* Waiter queue of a lock. */
void table_waiter_enqueue(struct lock *l, struct waiter *w);
void table_waiter_dequeue(struct waiter *w);

/* Validity arithmetic: valid until t_send + ttl - drift, drift = ttl/100 +
 * 2 ms (docs/protocol.md). */
uint64_t lease_drift_ns(uint32_t ttl_ms);
uint64_t lease_deadline(uint64_t t_send, uint32_t ttl_ms);
/* When to send the next renewal after one sent at t_send succeeded: at
 * ttl * fraction, rounded down to a quantum so renewals that fall due
 * together are sent in one batch. */
uint64_t lease_next_renew(uint64_t t_send, uint32_t ttl_ms, double fraction);
/* When to retry a failed renewal: soon, but never past the deadline. */
uint64_t lease_renew_retry(uint64_t now, uint64_t deadline, uint32_t ttl_ms);

/* Fallback retry delay for waiters: in [fallback, 1.5 * fallback) from the
 * jitter value r in [0, 1), or earlier when the holder's key expires first
 * (pttl_ms > 0). */
uint64_t waiter_retry_delay(uint32_t fallback_ms, long long pttl_ms, double r);

/* Is name an acceptable lock name? 0, or DLOCK_EBADNAME/DLOCK_ENAMETOOLONG. */
int lock_name_check(const char *name, size_t len, uint32_t max_len);

#endif
