/* SPDX-License-Identifier: BSD-3-Clause */
/* link.c -- one agent's connections to one simulated Redis node, as a
 * struct backend (core/backend.h): commands queued by the ops and written
 * by flush, delivered in order after a random delay, answered with the
 * agent's clock at arrival; a lost connection fails what is in flight with
 * DLOCK_EUNAVAIL (each command having run on the node or not), reports
 * on_unsubscribed when the notice connection was up, reconnects with
 * backoff and jitter, then reports on_ready and, once the notice
 * connection is up, on_subscribed. Release notices are per name, as in
 * notice_link.c: the watch op asks the node for a name's channel (or drops
 * it) on the notice connection, whose own delays and order are independent
 * of the command connection's; the node confirms each subscription with a
 * notice for the name, publishes a release only to the links subscribed to
 * its name, and forgets a connection's subscriptions when it is lost. The
 * link keeps only what its connection holds: a name asked for while it is
 * down, or already asked for, is left as it is, and a new connection has no
 * subscription until the core asks again (on_subscribed). Like the real
 * single-node backend it has a command watchdog and, in quorum mode, the
 * restart exclusion read from the node's run id, uptime and persistence.
 * In sentinel mode the link follows the master as backend_sentinel.c does:
 * what it sends goes to the master it knows of (a request for a master that
 * has failed over meanwhile is lost), and when it hears of a failover
 * (link_doubt) it reports on_doubt, then gives the old master up: whatever
 * that master has not answered is answered with DLOCK_EUNAVAIL, never with
 * its word, and the link connects to the new master.
 * Callbacks come only from events, never from inside a call. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "quorum.h"
#include "sim.h"

/* A bug of the model's own for the planted-bug tests: subscriptions are
 * not confirmed with a notice. */
bool sim_bug_no_confirm;
#ifdef DLOCK_PLANTED_BUGS
#define BUG_NO_CONFIRM sim_bug_no_confirm
#else
#define BUG_NO_CONFIRM 0
#endif

static const char *const kind_name[] = {"acquire", "renew",    "release",   "fence",
                                        "lookup",  "notice",   "subscribe", "unsubscribe",
                                        "leave",   "keepalive"};

static struct msg *msg_new(struct link *l, uint8_t kind)
{
    struct msg *m = calloc(1, sizeof *m);
    if (!m) {
        fprintf(stderr, "dlock-sim: out of memory\n");
        exit(2);
    }
    m->l = l;
    m->kind = kind;
    m->id = ++l->s->msg_ids;
    LIST_INSERT_HEAD(&l->s->all_msgs, m, all);
    return m;
}

/* Frees m once nothing refers to it: its answer is given, and it is in no
 * event, queue or held list. */
void msg_maybe_free(struct msg *m)
{
    if (!m->cb_done || m->in_event || m->in_stallq || m->in_held)
        return;
    LIST_REMOVE(m, all);
    free(m->holder_out);
    free(m);
}

static uint64_t virt_after(struct link *l, uint64_t agent_ns)
{
    return agent_virt(l->ag, agent_now(l->ag) + agent_ns);
}

/* ---- sending ---- */

static void hold(struct link *l, struct msg *m, bool to_agent)
{
    m->in_held = true;
    m->to_agent = to_agent;
    TAILQ_INSERT_TAIL(&l->held, m, nlink);
}

/* Puts m on the wire toward the node (in order behind what went before).
 * A partition holds it when it arrives, behind what was on the wire
 * before it: TCP keeps a connection's order whatever cuts it off. */
static void to_node(struct link *l, struct msg *m)
{
    struct sim *s = l->s;
    bool sub = m->kind == OP_SUBSCRIBE || m->kind == OP_UNSUBSCRIBE;
    uint64_t *fifo = sub ? &l->sub_at : &l->to_node_at;
    uint64_t at = s->now + net_delay(s) + l->lag;
    if (at < *fifo)
        at = *fifo;
    *fifo = at;
    m->in_event = true;
    ev_push(s, at, EV_REQ_ARRIVE, 0, 0, m);
}

static void to_agent(struct link *l, struct msg *m)
{
    struct sim *s = l->s;
    uint64_t *fifo = m->kind == OP_NOTICE ? &l->notice_at : &l->to_agent_at;
    uint64_t at = s->now + net_delay(s) + l->lag;
    if (at < *fifo)
        at = *fifo;
    *fifo = at;
    m->in_event = true;
    ev_push(s, at, m->kind == OP_NOTICE ? EV_NOTICE_ARRIVE : EV_REPLY_ARRIVE, 0, 0, m);
}

