/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_redis.c -- single-node Redis backend: one pipelined command
 * link (redis_link.c: set-up, reconnection with backoff and jitter, the
 * command watchdog) and one notice link (notice_link.c: a channel per
 * watched name), Lua scripts called with EVALSHA (each acquire and renewal
 * followed by WAIT when wait_replicas asks for replicas), and the node's
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
#include "wire.h"
#include "text.h"
#include "util.h"

enum script { S_ACQUIRE, S_RENEW, S_RELEASE, S_FENCE, S_LOOKUP, S_COUNT };

/* The lock key's value is the holder record, "TOKEN HOST PID UID COMM"
 * (docs/protocol.md): who holds it, for operators, without a key of its
 * own. The other scripts are given the token alone: LUA_OURS says whether
 * a value is the record of that token. (A value equal to the token is
 * ours too: the form of earlier versions.)
 *
 * Acquire: SET NX PX, and on success the fencing token: one more than the
 * high-water mark of the lock key's hash slot (KEYS[2], shared by every name
 * of the slot, kept without expiry), but never below the server's clock in
 * microseconds, so that it keeps rising after the mark was lost. In quorum
 * mode the floor is the agent's clock (ARGV[3]) rather than the server's, so
 * that the nodes usually agree on the token. The mark is read with pcall: a
 * foreign value of another type must not abort the script after SET NX took
 * the lock; and only a whole number in [0, 2^53) counts, the range Lua's
 * doubles hold exactly (our tokens, microseconds since 1970, are far below
 * it): anything else (1e30, inf, a fraction) reads as 0, or the token would
 * leave the range of a 64-bit reply. When taken: the holder's remaining
 * PTTL, negated. The token goes through string.format: Lua's own
 * number-to-string conversion keeps only 14 digits. */
#define LUA_MARK                                                                                   \
    "local function mark(k) local n = tonumber(redis.pcall('get', k)) "                            \
    "if type(n) == 'number' and n >= 0 and n < 9007199254740992 and n % 1 == 0 "                   \
    "then return n end return 0 end "
#define LUA_OURS                                                                                   \
    "local v = redis.call('get', KEYS[1]) "                                                        \
    "local ours = v == ARGV[1] or (v and string.sub(v, 1, 33) == ARGV[1] .. ' ') "
/* The waiting-hosts record (KEYS[3] of acquire): a hash of agent id ->
 * "SINCE EXPIRES", server times, SINCE in microseconds (in ms from earlier
 * versions, told apart by size: us_of()), EXPIRES in ms. queue_turn() drops
 * the expired entries and returns the id of the oldest live entry of
 * another agent when it is older than the caller's (ARGV[5]), else nil;
 * entries are ordered by SINCE, then by agent id, so that every host agrees
 * on which goes first. join() adds or refreshes the caller's entry for
 * ARGV[6] ms, keeping its SINCE (0: a try-once acquire, which does not
 * join). No entry lives longer than BACKEND_WAIT_ENTRY_MAX_MS: join() writes
 * no longer one, and queue_turn() drops one that claims more, so that no
 * agent's setting (nor an earlier version's) makes the other hosts wait
 * long for an agent that died. */
