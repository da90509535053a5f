/* dlockctl.c -- runs a command while holding a dlock lease, as flock(1) does with a file;
 * shows the agent's status, leases and metrics from its status socket. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

/* Exit codes, after sysexits.h where one fits. */
#define EXIT_USAGE       64 /* EX_USAGE */
#define EXIT_UNAVAILABLE 69 /* EX_UNAVAILABLE: agent unreachable, backend error */
#define EXIT_SOFTWARE    70 /* EX_SOFTWARE: internal error */
#define EXIT_LIMIT       73 /* EX_CANTCREAT: a lease or waiter limit of the agent was hit */
#define EXIT_TEMPFAIL    75 /* EX_TEMPFAIL: default for -E */
#define EXIT_NOPERM      77 /* EX_NOPERM: the agent's policy refused the name */
#define EXIT_LOST        79 /* the lease was lost while CMD ran */
#define EXIT_NOEXEC      126
#define EXIT_NOTFOUND    127

#define DEFAULT_KILL_MS 10000

/* The status socket: -S, else $DLOCK_STATUS_SOCKET, else this. */
#define DEFAULT_STATUS_SOCKET "/run/dlock/status.sock"
#define STATUS_REQUEST_MAX    256        /* a request line, newline included */
#define STATUS_TIMEOUT_MS     5000       /* for the whole answer */
#define STATUS_RESPONSE_MAX   (64 << 20) /* a bigger answer is refused */

enum command { CMD_RUN, CMD_STATUS, CMD_LEASES, CMD_METRICS, CMD_HOLDER };

struct run_opts {
    enum command command;
    const char *socket;        /* NULL = the library default */
    const char *status_socket; /* NULL = $DLOCK_STATUS_SOCKET or the default */
    bool json;                 /* status, leases: --json */
    const char *pattern;       /* leases: NULL = every lease */
    const char *name;
    char **argv;
    int64_t wait_ms;
    uint32_t ttl_ms;
    int conflict_exit;
    int64_t kill_ms;
};

/* State shared with the event callback and the main loop. */
struct run_state {
    dlock_lease *lease;
    bool lost;
    bool announced; /* the loss was reported on stderr */
    int lost_reason;
    pid_t child;
    bool child_done;
    int child_status;
    int64_t kill_at; /* when to send SIGKILL; -1 = not scheduled */
};

static int sig_pipe[2] = {-1, -1};
static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction saved_actions[NSIG];

static void usage(FILE *f)
{
    fprintf(f, "usage: dlockctl [-s SOCKET] run [-w MS | -n] [-t TTL_MS] [-E CODE] [-k MS] NAME "
               "[--] CMD [ARG...]\n"
               "       dlockctl [-S PATH] status [--json]\n"
               "       dlockctl [-S PATH] leases [--json] [PATTERN]\n"
               "       dlockctl [-S PATH] metrics\n"
               "       dlockctl [-S PATH] holder [--json] NAME\n"
               "       dlockctl -h | --help\n"
               "       dlockctl -V | --version\n"
               "run exits with CMD's status, else: 64 usage, 69 agent or Redis unavailable,\n"
               "70 internal error, 73 lease or waiter limit hit, 75 lock taken (-E),\n"
               "77 denied by policy, 79 lease lost, 126/127 CMD not runnable/found\n");
}

/* Prints "dlockctl: MSG[: ARG]" and the usage; returns the usage exit code. */
static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "dlockctl: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    usage(stderr);
    return EXIT_USAGE;
}

/* Reports what getopt_long() rejected; it prints nothing itself (opterr = 0)
 * because argv[0] of a sub-command is the sub-command's name. */
static int option_error(int ch, const char *word)
{
    char opt[3] = {'-', (char)optopt, '\0'};
    const char *what = optopt ? opt : word;
    return usage_error(ch == ':' ? "option needs an argument" : "unknown option", what);
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

/* ---- option parsing ---- */

/* Parses the options of `run` (argv[0] is "run"), then NAME and CMD. */
static int parse_run(int argc, char **argv, struct run_opts *o)
{
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"socket", required_argument, NULL, 's'},
                                             {NULL, 0, NULL, 0}};
    int64_t v;
    int ch;
    optind = 0; /* restart getopt on the sub-command */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+:s:w:nt:E:k:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 's':
            o->socket = optarg;
            break;
        case 'w':
            if (!parse_num(optarg, 0, INT64_MAX, &o->wait_ms))
                return usage_error("invalid wait time", optarg);
            break;
        case 'n':
            o->wait_ms = DLOCK_WAIT_NONE;
            break;
        case 't':
            if (!parse_num(optarg, 1, UINT32_MAX, &v))
                return usage_error("invalid TTL", optarg);
            o->ttl_ms = (uint32_t)v;
            break;
        case 'E':
            if (!parse_num(optarg, 0, 255, &v))
                return usage_error("invalid exit code", optarg);
            o->conflict_exit = (int)v;
            break;
        case 'k':
            if (!parse_num(optarg, 0, INT32_MAX, &o->kill_ms))
                return usage_error("invalid kill delay", optarg);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return option_error(ch, argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("missing lock name", NULL);
    o->name = argv[optind++];
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc)
        return usage_error("missing command", NULL);
    o->argv = argv + optind;
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

