/* SPDX-License-Identifier: BSD-3-Clause */
/* env.c -- the private redis-server and dlockd of a dlock-bench run: temp
 * dir, start with deadlines, shutdown and clean-up, and /proc sampling. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#ifndef DLOCKD_PATH
#error "DLOCKD_PATH must be defined (path of the dlockd binary)"
#endif

#define START_MS 10000 /* how long each child may take to answer */
#define STOP_MS  5000  /* how long each child may take to exit on SIGTERM */
#define LOG_TAIL 20    /* log lines printed when a child fails */

/* ---- time ---- */

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

double ns_to_s(uint64_t ns)
{
    return (double)ns / 1e9;
}

/* ---- child processes ---- */

pid_t env_spawn(char *const argv[], const char *log)
{
    char err[512];
    pid_t pid = proc_spawn(argv, log, NULL, err, sizeof err, NULL);
    if (pid < 0)
        fprintf(stderr, "dlock-bench: %s\n", err);
    return pid;
}

/* Reaps the children of pids (those > 0) as they exit, zeroing their pids,
 * until none is left or ms have passed. */
static void reap_until(pid_t *pids, int n, int *status, int ms)
{
    uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            if (pids[i] <= 0)
                continue;
            int st;
            pid_t r = waitpid(pids[i], &st, WNOHANG);
            if (r == pids[i] || r < 0) {
                if (status)
                    status[i] = r == pids[i] ? proc_exit_code(st) : -1;
                pids[i] = 0;
            } else {
                left++;
            }
        }
        if (left == 0 || now_ns() > end)
            return;
        sleep_ms(2);
    }
}

void env_stop_children(pid_t *pids, int n, int *status)
{
    for (int i = 0; i < n; i++) {
        if (status)
            status[i] = -1;
        if (pids[i] > 0)
            kill(pids[i], SIGTERM);
    }
    reap_until(pids, n, status, STOP_MS);
    for (int i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    reap_until(pids, n, status, STOP_MS);
    for (int i = 0; i < n; i++)
        pids[i] = 0; /* even one that outlived SIGKILL: it is no longer ours to wait for */
}

int env_stop_child(pid_t *pid)
{
    int st = -1;
    if (*pid > 0)
        env_stop_children(pid, 1, &st);
    return st;
}

bool env_child_dead(pid_t *pid)
{
    int st;
    if (*pid > 0 && waitpid(*pid, &st, WNOHANG) == *pid) {
        *pid = 0;
        return true;
    }
    return *pid <= 0;
}

/* ---- logs ---- */

int env_log_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0, ch, last = '\n';
    while ((ch = getc(f)) != EOF) {
        if (ch == '\n')
            n++;
        last = ch;
    }
    fclose(f);
    return last == '\n' ? n : n + 1;
}

void env_print_log(const char *path, int max_lines)
{
    int total = env_log_lines(path), skip = total - max_lines;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s (%d lines) ----\n", path, total);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (n++ >= skip)
            fputs(line, stderr);
    }
    fclose(f);
}

/* ---- start ---- */

static int write_conf(const struct env *e)
{
    FILE *f = fopen(e->conf, "w");
    if (!f)
        return -1;
    /* The parts hold up to 100k leases from one uid: no per-uid caps. */
    fprintf(f,
            "[agent]\nmax_leases_per_conn = 200000\nlog_level = warn\nstatus_socket =\n%s"
            "[policy]\nmax_leases_per_uid = 0\nmax_waiters_per_uid = 0\nrenew_budget_per_uid = 0\n",
            bench_handoff_setting);
    return fclose(f);
}

void env_set_paths(struct env *e)
{
    snprintf(e->redis_sock, sizeof e->redis_sock, "%s/redis.sock", e->dir);
    snprintf(e->agent_sock, sizeof e->agent_sock, "%s/dlock.sock", e->dir);
    snprintf(e->conf, sizeof e->conf, "%s/dlockd.conf", e->dir);
    snprintf(e->redis_log, sizeof e->redis_log, "%s/redis.log", e->dir);
    snprintf(e->agent_log, sizeof e->agent_log, "%s/dlockd.log", e->dir);
}

int env_spawn_redis(struct redisproc *r, const char *dir, const char *sock, const char *log)
{
    struct redisproc_opts o = {.unix_socket = sock, .dir = dir, .log = log};
    if (redisproc_spawn(r, &o) != 0) {
        fprintf(stderr, "dlock-bench: %s\n", r->err);
        return -1;
    }
    return 0;
}

