/* SPDX-License-Identifier: BSD-3-Clause */
/* statedir.h -- the agent's state directory (docs/restarts.md): a private
 * directory (mode 0700, the agent's own) whose files outlive the agent's
 * process: the journal of its connections and leases, and each resumable
 * connection's lease and touch pages. One agent at a time uses it: a lock
 * on its file "lock" (flock, released by the kernel when the process dies)
 * says which, and the file holds that agent's pid. A successor started by
 * hand (dlockd --successor) leaves the mark file "successor" and signals
 * the running agent, which then leaves its leases behind instead of
 * releasing them, and waits for the lock. */
#ifndef DLOCKD_STATEDIR_H
#define DLOCKD_STATEDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct statedir {
    int dirfd;  /* the directory; -1: no state directory */
    int lockfd; /* holds the lock */
    char path[128];
};

/* Opens the directory path (creating it, mode 0700), checks that it is this
 * user's and nobody else's, and locks it. When another agent holds the
 * lock: without `successor`, fails saying which pid; with it, marks the
 * directory for a successor, sends that agent SIGTERM and waits up to
 * wait_ms for its lock. 0, or -1 with err set (nothing is held). */
int statedir_open(struct statedir *d, const char *path, bool successor, uint32_t wait_ms, char *err,
                  size_t errlen);
/* Marks: empty files that tell the next agent, or this one, something. */
#define STATEDIR_SUCCESSOR "successor" /* a successor waits for the lock */
/* The Redis the leases were taken on is not the one the next agent uses
 * (a reload moved it): leases taken over are in doubt until confirmed. */
#define STATEDIR_STORE_CHANGED "store-changed"
bool statedir_marked(const struct statedir *d, const char *mark);
/* 0, or -1 with errno set. */
int statedir_mark(const struct statedir *d, const char *mark);
void statedir_unmark(const struct statedir *d, const char *mark);
/* Calls fn for the name of each file in the directory (not "." and "..");
 * fn may remove it. */
void statedir_each(const struct statedir *d, void (*fn)(void *arg, const char *name), void *arg);
/* Removes every file of the directory and the directory itself (a stop:
 * nothing is left for a successor), then closes it. */
void statedir_remove(struct statedir *d);
/* Closes the directory and lets the lock go; its files stay. */
void statedir_close(struct statedir *d);

#endif
