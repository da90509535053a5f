/* SPDX-License-Identifier: BSD-3-Clause */
/* main.c -- dlockd entry point: options, configuration and its reloads, dev mode, the loop. */
#include <ev.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "config.h"
#include "devmode.h"
#include "listener.h"
#include "log.h"
#include "tls.h"
#include "wire.h"

enum { OPT_PREFIX = 256, OPT_TTL, OPT_DEV, OPT_MODE, OPT_SUCCESSOR, OPT_LOGFMT };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlockd [-c FILE] [-s SOCKET] [-S PATH] [-r ADDR]... [--prefix STR]\n"
            "              [--default-ttl MS] [--log-format FMT] [-n] [-v] [--dev]\n"
            "              [--successor]\n"
            "  -c, --config FILE    read settings from an INI file\n"
            "  -s, --socket PATH    client socket (default $DLOCK_SOCKET, else %s)\n"
            "  -S, --status-socket PATH\n"
            "                       status socket (default: the file's status_socket, else\n"
            "                       beside the client socket: DIR/status.sock for\n"
            "                       DIR/dlock.sock, else X-status.sock for X.sock); \"\" for none\n"
            "  -r, --redis ADDR     Redis at host:port or unix:/path; repeat for quorum\n"
            "                       mode over 3, 5, 7 or 9 independent nodes (cluster mode:\n"
            "                       seed nodes; sentinel mode: the sentinels)\n"
            "      --mode MODE      auto (default), single, quorum, cluster or sentinel\n"
            "      --prefix STR     key prefix (default dlock:)\n"
            "      --default-ttl MS lease TTL when a client asks for none (default 30000; at\n"
            "                       most max_ttl_ms, 45000 by default)\n"
            "  -n, --check          check the configuration, print \"configuration OK\", exit\n"
            "  -v, --verbose        more logging (repeatable)\n"
            "      --log-format FMT plain (default), logfmt or json\n"
            "      --successor      take the leases over from the dlockd running on the same\n"
            "                       state directory, which is asked to leave them (SIGTERM)\n"
            "      --dev            run a private redis-server in a temp directory\n"
            "  -h, --help           this text;  -V, --version  the version\n",
            CONFIG_DEFAULT_SOCKET);
}

/* Command-line settings, applied over the file. */
/* A flag as typed ("-s", "--socket"), for the errors about its value. */
#define FLAG_MAX 24

struct flags {
    const char *config, *socket, *status_socket, *prefix, *ttl, *mode, *log_format;
    char socket_as[FLAG_MAX], status_socket_as[FLAG_MAX], redis_as[FLAG_MAX];
    char prefix_as[FLAG_MAX], ttl_as[FLAG_MAX], mode_as[FLAG_MAX], log_format_as[FLAG_MAX];
    char redis[CONFIG_MAX_NODES * 400]; /* the -r addresses, comma-separated */
    unsigned nredis;
    int verbose;
    bool check, dev, successor;
};

/* The option getopt_long() just read, as typed: "-s" (also of "-sPATH"),
 * "--socket" (also of "--socket=PATH"). */
static void as_typed(char *const argv[], const char *arg, char out[FLAG_MAX])
{
    /* The option is the word before its argument, or the argument's own
     * word ("--socket=PATH", "-sPATH"). */
    int i = optind - 1;
    const char *word = argv[i] == arg && i > 0 ? argv[i - 1] : argv[i];
    size_t n = word[1] == '-' ? strcspn(word, "=") : 2;
    snprintf(out, FLAG_MAX, "%.*s", (int)n, word);
}

