/* SPDX-License-Identifier: BSD-3-Clause */
/* redisproc.c -- start, watch and stop a private redis-server (redisproc.h). */
#include "redisproc.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_EXTRA 64

/* What the child failed at before (or in) exec. */
enum { STAGE_DEVNULL = 1, STAGE_LOG, STAGE_DIR, STAGE_EXEC };

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void fail(struct redisproc *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(struct redisproc *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

int proc_exit_code(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return -1;
}

/* Appends " | "-joined the last (up to 3) non-empty lines of the log file to
 * r->err, after ": " -- what redis-server said before it exited. */
static void append_log_tail(struct redisproc *r)
{
    if (!r->log[0])
        return;
    int fd = open(r->log, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[2048];
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)sizeof buf - 1 ? size - (off_t)(sizeof buf - 1) : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    /* Walk back over the last three non-empty lines. */
    char *start = buf + n;
    int lines = 0;
    while (start > buf && lines < 3) {
        char *end = start;
        while (end > buf && (end[-1] == '\n' || end[-1] == '\r'))
            end--;
        if (end == buf)
            break;
        char *b = end;
        while (b > buf && b[-1] != '\n')
            b--;
        start = b;
        lines++;
    }
    size_t used = strlen(r->err);
    if (lines == 0 || used + 3 >= sizeof r->err)
        return;
    char *out = r->err + used;
    size_t left = sizeof r->err - used - 1;
    memcpy(out, ": ", 2);
    out += 2;
    left -= 2;
    bool nl = false;
    for (const char *p = start; *p && left > 0; p++) {
        if (*p == '\n' || *p == '\r') {
            nl = true;
            continue;
        }
        if (nl) {
            nl = false;
            if (left < 4)
                break;
            memcpy(out, " | ", 3);
            out += 3;
            left -= 3;
        }
        *out++ = (unsigned char)*p < 0x20 ? ' ' : *p;
        left--;
    }
    *out = '\0';
}

static void copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void child(char *const argv[], const char *log, const char *dir, int err_fd, pid_t parent,
                  int max_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Out of the way of 0, 1 and 2, which may have been closed. */
    int moved = fcntl(err_fd, F_DUPFD_CLOEXEC, 10);
    if (moved >= 0) {
        close(err_fd);
        err_fd = moved;
    }
    /* What failed, and errno, go back through the pipe. */
    int e[2] = {0, 0};
    int in = open("/dev/null", O_RDONLY);
    int out = -1;
    if (in < 0)
        e[0] = STAGE_DEVNULL, e[1] = errno;
    else if ((out = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644)
                        : open("/dev/null", O_WRONLY)) < 0)
        e[0] = log ? STAGE_LOG : STAGE_DEVNULL, e[1] = errno;
    else if (dir && chdir(dir) != 0)
        e[0] = STAGE_DIR, e[1] = errno;
    if (e[0]) {
        ssize_t w = write(err_fd, e, sizeof e);
        (void)w;
        _exit(126);
    }
    /* The error pipe moves to 3 (close-on-exec again), the rest goes. */
    if (in != 0) {
        dup2(in, 0);
        close(in);
    }
    dup2(out, 1);
    dup2(out, 2);
    if (out > 2)
        close(out);
    if (err_fd != 3) {
        dup2(err_fd, 3);
        close(err_fd);
    }
    fcntl(3, F_SETFD, FD_CLOEXEC);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0)
#endif
        for (int fd = 4; fd < max_fd; fd++)
            close(fd);
    execvp(argv[0], argv);
    e[0] = STAGE_EXEC;
    e[1] = errno;
    ssize_t w = write(3, e, sizeof e);
    (void)w;
    _exit(127);
}

