/* SPDX-License-Identifier: BSD-3-Clause */
/* svcjob.c -- on SIGTERM, is systemd restarting dlockd or stopping it?
 *
 * A restart job is first run as a stop of the unit and only becomes a start
 * job once the old process is gone (systemd's src/core/job.h), so while we
 * handle the SIGTERM of a restart, our unit's Job is of type "restart"; that
 * of `systemctl stop` is "stop". "try-restart" collapses into "restart" (or
 * nothing) before it is installed and "reload-or-restart" is a systemctl
 * verb, not a type, but any of them would mean a successor is coming.
 *
 * sd_bus_set_method_call_timeout() alone does not bound a call: while the
 * connection is still authenticating, sd_bus_call() waits for the bus's own
 * authentication timeout (90 s with systemd 252) whatever the call's timeout.
 * So each call here is sent asynchronously and waited for with
 * sd_bus_process()/sd_bus_wait() against one deadline for the whole
 * question, connection included. */
#include "svcjob.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#define SYSTEMD_DEST    "org.freedesktop.systemd1"
#define SYSTEMD_PATH    "/org/freedesktop/systemd1"
#define MANAGER_IFACE   "org.freedesktop.systemd1.Manager"
#define UNIT_IFACE      "org.freedesktop.systemd1.Unit"
#define JOB_IFACE       "org.freedesktop.systemd1.Job"
#define PROPERTIES      "org.freedesktop.DBus.Properties"
#define NO_UNIT_FOR_PID "org.freedesktop.systemd1.NoUnitForPID"

static const char *const restart_types[] = {"restart", "try-restart", "reload-or-restart",
                                            "reload-or-try-restart"};

