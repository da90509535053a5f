/* SPDX-License-Identifier: BSD-3-Clause */
/* agent.c -- the lock logic of dlockd: FIFO acquire queues with one acquire
 * in flight per name, the watchdog that renews leases in batches from one
 * timer heap, releases on request, disconnect and shutdown, and loss
 * detection with the holder told at once. */
#include "agent.h"

#include <errno.h>
#include <signal.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends.h"
#include "leasepage.h"
#include "dlock.h"
#include "log.h"
#include "unixsock.h"
#include "util.h"

#define container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

#define ORPHAN_RETRY_NS    (1000 * NS_PER_MS)
#define MAX_FINITE_WAIT_MS (366ll * 24 * 3600 * 1000)

_Static_assert(sizeof(void *) >= sizeof(uint64_t), "lease ids travel as callback pointers");

/* Backend callbacks carry a lock or a lease id; the agent is a singleton. */
static struct agent *the_agent;

static void lock_settle(struct agent *a, struct lock *l);

static const char *errname(int code)
{
    return dlock_strerror(code);
}

static struct conn *owner_of(const struct lease *le)
{
    return le->owner;
}

static void timer_set(struct agent *a, struct tnode *t, uint64_t due)
{
    if (theap_set(&a->timers, t, due) != 0)
        fatal("out of memory for timers");
}

/* ---- per-connection lists ---- */

static void lease_link(struct conn *c, struct lease *le)
{
    LIST_INSERT_HEAD(&c->leases, le, olink);
    c->nleases++;
}

static void lease_unlink(struct conn *c, struct lease *le)
{
    LIST_REMOVE(le, olink);
    c->nleases--;
}

static void waiter_link(struct conn *c, struct waiter *w)
{
    LIST_INSERT_HEAD(&c->waiters, w, olink);
    c->nwaiters++;
}

static void waiter_unlink(struct conn *c, struct waiter *w)
{
    LIST_REMOVE(w, olink);
    c->nwaiters--;
}

/* ---- waiters ---- */

/* The message of an error answer: for a missing quorum, also why when
 * nodes are excluded after a restart, and when the first counts again. */
static const char *answer_text(struct agent *a, int err, char *buf, size_t len)
{
    char why[160];
    const struct backend *be = a->backend;
    if (err != DLOCK_ENOQUORUM || !be->ops->excluded ||
        !be->ops->excluded(be, now_ns(), why, sizeof why))
        return errname(err);
    snprintf(buf, len, "%s: %s", errname(err), why);
    return buf;
}

/* Removes a waiter; err != 0 answers its request with that error. */
static void waiter_finish(struct agent *a, struct waiter *w, int err)
{
    struct conn *c = w->owner;
    char text[256];
    if (err)
        conn_send_error(c, w->req_id, err, answer_text(a, err, text, sizeof text));
    theap_remove(&a->timers, &w->timer);
    table_waiter_dequeue(w);
    waiter_unlink(c, w);
    free(w);
}

/* A wait that ran out while Redis was unreachable and no local lease held
 * the lock ends with the outage's error, not DLOCK_ETIMEDOUT: the lock may
 * well be free, and the caller must not take an outage for a busy lock. */
static void waiter_expired(struct agent *a, struct waiter *w)
{
    struct lock *l = w->lock;
    a->stats.timeouts++;
    waiter_finish(a, w, a->down_since && !l->holder ? a->down_err : DLOCK_ETIMEDOUT);
    lock_settle(a, l);
}

/* ---- leases ---- */

/* A release that Redis has not confirmed. When the command connection
 * drops, the compare-and-delete (or an acquire whose reply was lost) may not
 * have happened: it is kept and sent again when Redis is back, until the key
 * would have expired by itself. */
struct orphan {
    struct orphan *next;
    uint64_t expires;
    bool notify;        /* publish the release notice (not for a missed acquire) */
    unsigned ready_seq; /* agent.ready_seq when sent */
    uint16_t name_len;
    char token[TOKEN_HEX + 1];
    char name[];
};

static void send_orphan(struct agent *a, struct orphan *o);

/* Keeps o for another try: when the command link is back, or in a second
 * (an error reply such as BUSY or LOADING leaves the link up). */
static void park_orphan(struct agent *a, struct orphan *o)
{
    uint64_t now = now_ns();
    if (a->shutting_down || now >= o->expires) {
        free(o);
        return;
    }
    o->next = a->orphans;
    a->orphans = o;
    if (!tnode_queued(&a->orphan_retry))
        timer_set(a, &a->orphan_retry, now + ORPHAN_RETRY_NS);
}

