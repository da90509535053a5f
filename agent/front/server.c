/* SPDX-License-Identifier: BSD-3-Clause */
/* server.c -- listening socket and client connections of dlockd: accept with
 * peer credentials, strict framing, handshake, and batched output. */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "dlock.h"
#include "log.h"
#include "text.h"
#include "util.h"

#define READ_CHUNK     16384
#define OUT_HIGH_WATER (1u << 20) /* stop reading a client that does not read */

static void conn_close(struct conn *c);
static void conn_watchers(struct conn *c);

/* ---- output ---- */

static void mark_dirty(struct conn *c)
{
    if (c->dirty || c->detached)
        return; /* a detached connection has nothing to write to */
    c->dirty = true;
    c->dirty_next = c->srv->dirty;
    c->srv->dirty = c;
}

/* Whether c may queue more replies: its own output is under the high-water
 * mark and its uid's, over all its connections, under the per-uid cap. A
 * client that does not read its replies stops being read (but for its
 * releases: conn_takes_release()); one uid's many connections together pin
 * no more output memory than the cap. */
static bool conn_has_room(const struct conn *c)
{
    return c->out.len < OUT_HIGH_WATER && c->uu->out_bytes < c->srv->cfg->policy.max_output_per_uid;
}

/* Brings the uid's count of output bytes up to date with c's buffer. When
 * the uid drops back under its cap, its connections that stopped reading
 * get a turn to go on (in the next flush). */
static void conn_account(struct conn *c)
{
    struct uid_use *u = c->uu;
    size_t cap = c->srv->cfg->policy.max_output_per_uid;
    bool was_over = u->out_bytes >= cap;
    u->out_bytes = u->out_bytes - c->out_counted + c->out.len;
    c->out_counted = c->out.len;
    if (was_over && u->out_bytes < cap) {
        struct conn *o;
        LIST_FOREACH(o, &u->conns, ulink)
        if (o != c && !o->reading && !o->closing)
            mark_dirty(o);
    }
}

/* Whether c, out of room, still takes a RELEASE at the head of its input.
 * A release must not wait for the replies its uid leaves unread: its
 * caller (dlock_lease_release()) has moved on, and the lease would stay
 * renewed for as long as they are. Its answer is one small OK per lease
 * given up, so this is bounded by the connection's leases; a RELEASE that
 * gives up none (an unknown id, answered with an ERROR) stalls the rest
 * until there is room again. */
static bool conn_takes_release(const struct conn *c)
{
    return c->hello && !c->release_stalled;
}

/* Whether c's socket should be read now: with room, always; out of room,
 * only while the next frame may be a RELEASE it takes (an incomplete
 * header, or a RELEASE whose body is still coming). Whatever else comes
 * next waits in the kernel, as before: the input buffer never holds more
 * than a frame and a chunk. */
static bool conn_wants_input(struct conn *c)
{
    if (c->closing || c->fd < 0)
        return false; /* a detached connection has no socket to read */
    if (conn_has_room(c)) {
        c->release_stalled = false;
        return true;
    }
    struct wire_hdr h;
    return conn_takes_release(c) &&
           (wire_hdr_decode(c->in.data, c->in.len, WIRE_MAX_BODY, &h) <= 0 ||
            h.type == WIRE_T_RELEASE);
}

static void conn_update_reading(struct conn *c)
{
    bool want = conn_wants_input(c);
    if (want && !c->reading)
        ev_io_start(c->srv->loop, &c->rio);
    else if (!want && c->reading)
        ev_io_stop(c->srv->loop, &c->rio);
    c->reading = want;
}

/* Writes what the socket takes; returns -1 when the peer is gone. */
static int conn_flush(struct conn *c)
{
    while (c->out.len) {
        ssize_t n = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return -1;
        wire_buf_consume(&c->out, (size_t)n);
    }
    conn_account(c);
    if (c->out.len)
        ev_io_start(c->srv->loop, &c->wio);
    else
        ev_io_stop(c->srv->loop, &c->wio);
    conn_update_reading(c);
    return 0;
}

static int process_input(struct conn *c);

