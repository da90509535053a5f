/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for agent/core/pace.c: the pacing of a waiting lock's
 * fallback retry and the lifetime of its waiting-hosts entry. */
#include <criterion/criterion.h>

#include "pace.h"
#include "util.h"

#define MS NS_PER_MS

static const struct wait_pace paced = {.fast_ms = 100, .max_ms = 3000};
static const struct wait_pace fixed = {.fast_ms = 100, .max_ms = 0};

/* Without a confirmed subscription, or with fixed pacing, the retry is the
 * fast one of earlier versions: in [fast, 1.5 fast), or right after the
 * key can expire. */
Test(pace, unconfirmed_is_fast)
{
    for (int k = 0; k < 100; k++) {
        double r = k / 100.0;
        for (unsigned a = 0; a < 20; a++) {
            uint64_t d = wait_retry_delay(&paced, 60000, false, a, r);
            cr_assert(d >= 100 * MS && d < 150 * MS, "delay %llu", (unsigned long long)d);
            d = wait_retry_delay(&fixed, 60000, true, a, r);
            cr_assert(d >= 100 * MS && d < 150 * MS, "delay %llu", (unsigned long long)d);
        }
    }
    cr_assert_eq(wait_retry_delay(&paced, 20, false, 0, 0.9), 21 * MS);
}

/* Confirmed: an exponential backoff from the fast retry (a release that
 * publishes nothing is found soon early in a wait), never past the key's
 * expiry nor the cap; once at the cap, spread over its last quarter. */
Test(pace, confirmed_backs_off_up_to_the_expiry_and_the_cap)
{
    for (int k = 0; k < 100; k++) {
        double r = k / 100.0;
        uint64_t d = wait_retry_delay(&paced, 60000, true, 0, r);
        cr_assert_eq(d, 100 * MS, "the first retry is the fast one: %llu", (unsigned long long)d);
        d = wait_retry_delay(&paced, 60000, true, 3, r);
        cr_assert(d >= 400 * MS && d <= 800 * MS, "delay %llu", (unsigned long long)d);
        d = wait_retry_delay(&paced, 60000, true, 16, r);
        cr_assert(d > 2250 * MS - MS && d <= 3000 * MS, "delay %llu", (unsigned long long)d);
        cr_assert_eq(wait_retry_delay(&paced, 500, true, 7, r), 501 * MS);
        cr_assert_eq(wait_retry_delay(&paced, 1, true, 0, r), 2 * MS);
    }
    cr_assert_eq(wait_retry_delay(&paced, 60000, true, 16, 0.0), 3000 * MS);
    cr_assert_eq(wait_retry_delay(&paced, 60000, true, 16, 0.5), 2625 * MS);
    /* Never shorter from one attempt to the next, at a given jitter. */
    for (unsigned a = 0; a < 20; a++)
        cr_assert_leq(wait_retry_delay(&paced, 60000, true, a, 0.3),
                      wait_retry_delay(&paced, 60000, true, a + 1, 0.3), "attempt %u", a);
}

/* Confirmed with no known expiry: exponential backoff with jitter from the
 * fast retry to the cap. */
Test(pace, backoff_without_expiry)
{
    uint64_t prev_max = 0;
    for (unsigned a = 0; a < 10; a++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int k = 0; k < 100; k++) {
            uint64_t d = wait_retry_delay(&paced, 0, true, a, k / 100.0);
            cr_assert(d >= 100 * MS && d <= 3000 * MS, "attempt %u delay %llu", a,
                      (unsigned long long)d);
            lo = d < lo ? d : lo;
            hi = d > hi ? d : hi;
        }
        cr_assert(hi >= prev_max, "attempt %u: %llu below %llu", a, (unsigned long long)hi,
                  (unsigned long long)prev_max);
        prev_max = hi;
        if (a >= 2)
            cr_assert(hi > lo, "attempt %u has no jitter", a);
    }
    cr_assert_eq(wait_retry_delay(&paced, 0, true, 0, 0.0), 100 * MS);
    cr_assert_eq(wait_retry_delay(&paced, 0, true, 3, 0.0), 400 * MS);
    cr_assert(wait_retry_delay(&paced, 0, true, 9, 0.0) >= 1500 * MS);
    cr_assert(wait_retry_delay(&paced, -1, true, 200, 0.99) <= 3000 * MS);
}

