/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_cluster.h -- the Redis Cluster backend (docs/cluster.md). */
#ifndef DLOCKD_BACKEND_CLUSTER_H
#define DLOCKD_BACKEND_CLUSTER_H

#include <ev.h>

#include "backend.h"
#include "config.h"

/* Creates the backend and starts connecting (cfg->nodes are the seed nodes); NULL
 * only when out of memory. */
struct backend *backend_cluster_new(struct ev_loop *loop, const struct config *cfg,
                                    const struct backend_events *events);

#endif
