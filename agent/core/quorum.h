/* SPDX-License-Identifier: BSD-3-Clause */
/* quorum.h -- the majority arithmetic of quorum mode. Pure. */
#ifndef DLOCKD_QUORUM_H
#define DLOCKD_QUORUM_H

#include <stdbool.h>

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

#endif
