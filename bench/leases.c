/* SPDX-License-Identifier: BSD-3-Clause */
/* leases.c -- many leases held at once: acquire them through a few clients
 * with a window of asynchronous requests in flight, then watch the agent's
 * CPU and memory over a window that covers its renewals, and check that no
 * lease was lost and that Redis still has every key. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dlock.h"

#define HOLDERS       4    /* clients the leases are spread over */
#define INFLIGHT      256  /* asynchronous acquires in flight per client */
#define ACQUIRE_LIMIT 300  /* seconds before acquiring counts as stuck */
#define RELEASE_LIMIT 60   /* seconds for Redis to empty after the close */
#define PTTL_SAMPLES  1000 /* keys whose PTTL is checked at the end */

/* One client and the leases it holds. */
struct holder {
    int index;
    dlock_client *c;
    dlock_lease **leases;
    long want, issued, inflight, held;
    long errors;
    int first_error;
    long lost, jeopardy, other;
};

static void lease_name(char *buf, size_t len, int holder, long i)
{
    snprintf(buf, len, "bench-lease-%d-%07ld", holder, i);
}

static void on_event(dlock_client *c, dlock_lease *l, dlock_state state, int reason, void *arg)
{
    struct holder *h = arg;
    if (state == DLOCK_STATE_LOST)
        h->lost++;
    else if (state == DLOCK_STATE_JEOPARDY)
        h->jeopardy++;
    else
        h->other++;
}

static void on_acquired(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct holder *h = arg;
    h->inflight--;
    if (status == 0) {
        h->leases[h->held++] = lease;
    } else if (h->errors++ == 0) {
        h->first_error = status;
    }
}

static int holders_open(struct env *e, struct holder *hs, int n, long leases)
{
    for (int i = 0; i < n; i++) {
        struct holder *h = &hs[i];
        h->index = i;
        h->want = leases / n + (i < leases % n);
        h->leases = calloc((size_t)h->want + 1, sizeof *h->leases);
        int rc = h->leases ? dlock_client_open(&h->c, e->agent_sock) : DLOCK_ENOMEM;
        if (rc != 0) {
            fprintf(stderr, "dlock-bench: dlock_client_open: %s\n", dlock_strerror(rc));
            return -1;
        }
        dlock_client_set_event_cb(h->c, on_event, h);
    }
    return 0;
}

/* Closing a client makes the agent release all its leases. */
static void holders_close(struct holder *hs, int n)
{
    for (int i = 0; i < n; i++) {
        dlock_client_close(hs[i].c);
        hs[i].c = NULL;
        free(hs[i].leases);
        hs[i].leases = NULL;
    }
}

/* Tops up h's window of acquires in flight. */
static void holder_fill(struct holder *h)
{
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    char name[64];
    while (h->inflight < INFLIGHT && h->issued < h->want) {
        lease_name(name, sizeof name, h->index, h->issued++);
        int rc = dlock_lease_acquire_async(h->c, name, &o, on_acquired, h);
        if (rc == 0)
            h->inflight++;
        else if (h->errors++ == 0)
            h->first_error = rc;
    }
}

/* Waits up to ms for the agent's frames and dispatches them. -1 when a
 * connection is gone. */
static int holders_dispatch(struct holder *hs, int n, int ms)
{
    struct pollfd pfd[HOLDERS];
    for (int i = 0; i < n; i++)
        pfd[i] = (struct pollfd){.fd = dlock_client_fd(hs[i].c), .events = POLLIN};
    if (poll(pfd, (nfds_t)n, ms) <= 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (pfd[i].revents && dlock_client_dispatch(hs[i].c) != 0) {
            fprintf(stderr, "dlock-bench: client %d lost its agent connection\n", i);
            return -1;
        }
    }
    return 0;
}

static bool holders_busy(const struct holder *hs, int n)
{
    for (int i = 0; i < n; i++)
        if (hs[i].issued < hs[i].want || hs[i].inflight > 0)
            return true;
    return false;
}

static int acquire_all(struct holder *hs, int n)
{
    uint64_t limit = now_ns() + ACQUIRE_LIMIT * 1000000000ull;
    while (holders_busy(hs, n)) {
        for (int i = 0; i < n; i++)
            holder_fill(&hs[i]);
        if (holders_dispatch(hs, n, 1000) != 0)
            return -1;
        if (now_ns() > limit) {
            fprintf(stderr, "dlock-bench: acquiring took over %d s; giving up\n", ACQUIRE_LIMIT);
            return -1;
        }
    }
    return 0;
}

/* The window: dispatch events while the agent renews, and track its RSS. */
static int watch(struct env *e, struct holder *hs, int n, double seconds, long *peak_kb)
{
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9), next_sample = 0;
    for (uint64_t t; (t = now_ns()) < end;) {
        const char *who;
        if (env_check(e, &who) != 0) {
            fprintf(stderr, "dlock-bench: %s died during the window\n", who);
            return -1;
        }
        if (t >= next_sample) {
            struct proc_sample s;
            if (proc_sample(e->agent_pid, &s) == 0 && s.rss_kb > *peak_kb)
                *peak_kb = s.rss_kb;
            next_sample = t + 500000000ull;
        }
        int ms = (int)((end - t) / 1000000ull) + 1;
        if (holders_dispatch(hs, n, ms < 100 ? ms : 100) != 0)
            return -1;
    }
    return 0;
}

