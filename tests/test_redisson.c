/* SPDX-License-Identifier: BSD-3-Clause */
/* test_redisson.c -- Java Redisson's RLock and dlock on the same names: an
 * agent whose [formats] redisson patterns match a name keeps its lock as
 * Redisson does (a hash under the name itself, one field per holder whose
 * value is the hold count, a PEXPIRE renewed by each side's watchdog, a
 * PUBLISH of 0 on redisson_lock__channel:{NAME} at the last unlock); names
 * of its redisson_rwlock patterns as RReadWriteLock keeps them, and names
 * of its redisson_semaphore patterns as RPermitExpirableSemaphore does
 * (docs/redisson.md).
 *
 * Redisson runs in a Java driver, tests/interop/redisson (its README tells
 * its commands), one process per Redisson holder, talking to the test over a
 * pipe: one command a line, one answer a line. Its times are
 * System.nanoTime(), CLOCK_MONOTONIC like h_mono_ns() here (the driver's own
 * check compares them). Redisson cannot use a Unix socket: node 0 listens on
 * a loopback TCP port as well, for the driver, while the agent uses the
 * socket.
 *
 * Checked, on one Redis:
 *  - the driver itself: two Redisson holders exclude each other, an unlock
 *    wakes the other's waiter, its clock is this one;
 *  - Redisson holds: a try-once of dlock (libdlock, dlockctl run -w 0) is
 *    busy, dlockctl holder names the Redisson holder, and a waiting dlock
 *    client gets the name after Redisson's unlock, also with a fallback
 *    retry of a minute (the unlock's notice woke it);
 *  - dlock holds: Redisson's tryLock(0) is false, and a Redisson waiter gets
 *    the name after dlock's release, long before the dlock lease's TTL (so
 *    from the release's notice);
 *  - re-entrant holds on either side are one field whose value is the
 *    count; the name is free only after the last release;
 *  - kill -9 of a dlock holder wakes a Redisson waiter at once;
 *  - holds longer than Redisson's watchdog timeout (a short one, and one run
 *    at Redisson's default 30 s) and than the dlock lease's TTL stay
 *    exclusive throughout;
 *  - Redisson and dlock workers incrementing one counter (GET, then SET)
 *    under one name for 20 s lose no update;
 *  - RReadWriteLock: readers of both sides hold together and writers of
 *    both sides are refused beside them; Redisson's waiting writer gets the
 *    name from dlock's release of the last reader, a waiting dlock reader
 *    from Redisson's write unlock; a dlock reader leaving first leaves
 *    Redisson's read hold in place;
 *  - RPermitExpirableSemaphore: after trySetPermits(2), a dlock permit and
 *    Redisson's are the two; a third is refused on both sides (another size
 *    with DLOCK_EKIND); dlockctl holder lists both; each side's release
 *    wakes the other side's waiter; a Redisson permit left to lapse comes
 *    back to a dlock waiter at its expiry, with no release to wake it.
 * Latencies (unlock -> grant) are printed, never asserted against a time:
 * the tests assert order and state. */
#define H_TEST_TIMEOUT_S 150
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* The [formats] section of every agent here: names under orders: and
 * product_ are Redisson's RLocks, under reports: its RReadWriteLocks, under
 * encoders: its RPermitExpirableSemaphores. */
#define FORMATS                                                                                    \
    "[formats]\n"                                                                                  \
    "redisson = orders:* product_*\n"                                                              \
    "redisson_rwlock = reports:*\n"                                                                \
    "redisson_semaphore = encoders:*"
/* The agent's default fallback retry (docs: retry_fallback_ms), printed
 * beside the wake-up latencies. */
#define FALLBACK_NOTE "the agent's fallback retry: 100-150 ms"
/* A TTL far longer than any wait of a test for something "at once"
 * (H_EVENT_MS times the scale is at most 25 s): a Redisson waiter behind a
 * dlock lease of this TTL that was not told of the release would sleep until
 * then. */
#define LONG_TTL_MS 60000

static double ms_between(int64_t from_ns, int64_t to_ns)
{
    return (double)(to_ns - from_ns) / 1e6;
}

/* ---- node 0 on a loopback TCP port too ---- */

static int redis_port;

/* Node 0 on its Unix socket and a loopback TCP port: Redisson speaks TCP. */
static void start_redis(void)
{
    redis_port = h_redis_start_tcp();
}

/* start_redis(), then agent 0 with agent_ini (may be NULL) and the Redisson
 * formats. */
static void start(const char *agent_ini)
{
    start_redis();
    h_agent_config(0, agent_ini, FORMATS);
    h_agent_start_n(0);
}

/* ---- the Java driver ---- */

struct jdrv {
    pid_t pid;
    int to;   /* its standard input */
    int from; /* its standard output */
    char log[H_PATH];
    char field[192]; /* its hash field: <redisson id>:<thread id> */
    char buf[8192];  /* read, not yet a whole line */
    size_t n;
    char line[8192]; /* the last answer */
};

#define MAX_DRIVERS 3
static struct jdrv drivers[MAX_DRIVERS];

/* The driver's jar and the java that runs it, when the build made it. */
#ifdef DLOCK_REDISSON_JAR
#define HAVE_DRIVER 1
#else
#define HAVE_DRIVER        0
#define DLOCK_REDISSON_JAR ""
#define DLOCK_JAVA_PATH    ""
#endif

/* Skips the test unless the driver was built (java and mvn at configure time). */
static void need_driver(void)
{
    if (!HAVE_DRIVER)
        h_skip("no java or mvn when the build was configured: the Redisson driver was not built");
    cr_assert_eq(access(DLOCK_REDISSON_JAR, R_OK), 0, "%s: %s (the build makes it)",
                 DLOCK_REDISSON_JAR, strerror(errno));
}

static void jdrv_log_tail(struct jdrv *d)
{
    fprintf(stderr, "---- Redisson driver log (%s) ----\n", d->log);
    h_log_tail(d->log, 40);
}

/* The driver's next answer line, within timeout_ms (scaled); fails the test
 * when it exits or says nothing in time. */
static const char *jdrv_read(struct jdrv *d, int timeout_ms)
{
    int64_t end = h_deadline(timeout_ms);
    for (;;) {
        char *nl = memchr(d->buf, '\n', d->n);
        if (nl) {
            size_t len = (size_t)(nl - d->buf);
            memcpy(d->line, d->buf, len);
            d->line[len] = '\0';
            memmove(d->buf, nl + 1, d->n - len - 1);
            d->n -= len + 1;
            return d->line;
        }
        cr_assert_lt(d->n, sizeof d->buf - 1, "an answer line of the driver is too long");
        int64_t left = end - h_now_ms();
        if (left <= 0) {
            jdrv_log_tail(d);
            cr_assert_fail("the Redisson driver (pid %d) did not answer within %d ms", (int)d->pid,
                           h_scaled_ms(timeout_ms));
        }
        struct pollfd p = {.fd = d->from, .events = POLLIN};
        int r = poll(&p, 1, (int)(left < 100 ? left : 100));
        if (r < 0 && errno == EINTR)
            continue;
        cr_assert_geq(r, 0, "poll: %s", strerror(errno));
        if (r == 0)
            continue;
        ssize_t got = read(d->from, d->buf + d->n, sizeof d->buf - 1 - d->n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            jdrv_log_tail(d);
            cr_assert_fail("the Redisson driver (pid %d) closed its output", (int)d->pid);
        }
        d->n += (size_t)got;
    }
}

