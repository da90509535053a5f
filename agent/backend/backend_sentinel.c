/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_sentinel.c -- the Redis master that Sentinel names
 * (docs/failover.md). One sentinel at a time is asked, on a query link,
 * SENTINEL get-master-addr-by-name (at start, every topology_refresh_ms, and
 * after a failure), and listened to, on a pub/sub link, for +switch-master;
 * when it cannot be reached or does not answer, the next one of the list is
 * used. The master is one single-node backend (backend_redis.c) whose
 * command link checks with ROLE that it is the master; every operation is
 * passed to it.
 *
 * When the master changes (+switch-master, a new answer of the sentinels, a
 * ROLE or READONLY answer of the master itself), the old master's backend is
 * given up: the answers still to come from it are turned into errors, and it
 * is destroyed from a timer (never from inside its own callbacks), which
 * answers what it still has in flight with DLOCK_EUNAVAIL. If a command
 * could have been answered by it since the last failover, every lease is put
 * in doubt (events.on_doubt) before the new master's backend is even made,
 * so no answer of the new master can come before the doubt. */
#include "backend_sentinel.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_redis.h"
#include "dlock.h"
#include "log.h"
#include "redis_link.h"
#include "sentinel_msg.h"
#include "util.h"

/* The health of one sentinel, for the status socket. */
struct sentinel_health {
    int last_error;
    char last_error_text[400];
};

struct sb;

/* One master's backend: the current one, or one given up and waiting for
 * the reaper. */
struct master {
    struct sb *s;
    struct redis_addr addr; /* the backend's address: lives as long as it */
    struct backend *be;
    char label[320];
    struct master *next; /* on the list of given-up masters */
};

/* An operation passed to the master: its answer is an error when the master
 * was given up meanwhile (gen changed). */
struct sop {
    struct sb *s;
    unsigned gen;
    backend_cb cb;
    backend_lookup_cb lookup_cb;
    void *arg;
};

struct sb {
    struct backend base;
    struct ev_loop *loop;
    const struct config *cfg;
    /* cfg with the sentinels' credentials and database 0: their links' own. */
    struct config scfg;
    struct backend_events ev;
    bool closing;

    /* The sentinel in use and its two links. */
    unsigned cur;
    unsigned failures; /* sentinels given up in a row: a whole round backs off */
    struct redis_link q, p;
    char slabel[320];
    struct redis_link_cmd ask; /* the question in flight on q */
    bool asking;
    bool subscribed; /* to +switch-master on p */
    struct sentinel_health health[CONFIG_MAX_NODES];

    /* The master. */
    struct master *m; /* NULL until the sentinels name one, and while switching */
    struct master *dying;
    unsigned gen;        /* bumped whenever a master is given up */
    bool confirmed;      /* a master's command link came up since the last doubt */
    unsigned role_fails; /* masters that were not, in a row: the next question waits */
    int master_error;    /* why there is no master, for the status */
    char master_error_text[160];
    size_t pending;

    ev_timer refresh; /* every topology_refresh_ms: ask again */
    ev_timer rotate;  /* deferred: the next sentinel */
    ev_timer reap;    /* deferred: destroy given-up masters */
    ev_timer reask;   /* after a master that was not: ask again, with backoff */
};

static void ask(struct sb *s);
static void start_links(struct sb *s);

static const struct redis_addr *sentinel_at(const struct sb *s, unsigned i)
{
    return &s->cfg->nodes[i];
}

/* Copies text into dst, cut to fit. */
static void copy_text(char *dst, size_t cap, const char *text)
{
    size_t n = strnlen(text, cap - 1);
    memcpy(dst, text, n);
    dst[n] = '\0';
}

static void note_master_error(struct sb *s, int code, const char *text)
{
    s->master_error = code;
    copy_text(s->master_error_text, sizeof s->master_error_text, text);
}

/* ---- the master ---- */

/* Gives the current master up: what it still answers is an error, it is
 * destroyed from the reaper, and when a command could have been answered by
 * it since the last doubt, every lease is in doubt from now on. */
