/* SPDX-License-Identifier: BSD-3-Clause */
/* redis.c -- the simulator's model of a Redis node: string keys with TTLs
 * on the node's own clock (expired when the clock has passed them, as
 * Redis does), the four scripts of agent/backend/backend_redis.c with their
 * exact semantics (docs/fencing.md), the counted kinds' scripts on a hash
 * of permits and the waiting-hosts record (docs/redis.md, "Counted kinds"),
 * per-name release notices, restarts with and without persistence,
 * failovers that lose the last writes, and stalls. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "sim.h"

#define SIM_PREFIX "dlock:"
#define UNDO_KEEP  MS(250) /* failovers roll back less than this */

/* A bug of the model's own for the planted-bug tests: the release script
 * deletes the key whatever token it holds. */
bool sim_bug_release_no_compare;
#ifdef DLOCK_PLANTED_BUGS
#define BUG_RELEASE_NO_COMPARE sim_bug_release_no_compare
#else
#define BUG_RELEASE_NO_COMPARE 0
#endif

/* Another of the model's own: a counted renewal sets its permit's expiry
 * to now + TTL even when that is earlier than the expiry it had (the local
 * shared holders of one grant share a permit, with TTLs of their own). */
bool sim_bug_counted_renew_shortens;
/* And another: a counted acquire ignores the kind and limit the name is
 * held with (no DLOCK_EKIND: a second limit, silently). */
bool sim_bug_counted_no_mismatch;
#ifdef DLOCK_PLANTED_BUGS
#define BUG_RENEW_SHORTENS sim_bug_counted_renew_shortens
#define BUG_NO_MISMATCH    sim_bug_counted_no_mismatch
#else
#define BUG_RENEW_SHORTENS 0
#define BUG_NO_MISMATCH    0
#endif

/* A bug of the model's own for the planted-bug tests: an entry bound to
 * its agent's keep-alive key counts after that key lapsed (a script that
 * forgot to read it): a dead agent holds the other hosts back until the
 * entry's own long expiry. */
bool sim_bug_bound_ignores_keepalive;
#ifdef DLOCK_PLANTED_BUGS
#define BUG_BOUND_IGNORES_KA sim_bug_bound_ignores_keepalive
#else
#define BUG_BOUND_IGNORES_KA 0
#endif

/* A bug of the model's own: a release hands the key over to the oldest
 * entry without reading its agent's keep-alive key (a script that forgot
 * to), for the entry's whole TTL: a dead agent is granted the key, which
 * holds every other host back for its TTL. */
bool sim_bug_grant_lapsed_keepalive;
#ifdef DLOCK_PLANTED_BUGS
#define BUG_GRANT_LAPSED_KA sim_bug_grant_lapsed_keepalive
#else
#define BUG_GRANT_LAPSED_KA 0
#endif

/* The longest life of an entry of the waiting-hosts record, and of one
 * bound to its agent's keep-alive key. */
#define WAIT_ENTRY_MAX_MS BACKEND_WAIT_ENTRY_MAX_MS
#define WAIT_BOUND_MAX_MS BACKEND_WAIT_BOUND_MAX_MS

static struct slot_tags *tags;

void node_init(struct sim *s, struct node *nd, unsigned id)
{
    if (!tags) {
        tags = malloc(sizeof *tags);
        if (!tags) {
            fprintf(stderr, "dlock-sim: out of memory\n");
            exit(2);
        }
        slot_tags_build(tags);
    }
    memset(nd, 0, sizeof *nd);
    nd->s = s;
    nd->id = id;
    nd->up = true;
    TAILQ_INIT(&nd->stallq);
}

void node_free(struct node *nd)
{
    free(nd->keys);
    free(nd->undo);
    nd->keys = NULL;
    nd->undo = NULL;
}

static int64_t node_ms(const struct node *nd)
{
    return node_clock_ns(nd) / 1000000;
}

/* ---- the key space, with an undo log for failovers ---- */

static void undo_log(struct node *nd, const char *name, const struct rkey *old)
{
    if (!nd->log_undo)
        return;
    uint64_t now = nd->s->now;
    while (nd->undo_head < nd->nundo && nd->undo[nd->undo_head].t + UNDO_KEEP < now)
        nd->undo_head++;
    if (nd->undo_head > 64 && nd->undo_head * 2 > nd->nundo) {
        memmove(nd->undo, nd->undo + nd->undo_head, (nd->nundo - nd->undo_head) * sizeof *nd->undo);
        nd->nundo -= nd->undo_head;
        nd->undo_head = 0;
    }
    if (nd->nundo == nd->undo_cap) {
        nd->undo_cap = nd->undo_cap ? nd->undo_cap * 2 : 64;
        nd->undo = realloc(nd->undo, nd->undo_cap * sizeof *nd->undo);
        if (!nd->undo) {
            fprintf(stderr, "dlock-sim: out of memory\n");
            exit(2);
        }
    }
    struct undo *u = &nd->undo[nd->nundo++];
    u->t = now;
    u->existed = old != NULL;
    if (old)
        u->k = *old;
    else
        snprintf(u->k.name, sizeof u->k.name, "%s", name);
}

static struct rkey *kfind(struct node *nd, const char *name)
{
    for (unsigned i = 0; i < nd->nkeys; i++)
        if (strcmp(nd->keys[i].name, name) == 0)
            return &nd->keys[i];
    return NULL;
}

static void kremove(struct node *nd, struct rkey *k)
{
    *k = nd->keys[--nd->nkeys];
}

