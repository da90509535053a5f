/* SPDX-License-Identifier: BSD-3-Clause */
/* test_core.c -- the pure lock core (agent/core/core.c) in virtual time.
 *
 * The core reads no clock: every entry point takes the time. Here a fake
 * core_env records the answers, events and lease page writes with the
 * virtual time they were made at, and a fake backend queues every request
 * with its send time; the test answers each one with the result and the
 * arrival time it chooses. run_until() fires the core's timers each at its
 * own due time, as dlockd's loop does, so "at" below means exactly then.
 *
 * Besides the lock logic (queues, limits, errors), this is where the timing
 * of the lock logic is checked, which the integration tests leave alone:
 * renewals from the send time at ttl * renew_fraction, the validity, LOST
 * AT the deadline, max hold AT its limit (and its default and cap), the
 * stall seen at the first renewal tick past the progress deadline, waits
 * that end AT wait_ms, retries at the holder's PTTL, outage riding for the
 * waiter's own wait or up to outage_wait_ms. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "core.h"
#include "dlock.h"
#include "log.h"
#include "table.h"
#include "wire.h"

#define MS ((uint64_t)NS_PER_MS)
/* Virtual time starts at 1000 s: on a 10 ms boundary, as renewals are
 * batched to 10 ms quanta of the clock. */
#define T0 (1000000 * MS)

#define MAX_REC   1024
#define MAX_SLOTS 320

/* ---- the fake environment ---- */

struct tclient {
    struct core_client cc; /* first: the core's pointer is ours */
    bool used[MAX_SLOTS];
    uint64_t touched[MAX_SLOTS]; /* the lease page's touch words */
};

enum akind { A_GRANTED, A_ERROR, A_OK };

struct answer {
    enum akind kind;
    struct tclient *c;
    uint32_t req_id;
    struct wire_granted g;
    int code;
    char msg[256];
    uint64_t at;
};

struct event {
    struct tclient *c;
    struct wire_event ev;
    uint64_t at;
};

struct pagew {
    struct tclient *c;
    uint32_t slot, state;
    uint64_t lease_id, fence, deadline, at;
};

enum rkind { R_ACQUIRE, R_RENEW, R_RELEASE };

/* A request the core sent to the store, waiting for the test's answer. */
struct req {
    enum rkind kind;
    char name[64];
    char token[TOKEN_HEX + 1];
    uint32_t ttl_ms;
    uint32_t block; /* acquire: tokens reserved for handoffs */
    enum lock_kind lkind;
    uint32_t limit;
    uint32_t holds; /* acquire, renew: the lease's holds */
    bool waiting;   /* acquire: names the agent and joins the waiting-hosts record when taken */
    bool bound;     /* acquire: that entry is bound to the agent's keep-alive key */
    uint32_t want_ms;
    bool notify;
    uint64_t sent;
    backend_cb cb;
    void *arg;
    bool answered;
};

static struct {
    struct config cfg;
    struct core k;
    struct backend backend;
    uint64_t now;
    uint64_t rnd;
    bool no_random; /* while set, the environment has no random bits to give */
    /* The keep-alives the core sent (a store that binds entries): when. */
    uint64_t keepalive[128];
    uint64_t keepalive_seq[128];
    int nkeepalive;
    int refuse; /* while set, the store refuses every request at once with it */
    uint32_t next_id;
    struct answer ans[MAX_REC];
    int nans;
    struct event ev[MAX_REC];
    int nev;
    struct pagew pw[MAX_REC];
    int npw;
    struct req rq[MAX_REC];
    int nrq;
    struct tclient *clients[16];
    int nclients;
    struct {
        char name[64];
        bool on;
    } watch[MAX_REC];
    int nwatch;
} F;

static struct tclient *tc(struct core_client *c)
{
    return (struct tclient *)c;
}

static void env_granted(void *arg, struct core_client *c, uint32_t req_id,
                        const struct wire_granted *g)
{
    cr_assert_lt(F.nans, MAX_REC);
    F.ans[F.nans++] =
        (struct answer){.kind = A_GRANTED, .c = tc(c), .req_id = req_id, .g = *g, .at = F.now};
}

static void env_error(void *arg, struct core_client *c, uint32_t req_id, int code, const char *msg)
{
    cr_assert_lt(F.nans, MAX_REC);
    struct answer *a = &F.ans[F.nans++];
    *a = (struct answer){.kind = A_ERROR, .c = tc(c), .req_id = req_id, .code = code, .at = F.now};
    snprintf(a->msg, sizeof a->msg, "%s", msg ? msg : "");
}

static void env_ok(void *arg, struct core_client *c, uint32_t req_id)
{
    cr_assert_lt(F.nans, MAX_REC);
    F.ans[F.nans++] = (struct answer){.kind = A_OK, .c = tc(c), .req_id = req_id, .at = F.now};
}

static void env_event(void *arg, struct core_client *c, const struct wire_event *ev)
{
    cr_assert_lt(F.nev, MAX_REC);
    F.ev[F.nev++] = (struct event){.c = tc(c), .ev = *ev, .at = F.now};
}

static uint32_t env_slot_alloc(void *arg, struct core_client *c)
{
    struct tclient *t = tc(c);
    for (uint32_t i = 0; i < MAX_SLOTS; i++)
        if (!t->used[i]) {
            t->used[i] = true;
            t->touched[i] = 0;
            return i;
        }
    return UINT32_MAX;
}

static void env_slot_free(void *arg, struct core_client *c, uint32_t slot)
{
    cr_assert_lt(slot, MAX_SLOTS);
    cr_assert(tc(c)->used[slot], "slot %u freed twice", slot);
    tc(c)->used[slot] = false;
}

static void env_slot_write(void *arg, struct core_client *c, uint32_t slot, uint32_t state,
                           uint64_t lease_id, uint64_t fence, uint64_t deadline)
{
    cr_assert_lt(F.npw, MAX_REC);
    F.pw[F.npw++] = (struct pagew){.c = tc(c),
                                   .slot = slot,
                                   .state = state,
                                   .lease_id = lease_id,
                                   .fence = fence,
                                   .deadline = deadline,
                                   .at = F.now};
}

static uint64_t env_slot_touched(void *arg, struct core_client *c, uint32_t slot)
{
    cr_assert_lt(slot, MAX_SLOTS);
    return tc(c)->touched[slot];
}

static int env_random(void *arg, uint64_t *out)
{
    if (F.no_random)
        return -1;
    /* xorshift64*: the same tokens and jitter every run */
    F.rnd ^= F.rnd >> 12;
    F.rnd ^= F.rnd << 25;
    F.rnd ^= F.rnd >> 27;
    *out = F.rnd * 2685821657736338717ull;
    return 0;
}

/* ---- the fake store ---- */

