/* SPDX-License-Identifier: BSD-3-Clause */
/* agent.h -- dlockd's event loop around the lock core (core/core.h). */
#ifndef DLOCKD_AGENT_H
#define DLOCKD_AGENT_H

#include <ev.h>
#include <stdbool.h>

#include "backend.h"
#include "config.h"
#include "core.h"
#include "persist.h"
#include "server.h"
#include "status.h"

/* dlockd's driver: the event loop around the lock core. It owns the
 * sockets (server, status), the backend and the one timer, and hands the
 * core every request, answer and tick with the time. */
struct agent {
    struct ev_loop *loop;
    const struct config *cfg;
    struct core core;
    struct backend *backend;
    struct server server;
    struct status status;
    uint64_t started;
    int tick_fd;        /* timerfd on CLOCK_BOOTTIME, armed at the core's next due time */
    uint64_t tick_due;  /* what tick_fd is armed at, 0 = disarmed */
    ev_io tick;         /* tick_fd readable: timers are due */
    ev_prepare prepare; /* flushes output, re-arms `tick` */
    /* Never started, only fed at the highest priority: the replies queued
     * by one event go out right after it, ahead of the other events of the
     * same loop turn (in_prepare: not while `prepare` flushes anyway). */
    ev_idle reply_flush;
    bool in_prepare;
    ev_signal sigterm, sigint, sigusr2;
    struct persist persist;
    ev_timer shutdown_timer;
    double shutdown_deadline;
    void (*ready_hook)(void *arg); /* called once, when Redis first answers */
    void *ready_arg;
    bool ready; /* Redis answered once (the dev banner, STATUS=) */
    bool shutting_down;
    int exit_code;
};

/* Creates the agent: socket, backend, signal handlers. 0 or -1 (logged). */
int agent_init(struct agent *a, struct ev_loop *loop, const struct config *cfg, bool successor);
/* Frees what agent_init made. */
void agent_free(struct agent *a);
/* A stop: releases every lease, tells every holder, waits for the backend
 * (bounded), removes the state directory, then breaks the loop. */
void agent_shutdown(struct agent *a);
/* A restart: exits at once, leaving every lease to a successor (the state
 * directory, the keys and the lease pages stay); a stop when there is no
 * state directory. why is for the log. */
void agent_leave(struct agent *a, const char *why);
/* Whether the agent can restart in place (agent_reexec()): it keeps a state
 * directory, and is not stopping. */
bool agent_can_reexec(const struct agent *a);
/* Executes the agent's program again in the same process, with argv, as
 * its own successor on another Redis: the leases are taken over in doubt
 * and confirmed on the Redis of the configuration read then. Returns only
 * when it cannot (-1, logged): the agent goes on as it was. */
int agent_reexec(struct agent *a, char *const argv[], const char *why);

/* After a reload: waiters the policy no longer allows fail with
 * DLOCK_EDENIED (leases stay until released). */
void agent_policy_changed(struct agent *a);

#endif