static void abandon(struct sb *s, const char *why)
{
    struct master *m = s->m;
    if (!m)
        return;
    log_warn("%s: given up: %s", m->label, why);
    note_master_error(s, DLOCK_EUNAVAIL, why);
    s->m = NULL;
    s->gen++;
    /* Its notices stop counting: none comes until the next master's link is up. */
    if (s->ev.on_unsubscribed)
        s->ev.on_unsubscribed(s->ev.arg);
    m->next = s->dying;
    s->dying = m;
    ev_timer_start(s->loop, &s->reap);
    if (s->confirmed) {
        s->confirmed = false;
        log_warn("sentinel: master %s failed over: every lease is in doubt until a renewal on the "
                 "new master confirms it",
                 s->cfg->sentinel_master);
        if (s->ev.on_doubt)
            s->ev.on_doubt(s->ev.arg, NULL, NULL);
    }
}

static void on_reap(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct sb *s = w->data;
    struct master *m = s->dying;
    s->dying = NULL;
    while (m) {
        struct master *next = m->next;
        m->be->ops->destroy(m->be); /* answers its commands in flight */
        free(m);
        m = next;
    }
}

static void m_notice(void *arg, const char *name, size_t len, const struct backend_grant *grant)
{
    struct master *m = arg;
    if (m == m->s->m)
        m->s->ev.on_notice(m->s->ev.arg, name, len, grant);
}

/* The master's notice link is up, without subscriptions (a new master's,
 * or the same master's after its link was lost): the core asks for every
 * name again. */
static void m_subscribed(void *arg)
{
    struct master *m = arg;
    struct sb *s = m->s;
    if (m == s->m)
        s->ev.on_subscribed(s->ev.arg);
}

/* The master's notice link went down: its notices stop until it is up. */
static void m_unsubscribed(void *arg)
{
    struct master *m = arg;
    struct sb *s = m->s;
    if (m == s->m && s->ev.on_unsubscribed)
        s->ev.on_unsubscribed(s->ev.arg);
}

static void m_ready(void *arg)
{
    struct master *m = arg;
    struct sb *s = m->s;
    if (m != s->m)
        return;
    /* From now on its answers may confirm keys: giving it up is a failover. */
    s->confirmed = true;
    s->role_fails = 0;
    s->master_error = 0;
    s->master_error_text[0] = '\0';
    s->ev.on_ready(s->ev.arg);
}

/* Asks the sentinels again after a backoff (a master that was not, or
 * could not be made). */
static void reask_later(struct sb *s)
{
    ev_timer_stop(s->loop, &s->reask);
    ev_timer_set(&s->reask, redis_backoff_s(s->cfg, s->role_fails++), 0.0);
    ev_timer_start(s->loop, &s->reask);
}

/* ROLE says the master is not (called inside its hiredis callback). */
static void m_not_master(void *arg, const char *role)
{
    struct master *m = arg;
    struct sb *s = m->s;
    if (m != s->m)
        return;
    char why[200];
    snprintf(why, sizeof why, "it is a %s, not the master", role);
    abandon(s, why);
    /* The sentinels may not know yet: ask them again after a while. */
    reask_later(s);
}

static void connect_master(struct sb *s, const struct redis_addr *addr)
{
    struct master *m = calloc(1, sizeof *m);
    if (!m) {
        log_error("sentinel: out of memory for the master's backend");
        reask_later(s);
        return;
    }
    char a[300];
    m->s = s;
    m->addr = *addr;
    snprintf(m->label, sizeof m->label, "master %s", config_addr_str(addr, a, sizeof a));
    struct redis_node_opts o = {
        .label = m->label, .check_master = true, .not_master = m_not_master, .arg = m};
    struct backend_events ev = {.arg = m,
                                .on_notice = m_notice,
                                .on_subscribed = m_subscribed,
                                .on_unsubscribed = m_unsubscribed,
                                .on_ready = m_ready};
    m->be = backend_redis_new_opts(s->loop, s->cfg, &m->addr, &o, &ev);
    if (!m->be) {
        free(m);
        log_error("sentinel: out of memory for the master's backend");
        reask_later(s);
        return;
    }
    s->m = m;
}