/* A cap below the fast retry means the fast retry; a bad jitter value is
 * taken for the middle. */
Test(pace, odd_settings)
{
    struct wait_pace low = {.fast_ms = 500, .max_ms = 100};
    uint64_t d = wait_retry_delay(&low, 60000, true, 0, 0.0);
    cr_assert_eq(d, 500 * MS);
    cr_assert_eq(wait_retry_delay(&paced, 60000, true, 16, 7.0), 2625 * MS);
    cr_assert_eq(wait_retry_delay(&paced, 60000, true, 16, -1.0), 2625 * MS);
}

/* The entry lasts the store's bound when paced (decoupled from the retry),
 * 3 * fast as before when fixed, never beyond the bound; it is refreshed at
 * half its life. */
Test(pace, entry_lifetime)
{
    cr_assert_eq(wait_entry_ms(&paced, 3000), 3000);
    cr_assert_eq(wait_entry_ms(&fixed, 3000), 300);
    struct wait_pace slow = {.fast_ms = 60000, .max_ms = 0};
    cr_assert_eq(wait_entry_ms(&slow, 3000), 3000);
    struct wait_pace slow_paced = {.fast_ms = 60000, .max_ms = 3000};
    cr_assert_eq(wait_entry_ms(&slow_paced, 3000), 3000);
    cr_assert_eq(wait_refresh_ns(3000), 1500 * MS);
    cr_assert_eq(wait_refresh_ns(300), 150 * MS);
}

/* The refresh goes at half the entry's life from its acquire's send time,
 * never sooner than a fast retry from now. */
Test(pace, refresh_due)
{
    uint64_t sent = 1000 * MS;
    cr_assert_eq(wait_refresh_due(&paced, 3000, sent, sent + 10 * MS), sent + 1500 * MS);
    struct wait_pace slow = {.fast_ms = 60000, .max_ms = 3000};
    cr_assert_eq(wait_refresh_due(&slow, 3000, sent, sent + 10 * MS), sent + 10 * MS + 60000 * MS);
}

/* Bound entries (the agent's keep-alive key keeps them live): the guard of
 * a confirmed name may wait longer, up to guard_ms, five times the cap at
 * most 15 s; the unconfirmed retry and the fixed pacing are as before. */
Test(pace, bound_entries_wait_up_to_the_guard)
{
    cr_assert_eq(wait_guard_ms(3000), 15000);
    cr_assert_eq(wait_guard_ms(1000), 5000);
    cr_assert_eq(wait_guard_ms(10000), 15000);
    cr_assert_eq(wait_guard_ms(20000), 20000, "never below retry_max_ms");
    cr_assert_eq(wait_guard_ms(0), 0, "the fast retry stays");
    const struct wait_pace bound = {
        .fast_ms = 100, .max_ms = 3000, .guard_ms = wait_guard_ms(3000)};
    for (int k = 0; k < 100; k++) {
        double r = k / 100.0;
        uint64_t d = wait_retry_delay(&bound, 600000, true, 16, r);
        cr_assert(d > 11250 * MS - MS && d <= 15000 * MS, "delay %llu", (unsigned long long)d);
        /* Early in a wait, the backoff as without. */
        cr_assert_eq(wait_retry_delay(&bound, 600000, true, 0, r), 100 * MS);
        /* The holder's expiry first, as without. */
        cr_assert_eq(wait_retry_delay(&bound, 4000, true, 16, r), 4001 * MS);
        /* Not confirmed: the fast retry. */
        d = wait_retry_delay(&bound, 600000, false, 5, r);
        cr_assert(d >= 100 * MS && d < 150 * MS, "delay %llu", (unsigned long long)d);
        /* Unknown expiry (another host's turn, which may end with no
         * notice when that host dies): the backoff stops at max_ms. */
        d = wait_retry_delay(&bound, 0, true, 16, r);
        cr_assert(d >= 1500 * MS && d <= 3000 * MS, "delay %llu", (unsigned long long)d);
    }
    /* A bound entry's own life is the long bound, refreshed at half of it:
     * later than any guard's retry, which refreshes it first. */
    uint32_t life = wait_entry_ms(&bound, 60000);
    cr_assert_eq(life, 60000);
    cr_assert_gt(wait_refresh_ns(life), (uint64_t)WAIT_GUARD_MAX_MS * 3 / 2 * MS);
}
