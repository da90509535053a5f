/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_redis.h -- the single-node Redis backend (hiredis async on libev). */
#ifndef DLOCKD_BACKEND_REDIS_H
#define DLOCKD_BACKEND_REDIS_H

#include <ev.h>

#include "backend.h"
#include "config.h"

/* Creates the backend for the node at addr and starts connecting; never
 * fails but for memory. */
struct backend *backend_redis_new(struct ev_loop *loop, const struct config *cfg,
                                  const struct redis_addr *addr,
                                  const struct backend_events *events);

/* For the quorum backend, which drives one of these per node. */

/* Acquire whose fencing token is at least floor_us (instead of the server's
 * clock). Result as for backend_ops.acquire. */
int backend_redis_acquire_floor(struct backend *b, const char *name, size_t len, const char *token,
                                const char *holder, uint32_t ttl_ms, uint64_t floor_us,
                                backend_cb cb, void *arg);
/* Raises the fencing high-water mark of the lock key's hash slot to at least
 * fence, only while the key holds token. Result 1 when held (mark >= fence
 * now), 0 when not ours. */
int backend_redis_fence(struct backend *b, const char *name, size_t len, const char *token,
                        uint32_t ttl_ms, uint64_t fence, backend_cb cb, void *arg);
/* Whether the node counts toward quorums at now: not within the exclusion
 * that follows its (re)start. */
bool backend_redis_counts(const struct backend *b, uint64_t now);

#endif
