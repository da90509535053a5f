/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_quorum.c -- quorum mode: the lock lives on N independent Redis
 * nodes (N odd), each driven by a backend of its own, and an operation
 * succeeds only on a majority of the nodes that count.
 *
 * Acquire goes to every node at once. A node that has not answered within
 * node_timeout_ms is decided without. Once a majority took the key, the
 * fencing token is the highest of the tokens those nodes proposed; every
 * node whose proposal was lower gets it written back (only while it still
 * holds our key), and the grant needs a majority holding a counter at least
 * that high (quorum_fence_* in quorum.c; docs/fencing.md has the proof).
 * Renewal needs a majority too; release goes to every node. Nodes that
 * restarted recently count toward no quorum (their ops->counts); an acquire
 * refused for that says so in the log, once every few seconds.
 *
 * Pure: the nodes are reached through struct backend_ops only, the time
 * through struct quorum_clock (backend_quorum.h). */
#include "backend_quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "dlock.h"
#include "log.h"
#include "quorum.h"
#include "util.h"
#ifdef DLOCK_PLANTED_BUGS
#include "planted.h"
#endif

#define QMAX CONFIG_MAX_NODES

/* What a node said in the current phase of an operation. */
enum qanswer { A_NONE, A_OPEN, A_OK, A_NO, A_FAILED };

struct qop;

/* The callback argument of one node's command: the operation, the node and
 * the phase it was sent in (late answers of a finished phase are ignored). */
struct qsub {
    struct qop *op;
    uint8_t node;
    uint8_t phase;
};

struct qop {
    TAILQ_ENTRY(qop) link;  /* in qb.ops until freed */
    TAILQ_ENTRY(qop) tlink; /* in qb.timed while an acquire phase is open */
    struct qb *qb;
    uint8_t opcode;    /* enum backend_op: ACQUIRE, RENEW or RELEASE */
    uint8_t lock_kind; /* enum lock_kind */
    uint8_t phase;     /* acquire: 1 taking the key, 2 writing the token back */
    bool decided;      /* cb has been called */
    unsigned refs;     /* node callbacks still to come */
    uint64_t expires;  /* end of the open acquire phase */
    backend_cb cb;
    void *arg;
    uint32_t ttl_ms;
    long long min_pttl; /* acquire: the shortest PTTL of another holder seen */
    uint64_t floor;     /* acquire: every node's floor for its token */
    /* acquire: the grant's token, from phase 1, plus the block reserved
     * after it: the value the slot's mark must reach on a majority */
    uint64_t fence;
    uint32_t block;   /* acquire: see backend_req */
    uint32_t want_ms; /* acquire: see backend_req */
    char waiter_id[BACKEND_WAITER_ID_MAX + 1];
    bool released; /* release: some node deleted the key */
    bool notify;   /* release: publish the notice */
    int err;       /* the first error a node gave */
    uint8_t answer[QMAX];
    uint64_t proposed[QMAX]; /* acquire: each node's token */
    uint64_t counter[QMAX];  /* acquire phase 2: each node's counter as known */
    struct qsub sub[2][QMAX];
    char token[33];
    char *holder; /* acquire: the holder record, after the name */
    uint16_t name_len;
    char name[];
};

struct qlookup;

struct qnode {
    struct qb *qb;
    struct backend *be;
    struct backend_events ev; /* the node's events, passed on */
};

struct qb {
    struct backend base;
    const struct config *cfg;
    struct quorum_clock clock;
    struct backend_events ev;
    unsigned n;
    struct qnode node[QMAX];
    TAILQ_HEAD(, qop) ops;         /* every operation not yet freed */
    TAILQ_HEAD(, qop) timed;       /* open acquire phases, by expiry */
    TAILQ_HEAD(, qlookup) lookups; /* every lookup not yet answered */
    uint64_t armed;                /* the due the clock's timer is armed at, 0 none */
    bool closing;
    uint64_t excl_logged; /* when a refusal for excluded nodes was last logged */
};

/* Refusals for excluded nodes come with every retry of every waiter: one
 * line this often says it all. */
#define EXCL_LOG_EVERY_NS (5 * NS_PER_SEC)

