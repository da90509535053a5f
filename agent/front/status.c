/* SPDX-License-Identifier: BSD-3-Clause */
/* status.c -- the read-only status socket: one request line in, the whole
 * answer out, then the agent closes. Requests (docs/status.md):
 *
 *   status | status-json | leases [PATTERN] | leases-json [PATTERN] | metrics
 *
 * and, when configured, the same metrics over HTTP (GET /metrics) for
 * Prometheus to scrape. Answers are built in memory at once, from the
 * agent's state as it is in that loop turn, and written without blocking
 * the loop. */
#include "status.h"

#include <errno.h>
#include <fnmatch.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "server.h"
#include "stats.h"
#include "table.h"
#include "dlock.h"
#include "log.h"
#include "text.h"
#include "unixsock.h"
#include "util.h"
#include "wire.h"

#define REQ_MAX      256
#define HTTP_REQ_MAX 8192        /* request line and headers */
#define DRAIN_READ   16384       /* input past a request, read away per callback */
#define DRAIN_MAX    (64 * 1024) /* ... and in all, before the agent closes */
/* How long a query may take: an HTTP peer (anyone who reaches the port)
 * holds a slot for less time. */
static const double deadline_s[2] = {5.0, 2.0};

/* ---- growable text ---- */

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* A JSON string, quoted and escaped. Names and command names may hold any
 * byte, and JSON must be UTF-8: control characters (C1 too, which
 * terminals obey) are escaped, and every byte outside a well-formed UTF-8
 * sequence is written as U+FFFD. */
static void sb_json_str(struct sbuf *b, const char *s)
{
    size_t len = strlen(s);
    sb_printf(b, "\"");
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (n == 0)
            sb_printf(b, "\\ufffd");
        else if (cp == '"' || cp == '\\')
            sb_printf(b, "\\%c", (char)cp);
        else if (text_is_control(cp))
            sb_printf(b, "\\u%04x", (unsigned)cp);
        else
            sb_printf(b, "%.*s", (int)n, s + i);
        i += n ? n : 1;
    }
    sb_printf(b, "\"");
}

/* A Prometheus label value, which must be UTF-8: backslash, quote and
 * newline escaped; as the format has no other escapes, other control
 * characters and bytes outside well-formed UTF-8 are shown as '?'. */
static void sb_label(struct sbuf *b, const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (n && (cp == '\\' || cp == '"'))
            sb_printf(b, "\\%c", (char)cp);
        else if (n && cp == '\n')
            sb_printf(b, "\\n");
        else if (n == 0 || text_is_control(cp))
            sb_printf(b, "?");
        else
            sb_printf(b, "%.*s", (int)n, s + i);
        i += n ? n : 1;
    }
}

/* ---- what is reported ---- */

struct lease_row {
    const char *name;
    const char *state;
    uint64_t fence;
    int pid;
    unsigned uid;
    char comm[32];
    uint64_t age_ms, ttl_ms, valid_ms;
    uint32_t renewals, waiters;
};

static void lease_row(const struct lease *le, uint64_t now, struct lease_row *r)
{
    const struct conn *c = le->owner;
    r->name = le->lock->name;
    r->state = dlock_state_name(le->state);
    r->fence = le->fence;
    r->pid = (int)c->pid;
    r->uid = (unsigned)c->uid;
    snprintf(r->comm, sizeof r->comm, "%s", c->comm); /* read at connect: no file I/O here */
    r->age_ms = now > le->granted_at ? (now - le->granted_at) / NS_PER_MS : 0;
    r->ttl_ms = le->ttl_ms;
    r->valid_ms = le->deadline > now ? (le->deadline - now) / NS_PER_MS : 0;
    r->renewals = le->renewals;
    r->waiters = 0;
    for (const struct waiter *w = le->lock->qhead; w; w = w->qnext)
        r->waiters++;
}

/* Who asks: a peer that may not see all leases sees its own uid's only. */
struct asker {
    bool all;
    uint32_t uid;
};

/* Calls fn for every lease the asker may see whose name matches pattern
 * (NULL: all). */
