/* SPDX-License-Identifier: BSD-3-Clause */
/* main.c -- dlockd entry point: options, configuration, dev mode, the loop. */
#include <ev.h>
#include <getopt.h>
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
#include "wire.h"

enum { OPT_PREFIX = 256, OPT_TTL, OPT_DEV, OPT_MODE };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlockd [-c FILE] [-s SOCKET] [-S PATH] [-r ADDR]... [--prefix STR]\n"
            "              [--default-ttl MS] [-n] [-v] [--dev]\n"
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
            "      --dev            run a private redis-server in a temp directory\n"
            "  -h, --help           this text;  -V, --version  the version\n",
            CONFIG_DEFAULT_SOCKET);
}

/* Command-line settings, applied over the file. */
struct flags {
    const char *config, *socket, *status_socket, *prefix, *ttl, *mode;
    char redis[CONFIG_MAX_NODES * 400]; /* the -r addresses, comma-separated */
    unsigned nredis;
    int verbose;
    bool check, dev;
};

static int parse_flags(int argc, char **argv, struct flags *f)
{
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"socket", required_argument, NULL, 's'},
                                             {"status-socket", required_argument, NULL, 'S'},
                                             {"redis", required_argument, NULL, 'r'},
                                             {"prefix", required_argument, NULL, OPT_PREFIX},
                                             {"default-ttl", required_argument, NULL, OPT_TTL},
                                             {"mode", required_argument, NULL, OPT_MODE},
                                             {"check", no_argument, NULL, 'n'},
                                             {"verbose", no_argument, NULL, 'v'},
                                             {"dev", no_argument, NULL, OPT_DEV},
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
            break;
        case 'S':
            f->status_socket = optarg;
            break;
        case 'r': {
            size_t used = strlen(f->redis);
            if (f->nredis == CONFIG_MAX_NODES || used + strlen(optarg) + 2 > sizeof f->redis) {
                log_config_error("at most %d Redis nodes", CONFIG_MAX_NODES);
                return -1;
            }
            snprintf(f->redis + used, sizeof f->redis - used, "%s%s", used ? "," : "", optarg);
            f->nredis++;
            break;
        }
        case OPT_MODE:
            f->mode = optarg;
            break;
        case OPT_PREFIX:
            f->prefix = optarg;
            break;
        case OPT_TTL:
            f->ttl = optarg;
            break;
        case 'n':
            f->check = true;
            break;
        case 'v':
            f->verbose++;
            break;
        case OPT_DEV:
            f->dev = true;
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

/* Defaults, then $DLOCK_SOCKET, then the file, then the flags. */
static int build_config(struct config *cfg, const struct flags *f)
{
    char err[600];
    config_defaults(cfg);
    const char *env = getenv("DLOCK_SOCKET");
    if (env && *env && config_set(cfg, "agent", "socket", env, err, sizeof err) != 0)
        goto bad;
    if (f->config && config_load_file(cfg, f->config, err, sizeof err) != 0)
        goto bad;
    const struct {
        const char *section, *key, *value;
    } over[] = {{"agent", "socket", f->socket},
                {"agent", "status_socket", f->status_socket},
                {"redis", "address", f->nredis ? f->redis : NULL},
                {"redis", "mode", f->mode},
                {"agent", "prefix", f->prefix},
                {"agent", "default_ttl_ms", f->ttl}};
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++)
        if (over[i].value &&
            config_set(cfg, over[i].section, over[i].key, over[i].value, err, sizeof err) != 0)
            goto bad;
    cfg->log_level += f->verbose;
    if (cfg->log_level > LOG_DEBUG)
        cfg->log_level = LOG_DEBUG;
    /* Not configured, the status socket goes beside the client socket, where
     * dlockctl looks for it (the rule both take from wire_status_sibling()). */
    if (!cfg->status_socket_set &&
        wire_status_sibling(cfg->socket, cfg->status_socket, sizeof cfg->status_socket) != 0) {
        snprintf(err, sizeof err,
                 "the status socket beside %s would not fit in %zu bytes: set status_socket "
                 "(empty for none) or -S",
                 cfg->socket, sizeof cfg->status_socket - 1);
        goto bad;
    }
    if (config_validate(cfg, err, sizeof err) == 0)
        return 0;