/* The sentinels name this address as the master (from, for the log). */
static void master_is(struct sb *s, const struct redis_addr *named, const char *from)
{
    /* With TLS on, the master's links use it too: shown as rediss://, as the
     * sentinels are, in the log and the status. */
    struct redis_addr at = *named;
    at.tls = s->cfg->tls;
    const struct redis_addr *addr = &at;
    char a[300], b[300];
    config_addr_str(addr, a, sizeof a);
    if (s->m && sentinel_addr_same(&s->m->addr, addr))
        return;
    if (s->m) {
        char why[400];
        snprintf(why, sizeof why, "%s names %s as the master now", from, a);
        log_warn("sentinel: master %s moved from %s to %s (%s)", s->cfg->sentinel_master,
                 config_addr_str(&s->m->addr, b, sizeof b), a, from);
        abandon(s, why);
    } else {
        log_info("sentinel: master %s is at %s (%s)", s->cfg->sentinel_master, a, from);
    }
    connect_master(s, addr);
}

/* ---- the sentinels ---- */

static void note_sentinel(struct sb *s, int code, const char *text)
{
    struct sentinel_health *h = &s->health[s->cur];
    h->last_error = code;
    copy_text(h->last_error_text, sizeof h->last_error_text, text);
}

/* The sentinel in use failed: the next one, from the loop (at once, or
 * after a backoff when a whole round failed). */
static void schedule_rotate(struct sb *s)
{
    if (s->closing || ev_is_active(&s->rotate))
        return;
    s->failures++;
    unsigned n = s->cfg->nnodes;
    double delay = s->failures % n == 0 ? redis_backoff_s(s->cfg, s->failures / n - 1) : 0.0;
    ev_timer_set(&s->rotate, delay, 0.0);
    ev_timer_start(s->loop, &s->rotate);
}

static void on_rotate(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct sb *s = w->data;
    redis_link_close(&s->q);
    redis_link_close(&s->p);
    s->asking = false;
    s->subscribed = false;
    s->cur = (s->cur + 1) % s->cfg->nnodes;
    start_links(s);
}

/* The answer to SENTINEL get-master-addr-by-name: [ip, port], or nil when
 * the sentinel does not know the master. */
static void on_ask(redisAsyncContext *ac, void *r, void *priv)
{
    struct sb *s = priv;
    const redisReply *rep = r;
    redis_link_answered(&s->q, &s->ask, rep);
    s->asking = false;
    if (!rep)
        return; /* the link is going away: it says so itself */
    char text[200];
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[0]->type == REDIS_REPLY_STRING &&
        rep->element[1]->type == REDIS_REPLY_STRING) {
        struct redis_addr addr;
        if (sentinel_addr(rep->element[0]->str, rep->element[0]->len, rep->element[1]->str,
                          rep->element[1]->len, &addr) == 0) {
            master_is(s, &addr, s->slabel);
            return;
        }
        snprintf(text, sizeof text, "a master address that is none");
    } else if (rep->type == REDIS_REPLY_NIL) {
        snprintf(text, sizeof text, "does not know master %s", s->cfg->sentinel_master);
    } else if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(text, sizeof text, "%s", rep->str);
    } else {
        snprintf(text, sizeof text, "unexpected reply type %d", rep->type);
    }
    log_warn("%s: %s; trying the next sentinel", s->slabel, text);
    note_sentinel(s, rep->type == REDIS_REPLY_ERROR ? redis_error_code(rep->str) : DLOCK_EBACKEND,
                  text);
    schedule_rotate(s);
}

/* Asks the sentinel in use where the master is (one question at a time). */
static void ask(struct sb *s)
{
    if (s->asking || !s->q.connected || s->closing)
        return;
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", s->cfg->sentinel_master};
    size_t len[] = {8, 23, strlen(s->cfg->sentinel_master)};
    /* Written by hiredis' write watcher (this may run inside a reply's
     * callback). */
    if (redis_link_send(&s->q, &s->ask, on_ask, s, 3, argv, len) == 0)
        s->asking = true;
}

