/* SPDX-License-Identifier: BSD-3-Clause */
/* pairs.c -- timed acquire+release pairs, for dlock and for the plain hiredis
 * baseline alike: one client on one name, or many threads on distinct names
 * for a fixed duration; the two variants take turns, so that drift in the
 * machine's speed hits both alike. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define WARMUP_MAX 1000 /* untimed pairs before the single-client run */
#define ROUNDS     10   /* turns of each variant in the single-client run */

/* ---- the two drivers ---- */

static void *dlock_open(const struct env *e)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, e->agent_sock);
    if (rc != 0) {
        fprintf(stderr, "dlock-bench: dlock_client_open: %s\n", dlock_strerror(rc));
        return NULL;
    }
    return c;
}

static int dlock_pair(void *client, const char *name, uint64_t *mid)
{
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    dlock_lease *l;
    int rc = dlock_lease_acquire(client, name, &o, &l);
    *mid = now_ns();
    if (rc != 0)
        return rc;
    return dlock_lease_release(l);
}

static int dlock_ping(void *client)
{
    return dlock_client_ping(client);
}

static void dlock_close(void *client)
{
    dlock_client_close(client);
}

const struct driver dlock_driver = {
    .label = "dlock",
    .via_agent = true,
    .open = dlock_open,
    .pair = dlock_pair,
    .ping = dlock_ping,
    .strerror = dlock_strerror,
    .close = dlock_close,
};

static void *plain_open_env(const struct env *e)
{
    struct plain *p = plain_open(e->redis_sock);
    if (!p)
        fprintf(stderr, "dlock-bench: cannot open a hiredis connection\n");
    return p;
}

static int plain_pair_any(void *client, const char *name, uint64_t *mid)
{
    return plain_pair(client, name, mid);
}

static int plain_ping_any(void *client)
{
    return plain_ping(client);
}

static void plain_close_any(void *client)
{
    plain_close(client);
}

const struct driver plain_driver = {
    .label = "plain",
    .open = plain_open_env,
    .pair = plain_pair_any,
    .ping = plain_ping_any,
    .strerror = plain_strerror,
    .close = plain_close_any,
};

/* ---- CPU of the processes involved ---- */

struct cpu_mark {
    struct proc_sample agent, redis, bench, machine;
};

/* CPU seconds used by each, over `wall` seconds of measurement; client:
 * the CPU time of the threads that ran the pairs. */
struct cpu_acc {
    double agent, redis, bench, machine, wall, client;
};

static void cpu_mark(const struct env *e, struct cpu_mark *m)
{
    memset(m, 0, sizeof *m);
    if (e->agent_pid > 0)
        proc_sample(e->agent_pid, &m->agent);
    proc_sample(e->redis.pid, &m->redis);
    proc_sample(getpid(), &m->bench);
    machine_sample(&m->machine);
}

static void cpu_add(struct cpu_acc *acc, const struct cpu_mark *a, const struct cpu_mark *b)
{
    acc->agent += proc_cpu_s(&a->agent, &b->agent);
    acc->redis += proc_cpu_s(&a->redis, &b->redis);
    acc->bench += proc_cpu_s(&a->bench, &b->bench);
    acc->machine += proc_cpu_s(&a->machine, &b->machine);
    acc->wall += ns_to_s(b->bench.t_ns - a->bench.t_ns);
}

/* The CPU per pair of n pairs; the agent's is unknown for a driver that
 * does not use it, or when the run's agent is not running. */
static void cpu_per_pair(const struct cpu_acc *acc, const struct env *e, const struct driver *d,
                         size_t n, struct pair_result *out)
{
    bool agent = e->agent_pid > 0 && d->via_agent;
    out->agent_us = cpu_us_per_op(agent ? acc->agent : -1, (double)n);
    out->redis_us = cpu_us_per_op(acc->redis, (double)n);
    out->client_us = cpu_us_per_op(acc->client, (double)n);
}

static void cpu_finish(const struct cpu_acc *acc, struct cpu_share *out)
{
    double k = acc->wall > 0 ? 100.0 / acc->wall : 0;
    out->agent = acc->agent * k;
    out->redis = acc->redis * k;
    out->bench = acc->bench * k;
    double others = (acc->machine - acc->agent - acc->redis - acc->bench) * k;
    out->others = others > 0 ? others : 0;
    out->wall_s = acc->wall;
}

static void count_error(struct pair_result *r, int rc)
{
    if (r->errors++ == 0)
        r->first_error = rc;
}

/* ---- one client ---- */

/* One variant of the single-client run and what it gathered. */
struct single {
    const struct driver *d;
    void *client;
    char name[64];
    struct lat pair, acquire, release, ping;
    struct cpu_acc cpu;
    double ping_wall;
    struct pair_result *out;
};

