/* backend_redis.c -- single-node Redis backend: one pipelined command
 * connection and one pub/sub connection, Lua scripts called with EVALSHA,
 * command timeouts, and reconnection with exponential backoff and jitter. */
#include "backend_redis.h"

#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include "dlock.h"
#include "keys.h"
#include "log.h"
#include "wire.h"
#include "util.h"

enum script { S_ACQUIRE, S_RENEW, S_RELEASE, S_COUNT };

/* Acquire: SET NX PX, and on success the fencing token: one more than the
 * last one of this lock (KEYS[2], kept ARGV[3] ms), but never below the
 * server's clock in microseconds, so that it keeps rising after the counter
 * expired or was lost. The counter is read with pcall: a foreign value of
 * another type must not abort the script after SET NX took the lock. When
 * taken: the holder's remaining PTTL, negated. The token goes through
 * string.format: Lua's own number-to-string conversion keeps only 14
 * digits. */
static const char *const script_src[S_COUNT] = {
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "local t = redis.call('time') "
    "local fence = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "local v = redis.pcall('get', KEYS[2]) "
    "local last = (type(v) == 'string' and tonumber(v)) or 0 "
    "if last >= fence then fence = last + 1 end "
    "redis.call('set', KEYS[2], string.format('%d', fence), 'PX', ARGV[3]) "
    "return fence end "
    "local t = redis.call('pttl', KEYS[1]) if t < 0 then t = 0 end return -t",
    /* Renew: compare-and-pexpire. */
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0",
    /* Release: compare-and-delete, then tell the waiting agents. */
    "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) "
    "redis.call('publish', ARGV[2], ARGV[3]) return 1 end return 0",
};

struct rb;

/* One hiredis connection and its reconnection state. */
struct rconn {
    struct rb *rb;
    redisAsyncContext *ac;
    bool connected; /* set up (AUTH, SELECT answered): commands may go */
    int setup_left; /* set-up replies still to come */
    bool is_sub;
    unsigned attempt; /* failed attempts in a row, for the backoff */
    ev_timer timer;   /* connect timeout, then reconnect backoff */
    ev_timer kill;    /* deferred drop of the connection */
};

/* A command in flight on the command connection. */
struct rcmd {
    TAILQ_ENTRY(rcmd) link; /* in flight, in send order */
    backend_cb cb;
    void *arg;
    uint64_t sent; /* for the command timeout */
    uint8_t script;
    bool retried; /* already re-sent with EVAL after NOSCRIPT */
    uint32_t ttl_ms;
    uint16_t name_len;
    char token[33];
    char key[]; /* prefix + name, NUL-terminated; name is key + prefix_len */
};

struct rb {
    struct backend base;
    struct ev_loop *loop;
    const struct config *cfg;
    struct backend_events ev;
    struct rconn cmd, sub;
    char sha[S_COUNT][41];       /* empty until SCRIPT LOAD answered */
    TAILQ_HEAD(, rcmd) inflight; /* in send order */
    size_t npending;
    size_t prefix_len;
    char channel[160];
    ev_timer watchdog;   /* checks the age of the oldest command */
    bool unflushed;      /* commands queued since the last flush */
    uint64_t last_reply; /* when the command link last answered */
    bool closing;
};

static void rconn_connect(struct rconn *rc);
static void rconn_kill(struct rconn *rc, const char *why);
static void rconn_drop(struct rconn *rc);
static void on_script_loaded(redisAsyncContext *ac, void *r, void *priv);

/* ---- command list ---- */

static void cmd_link(struct rb *b, struct rcmd *c)
{
    TAILQ_INSERT_TAIL(&b->inflight, c, link);
    b->npending++;
}

static void cmd_unlink(struct rb *b, struct rcmd *c)
{
    TAILQ_REMOVE(&b->inflight, c, link);
    b->npending--;
}

/* Maps a Redis error reply to a DLOCK_E* code. */
static int map_error(const char *msg)
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
        {"BUSY", DLOCK_EUNAVAIL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strncmp(msg, map[i].prefix, strlen(map[i].prefix)) == 0)
            return map[i].code;
    return DLOCK_EBACKEND;
}

