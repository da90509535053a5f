/* SPDX-License-Identifier: BSD-3-Clause */
/* bench.h -- shared declarations of dlock-bench: the private Redis and agent,
 * /proc sampling, latency statistics, the plain hiredis baseline and the
 * measured phases. */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "redisproc.h"

#define BENCH_TTL_MS 30000
#define BENCH_PREFIX "dlock:" /* the agent's default key prefix */
#define BENCH_PATH   160

/* ---- time (env.c) ---- */

uint64_t now_ns(void);
void sleep_ms(int ms);
double ns_to_s(uint64_t ns);

/* ---- the private redis-server and dlockd of one run (env.c) ---- */

struct env {
    char dir[64];
    char redis_sock[BENCH_PATH], agent_sock[BENCH_PATH], conf[BENCH_PATH];
    char redis_log[BENCH_PATH], agent_log[BENCH_PATH];
    struct redisproc redis; /* redis.pid: 0 when not running */
    pid_t agent_pid;
    int agent_exit;     /* status after SIGTERM: exit code, 128+signal, -1 unknown */
    bool agent_stopped; /* env_stop_agent() ran: env_check() leaves the agent out */
    char redis_version[32];
    bool keep; /* env_stop leaves the temp dir (logs, configs) in place */
};

/* Makes the temp dir, starts redis-server and dlockd and waits until both
 * answer. 0, or -1 after printing why (the caller still calls env_stop). */
int env_start(struct env *e);
/* The parts of env_start(): the paths of the files in e->dir, redis-server
 * (ready, its version read), and a dlockd (the one at path dlockd) with
 * e->conf, ready once a try-once acquire is answered. 0, or -1 after printing
 * why. */
void env_set_paths(struct env *e);
int env_start_redis(struct env *e);
int env_start_agent(struct env *e, const char *dlockd);
/* Stops both children (SIGTERM, then SIGKILL after a deadline) and removes
 * the temp dir. Idempotent. */
void env_stop(struct env *e);
/* Stops the agent alone (as env_stop does), before a part that wants the
 * Redis to itself; agent_exit is its status. */
void env_stop_agent(struct env *e);
/* Is each child still running? 0, or -1 with *who naming the dead one. */
int env_check(struct env *e, const char **who);
/* Prints the last lines of a child's log to stderr. */
void env_print_log(const char *path, int max_lines);
/* Counts the lines of a log file (0 when missing). */
int env_log_lines(const char *path);

/* Other children of a run (the agents). env_spawn starts argv with stdout
 * and stderr going to log (proc_spawn); the child dies with us, even if we
 * are killed with SIGKILL. Its pid, or -1 after printing why. */
pid_t env_spawn(char *const argv[], const char *log);
/* Forks redis-server on a unix socket only, without persistence, as
 * env_start does, and does not wait for it: 0, or -1 after printing why. */
int env_spawn_redis(struct redisproc *r, const char *dir, const char *sock, const char *log);
/* SIGTERM, then SIGKILL if it lingers; its status code (as agent_exit). */
int env_stop_child(pid_t *pid);
/* The same for n children at once: SIGTERM to each, SIGKILL to those still
 * running after the deadline; reaps them all and zeroes pids[]. status (may
 * be NULL) gets each one's status code, -1 where there was no child. */
void env_stop_children(pid_t *pids, int n, int *status);
/* Has the child exited already? Reaps it if so (and zeroes *pid). */
bool env_child_dead(pid_t *pid);

/* ---- agents coming up (env.c) ---- */

/* One try-once acquire of "bench-probe" and its release, on a fresh
 * connection to the agent at sock: 0, or the error. */
int agent_probe(const char *sock, uint32_t ttl_ms);

/* An agent just spawned, to wait for. */
struct agent_start {
    const char *what; /* for messages: "dlockd on 3 node(s)" */
    const char *sock, *log;
    pid_t *pid;
    uint64_t started; /* when it was spawned (now_ns) */
    /* Out. */
    bool ready;
    double ready_ms;  /* from its start until a probe succeeded */
    int before_ready; /* the last error a probe gave before that (0: none) */
};