static bool expired(const struct node *nd, const struct rkey *k)
{
    return k->expire_ms && node_ms(nd) > k->expire_ms;
}

/* GET, with Redis' lazy expiry. */
static struct rkey *kget(struct node *nd, const char *name)
{
    struct rkey *k = kfind(nd, name);
    if (k && expired(nd, k)) {
        undo_log(nd, name, k);
        kremove(nd, k);
        return NULL;
    }
    return k;
}

/* The key of that name, made when missing (empty, no TTL), its old value
 * logged for a failover. */
static struct rkey *kmake(struct node *nd, const char *name)
{
    struct rkey *k = kfind(nd, name);
    undo_log(nd, name, k);
    if (!k) {
        if (nd->nkeys == nd->cap) {
            nd->cap = nd->cap ? nd->cap * 2 : 16;
            nd->keys = realloc(nd->keys, nd->cap * sizeof *nd->keys);
            if (!nd->keys) {
                fprintf(stderr, "dlock-sim: out of memory\n");
                exit(2);
            }
        }
        k = &nd->keys[nd->nkeys++];
        memset(k, 0, sizeof *k);
        snprintf(k->name, sizeof k->name, "%s", name);
    }
    k->set_at = nd->s->now;
    return k;
}

static void kset(struct node *nd, const char *name, const char *val, int64_t expire_ms)
{
    struct rkey *k = kmake(nd, name);
    k->hash = false;
    k->nf = 0;
    k->kind[0] = '\0';
    snprintf(k->val, sizeof k->val, "%s", val);
    k->expire_ms = expire_ms;
}

/* A whole key as it was (RESTORE, or a failover's rollback), expiring then. */
static void kput(struct node *nd, const struct rkey *from, int64_t expire_ms)
{
    struct rkey *k = kmake(nd, from->name);
    uint64_t at = k->set_at;
    *k = *from;
    k->set_at = at;
    k->expire_ms = expire_ms;
}

static void kdel(struct node *nd, const char *name)
{
    struct rkey *k = kget(nd, name);
    if (k) {
        undo_log(nd, name, k);
        kremove(nd, k);
    }
}

static void kpexpire(struct node *nd, const char *name, int64_t expire_ms)
{
    struct rkey *k = kget(nd, name);
    if (k) {
        undo_log(nd, name, k);
        k->expire_ms = expire_ms;
    }
}

/* The scripts' mark(): a whole number in [0, 2^53), else 0. */
static uint64_t kmark(struct node *nd, const char *name)
{
    const struct rkey *k = kget(nd, name);
    if (!k)
        return 0;
    char *end;
    unsigned long long v = strtoull(k->val, &end, 10);
    if (end == k->val || *end || k->val[0] == '-' || v >= (1ull << 53))
        return 0;
    return v;
}

/* ---- the scripts ---- */

struct keynames {
    char lock[SIM_KEY_MAX], mark[SIM_KEY_MAX], legacy[SIM_KEY_MAX];
};

static void names_make(const char *name, size_t name_len, struct keynames *kn)
{
    size_t plen = strlen(SIM_PREFIX);
    int len = snprintf(kn->lock, sizeof kn->lock, "%s%.*s", SIM_PREFIX, (int)name_len, name);
    char buf[2 * SIM_KEY_MAX];
    size_t n = legacy_fence_key(kn->lock, (size_t)len, plen, buf);
    snprintf(kn->legacy, sizeof kn->legacy, "%.*s", (int)n, buf);
    n = fence_hw_key(tags, kn->lock, (size_t)len, plen, buf);
    snprintf(kn->mark, sizeof kn->mark, "%.*s", (int)n, buf);
}

/* The keys of the few names a run uses, made once. */
static const struct keynames *names_of(const struct msg *m)
{
    static struct {
        char name[32];
        struct keynames kn;
    } cache[16];
    static unsigned ncache;
    for (unsigned i = 0; i < ncache; i++)
        if (strlen(cache[i].name) == m->name_len &&
            memcmp(cache[i].name, m->name, m->name_len) == 0)
            return &cache[i].kn;
    unsigned i = ncache < 16 ? ncache++ : 15;
    snprintf(cache[i].name, sizeof cache[i].name, "%.*s", (int)m->name_len, m->name);
    names_make(m->name, m->name_len, &cache[i].kn);
    return &cache[i].kn;
}

/* To the agents subscribed to the name's channel on this node. */
static void publish(struct node *nd, const struct msg *m)
{
    struct sim *s = nd->s;
    for (unsigned a = 0; a < s->nagents; a++)
        link_publish(&s->links[a * s->nnodes + nd->id], m->name, m->name_len);
}

/* ---- the waiting-hosts record (the seeds that mix kinds) ----
 *
 * As the scripts keep it (agent/backend/backend_redis.c, docs/protocol.md):
 * entries of agent id -> since (node clock, us) and expiry; the oldest
 * live entry of another agent has the turn, unless the caller's own entry
 * is older; a waiting caller that is not served joins it, keeping its
 * place; a reader's entry has a mark beside it, and a reader does not wait
 * for readers. The agent's id is its core's waiter_id. An entry (and
 * mark) that the agent bound to its keep-alive key counts only while that
 * key lives (ka_ms, set by the agent's keep-alive), up to the long bound of
 * its own expiry. Not a key of the model: it is lost with a node's data
 * (restart without persistence, failover), and it stays behind when a slot
 * moves. */

static const char *agent_wid(const struct node *nd, unsigned a)
{
    return nd->s->agents[a].core.waiter_id;
}

