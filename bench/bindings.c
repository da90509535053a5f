/* SPDX-License-Identifier: BSD-3-Clause */
/* bindings.c -- the language bindings against each language's own Redis lock
 * library: each language's benchmark program (bench/bindings/LANG/run) runs
 * against the run's Redis and agent, and against a delay proxy in front of
 * that Redis with an agent of its own, and prints its figures as lines that
 * this part reads (bench/README.md, "Bindings"). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* For bindings_kill(), from a signal handler. */
static volatile pid_t child_pid;

/* One "ROW" or "VALID" line into out; 0, or -1 when the line is neither. */
static int parse_line(const char *line, struct binding_result *out)
{
    struct binding_row r;
    char lang[16];
    if (sscanf(line, "ROW %15s %15s %15s %23s %lf %lf %lf", lang, r.net, r.kase, r.impl, &r.ops,
               &r.p50_us, &r.p99_us) == 7) {
        if (out->nrows < BINDING_ROWS)
            out->rows[out->nrows++] = r;
        return 0;
    }
    if (sscanf(line, "VALID %15s %lf %lf", lang, &out->valid_ns, &out->get_us) == 3) {
        out->have_valid = true;
        return 0;
    }
    return -1;
}

/* Runs `run` with the environment of the part, reading its stdout. */
static int run_program(const char *run, char *const envp_add[], struct binding_result *out)
{
    int fds[2];
    if (pipe(fds) != 0) {
        perror("dlock-bench: pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("dlock-bench: fork");
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group: bindings_kill() ends what it started too */
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        for (int i = 0; envp_add[i]; i++)
            putenv(envp_add[i]);
        execl(run, run, (char *)NULL);
        fprintf(stderr, "dlock-bench: cannot run %s: %s\n", run, strerror(errno));
        _exit(127);
    }
    child_pid = pid;
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (parse_line(line, out) != 0)
            fputs(line, stderr); /* not ours to read: shown as the program's talk */
    }
    if (f)
        fclose(f);
    else
        close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    child_pid = 0;
    out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 0;
}

int bindings_reference(const struct driver *d, struct env *e, long n, struct summary *out)
{
    void *client = d->open(e);
    if (!client) {
        fprintf(stderr, "dlock-bench: %s: cannot open a client\n", d->label);
        return -1;
    }
    struct lat l = {0};
    int rc = lat_reserve(&l, (size_t)n);
    uint64_t start = now_ns();
    for (long i = 0; i < n && rc == 0; i++) {
        char name[64];
        uint64_t mid, t0 = now_ns();
        snprintf(name, sizeof name, "bench-reference-%s-%ld", d->label, i);
        rc = d->pair(client, name, &mid);
        if (rc == 0)
            lat_push(&l, now_ns() - t0);
        else
            fprintf(stderr, "dlock-bench: %s: %s\n", d->label, d->strerror(rc));
    }
    if (rc == 0)
        lat_summarise(&l, (double)(now_ns() - start) / 1e9, out);
    lat_free(&l);
    d->close(client);
    return rc == 0 ? 0 : -1;
}

int run_bindings(struct env *e, double delay_us, const char *langs, long pairs, double seconds,
                 struct binding_result *out, int max, int *n)
{
    *n = 0;
    struct env d;
    struct delay_result dr;
    struct delayproxy *proxy = delay_open(e, delay_us, &d, &dr);
    if (!proxy)
        return -1;
    static char env_vars[8][BENCH_PATH + 32];
    snprintf(env_vars[0], sizeof env_vars[0], "DLOCK_SOCKET=%s", e->agent_sock);
    snprintf(env_vars[1], sizeof env_vars[1], "DLOCK_SOCKET_DELAYED=%s", d.agent_sock);
    snprintf(env_vars[2], sizeof env_vars[2], "REDIS_SOCKET=%s", e->redis_sock);
    snprintf(env_vars[3], sizeof env_vars[3], "REDIS_SOCKET_DELAYED=%s", d.redis_sock);
    snprintf(env_vars[4], sizeof env_vars[4], "BENCH_PAIRS=%ld", pairs);
    snprintf(env_vars[5], sizeof env_vars[5], "BENCH_SECONDS=%g", seconds);
    snprintf(env_vars[6], sizeof env_vars[6], "DLOCK_BUILD_DIR=%s", DLOCK_BUILD_DIR);
    snprintf(env_vars[7], sizeof env_vars[7], "DLOCK_LIBRARY=%s", DLOCK_LIBRARY_PATH);
    char *envp_add[] = {env_vars[0], env_vars[1], env_vars[2], env_vars[3], env_vars[4],
                        env_vars[5], env_vars[6], env_vars[7], NULL};
    int rc = 0;
    char list[128];
    snprintf(list, sizeof list, "%s", langs);
    char *save = NULL;
    for (char *lang = strtok_r(list, ",", &save); lang && rc == 0 && *n < max;
         lang = strtok_r(NULL, ",", &save)) {
        struct binding_result *r = &out[(*n)++];
        memset(r, 0, sizeof *r);
        snprintf(r->lang, sizeof r->lang, "%s", lang);
        char run[BENCH_PATH + 64];
        snprintf(run, sizeof run, "%s/bench/bindings/%s/run", DLOCK_SOURCE_DIR, lang);
        fprintf(stderr, "dlock-bench: bindings: %s (%s)\n", lang, run);
        rc = run_program(run, envp_add, r);
    }
    delay_close(&d, proxy, &dr);
    for (int i = 0; i < *n; i++) {
        out[i].ping_us = dr.ping_direct.p50_us;
        out[i].ping_delayed_us = dr.ping_proxied.p50_us;
        out[i].agent_log_lines = dr.log_lines;
    }
    return rc;
}

void bindings_kill(void)
{
    if (child_pid > 0)
        kill(-child_pid, SIGKILL);
}
