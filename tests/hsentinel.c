/* SPDX-License-Identifier: BSD-3-Clause */
/* hsentinel.c -- a master, two replicas and three sentinels per test
 * (hsentinel.h). */
#include "hsentinel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tlspki.h"

struct hs_env HS;
/* hs_start_tls(auth): whether clients need a certificate. */
static bool tls_auth;

/* ---- ports and processes ---- */

static int port_taken(int port)
{
    for (int i = 0; i < HS_REDIS; i++)
        if (HS.redis_port[i] == port || HS.redis_tls_port[i] == port)
            return 1;
    for (int s = 0; s < HS_SENTINELS; s++)
        if (HS.sentinel_port[s] == port || HS.sentinel_tls_port[s] == port)
            return 1;
    return 0;
}

/* A loopback TCP port nothing listens on now (the kernel's choice), none of
 * ours. The server started on it may still find it taken: the callers try
 * again with another. */
static int free_port(void)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                 getsockname(fd, (struct sockaddr *)&a, &len) == 0;
        close(fd);
        int port = ntohs(a.sin_port);
        if (ok && !port_taken(port))
            return port;
    }
    cr_assert_fail("no free loopback port");
    return -1;
}

static const char *subdir(const char *name)
{
    const char *d = h_path(name);
    cr_assert(mkdir(d, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", d, strerror(errno));
    return d;
}

/* With TLS: the command-line arguments (the lines of a configuration file
 * without their "--") that make a server or a sentinel also listen with TLS
 * on port, with the test's server certificate (also its client
 * certificate), and speak TLS to the servers it replicates from or monitors
 * and to the other sentinels. Sets arg[0] to arg[TLS_ARGS - 1]. */
#define TLS_ARGS 12
static void tls_args(const char **arg, const char *port)
{
    const char *a[TLS_ARGS] = {"--tls-port",         port,
                               "--tls-cert-file",    tls_file("server.crt"),
                               "--tls-key-file",     tls_file("server.key"),
                               "--tls-ca-cert-file", tls_file("ca.crt"),
                               "--tls-auth-clients", tls_auth ? "yes" : "no",
                               "--tls-replication",  "yes"};
    memcpy(arg, a, sizeof a);
}

/* Redis server i: 0 the master, the others its replicas. */
static void redis_start(int i)
{
    char name[32], log[32], master_port[16], tls_port[16];
    snprintf(name, sizeof name, "redis%d", i);
    snprintf(log, sizeof log, "redis%d.log", i);
    snprintf(master_port, sizeof master_port, "%d",
             HS.tls ? HS.redis_tls_port[0] : HS.redis_port[0]);
    char dir[H_PATH], logpath[H_PATH];
    snprintf(dir, sizeof dir, "%s", subdir(name));
    snprintf(logpath, sizeof logpath, "%s", h_path(log));
    /* Each in its own directory: a replica's full sync writes a file there. */
    const char *extra[6 + TLS_ARGS] = {"--repl-diskless-sync-delay", "0", "--replicaof",
                                       "127.0.0.1", master_port};
    int n = i == 0 ? 2 : 5;
    if (HS.tls) {
        tls_args(extra + n, tls_port);
        n += TLS_ARGS;
    }
    extra[n] = NULL;
    for (int attempt = 0;; attempt++) {
        HS.redis_port[i] = free_port();
        if (HS.tls)
            HS.redis_tls_port[i] = h_server_port();
        snprintf(tls_port, sizeof tls_port, "%d", HS.redis_tls_port[i]);
        struct redisproc_opts o = {
            .port = HS.redis_port[i], .dir = dir, .log = logpath, .extra = extra};
        if (redisproc_start(&HS.redis[i], &o, h_scaled_ms(H_START_MS)) == 0)
            break;
        HS.redis_port[i] = HS.redis_tls_port[i] = 0;
        cr_assert_lt(attempt, 4, "redis-server %d: %s", i, HS.redis[i].err);
    }
    /* The agents' user, allowed everything (ACLs are per server). */
    hs_ok(i, "ACL SETUSER %s on >%s ~* &* +@all", HS_USER, HS_PASSWORD);
}

static void sentinel_start(int s)
{
    char name[32], log[32];
    snprintf(name, sizeof name, "sentinel%d", s);
    snprintf(log, sizeof log, "sentinel%d.log", s);
    char dir[H_PATH], logpath[H_PATH], conf[H_PATH + 16];
    snprintf(dir, sizeof dir, "%s", subdir(name));
    snprintf(logpath, sizeof logpath, "%s", h_path(log));
    snprintf(conf, sizeof conf, "%s/sentinel.conf", dir);
    for (int attempt = 0;; attempt++) {
        HS.sentinel_port[s] = free_port();
        FILE *f = fopen(conf, "w");
        cr_assert_not_null(f, "cannot write %s", conf);
        fprintf(f,
                "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\n"
                "sentinel resolve-hostnames no\n"
                "sentinel monitor %s 127.0.0.1 %d 2\n"
                "sentinel down-after-milliseconds %s 1000\n"
                "sentinel failover-timeout %s 4000\n",
                HS.sentinel_port[s], dir, HS_MASTER_NAME,
                HS.tls ? HS.redis_tls_port[0] : HS.redis_port[0], HS_MASTER_NAME, HS_MASTER_NAME);
        if (HS.tls) {
            /* It announces its TLS port to the others, and reaches them and
             * the servers (at the TLS ports they replicate on) with TLS. */
            char port[16];
            const char *arg[TLS_ARGS];
            HS.sentinel_tls_port[s] = h_server_port();
            snprintf(port, sizeof port, "%d", HS.sentinel_tls_port[s]);
            tls_args(arg, port);
            for (int k = 0; k < TLS_ARGS; k += 2)
                fprintf(f, "%s %s\n", arg[k] + 2, arg[k + 1]);
        }
        fclose(f);
        struct redisproc *p = &HS.sentinel[s];
        memset(p, 0, sizeof *p);
        p->status = -1;
        snprintf(p->host, sizeof p->host, "127.0.0.1");
        p->port = HS.sentinel_port[s];
        snprintf(p->log, sizeof p->log, "%s", logpath);
        char *argv[] = {"redis-server", conf, "--sentinel", NULL};
        pid_t pid = proc_spawn(argv, logpath, dir, p->err, sizeof p->err, &p->status);
        if (pid > 0) {
            p->pid = pid;
            if (redisproc_wait_ready(p, h_scaled_ms(H_START_MS)) == 0)
                break;
            redisproc_kill(p);
        }
        HS.sentinel_port[s] = HS.sentinel_tls_port[s] = 0;
        cr_assert_lt(attempt, 4, "sentinel %d: %s", s, p->err);
    }
}

/* ---- commands ---- */

static redisContext *connect_to(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK)
        return c;
    if (c)
        redisFree(c);
    return NULL;
}

/* A command on the server at port over *conn (reconnected when needed). */
static redisReply *vcmd_at(redisContext **conn, int port, const char *fmt, va_list ap)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!*conn)
            *conn = connect_to(port);
        if (!*conn)
            return NULL;
        va_list copy;
        va_copy(copy, ap);
        redisReply *r = redisvCommand(*conn, fmt, copy);
        va_end(copy);
        if (r)
            return r;
        redisFree(*conn);
        *conn = NULL;
    }
    return NULL;
}