bad:
    log_config_error("%s", err);
    return -1;
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
    return (unsigned long)cfg->max_connections + 2 * STATUS_CONNS + links + 64;
}

/* SIGHUP: the file is read again; the access policy and the log level
 * take effect at once, leases and connections stay. Other settings need a
 * restart. The file is read and its user and group names resolved on a
 * thread of its own: a name service (NSS: LDAP, NIS...) may take seconds
 * to answer, and the loop renews leases meanwhile. The loop only swaps the
 * result in. */
static struct {
    struct flags flags;
    struct config *cfg; /* in force, the loop's */
    struct agent *agent;
    struct ev_loop *loop;
    ev_async done;
    pthread_t thread;
    bool running; /* a reading is under way */
    bool again;   /* another SIGHUP came meanwhile */
    int rc;
    struct config fresh; /* written by the thread, read by the loop after done */
} hup;

static void *reload_thread(void *arg)
{
    hup.rc = build_config(&hup.fresh, &hup.flags);
    ev_async_send(hup.loop, &hup.done);
    return NULL;
}

static void reload_start(void)
{
    if (hup.running) {
        hup.again = true;
        return;
    }
    log_info("got SIGHUP: reading the configuration again");
    if (pthread_create(&hup.thread, NULL, reload_thread, NULL) != 0) {
        log_error("configuration not reloaded: cannot start a thread to read it");
        return;
    }
    hup.running = true;
}

static void on_reload_done(struct ev_loop *loop, ev_async *w, int revents)
{
    pthread_join(hup.thread, NULL);
    hup.running = false;
    struct config *fresh = &hup.fresh;
    if (hup.rc != 0) {
        log_error("configuration not reloaded; the old one stays");
    } else {
        hup.cfg->policy = fresh->policy;
        hup.cfg->log_level = fresh->log_level;
        log_set_level((enum log_level)fresh->log_level);
        log_info("reloaded: %u policy rule(s), log level %d", fresh->policy.nrules,
                 fresh->log_level);
        agent_policy_changed(hup.agent);
        if (!hup.flags.dev && memcmp(hup.cfg, fresh, sizeof *fresh) != 0)
            log_warn("other changed settings take effect at the next start");
    }
    if (hup.again) {
        hup.again = false;
        reload_start();
    }
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents)
{
    reload_start();
}

int main(int argc, char **argv)
{
    log_detect_journal(); /* before anything may be printed */
    struct flags f = {0};
    static struct config cfg;
    if (parse_flags(argc, argv, &f) != 0 || build_config(&cfg, &f) != 0)
        return 2;
    log_set_level((enum log_level)cfg.log_level);
    listener_fit_nofile(descriptors_needed(&cfg));
    if (f.check) {
        char err[200];
        if (config_check_groups(&cfg, err, sizeof err) != 0) {
            log_config_error("%s", err);
            return 2;
        }
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
    if (agent_init(&agent, loop, &cfg) != 0) {
        devmode_stop();
        return 1;
    }
    char addr[300];
    if (cfg.mode == REDIS_MODE_QUORUM) {
        log_info("dlockd %s started; quorum mode over %u Redis nodes, key prefix '%s'",
                 DLOCK_VERSION, cfg.nnodes, cfg.prefix);
        if (cfg.max_ttl_ms > 3600000)
            log_warn("max_ttl_ms is %u: a node that restarts is left out of quorums that long; "
                     "set it to the longest TTL clients use",
                     cfg.max_ttl_ms);
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
    hup.flags = f;
    hup.cfg = &cfg;
    hup.agent = &agent;
    hup.loop = loop;
    ev_async_init(&hup.done, on_reload_done);
    ev_async_start(loop, &hup.done);
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
    agent_free(&agent);
    devmode_stop();
    return agent.exit_code;
}
