/* SPDX-License-Identifier: BSD-3-Clause */
/* sim.c -- one simulated run: the schedule a seed makes (mode, agents,
 * clients, clocks, network, faults), the agents driving their cores, the
 * clients and their lease pages, the faults, and the checks after every
 * event (tests/sim/README.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "log.h"
#include "sim.h"

#if __has_include("backend_quorum.h")
#include "backend_quorum.h"
#define SIM_HAVE_QUORUM 1
#else
#define SIM_HAVE_QUORUM 0
#endif

bool sim_quorum_available(void)
{
    return SIM_HAVE_QUORUM;
}

const char *const fault_names[F_KINDS] = {
    "link-drop",    "partition", "node-stall",  "restart",       "failover", "step-small",
    "step-forward", "step-back", "agent-drift", "node-drift",    "lag",      "agent-pause",
    "fresh-node",   "slot-move", "fence-cut",   "agent-restart",
};

const char *const coverage_names[COV_COUNT] = {
    "cohort blocks used up",
    "bounded holds stopped",
    "LOST events",
    "waiters failed after outage_wait_ms",
    "releases pending past 1.2 s",
    "excuse windows ended with a lease checked",
    "shared joins",
    "semaphore permits beside local holders",
    "re-entries",
    "EKIND answers",
    "readers behind another host's writer",
    "kinds or name sets refused",
    "name sets held",
    "name sets rolled back",
    "waits cancelled",
    "agent restarts",
    "leases taken over",
    "taken over then HELD",
    "taken over then lost",
    "leases expired in a restart's gap",
    "keys handed over by a release",
    "leases granted from a release's message",
    "handed-over keys taken by an acquire",
};

/* The checks and the faults that excuse them. */
#define EXCUSE_MUTEX (X_DATA_LOSS | X_UNDETECTED_LOSS | X_CLOCK_FORWARD | X_DRIFT | X_PERMIT_CLOCK)
/* Tokens follow the order of the acquires on Redis; grants follow it too
 * only while one lease at a time is valid, so whatever breaks mutual
 * exclusion may also deliver an earlier token after a later one. */
#define EXCUSE_FENCE  (X_MARK_LOST_CLOCK | EXCUSE_MUTEX)
#define EXCUSE_ORPHAN (X_RESURRECT | X_LATE_ACQUIRE | X_STEP_BACK)

static bool fault_free(const struct sim *s)
{
    return s->nfaults == 0;
}

/* ---- the wake-up check ----
 *
 * In a run without faults and with the fallback retry a minute off, a
 * waiter is woken by a release only through the notices: each release of a
 * name's key on a node (with its notice) must be followed within WAKE_BOUND
 * by an acquire of the name from every agent that has a waiter for it (and
 * no lease of it, which it hands over itself), or by a grant. That is a few
 * of the slowest one-way delays (20 ms) and a quorum's wait for its last
 * nodes: the notice, or the "taken" answer, the subscription and its
 * confirmation when the release came between them. */
#define WAKE_BOUND MS(250)

/* Does agent a wait for name n through Redis: a waiting client, and no
 * client holding it there? */
static bool agent_waits(const struct sim *s, unsigned a, unsigned n)
{
    bool waits = false;
    for (unsigned i = 0; i < s->nclients; i++) {
        const struct sclient *c = &s->clients[i];
        if (c->ag != &s->agents[a])
            continue;
        if (c->state == C_WAITING && c->acq_name == n && c->acq_wait_ms != 0)
            waits = true;
        if ((c->state == C_HOLDING || c->state == C_RELEASING) && c->lease_name == n)
            return false;
    }
    return waits;
}

void sim_released(struct sim *s, const char *name, size_t len)
{
    int n = sim_name_index(s, name, len);
    if (!s->notices_only || n < 0)
        return;
    for (unsigned a = 0; a < s->nagents; a++)
        if (!s->wake_due[a][n] && agent_waits(s, a, (unsigned)n))
            s->wake_due[a][n] = s->now + WAKE_BOUND;
}

void sim_acquire_sent(struct agent *ag, const struct backend_req *req)
{
    struct sim *s = ag->s;
    int n = sim_name_index(s, req->name, req->len);
    if (n < 0 || !ag->core_live)
        return;
    s->wake_due[ag->id][n] = 0;
    memcpy(ag->acq[n].token, req->token, 32);
    ag->acq[n].token[32] = '\0';
    ag->acq[n].sent_at = agent_now(ag);
    ag->acq[n].sent_vt = s->now;
    ag->acq[n].wall_us = agent_wall_us(ag);
    ag->acq[n].block = req->block;
}

/* The outage-aware liveness check sees the store's answers to acquires as
 * the core does: the outage runs from its first failure until an acquire
 * is answered or the store comes back (on_ready). */
void sim_acquire_answered(struct agent *ag, const struct backend_result *r)
{
    if (r->err == DLOCK_EUNAVAIL || r->err == DLOCK_ENOQUORUM) {
        if (!ag->down_since)
            ag->down_since = r->at;
    } else if (!r->err) {
        ag->down_since = 0;
    }
}

static void check_wakeup(struct sim *s)
{
    if (!s->notices_only)
        return;
    for (unsigned a = 0; a < s->nagents; a++) {
        for (unsigned n = 0; n < s->nnames; n++) {
            uint64_t due = s->wake_due[a][n];
            if (!due)
                continue;
            if (!agent_waits(s, a, n)) {
                s->wake_due[a][n] = 0;
            } else if (s->now > due) {
                violation(s, "wake-up", 0,
                          "agent%u waits for %s, released on a node %" PRIu64
                          " ms ago, and has not tried again",
                          a, s->names[n], (uint64_t)((s->now - due + WAKE_BOUND) / 1000000));
                s->wake_due[a][n] = 0;
            }
        }
    }
}

static struct link *link_of(struct sim *s, unsigned agent, unsigned node)
{
    return &s->links[agent * s->nnodes + node];
}

static int64_t signed_range(struct rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)rng_below(r, (uint64_t)(hi - lo + 1));
}

/* ---- the agents' environment ---- */

/* Has every link of the agent been up once, and its store said it was
 * ready (the start-up is over: a cluster's first map read)? */
static bool store_came_up(const struct agent *ag)
{
    if (!ag->ready_once)
        return false;
    for (unsigned n = 0; n < ag->s->nnodes; n++)
        if (!ag->s->links[ag->id * ag->s->nnodes + n].run_id)
            return false;
    return true;
}

static struct sclient *client_of(struct core_client *c)
{
    return (struct sclient *)c;
}

static void fifo_remove(struct agent *ag, unsigned name, unsigned idx)
{
    unsigned n = ag->nfifo[name];
    memmove(&ag->fifo[name][idx], &ag->fifo[name][idx + 1], (n - idx - 1) * sizeof ag->fifo[0][0]);
    ag->nfifo[name]--;
}

static int fifo_find(struct agent *ag, const struct sclient *c)
{
    for (unsigned i = 0; i < ag->nfifo[c->acq_name]; i++) {
        const struct fifo_ent *f = &ag->fifo[c->acq_name][i];
        if (f->client == c->id && f->incarnation == c->incarnation && f->req == c->acq_req)
            return (int)i;
    }
    return -1;
}

static void fence_excuse(struct sim *s, unsigned name, uint64_t floor);
static void fence_excuse_from(struct sim *s, uint64_t since, uint64_t written, uint64_t prev,
                              uint64_t floor);
static bool lease_valid(const struct sclient *c, uint64_t *deadline);

/* Does a lease's kept token stand for hex token t? */
static bool token_is(const uint8_t raw[TOKEN_BYTES], const char *t)
{
    char hex[TOKEN_HEX + 1];
    token_hex(raw, hex);
    return memcmp(hex, t, TOKEN_HEX) == 0;
}

/* Sentinel and cluster mode: a renewal sent at sent_at (agent clock) found
 * the key of ag's lease with token; while the core handles the answer, a
 * lease it shows HELD again is confirmed, if the renewal was sent after
 * the agent heard of the failover (check_event). The lease is told by its
 * HELD event, not by the token: the local holders of a shared permit share
 * it, and each renews on its own. */
void sim_renewed(struct agent *ag, const char *token, uint64_t sent_at)
{
    ag->confirm_token = token;
    ag->confirm_sent = sent_at;
}
static void client_next(struct sclient *c, uint64_t delay);
static void client_crash_at(struct sclient *c, uint64_t delay);

/* ---- the promises of a lease's life ---- */

/* What a send at t buys: the validity of docs/protocol.md (lease_deadline()). */
static uint64_t validity_ns(uint32_t ttl_ms)
{
    return MS(ttl_ms) - MS(ttl_ms) / 100 - MS(2);
}

/* A bound the client asked for, else the agent's default, capped by its
 * limit (docs/protocol.md, ACQUIRE). */
static uint32_t hold_bound(uint32_t asked, uint32_t dflt, uint32_t limit)
{
    uint32_t v = asked ? asked : dflt;
    return limit && (v == 0 || v > limit) ? limit : v;
}

/* The last touch of a paused holder's lease, as the core reads it: the
 * latest of its touch, the hold's start and its takeover by a successor
 * (which knows no touch of the gap: core_adopt()). */
static uint64_t last_touch(const struct sclient *c)
{
    uint64_t t = c->pause_touch > c->hold_from ? c->pause_touch : c->hold_from;
    return t > c->progress_from ? t : c->progress_from;
}

/* Renewals of one lease per TTL: one per ttl x renew_fraction, twice that
 * where the grid and the half-way rule move them, ten retries of a failing
 * one (ttl/10 apart) and a few at once (a doubt, a stale answer). */
static unsigned renew_limit(const struct config *cfg)
{
    return (unsigned)(2.0 / cfg->renew_fraction) + 20;
}

/* The clients of ag holding a lease on the key of token: one, or the
 * local shared holders of one grant from the store, who share its permit
 * and renew it each on its own. A renewal names the key and the TTL, not
 * the lease: it is the renewal of one of those whose TTL it has (of any,
 * if none has, or ttl_ms is 0). */
static unsigned holders_of(struct agent *ag, const char *token, uint32_t ttl_ms,
                           struct sclient **out)
{
    struct sim *s = ag->s;
    unsigned n = 0, same = 0;
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        if (c->ag == ag && c->state == C_HOLDING && c->lease_id &&
            strncmp(c->lease_token, token, 32) == 0)
            out[n++] = c;
    }
    for (unsigned i = 0; i < n; i++)
        if (out[i]->lease_ttl == ttl_ms)
            out[same++] = out[i];
    return same ? same : n;
}

/* How likely a holder's lease is the one a renewal is for: one with no
 * renewal in flight (the core sends one at a time per lease), one whose
 * renewal has not stopped, one in doubt and due for a renewal. */
static unsigned renewal_rank(const struct sclient *h)
{
    return (h->rn_inflight == 0) * 4 + !h->stopped * 2 + h->doubt_renew;
}

/* Of the holders a renewal may be for, the one it is counted for: the
 * likeliest, then the one with the fewest renewals in its current window. */
static struct sclient *renewal_for(struct sclient **hs, unsigned n, uint64_t now)
{
    struct sclient *best = hs[0];
    for (unsigned i = 0; i < n; i++) {
        struct sclient *h = hs[i];
        if (!h->rn_count || now - h->rn_start >= MS(h->lease_ttl)) {
            h->rn_start = now;
            h->rn_count = 0;
        }
        unsigned r = renewal_rank(h), rb = renewal_rank(best);
        if (r != rb ? r > rb : h->rn_count < best->rn_count)
            best = h;
    }
    return best;
}

/* A renewal leaves for the key of token: not past a bounded hold (maximum
 * hold, or a holder stalled beyond progress_ms), and not more often than
 * documented (a storm is a violation with its seed, not a timeout). *who:
 * the client it is counted for (-1: none; -2 - id: one of several holders
 * of the key). */
bool sim_renew_sent(struct agent *ag, const char *token, uint32_t ttl_ms, int *who)
{
    struct sim *s = ag->s;
    struct sclient *hs[SIM_MAX_CLIENTS];
    *who = -1;
    if (!ag->core_live)
        return false;
    unsigned n = holders_of(ag, token, ttl_ms, hs), over_hold = 0, stalled = 0;
    if (!n)
        return false;
    uint64_t now = agent_now(ag);
    struct sclient *c = renewal_for(hs, n, now);
    const char *name = s->names[c->lease_name];
    /* Which of several holders it is for, nobody can tell from here: it
     * counts as the renewal at once of each of them after a doubt. */
    struct sclient *all[SIM_MAX_CLIENTS];
    *who = n > 1 || holders_of(ag, token, 0, all) > 1 ? -2 - (int)c->id : (int)c->id;
    c->rn_inflight++;
    for (unsigned i = 0; i < n; i++) {
        hs[i]->doubt_renew = hs[i]->adopt_renew = false;
        over_hold += hs[i]->hold_ms && now >= hs[i]->hold_from + MS(hs[i]->hold_ms);
        stalled +=
            hs[i]->progress_ms && hs[i]->paused && now - last_touch(hs[i]) > MS(hs[i]->progress_ms);
    }
    if (over_hold == n && !s->stop)
        violation(s, "bounded hold", 0,
                  "agent%u renews client%u's lease on %s %" PRIu64
                  " ms after its maximum hold of %u ms ran out",
                  ag->id, c->id, name, (uint64_t)(now - c->hold_from - MS(c->hold_ms)) / 1000000,
                  c->hold_ms);
    if (stalled == n && !s->stop)
        violation(s, "progress", 0,
                  "agent%u renews client%u's lease on %s, untouched for %" PRIu64
                  " ms, beyond its progress_ms of %u",
                  ag->id, c->id, name, (now - last_touch(c)) / 1000000, c->progress_ms);
    if (++c->rn_count > renew_limit(&ag->cfg) && !s->stop)
        violation(s, "renewal rate", 0,
                  "agent%u sent %u renewals of client%u's lease on %s (TTL %u ms) within one "
                  "TTL; at most %u are documented",
                  ag->id, c->rn_count, c->id, name, c->lease_ttl, renew_limit(&ag->cfg));
    /* Reported; a core that goes on may never return from this call. */
    return s->stop && c->rn_count > 2 * renew_limit(&ag->cfg);
}

/* A renewal's answer came back to the core (which has handled it): "not
 * yours" is proof of loss, LOST at once (docs/protocol.md, "Events"), for
 * the lease whose renewal it was (told when the key has one holder). */
void sim_renew_answered(struct agent *ag, const char *token, int who, uint64_t sent_at,
                        const struct backend_result *r)
{
    struct sim *s = ag->s;
    bool shared = who < -1;
    struct sclient *c = who >= 0 ? &s->clients[who] : shared ? &s->clients[-2 - who] : NULL;
    if (!c || c->state != C_HOLDING || strncmp(c->lease_token, token, 32) != 0)
        return;
    if (c->rn_inflight)
        c->rn_inflight--;
    if (!shared && !r->err && r->outcome == BACKEND_NOT_OURS && !c->lost_seen && !s->stop)
        violation(s, "events", 0,
                  "a renewal of client%u's lease on %s was answered \"not yours\", and the lease "
                  "was not LOST",
                  c->id, s->names[c->lease_name]);
    /* A lease taken over comes back when a renewal its successor sent (since
     * the lease's last doubt) finds the key: HELD, not left in jeopardy. */
    if (!shared && c->adopt_pending && !r->err && r->outcome == BACKEND_DONE &&
        sent_at >= c->adopt_at && (!c->doubted || sent_at >= c->doubt_at) && !s->stop)
        violation(s, "liveness", 0,
                  "a renewal agent%u's successor sent found client%u's key on %s, and the lease it "
                  "took over was not made HELD again (page and HELD event)",
                  ag->id, c->id, s->names[c->lease_name]);
}

void sim_wedged(struct sim *s)
{
    if (!s->wedge_armed)
        abort();
    longjmp(s->wedge, 1);
}

/* What an event turn must have finished (docs/protocol.md, "Events";
 * docs/failover.md): a page back to HELD was told with a HELD event; a lost
 * lease's key was released; a lease in doubt was renewed at once; a lease
 * whose deadline passed, its agent running, was LOST then. */
static void check_turn(struct sim *s)
{
    for (unsigned i = 0; i < s->nclients && !s->stop; i++) {
        struct sclient *c = &s->clients[i];
        struct agent *ag = c->ag;
        const char *name = s->names[c->lease_name];
        bool running = ag->paused_until + MS(1) < s->now;
        uint64_t now = agent_now(ag);
        if (c->held_due)
            violation(s, "events", 0, "client%u's lease on %s shows HELD again with no HELD event",
                      c->id, name);
        else if (c->release_due)
            violation(s, "clean-up", 0,
                      "client%u's lease on %s was LOST and its key was not released", c->id, name);
        else if (c->state == C_HOLDING && !c->lost_seen && c->doubted && c->doubt_renew &&
                 !c->stopped && running && now > c->doubt_at + MS(1))
            violation(s, "doubt", 0,
                      "client%u's lease on %s is in doubt since %" PRIu64
                      " ms and was not renewed at once",
                      c->id, name, (now - c->doubt_at) / 1000000);
        else if (c->state == C_HOLDING && !c->lost_seen && c->adopt_renew && !c->stopped &&
                 running && now > c->adopt_at + MS(1))
            violation(s, "takeover", 0,
                      "client%u's lease on %s, taken over by agent%u's successor %" PRIu64
                      " ms ago, was not renewed at once",
                      c->id, name, ag->id, (now - c->adopt_at) / 1000000);
        else if (c->state == C_HOLDING && !c->lost_seen && !c->doubted && running &&
                 c->lease_slot < SIM_PAGE_SLOTS && c->page[c->lease_slot].lease_id == c->lease_id &&
                 now > c->page[c->lease_slot].deadline + MS(1))
            violation(s, "events", 0,
                      "client%u's lease on %s passed its deadline %" PRIu64 " ms ago, not LOST",
                      c->id, name, (now - c->page[c->lease_slot].deadline) / 1000000);
    }
}

/* A lease valid by its client's rule is within its bounded hold: its last
 * renewal was sent before the maximum hold ran out (or, for a paused holder,
 * within progress_ms of its last touch), so its validity ends one validity
 * after that at the latest. */
static void check_hold(struct sim *s)
{
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        uint64_t d;
        if (!lease_valid(c, &d))
            continue;
        uint64_t now = agent_now(c->ag), v = validity_ns(c->lease_ttl);
        if (c->hold_ms && now >= c->hold_from + MS(c->hold_ms) + v) {
            violation(s, "bounded hold", 0,
                      "client%u on agent%u holds %s %" PRIu64
                      " ms past its maximum hold of %u ms (TTL %u ms), still valid",
                      c->id, c->ag->id, s->names[c->lease_name],
                      (uint64_t)(now - c->hold_from - MS(c->hold_ms)) / 1000000, c->hold_ms,
                      c->lease_ttl);
            return;
        }
        if (c->progress_ms && c->paused && now >= last_touch(c) + MS(c->progress_ms) + v) {
            violation(s, "progress", 0,
                      "client%u on agent%u, paused, holds %s untouched for %" PRIu64
                      " ms (progress_ms %u, TTL %u ms), still valid",
                      c->id, c->ag->id, s->names[c->lease_name], (now - last_touch(c)) / 1000000,
                      c->progress_ms, c->lease_ttl);
            return;
        }
    }
}

/* A handoff passes the key of the agent's last grant from the store to a
 * local waiter: within cohort_handoffs of that grant, with the next token of
 * the block its acquire reserved, before cohort_ms from that acquire's send
 * (docs/protocol.md, "Cohort handoff"). */
