/* SPDX-License-Identifier: BSD-3-Clause */
/* dlockctl.c -- runs a command while holding a dlock lease, as flock(1) does with a file;
 * shows the agent's status, leases and metrics from its status socket, and asks it to
 * reload its configuration. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "wire.h"

/* Exit codes, after sysexits.h where one fits; the same for every command. */
#define EXIT_FREE        1  /* holder, release --force: the name is free; unlock: no such holder */
#define EXIT_USAGE       64 /* EX_USAGE */
#define EXIT_UNAVAILABLE 69 /* EX_UNAVAILABLE: agent unreachable, Redis unavailable */
#define EXIT_SOFTWARE    70 /* EX_SOFTWARE: internal error, request refused */
#define EXIT_LIMIT       73 /* EX_CANTCREAT: a lease or waiter limit of the agent was hit */
#define EXIT_TEMPFAIL    75 /* EX_TEMPFAIL: default for -E */
#define EXIT_NOPERM      77 /* EX_NOPERM: the agent's policy refused the name, or a reload */
#define EXIT_CONFIG      78 /* EX_CONFIG: the agent refused its configuration file */
#define EXIT_LOST        79 /* the lease was lost while CMD ran */
#define EXIT_NOEXEC      126
#define EXIT_NOTFOUND    127

#define DEFAULT_KILL_MS 10000

/* The client socket: -s, else $DLOCK_SOCKET, else this (as the library). */
#define DEFAULT_SOCKET      "/run/dlock/dlock.sock"
#define STATUS_REQUEST_MAX  256        /* a request line, newline included */
#define STATUS_TIMEOUT_MS   5000       /* for the whole answer */
#define RELOAD_TIMEOUT_MS   70000      /* reload: the agent answers within 60 s */
#define STATUS_RESPONSE_MAX (64 << 20) /* a bigger answer is refused */

enum command {
    CMD_NONE,
    CMD_RUN,
    CMD_STATUS,
    CMD_LEASES,
    CMD_METRICS,
    CMD_HOLDER,
    CMD_RELOAD,
    CMD_HEALTH,
    CMD_RELEASE,
    CMD_LOCK,
    CMD_UNLOCK
};

/* health: the agent answered and can take locks, or cannot (Nagios's OK
 * and CRITICAL); an agent that does not answer is EXIT_UNAVAILABLE. */
#define EXIT_HEALTH_OK       0
#define EXIT_HEALTH_CRITICAL 2

struct run_opts {
    enum command command;
    const char *socket;        /* -s; NULL = $DLOCK_SOCKET or the default */
    const char *status_socket; /* -S; NULL = $DLOCK_STATUS_SOCKET or beside the socket */
    bool json;                 /* status, leases, holder: --json */
    bool live, verbose;        /* health: --live, --verbose */
    bool force;                /* release: --force */
    const char *pattern;       /* leases: NULL = every lease; holder: the name */
    const char *name;
    /* run: NAME, then the names of -a in their order */
    const char *names[DLOCK_SET_MAX];
    size_t nnames;
    char **argv;
    int64_t wait_ms;
    uint32_t ttl_ms;
    dlock_lock_spec spec; /* run: -x (the zero value), -S or -p */
    int conflict_exit;
    int64_t kill_ms;
    pid_t owner;      /* lock, unlock: --pid, else the parent */
    pid_t holder_pid; /* unlock: --holder */
};

/* State shared with the event callback and the main loop. */
struct run_state {
    dlock_client *client;
    dlock_lease_set *set; /* one lease per name: all held, or none */
    bool lost;
    bool announced; /* the loss was reported on stderr */
    int lost_reason;
    const char *lost_name; /* the name lost, when known */
    pid_t child;
    bool child_done;
    int child_status;
    int64_t kill_at; /* when to send SIGKILL; -1 = not scheduled */
};

static int sig_pipe[2] = {-1, -1};
static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction saved_actions[NSIG];

/* ---- help ---- */

static const char help_socket[] =
    "  -s, --socket PATH          the agent's client socket (default: $DLOCK_SOCKET,\n"
    "                             else " DEFAULT_SOCKET ")\n";
static const char help_status_socket[] =
    "  -S, --status-socket PATH   the agent's status socket (default:\n"
    "                             $DLOCK_STATUS_SOCKET, else beside the client socket:\n"
    "                             DIR/status.sock for DIR/dlock.sock, else X-status.sock\n"
    "                             for X.sock or X)\n";
static const char help_help[] = "  -h, --help                 print this help and exit\n";

/* One table for every command, as in dlockctl(1). */
static const char help_exit[] =
    "\nExit status:\n"
    "  0      status, leases, metrics: the answer was printed (whatever it says\n"
    "         of Redis); holder: NAME is held; lock: the lease is held; unlock:\n"
    "         it was given back; reload: the configuration was read and its\n"
    "         changes printed; health: the agent can take locks now (--live:\n"
    "         it answers); release: the name's key was deleted\n"
    "  1      holder: NAME is free (as test -e); unlock: no such holder;\n"
    "         release: the name was not held\n"
    "  2      health: the agent answered but cannot take locks now (Redis, or\n"
    "         a majority of its nodes, unreachable)\n"
    "  N      run: CMD's exit status (128+S when CMD was killed by signal S)\n"
    "  64     usage error: bad option, value, lock name or pattern; lock: this\n"
    "         owner holds NAME already\n"
    "  69     the agent is unreachable or does not answer, or Redis (in quorum\n"
    "         mode, a majority of the nodes) is unreachable or answered with an\n"
    "         error; holder: in quorum mode, no value is on a majority; unlock:\n"
    "         the holder did not give the lease back within 60 s\n"
    "  70     internal error, or the agent refused the request; reload: a\n"
    "         setting could not be applied (the others were)\n"
    "  73     run, lock: a lease or waiter limit of the agent was hit\n"
    "  75     run, lock: the lock stayed taken (-n, or the -w wait ran out); see -E\n"
    "  77     permission denied: this user may not connect to the agent's socket\n"
    "         (not in its group); run: the agent's policy does not allow this user\n"
    "         the lock name; holder: its see_all policy; reload: only root and the\n"
    "         agent's user may ask for it; release: no force line of the agent's\n"
    "         policy lets this user force the name\n"
    "  78     reload: the agent refused the file and keeps its old settings\n"
    "  79     run: the lease was lost while CMD ran; CMD was terminated; lock:\n"
    "         the lease was lost as it was taken; unlock: the lease had been lost\n"
    "         while held\n"
    "  126    run: CMD could not be executed\n"
    "  127    run: CMD was not found\n";

static void help_main(FILE *f)
{
    fprintf(f, "usage: dlockctl [-s SOCKET] [-S PATH] COMMAND [OPTIONS] [ARGUMENTS]\n"
               "       dlockctl -h | --help | -V | --version\n\n"
               "Runs a command while holding a dlock lease, as flock(1) does with a file,\n"
               "and shows the state of the host's dlock agent, dlockd.\n\n"
               "Commands:\n"
               "  run NAME [--] CMD [ARG...]  run CMD while holding the lock NAME (and those\n"
               "                              of -a)\n"
               "  lock NAME                   hold NAME until unlock, or until this shell exits\n"
               "  unlock NAME                 give back a lock taken by lock\n"
               "  status                      the agent, its Redis nodes, counters and leases\n"
               "  leases [PATTERN]            the leases the agent holds (fnmatch(3) glob)\n"
               "  metrics                     the agent's metrics, Prometheus text format\n"
               "  holder NAME                 who holds NAME in Redis now, from any host\n"
               "  reload                      read the configuration again, print what changed\n"
               "  health                      whether the agent can take locks now (one line;\n"
               "                              exit 0, 2, or 69 when it does not answer)\n"
               "  release --force NAME        free NAME whoever holds it (operators)\n"
               "'dlockctl COMMAND --help' describes the options of COMMAND.\n\n"
               "Options:\n");
    fputs(help_socket, f);
    fputs(help_status_socket, f);
    fputs(help_help, f);
    fputs("  -V, --version              print the version and exit\n", f);
    fputs(help_exit, f);
}

static void help_run(FILE *f)
{
    fprintf(f,
            "usage: dlockctl run [OPTIONS] [-a NAME2]... NAME [--] CMD [ARG...]\n"
            "       dlockctl run [OPTIONS] [-a NAME2]... -c STRING NAME\n\n"
            "Takes the lock NAME through the agent, runs CMD while holding it (with\n"
            "DLOCK_NAME and DLOCK_FENCE, the fencing token, in its environment), releases it\n"
            "when CMD exits, and exits with CMD's status. A lost lease stops CMD, and so\n"
            "does one put in doubt by a failover of Redis. With -a, CMD runs while holding\n"
            "every name, taken all or none (DLOCK_FENCES lists NAME=TOKEN for each).\n\n"
            "Options:\n"
            "  -a, --also NAME2           hold the lock NAME2 too (repeat for more, at most\n"
            "                             %d names in all); the options of the kind and the\n"
            "                             wait are for every name\n"
            "  -c, --command STRING       run the shell command STRING (/bin/sh -c STRING)\n"
            "                             instead of CMD, as flock -c does\n"
            "  -x, --exclusive            hold NAME alone (the default)\n"
            "  -S, --shared               hold NAME shared: with any other shared holders,\n"
            "                             never with an exclusive one (a read lock)\n"
            "  -p, --permits N            hold one of N permits of NAME: at most N run at once\n"
            "                             (a counting semaphore; every holder gives the same N)\n"
            "  -w, --wait, --timeout DURATION\n"
            "                             wait at most DURATION for the lock; 0: do not wait,\n"
            "                             as -n; 'forever' (the default): as long as it takes\n"
            "  -n, --nonblock, --nb       do not wait: fail at once if the lock is taken\n"
            "  -t, --ttl DURATION         the lease's TTL on Redis, renewed every third of it\n"
            "                             (default: the agent's default_ttl_ms, 30s unless\n"
            "                             configured)\n"
            "  -E, --conflict-exit-code CODE\n"
            "                             exit status, 0 to 255, when the lock stayed taken\n"
            "                             (default: %d)\n"
            "  -k, --kill-after DURATION  after a lease loss, send CMD SIGKILL this long after\n"
            "                             SIGTERM (default: %ds)\n",
            DLOCK_SET_MAX, EXIT_TEMPFAIL, DEFAULT_KILL_MS / 1000);
    fputs(help_socket, f);
    fputs(help_help, f);
    fputs("\nDURATION is in seconds unless it ends in ms, s, m or h; it may have a\n"
          "fraction, and is rounded up to whole milliseconds: -w 0.5, -w 500ms, -t 30s,\n"
          "-w 2m, -w 1.5h.\n",
          f);
    fputs(help_exit, f);
}

