/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_redis.h -- the single-node Redis backend (hiredis async on libev). */
#ifndef DLOCKD_BACKEND_REDIS_H
#define DLOCKD_BACKEND_REDIS_H

#include <ev.h>

#include "backend.h"
#include "config.h"

/* The kinds of lock beyond the exclusive one that a Redis node keeps (its
 * scripts), and so every mode made of nodes that route (cluster, sentinel). */
#define BACKEND_REDIS_KINDS (BACKEND_KIND(LOCK_SHARED) | BACKEND_KIND(LOCK_SEMAPHORE))

/* How a node is used, when it is one of several (cluster, sentinel). */
struct redis_node_opts {
    const char *label; /* for logs: "redis ADDR", "master ADDR"; copied; NULL: by mode */
    bool sharded;      /* Redis Cluster: sharded pub/sub (SSUBSCRIBE, SPUBLISH) */
    /* Sentinel mode: the command link's set-up asks ROLE, and a node that is
     * not a master (or refuses ROLE) gets no command: the link is dropped
     * and not_master(arg, role) is called, from inside a hiredis callback
     * (the owner must not destroy the backend there). */
    bool check_master;
    void (*not_master)(void *arg, const char *role);
    void *arg;
};

/* Creates the backend for the node at addr and starts connecting; never
 * fails but for memory. addr must outlive it. */
struct backend *backend_redis_new(struct ev_loop *loop, const struct config *cfg,
                                  const struct redis_addr *addr,
                                  const struct backend_events *events);
/* The same, used as opts says. */
struct backend *backend_redis_new_opts(struct ev_loop *loop, const struct config *cfg,
                                       const struct redis_addr *addr,
                                       const struct redis_node_opts *opts,
                                       const struct backend_events *events);
/* Sharded: the node no longer serves the hash slots set in slots (a bitmap
 * of KEY_SLOTS bits): the subscriptions of the names in them end, each
 * reported with events->on_unwatched, so that the owner asks for it where it
 * lives now. (A MOVED answer to a subscription, or the unasked sunsubscribe
 * of a slot that moved away, is reported the same way.) */
void backend_redis_unwatch_slots(struct backend *b, const uint8_t *slots);

#endif