pid_t proc_spawn(char *const argv[], const char *log, const char *dir, char *err, size_t errlen,
                 int *status)
{
    const char *prog = argv[0];
    if (status)
        *status = -1;
    struct rlimit rl;
    int max_fd = 4096;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536)
        max_fd = (int)rl.rlim_cur;
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot start %s: pipe: %s", prog, strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pipefd[0]);
        close(pipefd[1]);
        snprintf(err, errlen, "cannot start %s: fork: %s", prog, strerror(e));
        return -1;
    }
    if (pid == 0) {
        close(pipefd[0]);
        child(argv, log, dir, pipefd[1], parent, max_fd);
    }
    close(pipefd[1]);
    /* EOF: exec succeeded (the pipe closed with it); two ints: it failed. */
    int e[2] = {0, 0};
    ssize_t got;
    while ((got = read(pipefd[0], e, sizeof e)) < 0 && errno == EINTR)
        ;
    close(pipefd[0]);
    if (got != (ssize_t)sizeof e)
        return pid;
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (status)
        *status = proc_exit_code(st);
    const char *why = strerror(e[1]);
    if (e[0] == STAGE_EXEC && e[1] == ENOENT && !strchr(prog, '/'))
        snprintf(err, errlen, "cannot run %s: %s (is it on PATH?)", prog, why);
    else if (e[0] == STAGE_EXEC)
        snprintf(err, errlen, "cannot run %s: %s", prog, why);
    else if (e[0] == STAGE_LOG)
        snprintf(err, errlen, "cannot start %s: log file %s: %s", prog, log, why);
    else if (e[0] == STAGE_DIR)
        snprintf(err, errlen, "cannot start %s: directory %s: %s", prog, dir, why);
    else
        snprintf(err, errlen, "cannot start %s: /dev/null: %s", prog, why);
    return -1;
}

int redisproc_spawn(struct redisproc *r, const struct redisproc_opts *o)
{
    memset(r, 0, sizeof *r);
    r->status = -1;
    const char *prog = o->program ? o->program : "redis-server";
    if (o->unix_socket) {
        if (strlen(o->unix_socket) >= sizeof r->sock ||
            strlen(o->unix_socket) >= sizeof((struct sockaddr_un *)0)->sun_path) {
            fail(r, "redis-server socket path too long: %s", o->unix_socket);
            return -1;
        }
        copy(r->sock, sizeof r->sock, o->unix_socket);
    }
    if (o->port < 0 || o->port > 65535 || (!o->unix_socket && o->port == 0)) {
        fail(r, "redis-server needs a unix socket or a TCP port (port %d)", o->port);
        return -1;
    }
    const char *bind = o->bind ? o->bind : "127.0.0.1";
    if (o->port) {
        if (strlen(bind) >= sizeof r->host) {
            fail(r, "redis-server bind address too long: %s", bind);
            return -1;
        }
        copy(r->host, sizeof r->host, bind);
        r->port = o->port;
    }
    if (o->log && strlen(o->log) >= sizeof r->log) {
        fail(r, "redis-server log path too long: %s", o->log);
        return -1;
    }
    copy(r->log, sizeof r->log, o->log);

    /* argv: the program, at most 12 common arguments, the extra ones. */
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    const char *argv[1 + 14 + MAX_EXTRA + 1];
    int n = 0;
    argv[n++] = prog;
    argv[n++] = "--port";
    argv[n++] = port;
    if (o->port) {
        argv[n++] = "--bind";
        argv[n++] = bind;
    }
    if (o->unix_socket) {
        argv[n++] = "--unixsocket";
        argv[n++] = o->unix_socket;
        argv[n++] = "--unixsocketperm";
        argv[n++] = o->socket_perm ? o->socket_perm : "700";
    }
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    if (!o->persist) {
        argv[n++] = "--save";
        argv[n++] = "";
        argv[n++] = "--appendonly";
        argv[n++] = "no";
    }
    for (int i = 0; o->extra && o->extra[i]; i++) {
        if (i >= MAX_EXTRA) {
            fail(r, "more than %d extra redis-server arguments", MAX_EXTRA);
            return -1;
        }
        argv[n++] = o->extra[i];
    }
    argv[n] = NULL;

    pid_t pid = proc_spawn((char *const *)argv, o->log, o->dir, r->err, sizeof r->err, &r->status);
    if (pid < 0)
        return -1;
    r->pid = pid;
    return 0;
}

/* Whether the server on c is the process pid: a port checked free may be
 * taken by another program's server between the check and our server's bind
 * (which then exits), and that server must not pass for ours. */