static int parse_flags(int argc, char **argv, struct flags *f)
{
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"socket", required_argument, NULL, 's'},
                                             {"status-socket", required_argument, NULL, 'S'},
                                             {"redis", required_argument, NULL, 'r'},
                                             {"prefix", required_argument, NULL, OPT_PREFIX},
                                             {"default-ttl", required_argument, NULL, OPT_TTL},
                                             {"mode", required_argument, NULL, OPT_MODE},
                                             {"log-format", required_argument, NULL, OPT_LOGFMT},
                                             {"check", no_argument, NULL, 'n'},
                                             {"verbose", no_argument, NULL, 'v'},
                                             {"dev", no_argument, NULL, OPT_DEV},
                                             {"successor", no_argument, NULL, OPT_SUCCESSOR},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "c:s:S:r:nvhV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            f->config = optarg;
            break;
        case 's':
            f->socket = optarg;
            as_typed(argv, optarg, f->socket_as);
            break;
        case 'S':
            f->status_socket = optarg;
            as_typed(argv, optarg, f->status_socket_as);
            break;
        case 'r': {
            size_t used = strlen(f->redis);
            if (f->nredis == CONFIG_MAX_NODES || used + strlen(optarg) + 2 > sizeof f->redis) {
                log_config_error("at most %d Redis nodes", CONFIG_MAX_NODES);
                return -1;
            }
            snprintf(f->redis + used, sizeof f->redis - used, "%s%s", used ? "," : "", optarg);
            f->nredis++;
            as_typed(argv, optarg, f->redis_as);
            break;
        }
        case OPT_MODE:
            f->mode = optarg;
            as_typed(argv, optarg, f->mode_as);
            break;
        case OPT_PREFIX:
            f->prefix = optarg;
            as_typed(argv, optarg, f->prefix_as);
            break;
        case OPT_TTL:
            f->ttl = optarg;
            as_typed(argv, optarg, f->ttl_as);
            break;
        case OPT_LOGFMT: {
            /* In force at once: the errors of the configuration show in it. */
            enum log_format lf;
            if (log_format_parse(optarg, &lf) != 0) {
                log_config_error("--log-format: '%s' is not plain, logfmt or json", optarg);
                return -1;
            }
            log_set_format(lf);
            f->log_format = optarg;
            as_typed(argv, optarg, f->log_format_as);
            break;
        }
        case 'n':
            f->check = true;
            break;
        case 'v':
            f->verbose++;
            break;
        case OPT_DEV:
            f->dev = true;
            break;
        case OPT_SUCCESSOR:
            f->successor = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf("dlockd %s\n", DLOCK_VERSION);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        log_config_error("unexpected argument '%s'", argv[optind]);
        return -1;
    }
    return 0;
}

/* Defaults, then $DLOCK_SOCKET, then the file, then the flags. 0, or -1
 * with every error in r, each with its source (the file's line, the flag as
 * typed). */
static int build_config(struct config *cfg, const struct flags *f, struct config_report *r)
{
    config_defaults(cfg);
    config_report_init(r);
    const char *env = getenv("DLOCK_SOCKET");
    if (env && *env)
        config_set_report(cfg, "agent", "socket", env, "$DLOCK_SOCKET", r);
    if (f->config)
        config_load_file_report(cfg, f->config, r);
    const struct {
        const char *section, *key, *value, *as;
    } over[] = {{"agent", "socket", f->socket, f->socket_as},
                {"agent", "status_socket", f->status_socket, f->status_socket_as},
                {"redis", "address", f->nredis ? f->redis : NULL, f->redis_as},
                {"redis", "mode", f->mode, f->mode_as},
                {"agent", "prefix", f->prefix, f->prefix_as},
                {"agent", "default_ttl_ms", f->ttl, f->ttl_as},
                {"agent", "log_format", f->log_format, f->log_format_as}};
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++)
        if (over[i].value)
            config_set_report(cfg, over[i].section, over[i].key, over[i].value, over[i].as, r);
    cfg->log_level += f->verbose;
    if (cfg->log_level > LOG_DEBUG)
        cfg->log_level = LOG_DEBUG;
    /* Not configured, the status socket goes beside the client socket, where
     * dlockctl looks for it (the rule both take from wire_status_sibling()). */
    if (!cfg->status_socket_set &&
        wire_status_sibling(cfg->socket, cfg->status_socket, sizeof cfg->status_socket) != 0)
        config_report_error(r, "agent", "socket",
                            "the status socket beside %s would not fit in %zu bytes: set "
                            "status_socket (empty for none) or -S",
                            cfg->socket, sizeof cfg->status_socket - 1);
    config_state_dir_follow(cfg);
    config_validate_report(cfg, r);
    return r->nerrors ? -1 : 0;
}