redisReply *hs_cmd(int i, const char *fmt, ...)
{
    cr_assert(i >= 0 && i < HS_REDIS, "no Redis server %d", i);
    if (!HS.redis[i].pid || HS.redis[i].paused)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd_at(&HS.conn[i], HS.redis_port[i], fmt, ap);
    va_end(ap);
    return r;
}

static redisReply *sentinel_vcmd(int s, const char *fmt, va_list ap)
{
    cr_assert(s >= 0 && s < HS_SENTINELS, "no sentinel %d", s);
    if (!HS.sentinel[s].pid)
        return NULL;
    return vcmd_at(&HS.sconn[s], HS.sentinel_port[s], fmt, ap);
}

static redisReply *sentinel_cmd(int s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = sentinel_vcmd(s, fmt, ap);
    va_end(ap);
    return r;
}

/* Fails the test unless r is an answer other than an error; frees it. */
static void reply_ok(redisReply *r, const char *who, int i, const char *fmt)
{
    cr_assert_not_null(r, "%s %d did not answer %s", who, i, fmt);
    int err = r->type == REDIS_REPLY_ERROR;
    char text[256];
    snprintf(text, sizeof text, "%s", err ? r->str : "");
    freeReplyObject(r);
    cr_assert_not(err, "%s %d: %s: %s", who, i, fmt, text);
}

void hs_ok(int i, const char *fmt, ...)
{
    cr_assert(i >= 0 && i < HS_REDIS && HS.redis[i].pid, "Redis server %d is not running", i);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd_at(&HS.conn[i], HS.redis_port[i], fmt, ap);
    va_end(ap);
    reply_ok(r, "Redis server", i, fmt);
}

