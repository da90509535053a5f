/* SPDX-License-Identifier: BSD-3-Clause */
/* test_fencing.c -- fencing tokens (docs/fencing.md): strictly increasing per
 * lock name over many cycles, across two agents on one Redis, across an agent
 * restart, after the high-water mark was deleted or wiped, equal to the mark
 * kept without expiry for the lock key's hash slot and shared by the names of
 * the slot, carrying on a counter of the earlier per-name scheme, and handed
 * to `dlockctl run` as DLOCK_FENCE. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "keys.h"

/* The high-water mark key of the hash slot of lock NAME under prefix. */
static const char *hw_key_in(const char *prefix, const char *name)
{
    static struct slot_tags *tags;
    static char bufs[4][512];
    static int next;
    if (!tags) {
        tags = malloc(sizeof *tags);
        cr_assert_not_null(tags);
        slot_tags_build(tags);
    }
    char key[256];
    int n = snprintf(key, sizeof key, "%s%s", prefix, name);
    char *b = bufs[next++ % 4];
    fence_hw_key(tags, key, (size_t)n, strlen(prefix), b);
    return b;
}

/* The same under the default prefix. */
static const char *hw_key(const char *name)
{
    return hw_key_in("dlock:", name);
}

/* Writes into out a name "base-N" whose lock key lies in the slot of
 * "base", so that the two share a high-water mark. */
static void slot_mate(const char *base, char *out, size_t cap)
{
    char want[512];
    snprintf(want, sizeof want, "%s", hw_key(base));
    for (unsigned i = 0;; i++) {
        snprintf(out, cap, "%s-%u", base, i);
        if (strcmp(hw_key(out), want) == 0)
            return;
    }
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

/* Without cohort handoff, a grant reserves no tokens after its own: the mark
 * holds the last token granted (block_of_the_cohort_is_reserved tests the
 * block). */
#define NO_BLOCK "cohort_handoffs = 0"

static uint64_t mark_value(const char *name)
{
    return parse_u64(h_redis_get(hw_key(name)), "fencing high-water mark");
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
    h_start(NO_BLOCK);
    struct h_cl *a = h_client();
    uint64_t prev = 0;
    for (int i = 0; i < 1000; i++) {
        dlock_lease *l = NULL;
        uint64_t f = take(a, "cycle", 5000, &l);
        cr_assert_gt(f, prev, "cycle %d: fence %" PRIu64 " after %" PRIu64, i, f, prev);
        if (i % 100 == 0)
            cr_assert_eq(mark_value("cycle"), f, "cycle %d: the mark differs from the fence", i);
        cr_assert_eq(dlock_lease_release(l), 0);
        prev = f;
    }
}

ITEST(fencing, strictly_increasing_across_two_agents)
{
    h_start_two(NO_BLOCK);
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
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_gt(dlock_lease_fence(w.lease), f0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(fencing, greater_after_agent_restart)
{
    h_start(NO_BLOCK);
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
    uint64_t f3 = take(a, "restart", 3000, &l); /* still there when looked at after the kill */
    cr_assert_gt(f3, f2, "after restart: %" PRIu64 " after %" PRIu64, f3, f2);

    /* Killed while holding: the key runs out by its TTL, and the next agent
     * still hands out a higher token. */
    h_agent_kill(0);
    h_client_close(a);
    cr_assert_eq(h_redis_exists(h_key("restart")), 1, "the key went with the killed agent");
    h_agent_start_n(0);
    a = h_client();
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("restart")));
    uint64_t f4 = take(a, "restart", 5000, NULL);
    cr_assert_gt(f4, f3, "after kill -9: %" PRIu64 " after %" PRIu64, f4, f3);
}

ITEST(fencing, mark_holds_the_last_fence_without_expiry_and_no_name_key_stays)
{
    /* The retention of earlier versions is still accepted, and ignored. */
    h_start(NO_BLOCK "\nfence_retention_ms = 200");
    const char *log = h_read_file(H.agent[0].log);
    cr_assert(log && strstr(log, "fence_retention_ms is obsolete and ignored"),
              "no warning about fence_retention_ms in the agent's log");
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    uint64_t f1 = take(a, "ctr", 5000, &l);
    cr_assert_eq(h_redis_exists(hw_key("ctr")), 1, "no high-water mark '%s' after a grant",
                 hw_key("ctr"));
    cr_assert_eq(mark_value("ctr"), f1, "the mark differs from the granted fence");
    cr_assert_eq(h_redis_pttl(hw_key("ctr")), -1, "the mark has an expiry");
    /* The lock key, which holds the holder record; nothing else bears the
     * name. */
    cr_assert_eq(h_redis_count_keys("*ctr*"), 1);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("ctr"));
    cr_assert_eq(h_redis_count_keys("*ctr*"), 0, "a key of the name outlived its release");
    cr_assert_eq(mark_value("ctr"), f1);
}

