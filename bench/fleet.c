/* SPDX-License-Identifier: BSD-3-Clause */
/* fleet.c -- what the release notices cost Redis as the agents on it grow in
 * number. Every release publishes one notice on its name's own channel, to
 * which an agent subscribes only while it has a waiter for that name: the
 * agents that do not wait for it cost nothing. For each agent count, N agents
 * run on the run's Redis, and one client on agent 0 times try-once
 * acquire+release pairs on one name, while Redis' CPU and counters are read
 * around them; a second row does the same while a client of another agent
 * waits for another name, held there (so that agent listens on that name's
 * channel). The agents are stopped before the next count starts. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define READY_MS        10000  /* how long an agent may take to become usable */
#define LINKS_MS        10000  /* and all of them to have both their Redis connections */
#define SUBSCRIBE_MS    10000  /* and the waiter's agent to listen on the held name's channel */
#define GRANT_MS        10000  /* how long the waiter may take to get its lock */
#define HOLD_MS         600000 /* the plain client's hold of the waiter row's name */
#define WARMUP_MAX      1000   /* untimed pairs before each row, at most */
#define SETTLE_MS       50     /* how long Redis' script count may take to settle */
#define LOG_TAIL        20     /* log lines printed when something fails */
#define MAX_CONNECTIONS 16     /* each agent's max_connections: a few clients */
#define REDIS_SPARE     16     /* Redis connections needed beside two per agent */

static const char pair_name[] = "bench-fleet";
static const char held_name[] = "bench-fleet-held"; /* the waiter row's other name */
/* Their release channels (docs/protocol.md, "On Redis"). */
#define CHANNEL(name) BENCH_PREFIX "{" BENCH_PREFIX name "} released"
static const char pair_channel[] = CHANNEL("bench-fleet");
static const char held_channel[] = CHANNEL("bench-fleet-held");

/* File scope, so that fleet_kill() can reach them from a signal handler.
 * One count's agents run at a time. */
static pid_t pids[FLEET_MAX_AGENTS];
static char socks[FLEET_MAX_AGENTS][BENCH_PATH], logs[FLEET_MAX_AGENTS][BENCH_PATH];
static char conf[BENCH_PATH];
static int spawned; /* entries of the arrays in use */

void fleet_kill(void)
{
    for (int i = 0; i < spawned; i++) {
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
        unlink(socks[i]);
        unlink(logs[i]);
    }
    if (conf[0])
        unlink(conf);
}

/* ---- start and stop ---- */

static int write_conf(const char *dir)
{
    snprintf(conf, sizeof conf, "%s/fleet-dlockd.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f, "[agent]\nlog_level = warn\nstatus_socket =\nmax_connections = %d\n",
            MAX_CONNECTIONS);
    return fclose(f);
}

/* Spawns n agents, each on its own socket, all on the run's Redis, and waits
 * until each has granted a lock. */
static int start_agents(const struct env *e, int n, struct fleet_count *out)
{
    static struct agent_start w[FLEET_MAX_AGENTS];
    static char what[FLEET_MAX_AGENTS][48];
    char redis_addr[BENCH_PATH + 8];
    snprintf(redis_addr, sizeof redis_addr, "unix:%s", e->redis_sock);
    uint64_t start = now_ns();
    for (int i = 0; i < n; i++) {
        snprintf(socks[i], sizeof socks[i], "%s/f%d-%d.sock", e->dir, n, i);
        snprintf(logs[i], sizeof logs[i], "%s/f%d-%d.log", e->dir, n, i);
        snprintf(what[i], sizeof what[i], "dlockd %d of %d", i, n);
        pids[i] = 0;
        spawned = i + 1;
        char *argv[] = {DLOCKD_PATH, "-s", socks[i], "-c", conf, "-r", redis_addr, NULL};
        w[i] = (struct agent_start){.what = what[i],
                                    .sock = socks[i],
                                    .log = logs[i],
                                    .pid = &pids[i],
                                    .started = now_ns()};
        pids[i] = env_spawn(argv, logs[i]);
        if (pids[i] < 0) {
            pids[i] = 0;
            return -1;
        }
    }
    if (agents_wait_ready(w, n, BENCH_TTL_MS, READY_MS) != 0)
        return -1;
    out->ready_ms = (double)(now_ns() - start) / 1e6;
    return 0;
}