static void on_released(void *arg, const struct backend_result *r)
{
    int err = r->err;
    struct orphan *o = arg;
    struct agent *a = the_agent;
    if (err && o->ready_seq != a->ready_seq && !a->shutting_down) {
        /* A link came back while this was in flight (in quorum mode, a node
         * it could not reach): try again now rather than in a second. */
        send_orphan(a, o);
        return;
    }
    if (err) {
        /* Not done, or not known to be done: compare-and-delete again. */
        log_debug("release of %s not confirmed (%s); will retry", o->name, errname(err));
        park_orphan(a, o);
        return;
    }
    if (r->outcome != BACKEND_DONE)
        log_debug("release of %s found the key gone or owned by another", o->name);
    free(o);
}

static void send_orphan(struct agent *a, struct orphan *o)
{
    o->ready_seq = a->ready_seq;
    struct backend_req req = {
        .name = o->name, .len = o->name_len, .token = o->token, .notify = o->notify};
    int rc = a->backend->ops->release(a->backend, &req, on_released, o);
    if (rc) {
        log_debug("cannot release %s now (%s); will retry when Redis is back", o->name,
                  errname(rc));
        park_orphan(a, o);
    }
}

/* Compare-and-delete of a key we hold, or may hold, with a TTL of ttl_ms
 * counted from now at the latest. The release notice wakes the waiters; it
 * is left out after an acquire that missed (the key was never granted): in
 * quorum mode such clean-ups are routine, and waking every waiter for each
 * would make them retry in a loop while the lock is held. */
static void drop_key(struct agent *a, const struct lock *l, const char *token, uint32_t ttl_ms,
                     bool notify)
{
    struct orphan *o = malloc(sizeof *o + l->name_len + 1);
    if (!o) {
        log_warn("out of memory: %s will expire by its TTL", l->name);
        return;
    }
    o->expires = now_ns() + (uint64_t)ttl_ms * NS_PER_MS;
    o->notify = notify;
    o->name_len = l->name_len;
    memcpy(o->token, token, sizeof o->token);
    memcpy(o->name, l->name, (size_t)l->name_len + 1);
    send_orphan(a, o);
}

static void release_key(struct agent *a, const struct lock *l, const char *token, uint32_t ttl_ms)
{
    drop_key(a, l, token, ttl_ms, true);
}

/* After an acquire that did not take the lock, or whose answer is unknown. */
static void withdraw_key(struct agent *a, const struct lock *l)
{
    drop_key(a, l, l->acq_token, l->acq_ttl_ms, false);
}

/* Sends the unconfirmed releases again. */
static void retry_orphans(struct agent *a)
{
    theap_remove(&a->timers, &a->orphan_retry);
    struct orphan *list = a->orphans;
    a->orphans = NULL;
    while (list) {
        struct orphan *o = list;
        list = o->next;
        if (now_ns() < o->expires)
            send_orphan(a, o);
        else
            free(o);
    }
}

/* Forgets a lease: out of the heap, the owner's list and the table. */
static void lease_drop(struct agent *a, struct lease *le)
{
    lease_page_free(&owner_of(le)->page, le->slot);
    theap_remove(&a->timers, &le->timer);
    lease_unlink(le->owner, le);
    table_lease_free(&a->table, le);
}

/* The lease can no longer be proven valid: tell the holder, forget it. When
 * the key may still be ours (deadline passed with a renewal unanswered),
 * delete it too, so that it does not outlive the lease. */
static void lease_lose(struct agent *a, struct lease *le, int reason, bool may_own)
{
    struct lock *l = le->lock;
    struct conn *c = le->owner;
    struct wire_event ev = {.lease_id = le->id, .state = DLOCK_STATE_LOST, .reason = reason};
    conn_send_event(c, &ev);
    log_info("lease on %s held by pid %d lost: %s", l->name, (int)c->pid, errname(reason));
    a->stats.losses++;
    if (may_own)
        release_key(a, l, le->token, le->ttl_ms);
    lease_drop(a, le);
    lock_settle(a, l);
}

/* Shows the lease as it is now in the holder's lease page. */
static void lease_publish(const struct lease *le)
{
    lease_page_write(&owner_of(le)->page, le->slot, le->state, le->id, le->fence,
                     (int64_t)le->deadline);
}

/* Sets the state of a live lease (HELD or JEOPARDY), shows it in the lease
 * page and tells the holder why. */
static void lease_report(struct lease *le, uint8_t state, int reason)
{
    le->state = state;
    lease_publish(le);
    struct wire_event ev = {
        .lease_id = le->id, .state = state, .reason = reason, .deadline_ns = le->deadline};
    conn_send_event(le->owner, &ev);
}

static void lease_set_state(struct lease *le, uint8_t state, int reason)
{
    if (le->state != state)
        lease_report(le, state, reason);
}

/* A renewal failed without proof of loss: retry until the deadline. */
static void lease_renew_failed(struct agent *a, struct lease *le, uint64_t now, int err)
{
    log_debug("renewal of %s failed (%s); retrying", le->lock->name, errname(err));
    a->stats.renewal_failures++;
    lease_set_state(le, DLOCK_STATE_JEOPARDY, err);
    timer_set(a, &le->timer, lease_renew_retry(now, le->deadline, le->ttl_ms));
}