__attribute__((format(printf, 3, 4))) static void say(char *why, size_t cap, const char *fmt, ...)
{
    if (!why || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

static uint64_t mono_usec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

struct pending {
    int done;
    sd_bus_message *reply;
};

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error)
{
    struct pending *p = userdata;
    p->reply = sd_bus_message_ref(m);
    p->done = 1;
    return 0;
}

/* Sends m and waits, until deadline, for its reply: a method return into
 * *reply (1), an error reply into *reply too (0, the caller looks at its
 * name), or -1 with why filled (what names the call). */
static int call(sd_bus *bus, sd_bus_message *m, uint64_t deadline, sd_bus_message **reply,
                const char *what, char *why, size_t cap)
{
    struct pending p = {0, NULL};
    sd_bus_slot *slot = NULL;
    uint64_t now = mono_usec();
    int r = now < deadline ? sd_bus_call_async(bus, &slot, m, on_reply, &p, deadline - now)
                           : -ETIMEDOUT;
    while (r >= 0 && !p.done) {
        r = sd_bus_process(bus, NULL);
        if (r != 0)
            continue; /* something was done (or r < 0: the loop ends) */
        now = mono_usec();
        r = now < deadline ? sd_bus_wait(bus, deadline - now) : -ETIMEDOUT;
    }
    sd_bus_slot_unref(slot);
    if (!p.done) {
        say(why, cap, "%s: %s", what,
            r == -ETIMEDOUT ? "no answer within the time allowed" : strerror(-r));
        return -1;
    }
    *reply = p.reply;
    const sd_bus_error *e = sd_bus_message_get_error(p.reply);
    if (e) {
        say(why, cap, "%s: %s: %s", what, e->name ? e->name : "error",
            e->message ? e->message : "");
        return 0;
    }
    return 1;
}

/* Properties.Get(interface, property) of path: 1 with *reply positioned on
 * the variant, or -1 with why filled. */
static int get_property(sd_bus *bus, const char *path, const char *iface, const char *prop,
                        uint64_t deadline, sd_bus_message **reply, char *why, size_t cap)
{
    char what[256];
    snprintf(what, sizeof what, "%s.%s of %s", iface, prop, path);
    sd_bus_message *m = NULL;
    int r = sd_bus_message_new_method_call(bus, &m, SYSTEMD_DEST, path, PROPERTIES, "Get");
    if (r >= 0)
        r = sd_bus_message_append(m, "ss", iface, prop);
    if (r < 0) {
        sd_bus_message_unref(m);
        say(why, cap, "%s: %s", what, strerror(-r));
        return -1;
    }
    r = call(bus, m, deadline, reply, what, why, cap);
    sd_bus_message_unref(m);
    return r == 1 ? 1 : -1;
}

int svcjob_restarting(char *why, size_t cap)
{
    say(why, cap, "%s", "");
    const char *invocation = getenv("INVOCATION_ID");
    if (!invocation || !*invocation) {
        say(why, cap, "not run by systemd (no INVOCATION_ID)");
        return 0;
    }
    uint64_t deadline = mono_usec() + SVCJOB_TIMEOUT_USEC;
    sd_bus *bus = NULL;
    sd_bus_message *m = NULL, *unit_reply = NULL, *job_reply = NULL, *type_reply = NULL;
    int ret = -1;
    int r = sd_bus_open_system(&bus);
    if (r < 0) {
        say(why, cap, "system bus: %s", strerror(-r));
        goto out;
    }
    /* Also for what sd-bus sends on its own; the deadline is the bound. */
    sd_bus_set_method_call_timeout(bus, SVCJOB_TIMEOUT_USEC);

    r = sd_bus_message_new_method_call(bus, &m, SYSTEMD_DEST, SYSTEMD_PATH, MANAGER_IFACE,
                                       "GetUnitByPID");
    if (r >= 0)
        r = sd_bus_message_append(m, "u", (uint32_t)getpid());
    if (r < 0) {
        say(why, cap, "GetUnitByPID: %s", strerror(-r));
        goto out;
    }
    r = call(bus, m, deadline, &unit_reply, "GetUnitByPID", why, cap);
    if (r < 0)
        goto out;
    if (r == 0) {
        if (sd_bus_message_is_method_error(unit_reply, NO_UNIT_FOR_PID)) {
            say(why, cap, "not in a unit (pid %ld)", (long)getpid());
            ret = 0;
        }
        goto out;
    }
    const char *unit = NULL;
    r = sd_bus_message_read(unit_reply, "o", &unit);
    if (r <= 0) {
        say(why, cap, "GetUnitByPID: an answer that is no object path");
        goto out;
    }

    if (get_property(bus, unit, UNIT_IFACE, "Job", deadline, &job_reply, why, cap) < 0)
        goto out;
    uint32_t job_id = 0;
    const char *job = NULL;
    r = sd_bus_message_read(job_reply, "v", "(uo)", &job_id, &job);
    if (r <= 0) {
        say(why, cap, "%s of %s: not a (uo)", "Job", unit);
        goto out;
    }
    if (job_id == 0) {
        say(why, cap, "no job for %s", unit);
        ret = 0;
        goto out;
    }

    if (get_property(bus, job, JOB_IFACE, "JobType", deadline, &type_reply, why, cap) < 0)
        goto out;
    const char *type = NULL;
    r = sd_bus_message_read(type_reply, "v", "s", &type);
    if (r <= 0) {
        say(why, cap, "%s of %s: not a string", "JobType", job);
        goto out;
    }
    ret = 0;
    for (size_t i = 0; i < sizeof restart_types / sizeof restart_types[0]; i++)
        if (strcmp(type, restart_types[i]) == 0)
            ret = 1;
    say(why, cap, "job %u of %s is a %s: %s", job_id, unit, type,
        ret ? "a successor is coming" : "no successor");
out:
    sd_bus_message_unref(type_reply);
    sd_bus_message_unref(job_reply);
    sd_bus_message_unref(unit_reply);
    sd_bus_message_unref(m);
    /* No flush: on a wedged bus it would wait for the queue to drain. */
    sd_bus_close_unref(bus);
    return ret;
}