/* Writes c's output; once a client that stopped reading has drained its
 * replies, handles the requests that were left waiting in its input. */
static void conn_write(struct conn *c)
{
    if (c->closing || conn_flush(c) != 0) {
        conn_close(c);
        return;
    }
    if (conn_has_room(c) && c->in.len >= WIRE_HDR_LEN && process_input(c) == 0)
        conn_update_reading(c);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents)
{
    conn_write(w->data);
}

void server_flush(struct server *s)
{
    while (s->dirty) {
        struct conn *c = s->dirty;
        s->dirty = c->dirty_next;
        c->dirty = false;
        conn_write(c);
    }
}

static void queued(struct conn *c, int rc)
{
    if (c->detached) {
        /* Nobody to read it: a resumed client is told where its leases
         * stand then (hooks.conn_resumed). */
        c->out.len = 0;
        return;
    }
    if (rc != 0) {
        log_error("client pid %d: out of memory for output; closing", (int)c->cc.pid);
        c->closing = true; /* closed by the next flush */
    }
    conn_account(c);
    mark_dirty(c);
}

void conn_send_granted(struct conn *c, uint32_t id, const struct wire_granted *m)
{
    queued(c, wire_put_granted(&c->out, id, m));
}

void conn_send_error(struct conn *c, uint32_t id, int code, const char *msg)
{
    struct wire_error e = {.code = code, .msg = msg, .msg_len = (uint16_t)strlen(msg)};
    queued(c, wire_put_error(&c->out, id, &e));
}

void conn_send_ok(struct conn *c, uint32_t id)
{
    queued(c, wire_put_empty(&c->out, id, WIRE_T_OK));
}

void conn_send_event(struct conn *c, const struct wire_event *m)
{
    queued(c, wire_put_event(&c->out, 0, m));
}

/* ---- input ---- */

/* A peer that breaks the protocol gets one error frame, then is closed by
 * process_input once the frame at hand is done with. */
static void conn_fail(struct conn *c, uint32_t id, int code, const char *msg)
{
    log_warn("client pid %d uid %d: %s; closing its connection", (int)c->cc.pid, (int)c->cc.uid,
             msg);
    conn_send_error(c, id, code, msg);
    conn_flush(c);
    c->closing = true;
}

/* Sends all queued output (just HELLO_OK: nothing is queued before it) with
 * the two lease-page descriptors attached. A fresh socket takes it whole. */
static int send_with_fds(struct conn *c, const int fds[2])
{
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {.iov_base = c->out.data, .iov_len = c->out.len};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, 2 * sizeof(int));
    ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 || (size_t)n != c->out.len)
        return -1;
    c->out.len = 0;
    return 0;
}

/* A connection id that no connection has: a successor's new ones must not
 * meet those it took over. */
static uint64_t new_conn_id(struct server *s)
{
    for (;;) {
        uint64_t id = random_u64() >> 1;
        struct conn *o;
        LIST_FOREACH(o, &s->conns, link)
        if (o->conn_id == id)
            break;
        if (id && !o)
            return id;
    }
}

static bool same_secret(const uint8_t *a, const uint8_t *b)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < WIRE_SECRET_LEN; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

void server_page_name(uint64_t conn_id, char out[24])
{
    snprintf(out, 24, "%016" PRIx64, conn_id);
}

/* Sends HELLO_OK (its clock and version-2 fields filled here) with the
 * page's descriptors; on failure the connection fails, and -1. */
static int send_hello_ok(struct conn *c, uint32_t id, struct wire_hello_ok *ok)
{
    ok->clock_ns = now_ns();
    if (ok->version >= 2 && c->conn_id) {
        ok->flags = WIRE_HELLO_RESUMABLE;
        ok->conn_id = c->conn_id;
        memcpy(ok->secret, c->secret, sizeof ok->secret);
    }
    if (wire_put_hello_ok(&c->out, id, ok) != 0 || send_with_fds(c, c->page.fds) != 0) {
        c->out.len = 0; /* never a part of HELLO_OK twice */
        lease_page_close_fds(&c->page);
        conn_fail(c, id, DLOCK_ENOMEM, "cannot send the lease page");
        return -1;
    }
    lease_page_close_fds(&c->page);
    return 0;
}