static void check_handoff(struct agent *ag, unsigned name, const struct sclient *c, uint64_t fence)
{
    struct sim *s = ag->s;
    struct cohort_rec *co = &ag->cohort[name];
    uint64_t now = agent_now(ag);
    if (strncmp(co->token, ag->released_token[name], 32) != 0) {
        violation(s, "cohort", 0,
                  "agent%u hands %s to client%u with a key its last grant from the store did "
                  "not take",
                  ag->id, s->names[name], c->id);
        return;
    }
    co->handoffs++;
    if (co->handoffs == co->block)
        s->res->cov[COV_BLOCK_END]++;
    if (co->handoffs > co->block || co->handoffs > ag->cfg.cohort_handoffs)
        violation(s, "cohort", 0,
                  "agent%u hands %s to client%u: handoff %u of a grant whose acquire reserved %u "
                  "(cohort_handoffs %u)",
                  ag->id, s->names[name], c->id, co->handoffs, co->block, ag->cfg.cohort_handoffs);
    else if (fence != co->fence0 + co->handoffs)
        violation(s, "cohort", 0,
                  "agent%u hands %s to client%u with token %" PRIu64
                  ", not the next of the reserved block (%" PRIu64 ")",
                  ag->id, s->names[name], c->id, fence, co->fence0 + co->handoffs);
    else if (now + MS(ag->released_ttl[name]) / 2 >= ag->released_deadline[name])
        violation(s, "cohort", 0,
                  "agent%u hands %s to client%u from a lease with %" PRId64
                  " ms left, not more than half its TTL (%u ms)",
                  ag->id, s->names[name], c->id,
                  ((int64_t)ag->released_deadline[name] - (int64_t)now) / 1000000,
                  ag->released_ttl[name]);
    else if (now >= co->sent_at + MS(ag->cfg.cohort_ms))
        violation(s, "cohort", 0,
                  "agent%u hands %s to client%u %" PRIu64
                  " ms after the acquire of its key was sent, past cohort_ms (%u)",
                  ag->id, s->names[name], c->id, (now - co->sent_at) / 1000000, ag->cfg.cohort_ms);
}

/* A shared request joins the local holders' grant from the store (their
 * permit): the agent's last grant of the name from the store was shared, a
 * local holder of its permit has more than half its TTL left, and the join
 * takes the next token of the block reserved with that grant, within
 * cohort_handoffs and before cohort_ms from its acquire's send
 * (docs/protocol.md, "Cohort handoff"). */
static void check_join(struct agent *ag, unsigned name, const struct sclient *c, uint64_t fence)
{
    struct sim *s = ag->s;
    struct cohort_rec *co = &ag->cohort[name];
    uint64_t now = agent_now(ag);
    s->res->cov[COV_JOIN]++;
    if (co->kind != LOCK_SHARED) {
        violation(s, "cohort", 0,
                  "agent%u joins client%u to %s, whose last grant from the store was not shared",
                  ag->id, c->id, s->names[name]);
        return;
    }
    const struct sclient *src = NULL;
    for (unsigned i = 0; i < s->nclients && !src; i++) {
        const struct sclient *h = &s->clients[i];
        const struct page_slot *p = &h->page[h->lease_slot < SIM_PAGE_SLOTS ? h->lease_slot : 0];
        if (h->ag == ag && h->state == C_HOLDING && !h->lost_seen && h->lease_name == name &&
            strncmp(h->lease_token, co->token, 32) == 0 && p->lease_id == h->lease_id &&
            p->state == DLOCK_STATE_HELD && p->deadline > now + MS(h->lease_ttl) / 2)
            src = h;
    }
    co->handoffs++;
    if (co->handoffs == co->block)
        s->res->cov[COV_BLOCK_END]++;
    if (co->handoffs > co->block || co->handoffs > ag->cfg.cohort_handoffs)
        violation(s, "cohort", 0,
                  "agent%u joins client%u to %s: join %u of a grant whose acquire reserved %u "
                  "(cohort_handoffs %u)",
                  ag->id, c->id, s->names[name], co->handoffs, co->block, ag->cfg.cohort_handoffs);
    else if (fence != co->fence0 + co->handoffs)
        violation(s, "cohort", 0,
                  "agent%u joins client%u to %s with token %" PRIu64
                  ", not the next of the reserved block (%" PRIu64 ")",
                  ag->id, c->id, s->names[name], fence, co->fence0 + co->handoffs);
    else if (!src)
        violation(s, "cohort", 0,
                  "agent%u joins client%u to %s, and no local holder of its permit has more than "
                  "half its TTL left",
                  ag->id, c->id, s->names[name]);
    else if (now >= co->sent_at + MS(ag->cfg.cohort_ms))
        violation(s, "cohort", 0,
                  "agent%u joins client%u to %s %" PRIu64
                  " ms after the acquire of its permit was sent, past cohort_ms (%u)",
                  ag->id, c->id, s->names[name], (now - co->sent_at) / 1000000, ag->cfg.cohort_ms);
}

/* Makes room in a growing array of *cap elements of size bytes for one
 * more after the n it holds. */
static void room_for(size_t n, size_t *cap, void **array, size_t size)
{
    if (n < *cap)
        return;
    size_t more = *cap ? *cap * 2 : 64;
    void *p = realloc(*array, more * size);
    if (!p) {
        fprintf(stderr, "dlock-sim: out of memory\n");
        exit(2);
    }
    *array = p;
    *cap = more;
}

/* A handoff or a join is valid no longer than the lease whose key it takes
 * (the released one, or the local holders of the permit), which rests on a
 * confirmation of its own TTL: the key-life check's allowance for a node
 * that lost data since (node_holds()) lasts that long. */
static void key_ttl_from(struct agent *ag, struct sclient *c, unsigned name)
{
    struct sim *s = ag->s;
    if (c->lease_kind != LOCK_SHARED && ag->released_ttl[name] > c->key_ttl)
        c->key_ttl = ag->released_ttl[name];
    for (unsigned i = 0; i < s->nclients && c->lease_kind == LOCK_SHARED; i++) {
        const struct sclient *o = &s->clients[i];
        if (o != c && o->ag == ag && o->state == C_HOLDING && o->lease_name == name &&
            strncmp(o->lease_token, c->lease_token, 32) == 0 && o->key_ttl > c->key_ttl)
            c->key_ttl = o->key_ttl;
    }
}

/* Sets the terms of c's new lease on name, for the checks above and the
 * event contract; a grant from the store starts a cohort. */
static void lease_terms(struct agent *ag, struct sclient *c, unsigned name,
                        const struct wire_granted *g, bool from_store)
{
    struct sim *s = ag->s;
    c->grant_at = agent_now(ag);
    c->lease_ttl = c->key_ttl = g->ttl_ms;
    c->hold_ms =
        hold_bound(c->acq_max_hold, ag->cfg.default_max_hold_ms, ag->cfg.max_hold_limit_ms);
    c->progress_ms =
        hold_bound(c->acq_progress, ag->cfg.default_progress_ms, ag->cfg.progress_limit_ms);
    c->lost_seen = c->jeopardy_seen = c->held_due = c->release_due = false;
    c->stopped = c->doubt_renew = false;
    c->adopt_pending = c->adopt_renew = false;
    c->progress_from = 0;
    c->rn_count = c->rn_inflight = 0;
    if (from_store) {
        struct cohort_rec *co = &ag->cohort[name];
        co->kind = c->lease_kind;
        bool known = strncmp(ag->acq[name].token, ag->watch_token, 32) == 0;
        memcpy(co->token, ag->watch_token, 33);
        co->sent_at = known ? ag->acq[name].sent_at : c->grant_at;
        co->sent_vt = known ? ag->acq[name].sent_vt : s->now;
        co->wall_us = known ? ag->acq[name].wall_us : agent_wall_us(ag);
        co->block = known ? ag->acq[name].block : 0;
        co->fence0 = g->fence;
        co->handoffs = 0;
        c->hold_from = co->sent_at;
        c->key_since = co->sent_vt;
    } else {
        if (c->lease_kind == LOCK_SHARED)
            check_join(ag, name, c, g->fence);
        else
            check_handoff(ag, name, c, g->fence);
        key_ttl_from(ag, c, name);
        c->hold_from = c->grant_at;
        c->key_since = ag->cohort[name].sent_vt;
    }
    room_for(s->ngrants, &s->grants_cap, (void **)&s->grants, sizeof *s->grants);
    memcpy(s->grants[s->ngrants].token, c->lease_token, 33);
    s->grants[s->ngrants++].at = s->now;
}

/* Was a lease with this token granted at or after virtual time t? */
static bool granted_since(const struct sim *s, const char *token, uint64_t t)
{
    for (size_t i = s->ngrants; i-- > 0 && s->grants[i].at >= t;)
        if (strncmp(s->grants[i].token, token, 32) == 0)
            return true;
    return false;
}

/* ---- releases reach every node ----
 *
 * Every release the core sends (of a lease, a kept key, or the withdraw of
 * an acquire) is retried until each node has confirmed it, until the key
 * would have expired by itself (docs/quorum.md, "Release and waiting";
 * docs/protocol.md). So a key with a released token may stay on a node only
 * while the link to that node is unusable, and for RELEASE_SLACK after it
 * is usable again: the core's one-second retry and a round trip. */
#define RELEASE_SLACK MS(1200)
#define RELEASE_STEP  MS(100)

int sim_release_sent(struct agent *ag, const struct backend_req *req)
{
    struct sim *s = ag->s;
    int n = sim_name_index(s, req->name, req->len);
    if (n < 0 || !req->token || !ag->core_live)
        return -1;
    for (unsigned i = 0; i < s->nclients; i++)
        if (s->clients[i].ag == ag && strncmp(s->clients[i].lease_token, req->token, 32) == 0)
            s->clients[i].release_due = false;
    /* Once per token: its retries are the same release. */
    for (size_t i = s->nintents; i-- > 0 && s->now - s->intents[i].at < MS(3000);)
        if (s->intents[i].agent == ag->id && !s->intents[i].dead &&
            strncmp(s->intents[i].token, req->token, 32) == 0) {
            s->intents[i].inflight++;
            return (int)i;
        }
    room_for(s->nintents, &s->intents_cap, (void **)&s->intents, sizeof *s->intents);
    struct rel_intent *ri = &s->intents[s->nintents];
    memset(ri, 0, sizeof *ri);
    memcpy(ri->token, req->token, 32);
    ri->agent = ag->id;
    ri->name = (unsigned)n;
    ri->at = s->now;
    /* The core gives up a TTL after it first sends (the key's own TTL ran
     * from before then); the longest TTL bounds it. */
    ri->give_up = agent_now(ag) + MS(ag->cfg.max_ttl_ms);
    ri->inflight = 1;
    ev_push(s, s->now + RELEASE_SLACK, EV_RELEASE_CHECK, (uint32_t)s->nintents, 0, NULL);
    return (int)s->nintents++;
}

/* An attempt of the release was answered (the core retries a failed one
 * when its store comes back, or a second later). */
void sim_release_answered(struct sim *s, int intent)
{
    if (intent < 0 || (size_t)intent >= s->nintents)
        return;
    struct rel_intent *ri = &s->intents[intent];
    if (ri->inflight)
        ri->inflight--;
    ri->done_at = s->now;
}

/* Is the link usable now: connected, the node up and answering, nothing in
 * the way, its agent running and (sentinel) talking to the current master? */
static bool link_usable(const struct sim *s, const struct link *l)
{
    return l->connected && !l->partitioned && l->lag == 0 && l->nd->up && !l->nd->stalled &&
           l->ag->paused_until <= s->now && l->known_gen == l->nd->master_gen;
}

static void track_links(struct sim *s)
{
    for (unsigned i = 0; i < s->nagents * s->nnodes; i++) {
        bool ok = link_usable(s, &s->links[i]);
        if (!ok)
            s->healthy_since[i] = UINT64_MAX;
        else if (s->healthy_since[i] == UINT64_MAX)
            s->healthy_since[i] = s->now;
    }
}

static bool late_token(const struct sim *s, const char *v);

#define MAX_U64(a, b) ((a) > (b) ? (a) : (b))

static void check_release(struct sim *s, unsigned idx)
{
    struct rel_intent *ri = &s->intents[idx];
    struct agent *ag = &s->agents[ri->agent];
    if (ri->dead || agent_now(ag) >= ri->give_up || late_token(s, ri->token))
        return;
    bool pending = false;
    for (unsigned n = 0; n < s->nnodes; n++) {
        struct node *nd = &s->nodes[n];
        if (nd->failover_at >= ri->at)
            continue; /* keys may have come back (X_RESURRECT) */
        if (s->cluster && !cluster_serves(s, ri->name, n))
            continue; /* a key left in a slot the node no longer serves: nobody reads it */
        /* The key outlives the core's retries (X_STEP_BACK): its node's
         * clock stepped back, or in cluster mode the clock of the node a
         * slot move brought it from (MIGRATE carries the TTL left). */
        uint64_t back = nd->stepped_back_at;
        for (unsigned o = 0; s->cluster && o < s->nnodes; o++)
            back = MAX_U64(back, s->nodes[o].stepped_back_at);
        if (back && back + MS(ag->cfg.max_ttl_ms) >= ri->at)
            continue;
        const struct rkey *k = node_key(nd, s->lock_keys[ri->name]);
        if (!k || !node_key_holds(nd, k, ri->token))
            continue;
        /* Usable since: the latest of the link to the node coming up
         * (cluster mode: every link, since the release may have to follow
         * the slot to its new owner; UINT64_MAX, the largest, while one is
         * down), the release, the key coming to the node (a slot move
         * brings it) and the last attempt's answer; never while an attempt
         * is unanswered (in quorum mode one node's silence holds it until
         * its watchdog fires). */
        uint64_t since = s->healthy_since[ri->agent * s->nnodes + n];
        for (unsigned o = 0; s->cluster && o < s->nnodes; o++)
            since = MAX_U64(since, s->healthy_since[ri->agent * s->nnodes + o]);
        since = MAX_U64(MAX_U64(since, ri->at), MAX_U64(k->set_at, ri->done_at));
        if (ri->inflight)
            since = UINT64_MAX;
        if (since != UINT64_MAX && s->now - since >= RELEASE_SLACK) {
            violation(s, "release", 0,
                      "agent%u released %s (token %.8s) %" PRIu64
                      " ms ago; node%u still holds the key, reachable for %" PRIu64 " ms",
                      ri->agent, s->names[ri->name], ri->token, (s->now - ri->at) / 1000000, n,
                      (s->now - since) / 1000000);
            return;
        }
        pending = true;
    }
    if (pending) {
        if (s->now - ri->at <= RELEASE_SLACK)
            s->res->cov[COV_RELEASE_LAG]++;
        ev_push(s, s->now + RELEASE_STEP, EV_RELEASE_CHECK, idx, 0, NULL);
    }
}

/* A shared or semaphore grant: its token above every earlier exclusive
 * grant's (unless it overlaps a valid exclusive lease, a breach of mutual
 * exclusion), and never one an earlier counted grant of the name had but
 * in quorum mode: there two readers of different hosts, granted at once on
 * two majorities, may take the same largest proposal (docs/fencing.md). */
static void check_counted_fence(struct sim *s, struct agent *ag, struct sclient *c, unsigned name,
                                uint64_t fence, bool overlap)
{
    uint64_t floor = ag->cohort[name].wall_us;
    for (size_t i = s->ncgrants; i-- > 0 && !s->quorum;) {
        const struct cgrant *g = &s->cgrants[i];
        if (g->name != name || g->fence != fence)
            continue;
        fence_excuse_from(s, g->at, g->sent, g->fence, floor);
        violation(s, "fencing", EXCUSE_FENCE,
                  "grant of %s to client%u on agent%u has token %" PRIu64 ", which a grant %" PRIu64
                  " ms before had too",
                  s->names[name], c->id, ag->id, fence, (s->now - g->at) / 1000000);
        break;
    }
    room_for(s->ncgrants, &s->cgrants_cap, (void **)&s->cgrants, sizeof *s->cgrants);
    s->cgrants[s->ncgrants++] =
        (struct cgrant){.name = name, .fence = fence, .at = s->now, .sent = c->key_since};
    if (!overlap && s->excl_seen[name] && fence <= s->excl_fence[name]) {
        fence_excuse_from(s, s->excl_fence_at[name], s->excl_fence_sent[name], s->excl_fence[name],
                          floor);
        violation(s, "fencing", EXCUSE_FENCE,
                  "grant of %s (%s) to client%u on agent%u has token %" PRIu64
                  ", not above the earlier exclusive grant's %" PRIu64,
                  s->names[name], c->lease_kind == LOCK_SHARED ? "shared" : "semaphore", c->id,
                  ag->id, fence, s->excl_fence[name]);
        /* Excused: from here on the tokens of the new marks count. */
        s->excl_seen[name] = false;
        s->last_fence[name] = 0;
    }
    if (!s->fence_seen[name] || fence > s->last_fence[name]) {
        s->last_fence[name] = fence;
        s->last_fence_at[name] = s->now;
        s->last_fence_sent[name] = c->key_since;
    }
}

/* Fencing order per kind (docs/fencing.md): an exclusive grant's token is
 * above every earlier grant's of the name, of any kind; a shared or
 * semaphore grant's above every earlier exclusive grant's, and unique.
 * Grants whose leases overlap a lease they must exclude are left to mutual
 * exclusion: tokens follow the order of the acquires on Redis, grants that
 * order only while exclusion holds. */
static void check_fence(struct sim *s, struct agent *ag, struct sclient *c, unsigned name,
                        uint64_t fence)
{
    bool excl = c->lease_kind == LOCK_EXCLUSIVE, overlap = false;
    for (unsigned i = 0; i < s->nclients; i++) {
        const struct sclient *o = &s->clients[i];
        uint64_t d;
        overlap |= o != c && o->lease_name == name && lease_valid(o, &d) &&
                   (excl || o->lease_kind == LOCK_EXCLUSIVE);
    }
    if (!excl) {
        check_counted_fence(s, ag, c, name, fence, overlap);
    } else if (overlap) {
        if (fence > s->last_fence[name]) {
            s->last_fence[name] = fence;
            s->last_fence_at[name] = s->now;
            s->last_fence_sent[name] = c->key_since;
        }
    } else if (s->fence_seen[name] && fence <= s->last_fence[name]) {
        fence_excuse(s, name, ag->cohort[name].wall_us);
        violation(s, "fencing", EXCUSE_FENCE,
                  "grant of %s to client%u on agent%u has token %" PRIu64
                  ", not above the previous grant's %" PRIu64,
                  s->names[name], c->id, ag->id, fence, s->last_fence[name]);
    }
    s->fence_seen[name] = true;
    if (excl && !overlap) {
        s->last_fence[name] = fence;
        s->last_fence_at[name] = s->now;
        s->last_fence_sent[name] = c->key_since;
    }
    if (excl && (!overlap || fence > s->excl_fence[name])) {
        s->excl_seen[name] = true;
        s->excl_fence[name] = fence;
        s->excl_fence_at[name] = s->now;
        s->excl_fence_sent[name] = c->key_since;
    }
}

/* A re-entrant acquire of the lease c holds: the same lease, its token
 * and fence unchanged, one more hold. */
static void reentry_granted(struct agent *ag, struct sclient *c, const struct wire_granted *g)
{
    struct sim *s = ag->s;
    c->side_pending = false;
    if (!c->side_reenter) {
        violation(s, "protocol", 0,
                  "client%u holds %s and was granted it again without a re-entrant acquire", c->id,
                  s->names[c->lease_name]);
        return;
    }
    s->digest = (s->digest ^ g->fence) * 0x100000001b3ull;
    s->res->cov[COV_REENTER]++;
    if (g->lease_id != c->lease_id || g->fence != c->lease_fence || g->slot != c->lease_slot)
        violation(s, "re-entry", 0,
                  "client%u's re-entrant acquire of %s got lease %" PRIx64 " (token %" PRIu64
                  "), not the lease it holds (%" PRIx64 ", token %" PRIu64 ")",
                  c->id, s->names[c->lease_name], g->lease_id, g->fence, c->lease_id,
                  c->lease_fence);
    c->holds++;
}