static int cmd_send(struct rb *b, struct rcmd *c);

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct rb *b = ((struct rconn *)ac->data)->rb;
    struct rcmd *c = priv;
    redisReply *rep = r;
    int err = 0;
    long long result = 0;
    cmd_unlink(b, c);
    b->last_reply = now_ns();
    if (!rep) {
        b->cmd.connected = false; /* the connection is going away */
        err = DLOCK_EUNAVAIL;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        if (strncmp(rep->str, "NOSCRIPT", 8) == 0 && !c->retried) {
            /* The server lost its script cache (restart, SCRIPT FLUSH): send
             * the script itself, which loads it again. Not a lost lease. */
            b->sha[c->script][0] = '\0';
            redisAsyncCommand(b->cmd.ac, on_script_loaded, (void *)(intptr_t)c->script,
                              "SCRIPT LOAD %s", script_src[c->script]);
            c->retried = true;
            if (cmd_send(b, c) == 0)
                return;
            err = DLOCK_EUNAVAIL;
        } else {
            err = map_error(rep->str);
            log_warn("redis: %s", rep->str);
        }
    } else if (rep->type == REDIS_REPLY_INTEGER) {
        result = rep->integer;
    } else {
        err = DLOCK_EBACKEND;
        log_warn("redis: unexpected reply type %d", rep->type);
    }
    if (c->cb)
        c->cb(c->arg, err, result);
    free(c);
}

/* Sends c with EVALSHA when the script's digest is known, else with EVAL. */
static int cmd_send(struct rb *b, struct rcmd *c)
{
    if (!b->cmd.connected || b->closing)
        return DLOCK_EUNAVAIL;
    char ttl[16], keep[16];
    char fkey[2 * CONFIG_PREFIX_MAX + WIRE_MAX_NAME + FENCE_KEY_EXTRA + 1];
    const char *argv[8];
    size_t argvlen[8];
    int argc = 0;
    size_t key_len = b->prefix_len + c->name_len;
    const char *sha = b->sha[c->script];
#define ARG(s, n) (argv[argc] = (s), argvlen[argc++] = (n))
    if (sha[0]) {
        ARG("EVALSHA", 7);
        ARG(sha, 40);
    } else {
        ARG("EVAL", 4);
        ARG(script_src[c->script], strlen(script_src[c->script]));
    }
    if (c->script == S_ACQUIRE) {
        ARG("2", 1);
        ARG(c->key, key_len);
        ARG(fkey, fence_key(c->key, key_len, b->prefix_len, fkey));
    } else {
        ARG("1", 1);
        ARG(c->key, key_len);
    }
    ARG(c->token, 32);
    if (c->script == S_RELEASE) {
        ARG(b->channel, strlen(b->channel));
        ARG(c->key + b->prefix_len, c->name_len);
    } else {
        ARG(ttl, (size_t)snprintf(ttl, sizeof ttl, "%u", c->ttl_ms));
    }
    if (c->script == S_ACQUIRE) {
        /* The counter outlives the lock by the retention, at least. */
        uint64_t keep_ms = (uint64_t)b->cfg->fence_retention_ms + c->ttl_ms;
        ARG(keep, (size_t)snprintf(keep, sizeof keep, "%llu", (unsigned long long)keep_ms));
    }
#undef ARG
    if (redisAsyncCommandArgv(b->cmd.ac, on_reply, c, argc, argv, argvlen) != REDIS_OK)
        return DLOCK_EUNAVAIL;
    c->sent = now_ns();
    cmd_link(b, c);
    b->unflushed = true;
    return 0;
}

