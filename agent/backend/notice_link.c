/* SPDX-License-Identifier: BSD-3-Clause */
/* notice_link.c -- one node's release notices (notice_link.h): the names
 * subscribed on the connection in a hash set, one channel each, over a raw
 * redis_link; the set goes with the connection.
 *
 * Redis answers a connection's SUBSCRIBE and UNSUBSCRIBE commands in the
 * order they were sent, one confirmation each (one channel per command), and
 * pushes its messages in between. So the link keeps the commands it sent in
 * a FIFO and matches each confirmation or error with its head; a
 * confirmation that matches no command is the server's own: with sharded
 * pub/sub, the sunsubscribe Redis Cluster sends when a slot leaves the node.
 * A name stays in the set while a command of its is in flight, wanted or
 * not. */
#include "notice_link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "dlock.h"
#include "formats.h"
#include "keys.h"
#include "log.h"
#include "redis_link.h"
#include "util.h"
#include "wire.h"

/* Room for any channel name. */
#define CHANNEL_MAX (2 * CONFIG_PREFIX_MAX + WIRE_MAX_NAME + SIDE_KEY_EXTRA + 1)

struct wname {
    struct wname *hnext;
    TAILQ_ENTRY(wname) q; /* in the queue of names to subscribe */
    uint64_t hash;
    uint32_t inflight; /* commands of its in the FIFO, and pins */
    bool wanted;       /* the owner wants its notices (on this connection) */
    bool queued;       /* in the queue, its SUBSCRIBE not sent yet */
    bool sent;         /* SUBSCRIBE sent on this connection, and no UNSUBSCRIBE since */
    uint16_t len;
    char name[]; /* NUL-terminated */
};

/* A command in flight. */
struct pend {
    struct wname *w;
    bool sub; /* SUBSCRIBE, else UNSUBSCRIBE */
};

struct notice_link {
    struct redis_link link;
    const struct config *cfg;
    const char *label;
    bool sharded;
    bool was_up; /* set up since the last down hook */
    struct notice_hooks hooks;
    size_t prefix_len;
    bool prefix_tagged; /* the prefix has a hash tag (and so every lock key) */
    /* The names: a hash set, doubled as it fills. */
    struct wname **buckets;
    size_t nbuckets, nnames, nwanted;
    uint64_t seed;
    TAILQ_HEAD(, wname) queue; /* to subscribe, when the window allows */
    /* The FIFO of commands in flight: a ring. */
    struct pend *pend;
    size_t pend_cap, pend_head, pend_n;
    size_t subs_inflight; /* SUBSCRIBEs among them */
};

/* ---- the set ---- */

static struct wname *find(const struct notice_link *n, const char *name, size_t len)
{
    uint64_t h = name_hash(n->seed, name, len);
    for (struct wname *w = n->buckets[h & (n->nbuckets - 1)]; w; w = w->hnext)
        if (w->hash == h && w->len == len && memcmp(w->name, name, len) == 0)
            return w;
    return NULL;
}

static void grow(struct notice_link *n)
{
    size_t nb = n->nbuckets * 2;
    struct wname **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < n->nbuckets; i++) {
        for (struct wname *w = n->buckets[i], *next; w; w = next) {
            next = w->hnext;
            w->hnext = b[w->hash & (nb - 1)];
            b[w->hash & (nb - 1)] = w;
        }
    }
    free(n->buckets);
    n->buckets = b;
    n->nbuckets = nb;
}

static struct wname *add(struct notice_link *n, const char *name, size_t len)
{
    if (n->nnames >= NOTICE_NAMES_MAX || len > WIRE_MAX_NAME)
        return NULL;
    struct wname *w = calloc(1, sizeof *w + len + 1);
    if (!w)
        return NULL;
    w->hash = name_hash(n->seed, name, len);
    w->len = (uint16_t)len;
    memcpy(w->name, name, len);
    if (n->nnames >= n->nbuckets)
        grow(n);
    struct wname **b = &n->buckets[w->hash & (n->nbuckets - 1)];
    w->hnext = *b;
    *b = w;
    n->nnames++;
    return w;
}

/* Frees w once it is neither wanted nor referred to by a command. */
static void settle(struct notice_link *n, struct wname *w)
{
    if (w->wanted || w->inflight || w->queued)
        return;
    struct wname **p = &n->buckets[w->hash & (n->nbuckets - 1)];
    while (*p != w)
        p = &(*p)->hnext;
    *p = w->hnext;
    n->nnames--;
    free(w);
}