static void on_renewed(void *arg, const struct backend_result *r)
{
    int err = r->err;
    struct agent *a = the_agent;
    struct lease *le = table_lease_find(&a->table, (uint64_t)(uintptr_t)arg);
    if (!le || !le->renew_sent)
        return; /* released or lost meanwhile */
    uint64_t sent = le->renew_sent, now = now_ns();
    le->renew_sent = 0;
    if (err == 0)
        histo_add(&a->stats.renew, now - sent);
    if (err == 0 && r->outcome == BACKEND_DONE) {
        a->stats.renewals++;
        le->renewals++;
        le->deadline = lease_deadline(sent, le->ttl_ms);
        timer_set(a, &le->timer, lease_next_renew(sent, le->ttl_ms, a->cfg->renew_fraction));
        lease_publish(le);
        lease_set_state(le, DLOCK_STATE_HELD, 0);
    } else if (err == 0) {
        /* The key is gone or not ours; in quorum mode, on a majority: the
         * nodes that renewed it must let it go. */
        lease_lose(a, le, DLOCK_ELOST, a->backend->release_after_miss);
    } else if (now >= le->deadline) {
        lease_lose(a, le, err, true);
    } else {
        lease_renew_failed(a, le, now, err);
    }
}

/* Should renewal stop for a bounded hold? 0, DLOCK_EHOLDLIMIT or
 * DLOCK_ESTALLED. The touch time comes from the client: it is clamped to now
 * and ignored when older than the grant (a slot's previous lease). */
static int hold_check(const struct lease *le, uint64_t now)
{
    if (le->hold_until && now >= le->hold_until)
        return DLOCK_EHOLDLIMIT;
    if (!le->progress_ns)
        return 0;
    uint64_t touched = lease_page_touched(&owner_of(le)->page, le->slot);
    if (touched > now)
        touched = now;
    uint64_t last = touched > le->granted_at ? touched : le->granted_at;
    return now - last > le->progress_ns ? DLOCK_ESTALLED : 0;
}

/* Renewal stops: the holder is told (JEOPARDY with the reason) and the lease
 * runs out at its deadline. A stalled holder that touches the lease before
 * then is renewed again, so its timer keeps looking. */
static void lease_stop(struct agent *a, struct lease *le, uint64_t now, int why)
{
    if (le->stopped != why) {
        log_info("lease on %s held by pid %d: renewal stops: %s", le->lock->name,
                 (int)owner_of(le)->pid, errname(why));
        le->stopped = why;
        lease_report(le, DLOCK_STATE_JEOPARDY, why);
    }
    timer_set(a, &le->timer,
              why == DLOCK_ESTALLED ? lease_renew_retry(now, le->deadline, le->ttl_ms)
                                    : le->deadline);
}

/* A lease's timer fired: renew it, or stop renewing a bounded hold. With a
 * renewal in flight the timer marks the point where it is overdue (the lease
 * is in jeopardy), then the deadline (the lease is lost). */
static void lease_due(struct agent *a, struct lease *le, uint64_t now)
{
    if (now >= le->deadline) {
        lease_lose(a, le, le->stopped ? le->stopped : DLOCK_EUNAVAIL, true);
        return;
    }
    if (le->renew_sent) {
        lease_set_state(le, DLOCK_STATE_JEOPARDY, DLOCK_EUNAVAIL);
        timer_set(a, &le->timer, le->deadline);
        return;
    }
    int why = hold_check(le, now);
    if (why) {
        lease_stop(a, le, now, why);
        return;
    }
    le->stopped = 0;
    struct backend_req req = {.name = le->lock->name,
                              .len = le->lock->name_len,
                              .token = le->token,
                              .ttl_ms = le->ttl_ms};
    int rc = a->backend->ops->renew(a->backend, &req, on_renewed, (void *)(uintptr_t)le->id);
    if (rc) {
        lease_renew_failed(a, le, now, rc);
        return;
    }
    le->renew_sent = now;
    /* Overdue when unanswered for half of the validity left. */
    timer_set(a, &le->timer, now + (le->deadline - now) / 2);
}

/* ---- acquiring ---- */

