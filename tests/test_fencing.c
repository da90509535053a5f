/* test_fencing.c -- fencing tokens (docs/fencing.md): strictly increasing per
 * lock name over many cycles, across two agents on one Redis, across an agent
 * restart, after the counter expired or was wiped, equal to the counter kept
 * in Redis, and handed to `dlockctl run` as DLOCK_FENCE. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The counter key of lock NAME under the default prefix. */
static const char *fence_key(const char *name)
{
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "dlock:{dlock:%s} fence", name);
    return b;
}

/* A decimal u64 from Redis or a file; fails the test on anything else. */
static uint64_t parse_u64(const char *s, const char *what)
{
    cr_assert_not_null(s, "%s: missing", what);
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    cr_assert(errno == 0 && end != s && (*end == '\0' || *end == '\n'),
              "%s: '%s' is not a decimal number", what, s);
    cr_assert(s[0] >= '0' && s[0] <= '9', "%s: '%s' is not a decimal number", what, s);
    return (uint64_t)v;
}

static uint64_t counter_value(const char *name)
{
    return parse_u64(h_redis_get(fence_key(name)), "fence counter");
}

/* The Redis server's clock in microseconds since the epoch. */
static uint64_t redis_time_us(void)
{
    redisReply *r = h_redis_cmd("TIME");
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    uint64_t us = strtoull(r->element[0]->str, NULL, 10) * 1000000ull +
                  strtoull(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    return us;
}

/* Acquires name (waiting up to a second, as the previous holder's delete may
 * still be on its way on another agent) and returns the fence; the lease in
 * *out. */
static uint64_t take(struct h_cl *cl, const char *name, uint32_t ttl_ms, dlock_lease **out)
{
    dlock_lease *l = NULL;
    int rc = h_acquire(cl, name, ttl_ms, 1000, &l);
    cr_assert_eq(rc, 0, "acquire %s: %s (%d)", name, dlock_strerror(rc), rc);
    uint64_t f = dlock_lease_fence(l);
    cr_assert_gt(f, 0, "a grant carries fence 0");
    if (out)
        *out = l;
    else
        cr_assert_eq(dlock_lease_release(l), 0);
    return f;
}

ITEST(fencing, strictly_increasing_over_1000_cycles)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    uint64_t prev = 0;
    for (int i = 0; i < 1000; i++) {
        dlock_lease *l = NULL;
        uint64_t f = take(a, "cycle", 5000, &l);
        cr_assert_gt(f, prev, "cycle %d: fence %" PRIu64 " after %" PRIu64, i, f, prev);
        if (i % 100 == 0)
            cr_assert_eq(counter_value("cycle"), f, "cycle %d: counter differs from the fence", i);
        cr_assert_eq(dlock_lease_release(l), 0);
        prev = f;
    }
}

