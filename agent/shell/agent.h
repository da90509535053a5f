/* SPDX-License-Identifier: BSD-3-Clause */
/* agent.h -- the lock logic of dlockd: acquire queues, the watchdog,
 * releases and losses, between client connections and the backend. */
#ifndef DLOCKD_AGENT_H
#define DLOCKD_AGENT_H

#include <ev.h>
#include <stdbool.h>

#include "backend.h"
#include "config.h"
#include "server.h"
#include "stats.h"
#include "status.h"
#include "table.h"

struct orphan;

struct agent {
    struct ev_loop *loop;
    const struct config *cfg;
    struct backend *backend;
    struct server server;
    struct status status;
    struct agent_stats stats;
    uint64_t started;
    char host[64]; /* for holder records */
    struct table table;
    struct theap timers;
    int tick_fd;        /* timerfd on CLOCK_BOOTTIME, armed at the earliest node of `timers` */
    uint64_t tick_due;  /* what tick_fd is armed at, 0 = disarmed */
    ev_io tick;         /* tick_fd readable: timers are due */
    ev_prepare prepare; /* flushes output, re-arms `tick` */
    ev_signal sigterm, sigint;
    ev_timer shutdown_timer;
    double shutdown_deadline;
    struct orphan *orphans;        /* releases to retry when Redis is back */
    unsigned ready_seq;            /* counts the times a Redis link came back */
    struct tnode orphan_retry;     /* TK_AGENT: retry them while the link is up */
    uint64_t down_since;           /* Redis unreachable since, 0 while it answers */
    int down_err;                  /* then: DLOCK_EUNAVAIL or DLOCK_ENOQUORUM */
    void (*ready_hook)(void *arg); /* called once, when Redis first answers */
    void *ready_arg;
    bool ready; /* Redis answered once (the dev banner, STATUS=) */
    bool shutting_down;
    int exit_code;
};

/* Creates the agent: socket, backend, signal handlers. 0 or -1 (logged). */
int agent_init(struct agent *a, struct ev_loop *loop, const struct config *cfg);
/* Frees what agent_init made. */
void agent_free(struct agent *a);
/* Releases every lease, waits for the backend (bounded), then breaks the loop. */
void agent_shutdown(struct agent *a);

/* After a reload: waiters the policy no longer allows fail with
 * DLOCK_EDENIED (leases stay until released). */
void agent_policy_changed(struct agent *a);

#endif
