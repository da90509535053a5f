/* SPDX-License-Identifier: BSD-3-Clause */
/* harness.c -- process, Redis, agent and socket helpers for the integration
 * tests (see harness.h). */
#include "harness.h"

#include <criterion/hooks.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef DLOCKD_PATH
#error "DLOCKD_PATH must be defined (path of the dlockd binary)"
#endif
#ifndef DLOCKCTL_PATH
#error "DLOCKCTL_PATH must be defined (path of the dlockctl binary)"
#endif

struct h_env H;

/* ---- time ---- */

int64_t h_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void h_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* DLOCK_TEST_SCALE, or 1 when it is unset or not a number from 1 to
 * H_SCALE_MAX (said once on stderr). */
static double read_scale(void)
{
    const char *v = getenv("DLOCK_TEST_SCALE");
    if (!v || !*v)
        return 1;
    char *end;
    errno = 0;
    double s = strtod(v, &end);
    if (errno || *end || !(s >= 1 && s <= H_SCALE_MAX)) {
        fprintf(stderr, "DLOCK_TEST_SCALE=%s: not a number from 1 to %g; using 1\n", v,
                H_SCALE_MAX);
        return 1;
    }
    return s;
}

double h_scale(void)
{
    static double scale; /* 0 until read */
    if (scale == 0)
        scale = read_scale();
    return scale;
}

int h_scaled_ms(int ms)
{
    double v = ms * h_scale();
    return v < INT32_MAX ? (int)v : INT32_MAX;
}

int64_t h_deadline(int ms)
{
    return h_now_ms() + h_scaled_ms(ms);
}

/* Criterion's timeout of every test in the executable scales too. The runner
 * calls this before it starts a test, and reads a test's timeout when it
 * starts it. */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    double scale = h_scale();
    if (scale == 1)
        return;
    for (struct criterion_ordered_set_node *s = set->suites->first; s; s = s->next) {
        struct criterion_suite_set *suite = (void *)(s + 1);
        if (suite->suite.data)
            suite->suite.data->timeout *= scale;
        for (struct criterion_ordered_set_node *t = suite->tests ? suite->tests->first : NULL; t;
             t = t->next) {
            struct criterion_test *test = (void *)(t + 1);
            if (test->data)
                test->data->timeout *= scale;
        }
    }
}

const char *h_path(const char *name)
{
    static char bufs[8][H_PATH + 64];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", H.dir, name);
    return b;
}

const char *h_read_file(const char *path)
{
    static char buf[65536];
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* ---- child processes ---- */

static void register_child(pid_t pid)
{
    for (int i = 0; i < H_MAX_CHILDREN; i++)
        if (H.children[i] == 0) {
            H.children[i] = pid;
            return;
        }
}

static void forget_child(pid_t pid)
{
    for (int i = 0; i < H_MAX_CHILDREN; i++)
        if (H.children[i] == pid)
            H.children[i] = 0;
}

/* In a freshly forked child: die with the test process, default signal
 * dispositions, nothing blocked. */
static void child_prepare(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    for (int sig = 1; sig < 32; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Closes every descriptor from `from` up. */
static void close_from(int from)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        for (int fd = from; fd < 4096; fd++)
            close(fd);
        return;
    }
    int dfd = dirfd(d);
    int fds[4096], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && fd >= from && fd != dfd)
            fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Forks and execs argv with stdout/stderr appended to `out`, and env (NULL,
 * or a NULL-terminated list of "NAME=VALUE" and "NAME") applied to its
 * environment. */
static pid_t spawn(char *const argv[], const char *out, int own_group, char *const *env)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        child_prepare(parent);
        if (own_group)
            setpgid(0, 0);
        int in = open("/dev/null", O_RDONLY);
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || fd < 0)
            _exit(126);
        dup2(in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        close_from(3);
        /* Not a service's process, even when the tests run in one: an
         * agent's SIGTERM is a stop, not a question to that service's
         * manager. */
        unsetenv("INVOCATION_ID");
        for (char *const *e = env; e && *e; e++)
            if (strchr(*e, '=') ? putenv(*e) != 0 : unsetenv(*e) != 0) {
                dprintf(2, "environment %s: %s\n", *e, strerror(errno));
                _exit(126);
            }
        execvp(argv[0], argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

pid_t h_fork(void)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        child_prepare(parent);
        close_from(3);
        return 0;
    }
    register_child(pid);
    return pid;
}

pid_t h_spawn(char *const argv[], const char *out)
{
    pid_t pid = spawn(argv, out ? out : h_path("child.out"), 1, NULL);
    register_child(pid);
    return pid;
}

pid_t h_spawn_piped(char *const argv[], const char *log, int *to, int *from)
{
    int in[2], out[2];
    cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        child_prepare(parent);
        setpgid(0, 0);
        int e = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (e < 0 || dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        close_from(3);
        execv(argv[0], argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    register_child(pid);
    close(in[0]);
    close(out[1]);
    *to = in[1];
    *from = out[0];
    return pid;
}

static int status_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

int h_wait_child(pid_t pid, int timeout_ms)
{
    int64_t end = h_deadline(timeout_ms);
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            forget_child(pid);
            return status_code(st);
        }
        if (r < 0) {
            forget_child(pid);
            return -2;
        }
        if (h_now_ms() > end)
            return -1;
        h_sleep_ms(2);
    }
}