static void watchdog_arm(struct link *l);

static int submit(struct backend *b, uint8_t kind, const struct backend_req *req, backend_cb cb,
                  backend_lookup_cb lcb, void *arg)
{
    struct link *l = (struct link *)b;
    if (l->closing || !l->connected)
        return DLOCK_EUNAVAIL;
    if (req->len >= sizeof((struct msg *)0)->name)
        return DLOCK_EINVAL;
    struct msg *m = msg_new(l, kind);
    m->cb = cb;
    m->lcb = lcb;
    m->arg = arg;
    m->name_len = (uint16_t)req->len;
    memcpy(m->name, req->name, req->len);
    if (req->token)
        memcpy(m->token, req->token, 32);
    if (req->holder)
        snprintf(m->holder, sizeof m->holder, "%s", req->holder);
    m->ttl_ms = req->ttl_ms;
    m->lkind = (uint8_t)req->kind;
    m->limit = req->limit;
    m->want_ms = req->want_ms;
    m->bound = req->bound;
    m->notify = req->notify;
    m->floor = req->floor;
    m->block = req->block;
    m->fence = req->fence;
    m->asking = req->asking;
    m->state = M_QUEUED;
    if (kind == OP_LOOKUP) {
        m->holder_out = calloc(1, sizeof *m->holder_out);
        if (!m->holder_out) {
            fprintf(stderr, "dlock-sim: out of memory\n");
            exit(2);
        }
    }
    TAILQ_INSERT_TAIL(&l->queued, m, link);
    l->npending++;
    TRACE(l->s, "agent%u -> node%u #%" PRIu64 " %s %.*s token %.6s ttl %u%s", l->ag->id, l->nd->id,
          m->id, kind_name[kind], (int)m->name_len, m->name, m->token, m->ttl_ms,
          m->notify ? " notify" : "");
    return 0;
}

static int l_op(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    return submit(b, (uint8_t)req->op, req, cb, NULL, arg);
}

/* HDEL of the agent's entry in the name's waiting-hosts record, on the
 * command connection, unanswered (as backend_redis.c's): lost with the
 * connection, the entry lapses. Only the seeds that mix kinds model the
 * record: in the others nothing is sent (their runs are as before). */
static void l_leave(struct backend *b, const struct backend_req *req)
{
    struct link *l = (struct link *)b;
    if (l->s->kinds && req->waiter_id)
        submit(b, OP_LEAVE, req, NULL, NULL, NULL);
}

/* SET of the agent's keep-alive key, on the command connection,
 * unanswered (as backend_redis.c's): lost with the connection. As with
 * leave, only the seeds that mix kinds model the record and send it; the
 * others still pace their waiters as a store with bound entries does. */
static void l_keepalive(struct backend *b, const char *waiter_id, uint32_t ttl_ms, uint64_t seq)
{
    struct link *l = (struct link *)b;
    /* (The sequence number goes as the request's fence.) */
    struct backend_req req = {
        .name = "", .len = 0, .waiter_id = waiter_id, .ttl_ms = ttl_ms, .fence = seq};
    if (l->s->kinds)
        submit(b, OP_KEEPALIVE, &req, NULL, NULL, NULL);
}

static int l_lookup(struct backend *b, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    struct backend_req req = {.name = name, .len = len};
    return submit(b, OP_LOOKUP, &req, NULL, cb, arg);
}

/* SUBSCRIBE or UNSUBSCRIBE of name idx on the notice connection: nothing
 * waits for it. */
static void send_subscription(struct link *l, int idx, bool on)
{
    struct sim *s = l->s;
    struct msg *m = msg_new(l, on ? OP_SUBSCRIBE : OP_UNSUBSCRIBE);
    m->cb_done = true;
    m->epoch = l->epoch;
    m->master_gen = l->known_gen;
    m->state = M_SENT;
    m->name_len = (uint16_t)strlen(s->names[idx]);
    memcpy(m->name, s->names[idx], m->name_len);
    TRACE(s, "agent%u -> node%u #%" PRIu64 " %s %s", l->ag->id, l->nd->id, m->id,
          kind_name[m->kind], s->names[idx]);
    to_node(l, m);
}

static int l_watch(struct backend *b, const char *name, size_t len, bool on)
{
    struct link *l = (struct link *)b;
    int idx = sim_name_index(l->s, name, len);
    if (l->closing || idx < 0)
        return idx < 0 ? DLOCK_EINVAL : 0;
    /* While the notice connection is down nothing is kept: the core asks
     * again once it is up. */
    if (!l->subscribed || l->want[idx] == on)
        return 0;
    l->want[idx] = on;
    send_subscription(l, idx, on);
    return 0;
}