/* The record of name n, gone once its key expired. */
static struct wrecord *rec_of(struct node *nd, unsigned n, int64_t now)
{
    struct wrecord *r = &nd->rec[n];
    if (r->exp_ms && now > r->exp_ms) {
        memset(r->e, 0, sizeof r->e);
        r->exp_ms = 0;
    }
    return r;
}

static bool rec_exists(const struct wrecord *r)
{
    for (unsigned a = 0; a < SIM_MAX_AGENTS; a++)
        if (r->e[a].used)
            return true;
    return false;
}

/* Does agent a's keep-alive key live on nd at now? */
static bool ka_live(const struct node *nd, unsigned a, int64_t now)
{
    return nd->ka_ms[a] > now || BUG_BOUND_IGNORES_KA;
}

/* Is an entry (or mark) that lasts until exp_ms live at now? */
static bool entry_live(const struct node *nd, unsigned a, bool bound, int64_t exp_ms, int64_t now)
{
    if (exp_ms <= now)
        return false;
    if (!bound)
        return exp_ms <= now + WAIT_ENTRY_MAX_MS;
    return exp_ms <= now + WAIT_BOUND_MAX_MS && ka_live(nd, a, now);
}

static bool reader_mark(const struct node *nd, const struct wrecord *r, unsigned a, int64_t now)
{
    return entry_live(nd, a, r->e[a].used && r->e[a].bound, r->mark_ms[a], now);
}

/* The check of the keep-alive: the agent of a bound entry that has the turn
 * must not have died more than the keep-alive key's life (and a margin for
 * the node's clock, which runs up to 5 % fast or slow) after the node last
 * set that key, unless the node's clock stepped back since. */
static void check_dead_turn(struct node *nd, unsigned n, unsigned a)
{
    struct sim *s = nd->s;
    const struct agent *ag = &s->agents[a];
    uint64_t set = nd->ka_set_at[a];
    uint64_t life = MS(WAIT_ENTRY_MAX_MS) + MS(WAIT_ENTRY_MAX_MS) / 10;
    if (!ag->down || !nd->rec[n].e[a].bound || !set || nd->stepped_back_at >= set ||
        s->now <= set + life)
        return;
    violation(s, "liveness", 0,
              "agent%u died %" PRIu64 " ms ago and its entry on %s, bound to its keep-alive key "
              "last set %" PRIu64 " ms ago, still holds the other hosts back on node%u",
              a, (s->now - ag->died_at) / 1000000, s->names[n], (s->now - set) / 1000000, nd->id);
}

/* Does entry a come before entry b (older, then the lower id)? */
static bool entry_before(const struct node *nd, const struct wrecord *r, unsigned a, unsigned b)
{
    return r->e[a].since_us < r->e[b].since_us ||
           (r->e[a].since_us == r->e[b].since_us && strcmp(agent_wid(nd, a), agent_wid(nd, b)) < 0);
}

/* queue_turn(): the agent whose turn it is before me (readers skip the
 * readers' entries), or -1; drops the lapsed entries. *queued: the record
 * exists. */
static int queue_turn(struct node *nd, unsigned n, unsigned me, bool reader, bool *queued)
{
    int64_t now = node_ms(nd);
    struct wrecord *r = rec_of(nd, n, now);
    if (!rec_exists(r))
        return -1;
    *queued = true;
    int first = -1;
    for (unsigned a = 0; a < nd->s->nagents; a++) {
        struct wentry *e = &r->e[a];
        if (!e->used)
            continue;
        if (!entry_live(nd, a, e->bound, e->exp_ms, now)) {
            e->used = false;
            continue;
        }
        if (a != me && !(reader && reader_mark(nd, r, a, now)) &&
            (first < 0 || entry_before(nd, r, a, (unsigned)first)))
            first = (int)a;
    }
    if (first >= 0 && r->e[me].used && entry_before(nd, r, me, (unsigned)first))
        return -1;
    if (first >= 0)
        check_dead_turn(nd, n, (unsigned)first);
    return first;
}

/* join_as(): the caller waits (for want_ms, at most the cap: the long
 * one for an entry bound to its keep-alive key), keeping its place; as a
 * reader, with a mark. A bound entry of an exclusive acquire (carry) carries
 * its grant: the TTL, the block and the key's value. */
static void rec_join(struct node *nd, unsigned n, unsigned me, uint32_t want_ms, bool bound,
                     bool reader, const struct msg *carry)
{
    int64_t cap = bound ? WAIT_BOUND_MAX_MS : WAIT_ENTRY_MAX_MS;
    int64_t want = want_ms < cap ? want_ms : cap;
    if (want <= 0)
        return;
    int64_t now = node_ms(nd);
    struct wrecord *r = rec_of(nd, n, now);
    if (!r->e[me].used)
        r->e[me].since_us = (uint64_t)(node_clock_ns(nd) / 1000);
    r->e[me].used = true;
    r->e[me].bound = bound;
    r->e[me].exp_ms = now + want;
    r->e[me].carries = bound && carry;
    if (r->e[me].carries) {
        r->e[me].ttl_ms = carry->ttl_ms;
        r->e[me].block = carry->block;
        snprintf(r->e[me].val, sizeof r->e[me].val, "%.32s %.*s", carry->token, SIM_VAL_MAX - 34,
                 carry->holder);
    }
    if (!r->exp_ms || r->exp_ms - now < want)
        r->exp_ms = now + want;
    r->mark_ms[me] = reader ? now + want : 0;
}

