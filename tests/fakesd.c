/* SPDX-License-Identifier: BSD-3-Clause */
/* fakesd.c -- a private dbus-daemon and a fake org.freedesktop.systemd1
 * served on it by a thread (see fakesd.h). */
#include "fakesd.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#define MAX_PIDS 64 /* the pids GetUnitByPID was asked about, first ones kept */

struct fakesd {
    char address[512];
    char log[256];
    pid_t daemon_pid;
    /* The fake manager: its connection and thread. */
    sd_bus *server;
    int stop_fd;
    pthread_t thread;
    bool serving;
    /* What it answers and what it saw, shared with its thread. */
    pthread_mutex_t mu;
    bool no_unit;
    uint32_t job_id;
    char type[64];
    unsigned calls;
    pid_t pids[MAX_PIDS];
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the fake service manager ---- */

static int get_unit_by_pid(sd_bus_message *m, void *userdata, sd_bus_error *ret_error)
{
    struct fakesd *sd = userdata;
    uint32_t pid = 0;
    int r = sd_bus_message_read(m, "u", &pid);
    if (r < 0)
        return r;
    pthread_mutex_lock(&sd->mu);
    if (sd->calls < MAX_PIDS)
        sd->pids[sd->calls] = (pid_t)pid;
    sd->calls++;
    bool no_unit = sd->no_unit;
    pthread_mutex_unlock(&sd->mu);
    if (no_unit)
        return sd_bus_reply_method_errorf(m, "org.freedesktop.systemd1.NoUnitForPID",
                                          "PID %u does not belong to any loaded unit.", pid);
    return sd_bus_reply_method_return(m, "o", FAKESD_UNIT_PATH);
}

/* As systemd's property_get_job(): (0, "/") when the unit has no job. */
static int get_job(sd_bus *bus, const char *path, const char *iface, const char *prop,
                   sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
    struct fakesd *sd = userdata;
    pthread_mutex_lock(&sd->mu);
    uint32_t id = sd->job_id;
    pthread_mutex_unlock(&sd->mu);
    return sd_bus_message_append(reply, "(uo)", id, id ? FAKESD_JOB_PATH : "/");
}

static int get_job_id(sd_bus *bus, const char *path, const char *iface, const char *prop,
                      sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
    struct fakesd *sd = userdata;
    pthread_mutex_lock(&sd->mu);
    uint32_t id = sd->job_id;
    pthread_mutex_unlock(&sd->mu);
    return sd_bus_message_append(reply, "u", id);
}

static int get_job_type(sd_bus *bus, const char *path, const char *iface, const char *prop,
                        sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
    struct fakesd *sd = userdata;
    char type[sizeof sd->type];
    pthread_mutex_lock(&sd->mu);
    memcpy(type, sd->type, sizeof type);
    pthread_mutex_unlock(&sd->mu);
    return sd_bus_message_append(reply, "s", type);
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
/* Id and JobType are constant for one job; the fake's job changes only
 * between questions, and nothing here caches them. */
static const sd_bus_vtable job_vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("Id", "u", get_job_id, 0, SD_BUS_VTABLE_PROPERTY_CONST),
    SD_BUS_PROPERTY("JobType", "s", get_job_type, 0, SD_BUS_VTABLE_PROPERTY_CONST),
    SD_BUS_VTABLE_END,
};

/* The server's loop, until stop_fd is written. */
static void *serve_loop(void *arg)
{
    struct fakesd *sd = arg;
    for (;;) {
        int r = sd_bus_process(sd->server, NULL);
        if (r < 0)
            break;
        if (r > 0)
            continue;
        uint64_t until = UINT64_MAX;
        int timeout = -1;
        if (sd_bus_get_timeout(sd->server, &until) >= 0 && until != UINT64_MAX) {
            int64_t left = (int64_t)(until / 1000) - mono_ms();
            timeout = left < 0 ? 0 : (int)left + 1;
        }
        struct pollfd p[2] = {
            {.fd = sd_bus_get_fd(sd->server), .events = sd_bus_get_events(sd->server)},
            {.fd = sd->stop_fd, .events = POLLIN}};
        if (poll(p, 2, timeout) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
    }
    return NULL;
}

void fakesd_serve(struct fakesd *sd)
{
    cr_assert(!sd->serving, "the fake service manager serves already");
    cr_assert_geq(sd_bus_new(&sd->server), 0);
    cr_assert_geq(sd_bus_set_address(sd->server, sd->address), 0);
    cr_assert_geq(sd_bus_set_bus_client(sd->server, 1), 0);
    int r = sd_bus_start(sd->server);
    cr_assert_geq(r, 0, "connecting to %s: %s", sd->address, strerror(-r));
    cr_assert_geq(sd_bus_add_object_vtable(sd->server, NULL, "/org/freedesktop/systemd1",
                                           "org.freedesktop.systemd1.Manager", manager_vtable, sd),
                  0);
    cr_assert_geq(sd_bus_add_object_vtable(sd->server, NULL, FAKESD_UNIT_PATH,
                                           "org.freedesktop.systemd1.Unit", unit_vtable, sd),
                  0);
    cr_assert_geq(sd_bus_add_object_vtable(sd->server, NULL, FAKESD_JOB_PATH,
                                           "org.freedesktop.systemd1.Job", job_vtable, sd),
                  0);
    /* Synchronous: the name is ours before any client asks for it. */
    r = sd_bus_request_name(sd->server, "org.freedesktop.systemd1", 0);
    cr_assert_geq(r, 0, "RequestName: %s", strerror(-r));
    sd->stop_fd = eventfd(0, EFD_CLOEXEC);
    cr_assert_geq(sd->stop_fd, 0);
    cr_assert_eq(pthread_create(&sd->thread, NULL, serve_loop, sd), 0);
    sd->serving = true;
}

void fakesd_set_job(struct fakesd *sd, uint32_t job_id, const char *type)
{
    cr_assert(job_id == 0 || (type && strlen(type) < sizeof sd->type), "job type %s",
              type ? type : "(null)");
    pthread_mutex_lock(&sd->mu);
    sd->job_id = job_id;
    snprintf(sd->type, sizeof sd->type, "%s", job_id ? type : "");
    pthread_mutex_unlock(&sd->mu);
}

void fakesd_set_no_unit(struct fakesd *sd, bool no_unit)
{
    pthread_mutex_lock(&sd->mu);
    sd->no_unit = no_unit;
    pthread_mutex_unlock(&sd->mu);
}

unsigned fakesd_calls(struct fakesd *sd)
{
    pthread_mutex_lock(&sd->mu);
    unsigned n = sd->calls;
    pthread_mutex_unlock(&sd->mu);
    return n;
}

pid_t fakesd_last_pid(struct fakesd *sd)
{
    pthread_mutex_lock(&sd->mu);
    pid_t pid = sd->calls == 0 ? 0 : sd->pids[(sd->calls < MAX_PIDS ? sd->calls : MAX_PIDS) - 1];
    pthread_mutex_unlock(&sd->mu);
    return pid;
}

unsigned fakesd_asked_about(struct fakesd *sd, pid_t pid)
{
    unsigned n = 0;
    pthread_mutex_lock(&sd->mu);
    for (unsigned i = 0; i < sd->calls && i < MAX_PIDS; i++)
        n += sd->pids[i] == pid;
    pthread_mutex_unlock(&sd->mu);
    return n;
}

/* ---- the private bus ---- */

/* What dbus-daemon wrote, for a failure's message. */
static const char *log_text(const struct fakesd *sd)
{
    static char text[2048];
    text[0] = '\0';
    FILE *f = fopen(sd->log, "r");
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
    }
    return text;
}

/* dbus-daemon with a session-type configuration on a socket of dir; its
 * address comes from --print-address on a pipe, read with a deadline. */
struct fakesd *fakesd_start(const char *dir, int start_ms)
{
    struct fakesd *sd = calloc(1, sizeof *sd);
    cr_assert_not_null(sd);
    sd->daemon_pid = -1;
    sd->stop_fd = -1;
    cr_assert_eq(pthread_mutex_init(&sd->mu, NULL), 0);
    char conf[256];
    snprintf(conf, sizeof conf, "%s/bus.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f, "%s: %s", conf, strerror(errno));
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

    snprintf(sd->log, sizeof sd->log, "%s/dbus-daemon.log", dir);
    int fds[2];
    cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
    char config_arg[300];
    snprintf(config_arg, sizeof config_arg, "--config-file=%s", conf);
    fflush(NULL);
    sd->daemon_pid = fork();
    cr_assert_geq(sd->daemon_pid, 0);
    if (sd->daemon_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a crashed test */
        /* Its chatter (it cannot raise its descriptor limit unprivileged)
         * goes to a file, shown if it gives no address. */
        int log = open(sd->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
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
    int64_t deadline = mono_ms() + start_ms;
    while (!memchr(sd->address, '\n', n)) {
        int64_t left = deadline - mono_ms();
        cr_assert_gt(left, 0, "no address from dbus-daemon within %d ms: %s", start_ms,
                     log_text(sd));
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        cr_assert_geq(r, 0);
        if (r == 0)
            continue;
        cr_assert_lt(n, sizeof sd->address - 1, "dbus-daemon's address is too long");
        ssize_t got = read(fds[0], sd->address + n, sizeof sd->address - 1 - n);
        cr_assert_gt(got, 0, "dbus-daemon exited without an address: %s", log_text(sd));
        n += (size_t)got;
    }
    close(fds[0]);
    *strchr(sd->address, '\n') = '\0';
    return sd;
}

const char *fakesd_address(const struct fakesd *sd)
{
    return sd->address;
}

void fakesd_stop(struct fakesd *sd)
{
    if (!sd)
        return;
    if (sd->serving) {
        uint64_t one = 1;
        cr_assert_eq(write(sd->stop_fd, &one, sizeof one), (ssize_t)sizeof one);
        cr_assert_eq(pthread_join(sd->thread, NULL), 0);
        sd_bus_flush_close_unref(sd->server);
        close(sd->stop_fd);
        sd->serving = false;
    }
    if (sd->daemon_pid > 0) {
        kill(sd->daemon_pid, SIGTERM);
        int status;
        cr_assert_eq(waitpid(sd->daemon_pid, &status, 0), sd->daemon_pid);
        sd->daemon_pid = -1;
    }
    pthread_mutex_destroy(&sd->mu);
    free(sd);
}