static void l_flush(struct backend *b)
{
    struct link *l = (struct link *)b;
    struct msg *m;
    bool any = false;
    while ((m = TAILQ_FIRST(&l->queued))) {
        TAILQ_REMOVE(&l->queued, m, link);
        TAILQ_INSERT_TAIL(&l->inflight, m, link);
        m->epoch = l->epoch;
        m->master_gen = l->known_gen;
        m->sent_at = agent_now(l->ag);
        m->state = M_SENT;
        if (m->kind == OP_FENCE && l->cut_fence) {
            /* A fence-cut fault: the write-back never reaches the node.
             * Half the time the connection is reset under it at once; else
             * it dies silently, and the agent's watchdog finds out. */
            l->cut_fence = false;
            m->discard = true;
            bool reset = rng_chance(&l->s->rng, 50);
            TRACE(l->s, "agent%u: the write-back #%" PRIu64 " to node%u is cut off%s", l->ag->id,
                  m->id, l->nd->id, reset ? ", the connection reset" : "");
            if (reset)
                ev_push(l->s, l->s->now + net_delay(l->s), EV_LINK_DROP, l->idx, l->epoch, NULL);
        }
        to_node(l, m);
        any = true;
    }
    if (any)
        watchdog_arm(l);
}

static size_t l_pending(const struct backend *b)
{
    return ((const struct link *)b)->npending;
}

static size_t l_nodes(const struct backend *b, struct backend_node *out, size_t max)
{
    const struct link *l = (const struct link *)b;
    if (max == 0)
        return 1;
    memset(out, 0, sizeof *out);
    snprintf(out->addr, sizeof out->addr, "10.0.0.%u:6379", l->nd->id + 1);
    out->connected = l->connected;
    out->subscribed = l->subscribed;
    out->last_rtt_ns = l->last_rtt;
    out->last_error = l->last_error;
    out->excluded_until = l->excluded_until;
    snprintf(out->run_id, sizeof out->run_id, "%040" PRIx64, l->run_id);
    out->durable = l->durable;
    return 1;
}

static bool l_counts(const struct backend *b, uint64_t now)
{
    return now >= ((const struct link *)b)->excluded_until;
}

static void l_destroy(struct backend *b)
{
    link_teardown((struct link *)b);
}

static const struct backend_ops link_ops = {
    .op = l_op,
    .watch = l_watch,
    .leave = l_leave,
    .keepalive = l_keepalive,
    .lookup = l_lookup,
    .flush = l_flush,
    .pending = l_pending,
    .nodes = l_nodes,
    .counts = l_counts,
    .destroy = l_destroy,
};

/* ---- answers ---- */

static void answer(struct link *l, struct msg *m, int err)
{
    struct sim *s = l->s;
    if (m->state == M_QUEUED)
        TAILQ_REMOVE(&l->queued, m, link);
    else
        TAILQ_REMOVE(&l->inflight, m, link);
    l->npending--;
    m->cb_done = true;
    uint64_t at = agent_now(l->ag);
    if (err)
        m->failed_at = at;
    if (m->kind == OP_LOOKUP) {
        if (m->lcb)
            m->lcb(m->arg, err, err ? NULL : m->holder_out);
        return;
    }
    struct backend_result r = {.err = err, .at = at};
    char text[64];
    if (!err && m->redirect != R_NONE) {
        /* Cluster mode: an error reply of the node, as backend_redis.c
         * passes it on (DLOCK_EBACKEND with its text). */
        int idx = sim_name_index(s, m->name, m->name_len);
        unsigned slot = idx >= 0 ? s->cslots[s->name_cslot[idx]].slot : 0;
        if (m->redirect == R_TRYAGAIN)
            snprintf(text, sizeof text, "TRYAGAIN Multiple keys request during rehashing of slot");
        else
            snprintf(text, sizeof text, "%s %u 10.0.0.%u:6379",
                     m->redirect == R_MOVED ? "MOVED" : "ASK", slot, m->redirect_to + 1u);
        r.err = err = DLOCK_EBACKEND;
        r.error_text = text;
        m->failed_at = at;
    }
    if (!err) {
        if (m->kind == OP_ACQUIRE && m->mismatch) {
            r.outcome = BACKEND_MISMATCH;
        } else if (m->kind == OP_ACQUIRE && m->n > 0) {
            r.outcome = BACKEND_DONE;
            r.fence = (uint64_t)m->n;
        } else if (m->kind == OP_ACQUIRE) {
            r.outcome = BACKEND_TAKEN;
            r.pttl_ms = -m->n;
        } else {
            r.outcome = m->n == 1 ? BACKEND_DONE : BACKEND_NOT_OURS;
        }
    }
    TRACE(s, "agent%u <- node%u #%" PRIu64 " %s %.*s: %s", l->ag->id, l->nd->id, m->id,
          kind_name[m->kind], (int)m->name_len, m->name,
          r.error_text                    ? r.error_text
          : err                           ? dlock_strerror(err)
          : r.outcome == BACKEND_DONE     ? "done"
          : r.outcome == BACKEND_TAKEN    ? "taken"
          : r.outcome == BACKEND_MISMATCH ? "another kind"
                                          : "not ours");
    if (m->cb)
        m->cb(m->arg, &r);
}