/* The caller's entry leaves (a grant, or HDEL when its waiters gave up). */
static void rec_leave(struct node *nd, unsigned n, unsigned me)
{
    rec_of(nd, n, node_ms(nd))->e[me].used = false;
}

/* The name and agent of m, for the record. */
static bool rec_who(const struct node *nd, const struct msg *m, unsigned *n, unsigned *me)
{
    int idx = sim_name_index(nd->s, m->name, m->name_len);
    if (idx < 0 || !nd->s->kinds)
        return false;
    *n = (unsigned)idx;
    *me = m->l->ag->id;
    return true;
}

/* The fencing token of a grant, from the slot's mark (fencing.md), which
 * is raised to it plus the block reserved for handoffs. */
static uint64_t grant_fence(struct node *nd, const struct msg *m, const struct keynames *kn)
{
    uint64_t fence = m->floor ? m->floor : (uint64_t)(node_clock_ns(nd) / 1000);
    uint64_t last = kmark(nd, kn->mark);
    if (last >= fence)
        fence = last + 1;
    char v[24];
    snprintf(v, sizeof v, "%" PRIu64, fence + m->block);
    kset(nd, kn->mark, v, 0);
    return fence;
}

static bool ours(const struct rkey *k, const char *token);

/* The exclusive acquire: adoption of a key that holds the caller's token
 * (a grant on release the agent did not take from its message), then the
 * turn, then SET NX. */
static long long run_acquire(struct node *nd, struct msg *m, const struct keynames *kn)
{
    int64_t now_ms = node_ms(nd);
    unsigned n, me;
    bool rec = rec_who(nd, m, &n, &me), queued = false;
    char val[SIM_VAL_MAX];
    snprintf(val, sizeof val, "%.32s %.*s", m->token, SIM_VAL_MAX - 34, m->holder);
    if (ours(kget(nd, kn->lock), m->token)) {
        kset(nd, kn->lock, val, now_ms + m->ttl_ms);
        if (rec) {
            rec_leave(nd, n, me);
            nd->rec[n].mark_ms[me] = 0;
        }
        nd->s->res->cov[COV_ADOPTED_GRANT]++;
        return (long long)grant_fence(nd, m, kn);
    }
    if (rec && queue_turn(nd, n, me, false, &queued) >= 0) {
        rec_join(nd, n, me, m->want_ms, m->bound, false, m);
        return 0;
    }
    const struct rkey *k = kget(nd, kn->lock);
    if (k) {
        if (rec)
            rec_join(nd, n, me, m->want_ms, m->bound, false, m);
        long long t = k->expire_ms ? k->expire_ms - now_ms : -1;
        return t < 0 ? 0 : -t;
    }
    /* The value: the token, then the holder record. */
    kset(nd, kn->lock, val, now_ms + m->ttl_ms);
    if (queued)
        rec_leave(nd, n, me);
    return (long long)grant_fence(nd, m, kn);
}

/* ---- the counted kinds: a hash of permits ---- */

static struct rfield *permit_of(struct rkey *k, const char *token)
{
    for (unsigned i = 0; k && k->hash && i < k->nf; i++)
        if (strncmp(k->f[i].token, token, 32) == 0)
            return &k->f[i];
    return NULL;
}

/* permits(keep): drops the lapsed permits; the live ones other than
 * keep's, the latest expiry of all (0: none) and the earliest of the
 * others' (0: none). */
static unsigned permits(struct node *nd, struct rkey *k, const char *keep, int64_t *last,
                        int64_t *soon)
{
    int64_t now = node_ms(nd);
    unsigned n = 0;
    *last = *soon = 0;
    for (unsigned i = 0; i < k->nf;) {
        struct rfield *f = &k->f[i];
        if (f->exp_ms <= now) {
            undo_log(nd, k->name, k);
            *f = k->f[--k->nf];
            continue;
        }
        if (f->exp_ms > *last)
            *last = f->exp_ms;
        if (!keep || strncmp(f->token, keep, 32) != 0) {
            n++;
            if (!*soon || f->exp_ms < *soon)
                *soon = f->exp_ms;
        }
        i++;
    }
    return n;
}

/* settle(): the key lives as long as its latest permit, or goes. */
static void settle(struct node *nd, const char *key, int64_t last)
{
    if (last == 0)
        kdel(nd, key);
    else
        kpexpire(nd, key, last);
}

static void kind_text(const struct msg *m, char *out, size_t len)
{
    if (m->lkind == LOCK_SEMAPHORE)
        snprintf(out, len, "sem:%u", (unsigned)m->limit);
    else
        snprintf(out, len, "shared");
}

/* A counted acquire (docs/redis.md, "Counted kinds"): another type is
 * taken, another kind or limit a mismatch, then the record's turn (a
 * reader waits only for writers), then the limit, then a permit with a
 * token from the same mark as the exclusive kind's. */