ITEST(fencing, strictly_increasing_across_two_agents)
{
    h_start_two(NULL);
    struct h_cl *cl[2] = {h_client_at(0), h_client_at(1)};
    uint64_t prev = 0;
    for (int i = 0; i < 200; i++) {
        uint64_t f = take(cl[i % 2], "shared", 5000, NULL);
        cr_assert_gt(f, prev, "grant %d (agent %d): fence %" PRIu64 " after %" PRIu64, i, i % 2, f,
                     prev);
        prev = f;
    }
    /* Holding on one agent while the other waits: the waiter's fence is
     * higher too. */
    dlock_lease *l0 = NULL;
    uint64_t f0 = take(cl[0], "shared", 5000, &l0);
    cr_assert_gt(f0, prev);
    struct h_acq w;
    h_acquire_async(cl[1], "shared", 5000, 3000, &w);
    H_HOLDS_FOR(100, !w.done);
    cr_assert_eq(dlock_lease_release(l0), 0);
    H_WAIT_UNTIL(2000, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_gt(dlock_lease_fence(w.lease), f0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(fencing, greater_after_agent_restart)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    uint64_t f1 = take(a, "restart", 5000, NULL);
    /* Held at SIGTERM: the agent gives it up on the way out. */
    dlock_lease *l = NULL;
    uint64_t f2 = take(a, "restart", 5000, &l);
    cr_assert_gt(f2, f1);
    h_client_close(a);
    cr_assert_eq(h_agent_stop(0), 0);
    H_KEY_GONE(h_key("restart"));
    h_agent_start_n(0);
    a = h_client();
    uint64_t f3 = take(a, "restart", 300, &l);
    cr_assert_gt(f3, f2, "after restart: %" PRIu64 " after %" PRIu64, f3, f2);

    /* Killed while holding: the key runs out by its TTL, and the next agent
     * still hands out a higher token. */
    h_agent_kill(0);
    h_client_close(a);
    cr_assert_eq(h_redis_exists(h_key("restart")), 1, "the key went with the killed agent");
    h_agent_start_n(0);
    a = h_client();
    H_WAIT_UNTIL(2000, !h_redis_exists(h_key("restart")));
    uint64_t f4 = take(a, "restart", 5000, NULL);
    cr_assert_gt(f4, f3, "after kill -9: %" PRIu64 " after %" PRIu64, f4, f3);
}

ITEST(fencing, counter_key_holds_the_last_fence_with_a_ttl)
{
    h_start("fence_retention_ms = 200");
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    uint64_t f1 = take(a, "ctr", 100, &l);
    cr_assert_eq(h_redis_exists(fence_key("ctr")), 1, "no counter key '%s' after a grant",
                 fence_key("ctr"));
    cr_assert_eq(counter_value("ctr"), f1, "the counter differs from the granted fence");
    long long pttl = h_redis_pttl(fence_key("ctr"));
    cr_assert(pttl > 200 && pttl <= 200 + 100, "counter PTTL %lld, expected (200, 300]", pttl);
    /* The lock key, its counter and its holder record, nothing else. */
    cr_assert_eq(h_redis_count_keys("dlock:*ctr*"), 3);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("ctr"));
}

ITEST(fencing, greater_after_the_counter_expired)
{
    h_start("fence_retention_ms = 200");
    struct h_cl *a = h_client();
    uint64_t f1 = take(a, "idle", 100, NULL);
    cr_assert_eq(h_redis_exists(fence_key("idle")), 1);
    H_WAIT_UNTIL(3000, !h_redis_exists(fence_key("idle")));
    /* Without a counter the token is the server's clock in microseconds. */
    uint64_t before = redis_time_us();
    dlock_lease *l = NULL;
    uint64_t f2 = take(a, "idle", 100, &l);
    uint64_t after = redis_time_us();
    cr_assert_gt(f2, f1, "after expiry of the counter: %" PRIu64 " after %" PRIu64, f2, f1);
    cr_assert(f2 >= before && f2 <= after,
              "fence %" PRIu64 " is not the server clock (%" PRIu64 "..%" PRIu64 " us)", f2, before,
              after);
    cr_assert_eq(counter_value("idle"), f2);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(fencing, greater_after_redis_lost_its_data)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    uint64_t f1 = take(a, "flush", 5000, NULL);
    H_KEY_GONE(h_key("flush"));
    freeReplyObject(h_redis_cmd("FLUSHALL"));
    cr_assert_eq(h_redis_exists(fence_key("flush")), 0);
    uint64_t f2 = take(a, "flush", 5000, NULL);
    cr_assert_gt(f2, f1, "after FLUSHALL: %" PRIu64 " after %" PRIu64, f2, f1);

    /* Lost while held: the holder is told, the next grant is still higher. */
    dlock_lease *l = NULL;
    uint64_t f3 = take(a, "flush", 600, &l);
    cr_assert_gt(f3, f2);
    freeReplyObject(h_redis_cmd("FLUSHALL"));
    H_WAIT_UNTIL(2000, h_events(a, l, DLOCK_STATE_LOST) > 0);
    uint64_t f4 = take(a, "flush", 600, NULL);
    cr_assert_gt(f4, f3, "after FLUSHALL under a holder: %" PRIu64 " after %" PRIu64, f4, f3);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

ITEST(fencing, counter_ahead_of_the_clock_still_grows)
{
    /* A counter beyond the server's clock (say, tokens taken on a server
     * whose clock ran ahead): the next token is one more, not the clock. */
    h_start(NULL);
    struct h_cl *a = h_client();
    uint64_t ahead = redis_time_us() + 3600ull * 1000000ull;
    char v[32];
    snprintf(v, sizeof v, "%" PRIu64, ahead);
    h_redis_set_px(fence_key("ahead"), v, 60000);
    uint64_t f1 = take(a, "ahead", 5000, NULL);
    cr_assert_eq(f1, ahead + 1, "fence %" PRIu64 ", expected %" PRIu64, f1, ahead + 1);
    uint64_t f2 = take(a, "ahead", 5000, NULL);
    cr_assert_eq(f2, ahead + 2);
}

ITEST(fencing, names_have_unrelated_counters)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *x = NULL, *y = NULL;
    uint64_t fx = take(a, "x", 5000, &x);
    uint64_t fy = take(a, "y", 5000, &y);
    cr_assert_eq(counter_value("x"), fx);
    cr_assert_eq(counter_value("y"), fy);
    cr_assert_eq(dlock_lease_release(x), 0);
    cr_assert_eq(dlock_lease_release(y), 0);
}

ITEST(fencing, counter_key_with_a_hash_tag_prefix)
{
    /* docs/fencing.md: with a prefix that has a hash tag of its own, the
     * counter is the lock key followed by " fence". */
    h_start("prefix = {locks}:");
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    uint64_t f = take(a, "tagged", 5000, &l);
    cr_assert_eq(h_redis_exists("{locks}:tagged"), 1);
    char *v = h_redis_get("{locks}:tagged fence");
    cr_assert_not_null(v, "no counter '{locks}:tagged fence'");
    cr_assert_eq(parse_u64(v, "counter"), f);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(fencing, dlockctl_run_passes_the_fence)
{
    h_start(NULL);
    char script[512];
    snprintf(script, sizeof script, "echo \"$DLOCK_FENCE\" > %s", h_path("fence"));
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "job", "--", "sh", "-c", script, NULL);
    cr_assert_eq(st, 0, "dlockctl exit status %d", st);
    const char *s = h_read_file(h_path("fence"));
    uint64_t f = parse_u64(s, "DLOCK_FENCE");
    cr_assert_gt(f, 0);
    cr_assert_eq(counter_value("job"), f, "DLOCK_FENCE is not the fence of the grant");
    struct h_cl *a = h_client();
    uint64_t next = take(a, "job", 5000, NULL);
    cr_assert_gt(next, f);
}