static void handle_hello(struct conn *c, const struct wire_hdr *h, const uint8_t *body)
{
    struct wire_hello m;
    if (wire_get_hello(body, h->len, &m) != 0) {
        conn_fail(c, h->id, DLOCK_EPROTO, "malformed hello");
        return;
    }
    if (m.magic != WIRE_MAGIC || m.version < WIRE_VERSION_MIN || m.version > WIRE_VERSION) {
        conn_fail(c, h->id, DLOCK_EVERSION, "unsupported protocol version");
        return;
    }
    struct server *s = c->srv;
    const struct config *cfg = s->cfg;
    /* A client of version 2 gets a connection that outlives the agent when
     * there is a state directory to keep it in. */
    int rc;
    char name[24];
    if (m.version >= 2 && s->state_dirfd >= 0) {
        c->conn_id = new_conn_id(s);
        server_page_name(c->conn_id, name);
        rc = random_bytes(c->secret, sizeof c->secret);
        if (rc == 0)
            rc =
                lease_page_init_at(&c->page, cfg->max_leases_per_conn, s->state_dirfd, name, false);
    } else {
        rc = lease_page_init(&c->page, cfg->max_leases_per_conn);
    }
    if (rc != 0) {
        log_error("client pid %d: cannot make its lease page: %s", (int)c->cc.pid, strerror(errno));
        c->conn_id = 0;
        conn_fail(c, h->id, DLOCK_ENOMEM, "the agent cannot make a lease page");
        return;
    }
    c->pid_start = proc_start_time(c->cc.pid);
    /* Its label, for the lease list: no control character reaches a
     * terminal. */
    char label[WIRE_MAX_LABEL + 1];
    memcpy(label, m.label ? m.label : "", m.label_len);
    label[m.label_len] = '\0';
    _Static_assert(sizeof c->cc.label > WIRE_MAX_LABEL, "the label fits");
    text_printable(c->cc.label, sizeof c->cc.label, label);
    /* The client's version: each gets the HELLO_OK it knows. */
    struct wire_hello_ok ok = {.version = m.version,
                               .max_name_len = cfg->max_name_len,
                               .max_leases = cfg->max_leases_per_conn,
                               .default_ttl_ms = cfg->default_ttl_ms};
    if (send_hello_ok(c, h->id, &ok) != 0)
        return;
    c->cc.max_leases = ok.max_leases;
    c->cc.max_name_len = ok.max_name_len;
    c->hello = true;
    ev_timer_stop(s->loop, &c->handshake);
    s->hooks.conn_hello(s->hooks.arg, c);
}

/* RESUME: the client of a connection taken over from a predecessor takes it
 * back. The socket goes to that connection (resumed_into), this one ends
 * with the frame at hand, and the frames after it are the other's. */
