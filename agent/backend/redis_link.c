/* SPDX-License-Identifier: BSD-3-Clause */
/* redis_link.c -- one hiredis connection kept up (redis_link.h): connect
 * and set-up under a timeout, reconnection with exponential backoff and full
 * jitter, deferred drops, and the watchdog of unanswered commands; for both
 * flavours, hiredis' async context and the raw non-blocking context. */
#include "redis_link.h"

#include <errno.h>
#include <hiredis/adapters/libev.h>
#include <hiredis/hiredis.h>
#include <string.h>
#include <sys/socket.h>

#include "dlock.h"
#include "log.h"
#include "tls.h"
#include "util.h"

/* hiredis' own reply dispatch after its reader was fed: exported by every
 * hiredis from 0.11 on, though async.h does not declare it. The TLS adapter
 * feeds the reader itself, then hands over here, as redisAsyncHandleRead()
 * does after reading the socket. */
void redisProcessCallbacks(redisAsyncContext *ac);

int redis_error_code(const char *msg)
{
    static const struct {
        const char *prefix;
        int code;
    } map[] = {
        {"OOM", DLOCK_EOOM},
        {"READONLY", DLOCK_EREADONLY},
        {"LOADING", DLOCK_ELOADING},
        {"NOAUTH", DLOCK_EAUTH},
        {"WRONGPASS", DLOCK_EAUTH},
        {"NOPERM", DLOCK_EAUTH},
        {"MASTERDOWN", DLOCK_EUNAVAIL},
        {"NOREPLICAS", DLOCK_EUNAVAIL}, /* min-replicas-to-write: not enough replicas */
        {"BUSY", DLOCK_EUNAVAIL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strncmp(msg, map[i].prefix, strlen(map[i].prefix)) == 0)
            return map[i].code;
    return DLOCK_EBACKEND;
}

static void link_connect(struct redis_link *l);
static void raw_free(struct redis_link *l);
static void raw_connected(struct redis_link *l);
static void tls_start(struct redis_link *l, int fd);
static void tls_handshake(struct redis_link *l);
static void raw_replies(struct redis_link *l, unsigned gen);
static void raw_up(struct redis_link *l);

static void note(struct redis_link *l, int code, const char *text)
{
    l->hooks.error(l->hooks.arg, code, text);
}

/* Whether a connection exists, set up or not. */
static bool link_open(const struct redis_link *l)
{
    return l->ac || l->rc;
}

/* The arguments of AUTH for cfg's credentials in argv; their count, 0 when
 * the link logs in as nobody. */
static int auth_args(const struct config *cfg, const char *argv[3])
{
    argv[0] = "AUTH";
    if (cfg->redis_user[0]) {
        argv[1] = cfg->redis_user;
        argv[2] = cfg->redis_password;
        return 3;
    }
    argv[1] = cfg->redis_password;
    return cfg->redis_password[0] ? 2 : 0;
}

double redis_backoff_s(const struct config *cfg, unsigned attempt)
{
    double cap = cfg->reconnect_min_ms;
    for (unsigned i = 0; i < attempt && cap < cfg->reconnect_max_ms; i++)
        cap *= 2;
    if (cap > cfg->reconnect_max_ms)
        cap = cfg->reconnect_max_ms;
    return (cap / 2 + cap / 2 * random_unit()) / 1000.0;
}

/* Arms the reconnect timer: exponential backoff with full jitter. */
static void schedule_reconnect(struct redis_link *l)
{
    if (l->closing)
        return;
    double delay = redis_backoff_s(l->cfg, l->attempt++);
    ev_timer_stop(l->loop, &l->timer);
    ev_timer_set(&l->timer, delay, 0.0);
    ev_timer_start(l->loop, &l->timer);
}

static void set_ready(struct redis_link *l)
{
    ev_timer_stop(l->loop, &l->timer);
    l->connected = true;
    l->attempt = 0;
    l->hooks.ready(l->hooks.arg, l);
}

/* The reply to the set-up command `what` (AUTH, SELECT, the closing PING).
 * A refusal is logged and the link dropped; once all have succeeded the link
 * is usable: no command may run on a link whose AUTH or SELECT failed, it
 * would act on the wrong data. */
static void setup_answered(struct redis_link *l, const char *what, const redisReply *rep)
{
    if (l->setup_left <= 0)
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        log_error("%s: %s refused: %s", l->label, what, rep->str);
        note(l, redis_error_code(rep->str), rep->str);
        redis_link_fail(l, "setup refused");
        return;
    }
    /* A pub/sub link is ready when its owner says so. */
    if (--l->setup_left > 0 || (l->flags & REDIS_LINK_USER_READY))
        return;
    set_ready(l);
}

