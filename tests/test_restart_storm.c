/* SPDX-License-Identifier: BSD-3-Clause */
/* test_restart_storm.c -- 20 restarts of one of two agents on one Redis, in
 * a row and under load, mixing the four ways an agent restarts: dlockd
 * --successor (a planned restart), SIGUSR2 then a new agent (a supervisor's
 * restart), kill -9 then a new agent (a crash that Restart= brings back) and
 * SIGTERM during a service manager's restart job then a new agent
 * (`systemctl restart`, the fake systemd of fakesd.h). libdlock workers in
 * their own processes, two on each agent, increment a shared counter under
 * one lock and check each write's fencing token, and `dlockctl run` holds
 * another lock with a CMD that runs throughout. Across all of it: no lost
 * update, no fencing token going back, no LOST event, no acquire failing,
 * and the CMD is never signalled.
 *
 * Then one more crash whose agent comes back too late for some leases: LOST
 * exactly for the leases whose validity ended while no agent ran (a libdlock
 * lease and a `dlockctl run`, whose CMD is stopped: status 79), HELD again
 * for those still valid (a libdlock lease and the first CMD), and the lost
 * name goes to the other agent with a higher fencing token. */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakesd.h"
#include "harness.h"

#define WORKERS    4 /* the first half on agent 0 (restarted), the rest on agent 1 */
#define RESTARTS   20
#define INVOCATION "0123456789abcdef0123456789abcdef"
#define BUS_MS     10000 /* dbus-daemon prints its address by then */

struct storm {
    atomic_int stop;
    atomic_flag lock;  /* guards value and highest (the "resource") */
    long value;        /* the counter: read, yield, write +1 under the lock */
    uint64_t highest;  /* the highest fence that wrote */
    atomic_long total; /* increments made, over all workers */
    atomic_int regressions, losts, failures, invalid;
    atomic_int go; /* the agents run: the workers may connect */
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
    while (!atomic_load(&s->go))
        usleep(1000);
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

/* The ways agent 0 restarts, in turn. */
enum restart { SUCCESSOR, SIGUSR2_START, KILL9_START, SERVICE_RESTART, NKINDS };

static void restart(enum restart how)
{
    switch (how) {
    case SUCCESSOR:
        h_agent_successor(0);
        break;
    case SIGUSR2_START:
        cr_assert_eq(kill(H.agent[0].pid, SIGUSR2), 0);
        cr_assert_eq(h_wait_child(H.agent[0].pid, H_STOP_MS), 0);
        H.agent[0].pid = 0;
        h_agent_start_n(0);
        break;
    case KILL9_START:
        h_agent_kill(0);
        h_agent_start_n(0);
        break;
    default: /* the service manager's restart job is there: SIGTERM leaves */
        cr_assert_eq(h_agent_stop(0), 0);
        h_agent_start_n(0);
    }
}

/* A `dlockctl run` on agent 0 holding name with ttl whose CMD runs until
 * the file stop exists. */
static pid_t run_until(const char *name, const char *ttl, const char *stop)
{
    /* CMD marks its start: the key on Redis alone does not say that the
     * grant reached dlockctl, and an agent killed in between would leave
     * dlockctl waiting for its lease, not running CMD. */
    const char *started = h_keepf("%s", h_path(h_keepf("%s.started", name)));
    const char *script = h_keepf(": > %s; while [ ! -e %s ]; do sleep 0.05; done", started, stop);
    const char *args[] = {"-s", H.agent[0].sock, "run", "-t", ttl, name, "--", "sh",
                          "-c", script,          NULL};
    pid_t run = h_ctl_spawn(args);
    H_WAIT_UNTIL(H_START_MS, access(started, F_OK) == 0);
    cr_assert(h_redis_exists(h_key(name)));
    return run;
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fclose(f);
}

ITEST(restart_storm, twenty_restarts_cost_the_holders_nothing)
{
    /* The workers first: a process forked while the fake service manager's
     * thread runs could inherit a lock of the allocator held (a sanitizer
     * build's). They connect once the agents run. */
    struct storm *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(s, MAP_FAILED);
    memset(s, 0, sizeof *s);
    atomic_flag_clear(&s->lock);
    pid_t pids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        pids[i] = h_fork();
        if (pids[i] == 0)
            worker(s, H.agent[i < WORKERS / 2 ? 0 : 1].sock);
    }
    /* Agent 0 runs as a service whose manager has a restart job for it, so
     * that its SIGTERM is `systemctl restart`. */
    struct fakesd *sd = fakesd_start(H.dir, h_scaled_ms(BUS_MS));
    fakesd_set_job(sd, 4242, "restart");
    fakesd_serve(sd);
    h_agent_env(0, "INVOCATION_ID=" INVOCATION);
    h_agent_env(0, h_keepf("DBUS_SYSTEM_BUS_ADDRESS=%s", fakesd_address(sd)));
    h_start_two(NULL);
    atomic_store(&s->go, 1);
    H_WAIT_UNTIL(H_START_MS, atomic_load(&s->ready) == WORKERS);
    /* A CMD that runs until the test says stop, under another lock. */
    const char *stop = h_path("stop");
    pid_t run = run_until("storm-cmd", "30s", stop);
    int kinds[NKINDS] = {0};
    for (int i = 0; i < RESTARTS; i++) {
        long before = made(s);
        H_WAIT_UNTIL(H_EVENT_MS, made(s) >= before + 5);
        restart((enum restart)(i % NKINDS));
        kinds[i % NKINDS]++;
    }
    long before = made(s);
    H_WAIT_UNTIL(H_EVENT_MS, made(s) >= before + 5);
    atomic_store(&s->stop, 1);
    for (int i = 0; i < WORKERS; i++)
        cr_assert_eq(h_wait_child(pids[i], H_EVENT_MS), 0, "worker %d", i);
    cr_assert_eq(s->value, atomic_load(&s->total), "%ld increments made, the counter says %ld",
                 atomic_load(&s->total), s->value);
    cr_assert_eq(atomic_load(&s->regressions), 0, "fencing tokens went back");
    cr_assert_eq(atomic_load(&s->losts), 0, "LOST events");
    cr_assert_eq(atomic_load(&s->failures), 0, "%d failed call(s), the last: %s",
                 atomic_load(&s->failures), dlock_strerror(s->last_error));
    cr_assert_eq(atomic_load(&s->invalid), 0, "leases granted but not valid");
    cr_assert(h_agent_alive(0), "agent 0 is not running after the restarts");
    cr_assert_eq(waitpid(run, NULL, WNOHANG), 0, "the CMD of dlockctl run ended in the storm");
    fprintf(stderr,
            "restart storm: %d restarts (%d --successor, %d SIGUSR2 + start, %d kill -9 + start, "
            "%d service restart jobs), %ld increments over 2 agents, counter %ld, 0 lost updates, "
            "0 fence regressions, 0 LOST, CMD running\n",
            RESTARTS, kinds[SUCCESSOR], kinds[SIGUSR2_START], kinds[KILL9_START],
            kinds[SERVICE_RESTART], atomic_load(&s->total), s->value);

