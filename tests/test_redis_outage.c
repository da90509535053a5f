/* SPDX-License-Identifier: BSD-3-Clause */
/* test_redis_outage.c -- Redis restarted, down or hung: holders are told their
 * leases are lost, acquires fail fast while Redis is unreachable, and the agent
 * recovers once it is back. */
#include <stdlib.h>

#include "harness.h"

/* Backend error codes an acquire may meet while Redis is away. */
static int is_backend_error(int rc)
{
    return rc <= DLOCK_EUNAVAIL && rc >= DLOCK_EAUTH;
}

/* Retries a try-once acquire of name until it succeeds (within timeout_ms);
 * every failure on the way must be a backend error or EBUSY. */
static dlock_lease *acquire_eventually(struct h_cl *cl, const char *name, int timeout_ms)
{
    int64_t end = h_deadline(timeout_ms);
    int last = 0, tries = 0;
    for (;;) {
        dlock_lease *l = NULL;
        int rc = h_acquire(cl, name, 5000, 0, &l);
        tries++;
        if (rc == 0)
            return l;
        cr_assert(is_backend_error(rc) || rc == DLOCK_EBUSY, "acquire %s during recovery: %s (%d)",
                  name, dlock_strerror(rc), rc);
        last = rc;
        cr_assert_lt(h_now_ms(), end, "acquire %s still failing after %d ms (%d tries, last %s)",
                     name, h_scaled_ms(timeout_ms), tries, dlock_strerror(last));
        h_pump_all(20);
    }
}

ITEST(redis_outage, restart_loses_held_lease_then_recovers)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "rr", 1500); /* renewed every 500 ms */
    int64_t t0 = h_now_ms();
    h_redis_restart(); /* empty: no persistence */
    cr_assert_eq(h_redis_exists(h_key("rr")), 0);

    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    cr_log_info("LOST %lld ms after the restart", (long long)(h_now_ms() - t0));
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);

    dlock_lease *l2 = acquire_eventually(a, "rr2", 5000);
    char *tok = h_redis_get(h_key("rr2"));
    cr_assert(h_is_token(tok), "no token for rr2 on the new Redis");
    dlock_lease *l3 = acquire_eventually(a, "rr", 3000);
    cr_assert_eq(dlock_lease_release(l3), 0);
    cr_assert_eq(dlock_lease_release(l2), 0);
    H_KEY_GONE(h_key("rr2"));
    int rc = dlock_lease_release(l);
    cr_assert(rc == DLOCK_ELOST, "release of the lost lease: %s (%d)", dlock_strerror(rc), rc);
}

ITEST(redis_outage, acquire_fails_fast_while_redis_down)
{
    h_start("outage_wait_ms = 2000"); /* a ceiling for every waiter */
    struct h_cl *a = h_client();
    h_redis_kill();

    /* A try-once acquire is answered with the backend error. */
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "down", 5000, 0, &l);
    cr_assert(is_backend_error(rc), "acquire with Redis down: %s (%d)", dlock_strerror(rc), rc);
    if (rc != DLOCK_EUNAVAIL)
        cr_log_warn("acquire with Redis down returned %s, not EUNAVAIL", dlock_strerror(rc));

    /* A waiting acquire does not hang either: it rides the outage out up
     * to the outage_wait_ms ceiling, then fails, long before its wait of a
     * minute is up. */
    struct h_acq w;
    h_acquire_async(a, "down", 5000, 60000, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert(is_backend_error(w.status), "waiting acquire with Redis down: %s (%d)",
              dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_client_ping(a->c), 0, "the agent stopped answering");

    h_redis_start();
    dlock_lease *l2 = acquire_eventually(a, "down", 5000);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

/* With no ceiling (the default), a waiter's own wait governs: one that waits
 * for ever is still waiting after a bounded one gave up on the outage, and
 * gets the lock once Redis is back; a try-once is answered at once. */
ITEST(redis_outage, a_waiter_for_ever_rides_out_the_outage)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    h_redis_kill();
    struct h_acq ever, bounded;
    h_acquire_async(a, "ride", 5000, DLOCK_WAIT_FOREVER, &ever);
    h_acquire_async(b, "ride", 5000, 3000, &bounded);
    H_WAIT_UNTIL(H_EVENT_MS, bounded.done);
    cr_assert(is_backend_error(bounded.status), "bounded wait in the outage: %s (%d)",
              dlock_strerror(bounded.status), bounded.status);
    dlock_lease *l = NULL;
    int rc = h_acquire(b, "ride", 5000, 0, &l);
    cr_assert(rc == DLOCK_EBUSY || is_backend_error(rc), "try-once: %s (%d)", dlock_strerror(rc),
              rc);
    cr_assert(!ever.done, "the waiter for ever gave up: %s (%d)", dlock_strerror(ever.status),
              ever.status);
    h_redis_start();
    H_WAIT_UNTIL(H_EVENT_MS, ever.done);
    cr_assert_eq(ever.status, 0, "after the outage: %s (%d)", dlock_strerror(ever.status),
                 ever.status);
    cr_assert_eq(dlock_lease_release(ever.lease), 0);
}