static void on_setup_reply(redisAsyncContext *ac, void *r, void *priv)
{
    if (r)
        setup_answered(ac->data, priv, r);
}

/* AUTH, SELECT, the owner's set-up, then PING: Redis answers in order, so
 * the PING's reply comes after every set-up reply. */
static void send_setup(struct redis_link *l)
{
    const struct config *cfg = l->cfg;
    redisAsyncContext *ac = l->ac;
    const char *auth[3];
    int nauth = auth_args(cfg, auth);
    l->setup_left = 0;
    if (nauth) {
        redisAsyncCommandArgv(ac, on_setup_reply, "AUTH", nauth, auth, NULL);
        l->setup_left++;
    }
    if (l->flags & REDIS_LINK_USER_READY) {
        /* Usable now; ready with the owner's confirmation. */
        l->connected = true;
        l->hooks.setup(l->hooks.arg, l);
        return;
    }
    if ((l->flags & REDIS_LINK_SELECT) && cfg->redis_db) {
        redisAsyncCommand(ac, on_setup_reply, "SELECT", "SELECT %d", cfg->redis_db);
        l->setup_left++;
    }
    l->hooks.setup(l->hooks.arg, l);
    redisAsyncCommand(ac, on_setup_reply, "PING", "PING");
    l->setup_left++;
}

/* "connection up", with the address, and the protocol and cipher over TLS. */
static void log_up(const struct redis_link *l)
{
    char addr[300], tls[120] = "";
    config_addr_str(l->addr, addr, sizeof addr);
    if (l->tls) {
        char d[100];
        snprintf(tls, sizeof tls, ", %s", tls_conn_describe(l->tls, d, sizeof d));
    }
    log_info("%s: %s connection up (%s%s)", l->label, l->what, addr, tls);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct redis_link *l = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback. */
        ev_timer_stop(l->loop, &l->timer);
        if (l->attempt == 0)
            log_warn("%s: %s connection failed: %s", l->label, l->what, ac->errstr);
        note(l, DLOCK_EUNAVAIL, ac->errstr);
        l->ac = NULL;
        schedule_reconnect(l);
        return;
    }
    log_up(l);
    if (!l->addr->path[0])
        redisEnableKeepAlive(&((redisAsyncContext *)ac)->c); /* notice a dead peer */
    /* The connect timer keeps running: it also bounds the set-up. */
    send_setup(l);
}

/* A connection that was up is gone (why: NULL when we closed it): logged,
 * the owner told, made again after the backoff. */
static void conn_lost(struct redis_link *l, const char *why)
{
    l->connected = false;
    if (l->closing)
        return;
    /* A TLS port drops a client that speaks plaintext before its set-up
     * is answered. */
    char hinted[600];
    if (!l->cfg->tls && l->setup_left > 0 && !l->addr->path[0]) {
        snprintf(hinted, sizeof hinted,
                 "%s (closed during the set-up: a TLS port? then write rediss:// or tls = yes)",
                 why ? why : "connection closed");
        why = hinted;
    }
    log_warn("%s: %s connection lost%s%s", l->label, l->what, why ? ": " : "", why ? why : "");
    note(l, DLOCK_EUNAVAIL, why ? why : "connection lost");
    if (l->hooks.down)
        l->hooks.down(l->hooks.arg, l);
    schedule_reconnect(l);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis_link *l = ac->data;
    l->ac = NULL;
    /* hiredis' error text is short; the stream's says more. */
    conn_lost(l, status == REDIS_OK ? NULL : l->tls_why[0] ? l->tls_why : ac->errstr);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct redis_link *l = w->data;
    if (link_open(l) && !l->connected) {
        const char *why = l->tls && !l->tls_open
                              ? "TLS handshake timed out: no TLS answer within connect_timeout_ms "
                                "(a plaintext Redis on a TLS address?)"
                              : "connection or set-up timed out";
        log_warn("%s: %s %s", l->label, l->what, why);
        note(l, DLOCK_EUNAVAIL, why);
        redis_link_drop(l);
        return;
    }
    if (!link_open(l))
        link_connect(l);
}

