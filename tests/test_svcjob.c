/* SPDX-License-Identifier: BSD-3-Clause */
/* test_svcjob.c -- unit tests of agent/shell/svcjob.c: a private
 * dbus-daemon (from PATH) stands for the system bus, and a thread of the test
 * serves a fake org.freedesktop.systemd1 on it (tests/fakesd.c):
 * Manager.GetUnitByPID, a unit with its Job, a job with its JobType. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fakesd.h"
#include "svcjob.h"

#define START_MS   10000 /* dbus-daemon prints its address by then */
#define INVOCATION "0123456789abcdef0123456789abcdef"

static char dir[64];
static struct fakesd *sd;

/* The fake manager on the bus, its unit with job job_id (0: none) of type. */
static void serve(uint32_t job_id, const char *type)
{
    fakesd_set_job(sd, job_id, type);
    fakesd_serve(sd);
}

static void start_bus(void)
{
    snprintf(dir, sizeof dir, "/tmp/dlock-svcjob-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    sd = fakesd_start(dir, START_MS);
    cr_assert_eq(setenv("DBUS_SYSTEM_BUS_ADDRESS", fakesd_address(sd), 1), 0);
    cr_assert_eq(setenv("INVOCATION_ID", INVOCATION, 1), 0);
}

static void stop_all(void)
{
    fakesd_stop(sd);
    sd = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(svcjob, .init = start_bus, .fini = stop_all);

Test(svcjob, restart_job_means_a_successor)
{
    serve(4242, "restart");
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 1, "%s", why);
    cr_assert_neq(strstr(why, "restart"), NULL, "%s", why);
    cr_assert_eq(fakesd_calls(sd), 1);
    cr_assert_eq(fakesd_last_pid(sd), getpid(), "GetUnitByPID asked about pid %ld",
                 (long)fakesd_last_pid(sd));
}

Test(svcjob, try_restart_job_means_a_successor)
{
    serve(4242, "try-restart");
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 1, "%s", why);
}

Test(svcjob, stop_job_means_none)
{
    serve(4242, "stop");
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 0, "%s", why);
    cr_assert_neq(strstr(why, "stop"), NULL, "%s", why);
    cr_assert_eq(fakesd_calls(sd), 1);
}

/* "reload-or-start" is a reload (or a start), never a stop of ours. */
Test(svcjob, reload_or_start_job_means_none)
{
    serve(4242, "reload-or-start");
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 0, "%s", why);
}

Test(svcjob, no_job_means_none)
{
    serve(0, "restart"); /* the type is never asked for */
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 0, "%s", why);
    cr_assert_neq(strstr(why, "no job"), NULL, "%s", why);
}

Test(svcjob, no_unit_for_our_pid_means_none)
{
    fakesd_set_no_unit(sd, true);
    serve(4242, "restart");
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 0, "%s", why);
    cr_assert_neq(strstr(why, "not in a unit"), NULL, "%s", why);
    cr_assert_eq(fakesd_calls(sd), 1);
}

/* Without INVOCATION_ID, not even a restart job is looked at: no call. */
Test(svcjob, without_invocation_id_the_bus_is_not_touched)
{
    serve(4242, "restart");
    cr_assert_eq(unsetenv("INVOCATION_ID"), 0);
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 0, "%s", why);
    cr_assert_neq(strstr(why, "INVOCATION_ID"), NULL, "%s", why);
    cr_assert_eq(setenv("INVOCATION_ID", "", 1), 0);
    cr_assert_eq(svcjob_restarting(why, sizeof why), 0, "%s", why);
    cr_assert_eq(fakesd_calls(sd), 0);
    /* The same fake, asked, says restart. */
    cr_assert_eq(setenv("INVOCATION_ID", INVOCATION, 1), 0);
    cr_assert_eq(svcjob_restarting(why, sizeof why), 1, "%s", why);
    cr_assert_eq(fakesd_calls(sd), 1);
}

/* The name is not on the bus: an error reply, not an answer. */
Test(svcjob, no_service_manager_on_the_bus_is_an_error)
{
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), -1, "%s", why);
    cr_assert_neq(strstr(why, "GetUnitByPID"), NULL, "%s", why);
}

Test(svcjob, no_bus_is_an_error)
{
    char nothing[128];
    snprintf(nothing, sizeof nothing, "unix:path=%s/nothing", dir);
    cr_assert_eq(setenv("DBUS_SYSTEM_BUS_ADDRESS", nothing, 1), 0);
    char why[256] = "";
    cr_assert_eq(svcjob_restarting(why, sizeof why), -1);
    cr_assert_neq(why[0], '\0');
    cr_assert_neq(strstr(why, "system bus"), NULL, "%s", why);
    /* A NULL why is allowed. */
    cr_assert_eq(svcjob_restarting(NULL, 0), -1);
}

/* A bus that takes the connection and never answers (a listening socket
 * nobody accepts on) holds the caller for SVCJOB_TIMEOUT_USEC, not for
 * sd-bus's own authentication timeout. */
/* Without the bound the call would wait for sd-bus's own 90 s: the test's
 * timeout catches that, no clock is read. */
Test(svcjob, a_wedged_bus_is_an_error_in_bounded_time, .timeout = 30)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(s, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/wedged", dir);
    cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(s, 8), 0);
    char wedged[160];
    snprintf(wedged, sizeof wedged, "unix:path=%s", sa.sun_path);
    cr_assert_eq(setenv("DBUS_SYSTEM_BUS_ADDRESS", wedged, 1), 0);
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), -1, "%s", why);
    cr_assert_neq(strstr(why, "no answer"), NULL, "%s", why);
    close(s);
}