/* Probes every agent (agent_probe, every 10 ms) until each has granted a
 * lock, each within deadline_ms of its start. 0, or -1 after printing why and
 * the end of the agent's log: it exited, its deadline passed, or a probe gave
 * an error that no agent gives while it comes up. */
int agents_wait_ready(struct agent_start *a, int n, uint32_t ttl_ms, int deadline_ms);

/* ---- /proc (env.c) ---- */

struct proc_sample {
    uint64_t t_ns;      /* CLOCK_BOOTTIME when taken */
    uint64_t cpu_ticks; /* utime + stime, in clock ticks */
    /* The same time in ns: the run time of its threads (the first field of
     * each /proc/PID/task/TID/schedstat, which utime + stime are scaled
     * from); 0 when not read. */
    uint64_t cpu_ns;
    long rss_kb; /* VmRSS */
};

int proc_sample(pid_t pid, struct proc_sample *s);
/* The CPU time (utime + stime) a process used between two of its samples,
 * in seconds: the one reading of a process' CPU that every part uses. In ns
 * when both samples have cpu_ns, else in clock ticks (10 ms). */
double proc_cpu_s(const struct proc_sample *a, const struct proc_sample *b);
/* CPU used between two samples, in percent of one core. */
double proc_cpu_pct(const struct proc_sample *a, const struct proc_sample *b);
/* CPU seconds per operation in microseconds: -1 when there were no
 * operations or cpu_s is unknown (< 0). */
double cpu_us_per_op(double cpu_s, double ops);
/* The calling thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), ns. */
uint64_t thread_cpu_ns(void);
/* The whole machine's busy time (every CPU, every process) from /proc/stat,
 * in cpu_ticks; rss_kb is 0. */
int machine_sample(struct proc_sample *s);

/* ---- latency statistics (stats.c) ---- */

struct lat {
    uint64_t *v; /* pair durations, ns */
    size_t n, cap;
};

struct summary {
    size_t n;
    double p50_us, p90_us, p99_us, mean_us, max_us;
    double per_s; /* n over the wall time given */
};

int lat_reserve(struct lat *l, size_t cap);
int lat_push(struct lat *l, uint64_t ns);
int lat_append(struct lat *dst, const struct lat *src);
void lat_free(struct lat *l);
/* Sorts l and fills *out; wall_s is the time the pairs took together. */
void lat_summarise(struct lat *l, double wall_s, struct summary *out);

/* ---- the plain hiredis baseline (plain.c) ---- */

struct plain;

/* Errors of plain_pair(), beside 0. */
#define PLAIN_EIO    (-101) /* connection broken */
#define PLAIN_EBUSY  (-102) /* SET NX found the key taken */
#define PLAIN_EOWNER (-103) /* compare-and-delete found another token */
#define PLAIN_EREPLY (-104) /* unexpected or error reply */

struct plain *plain_open(const char *sock);
void plain_close(struct plain *p);
/* SET key token NX PX ttl, then EVALSHA compare-and-delete. */
int plain_pair(struct plain *p, const char *name, uint64_t *mid);
int plain_ping(struct plain *p);
/* SET of the lock key of `name` NX PX ttl_ms with a value of no dlock agent's:
 * 0, or PLAIN_EBUSY when it is taken. */
int plain_hold(struct plain *p, const char *name, long long ttl_ms);
/* DEL of that key, then PUBLISH of the name on `channel`, as a client that
 * releases a dlock key by itself may do to wake dlock's waiters at once. */
int plain_drop_notify(struct plain *p, const char *name, const char *channel);
/* GET of the lock key of `name`: 0 when it holds a string, PLAIN_EREPLY when
 * it is missing. */
int plain_get(struct plain *p, const char *name);
const char *plain_strerror(int err);

/* Inspection of the private Redis, for the lease phase. Each returns -1 on
 * failure. */