/* Every error of r, each on a line of its own on stderr. */
static void report_errors(const struct config_report *r)
{
    for (const char *p = r->text; *p;) {
        size_t n = strcspn(p, "\n");
        log_config_error("%.*s", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

/* The log's format from the settings (checked when they were read). */
static void apply_log_format(const struct config *cfg)
{
    enum log_format lf;
    if (log_format_parse(cfg->log_format, &lf) == 0)
        log_set_format(lf);
}

/* Masters of a Redis Cluster the descriptor budget allows for. */
#define CLUSTER_MASTERS_BUDGET 128

/* Descriptors the agent may hold at once: one per client connection, the
 * status and HTTP pools, two links per Redis node (cluster: per master, and
 * the control link; sentinel: the master's two and two per sentinel), and a
 * margin for the listeners, the loop, the timer, the log and short-lived
 * files. */
static unsigned long descriptors_needed(const struct config *cfg)
{
    unsigned long links = 2ul * cfg->nnodes;
    if (cfg->mode == REDIS_MODE_CLUSTER)
        links = 2ul * CLUSTER_MASTERS_BUDGET + 1;
    else if (cfg->mode == REDIS_MODE_SENTINEL)
        links += 2;
    /* A resumable connection holds its socket and its touch file (and a
     * pidfd while it waits for its client after a restart). */
    unsigned long per_conn = cfg->state_dir[0] ? 2 : 1;
    return per_conn * cfg->max_connections + 2 * STATUS_CONNS + links + 64;
}

/* Quorum mode: a node that restarts is left out of quorums for max_ttl_ms. */
static void warn_long_exclusion(const struct config *cfg)
{
    if (cfg->mode == REDIS_MODE_QUORUM && cfg->max_ttl_ms > 3600000)
        log_warn("max_ttl_ms is %u: a node that restarts is left out of quorums that long; set it "
                 "to the longest TTL clients use",
                 cfg->max_ttl_ms);
}

/* A reload (SIGHUP, or "reload" on the status socket): the file is read
 * again, and every setting that can change without dropping a lease or a
 * connection takes effect; the others stay as they are until a restart, each
 * with a warning that says why (config.c's table decides which). The file is
 * read and its user and group names resolved on a thread of its own: a name
 * service (NSS: LDAP, NIS...) may take seconds to answer, and the loop renews
 * leases meanwhile. The loop only applies the result. A reload asked for
 * while one is under way reads the file again after it; the status queries
 * waiting are answered once no reading is left, with the changes of all of
 * them. */
static struct {
    struct flags flags;
    struct config *cfg; /* in force, the loop's */
    struct agent *agent;
    struct ev_loop *loop;
    ev_async done;
    pthread_t thread;
    bool running; /* a reading is under way */
    bool again;   /* another reload was asked for meanwhile */
    int rc;
    char err[600];
    struct config fresh; /* written by the thread, read by the loop after done */
    struct tls_ctx *tls; /* and fresh's TLS context, built from the files again */
    /* For the status queries waiting: the settings changed since they
     * asked, and what the last reading could not apply. */
    struct sbuf applied, tail;
    size_t napplied, nrestart, nfailed;
    /* Redis moved: the agent restarts in place once the queries waiting
     * have their answer (agent_reexec()). */
    bool reexec;
    char **argv;
} hup;

/* The errors of a reading refused, on one line: "E1; E2; ...". */
static void reload_errors(const struct config_report *r, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *p = r->text; *p && used + 1 < len;) {
        size_t n = strcspn(p, "\n");
        int w = snprintf(buf + used, len - used, "%s%.*s", used ? "; " : "", (int)n, p);
        if (w < 0)
            break;
        used += (size_t)w < len - used ? (size_t)w : len - used - 1;
        p += n + (p[n] == '\n');
    }
}

static void *reload_thread(void *arg)
{
    static struct config_report report; /* one reading at a time */
    hup.rc = build_config(&hup.fresh, &hup.flags, &report);
    if (hup.rc != 0)
        reload_errors(&report, hup.err, sizeof hup.err);
    /* The files are read again even under the same names: a certificate
     * renewed in place takes effect this way. */
    hup.tls = NULL;
    if (hup.rc == 0 && hup.fresh.tls &&
        !(hup.tls = tls_ctx_new(&hup.fresh, hup.err, sizeof hup.err)))
        hup.rc = -1;
    ev_async_send(hup.loop, &hup.done);
    return NULL;
}

static void reload_reset(void)
{
    free(hup.applied.p);
    free(hup.tail.p);
    hup.applied = hup.tail = (struct sbuf){0};
    hup.napplied = hup.nrestart = hup.nfailed = 0;
}

/* "reloaded: 2 policy rule(s), log level info; 1 setting(s) applied, ...". */
static void summary(char *buf, size_t len, size_t applied, size_t restart, size_t failed)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    char what[160] = "no setting changed";
    if (applied || restart || failed) {
        size_t n = (size_t)snprintf(what, sizeof what, "%zu setting(s) applied", applied);
        if (restart)
            n += (size_t)snprintf(what + n, sizeof what - n, ", %zu need(s) a restart", restart);
        if (failed)
            snprintf(what + n, sizeof what - n, ", %zu could not be applied", failed);
    }
    snprintf(buf, len, "reloaded: %u policy rule(s), log level %s; %s", hup.cfg->policy.nrules,
             levels[hup.cfg->log_level & 3], what);
}

/* The status queries waiting get the outcome: error, or the changes;
 * with `now`, sent before the agent restarts in place. */
static void reload_answer_as(const char *error, bool now)
{
    struct sbuf b = {0};
    if (error) {
        sb_printf(&b, "error: %s\n", error);
    } else {
        char line[200];
        summary(line, sizeof line, hup.napplied, hup.nrestart, hup.nfailed);
        sb_printf(&b, "%s%s%s\n", hup.applied.p ? hup.applied.p : "", hup.tail.p ? hup.tail.p : "",
                  line);
    }
    const char *text = b.oom || hup.applied.oom || hup.tail.oom ? "error: out of memory\n" : b.p;
    if (now)
        status_reload_done_now(&hup.agent->status, text);
    else
        status_reload_done(&hup.agent->status, text);
    free(b.p);
    reload_reset();
}

static void reload_answer(const char *error)
{
    reload_answer_as(error, false);
}

static void reload_answer_now(void)
{
    reload_answer_as(NULL, true);
}

static void reload_start(const char *why)
{
    if (hup.running) {
        log_info("%s while the configuration is being read: it is read again after that", why);
        hup.again = true;
        return;
    }
    log_info("%s: reading the configuration again", why);
    if (pthread_create(&hup.thread, NULL, reload_thread, NULL) != 0) {
        log_error("configuration not reloaded: cannot start a thread to read it");
        reload_answer("reload: cannot start a thread to read the configuration; nothing changed");
        return;
    }
    hup.running = true;
}

/* Dev mode's Redis and sockets are its own, whatever the file says. */
static void keep_dev(const struct config *cfg, struct config *fresh)
{
    memcpy(fresh->nodes, cfg->nodes, sizeof fresh->nodes);
    fresh->nnodes = cfg->nnodes;
    fresh->mode = cfg->mode;
    fresh->mode_setting = cfg->mode_setting;
    memcpy(fresh->socket, cfg->socket, sizeof fresh->socket);
    memcpy(fresh->status_socket, cfg->status_socket, sizeof fresh->status_socket);
    if (!fresh->state_dir_set)
        memcpy(fresh->state_dir, cfg->state_dir, sizeof fresh->state_dir);
}

/* Moves the HTTP metrics listener; on failure the old one stays (and so does
 * its setting). Returns whether it moved. */
static bool move_metrics(struct config *fresh, const char *line)
{
    char why[400];
    if (status_move_http(&hup.agent->status, fresh->metrics_listen, why, sizeof why) == 0)
        return true;
    log_warn("not applied: %s: %s; the old listener stays", line, why);
    sb_printf(&hup.tail, "not applied: %s: %s; the old listener stays\n", line, why);
    memcpy(fresh->metrics_listen, hup.cfg->metrics_listen, sizeof fresh->metrics_listen);
    hup.nfailed++;
    return false;
}

/* Logs one changed setting and notes it for the answer; the metrics
 * listener moves. Returns whether the change is applied. */
/* A change of the Redis the leases live on: its address, mode, database
 * or sentinel master. The links are made for it at start, so the agent
 * restarts in place to apply it, its leases taken over and confirmed on
 * the new Redis (a restart costs them nothing). */
static bool moves_store(const struct config_change *ch)
{
    static const char *const keys[] = {"address", "mode", "database", "sentinel_master", "tls"};
    if (!ch->restart || strcmp(ch->section, "redis") != 0)
        return false;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(ch->key, keys[i]) == 0)
            return true;
    return false;
}

