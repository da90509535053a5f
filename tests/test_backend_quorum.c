/* SPDX-License-Identifier: BSD-3-Clause */
/* test_backend_quorum.c -- unit tests of the quorum backend
 * (agent/core/backend_quorum.c) over scripted nodes on virtual time: the
 * majority rules of acquire, renew and release, the fencing write-back, the
 * node timeout, restart exclusion, and the node events passed on. Built a
 * second time with DLOCK_PLANTED_BUGS, where the planted low-fence bug must
 * show. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_quorum.h"
#include "config.h"
#include "dlock.h"
#ifdef DLOCK_PLANTED_BUGS
#include "core.h"
enum core_bug core_bug; /* core.c defines it in the simulator's copy */
#endif

#define NS_MS 1000000ull

/* ---- virtual clock ---- */

static uint64_t vnow = 1000 * NS_MS, vwall = 1700000000000000ull;
static uint64_t armed; /* the last due armed, 0 disarmed */
static unsigned arms;  /* arm calls */
static unsigned dones; /* done calls */

static uint64_t c_now(void *arg)
{
    return vnow;
}

static uint64_t c_wall(void *arg)
{
    return vwall;
}

static void c_arm(void *arg, uint64_t due)
{
    armed = due;
    arms++;
}

static void c_done(void *arg)
{
    dones++;
}

static const struct quorum_clock vclock = {
    .arg = NULL, .now = c_now, .wall_us = c_wall, .arm = c_arm, .done = c_done};

/* ---- scripted nodes: every command waits in a queue for the test ---- */

enum fop {
    F_ACQUIRE = BACKEND_ACQUIRE,
    F_RENEW = BACKEND_RENEW,
    F_RELEASE = BACKEND_RELEASE,
    F_FENCE = BACKEND_FENCE,
    F_LOOKUP
};

struct fcmd {
    enum fop op;
    struct backend_req req; /* the strings point into the copies below */
    char name[64], token[33], holder[128];
    backend_cb cb;
    backend_lookup_cb lcb;
    void *arg;
    bool answered;
};

#define FCMD_MAX 32

struct fnode {
    struct backend base;
    unsigned i;
    struct backend_events ev;
    bool down;              /* refuses commands at once */
    bool answer_on_destroy; /* as a Redis node: pending commands fail */
    uint64_t excluded_until;
    struct fcmd cmd[FCMD_MAX]; /* in the order sent */
    unsigned ncmd;
    bool destroyed;
};

static struct fnode *nodes[9];
static unsigned nnodes;
static int fail_make_at = -1;

static int f_submit(struct backend *b, enum fop op, const struct backend_req *req, backend_cb cb,
                    backend_lookup_cb lcb, void *arg)
{
    struct fnode *f = (struct fnode *)b;
    if (f->down)
        return DLOCK_EUNAVAIL;
    cr_assert_lt(f->ncmd, FCMD_MAX);
    struct fcmd *c = &f->cmd[f->ncmd++];
    memset(c, 0, sizeof *c);
    c->op = op;
    c->req = *req;
    snprintf(c->name, sizeof c->name, "%.*s", (int)req->len, req->name);
    c->req.name = c->name;
    if (req->token) {
        memcpy(c->token, req->token, 32);
        c->req.token = c->token;
    }
    if (req->holder) {
        snprintf(c->holder, sizeof c->holder, "%s", req->holder);
        c->req.holder = c->holder;
    }
    c->cb = cb;
    c->lcb = lcb;
    c->arg = arg;
    return 0;
}

static int f_op(struct backend *b, const struct backend_req *r, backend_cb cb, void *arg)
{
    return f_submit(b, (int)r->op, r, cb, NULL, arg);
}

static int f_lookup(struct backend *b, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    struct backend_req r = {.name = name, .len = len};
    return f_submit(b, F_LOOKUP, &r, NULL, cb, arg);
}

static void f_flush(struct backend *b)
{
}

static size_t f_pending(const struct backend *b)
{
    const struct fnode *f = (const struct fnode *)b;
    size_t n = 0;
    for (unsigned k = 0; k < f->ncmd; k++)
        n += !f->cmd[k].answered;
    return n;
}