long long redis_dbsize(struct plain *p);
/* Keys matching a KEYS pattern (the lease keys; fencing counters stay). */
long long redis_count_keys(struct plain *p, const char *pattern);
long long redis_evalsha_calls(struct plain *p);
long long redis_pttl(struct plain *p, const char *name);
int redis_version(struct plain *p, char *buf, size_t len);
/* The text of one INFO of the sections named ("cpu stats commandstats"),
 * to free(); NULL on failure. */
char *redis_info(struct plain *p, const char *sections);
/* A field of such a text, as a string: 0, or -1 when it is missing. */
int info_value(const char *info, const char *field, char *buf, size_t len);
/* Subscribers of a Pub/Sub channel (PUBSUB NUMSUB): -1 on failure. */
long long redis_numsub(struct plain *p, const char *channel);
/* Channels matching pattern that have subscribers (PUBSUB CHANNELS): -1 on
 * failure. */
long long redis_channels(struct plain *p, const char *pattern);
/* CONFIG GET maxclients: -1 on failure. */
long long redis_maxclients(struct plain *p);
/* Redis' own CPU so far (INFO cpu: used_cpu_user + used_cpu_sys), seconds:
 * -1 on failure. */
double redis_cpu_seconds(struct plain *p);

/* ---- acquire+release pairs (pairs.c) ---- */

/* One kind of client: dlock through the agent, or plain hiredis. */
struct driver {
    const char *label;
    bool via_agent; /* its pairs go through the env's agent (whose CPU counts) */
    void *(*open)(const struct env *e);
    /* One acquire+release: 0 or a negative code; *mid is the time between. */
    int (*pair)(void *client, const char *name, uint64_t *mid);
    int (*ping)(void *client); /* one bare round trip */
    const char *(*strerror)(int err);
    void (*close)(void *client);
};

extern const struct driver dlock_driver, plain_driver;

/* -O: the run's agent, the delayed part's and the single/quorum part's run
 * with cohort_handoffs = 0 (every grant from Redis): the settings line their
 * configuration files get, empty by default. */
extern const char *bench_handoff_setting;

/* CPU of each process over a measurement, in percent of one core. */
struct cpu_share {
    double agent, redis, bench;
    double others; /* every other process on the machine: noise in the figures */
    double wall_s; /* too short (under a second) for /proc's clock ticks */
};

struct pair_result {
    struct summary s;
    struct summary acquire, release, ping; /* run_single only */
    long errors;
    int first_error;
    struct cpu_share cpu;
    double redis_cpu_us; /* run_multi: Redis' CPU (INFO cpu) per pair; -1 unknown */
    /* CPU per pair, microseconds, -1 unknown: the agent's and Redis' (their
     * utime + stime over the timed pairs; Redis' from INFO cpu in run_multi,
     * the same count at a finer grain) and the client's own (the CPU time of
     * the threads that ran the pairs: libdlock, or plain hiredis). */
    double agent_us, redis_us, client_us;
};

/* N timed pairs on one name with each driver, after a short untimed warm-up,
 * in alternating rounds; then bare round trips the same way. b may be NULL
 * (rb too): driver a alone, when its baseline comes from another part. */
int run_single(const struct driver *a, const struct driver *b, struct env *e, long n,
               struct pair_result *ra, struct pair_result *rb);
/* `clients` threads, each its own client and name, for `seconds` with each
 * driver, in half-length turns a, b, b, a (b may be NULL, as above). */
int run_multi(const struct driver *a, const struct driver *b, struct env *e, int clients,
              double seconds, struct pair_result *ra, struct pair_result *rb);

/* ---- single mode against quorum mode (quorum.c) ---- */

#define QUORUM_TTL_MS  1000                 /* the lock TTL, and the agents' max_ttl_ms */
#define QUORUM_CONFIGS 3                    /* agents: on 1, 3 and 5 Redis nodes */
#define QUORUM_ROWS    (QUORUM_CONFIGS + 1) /* and plain hiredis on the 1-node Redis */

