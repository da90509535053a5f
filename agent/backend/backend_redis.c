/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_redis.c -- single-node Redis backend: one pipelined command
 * link (redis_link.c: set-up, reconnection with backoff and jitter, the
 * command watchdog) and one notice link (notice_link.c: a channel per
 * watched name), the Lua scripts of scripts.h called with EVALSHA (each
 * acquire and renewal followed by WAIT when wait_replicas asks for
 * replicas), and the node's
 * health: its run id, its persistence and the exclusion after a restart
 * (quorum mode), round-trip time and last error. */
#include "backend_redis.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "keys.h"
#include "log.h"
#include "notice_link.h"
#include "quorum.h"
#include "redis_link.h"
#include "replies.h"
#include "scripts.h"
#include "wire.h"
#include "text.h"
#include "util.h"

/* Where the WAIT after an acquire or renewal is (wait_replicas). */
enum { W_NONE, W_SENT, W_UNSENT };

/* A command in flight on the command connection. */
struct rcmd {
    struct redis_link_cmd lc; /* in flight on the command link */
    TAILQ_ENTRY(rcmd) q;      /* while it waits for room in the pipeline */
    backend_cb cb;
    backend_lookup_cb lookup_cb; /* instead of cb, for a lookup */
    void *arg;
    uint8_t script; /* enum script_id */
    bool retried;   /* already re-sent with EVAL after NOSCRIPT */
    /* wait_replicas: the WAIT sent right after the script (W_SENT), or that
     * could not be sent (W_UNSENT: the write is reported as unconfirmed). */
    uint8_t wait;
    bool answered;              /* the script's reply is in (kept below until WAIT answers) */
    bool resend;                /* NOSCRIPT: send the script again once the WAIT answered */
    struct script_result s_res; /* the script's reply, reported with the WAIT's */
    char s_text[160]; /* the script's error reply (a redirect), reported with the WAIT's */
    struct redis_link_cmd wait_lc; /* the WAIT in flight */
    /* The request, its strings held below: the command is built from it
     * when it is sent. */
    struct backend_req req;
    char token[33];
    char waiter_id[BACKEND_WAITER_ID_MAX + 1];
    char strs[]; /* the name, NUL-terminated, then the holder record */
};

struct rb {
    struct backend base;
    struct ev_loop *loop;
    const struct config *cfg;
    const struct redis_addr *addr;
    char label[320]; /* "redis" or, in quorum mode, "redis ADDR", for logs */
    struct backend_events ev;
    struct redis_link cmd;
    /* Commands waiting for room in the pipeline (PIPELINE_MAX): renewals,
     * releases and fences first, then acquires and lookups. */
    TAILQ_HEAD(, rcmd) queue[2];
    size_t queued;
    struct notice_link *notices;
    char sha[SCRIPT_COUNT][41]; /* empty until SCRIPT LOAD answered */
    struct script_ctx sctx;     /* what every command adds: the prefix, the mode */
    size_t prefix_len;
    bool closing;
    bool sharded; /* Redis Cluster: sharded pub/sub */
    int last_error;
    char last_error_text[400];
    uint64_t excluded_until;
    char run_id[41];
    ev_timer join;        /* at the end of the exclusion, to say so */
    uint8_t link_persist; /* P_* bits: what CONFIG GET said on this command link */
    bool durable;         /* appendonly yes, appendfsync always (quorum mode) */
    bool config_refused;  /* CONFIG GET was refused once: logged then only */
    bool check_master;    /* sentinel mode: ROLE must say master (redis_node_opts) */
    void (*not_master)(void *arg, const char *role);
    void *not_master_arg;
};

/* The answers of CONFIG GET appendonly and appendfsync. */
enum { P_AOF = 1, P_ALWAYS = 2, P_REFUSED = 4 };

static void on_script_loaded(redisAsyncContext *ac, void *r, void *priv);
static void note_server(struct rb *b, const redisReply *rep);

/* The backend of a link's hiredis context. */
static struct rb *rb_of(const redisAsyncContext *ac)
{
    return ((const struct redis_link *)ac->data)->hooks.arg;
}

static int cmd_send(struct rb *b, struct rcmd *c);

static void note_error(struct rb *b, int code, const char *text)
{
    b->last_error = code;
    snprintf(b->last_error_text, sizeof b->last_error_text, "%s", text);
}