static size_t f_nodes(const struct backend *b, struct backend_node *out, size_t max)
{
    const struct fnode *f = (const struct fnode *)b;
    if (max) {
        memset(out, 0, sizeof *out);
        snprintf(out->addr, sizeof out->addr, "node%u", f->i);
        out->connected = !f->down;
        out->excluded_until = f->excluded_until;
    }
    return 1;
}

static bool f_counts(const struct backend *b, uint64_t now)
{
    return now >= ((const struct fnode *)b)->excluded_until;
}

static void answer_err(unsigned i, unsigned k, int err);

static void f_destroy(struct backend *b)
{
    struct fnode *f = (struct fnode *)b;
    if (f->answer_on_destroy)
        for (unsigned k = 0; k < f->ncmd; k++)
            if (!f->cmd[k].answered)
                answer_err(f->i, k, DLOCK_EUNAVAIL);
    f->destroyed = true; /* freed by the test's fini */
}

static const struct backend_ops f_ops = {
    .op = f_op,
    .lookup = f_lookup,
    .flush = f_flush,
    .pending = f_pending,
    .nodes = f_nodes,
    .counts = f_counts,
    .destroy = f_destroy,
};

static struct backend *make_node(void *arg, unsigned i, const struct backend_events *ev)
{
    if ((int)i == fail_make_at)
        return NULL;
    struct fnode *f = calloc(1, sizeof *f);
    cr_assert_not_null(f);
    f->base.ops = &f_ops;
    f->base.kinds = BACKEND_KIND(LOCK_SHARED) | BACKEND_KIND(LOCK_SEMAPHORE);
    f->i = i;
    f->ev = *ev;
    f->answer_on_destroy = true;
    nodes[i] = f;
    nnodes = i + 1;
    return &f->base;
}

/* ---- the quorum's user ---- */

struct result {
    unsigned calls;
    struct backend_result r;
};

/* Set while the teardown destroys a quorum that a test left with open
 * operations: their results went out of scope with the test. */
static bool tearing_down;

static void on_result(void *arg, const struct backend_result *r)
{
    struct result *res = arg;
    if (tearing_down)
        return;
    res->calls++;
    res->r = *r;
}

static unsigned notices, subscribed, ready;
static char notice_name[64];

static void on_notice(void *arg, const char *name, size_t len, const struct backend_grant *grant)
{
    notices++;
    snprintf(notice_name, sizeof notice_name, "%.*s", (int)len, name);
}

static void on_subscribed(void *arg)
{
    subscribed++;
}

static void on_ready(void *arg)
{
    ready++;
}

static const struct backend_events user_ev = {
    .on_notice = on_notice, .on_subscribed = on_subscribed, .on_ready = on_ready};

static struct config cfg;
static struct backend *q;

static struct backend *quorum(unsigned n)
{
    config_defaults(&cfg);
    cfg.node_timeout_ms = 20;
    struct backend *b = backend_quorum_new(&cfg, n, make_node, NULL, &vclock, &user_ev);
    cr_assert_not_null(b);
    cr_assert_eq(nnodes, n);
    return b;
}

static void setup(void)
{
    vnow = 1000 * NS_MS;
    armed = arms = dones = 0;
    notices = subscribed = ready = 0;
    memset(nodes, 0, sizeof nodes);
    nnodes = 0;
    fail_make_at = -1;
    q = NULL;
#ifdef DLOCK_PLANTED_BUGS
    core_bug = CORE_BUG_NONE;
#endif
}

static void teardown(void)
{
    tearing_down = true;
    if (q)
        q->ops->destroy(q);
    tearing_down = false;
    for (unsigned i = 0; i < 9; i++)
        free(nodes[i]);
}

TestSuite(quorum_backend, .init = setup, .fini = teardown);

/* ---- answering as a node ---- */

static struct fcmd *cmd(unsigned i, unsigned k)
{
    cr_assert_lt(i, nnodes);
    cr_assert_lt(k, nodes[i]->ncmd, "node %u got %u commands, not %u", i, nodes[i]->ncmd, k + 1);
    struct fcmd *c = &nodes[i]->cmd[k];
    cr_assert_not(c->answered, "node %u command %u answered twice", i, k);
    c->answered = true;
    return c;
}