static long long run_acquire_counted(struct node *nd, struct msg *m, const struct keynames *kn)
{
    int64_t now = node_ms(nd);
    unsigned n = 0, me = 0, live = 0;
    bool rec = rec_who(nd, m, &n, &me), queued = false, reader = m->lkind == LOCK_SHARED;
    char kind[sizeof((struct rkey *)0)->kind];
    kind_text(m, kind, sizeof kind);
    struct rkey *k = kget(nd, kn->lock);
    int64_t last = 0, soon = 0;
    if (k && k->hash) {
        live = permits(nd, k, m->token, &last, &soon);
        if (last == 0) {
            kdel(nd, kn->lock);
            k = NULL;
        } else if (strcmp(k->kind, kind) != 0 && !BUG_NO_MISMATCH) {
            m->mismatch = true;
            return 0;
        }
    } else if (k) {
        if (rec)
            rec_join(nd, n, me, m->want_ms, m->bound, reader, NULL);
        long long t = k->expire_ms ? k->expire_ms - now : -1;
        return t < 0 ? 0 : -t;
    }
    if (rec && queue_turn(nd, n, me, reader, &queued) >= 0) {
        rec_join(nd, n, me, m->want_ms, m->bound, reader, NULL);
        if (reader)
            nd->s->res->cov[COV_READER_WAIT]++;
        return 0;
    }
    if (m->lkind == LOCK_SEMAPHORE && live >= m->limit) {
        if (rec)
            rec_join(nd, n, me, m->want_ms, m->bound, reader, NULL);
        return soon ? now - soon : 0;
    }
    int64_t exp = now + m->ttl_ms;
    if (exp > last)
        last = exp;
    k = kmake(nd, kn->lock);
    if (!k->hash) {
        k->hash = true;
        k->val[0] = '\0';
        k->nf = 0;
    }
    snprintf(k->kind, sizeof k->kind, "%s", kind);
    struct rfield *f = permit_of(k, m->token);
    if (!f) {
        if (k->nf == SIM_MAX_PERMITS) {
            fprintf(stderr, "dlock-sim: seed %" PRIu64 ": more than %d permits on %s\n",
                    nd->s->seed, SIM_MAX_PERMITS, k->name);
            abort();
        }
        f = &k->f[k->nf++];
        memcpy(f->token, m->token, 32);
        f->token[32] = '\0';
    }
    f->exp_ms = exp;
    k->expire_ms = last;
    if (queued)
        rec_leave(nd, n, me);
    if (rec)
        nd->rec[n].mark_ms[me] = 0;
    return (long long)grant_fence(nd, m, kn);
}

/* A counted renewal: a live permit's expiry moves to now + TTL, never
 * earlier than it was (the local holders of one shared grant share the
 * permit, each with its TTL); the key follows its latest permit. */
static long long run_renew_counted(struct node *nd, struct msg *m, const struct keynames *kn)
{
    struct rkey *k = kget(nd, kn->lock);
    struct rfield *f = permit_of(k, m->token);
    if (!f)
        return 0;
    int64_t now = node_ms(nd), exp = f->exp_ms, last, soon;
    if (exp > now) {
        undo_log(nd, k->name, k);
        int64_t to = now + m->ttl_ms;
        f->exp_ms = to > exp || BUG_RENEW_SHORTENS ? to : exp;
    }
    permits(nd, k, NULL, &last, &soon);
    settle(nd, kn->lock, last);
    return exp > now;
}

/* A counted release: the permit goes, the key with its last live permit;
 * the notice when the permit was live. */
static long long run_release_counted(struct node *nd, struct msg *m, const struct keynames *kn)
{
    struct rkey *k = kget(nd, kn->lock);
    struct rfield *f = permit_of(k, m->token);
    if (!f)
        return 0;
    int64_t now = node_ms(nd), exp = f->exp_ms, last, soon;
    undo_log(nd, k->name, k);
    *f = k->f[--k->nf];
    permits(nd, k, NULL, &last, &soon);
    settle(nd, kn->lock, last);
    if (exp <= now)
        return 0;
    if (m->notify) {
        publish(nd, m);
        sim_released(nd->s, m->name, m->name_len);
    }
    return 1;
}

static long long run_fence_counted(struct node *nd, struct msg *m, const struct keynames *kn)
{
    const struct rfield *f = permit_of(kget(nd, kn->lock), m->token);
    if (!f || f->exp_ms <= node_ms(nd))
        return 0;
    if (kmark(nd, kn->mark) < m->fence) {
        char v[24];
        snprintf(v, sizeof v, "%" PRIu64, m->fence);
        kset(nd, kn->mark, v, 0);
    }
    return 1;
}

/* Is k's value the record of token (the token, a space, the holder)? */
static bool ours(const struct rkey *k, const char *token)
{
    size_t n = strlen(token);
    return k && !k->hash && strncmp(k->val, token, n) == 0 &&
           (k->val[n] == ' ' || k->val[n] == '\0');
}

static long long run_renew(struct node *nd, struct msg *m, const struct keynames *kn)
{
    const struct rkey *k = kget(nd, kn->lock);
    if (!ours(k, m->token))
        return 0;
    kpexpire(nd, kn->lock, node_ms(nd) + m->ttl_ms);
    return 1;
}

/* Grant on release (scripts.c, LUA_HANDOVER), after the compare-and-delete
 * of an exclusive key with a notice, outside Redis Cluster: the oldest live
 * entry (the lapsed ones dropped) takes the key when it carries a grant, is
 * no reader's and its agent's keep-alive key lives: for its TTL or what is
 * left of that key's life, whichever is less; a token from the slot's mark
 * with the entry's block; the entry leaves; the grant on the channel. True
 * when it handed the key over. */