ITEST(redis_outage, agent_starts_while_redis_down)
{
    /* Redis not there yet: the agent still serves its socket and answers
     * acquires with a backend error, then works once Redis comes. */
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "early", 5000, 0, &l);
    cr_assert(is_backend_error(rc), "acquire before Redis: %s (%d)", dlock_strerror(rc), rc);
    h_redis_start();
    dlock_lease *l2 = acquire_eventually(a, "early", 5000);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(redis_outage, hung_redis_reports_loss_by_the_deadline)
{
    /* Redis stops answering (SIGSTOP). Renewals time out; the holder must be
     * told no later than shortly after the lease's validity ends. */
    h_redis_start();
    h_agent_config(0, NULL, "command_timeout_ms = 300");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "hung", 900);
    h_pump_all(50);

    int64_t t0 = h_now_ms();
    h_redis_pause();
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    int64_t lost_at = 0;
    for (int i = 0; i < a->nev; i++)
        if (a->ev[i].lease == l && a->ev[i].state == DLOCK_STATE_LOST)
            lost_at = a->ev[i].at_ms;
    cr_log_info("LOST %lld ms after Redis hung (ttl 900)", (long long)(lost_at - t0));
    for (int i = 0; i < a->nev; i++)
        if (a->ev[i].lease == l && a->ev[i].state == DLOCK_STATE_JEOPARDY)
            cr_assert_leq(a->ev[i].at_ms, lost_at, "JEOPARDY after LOST");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);

    /* While Redis hangs, new acquires do not hang either: answered (after
     * command_timeout_ms) although Redis never answers. */
    dlock_lease *lx = NULL;
    int rc = h_acquire(a, "hung2", 5000, 0, &lx);
    cr_assert_neq(rc, 0, "granted while Redis is stopped");

    h_redis_resume();
    dlock_lease *l2 = acquire_eventually(a, "hung3", 5000);
    cr_assert_eq(dlock_lease_release(l2), 0);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

/* Holds "hiccup" (TTL 3000 ms, renewed every 1000 ms) across a 1500 ms Redis
 * hang: at least one renewal falls into the hang and fails, yet the lease
 * stays valid throughout (validity ~2970 ms from the last renewal). */
static dlock_lease *hold_across_hiccup(struct h_cl **out, char **tok)
{
    h_redis_start();
    h_agent_config(0, NULL, "command_timeout_ms = 200");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "hiccup", 3000);
    *tok = h_redis_get(h_key("hiccup"));
    h_pump_all(50);
    h_redis_pause();
    int64_t end = h_now_ms() + 1500;
    while (h_now_ms() < end)
        h_pump_all(10);
    h_redis_resume();
    *out = a;
    return l;
}

