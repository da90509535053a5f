/* SPDX-License-Identifier: BSD-3-Clause */
/* check.c -- the cost of checking a held lease: dlock_lease_valid(),
 * dlock_lease_remaining_ns() and dlock_lease_touch() in tight loops, once on
 * one thread and once on several threads at the same lease, against one round
 * trip to the agent and one Redis GET of the lock key, all in the same run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define CHECK_NAME "bench-check"
#define RT_ROUNDS  10   /* turns of ping and GET, alternating who goes first */
#define RT_WARMUP  1000 /* untimed round trips of each kind, at most */

/* Where the loops' results go, so that no call can be left out. */
static volatile uint64_t sink;

/* ---- the loops: each returns what it accumulated ---- */

typedef uint64_t (*loop_fn)(dlock_lease *l, long n);

static uint64_t loop_valid(dlock_lease *l, long n)
{
    uint64_t acc = 0;
    for (long i = 0; i < n; i++)
        acc += (uint64_t)dlock_lease_valid(l);
    return acc;
}

static uint64_t loop_remaining(dlock_lease *l, long n)
{
    uint64_t acc = 0;
    for (long i = 0; i < n; i++)
        acc += (uint64_t)dlock_lease_remaining_ns(l);
    return acc;
}

static uint64_t loop_touch(dlock_lease *l, long n)
{
    for (long i = 0; i < n; i++)
        dlock_lease_touch(l);
    return (uint64_t)n;
}

/* The clock read alone: the floor under the three above. */
static uint64_t loop_clock(dlock_lease *l, long n)
{
    uint64_t acc = 0;
    struct timespec ts;
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_BOOTTIME, &ts);
        acc += (uint64_t)ts.tv_nsec;
    }
    return acc;
}

enum { K_VALID, K_REMAINING, K_TOUCH, K_CLOCK, K_COUNT };

static const loop_fn loops[K_COUNT] = {loop_valid, loop_remaining, loop_touch, loop_clock};

/* One timed loop. */
struct timing {
    double ns_per_call;
    uint64_t acc;             /* what the loop accumulated */
    uint64_t wall_ns, cpu_ns; /* its wall time, and the CPU time its thread got */
};

static void time_loop(loop_fn fn, dlock_lease *l, long n, struct timing *t)
{
    uint64_t c0 = thread_cpu_ns(), t0 = now_ns();
    t->acc = fn(l, n);
    uint64_t t1 = now_ns(), c1 = thread_cpu_ns();
    sink += t->acc;
    t->wall_ns = t1 - t0;
    t->cpu_ns = c1 - c0;
    t->ns_per_call = (double)t->wall_ns / (double)n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void cost_of(double *runs, int n, struct loop_cost *out)
{
    qsort(runs, (size_t)n, sizeof *runs, cmp_double);
    out->min = runs[0];
    out->max = runs[n - 1];
    out->median = n % 2 ? runs[n / 2] : (runs[n / 2 - 1] + runs[n / 2]) / 2;
}

/* ---- several threads on the same lease ---- */

struct mt_shared {
    dlock_lease *lease;
    long calls;
    pthread_barrier_t go;
};

struct mt_worker {
    pthread_t tid;
    struct mt_shared *sh;
    struct timing t;
};

static void *mt_main(void *arg)
{
    struct mt_worker *w = arg;
    pthread_barrier_wait(&w->sh->go);
    time_loop(loop_valid, w->sh->lease, w->sh->calls, &w->t);
    return NULL;
}

/* What a set of loops gathered besides their ns per call. */
struct loop_acc {
    uint64_t wall_ns, cpu_ns;
    long long falses;
};

static void acc_add(struct loop_acc *a, const struct timing *t, long calls, bool counts_true)
{
    a->wall_ns += t->wall_ns;
    a->cpu_ns += t->cpu_ns;
    if (counts_true)
        a->falses += calls - (long long)t->acc;
}

/* One run of CHECK_THREADS valid() loops at once: their mean ns per call. */
static void mt_run(dlock_lease *l, long calls, double *ns, struct loop_acc *acc)
{
    struct mt_shared sh = {.lease = l, .calls = calls};
    struct mt_worker ws[CHECK_THREADS] = {{0}};
    pthread_barrier_init(&sh.go, NULL, CHECK_THREADS);
    int started = 0;
    for (; started < CHECK_THREADS; started++) {
        ws[started].sh = &sh;
        if (pthread_create(&ws[started].tid, NULL, mt_main, &ws[started]) != 0)
            break;
    }
    if (started < CHECK_THREADS) {
        /* The barrier counts on every thread: nothing sensible to do. */
        fprintf(stderr, "dlock-bench: cannot start %d threads\n", CHECK_THREADS);
        exit(1);
    }
    double sum = 0;
    for (int i = 0; i < CHECK_THREADS; i++) {
        pthread_join(ws[i].tid, NULL);
        sum += ws[i].t.ns_per_call;
        acc_add(acc, &ws[i].t, calls, true);
    }
    pthread_barrier_destroy(&sh.go);
    *ns = sum / CHECK_THREADS;
}

/* ---- the loops, single and concurrent ---- */

/* CPU in percent of one core over a stretch of wall time. */
static double pct(uint64_t cpu_ns, uint64_t wall_ns)
{
    return wall_ns ? 100.0 * (double)cpu_ns / (double)wall_ns : 0;
}

static void run_loops(dlock_lease *l, long calls, struct check_result *out)
{
    double runs[K_COUNT][CHECK_RUNS], mt[CHECK_RUNS];
    struct timing t;
    struct loop_acc one = {0}, many = {0};
    struct proc_sample m0, m1, b0, b1;
    for (int k = 0; k < K_COUNT; k++) /* untimed warm-up */
        time_loop(loops[k], l, calls / 10 + 1, &t);
    double others = 0, wall = 0;
    for (int r = 0; r < CHECK_RUNS; r++) {
        /* A different kind goes first in each run: drift hits all alike. */
        for (int j = 0; j < K_COUNT; j++) {
            int k = (r + j) % K_COUNT;
            time_loop(loops[k], l, calls, &t);
            runs[k][r] = t.ns_per_call;
            acc_add(&one, &t, calls, k == K_VALID);
        }
        machine_sample(&m0);
        proc_sample(getpid(), &b0);
        mt_run(l, calls, &mt[r], &many);
        machine_sample(&m1);
        proc_sample(getpid(), &b1);
        others += (double)(m1.cpu_ticks - m0.cpu_ticks) - (double)(b1.cpu_ticks - b0.cpu_ticks);
        wall += ns_to_s(m1.t_ns - m0.t_ns);
    }
    out->valid_false = one.falses + many.falses;
    out->oncpu_1t = pct(one.cpu_ns, one.wall_ns);
    out->oncpu_mt = pct(many.cpu_ns, many.wall_ns);
    out->mt_wall_s = wall;
    others = wall > 0 ? 100.0 * others / (double)sysconf(_SC_CLK_TCK) / wall : 0;
    out->others_mt = others > 0 ? others : 0;
    cost_of(runs[K_VALID], CHECK_RUNS, &out->valid);
    cost_of(runs[K_REMAINING], CHECK_RUNS, &out->remaining);
    cost_of(runs[K_TOUCH], CHECK_RUNS, &out->touch);
    cost_of(runs[K_CLOCK], CHECK_RUNS, &out->clock);
    cost_of(mt, CHECK_RUNS, &out->valid_mt);
}

/* ---- round trips: the agent, and Redis itself ---- */

static void time_pings(dlock_client *c, long n, struct lat *lat, struct check_result *out)
{
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        int rc = dlock_client_ping(c);
        uint64_t t1 = now_ns();
        if (rc == 0)
            lat_push(lat, t1 - t0);
        else if (out->ping_errors++ == 0)
            out->first_ping_error = rc;
    }
}

