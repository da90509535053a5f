/* SPDX-License-Identifier: BSD-3-Clause */
/* devmode.h -- `dlockd --dev`: a private redis-server in a temp directory. */
#ifndef DLOCKD_DEVMODE_H
#define DLOCKD_DEVMODE_H

#include <ev.h>
#include <stdbool.h>

#include "config.h"

/* Starts redis-server (from PATH) on a unix socket in a fresh temporary
 * directory with persistence off, waits until it answers, and points cfg at
 * it (and the agent's socket into the same directory unless keep_socket, the
 * status socket beside it unless configured). 0, or -1 with the reason
 * logged. */
int devmode_start(struct ev_loop *loop, struct config *cfg, bool keep_socket);
/* Prints the export line and a command to try. */
void devmode_banner(void *cfg); /* a struct config */
/* Stops redis-server and removes the directory. Safe to call twice. */
void devmode_stop(void);

#endif