static void jdrv_send(struct jdrv *d, const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(cmd, sizeof cmd - 1, fmt, ap);
    va_end(ap);
    cr_assert(len > 0 && (size_t)len < sizeof cmd - 1, "driver command too long");
    cmd[len++] = '\n';
    for (int off = 0; off < len;) {
        ssize_t w = write(d->to, cmd + off, (size_t)(len - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            jdrv_log_tail(d);
            cr_assert_fail("writing to the Redisson driver: %s", strerror(errno));
        }
        off += (int)w;
    }
}

/* Sends a command and returns its answer (in d->line). */
static const char *jdrv_ask(struct jdrv *d, const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    jdrv_send(d, "%s", cmd);
    const char *a = jdrv_read(d, H_EVENT_MS);
    cr_assert(strncmp(a, "error", 5) != 0, "driver: '%s' -> %s", cmd, a);
    return a;
}

/* The T of an answer "word T ...", which must start with word. */
static int64_t answer_t(const char *answer, const char *word)
{
    size_t w = strlen(word);
    cr_assert(strncmp(answer, word, w) == 0 && answer[w] == ' ', "expected '%s T', got '%s'", word,
              answer);
    char *end;
    long long t = strtoll(answer + w + 1, &end, 10);
    cr_assert(end != answer + w + 1 && t > 0, "no time in '%s'", answer);
    return (int64_t)t;
}

/* The number N of an answer "ok N". */
static long long answer_n(const char *answer)
{
    cr_assert(strncmp(answer, "ok ", 3) == 0, "expected 'ok N', got '%s'", answer);
    return strtoll(answer + 3, NULL, 10);
}

/* Redisson's tryLock(0) of name: 1 taken, 0 busy (no exception). */
static int jdrv_trylock(struct jdrv *d, const char *name)
{
    const char *a = jdrv_ask(d, "trylock %s 0", name);
    if (strncmp(a, "busy ", 5) == 0)
        return 0;
    answer_t(a, "ok");
    return 1;
}

/* Starts driver i, a Java process connected to node 0's TCP port, and waits
 * for its "ready". watchdog_ms: Redisson's lockWatchdogTimeout, 0 for its
 * default. It dies with the test (the teardown kills it, as does the death
 * of this process). */
static struct jdrv *jdrv_start(int i, long watchdog_ms)
{
    need_driver();
    cr_assert(i >= 0 && i < MAX_DRIVERS);
    struct jdrv *d = &drivers[i];
    memset(d, 0, sizeof *d);
    snprintf(d->log, sizeof d->log, "%s/redisson%d.log", H.dir, i);
    char addr[64], wd[32];
    snprintf(addr, sizeof addr, "redis://127.0.0.1:%d", redis_port);
    snprintf(wd, sizeof wd, "%ld", watchdog_ms);
    char *argv[] = {DLOCK_JAVA_PATH,
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                    "-XX:-UsePerfData",
                    "-Xmx256m",
                    "-jar",
                    DLOCK_REDISSON_JAR,
                    addr,
                    watchdog_ms > 0 ? "--watchdog" : NULL,
                    wd,
                    NULL};
    /* No descriptor of the test's (a dlock client's socket above all) lives
     * on in the driver. */
    d->pid = h_spawn_piped(argv, d->log, &d->to, &d->from);
    /* The JVM starts and Redisson connects: longer than a redis-server. */
    const char *a = jdrv_read(d, 30000);
    answer_t(a, "ready");
    long long wd_now = 0;
    cr_assert_eq(sscanf(a, "ready %*s %lld", &wd_now), 1, "%s", a);
    cr_assert_eq(wd_now, watchdog_ms > 0 ? watchdog_ms : 30000, "driver watchdog: %s", a);
    a = jdrv_ask(d, "id");
    cr_assert(strncmp(a, "ok ", 3) == 0 && strlen(a + 3) < sizeof d->field, "%s", a);
    snprintf(d->field, sizeof d->field, "%s", a + 3);
    return d;
}

/* Asks the driver to quit and waits for its exit status 0. */
static void jdrv_quit(struct jdrv *d)
{
    cr_assert_str_eq(jdrv_ask(d, "quit"), "ok");
    int st = h_wait_child(d->pid, H_EVENT_MS);
    if (st != 0)
        jdrv_log_tail(d);
    cr_assert_eq(st, 0, "the Redisson driver exited with status %d", st);
    close(d->to);
    close(d->from);
    d->pid = 0;
}

/* ---- Redis, as Redisson sees it ---- */

/* Redisson's release channel of name (no braces in the names used here). */
static const char *rchannel(const char *name)
{
    return h_keepf("redisson_lock__channel:{%s}", name);
}

static long long subscribers(const char *name)
{
    return h_node_subscribers(0, rchannel(name));
}

/* HGET name field: the hold count, 0 when the field (or the key) is not there. */
static long long hold_count(const char *name, const char *field)
{
    redisReply *r = h_redis_cmd("HGET %s %s", name, field);
    long long n = 0;
    if (r->type == REDIS_REPLY_STRING)
        n = strtoll(r->str, NULL, 10);
    else
        cr_assert_eq(r->type, REDIS_REPLY_NIL, "HGET %s %s: reply type %d", name, field, r->type);
    freeReplyObject(r);
    return n;
}

/* The one field of the hash name into field (cap bytes) and its value;
 * fails unless name is a hash with exactly one field. */
static long long only_field(const char *name, char *field, size_t cap)
{
    redisReply *r = h_redis_cmd("HGETALL %s", name);
    cr_assert(r->type == REDIS_REPLY_ARRAY, "HGETALL %s: type %d", name, r->type);
    size_t n = r->elements;
    cr_assert_eq(n, 2, "HGETALL %s: %zu elements, want one field and its value", name, n);
    redisReply *f = r->element[0], *v = r->element[1];
    cr_assert_eq(f->type, REDIS_REPLY_STRING);
    cr_assert_eq(v->type, REDIS_REPLY_STRING);
    snprintf(field, cap, "%s", f->str);
    long long count = strtoll(v->str, NULL, 10);
    freeReplyObject(r);
    return count;
}

/* A dlock holder's field: its 32 hex digit token, then ":0". */
static int is_dlock_field(const char *f)
{
    if (strlen(f) != 34 || strcmp(f + 32, ":0") != 0)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!((f[i] >= '0' && f[i] <= '9') || (f[i] >= 'a' && f[i] <= 'f')))
            return 0;
    return 1;
}

/* Checks that name is held by dlock alone, as Redisson stores it: one dlock
 * field with the count holds, a TTL, and no dlock-prefixed key. */
static void expect_dlock_hash(const char *name, long long holds)
{
    char field[128];
    long long n = only_field(name, field, sizeof field);
    cr_assert(is_dlock_field(field), "%s: field '%s' is not a dlock holder's", name, field);
    cr_assert_eq(n, holds, "%s: count %lld, want %lld", name, n, holds);
    long long pttl = h_redis_pttl(name);
    cr_assert_gt(pttl, 0, "%s: PTTL %lld", name, pttl);
    cr_assert_eq(h_redis_exists(h_key(name)), 0, "a dlock-format key %s beside it", h_key(name));
}

/* ---- a dlock waiter in a thread, timing its grant ---- */

struct waiter {
    dlock_client *c;
    const char *name;
    dlock_acquire_options o;
    dlock_lock_spec spec;
    pthread_t th;
    atomic_int done;
    int rc;
    dlock_lease *lease;
    int64_t granted_ns;
    int64_t granted_epoch_ms; /* the same moment, in ms since 1970 */
};

static void *waiter_run(void *arg)
{
    struct waiter *w = arg;
    w->rc = dlock_lease_acquire_spec(w->c, w->name, &w->o, &w->spec, &w->lease);
    w->granted_ns = h_mono_ns();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    w->granted_epoch_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    atomic_store(&w->done, 1);
    return NULL;
}

/* Starts a blocking acquire of name (wait up to a minute) of the kind spec
 * asks for (NULL: exclusive) and a lease of ttl_ms, on a client of its own,
 * in a thread. */
static void waiter_start_spec(struct waiter *w, const char *name, const dlock_lock_spec *spec,
                              uint32_t ttl_ms)
{
    memset(w, 0, sizeof *w);
    int rc = dlock_client_open(&w->c, H.agent[0].sock);
    cr_assert_eq(rc, 0, "dlock_client_open: %s", dlock_strerror(rc));
    w->name = name;
    w->o = (dlock_acquire_options){.ttl_ms = ttl_ms, .wait_ms = 60000};
    if (spec)
        w->spec = *spec;
    cr_assert_eq(pthread_create(&w->th, NULL, waiter_run, w), 0);
}

/* The same for an exclusive lease of 30 s. */
static void waiter_start(struct waiter *w, const char *name)
{
    waiter_start_spec(w, name, NULL, 30000);
}