static int submit(struct backend *be, enum script s, const char *name, size_t len,
                  const char *token, uint32_t ttl_ms, backend_cb cb, void *arg)
{
    struct rb *b = (struct rb *)be;
    if (!b->cmd.connected || b->closing)
        return DLOCK_EUNAVAIL;
    struct rcmd *c = malloc(sizeof *c + b->prefix_len + len + 1);
    if (!c)
        return DLOCK_ENOMEM;
    c->cb = cb;
    c->arg = arg;
    c->script = (uint8_t)s;
    c->retried = false;
    c->ttl_ms = ttl_ms;
    c->name_len = (uint16_t)len;
    memcpy(c->token, token, 32);
    c->token[32] = '\0';
    memcpy(c->key, b->cfg->prefix, b->prefix_len);
    memcpy(c->key + b->prefix_len, name, len);
    c->key[b->prefix_len + len] = '\0';
    int rc = cmd_send(b, c);
    if (rc)
        free(c);
    return rc;
}

static int rb_acquire(struct backend *be, const char *name, size_t len, const char *token,
                      uint32_t ttl_ms, backend_cb cb, void *arg)
{
    return submit(be, S_ACQUIRE, name, len, token, ttl_ms, cb, arg);
}

static int rb_renew(struct backend *be, const char *name, size_t len, const char *token,
                    uint32_t ttl_ms, backend_cb cb, void *arg)
{
    return submit(be, S_RENEW, name, len, token, ttl_ms, cb, arg);
}

static int rb_release(struct backend *be, const char *name, size_t len, const char *token,
                      backend_cb cb, void *arg)
{
    return submit(be, S_RELEASE, name, len, token, 0, cb, arg);
}

static size_t rb_pending(const struct backend *be)
{
    return ((const struct rb *)be)->npending;
}

/* ---- connection set-up ---- */

/* Replies to AUTH, SELECT and the closing PING. A refusal is logged and the
 * link dropped; once all have succeeded the link is usable: no command may
 * run on a link whose AUTH or SELECT failed, it would act on the wrong data. */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *priv)
{
    redisReply *rep = r;
    struct rconn *rc = ac->data;
    if (!rep || rc->setup_left <= 0)
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        log_error("redis: %s refused: %s", (const char *)priv, rep->str);
        rc->setup_left = -1;
        rconn_kill(rc, "setup refused");
        return;
    }
    /* The pub/sub link is ready when its subscription is confirmed. */
    if (--rc->setup_left > 0 || rc->is_sub)
        return;
    ev_timer_stop(rc->rb->loop, &rc->timer);
    rc->connected = true;
    rc->attempt = 0;
    rc->rb->ev.on_ready(rc->rb->ev.arg);
}

static void on_script_loaded(redisAsyncContext *ac, void *r, void *priv)
{
    struct rb *b = ((struct rconn *)ac->data)->rb;
    redisReply *rep = r;
    int s = (int)(intptr_t)priv;
    if (rep && rep->type == REDIS_REPLY_STRING && rep->len == 40)
        memcpy(b->sha[s], rep->str, 41);
}

static void on_pubsub(redisAsyncContext *ac, void *r, void *priv)
{
    struct rb *b = ((struct rconn *)ac->data)->rb;
    redisReply *rep = r;
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3)
        return;
    const redisReply *kind = rep->element[0], *payload = rep->element[2];
    if (kind->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(kind->str, "message") == 0 && payload->type == REDIS_REPLY_STRING)
        b->ev.on_notice(b->ev.arg, payload->str, payload->len);
    else if (strcmp(kind->str, "subscribe") == 0) {
        log_info("redis: subscribed to %s", b->channel);
        ev_timer_stop(b->loop, &b->sub.timer);
        b->sub.attempt = 0;
        b->ev.on_subscribed(b->ev.arg);
    }
}

static void send_setup(struct rconn *rc)
{
    const struct config *cfg = rc->rb->cfg;
    redisAsyncContext *ac = rc->ac;
    rc->setup_left = 0;
    if (cfg->redis_user[0]) {
        redisAsyncCommand(ac, on_setup_reply, "AUTH", "AUTH %s %s", cfg->redis_user,
                          cfg->redis_password);
        rc->setup_left++;
    } else if (cfg->redis_password[0]) {
        redisAsyncCommand(ac, on_setup_reply, "AUTH", "AUTH %s", cfg->redis_password);
        rc->setup_left++;
    }
    if (rc->is_sub) {
        /* Its readiness is the subscription's confirmation. */
        rc->connected = true;
        redisAsyncCommand(ac, on_pubsub, NULL, "SUBSCRIBE %s", rc->rb->channel);
        return;
    }
    if (cfg->redis_db) {
        redisAsyncCommand(ac, on_setup_reply, "SELECT", "SELECT %d", cfg->redis_db);
        rc->setup_left++;
    }
    for (int s = 0; s < S_COUNT; s++)
        redisAsyncCommand(ac, on_script_loaded, (void *)(intptr_t)s, "SCRIPT LOAD %s",
                          script_src[s]);
    redisAsyncCommand(ac, on_setup_reply, "PING", "PING");
    rc->setup_left++;
}

