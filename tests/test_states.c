/* SPDX-License-Identifier: BSD-3-Clause */
/* test_states.c -- lease state changes pushed to the holder: JEOPARDY then
 * LOST when Redis hangs (and never HELD after LOST); bounded holds: the
 * maximum hold time (asked, the agent's default, the agent's cap) and the
 * progress deadline (a holder that never touches, one that keeps touching,
 * one that stalls and comes back).
 *
 * These tests check what happens and in which order, and that nothing comes
 * early: events are measured against clock reads taken before the requests
 * that cause them, so a loaded machine can only make them look later. TTLs
 * are of seconds, so that a late renewal loses nothing. How soon things come
 * (max hold AT its deadline, LOST AT the deadline, the stall seen at the next
 * renewal tick) is the lock core's timing, tested in virtual time by
 * test_core.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define NS_PER_MS 1000000ll

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Once renewal has stopped, the deadline in the page stays put, and the one
 * reported with the JEOPARDY event is that one. Returns it. */
static int64_t check_stopped_deadline(const dlock_lease *l)
{
    int64_t page = now_ns() + dlock_lease_remaining_ns(l);
    int64_t told = dlock_lease_deadline_ns(l);
    cr_assert(page - told < NS_PER_MS && told - page < NS_PER_MS,
              "deadline in the page %" PRId64 " ns, reported with JEOPARDY %" PRId64 " ns", page,
              told);
    return told;
}

/* LOST comes at the deadline, not before (how soon after is test_core.c's:
 * here the event may be read late). */
static void check_lost_at(const struct h_event *lost, int64_t deadline_ns)
{
    int64_t at = lost->at_ms * NS_PER_MS;
    cr_assert_geq(at, deadline_ns - NS_PER_MS, "LOST %" PRId64 " ms before the deadline",
                  (deadline_ns - at) / NS_PER_MS);
}

static void on_acquired(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct h_acq *a = arg;
    (void)c;
    a->done++;
    a->status = status;
    a->lease = lease;
    a->at_ms = h_now_ms();
}

static dlock_lease *acquire_bounded(struct h_cl *cl, const char *name, uint32_t ttl_ms,
                                    uint32_t max_hold_ms, uint32_t progress_ms)
{
    dlock_acquire_options o = {.ttl_ms = ttl_ms,
                               .wait_ms = H_EVENT_MS,
                               .max_hold_ms = max_hold_ms,
                               .progress_ms = progress_ms};
    dlock_lease *l = NULL;
    int rc = dlock_lease_acquire(cl->c, name, &o, &l);
    cr_assert_eq(rc, 0, "acquire %s: %s (%d)", name, dlock_strerror(rc), rc);
    return l;
}

/* The first event of lease in the given state, or NULL. */
static const struct h_event *first_event(const struct h_cl *cl, const dlock_lease *l,
                                         dlock_state state)
{
    for (int i = 0; i < cl->nev; i++)
        if (cl->ev[i].lease == l && cl->ev[i].state == state)
            return &cl->ev[i];
    return NULL;
}

/* Index of the first event of lease in the given state, or -1. */
static int event_index(const struct h_cl *cl, const dlock_lease *l, dlock_state state)
{
    const struct h_event *e = first_event(cl, l, state);
    return e ? (int)(e - cl->ev) : -1;
}

/* Every event of l from index `from` on is in state `state`. */
static int events_after_are(const struct h_cl *cl, const dlock_lease *l, int from,
                            dlock_state state)
{
    for (int i = from; i < cl->nev; i++)
        if (cl->ev[i].lease == l && cl->ev[i].state != state)
            return 0;
    return 1;
}

/* ---- Redis hangs ---- */