/* Stops every agent at once; their log lines and exit statuses. */
static void stop_agents(const struct env *e, struct fleet_count *out)
{
    static int status[FLEET_MAX_AGENTS];
    env_stop_children(pids, spawned, status);
    for (int i = 0; i < spawned; i++) {
        out->log_lines += env_log_lines(logs[i]);
        if (status[i] != 0 && out->bad_exits++ == 0)
            out->first_bad_exit = status[i];
    }
    if (!e->keep) {
        for (int i = 0; i < spawned; i++) {
            unlink(socks[i]);
            unlink(logs[i]);
        }
    }
    spawned = 0;
}

/* Are the agents still running? Prints the first dead one. */
static int check_alive(void)
{
    for (int i = 0; i < spawned; i++) {
        if (env_child_dead(&pids[i])) {
            fprintf(stderr, "dlock-bench: dlockd %d of %d is no longer running\n", i, spawned);
            env_print_log(logs[i], LOG_TAIL);
            return -1;
        }
    }
    return 0;
}

/* ---- Redis' figures ---- */

/* The inspection connection and the commands it sent: they count in
 * total_commands_processed too. */
struct probe {
    struct plain *p;
    long long sent;
};

struct counters {
    double cpu_s;        /* used_cpu_user + used_cpu_sys */
    long long commands;  /* total_commands_processed */
    long long publishes; /* cmdstat_publish calls, from scripts included */
    long long scripts;   /* cmdstat_evalsha calls */
    long long sent;      /* the probe's commands so far */
};

/* `calls=` of a commandstats line; 0 when the command has not run yet. */
static long long cmd_calls(const char *info, const char *cmd)
{
    char field[64], buf[256];
    long long calls;
    snprintf(field, sizeof field, "cmdstat_%s", cmd);
    if (info_value(info, field, buf, sizeof buf) != 0)
        return 0;
    return sscanf(buf, "calls=%lld", &calls) == 1 ? calls : -1;
}

static int read_counters(struct probe *pr, struct counters *c)
{
    char *info = redis_info(pr->p, "cpu stats commandstats");
    pr->sent++;
    if (!info)
        return -1;
    char user[32], sys[32], cmds[32];
    int rc = -1;
    if (info_value(info, "used_cpu_user", user, sizeof user) == 0 &&
        info_value(info, "used_cpu_sys", sys, sizeof sys) == 0 &&
        info_value(info, "total_commands_processed", cmds, sizeof cmds) == 0) {
        c->cpu_s = strtod(user, NULL) + strtod(sys, NULL);
        c->commands = strtoll(cmds, NULL, 10);
        c->publishes = cmd_calls(info, "publish");
        c->scripts = cmd_calls(info, "evalsha");
        c->sent = pr->sent;
        rc = c->publishes < 0 || c->scripts < 0 ? -1 : 0;
    }
    free(info);
    if (rc != 0)
        fprintf(stderr, "dlock-bench: cannot read INFO cpu, stats and commandstats\n");
    return rc;
}

/* The agent answers a release before Redis has run it: the counters are read
 * once the script count has stopped moving. */
static int settled_counters(struct probe *pr, struct counters *c)
{
    if (read_counters(pr, c) != 0)
        return -1;
    for (int i = 0; i < SETTLE_MS; i++) {
        long long prev = c->scripts;
        sleep_ms(1);
        if (read_counters(pr, c) != 0)
            return -1;
        if (c->scripts == prev)
            break;
    }
    return 0;
}

static long long numsub(struct probe *pr, const char *channel)
{
    pr->sent++;
    return redis_numsub(pr->p, channel);
}