/* SIGKILLs pid (and its process group when it leads one) and reaps it. */
static void kill_reap(pid_t pid)
{
    if (pid <= 0)
        return;
    if (getpgid(pid) == pid)
        kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- Redis ---- */

int h_is_token(const char *s)
{
    /* A lock key's value: the token, then the holder record after a space. */
    if (!s || strlen(s) < 32 || (s[32] != '\0' && s[32] != ' '))
        return 0;
    for (int i = 0; i < 32; i++)
        if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
            return 0;
    return 1;
}

static struct h_node *node_at(int i)
{
    cr_assert(i >= 0 && i < H_MAX_NODES, "no Redis node slot %d", i);
    return &H.node[i];
}

static redisContext *node_connect(const struct h_node *n, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectUnixWithTimeout(n->sock, tv);
    if (!c)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    int cmd_ms = h_scaled_ms(2000);
    struct timeval cmd_tv = {cmd_ms / 1000, (cmd_ms % 1000) * 1000};
    redisSetTimeout(c, cmd_tv);
    return c;
}

static void node_log_tail(const struct h_node *n)
{
    const char *log = h_read_file(n->log);
    if (log)
        fprintf(stderr, "---- %s ----\n%s\n", n->log, log);
}

static void node_drop_conn(struct h_node *n)
{
    if (n->conn) {
        redisFree(n->conn);
        n->conn = NULL;
    }
}

/* Forks a redis-server for node i, without waiting for it: on its unix
 * socket only, no persistence, in DIR, then the test's arguments (split at
 * blanks), which override those. */
static void node_spawn(int i)
{
    struct h_node *n = node_at(i);
    cr_assert_eq(n->proc.pid, 0, "redis-server %d already running", i);
    unlink(n->sock);
    enum { MORE = 32 };
    const char *extra[MORE + 1];
    char more[sizeof n->args];
    snprintf(more, sizeof more, "%s", n->args);
    size_t k = 0;
    for (char *save = NULL, *t = strtok_r(more, " \t", &save); t;
         t = strtok_r(NULL, " \t", &save)) {
        cr_assert_lt(k, MORE, "too many arguments for redis-server %d", i);
        extra[k++] = t;
    }
    extra[k] = NULL;
    struct redisproc_opts o = {.unix_socket = n->sock, .dir = H.dir, .log = n->log, .extra = extra};
    if (redisproc_spawn(&n->proc, &o) != 0)
        cr_assert_fail("redis-server %d: %s", i, n->proc.err);
    if (i >= H.nnodes)
        H.nnodes = i + 1;
}

/* Waits until node i answers PING. */
static void node_wait_ready(int i)
{
    struct h_node *n = node_at(i);
    if (redisproc_wait_ready(&n->proc, h_scaled_ms(H_START_MS)) != 0) {
        node_log_tail(n);
        char why[sizeof n->proc.err];
        snprintf(why, sizeof why, "%s", n->proc.err);
        redisproc_kill(&n->proc);
        cr_assert_fail("redis-server %d: %s", i, why);
    }
}

void h_node_set_args(int i, const char *args)
{
    struct h_node *n = node_at(i);
    cr_assert_lt(strlen(args), sizeof n->args, "redis-server arguments too long");
    snprintf(n->args, sizeof n->args, "%s", args);
}

int h_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

int h_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
              getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    close(fd);
    return ntohs(sa.sin_port);
}

int h_server_port(void)
{
    /* Not the same port twice in a process: the servers may not listen yet. */
    static unsigned seed;
    static int given[64], ngiven;
    if (!seed)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)h_now_ms();
    int port = 0;
    for (int tries = 0; tries < 2000 && !port; tries++) {
        int p = 23000 + (int)(rand_r(&seed) % 9000);
        bool seen = false;
        for (int i = 0; i < ngiven && i < 64 && !seen; i++)
            seen = given[i] == p;
        if (!seen && h_port_free(p))
            port = p;
    }
    cr_assert_neq(port, 0, "no free TCP port for a server");
    given[ngiven++ % 64] = port;
    return port;
}

int h_redis_start_tcp(void)
{
    int port = h_server_port();
    char args[64];
    snprintf(args, sizeof args, "--port %d --bind 127.0.0.1", port);
    h_node_set_args(0, args);
    h_redis_start();
    return port;
}

void h_node_start(int i)
{
    node_spawn(i);
    node_wait_ready(i);
}

void h_nodes_start(int n)
{
    cr_assert(n >= 1 && n <= H_MAX_NODES, "cannot start %d Redis nodes", n);
    int started[H_MAX_NODES] = {0};
    for (int i = 0; i < n; i++)
        if (!H.node[i].proc.pid) {
            node_spawn(i);
            started[i] = 1;
        }
    for (int i = 0; i < n; i++)
        if (started[i])
            node_wait_ready(i);
    H.nnodes = n;
}

void h_redis_spare(const char *name)
{
    struct redisproc *r = NULL;
    for (int i = 0; i < H_MAX_SPARES && !r; i++)
        if (!H.spare[i].pid)
            r = &H.spare[i];
    cr_assert_not_null(r, "more than %d spare redis-servers", H_MAX_SPARES);
    char log[H_PATH + 8];
    snprintf(log, sizeof log, "%s.log", h_path(name));
    struct redisproc_opts o = {.unix_socket = h_path(name), .dir = H.dir, .log = log};
    cr_assert_eq(redisproc_start(r, &o, h_scaled_ms(H_START_MS)), 0, "spare redis-server: %s",
                 r->err);
}

void h_node_resume(int i)
{
    redisproc_resume(&node_at(i)->proc);
}

void h_node_stop(int i)
{
    struct h_node *n = node_at(i);
    node_drop_conn(n);
    redisproc_stop(&n->proc, h_scaled_ms(H_STOP_MS));
}

void h_node_kill(int i)
{
    struct h_node *n = node_at(i);
    node_drop_conn(n);
    redisproc_kill(&n->proc);
}

void h_node_pause(int i)
{
    struct h_node *n = node_at(i);
    cr_assert_eq(redisproc_pause(&n->proc), 0, "redis-server %d: %s", i, n->proc.err);
    /* Our own connection would block on the next command until resumed. */
    node_drop_conn(n);
}

void h_node_restart(int i)
{
    h_node_kill(i);
    h_node_start(i);
}

int h_node_running(int i)
{
    const struct h_node *n = node_at(i);
    return n->proc.pid > 0 && !n->proc.paused;
}

static redisReply *node_vcmd(int i, const char *fmt, va_list ap)
{
    struct h_node *n = node_at(i);
    cr_assert(n->proc.pid > 0 && !n->proc.paused, "redis-server %d is not running", i);
    if (n->conn && n->conn->err)
        node_drop_conn(n);
    if (!n->conn)
        n->conn = node_connect(n, h_scaled_ms(1000));
    cr_assert_not_null(n->conn, "cannot connect to the test's redis-server %d", i);
    redisReply *r = redisvCommand(n->conn, fmt, ap);
    cr_assert_not_null(r, "redis command '%s' on node %d failed: %s", fmt, i, n->conn->errstr);
    return r;
}

