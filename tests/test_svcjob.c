/* SPDX-License-Identifier: BSD-3-Clause */
/* test_svcjob.c -- unit tests of agent/shell/svcjob.c: a private
 * dbus-daemon (from PATH) stands for the system bus, and a thread of the test
 * serves a fake org.freedesktop.systemd1 on it with sd-bus object vtables:
 * Manager.GetUnitByPID, a unit with its Job, a job with its JobType. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "svcjob.h"

#define UNIT_PATH  "/org/freedesktop/systemd1/unit/dlockd_2eservice"
#define JOB_PATH   "/org/freedesktop/systemd1/job/4242"
#define START_MS   10000 /* dbus-daemon prints its address by then */
#define INVOCATION "0123456789abcdef0123456789abcdef"

/* What the fake manager answers, set before it serves. */
static struct {
    bool no_unit;     /* GetUnitByPID answers NoUnitForPID */
    uint32_t job_id;  /* the unit's job, 0 = none */
    const char *type; /* its JobType */
} fake;
static atomic_uint by_pid_calls;    /* GetUnitByPID calls seen */
static _Atomic uint32_t by_pid_pid; /* the pid the last one asked about */

static char dir[64];
static char address[512];
static pid_t daemon_pid = -1;
static sd_bus *server;
static int stop_fd = -1;
static pthread_t server_thread;
static bool serving;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the fake service manager ---- */

static int get_unit_by_pid(sd_bus_message *m, void *userdata, sd_bus_error *ret_error)
{
    uint32_t pid = 0;
    int r = sd_bus_message_read(m, "u", &pid);
    if (r < 0)
        return r;
    by_pid_pid = pid;
    by_pid_calls++;
    if (fake.no_unit)
        return sd_bus_reply_method_errorf(m, "org.freedesktop.systemd1.NoUnitForPID",
                                          "PID %u does not belong to any loaded unit.", pid);
    return sd_bus_reply_method_return(m, "o", UNIT_PATH);
}

/* As systemd's property_get_job(): (0, "/") when the unit has no job. */
static int get_job(sd_bus *bus, const char *path, const char *iface, const char *prop,
                   sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
    return sd_bus_message_append(reply, "(uo)", fake.job_id, fake.job_id ? JOB_PATH : "/");
}

static int get_job_id(sd_bus *bus, const char *path, const char *iface, const char *prop,
                      sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
    return sd_bus_message_append(reply, "u", fake.job_id);
}

static int get_job_type(sd_bus *bus, const char *path, const char *iface, const char *prop,
                        sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
    return sd_bus_message_append(reply, "s", fake.type);
}

static const sd_bus_vtable manager_vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_METHOD("GetUnitByPID", "u", "o", get_unit_by_pid, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_VTABLE_END,
};
static const sd_bus_vtable unit_vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("Job", "(uo)", get_job, 0, 0),
    SD_BUS_VTABLE_END,
};
static const sd_bus_vtable job_vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("Id", "u", get_job_id, 0, SD_BUS_VTABLE_PROPERTY_CONST),
    SD_BUS_PROPERTY("JobType", "s", get_job_type, 0, SD_BUS_VTABLE_PROPERTY_CONST),
    SD_BUS_VTABLE_END,
};

/* The server's loop, until stop_fd is written. */
static void *serve_loop(void *arg)
{
    for (;;) {
        int r = sd_bus_process(server, NULL);
        if (r < 0)
            break;
        if (r > 0)
            continue;
        uint64_t until = UINT64_MAX;
        int timeout = -1;
        if (sd_bus_get_timeout(server, &until) >= 0 && until != UINT64_MAX) {
            int64_t left = (int64_t)(until / 1000) - mono_ms();
            timeout = left < 0 ? 0 : (int)left + 1;
        }
        struct pollfd p[2] = {{.fd = sd_bus_get_fd(server), .events = sd_bus_get_events(server)},
                              {.fd = stop_fd, .events = POLLIN}};
        if (poll(p, 2, timeout) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
    }
    return NULL;
}

/* Connects to the private bus as org.freedesktop.systemd1 and serves the
 * fake in a thread. */
static void serve(uint32_t job_id, const char *type)
{
    fake.job_id = job_id;
    fake.type = type;
    cr_assert_geq(sd_bus_new(&server), 0);
    cr_assert_geq(sd_bus_set_address(server, address), 0);
    cr_assert_geq(sd_bus_set_bus_client(server, 1), 0);
    int r = sd_bus_start(server);
    cr_assert_geq(r, 0, "connecting to %s: %s", address, strerror(-r));
    cr_assert_geq(sd_bus_add_object_vtable(server, NULL, "/org/freedesktop/systemd1",
                                           "org.freedesktop.systemd1.Manager", manager_vtable,
                                           NULL),
                  0);
    cr_assert_geq(sd_bus_add_object_vtable(server, NULL, UNIT_PATH, "org.freedesktop.systemd1.Unit",
                                           unit_vtable, NULL),
                  0);
    cr_assert_geq(sd_bus_add_object_vtable(server, NULL, JOB_PATH, "org.freedesktop.systemd1.Job",
                                           job_vtable, NULL),
                  0);
    /* Synchronous: the name is ours before any client asks for it. */
    r = sd_bus_request_name(server, "org.freedesktop.systemd1", 0);
    cr_assert_geq(r, 0, "RequestName: %s", strerror(-r));
    stop_fd = eventfd(0, EFD_CLOEXEC);
    cr_assert_geq(stop_fd, 0);
    cr_assert_eq(pthread_create(&server_thread, NULL, serve_loop, NULL), 0);
    serving = true;
}

/* ---- the private bus ---- */

static char daemon_log[128];

/* What dbus-daemon wrote, for a failure's message. */
static const char *log_text(void)
{
    static char text[2048];
    text[0] = '\0';
    FILE *f = fopen(daemon_log, "r");
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
    }
    return text;
}