static int fb_queue(enum rkind kind, const struct backend_req *req, backend_cb cb, void *arg)
{
    if (F.refuse)
        return F.refuse;
    cr_assert_lt(F.nrq, MAX_REC);
    struct req *r = &F.rq[F.nrq++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    cr_assert_lt(req->len, sizeof r->name);
    memcpy(r->name, req->name, req->len);
    if (req->token)
        memcpy(r->token, req->token, TOKEN_HEX);
    r->ttl_ms = req->ttl_ms;
    r->notify = req->notify;
    r->lkind = req->kind;
    r->limit = req->limit;
    r->block = req->block;
    r->holds = req->holds;
    r->waiting = req->waiter_id && req->want_ms > 0;
    r->bound = req->bound;
    r->want_ms = req->want_ms;
    r->sent = F.now;
    r->cb = cb;
    r->arg = arg;
    return 0;
}

static int fb_op(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    static const int kinds[] = {
        [BACKEND_ACQUIRE] = R_ACQUIRE, [BACKEND_RENEW] = R_RENEW, [BACKEND_RELEASE] = R_RELEASE};
    cr_assert_neq(req->op, BACKEND_FENCE, "the core never asks for a write-back");
    return fb_queue(kinds[req->op], req, cb, arg);
}

/* The names the core listens to, and every change it asked for. */
static int fb_watch(struct backend *b, const char *name, size_t len, bool on)
{
    cr_assert_lt(F.nwatch, MAX_REC);
    cr_assert_lt(len, sizeof F.watch[0].name);
    memcpy(F.watch[F.nwatch].name, name, len);
    F.watch[F.nwatch].name[len] = '\0';
    F.watch[F.nwatch++].on = on;
    return 0;
}

static int fb_lookup(struct backend *b, const char *name, size_t len, backend_lookup_cb cb,
                     void *arg)
{
    return DLOCK_EUNAVAIL;
}

static void fb_flush(struct backend *b)
{
}

static size_t fb_pending(const struct backend *b)
{
    size_t n = 0;
    for (int i = 0; i < F.nrq; i++)
        n += !F.rq[i].answered;
    return n;
}

static size_t fb_nodes(const struct backend *b, struct backend_node *out, size_t max)
{
    return 0;
}

static void fb_destroy(struct backend *b)
{
}

static const struct backend_ops fb_ops = {
    .op = fb_op,
    .watch = fb_watch,
    .lookup = fb_lookup,
    .flush = fb_flush,
    .pending = fb_pending,
    .nodes = fb_nodes,
    .destroy = fb_destroy,
};

/* A store that binds the agent's entries to its keep-alive key (a single
 * Redis node): the same, with the keep-alive recorded. */
static void fb_keepalive(struct backend *b, const char *waiter_id, uint32_t ttl_ms, uint64_t seq)
{
    cr_assert_str_eq(waiter_id, F.k.waiter_id);
    cr_assert_eq(ttl_ms, BACKEND_WAIT_ENTRY_MAX_MS);
    cr_assert_lt(F.nkeepalive, 128);
    F.keepalive_seq[F.nkeepalive] = seq;
    F.keepalive[F.nkeepalive++] = F.now;
}

static const struct backend_ops fb_bound_ops = {
    .op = fb_op,
    .watch = fb_watch,
    .keepalive = fb_keepalive,
    .lookup = fb_lookup,
    .flush = fb_flush,
    .pending = fb_pending,
    .nodes = fb_nodes,
    .destroy = fb_destroy,
};

/* ---- fixture ---- */

static void setup(void)
{
    memset(&F, 0, sizeof F);
    log_set_level(LOG_ERROR);
    config_defaults(&F.cfg);
    /* Most tests look at the store's traffic: cohort handoff is off but in
     * the tests that turn it on. */
    F.cfg.cohort_handoffs = 0;
    F.backend.ops = &fb_ops;
    F.now = T0;
    F.rnd = 0x9e3779b97f4a7c15ull;
    F.next_id = 1;
    struct core_env env = {.granted = env_granted,
                           .error = env_error,
                           .ok = env_ok,
                           .event = env_event,
                           .slot_alloc = env_slot_alloc,
                           .slot_free = env_slot_free,
                           .slot_write = env_slot_write,
                           .slot_touched = env_slot_touched,
                           .random = env_random};
    cr_assert_eq(core_init(&F.k, &F.cfg, &env, &F.backend, 42, "testhost"), 0);
}

static void teardown(void)
{
    core_free(&F.k);
    for (int i = 0; i < F.nclients; i++)
        free(F.clients[i]);
}

TestSuite(core, .init = setup, .fini = teardown);

/* ---- helpers ---- */

static struct tclient *client(int pid)
{
    cr_assert_lt(F.nclients, 16);
    struct tclient *t = calloc(1, sizeof *t);
    cr_assert_not_null(t);
    LIST_INIT(&t->cc.leases);
    LIST_INIT(&t->cc.waiters);
    t->cc.pid = pid;
    t->cc.uid = 1000;
    snprintf(t->cc.comm, sizeof t->cc.comm, "test");
    F.clients[F.nclients++] = t;
    return t;
}

/* Fires every timer due up to t, each at its own due time; now is t after. */
static void run_until(uint64_t t)
{
    uint64_t due;
    while ((due = core_next_due(&F.k)) != 0 && due <= t) {
        if (due > F.now)
            F.now = due;
        core_tick(&F.k, F.now);
    }
    if (t > F.now)
        F.now = t;
}

/* An acquire from c at now; its request id. */
static uint32_t acquire(struct tclient *c, const char *name, uint32_t ttl_ms, int64_t wait_ms,
                        uint32_t max_hold_ms, uint32_t progress_ms)
{
    struct wire_acquire m = {.ttl_ms = ttl_ms,
                             .wait_ms = wait_ms,
                             .max_hold_ms = max_hold_ms,
                             .progress_ms = progress_ms,
                             .name = name,
                             .name_len = (uint16_t)strlen(name)};
    uint32_t id = F.next_id++;
    core_acquire(&F.k, &c->cc, id, &m, F.now);
    return id;
}

static uint32_t release(struct tclient *c, uint64_t lease_id)
{
    uint32_t id = F.next_id++;
    core_release(&F.k, &c->cc, id, lease_id, F.now);
    return id;
}

/* The store's answer to r, arriving at `at` (the timers due before run first). */
static void reply_at(struct req *r, uint64_t at, int err, enum backend_outcome outcome,
                     uint64_t fence, long long pttl_ms)
{
    cr_assert_not(r->answered, "request answered twice");
    run_until(at);
    r->answered = true;
    struct backend_result res = {
        .err = err, .outcome = outcome, .fence = fence, .pttl_ms = pttl_ms, .at = F.now};
    r->cb(r->arg, &res);
}

static void reply(struct req *r, uint64_t at, enum backend_outcome outcome)
{
    reply_at(r, at, 0, outcome, outcome == BACKEND_DONE ? 7 : 0, 0);
}

/* The n-th (from 0) request of kind for name, NULL when there is none. */
static struct req *req_n(enum rkind kind, const char *name, int n)
{
    for (int i = 0; i < F.nrq; i++)
        if (F.rq[i].kind == kind && strcmp(F.rq[i].name, name) == 0 && n-- == 0)
            return &F.rq[i];
    return NULL;
}

static int req_count(enum rkind kind, const char *name)
{
    int n = 0;
    while (req_n(kind, name, n))
        n++;
    return n;
}

/* The latest request of kind for name, which must exist and be unanswered. */
static struct req *pending(enum rkind kind, const char *name)
{
    int n = req_count(kind, name);
    cr_assert_gt(n, 0, "no %s request for %s", kind == R_ACQUIRE ? "acquire" : "renew", name);
    struct req *r = req_n(kind, name, n - 1);
    cr_assert_not(r->answered, "the last request for %s is answered already", name);
    return r;
}

/* When the fallback retry of name's lock is due. */
static uint64_t retry_due(const char *name)
{
    const struct lock *l = table_lock_find(&F.k.table, name, strlen(name));
    cr_assert(l && l->retry.idx != THEAP_NONE, "no retry queued for %s", name);
    return l->retry.due;
}

/* A confirmed waiter for name behind a key of pttl ms backs off from the
 * fast retry (pace.h): answers "taken" to each retry until the next one is
 * at least min_ms away, checking that the delays never shrink (a retry sent
 * at once, for a notice that came while it was in flight, aside); how many
 * answers that took. */
static int back_off(const char *name, long long pttl, uint64_t min_ms)
{
    uint64_t last = 0;
    for (int n = 0; n < 24; n++) {
        struct req *r = pending(R_ACQUIRE, name);
        int sent = req_count(R_ACQUIRE, name);
        reply_at(r, r->sent + MS, 0, BACKEND_TAKEN, 0, pttl);
        if (req_count(R_ACQUIRE, name) > sent)
            continue;
        uint64_t due = retry_due(name), delay = due - F.now;
        cr_assert_geq(delay + MS, last, "retry %d of %s came sooner than the one before", n, name);
        last = delay;
        if (delay >= min_ms * MS)
            return n + 1;
        run_until(due);
        cr_assert_eq(req_count(R_ACQUIRE, name), sent + 1, "no retry of %s when due", name);
    }
    cr_assert_fail("%s: no retry %llu ms away after 24 answers", name, (unsigned long long)min_ms);
    return -1;
}

static struct answer *answer_to(uint32_t req_id)
{
    for (int i = 0; i < F.nans; i++)
        if (F.ans[i].req_id == req_id)
            return &F.ans[i];
    return NULL;
}

static uint64_t granted(uint32_t req_id)
{
    struct answer *a = answer_to(req_id);
    cr_assert_not_null(a, "request %u not answered", req_id);
    cr_assert_eq(a->kind, A_GRANTED, "request %u: %s %d (%s)", req_id,
                 a->kind == A_ERROR ? "error" : "ok", a->code, a->msg);
    return a->g.lease_id;
}

static void refused(uint32_t req_id, int code)
{
    struct answer *a = answer_to(req_id);
    cr_assert_not_null(a, "request %u not answered", req_id);
    cr_assert_eq(a->kind, A_ERROR, "request %u was not refused", req_id);
    cr_assert_eq(a->code, code, "request %u: error %d (%s), not %d", req_id, a->code, a->msg, code);
}

/* The n-th (from 0) event of lease in state, NULL when there is none. */
static struct event *event_n(uint64_t lease_id, int state, int n)
{
    for (int i = 0; i < F.nev; i++)
        if (F.ev[i].ev.lease_id == lease_id && F.ev[i].ev.state == state && n-- == 0)
            return &F.ev[i];
    return NULL;
}

static int events_of(uint64_t lease_id)
{
    int n = 0;
    for (int i = 0; i < F.nev; i++)
        n += F.ev[i].ev.lease_id == lease_id;
    return n;
}

/* c takes name, the store saying yes `after` later: the lease id. */
static uint64_t hold(struct tclient *c, const char *name, uint32_t ttl_ms, uint32_t max_hold_ms,
                     uint32_t progress_ms, uint64_t after)
{
    uint32_t id = acquire(c, name, ttl_ms, 0, max_hold_ms, progress_ms);
    reply(pending(R_ACQUIRE, name), F.now + after, BACKEND_DONE);
    return granted(id);
}

/* Runs up to time t, the store renewing every lease successfully, each
 * renewal answered `after` after it was sent. */
static void renew_ok_until(uint64_t t, uint64_t after)
{
    for (;;) {
        struct req *first = NULL;
        for (int i = 0; i < F.nrq; i++)
            if (F.rq[i].kind == R_RENEW && !F.rq[i].answered &&
                (!first || F.rq[i].sent < first->sent))
                first = &F.rq[i];
        uint64_t due = core_next_due(&F.k);
        if (first && first->sent + after <= t && (!due || first->sent + after <= due)) {
            reply(first, first->sent + after, BACKEND_DONE);
            continue;
        }
        if (!due || due > t)
            break;
        run_until(due);
    }
    run_until(t);
}

/* The first renewal tick after `after` of a lease whose acquire was sent at
 * `sent`, every renewal sent when due (renewals are batched to quanta of
 * the clock, so the ticks are not exact multiples of ttl * fraction). */
static uint64_t tick_after(uint64_t sent, uint32_t ttl_ms, uint64_t after)
{
    uint64_t t = sent;
    while (t <= after)
        t = lease_next_renew(t, ttl_ms, F.cfg.renew_fraction);
    return t;
}

/* ---- queues, answers, limits ---- */

Test(core, grant_then_local_waiters_in_arrival_order)
{
    struct tclient *a = client(1), *b = client(2), *c = client(3), *d = client(4);
    uint32_t ia = acquire(a, "x", 5000, 0, 0, 0);
    cr_assert_eq(req_count(R_ACQUIRE, "x"), 1);
    reply(pending(R_ACQUIRE, "x"), T0 + 2 * MS, BACKEND_DONE);
    uint64_t la = granted(ia);

    /* Arrival order c, b, d. No store traffic while a holds the lock. */
    uint32_t ic = acquire(c, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    uint32_t ib = acquire(b, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    uint32_t id = acquire(d, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    run_until(T0 + 1000 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "x"), 1, "waiters behind a local holder went to the store");
    cr_assert_null(answer_to(ic));

    struct tclient *order[3] = {c, b, d};
    uint32_t ids[3] = {ic, ib, id};
    uint64_t holder = la;
    struct tclient *who = a;
    for (int i = 0; i < 3; i++) {
        int before = F.nrq;
        uint32_t r = release(who, holder);
        cr_assert_eq(answer_to(r)->kind, A_OK);
        /* The release goes out first, the next waiter's acquire right behind it. */
        cr_assert_eq(F.nrq, before + 2);
        cr_assert_eq(F.rq[before].kind, R_RELEASE);
        cr_assert(F.rq[before].notify, "a release by the holder publishes no notice");
        cr_assert_eq(F.rq[before + 1].kind, R_ACQUIRE);
        for (int j = i + 1; j < 3; j++)
            cr_assert_null(answer_to(ids[j]), "waiter %d answered out of turn", j);
        reply(&F.rq[before + 1], F.now + MS, BACKEND_DONE);
        holder = granted(ids[i]);
        who = order[i];
        cr_assert_eq(answer_to(ids[i])->c, order[i]);
    }
    release(d, holder);
}

/* A cancelled waiter is answered DLOCK_ECANCELED once and gives up its
 * place: the next waiter is served, a cancel of an answered or unknown
 * request does nothing, and a key won by an acquire cancelled in flight is
 * given back. */
Test(core, a_cancelled_waiter_leaves_the_queue_and_its_key_is_given_back)
{
    struct tclient *a = client(1), *b = client(2), *c = client(3), *d = client(4);
    uint64_t la = hold(a, "x", 5000, 0, 0, MS);
    uint32_t ib = acquire(b, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    uint32_t ic = acquire(c, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    core_cancel(&F.k, &b->cc, ib, F.now);
    refused(ib, DLOCK_ECANCELED);
    cr_assert_null(answer_to(ic), "the waiter behind was answered");
    int nans = F.nans;
    core_cancel(&F.k, &b->cc, ib, F.now);       /* answered already */
    core_cancel(&F.k, &c->cc, ib + 100, F.now); /* no such request */
    core_cancel(&F.k, &a->cc, ic, F.now);       /* another client's */
    cr_assert_eq(F.nans, nans, "a cancel of nothing waiting was answered");
    release(a, la);
    reply(pending(R_ACQUIRE, "x"), F.now + MS, BACKEND_DONE);
    granted(ic);
    cr_assert_eq(F.nans, nans + 2, "one OK and one grant, nothing for b");

    /* In flight: the key the store grants is nobody's and goes back. */
    uint32_t id = acquire(d, "y", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    struct req *r = pending(R_ACQUIRE, "y");
    cr_assert_not_null(r);
    core_cancel(&F.k, &d->cc, id, F.now);
    refused(id, DLOCK_ECANCELED);
    int nrq = F.nrq;
    reply(r, F.now + MS, BACKEND_DONE);
    cr_assert_geq(F.nrq, nrq + 1, "the key won for nobody was kept");
    cr_assert_eq(F.rq[nrq].kind, R_RELEASE);
    cr_assert_str_eq(F.rq[nrq].name, "y");
    int granted_to_d = 0;
    for (int i = 0; i < F.nans; i++)
        granted_to_d += F.ans[i].req_id == id && F.ans[i].kind == A_GRANTED;
    cr_assert_eq(granted_to_d, 0);
    cr_assert_eq(F.k.stats.cancels, 2);
}

/* The statistics of the health metrics, exact in virtual time: the waiters
 * gauge, what each caller waited from its request to its answer, each
 * lease's hold from its acquire's send time to its release or loss, and
 * every acquire's outcome counted once. */
Test(core, stats_count_waiters_queue_waits_holds_and_outcomes)
{
    struct tclient *a = client(1), *b = client(2), *c = client(3);
    const struct agent_stats *st = &F.k.stats;
    uint64_t la = hold(a, "x", 5000, 0, 0, 2 * MS); /* answered after 2 ms */
    cr_assert_eq(st->acquires[ACQ_GRANTED], 1);
    cr_assert_eq(st->queue_wait.count, 1);
    cr_assert_float_eq(st->queue_wait.sum, 0.002, 1e-9);
    cr_assert_eq(st->waiters, 0);

    /* b waits 300 ms behind a; c tries once (busy, no wait), then waits
     * 100 ms and times out; a cancelled and a gone waiter count too. */
    uint32_t ib = acquire(b, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    cr_assert_eq(st->waiters, 1);
    refused(acquire(c, "x", 5000, 0, 0, 0), DLOCK_EBUSY);
    cr_assert_eq(st->acquires[ACQ_BUSY], 1);
    uint32_t ic = acquire(c, "x", 5000, 100, 0, 0);
    cr_assert_eq(st->waiters, 2);
    run_until(F.now + 100 * MS);
    refused(ic, DLOCK_ETIMEDOUT);
    cr_assert_eq(st->acquires[ACQ_TIMEOUT], 1);
    cr_assert_eq(st->waiters, 1);
    uint32_t ic2 = acquire(c, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    core_cancel(&F.k, &c->cc, ic2, F.now);
    cr_assert_eq(st->acquires[ACQ_CANCELLED], 1);
    acquire(c, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    cr_assert_eq(st->waiters, 2);
    core_client_drop(&F.k, &c->cc, 0, F.now); /* gone unanswered: cancelled */
    cr_assert_eq(st->acquires[ACQ_CANCELLED], 2);
    cr_assert_eq(st->waiters, 1);

    uint64_t t_b = T0 + 2 * MS; /* b asked when a was granted */
    run_until(T0 + 302 * MS);
    release(a, la);
    cr_assert_eq(st->hold.count, 1);
    /* a's hold: from its acquire's send (T0) to its release. */
    cr_assert_float_eq(st->hold.sum, 0.302, 1e-9);
    reply(pending(R_ACQUIRE, "x"), F.now + MS, BACKEND_DONE);
    uint64_t lb = granted(ib);
    cr_assert_eq(st->waiters, 0);
    cr_assert_eq(st->acquires[ACQ_GRANTED], 2);
    /* b waited from its request to its grant: 301 ms. */
    double sum_before_b = 0.002 + 0.1; /* a's 2 ms and the timeout's 100 ms; the rest 0 */
    cr_assert_float_eq(st->queue_wait.sum - sum_before_b, (double)(F.now - t_b) / 1e9, 1e-9);
    cr_assert_eq(st->queue_wait.count, 6); /* a, busy, timeout, cancelled, gone, b */
    release(b, lb);
    cr_assert_eq(st->hold.count, 2);
    uint64_t total = 0;
    for (int o = 0; o < ACQ_OUTCOMES; o++)
        total += st->acquires[o];
    cr_assert_eq(total, st->queue_wait.count, "an acquire counted twice or not at all");
}

Test(core, try_once_is_busy_behind_a_queued_local_waiter)
{
    struct tclient *a = client(1), *b = client(2), *c = client(3);
    uint64_t la = hold(a, "x", 5000, 0, 0, MS);
    uint32_t ib = acquire(b, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    int nrq = F.nrq;
    uint32_t ic = acquire(c, "x", 5000, 0, 0, 0);
    refused(ic, DLOCK_EBUSY);
    cr_assert_eq(F.nrq, nrq, "a try-once behind a local holder went to the store");
    /* Nobody holds it now, but b waits (its acquire in flight): still busy,
     * a try-once never jumps the queue. */
    release(a, la);
    cr_assert(pending(R_ACQUIRE, "x"));
    uint32_t ic2 = acquire(c, "x", 5000, 0, 0, 0);
    refused(ic2, DLOCK_EBUSY);
    reply(pending(R_ACQUIRE, "x"), F.now + MS, BACKEND_DONE);
    granted(ib);
}

Test(core, asking_again_for_a_held_name_is_eheld_at_once)
{
    struct tclient *a = client(1);
    hold(a, "mine", 5000, 0, 0, MS);
    int nrq = F.nrq;
    uint32_t i1 = acquire(a, "mine", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    refused(i1, DLOCK_EHELD);
    cr_assert_not_null(strstr(answer_to(i1)->msg, "already holds mine"), "%s", answer_to(i1)->msg);
    uint32_t i2 = acquire(a, "mine", 5000, 0, 0, 0);
    refused(i2, DLOCK_EHELD);
    cr_assert_eq(F.nrq, nrq);
    /* Another client may wait for it. */
    struct tclient *b = client(2);
    uint32_t ib = acquire(b, "mine", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    cr_assert_null(answer_to(ib));
}

/* Without randomness there is no unguessable token: the acquire fails
 * instead of going out with a predictable one. */
Test(core, no_randomness_fails_the_acquire)
{
    struct tclient *a = client(1);
    F.no_random = true;
    uint32_t id = acquire(a, "r", 1000, -1, 0, 0);
    refused(id, DLOCK_ENOMEM);
    cr_assert_eq(F.nrq, 0, "an acquire went out without a random token");
    F.no_random = false;
    acquire(a, "r", 1000, -1, 0, 0);
    cr_assert_eq(F.nrq, 1);
}

Test(core, ttl_out_of_range_is_einval)
{
    struct tclient *a = client(1);
    uint32_t lo = acquire(a, "t", F.cfg.min_ttl_ms - 1, 0, 0, 0);
    refused(lo, DLOCK_EINVAL);
    cr_assert_not_null(strstr(answer_to(lo)->msg, "outside this agent's range"), "%s",
                       answer_to(lo)->msg);
    uint32_t hi = acquire(a, "t", F.cfg.max_ttl_ms + 1, 0, 0, 0);
    refused(hi, DLOCK_EINVAL);
    cr_assert_not_null(strstr(answer_to(hi)->msg, "45000 ms"), "%s", answer_to(hi)->msg);
    cr_assert_eq(F.nrq, 0, "an invalid acquire went to the store");
    /* The bounds themselves, and 0 for the default, are fine. */
    acquire(a, "t1", F.cfg.min_ttl_ms, 0, 0, 0);
    acquire(a, "t2", F.cfg.max_ttl_ms, 0, 0, 0);
    acquire(a, "t3", 0, 0, 0, 0);
    cr_assert_eq(F.nrq, 3);
    cr_assert_eq(req_n(R_ACQUIRE, "t3", 0)->ttl_ms, F.cfg.default_ttl_ms);
}

Test(core, leases_and_waiters_count_against_the_client_limits)
{
    F.cfg.max_leases_per_conn = 2;
    F.cfg.max_waiters_per_conn = 1;
    struct tclient *a = client(1), *b = client(2);
    uint64_t l1 = hold(a, "m1", 5000, 0, 0, MS);
    hold(a, "m2", 5000, 0, 0, MS);
    uint32_t i3 = acquire(a, "m3", 5000, 0, 0, 0);
    refused(i3, DLOCK_ELIMIT);
    cr_assert_not_null(strstr(answer_to(i3)->msg, "lease limit (2)"), "%s", answer_to(i3)->msg);
    cr_assert_eq(req_count(R_ACQUIRE, "m3"), 0);
    /* Another client has its own budget. */
    hold(b, "m3", 5000, 0, 0, MS);
    /* A waiter counts as a lease to come: one lease and one waiter fill 2. */
    release(a, l1);
    uint32_t iw = acquire(a, "m3", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    cr_assert_null(answer_to(iw), "the waiter was answered");
    uint32_t i4 = acquire(a, "m4", 5000, 0, 0, 0);
    refused(i4, DLOCK_ELIMIT);
    /* And the waiter limit on its own. */
    F.cfg.max_leases_per_conn = 100;
    uint32_t iw2 = acquire(a, "m3", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    refused(iw2, DLOCK_ELIMIT);
    cr_assert_not_null(strstr(answer_to(iw2)->msg, "waiter limit (1)"), "%s", answer_to(iw2)->msg);
}

Test(core, per_uid_account_counts_every_client_of_the_uid)
{
    F.cfg.policy.max_leases_per_uid = 2;
    struct core_account acct = {0};
    struct tclient *a = client(1), *b = client(2);
    a->cc.acct = &acct;
    b->cc.acct = &acct;
    hold(a, "u1", 5000, 0, 0, MS);
    hold(b, "u2", 5000, 0, 0, MS);
    cr_assert_eq(acct.leases, 2);
    uint32_t i3 = acquire(b, "u3", 5000, 0, 0, 0);
    refused(i3, DLOCK_ELIMIT);
    cr_assert_not_null(strstr(answer_to(i3)->msg, "per-uid lease limit (2)"), "%s",
                       answer_to(i3)->msg);
    core_client_drop(&F.k, &a->cc, 0, F.now);
    cr_assert_eq(acct.leases, 1);
}

Test(core, renewal_budget_of_a_uid_counts_one_second_over_ttl)
{
    F.cfg.policy.renew_budget_per_uid = 3;
    struct core_account acct = {0}, other = {0};
    struct tclient *a = client(1), *b = client(2), *c = client(3);
    a->cc.acct = &acct;
    b->cc.acct = &acct;
    c->cc.acct = &other;
    hold(a, "r1", 1000, 0, 0, MS);
    hold(b, "r2", 1000, 0, 0, MS);
    cr_assert_eq(acct.load, 2000, "two leases of TTL 1 s count 2 (in thousandths)");
    /* A lease of 500 ms counts 2: over the budget of 3, for the uid's every client. */
    uint32_t i3 = acquire(a, "r3", 500, 0, 0, 0);
    refused(i3, DLOCK_ELIMIT);
    cr_assert_not_null(strstr(answer_to(i3)->msg, "per-uid renewal budget (3) reached"), "%s",
                       answer_to(i3)->msg);
    cr_assert_eq(req_count(R_ACQUIRE, "r3"), 0, "a refused acquire reached the store");
    uint64_t l3 = hold(a, "r3", 1000, 0, 0, MS);
    /* A waiter counts as the lease it may become; the budget is full. */
    refused(acquire(b, "r1", 30000, DLOCK_WAIT_FOREVER, 0, 0), DLOCK_ELIMIT);
    /* Another uid has a budget of its own. */
    hold(c, "r4", 500, 0, 0, MS);
    /* A lease given back, or a client gone, gives its share back. */
    release(a, l3);
    cr_assert_eq(acct.load, 2000);
    uint32_t iw = acquire(b, "r1", 30000, DLOCK_WAIT_FOREVER, 0, 0);
    cr_assert_null(answer_to(iw), "the waiter was answered");
    cr_assert_eq(acct.load, 2000 + 34);
    core_client_drop(&F.k, &a->cc, 0, F.now);
    core_client_drop(&F.k, &b->cc, 0, F.now);
    cr_assert_eq(acct.load, 0, "the account does not balance");
    cr_assert_eq(acct.leases + acct.waiters, 0);
}

/* ---- validity and renewals ---- */

Test(core, validity_is_send_time_plus_ttl_minus_drift)
{
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "v", 3000, 0, 0, 0);
    struct req *r = pending(R_ACQUIRE, "v");
    cr_assert_eq(r->sent, T0);
    cr_assert_eq(r->ttl_ms, 3000);
    /* The reply comes 250 ms later: the validity still counts from the send. */
    reply(r, T0 + 250 * MS, BACKEND_DONE);
    granted(id);
    uint64_t want = T0 + 3000 * MS - (3000 / 100 + 2) * MS; /* drift = ttl/100 + 2 ms */
    cr_assert_eq(answer_to(id)->g.deadline_ns, want, "deadline %llu, want %llu",
                 (unsigned long long)answer_to(id)->g.deadline_ns, (unsigned long long)want);
    cr_assert_eq(answer_to(id)->g.ttl_ms, 3000);
    cr_assert_eq(answer_to(id)->g.fence, 7);
    /* The lease page shows it, HELD, with that deadline. */
    cr_assert_eq(F.npw, 1);
    cr_assert_eq(F.pw[0].state, DLOCK_STATE_HELD);
    cr_assert_eq(F.pw[0].deadline, want);
    cr_assert_eq(F.pw[0].slot, answer_to(id)->g.slot);
}

Test(core, a_grant_that_comes_after_its_validity_is_given_back)
{
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "late", 1000, DLOCK_WAIT_FOREVER, 0, 0);
    struct req *r = pending(R_ACQUIRE, "late");
    char token[TOKEN_HEX + 1];
    memcpy(token, r->token, sizeof token);
    uint64_t deadline = T0 + 1000 * MS - (1000 / 100 + 2) * MS;
    reply(r, deadline, BACKEND_DONE);
    cr_assert_null(answer_to(id), "granted a lease with no validity left");
    struct req *rel = req_n(R_RELEASE, "late", 0);
    cr_assert_not_null(rel, "the late key was not given back");
    cr_assert_str_eq(rel->token, token);
    /* The waiter waits on: a new acquire goes out for it. */
    cr_assert_eq(req_count(R_ACQUIRE, "late"), 2);
    reply(pending(R_ACQUIRE, "late"), F.now + MS, BACKEND_DONE);
    granted(id);
}

Test(core, renewal_is_scheduled_from_the_send_time)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "r", 3000, 0, 0, 100 * MS);
    uint64_t due = lease_next_renew(T0, 3000, F.cfg.renew_fraction);
    /* About a third of the TTL after the acquire was sent, not the reply. */
    cr_assert(due > T0 + 900 * MS && due <= T0 + 1000 * MS, "renewal due at +%llu ms",
              (unsigned long long)((due - T0) / MS));
    run_until(due - 1);
    cr_assert_eq(req_count(R_RENEW, "r"), 0, "renewed before it was due");
    run_until(due);
    struct req *rn = pending(R_RENEW, "r");
    cr_assert_eq(rn->sent, due);
    cr_assert_eq(rn->ttl_ms, 3000);
    /* Answered 400 ms later: the new deadline and the next renewal count
     * from the renewal's send time. */
    reply(rn, due + 400 * MS, BACKEND_DONE);
    struct pagew *p = &F.pw[F.npw - 1];
    cr_assert_eq(p->lease_id, l);
    cr_assert_eq(p->deadline, lease_deadline(due, 3000));
    uint64_t next = lease_next_renew(due, 3000, F.cfg.renew_fraction);
    run_until(next - 1);
    cr_assert_eq(req_count(R_RENEW, "r"), 1);
    run_until(next);
    cr_assert_eq(pending(R_RENEW, "r")->sent, next);
    cr_assert_eq(events_of(l), 0, "events of a lease renewed in time");
}

/* The renewal cadence follows renew_fraction: at 0.2 of a 1 s TTL, every
 * 200 ms (the integration test only checks that the lease lives on). */
Test(core, renewal_cadence_follows_renew_fraction)
{
    F.cfg.renew_fraction = 0.2;
    struct tclient *a = client(1);
    uint64_t l = hold(a, "frac", 1000, 0, 0, 5 * MS);
    for (int i = 1; i <= 10; i++) {
        run_until(T0 + (uint64_t)i * 200 * MS - 1);
        cr_assert_eq(req_count(R_RENEW, "frac"), i - 1, "renewal %d early", i);
        run_until(T0 + (uint64_t)i * 200 * MS);
        struct req *rn = pending(R_RENEW, "frac");
        cr_assert_eq(rn->sent, T0 + (uint64_t)i * 200 * MS, "renewal %d at +%llu ms", i,
                     (unsigned long long)((rn->sent - T0) / MS));
        reply(rn, rn->sent + 5 * MS, BACKEND_DONE);
    }
    cr_assert_eq(events_of(l), 0);
}

Test(core, failed_renewals_give_jeopardy_then_lost_at_the_deadline)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "f", 3000, 0, 0, MS);
    uint64_t deadline = lease_deadline(T0, 3000);
    uint64_t due = lease_next_renew(T0, 3000, F.cfg.renew_fraction);
    run_until(due);
    reply_at(pending(R_RENEW, "f"), due + 200 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j, "no JEOPARDY after a failed renewal");
    cr_assert_eq(j->at, due + 200 * MS, "JEOPARDY not at the failure");
    cr_assert_eq(j->ev.reason, DLOCK_EUNAVAIL);
    cr_assert_eq(j->ev.deadline_ns, deadline, "a failed renewal moved the deadline");
    cr_assert_eq(F.pw[F.npw - 1].state, DLOCK_STATE_JEOPARDY);
    /* Retried until the deadline, every failure answered at once. */
    while (!event_n(l, DLOCK_STATE_LOST, 0)) {
        uint64_t next = core_next_due(&F.k);
        cr_assert_neq(next, 0);
        cr_assert_leq(next, deadline, "a timer past the deadline of a lease in jeopardy");
        run_until(next);
        int n = req_count(R_RENEW, "f");
        struct req *last = req_n(R_RENEW, "f", n - 1);
        if (!last->answered)
            reply_at(last, F.now, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    }
    cr_assert_gt(req_count(R_RENEW, "f"), 3, "the failed renewal was not retried");
    struct event *lost = event_n(l, DLOCK_STATE_LOST, 0);
    cr_assert_eq(lost->at, deadline, "LOST at +%lld ms, the deadline is at +%lld ms",
                 (long long)((lost->at - T0) / MS), (long long)((deadline - T0) / MS));
    cr_assert_eq(lost->ev.reason, DLOCK_EUNAVAIL);
    cr_assert_eq(events_of(l), 2, "JEOPARDY once, then LOST");
    /* The key may still be ours: it is deleted. */
    cr_assert_not_null(req_n(R_RELEASE, "f", 0));
    /* Gone: a release says so. */
    refused(release(a, l), DLOCK_ENOTFOUND);
}

Test(core, leases_in_jeopardy_retry_a_bounded_number_per_loop_turn)
{
    enum { N = 300, BOUND = 256 };
    struct tclient *cl[2] = {client(1), client(2)};
    uint32_t id[N];
    char name[16];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "j%d", i);
        id[i] = acquire(cl[i % 2], name, 3000, 0, 0, 0);
    }
    for (int i = 0; i < N; i++)
        reply(&F.rq[i], T0 + MS, BACKEND_DONE);
    for (int i = 0; i < N; i++)
        granted(id[i]);
    /* Renewals due together go out together, however many. */
    uint64_t due = lease_next_renew(T0, 3000, F.cfg.renew_fraction);
    run_until(due);
    int first = F.nrq;
    cr_assert_eq(first, 2 * N, "renewals due together did not all go");
    for (int i = N; i < 2 * N; i++)
        reply_at(&F.rq[i], due + 10 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    core_flush(&F.k, F.now);
    /* Every lease is in jeopardy and retries at the same time: one loop
     * turn sends a bounded number, the next turn the rest. */
    uint64_t retry = core_next_due(&F.k);
    run_until(retry);
    cr_assert_eq(F.nrq - 2 * N, BOUND, "%d retries in one turn", F.nrq - 2 * N);
    core_flush(&F.k, F.now);
    run_until(core_next_due(&F.k));
    cr_assert_gt(F.now, retry);
    cr_assert_eq(F.nrq - 2 * N, N, "the deferred retries did not go in the next turn");
    for (int i = 0; i < N; i++)
        cr_assert_eq(F.pw[F.npw - 1 - i].state, DLOCK_STATE_JEOPARDY);
}

Test(core, an_unanswered_renewal_gives_jeopardy_when_overdue_then_lost)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "u", 3000, 0, 0, MS);
    uint64_t deadline = lease_deadline(T0, 3000);
    uint64_t due = lease_next_renew(T0, 3000, F.cfg.renew_fraction);
    run_until(due);
    struct req *rn = pending(R_RENEW, "u");
    /* Overdue when unanswered for half of the validity left. */
    uint64_t overdue = due + (deadline - due) / 2;
    run_until(overdue - 1);
    cr_assert_eq(events_of(l), 0);
    run_until(overdue);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j, "no JEOPARDY when the renewal is overdue");
    cr_assert_eq(j->ev.reason, DLOCK_EUNAVAIL);
    run_until(deadline - 1);
    cr_assert_null(event_n(l, DLOCK_STATE_LOST, 0), "LOST before the deadline");
    run_until(deadline);
    struct event *lost = event_n(l, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(lost, "no LOST at the deadline");
    cr_assert_eq(lost->at, deadline);
    /* A reply after that changes nothing. */
    reply(rn, deadline + 10 * MS, BACKEND_DONE);
    cr_assert_eq(events_of(l), 2);
}

Test(core, a_renewal_that_works_again_gives_held_again)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "h", 3000, 0, 0, MS);
    uint64_t due = lease_next_renew(T0, 3000, F.cfg.renew_fraction);
    run_until(due);
    reply_at(pending(R_RENEW, "h"), due + 200 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    cr_assert_not_null(event_n(l, DLOCK_STATE_JEOPARDY, 0));
    uint64_t next = core_next_due(&F.k);
    run_until(next);
    struct req *again = pending(R_RENEW, "h");
    cr_assert_eq(again->sent, next);
    reply(again, next + 5 * MS, BACKEND_DONE);
    struct event *h = event_n(l, DLOCK_STATE_HELD, 0);
    cr_assert_not_null(h, "no HELD after a renewal worked again");
    cr_assert_eq(h->at, next + 5 * MS);
    cr_assert_eq(F.pw[F.npw - 1].state, DLOCK_STATE_HELD);
    cr_assert_eq(F.pw[F.npw - 1].deadline, lease_deadline(next, 3000));
    cr_assert_null(event_n(l, DLOCK_STATE_LOST, 0));
}

Test(core, a_renewal_that_finds_the_key_not_ours_is_lost_at_once)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "n", 3000, 0, 0, MS);
    uint64_t due = lease_next_renew(T0, 3000, F.cfg.renew_fraction);
    run_until(due);
    reply(pending(R_RENEW, "n"), due + 3 * MS, BACKEND_NOT_OURS);
    struct event *lost = event_n(l, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(lost, "no LOST when the key is not ours");
    cr_assert_eq(lost->at, due + 3 * MS, "LOST not at once");
    cr_assert_eq(lost->ev.reason, DLOCK_ELOST);
    cr_assert_null(event_n(l, DLOCK_STATE_JEOPARDY, 0), "JEOPARDY before a proven loss");
    /* Not ours: nothing to delete (single node). */
    cr_assert_eq(req_count(R_RELEASE, "n"), 0, "deleted a key that is not ours");
    refused(release(a, l), DLOCK_ENOTFOUND);
}

/* ---- bounded holds ---- */

/* ttl 10 s, max hold 400 ms: JEOPARDY(EHOLDLIMIT) exactly 400 ms after the
 * acquire was sent, not at the next renewal (3.3 s). */
Test(core, max_hold_fires_at_its_deadline)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "mh", 10000, 400, 0, 30 * MS);
    run_until(T0 + 400 * MS - 1);
    cr_assert_eq(events_of(l), 0, "JEOPARDY before the hold limit");
    run_until(T0 + 400 * MS);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j, "no JEOPARDY at the hold limit");
    cr_assert_eq(j->at, T0 + 400 * MS, "JEOPARDY(EHOLDLIMIT) at +%llu ms",
                 (unsigned long long)((j->at - T0) / MS));
    cr_assert_eq(j->ev.reason, DLOCK_EHOLDLIMIT);
    uint64_t deadline = lease_deadline(T0, 10000);
    cr_assert_eq(j->ev.deadline_ns, deadline);
    /* No renewal any more: lost at the deadline. */
    run_until(deadline - 1);
    cr_assert_eq(req_count(R_RENEW, "mh"), 0, "renewed past the hold limit");
    cr_assert_null(event_n(l, DLOCK_STATE_LOST, 0));
    run_until(deadline);
    struct event *lost = event_n(l, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(lost);
    cr_assert_eq(lost->at, deadline);
    cr_assert_eq(lost->ev.reason, DLOCK_EHOLDLIMIT);
    cr_assert_not_null(req_n(R_RELEASE, "mh", 0), "the key was not deleted");
}

/* A renewal that failed is retried every ttl/10; the hold limit cuts the
 * next retry short, so it still fires at its instant. */
Test(core, max_hold_fires_at_its_deadline_between_renewal_retries)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "mf", 1000, 400, 0, MS);
    uint64_t due = lease_next_renew(T0, 1000, F.cfg.renew_fraction);
    cr_assert_lt(due, T0 + 400 * MS, "the first renewal must come before the hold limit");
    run_until(due);
    reply_at(pending(R_RENEW, "mf"), due + MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    uint64_t retry = lease_renew_retry(due + MS, lease_deadline(T0, 1000), 1000);
    cr_assert_gt(retry, T0 + 400 * MS, "the retry must fall after the hold limit");
    run_until(T0 + 400 * MS);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 1);
    cr_assert_not_null(j, "no JEOPARDY(EHOLDLIMIT) at the hold limit");
    cr_assert_eq(j->at, T0 + 400 * MS);
    cr_assert_eq(j->ev.reason, DLOCK_EHOLDLIMIT);
}

