/* SPDX-License-Identifier: BSD-3-Clause */
/* backends.h -- the one place that makes the store of cfg->mode: a single
 * Redis node, or a quorum of independent nodes. */
#ifndef DLOCKD_BACKENDS_H
#define DLOCKD_BACKENDS_H

#include <ev.h>

#include "backend.h"
#include "config.h"

/* Creates the backend of cfg->mode on loop and starts connecting; its
 * events go to ev. NULL only when out of memory. */
struct backend *backend_new(struct ev_loop *loop, const struct config *cfg,
                            const struct backend_events *ev);

#endif
