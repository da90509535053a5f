/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_quorum.h -- quorum mode: a majority of N independent Redis nodes
 * (Redlock with fencing and restart exclusion), on N single-node backends. */
#ifndef DLOCKD_BACKEND_QUORUM_H
#define DLOCKD_BACKEND_QUORUM_H

#include <ev.h>

#include "backend.h"
#include "config.h"

/* Creates the backend over cfg->nodes and starts connecting to every node;
 * never fails but for memory. */
struct backend *backend_quorum_new(struct ev_loop *loop, const struct config *cfg,
                                   const struct backend_events *events);

#endif