/* One row: plain hiredis (row 0) or one agent with its nodes. */
struct quorum_row {
    bool plain;
    int nodes;
    struct summary s;
    long errors;
    int first_error;
    /* Agents only. */
    double ready_ms;  /* from its start until a try-once acquire succeeded */
    int before_ready; /* the last error a try-once acquire gave before that */
    int key_nodes;    /* nodes that had the lock key while a lease was held */
    int key_left;     /* nodes that still had it 1 s after the release */
    /* Scripts (EVALSHA) a node ran per timed pair, the mean over its nodes:
     * 2 (acquire, release) unless acquires take a second round; -1 unknown. */
    double scripts_per_pair;
    int log_lines;  /* agent log lines (level warn and up) */
    int agent_exit; /* status after SIGTERM */
    /* CPU per timed pair, us (-1 unknown): the agent's, its nodes' together
     * (the plain row: its node's), the timing thread's (the client). */
    double agent_us, redis_us, client_us;
};

struct quorum_result {
    long pairs;        /* timed pairs per row */
    double wall_s;     /* of the whole part, start to stop */
    double rounds_s;   /* of the timed rounds together */
    double cpu_others; /* other processes' CPU during them, % of one core */
    struct quorum_row row[QUORUM_ROWS];
};

/* Starts QUORUM_CONFIGS agents, each on its own redis-servers in dir, waits
 * until each is usable, times `pairs` pairs per row in alternating rounds,
 * checks where the lock key lands, and stops them all. 0, or -1 after
 * printing why (logs included). */
int run_quorum(const char *dir, long pairs, struct quorum_result *out);
/* SIGKILLs the part's children and unlinks its files: async-signal-safe. */
void quorum_kill(void);

/* ---- many leases held (leases.c) ---- */

struct lease_result {
    long wanted, held, acq_errors;
    int first_error;
    int clients;
    double acq_s;         /* time to acquire them all */
    double acq_cpu_agent; /* agent CPU while acquiring */
    long rss_idle_kb, rss_held_kb, rss_peak_kb;
    double window_s;
    double cpu_agent, cpu_redis; /* over the window */
    double cpu_others;           /* the rest of the machine over the window */
    long lost_events, jeopardy_events, other_events;
    long long renew_calls; /* EVALSHA calls Redis saw during the window */
    long long keys_at_end; /* DBSIZE at the end of the window */
    long long min_pttl_ms; /* over a sample of the held keys */
    double release_s;      /* close of the clients until Redis is empty; <0 if not */
};

int run_leases(struct env *e, long leases, double window_s, struct lease_result *out);

/* ---- the cost of checking a held lease (check.c) ---- */

#define CHECK_RUNS    5 /* timed loops of each kind; the median is reported */
#define CHECK_THREADS 2 /* threads of the concurrent dlock_lease_valid() loop */

/* ns per call over CHECK_RUNS loops. */
struct loop_cost {
    double median, min, max;
};

struct check_result {
    long calls;       /* per loop and per thread */
    long round_trips; /* of each kind */
    char clocksource[32];
    struct loop_cost valid, remaining, touch, clock;
    struct loop_cost valid_mt; /* per thread, CHECK_THREADS threads at once */
    long long valid_false;     /* calls of valid() that said no, all loops */
    /* The CPU time the looping threads got, in percent of their loops' wall
     * time: under 100 means they were preempted (and the ns figures hold
     * time spent off the CPU). One thread's loops; the concurrent ones. */
    double oncpu_1t, oncpu_mt;
    double others_mt;         /* other processes' CPU during the concurrent loops */
    double mt_wall_s;         /* their wall time together: "-" for others_mt if < 1 s */
    struct summary ping, get; /* dlock_client_ping; hiredis GET of the key */
    long ping_errors, get_errors;
    int first_ping_error, first_get_error;
};

/* One held lease; `calls` per timed loop, `round_trips` of each kind. */
int run_check(struct env *e, long calls, long round_trips, struct check_result *out);

/* ---- Redis across a network: a delay proxy (delayproxy.c, delay.c) ---- */

struct delayproxy;

/* How late the proxy released the chunks past their due time. */
struct delay_lateness {
    long chunks;
    double p50_us, p99_us, max_us;
};