/* The end of a command: its callback, with its reply sr (or err; text is
 * the error reply's). */
static void cmd_done(struct rb *b, struct rcmd *c, int err, const char *text,
                     const struct script_result *sr, uint64_t at)
{
    if (script_table[c->script].lookup && c->lookup_cb) {
        c->lookup_cb(c->arg, err ? err : DLOCK_EBACKEND, NULL);
    } else if (script_table[c->script].lookup && c->cb) {
        /* A lookup sent as an operation (Redis Cluster's, which follows
         * redirects): without a holder it failed. */
        struct backend_result res = script_backend_result(sr, err ? err : DLOCK_EBACKEND, text, at);
        c->cb(c->arg, &res);
    } else if (c->cb) {
        struct backend_result res = script_backend_result(sr, err, text, at);
        c->cb(c->arg, &res);
    }
    free(c);
}

/* The end of a command that got no answer. */
static void cmd_fail(struct rb *b, struct rcmd *c, int err, uint64_t at)
{
    cmd_done(b, c, err, NULL, &(struct script_result){.err = err}, at);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct rb *b = rb_of(ac);
    struct rcmd *c = priv;
    redisReply *rep = r;
    uint64_t at = redis_link_answered(&b->cmd, &c->lc, rep);
    struct script_result sr;
    struct script_holders holders;
    script_decode(c->script, rep, &sr, &holders);
    int err = sr.err;
    const char *text = sr.text;
    if (sr.kind == SR_NOSCRIPT && !c->retried) {
        /* The server lost its script cache (restart, SCRIPT FLUSH): send
         * the script itself, which loads it again. Not a lost lease. */
        b->sha[c->script][0] = '\0';
        redisAsyncCommand(b->cmd.ac, on_script_loaded, (void *)(intptr_t)c->script,
                          "SCRIPT LOAD %s", script_table[c->script].src);
        c->retried = true;
        if (c->wait == W_SENT) {
            /* Its WAIT is still to answer: the script goes again after it. */
            c->resend = true;
            return;
        }
        if (cmd_send(b, c) == 0)
            return;
        err = DLOCK_EUNAVAIL;
        text = NULL;
    } else if (sr.kind == SR_REDIRECT) {
        /* Redis Cluster moves the slot: the cluster backend follows. */
        log_debug("%s: %s", b->label, text);
    } else if (sr.kind == SR_ERROR || sr.kind == SR_NOSCRIPT) {
        note_error(b, err, text);
        log_warn("%s: %s", b->label, text);
    } else if (sr.kind == SR_HOLDER) {
        if (c->lookup_cb) {
            c->lookup_cb(c->arg, 0, &holders.holder);
        } else if (c->cb) {
            struct backend_result res = {.at = at, .holder = &holders.holder};
            c->cb(c->arg, &res);
        }
        free(c);
        return;
    } else if (sr.kind == SR_UNEXPECTED) {
        note_error(b, err, "unexpected reply type");
        log_warn("%s: unexpected reply type %d", b->label, rep->type);
    }
    if (c->wait == W_SENT) {
        /* The WAIT behind it says whether the write counts. */
        c->answered = true;
        c->s_res = sr;
        c->s_res.err = err;
        c->s_res.text = NULL;
        snprintf(c->s_text, sizeof c->s_text, "%s", text ? text : "");
        return;
    }
    if (c->wait == W_UNSENT && !err && sr.wrote) {
        err = DLOCK_EUNAVAIL;
        note_error(b, err, "WAIT could not be sent");
        log_warn("%s: WAIT could not be sent after the %s of %s: not confirmed", b->label,
                 script_table[c->script].what, c->req.name);
    }
    cmd_done(b, c, err, text, &sr, at);
}

/* WAIT's answer, after the acquire or renewal it follows: the write is
 * reported done only when at least wait_replicas replicas acknowledged it,
 * else as a failure (DLOCK_EUNAVAIL): the core then withdraws the acquire,
 * or treats the renewal as failed (JEOPARDY, retried until the deadline). */
