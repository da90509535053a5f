/* SPDX-License-Identifier: BSD-3-Clause */
/* quorum.h -- the majority, fencing and restart-exclusion arithmetic of
 * quorum mode. Pure. */
#ifndef DLOCKD_QUORUM_H
#define DLOCKD_QUORUM_H

#include <stdbool.h>
#include <stdint.h>

/* Nodes needed for a majority of n. */
static inline unsigned quorum_majority(unsigned n)
{
    return n / 2 + 1;
}

enum quorum_verdict {
    QV_OPEN,     /* not settled: enough nodes may still answer */
    QV_WON,      /* a majority succeeded */
    QV_TAKEN,    /* lost to definite refusals (the key is held by another) */
    QV_NO_QUORUM /* lost because too few nodes answered or counted */
};

/* The outcome so far of one operation sent to n nodes: ok nodes succeeded,
 * no nodes refused it for good (the key held by someone else, or not ours),
 * open nodes may still answer; the others failed, timed out or do not count.
 * Once a majority is out of reach, the refusals decide between TAKEN and
 * NO_QUORUM: any single one when any_no_taken (an acquire: somebody holds
 * the lock somewhere, so it is busy rather than unreachable), otherwise only
 * so many that no majority could have been ours (a renewal: the lease is
 * lost rather than in doubt). */
enum quorum_verdict quorum_verdict(unsigned n, unsigned ok, unsigned no, unsigned open,
                                   bool any_no_taken);

/* ---- fencing (docs/fencing.md) ----
 *
 * Phase 1 of an acquire sends the key to every node with one floor; a node
 * that takes it proposes a token above its slot's counter (and the floor)
 * and raises the counter to it. Phase 2 makes the grant's token safe. */

/* The grant's token: the highest proposal of the n nodes that took the key
 * (took[i], proposed[i]); 0 when none did. */
uint64_t quorum_fence_token(unsigned n, const bool took[], const uint64_t proposed[]);

/* Whether a node must have the token written back (its counter raised to
 * it, while it still holds our key) before it counts for the grant: it took
 * the key with a lower proposal. */
bool quorum_fence_write_back(bool took, uint64_t proposed, uint64_t token);

/* Phase 2 of an acquire over n nodes: the grant needs a majority of nodes
 * that count now (counts[i]) whose counter is at least the token. counter[i]
 * is node i's counter as known (its proposal; the token once written back;
 * 0 unknown) and open[i] says its write-back is unanswered. QV_WON, QV_OPEN
 * while the open write-backs could still make that majority, else
 * QV_NO_QUORUM. */
enum quorum_verdict quorum_fence_verdict(unsigned n, const bool counts[], const uint64_t counter[],
                                         const bool open[], uint64_t token);

/* ---- the restart exclusion (docs/quorum.md) ----
 *
 * A node may have lost keys of leases that are still valid when it
 * restarted, or when it was started less than max_ttl_ms before it is first
 * seen; it then counts toward no quorum until max_ttl_ms after its start. A
 * new run id counts as a start now (another server, up for long, may have
 * been put in its place). A node that keeps every acknowledged write
 * (appendonly yes, appendfsync always) lost nothing: it is not excluded,
 * after a restart only if it kept them before it too. */

/* How long from now the node just connected again counts toward no quorum,
 * in ns (0: it counts at once). first: it is seen for the first time;
 * restarted: its run id changed; durable, was_durable: it keeps every
 * acknowledged write now, and did when last seen; up_s: its uptime in whole
 * seconds (a difference of two whole-second stamps: it may have been up a
 * second less, so its start is taken as late as it can have been). */
uint64_t quorum_exclusion_ns(bool first, bool restarted, bool durable, bool was_durable,
                             uint64_t up_s, uint32_t max_ttl_ms);

#endif