/* Listens on listen_path; for each connection, connects to target_path and
 * forwards each chunk read either way delay_ns after it arrived, in order.
 * Runs in a thread of its own. NULL after printing why. */
struct delayproxy *delayproxy_start(const char *listen_path, const char *target_path,
                                    uint64_t delay_ns);
/* How late the chunks went out since the last call (or the start), and a
 * fresh count from now on. */
void delayproxy_lateness(struct delayproxy *d, struct delay_lateness *out);
/* Stops the thread, closes every connection, unlinks the socket. */
void delayproxy_stop(struct delayproxy *d);

struct delay_result {
    double delay_us; /* one way, as asked */
    long pairs;
    int clients;
    double seconds;
    struct summary ping_direct, ping_proxied; /* Redis PING, plain hiredis */
    /* During the PINGs, the 1-client run and the many-client run. */
    struct delay_lateness late_ping, late_single, late_multi;
    double agent_ready_ms;
    struct pair_result d1, p1; /* 1 client */
    struct pair_result dm, pm; /* `clients` clients */
    int log_lines;             /* of the part's agent, level warn and up */
    int agent_exit;            /* its status after SIGTERM */
};

/* Starts a delay proxy in front of the run's Redis and an agent of its own
 * whose -r points at the proxy; measures PING direct and through the proxy,
 * then run_single and run_multi for dlock and plain, both through the proxy;
 * stops both. 0, or -1 after printing why. */
int run_delay(struct env *e, double delay_us, long pairs, int clients, double seconds,
              struct delay_result *out);
/* The set-up of run_delay() alone: the proxy in front of e's Redis (its
 * socket in d->redis_sock), the PINGs into out, and the agent behind it (in
 * d, a copy of e otherwise). The proxy, or NULL after printing why (nothing
 * is left running). */
struct delayproxy *delay_open(struct env *e, double delay_us, struct env *d,
                              struct delay_result *out);
/* Stops what delay_open() started; out gets the agent's log lines and exit. */
void delay_close(struct env *d, struct delayproxy *proxy, struct delay_result *out);
/* SIGKILLs the part's agent and unlinks its files: async-signal-safe. */
void delay_kill(void);

/* ---- TLS to Redis against plaintext (tls.c) ---- */

struct tls_side {
    struct pair_result d1, dm; /* dlock through this side's agent: 1 client, many */
    struct pair_result dd;     /* 1 client across the delay proxy */
};

struct tls_result {
    long pairs;
    int clients;
    double delay_us;         /* the delay proxy's one-way delay (0: no delayed runs) */
    struct tls_side side[2]; /* plaintext TCP, TLS */
    /* redis-benchmark SET requests/s: [side][1 client, many, 1 client delayed] */
    double rb[2][3];
    int log_lines; /* the part's agents' logs, level warn and up */
};

/* A redis-server with a plaintext and a TLS port, an agent on each (and,
 * with a delay, one more on each behind a delay proxy), their runs of
 * pairs.c, and redis-benchmark's SET on each port. 0, or -1 after printing
 * why. */
int run_tls(struct env *e, double delay_us, long pairs, int clients, double seconds,
            struct tls_result *out);
/* SIGKILLs the part's children: async-signal-safe. */
void tls_kill(void);

/* ---- the language bindings (bindings.c) ---- */

#define BINDING_ROWS 32
#define BINDING_MAX  8

/* One line "ROW LANG NET CASE IMPL OPS_PER_S P50_US P99_US" of a language's
 * benchmark program. */
struct binding_row {
    char net[16];  /* loopback, delayed */
    char kase[16]; /* pairs, contended */
    char impl[24]; /* dlock, native, ... */
    double ops, p50_us, p99_us;
};

struct binding_result {
    char lang[16];
    int status; /* of bench/bindings/LANG/run: 0 when it ran through */
    int nrows;
    struct binding_row rows[BINDING_ROWS];
    bool have_valid; /* a line "VALID LANG NS_PER_CALL GET_US" came */
    double valid_ns, get_us;
    double ping_us, ping_delayed_us; /* Redis PING p50, direct and through the proxy */
    int agent_log_lines;             /* of the delayed agent, warn and up */
};