static void answer(unsigned i, unsigned k, enum backend_outcome o, uint64_t fence, long long pttl)
{
    struct fcmd *c = cmd(i, k);
    struct backend_result r = {.outcome = o, .fence = fence, .pttl_ms = pttl, .at = vnow};
    c->cb(c->arg, &r);
}

static void answer_err(unsigned i, unsigned k, int err)
{
    struct fcmd *c = cmd(i, k);
    if (c->op == F_LOOKUP) {
        c->lcb(c->arg, err, NULL);
        return;
    }
    struct backend_result r = {.err = err, .at = vnow};
    c->cb(c->arg, &r);
}

static const char token[] = "0123456789abcdef0123456789abcdef";

static int send_acquire(struct result *res, uint64_t floor)
{
    struct backend_req req = {.name = "job",
                              .len = 3,
                              .token = token,
                              .holder = "holder-record",
                              .ttl_ms = 5000,
                              .floor = floor};
    return q->ops->op(q, &req, on_result, res);
}

static int send_simple(enum backend_op op, struct result *res, bool notify)
{
    struct backend_req req = {
        .op = op, .name = "job", .len = 3, .token = token, .ttl_ms = 5000, .notify = notify};
    return q->ops->op(q, &req, on_result, res);
}

/* ---- kinds ---- */

Test(quorum_backend, keeps_the_kinds_its_nodes_keep_but_never_a_semaphore)
{
    q = quorum(3); /* every node keeps both: a majority still cannot count permits */
    cr_assert_eq(q->kinds, BACKEND_KIND(LOCK_SHARED));
}

/* ---- acquire ---- */

Test(quorum_backend, acquire_with_one_floor_and_equal_proposals_needs_no_write_back)
{
    q = quorum(3);
    cr_assert(q->release_after_miss);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    for (unsigned i = 0; i < 3; i++) {
        const struct fcmd *c = &nodes[i]->cmd[0];
        cr_assert_eq(c->op, F_ACQUIRE);
        cr_assert_eq(c->req.floor, vwall, "node %u: floor is the wall clock", i);
        cr_assert_str_eq(c->name, "job");
        cr_assert_str_eq(c->token, token);
        cr_assert_str_eq(c->holder, "holder-record");
        cr_assert_eq(c->req.ttl_ms, 5000);
    }
    cr_assert_eq(armed, vnow + 20 * NS_MS, "the node timeout is armed");
    answer(0, 0, BACKEND_DONE, vwall, 0);
    cr_assert_eq(res.calls, 0);
    vnow += NS_MS;
    answer(2, 0, BACKEND_DONE, vwall, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, 0);
    cr_assert_eq(res.r.outcome, BACKEND_DONE);
    cr_assert_eq(res.r.fence, vwall);
    cr_assert_eq(res.r.at, vnow);
    for (unsigned i = 0; i < 3; i++)
        cr_assert_eq(nodes[i]->ncmd, 1, "node %u: no write-back", i);
    /* The third node's late answer changes nothing. */
    answer(1, 0, BACKEND_DONE, vwall, 0);
    cr_assert_eq(res.calls, 1);
}

Test(quorum_backend, a_higher_floor_asked_for_is_every_nodes_floor)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, vwall + 777), 0);
    for (unsigned i = 0; i < 3; i++)
        cr_assert_eq(nodes[i]->cmd[0].req.floor, vwall + 777);
}

/* Two nodes take the key with tokens 100 and 105: the grant's token is 105,
 * written back to the node that proposed 100, and granted only once that
 * node holds it. */