static const char *rconn_name(const struct rconn *rc)
{
    return rc->is_sub ? "pub/sub" : "command";
}

/* Arms the reconnect timer: exponential backoff with full jitter. */
static void schedule_reconnect(struct rconn *rc)
{
    const struct config *cfg = rc->rb->cfg;
    if (rc->rb->closing)
        return;
    double cap = cfg->reconnect_min_ms;
    for (unsigned i = 0; i < rc->attempt && cap < cfg->reconnect_max_ms; i++)
        cap *= 2;
    if (cap > cfg->reconnect_max_ms)
        cap = cfg->reconnect_max_ms;
    double delay = cap / 2 + cap / 2 * random_unit();
    rc->attempt++;
    ev_timer_stop(rc->rb->loop, &rc->timer);
    ev_timer_set(&rc->timer, delay / 1000.0, 0.0);
    ev_timer_start(rc->rb->loop, &rc->timer);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct rconn *rc = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback. */
        ev_timer_stop(rc->rb->loop, &rc->timer);
        if (rc->attempt == 0)
            log_warn("redis: %s connection failed: %s", rconn_name(rc), ac->errstr);
        rc->ac = NULL;
        schedule_reconnect(rc);
        return;
    }
    char addr[300];
    log_info("redis: %s connection up (%s)", rconn_name(rc),
             config_addr_str(&rc->rb->cfg->redis, addr, sizeof addr));
    if (!rc->rb->cfg->redis.path[0])
        redisEnableKeepAlive(&((redisAsyncContext *)ac)->c); /* notice a dead peer */
    /* The connect timer keeps running: it also bounds the set-up. */
    send_setup(rc);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct rconn *rc = ac->data;
    rc->ac = NULL;
    rc->connected = false;
    if (rc->rb->closing)
        return;
    log_warn("redis: %s connection lost%s%s", rconn_name(rc), status == REDIS_OK ? "" : ": ",
             status == REDIS_OK ? "" : ac->errstr);
    schedule_reconnect(rc);
}

static void on_rconn_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct rconn *rc = w->data;
    if (rc->ac && !rc->connected) {
        log_warn("redis: %s connection or set-up timed out", rconn_name(rc));
        rconn_drop(rc);
        return;
    }
    if (!rc->ac)
        rconn_connect(rc);
}

/* Frees a link from outside hiredis' callbacks. Pending commands fail with
 * DLOCK_EUNAVAIL; a link hiredis had connected gets its disconnect callback,
 * which reconnects; one still connecting does not, so it is done here. */
static void rconn_drop(struct rconn *rc)
{
    redisAsyncContext *ac = rc->ac;
    if (!ac)
        return;
    rc->connected = false;
    redisAsyncFree(ac);
    if (rc->ac == ac) {
        rc->ac = NULL;
        schedule_reconnect(rc);
    }
}

