/* SPDX-License-Identifier: BSD-3-Clause */
/* harness.h -- helpers for the integration tests: private redis-servers (one,
 * or several independent nodes for quorum mode) and dlockd agents per test,
 * clients that record their events, forked lock holders, raw protocol
 * sockets, dlockctl runs, and deadline-bounded waits.
 *
 * Criterion runs each test in its own forked worker, in parallel. Every test
 * gets a fresh temporary directory holding its Redis socket, agent socket,
 * config and logs; nothing is shared between tests. Tests are written with
 * ITEST() so that setup, a checked shutdown and the cleanup always run:
 *
 *   ITEST(suite, name)
 *   {
 *       h_start(NULL);                  // redis-server + dlockd
 *       struct h_cl *a = h_client();
 *       ...
 *   }
 *
 * Quorum-mode tests start several nodes and agents at once, and act on one
 * node at a time:
 *
 *   h_quorum_start(3, 2, NULL, NULL);   // 3 redis-servers, agents 0 and 1
 *   h_node_restart(1);                  // node 1 comes back empty
 *
 * Agents can be frozen (h_agent_pause()) like nodes (h_node_pause()).
 *
 * When the body returns, the harness closes the clients, resumes frozen nodes
 * and agents, and stops every agent with SIGTERM, and the test fails unless
 * each exits with status 0 (so a
 * sanitizer report or crash in the agent fails the test that caused it).
 * The teardown kills whatever is left and removes the directory, also after a
 * failed assertion; when a test fails it prints the tail of the agent logs.
 * Set DLOCK_TEST_KEEP=1 to keep the directories.
 */
#ifndef DLOCK_TEST_HARNESS_H
#define DLOCK_TEST_HARNESS_H

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "dlock.h"
#include "redisproc.h"
#include "wire.h"

#define H_MAX_AGENTS   3
#define H_MAX_NODES    5 /* redis-servers: one, or 3 or 5 for quorum mode */
#define H_MAX_SPARES   2 /* redis-servers outside the nodes (h_redis_spare()) */
#define H_MAX_CLIENTS  16
#define H_MAX_EVENTS   64
#define H_MAX_CHILDREN 16
#define H_MAX_FDS      16
#define H_MAX_ENVS     8 /* h_agent_env() entries per agent */
#define H_PATH         200

/* Deadlines used throughout (milliseconds), before the time scale
 * (h_scale()) multiplies them where they are waited for. */
#define H_START_MS 5000 /* redis-server / dlockd to come up */
#define H_STOP_MS  5000 /* a process to exit after SIGTERM */
/* Something the agent does at once (an answer, an event, a key deleted), or
 * at a deadline of its own well within this: the tests wait that long for
 * it and assert the order and the state they see, never how soon it came.
 * Where "at once" has to be told from "after a timeout or a TTL", the test
 * makes those far longer than this (e.g. retry_fallback_ms = 60000). How
 * soon the lock logic acts (renewals, max hold, progress, retries) is the
 * business of its unit test, test_core.c, in virtual time. */
#define H_EVENT_MS 10000

struct h_agent {
    pid_t pid;      /* 0 when not running */
    int paused;     /* SIGSTOPped by h_agent_pause() */
    char sock[108]; /* fits sockaddr_un.sun_path */
    char conf[H_PATH];
    char log[H_PATH];
    char *env[H_MAX_ENVS + 1]; /* h_agent_env(): NULL-terminated */
    /* Single-node mode: Redis from the config file's address line, not -r
     * (which a reload cannot change); set before the agent starts. */
    int addr_in_config;
};

struct h_event {
    dlock_lease *lease;
    dlock_state state;
    int reason;
    int64_t at_ms; /* h_now_ms() when delivered */
};

/* A client of the agent that records the events delivered to it. */
struct h_cl {
    dlock_client *c;
    int agent;        /* index of the agent it talks to */
    int disconnected; /* dispatch returned DLOCK_EDISCONNECTED */
    int nev;
    struct h_event ev[H_MAX_EVENTS];
};

/* The result of an asynchronous acquire. */
struct h_acq {
    int done;
    int status;
    dlock_lease *lease;
    int seq;       /* completion order among all h_acq of the test, from 1 */
    int64_t at_ms; /* h_now_ms() at completion */
};