/* How many of dlock's channels have subscribers. */
static long long channels(struct probe *pr)
{
    pr->sent++;
    return redis_channels(pr->p, BENCH_PREFIX "*");
}

/* Redis' connected_clients, the probe's own included; -1 on failure. */
static long long clients(struct probe *pr)
{
    char *info = redis_info(pr->p, "clients");
    pr->sent++;
    char v[32];
    long long n =
        info && info_value(info, "connected_clients", v, sizeof v) == 0 ? strtoll(v, NULL, 10) : -1;
    free(info);
    return n;
}

/* Waits until the n agents have both their connections (commands and
 * notices) beside the probe's. Not an error when they do not: the figures
 * then show it. */
static void wait_links(struct probe *pr, int n)
{
    uint64_t end = now_ns() + LINKS_MS * 1000000ull;
    long long have;
    while ((have = clients(pr)) >= 0 && have < 2LL * n + 1 && now_ns() < end)
        sleep_ms(5);
    if (have < 2LL * n + 1)
        fprintf(stderr, "dlock-bench: %lld Redis connection(s) with %d agent(s) up\n", have, n);
}

/* Waits until the waiter's agent listens on the held name's channel. */
static void wait_listening(struct probe *pr)
{
    uint64_t end = now_ns() + SUBSCRIBE_MS * 1000000ull;
    long long subs;
    while ((subs = numsub(pr, held_channel)) >= 0 && subs < 1 && now_ns() < end)
        sleep_ms(5);
    if (subs != 1)
        fprintf(stderr, "dlock-bench: %lld subscriber(s) of %s with its waiter queued\n", subs,
                held_channel);
}

/* CPU ticks of the agents, and of the agents, Redis and the benchmark; the
 * agents' together as one sample (cpu_ns 0 unless read for each). */
static void own_ticks(const struct env *e, struct proc_sample *agents, uint64_t *own)
{
    struct proc_sample p;
    memset(agents, 0, sizeof *agents);
    bool ns = true;
    for (int i = 0; i < spawned; i++)
        if (pids[i] > 0 && proc_sample(pids[i], &p) == 0) {
            agents->cpu_ticks += p.cpu_ticks;
            agents->cpu_ns += p.cpu_ns;
            ns = ns && p.cpu_ns;
        }
    if (!ns)
        agents->cpu_ns = 0;
    *own = agents->cpu_ticks;
    if (proc_sample(getpid(), &p) == 0)
        *own += p.cpu_ticks;
    if (e->redis.pid > 0 && proc_sample(e->redis.pid, &p) == 0)
        *own += p.cpu_ticks;
}

/* ---- the rows ---- */

static int pair(dlock_client *c)
{
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    dlock_lease *l;
    int rc = dlock_lease_acquire(c, pair_name, &o, &l);
    if (rc != 0)
        return rc;
    return dlock_lease_release(l);
}

