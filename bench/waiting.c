/* SPDX-License-Identifier: BSD-3-Clause */
/* waiting.c -- what waiting costs Redis. Two agents of their own on the
 * run's Redis; a foreign client (plain hiredis, no agent) holds N names with
 * a long TTL, and each agent has clients waiting for N/2 of them. Once the
 * waiters have settled, Redis' total_commands_processed (which counts the
 * commands inside scripts too) is read before and after a window: the
 * commands per second that the waiting costs. Then the same with one hot
 * name that every waiter of both agents waits for. Each is measured twice
 * in the run: with the agents' fixed fast retry (retry_max_ms = 0, the
 * pacing of earlier versions) as the baseline, and with the default paced
 * retry. Figures are printed, never asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dlock.h"

#define HOLD_MS  600000 /* the foreign holder's TTL: longer than the part */
#define NAME_FMT "bench-wait-%ld"
#define HOT_NAME "bench-wait-hot"

static const char *const mode_settings[WAITING_MODES] = {
    "retry_max_ms = 0\nmax_waiters_per_conn = 100000\n", "max_waiters_per_conn = 100000\n"};
const char *const waiting_mode_names[WAITING_MODES] = {"fixed fast retry (baseline)",
                                                       "paced retry (default)"};

struct tally {
    long answered, errors;
    int first_error;
};

static void on_answer(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    (void)c;
    (void)lease;
    struct tally *t = arg;
    t->answered++;
    if (status != 0 && t->errors++ == 0)
        t->first_error = status;
}

static long long commands(struct plain *p)
{
    char *info = redis_info(p, "stats");
    char buf[32];
    long long v = -1;
    if (info && info_value(info, "total_commands_processed", buf, sizeof buf) == 0)
        v = atoll(buf);
    free(info);
    return v;
}

/* Redis' commands per second over window_s, the waiters waiting. */
static double rate(struct plain *p, double window_s)
{
    long long a = commands(p);
    uint64_t t0 = now_ns();
    sleep_ms((int)(window_s * 1000));
    long long b = commands(p);
    double s = ns_to_s(now_ns() - t0);
    return a < 0 || b < 0 || s <= 0 ? -1 : (double)(b - a) / s;
}

static void dispatch_all(dlock_client **c, int n)
{
    for (int i = 0; i < n; i++)
        if (c[i])
            dlock_client_dispatch(c[i]);
}

static void close_all(dlock_client **c, int n)
{
    for (int i = 0; i < n; i++) {
        if (c[i])
            dlock_client_close(c[i]);
        c[i] = NULL;
    }
}

/* One mode: the agents started with its settings, the N names, then the hot
 * name. 0, or -1 after printing why. */
