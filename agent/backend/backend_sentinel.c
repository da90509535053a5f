/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_sentinel.c -- not yet. */
#include "backend_sentinel.h"

#include "log.h"

struct backend *backend_sentinel_new(struct ev_loop *loop, const struct config *cfg,
                                     const struct backend_events *events)
{
    log_error("sentinel mode is not built yet");
    return NULL;
}