static void time_gets(struct plain *p, long n, struct lat *lat, struct check_result *out)
{
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        int rc = plain_get(p, CHECK_NAME);
        uint64_t t1 = now_ns();
        if (rc == 0)
            lat_push(lat, t1 - t0);
        else if (out->get_errors++ == 0)
            out->first_get_error = rc;
    }
}

static int run_round_trips(dlock_client *c, struct plain *p, long n, struct check_result *out)
{
    struct lat ping = {0}, get = {0}, scratch = {0};
    int rc = -1;
    if (lat_reserve(&ping, (size_t)n) != 0 || lat_reserve(&get, (size_t)n) != 0)
        goto out;
    long warm = n / 10 < RT_WARMUP ? n / 10 : RT_WARMUP;
    struct check_result ignored = {0};
    time_pings(c, warm, &scratch, &ignored);
    time_gets(p, warm, &scratch, &ignored);
    int rounds = n < RT_ROUNDS ? (int)n : RT_ROUNDS;
    for (int i = 0; i < rounds; i++) {
        long share = n * (i + 1) / rounds - n * i / rounds;
        /* ping get, get ping, ...: each goes first half of the time. */
        for (int k = 0; k < 2; k++) {
            if ((i + k) % 2 == 0)
                time_pings(c, share, &ping, out);
            else
                time_gets(p, share, &get, out);
        }
    }
    lat_summarise(&ping, 0, &out->ping);
    lat_summarise(&get, 0, &out->get);
    rc = 0;
out:
    lat_free(&ping);
    lat_free(&get);
    lat_free(&scratch);
    return rc;
}

/* ---- the phase ---- */

static void read_clocksource(char *buf, size_t len)
{
    snprintf(buf, len, "?");
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f)
        return;
    if (fgets(buf, (int)len, f))
        buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

int run_check(struct env *e, long calls, long round_trips, struct check_result *out)
{
    memset(out, 0, sizeof *out);
    out->calls = calls;
    out->round_trips = round_trips;
    read_clocksource(out->clocksource, sizeof out->clocksource);
    dlock_client *c = NULL;
    dlock_lease *l = NULL;
    struct plain *p = plain_open(e->redis_sock);
    if (!p) {
        fprintf(stderr, "dlock-bench: cannot open a hiredis connection\n");
        return -1;
    }
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    int rc = dlock_client_open(&c, e->agent_sock);
    if (rc == 0)
        rc = dlock_lease_acquire(c, CHECK_NAME, &o, &l);
    if (rc != 0) {
        fprintf(stderr, "dlock-bench: lease for the check loops: %s\n", dlock_strerror(rc));
        dlock_client_close(c);
        plain_close(p);
        return -1;
    }
    run_loops(l, calls, out);
    rc = run_round_trips(c, p, round_trips, out);
    if (dlock_lease_release(l) != 0)
        fprintf(stderr, "dlock-bench: releasing the check lease failed\n");
    dlock_client_close(c);
    plain_close(p);
    return rc;
}