int env_start_redis(struct env *e)
{
    if (env_spawn_redis(&e->redis, e->dir, e->redis_sock, e->redis_log) != 0)
        return -1;
    if (redisproc_wait_ready(&e->redis, START_MS) != 0) {
        fprintf(stderr, "dlock-bench: %s\n", e->redis.err);
        env_print_log(e->redis_log, 20);
        return -1;
    }
    /* Its version, for the report. */
    struct plain *p = plain_open(e->redis_sock);
    if (!p || redis_version(p, e->redis_version, sizeof e->redis_version) != 0) {
        fprintf(stderr, "dlock-bench: redis-server answers PING but not INFO\n");
        if (p)
            plain_close(p);
        return -1;
    }
    plain_close(p);
    return 0;
}

/* ---- agents coming up ---- */

int agent_probe(const char *sock, uint32_t ttl_ms)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, sock);
    if (rc != 0)
        return rc;
    dlock_acquire_options o = {.ttl_ms = ttl_ms, .wait_ms = DLOCK_WAIT_NONE};
    dlock_lease *l;
    rc = dlock_lease_acquire(c, "bench-probe", &o, &l);
    if (rc == 0)
        rc = dlock_lease_release_sync(l); /* the agent's answer, not the page's */
    dlock_client_close(c);
    return rc;
}

/* What a probe may answer while the agent is still coming up: not listening
 * yet, or not through to (a majority of) its Redis nodes yet. */
static bool not_yet(int rc)
{
    return rc == DLOCK_ECONNECT || rc == DLOCK_EUNAVAIL || rc == DLOCK_ENOQUORUM ||
           rc == DLOCK_EBUSY;
}

int agents_wait_ready(struct agent_start *a, int n, uint32_t ttl_ms, int deadline_ms)
{
    int left = n;
    for (int i = 0; i < n; i++) {
        a[i].ready = false;
        a[i].ready_ms = 0;
        a[i].before_ready = 0;
    }
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            struct agent_start *s = &a[i];
            if (s->ready)
                continue;
            if (env_child_dead(s->pid)) {
                fprintf(stderr, "dlock-bench: %s exited at start\n", s->what);
                env_print_log(s->log, LOG_TAIL);
                return -1;
            }
            int rc = agent_probe(s->sock, ttl_ms);
            if (rc == 0) {
                s->ready = true;
                s->ready_ms = (double)(now_ns() - s->started) / 1e6;
                left--;
                continue;
            }
            if (rc != DLOCK_ECONNECT)
                s->before_ready = rc;
            if (!not_yet(rc) || now_ns() - s->started > (uint64_t)deadline_ms * 1000000ull) {
                fprintf(stderr,
                        "dlock-bench: %s not usable within %d ms (last try-once acquire: %s)\n",
                        s->what, deadline_ms, dlock_strerror(rc));
                env_print_log(s->log, LOG_TAIL);
                return -1;
            }
        }
        if (left > 0)
            sleep_ms(10);
    }
    return 0;
}

int env_start_agent(struct env *e, const char *dlockd)
{
    char redis_addr[BENCH_PATH + 8], what[BENCH_PATH + 16];
    snprintf(redis_addr, sizeof redis_addr, "unix:%s", e->redis_sock);
    snprintf(what, sizeof what, "dlockd (%s)", dlockd);
    char *argv[] = {(char *)dlockd, "-s", e->agent_sock, "-r", redis_addr, "-c", e->conf, NULL};
    struct agent_start s = {.what = what, .sock = e->agent_sock, .log = e->agent_log};
    s.started = now_ns();
    e->agent_pid = env_spawn(argv, e->agent_log);
    if (e->agent_pid < 0) {
        e->agent_pid = 0;
        return -1;
    }
    s.pid = &e->agent_pid;
    /* A try-once acquire answers EUNAVAIL until its Redis connection is up. */
    return agents_wait_ready(&s, 1, BENCH_TTL_MS, START_MS);
}