/* Waits (H_EVENT_MS) for the waiter's grant; returns its time. */
static int64_t waiter_granted(struct waiter *w)
{
    int64_t end = h_deadline(H_EVENT_MS);
    while (!atomic_load(&w->done)) {
        cr_assert_leq(h_now_ms(), end, "the dlock waiter of %s got nothing within %d ms", w->name,
                      h_scaled_ms(H_EVENT_MS));
        h_sleep_ms(1);
    }
    pthread_join(w->th, NULL);
    cr_assert_eq(w->rc, 0, "dlock waiter of %s: %s (%d)", w->name, dlock_strerror(w->rc), w->rc);
    return w->granted_ns;
}

static void waiter_close(struct waiter *w)
{
    if (w->lease)
        cr_assert_eq(dlock_lease_release(w->lease), 0);
    w->lease = NULL;
    dlock_client_close(w->c);
    w->c = NULL;
}

/* ---- the driver by itself ---- */

ITEST(redisson, driver_holders_exclude_each_other_and_share_the_clock)
{
    need_driver();
    start_redis();
    struct jdrv *a = jdrv_start(0, 0), *b = jdrv_start(1, 0);
    cr_assert_str_neq(a->field, b->field);
    /* nanoTime is CLOCK_MONOTONIC: the driver's ping lies between ours. */
    int64_t before = h_mono_ns();
    int64_t t = answer_t(jdrv_ask(a, "ping"), "ok");
    int64_t after = h_mono_ns();
    cr_assert(before <= t && t <= after, "driver clock %lld not within [%lld, %lld]", (long long)t,
              (long long)before, (long long)after);

    cr_assert_eq(jdrv_trylock(a, "solo"), 1);
    cr_assert_eq(hold_count("solo", a->field), 1);
    cr_assert_eq(jdrv_trylock(b, "solo"), 0);
    cr_assert_eq(answer_n(jdrv_ask(b, "held solo")), 1);
    cr_assert_eq(answer_n(jdrv_ask(b, "mine solo")), 0);
    jdrv_send(b, "lock solo");
    H_WAIT_UNTIL(H_EVENT_MS, subscribers("solo") >= 1);
    int64_t unlocked = answer_t(jdrv_ask(a, "unlock solo"), "ok");
    int64_t granted = answer_t(jdrv_read(b, H_EVENT_MS), "ok");
    cr_assert_gt(granted, unlocked);
    cr_assert_eq(hold_count("solo", b->field), 1);
    cr_assert_eq(hold_count("solo", a->field), 0);
    fprintf(stderr, "redisson: Redisson unlock -> Redisson waiter's grant: %.2f ms\n",
            ms_between(unlocked, granted));
    answer_t(jdrv_ask(b, "unlock solo"), "ok");
    H_KEY_GONE("solo");
    jdrv_quit(a);
    jdrv_quit(b);
}

/* ---- Redisson holds, dlock waits ---- */

/* Redisson holds name; a dlock try-once is busy; a dlock waiter gets it
 * once Redisson unlocks. Returns the latency, unlock start -> grant, in ms. */
static double redisson_then_dlock(struct jdrv *j, const char *name)
{
    cr_assert_eq(jdrv_trylock(j, name), 1);
    cr_assert_eq(hold_count(name, j->field), 1);
    long long pttl = h_redis_pttl(name);
    cr_assert(pttl > 0 && pttl <= 30000, "%s: PTTL %lld", name, pttl);

    struct h_cl *cl = h_client();
    dlock_lease *l = NULL;
    int rc = h_acquire(cl, name, 5000, 0, &l);
    cr_assert_eq(rc, DLOCK_EBUSY, "try-once of a Redisson-held name: %s (%d)", dlock_strerror(rc),
                 rc);
    int st = h_ctl(10000, "-s", H.agent[0].sock, "run", "-w", "0", name, "--", "true", NULL);
    cr_assert_eq(st, 75, "dlockctl run -w 0 of a Redisson-held name: exit %d: %s", st,
                 h_read_file(h_path("ctl.out")));
    /* Redisson's hash is untouched. */
    cr_assert_eq(hold_count(name, j->field), 1);
    cr_assert_eq(h_redis_exists(h_key(name)), 0);

    struct waiter w;
    cr_assert_eq(subscribers(name), 0);
    waiter_start(&w, name);
    /* The waiter's agent listens on Redisson's channel once it found the
     * name taken. */
    H_WAIT_UNTIL(H_EVENT_MS, subscribers(name) >= 1);
    cr_assert_eq(atomic_load(&w.done), 0, "the dlock waiter got %s while Redisson held it", name);
    int64_t unlocked = answer_t(jdrv_ask(j, "unlock %s", name), "ok");
    int64_t granted = waiter_granted(&w);
    cr_assert_gt(granted, unlocked, "granted before Redisson's unlock started");
    expect_dlock_hash(name, 1);
    cr_assert_eq(jdrv_trylock(j, name), 0, "Redisson took %s from the dlock waiter", name);
    waiter_close(&w);
    H_KEY_GONE(name);
    return ms_between(unlocked, granted);
}