ITEST(fencing, greater_after_the_mark_was_deleted)
{
    h_start(NO_BLOCK);
    struct h_cl *a = h_client();
    uint64_t f1 = take(a, "idle", 5000, NULL);
    cr_assert_eq(h_redis_exists(hw_key("idle")), 1);
    h_redis_del(hw_key("idle"));
    /* Without a mark the token is the server's clock in microseconds. */
    uint64_t before = redis_time_us();
    dlock_lease *l = NULL;
    uint64_t f2 = take(a, "idle", 5000, &l);
    uint64_t after = redis_time_us();
    cr_assert_gt(f2, f1, "after the mark was deleted: %" PRIu64 " after %" PRIu64, f2, f1);
    cr_assert(f2 >= before && f2 <= after,
              "fence %" PRIu64 " is not the server clock (%" PRIu64 "..%" PRIu64 " us)", f2, before,
              after);
    cr_assert_eq(mark_value("idle"), f2);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(fencing, greater_after_redis_lost_its_data)
{
    h_start(NO_BLOCK);
    struct h_cl *a = h_client();
    uint64_t f1 = take(a, "flush", 5000, NULL);
    H_KEY_GONE(h_key("flush"));
    freeReplyObject(h_redis_cmd("FLUSHALL"));
    cr_assert_eq(h_redis_exists(hw_key("flush")), 0);
    uint64_t f2 = take(a, "flush", 5000, NULL);
    cr_assert_gt(f2, f1, "after FLUSHALL: %" PRIu64 " after %" PRIu64, f2, f1);

    /* Lost while held: the holder is told, the next grant is still higher. */
    dlock_lease *l = NULL;
    uint64_t f3 = take(a, "flush", 600, &l);
    cr_assert_gt(f3, f2);
    freeReplyObject(h_redis_cmd("FLUSHALL"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    uint64_t f4 = take(a, "flush", 600, NULL);
    cr_assert_gt(f4, f3, "after FLUSHALL under a holder: %" PRIu64 " after %" PRIu64, f4, f3);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

ITEST(fencing, mark_ahead_of_the_clock_still_grows_for_every_name_of_the_slot)
{
    /* A mark beyond the server's clock (say, tokens taken on a server whose
     * clock ran ahead): the next token is one more, not the clock, for any
     * name of the slot. */
    h_start(NO_BLOCK);
    struct h_cl *a = h_client();
    char mate[64];
    slot_mate("ahead", mate, sizeof mate);
    uint64_t ahead = redis_time_us() + 3600ull * 1000000ull;
    char v[32];
    snprintf(v, sizeof v, "%" PRIu64, ahead);
    freeReplyObject(h_redis_cmd("SET %s %s", hw_key("ahead"), v));
    uint64_t f1 = take(a, "ahead", 5000, NULL);
    cr_assert_eq(f1, ahead + 1, "fence %" PRIu64 ", expected %" PRIu64, f1, ahead + 1);
    uint64_t f2 = take(a, mate, 5000, NULL);
    cr_assert_eq(f2, ahead + 2, "%s: fence %" PRIu64 ", expected %" PRIu64, mate, f2, ahead + 2);
    uint64_t f3 = take(a, "ahead", 5000, NULL);
    cr_assert_eq(f3, ahead + 3);
    cr_assert_eq(mark_value(mate), ahead + 3);
}

/* A mark that is no token of ours (someone wrote a huge, fractional or
 * non-numeric value, or a value of another type) reads as 0: the grant takes
 * its token from the clock, writes a sane mark, and the lock is ours, not
 * "taken by someone else" with our own key left behind. */
ITEST(fencing, a_foreign_mark_reads_as_zero)
{
    h_start(NO_BLOCK);
    struct h_cl *a = h_client();
    static const char *const junk[] = {"1e30", "inf", "-5", "12.5", "9007199254740993", "x"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        freeReplyObject(h_redis_cmd("SET %s %s", hw_key("junk"), junk[i]));
        uint64_t before = redis_time_us();
        uint64_t f = take(a, "junk", 5000, NULL);
        cr_assert_geq(f, before, "mark %s: fence %" PRIu64 " below the clock", junk[i], f);
        cr_assert_lt(f, 1ull << 53, "mark %s: fence %" PRIu64, junk[i], f);
        cr_assert_eq(mark_value("junk"), f, "mark %s was not replaced", junk[i]);
        H_KEY_GONE(h_key("junk"));
    }
    freeReplyObject(h_redis_cmd("DEL %s", hw_key("junk")));
    freeReplyObject(h_redis_cmd("LPUSH %s x", hw_key("junk")));
    uint64_t f = take(a, "junk", 5000, NULL);
    cr_assert_gt(f, 0);
}

ITEST(fencing, names_share_the_mark_of_their_slot_only)
{
    h_start(NO_BLOCK);
    struct h_cl *a = h_client();
    /* "x" and "y" lie in different slots, each with its own mark. */
    cr_assert_str_neq(hw_key("x"), hw_key("y"));
    dlock_lease *x = NULL, *y = NULL;
    uint64_t fx = take(a, "x", 5000, &x);
    uint64_t fy = take(a, "y", 5000, &y);
    cr_assert_eq(mark_value("x"), fx);
    cr_assert_eq(mark_value("y"), fy);
    cr_assert_eq(dlock_lease_release(x), 0);
    cr_assert_eq(dlock_lease_release(y), 0);
    /* Two names of one slot, held at once: one mark, the later grant's. */
    char mate[64];
    slot_mate("one", mate, sizeof mate);
    uint64_t f1 = take(a, "one", 5000, &x);
    uint64_t f2 = take(a, mate, 5000, &y);
    cr_assert_gt(f2, f1);
    cr_assert_eq(mark_value("one"), f2);
    cr_assert_eq(dlock_lease_release(x), 0);
    cr_assert_eq(dlock_lease_release(y), 0);
}

ITEST(fencing, counter_of_the_per_name_scheme_is_not_read)
{
    /* A counter left by a version that kept one per name is neither read
     * nor deleted (docs/fencing.md, "Upgrading"): tokens come from the
     * slot's mark and the clock; the counter expires by its own TTL. */
    h_start(NO_BLOCK);
    struct h_cl *a = h_client();
    const char *old = "dlock:{dlock:upgraded} fence";
    uint64_t ahead = redis_time_us() + 3600ull * 1000000ull;
    char v[32];
    snprintf(v, sizeof v, "%" PRIu64, ahead);
    h_redis_set_px(old, v, 3600000);
    dlock_lease *l = NULL;
    uint64_t f1 = take(a, "upgraded", 5000, &l);
    cr_assert_lt(f1, ahead, "fence %" PRIu64 " came from the per-name counter", f1);
    cr_assert_eq(mark_value("upgraded"), f1);
    cr_assert_str_eq(h_redis_get(old), v, "the per-name counter was touched");
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("upgraded"));
    cr_assert_eq(h_redis_count_keys("*upgraded*"), 1, "a key other than the old counter stayed");
}

ITEST(fencing, mark_with_a_hash_tag_prefix)
{
    /* docs/fencing.md: with a prefix that has a hash tag of its own, every
     * lock is in that tag's slot, and so is the one mark they share. */
    h_start(NO_BLOCK "\nprefix = {locks}:");
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    uint64_t f = take(a, "tagged", 5000, &l);
    cr_assert_eq(h_redis_exists("{locks}:tagged"), 1);
    const char *mark = hw_key_in("{locks}:", "tagged");
    cr_assert_str_eq(mark, hw_key_in("{locks}:", "other"));
    char *v = h_redis_get(mark);
    cr_assert_not_null(v, "no mark '%s'", mark);
    cr_assert_eq(parse_u64(v, "mark"), f);
    cr_assert_eq(h_redis_exists("{locks}:tagged fence"), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE("{locks}:tagged");
    cr_assert_eq(h_redis_count_keys("*tagged*"), 0);
}

ITEST(fencing, dlockctl_run_passes_the_fence)
{
    h_start(NO_BLOCK);
    char script[512];
    snprintf(script, sizeof script, "echo \"$DLOCK_FENCE\" > %s", h_path("fence"));
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "job", "--", "sh", "-c", script, NULL);
    cr_assert_eq(st, 0, "dlockctl exit status %d", st);
    const char *s = h_read_file(h_path("fence"));
    uint64_t f = parse_u64(s, "DLOCK_FENCE");
    cr_assert_gt(f, 0);
    cr_assert_eq(mark_value("job"), f, "DLOCK_FENCE is not the fence of the grant");
    struct h_cl *a = h_client();
    uint64_t next = take(a, "job", 5000, NULL);
    cr_assert_gt(next, f);
}

/* With cohort handoff (cohort_handoffs = 32, the default), a grant from Redis
 * reserves the 32 tokens after its own for handoffs within the agent: the
 * mark holds the last of them, and the next grant from Redis, by any agent,
 * is above it. */
ITEST(fencing, block_of_the_cohort_is_reserved)
{
    h_start_two(NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *l = NULL;
    uint64_t f1 = take(a, "blk", 5000, &l);
    cr_assert_eq(mark_value("blk"), f1 + 32, "mark %" PRIu64 " after token %" PRIu64,
                 mark_value("blk"), f1);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("blk"));
    uint64_t f2 = take(b, "blk", 5000, NULL);
    cr_assert_gt(f2, f1 + 32);
}
