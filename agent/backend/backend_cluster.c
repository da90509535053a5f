/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_cluster.c -- not yet. */
#include "backend_cluster.h"

#include "log.h"

struct backend *backend_cluster_new(struct ev_loop *loop, const struct config *cfg,
                                    const struct backend_events *events)
{
    log_error("cluster mode is not built yet");
    return NULL;
}
