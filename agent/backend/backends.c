/* SPDX-License-Identifier: BSD-3-Clause */
/* backends.c -- the store of each Redis mode, made in one place: a single
 * node, the quorum of core/backend_quorum.c over single nodes (with its
 * timer on the loop and the agent's clocks), Redis Cluster, or the master
 * that Sentinel names. */
#include "backends.h"

#include <stdlib.h>

#include "backend_cluster.h"
#include "backend_quorum.h"
#include "backend_redis.h"
#include "backend_sentinel.h"
#include "util.h"

/* What the quorum backend needs from the loop: its timer, the clocks, and
 * its nodes. Freed by the quorum's destroy (quorum_clock.done). */
struct quorum_driver {
    struct ev_loop *loop;
    const struct config *cfg;
    ev_timer timer;
    struct backend *quorum;
};

static uint64_t driver_now(void *arg)
{
    return now_ns();
}

static uint64_t driver_wall_us(void *arg)
{
    return realtime_us();
}

/* ev's timers run on the loop's clock, which may be a little behind ours:
 * a timer that comes early is armed again by the quorum. */
static void driver_arm(void *arg, uint64_t due)
{
    struct quorum_driver *d = arg;
    ev_timer_stop(d->loop, &d->timer);
    if (!due)
        return;
    uint64_t now = now_ns();
    ev_timer_set(&d->timer, due > now ? (double)(due - now) / 1e9 : 0.0, 0.0);
    ev_timer_start(d->loop, &d->timer);
}

static void driver_done(void *arg)
{
    struct quorum_driver *d = arg;
    ev_timer_stop(d->loop, &d->timer);
    free(d);
}

static void on_driver_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct quorum_driver *d = w->data;
    if (d->quorum)
        backend_quorum_timeout(d->quorum, now_ns());
}

static struct backend *make_node(void *arg, unsigned i, const struct backend_events *ev)
{
    struct quorum_driver *d = arg;
    return backend_redis_new(d->loop, d->cfg, &d->cfg->nodes[i], ev);
}

static struct backend *quorum_new(struct ev_loop *loop, const struct config *cfg,
                                  const struct backend_events *ev)
{
    struct quorum_driver *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->loop = loop;
    d->cfg = cfg;
    ev_timer_init(&d->timer, on_driver_timer, 0.0, 0.0);
    d->timer.data = d;
    struct quorum_clock clock = {.arg = d,
                                 .now = driver_now,
                                 .wall_us = driver_wall_us,
                                 .arm = driver_arm,
                                 .done = driver_done};
    struct backend *q = backend_quorum_new(cfg, cfg->nnodes, make_node, d, &clock, ev);
    if (!q) {
        free(d);
        return NULL;
    }
    d->quorum = q;
    return q;
}

struct backend *backend_new(struct ev_loop *loop, const struct config *cfg,
                            const struct backend_events *ev)
{
    switch (cfg->mode) {
    case REDIS_MODE_QUORUM:
        return quorum_new(loop, cfg, ev);
    case REDIS_MODE_CLUSTER:
        return backend_cluster_new(loop, cfg, ev);
    case REDIS_MODE_SENTINEL:
        return backend_sentinel_new(loop, cfg, ev);
    case REDIS_MODE_SINGLE:
        break;
    }
    return backend_redis_new(loop, cfg, &cfg->nodes[0], ev);
}