/* Parses the options and arguments of `status`, `leases` and `metrics`
 * (argv[0] is the sub-command). Options may follow the pattern. */
static int parse_query(int argc, char **argv, struct run_opts *o)
{
    enum { OPT_JSON = 0x100 };
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"json", no_argument, NULL, OPT_JSON},
                                             {"status-socket", required_argument, NULL, 'S'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    optind = 0; /* restart getopt on the sub-command */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":S:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'S':
            o->status_socket = optarg;
            break;
        case OPT_JSON:
            if (o->command == CMD_METRICS)
                return usage_error("unknown option", "--json");
            o->json = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return option_error(ch, argv[optind - 1]);
        }
    }
    if (o->command == CMD_HOLDER) {
        if (optind >= argc)
            return usage_error("missing lock name", NULL);
        o->pattern = argv[optind++];
        const char *problem = pattern_problem(o->pattern);
        if (problem)
            return usage_error("invalid lock name", *o->pattern ? o->pattern : NULL);
    } else if (o->command == CMD_LEASES && optind < argc) {
        o->pattern = argv[optind++];
        const char *problem = pattern_problem(o->pattern);
        if (problem) /* an empty or very long pattern is not worth printing */
            return usage_error(problem,
                               *o->pattern && !strstr(problem, "long") ? o->pattern : NULL);
    }
    if (optind < argc)
        return usage_error("unexpected argument", argv[optind]);
    return 0;
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
            usage(stdout);
            exit(0);
        case 'V':
            printf("dlockctl (dlock) %d.%d.%d\n", DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR,
                   DLOCK_VERSION_PATCH);
            exit(0);
        default:
            return option_error(ch, argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("missing command (run, status, leases, metrics or holder)", NULL);
    const char *cmd = argv[optind];
    if (strcmp(cmd, "run") == 0)
        o->command = CMD_RUN;
    else if (strcmp(cmd, "status") == 0)
        o->command = CMD_STATUS;
    else if (strcmp(cmd, "leases") == 0)
        o->command = CMD_LEASES;
    else if (strcmp(cmd, "metrics") == 0)
        o->command = CMD_METRICS;
    else if (strcmp(cmd, "holder") == 0)
        o->command = CMD_HOLDER;
    else
        return usage_error("unknown command", cmd);
    if (o->command == CMD_RUN)
        return parse_run(argc - optind, argv + optind, o);
    return parse_query(argc - optind, argv + optind, o);
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

static void on_lease_event(dlock_client *c, dlock_lease *lease, dlock_state state, int reason,
                           void *arg)
{
    struct run_state *st = arg;
    (void)c;
    if (lease != st->lease || state != DLOCK_STATE_LOST || st->lost)
        return;
    st->lost = true;
    st->lost_reason = reason ? reason : DLOCK_ELOST;
}

static void announce_loss(struct run_state *st, const struct run_opts *o, int reason)
{
    if (st->announced)
        return;
    st->announced = true;
    const char *why =
        reason == DLOCK_ETIMEDOUT ? "the agent did not answer the release" : dlock_strerror(reason);
    fprintf(stderr, "dlockctl: lease on %s lost: %s\n", o->name, why);
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

/* Waits for CMD to exit while watching the lease. */
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
        int64_t left_ns = stopping ? -1 : lease_left_ns(st->lease);
        if (left_ns == 0 && !st->lost) {
            st->lost = true;
            st->lost_reason = DLOCK_EUNAVAIL; /* the agent could not prove it */
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

static int acquire_exit_code(int rc)
{
    switch (rc) {
    case DLOCK_EBUSY:
    case DLOCK_ETIMEDOUT:
        return -1; /* the caller's -E code */
    case DLOCK_EINVAL:
    case DLOCK_EBADNAME:
    case DLOCK_ENAMETOOLONG:
        return EXIT_USAGE;
    case DLOCK_ENOMEM:
        return EXIT_SOFTWARE;
    case DLOCK_EDENIED:
        return EXIT_NOPERM;
    case DLOCK_ELIMIT:
        return EXIT_LIMIT;
    default:
        return EXIT_UNAVAILABLE;
    }
}

/* Releases the lease after CMD exited and picks the exit code. */
static int finish(struct run_state *st, const struct run_opts *o)
{
    if (st->lost) {
        /* Nothing is left to give back that closing the connection does not
         * give back: the agent releases every lease of a closed connection
         * (by compare-and-delete) as soon as it runs. Asking for a release
         * of a lease known lost would only make us wait for an agent that
         * may be stopped or wedged, and whoever waits for our exit too. */
        announce_loss(st, o, st->lost_reason);
        return EXIT_LOST;
    }
    int rc = dlock_lease_release(st->lease);
    if (rc != 0) {
        /* Lost, or no answer, at some moment we cannot place: CMD may have
         * run unprotected. */
        announce_loss(st, o, rc);
        return EXIT_LOST;
    }
    return exit_code_of(st->child_status);
}

static int run(const struct run_opts *o)
{
    dlock_client *c;
    int rc = dlock_client_open(&c, o->socket);
    if (rc != 0) {
        fprintf(stderr, "dlockctl: cannot reach the agent: %s\n", dlock_strerror(rc));
        return rc == DLOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
    }
    struct run_state st = {.kill_at = -1};
    dlock_acquire_options ao = {.ttl_ms = o->ttl_ms, .wait_ms = o->wait_ms};
    dlock_client_set_event_cb(c, on_lease_event, &st);
    rc = dlock_lease_acquire(c, o->name, &ao, &st.lease);
    if (rc != 0) {
        int code = acquire_exit_code(rc);
        if (code < 0) /* simply taken: silent, as flock -n is */
            code = o->conflict_exit;
        else
            fprintf(stderr, "dlockctl: cannot lock %s: %s\n", o->name,
                    dlock_client_strerror(c, rc));
        dlock_client_close(c);
        return code;
    }
    char fence[24];
    snprintf(fence, sizeof fence, "%llu", (unsigned long long)dlock_lease_fence(st.lease));
    if (setenv("DLOCK_NAME", o->name, 1) != 0 || setenv("DLOCK_FENCE", fence, 1) != 0 ||
        setup_signals() != 0) {
        fprintf(stderr, "dlockctl: setup: %s\n", strerror(errno));
        dlock_client_close(c);
        return EXIT_SOFTWARE;
    }
    int code = spawn(&st, o->argv);
    if (code == 0) {
        supervise(c, &st, o);
        code = st.child_done ? finish(&st, o) : EXIT_SOFTWARE;
    }
    dlock_client_close(c); /* also gives back a lease still held, or lost */
    return code;
}

/* ---- status, leases, metrics ---- */

static const char *status_socket_path(const struct run_opts *o)
{
    if (o->status_socket)
        return o->status_socket;
    const char *env = getenv("DLOCK_STATUS_SOCKET");
    return env && *env ? env : DEFAULT_STATUS_SOCKET;
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
static int status_connect(const char *path, int64_t deadline, int *code)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "dlockctl: status socket path too long: %s\n", path);
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
        int e = errno == EAGAIN ? ETIMEDOUT : errno;
        fprintf(stderr, "dlockctl: cannot reach the agent at %s: %s\n", path, strerror(e));
        close(fd);
        *code = EXIT_UNAVAILABLE;
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

/* Sends one request line to the status socket, copies the answer to stdout. */
static int query(const struct run_opts *o)
{
    char req[STATUS_REQUEST_MAX + 1];
    const char *what = o->command == CMD_STATUS   ? (o->json ? "status-json" : "status")
                       : o->command == CMD_LEASES ? (o->json ? "leases-json" : "leases")
                       : o->command == CMD_HOLDER ? (o->json ? "holder-json" : "holder")
                                                  : "metrics";
    int n = snprintf(req, sizeof req, "%s%s%s\n", what, o->pattern ? " " : "",
                     o->pattern ? o->pattern : "");
    if (n < 0 || n > STATUS_REQUEST_MAX) /* parse_query() checked the length */
        return EXIT_SOFTWARE;

    const char *path = status_socket_path(o);
    int64_t deadline = now_ms() + STATUS_TIMEOUT_MS;
    int code;
    int fd = status_connect(path, deadline, &code);
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

    if (b.len == 0) {
        fprintf(stderr, "dlockctl: %s closed the connection without an answer\n", path);
        code = EXIT_UNAVAILABLE;
    } else if (b.len >= 7 && memcmp(b.data, "error: ", 7) == 0) {
        bool nl = b.data[b.len - 1] == '\n';
        fprintf(stderr, "dlockctl: %.*s%s", (int)b.len, b.data, nl ? "" : "\n");
        code = EXIT_SOFTWARE;
    } else if (fwrite(b.data, 1, b.len, stdout) != b.len || fflush(stdout) != 0) {
        fprintf(stderr, "dlockctl: cannot write the answer: %s\n", strerror(errno));
        code = EXIT_SOFTWARE;
    } else {
        code = 0;
    }
    free(b.data);
    return code;
}

int main(int argc, char **argv)
{
    struct run_opts o = {
        .wait_ms = DLOCK_WAIT_FOREVER, .conflict_exit = EXIT_TEMPFAIL, .kill_ms = DEFAULT_KILL_MS};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    return o.command == CMD_RUN ? run(&o) : query(&o);
}