static void help_lock(FILE *f)
{
    fprintf(f,
            "usage: dlockctl lock [OPTIONS] NAME\n"
            "       dlockctl unlock [--pid PID] NAME | --holder PID\n\n"
            "lock takes the lock NAME through the agent for a holder process it leaves\n"
            "running, and prints, for eval in a shell,\n"
            "  DLOCK_HOLDER=PID     the holder process\n"
            "  DLOCK_FENCE=TOKEN    the fencing token\n"
            "  DLOCK_NAME=NAME\n"
            "The holder keeps the lease until its owner (the shell that ran dlockctl, or\n"
            "--pid) exits, or until unlock asks it to give the lease back; a lease lost\n"
            "meanwhile ends the holder, and unlock then says so. unlock waits for the\n"
            "holder and exits 0 when it gave the lease back, 1 when there is no such\n"
            "holder, 79 when the lease had been lost.\n"
            "  eval \"$(dlockctl lock -w 10 deploy)\" || exit\n"
            "  ...                       # commands that need the lock\n"
            "  dlockctl unlock deploy\n\n"
            "Options of lock:\n"
            "  -x, --exclusive            hold NAME alone (the default)\n"
            "  -S, --shared               hold NAME shared (a read lock)\n"
            "  -p, --permits N            hold one of N permits of NAME\n"
            "  -w, --wait, --timeout DURATION\n"
            "                             wait at most DURATION for the lock; 0: do not wait,\n"
            "                             as -n; 'forever' (the default)\n"
            "  -n, --nonblock, --nb       do not wait: fail at once if the lock is taken\n"
            "  -t, --ttl DURATION         the lease's TTL on Redis (default: the agent's)\n"
            "  -E, --conflict-exit-code CODE\n"
            "                             exit status when the lock stayed taken (default:\n"
            "                             %d)\n"
            "      --pid PID              hold the lock while process PID lives (default:\n"
            "                             the parent of dlockctl, the calling shell)\n"
            "Options of unlock:\n"
            "      --pid PID              the owner given to lock (default: the parent)\n"
            "      --holder PID           the holder process, as DLOCK_HOLDER says\n",
            EXIT_TEMPFAIL);
    fputs(help_socket, f);
    fputs(help_help, f);
    fputs(help_exit, f);
}

/* For status, leases, metrics, holder and reload. */
static void help_query(FILE *f, enum command cmd)
{
    static const char *const what[] = {
        [CMD_STATUS] = "status [--json]\n\n"
                       "Prints the agent, its Redis nodes, its counters and its leases, as text\n"
                       "tables or (--json) as one JSON object.\n",
        [CMD_LEASES] = "leases [--json] [PATTERN]\n\n"
                       "Prints the leases the agent holds, only those whose names match the\n"
                       "fnmatch(3) glob PATTERN if given; a table, or (--json) a JSON object.\n",
        [CMD_METRICS] = "metrics\n\n"
                        "Prints the agent's metrics in the Prometheus text format.\n",
        [CMD_HOLDER] = "holder [--json] NAME\n\n"
                       "Asks the agent who holds NAME in Redis now, whichever host took it.\n",
        [CMD_RELOAD] = "reload\n\n"
                       "Asks the agent to read its configuration file again, waits until it is\n"
                       "done, and prints each setting that changed, each that needs a restart\n"
                       "and why, or why the file was refused (the old settings then stay).\n"
                       "Only root and the agent's own user may ask.\n",
        [CMD_RELEASE] =
            "release --force NAME\n\n"
            "Frees NAME whoever holds it, on any host: the agent deletes its key in Redis.\n"
            "A holder through this agent is told its lease is lost at once; a holder on\n"
            "another host, at its next renewal. Prints who held it. Only the users and\n"
            "groups that a force line of the agent's [policy] names may ask (dlockd.conf(5)).\n",
    };
    fprintf(f, "usage: dlockctl [-S PATH] %s\nOptions:\n", what[cmd]);
    if (cmd != CMD_METRICS && cmd != CMD_RELOAD && cmd != CMD_RELEASE)
        fputs("      --json                 print JSON instead of text\n", f);
    if (cmd == CMD_RELEASE)
        fputs("      --force                delete the key whoever holds it (required)\n", f);
    fputs(help_status_socket, f);
    fputs("  -s, --socket PATH          the agent's client socket, beside which the status\n"
          "                             socket is looked for (default: $DLOCK_SOCKET, else\n"
          "                             " DEFAULT_SOCKET ")\n",
          f);
    fputs(help_help, f);
    fputs(help_exit, f);
}

static void help_health(FILE *f)
{
    fputs("usage: dlockctl [-S PATH] health [--live] [--verbose]\n\n"
          "Asks the agent whether it can take locks now (its Redis reachable; in quorum\n"
          "mode a majority of the nodes) and prints one line, \"OK - ...\" or\n"
          "\"CRITICAL - ...\", for service managers, probes and monitoring plugins.\n\n"
          "Options:\n"
          "      --live                 only whether the agent answers (liveness)\n"
          "  -v, --verbose              also a line per Redis node\n",
          f);
    fputs(help_status_socket, f);
    fputs(help_help, f);
    fputs("\nExit status:\n"
          "  0      ready: the agent can take locks now (--live: it answers)\n"
          "  2      the agent answered but cannot take locks now\n"
          "  64     usage error\n"
          "  69     the agent is unreachable or does not answer\n"
          "  70     an answer it does not understand (an agent without health)\n"
          "  77     this user may not connect to the status socket\n",
          f);
}

static void help(FILE *f, enum command cmd)
{
    if (cmd == CMD_NONE)
        help_main(f);
    else if (cmd == CMD_HEALTH)
        help_health(f);
    else if (cmd == CMD_RUN)
        help_run(f);
    else if (cmd == CMD_LOCK || cmd == CMD_UNLOCK)
        help_lock(f);
    else
        help_query(f, cmd);
}

static const char *const command_names[] = {
    [CMD_RUN] = "run",         [CMD_STATUS] = "status",   [CMD_LEASES] = "leases",
    [CMD_METRICS] = "metrics", [CMD_HOLDER] = "holder",   [CMD_RELOAD] = "reload",
    [CMD_HEALTH] = "health",   [CMD_RELEASE] = "release", [CMD_LOCK] = "lock",
    [CMD_UNLOCK] = "unlock",
};

/* Prints "dlockctl: MSG[: ARG]" and where to find help; returns the usage
 * exit code. */
static int usage_error(enum command cmd, const char *msg, const char *arg)
{
    fprintf(stderr, "dlockctl: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    fprintf(stderr, "Try 'dlockctl %s%s--help' for more information.\n",
            cmd ? command_names[cmd] : "", cmd ? " " : "");
    return EXIT_USAGE;
}

/* Reports what getopt_long() rejected; it prints nothing itself (opterr = 0)
 * because argv[0] of a sub-command is the sub-command's name. */
static int option_error(enum command cmd, int ch, const char *word)
{
    char opt[3] = {'-', (char)optopt, '\0'};
    const char *what = optopt ? opt : word;
    return usage_error(cmd, ch == ':' ? "option needs an argument" : "unknown option", what);
}