ITEST(redisson, redisson_holds_dlock_is_busy_then_its_waiter_wakes_at_the_unlock)
{
    need_driver();
    start(NULL);
    struct jdrv *j = jdrv_start(0, 0);

    /* dlockctl holder names Redisson's holder, with its count. */
    cr_assert_eq(jdrv_trylock(j, "orders:7"), 1);
    cr_assert_eq(jdrv_trylock(j, "orders:7"), 1);
    unlink(h_path("ctl.out"));
    int st = h_ctl(10000, "-S", h_path("status0.sock"), "holder", "orders:7", NULL);
    const char *out = h_read_file(h_path("ctl.out"));
    fprintf(stderr, "redisson: dlockctl holder of a Redisson lock held twice: %s", out);
    cr_assert_eq(st, 0, "dlockctl holder: exit %d: %s", st, out);
    cr_assert(out && strstr(out, j->field), "dlockctl holder does not name field %s: %s", j->field,
              out);
    cr_assert(strstr(out, "2 holds"), "dlockctl holder shows no count 2: %s", out);
    answer_t(jdrv_ask(j, "unlock orders:7"), "ok");
    answer_t(jdrv_ask(j, "unlock orders:7"), "ok");
    H_KEY_GONE("orders:7");

    double ms = redisson_then_dlock(j, "orders:1");
    fprintf(stderr, "redisson: Redisson unlock -> dlock waiter's grant: %.2f ms (%s)\n", ms,
            FALLBACK_NOTE);
    ms = redisson_then_dlock(j, "product_1");
    fprintf(stderr, "redisson: again, on a name of the second pattern: %.2f ms\n", ms);

    /* A name no pattern matches keeps dlock's own key. */
    struct h_cl *cl = h_client();
    dlock_lease *l = h_must_acquire(cl, "plain", 30000);
    cr_assert(h_is_token(h_redis_get(h_key("plain"))));
    cr_assert_eq(h_redis_exists("plain"), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
    jdrv_quit(j);
}

ITEST(redisson, redisson_unlock_wakes_a_dlock_waiter_without_its_fallback_retry)
{
    /* A fallback retry of a minute: a grant within H_EVENT_MS came from
     * Redisson's unlock notice. */
    need_driver();
    start("retry_fallback_ms = 60000");
    struct jdrv *j = jdrv_start(0, 0);
    double ms = redisson_then_dlock(j, "orders:2");
    fprintf(stderr,
            "redisson: Redisson unlock -> dlock waiter's grant, fallback retry 60 s: "
            "%.2f ms\n",
            ms);
}

/* ---- dlock holds, Redisson waits ---- */

ITEST(redisson, dlock_holds_redisson_trylock_is_false_then_its_waiter_wakes_at_the_release)
{
    need_driver();
    start("max_ttl_ms = 120000");
    struct jdrv *j = jdrv_start(0, 0);
    struct h_cl *cl = h_client();
    const char *name = "product_9";
    dlock_lease *l = h_must_acquire(cl, name, LONG_TTL_MS);
    expect_dlock_hash(name, 1);
    long long pttl = h_redis_pttl(name);
    cr_assert(pttl > 30000 && pttl <= LONG_TTL_MS, "PTTL %lld", pttl);
    cr_assert_eq(jdrv_trylock(j, name), 0, "Redisson took a dlock-held name");
    cr_assert_eq(answer_n(jdrv_ask(j, "held %s", name)), 1);
    cr_assert_eq(answer_n(jdrv_ask(j, "holds %s", name)), 0);
    expect_dlock_hash(name, 1);

    jdrv_send(j, "lock %s", name);
    H_WAIT_UNTIL(H_EVENT_MS, subscribers(name) >= 1);
    int64_t released = h_mono_ns();
    cr_assert_eq(dlock_lease_release(l), 0);
    /* The lease's key would have lived a minute: a grant in H_EVENT_MS came
     * from the release's notice. */
    int64_t granted = answer_t(jdrv_read(j, H_EVENT_MS), "ok");
    cr_assert_gt(granted, released);
    fprintf(stderr, "redisson: dlock release -> Redisson waiter's grant: %.2f ms\n",
            ms_between(released, granted));
    cr_assert_eq(hold_count(name, j->field), 1);
    dlock_lease *l2 = NULL;
    cr_assert_eq(h_acquire(cl, name, 5000, 0, &l2), DLOCK_EBUSY);
    answer_t(jdrv_ask(j, "unlock %s", name), "ok");
    H_KEY_GONE(name);
    jdrv_quit(j);
}

/* ---- re-entrant holds ---- */

ITEST(redisson, reentrant_holds_on_either_side_are_the_hash_count)
{
    need_driver();
    start("max_ttl_ms = 120000");
    struct jdrv *j = jdrv_start(0, 0);
    struct h_cl *cl = h_client();
    const char *name = "orders:reentrant";

    /* Redisson twice: one field, count 2; free only after two unlocks. */
    cr_assert_eq(jdrv_trylock(j, name), 1);
    cr_assert_eq(jdrv_trylock(j, name), 1);
    cr_assert_eq(answer_n(jdrv_ask(j, "holds %s", name)), 2);
    cr_assert_eq(hold_count(name, j->field), 2);
    answer_t(jdrv_ask(j, "unlock %s", name), "ok");
    cr_assert_eq(hold_count(name, j->field), 1);
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(cl, name, 5000, 0, &l), DLOCK_EBUSY,
                 "dlock took a name Redisson still holds once");
    struct waiter w;
    waiter_start(&w, name);
    H_WAIT_UNTIL(H_EVENT_MS, subscribers(name) >= 1);
    cr_assert_eq(atomic_load(&w.done), 0);
    int64_t unlocked = answer_t(jdrv_ask(j, "unlock %s", name), "ok");
    int64_t granted = waiter_granted(&w);
    cr_assert_gt(granted, unlocked);
    fprintf(stderr, "redisson: Redisson's last unlock of two -> dlock grant: %.2f ms\n",
            ms_between(unlocked, granted));
    expect_dlock_hash(name, 1);
    waiter_close(&w);
    H_KEY_GONE(name);

    /* dlock twice, re-entrant: one field, count 2; Redisson busy until
     * both releases. */
    dlock_acquire_options o = {.ttl_ms = LONG_TTL_MS, .flags = DLOCK_ACQUIRE_REENTRANT};
    dlock_lease *l1 = NULL, *l2 = NULL;
    cr_assert_eq(dlock_lease_acquire(cl->c, name, &o, &l1), 0);
    cr_assert_eq(dlock_lease_acquire(cl->c, name, &o, &l2), 0);
    cr_assert_eq(l1, l2);
    cr_assert_eq(dlock_lease_holds(l1), 2);
    /* The second hold is granted by the agent at once; the count on Redis
     * follows with a renewal sent right after. */
    char field[128];
    H_WAIT_UNTIL(H_EVENT_MS, only_field(name, field, sizeof field) == 2);
    expect_dlock_hash(name, 2);
    cr_assert_eq(jdrv_trylock(j, name), 0);
    cr_assert_eq(dlock_lease_release(l1), 0);
    H_WAIT_UNTIL(H_EVENT_MS, only_field(name, field, sizeof field) == 1);
    expect_dlock_hash(name, 1);
    cr_assert_eq(jdrv_trylock(j, name), 0, "Redisson took a name dlock still holds once");
    jdrv_send(j, "lock %s", name);
    H_WAIT_UNTIL(H_EVENT_MS, subscribers(name) >= 1);
    int64_t released = h_mono_ns();
    cr_assert_eq(dlock_lease_release(l2), 0);
    granted = answer_t(jdrv_read(j, H_EVENT_MS), "ok");
    cr_assert_gt(granted, released);
    fprintf(stderr, "redisson: dlock's last release of two -> Redisson grant: %.2f ms\n",
            ms_between(released, granted));
    cr_assert_eq(only_field(name, field, sizeof field), 1);
    cr_assert_str_eq(field, j->field);
    answer_t(jdrv_ask(j, "unlock %s", name), "ok");
    H_KEY_GONE(name);
    jdrv_quit(j);
}

/* ---- a dlock holder killed ---- */

ITEST(redisson, kill_9_of_a_dlock_holder_wakes_a_redisson_waiter)
{
    need_driver();
    start("max_ttl_ms = 120000");
    struct jdrv *j = jdrv_start(0, 0);
    const char *name = "orders:killed";
    struct h_holder h;
    h_holder_start(&h, name, LONG_TTL_MS);
    expect_dlock_hash(name, 1);
    cr_assert_eq(jdrv_trylock(j, name), 0);
    jdrv_send(j, "lock %s", name);
    H_WAIT_UNTIL(H_EVENT_MS, subscribers(name) >= 1);
    int64_t killed = h_mono_ns();
    h_holder_kill(&h, SIGKILL);
    /* The lease's TTL is a minute: the agent released it when its client
     * died, and told Redisson. */
    int64_t granted = answer_t(jdrv_read(j, H_EVENT_MS), "ok");
    cr_assert_gt(granted, killed);
    fprintf(stderr, "redisson: kill -9 of the dlock holder -> Redisson waiter's grant: %.2f ms\n",
            ms_between(killed, granted));
    cr_assert_eq(hold_count(name, j->field), 1);
    answer_t(jdrv_ask(j, "unlock %s", name), "ok");
    H_KEY_GONE(name);
    jdrv_quit(j);
}

/* ---- holds past the watchdog timeout and the TTL ---- */

/* Redisson (watchdog timeout watchdog_ms, 0 for its default of 30 s) holds
 * one name, dlock (a lease of a TTL far shorter) another, both for hold_ms;
 * throughout, each side's try-once of the other's name is refused, and both
 * keys stay, their expiry renewed. Then each side takes the other's name. */