static void on_node_reply(void *arg, const struct backend_result *r);

static uint64_t clock_now(const struct qb *q)
{
    return q->clock.now(q->clock.arg);
}

/* Points the clock's timer at the first open acquire phase. A timer left at
 * an earlier due (that phase was decided since) only comes early. */
static void rearm(struct qb *q)
{
    const struct qop *first = TAILQ_FIRST(&q->timed);
    uint64_t due = first ? first->expires : 0;
    if (due && due != q->armed) {
        q->armed = due;
        q->clock.arm(q->clock.arg, due);
    }
}

/* ---- operations ---- */

static struct qop *op_new(struct qb *q, const struct backend_req *req, backend_cb cb, void *arg)
{
    enum backend_op kind = req->op;
    const char *holder = kind == BACKEND_ACQUIRE ? req->holder : NULL;
    size_t hlen = holder ? strlen(holder) : 0;
    struct qop *op = calloc(1, sizeof *op + req->len + 1 + hlen + 1);
    if (!op)
        return NULL;
    op->holder = op->name + req->len + 1;
    memcpy(op->holder, holder ? holder : "", hlen + 1);
    if (kind == BACKEND_ACQUIRE) {
        op->block = req->block;
        op->want_ms = req->want_ms;
        snprintf(op->waiter_id, sizeof op->waiter_id, "%s", req->waiter_id ? req->waiter_id : "");
    }
    op->qb = q;
    op->opcode = (uint8_t)kind;
    op->lock_kind = (uint8_t)req->kind;
    op->phase = 1;
    op->cb = cb;
    op->arg = arg;
    op->ttl_ms = kind == BACKEND_RELEASE ? 0 : req->ttl_ms;
    op->notify = kind == BACKEND_RELEASE && req->notify;
    op->min_pttl = -1;
    memcpy(op->token, req->token, 32);
    op->name_len = (uint16_t)req->len;
    memcpy(op->name, req->name, req->len);
    for (int p = 0; p < 2; p++)
        for (unsigned i = 0; i < QMAX; i++)
            op->sub[p][i] = (struct qsub){.op = op, .node = (uint8_t)i, .phase = (uint8_t)(p + 1)};
    return op;
}

static void op_untime(struct qop *op)
{
    if (op->expires) {
        TAILQ_REMOVE(&op->qb->timed, op, tlink);
        op->expires = 0;
    }
}

/* An acquire phase is decided without the nodes still silent at expiry.
 * Every phase waits as long, so the list stays in expiry order. */
static void op_time(struct qop *op, uint64_t now)
{
    struct qb *q = op->qb;
    op_untime(op);
    op->expires = now + (uint64_t)q->cfg->node_timeout_ms * NS_PER_MS;
    TAILQ_INSERT_TAIL(&q->timed, op, tlink);
    rearm(q);
}

static void op_finish(struct qop *op, int err, enum backend_outcome outcome, uint64_t now)
{
    op->decided = true;
    op_untime(op);
    struct backend_result r = {.err = err, .outcome = outcome, .at = now};
    if (!err && outcome == BACKEND_DONE && op->opcode == BACKEND_ACQUIRE)
        r.fence = op->fence - op->block;
    if (!err && outcome == BACKEND_TAKEN)
        r.pttl_ms = op->min_pttl > 0 ? op->min_pttl : 0;
    if (op->cb)
        op->cb(op->arg, &r);
}

static void op_free(struct qop *op)
{
    TAILQ_REMOVE(&op->qb->ops, op, link);
    free(op);
}

static void op_maybe_free(struct qop *op)
{
    if (op->decided && op->refs == 0)
        op_free(op);
}

/* Sends the operation's command to node i for the current phase; a node
 * that cannot take it now counts as failed. */
