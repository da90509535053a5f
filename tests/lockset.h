/* SPDX-License-Identifier: BSD-3-Clause */
/* lockset.h -- the workload of the chaos tests: client threads doing
 * read-modify-write of one counter per lock name under that lock, while the
 * test breaks Redis or the agents around them.
 *
 * Each counter models a fenced store: a client reads it, works a while,
 * then writes it back with its fencing token; the write takes the store's
 * mutex and, inside it, checks dlock_lease_valid(); an invalid lease skips
 * it. Every performed write must find the value it read (no lost update)
 * and carry a fencing token above the previous performed write's.
 * ls_check() asserts both, and that nothing but the expected failures came
 * back. */
#ifndef DLOCK_TEST_LOCKSET_H
#define DLOCK_TEST_LOCKSET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define LS_MAX_NAMES   8
#define LS_MAX_THREADS 16
#define LS_CODES       64 /* failures counted per DLOCK_E* code, -code below this */

struct ls_params {
    const char *names[LS_MAX_NAMES];
    int nnames;              /* each acquire picks one of them at random */
    uint32_t ttl_ms;         /* of every lease */
    int64_t wait_ms;         /* of every acquire */
    unsigned long_hold;      /* one hold in long_hold lasts long_min_ms + up to long_span_ms, */
    int long_min_ms;         /* the others 1 to 5 ms: long ones let renewals run into */
    int long_span_ms;        /* whatever the test does meanwhile */
    int (*expected)(int rc); /* a failure the test allows */
};

struct ls_store {
    pthread_mutex_t mu;
    long counter;
    uint64_t last_fence;
    long writes, skipped, lost_updates, stale_fences;
    uint64_t bad_fence, bad_prev; /* the first stale token and its predecessor */
};

struct ls_worker {
    struct ls_run *run;
    pthread_t tid;
    const char *sock;
    unsigned seed;
    long grants, failures[LS_CODES], unexpected, open_failures;
    int unexpected_rc;
};

struct ls_run {
    struct ls_params p;
    struct ls_store store[LS_MAX_NAMES];
    struct ls_worker w[LS_MAX_THREADS];
    int nthreads;
    atomic_int stop;
    /* Totals, after ls_stop(). */
    long grants, failures[LS_CODES], unexpected, open_failures, writes;
    int unexpected_rc;
};

/* Starts nthreads clients, thread t on the agent socket socks[t], with
 * seeds from seed. */
void ls_start(struct ls_run *r, const struct ls_params *p, const char *const *socks, int nthreads,
              unsigned seed);
/* Stops and joins them, and adds up their counts. */
void ls_stop(struct ls_run *r);
/* Failures of code (a DLOCK_E* code) over all clients, after ls_stop(). */
long ls_failures(const struct ls_run *r, int code);
/* Logs each name's writes, then asserts: no lost update, fencing order,
 * each counter equal to its writes, no unexpected result, and at least
 * min_writes writes in all. */
void ls_check(struct ls_run *r, long min_writes);

/* A seed from DLOCK_CHAOS_SEED (to replay a run, as far as timing allows),
 * else from the time and pid; logged. */
unsigned ls_seed(void);

#endif