static void hold_past_watchdogs(long watchdog_ms, int hold_ms)
{
    need_driver();
    start(NULL);
    struct jdrv *j = jdrv_start(0, watchdog_ms);
    long wd = watchdog_ms > 0 ? watchdog_ms : 30000;
    const char *rname = "orders:long-redisson", *dname = "orders:long-dlock";
    const uint32_t dttl = 2000;
    struct h_cl *cl = h_client();

    cr_assert_eq(jdrv_trylock(j, rname), 1);
    dlock_lease *dl = h_must_acquire(cl, dname, dttl);
    int64_t t0 = h_now_ms(), end = t0 + hold_ms;
    int polls = 0;
    long long rpttl_min = wd, dpttl_min = dttl;
    while (h_now_ms() < end) {
        dlock_lease *l = NULL;
        int rc = h_acquire(cl, rname, 5000, 0, &l);
        cr_assert_eq(rc, DLOCK_EBUSY,
                     "%lld ms into Redisson's hold (watchdog %ld ms), a dlock try-once: %s (%d)",
                     (long long)(h_now_ms() - t0), wd, dlock_strerror(rc), rc);
        cr_assert_eq(jdrv_trylock(j, dname), 0,
                     "%lld ms into dlock's hold (TTL %u ms), Redisson's tryLock(0) was true",
                     (long long)(h_now_ms() - t0), (unsigned)dttl);
        long long rp = h_redis_pttl(rname), dp = h_redis_pttl(dname);
        cr_assert(rp > 0 && rp <= wd, "%s: PTTL %lld (watchdog %ld)", rname, rp, wd);
        cr_assert(dp > 0 && dp <= dttl, "%s: PTTL %lld (TTL %u)", dname, dp, (unsigned)dttl);
        cr_assert_eq(hold_count(rname, j->field), 1);
        expect_dlock_hash(dname, 1);
        rpttl_min = rp < rpttl_min ? rp : rpttl_min;
        dpttl_min = dp < dpttl_min ? dp : dpttl_min;
        polls++;
        h_pump_all(100);
    }
    cr_assert(dlock_lease_valid(dl), "the dlock lease was lost during the hold");
    cr_assert_eq(h_events(cl, dl, DLOCK_STATE_LOST), 0);
    cr_assert_eq(answer_n(jdrv_ask(j, "mine %s", rname)), 1);
    fprintf(stderr,
            "redisson: held %d ms each, Redisson watchdog %ld ms, dlock TTL %u ms: %d polls, "
            "lowest PTTL seen %lld ms (Redisson) and %lld ms (dlock)\n",
            hold_ms, wd, (unsigned)dttl, polls, rpttl_min, dpttl_min);

    /* Each side takes the other's name. */
    struct waiter w;
    waiter_start(&w, rname);
    H_WAIT_UNTIL(H_EVENT_MS, subscribers(rname) >= 1);
    int64_t unlocked = answer_t(jdrv_ask(j, "unlock %s", rname), "ok");
    cr_assert_gt(waiter_granted(&w), unlocked);
    expect_dlock_hash(rname, 1);
    jdrv_send(j, "lock %s", dname);
    H_WAIT_UNTIL(H_EVENT_MS, subscribers(dname) >= 1);
    int64_t released = h_mono_ns();
    cr_assert_eq(dlock_lease_release(dl), 0);
    cr_assert_gt(answer_t(jdrv_read(j, H_EVENT_MS), "ok"), released);
    cr_assert_eq(hold_count(dname, j->field), 1);
    waiter_close(&w);
    answer_t(jdrv_ask(j, "unlock %s", dname), "ok");
    H_KEY_GONE(rname);
    H_KEY_GONE(dname);
    jdrv_quit(j);
}

ITEST(redisson, holds_past_a_short_redisson_watchdog_and_the_dlock_ttl)
{
    hold_past_watchdogs(3000, 7500); /* 2.5 times the watchdog timeout */
}

ITEST(redisson, holds_past_redissons_default_30s_watchdog)
{
    hold_past_watchdogs(0, 35000);
}

/* ---- a shared counter ---- */

#define COUNT_MS      20000
#define DLOCK_WORKERS 3
#define JAVA_WORKERS  2
/* The dlock workers ask again at once after each increment: the agent
 * always has a local waiter. Redisson's waiters are in no waiting-hosts
 * record; they get their turns because the agent, having seen others hear
 * its release messages, lets a moment pass before its next acquire
 * (docs/redisson.md, "Turns across sides"). */

struct dworker {
    const char *name, *key;
    int64_t end_ns;
    pthread_t th;
    long count;
    char err[256];
};

static void *dworker_run(void *arg)
{
    struct dworker *w = arg;
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, H.agent[0].sock);
    if (rc != 0) {
        snprintf(w->err, sizeof w->err, "dlock_client_open: %s", dlock_strerror(rc));
        return NULL;
    }
    struct timeval tv = {10, 0};
    redisContext *r = redisConnectUnixWithTimeout(H.redis_sock, tv);
    if (!r || r->err) {
        snprintf(w->err, sizeof w->err, "redis: %s", r ? r->errstr : "no context");
        if (r)
            redisFree(r);
        dlock_client_close(c);
        return NULL;
    }
    redisSetTimeout(r, tv);
    while (h_mono_ns() < w->end_ns) {
        dlock_acquire_options o = {.ttl_ms = 10000, .wait_ms = 30000};
        dlock_lease *l = NULL;
        rc = dlock_lease_acquire(c, w->name, &o, &l);
        if (rc != 0) {
            snprintf(w->err, sizeof w->err, "acquire: %s (%d)", dlock_strerror(rc), rc);
            break;
        }
        redisReply *g = redisCommand(r, "GET %s", w->key);
        long long v = g && g->type == REDIS_REPLY_STRING ? strtoll(g->str, NULL, 10) : 0;
        int ok = g && (g->type == REDIS_REPLY_STRING || g->type == REDIS_REPLY_NIL);
        if (g)
            freeReplyObject(g);
        redisReply *s = ok ? redisCommand(r, "SET %s %lld", w->key, v + 1) : NULL;
        ok = s && s->type == REDIS_REPLY_STATUS;
        if (s)
            freeReplyObject(s);
        if (!ok) {
            snprintf(w->err, sizeof w->err, "GET/SET of %s failed", w->key);
            (void)dlock_lease_release(l);
            break;
        }
        rc = dlock_lease_release(l);
        if (rc != 0) {
            snprintf(w->err, sizeof w->err, "release: %s (%d): the lease ended before it",
                     dlock_strerror(rc), rc);
            break;
        }
        w->count++;
    }
    redisFree(r);
    dlock_client_close(c);
    return NULL;
}

ITEST(redisson, redisson_and_dlock_workers_lose_no_update_of_a_counter)
{
    need_driver();
    start(NULL);
    const char *name = "orders:counter", *key = "counter-value";
    struct jdrv *j[JAVA_WORKERS];
    for (int i = 0; i < JAVA_WORKERS; i++)
        j[i] = jdrv_start(i, 0);

    struct dworker dw[DLOCK_WORKERS];
    int64_t end_ns = h_mono_ns() + (int64_t)COUNT_MS * 1000000;
    for (int i = 0; i < JAVA_WORKERS; i++)
        jdrv_send(j[i], "countfor %s %s %d", name, key, COUNT_MS);
    for (int i = 0; i < DLOCK_WORKERS; i++) {
        dw[i] = (struct dworker){.name = name, .key = key, .end_ns = end_ns};
        cr_assert_eq(pthread_create(&dw[i].th, NULL, dworker_run, &dw[i]), 0);
    }
    long long java_total = 0, dlock_total = 0, java_n[JAVA_WORKERS];
    for (int i = 0; i < JAVA_WORKERS; i++) {
        java_n[i] = answer_n(jdrv_read(j[i], COUNT_MS + H_EVENT_MS));
        java_total += java_n[i];
    }
    /* The workers stop by themselves by end_ns (plus one acquire's wait). */
    for (int i = 0; i < DLOCK_WORKERS; i++) {
        pthread_join(dw[i].th, NULL);
        cr_assert_str_empty(dw[i].err, "dlock worker %d: %s", i, dw[i].err);
        dlock_total += dw[i].count;
    }
    char *v = h_redis_get(key);
    cr_assert_not_null(v, "no counter");
    long long counter = strtoll(v, NULL, 10);
    fprintf(stderr, "redisson: counter %lld after %d s: Redisson %lld (", counter, COUNT_MS / 1000,
            java_total);
    for (int i = 0; i < JAVA_WORKERS; i++)
        fprintf(stderr, "%s%lld", i ? " + " : "", java_n[i]);
    fprintf(stderr, "), dlock %lld (", dlock_total);
    for (int i = 0; i < DLOCK_WORKERS; i++)
        fprintf(stderr, "%s%ld", i ? " + " : "", dw[i].count);
    fprintf(stderr, "), lost %lld\n", java_total + dlock_total - counter);
    cr_assert_eq(counter, java_total + dlock_total, "lost updates: counter %lld, increments %lld",
                 counter, java_total + dlock_total);
    cr_assert_gt(java_total, 0, "the Redisson workers never got the lock");
    cr_assert_gt(dlock_total, 0, "the dlock workers never got the lock");
    H_KEY_GONE(name);
    for (int i = 0; i < JAVA_WORKERS; i++)
        jdrv_quit(j[i]);
}

/* ---- RReadWriteLock and RPermitExpirableSemaphore ---- */