/* A forked process holding (or trying to take) a lock through its own client. */
struct h_holder {
    pid_t pid;
    int cmd_fd;     /* parent writes commands */
    int rep_fd;     /* parent reads results */
    int acquire_rc; /* valid once have_rc */
    int have_rc;
};

/* One redis-server. Node 0 is the Redis of the single-node tests. */
struct h_node {
    struct redisproc proc; /* its process: pid 0 when not running, paused when SIGSTOPped */
    char sock[H_PATH];     /* DIR/redis.sock for node 0, DIR/redis<i>.sock for the others */
    char log[H_PATH];
    char addr[H_PATH];  /* "unix:<sock>" */
    redisContext *conn; /* the harness's own connection (NULL until needed) */
    char args[512];     /* more redis-server arguments (h_node_set_args()) */
};

struct h_env {
    char dir[64];
    /* Node 0's paths (the same strings as node[0]), for single-node tests. */
    char redis_sock[H_PATH];
    char redis_log[H_PATH];
    char redis_addr[H_PATH]; /* "unix:<redis_sock>" */
    struct h_node node[H_MAX_NODES];
    struct redisproc spare[H_MAX_SPARES];
    /* The nodes agents are configured with: 0..nnodes-1. 0 or 1 is
     * single-node mode (node 0), 3 or 5 quorum mode. */
    int nnodes;
    struct h_agent agent[H_MAX_AGENTS];
    struct h_cl *clients[H_MAX_CLIENTS];
    pid_t children[H_MAX_CHILDREN]; /* holders, dlockctl runs: killed at teardown */
    int fds[H_MAX_FDS];             /* raw sockets: closed at teardown */
    int acq_seq;
    int passed;
    char **strs; /* strings handed out by h_redis_get(), freed at teardown */
    size_t nstrs, capstrs;
};

extern struct h_env H;

/* Criterion fixtures; ITEST() installs them. */
void h_setup(void);
void h_teardown(void);
/* Called after an ITEST body: closes clients, stops agents, checks exit 0. */
void h_finish(void);
/* Cleans up and marks the test skipped (Criterion runs no .fini then). */
void h_skip(const char *why);

/* Criterion's timeout of each ITEST() of a test file, in seconds, before the
 * time scale (the harness multiplies every test's timeout by h_scale() before
 * Criterion starts them); a file whose tests need longer defines it before
 * including this header. It is one for the whole file: Criterion drops (and
 * leaks) the pending timeouts that end after a shorter one added later. */
#ifndef H_TEST_TIMEOUT_S
#define H_TEST_TIMEOUT_S 60
#endif

#define ITEST(suite, name)                                                                         \
    static void suite##_##name##_body(void);                                                       \
    Test(suite, name, .init = h_setup, .fini = h_teardown, .timeout = H_TEST_TIMEOUT_S)            \
    {                                                                                              \
        suite##_##name##_body();                                                                   \
        h_finish();                                                                                \
    }                                                                                              \
    static void suite##_##name##_body(void)

/* ---- time and waiting ---- */

int64_t h_now_ms(void);
/* CLOCK_MONOTONIC in nanoseconds: the clock of Java's System.nanoTime() and
 * Node.js's process.hrtime(), for times taken in other processes. */
int64_t h_mono_ns(void);
void h_sleep_ms(int ms);

/* The time scale: the number in the environment variable DLOCK_TEST_SCALE
 * (1 when unset; from 1 to H_SCALE_MAX), read once. On a slow or busy machine
 * it stretches every deadline: H_WAIT_UNTIL, h_deadline(), h_pump(), the
 * waits for processes, sockets, redis-servers and agents (h_wait_child(),
 * h_ctl(), h_raw_read_frame(), h_agent_start_n() ...) and Criterion's timeout
 * of each test. It never stretches what a test asserts over a span of time
 * (H_HOLDS_FOR), nor the agent's own settings. It is at most H_SCALE_MAX so
 * that a wait for something "at once" stays shorter than the timers the tests
 * tell it from: a waiter behind a holder of 30 s TTL retries after about
 * 30 s, and H_EVENT_MS x H_SCALE_MAX is 25 s. */
#define H_SCALE_MAX 2.5
double h_scale(void);
/* ms times the scale: how long to wait for something that takes ms on an
 * idle machine. */
int h_scaled_ms(int ms);
/* h_now_ms() + h_scaled_ms(ms): the end of a wait. */
int64_t h_deadline(int ms);

/* Waits until cond is true, pumping every client (so their events and async
 * acquires are delivered) between evaluations; fails the test when timeout_ms
 * (scaled) passes first. */