static void op_send(struct qop *op, unsigned i)
{
    struct qb *q = op->qb;
    struct backend *be = q->node[i].be;
    void *arg = &op->sub[op->phase - 1][i];
    struct backend_req req = {.name = op->name,
                              .len = op->name_len,
                              .token = op->token,
                              .holder = op->holder,
                              .ttl_ms = op->ttl_ms,
                              .notify = op->notify,
                              .floor = op->floor,
                              .block = op->block,
                              .waiter_id = op->waiter_id[0] ? op->waiter_id : NULL,
                              .want_ms = op->want_ms,
                              .fence = op->fence};
    req.kind = (enum lock_kind)op->lock_kind;
    /* An acquire's second phase writes the token back. */
    req.op = op->opcode == BACKEND_ACQUIRE && op->phase == 2 ? BACKEND_FENCE : op->opcode;
    int rc = be->ops->op(be, &req, on_node_reply, arg);
    if (rc == 0) {
        op->answer[i] = A_OPEN;
        op->refs++;
    } else {
        op->answer[i] = A_FAILED;
        if (!op->err)
            op->err = rc;
    }
}

static bool node_counts(const struct qb *q, unsigned i, uint64_t now)
{
    const struct backend *be = q->node[i].be;
#ifdef DLOCK_PLANTED_BUGS
    if (core_bug == CORE_BUG_QUORUM_NO_EXCLUSION)
        return true;
#endif
    return !be->ops->counts || be->ops->counts(be, now);
}

/* Counts the answers of the nodes that count now and weighs them. */
static enum quorum_verdict op_verdict(const struct qop *op, uint64_t now, bool any_no_taken)
{
    const struct qb *q = op->qb;
    unsigned ok = 0, no = 0, open = 0;
    for (unsigned i = 0; i < q->n; i++) {
        if (!node_counts(q, i, now))
            continue;
        ok += op->answer[i] == A_OK;
        no += op->answer[i] == A_NO;
        open += op->answer[i] == A_OPEN;
    }
    return quorum_verdict(q->n, ok, no, open, any_no_taken);
}

/* Phase 2: whether a counting majority holds a counter at the token. */
static enum quorum_verdict fence_verdict(const struct qop *op, uint64_t now)
{
    const struct qb *q = op->qb;
    bool counts[QMAX], open[QMAX];
    for (unsigned i = 0; i < q->n; i++) {
        counts[i] = node_counts(q, i, now);
        open[i] = op->answer[i] == A_OPEN;
    }
    return quorum_fence_verdict(q->n, counts, op->counter, open, op->fence);
}

/* Phase 1 won: the token is the highest proposal. Nodes that proposed it
 * already hold it as their counter; the others get it written back. */
static void acquire_fence(struct qop *op, uint64_t now)
{
    struct qb *q = op->qb;
    bool took[QMAX], write_back = true;
    for (unsigned i = 0; i < q->n; i++)
        took[i] = op->answer[i] == A_OK;
    op->fence = quorum_fence_token(q->n, took, op->proposed);
#ifdef DLOCK_PLANTED_BUGS
    if (core_bug == CORE_BUG_QUORUM_LOW_FENCE) {
        /* The lowest proposal, written back nowhere: a node whose counter
         * is higher may have granted that token already. */
        for (unsigned i = 0; i < q->n; i++)
            if (took[i] && op->proposed[i] < op->fence)
                op->fence = op->proposed[i];
        write_back = false;
    }
#endif
    op->phase = 2;
    unsigned sent = 0;
    for (unsigned i = 0; i < q->n; i++) {
        op->counter[i] = took[i] ? op->proposed[i] : 0;
        op->answer[i] = A_NONE;
        if (write_back && quorum_fence_write_back(took[i], op->proposed[i], op->fence)) {
            op_send(op, i);
            sent++;
#ifdef DLOCK_PLANTED_BUGS
            /* Counts the write-back as confirmed before any answer. */
            if (core_bug == CORE_BUG_QUORUM_FENCE_UNCONFIRMED)
                op->counter[i] = op->fence;
#endif
        }
    }
    if (sent)
        op_time(op, now);
}

/* An acquire without a quorum while nodes are excluded: the operator learns
 * why, and when it will change. */
static void log_excluded(const struct qop *op, uint64_t now)
{
    struct qb *q = op->qb;
    char why[160];
    if ((q->excl_logged && now - q->excl_logged < EXCL_LOG_EVERY_NS) ||
        !q->base.ops->excluded(&q->base, now, why, sizeof why))
        return;
    q->excl_logged = now;
    log_info("quorum: acquire of %s refused: %s", op->name, why);
}