/* Parses a decimal integer in [min, max]; false on anything else. */
static bool parse_num(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* On CLOCK_BOOTTIME, the clock of the lease page's deadlines. */
static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- durations ---- */

/* Digits with an optional fraction, as a whole part and a fraction of
 * frac / scale (at most 9 digits kept; rest: a nonzero digit beyond). */
struct decimal {
    int64_t whole, frac, scale;
    bool rest, overflow;
};

/* Reads the number at the start of s; returns what follows it, or NULL when
 * no digit is there. */
static const char *read_decimal(const char *s, struct decimal *d)
{
    *d = (struct decimal){.scale = 1};
    bool digits = false;
    for (; isdigit((unsigned char)*s); s++, digits = true) {
        if (d->whole > (INT64_MAX - 9) / 10)
            d->overflow = true;
        else
            d->whole = d->whole * 10 + (*s - '0');
    }
    if (*s == '.')
        for (s++; isdigit((unsigned char)*s); s++, digits = true) {
            if (d->scale < 1000000000) {
                d->frac = d->frac * 10 + (*s - '0');
                d->scale *= 10;
            } else if (*s != '0') {
                d->rest = true;
            }
        }
    return digits ? s : NULL;
}

/* Parses a duration: seconds, or the unit it ends in (ms, s, m, h), with an
 * optional fraction, rounded up to whole milliseconds, in [min_ms, max_ms].
 * NULL with *ms set, or what is wrong with it. */
static const char *parse_duration(const char *s, int64_t min_ms, int64_t max_ms, int64_t *ms)
{
    static const struct {
        const char *suffix;
        int64_t ms;
    } units[] = {{"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    struct decimal d;
    const char *unit = read_decimal(s, &d);
    if (!unit)
        return *s == '-' ? "negative" : "not a number";
    size_t u = 0;
    while (u < sizeof units / sizeof units[0] && strcmp(unit, units[u].suffix) != 0)
        u++;
    if (u == sizeof units / sizeof units[0])
        return "unknown unit";
    int64_t per = units[u].ms;
    /* frac < 10^9 and per <= 3.6 * 10^6: no overflow. */
    int64_t part = d.frac * per, frac_ms = part / d.scale + (part % d.scale != 0 || d.rest);
    if (d.overflow || d.whole > max_ms / per || d.whole * per > max_ms - frac_ms)
        return "too long";
    *ms = d.whole * per + frac_ms;
    if (*ms < min_ms)
        return "too short";
    return NULL;
}

/* Parses the duration of option `what` into *ms, or reports it; returns
 * 0 or the usage exit code. */
static int duration_opt(const char *what, const char *s, int64_t min_ms, int64_t max_ms,
                        int64_t *ms)
{
    const char *problem = parse_duration(s, min_ms, max_ms, ms);
    if (!problem)
        return 0;
    char msg[512]; /* the value is cut short if need be */
    if (strcmp(problem, "too long") == 0)
        snprintf(msg, sizeof msg, "invalid %s '%.200s': too long (at most %lldms)", what, s,
                 (long long)max_ms);
    else if (strcmp(problem, "too short") == 0)
        snprintf(msg, sizeof msg, "invalid %s '%.200s': must be at least %lldms", what, s,
                 (long long)min_ms);
    else
        snprintf(msg, sizeof msg,
                 "invalid %s '%.200s': %s; a duration is seconds, or ends in ms, "
                 "s, m or h (0.5, 500ms, 30s, 2m)",
                 what, s, problem);
    return usage_error(CMD_RUN, msg, NULL);
}

/* ---- option parsing ---- */

/* The options run and lock share: -s, -x, -S, -p, -w, -n, -t and -E. False
 * when ch is none of them; else true, with *rc the usage error's exit code
 * (0: none). */
static bool lease_opt(enum command cmd, int ch, const char *arg, struct run_opts *o,
                      bool *exclusive, int *rc)
{
    int64_t v;
    switch (ch) {
    case 's':
        o->socket = arg;
        return true;
    case 'x':
    case 'S':
        /* The last of -x and -S wins, as with flock(1). */
        *exclusive = ch == 'x';
        o->spec.kind = ch == 'x' ? DLOCK_KIND_EXCLUSIVE : DLOCK_KIND_SHARED;
        return true;
    case 'p':
        if (!parse_num(arg, 1, UINT32_MAX, &v))
            *rc = usage_error(cmd, "invalid permit count (1 to 4294967295)", arg);
        else
            o->spec.permits = (uint32_t)v;
        return true;
    case 'w':
        if (strcmp(arg, "forever") == 0)
            o->wait_ms = DLOCK_WAIT_FOREVER;
        else
            *rc = duration_opt("wait time", arg, 0, INT64_MAX, &o->wait_ms);
        return true;
    case 'n':
        o->wait_ms = DLOCK_WAIT_NONE;
        return true;
    case 't':
        *rc = duration_opt("TTL", arg, 1, UINT32_MAX, &v);
        if (*rc == 0)
            o->ttl_ms = (uint32_t)v;
        return true;
    case 'E':
        if (!parse_num(arg, 0, 255, &v))
            *rc = usage_error(cmd, "invalid exit code (0 to 255)", arg);
        else
            o->conflict_exit = (int)v;
        return true;
    default:
        return false;
    }
}

/* The lease's kind from -x, -S and -p: 0, or the usage error's exit code. */
static int lease_kind(enum command cmd, struct run_opts *o, bool exclusive)
{
    if (o->spec.permits && (exclusive || o->spec.kind == DLOCK_KIND_SHARED))
        return usage_error(cmd, "--permits takes neither --shared nor --exclusive", NULL);
    if (o->spec.permits)
        o->spec.kind = DLOCK_KIND_SEMAPHORE;
    return 0;
}

/* Options of `run` (argv[0] is "run"), then NAME and CMD. */
static int parse_run(int argc, char **argv, struct run_opts *o)
{
    static const struct option longopts[] = {{"also", required_argument, NULL, 'a'},
                                             {"command", required_argument, NULL, 'c'},
                                             {"wait", required_argument, NULL, 'w'},
                                             {"timeout", required_argument, NULL, 'w'},
                                             {"exclusive", no_argument, NULL, 'x'},
                                             {"shared", no_argument, NULL, 'S'},
                                             {"permits", required_argument, NULL, 'p'},
                                             {"nonblock", no_argument, NULL, 'n'},
                                             {"nb", no_argument, NULL, 'n'},
                                             {"ttl", required_argument, NULL, 't'},
                                             {"conflict-exit-code", required_argument, NULL, 'E'},
                                             {"kill-after", required_argument, NULL, 'k'},
                                             {"socket", required_argument, NULL, 's'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch, rc = 0;
    optind = 0; /* restart getopt on the sub-command */
    opterr = 0;
    bool exclusive = false;
    const char *shell_cmd = NULL;
    o->nnames = 1; /* names[0] is NAME, after the options */
    while (rc == 0 &&
           (ch = getopt_long(argc, argv, "+:s:w:nt:E:k:xSp:a:c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            shell_cmd = optarg;
            break;
        case 'a':
            if (o->nnames == DLOCK_SET_MAX)
                return usage_error(CMD_RUN, "too many lock names", optarg);
            o->names[o->nnames++] = optarg;
            break;
        case 'k':
            rc = duration_opt("kill delay", optarg, 0, INT32_MAX, &o->kill_ms);
            break;
        case 'h':
            help(stdout, CMD_RUN);
            exit(0);
        default:
            if (!lease_opt(CMD_RUN, ch, optarg, o, &exclusive, &rc))
                return option_error(CMD_RUN, ch, argv[optind - 1]);
        }
    }
    if (rc == 0)
        rc = lease_kind(CMD_RUN, o, exclusive);
    if (rc != 0)
        return rc;
    if (optind >= argc)
        return usage_error(CMD_RUN, "missing lock name", NULL);
    o->name = o->names[0] = argv[optind++];
    for (size_t i = 0; i < o->nnames; i++)
        for (size_t j = i + 1; j < o->nnames; j++)
            if (strcmp(o->names[i], o->names[j]) == 0)
                return usage_error(CMD_RUN, "lock name given twice", o->names[i]);
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (shell_cmd) {
        /* flock -c: the shell runs the string; nothing may follow NAME. */
        static char *sh[] = {"/bin/sh", "-c", NULL, NULL};
        if (optind < argc)
            return usage_error(CMD_RUN, "-c takes no CMD after NAME", argv[optind]);
        sh[2] = (char *)shell_cmd;
        o->argv = sh;
        return 0;
    }
    if (optind >= argc)
        return usage_error(CMD_RUN, "missing command (or -c STRING)", NULL);
    o->argv = argv + optind;
    return 0;
}

/* Options of `lock` or `unlock` (argv[0]), then NAME. */
static int parse_lock(int argc, char **argv, struct run_opts *o)
{
    enum { OPT_PID = 0x100, OPT_HOLDER };
    static const struct option longopts[] = {{"wait", required_argument, NULL, 'w'},
                                             {"timeout", required_argument, NULL, 'w'},
                                             {"exclusive", no_argument, NULL, 'x'},
                                             {"shared", no_argument, NULL, 'S'},
                                             {"permits", required_argument, NULL, 'p'},
                                             {"nonblock", no_argument, NULL, 'n'},
                                             {"nb", no_argument, NULL, 'n'},
                                             {"ttl", required_argument, NULL, 't'},
                                             {"conflict-exit-code", required_argument, NULL, 'E'},
                                             {"socket", required_argument, NULL, 's'},
                                             {"pid", required_argument, NULL, OPT_PID},
                                             {"holder", required_argument, NULL, OPT_HOLDER},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    enum command cmd = o->command;
    bool unlocking = cmd == CMD_UNLOCK;
    int64_t v;
    int ch, rc = 0;
    optind = 0;
    opterr = 0;
    bool exclusive = false;
    o->owner = getppid();
    o->nnames = 1;
    while (rc == 0 && (ch = getopt_long(argc, argv, unlocking ? "+:s:h" : "+:s:w:nt:E:xSp:h",
                                        longopts, NULL)) != -1) {
        if (unlocking && ch != OPT_PID && ch != OPT_HOLDER && ch != 's' && ch != 'h' && ch != ':' &&
            ch != '?')
            return usage_error(cmd, "unknown option", argv[optind - 1]);
        switch (ch) {
        case OPT_PID:
        case OPT_HOLDER:
            if (!parse_num(optarg, 1, INT32_MAX, &v))
                return usage_error(cmd, "invalid process id", optarg);
            if (ch == OPT_PID)
                o->owner = (pid_t)v;
            else if (unlocking)
                o->holder_pid = (pid_t)v;
            else
                return usage_error(cmd, "unknown option", "--holder");
            break;
        case 'h':
            help(stdout, cmd);
            exit(0);
        default:
            if (!lease_opt(cmd, ch, optarg, o, &exclusive, &rc))
                return option_error(cmd, ch, argv[optind - 1]);
        }
    }
    if (rc == 0)
        rc = lease_kind(cmd, o, exclusive);
    if (rc != 0)
        return rc;
    if (optind < argc)
        o->name = o->names[0] = argv[optind++];
    if (!o->name && !o->holder_pid)
        return usage_error(
            cmd, unlocking ? "missing lock name (or --holder PID)" : "missing lock name", NULL);
    if (o->name && strlen(o->name) > WIRE_MAX_NAME)
        return usage_error(cmd, "lock name too long", NULL);
    if (optind < argc)
        return usage_error(cmd, "unexpected argument", argv[optind]);
    return 0;
}

/* A pattern the request line can carry: not empty, no space or control
 * character (no lock name has one), and short enough for the line. */
static const char *pattern_problem(const char *p)
{
    if (*p == '\0')
        return "empty pattern";
    for (const unsigned char *c = (const unsigned char *)p; *c; c++)
        if (*c <= ' ' || *c == 0x7f)
            return "pattern with a space or control character";
    if (strlen("leases-json \n") + strlen(p) > STATUS_REQUEST_MAX)
        return "pattern too long";
    return NULL;
}

/* The NAME of `holder` or the PATTERN of `leases`, from argv[optind]. */
static int parse_operand(int argc, char **argv, struct run_opts *o)
{
    if (o->command == CMD_RELEASE && !o->force)
        return usage_error(o->command,
                           "release needs --force (a holder releases its own lease by ending it)",
                           NULL);
    if (o->command == CMD_HOLDER || o->command == CMD_RELEASE) {
        if (optind >= argc)
            return usage_error(o->command, "missing lock name", NULL);
        o->pattern = argv[optind++];
        if (pattern_problem(o->pattern))
            return usage_error(o->command, "invalid lock name", *o->pattern ? o->pattern : NULL);
    } else if (o->command == CMD_LEASES && optind < argc) {
        o->pattern = argv[optind++];
        const char *problem = pattern_problem(o->pattern);
        if (problem) /* an empty or very long pattern is not worth printing */
            return usage_error(o->command, problem,
                               *o->pattern && !strstr(problem, "long") ? o->pattern : NULL);
    }
    if (optind < argc)
        return usage_error(o->command, "unexpected argument", argv[optind]);
    return 0;
}

/* Parses the options and arguments of `status`, `leases`, `metrics`,
 * `holder` and `reload` (argv[0] is the sub-command). Options may follow the
 * operand. */
static int parse_query(int argc, char **argv, struct run_opts *o)
{
    enum { OPT_JSON = 0x100, OPT_FORCE };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},         {"json", no_argument, NULL, OPT_JSON},
        {"force", no_argument, NULL, OPT_FORCE},  {"status-socket", required_argument, NULL, 'S'},
        {"socket", required_argument, NULL, 's'}, {NULL, 0, NULL, 0}};
    int ch;
    optind = 0; /* restart getopt on the sub-command */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":S:s:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'S':
            o->status_socket = optarg;
            break;
        case 's':
            o->socket = optarg;
            break;
        case OPT_JSON:
            if (o->command == CMD_METRICS || o->command == CMD_RELOAD || o->command == CMD_RELEASE)
                return usage_error(o->command, "unknown option", "--json");
            o->json = true;
            break;
        case OPT_FORCE:
            if (o->command != CMD_RELEASE)
                return usage_error(o->command, "unknown option", "--force");
            o->force = true;
            break;
        case 'h':
            help(stdout, o->command);
            exit(0);
        default:
            return option_error(o->command, ch, argv[optind - 1]);
        }
    }
    return parse_operand(argc, argv, o);
}

/* Parses the options of `health` (argv[0] is the sub-command). */
static int parse_health(int argc, char **argv, struct run_opts *o)
{
    enum { OPT_LIVE = 0x100 };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},         {"live", no_argument, NULL, OPT_LIVE},
        {"verbose", no_argument, NULL, 'v'},      {"status-socket", required_argument, NULL, 'S'},
        {"socket", required_argument, NULL, 's'}, {NULL, 0, NULL, 0}};
    int ch;
    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":S:s:hv", longopts, NULL)) != -1) {
        switch (ch) {
        case 'S':
            o->status_socket = optarg;
            break;
        case 's':
            o->socket = optarg;
            break;
        case OPT_LIVE:
            o->live = true;
            break;
        case 'v':
            o->verbose = true;
            break;
        case 'h':
            help(stdout, o->command);
            exit(0);
        default:
            return option_error(o->command, ch, argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error(o->command, "unexpected argument", argv[optind]);
    return 0;
}

static enum command command_of(const char *word)
{
    for (size_t i = 0; i < sizeof command_names / sizeof command_names[0]; i++)
        if (command_names[i] && strcmp(word, command_names[i]) == 0)
            return (enum command)i;
    return CMD_NONE;
}

/* Parses the global options and the sub-command. */
static int parse_args(int argc, char **argv, struct run_opts *o)
{
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {"socket", required_argument, NULL, 's'},
                                             {"status-socket", required_argument, NULL, 'S'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+:s:S:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 's':
            o->socket = optarg;
            break;
        case 'S':
            o->status_socket = optarg;
            break;
        case 'h':
            help(stdout, CMD_NONE);
            exit(0);
        case 'V':
            printf("dlockctl (dlock) %d.%d.%d\n", DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR,
                   DLOCK_VERSION_PATCH);
            exit(0);
        default:
            return option_error(CMD_NONE, ch, argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error(
            CMD_NONE,
            "missing command (run, lock, unlock, status, leases, metrics, holder, health, reload "
            "or release)",
            NULL);
    o->command = command_of(argv[optind]);
    if (o->command == CMD_NONE)
        return usage_error(CMD_NONE, "unknown command", argv[optind]);
    if (o->command == CMD_RUN)
        return parse_run(argc - optind, argv + optind, o);
    if (o->command == CMD_HEALTH)
        return parse_health(argc - optind, argv + optind, o);
    if (o->command == CMD_LOCK || o->command == CMD_UNLOCK)
        return parse_lock(argc - optind, argv + optind, o);
    return parse_query(argc - optind, argv + optind, o);
}

/* ---- exit codes and connection errors ---- */

/* The exit status for a DLOCK_E* code, the same for every command; `taken`
 * for a lock that stayed taken. */
static int exit_status_of(int err, int taken)
{
    switch (err) {
    case DLOCK_EBUSY:
    case DLOCK_ETIMEDOUT:
        return taken;
    case DLOCK_EINVAL:
    case DLOCK_EBADNAME:
    case DLOCK_ENAMETOOLONG:
        return EXIT_USAGE;
    case DLOCK_ENOMEM:
    case DLOCK_EKIND: /* the name is used as another kind of lock */
        return EXIT_SOFTWARE;
    case DLOCK_EDENIED:
        return EXIT_NOPERM;
    case DLOCK_ELIMIT:
        return EXIT_LIMIT;
    default: /* the agent, or Redis, unreachable or in trouble */
        return EXIT_UNAVAILABLE;
    }
}

/* Tries to connect to the unix socket at path; returns the socket, or -1
 * with errno set. */
static int connect_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc;
    while ((rc = connect(fd, (struct sockaddr *)&sa, sizeof sa)) != 0 && errno == EINTR)
        ;
    if (rc != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* What to try when connecting to path failed with e, in parentheses, or "". */
static void connect_hint(int e, const char *path, const char *unset, char *out, size_t cap)
{
    struct stat st;
    bool there = stat(path, &st) == 0;
    bool denied = e == EACCES || e == EPERM;
    struct group *g = there && denied ? getgrgid(st.st_gid) : NULL;
    struct passwd *pw = there && denied ? getpwuid(st.st_uid) : NULL;
    if (denied && there && !(st.st_mode & S_IWGRP) && pw)
        snprintf(out, cap,
                 " (only its owner, user '%s', may use it: the agent's socket mode keeps its "
                 "group out; ask for 0660 and a group you are in)",
                 pw->pw_name);
    else if (denied && g)
        snprintf(out, cap,
                 " (are you in the group '%s' that may use it? join it, e.g. usermod -aG %s "
                 "USER, and log in again)",
                 g->gr_name, g->gr_name);
    else if (denied)
        snprintf(out, cap,
                 " (are you in the group that may use it, e.g. 'dlock'? join it and log in "
                 "again)");
    else if (e == ECONNREFUSED && there && !S_ISSOCK(st.st_mode))
        snprintf(out, cap, " (it is not a socket)");
    else if (e == ECONNREFUSED)
        snprintf(out, cap,
                 " (no agent listens there: dlockd is not running, or left a stale "
                 "socket file behind)");
    else if (e == ENOENT)
        snprintf(out, cap, " (is dlockd running? %s)", unset);
    else if (e == EAGAIN || e == ETIMEDOUT)
        snprintf(out, cap, " (the agent does not accept connections: overloaded or stopped?)");
    else
        out[0] = '\0';
}

/* The exit status after connecting failed with errno e: permission denied is
 * not the agent being down. */
static int connect_exit(int e)
{
    return e == ENAMETOOLONG           ? EXIT_USAGE
           : e == EACCES || e == EPERM ? EXIT_NOPERM
                                       : EXIT_UNAVAILABLE;
}

/* Reports that connecting to the agent's socket `what` at path failed with
 * errno e; `unset` says where the path comes from and how to change it. */
static void connect_error(const char *what, const char *path, int e, const char *unset)
{
    char hint[400];
    connect_hint(e, path, unset, hint, sizeof hint);
    const char *why = e == ENAMETOOLONG ? "path too long for a unix socket"
                      : e == EAGAIN     ? "timed out"
                                        : strerror(e);
    fprintf(stderr, "dlockctl: cannot connect to the dlock agent%s at %s: %s%s\n", what, path, why,
            hint);
}

/* ---- signals ---- */

/* Queues the signal for the main loop. A terminal's SIGINT or SIGHUP (sent by
 * the kernel, SI_KERNEL) reached CMD's process group already: forwarding it
 * would deliver it twice. */
static void on_signal(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    if (sig != SIGCHLD && si && si->si_code == SI_KERNEL)
        return;
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(sig_pipe[1], &b, 1);
    (void)n; /* a full pipe already holds a wake-up */
    errno = saved;
}

static int install_handler(int sig)
{
    struct sigaction sa = {.sa_sigaction = on_signal, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, NULL, &saved_actions[sig]) != 0)
        return -1;
    /* A signal ignored at start stays ignored, as a shell would leave it. */
    if (sig != SIGCHLD && saved_actions[sig].sa_handler == SIG_IGN)
        return 0;
    return sigaction(sig, &sa, NULL);
}

static int setup_signals(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    if (install_handler(SIGCHLD) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(forwarded_signals[0]); i++)
        if (install_handler(forwarded_signals[i]) != 0)
            return -1;
    return 0;
}

/* In the child: gives CMD the dispositions dlockctl itself started with. */
static void restore_signals(void)
{
    sigaction(SIGCHLD, &saved_actions[SIGCHLD], NULL);
    for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(forwarded_signals[0]); i++)
        sigaction(forwarded_signals[i], &saved_actions[forwarded_signals[i]], NULL);
}

/* ---- the command ---- */

/* Forks and execs CMD. An exec failure comes back as errno through a
 * close-on-exec pipe, which reads EOF once the exec worked. Returns 0, or the
 * exit code to leave with. */
static int spawn(struct run_state *st, char **argv)
{
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) != 0) {
        fprintf(stderr, "dlockctl: pipe: %s\n", strerror(errno));
        return EXIT_SOFTWARE;
    }
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old); /* no handler of ours may run in the child */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* CMD must not outlive dlockctl: the agent releases the lock as soon
         * as dlockctl's connection closes. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(EXIT_LOST);
        restore_signals();
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(ep[0]);
        execvp(argv[0], argv);
        int e = errno;
        ssize_t n = write(ep[1], &e, sizeof(e));
        (void)n;
        _exit(e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC);
    }
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    if (pid < 0) {
        close(ep[0]);
        fprintf(stderr, "dlockctl: fork: %s\n", strerror(fork_errno));
        return EXIT_SOFTWARE;
    }
    st->child = pid;
    int e;
    ssize_t n;
    while ((n = read(ep[0], &e, sizeof(e))) < 0 && errno == EINTR)
        ;
    close(ep[0]);
    if (n != (ssize_t)sizeof(e))
        return 0;
    fprintf(stderr, "dlockctl: %s: %s\n", argv[0], strerror(e));
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    st->child_done = true;
    return e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
}