static void dequeue(struct notice_link *n, struct wname *w)
{
    if (w->queued) {
        TAILQ_REMOVE(&n->queue, w, q);
        w->queued = false;
    }
}

/* The name is no longer wanted (watched off, or forgotten by the node). */
static void unwant(struct notice_link *n, struct wname *w)
{
    if (!w->wanted)
        return;
    w->wanted = false;
    n->nwanted--;
    dequeue(n, w);
}

/* ---- commands ---- */

static enum key_format format_of(const struct notice_link *n, const char *name, size_t len)
{
    return formats_of(&n->cfg->formats, name, len);
}

/* A name's channel: dlock's release channel, or Redisson's for a name in
 * its format, which Redisson's unlock and dlock's release both publish on. */
static size_t channel_of(const struct notice_link *n, const struct wname *w, char *out)
{
    enum key_format f = format_of(n, w->name, w->len);
    if (f != KEY_FORMAT_DLOCK)
        return redisson_channel(f, w->name, w->len, out);
    char key[CONFIG_PREFIX_MAX + WIRE_MAX_NAME];
    memcpy(key, n->cfg->prefix, n->prefix_len);
    memcpy(key + n->prefix_len, w->name, w->len);
    return release_channel(key, n->prefix_len + w->len, n->prefix_len, out);
}

static int pend_push(struct notice_link *n, struct wname *w, bool sub)
{
    if (n->pend_n == n->pend_cap) {
        size_t cap = n->pend_cap ? n->pend_cap * 2 : 64;
        struct pend *p = malloc(cap * sizeof *p);
        if (!p)
            return DLOCK_ENOMEM;
        for (size_t i = 0; i < n->pend_n; i++)
            p[i] = n->pend[(n->pend_head + i) % n->pend_cap];
        free(n->pend);
        n->pend = p;
        n->pend_cap = cap;
        n->pend_head = 0;
    }
    n->pend[(n->pend_head + n->pend_n) % n->pend_cap] = (struct pend){.w = w, .sub = sub};
    n->pend_n++;
    w->inflight++;
    if (sub)
        n->subs_inflight++;
    return 0;
}

/* Takes the FIFO's head into *out; false when it is empty. */
static bool pend_pop(struct notice_link *n, struct pend *out)
{
    if (!n->pend_n)
        return false;
    *out = n->pend[n->pend_head];
    n->pend_head = (n->pend_head + 1) % n->pend_cap;
    n->pend_n--;
    out->w->inflight--;
    if (out->sub)
        n->subs_inflight--;
    return true;
}

/* SUBSCRIBE or UNSUBSCRIBE (their sharded forms) for w, on the FIFO. */
static int send_cmd(struct notice_link *n, struct wname *w, bool sub)
{
    static const char *const verb[2][2] = {{"UNSUBSCRIBE", "SUBSCRIBE"},
                                           {"SUNSUBSCRIBE", "SSUBSCRIBE"}};
    char ch[CHANNEL_MAX];
    const char *argv[2] = {verb[n->sharded][sub], ch};
    size_t argvlen[2] = {strlen(argv[0]), channel_of(n, w, ch)};
    int rc = pend_push(n, w, sub);
    if (rc)
        return rc;
    rc = redis_link_raw_send(&n->link, 2, argv, argvlen);
    if (rc) {
        /* Undo the push: it is the FIFO's tail. */
        n->pend_n--;
        w->inflight--;
        if (sub)
            n->subs_inflight--;
    }
    return rc;
}

/* Asks for the queued names while the window allows. */
static void pump(struct notice_link *n)
{
    struct wname *w;
    while (n->link.connected && n->subs_inflight < NOTICE_WINDOW && (w = TAILQ_FIRST(&n->queue))) {
        if (send_cmd(n, w, true) != 0)
            return; /* the link is going down, or memory is short: left queued */
        dequeue(n, w);
        w->sent = true;
    }
}