/* The node ran m: its answer goes back, if the connection still stands. */
void link_reply(struct msg *m)
{
    struct link *l = m->l;
    if (m->cb_done || m->epoch != l->epoch || !l->connected) {
        msg_maybe_free(m);
        return;
    }
    to_agent(l, m);
}

/* Cluster mode: the agent's map says the node no longer serves the slots
 * set in cslots: the link unsubscribes their names, forgets them and says
 * so (notice_link_unwatch_slots()). */
void link_unwatch_cslots(struct link *l, const bool *cslots)
{
    struct sim *s = l->s;
    for (unsigned i = 0; i < s->nnames; i++) {
        if (!l->want[i] || !cslots[s->name_cslot[i]])
            continue;
        l->want[i] = false;
        send_subscription(l, (int)i, false);
        TRACE(s, "agent%u: %s is no longer node%u's", l->ag->id, s->names[i], l->nd->id);
        if (l->dropped)
            l->dropped(l->dropped_arg, s->names[i], strlen(s->names[i]));
    }
}

/* Cluster mode: the node no longer serves name idx's channel (its slot
 * moved away): it ends the subscription with an sunsubscribe message. */
void link_sunsubscribe(struct link *l, unsigned idx)
{
    if (!l->subscribed || l->closing || !l->nsub[idx])
        return;
    l->nsub[idx] = false;
    struct msg *m = msg_new(l, OP_NOTICE);
    m->cb_done = true;
    m->dropped = true;
    m->epoch = l->epoch;
    m->name_len = (uint16_t)strlen(l->s->names[idx]);
    memcpy(m->name, l->s->names[idx], m->name_len);
    to_agent(l, m);
}

void link_publish(struct link *l, const char *name, size_t len)
{
    int idx = sim_name_index(l->s, name, len);
    if (!l->subscribed || l->closing || idx < 0 || !l->nsub[idx])
        return;
    struct msg *m = msg_new(l, OP_NOTICE);
    m->cb_done = true; /* nothing waits for it */
    m->epoch = l->epoch;
    m->name_len = (uint16_t)len;
    memcpy(m->name, name, len);
    to_agent(l, m);
}

void link_publish_grant(struct link *l, const struct msg *g)
{
    int idx = sim_name_index(l->s, g->name, g->name_len);
    if (!l->subscribed || l->closing || idx < 0 || !l->nsub[idx])
        return;
    struct msg *m = msg_new(l, OP_NOTICE);
    m->cb_done = true; /* nothing waits for it */
    m->epoch = l->epoch;
    m->name_len = g->name_len;
    memcpy(m->name, g->name, g->name_len);
    m->grant = true;
    memcpy(m->grant_to, g->grant_to, sizeof m->grant_to);
    memcpy(m->token, g->token, sizeof m->token);
    m->fence = g->fence;
    m->seq = g->seq;
    m->ttl_ms = g->ttl_ms;
    m->block = g->block;
    to_agent(l, m);
}

/* The node runs m, a SUBSCRIBE or UNSUBSCRIBE, if the connection it came on
 * still stands; a subscription is confirmed with a notice for its name. */
void link_subscription(struct msg *m)
{
    struct link *l = m->l;
    struct sim *s = l->s;
    int idx = sim_name_index(s, m->name, m->name_len);
    m->state = M_EXECUTED;
    if (m->epoch != l->epoch || !l->subscribed || l->closing || idx < 0) {
        msg_maybe_free(m);
        return;
    }
    unsigned to;
    if (s->cluster && m->kind == OP_SUBSCRIBE && cluster_route(l->nd, m, &to) != R_NONE) {
        /* SSUBSCRIBE on a node that does not serve the channel's slot:
         * MOVED, and the agent's notice link forgets the name. */
        TRACE(s, "node%u refuses #%" PRIu64 " subscribe %s from agent%u: MOVED to node%u",
              l->nd->id, m->id, s->names[idx], l->ag->id, to);
        m->kind = OP_NOTICE;
        m->dropped = true;
        to_agent(l, m);
        return;
    }
    l->nsub[idx] = m->kind == OP_SUBSCRIBE;
    TRACE(s, "node%u runs #%" PRIu64 " %s %s from agent%u", l->nd->id, m->id, kind_name[m->kind],
          s->names[idx], l->ag->id);
    if (m->kind != OP_SUBSCRIBE) {
        msg_maybe_free(m);
        return;
    }
    m->kind = OP_NOTICE;
    m->confirm = true;
    to_agent(l, m);
}