redisReply *h_node_cmd(int i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = node_vcmd(i, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *h_redis_cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = node_vcmd(0, fmt, ap);
    va_end(ap);
    return r;
}

long long h_redis_int(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = node_vcmd(0, fmt, ap);
    va_end(ap);
    cr_assert(r && r->type == REDIS_REPLY_INTEGER, "%s: reply type %d", fmt, r ? r->type : -1);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

const char *h_redis_hget(const char *key, const char *field)
{
    redisReply *r = h_redis_cmd("HGET %s %s", key, field);
    cr_assert(r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL),
              "HGET %s %s: reply type %d", key, field, r ? r->type : -1);
    const char *v = r->type == REDIS_REPLY_STRING ? h_keep(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

void h_redis_start(void)
{
    h_node_start(0);
}

void h_redis_stop(void)
{
    h_node_stop(0);
}

void h_redis_kill(void)
{
    h_node_kill(0);
}

void h_redis_pause(void)
{
    h_node_pause(0);
}

void h_redis_resume(void)
{
    h_node_resume(0);
}

void h_redis_restart(void)
{
    h_node_restart(0);
}

char *h_keepf(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof buf, "h_keepf: %d characters", n);
    return h_keep(buf);
}

char *h_keep(const char *s)
{
    if (H.nstrs == H.capstrs) {
        size_t cap = H.capstrs ? 2 * H.capstrs : 64;
        char **p = realloc(H.strs, cap * sizeof *p);
        cr_assert_not_null(p);
        H.strs = p;
        H.capstrs = cap;
    }
    char *copy = strdup(s);
    cr_assert_not_null(copy);
    H.strs[H.nstrs++] = copy;
    return copy;
}

static void free_strings(void)
{
    for (size_t i = 0; i < H.nstrs; i++)
        free(H.strs[i]);
    free(H.strs);
    H.strs = NULL;
    H.nstrs = H.capstrs = 0;
}

char *h_node_get(int i, const char *key)
{
    redisReply *r = h_node_cmd(i, "GET %s", key);
    char *v = NULL;
    if (r->type == REDIS_REPLY_STRING)
        v = h_keep(r->str);
    else
        cr_assert_eq(r->type, REDIS_REPLY_NIL, "GET %s on node %d: unexpected reply type %d", key,
                     i, r->type);
    freeReplyObject(r);
    return v;
}

int h_node_exists(int i, const char *key)
{
    redisReply *r = h_node_cmd(i, "EXISTS %s", key);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    int v = (int)r->integer;
    freeReplyObject(r);
    return v;
}

long long h_node_pttl(int i, const char *key)
{
    redisReply *r = h_node_cmd(i, "PTTL %s", key);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

void h_node_del(int i, const char *key)
{
    freeReplyObject(h_node_cmd(i, "DEL %s", key));
}

void h_node_set_px(int i, const char *key, const char *val, long long px)
{
    redisReply *r = h_node_cmd(i, "SET %s %s PX %lld", key, val, px);
    cr_assert_eq(r->type, REDIS_REPLY_STATUS, "SET %s on node %d failed", key, i);
    freeReplyObject(r);
}

long long h_node_subscribers(int i, const char *channel)
{
    redisReply *r = h_node_cmd(i, "PUBSUB NUMSUB %s", channel);
    long long n = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        n = r->element[1]->integer;
    freeReplyObject(r);
    return n;
}

long long h_node_uptime_s(int i)
{
    redisReply *r = h_node_cmd(i, "INFO server");
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "INFO on node %d: reply type %d", i, r->type);
    const char *p = strstr(r->str, "uptime_in_seconds:");
    long long v = p ? strtoll(p + strlen("uptime_in_seconds:"), NULL, 10) : -1;
    freeReplyObject(r);
    cr_assert_geq(v, 0, "no uptime_in_seconds in INFO of node %d", i);
    return v;
}

char *h_redis_get(const char *key)
{
    return h_node_get(0, key);
}

int h_redis_exists(const char *key)
{
    return h_node_exists(0, key);
}

long long h_redis_pttl(const char *key)
{
    return h_node_pttl(0, key);
}

long long h_redis_count_keys(const char *pattern)
{
    redisReply *r = h_redis_cmd("KEYS %s", pattern);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    long long n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

void h_redis_del(const char *key)
{
    h_node_del(0, key);
}

void h_redis_set_px(const char *key, const char *val, long long px)
{
    h_node_set_px(0, key, val, px);
}

int h_redis_set_nx_px(const char *key, const char *val, long long px)
{
    redisReply *r = h_redis_cmd("SET %s %s NX PX %lld", key, val, px);
    int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok)
        cr_assert_eq(r->type, REDIS_REPLY_NIL, "SET NX: unexpected reply type %d", r->type);
    freeReplyObject(r);
    return ok;
}

void h_key_gone_at(const char *file, int line, const char *where, int node, const char *key,
                   long long (*pttl_of)(int node, const char *key))
{
    int64_t end = h_deadline(H_EVENT_MS);
    int64_t expires_after = INT64_MAX; /* the key cannot have expired before */
    for (;;) {
        int64_t before = h_now_ms();
        long long pttl = pttl_of(node, key);
        if (pttl == -2) {
            cr_assert_lt(h_now_ms(), expires_after,
                         "%s:%d: %s on %s %d was not seen deleted before its TTL ran out", file,
                         line, key, where, node);
            return;
        }
        expires_after = pttl >= 0 ? before + pttl : INT64_MAX;
        if (before > end)
            cr_assert_fail("%s:%d: %s still on %s %d after %d ms (PTTL %lld)", file, line, key,
                           where, node, h_scaled_ms(H_EVENT_MS), pttl);
        h_pump_all(2);
    }
}

void h_key_gone(const char *file, int line, int node, const char *key)
{
    h_key_gone_at(file, line, "node", node, key, h_node_pttl);
}

const char *h_key(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "dlock:%s", name);
    return b;
}

const char *h_channel(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "dlock:{dlock:%s} released", name);
    return b;
}

long long h_node_channels(int i, const char *pattern)
{
    redisReply *r = h_node_cmd(i, "PUBSUB CHANNELS %s", pattern);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "PUBSUB CHANNELS on node %d: reply type %d", i,
                 r->type);
    long long n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

/* ---- dlockd ---- */

static struct h_agent *agent_at(int i)
{
    cr_assert(i >= 0 && i < H_MAX_AGENTS, "no agent slot %d", i);
    return &H.agent[i];
}

/* Longest config file line dlockd reads (inih's INI_MAX_LINE, 200 bytes
 * including the newline and the terminating NUL). */
#define INI_LINE_MAX 199

/* Does the INI text set key (at the start of a line, then blanks or '=')? */
static int sets_key(const char *ini, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = ini; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        p += strspn(p, " \t");
        if (strncmp(p, key, n) == 0 && (p[n] == ' ' || p[n] == '\t' || p[n] == '='))
            return 1;
    }
    return 0;
}

/* Writes "key = value" to f unless the INI text `given` (may be NULL) sets
 * key already: a default under a test's own settings. */
static void ini_default(FILE *f, const char *given, const char *key, const char *value)
{
    if (given && sets_key(given, key))
        return;
    fprintf(f, "%s = %s\n", key, value);
}

void h_agent_config_addr(int i, const char *agent_ini, const char *addr, const char *redis_ini)
{
    struct h_agent *a = agent_at(i);
    FILE *f = fopen(a->conf, "w");
    cr_assert_not_null(f, "cannot write %s", a->conf);
    fprintf(f, "[agent]\n");
    ini_default(f, agent_ini, "log_level", "debug");
    /* Never the system's status socket. */
    char status[H_PATH];
    snprintf(status, sizeof status, "%s/status%d.sock", H.dir, i);
    ini_default(f, agent_ini, "status_socket", status);
    if (agent_ini)
        fprintf(f, "%s\n", agent_ini);
    /* The agent reads lines of up to INI_LINE_MAX bytes, newline included. */
    cr_assert_leq(strlen("address = \n") + strlen(addr), INI_LINE_MAX,
                  "the address line is too long for the agent's config file");
    fprintf(f, "\n[redis]\naddress = %s\n", addr);
    ini_default(f, redis_ini, "connect_timeout_ms", "500");
    ini_default(f, redis_ini, "reconnect_min_ms", "20");
    ini_default(f, redis_ini, "reconnect_max_ms", "250");
    if (redis_ini)
        fprintf(f, "%s\n", redis_ini);
    fclose(f);
}