static void acquire_decide(struct qop *op, uint64_t now)
{
    bool taking = op->phase == 1;
    switch (taking ? op_verdict(op, now, true) : fence_verdict(op, now)) {
    case QV_OPEN:
        return;
    case QV_WON:
        if (taking) {
            acquire_fence(op, now);
            acquire_decide(op, now); /* phase 2 may be won already */
        } else {
            op_finish(op, 0, BACKEND_DONE, now);
        }
        return;
    case QV_TAKEN:
        if (taking) {
            op_finish(op, 0, BACKEND_TAKEN, now);
            return;
        }
        break;
    case QV_NO_QUORUM:
        break;
    }
    log_debug("quorum: acquire of %s: no majority%s", op->name,
              taking ? "" : " confirmed the fencing token");
    log_excluded(op, now);
    op_finish(op, DLOCK_ENOQUORUM, BACKEND_DONE, now);
}

static void decide(struct qop *op, uint64_t now)
{
    if (op->decided)
        return;
    switch (op->opcode) {
    case BACKEND_ACQUIRE:
        acquire_decide(op, now);
        break;
    case BACKEND_RENEW:
        switch (op_verdict(op, now, false)) {
        case QV_OPEN:
            break;
        case QV_WON:
            op_finish(op, 0, BACKEND_DONE, now);
            break;
        case QV_TAKEN:
            op_finish(op, 0, BACKEND_NOT_OURS, now);
            break;
        case QV_NO_QUORUM:
            op_finish(op, DLOCK_ENOQUORUM, BACKEND_DONE, now);
            break;
        }
        break;
    default:
        /* Done only when every node has answered: a node that did not
         * may still hold the key, and the core will ask again. */
        if (op->refs == 0)
            op_finish(op, op->err, op->released ? BACKEND_DONE : BACKEND_NOT_OURS, now);
        break;
    }
}

static void on_node_reply(void *arg, const struct backend_result *r)
{
    struct qsub *sub = arg;
    struct qop *op = sub->op;
    unsigned i = sub->node;
    op->refs--;
    if (op->qb->closing && !op->decided)
        op_finish(op, DLOCK_EUNAVAIL, BACKEND_DONE, r->at); /* as a single node does */
    if (!op->decided && sub->phase == op->phase) {
        if (r->err) {
            op->answer[i] = A_FAILED;
            if (!op->err)
                op->err = r->err;
        } else if (op->opcode == BACKEND_ACQUIRE && op->phase == 1) {
            if (r->outcome == BACKEND_DONE) {
                op->answer[i] = A_OK;
                /* The mark it now holds: the token and its block. */
                op->proposed[i] = r->fence + op->block;
            } else {
                op->answer[i] = A_NO;
                if (op->min_pttl < 0 || r->pttl_ms < op->min_pttl)
                    op->min_pttl = r->pttl_ms;
            }
        } else {
            op->answer[i] = r->outcome == BACKEND_DONE ? A_OK : A_NO;
            if (op->opcode == BACKEND_ACQUIRE && r->outcome == BACKEND_DONE)
                op->counter[i] = op->fence; /* written back */
            op->released |= op->opcode == BACKEND_RELEASE && r->outcome == BACKEND_DONE;
        }
        decide(op, r->at);
    }
    op_maybe_free(op);
}

/* Expired acquire phases: the nodes still silent count as failed. */
void backend_quorum_timeout(struct backend *be, uint64_t now)
{
    struct qb *q = (struct qb *)be;
    q->armed = 0; /* the timer has come */
    struct qop *op;
    while ((op = TAILQ_FIRST(&q->timed)) && op->expires <= now) {
        op_untime(op);
        for (unsigned i = 0; i < q->n; i++)
            if (op->answer[i] == A_OPEN)
                op->answer[i] = A_FAILED;
        decide(op, now);
        op_maybe_free(op);
    }
    /* decide() may have timed a new phase. */
    rearm(q);
}