/* Renewed as usual until the hold limit, then not. */
Test(core, max_hold_after_renewals)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "mr", 300, 500, 0, 2 * MS);
    renew_ok_until(T0 + 500 * MS - 1, 2 * MS);
    int renewals = req_count(R_RENEW, "mr");
    cr_assert_geq(renewals, 4, "%d renewals in 500 ms of a 300 ms lease", renewals);
    cr_assert_eq(events_of(l), 0);
    run_until(T0 + 500 * MS);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j);
    cr_assert_eq(j->at, T0 + 500 * MS);
    cr_assert_eq(j->ev.reason, DLOCK_EHOLDLIMIT);
    run_until(T0 + 2000 * MS);
    cr_assert_eq(req_count(R_RENEW, "mr"), renewals, "renewed after the hold limit");
    cr_assert_not_null(event_n(l, DLOCK_STATE_LOST, 0));
}

/* The default for a client asking none, the cap for one asking more. */
Test(core, max_hold_default_and_cap)
{
    F.cfg.default_max_hold_ms = 600;
    F.cfg.max_hold_limit_ms = 1200;
    struct tclient *a = client(1), *b = client(2), *c = client(3);
    uint32_t ia = acquire(a, "b0", 10000, 0, 100, 0);
    uint32_t ib = acquire(b, "b1", 10000, 0, 0, 0);
    uint32_t ic = acquire(c, "b2", 10000, 0, 60000, 0);
    reply(pending(R_ACQUIRE, "b0"), T0 + MS, BACKEND_DONE);
    reply(pending(R_ACQUIRE, "b1"), T0 + MS, BACKEND_DONE);
    reply(pending(R_ACQUIRE, "b2"), T0 + MS, BACKEND_DONE);
    uint64_t la = granted(ia), lb = granted(ib), lc = granted(ic);
    run_until(T0 + 5000 * MS);
    cr_assert_eq(event_n(la, DLOCK_STATE_JEOPARDY, 0)->at, T0 + 100 * MS, "asked 100");
    cr_assert_eq(event_n(lb, DLOCK_STATE_JEOPARDY, 0)->at, T0 + 600 * MS, "default 600");
    cr_assert_eq(event_n(lc, DLOCK_STATE_JEOPARDY, 0)->at, T0 + 1200 * MS, "cap 1200");
}

Test(core, max_hold_cap_applies_to_a_client_asking_none)
{
    F.cfg.max_hold_limit_ms = 400;
    struct tclient *a = client(1), *b = client(2);
    uint64_t la = hold(a, "c0", 10000, 0, 0, MS);
    uint64_t lb = hold(b, "c1", 10000, 200, 0, MS);
    uint64_t sa = req_n(R_ACQUIRE, "c0", 0)->sent, sb = req_n(R_ACQUIRE, "c1", 0)->sent;
    run_until(T0 + 5000 * MS);
    cr_assert_eq(event_n(la, DLOCK_STATE_JEOPARDY, 0)->at, sa + 400 * MS, "asked none, cap 400");
    cr_assert_eq(event_n(lb, DLOCK_STATE_JEOPARDY, 0)->at, sb + 200 * MS, "asked 200, cap 400");
}

/* A waiter's hold counts from its acquire's send time, after the release
 * it waited for, not from its request. */
Test(core, max_hold_counts_from_the_acquire_not_the_request)
{
    struct tclient *a = client(1), *b = client(2);
    uint64_t la = hold(a, "q", 5000, 0, 0, MS);
    uint32_t ib = acquire(b, "q", 2000, DLOCK_WAIT_FOREVER, 400, 0);
    run_until(T0 + 1000 * MS);
    release(a, la);
    struct req *r = pending(R_ACQUIRE, "q");
    cr_assert_eq(r->sent, T0 + 1000 * MS);
    reply(r, T0 + 1010 * MS, BACKEND_DONE);
    uint64_t lb = granted(ib);
    run_until(T0 + 3000 * MS);
    struct event *j = event_n(lb, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j);
    cr_assert_eq(j->at, T0 + 1400 * MS, "JEOPARDY(EHOLDLIMIT) at +%llu ms",
                 (unsigned long long)((j->at - T0) / MS));
}