void h_agent_config(int i, const char *agent_ini, const char *redis_ini)
{
    char addr[INI_LINE_MAX + 1] = "";
    if (H.nnodes > 1)
        for (int n = 0; n < H.nnodes; n++) {
            size_t used = strlen(addr);
            snprintf(addr + used, sizeof addr - used, "%s%s", n ? ", " : "", H.node[n].addr);
        }
    else
        snprintf(addr, sizeof addr, "%s", H.redis_addr);
    h_agent_config_addr(i, agent_ini, addr, redis_ini);
}

void h_log_tail(const char *path, int lines)
{
    const char *log = h_read_file(path);
    if (!log)
        return;
    const char *p = log + strlen(log);
    int n = 0;
    while (p > log && n <= lines)
        if (*--p == '\n')
            n++;
    fprintf(stderr, "---- tail of %s ----\n%s\n----\n", path, p);
}

void h_agent_log_tail(int i, int lines)
{
    h_log_tail(H.agent[i].log, lines);
}

int h_agent_alive(int i)
{
    struct h_agent *a = agent_at(i);
    if (!a->pid)
        return 0;
    int st;
    if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
        fprintf(stderr, "dlockd[%d] exited unexpectedly, status %d\n", i, status_code(st));
        a->pid = 0;
        return 0;
    }
    return 1;
}

int h_client_try_open(int agent, dlock_client **out)
{
    return dlock_client_open(out, agent_at(agent)->sock);
}

/* The value of `key` in agent i's config file (its last setting, in any
 * section) copied into out; 0 when the file does not set it. */
