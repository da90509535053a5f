/* SPDX-License-Identifier: BSD-3-Clause */
/* delay.c -- dlock and the plain hiredis client with Redis across a network:
 * a delay proxy in front of the run's Redis, an agent of its own whose -r
 * points at the proxy, and the 1-client and many-client runs of pairs.c
 * through it, the plain client connecting through the same proxy. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define START_MS 10000 /* for the agent to grant a first lock */
#define PINGS    2000  /* Redis PING round trips of each kind */
#define LOG_TAIL 20

/* For delay_kill(), from a signal handler. */
static volatile pid_t agent_pid;
static char agent_sock[BENCH_PATH], agent_log[BENCH_PATH], proxy_sock[BENCH_PATH];

/* n PINGs to Redis on sock, on a fresh connection, each timed into l: 0, or
 * -1 after printing why. */
static int pings(const char *sock, long n, struct lat *l)
{
    struct plain *p = plain_open(sock);
    if (!p) {
        fprintf(stderr, "dlock-bench: cannot connect to %s\n", sock);
        return -1;
    }
    int rc = 0;
    for (long i = 0; i < n && rc == 0; i++) {
        uint64_t t0 = now_ns();
        rc = plain_ping(p);
        if (rc == 0)
            lat_push(l, now_ns() - t0);
    }
    plain_close(p);
    if (rc != 0)
        fprintf(stderr, "dlock-bench: PING on %s: %s\n", sock, plain_strerror(rc));
    return rc;
}

/* Direct and proxied PINGs in alternating rounds: the delay achieved. */
static int measure_pings(const struct env *e, struct delay_result *out)
{
    struct lat direct = {0}, proxied = {0};
    int rc = -1;
    if (lat_reserve(&direct, PINGS) != 0 || lat_reserve(&proxied, PINGS) != 0)
        goto out;
    for (int i = 0; i < 10; i++) {
        if (pings(e->redis_sock, PINGS / 10, &direct) != 0 ||
            pings(proxy_sock, PINGS / 10, &proxied) != 0)
            goto out;
    }
    lat_summarise(&direct, 0, &out->ping_direct);
    lat_summarise(&proxied, 0, &out->ping_proxied);
    rc = 0;
out:
    lat_free(&direct);
    lat_free(&proxied);
    return rc;
}

static int start_agent(struct env *d, struct delay_result *out)
{
    char redis_addr[BENCH_PATH + 8];
    snprintf(redis_addr, sizeof redis_addr, "unix:%s", proxy_sock);
    char *argv[] = {DLOCKD_PATH, "-s", agent_sock, "-r", redis_addr, "-c", d->conf, NULL};
    struct agent_start s = {
        .what = "dlockd behind the delay proxy", .sock = agent_sock, .log = agent_log};
    s.started = now_ns();
    pid_t pid = env_spawn(argv, agent_log);
    if (pid < 0)
        return -1;
    agent_pid = pid;
    d->agent_pid = pid;
    s.pid = &d->agent_pid;
    int rc = agents_wait_ready(&s, 1, BENCH_TTL_MS, START_MS);
    agent_pid = d->agent_pid;
    out->agent_ready_ms = s.ready_ms;
    return rc;
}

static void stop_agent(struct env *d, struct delay_result *out)
{
    pid_t pid = d->agent_pid;
    if (pid > 0) {
        out->agent_exit = env_stop_child(&pid);
        d->agent_pid = 0;
    }
    agent_pid = 0;
    out->log_lines = env_log_lines(agent_log);
    if (out->log_lines > 0)
        env_print_log(agent_log, LOG_TAIL);
}

struct delayproxy *delay_open(struct env *e, double delay_us, struct env *d,
                              struct delay_result *out)
{
    memset(out, 0, sizeof *out);
    out->delay_us = delay_us;
    out->agent_exit = -1;
    snprintf(proxy_sock, sizeof proxy_sock, "%s/delay-redis.sock", e->dir);
    snprintf(agent_sock, sizeof agent_sock, "%s/delay-dlock.sock", e->dir);
    snprintf(agent_log, sizeof agent_log, "%s/delay-dlockd.log", e->dir);
    struct delayproxy *proxy =
        delayproxy_start(proxy_sock, e->redis_sock, (uint64_t)(delay_us * 1e3));
    if (!proxy)
        return NULL;
    /* The same Redis, seen through the proxy, with an agent of its own:
     * pairs.c runs on this view of the environment as on the run's own. */
    *d = *e;
    snprintf(d->agent_sock, sizeof d->agent_sock, "%s", agent_sock);
    snprintf(d->agent_log, sizeof d->agent_log, "%s", agent_log);
    snprintf(d->redis_sock, sizeof d->redis_sock, "%s", proxy_sock);
    d->agent_pid = 0;
    int rc = measure_pings(e, out);
    delayproxy_lateness(proxy, &out->late_ping);
    if (rc == 0)
        rc = start_agent(d, out);
    if (rc != 0) {
        delay_close(d, proxy, out);
        return NULL;
    }
    return proxy;
}

void delay_close(struct env *d, struct delayproxy *proxy, struct delay_result *out)
{
    stop_agent(d, out);
    delayproxy_stop(proxy);
    unlink(agent_sock);
    if (!d->keep)
        unlink(agent_log);
}

int run_delay(struct env *e, double delay_us, long pairs, int clients, double seconds,
              struct delay_result *out)
{
    struct env d;
    struct delayproxy *proxy = delay_open(e, delay_us, &d, out);
    if (!proxy)
        return -1;
    out->pairs = pairs;
    out->clients = clients;
    out->seconds = seconds;
    fprintf(stderr, "dlock-bench: delayed: 1 client, dlock and plain hiredis in turns\n");
    delayproxy_lateness(proxy, &out->late_single); /* from here on */
    int rc = run_single(&dlock_driver, &plain_driver, &d, pairs, &out->d1, &out->p1);
    delayproxy_lateness(proxy, &out->late_single);
    if (rc == 0) {
        fprintf(stderr, "dlock-bench: delayed: many clients, dlock and plain hiredis in turns\n");
        rc = run_multi(&dlock_driver, &plain_driver, &d, clients, seconds, &out->dm, &out->pm);
        delayproxy_lateness(proxy, &out->late_multi);
    }
    delay_close(&d, proxy, out);
    return rc;
}

void delay_kill(void)
{
    if (agent_pid > 0)
        kill(agent_pid, SIGKILL);
    if (proxy_sock[0])
        unlink(proxy_sock);
    if (agent_sock[0])
        unlink(agent_sock);
    if (agent_log[0])
        unlink(agent_log);
}