    /* One more crash, and an agent back too late for the short leases. */
    struct h_cl *a = h_client();
    dlock_lease *brief = h_must_acquire(a, "storm-brief", 1000);
    dlock_lease *kept = h_must_acquire(a, "storm-kept", 30000);
    uint64_t brief_fence = dlock_lease_fence(brief);
    const char *stop_brief = h_path("stop-brief");
    pid_t run_brief = run_until("storm-cmd-brief", "1s", stop_brief);
    h_agent_kill(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, brief, DLOCK_STATE_LOST) == 1);
    cr_assert_not(dlock_lease_valid(brief));
    int st = h_wait_child(run_brief, H_EVENT_MS);
    cr_assert_eq(st, 79, "dlockctl run of a lease that ran out while no agent ran: %d", st);
    cr_assert(dlock_lease_valid(kept), "a lease within its validity went invalid");
    h_agent_start_n(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, kept, DLOCK_STATE_HELD) == 1);
    cr_assert(dlock_lease_valid(kept));
    cr_assert_eq(h_events(a, kept, DLOCK_STATE_LOST), 0, "the kept lease was LOST");
    cr_assert_eq(h_events(a, NULL, DLOCK_STATE_LOST), 1, "LOST events: exactly the brief lease's");
    /* The lost name is free for the other agent once its key has expired,
     * with a higher fencing token; the kept ones are still held. */
    struct h_cl *b = h_client_at(1);
    dlock_lease *next = NULL;
    cr_assert_eq(h_acquire(b, "storm-brief", 30000, DLOCK_WAIT_FOREVER, &next), 0);
    cr_assert_gt(dlock_lease_fence(next), brief_fence);
    cr_assert_eq(dlock_lease_release_sync(next), 0);
    cr_assert_eq(dlock_lease_release(brief), DLOCK_ELOST);
    cr_assert_eq(dlock_lease_release_sync(kept), 0);
    H_KEY_GONE(h_key("storm-kept"));

    touch(stop);
    st = h_wait_child(run, H_EVENT_MS);
    cr_assert_eq(st, 0, "dlockctl run exited %d: its CMD did not run throughout", st);
    H_KEY_GONE(h_key("storm"));
    H_KEY_GONE(h_key("storm-cmd"));
    fakesd_stop(sd);
}