static void on_wait(redisAsyncContext *ac, void *r, void *priv)
{
    struct rb *b = rb_of(ac);
    struct rcmd *c = priv;
    redisReply *rep = r;
    uint64_t at = redis_link_answered(&b->cmd, &c->wait_lc, rep);
    c->wait = W_NONE;
    if (c->resend && rep) {
        c->resend = false;
        if (cmd_send(b, c) == 0)
            return;
    }
    int err = c->answered ? c->s_res.err : DLOCK_EUNAVAIL;
    const char *what = script_table[c->script].what;
    if (!rep) {
        if (!err)
            err = DLOCK_EUNAVAIL; /* the link is going away */
    } else if (err || !c->s_res.wrote) {
        /* Nothing written (taken, not ours) or failed: WAIT adds nothing. */
    } else if (rep->type == REDIS_REPLY_ERROR) {
        err = redis_error_code(rep->str);
        note_error(b, err, rep->str);
        log_warn("%s: WAIT after the %s of %s refused: %s", b->label, what, c->req.name, rep->str);
    } else if (rep->type != REDIS_REPLY_INTEGER || rep->integer < b->cfg->wait_replicas) {
        /* Named in the answer, not as "unreachable": the write took, and
         * Redis answers. */
        snprintf(c->s_text, sizeof c->s_text,
                 "WAIT: %lld of %u replicas acknowledged within %u ms (wait_replicas)",
                 rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1ll, b->cfg->wait_replicas,
                 b->cfg->wait_timeout_ms);
        err = DLOCK_EUNAVAIL;
        note_error(b, err, c->s_text);
        log_warn("%s: %s: the %s of %s is not confirmed", b->label, c->s_text, what, c->req.name);
    }
    cmd_done(b, c, err, c->s_text[0] ? c->s_text : NULL, &c->s_res, at);
}

static struct slot_tags slot_tags; /* built once, by the first backend */
static bool slot_tags_ready;

/* Sends c with EVALSHA when the script's digest is known, else with EVAL. */
static int cmd_send(struct rb *b, struct rcmd *c)
{
    if (!b->cmd.connected || b->closing)
        return DLOCK_EUNAVAIL;
    struct script_args a;
    int rc = script_command(c->script, b->sha[c->script], &b->sctx, &c->req, c->req.limit, &a);
    if (rc)
        return rc;
    /* Pipelined right before the script, on the same connection: an ASK
     * redirect's target serves it. Its +OK needs no callback. */
    if (c->req.asking && redisAsyncCommand(b->cmd.ac, NULL, NULL, "ASKING") != REDIS_OK)
        return DLOCK_EUNAVAIL;
    rc = redis_link_send(&b->cmd, &c->lc, on_reply, c, a.n, a.v, a.len);
    c->answered = false;
    c->s_res = (struct script_result){0};
    c->s_text[0] = '\0';
    c->wait = W_NONE;
    if (rc == 0 && b->cfg->wait_replicas && script_table[c->script].wait) {
        /* On the same connection, so it waits for this write: the grant or
         * renewal counts once that many replicas have it. */
        char n[16], ms[16];
        const char *argv[3] = {"WAIT", n, ms};
        size_t len[3] = {4, (size_t)snprintf(n, sizeof n, "%u", b->cfg->wait_replicas),
                         (size_t)snprintf(ms, sizeof ms, "%u", b->cfg->wait_timeout_ms)};
        c->wait = redis_link_send(&b->cmd, &c->wait_lc, on_wait, c, 3, argv, len) == 0 ? W_SENT
                                                                                       : W_UNSENT;
    }
    return rc;
}

/* ---- the pipeline ---- */

/* Commands (and WAITs) in flight on the command link at most. Past it,
 * commands wait in the agent, where a renewal goes ahead of every acquire:
 * a flood of acquires fills this queue, not Redis' input ahead of the
 * renewals that keep leases alive. Deep enough that pipelining is never the
 * limit (a batch this size takes Redis a few ms). */
#define PIPELINE_MAX 256

/* The queue a command waits in: 0 for what keeps or ends a lease. */
static int queue_of(const struct rcmd *c)
{
    return !script_table[c->script].urgent;
}

/* Sends the commands that wait, in queue order, while there is room; fails
 * them when the link is down (from the loop, never inside a call). */
static void pump(struct rb *b)
{
    for (int i = 0; i < 2; i++) {
        struct rcmd *c;
        while (b->queued && (c = TAILQ_FIRST(&b->queue[i]))) {
            bool up = b->cmd.connected && !b->closing;
            if (up && b->cmd.pending >= PIPELINE_MAX)
                return;
            TAILQ_REMOVE(&b->queue[i], c, q);
            b->queued--;
            int rc = up ? cmd_send(b, c) : DLOCK_EUNAVAIL;
            if (rc)
                cmd_fail(b, c, rc, now_ns());
        }
    }
}