/* ---- the connection ---- */

static void schedule_connect(struct link *l)
{
    const struct config *cfg = &l->ag->cfg;
    if (l->closing)
        return;
    uint64_t cap = cfg->reconnect_min_ms;
    for (unsigned i = 0; i < l->attempt && cap < cfg->reconnect_max_ms; i++)
        cap *= 2;
    if (cap > cfg->reconnect_max_ms)
        cap = cfg->reconnect_max_ms;
    uint64_t delay = MS(cap) / 2 + rng_below(&l->s->rng, MS(cap) / 2 + 1);
    l->attempt++;
    l->connecting = false;
    l->attempt_gen++;
    ev_push(l->s, virt_after(l, delay), EV_LINK_CONNECT, l->idx, l->attempt_gen, NULL);
}

static void watchdog_arm(struct link *l)
{
    if (l->watchdog_armed || l->closing)
        return;
    const struct msg *oldest = TAILQ_FIRST(&l->inflight);
    if (!oldest)
        return;
    uint64_t since = l->last_reply > oldest->sent_at ? l->last_reply : oldest->sent_at;
    uint64_t due = since + MS(l->ag->cfg.command_timeout_ms) + 1;
    l->watchdog_armed = true;
    ev_push(l->s, agent_virt(l->ag, due), EV_LINK_WATCHDOG, l->idx, ++l->watchdog_gen, NULL);
}

/* Answers everything unanswered with DLOCK_EUNAVAIL, in send order. */
static void fail_all(struct link *l)
{
    struct msg *m;
    while ((m = TAILQ_FIRST(&l->inflight))) {
        answer(l, m, DLOCK_EUNAVAIL);
        msg_maybe_free(m);
    }
    while ((m = TAILQ_FIRST(&l->queued))) {
        answer(l, m, DLOCK_EUNAVAIL);
        m->state = M_LOST;
        msg_maybe_free(m);
    }
}

void link_drop(struct link *l, const char *why)
{
    struct sim *s = l->s;
    if (!l->connected && !l->connecting)
        return;
    TRACE(s, "agent%u: link to node%u lost (%s)", l->ag->id, l->nd->id, why);
    bool was_subscribed = l->subscribed;
    l->connected = l->subscribed = l->connecting = false;
    memset(l->nsub, 0, sizeof l->nsub); /* the node forgets the subscriptions */
    memset(l->want, 0, sizeof l->want); /* and the link, the names asked for */
    l->epoch++;
    l->watchdog_armed = false;
    l->watchdog_gen++;
    l->last_error = DLOCK_EUNAVAIL;
    /* What was written may reach the node or not: the connection closed
     * with it in the socket buffers. */
    struct msg *m;
    TAILQ_FOREACH(m, &l->inflight, link)
    if (m->state == M_SENT || m->state == M_AT_NODE)
        m->discard = rng_chance(&s->rng, 50);
    /* Everything unanswered fails, in send order, from this event. */
    fail_all(l);
    /* The notice connection was up: the owner hears it is gone (as
     * notice_link.c's down hook says). */
    if (was_subscribed && l->have_ev && l->ev.on_unsubscribed)
        l->ev.on_unsubscribed(l->ev.arg);
    if (!l->closing)
        schedule_connect(l);
}

/* The node went down: the agent learns it when the reset arrives. */
void link_node_down(struct link *l)
{
    if (l->connected || l->connecting)
        ev_push(l->s, l->s->now + net_delay(l->s), EV_LINK_DROP, l->idx, l->epoch, NULL);
}

/* Sentinel mode: the agent hears that its node failed over. As in
 * backend_sentinel.c, leases are put in doubt first (on_doubt), then the old
 * master is given up: from now on only the new master's answers count, what
 * the old one has not answered fails with DLOCK_EUNAVAIL (from this event),
 * and the link connects again, to the new master. */