/* Sends op to every node; an error at once only when no node took it. */
static int op_start(struct qop *op, uint64_t now)
{
    struct qb *q = op->qb;
    if (q->closing) {
        free(op);
        return DLOCK_EUNAVAIL;
    }
    TAILQ_INSERT_TAIL(&q->ops, op, link);
    for (unsigned i = 0; i < q->n; i++)
        op_send(op, i);
    if (op->refs == 0) {
        int err = op->opcode == BACKEND_RELEASE ? op->err : DLOCK_ENOQUORUM;
        /* Refused before any node was asked (none could be): the operator
         * learns why all the same. */
        if (op->opcode == BACKEND_ACQUIRE)
            log_excluded(op, now);
        op_free(op);
        return err;
    }
    if (op->opcode == BACKEND_ACQUIRE)
        op_time(op, now);
    return 0;
}

static int q_op(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct qb *q = (struct qb *)be;
    if (req->op == BACKEND_FENCE)
        return DLOCK_EBACKEND; /* the write-back is the quorum's own business */
    if (req->op == BACKEND_LOOKUP || req->op == BACKEND_FORCE)
        return DLOCK_EBACKEND; /* q_lookup, q_force: every node's view */
    struct qop *op = op_new(q, req, cb, arg);
    if (!op)
        return DLOCK_ENOMEM;
    if (req->op == BACKEND_ACQUIRE) {
        /* One floor for all nodes, so that they usually propose the same
         * token and no write-back is needed: the wall clock, or the caller's
         * floor when higher. */
        uint64_t wall = q->clock.wall_us(q->clock.arg);
        op->floor = req->floor > wall ? req->floor : wall;
    }
    return op_start(op, clock_now(q));
}

/* ---- lookup: every node's view, the most common value reported ---- */

struct qlsub {
    struct qlookup *op;
    uint8_t node;
};

struct qlookup {
    TAILQ_ENTRY(qlookup) link; /* in qb.lookups */
    struct qb *qb;
    backend_lookup_cb cb;
    void *arg;
    unsigned n, refs;
    bool force; /* a forced release: a majority must have deleted the key */
    bool answered[QMAX];
    struct backend_holder seen[QMAX];
    struct qlsub sub[QMAX];
};

static void lookup_done(struct qlookup *op)
{
    TAILQ_REMOVE(&op->qb->lookups, op, link);
    int best = -1;
    unsigned best_count = 0, nanswered = 0;
    for (unsigned i = 0; i < op->n; i++)
        nanswered += op->answered[i];
    if (op->force && nanswered <= op->n / 2) {
        /* Deleted on a minority (the others' keys expire by their TTL):
         * the old holder may keep its majority. */
        op->cb(op->arg, DLOCK_ENOQUORUM, NULL);
        free(op);
        return;
    }
    for (unsigned i = 0; i < op->n; i++) {
        if (!op->answered[i])
            continue;
        unsigned count = 0;
        for (unsigned j = 0; j < op->n; j++)
            count += op->answered[j] && strcmp(op->seen[j].value, op->seen[i].value) == 0;
        /* Among nodes that agree on a shared or semaphore key's kind, the
         * one that reports the most live permits (a permit missing on a
         * minority is still held). */
        if (best < 0 || count > best_count ||
            (count == best_count && strcmp(op->seen[i].value, op->seen[best].value) == 0 &&
             op->seen[i].permits > op->seen[best].permits)) {
            best = (int)i;
            best_count = count;
        }
    }
    if (best < 0) {
        op->cb(op->arg, DLOCK_ENOQUORUM, NULL);
    } else if (best_count <= op->n / 2) {
        struct backend_holder h = {.nodes = op->n, .undetermined = true};
        op->cb(op->arg, 0, &h);
    } else {
        struct backend_holder h = op->seen[best];
        h.nodes = op->n;
        h.nodes_holding = h.value[0] ? best_count : 0;
        op->cb(op->arg, 0, &h);
    }
    free(op);
}

static void on_node_lookup(void *arg, int err, const struct backend_holder *h)
{
    struct qlsub *sub = arg;
    struct qlookup *op = sub->op;
    if (!err && h) {
        op->answered[sub->node] = true;
        op->seen[sub->node] = *h;
    }
    if (--op->refs == 0)
        lookup_done(op);
}

