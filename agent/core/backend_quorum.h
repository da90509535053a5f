/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_quorum.h -- quorum mode: a majority of N independent Redis nodes
 * (Redlock with fencing and restart exclusion), composed of N backends of
 * one node each, reached only through struct backend_ops.
 *
 * Pure: no event loop, no sockets, no clock of its own. The time comes from
 * struct quorum_clock, which also arms the one timer the backend needs (the
 * node timeout of acquires); the nodes come from the caller's factory. So
 * dlockd runs it over Redis (backend/backends.c) and the simulator over
 * modelled nodes, on virtual time. */
#ifndef DLOCKD_BACKEND_QUORUM_H
#define DLOCKD_BACKEND_QUORUM_H

#include <stdint.h>

#include "backend.h"
#include "config.h"

struct quorum_clock {
    void *arg;
    uint64_t (*now)(void *arg);           /* agent clock, CLOCK_BOOTTIME ns */
    uint64_t (*wall_us)(void *arg);       /* wall clock in µs, the fencing floor */
    void (*arm)(void *arg, uint64_t due); /* call backend_quorum_timeout() at due; 0 = disarm */
    /* Called once by destroy, after the last arm, so that the driver can free
     * what it keeps for the timer (not when backend_quorum_new fails). May be
     * NULL. */
    void (*done)(void *arg);
};

/* Makes node i of n (0-based), whose events must go to ev (ev stays valid
 * while the quorum lives). NULL when it cannot. */
typedef struct backend *(*backend_node_factory)(void *arg, unsigned i,
                                                const struct backend_events *ev);

/* Creates the backend over n nodes (1 to CONFIG_MAX_NODES; dlockd: cfg->nnodes)
 * made by make(make_arg, i, ...), waiting cfg->node_timeout_ms for a node;
 * its events go to ev. NULL when n is out of range, out of memory, or make
 * failed (the nodes made so far are destroyed). */
struct backend *backend_quorum_new(const struct config *cfg, unsigned n, backend_node_factory make,
                                   void *make_arg, const struct quorum_clock *clock,
                                   const struct backend_events *ev);

/* The timer armed through clock->arm has come (now: the agent clock): the
 * acquire phases open past their node timeout are decided without the nodes
 * still silent. Early or repeated calls are harmless. */
void backend_quorum_timeout(struct backend *b, uint64_t now);

#endif