/* Pending commands fail with a NULL reply; a link hiredis had connected
 * gets its disconnect callback, which reconnects; one still connecting does
 * not, so it is done here. A raw link does the same by itself. */
void redis_link_drop(struct redis_link *l)
{
    redisAsyncContext *ac = l->ac;
    if (l->rc) {
        bool was_up = !l->raw_connecting;
        raw_free(l);
        l->connected = false;
        if (was_up)
            conn_lost(l, NULL);
        else
            schedule_reconnect(l);
        return;
    }
    if (!ac)
        return;
    l->connected = false;
    redisAsyncFree(ac);
    if (l->ac == ac) {
        l->ac = NULL;
        schedule_reconnect(l);
    }
}

/* ---- the raw flavour ---- */

static void raw_free(struct redis_link *l)
{
    ev_io_stop(l->loop, &l->rio);
    ev_io_stop(l->loop, &l->wio);
    tls_conn_free(l->tls);
    l->tls = NULL;
    l->tls_open = l->tls_read_wants_write = l->tls_write_wants_read = false;
    redisFree(l->rc);
    l->rc = NULL;
    l->raw_connecting = false;
    l->raw_gen++;
}

/* Writes obuf (hiredis' output buffer) through the link's TLS stream, and
 * watches the socket for what the stream waits for. Whether it failed (the
 * reason in tls_why), for the flavour's own failure path. */
static bool tls_write_watched(struct redis_link *l, char **obuf)
{
    enum tls_io r = tls_conn_write(l->tls, obuf);
    l->tls_write_wants_read = r == TLS_IO_WANT_READ;
    if (r == TLS_IO_WANT_WRITE) {
        ev_io_start(l->loop, &l->wio);
    } else if (r == TLS_IO_DONE || r == TLS_IO_WANT_READ) {
        if (!l->tls_read_wants_write)
            ev_io_stop(l->loop, &l->wio);
    } else {
        snprintf(l->tls_why, sizeof l->tls_why, "%s", tls_conn_error(l->tls));
        return true;
    }
    return false;
}

/* Writes what the context holds; the rest when the socket takes it. A
 * failure drops the link from the loop: this may run inside the owner's
 * call. */
static void raw_write(struct redis_link *l)
{
    if (l->tls) {
        if (tls_write_watched(l, &l->rc->obuf)) {
            note(l, DLOCK_EUNAVAIL, l->tls_why);
            redis_link_fail(l, l->tls_why);
            ev_io_stop(l->loop, &l->wio);
        }
        return;
    }
    int done = 0;
    if (redisBufferWrite(l->rc, &done) != REDIS_OK) {
        note(l, DLOCK_EUNAVAIL, l->rc->errstr);
        redis_link_fail(l, l->rc->errstr);
        ev_io_stop(l->loop, &l->wio);
        return;
    }
    if (done)
        ev_io_stop(l->loop, &l->wio);
    else
        ev_io_start(l->loop, &l->wio);
}