static void grant(struct agent *a, struct lock *l, struct waiter *w, uint64_t deadline,
                  uint64_t fence)
{
    struct conn *c = w->owner;
    struct lease *le = table_lease_new(&a->table, l, c);
    if (!le) {
        release_key(a, l, l->acq_token, l->acq_ttl_ms);
        waiter_finish(a, w, DLOCK_ENOMEM);
        return;
    }
    memcpy(le->token, l->acq_token, sizeof le->token);
    le->ttl_ms = l->acq_ttl_ms;
    le->deadline = deadline;
    le->state = DLOCK_STATE_HELD;
    le->fence = fence;
    le->slot = lease_page_alloc(&c->page);
    if (le->slot == UINT32_MAX) {
        table_lease_free(&a->table, le);
        release_key(a, l, l->acq_token, l->acq_ttl_ms);
        waiter_finish(a, w, DLOCK_ELIMIT);
        return;
    }
    le->granted_at = l->acq_sent;
    if (w->max_hold_ms)
        le->hold_until = l->acq_sent + (uint64_t)w->max_hold_ms * NS_PER_MS;
    le->progress_ns = (uint64_t)w->progress_ms * NS_PER_MS;
    lease_link(c, le);
    lease_publish(le);
    timer_set(a, &le->timer, lease_next_renew(l->acq_sent, le->ttl_ms, a->cfg->renew_fraction));
    struct wire_granted g = {.lease_id = le->id,
                             .deadline_ns = deadline,
                             .fence = fence,
                             .ttl_ms = le->ttl_ms,
                             .slot = le->slot};
    conn_send_granted(c, w->req_id, &g);
    a->stats.grants++;
    histo_add(&a->stats.acquire, now_ns() - l->acq_sent);
    log_debug("granted %s to pid %d (lease %llx, fence %llu)", l->name, (int)c->pid,
              (unsigned long long)le->id, (unsigned long long)fence);
    waiter_finish(a, w, 0);
}

/* Redis is unreachable (err) for waiter w at its turn. A waiter that may
 * wait rides out an outage of up to outage_wait_ms: the lock retries when
 * Redis is back or the grace runs out. Returns false when w must fail now. */
static bool ride_outage(struct agent *a, struct lock *l, struct waiter *w, int err)
{
    if ((err != DLOCK_EUNAVAIL && err != DLOCK_ENOQUORUM) || w->try_once || a->shutting_down)
        return false;
    uint64_t now = now_ns(), grace = (uint64_t)a->cfg->outage_wait_ms * NS_PER_MS;
    if (!a->down_since)
        a->down_since = now;
    a->down_err = err;
    if (now - a->down_since >= grace)
        return false;
    uint64_t retry = now + (uint64_t)a->cfg->retry_fallback_ms * NS_PER_MS;
    timer_set(a, &l->retry, retry < a->down_since + grace ? retry : a->down_since + grace);
    return true;
}

static void on_acquired(void *arg, const struct backend_result *r)
{
    int err = r->err;
    struct agent *a = the_agent;
    struct lock *l = arg;
    struct waiter *w = l->acq_for;
    l->acquiring = false;
    l->acq_for = NULL;
    if (err) {
        if (w && !ride_outage(a, l, w, err))
            waiter_finish(a, w, err);
        /* Unanswered, or failed halfway: Redis may have set the key all
         * the same. Compare-and-delete is harmless if it did not. */
        withdraw_key(a, l);
    } else if (r->outcome == BACKEND_DONE) {
        a->down_since = 0;
        uint64_t deadline = lease_deadline(l->acq_sent, l->acq_ttl_ms);
        if (w && !a->shutting_down && now_ns() < deadline) {
            grant(a, l, w, deadline, r->fence);
        } else {
            /* Nobody to give it to (waiter gone, agent stopping), or the reply
             * came too late to leave any validity: hand the key back. */
            release_key(a, l, l->acq_token, l->acq_ttl_ms);
        }
    } else {
        a->down_since = 0;
        /* Quorum mode: some nodes may have taken the key for us. */
        if (a->backend->release_after_miss)
            withdraw_key(a, l);
        if (w && w->try_once)
            waiter_finish(a, w, DLOCK_EBUSY);
        if (l->qhead && !l->notice_missed) {
            uint64_t delay =
                waiter_retry_delay(a->cfg->retry_fallback_ms, r->pttl_ms, random_unit());
            timer_set(a, &l->retry, now_ns() + delay);
        }
    }
    lock_settle(a, l);
}

/* Sends an acquire for the first waiter when nothing stands in the way. */
static void lock_kick(struct agent *a, struct lock *l)
{
    while (l->qhead && !l->holder && !l->acquiring && !tnode_queued(&l->retry)) {
        struct waiter *w = l->qhead;
        if (a->shutting_down) {
            waiter_finish(a, w, DLOCK_ESHUTDOWN);
            continue;
        }
        if (random_token(l->acq_token) != 0) {
            waiter_finish(a, w, DLOCK_ENOMEM);
            continue;
        }
        l->acq_sent = now_ns();
        l->acq_ttl_ms = w->ttl_ms;
        l->notice_missed = false;
        /* Who holds it, for operators looking from any host. */
        char holder[BACKEND_RECORD_MAX];
        const struct conn *c = w->owner;
        snprintf(holder, sizeof holder, "%s %s %d %u %s", l->acq_token, a->host, (int)c->pid,
                 (unsigned)c->uid, c->comm);
        struct backend_req req = {.name = l->name,
                                  .len = l->name_len,
                                  .token = l->acq_token,
                                  .holder = holder,
                                  .ttl_ms = w->ttl_ms};
        int rc = a->backend->ops->acquire(a->backend, &req, on_acquired, l);
        if (rc == 0) {
            l->acquiring = true;
            l->acq_for = w;
            return;
        }
        if (ride_outage(a, l, w, rc))
            return;
        waiter_finish(a, w, rc);
    }
}

