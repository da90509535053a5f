/* SPDX-License-Identifier: BSD-3-Clause */
/* status.c -- the read-only status socket: one request line in, the answer
 * out, then the agent closes. Requests (docs/status.md):
 *
 *   status | status-json | leases [PATTERN] | leases-json [PATTERN] | metrics
 *   | health | health-json | holder[-json] NAME | reload | release-force NAME
 *
 * and, when configured, the same metrics over HTTP (GET /metrics) for
 * Prometheus to scrape, with GET /healthz (the agent's loop answers) and
 * GET /readyz (it can take locks now: 200, else 503) for probes. An answer that lists leases is
 * rendered a part at a time as the peer reads it (status_render.c): one part per writable event,
 * each a bounded slice of the lock table, and only once what the peer has
 * not read yet is below a low-water mark. So no loop turn does more than a
 * slice per peer, and a peer that asks and never reads holds one buffer of
 * at most about STATUS_HIGH_WATER bytes until its deadline. The metrics do
 * not grow with the leases and are rendered at once. */
#include "status.h"

#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "dlock.h"
#include "log.h"
#include "table.h"
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
/* How long a "reload" waits for its outcome (a slow name service may hold up
 * the reading); then it is answered that the outcome is not known yet. */
#define RELOAD_DEADLINE_S 60

/* A listing goes out a part at a time: the next part is rendered when less
 * than STATUS_LOW_WATER bytes of the last wait to be sent, and stops once
 * STATUS_HIGH_WATER bytes wait. A peer's part walks its share of
 * STATUS_TURN_LOCKS, shared among the listings under way: each is one part
 * per loop turn at most (one writable event), so all of them together walk
 * at most STATUS_TURN_LOCKS locks (or table buckets) in a turn, however many
 * peers ask. The kernel holds at most about STATUS_SNDBUF more of each
 * answer (Linux doubles it). */
#define STATUS_LOW_WATER  (16 * 1024)
#define STATUS_HIGH_WATER (64 * 1024)
#define STATUS_TURN_LOCKS 512
#define STATUS_SNDBUF     (32 * 1024)

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
    size_t sent;    /* of out */
    bool sent_any;  /* some of the answer went out */
    bool listing;   /* more parts of ans are to come */
    size_t drained; /* input read away after the answer */
    struct status_answer ans;
    struct asker who;
    bool peer; /* who.uid is the peer's (SO_PEERCRED) */
    /* The peer's pid and groups (SO_PEERCRED), for release-force. */
    int pid;
    size_t ngids;
    uint32_t gids[PEER_GROUPS_MAX];
    bool reloading; /* waits for status_reload_done() */
};

/* A listing is done (whole, cut or failed): it no longer takes a share. */
static void listing_end(struct sconn *c)
{
    if (c->listing) {
        c->listing = false;
        c->st->listings--;
    }
}

static void sconn_close(struct sconn *c)
{
    struct status *st = c->st;
    listing_end(c);
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

/* The next part of a listing, when little of the last is left to send: the
 * unsent rest moves to the front of the buffer, and the part is rendered
 * after it. Out of memory before anything went out, the answer is an error
 * line; after, the connection is closed (false), which cuts the answer. */
static bool render_more(struct sconn *c)
{
    struct sbuf *b = &c->out;
    if (!c->listing || b->len - c->sent >= STATUS_LOW_WATER)
        return true;
    if (c->sent) {
        memmove(b->p, b->p + c->sent, b->len - c->sent);
        b->len -= c->sent;
        c->sent = 0;
    }
    struct status *st = c->st;
    size_t share = STATUS_TURN_LOCKS / st->listings;
    if (status_answer_next(&st->src, &c->ans, share, STATUS_HIGH_WATER, b))
        listing_end(c);
    if (!b->oom)
        return true;
    if (c->sent_any)
        return false;
    free(b->p);
    *b = (struct sbuf){0};
    listing_end(c);
    sb_printf(b, "error: out of memory\n");
    return true;
}

/* Sends what the socket takes, after rendering at most one more part of a
 * listing. While the listing goes on with the socket writable, the loop
 * comes back to it in the next turn, after the other events. */
static void on_write(struct ev_loop *loop, ev_io *w, int revents)
{
    struct sconn *c = w->data;
    if (!render_more(c)) {
        sconn_close(c);
        return;
    }
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
        c->sent_any = true;
    }
    if (c->listing)
        return;
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

/* ---- the process's own metrics, from /proc ---- */

/* Reads the whole small file path into buf (NUL-terminated); its length,
 * or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* The boot time (btime of /proc/stat), in seconds since the epoch; 0 if
 * unknown. Read line by line: the "intr" line before it can be long. */
static unsigned long long boot_time(void)
{
    static unsigned long long btime; /* does not change */
    if (btime)
        return btime;
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0)
        if (strncmp(line, "btime ", 6) == 0) {
            btime = strtoull(line + 6, NULL, 10);
            break;
        }
    free(line);
    fclose(f);
    return btime;
}