ITEST(states, redis_hang_gives_jeopardy_then_lost_never_held_after)
{
    h_redis_start();
    h_agent_config(0, NULL, "command_timeout_ms = 200");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    /* Renewed every second: the first renewal into the hang fails after
     * 200 ms, some 2 s before the validity ends. */
    dlock_lease *l = h_must_acquire(a, "hang", 3000);
    h_pump_all(20);
    h_redis_pause();

    H_WAIT_UNTIL(H_EVENT_MS,
                 h_events(a, l, DLOCK_STATE_JEOPARDY) > 0 || h_events(a, l, DLOCK_STATE_LOST) > 0);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0, "LOST without JEOPARDY first");
    cr_assert_neq(first_event(a, l, DLOCK_STATE_JEOPARDY)->reason, 0, "JEOPARDY without a reason");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_JEOPARDY);
    /* JEOPARDY means still within the deadline. */
    cr_assert(dlock_lease_valid(l), "JEOPARDY reported after validity ended");
    int64_t deadline = check_stopped_deadline(l);

    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    const struct h_event *lost = first_event(a, l, DLOCK_STATE_LOST);
    cr_assert_neq(lost->reason, 0, "LOST without a reason");
    check_lost_at(lost, deadline);
    cr_assert_lt(event_index(a, l, DLOCK_STATE_JEOPARDY), event_index(a, l, DLOCK_STATE_LOST));
    cr_assert_not(dlock_lease_valid(l), "valid after LOST");
    cr_assert_eq(dlock_lease_remaining_ns(l), 0);
    int lost_at = event_index(a, l, DLOCK_STATE_LOST);

    /* Redis comes back: nothing more for this lease, HELD least of all. */
    h_redis_resume();
    H_HOLDS_FOR(1000, dlock_lease_state(l) == DLOCK_STATE_LOST && !dlock_lease_valid(l) &&
                          events_after_are(a, l, lost_at, DLOCK_STATE_LOST));
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 1, "LOST delivered more than once");
    cr_assert_eq(h_events(a, l, DLOCK_STATE_HELD), 0, "HELD reported around a loss");
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("hang")));
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

/* ---- maximum hold time ---- */

ITEST(states, max_hold_gives_jeopardy_then_lost_and_frees_the_key)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    int64_t t0 = h_now_ms();
    /* Max hold 1 s, TTL 2 s: the hold limit comes first, well before the
     * validity ends. */
    dlock_lease *l = acquire_bounded(a, "hold", 2000, 1000, 0);
    /* Held as usual until the hold time is up. */
    H_HOLDS_FOR(t0 + 900 - h_now_ms(), a->nev == 0 && dlock_lease_valid(l));
    cr_assert(h_redis_exists(h_key("hold")));

    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_JEOPARDY) > 0);
    const struct h_event *j = first_event(a, l, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(j->reason, DLOCK_EHOLDLIMIT, "JEOPARDY reason %d", j->reason);
    cr_assert_geq(j->at_ms - t0, 1000 - 1, "JEOPARDY %lld ms after the acquire, max hold 1000",
                  (long long)(j->at_ms - t0));
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);
    cr_assert(dlock_lease_valid(l), "JEOPARDY(EHOLDLIMIT) came after the deadline");
    int64_t deadline = check_stopped_deadline(l);
    cr_assert_leq(deadline, now_ns() + 2000 * NS_PER_MS, "renewed after JEOPARDY(EHOLDLIMIT)");

    /* No more renewals: lost at the deadline. */
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    const struct h_event *lost = first_event(a, l, DLOCK_STATE_LOST);
    cr_assert_eq(lost->reason, DLOCK_EHOLDLIMIT, "LOST reason %d", lost->reason);
    check_lost_at(lost, deadline);
    cr_assert_not(dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_deadline_ns(l), 0, "a lost lease reports a deadline");
    /* Gone (deleted at the loss, or by its TTL, which ran out with it). */
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("hold")));
    cr_assert_eq(h_events(a, l, DLOCK_STATE_HELD), 0);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);

    /* The lock is free for the next holder at once. */
    struct h_cl *b = h_client();
    dlock_lease *lb = h_must_acquire(b, "hold", 5000);
    cr_assert_eq(dlock_lease_release(lb), 0);
}

/* Runs three holders side by side (TTL 2 s) and returns, for each, when
 * JEOPARDY (EHOLDLIMIT) came, in ms after its acquire started; fails unless
 * all three come within H_EVENT_MS. */