static bool take_change(const struct config_change *ch, struct config *fresh)
{
    char line[2 * CONFIG_SHOWN_MAX + 80];
    config_change_str(ch, line, sizeof line);
    if (hup.reexec && moves_store(ch)) {
        log_info("reloaded: %s (by a restart in place)", line);
        sb_printf(&hup.applied, "reloaded: %s (by a restart in place)\n", line);
        hup.napplied++;
        return false;
    }
    if (ch->restart) {
        log_warn("needs a restart: %s (%s)", line, ch->restart);
        sb_printf(&hup.tail, "needs a restart: %s (%s)\n", line, ch->restart);
        hup.nrestart++;
        return false;
    }
    if (strcmp(ch->key, "metrics_listen") == 0 && !move_metrics(fresh, line))
        return false;
    log_info("reloaded: %s", line);
    sb_printf(&hup.applied, "reloaded: %s\n", line);
    hup.napplied++;
    return true;
}

/* The fresh settings that can change take effect, and whatever keeps a copy
 * of them is refreshed: the descriptor budget, the connections' output caps
 * and waiters (the policy), the backend's timers and links. */
static void reload_apply(struct config *fresh)
{
    struct config *cfg = hup.cfg;
    struct agent *a = hup.agent;
    if (hup.flags.dev)
        keep_dev(cfg, fresh);
    static struct config_change ch[CONFIG_CHANGES_MAX];
    size_t n = config_diff(cfg, fresh, ch), applied = 0;
    /* A reading's lines show at the more verbose of the two log levels. */
    if (fresh->log_level > (int)log_get_level())
        log_set_level((enum log_level)fresh->log_level);
    /* This reading alone: what the answer shows besides the changes. */
    free(hup.tail.p);
    hup.tail = (struct sbuf){0};
    hup.nrestart = hup.nfailed = 0;
    /* Redis moves by a restart in place, unless something else needs a
     * real restart too (a socket path: the clients would not find the
     * agent again), or the agent has no state directory to keep its
     * leases in, or runs its own Redis (dev mode). */
    size_t moving = 0, other = 0;
    for (size_t i = 0; i < n; i++) {
        moving += moves_store(&ch[i]);
        other += ch[i].restart && !moves_store(&ch[i]);
    }
    hup.reexec = moving && !other && !hup.flags.dev && agent_can_reexec(a);
    for (size_t i = 0; i < n; i++)
        applied += take_change(&ch[i], fresh);
    bool descriptors = fresh->max_connections != cfg->max_connections;
    uint32_t max_ttl = cfg->max_ttl_ms;
    config_reload(cfg, fresh);
    if (cfg->max_ttl_ms != max_ttl)
        warn_long_exclusion(cfg);
    char line[200];
    summary(line, sizeof line, applied, hup.nrestart, hup.nfailed);
    log_info("%s", line);
    log_set_level((enum log_level)cfg->log_level);
    apply_log_format(cfg);
    if (!applied)
        return;
    if (descriptors)
        listener_fit_nofile(descriptors_needed(cfg));
    agent_policy_changed(a);
    if (a->backend->ops->reconfigured)
        a->backend->ops->reconfigured(a->backend);
}