/* After any change to a lock: start the next acquire, or free the lock. */
static void lock_settle(struct agent *a, struct lock *l)
{
    lock_kick(a, l);
    table_lock_release_if_idle(&a->table, l);
}

/* A bound asked for, else the agent's default, capped by its limit. */
static uint32_t bound(uint32_t asked, uint32_t dflt, uint32_t limit)
{
    uint32_t v = asked ? asked : dflt;
    return limit && (v == 0 || v > limit) ? limit : v;
}

/* Is a limit in the way of one more waiter on c? 0, or DLOCK_ELIMIT with the
 * limit hit named in why (per connection or per uid, leases or waiters): the
 * code alone cannot tell a holder which one to look at. */
static int limit_check(const struct agent *a, const struct conn *c, char *why, size_t len)
{
    const struct config *cfg = a->cfg;
    const struct policy *pol = &cfg->policy;
    /* Every waiter may become a lease: both count against the lease limit. */
    if (c->nleases + c->nwaiters >= cfg->max_leases_per_conn) {
        snprintf(why, len, "per-connection lease limit (%u) reached", cfg->max_leases_per_conn);
        return DLOCK_ELIMIT;
    }
    if (c->nwaiters >= cfg->max_waiters_per_conn) {
        snprintf(why, len, "per-connection waiter limit (%u) reached", cfg->max_waiters_per_conn);
        return DLOCK_ELIMIT;
    }
    if (!pol->max_leases_per_uid && !pol->max_waiters_per_uid)
        return 0;
    uint64_t held = 0, waiting = 0;
    const struct conn *o;
    LIST_FOREACH(o, &c->uu->conns, ulink)
    {
        held += o->nleases + o->nwaiters;
        waiting += o->nwaiters;
    }
    if (pol->max_leases_per_uid && held >= pol->max_leases_per_uid) {
        snprintf(why, len, "per-uid lease limit (%u) reached for uid %u", pol->max_leases_per_uid,
                 (unsigned)c->uid);
        return DLOCK_ELIMIT;
    }
    if (pol->max_waiters_per_uid && waiting >= pol->max_waiters_per_uid) {
        snprintf(why, len, "per-uid waiter limit (%u) reached for uid %u", pol->max_waiters_per_uid,
                 (unsigned)c->uid);
        return DLOCK_ELIMIT;
    }
    return 0;
}

/* A connection asking for a name it holds: locks are not re-entrant, and
 * the request would queue behind the connection's own lease, for ever with
 * an endless wait. An immediate error instead. (Waiting twice for a name
 * held elsewhere is fine: two threads sharing a client take turns.) */
static int reacquire_check(struct agent *a, const struct conn *c, const struct wire_acquire *m,
                           char *why, size_t len)
{
    const struct lock *l = table_lock_find(&a->table, m->name, m->name_len);
    if (!l || !l->holder || l->holder->owner != c)
        return 0;
    snprintf(why, len, "this connection already holds %.*s (locks are not re-entrant)",
             (int)m->name_len, m->name);
    return DLOCK_EHELD;
}

/* 0, or the error to answer an acquire with; for a limit, why says which. */
static int acquire_check(struct agent *a, struct conn *c, const struct wire_acquire *m,
                         uint32_t *ttl, char *why, size_t len)
{
    const struct config *cfg = a->cfg;
    if (a->shutting_down)
        return DLOCK_ESHUTDOWN;
    int rc = lock_name_check(m->name, m->name_len, cfg->max_name_len);
    if (rc)
        return rc;
    *ttl = m->ttl_ms ? m->ttl_ms : cfg->default_ttl_ms;
    if (m->flags || m->wait_ms < -1)
        return DLOCK_EINVAL;
    if (*ttl < cfg->min_ttl_ms || *ttl > cfg->max_ttl_ms) {
        /* Named, so that whoever asked for a long TTL learns the agent's cap. */
        snprintf(why, len,
                 "TTL %u ms is outside this agent's range, %u to %u ms (min_ttl_ms, "
                 "max_ttl_ms)",
                 (unsigned)*ttl, (unsigned)cfg->min_ttl_ms, (unsigned)cfg->max_ttl_ms);
        return DLOCK_EINVAL;
    }
    const struct policy *pol = &cfg->policy;
    char name[WIRE_MAX_NAME + 1];
    memcpy(name, m->name, m->name_len);
    name[m->name_len] = '\0';
    if (!policy_allows(pol, c->uid, c->gids, c->ngids, name)) {
        log_info("denied: pid %d uid %u may not use lock %s", (int)c->pid, (unsigned)c->uid, name);
        return DLOCK_EDENIED;
    }
    rc = reacquire_check(a, c, m, why, len);
    return rc ? rc : limit_check(a, c, why, len);
}