Test(quorum_backend, the_highest_proposal_is_written_back_before_the_grant)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    answer(0, 0, BACKEND_DONE, 100, 0);
    answer(1, 0, BACKEND_DONE, 105, 0);
    cr_assert_eq(res.calls, 0, "granted before the write-back");
    cr_assert_eq(nodes[0]->ncmd, 2);
    const struct fcmd *w = &nodes[0]->cmd[1];
    cr_assert_eq(w->op, F_FENCE);
    cr_assert_eq(w->req.fence, 105);
    cr_assert_str_eq(w->token, token);
    cr_assert_eq(w->req.ttl_ms, 5000);
    cr_assert_eq(nodes[1]->ncmd, 1, "the node that proposed 105 holds it");
    cr_assert_eq(nodes[2]->ncmd, 1, "the node that did not answer gets nothing");
    cr_assert_eq(armed, vnow + 20 * NS_MS, "the write-back has its node timeout");
    /* A late phase-1 answer is ignored. */
    answer(2, 0, BACKEND_DONE, 200, 0);
    cr_assert_eq(res.calls, 0);
    answer(0, 1, BACKEND_DONE, 0, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, 0);
    cr_assert_eq(res.r.outcome, BACKEND_DONE);
    cr_assert_eq(res.r.fence, 105);
}

/* With a block of tokens reserved for cohort handoffs, each node's mark is
 * its proposal plus the block: the highest proposal wins, the write-back
 * raises the other node's mark to that plus the block, and the grant's
 * token is the winning proposal itself. */
Test(quorum_backend, a_reserved_block_is_written_back_above_the_winning_token)
{
    q = quorum(3);
    struct result res = {0};
    struct backend_req req = {.name = "job",
                              .len = 3,
                              .token = token,
                              .holder = "holder-record",
                              .ttl_ms = 5000,
                              .block = 32,
                              .waiter_id = "0123456789abcdef",
                              .want_ms = 300};
    cr_assert_eq(q->ops->op(q, &req, on_result, &res), 0);
    for (unsigned i = 0; i < 3; i++) {
        const struct fcmd *c = &nodes[i]->cmd[0];
        cr_assert_eq(c->req.block, 32, "node %u: block %u", i, c->req.block);
        cr_assert_eq(c->req.want_ms, 300);
        cr_assert_str_eq(c->req.waiter_id, "0123456789abcdef");
    }
    answer(0, 0, BACKEND_DONE, 100, 0);
    answer(1, 0, BACKEND_DONE, 105, 0);
    cr_assert_eq(res.calls, 0, "granted before the write-back");
    const struct fcmd *w = &nodes[0]->cmd[1];
    cr_assert_eq(w->op, F_FENCE);
    cr_assert_eq(w->req.fence, 105 + 32, "written back %llu", (unsigned long long)w->req.fence);
    answer(0, 1, BACKEND_DONE, 0, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.outcome, BACKEND_DONE);
    cr_assert_eq(res.r.fence, 105);
}

#ifdef DLOCK_PLANTED_BUGS
/* The planted bug: the lowest proposal, written back nowhere. */
Test(quorum_backend, planted_low_fence)
{
    core_bug = CORE_BUG_QUORUM_LOW_FENCE;
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    answer(0, 0, BACKEND_DONE, 105, 0);
    answer(1, 0, BACKEND_DONE, 100, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.outcome, BACKEND_DONE);
    cr_assert_eq(res.r.fence, 100);
    cr_assert_eq(nodes[1]->ncmd, 1);
}
#endif

Test(quorum_backend, a_refused_write_back_fails_the_grant)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    answer(0, 0, BACKEND_DONE, 100, 0);
    answer(1, 0, BACKEND_DONE, 105, 0);
    answer(2, 0, BACKEND_TAKEN, 0, 300);
    cr_assert_eq(res.calls, 0);
    answer(0, 1, BACKEND_NOT_OURS, 0, 0); /* the key expired there meanwhile */
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, DLOCK_ENOQUORUM);
}