/* The exit code a shell would give for this wait status. */
static int exit_code_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return EXIT_SOFTWARE;
}

static void reap_child(struct run_state *st)
{
    int status;
    pid_t r;
    while ((r = waitpid(st->child, &status, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r == st->child) {
        st->child_done = true;
        st->child_status = status;
    }
}

/* Handles the signals queued by on_signal(). */
static void drain_signals(struct run_state *st)
{
    unsigned char buf[64];
    ssize_t n;
    while ((n = read(sig_pipe[0], buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == SIGCHLD)
                reap_child(st);
            else if (!st->child_done)
                kill(st->child, buf[i]);
        }
    }
    reap_child(st); /* a SIGCHLD may have been coalesced with an earlier one */
}

static bool set_member(const dlock_lease_set *set, const dlock_lease *lease)
{
    for (size_t i = 0; i < dlock_lease_set_count(set); i++)
        if (dlock_lease_set_lease(set, i) == lease)
            return true;
    return false;
}

/* A lease event ends the run when the lease is lost, and when a failover of
 * Redis puts it in doubt (JEOPARDY, DLOCK_EFAILOVER): from that moment it is
 * not proven held, the promoted replica may lack its key and another host
 * may hold the lock there, and CMD cannot be paused until the agent knows.
 * That the doubt clears a moment later (HELD: the key was there) does not
 * undo the stop: CMD must not rely on what it could not be sure of
 * (docs/failover.md). Other JEOPARDY events leave the lease valid up to its
 * deadline, which supervise() watches. With several names, any member's
 * loss or doubt is the run's. */
static void on_lease_event(dlock_client *c, dlock_lease *lease, dlock_state state, int reason,
                           void *arg)
{
    struct run_state *st = arg;
    (void)c;
    /* Before the set is whole, every lease of the client is one of its
     * members: the acquire gives up the set when one is lost. */
    if (st->lost || (st->set && !set_member(st->set, lease)))
        return;
    if (state == DLOCK_STATE_LOST) {
        st->lost = true;
        st->lost_reason = reason ? reason : DLOCK_ELOST;
    } else if (state == DLOCK_STATE_JEOPARDY && reason == DLOCK_EFAILOVER) {
        st->lost = true;
        st->lost_reason = DLOCK_EFAILOVER;
    }
    if (st->lost)
        st->lost_name = dlock_lease_name(lease);
}

/* The lock names on stderr: "a", "a and b", "a, b and c". */
static void print_names(const struct run_opts *o)
{
    for (size_t i = 0; i < o->nnames; i++)
        fprintf(stderr, "%s%s", i == 0 ? "" : i + 1 == o->nnames ? " and " : ", ", o->names[i]);
}

static void announce_loss(struct run_state *st, const struct run_opts *o, int reason)
{
    if (st->announced)
        return;
    st->announced = true;
    const char *why =
        reason == DLOCK_ENOANSWER ? "the agent did not answer the release" : dlock_strerror(reason);
    fprintf(stderr, "dlockctl: lease on ");
    if (st->lost_name)
        fputs(st->lost_name, stderr);
    else
        print_names(o);
    fprintf(stderr, " lost: %s\n", why);
}

/* Tells CMD to stop after the lease was lost: SIGTERM now, SIGKILL later. */
static void stop_child(struct run_state *st, const struct run_opts *o)
{
    announce_loss(st, o, st->lost_reason);
    if (st->child_done)
        return;
    kill(st->child, SIGTERM);
    st->kill_at = now_ms() + o->kill_ms;
}

/* The lease's validity left, in ns. A check can also say 0 when it met the
 * agent in the middle of writing the slot (the agent may have been preempted
 * there): only a 0 that lasts a few milliseconds is a loss. */
static int64_t lease_left_ns(const dlock_lease *lease)
{
    for (int i = 0; i < 3; i++) {
        int64_t left = dlock_lease_remaining_ns(lease);
        if (left > 0)
            return left;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    return 0;
}

/* The validity left of the set's leases, in ns: the least of them; at 0,
 * *expired names the lease that has none left. */
static int64_t set_left_ns(const dlock_lease_set *set, const char **expired)
{
    int64_t least = INT64_MAX;
    for (size_t i = 0; i < dlock_lease_set_count(set); i++) {
        const dlock_lease *l = dlock_lease_set_lease(set, i);
        int64_t left = lease_left_ns(l);
        if (left == 0) {
            *expired = dlock_lease_name(l);
            return 0;
        }
        if (left < least)
            least = left;
    }
    return least;
}

/* Waits for CMD to exit while watching the leases. */
static void supervise(dlock_client *c, struct run_state *st, const struct run_opts *o)
{
    bool stopping = false;
    while (!st->child_done) {
        if (st->lost && !stopping) {
            stop_child(st, o);
            stopping = true;
        }
        /* The lease page proves the lease until its deadline; past it with no
         * word from the agent (stopped, wedged), the lock may be someone
         * else's: that is a loss too. */
        const char *expired = NULL;
        int64_t left_ns = stopping ? -1 : set_left_ns(st->set, &expired);
        if (left_ns == 0 && !st->lost) {
            /* Its event says why, when the agent sent one (on_lease_event):
             * a failover's doubt, or the loss. */
            dlock_client_dispatch(c);
            if (!st->lost) {
                st->lost = true;
                st->lost_reason = DLOCK_EUNAVAIL; /* the agent could not prove it */
                st->lost_name = expired;
            }
            continue;
        }
        int timeout = left_ns < 0 ? -1 : (int)(left_ns / 1000000 + 1);
        if (left_ns > (int64_t)INT_MAX * 1000000)
            timeout = INT_MAX;
        if (st->kill_at >= 0) {
            int64_t left = st->kill_at - now_ms();
            if (left <= 0) {
                kill(st->child, SIGKILL);
                st->kill_at = -1;
                continue;
            }
            if (timeout < 0 || left < timeout)
                timeout = left > INT_MAX ? INT_MAX : (int)left;
        }
        /* Once lost, the client fd stays readable (EOF): stop watching it. */
        struct pollfd pfd[2] = {{.fd = sig_pipe[0], .events = POLLIN},
                                {.fd = stopping ? -1 : dlock_client_fd(c), .events = POLLIN}};
        if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            drain_signals(st);
        if (pfd[1].revents && dlock_client_dispatch(c) != 0 && !st->lost) {
            st->lost = true;
            st->lost_reason = DLOCK_EDISCONNECTED;
        }
    }
}

/* ---- run ---- */

/* Releases the leases after CMD exited and picks the exit code. */
static int finish(struct run_state *st, const struct run_opts *o)
{
    /* What the agent said before CMD exited counts too: a doubt or loss
     * whose event came with the exit. */
    dlock_client_dispatch(st->client);
    if (st->lost) {
        /* Nothing is left to give back that closing the connection does not
         * give back: the agent releases every lease of a closed connection
         * (by compare-and-delete) as soon as it runs. Asking for a release
         * of a lease known lost would only make us wait for an agent that
         * may be stopped or wedged, and whoever waits for our exit too. */
        announce_loss(st, o, st->lost_reason);
        return EXIT_LOST;
    }
    /* The agent's own word, not the lease page's: the exit status says the
     * lock was held until the agent gave it up. */
    int rc = dlock_lease_set_release_sync(st->set);
    st->set = NULL;
    if (rc != 0) {
        /* Lost, or no answer, at some moment we cannot place: CMD may have
         * run unprotected. */
        announce_loss(st, o, rc);
        return EXIT_LOST;
    }
    return exit_code_of(st->child_status);
}

/* The client socket: -s, else $DLOCK_SOCKET, else the default. */
static const char *socket_path(const struct run_opts *o)
{
    if (o->socket)
        return o->socket;
    const char *env = getenv("DLOCK_SOCKET");
    return env && *env ? env : DEFAULT_SOCKET;
}

/* The label the agent's lease list shows for the connection, instead of
 * "dlockctl": for run, CMD and its arguments ("sleep 30", "sh -c STRING");
 * for lock, "lock NAME for pid OWNER". Cut to DLOCK_LABEL_MAX bytes, with
 * "..." at the end of a cut one. */
static void client_label(const struct run_opts *o, char *out, size_t cap)
{
    size_t len = 0;
    bool cut = false;
    out[0] = '\0';
    if (o->command == CMD_LOCK) {
        int n = snprintf(out, cap, "lock %s for pid %d", o->name, (int)o->owner);
        len = n < 0 ? 0 : (size_t)n;
        cut = len >= cap;
    } else if (o->argv) {
        for (char **a = o->argv; *a && !cut; a++) {
            const char *w = a == o->argv && strrchr(*a, '/') ? strrchr(*a, '/') + 1 : *a;
            int n = snprintf(out + len, cap - len, "%s%s", len ? " " : "", w);
            len += n < 0 ? 0 : (size_t)n;
            cut = len >= cap;
        }
    }
    if (cut && cap > 4)
        memcpy(out + cap - 4, "...", 4);
}

/* Opens the client; on failure reports it, naming the socket and the reason,
 * and returns the exit code. */
static int open_client(const struct run_opts *o, dlock_client **c)
{
    const char *path = socket_path(o);
    char label[DLOCK_LABEL_MAX + 1];
    client_label(o, label, sizeof label);
    int rc = dlock_client_open_labeled(c, path, label);
    if (rc == 0)
        return 0;
    if (rc != DLOCK_ECONNECT && rc != DLOCK_EINVAL) {
        fprintf(stderr, "dlockctl: cannot use the dlock agent at %s: %s\n", path,
                dlock_strerror(rc));
        return exit_status_of(rc, EXIT_UNAVAILABLE);
    }
    /* The library says only that it could not connect: connecting once more
     * tells why. */
    int fd = connect_unix(path);
    if (fd >= 0) {
        close(fd);
        fprintf(stderr,
                "dlockctl: the dlock agent at %s took the connection but did not complete the "
                "handshake (is it a dlockd, and running?)\n",
                path);
        return EXIT_UNAVAILABLE;
    }
    int e = errno;
    connect_error("", path, e,
                  "it listens on " DEFAULT_SOCKET " by default; set -s or DLOCK_SOCKET");
    return connect_exit(e);
}

/* Reports a set that could not be taken; returns the exit code. Only a lock
 * that stayed taken is silent, as with flock -n; an outage (the agent
 * answers a wait that ran out during one with the outage's error) is not
 * taken for it. */
static int acquire_failed(dlock_client *c, const struct run_opts *o, int rc)
{
    int code = exit_status_of(rc, -1);
    if (code < 0)
        return o->conflict_exit;
    fprintf(stderr, "dlockctl: cannot lock ");
    print_names(o);
    fprintf(stderr, ": %s\n", dlock_client_strerror(c, rc));
    return code;
}

/* DLOCK_NAME and DLOCK_FENCE for NAME, and DLOCK_FENCES, "NAME=TOKEN" for
 * every name in the order of o->names, separated by spaces (no lock name
 * has one). */
static int set_env(const struct run_opts *o, const dlock_lease_set *set)
{
    size_t cap = 1;
    for (size_t i = 0; i < o->nnames; i++)
        cap += strlen(o->names[i]) + 22; /* '=', 20 digits, ' ' */
    char *fences = malloc(cap);
    if (!fences)
        return -1;
    size_t len = 0;
    for (size_t i = 0; i < o->nnames; i++)
        len +=
            (size_t)snprintf(fences + len, cap - len, "%s%s=%llu", i ? " " : "", o->names[i],
                             (unsigned long long)dlock_lease_fence(dlock_lease_set_lease(set, i)));
    char fence[24];
    snprintf(fence, sizeof fence, "%llu",
             (unsigned long long)dlock_lease_fence(dlock_lease_set_lease(set, 0)));
    int rc = setenv("DLOCK_NAME", o->name, 1) != 0 || setenv("DLOCK_FENCE", fence, 1) != 0 ||
                     setenv("DLOCK_FENCES", fences, 1) != 0
                 ? -1
                 : 0;
    free(fences);
    return rc;
}

static int run(const struct run_opts *o)
{
    dlock_client *c;
    int rc = open_client(o, &c);
    if (rc != 0)
        return rc;
    struct run_state st = {.client = c, .kill_at = -1};
    dlock_acquire_options ao = {.ttl_ms = o->ttl_ms, .wait_ms = o->wait_ms};
    dlock_client_set_event_cb(c, on_lease_event, &st);
    /* One name or several, all or none, in the library's one order. */
    rc = dlock_lease_set_acquire(c, o->names, o->nnames, &ao, &o->spec, &st.set);
    if (rc != 0) {
        int code = acquire_failed(c, o, rc);
        dlock_client_close(c);
        return code;
    }
    if (st.lost) {
        /* A name taken first was put in doubt by a failover while a later
         * one was waited for: CMD must not start on it. */
        announce_loss(&st, o, st.lost_reason);
        dlock_client_close(c);
        return EXIT_LOST;
    }
    if (set_env(o, st.set) != 0 || setup_signals() != 0) {
        fprintf(stderr, "dlockctl: setup: %s\n", strerror(errno));
        dlock_client_close(c);
        return EXIT_SOFTWARE;
    }
    int code = spawn(&st, o->argv);
    if (code == 0) {
        supervise(c, &st, o);
        code = st.child_done ? finish(&st, o) : EXIT_SOFTWARE;
    }
    dlock_client_close(c); /* also gives back leases still held, or lost */
    return code;
}

/* ---- status, leases, metrics, holder ---- */

/* The status socket: -S, else $DLOCK_STATUS_SOCKET, else beside the client
 * socket by the rule dlockd follows (wire_status_sibling()). Writes it to
 * path and, in unset, how it was chosen and how to change it; -1 when the
 * path beside the client socket would be too long. */
static int status_socket_path(const struct run_opts *o, char *path, size_t cap, char *unset,
                              size_t ucap)
{
    const char *env = getenv("DLOCK_STATUS_SOCKET");
    if (o->status_socket || (env && *env)) {
        snprintf(path, cap, "%s", o->status_socket ? o->status_socket : env);
        snprintf(unset, ucap, "is %s the agent's status_socket setting?",
                 o->status_socket ? "-S" : "$DLOCK_STATUS_SOCKET");
        return 0;
    }
    const char *sock = socket_path(o);
    if (strcmp(sock, DEFAULT_SOCKET) == 0)
        snprintf(unset, ucap,
                 "if its status_socket setting is another path, set -S or "
                 "DLOCK_STATUS_SOCKET");
    else
        snprintf(unset, ucap,
                 "without -S or DLOCK_STATUS_SOCKET, the status socket is looked for beside the "
                 "client socket %s; set -S to the agent's status_socket setting",
                 sock);
    return wire_status_sibling(sock, path, cap);
}

/* Waits until fd is ready for `events` or the deadline (now_ms()) passes;
 * 0 when ready, else -1 with errno set (ETIMEDOUT at the deadline). */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pfd = {.fd = fd, .events = events};
        int n = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* Connects to the status socket at path; the connect itself is bounded by the
 * deadline too (a full listen backlog makes it wait). Returns the socket, or
 * -1 after reporting the failure; *code gets the exit code. */
static int status_connect(const char *path, const char *unset, int64_t deadline, int *code)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        connect_error("'s status socket", path, ENAMETOOLONG, unset);
        *code = EXIT_USAGE;
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "dlockctl: socket: %s\n", strerror(errno));
        *code = EXIT_SOFTWARE;
        return -1;
    }
    int64_t left = deadline - now_ms();
    struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
    int rc;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
        rc = -1;
    else
        while ((rc = connect(fd, (struct sockaddr *)&sa, sizeof sa)) != 0 && errno == EINTR)
            ;
    if (rc != 0) {
        int e = errno;
        connect_error("'s status socket", path, e, unset);
        close(fd);
        *code = connect_exit(e);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EAGAIN) {
            if (wait_fd(fd, POLLOUT, deadline) != 0)
                return -1;
        } else if (w < 0 && errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

struct buf {
    char *data;
    size_t len, cap;
};

/* Reads until EOF into b. Returns 0, or -1 with errno set (EFBIG when the
 * answer is larger than STATUS_RESPONSE_MAX). */
static int recv_all(int fd, struct buf *b, int64_t deadline)
{
    for (;;) {
        if (b->cap - b->len < 4096) {
            size_t cap = b->cap ? b->cap * 2 : 16384;
            if (cap > STATUS_RESPONSE_MAX + 4096) {
                errno = EFBIG;
                return -1;
            }
            char *d = realloc(b->data, cap);
            if (!d)
                return -1;
            b->data = d;
            b->cap = cap;
        }
        ssize_t r = recv(fd, b->data + b->len, b->cap - b->len, MSG_DONTWAIT);
        if (r > 0)
            b->len += (size_t)r;
        else if (r == 0)
            return 0;
        else if (errno == EAGAIN) {
            if (wait_fd(fd, POLLIN, deadline) != 0)
                return -1;
        } else if (errno != EINTR) {
            return -1;
        }
    }
}

/* An "error: " answer, printed on stderr. The exit status follows the
 * DLOCK_E* code whose description (dlock_strerror(), which the agent uses)
 * ends the line, as for `run`: a name the agent refuses is a usage error,
 * Redis unreachable 69; any other refusal is 70. */
static int answer_error(const char *data, size_t len)
{
    size_t n = len;
    while (n > 0 && data[n - 1] == '\n')
        n--;
    fprintf(stderr, "dlockctl: %.*s\n", (int)n, data);
    static const char policy[] = "error: the policy (see_all) does not let you";
    if (n >= sizeof policy - 1 && memcmp(data, policy, sizeof policy - 1) == 0)
        return EXIT_NOPERM;
    for (int code = -1; code >= DLOCK_ERRNO_MIN; code--) {
        const char *m = dlock_strerror(code);
        size_t mlen = strlen(m);
        if (n >= mlen + 2 && memcmp(data + n - mlen - 2, ": ", 2) == 0 &&
            memcmp(data + n - mlen, m, mlen) == 0)
            return exit_status_of(code, EXIT_SOFTWARE);
    }
    return EXIT_SOFTWARE;
}

/* Whether the answer b starts with text. */
static bool starts(const struct buf *b, const char *text)
{
    size_t n = strlen(text);
    return b->len >= n && memcmp(b->data, text, n) == 0;
}

/* Whether a line of the answer b starts with text. */
static bool has_line(const struct buf *b, const char *text)
{
    size_t n = strlen(text);
    for (size_t i = 0; i + n <= b->len; i++)
        if ((i == 0 || b->data[i - 1] == '\n') && memcmp(b->data + i, text, n) == 0)
            return true;
    return false;
}

/* The exit code of a reload's answer, printed as any other: the file refused,
 * the asker not allowed, a setting that could not be applied. */
static int reload_code(const struct buf *b, int code)
{
    if (starts(b, "error: configuration not reloaded: "))
        return EXIT_CONFIG;
    if (starts(b, "error: reload: permission denied"))
        return EXIT_NOPERM;
    if (code == 0 && has_line(b, "not applied: "))
        return EXIT_SOFTWARE;
    return code;
}

/* The exit code of a forced release's answer: the name not held, the asker
 * not allowed. */
static int release_code(const struct buf *b, int code)
{
    if (starts(b, "error: release --force: permission denied"))
        return EXIT_NOPERM;
    if (code == 0 && starts(b, "not held: "))
        return EXIT_FREE;
    return code;
}

/* Whether the answer b holds text, anywhere. */
static bool has_text(const struct buf *b, const char *text)
{
    return memmem(b->data, b->len, text, strlen(text)) != NULL;
}

/* The exit code of a holder's answer, as test -e has it: 0 held, 1 free; 69
 * when, in quorum mode, no value is on a majority of the nodes. In text, the
 * name (which has no space) ends at the first ": ". In JSON, a quote inside
 * the name is escaped, so "held": is the member's. */
static int holder_code(const struct buf *b, bool json)
{
    if (json)
        return has_text(b, "\"held\":true")    ? 0
               : has_text(b, "\"held\":false") ? EXIT_FREE
                                               : EXIT_UNAVAILABLE;
    const char *sep = memmem(b->data, b->len, ": ", 2);
    if (!sep)
        return EXIT_SOFTWARE;
    size_t left = b->len - (size_t)(sep + 2 - b->data);
    if (left == 5 && memcmp(sep + 2, "free\n", 5) == 0)
        return EXIT_FREE;
    if (left >= 14 && memcmp(sep + 2, "undetermined: ", 14) == 0)
        return EXIT_UNAVAILABLE;
    return 0;
}

/* Copies a whole answer to stdout, or its error to stderr; the exit code. */
static int print_answer(const char *path, const struct buf *b)
{
    if (b->len == 0) {
        fprintf(stderr, "dlockctl: %s closed the connection without an answer\n", path);
        return EXIT_UNAVAILABLE;
    }
    if (starts(b, "error: "))
        return answer_error(b->data, b->len);
    if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0) {
        fprintf(stderr, "dlockctl: cannot write the answer: %s\n", strerror(errno));
        return EXIT_SOFTWARE;
    }
    return 0;
}

/* Sends one request line to the status socket, copies the answer to stdout. */
static int query(const struct run_opts *o)
{
    char req[STATUS_REQUEST_MAX + 1];
    const char *what = o->command == CMD_STATUS    ? (o->json ? "status-json" : "status")
                       : o->command == CMD_LEASES  ? (o->json ? "leases-json" : "leases")
                       : o->command == CMD_HOLDER  ? (o->json ? "holder-json" : "holder")
                       : o->command == CMD_RELOAD  ? "reload"
                       : o->command == CMD_RELEASE ? "release-force"
                                                   : "metrics";
    int n = snprintf(req, sizeof req, "%s%s%s\n", what, o->pattern ? " " : "",
                     o->pattern ? o->pattern : "");
    if (n < 0 || n > STATUS_REQUEST_MAX) /* parse_query() checked the length */
        return EXIT_SOFTWARE;

    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 16], unset[400];
    if (status_socket_path(o, path, sizeof path, unset, sizeof unset) != 0) {
        fprintf(stderr, "dlockctl: the status socket beside %s would be too long a path; set -S\n",
                socket_path(o));
        return EXIT_USAGE;
    }
    int64_t deadline =
        now_ms() + (o->command == CMD_RELOAD ? RELOAD_TIMEOUT_MS : STATUS_TIMEOUT_MS);
    int code;
    int fd = status_connect(path, unset, deadline, &code);
    if (fd < 0)
        return code;
    struct buf b = {0};
    if (send_all(fd, req, (size_t)n, deadline) != 0) {
        fprintf(stderr, "dlockctl: cannot send the request to %s: %s\n", path, strerror(errno));
        close(fd);
        return EXIT_UNAVAILABLE;
    }
    if (recv_all(fd, &b, deadline) != 0) {
        int e = errno;
        fprintf(stderr, "dlockctl: no complete answer from %s: %s\n", path,
                e == ETIMEDOUT ? "timed out" : strerror(e));
        close(fd);
        free(b.data);
        return e == ENOMEM || e == EFBIG ? EXIT_SOFTWARE : EXIT_UNAVAILABLE;
    }
    close(fd);
    code = print_answer(path, &b);
    if (o->command == CMD_RELOAD)
        code = reload_code(&b, code);
    if (o->command == CMD_RELEASE)
        code = release_code(&b, code);
    if (o->command == CMD_HOLDER && code == 0)
        code = holder_code(&b, o->json);
    free(b.data);
    return code;
}