int notice_link_watch(struct notice_link *n, const char *name, size_t len, bool on)
{
    struct wname *w = find(n, name, len);
    if (!on) {
        if (!w || !w->wanted)
            return 0;
        unwant(n, w);
        if (w->sent && n->link.connected && send_cmd(n, w, false) == 0)
            w->sent = false;
        /* Else the connection goes down, and the subscription with it (or,
         * short of memory, the name's messages keep coming: harmless). */
        settle(n, w);
        return 0;
    }
    /* Down: nothing is kept, the owner asks again on the new connection.
     * Already wanted: subscribed, or about to be. */
    if (!n->link.connected || (w && w->wanted))
        return 0;
    if (!w && !(w = add(n, name, len)))
        return DLOCK_ENOMEM;
    w->wanted = true;
    n->nwanted++;
    TAILQ_INSERT_TAIL(&n->queue, w, q);
    w->queued = true;
    pump(n);
    return 0;
}

/* ---- what comes back ---- */

/* The lock name of a channel (without its prefix) into out; its length, or
 * 0 when the channel is none of ours. */
static size_t name_of_channel(const struct notice_link *n, const char *ch, size_t len, char *out)
{
    const char *rname;
    size_t rlen = redisson_channel_name(ch, len, &rname);
    if (rlen && rlen <= WIRE_MAX_NAME && format_of(n, rname, rlen) != KEY_FORMAT_DLOCK) {
        memcpy(out, rname, rlen);
        out[rlen] = '\0';
        return rlen;
    }
    size_t suffix = sizeof RELEASED_SUFFIX - 1, p = n->prefix_len;
    size_t skip = n->prefix_tagged ? p : 2 * p + 1, tail = n->prefix_tagged ? suffix : suffix + 1;
    if (len <= skip + tail || len - skip - tail > WIRE_MAX_NAME)
        return 0;
    size_t nlen = len - skip - tail;
    memcpy(out, ch + skip, nlen);
    out[nlen] = '\0';
    /* Made again from the name, it must be the same channel. */
    char key[CONFIG_PREFIX_MAX + WIRE_MAX_NAME], again[CHANNEL_MAX];
    memcpy(key, n->cfg->prefix, p);
    memcpy(key + p, out, nlen);
    size_t alen = release_channel(key, p + nlen, p, again);
    return alen == len && memcmp(again, ch, len) == 0 ? nlen : 0;
}

/* The node let go of w: it serves the name's slot no longer. */
static void forget(struct notice_link *n, struct wname *w, const char *why)
{
    bool wanted = w->wanted;
    w->sent = false;
    unwant(n, w);
    log_debug("%s: release notices of %s are not this node's (%s)", n->label, w->name, why);
    char name[WIRE_MAX_NAME + 1];
    size_t len = w->len;
    memcpy(name, w->name, len + 1);
    settle(n, w);
    if (wanted && n->hooks.unwatched)
        n->hooks.unwatched(n->hooks.arg, name, len);
}

/* Whether w's key, and so its channel, is in a slot set in the bitmap. */
static bool in_slots(const struct notice_link *n, const struct wname *w, const uint8_t *slots)
{
    char key[CONFIG_PREFIX_MAX + WIRE_MAX_NAME];
    memcpy(key, n->cfg->prefix, n->prefix_len);
    memcpy(key + n->prefix_len, w->name, w->len);
    unsigned s = format_of(n, w->name, w->len) != KEY_FORMAT_DLOCK
                     ? key_slot(w->name, w->len)
                     : key_slot(key, n->prefix_len + w->len);
    return slots[s / 8] & (1u << (s % 8));
}

void notice_link_unwatch_slots(struct notice_link *n, const uint8_t *slots)
{
    if (!n->sharded || !n->nwanted)
        return;
    /* Gathered first and pinned, then forgotten one by one: the hook may
     * watch other names meanwhile (which may grow the set). */
    struct wname **gone = malloc(n->nwanted * sizeof *gone);
    if (!gone) {
        /* The new connection has none: the owner asks for each again. */
        redis_link_fail(&n->link, "out of memory");
        return;
    }
    size_t ngone = 0;
    for (size_t b = 0; b < n->nbuckets; b++) {
        for (struct wname *w = n->buckets[b]; w; w = w->hnext) {
            if (w->wanted && in_slots(n, w, slots)) {
                w->inflight++;
                gone[ngone++] = w;
            }
        }
    }
    for (size_t i = 0; i < ngone; i++) {
        struct wname *w = gone[i];
        /* Unless an earlier report's hook watched it off meanwhile. */
        if (w->wanted) {
            if (w->sent && n->link.connected && send_cmd(n, w, false) == 0)
                w->sent = false;
            forget(n, w, "its slot moved away");
        }
        w->inflight--;
        settle(n, w);
    }
    free(gone);
}

/* Our own commands do not match what comes back: start over on a new
 * connection. */
