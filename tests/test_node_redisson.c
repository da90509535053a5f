/* SPDX-License-Identifier: BSD-3-Clause */
/* test_node_redisson.c -- dlock and node-redisson, a Node.js implementation
 * of Java Redisson's RLock, share locks whose names the agent's [formats]
 * section stores in Redisson's format: one hash per name,
 * a field per holder with its hold count, a PEXPIRE renewed by each side's
 * watchdog, and the release published on redisson_lock__channel:{NAME}.
 *
 * node-redisson runs in driver processes (tests/interop/node/driver.js,
 * installed by npm into the build tree), one client each, on the test's
 * redis-server over TCP; the test writes commands to a driver's standard
 * input and reads one answer line per command (a pipe each way). Drivers
 * report times as CLOCK_MONOTONIC nanoseconds, which the test compares with
 * its own: the wake-up latencies are printed, never asserted.
 *
 *   format_alone             node-redisson alone on Redis: its hash field, the
 *                            hold count of a re-entrant hold, the PEXPIRE, the
 *                            notice "0" of the last unlock on the channel
 *   node_holds_dlock_waits   node-redisson holds a name: `dlockctl holder`
 *                            shows its field, a dlock try-once is busy
 *                            (libdlock, `dlockctl run -w 0` exit 75), a dlock
 *                            waiter gets it after node-redisson's unlock
 *   dlock_holds_node_waits   dlock holds a name (`dlockctl holder` shows the
 *                            dlock lease): node-redisson's tryLock(0)
 *                            is false without an error, a node-redisson
 *                            lock() waiter gets it after dlock's release
 *   mixed_counter            two node-redisson drivers and two dlock clients
 *                            increment one
 *                            Redis counter (GET, then SET) under one name for
 *                            20 s: no update is lost, and both sides got the
 *                            name while the other side was at it
 *
 * Without node and npm at configure time (or the driver not installed) the
 * tests are skipped. */
#define H_TEST_TIMEOUT_S 120
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* ---- clock ---- */

static double ms_between(int64_t from_ns, int64_t to_ns)
{
    return (double)(to_ns - from_ns) / 1e6;
}

/* ---- set-up: Redis on TCP and a unix socket, the agent ---- */

/* Redis with TCP, then agent 0 with these [agent] settings (may be NULL)
 * and `[formats] redisson = patterns`; returns the TCP port. */
static int start_env(const char *agent_ini, const char *patterns)
{
    int port = h_redis_start_tcp();
    char formats[256];
    snprintf(formats, sizeof formats, "\n[formats]\nredisson = %s", patterns);
    h_agent_config(0, agent_ini, formats);
    h_agent_start_n(0);
    return port;
}

/* ---- node-redisson drivers ---- */

#ifdef NODE_REDISSON_DRIVER
#define HAVE_DRIVER 1
#else
#define HAVE_DRIVER          0
#define NODE_EXECUTABLE      ""
#define NODE_REDISSON_DRIVER ""
#endif

struct drv {
    int idx;
    pid_t pid;
    int in;  /* its standard input: commands */
    int out; /* its standard output: answers (non-blocking) */
    char log[H_PATH];
    char buf[4096];
    size_t len;
};

