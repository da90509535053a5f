/* SPDX-License-Identifier: BSD-3-Clause */
/* pace.c -- the pacing of a waiting lock's fallback retry (pace.h). */
#include "pace.h"

#include "table.h"
#include "util.h"

/* Backoff doubles from fast_ms up to the cap: 2^16 covers any cap. */
#define ATTEMPT_MAX 16u

uint64_t wait_retry_delay(const struct wait_pace *p, long long pttl_ms, bool confirmed,
                          unsigned attempt, double r)
{
    if (!confirmed || p->max_ms == 0)
        return waiter_retry_delay(p->fast_ms, pttl_ms, r);
    uint64_t fast = (uint64_t)p->fast_ms * NS_PER_MS;
    /* The long guard only behind a key whose expiry is known: another
     * host's turn (or a key without expiry) may end with no notice at all,
     * when that host died and its entry stopped counting. */
    uint32_t most = pttl_ms > 0 && p->guard_ms > p->max_ms ? p->guard_ms : p->max_ms;
    uint64_t cap = (uint64_t)(most > p->fast_ms ? most : p->fast_ms) * NS_PER_MS;
    if (r < 0 || r >= 1)
        r = 0.5;
    /* Spread the retries of many names over the last quarter of the cap. */
    uint64_t longest = cap - (uint64_t)((double)(cap / 4) * r);
    /* Exponential backoff from the fast retry, with equal jitter (half
     * fixed, half random), up to the cap: a release that publishes nothing
     * (a foreign client's bare DEL) early in a wait is found within a few
     * fast retries, and a long wait costs the store a retry per cap. */
    unsigned n = attempt < ATTEMPT_MAX ? attempt : ATTEMPT_MAX;
    uint64_t backoff = fast << n, delay = longest;
    if (backoff < cap) {
        delay = backoff / 2 + (uint64_t)((double)(backoff / 2) * r);
        if (delay < fast)
            delay = fast;
        if (delay > longest)
            delay = longest;
    }
    if (pttl_ms > 0) {
        /* No notice comes when the key expires: try right after it can. */
        uint64_t expiry = ((uint64_t)pttl_ms + 1) * NS_PER_MS;
        if (expiry < delay)
            delay = expiry;
    }
    return delay;
}

uint32_t wait_guard_ms(uint32_t max_ms)
{
    uint64_t g = (uint64_t)max_ms * WAIT_GUARD_FACTOR;
    if (g > WAIT_GUARD_MAX_MS)
        g = WAIT_GUARD_MAX_MS;
    return g > max_ms ? (uint32_t)g : max_ms;
}

uint32_t wait_entry_ms(const struct wait_pace *p, uint32_t cap_ms)
{
    uint64_t want = p->max_ms ? cap_ms : 3ull * p->fast_ms;
    return want < cap_ms ? (uint32_t)want : cap_ms;
}

uint64_t wait_refresh_ns(uint32_t entry_ms)
{
    return (uint64_t)entry_ms * NS_PER_MS / 2;
}

uint64_t wait_refresh_due(const struct wait_pace *p, uint32_t entry_ms, uint64_t sent, uint64_t now)
{
    uint64_t refresh = sent + wait_refresh_ns(entry_ms);
    uint64_t soonest = now + (uint64_t)p->fast_ms * NS_PER_MS;
    return refresh > soonest ? refresh : soonest;
}
