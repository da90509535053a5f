/* SPDX-License-Identifier: BSD-3-Clause */
/* test_quorum_math.c -- unit tests of the majority arithmetic of quorum mode
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