void link_doubt(struct link *l)
{
    struct sim *s = l->s;
    TRACE(s, "agent%u: hears that node%u failed over (master generation %" PRIu64 ")", l->ag->id,
          l->nd->id, l->nd->master_gen);
    l->known_gen = l->nd->master_gen;
    if (l->have_ev && l->ev.on_doubt)
        l->ev.on_doubt(l->ev.arg, NULL, NULL);
    if (s->stale_answers) {
        /* A backend that lets the old master's word through, against its
         * guarantee: the renewals that master ran come back as done after
         * the doubt. The core's own guard must not take them. */
        struct msg *m, *next;
        for (m = TAILQ_FIRST(&l->inflight); m; m = next) {
            next = TAILQ_NEXT(m, link);
            if (m->kind == OP_RENEW && m->state == M_EXECUTED && m->n == 1 && !m->cb_done) {
                TRACE(s, "agent%u: a stale answer from the old master gets through", l->ag->id);
                answer(l, m, 0);
                msg_maybe_free(m);
            }
        }
    }
    if (l->connected || l->connecting)
        link_drop(l, "the master failed over");
}

/* The restart exclusion (quorum mode), decided by the core's own
 * quorum_exclusion_ns() from what the command link read from INFO and
 * CONFIG GET on every new connection, as note_server() in the real backend
 * does. */
static void note_server(struct link *l)
{
    struct sim *s = l->s;
    struct node *nd = l->nd;
    bool restarted = l->run_id && l->run_id != nd->run_id;
    bool first = !l->run_id;
    bool was_durable = l->durable;
    l->durable = nd->durable;
    l->run_id = nd->run_id;
    if (!s->quorum)
        return;
    int64_t up = (int64_t)s->now - nd->started_at;
    uint64_t up_s = up > 0 ? (uint64_t)up / 1000000000ull : 0;
    uint64_t excl =
        quorum_exclusion_ns(first, restarted, l->durable, was_durable, up_s, l->ag->cfg.max_ttl_ms);
    uint64_t unsafe = MS(l->ag->cfg.max_ttl_ms) * 21 / 20 + MS(100);
    if (!excl && first && nd->lost_data && nd->failover_at && s->now < nd->failover_at + unsafe)
        /* Another server at the node's address, up for long, that lacks
         * the last writes: only an agent that knew the old run id can tell
         * (docs/quorum.md, "Restart exclusion"), not one that reads the node
         * for the first time, such as the successor of an agent that
         * restarted. Leases resting on the writes lost may still be valid. */
        excl_note(s, X_UNDETECTED_LOSS,
                  "node%u failed over losing writes %" PRIu64
                  " ms before agent%u first read it (a new process: it cannot tell, no restart "
                  "exclusion)",
                  nd->id, (s->now - nd->failover_at) / 1000000, l->ag->id);
    if (!excl)
        return;
    uint64_t now = agent_now(l->ag), until = now + excl;
    if (until > l->excluded_until)
        l->excluded_until = until;
    TRACE(s, "agent%u: node%u %s; excluded from quorums for %" PRIu64 " ms", l->ag->id, nd->id,
          restarted ? "restarted" : "started recently", (l->excluded_until - now) / 1000000);
    ev_push(s, agent_virt(l->ag, l->excluded_until), EV_LINK_JOIN, l->idx, ++l->join_gen, NULL);
}

/* Cluster mode: the master the agent knows of failed over, and its
 * address refuses connections (the replica that took over is another
 * server, which the agent connects to once its slot map names it). */
static bool master_gone(const struct link *l)
{
    return l->s->cluster && l->known_gen != l->nd->master_gen;
}

static bool reachable(const struct link *l)
{
    return l->nd->up && !master_gone(l) && !l->nd->stalled && !l->partitioned;
}

static void connect_attempt(struct link *l)
{
    struct sim *s = l->s;
    if (l->closing || l->connected)
        return;
    l->connecting = true;
    uint64_t gen = ++l->attempt_gen;
    if (reachable(l)) {
        /* Connect, then AUTH/CONFIG GET/INFO/SCRIPT LOAD/PING answered. */
        uint64_t t = s->now + 2 * net_delay(s) + 2 * net_delay(s);
        ev_push(s, t, EV_LINK_UP, l->idx, gen, NULL);
    } else if (!l->nd->up || master_gone(l)) {
        /* Refused at once. */
        ev_push(s, s->now + 2 * net_delay(s), EV_LINK_UP, l->idx, gen, NULL);
    } else {
        /* No answer: the connect timeout. */
        ev_push(s, virt_after(l, MS(l->ag->cfg.connect_timeout_ms)), EV_LINK_UP, l->idx, gen, NULL);
    }
}

