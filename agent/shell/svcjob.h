/* SPDX-License-Identifier: BSD-3-Clause */
/* svcjob.h -- on SIGTERM, is systemd restarting dlockd or stopping it? The
 * job the service manager runs for our unit says (org.freedesktop.systemd1(5)). */
#ifndef DLOCKD_SVCJOB_H
#define DLOCKD_SVCJOB_H

#include <stddef.h>

/* The bound of one svcjob_restarting(), connecting included: a wedged bus
 * cannot hold the stop longer (TimeoutStopSec= of dlockd.service is 10 s). */
#define SVCJOB_TIMEOUT_USEC (2 * 1000 * 1000ULL)

/* Asks the service manager on the system bus (DBUS_SYSTEM_BUS_ADDRESS, or
 * its standard socket) which job it has queued or running for the unit this
 * process belongs to (Manager.GetUnitByPID, the unit's Job, the job's
 * JobType):
 *
 *    1  the job restarts the unit: JobType "restart" (what systemctl restart,
 *       try-restart and a package upgrade's restart run while the old
 *       process stops), or "try-restart", "reload-or-restart",
 *       "reload-or-try-restart";
 *    0  no successor is coming: a stop job or any other type, no job, no
 *       unit for our pid (NoUnitForPID), or not run by systemd at all: with
 *       no INVOCATION_ID in the environment it returns at once, without
 *       connecting;
 *   -1  the answer is unknown: bus unreachable, an error reply, an answer of
 *       the wrong type, or SVCJOB_TIMEOUT_USEC passed.
 *
 * why (cap bytes, NUL-terminated; may be NULL) says what was found or what
 * failed, for the log. Blocks for at most SVCJOB_TIMEOUT_USEC; opens and
 * closes its own connection; not for a signal handler (call it from the
 * loop once SIGTERM is seen). */
int svcjob_restarting(char *why, size_t cap);

#endif