static int answers_as(redisContext *c, pid_t pid)
{
    redisReply *rep = redisCommand(c, "INFO server");
    int ours = 0;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        const char *p = strstr(rep->str, "\nprocess_id:");
        ours = p && strtol(p + strlen("\nprocess_id:"), NULL, 10) == (long)pid;
    }
    if (rep)
        freeReplyObject(rep);
    return ours;
}

int redisproc_ping(const struct redisproc *r, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = r->sock[0] ? redisConnectUnixWithTimeout(r->sock, tv)
                                 : redisConnectWithTimeout(r->host, r->port, tv);
    if (!c)
        return -1;
    int ok = 0;
    if (!c->err && redisSetTimeout(c, tv) == REDIS_OK) {
        redisReply *rep = redisCommand(c, "PING");
        ok = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
        if (rep)
            freeReplyObject(rep);
        if (ok && r->pid > 0)
            ok = answers_as(c, r->pid);
    }
    redisFree(c);
    return ok ? 0 : -1;
}

bool redisproc_alive(struct redisproc *r)
{
    if (r->pid <= 0)
        return false;
    int st;
    pid_t w = waitpid(r->pid, &st, WNOHANG);
    if (w == 0)
        return true;
    r->status = w == r->pid ? proc_exit_code(st) : -1;
    r->pid = 0;
    r->paused = false;
    return false;
}

void redisproc_reaped(struct redisproc *r, int wstatus)
{
    r->status = proc_exit_code(wstatus);
    r->pid = 0;
    r->paused = false;
}

int redisproc_wait_ready(struct redisproc *r, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    for (;;) {
        if (!redisproc_alive(r)) {
            fail(r, "redis-server exited at start (status %d)", r->status);
            append_log_tail(r);
            return -1;
        }
        if (redisproc_ping(r, 200) == 0)
            return 0;
        if (now_ms() > end) {
            fail(r, "redis-server (pid %d) did not answer PING within %d ms", (int)r->pid,
                 timeout_ms);
            append_log_tail(r);
            return -1;
        }
        sleep_ms(5);
    }
}

int redisproc_start(struct redisproc *r, const struct redisproc_opts *o, int timeout_ms)
{
    if (redisproc_spawn(r, o) != 0)
        return -1;
    if (redisproc_wait_ready(r, timeout_ms) == 0)
        return 0;
    char why[sizeof r->err];
    memcpy(why, r->err, sizeof why);
    redisproc_kill(r);
    memcpy(r->err, why, sizeof why);
    return -1;
}

int redisproc_pause(struct redisproc *r)
{
    if (r->pid <= 0 || kill(r->pid, SIGSTOP) != 0) {
        fail(r, "cannot pause redis-server: %s", r->pid > 0 ? strerror(errno) : "not running");
        return -1;
    }
    r->paused = true;
    return 0;
}

void redisproc_resume(struct redisproc *r)
{
    if (r->pid > 0 && r->paused)
        kill(r->pid, SIGCONT);
    r->paused = false;
}

/* Waits up to ms for the server to exit and reaps it: 1 when it did. */
static int reap_within(struct redisproc *r, int ms)
{
    int64_t end = now_ms() + ms;
    for (;;) {
        int st;
        pid_t w = waitpid(r->pid, &st, WNOHANG);
        if (w == r->pid || (w < 0 && errno != EINTR)) {
            r->status = w == r->pid ? proc_exit_code(st) : -1; /* ECHILD: reaped elsewhere */
            r->pid = 0;
            r->paused = false;
            return 1;
        }
        if (now_ms() > end)
            return 0;
        sleep_ms(2);
    }
}

int redisproc_stop(struct redisproc *r, int grace_ms)
{
    if (r->pid <= 0)
        return -1;
    redisproc_resume(r);
    kill(r->pid, SIGTERM);
    if (!reap_within(r, grace_ms))
        redisproc_kill(r);
    return r->status;
}

void redisproc_kill(struct redisproc *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    int st;
    pid_t w;
    while ((w = waitpid(r->pid, &st, 0)) < 0 && errno == EINTR)
        ;
    r->status = w == r->pid ? proc_exit_code(st) : -1;
    r->pid = 0;
    r->paused = false;
}