/* Smallest PTTL over a sample of the held keys: renewals keep it above
 * TTL - TTL/3 (less a little) however long the leases are held. */
static long long min_pttl(struct plain *p, const struct holder *hs, int n)
{
    long long min = -1;
    char name[64];
    for (int i = 0; i < n; i++) {
        long step = hs[i].held / (PTTL_SAMPLES / n) + 1;
        for (long k = 0; k < hs[i].held; k += step) {
            lease_name(name, sizeof name, hs[i].index, k);
            long long v = redis_pttl(p, name);
            if (min < 0 || v < min)
                min = v;
        }
    }
    return min;
}

#define LEASE_KEYS BENCH_PREFIX "bench-lease-*"

/* Closes the clients and times how long Redis takes to lose every lease key
 * (the fencing counters stay, by design). KEYS is far too slow to poll, so
 * the lease keys are counted once and the cheap DBSIZE watched fall by as
 * many. */
static double release_all(struct plain *p, struct holder *hs, int n, long long lease_keys)
{
    long long rest = redis_dbsize(p) - lease_keys;
    uint64_t t0 = now_ns(), limit = t0 + RELEASE_LIMIT * 1000000000ull;
    holders_close(hs, n);
    while (redis_dbsize(p) > rest) {
        if (now_ns() > limit)
            return -1;
        sleep_ms(1);
    }
    return ns_to_s(now_ns() - t0);
}

static void sum_holders(const struct holder *hs, int n, struct lease_result *out)
{
    for (int i = 0; i < n; i++) {
        out->held += hs[i].held;
        if (hs[i].errors && out->acq_errors == 0)
            out->first_error = hs[i].first_error;
        out->acq_errors += hs[i].errors;
        out->lost_events += hs[i].lost;
        out->jeopardy_events += hs[i].jeopardy;
        out->other_events += hs[i].other;
    }
}

/* Acquisition, then the window; the samples bracket each part. */
static int measure(struct env *e, struct plain *p, struct holder *hs, int n, double window_s,
                   struct lease_result *out)
{
    struct proc_sample idle, acquired, a0, a1, r0, r1, m0, m1;
    if (proc_sample(e->agent_pid, &idle) != 0)
        return -1;
    out->rss_idle_kb = idle.rss_kb;
    if (acquire_all(hs, n) != 0)
        return -1;
    proc_sample(e->agent_pid, &acquired);
    out->acq_s = ns_to_s(acquired.t_ns - idle.t_ns);
    out->acq_cpu_agent = proc_cpu_pct(&idle, &acquired);
    long long calls0 = redis_evalsha_calls(p);
    proc_sample(e->agent_pid, &a0);
    proc_sample(e->redis.pid, &r0);
    machine_sample(&m0);
    out->rss_peak_kb = a0.rss_kb;
    if (watch(e, hs, n, window_s, &out->rss_peak_kb) != 0)
        return -1;
    proc_sample(e->agent_pid, &a1);
    proc_sample(e->redis.pid, &r1);
    machine_sample(&m1);
    out->renew_calls = redis_evalsha_calls(p) - calls0;
    out->window_s = ns_to_s(a1.t_ns - a0.t_ns);
    out->cpu_agent = proc_cpu_pct(&a0, &a1);
    out->cpu_redis = proc_cpu_pct(&r0, &r1);
    /* The bench itself only sleeps in poll() here: count it with the others. */
    double others = proc_cpu_pct(&m0, &m1) - out->cpu_agent - out->cpu_redis;
    out->cpu_others = others > 0 ? others : 0;
    out->rss_held_kb = a1.rss_kb;
    if (a1.rss_kb > out->rss_peak_kb)
        out->rss_peak_kb = a1.rss_kb;
    sum_holders(hs, n, out); /* events since the first grant, window included */
    out->keys_at_end = redis_count_keys(p, LEASE_KEYS);
    out->min_pttl_ms = min_pttl(p, hs, n);
    return 0;
}

int run_leases(struct env *e, long leases, double window_s, struct lease_result *out)
{
    memset(out, 0, sizeof *out);
    out->wanted = leases;
    out->release_s = -1;
    int n = leases < HOLDERS ? (int)leases : HOLDERS;
    out->clients = n;
    struct holder hs[HOLDERS] = {0};
    struct plain *p = plain_open(e->redis_sock);
    int rc = -1;
    if (p && holders_open(e, hs, n, leases) == 0 && measure(e, p, hs, n, window_s, out) == 0) {
        out->release_s = release_all(p, hs, n, out->keys_at_end);
        rc = 0;
    }
    holders_close(hs, n);
    plain_close(p);
    return rc;
}