/* Is any other client of ag holding a semaphore permit of name? */
static bool permit_beside(const struct sim *s, const struct agent *ag, const struct sclient *c,
                          unsigned name)
{
    for (unsigned i = 0; i < s->nclients; i++) {
        const struct sclient *o = &s->clients[i];
        if (o != c && o->ag == ag && o->state == C_HOLDING && !o->lost_seen &&
            o->lease_name == name && o->lease_kind == LOCK_SEMAPHORE)
            return true;
    }
    return false;
}

static void env_granted(void *arg, struct core_client *cc, uint32_t req_id,
                        const struct wire_granted *g)
{
    struct agent *ag = arg;
    struct sim *s = ag->s;
    struct sclient *c = client_of(cc);
    if (s->stop || !ag->core_live)
        return;
    if (c->side_pending && req_id == c->side_req) {
        reentry_granted(ag, c, g);
        return;
    }
    s->res->grants++;
    s->digest = (s->digest ^ g->fence) * 0x100000001b3ull;
    TRACE(s,
          "agent%u: GRANTED %s to client%u (req %u, lease %" PRIx64 ", fence %" PRIu64
          ", valid %" PRId64 " ms)",
          ag->id, s->names[c->acq_name], c->id, req_id, g->lease_id, g->fence,
          ((int64_t)g->deadline_ns - (int64_t)agent_now(ag)) / 1000000);
    if (c->state != C_WAITING || req_id != c->acq_req) {
        violation(s, "protocol", 0, "client%u granted request %u it is not waiting for", c->id,
                  req_id);
        return;
    }
    unsigned name = c->acq_name;
    if (c->acq_set) {
        violation(s, "multi-name", 0,
                  "client%u was granted %s, one of a set of names, which the agent does not take "
                  "all or nothing",
                  c->id, s->names[name]);
        return;
    }
    /* The first grant in an acquire's answer is the store's; any other is
     * a handoff of a kept key (exclusive) or a join of the local holders'
     * permit (shared). */
    bool from_store = ag->watch_token && !ag->watch_granted;
    ag->watch_granted = true;
    s->wake_due[ag->id][name] = 0;
    c->lease_kind = c->acq_kind;
    c->lease_permits = c->acq_permits;
    c->lease_flags = c->acq_flags;
    c->lease_owner = c->acq_owner;
    if (from_store)
        memcpy(c->lease_token, ag->watch_token, 33);
    else if (c->lease_kind == LOCK_SHARED)
        memcpy(c->lease_token, ag->cohort[name].token, 33);
    else
        memcpy(c->lease_token, ag->released_token[name], 33);
    if (c->lease_kind == LOCK_SEMAPHORE && !from_store)
        violation(s, "permits", 0,
                  "agent%u granted client%u a permit of %s without the store's answer", ag->id,
                  c->id, s->names[name]);
    if (c->lease_kind == LOCK_SEMAPHORE && permit_beside(s, ag, c, name))
        s->res->cov[COV_SEM_BESIDE]++;
    lease_terms(ag, c, name, g, from_store);
    if (g->deadline_ns <= agent_now(ag))
        violation(s, "validity", 0,
                  "agent%u granted %s to client%u with no validity left (deadline %" PRId64
                  " ms ago)",
                  ag->id, s->names[name], c->id,
                  ((int64_t)agent_now(ag) - (int64_t)g->deadline_ns) / 1000000);
    int idx = fifo_find(ag, c);
    if (idx > 0) {
        const struct fifo_ent *first = &ag->fifo[name][0];
        violation(s, "fifo", 0,
                  "agent%u granted %s to client%u (req %u) before client%u (req %u), which "
                  "asked first",
                  ag->id, s->names[name], c->id, req_id, first->client, first->req);
    }
    if (idx >= 0)
        fifo_remove(ag, name, (unsigned)idx);
    check_fence(s, ag, c, name, g->fence);
    c->state = C_HOLDING;
    c->lease_id = g->lease_id;
    c->lease_slot = g->slot;
    c->lease_fence = g->fence;
    c->lease_name = name;
    c->releasing_sent = false;
    c->doubted = false;
    c->holds = 1;
    c->reenter_left = 0;
    if (c->set_lead >= 0) {
        c->paused = false;
        c->lease_ttl = g->ttl_ms;
        client_next(&s->clients[c->set_lead], 0);
        return;
    }
    /* Hold for a while, now and then far beyond plan without touching the
     * lease (a paused process); now and then crash while holding. */
    uint64_t ttl = MS(g->ttl_ms), hold;
    c->paused = rng_chance(&s->rng, 10);
    if (c->paused) {
        c->pause_touch = agent_now(ag);
        hold = rng_range(&s->rng, 3 * ttl, 8 * ttl);
    } else {
        hold = rng_chance(&s->rng, 30) ? rng_range(&s->rng, 0, MS(20))
                                       : rng_range(&s->rng, 0, 2 * ttl);
    }
    /* A re-entrant lease is taken again a few times, then released as many
     * times (one hold each time). */
    if (c->lease_flags & WIRE_ACQ_REENTRANT) {
        c->reenter_left = (unsigned)rng_range(&s->rng, 0, 3);
        hold /= c->reenter_left + 1;
    }
    if (rng_chance(&s->rng, 5))
        client_crash_at(c, rng_range(&s->rng, 0, hold));
    else
        client_next(c, hold);
}

/* The counted kinds a name is asked for as: 0 shared, N a semaphore of N. */
static unsigned kind_sig(uint8_t kind, uint32_t permits)
{
    return kind == LOCK_SHARED ? 0 : permits < SIM_KIND_SIGS ? permits : SIM_KIND_SIGS - 1;
}

/* A waiter's counted acquire refused: DLOCK_EINVAL where the agent's store
 * does not keep its kind (docs/redis.md) or for a set of names (one name
 * per acquire), DLOCK_EKIND where the name is
 * held or waited for as another counted kind, or with other permits: some
 * client asked for one (or held one) lately, within two of the longest
 * TTLs (a permit may outlive its holder by a TTL). */
static void kind_refused(struct agent *ag, struct sclient *c, int code)
{
    struct sim *s = ag->s;
    unsigned n = c->acq_name, mine = kind_sig(c->acq_kind, c->acq_permits);
    bool ok = false;
    if (code == DLOCK_EINVAL) {
        ok = c->acq_set || !(ag->seam->kinds & BACKEND_KIND(c->acq_kind));
        s->res->cov[COV_REFUSED] += ok;
    } else {
        s->res->cov[COV_EKIND]++;
        for (unsigned k = 0; k < SIM_KIND_SIGS; k++)
            ok |= k != mine && s->kind_until[n][k] &&
                  s->kind_until[n][k] + 2 * MS(ag->cfg.max_ttl_ms) >= s->now;
    }
    if (!ok) {
        violation(s, "protocol", 0,
                  "client%u's acquire of %s as %s%.0u on agent%u failed: %s, and no other kind "
                  "of %s was asked for lately",
                  c->id, s->names[n], c->acq_kind == LOCK_SHARED ? "shared" : "a semaphore of ",
                  c->acq_permits, ag->id, dlock_strerror(code), s->names[n]);
        return;
    }
    c->state = C_IDLE;
    client_next(c, rng_range(&s->rng, 0, MS(300)));
}

/* Notes which counted kinds are asked for or held now (for DLOCK_EKIND). */
static void note_kinds(struct sim *s)
{
    for (unsigned i = 0; i < s->nclients; i++) {
        const struct sclient *c = &s->clients[i];
        if (c->state == C_WAITING && c->acq_kind != LOCK_EXCLUSIVE)
            s->kind_until[c->acq_name][kind_sig(c->acq_kind, c->acq_permits)] = s->now;
        else if (c->state == C_HOLDING && c->lease_kind != LOCK_EXCLUSIVE)
            s->kind_until[c->lease_name][kind_sig(c->lease_kind, c->lease_permits)] = s->now;
    }
}

static void env_error(void *arg, struct core_client *cc, uint32_t req_id, int code, const char *msg)
{
    struct agent *ag = arg;
    struct sim *s = ag->s;
    struct sclient *c = client_of(cc);
    if (s->stop || !ag->core_live)
        return;
    TRACE(s, "agent%u: client%u req %u: %s", ag->id, c->id, req_id, msg);
    if (c->side_pending && req_id == c->side_req) {
        /* A plain acquire of the name it holds: DLOCK_EHELD, at once. */
        c->side_pending = false;
        if (c->side_reenter || code != DLOCK_EHELD)
            violation(s, c->side_reenter ? "re-entry" : "protocol", 0,
                      "client%u's %s acquire of %s, which it holds, failed: %s", c->id,
                      c->side_reenter ? "re-entrant" : "plain", s->names[c->lease_name],
                      dlock_strerror(code));
        return;
    }
    if (c->state == C_WAITING && req_id == c->acq_req) {
        int idx = fifo_find(ag, c);
        if (idx >= 0)
            fifo_remove(ag, c->acq_name, (unsigned)idx);
        if (code == DLOCK_ECANCELED || c->cancelling) {
            if (code != DLOCK_ECANCELED || !c->cancelling)
                violation(s, "protocol", 0, "client%u's acquire of %s answered %s %s its cancel",
                          c->id, s->names[c->acq_name], dlock_strerror(code),
                          c->cancelling ? "to" : "without");
            c->cancelling = false;
            c->state = C_IDLE;
            client_next(c, rng_range(&s->rng, 0, MS(300)));
            return;
        }
        if (code == DLOCK_EKIND || (code == DLOCK_EINVAL && (c->acq_kind || c->acq_set))) {
            kind_refused(ag, c, code);
            return;
        }
        bool outage = code == DLOCK_EUNAVAIL || code == DLOCK_ENOQUORUM;
        /* A waiter rides out an outage within its own wait, and up to an
         * outage_wait_ms ceiling if there is one (measured from the store's
         * first failure since it last answered an acquire or came back); one
         * with a wait of its own may end with the outage's error when its
         * wait runs out first. One that waits for ever under no ceiling
         * never fails on an outage. */
        uint64_t down = ag->down_since ? agent_now(ag) - ag->down_since : 0;
        bool ridden = ag->down_since && ag->cfg.outage_wait_ms != CONFIG_OUTAGE_NONE &&
                      down >= MS(ag->cfg.outage_wait_ms);
        bool ok;
        if (c->acq_wait_ms < 0)
            ok = outage && ridden && (!fault_free(s) || !store_came_up(ag));
        else if (c->acq_wait_ms == 0)
            ok = code == DLOCK_EBUSY || outage;
        else
            ok = code == DLOCK_ETIMEDOUT || (outage && ag->down_since);
        if (ok && c->acq_wait_ms < 0)
            s->res->cov[COV_OUTAGE_FAIL]++;
        if (!ok) {
            violation(s, outage ? "liveness" : "protocol", 0,
                      "client%u's acquire of %s (wait %" PRId64 " ms) on agent%u failed: %s%s "
                      "(the store failing for %" PRIu64 " ms, outage_wait_ms %u)",
                      c->id, s->names[c->acq_name], c->acq_wait_ms, ag->id, dlock_strerror(code),
                      fault_free(s) && outage ? " in a schedule without faults" : "",
                      down / 1000000, ag->cfg.outage_wait_ms);
            return;
        }
        c->state = C_IDLE;
        if (c->set_lead >= 0) {
            client_next(&s->clients[c->set_lead], 0);
            return;
        }
        client_next(c, rng_range(&s->rng, 0, MS(300)));
        return;
    }
    if (c->state == C_RELEASING && req_id == c->rel_req) {
        c->rel_answered = true;
        if (code != DLOCK_ENOTFOUND)
            violation(s, "protocol", 0, "client%u's release failed: %s", c->id,
                      dlock_strerror(code));
        return;
    }
    violation(s, "protocol", 0, "client%u got error %s for request %u it did not expect", c->id,
              dlock_strerror(code), req_id);
}

static void env_ok(void *arg, struct core_client *cc, uint32_t req_id)
{
    struct agent *ag = arg;
    struct sclient *c = client_of(cc);
    if (ag->s->stop || !ag->core_live)
        return;
    c->rel_answered |= req_id == c->rel_req;
    if (c->state != C_RELEASING || req_id != c->rel_req)
        violation(ag->s, "protocol", 0, "client%u got OK for request %u it did not expect", c->id,
                  req_id);
}

static void check_event(struct agent *ag, struct sclient *c, const struct wire_event *ev);

static void env_event(void *arg, struct core_client *cc, const struct wire_event *ev)
{
    struct agent *ag = arg;
    struct sim *s = ag->s;
    struct sclient *c = client_of(cc);
    if (!ag->core_live)
        return;
    check_event(ag, c, ev);
    TRACE(s, "agent%u: client%u lease %" PRIx64 " %s (%s)", ag->id, client_of(cc)->id, ev->lease_id,
          ev->state == DLOCK_STATE_HELD       ? "HELD"
          : ev->state == DLOCK_STATE_JEOPARDY ? "JEOPARDY"
                                              : "LOST",
          ev->reason ? dlock_strerror(ev->reason) : "ok");
}

/* Does another local holder share c's permit (a shared grant's)? */
static bool permit_shared(const struct sim *s, const struct sclient *c)
{
    for (unsigned i = 0; i < s->nclients && c->lease_kind == LOCK_SHARED; i++) {
        const struct sclient *o = &s->clients[i];
        if (o != c && o->ag == c->ag && (o->state == C_HOLDING || o->rel_nonlast) &&
            !o->lost_seen && o->lease_name == c->lease_name &&
            strncmp(o->lease_token, c->lease_token, 32) == 0)
            return true;
    }
    return false;
}

/* How many of the nodes that serve c's name hold its key with its token
 * now, and whether that is enough for its lease (one node; in quorum mode a
 * majority): a strict read, without node_holds()'s allowance for a loss. */
static bool key_kept(struct sim *s, const struct sclient *c, unsigned *on)
{
    *on = 0;
    for (unsigned n = 0; n < s->nnodes; n++) {
        const struct node *nd = &s->nodes[n];
        const struct rkey *k = node_key(nd, s->lock_keys[c->lease_name]);
        *on += (!s->cluster || cluster_serves(s, c->lease_name, n)) && k &&
               k->hash == (c->lease_kind != LOCK_EXCLUSIVE) &&
               node_key_holds(nd, k, c->lease_token);
    }
    return s->quorum ? *on * 2 > s->nnodes : *on > 0;
}

/* A lease taken over was LOST before a renewal of its successor confirmed
 * it: "not yours" only when its key is gone or another's, any other reason
 * (the store unreachable) only at the predecessor's deadline. The lease is
 * LOST exactly when it did not come back in time. */
static void adopt_lost(struct agent *ag, struct sclient *c, const struct wire_event *ev)
{
    struct sim *s = ag->s;
    uint64_t now = agent_now(ag);
    unsigned on;
    c->adopt_pending = false;
    s->res->cov[COV_ADOPT_LOST]++;
    if (ev->reason == DLOCK_ELOST) {
        if (key_kept(s, c, &on))
            violation(s, "liveness", X_RESURRECT,
                      "client%u's lease on %s, taken over by agent%u's successor, was LOST (not "
                      "yours) while its key holds its token on %u of %u node(s)",
                      c->id, s->names[c->lease_name], ag->id, on, s->nnodes);
    } else if (now < c->adopt_deadline) {
        violation(
            s, "liveness", 0,
            "client%u's lease on %s, taken over by agent%u's successor, was LOST (%s) %" PRIu64
            " ms before the predecessor's deadline",
            c->id, s->names[c->lease_name], ag->id, dlock_strerror(ev->reason),
            (c->adopt_deadline - now) / 1000000);
    }
}

/* The event contract (docs/protocol.md, "Events"): events come for the
 * lease the client holds, none after LOST, and a LOST at the deadline (not
 * a renewal's "not yours") comes after a JEOPARDY, unless the agent was
 * stopped when that JEOPARDY fell due. */
static void check_event(struct agent *ag, struct sclient *c, const struct wire_event *ev)
{
    struct sim *s = ag->s;
    if (s->stop)
        return;
    if (c->state != C_HOLDING || ev->lease_id != c->lease_id) {
        violation(s, "events", 0,
                  "client%u got an event for lease %" PRIx64 ", which it does not hold", c->id,
                  ev->lease_id);
        return;
    }
    const char *name = s->names[c->lease_name];
    if (c->lost_seen) {
        violation(s, "events", 0, "client%u got an event for its lease on %s after LOST", c->id,
                  name);
        return;
    }
    uint64_t now = agent_now(ag);
    if (ev->state == DLOCK_STATE_JEOPARDY) {
        c->jeopardy_seen = true;
        if (ev->reason == DLOCK_EHOLDLIMIT || ev->reason == DLOCK_ESTALLED) {
            s->res->cov[COV_HOLD_STOP]++;
            c->stopped = true;
        }
        if (ev->reason == DLOCK_ESTALLED && !c->paused)
            violation(s, "progress", 0,
                      "client%u touches its lease on %s all the time, and its renewal stopped as "
                      "stalled",
                      c->id, name);
        if (ev->reason == DLOCK_EHOLDLIMIT && now < c->hold_from + MS(c->hold_ms))
            violation(s, "bounded hold", 0,
                      "client%u's lease on %s stopped for its maximum hold %" PRIu64
                      " ms before it ran out",
                      c->id, name, (uint64_t)(c->hold_from + MS(c->hold_ms) - now) / 1000000);
    } else if (ev->state == DLOCK_STATE_HELD) {
        c->held_due = false;
        c->stopped = false;
        if (c->adopt_pending) {
            c->adopt_pending = false;
            s->res->cov[COV_ADOPT_HELD]++;
        }
        if (c->doubted && ag->confirm_token && ag->confirm_sent >= c->doubt_at &&
            strncmp(c->lease_token, ag->confirm_token, 32) == 0)
            c->doubted = false;
    } else if (ev->state == DLOCK_STATE_LOST) {
        c->lost_seen = true;
        s->res->cov[COV_LOST]++;
        /* The key may still be its: released at once (after "not yours",
         * only in quorum mode, from the nodes that renewed it), unless
         * another local holder shares its permit. */
        c->release_due = (ev->reason != DLOCK_ELOST || s->quorum) && !permit_shared(s, c);
        bool paused = ag->paused_until + MS(c->lease_ttl) > s->now;
        if (ev->reason != DLOCK_ELOST && !c->jeopardy_seen && !paused)
            violation(s, "events", 0,
                      "client%u's lease on %s was LOST (%s) with no JEOPARDY before it", c->id,
                      name, dlock_strerror(ev->reason));
        if (c->adopt_pending)
            adopt_lost(ag, c, ev);
    }
}

static uint32_t env_slot_alloc(void *arg, struct core_client *cc)
{
    struct agent *ag = arg;
    struct sclient *c = client_of(cc);
    if (!ag->core_live)
        return UINT32_MAX;
    for (uint32_t i = 0; i < SIM_PAGE_SLOTS; i++) {
        if (!c->page[i].used) {
            memset(&c->page[i], 0, sizeof c->page[i]);
            c->page[i].used = true;
            return i;
        }
    }
    return UINT32_MAX;
}

