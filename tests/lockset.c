/* SPDX-License-Identifier: BSD-3-Clause */
/* lockset.c -- the chaos tests' workload (lockset.h). */
#include "lockset.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static void count_failure(struct ls_worker *w, int rc)
{
    if (!w->run->p.expected(rc)) {
        if (!w->unexpected++)
            w->unexpected_rc = rc;
    } else if (-rc < LS_CODES) {
        w->failures[-rc]++;
    }
}

/* One read-modify-write of store st under lease l with token fence. */
static void fenced_update(struct ls_worker *w, struct ls_store *st, const dlock_lease *l)
{
    const struct ls_params *p = &w->run->p;
    uint64_t fence = dlock_lease_fence(l);
    pthread_mutex_lock(&st->mu);
    long read = st->counter;
    pthread_mutex_unlock(&st->mu);
    if (rand_r(&w->seed) % p->long_hold == 0)
        h_sleep_ms(p->long_min_ms + (int)(rand_r(&w->seed) % (unsigned)p->long_span_ms));
    else
        h_sleep_ms(1 + (int)(rand_r(&w->seed) % 5));
    pthread_mutex_lock(&st->mu);
    if (dlock_lease_valid(l)) {
        if (st->counter != read)
            st->lost_updates++;
        if (fence <= st->last_fence && !st->stale_fences++) {
            st->bad_fence = fence;
            st->bad_prev = st->last_fence;
        }
        st->counter = read + 1;
        st->last_fence = fence;
        st->writes++;
    } else {
        st->skipped++;
    }
    pthread_mutex_unlock(&st->mu);
}

static void *worker_main(void *arg)
{
    struct ls_worker *w = arg;
    struct ls_run *r = w->run;
    dlock_client *c = NULL;
    while (!atomic_load(&r->stop)) {
        if (!c && dlock_client_open(&c, w->sock) != 0) {
            c = NULL;
            w->open_failures++;
            h_sleep_ms(20);
            continue;
        }
        int j = r->p.nnames > 1 ? (int)(rand_r(&w->seed) % (unsigned)r->p.nnames) : 0;
        dlock_acquire_options o = {.ttl_ms = r->p.ttl_ms, .wait_ms = r->p.wait_ms};
        dlock_lease *l = NULL;
        int rc = dlock_lease_acquire(c, r->p.names[j], &o, &l);
        if (rc == 0) {
            w->grants++;
            fenced_update(w, &r->store[j], l);
            rc = dlock_lease_release(l);
        } else {
            h_sleep_ms(1 + (int)(rand_r(&w->seed) % 5));
        }
        if (rc != 0)
            count_failure(w, rc);
        if (rc == DLOCK_EDISCONNECTED) {
            dlock_client_close(c);
            c = NULL;
        }
    }
    dlock_client_close(c);
    return NULL;
}

void ls_start(struct ls_run *r, const struct ls_params *p, const char *const *socks, int nthreads,
              unsigned seed)
{
    cr_assert(p->nnames >= 1 && p->nnames <= LS_MAX_NAMES);
    cr_assert(nthreads >= 1 && nthreads <= LS_MAX_THREADS);
    memset(r, 0, sizeof *r);
    r->p = *p;
    r->nthreads = nthreads;
    for (int j = 0; j < p->nnames; j++)
        pthread_mutex_init(&r->store[j].mu, NULL);
    for (int t = 0; t < nthreads; t++) {
        struct ls_worker *w = &r->w[t];
        w->run = r;
        w->sock = socks[t];
        w->seed = seed + (unsigned)t * 7919u;
        cr_assert_eq(pthread_create(&w->tid, NULL, worker_main, w), 0);
    }
}

void ls_stop(struct ls_run *r)
{
    atomic_store(&r->stop, 1);
    for (int t = 0; t < r->nthreads; t++) {
        const struct ls_worker *w = &r->w[t];
        pthread_join(w->tid, NULL);
        r->grants += w->grants;
        if (w->unexpected && !r->unexpected)
            r->unexpected_rc = w->unexpected_rc;
        r->unexpected += w->unexpected;
        r->open_failures += w->open_failures;
        for (int e = 0; e < LS_CODES; e++)
            r->failures[e] += w->failures[e];
    }
    for (int j = 0; j < r->p.nnames; j++)
        r->writes += r->store[j].writes;
}

long ls_failures(const struct ls_run *r, int code)
{
    return -code > 0 && -code < LS_CODES ? r->failures[-code] : 0;
}

void ls_check(struct ls_run *r, long min_writes)
{
    for (int j = 0; j < r->p.nnames; j++) {
        struct ls_store *st = &r->store[j];
        const char *name = r->p.names[j];
        cr_log_info("%s: %ld writes, %ld skipped (lease no longer valid)", name, st->writes,
                    st->skipped);
        cr_assert_eq(st->lost_updates, 0, "%s: %ld lost update(s) in %ld writes", name,
                     st->lost_updates, st->writes);
        cr_assert_eq(st->stale_fences, 0,
                     "%s: %ld write(s) with a fence not above the previous one (first: %" PRIu64
                     " after %" PRIu64 ")",
                     name, st->stale_fences, st->bad_fence, st->bad_prev);
        cr_assert_eq(st->counter, st->writes, "%s: counter %ld after %ld writes", name, st->counter,
                     st->writes);
        pthread_mutex_destroy(&st->mu);
    }
    cr_assert_eq(r->unexpected, 0, "%ld unexpected result(s), first %s (%d)", r->unexpected,
                 dlock_strerror(r->unexpected_rc), r->unexpected_rc);
    cr_assert_geq(r->writes, min_writes, "only %ld writes: too little progress to mean anything",
                  r->writes);
}

unsigned ls_seed(void)
{
    const char *given = getenv("DLOCK_CHAOS_SEED");
    unsigned seed =
        given ? (unsigned)strtoul(given, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
    cr_log_info("chaos seed %u (DLOCK_CHAOS_SEED=%u replays it, as far as timing allows)", seed,
                seed);
    return seed;
}