static int single_open(struct single *r, const struct driver *d, struct env *e, long n,
                       struct pair_result *out)
{
    memset(out, 0, sizeof *out);
    r->d = d;
    r->out = out;
    /* A name per variant: dlock's release is answered before Redis has
     * deleted the key, so a plain SET NX right behind it may find it taken. */
    snprintf(r->name, sizeof r->name, "bench-single-%s", d->label);
    r->client = d->open(e);
    if (!r->client)
        return -1;
    size_t cap = (size_t)n;
    if (lat_reserve(&r->pair, cap) || lat_reserve(&r->acquire, cap) ||
        lat_reserve(&r->release, cap))
        return -1;
    return 0;
}

static void single_close(struct single *r)
{
    if (r->client)
        r->d->close(r->client);
    lat_free(&r->pair);
    lat_free(&r->acquire);
    lat_free(&r->release);
    lat_free(&r->ping);
}

static void single_pairs(struct env *e, struct single *r, long n)
{
    struct cpu_mark m0, m1;
    cpu_mark(e, &m0);
    uint64_t c0 = thread_cpu_ns();
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns(), mid;
        int rc = r->d->pair(r->client, r->name, &mid);
        uint64_t t1 = now_ns();
        if (rc != 0) {
            count_error(r->out, rc);
            continue;
        }
        lat_push(&r->pair, t1 - t0);
        lat_push(&r->acquire, mid - t0);
        lat_push(&r->release, t1 - mid);
    }
    r->cpu.client += ns_to_s(thread_cpu_ns() - c0);
    cpu_mark(e, &m1);
    cpu_add(&r->cpu, &m0, &m1);
}

/* Bare round trips to the server the driver talks to: the floor under a pair. */
static void single_pings(struct single *r, long n)
{
    uint64_t start = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        if (r->d->ping(r->client) == 0)
            lat_push(&r->ping, now_ns() - t0);
    }
    r->ping_wall += ns_to_s(now_ns() - start);
}

static void single_finish(struct single *r, const struct env *e)
{
    struct pair_result *out = r->out;
    lat_summarise(&r->pair, r->cpu.wall, &out->s);
    lat_summarise(&r->acquire, r->cpu.wall, &out->acquire);
    lat_summarise(&r->release, r->cpu.wall, &out->release);
    lat_summarise(&r->ping, r->ping_wall, &out->ping);
    cpu_finish(&r->cpu, &out->cpu);
    cpu_per_pair(&r->cpu, e, r->d, out->s.n, out);
}

/* The share of n that round i of `rounds` does. */
static long chunk(long n, int i, int rounds)
{
    return n * (i + 1) / rounds - n * i / rounds;
}

int run_single(const struct driver *a, const struct driver *b, struct env *e, long n,
               struct pair_result *ra, struct pair_result *rb)
{
    struct single r[2] = {{0}};
    int rc = -1, nd = b ? 2 : 1;
    if (single_open(&r[0], a, e, n, ra) != 0 || (b && single_open(&r[1], b, e, n, rb) != 0))
        goto out;
    long warm = n / 10 < WARMUP_MAX ? n / 10 : WARMUP_MAX, pings = n / 2 > 1000 ? n / 2 : 1000;
    uint64_t mid;
    for (int k = 0; k < nd; k++)
        for (long i = 0; i < warm; i++)
            r[k].d->pair(r[k].client, r[k].name, &mid);
    int rounds = n < ROUNDS ? (int)n : ROUNDS;
    for (int i = 0; i < rounds; i++) {
        /* a b, b a, a b, ...: each variant goes first half of the time. */
        for (int k = 0; k < nd; k++)
            single_pairs(e, &r[(i + k) % nd], chunk(n, i, rounds));
        for (int k = 0; k < nd; k++)
            single_pings(&r[(i + k) % nd], chunk(pings, i, rounds));
    }
    for (int k = 0; k < nd; k++)
        single_finish(&r[k], e);
    rc = 0;
out:
    single_close(&r[0]);
    single_close(&r[1]);
    return rc;
}

/* ---- many clients ---- */

/* What the turns of one variant gathered. */
struct multi_acc {
    struct lat all;
    double wall;
    struct cpu_acc cpu;
    double redis_cpu; /* seconds, INFO cpu; < 0 once a reading failed */
    struct pair_result *out;
};

struct shared {
    const struct driver *d;
    pthread_barrier_t ready, go;
    uint64_t end; /* set by the main thread between the two barriers */
};

struct worker {
    pthread_t tid;
    struct shared *sh;
    void *client;
    int index;
    struct lat lat;
    long errors;
    int first_error;
    uint64_t finished;
    uint64_t cpu_ns; /* the thread's CPU time over its loop */
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const struct driver *d = w->sh->d;
    char name[64];
    snprintf(name, sizeof name, "bench-multi-%s-%d", d->label, w->index);
    pthread_barrier_wait(&w->sh->ready);
    pthread_barrier_wait(&w->sh->go);
    uint64_t end = w->sh->end, c0 = thread_cpu_ns();
    for (;;) {
        uint64_t t0 = now_ns();
        if (t0 >= end)
            break;
        uint64_t mid;
        int rc = d->pair(w->client, name, &mid);
        uint64_t t1 = now_ns();
        if (rc != 0 && w->errors++ == 0)
            w->first_error = rc;
        else if (rc == 0)
            lat_push(&w->lat, t1 - t0);
    }
    w->finished = now_ns();
    w->cpu_ns = thread_cpu_ns() - c0;
    return NULL;
}

