/* SPDX-License-Identifier: BSD-3-Clause */
/* quorum.c -- acquire+release pairs through dlockd in single mode (1 Redis
 * node) and in quorum mode (3 and 5 nodes), one client on one name per agent,
 * in alternating rounds, beside the plain hiredis pair on the 1-node Redis.
 * Each agent has its own redis-servers; this part starts them all in the
 * run's temp dir and stops them before it returns. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define MAX_NODES  5
#define ROUNDS     10    /* turns of each row, a different row first in each */
#define WARMUP_MAX 1000  /* untimed pairs per row, at most */
#define START_MS   10000 /* how long a redis-server may take to answer */
#define STOP_MS    5000  /* and to exit after SIGTERM */
#define READY_MS   10000 /* how long an agent may take to become usable */
#define LEFT_MS    1000  /* how long a released key may stay on a node */
#define LOG_TAIL   20    /* log lines printed when something fails */
#define SETTLE_MS  50    /* how long the script count may take to settle */

static const int node_counts[QUORUM_CONFIGS] = {1, 3, 5};

struct node {
    char sock[BENCH_PATH], log[BENCH_PATH];
    struct redisproc proc;
};

struct agent {
    int nodes;
    struct node node[MAX_NODES];
    char sock[BENCH_PATH], conf[BENCH_PATH], log[BENCH_PATH];
    pid_t pid;
    uint64_t started; /* when it was spawned */
};

/* File scope, so that quorum_kill() can reach them from a signal handler. */
static struct agent agents[QUORUM_CONFIGS];

void quorum_kill(void)
{
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        struct agent *a = &agents[i];
        if (a->pid > 0)
            kill(a->pid, SIGKILL);
        for (int k = 0; k < a->nodes; k++) {
            if (a->node[k].proc.pid > 0)
                kill(a->node[k].proc.pid, SIGKILL);
            if (a->node[k].sock[0])
                unlink(a->node[k].sock);
            if (a->node[k].log[0])
                unlink(a->node[k].log);
        }
        if (a->sock[0])
            unlink(a->sock);
        if (a->conf[0])
            unlink(a->conf);
        if (a->log[0])
            unlink(a->log);
    }
}

/* ---- start and stop ---- */

/* The agents' shared settings: a short max_ttl_ms, because an agent in quorum
 * mode leaves a node out of quorums until it has been up that long. */
static int write_conf(const struct agent *a)
{
    FILE *f = fopen(a->conf, "w");
    if (!f)
        return -1;
    fprintf(f,
            "[agent]\nlog_level = warn\nstatus_socket =\nmax_ttl_ms = %d\ndefault_ttl_ms = %d\n%s",
            QUORUM_TTL_MS, QUORUM_TTL_MS, bench_handoff_setting);
    return fclose(f);
}

static int setup(const char *dir)
{
    memset(agents, 0, sizeof agents);
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        struct agent *a = &agents[i];
        int n = node_counts[i];
        for (int k = 0; k < n; k++) {
            snprintf(a->node[k].sock, sizeof a->node[k].sock, "%s/q%d-redis-%d.sock", dir, n, k);
            snprintf(a->node[k].log, sizeof a->node[k].log, "%s/q%d-redis-%d.log", dir, n, k);
        }
        snprintf(a->sock, sizeof a->sock, "%s/q%d-dlock.sock", dir, n);
        snprintf(a->conf, sizeof a->conf, "%s/q%d-dlockd.conf", dir, n);
        snprintf(a->log, sizeof a->log, "%s/q%d-dlockd.log", dir, n);
        a->nodes = n;
        if (write_conf(a) != 0) {
            fprintf(stderr, "dlock-bench: cannot write %s: %s\n", a->conf, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Every redis-server at once, then waits until each answers. */
static int start_nodes(const char *dir)
{
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        for (int k = 0; k < agents[i].nodes; k++) {
            struct node *nd = &agents[i].node[k];
            if (env_spawn_redis(&nd->proc, dir, nd->sock, nd->log) != 0)
                return -1;
        }
    }
    uint64_t end = now_ns() + START_MS * 1000000ull;
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        for (int k = 0; k < agents[i].nodes; k++) {
            struct node *nd = &agents[i].node[k];
            uint64_t now = now_ns();
            int left = now < end ? (int)((end - now) / 1000000ull) : 0;
            if (redisproc_wait_ready(&nd->proc, left) != 0) {
                fprintf(stderr, "dlock-bench: redis-server %s: %s\n", nd->sock, nd->proc.err);
                env_print_log(nd->log, LOG_TAIL);
                return -1;
            }
        }
    }
    return 0;
}

static int start_agent(struct agent *a)
{
    char addr[MAX_NODES][BENCH_PATH + 8];
    char *argv[5 + 2 * MAX_NODES + 1];
    int n = 0;
    argv[n++] = DLOCKD_PATH;
    argv[n++] = "-s";
    argv[n++] = a->sock;
    argv[n++] = "-c";
    argv[n++] = a->conf;
    for (int k = 0; k < a->nodes; k++) {
        snprintf(addr[k], sizeof addr[k], "unix:%s", a->node[k].sock);
        argv[n++] = "-r";
        argv[n++] = addr[k];
    }
    argv[n] = NULL;
    a->started = now_ns();
    a->pid = env_spawn(argv, a->log);
    if (a->pid < 0) {
        a->pid = 0;
        return -1;
    }
    return 0;
}

/* Starts every agent, then probes them all until each has granted a lock. */
static int start_agents(struct quorum_result *out)
{
    struct agent_start w[QUORUM_CONFIGS];
    char what[QUORUM_CONFIGS][32];
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        struct agent *a = &agents[i];
        if (start_agent(a) != 0)
            return -1;
        snprintf(what[i], sizeof what[i], "dlockd on %d node(s)", a->nodes);
        w[i] = (struct agent_start){
            .what = what[i], .sock = a->sock, .log = a->log, .pid = &a->pid, .started = a->started};
    }
    int rc = agents_wait_ready(w, QUORUM_CONFIGS, QUORUM_TTL_MS, READY_MS);
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        out->row[i + 1].ready_ms = w[i].ready_ms;
        out->row[i + 1].before_ready = w[i].before_ready;
    }
    return rc;
}