#define STRINGIFY(x)   #x
#define STRING_OF(x)   STRINGIFY(x)
#define WAIT_ENTRY_MAX STRING_OF(BACKEND_WAIT_ENTRY_MAX_MS)
#define LUA_QUEUE                                                                                  \
    "local us local function clock() if not us then local t = redis.call('time') "                 \
    "us = tonumber(t[1]) * 1000000 + tonumber(t[2]) end return us end "                            \
    "local me, queued = ARGV[5], false "                                                           \
    "local function us_of(v) local n = tonumber(v) if n and n < 1e14 then n = n * 1000 end "       \
    "return n end "                                                                                \
    "local function queue_turn() if redis.call('exists', KEYS[3]) == 0 then return nil end "       \
    "queued = true "                                                                               \
    "local now = math.floor(clock() / 1000) local all = redis.call('hgetall', KEYS[3]) "           \
    "local first, first_since for i = 1, #all, 2 do "                                              \
    "local since, exp = string.match(all[i + 1], '^(%d+) (%d+)$') "                                \
    "since = us_of(since) exp = tonumber(exp) "                                                    \
    "if not exp or exp <= now or exp > now + " WAIT_ENTRY_MAX " then "                             \
    "redis.call('hdel', KEYS[3], all[i]) "                                                         \
    "elseif all[i] ~= me and (not first or since < first_since or "                                \
    "(since == first_since and all[i] < first)) then "                                             \
    "first, first_since = all[i], since end end "                                                  \
    "if first then local mine = redis.call('hget', KEYS[3], me) "                                  \
    "if mine then local t = us_of(string.match(mine, '^(%d+)')) "                                  \
    "if t and (t < first_since or (t == first_since and me < first)) then return nil end end "     \
    "end "                                                                                         \
    "return first end "                                                                            \
    "local function join() local want = math.min(tonumber(ARGV[6]), " WAIT_ENTRY_MAX ") "          \
    "if want <= 0 then return end "                                                                \
    "local now = math.floor(clock() / 1000) "                                                      \
    "local mine = redis.call('hget', KEYS[3], me) "                                                \
    "local since = mine and string.match(mine, '^(%d+) ') or string.format('%d', clock()) "        \
    "redis.call('hset', KEYS[3], me, since .. ' ' .. string.format('%d', now + want)) "            \
    "if redis.call('pttl', KEYS[3]) < want then redis.call('pexpire', KEYS[3], want) end end "
static const char *const script_src[S_COUNT] = {
    /* Acquire: another host's turn (the oldest entry of the waiting-hosts
     * record is not ours) counts as taken, with no PTTL (0); else SET NX PX
     * of the value (ARGV[1]) for ARGV[2] ms, and on success leave the
     * record and make the token (ARGV[3]: the floor, see above). A waiting
     * caller that did not get the lock joins the record. The slot's mark is
     * raised to the token plus ARGV[4]: the tokens in between are the
     * agent's to hand over. */
    LUA_MARK LUA_QUEUE
    "if queue_turn() then join() return 0 end "
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "if queued then redis.call('hdel', KEYS[3], me) end "
    "local fence = tonumber(ARGV[3]) if not fence then fence = clock() end "
    "local last = mark(KEYS[2]) if last >= fence then fence = last + 1 end "
    "redis.call('set', KEYS[2], string.format('%d', fence + tonumber(ARGV[4]))) "
    "return fence end "
    "join() local t = redis.call('pttl', KEYS[1]) if t < 0 then t = 0 end return -t",
    /* Renew: compare-and-pexpire. */
    LUA_OURS "if ours then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0",
    /* Release: compare-and-delete, then tell the agents waiting for the
     * name on its own channel (ARGV[2], with sharded pub/sub when ARGV[4] is
     * 's') when some wait (the waiting-hosts record, KEYS[2], exists; on
     * Redis Cluster, where it is not named, always) and there is a channel
     * (none for the clean-up after an acquire that missed). The slot's
     * high-water mark stays. */
    LUA_OURS "if ours then redis.call('del', KEYS[1]) "
             "if ARGV[2] ~= '' and (not KEYS[2] or redis.call('exists', KEYS[2]) == 1) then "
             "if ARGV[4] == 's' then redis.call('spublish', ARGV[2], ARGV[3]) "
             "else redis.call('publish', ARGV[2], ARGV[3]) end end "
             "return 1 end return 0",
    /* Fence (quorum mode): while the key is ours, raise the slot's
     * high-water mark to the grant's token. */
    LUA_MARK LUA_OURS "if not ours then return 0 end "
                      "if mark(KEYS[2]) < tonumber(ARGV[2]) then "
                      "redis.call('set', KEYS[2], ARGV[2]) end return 1",
    /* Lookup (for operators): the token, the holder record, the PTTL. The
     * record is the value when it starts with a token (32 lowercase hex
     * characters and a space; any other value is a foreign client's, shown
     * whole); a separate record key is read too, for keys of earlier
     * versions. A value of another type than string reads as empty. */
    "local v = redis.pcall('get', KEYS[1]) local h = redis.pcall('get', KEYS[2]) "
    "if type(v) ~= 'string' then v = '' end if type(h) ~= 'string' then h = '' end "
    "local _, e = string.find(v, '^[0-9a-f]+ ') "
    "if h == '' and e == 33 then h = v v = string.sub(v, 1, 32) end "
    "return {v, h, redis.call('pttl', KEYS[1])}",
};