/* AUTH, then PING; the replies come in that order. */
static void raw_setup(struct redis_link *l)
{
    const char *auth[3];
    int nauth = auth_args(l->cfg, auth);
    unsigned n = 0;
    if (nauth) {
        redisAppendCommandArgv(l->rc, nauth, auth, NULL);
        l->raw_setup[n++] = "AUTH";
    }
    redisAppendCommand(l->rc, "PING");
    l->raw_setup[n++] = "PING";
    l->setup_left = (int)n;
    l->raw_setup_seen = 0;
    raw_write(l);
}

/* The socket's connect finished, well or not. */
static void raw_connected(struct redis_link *l)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(l->rc->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err) {
        ev_timer_stop(l->loop, &l->timer);
        if (l->attempt == 0)
            log_warn("%s: %s connection failed: %s", l->label, l->what, strerror(err));
        note(l, DLOCK_EUNAVAIL, strerror(err));
        raw_free(l);
        schedule_reconnect(l);
        return;
    }
    if (l->cfg->tls)
        tls_start(l, l->rc->fd);
    else
        raw_up(l);
}

/* The connection is made (and its TLS stream up): the set-up goes. */
static void raw_up(struct redis_link *l)
{
    l->raw_connecting = false;
    log_up(l);
    if (!l->addr->path[0])
        redisEnableKeepAlive(l->rc); /* notice a dead peer */
    ev_io_stop(l->loop, &l->wio);
    ev_io_start(l->loop, &l->rio);
    /* The connect timer keeps running: it also bounds the set-up. */
    raw_setup(l);
}

static void on_raw_writable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct redis_link *l = w->data;
    if (l->raw_connecting) {
        if (l->tls)
            tls_handshake(l);
        else
            raw_connected(l);
        return;
    }
    if (l->tls_read_wants_write)
        ev_feed_event(loop, &l->rio, EV_READ);
    raw_write(l);
}

/* One reply: the set-up's, then the owner's. */
static void raw_dispatch(struct redis_link *l, const redisReply *r)
{
    if (l->setup_left < 0)
        return; /* the link is being dropped */
    if (!l->connected) {
        unsigned i = l->raw_setup_seen++;
        setup_answered(l, i < 2 && l->raw_setup[i] ? l->raw_setup[i] : "set-up", r);
        return;
    }
    if (l->hooks.reply)
        l->hooks.reply(l->hooks.arg, l, r);
}

static void on_raw_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct redis_link *l = w->data;
    if (l->raw_connecting) {
        if (l->tls)
            tls_handshake(l);
        return;
    }
    unsigned gen = l->raw_gen;
    enum tls_io tr = TLS_IO_DONE;
    if (l->tls) {
        size_t fed;
        tr = tls_conn_read(l->tls, l->rc->reader, &fed);
        l->tls_read_wants_write = tr == TLS_IO_WANT_WRITE;
        if (tr == TLS_IO_WANT_WRITE)
            ev_io_start(loop, &l->wio);
        else if (tr == TLS_IO_EOF || tr == TLS_IO_ERROR)
            snprintf(l->tls_why, sizeof l->tls_why, "%s", tls_conn_error(l->tls));
    } else if (redisBufferRead(l->rc) != REDIS_OK) {
        char why[sizeof l->rc->errstr];
        memcpy(why, l->rc->errstr, sizeof why);
        raw_free(l);
        conn_lost(l, why);
        return;
    }
    raw_replies(l, gen);
    if (l->raw_gen != gen)
        return; /* dropped or closed meanwhile */
    if (tr == TLS_IO_EOF || tr == TLS_IO_ERROR) {
        raw_free(l);
        conn_lost(l, l->tls_why);
        return;
    }
    if (tr == TLS_IO_MORE)
        ev_feed_event(loop, &l->rio, EV_READ);
    if (l->tls_write_wants_read)
        raw_write(l);
}

/* The replies the context's reader holds, each to raw_dispatch(), until
 * none is left or the link was dropped (raw_gen moved on from gen). */
