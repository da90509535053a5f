/* SPDX-License-Identifier: BSD-3-Clause */
/* contend.c -- one lock name contended by worker processes: the cohort part
 * (the processes of one agent, with cohort handoff on and off), the two
 * hosts part (two agents, the processes of each taking turns with the other's)
 * and the runs of the kinds part (kinds.c).
 * Each worker is a forked process with its own dlock client and its own
 * hiredis connection, made after the fork; it loops for a while on a waiting
 * acquire of its kind, a critical section (a GET of a counter key and a SET of
 * the counter + 1; or the kinds part's, below) and a release, timing each
 * acquire, and reports its counts and waits to the parent through a pipe. The
 * counter at the end must equal the exclusive kind's grants (mutual
 * exclusion). */
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define READY_MS   10000 /* how long the workers may take to connect */
#define REPORT_MS  30000 /* and to report, past the end of their loops */
#define WAIT_MS    10000 /* a worker's acquire gives up after this */
#define WORKER_RAN 0x5a  /* the byte a worker sends once connected */
#define WRITER     1000  /* an exclusive holder's weight on the gauge; a reader's is 1 */
#define PACE_US    100   /* a paced writer looks at the grants this often */

static const char name[] = "bench-contend";
static const char counter_key[] = "bench-contend-counter";
static const char gauge_key[] = "bench-contend-inside";

/* What a worker sends at the end, followed by `waits` uint64_t, ns. */
struct report {
    long grants, errors;
    int first_error;
    uint64_t wall_ns;
    uint64_t waits;
    long max_inside, overlaps;
};

/* ---- pipes ---- */