/* A lookup, or (force) a forced release, on every node. */
static int q_read(struct backend *be, bool force, const char *name, size_t len,
                  backend_lookup_cb cb, void *arg)
{
    struct qb *q = (struct qb *)be;
    if (q->closing)
        return DLOCK_EUNAVAIL;
    struct qlookup *op = calloc(1, sizeof *op);
    if (!op)
        return DLOCK_ENOMEM;
    op->qb = q;
    op->cb = cb;
    op->arg = arg;
    op->n = q->n;
    op->force = force;
    TAILQ_INSERT_TAIL(&q->lookups, op, link);
    for (unsigned i = 0; i < q->n; i++) {
        op->sub[i] = (struct qlsub){.op = op, .node = (uint8_t)i};
        struct backend *nb = q->node[i].be;
        int rc = force
                     ? (nb->ops->force ? nb->ops->force(nb, name, len, on_node_lookup, &op->sub[i])
                                       : DLOCK_EBACKEND)
                     : nb->ops->lookup(nb, name, len, on_node_lookup, &op->sub[i]);
        if (rc == 0)
            op->refs++;
    }
    if (op->refs == 0) {
        TAILQ_REMOVE(&q->lookups, op, link);
        free(op);
        return DLOCK_ENOQUORUM;
    }
    return 0;
}

static int q_lookup(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    return q_read(be, false, name, len, cb, arg);
}

static int q_force(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                   void *arg)
{
    return q_read(be, true, name, len, cb, arg);
}

static void q_flush(struct backend *be)
{
    struct qb *q = (struct qb *)be;
    for (unsigned i = 0; i < q->n; i++)
        q->node[i].be->ops->flush(q->node[i].be);
}

static size_t q_pending(const struct backend *be)
{
    const struct qb *q = (const struct qb *)be;
    size_t n = 0;
    for (unsigned i = 0; i < q->n; i++)
        n += q->node[i].be->ops->pending(q->node[i].be);
    return n;
}

static size_t q_nodes(const struct backend *be, struct backend_node *out, size_t max)
{
    const struct qb *q = (const struct qb *)be;
    for (unsigned i = 0; i < q->n && i < max; i++)
        q->node[i].be->ops->nodes(q->node[i].be, &out[i], 1);
    return q->n;
}

static bool q_excluded(const struct backend *be, uint64_t now, char *buf, size_t len)
{
    struct backend_node nodes[QMAX];
    size_t n = be->ops->nodes(be, nodes, QMAX);
    unsigned excluded = 0;
    uint64_t first = 0;
    for (size_t i = 0; i < n && i < QMAX; i++) {
        if (nodes[i].excluded_until <= now)
            continue;
        if (!excluded++ || nodes[i].excluded_until < first)
            first = nodes[i].excluded_until;
    }
    if (!excluded)
        return false;
    snprintf(buf, len,
             "%u of %zu nodes are excluded after a (re)start; the first joins quorums in %llu s",
             excluded, n, (unsigned long long)((first - now + NS_PER_SEC - 1) / NS_PER_SEC));
    return true;
}

/* Frees the nodes, then every operation: an open one is answered with
 * DLOCK_EUNAVAIL, by its node's destroy (as Redis nodes do) or here. */
static void teardown(struct qb *q, bool done)
{
    q->closing = true;
    if (q->armed)
        q->clock.arm(q->clock.arg, 0);
    q->armed = 0;
    for (unsigned i = 0; i < q->n; i++)
        if (q->node[i].be)
            q->node[i].be->ops->destroy(q->node[i].be);
    uint64_t now = clock_now(q);
    struct qop *op;
    while ((op = TAILQ_FIRST(&q->ops))) {
        if (!op->decided)
            op_finish(op, DLOCK_EUNAVAIL, BACKEND_DONE, now);
        op_free(op);
    }
    struct qlookup *lk;
    while ((lk = TAILQ_FIRST(&q->lookups)))
        lookup_done(lk); /* with the answers that came */
    if (done && q->clock.done)
        q->clock.done(q->clock.arg);
    free(q);
}