/* Progress 400 ms, a renewal about every 100 ms: the stall is seen at the
 * first renewal tick more than 400 ms after the acquire was sent (or the
 * last touch). */
Test(core, progress_deadline_stalls_an_untouched_lease)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "p", 300, 0, 400, MS);
    uint64_t stall = tick_after(T0, 300, T0 + 400 * MS);
    cr_assert_leq(stall, T0 + 500 * MS);
    renew_ok_until(stall - 1, MS);
    cr_assert_eq(events_of(l), 0, "stalled before the progress deadline");
    cr_assert_geq(req_count(R_RENEW, "p"), 3, "not renewed before the stall");
    run_until(stall);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j, "no stall at the first tick past the progress deadline");
    cr_assert_eq(j->at, stall, "stalled at +%llu ms, the tick is at +%llu ms",
                 (unsigned long long)((j->at - T0) / MS), (unsigned long long)((stall - T0) / MS));
    cr_assert_eq(j->ev.reason, DLOCK_ESTALLED);
    /* No renewal after the stall; lost at the deadline of the last one. */
    int renewals = req_count(R_RENEW, "p");
    struct req *last = req_n(R_RENEW, "p", renewals - 1);
    uint64_t deadline = lease_deadline(last->sent, 300);
    cr_assert_eq(j->ev.deadline_ns, deadline);
    run_until(deadline);
    cr_assert_eq(req_count(R_RENEW, "p"), renewals, "renewed after the stall");
    struct event *lost = event_n(l, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(lost);
    cr_assert_eq(lost->at, deadline);
    cr_assert_eq(lost->ev.reason, DLOCK_ESTALLED);
}

Test(core, touching_keeps_a_lease_with_a_progress_deadline)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "t", 300, 0, 400, MS);
    uint32_t slot = answer_to(1)->g.slot;
    for (uint64_t t = T0 + 50 * MS; t <= T0 + 3000 * MS; t += 50 * MS) {
        renew_ok_until(t, MS);
        a->touched[slot] = t;
    }
    cr_assert_geq(req_count(R_RENEW, "t"), 25);
    cr_assert_eq(events_of(l), 0, "a touched lease stalled");
}

Test(core, a_stalled_lease_touched_again_is_held_again)
{
    struct tclient *a = client(1);
    uint64_t l = hold(a, "s", 300, 0, 400, MS);
    uint32_t slot = answer_to(1)->g.slot;
    renew_ok_until(T0 + 500 * MS, MS);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j);
    /* Touched 10 ms later: renewed at the next look (every ttl/10 = 30 ms
     * while stalled), HELD when that renewal succeeds. */
    uint64_t stall = j->at;
    cr_assert_leq(stall + 30 * MS, T0 + 500 * MS + 30 * MS);
    a->touched[slot] = stall + 10 * MS;
    run_until(stall + 10 * MS);
    uint64_t look = core_next_due(&F.k);
    cr_assert_eq(look, stall + 30 * MS, "the stalled lease looks again %llu ms after the stall",
                 (unsigned long long)((look - stall) / MS));
    run_until(look);
    struct req *rn = pending(R_RENEW, "s");
    cr_assert_eq(rn->sent, look);
    reply(rn, look + MS, BACKEND_DONE);
    struct event *h = event_n(l, DLOCK_STATE_HELD, 0);
    cr_assert_not_null(h, "not HELD again after a touch");
    cr_assert_eq(h->at, look + MS);
    cr_assert_null(event_n(l, DLOCK_STATE_LOST, 0));
}

Test(core, progress_default_and_cap)
{
    F.cfg.default_progress_ms = 300;
    F.cfg.progress_limit_ms = 500;
    struct tclient *a = client(1), *b = client(2);
    uint64_t la = hold(a, "pd", 150, 0, 0, MS);
    uint64_t lb = hold(b, "pc", 150, 0, 60000, MS);
    uint64_t sa = req_n(R_ACQUIRE, "pd", 0)->sent, sb = req_n(R_ACQUIRE, "pc", 0)->sent;
    renew_ok_until(T0 + 2000 * MS, MS);
    struct event *ja = event_n(la, DLOCK_STATE_JEOPARDY, 0);
    struct event *jb = event_n(lb, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(ja, "no stall with the default progress deadline");
    cr_assert_not_null(jb, "no stall with the capped progress deadline");
    cr_assert_eq(ja->ev.reason, DLOCK_ESTALLED);
    cr_assert_eq(jb->ev.reason, DLOCK_ESTALLED);
    /* The first renewal tick past 300 ms (default) and past 500 ms (cap). */
    cr_assert_eq(ja->at, tick_after(sa, 150, sa + 300 * MS), "default: stalled at +%llu ms",
                 (unsigned long long)((ja->at - sa) / MS));
    cr_assert_eq(jb->at, tick_after(sb, 150, sb + 500 * MS), "cap: stalled at +%llu ms",
                 (unsigned long long)((jb->at - sb) / MS));
}

/* A touch older than the grant is a previous lease's of the same slot: no
 * progress of this one. */
Test(core, a_touch_from_before_the_grant_is_no_progress)
{
    struct tclient *a = client(1);
    run_until(T0 + 20 * MS);
    uint64_t l = hold(a, "old", 300, 0, 400, MS);
    cr_assert_eq(answer_to(1)->g.slot, 0);
    a->touched[0] = T0 + 15 * MS; /* before the grant (its acquire was sent at +20 ms) */
    renew_ok_until(T0 + 1000 * MS, MS);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j, "a stale touch kept the lease from stalling");
    cr_assert_eq(j->at, tick_after(T0 + 20 * MS, 300, T0 + 420 * MS));
}

/* ---- waiting ---- */

Test(core, a_bounded_wait_ends_at_wait_ms)
{
    struct tclient *a = client(1), *b = client(2);
    hold(a, "w", 5000, 0, 0, MS);
    uint64_t start = F.now;
    uint32_t ib = acquire(b, "w", 5000, 500, 0, 0);
    run_until(start + 500 * MS - 1);
    cr_assert_null(answer_to(ib), "the wait ended early");
    run_until(start + 500 * MS);
    refused(ib, DLOCK_ETIMEDOUT);
    cr_assert_eq(answer_to(ib)->at, start + 500 * MS);
}

Test(core, an_unanswered_acquire_is_withdrawn)
{
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "un", 5000, 0, 0, 0);
    struct req *r = pending(R_ACQUIRE, "un");
    char token[TOKEN_HEX + 1];
    memcpy(token, r->token, sizeof token);
    /* No answer from the store (the link timed out): the SET may have
     * happened all the same. */
    reply_at(r, T0 + 300 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    refused(id, DLOCK_EUNAVAIL);
    struct req *rel = req_n(R_RELEASE, "un", 0);
    cr_assert_not_null(rel, "the unanswered acquire was not withdrawn");
    cr_assert_str_eq(rel->token, token, "withdrawn with another token");
    cr_assert_not(rel->notify, "a withdrawn acquire published a release notice");
    cr_assert_eq(rel->sent, T0 + 300 * MS);
}

/* The store says another client holds it (PTTL 30 s); the fallback retry is
 * a minute off. A release notice at +500 ms sends the next acquire then. */
Test(core, a_release_notice_wakes_the_waiter)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "n", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    reply_at(pending(R_ACQUIRE, "n"), T0 + MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert_null(answer_to(id));
    /* Without a notice, the next try is when the holder's key would expire
     * (the entry's refresh comes no sooner than the fallback). */
    cr_assert_eq(core_next_due(&F.k), T0 + MS + 30001 * MS);
    run_until(T0 + 500 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "n"), 1);
    core_notice(&F.k, "n", 1, F.now);
    cr_assert_eq(req_count(R_ACQUIRE, "n"), 2, "the notice did not wake the waiter");
    cr_assert_eq(pending(R_ACQUIRE, "n")->sent, T0 + 500 * MS);
    reply(pending(R_ACQUIRE, "n"), T0 + 501 * MS, BACKEND_DONE);
    granted(id);
}

/* Until the name's subscription is confirmed (a notice came over it), a
 * waiter retries fast; then it backs off from the fast retry, at most to
 * the refresh of its waiting-hosts entry (or the cap), and when the
 * holder's key can expire it tries right after. */
Test(core, a_confirmed_subscription_slows_the_fallback_retry)
{
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "p", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    reply_at(pending(R_ACQUIRE, "p"), T0 + MS, 0, BACKEND_TAKEN, 0, 30000);
    uint64_t due = core_next_due(&F.k);
    cr_assert(due >= T0 + 101 * MS && due < T0 + 151 * MS, "unconfirmed retry at +%llu ms",
              (unsigned long long)((due - T0) / MS));
    run_until(due);
    cr_assert_eq(req_count(R_ACQUIRE, "p"), 2, "no fast retry before the confirmation");
    /* The subscription's confirmation comes while the retry is in flight. */
    core_notice(&F.k, "p", 1, F.now);
    struct req *r = pending(R_ACQUIRE, "p");
    reply_at(r, F.now + MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert_eq(req_count(R_ACQUIRE, "p"), 3, "the notice during the acquire was lost");
    /* Confirmed: the delays grow from the fast retry up to the entry's
     * refresh, half its 3 s life after the acquire that wrote it. */
    int n = back_off("p", 30000, 1499);
    cr_assert(n >= 4 && n <= 7, "%d retries to reach the refresh", n);
    r = req_n(R_ACQUIRE, "p", req_count(R_ACQUIRE, "p") - 1);
    cr_assert_eq(retry_due("p"), r->sent + 1500 * MS, "the refresh bounds the backoff");
    run_until(r->sent + 1500 * MS);
    /* The holder's key expires in 200 ms: tried right after, no notice
     * comes for an expiry. */
    r = pending(R_ACQUIRE, "p");
    reply_at(r, F.now + MS, 0, BACKEND_TAKEN, 0, 200);
    cr_assert_eq(core_next_due(&F.k), F.now + 201 * MS);
    run_until(F.now + 201 * MS);
    reply(pending(R_ACQUIRE, "p"), F.now + MS, BACKEND_DONE);
    granted(id);
}

/* Where the store binds entries to the agent's keep-alive key, a waiting
 * acquire asks for a bound entry of the long life, the key is set ahead of
 * it and every second after while such an entry may live, and a confirmed
 * waiter's guard comes at most every 15 s (retry_max_ms 3000 x 5): no
 * acquire refreshes the entry in between. */
Test(core, bound_entries_are_kept_by_one_keepalive_not_by_retries)
{
    F.backend.ops = &fb_bound_ops;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "b", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    struct req *r = pending(R_ACQUIRE, "b");
    cr_assert(r->bound && r->waiting);
    cr_assert_eq(r->want_ms, BACKEND_WAIT_BOUND_MAX_MS);
    cr_assert_eq(F.nkeepalive, 1, "no keep-alive ahead of the first bound entry");
    cr_assert_eq(F.keepalive[0], r->sent);
    reply_at(r, T0 + MS, 0, BACKEND_TAKEN, 0, 600000);
    uint64_t due = core_next_due(&F.k);
    cr_assert(due <= T0 + 151 * MS, "unconfirmed: the fast retry as before");
    run_until(due);
    core_notice(&F.k, "b", 1, F.now); /* the subscription's confirmation */
    /* Confirmed: the retries back off from the fast one to the long guard,
     * with no refresh of the entry between them. */
    int n = back_off("b", 600000, 11250);
    cr_assert(n >= 7 && n <= 10, "%d retries to reach the guard", n);
    uint64_t sent = req_n(R_ACQUIRE, "b", req_count(R_ACQUIRE, "b") - 1)->sent;
    uint64_t guard = retry_due("b");
    cr_assert_leq(guard, sent + 15001 * MS, "the guard is at most 15 s");
    n = req_count(R_ACQUIRE, "b");
    int k0 = F.nkeepalive;
    run_until(guard - MS);
    cr_assert_eq(req_count(R_ACQUIRE, "b"), n, "a retry before the guard");
    cr_assert_geq(F.nkeepalive - k0, 10, "%d keep-alives in the guard's wait", F.nkeepalive - k0);
    for (int i = 1; i < F.nkeepalive; i++)
        cr_assert_eq(F.keepalive[i] - F.keepalive[i - 1], BACKEND_KEEPALIVE_EVERY_MS * MS);
    run_until(guard);
    cr_assert_eq(req_count(R_ACQUIRE, "b"), n + 1, "no guard retry");
    /* The waiter gives up: its entry leaves; the key is kept while an entry
     * the last acquire wrote could live (a lost HDEL), then no more. */
    uint64_t last = pending(R_ACQUIRE, "b")->sent;
    reply_at(pending(R_ACQUIRE, "b"), F.now + MS, 0, BACKEND_TAKEN, 0, 600000);
    core_cancel(&F.k, &a->cc, id, F.now);
    refused(id, DLOCK_ECANCELED);
    run_until(last + (BACKEND_WAIT_BOUND_MAX_MS + 5000) * (uint64_t)MS);
    cr_assert_lt(F.keepalive[F.nkeepalive - 1], last + BACKEND_WAIT_BOUND_MAX_MS * (uint64_t)MS);
    cr_assert_geq(F.keepalive[F.nkeepalive - 1],
                  last + (BACKEND_WAIT_BOUND_MAX_MS - BACKEND_KEEPALIVE_EVERY_MS) * (uint64_t)MS);
    cr_assert_eq(core_next_due(&F.k), 0, "a timer is left");
}

/* The long guard of bound entries counts on the notice link: while it is
 * down no notice comes, so a confirmed waiter behind a renewing holder
 * tries again at once (not at its guard, up to 15 s away) and then within
 * retry_max_ms, until the link is set up anew. */
Test(core, a_notice_link_down_keeps_the_guard_short)
{
    F.backend.ops = &fb_bound_ops;
    struct tclient *a = client(1);
    acquire(a, "g", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    reply_at(pending(R_ACQUIRE, "g"), T0 + MS, 0, BACKEND_TAKEN, 0, 600000);
    core_notice(&F.k, "g", 1, F.now); /* the subscription's confirmation */
    back_off("g", 600000, 11250);
    int n = req_count(R_ACQUIRE, "g");
    run_until(F.now + 5000 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "g"), n, "confirmed, yet retried within 5 s");
    struct req *r;
    /* The notice link goes down: the retry comes now, not at the guard. */
    core_unsubscribed(&F.k, F.now);
    run_until(F.now);
    cr_assert_eq(req_count(R_ACQUIRE, "g"), n + 1, "the guarded waiter did not try again");
    r = pending(R_ACQUIRE, "g");
    reply_at(r, r->sent + MS, 0, BACKEND_TAKEN, 0, 600000);
    uint64_t from = F.now;
    run_until(from + 3000 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "g"), n + 2, "no retry within retry_max_ms, link down");
    r = pending(R_ACQUIRE, "g");
    reply_at(r, r->sent + MS, 0, BACKEND_TAKEN, 0, 600000);
    /* Set up anew: every waiter tries again, fast until confirmed, then
     * the long guard again. */
    core_resubscribed(&F.k, F.now);
    r = pending(R_ACQUIRE, "g");
    reply_at(r, r->sent + MS, 0, BACKEND_TAKEN, 0, 600000);
    core_notice(&F.k, "g", 1, F.now);
    back_off("g", 600000, 11250);
    n = req_count(R_ACQUIRE, "g");
    run_until(F.now + 11000 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "g"), n, "the guard stayed short after the link came back");
}

/* Without keep-alives (Redis Cluster, quorum mode), entries are refreshed
 * per name as before and nothing asks for a bound entry. */