/* Agents of these cases: leases of a minute, and a fallback retry of a
 * minute, so that no dlock waiter is served by its fallback retry. */
#define KINDS_INI "max_ttl_ms = 120000\nretry_fallback_ms = 60000"
/* The lease of a Redisson permit left to lapse: long enough for the checks
 * made while it is live, shorter than H_EVENT_MS (how long the dlock waiter
 * is given to get it). */
#define SHORT_LEASE_MS 5000

static const dlock_lock_spec SHARED = {.kind = DLOCK_KIND_SHARED};

static dlock_lock_spec semaphore(uint32_t permits)
{
    return (dlock_lock_spec){.kind = DLOCK_KIND_SEMAPHORE, .permits = permits};
}

/* RReadWriteLock's channel of name. */
static const char *rwchannel(const char *name)
{
    return h_keepf("redisson_rwlock:{%s}", name);
}

/* RPermitExpirableSemaphore's channel of name. */
static const char *semchannel(const char *name)
{
    return h_keepf("redisson_sc:{%s}", name);
}

/* The sorted set of a semaphore's permits: "{NAME}:timeout". */
static const char *sem_zset(const char *name)
{
    static char b[4][256];
    static int k;
    char *s = b[k++ % 4];
    snprintf(s, sizeof b[0], "{%s}:timeout", name);
    return s;
}

/* The timeout key of hold i of a reader's field: "{NAME}:FIELD:rwlock_timeout:I". */
static const char *rw_timeout_key(const char *name, const char *field, int i)
{
    static char b[4][512];
    static int k;
    char *s = b[k++ % 4];
    snprintf(s, sizeof b[0], "{%s}:%s:rwlock_timeout:%d", name, field, i);
    return s;
}

static const char *str_of(const char *s)
{
    return s ? s : "(none)";
}

/* Milliseconds since 1970: the clock of Redisson's permit expiries, and of
 * Redis (both on this host). */
static long long epoch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How many fields of the hash name are dlock readers' (TOKEN:0); the first
 * into field (cap bytes). */
static int dlock_readers(const char *name, char *field, size_t cap)
{
    redisReply *r = h_redis_cmd("HKEYS %s", name);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "HKEYS %s: reply type %d", name, r->type);
    int n = 0;
    for (size_t i = 0; i < r->elements; i++)
        if (is_dlock_field(r->element[i]->str) && n++ == 0)
            snprintf(field, cap, "%s", r->element[i]->str);
    freeReplyObject(r);
    return n;
}

/* A try-once acquire of name of the kind spec asks for, with a lease of
 * LONG_TTL_MS: its result, the lease in *out. */
static int try_kind(struct h_cl *cl, const char *name, const dlock_lock_spec *spec,
                    dlock_lease **out)
{
    dlock_acquire_options o = {.ttl_ms = LONG_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    *out = NULL;
    return dlock_lease_acquire_spec(cl->c, name, &o, spec, out);
}

/* Whether the driver has not answered (nothing waits on its pipe). */
static int jdrv_quiet(struct jdrv *d)
{
    struct pollfd p = {.fd = d->from, .events = POLLIN};
    return d->n == 0 && poll(&p, 1, 0) == 0;
}

/* Whether the answer is "busy T". */
static int answer_busy(const char *answer)
{
    return strncmp(answer, "busy ", 5) == 0;
}

/* The T of an answer "ok T ID"; its permit id (32 hex digits) into id. */
static int64_t answer_id(const char *answer, char id[33])
{
    int64_t t = answer_t(answer, "ok");
    const char *sp = strchr(answer + 3, ' ');
    cr_assert(sp && strlen(sp + 1) == 32 && strspn(sp + 1, "0123456789abcdef") == 32,
              "no permit id of 32 hex digits in '%s'", answer);
    memcpy(id, sp + 1, 33);
    return t;
}

/* The expiry (ms since 1970) of the permit of hex id in name's set, -1
 * when it is not there. */
static long long permit_expiry(const char *name, const char *id)
{
    char raw[16];
    for (int i = 0; i < 16; i++) {
        unsigned byte;
        cr_assert_eq(sscanf(id + 2 * i, "%2x", &byte), 1, "permit id %s", id);
        raw[i] = (char)byte;
    }
    redisReply *r = h_redis_cmd("ZSCORE %s %b", sem_zset(name), raw, sizeof raw);
    cr_assert(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL, "ZSCORE: reply type %d",
              r->type);
    long long e = r->type == REDIS_REPLY_NIL ? -1 : atoll(r->str);
    freeReplyObject(r);
    return e;
}

/* The ids (hex) of the permits in name's set, up to max; how many there are. */
static int permit_ids(const char *name, char (*ids)[33], int max)
{
    redisReply *r = h_redis_cmd("ZRANGE %s 0 -1", sem_zset(name));
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "ZRANGE: reply type %d", r->type);
    int n = (int)r->elements;
    for (int i = 0; i < n && i < max; i++) {
        cr_assert_eq(r->element[i]->len, 16, "a permit id of %zu bytes", r->element[i]->len);
        for (int c = 0; c < 16; c++)
            snprintf(ids[i] + 2 * c, 3, "%02x", (unsigned char)r->element[i]->str[c]);
    }
    freeReplyObject(r);
    return n;
}

/* dlockctl holder name: its exit status; the output in *out. */
static int ctl_holder(const char *name, const char **out)
{
    unlink(h_path("ctl.out"));
    int st = h_ctl(10000, "-S", h_path("status0.sock"), "holder", name, NULL);
    const char *s = h_read_file(h_path("ctl.out"));
    *out = s ? s : "";
    return st;
}

/* Readers of both sides hold together, and writers of both sides are
 * refused beside them; Redisson's writer waits and gets the name from
 * dlock's release of the last reader; Redisson's writer holds, a dlock
 * reader waits and gets it from the write unlock; dlock's reader leaving
 * first leaves Redisson's read hold in place. */