static int conf_value(int i, const char *key, char *out, size_t len)
{
    int found = 0;
    size_t klen = strlen(key);
    FILE *f = fopen(H.agent[i].conf, "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, key, klen) != 0)
            continue;
        p += klen;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != '=')
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, " \t\r\n;");
        if (n < len) {
            memcpy(out, p, n);
            out[n] = '\0';
            found = 1;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* A numeric setting of agent i's config file, or dflt. */
static long long conf_number(int i, const char *key, long long dflt)
{
    char v[64];
    return conf_value(i, key, v, sizeof v) ? strtoll(v, NULL, 10) : dflt;
}

/* Whether agent i's notice link to each node is up, as its status says
 * ("subscribed", the nodes in order), into up; the number of nodes, or -1
 * when the agent has no status socket. */
static int notice_links(int i, int up[H_MAX_NODES])
{
    const char *s = h_status_ask(i, "status-json\n");
    if (!s || !*s)
        return -1;
    int n = 0;
    for (const char *p = s; n < H_MAX_NODES && (p = strstr(p, "\"subscribed\":")); n++) {
        p += strlen("\"subscribed\":");
        p += strspn(p, " ");
        up[n] = strncmp(p, "true", 4) == 0;
    }
    return n;
}

int h_agent_notices_up(int i)
{
    int up[H_MAX_NODES], n = notice_links(i, up);
    if (n < 0)
        return 0;
    for (int k = 0; k < (H.nnodes > 1 ? H.nnodes : 1); k++)
        if (h_node_running(k) && (k >= n || !up[k]))
            return 0;
    return 1;
}

/* Nodes of 0..H.nnodes-1 that run and are not paused. */
static int nodes_up(void)
{
    int up = 0;
    for (int n = 0; n < H.nnodes; n++)
        up += h_node_running(n);
    return up;
}

/* Quorum mode: whether every node of 0..H.nnodes-1 that runs holds key. */
static int on_every_running_node(const char *key)
{
    for (int n = 0; n < H.nnodes; n++)
        if (h_node_running(n) && !h_node_exists(n, key))
            return 0;
    return 1;
}

/* A fresh agent accepts clients before its Redis links are up. So that tests
 * do not race that start-up, take and give back a probe lock until Redis
 * answers (any answer but EUNAVAIL ends the probe: a test may configure a
 * Redis the agent cannot use), then wait until its status shows the notice
 * link up (it subscribes to nothing before a waiter needs it). Neither wait
 * fails the test: the test itself will.
 *
 * In quorum mode a grant needs only a majority, so the probe goes on until a
 * grant has put the probe key on every node that runs (all the agent's links
 * are up), and the notice link is awaited to every such node. Nodes excluded
 * from quorums after their start make the probe fail with ENOQUORUM for up
 * to max_ttl_ms, so the probe may take that long. */
static void agent_settle(int i, dlock_client *c)
{
    int quorum = H.nnodes > 1;
    if (quorum ? nodes_up() <= H.nnodes / 2 : !h_node_running(0))
        return;
    long long min_ttl = conf_number(i, "min_ttl_ms", 30);
    long long max_ttl = conf_number(i, "max_ttl_ms", 45000);
    long long wait = 2000;
    if (quorum)
        wait = max_ttl + 3000 < 25000 ? max_ttl + 3000 : 25000;
    int64_t end = h_deadline((int)wait);
    uint32_t ttl = 1000;
    if (ttl < min_ttl)
        ttl = (uint32_t)min_ttl;
    if (ttl > max_ttl)
        ttl = (uint32_t)max_ttl;
    char prefix[128] = "dlock:", probe_key[256];
    conf_value(i, "prefix", prefix, sizeof prefix);
    snprintf(probe_key, sizeof probe_key, "%s__harness_probe__", prefix);
    int rc;
    for (;;) {
        dlock_lease *l = NULL;
        dlock_acquire_options o = {.ttl_ms = ttl, .wait_ms = 0};
        rc = dlock_lease_acquire(c, "__harness_probe__", &o, &l);
        int everywhere = 1;
        if (rc == 0 && quorum) {
            /* The nodes beyond the majority may answer a moment later. */
            int64_t t = h_deadline(200);
            while (!(everywhere = on_every_running_node(probe_key)) && h_now_ms() < t)
                h_sleep_ms(5);
        }
        if (rc == 0)
            dlock_lease_release(l);
        int again = rc == DLOCK_EUNAVAIL;
        if (quorum)
            again = rc == DLOCK_ENOQUORUM || rc == DLOCK_EBUSY || (rc == 0 && !everywhere);
        if (!again || h_now_ms() > end)
            break;
        h_sleep_ms(rc == DLOCK_EBUSY ? 20 : 5);
    }
    if (rc != 0 && rc != DLOCK_EBUSY)
        return;
    int up[H_MAX_NODES];
    if (notice_links(i, up) < 0)
        return; /* no status socket to ask */
    while (!h_agent_notices_up(i) && h_now_ms() < end)
        h_sleep_ms(5);
}

/* Starts agent i; with settle, waits for it to reach Redis (agent_settle()).
 * As a successor, the agent running as i is asked to leave (--successor),
 * and must exit with 0 first. */
static void agent_start(int i, int settle, int successor)
{
    struct h_agent *a = agent_at(i);
    pid_t old = a->pid;
    cr_assert(successor ? old > 0 : old == 0, "agent %d %s running", i,
              successor ? "not" : "already");
    if (access(a->conf, F_OK) != 0)
        h_agent_config(i, NULL, NULL);
    char *argv[] = {DLOCKD_PATH, "-c", a->conf,      "-s", a->sock,
                    "-v",        "-r", H.redis_addr, NULL, NULL};
    int from_config = H.nnodes > 1 || a->addr_in_config;
    if (from_config)
        argv[6] = NULL; /* quorum mode: the node list of the config file */
    if (successor)
        argv[from_config ? 6 : 8] = "--successor";
    a->pid = spawn(argv, a->log, 0, a->env);
    if (successor) {
        int st = h_wait_child(old, H_STOP_MS);
        cr_assert_eq(st, 0, "the agent that left for its successor exited with %d", st);
    }
    a->paused = 0;
    int64_t end = h_deadline(H_START_MS);
    int rc = 0;
    for (;;) {
        if (!h_agent_alive(i)) {
            h_agent_log_tail(i, 40);
            cr_assert_fail("dlockd exited during start-up (see its log above)");
        }
        dlock_client *c = NULL;
        if (access(a->sock, F_OK) == 0 && (rc = dlock_client_open(&c, a->sock)) == 0) {
            if (settle)
                agent_settle(i, c);
            dlock_client_close(c);
            return;
        }
        if (h_now_ms() > end) {
            h_agent_log_tail(i, 40);
            cr_assert_fail("dlockd did not accept a client within %d ms (last: %s)",
                           h_scaled_ms(H_START_MS), rc ? dlock_strerror(rc) : "no socket");
        }
        h_sleep_ms(5);
    }
}

void h_agent_env(int i, const char *env)
{
    struct h_agent *a = agent_at(i);
    if (!env) {
        memset(a->env, 0, sizeof a->env);
        return;
    }
    cr_assert(env[0] != '\0' && env[0] != '=', "h_agent_env(%d, \"%s\"): no name", i, env);
    int n = 0;
    while (a->env[n])
        n++;
    cr_assert_lt(n, H_MAX_ENVS, "more than %d environment entries for agent %d", H_MAX_ENVS, i);
    a->env[n] = h_keep(env);
}

void h_agent_start_n(int i)
{
    agent_start(i, 1, 0);
}

void h_agent_spawn(int i)
{
    agent_start(i, 0, 0);
}

void h_agent_successor(int i)
{
    agent_start(i, 1, 1);
}

void h_start(const char *agent_ini)
{
    h_redis_start();
    h_agent_config(0, agent_ini, NULL);
    h_agent_start_n(0);
}

void h_start_two(const char *agent_ini)
{
    h_redis_start();
    for (int i = 0; i < 2; i++)
        h_agent_config(i, agent_ini, NULL);
    for (int i = 0; i < 2; i++)
        h_agent_start_n(i);
}

/* Appends "key = value" to buf unless `given` already sets key. */
static void default_line(char *buf, size_t cap, const char *given, const char *key,
                         const char *value)
{
    if (given && strstr(given, key))
        return;
    size_t used = strlen(buf);
    snprintf(buf + used, cap - used, "%s = %s\n", key, value);
}

void h_quorum_start(int nnodes, int nagents, const char *agent_ini, const char *redis_ini)
{
    cr_assert(nnodes >= 3 && nnodes % 2 == 1 && nnodes <= H_MAX_NODES, "quorum mode over %d nodes",
              nnodes);
    cr_assert(nagents >= 1 && nagents <= H_MAX_AGENTS, "%d agents", nagents);
    char aini[2048] = "", rini[2048] = "";
    default_line(aini, sizeof aini, agent_ini, "max_ttl_ms", "2000");
    default_line(aini, sizeof aini, agent_ini, "default_ttl_ms", "1500");
    default_line(aini, sizeof aini, agent_ini, "min_ttl_ms", "400");
    default_line(rini, sizeof rini, redis_ini, "node_timeout_ms", "300");
    size_t used = strlen(aini);
    snprintf(aini + used, sizeof aini - used, "%s", agent_ini ? agent_ini : "");
    used = strlen(rini);
    snprintf(rini + used, sizeof rini - used, "%s", redis_ini ? redis_ini : "");
    h_nodes_start(nnodes);
    for (int i = 0; i < nagents; i++)
        h_agent_config(i, aini, rini);
    /* A node first seen with an uptime below max_ttl_ms does not count until
     * it has been up that long: wait for that here, once for all agents, on
     * the nodes' own uptime. Redis counts it in whole seconds of wall clock,
     * possibly one too many, and the agent takes it as one less. */
    long long max_ttl = conf_number(0, "max_ttl_ms", 2000);
    cr_assert_leq(max_ttl, 20000, "max_ttl_ms %lld: the nodes would be excluded too long", max_ttl);
    for (int n = 0; n < nnodes; n++)
        H_WAIT_UNTIL(max_ttl + 4000, (h_node_uptime_s(n) - 1) * 1000 >= max_ttl);
    for (int i = 0; i < nagents; i++)
        h_agent_start_n(i);
}

int h_agent_stop(int i)
{
    struct h_agent *a = agent_at(i);
    if (!a->pid)
        return -1;
    h_agent_resume(i);
    kill(a->pid, SIGTERM);
    int st = h_wait_child(a->pid, H_STOP_MS);
    if (st == -1) {
        kill_reap(a->pid);
        a->pid = 0;
        h_agent_log_tail(i, 40);
        cr_assert_fail("dlockd did not exit within %d ms of SIGTERM", h_scaled_ms(H_STOP_MS));
    }
    a->pid = 0;
    return st;
}

void h_agent_kill(int i)
{
    struct h_agent *a = agent_at(i);
    kill_reap(a->pid);
    a->pid = 0;
    a->paused = 0;
}

void h_agent_pause(int i)
{
    struct h_agent *a = agent_at(i);
    cr_assert(a->pid > 0, "agent %d is not running", i);
    cr_assert_eq(kill(a->pid, SIGSTOP), 0);
    a->paused = 1;
}

void h_agent_resume(int i)
{
    struct h_agent *a = agent_at(i);
    if (a->pid > 0 && a->paused) {
        kill(a->pid, SIGCONT);
        a->paused = 0;
    }
}

/* ---- clients ---- */

static void on_event(dlock_client *c, dlock_lease *lease, dlock_state state, int reason, void *arg)
{
    struct h_cl *cl = arg;
    (void)c;
    if (cl->nev < H_MAX_EVENTS) {
        struct h_event *e = &cl->ev[cl->nev++];
        e->lease = lease;
        e->state = state;
        e->reason = reason;
        e->at_ms = h_now_ms();
    }
}

struct h_cl *h_client_at(int agent)
{
    int slot = -1;
    for (int i = 0; i < H_MAX_CLIENTS && slot < 0; i++)
        if (!H.clients[i])
            slot = i;
    cr_assert(slot >= 0, "too many clients in one test");
    struct h_cl *cl = calloc(1, sizeof *cl);
    cr_assert_not_null(cl);
    int rc = dlock_client_open(&cl->c, agent_at(agent)->sock);
    if (rc) {
        free(cl);
        cr_assert_fail("dlock_client_open: %s (%d)", dlock_strerror(rc), rc);
    }
    cl->agent = agent;
    dlock_client_set_event_cb(cl->c, on_event, cl);
    H.clients[slot] = cl;
    return cl;
}

struct h_cl *h_client(void)
{
    return h_client_at(0);
}

void h_client_close(struct h_cl *cl)
{
    for (int i = 0; i < H_MAX_CLIENTS; i++)
        if (H.clients[i] == cl)
            H.clients[i] = NULL;
    dlock_client_close(cl->c);
    free(cl);
}

static void dispatch(struct h_cl *cl)
{
    int rc = dlock_client_dispatch(cl->c);
    if (rc == DLOCK_EDISCONNECTED)
        cl->disconnected = 1;
    else
        cr_assert_eq(rc, 0, "dlock_client_dispatch: %s (%d)", dlock_strerror(rc), rc);
}

void h_pump(struct h_cl *cl, int timeout_ms)
{
    timeout_ms = h_scaled_ms(timeout_ms);
    if (cl->disconnected) {
        if (timeout_ms > 0)
            h_sleep_ms(timeout_ms);
        return;
    }
    struct pollfd p = {.fd = dlock_client_fd(cl->c), .events = POLLIN};
    if (poll(&p, 1, timeout_ms) > 0)
        dispatch(cl);
}

void h_pump_all(int timeout_ms)
{
    timeout_ms = h_scaled_ms(timeout_ms);
    struct pollfd p[H_MAX_CLIENTS];
    struct h_cl *who[H_MAX_CLIENTS];
    int n = 0;
    for (int i = 0; i < H_MAX_CLIENTS; i++) {
        struct h_cl *cl = H.clients[i];
        if (cl && !cl->disconnected) {
            p[n].fd = dlock_client_fd(cl->c);
            p[n].events = POLLIN;
            p[n].revents = 0;
            who[n++] = cl;
        }
    }
    if (n == 0) {
        if (timeout_ms > 0)
            h_sleep_ms(timeout_ms);
        return;
    }
    if (poll(p, (nfds_t)n, timeout_ms) <= 0)
        return;
    for (int i = 0; i < n; i++)
        if (p[i].revents)
            dispatch(who[i]);
}

int h_events(const struct h_cl *cl, const dlock_lease *lease, dlock_state state)
{
    int n = 0;
    for (int i = 0; i < cl->nev; i++)
        if (cl->ev[i].state == state && (!lease || cl->ev[i].lease == lease))
            n++;
    return n;
}

int h_acquire(struct h_cl *cl, const char *name, uint32_t ttl_ms, int64_t wait_ms,
              dlock_lease **out)
{
    dlock_acquire_options o = {.ttl_ms = ttl_ms, .wait_ms = wait_ms, .flags = 0};
    return dlock_lease_acquire(cl->c, name, &o, out);
}

dlock_lease *h_must_acquire(struct h_cl *cl, const char *name, uint32_t ttl_ms)
{
    dlock_lease *l = NULL;
    int rc = h_acquire(cl, name, ttl_ms, 0, &l);
    cr_assert_eq(rc, 0, "acquire %s: %s (%d)", name, dlock_strerror(rc), rc);
    cr_assert_not_null(l);
    return l;
}

static void on_acquired(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct h_acq *a = arg;
    (void)c;
    a->done++;
    a->status = status;
    a->lease = lease;
    a->seq = ++H.acq_seq;
    a->at_ms = h_now_ms();
}

void h_acquire_spec_async(struct h_cl *cl, const char *name, const dlock_acquire_options *o,
                          const dlock_lock_spec *spec, struct h_acq *acq)
{
    memset(acq, 0, sizeof *acq);
    int rc = dlock_lease_acquire_spec_async(cl->c, name, o, spec, on_acquired, acq);
    cr_assert_eq(rc, 0, "acquire_async %s: %s (%d)", name, dlock_strerror(rc), rc);
}

void h_acquire_async(struct h_cl *cl, const char *name, uint32_t ttl_ms, int64_t wait_ms,
                     struct h_acq *acq)
{
    dlock_acquire_options o = {.ttl_ms = ttl_ms, .wait_ms = wait_ms, .flags = 0};
    h_acquire_spec_async(cl, name, &o, NULL, acq);
}

int h_acquire_cancel(struct h_cl *cl, struct h_acq *acq)
{
    return dlock_lease_acquire_cancel(cl->c, on_acquired, acq);
}

int h_acq_done(const struct h_acq *acq, int n, int *ok)
{
    int done = 0, good = 0;
    for (int i = 0; i < n; i++) {
        done += acq[i].done;
        good += acq[i].done && acq[i].status == 0;
    }
    if (ok)
        *ok = good;
    return done;
}

/* ---- forked holders ---- */

/* Writes all of buf; in the child, errors just end it. */
static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void holder_main(int cmd_fd, int rep_fd, const char *sock, const char *name, uint32_t ttl_ms,
                        int64_t wait_ms)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, sock);
    dlock_lease *l = NULL;
    if (rc == 0) {
        dlock_acquire_options o = {.ttl_ms = ttl_ms, .wait_ms = wait_ms, .flags = 0};
        rc = dlock_lease_acquire(c, name, &o, &l);
    }
    write_all(rep_fd, &rc, sizeof rc);
    if (rc != 0)
        _exit(1);
    char cmd = 0;
    ssize_t r;
    while ((r = read(cmd_fd, &cmd, 1)) < 0 && errno == EINTR)
        ;
    if (r == 1 && cmd == 'r') {
        rc = dlock_lease_release(l);
        write_all(rep_fd, &rc, sizeof rc);
    }
    dlock_client_close(c);
    _exit(0);
}