static void hold_times(const char *agent_ini, const uint32_t asked[3], int64_t out[3])
{
    h_start(agent_ini);
    struct h_cl *cl[3];
    dlock_lease *l[3];
    int64_t t0[3];
    char name[16];
    for (int i = 0; i < 3; i++) {
        cl[i] = h_client();
        snprintf(name, sizeof name, "bound%d", i);
        t0[i] = h_now_ms();
        l[i] = acquire_bounded(cl[i], name, 2000, asked[i], 0);
        out[i] = -1;
    }
    int64_t end = h_deadline(H_EVENT_MS);
    while (out[0] < 0 || out[1] < 0 || out[2] < 0) {
        cr_assert_lt(h_now_ms(), end, "no JEOPARDY(EHOLDLIMIT) for every holder: %lld %lld %lld",
                     (long long)out[0], (long long)out[1], (long long)out[2]);
        h_pump_all(2);
        for (int i = 0; i < 3; i++) {
            const struct h_event *j = first_event(cl[i], l[i], DLOCK_STATE_JEOPARDY);
            if (j && out[i] < 0) {
                cr_assert_eq(j->reason, DLOCK_EHOLDLIMIT, "holder %d: JEOPARDY reason %d", i,
                             j->reason);
                out[i] = j->at_ms - t0[i];
            }
        }
    }
    for (int i = 0; i < 3; i++)
        cr_log_info("holder %d asked %u: JEOPARDY after %lld ms", i, asked[i], (long long)out[i]);
}

/* The bound each holder got shows as "not before": the one asked (100 ms),
 * the default (1 s) for one asking none, the cap (2 s) for one asking for a
 * minute, whose JEOPARDY comes within H_EVENT_MS all the same. That each
 * comes AT its bound is test_core.c's. */
ITEST(states, max_hold_default_and_cap_of_the_agent)
{
    const uint32_t asked[3] = {100, 0, 60000};
    int64_t at[3];
    hold_times("default_max_hold_ms = 1000\nmax_hold_limit_ms = 2000", asked, at);
    cr_assert_geq(at[0], 100 - 1, "asked 100: JEOPARDY at %lld ms", (long long)at[0]);
    cr_assert_geq(at[1], 1000 - 1, "asked none (default 1000): JEOPARDY at %lld ms",
                  (long long)at[1]);
    cr_assert_geq(at[2], 2000 - 1, "asked 60000 (cap 2000): JEOPARDY at %lld ms", (long long)at[2]);
}

ITEST(states, max_hold_cap_applies_to_a_client_asking_none)
{
    const uint32_t asked[3] = {0, 0, 500};
    int64_t at[3];
    hold_times("max_hold_limit_ms = 1000", asked, at);
    cr_assert_geq(at[0], 1000 - 1, "asked none (cap 1000): JEOPARDY at %lld ms", (long long)at[0]);
    cr_assert_geq(at[1], 1000 - 1, "asked none (cap 1000): JEOPARDY at %lld ms", (long long)at[1]);
    cr_assert_geq(at[2], 500 - 1, "asked 500 (cap 1000): JEOPARDY at %lld ms", (long long)at[2]);
}

ITEST(states, no_bound_without_asking_or_configuring)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = acquire_bounded(a, "free", 1000, 0, 0);
    H_HOLDS_FOR(3000, a->nev == 0 && dlock_lease_valid(l));
    cr_assert(h_redis_exists(h_key("free")));
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* ---- progress deadline ---- */

ITEST(states, never_touched_lease_stalls_then_is_lost)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    int64_t t0 = h_now_ms();
    /* Progress 1 s, TTL 2 s: the stall is seen at a renewal, well before
     * the validity ends. */
    dlock_lease *l = acquire_bounded(a, "idle", 2000, 0, 1000);
    H_HOLDS_FOR(t0 + 900 - h_now_ms(), a->nev == 0 && dlock_lease_valid(l));

    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_JEOPARDY) > 0);
    const struct h_event *j = first_event(a, l, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(j->reason, DLOCK_ESTALLED, "JEOPARDY reason %d", j->reason);
    cr_assert_geq(j->at_ms - t0, 1000 - 1, "stalled %lld ms after the acquire, progress 1000",
                  (long long)(j->at_ms - t0));
    cr_assert(dlock_lease_valid(l), "JEOPARDY(ESTALLED) came after the deadline");
    int64_t deadline = check_stopped_deadline(l);

    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    const struct h_event *lost = first_event(a, l, DLOCK_STATE_LOST);
    cr_assert_eq(lost->reason, DLOCK_ESTALLED, "LOST reason %d", lost->reason);
    check_lost_at(lost, deadline);
    cr_assert_not(dlock_lease_valid(l));
    cr_assert_eq(h_events(a, l, DLOCK_STATE_HELD), 0);
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("idle")));
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