Test(quorum_backend, an_unanswered_write_back_times_out)
{
    q = quorum(3);
    struct result res = {0};
    uint64_t first_due = vnow + 20 * NS_MS;
    cr_assert_eq(send_acquire(&res, 0), 0);
    answer(0, 0, BACKEND_DONE, 100, 0);
    vnow += 5 * NS_MS;
    answer(1, 0, BACKEND_DONE, 105, 0);
    uint64_t due = vnow + 20 * NS_MS;
    cr_assert_eq(armed, due, "the write-back's own node timeout");
    /* A timer still set for phase 1 finds nothing due. */
    backend_quorum_timeout(q, first_due);
    cr_assert_eq(res.calls, 0);
    cr_assert_eq(armed, due);
    vnow = due - 1;
    backend_quorum_timeout(q, vnow); /* early: harmless */
    cr_assert_eq(res.calls, 0);
    vnow = due;
    backend_quorum_timeout(q, vnow);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, DLOCK_ENOQUORUM);
    cr_assert_eq(res.r.at, due);
    /* Its answer after the verdict is ignored. */
    answer(0, 1, BACKEND_DONE, 0, 0);
    cr_assert_eq(res.calls, 1);
}

Test(quorum_backend, silent_nodes_are_decided_without_at_the_node_timeout)
{
    q = quorum(5);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    uint64_t due = vnow + 20 * NS_MS;
    cr_assert_eq(armed, due);
    answer(0, 0, BACKEND_DONE, 100, 0);
    answer(1, 0, BACKEND_DONE, 100, 0);
    cr_assert_eq(res.calls, 0);
    vnow = due;
    backend_quorum_timeout(q, vnow);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, DLOCK_ENOQUORUM);
    /* Three of five: granted at the timeout. */
    struct result res2 = {0};
    cr_assert_eq(send_acquire(&res2, 0), 0);
    for (unsigned i = 0; i < 3; i++)
        answer(i, 1, BACKEND_DONE, 100, 0);
    cr_assert_eq(res2.calls, 1);
    cr_assert_eq(res2.r.fence, 100);
}

Test(quorum_backend, taken_somewhere_with_the_shortest_pttl)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    answer(0, 0, BACKEND_TAKEN, 0, 500);
    cr_assert_eq(res.calls, 0, "a majority may still take it");
    answer(1, 0, BACKEND_TAKEN, 0, 300);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, 0);
    cr_assert_eq(res.r.outcome, BACKEND_TAKEN);
    cr_assert_eq(res.r.pttl_ms, 300);
}

Test(quorum_backend, one_yes_one_taken_one_failed_is_busy)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    answer(0, 0, BACKEND_DONE, 100, 0);
    answer_err(1, 0, DLOCK_EUNAVAIL);
    answer(2, 0, BACKEND_TAKEN, 0, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.outcome, BACKEND_TAKEN);
    cr_assert_eq(res.r.pttl_ms, 0, "unknown");
}

Test(quorum_backend, no_node_takes_the_command)
{
    q = quorum(3);
    for (unsigned i = 0; i < 3; i++)
        nodes[i]->down = true;
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), DLOCK_ENOQUORUM);
    cr_assert_eq(send_simple(BACKEND_RENEW, &res, false), DLOCK_ENOQUORUM);
    cr_assert_eq(send_simple(BACKEND_RELEASE, &res, true), DLOCK_EUNAVAIL);
    cr_assert_eq(res.calls, 0, "an error at once has no callback");
}

/* Nodes within their restart exclusion count toward no majority: their yes
 * is not enough, and the refusal says why. */
Test(quorum_backend, excluded_nodes_do_not_count)
{
    q = quorum(3);
    nodes[1]->excluded_until = vnow + 3500 * NS_MS;
    nodes[2]->excluded_until = vnow + 9000 * NS_MS;
    char why[160];
    cr_assert(q->ops->excluded(q, vnow, why, sizeof why));
    cr_assert_str_eq(why, "2 of 3 nodes are excluded after a (re)start; the first joins quorums "
                          "in 4 s");
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    for (unsigned i = 0; i < 3; i++)
        answer(i, 0, BACKEND_DONE, 100, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, DLOCK_ENOQUORUM);
    /* Once node 1 has joined, the same answers grant. */
    vnow += 3500 * NS_MS;
    cr_assert(q->ops->excluded(q, vnow, why, sizeof why));
    cr_assert(strstr(why, "1 of 3 nodes"), "%s", why);
    struct result res2 = {0};
    cr_assert_eq(send_acquire(&res2, 0), 0);
    answer(0, 1, BACKEND_DONE, 100, 0);
    answer(2, 1, BACKEND_DONE, 100, 0);
    cr_assert_eq(res2.calls, 0, "node 2 still does not count");
    answer(1, 1, BACKEND_DONE, 100, 0);
    cr_assert_eq(res2.calls, 1);
    cr_assert_eq(res2.r.outcome, BACKEND_DONE);
    vnow += 5500 * NS_MS;
    cr_assert_not(q->ops->excluded(q, vnow, why, sizeof why));
}