/* Times n pairs through c, and reads Redis' figures around them. */
static int measure(const struct env *e, struct probe *pr, dlock_client *c, long n,
                   struct fleet_row *r)
{
    struct lat lat = {0};
    if (lat_reserve(&lat, (size_t)n) != 0) {
        fprintf(stderr, "dlock-bench: out of memory\n");
        return -1;
    }
    long warm = n / 10 < WARMUP_MAX ? n / 10 : WARMUP_MAX;
    for (long i = 0; i < warm; i++)
        pair(c);
    struct counters c0, c1;
    struct proc_sample m0, m1;
    struct proc_sample agents0, agents1;
    uint64_t own0, own1;
    int rc = -1;
    r->subscribers = numsub(pr, pair_channel);
    r->channels = channels(pr);
    if (settled_counters(pr, &c0) != 0)
        goto out;
    own_ticks(e, &agents0, &own0);
    machine_sample(&m0);
    uint64_t start = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        int err = pair(c);
        uint64_t t1 = now_ns();
        if (err == 0)
            lat_push(&lat, t1 - t0);
        else if (r->errors++ == 0)
            r->first_error = err;
    }
    double wall = ns_to_s(now_ns() - start);
    machine_sample(&m1);
    own_ticks(e, &agents1, &own1);
    if (settled_counters(pr, &c1) != 0)
        goto out;
    lat_summarise(&lat, wall, &r->s);
    /* The probe's own commands between the two readings are not the pairs'. */
    long long ours = c1.sent - c0.sent;
    r->redis_cpu_us = (c1.cpu_s - c0.cpu_s) * 1e6 / (double)n;
    r->commands = (double)(c1.commands - c0.commands - ours) / (double)n;
    r->publishes = (double)(c1.publishes - c0.publishes) / (double)n;
    r->agents_cpu_us = cpu_us_per_op(proc_cpu_s(&agents0, &agents1), (double)n);
    /* The rest of the machine: what is neither us nor our children. */
    uint64_t busy = m1.cpu_ticks - m0.cpu_ticks, own = own1 - own0;
    m1.cpu_ticks = m0.cpu_ticks + (busy > own ? busy - own : 0);
    r->others_pct = ns_to_s(m1.t_ns - m0.t_ns) >= 1.0 ? proc_cpu_pct(&m0, &m1) : -1;
    if (numsub(pr, pair_channel) != r->subscribers)
        r->subscribers = -1; /* it changed during the row */
    if (channels(pr) != r->channels)
        r->channels = -1;
    rc = 0;
out:
    lat_free(&lat);
    return rc;
}

/* The waiter of the second row: an acquire that waits forever. */
struct waiter {
    bool done;
    int status;
    dlock_lease *lease;
};

static void on_waiter(dlock_client *client, int status, dlock_lease *lease, void *arg)
{
    (void)client;
    struct waiter *w = arg;
    w->done = true;
    w->status = status;
    w->lease = lease;
}

/* Runs the client's callbacks until the waiter is answered or ms have passed. */
static void wait_answer(dlock_client *c, struct waiter *w, int ms)
{
    uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
    while (!w->done) {
        uint64_t now = now_ns();
        if (now >= end)
            return;
        struct pollfd pfd = {.fd = dlock_client_fd(c), .events = POLLIN};
        int left = (int)((end - now) / 1000000ull) + 1;
        if (poll(&pfd, 1, left) < 0 && errno != EINTR)
            return;
        if (dlock_client_dispatch(c) != 0)
            return;
    }
}

static dlock_client *open_client(const char *sock)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, sock);
    if (rc != 0) {
        fprintf(stderr, "dlock-bench: dlock_client_open %s: %s\n", sock, dlock_strerror(rc));
        return NULL;
    }
    return c;
}

/* The second row: another name is held in Redis by a plain client (the
 * probe, for longer than any row takes), and a client of the last agent waits
 * for it through the whole measurement, so that agent listens on that name's
 * channel; then the probe deletes the key and publishes the name on the
 * channel, and the waiter must get it. */
static int measure_with_waiter(const struct env *e, struct probe *pr, dlock_client *c, int n_agents,
                               long n, struct fleet_row *r)
{
    dlock_client *wc = open_client(socks[n_agents - 1]);
    struct waiter w = {0};
    bool held = false;
    int rc = -1;
    if (!wc)
        goto out;
    int err = plain_hold(pr->p, held_name, HOLD_MS);
    pr->sent++;
    if (err != 0) {
        fprintf(stderr, "dlock-bench: SET NX of %s for the waiter row: %s\n", held_name,
                plain_strerror(err));
        goto out;
    }
    held = true;
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = DLOCK_WAIT_FOREVER};
    err = dlock_lease_acquire_async(wc, held_name, &o, on_waiter, &w);
    /* The agent reads a connection's requests in order: once the ping is
     * answered, the acquire is queued. */
    if (err == 0)
        err = dlock_client_ping(wc);
    if (err != 0 || w.done) {
        fprintf(stderr, "dlock-bench: the waiter of %s: %s\n", held_name,
                dlock_strerror(err ? err : w.status));
        goto out;
    }
    /* Its agent found the name taken and listens for its release. */
    wait_listening(pr);
    if (measure(e, pr, c, n, r) != 0)
        goto out;
    if (dlock_client_dispatch(wc) == 0)
        r->waited = !w.done;
    err = plain_drop_notify(pr->p, held_name, held_channel);
    pr->sent += 2;
    held = false;
    if (err != 0) {
        fprintf(stderr, "dlock-bench: release of %s: %s\n", held_name, plain_strerror(err));
        goto out;
    }
    wait_answer(wc, &w, GRANT_MS);
    r->granted = w.done ? w.status : DLOCK_ETIMEDOUT;
    if (w.done && w.status == 0)
        dlock_lease_release(w.lease);
    rc = 0;