ITEST(states, touching_holder_keeps_its_lease)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    /* Touched every 50 ms, far more often than the progress deadline. */
    dlock_lease *l = acquire_bounded(a, "busy", 1000, 0, 1500);
    char *tok = h_redis_get(h_key("busy"));
    int64_t end = h_now_ms() + 3500, next_touch = 0;
    while (h_now_ms() < end) {
        if (h_now_ms() >= next_touch) {
            dlock_lease_touch(l);
            next_touch = h_now_ms() + 50;
        }
        h_pump_all(10);
        cr_assert_eq(a->nev, 0, "event %d (reason %d) for a holder touching every 50 ms",
                     a->ev[0].state, a->ev[0].reason);
        cr_assert(dlock_lease_valid(l), "a touching holder's lease went invalid");
        char *v = h_redis_get(h_key("busy"));
        cr_assert_not_null(v, "key gone under a touching holder");
        cr_assert_str_eq(v, tok);
    }
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(states, stalled_holder_that_touches_again_is_held_again)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    /* Stalls after 1 s, a second or so before its validity (TTL 2 s) ends:
     * time for the test to touch it again. */
    dlock_lease *l = acquire_bounded(a, "back", 2000, 0, 1000);
    char *tok = h_redis_get(h_key("back"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_JEOPARDY) > 0);
    cr_assert_eq(first_event(a, l, DLOCK_STATE_JEOPARDY)->reason, DLOCK_ESTALLED);
    cr_assert(dlock_lease_valid(l), "JEOPARDY(ESTALLED) came after the deadline");
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);

    /* Touch at once and keep touching: renewed again, HELD, never invalid. */
    dlock_lease_touch(l);
    int64_t end = h_deadline(H_EVENT_MS), next_touch = h_now_ms() + 50;
    while (!h_events(a, l, DLOCK_STATE_HELD)) {
        cr_assert_lt(h_now_ms(), end, "no HELD after touching again");
        cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0, "lost although touched in time");
        cr_assert(dlock_lease_valid(l), "invalid although touched in time");
        if (h_now_ms() >= next_touch) {
            dlock_lease_touch(l);
            next_touch = h_now_ms() + 50;
        }
        h_pump_all(5);
    }
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    int held = h_events(a, l, DLOCK_STATE_HELD);
    int jeop = h_events(a, l, DLOCK_STATE_JEOPARDY);
    end = h_now_ms() + 2500;
    while (h_now_ms() < end) {
        if (h_now_ms() >= next_touch) {
            dlock_lease_touch(l);
            next_touch = h_now_ms() + 50;
        }
        h_pump_all(10);
        cr_assert_eq(h_events(a, l, DLOCK_STATE_JEOPARDY), jeop, "stalled again while touching");
        cr_assert_eq(h_events(a, l, DLOCK_STATE_HELD), held);
        cr_assert(dlock_lease_valid(l));
    }
    char *v = h_redis_get(h_key("back"));
    cr_assert_not_null(v);
    cr_assert_str_eq(v, tok, "the key changed hands during the stall");
    cr_assert_gt(h_redis_pttl(h_key("back")), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(states, progress_default_and_cap_of_the_agent)
{
    /* default_progress_ms stands in for a client that asks none;
     * progress_limit_ms caps one that asks more (a minute here: both stall
     * within H_EVENT_MS only if the cap applies). */
    h_start("default_progress_ms = 1000\nprogress_limit_ms = 2000");
    struct h_cl *a = h_client(), *b = h_client();
    int64_t t0 = h_now_ms();
    dlock_lease *la = acquire_bounded(a, "pdef", 1500, 0, 0);
    dlock_lease *lb = acquire_bounded(b, "pcap", 1500, 0, 60000);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, la, DLOCK_STATE_JEOPARDY) > 0 &&
                                 h_events(b, lb, DLOCK_STATE_JEOPARDY) > 0);
    const struct h_event *ja = first_event(a, la, DLOCK_STATE_JEOPARDY);
    const struct h_event *jb = first_event(b, lb, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(ja->reason, DLOCK_ESTALLED);
    cr_assert_eq(jb->reason, DLOCK_ESTALLED);
    cr_log_info("stalled after %lld ms (default 1000) and %lld ms (cap 2000)",
                (long long)(ja->at_ms - t0), (long long)(jb->at_ms - t0));
    cr_assert_geq(ja->at_ms - t0, 1000 - 1);
    cr_assert_geq(jb->at_ms - t0, 2000 - 1);
    H_WAIT_UNTIL(H_EVENT_MS,
                 h_events(a, la, DLOCK_STATE_LOST) > 0 && h_events(b, lb, DLOCK_STATE_LOST) > 0);
    cr_assert_eq(dlock_lease_release(la), DLOCK_ELOST);
    cr_assert_eq(dlock_lease_release(lb), DLOCK_ELOST);
}

