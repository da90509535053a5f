/* SPDX-License-Identifier: BSD-3-Clause */
/* proxy.c -- the backend each core sees: the agent's store (one link, or
 * the quorum over its links) passed through unchanged, watched at the seam.
 * Every acquire the core sends is answered through here, so the simulator
 * checks what the core does with the answer before it returns: an acquire
 * that failed, or that took the key without a grant, or (when the store asks
 * for it) missed, must be followed by a release of its token at once; and
 * the token of a grant is known for the key-life check. The renewals are
 * watched (their rate and bounded holds; in sentinel mode, one sent after
 * the agent heard of a failover, and answered that the key is there,
 * confirms its lease), and so are the releases, which must reach every
 * node, and the acquires' answers, which tell an outage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "sim.h"

struct proxy {
    struct backend base;
    struct backend *inner;
    struct agent *ag;
    struct backend_ops ops; /* proxy_ops, with the inner store's keep-alive when it has one */
};

struct pcall {
    struct proxy *p;
    backend_cb cb;
    void *arg;
    char name[32];
    char token[33];
};

static void on_acquired(void *arg, const struct backend_result *r)
{
    struct pcall *pc = arg;
    struct agent *ag = pc->p->ag;
    struct sim *s = ag->s;
    const char *saved = ag->watch_token;
    sim_acquire_answered(ag, r);
    ag->watch_token = pc->token;
    ag->watch_released = ag->watch_granted = false;
    pc->cb(pc->arg, r);
    bool released = ag->watch_released, granted = ag->watch_granted;
    ag->watch_token = saved;
    if (ag->core_live && !s->stop) {
        const char *what = NULL;
        if (r->err && !released)
            what = "failed, and its key was not withdrawn";
        else if (!r->err && r->outcome == BACKEND_DONE && !released && !granted)
            what = "took the key, was not granted, and the key was not released";
        else if (!r->err && r->outcome == BACKEND_TAKEN && pc->p->inner->release_after_miss &&
                 !released)
            what = "missed, and the nodes that took the key were not told to release it";
        if (what)
            violation(s, "clean-up", 0, "agent%u: the acquire of %s (token %.8s) %s", ag->id,
                      pc->name, pc->token, what);
    }
    free(pc);
}

static int p_acquire(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct proxy *p = (struct proxy *)b;
    struct pcall *pc = calloc(1, sizeof *pc);
    if (!pc)
        return DLOCK_ENOMEM;
    pc->p = p;
    pc->cb = cb;
    pc->arg = arg;
    snprintf(pc->name, sizeof pc->name, "%.*s", (int)req->len, req->name);
    memcpy(pc->token, req->token, 32);
    sim_acquire_sent(p->ag, req);
    int rc = p->inner->ops->op(p->inner, req, on_acquired, pc);
    if (rc) {
        free(pc);
        sim_acquire_answered(p->ag, &(struct backend_result){.err = rc, .at = agent_now(p->ag)});
    }
    return rc;
}

/* A renewal, sent at sent_at (agent clock). */
struct prenew {
    struct agent *ag;
    backend_cb cb;
    void *arg;
    uint64_t sent_at;
    int who; /* the client it is counted for */
    char token[33];
};

static void on_renewed(void *arg, const struct backend_result *r)
{
    struct prenew *pr = arg;
    bool done = !r->err && r->outcome == BACKEND_DONE && pr->ag->core_live;
    if (done)
        sim_renewed(pr->ag, pr->token, pr->sent_at);
    pr->cb(pr->arg, r);
    if (done)
        sim_renewed(pr->ag, NULL, 0);
    if (pr->ag->core_live)
        sim_renew_answered(pr->ag, pr->token, pr->who, pr->sent_at, r);
    free(pr);
}

static int p_renew(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct proxy *p = (struct proxy *)b;
    int who;
    if (sim_renew_sent(p->ag, req->token, req->ttl_ms, &who)) {
        /* A storm: answer this one (the core finds nothing in flight) and
         * leave the core. */
        cb(arg, &(struct backend_result){.err = DLOCK_EUNAVAIL, .at = agent_now(p->ag)});
        sim_wedged(p->ag->s);
    }
    struct prenew *pr = calloc(1, sizeof *pr);
    if (!pr)
        return DLOCK_ENOMEM;
    pr->ag = p->ag;
    pr->cb = cb;
    pr->arg = arg;
    pr->sent_at = agent_now(p->ag);
    pr->who = who;
    memcpy(pr->token, req->token, 32);
    int rc = p->inner->ops->op(p->inner, req, on_renewed, pr);
    if (rc) {
        /* Failed at once: nothing is in flight. */
        sim_renew_answered(p->ag, pr->token, who, pr->sent_at,
                           &(struct backend_result){.err = rc, .at = agent_now(p->ag)});
        free(pr);
    }
    return rc;
}