/* Sends c now when nothing waits and the pipeline has room, else queues it. */
static int cmd_submit(struct rb *b, struct rcmd *c)
{
    if (!b->queued && b->cmd.pending < PIPELINE_MAX)
        return cmd_send(b, c);
    TAILQ_INSERT_TAIL(&b->queue[queue_of(c)], c, q);
    b->queued++;
    return 0;
}

/* Sends script s for req, whose strings are copied into the command. */
static int submit(struct backend *be, enum script_id s, const struct backend_req *req,
                  backend_cb cb, backend_lookup_cb lookup_cb, void *arg)
{
    struct rb *b = (struct rb *)be;
    if (!b->cmd.connected || b->closing)
        return DLOCK_EUNAVAIL;
    const char *holder = req->holder ? req->holder : "";
    size_t hlen = strlen(holder);
    struct rcmd *c = malloc(sizeof *c + req->len + 1 + hlen + 1);
    if (!c)
        return DLOCK_ENOMEM;
    c->cb = cb;
    c->lookup_cb = lookup_cb;
    c->arg = arg;
    c->script = (uint8_t)s;
    c->retried = false;
    c->resend = false;
    c->req = *req;
    memcpy(c->strs, req->name, req->len);
    c->strs[req->len] = '\0';
    c->req.name = c->strs;
    memcpy(c->strs + req->len + 1, holder, hlen + 1);
    c->req.holder = c->strs + req->len + 1;
    memcpy(c->token, req->token ? req->token : "", req->token ? 32 : 1);
    c->token[32] = '\0';
    c->req.token = req->token ? c->token : NULL;
    snprintf(c->waiter_id, sizeof c->waiter_id, "%s", req->waiter_id ? req->waiter_id : "");
    c->req.waiter_id = req->waiter_id ? c->waiter_id : NULL;
    int rc = cmd_submit(b, c);
    if (rc)
        free(c);
    return rc;
}

/* A lookup or an operator's forced release: the script for the name's format. */
static enum script_id read_script(const struct rb *b, enum backend_op op, const char *name,
                                  size_t len)
{
    bool sem = formats_of(&b->cfg->formats, name, len) == KEY_FORMAT_REDISSON_SEM;
    if (op == BACKEND_FORCE)
        return sem ? SCRIPT_FORCE_SEM : SCRIPT_FORCE;
    return sem ? SCRIPT_LOOKUP_SEM : SCRIPT_LOOKUP;
}

static int rb_lookup(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                     void *arg)
{
    struct rb *b = (struct rb *)be;
    struct backend_req req = {.name = name, .len = len};
    return submit(be, read_script(b, BACKEND_LOOKUP, name, len), &req, NULL, cb, arg);
}

static int rb_force(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    struct rb *b = (struct rb *)be;
    struct backend_req req = {.op = BACKEND_FORCE, .name = name, .len = len};
    return submit(be, read_script(b, BACKEND_FORCE, name, len), &req, NULL, cb, arg);
}

