/* SPDX-License-Identifier: BSD-3-Clause */
/* util.h -- small helpers of the agent: its clock and randomness. */
#ifndef DLOCKD_UTIL_H
#define DLOCKD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NS_PER_MS  1000000ull
#define NS_PER_SEC 1000000000ull

/* CLOCK_BOOTTIME in nanoseconds: dlock's one clock for deadlines. Unlike
 * CLOCK_MONOTONIC it keeps counting while the host is suspended, as the
 * Redis TTLs on the other side do, so a lease never looks valid after a
 * resume when its key has expired meanwhile. */
uint64_t now_ns(void);
/* CLOCK_REALTIME in microseconds since the epoch. */
uint64_t realtime_us(void);
/* A uniform double in [0, 1), not for secrets. */
double random_unit(void);
/* 128 bits from the kernel's CSPRNG as 32 lowercase hex characters plus NUL.
 * 0, or -1 if the kernel would not give randomness. */
int random_token(char out[33]);
/* 64 random bits from the kernel (for hash seeds). */
uint64_t random_u64(void);
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

/* The command name of pid, from /proc ("?" when gone or unreadable), made
 * one word. */
void proc_comm(int pid, char *out, size_t cap);
/* Replaces blanks and control characters with '?': a word that can neither
 * break a column or a space-separated record nor reach a terminal as a
 * control sequence. */
void one_word(char *s);

#define PEER_GROUPS_MAX 32
/* The groups of a unix socket's peer, its primary gid first, at most max
 * (SO_PEERGROUPS). Returns how many. */
size_t peer_groups(int fd, uint32_t primary, uint32_t *out, size_t max);

#endif
