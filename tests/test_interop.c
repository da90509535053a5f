/* SPDX-License-Identifier: BSD-3-Clause */
/* test_interop.c -- dlock and plain Redis clients following the classic
 * convention (SET key token NX PX ttl, compare-and-delete) exclude each other
 * on the same key. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The classic compare-and-delete release of a plain client. */
static long long classic_release(const char *key, const char *token)
{
    redisReply *r = h_redis_cmd(
        "EVAL %s 1 %s %s",
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
        "else return 0 end",
        key, token);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

ITEST(interop, foreign_key_blocks_dlock)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    cr_assert_eq(h_redis_set_nx_px(h_key("shared"), "othertoken", 5000), 1);
    /* Taken after the SET: the key's PTTL is at most 5000 - (now - t0). */
    int64_t t0 = h_now_ms();

    dlock_lease *l = NULL;
    int rc = h_acquire(a, "shared", 5000, 0, &l);
    cr_assert_eq(rc, DLOCK_EBUSY, "try once on a foreign-held key: %s (%d)", dlock_strerror(rc),
                 rc);
    rc = h_acquire(a, "shared", 5000, 300, &l);
    cr_assert_eq(rc, DLOCK_ETIMEDOUT, "bounded wait on a foreign-held key: %s (%d)",
                 dlock_strerror(rc), rc);

    char *v = h_redis_get(h_key("shared"));
    cr_assert_str_eq(v, "othertoken", "dlock touched a foreign key");
    int64_t asked = h_now_ms(); /* before the PTTL: it can only be lower */
    long long pttl = h_redis_pttl(h_key("shared"));
    cr_assert(pttl > 0 && pttl <= 5000 - (asked - t0) + 1,
              "dlock extended a foreign key: PTTL %lld", pttl);
    cr_assert_eq(classic_release(h_key("shared"), "othertoken"), 1);
}

ITEST(interop, dlock_blocks_foreign_set_nx)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "shared", 5000);
    char *tok = h_redis_get(h_key("shared"));
    cr_assert_eq(h_redis_set_nx_px(h_key("shared"), "othertoken", 5000), 0,
                 "SET NX succeeded on a dlock-held key");
    cr_assert_eq(classic_release(h_key("shared"), "othertoken"), 0);
    char *v = h_redis_get(h_key("shared"));
    cr_assert_str_eq(v, tok);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("shared"));
    cr_assert_eq(h_redis_set_nx_px(h_key("shared"), "othertoken", 5000), 1,
                 "SET NX failed after dlock released");
}

ITEST(interop, waiter_gets_lock_when_foreign_key_expires)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    /* Taken before the SET: the key cannot expire before t0 + 700. */
    int64_t t0 = h_now_ms();
    cr_assert_eq(h_redis_set_nx_px(h_key("exp"), "othertoken", 700), 1);
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "exp", 5000, 60000, &l);
    int64_t el = h_now_ms() - t0;
    /* Granted once the key expired, not over it; and long before the wait
     * of a minute ran out (the call returned). */
    cr_assert_eq(rc, 0, "waiting for an expiring foreign key: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_geq(el, 700 - 1, "granted after %lld ms while the foreign key had 700 ms",
                  (long long)el);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(interop, waiter_retries_when_foreign_owner_releases_silently)
{
    /* A plain client deletes its key without publishing: the waiter's
     * fallback retry (100 ms by default) picks it up. */
    h_start(NULL);
    struct h_cl *a = h_client();
    cr_assert_eq(h_redis_set_nx_px(h_key("silent"), "othertoken", 30000), 1);
    struct h_acq w;
    h_acquire_async(a, "silent", 5000, 10000, &w);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    H_HOLDS_FOR(300, !w.done);
    int64_t t0 = h_now_ms();
    cr_assert_eq(classic_release(h_key("silent"), "othertoken"), 1);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("granted %lld ms after a silent release", (long long)(w.at_ms - t0));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(interop, foreign_release_notice_wakes_waiter)
{
    /* A plain client that also publishes the release notice wakes dlock's
     * waiters at once, however long the fallback. */
    h_start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client();
    cr_assert_eq(h_redis_set_nx_px(h_key("polite"), "othertoken", 30000), 1);
    struct h_acq w;
    h_acquire_async(a, "polite", 5000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    /* The waiter's agent listens on the name's channel once it found the
     * lock taken. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, h_channel("polite")) == 1);
    H_HOLDS_FOR(300, !w.done);
    int64_t t0 = h_now_ms();
    cr_assert_eq(classic_release(h_key("polite"), "othertoken"), 1);
    freeReplyObject(h_redis_cmd("PUBLISH %s %s", h_channel("polite"), "polite"));
    H_WAIT_UNTIL(H_EVENT_MS, w.done); /* the fallback retry is 30 s off */
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("granted %lld ms after the notice", (long long)(w.at_ms - t0));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(interop, dlock_release_publishes_notice)
{
    h_start_two(NULL);
    struct h_cl *a = h_client_at(0);
    dlock_lease *l = h_must_acquire(a, "pub", 5000);

    /* A second hiredis connection subscribed to the name's release channel. */
    struct timeval tv = {2, 0};
    redisContext *sub = redisConnectUnixWithTimeout(H.redis_sock, tv);
    cr_assert(sub && !sub->err);
    redisSetTimeout(sub, tv);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", h_channel("pub"));
    cr_assert_not_null(r);
    freeReplyObject(r);

    /* A client of another agent waits: the release is published; on a
     * single node it is a grant on release to that agent's entry
     * ("grant ID TOKEN FENCE SEQ TTL BLOCK", docs/redis.md), which a
     * subscriber of the channel reads as "taken". */
    struct h_cl *b = h_client_at(1);
    struct h_acq w;
    h_acquire_async(b, "pub", 5000, DLOCK_WAIT_FOREVER, &w);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_exists("dlock:{dlock:pub} waiting") == 1);
    cr_assert_eq(dlock_lease_release(l), 0);
    void *vr = NULL;
    cr_assert_eq(redisGetReply(sub, &vr), REDIS_OK, "no release notice within 2 s");
    r = vr;
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 3);
    cr_assert_str_eq(r->element[0]->str, "message");
    cr_assert_str_eq(r->element[1]->str, "dlock:{dlock:pub} released");
    cr_assert_eq(strncmp(r->element[2]->str, "grant ", 6), 0, "the message: %s",
                 r->element[2]->str);
    freeReplyObject(r);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    redisFree(sub);
}