void hs_sentinel_ok(int s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = sentinel_vcmd(s, fmt, ap);
    va_end(ap);
    reply_ok(r, "sentinel", s, fmt);
}

char *hs_get(int i, const char *key)
{
    redisReply *r = hs_cmd(i, "GET %s", key);
    cr_assert_not_null(r, "Redis server %d did not answer GET", i);
    char *out = r->type == REDIS_REPLY_STRING ? h_keep(r->str) : NULL;
    freeReplyObject(r);
    return out;
}

int hs_exists(int i, const char *key)
{
    redisReply *r = hs_cmd(i, "EXISTS %s", key);
    cr_assert_not_null(r, "Redis server %d did not answer EXISTS", i);
    int n = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return n;
}

/* ---- what the sentinels know ---- */

/* A field of a flat [name, value, ...] reply, or NULL. */
static const char *field(const redisReply *r, const char *name)
{
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t k = 0; k + 1 < r->elements; k += 2)
        if (r->element[k]->type == REDIS_REPLY_STRING && strcmp(r->element[k]->str, name) == 0 &&
            r->element[k + 1]->type == REDIS_REPLY_STRING)
            return r->element[k + 1]->str;
    return NULL;
}

/* The server whose port (or TLS port) this is, or -1. */
static int server_at(int port)
{
    for (int i = 0; i < HS_REDIS; i++)
        if (HS.redis_port[i] == port || HS.redis_tls_port[i] == port)
            return i;
    return -1;
}

/* Whether sentinel s knows the master, both other sentinels and two
 * replicas that it can use (no flag but "slave"). */
static int sentinel_ready(int s)
{
    redisReply *r = sentinel_cmd(s, "SENTINEL MASTER %s", HS_MASTER_NAME);
    const char *sentinels = field(r, "num-other-sentinels");
    const char *flags = field(r, "flags");
    int ok = sentinels && atoi(sentinels) >= HS_SENTINELS - 1 && flags && !strcmp(flags, "master");
    if (r)
        freeReplyObject(r);
    if (!ok)
        return 0;
    r = sentinel_cmd(s, "SENTINEL REPLICAS %s", HS_MASTER_NAME);
    int good = 0;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        const char *f = field(r->element[k], "flags");
        const char *link = field(r->element[k], "master-link-status");
        good += f && strcmp(f, "slave") == 0 && link && strcmp(link, "ok") == 0;
    }
    if (r)
        freeReplyObject(r);
    return good >= HS_REDIS - 1;
}

/* Both replicas of master m are in sync with it. */
static int replicas_online(int m)
{
    redisReply *r = hs_cmd(m, "INFO replication");
    int n = 0;
    for (const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : NULL;
         p && (p = strstr(p, "state=online")); p++)
        n++;
    if (r)
        freeReplyObject(r);
    return n >= HS_REDIS - 1;
}

static int all_sentinels_ready(void)
{
    for (int s = 0; s < HS_SENTINELS; s++)
        if (HS.sentinel[s].pid && !sentinel_ready(s))
            return 0;
    return 1;
}

static void start(bool tls, bool auth)
{
    memset(&HS, 0, sizeof HS);
    HS.tls = tls;
    tls_auth = auth;
    for (int i = 0; i < HS_REDIS; i++)
        redis_start(i);
    H_WAIT_UNTIL(20000, replicas_online(0));
    for (int s = 0; s < HS_SENTINELS; s++)
        sentinel_start(s);
    /* Sentinels find each other through the master's hello channel (every
     * 2 s) and the replicas through its INFO. */
    H_WAIT_UNTIL(30000, all_sentinels_ready());
    /* What h_agent_config() writes and h_agent_start_n() passes with -r. */
    size_t used = 0;
    for (int s = 0; s < HS_SENTINELS; s++)
        used += (size_t)snprintf(H.redis_addr + used, sizeof H.redis_addr - used,
                                 "%s%s127.0.0.1:%d", s ? "," : "", tls ? "rediss://" : "",
                                 tls ? HS.sentinel_tls_port[s] : HS.sentinel_port[s]);
}

void hs_start(void)
{
    start(false, false);
}

void hs_start_tls(bool auth)
{
    start(true, auth);
}