static void env_slot_free(void *arg, struct core_client *cc, uint32_t slot)
{
    struct agent *ag = arg;
    struct sclient *c = client_of(cc);
    /* The page of a process that has died (its agent restarts) stays as
     * it was: the page is a file, and nobody writes it meanwhile. */
    if (!ag->core_live)
        return;
    /* A lease leaves its page other than by its release or its
     * connection's close only after a LOST event. */
    if (!c->dropping && c->state == C_HOLDING && slot == c->lease_slot && !c->lost_seen &&
        slot < SIM_PAGE_SLOTS && c->page[slot].lease_id == c->lease_id && !ag->s->stop)
        violation(ag->s, "events", 0,
                  "client%u's lease on %s left its lease page without a LOST event", c->id,
                  ag->s->names[c->lease_name]);
    /* A re-entered lease stays until its last release (docs/protocol.md). */
    if (c->rel_nonlast && slot == c->lease_slot && !c->lost_seen && !ag->s->stop)
        violation(ag->s, "re-entry", 0,
                  "client%u's lease on %s, taken %u times, was released at a release that was "
                  "not its last",
                  c->id, ag->s->names[c->lease_name], c->holds);
    if (slot == c->lease_slot)
        c->slot_freed = true;
    if (slot < SIM_PAGE_SLOTS)
        memset(&c->page[slot], 0, sizeof c->page[slot]);
}

/* A lease taken over is shown in jeopardy with its fencing token, valid no
 * longer than the predecessor's deadline (with doubt, not valid at all),
 * until a renewal its successor sent finds its key (core.h, core_adopt()). */
static void check_takeover_page(struct agent *ag, const struct sclient *c, uint32_t state,
                                uint64_t fence, uint64_t deadline)
{
    struct sim *s = ag->s;
    uint64_t now = agent_now(ag);
    bool confirmed = ag->confirm_token && strncmp(ag->confirm_token, c->lease_token, 32) == 0 &&
                     ag->confirm_sent >= c->adopt_at;
    uint64_t limit = s->sentinel || s->cluster ? now : c->adopt_deadline;
    if (confirmed || s->stop ||
        (state == DLOCK_STATE_JEOPARDY && fence == c->lease_fence && deadline <= limit))
        return;
    violation(s, "takeover", 0,
              "client%u's lease on %s, taken over by agent%u's successor, shown %s (fence %" PRIu64
              ", %+" PRId64 " ms) before a renewal it sent found the key (the predecessor's "
              "deadline %+" PRId64 " ms, fence %" PRIu64 ")",
              c->id, s->names[c->lease_name], ag->id,
              state == DLOCK_STATE_HELD       ? "HELD"
              : state == DLOCK_STATE_JEOPARDY ? "JEOPARDY"
                                              : "?",
              fence, ((int64_t)deadline - (int64_t)now) / 1000000,
              ((int64_t)c->adopt_deadline - (int64_t)now) / 1000000, c->lease_fence);
}

static void env_slot_write(void *arg, struct core_client *cc, uint32_t slot, uint32_t state,
                           uint64_t lease_id, uint64_t fence, uint64_t deadline)
{
    struct agent *ag = arg;
    struct sclient *c = client_of(cc);
    if (slot >= SIM_PAGE_SLOTS || !ag->core_live)
        return;
    if (c->adopt_pending && slot == c->lease_slot && lease_id == c->lease_id)
        check_takeover_page(ag, c, state, fence, deadline);
    struct page_slot *p = &c->page[slot];
    if (c->state == C_HOLDING && slot == c->lease_slot && lease_id == c->lease_id &&
        p->lease_id == lease_id && p->state == DLOCK_STATE_JEOPARDY && state == DLOCK_STATE_HELD)
        c->held_due = true;
    p->state = state;
    p->lease_id = lease_id;
    p->fence = fence;
    p->deadline = deadline;
}

static uint64_t env_slot_touched(void *arg, struct core_client *cc, uint32_t slot)
{
    struct agent *ag = arg;
    struct sclient *c = client_of(cc);
    if (c->state == C_HOLDING && slot == c->lease_slot)
        return c->paused ? c->pause_touch : agent_now(ag);
    return slot < SIM_PAGE_SLOTS ? c->page[slot].touch : 0;
}

static int env_random(void *arg, uint64_t *out)
{
    struct agent *ag = arg;
    *out = rng_next(&ag->s->rng);
    return 0;
}

/* A grant on release's message: a lease the core grants from it is the
 * store's grant (as an acquire's answer is), sent when the keep-alive it
 * names was (the cohort check's record of the acquire, for the while). */
static void ag_grant(struct agent *ag, const char *name, size_t len, const struct backend_grant *g)
{
    struct sim *s = ag->s;
    int n = sim_name_index(s, name, len);
    const struct ka_rec *ka = &ag->ka[g->seq % CORE_KEEPALIVE_KEPT];
    if (n < 0 || ka->seq != g->seq || !ka->sent_at) {
        core_grant(&ag->core, name, len, g, agent_now(ag));
        return;
    }
    struct acq_rec saved = ag->acq[n];
    const char *watch = ag->watch_token;
    char token[33];
    memcpy(token, g->token, sizeof token);
    ag->acq[n] = (struct acq_rec){
        .sent_at = ka->sent_at, .sent_vt = ka->sent_vt, .wall_us = ka->wall_us, .block = g->block};
    memcpy(ag->acq[n].token, token, sizeof token);
    ag->watch_token = token;
    ag->watch_released = ag->watch_granted = false;
    uint64_t before = ag->core.stats.grants_by_release;
    core_grant(&ag->core, name, len, g, agent_now(ag));
    bool granted = ag->core.stats.grants_by_release != before;
    ag->watch_token = watch;
    if (granted)
        s->res->cov[COV_GRANT_BY_MESSAGE]++;
    else if (ag->acq[n].sent_vt == ka->sent_vt && ag->acq[n].sent_at == ka->sent_at)
        ag->acq[n] = saved; /* (unless the core asked the store at once) */
}

static void ag_notice(void *arg, const char *name, size_t len, const struct backend_grant *grant)
{
    struct agent *ag = arg;
    if (ag->core_live && grant)
        ag_grant(ag, name, len, grant);
    else if (ag->core_live)
        core_notice(&ag->core, name, len, agent_now(ag));
}

static void ag_subscribed(void *arg)
{
    struct agent *ag = arg;
    if (ag->core_live)
        core_resubscribed(&ag->core, agent_now(ag));
}

static void ag_unsubscribed(void *arg)
{
    struct agent *ag = arg;
    if (ag->core_live)
        core_unsubscribed(&ag->core, agent_now(ag));
}

static void ag_unwatched(void *arg, const char *name, size_t len)
{
    struct agent *ag = arg;
    if (ag->core_live)
        core_unwatched(&ag->core, name, len, agent_now(ag));
}

static void srel_send(struct agent *ag);

static void ag_ready(void *arg)
{
    struct agent *ag = arg;
    ag->down_since = 0;
    ag->ready_once = true;
    if (ag->core_live)
        core_store_ready(&ag->core, agent_now(ag));
    if (ag->core_live && ag->nsrel)
        srel_send(ag); /* a successor's own releases, at once too */
}

/* Has c (or, as far as the renewals tell, a local holder of its permit
 * with its TTL) a renewal in flight? */
static bool renewing(struct agent *ag, const struct sclient *c)
{
    struct sclient *hs[SIM_MAX_CLIENTS];
    unsigned n = holders_of(ag, c->lease_token, c->lease_ttl, hs);
    bool any = c->rn_inflight;
    for (unsigned i = 0; i < n; i++)
        any |= hs[i]->rn_inflight > 0;
    return any;
}

/* Sentinel and cluster mode: the backend heard of a failover. Every lease
 * the agent's clients hold on a name it affects (every name in sentinel
 * mode) is in doubt until a renewal sent from now on confirms it. */
static void ag_doubt(void *arg, backend_affected_fn affected, void *farg)
{
    struct agent *ag = arg;
    struct sim *s = ag->s;
    if (!ag->core_live)
        return;
    uint64_t now = agent_now(ag);
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        if (c->ag == ag && c->state == C_HOLDING &&
            (!affected ||
             affected(farg, s->names[c->lease_name], strlen(s->names[c->lease_name])))) {
            uint64_t d;
            c->doubted = true;
            c->doubt_at = now;
            c->doubt_renew = lease_valid(c, &d) && !renewing(ag, c) && !c->stopped;
        }
    }
    core_doubt(&ag->core, affected, farg, now);
}

#if SIM_HAVE_QUORUM
static uint64_t qclock_now(void *arg)
{
    return agent_now(arg);
}

static uint64_t qclock_wall(void *arg)
{
    return agent_wall_us(arg);
}

static void qclock_arm(void *arg, uint64_t due)
{
    struct agent *ag = arg;
    ag->qt_due = due;
    ag->qt_gen++;
    if (due)
        ev_push(ag->s, agent_virt(ag, due), EV_QUORUM_TIMER, ag->id, ag->qt_gen, NULL);
}

static struct backend *make_node(void *arg, unsigned i, const struct backend_events *ev)
{
    struct agent *ag = arg;
    struct link *l = link_of(ag->s, ag->id, i);
    link_set_events(l, ev);
    return &l->base;
}
#endif

/* ---- clients ---- */

/* The client's next step comes after delay (any earlier plan is off). */
static void client_next(struct sclient *c, uint64_t delay)
{
    c->gen++;
    c->crash_next = false;
    c->cancel_next = false;
    ev_push(c->s, c->s->now + delay, EV_CLIENT, c->id, c->gen, NULL);
}

/* Instead, the client process dies after delay. */
static void client_crash_at(struct sclient *c, uint64_t delay)
{
    client_next(c, delay);
    c->crash_next = true;
}

/* Instead, the client cancels its wait after delay (unless answered first). */
static void client_cancel_at(struct sclient *c, uint64_t delay)
{
    client_next(c, delay);
    c->cancel_next = true;
}

static void client_reset(struct sclient *c)
{
    memset(&c->cc, 0, sizeof c->cc);
    LIST_INIT(&c->cc.leases);
    LIST_INIT(&c->cc.waiters);
    c->cc.pid = (int32_t)(1000 + c->id * 10 + c->incarnation);
    c->cc.uid = 1000;
    c->gids[0] = 1000;
    c->cc.gids = c->gids;
    c->cc.ngids = 1;
    snprintf(c->cc.comm, sizeof c->cc.comm, "client%u", c->id);
    memset(c->page, 0, sizeof c->page);
}

/* Each name's mix of kinds, in the seeds that mix them: exclusive alone;
 * read-write (shared, now and then exclusive); a semaphore (now and then
 * exclusive); all of them. */
enum { MIX_EXCL, MIX_RW, MIX_SEM, MIX_ALL };

/* What the client's acquire asks for, by its name's mix: the kind, a
 * semaphore's permits (now and then a wrong number: DLOCK_EKIND), and a
 * quarter of the time re-entry, for the client or an owner within it. */
static void draw_kind(struct sim *s, struct sclient *c, struct wire_acquire *m)
{
    struct rng *r = &s->rng;
    unsigned n = c->acq_name, p = (unsigned)rng_below(r, 100);
    uint8_t kind = LOCK_EXCLUSIVE;
    switch (s->name_mix[n]) {
    case MIX_RW:
        kind = p < 30 ? LOCK_EXCLUSIVE : LOCK_SHARED;
        break;
    case MIX_SEM:
        kind = p < 15 ? LOCK_EXCLUSIVE : LOCK_SEMAPHORE;
        break;
    case MIX_ALL:
        kind = p < 30 ? LOCK_EXCLUSIVE : p < 65 ? LOCK_SHARED : LOCK_SEMAPHORE;
        break;
    default:
        break;
    }
    uint32_t permits = 0;
    if (kind == LOCK_SEMAPHORE) {
        permits = s->name_permits[n];
        if (rng_chance(r, 5))
            permits = permits > 1 && rng_chance(r, 50) ? permits - 1 : permits + 1;
    }
    m->kind = kind;
    m->permits = permits;
    if (rng_chance(r, 25)) {
        m->flags = WIRE_ACQ_REENTRANT;
        m->owner = rng_chance(r, 50) ? 0 : c->id + 1;
    }
    c->acq_kind = kind;
    c->acq_permits = permits;
    c->acq_flags = m->flags;
    c->acq_owner = m->owner;
    /* Now and then a set of two names: the agent takes one name per
     * acquire (DLOCK_EINVAL), and must grant no part of a set. */
    c->acq_set = rng_chance(r, 2);
    if (c->acq_set) {
        uint8_t *b = c->set_buf;
        for (unsigned i = 0; i < 2; i++) {
            const char *name = s->names[(n + i) % s->nnames];
            size_t len = strlen(name);
            b[0] = (uint8_t)len;
            b[1] = 0;
            memcpy(b + 2, name, len);
            b += 2 + len;
        }
        m->nnames = 2;
        m->names = c->set_buf;
    }
}

/* An acquire of name with wait_ms; a set's member asks for the exclusive
 * kind and never crashes on its own. */
static void client_acquire_name(struct sclient *c, unsigned name, int64_t wait_ms)
{
    struct sim *s = c->s;
    struct agent *ag = c->ag;
    c->acq_name = name;
    c->acq_wait_ms = wait_ms;
    c->acq_req = ++c->next_req;
    c->acq_at = s->now;
    c->acq_order = ++s->ask_seq;
    c->state = C_WAITING;
    c->ops_left--;
    struct wire_acquire m = {
        .ttl_ms = rng_chance(&s->rng, 50) ? 0 : (uint32_t)rng_range(&s->rng, s->ttl_lo, s->ttl_hi),
        .wait_ms = c->acq_wait_ms,
        .max_hold_ms = rng_chance(&s->rng, 15) ? (uint32_t)rng_range(&s->rng, 100, 3000) : 0,
        .progress_ms = rng_chance(&s->rng, 15) ? (uint32_t)rng_range(&s->rng, 100, 2000) : 0,
        .name = s->names[c->acq_name],
        .name_len = (uint16_t)strlen(s->names[c->acq_name])};
    c->acq_max_hold = m.max_hold_ms;
    c->acq_progress = m.progress_ms;
    c->acq_ttl = m.ttl_ms;
    c->acq_kind = LOCK_EXCLUSIVE;
    c->acq_set = false;
    if (s->kinds && c->set_lead < 0)
        draw_kind(s, c, &m);
    unsigned n = ag->nfifo[c->acq_name];
    ag->fifo[c->acq_name][n] = (struct fifo_ent){.client = c->id,
                                                 .incarnation = c->incarnation,
                                                 .req = c->acq_req,
                                                 .forever = c->acq_wait_ms < 0,
                                                 .at = s->now};
    ag->nfifo[c->acq_name]++;
    TRACE(s,
          "agent%u: client%u acquires %s (req %u, wait %" PRId64 " ms, ttl %u, max hold %u, "
          "progress %u%s%.0u%s)",
          ag->id, c->id, m.name, c->acq_req, m.wait_ms, m.ttl_ms, m.max_hold_ms, m.progress_ms,
          m.kind == LOCK_SHARED      ? ", shared"
          : m.kind == LOCK_SEMAPHORE ? ", permits "
                                     : "",
          m.permits, m.flags & WIRE_ACQ_REENTRANT ? ", re-entrant" : "");
    /* A waiter may die while it waits, or cancel its wait. */
    if (c->set_lead < 0 && rng_chance(&s->rng, 5))
        client_crash_at(c, rng_range(&s->rng, MS(1), MS(2000)));
    else if (c->set_lead < 0 && c->acq_wait_ms != 0 && rng_chance(&s->rng, 4))
        client_cancel_at(c, rng_range(&s->rng, 0, MS(2000)));
    core_acquire(&ag->core, &c->cc, c->acq_req, &m, agent_now(ag));
}

static void client_acquire(struct sclient *c)
{
    struct sim *s = c->s;
    unsigned name = (unsigned)rng_below(&s->rng, s->nnames);
    unsigned r = (unsigned)rng_below(&s->rng, 100);
    client_acquire_name(c, name, r < 50 ? -1 : r < 80 ? (int64_t)rng_range(&s->rng, 20, 3000) : 0);
}

/* The holder asks for the name again: re-entrant, the lease is taken
 * again at once; plain, DLOCK_EHELD at once. */
static void client_again(struct sclient *c, bool reenter)
{
    struct sim *s = c->s;
    struct agent *ag = c->ag;
    c->side_req = ++c->next_req;
    c->side_pending = true;
    c->side_reenter = reenter;
    struct wire_acquire m = {.ttl_ms = c->acq_ttl,
                             .wait_ms = c->acq_wait_ms,
                             .flags = reenter ? c->lease_flags : 0,
                             .kind = c->lease_kind,
                             .permits = c->lease_permits,
                             .owner = c->lease_owner,
                             .name = s->names[c->lease_name],
                             .name_len = (uint16_t)strlen(s->names[c->lease_name])};
    TRACE(s, "agent%u: client%u takes %s again (req %u, %s, %u holds)", ag->id, c->id, m.name,
          c->side_req, reenter ? "re-entrant" : "plain", c->holds);
    core_acquire(&ag->core, &c->cc, c->side_req, &m, agent_now(ag));
    if (c->side_pending && !s->stop)
        violation(s, reenter ? "re-entry" : "protocol", 0,
                  "client%u's %s acquire of %s, which it holds, was not answered at once", c->id,
                  reenter ? "re-entrant" : "plain", m.name);
    c->side_pending = false;
    client_next(c, rng_range(&s->rng, 0, MS(30)));
}

/* A release of a re-entered lease that is not its last: answered, and the
 * lease stays, with one hold less (the client's count and the agent's
 * agree). */
static void client_release_hold(struct sclient *c)
{
    struct sim *s = c->s;
    struct agent *ag = c->ag;
    c->state = C_RELEASING;
    c->rel_req = ++c->next_req;
    c->rel_nonlast = true;
    c->rel_answered = false;
    TRACE(s, "agent%u: client%u releases one of its %u holds of %s", ag->id, c->id, c->holds,
          s->names[c->lease_name]);
    core_release(&ag->core, &c->cc, c->rel_req, c->lease_id, agent_now(ag));
    c->rel_nonlast = false;
    c->state = C_HOLDING;
    const struct page_slot *p = &c->page[c->lease_slot < SIM_PAGE_SLOTS ? c->lease_slot : 0];
    if (!s->stop && !c->lost_seen && (!c->rel_answered || p->lease_id != c->lease_id))
        violation(s, "re-entry", 0, "client%u's release of one of its %u holds of %s %s", c->id,
                  c->holds, s->names[c->lease_name],
                  c->rel_answered ? "took the lease off its page" : "was not answered");
    c->holds--;
    client_next(c, rng_range(&s->rng, 0, MS(30)));
}

static void client_release(struct sclient *c)
{
    struct sim *s = c->s;
    struct agent *ag = c->ag;
    if (c->holds > 1 && !c->lost_seen) {
        client_release_hold(c);
        return;
    }
    c->state = C_RELEASING;
    c->rel_req = ++c->next_req;
    TRACE(s, "agent%u: client%u releases %s (lease %" PRIx64 ")", ag->id, c->id,
          s->names[c->lease_name], c->lease_id);
    memcpy(ag->released_token[c->lease_name], c->lease_token, 33);
    ag->released_ttl[c->lease_name] = c->lease_ttl;
    ag->released_deadline[c->lease_name] =
        c->lease_slot < SIM_PAGE_SLOTS ? c->page[c->lease_slot].deadline : 0;
    c->slot_freed = false;
    core_release(&ag->core, &c->cc, c->rel_req, c->lease_id, agent_now(ag));
    if (!c->slot_freed && !c->lost_seen && !s->stop)
        violation(s, "re-entry", 0, "client%u's last release of %s left the lease on its page",
                  c->id, s->names[c->lease_name]);
    c->holds = 0;
    c->state = C_IDLE;
    c->lease_id = 0;
    c->paused = false;
    c->adopt_pending = c->adopt_renew = false;
    client_next(c, rng_range(&s->rng, 0, MS(300)));
}

/* A client whose process died comes back as a new connection, idle, and
 * asks again a little later. */
static void client_reborn(struct sclient *c)
{
    c->holds = c->reenter_left = 0;
    c->incarnation++;
    client_reset(c);
    c->state = C_IDLE;
    c->lease_id = 0;
    c->paused = false;
    c->adopt_pending = c->adopt_renew = false;
    client_next(c, rng_range(&c->s->rng, MS(1), MS(300)));
}

