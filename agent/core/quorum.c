/* SPDX-License-Identifier: BSD-3-Clause */
/* quorum.c -- the majority, fencing and restart-exclusion arithmetic of
 * quorum mode. */
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

uint64_t quorum_fence_token(unsigned n, const bool took[], const uint64_t proposed[])
{
    uint64_t token = 0;
    for (unsigned i = 0; i < n; i++)
        if (took[i] && proposed[i] > token)
            token = proposed[i];
    return token;
}

uint64_t quorum_exclusion_ns(bool first, bool restarted, bool durable, bool was_durable,
                             uint64_t up_s, uint32_t max_ttl_ms)
{
    if (!first && !restarted)
        return 0;
    if (durable && (first || was_durable))
        return 0;
    uint64_t up_ns = restarted || up_s == 0 ? 0 : (up_s - 1) * 1000000000ull;
    uint64_t excl_ns = (uint64_t)max_ttl_ms * 1000000ull;
    return up_ns >= excl_ns ? 0 : excl_ns - up_ns;
}

bool quorum_fence_write_back(bool took, uint64_t proposed, uint64_t token)
{
    return took && proposed < token;
}

enum quorum_verdict quorum_fence_verdict(unsigned n, const bool counts[], const uint64_t counter[],
                                         const bool open[], uint64_t token)
{
    unsigned ok = 0, pending = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!counts[i])
            continue;
        if (token && counter[i] >= token)
            ok++;
        else if (open[i])
            pending++;
    }
    /* No refusal settles a grant: without the majority it is no quorum. */
    return quorum_verdict(n, ok, 0, pending, false);
}