/* Starts the delay proxy and its agent (as run_delay() does), then runs
 * bench/bindings/LANG/run for each LANG of the comma-separated langs, each
 * given the sockets of both agents and of Redis direct and delayed, pairs
 * and seconds, in its environment; out[0..*n-1] get what they printed.
 * 0, or -1 after printing why. */
int run_bindings(struct env *e, double delay_us, const char *langs, long pairs, double seconds,
                 struct binding_result *out, int max, int *n);
/* n pairs of driver d from C, each on a name of its own (every grant from
 * Redis), as the bindings' pairs are: the reference they are read against.
 * 0, or -1 after printing why. */
int bindings_reference(const struct driver *d, struct env *e, long n, struct summary *out);
/* SIGKILLs a language's benchmark program: async-signal-safe. */
void bindings_kill(void);

/* ---- many agents on one Redis (fleet.c) ---- */

#define FLEET_MAX_COUNTS 8    /* agent counts of one run (-F) */
#define FLEET_MAX_AGENTS 1000 /* agents of one count */

/* One row: N agents, 1 client on agent 0 doing pairs; with a waiter or not. */
struct fleet_row {
    int agents;
    bool waiter; /* a client of the last agent waited for another name meanwhile */
    struct summary s;
    long errors;
    int first_error;
    double redis_cpu_us;   /* Redis' CPU (used_cpu_user + used_cpu_sys) per pair */
    double commands;       /* Redis commands per pair (total_commands_processed) */
    double publishes;      /* PUBLISH calls per pair (commandstats: from scripts too) */
    long long subscribers; /* of the pairs' name's release channel, before and after; -1 if it
                              changed */
    long long channels;    /* dlock channels with subscribers, before and after; -1 if changed */
    double agents_cpu_us;  /* all the agents' CPU per pair (/proc clock ticks) */
    double others_pct;     /* other processes' CPU, % of a core; -1: under 1 s */
    /* Waiter rows only. */
    bool waited; /* the waiter was still waiting when the pairs were done */
    int granted; /* its acquire once the holder released: 0, an error; 1 not tried */
};

struct fleet_count {
    int agents;
    double ready_ms; /* from the first spawn until every agent had granted a lock */
    double wall_s;   /* of the whole count, start to stop */
    int log_lines;   /* of all its agents (level warn and up) */
    int bad_exits;   /* agents whose status after SIGTERM was not 0 */
    int first_bad_exit;
    struct fleet_row row[2]; /* without, with the waiter */
};

struct fleet_result {
    long pairs;  /* timed pairs per row */
    int ncounts; /* counts done */
    struct fleet_count count[FLEET_MAX_COUNTS];
};

/* For each agent count: starts that many agents on the run's Redis (whose
 * own agent must be stopped: its connections would count too), waits
 * until each is usable, times `pairs` pairs per row, and stops them. 0, or
 * -1 after printing why; out->ncounts says how many counts completed. */
int run_fleet(struct env *e, const int *counts, int ncounts, long pairs, struct fleet_result *out);
/* SIGKILLs the part's agents and unlinks their files: async-signal-safe. */
void fleet_kill(void);

/* ---- agents of their own for the contended parts (side.c) ---- */

#define SIDE_MAX 4 /* agents of one part at once */

/* One agent of a part, on the run's Redis, with a configuration of its own. */
struct side_agent {
    const char *tag;      /* in: file names DIR/TAG.sock, TAG.log, TAG-dlockd.conf */
    const char *settings; /* in: lines added to the [agent] section ("cohort_handoffs = 0\n") */
    char sock[BENCH_PATH], log[BENCH_PATH], conf[BENCH_PATH];
    pid_t pid;
    double ready_ms; /* from its start until a try-once acquire succeeded */
    int log_lines;   /* at level warn and up, once stopped */
    int exit;        /* its status after SIGTERM, once stopped */
};

/* Writes each agent's configuration, starts them all on the run's Redis and
 * waits until each grants a lock. 0, or -1 after printing why (the caller
 * still calls side_stop). */
