/* SPDX-License-Identifier: BSD-3-Clause */
/* admit.h -- the admission rule of each lock kind, alone: given what a lock
 * has granted on this agent, may the first waiter of its queue be granted
 * now, go to the store, or wait; and which requests can never share a name.
 * Pure: no state of its own, no I/O (docs/architecture.md, "Lock kinds").
 *
 * The queue is FIFO for every kind: only its first waiter is ever admitted,
 * so a waiter never passes one that came before it. That is what keeps
 * writers from starving: once an exclusive request waits, the shared ones
 * that come after it wait behind it. */
#ifndef DLOCKD_ADMIT_H
#define DLOCKD_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "kind.h"

/* What a request asks for. */
struct admit_ask {
    enum lock_kind kind;
    uint32_t permits; /* LOCK_SEMAPHORE: the most holders; else 0 */
};

/* What a lock has granted here now. */
struct admit_held {
    uint32_t nholders;
    enum lock_kind kind; /* of every holder, when nholders > 0 */
    uint32_t permits;    /* LOCK_SEMAPHORE: theirs */
    /* LOCK_SHARED: the holders' grant from the store may take one more
     * local holder (its cohort is not used up and the grant is plainly
     * valid). */
    bool can_join;
};

enum admit_verdict {
    ADMIT_STORE, /* nothing here stands in the way: ask the store (beside the
                    holders for a reader or a semaphore's next permit) */
    ADMIT_JOIN,  /* granted now, on the holders' grant from the store */
    ADMIT_WAIT,  /* waits for holders here to leave */
    ADMIT_CLASH, /* can never hold the name together with them (DLOCK_EKIND) */
};

/* Can two requests ever hold or wait for one name at the same time? False
 * for a shared and a semaphore request, and for two semaphore requests with
 * different permits: a name has one kind of counted lock at a time, and one
 * limit. An exclusive request goes with every kind (it takes turns). */
bool admit_compatible(const struct admit_ask *a, const struct admit_ask *b);

/* The rule for the first waiter of the queue. */
enum admit_verdict admit_first(const struct admit_held *h, const struct admit_ask *a);

/* Is ask well formed? 0, or DLOCK_EINVAL with why: a kind this agent does
 * not know, permits on a kind that has none, a semaphore of 0 permits. */
int admit_check(const struct admit_ask *a, const char **why);

#endif