Test(core, stores_without_keepalive_refresh_entries_per_name)
{
    struct tclient *a = client(1);
    acquire(a, "c", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    struct req *r = pending(R_ACQUIRE, "c");
    cr_assert(!r->bound);
    cr_assert_eq(r->want_ms, BACKEND_WAIT_ENTRY_MAX_MS);
    cr_assert_eq(F.nkeepalive, 0);
}

/* A subscription the store forgot (a slot that moved) is no longer
 * confirmed: the waiters try again at once, and then fast until a notice
 * comes over the new one. */
Test(core, a_forgotten_subscription_retries_fast_until_confirmed_again)
{
    struct tclient *a = client(1);
    acquire(a, "u", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    reply_at(pending(R_ACQUIRE, "u"), T0 + MS, 0, BACKEND_TAKEN, 0, 30000);
    core_notice(&F.k, "u", 1, F.now);
    cr_assert_eq(req_count(R_ACQUIRE, "u"), 2);
    back_off("u", 30000, 1000);
    cr_assert_gt(retry_due("u"), F.now + 1000 * MS, "confirmed, yet a fast retry");
    run_until(F.now + 10 * MS);
    int n = req_count(R_ACQUIRE, "u");
    core_unwatched(&F.k, "u", 1, F.now);
    cr_assert_eq(req_count(R_ACQUIRE, "u"), n + 1, "the waiter did not try again at once");
    struct req *r = pending(R_ACQUIRE, "u");
    reply_at(r, r->sent + MS, 0, BACKEND_TAKEN, 0, 30000);
    uint64_t due = core_next_due(&F.k);
    cr_assert(due >= F.now + 100 * MS && due < F.now + 150 * MS,
              "unconfirmed again, yet the retry is at +%llu ms",
              (unsigned long long)((due - F.now) / MS));
}

/* A notice during the acquire: its "taken" may have raced the release, so it
 * is tried again at once. */
Test(core, a_notice_while_acquiring_retries_at_once)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "m", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    run_until(T0 + MS);
    core_notice(&F.k, "m", 1, F.now);
    cr_assert_eq(req_count(R_ACQUIRE, "m"), 1);
    reply_at(pending(R_ACQUIRE, "m"), T0 + 2 * MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert_eq(req_count(R_ACQUIRE, "m"), 2, "not retried after a missed notice");
    cr_assert_eq(pending(R_ACQUIRE, "m")->sent, T0 + 2 * MS);
    reply(pending(R_ACQUIRE, "m"), T0 + 3 * MS, BACKEND_DONE);
    granted(id);
}

/* Whether the core listens to name's release notices now, by the last
 * change it asked for. */
static bool watching(const char *name)
{
    for (int i = F.nwatch - 1; i >= 0; i--)
        if (strcmp(F.watch[i].name, name) == 0)
            return F.watch[i].on;
    return false;
}

static int watch_calls(const char *name)
{
    int n = 0;
    for (int i = 0; i < F.nwatch; i++)
        n += strcmp(F.watch[i].name, name) == 0;
    return n;
}

/* The core listens to a name's notices from its first "taken" answer while
 * waiters remain, once, and no longer when the last waiter leaves; a grant
 * or a try-once never makes it listen. The confirmation of the
 * subscription comes as a notice: the waiter tries again at once (a
 * release may have come between the answer and the subscription). */
Test(core, a_waiter_listens_from_the_taken_answer_until_it_leaves)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1);
    uint64_t lease = hold(a, "free", 5000, 0, 0, MS);
    cr_assert_eq(watch_calls("free"), 0, "a grant made the core listen");
    release(a, lease);
    uint32_t t1 = acquire(a, "busy", 5000, 0, 0, 0);
    reply_at(pending(R_ACQUIRE, "busy"), F.now + MS, 0, BACKEND_TAKEN, 0, 30000);
    refused(t1, DLOCK_EBUSY);
    cr_assert_eq(watch_calls("busy"), 0, "a try-once made the core listen");

    uint32_t id = acquire(a, "w", 5000, 2000, 0, 0);
    uint64_t start = F.now;
    reply_at(pending(R_ACQUIRE, "w"), start + MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert(watching("w"));
    core_notice(&F.k, "w", 1, start + 2 * MS); /* the confirmation */
    cr_assert_eq(req_count(R_ACQUIRE, "w"), 2, "the confirmation did not wake the waiter");
    reply_at(pending(R_ACQUIRE, "w"), start + 3 * MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert_eq(watch_calls("w"), 1, "asked to listen twice");
    run_until(start + 2000 * MS);
    refused(id, DLOCK_ETIMEDOUT);
    cr_assert_not(watching("w"), "still listening without a waiter");
    cr_assert_eq(watch_calls("w"), 2);
}

/* A waiter that comes after the last one left, while the lock still waits
 * for the retry of that one's "taken" answer, is not tried before the retry:
 * the core listens again for it, and the confirmation tries at once. */
Test(core, a_new_waiter_behind_a_pending_retry_listens_again)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1), *b = client(2);
    uint32_t ia = acquire(a, "r", 5000, 500, 0, 0);
    uint64_t start = F.now;
    reply_at(pending(R_ACQUIRE, "r"), start + MS, 0, BACKEND_TAKEN, 0, 30000);
    run_until(start + 500 * MS);
    refused(ia, DLOCK_ETIMEDOUT);
    cr_assert_not(watching("r"));
    run_until(start + 600 * MS);
    uint32_t ib = acquire(b, "r", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    cr_assert_eq(req_count(R_ACQUIRE, "r"), 1, "tried before the retry");
    cr_assert(watching("r"), "the new waiter would miss the release");
    core_notice(&F.k, "r", 1, start + 601 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "r"), 2, "the confirmation did not wake the waiter");
    reply(pending(R_ACQUIRE, "r"), start + 602 * MS, BACKEND_DONE);
    granted(ib);
    cr_assert_not(watching("r"));
}

/* The store keeps no list of the names asked for: when its subscriptions
 * were lost and set up anew (on_subscribed) the core asks again for each
 * name it listens to, and every waiter tries again; when it forgot one name
 * (on_unwatched) the core asks again for that one, whose waiters try again.
 * A name nobody waits for any more is not asked for. */