/* The server's hooks: each request and closed connection. */
static void agent_acquire(void *arg, struct conn *c, uint32_t id, const struct wire_acquire *m)
{
    struct agent *a = arg;
    uint32_t ttl = 0;
    char why[128] = "";
    int rc = acquire_check(a, c, m, &ttl, why, sizeof why);
    if (rc) {
        if (rc == DLOCK_EDENIED)
            a->stats.denied++;
        else
            a->stats.refused++;
        conn_send_error(c, id, rc, why[0] ? why : errname(rc));
        return;
    }
    struct lock *l = table_lock_get(&a->table, m->name, m->name_len);
    struct waiter *w = l ? calloc(1, sizeof *w) : NULL;
    if (!w) {
        conn_send_error(c, id, DLOCK_ENOMEM, errname(DLOCK_ENOMEM));
        if (l)
            table_lock_release_if_idle(&a->table, l);
        return;
    }
    /* Try-once never jumps the queue: with a holder or waiters here, or an
     * acquire in flight, the answer is already "busy". */
    if (m->wait_ms == 0 && (l->holder || l->qhead || l->acquiring)) {
        free(w);
        conn_send_error(c, id, DLOCK_EBUSY, errname(DLOCK_EBUSY));
        return;
    }
    tnode_init(&w->timer, TK_WAITER);
    w->owner = c;
    w->req_id = id;
    w->ttl_ms = ttl;
    w->try_once = m->wait_ms == 0;
    const struct config *cfg = a->cfg;
    w->max_hold_ms = bound(m->max_hold_ms, cfg->default_max_hold_ms, cfg->max_hold_limit_ms);
    w->progress_ms = bound(m->progress_ms, cfg->default_progress_ms, cfg->progress_limit_ms);
    table_waiter_enqueue(l, w);
    waiter_link(c, w);
    /* Waits beyond a year are taken as forever (and cannot overflow). */
    if (m->wait_ms > 0 && m->wait_ms < MAX_FINITE_WAIT_MS)
        timer_set(a, &w->timer, now_ns() + (uint64_t)m->wait_ms * NS_PER_MS);
    lock_settle(a, l);
}

static void agent_release(void *arg, struct conn *c, uint32_t id, uint64_t lease_id)
{
    struct agent *a = arg;
    struct lease *le = table_lease_find(&a->table, lease_id);
    if (!le || le->owner != c) {
        conn_send_error(c, id, DLOCK_ENOTFOUND, "no such lease on this connection");
        return;
    }
    struct lock *l = le->lock;
    release_key(a, l, le->token, le->ttl_ms);
    lease_drop(a, le);
    conn_send_ok(c, id);
    a->stats.releases++;
    /* The next local waiter's acquire goes out right behind the release on
     * the same pipeline, so Redis sees them in that order. */
    lock_settle(a, l);
}

/* Drops every waiter and releases every lease of c. With a reason (the
 * agent is stopping), waiters get it as their answer and holders a LOST
 * event; without one, the connection is gone and nobody is told. */
static void conn_drop_all(struct agent *a, struct conn *c, int reason)
{
    while (!LIST_EMPTY(&c->waiters)) {
        struct waiter *w = LIST_FIRST(&c->waiters);
        struct lock *l = w->lock;
        waiter_finish(a, w, reason);
        lock_settle(a, l);
    }
    while (!LIST_EMPTY(&c->leases)) {
        struct lease *le = LIST_FIRST(&c->leases);
        struct lock *l = le->lock;
        if (reason) {
            struct wire_event ev = {
                .lease_id = le->id, .state = DLOCK_STATE_LOST, .reason = reason};
            conn_send_event(c, &ev);
        }
        release_key(a, l, le->token, le->ttl_ms);
        lease_drop(a, le);
        lock_settle(a, l);
    }
}

void agent_policy_changed(struct agent *a)
{
    server_limits_changed(&a->server);
    struct conn *c;
    LIST_FOREACH(c, &a->server.conns, link)
    {
        struct waiter *w = LIST_FIRST(&c->waiters), *next;
        for (; w; w = next) {
            next = LIST_NEXT(w, olink);
            struct lock *l = w->lock;
            if (policy_allows(&a->cfg->policy, c->uid, c->gids, c->ngids, l->name))
                continue;
            log_info("denied: pid %d uid %u may no longer wait for lock %s", (int)c->pid,
                     (unsigned)c->uid, l->name);
            a->stats.denied++;
            waiter_finish(a, w, DLOCK_EDENIED);
            lock_settle(a, l);
        }
    }
}

