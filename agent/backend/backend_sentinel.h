/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_sentinel.h -- the Redis Sentinel backend (docs/failover.md). */
#ifndef DLOCKD_BACKEND_SENTINEL_H
#define DLOCKD_BACKEND_SENTINEL_H

#include <ev.h>

#include "backend.h"
#include "config.h"

/* Creates the backend and starts connecting (cfg->nodes are the sentinels); NULL
 * only when out of memory. */
struct backend *backend_sentinel_new(struct ev_loop *loop, const struct config *cfg,
                                     const struct backend_events *events);

#endif
