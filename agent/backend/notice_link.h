/* SPDX-License-Identifier: BSD-3-Clause */
/* notice_link.h -- the release notices of one Redis node: the names whose
 * notices are wanted, each subscribed on its own channel (release_channel()
 * in keys.h) over a raw redis_link, only while it is wanted. A subscription
 * costs the node nothing when the name is released elsewhere and nobody
 * here waits for it.
 *
 * The set of names is kept while the link is down and subscribed again on
 * every new connection. Each subscription's confirmation is reported as a
 * notice for its name (a release may have come just before it), and a new
 * connection, once its names are asked for again, as on_subscribed. With
 * sharded pub/sub (Redis Cluster: SSUBSCRIBE, SUNSUBSCRIBE, smessage) a
 * name the node will not or no longer serves (a MOVED answer, or the
 * unasked sunsubscribe sent when its slot moves away) is forgotten and
 * reported as dropped. */
#ifndef DLOCKD_NOTICE_LINK_H
#define DLOCKD_NOTICE_LINK_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/* The most names one node watches at once: beyond it, watching a name fails
 * (DLOCK_ENOMEM) and its waiters rely on their fallback retry. The core
 * watches only names that have waiters on this host. */
#define NOTICE_NAMES_MAX 100000
/* The most subscriptions asked for and not yet confirmed: a new connection
 * asks for its names in steps, so that the server's output buffer for the
 * link stays small however many there are. */
#define NOTICE_WINDOW 256

struct notice_link;

struct notice_hooks {
    void *arg;
    /* A release notice for a name, or the confirmation of its subscription. */
    void (*notice)(void *arg, const char *name, size_t len);
    /* A new connection is set up, and its names asked for again: notices may
     * have been missed while it was down. */
    void (*subscribed)(void *arg);
    /* Sharded: the node forgot a wanted name (not this node's slot). May be
     * NULL. */
    void (*dropped)(void *arg, const char *name, size_t len);
    /* A failure to note in the node's health (a DLOCK_E* code and text). */
    void (*error)(void *arg, int code, const char *text);
};

/* Starts connecting to addr; label and addr must outlive the link. NULL when
 * out of memory. */
struct notice_link *notice_link_new(struct ev_loop *loop, const struct config *cfg,
                                    const struct redis_addr *addr, const char *label, bool sharded,
                                    const struct notice_hooks *hooks);
/* Release notices for name are wanted (on) or no longer (off). 0, or
 * DLOCK_ENOMEM (out of memory, or NOTICE_NAMES_MAX names already watched).
 * The link need not be up: the names are asked for when it is. */
int notice_link_watch(struct notice_link *n, const char *name, size_t len, bool on);
/* The link is up (the node's "subscribed" health). */
bool notice_link_up(const struct notice_link *n);
/* How many names are watched. */
size_t notice_link_count(const struct notice_link *n);
/* Writes what this loop turn queued. */
void notice_link_flush(struct notice_link *n);
/* Drops the connection (the server stopped answering); made again after the
 * backoff. */
void notice_link_drop(struct notice_link *n);
/* Closes and frees; no hook is called. */
void notice_link_free(struct notice_link *n);

#endif