static void each_lease(const struct status_source *a, const struct asker *who, const char *pattern,
                       void (*fn)(struct sbuf *, const struct lease_row *, bool first),
                       struct sbuf *b)
{
    uint64_t now = now_ns();
    bool first = true;
    for (size_t i = 0; i < a->table->nbuckets; i++) {
        for (const struct lock *l = a->table->buckets[i]; l; l = l->hnext) {
            if (!l->holder || (pattern && fnmatch(pattern, l->name, 0) != 0))
                continue;
            if (!who->all && ((const struct conn *)l->holder->owner)->uid != who->uid)
                continue;
            struct lease_row r;
            lease_row(l->holder, now, &r);
            fn(b, &r, first);
            first = false;
        }
    }
}

static void lease_json(struct sbuf *b, const struct lease_row *r, bool first)
{
    sb_printf(b, "%s{\"name\":", first ? "" : ",");
    sb_json_str(b, r->name);
    sb_printf(b, ",\"state\":\"%s\",\"fence\":%llu,\"pid\":%d,\"uid\":%u,\"comm\":", r->state,
              (unsigned long long)r->fence, r->pid, r->uid);
    sb_json_str(b, r->comm);
    sb_printf(b,
              ",\"age_ms\":%llu,\"ttl_ms\":%llu,\"valid_ms\":%llu,\"renewals\":%u,"
              "\"waiters\":%u}",
              (unsigned long long)r->age_ms, (unsigned long long)r->ttl_ms,
              (unsigned long long)r->valid_ms, r->renewals, r->waiters);
}

static void lease_text(struct sbuf *b, const struct lease_row *r, bool first)
{
    (void)first;
    /* Clients choose the names and their own command names: shown without
     * control characters, which a terminal would obey. */
    char name[WIRE_MAX_NAME + 1], comm[sizeof r->comm];
    text_printable(name, sizeof name, r->name);
    text_printable(comm, sizeof comm, r->comm);
    sb_printf(b, "%-32s %-8s %20llu %7d %5u %-15s %9llu %8llu %9llu %8u %7u\n", name, r->state,
              (unsigned long long)r->fence, r->pid, r->uid, comm, (unsigned long long)r->age_ms,
              (unsigned long long)r->ttl_ms, (unsigned long long)r->valid_ms, r->renewals,
              r->waiters);
}

static const char lease_header[] = "%-32s %-8s %20s %7s %5s %-15s %9s %8s %9s %8s %7s\n";

static void leases_text(const struct status_source *a, const struct asker *who, const char *pattern,
                        struct sbuf *b)
{
    sb_printf(b, lease_header, "NAME", "STATE", "FENCE", "PID", "UID", "COMMAND", "AGE_MS",
              "TTL_MS", "VALID_MS", "RENEWALS", "WAITERS");
    each_lease(a, who, pattern, lease_text, b);
}

static size_t nodes_of(const struct status_source *a, struct backend_node *nodes)
{
    size_t n = a->backend->ops->nodes(a->backend, nodes, CONFIG_MAX_NODES);
    return n < CONFIG_MAX_NODES ? n : CONFIG_MAX_NODES;
}

static uint64_t excluded_ms(const struct backend_node *n, uint64_t now)
{
    return n->excluded_until > now ? (n->excluded_until - now) / NS_PER_MS : 0;
}

/* The node's part in quorums, for the text: "counts", "joins in N s" (after
 * a restart; rounded up, so never 0 while excluded), "-" in single mode. */
static void quorum_text(const struct status_source *a, const struct backend_node *n, uint64_t now,
                        char *out, size_t len)
{
    if (a->cfg->mode != REDIS_MODE_QUORUM)
        snprintf(out, len, "-");
    else if (n->excluded_until > now)
        snprintf(out, len, "joins in %llu s",
                 (unsigned long long)((n->excluded_until - now + NS_PER_SEC - 1) / NS_PER_SEC));
    else
        snprintf(out, len, "counts");
}