static void on_reload_done(struct ev_loop *loop, ev_async *w, int revents)
{
    pthread_join(hup.thread, NULL);
    hup.running = false;
    bool failed = hup.rc != 0;
    if (failed) {
        log_error("configuration not reloaded: %s; the old one stays in force", hup.err);
    } else {
        reload_apply(&hup.fresh);
        /* The links made from now on take it; those up keep theirs. (TLS
         * itself is switched on or off by a restart only.) */
        if (hup.tls && hup.cfg->tls) {
            tls_ctx_install(hup.tls);
            if (!hup.reexec)
                log_info("TLS: certificates, keys and CAs read again; new connections to Redis "
                         "use them");
        } else {
            tls_ctx_free(hup.tls);
        }
        hup.tls = NULL;
    }
    if (hup.again) {
        hup.again = false;
        reload_start("asked for again");
    } else if (failed) {
        char error[sizeof hup.err + 64];
        snprintf(error, sizeof error, "configuration not reloaded: %s", hup.err);
        reload_answer(error);
    } else if (hup.reexec) {
        reload_answer_now();
        if (agent_reexec(hup.agent, hup.argv, "a new Redis") != 0)
            hup.reexec = false; /* the old Redis stays; the log says why */
    } else {
        reload_answer(NULL);
    }
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents)
{
    reload_start("got SIGHUP");
}

/* "reload" on the status socket, from the agent's own user or root. */
static void on_reload_asked(void *arg)
{
    reload_start("reload asked on the status socket");
}