/* The client process dies: the agent sees its connection close. */
static void client_crash(struct sclient *c)
{
    struct sim *s = c->s;
    struct agent *ag = c->ag;
    TRACE(s, "agent%u: client%u crashes", ag->id, c->id);
    if (c->state == C_WAITING) {
        int idx = fifo_find(ag, c);
        if (idx >= 0)
            fifo_remove(ag, c->acq_name, (unsigned)idx);
    }
    c->dropping = true;
    c->slot_freed = false;
    bool held = c->state == C_HOLDING && !c->lost_seen;
    core_client_drop(&ag->core, &c->cc, 0, agent_now(ag));
    c->dropping = false;
    /* Its close releases every hold at once. */
    if (held && !c->slot_freed && !s->stop)
        violation(s, "re-entry", 0, "client%u's close left its lease on %s (%u holds)", c->id,
                  s->names[c->lease_name], c->holds);
    client_reborn(c);
}

/* The client cancels its wait: the agent answers DLOCK_ECANCELED at once,
 * and its place in the queue is gone (env_error() takes it out of the
 * model's FIFO; a key its attempt wins meanwhile is nobody's). */
static void client_cancel(struct sclient *c)
{
    struct sim *s = c->s;
    struct agent *ag = c->ag;
    TRACE(s, "agent%u: client%u cancels its acquire of %s (req %u)", ag->id, c->id,
          s->names[c->acq_name], c->acq_req);
    s->res->cov[COV_CANCEL]++;
    c->cancelling = true;
    core_cancel(&ag->core, &c->cc, c->acq_req, agent_now(ag));
    if (c->cancelling && !s->stop)
        violation(s, "protocol", 0, "client%u's cancel of its wait for %s was not answered", c->id,
                  s->names[c->acq_name]);
    c->cancelling = false;
}

/* ---- multi-name sets ---- */

/* The model's own planted bug: a set takes its names in its own random
 * order instead of the library's byte-wise one. */
bool sim_bug_set_unsorted;

static struct sclient *set_member(struct sclient *l, unsigned k)
{
    return &l->s->clients[l->set_members[k]];
}

/* The next member takes its name with what is left of the set's one wait,
 * as set_take() of the library: a try-once or an endless wait stays so. */
static void set_take_next(struct sclient *l)
{
    struct sim *s = l->s;
    int64_t w = l->set_wait_ms;
    if (w > 0)
        w = l->set_deadline > s->now ? (int64_t)((l->set_deadline - s->now) / MS(1)) : 0;
    client_acquire_name(set_member(l, l->set_taken), l->set_names[l->set_taken], w);
}

/* A set of 2 or 3 of the seed's names, sorted byte-wise as
 * dlock_lease_set_acquire() sorts them, taken one at a time. */
static void set_start(struct sclient *l)
{
    struct sim *s = l->s;
    struct rng *r = &s->rng;
    unsigned pick[SIM_MAX_NAMES];
    for (unsigned i = 0; i < s->nnames; i++)
        pick[i] = i;
    for (unsigned i = s->nnames - 1; i > 0; i--) {
        unsigned j = (unsigned)rng_below(r, i + 1), x = pick[i];
        pick[i] = pick[j];
        pick[j] = x;
    }
    l->set_n = (unsigned)rng_range(r, 2, s->nnames);
    for (unsigned i = 0; i < l->set_n; i++) {
        unsigned k = i;
        while (!sim_bug_set_unsorted && k > 0 &&
               strcmp(s->names[l->set_names[k - 1]], s->names[pick[i]]) > 0) {
            l->set_names[k] = l->set_names[k - 1];
            k--;
        }
        l->set_names[k] = pick[i];
    }
    unsigned p = (unsigned)rng_below(r, 100);
    l->set_wait_ms = p < 50 ? -1 : p < 80 ? (int64_t)rng_range(r, 20, 3000) : 0;
    l->set_deadline = l->set_wait_ms > 0 ? s->now + MS((uint64_t)l->set_wait_ms) : 0;
    l->set_phase = SP_TAKING;
    l->set_taken = 0;
    TRACE(s, "agent%u: client%u takes the set %s %s %s (wait %" PRId64 " ms)", l->ag->id, l->id,
          s->names[l->set_names[0]], s->names[l->set_names[1]],
          l->set_n > 2 ? s->names[l->set_names[2]] : "", l->set_wait_ms);
    set_take_next(l);
}

/* A failure: every member taken so far is given back, and the set fails. */
static void set_rollback(struct sclient *l, unsigned taken, const char *why)
{
    struct sim *s = l->s;
    TRACE(s, "agent%u: client%u's set fails (%s): %u members given back", l->ag->id, l->id, why,
          taken);
    for (unsigned k = 0; k < taken; k++)
        client_release(set_member(l, k));
    if (taken)
        s->res->cov[COV_SET_ROLLBACK]++;
    l->set_phase = SP_NONE;
    client_next(l, rng_range(&s->rng, 0, MS(300)));
}

/* The client counts the set held now: every member must hold its lease, on
 * its page and not past its deadline (no part of a set is granted alone). */
static void set_held(struct sclient *l)
{
    struct sim *s = l->s;
    for (unsigned k = 0; k < l->set_n; k++) {
        const struct sclient *m = set_member(l, k);
        const struct page_slot *p = &m->page[m->lease_slot < SIM_PAGE_SLOTS ? m->lease_slot : 0];
        bool held = m->state == C_HOLDING && p->used && p->lease_id == m->lease_id &&
                    p->state != DLOCK_STATE_LOST &&
                    (p->state != DLOCK_STATE_HELD || agent_now(m->ag) < p->deadline);
        if (!held) {
            violation(s, "multi-name", 0,
                      "client%u's set held while its member %s (client%u) is not held", l->id,
                      s->names[l->set_names[k]], m->id);
            return;
        }
    }
    s->res->cov[COV_SET_GRANT]++;
    l->set_phase = SP_HELD;
    TRACE(s, "agent%u: client%u holds its set of %u names", l->ag->id, l->id, l->set_n);
    uint64_t ttl = MS(l->lease_ttl ? l->lease_ttl : s->ttl_lo);
    client_next(l, rng_chance(&s->rng, 30) ? rng_range(&s->rng, 0, MS(20))
                                           : rng_range(&s->rng, 0, 2 * ttl));
}

/* The leader's turn after its current member's answer (the library takes
 * the next name once the call returns, never within the agent's callback):
 * the next name, the whole set (unless a member was lost meanwhile:
 * DLOCK_ELOST, everything given back), or, the member failed, the rollback. */
static void set_advance(struct sclient *l)
{
    struct sclient *c = set_member(l, l->set_taken);
    if (c->state == C_IDLE) {
        set_rollback(l, l->set_taken, "a member failed");
        return;
    }
    if (c->state != C_HOLDING)
        return;
    l->set_taken++;
    if (l->set_taken < l->set_n) {
        set_take_next(l);
        return;
    }
    for (unsigned k = 0; k < l->set_n; k++)
        if (set_member(l, k)->lost_seen) {
            set_rollback(l, l->set_n, "a member was lost");
            return;
        }
    set_held(l);
}

/* The set is released whole: every member, each checked by client_release. */
static void set_release(struct sclient *l)
{
    TRACE(l->s, "agent%u: client%u releases its set", l->ag->id, l->id);
    for (unsigned k = 0; k < l->set_n; k++)
        client_release(set_member(l, k));
    l->set_phase = SP_NONE;
}

static void client_event(struct sclient *c)
{
    struct sim *s = c->s;
    if (c->state == C_DONE)
        return;
    /* A set's other members act only when its leader tells them. */
    if (c->set_lead >= 0 && (unsigned)c->set_lead != c->id)
        return;
    if (c->set_lead >= 0 && c->set_phase == SP_TAKING) {
        set_advance(c);
        return;
    }
    if (c->crash_next) {
        c->crash_next = false;
        client_crash(c);
        return;
    }
    if (c->cancel_next) {
        c->cancel_next = false;
        if (c->state == C_WAITING) {
            client_cancel(c);
            return;
        }
    }
    switch (c->state) {
    case C_IDLE:
        if (!s->running || c->ops_left == 0) {
            c->state = C_DONE;
            for (unsigned k = 0; c->set_lead >= 0 && k < s->nnames; k++)
                set_member(c, k)->state = C_DONE;
            TRACE(s, "agent%u: client%u done", c->ag->id, c->id);
            return;
        }
        if (c->set_lead >= 0)
            set_start(c);
        else
            client_acquire(c);
        break;
    case C_HOLDING:
        if (c->set_lead >= 0) {
            if (c->set_phase == SP_HELD)
                set_release(c);
            break;
        }
        if (c->reenter_left && !c->lost_seen) {
            c->reenter_left--;
            client_again(c, true);
        } else if (s->kinds && !c->lost_seen && rng_chance(&s->rng, 3)) {
            client_again(c, false);
        } else {
            client_release(c);
        }
        break;
    default:
        break;
    }
}

/* ---- the checks ---- */

/* The lease c uses, if valid by the client's own rule (dlock_lease_valid):
 * its slot shows it HELD or in JEOPARDY, and the agent's clock is before
 * its deadline. */
static bool lease_valid(const struct sclient *c, uint64_t *deadline)
{
    if (c->state != C_HOLDING || c->lease_slot >= SIM_PAGE_SLOTS)
        return false;
    const struct page_slot *p = &c->page[c->lease_slot];
    if (p->lease_id != c->lease_id)
        return false;
    if (p->state != DLOCK_STATE_HELD && p->state != DLOCK_STATE_JEOPARDY)
        return false;
    *deadline = p->deadline;
    return agent_now(c->ag) < p->deadline;
}

/* Sentinel mode: c's agent was paused when the node failed over and has not
 * heard of it yet. Its leases may show valid without their keys on the new
 * master: the window docs/failover.md names ("Before that moment ..."). */
static bool late_doubt(const struct sclient *c)
{
    return c->ag->doubts_due > 0 || (c->s->cluster && cluster_unheard(c->ag, c->lease_name));
}

/* A check broken by c's lease in that window: excused once per lease (the
 * check stays on for the others). */
static void late_excuse(struct sim *s, struct sclient *c, const char *kind, const char *what)
{
    if (c->late_excused == c->lease_id)
        return;
    c->late_excused = c->lease_id;
    violation(s, kind, X_LATE_DOUBT,
              "client%u on agent%u: %s, while agent%u has not heard of the failover (%s)", c->id,
              c->ag->id, what, c->ag->id,
              s->cluster ? "its slot map does not show it yet" : "it was paused then");
}

/* An excused breach of exclusion stays excused while its fault may cause
 * it: the checks of exclusion rest until then, then see the recovery. */
static void me_excused(struct sim *s)
{
    uint64_t until = excuse_until(s, EXCUSE_MUTEX);
    if (until > s->me_quiet_until)
        s->me_quiet_until = until;
}

/* Do the valid leases v[0..nv) of name n break what their kinds allow:
 * an exclusive lease with any other (readers never overlap a writer), a
 * shared lease with a semaphore's, semaphore leases of two limits, or more
 * than N of N permits? With s, the breach is reported (the first found). */
static bool kinds_clash(struct sim *s, unsigned n, struct sclient *const *v, const uint64_t *d,
                        unsigned nv)
{
    int excl = -1, other = -1, shared = -1, sem = -1;
    unsigned nsem = 0;
    for (unsigned i = 0; i < nv; i++) {
        if (v[i]->lease_kind == LOCK_EXCLUSIVE && excl < 0)
            excl = (int)i;
        else if (other < 0)
            other = (int)i;
        if (v[i]->lease_kind == LOCK_SHARED && shared < 0)
            shared = (int)i;
        if (v[i]->lease_kind == LOCK_SEMAPHORE) {
            nsem++;
            if (sem < 0)
                sem = (int)i;
            else if (v[i]->lease_permits != v[sem]->lease_permits) {
                if (s)
                    violation(s, "permits", EXCUSE_MUTEX,
                              "%s held as a semaphore of %u permits by client%u on agent%u and of "
                              "%u by client%u on agent%u at once",
                              s->names[n], v[sem]->lease_permits, v[sem]->id, v[sem]->ag->id,
                              v[i]->lease_permits, v[i]->id, v[i]->ag->id);
                return true;
            }
        }
    }
    if (excl >= 0 && nv > 1) {
        if (!s)
            return true;
        const struct sclient *a = v[excl < other ? excl : other],
                             *b = v[excl < other ? other : excl];
        uint64_t da = d[excl < other ? excl : other], db = d[excl < other ? other : excl];
        violation(s, "mutual exclusion", EXCUSE_MUTEX,
                  "%s held by client%u on agent%u (fence %" PRIu64 ", %" PRId64
                  " ms left) and client%u on agent%u (fence %" PRIu64 ", %" PRId64
                  " ms left) at once",
                  s->names[n], a->id, a->ag->id, a->lease_fence,
                  ((int64_t)da - (int64_t)agent_now(a->ag)) / 1000000, b->id, b->ag->id,
                  b->lease_fence, ((int64_t)db - (int64_t)agent_now(b->ag)) / 1000000);
        return true;
    }
    if (shared >= 0 && sem >= 0) {
        if (s)
            violation(s, "permits", EXCUSE_MUTEX,
                      "%s held as shared by client%u on agent%u and as a semaphore by client%u on "
                      "agent%u at once",
                      s->names[n], v[shared]->id, v[shared]->ag->id, v[sem]->id, v[sem]->ag->id);
        return true;
    }
    if (sem >= 0 && nsem > v[sem]->lease_permits) {
        if (s)
            violation(s, "permits", EXCUSE_MUTEX,
                      "%s held by %u holders of a semaphore of %u permits at once (client%u on "
                      "agent%u among them)",
                      s->names[n], nsem, v[sem]->lease_permits, v[sem]->id, v[sem]->ag->id);
        return true;
    }
    return false;
}

static void check_mutex(struct sim *s)
{
    if (s->now <= s->me_quiet_until)
        return;
    if (s->me_quiet_until) {
        /* The window ended: from here on the recovery is checked. */
        s->me_quiet_until = 0;
        for (unsigned i = 0; i < s->nclients; i++) {
            uint64_t d;
            if (lease_valid(&s->clients[i], &d)) {
                s->res->cov[COV_RECOVERED]++;
                break;
            }
        }
    }
    for (unsigned n = 0; n < s->nnames; n++) {
        /* The valid leases, those of agents that have not heard of a
         * failover yet (late) last. */
        struct sclient *v[SIM_MAX_CLIENTS], *late = NULL;
        uint64_t d[SIM_MAX_CLIENTS];
        unsigned nv = 0, valid = 0;
        for (int pass = 0; pass < 2; pass++) {
            for (unsigned i = 0; i < s->nclients; i++) {
                struct sclient *c = &s->clients[i];
                if (c->lease_name != n || late_doubt(c) != (pass == 1) ||
                    !lease_valid(c, &d[valid]))
                    continue;
                v[valid++] = c;
                if (pass == 0)
                    nv++;
                else
                    late = c;
            }
        }
        if (nv > 1 && kinds_clash(s, n, v, d, nv)) {
            me_excused(s);
            return;
        }
        if (late && kinds_clash(NULL, n, v, d, valid))
            late_excuse(s, late, "mutual exclusion", "another lease of the name is valid too");
    }
}

/* Does node nd hold c's key: name's key with c's token? In quorum mode a
 * node that lost its data after the key was set counts too, while the
 * lease may still rest on it: for one TTL after the loss (a renewal sent
 * since finds the key gone there; the TTL of the confirmation the lease
 * rests on, which for a handoff may be its released lease's), and only as long as no lease granted
 * since holds the key there (the restart exclusion keeps such a node out of
 * quorums: this is how the simulator sees that the core honours it). */
static bool node_holds(struct sim *s, struct node *nd, const struct sclient *c)
{
    const struct rkey *k = node_key(nd, s->lock_keys[c->lease_name]);
    /* An exclusive lease's key is a string, a shared or semaphore lease's
     * its permit in a hash. */
    if (k && k->hash == (c->lease_kind != LOCK_EXCLUSIVE) && node_key_holds(nd, k, c->lease_token))
        return true;
    if (!s->quorum || !nd->lost_data || nd->lost_at < c->key_since ||
        s->now >= nd->lost_at + MS(c->key_ttl) * 21 / 20 + MS(2))
        return false;
    return !k || !granted_since(s, k->val, c->key_since);
}

/* A lease valid by its client's rule has its key, with its token, alive on
 * its node (single mode) or on a majority of the nodes (quorum mode): what
 * mutual exclusion rests on, checked without waiting for a second holder. */
static void check_keys(struct sim *s)
{
    if (s->now <= s->me_quiet_until)
        return;
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        uint64_t d;
        if (!lease_valid(c, &d) || !c->lease_token[0])
            continue;
        unsigned holding = 0;
        for (unsigned n = 0; n < s->nnodes; n++)
            holding += (!s->cluster || cluster_serves(s, c->lease_name, n)) &&
                       node_holds(s, &s->nodes[n], c);
        /* Cluster mode: on the master that owns the slot, or on the one
         * importing it while it migrates. */
        if (s->cluster ? holding > 0 : holding * 2 > s->nnodes)
            continue;
        if (late_doubt(c)) {
            late_excuse(s, c, "key life", "a valid lease whose key is gone");
            continue;
        }
        violation(s, "key life", EXCUSE_MUTEX,
                  "client%u on agent%u holds %s (fence %" PRIu64 ", %" PRId64
                  " ms left) but its key is on %u of %u node(s)",
                  c->id, c->ag->id, s->names[c->lease_name], c->lease_fence,
                  ((int64_t)d - (int64_t)agent_now(c->ag)) / 1000000, holding, s->nnodes);
        me_excused(s);
        return;
    }
}

/* Sentinel mode: once its agent has heard of a failover, a lease shows
 * valid only after a renewal sent since then found its key (the core's
 * doubt, docs/failover.md, steps 2 and 4). */
static void check_doubt(struct sim *s)
{
    if (!s->sentinel && !s->cluster)
        return;
    for (unsigned i = 0; i < s->nclients; i++) {
        const struct sclient *c = &s->clients[i];
        uint64_t d;
        if (!c->doubted || !lease_valid(c, &d))
            continue;
        violation(s, "doubt", 0,
                  "client%u on agent%u shows %s valid (fence %" PRIu64 ", %" PRId64
                  " ms left) after agent%u heard of a failover %" PRIu64
                  " ms ago, and no renewal sent since has confirmed it",
                  c->id, c->ag->id, s->names[c->lease_name], c->lease_fence,
                  ((int64_t)d - (int64_t)agent_now(c->ag)) / 1000000, c->ag->id,
                  (agent_now(c->ag) - c->doubt_at) / 1000000);
        return;
    }
}

static bool faults_over(const struct sim *s)
{
    for (unsigned i = 0; i < s->nfaults; i++)
        if (!s->faults[i].done)
            return false;
    for (unsigned n = 0; n < s->nnodes; n++)
        if (!s->nodes[n].up || s->nodes[n].stalled)
            return false;
    return true;
}

/* Every link up, and idle: nothing sent is still unanswered (a release
 * held up by a lag that just ended may still be on its way). */
static bool links_up(const struct sim *s)
{
    for (unsigned i = 0; i < s->nagents * s->nnodes; i++)
        if (!s->links[i].connected || !s->links[i].subscribed || s->links[i].npending)
            return false;
    return true;
}

static bool clients_done(const struct sim *s)
{
    for (unsigned i = 0; i < s->nclients; i++)
        if (s->clients[i].state != C_DONE)
            return false;
    return true;
}