ITEST(redis_outage, brief_hiccup_is_not_loss)
{
    /* Renewals fail for a while, but the lease is still provably valid and
     * must not be declared lost; once Redis answers it is renewed again. */
    struct h_cl *a;
    char *tok;
    dlock_lease *l = hold_across_hiccup(&a, &tok);
    H_HOLDS_FOR(2500, h_events(a, l, DLOCK_STATE_LOST) == 0);
    cr_assert_neq(dlock_lease_state(l), DLOCK_STATE_LOST);
    char *v = h_redis_get(h_key("hiccup"));
    cr_assert_not_null(v, "key gone after the hiccup");
    cr_assert_str_eq(v, tok);
    long long pttl = h_redis_pttl(h_key("hiccup"));
    cr_assert_gt(pttl, 1000, "not renewed after the hiccup: PTTL %lld", pttl);
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* A lease goes HELD (safe) -> JEOPARDY (renewal failing, still within its
 * deadline) -> LOST, or back to HELD, and each transition is pushed to the
 * holder as an event: dlock.h's event callback reports "LOST, JEOPARDY, or
 * HELD again after JEOPARDY". */
ITEST(redis_outage, failed_renewal_reports_jeopardy_then_held)
{
    struct h_cl *a;
    char *tok;
    dlock_lease *l = hold_across_hiccup(&a, &tok);
    /* The events of the hang were pumped during it; give stragglers time. */
    int64_t end = h_deadline(1000);
    while (h_now_ms() < end && !h_events(a, l, DLOCK_STATE_JEOPARDY))
        h_pump_all(5);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);
    cr_assert_gt(h_events(a, l, DLOCK_STATE_JEOPARDY), 0,
                 "no JEOPARDY event although renewals failed for ~1.5 s");
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_HELD) > 0);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(redis_outage, acquire_with_lost_reply_leaves_no_orphan_key)
{
    /* Redis hangs while an acquire is on its way: the agent gives up after
     * command_timeout_ms and answers with a backend error, but Redis still
     * runs the buffered SET NX once it wakes up. That key belongs to nobody;
     * the lock must not stay blocked for its whole TTL (30 s). */
    h_redis_start();
    h_agent_config(0, NULL, "command_timeout_ms = 200");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    h_redis_pause();
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "orphan", 30000, 0, &l);
    cr_assert(is_backend_error(rc), "acquire with Redis hung: %s (%d)", dlock_strerror(rc), rc);
    h_redis_resume();
    long long pttl = h_redis_pttl(h_key("orphan"));
    cr_log_info("after the hang: PTTL of the unowned key %lld", pttl);
    dlock_lease *l2 = acquire_eventually(a, "orphan", 5000);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(redis_outage, waiter_granted_after_restart)
{
    /* A waiter queued behind a lease that the restart wiped out gets the lock
     * once Redis is back. */
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "wq", 1500);
    struct h_acq w;
    h_acquire_async(b, "wq", 5000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    h_redis_restart();
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, la, DLOCK_STATE_LOST) > 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    if (w.status != 0) {
        /* A waiter may be failed with a backend error while Redis was away. */
        cr_assert(is_backend_error(w.status), "waiter: %s (%d)", dlock_strerror(w.status),
                  w.status);
        cr_log_warn("waiter failed with %s during the restart", dlock_strerror(w.status));
    } else {
        char *v = h_redis_get(h_key("wq"));
        cr_assert(h_is_token(v), "waiter granted but no key on the new Redis");
        cr_assert_eq(dlock_lease_release(w.lease), 0);
    }
    cr_assert_eq(dlock_lease_release(la), DLOCK_ELOST);
}

ITEST(redis_outage, release_notices_resume_after_restart)
{
    /* The agent must subscribe again after Redis comes back: a waiter on one
     * agent is still woken by a release on another, without the fallback. */
    h_start_two("retry_fallback_ms = 60000");
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    h_redis_restart();
    dlock_lease *la = acquire_eventually(a, "sub", 5000);
    /* agent 1 must have reconnected too before it can queue a waiter */
    dlock_lease *probe = acquire_eventually(b, "probe", 5000);
    cr_assert_eq(dlock_lease_release(probe), 0);
    /* and both notice links must be up again (they come up on their own) */
    H_WAIT_UNTIL(3000, h_agent_notices_up(0) && h_agent_notices_up(1));

    struct h_acq w;
    h_acquire_async(b, "sub", 30000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, h_channel("sub")) == 1);
    H_HOLDS_FOR(200, !w.done);
    int64_t t0 = h_now_ms();
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done); /* the fallback retry is 30 s off */
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("woken %lld ms after the release", (long long)(w.at_ms - t0));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}
