/* SPDX-License-Identifier: BSD-3-Clause */
/* hcluster.c -- a Redis Cluster of 3 masters and 3 replicas per test, and
 * dlockd agents in cluster mode on it (see hcluster.h). */
#include "hcluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "text.h"
#include "tlspki.h"

#ifndef DLOCKD_PATH
#error "DLOCKD_PATH must be defined (path of the dlockd binary)"
#endif

struct hc_cluster HC;

/* Client ports are drawn from [PORT_MIN, PORT_MAX): with their bus ports
 * (+10000) they stay below the kernel's ephemeral range (32768 up), so no
 * outgoing connection takes one between our check and the server's bind. */
#define PORT_MIN   12000
#define PORT_MAX   22000
#define BUS_OFFSET 10000

/* ---- fixtures ---- */

static void drop_conn(struct hc_node *n)
{
    if (n->conn) {
        redisFree(n->conn);
        n->conn = NULL;
    }
}

/* Kills every node and forgets the connections. */
static void cluster_stop(void)
{
    for (int i = 0; i < HC_NODES; i++) {
        redisproc_kill(&HC.node[i].proc);
        drop_conn(&HC.node[i]);
    }
    memset(&HC, 0, sizeof HC);
}

void hc_setup(void)
{
    h_setup();
    memset(&HC, 0, sizeof HC);
}

void hc_teardown(void)
{
    if (!H.passed && H.dir[0]) {
        const char *out = h_read_file(h_path("cluster-create.log"));
        if (out && !strstr(out, "[OK] All 16384 slots covered"))
            fprintf(stderr, "---- redis-cli --cluster create ----\n%s\n", out);
    }
    /* A paused agent is resumed, so that h_teardown() can stop it. */
    for (int i = 0; i < H_MAX_AGENTS; i++)
        if (H.agent[i].pid)
            h_agent_resume(i);
    cluster_stop();
    h_teardown();
}

void hc_skip(const char *why)
{
    cluster_stop();
    h_skip(why);
}

/* ---- nodes ---- */

static struct hc_node *node_at(int i)
{
    cr_assert(i >= 0 && i < HC_NODES, "no cluster node %d", i);
    return &HC.node[i];
}

int hc_running(int i)
{
    const struct hc_node *n = node_at(i);
    return n->proc.pid > 0 && !n->proc.paused;
}

void hc_tls(bool auth)
{
    cr_assert_eq(HC.node[0].port, 0, "hc_tls() comes before hc_start()");
    HC.tls = true;
    HC.tls_auth = auth;
}

const char *hc_tls_addr(int i)
{
    cr_assert(HC.tls, "the cluster has no TLS (hc_tls())");
    return h_keepf("rediss://127.0.0.1:%d", node_at(i)->tls_port);
}

const char *hc_addr(int i)
{
    static char bufs[8][32];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "127.0.0.1:%d", node_at(i)->port);
    return b;
}

/* The node listening on port, or -1. */
static int node_of_port(long port)
{
    for (int i = 0; i < HC_NODES; i++)
        if (HC.node[i].port == port)
            return i;
    return -1;
}

/* Whether a node has p as its port or its TLS port already. */
static int port_taken(int p)
{
    for (int j = 0; j < HC_NODES; j++)
        if (HC.node[j].port == p || HC.node[j].tls_port == p)
            return 1;
    return 0;
}

/* A free port that no node has (nor had, for the one being picked again),
 * whose bus port is free too unless tls (a TLS port has no bus). */
static int pick_port(bool tls)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)h_now_ms();
    for (int tries = 0; tries < 2000; tries++) {
        int p = PORT_MIN + (int)(rand_r(&seed) % (PORT_MAX - PORT_MIN));
        if (!port_taken(p) && h_port_free(p) && (tls || h_port_free(p + BUS_OFFSET)))
            return p;
    }
    cr_assert_fail("no free port%s in %d..%d", tls ? "" : " pair (P, P+10000)", PORT_MIN, PORT_MAX);
    return -1;
}

