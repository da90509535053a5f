/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_quorum.c -- quorum mode: the lock lives on N independent Redis
 * nodes (N odd), each driven by its own single-node backend, and an
 * operation succeeds only on a majority of the nodes that count.
 *
 * Acquire goes to every node at once. A node that has not answered within
 * node_timeout_ms is decided without. Once a majority took the key, the
 * fencing token is the highest of the tokens those nodes proposed; every
 * node whose proposal was lower gets it written back (only while it still
 * holds our key), and the grant needs a majority holding a counter at least
 * that high (docs/fencing.md has the proof). Renewal needs a majority too;
 * release goes to every node. Nodes that restarted recently count toward no
 * quorum (ops->counts); an acquire refused for that says so in the
 * log, once every few seconds. */
#include "backend_quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "backend_redis.h"
#include "dlock.h"
#include "log.h"
#include "quorum.h"
#include "util.h"

#define QMAX CONFIG_MAX_NODES

enum qkind { Q_ACQUIRE, Q_RENEW, Q_RELEASE };

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
    TAILQ_ENTRY(qop) tlink; /* in qb.timed while an acquire phase is open */
    struct qb *qb;
    uint8_t kind;
    uint8_t phase;    /* acquire: 1 taking the key, 2 writing the token back */
    bool decided;     /* cb has been called */
    unsigned refs;    /* node callbacks still to come */
    uint64_t expires; /* end of the open acquire phase */
    backend_cb cb;
    void *arg;
    uint32_t ttl_ms;
    long long min_pttl; /* acquire: the shortest PTTL of another holder seen */
    uint64_t fence;     /* acquire: the grant's token, from phase 1 */
    bool released;      /* release: some node deleted the key */
    bool notify;        /* release: publish the notice */
    int err;            /* the first error a node gave */
    uint8_t answer[QMAX];
    uint64_t proposed[QMAX]; /* acquire: each node's token */
    struct qsub sub[2][QMAX];
    char token[33];
    char *holder; /* acquire: the holder record, after the name */
    uint16_t name_len;
    char name[];
};

struct qnode {
    struct qb *qb;
    struct backend *be;
};

struct qb {
    struct backend base;
    struct ev_loop *loop;
    const struct config *cfg;
    struct backend_events ev;
    unsigned n;
    struct qnode node[QMAX];
    TAILQ_HEAD(, qop) timed; /* open acquire phases, by expiry */
    ev_timer timer;
    bool closing;
    uint64_t excl_logged; /* when a refusal for excluded nodes was last logged */
};

/* Refusals for excluded nodes come with every retry of every waiter: one
 * line this often says it all. */
#define EXCL_LOG_EVERY_NS (5 * NS_PER_SEC)

static void on_node_reply(void *arg, const struct backend_result *r);

/* ---- operations ---- */