static void handle_resume(struct conn *c, const struct wire_hdr *h, const uint8_t *body)
{
    struct wire_resume m;
    if (wire_get_resume(body, h->len, &m) != 0) {
        conn_fail(c, h->id, DLOCK_EPROTO, "malformed resume");
        return;
    }
    if (m.magic != WIRE_MAGIC || m.version < 2 || m.version > WIRE_VERSION) {
        conn_fail(c, h->id, DLOCK_EVERSION, "unsupported protocol version");
        return;
    }
    struct server *s = c->srv;
    struct conn *d;
    LIST_FOREACH(d, &s->conns, link)
    if (d->detached && d->conn_id == m.conn_id)
        break;
    /* The secret decides; the uid must match too, so that a secret leaked
     * to another user gives nothing. */
    if (!d || d->cc.uid != c->cc.uid || !same_secret(d->secret, m.secret)) {
        log_info("client pid %d uid %d: no connection %016" PRIx64 " to resume", (int)c->cc.pid,
                 (int)c->cc.uid, m.conn_id);
        conn_send_error(c, h->id, DLOCK_ENOTFOUND, "no such connection to resume");
        conn_flush(c);
        c->closing = true;
        return;
    }
    /* The socket and the peer's identity go to d. */
    d->fd = c->fd;
    c->fd = -1;
    d->detached = false;
    d->cc.pid = c->cc.pid;
    d->gid = c->gid;
    memcpy(d->gids, c->gids, sizeof d->gids);
    d->cc.ngids = c->cc.ngids;
    memcpy(d->cc.comm, c->cc.comm, sizeof d->cc.comm);
    d->pid_start = proc_start_time(d->cc.pid);
    ev_io_stop(s->loop, &d->pidwatch);
    close(d->pidfd);
    d->pidfd = -1;
    conn_watchers(d);
    c->resumed_into = d;
    c->closing = true;
    char name[24];
    server_page_name(d->conn_id, name);
    struct wire_hello_ok ok = {.version = m.version,
                               .max_name_len = d->cc.max_name_len,
                               .max_leases = d->cc.max_leases,
                               .default_ttl_ms = s->cfg->default_ttl_ms};
    if (lease_page_reopen_fds(&d->page, s->state_dirfd, name) != 0) {
        log_error("client pid %d: cannot open its lease page again: %s", (int)d->cc.pid,
                  strerror(errno));
        conn_fail(d, h->id, DLOCK_ENOMEM, "the agent cannot open the lease page again");
        return;
    }
    if (send_hello_ok(d, h->id, &ok) != 0)
        return;
    d->hello = true;
    log_info("client pid %d uid %d resumed its connection with %u lease(s)", (int)d->cc.pid,
             (int)d->cc.uid, d->cc.nleases);
    s->hooks.conn_hello(s->hooks.arg, d);
    s->hooks.conn_resumed(s->hooks.arg, d);
    mark_dirty(d);
}

/* Handles one whole frame. The connection may be closed on return. */
static void handle_frame(struct conn *c, const struct wire_hdr *h, const uint8_t *body)
{
    const struct server_hooks *k = &c->srv->hooks;
    if (!c->hello) {
        if (h->type == WIRE_T_HELLO)
            handle_hello(c, h, body);
        else if (h->type == WIRE_T_RESUME)
            handle_resume(c, h, body);
        else
            conn_fail(c, h->id, DLOCK_EPROTO, "request before hello");
        return;
    }
    switch (h->type) {
    case WIRE_T_ACQUIRE:
    case WIRE_T_ACQUIRE_EX: {
        /* Both reach the core alike: a plain ACQUIRE decodes as the
         * exclusive kind with one name, and the core judges the kind, flags,
         * permits, owner and names of either. */
        struct wire_acquire m;
        int rc = h->type == WIRE_T_ACQUIRE ? wire_get_acquire(body, h->len, &m)
                                           : wire_get_acquire_ex(body, h->len, &m);
        if (rc != 0)
            conn_fail(c, h->id, DLOCK_EPROTO, "malformed acquire");
        else
            k->acquire(k->arg, c, h->id, &m);
        return;
    }
    case WIRE_T_RELEASE: {
        struct wire_release m;
        if (wire_get_release(body, h->len, &m) != 0)
            conn_fail(c, h->id, DLOCK_EPROTO, "malformed release");
        else
            k->release(k->arg, c, h->id, m.lease_id);
        return;
    }
    case WIRE_T_CANCEL:
        if (h->len != 0)
            conn_fail(c, h->id, DLOCK_EPROTO, "malformed cancel");
        else
            k->cancel(k->arg, c, h->id);
        return;
    case WIRE_T_PING:
        if (h->len != 0)
            conn_fail(c, h->id, DLOCK_EPROTO, "malformed ping");
        else
            conn_send_ok(c, h->id);
        return;
    default:
        conn_fail(c, h->id, DLOCK_EPROTO, "unknown message type");
    }
}

/* Adds n bytes to c's input (the frames that followed a RESUME). */
static int in_append(struct conn *c, const uint8_t *p, size_t n)
{
    if (c->in.cap - c->in.len < n) {
        uint8_t *q = realloc(c->in.data, c->in.len + n);
        if (!q)
            return -1;
        c->in.data = q;
        c->in.cap = c->in.len + n;
    }
    if (n)
        memcpy(c->in.data + c->in.len, p, n);
    c->in.len += n;
    return 0;
}