static bool handover(struct node *nd, const struct msg *m, const struct keynames *kn)
{
    struct sim *s = nd->s;
    unsigned n, me;
    if (s->cluster || !m->notify || !rec_who(nd, m, &n, &me))
        return false;
    int64_t now = node_ms(nd);
    struct wrecord *r = rec_of(nd, n, now);
    int first = -1;
    for (unsigned a = 0; a < s->nagents; a++) {
        struct wentry *e = &r->e[a];
        if (!e->used)
            continue;
        bool live = BUG_GRANT_LAPSED_KA && e->bound
                        ? e->exp_ms > now && e->exp_ms <= now + WAIT_BOUND_MAX_MS
                        : entry_live(nd, a, e->bound, e->exp_ms, now);
        if (!live) {
            e->used = false;
            continue;
        }
        if (first < 0 || entry_before(nd, r, a, (unsigned)first))
            first = (int)a;
    }
    if (first < 0)
        return false;
    struct wentry *e = &r->e[first];
    int64_t pttl = BUG_GRANT_LAPSED_KA ? (int64_t)e->ttl_ms : nd->ka_ms[first] - now;
    if (!e->carries || !e->bound || reader_mark(nd, r, (unsigned)first, now) || pttl <= 0)
        return false;
    check_dead_turn(nd, n, (unsigned)first);
    int64_t px = e->ttl_ms < pttl ? e->ttl_ms : pttl;
    kset(nd, kn->lock, e->val, now + px);
    struct msg *g = calloc(1, sizeof *g);
    if (!g) {
        fprintf(stderr, "dlock-sim: out of memory\n");
        exit(2);
    }
    g->block = e->block;
    g->fence = grant_fence(nd, g, kn);
    g->grant = true;
    snprintf(g->grant_to, sizeof g->grant_to, "%s", agent_wid(nd, (unsigned)first));
    memcpy(g->token, e->val, 32);
    g->seq = nd->ka_seq[first];
    g->ttl_ms = e->ttl_ms;
    g->name_len = m->name_len;
    memcpy(g->name, m->name, m->name_len);
    e->used = false;
    r->mark_ms[first] = 0;
    s->res->cov[COV_GRANT_ON_RELEASE]++;
    TRACE(s, "node%u hands %.*s over to agent%d (token %.6s, fence %" PRIu64 ", px %" PRId64 ")",
          nd->id, (int)m->name_len, m->name, first, g->token, g->fence, px);
    for (unsigned a = 0; a < s->nagents; a++)
        link_publish_grant(&s->links[a * s->nnodes + nd->id], g);
    free(g);
    return true;
}

/* A released token is spent (scripts.c, LUA_SPENT): an entry that carries
 * it leaves, the key the token's or not. */
static void spent(struct node *nd, const struct msg *m)
{
    unsigned n, me;
    if (nd->s->cluster || !rec_who(nd, m, &n, &me))
        return;
    struct wrecord *r = rec_of(nd, n, node_ms(nd));
    for (unsigned a = 0; a < nd->s->nagents; a++)
        if (r->e[a].used && r->e[a].carries && strncmp(r->e[a].val, m->token, 32) == 0) {
            r->e[a].used = false;
            r->mark_ms[a] = 0;
        }
}

static long long run_release(struct node *nd, struct msg *m, const struct keynames *kn)
{
    spent(nd, m);
    const struct rkey *k = kget(nd, kn->lock);
    if (!k || (!ours(k, m->token) && !BUG_RELEASE_NO_COMPARE))
        return 0;
    kdel(nd, kn->lock);
    if (handover(nd, m, kn))
        return 1;
    if (m->notify) {
        publish(nd, m);
        sim_released(nd->s, m->name, m->name_len);
    }
    return 1;
}

static long long run_fence(struct node *nd, struct msg *m, const struct keynames *kn)
{
    const struct rkey *k = kget(nd, kn->lock);
    if (!ours(k, m->token))
        return 0;
    if (kmark(nd, kn->mark) < m->fence) {
        char v[24];
        snprintf(v, sizeof v, "%" PRIu64, m->fence);
        kset(nd, kn->mark, v, 0);
    }
    return 1;
}

static void run_lookup(struct node *nd, struct msg *m, const struct keynames *kn)
{
    struct backend_holder *h = m->holder_out;
    if (!h)
        return;
    memset(h, 0, sizeof *h);
    const struct rkey *k = kget(nd, kn->lock);
    if (k && k->hash) {
        /* A counted key: its kind, the first permit as the record. */
        snprintf(h->value, sizeof h->value, "%s", k->kind);
        if (k->nf)
            snprintf(h->record, sizeof h->record, "%s", k->f[0].token);
        h->pttl = k->expire_ms ? k->expire_ms - node_ms(nd) : -1;
    } else if (k) {
        /* The token, and the whole value as the record. */
        snprintf(h->value, sizeof h->value, "%.*s", (int)strcspn(k->val, " "), k->val);
        snprintf(h->record, sizeof h->record, "%s", k->val);
        h->pttl = k->expire_ms ? k->expire_ms - node_ms(nd) : -1;
    } else {
        h->pttl = -2;
    }
    h->nodes = 1;
    h->nodes_holding = h->value[0] != '\0';
}