static void node_spawn(int i)
{
    struct hc_node *n = node_at(i);
    cr_assert_eq(n->proc.pid, 0, "cluster node %d already runs", i);
    char conf[H_PATH + 32], rdb[32];
    snprintf(conf, sizeof conf, "%s/nodes-%d.conf", H.dir, n->port);
    /* A replica stores the RDB of its full sync: each node its own file. */
    snprintf(rdb, sizeof rdb, "dump-%d.rdb", n->port);
    const char *extra[32] = {"--cluster-enabled",
                             "yes",
                             "--cluster-config-file",
                             conf,
                             "--cluster-node-timeout",
                             "1000",
                             "--dbfilename",
                             rdb,
                             NULL};
    if (HC.tls) {
        /* With tls-cluster, the bus would be TLSPORT + 10000: it stays at
         * port + 10000, the port pick_port() found free. */
        const char *tls[] = {"--tls-port",
                             h_keepf("%d", n->tls_port),
                             "--tls-cert-file",
                             tls_file("server.crt"),
                             "--tls-key-file",
                             tls_file("server.key"),
                             "--tls-ca-cert-file",
                             tls_file("ca.crt"),
                             "--tls-auth-clients",
                             HC.tls_auth ? "yes" : "no",
                             "--tls-cluster",
                             "yes",
                             "--tls-replication",
                             "yes",
                             "--cluster-port",
                             h_keepf("%d", n->port + BUS_OFFSET),
                             NULL};
        size_t at = 8;
        for (size_t k = 0; tls[k]; k++)
            extra[at++] = tls[k];
        extra[at] = NULL;
    }
    struct redisproc_opts o = {
        .port = n->port, .bind = "127.0.0.1", .dir = H.dir, .log = n->log, .extra = extra};
    if (redisproc_spawn(&n->proc, &o) != 0)
        cr_assert_fail("cluster node %d: %s", i, n->proc.err);
}

/* Waits for node i's PING: 0, or -1 when it exited because its port was
 * taken meanwhile (the caller picks another); anything else fails the test. */
static int node_wait_ready(int i)
{
    struct hc_node *n = node_at(i);
    if (redisproc_wait_ready(&n->proc, h_scaled_ms(H_START_MS)) == 0)
        return 0;
    char why[sizeof n->proc.err];
    snprintf(why, sizeof why, "%s", n->proc.err);
    redisproc_kill(&n->proc);
    if (strstr(why, "Address already in use"))
        return -1;
    cr_assert_fail("cluster node %d (port %d): %s", i, n->port, why);
    return -1;
}

static redisContext *conn(int i)
{
    struct hc_node *n = node_at(i);
    if (n->conn && n->conn->err)
        drop_conn(n);
    if (n->conn)
        return n->conn;
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", n->port, tv);
    if (!c)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    struct timeval cmd_tv = {5, 0};
    redisSetTimeout(c, cmd_tv);
    redisReply *r = redisCommand(c, "READONLY");
    if (r)
        freeReplyObject(r);
    n->conn = c;
    return c;
}

/* A command on node i, or NULL (no connection, no reply): for the waits,
 * which ask nodes that may be busy changing their role. */
static redisReply *try_vcmd(int i, int asking, const char *fmt, va_list ap)
{
    if (!hc_running(i))
        return NULL;
    redisContext *c = conn(i);
    if (!c)
        return NULL;
    if (asking) {
        redisReply *a = redisCommand(c, "ASKING");
        if (!a)
            return NULL;
        freeReplyObject(a);
    }
    return redisvCommand(c, fmt, ap);
}

static redisReply *try_cmd(int i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = try_vcmd(i, 0, fmt, ap);
    va_end(ap);
    return r;
}

static redisReply *must_vcmd(int i, int asking, const char *fmt, va_list ap)
{
    cr_assert(hc_running(i), "cluster node %d is not running", i);
    redisReply *r = try_vcmd(i, asking, fmt, ap);
    struct hc_node *n = node_at(i);
    cr_assert_not_null(r, "'%s' on cluster node %d (port %d): %s", fmt, i, n->port,
                       n->conn ? n->conn->errstr : "cannot connect");
    return r;
}