/* Skips the test unless the driver was installed with the build. */
static void need_driver(void)
{
    if (!HAVE_DRIVER)
        h_skip("no node-redisson driver in this build (node or npm missing at configure "
               "time, or DLOCK_TEST_NODE_REDISSON=OFF)");
    if (access(NODE_EXECUTABLE, X_OK) != 0)
        h_skip("node is no longer at " NODE_EXECUTABLE);
    if (access(NODE_REDISSON_DRIVER, R_OK) != 0)
        h_skip("the node-redisson driver is not installed (build the node_redisson_driver "
               "target)");
    /* A driver that died must not kill the test with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
}

static void drv_fail_log(const struct drv *d)
{
    h_log_tail(d->log, 20);
}

/* The next line of the driver's answers, within timeout_ms (scaled):
 * 1 with it in line (without its newline), 0 on timeout, -1 at EOF. */
static int drv_line(struct drv *d, int timeout_ms, char *line, size_t cap)
{
    int64_t end = h_deadline(timeout_ms);
    for (;;) {
        char *nl = memchr(d->buf, '\n', d->len);
        if (nl) {
            size_t n = (size_t)(nl - d->buf);
            cr_assert_lt(n, cap, "driver %d: answer line too long", d->idx);
            memcpy(line, d->buf, n);
            line[n] = '\0';
            d->len -= n + 1;
            memmove(d->buf, nl + 1, d->len);
            return 1;
        }
        cr_assert_lt(d->len, sizeof d->buf - 1, "driver %d: answer line too long", d->idx);
        int64_t left = end - h_now_ms();
        if (left < 0)
            return 0;
        struct pollfd p = {.fd = d->out, .events = POLLIN};
        int r = poll(&p, 1, (int)(left > 100 ? 100 : left));
        if (r < 0 && errno != EINTR)
            cr_assert_fail("poll: %s", strerror(errno));
        if (r <= 0)
            continue;
        ssize_t k = read(d->out, d->buf + d->len, sizeof d->buf - 1 - d->len);
        if (k == 0)
            return -1;
        if (k < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            cr_assert_fail("driver %d: read: %s", d->idx, strerror(errno));
        }
        d->len += (size_t)k;
    }
}

/* The next answer, which must come within timeout_ms (scaled). */
static void drv_expect_line(struct drv *d, int timeout_ms, char *line, size_t cap)
{
    int r = drv_line(d, timeout_ms, line, cap);
    if (r != 1) {
        drv_fail_log(d);
        cr_assert_fail("driver %d: %s", d->idx,
                       r ? "exited without answering" : "no answer in time");
    }
}

static void drv_send(struct drv *d, const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd - 1, fmt, ap);
    va_end(ap);
    cr_assert(n > 0 && (size_t)n < sizeof cmd - 1, "driver command too long");
    cmd[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t k = write(d->in, cmd + off, (size_t)(n - off));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            drv_fail_log(d);
            cr_assert_fail("driver %d: write: %s", d->idx, strerror(errno));
        }
        off += (int)k;
    }
}

/* Sends a command and reads its answer into line (within H_EVENT_MS). */
static void drv_ask(struct drv *d, char *line, size_t cap, const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    drv_send(d, "%s", cmd);
    drv_expect_line(d, H_EVENT_MS, line, cap);
}

/* Splits "WORD T ..." into the word (cut to cap - 1 bytes) and T; returns T
 * (0 when none). */
static int64_t answer_time(const char *line, char *word, size_t cap)
{
    size_t n = strcspn(line, " ");
    if (n >= cap)
        n = cap - 1;
    memcpy(word, line, n);
    word[n] = '\0';
    const char *t = strchr(line, ' ');
    return t ? strtoll(t + 1, NULL, 10) : 0;
}

/* A command whose answer must be `ok T`: returns T. */
static int64_t drv_ok(struct drv *d, const char *fmt, ...)
{
    char cmd[512], line[512], word[16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    drv_ask(d, line, sizeof line, "%s", cmd);
    int64_t t = answer_time(line, word, sizeof word);
    if (strcmp(word, "ok") != 0 || t <= 0) {
        drv_fail_log(d);
        cr_assert_fail("driver %d: '%s' answered '%s'", d->idx, cmd, line);
    }
    return t;
}

/* Starts driver idx on 127.0.0.1:port with node-redisson's watchdog timeout
 * watchdog_ms, and waits for its `ready`. It is killed at teardown (a child
 * of h_fork()); drv_quit() ends it cleanly. */
static void drv_start(struct drv *d, int idx, int port, int watchdog_ms)
{
    memset(d, 0, sizeof *d);
    d->idx = idx;
    char name[32];
    snprintf(name, sizeof name, "node%d.log", idx);
    snprintf(d->log, sizeof d->log, "%s", h_path(name));
    char addr[32], wd[16];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    snprintf(wd, sizeof wd, "%d", watchdog_ms);
    char *argv[] = {NODE_EXECUTABLE, NODE_REDISSON_DRIVER, addr, wd, NULL};
    d->pid = h_spawn_piped(argv, d->log, &d->in, &d->out);
    int fl = fcntl(d->out, F_GETFL);
    cr_assert_eq(fcntl(d->out, F_SETFL, fl | O_NONBLOCK), 0);

    char line[256], word[16];
    drv_expect_line(d, H_EVENT_MS, line, sizeof line);
    answer_time(line, word, sizeof word);
    if (strcmp(word, "ready") != 0) {
        drv_fail_log(d);
        cr_assert_fail("driver %d started with '%s'", idx, line);
    }
}

/* `quit`, then the driver must exit with status 0. */
static void drv_quit(struct drv *d)
{
    drv_ok(d, "quit");
    int st = h_wait_child(d->pid, H_STOP_MS);
    if (st != 0)
        drv_fail_log(d);
    cr_assert_eq(st, 0, "driver %d exit status %d", d->idx, st);
    close(d->in);
    close(d->out);
    d->pid = 0;
}

/* ---- Redis, in Redisson's format ---- */

/* The channel Redisson publishes a name's release on. */
static const char *channel_of(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "redisson_lock__channel:{%s}", name);
    return buf;
}