static void node_exec(struct node *nd, struct msg *m)
{
    const struct keynames *kn = names_of(m);
    bool counted = m->lkind != LOCK_EXCLUSIVE;
    nd->executed++;
    switch (m->kind) {
    case OP_ACQUIRE:
        m->n = counted ? run_acquire_counted(nd, m, kn) : run_acquire(nd, m, kn);
        break;
    case OP_RENEW:
        m->n = counted ? run_renew_counted(nd, m, kn) : run_renew(nd, m, kn);
        break;
    case OP_RELEASE:
        m->n = counted ? run_release_counted(nd, m, kn) : run_release(nd, m, kn);
        break;
    case OP_FENCE:
        m->n = counted ? run_fence_counted(nd, m, kn) : run_fence(nd, m, kn);
        break;
    case OP_LEAVE: {
        unsigned n, me;
        if (rec_who(nd, m, &n, &me))
            rec_leave(nd, n, me);
        break;
    }
    case OP_KEEPALIVE:
        nd->ka_ms[m->l->ag->id] = node_ms(nd) + m->ttl_ms;
        nd->ka_seq[m->l->ag->id] = m->fence; /* the sequence number, as the value */
        nd->ka_set_at[m->l->ag->id] = nd->s->now;
        break;
    default:
        run_lookup(nd, m, kn);
        break;
    }
    m->state = M_EXECUTED;
    /* An acquire that took the key after the agent was told it failed: the
     * agent's withdraw is retried for a TTL from the failure, the key lives
     * a TTL from now (README.md, "Known limits"). */
    if (m->kind == OP_ACQUIRE && m->n > 0 && m->cb_done) {
        struct sim *s = nd->s;
        if (s->nlate < SIM_MAX_LATE)
            memcpy(s->late[s->nlate++], m->token, 33);
        TRACE(s, "node%u takes the key for #%" PRIu64 ", failed %" PRIu64 " ms ago", nd->id, m->id,
              (agent_now(m->l->ag) - m->failed_at) / 1000000);
    }
    TRACE(nd->s, "node%u runs #%" PRIu64 " %s %.*s from agent%u: %lld%s", nd->id, m->id,
          (const char *[]){"acquire", "renew", "release", "fence", "lookup", "", "", "", "leave",
                           "keepalive"}[m->kind],
          (int)m->name_len, m->name, m->l->ag->id, m->n, m->mismatch ? " (another kind)" : "");
}

/* Runs m and answers it (a subscription is confirmed by the link). */
static void node_run(struct node *nd, struct msg *m)
{
    if (m->kind == OP_SUBSCRIBE || m->kind == OP_UNSUBSCRIBE) {
        link_subscription(m);
        return;
    }
    unsigned to = 0;
    m->redirect = nd->s->cluster ? (uint8_t)cluster_route(nd, m, &to) : R_NONE;
    if (m->redirect != R_NONE) {
        /* Cluster mode: MOVED, ASK or TRYAGAIN instead of the script. */
        m->redirect_to = (uint8_t)to;
        m->state = M_EXECUTED;
        TRACE(nd->s, "node%u answers #%" PRIu64 " %.*s from agent%u: %s node%u", nd->id, m->id,
              (int)m->name_len, m->name, m->l->ag->id,
              (const char *[]){"", "MOVED", "ASK", "TRYAGAIN"}[m->redirect], to);
        link_reply(m);
        return;
    }
    node_exec(nd, m);
    link_reply(m);
}

/* A request reaches the node. */
void node_arrive(struct node *nd, struct msg *m)
{
    /* Sentinel mode: sent to a master that has failed over since, which
     * is another server than this one now. */
    if (!nd->up || ((nd->s->sentinel || nd->s->cluster) && m->master_gen != nd->master_gen)) {
        m->state = M_LOST;
        msg_maybe_free(m);
        return;
    }
    if (nd->stalled) {
        m->state = M_AT_NODE;
        m->in_stallq = true;
        TAILQ_INSERT_TAIL(&nd->stallq, m, nlink);
        return;
    }
    node_run(nd, m);
}

/* The stall ends: everything queued runs, in arrival order; what came on a
 * connection the agent has closed meanwhile runs or not as the drop decided. */
void node_stall_end(struct node *nd)
{
    nd->stalled = false;
    struct msg *m;
    while ((m = TAILQ_FIRST(&nd->stallq))) {
        TAILQ_REMOVE(&nd->stallq, m, nlink);
        m->in_stallq = false;
        if (m->discard || !nd->up) {
            m->state = M_LOST;
            msg_maybe_free(m);
            continue;
        }
        node_run(nd, m);
    }
}

/* Queued requests die with the process. */
static void drop_stallq(struct node *nd)
{
    struct msg *m;
    while ((m = TAILQ_FIRST(&nd->stallq))) {
        TAILQ_REMOVE(&nd->stallq, m, nlink);
        m->in_stallq = false;
        m->state = M_LOST;
        msg_maybe_free(m);
    }
    nd->stalled = false;
}

static void node_down(struct node *nd, uint64_t down_ns)
{
    struct sim *s = nd->s;
    nd->up = false;
    drop_stallq(nd);
    nd->run_id = rng_next(&s->rng) | 1;
    nd->started_at = (int64_t)(s->now + down_ns);
    for (unsigned a = 0; a < s->nagents; a++)
        link_node_down(&s->links[a * s->nnodes + nd->id]);
}

/* The process stops; a durable node loads every acknowledged write back. */
void node_restart(struct node *nd, uint64_t down_ns)
{
    node_down(nd, down_ns);
    if (!nd->durable) {
        nd->nkeys = 0;
        memset(nd->rec, 0, sizeof nd->rec);
        memset(nd->ka_ms, 0, sizeof nd->ka_ms);
    }
    nd->nundo = nd->undo_head = 0;
}

/* A replica some ms behind takes the node's place: the writes of the last
 * rollback_ns are lost (and keys deleted meanwhile come back). */