/* ---- health ---- */

/* The agent's "health" answer, its first line "ready: ..." or "not ready:
 * ...", as one line for monitoring ("OK - dlockd ready: ...") and an exit
 * status; --verbose adds the node lines. */
static int health_report(const struct run_opts *o, const struct buf *b)
{
    const char *nl = memchr(b->data, '\n', b->len);
    size_t first = nl ? (size_t)(nl - b->data) : b->len;
    bool ready = first >= 7 && memcmp(b->data, "ready: ", 7) == 0;
    bool not_ready = first >= 11 && memcmp(b->data, "not ready: ", 11) == 0;
    if (o->live) {
        printf("OK - dlockd answers\n");
        return EXIT_HEALTH_OK;
    }
    if (!ready && !not_ready) {
        printf("UNKNOWN - unexpected answer from dlockd: %.*s\n", (int)(first > 200 ? 200 : first),
               b->data);
        return EXIT_SOFTWARE;
    }
    printf("%s - dlockd %.*s\n", ready ? "OK" : "CRITICAL", (int)first, b->data);
    if (o->verbose && nl)
        fwrite(nl + 1, 1, b->len - first - 1, stdout);
    return ready ? EXIT_HEALTH_OK : EXIT_HEALTH_CRITICAL;
}

/* `dlockctl health`: asks the status socket, not the HTTP listener. */
static int health(const struct run_opts *o)
{
    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 16], unset[400];
    if (status_socket_path(o, path, sizeof path, unset, sizeof unset) != 0) {
        fprintf(stderr, "dlockctl: the status socket beside %s would be too long a path; set -S\n",
                socket_path(o));
        return EXIT_USAGE;
    }
    int64_t deadline = now_ms() + STATUS_TIMEOUT_MS;
    int code;
    int fd = status_connect(path, unset, deadline, &code);
    if (fd < 0) {
        /* Not allowed to ask is not knowing (a plugin's UNKNOWN). */
        if (code == EXIT_NOPERM)
            printf("UNKNOWN - no permission to ask dlockd on %s\n", path);
        else
            printf("CRITICAL - dlockd does not answer on %s\n", path);
        return code;
    }
    static const char req[] = "health\n";
    struct buf b = {0};
    int rc = send_all(fd, req, sizeof req - 1, deadline) == 0 ? recv_all(fd, &b, deadline) : -1;
    int e = errno;
    close(fd);
    if (rc != 0 || b.len == 0) {
        printf("CRITICAL - dlockd does not answer on %s\n", path);
        fprintf(stderr, "dlockctl: no complete answer from %s: %s\n", path,
                rc == 0          ? "connection closed"
                : e == ETIMEDOUT ? "timed out"
                                 : strerror(e));
        free(b.data);
        return EXIT_UNAVAILABLE;
    }
    code = health_report(o, &b);
    free(b.data);
    if (fflush(stdout) != 0)
        return EXIT_SOFTWARE;
    return code;
}