static void out_of_step(struct notice_link *n, const char *what)
{
    log_warn("%s: notice link: unexpected %s", n->label, what);
    n->hooks.error(n->hooks.arg, DLOCK_EBACKEND, "unexpected reply on the notice link");
    redis_link_fail(&n->link, "unexpected reply");
}

/* A subscribe or unsubscribe confirmation of channel ch. */
static void confirmed(struct notice_link *n, bool sub, const char *ch, size_t len)
{
    struct pend head = {0};
    char chw[CHANNEL_MAX];
    bool mine = n->pend_n && n->pend[n->pend_head].sub == sub &&
                channel_of(n, n->pend[n->pend_head].w, chw) == len && memcmp(chw, ch, len) == 0;
    if (mine) {
        pend_pop(n, &head);
        struct wname *w = head.w;
        if (sub && w->wanted) {
            /* Pinned: the hook may watch the name off. */
            w->inflight++;
            n->hooks.notice(n->hooks.arg, w->name, w->len, NULL);
            w->inflight--;
        }
        settle(n, w);
        pump(n);
        return;
    }
    if (sub || !n->sharded) {
        out_of_step(n, sub ? "subscribe confirmation" : "unsubscribe confirmation");
        return;
    }
    /* The node's own sunsubscribe: the slot moved away. */
    char name[WIRE_MAX_NAME + 1];
    size_t nlen = name_of_channel(n, ch, len, name);
    struct wname *w = nlen ? find(n, name, nlen) : NULL;
    if (w && w->wanted)
        forget(n, w, "its slot moved away");
}

/* An error reply: the answer to the FIFO's head. */
static void refused(struct notice_link *n, const char *err)
{
    struct pend head;
    if (!pend_pop(n, &head)) {
        out_of_step(n, "error reply");
        return;
    }
    struct wname *w = head.w;
    if (!head.sub) {
        /* The subscription goes with the connection at the latest; until
         * then its notices keep coming. */
        log_warn("%s: unsubscribing from the release notices of %s refused: %s", n->label, w->name,
                 err);
        n->hooks.error(n->hooks.arg, redis_error_code(err), err);
        settle(n, w);
        return;
    }
    static const char *const elsewhere[] = {"MOVED ", "ASK ", "CLUSTERDOWN ", "TRYAGAIN "};
    for (size_t i = 0; n->sharded && i < sizeof elsewhere / sizeof elsewhere[0]; i++) {
        if (strncmp(err, elsewhere[i], strlen(elsewhere[i])) == 0) {
            /* Not this node's slot (now): the owner finds the right node. */
            forget(n, w, err);
            pump(n);
            return;
        }
    }
    log_error("%s: subscription to the release notices of %s refused: %s", n->label, w->name, err);
    n->hooks.error(n->hooks.arg, redis_error_code(err), err);
    settle(n, w);
    /* Tried again on a new connection, after the backoff. */
    redis_link_fail(&n->link, "subscription refused");
}

/* A grant on release's message (scripts.c, LUA_HANDOVER): "grant ID TOKEN
 * FENCE SEQ TTL BLOCK". No name has a space: a release notice never reads
 * as one. */
static bool grant_of(const char *p, size_t len, struct backend_grant *g)
{
    char buf[160], to[BACKEND_WAITER_ID_MAX + 2], token[34];
    unsigned long long fence, seq;
    unsigned ttl, block;
    int end = 0;
    if (len < 6 || len >= sizeof buf || memcmp(p, "grant ", 6) != 0)
        return false;
    memcpy(buf, p, len);
    buf[len] = '\0';
    if (sscanf(buf, "grant %17s %33s %llu %llu %u %u%n", to, token, &fence, &seq, &ttl, &block,
               &end) != 6 ||
        (size_t)end != len || strlen(to) > BACKEND_WAITER_ID_MAX || strlen(token) != 32)
        return false;
    *g = (struct backend_grant){.fence = fence, .seq = seq, .ttl_ms = ttl, .block = block};
    memcpy(g->to, to, strlen(to) + 1);
    memcpy(g->token, token, sizeof g->token);
    return true;
}

static bool is(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && strcmp(r->str, s) == 0;
}