void node_failover(struct node *nd, uint64_t rollback_ns, uint64_t down_ns)
{
    struct sim *s = nd->s;
    uint64_t since = s->now > rollback_ns ? s->now - rollback_ns : 0;
    bool save = nd->log_undo;
    nd->log_undo = false;
    while (nd->nundo > nd->undo_head && nd->undo[nd->nundo - 1].t > since) {
        struct undo *u = &nd->undo[--nd->nundo];
        struct rkey *k = kfind(nd, u->k.name);
        if (u->existed) {
            if (!k && strstr(u->k.name, " fence") == NULL && !expired(nd, &u->k))
                excl_note(s, X_RESURRECT, "failover on node%u brought back %s, deleted since",
                          nd->id, u->k.name);
            kput(nd, &u->k, u->k.expire_ms);
        } else if (k) {
            kremove(nd, k);
        }
    }
    nd->log_undo = save;
    nd->nundo = nd->undo_head = 0;
    memset(nd->rec, 0, sizeof nd->rec); /* the replica's record: a guess (ordering only) */
    memset(nd->ka_ms, 0, sizeof nd->ka_ms);
    nd->master_gen++;
    node_down(nd, down_ns);
    /* The replica has been up for long. */
    nd->started_at = -(int64_t)3600000000000ll;
}

/* What earlier runs left: the per-name counter of an earlier version and the
 * high-water mark of the name's slot (0: none), as they may differ from node
 * to node in quorum mode (so that proposals differ). */
void node_preload(struct node *nd, const char *name, uint64_t legacy, uint64_t mark)
{
    struct keynames kn;
    names_make(name, strlen(name), &kn);
    char v[24];
    if (legacy) {
        snprintf(v, sizeof v, "%" PRIu64, legacy);
        kset(nd, kn.legacy, v, 0);
    }
    if (mark && kmark(nd, kn.mark) < mark) {
        snprintf(v, sizeof v, "%" PRIu64, mark);
        kset(nd, kn.mark, v, 0);
    }
}

/* ---- cluster mode ---- */

/* How many keys m's script names, and how many of them nd has: acquire
 * names the lock key, the slot's fencing mark and the waiting-hosts record
 * (which the model keeps beside the keys: always missing), fence the first
 * two, a leave the record alone, the others the lock key alone. Expired
 * keys are missing (and go, as a lookup makes them go in Redis). */
void node_keys_present(struct node *nd, const struct msg *m, unsigned *nkeys, unsigned *present)
{
    const struct keynames *kn = names_of(m);
    *nkeys = m->kind == OP_ACQUIRE ? 3 : m->kind == OP_FENCE ? 2 : 1;
    if (m->kind == OP_LEAVE) {
        *present = 0; /* HDEL of the record alone */
        return;
    }
    *present = kget(nd, kn->lock) != NULL;
    if (*nkeys > 1)
        *present += kget(nd, kn->mark) != NULL;
}

/* MIGRATE of one key of hash slot `slot` from src to dst (DUMP, RESTORE
 * with the TTL left, DEL): false when src has none left. */
bool node_migrate_one(struct node *src, struct node *dst, unsigned slot)
{
    for (unsigned i = 0; i < src->nkeys; i++) {
        struct rkey *k = &src->keys[i];
        if (key_slot(k->name, strlen(k->name)) != slot)
            continue;
        struct rkey copy = *k;
        if (!kget(src, copy.name))
            return true; /* expired: gone, try again */
        int64_t left = copy.expire_ms ? copy.expire_ms - node_ms(src) : 0;
        kdel(src, copy.name);
        /* A counted key's permits keep their expiries as written, in the
         * source's clock: on a target whose clock is ahead they lapse that
         * much early, and a lease may be valid without its permit. The
         * scripts leave this to the masters' clocks agreeing (README.md,
         * "Known limits"): excused. */
        int64_t ahead = node_ms(dst) - node_ms(src);
        for (unsigned p = 0; copy.hash && ahead > 2 && p < copy.nf; p++)
            if (copy.f[p].exp_ms > node_ms(src)) {
                excl_note(src->s, X_PERMIT_CLOCK,
                          "a slot move took the permits of %s from node%u to node%u, whose clock "
                          "is %" PRId64 " ms ahead",
                          copy.name, src->id, dst->id, ahead);
                break;
            }
        kput(dst, &copy, copy.expire_ms ? node_ms(dst) + left : 0);
        TRACE(src->s, "node%u migrates %s to node%u (%" PRId64 " ms left)", src->id, copy.name,
              dst->id, left);
        return true;
    }
    return false;
}

/* A lock key alive now (not a fencing mark): a counted key with a live
 * permit (one whose permits all lapsed goes at the next script, or by its
 * TTL). */
bool node_key_live(const struct node *nd, const struct rkey *k)
{
    if (expired(nd, k) || strstr(k->name, " fence"))
        return false;
    for (unsigned i = 0; k->hash && i < k->nf; i++)
        if (k->f[i].exp_ms > node_ms(nd))
            return true;
    return !k->hash;
}

/* Does k hold token: a string key whose value is its record, or a counted
 * key with a live permit of it? */
bool node_key_holds(const struct node *nd, const struct rkey *k, const char *token)
{
    if (!k->hash)
        return strncmp(k->val, token, 32) == 0 && (k->val[32] == ' ' || k->val[32] == '\0');
    for (unsigned i = 0; i < k->nf; i++)
        if (strncmp(k->f[i].token, token, 32) == 0)
            return k->f[i].exp_ms > node_ms(nd);
    return false;
}

bool node_key_expired(const struct node *nd, const struct rkey *k)
{
    return expired(nd, k);
}

const struct rkey *node_key(const struct node *nd, const char *name)
{
    const struct rkey *k = kfind((struct node *)nd, name);
    return k && !expired(nd, k) ? k : NULL;
}