/* A release, for the release check: its attempts and when they end. */
struct prelease {
    struct agent *ag;
    backend_cb cb;
    void *arg;
    int intent;
};

static void on_released(void *arg, const struct backend_result *r)
{
    struct prelease *pr = arg;
    sim_release_answered(pr->ag->s, pr->intent);
    pr->cb(pr->arg, r);
    free(pr);
}

static int p_release(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct proxy *p = (struct proxy *)b;
    struct agent *ag = p->ag;
    if (ag->watch_token && req->token && memcmp(req->token, ag->watch_token, 32) == 0)
        ag->watch_released = true;
    struct prelease *pr = calloc(1, sizeof *pr);
    if (!pr)
        return DLOCK_ENOMEM;
    *pr = (struct prelease){.ag = ag, .cb = cb, .arg = arg, .intent = sim_release_sent(ag, req)};
    int rc = p->inner->ops->op(p->inner, req, on_released, pr);
    if (rc) {
        sim_release_answered(ag->s, pr->intent);
        free(pr);
    }
    return rc;
}

/* The checker watches acquires, renewals and releases on their way. */
static int p_op(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    struct proxy *p = (struct proxy *)b;
    switch (req->op) {
    case BACKEND_ACQUIRE:
        return p_acquire(b, req, cb, arg);
    case BACKEND_RENEW:
        return p_renew(b, req, cb, arg);
    case BACKEND_RELEASE:
        return p_release(b, req, cb, arg);
    case BACKEND_FENCE:
    case BACKEND_LOOKUP:
    case BACKEND_FORCE:
        break;
    }
    return p->inner->ops->op(p->inner, req, cb, arg);
}

static int p_watch(struct backend *b, const char *name, size_t len, bool on)
{
    struct proxy *p = (struct proxy *)b;
    return p->inner->ops->watch ? p->inner->ops->watch(p->inner, name, len, on) : 0;
}

static void p_leave(struct backend *b, const struct backend_req *req)
{
    struct proxy *p = (struct proxy *)b;
    if (p->inner->ops->leave)
        p->inner->ops->leave(p->inner, req);
}

static void p_keepalive(struct backend *b, const char *waiter_id, uint32_t ttl_ms, uint64_t seq)
{
    struct proxy *p = (struct proxy *)b;
    struct agent *ag = p->ag;
    ag->ka[seq % CORE_KEEPALIVE_KEPT] = (struct ka_rec){
        .seq = seq, .sent_at = agent_now(ag), .sent_vt = ag->s->now, .wall_us = agent_wall_us(ag)};
    p->inner->ops->keepalive(p->inner, waiter_id, ttl_ms, seq);
}

static int p_lookup(struct backend *b, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    struct proxy *p = (struct proxy *)b;
    return p->inner->ops->lookup(p->inner, name, len, cb, arg);
}

static void p_flush(struct backend *b)
{
    struct proxy *p = (struct proxy *)b;
    p->inner->ops->flush(p->inner);
}

static size_t p_pending(const struct backend *b)
{
    const struct proxy *p = (const struct proxy *)b;
    return p->inner->ops->pending(p->inner);
}

static size_t p_nodes(const struct backend *b, struct backend_node *out, size_t max)
{
    const struct proxy *p = (const struct proxy *)b;
    return p->inner->ops->nodes(p->inner, out, max);
}

static bool p_counts(const struct backend *b, uint64_t now)
{
    const struct proxy *p = (const struct proxy *)b;
    return !p->inner->ops->counts || p->inner->ops->counts(p->inner, now);
}

static bool p_excluded(const struct backend *b, uint64_t now, char *buf, size_t len)
{
    const struct proxy *p = (const struct proxy *)b;
    return p->inner->ops->excluded && p->inner->ops->excluded(p->inner, now, buf, len);
}

static void p_destroy(struct backend *b)
{
    struct proxy *p = (struct proxy *)b;
    p->inner->ops->destroy(p->inner);
    free(p);
}

static const struct backend_ops proxy_ops = {
    .op = p_op,
    .watch = p_watch,
    .leave = p_leave,
    .lookup = p_lookup,
    .flush = p_flush,
    .pending = p_pending,
    .nodes = p_nodes,
    .counts = p_counts,
    .excluded = p_excluded,
    .destroy = p_destroy,
};

struct backend *proxy_new(struct agent *ag, struct backend *inner)
{
    struct proxy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    /* The core sees the keep-alive op only where the store binds entries
     * to a keep-alive key (single and sentinel mode). */
    p->ops = proxy_ops;
    if (inner->ops->keepalive)
        p->ops.keepalive = p_keepalive;
    p->base.ops = &p->ops;
    p->base.release_after_miss = inner->release_after_miss;
    p->base.kinds = inner->kinds;
    p->inner = inner;
    p->ag = ag;
    return &p->base;
}