/* Messages of the +switch-master channel, and its subscription. */
static void on_switch(redisAsyncContext *ac, void *r, void *priv)
{
    struct sb *s = ((struct redis_link *)ac->data)->hooks.arg;
    const redisReply *rep = r;
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = rep->element[0]->str;
    const redisReply *payload = rep->element[2];
    if (strcmp(kind, "subscribe") == 0) {
        redis_link_ready(&s->p);
        return;
    }
    if (strcmp(kind, "message") != 0 || payload->type != REDIS_REPLY_STRING)
        return;
    struct redis_addr to;
    int rc = sentinel_switch_parse(payload->str, payload->len, s->cfg->sentinel_master, &to);
    if (rc < 0) {
        log_warn("%s: +switch-master message not understood: %.*s", s->slabel,
                 (int)(payload->len < 200 ? payload->len : 200), payload->str);
        return;
    }
    if (rc == 1) {
        char from[400];
        snprintf(from, sizeof from, "+switch-master from %s", s->slabel);
        master_is(s, &to, from);
    }
}

static void sl_setup(void *arg, struct redis_link *l)
{
    struct sb *s = arg;
    if (l == &s->p)
        redisAsyncCommand(l->ac, on_switch, NULL, "SUBSCRIBE +switch-master");
}

static void sl_ready(void *arg, struct redis_link *l)
{
    struct sb *s = arg;
    if (l == &s->q) {
        s->failures = 0;
        s->health[s->cur].last_error = 0;
        s->health[s->cur].last_error_text[0] = '\0';
    } else {
        log_info("%s: subscribed to +switch-master", s->slabel);
        s->subscribed = true;
    }
    /* Also after the subscription: a switch may have come before it. */
    ask(s);
}

static void sl_error(void *arg, int code, const char *text)
{
    struct sb *s = arg;
    note_sentinel(s, code, text);
    schedule_rotate(s);
}

static void sl_down(void *arg, struct redis_link *l)
{
    struct sb *s = arg;
    if (l == &s->p)
        s->subscribed = false;
    schedule_rotate(s);
}

/* Opens the two links to the sentinel in use. */
static void start_links(struct sb *s)
{
    char a[300];
    snprintf(s->slabel, sizeof s->slabel, "sentinel %s",
             config_addr_str(sentinel_at(s, s->cur), a, sizeof a));
    struct redis_link_hooks hooks = {
        .arg = s, .setup = sl_setup, .ready = sl_ready, .error = sl_error, .down = sl_down};
    redis_link_init(&s->q, s->loop, &s->scfg, sentinel_at(s, s->cur), s->slabel, "query", 0,
                    &hooks);
    redis_link_init(&s->p, s->loop, &s->scfg, sentinel_at(s, s->cur), s->slabel, "+switch-master",
                    REDIS_LINK_USER_READY, &hooks);
    redis_link_start(&s->q);
    redis_link_start(&s->p);
}

/* The refresh and reask timers: ask the sentinel again. */
static void on_ask_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    ask(w->data);
}

/* ---- operations: passed to the master ---- */

static void op_done(void *arg, const struct backend_result *r)
{
    struct sop *o = arg;
    struct sb *s = o->s;
    s->pending--;
    struct backend_result res = *r;
    if (o->gen != s->gen) {
        /* Sent to a master given up since: its word counts for nothing. */
        res = (struct backend_result){.err = DLOCK_EUNAVAIL, .at = r->at};
    } else if (r->err == DLOCK_EREADONLY && s->m) {
        /* The master was demoted: the sentinels will name the new one. */
        abandon(s, "it answers READONLY: a replica now");
        ev_timer_stop(s->loop, &s->reask);
        ev_timer_set(&s->reask, 0.0, 0.0);
        ev_timer_start(s->loop, &s->reask);
    }
    if (o->cb)
        o->cb(o->arg, &res);
    free(o);
}

