/* test_client.c -- the client library under load: bursts of requests sent
 * without reading replies, and many events at once. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

#define BURST 40000 /* over 1 MiB of replies: the agent stops reading such a client */

static int count_done(const struct h_acq *acq, int n, int *ok)
{
    int done = 0;
    *ok = 0;
    for (int i = 0; i < n; i++) {
        done += acq[i].done;
        *ok += acq[i].done && acq[i].status == 0;
    }
    return done;
}

static int count_lost(const struct h_acq *acq, int n)
{
    int lost = 0;
    for (int i = 0; i < n; i++)
        lost += dlock_lease_state(acq[i].lease) == DLOCK_STATE_LOST;
    return lost;
}

ITEST(client, async_burst_without_dispatch_completes)
{
    h_start("max_leases_per_conn = 100000\nmax_waiters_per_conn = 100000\nlog_level = info");
    struct h_cl *a = h_client();
    struct h_acq *acq = calloc(BURST, sizeof *acq);
    cr_assert_not_null(acq);
    /* No dispatch between the sends: the library must read the agent's
     * replies while it waits to write, or both sides stall. */
    for (int i = 0; i < BURST; i++) {
        char name[32];
        snprintf(name, sizeof name, "burst-%d", i);
        h_acquire_async(a, name, 30000, 0, &acq[i]);
    }
    int ok = 0;
    H_WAIT_UNTIL(30000, count_done(acq, BURST, &ok) == BURST);
    cr_assert_eq(ok, BURST, "%d of %d granted", ok, BURST);
    cr_assert_eq(a->disconnected, 0);
    free(acq);
}

ITEST(client, many_lost_events_at_once)
{
    h_start("max_leases_per_conn = 100000\nmax_waiters_per_conn = 100000\nlog_level = warn");
    struct h_cl *a = h_client();
    enum { N = 20000 };
    struct h_acq *acq = calloc(N, sizeof *acq);
    cr_assert_not_null(acq);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "many-%d", i);
        h_acquire_async(a, name, 600, 0, &acq[i]);
    }
    int ok = 0;
    H_WAIT_UNTIL(30000, count_done(acq, N, &ok) == N);
    cr_assert_eq(ok, N);
    /* Every key vanishes behind the agent's back: every lease is lost. */
    freeReplyObject(h_redis_cmd("FLUSHALL"));
    H_WAIT_UNTIL(20000, count_lost(acq, N) == N);
    free(acq);
}