/* Opens every client first, so that connecting is not measured. */
static int open_workers(struct env *e, struct shared *sh, struct worker *ws, int n)
{
    for (int i = 0; i < n; i++) {
        ws[i].sh = sh;
        ws[i].index = i;
        ws[i].client = sh->d->open(e);
        if (!ws[i].client || lat_reserve(&ws[i].lat, 1 << 14) != 0)
            return -1;
    }
    return 0;
}

static void close_workers(struct shared *sh, struct worker *ws, int n)
{
    for (int i = 0; i < n; i++) {
        if (ws[i].client)
            sh->d->close(ws[i].client);
        lat_free(&ws[i].lat);
    }
}

/* Joins every worker and adds their figures to acc. */
static void collect(struct worker *ws, int n, uint64_t start, struct multi_acc *acc)
{
    uint64_t last = start;
    for (int i = 0; i < n; i++) {
        pthread_join(ws[i].tid, NULL);
        lat_append(&acc->all, &ws[i].lat);
        if (ws[i].errors && acc->out->errors == 0)
            acc->out->first_error = ws[i].first_error;
        acc->out->errors += ws[i].errors;
        if (ws[i].finished > last)
            last = ws[i].finished;
        acc->cpu.client += ns_to_s(ws[i].cpu_ns);
    }
    acc->wall += ns_to_s(last - start);
}

static void start_workers(struct worker *ws, int n)
{
    for (int i = 0; i < n; i++) {
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]) != 0) {
            /* The barriers count on every thread: nothing sensible to do. */
            fprintf(stderr, "dlock-bench: cannot start %d threads\n", n);
            exit(1);
        }
    }
}

/* One turn: `clients` threads of d's kind for `seconds`. */
static int multi_turn(const struct driver *d, struct env *e, int clients, double seconds,
                      struct multi_acc *acc)
{
    struct shared sh = {.d = d};
    struct worker *ws = calloc((size_t)clients, sizeof *ws);
    if (!ws || open_workers(e, &sh, ws, clients) != 0) {
        if (ws)
            close_workers(&sh, ws, clients);
        free(ws);
        return -1;
    }
    pthread_barrier_init(&sh.ready, NULL, (unsigned)clients + 1);
    pthread_barrier_init(&sh.go, NULL, (unsigned)clients + 1);
    start_workers(ws, clients);
    pthread_barrier_wait(&sh.ready);
    /* Redis' CPU from its own count (INFO cpu), outside the timed window. */
    struct plain *info = plain_open(e->redis_sock);
    double r0 = info ? redis_cpu_seconds(info) : -1;
    struct cpu_mark m0, m1;
    cpu_mark(e, &m0);
    uint64_t start = now_ns();
    sh.end = start + (uint64_t)(seconds * 1e9);
    pthread_barrier_wait(&sh.go);
    collect(ws, clients, start, acc);
    cpu_mark(e, &m1);
    cpu_add(&acc->cpu, &m0, &m1);
    double r1 = info ? redis_cpu_seconds(info) : -1;
    if (r0 < 0 || r1 < 0)
        acc->redis_cpu = -1;
    else if (acc->redis_cpu >= 0)
        acc->redis_cpu += r1 - r0;
    if (info)
        plain_close(info);
    close_workers(&sh, ws, clients);
    pthread_barrier_destroy(&sh.ready);
    pthread_barrier_destroy(&sh.go);
    free(ws);
    return 0;
}

int run_multi(const struct driver *a, const struct driver *b, struct env *e, int clients,
              double seconds, struct pair_result *ra, struct pair_result *rb)
{
    const struct driver *ds[2] = {a, b};
    struct multi_acc acc[2] = {{.out = ra}, {.out = rb}};
    memset(ra, 0, sizeof *ra);
    if (rb)
        memset(rb, 0, sizeof *rb);
    /* Two half-length turns each, a b b a: a linear drift hits both alike. */
    static const int order[4] = {0, 1, 1, 0};
    int rc = 0;
    for (int i = 0; i < 4 && rc == 0; i++)
        if (ds[order[i]])
            rc = multi_turn(ds[order[i]], e, clients, seconds / 2, &acc[order[i]]);
    for (int k = 0; k < (b ? 2 : 1); k++) {
        lat_summarise(&acc[k].all, acc[k].wall, &acc[k].out->s);
        acc[k].out->redis_cpu_us = acc[k].redis_cpu >= 0 && acc[k].out->s.n > 0
                                       ? acc[k].redis_cpu * 1e6 / (double)acc[k].out->s.n
                                       : -1;
        cpu_finish(&acc[k].cpu, &acc[k].out->cpu);
        cpu_per_pair(&acc[k].cpu, e, ds[k], acc[k].out->s.n, acc[k].out);
        if (acc[k].out->redis_cpu_us >= 0)
            acc[k].out->redis_us = acc[k].out->redis_cpu_us;
        lat_free(&acc[k].all);
    }
    return rc;
}
