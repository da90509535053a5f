/* SPDX-License-Identifier: BSD-3-Clause */
/* listener.h -- the accept loop shared by every listening socket of the
 * agent (client socket, status socket, HTTP metrics): bounded work per
 * loop turn, and no spinning when descriptors run out. */
#ifndef DLOCKD_LISTENER_H
#define DLOCKD_LISTENER_H

#include <ev.h>
#include <stdbool.h>

/* Called with each accepted, non-blocking, close-on-exec descriptor, which
 * it owns from then on (it may close it at once to refuse the peer). */
typedef void (*listener_cb)(void *arg, int fd);

struct listener {
    struct ev_loop *loop;
    int fd; /* not owned */
    ev_io io;
    ev_timer pause;   /* accepting resumes when it fires */
    const char *what; /* for logs, e.g. "client socket" */
    listener_cb cb;
    void *arg;
    bool active;
};

/* Starts accepting on the listening socket fd. */
void listener_start(struct listener *l, struct ev_loop *loop, int fd, const char *what,
                    listener_cb cb, void *arg);
/* Stops accepting (the socket itself is the caller's to close). */
void listener_stop(struct listener *l);

/* Compares the descriptors the agent may need with RLIMIT_NOFILE, raises
 * the soft limit toward the hard one when it is short, and warns when even
 * the hard limit is short. Returns the soft limit in force afterwards. */
unsigned long listener_fit_nofile(unsigned long needed);

#endif
