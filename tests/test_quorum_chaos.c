/* SPDX-License-Identifier: BSD-3-Clause */
/* test_quorum_chaos.c -- mutual exclusion and fencing under chaos in quorum
 * mode: 3 Redis nodes, 3 agents, 3 client threads per agent, all doing
 * read-modify-write of one counter under one lock, while nodes are killed
 * and restarted empty and agents are frozen (SIGSTOP) at random.
 *
 * The counter models a fenced store: a client reads it, works a while, then
 * writes it back with its fencing token; the write takes the store's mutex
 * and, inside it, checks dlock_lease_valid(); an invalid lease skips it.
 * Every performed write must find the value it read (no lost update) and
 * carry a fencing token above the previous performed write's. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define NAGENTS      3
#define PER_AGENT    3
#define NTHREADS     (NAGENTS * PER_AGENT)
#define CHAOS_MS     13000
#define LEASE_TTL    800
#define ACQUIRE_WAIT 1000

/* Result codes a client may meet under chaos; anything else is counted as
 * unexpected. */
static int expected_failure(int rc)
{
    switch (rc) {
    case DLOCK_EBUSY:
    case DLOCK_ETIMEDOUT:
    case DLOCK_ENOQUORUM:
    case DLOCK_EUNAVAIL:
    case DLOCK_ELOST:
    case DLOCK_EDISCONNECTED:
        return 1;
    default:
        return 0;
    }
}

struct store {
    pthread_mutex_t mu;
    long counter;
    uint64_t last_fence;
    long writes, skipped, lost_updates, stale_fences;
    uint64_t bad_fence, bad_prev; /* the first stale token and its predecessor */
};

