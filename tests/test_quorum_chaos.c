/* SPDX-License-Identifier: BSD-3-Clause */
/* test_quorum_chaos.c -- mutual exclusion and fencing under chaos in quorum
 * mode: 3 Redis nodes, 3 agents, 3 client threads per agent, all doing
 * read-modify-write of one counter under one lock, while nodes are killed
 * and restarted empty and agents are frozen (SIGSTOP) at random.
 *
 * The workload is lockset.c's: one counter under one lock name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "lockset.h"

#define NAGENTS      3
#define PER_AGENT    3
#define NTHREADS     (NAGENTS * PER_AGENT)
#define CHAOS_MS     13000
#define LEASE_TTL    800
#define ACQUIRE_WAIT 1000

/* Result codes a client may meet under chaos; anything else is counted as
 * unexpected. */
static int expected_failure(int rc)
{
    switch (rc) {
    case DLOCK_EBUSY:
    case DLOCK_ETIMEDOUT:
    case DLOCK_ENOQUORUM:
    case DLOCK_EUNAVAIL:
    case DLOCK_ELOST:
    case DLOCK_EDISCONNECTED:
        return 1;
    default:
        return 0;
    }
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* The chaos: at random, restart a node (killed and started again empty, at
 * once or after a while; now and then two at a time) and freeze an agent for
 * 100-1500 ms. */
struct chaos {
    int64_t node_back_at[H_MAX_NODES]; /* 0: running */
    int64_t agent_thaw_at[H_MAX_AGENTS];
    long restarts, kills, pauses, double_downs;
};

/* Kills node n, to be started again (empty) `down_ms` from now. */
static void chaos_kill(struct chaos *ch, int n, int64_t now, int down_ms)
{
    h_node_kill(n);
    ch->node_back_at[n] = now + down_ms;
    ch->kills++;
}

static void chaos_tick(struct chaos *ch, unsigned *seed, int64_t now, int force_double)
{
    for (int n = 0; n < 3; n++)
        if (ch->node_back_at[n] && now >= ch->node_back_at[n]) {
            h_node_start(n);
            ch->node_back_at[n] = 0;
        }
    for (int i = 0; i < NAGENTS; i++)
        if (ch->agent_thaw_at[i] && now >= ch->agent_thaw_at[i]) {
            h_agent_resume(i);
            ch->agent_thaw_at[i] = 0;
        }
    int down = 0, frozen = 0;
    for (int n = 0; n < 3; n++)
        down += ch->node_back_at[n] != 0;
    for (int i = 0; i < NAGENTS; i++)
        frozen += ch->agent_thaw_at[i] != 0;
    unsigned r = rand_r(seed) % 100;
    int n = (int)(rand_r(seed) % 3);
    if ((r < 1 || force_double) && down == 0) {
        /* two nodes down at once: no majority for a while */
        int m = (n + 1 + (int)(rand_r(seed) % 2)) % 3;
        chaos_kill(ch, n, now, 200 + (int)(rand_r(seed) % 600));
        chaos_kill(ch, m, now, 200 + (int)(rand_r(seed) % 600));
        ch->double_downs++;
    } else if (r < 3 && !ch->node_back_at[n]) {
        h_node_restart(n);
        ch->restarts++;
    } else if (r < 5 && down == 0) {
        chaos_kill(ch, n, now, 200 + (int)(rand_r(seed) % 800));
    } else if (r < 10 && frozen < 2) {
        int i = (int)(rand_r(seed) % NAGENTS);
        if (!ch->agent_thaw_at[i]) {
            h_agent_pause(i);
            ch->agent_thaw_at[i] = now + 100 + rand_r(seed) % 1400;
            ch->pauses++;
        }
    }
}

ITEST(quorum_chaos, counter_under_node_restarts_and_frozen_agents)
{
    h_quorum_start(3, NAGENTS, "max_ttl_ms = 1000\ndefault_ttl_ms = 800\nmin_ttl_ms = 400",
                   "command_timeout_ms = 300");
    unsigned seed = ls_seed();
    /* Mostly a few milliseconds; one hold in 32 lasts about the TTL, so that
     * renewals run under the chaos and some leases are lost (or frozen)
     * before the write. */
    struct ls_params p = {.names = {"chaos"},
                          .nnames = 1,
                          .ttl_ms = LEASE_TTL,
                          .wait_ms = ACQUIRE_WAIT,
                          .long_hold = 32,
                          .long_min_ms = 200,
                          .long_span_ms = 700,
                          .expected = expected_failure};
    const char *socks[NTHREADS];
    for (int t = 0; t < NTHREADS; t++)
        socks[t] = H.agent[t / PER_AGENT].sock;
    static struct ls_run run;
    ls_start(&run, &p, socks, NTHREADS, seed);

    struct chaos ch;
    memset(&ch, 0, sizeof ch);
    int64_t start = mono_ms(), end = start + CHAOS_MS;
    while (mono_ms() < end) {
        int64_t now = mono_ms();
        chaos_tick(&ch, &seed, now, !ch.double_downs && now > start + CHAOS_MS / 2);
        sleep_ms(50);
    }
    /* Everything back, so that the agents can stop cleanly. */
    for (int i = 0; i < NAGENTS; i++)
        h_agent_resume(i);
    for (int n = 0; n < 3; n++)
        if (ch.node_back_at[n])
            h_node_start(n);
    ls_stop(&run);
    cr_log_info("chaos: %ld node restarts, %ld kills (%ld times two at once), %ld agent freezes",
                ch.restarts, ch.kills, ch.double_downs, ch.pauses);
    cr_log_info("clients: %ld grants; busy %ld, timed out %ld, no quorum %ld, unavailable %ld, "
                "lost %ld, disconnected %ld, failed opens %ld",
                run.grants, ls_failures(&run, DLOCK_EBUSY), ls_failures(&run, DLOCK_ETIMEDOUT),
                ls_failures(&run, DLOCK_ENOQUORUM), ls_failures(&run, DLOCK_EUNAVAIL),
                ls_failures(&run, DLOCK_ELOST), ls_failures(&run, DLOCK_EDISCONNECTED),
                run.open_failures);
    ls_check(&run, 50);
    cr_assert_gt(ch.restarts + ch.kills, 0, "no node was restarted");
    cr_assert_gt(ch.pauses, 0, "no agent was frozen");
}