static const char *mode_of(const struct status_source *a)
{
    switch (a->cfg->mode) {
    case REDIS_MODE_QUORUM:
        return "quorum";
    case REDIS_MODE_SINGLE:
        break;
    }
    return "single";
}

/* The agent's counters, by name: "renewal_failures" is the JSON member,
 * "renewal failures" in the text and dlock_renewal_failures_total in the
 * metrics. */
static const struct {
    const char *name, *help;
    size_t offset;
} counters[] = {
#define COUNTER(f, h)                                                                              \
    {                                                                                              \
#f, h, offsetof(struct agent_stats, f)                                                     \
    }
    COUNTER(grants, "Leases granted."),
    COUNTER(releases, "Leases released by their holder."),
    COUNTER(renewals, "Lease renewals that succeeded."),
    COUNTER(renewal_failures, "Lease renewals that failed without proof of loss."),
    COUNTER(losses, "Leases lost."),
    COUNTER(timeouts, "Acquire waits that ran out."),
    COUNTER(refused, "Acquire requests and connections refused by a limit before reaching Redis."),
    COUNTER(denied, "Acquire requests the access policy did not allow."),
#undef COUNTER
};
#define NCOUNTERS (sizeof counters / sizeof counters[0])

static unsigned long long counter_value(const struct status_source *a, size_t i)
{
    return *(const uint64_t *)((const char *)a->stats + counters[i].offset);
}

static void status_json(const struct status_source *a, const struct asker *who, struct sbuf *b)
{
    uint64_t now = now_ns();
    sb_printf(b, "{\"agent\":{\"version\":\"%s\",\"pid\":%d,\"mode\":\"%s\",\"prefix\":",
              DLOCK_VERSION, (int)getpid(), mode_of(a));
    sb_json_str(b, a->cfg->prefix);
    sb_printf(b, ",\"uptime_ms\":%llu,\"connections\":%u},\"nodes\":[",
              (unsigned long long)((now - a->started) / NS_PER_MS), a->server->nconns);
    struct backend_node nodes[CONFIG_MAX_NODES];
    size_t nn = nodes_of(a, nodes);
    for (size_t i = 0; i < nn; i++) {
        const struct backend_node *n = &nodes[i];
        sb_printf(b, "%s{\"addr\":", i ? "," : "");
        sb_json_str(b, n->addr);
        sb_printf(b, ",\"connected\":%s,\"subscribed\":%s,\"rtt_us\":%llu,\"last_error\":",
                  n->connected ? "true" : "false", n->subscribed ? "true" : "false",
                  (unsigned long long)(n->last_rtt_ns / 1000));
        sb_json_str(b, n->last_error_text);
        sb_printf(b,
                  ",\"excluded_for_ms\":%llu,\"run_id\":", (unsigned long long)excluded_ms(n, now));
        sb_json_str(b, n->run_id);
        sb_printf(b, ",\"durable\":%s}", n->durable ? "true" : "false");
    }
    sb_printf(b, "],\"counters\":{");
    for (size_t i = 0; i < NCOUNTERS; i++)
        sb_printf(b, "%s\"%s\":%llu", i ? "," : "", counters[i].name, counter_value(a, i));
    sb_printf(b, "},\"leases\":[");
    each_lease(a, who, NULL, lease_json, b);
    sb_printf(b, "]}\n");
}

