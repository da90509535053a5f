/* SPDX-License-Identifier: BSD-3-Clause */
/* test_quorum_math.c -- unit tests of the majority and fencing arithmetic of quorum mode
 * (agent/core/quorum.c). */
#include <criterion/criterion.h>

#include "quorum.h"

Test(majority, of_odd_and_even_counts)
{
    static const unsigned expect[][2] = {{1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 3}, {7, 4}, {9, 5}};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        cr_assert_eq(quorum_majority(expect[i][0]), expect[i][1], "majority of %u", expect[i][0]);
}

/* Every split of n nodes into ok, no, open and failed, for both rules,
 * against the definition: won with a majority of successes; open while the
 * nodes still to answer could make one; otherwise taken when the refusals
 * settle it, else no quorum. */
static void check_all(unsigned n)
{
    unsigned maj = n / 2 + 1;
    for (unsigned ok = 0; ok <= n; ok++)
        for (unsigned no = 0; ok + no <= n; no++)
            for (unsigned open = 0; ok + no + open <= n; open++)
                for (int rule = 0; rule < 2; rule++) {
                    enum quorum_verdict want;
                    if (ok >= maj)
                        want = QV_WON;
                    else if (ok + open >= maj)
                        want = QV_OPEN;
                    else if (rule ? no >= 1 : no > n - maj)
                        want = QV_TAKEN;
                    else
                        want = QV_NO_QUORUM;
                    cr_assert_eq(quorum_verdict(n, ok, no, open, rule), want,
                                 "n=%u ok=%u no=%u open=%u any_no_taken=%d", n, ok, no, open, rule);
                }
}

Test(verdict, every_split_of_3_5_7_9_nodes)
{
    for (unsigned n = 3; n <= 9; n += 2)
        check_all(n);
}

Test(verdict, examples)
{
    /* 3 nodes: two yes win at once, whatever the third says later. */
    cr_assert_eq(quorum_verdict(3, 2, 0, 1, true), QV_WON);
    /* One yes, one down, one not answered yet: wait for it. */
    cr_assert_eq(quorum_verdict(3, 1, 0, 1, true), QV_OPEN);
    /* One yes, one held elsewhere, one down: an acquire is busy... */
    cr_assert_eq(quorum_verdict(3, 1, 1, 0, true), QV_TAKEN);
    /* ...a renewal is in doubt, not lost: the down node may still be ours. */
    cr_assert_eq(quorum_verdict(3, 1, 1, 0, false), QV_NO_QUORUM);
    /* Two nodes say "not ours": the renewal is lost. */
    cr_assert_eq(quorum_verdict(3, 1, 2, 0, false), QV_TAKEN);
    /* 5 nodes, 2 yes, 3 down: no quorum for either. */
    cr_assert_eq(quorum_verdict(5, 2, 0, 0, true), QV_NO_QUORUM);
    cr_assert_eq(quorum_verdict(5, 2, 0, 0, false), QV_NO_QUORUM);
}

/* ---- fencing ---- */

Test(fence, token_is_the_highest_proposal_of_the_nodes_that_took_the_key)
{
    const bool took[5] = {true, false, true, true, false};
    /* Nodes that did not take the key may hold anything: never read. */
    const uint64_t proposed[5] = {1000, 9999, 1004, 1002, 8888};
    cr_assert_eq(quorum_fence_token(5, took, proposed), 1004);
    const bool none[3] = {false, false, false};
    cr_assert_eq(quorum_fence_token(3, none, proposed), 0);
    const bool all[3] = {true, true, true};
    const uint64_t same[3] = {77, 77, 77};
    cr_assert_eq(quorum_fence_token(3, all, same), 77);
}

Test(fence, write_back_to_the_nodes_that_took_the_key_below_the_token)
{
    cr_assert(quorum_fence_write_back(true, 1000, 1004));
    cr_assert_not(quorum_fence_write_back(true, 1004, 1004), "its counter is the token already");
    cr_assert_not(quorum_fence_write_back(false, 1000, 1004), "it does not hold our key");
    cr_assert_not(quorum_fence_write_back(false, 0, 1004));
}

/* Every state of every node of 3 and 5, against the definition: won when
 * the counting nodes whose counter reaches the token are a majority; open
 * while the counting nodes with a write-back unanswered could make one;
 * else no quorum (never taken: no refusal settles a grant). */
enum { FN_NONE, FN_AT, FN_ABOVE, FN_OPEN, FN_WRITTEN, FN_REFUSED, FN_STATES };