static void rconn_connect(struct rconn *rc)
{
    const struct config *cfg = rc->rb->cfg;
    redisAsyncContext *ac = cfg->redis.path[0]
                                ? redisAsyncConnectUnix(cfg->redis.path)
                                : redisAsyncConnect(cfg->redis.host, cfg->redis.port);
    if (!ac || ac->err) {
        if (rc->attempt == 0)
            log_warn("redis: cannot connect: %s", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(rc);
        return;
    }
    ac->data = rc;
    rc->ac = ac;
    redisLibevAttach(rc->rb->loop, ac);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ev_timer_stop(rc->rb->loop, &rc->timer);
    ev_timer_set(&rc->timer, cfg->connect_timeout_ms / 1000.0, 0.0);
    ev_timer_start(rc->rb->loop, &rc->timer);
}

/* Drops a connection from outside hiredis' callbacks: pending commands fail
 * with DLOCK_EUNAVAIL, and the disconnect callback schedules a reconnect. */
static void on_kill(struct ev_loop *loop, ev_timer *w, int revents)
{
    rconn_drop(w->data);
}

static void rconn_kill(struct rconn *rc, const char *why)
{
    log_warn("redis: dropping %s connection: %s", rconn_name(rc), why);
    rc->connected = false;
    /* Possibly inside a hiredis callback: free from the loop instead. */
    ev_timer_start(rc->rb->loop, &rc->kill);
}

/* A Redis that stops answering keeps its socket open: commands waiting while
 * nothing came back for command_timeout_ms mean the link is dead, whatever
 * TCP thinks. (A long pipeline that keeps being answered is alive.) */
static void on_watchdog(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct rb *b = w->data;
    const struct rcmd *oldest = TAILQ_FIRST(&b->inflight);
    if (!oldest || !b->cmd.ac)
        return;
    uint64_t limit = (uint64_t)b->cfg->command_timeout_ms * 1000000ull;
    uint64_t since = b->last_reply > oldest->sent ? b->last_reply : oldest->sent;
    if (now_ns() - since > limit) {
        log_warn("redis: no reply within %u ms; reconnecting", b->cfg->command_timeout_ms);
        rconn_drop(&b->cmd);
        rconn_drop(&b->sub);
    }
}

/* The commands queued during this loop turn go out in one write now,
 * rather than one turn later when hiredis' write watcher fires. */
static void rb_flush(struct backend *be)
{
    struct rb *b = (struct rb *)be;
    if (b->unflushed && b->cmd.ac && b->cmd.connected)
        redisAsyncHandleWrite(b->cmd.ac);
    b->unflushed = false;
}

static void rb_destroy(struct backend *be)
{
    struct rb *b = (struct rb *)be;
    b->closing = true;
    ev_timer_stop(b->loop, &b->watchdog);
    struct rconn *conns[2] = {&b->cmd, &b->sub};
    for (int i = 0; i < 2; i++) {
        ev_timer_stop(b->loop, &conns[i]->timer);
        ev_timer_stop(b->loop, &conns[i]->kill);
        if (conns[i]->ac) {
            redisAsyncContext *ac = conns[i]->ac;
            conns[i]->connected = false;
            redisAsyncFree(ac);
            conns[i]->ac = NULL;
        }
    }
    free(b);
}

static const struct backend_ops rb_ops = {
    .acquire = rb_acquire,
    .renew = rb_renew,
    .release = rb_release,
    .flush = rb_flush,
    .pending = rb_pending,
    .destroy = rb_destroy,
};

static void rconn_init(struct rb *b, struct rconn *rc, bool is_sub)
{
    rc->rb = b;
    rc->is_sub = is_sub;
    ev_timer_init(&rc->timer, on_rconn_timer, 0.0, 0.0);
    rc->timer.data = rc;
    ev_timer_init(&rc->kill, on_kill, 0.0, 0.0);
    rc->kill.data = rc;
}

struct backend *backend_redis_new(struct ev_loop *loop, const struct config *cfg,
                                  const struct backend_events *events)
{
    struct rb *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->base.ops = &rb_ops;
    TAILQ_INIT(&b->inflight);
    b->loop = loop;
    b->cfg = cfg;
    b->ev = *events;
    b->prefix_len = strlen(cfg->prefix);
    snprintf(b->channel, sizeof b->channel, "%s@released", cfg->prefix);
    rconn_init(b, &b->cmd, false);
    rconn_init(b, &b->sub, true);
    double every = cfg->command_timeout_ms / 4000.0;
    ev_timer_init(&b->watchdog, on_watchdog, every, every);
    b->watchdog.data = b;
    ev_timer_start(loop, &b->watchdog);
    rconn_connect(&b->cmd);
    rconn_connect(&b->sub);
    return &b->base;
}
