/* SPDX-License-Identifier: BSD-3-Clause */
/* backends.c -- the store of each Redis mode, made in one place. */
#include "backends.h"

#include "backend_quorum.h"
#include "backend_redis.h"

struct backend *backend_new(struct ev_loop *loop, const struct config *cfg,
                            const struct backend_events *ev)
{
    switch (cfg->mode) {
    case REDIS_MODE_QUORUM:
        return backend_quorum_new(loop, cfg, ev);
    case REDIS_MODE_SINGLE:
        break;
    }
    return backend_redis_new(loop, cfg, &cfg->nodes[0], ev);
}