/* ---- renew and release ---- */

Test(quorum_backend, renew_needs_a_majority_and_is_lost_on_one)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_simple(BACKEND_RENEW, &res, false), 0);
    cr_assert_eq(nodes[0]->cmd[0].op, F_RENEW);
    cr_assert_eq(nodes[0]->cmd[0].req.ttl_ms, 5000);
    answer(0, 0, BACKEND_DONE, 0, 0);
    answer(1, 0, BACKEND_DONE, 0, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.outcome, BACKEND_DONE);
    answer(2, 0, BACKEND_NOT_OURS, 0, 0);
    /* One not ours, one failed: in doubt, not lost. */
    struct result res2 = {0};
    cr_assert_eq(send_simple(BACKEND_RENEW, &res2, false), 0);
    answer(0, 1, BACKEND_DONE, 0, 0);
    answer(1, 1, BACKEND_NOT_OURS, 0, 0);
    answer_err(2, 1, DLOCK_EUNAVAIL);
    cr_assert_eq(res2.calls, 1);
    cr_assert_eq(res2.r.err, DLOCK_ENOQUORUM);
    /* Two not ours: lost. */
    struct result res3 = {0};
    cr_assert_eq(send_simple(BACKEND_RENEW, &res3, false), 0);
    answer(0, 2, BACKEND_NOT_OURS, 0, 0);
    answer(1, 2, BACKEND_NOT_OURS, 0, 0);
    cr_assert_eq(res3.calls, 1);
    cr_assert_eq(res3.r.err, 0);
    cr_assert_eq(res3.r.outcome, BACKEND_NOT_OURS);
}

Test(quorum_backend, release_goes_to_every_node_and_waits_for_all)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_simple(BACKEND_RELEASE, &res, true), 0);
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(nodes[i]->cmd[0].op, F_RELEASE);
        cr_assert(nodes[i]->cmd[0].req.notify);
    }
    cr_assert_eq(armed, 0, "a release has no node timeout");
    answer(0, 0, BACKEND_NOT_OURS, 0, 0);
    answer(1, 0, BACKEND_DONE, 0, 0);
    cr_assert_eq(res.calls, 0);
    answer(2, 0, BACKEND_NOT_OURS, 0, 0);
    cr_assert_eq(res.calls, 1);
    cr_assert_eq(res.r.err, 0);
    cr_assert_eq(res.r.outcome, BACKEND_DONE, "deleted somewhere");
    /* A node that failed leaves it unconfirmed: the core asks again. */
    struct result res2 = {0};
    nodes[2]->down = true;
    cr_assert_eq(send_simple(BACKEND_RELEASE, &res2, false), 0);
    cr_assert_not(nodes[0]->cmd[1].req.notify);
    answer(0, 1, BACKEND_DONE, 0, 0);
    answer(1, 1, BACKEND_DONE, 0, 0);
    cr_assert_eq(res2.calls, 1);
    cr_assert_eq(res2.r.err, DLOCK_EUNAVAIL);
}

/* ---- the rest ---- */

Test(quorum_backend, node_events_are_passed_on)
{
    q = quorum(3);
    nodes[1]->ev.on_notice(nodes[1]->ev.arg, "job", 3, NULL);
    nodes[2]->ev.on_subscribed(nodes[2]->ev.arg);
    nodes[0]->ev.on_ready(nodes[0]->ev.arg);
    cr_assert_eq(notices, 1);
    cr_assert_str_eq(notice_name, "job");
    cr_assert_eq(subscribed, 1);
    cr_assert_eq(ready, 1);
}

static void on_lookup(void *arg, int err, const struct backend_holder *h)
{
    struct backend_holder *out = arg;
    cr_assert_eq(err, 0);
    *out = *h;
}