/* Where the WAIT after an acquire or renewal is (wait_replicas). */
enum { W_NONE, W_SENT, W_UNSENT };

/* A command in flight on the command connection. */
struct rcmd {
    struct redis_link_cmd lc; /* in flight on the command link */
    TAILQ_ENTRY(rcmd) q;      /* while it waits for room in the pipeline */
    backend_cb cb;
    backend_lookup_cb lookup_cb; /* instead of cb, for S_LOOKUP */
    void *arg;
    uint8_t script;
    bool retried; /* already re-sent with EVAL after NOSCRIPT */
    bool asking;  /* Redis Cluster: ASKING goes first */
    /* wait_replicas: the WAIT sent right after the script (W_SENT), or that
     * could not be sent (W_UNSENT: the write is reported as unconfirmed). */
    uint8_t wait;
    bool answered; /* the script's reply is in (kept below until WAIT answers) */
    bool resend;   /* NOSCRIPT: send the script again once the WAIT answered */
    int s_err;     /* the script's reply, reported with the WAIT's */
    long long s_result;
    char s_text[160]; /* the script's error reply (a redirect), reported with the WAIT's */
    struct redis_link_cmd wait_lc; /* the WAIT in flight */
    uint32_t ttl_ms;
    /* acquire: the token's floor (0: the server's clock); fence: the token;
     * release: nonzero to publish the notice */
    uint64_t num;
    uint32_t block;   /* acquire: see backend_req */
    uint32_t want_ms; /* acquire: see backend_req */
    uint16_t name_len;
    uint16_t value_len;
    char token[33];
    char waiter_id[BACKEND_WAITER_ID_MAX + 1]; /* acquire: the agent's id, or empty */
    /* prefix + name, NUL-terminated (name is key + prefix_len), then the
     * key's value (acquire): the token, and the holder record after a space */
    char key[];
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
    char sha[S_COUNT][41]; /* empty until SCRIPT LOAD answered */
    size_t prefix_len;
    bool closing;
    bool sharded; /* Redis Cluster: sharded pub/sub */
    int last_error;
    char last_error_text[160];
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

/* Whether the write of c took effect: an acquire that took the key, a
 * renewal that extended it. */
static bool wrote(const struct rcmd *c, long long result)
{
    return reply_wrote(c->script == S_ACQUIRE, result);
}

/* The end of a command: its callback; text is the error reply's. */
static void cmd_done(struct rb *b, struct rcmd *c, int err, const char *text, long long result,
                     uint64_t at)
{
    if (c->script == S_LOOKUP) {
        c->lookup_cb(c->arg, err ? err : DLOCK_EBACKEND, NULL);
    } else if (c->cb) {
        struct backend_result res = reply_result(c->script == S_ACQUIRE, err, text, result, at);
        c->cb(c->arg, &res);
    }
    free(c);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct rb *b = rb_of(ac);
    struct rcmd *c = priv;
    redisReply *rep = r;
    uint64_t at = redis_link_answered(&b->cmd, &c->lc, rep);
    struct script_reply sr;
    reply_script(rep, c->script == S_LOOKUP, &sr);
    int err = sr.err;
    const char *text = sr.text;
    long long result = sr.n;
    if (sr.kind == SR_NOSCRIPT && !c->retried) {
        /* The server lost its script cache (restart, SCRIPT FLUSH): send
         * the script itself, which loads it again. Not a lost lease. */
        b->sha[c->script][0] = '\0';
        redisAsyncCommand(b->cmd.ac, on_script_loaded, (void *)(intptr_t)c->script,
                          "SCRIPT LOAD %s", script_src[c->script]);
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
        c->lookup_cb(c->arg, 0, &sr.holder);
        free(c);
        return;
    } else if (sr.kind == SR_UNEXPECTED) {
        note_error(b, err, "unexpected reply type");
        log_warn("%s: unexpected reply type %d", b->label, rep->type);
    }
    if (c->wait == W_SENT) {
        /* The WAIT behind it says whether the write counts. */
        c->answered = true;
        c->s_err = err;
        c->s_result = result;
        snprintf(c->s_text, sizeof c->s_text, "%s", text ? text : "");
        return;
    }
    if (c->wait == W_UNSENT && !err && wrote(c, result)) {
        err = DLOCK_EUNAVAIL;
        note_error(b, err, "WAIT could not be sent");
        log_warn("%s: WAIT could not be sent after the %s of %s: not confirmed", b->label,
                 c->script == S_ACQUIRE ? "acquire" : "renewal", c->key + b->prefix_len);
    }
    cmd_done(b, c, err, text, result, at);
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
    int err = c->answered ? c->s_err : DLOCK_EUNAVAIL;
    long long result = c->s_result;
    const char *what = c->script == S_ACQUIRE ? "acquire" : "renewal";
    if (!rep) {
        if (!err)
            err = DLOCK_EUNAVAIL; /* the link is going away */
    } else if (err || !wrote(c, result)) {
        /* Nothing written (taken, not ours) or failed: WAIT adds nothing. */
    } else if (rep->type == REDIS_REPLY_ERROR) {
        err = redis_error_code(rep->str);
        note_error(b, err, rep->str);
        log_warn("%s: WAIT after the %s of %s refused: %s", b->label, what, c->key + b->prefix_len,
                 rep->str);
    } else if (rep->type != REDIS_REPLY_INTEGER || rep->integer < b->cfg->wait_replicas) {
        /* Named in the answer, not as "unreachable": the write took, and
         * Redis answers. */
        snprintf(c->s_text, sizeof c->s_text,
                 "WAIT: %lld of %u replicas acknowledged within %u ms (wait_replicas)",
                 rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1ll, b->cfg->wait_replicas,
                 b->cfg->wait_timeout_ms);
        err = DLOCK_EUNAVAIL;
        note_error(b, err, c->s_text);
        log_warn("%s: %s: the %s of %s is not confirmed", b->label, c->s_text, what,
                 c->key + b->prefix_len);
    }
    cmd_done(b, c, err, c->s_text[0] ? c->s_text : NULL, result, at);
}

/* The arguments of one command, for redisAsyncCommandArgv, and room for
 * the numbers among them. */
struct args {
    int n;
    const char *v[14];
    size_t len[14];
    char ttl[16], num[24], block[16], want[16];
};

static void arg(struct args *a, const char *s, size_t len)
{
    a->v[a->n] = s;
    a->len[a->n++] = len;
}

/* Room for any key the scripts touch besides the lock key. */
#define SIDE_KEY_MAX (2 * CONFIG_PREFIX_MAX + WIRE_MAX_NAME + SIDE_KEY_EXTRA + 1)

/* The keys besides the lock key, written by add_keys() and referred to by
 * the arguments until the command is sent. */
struct side_keys {
    char hw[CONFIG_PREFIX_MAX + FENCE_HW_EXTRA + 1];
    char holder[SIDE_KEY_MAX];  /* lookup: the record key of earlier versions */
    char waiting[SIDE_KEY_MAX]; /* acquire, release: the waiting-hosts record */
    char channel[SIDE_KEY_MAX]; /* release: the name's release channel */
};

static struct slot_tags slot_tags; /* built once, by the first backend */
static bool slot_tags_ready;

/* KEYS: the lock; acquire and fence: the slot's high-water mark; acquire
 * and release: the waiting-hosts record; lookup: the holder record of
 * earlier versions; renewal: nothing else. */
static void add_keys(const struct rb *b, const struct rcmd *c, struct args *a, struct side_keys *k)
{
    size_t key_len = b->prefix_len + c->name_len;
    enum script s = c->script;
    /* On Redis Cluster a release names the lock key alone, so that a slot
     * migration never splits it (TRYAGAIN): it publishes whenever asked. */
    bool marked = s == S_ACQUIRE || s == S_FENCE,
         waiting = s == S_ACQUIRE || (s == S_RELEASE && !b->sharded);
    arg(a, s == S_ACQUIRE ? "3" : s == S_RENEW || (s == S_RELEASE && !waiting) ? "1" : "2", 1);
    arg(a, c->key, key_len);
    if (marked)
        arg(a, k->hw, fence_hw_key(&slot_tags, c->key, key_len, b->prefix_len, k->hw));
    if (waiting)
        arg(a, k->waiting, waiting_key(c->key, key_len, b->prefix_len, k->waiting));
    if (s == S_LOOKUP)
        arg(a, k->holder, holder_key(c->key, key_len, b->prefix_len, k->holder));
}

/* ARGV: the holder record (acquire) or the token (but for lookup), then
 * each script's own. */
static void add_argv(const struct rb *b, const struct rcmd *c, struct args *a, struct side_keys *k)
{
    unsigned long long num = c->num;
    if (c->script == S_ACQUIRE)
        arg(a, c->key + b->prefix_len + c->name_len + 1, c->value_len);
    else if (c->script != S_LOOKUP)
        arg(a, c->token, 32);
    if (c->script == S_ACQUIRE || c->script == S_RENEW)
        arg(a, a->ttl, (size_t)snprintf(a->ttl, sizeof a->ttl, "%u", c->ttl_ms));
    switch (c->script) {
    case S_ACQUIRE:
        /* The floor, or empty for the server's clock. */
        arg(a, a->num, num ? (size_t)snprintf(a->num, sizeof a->num, "%llu", num) : 0);
        arg(a, a->block, (size_t)snprintf(a->block, sizeof a->block, "%u", c->block));
        arg(a, c->waiter_id, strlen(c->waiter_id));
        arg(a, a->want, (size_t)snprintf(a->want, sizeof a->want, "%u", c->want_ms));
        break;
    case S_RELEASE:
        /* The channel, or empty for no notice; the name; how to publish. */
        arg(a, k->channel,
            c->num ? release_channel(c->key, b->prefix_len + c->name_len, b->prefix_len, k->channel)
                   : 0);
        arg(a, c->key + b->prefix_len, c->name_len);
        arg(a, b->sharded ? "s" : "", b->sharded);
        break;
    case S_FENCE:
        arg(a, a->num, (size_t)snprintf(a->num, sizeof a->num, "%llu", num));
        break;
    default:
        break;
    }
}

/* Sends c with EVALSHA when the script's digest is known, else with EVAL. */
static int cmd_send(struct rb *b, struct rcmd *c)
{
    if (!b->cmd.connected || b->closing)
        return DLOCK_EUNAVAIL;
    struct side_keys keys;
    struct args a = {0};
    const char *sha = b->sha[c->script];
    if (sha[0]) {
        arg(&a, "EVALSHA", 7);
        arg(&a, sha, 40);
    } else {
        arg(&a, "EVAL", 4);
        arg(&a, script_src[c->script], strlen(script_src[c->script]));
    }
    add_keys(b, c, &a, &keys);
    add_argv(b, c, &a, &keys);
    /* Pipelined right before the script, on the same connection: an ASK
     * redirect's target serves it. Its +OK needs no callback. */
    if (c->asking && redisAsyncCommand(b->cmd.ac, NULL, NULL, "ASKING") != REDIS_OK)
        return DLOCK_EUNAVAIL;
    int rc = redis_link_send(&b->cmd, &c->lc, on_reply, c, a.n, a.v, a.len);
    c->answered = false;
    c->s_text[0] = '\0';
    c->wait = W_NONE;
    if (rc == 0 && b->cfg->wait_replicas && (c->script == S_ACQUIRE || c->script == S_RENEW)) {
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
    return c->script == S_ACQUIRE || c->script == S_LOOKUP;
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
                cmd_done(b, c, rc, NULL, 0, now_ns());
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

/* Sends script s for req (the fields s uses) with num (see rcmd.num). */
static int submit_with(struct backend *be, enum script s, const struct backend_req *req,
                       uint64_t num, backend_cb cb, backend_lookup_cb lookup_cb, void *arg)
{
    struct rb *b = (struct rb *)be;
    if (!b->cmd.connected || b->closing)
        return DLOCK_EUNAVAIL;
    bool acquire = s == S_ACQUIRE;
    const char *holder = acquire && req->holder ? req->holder : "";
    /* acquire: the key's value, the token and the holder record after it */
    size_t vlen = acquire ? (holder[0] ? 33 + strlen(holder) : 32) : 0;
    size_t len = req->len;
    struct rcmd *c = malloc(sizeof *c + b->prefix_len + len + 1 + vlen + 1);
    if (!c)
        return DLOCK_ENOMEM;
    c->cb = cb;
    c->lookup_cb = lookup_cb;
    c->value_len = (uint16_t)vlen;
    c->arg = arg;
    c->script = (uint8_t)s;
    c->retried = false;
    c->resend = false;
    c->asking = req->asking;
    c->block = acquire ? req->block : 0;
    c->want_ms = acquire ? req->want_ms : 0;
    snprintf(c->waiter_id, sizeof c->waiter_id, "%s",
             acquire && req->waiter_id ? req->waiter_id : "");
    c->ttl_ms = req->ttl_ms;
    c->num = num;
    c->name_len = (uint16_t)len;
    memcpy(c->token, req->token ? req->token : "", req->token ? 32 : 1);
    c->token[32] = '\0';
    memcpy(c->key, b->cfg->prefix, b->prefix_len);
    memcpy(c->key + b->prefix_len, req->name, len);
    c->key[b->prefix_len + len] = '\0';
    char *value = c->key + b->prefix_len + len + 1;
    if (holder[0])
        snprintf(value, vlen + 1, "%s %s", c->token, holder);
    else
        memcpy(value, acquire ? c->token : "", vlen + 1);
    int rc = cmd_submit(b, c);
    if (rc)
        free(c);
    return rc;
}

static int submit(struct backend *be, enum script s, const struct backend_req *req, uint64_t num,
                  backend_cb cb, void *arg)
{
    return submit_with(be, s, req, num, cb, NULL, arg);
}

static int rb_lookup(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                     void *arg)
{
    struct backend_req req = {.name = name, .len = len};
    return submit_with(be, S_LOOKUP, &req, 0, NULL, cb, arg);
}

static int rb_op(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    switch (req->op) {
    case BACKEND_ACQUIRE:
        return submit(be, S_ACQUIRE, req, req->floor, cb, arg);
    case BACKEND_RENEW:
        return submit(be, S_RENEW, req, 0, cb, arg);
    case BACKEND_RELEASE:
        return submit(be, S_RELEASE, req, req->notify, cb, arg);
    case BACKEND_FENCE:
        return submit(be, S_FENCE, req, req->fence, cb, arg);
    }
    return DLOCK_EBACKEND;
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
    for (int s = 0; s < S_COUNT; s++)
        redisAsyncCommand(ac, on_script_loaded, (void *)(intptr_t)s, "SCRIPT LOAD %s",
                          script_src[s]);
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
    char key[CONFIG_PREFIX_MAX + WIRE_MAX_NAME + 1], rec[SIDE_KEY_MAX];
    memcpy(key, b->cfg->prefix, b->prefix_len);
    memcpy(key + b->prefix_len, req->name, req->len);
    size_t n = waiting_key(key, b->prefix_len + req->len, b->prefix_len, rec);
    redisAsyncCommand(b->cmd.ac, NULL, NULL, "HDEL %b %s", rec, n, req->waiter_id);
}

static int rb_watch(struct backend *be, const char *name, size_t len, bool on)
{
    return notice_link_watch(((struct rb *)be)->notices, name, len, on);
}

static void on_notice(void *arg, const char *name, size_t len)
{
    struct rb *b = arg;
    b->ev.on_notice(b->ev.arg, name, len);
}

static void on_subscribed(void *arg)
{
    struct rb *b = arg;
    b->ev.on_subscribed(b->ev.arg);
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
    .lookup = rb_lookup,
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
    struct notice_hooks nh = {.arg = b,
                              .notice = on_notice,
                              .subscribed = on_subscribed,
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
