/* SPDX-License-Identifier: BSD-3-Clause */
/* pace.h -- when a waiting lock asks the store again, alone: the fallback
 * retry that stands in for a lost release notice, paced by what the agent
 * knows (docs/protocol.md, "Waiting"). Pure: no state, no I/O, no clock.
 *
 * While the name's release notices are not known to arrive (no
 * subscription confirmed since the notice link was last set up), a waiter
 * retries fast, every fast_ms to 1.5 * fast_ms, as a lost notice would
 * otherwise strand it. Once a notice of the name came over its
 * subscription, a release wakes the waiter by itself, so the retry is only
 * the guard against a notice lost on the way (or a release that publishes
 * nothing, a plain client's DEL): it backs off exponentially from fast_ms,
 * with jitter, comes when the holder's key can expire if that is sooner
 * (an expiry publishes nothing), and never later than max_ms: a holder
 * that renews keeps pushing its expiry, so max_ms bounds what a lost
 * notice costs.
 *
 * Where the agent's entries in the waiting-hosts records are bound to its
 * keep-alive key (outside Redis Cluster and quorum mode), no retry is
 * needed to keep them live, and a notice link set up anew makes every
 * waiter try again: the guard of a confirmed name behind a key whose
 * expiry is known then comes at that expiry, or after the longer guard_ms
 * (wait_guard_ms()) when that is later, while the notice link is up (the
 * core gives no guard_ms while it is down). Another host's turn, or a key
 * without expiry, keeps the max_ms cap: a dead host's turn ends when its
 * entry stops counting, and nothing tells the waiters. */
#ifndef DLOCKD_PACE_H
#define DLOCKD_PACE_H

#include <stdbool.h>
#include <stdint.h>

/* The agent's settings for it: retry_fallback_ms and retry_max_ms (0: the
 * fast retry whatever the link, as earlier versions did). */
struct wait_pace {
    uint32_t fast_ms;
    uint32_t max_ms;
    /* The longest retry of a confirmed name behind a key with a known
     * expiry, where it is longer than max_ms (bound entries,
     * wait_guard_ms()); 0: max_ms. */
    uint32_t guard_ms;
};

/* How many times retry_max_ms the guard of a confirmed name waits at most
 * where entries are bound, and the most it waits whatever the setting: a
 * quarter of a bound entry's life, so that the retries refresh it. */
#define WAIT_GUARD_FACTOR 5u
#define WAIT_GUARD_MAX_MS 15000u

/* The guard_ms of bound entries for max_ms: max_ms * WAIT_GUARD_FACTOR,
 * at most WAIT_GUARD_MAX_MS and at least max_ms (0 for max_ms 0: the fast
 * retry). */
uint32_t wait_guard_ms(uint32_t max_ms);

/* The delay in ns before the next fallback retry of a lock whose acquire
 * was just answered "taken": pttl_ms is the holder's key's remaining PTTL
 * (0 or less: unknown, or another host's turn), confirmed says whether the
 * name's release notices are known to arrive, attempt counts the "taken"
 * answers since the last notice or grant (0 for the first), r is a jitter
 * value in [0, 1). Never 0, never above max(fast_ms, max_ms, guard_ms) *
 * 1.5 ms. */
uint64_t wait_retry_delay(const struct wait_pace *p, long long pttl_ms, bool confirmed,
                          unsigned attempt, double r);

/* How long this agent's entry in a name's waiting-hosts record lasts
 * (entry_ms, at most cap_ms, the store's bound), and how long after the
 * acquire that wrote it the next one refreshes it: half its lifetime, so
 * that the refresh has the other half to arrive. With max_ms 0 (fixed
 * pacing) the entry lasts 3 * fast_ms as in earlier versions; else the
 * store's bound (for a bound entry, BACKEND_WAIT_BOUND_MAX_MS, whose
 * half-life refresh the guard's retries, at most a quarter of it, come
 * well before). */
uint32_t wait_entry_ms(const struct wait_pace *p, uint32_t cap_ms);
uint64_t wait_refresh_ns(uint32_t entry_ms);
/* When the acquire that refreshes the entry goes out, for an entry of
 * entry_ms written by the acquire sent at `sent`, now being now (ns): at
 * half its life, but never sooner than a fast retry (fast_ms is the most
 * often a waiter asks the store; with a fast_ms over half the entry's life
 * the entry may lapse between two refreshes, as with the fast retry). */
uint64_t wait_refresh_due(const struct wait_pace *p, uint32_t entry_ms, uint64_t sent,
                          uint64_t now);

#endif