static struct qop *op_new(struct qb *q, enum qkind kind, const char *name, size_t len,
                          const char *token, const char *holder, uint32_t ttl_ms, backend_cb cb,
                          void *arg)
{
    size_t hlen = holder ? strlen(holder) : 0;
    struct qop *op = calloc(1, sizeof *op + len + 1 + hlen + 1);
    if (!op)
        return NULL;
    op->holder = op->name + len + 1;
    memcpy(op->holder, holder ? holder : "", hlen + 1);
    op->qb = q;
    op->kind = (uint8_t)kind;
    op->phase = 1;
    op->cb = cb;
    op->arg = arg;
    op->ttl_ms = ttl_ms;
    op->min_pttl = -1;
    memcpy(op->token, token, 32);
    op->name_len = (uint16_t)len;
    memcpy(op->name, name, len);
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

/* An acquire phase is decided without the nodes still silent at expiry. */
static void op_time(struct qop *op)
{
    struct qb *q = op->qb;
    op_untime(op);
    op->expires = now_ns() + (uint64_t)q->cfg->node_timeout_ms * NS_PER_MS;
    TAILQ_INSERT_TAIL(&q->timed, op, tlink);
    if (!ev_is_active(&q->timer)) {
        ev_timer_set(&q->timer, q->cfg->node_timeout_ms / 1000.0, 0.0);
        ev_timer_start(q->loop, &q->timer);
    }
}

static void op_finish(struct qop *op, int err, enum backend_outcome outcome)
{
    op->decided = true;
    op_untime(op);
    struct backend_result r = {.err = err, .outcome = outcome, .at = now_ns()};
    if (!err && outcome == BACKEND_DONE && op->kind == Q_ACQUIRE)
        r.fence = op->fence;
    if (!err && outcome == BACKEND_TAKEN)
        r.pttl_ms = op->min_pttl > 0 ? op->min_pttl : 0;
    if (op->cb)
        op->cb(op->arg, &r);
}

static void op_maybe_free(struct qop *op)
{
    if (op->decided && op->refs == 0)
        free(op);
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
                              .floor = op->fence,
                              .fence = op->fence};
    int rc;
    switch (op->kind) {
    case Q_ACQUIRE:
        rc = op->phase == 1 ? be->ops->acquire(be, &req, on_node_reply, arg)
                            : be->ops->fence(be, &req, on_node_reply, arg);
        break;
    case Q_RENEW:
        rc = be->ops->renew(be, &req, on_node_reply, arg);
        break;
    default:
        rc = be->ops->release(be, &req, on_node_reply, arg);
        break;
    }
    if (rc == 0) {
        op->answer[i] = A_OPEN;
        op->refs++;
    } else {
        op->answer[i] = A_FAILED;
        if (!op->err)
            op->err = rc;
    }
}

/* Counts the answers of the nodes that count now and weighs them. */
static enum quorum_verdict op_verdict(const struct qop *op, bool any_no_taken)
{
    const struct qb *q = op->qb;
    uint64_t now = now_ns();
    unsigned ok = 0, no = 0, open = 0;
    for (unsigned i = 0; i < q->n; i++) {
        const struct backend *be = q->node[i].be;
        if (be->ops->counts && !be->ops->counts(be, now))
            continue;
        ok += op->answer[i] == A_OK;
        no += op->answer[i] == A_NO;
        open += op->answer[i] == A_OPEN;
    }
    return quorum_verdict(q->n, ok, no, open, any_no_taken);
}

/* Phase 1 won: the token is the highest proposal. Nodes that proposed it
 * already hold it as their counter; the others get it written back. */
static void acquire_fence(struct qop *op)
{
    struct qb *q = op->qb;
    uint64_t fence = 0;
    for (unsigned i = 0; i < q->n; i++)
        if (op->answer[i] == A_OK && op->proposed[i] > fence)
            fence = op->proposed[i];
    op->fence = fence;
    op->phase = 2;
    unsigned sent = 0;
    for (unsigned i = 0; i < q->n; i++) {
        if (op->answer[i] != A_OK) {
            op->answer[i] = A_NONE;
        } else if (op->proposed[i] < fence) {
            op_send(op, i);
            sent++;
        }
    }
    if (sent)
        op_time(op);
}

/* An acquire without a quorum while nodes are excluded: the operator learns
 * why, and when it will change. */
static void log_excluded(const struct qop *op)
{
    struct qb *q = op->qb;
    uint64_t now = now_ns();
    char why[160];
    if ((q->excl_logged && now - q->excl_logged < EXCL_LOG_EVERY_NS) ||
        !q->base.ops->excluded(&q->base, now, why, sizeof why))
        return;
    q->excl_logged = now;
    log_info("quorum: acquire of %s refused: %s", op->name, why);
}

static void acquire_decide(struct qop *op)
{
    switch (op_verdict(op, op->phase == 1)) {
    case QV_OPEN:
        return;
    case QV_WON:
        if (op->phase == 1) {
            acquire_fence(op);
            acquire_decide(op); /* phase 2 may be won already */
        } else {
            op_finish(op, 0, BACKEND_DONE);
        }
        return;
    case QV_TAKEN:
        if (op->phase == 1) {
            op_finish(op, 0, BACKEND_TAKEN);
            return;
        }
        break;
    case QV_NO_QUORUM:
        break;
    }
    log_debug("quorum: acquire of %s: no majority%s", op->name,
              op->phase == 2 ? " confirmed the fencing token" : "");
    log_excluded(op);
    op_finish(op, DLOCK_ENOQUORUM, BACKEND_DONE);
}