redisReply *hc_cmd(int i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = must_vcmd(i, 0, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *hc_cmd_argv(int i, int argc, const char **argv)
{
    cr_assert(hc_running(i), "cluster node %d is not running", i);
    redisContext *c = conn(i);
    cr_assert_not_null(c, "cannot connect to cluster node %d", i);
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    cr_assert_not_null(r, "'%s' on cluster node %d: %s", argv[0], i, c->errstr);
    return r;
}

/* A field of node i's INFO section, or "" when it does not answer. */
static void node_info(int i, const char *section, const char *field, char *out, size_t cap)
{
    out[0] = '\0';
    redisReply *r = try_cmd(i, "INFO %s", section);
    if (r && r->type == REDIS_REPLY_STRING)
        text_info_field(r->str, field, out, cap);
    if (r)
        freeReplyObject(r);
}

int hc_is_master(int i)
{
    char role[32];
    node_info(i, "replication", "role", role, sizeof role);
    return strcmp(role, "master") == 0;
}

/* ---- slot maps ---- */

struct slot_map {
    int8_t owner[KEY_SLOTS]; /* node index, or -1: none, or not one of ours */
    /* The master each node is listed as a replica of, or -1. CLUSTER SLOTS
     * lists a replica only once its replication offset is known to be above
     * 0: in a fresh cluster, after its master's first write. */
    int8_t replica_of[HC_NODES];
};

/* Node i's CLUSTER SLOTS: 0, or -1 when it gives none. */
static int read_slots(int i, struct slot_map *m)
{
    memset(m->owner, -1, sizeof m->owner);
    memset(m->replica_of, -1, sizeof m->replica_of);
    redisReply *r = try_cmd(i, "CLUSTER SLOTS");
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (size_t k = 0; k < r->elements; k++) {
        redisReply *e = r->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        int owner = node_of_port((long)e->element[2]->element[1]->integer);
        for (long long s = lo; s <= hi && s < KEY_SLOTS; s++)
            if (s >= 0)
                m->owner[s] = (int8_t)owner;
        for (size_t k2 = 3; k2 < e->elements; k2++) {
            const redisReply *rep = e->element[k2];
            if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 ||
                rep->element[1]->type != REDIS_REPLY_INTEGER)
                continue;
            int node = node_of_port((long)rep->element[1]->integer);
            if (node >= 0)
                m->replica_of[node] = (int8_t)owner;
        }
    }
    freeReplyObject(r);
    return 0;
}

/* The slot map of the first running node that gives one. */
static void any_slots(struct slot_map *m)
{
    for (int i = 0; i < HC_NODES; i++)
        if (hc_running(i) && read_slots(i, m) == 0)
            return;
    cr_assert_fail("no running cluster node gives a slot map");
}

int hc_slot_node(unsigned slot)
{
    cr_assert_lt(slot, KEY_SLOTS);
    static struct slot_map m;
    any_slots(&m);
    return m.owner[slot];
}

unsigned hc_slot(const char *key)
{
    return key_slot(key, strlen(key));
}

int hc_key_node(const char *key)
{
    return hc_slot_node(hc_slot(key));
}

int hc_masters(int out[HC_NODES])
{
    static struct slot_map m;
    any_slots(&m);
    int n = 0;
    for (unsigned s = 0; s < KEY_SLOTS; s++) {
        int o = m.owner[s];
        if (o < 0 || !hc_running(o))
            continue;
        int seen = 0;
        for (int k = 0; k < n; k++)
            seen |= out[k] == o;
        if (!seen)
            out[n++] = o;
    }
    return n;
}

/* One line of CLUSTER NODES: the node index (or -1), whether it is a
 * replica, and of which node id. */
struct nodes_line {
    int node;
    int replica;
    int failed;
    char master_id[41];
};

/* Parses one line "<id> <ip:port@bus[,host]> <flags> <master> ...". */
static int parse_nodes_line(const char *line, struct nodes_line *out)
{
    char id[64], addr[128], flags[128], master[41];
    if (sscanf(line, "%63s %127s %127s %40s", id, addr, flags, master) != 4)
        return -1;
    /* The port runs from the last ':' before the '@'. */
    char *at = strchr(addr, '@');
    if (at)
        *at = '\0';
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return -1;
    out->node = node_of_port(strtol(colon + 1, NULL, 10));
    out->replica = strstr(flags, "slave") != NULL;
    out->failed = strstr(flags, "fail") != NULL;
    snprintf(out->master_id, sizeof out->master_id, "%s", master);
    return 0;
}

int hc_replica_of(int m)
{
    const struct hc_node *mn = node_at(m);
    for (int asked = 0; asked < HC_NODES; asked++) {
        if (!hc_running(asked))
            continue;
        redisReply *r = try_cmd(asked, "CLUSTER NODES");
        if (!r || r->type != REDIS_REPLY_STRING) {
            if (r)
                freeReplyObject(r);
            continue;
        }
        int found = -1;
        for (const char *p = r->str; p && *p && found < 0;
             p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
            struct nodes_line l;
            if (parse_nodes_line(p, &l) == 0 && l.replica && l.node >= 0 && hc_running(l.node) &&
                strcmp(l.master_id, mn->id) == 0)
                found = l.node;
        }
        freeReplyObject(r);
        return found;
    }
    return -1;
}

/* Why the cluster is not yet as hc_wait_ok() wants it, into why; 1 when it
 * is. With listed, every replica must also be listed as its master's in
 * every node's CLUSTER SLOTS (clients learn the replicas there). */
static int cluster_ok(char *why, size_t cap, int listed)
{
    static struct slot_map first, cur;
    int replica[HC_NODES] = {0}, any = 0;
    for (int i = 0; i < HC_NODES; i++) {
        if (!hc_running(i))
            continue;
        any = 1;
        char role[32], link[32];
        node_info(i, "replication", "role", role, sizeof role);
        if (strcmp(role, "slave") == 0) {
            replica[i] = 1;
            node_info(i, "replication", "master_link_status", link, sizeof link);
            if (strcmp(link, "up") != 0) {
                snprintf(why, cap, "replica %d's link to its master is %s", i,
                         link[0] ? link : "unknown");
                return 0;
            }
        } else if (strcmp(role, "master") != 0) {
            snprintf(why, cap, "node %d does not say its role", i);
            return 0;
        }
    }
    if (!any) {
        snprintf(why, cap, "no node runs");
        return 0;
    }
    int have_first = 0, first_node = -1;
    for (int i = 0; i < HC_NODES; i++) {
        if (!hc_running(i))
            continue;
        redisReply *r = try_cmd(i, "CLUSTER INFO");
        int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        if (r)
            freeReplyObject(r);
        if (!ok) {
            snprintf(why, cap, "node %d (port %d) is not cluster_state:ok", i, HC.node[i].port);
            return 0;
        }
        struct slot_map *m = have_first ? &cur : &first;
        if (read_slots(i, m) != 0) {
            snprintf(why, cap, "node %d gives no slot map", i);
            return 0;
        }
        for (unsigned s = 0; s < KEY_SLOTS; s++)
            if (m->owner[s] < 0 || !hc_running(m->owner[s]) || replica[m->owner[s]]) {
                snprintf(why, cap, "node %d: slot %u is served by %s", i, s,
                         m->owner[s] < 0 ? "no node of ours" : "a node that is down or a replica");
                return 0;
            }
        if (have_first && memcmp(first.owner, cur.owner, sizeof first.owner) != 0) {
            snprintf(why, cap, "node %d's slot map differs from node %d's", i, first_node);
            return 0;
        }
        if (!have_first)
            first_node = i;
        have_first = 1;
        for (int k = 0; listed && k < HC_NODES; k++)
            if (replica[k] && m->replica_of[k] < 0) {
                snprintf(why, cap, "node %d's CLUSTER SLOTS does not list replica %d", i, k);
                return 0;
            }
    }
    return 1;
}

void hc_wait_ok(int timeout_ms)
{
    char why[256] = "";
    int64_t end = h_deadline(timeout_ms);
    while (!cluster_ok(why, sizeof why, 1)) {
        if (h_now_ms() > end)
            cr_assert_fail("the cluster is not ok after %d ms: %s", h_scaled_ms(timeout_ms), why);
        h_pump_all(20);
    }
}

/* Runs redis-cli --cluster create over the six nodes and waits for it. */
static void cluster_create(void)
{
    char *argv[16];
    int n = 0;
    argv[n++] = "redis-cli";
    argv[n++] = "--cluster";
    argv[n++] = "create";
    char addrs[HC_NODES][32];
    for (int i = 0; i < HC_NODES; i++) {
        snprintf(addrs[i], sizeof addrs[i], "%s", hc_addr(i));
        argv[n++] = addrs[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "1";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    char err[512];
    const char *log = h_path("cluster-create.log");
    pid_t pid = proc_spawn(argv, log, H.dir, err, sizeof err, NULL);
    cr_assert_gt(pid, 0, "%s", err);
    int64_t end = h_deadline(HC_START_MS);
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            int code = proc_exit_code(st);
            if (code != 0) {
                const char *out = h_read_file(log);
                fprintf(stderr, "---- %s ----\n%s\n", log, out ? out : "");
                cr_assert_fail("redis-cli --cluster create: exit status %d (output above)", code);
            }
            return;
        }
        if (h_now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            const char *out = h_read_file(log);
            fprintf(stderr, "---- %s ----\n%s\n", log, out ? out : "");
            cr_assert_fail("redis-cli --cluster create did not finish within %d ms", HC_START_MS);
        }
        h_sleep_ms(20);
    }
}

void hc_start(void)
{
    for (int i = 0; i < HC_NODES; i++)
        snprintf(HC.node[i].log, sizeof HC.node[i].log, "%s/cnode%d.log", H.dir, i);
    int pending[HC_NODES];
    for (int i = 0; i < HC_NODES; i++)
        pending[i] = 1;
    /* A port may be taken between our check and the server's bind (by
     * another test): that node starts again on another port. */
    for (int round = 0; round < 5; round++) {
        int left = 0;
        for (int i = 0; i < HC_NODES; i++)
            if (pending[i]) {
                HC.node[i].port = pick_port(false);
                if (HC.tls)
                    HC.node[i].tls_port = pick_port(true);
                node_spawn(i);
            }
        for (int i = 0; i < HC_NODES; i++)
            if (pending[i]) {
                pending[i] = node_wait_ready(i) != 0;
                left += pending[i];
            }
        if (!left)
            break;
        cr_assert_lt(round, 4, "cluster nodes kept finding their ports taken");
    }
    for (int i = 0; i < HC_NODES; i++) {
        redisReply *r = hc_cmd(i, "CLUSTER MYID");
        cr_assert_eq(r->type, REDIS_REPLY_STRING, "CLUSTER MYID on node %d", i);
        snprintf(HC.node[i].id, sizeof HC.node[i].id, "%s", r->str);
        freeReplyObject(r);
    }
    cluster_create();
    /* Every master writes (and deletes) a key, so that its replica's
     * replication offset leaves 0 and CLUSTER SLOTS lists it: without a
     * write that takes until the master's first replication ping (10 s). */
    char why[256] = "";
    int64_t end = h_deadline(HC_START_MS);
    while (!cluster_ok(why, sizeof why, 0)) {
        if (h_now_ms() > end)
            cr_assert_fail("the cluster is not ok after %d ms: %s", h_scaled_ms(HC_START_MS), why);
        h_sleep_ms(20);
    }
    int masters[HC_NODES];
    int n = hc_masters(masters);
    for (int k = 0; k < n; k++) {
        char key[32];
        static struct slot_map map;
        any_slots(&map);
        for (unsigned i = 0;; i++) {
            snprintf(key, sizeof key, "hc-start-%u", i);
            if (map.owner[hc_slot(key)] == masters[k])
                break;
        }
        freeReplyObject(hc_cmd(masters[k], "SET %s 1", key));
        freeReplyObject(hc_cmd(masters[k], "DEL %s", key));
    }
    hc_wait_ok(HC_START_MS);
}

/* ---- keys ---- */

static const struct slot_tags *tags(void)
{
    static struct slot_tags *t;
    if (!t) {
        t = malloc(sizeof *t);
        cr_assert_not_null(t);
        slot_tags_build(t);
    }
    return t;
}

#define PREFIX "dlock:"

static char *key_buf(void)
{
    static char bufs[16][600];
    static int next;
    return bufs[next++ % 16];
}

const char *hc_lock_key(const char *name)
{
    char *b = key_buf();
    snprintf(b, 512, PREFIX "%s", name);
    return b;
}

const char *hc_mark_key(const char *name)
{
    char key[512];
    int n = snprintf(key, sizeof key, PREFIX "%s", name);
    cr_assert(n > 0 && (size_t)n < sizeof key);
    char *b = key_buf();
    size_t len = fence_hw_key(tags(), key, (size_t)n, strlen(PREFIX), b);
    b[len] = '\0';
    return b;
}

unsigned hc_name_slot(const char *name)
{
    return hc_slot(hc_lock_key(name));
}

void hc_name_on(int m, const char *base, char *out, size_t cap)
{
    static struct slot_map map;
    any_slots(&map);
    for (unsigned i = 0; i < 1000000; i++) {
        snprintf(out, cap, "%s-%u", base, i);
        if (map.owner[hc_name_slot(out)] == m)
            return;
    }
    cr_assert_fail("no name %s-N on node %d", base, m);
}

void hc_name_in_slot(unsigned slot, const char *base, char *out, size_t cap)
{
    for (unsigned i = 0; i < 10000000; i++) {
        snprintf(out, cap, "%s-%u", base, i);
        if (hc_name_slot(out) == slot)
            return;
    }
    cr_assert_fail("no name %s-N in slot %u", base, slot);
}

/* ---- routed commands ---- */

/* Whether r is an error reply starting with word. */
static int is_error(const redisReply *r, const char *word)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, word, strlen(word)) == 0;
}