/* Asserts that the key `name` is a hash with one field, `field` (when
 * field is NULL: 32 hex digits then ":0", dlock's own), whose value is
 * `count`, and that it has a TTL. */
static void assert_holder(const char *name, const char *field, const char *count)
{
    redisReply *r = h_redis_cmd("HGETALL %s", name);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "HGETALL %s: type %d", name, r->type);
    cr_assert_eq(r->elements, 2, "%s: %zu hash fields and values, not one pair", name, r->elements);
    const char *f = r->element[0]->str, *v = r->element[1]->str;
    if (field) {
        cr_assert_str_eq(f, field, "%s: field '%s', not '%s'", name, f, field);
    } else {
        size_t n = strlen(f);
        cr_assert(n == 34 && strspn(f, "0123456789abcdef") == 32 && strcmp(f + 32, ":0") == 0,
                  "%s: field '%s' is not dlock's <token>:0", name, f);
    }
    cr_assert_str_eq(v, count, "%s: hold count %s, not %s", name, v, count);
    freeReplyObject(r);
    long long pttl = h_redis_pttl(name);
    cr_assert_gt(pttl, 0, "%s: PTTL %lld", name, pttl);
}

/* `dlockctl holder NAME`: asserts exit 0 and that its output has `want`. */
static void assert_ctl_holder(const char *name, const char *want)
{
    char status[H_PATH], out_path[H_PATH];
    snprintf(status, sizeof status, "%s", h_path("status0.sock"));
    snprintf(out_path, sizeof out_path, "%s", h_path("ctl.out"));
    unlink(out_path);
    int st = h_ctl(5000, "-S", status, "holder", name, NULL);
    const char *out = h_read_file(out_path);
    cr_assert_eq(st, 0, "dlockctl holder %s: exit %d: %s", name, st, out ? out : "");
    cr_assert(out && strstr(out, want), "dlockctl holder %s: no '%s' in: %s", name, want,
              out ? out : "");
    cr_log_info("%s", out);
}

/* ---- an acquire whose completion time is CLOCK_MONOTONIC ---- */

struct mono_acq {
    int done, status;
    dlock_lease *lease;
    int64_t at_ns;
};

static void mono_acq_cb(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    (void)c;
    struct mono_acq *a = arg;
    a->at_ns = h_mono_ns();
    a->status = status;
    a->lease = lease;
    a->done = 1;
}

/* ---- 0: node-redisson alone, the format the agent has to match ---- */

ITEST(node_redisson, format_alone)
{
    need_driver();
    int port = h_redis_start_tcp();
    struct drv d;
    drv_start(&d, 0, port, 60000);
    const char *name = "orders:0";
    char line[256], word[16], field[200];
    drv_ask(&d, line, sizeof line, "field %s", name);
    cr_assert_eq(sscanf(line, "%15s %199s", word, field), 2, "field: '%s'", line);
    cr_assert_str_eq(word, "ok", "field: '%s'", line);
    cr_log_info("node-redisson's hash field: %s", field);

    drv_ok(&d, "trylock %s 0", name);
    assert_holder(name, field, "1");
    drv_ok(&d, "trylock %s 0", name); /* the same RLock object: re-entrant */
    assert_holder(name, field, "2");

    /* A subscriber sees the last unlock, and only that, published. */
    struct timeval tv = {2, 0};
    redisContext *sub = redisConnectUnixWithTimeout(H.redis_sock, tv);
    cr_assert(sub && !sub->err);
    redisSetTimeout(sub, tv);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel_of(name));
    cr_assert_not_null(r);
    freeReplyObject(r);
    drv_ok(&d, "unlock %s", name);
    assert_holder(name, field, "1");
    drv_ok(&d, "unlock %s", name);
    cr_assert_eq(h_redis_exists(name), 0, "the last unlock left the key");
    void *vr = NULL;
    cr_assert_eq(redisGetReply(sub, &vr), REDIS_OK, "no release notice within 2 s");
    r = vr;
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 3);
    cr_assert_str_eq(r->element[0]->str, "message");
    cr_assert_str_eq(r->element[1]->str, channel_of(name));
    cr_assert_str_eq(r->element[2]->str, "0");
    freeReplyObject(r);
    redisFree(sub);

    /* An unlock of a name it does not hold is an error, not a crash. */
    drv_ask(&d, line, sizeof line, "unlock %s", name);
    answer_time(line, word, sizeof word);
    cr_assert_str_eq(word, "error", "unlock of a free name: '%s'", line);
    drv_quit(&d);
}