/* Open descriptors: the entries of /proc/self/fd but the one reading it. */
static uint64_t open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    uint64_t n = 0;
    const struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n ? n - 1 : 0;
}

static void process_read(struct process_stats *p)
{
    memset(p, 0, sizeof *p);
    char buf[1024];
    if (read_small("/proc/self/stat", buf, sizeof buf) < 0)
        return;
    /* After "PID (COMM) ", which may hold blanks and parentheses: field 3 on. */
    const char *rest = strrchr(buf, ')');
    unsigned long long utime, stime, start, vsize, rss;
    if (!rest || sscanf(rest + 2,
                        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                        "%*d %*d %llu %llu %llu",
                        &utime, &stime, &start, &vsize, &rss) != 5)
        return;
    double hz = (double)sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    if (hz <= 0 || page <= 0)
        return;
    p->cpu_seconds = (double)(utime + stime) / hz;
    p->start_time = (double)boot_time() + (double)start / hz;
    p->vsize = vsize;
    p->rss = rss * (uint64_t)page;
    p->open_fds = open_fds();
    struct rlimit rl;
    p->max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 0;
    p->ok = true;
}

/* The metrics answer, the process's own included. The per-name gauges name
 * locks: on the status socket only for peers that may see every lease
 * ([policy] see_all); over HTTP, where nobody is known, for whoever reaches
 * the port the operator opened. */
/* Between two scrapes less than this apart, the per-name gauges are not
 * rendered again: their walk covers the whole lock table in one loop turn,
 * and scrapers, however many and however often, get one walk a second. */
#define PER_NAME_EVERY_S 1.0

static void metrics_answer(struct sconn *c, struct sbuf *b)
{
    struct status *st = c->st;
    struct process_stats proc;
    process_read(&proc);
    render_metrics(&st->src, &proc, false, b);
    if (!c->http && !c->who.all)
        return;
    double now = ev_now(st->loop);
    if (st->names.oom || st->names_at == 0 || now - st->names_at >= PER_NAME_EVERY_S) {
        st->names.len = 0;
        st->names.oom = false;
        render_per_name(&st->src, &st->names);
        st->names_at = now;
    }
    if (st->names.oom)
        b->oom = true;
    else if (st->names.len)
        sb_printf(b, "%.*s", (int)st->names.len, st->names.p);
}

/* ---- HTTP ---- */

/* Whether the request target is path, with or without a query string; the
 * query string (without '?') in *query ("" for none). */
static bool target_is(const char *target, const char *path, const char **query)
{
    size_t n = strlen(path);
    if (strncmp(target, path, n) != 0 || (target[n] && target[n] != '?'))
        return false;
    *query = target[n] ? target + n + 1 : "";
    return true;
}

/* Whether the query string holds the parameter word (alone or as word=...). */
static bool query_has(const char *query, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = query; *p;) {
        size_t len = strcspn(p, "&");
        if (len >= n && strncmp(p, word, n) == 0 && (len == n || p[n] == '='))
            return true;
        p += len + (p[len] == '&');
    }
    return false;
}

/* GET (or HEAD) /metrics, /healthz or /readyz; nothing else. /readyz
 * answers 503 when the agent cannot take locks; ?verbose adds a line per
 * node, ?json (or ?format=json) gives JSON. */