static void raw_replies(struct redis_link *l, unsigned gen)
{
    for (;;) {
        void *r = NULL;
        if (redisGetReply(l->rc, &r) != REDIS_OK) {
            /* A protocol error: nothing more can be read on it. */
            log_warn("%s: %s connection: %s", l->label, l->what, l->rc->errstr);
            note(l, DLOCK_EBACKEND, l->rc->errstr);
            redis_link_drop(l);
            return;
        }
        if (!r)
            return;
        raw_dispatch(l, r);
        freeReplyObject(r);
        if (l->raw_gen != gen)
            return; /* dropped or closed meanwhile */
    }
}

static void raw_connect(struct redis_link *l)
{
    const struct redis_addr *addr = l->addr;
    redisContext *rc = addr->path[0] ? redisConnectUnixNonBlock(addr->path)
                                     : redisConnectNonBlock(addr->host, addr->port);
    if (!rc || rc->err) {
        const char *why = rc ? rc->errstr : "out of memory";
        if (l->attempt == 0)
            log_warn("%s: cannot connect: %s", l->label, why);
        note(l, DLOCK_EUNAVAIL, why);
        if (rc)
            redisFree(rc);
        schedule_reconnect(l);
        return;
    }
    l->rc = rc;
    l->tls_why[0] = '\0';
    l->raw_connecting = true;
    l->raw_gen++;
    ev_io_set(&l->rio, rc->fd, EV_READ);
    ev_io_set(&l->wio, rc->fd, EV_WRITE);
    ev_io_start(l->loop, &l->wio); /* writable: the connect finished */
    ev_timer_stop(l->loop, &l->timer);
    ev_timer_set(&l->timer, l->cfg->connect_timeout_ms / 1000.0, 0.0);
    ev_timer_start(l->loop, &l->timer);
}

int redis_link_raw_send(struct redis_link *l, int argc, const char **argv, const size_t *argvlen)
{
    if (!l->connected || l->closing || !l->rc)
        return DLOCK_EUNAVAIL;
    if (redisAppendCommandArgv(l->rc, argc, argv, argvlen) != REDIS_OK)
        return DLOCK_ENOMEM;
    l->unflushed = true;
    ev_io_start(l->loop, &l->wio);
    return 0;
}

/* ---- TLS, for both flavours ---- */

/* The stream failed before the link was up (its handshake): logged on the
 * first failure in a row, noted in the node's health, and the connection
 * dropped from the loop and made again after the backoff. */
static void tls_fail(struct redis_link *l, const char *why)
{
    if (why != l->tls_why)
        snprintf(l->tls_why, sizeof l->tls_why, "%s", why);
    ev_io_stop(l->loop, &l->rio);
    ev_io_stop(l->loop, &l->wio);
    ev_timer_stop(l->loop, &l->timer);
    if (l->attempt == 0)
        log_warn("%s: %s connection failed: %s", l->label, l->what, l->tls_why);
    note(l, DLOCK_EUNAVAIL, l->tls_why);
    l->setup_left = -1;
    l->connected = false;
    ev_timer_start(l->loop, &l->kill); /* redis_link_drop(), from the loop */
}

/* The socket fd is connected: the handshake begins. The connect timer
 * keeps running, so a server that stalls the handshake is dropped at
 * connect_timeout_ms. */
static void tls_start(struct redis_link *l, int fd)
{
    struct tls_ctx *ctx = tls_ctx_current();
    l->tls = ctx ? tls_conn_new(ctx, fd, l->addr->host, l->cfg->tls_server_name) : NULL;
    if (!l->tls) {
        tls_fail(l, ctx ? "TLS: out of memory" : "TLS: the TLS settings were not loaded");
        return;
    }
    tls_handshake(l);
}