/* Known bug: dlock_lease_touch() (libclient/client.c) stores into the touch
 * word of the lease's slot without checking that the slot still holds that
 * lease. After a LOST event the agent frees the slot and hands it to the
 * client's next lease, so touches through the lost lease's handle (which
 * stays valid until released) count as progress of the new lease: a hung
 * holder of the new lease would be renewed on. */
ITEST(states, touching_a_lost_lease_is_no_progress_for_another)
{
    /* A lost lease's handle lives until released, and its slot may go to a
     * later lease of the same client. Touching the stale handle must not
     * count as progress of the lease now in that slot. */
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *old = h_must_acquire(a, "old", 600);
    h_redis_del(h_key("old"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, old, DLOCK_STATE_LOST) > 0);
    int64_t t0 = h_now_ms();
    dlock_lease *l = acquire_bounded(a, "new", 1500, 0, 500);
    int64_t end = t0 + h_scaled_ms(H_EVENT_MS), next_touch = 0;
    while (!h_events(a, l, DLOCK_STATE_JEOPARDY)) {
        cr_assert_lt(h_now_ms(), end,
                     "a lease never touched did not stall in %d ms (progress 500 ms): touches of "
                     "a lost lease in the same slot counted for it",
                     h_scaled_ms(H_EVENT_MS));
        if (h_now_ms() >= next_touch) {
            dlock_lease_touch(old);
            next_touch = h_now_ms() + 50;
        }
        h_pump_all(5);
    }
    cr_assert_eq(first_event(a, l, DLOCK_STATE_JEOPARDY)->reason, DLOCK_ESTALLED);
    cr_assert_eq(dlock_lease_release(old), DLOCK_ELOST);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

ITEST(states, max_hold_counts_from_the_grant_not_the_request)
{
    /* A waiter asking max_hold 1 s that waits 1.5 s for the lock still holds
     * it 1 s once granted: its acquire goes out after the release, so its
     * JEOPARDY(EHOLDLIMIT) cannot come before release + 1 s. Counted from
     * the request, it would come at once. */
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "queue", 5000);
    dlock_acquire_options o = {.ttl_ms = 2000, .wait_ms = H_EVENT_MS, .max_hold_ms = 1000};
    struct h_acq w;
    memset(&w, 0, sizeof w);
    cr_assert_eq(dlock_lease_acquire_async(b->c, "queue", &o, on_acquired, &w), 0);
    H_HOLDS_FOR(1500, !w.done);
    int64_t released = h_now_ms();
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(b, w.lease, DLOCK_STATE_JEOPARDY) > 0);
    const struct h_event *j = first_event(b, w.lease, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(j->reason, DLOCK_EHOLDLIMIT);
    cr_assert_geq(j->at_ms - released, 1000 - 1,
                  "max hold counted from the request: JEOPARDY %lld ms after the release",
                  (long long)(j->at_ms - released));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(b, w.lease, DLOCK_STATE_LOST) > 0);
    cr_assert_eq(dlock_lease_release(w.lease), DLOCK_ELOST);
}
