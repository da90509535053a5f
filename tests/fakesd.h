/* SPDX-License-Identifier: BSD-3-Clause */
/* fakesd.h -- a private D-Bus bus (a dbus-daemon found on PATH) and a fake
 * systemd service manager (org.freedesktop.systemd1) served on it by a thread
 * of the test with sd-bus object vtables: what agent/shell/svcjob.c asks on
 * SIGTERM (Manager.GetUnitByPID, the unit's Job, the job's JobType).
 *
 *   struct fakesd *sd = fakesd_start(dir, 10000);  // the bus, its socket in dir
 *   fakesd_serve(sd);                               // the fake manager on it
 *   fakesd_set_job(sd, 4242, "restart");
 *   ... DBUS_SYSTEM_BUS_ADDRESS=fakesd_address(sd) for whoever asks ...
 *   cr_assert(fakesd_asked_about(sd, pid));
 *   fakesd_stop(sd);
 *
 * The fake answers GetUnitByPID for any pid with one unit (FAKESD_UNIT_PATH),
 * or NoUnitForPID when told so; the unit's Job is (0, "/") when it has no
 * job, else (id, FAKESD_JOB_PATH), whose JobType is the type set. Its answers
 * can be changed while it serves. Failures fail the test (Criterion). */
#ifndef DLOCK_TEST_FAKESD_H
#define DLOCK_TEST_FAKESD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FAKESD_UNIT_PATH "/org/freedesktop/systemd1/unit/dlockd_2eservice"
#define FAKESD_JOB_PATH  "/org/freedesktop/systemd1/job/4242"

struct fakesd;

/* Starts dbus-daemon (session-type configuration, EXTERNAL authentication,
 * everything allowed) listening on dir/bus, its configuration and log in dir
 * too (which the caller owns and removes), and waits up to start_ms for the
 * address it prints. The daemon dies with the thread that started it. The
 * fake manager is not on the bus yet: a call to it gets an error reply. */
struct fakesd *fakesd_start(const char *dir, int start_ms);
/* The bus's address ("unix:path=...,guid=..."), for DBUS_SYSTEM_BUS_ADDRESS. */
const char *fakesd_address(const struct fakesd *sd);
/* Connects to the bus, owns org.freedesktop.systemd1 (before it returns)
 * and serves the fake in a thread until fakesd_stop(). Its unit has no job
 * until fakesd_set_job(). */
void fakesd_serve(struct fakesd *sd);
/* The unit's job from now on: job_id 0 for none (type is then ignored and
 * may be NULL), else a job of that JobType (copied, up to 63 bytes). */
void fakesd_set_job(struct fakesd *sd, uint32_t job_id, const char *type);
/* From now on, GetUnitByPID answers NoUnitForPID (true) or the unit. */
void fakesd_set_no_unit(struct fakesd *sd, bool no_unit);
/* GetUnitByPID calls answered so far. */
unsigned fakesd_calls(struct fakesd *sd);
/* The pid the last of them asked about (0 before any). */
pid_t fakesd_last_pid(struct fakesd *sd);
/* How many of them asked about pid. */
unsigned fakesd_asked_about(struct fakesd *sd, pid_t pid);
/* Stops the fake's thread and the daemon (SIGTERM, waited for) and frees
 * sd; dir and what is in it stay. */
void fakesd_stop(struct fakesd *sd);

#endif /* DLOCK_TEST_FAKESD_H */