out:
    if (held) {
        plain_drop_notify(pr->p, held_name, held_channel);
        pr->sent += 2;
    }
    dlock_client_close(wc);
    return rc;
}

/* ---- one agent count ---- */

static int run_count(const struct env *e, struct probe *pr, int n, long pairs,
                     struct fleet_count *out)
{
    memset(out, 0, sizeof *out);
    out->agents = n;
    for (int k = 0; k < 2; k++) {
        out->row[k].agents = n;
        out->row[k].waiter = k == 1;
        out->row[k].granted = 1; /* not tried */
    }
    uint64_t start = now_ns();
    fprintf(stderr, "dlock-bench: fleet: %d agent(s) on one Redis\n", n);
    dlock_client *c = NULL;
    int rc = start_agents(e, n, out);
    if (rc == 0) {
        wait_links(pr, n);
        c = open_client(socks[0]);
        rc = c ? 0 : -1;
    }
    if (rc == 0)
        rc = measure(e, pr, c, pairs, &out->row[0]);
    if (rc == 0)
        rc = measure_with_waiter(e, pr, c, n, pairs, &out->row[1]);
    dlock_client_close(c);
    if (rc == 0)
        rc = check_alive();
    stop_agents(e, out);
    out->wall_s = ns_to_s(now_ns() - start);
    return rc;
}

/* Redis holds two connections per agent (commands, notices): redis-server
 * lowers maxclients to what its descriptor limit allows. The benchmark holds a
 * few descriptors whatever the count, and each agent raises its own limit to
 * what its max_connections needs. */
static int check_maxclients(struct probe *pr, int most)
{
    long long max = redis_maxclients(pr->p);
    pr->sent++;
    if (max < 0) {
        fprintf(stderr, "dlock-bench: CONFIG GET maxclients failed\n");
        return -1;
    }
    if (max < 2LL * most + REDIS_SPARE) {
        fprintf(stderr,
                "dlock-bench: redis-server takes %lld clients (maxclients, limited by its "
                "descriptor limit): too few for %d agents (%d); raise ulimit -n\n",
                max, most, 2 * most + REDIS_SPARE);
        return -1;
    }
    return 0;
}

int run_fleet(struct env *e, const int *counts, int ncounts, long pairs, struct fleet_result *out)
{
    memset(out, 0, sizeof *out);
    out->pairs = pairs;
    struct probe pr = {.p = plain_open(e->redis_sock)};
    if (!pr.p) {
        fprintf(stderr, "dlock-bench: cannot open a hiredis connection\n");
        return -1;
    }
    int most = 0;
    for (int i = 0; i < ncounts; i++)
        most = counts[i] > most ? counts[i] : most;
    int rc = check_maxclients(&pr, most);
    if (rc == 0 && write_conf(e->dir) != 0) {
        fprintf(stderr, "dlock-bench: cannot write %s: %s\n", conf, strerror(errno));
        rc = -1;
    }
    for (int i = 0; i < ncounts && rc == 0; i++) {
        rc = run_count(e, &pr, counts[i], pairs, &out->count[i]);
        if (rc == 0)
            out->ncounts = i + 1;
    }
    plain_close(pr.p);
    if (conf[0] && !e->keep)
        unlink(conf);
    return rc;
}