/* ---- 1: node-redisson holds, dlock waits ---- */

ITEST(node_redisson, node_holds_dlock_waits)
{
    need_driver();
    /* The wake-up has to come from the release notice: the fallback retry
     * is a minute off, and node-redisson's key lives 60 s, renewed. */
    int port = start_env("retry_fallback_ms = 60000", "orders:*");
    struct drv d;
    drv_start(&d, 0, port, 60000);
    const char *name = "orders:1";

    drv_ok(&d, "trylock %s 0", name);
    char line[256], word[16], field[200];
    drv_ask(&d, line, sizeof line, "field %s", name);
    cr_assert_eq(sscanf(line, "%15s %199s", word, field), 2, "field: '%s'", line);
    cr_assert_str_eq(word, "ok", "field: '%s'", line);
    assert_holder(name, field, "1");

    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    int rc = h_acquire(a, name, 5000, 0, &l);
    cr_assert_eq(rc, DLOCK_EBUSY, "try-once on a node-redisson hold: %s (%d)", dlock_strerror(rc),
                 rc);
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "-w", "0", name, "--", "true", NULL);
    cr_assert_eq(st, 75, "dlockctl run -w 0 on a node-redisson hold: exit %d", st);
    assert_holder(name, field, "1"); /* untouched */
    char want[256];
    snprintf(want, sizeof want, "Redisson %s, 1 hold", field);
    assert_ctl_holder(name, want);

    /* A waiter: its agent listens on the name's Redisson channel. */
    struct mono_acq w = {0};
    dlock_acquire_options o = {.ttl_ms = 5000, .wait_ms = DLOCK_WAIT_FOREVER};
    cr_assert_eq(dlock_lease_acquire_async(a->c, name, &o, mono_acq_cb, &w), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, channel_of(name)) >= 1);
    H_HOLDS_FOR(300, !w.done);

    int64_t unlock_ns = drv_ok(&d, "unlock %s", name);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_gt(w.at_ns, unlock_ns, "the waiter was granted before node-redisson's unlock");
    cr_log_info("dlock waiter granted %.3f ms after node-redisson's unlock call",
                ms_between(unlock_ns, w.at_ns));
    assert_holder(name, NULL, "1");

    cr_assert_eq(dlock_lease_release_sync(w.lease), 0);
    H_KEY_GONE(name);
    drv_quit(&d);
}

/* ---- 2: dlock holds, node-redisson waits ---- */

ITEST(node_redisson, dlock_holds_node_waits)
{
    need_driver();
    /* dlock's key lives 60 s, renewed: a node-redisson waiter that missed
     * the release notice would wait that long (the PTTL it saw) before it
     * tried again, longer than any wait of this test. */
    int port = start_env("max_ttl_ms = 120000", "orders:*");
    struct drv d;
    drv_start(&d, 0, port, 60000);
    const char *name = "orders:2";

    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, name, 60000);
    assert_holder(name, NULL, "1");
    assert_ctl_holder(name, "dlock lease");

    char line[256], word[16];
    drv_ask(&d, line, sizeof line, "trylock %s 0", name);
    answer_time(line, word, sizeof word);
    cr_assert_str_eq(word, "busy", "node-redisson tryLock(0) on a dlock hold: '%s'", line);
    assert_holder(name, NULL, "1"); /* untouched */

    /* A node-redisson lock() waiter: it tries, then subscribes. */
    long long before = h_node_subscribers(0, channel_of(name));
    drv_send(&d, "lock %s", name);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, channel_of(name)) > before);
    cr_assert_eq(drv_line(&d, 300, line, sizeof line), 0, "node-redisson got a held lock: '%s'",
                 line);

    int64_t release_ns = h_mono_ns();
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    drv_expect_line(&d, H_EVENT_MS, line, sizeof line);
    int64_t got_ns = answer_time(line, word, sizeof word);
    cr_assert_str_eq(word, "ok", "node-redisson lock(): '%s'", line);
    cr_assert_gt(got_ns, release_ns, "node-redisson was granted before dlock's release");
    cr_log_info("node-redisson waiter granted %.3f ms after dlock's release call",
                ms_between(release_ns, got_ns));

    char field[200];
    drv_ask(&d, line, sizeof line, "field %s", name);
    cr_assert_eq(sscanf(line, "%15s %199s", word, field), 2, "field: '%s'", line);
    assert_holder(name, field, "1");
    drv_ok(&d, "unlock %s", name);
    H_KEY_GONE(name);
    drv_quit(&d);
}