/* Handles every whole frame in the input buffer, in order. Returns -1 if
 * the connection was closed. */
static int process_input(struct conn *c)
{
    size_t off = 0;
    /* Each frame may queue a reply: while c has no room, only a RELEASE at
     * the head is taken (conn_takes_release()); any other frame waits, and
     * so does every frame behind it. */
    while (!c->closing) {
        bool room = conn_has_room(c);
        if (room)
            c->release_stalled = false;
        else if (!conn_takes_release(c))
            break;
        struct wire_hdr h;
        int got = wire_hdr_decode(c->in.data + off, c->in.len - off, WIRE_MAX_BODY, &h);
        if (got < 0) {
            conn_fail(c, 0, DLOCK_EPROTO, "malformed frame header");
            break;
        }
        if (got == 0 || c->in.len - off < WIRE_HDR_LEN + (size_t)h.len)
            break;
        if (!room && h.type != WIRE_T_RELEASE)
            break;
        uint32_t held = c->cc.nleases;
        handle_frame(c, &h, c->in.data + off + WIRE_HDR_LEN);
        off += WIRE_HDR_LEN + h.len;
        if (c->resumed_into && !c->resumed_into->closing &&
            in_append(c->resumed_into, c->in.data + off, c->in.len - off) != 0)
            c->resumed_into->closing = true; /* out of memory: closed by its flush */
        if (!room && c->cc.nleases >= held)
            c->release_stalled = true;
    }
    if (c->closing) {
        conn_close(c);
        return -1;
    }
    wire_buf_consume(&c->in, off);
    return 0;
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct conn *c = w->data;
    if (c->in.cap - c->in.len < READ_CHUNK) {
        /* Never more than one maximal frame plus a chunk is buffered. */
        size_t cap = c->in.len + READ_CHUNK;
        uint8_t *p = realloc(c->in.data, cap);
        if (!p) {
            conn_close(c);
            return;
        }
        c->in.data = p;
        c->in.cap = cap;
    }
    ssize_t n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        if (c->in.len)
            log_warn("client pid %d: disconnected in the middle of a frame", (int)c->cc.pid);
        conn_close(c);
        return;
    }
    c->in.len += (size_t)n;
    if (process_input(c) == 0)
        conn_update_reading(c);
}

/* ---- connections ---- */

/* The use record of a uid, made on its first connection. */
static struct uid_use *uid_get(struct server *s, uid_t uid)
{
    struct uid_use *u;
    LIST_FOREACH(u, &s->uids, link)
    if (u->uid == uid)
        return u;
    u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->uid = uid;
    LIST_INIT(&u->conns);
    LIST_INSERT_HEAD(&s->uids, u, link);
    return u;
}

static void uid_put(struct uid_use *u)
{
    if (u->nconns)
        return;
    LIST_REMOVE(u, link);
    free(u);
}

static void conn_close(struct conn *c)
{
    struct server *s = c->srv;
    if (c->closed)
        return;
    c->closed = c->closing = true;
    s->hooks.conn_gone(s->hooks.arg, c);
    ev_io_stop(s->loop, &c->rio);
    ev_io_stop(s->loop, &c->wio);
    ev_timer_stop(s->loop, &c->handshake);
    ev_io_stop(s->loop, &c->pidwatch);
    if (c->pidfd >= 0)
        close(c->pidfd);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    if (c->conn_id) {
        /* Its leases are gone: nothing of it is left for a successor. */
        char name[24];
        server_page_name(c->conn_id, name);
        lease_page_unlink(s->state_dirfd, name);
    }
    if (c->dirty) {
        struct conn **p = &s->dirty;
        while (*p != c)
            p = &(*p)->dirty_next;
        *p = c->dirty_next;
    }
    LIST_REMOVE(c, link);
    s->nconns--;
    wire_buf_free(&c->out);
    conn_account(c); /* its output no longer counts for its uid */
    LIST_REMOVE(c, ulink);
    c->uu->nconns--;
    uid_put(c->uu);
    log_debug("client pid %d: connection closed", (int)c->cc.pid);
    lease_page_destroy(&c->page);
    wire_buf_free(&c->in);
    free(c);
}