/* The agents first: on SIGTERM each releases its leases on its nodes. */
static void stop_all(struct quorum_result *out)
{
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        struct quorum_row *r = &out->row[i + 1];
        if (agents[i].pid > 0)
            r->agent_exit = env_stop_child(&agents[i].pid);
        r->log_lines = env_log_lines(agents[i].log);
    }
    for (int i = 0; i < QUORUM_CONFIGS; i++)
        for (int k = 0; k < agents[i].nodes; k++)
            redisproc_stop(&agents[i].node[k].proc, STOP_MS);
}

/* Are every agent and its nodes still running? Prints the first dead one. */
static int check_alive(void)
{
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        struct agent *a = &agents[i];
        if (env_child_dead(&a->pid)) {
            fprintf(stderr, "dlock-bench: dlockd on %d node(s) is no longer running\n", a->nodes);
            env_print_log(a->log, LOG_TAIL);
            return -1;
        }
        for (int k = 0; k < a->nodes; k++) {
            if (!redisproc_alive(&a->node[k].proc)) {
                fprintf(stderr, "dlock-bench: redis-server %s is no longer running\n",
                        a->node[k].sock);
                env_print_log(a->node[k].log, LOG_TAIL);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- the rows ---- */

struct row_state {
    struct quorum_row *out;
    struct plain *p;               /* plain row */
    dlock_client *c;               /* agent rows */
    struct plain *node[MAX_NODES]; /* agent rows: each of its nodes, to look */
    long long scripts;             /* EVALSHA calls on its nodes in its turns; -1 unknown */
    char name[64];
    struct lat lat;
    double wall;
    /* Whose CPU counts: the row's agent (0 for the plain row) and its nodes;
     * the CPU they and the timing thread used in the row's turns, seconds. */
    pid_t agent, redis[MAX_NODES];
    double agent_s, redis_s, client_s;
};

/* The CPU the row's processes have used so far. */
struct row_cpu {
    struct proc_sample agent, redis[MAX_NODES];
    uint64_t client_ns;
};

static void row_cpu_mark(const struct row_state *r, struct row_cpu *m)
{
    memset(m, 0, sizeof *m);
    if (r->agent > 0)
        proc_sample(r->agent, &m->agent);
    for (int k = 0; k < MAX_NODES; k++)
        if (r->redis[k] > 0)
            proc_sample(r->redis[k], &m->redis[k]);
    m->client_ns = thread_cpu_ns();
}

static void row_cpu_add(struct row_state *r, const struct row_cpu *a, const struct row_cpu *b)
{
    r->agent_s += proc_cpu_s(&a->agent, &b->agent);
    for (int k = 0; k < MAX_NODES; k++)
        r->redis_s += proc_cpu_s(&a->redis[k], &b->redis[k]);
    r->client_s += ns_to_s(b->client_ns - a->client_ns);
}

static int row_open(struct row_state *r, int i, long n, struct quorum_row *out)
{
    r->out = out;
    if (out->plain) {
        snprintf(r->name, sizeof r->name, "bench-quorum-plain");
        /* The Redis of the single-mode agent, on a name of its own. */
        r->p = plain_open(agents[0].node[0].sock);
        r->redis[0] = agents[0].node[0].proc.pid;
        if (!r->p) {
            fprintf(stderr, "dlock-bench: cannot open a hiredis connection\n");
            return -1;
        }
    } else {
        snprintf(r->name, sizeof r->name, "bench-quorum-%d", out->nodes);
        r->agent = agents[i - 1].pid;
        for (int k = 0; k < out->nodes; k++)
            r->redis[k] = agents[i - 1].node[k].proc.pid;
        int rc = dlock_client_open(&r->c, agents[i - 1].sock);
        if (rc != 0) {
            r->c = NULL;
            fprintf(stderr, "dlock-bench: dlock_client_open: %s\n", dlock_strerror(rc));
            return -1;
        }
        for (int k = 0; k < out->nodes; k++) {
            r->node[k] = plain_open(agents[i - 1].node[k].sock);
            if (!r->node[k]) {
                fprintf(stderr, "dlock-bench: cannot open a hiredis connection to %s\n",
                        agents[i - 1].node[k].sock);
                return -1;
            }
        }
    }
    return lat_reserve(&r->lat, (size_t)n);
}

static void row_close(struct row_state *r)
{
    if (r->p)
        plain_close(r->p);
    if (r->c)
        dlock_client_close(r->c);
    for (int k = 0; k < MAX_NODES; k++)
        plain_close(r->node[k]);
    memset(r->node, 0, sizeof r->node);
    r->p = NULL;
    r->c = NULL;
    lat_free(&r->lat);
}

static int row_pair(struct row_state *r)
{
    if (r->p) {
        uint64_t mid;
        return plain_pair(r->p, r->name, &mid);
    }
    dlock_acquire_options o = {.ttl_ms = QUORUM_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    dlock_lease *l;
    int rc = dlock_lease_acquire(r->c, r->name, &o, &l);
    if (rc != 0)
        return rc;
    return dlock_lease_release(l);
}

static long long scripts_seen(const struct row_state *r);

static void row_pairs(struct row_state *r, long n)
{
    /* Counted around the row's own turns only: the plain row runs its
     * compare-and-delete on the node of the single-mode agent. */
    long long s0 = r->out->plain ? -1 : scripts_seen(r);
    struct row_cpu c0, c1;
    row_cpu_mark(r, &c0);
    uint64_t start = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        int rc = row_pair(r);
        uint64_t t1 = now_ns();
        if (rc == 0)
            lat_push(&r->lat, t1 - t0);
        else if (r->out->errors++ == 0)
            r->out->first_error = rc;
    }
    r->wall += ns_to_s(now_ns() - start);
    row_cpu_mark(r, &c1);
    row_cpu_add(r, &c0, &c1);
    /* The agent answers a release before Redis has run it: the count is
     * taken once it has stopped moving. */
    long long s1 = r->out->plain ? -1 : scripts_seen(r), prev = -1;
    for (int i = 0; i < SETTLE_MS && s1 >= 0 && s1 != prev; i++) {
        sleep_ms(1);
        prev = s1;
        s1 = scripts_seen(r);
    }
    r->scripts = s0 < 0 || s1 < 0 || r->scripts < 0 ? -1 : r->scripts + s1 - s0;
}

/* How many of the nodes behind p hold the lock key of name. */
static int nodes_with_key(struct plain *const *p, int nodes, const char *name)
{
    int n = 0;
    for (int k = 0; k < nodes; k++)
        if (p[k] && plain_get(p[k], name) == 0)
            n++;
    return n;
}

/* Where the lock key of a held lease is, and whether the release removes it
 * from every node: tells quorum mode from an agent that used one node only. */
static int check_keys(struct row_state *r)
{
    static const char name[] = "bench-quorum-check";
    int nodes = r->out->nodes;
    dlock_acquire_options o = {.ttl_ms = QUORUM_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    dlock_lease *l;
    int err = dlock_lease_acquire(r->c, name, &o, &l);
    if (err != 0) {
        fprintf(stderr, "dlock-bench: dlockd on %d node(s): acquire for the key check: %s\n", nodes,
                dlock_strerror(err));
        return -1;
    }
    r->out->key_nodes = nodes_with_key(r->node, nodes, name);
    dlock_lease_release(l);
    uint64_t end = now_ns() + LEFT_MS * 1000000ull;
    while ((r->out->key_left = nodes_with_key(r->node, nodes, name)) > 0 && now_ns() < end)
        sleep_ms(5);
    return 0;
}

/* EVALSHA calls the nodes of an agent row have seen, together; -1 unknown. */
static long long scripts_seen(const struct row_state *r)
{
    long long n = 0;
    for (int k = 0; k < r->out->nodes; k++) {
        long long v = r->node[k] ? redis_evalsha_calls(r->node[k]) : -1;
        if (v < 0)
            return -1;
        n += v;
    }
    return n;
}

/* CPU ticks of the benchmark and every child of this part. */
static uint64_t own_ticks(void)
{
    struct proc_sample p;
    uint64_t t = proc_sample(getpid(), &p) == 0 ? p.cpu_ticks : 0;
    for (int i = 0; i < QUORUM_CONFIGS; i++) {
        if (agents[i].pid > 0 && proc_sample(agents[i].pid, &p) == 0)
            t += p.cpu_ticks;
        for (int k = 0; k < agents[i].nodes; k++)
            if (agents[i].node[k].proc.pid > 0 && proc_sample(agents[i].node[k].proc.pid, &p) == 0)
                t += p.cpu_ticks;
    }
    return t;
}

/* The share of n that round i of `rounds` does. */
static long chunk(long n, int i, int rounds)
{
    return n * (i + 1) / rounds - n * i / rounds;
}

static int measure(long n, struct quorum_result *out)
{
    struct row_state r[QUORUM_ROWS] = {{0}};
    int rc = -1;
    for (int i = 0; i < QUORUM_ROWS; i++)
        if (row_open(&r[i], i, n, &out->row[i]) != 0)
            goto out;
    long warm = n / 10 < WARMUP_MAX ? n / 10 : WARMUP_MAX;
    for (int i = 0; i < QUORUM_ROWS; i++)
        for (long k = 0; k < warm; k++)
            row_pair(&r[i]);
    for (int i = 0; i < QUORUM_ROWS; i++) {
        r[i].out->errors = 0;
    }
    struct proc_sample m0, m1;
    uint64_t own0 = own_ticks();
    machine_sample(&m0);
    int rounds = n < ROUNDS ? (int)n : ROUNDS;
    for (int i = 0; i < rounds; i++)
        for (int k = 0; k < QUORUM_ROWS; k++)
            row_pairs(&r[(i + k) % QUORUM_ROWS], chunk(n, i, rounds));
    machine_sample(&m1);
    uint64_t own1 = own_ticks();
    /* The rest of the machine: what is neither us nor our children. */
    uint64_t busy = m1.cpu_ticks - m0.cpu_ticks, own = own1 - own0;
    m1.cpu_ticks = m0.cpu_ticks + (busy > own ? busy - own : 0);
    out->rounds_s = ns_to_s(m1.t_ns - m0.t_ns);
    out->cpu_others = proc_cpu_pct(&m0, &m1);
    for (int i = 0; i < QUORUM_ROWS; i++) {
        struct quorum_row *q = r[i].out;
        lat_summarise(&r[i].lat, r[i].wall, &q->s);
        q->agent_us = cpu_us_per_op(q->plain ? -1 : r[i].agent_s, (double)q->s.n);
        q->redis_us = cpu_us_per_op(r[i].redis_s, (double)q->s.n);
        q->client_us = cpu_us_per_op(r[i].client_s, (double)q->s.n);
        if (!q->plain && r[i].scripts >= 0)
            q->scripts_per_pair = (double)r[i].scripts / (double)n / q->nodes;
    }
    rc = 0;
    for (int i = 1; i < QUORUM_ROWS && rc == 0; i++)
        rc = check_keys(&r[i]);
out:
    for (int i = 0; i < QUORUM_ROWS; i++)
        row_close(&r[i]);
    return rc;
}

int run_quorum(const char *dir, long pairs, struct quorum_result *out)
{
    memset(out, 0, sizeof *out);
    out->pairs = pairs;
    out->row[0].plain = true;
    out->row[0].nodes = 1;
    for (int i = 1; i < QUORUM_ROWS; i++) {
        out->row[i].nodes = node_counts[i - 1];
        out->row[i].agent_exit = -1;
        out->row[i].scripts_per_pair = -1;
    }
    uint64_t start = now_ns();
    int rc = setup(dir);
    if (rc == 0)
        rc = start_nodes(dir);
    if (rc == 0)
        rc = start_agents(out);
    if (rc == 0) {
        for (int i = 1; i < QUORUM_ROWS; i++)
            fprintf(stderr, "dlock-bench: dlockd on %d node(s) (pid %d) usable after %.0f ms\n",
                    agents[i - 1].nodes, (int)agents[i - 1].pid, out->row[i].ready_ms);
        rc = measure(pairs, out);
    }
    if (rc == 0)
        rc = check_alive();
    stop_all(out);
    out->wall_s = ns_to_s(now_ns() - start);
    return rc;
}