void h_holder_spawn(struct h_holder *h, const char *name, uint32_t ttl_ms, int64_t wait_ms)
{
    int cmd[2], rep[2];
    cr_assert_eq(pipe2(cmd, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        child_prepare(parent);
        /* Keep only the two pipe ends, as fds 3 and 4: any other copy of the
         * test's sockets would keep them open after the test closes them. */
        int c = fcntl(cmd[0], F_DUPFD, 10), r = fcntl(rep[1], F_DUPFD, 10);
        dup2(c, 3);
        dup2(r, 4);
        close_from(5);
        holder_main(3, 4, H.agent[0].sock, name, ttl_ms, wait_ms);
    }
    close(cmd[0]);
    close(rep[1]);
    memset(h, 0, sizeof *h);
    h->pid = pid;
    h->cmd_fd = cmd[1];
    h->rep_fd = rep[0];
    register_child(pid);
}

/* Reads one int from the holder within timeout_ms: 1 read, 0 timeout, -1 EOF. */
static int holder_read(struct h_holder *h, int timeout_ms, int *out)
{
    struct pollfd p = {.fd = h->rep_fd, .events = POLLIN};
    int64_t end = h_deadline(timeout_ms);
    for (;;) {
        int left = (int)(end - h_now_ms());
        int pr = poll(&p, 1, left > 0 ? left : 0);
        if (pr > 0)
            break;
        if (pr == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
    ssize_t r = read(h->rep_fd, out, sizeof *out);
    return r == (ssize_t)sizeof *out ? 1 : -1;
}

int h_holder_poll(struct h_holder *h, int timeout_ms)
{
    if (h->have_rc)
        return 1;
    int r = holder_read(h, timeout_ms, &h->acquire_rc);
    cr_assert_neq(r, -1, "holder process %d died before answering", (int)h->pid);
    if (r == 1)
        h->have_rc = 1;
    return r;
}

void h_holder_start(struct h_holder *h, const char *name, uint32_t ttl_ms)
{
    h_holder_spawn(h, name, ttl_ms, 0);
    cr_assert(h_holder_poll(h, H_START_MS), "holder did not answer within %d ms",
              h_scaled_ms(H_START_MS));
    cr_assert_eq(h->acquire_rc, 0, "holder's acquire of %s: %s (%d)", name,
                 dlock_strerror(h->acquire_rc), h->acquire_rc);
}

int h_holder_release(struct h_holder *h)
{
    cr_assert_eq(write_all(h->cmd_fd, "r", 1), 0);
    int rc = 0;
    cr_assert_eq(holder_read(h, H_STOP_MS, &rc), 1, "holder did not report its release");
    int st = h_wait_child(h->pid, H_STOP_MS);
    cr_assert_eq(st, 0, "holder exit status %d", st);
    close(h->cmd_fd);
    close(h->rep_fd);
    h->pid = 0;
    return rc;
}

void h_holder_kill(struct h_holder *h, int sig)
{
    cr_assert(h->pid > 0);
    kill(h->pid, sig);
    if (sig == SIGKILL) {
        waitpid(h->pid, NULL, 0);
        forget_child(h->pid);
        close(h->cmd_fd);
        close(h->rep_fd);
        h->pid = 0;
    }
}

/* ---- dlockctl ---- */

pid_t h_ctl_spawn(const char *const *args)
{
    char *argv[64];
    int n = 0;
    argv[n++] = DLOCKCTL_PATH;
    for (int i = 0; args[i] && n < 63; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    return h_spawn(argv, h_path("ctl.out"));
}

int h_ctl(int timeout_ms, ...)
{
    const char *args[62];
    int n = 0;
    va_list ap;
    va_start(ap, timeout_ms);
    while (n < 61 && (args[n] = va_arg(ap, const char *)) != NULL)
        n++;
    va_end(ap);
    args[n] = NULL;
    pid_t pid = h_ctl_spawn(args);
    int st = h_wait_child(pid, timeout_ms);
    if (st == -1) {
        const char *out = h_read_file(h_path("ctl.out"));
        fprintf(stderr, "---- dlockctl output ----\n%s\n", out ? out : "");
        cr_assert_fail("dlockctl did not exit within %d ms", h_scaled_ms(timeout_ms));
    }
    return st;
}

/* ---- raw sockets ---- */

int h_raw_connect(int agent)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *path = agent_at(agent)->sock;
    cr_assert_lt(strlen(path), sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect %s: %s", sa.sun_path,
                 strerror(errno));
    for (int i = 0; i < H_MAX_FDS; i++)
        if (H.fds[i] < 0) {
            H.fds[i] = fd;
            break;
        }
    return fd;
}

void h_raw_close(int fd)
{
    for (int i = 0; i < H_MAX_FDS; i++)
        if (H.fds[i] == fd)
            H.fds[i] = -1;
    close(fd);
}

int h_raw_send(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int h_raw_send_buf(int fd, struct wire_buf *b)
{
    int rc = h_raw_send(fd, b->data, b->len);
    wire_buf_free(b);
    return rc;
}

/* Reads exactly n bytes before end_ms: 1 done, 0 EOF, -1 timeout, -2 error. */
static int read_exact(int fd, uint8_t *buf, size_t n, int64_t end_ms)
{
    size_t got = 0;
    while (got < n) {
        int left = (int)(end_ms - h_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, left > 0 ? left : 0);
        if (pr == 0)
            return -1;
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            return -2;
        }
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r == 0)
            return 0;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -2;
        }
        got += (size_t)r;
    }
    return 1;
}

/* h_raw_read_frame() until end_ms. */
static int read_frame_until(int fd, int64_t end, struct wire_hdr *h, uint8_t *body, size_t cap)
{
    uint8_t hdr[WIRE_HDR_LEN];
    int r = read_exact(fd, hdr, sizeof hdr, end);
    if (r != 1)
        return r;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, h), 1,
                 "the agent sent a malformed frame header");
    uint8_t scratch[WIRE_MAX_BODY];
    uint8_t *dst = h->len <= cap ? body : scratch;
    r = read_exact(fd, dst, h->len, end);
    if (r == 0)
        cr_assert_fail("the agent closed the connection in the middle of a frame");
    return r;
}