static void answer_lookup(unsigned i, unsigned k, const char *value)
{
    struct fcmd *c = cmd(i, k);
    struct backend_holder h = {.pttl = 1000, .nodes = 1, .nodes_holding = value[0] != '\0'};
    snprintf(h.value, sizeof h.value, "%s", value);
    c->lcb(c->arg, 0, &h);
}

Test(quorum_backend, lookup_reports_the_majority_value)
{
    q = quorum(3);
    struct backend_holder h = {0};
    cr_assert_eq(q->ops->lookup(q, "job", 3, on_lookup, &h), 0);
    answer_lookup(0, 0, "tok-a");
    answer_lookup(1, 0, "tok-b");
    answer_lookup(2, 0, "tok-a");
    cr_assert_str_eq(h.value, "tok-a");
    cr_assert_eq(h.nodes_holding, 2);
    cr_assert_eq(h.nodes, 3);
    cr_assert_not(h.undetermined);
    cr_assert_eq(q->ops->lookup(q, "job", 3, on_lookup, &h), 0);
    answer_lookup(0, 1, "tok-a");
    answer_lookup(1, 1, "tok-b");
    answer_lookup(2, 1, "");
    cr_assert(h.undetermined);
}

Test(quorum_backend, pending_and_nodes_add_up)
{
    q = quorum(3);
    struct result res = {0};
    cr_assert_eq(send_acquire(&res, 0), 0);
    cr_assert_eq(q->ops->pending(q), 3);
    struct backend_node out[9];
    cr_assert_eq(q->ops->nodes(q, out, 9), 3);
    cr_assert_str_eq(out[2].addr, "node2");
}

/* Destroyed with commands in flight: each open operation is answered once,
 * with DLOCK_EUNAVAIL, whether the nodes answer at their destroy (as Redis
 * nodes do) or not; then the clock's driver is told. */
Test(quorum_backend, destroy_answers_open_operations_once)
{
    for (int answering = 0; answering < 2; answering++) {
        q = quorum(3);
        for (unsigned i = 0; i < 3; i++)
            nodes[i]->answer_on_destroy = answering;
        struct result acq = {0}, ren = {0};
        cr_assert_eq(send_acquire(&acq, 0), 0);
        cr_assert_eq(send_simple(BACKEND_RENEW, &ren, false), 0);
        struct backend_holder h = {0};
        cr_assert_eq(q->ops->lookup(q, "job", 3, on_lookup, &h), 0);
        answer_lookup(0, 2, "tok");
        answer_lookup(1, 2, "tok");
        answer(0, 0, BACKEND_DONE, 100, 0);
        unsigned arms_before = arms;
        q->ops->destroy(q);
        q = NULL;
        cr_assert_eq(acq.calls, 1);
        cr_assert_eq(acq.r.err, DLOCK_EUNAVAIL);
        cr_assert_eq(ren.calls, 1);
        cr_assert_eq(ren.r.err, DLOCK_EUNAVAIL);
        cr_assert_str_eq(h.value, "tok", "the lookup answered with what came");
        cr_assert_eq(armed, 0, "disarmed");
        cr_assert_gt(arms, arms_before);
        cr_assert_eq(dones, 1u + (unsigned)answering);
        for (unsigned i = 0; i < 3; i++) {
            cr_assert(nodes[i]->destroyed);
            free(nodes[i]);
            nodes[i] = NULL;
        }
    }
}

Test(quorum_backend, a_node_that_cannot_be_made_fails_the_whole)
{
    config_defaults(&cfg);
    fail_make_at = 2;
    cr_assert_null(backend_quorum_new(&cfg, 3, make_node, NULL, &vclock, &user_ev));
    cr_assert(nodes[0]->destroyed);
    cr_assert(nodes[1]->destroyed);
    cr_assert_eq(dones, 0, "the caller frees its driver itself");
    cr_assert_null(backend_quorum_new(&cfg, 0, make_node, NULL, &vclock, &user_ev));
    cr_assert_null(
        backend_quorum_new(&cfg, CONFIG_MAX_NODES + 1, make_node, NULL, &vclock, &user_ev));
}
