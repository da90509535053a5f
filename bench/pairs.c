/* pairs.c -- timed acquire+release pairs, for dlock and for the plain hiredis
 * baseline alike: one client on one name, or many threads on distinct names
 * for a fixed duration. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define WARMUP_MAX 1000 /* untimed pairs before the single-client run */

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

/* ---- CPU of the three processes ---- */

struct cpu_mark {
    struct proc_sample agent, redis, bench, machine;
};

static void cpu_mark(const struct env *e, struct cpu_mark *m)
{
    memset(m, 0, sizeof *m);
    if (e->agent_pid > 0)
        proc_sample(e->agent_pid, &m->agent);
    proc_sample(e->redis_pid, &m->redis);
    proc_sample(getpid(), &m->bench);
    machine_sample(&m->machine);
}

static void cpu_share(const struct cpu_mark *a, const struct cpu_mark *b, struct cpu_share *out)
{
    out->agent = proc_cpu_pct(&a->agent, &b->agent);
    out->redis = proc_cpu_pct(&a->redis, &b->redis);
    out->bench = proc_cpu_pct(&a->bench, &b->bench);
    out->wall_s = ns_to_s(b->bench.t_ns - a->bench.t_ns);
    double others = proc_cpu_pct(&a->machine, &b->machine) - out->agent - out->redis - out->bench;
    out->others = others > 0 ? others : 0;
}

static void count_error(struct pair_result *r, int rc)
{
    if (r->errors++ == 0)
        r->first_error = rc;
}

/* ---- one client ---- */

/* The pairs of a single-client run, whole and split at the acquire's return. */
struct single_lats {
    struct lat pair, acquire, release;
};

static int single_reserve(struct single_lats *sl, long n)
{
    return lat_reserve(&sl->pair, (size_t)n) || lat_reserve(&sl->acquire, (size_t)n) ||
           lat_reserve(&sl->release, (size_t)n);
}

static void single_free(struct single_lats *sl)
{
    lat_free(&sl->pair);
    lat_free(&sl->acquire);
    lat_free(&sl->release);
}

static void time_pairs(const struct driver *d, void *c, long n, struct single_lats *sl,
                       struct pair_result *out)
{
    const char *name = "bench-single";
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns(), mid;
        int rc = d->pair(c, name, &mid);
        uint64_t t1 = now_ns();
        if (rc != 0) {
            count_error(out, rc);
            continue;
        }
        lat_push(&sl->pair, t1 - t0);
        lat_push(&sl->acquire, mid - t0);
        lat_push(&sl->release, t1 - mid);
    }
}

/* Bare round trips to the server the driver talks to: the floor under a pair. */
static void time_pings(const struct driver *d, void *c, long n, struct summary *out)
{
    struct lat lat = {0};
    uint64_t start = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        if (d->ping(c) == 0)
            lat_push(&lat, now_ns() - t0);
    }
    lat_summarise(&lat, ns_to_s(now_ns() - start), out);
    lat_free(&lat);
}

int run_single(const struct driver *d, struct env *e, long n, struct pair_result *out)
{
    memset(out, 0, sizeof *out);
    void *c = d->open(e);
    struct single_lats sl = {0};
    if (!c || single_reserve(&sl, n) != 0) {
        if (c)
            d->close(c);
        single_free(&sl);
        return -1;
    }
    long warm = n / 10 < WARMUP_MAX ? n / 10 : WARMUP_MAX;
    uint64_t mid;
    for (long i = 0; i < warm; i++)
        d->pair(c, "bench-single", &mid);
    struct cpu_mark m0, m1;
    cpu_mark(e, &m0);
    time_pairs(d, c, n, &sl, out);
    cpu_mark(e, &m1);
    double wall = ns_to_s(m1.bench.t_ns - m0.bench.t_ns);
    lat_summarise(&sl.pair, wall, &out->s);
    lat_summarise(&sl.acquire, wall, &out->acquire);
    lat_summarise(&sl.release, wall, &out->release);
    cpu_share(&m0, &m1, &out->cpu);
    time_pings(d, c, n / 2 > 1000 ? n / 2 : 1000, &out->ping);
    single_free(&sl);
    d->close(c);
    return 0;
}

/* ---- many clients ---- */

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
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const struct driver *d = w->sh->d;
    char name[64];
    snprintf(name, sizeof name, "bench-multi-%d", w->index);
    pthread_barrier_wait(&w->sh->ready);
    pthread_barrier_wait(&w->sh->go);
    uint64_t end = w->sh->end;
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

/* Joins every worker and merges their figures into *out. */
static void collect(struct worker *ws, int n, uint64_t start, struct pair_result *out)
{
    struct lat all = {0};
    uint64_t last = start;
    for (int i = 0; i < n; i++) {
        pthread_join(ws[i].tid, NULL);
        lat_append(&all, &ws[i].lat);
        if (ws[i].errors && out->errors == 0)
            out->first_error = ws[i].first_error;
        out->errors += ws[i].errors;
        if (ws[i].finished > last)
            last = ws[i].finished;
    }
    lat_summarise(&all, ns_to_s(last - start), &out->s);
    lat_free(&all);
}

int run_multi(const struct driver *d, struct env *e, int clients, double seconds,
              struct pair_result *out)
{
    memset(out, 0, sizeof *out);
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
    int started = 0;
    for (; started < clients; started++)
        if (pthread_create(&ws[started].tid, NULL, worker_main, &ws[started]) != 0)
            break;
    if (started < clients) {
        /* Cannot happen with sane limits; nothing sensible to measure then. */
        fprintf(stderr, "dlock-bench: cannot start %d threads\n", clients);
        exit(1);
    }
    pthread_barrier_wait(&sh.ready);
    struct cpu_mark m0, m1;
    cpu_mark(e, &m0);
    uint64_t start = now_ns();
    sh.end = start + (uint64_t)(seconds * 1e9);
    pthread_barrier_wait(&sh.go);
    collect(ws, clients, start, out);
    cpu_mark(e, &m1);
    cpu_share(&m0, &m1, &out->cpu);
    close_workers(&sh, ws, clients);
    pthread_barrier_destroy(&sh.ready);
    pthread_barrier_destroy(&sh.go);
    free(ws);
    return 0;
}