int env_start(struct env *e)
{
    bool keep = e->keep;
    memset(e, 0, sizeof *e);
    e->keep = keep;
    e->agent_exit = -1;
    snprintf(e->dir, sizeof e->dir, "/tmp/dlock-bench.XXXXXX");
    if (!mkdtemp(e->dir)) {
        fprintf(stderr, "dlock-bench: mkdtemp: %s\n", strerror(errno));
        e->dir[0] = '\0';
        return -1;
    }
    env_set_paths(e);
    if (write_conf(e) != 0) {
        fprintf(stderr, "dlock-bench: cannot write %s: %s\n", e->conf, strerror(errno));
        return -1;
    }
    if (env_start_redis(e) != 0)
        return -1;
    return env_start_agent(e, DLOCKD_PATH);
}

/* ---- stop ---- */

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[BENCH_PATH + 256];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

void env_stop_agent(struct env *e)
{
    if (e->agent_pid > 0)
        e->agent_exit = env_stop_child(&e->agent_pid);
    e->agent_stopped = true;
}

void env_stop(struct env *e)
{
    /* The agent first: on SIGTERM it releases its leases on Redis. */
    env_stop_agent(e);
    redisproc_stop(&e->redis, STOP_MS);
    if (e->dir[0] && e->keep)
        fprintf(stderr, "dlock-bench: kept %s\n", e->dir);
    else if (e->dir[0])
        remove_dir(e->dir);
    e->dir[0] = '\0';
}

int env_check(struct env *e, const char **who)
{
    if (!e->agent_stopped && env_child_dead(&e->agent_pid)) {
        *who = "dlockd";
        return -1;
    }
    if (!redisproc_alive(&e->redis)) {
        *who = "redis-server";
        return -1;
    }
    return 0;
}

/* ---- /proc ---- */

static int read_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* utime + stime: fields 14 and 15 of /proc/PID/stat, counted from the state
 * field (3) that follows the command name in parentheses. */
static int read_cpu_ticks(pid_t pid, uint64_t *out)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (read_file(path, buf, sizeof buf) != 0)
        return -1;
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long utime, stime;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    *out = utime + stime;
    return 0;
}

static int read_rss_kb(pid_t pid, long *out)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (read_file(path, buf, sizeof buf) != 0)
        return -1;
    const char *p = strstr(buf, "\nVmRSS:");
    if (!p || sscanf(p + 7, "%ld", out) != 1)
        return -1;
    return 0;
}

/* The run time of every thread of pid, ns: 0 when it cannot be read. */
static uint64_t read_cpu_ns(pid_t pid)
{
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    uint64_t sum = 0;
    bool ok = true;
    struct dirent *de;
    while (ok && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char file[128];
        unsigned long long ns;
        snprintf(file, sizeof file, "%s/%.32s/schedstat", path, de->d_name);
        /* A thread gone meanwhile leaves its time out: tell it apart. */
        ok = read_file(file, buf, sizeof buf) == 0 && sscanf(buf, "%llu", &ns) == 1;
        sum += ok ? ns : 0;
    }
    closedir(d);
    return ok ? sum : 0;
}

int proc_sample(pid_t pid, struct proc_sample *s)
{
    s->t_ns = now_ns();
    s->cpu_ns = read_cpu_ns(pid);
    if (read_cpu_ticks(pid, &s->cpu_ticks) != 0 || read_rss_kb(pid, &s->rss_kb) != 0)
        return -1;
    return 0;
}

double proc_cpu_s(const struct proc_sample *a, const struct proc_sample *b)
{
    if (a->cpu_ns && b->cpu_ns && b->cpu_ns >= a->cpu_ns)
        return (double)(b->cpu_ns - a->cpu_ns) / 1e9;
    if (b->cpu_ticks < a->cpu_ticks)
        return 0;
    return (double)(b->cpu_ticks - a->cpu_ticks) / (double)sysconf(_SC_CLK_TCK);
}

double proc_cpu_pct(const struct proc_sample *a, const struct proc_sample *b)
{
    double wall = ns_to_s(b->t_ns - a->t_ns);
    return wall > 0 ? 100.0 * proc_cpu_s(a, b) / wall : 0.0;
}

double cpu_us_per_op(double cpu_s, double ops)
{
    return cpu_s >= 0 && ops > 0 ? cpu_s * 1e6 / ops : -1;
}

uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* user nice system idle iowait irq softirq steal: all but idle and iowait. */
int machine_sample(struct proc_sample *s)
{
    char buf[1024];
    unsigned long long v[8];
    s->t_ns = now_ns();
    s->rss_kb = 0;
    s->cpu_ns = 0;
    if (read_file("/proc/stat", buf, sizeof buf) != 0 ||
        sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) != 8)
        return -1;
    s->cpu_ticks = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    return 0;
}