static int rb_op(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    static const enum script_id exclusive[] = {[BACKEND_ACQUIRE] = SCRIPT_ACQUIRE,
                                               [BACKEND_RENEW] = SCRIPT_RENEW,
                                               [BACKEND_RELEASE] = SCRIPT_RELEASE,
                                               [BACKEND_FENCE] = SCRIPT_FENCE};
    static const enum script_id counted[] = {[BACKEND_ACQUIRE] = SCRIPT_ACQUIRE_COUNTED,
                                             [BACKEND_RENEW] = SCRIPT_RENEW_COUNTED,
                                             [BACKEND_RELEASE] = SCRIPT_RELEASE_COUNTED,
                                             [BACKEND_FENCE] = SCRIPT_FENCE_COUNTED};
    static const enum script_id redisson[] = {[BACKEND_ACQUIRE] = SCRIPT_ACQUIRE_REDISSON,
                                              [BACKEND_RENEW] = SCRIPT_RENEW_REDISSON,
                                              [BACKEND_RELEASE] = SCRIPT_RELEASE_REDISSON,
                                              [BACKEND_FENCE] = SCRIPT_FENCE_REDISSON};
    static const enum script_id rw[] = {[BACKEND_ACQUIRE] = SCRIPT_ACQUIRE_RW,
                                        [BACKEND_RENEW] = SCRIPT_RENEW_RW,
                                        [BACKEND_RELEASE] = SCRIPT_RELEASE_RW,
                                        [BACKEND_FENCE] = SCRIPT_FENCE_RW};
    static const enum script_id sem[] = {[BACKEND_ACQUIRE] = SCRIPT_ACQUIRE_SEM,
                                         [BACKEND_RENEW] = SCRIPT_RENEW_SEM,
                                         [BACKEND_RELEASE] = SCRIPT_RELEASE_SEM,
                                         [BACKEND_FENCE] = SCRIPT_FENCE_SEM};
    struct rb *b = (struct rb *)be;
    if (req->op == BACKEND_LOOKUP || req->op == BACKEND_FORCE) {
        if (!cb)
            return DLOCK_EINVAL;
        return submit(be, read_script(b, req->op, req->name, req->len), req, cb, NULL, arg);
    }
    if ((unsigned)req->op > BACKEND_FENCE)
        return DLOCK_EBACKEND;
    enum key_format f = formats_of(&b->cfg->formats, req->name, req->len);
    if (!kind_in_format(req->kind, f))
        return DLOCK_EKIND; /* the core refuses it first */
    const enum script_id *by_op = f == KEY_FORMAT_REDISSON       ? redisson
                                  : f == KEY_FORMAT_REDISSON_RW  ? rw
                                  : f == KEY_FORMAT_REDISSON_SEM ? sem
                                  : req->kind == LOCK_EXCLUSIVE  ? exclusive
                                                                 : counted;
    return submit(be, by_op[req->op], req, cb, NULL, arg);
}

static bool rb_counts(const struct backend *be, uint64_t now)
{
    const struct rb *b = (const struct rb *)be;
    return now >= b->excluded_until;
}

static size_t rb_pending(const struct backend *be)
{
    const struct rb *b = (const struct rb *)be;
    return b->cmd.pending + b->queued;
}

static size_t rb_nodes(const struct backend *be, struct backend_node *out, size_t max)
{
    const struct rb *b = (const struct rb *)be;
    if (max == 0)
        return 1;
    memset(out, 0, sizeof *out);
    config_addr_str(b->addr, out->addr, sizeof out->addr);
    out->connected = b->cmd.connected;
    out->subscribed = notice_link_up(b->notices);
    out->last_rtt_ns = b->cmd.last_rtt;
    out->command = b->cmd.rtt;
    out->last_error = b->last_error;
    memcpy(out->last_error_text, b->last_error_text, sizeof out->last_error_text);
    out->excluded_until = b->excluded_until;
    memcpy(out->run_id, b->run_id, sizeof out->run_id);
    out->durable = b->durable;
    return 1;
}

/* ---- connection set-up ---- */

/* CONFIG GET appendonly / appendfsync (priv: which), sent before INFO on
 * every command link in quorum mode. A refusal (an ACL without CONFIG, a
 * renamed command) or an unknown answer leaves the node one that may lose
 * writes: the safe side. */
static void on_persistence(redisAsyncContext *ac, void *r, void *priv)
{
    struct redis_link *l = ac->data;
    struct rb *b = l->hooks.arg;
    const redisReply *rep = r;
    const char *param = priv;
    if (!rep || redis_link_failed(l))
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        if (!b->config_refused)
            log_warn("%s: CONFIG GET %s refused (%s): taken for a node that may lose acknowledged "
                     "writes, kept out of quorums after a (re)start",
                     b->label, param, rep->str);
        b->config_refused = true;
        b->link_persist |= P_REFUSED;
        return;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *v = rep->element[1]->str;
    if (strcmp(param, "appendonly") == 0 && strcmp(v, "yes") == 0)
        b->link_persist |= P_AOF;
    else if (strcmp(param, "appendfsync") == 0 && strcmp(v, "always") == 0)
        b->link_persist |= P_ALWAYS;
}

/* The end of an exclusion: logged, and the waiters that ride out a missing
 * quorum try again at once. ev's timers run on its own clock, which may be a
 * little behind ours or (after a suspend) far behind: checked again here. */
static void on_join(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct rb *b = w->data;
    uint64_t now = now_ns();
    if (now < b->excluded_until) {
        ev_timer_set(w, (double)(b->excluded_until - now) / 1e9, 0.0);
        ev_timer_start(loop, w);
        return;
    }
    log_info("%s: joins quorums now", b->label);
    if (b->cmd.connected)
        b->ev.on_ready(b->ev.arg);
}

