/* SPDX-License-Identifier: BSD-3-Clause */
/* test_restart_storm.c -- 20 agent restarts in a row (--successor,
 * SIGUSR2 then a new agent, kill -9 then a new agent) under load: libdlock
 * workers in their own processes increment a shared counter under one lock
 * and check each write's fencing token, and `dlockctl run` holds another
 * lock with a CMD that runs throughout. Across all of it: no lost update, no
 * fencing token going back, no LOST event, no acquire failing, and the CMD
 * is never signalled. */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define WORKERS  4
#define RESTARTS 20

struct storm {
    atomic_int stop;
    atomic_flag lock;  /* guards value and highest (the "resource") */
    long value;        /* the counter: read, yield, write +1 under the lock */
    uint64_t highest;  /* the highest fence that wrote */
    atomic_long total; /* increments made, over all workers */
    atomic_int regressions, losts, failures, invalid;
    atomic_int ready;
    int last_error;
};

static void on_event(dlock_client *c, dlock_lease *l, dlock_state state, int reason, void *arg)
{
    struct storm *s = arg;
    if (state == DLOCK_STATE_LOST)
        atomic_fetch_add(&s->losts, 1);
}

/* One write to the resource with the lease's fence: refused when a higher
 * fence wrote before (a lease that was not exclusive). */
static void resource_add(struct storm *s, uint64_t fence)
{
    while (atomic_flag_test_and_set(&s->lock))
        ;
    if (fence < s->highest)
        atomic_fetch_add(&s->regressions, 1);
    else
        s->highest = fence;
    long v = s->value;
    atomic_flag_clear(&s->lock);
    sched_yield(); /* a window for another holder, if the lock let one in */
    while (atomic_flag_test_and_set(&s->lock))
        ;
    s->value = v + 1;
    atomic_flag_clear(&s->lock);
    atomic_fetch_add(&s->total, 1);
}

static void worker(struct storm *s, const char *sock)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, sock);
    if (rc != 0) {
        s->last_error = rc;
        atomic_fetch_add(&s->failures, 1);
        _exit(1);
    }
    dlock_client_set_event_cb(c, on_event, s);
    atomic_fetch_add(&s->ready, 1);
    while (!atomic_load(&s->stop)) {
        dlock_acquire_options o = {.ttl_ms = 5000, .wait_ms = DLOCK_WAIT_FOREVER};
        dlock_lease *l = NULL;
        rc = dlock_lease_acquire(c, "storm", &o, &l);
        if (rc != 0) {
            s->last_error = rc;
            atomic_fetch_add(&s->failures, 1);
            continue;
        }
        if (dlock_lease_valid(l))
            resource_add(s, dlock_lease_fence(l));
        else
            atomic_fetch_add(&s->invalid, 1);
        rc = dlock_lease_release(l);
        if (rc != 0 && rc != DLOCK_ELOST) {
            s->last_error = rc;
            atomic_fetch_add(&s->failures, 1);
        }
    }
    dlock_client_close(c);
    _exit(0);
}

/* The increments so far: workers go on between restarts. */
static long made(struct storm *s)
{
    return atomic_load(&s->total);
}

ITEST(restart_storm, twenty_restarts_cost_the_holders_nothing)
{
    h_start(NULL);
    struct storm *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(s, MAP_FAILED);
    memset(s, 0, sizeof *s);
    atomic_flag_clear(&s->lock);
    pid_t pids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        pids[i] = h_fork();
        if (pids[i] == 0)
            worker(s, H.agent[0].sock);
    }
    H_WAIT_UNTIL(H_START_MS, atomic_load(&s->ready) == WORKERS);
    /* A CMD that runs until the test says stop, under another lock. */
    const char *stop = h_path("stop");
    const char *script = h_keepf("while [ ! -e %s ]; do sleep 0.05; done", stop);
    const char *args[] = {"-s", H.agent[0].sock, "run", "storm-cmd", "--", "sh",
                          "-c", script,          NULL};
    pid_t run = h_ctl_spawn(args);
    H_WAIT_UNTIL(H_START_MS, h_redis_exists(h_key("storm-cmd")));
    for (int i = 0; i < RESTARTS; i++) {
        long before = made(s);
        H_WAIT_UNTIL(H_EVENT_MS, made(s) >= before + 5);
        switch (i % 3) {
        case 0:
            h_agent_successor(0);
            break;
        case 1:
            cr_assert_eq(kill(H.agent[0].pid, SIGUSR2), 0);
            cr_assert_eq(h_wait_child(H.agent[0].pid, H_STOP_MS), 0);
            H.agent[0].pid = 0;
            h_agent_start_n(0);
            break;
        default:
            h_agent_kill(0);
            h_agent_start_n(0);
        }
    }
    long before = made(s);
    H_WAIT_UNTIL(H_EVENT_MS, made(s) >= before + 5);
    atomic_store(&s->stop, 1);
    for (int i = 0; i < WORKERS; i++)
        cr_assert_eq(h_wait_child(pids[i], H_EVENT_MS), 0, "worker %d", i);
    FILE *f = fopen(stop, "w");
    cr_assert_not_null(f);
    fclose(f);
    int st = h_wait_child(run, H_EVENT_MS);
    cr_assert_eq(st, 0, "dlockctl run exited %d: its CMD did not run throughout", st);
    cr_assert_eq(s->value, atomic_load(&s->total), "%ld increments made, the counter says %ld",
                 atomic_load(&s->total), s->value);
    cr_assert_eq(atomic_load(&s->regressions), 0, "fencing tokens went back");
    cr_assert_eq(atomic_load(&s->losts), 0, "LOST events");
    cr_assert_eq(atomic_load(&s->failures), 0, "%d failed call(s), the last: %s",
                 atomic_load(&s->failures), dlock_strerror(s->last_error));
    cr_assert_eq(atomic_load(&s->invalid), 0, "leases granted but not valid");
    H_KEY_GONE(h_key("storm"));
    H_KEY_GONE(h_key("storm-cmd"));
}