/* The node named by "MOVED slot host:port" or "ASK slot host:port". */
static int redirect_node(const redisReply *r)
{
    const char *colon = strrchr(r->str, ':');
    int n = colon ? node_of_port(strtol(colon + 1, NULL, 10)) : -1;
    cr_assert_geq(n, 0, "redirect to a node that is not ours: %s", r->str);
    return n;
}

static redisReply *key_vcmd(int start, const char *key, const char *fmt, va_list ap)
{
    int node = start, asking = 0;
    int64_t end = h_deadline(HC_SETTLE_MS);
    for (;;) {
        va_list copy;
        va_copy(copy, ap);
        redisReply *r = must_vcmd(node, asking, fmt, copy);
        va_end(copy);
        asking = 0;
        if (is_error(r, "MOVED ")) {
            node = redirect_node(r);
        } else if (is_error(r, "ASK ")) {
            node = redirect_node(r);
            asking = 1;
        } else if (is_error(r, "TRYAGAIN") || is_error(r, "CLUSTERDOWN")) {
            node = hc_key_node(key);
            h_sleep_ms(10);
        } else {
            return r;
        }
        if (h_now_ms() > end)
            cr_assert_fail("'%s' for key %s: still %s after %d ms", fmt, key, r->str, HC_SETTLE_MS);
        freeReplyObject(r);
    }
}