#define H_WAIT_UNTIL(timeout_ms, cond)                                                             \
    do {                                                                                           \
        int64_t h_end_ = h_deadline(timeout_ms);                                                   \
        while (!(cond)) {                                                                          \
            if (h_now_ms() > h_end_)                                                               \
                cr_assert_fail("%s:%d: not true within %d ms: %s", __FILE__, __LINE__,             \
                               h_scaled_ms(timeout_ms), #cond);                                    \
            h_pump_all(2);                                                                         \
        }                                                                                          \
    } while (0)

/* Keeps checking that cond stays true for duration_ms (pumping clients);
 * fails the test the first time it is false. Not scaled: a longer span would
 * be another check. */
#define H_HOLDS_FOR(duration_ms, cond)                                                             \
    do {                                                                                           \
        int64_t h_end_ = h_now_ms() + (duration_ms);                                               \
        while (h_now_ms() < h_end_) {                                                              \
            if (!(cond))                                                                           \
                cr_assert_fail("%s:%d: became false: %s", __FILE__, __LINE__, #cond);              \
            h_pump_all(2);                                                                         \
        }                                                                                          \
    } while (0)

/* The agent answers a release before Redis has run its compare-and-DEL (the
 * DEL is pipelined, best effort), so a released key goes a moment after
 * dlock_lease_release() returns. H_KEY_GONE waits for that (up to
 * H_EVENT_MS) and fails unless the key went before it could have expired:
 * deleted, not left to its TTL. It reads the key's PTTL while it waits, so a
 * key seen with PTTL p at time t and found gone before t + p was deleted. */
#define H_KEY_GONE(key)            h_key_gone(__FILE__, __LINE__, 0, key)
#define H_NODE_KEY_GONE(node, key) h_key_gone(__FILE__, __LINE__, node, key)
void h_key_gone(const char *file, int line, int node, const char *key);
/* The same for any kind of node: `where` names it in the failure, pttl_of
 * reads a key's PTTL there (-2: no such key). */
void h_key_gone_at(const char *file, int line, const char *where, int node, const char *key,
                   long long (*pttl_of)(int node, const char *key));

/* ---- redis-server nodes ----
 *
 * Every node is a redis-server on its own Unix socket in DIR, without
 * persistence (unless h_node_set_args() asks for it), so a node started again
 * after a kill is empty. The h_node_* functions take the node index; the
 * h_redis_* ones act on node 0, the Redis of single-node tests. */

/* Arguments added to node i's redis-server command line at each later start,
 * after the harness's own (which they override), split at blanks: e.g.
 * "--appendonly yes --appendfsync always --appenddirname aof1" (each node
 * persisting needs its own appenddirname: they share DIR). */
void h_node_set_args(int i, const char *args);

/* Can a listening socket bind 127.0.0.1:port now (with SO_REUSEADDR, as
 * Redis does)? */
int h_port_free(int port);
/* A loopback TCP port nothing listens on now (the kernel's choice). */
int h_free_port(void);
/* A loopback TCP port nothing listens on now, below the kernel's ephemeral
 * range (so that no outgoing connection takes it meanwhile): for a server. */
int h_server_port(void);
/* Starts node 0 on its Unix socket (the agents') and on a free loopback TCP
 * port below the kernel's ephemeral range (so that no outgoing connection
 * takes it meanwhile), for clients that speak TCP only; returns the port. */
int h_redis_start_tcp(void);

/* Starts nodes 0..n-1 (those not running yet; 1 <= n <= H_MAX_NODES) and sets
 * H.nnodes to n: agents configured afterwards use all of them (quorum mode
 * for 3 or 5). Fails the test unless each answers PING within H_START_MS. */
void h_nodes_start(int n);
/* Starts node i, fresh or again on the same socket (empty), and waits for its
 * PING; raises H.nnodes to i+1 when it was lower. */
void h_node_start(int i);
void h_node_stop(int i);    /* SIGTERM (SIGCONT first if paused) + waitpid */
void h_node_kill(int i);    /* SIGKILL + waitpid */
void h_node_pause(int i);   /* SIGSTOP: the node keeps its connections and data */
void h_node_resume(int i);  /* SIGCONT */
void h_node_restart(int i); /* kill -9, then start on the same socket (new run id; empty unless
                               it persists) */
int h_node_running(int i);  /* running and not paused */

/* Runs a command on node i (reconnecting if needed); fails the test when
 * there is no reply or the node is not running or paused. The caller frees
 * the reply with freeReplyObject(). */
redisReply *h_node_cmd(int i, const char *fmt, ...);
/* GET on node i: the value, or NULL when the key does not exist. The string
 * belongs to the harness (freed at teardown, so a failed assertion leaks
 * nothing). */
char *h_node_get(int i, const char *key);
int h_node_exists(int i, const char *key);
long long h_node_pttl(int i, const char *key); /* -2 no key, -1 no TTL */
void h_node_set_px(int i, const char *key, const char *val, long long px);
void h_node_del(int i, const char *key);
/* PUBSUB NUMSUB channel on node i. */
long long h_node_subscribers(int i, const char *channel);
/* PUBSUB CHANNELS pattern on node i: how many channels have subscribers. */
long long h_node_channels(int i, const char *pattern);
/* INFO server uptime_in_seconds of node i. */
long long h_node_uptime_s(int i);

void h_redis_start(void);   /* h_node_start(0) */
void h_redis_stop(void);    /* h_node_stop(0) */
void h_redis_kill(void);    /* h_node_kill(0) */
void h_redis_pause(void);   /* h_node_pause(0) */
void h_redis_resume(void);  /* h_node_resume(0) */
void h_redis_restart(void); /* h_node_restart(0) */

/* Starts a redis-server that is none of the nodes (no persistence) on the
 * socket DIR/name, logging to DIR/name.log, and waits for its PING; it runs
 * until the teardown. */
void h_redis_spare(const char *name);

/* The h_node_* functions on node 0. */
redisReply *h_redis_cmd(const char *fmt, ...);
/* A command on node 0 whose reply must be an integer: that integer. */
long long h_redis_int(const char *fmt, ...);
/* HGET key field on node 0: the value (kept until the teardown), or NULL. */
const char *h_redis_hget(const char *key, const char *field);
char *h_redis_get(const char *key);
int h_redis_exists(const char *key);
long long h_redis_pttl(const char *key); /* -2 no key, -1 no TTL */
void h_redis_del(const char *key);
long long h_redis_count_keys(const char *pattern); /* KEYS pattern */
void h_redis_set_px(const char *key, const char *val, long long px);
/* SET key val NX PX px: 1 when set, 0 when refused (nil reply). */
int h_redis_set_nx_px(const char *key, const char *val, long long px);
/* 1 when s is a dlock value: 32 lowercase hex characters (the token), alone or
 * followed by a space and the holder record. */
int h_is_token(const char *s);

/* ---- dlockd ---- */

/* Writes agent i's config file: `agent_ini` goes under [agent] (may be NULL),
 * `redis_ini` under [redis] after the address line (may be NULL). The
 * address line names node 0, or, when H.nnodes > 1, nodes 0..H.nnodes-1
 * separated by commas (quorum mode); it must fit in the 199 bytes of a line
 * dlockd reads, which the socket paths in DIR do for H_MAX_NODES nodes. */
void h_agent_config(int i, const char *agent_ini, const char *redis_ini);
/* The same with the address line given (any form the agent takes). */
void h_agent_config_addr(int i, const char *agent_ini, const char *addr, const char *redis_ini);
/* Adds env to the environment agent i is started with from now on (also as a
 * successor), until the teardown or h_agent_env(i, NULL), which clears the
 * list: "NAME=VALUE" sets NAME, a bare "NAME" removes it. The entries are
 * applied in order in the agent's process, after the harness has removed
 * INVOCATION_ID from it (so that a test agent's SIGTERM is a stop even when
 * the tests run inside a service): "INVOCATION_ID=..." puts it back, for an
 * agent that is to ask a service manager (tests/fakesd.h) whether its stop
 * is a restart. At most H_MAX_ENVS entries per agent. */
void h_agent_env(int i, const char *env);
/* Starts agent i with its config (written with defaults unless
 * h_agent_config() was called) and waits until a client can open and, when
 * Redis is up (in quorum mode: a majority of the nodes), until the agent has
 * reached it (a probe lock "__harness_probe__" is taken and given back) and
 * its status shows its notice link up (to every node that runs). In
 * single-node mode node 0 is given with -r; in quorum mode the nodes come
 * from the config file, and the probe goes on until a grant has put its key
 * on every node that runs (so all the agent's links are up), also while the
 * nodes are excluded from quorums after their start (up to the agent's
 * max_ttl_ms, read from its config file, plus 3 s; at most 25 s). */
void h_agent_start_n(int i);
/* Whether agent i's status shows its notice link up to every node that
 * runs (0 when it has no status socket). */
int h_agent_notices_up(int i);
/* Starts agent i like h_agent_start_n() but returns as soon as a client can
 * open: it neither probes Redis nor waits for its subscriptions. */
void h_agent_spawn(int i);
/* Starts a successor of agent i with its config (dlockd --successor), which
 * takes the leases over from the running one; that one must leave and exit
 * with 0. Then waits as h_agent_start_n() does. */
void h_agent_successor(int i);
/* h_redis_start() + h_agent_config(0, agent_ini, NULL) + h_agent_start_n(0). */
void h_start(const char *agent_ini);
/* Two agents on one Redis, standing for two hosts: h_redis_start(), then
 * agents 0 and 1 configured with agent_ini (may be NULL) and started. */
void h_start_two(const char *agent_ini);
/* Quorum mode: starts nnodes nodes (h_nodes_start()), configures agents
 * 0..nagents-1 with agent_ini and redis_ini (either may be NULL), waits until
 * every node has been up for the agents' max_ttl_ms (by its INFO uptime, less
 * the second Redis may count too many, as the agent does), so that no node is
 * excluded from quorums as freshly started when the agents first see it,
 * then starts the agents. Settings missing from agent_ini / redis_ini get
 * quorum-friendly values: max_ttl_ms = 2000, default_ttl_ms = 1500,
 * min_ttl_ms = 400, node_timeout_ms = 300. */
void h_quorum_start(int nnodes, int nagents, const char *agent_ini, const char *redis_ini);
/* SIGTERM agent i (SIGCONT first if paused), wait; returns the exit status
 * (128+sig if killed). */
int h_agent_stop(int i);
void h_agent_kill(int i);   /* SIGKILL + waitpid */
void h_agent_pause(int i);  /* SIGSTOP; the teardown resumes it before stopping it */
void h_agent_resume(int i); /* SIGCONT */
int h_agent_alive(int i);
/* Prints the last `lines` lines of agent i's log to stderr. */
void h_agent_log_tail(int i, int lines);
/* A copy of s, kept until the teardown. */
char *h_keep(const char *s);
/* A formatted string (printf), kept until the teardown. */
char *h_keepf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the last lines of a log file on stderr. */
void h_log_tail(const char *path, int lines);

/* ---- clients ---- */

struct h_cl *h_client(void); /* to agent 0; fails the test on error */
struct h_cl *h_client_at(int agent);
int h_client_try_open(int agent, dlock_client **out);
void h_client_close(struct h_cl *cl);
/* Dispatches what the agent sent, waiting up to timeout_ms (scaled) for it. */
void h_pump(struct h_cl *cl, int timeout_ms);
void h_pump_all(int timeout_ms);
/* Events of cl (for lease, or any lease when NULL) in the given state. */
int h_events(const struct h_cl *cl, const dlock_lease *lease, dlock_state state);

/* Blocking acquire; returns its result (the lease in *out on success). */
int h_acquire(struct h_cl *cl, const char *name, uint32_t ttl_ms, int64_t wait_ms,
              dlock_lease **out);
/* Blocking acquire that must succeed. */
dlock_lease *h_must_acquire(struct h_cl *cl, const char *name, uint32_t ttl_ms);
/* Asynchronous acquire; fails the test if it could not be sent. */
void h_acquire_async(struct h_cl *cl, const char *name, uint32_t ttl_ms, int64_t wait_ms,
                     struct h_acq *acq);
/* The same with all the options and a lock kind (spec NULL: exclusive). */
void h_acquire_spec_async(struct h_cl *cl, const char *name, const dlock_acquire_options *o,
                          const dlock_lock_spec *spec, struct h_acq *acq);
/* dlock_lease_acquire_cancel() of an acquire started by h_acquire_async()
 * or h_acquire_spec_async(): its result. */
int h_acquire_cancel(struct h_cl *cl, struct h_acq *acq);
/* How many of the n acquires are done; of those, how many succeeded in *ok
 * (ok may be NULL). */
int h_acq_done(const struct h_acq *acq, int n, int *ok);
/* The Redis key of lock name under the default prefix. */
const char *h_key(const char *name);
/* The release channel of lock name under the default prefix. */
const char *h_channel(const char *name);

/* ---- forked holder processes ---- */

/* Forks a child that opens its own client to agent 0 and acquires name. */
void h_holder_spawn(struct h_holder *h, const char *name, uint32_t ttl_ms, int64_t wait_ms);
/* Waits up to timeout_ms (scaled) for the child's acquire result: 1 and h->acquire_rc
 * set, or 0 when it has not answered yet. */
int h_holder_poll(struct h_holder *h, int timeout_ms);
/* Spawns and waits for the acquire, which must succeed. */
void h_holder_start(struct h_holder *h, const char *name, uint32_t ttl_ms);
/* Asks the child to release and exit; returns the release result. */
int h_holder_release(struct h_holder *h);
void h_holder_kill(struct h_holder *h, int sig); /* SIGKILL also reaps it */

/* ---- child processes in general ---- */

/* fork(): in the child, which must end with _exit(), every descriptor from 3
 * up is closed (so it holds no copy of the test's sockets) and it dies with
 * the test; the parent registers it for teardown. */
pid_t h_fork(void);

/* Forks and execs argv (argv[0] is the path) with stdout and stderr appended
 * to the file `out` (NULL: DIR/child.out), in its own process group; the child
 * is killed at teardown. */
pid_t h_spawn(char *const argv[], const char *out);
/* The same, talking through pipes: *to is the child's standard input, *from
 * its standard output (both close-on-exec here); its stderr goes to `log`.
 * No other descriptor of the test lives on in the child. */
pid_t h_spawn_piped(char *const argv[], const char *log, int *to, int *from);
/* Waits for pid up to timeout_ms (scaled); returns its exit status, 128+signal when
 * killed, or -1 on timeout (the child is then left running). */
int h_wait_child(pid_t pid, int timeout_ms);
/* Runs dlockctl with the given arguments (NULL-terminated, without argv[0])
 * and returns its exit status; fails the test if it runs past timeout_ms (scaled). */
int h_ctl(int timeout_ms, ...);
pid_t h_ctl_spawn(const char *const *args);
/* Reads a whole file into a static buffer (NULL when it does not exist). */
const char *h_read_file(const char *path);
/* DIR/name in a static rotating buffer. */
const char *h_path(const char *name);

/* ---- the status socket ---- */

/* Sends one request line to agent i's status socket (DIR/status<i>.sock
 * unless the test configured another) and returns the whole answer, in a
 * static buffer; NULL when the socket cannot be reached. */
const char *h_status_ask(int agent, const char *req);
/* The value of counter `name` (e.g. "dlock_releases_total") in agent i's
 * metrics; fails the test when it is not there. */
long long h_metric(int agent, const char *name);

/* ---- JSON ---- */

/* 1 when text is one JSON value (RFC 8259 grammar), blanks around it
 * allowed; it does not check that strings are valid UTF-8. */
int h_json_valid(const char *text);

/* ---- raw protocol sockets ---- */

int h_raw_connect(int agent); /* a plain connected socket, closed at teardown */
void h_raw_close(int fd);
/* Sends all bytes; returns 0 or -errno (EPIPE/ECONNRESET when closed). */
int h_raw_send(int fd, const void *buf, size_t n);
int h_raw_send_buf(int fd, struct wire_buf *b); /* sends and frees */
/* recvmsg() of exactly n bytes within 3 s (scaled), keeping the two
 * descriptors that come attached to them in fds[0..1] (which start at -1;
 * any other is closed). 0, or -1; no assertion (usable in a forked child). */
int h_raw_recv_fds(int fd, uint8_t *buf, size_t n, int fds[2]);
/* Sends HELLO and expects HELLO_OK; returns the agent's max_name_len. */
uint32_t h_raw_hello(int fd);
/* Reads one frame within timeout_ms (scaled): 1 read (header in *h, body
 * copied to body[0..cap)), 0 on EOF, -1 on timeout, -2 on a read error (e.g.
 * ECONNRESET). */
int h_raw_read_frame(int fd, int timeout_ms, struct wire_hdr *h, uint8_t *body, size_t cap);
/* Expects the agent to close the connection within timeout_ms (scaled), reading any
 * frames before; *err_code gets the code of an ERROR frame seen (0 if none).
 * Returns 1 when closed, 0 on timeout. */
int h_raw_expect_close(int fd, int timeout_ms, int *err_code);

#endif /* DLOCK_TEST_HARNESS_H */