static void check_settle(struct sim *s)
{
    if (s->settling || s->running || !clients_done(s) || !faults_over(s) || !links_up(s))
        return;
    s->settling = true;
    uint64_t settle = MS(s->ttl_lo) * 8 / 10;
    TRACE(s, "settled: the orphan-key check in %" PRIu64 " ms", settle / 1000000);
    ev_push(s, s->now + settle, EV_SETTLE_CHECK, 0, 0, NULL);
}

static bool late_token(const struct sim *s, const char *v)
{
    for (unsigned i = 0; i < s->nlate; i++)
        if (strncmp(v, s->late[i], 32) == 0)
            return true;
    return false;
}

/* A key an acquire that ran after it had failed left: its token, or (a
 * counted key) every live permit's. */
static bool late_key(const struct sim *s, const struct node *nd, const struct rkey *k)
{
    if (!k->hash)
        return late_token(s, k->val);
    for (unsigned i = 0; i < k->nf; i++)
        if (!late_token(s, k->f[i].token) && node_key_holds(nd, k, k->f[i].token))
            return false;
    return true;
}

/* A key of work a restarted agent lost (a release it had not confirmed, an
 * acquire it had sent): its token, or (a counted key) every live permit's. */
static bool lost_key(const struct sim *s, const struct node *nd, const struct rkey *k)
{
    for (unsigned i = 0; i < (k->hash ? k->nf : 1u); i++) {
        const char *t = k->hash ? k->f[i].token : k->val;
        bool lost = false;
        for (size_t j = 0; j < s->nlost && !lost; j++)
            lost = strncmp(t, s->lost_tokens[j], 32) == 0;
        if (!lost && !late_token(s, t) && (!k->hash || node_key_holds(nd, k, t)))
            return false;
    }
    return true;
}

/* Once settled, no lock key is left on any node: but for
 * the keys of acquires that ran after they had failed (a known limit,
 * named) and of work a restarted agent lost (they lapse by their TTL),
 * every one was released or withdrawn. */
static void check_orphans(struct sim *s)
{
    unsigned lost = 0;
    for (unsigned n = 0; n < s->nnodes; n++) {
        struct node *nd = &s->nodes[n];
        for (unsigned i = 0; i < nd->nkeys; i++) {
            const struct rkey *k = &nd->keys[i];
            if (!node_key_live(nd, k))
                continue;
            if (late_key(s, nd, k)) {
                excl_note(s, X_LATE_ACQUIRE,
                          "node%u ran an acquire after the agent had seen it fail, and kept "
                          "its key past the withdraw's retries",
                          n);
                continue;
            }
            if (s->nlost && lost_key(s, nd, k)) {
                lost++;
                continue;
            }
            violation(s, "orphan keys", EXCUSE_ORPHAN,
                      "\"%s\" (value %.40s) left on node%u after the run settled", k->name,
                      k->hash ? k->f[0].token : k->val, n);
            return;
        }
    }
    if (s->excl & X_LATE_ACQUIRE)
        violation(s, "orphan keys", EXCUSE_ORPHAN, "keys of late acquires left");
    if (lost) {
        excl_note(s, X_AGENT_RESTART,
                  "an agent restarted: releases it had not confirmed and commands it had sent "
                  "died with it, their keys left to lapse by their TTL");
        violation(s, "orphan keys", X_AGENT_RESTART,
                  "%u key(s) of work a restarted agent lost left", lost);
    }
}

/* A waiter that waits for ever must be served: at the end nobody waits. */
static void check_stuck(struct sim *s)
{
    for (unsigned i = 0; i < s->nclients; i++) {
        const struct sclient *c = &s->clients[i];
        if (c->state == C_WAITING) {
            violation(s, "liveness", 0,
                      "client%u on agent%u still waits for %s (wait %" PRId64 " ms), asked %" PRIu64
                      " ms ago",
                      c->id, c->ag->id, s->names[c->acq_name], c->acq_wait_ms,
                      (s->now - c->acq_at) / 1000000);
            return;
        }
    }
    violation(s, "liveness", 0, "the run did not settle (clients, faults or links)");
}

/* ---- faults ---- */

static void agent_crash(struct sim *s, struct fault *f);
static void agent_successor(struct sim *s, struct fault *f);
static bool restart_seed(uint64_t seed);
static void plan_restarts(struct sim *s, uint64_t from, uint64_t to);

static void note_mark_loss(struct sim *s, unsigned node)
{
    s->nodes[node].lost_data = true;
    s->nodes[node].lost_at = s->now;
}

/* A token not above the previous one F is what the contract allows when the
 * fencing marks were lost since F's grant and the clock that then makes the
 * token stands at or behind F (docs/fencing.md, "When it breaks";
 * docs/failover.md, "Fencing tokens across a failover"). In single,
 * sentinel and cluster mode a token is at least the node's clock at its
 * grant, so one not above F was made while that clock stood at or behind F
 * (it stepped back, or F came from a mark ahead of it). In quorum mode the
 * token comes from the acquiring agent's wall clock (floor): the agents'
 * clocks are further apart than the time between the grants, or F ran
 * ahead of that floor. */
static void fence_excuse(struct sim *s, unsigned name, uint64_t floor)
{
    fence_excuse_from(s, s->last_fence_at[name], s->last_fence_sent[name], s->last_fence[name],
                      floor);
}

/* The same against an earlier grant of token prev, granted at since, whose
 * acquire was sent at written (virtual times). */
static void fence_excuse_from(struct sim *s, uint64_t since, uint64_t written, uint64_t prev,
                              uint64_t floor)
{
    /* The previous grant's mark was written when its acquire ran, after it
     * was sent: a loss since then may have taken it, even one that came
     * before that grant's answer (a failover the agent had not heard of). */
    bool lost = false;
    for (unsigned n = 0; n < s->nnodes; n++)
        lost |= s->nodes[n].lost_data && s->nodes[n].lost_at >= written;
    if (!lost)
        return;
    if (!s->quorum)
        excl_note(s, X_MARK_LOST_CLOCK,
                  "the node lost its fencing marks since the previous grant (token %" PRIu64
                  "), and its clock at the new grant was not past that token",
                  prev);
    int64_t lo = s->agents[0].wall_skew_us, hi = lo;
    for (unsigned a = 1; a < s->nagents; a++) {
        int64_t v = s->agents[a].wall_skew_us;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    uint64_t span = (uint64_t)(hi - lo) * 1000 + MS(1);
    if (s->quorum && prev >= floor)
        excl_note(s, X_MARK_LOST_CLOCK,
                  "fencing marks lost on a node since the previous grant, whose token %" PRIu64
                  " ran ahead of the new grant's floor, its agent's wall clock %" PRIu64
                  " (a mark carried on from ahead)",
                  prev, floor);
    if (s->quorum && s->now - since <= span)
        excl_note(s, X_MARK_LOST_CLOCK,
                  "fencing marks lost on a node since the previous grant, %" PRIu64
                  " ms before, while the agents' wall clocks are %" PRId64 " ms apart",
                  (s->now - since) / 1000000, (hi - lo) / 1000);
}

/* Sentinel mode: every agent hears of nd's failover at once (before the new
 * master serves), through its loop: one that is paused hears of it when it
 * runs again, and until then may show leases valid that the failover cost
 * their keys (excused, X_LATE_DOUBT). */
static void announce_failover(struct sim *s, struct node *nd)
{
    for (unsigned a = 0; a < s->nagents; a++) {
        struct agent *ag = &s->agents[a];
        if (ag->paused_until > s->now) {
            ag->doubts_due++;
            excl_note(s, X_LATE_DOUBT, "agent%u was %s when node%u failed over", a,
                      ag->down ? "down (restarting)" : "paused", nd->id);
            /* A successor (an agent restart) asks for the master afresh:
             * what its predecessor would have heard goes with it. */
            ev_push(s, s->now, EV_DOUBT, a, ag->incarnation, NULL);
        } else {
            link_doubt(link_of(s, a, nd->id));
        }
    }
}

static void fault_start(struct sim *s, struct fault *f)
{
    struct node *nd = &s->nodes[f->node];
    s->res->faults_seen[f->kind]++;
    TRACE(s, "FAULT %s: agent%u node%u for %" PRIu64 " ms (%" PRId64 ")", fault_names[f->kind],
          f->agent, f->node, f->dur / 1000000, f->amount);
    switch (f->kind) {
    case F_LINK_DROP:
        link_drop(link_of(s, f->agent, f->node), "connection dropped");
        break;
    case F_PARTITION:
        for (unsigned n = 0; n < s->nnodes; n++)
            if (f->nodes_mask & (1u << n))
                link_set_partition(link_of(s, f->agent, n), true);
        break;
    case F_NODE_STALL:
        if (nd->up)
            nd->stalled = true;
        break;
    case F_LAG:
        for (unsigned n = 0; n < s->nnodes; n++)
            if (f->nodes_mask & (1u << n))
                link_of(s, f->agent, n)->lag += (uint64_t)f->amount;
        break;
    case F_FENCE_CUT:
        link_of(s, f->agent, f->node)->cut_fence = true;
        break;
    case F_AGENT_PAUSE:
        /* (An agent that is down has no process to stop.) */
        if (!s->agents[f->agent].down && s->agents[f->agent].paused_until < s->now + f->dur)
            s->agents[f->agent].paused_until = s->now + f->dur;
        break;
    case F_AGENT_RESTART:
        agent_crash(s, f);
        break;
    case F_RESTART:
        if (!nd->durable) {
            if (!s->quorum)
                excl_note(s, X_DATA_LOSS, "the node restarted without persistence (keys lost)");
            note_mark_loss(s, nd->id);
        }
        node_restart(nd, f->dur);
        break;
    case F_FAILOVER:
        nd->failover_at = s->now;
        if (s->cluster) {
            /* The agents hear of it when they read the slot map. */
            if (!cluster_failover(s, f))
                break;
            note_mark_loss(s, nd->id);
            node_failover(nd, (uint64_t)f->amount, f->dur);
            break;
        }
        if (s->sentinel) {
            /* The agents hear of it (their leases are in doubt): the
             * contract holds, but for the agents that hear late. */
            note_mark_loss(s, nd->id);
            node_failover(nd, (uint64_t)f->amount, f->dur);
            announce_failover(s, nd);
            break;
        }
        if (!s->quorum)
            excl_note(s, X_DATA_LOSS, "the node failed over losing %" PRId64 " ms of writes",
                      f->amount / 1000000);
        else if (nd->durable)
            excl_note(s, X_UNDETECTED_LOSS,
                      "node%u failed over losing %" PRId64
                      " ms of writes, and reads as durable (no restart exclusion)",
                      nd->id, f->amount / 1000000);
        note_mark_loss(s, nd->id);
        node_failover(nd, (uint64_t)f->amount, f->dur);
        break;
    case F_STEP_SMALL:
    case F_STEP_FORWARD:
        nd->step_ns += f->amount;
        if (f->kind == F_STEP_FORWARD)
            excl_note(s, X_CLOCK_FORWARD,
                      "node%u's clock stepped forward %" PRId64
                      " ms, beyond the drift allowance (keys expire early)",
                      nd->id, f->amount / 1000000);
        break;
    case F_STEP_BACK:
        nd->step_ns -= f->amount;
        nd->stepped_back_at = s->now;
        s->any_step_back = true;
        excl_note(s, X_STEP_BACK,
                  "node%u's clock stepped back %" PRId64
                  " ms: its keys outlive their TTL (orphan keys only)",
                  nd->id, f->amount / 1000000);
        break;
    case F_SLOT_MOVE:
        cluster_slot_move(s, f);
        break;
    default:
        break;
    }
    if (f->dur == 0)
        f->done = true;
    else
        ev_push(s, s->now + f->dur, EV_FAULT_END, (uint32_t)(f - s->faults), 0, NULL);
}

static void fault_end(struct sim *s, struct fault *f)
{
    struct node *nd = &s->nodes[f->node];
    TRACE(s, "FAULT %s ends: agent%u node%u", fault_names[f->kind], f->agent, f->node);
    f->done = true;
    switch (f->kind) {
    case F_PARTITION:
        for (unsigned n = 0; n < s->nnodes; n++)
            if (f->nodes_mask & (1u << n))
                link_set_partition(link_of(s, f->agent, n), false);
        break;
    case F_NODE_STALL:
        if (nd->stalled)
            node_stall_end(nd);
        break;
    case F_LAG:
        for (unsigned n = 0; n < s->nnodes; n++)
            if (f->nodes_mask & (1u << n))
                link_of(s, f->agent, n)->lag -= (uint64_t)f->amount;
        break;
    case F_FENCE_CUT:
        link_of(s, f->agent, f->node)->cut_fence = false;
        break;
    case F_RESTART:
    case F_FAILOVER:
        nd->up = true;
        break;
    case F_SLOT_MOVE:
        cluster_slot_move_end(s, f);
        break;
    case F_AGENT_RESTART:
        agent_successor(s, f);
        break;
    default:
        break;
    }
}

static void plan_faults(struct sim *s, uint64_t span)
{
    static const unsigned weights[F_KINDS] = {20, 15, 14, 15, 8, 5, 4, 6, 3, 3, 12, 10, 4, 0, 12};
    /* Sentinel mode is about failovers, and the agents paused across them. */
    static const unsigned sentinel_weights[F_KINDS] = {20, 15, 14, 15, 40, 5, 4,
                                                       6,  3,  3,  12, 15, 4};
    /* Cluster mode: failovers of a master, and slot moves. */
    static const unsigned cluster_weights[F_KINDS] = {20, 15, 14, 15, 25, 5, 4,
                                                      6,  3,  3,  12, 12, 4, 30};
    const unsigned *base = s->cluster ? cluster_weights : s->sentinel ? sentinel_weights : weights;
    /* Swarm testing: each seed turns fault kinds off (about two in five),
     * so that the rest come more often and together; half the seeds bunch
     * their faults into a window of under half a second, where several
     * overlap (a fencing phase cut by one fault while another holds a
     * node, say). */
    unsigned weight[F_KINDS] = {0}, total = 0;
    for (int k = 0; k < F_KINDS; k++) {
        if (k == F_AGENT_RESTART)
            continue; /* the restart seeds' own, beside these (plan_restarts()) */
        weight[k] = rng_chance(&s->rng, 60) ? base[k] : 0;
        if (k == F_FENCE_CUT && !s->quorum)
            weight[k] = 0; /* only quorum mode writes marks back */
        total += weight[k];
    }
    if (!total)
        total = weight[F_LINK_DROP] = base[F_LINK_DROP];
    uint64_t from = MS(50), to = span;
    if (rng_chance(&s->rng, 50)) {
        from = rng_range(&s->rng, MS(50), span);
        to = from + rng_range(&s->rng, MS(10), MS(400));
    }
    unsigned nf = (unsigned)rng_range(&s->rng, 1, s->quorum ? 8 : 5);
    for (unsigned i = 0; i < nf && s->nfaults < SIM_MAX_FAULTS; i++) {
        struct fault *f = &s->faults[s->nfaults++];
        unsigned r = (unsigned)rng_below(&s->rng, total);
        int k = 0;
        while (r >= weight[k])
            r -= weight[k++];
        f->kind = (uint8_t)k;
        f->agent = (unsigned)rng_below(&s->rng, s->nagents);
        f->node = (unsigned)rng_below(&s->rng, s->nnodes);
        f->start = rng_range(&s->rng, from, to);
        switch (k) {
        case F_PARTITION:
            f->dur = rng_range(&s->rng, MS(20), MS(3000));
            f->nodes_mask = s->quorum || s->cluster
                                ? (unsigned)rng_range(&s->rng, 1, (1u << s->nnodes) - 1)
                                : 1;
            break;
        case F_NODE_STALL:
            f->dur = rng_range(&s->rng, MS(10), MS(2500));
            break;
        case F_LAG:
            f->dur = rng_range(&s->rng, MS(50), MS(3000));
            f->amount = (int64_t)rng_range(&s->rng, MS(5), MS(300));
            f->nodes_mask = s->quorum || s->cluster
                                ? (unsigned)rng_range(&s->rng, 1, (1u << s->nnodes) - 1)
                                : 1;
            break;
        case F_AGENT_PAUSE:
            f->dur = rng_range(&s->rng, MS(5), MS(3000));
            break;
        case F_FENCE_CUT:
            f->dur = rng_range(&s->rng, MS(100), MS(3000)); /* armed that long */
            break;
        case F_RESTART:
            f->dur = rng_range(&s->rng, MS(5), MS(500));
            break;
        case F_FAILOVER:
            f->dur = rng_range(&s->rng, MS(5), MS(300));
            f->amount = (int64_t)rng_range(&s->rng, MS(1), MS(100));
            s->nodes[f->node].log_undo = true;
            break;
        case F_STEP_SMALL:
            f->amount = (int64_t)rng_range(&s->rng, US(50), US(500));
            break;
        case F_STEP_FORWARD:
        case F_STEP_BACK:
            f->amount = (int64_t)rng_range(&s->rng, MS(5), MS(2000));
            break;
        case F_AGENT_DRIFT:
            f->start = 0;
            s->agents[f->agent].ppm = (int32_t)signed_range(&s->rng, -50000, -15000);
            excl_note(s, X_DRIFT, "agent%u's clock runs %d ppm slow, beyond the drift allowance",
                      f->agent, -s->agents[f->agent].ppm);
            break;
        case F_FRESH:
            f->start = 0;
            s->nodes[f->node].started_at = -(int64_t)rng_range(&s->rng, 0, MS(2500));
            break;
        case F_NODE_DRIFT:
            f->start = 0;
            s->nodes[f->node].ppm = (int32_t)signed_range(&s->rng, 15000, 50000);
            excl_note(s, X_DRIFT, "node%u's clock runs %d ppm fast, beyond the drift allowance",
                      f->node, s->nodes[f->node].ppm);
            break;
        default:
            break;
        }
        if (k == F_AGENT_DRIFT || k == F_NODE_DRIFT || k == F_FRESH) {
            f->done = true;
            s->res->faults_seen[k]++;
            continue;
        }
        ev_push(s, f->start, EV_FAULT_START, (uint32_t)(f - s->faults), 0, NULL);
    }
    if (restart_seed(s->seed))
        plan_restarts(s, from, to);
}

/* Starts ag's process: its store (one link, the quorum over its links, or
 * the cluster backend), the seam the checker watches, its core, and the
 * connections (at the start, and for a successor after a restart). */
static int agent_boot(struct sim *s, struct agent *ag)
{
    unsigned a = ag->id;
    struct core_env env = {.granted = env_granted,
                           .error = env_error,
                           .ok = env_ok,
                           .event = env_event,
                           .slot_alloc = env_slot_alloc,
                           .slot_free = env_slot_free,
                           .slot_write = env_slot_write,
                           .slot_touched = env_slot_touched,
                           .random = env_random};
    struct backend_events ev = {.arg = ag,
                                .on_notice = ag_notice,
                                .on_subscribed = ag_subscribed,
                                .on_unsubscribed = ag_unsubscribed,
                                .on_unwatched = ag_unwatched,
                                .on_ready = ag_ready,
                                .on_doubt = s->sentinel ? ag_doubt : NULL};
    if (s->cluster) {
        ev.on_doubt = ag_doubt;
        ag->be = cluster_backend_new(ag, &ev);
        if (!ag->be)
            return -1;
    } else if (!s->quorum) {
        link_set_events(link_of(s, a, 0), &ev);
        ag->be = &link_of(s, a, 0)->base;
    } else {
#if SIM_HAVE_QUORUM
        struct quorum_clock clock = {
            .arg = ag, .now = qclock_now, .wall_us = qclock_wall, .arm = qclock_arm};
        ag->be = backend_quorum_new(&ag->cfg, s->nnodes, make_node, ag, &clock, &ev);
#endif
        if (!ag->be)
            return -1;
    }
    ag->seam = proxy_new(ag, ag->be);
    if (!ag->seam)
        return -1;
    env.arg = ag;
    if (core_init(&ag->core, &ag->cfg, &env, ag->seam, rng_next(&s->rng), ag->host) != 0)
        return -1;
    ag->core_live = true;
    for (unsigned n = 0; n < s->nnodes; n++)
        link_start(link_of(s, a, n));
    return 0;
}

/* ---- agent restarts ----
 *
 * An agent's process dies at once (F_AGENT_RESTART): it sends and answers
 * nothing more, its core goes without releasing anything, and its
 * connections go with what they had on the way (lost, or, when a node has
 * it already, run with nobody to hear the answer); the nodes keep their
 * keys, and its clients' lease pages, which are files, stay as they were.
 * After the gap a successor starts (a fresh core and links, the same agent
 * id and clock) and takes over, with core_adopt(), every lease of the
 * journal taken at the crash; it releases the keys of the leases it refuses
 * and of the holders that died meanwhile; the clients that waited send
 * their acquires again (tests/sim/README.md, "Agent restarts"). */

/* One seed in three, chosen by a fifth hash of the seed outside the random
 * stream, restarts agents; the others run exactly as before. */
static bool restart_seed(uint64_t seed)
{
    uint64_t z = seed + 0x7e57a27c0ffee5edull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % 3 == 0;
}

/* A restart seed's faults: one or two agent restarts beside the others,
 * each down for a gap of a few ms, up to the longest TTL, or beyond it, so
 * that some leases outlive the gap and some do not. */
static void plan_restarts(struct sim *s, uint64_t from, uint64_t to)
{
    struct rng *r = &s->rng;
    unsigned n = (unsigned)rng_range(r, 1, 2);
    for (unsigned i = 0; i < n && s->nfaults < SIM_MAX_FAULTS; i++) {
        struct fault *f = &s->faults[s->nfaults++];
        unsigned p = (unsigned)rng_below(r, 100);
        f->kind = F_AGENT_RESTART;
        f->agent = (unsigned)rng_below(r, s->nagents);
        f->start = rng_range(r, from, to);
        f->dur = p < 40   ? rng_range(r, MS(2), MS(50))
                 : p < 75 ? rng_range(r, MS(50), MS(s->ttl_hi))
                          : rng_range(r, MS(s->ttl_hi), 2 * MS(s->ttl_hi) + MS(500));
        ev_push(s, f->start, EV_FAULT_START, (uint32_t)(f - s->faults), 0, NULL);
    }
}

/* What the agent's journal holds at the crash: every lease of its clients,
 * with the deadline its page shows. */
static void journal_take(struct agent *ag)
{
    struct sim *s = ag->s;
    ag->njournal = 0;
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        const struct lease *le;
        if (c->ag != ag)
            continue;
        LIST_FOREACH(le, &c->cc.leases, olink)
        {
            int n = sim_name_index(s, le->lock->name, le->lock->name_len);
            if (n < 0 || ag->njournal == SIM_JOURNAL)
                continue;
            const struct page_slot *p = &c->page[le->slot < SIM_PAGE_SLOTS ? le->slot : 0];
            struct jentry *j = &ag->journal[ag->njournal++];
            *j = (struct jentry){.client = i,
                                 .name = (unsigned)n,
                                 .lease_id = le->id,
                                 .fence = le->fence,
                                 .deadline = p->lease_id == le->id ? p->deadline : 0,
                                 .hold_until = le->hold_until,
                                 .progress_ns = le->progress_ns,
                                 .holder_id = le->holder_id,
                                 .slot = le->slot,
                                 .holds = le->holds,
                                 .ttl_ms = le->ttl_ms,
                                 .ask = le->ask};
            token_hex(le->token, j->token);
        }
    }
}