int h_raw_read_frame(int fd, int timeout_ms, struct wire_hdr *h, uint8_t *body, size_t cap)
{
    return read_frame_until(fd, h_deadline(timeout_ms), h, body, cap);
}

int h_raw_recv_fds(int fd, uint8_t *buf, size_t n, int fds[2])
{
    size_t got = 0;
    while (got < n) {
        union {
            struct cmsghdr hdr;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } u;
        struct iovec iov = {.iov_base = buf + got, .iov_len = n - got};
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, h_scaled_ms(3000)) <= 0)
            return -1;
        ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (r <= 0)
            return -1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            int in[4];
            memcpy(in, CMSG_DATA(cm), (k > 4 ? 4 : k) * sizeof(int));
            for (size_t i = 0; i < k && i < 4; i++) {
                if (i < 2 && k == 2 && fds[i] < 0)
                    fds[i] = in[i];
                else
                    close(in[i]);
            }
        }
        got += (size_t)r;
    }
    return 0;
}

uint32_t h_raw_hello(int fd)
{
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION};
    cr_assert_eq(wire_put_hello(&b, 1, &m), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(fd, 2000, &h, body, sizeof body), 1, "no reply to HELLO");
    cr_assert_eq(h.type, WIRE_T_HELLO_OK, "HELLO answered with type 0x%x", h.type);
    cr_assert_eq(h.id, 1);
    struct wire_hello_ok ok;
    cr_assert_eq(wire_get_hello_ok(body, h.len, &ok), 0);
    cr_assert_eq(ok.version, WIRE_VERSION);
    return ok.max_name_len;
}

int h_raw_expect_close(int fd, int timeout_ms, int *err_code)
{
    int64_t end = h_deadline(timeout_ms);
    *err_code = 0;
    for (;;) {
        struct wire_hdr h;
        uint8_t body[WIRE_MAX_BODY];
        int r = read_frame_until(fd, end, &h, body, sizeof body);
        if (r == 0 || r == -2)
            return 1;
        if (r == -1)
            return 0;
        if (h.type == WIRE_T_ERROR) {
            struct wire_error e;
            cr_assert_eq(wire_get_error(body, h.len, &e), 0, "malformed ERROR frame");
            *err_code = e.code;
        }
    }
}