/* Keeps the node out of quorums for excl_ns from now (quorum_exclusion_ns():
 * until max_ttl_ms after its start, up_s seconds ago by its uptime, or now
 * after a new run id). */
static void exclude(struct rb *b, uint64_t excl_ns, uint64_t up_s, bool restarted)
{
    uint64_t now = now_ns(), until = now + excl_ns;
    if (until > b->excluded_until)
        b->excluded_until = until;
    unsigned long long in_s = (b->excluded_until - now + NS_PER_SEC - 1) / NS_PER_SEC;
    if (restarted)
        log_warn("%s: new run id (restarted or replaced); excluded from quorums: joins them in "
                 "%llu s",
                 b->label, in_s);
    else
        log_warn("%s: started %llu s ago; excluded from quorums: joins them in %llu s", b->label,
                 (unsigned long long)up_s, in_s);
    ev_timer_stop(b->loop, &b->join);
    ev_timer_set(&b->join, (double)(b->excluded_until - now) / 1e9, 0.0);
    ev_timer_start(b->loop, &b->join);
}

/* INFO server, on every new command link: in quorum mode, the restart
 * exclusion of quorum_exclusion_ns() (docs/quorum.md), from the run id, the
 * uptime and the persistence read just before. */
static void note_server(struct rb *b, const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_STATUS)
        return;
    char run_id[41], uptime[24];
    text_info_field(rep->str, "run_id", run_id, sizeof run_id);
    text_info_field(rep->str, "uptime_in_seconds", uptime, sizeof uptime);
    bool restarted = b->run_id[0] && strcmp(run_id, b->run_id) != 0;
    bool first = !b->run_id[0];
    bool was_durable = b->durable;
    b->durable = (b->link_persist & (P_AOF | P_ALWAYS | P_REFUSED)) == (P_AOF | P_ALWAYS);
    memcpy(b->run_id, run_id, sizeof run_id);
    if (restarted)
        log_warn("%s: restarted or replaced (run id %s, up %s s)", b->label, run_id, uptime);
    if (b->cfg->mode != REDIS_MODE_QUORUM || !(first || restarted))
        return;
    uint64_t up_s = strtoull(uptime, NULL, 10);
    uint64_t excl_ns =
        quorum_exclusion_ns(first, restarted, b->durable, was_durable, up_s, b->cfg->max_ttl_ms);
    if (b->durable && (first || was_durable))
        log_info("%s: appendonly yes, appendfsync always: a restart loses no acknowledged write, "
                 "no restart exclusion applies",
                 b->label);
    else if (excl_ns)
        exclude(b, excl_ns, up_s, restarted);
}

/* INFO server, part of the command link's set-up: answered before the link
 * is ready. Only quorum mode needs the run id; a single node may keep INFO
 * to itself. */
static void on_info(redisAsyncContext *ac, void *r, void *priv)
{
    struct redis_link *l = ac->data;
    struct rb *b = l->hooks.arg;
    const redisReply *rep = r;
    if (!rep || redis_link_failed(l))
        return;
    if (rep->type == REDIS_REPLY_ERROR && b->cfg->mode != REDIS_MODE_QUORUM) {
        log_warn("%s: INFO refused (%s); its restarts go unnoticed", b->label, rep->str);
    } else if (rep->type == REDIS_REPLY_ERROR) {
        log_error("%s: INFO refused: %s", b->label, rep->str);
        note_error(b, redis_error_code(rep->str), rep->str);
        redis_link_fail(l, "setup refused");
    } else {
        note_server(b, rep);
    }
}

/* ROLE, part of the command link's set-up in sentinel mode: a node that
 * is no longer the master (a failover demoted it, or the sentinels' answer
 * is stale) gets no command; its owner asks the sentinels again. */
static void on_role(redisAsyncContext *ac, void *r, void *priv)
{
    struct redis_link *l = ac->data;
    struct rb *b = l->hooks.arg;
    const redisReply *rep = r;
    if (!rep || redis_link_failed(l))
        return;
    const char *role = "unknown";
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
        rep->element[0]->type == REDIS_REPLY_STRING)
        role = rep->element[0]->str;
    if (strcmp(role, "master") == 0)
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        log_error("%s: ROLE refused (%s): cannot tell whether it is the master", b->label,
                  rep->str);
        note_error(b, redis_error_code(rep->str), rep->str);
    } else {
        char text[160];
        snprintf(text, sizeof text, "ROLE says %s, not master", role);
        log_warn("%s: %s", b->label, text);
        note_error(b, DLOCK_EREADONLY, text);
    }
    redis_link_fail(l, "not the master");
    if (b->not_master)
        b->not_master(b->not_master_arg, role);
}