static void tls_handshake(struct redis_link *l)
{
    enum tls_io r = tls_conn_handshake(l->tls);
    if (r == TLS_IO_WANT_READ || r == TLS_IO_WANT_WRITE) {
        ev_io_stop(l->loop, r == TLS_IO_WANT_READ ? &l->wio : &l->rio);
        ev_io_start(l->loop, r == TLS_IO_WANT_READ ? &l->rio : &l->wio);
        return;
    }
    if (r != TLS_IO_DONE) {
        snprintf(l->tls_why, sizeof l->tls_why, "%s", tls_conn_error(l->tls));
        tls_fail(l, l->tls_why);
        return;
    }
    l->tls_open = true;
    ev_io_stop(l->loop, &l->wio);
    if (l->flags & REDIS_LINK_RAW) {
        raw_up(l);
        return;
    }
    /* What hiredis does once its socket is connected, now that the stream
     * is: the context is connected, and the connect callback sends the
     * set-up. */
    redisAsyncContext *ac = l->ac;
    ac->c.flags |= REDIS_CONNECTED;
    ev_io_start(l->loop, &l->rio);
    if (ac->onConnect)
        ac->onConnect(ac, REDIS_OK);
}

/* The stream failed on an async link hiredis has connected: hiredis' own
 * error path (pending callbacks get a NULL reply, then the disconnect
 * callback), entered as a failed read of the socket would enter it. */
static void tls_async_broken(struct redis_link *l)
{
    redisContext *c = &l->ac->c;
    c->err = REDIS_ERR_IO;
    size_t n = strnlen(l->tls_why, sizeof c->errstr - 1); /* the whole text stays in tls_why */
    memcpy(c->errstr, l->tls_why, n);
    c->errstr[n] = '\0';
    redisAsyncHandleRead(l->ac); /* c->err set: it reads nothing and disconnects */
}

static void tls_async_read(struct redis_link *l)
{
    redisAsyncContext *ac = l->ac;
    size_t fed = 0;
    enum tls_io r = tls_conn_read(l->tls, ac->c.reader, &fed);
    l->tls_read_wants_write = r == TLS_IO_WANT_WRITE;
    if (r == TLS_IO_WANT_WRITE)
        ev_io_start(l->loop, &l->wio);
    else if (r == TLS_IO_EOF || r == TLS_IO_ERROR)
        snprintf(l->tls_why, sizeof l->tls_why, "%s", tls_conn_error(l->tls));
    if (fed) {
        redisProcessCallbacks(ac);
        if (l->ac != ac)
            return; /* a callback closed or dropped it */
    }
    if (r == TLS_IO_MORE)
        ev_feed_event(l->loop, &l->rio, EV_READ);
    else if (r == TLS_IO_EOF || r == TLS_IO_ERROR)
        tls_async_broken(l);
}

static void tls_async_write(struct redis_link *l)
{
    if (tls_write_watched(l, &l->ac->c.obuf))
        tls_async_broken(l);
}

static void on_tls_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct redis_link *l = w->data;
    redisAsyncContext *ac = l->ac;
    if (!ac || !l->tls) {
        ev_io_stop(loop, w);
        return;
    }
    if (!l->tls_open) {
        tls_handshake(l);
        return;
    }
    tls_async_read(l);
    if (l->ac == ac && l->tls_open && l->tls_write_wants_read)
        tls_async_write(l);
}

static void on_tls_writable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct redis_link *l = w->data;
    redisAsyncContext *ac = l->ac;
    if (!ac) {
        ev_io_stop(loop, w);
        return;
    }
    if (!l->tls) {
        /* The TCP connect is over. A failed one goes to hiredis, which reads
         * the socket's error, calls the connect callback and frees the
         * context (getpeername() leaves that error where it is). */
        struct sockaddr_storage peer;
        socklen_t len = sizeof peer;
        if (getpeername(ac->c.fd, (struct sockaddr *)&peer, &len) != 0)
            redisAsyncHandleWrite(ac);
        else
            tls_start(l, ac->c.fd);
        return;
    }
    if (!l->tls_open) {
        tls_handshake(l);
        return;
    }
    if (l->tls_read_wants_write)
        ev_feed_event(loop, &l->rio, EV_READ);
    tls_async_write(l);
}

/* hiredis' event hooks for an async context on a TLS stream: it says when
 * it has output; the stream decides what the socket is watched for. */
static void tls_ev_add_read(void *arg)
{
    struct redis_link *l = arg;
    if (l->tls_open)
        ev_io_start(l->loop, &l->rio);
}