ITEST(redisson, rwlock_readers_of_both_sides_share_and_writers_wait_for_them)
{
    need_driver();
    start(KINDS_INI);
    struct jdrv *jr = jdrv_start(0, 0), *jw = jdrv_start(1, 0);
    const char *name = "reports:1";
    struct h_cl *cl = h_client(), *other = h_client();
    char wfield[256], dfield[128];
    snprintf(wfield, sizeof wfield, "%s:write", jw->field);

    /* Redisson's reader alone: dlock's exclusive try-once finds it on Redis. */
    answer_t(jdrv_ask(jr, "tryrlock %s 0", name), "ok");
    cr_assert_str_eq(str_of(h_redis_hget(name, "mode")), "read");
    cr_assert_eq(hold_count(name, jr->field), 1);
    long long p = h_redis_pttl(rw_timeout_key(name, jr->field, 1));
    cr_assert(p > 0 && p <= 30000, "Redisson reader's timeout key: PTTL %lld", p);
    dlock_lease *x = NULL;
    int rc = try_kind(other, name, NULL, &x);
    cr_assert_eq(rc, DLOCK_EBUSY, "exclusive try-once beside Redisson's reader: %s (%d)",
                 dlock_strerror(rc), rc);
    int st = h_ctl(10000, "-s", H.agent[0].sock, "run", "-w", "0", name, "--", "true", NULL);
    cr_assert_eq(st, 75, "dlockctl run -w 0 beside Redisson's reader: exit %d: %s", st,
                 h_read_file(h_path("ctl.out")));

    /* dlock's reader joins it: a field and a timeout key of its own. */
    dlock_lease *rl = NULL;
    rc = try_kind(cl, name, &SHARED, &rl);
    cr_assert_eq(rc, 0, "a dlock reader beside Redisson's: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_eq(dlock_lease_kind(rl), DLOCK_KIND_SHARED);
    cr_assert_eq(dlock_readers(name, dfield, sizeof dfield), 1);
    cr_assert_eq(hold_count(name, dfield), 1);
    cr_assert_eq(hold_count(name, jr->field), 1);
    cr_assert_eq(h_redis_int("HLEN %s", name), 3, "want mode and two readers' fields");
    p = h_redis_pttl(rw_timeout_key(name, dfield, 1));
    cr_assert(p > 0 && p <= LONG_TTL_MS, "dlock reader's timeout key: PTTL %lld", p);
    cr_assert_eq(h_redis_exists(h_key(name)), 0, "a dlock-format key %s beside it", h_key(name));

    /* Both read: writers of both sides are refused. */
    cr_assert(answer_busy(jdrv_ask(jw, "trywlock %s 0", name)),
              "Redisson's writer beside two readers: %s", jw->line);
    rc = try_kind(other, name, NULL, &x);
    cr_assert_eq(rc, DLOCK_EBUSY, "exclusive try-once beside two readers: %s (%d)",
                 dlock_strerror(rc), rc);
    const char *out;
    st = ctl_holder(name, &out);
    fprintf(stderr, "redisson: dlockctl holder of a read lock of both sides: %s", out);
    cr_assert_eq(st, 0, "dlockctl holder: exit %d: %s", st, out);
    cr_assert(strstr(out, "read lock by 2 holders") && strstr(out, jr->field),
              "dlockctl holder: %s", out);

    /* Redisson's writer waits; Redisson's reader leaves first, dlock's
     * last, and its release wakes the writer (the hash would have lasted
     * a minute, as dlock's reader's timeout key). */
    cr_assert_eq(h_node_subscribers(0, rwchannel(name)), 0);
    jdrv_send(jw, "wlock %s", name);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, rwchannel(name)) >= 1);
    answer_t(jdrv_ask(jr, "runlock %s", name), "ok");
    cr_assert_eq(hold_count(name, jr->field), 0);
    cr_assert_str_eq(str_of(h_redis_hget(name, "mode")), "read",
                     "the hash went with dlock's reader left");
    cr_assert_eq(hold_count(name, dfield), 1);
    p = h_redis_pttl(name);
    cr_assert(p > 0, "the hash: PTTL %lld after Redisson's read unlock", p);
    cr_assert(jdrv_quiet(jw), "Redisson's writer got the name beside dlock's reader: %s",
              jdrv_read(jw, H_EVENT_MS));
    int64_t released = h_mono_ns();
    cr_assert_eq(dlock_lease_release(rl), 0);
    int64_t granted = answer_t(jdrv_read(jw, H_EVENT_MS), "ok");
    cr_assert_gt(granted, released, "Redisson's writer was granted before dlock's release");
    fprintf(stderr,
            "redisson: RReadWriteLock: dlock's release of the last reader -> Redisson writer's "
            "grant: %.2f ms\n",
            ms_between(released, granted));
    cr_assert_str_eq(str_of(h_redis_hget(name, "mode")), "write");
    cr_assert_eq(hold_count(name, wfield), 1);
    cr_assert_eq(h_redis_int("HLEN %s", name), 2, "want mode and the writer's field");
    cr_assert_eq(h_redis_count_keys("{reports:1}:*"), 0, "a reader's timeout key is left");

    /* Redisson's writer holds: readers of both sides are refused; a dlock
     * reader waits, and the write unlock wakes it. */
    cr_assert(answer_busy(jdrv_ask(jr, "tryrlock %s 0", name)),
              "Redisson's reader beside Redisson's writer: %s", jr->line);
    rc = try_kind(other, name, &SHARED, &x);
    cr_assert_eq(rc, DLOCK_EBUSY, "shared try-once beside Redisson's writer: %s (%d)",
                 dlock_strerror(rc), rc);
    /* Redisson's writer stopped listening once granted. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, rwchannel(name)) == 0);
    struct waiter w;
    waiter_start_spec(&w, name, &SHARED, LONG_TTL_MS);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, rwchannel(name)) >= 1);
    cr_assert_eq(atomic_load(&w.done), 0, "the dlock reader got %s beside Redisson's writer", name);
    int64_t unlocked = answer_t(jdrv_ask(jw, "wunlock %s", name), "ok");
    granted = waiter_granted(&w);
    cr_assert_gt(granted, unlocked, "the dlock reader was granted before the write unlock");
    fprintf(stderr,
            "redisson: RReadWriteLock: Redisson's write unlock -> dlock reader's grant: %.2f ms "
            "(fallback retry 60 s)\n",
            ms_between(unlocked, granted));
    cr_assert_str_eq(str_of(h_redis_hget(name, "mode")), "read");
    cr_assert_eq(hold_count(name, wfield), 0);
    cr_assert_eq(dlock_readers(name, dfield, sizeof dfield), 1);
    cr_assert_eq(h_redis_int("HLEN %s", name), 2, "want mode and dlock's reader's field");

    /* Redisson's reader joins dlock's; dlock's leaves first: Redisson's
     * read hold stays, and its unlock ends the hash. */
    answer_t(jdrv_ask(jr, "tryrlock %s 0", name), "ok");
    cr_assert_eq(h_redis_int("HLEN %s", name), 3, "want mode and two readers' fields");
    cr_assert(answer_busy(jdrv_ask(jw, "trywlock %s 0", name)),
              "Redisson's writer beside two readers: %s", jw->line);
    cr_assert_eq(dlock_lease_release_sync(w.lease), 0);
    w.lease = NULL;
    waiter_close(&w);
    H_WAIT_UNTIL(H_EVENT_MS, dlock_readers(name, dfield, sizeof dfield) == 0);
    cr_assert_str_eq(str_of(h_redis_hget(name, "mode")), "read",
                     "dlock's release took Redisson's read hold");
    cr_assert_eq(hold_count(name, jr->field), 1);
    p = h_redis_pttl(name);
    cr_assert(p > 0, "the hash: PTTL %lld after dlock's release", p);
    cr_assert(answer_busy(jdrv_ask(jw, "trywlock %s 0", name)),
              "Redisson's writer beside Redisson's reader: %s", jw->line);
    answer_t(jdrv_ask(jr, "runlock %s", name), "ok");
    H_KEY_GONE(name);
    cr_assert_eq(h_redis_count_keys("{reports:1}:*"), 0, "a reader's timeout key is left");
    jdrv_quit(jr);
    jdrv_quit(jw);
}

/* trySetPermits(2): a dlock permit and Redisson's are the two; a third is
 * refused on both sides, another size with DLOCK_EKIND; dlockctl holder
 * lists both permits; a dlock waiter gets the permit Redisson releases,
 * and Redisson's blocking acquire the one dlock releases. */