static void lost_token(struct sim *s, const char *token)
{
    if (!token[0])
        return;
    room_for(s->nlost, &s->lost_cap, (void **)&s->lost_tokens, sizeof *s->lost_tokens);
    memcpy(s->lost_tokens[s->nlost], token, 32);
    s->lost_tokens[s->nlost++][32] = '\0';
}

/* The work the agent loses: its releases (those not confirmed yet the core
 * would have retried; nobody will now), the acquires it had sent. Their
 * keys lapse by their TTL; the release check leaves them out. */
static void note_lost_work(struct agent *ag)
{
    struct sim *s = ag->s;
    for (unsigned n = 0; n < s->nnames; n++)
        lost_token(s, ag->acq[n].token);
    for (size_t i = 0; i < s->nintents; i++) {
        struct rel_intent *ri = &s->intents[i];
        if (ri->agent == ag->id && !ri->dead) {
            ri->dead = true;
            lost_token(s, ri->token);
        }
    }
}

static void agent_crash(struct sim *s, struct fault *f)
{
    struct agent *ag = &s->agents[f->agent];
    if (ag->down) {
        f->dur = 0; /* it restarts already */
        return;
    }
    TRACE(s, "agent%u: its process dies; a successor starts in %" PRIu64 " ms", ag->id,
          f->dur / 1000000);
    s->res->cov[COV_RESTART]++;
    s->res->restarted = true;
    journal_take(ag);
    note_lost_work(ag);
    ag->down = true;
    ag->died_at = s->now;
    ag->core_live = false; /* from now on its core's effects go nowhere */
    ag->paused_until = s->now + f->dur;
    /* What is on the wire reaches the node or not (the kernel may have sent
     * it); what a node has already runs, with nobody to hear the answer. */
    for (unsigned n = 0; n < s->nnodes; n++) {
        struct msg *m;
        TAILQ_FOREACH(m, &link_of(s, ag->id, n)->inflight, link)
        if (m->state == M_SENT)
            m->discard = rng_chance(&s->rng, 50);
    }
    /* The backend answers what it has in flight (an error) to the core,
     * which must still be there (core_free()); then the core goes. */
    core_shutdown(&ag->core);
    ag->seam->ops->destroy(ag->seam);
    ag->seam = ag->be = NULL;
    core_free(&ag->core);
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        if (c->ag != ag)
            continue;
        LIST_INIT(&c->cc.leases);
        LIST_INIT(&c->cc.waiters);
        c->cc.nleases = c->cc.nwaiters = 0;
    }
    ag->tick_gen++;
    ag->tick_due = 0;
    ag->qt_gen++;
    ag->qt_due = 0;
}

/* The records the checks keep of the agent's process die with it: its
 * acquires and cohorts, its releases, its queues (the FIFO order restarts
 * with the successor), the outage it saw, the failovers it had to hear. */
static void agent_forget(struct agent *ag)
{
    struct sim *s = ag->s;
    memset(ag->acq, 0, sizeof ag->acq);
    memset(ag->cohort, 0, sizeof ag->cohort);
    memset(ag->released_token, 0, sizeof ag->released_token);
    memset(ag->released_deadline, 0, sizeof ag->released_deadline);
    memset(ag->released_ttl, 0, sizeof ag->released_ttl);
    memset(ag->nfifo, 0, sizeof ag->nfifo);
    ag->watch_token = ag->confirm_token = NULL;
    ag->watch_released = ag->watch_granted = false;
    ag->confirm_sent = 0;
    ag->down_since = 0;
    ag->ready_once = false;
    ag->doubts_due = 0;
    ag->nsrel = 0;
    ag->srel_gen++;
    for (unsigned n = 0; n < SIM_MAX_NAMES; n++)
        s->wake_due[ag->id][n] = 0;
}

/* The successor takes lease j over for its client: the same id, slot,
 * fence, token and holds (checked in the core's table and on the page),
 * in jeopardy until a renewal sent at once finds its key. False when
 * core_adopt() refuses it, which only an expired lease may be. */
static bool adopt_one(struct agent *ag, const struct jentry *j)
{
    struct sim *s = ag->s;
    struct sclient *c = &s->clients[j->client];
    uint64_t now = agent_now(ag);
    bool doubt = s->sentinel || s->cluster;
    struct core_adopted a = {.lease_id = j->lease_id,
                             .slot = j->slot,
                             .name = s->names[j->name],
                             .name_len = (uint16_t)strlen(s->names[j->name]),
                             .token = j->token,
                             .ask = j->ask,
                             .holder_id = j->holder_id,
                             .holds = j->holds,
                             .ttl_ms = j->ttl_ms,
                             .fence = j->fence,
                             .deadline = j->deadline,
                             .hold_until = j->hold_until,
                             .progress_ns = j->progress_ns,
                             .doubt = doubt};
    if (c->state != C_HOLDING || c->lease_id != j->lease_id) {
        violation(s, "takeover", 0,
                  "agent%u's journal has lease %" PRIx64 " on %s for client%u, which holds %s",
                  ag->id, j->lease_id, a.name, c->id,
                  c->state == C_HOLDING ? "another lease" : "none");
        return false;
    }
    /* Watched from the page's first write. */
    c->adopt_pending = c->adopt_renew = true;
    c->adopt_at = now;
    c->adopt_deadline = j->deadline;
    int rc = core_adopt(&ag->core, &c->cc, &a, now);
    if (rc) {
        c->adopt_pending = c->adopt_renew = false;
        if (j->deadline > now && !s->stop)
            violation(s, "takeover", 0,
                      "agent%u's successor refused client%u's lease on %s (%s) with %" PRIu64
                      " ms left",
                      ag->id, c->id, a.name, dlock_strerror(rc), (j->deadline - now) / 1000000);
        return false;
    }
    s->res->cov[COV_ADOPTED]++;
    c->jeopardy_seen = true; /* its page shows it in jeopardy */
    c->rn_inflight = c->rn_count = 0;
    c->progress_from = now;
    if (doubt) {
        c->doubted = c->doubt_renew = true;
        c->doubt_at = now;
    }
    const struct lease *le = table_lease_find(&ag->core.table, j->lease_id);
    const struct page_slot *p = &c->page[j->slot < SIM_PAGE_SLOTS ? j->slot : 0];
    TRACE(s,
          "agent%u: takes client%u's lease %" PRIx64 " on %s over (fence %" PRIu64 ", %" PRId64
          " ms left)",
          ag->id, c->id, j->lease_id, a.name, j->fence,
          ((int64_t)j->deadline - (int64_t)now) / 1000000);
    if (s->stop)
        return true;
    if (j->deadline <= now)
        violation(s, "takeover", 0,
                  "agent%u's successor took client%u's lease on %s over, expired %" PRIu64
                  " ms before (its holder saw it expire)",
                  ag->id, c->id, a.name, (now - j->deadline) / 1000000);
    else if (!le || le->owner != &c->cc || le->slot != j->slot || le->fence != j->fence ||
             !token_is(le->token, j->token) || le->holds != j->holds || le->holds != c->holds)
        violation(s, "takeover", 0,
                  "agent%u's successor took client%u's lease %" PRIx64 " on %s over with another "
                  "id, slot, fence, token or holds",
                  ag->id, c->id, j->lease_id, a.name);
    else if (p->lease_id != j->lease_id || p->fence != j->fence)
        violation(s, "takeover", 0,
                  "client%u's page shows lease %" PRIx64 " (fence %" PRIu64
                  ") for the lease %" PRIx64 " on %s (fence %" PRIu64 ") agent%u took over",
                  c->id, p->lease_id, p->fence, j->lease_id, a.name, j->fence, ag->id);
    return true;
}

/* A lease the successor refused (it expired during the gap): its page slot
 * is freed and its holder told, LOST with DLOCK_ELOST, as the agent does. */
static void lose_refused(struct agent *ag, const struct jentry *j)
{
    struct sclient *c = &ag->s->clients[j->client];
    struct wire_event ev = {
        .lease_id = j->lease_id, .state = DLOCK_STATE_LOST, .reason = DLOCK_ELOST};
    ag->s->res->cov[COV_GAP_EXPIRED]++;
    env_event(ag, &c->cc, &ev);
    env_slot_free(ag, &c->cc, j->slot);
}

/* A successor's release: its answer comes back, or not (the process that
 * sent it died meanwhile). */
struct srel_ref {
    struct agent *ag;
    unsigned incarnation, idx;
};

static void srel_later(struct agent *ag)
{
    ev_push(ag->s, agent_virt(ag, agent_now(ag) + MS(1000)), EV_SUCCESSOR, ag->id, ++ag->srel_gen,
            NULL);
}

static void srel_done(void *arg, const struct backend_result *r)
{
    struct srel_ref *ref = arg;
    struct agent *ag = ref->ag;
    unsigned idx = ref->idx;
    bool current = ref->incarnation == ag->incarnation && !ag->down;
    free(ref);
    if (!current)
        return;
    ag->srel[idx].inflight = false;
    if (!r->err)
        ag->srel[idx].done = true;
    else
        srel_later(ag);
}

/* Sends the successor's releases not confirmed yet, compare-and-delete of
 * their tokens as the core's release does, until each key would have
 * expired by itself; again when the store is back, or a second later. */
static void srel_send(struct agent *ag)
{
    struct sim *s = ag->s;
    uint64_t now = agent_now(ag);
    bool again = false;
    for (unsigned i = 0; i < ag->nsrel; i++) {
        struct srel *sr = &ag->srel[i];
        if (sr->done || sr->inflight)
            continue;
        if (now >= sr->expires) {
            sr->done = true;
            continue;
        }
        struct srel_ref *ref = malloc(sizeof *ref);
        if (!ref) {
            fprintf(stderr, "dlock-sim: out of memory\n");
            exit(2);
        }
        *ref = (struct srel_ref){.ag = ag, .incarnation = ag->incarnation, .idx = i};
        struct backend_req req = {.op = BACKEND_RELEASE,
                                  .kind = sr->ask.kind,
                                  .limit = sr->ask.permits,
                                  .name = s->names[sr->name],
                                  .len = strlen(s->names[sr->name]),
                                  .token = sr->token,
                                  .notify = true};
        sr->inflight = true;
        if (ag->seam->ops->op(ag->seam, &req, srel_done, ref) != 0) {
            free(ref);
            sr->inflight = false;
            again = true;
        }
    }
    if (again)
        srel_later(ag);
}

/* Does a lease the successor took over hold the key of j (local shared
 * holders of one permit)? Then the key stays. */
static bool key_taken_over(const struct agent *ag, const struct jentry *j, const bool *adopted)
{
    for (unsigned k = 0; k < ag->njournal; k++)
        if (adopted[k] && ag->journal[k].name == j->name &&
            memcmp(ag->journal[k].token, j->token, 32) == 0)
            return true;
    return false;
}

/* A client that died during the gap comes back as a new connection; its
 * lease, if it had one, was not taken over. */
static void client_gone(struct sclient *c)
{
    struct sim *s = c->s;
    TRACE(s, "agent%u: client%u died while its agent was down", c->ag->id, c->id);
    client_reborn(c);
}

/* The client's library sends its acquire again to the successor: a new
 * request, the same terms, the wait that is left (none left: the library's
 * own wait ran out, DLOCK_ETIMEDOUT). */
static void client_resend(struct sclient *c)
{
    struct sim *s = c->s;
    struct agent *ag = c->ag;
    int64_t wait = c->acq_wait_ms;
    if (wait > 0) {
        int64_t spent = (int64_t)((s->now - c->acq_at) / MS(1));
        if (spent >= wait) {
            TRACE(s, "agent%u: client%u's wait for %s ran out while its agent was down", ag->id,
                  c->id, s->names[c->acq_name]);
            c->state = C_IDLE;
            if (c->set_lead >= 0)
                client_next(&s->clients[c->set_lead], 0);
            else
                client_next(c, rng_range(&s->rng, 0, MS(300)));
            return;
        }
        wait -= spent;
    }
    c->acq_req = ++c->next_req;
    unsigned n = ag->nfifo[c->acq_name];
    ag->fifo[c->acq_name][n] = (struct fifo_ent){.client = c->id,
                                                 .incarnation = c->incarnation,
                                                 .req = c->acq_req,
                                                 .forever = wait < 0,
                                                 .at = s->now};
    ag->nfifo[c->acq_name]++;
    struct wire_acquire m = {.ttl_ms = c->acq_ttl,
                             .wait_ms = wait,
                             .max_hold_ms = c->acq_max_hold,
                             .progress_ms = c->acq_progress,
                             .kind = c->acq_kind,
                             .permits = c->acq_permits,
                             .flags = c->acq_flags,
                             .owner = c->acq_owner,
                             .name = s->names[c->acq_name],
                             .name_len = (uint16_t)strlen(s->names[c->acq_name])};
    if (c->acq_set) {
        m.nnames = 2;
        m.names = c->set_buf;
    }
    TRACE(s, "agent%u: client%u acquires %s again (req %u, wait %" PRId64 " ms)", ag->id, c->id,
          m.name, c->acq_req, m.wait_ms);
    core_acquire(&ag->core, &c->cc, c->acq_req, &m, agent_now(ag));
}

/* The waiters of the agent ask its successor again, in the order they
 * first asked. */
static void resend_waiters(struct agent *ag)
{
    struct sim *s = ag->s;
    struct sclient *w[SIM_MAX_CLIENTS];
    unsigned n = 0;
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        if (c->ag != ag || c->state != C_WAITING)
            continue;
        unsigned k = n++;
        for (; k > 0 && w[k - 1]->acq_order > c->acq_order; k--)
            w[k] = w[k - 1];
        w[k] = c;
    }
    for (unsigned i = 0; i < n && !s->stop; i++)
        client_resend(w[i]);
}

static void agent_successor(struct sim *s, struct fault *f)
{
    struct agent *ag = &s->agents[f->agent];
    if (!ag->down)
        return;
    ag->down = false;
    ag->incarnation++;
    agent_forget(ag);
    for (unsigned n = 0; n < s->nnodes; n++)
        link_restart(link_of(s, ag->id, n));
    if (agent_boot(s, ag) != 0) {
        fprintf(stderr, "dlock-sim: out of memory\n");
        exit(2);
    }
    TRACE(s, "agent%u: its successor starts, %u lease(s) in the journal", ag->id, ag->njournal);
    /* Now and then a client's process dies while its agent is down: the
     * successor sees it gone, and releases its lease instead. */
    bool gone[SIM_MAX_CLIENTS] = {false}, adopted[SIM_JOURNAL] = {false};
    for (unsigned i = 0; i < s->nclients; i++) {
        const struct sclient *c = &s->clients[i];
        gone[i] = c->ag == ag && c->set_lead < 0 && c->state != C_DONE && rng_chance(&s->rng, 15);
    }
    for (unsigned k = 0; k < ag->njournal && !s->stop; k++)
        adopted[k] = !gone[ag->journal[k].client] && adopt_one(ag, &ag->journal[k]);
    for (unsigned k = 0; k < ag->njournal && !s->stop; k++) {
        const struct jentry *j = &ag->journal[k];
        if (adopted[k])
            continue;
        if (!gone[j->client])
            lose_refused(ag, j);
        if (key_taken_over(ag, j, adopted) || ag->nsrel == SIM_JOURNAL)
            continue;
        struct srel *sr = &ag->srel[ag->nsrel++];
        *sr =
            (struct srel){.name = j->name, .ask = j->ask, .expires = agent_now(ag) + MS(j->ttl_ms)};
        memcpy(sr->token, j->token, 33);
    }
    if (ag->nsrel)
        srel_send(ag);
    for (unsigned i = 0; i < s->nclients; i++)
        if (gone[i])
            client_gone(&s->clients[i]);
    resend_waiters(ag);
}

/* ---- the schedule a seed makes ---- */

/* A third of the seeds that draw single mode run in sentinel mode: chosen by
 * the seed alone, outside the random stream, so that the single and quorum
 * runs of every seed are what they were before sentinel mode came. */
static bool sentinel_seed(uint64_t seed)
{
    uint64_t z = seed + 0x5e471e15e471e1ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % 3 == 0;
}

/* Two seeds in three mix the kinds of lock (and model the waiting-hosts
 * record): chosen by the seed alone, outside the random stream, so that
 * the other seeds run exactly as they did when the agent had the
 * exclusive kind alone. */
