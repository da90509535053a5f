/* SPDX-License-Identifier: BSD-3-Clause */
/* test_svcrestart.c -- dlockd run as a service (INVOCATION_ID set) tells
 * `systemctl restart` from `systemctl stop` by asking the service manager on
 * the system bus, here a private dbus-daemon on which a fake
 * org.freedesktop.systemd1 answers (fakesd.h): a restart job leaves the
 * leases to the next agent, which the client resumes (rawclient.h); a stop
 * job releases them and removes the state; with no answer, SIGTERM is a
 * stop. docs/restarts.md, dlockd(8) RESTARTS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakesd.h"
#include "harness.h"
#include "rawclient.h"
#include "shm.h"
#include "wire.h"

#define INVOCATION "0123456789abcdef0123456789abcdef"
#define BUS_MS     10000 /* dbus-daemon prints its address by then */
#define JOB_ID     4242

static const char *state_dir(void)
{
    return h_keepf("%s.state", H.agent[0].sock);
}

/* A private bus in DIR with the fake service manager on it, whose unit has
 * a job of `type` (NULL: no job). If the test fails, the bus dies with it
 * and goes with DIR. */
static struct fakesd *bus_with_job(const char *type)
{
    struct fakesd *sd = fakesd_start(H.dir, h_scaled_ms(BUS_MS));
    fakesd_set_job(sd, type ? JOB_ID : 0, type);
    fakesd_serve(sd);
    return sd;
}

/* Agent 0 will run as systemd runs it, the system bus at address. */
static void as_a_service(const char *address)
{
    h_agent_env(0, "INVOCATION_ID=" INVOCATION);
    char env[600];
    snprintf(env, sizeof env, "DBUS_SYSTEM_BUS_ADDRESS=%s", address);
    h_agent_env(0, env);
}

/* Whether agent 0's log says `what`. */
static int logged(const char *what)
{
    const char *log = h_read_file(H.agent[0].log);
    return log && strstr(log, what);
}

/* `systemctl restart`: SIGTERM during a restart job. The agent exits 0
 * leaving the lease (its key, its page, the state directory); the next agent
 * takes it over and the client resumes its connection with it. */
ITEST(svcrestart, restart_job_leaves_the_lease_to_the_next_agent)
{
    struct fakesd *sd = bus_with_job("restart");
    as_a_service(fakesd_address(sd));
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    cr_assert(c.ok.flags & WIRE_HELLO_RESUMABLE, "a state directory, yet not resumable");
    struct wire_granted g = rc_acquire(&c, "svc", 20000);
    char *token = h_keep(h_redis_get(h_key("svc")));
    pid_t pid = H.agent[0].pid;
    cr_assert_eq(h_agent_stop(0), 0);
    cr_assert_eq(fakesd_asked_about(sd, pid), 1, "GetUnitByPID: %u calls, the last about pid %ld",
                 fakesd_calls(sd), (long)fakesd_last_pid(sd));
    cr_assert(logged("the service manager restarts the agent"), "%s", h_read_file(H.agent[0].log));
    /* Nothing released: the key, the page and the state are there. */
    cr_assert_str_eq(h_redis_get(h_key("svc")), token);
    cr_assert(rc_valid(&c, g.slot, g.lease_id), "the lease is not valid after the restart's stop");
    cr_assert_eq(access(state_dir(), F_OK), 0, "no state directory after a restart's stop");

    h_agent_start_n(0);
    /* Taken over: confirmed by a renewal, a deadline past the predecessor's. */
    rc_wait_confirmed(&c, &g);
    rc_resume_held(&c, &g);
    cr_assert_str_eq(h_redis_get(h_key("svc")), token);
    rc_release(&c, g.lease_id);
    H_KEY_GONE(h_key("svc"));

    /* The next SIGTERM, with no job, is a stop. */
    fakesd_set_job(sd, 0, NULL);
    pid = H.agent[0].pid;
    cr_assert_eq(h_agent_stop(0), 0);
    cr_assert_eq(fakesd_asked_about(sd, pid), 1);
    cr_assert_neq(access(state_dir(), F_OK), 0, "state directory left after a stop");
    fakesd_stop(sd);
}

/* `systemctl stop`: SIGTERM during a stop job releases the lease at once
 * and removes the state directory. */
ITEST(svcrestart, stop_job_releases_and_removes_the_state)
{
    struct fakesd *sd = bus_with_job("stop");
    as_a_service(fakesd_address(sd));
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "svc-stop", 20000);
    struct stat st;
    cr_assert_eq(stat(state_dir(), &st), 0);
    pid_t pid = H.agent[0].pid;
    cr_assert_eq(h_agent_stop(0), 0);
    cr_assert_eq(fakesd_asked_about(sd, pid), 1, "GetUnitByPID: %u calls, the last about pid %ld",
                 fakesd_calls(sd), (long)fakesd_last_pid(sd));
    H_KEY_GONE(h_key("svc-stop"));
    cr_assert_neq(access(state_dir(), F_OK), 0, "state directory left after a stop");
    cr_assert(!rc_valid(&c, g.slot, g.lease_id), "the lease is valid after a stop");
    cr_assert(!logged("cannot tell"), "%s", h_read_file(H.agent[0].log));
    fakesd_stop(sd);
}

/* No bus at the address: the agent cannot ask, says so, and stops. */
ITEST(svcrestart, no_bus_is_a_stop)
{
    as_a_service(h_keepf("unix:path=%s", h_path("nothing")));
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    rc_acquire(&c, "svc-nobus", 20000);
    cr_assert_eq(h_agent_stop(0), 0);
    H_KEY_GONE(h_key("svc-nobus"));
    cr_assert_neq(access(state_dir(), F_OK), 0, "state directory left after a stop");
    cr_assert(logged("cannot tell a restart from a stop"), "%s", h_read_file(H.agent[0].log));
}

/* The harness's agents are no service's, even when the tests run in one:
 * with INVOCATION_ID in the test's environment but not given to the agent,
 * a restart job on the bus is never asked about, and SIGTERM is a stop. */
ITEST(svcrestart, without_invocation_id_the_agent_does_not_ask)
{
    struct fakesd *sd = bus_with_job("restart");
    cr_assert_eq(setenv("INVOCATION_ID", INVOCATION, 1), 0);
    char env[600];
    snprintf(env, sizeof env, "DBUS_SYSTEM_BUS_ADDRESS=%s", fakesd_address(sd));
    h_agent_env(0, env);
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    rc_acquire(&c, "svc-plain", 20000);
    cr_assert_eq(h_agent_stop(0), 0);
    H_KEY_GONE(h_key("svc-plain"));
    cr_assert_eq(fakesd_calls(sd), 0);
    fakesd_stop(sd);
}
