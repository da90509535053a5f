/* SPDX-License-Identifier: BSD-3-Clause */
/* test_lost.c -- a key deleted or taken over behind the agent's back: the
 * holder is told its lease is LOST within a renewal period, and the agent never
 * deletes or extends a key it does not own. */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

ITEST(lost, key_deleted_behind_back_reports_lost)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "gone", 600); /* renewed every 200 ms */
    h_pump_all(50);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);

    int64_t t0 = h_now_ms();
    h_redis_del(h_key("gone"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    cr_log_info("LOST %lld ms after DEL", (long long)(h_now_ms() - t0));
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 1, "LOST delivered more than once");

    /* the agent does not take the key again on its own */
    H_HOLDS_FOR(300, !h_redis_exists(h_key("gone")));
    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, DLOCK_ELOST, "release of a lost lease: %s (%d)", dlock_strerror(rc), rc);

    /* the client and the name are usable again */
    dlock_lease *l2 = h_must_acquire(a, "gone", 600);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(lost, key_overwritten_reports_lost_and_other_owner_is_untouched)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "stolen", 600);

    h_redis_set_px(h_key("stolen"), "other", 10000);
    /* After the SET: its PTTL can only be lower than 10000 - (now - t0). */
    int64_t t0 = h_now_ms();
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);

    /* For a while after: still "other", its TTL only running down. */
    int64_t end = h_now_ms() + 700;
    while (h_now_ms() < end) {
        char *v = h_redis_get(h_key("stolen"));
        cr_assert_not_null(v, "the agent deleted another owner's key");
        cr_assert_str_eq(v, "other", "the agent overwrote another owner's key");
        int64_t asked = h_now_ms(); /* before the PTTL: it can only be lower */
        long long pttl = h_redis_pttl(h_key("stolen"));
        long long bound = 10000 - (asked - t0) + 1;
        cr_assert(pttl > 0 && pttl <= bound,
                  "another owner's TTL was reset: PTTL %lld, at most %lld expected", pttl, bound);
        h_pump_all(20);
    }

    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, DLOCK_ELOST, "release of a lost lease: %s (%d)", dlock_strerror(rc), rc);
    char *v = h_redis_get(h_key("stolen"));
    cr_assert_not_null(v, "releasing the lost lease deleted another owner's key");
    cr_assert_str_eq(v, "other");
}

ITEST(lost, only_the_damaged_lease_is_lost)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    /* d2 renewed every 200 ms, so that its loss shows soon; the others need
     * no renewal to stay valid while the test looks. */
    dlock_lease *l1 = h_must_acquire(a, "d1", 30000);
    dlock_lease *l2 = h_must_acquire(a, "d2", 600);
    dlock_lease *l3 = h_must_acquire(b, "d3", 30000);
    h_redis_del(h_key("d2"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l2, DLOCK_STATE_LOST) > 0);
    H_HOLDS_FOR(500,
                h_events(a, l1, DLOCK_STATE_LOST) == 0 && h_events(b, NULL, DLOCK_STATE_LOST) == 0);
    cr_assert_eq(dlock_lease_state(l1), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_state(l3), DLOCK_STATE_HELD);
    cr_assert_eq(h_redis_exists(h_key("d1")), 1);
    cr_assert_eq(h_redis_exists(h_key("d3")), 1);
    cr_assert_eq(dlock_lease_release(l1), 0);
    cr_assert_eq(dlock_lease_release(l2), DLOCK_ELOST);
    cr_assert_eq(dlock_lease_release(l3), 0);
}

ITEST(lost, waiter_is_granted_after_holder_lost_and_key_freed)
{
    /* A waiter queued behind a lease that is then lost and whose key another
     * owner later deletes still gets the lock. */
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "chain", 600);
    struct h_acq w;
    h_acquire_async(b, "chain", 5000, H_EVENT_MS, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    int64_t t_other = h_now_ms();
    h_redis_set_px(h_key("chain"), "other", 700);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, la, DLOCK_STATE_LOST) > 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    /* Not before the other owner's key went by its PTTL (set after t_other).
     * Redis stamps the expiry and checks it on its own millisecond clock,
     * cached per command, against our millisecond reading: a few ms of slack
     * between the two, far below what a grant on the lost lease's old
     * expiry (or before the PTTL) would show. */
    cr_assert_geq(w.at_ms, t_other + 700 - 5,
                  "waiter granted %lld ms after another owner set the key for 700 ms",
                  (long long)(w.at_ms - t_other));
    char *v = h_redis_get(h_key("chain"));
    cr_assert(h_is_token(v));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    cr_assert_eq(dlock_lease_release(la), DLOCK_ELOST);
}

ITEST(lost, release_with_unread_lost_event_reports_elost)
{
    /* The LOST event is in the socket but not dispatched yet: the release
     * must still say ELOST, not 0. */
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "unread", 600);
    h_redis_del(h_key("unread"));
    struct pollfd p = {.fd = dlock_client_fd(a->c), .events = POLLIN};
    cr_assert_eq(poll(&p, 1, h_scaled_ms(H_EVENT_MS)), 1, "no event from the agent");
    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, DLOCK_ELOST, "release: %s (%d)", dlock_strerror(rc), rc);
}

ITEST(lost, event_delivered_during_a_blocking_call)
{
    /* Callbacks run inside blocking calls on the same client too. */
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *held = h_must_acquire(a, "fragile", 600);
    dlock_lease *other = h_must_acquire(b, "busy", 30000);
    h_redis_del(h_key("fragile"));
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "busy", 5000, 1500, &l); /* blocks 1.5 s */
    int64_t returned = h_now_ms();
    cr_assert_eq(rc, DLOCK_ETIMEDOUT);
    cr_assert_eq(h_events(a, held, DLOCK_STATE_LOST), 1,
                 "LOST not delivered during the blocking acquire");
    for (int i = 0; i < a->nev; i++)
        cr_assert_lt(a->ev[i].at_ms, returned);
    cr_assert_eq(dlock_lease_state(held), DLOCK_STATE_LOST);
    cr_assert_eq(dlock_lease_release(held), DLOCK_ELOST);
    cr_assert_eq(dlock_lease_release(other), 0);
}

ITEST(lost, paused_agent_never_touches_the_next_owner_key)
{
    /* Agent 0 is frozen past its lease's TTL; the key expires and a holder on
     * agent 1 takes it. When agent 0 wakes up, its holder is told LOST and the
     * new owner's key is left alone (no renewal, no delete). */
    h_start_two(NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *la = h_must_acquire(a, "frozen", 600);
    cr_assert_eq(kill(H.agent[0].pid, SIGSTOP), 0);
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("frozen")));
    dlock_lease *lb = h_must_acquire(b, "frozen", 30000);
    char *tok_b = h_redis_get(h_key("frozen"));
    cr_assert_eq(kill(H.agent[0].pid, SIGCONT), 0);

    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, la, DLOCK_STATE_LOST) > 0);
    H_HOLDS_FOR(500, h_events(b, lb, DLOCK_STATE_LOST) == 0);
    char *v = h_redis_get(h_key("frozen"));
    cr_assert_not_null(v, "the woken agent deleted the new owner's key");
    cr_assert_str_eq(v, tok_b);
    long long pttl = h_redis_pttl(h_key("frozen"));
    cr_assert(pttl > 25000, "new owner's TTL changed: %lld", pttl);
    cr_assert_eq(dlock_lease_release(la), DLOCK_ELOST);
    cr_assert_eq(dlock_lease_state(lb), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(lb), 0);
}