static void decide(struct qop *op)
{
    if (op->decided)
        return;
    switch (op->kind) {
    case Q_ACQUIRE:
        acquire_decide(op);
        break;
    case Q_RENEW:
        switch (op_verdict(op, false)) {
        case QV_OPEN:
            break;
        case QV_WON:
            op_finish(op, 0, BACKEND_DONE);
            break;
        case QV_TAKEN:
            op_finish(op, 0, BACKEND_NOT_OURS);
            break;
        case QV_NO_QUORUM:
            op_finish(op, DLOCK_ENOQUORUM, BACKEND_DONE);
            break;
        }
        break;
    default:
        /* Done only when every node has answered: a node that did not
         * may still hold the key, and the agent will ask again. */
        if (op->refs == 0)
            op_finish(op, op->err, op->released ? BACKEND_DONE : BACKEND_NOT_OURS);
        break;
    }
}

static void on_node_reply(void *arg, const struct backend_result *r)
{
    int err = r->err;
    struct qsub *sub = arg;
    struct qop *op = sub->op;
    unsigned i = sub->node;
    op->refs--;
    if (op->qb->closing && !op->decided)
        op_finish(op, DLOCK_EUNAVAIL, BACKEND_DONE); /* as a single node does */
    if (!op->decided && sub->phase == op->phase) {
        if (err) {
            op->answer[i] = A_FAILED;
            if (!op->err)
                op->err = err;
        } else if (op->kind == Q_ACQUIRE && op->phase == 1) {
            if (r->outcome == BACKEND_DONE) {
                op->answer[i] = A_OK;
                op->proposed[i] = r->fence;
            } else {
                op->answer[i] = A_NO;
                if (op->min_pttl < 0 || r->pttl_ms < op->min_pttl)
                    op->min_pttl = r->pttl_ms;
            }
        } else {
            op->answer[i] = r->outcome == BACKEND_DONE ? A_OK : A_NO;
            op->released |= op->kind == Q_RELEASE && r->outcome == BACKEND_DONE;
        }
        decide(op);
    }
    op_maybe_free(op);
}

/* Expired acquire phases: the nodes still silent count as failed. */
static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct qb *q = w->data;
    uint64_t now = now_ns();
    struct qop *op;
    while ((op = TAILQ_FIRST(&q->timed)) && op->expires <= now) {
        op_untime(op);
        for (unsigned i = 0; i < q->n; i++)
            if (op->answer[i] == A_OPEN)
                op->answer[i] = A_FAILED;
        decide(op);
        op_maybe_free(op);
    }
    /* decide() may have started the timer again, for a new phase. */
    ev_timer_stop(loop, w);
    if (op) {
        ev_timer_set(w, (double)(op->expires - now) / 1e9, 0.0);
        ev_timer_start(loop, w);
    }
}

/* Sends op to every node; an error at once only when no node took it. */
static int op_start(struct qop *op)
{
    struct qb *q = op->qb;
    if (q->closing) {
        free(op);
        return DLOCK_EUNAVAIL;
    }
    for (unsigned i = 0; i < q->n; i++)
        op_send(op, i);
    if (op->refs == 0) {
        int err = op->kind == Q_RELEASE ? op->err : DLOCK_ENOQUORUM;
        free(op);
        return err;
    }
    if (op->kind == Q_ACQUIRE)
        op_time(op);
    return 0;
}

static int q_acquire(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct qop *op = op_new((struct qb *)be, Q_ACQUIRE, req->name, req->len, req->token,
                            req->holder, req->ttl_ms, cb, arg);
    if (!op)
        return DLOCK_ENOMEM;
    /* One floor for all nodes, so that they usually propose the same token
     * and no write-back is needed: the agent's wall clock, or the caller's
     * floor when higher. */
    uint64_t wall = realtime_us();
    op->fence = req->floor > wall ? req->floor : wall;
    return op_start(op);
}

static int q_renew(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct qop *op = op_new((struct qb *)be, Q_RENEW, req->name, req->len, req->token, NULL,
                            req->ttl_ms, cb, arg);
    return op ? op_start(op) : DLOCK_ENOMEM;
}