static void tls_ev_del_read(void *arg)
{
    struct redis_link *l = arg;
    if (l->tls_open)
        ev_io_stop(l->loop, &l->rio);
}

static void tls_ev_add_write(void *arg)
{
    struct redis_link *l = arg;
    if (l->tls_open || !l->tls) /* open, or connecting: writable ends the connect */
        ev_io_start(l->loop, &l->wio);
}

static void tls_ev_del_write(void *arg)
{
    struct redis_link *l = arg;
    if (l->tls_open && !l->tls_read_wants_write)
        ev_io_stop(l->loop, &l->wio);
}

/* hiredis frees the context (and then closes the socket). */
static void tls_ev_cleanup(void *arg)
{
    struct redis_link *l = arg;
    ev_io_stop(l->loop, &l->rio);
    ev_io_stop(l->loop, &l->wio);
    tls_conn_free(l->tls);
    l->tls = NULL;
    l->tls_open = l->tls_read_wants_write = l->tls_write_wants_read = false;
}

/* In place of redisLibevAttach(): before the connect callback is set (which
 * asks for the first writable event). */
static void tls_attach(struct redis_link *l, redisAsyncContext *ac)
{
    l->tls_why[0] = '\0';
    ac->ev.data = l;
    ac->ev.addRead = tls_ev_add_read;
    ac->ev.delRead = tls_ev_del_read;
    ac->ev.addWrite = tls_ev_add_write;
    ac->ev.delWrite = tls_ev_del_write;
    ac->ev.cleanup = tls_ev_cleanup;
    ev_io_set(&l->rio, ac->c.fd, EV_READ);
    ev_io_set(&l->wio, ac->c.fd, EV_WRITE);
    ev_set_cb(&l->rio, on_tls_readable);
    ev_set_cb(&l->wio, on_tls_writable);
}

/* ---- connecting ---- */