/* ---- lock, unlock: a lock held across shell commands ----
 *
 * `lock` forks a holder: a process of its own session, with no terminal and
 * its standard descriptors on /dev/null, which takes the lease through the
 * library, keeps it while its owner (the calling shell, or --pid) lives, and
 * gives it back when the owner exits or `unlock` signals it. Each holder has
 * a state file, DIR/OWNER-HASH (DIR: $XDG_RUNTIME_DIR/dlockctl, else
 * /run/user/UID/dlockctl, else /tmp/dlockctl-UID; HASH: of the name), which
 * it keeps locked (flock) while it lives and in which it writes how the
 * lease ended: `unlock` takes the file's lock once the holder is gone and
 * reports that outcome. */

#define STATE_MAX      (WIRE_MAX_NAME + 256) /* a state file's size, at most */
#define STATE_DIR_MAX  512
#define STATE_PATH_MAX (STATE_DIR_MAX + 256 + 2)
#define UNLOCK_WAIT_MS 60000 /* for a holder to give the lease back */
#define OWNER_POLL_MS  1000  /* without pidfd_open(): how often to look */

/* What the holder tells `lock` through a pipe once the lease is taken, or
 * could not be. */
struct lock_report {
    int code; /* 0: held; else the exit code */
    uint64_t fence;
};

