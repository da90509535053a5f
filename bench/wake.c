/* SPDX-License-Identifier: BSD-3-Clause */
/* wake.c -- how fast a waiter on another agent gets a lock once it is
 * released. Two agents of their own on the run's Redis, a client on each. In
 * each round one client holds a name and the other waits for it in a thread
 * of its own; after a settle pause (the waiter's agent has found the name
 * taken and listens on its release channel), the holder releases with
 * dlock_lease_release_sync() and the waiter's thread stamps the moment its
 * acquire returns. Then the roles swap. A plain hiredis PING per round gives
 * the Redis round trip of the same run to compare with. A last series of
 * rounds runs with every process on the path (Redis, both agents, this
 * program's threads) on one CPU: what the wake costs without wake-ups that
 * cross CPUs, which are dear where an idle CPU sleeps deeply (a virtual
 * machine's vCPU that halts at once). */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "dlock.h"

#define SETTLE_MS     4     /* the pause before each release */
#define LISTEN_MS     100   /* and how long more the waiter's agent may take to listen */
#define WAIT_MS       10000 /* the waiter's acquire gives up after this */
#define WARMUP_ROUNDS 20    /* untimed rounds first, at most */

static const char name[] = "bench-wake";
#define CHANNEL BENCH_PREFIX "{" BENCH_PREFIX "bench-wake} released"

/* One side: a client on one agent, and the thread that waits through it. */
struct side {
    dlock_client *c;
    dlock_lease *lease; /* held by this side */
    pthread_t th;
    bool started;
    long asked, served; /* acquires asked of the thread, and done */
    int status;
    uint64_t t_done; /* now_ns() when the last acquire returned */
};

struct wake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    struct side s[2];
};

struct waiter_arg {
    struct wake *w;
    int k;
};

static void *waiter_main(void *p)
{
    struct waiter_arg *a = p;
    struct wake *w = a->w;
    struct side *s = &w->s[a->k];
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = WAIT_MS};
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && s->served == s->asked)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop)
            break;
        pthread_mutex_unlock(&w->mu);
        dlock_lease *l = NULL;
        int rc = dlock_lease_acquire(s->c, name, &o, &l);
        uint64_t t = now_ns();
        pthread_mutex_lock(&w->mu);
        s->t_done = t;
        s->status = rc;
        s->lease = rc == 0 ? l : NULL;
        s->served++;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static bool served(struct wake *w, int k)
{
    pthread_mutex_lock(&w->mu);
    bool done = w->s[k].served == w->s[k].asked;
    pthread_mutex_unlock(&w->mu);
    return done;
}

static void note_error(struct wake_result *out, int err)
{
    if (out->errors++ == 0)
        out->first_error = err;
}

/* One round: side h holds the name, side 1-h waits for it. Its wake in ns,
 * 0 when not timed, or -1 when the round failed. */
/* One timed PING into l (when timed). */
static int ping_into(struct plain *p, bool timed, struct lat *l)
{
    uint64_t t0 = now_ns();
    int rc = plain_ping(p);
    if (rc != 0) {
        fprintf(stderr, "dlock-bench: wake: PING: %s\n", plain_strerror(rc));
        return -1;
    }
    if (timed)
        lat_push(l, now_ns() - t0);
    return 0;
}