static void on_script_loaded(redisAsyncContext *ac, void *r, void *priv)
{
    struct rb *b = rb_of(ac);
    redisReply *rep = r;
    int s = (int)(intptr_t)priv;
    if (rep && rep->type == REDIS_REPLY_STRING && rep->len == 40)
        memcpy(b->sha[s], rep->str, 41);
}

/* ---- the links ---- */

/* The set-up of the command link, after AUTH and SELECT: the node's
 * persistence (quorum mode), its run id and the scripts. */
static void link_setup(void *arg, struct redis_link *l)
{
    struct rb *b = arg;
    redisAsyncContext *ac = l->ac;
    if (b->cfg->mode == REDIS_MODE_QUORUM) {
        /* Answered before INFO, whose reply decides on the exclusion. */
        b->link_persist = 0;
        redisAsyncCommand(ac, on_persistence, "appendonly", "CONFIG GET appendonly");
        redisAsyncCommand(ac, on_persistence, "appendfsync", "CONFIG GET appendfsync");
    }
    if (b->check_master)
        redisAsyncCommand(ac, on_role, NULL, "ROLE");
    redisAsyncCommand(ac, on_info, NULL, "INFO server");
    for (int s = 0; s < SCRIPT_COUNT; s++)
        redisAsyncCommand(ac, on_script_loaded, (void *)(intptr_t)s, "SCRIPT LOAD %s",
                          script_table[s].src);
}

static void link_ready(void *arg, struct redis_link *l)
{
    struct rb *b = arg;
    b->ev.on_ready(b->ev.arg);
}

static void link_error(void *arg, int code, const char *text)
{
    note_error(arg, code, text);
}

/* The command link stopped answering: the server is hung, and the notice
 * link with it. */
static void link_stalled(void *arg, struct redis_link *l)
{
    struct rb *b = arg;
    notice_link_drop(b->notices);
}

/* ---- release notices ---- */

/* HDEL on the command link, unanswered (as ASKING): the entry lapses by
 * itself when this is lost. */
static void rb_leave(struct backend *be, const struct backend_req *req)
{
    struct rb *b = (struct rb *)be;
    if (!b->cmd.connected || b->closing || !req->waiter_id ||
        b->prefix_len + req->len > CONFIG_PREFIX_MAX + WIRE_MAX_NAME)
        return;
    char key[SCRIPT_KEY_MAX + 1], rec[SCRIPT_SIDE_KEY_MAX];
    size_t klen = script_lock_key(&b->sctx, req->name, req->len, key);
    size_t n = side_key_of(b->cfg->prefix, b->prefix_len, key, klen, WAITING_SUFFIX, rec);
    redisAsyncCommand(b->cmd.ac, NULL, NULL, "HDEL %b %s", rec, n, req->waiter_id);
}

/* SET of the agent's keep-alive key to the keep-alive's sequence number
 * (which a grant on release reports back), on the command connection,
 * ahead of the acquires queued in this loop turn, unanswered: lost with the
 * connection, the agent's bound entries stop counting until the next. */
static void rb_keepalive(struct backend *be, const char *waiter_id, uint32_t ttl_ms, uint64_t seq)
{
    struct rb *b = (struct rb *)be;
    if (!b->cmd.connected || b->closing || !waiter_id)
        return;
    char key[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1];
    size_t n = keepalive_key(b->cfg->prefix, b->prefix_len, waiter_id, key);
    redisAsyncCommand(b->cmd.ac, NULL, NULL, "SET %b %llu PX %u", key, n, (unsigned long long)seq,
                      (unsigned)ttl_ms);
}

static int rb_watch(struct backend *be, const char *name, size_t len, bool on)
{
    return notice_link_watch(((struct rb *)be)->notices, name, len, on);
}

static void on_notice(void *arg, const char *name, size_t len, const struct backend_grant *grant)
{
    struct rb *b = arg;
    b->ev.on_notice(b->ev.arg, name, len, grant);
}