/* A peer that connects and never says HELLO would hold a connection slot
 * (and, counted per uid, its user's share) for ever. */
static void on_handshake_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct conn *c = w->data;
    if (!conn_has_room(c) && c->in.len)
        return; /* its HELLO waits for its uid's unread replies: the uid's
                   own doing, bounded by its connection cap; the timer
                   repeats */
    log_warn("client pid %d uid %d: no hello within %u ms; closing its connection", (int)c->cc.pid,
             (int)c->cc.uid, c->srv->cfg->handshake_timeout_ms);
    conn_close(c);
}

/* Whether the server takes one more connection from this peer. */
static bool conn_admitted(struct server *s, const struct ucred *cred, struct uid_use *u)
{
    if (s->nconns >= s->cfg->max_connections) {
        log_warn("connection limit (%u) reached; refusing pid %d", s->cfg->max_connections,
                 (int)cred->pid);
        (*s->hooks.refused)++;
        return false;
    }
    uint32_t per_uid = s->cfg->policy.max_connections_per_uid;
    if (per_uid && u->nconns >= per_uid) {
        log_warn("uid %u has %u connection(s), its limit; refusing pid %d", (unsigned)cred->uid,
                 per_uid, (int)cred->pid);
        (*s->hooks.refused)++;
        return false;
    }
    return true;
}

static void conn_watchers(struct conn *c)
{
    ev_io_init(&c->rio, on_readable, c->fd, EV_READ);
    ev_io_init(&c->wio, on_writable, c->fd, EV_WRITE);
    c->rio.data = c->wio.data = c;
    c->reading = false;
}

/* A new connection (c->fd set, or -1 for a detached one) joins the server
 * and its uid's use. */
static void conn_enlist(struct server *s, struct conn *c, struct uid_use *u)
{
    c->srv = s;
    c->cc.acct = &u->acct;
    LIST_INIT(&c->cc.leases);
    LIST_INIT(&c->cc.waiters);
    c->cc.gids = c->gids;
    c->serial = ++s->serial;
    c->page.fds[0] = c->page.fds[1] = c->page.touch_fd = -1;
    c->pidfd = -1;
    conn_watchers(c);
    LIST_INSERT_HEAD(&s->conns, c, link);
    s->nconns++;
    c->uu = u;
    LIST_INSERT_HEAD(&u->conns, c, ulink);
    u->nconns++;
}

static void conn_new(void *arg, int fd)
{
    struct server *s = arg;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        log_warn("SO_PEERCRED: %s", strerror(errno));
        close(fd);
        return;
    }
    struct uid_use *u = uid_get(s, cred.uid);
    struct conn *c = u && conn_admitted(s, &cred, u) ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        if (u)
            uid_put(u);
        close(fd);
        return;
    }
    c->fd = fd;
    c->cc.pid = cred.pid;
    c->cc.uid = cred.uid;
    c->gid = cred.gid;
    c->cc.ngids = peer_groups(fd, cred.gid, c->gids, PEER_GROUPS_MAX);
    proc_comm((int)cred.pid, c->cc.comm, sizeof c->cc.comm);
    conn_enlist(s, c, u);
    double hs = s->cfg->handshake_timeout_ms / 1000.0;
    ev_timer_init(&c->handshake, on_handshake_timeout, hs, hs);
    c->handshake.data = c;
    ev_timer_start(s->loop, &c->handshake);
    conn_update_reading(c);
    log_debug("client pid %d uid %d gid %d connected", (int)c->cc.pid, (int)c->cc.uid, (int)c->gid);
}

/* The process of a detached connection ended: so do its leases. */
static void on_pid_exit(struct ev_loop *loop, ev_io *w, int revents)
{
    struct conn *c = w->data;
    log_info("client pid %d ended before it came back to this agent", (int)c->cc.pid);
    conn_close(c);
}