static void status_text(const struct status_source *a, const struct asker *who, struct sbuf *b)
{
    uint64_t now = now_ns();
    char prefix[sizeof a->cfg->prefix];
    text_printable(prefix, sizeof prefix, a->cfg->prefix);
    sb_printf(b, "dlockd %s, pid %d, %s mode, prefix '%s', up %llu s, %u connection(s)\n\n",
              DLOCK_VERSION, (int)getpid(), mode_of(a), prefix,
              (unsigned long long)((now - a->started) / NS_PER_SEC), a->server->nconns);
    sb_printf(b, "%-40s %-9s %-10s %8s  %-16s %s\n", "NODE", "CONNECTED", "SUBSCRIBED", "RTT_US",
              "QUORUM", "LAST_ERROR");
    struct backend_node nodes[CONFIG_MAX_NODES];
    size_t nn = nodes_of(a, nodes);
    for (size_t i = 0; i < nn; i++) {
        const struct backend_node *n = &nodes[i];
        /* Error texts come from Redis or the system, as they are. */
        char addr[sizeof n->addr], error[sizeof n->last_error_text];
        text_printable(addr, sizeof addr, n->addr);
        text_printable(error, sizeof error, n->last_error_text[0] ? n->last_error_text : "-");
        char quorum[32];
        quorum_text(a, n, now, quorum, sizeof quorum);
        sb_printf(b, "%-40s %-9s %-10s %8llu  %-16s %s\n", addr, n->connected ? "yes" : "no",
                  n->subscribed ? "yes" : "no", (unsigned long long)(n->last_rtt_ns / 1000), quorum,
                  error);
    }
    sb_printf(b, "\n");
    for (size_t i = 0; i < NCOUNTERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s", counters[i].name);
        for (char *p = name; *p; p++)
            if (*p == '_')
                *p = ' ';
        sb_printf(b, "%s%s %llu", i ? ", " : "", name, counter_value(a, i));
    }
    sb_printf(b, "\n\n");
    leases_text(a, who, NULL, b);
}