static long long round_once(struct wake *w, struct plain *p, int h, bool timed, struct lat *ping,
                            struct lat *ping_busy, struct wake_result *out)
{
    int v = 1 - h;
    /* A round trip right behind the previous round, while every process is
     * still awake. */
    if (ping_into(p, timed, ping_busy) != 0)
        return -1;
    pthread_mutex_lock(&w->mu);
    w->s[v].asked++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    sleep_ms(SETTLE_MS);
    /* The baseline round trip comes after the same pause as the wake. */
    if (ping_into(p, timed, ping) != 0)
        return -1;
    long long subs = redis_numsub(p, CHANNEL);
    for (int i = 0; subs < 1 && i < LISTEN_MS; i++) {
        sleep_ms(1);
        subs = redis_numsub(p, CHANNEL);
    }
    if (subs < 1)
        out->not_listening++;
    bool early = served(w, v);
    if (early)
        out->early++;
    uint64_t start = now_ns();
    int rc = dlock_lease_release_sync(w->s[h].lease);
    w->s[h].lease = NULL;
    if (rc != 0)
        note_error(out, rc);
    pthread_mutex_lock(&w->mu);
    while (w->s[v].served != w->s[v].asked)
        pthread_cond_wait(&w->cv, &w->mu);
    struct side s = w->s[v];
    pthread_mutex_unlock(&w->mu);
    if (s.status != 0) {
        fprintf(stderr, "dlock-bench: wake: the waiter's acquire: %s\n", dlock_strerror(s.status));
        note_error(out, s.status);
        return -1;
    }
    if (!timed || early)
        return 0;
    return (long long)(s.t_done - start);
}

/* The CPU of both agents (agents) and of Redis now. */
struct wake_cpu {
    struct proc_sample a[2], redis;
};

static int wake_cpu_mark(const struct env *e, const struct wake_result *out, struct wake_cpu *m)
{
    int rc = proc_sample(e->redis.pid, &m->redis);
    for (int k = 0; k < 2; k++)
        rc |= proc_sample(out->agent[k].pid, &m->a[k]);
    return rc;
}

/* `rounds` rounds after a warm-up; their wake and PING figures into *wake_s
 * and *ping_s, and with cpu, the CPU per round into out. */
static int run_rounds(const struct env *e, struct wake *w, struct plain *p, long rounds, bool cpu,
                      struct summary *wake_s, struct summary *ping_s, struct wake_result *out)
{
    struct wake_cpu c0, c1;
    bool cpu_ok = true;
    struct lat wake = {0}, ping = {0}, busy = {0};
    int rc = -1;
    if (lat_reserve(&wake, (size_t)rounds) != 0 || lat_reserve(&ping, (size_t)rounds) != 0 ||
        lat_reserve(&busy, (size_t)rounds) != 0) {
        fprintf(stderr, "dlock-bench: out of memory\n");
        goto out;
    }
    long warm = rounds / 10 < WARMUP_ROUNDS ? rounds / 10 : WARMUP_ROUNDS;
    int h = 0;
    for (long i = 0; i < warm + rounds; i++, h = 1 - h) {
        bool timed = i >= warm;
        if (i == warm && cpu)
            cpu_ok = wake_cpu_mark(e, out, &c0) == 0;
        long long ns = round_once(w, p, h, timed, &ping, &busy, out);
        if (ns < 0)
            goto out;
        if (timed && ns > 0)
            lat_push(&wake, (uint64_t)ns);
    }
    if (cpu) {
        cpu_ok = cpu_ok && wake_cpu_mark(e, out, &c1) == 0;
        out->agents_us = cpu_us_per_op(
            cpu_ok ? proc_cpu_s(&c0.a[0], &c1.a[0]) + proc_cpu_s(&c0.a[1], &c1.a[1]) : -1,
            (double)rounds);
        out->redis_us =
            cpu_us_per_op(cpu_ok ? proc_cpu_s(&c0.redis, &c1.redis) : -1, (double)rounds);
        lat_summarise(&busy, 0, &out->ping_busy);
    }
    lat_summarise(&wake, 0, wake_s);
    lat_summarise(&ping, 0, ping_s);
    rc = 0;
out:
    lat_free(&wake);
    lat_free(&ping);
    lat_free(&busy);
    return rc;
}

/* The CPUs of every process on the path (only their main threads: Redis
 * and the agents serve the round there) and of this program's threads. */
struct wake_pins {
    cpu_set_t proc[3], thread[3];
};