int side_start(const struct env *e, struct side_agent *a, int n);
/* Stops them (SIGTERM, SIGKILL if they linger), counts their log lines and
 * removes their files unless the run keeps them. */
void side_stop(const struct env *e, struct side_agent *a, int n);
/* SIGKILLs the agents and worker processes of these parts, and unlinks their
 * files: async-signal-safe. */
void side_kill(void);
/* A worker process forked by a part, for side_kill(); 0 to forget it. */
void side_track_worker(int slot, pid_t pid);
#define SIDE_MAX_WORKERS 64

/* ---- cross-agent wake (wake.c) ---- */

struct wake_result {
    long rounds;
    int settle_ms;
    struct summary wake;      /* release_sync called -> the waiter's acquire returned */
    struct summary ping;      /* plain hiredis PING after the same settle pause */
    struct summary ping_busy; /* and right after the previous round */
    /* The same, with every process on the path on one CPU (n 0: not run) */
    struct summary wake_one_cpu, ping_one_cpu;
    long not_listening; /* rounds where no agent listened on the name after the settle */
    long early;         /* rounds where the waiter returned before the release */
    long errors;        /* failed acquires or releases */
    int first_error;
    /* CPU per timed round, us (-1 unknown): both agents together, and Redis
     * (which also answers the round's PINGs and PUBSUB NUMSUB polls). */
    double agents_us, redis_us;
    struct side_agent agent[2];
};

/* Two agents of their own on the run's Redis; a client on one holds a name
 * while a client on the other waits for it, `rounds` times, the roles
 * swapping each round. 0, or -1 after printing why. */
int run_wake(struct env *e, long rounds, struct wake_result *out);

/* ---- contended: worker processes on one name (contend.c) ---- */

#define CONTEND_COHORT_MS 20 /* cohort_ms written in the configurations (the default) */

/* One worker process. */
struct contend_worker {
    int agent; /* index of its agent */
    int kind;  /* in: the dlock_kind it acquires (0, exclusive, by default) */
    long grants, errors;
    int first_error; /* a DLOCK_E* code, or CONTEND_EREDIS */
    double wall_s;   /* its loop */
    /* The in-section gauge (work_us > 0): the most holders it found inside
     * when it entered, and its sections that overlapped a writer's. */
    long max_inside, overlaps;
};

#define CONTEND_EREDIS (-1000) /* the critical section's GET or SET failed */

struct contend_run {
    int nworkers, nagents;
    double seconds;
    /* The critical section: 0, a GET and a SET of the counter (the cohort
     * and two hosts parts); > 0, the kinds part's (kinds.c): an in-section
     * gauge and a GET of the counter, this many us asleep, then a SET of the
     * counter by the exclusive kind's holders. */
    int work_us;
    uint32_t permits;   /* of the DLOCK_KIND_SEMAPHORE workers */
    int write_one_in;   /* > 0: the exclusive workers wait for their turn to
                           take 1 in this many of all the grants */
    double machine_cpu; /* the whole machine's CPU during the loops, % of a core */
    struct contend_worker w[SIDE_MAX_WORKERS];
    long grants;                        /* all workers */
    double per_s;                       /* grants over the longest worker loop */
    long long counter;                  /* the counter key at the end; -1 unknown */
    long host_grants[SIDE_MAX];         /* the grants of each agent's workers */
    struct summary host_wait[SIDE_MAX]; /* their acquires' waits */
    struct summary kind_wait[3];        /* the waits by the workers' dlock_kind */
    long long key_left;                 /* the lock key after the run: 1 there, 0 not, -1 unknown */
    double agents_us, redis_us;         /* CPU per grant, us: the agents together, Redis */
    struct side_agent agent[SIDE_MAX];
};

struct cohort_result {
    struct contend_run on, off; /* cohort_handoffs 32 and 0 */
};

/* `procs` worker processes on one agent, one name, `seconds`; with cohort
 * handoff on, then off, each on an agent of its own. 0, or -1 after printing
 * why. */