static void fence_all(unsigned n)
{
    const uint64_t token = 5000;
    unsigned states = 1;
    for (unsigned i = 0; i < n; i++)
        states *= FN_STATES * 2;
    for (unsigned code = 0; code < states; code++) {
        bool counts[9], open[9];
        uint64_t counter[9];
        unsigned ok = 0, pending = 0, c = code;
        for (unsigned i = 0; i < n; i++, c /= FN_STATES * 2) {
            unsigned st = c % FN_STATES;
            counts[i] = (c / FN_STATES) % 2;
            open[i] = st == FN_OPEN;
            counter[i] = st == FN_NONE      ? 0
                         : st == FN_AT      ? token
                         : st == FN_ABOVE   ? token + 3
                         : st == FN_WRITTEN ? token
                                            : token - 4; /* open, or refused */
            if (counts[i] && (st == FN_AT || st == FN_ABOVE || st == FN_WRITTEN))
                ok++;
            else if (counts[i] && st == FN_OPEN)
                pending++;
        }
        unsigned maj = n / 2 + 1;
        enum quorum_verdict want = ok >= maj             ? QV_WON
                                   : ok + pending >= maj ? QV_OPEN
                                                         : QV_NO_QUORUM;
        cr_assert_eq(quorum_fence_verdict(n, counts, counter, open, token), want, "n=%u code=%u", n,
                     code);
    }
}

Test(fence, verdict_every_state_of_3_and_5_nodes)
{
    fence_all(3);
    fence_all(5);
}

Test(fence, verdict_examples)
{
    const bool all[3] = {true, true, true}, none_open[3] = {false, false, false};
    /* Proposals 1000 and 1004 took the key, the third node is held by
     * another: token 1004, node 0 gets it written back. */
    const uint64_t before[3] = {1000, 1004, 0};
    const bool open0[3] = {true, false, false};
    cr_assert_eq(quorum_fence_verdict(3, all, before, open0, 1004), QV_OPEN);
    /* Written back: two counters at the token. */
    const uint64_t after[3] = {1004, 1004, 0};
    cr_assert_eq(quorum_fence_verdict(3, all, after, none_open, 1004), QV_WON);
    /* Refused (the key expired there meanwhile): one counter at the token
     * is no majority, the grant fails. */
    cr_assert_eq(quorum_fence_verdict(3, all, before, none_open, 1004), QV_NO_QUORUM);
    /* A node excluded after a restart does not count, whatever it holds. */
    const bool two_out[3] = {true, false, false};
    const uint64_t high[3] = {1004, 1004, 1004};
    cr_assert_eq(quorum_fence_verdict(3, two_out, high, none_open, 1004), QV_NO_QUORUM);
    /* Token 0 (nobody took the key) grants nothing. */
    const uint64_t zero[3] = {0, 0, 0};
    cr_assert_eq(quorum_fence_verdict(3, all, zero, none_open, 0), QV_NO_QUORUM);
}

/* The restart exclusion (docs/quorum.md): until max_ttl_ms after the node's
 * start, by its uptime when first seen, or from now after a new run id; none
 * for a node that keeps every write (after a restart, only if it did before
 * too), or one seen again with the same run id. */
Test(exclusion, from_the_start_of_a_node_that_may_have_lost_keys)
{
    const uint64_t S = 1000000000ull;
    /* First seen, up 0 s or 1 s: it may have started just now. */
    cr_assert_eq(quorum_exclusion_ns(true, false, false, false, 0, 30000), 30 * S);
    cr_assert_eq(quorum_exclusion_ns(true, false, false, false, 1, 30000), 30 * S);
    /* Up 11 s: started at least 10 s ago. */
    cr_assert_eq(quorum_exclusion_ns(true, false, false, false, 11, 30000), 20 * S);
    /* Up long enough: no lease from before its start is left. */
    cr_assert_eq(quorum_exclusion_ns(true, false, false, false, 31, 30000), 0);
    cr_assert_eq(quorum_exclusion_ns(true, false, false, false, 3600, 30000), 0);
    /* A new run id is a start now, whatever its uptime. */
    cr_assert_eq(quorum_exclusion_ns(false, true, false, false, 3600, 30000), 30 * S);
    /* The same run id again: nothing was lost. */
    cr_assert_eq(quorum_exclusion_ns(false, false, false, false, 0, 30000), 0);
    /* Durable: first seen, or restarted after being durable before. */
    cr_assert_eq(quorum_exclusion_ns(true, false, true, false, 0, 30000), 0);
    cr_assert_eq(quorum_exclusion_ns(false, true, true, true, 0, 30000), 0);
    /* Durable now but not before the restart: the writes before it may be lost. */
    cr_assert_eq(quorum_exclusion_ns(false, true, true, false, 0, 30000), 30 * S);
}
