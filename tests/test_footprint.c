/* SPDX-License-Identifier: BSD-3-Clause */
/* test_footprint.c -- what dlock leaves on Redis (docs/fencing.md): lock names
 * by the hundred thousand, each taken and given back once through the library,
 * leave no key that bears any of the names, and no more keys than the one
 * fencing high-water mark per hash slot (16,384), in single-node and quorum
 * mode. */
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define KEY_SLOTS   16384 /* the bound docs/fencing.md gives */
#define WINDOW      256   /* acquires in flight per client */
#define MAX_WORKERS 4

/* One client in a thread of its own, taking and releasing names
 * "PREFIX-i" for i in [first, first + count). Results for the test's thread,
 * which alone may assert. */
struct worker {
    pthread_t tid;
    const char *sock;
    const char *prefix;
    uint32_t ttl_ms;
    int first, count;
    int granted, released;
    int err;        /* the first error seen, 0 if none */
    char what[160]; /* and what it came from */
    /* the batch in flight */
    int done;
    dlock_lease *lease[WINDOW];
};

static void fail(struct worker *w, int err, const char *what, int i)
{
    if (!w->err) {
        w->err = err ? err : DLOCK_EPROTO;
        snprintf(w->what, sizeof w->what, "%s %s-%d: %s", what, w->prefix, i, dlock_strerror(err));
    }
}

struct slot {
    struct worker *w;
    int k, i;
};

static void on_acquired(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct slot *s = arg;
    s->w->done++;
    if (status != 0 || dlock_lease_fence(lease) == 0)
        fail(s->w, status, "acquire", s->i);
    else
        s->w->lease[s->k] = lease;
}

/* Sends the batch's acquires, waits for every answer, releases the leases. */
static int batch(struct worker *w, dlock_client *c, int from, int n)
{
    struct slot slots[WINDOW];
    dlock_acquire_options opts = {.ttl_ms = w->ttl_ms, .wait_ms = 0};
    w->done = 0;
    memset(w->lease, 0, sizeof w->lease);
    for (int k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s-%d", w->prefix, from + k);
        slots[k] = (struct slot){.w = w, .k = k, .i = from + k};
        int rc = dlock_lease_acquire_async(c, name, &opts, on_acquired, &slots[k]);
        if (rc != 0) {
            fail(w, rc, "acquire_async", from + k);
            return -1;
        }
    }
    while (w->done < n) {
        struct pollfd p = {.fd = dlock_client_fd(c), .events = POLLIN};
        /* A dead agent closes the socket: no wait without end. */
        if (poll(&p, 1, -1) < 0 || dlock_client_dispatch(c) != 0) {
            fail(w, DLOCK_EDISCONNECTED, "dispatch", from);
            return -1;
        }
    }
    for (int k = 0; k < n; k++) {
        if (!w->lease[k])
            continue;
        w->granted++;
        int rc = dlock_lease_release(w->lease[k]);
        if (rc != 0)
            fail(w, rc, "release", from + k);
        else
            w->released++;
    }
    return w->err ? -1 : 0;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, w->sock);
    if (rc != 0) {
        fail(w, rc, "open for", w->first);
        return NULL;
    }
    for (int i = w->first; i < w->first + w->count; i += WINDOW) {
        int n = w->first + w->count - i < WINDOW ? w->first + w->count - i : WINDOW;
        if (batch(w, c, i, n) != 0)
            break;
    }
    dlock_client_close(c);
    return NULL;
}

/* Takes (with a TTL of ttl_ms) and releases names "prefix-0".."prefix-(total-1)"
 * through nworkers clients of agent 0, each in its own thread; every grant
 * and release must succeed. */
static void cycle_names(const char *prefix, int total, int nworkers, uint32_t ttl_ms)
{
    struct worker w[MAX_WORKERS];
    int64_t t0 = h_now_ms();
    for (int i = 0; i < nworkers; i++) {
        w[i] = (struct worker){.sock = H.agent[0].sock, .prefix = prefix, .ttl_ms = ttl_ms};
        w[i].first = total / nworkers * i;
        w[i].count = i == nworkers - 1 ? total - w[i].first : total / nworkers;
        cr_assert_eq(pthread_create(&w[i].tid, NULL, work, &w[i]), 0);
    }
    int granted = 0, released = 0;
    for (int i = 0; i < nworkers; i++) {
        cr_assert_eq(pthread_join(w[i].tid, NULL), 0);
        cr_assert_eq(w[i].err, 0, "worker %d: %s", i, w[i].what);
        granted += w[i].granted;
        released += w[i].released;
    }
    cr_assert_eq(granted, total, "%d of %d names granted", granted, total);
    cr_assert_eq(released, total, "%d of %d leases released", released, total);
    cr_log_info("%d names taken and released in %lld ms", total, (long long)(h_now_ms() - t0));
}

/* The keys of node i matching pattern, counted with SCAN. */
static long long scan_count(int i, const char *pattern)
{
    long long n = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = h_node_cmd(i, "SCAN %s MATCH %s COUNT 10000", cursor, pattern);
        cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        n += (long long)r->element[1]->elements;
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

static long long dbsize(int i)
{
    redisReply *r = h_node_cmd(i, "DBSIZE");
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* After the releases: no key bears a used name ("prefix-..."), and what is
 * left on node i are fencing marks, at most one per slot. */
static void check_node(int i, const char *prefix)
{
    char lock_keys[80], any[80];
    snprintf(lock_keys, sizeof lock_keys, "dlock:%s-*", prefix);
    snprintf(any, sizeof any, "*%s-*", prefix);
    /* The agent answers a release before Redis has run its DEL. */
    H_WAIT_UNTIL(10000, scan_count(i, lock_keys) == 0);
    long long left = dbsize(i), named = scan_count(i, any);
    long long marks = scan_count(i, "dlock:{*} fence-hw");
    cr_log_info("node %d: DBSIZE %lld (%lld fencing marks), %lld keys bear a used name", i, left,
                marks, named);
    cr_assert_eq(named, 0, "node %d: %lld keys bear a used name", i, named);
    cr_assert_leq(left, KEY_SLOTS, "node %d: %lld keys left", i, left);
    cr_assert_eq(marks, left, "node %d: %lld keys left, %lld of them fencing marks", i, left,
                 marks);
}

ITEST(footprint, hundred_thousand_names_leave_at_most_one_key_per_slot)
{
    h_start("log_level = warn");
    cycle_names("fp", 100000, MAX_WORKERS, 30000);
    check_node(0, "fp");
    /* The names are free and their tokens still increase. */
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "fp-7", 5000);
    uint64_t f = dlock_lease_fence(l);
    cr_assert_eq(dlock_lease_release(l), 0);
    dlock_lease *l2 = NULL;
    cr_assert_eq(h_acquire(a, "fp-7", 5000, 1000, &l2), 0);
    cr_assert_gt(dlock_lease_fence(l2), f);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(footprint, quorum_names_leave_no_key_on_any_node)
{
    /* Hundreds of acquires in flight: on a busy machine the nodes' answers
     * can come long after an idle machine's milliseconds. This test is about
     * what is left on the nodes, not about slow nodes, so the agent waits
     * for them (node_timeout_ms) and the leases outlast the wait. */
    h_quorum_start(3, 1,
                   "log_level = warn\nmax_ttl_ms = 5000\ndefault_ttl_ms = 5000\nmin_ttl_ms = 3000",
                   "node_timeout_ms = 2500");
    cycle_names("qfp", 5000, 2, 5000);
    for (int n = 0; n < 3; n++)
        check_node(n, "qfp");
}