static void link_up(struct link *l)
{
    struct sim *s = l->s;
    if (!reachable(l)) {
        l->connecting = false;
        l->last_error = DLOCK_EUNAVAIL;
        schedule_connect(l);
        return;
    }
    l->connecting = false;
    l->connected = true;
    l->attempt = 0;
    l->last_reply = agent_now(l->ag);
    note_server(l);
    TRACE(s, "agent%u: link to node%u up", l->ag->id, l->nd->id);
    ev_push(s, s->now + 2 * net_delay(s), EV_LINK_SUBSCRIBE, l->idx, l->epoch, NULL);
    if (l->have_ev)
        l->ev.on_ready(l->ev.arg);
}

static void watchdog(struct link *l)
{
    l->watchdog_armed = false;
    const struct msg *oldest = TAILQ_FIRST(&l->inflight);
    if (!oldest || !l->connected)
        return;
    uint64_t now = agent_now(l->ag);
    uint64_t since = l->last_reply > oldest->sent_at ? l->last_reply : oldest->sent_at;
    if (now - since > MS(l->ag->cfg.command_timeout_ms)) {
        link_drop(l, "no reply within command_timeout_ms");
        return;
    }
    watchdog_arm(l);
}

/* The partition ends: what it held back goes on, if its connection stands
 * (TCP retransmits); what a closed connection held is gone. */
static void heal(struct link *l)
{
    struct msg *m;
    while ((m = TAILQ_FIRST(&l->held))) {
        TAILQ_REMOVE(&l->held, m, nlink);
        m->in_held = false;
        bool current = m->epoch == l->epoch &&
                       (!m->to_agent || (m->kind == OP_NOTICE ? l->subscribed : l->connected));
        if (!current || (m->to_agent && m->kind != OP_NOTICE && m->cb_done)) {
            if (!m->to_agent)
                m->state = M_LOST;
            msg_maybe_free(m);
        } else {
            /* Delivered now, in order: they left before anything still on
             * the wire, which must not overtake them. */
            m->in_event = true;
            ev_push(l->s, l->s->now,
                    !m->to_agent           ? EV_REQ_ARRIVE
                    : m->kind == OP_NOTICE ? EV_NOTICE_ARRIVE
                                           : EV_REPLY_ARRIVE,
                    0, 0, m);
        }
    }
}

void link_event(struct sim *s, const struct event *e)
{
    struct msg *m = e->p;
    struct link *l = m ? m->l : &s->links[e->a];
    switch (e->type) {
    case EV_REQ_ARRIVE:
        m->in_event = false;
        if (m->discard) {
            m->state = M_LOST;
            msg_maybe_free(m);
        } else if (l->partitioned) {
            hold(l, m, false);
        } else {
            node_arrive(l->nd, m);
        }
        break;
    case EV_REPLY_ARRIVE:
        m->in_event = false;
        if (!m->cb_done && m->epoch == l->epoch && l->partitioned) {
            hold(l, m, true);
            break;
        }
        if (!m->cb_done && m->epoch == l->epoch && l->connected) {
            l->last_reply = agent_now(l->ag);
            l->last_rtt = l->last_reply - m->sent_at;
            /* Sentinel mode: an answer of a master given up is an error
             * (link_doubt closes its connection first, so this is the
             * guarantee's second line). */
            answer(l, m,
                   (s->sentinel || s->cluster) && m->master_gen != l->known_gen ? DLOCK_EUNAVAIL
                                                                                : 0);
        }
        msg_maybe_free(m);
        break;
    case EV_NOTICE_ARRIVE:
        m->in_event = false;
        if (m->epoch == l->epoch && l->subscribed && l->partitioned) {
            hold(l, m, true);
            break;
        }
        int idx = sim_name_index(s, m->name, m->name_len);
        if (m->dropped) {
            /* Cluster mode: the node ended the subscription; the notice
             * link forgets the name, and says so (notice_link.c). */
            if (m->epoch == l->epoch && l->subscribed && idx >= 0 && l->want[idx]) {
                TRACE(s, "agent%u <- node%u sunsubscribe %s", l->ag->id, l->nd->id, s->names[idx]);
                l->want[idx] = false;
                if (l->dropped)
                    l->dropped(l->dropped_arg, m->name, m->name_len);
            }
            msg_maybe_free(m);
            break;
        }
        /* A confirmation is reported while the name is wanted, a message
         * always (as notice_link.c does). */
        if (m->epoch == l->epoch && l->subscribed && l->have_ev &&
            (!m->confirm || (idx >= 0 && l->want[idx] && !BUG_NO_CONFIRM))) {
            TRACE(s, "agent%u <- node%u %s %.*s", l->ag->id, l->nd->id,
                  m->confirm ? "subscribed to" : "notice", (int)m->name_len, m->name);
            struct backend_grant g = {
                .fence = m->fence, .seq = m->seq, .ttl_ms = m->ttl_ms, .block = m->block};
            memcpy(g.to, m->grant_to, sizeof g.to);
            memcpy(g.token, m->token, 32);
            l->ev.on_notice(l->ev.arg, m->name, m->name_len, m->grant ? &g : NULL);
        }
        msg_maybe_free(m);
        break;
    case EV_LINK_DROP:
        if (e->b == l->epoch)
            link_drop(l, "connection reset");
        break;
    case EV_LINK_CONNECT:
        if (e->b == l->attempt_gen)
            connect_attempt(l);
        break;
    case EV_LINK_UP:
        if (e->b == l->attempt_gen && l->connecting)
            link_up(l);
        break;
    case EV_LINK_SUBSCRIBE:
        if (e->b == l->epoch && l->connected && !l->subscribed) {
            if (!reachable(l)) {
                /* Retried when the subscription can be confirmed. */
                ev_push(s, s->now + MS(10), EV_LINK_SUBSCRIBE, l->idx, l->epoch, NULL);
                break;
            }
            l->subscribed = true;
            TRACE(s, "agent%u: notice link to node%u up", l->ag->id, l->nd->id);
            if (l->have_ev)
                l->ev.on_subscribed(l->ev.arg);
        }
        break;
    case EV_LINK_WATCHDOG:
        if (e->b == l->watchdog_gen)
            watchdog(l);
        break;
    case EV_LINK_JOIN:
        if (e->b == l->join_gen && l->connected && agent_now(l->ag) >= l->excluded_until &&
            l->have_ev) {
            TRACE(s, "agent%u: node%u joins quorums", l->ag->id, l->nd->id);
            l->ev.on_ready(l->ev.arg);
        }
        break;
    default:
        break;
    }
}