static void op_lookup_done(void *arg, int err, const struct backend_holder *h)
{
    struct sop *o = arg;
    struct sb *s = o->s;
    s->pending--;
    if (o->gen != s->gen) {
        err = DLOCK_EUNAVAIL;
        h = NULL;
    }
    o->lookup_cb(o->arg, err, h);
    free(o);
}

static struct sop *sop_new(struct sb *s, backend_cb cb, backend_lookup_cb lookup_cb, void *arg)
{
    struct sop *o = malloc(sizeof *o);
    if (o)
        *o = (struct sop){.s = s, .gen = s->gen, .cb = cb, .lookup_cb = lookup_cb, .arg = arg};
    return o;
}

/* Any operation goes to the master of the moment as it is. */
static int sb_op(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct sb *s = (struct sb *)be;
    struct master *m = s->m;
    if (!m || s->closing)
        return DLOCK_EUNAVAIL;
    struct sop *o = sop_new(s, cb, NULL, arg);
    if (!o)
        return DLOCK_ENOMEM;
    int rc = m->be->ops->op(m->be, req, op_done, o);
    if (rc) {
        free(o);
        return rc;
    }
    s->pending++;
    return 0;
}

static void sb_leave(struct backend *be, const struct backend_req *req)
{
    struct master *m = ((struct sb *)be)->m;
    if (m && m->be->ops->leave)
        m->be->ops->leave(m->be, req);
}

static void sb_keepalive(struct backend *be, const char *waiter_id, uint32_t ttl_ms, uint64_t seq)
{
    struct master *m = ((struct sb *)be)->m;
    if (m && m->be->ops->keepalive)
        m->be->ops->keepalive(m->be, waiter_id, ttl_ms, seq);
}

/* A lookup, or (force) a forced release, at the master of the moment. */
static int sb_read(struct backend *be, bool force, const char *name, size_t len,
                   backend_lookup_cb cb, void *arg)
{
    struct sb *s = (struct sb *)be;
    struct master *m = s->m;
    if (!m || s->closing)
        return DLOCK_EUNAVAIL;
    struct sop *o = sop_new(s, NULL, cb, arg);
    if (!o)
        return DLOCK_ENOMEM;
    int rc = force ? m->be->ops->force(m->be, name, len, op_lookup_done, o)
                   : m->be->ops->lookup(m->be, name, len, op_lookup_done, o);
    if (rc) {
        free(o);
        return rc;
    }
    s->pending++;
    return 0;
}

static int sb_lookup(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                     void *arg)
{
    return sb_read(be, false, name, len, cb, arg);
}

static int sb_force(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    return sb_read(be, true, name, len, cb, arg);
}

/* To the master of the moment. The master given up took its subscriptions
 * along; the new one's notice link says when it is up (m_subscribed), and
 * the core asks it for every name then. */
static int sb_watch(struct backend *be, const char *name, size_t len, bool on)
{
    struct master *m = ((struct sb *)be)->m;
    return m ? m->be->ops->watch(m->be, name, len, on) : 0;
}

static void sb_flush(struct backend *be)
{
    struct sb *s = (struct sb *)be;
    if (s->m)
        s->m->be->ops->flush(s->m->be);
}

static size_t sb_pending(const struct backend *be)
{
    return ((const struct sb *)be)->pending;
}

/* The master first, then one entry per sentinel ("sentinel ADDR"): connected
 * and subscribed (to +switch-master) for the one in use. */
static size_t sb_nodes(const struct backend *be, struct backend_node *out, size_t max)
{
    const struct sb *s = (const struct sb *)be;
    size_t n = 0;
    if (max > 0) {
        if (s->m) {
            s->m->be->ops->nodes(s->m->be, out, 1);
        } else {
            memset(out, 0, sizeof *out);
            snprintf(out->addr, sizeof out->addr, "master %s (not known)", s->cfg->sentinel_master);
            out->last_error = s->master_error;
            memcpy(out->last_error_text, s->master_error_text, sizeof out->last_error_text);
        }
        n = 1;
    }
    for (unsigned i = 0; i < s->cfg->nnodes && n < max; i++, n++) {
        struct backend_node *o = &out[n];
        char a[300];
        memset(o, 0, sizeof *o);
        snprintf(o->addr, sizeof o->addr, "sentinel %s",
                 config_addr_str(sentinel_at(s, i), a, sizeof a));
        if (i == s->cur) {
            o->connected = s->q.connected;
            o->subscribed = s->subscribed;
            o->last_rtt_ns = s->q.last_rtt;
        }
        o->last_error = s->health[i].last_error;
        memcpy(o->last_error_text, s->health[i].last_error_text, sizeof o->last_error_text);
    }
    return 1 + s->cfg->nnodes;
}

