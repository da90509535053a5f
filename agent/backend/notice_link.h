/* SPDX-License-Identifier: BSD-3-Clause */
/* notice_link.h -- the release notices of one Redis node: the names whose
 * notices are wanted, each subscribed on its own channel (release_channel()
 * in keys.h) over a raw redis_link, only while it is wanted. A subscription
 * costs the node nothing when the name is released elsewhere and nobody
 * here waits for it.
 *
 * The link keeps only what its connection holds: the names subscribed on it
 * (or about to be), to confirm and to unsubscribe them. A lost connection
 * takes them all with it, and a name asked for while the link is down is not
 * kept: the owner, who alone knows which names it wants, hears of each new
 * connection (subscribed) and asks for every name again. Each subscription's
 * confirmation is reported as a notice for its name (a release may have come
 * just before it). With sharded pub/sub (Redis Cluster: SSUBSCRIBE,
 * SUNSUBSCRIBE, smessage) a name the node will not or no longer serves (a
 * MOVED answer, the unasked sunsubscribe sent when its slot moves away, or
 * the owner's word that its slot did, notice_link_unwatch_slots()) is
 * forgotten and reported as unwatched. */
#ifndef DLOCKD_NOTICE_LINK_H
#define DLOCKD_NOTICE_LINK_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
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
    /* A release notice for a name, or the confirmation of its subscription;
     * with grant (else NULL), a grant on release of the name's key. */
    void (*notice)(void *arg, const char *name, size_t len, const struct backend_grant *grant);
    /* A new connection is set up, without any subscription: the owner asks
     * for every name it wants again (notices may have been missed while the
     * link was down). */
    void (*subscribed)(void *arg);
    /* The connection that was set up is gone, and its subscriptions with
     * it: no notice comes until subscribed. May be NULL. */
    void (*down)(void *arg);
    /* Sharded: the link forgot a wanted name, which the node does not serve
     * (now). May be NULL. */
    void (*unwatched)(void *arg, const char *name, size_t len);
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
 * A name already wanted is left as it is. While the link is down this does
 * nothing: the subscribed hook asks for the names again. */
int notice_link_watch(struct notice_link *n, const char *name, size_t len, bool on);
/* Sharded: the node no longer serves the hash slots set in slots (a bitmap
 * of KEY_SLOTS bits): every wanted name of theirs is unsubscribed, forgotten
 * and reported with the unwatched hook. */
void notice_link_unwatch_slots(struct notice_link *n, const uint8_t *slots);
/* The link is up (the node's "subscribed" health). */
bool notice_link_up(const struct notice_link *n);
/* Writes what this loop turn queued. */
void notice_link_flush(struct notice_link *n);
/* Drops the connection (the server stopped answering); made again after the
 * backoff. */
void notice_link_drop(struct notice_link *n);
/* Closes and frees; no hook is called. */
void notice_link_free(struct notice_link *n);

#endif