/* ---- 6: one counter, both kinds of clients ---- */

#define MIX_NAME    "product_counter"
#define MIX_KEY     "mix:value" /* the counter: a plain string key */
#define MIX_RUN_MS  20000       /* how long the workers run */
#define MIX_DRIVERS 2
#define MIX_THREADS 2
#define MIX_BATCH   2    /* increments per `count` command */
#define MIX_TTL_MS  5000 /* both sides' key TTL (the node drivers' watchdog too) */
#define MIX_WAIT_MS 60000
/* The dlock clients ask again at once after each hold, so one of them
 * always waits. node-redisson's waiters are in no waiting-hosts record;
 * they get turns because the agent, having seen others hear its release
 * messages, lets a moment pass before its next acquire and hands no key
 * over locally (docs/redisson.md, "Turns across sides"). */

struct mix_worker {
    pthread_t tid;
    const char *sock;
    const char *redis_sock;
    int64_t stop_ms; /* h_now_ms() at which it stops taking the lock */
    long increments;
    int failed; /* the first unexpected result: a DLOCK_E* code, or 1 for Redis */
    char why[160];
};

static void *mix_run(void *arg)
{
    struct mix_worker *w = arg;
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, w->sock);
    if (rc != 0) {
        w->failed = rc;
        snprintf(w->why, sizeof w->why, "open: %s", dlock_strerror(rc));
        return NULL;
    }
    struct timeval tv = {10, 0};
    redisContext *r = redisConnectUnixWithTimeout(w->redis_sock, tv);
    if (!r || r->err) {
        w->failed = 1;
        snprintf(w->why, sizeof w->why, "redis connect: %s", r ? r->errstr : "no memory");
        if (r)
            redisFree(r);
        dlock_client_close(c);
        return NULL;
    }
    redisSetTimeout(r, tv);
    dlock_acquire_options o = {.ttl_ms = MIX_TTL_MS, .wait_ms = MIX_WAIT_MS};
    while (!w->failed && h_now_ms() < w->stop_ms) {
        dlock_lease *l = NULL;
        rc = dlock_lease_acquire(c, MIX_NAME, &o, &l);
        if (rc != 0) {
            w->failed = rc;
            snprintf(w->why, sizeof w->why, "acquire: %s", dlock_strerror(rc));
            break;
        }
        redisReply *g = redisCommand(r, "GET %s", MIX_KEY);
        long v = g && g->type == REDIS_REPLY_STRING ? atol(g->str) : 0;
        int ok = g && (g->type == REDIS_REPLY_STRING || g->type == REDIS_REPLY_NIL);
        if (g)
            freeReplyObject(g);
        redisReply *s = ok ? redisCommand(r, "SET %s %ld", MIX_KEY, v + 1) : NULL;
        ok = s && s->type == REDIS_REPLY_STATUS;
        if (s)
            freeReplyObject(s);
        if (!ok) {
            w->failed = 1;
            snprintf(w->why, sizeof w->why, "GET/SET: %s", r->err ? r->errstr : "bad reply");
            dlock_lease_release(l);
            break;
        }
        w->increments++;
        rc = dlock_lease_release(l);
        if (rc != 0) {
            w->failed = rc;
            snprintf(w->why, sizeof w->why, "release: %s", dlock_strerror(rc));
        }
    }
    redisFree(r);
    dlock_client_close(c);
    return NULL;
}