struct conn *server_detached(struct server *s, const struct server_detached_conn *d)
{
    if (s->state_dirfd < 0) {
        errno = EINVAL;
        return NULL;
    }
    /* The pidfd first, then the start time: a pid reused before pidfd_open
     * shows another start time, one reused after cannot be this pidfd's. */
    int pidfd = (int)syscall(SYS_pidfd_open, d->pid, 0);
    if (pidfd < 0) {
        if (errno != ESRCH)
            log_warn("cannot watch client pid %d (pidfd_open: %s)", (int)d->pid, strerror(errno));
        return NULL; /* errno: ESRCH only when the process is gone */
    }
    uint64_t started = proc_start_time((int)d->pid);
    if (!started || !d->pid_start || started != d->pid_start) {
        close(pidfd);
        /* Another process under the pid is proof; an unreadable start
         * time is none. */
        errno = started && d->pid_start ? ESRCH : EPERM;
        return NULL;
    }
    struct uid_use *u = uid_get(s, d->uid);
    struct conn *c = u ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        if (u)
            uid_put(u);
        close(pidfd);
        errno = ENOMEM;
        return NULL;
    }
    c->fd = -1;
    c->detached = true;
    c->conn_id = d->conn_id;
    memcpy(c->secret, d->secret, sizeof c->secret);
    c->cc.pid = d->pid;
    c->cc.uid = d->uid;
    c->gid = d->gid;
    c->gids[0] = d->gid;
    c->cc.ngids = 1;
    c->pid_start = d->pid_start;
    c->cc.max_leases = d->nslots;
    c->cc.max_name_len = s->cfg->max_name_len;
    proc_comm((int)d->pid, c->cc.comm, sizeof c->cc.comm);
    conn_enlist(s, c, u);
    c->hello = true;
    char name[24];
    server_page_name(c->conn_id, name);
    if (lease_page_init_at(&c->page, d->nslots, s->state_dirfd, name, true) != 0) {
        int e = errno;
        close(pidfd);
        c->conn_id = 0; /* its files stay for the caller to judge */
        conn_close(c);
        errno = e;
        return NULL;
    }
    c->pidfd = pidfd;
    ev_io_init(&c->pidwatch, on_pid_exit, pidfd, EV_READ);
    c->pidwatch.data = c;
    ev_io_start(s->loop, &c->pidwatch);
    return c;
}

void server_drop(struct conn *c)
{
    conn_close(c);
}

void server_keep_state(struct server *s, int dirfd)
{
    s->state_dirfd = dirfd;
}

void server_limits_changed(struct server *s)
{
    /* A connection stopped for its uid's output cap is woken when the uid
     * drops under the cap; after a raise of the cap it may be under it
     * already, with nothing left to drop. */
    struct conn *c;
    LIST_FOREACH(c, &s->conns, link)
    if (!c->reading && !c->closing)
        mark_dirty(c);
}

int server_open(struct server *s, struct ev_loop *loop, const struct server_hooks *hooks,
                const struct config *cfg)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->hooks = *hooks;
    s->cfg = cfg;
    s->lfd = -1;
    s->state_dirfd = -1;
    s->lfd = unix_listen(cfg->socket, cfg->socket_mode, cfg->socket_group, &s->inherited);
    if (s->lfd < 0)
        return -1;
    snprintf(s->path, sizeof s->path, "%s", cfg->socket);
    LIST_INIT(&s->conns);
    LIST_INIT(&s->uids);
    listener_start(&s->lst, loop, s->lfd, "client socket", conn_new, s);
    log_info("listening on %s (mode %04o%s%s)", s->path, cfg->socket_mode,
             cfg->socket_group[0] ? ", group " : "", cfg->socket_group);
    return 0;
}

void server_stop_listening(struct server *s)
{
    if (s->lfd < 0)
        return;
    listener_stop(&s->lst);
    close(s->lfd);
    s->lfd = -1;
    if (!s->inherited)
        unlink(s->path);
}

void server_close_all(struct server *s)
{
    while (!LIST_EMPTY(&s->conns)) {
        struct conn *c = LIST_FIRST(&s->conns);
        if (!c->detached)
            conn_flush(c);
        conn_close(c);
    }
}