/* ---- set-up ---- */

void link_init(struct sim *s, struct link *l, struct agent *ag, struct node *nd, unsigned idx)
{
    memset(l, 0, sizeof *l);
    l->base.ops = &link_ops;
    l->base.release_after_miss = false;
    l->base.kinds = BACKEND_KIND(LOCK_SHARED) | BACKEND_KIND(LOCK_SEMAPHORE);
    l->s = s;
    l->ag = ag;
    l->nd = nd;
    l->idx = idx;
    l->epoch = 1;
    TAILQ_INIT(&l->queued);
    TAILQ_INIT(&l->inflight);
    TAILQ_INIT(&l->held);
}

void link_set_events(struct link *l, const struct backend_events *ev)
{
    l->ev = *ev;
    l->have_ev = true;
}

void link_start(struct link *l)
{
    l->attempt_gen++;
    ev_push(l->s, l->s->now + rng_range(&l->s->rng, 0, MS(3)), EV_LINK_CONNECT, l->idx,
            l->attempt_gen, NULL);
}

/* Partitions may overlap: the link is cut off until the last one ends. */
void link_set_partition(struct link *l, bool on)
{
    if (on) {
        l->partitioned++;
    } else if (l->partitioned && --l->partitioned == 0) {
        heal(l);
    }
}

/* The agent's process died and a successor starts: its connections start
 * afresh, as a new process's do (no server read yet, no subscription, no
 * restart exclusion, the current master), on the network as it is (a
 * partition, a lag or a fence cut of the agent's host goes on). What the
 * old connections still have on the way is of an older epoch. */
void link_restart(struct link *l)
{
    l->closing = l->connected = l->subscribed = l->connecting = false;
    l->have_ev = false;
    l->dropped = NULL;
    l->dropped_arg = NULL;
    l->epoch++;
    l->attempt_gen++;
    l->attempt = 0;
    l->watchdog_armed = false;
    l->watchdog_gen++;
    l->join_gen++;
    memset(l->want, 0, sizeof l->want);
    memset(l->nsub, 0, sizeof l->nsub);
    l->run_id = 0;
    l->durable = false;
    l->excluded_until = 0;
    l->known_gen = l->nd->master_gen;
    l->last_error = 0;
    l->last_reply = l->last_rtt = 0;
}

/* The backend is destroyed: what is unanswered fails now. */
void link_teardown(struct link *l)
{
    if (l->closing)
        return;
    l->closing = true;
    fail_all(l);
    l->connected = l->subscribed = l->connecting = false;
    l->epoch++;
}