static int write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads len bytes before the deadline (now_ns): 0, or -1 (EOF, error, late). */
static int read_full(int fd, void *buf, size_t len, uint64_t deadline)
{
    char *p = buf;
    while (len > 0) {
        uint64_t now = now_ns();
        if (now >= deadline)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue; /* the deadline check above ends it */
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- the worker process ---- */

/* GET of the counter, SET of the counter + 1. */
static int critical_section(redisContext *r)
{
    redisReply *g = redisCommand(r, "GET %s", counter_key);
    if (!g)
        return -1;
    long long v = 0;
    int rc = 0;
    if (g->type == REDIS_REPLY_STRING)
        v = strtoll(g->str, NULL, 10);
    else if (g->type != REDIS_REPLY_NIL)
        rc = -1;
    freeReplyObject(g);
    if (rc != 0)
        return -1;
    redisReply *s = redisCommand(r, "SET %s %lld", counter_key, v + 1);
    rc = s && s->type == REDIS_REPLY_STATUS ? 0 : -1;
    if (s)
        freeReplyObject(s);
    return rc;
}

/* The next reply of a pipeline as an integer (INCRBY, DECRBY) or a counter
 * (GET: a string, or nil for 0): 0, or -1. */
static int reply_int(redisContext *r, long long *v)
{
    redisReply *x = NULL;
    if (redisGetReply(r, (void **)&x) != REDIS_OK || !x)
        return -1;
    int rc = 0;
    if (x->type == REDIS_REPLY_INTEGER)
        *v = x->integer;
    else if (x->type == REDIS_REPLY_STRING)
        *v = strtoll(x->str, NULL, 10);
    else if (x->type == REDIS_REPLY_NIL)
        *v = 0;
    else
        rc = -1;
    freeReplyObject(x);
    return rc;
}

/* The kinds part's section, the same two round trips for every kind: INCRBY
 * of the in-section gauge by the holder's weight (WRITER for the exclusive
 * kind, 1 for the others) and a GET of the counter; `work_us` asleep (work
 * off the CPU, as an I/O-bound reader's); then a SET of the counter + 1 (the
 * exclusive kind only) and the DECRBY. What INCRBY returns is who was inside
 * when this holder came in: a writer must find itself alone, a reader no
 * writer, and the number inside is at most the kind's limit. */
static int kinds_section(redisContext *r, bool writer, int work_us, struct report *h)
{
    long long w = writer ? WRITER : 1, in = 0, v = 0, ignored;
    redisAppendCommand(r, "INCRBY %s %lld", gauge_key, w);
    redisAppendCommand(r, "GET %s", counter_key);
    if (reply_int(r, &in) != 0 || reply_int(r, &v) != 0)
        return -1;
    long inside = (long)(in / WRITER + in % WRITER);
    h->max_inside = inside > h->max_inside ? inside : h->max_inside;
    h->overlaps += writer ? in != WRITER : in >= WRITER;
    struct timespec ts = {.tv_sec = work_us / 1000000, .tv_nsec = (work_us % 1000000) * 1000L};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
        ;
    if (writer)
        redisAppendCommand(r, "SET %s %lld", counter_key, v + 1);
    redisAppendCommand(r, "DECRBY %s %lld", gauge_key, w);
    if (writer) {
        redisReply *x = NULL;
        if (redisGetReply(r, (void **)&x) != REDIS_OK || !x || x->type != REDIS_REPLY_STATUS) {
            if (x)
                freeReplyObject(x);
            return -1;
        }
        freeReplyObject(x);
    }
    return reply_int(r, &ignored);
}

static void note(struct report *h, int err)
{
    if (h->errors++ == 0)
        h->first_error = err;
}

/* A paced writer (write_one_in > 0) waits until its next grant would be 1 in
 * write_one_in of all the grants so far, or the loop ends: true to go on. */
static bool pace(const struct contend_run *run, long writes, atomic_long *all, uint64_t end)
{
    struct timespec ts = {.tv_nsec = PACE_US * 1000L};
    while (atomic_load_explicit(all, memory_order_relaxed) < writes * run->write_one_in) {
        if (now_ns() >= end)
            return false;
        nanosleep(&ts, NULL);
    }
    return true;
}

/* Worker i of the run, in the forked process; it never returns: _exit()
 * skips the benchmark's own clean-up (atexit), which is the parent's. `all`
 * counts the grants of every worker (shared memory). */
_Noreturn static void worker(const struct contend_run *run, int i, const char *redis_sock,
                             atomic_long *all, int out, int go, pid_t parent)
{
    /* Die with the benchmark; and the benchmark's handlers are not ours. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    dlock_client *c = NULL;
    redisContext *r = NULL;
    if (dlock_client_open(&c, run->agent[run->w[i].agent].sock) == 0)
        r = redisConnectUnix(redis_sock);
    unsigned char ran = r && !r->err ? WORKER_RAN : 0;
    if (write_full(out, &ran, 1) != 0 || !ran)
        _exit(1);
    char b;
    ssize_t n;
    while ((n = read(go, &b, 1)) != 0) /* the parent closes it: go */
        if (n < 0 && errno != EINTR)
            _exit(1);
    struct report h = {0};
    struct lat waits = {0};
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = WAIT_MS};
    int kind = run->w[i].kind;
    dlock_lock_spec spec = {.kind = (uint32_t)kind,
                            .permits = kind == DLOCK_KIND_SEMAPHORE ? run->permits : 0};
    bool writer = kind == DLOCK_KIND_EXCLUSIVE;
    uint64_t start = now_ns(), end = start + (uint64_t)(run->seconds * 1e9);
    while (now_ns() < end) {
        if (writer && run->write_one_in > 0 && !pace(run, h.grants, all, end))
            break;
        dlock_lease *l;
        uint64_t t0 = now_ns();
        int rc = dlock_lease_acquire_spec(c, name, &o, &spec, &l);
        uint64_t t1 = now_ns();
        if (rc != 0) {
            note(&h, rc);
            if (rc == DLOCK_ETIMEDOUT)
                continue;
            break;
        }
        lat_push(&waits, t1 - t0);
        rc = run->work_us > 0 ? kinds_section(r, writer, run->work_us, &h) : critical_section(r);
        if (rc != 0) {
            note(&h, CONTEND_EREDIS);
            dlock_lease_release(l);
            break;
        }
        h.grants++;
        atomic_fetch_add_explicit(all, 1, memory_order_relaxed);
        rc = dlock_lease_release(l);
        if (rc != 0)
            note(&h, rc);
    }
    h.wall_ns = now_ns() - start;
    h.waits = waits.n;
    int rc = write_full(out, &h, sizeof h);
    if (rc == 0 && waits.n)
        rc = write_full(out, waits.v, waits.n * sizeof *waits.v);
    dlock_client_close(c);
    redisFree(r);
    _exit(rc == 0 ? 0 : 1);
}

/* ---- the parent ---- */

static pid_t pids[SIDE_MAX_WORKERS];
static int fds[SIDE_MAX_WORKERS];

static void stop_workers(int n, bool kill_them)
{
    for (int i = 0; i < n; i++) {
        if (pids[i] > 0 && kill_them)
            kill(pids[i], SIGKILL);
    }
    for (int i = 0; i < n; i++) {
        if (pids[i] > 0)
            waitpid(pids[i], NULL, 0);
        pids[i] = 0;
        side_track_worker(i, 0);
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

static long long redis_int(redisContext *r, const char *fmt, const char *key)
{
    redisReply *x = redisCommand(r, fmt, key);
    long long v = -1;
    if (x && x->type == REDIS_REPLY_STRING)
        v = strtoll(x->str, NULL, 10);
    else if (x && x->type == REDIS_REPLY_STATUS)
        v = 0;
    if (x)
        freeReplyObject(x);
    return v;
}

/* Reads worker i's report into r->w[i] and its waits into the lists of its
 * agent and of its kind: 0, or -1. */
static int collect(int i, struct contend_run *r, struct lat *host, struct lat *kind,
                   uint64_t deadline)
{
    struct report h;
    struct contend_worker *w = &r->w[i];
    struct lat mine = {0};
    int rc = -1;
    if (read_full(fds[i], &h, sizeof h, deadline) == 0 && lat_reserve(&mine, h.waits) == 0 &&
        (!h.waits || read_full(fds[i], mine.v, h.waits * sizeof *mine.v, deadline) == 0)) {
        mine.n = h.waits;
        rc = lat_append(&host[w->agent], &mine) == 0 &&
                     lat_append(&kind[w->kind >= 0 && w->kind < 3 ? w->kind : 0], &mine) == 0
                 ? 0
                 : -1;
    }
    lat_free(&mine);
    if (rc != 0)
        return -1;
    w->grants = h.grants;
    w->errors = h.errors;
    w->first_error = h.first_error;
    w->wall_s = ns_to_s(h.wall_ns);
    w->max_inside = h.max_inside;
    w->overlaps = h.overlaps;
    r->grants += h.grants;
    r->host_grants[w->agent] += h.grants;
    return 0;
}

/* Forks the workers (worker i on agent agent_of[i]), lets them go together,
 * collects their reports. The parent kills and reaps them on any failure. */
/* Samples of the run's agents and of Redis; *ok false when one could not be
 * read. */
static void contend_cpu(const struct env *e, const struct contend_run *r, struct proc_sample *a,
                        struct proc_sample *redis, bool *ok)
{
    *ok = proc_sample(e->redis.pid, redis) == 0;
    for (int k = 0; k < r->nagents; k++)
        *ok = proc_sample(r->agent[k].pid, &a[k]) == 0 && *ok;
}

static int run_workers(const struct env *e, struct contend_run *r, const int *agent_of)
{
    int n = r->nworkers, go[2] = {-1, -1}, rc = -1;
    struct lat host[SIDE_MAX] = {{0}}, kind[3] = {{0}};
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    /* The grants of all the workers, for a paced writer. */
    atomic_long *all =
        mmap(NULL, sizeof *all, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (all == MAP_FAILED) {
        fprintf(stderr, "dlock-bench: mmap: %s\n", strerror(errno));
        return -1;
    }
    atomic_init(all, 0);
    if (pipe2(go, O_CLOEXEC) != 0) {
        fprintf(stderr, "dlock-bench: pipe: %s\n", strerror(errno));
        munmap(all, sizeof *all);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    int started = 0;
    for (; started < n; started++) {
        int fd[2];
        if (pipe2(fd, O_CLOEXEC) != 0) {
            fprintf(stderr, "dlock-bench: pipe: %s\n", strerror(errno));
            goto out;
        }
        r->w[started].agent = agent_of[started];
        pid_t pid = fork();
        if (pid == 0) {
            close(go[1]);
            close(fd[0]);
            worker(r, started, e->redis_sock, all, fd[1], go[0], parent);
        }
        close(fd[1]);
        if (pid < 0) {
            fprintf(stderr, "dlock-bench: fork: %s\n", strerror(errno));
            close(fd[0]);
            goto out;
        }
        pids[started] = pid;
        side_track_worker(started, pid);
        fds[started] = fd[0];
    }
    uint64_t deadline = now_ns() + READY_MS * 1000000ull;
    for (int i = 0; i < n; i++) {
        unsigned char ran = 0;
        if (read_full(fds[i], &ran, 1, deadline) != 0 || ran != WORKER_RAN) {
            fprintf(stderr, "dlock-bench: worker %d did not connect to its agent and Redis\n", i);
            goto out;
        }
    }
    struct proc_sample m0, m1, a0[SIDE_MAX], a1[SIDE_MAX], r0, r1;
    bool sampled = machine_sample(&m0) == 0, cpu0, cpu1;
    contend_cpu(e, r, a0, &r0, &cpu0);
    close(go[1]); /* go */
    go[1] = -1;
    deadline = now_ns() + (uint64_t)(r->seconds * 1e9) + REPORT_MS * 1000000ull;
    double longest = 0;
    for (int i = 0; i < n; i++) {
        if (collect(i, r, host, kind, deadline) != 0) {
            fprintf(stderr, "dlock-bench: worker %d did not report\n", i);
            goto out;
        }
        longest = r->w[i].wall_s > longest ? r->w[i].wall_s : longest;
    }
    r->machine_cpu = sampled && machine_sample(&m1) == 0 ? proc_cpu_pct(&m0, &m1) : -1;
    contend_cpu(e, r, a1, &r1, &cpu1);
    double agents_s = 0;
    for (int k = 0; k < r->nagents; k++)
        agents_s += proc_cpu_s(&a0[k], &a1[k]);
    r->agents_us = cpu_us_per_op(cpu0 && cpu1 ? agents_s : -1, (double)r->grants);
    r->redis_us = cpu_us_per_op(cpu0 && cpu1 ? proc_cpu_s(&r0, &r1) : -1, (double)r->grants);
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (waitpid(pids[i], &st, 0) != pids[i]) {
            fprintf(stderr, "dlock-bench: waitpid: %s\n", strerror(errno));
            goto out;
        }
        pids[i] = 0;
        if (proc_exit_code(st) != 0) {
            fprintf(stderr, "dlock-bench: worker %d exited with %d\n", i, proc_exit_code(st));
            goto out;
        }
    }
    r->per_s = longest > 0 ? (double)r->grants / longest : 0;
    for (int k = 0; k < r->nagents; k++)
        lat_summarise(&host[k], 0, &r->host_wait[k]);
    for (int k = 0; k < 3; k++)
        lat_summarise(&kind[k], 0, &r->kind_wait[k]);
    rc = 0;
out:
    stop_workers(started, rc != 0);
    if (go[1] >= 0)
        close(go[1]);
    close(go[0]);
    for (int k = 0; k < SIDE_MAX; k++)
        lat_free(&host[k]);
    for (int k = 0; k < 3; k++)
        lat_free(&kind[k]);
    munmap(all, sizeof *all);
    return rc;
}

/* Starts the run's agents, runs its workers, checks the counter, stops. */
int contend(struct env *e, struct contend_run *r, const int *agent_of)
{
    r->counter = -1;
    r->key_left = -1;
    redisContext *c = redisConnectUnix(e->redis_sock);
    if (!c || c->err) {
        fprintf(stderr, "dlock-bench: cannot open a hiredis connection\n");
        redisFree(c);
        return -1;
    }
    int rc = redis_int(c, "SET %s 0", counter_key) == 0 && redis_int(c, "SET %s 0", gauge_key) == 0
                 ? 0
                 : -1;
    if (rc != 0)
        fprintf(stderr, "dlock-bench: cannot reset %s and %s\n", counter_key, gauge_key);
    if (rc == 0)
        rc = side_start(e, r->agent, r->nagents);
    if (rc == 0)
        rc = run_workers(e, r, agent_of);
    side_stop(e, r->agent, r->nagents);
    if (rc == 0) {
        r->counter = redis_int(c, "GET %s", counter_key);
        redisReply *x = redisCommand(c, "EXISTS %s%s", BENCH_PREFIX, name);
        if (x && x->type == REDIS_REPLY_INTEGER)
            r->key_left = x->integer;
        if (x)
            freeReplyObject(x);
    }
    redisFree(c);
    return rc;
}

int run_cohort(struct env *e, int procs, double seconds, struct cohort_result *out)
{
    int agent_of[SIDE_MAX_WORKERS] = {0};
    memset(out, 0, sizeof *out);
    struct contend_run *runs[2] = {&out->on, &out->off};
    static const char *tags[2] = {"cohort-on", "cohort-off"};
    static const char *settings[2] = {"cohort_handoffs = 32\n", "cohort_handoffs = 0\n"};
    for (int k = 0; k < 2; k++) {
        struct contend_run *r = runs[k];
        r->nworkers = procs;
        r->nagents = 1;
        r->seconds = seconds;
        r->agent[0].tag = tags[k];
        r->agent[0].settings = settings[k];
        fprintf(stderr, "dlock-bench: cohort: %d processes on one agent, cohort handoff %s\n",
                procs, k == 0 ? "on" : "off");
        if (contend(e, r, agent_of) != 0)
            return -1;
    }
    return 0;
}

int run_hosts(struct env *e, int procs, double seconds, struct contend_run *out)
{
    int agent_of[SIDE_MAX_WORKERS];
    static char settings[64];
    snprintf(settings, sizeof settings, "cohort_handoffs = 32\ncohort_ms = %d\n",
             CONTEND_COHORT_MS);
    memset(out, 0, sizeof *out);
    out->nworkers = 2 * procs;
    out->nagents = 2;
    out->seconds = seconds;
    out->agent[0] = (struct side_agent){.tag = "hosts-a", .settings = settings};
    out->agent[1] = (struct side_agent){.tag = "hosts-b", .settings = settings};
    for (int i = 0; i < out->nworkers; i++)
        agent_of[i] = i / procs;
    return contend(e, out, agent_of);
}