static void sb_destroy(struct backend *be)
{
    struct sb *s = (struct sb *)be;
    s->closing = true;
    ev_timer_stop(s->loop, &s->refresh);
    ev_timer_stop(s->loop, &s->rotate);
    ev_timer_stop(s->loop, &s->reask);
    redis_link_close(&s->q);
    redis_link_close(&s->p);
    /* The master too: its commands in flight are answered (with an error)
     * while s still stands; the operations refuse from now on. */
    if (s->m) {
        s->m->next = s->dying;
        s->dying = s->m;
        s->m = NULL;
    }
    on_reap(s->loop, &s->reap, 0);
    ev_timer_stop(s->loop, &s->reap);
    free(s);
}

/* The sentinels' links: cfg with the sentinels' credentials and database
 * 0, copied anew at a reload (they read it when they next connect). */
static void sentinel_cfg(struct sb *s)
{
    s->scfg = *s->cfg;
    snprintf(s->scfg.redis_user, sizeof s->scfg.redis_user, "%s", s->cfg->sentinel_user);
    snprintf(s->scfg.redis_password, sizeof s->scfg.redis_password, "%s",
             s->cfg->sentinel_password);
    s->scfg.redis_db = 0;
}

/* A reload: the sentinels' links take the new settings, and the periodic
 * question its new period. */
static void sb_reconfigured(struct backend *b)
{
    struct sb *s = (struct sb *)b;
    sentinel_cfg(s);
    double every = s->cfg->topology_refresh_ms / 1000.0;
    if (s->closing || s->refresh.repeat == every)
        return;
    ev_timer_stop(s->loop, &s->refresh);
    ev_timer_set(&s->refresh, every, every);
    ev_timer_start(s->loop, &s->refresh);
}

static const struct backend_ops sb_ops = {
    .op = sb_op,
    .watch = sb_watch,
    .leave = sb_leave,
    .keepalive = sb_keepalive,
    .lookup = sb_lookup,
    .force = sb_force,
    .flush = sb_flush,
    .pending = sb_pending,
    .nodes = sb_nodes,
    .reconfigured = sb_reconfigured,
    .destroy = sb_destroy,
};

struct backend *backend_sentinel_new(struct ev_loop *loop, const struct config *cfg,
                                     const struct backend_events *events)
{
    struct sb *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base.ops = &sb_ops;
    s->base.kinds = BACKEND_REDIS_KINDS;
    s->loop = loop;
    s->cfg = cfg;
    s->ev = *events;
    /* The sentinels' links log in with the sentinels' credentials, and
     * select no database (a sentinel has none). */
    sentinel_cfg(s);
    note_master_error(s, DLOCK_EUNAVAIL, "no sentinel has named it yet");
    double every = cfg->topology_refresh_ms / 1000.0;
    ev_timer_init(&s->refresh, on_ask_timer, every, every);
    ev_timer_init(&s->rotate, on_rotate, 0.0, 0.0);
    ev_timer_init(&s->reap, on_reap, 0.0, 0.0);
    ev_timer_init(&s->reask, on_ask_timer, 0.0, 0.0);
    s->refresh.data = s->rotate.data = s->reap.data = s->reask.data = s;
    ev_timer_start(loop, &s->refresh);
    log_info("sentinel mode: master %s, %u sentinel%s", cfg->sentinel_master, cfg->nnodes,
             cfg->nnodes == 1 ? "" : "s");
    start_links(s);
    return &s->base;
}