static int run_mode(struct env *e, struct plain *p, int m, long names, int hot, double settle_s,
                    double window_s, struct waiting_mode *out)
{
    struct side_agent ag[2] = {{.tag = "wait-a", .settings = mode_settings[m]},
                               {.tag = "wait-b", .settings = mode_settings[m]}};
    dlock_client *many[2] = {NULL, NULL};
    dlock_client **hc = calloc((size_t)(2 * hot), sizeof *hc);
    struct tally t = {0};
    dlock_acquire_options o = {.ttl_ms = BENCH_TTL_MS, .wait_ms = DLOCK_WAIT_FOREVER};
    char name[64];
    int rc = hc ? side_start(e, ag, 2) : -1;
    for (int k = 0; k < 2 && rc == 0; k++) {
        rc = dlock_client_open(&many[k], ag[k].sock);
        if (rc != 0)
            fprintf(stderr, "dlock-bench: waiting: dlock_client_open: %s\n", dlock_strerror(rc));
    }
    for (long i = 0; i < names && rc == 0; i++) {
        snprintf(name, sizeof name, NAME_FMT, i);
        rc = plain_hold(p, name, HOLD_MS);
        if (rc == 0)
            rc = dlock_lease_acquire_async(many[i % 2], name, &o, on_answer, &t);
        if (rc != 0)
            fprintf(stderr, "dlock-bench: waiting: %s: %s\n", name,
                    rc < -100 ? plain_strerror(rc) : dlock_strerror(rc));
    }
    if (rc == 0) {
        sleep_ms((int)(settle_s * 1000));
        dispatch_all(many, 2);
        out->names_cmds_s = rate(p, window_s);
        dispatch_all(many, 2);
    }
    close_all(many, 2);
    for (long i = 0; i < names && rc == 0; i++) {
        snprintf(name, sizeof name, NAME_FMT, i);
        char channel[128];
        snprintf(channel, sizeof channel, BENCH_PREFIX "{" BENCH_PREFIX "%s} released", name);
        rc = plain_drop_notify(p, name, channel);
    }
    if (rc == 0)
        rc = plain_hold(p, HOT_NAME, HOLD_MS);
    for (int i = 0; i < 2 * hot && rc == 0; i++) {
        rc = dlock_client_open(&hc[i], ag[i % 2].sock);
        if (rc == 0)
            rc = dlock_lease_acquire_async(hc[i], HOT_NAME, &o, on_answer, &t);
        if (rc != 0)
            fprintf(stderr, "dlock-bench: waiting: hot name: %s\n", dlock_strerror(rc));
    }
    if (rc == 0) {
        sleep_ms((int)(settle_s * 1000));
        dispatch_all(hc, 2 * hot);
        out->hot_cmds_s = rate(p, window_s);
        dispatch_all(hc, 2 * hot);
    }
    if (hc)
        close_all(hc, 2 * hot);
    free(hc);
    if (rc == 0)
        rc = plain_drop_notify(p, HOT_NAME, BENCH_PREFIX "{" BENCH_PREFIX HOT_NAME "} released");
    side_stop(e, ag, 2);
    out->answered = t.answered;
    out->errors = t.errors;
    out->first_error = t.first_error;
    out->log_lines = ag[0].log_lines + ag[1].log_lines;
    return rc == 0 ? 0 : -1;
}

int run_waiting(struct env *e, long names, int hot, bool quick, struct waiting_result *out)
{
    memset(out, 0, sizeof *out);
    out->names = names;
    out->hot = hot;
    /* The paced retry of a waiter whose notices arrive comes up to 15 s
     * apart (docs/architecture.md, "Waiting's pace"): the window spans two
     * such periods, after one to settle, so that it holds the retries and
     * not only the keep-alives. The quick run's window is too short for
     * that: it shows the keep-alives and the first retries only. */
    out->settle_s = quick ? 2.0 : 17.0;
    out->window_s = quick ? 2.0 : 30.0;
    struct plain *p = plain_open(e->redis_sock);
    if (!p) {
        fprintf(stderr, "dlock-bench: waiting: cannot connect to redis-server\n");
        return -1;
    }
    int rc = 0;
    for (int m = 0; m < WAITING_MODES && rc == 0; m++)
        rc = run_mode(e, p, m, names, hot, out->settle_s, out->window_s, &out->mode[m]);
    plain_close(p);
    return rc;
}

void report_waiting(const struct waiting_result *r)
{
    printf("\nwaiting: Redis commands/s (total_commands_processed, script commands included) "
           "while waiters wait for names a foreign client holds\n");
    char a[48], b[48];
    snprintf(a, sizeof a, "%ld names, 2 agents", r->names);
    snprintf(b, sizeof b, "1 hot name, 2 x %d waiters", r->hot);
    printf("  %-30s %22s %24s %8s %7s\n", "pacing", a, b, "answers", "errors");
    for (int m = 0; m < WAITING_MODES; m++) {
        const struct waiting_mode *w = &r->mode[m];
        printf("  %-30s %22.0f %24.0f %8ld %7ld", waiting_mode_names[m], w->names_cmds_s,
               w->hot_cmds_s, w->answered, w->errors);
        if (w->errors)
            printf(" (first: %s)", dlock_strerror(w->first_error));
        printf("\n");
    }
    const struct waiting_mode *f = &r->mode[0], *s = &r->mode[1];
    if (f->names_cmds_s > 0 && s->names_cmds_s >= 0)
        printf("  paced / fixed: names %.3fx, hot name %.3fx; target for %ld names: <= 5000/s "
               "(4000 names)\n",
               s->names_cmds_s / f->names_cmds_s,
               f->hot_cmds_s > 0 ? s->hot_cmds_s / f->hot_cmds_s : 0.0, r->names);
    printf("  (settle %.0f s, window %.0f s each; the agents logged %d and %d line(s) at warn "
           "or above)\n",
           r->settle_s, r->window_s, f->log_lines, s->log_lines);
}