static void on_reply(void *arg, struct redis_link *l, const redisReply *r)
{
    struct notice_link *n = arg;
    if (r->type == REDIS_REPLY_ERROR) {
        refused(n, r->str);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        out_of_step(n, "reply");
        return;
    }
    const redisReply *kind = r->element[0], *ch = r->element[1], *payload = r->element[2];
    if ((is(kind, "message") || is(kind, "smessage")) && payload->type == REDIS_REPLY_STRING) {
        /* dlock's notice carries the name; Redisson's unlock message (0,
         * or 1 for a read lock's) only its channel names it. */
        const char *rname;
        size_t rlen =
            ch->type == REDIS_REPLY_STRING ? redisson_channel_name(ch->str, ch->len, &rname) : 0;
        struct backend_grant g;
        char name[WIRE_MAX_NAME + 1];
        size_t nlen;
        if (rlen)
            n->hooks.notice(n->hooks.arg, rname, rlen, NULL);
        else if (ch->type == REDIS_REPLY_STRING && grant_of(payload->str, payload->len, &g) &&
                 (nlen = name_of_channel(n, ch->str, ch->len, name)) != 0)
            n->hooks.notice(n->hooks.arg, name, nlen, &g);
        else
            n->hooks.notice(n->hooks.arg, payload->str, payload->len, NULL);
    } else if ((is(kind, "subscribe") || is(kind, "ssubscribe") || is(kind, "unsubscribe") ||
                is(kind, "sunsubscribe")) &&
               ch->type == REDIS_REPLY_STRING) {
        confirmed(n, strstr(kind->str, "unsubscribe") == NULL, ch->str, ch->len);
    } else {
        out_of_step(n, kind->str);
    }
}

/* ---- the connection ---- */

/* The connection is gone, and every subscription with it: the link keeps
 * no name (the owner asks again on the next connection). */
static void forget_all(struct notice_link *n)
{
    struct pend p;
    while (pend_pop(n, &p))
        ;
    for (size_t b = 0; b < n->nbuckets; b++) {
        for (struct wname *next, *w = n->buckets[b]; w; w = next) {
            next = w->hnext;
            w->sent = false;
            unwant(n, w);
            settle(n, w);
        }
    }
}

/* A new connection, without subscriptions: the owner asks for its names. */
static void on_ready(void *arg, struct redis_link *l)
{
    struct notice_link *n = arg;
    forget_all(n); /* already, unless the connection went without a word */
    log_info("%s: notice link up", n->label);
    n->was_up = true;
    n->hooks.subscribed(n->hooks.arg);
}

static void on_down(void *arg, struct redis_link *l)
{
    struct notice_link *n = arg;
    forget_all(n);
    if (n->was_up && n->hooks.down) {
        n->was_up = false;
        n->hooks.down(n->hooks.arg);
    }
}

static void on_error(void *arg, int code, const char *text)
{
    struct notice_link *n = arg;
    n->hooks.error(n->hooks.arg, code, text);
}

struct notice_link *notice_link_new(struct ev_loop *loop, const struct config *cfg,
                                    const struct redis_addr *addr, const char *label, bool sharded,
                                    const struct notice_hooks *hooks)
{
    struct notice_link *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->nbuckets = 64;
    n->buckets = calloc(n->nbuckets, sizeof *n->buckets);
    if (!n->buckets) {
        free(n);
        return NULL;
    }
    n->cfg = cfg;
    n->label = label;
    n->sharded = sharded;
    n->hooks = *hooks;
    n->prefix_len = strlen(cfg->prefix);
    n->prefix_tagged = key_has_hash_tag(cfg->prefix, n->prefix_len);
    n->seed = random_u64();
    TAILQ_INIT(&n->queue);
    struct redis_link_hooks lh = {
        .arg = n, .ready = on_ready, .error = on_error, .down = on_down, .reply = on_reply};
    redis_link_init(&n->link, loop, cfg, addr, label, "notice", REDIS_LINK_RAW, &lh);
    redis_link_start(&n->link);
    return n;
}

bool notice_link_up(const struct notice_link *n)
{
    return n->link.connected;
}

void notice_link_flush(struct notice_link *n)
{
    redis_link_flush(&n->link);
}

void notice_link_drop(struct notice_link *n)
{
    redis_link_drop(&n->link);
}

void notice_link_free(struct notice_link *n)
{
    if (!n)
        return;
    redis_link_close(&n->link);
    for (size_t b = 0; b < n->nbuckets; b++) {
        for (struct wname *next, *w = n->buckets[b]; w; w = next) {
            next = w->hnext;
            free(w);
        }
    }
    free(n->buckets);
    free(n->pend);
    free(n);
}