/* Reads the CPUs into p, or (set) moves everything onto p's. */
static int pins(const struct env *e, struct wake *w, const struct wake_result *out,
                struct wake_pins *p, bool set)
{
    pid_t pid[3] = {e->redis.pid, out->agent[0].pid, out->agent[1].pid};
    pthread_t th[3] = {w->s[0].th, w->s[1].th, pthread_self()};
    int rc = 0;
    for (int i = 0; i < 3; i++) {
        size_t n = sizeof p->proc[i];
        rc |= set ? sched_setaffinity(pid[i], n, &p->proc[i])
                  : sched_getaffinity(pid[i], n, &p->proc[i]);
        rc |= set ? pthread_setaffinity_np(th[i], n, &p->thread[i])
                  : pthread_getaffinity_np(th[i], n, &p->thread[i]);
    }
    return rc != 0 ? -1 : 0;
}

/* A quarter of the run's rounds (at least 50) with every process of the
 * path on the CPU this thread runs on, then each back on its CPUs. A
 * failure to pin leaves the figures out, not the run. */
static int run_one_cpu(const struct env *e, struct wake *w, struct plain *p, long rounds,
                       struct wake_result *out)
{
    struct wake_pins saved, one;
    int cpu = sched_getcpu();
    if (cpu >= 0 && pins(e, w, out, &saved, false) == 0) {
        for (int i = 0; i < 3; i++) {
            CPU_ZERO(&one.proc[i]);
            CPU_SET(cpu, &one.proc[i]);
            one.thread[i] = one.proc[i];
        }
        if (pins(e, w, out, &one, true) == 0) {
            long n = rounds / 4 < 50 ? 50 : rounds / 4;
            int rc = run_rounds(e, w, p, n, false, &out->wake_one_cpu, &out->ping_one_cpu, out);
            if (pins(e, w, out, &saved, true) != 0)
                fprintf(stderr, "dlock-bench: wake: cannot put the processes back on their CPUs\n");
            return rc;
        }
        pins(e, w, out, &saved, true);
    }
    fprintf(stderr, "dlock-bench: wake: cannot pin the processes to one CPU; skipped\n");
    return 0;
}

int run_wake(struct env *e, long rounds, struct wake_result *out)
{
    memset(out, 0, sizeof *out);
    out->rounds = rounds;
    out->settle_ms = SETTLE_MS;
    out->agent[0].tag = "wake-a";
    out->agent[1].tag = "wake-b";
    static struct wake w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    struct waiter_arg args[2] = {{&w, 0}, {&w, 1}};
    struct plain *p = plain_open(e->redis_sock);
    int rc = p ? side_start(e, out->agent, 2) : -1;
    for (int k = 0; k < 2 && rc == 0; k++) {
        rc = dlock_client_open(&w.s[k].c, out->agent[k].sock);
        if (rc != 0)
            fprintf(stderr, "dlock-bench: dlock_client_open %s: %s\n", out->agent[k].sock,
                    dlock_strerror(rc));
    }
    if (rc == 0) {
        dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
        rc = dlock_lease_acquire(w.s[0].c, name, &o, &w.s[0].lease);
        if (rc != 0)
            fprintf(stderr, "dlock-bench: wake: first acquire: %s\n", dlock_strerror(rc));
    }
    for (int k = 0; k < 2 && rc == 0; k++) {
        rc = pthread_create(&w.s[k].th, NULL, waiter_main, &args[k]);
        w.s[k].started = rc == 0;
        if (rc != 0)
            fprintf(stderr, "dlock-bench: pthread_create: %s\n", strerror(rc));
    }
    if (rc == 0)
        rc = run_rounds(e, &w, p, rounds, true, &out->wake, &out->ping, out);
    if (rc == 0)
        rc = run_one_cpu(e, &w, p, rounds, out);
    pthread_mutex_lock(&w.mu);
    w.stop = true;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    for (int k = 0; k < 2; k++) {
        if (w.s[k].started)
            pthread_join(w.s[k].th, NULL);
        if (w.s[k].lease)
            dlock_lease_release_sync(w.s[k].lease);
        dlock_client_close(w.s[k].c);
    }
    side_stop(e, out->agent, 2);
    plain_close(p);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (!p)
        fprintf(stderr, "dlock-bench: cannot open a hiredis connection\n");
    return rc;
}
