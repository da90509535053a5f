/* SPDX-License-Identifier: BSD-3-Clause */
/* quorum.c -- the majority arithmetic of quorum mode. */
#include "quorum.h"

enum quorum_verdict quorum_verdict(unsigned n, unsigned ok, unsigned no, unsigned open,
                                   bool any_no_taken)
{
    unsigned majority = quorum_majority(n);
    if (ok >= majority)
        return QV_WON;
    if (ok + open >= majority)
        return QV_OPEN;
    unsigned settling = any_no_taken ? 1 : n - majority + 1;
    return no >= settling ? QV_TAKEN : QV_NO_QUORUM;
}