redisReply *hc_key_cmd(const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = key_vcmd(hc_key_node(key), key, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *hc_key_cmd_from(int start, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = key_vcmd(start, key, fmt, ap);
    va_end(ap);
    return r;
}

/* Fails the test on an error reply (MOVED: node i does not serve key) but
 * ASK; returns 1 for ASK: the node is migrating the slot away and no longer
 * has the key. */
static int no_error(int i, const redisReply *r, const char *what, const char *key)
{
    if (r->type == REDIS_REPLY_ERROR && is_error(r, "ASK "))
        return 1;
    if (r->type == REDIS_REPLY_ERROR)
        cr_assert_fail("%s %s on cluster node %d: %s", what, key, i, r->str);
    return 0;
}

/* The key helpers below send ASKING first: a node importing the slot then
 * answers for the keys it has (elsewhere ASKING changes nothing). */
static redisReply *asking_cmd(int i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = must_vcmd(i, 1, fmt, ap);
    va_end(ap);
    return r;
}

char *hc_get(int i, const char *key)
{
    redisReply *r = asking_cmd(i, "GET %s", key);
    int moved = no_error(i, r, "GET", key);
    char *v = NULL;
    if (moved)
        ;
    else if (r->type == REDIS_REPLY_STRING)
        v = h_keep(r->str);
    else
        cr_assert_eq(r->type, REDIS_REPLY_NIL, "GET %s on node %d: reply type %d", key, i, r->type);
    freeReplyObject(r);
    return v;
}

/* An integer reply; `absent` when the node answers ASK (it has not the key). */
static long long int_cmd(int i, long long absent, const char *what, const char *key,
                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = must_vcmd(i, 1, fmt, ap);
    va_end(ap);
    if (no_error(i, r, what, key)) {
        freeReplyObject(r);
        return absent;
    }
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s %s on node %d: reply type %d", what, key, i,
                 r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

int hc_exists(int i, const char *key)
{
    return (int)int_cmd(i, 0, "EXISTS", key, "EXISTS %s", key);
}

long long hc_pttl(int i, const char *key)
{
    return int_cmd(i, -2, "PTTL", key, "PTTL %s", key);
}

void hc_del(int i, const char *key)
{
    int_cmd(i, 0, "DEL", key, "DEL %s", key);
}

long long hc_count_slot(int i, unsigned slot)
{
    char what[32];
    snprintf(what, sizeof what, "slot %u", slot);
    return int_cmd(i, 0, "CLUSTER COUNTKEYSINSLOT", what, "CLUSTER COUNTKEYSINSLOT %u", slot);
}

void hc_key_gone(const char *file, int line, int node, const char *key)
{
    h_key_gone_at(file, line, "cluster node", node, key, hc_pttl);
}

/* ---- moving a slot ---- */

static void expect_ok(int i, redisReply *r, const char *what)
{
    cr_assert(r->type == REDIS_REPLY_STATUS, "%s on cluster node %d: %s", what, i,
              r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
}

void hc_migrate_begin(struct hc_migration *m, unsigned slot, int to)
{
    memset(m, 0, sizeof *m);
    m->slot = slot;
    m->from = hc_slot_node(slot);
    m->to = to;
    cr_assert_geq(m->from, 0, "slot %u has no master", slot);
    cr_assert_neq(m->from, to, "slot %u is on node %d already", slot, to);
    expect_ok(to, hc_cmd(to, "CLUSTER SETSLOT %u IMPORTING %s", slot, HC.node[m->from].id),
              "SETSLOT IMPORTING");
    expect_ok(m->from, hc_cmd(m->from, "CLUSTER SETSLOT %u MIGRATING %s", slot, HC.node[to].id),
              "SETSLOT MIGRATING");
}

/* MIGRATE of n keys from the old master to the new one in one command;
 * returns how many it moved (those the old master had). */
static long migrate(struct hc_migration *m, const char *const *keys, size_t n)
{
    if (n == 0)
        return 0;
    const char **argv = calloc(n + 7, sizeof *argv);
    cr_assert_not_null(argv);
    char port[16];
    /* With tls-cluster, MIGRATE connects with TLS: to the TLS port. */
    snprintf(port, sizeof port, "%d", HC.tls ? HC.node[m->to].tls_port : HC.node[m->to].port);
    int argc = 0;
    argv[argc++] = "MIGRATE";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = port;
    argv[argc++] = "";
    argv[argc++] = "0";
    argv[argc++] = "5000";
    argv[argc++] = "KEYS";
    long had = 0;
    for (size_t k = 0; k < n; k++) {
        /* EXISTS on the old master: 1, 0 or ASK (moved already). */
        redisReply *e = hc_cmd(m->from, "EXISTS %s", keys[k]);
        if (e->type == REDIS_REPLY_INTEGER && e->integer == 1) {
            argv[argc++] = keys[k];
            had++;
        }
        freeReplyObject(e);
    }
    if (had) {
        redisReply *r = hc_cmd_argv(m->from, argc, argv);
        /* Some key may have expired meanwhile (NOKEY when all did). */
        if (!(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "NOKEY") == 0))
            expect_ok(m->from, r, "MIGRATE");
        else
            freeReplyObject(r);
    }
    free(argv);
    m->moved += had;
    return had;
}

long hc_migrate_keys(struct hc_migration *m, const char *const *keys, size_t n)
{
    return migrate(m, keys, n);
}

long hc_migrate_some(struct hc_migration *m, long max)
{
    long moved = 0;
    while (moved < max) {
        long batch = max - moved < 100 ? max - moved : 100;
        redisReply *r = hc_cmd(m->from, "CLUSTER GETKEYSINSLOT %u %ld", m->slot, batch);
        cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "GETKEYSINSLOT on node %d: %s", m->from,
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r->elements == 0) {
            freeReplyObject(r);
            break;
        }
        const char **keys = calloc(r->elements, sizeof *keys);
        cr_assert_not_null(keys);
        for (size_t k = 0; k < r->elements; k++)
            keys[k] = r->element[k]->str;
        long n = migrate(m, keys, r->elements);
        free(keys);
        freeReplyObject(r);
        moved += n;
    }
    return moved;
}

void hc_migrate_finish(struct hc_migration *m)
{
    hc_migrate_some(m, 1L << 30);
    cr_assert_eq(hc_count_slot(m->from, m->slot), 0, "keys of slot %u stayed on node %d", m->slot,
                 m->from);
    /* The new master first (it takes the slot with a new epoch), then the
     * old one, then the others. */
    expect_ok(m->to, hc_cmd(m->to, "CLUSTER SETSLOT %u NODE %s", m->slot, HC.node[m->to].id),
              "SETSLOT NODE");
    expect_ok(m->from, hc_cmd(m->from, "CLUSTER SETSLOT %u NODE %s", m->slot, HC.node[m->to].id),
              "SETSLOT NODE");
    int masters[HC_NODES];
    int n = hc_masters(masters);
    for (int k = 0; k < n; k++)
        if (masters[k] != m->to && masters[k] != m->from)
            expect_ok(masters[k],
                      hc_cmd(masters[k], "CLUSTER SETSLOT %u NODE %s", m->slot, HC.node[m->to].id),
                      "SETSLOT NODE");
    /* Every running node, replicas too, agrees. */
    int64_t end = h_deadline(HC_SETTLE_MS);
    static struct slot_map map;
    for (int i = 0; i < HC_NODES; i++) {
        if (!hc_running(i))
            continue;
        while (read_slots(i, &map) != 0 || map.owner[m->slot] != m->to) {
            if (h_now_ms() > end)
                cr_assert_fail("node %d still has slot %u on node %d, not %d", i, m->slot,
                               map.owner[m->slot], m->to);
            h_pump_all(10);
        }
    }
}

void hc_move_slot(unsigned slot, int to)
{
    struct hc_migration m;
    hc_migrate_begin(&m, slot, to);
    hc_migrate_finish(&m);
}

/* ---- failures ---- */

void hc_kill(int i)
{
    struct hc_node *n = node_at(i);
    drop_conn(n);
    redisproc_kill(&n->proc);
}

int hc_kill_master(int i)
{
    cr_assert(hc_running(i) && hc_is_master(i), "cluster node %d is no running master", i);
    static struct slot_map before, now;
    any_slots(&before);
    int r = hc_replica_of(i);
    cr_assert_geq(r, 0, "master %d has no running replica", i);
    hc_kill(i);
    int64_t end = h_deadline(HC_FAILOVER_MS);
    char why[256] = "";
    for (;;) {
        int promoted = -1;
        for (int k = 0; k < HC_NODES && promoted < 0; k++)
            if (k != i && hc_running(k) && read_slots(k, &now) == 0) {
                int all = 1;
                for (unsigned s = 0; s < KEY_SLOTS && all; s++)
                    if (before.owner[s] == i && now.owner[s] == i)
                        all = 0;
                if (all)
                    for (unsigned s = 0; s < KEY_SLOTS; s++)
                        if (before.owner[s] == i) {
                            promoted = now.owner[s];
                            break;
                        }
            }
        if (promoted >= 0 && hc_running(promoted) && hc_is_master(promoted) &&
            cluster_ok(why, sizeof why, 1))
            return promoted;
        if (h_now_ms() > end)
            cr_assert_fail("no replica of node %d was promoted within %d ms (%s)", i,
                           HC_FAILOVER_MS, why[0] ? why : "its slots still map to it");
        h_pump_all(20);
    }
}

void hc_node_restart(int i)
{
    struct hc_node *n = node_at(i);
    cr_assert_eq(n->proc.pid, 0, "cluster node %d still runs", i);
    /* Without the RDB of an earlier full sync: it starts empty. */
    char rdb[32];
    snprintf(rdb, sizeof rdb, "dump-%d.rdb", n->port);
    unlink(h_path(rdb));
    node_spawn(i);
    cr_assert_eq(node_wait_ready(i), 0, "cluster node %d: port %d was taken meanwhile", i, n->port);
    hc_wait_ok(HC_FAILOVER_MS);
}

/* ---- agents ---- */

void hc_agent_config(int i, const char *agent_ini, const char *redis_ini, unsigned seeds)
{
    char addr[512] = "";
    for (int n = 0; n < HC_NODES; n++)
        if (!seeds || (seeds & HC_SEED(n))) {
            cr_assert_gt(HC.node[n].port, 0, "node %d has no port yet (hc_start() first)", n);
            size_t used = strlen(addr);
            snprintf(addr + used, sizeof addr - used, "%s%s", used ? ", " : "",
                     HC.tls ? hc_tls_addr(n) : hc_addr(n));
        }
    char redis[1024];
    snprintf(redis, sizeof redis, "mode = cluster\n%s", redis_ini ? redis_ini : "");
    h_agent_config_addr(i, agent_ini, addr, redis);
}

/* Starts dlockd with conf on sock, logging to log; returns its pid. */
static pid_t dlockd_spawn(const char *conf, const char *sock, const char *log)
{
    char *argv[] = {DLOCKD_PATH, "-c", (char *)conf, "-s", (char *)sock, NULL};
    char err[512];
    pid_t pid = proc_spawn(argv, log, NULL, err, sizeof err, NULL);
    cr_assert_gt(pid, 0, "%s", err);
    return pid;
}

/* Takes and gives back a probe lock on every master, until each is granted. */
static void agent_probe(int i)
{
    dlock_client *c = NULL;
    int rc = h_client_try_open(i, &c);
    cr_assert_eq(rc, 0, "dlock_client_open to agent %d: %s", i, dlock_strerror(rc));
    int masters[HC_NODES];
    int n = hc_masters(masters);
    int64_t end = h_deadline(HC_AGENT_MS);
    for (int k = 0; k < n; k++) {
        char name[64];
        hc_name_on(masters[k], "__probe__", name, sizeof name);
        for (;;) {
            dlock_lease *l = NULL;
            dlock_acquire_options o = {.ttl_ms = 2000, .wait_ms = 0};
            rc = dlock_lease_acquire(c, name, &o, &l);
            if (rc == 0) {
                dlock_lease_release(l);
                break;
            }
            if (h_now_ms() > end || rc == DLOCK_EDISCONNECTED) {
                dlock_client_close(c);
                h_agent_log_tail(i, 40);
                cr_assert_fail("agent %d did not grant its probe lock %s within %d ms: %s (%d)", i,
                               name, HC_AGENT_MS, dlock_strerror(rc), rc);
            }
            h_sleep_ms(rc == DLOCK_EBUSY ? 20 : 10);
        }
    }
    dlock_client_close(c);
}

void hc_agent_start(int i)
{
    cr_assert(i >= 0 && i < H_MAX_AGENTS, "no agent slot %d", i);
    struct h_agent *a = &H.agent[i];
    cr_assert_eq(a->pid, 0, "agent %d already running", i);
    if (access(a->conf, F_OK) != 0)
        hc_agent_config(i, NULL, NULL, 0);
    a->pid = dlockd_spawn(a->conf, a->sock, a->log);
    a->paused = 0;
    int64_t end = h_deadline(H_START_MS);
    for (;;) {
        if (!h_agent_alive(i)) {
            h_agent_log_tail(i, 40);
            cr_assert_fail("dlockd %d exited during start-up (see its log above)", i);
        }
        dlock_client *c = NULL;
        int rc = DLOCK_ECONNECT;
        if (access(a->sock, F_OK) == 0 && (rc = dlock_client_open(&c, a->sock)) == 0) {
            dlock_client_close(c);
            break;
        }
        if (h_now_ms() > end) {
            h_agent_log_tail(i, 40);
            cr_assert_fail("dlockd %d did not accept a client within %d ms (last: %s)", i,
                           h_scaled_ms(H_START_MS), dlock_strerror(rc));
        }
        h_sleep_ms(5);
    }
    agent_probe(i);
}