static void agent_conn_gone(void *arg, struct conn *c)
{
    struct agent *a = arg;
    if (c->nleases)
        log_info("client pid %d gone; releasing its %u lease(s)", (int)c->pid, c->nleases);
    conn_drop_all(a, c, 0);
}

/* ---- backend events ---- */

static void on_notice(void *arg, const char *name, size_t len)
{
    struct agent *a = arg;
    struct lock *l = table_lock_find(&a->table, name, len);
    if (!l || !l->qhead || l->holder)
        return;
    if (l->acquiring) {
        l->notice_missed = true; /* our attempt may have raced the release */
        return;
    }
    theap_remove(&a->timers, &l->retry);
    lock_settle(a, l);
}

/* Every lock with waiters tries again now (an acquire in flight counts as
 * having missed a notice, so its "taken" answer is retried at once). */
static void kick_all(struct agent *a)
{
    for (size_t b = 0; b < a->table.nbuckets; b++) {
        for (struct lock *l = a->table.buckets[b], *next; l; l = next) {
            next = l->hnext;
            if (l->acquiring)
                l->notice_missed = true;
            else if (l->qhead && !l->holder) {
                theap_remove(&a->timers, &l->retry);
                lock_settle(a, l);
            }
        }
    }
}

/* Notices may have been missed while unsubscribed. */
static void on_subscribed(void *arg)
{
    kick_all(arg);
}

/* The command link is up again: unconfirmed releases go out, and waiters
 * that rode out the outage try at once. */
static void on_ready(void *arg)
{
    struct agent *a = arg;
    a->down_since = 0;
    a->ready_seq++;
    retry_orphans(a);
    kick_all(a);
    if (!a->ready) {
        a->ready = true;
        sd_notify(0, "STATUS=Redis answered; serving");
        if (a->ready_hook)
            a->ready_hook(a->ready_arg);
    }
}

/* ---- timers ---- */

