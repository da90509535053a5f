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
#include "util.h"

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
    char addr[300];
    log_info("%s: %s connection up (%s)", l->label, l->what,
             config_addr_str(l->addr, addr, sizeof addr));
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
    conn_lost(l, status == REDIS_OK ? NULL : ac->errstr);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct redis_link *l = w->data;
    if (link_open(l) && !l->connected) {
        log_warn("%s: %s connection or set-up timed out", l->label, l->what);
        note(l, DLOCK_EUNAVAIL, "connection or set-up timed out");
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
    redisFree(l->rc);
    l->rc = NULL;
    l->raw_connecting = false;
    l->raw_gen++;
}

/* Writes what the context holds; the rest when the socket takes it. A
 * failure drops the link from the loop: this may run inside the owner's
 * call. */
static void raw_write(struct redis_link *l)
{
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
    l->raw_connecting = false;
    char addr[300];
    log_info("%s: %s connection up (%s)", l->label, l->what,
             config_addr_str(l->addr, addr, sizeof addr));
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
    if (l->raw_connecting)
        raw_connected(l);
    else
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
    unsigned gen = l->raw_gen;
    if (redisBufferRead(l->rc) != REDIS_OK) {
        char why[sizeof l->rc->errstr];
        memcpy(why, l->rc->errstr, sizeof why);
        raw_free(l);
        conn_lost(l, why);
        return;
    }
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
    if (!reply)
        l->connected = false; /* the connection is going away */
    return now;
}

/* The commands queued during this loop turn go out in one write now,
 * rather than one turn later when hiredis' write watcher fires. */
void redis_link_flush(struct redis_link *l)
{
    if (l->unflushed && l->connected && l->ac)
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