static void link_connect(struct redis_link *l)
{
    if (l->flags & REDIS_LINK_RAW) {
        raw_connect(l);
        return;
    }
    const struct redis_addr *addr = l->addr;
    redisAsyncContext *ac = addr->path[0] ? redisAsyncConnectUnix(addr->path)
                                          : redisAsyncConnect(addr->host, addr->port);
    if (!ac || ac->err) {
        if (l->attempt == 0)
            log_warn("%s: cannot connect: %s", l->label, ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(l);
        return;
    }
    ac->data = l;
    l->ac = ac;
    if (l->cfg->tls)
        tls_attach(l, ac);
    else
        redisLibevAttach(l->loop, ac);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ev_timer_stop(l->loop, &l->timer);
    ev_timer_set(&l->timer, l->cfg->connect_timeout_ms / 1000.0, 0.0);
    ev_timer_start(l->loop, &l->timer);
}

static void on_kill(struct ev_loop *loop, ev_timer *w, int revents)
{
    redis_link_drop(w->data);
}

void redis_link_fail(struct redis_link *l, const char *why)
{
    l->setup_left = -1;
    log_warn("%s: dropping %s connection: %s", l->label, l->what, why);
    l->connected = false;
    /* Possibly inside a hiredis callback: free from the loop instead. */
    ev_timer_start(l->loop, &l->kill);
}

void redis_link_ready(struct redis_link *l)
{
    set_ready(l);
}

/* How often the watchdog looks: a quarter of command_timeout_ms. */
static double watchdog_every(const struct redis_link *l)
{
    return l->cfg->command_timeout_ms / 4000.0;
}

/* A Redis that stops answering keeps its socket open: commands waiting while
 * nothing came back for command_timeout_ms mean the link is dead, whatever
 * TCP thinks. (A long pipeline that keeps being answered is alive.) */
static void on_watchdog(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct redis_link *l = w->data;
    const struct redis_link_cmd *oldest = TAILQ_FIRST(&l->inflight);
    if (!oldest || !link_open(l)) {
        ev_timer_stop(loop, w); /* until the next command */
        return;
    }
    uint64_t limit = (uint64_t)l->cfg->command_timeout_ms * NS_PER_MS;
    uint64_t since = l->last_reply > oldest->sent ? l->last_reply : oldest->sent;
    if (now_ns() - since > limit) {
        log_warn("%s: no reply within %u ms; reconnecting", l->label, l->cfg->command_timeout_ms);
        note(l, DLOCK_EUNAVAIL, "no reply within command_timeout_ms");
        redis_link_drop(l);
        if (l->hooks.stalled)
            l->hooks.stalled(l->hooks.arg, l);
    }
}

int redis_link_send(struct redis_link *l, struct redis_link_cmd *c, redisCallbackFn *fn, void *priv,
                    int argc, const char **argv, const size_t *argvlen)
{
    if (!l->connected || l->closing || !l->ac)
        return DLOCK_EUNAVAIL;
    if (redisAsyncCommandArgv(l->ac, fn, priv, argc, argv, argvlen) != REDIS_OK)
        return DLOCK_EUNAVAIL;
    c->sent = now_ns();
    TAILQ_INSERT_TAIL(&l->inflight, c, q);
    l->pending++;
    l->unflushed = true;
    /* A reload may have changed command_timeout_ms: the period follows. */
    double every = watchdog_every(l);
    if (!ev_is_active(&l->watchdog) || l->watchdog.repeat != every) {
        l->watchdog.repeat = every;
        ev_timer_again(l->loop, &l->watchdog);
    }
    return 0;
}

uint64_t redis_link_answered(struct redis_link *l, struct redis_link_cmd *c, const void *reply)
{
    uint64_t now = now_ns();
    TAILQ_REMOVE(&l->inflight, c, q);
    l->pending--;
    l->last_reply = now;
    l->last_rtt = now - c->sent;
    if (reply)
        histo_add(&l->rtt, l->last_rtt);
    if (!reply)
        l->connected = false; /* the connection is going away */
    return now;
}

/* The commands queued during this loop turn go out in one write now,
 * rather than one turn later when hiredis' write watcher fires. */
void redis_link_flush(struct redis_link *l)
{
    if (l->unflushed && l->connected && l->ac && l->tls)
        tls_async_write(l);
    else if (l->unflushed && l->connected && l->ac)
        redisAsyncHandleWrite(l->ac);
    else if (l->unflushed && l->connected && l->rc)
        raw_write(l);
    l->unflushed = false;
}

void redis_link_init(struct redis_link *l, struct ev_loop *loop, const struct config *cfg,
                     const struct redis_addr *addr, const char *label, const char *what,
                     unsigned flags, const struct redis_link_hooks *hooks)
{
    memset(l, 0, sizeof *l);
    l->loop = loop;
    l->cfg = cfg;
    l->addr = addr;
    l->label = label;
    l->what = what;
    l->flags = flags;
    l->hooks = *hooks;
    TAILQ_INIT(&l->inflight);
    ev_timer_init(&l->timer, on_timer, 0.0, 0.0);
    l->timer.data = l;
    ev_timer_init(&l->kill, on_kill, 0.0, 0.0);
    l->kill.data = l;
    ev_timer_init(&l->watchdog, on_watchdog, 0.0, watchdog_every(l));
    l->watchdog.data = l;
    ev_io_init(&l->rio, on_raw_readable, -1, EV_READ);
    l->rio.data = l;
    ev_io_init(&l->wio, on_raw_writable, -1, EV_WRITE);
    l->wio.data = l;
}

void redis_link_start(struct redis_link *l)
{
    link_connect(l);
}

void redis_link_close(struct redis_link *l)
{
    l->closing = true;
    ev_timer_stop(l->loop, &l->timer);
    ev_timer_stop(l->loop, &l->kill);
    ev_timer_stop(l->loop, &l->watchdog);
    l->connected = false;
    if (l->rc)
        raw_free(l);
    if (l->ac) {
        redisAsyncContext *ac = l->ac;
        redisAsyncFree(ac);
        l->ac = NULL;
    }
}