static void on_subscribed(void *arg)
{
    struct rb *b = arg;
    b->ev.on_subscribed(b->ev.arg);
}

static void on_unsubscribed(void *arg)
{
    struct rb *b = arg;
    if (b->ev.on_unsubscribed)
        b->ev.on_unsubscribed(b->ev.arg);
}

static void on_unwatched(void *arg, const char *name, size_t len)
{
    struct rb *b = arg;
    if (b->ev.on_unwatched)
        b->ev.on_unwatched(b->ev.arg, name, len);
}

void backend_redis_unwatch_slots(struct backend *be, const uint8_t *slots)
{
    notice_link_unwatch_slots(((struct rb *)be)->notices, slots);
}

/* The commands queued during this loop turn go out in one write now,
 * rather than one turn later when hiredis' write watcher fires. */
static void rb_flush(struct backend *be)
{
    pump((struct rb *)be);
    redis_link_flush(&((struct rb *)be)->cmd);
    notice_link_flush(((struct rb *)be)->notices);
}

static void rb_destroy(struct backend *be)
{
    struct rb *b = (struct rb *)be;
    b->closing = true;
    pump(b); /* what waits is answered: the link is closing */
    ev_timer_stop(b->loop, &b->join);
    redis_link_close(&b->cmd);
    notice_link_free(b->notices);
    free(b);
}

static const struct backend_ops rb_ops = {
    .op = rb_op,
    .watch = rb_watch,
    .leave = rb_leave,
    .keepalive = rb_keepalive,
    .lookup = rb_lookup,
    .force = rb_force,
    .flush = rb_flush,
    .pending = rb_pending,
    .nodes = rb_nodes,
    .counts = rb_counts,
    .destroy = rb_destroy,
};

struct backend *backend_redis_new(struct ev_loop *loop, const struct config *cfg,
                                  const struct redis_addr *addr,
                                  const struct backend_events *events)
{
    return backend_redis_new_opts(loop, cfg, addr, NULL, events);
}

struct backend *backend_redis_new_opts(struct ev_loop *loop, const struct config *cfg,
                                       const struct redis_addr *addr,
                                       const struct redis_node_opts *opts,
                                       const struct backend_events *events)
{
    struct rb *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->base.ops = &rb_ops;
    b->base.kinds = BACKEND_REDIS_KINDS;
    TAILQ_INIT(&b->queue[0]);
    TAILQ_INIT(&b->queue[1]);
    b->loop = loop;
    b->cfg = cfg;
    b->addr = addr;
    b->ev = *events;
    b->sharded = opts && opts->sharded;
    if (opts) {
        b->check_master = opts->check_master;
        b->not_master = opts->not_master;
        b->not_master_arg = opts->arg;
    }
    if (opts && opts->label) {
        snprintf(b->label, sizeof b->label, "%s", opts->label);
    } else if (cfg->mode == REDIS_MODE_QUORUM) {
        char a[300];
        snprintf(b->label, sizeof b->label, "redis %s", config_addr_str(addr, a, sizeof a));
    } else {
        snprintf(b->label, sizeof b->label, "redis");
    }
    b->prefix_len = strlen(cfg->prefix);
    if (!slot_tags_ready) {
        slot_tags_build(&slot_tags);
        slot_tags_ready = true;
    }
    b->sctx = (struct script_ctx){.prefix = cfg->prefix,
                                  .prefix_len = b->prefix_len,
                                  .tags = &slot_tags,
                                  .sharded = b->sharded,
                                  .formats = &cfg->formats};
    struct notice_hooks nh = {.arg = b,
                              .notice = on_notice,
                              .subscribed = on_subscribed,
                              .down = on_unsubscribed,
                              .unwatched = on_unwatched,
                              .error = link_error};
    b->notices = notice_link_new(loop, cfg, addr, b->label, b->sharded, &nh);
    if (!b->notices) {
        free(b);
        return NULL;
    }
    struct redis_link_hooks hooks = {.arg = b,
                                     .setup = link_setup,
                                     .ready = link_ready,
                                     .error = link_error,
                                     .stalled = link_stalled};
    redis_link_init(&b->cmd, loop, cfg, addr, b->label, "command", REDIS_LINK_SELECT, &hooks);
    ev_timer_init(&b->join, on_join, 0.0, 0.0);
    b->join.data = b;
    redis_link_start(&b->cmd);
    return &b->base;
}