/* ---- fixtures ---- */

void h_setup(void)
{
    memset(&H, 0, sizeof H);
    for (int i = 0; i < H_MAX_FDS; i++)
        H.fds[i] = -1;
    unsetenv("DLOCK_SOCKET");
    /* Short: in quorum mode every node's socket path goes on one line of the
     * agent's config file (see h_agent_config()). */
    snprintf(H.dir, sizeof H.dir, "/tmp/dlock-XXXXXX");
    cr_assert_not_null(mkdtemp(H.dir), "mkdtemp: %s", strerror(errno));
    for (int i = 0; i < H_MAX_NODES; i++) {
        struct h_node *n = &H.node[i];
        char suffix[16] = "";
        if (i > 0)
            snprintf(suffix, sizeof suffix, "%d", i);
        snprintf(n->sock, sizeof n->sock, "%s/redis%s.sock", H.dir, suffix);
        snprintf(n->log, sizeof n->log, "%s/redis%s.log", H.dir, suffix);
        snprintf(n->addr, sizeof n->addr, "unix:%s/redis%s.sock", H.dir, suffix);
    }
    memcpy(H.redis_sock, H.node[0].sock, sizeof H.redis_sock);
    memcpy(H.redis_log, H.node[0].log, sizeof H.redis_log);
    memcpy(H.redis_addr, H.node[0].addr, sizeof H.redis_addr);
    for (int i = 0; i < H_MAX_AGENTS; i++) {
        char suffix[16] = "";
        if (i > 0)
            snprintf(suffix, sizeof suffix, "%d", i + 1);
        snprintf(H.agent[i].sock, sizeof H.agent[i].sock, "%s/dlock%s.sock", H.dir, suffix);
        snprintf(H.agent[i].conf, sizeof H.agent[i].conf, "%s/dlockd%s.conf", H.dir, suffix);
        snprintf(H.agent[i].log, sizeof H.agent[i].log, "%s/dlockd%s.log", H.dir, suffix);
    }
}

void h_finish(void)
{
    for (int i = 0; i < H_MAX_CLIENTS; i++)
        if (H.clients[i])
            h_client_close(H.clients[i]);
    for (int n = 0; n < H_MAX_NODES; n++)
        h_node_resume(n);
    for (int i = 0; i < H_MAX_AGENTS; i++) {
        if (!H.agent[i].pid)
            continue;
        h_agent_resume(i);
        cr_assert(h_agent_alive(i), "dlockd %d died during the test", i);
        int st = h_agent_stop(i);
        if (st != 0)
            h_agent_log_tail(i, 60);
        cr_assert_eq(st, 0, "dlockd %d exit status %d after SIGTERM (log above)", i, st);
    }
    H.passed = 1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void h_teardown(void)
{
    for (int i = 0; i < H_MAX_CLIENTS; i++)
        if (H.clients[i]) {
            dlock_client_close(H.clients[i]->c);
            free(H.clients[i]);
            H.clients[i] = NULL;
        }
    for (int i = 0; i < H_MAX_FDS; i++)
        if (H.fds[i] >= 0) {
            close(H.fds[i]);
            H.fds[i] = -1;
        }
    for (int i = 0; i < H_MAX_CHILDREN; i++) {
        kill_reap(H.children[i]);
        H.children[i] = 0;
    }
    for (int i = 0; i < H_MAX_AGENTS; i++) {
        if (!H.passed && access(H.agent[i].log, F_OK) == 0)
            h_agent_log_tail(i, 60);
        kill_reap(H.agent[i].pid);
        H.agent[i].pid = 0;
    }
    for (int n = 0; n < H_MAX_NODES; n++) {
        redisproc_kill(&H.node[n].proc);
        node_drop_conn(&H.node[n]);
    }
    for (int i = 0; i < H_MAX_SPARES; i++)
        redisproc_kill(&H.spare[i]);
    free_strings();
    if (!H.dir[0])
        return;
    if (getenv("DLOCK_TEST_KEEP"))
        fprintf(stderr, "kept %s\n", H.dir);
    else
        nftw(H.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    H.dir[0] = '\0';
}

void h_skip(const char *why)
{
    H.passed = 1;
    h_teardown(); /* Criterion runs no .fini for a skipped test */
    cr_skip_test("%s", why);
}

const char *h_status_ask(int agent, const char *req)
{
    static char out[1 << 16];
    char path[H_PATH];
    snprintf(path, sizeof path, "%s/status%d.sock", H.dir, agent);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return NULL;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t n = 0;
    ssize_t r;
    while (n < sizeof out - 1 && (r = read(fd, out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(fd);
    return out;
}

long long h_metric(int agent, const char *name)
{
    const char *out = h_status_ask(agent, "metrics\n");
    cr_assert_not_null(out, "no metrics from agent %d", agent);
    char needle[128];
    snprintf(needle, sizeof needle, "\n%s ", name);
    const char *p = strstr(out, needle);
    cr_assert_not_null(p, "no %s in the metrics of agent %d", name, agent);
    return strtoll(p + strlen(needle), NULL, 10);
}

/* ---- JSON ---- */

static const char *json_value(const char *p, int depth);

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    for (p++; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            return NULL; /* also the end of the text */
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)p[i]))
                        return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
    }
    return p + 1;
}

static const char *json_number(const char *p)
{
    if (*p == '-')
        p++;
    if (!isdigit((unsigned char)*p) || (p[0] == '0' && isdigit((unsigned char)p[1])))
        return NULL;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == '.' && !isdigit((unsigned char)*++p))
        return NULL;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    return p;
}

/* The members of an object (close '}') or the elements of an array (']'). */
static const char *json_items(const char *p, char close, int depth)
{
    p = json_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (close == '}') {
            if (*p != '"' || !(p = json_string(p)) || *(p = json_ws(p)) != ':')
                return NULL;
            p++;
        }
        if (!(p = json_value(p, depth + 1)))
            return NULL;
        p = json_ws(p);
        if (*p == close)
            return p + 1;
        if (*p != ',')
            return NULL;
        p = json_ws(p + 1);
    }
}

static const char *json_value(const char *p, int depth)
{
    p = json_ws(p);
    if (depth > 64)
        return NULL;
    if (*p == '{' || *p == '[')
        return json_items(p, *p == '{' ? '}' : ']', depth);
    if (*p == '"')
        return json_string(p);
    if (*p == '-' || isdigit((unsigned char)*p))
        return json_number(p);
    for (const char *const *w = (const char *const[]){"true", "false", "null", NULL}; *w; w++)
        if (strncmp(p, *w, strlen(*w)) == 0)
            return p + strlen(*w);
    return NULL;
}

int h_json_valid(const char *text)
{
    const char *end = text ? json_value(text, 0) : NULL;
    return end && *json_ws(end) == '\0';
}