/* The directory of the state files, made if need be (mode 0700); -1 after
 * reporting why it cannot be used. */
static int state_dir(char *out, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    char run[64];
    snprintf(run, sizeof run, "/run/user/%u", (unsigned)getuid());
    struct stat st;
    if (xdg && xdg[0] == '/')
        snprintf(out, cap, "%s/dlockctl", xdg);
    else if (stat(run, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid())
        snprintf(out, cap, "%s/dlockctl", run);
    else
        snprintf(out, cap, "/tmp/dlockctl-%u", (unsigned)getuid());
    if (strlen(out) + 1 >= cap) {
        fprintf(stderr, "dlockctl: $XDG_RUNTIME_DIR is too long a path\n");
        return -1;
    }
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "dlockctl: cannot make %s: %s\n", out, strerror(errno));
        return -1;
    }
    /* Not one another user made for us, nor one others may write in. */
    if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
        (st.st_mode & 077) != 0) {
        fprintf(stderr,
                "dlockctl: %s is not a directory of this user's with mode 0700; remove it or "
                "set XDG_RUNTIME_DIR\n",
                out);
        return -1;
    }
    return 0;
}

/* FNV-1a, 64 bits: the name in a file name of bounded length. */
static uint64_t name_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

static void state_path(const char *dir, pid_t owner, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%d-%016llx", dir, (int)owner, (unsigned long long)name_hash(name));
}

/* A holder's state file, as read. */
struct lock_state {
    pid_t holder, owner;
    unsigned long long start; /* the holder's start time: with its pid, it names it for good */
    uint64_t fence;
    char state[16];  /* held, released, lost */
    char reason[96]; /* lost: why */
    char name[WIRE_MAX_NAME + 1];
};

/* Writes the state file anew (fd keeps its flock). */
static void state_write(int fd, const struct lock_state *s)
{
    char text[STATE_MAX];
    int n = snprintf(text, sizeof text,
                     "holder %d\nstart %llu\nowner %d\nfence %llu\nstate %s\nreason %s\nname %s\n",
                     (int)s->holder, s->start, (int)s->owner, (unsigned long long)s->fence,
                     s->state, s->reason, s->name);
    if (n < 0 || (size_t)n >= sizeof text)
        return;
    if (pwrite(fd, text, (size_t)n, 0) == n && ftruncate(fd, n) == 0)
        fdatasync(fd);
}

/* Reads the state file fd; -1 when it is not one. */
static int state_read(int fd, struct lock_state *s)
{
    char text[STATE_MAX + 1];
    ssize_t n = pread(fd, text, STATE_MAX, 0);
    if (n <= 0)
        return -1;
    text[n] = '\0';
    *s = (struct lock_state){0};
    int got = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        int64_t v;
        if (strncmp(line, "holder ", 7) == 0 && parse_num(line + 7, 1, INT32_MAX, &v))
            s->holder = (pid_t)v, got |= 1;
        else if (strncmp(line, "owner ", 6) == 0 && parse_num(line + 6, 1, INT32_MAX, &v))
            s->owner = (pid_t)v, got |= 2;
        else if (strncmp(line, "start ", 6) == 0)
            s->start = strtoull(line + 6, NULL, 10);
        else if (strncmp(line, "fence ", 6) == 0)
            s->fence = strtoull(line + 6, NULL, 10);
        else if (strncmp(line, "state ", 6) == 0)
            snprintf(s->state, sizeof s->state, "%s", line + 6), got |= 4;
        else if (strncmp(line, "reason ", 7) == 0)
            snprintf(s->reason, sizeof s->reason, "%s", line + 7);
        else if (strncmp(line, "name ", 5) == 0)
            snprintf(s->name, sizeof s->name, "%s", line + 5), got |= 8;
    }
    return got == 15 ? 0 : -1;
}

/* A descriptor that becomes readable when pid exits (pidfd_open(2), Linux
 * 5.3); -1 with errno ENOSYS where the kernel has none, ESRCH for no such
 * process. */
