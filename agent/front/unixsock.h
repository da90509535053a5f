/* SPDX-License-Identifier: BSD-3-Clause */
/* unixsock.h -- listening unix sockets, and what a peer is. */
#ifndef DLOCKD_UNIXSOCK_H
#define DLOCKD_UNIXSOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A non-blocking listening unix socket at path: the one the service manager
 * passed for that path (socket activation; *inherited set: the file is
 * not ours to remove), else a new one with the given mode and, when group
 * is not empty, that group (a name or a gid), replacing a stale socket file
 * but not a live one or another file. The fd, or -1 (logged): also when the
 * socket cannot be given to the group. */
int unix_listen(const char *path, unsigned mode, const char *group, bool *inherited);
/* Closes, with a warning, the sockets the service manager passed that no
 * unix_listen() call took: their clients would wait in vain. */
void unix_listen_close_unused(void);
/* Before the agent executes itself again (same pid): the sockets the
 * service manager passed stay open for the new image, which finds them as
 * this one did (LISTEN_FDS, LISTEN_PID). Returns the descriptors to keep
 * (3 up to 3 + the count), or -1 when the passed sockets are not all the
 * configuration's (a gap the new image could not tell). */
int unix_listen_pass_on(void);

/* The command name of pid, from /proc ("?" when gone or unreadable), made
 * one word. */
void proc_comm(int pid, char *out, size_t cap);
/* When pid started (field 22 of /proc/PID/stat, clock ticks since boot):
 * with the pid, it names one process, whatever reuses the pid later. 0 when
 * it is gone or unreadable. */
uint64_t proc_start_time(int pid);

#define PEER_GROUPS_MAX 32
/* The groups of a unix socket's peer, its primary gid first, at most max
 * (SO_PEERGROUPS). Returns how many. */
size_t peer_groups(int fd, uint32_t primary, uint32_t *out, size_t max);

#endif