static void http_answer(struct sconn *c)
{
    char method[16] = "", target[256] = "";
    sscanf(c->req, "%15s %255s", method, target);
    bool get = strcmp(method, "GET") == 0, head = strcmp(method, "HEAD") == 0;
    const char *query;
    if (!get && !head) {
        http_text(c, "405 Method Not Allowed", "only GET /metrics, /healthz and /readyz\n");
        return;
    }
    struct sbuf body = {0};
    const char *status = "200 OK", *type = "text/plain; charset=utf-8";
    if (target_is(target, "/metrics", &query)) {
        metrics_answer(c, &body);
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (target_is(target, "/healthz", &query)) {
        sb_printf(&body, "ok\n");
    } else if (target_is(target, "/readyz", &query)) {
        bool json = query_has(query, "json") || strstr(query, "format=json");
        enum health_form form = json                          ? HEALTH_JSON
                                : query_has(query, "verbose") ? HEALTH_VERBOSE
                                                              : HEALTH_LINE;
        if (!render_health(&c->st->src, form, &body))
            status = "503 Service Unavailable";
        if (json)
            type = "application/json";
    } else {
        http_text(c, "404 Not Found", "try /metrics, /healthz or /readyz\n");
        return;
    }
    if (body.oom) {
        http_text(c, "500 Internal Server Error", "out of memory\n");
    } else {
        http_reply(c, status, type, body.p, body.len);
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

/* The answer to "holder NAME": what Redis holds for the name. */
static void on_holder(void *arg, int err, const struct backend_holder *h)
{
    struct sconn *c = the_status ? sconn_by_serial((uint64_t)(uintptr_t)arg) : NULL;
    if (!c)
        return; /* the query went away meanwhile */
    bool json = strncmp(c->req, "holder-json", 11) == 0;
    render_holder(c->req + (json ? 12 : 7), err, h, json, &c->out);
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
        rc = a->lookup(a->arg, name, strlen(name), on_holder, (void *)(uintptr_t)c->serial);
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

/* ---- release-force NAME: an operator's forced release ---- */

#define FORCE_REQ "release-force "

/* The answer to "release-force NAME": what the key held before. */
static void on_forced(void *arg, int err, const struct backend_holder *h)
{
    struct sconn *c = the_status ? sconn_by_serial((uint64_t)(uintptr_t)arg) : NULL;
    if (!c)
        return; /* the query went away meanwhile (the release went on) */
    const char *name = c->req + strlen(FORCE_REQ);
    char shown[REQ_MAX];
    text_printable(shown, sizeof shown, name);
    if (err) {
        sb_printf(&c->out, "error: %s: %s\n", shown, dlock_strerror(err));
    } else if (backend_holder_free(h)) {
        sb_printf(&c->out, "not held: %s\n", shown);
    } else {
        sb_printf(&c->out, "released ");
        render_holder(name, 0, h, false, &c->out);
    }
    start_writing(c);
}

/* "release-force NAME": for a peer that a force line of the policy lets;
 * the answer comes when the store answered. Returns false when it was
 * answered at once (with an error). */
static bool force_query(struct sconn *c)
{
    const struct status_source *a = &c->st->src;
    char cmd[16], name[REQ_MAX], extra[2], shown[REQ_MAX];
    if (sscanf(c->req, "%15s %255s %1s", cmd, name, extra) != 2) {
        sb_printf(&c->out, "error: usage: release-force NAME\n");
        return false;
    }
    text_printable(shown, sizeof shown, name);
    int rc = lock_name_check(name, strlen(name), a->cfg->max_name_len);
    if (rc != 0) {
        sb_printf(&c->out, "error: %s: %s\n", shown, dlock_strerror(rc));
        return false;
    }
    if (!c->peer || !policy_may_force(&a->cfg->policy, c->who.uid, c->gids, c->ngids, name)) {
        log_kv(LOG_INFO,
               LOG_FIELDS(LOG_F_LOCK(name, strlen(name)), LOG_F_PID(c->pid), LOG_F_UID(c->who.uid)),
               "forced release of %s refused to uid %u (pid %d): no [policy] force line", shown,
               (unsigned)c->who.uid, c->pid);
        sb_printf(&c->out,
                  "error: release --force: permission denied: no [policy] force line lets uid %u "
                  "force the release of %s (force = WHO PATTERN...)\n",
                  (unsigned)c->who.uid, shown);
        return false;
    }
    rc = a->force ? a->force(a->arg, name, strlen(name), c->who.uid, c->pid, on_forced,
                             (void *)(uintptr_t)c->serial)
                  : DLOCK_EUNAVAIL;
    if (rc != 0) {
        sb_printf(&c->out, "error: %s: %s\n", shown, dlock_strerror(rc));
        return false;
    }
    snprintf(c->req, sizeof c->req, FORCE_REQ "%s", name);
    ev_io_stop(c->st->loop, &c->io);
    return true;
}

/* The answer to one request line (without its newline): a listing, whose
 * parts on_write() renders, or a whole answer in out. */
static void answer(struct sconn *c, const char *req)
{
    char cmd[32] = "", arg[REQ_MAX] = "", extra[2] = "";
    int n = sscanf(req, "%31s %255s %1s", cmd, arg, extra);
    bool one = n == 1, upto2 = n == 1 || n == 2;
    static const struct {
        const char *cmd;
        enum status_query query;
        bool pattern;
    } listings[] = {{"status", SQ_STATUS, false},
                    {"status-json", SQ_STATUS_JSON, false},
                    {"leases", SQ_LEASES, true},
                    {"leases-json", SQ_LEASES_JSON, true}};
    for (size_t i = 0; i < sizeof listings / sizeof listings[0]; i++)
        if (strcmp(cmd, listings[i].cmd) == 0 && (listings[i].pattern ? upto2 : one)) {
            status_answer_init(&c->ans, listings[i].query, &c->who, n == 2 ? arg : NULL);
            c->listing = true;
            c->st->listings++;
            return;
        }
    if (one && strcmp(cmd, "metrics") == 0)
        metrics_answer(c, &c->out);
    else if (one && strcmp(cmd, "health") == 0)
        render_health(&c->st->src, HEALTH_VERBOSE, &c->out);
    else if (one && strcmp(cmd, "health-json") == 0)
        render_health(&c->st->src, HEALTH_JSON, &c->out);
    else
        sb_printf(&c->out, "error: unknown request; try status, status-json, leases [PATTERN], "
                           "leases-json [PATTERN], metrics, health, health-json, holder[-json] "
                           "NAME, reload or release-force NAME\n");
}

/* Gives the query `seconds` from now to go on. */
static void sconn_deadline(struct sconn *c, double seconds)
{
    ev_timer_stop(c->st->loop, &c->timer);
    ev_timer_set(&c->timer, seconds, 0.0);
    ev_timer_start(c->st->loop, &c->timer);
}

/* "reload": the agent reads its configuration again; the answer comes when
 * that is done (status_reload_done()). Only the agent's own uid and root may
 * ask. Returns false when it was answered at once (with an error). */
static bool reload_query(struct sconn *c)
{
    struct status *st = c->st;
    unsigned self = (unsigned)geteuid();
    if (!c->peer || (c->who.uid != 0 && c->who.uid != self)) {
        sb_printf(&c->out,
                  "error: reload: permission denied: only root and the agent's user (uid %u) may "
                  "ask for a reload\n",
                  self);
        return false;
    }
    if (!st->reload) {
        sb_printf(&c->out, "error: reload: not available\n");
        return false;
    }
    c->reloading = true;
    ev_io_stop(st->loop, &c->io);
    sconn_deadline(c, RELOAD_DEADLINE_S);
    st->reload(st->reload_arg); /* may answer at once */
    return true;
}

void status_on_reload(struct status *st, void (*fn)(void *arg), void *arg)
{
    st->reload = fn;
    st->reload_arg = arg;
}

/* A query that waited for a reload gets its answer, and the usual time to
 * read it. */
static void reload_answered(struct sconn *c, const char *answer)
{
    c->reloading = false;
    sb_printf(&c->out, "%s", answer);
    if (c->out.oom) {
        free(c->out.p);
        c->out = (struct sbuf){0};
        sb_printf(&c->out, "error: out of memory\n");
    }
    sconn_deadline(c, deadline_s[0]);
    start_writing(c);
}

void status_reload_done(struct status *st, const char *answer)
{
    struct sconn *c;
    LIST_FOREACH(c, &st->conns, link)
    if (c->reloading)
        reload_answered(c, answer);
}

void status_reload_done_now(struct status *st, const char *answer)
{
    struct sconn *c;
    LIST_FOREACH(c, &st->conns, link)
    {
        if (!c->reloading)
            continue;
        reload_answered(c, answer);
        while (c->sent < c->out.len) {
            ssize_t n =
                send(c->fd, c->out.p + c->sent, c->out.len - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            c->sent += (size_t)n;
        }
        shutdown(c->fd, SHUT_WR);
    }
}

static void respond(struct sconn *c)
{
    c->req[c->reqlen] = '\0';
    if (c->http) {
        http_answer(c);
    } else {
        c->req[strcspn(c->req, "\r\n")] = '\0';
        if (strncmp(c->req, "holder ", 7) == 0 || strncmp(c->req, "holder-json ", 12) == 0) {
            if (holder_query(c))
                return;
        } else if (strcmp(c->req, "reload") == 0) {
            if (reload_query(c))
                return;
        } else if (strncmp(c->req, FORCE_REQ, strlen(FORCE_REQ)) == 0) {
            if (force_query(c))
                return;
        } else {
            answer(c, c->req);
        }
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
    struct sconn *c = w->data;
    if (c->reloading) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "error: reload: no outcome after %d s (the configuration is still being read); "
                 "the log will tell\n",
                 RELOAD_DEADLINE_S);
        reload_answered(c, msg);
        return;
    }
    sconn_close(c);
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
    /* Little of an answer waits in the kernel either. */
    int sndbuf = STATUS_SNDBUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    struct ucred cred;
    socklen_t len = sizeof cred;
    uint32_t gids[PEER_GROUPS_MAX];
    if (!http && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        size_t ngids = peer_groups(fd, cred.gid, gids, PEER_GROUPS_MAX);
        c->who.uid = cred.uid;
        c->who.all = policy_sees_all(&st->src.cfg->policy, cred.uid, gids, ngids);
        c->peer = true;
        c->pid = (int)cred.pid;
        c->ngids = ngids;
        memcpy(c->gids, gids, ngids * sizeof gids[0]);
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

/* A TCP listener at "host:port" for GET /metrics; -1 with why (and errno)
 * when there is none to be had. */
static int http_listen(const char *addr, char *why, size_t len)
{
    struct redis_addr a;
    if (config_parse_addr(addr, &a) != 0 || a.path[0]) {
        snprintf(why, len, "metrics_listen: not host:port: %s", addr);
        errno = EINVAL;
        return -1;
    }
    char port[8];
    snprintf(port, sizeof port, "%d", a.port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai;
    int rc = getaddrinfo(a.host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(why, len, "metrics_listen %s: %s", addr, gai_strerror(rc));
        errno = EINVAL;
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1, e = 0;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        e = errno;
        snprintf(why, len, "metrics_listen %s: %s", addr, strerror(e));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    errno = e;
    return fd;
}

/* Serves GET /metrics on the listener fd, bound to addr. */
static void http_serve(struct status *st, int fd, const char *addr)
{
    st->hfd = fd;
    snprintf(st->haddr, sizeof st->haddr, "%s", addr);
    listener_start(&st->hlst, st->loop, fd, "metrics endpoint", on_http_conn, st);
    log_info("metrics over HTTP on %s/metrics (and /healthz, /readyz)", addr);
}

/* Stops listening for HTTP (the queries under way go on). */
static void http_stop(struct status *st)
{
    if (st->hfd < 0)
        return;
    listener_stop(&st->hlst);
    close(st->hfd);
    st->hfd = -1;
    st->haddr[0] = '\0';
}

int status_open_http(struct status *st, const char *addr)
{
    char why[400];
    st->hfd = -1;
    if (!addr[0])
        return 0;
    int fd = http_listen(addr, why, sizeof why);
    if (fd < 0) {
        log_error("%s", why);
        return -1;
    }
    http_serve(st, fd, addr);
    return 0;
}

/* Whether two "host:port" addresses name the same port. */
static bool same_port(const char *a, const char *b)
{
    struct redis_addr x, y;
    return config_parse_addr(a, &x) == 0 && config_parse_addr(b, &y) == 0 && x.port == y.port;
}

int status_move_http(struct status *st, const char *addr, char *why, size_t len)
{
    char old[sizeof st->haddr];
    snprintf(old, sizeof old, "%s", st->haddr);
    int fd = -1;
    if (addr[0]) {
        fd = http_listen(addr, why, len);
        if (fd < 0 && errno == EADDRINUSE && same_port(addr, old)) {
            /* The old listener may hold the port (under another address of
             * the host): it makes way, and comes back if the new one fails
             * all the same. */
            http_stop(st);
            fd = http_listen(addr, why, len);
            char again[400];
            int back = fd < 0 ? http_listen(old, again, sizeof again) : -1;
            if (back >= 0) {
                http_serve(st, back, old);
            } else if (fd < 0) {
                size_t n = strlen(why);
                snprintf(why + n, len - n, "; the old listener is gone too: %s", again);
            }
        }
        if (fd < 0)
            return -1;
    }
    http_stop(st);
    if (old[0])
        log_info("no more metrics over HTTP on %s", old);
    if (fd >= 0)
        http_serve(st, fd, addr);
    return 0;
}

void status_close(struct status *st)
{
    http_stop(st);
    if (st->lfd >= 0) {
        listener_stop(&st->lst);
        close(st->lfd);
        if (!st->inherited)
            unlink(st->path);
        st->lfd = -1;
    }
    while (!LIST_EMPTY(&st->conns))
        sconn_close(LIST_FIRST(&st->conns));
    free(st->names.p);
    st->names = (struct sbuf){0};
}
