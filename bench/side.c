/* SPDX-License-Identifier: BSD-3-Clause */
/* side.c -- agents of their own for the contended parts (cross-agent wake,
 * cohort, two hosts): each on the run's Redis with a configuration file of
 * its own, started and probed as the fleet's agents are, and the worker
 * processes of those parts, so that a signal can kill them all. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define READY_MS 10000 /* how long an agent may take to grant a first lock */

/* For side_kill(), from a signal handler. */
static volatile pid_t agent_pids[SIDE_MAX], worker_pids[SIDE_MAX_WORKERS];
static char files[SIDE_MAX][3][BENCH_PATH];

void side_track_worker(int slot, pid_t pid)
{
    if (slot >= 0 && slot < SIDE_MAX_WORKERS)
        worker_pids[slot] = pid;
}

void side_kill(void)
{
    for (int i = 0; i < SIDE_MAX_WORKERS; i++)
        if (worker_pids[i] > 0)
            kill(worker_pids[i], SIGKILL);
    for (int i = 0; i < SIDE_MAX; i++) {
        if (agent_pids[i] > 0)
            kill(agent_pids[i], SIGKILL);
        for (int k = 0; k < 3; k++)
            if (files[i][k][0])
                unlink(files[i][k]);
    }
}

static int write_conf(const struct side_agent *a)
{
    FILE *f = fopen(a->conf, "w");
    if (!f)
        return -1;
    fprintf(f, "[agent]\nlog_level = warn\nstatus_socket =\n%s", a->settings ? a->settings : "");
    return fclose(f);
}

int side_start(const struct env *e, struct side_agent *a, int n)
{
    struct agent_start w[SIDE_MAX];
    char redis_addr[BENCH_PATH + 8];
    snprintf(redis_addr, sizeof redis_addr, "unix:%s", e->redis_sock);
    if (n > SIDE_MAX)
        return -1;
    for (int i = 0; i < n; i++) {
        a[i].pid = 0;
        a[i].exit = -1;
        snprintf(a[i].sock, sizeof a[i].sock, "%s/%s.sock", e->dir, a[i].tag);
        snprintf(a[i].log, sizeof a[i].log, "%s/%s.log", e->dir, a[i].tag);
        snprintf(a[i].conf, sizeof a[i].conf, "%s/%s-dlockd.conf", e->dir, a[i].tag);
        memcpy(files[i][0], a[i].sock, BENCH_PATH);
        memcpy(files[i][1], a[i].log, BENCH_PATH);
        memcpy(files[i][2], a[i].conf, BENCH_PATH);
        if (write_conf(&a[i]) != 0) {
            fprintf(stderr, "dlock-bench: cannot write %s: %s\n", a[i].conf, strerror(errno));
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        char *argv[] = {DLOCKD_PATH, "-s", a[i].sock, "-c", a[i].conf, "-r", redis_addr, NULL};
        w[i] = (struct agent_start){
            .what = a[i].tag, .sock = a[i].sock, .log = a[i].log, .pid = &a[i].pid};
        w[i].started = now_ns();
        pid_t pid = env_spawn(argv, a[i].log);
        if (pid < 0)
            return -1;
        a[i].pid = pid;
        agent_pids[i] = pid;
    }
    int rc = agents_wait_ready(w, n, BENCH_TTL_MS, READY_MS);
    for (int i = 0; i < n; i++)
        a[i].ready_ms = w[i].ready_ms;
    return rc;
}

void side_stop(const struct env *e, struct side_agent *a, int n)
{
    pid_t pids[SIDE_MAX];
    int status[SIDE_MAX];
    for (int i = 0; i < n; i++)
        pids[i] = a[i].pid;
    env_stop_children(pids, n, status);
    for (int i = 0; i < n; i++) {
        agent_pids[i] = 0;
        a[i].pid = 0;
        if (a[i].sock[0]) { /* started, or tried to */
            a[i].exit = status[i];
            a[i].log_lines = env_log_lines(a[i].log);
            if (a[i].log_lines > 0)
                env_print_log(a[i].log, 20);
        }
        unlink(a[i].sock);
        if (!e->keep) {
            unlink(a[i].log);
            unlink(a[i].conf);
        }
        for (int k = 0; k < 3; k++)
            files[i][k][0] = '\0';
    }
}