ITEST(redisson, semaphore_permits_of_both_sides_and_each_release_wakes_the_other)
{
    need_driver();
    start(KINDS_INI);
    struct jdrv *j = jdrv_start(0, 0);
    const char *name = "encoders:1";
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lock_spec two = semaphore(2), three = semaphore(3);
    char jid[33], jid2[33];

    cr_assert_eq(answer_n(jdrv_ask(j, "semset %s 2", name)), 1);
    cr_assert_str_eq(str_of(h_redis_get(name)), "2");
    dlock_lease *p1 = NULL;
    int rc = try_kind(a, name, &two, &p1);
    cr_assert_eq(rc, 0, "dlock's permit: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_eq(dlock_lease_kind(p1), DLOCK_KIND_SEMAPHORE);
    cr_assert_str_eq(str_of(h_redis_get(name)), "1", "the free count after dlock's permit");
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset(name)), 1);
    cr_assert_eq(answer_n(jdrv_ask(j, "semavail %s", name)), 1);

    answer_id(jdrv_ask(j, "semtry %s 0 30000", name), jid);
    long long e = permit_expiry(name, jid);
    cr_assert(e > epoch_ms() && e <= epoch_ms() + 30000,
              "Redisson's permit expiry %lld is not its lease from now (%lld)", e, epoch_ms());
    cr_assert_str_eq(str_of(h_redis_get(name)), "0", "the free count after both permits");
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset(name)), 2);

    /* No third permit on either side; another size is another semaphore. */
    dlock_lease *x = NULL;
    rc = try_kind(b, name, &two, &x);
    cr_assert_eq(rc, DLOCK_EBUSY, "a third permit of 2: %s (%d)", dlock_strerror(rc), rc);
    int st =
        h_ctl(10000, "-s", H.agent[0].sock, "run", "-w", "0", "-p", "2", name, "--", "true", NULL);
    cr_assert_eq(st, 75, "dlockctl run -w 0 -p 2 with both permits taken: exit %d: %s", st,
                 h_read_file(h_path("ctl.out")));
    rc = try_kind(b, name, &three, &x);
    cr_assert_eq(rc, DLOCK_EKIND, "a permit of 3 on a semaphore of 2: %s (%d)", dlock_strerror(rc),
                 rc);
    cr_assert(answer_busy(jdrv_ask(j, "semtry %s 0 30000", name)),
              "Redisson took a third permit of 2: %s", j->line);
    cr_assert_eq(answer_n(jdrv_ask(j, "semavail %s", name)), 0);
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset(name)), 2);

    /* dlockctl holder lists both permits by id. */
    char ids[4][33];
    cr_assert_eq(permit_ids(name, ids, 4), 2);
    const char *out;
    st = ctl_holder(name, &out);
    fprintf(stderr, "redisson: dlockctl holder of a semaphore of both sides: %s", out);
    cr_assert_eq(st, 0, "dlockctl holder: exit %d: %s", st, out);
    cr_assert(strstr(out, "semaphore by 2 holders"), "dlockctl holder: %s", out);
    cr_assert(strstr(out, jid), "dlockctl holder does not list Redisson's permit %s: %s", jid, out);
    for (int i = 0; i < 2; i++)
        cr_assert(strstr(out, ids[i]), "dlockctl holder does not list permit %s: %s", ids[i], out);
    unlink(h_path("ctl.out"));
    st = h_ctl(10000, "-S", h_path("status0.sock"), "holder", "--json", name, NULL);
    out = h_read_file(h_path("ctl.out"));
    out = out ? out : "";
    fprintf(stderr, "redisson: dlockctl holder --json of it: %s", out);
    cr_assert_eq(st, 0, "dlockctl holder --json: exit %d: %s", st, out);
    cr_assert(h_json_valid(out), "%s", out);
    cr_assert(strstr(out, "\"kind\":\"redisson:semaphore\",\"permits\":2,"), "%s", out);
    for (int i = 0; i < 2; i++) {
        char f[192];
        snprintf(f, sizeof f, "{\"field\":\"%s\",", ids[i]);
        cr_assert(strstr(out, f), "dlockctl holder --json does not list permit %s: %s", ids[i],
                  out);
    }

    /* A dlock waiter gets the permit Redisson releases (dlock's permit and
     * the waiter's lease last a minute: the release's message woke it). */
    cr_assert_eq(h_node_subscribers(0, semchannel(name)), 0);
    struct waiter w;
    waiter_start_spec(&w, name, &two, LONG_TTL_MS);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, semchannel(name)) >= 1);
    cr_assert_eq(atomic_load(&w.done), 0, "a third permit of 2 was granted");
    int64_t released = answer_t(jdrv_ask(j, "semrelease %s %s", name, jid), "ok");
    int64_t granted = waiter_granted(&w);
    cr_assert_gt(granted, released, "the dlock waiter was granted before Redisson's release");
    fprintf(stderr,
            "redisson: semaphore: Redisson's release -> dlock waiter's grant: %.2f ms "
            "(fallback retry 60 s)\n",
            ms_between(released, granted));
    cr_assert_eq(permit_expiry(name, jid), -1, "Redisson's released permit is still there");
    cr_assert_str_eq(str_of(h_redis_get(name)), "0");
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset(name)), 2);

    /* Redisson's blocking acquire gets the permit dlock releases (both of
     * dlock's permits last a minute: Redisson's waiter would retry then). */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, semchannel(name)) == 0);
    jdrv_send(j, "semacquire %s 30000", name);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, semchannel(name)) >= 1);
    cr_assert(jdrv_quiet(j), "Redisson took a third permit of 2: %s", jdrv_read(j, H_EVENT_MS));
    released = h_mono_ns();
    cr_assert_eq(dlock_lease_release(p1), 0);
    granted = answer_id(jdrv_read(j, H_EVENT_MS), jid2);
    cr_assert_gt(granted, released, "Redisson's waiter was granted before dlock's release");
    fprintf(stderr, "redisson: semaphore: dlock's release -> Redisson waiter's grant: %.2f ms\n",
            ms_between(released, granted));
    cr_assert_gt(permit_expiry(name, jid2), 0, "Redisson's new permit is not in the set");
    cr_assert_str_eq(str_of(h_redis_get(name)), "0");
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset(name)), 2);

    /* Both give back: 2 free, no permit lost or made. */
    answer_t(jdrv_ask(j, "semrelease %s %s", name, jid2), "ok");
    cr_assert_eq(dlock_lease_release_sync(w.lease), 0);
    w.lease = NULL;
    waiter_close(&w);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_int("ZCARD %s", sem_zset(name)) == 0);
    cr_assert_str_eq(str_of(h_redis_get(name)), "2", "permits lost or made");
    cr_assert_eq(answer_n(jdrv_ask(j, "semavail %s", name)), 2);
    jdrv_quit(j);
}

/* A Redisson permit of a short lease, never released, comes back to a
 * dlock waiter once it lapses: the agent's acquire learns when the first
 * permit lapses and retries then (its fallback retry is a minute off, and
 * nobody publishes a release). Redisson's late release then finds no
 * permit. */
ITEST(redisson, a_lapsed_redisson_permit_comes_back_to_a_dlock_waiter)
{
    need_driver();
    start(KINDS_INI);
    struct jdrv *j = jdrv_start(0, 0);
    const char *name = "encoders:2";
    struct h_cl *a = h_client();
    dlock_lock_spec one = semaphore(1);
    char jid[33];

    cr_assert_eq(answer_n(jdrv_ask(j, "semset %s 1", name)), 1);
    answer_id(jdrv_ask(j, "semtry %s 0 %d", name, SHORT_LEASE_MS), jid);
    long long expiry = permit_expiry(name, jid);
    cr_assert_gt(expiry, 0, "Redisson's permit is not in the set");
    dlock_lease *x = NULL;
    int rc = try_kind(a, name, &one, &x);
    cr_assert_eq(rc, DLOCK_EBUSY, "the permit of 1 beside Redisson's: %s (%d)", dlock_strerror(rc),
                 rc);

    struct waiter w;
    waiter_start_spec(&w, name, &one, LONG_TTL_MS);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, semchannel(name)) >= 1);
    int64_t granted = waiter_granted(&w);
    (void)granted;
    cr_assert_geq(w.granted_epoch_ms, expiry,
                  "granted at %lld, before Redisson's permit lapsed "
                  "at %lld",
                  (long long)w.granted_epoch_ms, expiry);
    fprintf(stderr,
            "redisson: semaphore: Redisson's permit (lease %d ms) lapsed unreleased -> dlock "
            "waiter's grant %lld ms after its expiry (fallback retry 60 s)\n",
            SHORT_LEASE_MS, (long long)w.granted_epoch_ms - expiry);
    cr_assert_eq(permit_expiry(name, jid), -1, "Redisson's lapsed permit is still there");
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset(name)), 1);
    cr_assert_str_eq(str_of(h_redis_get(name)), "0");
    cr_assert_eq(answer_n(jdrv_ask(j, "semavail %s", name)), 0);

    /* Redisson's release of its lapsed permit: no such permit. */
    jdrv_send(j, "semrelease %s %s", name, jid);
    const char *ans = jdrv_read(j, H_EVENT_MS);
    fprintf(stderr, "redisson: semaphore: Redisson's release of its lapsed permit: %s\n", ans);
    cr_assert(strncmp(ans, "error ", 6) == 0 && strstr(ans, "IllegalArgumentException"),
              "Redisson's release of a lapsed permit: %s", ans);
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset(name)), 1);
    cr_assert_str_eq(str_of(h_redis_get(name)), "0", "Redisson's late release made a permit");

    cr_assert_eq(dlock_lease_release_sync(w.lease), 0);
    w.lease = NULL;
    waiter_close(&w);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_int("ZCARD %s", sem_zset(name)) == 0);
    cr_assert_str_eq(str_of(h_redis_get(name)), "1", "permits lost or made");
    jdrv_quit(j);
}