Test(core, the_core_asks_again_for_the_names_the_store_forgot)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1);
    uint32_t ix = acquire(a, "x", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    uint32_t iy = acquire(a, "y", 5000, 1000, 0, 0);
    uint64_t start = F.now;
    reply_at(pending(R_ACQUIRE, "x"), start + MS, 0, BACKEND_TAKEN, 0, 30000);
    reply_at(pending(R_ACQUIRE, "y"), start + MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert(watching("x") && watching("y"));
    run_until(start + 1000 * MS);
    refused(iy, DLOCK_ETIMEDOUT);
    cr_assert_not(watching("y"));
    int wx = watch_calls("x"), wy = watch_calls("y");

    core_resubscribed(&F.k, start + 1001 * MS);
    cr_assert_eq(watch_calls("x"), wx + 1, "x not asked for again");
    cr_assert(watching("x"));
    cr_assert_eq(watch_calls("y"), wy, "y asked for without a waiter");
    cr_assert_eq(req_count(R_ACQUIRE, "x"), 2, "the waiter did not try again");
    reply_at(pending(R_ACQUIRE, "x"), start + 1002 * MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert_eq(watch_calls("x"), wx + 1, "asked for twice");

    core_unwatched(&F.k, "x", 1, start + 1003 * MS);
    cr_assert_eq(watch_calls("x"), wx + 2, "x not asked for again");
    cr_assert(watching("x"));
    cr_assert_eq(req_count(R_ACQUIRE, "x"), 3, "the waiter did not try again");
    core_unwatched(&F.k, "y", 1, start + 1003 * MS); /* no such lock now */
    cr_assert_eq(watch_calls("y"), wy);
    reply(pending(R_ACQUIRE, "x"), start + 1004 * MS, BACKEND_DONE);
    granted(ix);
    cr_assert_not(watching("x"));
}

/* ---- failover doubt ---- */

/* The page's last word on lease l. */
static const struct pagew *page_of(uint64_t l)
{
    for (int i = F.npw - 1; i >= 0; i--)
        if (F.pw[i].lease_id == l)
            return &F.pw[i];
    cr_assert_fail("lease %llx never written to its page", (unsigned long long)l);
    return NULL;
}

static bool every_name(void *farg, const char *name, size_t len)
{
    return true;
}

static bool name_is_a(void *farg, const char *name, size_t len)
{
    return len == 1 && name[0] == 'a';
}

/* A failover: the lease shows invalid at once, JEOPARDY with
 * DLOCK_EFAILOVER, and is renewed at once; the renewal finding the key makes
 * it HELD with a deadline from that renewal. */
Test(core, a_failover_puts_a_lease_in_doubt_until_a_renewal_confirms_it)
{
    struct tclient *c = client(1);
    uint64_t l = hold(c, "a", 3000, 0, 0, MS);
    run_until(T0 + 100 * MS);
    core_doubt(&F.k, every_name, NULL, F.now);
    struct event *j = event_n(l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j);
    cr_assert_eq(j->ev.reason, DLOCK_EFAILOVER);
    cr_assert_eq(page_of(l)->deadline, T0 + 100 * MS, "the page still shows the lease valid");
    cr_assert_eq(j->ev.deadline_ns, T0 + 100 * MS);
    cr_assert_eq(F.k.stats.doubts, 1);
    run_until(F.now);
    struct req *r = pending(R_RENEW, "a");
    cr_assert_eq(r->sent, T0 + 100 * MS, "not renewed at once");
    reply(r, T0 + 103 * MS, BACKEND_DONE);
    struct event *h = event_n(l, DLOCK_STATE_HELD, 0);
    cr_assert_not_null(h, "not HELD after the key was confirmed");
    cr_assert_eq(page_of(l)->deadline, lease_deadline(T0 + 100 * MS, 3000));
    cr_assert_eq(page_of(l)->state, DLOCK_STATE_HELD);
}

/* The renewal finds the key gone on the new master: LOST at once. Leases on
 * names the failover did not touch are left alone. */
Test(core, a_lease_whose_key_the_failover_lost_is_lost)
{
    struct tclient *c = client(1);
    uint64_t la = hold(c, "a", 3000, 0, 0, MS);
    uint64_t lb = hold(c, "b", 3000, 0, 0, MS);
    run_until(T0 + 100 * MS);
    core_doubt(&F.k, name_is_a, NULL, F.now);
    run_until(F.now);
    cr_assert_null(event_n(lb, DLOCK_STATE_JEOPARDY, 0), "a lease the failover did not touch");
    cr_assert_eq(req_count(R_RENEW, "b"), 0);
    reply(pending(R_RENEW, "a"), T0 + 102 * MS, BACKEND_NOT_OURS);
    struct event *lost = event_n(la, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(lost);
    cr_assert_eq(lost->ev.reason, DLOCK_ELOST);
    cr_assert_null(event_n(la, DLOCK_STATE_HELD, 0));
}

/* A renewal already in flight when the failover became known confirms
 * nothing, even if it says the key is there: another goes out at once. */
Test(core, a_renewal_sent_before_the_failover_confirms_nothing)
{
    struct tclient *c = client(1);
    uint64_t l = hold(c, "a", 3000, 0, 0, MS);
    uint64_t due = lease_next_renew(T0, 3000, F.cfg.renew_fraction);
    run_until(due);
    struct req *old = pending(R_RENEW, "a");
    core_doubt(&F.k, NULL, NULL, due + MS);
    F.now = due + MS;
    reply(old, due + 2 * MS, BACKEND_DONE);
    cr_assert_null(event_n(l, DLOCK_STATE_HELD, 0), "confirmed by the old master's word");
    cr_assert_eq(page_of(l)->deadline, due + MS);
    run_until(F.now);
    struct req *again = pending(R_RENEW, "a");
    cr_assert_eq(again->sent, due + 2 * MS);
    reply(again, due + 4 * MS, BACKEND_DONE);
    cr_assert_not_null(event_n(l, DLOCK_STATE_HELD, 0));
    cr_assert_eq(page_of(l)->deadline, lease_deadline(due + 2 * MS, 3000));
}

/* A renewal after a failover that found no link is sent again as soon as
 * the store is back, not at its next retry. */
Test(core, a_lease_in_doubt_is_renewed_when_the_store_is_back)
{
    struct tclient *c = client(1);
    uint64_t l = hold(c, "a", 3000, 0, 0, MS);
    run_until(T0 + 100 * MS);
    core_doubt(&F.k, NULL, NULL, F.now);
    run_until(F.now);
    reply_at(pending(R_RENEW, "a"), T0 + 101 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    cr_assert_gt(core_next_due(&F.k), T0 + 110 * MS, "the retry is not immediate by itself");
    core_store_ready(&F.k, T0 + 110 * MS);
    F.now = T0 + 110 * MS;
    run_until(F.now);
    struct req *r = pending(R_RENEW, "a");
    cr_assert_eq(r->sent, T0 + 110 * MS);
    reply(r, T0 + 111 * MS, BACKEND_DONE);
    cr_assert_not_null(event_n(l, DLOCK_STATE_HELD, 0));
}

/* Renewals that fail after a failover keep the lease invalid, and it is
 * LOST at its deadline. */
Test(core, a_lease_in_doubt_that_cannot_be_renewed_is_lost_at_its_deadline)
{
    struct tclient *c = client(1);
    uint64_t l = hold(c, "a", 1000, 0, 0, MS);
    uint64_t deadline = lease_deadline(T0, 1000);
    run_until(T0 + 50 * MS);
    core_doubt(&F.k, NULL, NULL, F.now);
    while (!event_n(l, DLOCK_STATE_LOST, 0)) {
        run_until(core_next_due(&F.k));
        int n = req_count(R_RENEW, "a");
        struct req *r = n ? req_n(R_RENEW, "a", n - 1) : NULL;
        if (r && !r->answered)
            reply_at(r, F.now + MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
        cr_assert_eq(page_of(l)->deadline, T0 + 50 * MS, "shown valid while in doubt");
        cr_assert_leq(F.now, deadline + MS);
    }
    cr_assert_null(event_n(l, DLOCK_STATE_HELD, 0));
    cr_assert_geq(event_n(l, DLOCK_STATE_LOST, 0)->at, deadline);
}

/* Without a notice the waiter tries again right after the holder's key
 * expires (a plain client's SET PX 700), well before the fallback. */
Test(core, a_waiter_retries_when_the_holders_key_expires)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "exp", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    reply_at(pending(R_ACQUIRE, "exp"), T0 + MS, 0, BACKEND_TAKEN, 0, 700);
    run_until(T0 + MS + 701 * MS - 1);
    cr_assert_eq(req_count(R_ACQUIRE, "exp"), 1);
    run_until(T0 + MS + 701 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "exp"), 2, "no retry at the holder's PTTL");
    reply(pending(R_ACQUIRE, "exp"), F.now + MS, BACKEND_DONE);
    granted(id);
}

/* A client gone: every lease released at once, and the next waiter's
 * acquire right behind. */
Test(core, a_client_gone_releases_everything_at_once)
{
    struct tclient *a = client(1), *b = client(2);
    hold(a, "g1", 30000, 0, 0, MS);
    hold(a, "g2", 30000, 0, 0, MS);
    uint32_t ib = acquire(b, "g1", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    run_until(T0 + 100 * MS);
    core_client_drop(&F.k, &a->cc, 0, F.now);
    cr_assert_eq(req_count(R_RELEASE, "g1"), 1);
    cr_assert_eq(req_count(R_RELEASE, "g2"), 1);
    cr_assert_eq(req_n(R_RELEASE, "g1", 0)->sent, T0 + 100 * MS);
    cr_assert_eq(req_n(R_RELEASE, "g2", 0)->sent, T0 + 100 * MS);
    cr_assert_eq(F.nev, 0, "a gone client was sent events");
    struct req *r = pending(R_ACQUIRE, "g1");
    cr_assert_eq(r->sent, T0 + 100 * MS);
    reply(r, T0 + 101 * MS, BACKEND_DONE);
    granted(ib);
}

/* ---- outages ---- */

/* Answers each acquire of name with err as soon as it is sent, up to t. */
static void fail_acquires_until(const char *name, int err, uint64_t t)
{
    for (;;) {
        int n = req_count(R_ACQUIRE, name);
        struct req *last = n ? req_n(R_ACQUIRE, name, n - 1) : NULL;
        if (last && !last->answered) {
            reply_at(last, last->sent, err, BACKEND_DONE, 0, 0);
            continue;
        }
        uint64_t due = core_next_due(&F.k);
        if (!due || due > t)
            break;
        run_until(due);
    }
    run_until(t);
}

Test(core, a_try_once_fails_at_once_in_an_outage)
{
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "o", 5000, 0, 0, 0);
    reply_at(pending(R_ACQUIRE, "o"), T0 + 5 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    refused(id, DLOCK_EUNAVAIL);
    cr_assert_eq(answer_to(id)->at, T0 + 5 * MS);
    /* A store that refuses at once (link down) too. */
    F.refuse = DLOCK_EUNAVAIL;
    uint32_t id2 = acquire(a, "o2", 5000, 0, 0, 0);
    refused(id2, DLOCK_EUNAVAIL);
}

/* With no ceiling (the default), a waiter that may wait for ever rides out
 * an outage however long it lasts, retrying every retry_fallback_ms, and is
 * granted once the store answers again. */
Test(core, a_waiter_for_ever_rides_out_an_outage_of_any_length)
{
    cr_assert_eq(F.cfg.outage_wait_ms, CONFIG_OUTAGE_NONE, "the default has a ceiling");
    F.cfg.retry_fallback_ms = 1000;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "long", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    fail_acquires_until("long", DLOCK_EUNAVAIL, T0 + 300000 * MS);
    cr_assert_null(answer_to(id), "the waiter gave up during a 5-minute outage");
    int tries = req_count(R_ACQUIRE, "long");
    cr_assert(tries >= 299 && tries <= 301, "%d tries in 300 s, every second", tries);
    core_store_ready(&F.k, F.now);
    reply(pending(R_ACQUIRE, "long"), F.now + MS, BACKEND_DONE);
    granted(id);
}

/* With a ceiling, a waiter that may wait for ever rides out an outage of up
 * to outage_wait_ms, retrying every retry_fallback_ms, and fails with the
 * outage's error when it is over. */
Test(core, a_waiter_rides_out_an_outage_until_outage_wait_ms)
{
    F.cfg.outage_wait_ms = 2000;
    F.cfg.retry_fallback_ms = 100;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "ride", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    fail_acquires_until("ride", DLOCK_EUNAVAIL, T0 + 2000 * MS - 1);
    cr_assert_null(answer_to(id), "the waiter failed during the grace");
    int tries = req_count(R_ACQUIRE, "ride");
    cr_assert(tries >= 19 && tries <= 21, "%d tries in 2 s, every 100 ms", tries);
    fail_acquires_until("ride", DLOCK_EUNAVAIL, T0 + 2000 * MS);
    refused(id, DLOCK_EUNAVAIL);
    cr_assert_eq(answer_to(id)->at, T0 + 2000 * MS, "failed at +%llu ms, outage_wait_ms 2000",
                 (unsigned long long)((answer_to(id)->at - T0) / MS));
}

Test(core, a_waiter_is_granted_when_the_store_is_back_within_the_grace)
{
    F.cfg.outage_wait_ms = 4000;
    F.cfg.retry_fallback_ms = 60000; /* only the store's return wakes it */
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "back", 5000, DLOCK_WAIT_FOREVER, 0, 0);
    fail_acquires_until("back", DLOCK_ENOQUORUM, T0 + 1500 * MS);
    cr_assert_null(answer_to(id));
    cr_assert_eq(req_count(R_ACQUIRE, "back"), 1, "retried before the store was back");
    core_store_ready(&F.k, F.now);
    struct req *r = pending(R_ACQUIRE, "back");
    cr_assert_eq(r->sent, T0 + 1500 * MS, "not retried when the store came back");
    reply(r, F.now + MS, BACKEND_DONE);
    granted(id);
}

/* A bounded wait that runs out during an outage, with no local holder, ends
 * with the outage's error: the lock may well be free. */
Test(core, a_wait_that_ends_in_an_outage_says_so)
{
    F.cfg.outage_wait_ms = 60000;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "end", 5000, 1000, 0, 0);
    fail_acquires_until("end", DLOCK_EUNAVAIL, T0 + 1000 * MS);
    refused(id, DLOCK_EUNAVAIL);
    cr_assert_eq(answer_to(id)->at, T0 + 1000 * MS);
}

/* ---- cohort handoff ---- */

/* a holds "x" from the store (fence 100, TTL 3 s, asked at T0); the acquire
 * reserved the cohort's tokens. */
static uint64_t cohort_grant(struct tclient *a, uint32_t handoffs, uint64_t *deadline)
{
    F.cfg.cohort_handoffs = handoffs;
    uint32_t ia = acquire(a, "x", 3000, DLOCK_WAIT_FOREVER, 0, 0);
    struct req *r = pending(R_ACQUIRE, "x");
    cr_assert_eq(r->block, handoffs, "the acquire reserved %u tokens, not %u", r->block, handoffs);
    cr_assert(r->waiting, "a waiting acquire does not join the waiting-hosts record");
    reply_at(r, T0 + MS, 0, BACKEND_DONE, 100, 0);
    uint64_t la = granted(ia);
    if (deadline)
        *deadline = answer_to(ia)->g.deadline_ns;
    return la;
}

Test(core, handoff_passes_the_key_to_a_local_waiter_without_the_store)
{
    struct tclient *a = client(1), *b = client(2), *c = client(3);
    uint64_t deadline;
    uint64_t la = cohort_grant(a, 2, &deadline);
    uint32_t ib = acquire(b, "x", 3000, DLOCK_WAIT_FOREVER, 0, 0);
    uint32_t ic = acquire(c, "x", 3000, DLOCK_WAIT_FOREVER, 0, 0);
    run_until(T0 + 10 * MS);
    int before = F.nrq;
    release(a, la);
    uint64_t lb = granted(ib);
    cr_assert_eq(F.nrq, before, "a handoff sent something to the store");
    cr_assert_eq(answer_to(ib)->g.fence, 101, "handoff token %" PRIu64, answer_to(ib)->g.fence);
    cr_assert_leq(answer_to(ib)->g.deadline_ns, deadline,
                  "the handoff outlives the key's validity");
    core_flush(&F.k, F.now);
    cr_assert_eq(F.nrq, before, "the key handed over was released");
    release(b, lb);
    uint64_t lc = granted(ic);
    cr_assert_eq(answer_to(ic)->g.fence, 102);
    /* The same key, renewed under its token when due. */
    run_until(tick_after(T0, 3000, F.now));
    struct req *rn = pending(R_RENEW, "x");
    cr_assert_str_eq(rn->token, req_n(R_ACQUIRE, "x", 0)->token);
    reply(rn, F.now + MS, BACKEND_DONE);
    /* Two handoffs were reserved: the next release goes to the store, and
     * so does the next acquire. */
    uint32_t ia = acquire(a, "x", 3000, DLOCK_WAIT_FOREVER, 0, 0);
    before = F.nrq;
    release(c, lc);
    cr_assert_null(answer_to(ia), "a third handoff");
    cr_assert_eq(F.rq[before].kind, R_RELEASE);
    cr_assert_eq(F.rq[before + 1].kind, R_ACQUIRE);
    cr_assert_eq(F.k.stats.handoffs, 2);
}

Test(core, a_key_released_with_nobody_waiting_is_kept_until_the_turn_ends)
{
    struct tclient *a = client(1), *b = client(2);
    uint64_t la = cohort_grant(a, 8, NULL);
    int before = F.nrq;
    release(a, la);
    cr_assert_eq(F.nrq, before, "released before the end of the turn");
    /* An acquire in the same turn takes the key over, even a try-once. */
    uint32_t ib = acquire(b, "x", 3000, 0, 0, 0);
    uint64_t lb = granted(ib);
    cr_assert_eq(answer_to(ib)->g.fence, 101);
    cr_assert_eq(F.nrq, before);
    release(b, lb);
    core_flush(&F.k, F.now);
    cr_assert_eq(F.nrq, before + 1);
    cr_assert_eq(F.rq[before].kind, R_RELEASE);
    cr_assert(F.rq[before].notify);
    cr_assert_str_eq(F.rq[before].token, req_n(R_ACQUIRE, "x", 0)->token);
    /* After the turn: a new acquire goes to the store. */
    acquire(b, "x", 3000, 0, 0, 0);
    cr_assert_eq(req_count(R_ACQUIRE, "x"), 2);
    cr_assert_not(pending(R_ACQUIRE, "x")->waiting, "a try-once acquire joins the record");
}

Test(core, no_handoff_after_the_cohort_time_or_in_jeopardy_or_doubt)
{
    struct tclient *a = client(1), *b = client(2);
    uint64_t la = cohort_grant(a, 8, NULL);
    uint32_t ib = acquire(b, "x", 3000, DLOCK_WAIT_FOREVER, 0, 0);
    /* cohort_ms after the acquire was sent: the store's turn. */
    run_until(T0 + (uint64_t)F.cfg.cohort_ms * MS);
    int before = F.nrq;
    release(a, la);
    cr_assert_null(answer_to(ib));
    cr_assert_eq(F.rq[before].kind, R_RELEASE);
    reply_at(pending(R_ACQUIRE, "x"), F.now + MS, 0, BACKEND_DONE, 200, 0);
    uint64_t lb = granted(ib);

    /* A renewal that failed: no handoff from a lease in jeopardy. */
    struct tclient *c = client(3);
    uint32_t ic = acquire(c, "x", 3000, DLOCK_WAIT_FOREVER, 0, 0);
    run_until(tick_after(F.now - MS, 3000, F.now));
    reply_at(pending(R_RENEW, "x"), F.now + MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    before = F.nrq;
    release(b, lb);
    cr_assert_null(answer_to(ic), "handed over from a lease in jeopardy");
    cr_assert_eq(F.rq[before].kind, R_RELEASE);
    reply_at(pending(R_ACQUIRE, "x"), F.now + MS, 0, BACKEND_DONE, 300, 0);
    uint64_t lc = granted(ic);

    /* A failover puts it in doubt: none either. */
    struct tclient *d = client(4);
    uint32_t id = acquire(d, "x", 3000, DLOCK_WAIT_FOREVER, 0, 0);
    core_doubt(&F.k, NULL, NULL, F.now);
    before = F.nrq;
    release(c, lc);
    cr_assert_null(answer_to(id), "handed over from a lease in doubt");
    cr_assert_eq(F.rq[before].kind, R_RELEASE);
}

/* ---- lock kinds ---- */

/* An acquire of a kind from c at now; its request id. */
static uint32_t acquire_kind(struct tclient *c, const char *name, enum lock_kind kind,
                             uint32_t permits, uint32_t flags, uint64_t owner, int64_t wait_ms)
{
    struct wire_acquire m = {.ttl_ms = 10000,
                             .wait_ms = wait_ms,
                             .flags = flags,
                             .kind = (uint8_t)kind,
                             .permits = permits,
                             .owner = owner,
                             .name = name,
                             .name_len = (uint16_t)strlen(name)};
    uint32_t id = F.next_id++;
    core_acquire(&F.k, &c->cc, id, &m, F.now);
    return id;
}

static const struct answer *granted_answer(uint32_t req_id)
{
    granted(req_id);
    return answer_to(req_id);
}

static void ok_answer(uint32_t req_id)
{
    struct answer *a = answer_to(req_id);
    cr_assert_not_null(a, "request %u not answered", req_id);
    cr_assert_eq(a->kind, A_OK, "request %u: kind %d code %d (%s)", req_id, a->kind, a->code,
                 a->msg);
}

Test(core, a_reentrant_acquire_by_the_owner_gets_the_same_lease_and_counts_its_holds)
{
    F.backend.kinds = BACKEND_KIND(LOCK_SHARED);
    struct tclient *a = client(1), *b = client(2);
    uint32_t first = acquire_kind(a, "re", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 7, -1);
    reply(pending(R_ACQUIRE, "re"), F.now + 1 * MS, BACKEND_DONE);
    const struct answer *g1 = granted_answer(first);
    uint32_t again = acquire_kind(a, "re", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 7, 0);
    const struct answer *g2 = granted_answer(again);
    cr_assert_eq(g2->g.lease_id, g1->g.lease_id, "re-entry gave another lease");
    cr_assert_eq(g2->g.fence, g1->g.fence, "re-entry changed the fencing token");
    cr_assert_eq(g2->g.slot, g1->g.slot);
    cr_assert_eq(req_count(R_ACQUIRE, "re"), 1, "re-entry went to the store");
    /* Without the flag the owner's own name is DLOCK_EHELD, as ever. */
    refused(acquire_kind(a, "re", LOCK_EXCLUSIVE, 0, 0, 7, 0), DLOCK_EHELD);
    /* Re-entry keeps the kind. */
    refused(acquire_kind(a, "re", LOCK_SHARED, 0, WIRE_ACQ_REENTRANT, 7, 0), DLOCK_EHELD);
    uint32_t waiting = acquire_kind(b, "re", LOCK_EXCLUSIVE, 0, 0, 0, -1);
    /* The first release lowers the count: nothing goes to the store. */
    ok_answer(release(a, g1->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "re"), 0, "released at the first of two releases");
    cr_assert_null(answer_to(waiting), "a waiter was served while the holder still held");
    /* The last one releases it, and the waiter goes to the store. */
    ok_answer(release(a, g1->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "re"), 1);
    cr_assert_eq(req_count(R_ACQUIRE, "re"), 2);
    refused(release(a, g1->g.lease_id), DLOCK_ENOTFOUND);
}

/* A name in Redisson's format shows a lease's holds as the key's hold
 * count: each re-entry and each release but the last sends a renewal with
 * the new count at once; one that comes while a renewal is in flight is
 * sent right after it. dlock's own format sends nothing. */
Test(core, holds_reach_a_redisson_key_at_once)
{
    cr_assert_eq(formats_add(&F.cfg.formats, KEY_FORMAT_REDISSON, "r*"), 0);
    F.backend.kinds = BACKEND_KIND(LOCK_SHARED);
    struct tclient *a = client(1);
    uint32_t first = acquire_kind(a, "re", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 7, -1);
    reply(pending(R_ACQUIRE, "re"), F.now + 1 * MS, BACKEND_DONE);
    const struct answer *g = granted_answer(first);
    uint64_t lease = g->g.lease_id;
    granted(acquire_kind(a, "re", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 7, 0));
    run_until(F.now + 1);
    cr_assert_eq(req_count(R_RENEW, "re"), 1, "no renewal for the new count");
    struct req *r = pending(R_RENEW, "re");
    cr_assert_eq(r->holds, 2);
    /* A third hold while that renewal is in flight: sent right after it. */
    granted(acquire_kind(a, "re", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 7, 0));
    run_until(F.now + 1);
    cr_assert_eq(req_count(R_RENEW, "re"), 1, "two renewals in flight");
    reply(r, F.now + 1 * MS, BACKEND_DONE);
    run_until(F.now + 1);
    cr_assert_eq(req_count(R_RENEW, "re"), 2);
    r = pending(R_RENEW, "re");
    cr_assert_eq(r->holds, 3);
    reply(r, F.now + 1 * MS, BACKEND_DONE);
    /* A release but the last: the count goes down at once. */
    ok_answer(release(a, lease));
    run_until(F.now + 1);
    cr_assert_eq(req_count(R_RENEW, "re"), 3);
    cr_assert_eq(pending(R_RENEW, "re")->holds, 2);
    /* Kinds that the format does not carry are refused, naming it. */
    uint32_t sh = acquire_kind(client(2), "rs", LOCK_SHARED, 0, 0, 0, 0);
    refused(sh, DLOCK_EINVAL);
    cr_assert_not_null(strstr(answer_to(sh)->msg, "Redisson"), "%s", answer_to(sh)->msg);

    /* dlock's format: re-entry stays in the agent. */
    uint32_t d = acquire_kind(a, "dl", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 7, -1);
    reply(pending(R_ACQUIRE, "dl"), F.now + 1 * MS, BACKEND_DONE);
    granted(d);
    granted(acquire_kind(a, "dl", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 7, 0));
    run_until(F.now + 1);
    cr_assert_eq(req_count(R_RENEW, "dl"), 0);
}

/* The answer to a release whose message `listeners` clients heard. */
static void reply_heard(struct req *r, uint64_t at, uint32_t listeners)
{
    cr_assert_not(r->answered, "request answered twice");
    run_until(at);
    r->answered = true;
    struct backend_result res = {.outcome = BACKEND_DONE, .listeners = listeners, .at = F.now};
    r->cb(r->arg, &res);
}

/* A name in Redisson's format whose release others heard (Redisson's
 * waiters, in no record of ours): the next local acquire after a local
 * release waits a moment, ended by the other side's release message or by
 * the moment; no cohort handoff keeps the key meanwhile. When nobody else
 * listened, the next acquire goes at once. */
Test(core, a_release_others_heard_lets_them_go_first)
{
    cr_assert_eq(formats_add(&F.cfg.formats, KEY_FORMAT_REDISSON, "r*"), 0);
    struct tclient *a = client(1), *b = client(2), *c = client(3);
    uint32_t ga = acquire_kind(a, "ry", LOCK_EXCLUSIVE, 0, 0, 0, -1);
    reply(pending(R_ACQUIRE, "ry"), F.now + 1 * MS, BACKEND_DONE);
    uint64_t la = granted(ga); /* with no handoffs: released, not kept */
    F.cfg.cohort_handoffs = 4;
    uint32_t gb = acquire_kind(b, "ry", LOCK_EXCLUSIVE, 0, 0, 0, -1);
    /* Nobody else listened yet: b's acquire goes right behind a's release. */
    ok_answer(release(a, la));
    cr_assert_eq(req_count(R_RELEASE, "ry"), 1);
    cr_assert_eq(req_count(R_ACQUIRE, "ry"), 2);
    reply_heard(pending(R_RELEASE, "ry"), F.now + 1 * MS, 1);
    reply(pending(R_ACQUIRE, "ry"), F.now + 1 * MS, BACKEND_DONE);
    uint64_t lb = granted(gb);
    /* Another client heard that release: b's grant may hand off, but its
     * key goes back to the store, and c waits a moment. */
    uint32_t gc = acquire_kind(c, "ry", LOCK_EXCLUSIVE, 0, 0, 0, -1);
    ok_answer(release(b, lb));
    cr_assert_eq(req_count(R_RELEASE, "ry"), 2, "the key was kept for a local handoff");
    uint64_t released = F.now;
    run_until(F.now + 1);
    cr_assert_eq(req_count(R_ACQUIRE, "ry"), 2, "no moment for the others");
    cr_assert(watching("ry"), "the other side's release message would end the moment");
    run_until(released + 5 * MS);
    cr_assert_eq(req_count(R_ACQUIRE, "ry"), 3, "the moment did not end");
    /* Nobody else heard b's release: the next one goes at once again. */
    reply_heard(pending(R_RELEASE, "ry"), F.now + 1 * MS, 0);
    reply(pending(R_ACQUIRE, "ry"), F.now + 1 * MS, BACKEND_DONE);
    uint64_t lc = granted(gc);
    uint32_t ga2 = acquire_kind(a, "ry", LOCK_EXCLUSIVE, 0, 0, 0, -1);
    ok_answer(release(c, lc));
    /* c's grant handed off to a locally (cohort), or a asked at once. */
    cr_assert(answer_to(ga2) != NULL || req_count(R_ACQUIRE, "ry") == 4,
              "the next acquire waited though nobody else listened");
}

Test(core, another_owner_of_the_connection_waits_and_a_drop_releases_every_hold)
{
    struct tclient *a = client(1);
    uint32_t first = acquire_kind(a, "own", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 1, -1);
    reply(pending(R_ACQUIRE, "own"), F.now + 1 * MS, BACKEND_DONE);
    granted(first);
    granted(acquire_kind(a, "own", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 1, 0));
    granted(acquire_kind(a, "own", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 1, 0));
    /* Another owner (thread) of the same connection takes turns. */
    refused(acquire_kind(a, "own", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 2, 0), DLOCK_EBUSY);
    uint32_t other = acquire_kind(a, "own", LOCK_EXCLUSIVE, 0, WIRE_ACQ_REENTRANT, 2, -1);
    cr_assert_null(answer_to(other));
    /* The connection goes: three holds, one release to the store. */
    core_client_drop(&F.k, &a->cc, 0, F.now);
    cr_assert_eq(req_count(R_RELEASE, "own"), 1);
    cr_assert_eq(a->cc.nleases, 0u);
    cr_assert_eq(a->cc.nwaiters, 0u);
}

/* Takes name as shared for c through the store (fence 7): its lease. */
static const struct answer *shared_from_store(struct tclient *c, const char *name)
{
    uint32_t id = acquire_kind(c, name, LOCK_SHARED, 0, 0, 0, -1);
    struct req *r = pending(R_ACQUIRE, name);
    cr_assert_eq(r->lkind, LOCK_SHARED, "the store was asked for kind %d", r->lkind);
    reply(r, F.now + 1 * MS, BACKEND_DONE);
    return granted_answer(id);
}

Test(core, readers_share_one_grant_and_a_waiting_writer_holds_new_readers_back)
{
    F.backend.kinds = BACKEND_KIND(LOCK_SHARED) | BACKEND_KIND(LOCK_SEMAPHORE);
    F.cfg.cohort_handoffs = 8;
    struct tclient *r1 = client(1), *r2 = client(2), *w = client(3), *r3 = client(4);
    const struct answer *g1 = shared_from_store(r1, "rw");
    /* A second reader joins the first one's grant: no store, the next token. */
    const struct answer *g2 = granted_answer(acquire_kind(r2, "rw", LOCK_SHARED, 0, 0, 0, 0));
    cr_assert_eq(req_count(R_ACQUIRE, "rw"), 1, "a joining reader went to the store");
    cr_assert_eq(g2->g.fence, g1->g.fence + 1);
    /* A writer waits for both; a reader after it waits behind it. */
    uint32_t wid = acquire_kind(w, "rw", LOCK_EXCLUSIVE, 0, 0, 0, -1);
    refused(acquire_kind(r3, "rw", LOCK_SHARED, 0, 0, 0, 0), DLOCK_EBUSY);
    uint32_t r3id = acquire_kind(r3, "rw", LOCK_SHARED, 0, 0, 0, -1);
    cr_assert_eq(req_count(R_ACQUIRE, "rw"), 1);
    /* The first reader leaves: the second still holds the grant's key. */
    ok_answer(release(r1, g1->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "rw"), 0, "the key went while a reader held it");
    ok_answer(release(r2, g2->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "rw"), 1);
    /* Now the writer, and only the writer, asks the store. */
    struct req *wr = pending(R_ACQUIRE, "rw");
    cr_assert_eq(wr->lkind, LOCK_EXCLUSIVE);
    reply(wr, F.now + 1 * MS, BACKEND_DONE);
    granted(wid);
    cr_assert_null(answer_to(r3id), "a reader got in beside the writer");
}

Test(core, readers_join_while_the_cohort_lasts_then_ask_the_store_beside_the_others)
{
    F.backend.kinds = BACKEND_KIND(LOCK_SHARED);
    F.cfg.cohort_handoffs = 1;
    struct tclient *r1 = client(1), *r2 = client(2), *r3 = client(3);
    const struct answer *g1 = shared_from_store(r1, "co");
    const struct answer *g2 = granted_answer(acquire_kind(r2, "co", LOCK_SHARED, 0, 0, 0, -1));
    /* The grant's one reserved token is used: the third reader asks the
     * store for a grant of its own, beside the other two. */
    uint32_t third = acquire_kind(r3, "co", LOCK_SHARED, 0, 0, 0, -1);
    cr_assert_null(answer_to(third));
    struct req *r = pending(R_ACQUIRE, "co");
    cr_assert_eq(req_count(R_ACQUIRE, "co"), 2);
    reply_at(r, F.now + 1 * MS, 0, BACKEND_DONE, 50, 0);
    const struct answer *g3 = granted_answer(third);
    cr_assert_eq(g3->g.fence, 50);
    /* Each grant's key goes with its last reader. */
    ok_answer(release(r1, g1->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "co"), 0);
    ok_answer(release(r2, g2->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "co"), 1);
    ok_answer(release(r3, g3->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "co"), 2);
    cr_assert_str_eq(req_n(R_RELEASE, "co", 1)->token, r->token);
}

/* A reader that asked the store beside the readers (their key was in doubt)
 * may join their grant once the key is confirmed, while its acquire is in
 * flight. The lock stays ACQUIRING until the answer: no second acquire goes
 * out beside it (a writer's, which that answer would be taken for), and the
 * lock is not freed under it. The answer's key is given back. */
Test(core, a_reader_that_joins_while_its_acquire_is_in_flight_waits_for_the_answer)
{
    F.backend.kinds = BACKEND_KIND(LOCK_SHARED);
    F.cfg.cohort_handoffs = 8;
    struct tclient *r1 = client(1), *r2 = client(2), *r3 = client(3), *w = client(4);
    const struct answer *g1 = shared_from_store(r1, "j");
    struct req *a0 = req_n(R_ACQUIRE, "j", 0);
    /* A failover: the readers' key is in doubt until a renewal finds it. */
    core_doubt(&F.k, every_name, NULL, F.now);
    run_until(F.now);
    struct req *rn = pending(R_RENEW, "j");
    /* Meanwhile a reader cannot join: it asks the store beside them. */
    uint32_t i2 = acquire_kind(r2, "j", LOCK_SHARED, 0, 0, 0, -1);
    cr_assert_eq(req_count(R_ACQUIRE, "j"), 2);
    struct req *a1 = pending(R_ACQUIRE, "j");
    char a1_token[TOKEN_HEX + 1];
    memcpy(a1_token, a1->token, sizeof a1_token);
    /* The key is confirmed; a third reader's arrival lets both join. */
    reply(rn, F.now + 1 * MS, BACKEND_DONE);
    const struct answer *g3 = granted_answer(acquire_kind(r3, "j", LOCK_SHARED, 0, 0, 0, -1));
    const struct answer *g2 = granted_answer(i2);
    cr_assert_eq(g2->g.fence, g1->g.fence + 1);
    cr_assert_eq(g3->g.fence, g1->g.fence + 2);
    struct lock *l = table_lock_find(&F.k.table, "j", 1);
    cr_assert_not_null(l);
    cr_assert_eq(l->phase, LOCK_ACQUIRING, "the join forgot the acquire in flight");
    /* A writer waits; the readers leave with the acquire still in flight. */
    uint32_t iw = acquire_kind(w, "j", LOCK_EXCLUSIVE, 0, 0, 0, -1);
    ok_answer(release(r1, g1->g.lease_id));
    ok_answer(release(r2, g2->g.lease_id));
    ok_answer(release(r3, g3->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "j"), 1);
    cr_assert_str_eq(req_n(R_RELEASE, "j", 0)->token, a0->token);
    l = table_lock_find(&F.k.table, "j", 1);
    cr_assert_not_null(l, "the lock was freed under its acquire");
    cr_assert_eq(l->phase, LOCK_ACQUIRING);
    cr_assert_eq(req_count(R_ACQUIRE, "j"), 2, "a second acquire beside the one in flight");
    /* The reader's grant comes: nobody takes it for theirs, its key goes. */
    reply_at(a1, F.now + 1 * MS, 0, BACKEND_DONE, 50, 0);
    cr_assert_null(answer_to(iw), "the writer was granted by the reader's acquire");
    cr_assert_eq(req_count(R_RELEASE, "j"), 2);
    cr_assert_str_eq(req_n(R_RELEASE, "j", 1)->token, a1_token);
    /* Then the writer asks for itself, and is granted by its own answer. */
    cr_assert_eq(req_count(R_ACQUIRE, "j"), 3);
    struct req *aw = pending(R_ACQUIRE, "j");
    cr_assert_eq(aw->lkind, LOCK_EXCLUSIVE);
    reply_at(aw, F.now + 1 * MS, 0, BACKEND_DONE, 60, 0);
    cr_assert_eq(granted_answer(iw)->g.fence, 60);
}

Test(core, a_semaphore_asks_the_store_for_each_permit_up_to_its_count)
{
    F.backend.kinds = BACKEND_KIND(LOCK_SHARED) | BACKEND_KIND(LOCK_SEMAPHORE);
    struct tclient *a = client(1), *b = client(2), *c = client(3);
    uint32_t ia = acquire_kind(a, "sem", LOCK_SEMAPHORE, 2, 0, 0, -1);
    struct req *ra = pending(R_ACQUIRE, "sem");
    cr_assert_eq(ra->lkind, LOCK_SEMAPHORE);
    cr_assert_eq(ra->limit, 2u);
    reply(ra, F.now + 1 * MS, BACKEND_DONE);
    const struct answer *ga = granted_answer(ia);
    /* The second permit goes to the store beside the first holder. */
    uint32_t ib = acquire_kind(b, "sem", LOCK_SEMAPHORE, 2, 0, 0, -1);
    struct req *rb = pending(R_ACQUIRE, "sem");
    cr_assert_neq(strcmp(rb->token, ra->token), 0, "two permits with one token");
    reply_at(rb, F.now + 1 * MS, 0, BACKEND_DONE, 9, 0);
    granted(ib);
    /* A third waits here without asking: both permits are held here. */
    uint32_t ic = acquire_kind(c, "sem", LOCK_SEMAPHORE, 2, 0, 0, -1);
    cr_assert_eq(req_count(R_ACQUIRE, "sem"), 2);
    /* Another count, or the other counted kind, is never granted. */
    refused(acquire_kind(c, "sem", LOCK_SEMAPHORE, 3, 0, 0, -1), DLOCK_EKIND);
    refused(acquire_kind(c, "sem", LOCK_SHARED, 0, 0, 0, -1), DLOCK_EKIND);
    /* A permit released: its own key goes, and the third asks at once. */
    ok_answer(release(a, ga->g.lease_id));
    cr_assert_eq(req_count(R_RELEASE, "sem"), 1);
    cr_assert_str_eq(req_n(R_RELEASE, "sem", 0)->token, ra->token);
    cr_assert_eq(req_count(R_ACQUIRE, "sem"), 3);
    reply(pending(R_ACQUIRE, "sem"), F.now + 1 * MS, BACKEND_DONE);
    granted(ic);
}

Test(core, a_mismatch_in_the_store_is_dlock_ekind_and_unknown_kinds_are_refused)
{
    F.backend.kinds = BACKEND_KIND(LOCK_SEMAPHORE);
    struct tclient *a = client(1);
    uint32_t id = acquire_kind(a, "mm", LOCK_SEMAPHORE, 4, 0, 0, -1);
    reply(pending(R_ACQUIRE, "mm"), F.now + 1 * MS, BACKEND_MISMATCH);
    refused(id, DLOCK_EKIND);
    /* Kinds this store does not keep, and malformed asks, are DLOCK_EINVAL. */
    refused(acquire_kind(a, "mm", LOCK_SHARED, 0, 0, 0, -1), DLOCK_EINVAL);
    refused(acquire_kind(a, "mm", LOCK_SEMAPHORE, 0, 0, 0, -1), DLOCK_EINVAL);
    refused(acquire_kind(a, "mm", LOCK_EXCLUSIVE, 3, 0, 0, -1), DLOCK_EINVAL);
    refused(acquire_kind(a, "mm", (enum lock_kind)9, 0, 0, 0, -1), DLOCK_EINVAL);
    refused(acquire_kind(a, "mm", LOCK_EXCLUSIVE, 0, 0x100, 0, -1), DLOCK_EINVAL);
}

/* ---- leases taken over from a predecessor ---- */

#define ADOPT_ID    ((5ull << 32) | 3)
#define ADOPT_TOKEN "0123456789abcdef0123456789abcdef"

/* a's lease on name, as a predecessor left it: valid until deadline. */
static int adopt(struct tclient *a, const char *name, uint64_t id, uint32_t slot,
                 enum lock_kind kind, uint64_t deadline, bool doubt)
{
    a->used[slot] = true;
    struct core_adopted ad = {.lease_id = id,
                              .slot = slot,
                              .name = name,
                              .name_len = (uint16_t)strlen(name),
                              .token = ADOPT_TOKEN,
                              .ask = {.kind = kind},
                              .holds = 2,
                              .ttl_ms = 3000,
                              .fence = 77,
                              .deadline = deadline,
                              .doubt = doubt};
    int rc = core_adopt(&F.k, &a->cc, &ad, F.now);
    if (rc)
        a->used[slot] = false;
    return rc;
}

/* The lease keeps its id, slot, token and fencing token; it stays valid
 * until the predecessor's deadline, in jeopardy, while a renewal sent at
 * once checks its key; confirmed, it is HELD until the renewal's validity. */
Test(core, a_lease_taken_over_is_checked_at_once_and_held_again)
{
    struct tclient *a = client(1);
    uint64_t old = F.now + 2000 * MS;
    cr_assert_eq(adopt(a, "ad", ADOPT_ID, 3, LOCK_EXCLUSIVE, old, false), 0);
    const struct pagew *p = page_of(ADOPT_ID);
    cr_assert_eq(p->slot, 3);
    cr_assert_eq(p->state, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(p->deadline, old, "the predecessor's deadline is not shown");
    cr_assert_eq(p->fence, 77);
    run_until(F.now);
    struct req *r = pending(R_RENEW, "ad");
    cr_assert_str_eq(r->token, ADOPT_TOKEN);
    cr_assert_eq(r->holds, 2, "the renewal does not carry the holds");
    reply(r, F.now + 5 * MS, BACKEND_DONE);
    p = page_of(ADOPT_ID);
    cr_assert_eq(p->state, DLOCK_STATE_HELD);
    cr_assert_eq(p->deadline, lease_deadline(r->sent, 3000));
    cr_assert_not_null(event_n(ADOPT_ID, DLOCK_STATE_HELD, 0));
    /* Its holds are the predecessor's: two releases end it. */
    ok_answer(release(a, ADOPT_ID));
    cr_assert_eq(req_count(R_RELEASE, "ad"), 0, "released with a hold left");
    ok_answer(release(a, ADOPT_ID));
    core_flush(&F.k, F.now);
    cr_assert_str_eq(pending(R_RELEASE, "ad")->token, ADOPT_TOKEN);
    /* A new lease never gets the id again. */
    cr_assert_neq(hold(a, "other", 3000, 0, 0, MS), ADOPT_ID);
}

/* The key gone or another's: LOST, and the key is left alone. */
Test(core, a_lease_taken_over_whose_key_is_gone_is_lost)
{
    struct tclient *a = client(1);
    cr_assert_eq(adopt(a, "gone", ADOPT_ID, 0, LOCK_EXCLUSIVE, F.now + 2000 * MS, false), 0);
    run_until(F.now);
    reply(pending(R_RENEW, "gone"), F.now + 2 * MS, BACKEND_NOT_OURS);
    struct event *e = event_n(ADOPT_ID, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(e);
    cr_assert_eq(e->ev.reason, DLOCK_ELOST);
    cr_assert_not(a->used[0], "the slot of the lost lease is not freed");
    core_flush(&F.k, F.now);
    cr_assert_eq(req_count(R_RELEASE, "gone"), 0, "a key not ours was released");
}

/* The store unreachable: retried until the predecessor's deadline, then
 * LOST at that deadline. */
Test(core, a_lease_taken_over_in_an_outage_is_lost_at_its_deadline)
{
    struct tclient *a = client(1);
    uint64_t old = F.now + 1000 * MS;
    cr_assert_eq(adopt(a, "out", ADOPT_ID, 0, LOCK_EXCLUSIVE, old, false), 0);
    for (;;) {
        run_until(F.now);
        struct event *e = event_n(ADOPT_ID, DLOCK_STATE_LOST, 0);
        if (e) {
            cr_assert_eq(e->at, old, "lost at +%" PRIu64 " ms, not at the deadline",
                         (e->at - T0) / MS);
            break;
        }
        int n = req_count(R_RENEW, "out");
        struct req *r = n ? req_n(R_RENEW, "out", n - 1) : NULL;
        if (r && !r->answered)
            reply_at(r, F.now + 10 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
        else
            run_until(core_next_due(&F.k));
    }
    cr_assert_gt(req_count(R_RENEW, "out"), 1, "not retried");
    cr_assert_null(event_n(ADOPT_ID, DLOCK_STATE_HELD, 0));
}

/* A store that may have failed over unseen: not valid until confirmed. */
Test(core, a_lease_taken_over_in_doubt_is_not_valid_until_confirmed)
{
    struct tclient *a = client(1);
    cr_assert_eq(adopt(a, "dbt", ADOPT_ID, 0, LOCK_EXCLUSIVE, F.now + 2000 * MS, true), 0);
    cr_assert_leq(page_of(ADOPT_ID)->deadline, F.now, "shown valid before the check");
    run_until(F.now);
    reply(pending(R_RENEW, "dbt"), F.now + 2 * MS, BACKEND_DONE);
    cr_assert_gt(page_of(ADOPT_ID)->deadline, F.now);
    cr_assert_eq(page_of(ADOPT_ID)->state, DLOCK_STATE_HELD);
}

/* What cannot be taken over is refused (the caller releases the key): an
 * expired lease, an id already in use, and a second exclusive holder; the
 * shared holders of one grant are taken over together. */
Test(core, what_cannot_be_taken_over_is_refused)
{
    struct tclient *a = client(1), *b = client(2);
    cr_assert_eq(adopt(a, "late", ADOPT_ID, 0, LOCK_EXCLUSIVE, F.now, false), DLOCK_ELOST);
    cr_assert_eq(adopt(a, "x", ADOPT_ID, 0, LOCK_EXCLUSIVE, F.now + 1000 * MS, false), 0);
    cr_assert_neq(adopt(b, "y", ADOPT_ID, 0, LOCK_EXCLUSIVE, F.now + 1000 * MS, false), 0);
    cr_assert_neq(adopt(b, "x", ADOPT_ID + 1, 1, LOCK_EXCLUSIVE, F.now + 1000 * MS, false), 0);
    cr_assert_eq(adopt(a, "r", ADOPT_ID + 2, 2, LOCK_SHARED, F.now + 1000 * MS, false), 0);
    cr_assert_eq(adopt(b, "r", ADOPT_ID + 3, 3, LOCK_SHARED, F.now + 1000 * MS, false), 0);
    cr_assert_neq(adopt(b, "r", ADOPT_ID + 4, 4, LOCK_EXCLUSIVE, F.now + 1000 * MS, false), 0);
    /* One reader of the grant gone (both its holds): the key stays for the
     * other, and goes with it. */
    ok_answer(release(a, ADOPT_ID + 2));
    ok_answer(release(a, ADOPT_ID + 2));
    core_flush(&F.k, F.now);
    cr_assert_eq(req_count(R_RELEASE, "r"), 0, "the readers' key went with the first");
    ok_answer(release(b, ADOPT_ID + 3));
    ok_answer(release(b, ADOPT_ID + 3));
    core_flush(&F.k, F.now);
    cr_assert_eq(req_count(R_RELEASE, "r"), 1);
}

/* A lease taken over with little time left, while the store is still down:
 * the renewal sent at once fails, the next retry would come only at the
 * deadline; the store's return renews it at once, and it is held again. */
Test(core, a_lease_in_jeopardy_is_renewed_as_soon_as_the_store_is_back)
{
    struct tclient *a = client(1);
    uint64_t old = F.now + 100 * MS;
    cr_assert_eq(adopt(a, "late", ADOPT_ID, 0, LOCK_EXCLUSIVE, old, false), 0);
    run_until(F.now);
    reply_at(pending(R_RENEW, "late"), F.now + 1 * MS, DLOCK_EUNAVAIL, BACKEND_DONE, 0, 0);
    run_until(F.now + 2 * MS);
    cr_assert_eq(req_count(R_RENEW, "late"), 1, "retried before the store was back");
    core_store_ready(&F.k, F.now);
    run_until(F.now);
    cr_assert_eq(req_count(R_RENEW, "late"), 2, "not renewed when the store came back");
    reply(pending(R_RENEW, "late"), F.now + 2 * MS, BACKEND_DONE);
    cr_assert_eq(page_of(ADOPT_ID)->state, DLOCK_STATE_HELD);
    cr_assert_null(event_n(ADOPT_ID, DLOCK_STATE_LOST, 0));
}

/* ---- an operator's forced release (core_force) ---- */

/* The local holder is told LOST at once, its key is not released again, and
 * the next local waiter asks the store at once. */
Test(core, a_forced_release_loses_the_local_lease_and_wakes_the_waiter)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1), *b = client(2);
    uint64_t l = hold(a, "f", 30000, 0, 0, MS);
    uint32_t wid = acquire(b, "f", 30000, DLOCK_WAIT_FOREVER, 0, 0);
    cr_assert_eq(req_count(R_ACQUIRE, "f"), 1, "the waiter asked the store while it is held");
    run_until(T0 + 10 * MS);
    struct core_forced lost[2];
    cr_assert_eq(core_force(&F.k, "f", 1, lost, 2, F.now), 1);
    cr_assert_eq(lost[0].pid, 1);
    cr_assert_eq(lost[0].fence, 7);
    struct event *e = event_n(l, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(e, "no LOST event");
    cr_assert_eq(e->at, T0 + 10 * MS);
    cr_assert_eq(e->ev.reason, DLOCK_ELOST);
    cr_assert_eq(req_count(R_RELEASE, "f"), 0, "released a key the forced release deleted");
    cr_assert_eq(req_count(R_ACQUIRE, "f"), 2, "the waiter did not ask at once");
    cr_assert_eq(pending(R_ACQUIRE, "f")->sent, T0 + 10 * MS);
    reply(pending(R_ACQUIRE, "f"), T0 + 11 * MS, BACKEND_DONE);
    granted(wid);
    /* Nothing held: nothing lost. */
    cr_assert_eq(core_force(&F.k, "nothing", 7, lost, 2, F.now), 0);
}

/* An acquire in flight when the release is forced reached the store first:
 * its grant was deleted, so it grants nothing and asks again at once; a
 * "taken" answer is asked again at once too. */
Test(core, a_grant_in_flight_before_a_forced_release_is_asked_again)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "g", 30000, DLOCK_WAIT_FOREVER, 0, 0);
    struct core_forced lost[1];
    cr_assert_eq(core_force(&F.k, "g", 1, lost, 1, F.now), 0);
    reply(pending(R_ACQUIRE, "g"), T0 + MS, BACKEND_DONE);
    cr_assert_null(answer_to(id), "granted a key the forced release deleted");
    cr_assert_eq(req_count(R_ACQUIRE, "g"), 2, "not asked again at once");
    cr_assert_eq(pending(R_ACQUIRE, "g")->sent, T0 + MS);
    /* Once more, the answer "taken": asked again at once, not at the
     * fallback retry. */
    cr_assert_eq(core_force(&F.k, "g", 1, lost, 1, F.now), 0);
    reply_at(pending(R_ACQUIRE, "g"), T0 + 2 * MS, 0, BACKEND_TAKEN, 0, 30000);
    cr_assert_eq(req_count(R_ACQUIRE, "g"), 3, "a taken answer waited for the fallback retry");
    reply(pending(R_ACQUIRE, "g"), T0 + 3 * MS, BACKEND_DONE);
    granted(id);
}

/* The grant of an acquire in flight at a forced release may have set the key
 * after the delete: it is given back (compare-and-delete with the acquire's
 * token), and the waiter asks again at once. */
Test(core, a_grant_around_a_forced_release_is_given_back)
{
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *a = client(1);
    uint32_t id = acquire(a, "gb", 30000, DLOCK_WAIT_FOREVER, 0, 0);
    struct req *acq = pending(R_ACQUIRE, "gb");
    char token[TOKEN_HEX + 1];
    memcpy(token, acq->token, sizeof token);
    struct core_forced lost[1];
    cr_assert_eq(core_force(&F.k, "gb", 2, lost, 1, F.now), 0);
    cr_assert_eq(req_count(R_RELEASE, "gb"), 0, "released before the grant came");
    reply(acq, T0 + MS, BACKEND_DONE);
    core_flush(&F.k, F.now);
    cr_assert_null(answer_to(id), "granted a key the forced release deleted");
    cr_assert_eq(req_count(R_RELEASE, "gb"), 1, "the grant around the forced release was kept");
    struct req *rel = req_n(R_RELEASE, "gb", 0);
    cr_assert_str_eq(rel->token, token, "the release names another token than the acquire's");
    cr_assert_eq(rel->sent, T0 + MS);
    cr_assert_eq(req_count(R_ACQUIRE, "gb"), 2, "not asked again at once");
    struct req *again = pending(R_ACQUIRE, "gb");
    cr_assert_eq(again->sent, T0 + MS);
    cr_assert_str_neq(again->token, token, "asked again with the given-back token");
    reply_at(again, T0 + 2 * MS, 0, BACKEND_DONE, 90, 0);
    cr_assert_eq(answer_to(id)->g.fence, 90);
    cr_assert_eq(req_count(R_RELEASE, "gb"), 1, "the new grant was given back too");
}

/* Two readers share one grant; a third reader asks the store beside them
 * while their renewals are in flight (no join then); the renewals come back,
 * then the release is forced. No reader may join the grant the force deleted
 * while its holders are lost one by one: both holders are lost, and only
 * them; the third reader is granted later, by the store. */
Test(core, no_reader_joins_a_grant_a_forced_release_deleted)
{
    F.backend.kinds = BACKEND_KIND(LOCK_SHARED);
    F.cfg.cohort_handoffs = 8;
    F.cfg.cohort_ms = 60000; /* the cohort stays open throughout */
    F.cfg.retry_fallback_ms = 60000;
    struct tclient *r1 = client(1), *r2 = client(2), *r3 = client(3);
    const struct answer *g1 = shared_from_store(r1, "fr");
    const struct answer *g2 = granted_answer(acquire_kind(r2, "fr", LOCK_SHARED, 0, 0, 0, -1));
    uint64_t l1 = g1->g.lease_id, l2 = g2->g.lease_id, fence2 = g2->g.fence;
    cr_assert_eq(req_count(R_ACQUIRE, "fr"), 1, "the second reader did not join");
    /* The renewals of both go out together. */
    run_until(tick_after(T0, 10000, F.now));
    cr_assert_eq(req_count(R_RENEW, "fr"), 2, "the readers' renewals are not both in flight");
    uint32_t third = acquire_kind(r3, "fr", LOCK_SHARED, 0, 0, 0, -1);
    cr_assert_null(answer_to(third), "a reader joined holders whose renewals are in flight");
    cr_assert_eq(req_count(R_ACQUIRE, "fr"), 2, "the third reader did not ask the store");
    struct req *acq3 = pending(R_ACQUIRE, "fr");
    reply(req_n(R_RENEW, "fr", 0), F.now + MS, BACKEND_DONE);
    reply(req_n(R_RENEW, "fr", 1), F.now, BACKEND_DONE);
    cr_assert_null(answer_to(third), "a renewal's answer let the third reader join");
    int nev = F.nev;

    struct core_forced lost[4];
    size_t n = core_force(&F.k, "fr", 2, lost, 4, F.now);
    cr_assert_eq(n, 2, "the forced release lost %zu leases, not the two readers'", n);
    cr_assert(lost[0].pid != 3 && lost[1].pid != 3, "the third reader was among the lost");
    cr_assert_null(answer_to(third), "the third reader joined the grant the force deleted");
    cr_assert_not_null(event_n(l1, DLOCK_STATE_LOST, 0));
    cr_assert_not_null(event_n(l2, DLOCK_STATE_LOST, 0));
    for (int i = nev; i < F.nev; i++)
        cr_assert(F.ev[i].ev.lease_id == l1 || F.ev[i].ev.lease_id == l2,
                  "an event (state %d) for a lease the forced release made", F.ev[i].ev.state);
    cr_assert_eq(req_count(R_RELEASE, "fr"), 0, "released the key the forced release deleted");

    /* The third reader's acquire was in flight at the force: its grant is
     * given back, and it asks the store again. */
    reply_at(acq3, F.now + MS, 0, BACKEND_DONE, 50, 0);
    cr_assert_null(answer_to(third), "granted on an acquire from before the forced release");
    cr_assert_eq(req_count(R_ACQUIRE, "fr"), 3, "the third reader did not ask again");
    struct req *again = pending(R_ACQUIRE, "fr");
    cr_assert_eq(again->lkind, LOCK_SHARED);
    reply_at(again, F.now + MS, 0, BACKEND_DONE, 60, 0);
    const struct answer *g3 = granted_answer(third);
    cr_assert_eq(g3->g.fence, 60, "the third reader's token %" PRIu64 " is not the store's",
                 g3->g.fence);
    cr_assert_neq(g3->g.fence, fence2 + 1);
    for (int i = 0; i < F.nev; i++)
        cr_assert_neq(F.ev[i].ev.lease_id, g3->g.lease_id, "the new lease had an event: %d",
                      F.ev[i].ev.state);
}

/* A grant on release (docs/redis.md): the store's release handed the key
 * to the waiting agent's entry. For this agent, its pending token (the one
 * its retries ask with again) and a keep-alive it knows, the first waiter
 * is granted from the message alone, valid from that keep-alive's send
 * time (never the message's arrival), renewed at once; with a keep-alive it
 * does not know, it asks at once (the acquire adopts the key); a grant for
 * another agent wakes nobody; one for a token nobody here waits with is
 * handed back. */
static struct backend_grant grant_msg(const char *to, const char *token, uint64_t seq)
{
    struct backend_grant g = {.fence = 99, .seq = seq, .ttl_ms = 10000, .block = 4};
    snprintf(g.to, sizeof g.to, "%s", to);
    snprintf(g.token, sizeof g.token, "%s", token);
    return g;
}

/* A client waiting for name on a store with bound entries, told "taken"
 * once (the holder's key lives 600 s): its request id, and the pending
 * token it asked with in token. */
static uint32_t wait_bound(const char *name, char token[TOKEN_HEX + 1])
{
    F.backend.ops = &fb_bound_ops;
    uint32_t id = acquire(client(1), name, 10000, DLOCK_WAIT_FOREVER, 0, 0);
    struct req *r = pending(R_ACQUIRE, name);
    snprintf(token, TOKEN_HEX + 1, "%s", r->token);
    reply_at(r, T0 + MS, 0, BACKEND_TAKEN, 0, 600000);
    return id;
}

Test(core, a_grant_on_release_is_taken_from_its_message)
{
    char token[TOKEN_HEX + 1];
    uint32_t id = wait_bound("g", token);
    struct req *r;
    run_until(retry_due("g"));
    r = pending(R_ACQUIRE, "g");
    cr_assert_str_eq(r->token, token, "the waiter's retry asks with a new token");
    reply_at(r, F.now + MS, 0, BACKEND_TAKEN, 0, 600000);
    int acquires = req_count(R_ACQUIRE, "g");

    /* Another agent's grant: the name is taken, nobody asks. */
    struct backend_grant g = grant_msg("0123456789abcdef", token, F.keepalive_seq[0]);
    core_grant(&F.k, "g", 1, &g, F.now + MS);
    cr_assert_eq(req_count(R_ACQUIRE, "g"), acquires);
    cr_assert_null(answer_to(id));

    /* Ours: valid until 3 s after the send of the keep-alive it names,
     * less the drift; renewed at once to the TTL. */
    int k = F.nkeepalive - 1;
    cr_assert_lt(F.keepalive[k], F.now);
    g = grant_msg(F.k.waiter_id, token, F.keepalive_seq[k]);
    core_grant(&F.k, "g", 1, &g, F.now);
    granted(id);
    cr_assert_eq(answer_to(id)->g.fence, 99);
    cr_assert_eq(answer_to(id)->g.deadline_ns, lease_deadline(F.keepalive[k], 3000),
                 "the deadline is not the keep-alive's send plus 3 s less the drift");
    cr_assert_eq(F.k.stats.grants_by_release, 1);
    cr_assert_eq(req_count(R_ACQUIRE, "g"), acquires, "an acquire for a grant on release");
    run_until(F.now);
    r = pending(R_RENEW, "g");
    cr_assert_str_eq(r->token, token);
    cr_assert_eq(r->sent, F.now, "not renewed at once");
    reply(r, F.now + MS, BACKEND_DONE);

    /* A second waiter: a new token. Its grant names a keep-alive the agent
     * does not know: it asks at once, with the same token. */
    struct tclient *b = client(2);
    uint32_t id2 = acquire(b, "h", 10000, DLOCK_WAIT_FOREVER, 0, 0);
    r = pending(R_ACQUIRE, "h");
    char token2[TOKEN_HEX + 1];
    snprintf(token2, sizeof token2, "%s", r->token);
    cr_assert_str_neq(token2, token);
    reply_at(r, F.now + MS, 0, BACKEND_TAKEN, 0, 600000);
    int h_acquires = req_count(R_ACQUIRE, "h");
    g = grant_msg(F.k.waiter_id, token2, F.k.keepalive_seq + 100);
    core_grant(&F.k, "h", 1, &g, F.now);
    cr_assert_eq(req_count(R_ACQUIRE, "h"), h_acquires + 1, "not asked at once");
    r = pending(R_ACQUIRE, "h");
    cr_assert_str_eq(r->token, token2, "the adoption asks with another token");
    reply(r, F.now + MS, BACKEND_DONE);
    granted(id2);
    cr_assert_eq(F.k.stats.grants_by_release, 1);

    /* A grant of a token nobody here waits with: handed back, with a
     * notice (the release may grant the next host). */
    int releases = req_count(R_RELEASE, "free");
    g = grant_msg(F.k.waiter_id, "0000000000000000000000000000abcd", F.keepalive_seq[k]);
    core_grant(&F.k, "free", 4, &g, F.now);
    cr_assert_eq(req_count(R_RELEASE, "free"), releases + 1);
    r = pending(R_RELEASE, "free");
    cr_assert_str_eq(r->token, "0000000000000000000000000000abcd");
    cr_assert(r->notify);
}

/* A forced release on this host spends the waiters' pending token: a grant
 * on release to it, sent before the force deleted the key, makes no lease
 * (another host may hold the name by then); it is handed back, and the
 * next acquire asks with a new token. */
Test(core, a_forced_release_spends_the_pending_token)
{
    char token[TOKEN_HEX + 1];
    uint32_t id = wait_bound("g", token);
    struct req *r;
    struct core_forced out[1];
    core_force(&F.k, "g", 1, out, 1, F.now);
    int releases = req_count(R_RELEASE, "g");
    struct backend_grant g = grant_msg(F.k.waiter_id, token, F.keepalive_seq[F.nkeepalive - 1]);
    core_grant(&F.k, "g", 1, &g, F.now + MS);
    cr_assert_null(answer_to(id), "a lease from a grant of the forced key");
    cr_assert_eq(F.k.stats.grants_by_release, 0);
    cr_assert_eq(req_count(R_RELEASE, "g"), releases + 1, "the grant was not handed back");
    r = pending(R_RELEASE, "g");
    cr_assert_str_eq(r->token, token);
    run_until(retry_due("g"));
    r = pending(R_ACQUIRE, "g");
    cr_assert_not_null(r);
    cr_assert_str_neq(r->token, token, "the spent token asked again");
}
