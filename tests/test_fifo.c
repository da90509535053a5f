/* SPDX-License-Identifier: BSD-3-Clause */
/* test_fifo.c -- local waiters for one lock are served in arrival order, one
 * per release. A waiter's arrival is proven, not guessed: after its async
 * acquire, a PING round trip on the same connection shows the agent has read
 * the acquire (it handles one connection's frames in order). */
#include "harness.h"

/* Sends an async acquire on cl and makes sure the agent has queued it. */
static void enqueue(struct h_cl *cl, const char *name, int64_t wait_ms, struct h_acq *w)
{
    h_acquire_async(cl, name, 30000, wait_ms, w);
    cr_assert_eq(dlock_client_ping(cl->c), 0);
    cr_assert_eq(w->done, 0, "granted at once although the lock is held");
}

/* Waiters of ws other than next that completed since `before` was taken. */
static int others_done(const struct h_acq *next, struct h_acq *const *ws, int n, const int *before)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ws[i] != next && ws[i]->done && !before[i])
            k++;
    return k;
}

/* Releases `holder`, then expects `next`, and no other of ws, to be granted. */
static void hand_over(dlock_lease *holder, struct h_acq *next, struct h_acq *const *ws, int n)
{
    int before[8];
    for (int i = 0; i < n; i++)
        before[i] = ws[i]->done;
    cr_assert_eq(dlock_lease_release(holder), 0);
    H_WAIT_UNTIL(H_EVENT_MS, next->done || others_done(next, ws, n, before));
    cr_assert_eq(others_done(next, ws, n, before), 0, "a waiter was granted out of turn");
    cr_assert_eq(next->status, 0, "%s (%d)", dlock_strerror(next->status), next->status);
    /* the others keep waiting while it holds */
    H_HOLDS_FOR(150, others_done(next, ws, n, before) == 0);
}

ITEST(fifo, three_waiters_granted_in_arrival_order)
{
    h_start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client(), *d = h_client();
    dlock_lease *la = h_must_acquire(a, "q", 30000);
    struct h_acq wb, wc, wd;
    /* Arrival order c, b, d: not the order the clients were opened in. */
    enqueue(c, "q", DLOCK_WAIT_FOREVER, &wc);
    enqueue(b, "q", DLOCK_WAIT_FOREVER, &wb);
    enqueue(d, "q", DLOCK_WAIT_FOREVER, &wd);
    struct h_acq *ws[3] = {&wc, &wb, &wd};

    hand_over(la, &wc, ws, 3);
    cr_assert_eq(wb.done + wd.done, 0);
    hand_over(wc.lease, &wb, ws, 3);
    cr_assert_eq(wd.done, 0);
    hand_over(wb.lease, &wd, ws, 3);
    cr_assert(wc.seq < wb.seq && wb.seq < wd.seq, "grant order %d %d %d", wc.seq, wb.seq, wd.seq);
    cr_assert_eq(dlock_lease_release(wd.lease), 0);
    H_KEY_GONE(h_key("q"));
}

ITEST(fifo, timed_out_waiter_leaves_the_queue)
{
    h_start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lease *la = h_must_acquire(a, "tq", 30000);
    struct h_acq wb, wc;
    enqueue(b, "tq", 300, &wb);
    enqueue(c, "tq", DLOCK_WAIT_FOREVER, &wc);
    H_WAIT_UNTIL(H_EVENT_MS, wb.done);
    cr_assert_eq(wb.status, DLOCK_ETIMEDOUT, "%s (%d)", dlock_strerror(wb.status), wb.status);
    cr_assert_eq(wc.done, 0);
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wc.done);
    cr_assert_eq(wc.status, 0);
    cr_assert_eq(dlock_lease_release(wc.lease), 0);
}

ITEST(fifo, closed_waiter_is_skipped)
{
    h_start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lease *la = h_must_acquire(a, "cq", 30000);
    struct h_acq wb, wc;
    enqueue(b, "cq", DLOCK_WAIT_FOREVER, &wb);
    enqueue(c, "cq", DLOCK_WAIT_FOREVER, &wc);
    h_client_close(b);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wc.done);
    cr_assert_eq(wc.status, 0);
    cr_assert_eq(wb.done, 0, "a closed client's callback ran");
    cr_assert_eq(dlock_lease_release(wc.lease), 0);
}

ITEST(fifo, one_client_several_waiters_in_order)
{
    /* Two waits from one connection on the same lock, and one from another. */
    h_start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lease *la = h_must_acquire(a, "mq", 30000);
    struct h_acq w1, w2, w3;
    enqueue(b, "mq", DLOCK_WAIT_FOREVER, &w1);
    enqueue(c, "mq", DLOCK_WAIT_FOREVER, &w2);
    enqueue(b, "mq", DLOCK_WAIT_FOREVER, &w3);
    struct h_acq *ws[3] = {&w1, &w2, &w3};
    hand_over(la, &w1, ws, 3);
    hand_over(w1.lease, &w2, ws, 3);
    hand_over(w2.lease, &w3, ws, 3);
    cr_assert_eq(dlock_lease_release(w3.lease), 0);
}
