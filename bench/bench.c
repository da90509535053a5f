/* SPDX-License-Identifier: BSD-3-Clause */
/* bench.c -- dlock-bench: measures dlock against a plain hiredis client on a
 * private Redis and agent, and prints the figures next to their targets. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

/* The project's performance targets (bench/README.md); reported, never
 * asserted. */
#define TARGET_LATENCY_RATIO    1.15 /* dlock / plain, 1 client, p50 and mean */
#define TARGET_THROUGHPUT_LOOP  1.0  /* dlock / plain, many clients, pairs/s, loopback */
#define TARGET_THROUGHPUT_DELAY 2.0  /* the same with Redis across the delay */
#define TARGET_AGENT_CPU        5.0  /* % of one core with the leases held */
#define TARGET_BYTES_PER_LEASE  512.0
#define TARGET_VALID_NS         50.0  /* dlock_lease_valid(), ns per call */
#define TARGET_VALID_VS_PING    500.0 /* agent round trip p50 / valid() */
#define TARGET_FLEET_CPU_RATIO  1.2   /* Redis CPU per pair, 100 agents / 1 agent */
#define TARGET_FLEET_AGENTS     100   /* the agent count that target is for */
#define TARGET_REDIS_CPU_RATIO  0.5   /* dlock / plain, Redis CPU per pair, many clients */
#define TARGET_DELAY_LATENCY    0.6   /* dlock / plain, 1 client, p50, Redis across a delay */
#define TARGET_DELAY_ACQUIRE    1.1   /* delayed acquire p50 / (Redis PING + agent ping), p50s */
#define TARGET_WAKE_PINGS       2.0   /* cross-agent wake p50, in cold Redis PINGs (p50) */
#define TARGET_TLS_RATIO        1.2   /* dlock 1-client pair p50, TLS / plaintext */
#define TARGET_TLS_CPU_RATIO    2.0   /* the agent's CPU per pair, TLS / plaintext */
#define TARGET_COHORT_RATIO     2.0   /* grants/s, cohort handoff on / off, one agent */
#define TARGET_COHORT_SPREAD    10.0  /* (max - min) / mean of the grants per process, % */
#define TARGET_SHARE_MIN        35.0  /* each host's share of the grants, two hosts, % */
#define TARGET_SHARE_MAX        65.0
#define TARGET_WAIT_SLACK_MS    10.0 /* max wait per acquire, two hosts: cohort_ms + this */
#define TARGET_SHARED_RATIO     3.0  /* grants/s, shared / exclusive, the same section */
#define TARGET_BINDING_RATIO    1.0  /* a binding / its language's lock library, every row */
#define TARGET_BINDING_HARD     2.0  /* the same, delayed and contended rows */

const char *bench_handoff_setting = "";

struct opts {
    long pairs;     /* -n */
    int clients;    /* -c */
    double seconds; /* -d */
    long leases;    /* -l */
    double window;  /* -w */
    long calls;     /* -k */
    long round_trips;
    long quorum_pairs;           /* -m, 0 = no quorum part */
    int fleet[FLEET_MAX_COUNTS]; /* -F, agent counts */
    int nfleet;                  /* 0 = no fleet part */
    double delay_us;             /* -D, one-way delay; 0 = no delayed part */
    long wake_rounds;            /* -W, 0 = no cross-agent wake part */
    int cohort_procs;            /* -C, 0 = no cohort part */
    int host_procs;              /* -H, per agent, 0 = no two hosts part */
    int kinds_procs;             /* -R, 0 = no lock kinds part */
    double fair_seconds;         /* -A, window of each fairness run, 0 = no fairness part */
    long wait_names;             /* -N, names waited for in the waiting part, 0 = no part */
    bool tls;                    /* -T 1 (default), 0 = no TLS part */
    bool quick;                  /* -q */
    bool keep;                   /* -K */
    const char *bindings;        /* -B, languages; the bindings part alone */
};

static struct env the_env;

/* ---- clean-up on every way out ---- */

static void at_exit(void)
{
    env_stop(&the_env);
}

/* A signal: kill the children and remove what we can, with async-signal-safe
 * calls only. */
static void on_signal(int sig)
{
    struct env *e = &the_env;
    quorum_kill();
    fleet_kill();
    side_kill();
    delay_kill();
    tls_kill();
    bindings_kill();
    if (e->agent_pid > 0)
        kill(e->agent_pid, SIGKILL);
    if (e->redis.pid > 0)
        kill(e->redis.pid, SIGKILL);
    if (e->dir[0]) {
        const char *files[] = {e->redis_sock, e->agent_sock, e->conf, e->redis_log, e->agent_log};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            unlink(files[i]);
        rmdir(e->dir);
    }
    _exit(128 + sig);
}

static void install_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* hiredis writes with plain write() */
}