struct worker {
    pthread_t tid;
    const char *sock;
    struct store *st;
    atomic_int *stop;
    unsigned seed;
    long grants, failures[32], unexpected;
    int unexpected_rc;
    long open_failures;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void count_failure(struct worker *w, int rc)
{
    if (!expected_failure(rc)) {
        if (!w->unexpected++)
            w->unexpected_rc = rc;
    } else if (-rc < 32) {
        w->failures[-rc]++;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct store *st = w->st;
    dlock_client *c = NULL;
    while (!atomic_load(w->stop)) {
        if (!c) {
            int rc = dlock_client_open(&c, w->sock);
            if (rc != 0) {
                c = NULL;
                w->open_failures++;
                sleep_ms(20);
                continue;
            }
        }
        dlock_acquire_options o = {.ttl_ms = LEASE_TTL, .wait_ms = ACQUIRE_WAIT};
        dlock_lease *l = NULL;
        int rc = dlock_lease_acquire(c, "chaos", &o, &l);
        if (rc != 0) {
            count_failure(w, rc);
            if (rc == DLOCK_EDISCONNECTED) {
                dlock_client_close(c);
                c = NULL;
            }
            sleep_ms(1 + (int)(rand_r(&w->seed) % 5));
            continue;
        }
        w->grants++;
        uint64_t fence = dlock_lease_fence(l);
        pthread_mutex_lock(&st->mu);
        long read = st->counter;
        pthread_mutex_unlock(&st->mu);
        /* Mostly a few milliseconds; one hold in 32 lasts about the TTL, so
         * that renewals run under the chaos and some leases are lost (or
         * frozen) before the write. */
        if (rand_r(&w->seed) % 32 == 0)
            sleep_ms(200 + (int)(rand_r(&w->seed) % 700));
        else
            sleep_ms(1 + (int)(rand_r(&w->seed) % 5));
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
        rc = dlock_lease_release(l);
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

/* The chaos: at random, restart a node (killed and started again empty, at
 * once or after a while; now and then two at a time) and freeze an agent for
 * 100-1500 ms. */
struct chaos {
    int64_t node_back_at[H_MAX_NODES]; /* 0: running */
    int64_t agent_thaw_at[H_MAX_AGENTS];
    long restarts, kills, pauses, double_downs;
};

/* Kills node n, to be started again (empty) `down_ms` from now. */
static void chaos_kill(struct chaos *ch, int n, int64_t now, int down_ms)
{
    h_node_kill(n);
    ch->node_back_at[n] = now + down_ms;
    ch->kills++;
}

static void chaos_tick(struct chaos *ch, unsigned *seed, int64_t now, int force_double)
{
    for (int n = 0; n < 3; n++)
        if (ch->node_back_at[n] && now >= ch->node_back_at[n]) {
            h_node_start(n);
            ch->node_back_at[n] = 0;
        }
    for (int i = 0; i < NAGENTS; i++)
        if (ch->agent_thaw_at[i] && now >= ch->agent_thaw_at[i]) {
            h_agent_resume(i);
            ch->agent_thaw_at[i] = 0;
        }
    int down = 0, frozen = 0;
    for (int n = 0; n < 3; n++)
        down += ch->node_back_at[n] != 0;
    for (int i = 0; i < NAGENTS; i++)
        frozen += ch->agent_thaw_at[i] != 0;
    unsigned r = rand_r(seed) % 100;
    int n = (int)(rand_r(seed) % 3);
    if ((r < 1 || force_double) && down == 0) {
        /* two nodes down at once: no majority for a while */
        int m = (n + 1 + (int)(rand_r(seed) % 2)) % 3;
        chaos_kill(ch, n, now, 200 + (int)(rand_r(seed) % 600));
        chaos_kill(ch, m, now, 200 + (int)(rand_r(seed) % 600));
        ch->double_downs++;
    } else if (r < 3 && !ch->node_back_at[n]) {
        h_node_restart(n);
        ch->restarts++;
    } else if (r < 5 && down == 0) {
        chaos_kill(ch, n, now, 200 + (int)(rand_r(seed) % 800));
    } else if (r < 10 && frozen < 2) {
        int i = (int)(rand_r(seed) % NAGENTS);
        if (!ch->agent_thaw_at[i]) {
            h_agent_pause(i);
            ch->agent_thaw_at[i] = now + 100 + rand_r(seed) % 1400;
            ch->pauses++;
        }
    }
}

ITEST(quorum_chaos, counter_under_node_restarts_and_frozen_agents)
{
    h_quorum_start(3, NAGENTS, "max_ttl_ms = 1000\ndefault_ttl_ms = 800\nmin_ttl_ms = 400",
                   "command_timeout_ms = 300");
    /* DLOCK_CHAOS_SEED=N replays a run (as far as timing allows). */
    const char *given = getenv("DLOCK_CHAOS_SEED");
    unsigned seed =
        given ? (unsigned)strtoul(given, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
    cr_log_info("chaos seed %u", seed);

    static struct store st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mu, NULL);
    atomic_int stop = 0;
    static struct worker w[NTHREADS];
    memset(w, 0, sizeof w);
    for (int t = 0; t < NTHREADS; t++) {
        w[t].sock = H.agent[t / PER_AGENT].sock;
        w[t].st = &st;
        w[t].stop = &stop;
        w[t].seed = seed + (unsigned)t * 7919u;
        cr_assert_eq(pthread_create(&w[t].tid, NULL, worker_main, &w[t]), 0);
    }

    struct chaos ch;
    memset(&ch, 0, sizeof ch);
    int64_t start = mono_ms(), end = start + CHAOS_MS;
    while (mono_ms() < end) {
        int64_t now = mono_ms();
        chaos_tick(&ch, &seed, now, !ch.double_downs && now > start + CHAOS_MS / 2);
        sleep_ms(50);
    }
    /* Everything back, so that the agents can stop cleanly. */
    for (int i = 0; i < NAGENTS; i++)
        h_agent_resume(i);
    for (int n = 0; n < 3; n++)
        if (ch.node_back_at[n])
            h_node_start(n);
    atomic_store(&stop, 1);
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(w[t].tid, NULL);

    long grants = 0, unexpected = 0, fails[32] = {0}, open_failures = 0;
    int unexpected_rc = 0;
    for (int t = 0; t < NTHREADS; t++) {
        grants += w[t].grants;
        if (w[t].unexpected && !unexpected)
            unexpected_rc = w[t].unexpected_rc;
        unexpected += w[t].unexpected;
        open_failures += w[t].open_failures;
        for (int e = 0; e < 32; e++)
            fails[e] += w[t].failures[e];
    }
    cr_log_info("chaos: %ld node restarts, %ld kills (%ld times two at once), %ld agent freezes",
                ch.restarts, ch.kills, ch.double_downs, ch.pauses);
    cr_log_info("clients: %ld grants, %ld writes, %ld skipped (lease no longer valid); "
                "busy %ld, timed out %ld, no quorum %ld, unavailable %ld, lost %ld, "
                "disconnected %ld, failed opens %ld",
                grants, st.writes, st.skipped, fails[-DLOCK_EBUSY], fails[-DLOCK_ETIMEDOUT],
                fails[-DLOCK_ENOQUORUM], fails[-DLOCK_EUNAVAIL], fails[-DLOCK_ELOST],
                fails[-DLOCK_EDISCONNECTED], open_failures);

    cr_assert_eq(st.lost_updates, 0, "%ld lost update(s) in %ld writes", st.lost_updates,
                 st.writes);
    cr_assert_eq(st.stale_fences, 0,
                 "%ld write(s) with a fence not above the previous one (first: %" PRIu64
                 " after %" PRIu64 ")",
                 st.stale_fences, st.bad_fence, st.bad_prev);
    cr_assert_eq(st.counter, st.writes, "counter %ld after %ld writes", st.counter, st.writes);
    cr_assert_eq(unexpected, 0, "%ld unexpected result(s), first %s (%d)", unexpected,
                 dlock_strerror(unexpected_rc), unexpected_rc);
    cr_assert_geq(st.writes, 50, "only %ld writes: too little progress to mean anything",
                  st.writes);
    cr_assert_gt(ch.restarts + ch.kills, 0, "no node was restarted");
    cr_assert_gt(ch.pauses, 0, "no agent was frozen");
    pthread_mutex_destroy(&st.mu);
}