static void metric(struct sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(struct sbuf *b, const char *name, const char *help, double v)
{
    metric(b, name, "gauge", help);
    sb_printf(b, "%s %.17g\n", name, v);
}

static void histogram(struct sbuf *b, const char *name, const char *help, const struct histo *h)
{
    metric(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < STATS_BUCKETS; i++) {
        cum += h->bucket[i];
        sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, stats_bucket_le[i],
                  (unsigned long long)cum);
    }
    sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    sb_printf(b, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

/* One gauge per node, labelled with its address. */
static void node_gauge(struct sbuf *b, const char *name, const char *help,
                       const struct backend_node *nodes, size_t nn,
                       double (*value)(const struct backend_node *, uint64_t now))
{
    uint64_t now = now_ns();
    metric(b, name, "gauge", help);
    for (size_t i = 0; i < nn; i++) {
        sb_printf(b, "%s{node=\"", name);
        sb_label(b, nodes[i].addr);
        sb_printf(b, "\"} %.17g\n", value(&nodes[i], now));
    }
}

static double node_up(const struct backend_node *n, uint64_t now)
{
    (void)now;
    return n->connected;
}

static double node_excluded(const struct backend_node *n, uint64_t now)
{
    return n->excluded_until > now;
}

static double node_rtt(const struct backend_node *n, uint64_t now)
{
    (void)now;
    return (double)n->last_rtt_ns / 1e9;
}

static void metrics(const struct status_source *a, struct sbuf *b)
{
    const struct agent_stats *s = a->stats;
    for (size_t i = 0; i < NCOUNTERS; i++) {
        char name[64];
        snprintf(name, sizeof name, "dlock_%s_total", counters[i].name);
        metric(b, name, "counter", counters[i].help);
        sb_printf(b, "%s %llu\n", name, counter_value(a, i));
    }
    gauge(b, "dlock_leases", "Leases held now.", (double)a->table->nleases);
    gauge(b, "dlock_connections", "Client connections now.", (double)a->server->nconns);
    gauge(b, "dlock_uptime_seconds", "Time since the agent started.",
          (double)(now_ns() - a->started) / 1e9);
    histogram(b, "dlock_acquire_seconds", "From sending an acquire to Redis to its grant.",
              &s->acquire);
    histogram(b, "dlock_renew_seconds", "Round trip of lease renewals.", &s->renew);
    struct backend_node nodes[CONFIG_MAX_NODES];
    size_t nn = nodes_of(a, nodes);
    node_gauge(b, "dlock_node_up", "1 when the command link to the Redis node is set up.", nodes,
               nn, node_up);
    node_gauge(b, "dlock_node_excluded", "1 while a restarted node counts toward no quorum.", nodes,
               nn, node_excluded);
    node_gauge(b, "dlock_node_rtt_seconds", "Round trip of the node's last answer.", nodes, nn,
               node_rtt);
}

/* The answer to one request line (without its newline). */
static void answer(const struct status_source *a, const struct asker *who, const char *req,
                   struct sbuf *b)
{
    char cmd[32] = "", arg[REQ_MAX] = "", extra[2] = "";
    int n = sscanf(req, "%31s %255s %1s", cmd, arg, extra);
    bool one = n == 1, upto2 = n == 1 || n == 2;
    if (one && strcmp(cmd, "status") == 0)
        status_text(a, who, b);
    else if (one && strcmp(cmd, "status-json") == 0)
        status_json(a, who, b);
    else if (upto2 && strcmp(cmd, "leases") == 0)
        leases_text(a, who, n == 2 ? arg : NULL, b);
    else if (upto2 && strcmp(cmd, "leases-json") == 0) {
        sb_printf(b, "{\"leases\":[");
        each_lease(a, who, n == 2 ? arg : NULL, lease_json, b);
        sb_printf(b, "]}\n");
    } else if (one && strcmp(cmd, "metrics") == 0)
        metrics(a, b);
    else
        sb_printf(b, "error: unknown request; try status, status-json, leases [PATTERN], "
                     "leases-json [PATTERN], metrics or holder[-json] NAME\n");
}

/* ---- connections ---- */

struct sconn {
    LIST_ENTRY(sconn) link;
    struct status *st;
    uint64_t serial; /* names it to a lookup's answer */
    int fd;
    bool http;
    ev_io io;
    ev_timer timer;
    char req[HTTP_REQ_MAX + 1];
    size_t reqlen;
    struct sbuf out;
    size_t sent;
    size_t drained; /* input read away after the answer */
    struct asker who;
};

static void sconn_close(struct sconn *c)
{
    struct status *st = c->st;
    ev_io_stop(st->loop, &c->io);
    ev_timer_stop(st->loop, &c->timer);
    close(c->fd);
    LIST_REMOVE(c, link);
    st->nconns[c->http]--;
    free(c->out.p);
    free(c);
}

/* Makes cb the connection's one I/O watcher. The deadline set at accept
 * runs on whatever the connection waits for, until it is closed. */
static void sconn_watch(struct sconn *c, void (*cb)(struct ev_loop *, ev_io *, int), int events)
{
    struct ev_loop *loop = c->st->loop;
    ev_io_stop(loop, &c->io);
    ev_io_init(&c->io, cb, c->fd, events);
    c->io.data = c;
    ev_io_start(loop, &c->io);
}

/* After the answer: unread input at close would reset the connection, and
 * the client might lose the answer (an over-long request), so it is read
 * away until the client closes. One bounded read per callback and
 * DRAIN_MAX in all: a peer that keeps writing holds up neither the loop
 * nor, for long, its slot. */
static void on_drain(struct ev_loop *loop, ev_io *w, int revents)
{
    struct sconn *c = w->data;
    static char sink[DRAIN_READ]; /* one loop, one reader at a time */
    ssize_t n = recv(c->fd, sink, sizeof sink, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n > 0 && (c->drained += (size_t)n) < DRAIN_MAX)
        return;
    sconn_close(c); /* the client closed, failed, or sent too much */
}

/* Sends what the socket takes; the answer's size bounds the loop. */
static void on_write(struct ev_loop *loop, ev_io *w, int revents)
{
    struct sconn *c = w->data;
    while (c->sent < c->out.len) {
        ssize_t n = send(c->fd, c->out.p + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            sconn_close(c); /* the client is gone: nothing to keep */
            return;
        }
        c->sent += (size_t)n;
    }
    shutdown(c->fd, SHUT_WR);
    sconn_watch(c, on_drain, EV_READ);
}

static void start_writing(struct sconn *c)
{
    sconn_watch(c, on_write, EV_WRITE);
}

/* An HTTP/1.0 answer with a body (closed after it). */
static void http_reply(struct sconn *c, const char *status, const char *type, const char *body,
                       size_t len)
{
    sb_printf(&c->out,
              "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Connection: close\r\n\r\n",
              status, type, len);
    sb_printf(&c->out, "%.*s", (int)len, body);
}

static void http_text(struct sconn *c, const char *status, const char *text)
{
    http_reply(c, status, "text/plain", text, strlen(text));
}

/* GET (or HEAD) /metrics; nothing else. */
static void http_answer(struct sconn *c)
{
    char method[16] = "", target[256] = "";
    sscanf(c->req, "%15s %255s", method, target);
    bool get = strcmp(method, "GET") == 0, head = strcmp(method, "HEAD") == 0;
    if (!get && !head) {
        http_text(c, "405 Method Not Allowed", "only GET /metrics\n");
        return;
    }
    if (strcmp(target, "/metrics") != 0 && strncmp(target, "/metrics?", 9) != 0) {
        http_text(c, "404 Not Found", "try /metrics\n");
        return;
    }
    struct sbuf body = {0};
    metrics(&c->st->src, &body);
    if (body.oom) {
        http_text(c, "500 Internal Server Error", "out of memory\n");
    } else {
        http_reply(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body.p, body.len);
        if (head) /* the same headers, no body */
            c->out.len -= body.len;
    }
    free(body.p);
}

/* The one status server: lookup answers find their query by serial. */
static struct status *the_status;

static struct sconn *sconn_by_serial(uint64_t serial)
{
    struct sconn *c;
    LIST_FOREACH(c, &the_status->conns, link)
    if (c->serial == serial)
        return c;
    return NULL;
}

/* Who Redis says holds a name: the key's value and, when the holder record
 * beside it starts with that token, dlock's record of the holder. Values
 * come from anyone who can write to Redis. */
struct holder_rec {
    bool ours; /* a dlock record of this token */
    char host[64], comm[32];
    int pid;
    unsigned uid;
};

static void holder_rec(const struct backend_holder *h, struct holder_rec *r)
{
    memset(r, 0, sizeof *r);
    size_t vlen = strlen(h->value);
    r->ours =
        vlen && strncmp(h->record, h->value, vlen) == 0 && h->record[vlen] == ' ' &&
        sscanf(h->record + vlen + 1, "%63s %d %u %31s", r->host, &r->pid, &r->uid, r->comm) == 4;
}

static void holder_json(struct sbuf *b, const char *name, const struct backend_holder *h)
{
    struct holder_rec r;
    holder_rec(h, &r);
    bool held = h->value[0] != '\0';
    sb_printf(b, "{\"name\":");
    sb_json_str(b, name);
    sb_printf(b, ",\"held\":%s,\"dlock\":%s,\"value\":", held ? "true" : "false",
              r.ours ? "true" : "false");
    sb_json_str(b, h->value);
    sb_printf(b, ",\"host\":");
    sb_json_str(b, r.host);
    sb_printf(b, ",\"pid\":%d,\"uid\":%u,\"comm\":", r.pid, r.uid);
    sb_json_str(b, r.comm);
    sb_printf(b, ",\"pttl_ms\":%lld,\"nodes_holding\":%u,\"nodes\":%u}\n", held ? h->pttl : 0,
              h->nodes_holding, h->nodes);
}

/* One line, without control characters, which a terminal would obey. */
static void holder_text(struct sbuf *b, const char *name, const struct backend_holder *h)
{
    struct holder_rec r;
    holder_rec(h, &r);
    char value[BACKEND_RECORD_MAX], host[sizeof r.host], comm[sizeof r.comm];
    text_printable(value, sizeof value, h->value);
    text_printable(host, sizeof host, r.host);
    text_printable(comm, sizeof comm, r.comm);
    if (!h->value[0]) {
        sb_printf(b, "%s: free\n", name);
        return;
    }
    if (r.ours)
        sb_printf(b, "%s: held by pid %d (%s), uid %u, on host %s; token %s", name, r.pid, comm,
                  r.uid, host, value);
    else
        sb_printf(b, "%s: held by a client outside dlock (value '%s')", name, value);
    if (h->pttl >= 0)
        sb_printf(b, "; %lld ms left", h->pttl);
    else
        sb_printf(b, "; no expiry");
    if (h->nodes > 1)
        sb_printf(b, "; on %u of %u nodes", h->nodes_holding, h->nodes);
    sb_printf(b, "\n");
}

/* The answer to "holder NAME": what Redis holds for the name. */
static void on_holder(void *arg, int err, const struct backend_holder *h)
{
    struct sconn *c = the_status ? sconn_by_serial((uint64_t)(uintptr_t)arg) : NULL;
    if (!c)
        return; /* the query went away meanwhile */
    struct sbuf *b = &c->out;
    bool json = strncmp(c->req, "holder-json", 11) == 0;
    const char *name = c->req + (json ? 12 : 7);
    char shown[REQ_MAX]; /* the name in text */
    text_printable(shown, sizeof shown, name);
    if (err) {
        sb_printf(b, "error: cannot read %s from Redis: %s\n", shown, dlock_strerror(err));
    } else if (h->undetermined && json) {
        sb_printf(b, "{\"name\":");
        sb_json_str(b, name);
        sb_printf(b, ",\"undetermined\":true,\"nodes\":%u}\n", h->nodes);
    } else if (h->undetermined) {
        sb_printf(b, "%s: undetermined: no value is on a majority of the %u nodes\n", shown,
                  h->nodes);
    } else if (json) {
        holder_json(b, name, h);
    } else {
        holder_text(b, shown, h);
    }
    start_writing(c);
}

/* "holder NAME" / "holder-json NAME": asks Redis; the answer comes later.
 * Returns false when it was answered at once (with an error). */
static bool holder_query(struct sconn *c)
{
    const struct status_source *a = &c->st->src;
    char cmd[16], name[REQ_MAX], extra[2];
    if (sscanf(c->req, "%15s %255s %1s", cmd, name, extra) != 2) {
        sb_printf(&c->out, "error: usage: holder NAME\n");
        return false;
    }
    if (!c->who.all) {
        sb_printf(&c->out, "error: the policy (see_all) does not let you look up holders\n");
        return false;
    }
    int rc = lock_name_check(name, strlen(name), a->cfg->max_name_len);
    if (rc == 0)
        rc = a->backend->ops->lookup(a->backend, name, strlen(name), on_holder,
                                     (void *)(uintptr_t)c->serial);
    if (rc != 0) {
        char shown[REQ_MAX];
        text_printable(shown, sizeof shown, name);
        sb_printf(&c->out, "error: %s: %s\n", shown, dlock_strerror(rc));
        return false;
    }
    /* The request line now reads "holder[-json] NAME" for the answer. */
    snprintf(c->req, sizeof c->req, "%s %s", cmd, name);
    ev_io_stop(c->st->loop, &c->io);
    return true;
}

static void respond(struct sconn *c)
{
    c->req[c->reqlen] = '\0';
    if (!c->http &&
        (strncmp(c->req, "holder ", 7) == 0 || strncmp(c->req, "holder-json ", 12) == 0)) {
        c->req[strcspn(c->req, "\r\n")] = '\0';
        if (holder_query(c))
            return;
    } else if (c->http) {
        http_answer(c);
    } else {
        c->req[strcspn(c->req, "\r\n")] = '\0';
        answer(&c->st->src, &c->who, c->req, &c->out);
    }
    if (c->out.oom) {
        free(c->out.p);
        c->out = (struct sbuf){0};
        sb_printf(&c->out, "error: out of memory\n");
    }
    start_writing(c);
}

/* Whether the request is complete: a line, or HTTP headers. */
static bool request_done(const struct sconn *c)
{
    if (!c->http)
        return memchr(c->req, '\n', c->reqlen) != NULL;
    return memmem(c->req, c->reqlen, "\r\n\r\n", 4) || memmem(c->req, c->reqlen, "\n\n", 2);
}

static void on_read(struct ev_loop *loop, ev_io *w, int revents)
{
    struct sconn *c = w->data;
    size_t max = c->http ? HTTP_REQ_MAX : REQ_MAX;
    ssize_t n = recv(c->fd, c->req + c->reqlen, max - c->reqlen, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        sconn_close(c); /* gone before asking */
        return;
    }
    c->reqlen += (size_t)n;
    if (request_done(c)) {
        respond(c);
    } else if (c->reqlen == max) {
        if (c->http)
            http_text(c, "431 Request Header Fields Too Large", "too large\n");
        else
            sb_printf(&c->out, "error: request longer than %d bytes\n", REQ_MAX);
        start_writing(c);
    }
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    sconn_close(w->data);
}

/* A new query, from the status socket or (http) the HTTP listener. */
static void sconn_new(struct status *st, int fd, bool http)
{
    struct sconn *c = st->nconns[http] < STATUS_CONNS ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        close(fd);
        return;
    }
    c->st = st;
    c->serial = ++st->serial;
    c->fd = fd;
    c->http = http;
    struct ucred cred;
    socklen_t len = sizeof cred;
    uint32_t gids[PEER_GROUPS_MAX];
    if (!http && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        size_t ngids = peer_groups(fd, cred.gid, gids, PEER_GROUPS_MAX);
        c->who.uid = cred.uid;
        c->who.all = policy_sees_all(&st->src.cfg->policy, cred.uid, gids, ngids);
    }
    ev_io_init(&c->io, on_read, fd, EV_READ);
    c->io.data = c;
    ev_io_start(st->loop, &c->io);
    ev_timer_init(&c->timer, on_deadline, deadline_s[http], 0.0);
    c->timer.data = c;
    ev_timer_start(st->loop, &c->timer);
    LIST_INSERT_HEAD(&st->conns, c, link);
    st->nconns[http]++;
}

static void on_status_conn(void *arg, int fd)
{
    sconn_new(arg, fd, false);
}

static void on_http_conn(void *arg, int fd)
{
    sconn_new(arg, fd, true);
}

int status_open(struct status *st, struct ev_loop *loop, const struct status_source *a,
                const char *path, unsigned mode)
{
    memset(st, 0, sizeof *st);
    st->loop = loop;
    st->src = *a;
    st->lfd = -1;
    st->hfd = -1;
    LIST_INIT(&st->conns);
    the_status = st;
    if (!path[0])
        return 0;
    snprintf(st->path, sizeof st->path, "%s", path);
    const char *group = a->cfg->status_socket_group;
    st->lfd = unix_listen(path, mode, group, &st->inherited);
    if (st->lfd < 0)
        return -1;
    listener_start(&st->lst, loop, st->lfd, "status socket", on_status_conn, st);
    log_info("status socket on %s (mode %04o%s%s)", path, mode, group[0] ? ", group " : "", group);
    return 0;
}

/* A TCP listener at "host:port" for GET /metrics. */
static int http_listen(const char *addr)
{
    struct redis_addr a;
    if (config_parse_addr(addr, &a) != 0 || a.path[0]) {
        log_error("metrics_listen: not host:port: %s", addr);
        return -1;
    }
    char port[8];
    snprintf(port, sizeof port, "%d", a.port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai;
    int rc = getaddrinfo(a.host, port, &hints, &ai);
    if (rc != 0) {
        log_error("metrics_listen %s: %s", addr, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        log_error("metrics_listen %s: %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

int status_open_http(struct status *st, const char *addr)
{
    st->hfd = -1;
    if (!addr[0])
        return 0;
    st->hfd = http_listen(addr);
    if (st->hfd < 0)
        return -1;
    listener_start(&st->hlst, st->loop, st->hfd, "metrics endpoint", on_http_conn, st);
    log_info("metrics over HTTP on %s/metrics", addr);
    return 0;
}

void status_close(struct status *st)
{
    if (st->hfd >= 0) {
        listener_stop(&st->hlst);
        close(st->hfd);
        st->hfd = -1;
    }
    if (st->lfd >= 0) {
        listener_stop(&st->lst);
        close(st->lfd);
        if (!st->inherited)
            unlink(st->path);
        st->lfd = -1;
    }
    while (!LIST_EMPTY(&st->conns))
        sconn_close(LIST_FIRST(&st->conns));
}
