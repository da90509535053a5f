/* SPDX-License-Identifier: BSD-3-Clause */
/* main.c -- dlock-sim's command line: one seed with its trace, or a range
 * of seeds with a summary (tests/sim/README.md). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "sim.h"

#define MAX_REPORTED 5

struct bug {
    const char *name;
    int core; /* enum core_bug, or the model's own: -1 release_no_compare, -2 no_confirm,
               * -3 cluster_no_doubt, -4 cluster_ask_as_moved, -5 cluster_stale_owner,
               * -6 counted_renew_shortens, -7 counted_no_mismatch, -8 set_unsorted,
               * -9 bound_ignores_keepalive, -10 grant_lapsed_keepalive */
};

static const struct bug bugs[] = {
#ifdef DLOCK_PLANTED_BUGS
    {"no_drift", CORE_BUG_NO_DRIFT},
    {"renew_from_reply", CORE_BUG_RENEW_FROM_REPLY},
    {"grant_late", CORE_BUG_GRANT_LATE},
    {"no_withdraw", CORE_BUG_NO_WITHDRAW},
    {"jeopardy_valid", CORE_BUG_JEOPARDY_VALID},
    {"quorum_low_fence", CORE_BUG_QUORUM_LOW_FENCE},
    {"release_no_compare", -1},
    {"no_rewatch", CORE_BUG_NO_REWATCH},
    {"no_confirm", -2},
    {"doubt_ignored", CORE_BUG_DOUBT_IGNORED},
    {"handoff_same_fence", CORE_BUG_HANDOFF_SAME_FENCE},
    {"hold_forever", CORE_BUG_HOLD_FOREVER},
    {"no_progress", CORE_BUG_NO_PROGRESS},
    {"silent_loss", CORE_BUG_SILENT_LOSS},
    {"no_jeopardy", CORE_BUG_NO_JEOPARDY},
    {"cohort_unbounded", CORE_BUG_COHORT_UNBOUNDED},
    {"drop_release", CORE_BUG_DROP_RELEASE},
    {"not_ours_renews", CORE_BUG_NOT_OURS_RENEWS},
    {"no_outage_ride", CORE_BUG_NO_OUTAGE_RIDE},
    {"renew_storm", CORE_BUG_RENEW_STORM},
    {"quorum_no_exclusion", CORE_BUG_QUORUM_NO_EXCLUSION},
    {"queue_jump", CORE_BUG_QUEUE_JUMP},
    {"stale_confirm", CORE_BUG_STALE_CONFIRM},
    {"quorum_fence_unconfirmed", CORE_BUG_QUORUM_FENCE_UNCONFIRMED},
    {"cluster_no_doubt", -3},
    {"cluster_ask_as_moved", -4},
    {"cluster_stale_owner", -5},
    {"reentry_first_release", CORE_BUG_REENTRY_FIRST_RELEASE},
    {"join_same_fence", CORE_BUG_JOIN_SAME_FENCE},
    {"sem_over_limit", CORE_BUG_SEM_OVER_LIMIT},
    {"reader_joins_writer", CORE_BUG_READER_JOINS_WRITER},
    {"counted_renew_shortens", -6},
    {"counted_no_mismatch", -7},
    {"set_unsorted", -8},
    {"adopt_unchecked", CORE_BUG_ADOPT_UNCHECKED},
    {"bound_ignores_keepalive", -9},
    {"grant_from_notice_time", CORE_BUG_GRANT_FROM_NOTICE_TIME},
    {"grant_lapsed_keepalive", -10},
#endif
    {NULL, 0},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlock-sim [--seeds A..B | --seed N] [--mode single|quorum|sentinel|cluster]\n"
            "                 [--trace] [--bug NAME] [--expect-violation] [--twice] [--quiet]\n"
            "                 [--stop-first] [--seed-timeout S]\n"
            "  --seeds A..B        run seeds A to B, print a summary (default 1..1000)\n"
            "  --seed N            run seed N (with --trace: every event)\n"
            "  --mode M            force single, quorum, sentinel or cluster mode (else the seed\n"
            "                      chooses)\n"
            "  --trace             print every event\n"
            "  --bug NAME          plant a known bug (dlock-sim-planted only)\n"
            "  --expect-violation  exit 0 only if some seed finds a violation\n"
            "  --twice             run every seed twice and compare the traces' digests\n"
            "  --stop-first        stop at the first violation, and also print it as one line\n"
            "                      \"VIOLATION seed=N kind=K\" (K the check, spaces as '-')\n"
            "  --seed-timeout S    a seed that runs S seconds of real time ends the program\n"
            "                      with \"TIMEOUT seed=N\" and exit status 3 (a core that\n"
            "                      loops or storms names its seed instead of hanging)\n"
            "  DLOCK_SIM_MAX_SEEDS caps the number of seeds of a range (slow builds)\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!*s)
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

static int set_bug(const char *name)
{
    for (const struct bug *b = bugs; b->name; b++) {
        if (strcmp(b->name, name) != 0)
            continue;
#ifdef DLOCK_PLANTED_BUGS
        if (b->core >= 0)
            core_bug = (enum core_bug)b->core;
        else if (b->core == -1)
            sim_bug_release_no_compare = true;
        else if (b->core == -2)
            sim_bug_no_confirm = true;
        else if (b->core == -3)
            sim_bug_cluster_no_doubt = true;
        else if (b->core == -4)
            sim_bug_cluster_ask_as_moved = true;
        else if (b->core == -5)
            sim_bug_cluster_stale_owner = true;
        else if (b->core == -6)
            sim_bug_counted_renew_shortens = true;
        else if (b->core == -7)
            sim_bug_counted_no_mismatch = true;
        else if (b->core == -9)
            sim_bug_bound_ignores_keepalive = true;
        else if (b->core == -10)
            sim_bug_grant_lapsed_keepalive = true;
        else
            sim_bug_set_unsorted = true;
#endif
        return 0;
    }
    fprintf(stderr, "dlock-sim: unknown bug %s", name);
    if (!bugs[0].name)
        fprintf(stderr, " (this build has no planted bugs: use dlock-sim-planted)");
    else {
        fprintf(stderr, "; known:");
        for (const struct bug *b = bugs; b->name; b++)
            fprintf(stderr, " %s", b->name);
    }
    fprintf(stderr, "\n");
    return -1;
}

/* The line a seed that runs too long leaves behind: made before the seed
 * runs, written by the alarm's handler (write(2) is async-signal-safe). */
static char timeout_line[64];
static size_t timeout_len;

static void on_seed_alarm(int sig)
{
    (void)sig;
    ssize_t n = write(STDOUT_FILENO, timeout_line, timeout_len);
    (void)n;
    _exit(3);
}

static void seed_alarm(uint64_t seed, unsigned secs)
{
    if (!secs)
        return;
    int n = snprintf(timeout_line, sizeof timeout_line, "TIMEOUT seed=%" PRIu64 "\n", seed);
    timeout_len = n > 0 ? (size_t)n : 0;
    alarm(secs);
}

/* "VIOLATION seed=N kind=K": the check that fired (the part of what before
 * ": "), its spaces as '-', for scripts such as tests/sim/mutate.sh. */
static void print_machine_line(uint64_t seed, const char *what)
{
    const char *end = strstr(what, ": ");
    size_t len = end ? (size_t)(end - what) : strlen(what);
    printf("VIOLATION seed=%" PRIu64 " kind=", seed);
    for (size_t i = 0; i < len; i++)
        putchar(what[i] == ' ' ? '-' : what[i]);
    putchar('\n');
}

static const char *mode_flag(const struct sim_opts *o, const struct sim_result *r)
{
    (void)o;
    return r->quorum     ? "--mode quorum"
           : r->sentinel ? "--mode sentinel"
           : r->cluster  ? "--mode cluster"
                         : "--mode single";
}

int main(int argc, char **argv)
{
    struct sim_opts opts = {.mode = MODE_ANY};
    uint64_t first = 1, last = 1000;
    bool single_seed = false, twice = false, stop_first = false;
    unsigned seed_timeout = 0;
    const char *prog = "dlock-sim";
#ifdef DLOCK_PLANTED_BUGS
    prog = "dlock-sim-planted";
#endif
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--seeds") == 0 && v) {
            const char *dots = strstr(v, "..");
            char lo[32];
            if (!dots || (size_t)(dots - v) >= sizeof lo) {
                usage(stderr);
                return 2;
            }
            memcpy(lo, v, (size_t)(dots - v));
            lo[dots - v] = '\0';
            if (parse_u64(lo, &first) || parse_u64(dots + 2, &last) || last < first) {
                usage(stderr);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--seed") == 0 && v) {
            if (parse_u64(v, &first)) {
                usage(stderr);
                return 2;
            }
            last = first;
            single_seed = true;
            i++;
        } else if (strcmp(a, "--mode") == 0 && v) {
            if (strcmp(v, "single") == 0)
                opts.mode = MODE_SINGLE;
            else if (strcmp(v, "quorum") == 0)
                opts.mode = MODE_QUORUM;
            else if (strcmp(v, "sentinel") == 0)
                opts.mode = MODE_SENTINEL;
            else if (strcmp(v, "cluster") == 0)
                opts.mode = MODE_CLUSTER;
            else {
                usage(stderr);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--trace") == 0) {
            opts.trace = true;
        } else if (strcmp(a, "--bug") == 0 && v) {
            if (set_bug(v))
                return 2;
            opts.bug = v;
            i++;
        } else if (strcmp(a, "--expect-violation") == 0) {
            opts.expect_violation = true;
        } else if (strcmp(a, "--twice") == 0) {
            twice = true;
        } else if (strcmp(a, "--stop-first") == 0) {
            stop_first = true;
        } else if (strcmp(a, "--seed-timeout") == 0 && v) {
            uint64_t secs;
            if (parse_u64(v, &secs) || secs == 0 || secs > 86400) {
                usage(stderr);
                return 2;
            }
            seed_timeout = (unsigned)secs;
            i++;
        } else if (strcmp(a, "--quiet") == 0) {
            opts.quiet = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (opts.mode == MODE_QUORUM && !sim_quorum_available()) {
        fprintf(stderr, "dlock-sim: quorum mode is not built in\n");
        return 2;
    }
    const char *cap = getenv("DLOCK_SIM_MAX_SEEDS");
    uint64_t max_seeds;
    if (!single_seed && cap && parse_u64(cap, &max_seeds) == 0 && max_seeds &&
        last - first + 1 > max_seeds)
        last = first + max_seeds - 1;
    log_set_level(LOG_ERROR);
    if (seed_timeout)
        signal(SIGALRM, on_seed_alarm);

    uint64_t runs = 0, violations = 0, excused = 0, grants = 0, vtime = 0, nquorum = 0;
    uint64_t ncluster = 0, nsentinel = 0, fault_free = 0, ex_mutex = 0, ex_fence = 0, ex_orphan = 0,
             ex_late = 0, nrestarted = 0;
    unsigned faults[F_KINDS] = {0};
    uint64_t cov[COV_COUNT] = {0};
    int rc = 0;
    for (uint64_t seed = first; seed <= last; seed++) {
        struct sim_result r;
        seed_alarm(seed, seed_timeout);
        if (sim_run(seed, &opts, &r) != 0) {
            fprintf(stderr, "dlock-sim: seed %" PRIu64 ": set-up failed\n", seed);
            return 2;
        }
        if (twice) {
            struct sim_result again;
            if (sim_run(seed, &opts, &again) != 0 || again.digest != r.digest ||
                again.violation != r.violation) {
                printf("seed %" PRIu64 ": NOT DETERMINISTIC (digest %016" PRIx64 " then %016" PRIx64
                       ")\n",
                       seed, r.digest, again.digest);
                rc = 1;
            }
        }
        runs++;
        grants += r.grants;
        vtime += r.end_time;
        nquorum += r.quorum;
        nsentinel += r.sentinel;
        ncluster += r.cluster;
        fault_free += r.fault_free;
        nrestarted += r.restarted;
        excused += r.excused_count;
        ex_mutex += r.excused_mutex;
        ex_fence += r.excused_fence;
        ex_orphan += r.excused_orphan;
        ex_late += r.excused_late;
        for (int k = 0; k < F_KINDS; k++)
            faults[k] += r.faults_seen[k];
        for (int k = 0; k < COV_COUNT; k++)
            cov[k] += r.cov[k];
        if (single_seed) {
            printf("seed %" PRIu64 ": %s mode, %u node(s), %s, %" PRIu64 " grants, %" PRIu64
                   " ms virtual, digest %016" PRIx64 "\n",
                   seed,
                   r.quorum     ? "quorum"
                   : r.sentinel ? "sentinel"
                   : r.cluster  ? "cluster"
                                : "single",
                   r.nnodes, r.fault_free ? "no faults" : "faults", r.grants, r.end_time / 1000000,
                   r.digest);
            if (r.excused)
                printf("seed %" PRIu64 ": %u violation(s) excused by faults the contract "
                       "excludes\n",
                       seed, r.excused_count);
        }
        if (seed_timeout)
            alarm(0);
        if (!r.violation)
            continue;
        violations++;
        if (stop_first) {
            print_machine_line(seed, r.what);
            fflush(stdout);
        }
        if (violations <= MAX_REPORTED && !(opts.expect_violation && opts.quiet)) {
            printf("\nseed %" PRIu64 ": VIOLATION %s\n", seed, r.what);
            if (!opts.trace) {
                /* The same seed again, keeping its last events for the report. */
                struct sim_opts o = opts;
                o.ring = true;
                struct sim_result again;
                sim_run(seed, &o, &again);
            }
            printf("replay: %s --seed %" PRIu64 " %s%s%s --trace\n", prog, seed,
                   mode_flag(&opts, &r), opts.bug ? " --bug " : "", opts.bug ? opts.bug : "");
        }
        if (opts.expect_violation || stop_first || violations >= MAX_REPORTED)
            break;
    }
    if (!single_seed || !opts.quiet) {
        printf("\n%s: seeds %" PRIu64 "..%" PRIu64 ": %" PRIu64 " run (%" PRIu64 " quorum, %" PRIu64
               " sentinel, %" PRIu64 " cluster, %" PRIu64 " without faults, %" PRIu64
               " with agent restarts), %" PRIu64 " violation(s), %" PRIu64
               " excused by excluded faults\n",
               prog, first, first + runs - 1, runs, nquorum, nsentinel, ncluster, fault_free,
               nrestarted, violations, excused);
        printf("  excused: mutual exclusion %" PRIu64 ", fencing %" PRIu64 ", orphan keys %" PRIu64
               ", late doubt %" PRIu64 "\n",
               ex_mutex, ex_fence, ex_orphan, ex_late);
        printf("  reached:");
        for (int k = 0; k < COV_COUNT; k++)
            printf("%s %s %" PRIu64, k ? "," : "", coverage_names[k], cov[k]);
        printf("\n");
        printf("  grants %" PRIu64 ", mean virtual time %.3f s\n  faults:", grants,
               runs ? (double)vtime / (double)runs / 1e9 : 0.0);
        for (int k = 0; k < F_KINDS; k++)
            printf(" %s %u", fault_names[k], faults[k]);
        printf("\n");
    }
    if (opts.expect_violation)
        return violations ? rc : 1;
    return violations ? 1 : rc;
}