/* dbus-daemon with a session-type configuration on a socket of dir; its
 * address comes from --print-address on a pipe, read with a deadline. */
static void start_bus(void)
{
    snprintf(dir, sizeof dir, "/tmp/dlock-svcjob-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char conf[128];
    snprintf(conf, sizeof conf, "%s/bus.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
            " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
            "<busconfig>\n"
            "  <type>session</type>\n"
            "  <listen>unix:path=%s/bus</listen>\n"
            "  <auth>EXTERNAL</auth>\n"
            "  <policy context=\"default\">\n"
            "    <allow send_destination=\"*\" eavesdrop=\"true\"/>\n"
            "    <allow eavesdrop=\"true\"/>\n"
            "    <allow own=\"*\"/>\n"
            "  </policy>\n"
            "</busconfig>\n",
            dir);
    cr_assert_eq(fclose(f), 0);

    snprintf(daemon_log, sizeof daemon_log, "%s/dbus-daemon.log", dir);
    int fds[2];
    cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
    char config_arg[160];
    snprintf(config_arg, sizeof config_arg, "--config-file=%s", conf);
    daemon_pid = fork();
    cr_assert_geq(daemon_pid, 0);
    if (daemon_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a crashed test */
        /* Its chatter (it cannot raise its descriptor limit unprivileged)
         * goes to a file, shown if it gives no address. */
        int log = open(daemon_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (log < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
            _exit(126);
        if (fds[1] == 3)
            fcntl(3, F_SETFD, 0);
        else if (dup2(fds[1], 3) < 0)
            _exit(126);
        execlp("dbus-daemon", "dbus-daemon", config_arg, "--nofork", "--nopidfile",
               "--print-address=3", (char *)NULL);
        fprintf(stderr, "dbus-daemon: %s (install the package dbus-daemon)\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);

    size_t n = 0;
    int64_t deadline = mono_ms() + START_MS;
    while (!memchr(address, '\n', n)) {
        int64_t left = deadline - mono_ms();
        cr_assert_gt(left, 0, "no address from dbus-daemon within %d ms: %s", START_MS, log_text());
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        cr_assert_geq(r, 0);
        if (r == 0)
            continue;
        ssize_t got = read(fds[0], address + n, sizeof address - 1 - n);
        cr_assert_gt(got, 0, "dbus-daemon exited without an address: %s", log_text());
        n += (size_t)got;
    }
    close(fds[0]);
    *strchr(address, '\n') = '\0';
    cr_assert_eq(setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1), 0);
    cr_assert_eq(setenv("INVOCATION_ID", INVOCATION, 1), 0);
}

static void stop_all(void)
{
    if (serving) {
        uint64_t one = 1;
        cr_assert_eq(write(stop_fd, &one, sizeof one), (ssize_t)sizeof one);
        cr_assert_eq(pthread_join(server_thread, NULL), 0);
        sd_bus_flush_close_unref(server);
        close(stop_fd);
        serving = false;
    }
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        int status;
        cr_assert_eq(waitpid(daemon_pid, &status, 0), daemon_pid);
        daemon_pid = -1;
    }
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
    cr_assert_eq(by_pid_calls, 1);
    cr_assert_eq(by_pid_pid, (uint32_t)getpid(), "GetUnitByPID asked about pid %u",
                 (unsigned)by_pid_pid);
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
    cr_assert_eq(by_pid_calls, 1);
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
    fake.no_unit = true;
    serve(4242, "restart");
    char why[256];
    cr_assert_eq(svcjob_restarting(why, sizeof why), 0, "%s", why);
    cr_assert_neq(strstr(why, "not in a unit"), NULL, "%s", why);
    cr_assert_eq(by_pid_calls, 1);
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
    cr_assert_eq(by_pid_calls, 0);
    /* The same fake, asked, says restart. */
    cr_assert_eq(setenv("INVOCATION_ID", INVOCATION, 1), 0);
    cr_assert_eq(svcjob_restarting(why, sizeof why), 1, "%s", why);
    cr_assert_eq(by_pid_calls, 1);
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