int run_cohort(struct env *e, int procs, double seconds, struct cohort_result *out);
/* Two agents, `procs` worker processes on each. */
int run_hosts(struct env *e, int procs, double seconds, struct contend_run *out);
/* One run as set up in *r (nworkers, nagents, seconds, agent[], the
 * workers' kinds and the section): starts its agents, resets the counter,
 * runs the workers (worker i on agent agent_of[i]), reads the counter and
 * the lock key, stops the agents. 0, or -1 after printing why. */
int contend(struct env *e, struct contend_run *r, const int *agent_of);

/* ---- lock kinds: readers and permits on one name (kinds.c) ---- */

#define KINDS_WORK_US      1000 /* the off-CPU work of each critical section */
#define KINDS_PERMITS      2    /* of the semaphore run */
#define KINDS_WRITE_ONE_IN 10   /* the read-mostly run's writer: 1 in this many grants */

struct kinds_result {
    struct contend_run ex;  /* the exclusive kind: the baseline */
    struct contend_run sh;  /* shared (readers) */
    struct contend_run sem; /* a semaphore of KINDS_PERMITS permits */
    struct contend_run mix; /* read-mostly: the readers and one exclusive writer */
};

/* `procs` worker processes on one agent and one name, `seconds` per run,
 * the same critical section in each: exclusive, shared, semaphore, then the
 * same readers beside one writer; each run on an agent of its own. 0, or -1
 * after printing why. */
int run_kinds(struct env *e, int procs, double seconds, struct kinds_result *out);

/* ---- renewal lateness under another uid's flood (fairness.c) ---- */

#define FAIRNESS_RUNS 4

struct fairness_run {
    uint32_t victim_ttl_ms;
    int flood_conns; /* 0: the victim alone */
    uint32_t flood_ttl_ms;
    struct summary late;          /* each victim renewal: its send time - its due time */
    struct summary shown;         /* ... the time it showed in the lease page - its send time */
    long renewals;                /* of the victim's leases, seen */
    long jeopardy;                /* JEOPARDY events of the victim's leases */
    int lost, held;               /* the victim's leases at the end */
    long granted, refused, other; /* the flood's acquires */
};

struct fairness_result {
    const char *skipped; /* why the part did not run, or NULL */
    struct fairness_run run[FAIRNESS_RUNS];
};

/* An agent of its own with the default settings on the run's Redis; a
 * victim's leases watched for `seconds` alone and beside a flood from
 * nobody, for two attacks. 0 (skipped when not root), or -1 after printing
 * why. */
int run_fairness(struct env *e, double seconds, struct fairness_result *out);

/* ---- the targets table (bench.c) ---- */

/* Notes one target for the table the run prints at its end: the target
 * ("1-client pair p50 <= 1.15x plain"), the figure measured, the baseline it
 * is read against from the same run ("" for a fixed bound), and whether it
 * was met. Returns "met" or "MISSED" for the part's own rows. Figures only:
 * the exit status never depends on them. */
const char *target_note(const char *target, const char *measured, const char *baseline, bool met);

/* ---- what waiting costs Redis (waiting.c) ---- */

#define WAITING_MODES 2 /* the fixed fast retry (baseline), the paced retry */
extern const char *const waiting_mode_names[WAITING_MODES];

struct waiting_mode {
    double names_cmds_s; /* Redis commands/s while the N names are waited for */
    double hot_cmds_s;   /* and while the hot name is */
    long answered;       /* acquires answered during the part (none expected) */
    long errors;
    int first_error;
    int log_lines; /* the agents' lines at warn and up */
};

struct waiting_result {
    long names;
    int hot; /* waiters per agent on the hot name */
    double settle_s, window_s;
    struct waiting_mode mode[WAITING_MODES];
};

/* Two agents of their own, a foreign holder of `names` names and of one hot
 * name, each agent waiting for half the names, then `hot` waiters per agent
 * for the hot name; Redis' commands/s over a window, once per pacing. 0, or
 * -1 after printing why. */
int run_waiting(struct env *e, long names, int hot, bool quick, struct waiting_result *out);
void report_waiting(const struct waiting_result *r);

#endif