static int q_release(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct qop *op =
        op_new((struct qb *)be, Q_RELEASE, req->name, req->len, req->token, NULL, 0, cb, arg);
    if (!op)
        return DLOCK_ENOMEM;
    op->notify = req->notify;
    return op_start(op);
}

/* ---- lookup: every node's view, the most common value reported ---- */

struct qlookup;
struct qlsub {
    struct qlookup *op;
    uint8_t node;
};

struct qlookup {
    backend_lookup_cb cb;
    void *arg;
    unsigned n, refs;
    bool answered[QMAX];
    struct backend_holder seen[QMAX];
    struct qlsub sub[QMAX];
};

static void lookup_done(struct qlookup *op)
{
    int best = -1;
    unsigned best_count = 0;
    for (unsigned i = 0; i < op->n; i++) {
        if (!op->answered[i])
            continue;
        unsigned count = 0;
        for (unsigned j = 0; j < op->n; j++)
            count += op->answered[j] && strcmp(op->seen[j].value, op->seen[i].value) == 0;
        if (best < 0 || count > best_count) {
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

static int q_lookup(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    struct qb *q = (struct qb *)be;
    struct qlookup *op = calloc(1, sizeof *op);
    if (!op)
        return DLOCK_ENOMEM;
    op->cb = cb;
    op->arg = arg;
    op->n = q->n;
    for (unsigned i = 0; i < q->n; i++) {
        op->sub[i] = (struct qlsub){.op = op, .node = (uint8_t)i};
        struct backend *nb = q->node[i].be;
        if (nb->ops->lookup(nb, name, len, on_node_lookup, &op->sub[i]) == 0)
            op->refs++;
    }
    if (op->refs == 0) {
        free(op);
        return DLOCK_ENOQUORUM;
    }
    return 0;
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

static void q_destroy(struct backend *be)
{
    struct qb *q = (struct qb *)be;
    q->closing = true;
    ev_timer_stop(q->loop, &q->timer);
    /* Every open operation has a command on some node: freeing the nodes
     * answers it with DLOCK_EUNAVAIL, and its last answer frees it. */
    for (unsigned i = 0; i < q->n; i++)
        if (q->node[i].be)
            q->node[i].be->ops->destroy(q->node[i].be);
    free(q);
}

static bool q_excluded(const struct backend *be, uint64_t now, char *buf, size_t len);

static const struct backend_ops q_ops = {
    .acquire = q_acquire,
    .renew = q_renew,
    .release = q_release,
    .lookup = q_lookup,
    .flush = q_flush,
    .pending = q_pending,
    .nodes = q_nodes,
    .excluded = q_excluded,
    .destroy = q_destroy,
};

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

/* ---- node events, passed on ---- */

static void on_node_notice(void *arg, const char *name, size_t len)
{
    struct qb *q = ((struct qnode *)arg)->qb;
    q->ev.on_notice(q->ev.arg, name, len);
}

static void on_node_subscribed(void *arg)
{
    struct qb *q = ((struct qnode *)arg)->qb;
    q->ev.on_subscribed(q->ev.arg);
}

static void on_node_ready(void *arg)
{
    struct qb *q = ((struct qnode *)arg)->qb;
    q->ev.on_ready(q->ev.arg);
}

struct backend *backend_quorum_new(struct ev_loop *loop, const struct config *cfg,
                                   const struct backend_events *events)
{
    struct qb *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->base.ops = &q_ops;
    q->base.release_after_miss = true;
    q->loop = loop;
    q->cfg = cfg;
    q->ev = *events;
    q->n = cfg->nnodes;
    TAILQ_INIT(&q->timed);
    ev_timer_init(&q->timer, on_timer, 0.0, 0.0);
    q->timer.data = q;
    for (unsigned i = 0; i < q->n; i++) {
        struct qnode *node = &q->node[i];
        node->qb = q;
        struct backend_events ev = {.arg = node,
                                    .on_notice = on_node_notice,
                                    .on_subscribed = on_node_subscribed,
                                    .on_ready = on_node_ready};
        node->be = backend_redis_new(loop, cfg, &cfg->nodes[i], &ev);
        if (!node->be) {
            q_destroy(&q->base);
            return NULL;
        }
    }
    return &q->base;
}