static void q_destroy(struct backend *be)
{
    teardown((struct qb *)be, true);
}

/* Notices may come from any node: each is asked. A node keeps nothing while
 * its link is down; when it is back it says so (on_subscribed, passed on),
 * and the core asks again, of every node: those already subscribed leave
 * the name as it is. */
static int q_watch(struct backend *be, const char *name, size_t len, bool on)
{
    struct qb *q = (struct qb *)be;
    int rc = DLOCK_ENOMEM;
    for (unsigned i = 0; i < q->n; i++) {
        struct backend *nb = q->node[i].be;
        if (nb->ops->watch && nb->ops->watch(nb, name, len, on) == 0)
            rc = 0;
    }
    return rc;
}

static void q_leave(struct backend *be, const struct backend_req *req)
{
    struct qb *q = (struct qb *)be;
    for (unsigned i = 0; i < q->n; i++) {
        struct backend *nb = q->node[i].be;
        if (nb->ops->leave)
            nb->ops->leave(nb, req);
    }
}

static const struct backend_ops q_ops = {
    .op = q_op,
    .watch = q_watch,
    .leave = q_leave,
    .lookup = q_lookup,
    .force = q_force,
    .flush = q_flush,
    .pending = q_pending,
    .nodes = q_nodes,
    .excluded = q_excluded,
    .destroy = q_destroy,
};

/* ---- node events, passed on ---- */

static void on_node_notice(void *arg, const char *name, size_t len,
                           const struct backend_grant *grant)
{
    struct qb *q = ((struct qnode *)arg)->qb;
    /* No node binds entries in quorum mode: no grant on release comes. */
    q->ev.on_notice(q->ev.arg, name, len, NULL);
}

static void on_node_subscribed(void *arg)
{
    struct qb *q = ((struct qnode *)arg)->qb;
    q->ev.on_subscribed(q->ev.arg);
}

static void on_node_unwatched(void *arg, const char *name, size_t len)
{
    struct qb *q = ((struct qnode *)arg)->qb;
    if (q->ev.on_unwatched)
        q->ev.on_unwatched(q->ev.arg, name, len);
}

static void on_node_ready(void *arg)
{
    struct qb *q = ((struct qnode *)arg)->qb;
    q->ev.on_ready(q->ev.arg);
}

/* The kinds every node keeps, but a semaphore. N permits on each of n
 * nodes, each grant on a majority, can hold N + 1 holders once N >= 2: with
 * 3 nodes and 2 permits, {1,2}, {2,3} and {1,3} are three majorities that
 * put two permits on each node. Shared holds are safe: a reader's majority
 * and a writer's always meet on a node, which refuses one of them. */
static uint32_t quorum_kinds(const struct qb *q)
{
    uint32_t kinds = UINT32_MAX;
    for (unsigned i = 0; i < q->n; i++)
        kinds &= q->node[i].be->kinds;
    return kinds & ~BACKEND_KIND(LOCK_SEMAPHORE);
}

struct backend *backend_quorum_new(const struct config *cfg, unsigned n, backend_node_factory make,
                                   void *make_arg, const struct quorum_clock *clock,
                                   const struct backend_events *ev)
{
    if (n == 0 || n > QMAX)
        return NULL;
    struct qb *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->base.ops = &q_ops;
    q->base.release_after_miss = true;
    q->cfg = cfg;
    q->clock = *clock;
    q->ev = *ev;
    q->n = n;
    TAILQ_INIT(&q->ops);
    TAILQ_INIT(&q->timed);
    TAILQ_INIT(&q->lookups);
    for (unsigned i = 0; i < n; i++) {
        struct qnode *node = &q->node[i];
        node->qb = q;
        node->ev = (struct backend_events){.arg = node,
                                           .on_notice = on_node_notice,
                                           .on_subscribed = on_node_subscribed,
                                           .on_unwatched = on_node_unwatched,
                                           .on_ready = on_node_ready};
        node->be = make(make_arg, i, &node->ev);
        if (!node->be) {
            teardown(q, false);
            return NULL;
        }
    }
    q->base.kinds = quorum_kinds(q);
    return &q->base;
}