int main(int argc, char **argv)
{
    log_detect_journal(); /* before anything may be printed */
    /* Large buffers (a batch of renewals on its way to the store) from
     * mmap, and back to the system when freed: otherwise glibc raises its
     * mmap threshold after the first such free and carves the next ones from
     * the heap, where the small allocations left among them keep the freed
     * pages resident. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    struct flags f = {0};
    static struct config cfg;
    char err[600];
    if (parse_flags(argc, argv, &f) != 0)
        return 2;
    static struct config_report report;
    if (build_config(&cfg, &f, &report) != 0) {
        report_errors(&report); /* every one, before refusing to start */
        return 2;
    }
    log_set_level((enum log_level)cfg.log_level);
    apply_log_format(&cfg);
    listener_fit_nofile(descriptors_needed(&cfg));
    if (cfg.tls) {
        struct tls_ctx *tls = tls_ctx_new(&cfg, err, sizeof err);
        if (!tls) {
            log_config_error("%s", err);
            return 2;
        }
        tls_ctx_install(tls);
    }
    if (f.check) {
        if (config_check_groups(&cfg, err, sizeof err) != 0) {
            log_config_error("%s", err);
            return 2;
        }
        tls_ctx_install(NULL);
        printf("configuration OK\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    struct ev_loop *loop = EV_DEFAULT;
    if (f.dev && devmode_start(loop, &cfg, f.socket != NULL) != 0) {
        devmode_stop();
        return 1;
    }
    static struct agent agent;
    if (agent_init(&agent, loop, &cfg, f.successor) != 0) {
        devmode_stop();
        return 1;
    }
    char addr[300];
    if (cfg.mode == REDIS_MODE_QUORUM) {
        log_info("dlockd %s started; quorum mode over %u Redis nodes, key prefix '%s'",
                 DLOCK_VERSION, cfg.nnodes, cfg.prefix);
        warn_long_exclusion(&cfg);
    } else if (cfg.mode == REDIS_MODE_CLUSTER) {
        log_info("dlockd %s started; Redis Cluster through %u seed node(s), first %s, key prefix "
                 "'%s'",
                 DLOCK_VERSION, cfg.nnodes, config_addr_str(&cfg.nodes[0], addr, sizeof addr),
                 cfg.prefix);
    } else if (cfg.mode == REDIS_MODE_SENTINEL) {
        log_info("dlockd %s started; sentinel mode: master %s named by %u sentinel(s), key "
                 "prefix '%s'",
                 DLOCK_VERSION, cfg.sentinel_master, cfg.nnodes, cfg.prefix);
    } else {
        log_info("dlockd %s started; Redis at %s, key prefix '%s'", DLOCK_VERSION,
                 config_addr_str(&cfg.nodes[0], addr, sizeof addr), cfg.prefix);
    }
    if (cfg.tls)
        log_info(
            "TLS to Redis: TLS %s or later, server certificates %s, CAs from %s, %s",
            cfg.tls_min_version, cfg.tls_verify ? "verified" : "NOT verified (tls_verify = no)",
            cfg.tls_ca_file[0]  ? cfg.tls_ca_file
            : cfg.tls_ca_dir[0] ? cfg.tls_ca_dir
                                : "the system's store",
            cfg.tls_cert_file[0] ? "a client certificate (mutual TLS)" : "no client certificate");
    hup.flags = f;
    hup.argv = argv;
    hup.cfg = &cfg;
    hup.agent = &agent;
    hup.loop = loop;
    ev_async_init(&hup.done, on_reload_done);
    ev_async_start(loop, &hup.done);
    status_on_reload(&agent.status, on_reload_asked, NULL);
    ev_signal sighup;
    ev_signal_init(&sighup, on_hup, SIGHUP);
    ev_signal_start(loop, &sighup);
    if (f.dev) {
        /* Only once Redis answers: the try-it command must work. */
        agent.ready_hook = devmode_banner;
        agent.ready_arg = &cfg;
    }
    ev_run(loop, 0);
    ev_signal_stop(loop, &sighup);
    if (hup.running)
        pthread_join(hup.thread, NULL);
    ev_async_stop(loop, &hup.done);
    reload_reset();
    agent_free(&agent);
    tls_ctx_install(NULL);
    devmode_stop();
    return agent.exit_code;
}
