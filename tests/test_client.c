/* SPDX-License-Identifier: BSD-3-Clause */
/* test_client.c -- the client library under load: bursts of requests sent
 * without reading replies, and many events at once. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define BURST 40000 /* over 1 MiB of replies: the agent stops reading such a client */

static int count_lost(const struct h_acq *acq, int n)
{
    int lost = 0;
    for (int i = 0; i < n; i++)
        lost += dlock_lease_state(acq[i].lease) == DLOCK_STATE_LOST;
    return lost;
}

ITEST(client, async_burst_without_dispatch_completes)
{
    h_start("max_leases_per_conn = 100000\nmax_waiters_per_conn = 100000\nlog_level = info\n"
            "[policy]\nmax_leases_per_uid = 0\nmax_waiters_per_uid = 0\nrenew_budget_per_uid = 0");
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
    H_WAIT_UNTIL(30000, h_acq_done(acq, BURST, &ok) == BURST);
    cr_assert_eq(ok, BURST, "%d of %d granted", ok, BURST);
    cr_assert_eq(a->disconnected, 0);
    free(acq);
}

ITEST(client, many_lost_events_at_once)
{
    h_start("max_leases_per_conn = 100000\nmax_waiters_per_conn = 100000\nlog_level = warn\n"
            "[policy]\nmax_leases_per_uid = 0\nmax_waiters_per_uid = 0\nrenew_budget_per_uid = 0");
    struct h_cl *a = h_client();
    enum { N = 20000 };
    struct h_acq *acq = calloc(N, sizeof *acq);
    cr_assert_not_null(acq);
    /* The default TTL: 20000 leases ask for 2000 renewals a second, which
     * go ahead of the acquires still coming, and leave them room on a busy
     * machine too. Each loss shows at the lease's next renewal, within 10 s. */
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "many-%d", i);
        h_acquire_async(a, name, 30000, 0, &acq[i]);
    }
    int ok = 0;
    H_WAIT_UNTIL(30000, h_acq_done(acq, N, &ok) == N);
    cr_assert_eq(ok, N);
    /* Every key vanishes behind the agent's back: every lease is lost. */
    freeReplyObject(h_redis_cmd("FLUSHALL"));
    H_WAIT_UNTIL(30000, count_lost(acq, N) == N);
    free(acq);
}

/* In a grandchild living in a new time namespace whose clock `which`
 * ("boottime" or "monotonic") runs 50 s behind the agent's, opens a client
 * and, when that works, takes a lease. Exit codes: 0 refused with
 * DLOCK_ECLOCK, 1 opened and the lease is valid, 2 another error, 77 no
 * time namespaces here. */
static int open_in_shifted_time_ns(const char *sock, const char *which)
{
    if (unshare(CLONE_NEWTIME) != 0)
        return 77;
    FILE *f = fopen("/proc/self/timens_offsets", "w");
    if (!f || fprintf(f, "%s -50 0\n", which) < 0 || fclose(f) != 0)
        return 77;
    pid_t pid = fork();
    if (pid == 0) {
        dlock_client *c = NULL;
        dlock_lease *l = NULL;
        int rc = dlock_client_open(&c, sock);
        if (rc == 0)
            rc = dlock_lease_acquire(c, which, &(dlock_acquire_options){.ttl_ms = 30000}, &l);
        int valid = rc == 0 && dlock_lease_valid(l);
        dlock_client_close(c);
        _exit(rc == DLOCK_ECLOCK ? 0 : valid ? 1 : 2);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return 2;
    return WEXITSTATUS(st);
}

static int shifted_client(const char *which)
{
    pid_t pid = h_fork();
    if (pid == 0)
        _exit(open_in_shifted_time_ns(H.agent[0].sock, which));
    int st = h_wait_child(pid, 10000);
    if (st == 77)
        h_skip("no time namespaces here (needs Linux 5.6 and CAP_SYS_ADMIN)");
    return st;
}

/* Deadlines are on CLOCK_BOOTTIME, which keeps counting through a suspend as
 * the Redis TTLs do: a client whose boottime clock is not the agent's must
 * be refused, or every validity check would be 50 s too generous. */
ITEST(client, another_boottime_clock_is_refused)
{
    h_start(NULL);
    int st = shifted_client("boottime");
    cr_assert_eq(st, 0, "a client with a shifted boottime clock: %s",
                 st == 1 ? "accepted" : "failed otherwise");
    /* A client in the agent's own time namespace still works. */
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "same-clock", 30000);
    cr_assert(dlock_lease_valid(l));
}

/* The library and the agent use the one boottime clock, not the monotonic
 * one: a client whose CLOCK_MONOTONIC alone is shifted is served, and its
 * lease checks out valid. */
ITEST(client, only_the_boottime_clock_matters)
{
    h_start(NULL);
    int st = shifted_client("monotonic");
    cr_assert_eq(st, 1, "a client with a shifted monotonic clock: %s",
                 st == 0 ? "refused" : "failed");
}

/* The deadline the library reports is on CLOCK_BOOTTIME: a 30 s lease ends
 * between now and now + 30 s on that clock. */
ITEST(client, deadlines_are_on_the_boottime_clock)
{
    h_start(NULL);
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    int64_t before = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "boottime", 30000);
    int64_t deadline = dlock_lease_deadline_ns(l);
    cr_assert_gt(deadline, before);
    cr_assert_leq(deadline, before + 30000 * (int64_t)1000000);
}