ITEST(node_redisson, mixed_counter)
{
    need_driver();
    int port = start_env(NULL, "orders:* product_*");
    struct drv d[MIX_DRIVERS];
    for (int i = 0; i < MIX_DRIVERS; i++)
        drv_start(&d[i], i, port, MIX_TTL_MS);
    h_redis_del(MIX_KEY);

    int64_t t0 = h_now_ms(), stop = t0 + MIX_RUN_MS;
    int64_t stop_ns = h_mono_ns() + (int64_t)MIX_RUN_MS * 1000000;
    /* Static: a failed assertion leaves the threads running to the end. */
    static struct mix_worker w[MIX_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < MIX_THREADS; i++) {
        w[i].sock = H.agent[0].sock;
        w[i].redis_sock = H.redis_sock;
        w[i].stop_ms = stop;
        cr_assert_eq(pthread_create(&w[i].tid, NULL, mix_run, &w[i]), 0);
    }

    /* Each driver runs `count` commands back to back until the time is up;
     * the last one finishes after. */
    long node_inc[MIX_DRIVERS] = {0}, node_during_inc[MIX_DRIVERS] = {0};
    int busy[MIX_DRIVERS];
    for (int i = 0; i < MIX_DRIVERS; i++) {
        drv_send(&d[i], "count %s %s %d", MIX_NAME, MIX_KEY, MIX_BATCH);
        busy[i] = 1;
    }
    /* A batch's locks may each wait out a key's TTL (node-redisson misses a
     * release published between its attempt and its subscription). */
    int64_t end = stop + h_scaled_ms(MIX_BATCH * MIX_TTL_MS + H_EVENT_MS);
    for (;;) {
        int pending = 0;
        for (int i = 0; i < MIX_DRIVERS; i++)
            pending += busy[i];
        if (!pending)
            break;
        if (h_now_ms() > end) {
            for (int i = 0; i < MIX_DRIVERS; i++)
                drv_fail_log(&d[i]);
            cr_assert_fail("node-redisson drivers still counting %lld ms after the end",
                           (long long)(h_now_ms() - stop));
        }
        for (int i = 0; i < MIX_DRIVERS; i++) {
            if (!busy[i])
                continue;
            char line[256], word[16];
            long long t = 0;
            long n = 0;
            int r = drv_line(&d[i], 5, line, sizeof line);
            if (r == 0)
                continue;
            if (r < 0) {
                drv_fail_log(&d[i]);
                cr_assert_fail("driver %d exited while counting", i);
            }
            if (sscanf(line, "%15s %lld %ld", word, &t, &n) != 3 || strcmp(word, "ok") != 0 ||
                n != MIX_BATCH) {
                drv_fail_log(&d[i]);
                cr_assert_fail("driver %d: count answered '%s'", i, line);
            }
            node_inc[i] += n;
            if (t <= stop_ns)
                node_during_inc[i] += n;
            busy[i] = 0;
            if (h_now_ms() < stop) {
                drv_send(&d[i], "count %s %s %d", MIX_NAME, MIX_KEY, MIX_BATCH);
                busy[i] = 1;
            }
        }
    }
    long dlock_total = 0, node_total = 0;
    for (int i = 0; i < MIX_THREADS; i++) {
        cr_assert_eq(pthread_join(w[i].tid, NULL), 0);
        cr_log_info("dlock client %d: %ld increments", i, w[i].increments);
        cr_assert_eq(w[i].failed, 0, "dlock client %d: %s", i, w[i].why);
        dlock_total += w[i].increments;
    }
    for (int i = 0; i < MIX_DRIVERS; i++) {
        cr_log_info("node-redisson driver %d: %ld increments, %ld of them in batches done "
                    "before the dlock clients stopped",
                    i, node_inc[i], node_during_inc[i]);
        node_total += node_inc[i];
    }
    int64_t ran = h_now_ms() - t0;
    char *v = h_redis_get(MIX_KEY);
    long counter = v ? atol(v) : 0;
    cr_log_info("%lld ms: counter %ld, dlock %ld + node-redisson %ld increments", (long long)ran,
                counter, dlock_total, node_total);
    cr_assert_eq(counter, dlock_total + node_total, "%ld updates lost",
                 dlock_total + node_total - counter);
    cr_assert_gt(dlock_total, 0, "the dlock clients never got the lock");
    long node_during = 0;
    for (int i = 0; i < MIX_DRIVERS; i++)
        node_during += node_during_inc[i];
    cr_assert_gt(node_during, 0,
                 "the node-redisson drivers never got the lock while the dlock "
                 "clients ran");
    /* Nobody holds it any more. */
    H_KEY_GONE(MIX_NAME);
    for (int i = 0; i < MIX_DRIVERS; i++)
        drv_quit(&d[i]);
}