int hs_master(void)
{
    int named = -1;
    for (int s = 0; s < HS_SENTINELS; s++) {
        if (!HS.sentinel[s].pid)
            continue;
        redisReply *r = sentinel_cmd(s, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", HS_MASTER_NAME);
        int i = -1;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->type == REDIS_REPLY_STRING)
            i = server_at(atoi(r->element[1]->str));
        if (r)
            freeReplyObject(r);
        if (i < 0 || (named >= 0 && i != named))
            return -1;
        named = i;
    }
    if (named < 0)
        return -1;
    redisReply *r = hs_cmd(named, "ROLE");
    int master = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                 r->element[0]->type == REDIS_REPLY_STRING &&
                 strcmp(r->element[0]->str, "master") == 0;
    if (r)
        freeReplyObject(r);
    return master ? named : -1;
}

int hs_wait_master_not(int old)
{
    int m = -1;
    H_WAIT_UNTIL(HS_FAILOVER_MS, (m = hs_master()) >= 0 && m != old);
    return m;
}

void hs_kill(int i)
{
    if (HS.conn[i]) {
        redisFree(HS.conn[i]);
        HS.conn[i] = NULL;
    }
    redisproc_kill(&HS.redis[i]);
}

void hs_sentinel_kill(int s)
{
    if (HS.sconn[s]) {
        redisFree(HS.sconn[s]);
        HS.sconn[s] = NULL;
    }
    redisproc_kill(&HS.sentinel[s]);
}

/* ---- agents ---- */

/* The agent is up once it grants a lock (the master's link is set up) and
 * every agent is subscribed on the master. */
static void agent_settle(int i)
{
    dlock_client *c = NULL;
    cr_assert_eq(h_client_try_open(i, &c), 0);
    int64_t end = h_deadline(20000);
    int rc;
    for (;;) {
        dlock_lease *l = NULL;
        dlock_acquire_options o = {.ttl_ms = 1000, .wait_ms = 0};
        rc = dlock_lease_acquire(c, "__harness_probe__", &o, &l);
        if (rc == 0)
            dlock_lease_release(l);
        if (rc != DLOCK_EUNAVAIL || h_now_ms() > end)
            break;
        h_sleep_ms(10);
    }
    dlock_client_close(c);
    cr_assert_eq(rc, 0, "agent %d in sentinel mode: probe lock: %s", i, dlock_strerror(rc));
    cr_assert_geq(hs_master(), 0, "no master");
    /* The master is the first node of the status: its notice link up. */
    while (h_now_ms() < end) {
        const char *st = h_status_ask(i, "status-json\n");
        const char *sub = st ? strstr(st, "\"subscribed\":") : NULL;
        if (sub && strncmp(sub + strlen("\"subscribed\":"), "true", 4) == 0)
            return;
        h_sleep_ms(10);
    }
    cr_assert_fail("agent %d: no notice link to the master", i);
}

void hs_agent_start(int i, const char *agent_ini, const char *redis_ini)
{
    cr_assert_neq(HS.redis_port[0], 0, "hs_start() first");
    char rini[2048];
    snprintf(rini, sizeof rini,
             "mode = sentinel\nsentinel_master = %s\nuser = %s\npassword = %s\n%s", HS_MASTER_NAME,
             HS_USER, HS_PASSWORD, redis_ini ? redis_ini : "");
    h_agent_config(i, agent_ini, rini);
    h_agent_start_n(i);
    HS.nagents++;
    agent_settle(i);
}

void hs_agent_start_single(int i, const char *agent_ini, const char *redis_ini)
{
    int m = hs_master();
    cr_assert_geq(m, 0, "no master");
    char sentinels[sizeof H.redis_addr];
    memcpy(sentinels, H.redis_addr, sizeof sentinels);
    snprintf(H.redis_addr, sizeof H.redis_addr, "%s127.0.0.1:%d", HS.tls ? "rediss://" : "",
             HS.tls ? HS.redis_tls_port[m] : HS.redis_port[m]);
    char rini[2048];
    snprintf(rini, sizeof rini, "user = %s\npassword = %s\n%s", HS_USER, HS_PASSWORD,
             redis_ini ? redis_ini : "");
    h_agent_config(i, agent_ini, rini);
    h_agent_start_n(i);
    memcpy(H.redis_addr, sentinels, sizeof sentinels);
    HS.nagents++;
    agent_settle(i);
}

/* ---- teardown ---- */

void hs_teardown(void)
{
    for (int s = 0; s < HS_SENTINELS; s++) {
        if (!H.passed && HS.sentinel_port[s])
            h_log_tail(HS.sentinel[s].log, 15);
        hs_sentinel_kill(s);
    }
    for (int i = 0; i < HS_REDIS; i++)
        hs_kill(i);
    h_teardown();
}