static void on_tick(struct ev_loop *loop, ev_io *w, int revents)
{
    struct agent *a = w->data;
    uint64_t expirations;
    if (read(a->tick_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
        log_warn("timerfd: %s", strerror(errno));
    a->tick_due = 0; /* disarmed: a one-shot timer that fired */
    uint64_t now = now_ns();
    struct tnode *t;
    while ((t = theap_top(&a->timers)) && t->due <= now) {
        theap_remove(&a->timers, t);
        switch (t->kind) {
        case TK_LEASE:
            lease_due(a, container_of(t, struct lease, timer), now);
            break;
        case TK_WAITER:
            waiter_expired(a, container_of(t, struct waiter, timer));
            break;
        case TK_LOCK:
            lock_settle(a, container_of(t, struct lock, retry));
            break;
        case TK_AGENT:
            retry_orphans(a);
            break;
        }
    }
}

/* Points the timerfd at `due` (0: disarmed). The timerfd runs on
 * CLOCK_BOOTTIME, the clock of every deadline, so a timer due during a
 * suspend of the host fires at the resume, not as much later as the host
 * slept (libev's timers run on CLOCK_MONOTONIC). It is set only when the
 * earliest due time changed: no system call in most loop turns. */
static void arm_tick(struct agent *a, uint64_t due)
{
    if (due == a->tick_due)
        return;
    struct itimerspec its = {0};
    if (due) {
        its.it_value.tv_sec = (time_t)(due / NS_PER_SEC);
        its.it_value.tv_nsec = (long)(due % NS_PER_SEC);
    }
    if (timerfd_settime(a->tick_fd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        fatal("timerfd_settime: %s", strerror(errno));
    a->tick_due = due;
}

/* Before the loop blocks: replies to clients go out first (they wait on
 * them), then the batch of Redis commands; a broken Redis link can queue
 * more replies, hence the second client flush. Last, the one timer is
 * pointed at the earliest node of the heap. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
    struct agent *a = w->data;
    log_flush_suppressed();
    server_flush(&a->server);
    a->backend->ops->flush(a->backend);
    server_flush(&a->server);
    struct tnode *t = theap_top(&a->timers);
    arm_tick(a, t ? t->due : 0);
}

/* ---- shutdown ---- */

static void finish_shutdown(struct agent *a)
{
    ev_timer_stop(a->loop, &a->shutdown_timer);
    server_close_all(&a->server);
    ev_break(a->loop, EVBREAK_ALL);
}

static void on_shutdown_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct agent *a = w->data;
    size_t pending = a->backend->ops->pending(a->backend);
    if (pending == 0) {
        log_info("all releases sent and answered; exiting");
        finish_shutdown(a);
    } else if (ev_now(loop) >= a->shutdown_deadline) {
        log_warn("%zu Redis command(s) unanswered at shutdown; their keys expire by TTL", pending);
        finish_shutdown(a);
    }
}

void agent_shutdown(struct agent *a)
{
    if (a->shutting_down)
        return;
    a->shutting_down = true;
    sd_notify(0, "STOPPING=1");
    log_info("shutting down: releasing %zu lease(s)", a->table.nleases);
    server_stop_listening(&a->server);
    struct conn *c;
    LIST_FOREACH(c, &a->server.conns, link)
    conn_drop_all(a, c, DLOCK_ESHUTDOWN);
    a->shutdown_deadline = ev_now(a->loop) + a->cfg->shutdown_timeout_ms / 1000.0;
    ev_timer_init(&a->shutdown_timer, on_shutdown_timer, 0.0, 0.01);
    a->shutdown_timer.data = a;
    ev_timer_start(a->loop, &a->shutdown_timer);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct agent *a = w->data;
    log_info("got signal %d", w->signum);
    agent_shutdown(a);
}

int agent_init(struct agent *a, struct ev_loop *loop, const struct config *cfg)
{
    memset(a, 0, sizeof *a);
    a->loop = loop;
    a->cfg = cfg;
    the_agent = a;
    tnode_init(&a->orphan_retry, TK_AGENT);
    a->tick_fd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (a->tick_fd < 0) {
        log_error("timerfd_create(CLOCK_BOOTTIME): %s", strerror(errno));
        return -1;
    }
    if (table_init(&a->table, random_u64()) != 0)
        goto fail_table;
    a->started = now_ns();
    if (gethostname(a->host, sizeof a->host) != 0 || !a->host[0])
        snprintf(a->host, sizeof a->host, "?");
    a->host[sizeof a->host - 1] = '\0';
    one_word(a->host);
    struct server_hooks hooks = {.arg = a,
                                 .acquire = agent_acquire,
                                 .release = agent_release,
                                 .conn_gone = agent_conn_gone,
                                 .refused = &a->stats.refused};
    if (server_open(&a->server, loop, &hooks, cfg) != 0)
        goto fail_server;
    /* Locks matter more than their status: the agent runs without it. */
    struct status_source src = {.cfg = cfg,
                                .table = &a->table,
                                .stats = &a->stats,
                                .server = &a->server,
                                .started = a->started};
    if (status_open(&a->status, loop, &src, cfg->status_socket, cfg->status_socket_mode) != 0)
        log_warn("running without a status socket");
    if (status_open_http(&a->status, cfg->metrics_listen) != 0)
        log_warn("running without the HTTP metrics endpoint");
    unix_listen_close_unused();
    struct backend_events ev = {
        .arg = a, .on_notice = on_notice, .on_subscribed = on_subscribed, .on_ready = on_ready};
    a->backend = backend_new(loop, cfg, &ev);
    if (!a->backend)
        goto fail_backend;
    a->status.src.backend = a->backend; /* made after the status socket */
    ev_io_init(&a->tick, on_tick, a->tick_fd, EV_READ);
    a->tick.data = a;
    ev_io_start(loop, &a->tick);
    ev_prepare_init(&a->prepare, on_prepare);
    a->prepare.data = a;
    ev_prepare_start(loop, &a->prepare);
    ev_signal_init(&a->sigterm, on_signal, SIGTERM);
    ev_signal_init(&a->sigint, on_signal, SIGINT);
    a->sigterm.data = a->sigint.data = a;
    ev_signal_start(loop, &a->sigterm);
    ev_signal_start(loop, &a->sigint);
    /* Ready (Type=notify) once the sockets listen: clients are served from
     * now on, with typed errors while Redis cannot be reached. Waiting for
     * Redis here would hold the boot, and a start timeout would restart the
     * agent in a loop, while Redis is away. */
    sd_notify(0, "READY=1\nSTATUS=waiting for Redis");
    return 0;
fail_backend:
    status_close(&a->status);
    server_stop_listening(&a->server);
fail_server:
    table_free(&a->table);
fail_table:
    close(a->tick_fd);
    return -1;
}

void agent_free(struct agent *a)
{
    status_close(&a->status);
    server_stop_listening(&a->server);
    server_close_all(&a->server);
    if (a->backend)
        a->backend->ops->destroy(a->backend);
    ev_io_stop(a->loop, &a->tick);
    if (a->tick_fd >= 0)
        close(a->tick_fd);
    a->tick_fd = -1;
    ev_prepare_stop(a->loop, &a->prepare);
    ev_signal_stop(a->loop, &a->sigterm);
    ev_signal_stop(a->loop, &a->sigint);
    theap_free(&a->timers);
    table_free(&a->table);
    while (a->orphans) {
        struct orphan *o = a->orphans;
        a->orphans = o->next;
        free(o);
    }
    the_agent = NULL;
}
