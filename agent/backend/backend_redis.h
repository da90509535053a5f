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

#endif