static bool kinds_seed(uint64_t seed)
{
    uint64_t z = seed + 0x6b1d5e7a3c9f0e21ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % 3 != 0;
}

/* Two seeds in five (by another hash, outside the random stream) leave
 * outage_wait_ms at its default, no ceiling, where it would have been a
 * number: waiters ride out outages for as long as their own waits. */
static bool outage_none_seed(uint64_t seed)
{
    uint64_t z = seed + 0x7f4a7c159e3779b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % 5 < 2;
}

/* One seed in three (by another hash, outside the random stream) adds
 * clients that take sets of names; the others run as before. */
static bool sets_seed(uint64_t seed)
{
    uint64_t z = seed + 0x2545f4914f6cdd1dull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % 3 == 0;
}

/* Two set clients, each on one agent with a member (a connection) per name
 * of its largest set, the first member leading. */
static void plan_sets(struct sim *s)
{
    struct rng *r = &s->rng;
    for (unsigned g = 0; g < 2; g++) {
        unsigned lead = s->nclients;
        struct agent *ag = &s->agents[rng_below(r, s->nagents)];
        for (unsigned k = 0; k < s->nnames; k++) {
            struct sclient *c = &s->clients[s->nclients];
            c->s = s;
            c->id = s->nclients++;
            c->ag = ag;
            client_reset(c);
            c->set_lead = (int)lead;
            c->ops_left = UINT32_MAX / 2;
            s->clients[lead].set_members[k] = c->id;
        }
        s->clients[lead].ops_left = (unsigned)rng_range(r, 2, 10);
        client_next(&s->clients[lead], rng_range(r, MS(5), MS(500)));
    }
}

/* Each name's mix of kinds and its semaphore's permits (1 to 3). */
static void plan_kinds(struct sim *s)
{
    struct rng *r = &s->rng;
    for (unsigned n = 0; n < s->nnames; n++) {
        unsigned p = (unsigned)rng_below(r, 100);
        s->name_mix[n] = p < 15 ? MIX_EXCL : p < 50 ? MIX_RW : p < 80 ? MIX_SEM : MIX_ALL;
        p = (unsigned)rng_below(r, 100);
        s->name_permits[n] = p < 15 ? 1 : p < 60 ? 2 : 3;
    }
}

static int setup(struct sim *s)
{
    struct rng *r = &s->rng;
    /* The draw is made whether or not the mode is forced, so that forcing a
     * seed's own mode replays that seed's run. */
    bool pick = rng_chance(r, 50);
    if (s->opts.mode == MODE_SINGLE)
        s->quorum = false;
    else if (s->opts.mode == MODE_QUORUM)
        s->quorum = true;
    else if (s->opts.mode == MODE_SENTINEL)
        s->sentinel = true;
    else if (s->opts.mode == MODE_CLUSTER)
        s->cluster = true;
    else {
        s->quorum = SIM_HAVE_QUORUM && pick;
        s->sentinel = !s->quorum && sentinel_seed(s->seed);
        s->cluster = !s->quorum && !s->sentinel && cluster_seed(s->seed);
    }
    s->nnodes = s->quorum    ? (rng_chance(r, 70) ? 3 : 5)
                : s->cluster ? (rng_chance(r, 50) ? 3 : 2)
                             : 1;
    s->nagents = (unsigned)rng_range(r, 2, SIM_MAX_AGENTS);
    s->nclients = (unsigned)rng_range(r, 2, 8);
    s->nnames = rng_chance(r, 50) ? 1 : (unsigned)rng_range(r, 2, SIM_MAX_NAMES);
    for (unsigned n = 0; n < s->nnames; n++) {
        snprintf(s->names[n], sizeof s->names[n], "%c", 'a' + n);
        snprintf(s->lock_keys[n], sizeof s->lock_keys[n], "dlock:%c", 'a' + n);
    }
    s->kinds = kinds_seed(s->seed);
    if (s->kinds)
        plan_kinds(s);
    s->delay_lo = rng_range(r, US(50), US(200));
    s->delay_hi = rng_range(r, s->delay_lo, US(800));
    s->slow_percent = (unsigned)rng_range(r, 0, 12);
    s->ttl_lo = (uint32_t)rng_range(r, 300, 1000);
    s->ttl_hi = (uint32_t)rng_range(r, s->ttl_lo, 3000);
    s->res->quorum = s->quorum;
    s->res->sentinel = s->sentinel;
    if (s->sentinel)
        s->stale_answers = rng_chance(r, 30);
    s->res->cluster = s->cluster;
    s->res->nnodes = s->nnodes;

    struct config tmpl;
    config_defaults(&tmpl);
    tmpl.default_ttl_ms = (uint32_t)rng_range(r, s->ttl_lo, s->ttl_hi);
    tmpl.max_ttl_ms = 3000;
    tmpl.retry_fallback_ms = (uint32_t)rng_range(r, 50, 200);
    tmpl.outage_wait_ms = (uint32_t)rng_range(r, 500, 3000);
    tmpl.command_timeout_ms = (uint32_t)rng_range(r, 200, 1500);
    tmpl.connect_timeout_ms = (uint32_t)rng_range(r, 100, 500);
    tmpl.reconnect_min_ms = (uint32_t)rng_range(r, 10, 50);
    tmpl.reconnect_max_ms = (uint32_t)rng_range(r, 100, 400);
    tmpl.node_timeout_ms = (uint32_t)rng_range(r, 50, 100);
    /* A wider space per seed: the renewal fraction over its whole range,
     * cohort blocks of 0, 1 and a few tokens and short or long cohort
     * times, agent-wide bounded holds, TTLs near min_ttl_ms, and no outage
     * grace at all. */
    if (rng_chance(r, 50))
        tmpl.renew_fraction = (double)rng_range(r, 5, 80) / 100.0;
    if (rng_chance(r, 60)) {
        static const uint32_t blocks[] = {0, 1, 1, 2, 3, 4, 8, 100};
        tmpl.cohort_handoffs = blocks[rng_below(r, sizeof blocks / sizeof blocks[0])];
    }
    if (rng_chance(r, 50))
        tmpl.cohort_ms = (uint32_t)rng_range(r, 1, 300);
    if (rng_chance(r, 15))
        tmpl.default_max_hold_ms = (uint32_t)rng_range(r, 200, 5000);
    if (rng_chance(r, 15))
        tmpl.max_hold_limit_ms = (uint32_t)rng_range(r, 100, 3000);
    if (rng_chance(r, 15))
        tmpl.default_progress_ms = (uint32_t)rng_range(r, 100, 3000);
    if (rng_chance(r, 15))
        tmpl.progress_limit_ms = (uint32_t)rng_range(r, 100, 2000);
    if (rng_chance(r, 20)) {
        tmpl.min_ttl_ms = (uint32_t)rng_range(r, 10, 50);
        s->ttl_lo = (uint32_t)rng_range(r, tmpl.min_ttl_ms, tmpl.min_ttl_ms + 100);
        s->ttl_hi = (uint32_t)rng_range(r, s->ttl_lo, 1000);
        tmpl.default_ttl_ms = (uint32_t)rng_range(r, s->ttl_lo, s->ttl_hi);
    }
    if (rng_chance(r, 15))
        tmpl.outage_wait_ms = 0;
    else if (outage_none_seed(s->seed))
        tmpl.outage_wait_ms = CONFIG_OUTAGE_NONE; /* the default */
    tmpl.nnodes = s->nnodes;
    tmpl.mode = s->quorum     ? REDIS_MODE_QUORUM
                : s->sentinel ? REDIS_MODE_SENTINEL
                : s->cluster  ? REDIS_MODE_CLUSTER
                              : REDIS_MODE_SINGLE;
    for (unsigned n = 0; n < s->nnodes; n++) {
        char addr[32];
        snprintf(addr, sizeof addr, "10.0.0.%u:6379", n + 1);
        config_parse_addr(addr, &tmpl.nodes[n]);
    }

    bool skew = s->quorum && rng_chance(r, 50);
    for (unsigned n = 0; n < s->nnodes; n++) {
        struct node *nd = &s->nodes[n];
        node_init(s, nd, n);
        nd->durable = rng_chance(r, 50);
        nd->run_id = rng_next(r) | 1;
        nd->started_at = -(int64_t)rng_range(r, MS(10000), MS(1000000));
        nd->skew_ns = signed_range(r, -(int64_t)MS(50), (int64_t)MS(50));
        nd->ppm = (int32_t)signed_range(r, -2000, 2000);
    }
    /* Counters of an earlier version, and marks of earlier runs, unequal
     * from node to node: tokens then come from them, not the clock, and
     * the nodes of a quorum propose different tokens. */
    bool ahead = rng_chance(r, 30);
    if (rng_chance(r, ahead ? 100 : 25)) {
        int64_t wall = 1700000000000000ll;
        for (unsigned n = 0; n < s->nnodes; n++)
            for (unsigned i = 0; i < s->nnames; i++) {
                uint64_t legacy = 0, mark = 0;
                if (rng_chance(r, 30))
                    legacy = (uint64_t)(wall + signed_range(r, -5000000, 50000));
                if (rng_chance(r, 60))
                    mark = (uint64_t)(wall + signed_range(r, -1000000, ahead ? 5000000 : 30000));
                node_preload(&s->nodes[n], s->names[i], legacy, mark);
            }
    }
    for (unsigned i = 0; i < SIM_MAX_AGENTS * SIM_MAX_NODES; i++)
        s->healthy_since[i] = UINT64_MAX;
    for (unsigned a = 0; a < s->nagents; a++) {
        struct agent *ag = &s->agents[a];
        ag->s = s;
        ag->id = a;
        ag->cfg = tmpl;
        ag->boot_ns = (int64_t)rng_range(r, MS(1000), MS(100000000));
        ag->ppm = (int32_t)signed_range(r, -2000, 2000);
        ag->wall_skew_us = skew ? signed_range(r, -20000, 20000) : 0;
        snprintf(ag->host, sizeof ag->host, "host%u", a);
        for (unsigned n = 0; n < s->nnodes; n++)
            link_init(s, link_of(s, a, n), ag, &s->nodes[n], a * s->nnodes + n);
    }
    if (s->cluster)
        cluster_setup(s);
    uint64_t span = MS(rng_range(r, 2000, 8000));
    if (rng_chance(r, 80))
        plan_faults(s, span);
    s->res->fault_free = fault_free(s);
    if (fault_free(s) && rng_chance(r, 50)) {
        s->notices_only = true;
        for (unsigned a = 0; a < s->nagents; a++)
            s->agents[a].cfg.retry_fallback_ms = 60000;
    }

    for (unsigned a = 0; a < s->nagents; a++)
        if (agent_boot(s, &s->agents[a]) != 0)
            return -1;
    for (unsigned i = 0; i < s->nclients; i++) {
        struct sclient *c = &s->clients[i];
        c->s = s;
        c->id = i;
        c->ag = &s->agents[i < s->nagents ? i : rng_below(r, s->nagents)];
        client_reset(c);
        c->set_lead = -1;
        c->ops_left = (unsigned)rng_range(r, 2, 10);
        client_next(c, rng_range(r, MS(5), MS(500)));
    }
    if (sets_seed(s->seed) && s->nnames >= 2)
        plan_sets(s);
    s->run_end = span + MS(2000);
    /* Waiters are served once every holder ahead has held: a paused holder
     * holds up to 8 TTLs of at most max_ttl_ms, and each client can be one. */
    s->hard_end = s->run_end + MS(60000) + s->nclients * 8 * MS(s->agents[0].cfg.max_ttl_ms);
    /* In quorum mode each node's waiting-hosts record orders the hosts by
     * itself: when they disagree, every waiter is told "taken" (another
     * host's turn) while the lock is free, and no release notice comes; the
     * waiters try again by their fallback retry, here a minute or more. */
    if (s->quorum && s->kinds && s->notices_only)
        s->hard_end += s->nclients * MS(90000);
    s->running = true;
    ev_push(s, s->run_end, EV_RUN_END, 0, 0, NULL);
    return 0;
}

/* ---- the loop ---- */

static void agent_after(struct agent *ag)
{
    struct sim *s = ag->s;
    if (ag->down)
        return;
    core_flush(&ag->core, agent_now(ag));
    ag->seam->ops->flush(ag->seam);
    uint64_t due = core_next_due(&ag->core);
    if (due == ag->tick_due)
        return;
    ag->tick_due = due;
    ag->tick_gen++;
    if (due)
        ev_push(s, agent_virt(ag, due), EV_AGENT_TICK, ag->id, ag->tick_gen, NULL);
}

/* The agent an event is for, if any. */
static struct agent *agent_of(struct sim *s, const struct event *e)
{
    switch (e->type) {
    case EV_AGENT_TICK:
    case EV_QUORUM_TIMER:
        return &s->agents[e->a];
    case EV_REPLY_ARRIVE:
    case EV_NOTICE_ARRIVE:
        return ((struct msg *)e->p)->l->ag;
    case EV_LINK_DROP:
    case EV_LINK_CONNECT:
    case EV_LINK_UP:
    case EV_LINK_SUBSCRIBE:
    case EV_LINK_WATCHDOG:
    case EV_LINK_JOIN:
        return s->links[e->a].ag;
    case EV_CLIENT:
        /* A client's request waits while its agent is stopped. */
        return s->clients[e->a].ag;
    case EV_DOUBT:
    case EV_CLUSTER:
    case EV_SUCCESSOR:
        return &s->agents[e->a];
    default:
        return NULL;
    }
}

static void dispatch(struct sim *s, const struct event *e)
{
    s->digest =
        (s->digest ^ (e->time + ((uint64_t)e->type << 56) + e->a + (e->b << 8))) * 0x100000001b3ull;
    switch (e->type) {
    case EV_AGENT_TICK: {
        struct agent *ag = &s->agents[e->a];
        if (e->b != ag->tick_gen)
            break;
        ag->tick_due = 0;
        core_tick(&ag->core, agent_now(ag));
        break;
    }
    case EV_QUORUM_TIMER: {
#if SIM_HAVE_QUORUM
        struct agent *ag = &s->agents[e->a];
        if (e->b == ag->qt_gen) {
            ag->qt_due = 0;
            backend_quorum_timeout(ag->be, agent_now(ag));
        }
#endif
        break;
    }
    case EV_CLIENT: {
        struct sclient *c = &s->clients[e->a];
        if (e->b != c->gen)
            break;
        client_event(c);
        break;
    }
    case EV_FAULT_START:
        fault_start(s, &s->faults[e->a]);
        break;
    case EV_FAULT_END:
        fault_end(s, &s->faults[e->a]);
        break;
    case EV_RUN_END:
        s->running = false;
        TRACE(s, "run ends: no new acquires");
        for (unsigned i = 0; i < s->nclients; i++)
            if (s->clients[i].state == C_IDLE)
                client_next(&s->clients[i], 0);
        break;
    case EV_SETTLE_CHECK:
        check_orphans(s);
        s->stop = true;
        break;
    case EV_DOUBT:
        if (e->b != s->agents[e->a].incarnation)
            break; /* heard by a process that has died since */
        s->agents[e->a].doubts_due--;
        link_doubt(link_of(s, e->a, 0));
        break;
    case EV_SUCCESSOR:
        if (e->b == s->agents[e->a].srel_gen && !s->agents[e->a].down)
            srel_send(&s->agents[e->a]);
        break;
    case EV_RELEASE_CHECK:
        check_release(s, e->a);
        break;
    case EV_CLUSTER:
    case EV_SLOT_MOVE:
        cluster_event(s, e);
        break;
    default:
        link_event(s, e);
        break;
    }
}

/* Runs one event and lets the agents flush; false when a core had to be
 * left in a loop (sim_wedged(): the violation is reported, the run ends). */
static bool run_event(struct sim *s, const struct event *e)
{
    if (setjmp(s->wedge)) {
        s->wedge_armed = false;
        TRACE(s, "a core looped within one call: the run stops");
        return false;
    }
    s->wedge_armed = true;
    dispatch(s, e);
    for (unsigned a = 0; a < s->nagents; a++)
        agent_after(&s->agents[a]);
    s->wedge_armed = false;
    return true;
}

static void teardown(struct sim *s)
{
    for (unsigned a = 0; a < s->nagents; a++) {
        struct agent *ag = &s->agents[a];
        if (!ag->core_live && !ag->be)
            continue;
        ag->core_live = false;
        if (ag->core.cfg)
            core_shutdown(&ag->core);
        if (ag->seam)
            ag->seam->ops->destroy(ag->seam);
        else if (ag->be)
            ag->be->ops->destroy(ag->be);
        for (unsigned n = 0; n < s->nnodes; n++)
            link_teardown(link_of(s, a, n));
        if (ag->core.cfg)
            core_free(&ag->core);
    }
    struct msg *m;
    while ((m = LIST_FIRST(&s->all_msgs))) {
        LIST_REMOVE(m, all);
        free(m->holder_out);
        free(m);
    }
    for (unsigned n = 0; n < s->nnodes; n++)
        node_free(&s->nodes[n]);
    free(s->heap);
    free(s->ring);
    free(s->intents);
    free(s->lost_tokens);
    free(s->grants);
    free(s->cgrants);
}

static void print_ring(const struct sim *s)
{
    unsigned start = (s->ring_pos + TRACE_RING - s->ring_n) % TRACE_RING;
    for (unsigned i = 0; i < s->ring_n; i++)
        printf("  %s\n", s->ring[(start + i) % TRACE_RING]);
}

int sim_run(uint64_t seed, const struct sim_opts *opts, struct sim_result *res)
{
    struct sim *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    memset(res, 0, sizeof *res);
    s->seed = seed;
    s->opts = *opts;
    s->res = res;
    LIST_INIT(&s->all_msgs);
    rng_seed(&s->rng, seed);
    s->digest = 0xcbf29ce484222325ull;
    if (s->opts.ring) {
        s->ring = calloc(TRACE_RING, sizeof *s->ring);
        if (!s->ring)
            s->opts.ring = false;
    }
    int rc = 0;
    if (setup(s) != 0) {
        rc = -1;
        goto out;
    }
    TRACE(s,
          "seed %" PRIu64 ": %s mode, %u node(s), %u agents, %u clients, %u name(s), %u "
          "fault(s)%s",
          seed,
          s->quorum     ? "quorum"
          : s->sentinel ? "sentinel"
          : s->cluster  ? "cluster"
                        : "single",
          s->nnodes, s->nagents, s->nclients, s->nnames, s->nfaults,
          s->excl_text[0] ? "; excluded faults planned" : "");
    struct event e;
    while (!s->stop && ev_pop(s, &e)) {
        if (e.time > s->hard_end) {
            s->now = s->hard_end;
            check_stuck(s);
            break;
        }
        s->now = e.time;
        struct agent *target = agent_of(s, &e);
        if (target && target->paused_until > s->now) {
            /* Handled when the agent runs again, in the order they came. */
            ev_push(s, target->paused_until, e.type, e.a, e.b, e.p);
            continue;
        }
        if (++res->events > SIM_MAX_EVENTS) {
            violation(s, "runaway", 0,
                      "the run took more than %u events by virtual time %" PRIu64
                      " ms: a storm of timers or messages",
                      SIM_MAX_EVENTS, s->now / 1000000);
            break;
        }
        if (!run_event(s, &e))
            break;
        track_links(s);
        check_turn(s);
        check_mutex(s);
        check_hold(s);
        check_keys(s);
        check_doubt(s);
        check_wakeup(s);
        check_settle(s);
        if (s->kinds)
            note_kinds(s);
    }
    if (!s->stop && !s->settling && !res->violation) {
        check_stuck(s);
    }
out:
    res->digest = s->digest;
    res->end_time = s->now;
    if (res->violation && s->opts.ring && !s->opts.trace) {
        printf("last %u events of seed %" PRIu64 ":\n", s->ring_n, seed);
        print_ring(s);
    }
    teardown(s);
    free(s);
    return rc;
}