/* ---- options ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: dlock-bench [-qK] [-n PAIRS] [-c CLIENTS] [-d SECONDS] [-l LEASES] "
               "[-w SECONDS] [-k CALLS] [-m PAIRS] [-F LIST] [-D US] [-W ROUNDS] [-C PROCS] "
               "[-H PROCS] [-R PROCS] [-A SECONDS] [-T 0|1] [-N NAMES] [-B LANGS]\n"
               "  -n PAIRS    acquire+release pairs of the 1-client runs (loopback and\n"
               "              delayed), and per row of the fleet run (default 20000)\n"
               "  -c CLIENTS  threads of the many-client runs (default 50)\n"
               "  -d SECONDS  duration of the many-client runs, and of each cohort, two\n"
               "              hosts and lock kinds run (default 3)\n"
               "  -l LEASES   leases held at once (default 100000)\n"
               "  -w SECONDS  window over which the held leases are watched (default 30)\n"
               "  -k CALLS    calls per timed loop of the lease check (default 10000000)\n"
               "  -m PAIRS    pairs per configuration of the single/quorum mode run\n"
               "              (default 10000; 0 skips it)\n"
               "  -F LIST     agent counts of the fleet run, comma-separated\n"
               "              (default 1,10,100; 0 skips it)\n"
               "  -D US       one-way delay of the proxy in front of Redis in the delayed\n"
               "              runs (the delayed part, the TLS part's), microseconds\n"
               "              (default 100; 0 skips them)\n"
               "  -W ROUNDS   rounds of the cross-agent wake run (default 2000; 0 skips it)\n"
               "  -C PROCS    worker processes of the cohort runs (default 4; 0 skips them)\n"
               "  -H PROCS    worker processes per agent of the two hosts run (default 2;\n"
               "              0 skips it)\n"
               "  -R PROCS    readers of the lock kinds runs: as many processes of each\n"
               "              kind, and one writer more in the read-mostly run (default 4;\n"
               "              0 skips them)\n"
               "  -A SECONDS  window of each run of the fairness part: a victim's renewal\n"
               "              lateness alone and beside another uid's flood (default 5;\n"
               "              0 skips it; needs root)\n"
               "  -T 0|1      the TLS part: dlock over TLS against plaintext, with\n"
               "              redis-benchmark's SET as the plain clients' baseline\n"
               "              (default 1; needs the openssl command)\n"
               "  -N NAMES    names a foreign client holds and two agents wait for in the\n"
               "              waiting part, which counts Redis' commands/s (default 4000;\n"
               "              0 skips it)\n"
               "  -q          quick run: 2000 pairs, 1 s, 10000 leases, 12 s window,\n"
               "              1000000 calls per loop, 5000 round trips, 1000 quorum pairs,\n"
               "              fleet of 1 and 4 agents, 200 wake rounds, 2 s fairness runs,\n"
               "              400 waiting names\n"
               "  -O          handoff off: the agents of the pair, delayed and single/quorum\n"
               "              runs take every grant from Redis (cohort_handoffs = 0)\n"
               "  -K          keep the temp dir (logs, configurations) at the end\n"
               "  -B LANGS    the bindings part alone: each language's binding against\n"
               "              its most used Redis lock library, for the comma-separated\n"
               "              languages (python,go,node); uses -n, -d and -D\n"
               "Starts its own redis-server (from PATH) and dlockd; see bench/README.md.\n");
}

static int parse_num(const char *s, double min, double max, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* "1,10,100" into counts, each 1..FLEET_MAX_AGENTS; "0" alone: none. */
static int parse_counts(const char *s, struct opts *o)
{
    o->nfleet = 0;
    if (strcmp(s, "0") == 0)
        return 0;
    for (;;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > FLEET_MAX_AGENTS || o->nfleet == FLEET_MAX_COUNTS)
            return -1;
        o->fleet[o->nfleet++] = (int)v;
        if (*end == '\0')
            return 0;
        if (*end != ',')
            return -1;
        s = end + 1;
    }
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    const char *fleet = NULL;
    /* n c d l w k m D W C H A R T, -1 = not given */
    double v[15] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    static const char letters[] = "ncdlwkmDWCHARTN";
    static const double lo[] = {1, 1, 0.1, 1, 1, 1000, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    static const double hi[] = {1e8,
                                1000,
                                3600,
                                1e7,
                                3600,
                                1e10,
                                1e8,
                                1e6,
                                1e6,
                                SIDE_MAX_WORKERS,
                                SIDE_MAX_WORKERS / 2,
                                600,
                                SIDE_MAX_WORKERS - 1,
                                1,
                                100000};
    int ch;
    while ((ch = getopt(argc, argv, "n:c:d:l:w:k:m:F:D:W:C:H:A:R:T:N:B:qKOh")) != -1) {
        const char *at = strchr(letters, ch);
        if (ch == 'F') {
            fleet = optarg;
        } else if (ch == 'B') {
            o->bindings = optarg;
        } else if (ch == 'q') {
            o->quick = true;
        } else if (ch == 'K') {
            o->keep = true;
        } else if (ch == 'O') {
            bench_handoff_setting = "cohort_handoffs = 0\n";
        } else if (ch == 'h') {
            usage(stdout);
            exit(0);
        } else if (!at ||
                   parse_num(optarg, lo[at - letters], hi[at - letters], &v[at - letters]) != 0) {
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return -1;
    }
    o->pairs = v[0] > 0 ? (long)v[0] : o->quick ? 2000 : 20000;
    o->clients = v[1] > 0 ? (int)v[1] : 50;
    o->seconds = v[2] > 0 ? v[2] : o->quick ? 1.0 : 3.0;
    o->leases = v[3] > 0 ? (long)v[3] : o->quick ? 10000 : 100000;
    o->window = v[4] > 0 ? v[4] : o->quick ? 12.0 : 30.0;
    o->calls = v[5] > 0 ? (long)v[5] : o->quick ? 1000000 : 10000000;
    o->round_trips = o->quick ? 5000 : 20000;
    o->quorum_pairs = v[6] >= 0 ? (long)v[6] : o->quick ? 1000 : 10000;
    o->delay_us = v[7] >= 0 ? v[7] : 100;
    o->wake_rounds = v[8] >= 0 ? (long)v[8] : o->quick ? 200 : 2000;
    o->cohort_procs = v[9] >= 0 ? (int)v[9] : 4;
    o->host_procs = v[10] >= 0 ? (int)v[10] : 2;
    o->fair_seconds = v[11] >= 0 ? v[11] : o->quick ? 2.0 : 5.0;
    o->kinds_procs = v[12] >= 0 ? (int)v[12] : 4;
    o->tls = v[13] != 0;
    o->wait_names = v[14] >= 0 ? (long)v[14] : o->quick ? 400 : 4000;
    if (parse_counts(fleet ? fleet : o->quick ? "1,4" : "1,10,100", o) != 0) {
        fprintf(stderr,
                "dlock-bench: -F takes up to %d agent counts, each 1 to %d, "
                "comma-separated, or 0\n",
                FLEET_MAX_COUNTS, FLEET_MAX_AGENTS);
        return -1;
    }
    return 0;
}

/* ---- formatting ---- */

/* Rotating static buffers, so that a printf can take several at once. */
static char *buf_next(void)
{
    static char bufs[16][48];
    static int i;
    return bufs[i++ % 16];
}

/* An integer with thousands separators. */
static const char *fmt_count(double v)
{
    char digits[32], *out = buf_next();
    long long n = (long long)(v + (v < 0 ? -0.5 : 0.5));
    int len = snprintf(digits, sizeof digits, "%lld", n < 0 ? -n : n), o = 0;
    if (n < 0)
        out[o++] = '-';
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
    return out;
}

static const char *fmt_us(double us)
{
    char *b = buf_next();
    snprintf(b, 48, "%.1f us", us);
    return b;
}

/* A wait: in us, or in ms from 10 ms up. */
static const char *fmt_wait(double us)
{
    char *b = buf_next();
    if (us >= 10000)
        snprintf(b, 48, "%.1f ms", us / 1e3);
    else
        snprintf(b, 48, "%.1f us", us);
    return b;
}

static const char *fmt_ns(double ns)
{
    char *b = buf_next();
    snprintf(b, 48, "%.1f ns", ns);
    return b;
}

static const char *fmt_pct(double pct)
{
    char *b = buf_next();
    snprintf(b, 48, "%.1f %%", pct);
    return b;
}

static const char *fmt_ratio(double a, double b)
{
    char *s = buf_next();
    if (b > 0)
        snprintf(s, 48, "%.2f", a / b);
    else
        snprintf(s, 48, "-");
    return s;
}

static const char *verdict(bool met)
{
    return met ? "met" : "MISSED";
}

/* ---- the targets table ---- */

#define TARGETS_MAX 64

static struct target_row {
    char target[72], measured[32], baseline[32];
    bool met;
} targets[TARGETS_MAX];
static int ntargets;

const char *target_note(const char *target, const char *measured, const char *baseline, bool met)
{
    if (ntargets < TARGETS_MAX) {
        struct target_row *t = &targets[ntargets++];
        snprintf(t->target, sizeof t->target, "%s", target);
        snprintf(t->measured, sizeof t->measured, "%s", measured);
        snprintf(t->baseline, sizeof t->baseline, "%s", baseline);
        t->met = met;
    }
    return verdict(met);
}

/* Every target the run's parts noted, in one table. */
static void report_targets(void)
{
    if (ntargets == 0)
        return;
    printf("\ntargets of this run (bench/README.md; figures only, never asserted); handoff %s\n",
           *bench_handoff_setting ? "off (-O): the pair, delayed and quorum parts take every grant "
                                    "from Redis"
                                  : "on (the default; -O for the Redis path)");
    printf("  %-62s %14s %14s   %s\n", "target", "measured", "baseline", "met?");
    for (int i = 0; i < ntargets; i++)
        printf("  %-62s %14s %14s   %s\n", targets[i].target, targets[i].measured,
               targets[i].baseline, verdict(targets[i].met));
}

/* One row: figure, dlock, plain, ratio, target. */
static void row(const char *what, const char *dlock, const char *plain, const char *ratio,
                const char *target)
{
    printf("  %-30s %14s %14s %7s   %s\n", what, dlock, plain, ratio, target);
}

static void row_head(void)
{
    row("figure", "dlock", "plain hiredis", "ratio", "target");
}

/* ---- report ---- */

static void report_errors(const struct pair_result *d, const struct pair_result *p)
{
    row("failed pairs", fmt_count((double)d->errors), fmt_count((double)p->errors), "", "0");
    if (d->errors)
        printf("    dlock first error: %s\n", dlock_strerror(d->first_error));
    if (p->errors)
        printf("    plain first error: %s\n", plain_strerror(p->first_error));
}

/* A CPU share, or "-" when the run was too short for /proc's clock ticks. */
static const char *fmt_cpu(const struct cpu_share *c, double pct)
{
    return c->wall_s >= 1.0 ? fmt_pct(pct) : "-";
}

/* CPU per pair in microseconds, or "-" when unknown. */
static const char *fmt_cpu_us(double us)
{
    return us >= 0 ? fmt_us(us) : "-";
}

/* The sum of the known figures of a, b and c, or -1 when none is known. */
static double cpu_sum(double a, double b, double c)
{
    double sum = -1;
    const double v[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (v[i] >= 0)
            sum = (sum < 0 ? 0 : sum) + v[i];
    return sum;
}

/* CPU per pair beside the latencies: the steadier figure on a shared
 * machine. */
static void report_cpu(const struct pair_result *d, const struct pair_result *p)
{
    row("CPU per pair: dlockd", fmt_cpu_us(d->agent_us), "-", "", "(utime + stime)");
    row("CPU per pair: redis-server", fmt_cpu_us(d->redis_us), fmt_cpu_us(p->redis_us),
        fmt_ratio(d->redis_us, p->redis_us), "");
    row("CPU per pair: client", fmt_cpu_us(d->client_us), fmt_cpu_us(p->client_us),
        fmt_ratio(d->client_us, p->client_us), "(its threads' CPU time)");
    double ds = cpu_sum(d->agent_us, d->redis_us, d->client_us),
           ps = cpu_sum(-1, p->redis_us, p->client_us);
    row("CPU per pair: all three", fmt_cpu_us(ds), fmt_cpu_us(ps), fmt_ratio(ds, ps), "");
    row("CPU other processes", fmt_cpu(&d->cpu, d->cpu.others), fmt_cpu(&p->cpu, p->cpu.others), "",
        "(noise if well above 0)");
}

static void report_single(const struct opts *o, const struct pair_result *d,
                          const struct pair_result *p)
{
    char t[64];
    char name[96];
    printf("\n1 client: %s acquire+release pairs on one name (try-once, TTL %d s)\n",
           fmt_count((double)o->pairs), BENCH_TTL_MS / 1000);
    row_head();
    double rp50 = p->s.p50_us > 0 ? d->s.p50_us / p->s.p50_us : 0;
    double rmean = p->s.mean_us > 0 ? d->s.mean_us / p->s.mean_us : 0;
    snprintf(name, sizeof name, "1-client pair p50 <= %.2fx plain", TARGET_LATENCY_RATIO);
    snprintf(t, sizeof t, "<= %.2f  %s", TARGET_LATENCY_RATIO,
             target_note(name, fmt_us(d->s.p50_us), fmt_us(p->s.p50_us),
                         rp50 > 0 && rp50 <= TARGET_LATENCY_RATIO));
    row("pair latency p50", fmt_us(d->s.p50_us), fmt_us(p->s.p50_us),
        fmt_ratio(d->s.p50_us, p->s.p50_us), t);
    snprintf(name, sizeof name, "1-client pair mean <= %.2fx plain", TARGET_LATENCY_RATIO);
    snprintf(t, sizeof t, "<= %.2f  %s", TARGET_LATENCY_RATIO,
             target_note(name, fmt_us(d->s.mean_us), fmt_us(p->s.mean_us),
                         rmean > 0 && rmean <= TARGET_LATENCY_RATIO));
    row("pair latency mean", fmt_us(d->s.mean_us), fmt_us(p->s.mean_us),
        fmt_ratio(d->s.mean_us, p->s.mean_us), t);
    row("pair latency p99", fmt_us(d->s.p99_us), fmt_us(p->s.p99_us),
        fmt_ratio(d->s.p99_us, p->s.p99_us), "");
    row("pair latency max", fmt_us(d->s.max_us), fmt_us(p->s.max_us), "", "");
    row("pairs/s", fmt_count(d->s.per_s), fmt_count(p->s.per_s), fmt_ratio(d->s.per_s, p->s.per_s),
        "");
    row("  acquire part p50", fmt_us(d->acquire.p50_us), fmt_us(p->acquire.p50_us),
        fmt_ratio(d->acquire.p50_us, p->acquire.p50_us), "(SET NX PX for plain)");
    row("  release part p50", fmt_us(d->release.p50_us), fmt_us(p->release.p50_us),
        fmt_ratio(d->release.p50_us, p->release.p50_us), "(EVALSHA for plain)");
    row("bare round trip p50", fmt_us(d->ping.p50_us), fmt_us(p->ping.p50_us),
        fmt_ratio(d->ping.p50_us, p->ping.p50_us), "(dlock ping / redis PING)");
    report_errors(d, p);
    report_cpu(d, p);
}

/* Redis' CPU per pair (INFO cpu), dlock against plain. */
static void report_redis_cpu(const char *what, const char *part, const struct pair_result *d,
                             const struct pair_result *p)
{
    char t[96];
    char name[96];
    if (d->redis_cpu_us < 0 || p->redis_cpu_us <= 0) {
        row(what, d->redis_cpu_us < 0 ? "-" : fmt_us(d->redis_cpu_us),
            p->redis_cpu_us < 0 ? "-" : fmt_us(p->redis_cpu_us), "", "(INFO cpu not read)");
        return;
    }
    snprintf(name, sizeof name, "%s: Redis CPU per pair <= %.2fx plain", part,
             TARGET_REDIS_CPU_RATIO);
    snprintf(t, sizeof t, "<= %.2f  %s", TARGET_REDIS_CPU_RATIO,
             target_note(name, fmt_us(d->redis_cpu_us), fmt_us(p->redis_cpu_us),
                         d->redis_cpu_us <= TARGET_REDIS_CPU_RATIO * p->redis_cpu_us));
    row(what, fmt_us(d->redis_cpu_us), fmt_us(p->redis_cpu_us),
        fmt_ratio(d->redis_cpu_us, p->redis_cpu_us), t);
}

/* The rows both many-client tables share: throughput against its target,
 * then the pair latencies (with the mean and the count when `all`). */
static void throughput_rows(const char *part, const struct pair_result *d,
                            const struct pair_result *p, bool all, double target)
{
    char t[96];
    char name[96];
    row_head();
    double r = p->s.per_s > 0 ? d->s.per_s / p->s.per_s : 0;
    snprintf(name, sizeof name, "%s: pairs/s >= %.1fx plain", part, target);
    snprintf(t, sizeof t, ">= %.2f  %s", target,
             target_note(name, fmt_count(d->s.per_s), fmt_count(p->s.per_s), r >= target));
    row("aggregate pairs/s", fmt_count(d->s.per_s), fmt_count(p->s.per_s),
        fmt_ratio(d->s.per_s, p->s.per_s), t);
    row("pair latency p50", fmt_us(d->s.p50_us), fmt_us(p->s.p50_us),
        fmt_ratio(d->s.p50_us, p->s.p50_us), "");
    row("pair latency p99", fmt_us(d->s.p99_us), fmt_us(p->s.p99_us),
        fmt_ratio(d->s.p99_us, p->s.p99_us), "");
    if (!all)
        return;
    row("pair latency mean", fmt_us(d->s.mean_us), fmt_us(p->s.mean_us),
        fmt_ratio(d->s.mean_us, p->s.mean_us), "");
    row("pairs done", fmt_count((double)d->s.n), fmt_count((double)p->s.n), "", "");
}

static void report_multi(const struct opts *o, const struct pair_result *d,
                         const struct pair_result *p)
{
    printf("\n%d clients on distinct names, %.1f s each (a thread and a connection per "
           "client; %ld cores)\n",
           o->clients, o->seconds, sysconf(_SC_NPROCESSORS_ONLN));
    char part[48];
    snprintf(part, sizeof part, "%d clients", o->clients);
    throughput_rows(part, d, p, true, TARGET_THROUGHPUT_LOOP);
    report_redis_cpu("Redis CPU per pair", part, d, p);
    report_errors(d, p);
    report_cpu(d, p);
}

/* ---- report: Redis across a delay ---- */

/* How late the proxy released its chunks: the precision of the delay. */
static void report_late(const char *what, const struct delay_lateness *l)
{
    char v[64], t[96];
    snprintf(v, sizeof v, "%.1f / %.1f us", l->p50_us, l->p99_us);
    snprintf(t, sizeof t, "(context: %s chunks, max %.1f us)", fmt_count((double)l->chunks),
             l->max_us);
    row(what, v, "", "", t);
}

static void report_delay_head(const struct delay_result *r)
{
    char v[64], t[96];
    printf("\nRedis across a network: a proxy delays each chunk %.0f us each way; an agent of its "
           "own (-r at the proxy) and the plain client both go through it\n",
           r->delay_us);
    row("figure", "through proxy", "direct", "added", "");
    snprintf(v, sizeof v, "%.1f", r->ping_proxied.p50_us - r->ping_direct.p50_us);
    snprintf(t, sizeof t, "(context: added us; %.0f us asked per round trip)", 2 * r->delay_us);
    row("Redis PING p50 (plain hiredis)", fmt_us(r->ping_proxied.p50_us),
        fmt_us(r->ping_direct.p50_us), v, t);
    snprintf(v, sizeof v, "%.1f", r->ping_proxied.p99_us - r->ping_direct.p99_us);
    row("Redis PING p99 (plain hiredis)", fmt_us(r->ping_proxied.p99_us),
        fmt_us(r->ping_direct.p99_us), v, "(context)");
    report_late("proxy chunk late p50/p99", &r->late_ping);
}

static void report_delay(const struct delay_result *r)
{
    char t[96], n[96];
    report_delay_head(r);
    printf("\n  1 client, %s acquire+release pairs on one name (try-once, TTL %d s)\n",
           fmt_count((double)r->pairs), BENCH_TTL_MS / 1000);
    row_head();
    const struct pair_result *d = &r->d1, *p = &r->p1;
    double rp50 = p->s.p50_us > 0 ? d->s.p50_us / p->s.p50_us : 0;
    snprintf(n, sizeof n, "delayed 1-client pair p50 <= %.2fx plain", TARGET_DELAY_LATENCY);
    snprintf(t, sizeof t, "<= %.2f  %s", TARGET_DELAY_LATENCY,
             target_note(n, fmt_us(d->s.p50_us), fmt_us(p->s.p50_us),
                         rp50 > 0 && rp50 <= TARGET_DELAY_LATENCY));
    row("pair latency p50", fmt_us(d->s.p50_us), fmt_us(p->s.p50_us),
        fmt_ratio(d->s.p50_us, p->s.p50_us), t);
    row("pair latency p90", fmt_us(d->s.p90_us), fmt_us(p->s.p90_us),
        fmt_ratio(d->s.p90_us, p->s.p90_us), "");
    row("pair latency p99", fmt_us(d->s.p99_us), fmt_us(p->s.p99_us),
        fmt_ratio(d->s.p99_us, p->s.p99_us), "");
    /* The floor of a delayed acquire: one round trip to Redis across the
     * delay and one local hop to the agent. */
    double floor_us = r->ping_proxied.p50_us + d->ping.p50_us;
    snprintf(n, sizeof n, "delayed acquire p50 <= %.1fx (PING + agent hop)", TARGET_DELAY_ACQUIRE);
    snprintf(t, sizeof t, "<= %.1fx %s  %s", TARGET_DELAY_ACQUIRE, fmt_us(floor_us),
             target_note(n, fmt_us(d->acquire.p50_us), fmt_us(floor_us),
                         d->acquire.n > 0 && d->acquire.p50_us <= TARGET_DELAY_ACQUIRE * floor_us));
    row("  acquire part p50", fmt_us(d->acquire.p50_us), fmt_us(p->acquire.p50_us),
        fmt_ratio(d->acquire.p50_us, p->acquire.p50_us), t);
    row("  release part p50", fmt_us(d->release.p50_us), fmt_us(p->release.p50_us),
        fmt_ratio(d->release.p50_us, p->release.p50_us), "(EVALSHA for plain)");
    row("  agent ping p50 (local hop)", fmt_us(d->ping.p50_us), "", "", "(context)");
    report_late("proxy chunk late p50/p99", &r->late_single);
    report_errors(d, p);
    report_cpu(d, p);
    d = &r->dm;
    p = &r->pm;
    printf("\n  %d clients on distinct names, %.1f s each\n", r->clients, r->seconds);
    snprintf(n, sizeof n, "delayed %d clients", r->clients);
    throughput_rows(n, d, p, false, TARGET_THROUGHPUT_DELAY);
    report_redis_cpu("Redis CPU per pair", n, d, p);
    report_late("proxy chunk late p50/p99", &r->late_multi);
    report_errors(d, p);
    report_cpu(d, p);
    printf("  checked on the way: agent ready after %s ms, %d log line(s) at warn or above, exit "
           "status %d after SIGTERM\n",
           fmt_count(r->agent_ready_ms), r->log_lines, r->agent_exit);
}

/* A row of the lease table: figure, value, target. */
static void lrow(const char *what, const char *value, const char *target)
{
    printf("  %-34s %24s   %s\n", what, value, target);
}

static void report_leases_acquired(const struct lease_result *r)
{
    char v[64], t[64];
    snprintf(v, sizeof v, "%s in %.2f s", fmt_count((double)r->held), r->acq_s);
    snprintf(t, sizeof t, "%s/s, dlockd CPU %.0f %%", fmt_count((double)r->held / r->acq_s),
             r->acq_cpu_agent);
    lrow("leases acquired", v, t);
    if (r->acq_errors)
        lrow("acquire errors", fmt_count((double)r->acq_errors), dlock_strerror(r->first_error));
}

static void report_leases_memory(const struct lease_result *r)
{
    char v[64], t[64];
    snprintf(v, sizeof v, "%s -> %s kB", fmt_count((double)r->rss_idle_kb),
             fmt_count((double)r->rss_held_kb));
    snprintf(t, sizeof t, "peak %s kB", fmt_count((double)r->rss_peak_kb));
    lrow("dlockd RSS idle -> held", v, t);
    double per = r->held ? (double)(r->rss_held_kb - r->rss_idle_kb) * 1024.0 / (double)r->held : 0;
    char n[64];
    snprintf(n, sizeof n, "bytes per lease <= %.0f (%s leases)", TARGET_BYTES_PER_LEASE,
             fmt_count((double)r->held));
    snprintf(t, sizeof t, "<= %.0f  %s", TARGET_BYTES_PER_LEASE,
             target_note(n, fmt_count(per), "", r->held > 0 && per <= TARGET_BYTES_PER_LEASE));
    lrow("bytes per lease", fmt_count(per), t);
}

static void report_leases_renewals(const struct lease_result *r)
{
    char v[64], t[80];
    double period_s = BENCH_TTL_MS / 3000.0;
    snprintf(t, sizeof t, "about %s expected (%.1f rounds)",
             fmt_count((double)r->held * r->window_s / period_s), r->window_s / period_s);
    lrow("renewals seen by Redis (EVALSHA)", fmt_count((double)r->renew_calls), t);
    /* The window's CPU over the renewals Redis saw in it. */
    double renewals = r->renew_calls > 0 ? (double)r->renew_calls : 0;
    lrow("CPU per renewal: dlockd",
         fmt_cpu_us(cpu_us_per_op(r->cpu_agent / 100.0 * r->window_s, renewals)),
         "(utime + stime over the window)");
    lrow("CPU per renewal: redis-server",
         fmt_cpu_us(cpu_us_per_op(r->cpu_redis / 100.0 * r->window_s, renewals)), "");
    snprintf(t, sizeof t, "%s  %s", fmt_count((double)r->held),
             target_note("lease keys on Redis == leases held", fmt_count((double)r->keys_at_end),
                         fmt_count((double)r->held), r->keys_at_end == r->held));
    lrow("lease keys on Redis at the end", fmt_count((double)r->keys_at_end), t);
    snprintf(v, sizeof v, "%s ms", fmt_count((double)r->min_pttl_ms));
    snprintf(t, sizeof t, "about %s ms when renewed in time",
             fmt_count(BENCH_TTL_MS - BENCH_TTL_MS / 3.0));
    lrow("lowest PTTL of sampled keys", v, t);
}

static void report_leases(const struct lease_result *r)
{
    char t[64];
    printf("\n%s leases held through %d clients (TTL %d s, renewed every %d s), "
           "%.1f s window\n",
           fmt_count((double)r->wanted), r->clients, BENCH_TTL_MS / 1000, BENCH_TTL_MS / 3000,
           r->window_s);
    lrow("figure", "value", "target");
    report_leases_acquired(r);
    char n[64];
    snprintf(n, sizeof n, "dlockd CPU, leases held <= %.0f %% of a core", TARGET_AGENT_CPU);
    snprintf(t, sizeof t, "<= %.0f %%  %s", TARGET_AGENT_CPU,
             target_note(n, fmt_pct(r->cpu_agent), "", r->cpu_agent <= TARGET_AGENT_CPU));
    lrow("dlockd CPU over the window", fmt_pct(r->cpu_agent), t);
    report_leases_memory(r);
    snprintf(t, sizeof t, "0  %s",
             target_note("lease-lost events, leases held == 0", fmt_count((double)r->lost_events),
                         "", r->lost_events == 0));
    lrow("lease-lost events", fmt_count((double)r->lost_events), t);
    lrow("jeopardy events", fmt_count((double)r->jeopardy_events), "0");
    report_leases_renewals(r);
    lrow("redis-server CPU over the window", fmt_pct(r->cpu_redis), "(context)");
    lrow("other processes' CPU, same window", fmt_pct(r->cpu_others), "(noise if well above 0)");
    char v[64];
    if (r->release_s >= 0)
        snprintf(v, sizeof v, "%.2f s", r->release_s);
    else
        snprintf(v, sizeof v, "not within 60 s");
    lrow("all released after client close", v, "(context: no lease key left)");
}

/* A row of the quorum table. */
static void qrow(const char *what, const char *p50, const char *p90, const char *p99,
                 const char *rate, const char *ratio, const char *agent, const char *redis,
                 const char *client)
{
    printf("  %-28s %11s %11s %11s %9s %12s %10s %10s %10s\n", what, p50, p90, p99, rate, ratio,
           agent, redis, client);
}

static const char *quorum_label(const struct quorum_row *r)
{
    char *b = buf_next();
    if (r->plain)
        snprintf(b, 48, "plain hiredis, 1 node");
    else if (r->nodes == 1)
        snprintf(b, 48, "dlockd, 1 node (single)");
    else
        snprintf(b, 48, "dlockd, %d nodes (quorum %d)", r->nodes, r->nodes / 2 + 1);
    return b;
}

/* A row of the quorum checks. */
static void crow(const char *what, const char *ready, const char *held, const char *left,
                 const char *scripts, const char *lines, const char *exit)
{
    printf("  %-28s %11s %11s %11s %9s %9s %5s\n", what, ready, held, left, scripts, lines, exit);
}

/* Per agent: how it came up, where the key went, how it went down. */
static void report_quorum_checks(const struct quorum_result *q)
{
    crow("checked on the way", "ready after", "key held on", "released on", "scripts", "log lines",
         "exit");
    for (int i = 0; i < QUORUM_ROWS; i++) {
        const struct quorum_row *r = &q->row[i];
        if (r->plain)
            continue;
        char ready[48], held[16], left[16], scripts[16], lines[16], exit[16];
        snprintf(ready, sizeof ready, "%s ms", fmt_count(r->ready_ms));
        snprintf(held, sizeof held, "%d of %d", r->key_nodes, r->nodes);
        snprintf(left, sizeof left, "%d of %d", r->key_left, r->nodes);
        if (r->scripts_per_pair >= 0)
            snprintf(scripts, sizeof scripts, "%.2f", r->scripts_per_pair);
        else
            snprintf(scripts, sizeof scripts, "-");
        snprintf(lines, sizeof lines, "%d", r->log_lines);
        snprintf(exit, sizeof exit, "%d", r->agent_exit);
        crow(quorum_label(r), ready, held, left, scripts, lines, exit);
    }
    for (int i = 0; i < QUORUM_ROWS; i++) {
        const struct quorum_row *r = &q->row[i];
        if (!r->plain && r->key_nodes < r->nodes / 2 + 1)
            printf("    %s: the lock key was on fewer nodes than a majority: not quorum mode\n",
                   quorum_label(r));
    }
    for (int i = 0; i < QUORUM_ROWS; i++) {
        const struct quorum_row *r = &q->row[i];
        if (!r->plain && r->before_ready)
            printf("    %s, before it was usable: %s\n", quorum_label(r),
                   dlock_strerror(r->before_ready));
    }
    if (q->rounds_s >= 1.0)
        printf("  other processes' CPU during the timed rounds: %.1f %% (noise if well above 0)\n",
               q->cpu_others);
    for (int i = 0; i < QUORUM_ROWS; i++) {
        const struct quorum_row *r = &q->row[i];
        if (r->errors)
            printf("    %s: %s failed pairs, first: %s\n", quorum_label(r),
                   fmt_count((double)r->errors),
                   r->plain ? plain_strerror(r->first_error) : dlock_strerror(r->first_error));
    }
}

static void report_quorum(const struct quorum_result *q)
{
    printf("\nsingle and quorum mode: 1 client, %s acquire+release pairs per row on one name "
           "(try-once, TTL %d ms; %.1f s in all)\n",
           fmt_count((double)q->pairs), QUORUM_TTL_MS, q->wall_s);
    qrow("configuration", "p50", "p90", "p99", "pairs/s", "p50 / single", "CPU/pair:", "", "");
    qrow("", "", "", "", "", "", "dlockd", "Redis", "client");
    double single = q->row[1].s.p50_us;
    for (int i = 0; i < QUORUM_ROWS; i++) {
        const struct quorum_row *r = &q->row[i];
        qrow(quorum_label(r), fmt_us(r->s.p50_us), fmt_us(r->s.p90_us), fmt_us(r->s.p99_us),
             fmt_count(r->s.per_s), fmt_ratio(r->s.p50_us, single), fmt_cpu_us(r->agent_us),
             fmt_cpu_us(r->redis_us), fmt_cpu_us(r->client_us));
    }
    report_quorum_checks(q);
}

static const char *fmt_cost(const struct loop_cost *c)
{
    char *b = buf_next();
    snprintf(b, 48, "%.1f ns (%.1f-%.1f)", c->median, c->min, c->max);
    return b;
}

static void report_check_loops(const struct check_result *r)
{
    char v[64], t[80];
    char n[64];
    snprintf(n, sizeof n, "dlock_lease_valid() <= %.0f ns", TARGET_VALID_NS);
    snprintf(v, sizeof v, "%.1f ns", r->valid.median);
    snprintf(t, sizeof t, "<= %.0f ns  %s", TARGET_VALID_NS,
             target_note(n, v, "", r->valid.median <= TARGET_VALID_NS));
    lrow("dlock_lease_valid()", fmt_cost(&r->valid), t);
    lrow("dlock_lease_remaining_ns()", fmt_cost(&r->remaining), "(context)");
    lrow("dlock_lease_touch()", fmt_cost(&r->touch), "(context)");
    lrow("clock_gettime(CLOCK_BOOTTIME)", fmt_cost(&r->clock),
         "(context: the clock read in each call)");
    snprintf(t, sizeof t, "(context: %.2fx 1 thread; %s calls/s in all)",
             r->valid.median > 0 ? r->valid_mt.median / r->valid.median : 0,
             fmt_count(r->valid_mt.median > 0 ? CHECK_THREADS * 1e9 / r->valid_mt.median : 0));
    char what[48];
    snprintf(what, sizeof what, "valid() per thread, %d at once", CHECK_THREADS);
    lrow(what, fmt_cost(&r->valid_mt), t);
    snprintf(v, sizeof v, "%.1f %% / %.1f %%", r->oncpu_1t, r->oncpu_mt);
    lrow("loop threads on CPU (1 / 2 at once)", v, "(context: under 100 % = preempted)");
    lrow("other processes' CPU, 2 at once", r->mt_wall_s >= 1.0 ? fmt_pct(r->others_mt) : "-",
         "(noise if well above 0)");
    snprintf(t, sizeof t, "0  %s",
             target_note("valid() calls that said no == 0", fmt_count((double)r->valid_false), "",
                         r->valid_false == 0));
    lrow("valid() calls that said no", fmt_count((double)r->valid_false), t);
}

static void report_check(const struct check_result *r)
{
    char v[64], t[80];
    printf("\nlease check cost: one held lease; %s calls per loop, median (min-max) of %d "
           "loops;\nround trips p50 of %s each (clocksource %s)\n",
           fmt_count((double)r->calls), CHECK_RUNS, fmt_count((double)r->round_trips),
           r->clocksource);
    lrow("figure", "value", "target");
    report_check_loops(r);
    lrow("agent round trip p50 (ping)", fmt_us(r->ping.p50_us), "(context)");
    lrow("Redis GET of the key p50 (hiredis)", fmt_us(r->get.p50_us),
         "(context: same Unix socket as the agent's)");
    double valid = r->valid.median, ratio = valid > 0 ? r->ping.p50_us * 1e3 / valid : 0;
    snprintf(v, sizeof v, "%sx", fmt_count(ratio));
    char n[64];
    snprintf(n, sizeof n, "agent round trip >= %sx valid()", fmt_count(TARGET_VALID_VS_PING));
    snprintf(t, sizeof t, ">= %sx  %s", fmt_count(TARGET_VALID_VS_PING),
             target_note(n, fmt_us(r->ping.p50_us), fmt_ns(valid), ratio >= TARGET_VALID_VS_PING));
    lrow("agent round trip / valid()", v, t);
    snprintf(v, sizeof v, "%sx", fmt_count(valid > 0 ? r->get.p50_us * 1e3 / valid : 0));
    lrow("Redis GET / valid()", v, "(context)");
    if (r->ping_errors || r->get_errors) {
        snprintf(v, sizeof v, "%s / %s", fmt_count((double)r->ping_errors),
                 fmt_count((double)r->get_errors));
        snprintf(t, sizeof t, "0 (first: %s / %s)",
                 r->ping_errors ? dlock_strerror(r->first_ping_error) : "-",
                 r->get_errors ? plain_strerror(r->first_get_error) : "-");
        lrow("failed pings / GETs", v, t);
    }
}

/* A row of the fleet table. */
static void frow(const char *what, const char *rate, const char *cpu, const char *ratio,
                 const char *cmds, const char *notices, const char *subs, const char *chans,
                 const char *agents, const char *target)
{
    printf("  %-22s %9s %11s %10s %10s %10s %12s %9s %12s%s%s\n", what, rate, cpu, ratio, cmds,
           notices, subs, chans, agents, *target ? "   " : "", target);
}

static const char *fmt_fixed(double v)
{
    char *b = buf_next();
    snprintf(b, 48, "%.2f", v);
    return b;
}

static const char *fleet_label(const struct fleet_row *r)
{
    char *b = buf_next();
    snprintf(b, 48, "%d%s", r->agents, r->waiter ? ", waiter elsewhere" : "");
    return b;
}

/* The row of the same kind with 1 agent, or NULL. */
static const struct fleet_row *fleet_base(const struct fleet_result *f, int k)
{
    for (int i = 0; i < f->ncounts; i++)
        if (f->count[i].agents == 1)
            return &f->count[i].row[k];
    return NULL;
}

static void report_fleet_row(const struct fleet_row *r, const struct fleet_row *base)
{
    char t[64], subs[24], chans[24];
    double b = base ? base->redis_cpu_us : 0;
    t[0] = '\0';
    if (r->agents == TARGET_FLEET_AGENTS && b > 0) {
        char n[96];
        snprintf(n, sizeof n, "fleet, %d agents%s: Redis CPU per pair <= %.1fx 1 agent", r->agents,
                 r->waiter ? " + waiter" : "", TARGET_FLEET_CPU_RATIO);
        snprintf(t, sizeof t, "<= %.1fx 1 agent  %s", TARGET_FLEET_CPU_RATIO,
                 target_note(n, fmt_us(r->redis_cpu_us), fmt_us(b),
                             r->redis_cpu_us <= TARGET_FLEET_CPU_RATIO * b));
    } else if (r->agents == TARGET_FLEET_AGENTS)
        snprintf(t, sizeof t, "<= %.1fx 1 agent  (no 1-agent row)", TARGET_FLEET_CPU_RATIO);
    if (r->subscribers >= 0)
        snprintf(subs, sizeof subs, "%lld", r->subscribers);
    else
        snprintf(subs, sizeof subs, "changed");
    if (r->channels >= 0)
        snprintf(chans, sizeof chans, "%lld", r->channels);
    else
        snprintf(chans, sizeof chans, "changed");
    frow(fleet_label(r), fmt_count(r->s.per_s), fmt_us(r->redis_cpu_us),
         fmt_ratio(r->redis_cpu_us, b), fmt_fixed(r->commands), fmt_fixed(r->publishes), subs,
         chans, fmt_us(r->agents_cpu_us), t);
}

/* A row of the fleet checks. */
static void fcrow(const char *what, const char *ready, const char *lines, const char *exits,
                  const char *waiter, const char *others)
{
    printf("  %-22s %11s %10s %11s %24s %22s\n", what, ready, lines, exits, waiter, others);
}

static const char *fmt_others(double pct)
{
    return pct >= 0 ? fmt_pct(pct) : "-";
}

/* Per count: how the agents came up and went down, and the waiter. */
static void report_fleet_checks(const struct fleet_result *f)
{
    fcrow("checked on the way", "ready after", "log lines", "exits != 0", "waiter waited / granted",
          "others' CPU (2 rows)");
    for (int i = 0; i < f->ncounts; i++) {
        const struct fleet_count *c = &f->count[i];
        const struct fleet_row *w = &c->row[1];
        char what[48], ready[48], lines[16], exits[16], waiter[48], others[48];
        snprintf(what, sizeof what, "%d agent%s", c->agents, c->agents == 1 ? "" : "s");
        snprintf(ready, sizeof ready, "%s ms", fmt_count(c->ready_ms));
        snprintf(lines, sizeof lines, "%d", c->log_lines);
        snprintf(exits, sizeof exits, "%d", c->bad_exits);
        snprintf(waiter, sizeof waiter, "%s / %s", w->waited ? "yes" : "NO",
                 w->granted == 0 ? "yes" : "NO");
        snprintf(others, sizeof others, "%s / %s", fmt_others(c->row[0].others_pct),
                 fmt_others(w->others_pct));
        fcrow(what, ready, lines, exits, waiter, others);
    }
    for (int i = 0; i < f->ncounts; i++) {
        const struct fleet_count *c = &f->count[i];
        if (c->bad_exits)
            printf("    %d agents: first exit status not 0: %d\n", c->agents, c->first_bad_exit);
        if (c->row[1].granted < 0)
            printf("    %d agents: the waiter, after the release: %s\n", c->agents,
                   dlock_strerror(c->row[1].granted));
        for (int k = 0; k < 2; k++)
            if (c->row[k].errors)
                printf("    %s: %s failed pairs, first: %s\n", fleet_label(&c->row[k]),
                       fmt_count((double)c->row[k].errors), dlock_strerror(c->row[k].first_error));
    }
}

static void report_fleet(const struct fleet_result *f)
{
    double wall = 0;
    for (int i = 0; i < f->ncounts; i++)
        wall += f->count[i].wall_s;
    printf("\nfleet: agents on one Redis, each listening only on the channels of names it waits "
           "for; 1 client on agent 0, %s acquire+release pairs per row on one name (try-once, TTL "
           "%d s; %.1f s in all)\n",
           fmt_count((double)f->pairs), BENCH_TTL_MS / 1000, wall);
    frow("agents", "pairs/s", "Redis CPU", "x 1 agent", "commands", "notices", "subscribers",
         "channels", "agents' CPU", "target");
    frow("", "", "per pair", "", "per pair", "per pair", "of its name", "listened", "per pair", "");
    for (int i = 0; i < f->ncounts; i++)
        for (int k = 0; k < 2; k++)
            report_fleet_row(&f->count[i].row[k], fleet_base(f, k));
    printf("  (Redis counts no Pub/Sub messages delivered: each notice goes to the subscribers of "
           "its name's channel)\n");
    report_fleet_checks(f);
}

/* ---- report: contended names ---- */

/* How the part's agents came up and went down. */
static void report_side_agents(const struct side_agent *a, int n)
{
    printf("  checked on the way: agents ready after");
    for (int i = 0; i < n; i++)
        printf("%s %s ms", i ? "," : "", fmt_count(a[i].ready_ms));
    printf("; log lines at warn or above");
    for (int i = 0; i < n; i++)
        printf("%s %d", i ? "," : "", a[i].log_lines);
    printf("; exit status after SIGTERM");
    for (int i = 0; i < n; i++)
        printf("%s %d", i ? "," : "", a[i].exit);
    printf("\n");
}

static void report_wake(const struct wake_result *r)
{
    char t[64], v[48];
    printf("\ncross-agent wake: a client of one agent holds a name, a client of another waits for "
           "it;\n%s rounds, roles swapping, each a %d ms settle then dlock_lease_release_sync() -> "
           "the waiter's acquire returns (CLOCK_BOOTTIME)\n",
           fmt_count((double)r->rounds), r->settle_ms);
    row("figure", "wake", "Redis PING", "x PING", "target");
    double ping = r->ping.p50_us;
    char n[64];
    snprintf(n, sizeof n, "cross-agent wake p50 <= %.0f cold PINGs", TARGET_WAKE_PINGS);
    snprintf(t, sizeof t, "<= %.0fx PING  %s", TARGET_WAKE_PINGS,
             target_note(n, fmt_us(r->wake.p50_us), fmt_us(ping),
                         r->wake.n > 0 && ping > 0 && r->wake.p50_us <= TARGET_WAKE_PINGS * ping));
    row("p50", fmt_us(r->wake.p50_us), fmt_us(ping), fmt_ratio(r->wake.p50_us, ping), t);
    row("p90", fmt_us(r->wake.p90_us), fmt_us(r->ping.p90_us), fmt_ratio(r->wake.p90_us, ping),
        "(x PING: over the PING p50)");
    row("p99", fmt_us(r->wake.p99_us), fmt_us(r->ping.p99_us), fmt_ratio(r->wake.p99_us, ping), "");
    row("max", fmt_us(r->wake.max_us), fmt_us(r->ping.max_us), fmt_ratio(r->wake.max_us, ping), "");
    row("rounds timed", fmt_count((double)r->wake.n), fmt_count((double)r->ping.n), "",
        "(PING: plain hiredis, after the same pause)");
    if (r->wake_one_cpu.n > 0) {
        snprintf(v, sizeof v, "p50, on one CPU (%s rounds)", fmt_count((double)r->wake_one_cpu.n));
        row(v, fmt_us(r->wake_one_cpu.p50_us), fmt_us(r->ping_one_cpu.p50_us),
            fmt_ratio(r->wake_one_cpu.p50_us, r->ping_one_cpu.p50_us),
            "(context: every process of the path on one CPU)");
    }
    row("Redis PING p50, no pause", "", fmt_us(r->ping_busy.p50_us),
        fmt_ratio(r->wake.p50_us, r->ping_busy.p50_us),
        "(context: right after the previous round)");
    snprintf(v, sizeof v, "%ld / %ld", r->early, r->not_listening);
    row("waiter back early / not listened", v, "", "", "0 / 0");
    snprintf(t, sizeof t, "0%s%s", r->errors ? "  first: " : "",
             r->errors ? dlock_strerror(r->first_error) : "");
    row("failed releases and acquires", fmt_count((double)r->errors), "", "", t);
    row("CPU per round: both dlockd", fmt_cpu_us(r->agents_us), "", "", "(utime + stime)");
    row("CPU per round: redis-server", fmt_cpu_us(r->redis_us), "", "",
        "(with the round's PINGs and NUMSUB polls)");
    report_side_agents(r->agent, 2);
}

static const char *contend_strerror(int err)
{
    return err == CONTEND_EREDIS ? "the GET or SET of the counter failed" : dlock_strerror(err);
}

/* (max - min) / mean of the grants per worker, in %. */
static double spread_pct(const struct contend_run *r)
{
    long lo = 0, hi = 0;
    for (int i = 0; i < r->nworkers; i++) {
        lo = i == 0 || r->w[i].grants < lo ? r->w[i].grants : lo;
        hi = i == 0 || r->w[i].grants > hi ? r->w[i].grants : hi;
    }
    double mean = r->nworkers ? (double)r->grants / r->nworkers : 0;
    return mean > 0 ? 100.0 * (double)(hi - lo) / mean : 0;
}

static long contend_errors(const struct contend_run *r, int *first)
{
    long n = 0;
    *first = 0;
    for (int i = 0; i < r->nworkers; i++) {
        if (r->w[i].errors && !n)
            *first = r->w[i].first_error;
        n += r->w[i].errors;
    }
    return n;
}

/* The counter check: the counter at the end against the grants. */
static const char *fmt_counter(const struct contend_run *r)
{
    char *b = buf_next();
    if (r->counter < 0)
        snprintf(b, 48, "not read");
    else if (r->counter == r->grants)
        snprintf(b, 48, "%s  ok", fmt_count((double)r->counter));
    else
        snprintf(b, 48, "LOST UPDATES: %s", fmt_count((double)(r->grants - r->counter)));
    return b;
}

static void report_cohort(const struct cohort_result *c)
{
    char t[64], what[48];
    char name[96];
    const struct contend_run *on = &c->on, *off = &c->off;
    printf("\ncohort: %d processes on one agent, one name, %.1f s per run: waiting acquire, GET + "
           "SET of a counter on Redis, release\n",
           on->nworkers, on->seconds);
    row("figure", "handoff on", "handoff off", "ratio", "target");
    double ratio = off->per_s > 0 ? on->per_s / off->per_s : 0;
    snprintf(name, sizeof name, "cohort: grants/s >= %.0fx handoff off", TARGET_COHORT_RATIO);
    snprintf(t, sizeof t, ">= %.2f  %s", TARGET_COHORT_RATIO,
             target_note(name, fmt_count(on->per_s), fmt_count(off->per_s),
                         ratio >= TARGET_COHORT_RATIO));
    row("grants/s", fmt_count(on->per_s), fmt_count(off->per_s), fmt_ratio(on->per_s, off->per_s),
        t);
    for (int i = 0; i < on->nworkers; i++) {
        snprintf(what, sizeof what, "  grants of process %d", i);
        row(what, fmt_count((double)on->w[i].grants), fmt_count((double)off->w[i].grants), "", "");
    }
    double son = spread_pct(on), soff = spread_pct(off);
    snprintf(name, sizeof name, "cohort: spread of grants per process <= %.0f %%",
             TARGET_COHORT_SPREAD);
    snprintf(t, sizeof t, "<= %.0f %%  %s / %s", TARGET_COHORT_SPREAD,
             target_note(name, fmt_pct(son), "", son <= TARGET_COHORT_SPREAD),
             verdict(soff <= TARGET_COHORT_SPREAD));
    row("spread (max-min)/mean", fmt_pct(son), fmt_pct(soff), "", t);
    const struct summary *won = &on->host_wait[0], *woff = &off->host_wait[0];
    row("wait per acquire p50", fmt_wait(won->p50_us), fmt_wait(woff->p50_us),
        fmt_ratio(won->p50_us, woff->p50_us), "(context)");
    row("wait per acquire p99", fmt_wait(won->p99_us), fmt_wait(woff->p99_us),
        fmt_ratio(won->p99_us, woff->p99_us), "(context)");
    row("wait per acquire max", fmt_wait(won->max_us), fmt_wait(woff->max_us), "", "(context)");
    row("CPU per grant: dlockd", fmt_cpu_us(on->agents_us), fmt_cpu_us(off->agents_us),
        fmt_ratio(on->agents_us, off->agents_us), "(utime + stime)");
    row("CPU per grant: redis-server", fmt_cpu_us(on->redis_us), fmt_cpu_us(off->redis_us),
        fmt_ratio(on->redis_us, off->redis_us), "(with the section's GET + SET)");
    row("counter at the end", fmt_counter(on), fmt_counter(off), "", "== grants");
    int fon, foff;
    long eon = contend_errors(on, &fon), eoff = contend_errors(off, &foff);
    row("failed acquires and releases", fmt_count((double)eon), fmt_count((double)eoff), "", "0");
    if (eon)
        printf("    handoff on, first error: %s\n", contend_strerror(fon));
    if (eoff)
        printf("    handoff off, first error: %s\n", contend_strerror(foff));
    printf("  (configurations: cohort_handoffs = 32 and 0, cohort_ms = %d)\n", CONTEND_COHORT_MS);
    report_side_agents(on->agent, 1);
    report_side_agents(off->agent, 1);
}

static void report_hosts(const struct contend_run *r)
{
    char t[64], what[48];
    int per = r->nworkers / 2;
    printf(
        "\ntwo hosts: 2 agents (cohort_handoffs = 32, cohort_ms = %d), %d processes on each, one "
        "name, %.1f s: waiting acquire, GET + SET of a counter, release\n",
        CONTEND_COHORT_MS, per, r->seconds);
    row("figure", "host A", "host B", "", "target");
    double share[2];
    for (int k = 0; k < 2; k++)
        share[k] = r->grants > 0 ? 100.0 * (double)r->host_grants[k] / (double)r->grants : 0;
    bool ok = true;
    for (int k = 0; k < 2; k++)
        ok = ok && share[k] >= TARGET_SHARE_MIN && share[k] <= TARGET_SHARE_MAX;
    char n[64], v[48];
    snprintf(n, sizeof n, "two hosts: each host's share %.0f-%.0f %%", TARGET_SHARE_MIN,
             TARGET_SHARE_MAX);
    snprintf(v, sizeof v, "%.1f / %.1f %%", share[0], share[1]);
    snprintf(t, sizeof t, "%.0f-%.0f %%  %s", TARGET_SHARE_MIN, TARGET_SHARE_MAX,
             target_note(n, v, "", ok));
    row("share of the grants", fmt_pct(share[0]), fmt_pct(share[1]), "", t);
    row("grants", fmt_count((double)r->host_grants[0]), fmt_count((double)r->host_grants[1]), "",
        "");
    for (int i = 0; i < r->nworkers; i++) {
        snprintf(what, sizeof what, "  grants of process %d", i);
        row(what, r->w[i].agent == 0 ? fmt_count((double)r->w[i].grants) : "",
            r->w[i].agent == 1 ? fmt_count((double)r->w[i].grants) : "", "", "");
    }
    const struct summary *a = &r->host_wait[0], *b = &r->host_wait[1];
    row("wait per acquire p50", fmt_wait(a->p50_us), fmt_wait(b->p50_us), "", "(context)");
    row("wait per acquire p99", fmt_wait(a->p99_us), fmt_wait(b->p99_us), "", "");
    double lim = (CONTEND_COHORT_MS + TARGET_WAIT_SLACK_MS) * 1e3;
    snprintf(n, sizeof n, "two hosts: wait per acquire max <= %.0f ms", lim / 1e3);
    snprintf(v, sizeof v, "%s", fmt_wait(a->max_us > b->max_us ? a->max_us : b->max_us));
    snprintf(t, sizeof t, "<= %.0f ms (cohort_ms + %.0f)  %s", lim / 1e3, TARGET_WAIT_SLACK_MS,
             target_note(n, v, "", a->n > 0 && b->n > 0 && a->max_us <= lim && b->max_us <= lim));
    row("wait per acquire max", fmt_wait(a->max_us), fmt_wait(b->max_us), "", t);
    row("grants/s in all", fmt_count(r->per_s), "", "", "(context)");
    row("CPU per grant: both dlockd", fmt_cpu_us(r->agents_us), "", "", "(utime + stime)");
    row("CPU per grant: redis-server", fmt_cpu_us(r->redis_us), "", "",
        "(with the section's GET + SET)");
    row("counter at the end", fmt_counter(r), "", "", "== grants");
    int first;
    long errors = contend_errors(r, &first);
    row("failed acquires and releases", fmt_count((double)errors), "", "", "0");
    if (errors)
        printf("    first error: %s\n", contend_strerror(first));
    report_side_agents(r->agent, 2);
}

/* ---- the lock kinds part ---- */

/* One row of the kinds table: a value per run (exclusive, shared, semaphore,
 * read-mostly), then the target. */
static void krow(const char *what, const char *ex, const char *sh, const char *sem, const char *mix,
                 const char *target)
{
    printf("  %-30s %12s %12s %12s %12s   %s\n", what, ex, sh, sem, mix, target);
}

/* The grants of the run's exclusive-kind (writer) workers. */
static long writer_grants(const struct contend_run *r)
{
    long n = 0;
    for (int i = 0; i < r->nworkers; i++)
        n += r->w[i].kind == DLOCK_KIND_EXCLUSIVE ? r->w[i].grants : 0;
    return n;
}

/* The lowest and highest grants of one kind's workers, "min-max". */
static const char *fmt_grant_range(const struct contend_run *r, int kind)
{
    long lo = -1, hi = 0;
    for (int i = 0; i < r->nworkers; i++) {
        if (r->w[i].kind != kind)
            continue;
        lo = lo < 0 || r->w[i].grants < lo ? r->w[i].grants : lo;
        hi = r->w[i].grants > hi ? r->w[i].grants : hi;
    }
    char *b = buf_next();
    snprintf(b, 48, "%s-%s", fmt_count((double)(lo < 0 ? 0 : lo)), fmt_count((double)hi));
    return b;
}

/* The most holders inside at once; with "ok" or "OVER" when there is a
 * limit (> 0). */
static const char *fmt_inside(const struct contend_run *r, long limit)
{
    long most = 0;
    for (int i = 0; i < r->nworkers; i++)
        most = r->w[i].max_inside > most ? r->w[i].max_inside : most;
    char *b = buf_next();
    if (limit > 0)
        snprintf(b, 48, "%ld  %s", most, most <= limit ? "ok" : "OVER");
    else
        snprintf(b, 48, "%ld", most);
    return b;
}

/* Sections that overlapped a writer's: "0  ok", or the count. */
static const char *fmt_overlaps(const struct contend_run *r)
{
    long n = 0;
    for (int i = 0; i < r->nworkers; i++)
        n += r->w[i].overlaps;
    char *b = buf_next();
    snprintf(b, 48, n ? "%s  OVERLAP" : "%s  ok", fmt_count((double)n));
    return b;
}

/* The counter against the writers' grants. */
static const char *fmt_writes(const struct contend_run *r)
{
    char *b = buf_next();
    long w = writer_grants(r);
    if (r->counter < 0)
        snprintf(b, 48, "not read");
    else if (r->counter == w)
        snprintf(b, 48, "%s  ok", fmt_count((double)r->counter));
    else
        snprintf(b, 48, "LOST: %s", fmt_count((double)(w - r->counter)));
    return b;
}

static const char *fmt_key_left(const struct contend_run *r)
{
    return r->key_left < 0 ? "not read" : r->key_left ? "LEFT" : "gone  ok";
}

static const char *fmt_machine(const struct contend_run *r)
{
    return r->machine_cpu < 0 || r->seconds < 1.0 ? "-" : fmt_pct(r->machine_cpu);
}

static void report_kinds_errors(const struct contend_run *const *runs, const char *const *names)
{
    long e[4];
    int first[4];
    for (int k = 0; k < 4; k++)
        e[k] = contend_errors(runs[k], &first[k]);
    krow("failed acquires and releases", fmt_count((double)e[0]), fmt_count((double)e[1]),
         fmt_count((double)e[2]), fmt_count((double)e[3]), "0");
    for (int k = 0; k < 4; k++)
        if (e[k])
            printf("    %s, first error: %s\n", names[k], contend_strerror(first[k]));
}

static void report_kinds(const struct kinds_result *r)
{
    const struct contend_run *ex = &r->ex, *sh = &r->sh, *sem = &r->sem, *mix = &r->mix;
    const struct contend_run *const runs[4] = {ex, sh, sem, mix};
    static const char *const names[4] = {"exclusive", "shared", "semaphore", "read-mostly"};
    char t[96], head[32], wr[48];
    char name[96];
    int procs = ex->nworkers;
    printf("\nlock kinds: %d processes on one agent (cohort_handoffs = 32, cohort_ms = %d), one "
           "name, %.1f s per run: waiting acquire, critical section, release;\nthe section: INCRBY "
           "of an in-section gauge + GET of a key, %d us asleep (off-CPU work, as an I/O-bound "
           "reader's), SET of the key by a writer + DECRBY; read-mostly: %d readers and 1 writer "
           "taking 1 in %d of the grants\n",
           procs, CONTEND_COHORT_MS, ex->seconds, KINDS_WORK_US, procs, KINDS_WRITE_ONE_IN);
    snprintf(head, sizeof head, "semaphore %u", (unsigned)KINDS_PERMITS);
    snprintf(wr, sizeof wr, "%d r + 1 w", procs);
    krow("figure", "exclusive", "shared", head, wr, "target");
    krow("grants/s", fmt_count(ex->per_s), fmt_count(sh->per_s), fmt_count(sem->per_s),
         fmt_count(mix->per_s), "");
    double ratio = ex->per_s > 0 ? sh->per_s / ex->per_s : 0;
    snprintf(name, sizeof name, "lock kinds: shared grants/s >= %.0fx exclusive",
             TARGET_SHARED_RATIO);
    snprintf(t, sizeof t, "shared >= %.2f  %s", TARGET_SHARED_RATIO,
             target_note(name, fmt_count(sh->per_s), fmt_count(ex->per_s),
                         ratio >= TARGET_SHARED_RATIO));
    krow("  x exclusive (baseline)", fmt_ratio(ex->per_s, ex->per_s),
         fmt_ratio(sh->per_s, ex->per_s), fmt_ratio(sem->per_s, ex->per_s),
         fmt_ratio(mix->per_s, ex->per_s), t);
    krow("grants per process, min-max", fmt_grant_range(ex, DLOCK_KIND_EXCLUSIVE),
         fmt_grant_range(sh, DLOCK_KIND_SHARED), fmt_grant_range(sem, DLOCK_KIND_SEMAPHORE),
         fmt_grant_range(mix, DLOCK_KIND_SHARED), "(readers in the last column)");
    long w = writer_grants(mix);
    snprintf(wr, sizeof wr, "%s (%.1f %%)", fmt_count((double)w),
             mix->grants ? 100.0 * (double)w / (double)mix->grants : 0.0);
    snprintf(t, sizeof t, "(context: 1 in %d asked)", KINDS_WRITE_ONE_IN);
    krow("  grants of the writer", "", "", "", wr, t);
    const struct summary *a = &ex->kind_wait[DLOCK_KIND_EXCLUSIVE],
                         *b = &sh->kind_wait[DLOCK_KIND_SHARED],
                         *c = &sem->kind_wait[DLOCK_KIND_SEMAPHORE],
                         *d = &mix->kind_wait[DLOCK_KIND_SHARED],
                         *x = &mix->kind_wait[DLOCK_KIND_EXCLUSIVE];
    krow("wait per acquire p50", fmt_wait(a->p50_us), fmt_wait(b->p50_us), fmt_wait(c->p50_us),
         fmt_wait(d->p50_us), "(context; readers in the last column)");
    krow("wait per acquire p99", fmt_wait(a->p99_us), fmt_wait(b->p99_us), fmt_wait(c->p99_us),
         fmt_wait(d->p99_us), "");
    krow("wait per acquire max", fmt_wait(a->max_us), fmt_wait(b->max_us), fmt_wait(c->max_us),
         fmt_wait(d->max_us), "");
    krow("  the writer's, p50", "", "", "", fmt_wait(x->p50_us), "(context)");
    krow("  the writer's, p99", "", "", "", fmt_wait(x->p99_us), "");
    snprintf(t, sizeof t, "1 / - / <= %u / -", (unsigned)KINDS_PERMITS);
    krow("most holders inside at once", fmt_inside(ex, 1), fmt_inside(sh, 0),
         fmt_inside(sem, KINDS_PERMITS), fmt_inside(mix, 0), t);
    krow("sections overlapping a writer", fmt_overlaps(ex), "-", "-", fmt_overlaps(mix),
         "0 (no writer in 2 and 3)");
    krow("counter at the end", fmt_writes(ex), "-", "-", fmt_writes(mix), "== writer grants");
    krow("lock key after the run", fmt_key_left(ex), fmt_key_left(sh), fmt_key_left(sem),
         fmt_key_left(mix), "gone");
    report_kinds_errors(runs, names);
    krow("CPU per grant: dlockd", fmt_cpu_us(ex->agents_us), fmt_cpu_us(sh->agents_us),
         fmt_cpu_us(sem->agents_us), fmt_cpu_us(mix->agents_us), "(utime + stime)");
    krow("CPU per grant: redis-server", fmt_cpu_us(ex->redis_us), fmt_cpu_us(sh->redis_us),
         fmt_cpu_us(sem->redis_us), fmt_cpu_us(mix->redis_us), "(with the section's commands)");
    krow("CPU of the machine, all", fmt_machine(ex), fmt_machine(sh), fmt_machine(sem),
         fmt_machine(mix), "(context: % of a core, every process)");
    for (int k = 0; k < 4; k++)
        report_side_agents(runs[k]->agent, 1);
}

/* ---- the run ---- */

/* A victim's renewal lateness alone and under a flood, for each attack. */
static void report_fairness(const struct fairness_result *r, double seconds)
{
    printf("\nfairness: an agent with the default settings; a victim (the bench's uid) holds 8 "
           "leases; another uid (nobody) keeps 1000 try-once acquires of fresh names in flight on "
           "each of its connections; %.1f s per run; sent late = a renewal's send time (read off "
           "its deadline) - its due time; confirmed = shown in the lease page - sent\n",
           seconds);
    if (r->skipped) {
        printf("  skipped: %s\n", r->skipped);
        return;
    }
    for (int i = 0; i + 1 < FAIRNESS_RUNS; i += 2) {
        const struct fairness_run *a = &r->run[i], *f = &r->run[i + 1];
        char head[96], t[64];
        snprintf(head, sizeof head, "victim TTL %u ms", (unsigned)a->victim_ttl_ms);
        snprintf(t, sizeof t, "flood %d x %d, TTL %u ms", f->flood_conns, 1000,
                 (unsigned)f->flood_ttl_ms);
        printf("\n");
        row(head, "alone", t, "", "target");
        row("renewals seen", fmt_count((double)a->renewals), fmt_count((double)f->renewals), "",
            "");
        row("sent late p50", fmt_us(a->late.p50_us), fmt_us(f->late.p50_us), "", "(context)");
        row("sent late p99", fmt_us(a->late.p99_us), fmt_us(f->late.p99_us), "", "");
        row("sent late max", fmt_us(a->late.max_us), fmt_us(f->late.max_us), "", "");
        row("confirmed p50", fmt_us(a->shown.p50_us), fmt_us(f->shown.p50_us), "", "(context)");
        row("confirmed p99", fmt_us(a->shown.p99_us), fmt_us(f->shown.p99_us), "", "");
        row("confirmed max", fmt_us(a->shown.max_us), fmt_us(f->shown.max_us), "", "");
        row("JEOPARDY events", fmt_count((double)a->jeopardy), fmt_count((double)f->jeopardy), "",
            "");
        char n[64], v[32];
        snprintf(n, sizeof n, "fairness, TTL %u ms: all 8 leases HELD beside a flood",
                 (unsigned)a->victim_ttl_ms);
        snprintf(v, sizeof v, "%d / %d", a->held, f->held);
        snprintf(t, sizeof t, "all HELD  %s",
                 target_note(n, v, "", a->lost + f->lost == 0 && f->held == 8 && a->held == 8));
        row("leases HELD at the end (of 8)", fmt_count(a->held), fmt_count(f->held), "", t);
        row("flood: granted", "", fmt_count((double)f->granted), "", "");
        row("flood: refused (DLOCK_ELIMIT)", "", fmt_count((double)f->refused), "", "");
        row("flood: other errors", "", fmt_count((double)f->other), "", "");
    }
}

static void progress(const char *what)
{
    fprintf(stderr, "dlock-bench: %s\n", what);
}

static int phase_pairs(const struct opts *o, struct env *e)
{
    struct pair_result d1, p1, dm, pm;
    progress("1 client, dlock and plain hiredis in turns");
    if (run_single(&dlock_driver, &plain_driver, e, o->pairs, &d1, &p1) != 0)
        return -1;
    report_single(o, &d1, &p1);
    fflush(stdout);
    progress("many clients, dlock and plain hiredis in turns");
    if (run_multi(&dlock_driver, &plain_driver, e, o->clients, o->seconds, &dm, &pm) != 0)
        return -1;
    report_multi(o, &dm, &pm);
    fflush(stdout);
    return 0;
}

static int phase_delay(const struct opts *o, struct env *e)
{
    static struct delay_result r;
    if (o->delay_us <= 0)
        return 0;
    fprintf(stderr, "dlock-bench: Redis across a delay of %.0f us each way\n", o->delay_us);
    if (run_delay(e, o->delay_us, o->pairs, o->clients, o->seconds, &r) != 0)
        return -1;
    report_delay(&r);
    fflush(stdout);
    return 0;
}

static int phase_wake(const struct opts *o, struct env *e)
{
    static struct wake_result r;
    if (o->wake_rounds == 0)
        return 0;
    progress("cross-agent wake: a holder on one agent, a waiter on another");
    if (run_wake(e, o->wake_rounds, &r) != 0)
        return -1;
    report_wake(&r);
    fflush(stdout);
    return 0;
}

static int phase_waiting(const struct opts *o, struct env *e)
{
    static struct waiting_result r;
    if (o->wait_names == 0)
        return 0;
    progress("waiting: Redis commands/s while two agents wait for names a foreign client holds");
    if (run_waiting(e, o->wait_names, o->quick ? 10 : 50, o->quick, &r) != 0)
        return -1;
    report_waiting(&r);
    /* 5,000 commands/s for 4,000 names, in proportion for other counts. */
    const struct waiting_mode *fixed = &r.mode[0], *paced = &r.mode[1];
    double target = 5000.0 * (double)r.names / 4000.0;
    char name[96];
    snprintf(name, sizeof name, "%ld waiting names: Redis commands/s <= %s", r.names,
             fmt_count(target));
    target_note(name, fmt_count(paced->names_cmds_s), fmt_count(fixed->names_cmds_s),
                paced->names_cmds_s <= target);
    fflush(stdout);
    return 0;
}

static int phase_cohort(const struct opts *o, struct env *e)
{
    static struct cohort_result r;
    if (o->cohort_procs == 0)
        return 0;
    if (run_cohort(e, o->cohort_procs, o->seconds, &r) != 0)
        return -1;
    report_cohort(&r);
    fflush(stdout);
    return 0;
}

static int phase_hosts(const struct opts *o, struct env *e)
{
    static struct contend_run r;
    if (o->host_procs == 0)
        return 0;
    progress("two hosts: worker processes on two agents, one name");
    if (run_hosts(e, o->host_procs, o->seconds, &r) != 0)
        return -1;
    report_hosts(&r);
    fflush(stdout);
    return 0;
}

static int phase_kinds(const struct opts *o, struct env *e)
{
    static struct kinds_result r;
    if (o->kinds_procs == 0)
        return 0;
    if (run_kinds(e, o->kinds_procs, o->seconds, &r) != 0)
        return -1;
    report_kinds(&r);
    fflush(stdout);
    return 0;
}

static int phase_fairness(const struct opts *o, struct env *e)
{
    static struct fairness_result r;
    if (o->fair_seconds == 0)
        return 0;
    progress("fairness: a victim's renewals alone and beside another uid's flood");
    if (run_fairness(e, o->fair_seconds, &r) != 0)
        return -1;
    report_fairness(&r, o->fair_seconds);
    fflush(stdout);
    return 0;
}

static int phase_quorum(const struct opts *o, struct env *e)
{
    struct quorum_result r;
    if (o->quorum_pairs == 0)
        return 0;
    progress("single and quorum mode: agents on 1, 3 and 5 nodes of their own");
    if (run_quorum(e->dir, o->quorum_pairs, &r) != 0)
        return -1;
    report_quorum(&r);
    fflush(stdout);
    return 0;
}

static int phase_check(const struct opts *o, struct env *e)
{
    struct check_result r;
    progress("lease check cost: valid(), remaining_ns(), touch() against round trips");
    if (run_check(e, o->calls, o->round_trips, &r) != 0)
        return -1;
    report_check(&r);
    fflush(stdout);
    return 0;
}

static int phase_leases(const struct opts *o, struct env *e)
{
    struct lease_result r;
    fprintf(stderr, "dlock-bench: holding %ld leases, %.0f s window (dlockd pid %d)\n", o->leases,
            o->window, (int)e->agent_pid);
    if (run_leases(e, o->leases, o->window, &r) != 0)
        return -1;
    report_leases(&r);
    return 0;
}

static int phase_fleet(const struct opts *o, struct env *e)
{
    static struct fleet_result r; /* large: not on the stack */
    const char *who;
    if (o->nfleet == 0)
        return 0;
    if (env_check(e, &who) != 0)
        return -1; /* said at the end */
    /* The run's own agent goes first, so that the fleet's agents are the only
     * ones on Redis (their connections are counted). Its log and status
     * are reported at the end, as when this part does not run. */
    env_stop_agent(e);
    progress("fleet: 1 client on agent 0 of a growing number of agents on one Redis");
    int rc = run_fleet(e, o->fleet, o->nfleet, o->pairs, &r);
    if (r.ncounts > 0)
        report_fleet(&r);
    fflush(stdout);
    return rc;
}

static const struct binding_row *binding_row(const struct binding_result *r, const char *net,
                                             const char *kase, const char *impl)
{
    for (int i = 0; i < r->nrows; i++)
        if (!strcmp(r->rows[i].net, net) && !strcmp(r->rows[i].kase, kase) &&
            !strcmp(r->rows[i].impl, impl))
            return &r->rows[i];
    return NULL;
}

static const char *fmt_binding(const struct binding_row *r, char *out, size_t cap)
{
    snprintf(out, cap, "%s/s p50 %s", fmt_count(r->ops), fmt_wait(r->p50_us));
    return out;
}

/* Each row of the language against each other implementation it measured. */
static void report_binding(const struct binding_result *r, double delay_us)
{
    printf("\nBindings: %s (bench/bindings/%s/run, exit status %d)\n", r->lang, r->lang, r->status);
    printf("  Redis PING p50 %s direct, %s through the %.0f us delay proxy\n", fmt_us(r->ping_us),
           fmt_us(r->ping_delayed_us), delay_us);
    printf("  %-30s %-26s %-28s %7s   %s\n", "row", "dlock", "other", "ratio", "target");
    static const char *const nets[] = {"loopback", "delayed"};
    static const char *const kases[] = {"pairs", "contended"};
    for (int n = 0; n < 2; n++)
        for (int k = 0; k < 2; k++) {
            const struct binding_row *d = binding_row(r, nets[n], kases[k], "dlock");
            bool hard = n == 1 || k == 1;
            double target = hard ? TARGET_BINDING_HARD : TARGET_BINDING_RATIO;
            for (int i = 0; i < r->nrows; i++) {
                const struct binding_row *o = &r->rows[i];
                if (strcmp(o->net, nets[n]) || strcmp(o->kase, kases[k]) ||
                    !strcmp(o->impl, "dlock"))
                    continue;
                char what[64], other[64], tgt[48], mine[48], theirs[48];
                snprintf(what, sizeof what, "%s %s", nets[n],
                         k ? "contended (4 workers)" : "pairs (1 client)");
                snprintf(other, sizeof other, "%s: %s", o->impl,
                         fmt_binding(o, theirs, sizeof theirs));
                char name[128];
                snprintf(name, sizeof name, "%.15s %s %s: dlock ops/s >= %.0fx %.23s", r->lang,
                         nets[n], kases[k], target, o->impl);
                snprintf(tgt, sizeof tgt, ">= %.1f: %s", target,
                         d ? target_note(name, fmt_count(d->ops), fmt_count(o->ops),
                                         d->ops >= target * o->ops)
                           : "no dlock row");
                printf("  %-30s %-26s %-28s %7s   %s\n", what,
                       d ? fmt_binding(d, mine, sizeof mine) : "-", other,
                       d ? fmt_ratio(d->ops, o->ops) : "-", tgt);
            }
        }
    if (r->have_valid)
        printf("  lease.valid: %.1f ns per call; Redis GET p50 %s, %.0f times as long\n",
               r->valid_ns, fmt_us(r->get_us), r->get_us * 1e3 / r->valid_ns);
    else
        printf("  lease.valid: no figure\n");
    if (r->agent_log_lines > 0)
        printf("  the delayed agent's log: %d line(s) at level warn or above\n",
               r->agent_log_lines);
}

static int phase_bindings(const struct opts *o, struct env *e)
{
    static struct binding_result r[BINDING_MAX];
    int n = 0;
    /* The floor of every binding's pairs: libdlock and a plain hiredis
     * lock from C, on the same agent and Redis, in the same run, each pair
     * on a name of its own as the bindings' are. */
    struct summary d, p;
    progress("bindings: 1 client from C, libdlock and plain hiredis, as the reference");
    if (bindings_reference(&dlock_driver, e, o->pairs, &d) != 0 ||
        bindings_reference(&plain_driver, e, o->pairs, &p) != 0)
        return -1;
    printf("\nBindings: the reference from C, 1 client on loopback, a name per pair: libdlock "
           "%s/s (p50 %s), a plain hiredis lock (SET NX PX, then a compare-and-delete script) "
           "%s/s (p50 %s)\n",
           fmt_count(d.per_s), fmt_us(d.p50_us), fmt_count(p.per_s), fmt_us(p.p50_us));
    progress("bindings: each language's binding against its own Redis lock library");
    int rc = run_bindings(e, o->delay_us > 0 ? o->delay_us : 100, o->bindings, o->pairs, o->seconds,
                          r, BINDING_MAX, &n);
    for (int i = 0; i < n; i++) {
        report_binding(&r[i], o->delay_us > 0 ? o->delay_us : 100);
        if (r[i].status != 0)
            rc = -1;
    }
    fflush(stdout);
    return rc;
}

/* The agent's own log (warn level and up) says whether anything went wrong. */
static void report_agent_log(struct env *e)
{
    int n = env_log_lines(e->agent_log);
    printf("\ndlockd log: %d line(s) at level warn or above\n", n);
    if (n > 0) {
        fflush(stdout);
        env_print_log(e->agent_log, 10);
    }
}

/* A row of the TLS table: figure, plaintext, TLS, ratio, target. */
static void trow(const char *what, const char *plain, const char *tls, const char *ratio,
                 const char *target)
{
    printf("  %-40s %12s %12s %9s  %s\n", what, plain, tls, ratio, target);
}

static void report_tls(const struct tls_result *r)
{
    const struct tls_side *p = &r->side[0], *t = &r->side[1];
    char n[64], v[64];
    printf("\nTLS to Redis against plaintext: one redis-server on loopback TCP, a plaintext and a "
           "TLS port;\nan agent on each (handoff off: every pair goes to Redis); %ld pairs, %d "
           "clients\n",
           r->pairs, r->clients);
    trow("", "plaintext", "TLS", "TLS/plain", "target");
    snprintf(n, sizeof n, "TLS 1-client pair p50 <= %.1fx plaintext", TARGET_TLS_RATIO);
    snprintf(v, sizeof v, "<= %.1fx  %s", TARGET_TLS_RATIO,
             target_note(n, fmt_us(t->d1.s.p50_us), fmt_us(p->d1.s.p50_us),
                         t->d1.s.n > 0 && t->d1.s.p50_us <= TARGET_TLS_RATIO * p->d1.s.p50_us));
    trow("dlock 1-client pair p50", fmt_us(p->d1.s.p50_us), fmt_us(t->d1.s.p50_us),
         fmt_ratio(t->d1.s.p50_us, p->d1.s.p50_us), v);
    trow("dlock 1-client pairs/s", fmt_count(p->d1.s.per_s), fmt_count(t->d1.s.per_s),
         fmt_ratio(t->d1.s.per_s, p->d1.s.per_s), "");
    const struct pair_result *runs[2][2] = {{&p->d1, &t->d1}, {&p->dm, &t->dm}};
    for (int k = 0; k < 2; k++) {
        const struct pair_result *a = runs[k][0], *b = runs[k][1];
        const char *what = k ? "many clients" : "1 client";
        snprintf(n, sizeof n, "TLS agent CPU per pair, %s <= %.0fx plaintext", what,
                 TARGET_TLS_CPU_RATIO);
        snprintf(v, sizeof v, "<= %.0fx  %s", TARGET_TLS_CPU_RATIO,
                 target_note(n, fmt_cpu_us(b->agent_us), fmt_cpu_us(a->agent_us),
                             a->agent_us > 0 && b->agent_us >= 0 &&
                                 b->agent_us <= TARGET_TLS_CPU_RATIO * a->agent_us));
        char w[64];
        snprintf(w, sizeof w, "CPU per pair, %s: dlockd", what);
        trow(w, fmt_cpu_us(a->agent_us), fmt_cpu_us(b->agent_us),
             fmt_ratio(b->agent_us, a->agent_us), v);
        snprintf(w, sizeof w, "CPU per pair, %s: redis-server", what);
        trow(w, fmt_cpu_us(a->redis_us), fmt_cpu_us(b->redis_us),
             fmt_ratio(b->redis_us, a->redis_us), "");
        snprintf(w, sizeof w, "CPU per pair, %s: client", what);
        trow(w, fmt_cpu_us(a->client_us), fmt_cpu_us(b->client_us),
             fmt_ratio(b->client_us, a->client_us), "");
    }
    trow("dlock many-client pairs/s", fmt_count(p->dm.s.per_s), fmt_count(t->dm.s.per_s),
         fmt_ratio(t->dm.s.per_s, p->dm.s.per_s), "");
    trow("redis-benchmark SET/s, 1 client", fmt_count(r->rb[0][0]), fmt_count(r->rb[1][0]),
         fmt_ratio(r->rb[1][0], r->rb[0][0]), "");
    trow("redis-benchmark SET/s, many clients", fmt_count(r->rb[0][1]), fmt_count(r->rb[1][1]),
         fmt_ratio(r->rb[1][1], r->rb[0][1]), "");
    if (r->delay_us > 0) {
        char w[64];
        snprintf(w, sizeof w, "dlock 1-client pair p50, %.0f us delay", r->delay_us);
        trow(w, fmt_us(p->dd.s.p50_us), fmt_us(t->dd.s.p50_us),
             fmt_ratio(t->dd.s.p50_us, p->dd.s.p50_us), "");
        snprintf(w, sizeof w, "redis-benchmark SET/s, 1 client, delay");
        trow(w, fmt_count(r->rb[0][2]), fmt_count(r->rb[1][2]), fmt_ratio(r->rb[1][2], r->rb[0][2]),
             "");
    }
    printf("  (redis-benchmark rows: a plain client's own cost of TLS, as plain hiredis 0.14 has "
           "no TLS; plain hiredis on loopback: the 1-client and many-client parts)\n");
    printf("  the part's agents logged %d line(s) at level warn or above\n", r->log_lines);
}

static int phase_tls(const struct opts *o, struct env *e)
{
    static struct tls_result r;
    if (!o->tls)
        return 0;
    progress("TLS: dlock over TLS against plaintext, redis-benchmark as the baseline");
    if (run_tls(e, o->delay_us, o->pairs, o->clients, o->seconds, &r) != 0)
        return -1;
    report_tls(&r);
    fflush(stdout);
    return 0;
}

/* Every part but the bindings, in order, until one fails. */
static int run_parts(const struct opts *o, struct env *e)
{
    static int (*const parts[])(const struct opts *, struct env *) = {
        phase_pairs,  phase_delay, phase_wake,     phase_waiting, phase_cohort,
        phase_hosts,  phase_kinds, phase_fairness, phase_quorum,  phase_check,
        phase_leases, phase_fleet, phase_tls};
    int rc = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0] && rc == 0; i++)
        rc = parts[i](o, e);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    if (parse_opts(argc, argv, &o) != 0)
        return 2;
    install_signals();
    atexit(at_exit);
    struct env *e = &the_env;
    e->keep = o.keep;
    if (env_start(e) != 0)
        return 1;
    fprintf(stderr, "dlock-bench: redis-server pid %d, dlockd pid %d, in %s\n", (int)e->redis.pid,
            (int)e->agent_pid, e->dir);
    printf("dlock-bench: %ld cores, redis-server %s, dlockd %s\n", sysconf(_SC_NPROCESSORS_ONLN),
           e->redis_version, DLOCKD_PATH);
    int rc = o.bindings ? phase_bindings(&o, e) : run_parts(&o, e);
    report_targets();
    const char *who;
    if (env_check(e, &who) != 0) {
        fprintf(stderr, "dlock-bench: %s is no longer running\n", who);
        rc = -1;
    }
    report_agent_log(e);
    env_stop(e);
    printf("dlockd exit status after SIGTERM: %d\n", e->agent_exit);
    if (rc != 0)
        fprintf(stderr, "dlock-bench: run did not complete\n");
    return rc == 0 ? 0 : 1;
}