static int pid_watch(pid_t pid)
{
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* When process pid started (clock ticks after boot, field 22 of
 * /proc/PID/stat), 0 when it cannot be read. */
static unsigned long long proc_start(pid_t pid)
{
    char path[32], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    /* After the command, which may hold anything: fields 3 to 21, then 22. */
    const char *p = strrchr(text, ')');
    unsigned long long start = 0;
    if (!p || sscanf(p + 1,
                     " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d "
                     "%llu",
                     &start) != 1)
        return 0;
    return start;
}

static bool pid_alive(pid_t pid)
{
    return kill(pid, 0) == 0 || errno == EPERM;
}

/* Writes all of n bytes to a pipe. */
static int write_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

/* Points the standard descriptors from..to at /dev/null. */
static void to_dev_null(int from, int to)
{
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    for (int i = from; i <= to; i++)
        dup2(fd, i);
    if (fd > 2)
        close(fd);
}

/* Closes every descriptor from 3 up but the n of keep: the holder must not
 * keep a shell's descriptors open (a pipe someone reads to its end, a file
 * that flock(1) locked) for as long as it holds the lease. */
static void close_inherited(const int *keep, size_t n)
{
    int from = 3;
    for (;;) {
        int next = INT_MAX; /* the least kept descriptor at or above from */
        for (size_t i = 0; i < n; i++)
            if (keep[i] >= from && keep[i] < next)
                next = keep[i];
        if (next > from && close_range((unsigned)from, (unsigned)next - 1, 0) != 0) {
            long max = sysconf(_SC_OPEN_MAX);
            for (long fd = from; fd < next && fd < (max > 0 && max < 65536 ? max : 65536); fd++)
                close((int)fd);
        }
        if (next == INT_MAX)
            return;
        from = next + 1;
    }
}

/* The holder's watch, once the lease is held: until the owner exits (the
 * lease is given back, the state file removed), a signal (`unlock`: given
 * back, the outcome written), or the lease is lost (written). */
static void hold(struct run_state *st, int owner_fd, int state_fd, const char *path,
                 struct lock_state *s)
{
    enum { OWNER_GONE, ASKED, LOST } why = LOST;
    for (;;) {
        const char *expired = NULL;
        int64_t left_ns = st->lost ? 0 : set_left_ns(st->set, &expired);
        if (left_ns == 0 && !st->lost) {
            dlock_client_dispatch(st->client);
            if (!st->lost) {
                st->lost = true;
                st->lost_reason = DLOCK_EUNAVAIL;
            }
        }
        if (st->lost)
            break;
        int timeout = left_ns / 1000000 + 1 > INT_MAX ? INT_MAX : (int)(left_ns / 1000000 + 1);
        if (owner_fd < 0 && timeout > OWNER_POLL_MS)
            timeout = OWNER_POLL_MS;
        struct pollfd pfd[3] = {{.fd = sig_pipe[0], .events = POLLIN},
                                {.fd = dlock_client_fd(st->client), .events = POLLIN},
                                {.fd = owner_fd, .events = POLLIN}};
        if (poll(pfd, 3, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents) {
            unsigned char buf[64];
            ssize_t n = read(sig_pipe[0], buf, sizeof buf);
            bool asked = false;
            for (ssize_t i = 0; i < n; i++)
                asked |= buf[i] != SIGCHLD;
            if (asked) {
                why = ASKED;
                break;
            }
        }
        if (pfd[2].revents || (owner_fd < 0 && !pid_alive(s->owner))) {
            why = OWNER_GONE;
            break;
        }
        if (pfd[1].revents && dlock_client_dispatch(st->client) != 0 && !st->lost) {
            st->lost = true;
            st->lost_reason = DLOCK_EDISCONNECTED;
        }
    }
    int rc = st->lost ? st->lost_reason : dlock_lease_set_release_sync(st->set);
    if (!st->lost)
        st->set = NULL;
    if (why == OWNER_GONE) {
        unlink(path); /* nobody is left to ask how it ended */
        return;
    }
    snprintf(s->state, sizeof s->state, "%s", rc == 0 ? "released" : "lost");
    snprintf(s->reason, sizeof s->reason, "%s",
             rc == 0                 ? "-"
             : rc == DLOCK_ENOANSWER ? "the agent did not answer the release"
                                     : dlock_strerror(rc));
    state_write(state_fd, s);
}

/* The holder, in the child of `lock`: takes the lease, reports to `lock`
 * through rp, and holds it. Does not return. */
static void holder_main(const struct run_opts *o, int rp, int owner_fd, int state_fd,
                        const char *path, pid_t parent)
{
    signal(SIGPIPE, SIG_IGN);
    /* Whatever dlockctl was started with, the holder obeys unlock's SIGTERM
     * (a shell's background job starts with SIGINT ignored, nohup with
     * SIGHUP). */
    for (size_t i = 0; i < sizeof forwarded_signals / sizeof forwarded_signals[0]; i++)
        signal(forwarded_signals[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    const int keep[] = {rp, owner_fd, state_fd};
    close_inherited(keep, sizeof keep / sizeof keep[0]);
    /* Until it has reported, the holder ends with `lock` (^C while it
     * waits): nobody would know of the lease. */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
        _exit(EXIT_SOFTWARE);
    setsid();
    if (chdir("/") != 0)
        _exit(EXIT_SOFTWARE);
    to_dev_null(STDIN_FILENO, STDOUT_FILENO); /* stderr: for what goes wrong until held */
    struct lock_report r = {.code = 0};
    dlock_client *c;
    r.code = open_client(o, &c);
    struct run_state st = {.client = c, .kill_at = -1};
    if (r.code == 0) {
        dlock_acquire_options ao = {.ttl_ms = o->ttl_ms, .wait_ms = o->wait_ms};
        dlock_client_set_event_cb(c, on_lease_event, &st);
        int rc = dlock_lease_set_acquire(c, o->names, o->nnames, &ao, &o->spec, &st.set);
        if (rc != 0)
            r.code = acquire_failed(c, o, rc);
        else if (st.lost)
            r.code = EXIT_LOST;
        else if (setup_signals() != 0)
            r.code = EXIT_SOFTWARE;
    }
    struct lock_state s = {.holder = getpid(), .start = proc_start(getpid()), .owner = o->owner};
    snprintf(s.name, sizeof s.name, "%s", o->name);
    snprintf(s.state, sizeof s.state, "held");
    snprintf(s.reason, sizeof s.reason, "-");
    if (r.code == 0) {
        r.fence = dlock_lease_fence(dlock_lease_set_lease(st.set, 0));
        s.fence = r.fence;
        state_write(state_fd, &s);
    } else {
        unlink(path);
    }
    to_dev_null(STDERR_FILENO, STDERR_FILENO);
    /* From here on the holder outlives `lock`; were `lock` gone already, the
     * report could not be written (EPIPE). */
    prctl(PR_SET_PDEATHSIG, 0);
    if (getppid() != parent || write_all(rp, &r, sizeof r) != 0 || r.code != 0) {
        unlink(path);
        _exit(r.code ? r.code : EXIT_SOFTWARE); /* the leases go with the connection */
    }
    close(rp);
    hold(&st, owner_fd, state_fd, path, &s);
    dlock_client_close(c);
    _exit(0);
}

/* Removes the state files of holders gone whose owners are gone too (a
 * lease lost, nobody asked; a holder killed while it waited): no holder
 * keeps them locked. */
static void state_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[STATE_PATH_MAX];
        struct lock_state s;
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        int fd = open(p, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        /* The owner is in the file's name too: a holder killed while it
         * waited leaves an empty file. */
        pid_t owner = (pid_t)strtol(e->d_name, NULL, 10);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            if (state_read(fd, &s) == 0)
                owner = s.owner;
            if (owner > 0 && !pid_alive(owner))
                unlink(p);
        }
        close(fd);
    }
    if (d)
        closedir(d);
}

/* Prints value single-quoted for a shell. */
static void print_quoted(const char *value)
{
    putchar('\'');
    for (const char *p = value; *p; p++)
        if (*p == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*p);
    putchar('\'');
}

static int lock(const struct run_opts *o)
{
    int owner_fd = pid_watch(o->owner);
    if (owner_fd < 0 && errno != ENOSYS) {
        fprintf(stderr, "dlockctl: cannot watch the owner, process %d: %s\n", (int)o->owner,
                strerror(errno));
        return errno == ESRCH ? EXIT_USAGE : EXIT_SOFTWARE;
    }
    if (owner_fd < 0 && !pid_alive(o->owner)) {
        fprintf(stderr, "dlockctl: no process %d to hold the lock for\n", (int)o->owner);
        return EXIT_USAGE;
    }
    char dir[STATE_DIR_MAX], path[STATE_PATH_MAX];
    if (state_dir(dir, sizeof dir) != 0)
        return EXIT_SOFTWARE;
    state_sweep(dir);
    state_path(dir, o->owner, o->name, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "dlockctl: %s: %s\n", path, strerror(errno));
        return EXIT_SOFTWARE;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        struct lock_state s;
        if (state_read(fd, &s) == 0)
            fprintf(stderr,
                    "dlockctl: process %d holds %s already, through holder %d; "
                    "dlockctl unlock %s gives it back\n",
                    (int)o->owner, o->name, (int)s.holder, o->name);
        else
            fprintf(stderr, "dlockctl: %s: %s\n", path, strerror(errno));
        close(fd);
        return EXIT_USAGE;
    }
    if (ftruncate(fd, 0) != 0) { /* an earlier holder's outcome, not asked for */
        fprintf(stderr, "dlockctl: %s: %s\n", path, strerror(errno));
        close(fd);
        return EXIT_SOFTWARE;
    }
    int rp[2];
    if (pipe2(rp, O_CLOEXEC) != 0) {
        fprintf(stderr, "dlockctl: pipe: %s\n", strerror(errno));
        return EXIT_SOFTWARE;
    }
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dlockctl: fork: %s\n", strerror(errno));
        return EXIT_SOFTWARE;
    }
    if (pid == 0) {
        close(rp[0]);
        holder_main(o, rp[1], owner_fd, fd, path, parent);
    }
    close(rp[1]);
    struct lock_report r;
    ssize_t n;
    while ((n = read(rp[0], &r, sizeof r)) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof r) {
        fprintf(stderr, "dlockctl: the holder process %d ended before it reported\n", (int)pid);
        return EXIT_SOFTWARE;
    }
    if (r.code != 0)
        return r.code;
    printf("DLOCK_HOLDER=%d\nDLOCK_FENCE=%llu\nDLOCK_NAME=", (int)pid, (unsigned long long)r.fence);
    print_quoted(o->name);
    putchar('\n');
    if (fflush(stdout) != 0) {
        fprintf(stderr, "dlockctl: cannot write the holder's pid: %s\n", strerror(errno));
        return EXIT_SOFTWARE;
    }
    return 0;
}

/* The state file of the holder `unlock` is about: the owner's for the name,
 * else the one holder of the name (or, with --holder, of that pid) among
 * this user's. Returns its descriptor, or -1 with *code set after a
 * message. */
static int find_holder(const struct run_opts *o, const char *dir, char *path, size_t cap, int *code)
{
    if (o->name && !o->holder_pid) {
        state_path(dir, o->owner, o->name, path, cap);
        int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0)
            return fd;
    }
    DIR *d = opendir(dir);
    int found = -1, count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[STATE_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        int fd = open(p, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        struct lock_state s;
        if (fd < 0)
            continue;
        bool match = state_read(fd, &s) == 0 &&
                     (o->holder_pid ? s.holder == o->holder_pid : strcmp(s.name, o->name) == 0);
        if (match && count++ == 0) {
            found = fd;
            snprintf(path, cap, "%s", p);
        } else {
            close(fd);
        }
    }
    if (d)
        closedir(d);
    if (count == 1)
        return found;
    if (found >= 0)
        close(found);
    if (count > 1) {
        fprintf(stderr,
                "dlockctl: %s has %d holders of this user's, none for process %d; give "
                "--holder PID\n",
                o->name, count, (int)o->owner);
        *code = EXIT_USAGE;
    } else {
        if (o->holder_pid)
            fprintf(stderr, "dlockctl: no holder %d of a lock of this user's\n",
                    (int)o->holder_pid);
        else
            fprintf(stderr, "dlockctl: %s is not held by dlockctl lock for this user\n", o->name);
        *code = EXIT_FREE;
    }
    return -1;
}

/* Asks the holder of s to give its lease back (SIGTERM), if it is still the
 * process that wrote s: its pid may have gone to another process since.
 * false when it is gone. */
static bool signal_holder(const struct lock_state *s)
{
    int pfd = pid_watch(s->holder); /* this process, whatever happens to the pid */
    if (pfd < 0 && errno != ENOSYS)
        return false;
    bool same = !s->start || proc_start(s->holder) == s->start;
    bool sent = false;
#ifdef SYS_pidfd_send_signal
    if (same && pfd >= 0)
        sent = syscall(SYS_pidfd_send_signal, pfd, SIGTERM, NULL, 0) == 0;
#endif
    if (same && pfd < 0)
        sent = kill(s->holder, SIGTERM) == 0;
    if (pfd >= 0)
        close(pfd);
    return sent;
}

static int unlock(const struct run_opts *o)
{
    char dir[STATE_DIR_MAX], path[STATE_PATH_MAX];
    if (state_dir(dir, sizeof dir) != 0)
        return EXIT_SOFTWARE;
    int code = 0, fd = find_holder(o, dir, path, sizeof path, &code);
    if (fd < 0)
        return code;
    struct lock_state s;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        /* The holder lives and keeps the file locked: ask it. (Or another
         * dlockctl looks at the file: a holder gone is not signalled, and
         * the file's lock comes free soon.) */
        if (state_read(fd, &s) != 0) {
            fprintf(stderr, "dlockctl: %s: no holder's state\n", path);
            close(fd);
            return EXIT_SOFTWARE;
        }
        signal_holder(&s);
        int64_t deadline = now_ms() + UNLOCK_WAIT_MS;
        while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (now_ms() > deadline) {
                fprintf(stderr, "dlockctl: holder %d of %s did not exit within %d s\n",
                        (int)s.holder, s.name, UNLOCK_WAIT_MS / 1000);
                close(fd);
                return EXIT_UNAVAILABLE;
            }
            nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
        }
    }
    int rc = state_read(fd, &s);
    unlink(path);
    close(fd);
    if (rc != 0) {
        fprintf(stderr, "dlockctl: %s: no holder's state\n", path);
        return EXIT_FREE;
    }
    if (strcmp(s.state, "released") == 0)
        return 0;
    if (strcmp(s.state, "lost") == 0)
        fprintf(stderr, "dlockctl: lease on %s lost: %s\n", s.name, s.reason);
    else
        fprintf(stderr,
                "dlockctl: holder %d of %s ended without giving the lease back (killed?): the "
                "agent ended it when its connection closed\n",
                (int)s.holder, s.name);
    return EXIT_LOST;
}

/* Paths given as options must not be empty (an empty variable means unset). */
static int check_paths(const struct run_opts *o)
{
    if (o->socket && !*o->socket)
        return usage_error(o->command, "empty socket path (-s)", NULL);
    if (o->status_socket && !*o->status_socket)
        return usage_error(o->command, "empty status socket path (-S)", NULL);
    return 0;
}

int main(int argc, char **argv)
{
    struct run_opts o = {
        .wait_ms = DLOCK_WAIT_FOREVER, .conflict_exit = EXIT_TEMPFAIL, .kill_ms = DEFAULT_KILL_MS};
    int rc = parse_args(argc, argv, &o);
    if (rc == 0)
        rc = check_paths(&o);
    if (rc != 0)
        return rc;
    if (o.command == CMD_HEALTH)
        return health(&o);
    if (o.command == CMD_LOCK)
        return lock(&o);
    if (o.command == CMD_UNLOCK)
        return unlock(&o);
    return o.command == CMD_RUN ? run(&o) : query(&o);
}
