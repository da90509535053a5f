/* SPDX-License-Identifier: BSD-3-Clause */
/* core.c -- the lock logic of dlockd (core.h): FIFO acquire queues with one
 * acquire in flight per name, the watchdog that renews leases in batches
 * from one timer heap, releases on request, disconnect and shutdown, and
 * loss detection with the holder told at once. No I/O, no clock: the time
 * comes in with every call, effects go out through core_env and the
 * backend. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "log.h"
#include "pace.h"
#include "shm.h"

/* The fields of a log line about a lease, and about a name asked for by a
 * client (log.h): journal fields under journald, keys in logfmt and json. */
#define LEASE_FIELDS(le)                                                                           \
    LOG_FIELDS(LOG_F_LOCK((le)->lock->name, (le)->lock->name_len), LOG_F_LEASE((le)->id),          \
               LOG_F_FENCE((le)->fence), LOG_F_PID((le)->owner->pid), LOG_F_UID((le)->owner->uid))
#define CLIENT_NAME_FIELDS(c, name, len)                                                           \
    LOG_FIELDS(LOG_F_LOCK(name, len), LOG_F_PID((c)->pid), LOG_F_UID((c)->uid))

#define container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

#define ORPHAN_RETRY_NS    (1000 * NS_PER_MS)
#define MAX_FINITE_WAIT_MS (366ll * 24 * 3600 * 1000)
/* Renewals of leases in jeopardy sent in one loop turn at most. */
#define RETRIES_PER_TURN 256

#ifdef DLOCK_PLANTED_BUGS
enum core_bug core_bug;
#endif

static void lock_settle(struct core *k, struct lock *l, uint64_t now);

static const char *errname(int code)
{
    return dlock_strerror(code);
}

static void timer_set(struct core *k, struct tnode *t, uint64_t due)
{
    if (theap_set(&k->timers, t, due) != 0)
        fatal("out of memory for timers");
}

/* The validity of a lease whose acquire or renewal was sent at t_send. */
static uint64_t validity_end(uint64_t t_send, uint32_t ttl_ms)
{
    if (PLANTED(CORE_BUG_NO_DRIFT))
        return t_send + (uint64_t)ttl_ms * NS_PER_MS;
    return lease_deadline(t_send, ttl_ms);
}

/* A uniform double in [0, 1) from the environment's randomness (jitter);
 * the middle when there is none. */
static double jitter(struct core *k)
{
    uint64_t v;
    if (k->env.random(k->env.arg, &v) != 0)
        return 0.5;
    return (double)(v >> 11) / 9007199254740992.0;
}

/* 128 random bits, kept as TOKEN_BYTES (token_hex() writes them out). 0, or
 * -1 when the environment has no randomness to give: a token must not be
 * guessable. Each value's nibbles from the lowest, as its hex digits. */
static int new_token(struct core *k, uint8_t out[TOKEN_BYTES])
{
    for (int half = 0; half < 2; half++) {
        uint64_t v;
        if (k->env.random(k->env.arg, &v) != 0)
            return -1;
        for (int i = 0; i < 8; i++, v >>= 8)
            out[half * 8 + i] = (uint8_t)((v & 15) << 4 | (v >> 4 & 15));
    }
    return 0;
}

/* ---- per-client lists ---- */

/* A lease's (or a waiter's, which may become one) share of its uid's renewal
 * budget: 1 s / TTL in thousandths, since a lease asks for a renewal every
 * TTL x renew_fraction. A uid's many short leases cost what they ask of the
 * pipeline, not what they number. */
static uint64_t renew_load(uint32_t ttl_ms)
{
    return ttl_ms ? (1000000 + ttl_ms - 1) / ttl_ms : 0;
}

/* Counts a lease or a waiter of ttl_ms into (add) or out of the uid's account. */
static void acct_count(struct core_account *a, bool lease, uint32_t ttl_ms, bool add)
{
    if (!a)
        return;
    uint32_t *n = lease ? &a->leases : &a->waiters;
    if (add) {
        (*n)++;
        a->load += renew_load(ttl_ms);
    } else {
        (*n)--;
        a->load -= renew_load(ttl_ms);
    }
}

static void lease_link(struct core_client *c, struct lease *le)
{
    LIST_INSERT_HEAD(&c->leases, le, olink);
    c->nleases++;
    acct_count(c->acct, true, le->ttl_ms, true);
}

static void lease_unlink(struct core_client *c, struct lease *le)
{
    LIST_REMOVE(le, olink);
    c->nleases--;
    acct_count(c->acct, true, le->ttl_ms, false);
}

static void waiter_link(struct core *k, struct core_client *c, struct waiter *w)
{
    k->stats.waiters++;
    LIST_INSERT_HEAD(&c->waiters, w, olink);
    c->nwaiters++;
    acct_count(c->acct, false, w->ttl_ms, true);
}

static void waiter_unlink(struct core *k, struct core_client *c, struct waiter *w)
{
    k->stats.waiters--;
    LIST_REMOVE(w, olink);
    c->nwaiters--;
    acct_count(c->acct, false, w->ttl_ms, false);
}

/* ---- waiters ---- */

/* The message of an error answer: for a missing quorum, also why when
 * nodes are excluded after a restart, and when the first counts again. */
static const char *answer_text(struct core *k, int err, uint64_t now, char *buf, size_t len)
{
    char why[160];
    const struct backend *b = k->backend;
    if (err == DLOCK_ENOQUORUM && b->ops->excluded && b->ops->excluded(b, now, why, sizeof why))
        snprintf(buf, len, "%s: %s", errname(err), why);
    else if ((err == DLOCK_EUNAVAIL || err == DLOCK_ENOQUORUM) && k->store_why[0])
        snprintf(buf, len, "%s: %s", errname(err), k->store_why);
    else
        return errname(err);
    return buf;
}

/* Keeps what the store said of an acquire's failure (a WAIT that fell
 * short, a refusal), for the answers while it lasts: "unreachable" alone
 * would send an operator after the wrong cause. */
static void note_store_why(struct core *k, const struct backend_result *r)
{
    snprintf(k->store_why, sizeof k->store_why, "%s", r->err && r->error_text ? r->error_text : "");
}

/* waiter_finish()'s error for a waiter whose client is gone: no answer,
 * counted as cancelled. */
#define WAITER_GONE 1

/* Removes a waiter; err != 0 answers its request with that error (0: it
 * was granted). */
static void waiter_finish(struct core *k, struct waiter *w, int err, uint64_t now)
{
    struct core_client *c = w->owner;
    char text[256];
    if (err && err != WAITER_GONE)
        k->env.error(k->env.arg, c, w->req_id, err, answer_text(k, err, now, text, sizeof text));
    stats_acquire_done(&k->stats, err == WAITER_GONE ? DLOCK_ECANCELED : err, now - w->since);
    theap_remove(&k->timers, &w->timer);
    table_waiter_dequeue(w);
    waiter_unlink(k, c, w);
    free(w);
}

/* A wait that ran out while the store was unreachable and no local lease
 * held the lock ends with the outage's error, not DLOCK_ETIMEDOUT: the lock
 * may well be free, and the caller must not take an outage for a busy lock. */
static void waiter_expired(struct core *k, struct waiter *w, uint64_t now)
{
    struct lock *l = w->lock;
    k->stats.timeouts++;
    waiter_finish(k, w, k->down_since && !l->nholders ? k->down_err : DLOCK_ETIMEDOUT, now);
    lock_settle(k, l, now);
}

/* ---- releases ---- */

/* A release that the store has not confirmed. When the command link drops,
 * the compare-and-delete (or an acquire whose reply was lost) may not have
 * happened: it is kept and sent again when the store is back, until the key
 * would have expired by itself. */
struct orphan {
    struct orphan *next;
    struct core *k;
    uint64_t expires;
    bool notify;          /* publish the release notice (not for a missed acquire) */
    bool self_listening;  /* this agent listened to the name's notices when it was sent */
    unsigned ready_seq;   /* core.ready_seq when sent */
    struct admit_ask ask; /* the kind of lock the key is */
    uint16_t name_len;
    char token[TOKEN_HEX + 1];
    char name[];
};

static void send_orphan(struct core *k, struct orphan *o, uint64_t now);

/* How long the next acquire after a local release waits when other clients
 * listened to the last release (docs/redisson.md): time for a Redisson
 * waiter that the message woke to ask (a round trip and its wake-up). */
#define YIELD_NS (5 * NS_PER_MS)

/* A release of o's key was heard by listeners clients: did any other than
 * this agent listen? */
static void note_listeners(struct core *k, const struct orphan *o, uint32_t listeners)
{
    struct lock *l = table_lock_find(&k->table, o->name, o->name_len);
    if (l)
        l->others_listen = listeners > (o->self_listening ? 1u : 0u);
}

/* Keeps o for another try: when the command link is back, or in a second
 * (an error reply such as BUSY or LOADING leaves the link up). */
static void park_orphan(struct core *k, struct orphan *o, uint64_t now)
{
    if (k->shutting_down || now >= o->expires) {
        if (k->shutting_down)
            k->stop_unsent++;
        free(o);
        return;
    }
    o->next = k->orphans;
    k->orphans = o;
    if (!tnode_queued(&k->orphan_retry))
        timer_set(k, &k->orphan_retry, now + ORPHAN_RETRY_NS);
}

static void on_released(void *arg, const struct backend_result *r)
{
    struct orphan *o = arg;
    struct core *k = o->k;
    if (r->err && o->ready_seq != k->ready_seq && !k->shutting_down) {
        /* A link came back while this was in flight (in quorum mode, a node
         * it could not reach): try again now rather than in a second. */
        send_orphan(k, o, r->at);
        return;
    }
    if (r->err && PLANTED(CORE_BUG_DROP_RELEASE)) {
        free(o);
        return;
    }
    if (r->err) {
        /* Not done, or not known to be done: compare-and-delete again. */
        log_kv(LOG_DEBUG, LOG_FIELDS(LOG_F_LOCK(o->name, o->name_len)),
               "release of %s not confirmed (%s); will retry", o->name, errname(r->err));
        park_orphan(k, o, r->at);
        return;
    }
    if (k->shutting_down)
        k->stop_answered++;
    if (r->outcome != BACKEND_DONE)
        log_kv(LOG_DEBUG, LOG_FIELDS(LOG_F_LOCK(o->name, o->name_len)),
               "release of %s found the key gone or owned by another", o->name);
    else if (k->cfg->formats.nredisson)
        note_listeners(k, o, r->listeners);
    free(o);
}

static void send_orphan(struct core *k, struct orphan *o, uint64_t now)
{
    o->ready_seq = k->ready_seq;
    struct backend_req req = {.op = BACKEND_RELEASE,
                              .kind = o->ask.kind,
                              .limit = o->ask.permits,
                              .name = o->name,
                              .len = o->name_len,
                              .token = o->token,
                              .notify = o->notify};
    int rc = k->backend->ops->op(k->backend, &req, on_released, o);
    if (rc) {
        log_kv(LOG_DEBUG, LOG_FIELDS(LOG_F_LOCK(o->name, o->name_len)),
               "cannot release %s now (%s); %s", o->name, errname(rc),
               k->shutting_down ? "stopping: its key expires by its TTL"
                                : "will retry when the store is back");
        park_orphan(k, o, now);
    }
}

/* Compare-and-delete of a key we hold, or may hold, with a TTL of ttl_ms
 * counted from now at the latest. The release notice wakes the waiters; it
 * is left out after an acquire that missed (the key was never granted): in
 * quorum mode such clean-ups are routine, and waking every waiter for each
 * would make them retry in a loop while the lock is held. */
static void drop_name_key(struct core *k, const char *name, uint16_t name_len, bool watched,
                          const uint8_t token[TOKEN_BYTES], const struct admit_ask *ask,
                          uint32_t ttl_ms, bool notify, uint64_t now)
{
    struct orphan *o = malloc(sizeof *o + name_len + 1);
    if (!o) {
        log_kv(LOG_WARN, LOG_FIELDS(LOG_F_LOCK(name, name_len)),
               "out of memory: %.*s will expire by its TTL", (int)name_len, name);
        return;
    }
    o->k = k;
    o->expires = now + (uint64_t)ttl_ms * NS_PER_MS;
    o->notify = notify;
    o->self_listening = watched;
    o->ask = *ask;
    o->name_len = name_len;
    token_hex(token, o->token);
    memcpy(o->name, name, name_len);
    o->name[name_len] = '\0';
    send_orphan(k, o, now);
}

static void drop_key(struct core *k, const struct lock *l, const uint8_t token[TOKEN_BYTES],
                     const struct admit_ask *ask, uint32_t ttl_ms, bool notify, uint64_t now)
{
    drop_name_key(k, l->name, l->name_len, l->watched, token, ask, ttl_ms, notify, now);
}

/* Releases the key of the lock's last grant from the store (acq_token),
 * which no lease holds, with a TTL of ttl_ms at most left. */
static void release_grant(struct core *k, const struct lock *l, uint32_t ttl_ms, uint64_t now)
{
    drop_key(k, l, l->acq_token, &l->acq_ask, ttl_ms, true, now);
}

/* Releases the key of lease le, unless another local holder shares it (the
 * shared holders of one grant from the store). */
static void release_lease_key(struct core *k, const struct lease *le, uint64_t now)
{
    const struct lease *o;
    LIST_FOREACH(o, &le->lock->holders, hlink)
    if (o != le && memcmp(o->token, le->token, TOKEN_BYTES) == 0)
        return;
    drop_key(k, le->lock, le->token, &le->ask, le->ttl_ms, true, now);
    le->lock->yield_next = le->lock->others_listen;
}

static bool entries_bound(const struct core *k);
static uint32_t want_ms(const struct core *k);

/* After an acquire that did not take the lock, or whose answer is unknown.
 * With entries bound to the keep-alive key, the acquire may have left one
 * that carries the token for a grant on release, and lives as long as the
 * agent does (up to want_ms()): the withdraw, which takes it out, is
 * retried that long, and it tells the waiters of a key it deletes (a
 * release may have handed the key to that entry meanwhile). */
static void withdraw_key(struct core *k, const struct lock *l, uint64_t now)
{
    bool bound = entries_bound(k);
    uint32_t ttl = l->acq_ttl_ms;
    if (bound && want_ms(k) > ttl)
        ttl = want_ms(k);
    drop_key(k, l, l->acq_token, &l->acq_ask, ttl, bound, now);
}

/* Sends the unconfirmed releases again. */
static void retry_orphans(struct core *k, uint64_t now)
{
    theap_remove(&k->timers, &k->orphan_retry);
    struct orphan *list = k->orphans;
    k->orphans = NULL;
    while (list) {
        struct orphan *o = list;
        list = o->next;
        if (now < o->expires)
            send_orphan(k, o, now);
        else
            free(o);
    }
}

/* ---- leases ---- */

/* Forgets a lease: out of the heap, the lease page, the client's list and
 * the table. */
static void lease_drop(struct core *k, struct lease *le, uint64_t now)
{
    histo_add(&k->stats.hold, now > le->granted_at ? now - le->granted_at : 0);
    struct core_client *c = le->owner;
    struct lock *l = le->lock;
    k->leases_by_kind[le->ask.kind]--;
    k->env.slot_free(k->env.arg, c, le->slot);
    if (k->env.lease_kept)
        k->env.lease_kept(k->env.arg, c, le, false);
    theap_remove(&k->timers, &le->timer);
    lease_unlink(c, le);
    table_lease_free(&k->table, le);
    if (!l->nholders && l->phase == LOCK_HELD)
        l->phase = LOCK_IDLE;
}

/* The lease can no longer be proven valid: tell the holder, forget it. When
 * the key may still be ours (deadline passed with a renewal unanswered),
 * delete it too, so that it does not outlive the lease. */
static void lease_lose(struct core *k, struct lease *le, int reason, bool may_own, uint64_t now)
{
    struct lock *l = le->lock;
    struct core_client *c = le->owner;
    struct wire_event ev = {.lease_id = le->id, .state = DLOCK_STATE_LOST, .reason = reason};
    if (!PLANTED(CORE_BUG_SILENT_LOSS))
        k->env.event(k->env.arg, c, &ev);
    log_kv(LOG_INFO, LEASE_FIELDS(le), "lease on %s held by pid %d lost: %s", l->name, (int)c->pid,
           errname(reason));
    k->stats.losses++;
    if (may_own)
        release_lease_key(k, le, now);
    lease_drop(k, le, now);
    lock_settle(k, l, now);
}

/* The deadline the holder sees: while a failover leaves the lease in doubt,
 * the moment the doubt began, which has passed: the lease is not valid. */
static uint64_t lease_shown_deadline(const struct lease *le)
{
    return le->doubt_since && le->doubt_since < le->deadline ? le->doubt_since : le->deadline;
}

/* Shows the lease as it is now in the holder's lease page. */
static void lease_publish(struct core *k, const struct lease *le)
{
    k->env.slot_write(k->env.arg, le->owner, le->slot, le->state, le->id, le->fence,
                      lease_shown_deadline(le));
}

/* Sets the state of a live lease (HELD or JEOPARDY), shows it in the lease
 * page and tells the holder why. */
static void lease_report(struct core *k, struct lease *le, uint8_t state, int reason)
{
    le->state = state;
    lease_publish(k, le);
    struct wire_event ev = {.lease_id = le->id,
                            .state = state,
                            .reason = reason,
                            .deadline_ns = lease_shown_deadline(le)};
    k->env.event(k->env.arg, le->owner, &ev);
}

static void lease_set_state(struct core *k, struct lease *le, uint8_t state, int reason)
{
    if (le->state != state)
        lease_report(k, le, state, reason);
}

/* Sets a lease's timer at due, or at its hold limit if that comes first: a
 * bounded hold stops at its deadline, not at the next renewal or retry. */
static void lease_timer(struct core *k, struct lease *le, uint64_t due)
{
    /* (The planted hold_forever renews past the limit as if there were
     * none: aiming at a limit it never stops at would spin.) */
    if (le->hold_until && le->hold_until < due && le->stopped != DLOCK_EHOLDLIMIT &&
        !PLANTED(CORE_BUG_HOLD_FOREVER))
        due = le->hold_until;
    timer_set(k, &le->timer, due);
}

/* A key in Redisson's format shows the lease's holds as its hold count:
 * has the count in Redis fallen behind? */
static bool holds_unsent(const struct core *k, const struct lease *le)
{
    return le->holds != le->holds_sent &&
           formats_of(&k->cfg->formats, le->lock->name, le->lock->name_len) != KEY_FORMAT_DLOCK;
}

/* The lease's holds changed: a renewal writes the new count at once, or
 * right after the one in flight (lease_schedule()). */
static void holds_changed(struct core *k, struct lease *le, uint64_t now)
{
    if (k->env.lease_kept)
        k->env.lease_kept(k->env.arg, le->owner, le, true);
    if (le->state == DLOCK_STATE_HELD && !le->renew_sent && holds_unsent(k, le))
        timer_set(k, &le->timer, now + 1);
}

/* The next renewal after one sent at t_send succeeded: at once when the
 * holds changed meanwhile. */
static void lease_schedule(struct core *k, struct lease *le, uint64_t t_send)
{
    if ((PLANTED(CORE_BUG_RENEW_STORM) && le->renewals) || holds_unsent(k, le)) {
        lease_timer(k, le, t_send + 1);
        return;
    }
    lease_timer(k, le, lease_next_renew(t_send, le->ttl_ms, k->cfg->renew_fraction));
}

/* A renewal failed without proof of loss: retry until the deadline. */
static void lease_renew_failed(struct core *k, struct lease *le, uint64_t now, int err)
{
    log_kv(LOG_DEBUG, LEASE_FIELDS(le), "renewal of %s failed (%s); retrying", le->lock->name,
           errname(err));
    k->stats.renewal_failures++;
    if (PLANTED(CORE_BUG_JEOPARDY_VALID))
        le->deadline = validity_end(now, le->ttl_ms);
    lease_set_state(k, le, DLOCK_STATE_JEOPARDY, err);
    lease_timer(k, le, lease_renew_retry(now, le->deadline, le->ttl_ms));
}

/* A renewal's callback argument: the lease may be gone when it answers. */
struct renew_ref {
    struct core *k;
    uint64_t lease_id;
};

static void on_renewed(void *arg, const struct backend_result *r)
{
    struct renew_ref *ref = arg;
    struct core *k = ref->k;
    struct lease *le = table_lease_find(&k->table, ref->lease_id);
    free(ref);
    if (!le || !le->renew_sent)
        return; /* released or lost meanwhile */
    uint64_t sent = le->renew_sent, now = r->at;
    le->renew_sent = 0;
    if (r->err == 0)
        histo_add(&k->stats.renew, now - sent);
    if (r->err == 0 && r->outcome == BACKEND_DONE && le->doubt_since && sent < le->doubt_since &&
        !PLANTED(CORE_BUG_STALE_CONFIRM)) {
        /* Sent before the failover: it confirms nothing on the new master.
         * (Backends answer such commands with an error; this is the core's
         * own guard.) Ask again at once. */
        timer_set(k, &le->timer, now);
    } else if (r->err == 0 && (r->outcome == BACKEND_DONE || PLANTED(CORE_BUG_NOT_OURS_RENEWS))) {
        if (le->doubt_since)
            log_kv(LOG_INFO, LEASE_FIELDS(le), "lease on %s confirmed after the failover",
                   le->lock->name);
        le->doubt_since = 0;
        k->stats.renewals++;
        le->renewals++;
        le->deadline = validity_end(PLANTED(CORE_BUG_RENEW_FROM_REPLY) ? now : sent, le->ttl_ms);
        lease_schedule(k, le, sent);
        if (le->state == DLOCK_STATE_HELD)
            lease_publish(k, le);
        else
            lease_report(k, le, DLOCK_STATE_HELD, 0);
    } else if (r->err == 0) {
        /* The key is gone or not ours; in quorum mode, on a majority: the
         * nodes that renewed it must let it go. */
        lease_lose(k, le, DLOCK_ELOST, k->backend->release_after_miss, now);
    } else if (now >= le->deadline) {
        lease_lose(k, le, r->err, true, now);
    } else {
        lease_renew_failed(k, le, now, r->err);
    }
}

/* Should renewal stop for a bounded hold? 0, DLOCK_EHOLDLIMIT or
 * DLOCK_ESTALLED. The touch time comes from the client: it is clamped to now
 * and ignored when older than the grant (a slot's previous lease). */
static int hold_check(struct core *k, const struct lease *le, uint64_t now)
{
    if (le->hold_until && now >= le->hold_until && !PLANTED(CORE_BUG_HOLD_FOREVER))
        return DLOCK_EHOLDLIMIT;
    if (!le->progress_ns || PLANTED(CORE_BUG_NO_PROGRESS))
        return 0;
    uint64_t touched = k->env.slot_touched(k->env.arg, le->owner, le->slot) & ~SHM_TOUCH_RELEASED;
    if (touched > now)
        touched = now;
    uint64_t last = touched > le->granted_at ? touched : le->granted_at;
    return now - last > le->progress_ns ? DLOCK_ESTALLED : 0;
}

/* Renewal stops: the holder is told (JEOPARDY with the reason) and the lease
 * runs out at its deadline. A stalled holder that touches the lease before
 * then is renewed again, so its timer keeps looking. */
static void lease_stop(struct core *k, struct lease *le, uint64_t now, int why)
{
    if (le->stopped != why) {
        log_kv(LOG_INFO, LEASE_FIELDS(le), "lease on %s held by pid %d: renewal stops: %s",
               le->lock->name, (int)le->owner->pid, errname(why));
        le->stopped = why;
        lease_report(k, le, DLOCK_STATE_JEOPARDY, why);
    }
    lease_timer(k, le,
                why == DLOCK_ESTALLED ? lease_renew_retry(now, le->deadline, le->ttl_ms)
                                      : le->deadline);
}

/* A lease's timer fired: renew it, or stop renewing a bounded hold. With a
 * renewal in flight the timer marks the point where it is overdue (the lease
 * is in jeopardy), then the deadline (the lease is lost). */
static void lock_unbackoff(struct core *k, struct lock *l);

/* Its holder released le while no agent ran (the mark in its touch slot,
 * SHM_TOUCH_RELEASED): the key goes as on a release, with nobody to answer.
 * Whether it did. */
static bool released_by_mark(struct core *k, struct lease *le, uint64_t now)
{
    if (!(k->env.slot_touched(k->env.arg, le->owner, le->slot) & SHM_TOUCH_RELEASED))
        return false;
    struct lock *l = le->lock;
    log_kv(LOG_INFO, LEASE_FIELDS(le),
           "lease on %s held by pid %d released while the agent restarted", l->name,
           (int)le->owner->pid);
    release_lease_key(k, le, now);
    bool permit = le->ask.kind == LOCK_SEMAPHORE;
    lease_drop(k, le, now);
    if (permit)
        lock_unbackoff(k, l);
    k->stats.releases++;
    lock_settle(k, l, now);
    return true;
}

static void lease_due(struct core *k, struct lease *le, uint64_t now)
{
    if (!le->renew_sent && released_by_mark(k, le, now))
        return;
    if (now >= le->deadline) {
        lease_lose(k, le, le->stopped ? le->stopped : DLOCK_EUNAVAIL, true, now);
        return;
    }
    if (le->renew_sent) {
        if (!PLANTED(CORE_BUG_NO_JEOPARDY))
            lease_set_state(k, le, DLOCK_STATE_JEOPARDY, DLOCK_EUNAVAIL);
        timer_set(k, &le->timer, le->deadline);
        return;
    }
    if (k->retries_at != now) {
        k->retries_at = now;
        k->turn_retries = 0;
    }
    if (le->state == DLOCK_STATE_JEOPARDY && k->turn_retries >= RETRIES_PER_TURN) {
        /* A bounded number of leases in jeopardy try again per loop turn
         * (per tick: each turn has a time of its own): after an outage they
         * do not all go at once, ahead of the rest. */
        timer_set(k, &le->timer, now + 1);
        return;
    }
    int why = hold_check(k, le, now);
    if (why) {
        lease_stop(k, le, now, why);
        return;
    }
    le->stopped = 0;
    struct renew_ref *ref = malloc(sizeof *ref);
    if (!ref) {
        lease_renew_failed(k, le, now, DLOCK_ENOMEM);
        return;
    }
    *ref = (struct renew_ref){.k = k, .lease_id = le->id};
    char token[TOKEN_HEX + 1];
    token_hex(le->token, token);
    struct backend_req req = {.op = BACKEND_RENEW,
                              .kind = le->ask.kind,
                              .limit = le->ask.permits,
                              .name = le->lock->name,
                              .len = le->lock->name_len,
                              .token = token,
                              .ttl_ms = le->ttl_ms,
                              .holds = le->holds};
    int rc = k->backend->ops->op(k->backend, &req, on_renewed, ref);
    if (rc) {
        free(ref);
        lease_renew_failed(k, le, now, rc);
        return;
    }
    le->holds_sent = le->holds;
    le->renew_sent = now;
    if (le->state == DLOCK_STATE_JEOPARDY)
        k->turn_retries++;
    /* Overdue when unanswered for half of the validity left. */
    timer_set(k, &le->timer, now + (le->deadline - now) / 2);
}

/* ---- acquiring ---- */

/* Gives the key that l's token names to waiter w as a new lease: valid
 * until deadline, with its fencing token, granted at `from` (the acquire's
 * send time, or the handoff). Shown in w's lease page and answered. NULL
 * when it cannot be (w is answered with the error; the caller lets the key
 * go). */
static struct lease *lease_start(struct core *k, struct lock *l, struct waiter *w,
                                 const uint8_t *token, uint32_t ttl_ms, uint64_t deadline,
                                 uint64_t fence, uint64_t from, uint64_t now)
{
    struct core_client *c = w->owner;
    struct lease *le = table_lease_new(&k->table, l, c);
    if (!le) {
        waiter_finish(k, w, DLOCK_ENOMEM, now);
        return NULL;
    }
    memcpy(le->token, token, sizeof le->token);
    le->ask = w->ask;
    le->holder_id = w->holder_id;
    le->holds = le->holds_sent = 1;
    le->ttl_ms = ttl_ms;
    le->deadline = deadline;
    le->state = DLOCK_STATE_HELD;
    le->fence = fence;
    le->slot = k->env.slot_alloc(k->env.arg, c);
    if (le->slot == UINT32_MAX) {
        table_lease_free(&k->table, le);
        waiter_finish(k, w, DLOCK_ELIMIT, now);
        return NULL;
    }
    le->granted_at = from;
    if (w->max_hold_ms)
        le->hold_until = from + (uint64_t)w->max_hold_ms * NS_PER_MS;
    le->progress_ns = (uint64_t)w->progress_ms * NS_PER_MS;
    /* A reader that joins its readers' grant while its own acquire is in
     * flight (asked beside them when it could not join) leaves the lock
     * ACQUIRING: the answer is still to come, and with it the lock's phase
     * (on_acquired()). No other acquire goes out meanwhile, whose answer
     * that one would be taken for, and the lock is not freed under it. */
    if (l->phase != LOCK_ACQUIRING)
        l->phase = LOCK_HELD;
    k->leases_by_kind[le->ask.kind]++;
    lease_link(c, le);
    lease_publish(k, le);
    if (k->env.lease_kept)
        k->env.lease_kept(k->env.arg, c, le, true);
    struct wire_granted g = {.lease_id = le->id,
                             .deadline_ns = deadline,
                             .fence = fence,
                             .ttl_ms = le->ttl_ms,
                             .slot = le->slot};
    k->env.granted(k->env.arg, c, w->req_id, &g);
    k->stats.grants++;
    log_kv(LOG_DEBUG, LEASE_FIELDS(le), "granted %s to pid %d (lease %llx, fence %llu)", l->name,
           (int)c->pid, (unsigned long long)le->id, (unsigned long long)fence);
    waiter_finish(k, w, 0, now);
    return le;
}

/* Whether a lease of kind `ask` can join the holders l has here. */
static bool adoptable_beside(const struct lock *l, const struct admit_ask *ask)
{
    if (!l->nholders)
        return l->phase == LOCK_IDLE;
    const struct lease *o = LIST_FIRST(&l->holders);
    return l->phase == LOCK_HELD && ask->kind != LOCK_EXCLUSIVE && o->ask.kind == ask->kind &&
           o->ask.permits == ask->permits;
}

int core_adopt(struct core *k, struct core_client *c, const struct core_adopted *a, uint64_t now)
{
    if (a->deadline <= now)
        return DLOCK_ELOST;
    uint8_t token[TOKEN_BYTES];
    if (!a->holds || !a->ttl_ms || a->name_len == 0 || token_raw(a->token, token) != 0)
        return DLOCK_EINVAL;
    struct lock *l = table_lock_get(&k->table, a->name, a->name_len);
    if (!l)
        return DLOCK_ENOMEM;
    struct lease *le = NULL;
    if (k->env.slot_touched(k->env.arg, c, a->slot) & SHM_TOUCH_RELEASED) {
        table_lock_release_if_idle(&k->table, l);
        return DLOCK_ENOTFOUND; /* released by its holder meanwhile */
    }
    if (adoptable_beside(l, &a->ask))
        le = table_lease_new_id(&k->table, l, c, a->lease_id);
    if (!le) {
        table_lock_release_if_idle(&k->table, l);
        return DLOCK_EINVAL;
    }
    memcpy(le->token, token, sizeof le->token);
    le->ask = a->ask;
    le->holder_id = a->holder_id;
    le->holds = a->holds;
    le->ttl_ms = a->ttl_ms;
    le->deadline = a->deadline;
    le->fence = a->fence;
    le->slot = a->slot;
    le->granted_at = now; /* progress counts from here: touches of the gap are unknown */
    le->hold_until = a->hold_until;
    le->progress_ns = a->progress_ns;
    le->state = DLOCK_STATE_JEOPARDY;
    le->doubt_since = a->doubt ? now : 0;
    if (PLANTED(CORE_BUG_ADOPT_UNCHECKED)) {
        /* As if the key were surely ours: a fresh validity, renewed later. */
        le->state = DLOCK_STATE_HELD;
        le->deadline = validity_end(now, le->ttl_ms);
        le->doubt_since = 0;
    }
    l->phase = LOCK_HELD;
    /* Its grant's block of tokens is not known here, and the lock's cohort,
     * if a grant of this agent left one open, is another key's: released,
     * the adopted key goes back to the store, never to a local waiter. */
    l->cohort_left = 0;
    k->leases_by_kind[le->ask.kind]++;
    lease_link(c, le);
    lease_publish(k, le);
    if (PLANTED(CORE_BUG_ADOPT_UNCHECKED))
        lease_schedule(k, le, now);
    else
        timer_set(k, &le->timer, now);
    k->stats.adoptions++;
    log_kv(LOG_INFO, LEASE_FIELDS(le),
           "lease on %s held by pid %d taken over from the previous agent (fence %llu)", l->name,
           (int)c->pid, (unsigned long long)le->fence);
    return 0;
}

void core_release_key(struct core *k, const char *name, uint16_t name_len, const char *token,
                      const struct admit_ask *ask, uint32_t ttl_ms, uint64_t now)
{
    /* A token that is no hex (the journal holds none) names no key of ours. */
    uint8_t raw[TOKEN_BYTES];
    if (token_raw(token, raw) != 0)
        return;
    struct lock *l = table_lock_get(&k->table, name, name_len);
    if (!l) {
        log_kv(LOG_WARN, LOG_FIELDS(LOG_F_LOCK(name, name_len)),
               "out of memory: %.*s will expire by its TTL", (int)name_len, name);
        return;
    }
    const struct lease *o;
    LIST_FOREACH(o, &l->holders, hlink)
    if (memcmp(o->token, raw, TOKEN_BYTES) == 0)
        return;
    drop_key(k, l, raw, ask, ttl_ms, true, now);
    table_lock_release_if_idle(&k->table, l);
}

void core_client_resumed(struct core *k, struct core_client *c)
{
    struct lease *le;
    LIST_FOREACH(le, &c->leases, olink)
    {
        int reason = le->state == DLOCK_STATE_HELD ? 0 : le->stopped ? le->stopped : DLOCK_ERESTART;
        struct wire_event ev = {.lease_id = le->id,
                                .state = le->state,
                                .reason = reason,
                                .deadline_ns = lease_shown_deadline(le)};
        k->env.event(k->env.arg, c, &ev);
    }
}

/* The owner of le takes it again (a re-entrant acquire): the same lease,
 * one more hold; its token, fence and deadline do not change. */
static void lease_reenter(struct core *k, struct lease *le, uint32_t req_id, uint64_t now)
{
    le->holds++;
    holds_changed(k, le, now);
    struct wire_granted g = {.lease_id = le->id,
                             .deadline_ns = lease_shown_deadline(le),
                             .fence = le->fence,
                             .ttl_ms = le->ttl_ms,
                             .slot = le->slot};
    k->env.granted(k->env.arg, le->owner, req_id, &g);
    k->stats.grants++;
    log_kv(LOG_DEBUG, LEASE_FIELDS(le), "re-entered %s by pid %d (lease %llx, %u holds)",
           le->lock->name, (int)le->owner->pid, (unsigned long long)le->id, (unsigned)le->holds);
}

/* A grant from the store: the key is ours from l->acq_sent, with the tokens
 * after fence reserved for handoffs. */
static void grant(struct core *k, struct lock *l, struct waiter *w, uint64_t deadline,
                  uint64_t fence, uint64_t now)
{
    struct lease *le =
        lease_start(k, l, w, l->acq_token, l->acq_ttl_ms, deadline, fence, l->acq_sent, now);
    if (!le) {
        release_grant(k, l, l->acq_ttl_ms, now);
        return;
    }
    lease_schedule(k, le, l->acq_sent);
    histo_add(&k->stats.acquire, now - l->acq_sent);
    l->cohort_start = l->acq_sent;
    memcpy(l->cohort_token, l->acq_token, sizeof l->cohort_token);
    l->cohort_left = l->acq_block;
    l->cohort_next = fence + 1;
}

/* The first waiter takes the next token of the last grant's cohort, on the
 * key `token`, without the store: a new lease, valid until cap at most (the
 * lease whose key it shares, of TTL cap_ttl, renewed next at cap_due).
 * Its renewal comes with that lease's, or at once with another TTL. NULL
 * when it cannot be (the waiter is answered with the error). */
static struct lease *cohort_pass(struct core *k, struct lock *l, const uint8_t *token, uint64_t cap,
                                 uint32_t cap_ttl, uint64_t cap_due, uint64_t fence, uint64_t now)
{
    uint32_t ttl_ms = l->qhead->ttl_ms; /* the waiter is gone once answered */
    uint64_t deadline = validity_end(now, ttl_ms);
    if (cap < deadline)
        deadline = cap;
    struct lease *le = lease_start(k, l, l->qhead, token, ttl_ms, deadline, fence, now, now);
    if (!le)
        return NULL;
    l->cohort_next++;
    l->cohort_left--;
    k->stats.handoffs++;
    lease_timer(k, le, ttl_ms == cap_ttl ? cap_due : now);
    return le;
}

/* The kept key of l passes to its first waiter (cohort_pass), valid until
 * the released lease's deadline at most; the key goes to the store if it
 * cannot. */
static void hand_over(struct core *k, struct lock *l, uint64_t now)
{
    l->phase = LOCK_IDLE;
    uint64_t fence = l->cohort_next;
    if (PLANTED(CORE_BUG_HANDOFF_SAME_FENCE))
        fence--;
    if (!cohort_pass(k, l, l->acq_token, l->kept_deadline, l->kept_ttl_ms, l->kept_renew_due, fence,
                     now))
        release_grant(k, l, l->kept_ttl_ms, now);
}

/* May the lock's last grant from the store pass to one more local holder
 * without the store? While it has tokens left and its cohort time runs. */
static bool cohort_open(const struct core *k, const struct lock *l, uint64_t now)
{
    uint64_t cohort_end = l->cohort_start + (uint64_t)k->cfg->cohort_ms * NS_PER_MS;
    return l->cohort_left && (now < cohort_end || PLANTED(CORE_BUG_COHORT_UNBOUNDED)) &&
           !k->shutting_down;
}

/* Is the lease plainly valid, so that its key may serve another holder:
 * HELD, no renewal in flight or stopped, no failover in doubt, and at least
 * half its TTL left? */
static bool plainly_valid(const struct lease *le, uint64_t now)
{
    uint64_t half = (uint64_t)le->ttl_ms * NS_PER_MS / 2;
    return le->state == DLOCK_STATE_HELD && !le->renew_sent && !le->stopped && !le->doubt_since &&
           now + half < le->deadline;
}

/* May the key of lease le, released now, pass to a local acquire? An
 * exclusive key, while its cohort is open and the lease plainly valid. */
static bool may_keep(const struct core *k, const struct lease *le, uint64_t now)
{
    /* (An exclusive holder leaves the lock HELD, no acquire in flight: the
     * acquire's state and the kept key's share their bytes.) */
    return le->ask.kind == LOCK_EXCLUSIVE && cohort_open(k, le->lock, now) &&
           plainly_valid(le, now) && !le->lock->others_listen && le->lock->phase == LOCK_HELD;
}

/* The shared holder whose grant one more local shared holder may join: a
 * plainly valid holder of the last grant's key (the one whose block the
 * join's token comes from), the one with the latest deadline, while the
 * cohort is open; NULL when none may. */
static const struct lease *join_source(const struct core *k, const struct lock *l, uint64_t now)
{
    const struct lease *best = NULL, *le;
    if (!cohort_open(k, l, now))
        return NULL;
    LIST_FOREACH(le, &l->holders, hlink)
    if ((le->ask.kind == LOCK_SHARED || PLANTED(CORE_BUG_READER_JOINS_WRITER)) &&
        plainly_valid(le, now) && memcmp(le->token, l->cohort_token, TOKEN_BYTES) == 0 &&
        (!best || le->deadline > best->deadline))
        best = le;
    return best;
}

/* The first waiter, a shared request, joins the grant of the shared holder
 * src (cohort_pass): a new lease on src's key (the store's permit), valid
 * until src's deadline at most; src keeps the key if it cannot. */
static void join_holders(struct core *k, struct lock *l, const struct lease *src, uint64_t now)
{
    uint64_t fence = PLANTED(CORE_BUG_JOIN_SAME_FENCE) ? src->fence : l->cohort_next;
    uint64_t due = tnode_queued(&src->timer) ? src->timer.due : now;
    cohort_pass(k, l, src->token, src->deadline, src->ttl_ms, due, fence, now);
}

/* What the lock has granted here, for the admission rule. */
static struct admit_held held_here(const struct core *k, const struct lock *l, uint64_t now,
                                   const struct lease **join)
{
    const struct lease *first = LIST_FIRST(&l->holders);
    struct admit_held h = {.nholders = l->nholders};
    *join = NULL;
    if (first) {
        h.kind = first->ask.kind;
        h.permits = first->ask.permits;
        if (h.kind == LOCK_SHARED || PLANTED(CORE_BUG_READER_JOINS_WRITER))
            *join = join_source(k, l, now);
        h.can_join = *join != NULL;
    }
    return h;
}

/* Keeps le's key on its lock for a local acquire in this loop turn. */
static void keep_key(struct core *k, struct lease *le)
{
    struct lock *l = le->lock;
    l->phase = LOCK_KEPT;
    /* The key's token is the one its grant from the store was asked with,
     * in acq_token, which no acquire has used since. */
    l->kept_deadline = le->deadline;
    l->kept_ttl_ms = le->ttl_ms;
    l->kept_renew_due = tnode_queued(&le->timer) ? le->timer.due : le->deadline;
    if (!l->kept_listed) {
        l->kept_listed = true;
        l->kept_next = k->kept;
        k->kept = l;
    }
}

void core_flush(struct core *k, uint64_t now)
{
    while (k->kept) {
        struct lock *l = k->kept;
        k->kept = l->kept_next;
        l->kept_listed = false;
        if (l->phase == LOCK_KEPT) {
            l->phase = LOCK_IDLE;
            release_grant(k, l, l->kept_ttl_ms, now);
        }
        lock_settle(k, l, now); /* frees it if idle */
    }
}

/* The phase of a lock with nothing in flight: HELD with local holders,
 * else IDLE. */
static void lock_rest(struct lock *l)
{
    l->phase = l->nholders ? LOCK_HELD : LOCK_IDLE;
}

/* Waiters wait for a release notice, or the fallback retry at due. */
static void lock_backoff(struct core *k, struct lock *l, uint64_t due)
{
    l->phase = LOCK_BACKOFF;
    timer_set(k, &l->retry, due);
}

/* The fallback retry is not needed now: a notice came, or the store is back. */
static void lock_unbackoff(struct core *k, struct lock *l)
{
    if (l->phase != LOCK_BACKOFF)
        return;
    theap_remove(&k->timers, &l->retry);
    lock_rest(l);
}

/* The store is unreachable (err) for waiter w at its turn. A waiter that may
 * wait rides the outage out: the lock retries when the store is back, at
 * the fallback retry, or when the agent's outage_wait_ms ceiling (if set)
 * runs out; the waiter's own wait ends it with the outage's error
 * (waiter_expired()). Returns false when w must fail now. */
static bool ride_outage(struct core *k, struct lock *l, struct waiter *w, int err, uint64_t now)
{
    if ((err != DLOCK_EUNAVAIL && err != DLOCK_ENOQUORUM) || w->try_once || k->shutting_down ||
        PLANTED(CORE_BUG_NO_OUTAGE_RIDE))
        return false;
    if (!k->down_since)
        k->down_since = now;
    k->down_err = err;
    uint64_t retry = now + (uint64_t)k->cfg->retry_fallback_ms * NS_PER_MS;
    if (k->cfg->outage_wait_ms != CONFIG_OUTAGE_NONE) {
        uint64_t until = k->down_since + (uint64_t)k->cfg->outage_wait_ms * NS_PER_MS;
        if (now >= until)
            return false;
        if (retry > until)
            retry = until;
    }
    lock_backoff(k, l, retry);
    return true;
}

/* Waiters found the lock taken: from now on they want its release notices.
 * The store says when it listens with a notice (a release may have come
 * meanwhile), which makes them try again. Until then, and if it cannot
 * listen, the fallback retry stands. */
static void lock_watch(struct core *k, struct lock *l)
{
    if (!l->qhead || l->watched || !k->backend->ops->watch)
        return;
    int rc = k->backend->ops->watch(k->backend, l->name, l->name_len, true);
    l->confirmed = false; /* until the store's notice says it listens */
    if (rc == 0)
        l->watched = true;
    else
        log_kv(LOG_DEBUG, LOG_FIELDS(LOG_F_LOCK(l->name, l->name_len)),
               "cannot listen for releases of %s now (%s)", l->name, errname(rc));
}

/* Whether the store binds this agent's entries in the waiting-hosts
 * records to its keep-alive key (backend_ops.keepalive): then they need no
 * refresh per name to stay live. */
static bool entries_bound(const struct core *k)
{
    return k->backend && k->backend->ops->keepalive != NULL;
}

/* When the keep-alive numbered seq was sent, 0 when it is not one of the
 * last CORE_KEEPALIVE_KEPT. */
static uint64_t keepalive_sent_at(const struct core *k, uint64_t seq)
{
    if (seq > k->keepalive_seq || k->keepalive_seq - seq >= CORE_KEEPALIVE_KEPT)
        return 0;
    return k->keepalive_sent[seq % CORE_KEEPALIVE_KEPT];
}

/* The keep-alive key is due again: set while an entry may live. */
static void keepalive_send(struct core *k, uint64_t now)
{
    theap_remove(&k->timers, &k->keepalive);
    if (!entries_bound(k) || now >= k->keepalive_until)
        return;
    uint64_t seq = ++k->keepalive_seq;
    k->keepalive_sent[seq % CORE_KEEPALIVE_KEPT] = now;
    k->backend->ops->keepalive(k->backend, k->waiter_id, BACKEND_WAIT_ENTRY_MAX_MS, seq);
    timer_set(k, &k->keepalive, now + (uint64_t)BACKEND_KEEPALIVE_EVERY_MS * NS_PER_MS);
}

/* An acquire that may write a bound entry goes out now: the keep-alive key
 * is kept as long as that entry may live, and set at once (ahead of the
 * acquire on the command link) unless it is already being refreshed. */
static void keepalive_need(struct core *k, uint32_t entry_ms, uint64_t now)
{
    uint64_t until = now + (uint64_t)entry_ms * NS_PER_MS;
    if (until > k->keepalive_until)
        k->keepalive_until = until;
    if (!tnode_queued(&k->keepalive))
        keepalive_send(k, now);
}

/* The pacing settings of the fallback retry (pace.h). */
static struct wait_pace pace_of(const struct core *k)
{
    struct wait_pace p = {.fast_ms = k->cfg->retry_fallback_ms, .max_ms = k->cfg->retry_max_ms};
    /* The long guard only while notices can come: with the notice link
     * down every release's notice is lost. */
    if (entries_bound(k) && !k->notices_down)
        p.guard_ms = wait_guard_ms(p.max_ms);
    return p;
}

/* How long an entry of this agent in a waiting-hosts record lasts, up to
 * the store's cap: refreshed at half its life by an acquire while a client
 * waits, whatever the pace of the fallback retry (pace.h). A bound entry
 * counts only while the agent's keep-alive key lives besides, so its own
 * life is the long bound of an entry whose removal was lost. In quorum
 * mode a grant removes the entry only on the nodes that granted, and the
 * others keep it until it lapses, holding the other hosts back there: the
 * entry keeps the short life of the fast retry. */
static uint32_t want_ms(const struct core *k)
{
    struct wait_pace p = pace_of(k);
    if (k->backend->release_after_miss)
        p.max_ms = 0;
    return wait_entry_ms(&p,
                         entries_bound(k) ? BACKEND_WAIT_BOUND_MAX_MS : BACKEND_WAIT_ENTRY_MAX_MS);
}

/* An acquire's callback argument: the lock stays while it is in flight. */
struct acquire_ref {
    struct core *k;
    struct lock *l;
};

static void on_acquired(void *arg, const struct backend_result *r)
{
    struct acquire_ref *ref = arg;
    struct core *k = ref->k;
    struct lock *l = ref->l;
    free(ref);
    struct waiter *w = l->acq_for;
    uint64_t now = r->at;
    bool forced = l->forced;
    lock_rest(l);
    l->acq_for = NULL;
    l->forced = false;
    /* The token stays pending only after a plain "taken": granted, given
     * back, or withdrawn, it is spent; and around a forced release, a grant
     * on release to it may be of the key the force deleted (core_force). */
    l->token_pending =
        r->err == 0 && r->outcome == BACKEND_TAKEN && !forced && !k->backend->release_after_miss;
    note_store_why(k, r);
    if (r->err == 0 && r->outcome == BACKEND_DONE && forced) {
        /* A grant from around a forced release: no lease; the waiter asks
         * again at once (notice_missed). The acquire may have reached the
         * store after the delete (the force goes out urgent; a cluster
         * retry after TRYAGAIN or ASK), so its key is given back: a
         * compare-and-delete, harmless when the delete came after. */
        log_kv(LOG_INFO, LOG_FIELDS(LOG_F_LOCK(l->name, l->name_len)),
               "the grant of %s came around its forced release: giving it back, asking again",
               l->name);
        k->down_since = 0;
        l->joined = false; /* the acquire took its entry out */
        release_grant(k, l, l->acq_ttl_ms, now);
    } else if (r->err) {
        if (w && !ride_outage(k, l, w, r->err, now))
            waiter_finish(k, w, r->err, now);
        /* Unanswered, or failed halfway: the store may have set the key all
         * the same (or joined the record). Compare-and-delete is harmless if
         * it did not. */
        if (!PLANTED(CORE_BUG_NO_WITHDRAW))
            withdraw_key(k, l, now);
    } else if (r->outcome == BACKEND_DONE) {
        k->down_since = 0;
        l->joined = false; /* the acquire took its entry out */
        l->attempts = 0;
        uint64_t deadline = validity_end(l->acq_sent, l->acq_ttl_ms);
        if (w && !k->shutting_down && (now < deadline || PLANTED(CORE_BUG_GRANT_LATE))) {
            grant(k, l, w, deadline, r->fence, now);
        } else {
            /* Nobody to give it to (waiter gone, agent stopping), or the reply
             * came too late to leave any validity: hand the key back. */
            release_grant(k, l, l->acq_ttl_ms, now);
        }
    } else if (r->outcome == BACKEND_MISMATCH) {
        /* Held elsewhere as another counted kind, or another limit. */
        k->down_since = 0;
        if (k->backend->release_after_miss)
            withdraw_key(k, l, now);
        if (w)
            waiter_finish(k, w, DLOCK_EKIND, now);
    } else {
        k->down_since = 0;
        /* Quorum mode: some nodes may have taken the key for us. */
        if (k->backend->release_after_miss)
            withdraw_key(k, l, now);
        if (w && w->try_once)
            waiter_finish(k, w, DLOCK_EBUSY, now);
        /* A reader refused beside local readers: a writer waits elsewhere,
         * and no more readers join theirs before it. */
        if (l->acq_ask.kind == LOCK_SHARED)
            l->cohort_left = 0;
        lock_watch(k, l);
        if (l->qhead && !l->notice_missed) {
            struct wait_pace p = pace_of(k);
            uint64_t due =
                now + wait_retry_delay(&p, r->pttl_ms, l->confirmed, l->attempts, jitter(k));
            if (l->attempts < LOCK_ATTEMPTS_MAX)
                l->attempts++;
            if (l->joined) {
                /* The entry in the waiting-hosts record lapses on its own
                 * time, not the retry's: an acquire refreshes it (pace.h). */
                uint64_t refresh = wait_refresh_due(&p, want_ms(k), l->acq_sent, now);
                if (refresh < due)
                    due = refresh;
            }
            lock_backoff(k, l, due);
        }
    }
    lock_settle(k, l, now);
}

/* Admits the first waiters that the admission rule lets in (shared
 * requests joining the local holders' grant), then sends an acquire for the
 * first waiter when nothing stands in the way. */
static void lock_kick(struct core *k, struct lock *l, uint64_t now)
{
    if (l->phase == LOCK_KEPT && l->qhead) {
        if (l->qhead->ask.kind == LOCK_EXCLUSIVE) {
            hand_over(k, l, now); /* the lock is HELD then, or IDLE if it failed */
        } else {
            l->phase = LOCK_IDLE; /* an exclusive key serves no other kind */
            release_grant(k, l, l->kept_ttl_ms, now);
        }
    }
    while (l->qhead) {
        struct waiter *w = l->qhead;
        if (k->shutting_down) {
            waiter_finish(k, w, DLOCK_ESHUTDOWN, now);
            continue;
        }
        const struct lease *src;
        struct admit_held h = held_here(k, l, now, &src);
        enum admit_verdict v = admit_first(&h, &w->ask);
        if (v == ADMIT_CLASH) { /* refused on arrival; kept as a guard */
            waiter_finish(k, w, DLOCK_EKIND, now);
            continue;
        }
        if (v == ADMIT_JOIN) {
            join_holders(k, l, src, now);
            continue;
        }
        /* To the store, one acquire at a time: beside local holders only
         * for a reader or a semaphore's next permit. */
        if (v == ADMIT_WAIT || (l->phase != LOCK_IDLE && l->phase != LOCK_HELD))
            return;
        if (l->yield_next && !l->nholders && !w->try_once) {
            /* Others listened to our last release: one of them may go
             * first; their release's message, or the moment, ends it. */
            l->yield_next = false;
            lock_backoff(k, l, now + YIELD_NS);
            return;
        }
        /* The pending token goes again with an acquire of the same kind:
         * the entry it wrote names it for a grant on release. */
        bool again = l->token_pending && l->acq_ask.kind == w->ask.kind &&
                     l->acq_ask.permits == w->ask.permits;
        struct acquire_ref *ref = malloc(sizeof *ref);
        if (!ref || (!again && new_token(k, l->acq_token) != 0)) {
            free(ref);
            waiter_finish(k, w, DLOCK_ENOMEM, now);
            continue;
        }
        l->token_pending = true;
        *ref = (struct acquire_ref){.k = k, .l = l};
        l->acq_sent = now;
        l->acq_ttl_ms = w->ttl_ms;
        l->acq_ask = w->ask;
        /* The tokens this acquire reserves, handed out only if it grants (a
         * reload of the settings meanwhile does not change them); a
         * semaphore's permits are each a grant of their own. */
        l->acq_block = w->ask.kind == LOCK_SEMAPHORE ? 0 : (uint16_t)k->cfg->cohort_handoffs;
        l->notice_missed = false;
        /* Who holds it, for operators looking from any host. */
        char holder[BACKEND_RECORD_MAX - TOKEN_HEX - 1], token[TOKEN_HEX + 1];
        token_hex(l->acq_token, token);
        const struct core_client *c = w->owner;
        snprintf(holder, sizeof holder, "%s %d %u %s", k->host, (int)c->pid, (unsigned)c->uid,
                 c->comm);
        struct backend_req req = {.op = BACKEND_ACQUIRE,
                                  .kind = w->ask.kind,
                                  .limit = w->ask.permits +
                                           (w->ask.permits && PLANTED(CORE_BUG_SEM_OVER_LIMIT)),
                                  .name = l->name,
                                  .len = l->name_len,
                                  .token = token,
                                  .holder = holder,
                                  .ttl_ms = w->ttl_ms,
                                  .block = l->acq_block,
                                  .waiter_id = k->waiter_id,
                                  .want_ms = w->try_once ? 0 : want_ms(k),
                                  .bound = entries_bound(k)};
        if (req.want_ms && req.bound)
            keepalive_need(k, req.want_ms, now);
        int rc = k->backend->ops->op(k->backend, &req, on_acquired, ref);
        if (rc == 0) {
            l->phase = LOCK_ACQUIRING;
            l->acq_for = w;
            /* Unless it grants, it may leave the agent in the record. */
            l->joined |= !w->try_once;
            return;
        }
        free(ref);
        if (ride_outage(k, l, w, rc, now))
            return;
        waiter_finish(k, w, rc, now);
    }
}

/* After any change to a lock: start the next acquire, listen for its
 * release notices while waiters wait for a retry (a waiter that came after
 * the last one left, behind the retry of the last "taken" answer, must not
 * miss the release either), stop once nobody here waits, or free the lock. */
static void lock_settle(struct core *k, struct lock *l, uint64_t now)
{
    lock_kick(k, l, now);
    if (l->qhead && l->phase == LOCK_BACKOFF && !PLANTED(CORE_BUG_NO_REWATCH))
        lock_watch(k, l);
    if (!l->qhead) {
        if (l->watched) {
            l->watched = false;
            l->confirmed = false;
            k->backend->ops->watch(k->backend, l->name, l->name_len, false);
        }
        if (l->joined && l->phase != LOCK_ACQUIRING) {
            /* Nobody here waits any more (they gave up): other hosts need
             * not wait for the entry to lapse. */
            l->joined = false;
            if (l->token_pending && entries_bound(k)) {
                /* Its entry may carry the pending token for a grant on
                 * release: the token's release, retried until confirmed
                 * (a leave is not), takes the entry out, and gives back a
                 * key a release handed to it meanwhile. */
                l->token_pending = false;
                drop_key(k, l, l->acq_token, &l->acq_ask, want_ms(k), true, now);
            }
            struct backend_req req = {
                .name = l->name, .len = l->name_len, .waiter_id = k->waiter_id};
            if (k->backend->ops->leave)
                k->backend->ops->leave(k->backend, &req);
        }
    }
    table_lock_release_if_idle(&k->table, l);
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
static int limit_check(const struct core *k, const struct core_client *c, uint32_t ttl_ms,
                       char *why, size_t len)
{
    const struct config *cfg = k->cfg;
    const struct policy *pol = &cfg->policy;
    /* Every waiter may become a lease: both count against the lease limit. */
    uint32_t max_leases = c->max_leases ? c->max_leases : cfg->max_leases_per_conn;
    if (c->nleases + c->nwaiters >= max_leases) {
        snprintf(why, len, "per-connection lease limit (%u) reached", max_leases);
        return DLOCK_ELIMIT;
    }
    if (c->nwaiters >= cfg->max_waiters_per_conn) {
        snprintf(why, len, "per-connection waiter limit (%u) reached", cfg->max_waiters_per_conn);
        return DLOCK_ELIMIT;
    }
    if (!c->acct)
        return 0;
    uint64_t held = (uint64_t)c->acct->leases + c->acct->waiters;
    if (pol->max_leases_per_uid && held >= pol->max_leases_per_uid) {
        snprintf(why, len, "per-uid lease limit (%u) reached for uid %u", pol->max_leases_per_uid,
                 (unsigned)c->uid);
        return DLOCK_ELIMIT;
    }
    if (pol->max_waiters_per_uid && c->acct->waiters >= pol->max_waiters_per_uid) {
        snprintf(why, len, "per-uid waiter limit (%u) reached for uid %u", pol->max_waiters_per_uid,
                 (unsigned)c->uid);
        return DLOCK_ELIMIT;
    }
    if (pol->renew_budget_per_uid &&
        c->acct->load + renew_load(ttl_ms) > (uint64_t)pol->renew_budget_per_uid * 1000) {
        snprintf(why, len,
                 "per-uid renewal budget (%u) reached for uid %u: a lease of TTL %u ms counts "
                 "%.3g of it (1 s / TTL); longer TTLs cost less",
                 pol->renew_budget_per_uid, (unsigned)c->uid, (unsigned)ttl_ms,
                 (double)renew_load(ttl_ms) / 1000);
        return DLOCK_ELIMIT;
    }
    return 0;
}

/* The lease of c on l, the one of holder id `holder` when there is one;
 * NULL when c holds none. */
static struct lease *lease_of(const struct lock *l, const struct core_client *c, uint64_t holder)
{
    struct lease *le, *any = NULL;
    LIST_FOREACH(le, &l->holders, hlink)
    {
        if (le->owner != c)
            continue;
        if (le->holder_id == holder)
            return le;
        any = le;
    }
    return any;
}

/* A client asking for a name it holds. A re-entrant request by the lease's
 * owner takes it again (*reenter). Any other would queue behind the
 * client's own lease, for ever with an endless wait: an immediate error
 * instead. (A re-entrant request of another owner of the client waits, as
 * two threads sharing a client take turns.) */
static int reacquire_check(struct core *k, const struct core_client *c,
                           const struct wire_acquire *m, struct lease **reenter, char *why,
                           size_t len)
{
    const struct lock *l = table_lock_find(&k->table, m->name, m->name_len);
    struct lease *le = l ? lease_of(l, c, m->owner) : NULL;
    if (!le)
        return 0;
    if (!(m->flags & WIRE_ACQ_REENTRANT)) {
        snprintf(why, len,
                 "this connection already holds %.*s (ask for a re-entrant acquire to take it "
                 "again)",
                 (int)m->name_len, m->name);
        return DLOCK_EHELD;
    }
    if (le->holder_id != m->owner)
        return 0;
    if (le->ask.kind != m->kind || le->ask.permits != m->permits) {
        snprintf(why, len, "%.*s is held here as another kind of lock: re-entry keeps the kind",
                 (int)m->name_len, m->name);
        return DLOCK_EHELD;
    }
    *reenter = le;
    return 0;
}

/* Can a request for ask never share l with its holders or waiters? */
static bool kind_clash(const struct lock *l, const struct admit_ask *ask)
{
    const struct lease *first = LIST_FIRST(&l->holders);
    return (first && !admit_compatible(&first->ask, ask)) ||
           (l->ncounted && !admit_compatible(&l->counted, ask));
}

/* 0, or the error to answer an acquire with; for a limit, why says which. */
static int acquire_check(struct core *k, const struct core_client *c, const struct wire_acquire *m,
                         uint32_t *ttl, struct lease **reenter, char *why, size_t len)
{
    const struct config *cfg = k->cfg;
    if (k->shutting_down)
        return DLOCK_ESHUTDOWN;
    int rc = lock_name_check(m->name, m->name_len,
                             c->max_name_len ? c->max_name_len : cfg->max_name_len);
    if (rc)
        return rc;
    *ttl = m->ttl_ms ? m->ttl_ms : cfg->default_ttl_ms;
    const char *bad = NULL;
    struct admit_ask ask = {.kind = (enum lock_kind)m->kind, .permits = m->permits};
    if (m->flags & ~WIRE_ACQ_FLAGS)
        bad = "unknown acquire flags";
    else if (m->wait_ms < -1)
        bad = "a wait below -1 (forever)";
    else if (m->nnames > 1)
        bad = "one name per acquire: several names in one acquire are not supported";
    else if (admit_check(&ask, &bad) == 0)
        bad = ask.kind == LOCK_EXCLUSIVE || (k->backend->kinds & BACKEND_KIND(ask.kind))
                  ? NULL
                  : "this kind of lock is not available with this agent's Redis mode "
                    "(docs/redis.md)";
    enum key_format format = formats_of(&cfg->formats, m->name, m->name_len);
    if (!bad && !kind_in_format(ask.kind, format))
        bad = format == KEY_FORMAT_REDISSON
                  ? "a name in Redisson's RLock format ([formats] redisson) is an exclusive lock "
                    "(docs/redisson.md)"
              : format == KEY_FORMAT_REDISSON_RW
                  ? "a name in Redisson's RReadWriteLock format ([formats] redisson_rwlock) is a "
                    "shared or an exclusive lock (docs/redisson.md)"
                  : "a name in Redisson's semaphore format ([formats] redisson_semaphore) is a "
                    "semaphore (docs/redisson.md)";
    if (bad) {
        snprintf(why, len, "%s", bad);
        return DLOCK_EINVAL;
    }
    if (*ttl < cfg->min_ttl_ms || *ttl > cfg->max_ttl_ms) {
        /* Named, so that whoever asked for a long TTL learns the agent's cap. */
        snprintf(why, len,
                 "TTL %u ms is outside this agent's range, %u to %u ms (min_ttl_ms, "
                 "max_ttl_ms)",
                 (unsigned)*ttl, (unsigned)cfg->min_ttl_ms, (unsigned)cfg->max_ttl_ms);
        return DLOCK_EINVAL;
    }
    char name[WIRE_MAX_NAME + 1];
    memcpy(name, m->name, m->name_len);
    name[m->name_len] = '\0';
    if (!policy_allows(&cfg->policy, c->uid, c->gids, c->ngids, name)) {
        log_kv(LOG_INFO, CLIENT_NAME_FIELDS(c, name, m->name_len),
               "denied: pid %d uid %u may not use lock %s", (int)c->pid, (unsigned)c->uid, name);
        return DLOCK_EDENIED;
    }
    rc = reacquire_check(k, c, m, reenter, why, len);
    return rc || *reenter ? rc : limit_check(k, c, *ttl, why, len);
}

void core_acquire(struct core *k, struct core_client *c, uint32_t req_id,
                  const struct wire_acquire *m, uint64_t now)
{
    uint32_t ttl = 0;
    char why[192] = "";
    struct lease *reenter = NULL;
    int rc = acquire_check(k, c, m, &ttl, &reenter, why, sizeof why);
    if (reenter) {
        lease_reenter(k, reenter, req_id, now);
        stats_acquire_done(&k->stats, 0, 0);
        return;
    }
    if (rc) {
        stats_acquire_done(&k->stats, rc, 0);
        if (rc == DLOCK_EDENIED)
            k->stats.denied++;
        else
            k->stats.refused++;
        k->env.error(k->env.arg, c, req_id, rc, why[0] ? why : errname(rc));
        return;
    }
    struct lock *l = table_lock_get(&k->table, m->name, m->name_len);
    struct waiter *w = l ? calloc(1, sizeof *w) : NULL;
    if (!w) {
        stats_acquire_done(&k->stats, DLOCK_ENOMEM, 0);
        k->env.error(k->env.arg, c, req_id, DLOCK_ENOMEM, errname(DLOCK_ENOMEM));
        if (l)
            table_lock_release_if_idle(&k->table, l);
        return;
    }
    struct admit_ask ask = {.kind = (enum lock_kind)m->kind, .permits = m->permits};
    if (kind_clash(l, &ask)) {
        free(w);
        k->stats.refused++;
        stats_acquire_done(&k->stats, DLOCK_EKIND, 0);
        snprintf(why, sizeof why, "%s is held or waited for here as another kind of lock%s",
                 l->name, m->kind == LOCK_SEMAPHORE ? ", or with other permits" : "");
        k->env.error(k->env.arg, c, req_id, DLOCK_EKIND, why);
        table_lock_release_if_idle(&k->table, l);
        return;
    }
    /* Try-once never jumps the queue: with waiters here, an acquire in
     * flight, or holders it must wait for, the answer is already "busy". */
    const struct lease *src;
    struct admit_held held = held_here(k, l, now, &src);
    if (m->wait_ms == 0 && (l->qhead || l->phase == LOCK_ACQUIRING ||
                            (held.nholders && admit_first(&held, &ask) == ADMIT_WAIT))) {
        free(w);
        stats_acquire_done(&k->stats, DLOCK_EBUSY, 0);
        k->env.error(k->env.arg, c, req_id, DLOCK_EBUSY, errname(DLOCK_EBUSY));
        return;
    }
    tnode_init(&w->timer, TK_WAITER);
    w->owner = c;
    w->req_id = req_id;
    w->since = now;
    w->ttl_ms = ttl;
    w->try_once = m->wait_ms == 0;
    w->ask = ask;
    w->holder_id = m->owner;
    const struct config *cfg = k->cfg;
    w->max_hold_ms = bound(m->max_hold_ms, cfg->default_max_hold_ms, cfg->max_hold_limit_ms);
    w->progress_ms = bound(m->progress_ms, cfg->default_progress_ms, cfg->progress_limit_ms);
    table_waiter_enqueue(l, w);
    if (PLANTED(CORE_BUG_QUEUE_JUMP) && l->qhead && l->qhead->qnext && l->qhead->qnext != w) {
        /* Goes ahead of every waiter but the first. */
        struct waiter *first = l->qhead;
        l->qtail = w->qprev;
        l->qtail->qnext = NULL;
        w->qnext = first->qnext;
        w->qprev = first;
        first->qnext->qprev = w;
        first->qnext = w;
    }
    waiter_link(k, c, w);
    /* Waits beyond a year are taken as forever (and cannot overflow). */
    if (m->wait_ms > 0 && m->wait_ms < MAX_FINITE_WAIT_MS)
        timer_set(k, &w->timer, now + (uint64_t)m->wait_ms * NS_PER_MS);
    lock_settle(k, l, now);
}

void core_release(struct core *k, struct core_client *c, uint32_t req_id, uint64_t lease_id,
                  uint64_t now)
{
    struct lease *le = table_lease_find(&k->table, lease_id);
    if (!le || le->owner != c) {
        k->env.error(k->env.arg, c, req_id, DLOCK_ENOTFOUND, "no such lease on this connection");
        return;
    }
    if (le->holds > 1 && !PLANTED(CORE_BUG_REENTRY_FIRST_RELEASE)) {
        /* A re-entered lease: the last release of its owner releases it. */
        le->holds--;
        holds_changed(k, le, now);
        k->env.ok(k->env.arg, c, req_id);
        return;
    }
    struct lock *l = le->lock;
    if (may_keep(k, le, now))
        keep_key(k, le);
    else
        release_lease_key(k, le, now);
    bool permit = le->ask.kind == LOCK_SEMAPHORE;
    lease_drop(k, le, now);
    if (permit)
        lock_unbackoff(k, l); /* a permit is free: the next waiter tries at once */
    k->env.ok(k->env.arg, c, req_id);
    k->stats.releases++;
    /* A kept key passes to the next local waiter; else that waiter's acquire
     * goes out right behind the release on the same pipeline, so the store
     * sees them in that order. */
    lock_settle(k, l, now);
}

void core_cancel(struct core *k, struct core_client *c, uint32_t req_id, uint64_t now)
{
    struct waiter *w;
    LIST_FOREACH(w, &c->waiters, olink)
    {
        if (w->req_id != req_id)
            continue;
        struct lock *l = w->lock;
        k->stats.cancels++;
        waiter_finish(k, w, DLOCK_ECANCELED, now);
        lock_settle(k, l, now);
        return;
    }
}

void core_client_drop(struct core *k, struct core_client *c, int reason, uint64_t now)
{
    if (!reason && c->nleases)
        log_kv(LOG_INFO, LOG_FIELDS(LOG_F_PID(c->pid), LOG_F_UID(c->uid)),
               "client pid %d gone; releasing its %u lease(s)", (int)c->pid, c->nleases);
    while (!LIST_EMPTY(&c->waiters)) {
        struct waiter *w = LIST_FIRST(&c->waiters);
        struct lock *l = w->lock;
        waiter_finish(k, w, reason ? reason : WAITER_GONE, now);
        lock_settle(k, l, now);
    }
    while (!LIST_EMPTY(&c->leases)) {
        struct lease *le = LIST_FIRST(&c->leases);
        struct lock *l = le->lock;
        if (reason) {
            struct wire_event ev = {
                .lease_id = le->id, .state = DLOCK_STATE_LOST, .reason = reason};
            k->env.event(k->env.arg, c, &ev);
        }
        release_lease_key(k, le, now);
        lease_drop(k, le, now);
        lock_settle(k, l, now);
    }
}

void core_client_policy(struct core *k, struct core_client *c, uint64_t now)
{
    struct waiter *w = LIST_FIRST(&c->waiters), *next;
    for (; w; w = next) {
        next = LIST_NEXT(w, olink);
        struct lock *l = w->lock;
        if (policy_allows(&k->cfg->policy, c->uid, c->gids, c->ngids, l->name))
            continue;
        log_kv(LOG_INFO, CLIENT_NAME_FIELDS(c, l->name, l->name_len),
               "denied: pid %d uid %u may no longer wait for lock %s", (int)c->pid,
               (unsigned)c->uid, l->name);
        k->stats.denied++;
        waiter_finish(k, w, DLOCK_EDENIED, now);
        lock_settle(k, l, now);
    }
}

/* ---- store events ---- */

/* The waiters of l try again: a release may have come. */
static void lock_notice(struct core *k, struct lock *l, uint64_t now)
{
    if (!l->qhead || l->phase == LOCK_HELD)
        return;
    if (l->phase == LOCK_ACQUIRING) {
        l->notice_missed = true; /* our attempt may have raced the release */
        return;
    }
    lock_unbackoff(k, l);
    lock_settle(k, l, now);
}

void core_notice(struct core *k, const char *name, size_t len, uint64_t now)
{
    struct lock *l = table_lock_find(&k->table, name, len);
    if (!l)
        return;
    if (l->watched) {
        /* It came over the name's subscription: the link listens. */
        l->confirmed = true;
        l->attempts = 0;
    }
    lock_notice(k, l, now);
}

/* How long the key a release granted lives at most: the entry's TTL, or
 * what was left of the keep-alive key's BACKEND_WAIT_ENTRY_MAX_MS. */
static uint32_t granted_key_ms(const struct backend_grant *g)
{
    return g->ttl_ms < BACKEND_WAIT_ENTRY_MAX_MS ? g->ttl_ms : BACKEND_WAIT_ENTRY_MAX_MS;
}

/* A grant on release for this agent's waiter w of l, in LOCK_BACKOFF with
 * the token it names pending: the key is ours from the release, which set
 * it for the entry's TTL or what was left of our keep-alive key's life,
 * whichever is less. The keep-alive numbered g->seq was processed after it
 * was sent and before the release, and set the key to live
 * BACKEND_WAIT_ENTRY_MAX_MS from then: the key lives at least until
 * T_send(seq) + min(TTL, that), which is where the lease's validity ends
 * (less the drift; and no later than the waiter's own TTL from then). It
 * is renewed to its full TTL at once. False when the keep-alive is not
 * known (or that leaves no validity): the caller asks the store, whose
 * acquire takes the key as ours (adoption). */
static bool grant_by_release(struct core *k, struct lock *l, const struct backend_grant *g,
                             uint64_t now)
{
    struct waiter *w = l->qhead;
    uint64_t sent = keepalive_sent_at(k, g->seq);
    if (!sent)
        return false;
    uint32_t ttl = granted_key_ms(g);
    /* (The entry may have been written for an earlier first waiter: the
     * lease is valid no longer than its own TTL allows either.) */
    if (w->ttl_ms < ttl)
        ttl = w->ttl_ms;
    uint64_t deadline = validity_end(PLANTED(CORE_BUG_GRANT_FROM_NOTICE_TIME) ? now : sent, ttl);
    if (now >= deadline)
        return false;
    theap_remove(&k->timers, &l->retry);
    lock_rest(l);
    l->token_pending = false;
    l->joined = false; /* the release took the entry out */
    l->attempts = 0;
    struct lease *le = lease_start(k, l, w, l->acq_token, w->ttl_ms, deadline, g->fence, sent, now);
    if (!le) {
        /* The key lives as the release set it, whatever the waiter's TTL. */
        release_grant(k, l, granted_key_ms(g), now);
        return true;
    }
    k->stats.grants_by_release++;
    lease_timer(k, le, now); /* renewed to its own TTL at once */
    l->cohort_start = sent;
    memcpy(l->cohort_token, l->acq_token, sizeof l->cohort_token);
    l->cohort_left = (uint16_t)(g->block < l->acq_block ? g->block : l->acq_block);
    l->cohort_next = g->fence + 1;
    return true;
}

/* Does a lease of l hold the key of token? */
static bool token_held(const struct lock *l, const uint8_t token[TOKEN_BYTES])
{
    const struct lease *le;
    LIST_FOREACH(le, &l->holders, hlink)
    if (memcmp(le->token, token, TOKEN_BYTES) == 0)
        return true;
    return false;
}

void core_grant(struct core *k, const char *name, size_t len, const struct backend_grant *g,
                uint64_t now)
{
    struct lock *l = table_lock_find(&k->table, name, len);
    if (l && l->watched) {
        l->confirmed = true; /* it came over the name's subscription */
        l->attempts = 0;
    }
    uint8_t token[TOKEN_BYTES];
    if (strcmp(g->to, k->waiter_id) != 0 || token_raw(g->token, token) != 0 || len > WIRE_MAX_NAME)
        return; /* another host's grant: the name is taken, no need to ask */
    bool pending = l && l->token_pending && memcmp(l->acq_token, token, TOKEN_BYTES) == 0;
    if (l && (((l->phase == LOCK_KEPT || l->phase == LOCK_ACQUIRING) &&
               memcmp(l->acq_token, token, TOKEN_BYTES) == 0) ||
              token_held(l, token))) {
        /* The acquire in flight asked with this token: its answer takes the
         * key (adoption), or, sent before the release, says "taken" and
         * the waiter asks again at once. A lease holding it already took
         * it. */
        if (l->phase == LOCK_ACQUIRING)
            l->notice_missed = true;
        return;
    }
    if (pending && l->phase == LOCK_BACKOFF && l->qhead && !k->shutting_down &&
        l->qhead->ask.kind == LOCK_EXCLUSIVE && l->acq_ask.kind == LOCK_EXCLUSIVE) {
        if (!grant_by_release(k, l, g, now))
            lock_unbackoff(k, l); /* asked at once: the acquire adopts the key */
        lock_settle(k, l, now);
        return;
    }
    /* Nobody here to give it to: the key goes back by the normal release,
     * which may grant it to the next host. */
    struct admit_ask ask = {.kind = LOCK_EXCLUSIVE};
    log_kv(LOG_DEBUG, LOG_FIELDS(LOG_F_LOCK(name, len)),
           "a release granted %.*s to this agent with no waiter for it: handing it back", (int)len,
           name);
    drop_name_key(k, name, (uint16_t)len, l && l->watched, token, &ask, granted_key_ms(g), true,
                  now);
    if (l && pending)
        l->token_pending = false;
}

size_t core_force(struct core *k, const char *name, size_t len, struct core_forced *out, size_t max,
                  uint64_t now)
{
    size_t n = 0;
    struct lock *l = table_lock_find(&k->table, name, len);
    if (l) {
        l->cohort_left = 0; /* no local join or handoff of the deleted key */
        /* A grant on release to the pending token may be on its way, of the
         * key the force deletes: its message must not make a lease (it is
         * handed back, a compare-and-delete), and the next acquire asks
         * with a new token. */
        l->token_pending = false;
    }
    if (l && l->phase == LOCK_ACQUIRING) {
        /* Its answer may be a grant the forced release deleted, or "taken"
         * by the key it deleted: either way, asked again at once. */
        l->forced = true;
        l->notice_missed = true;
    }
    /* Each loss settles the lock, which may hand it to a waiter (a reader
     * joining the readers' grant) or free it: found again each time. */
    while ((l = table_lock_find(&k->table, name, len)) && (l->nholders || l->phase == LOCK_KEPT)) {
        if (l->phase == LOCK_KEPT) {
            l->phase = LOCK_IDLE; /* the key is gone: no handoff, no release */
            lock_settle(k, l, now);
            continue;
        }
        struct lease *le = LIST_FIRST(&l->holders);
        if (n < max)
            out[n] = (struct core_forced){
                .pid = (int)le->owner->pid, .uid = le->owner->uid, .fence = le->fence};
        n++;
        lease_lose(k, le, DLOCK_ELOST, false, now);
    }
    return n;
}

/* Every lock with waiters tries again now (an acquire in flight counts as
 * having missed a notice, so its "taken" answer is retried at once). */
static void kick_all(struct core *k, uint64_t now)
{
    for (size_t b = 0; b < k->table.nbuckets; b++) {
        for (struct lock *l = k->table.buckets[b], *next; l; l = next) {
            next = l->hnext;
            if (l->phase == LOCK_ACQUIRING)
                l->notice_missed = true;
            else if (l->qhead && l->phase != LOCK_HELD) {
                lock_unbackoff(k, l);
                lock_settle(k, l, now);
            }
        }
    }
}

/* The store forgot that the lock's notices are wanted: ask again. */
static void lock_rewatch(struct core *k, struct lock *l)
{
    l->confirmed = false;
    if (!l->watched)
        return;
    l->watched = false;
    lock_watch(k, l);
}

/* The store's notice subscriptions were lost and set up anew (a new
 * connection, a failover, a slot that moved): the core alone knows which
 * names are wanted, and asks for each again; notices may have been missed
 * meanwhile, so every waiter tries again too. */
void core_resubscribed(struct core *k, uint64_t now)
{
    k->notices_down = false;
    for (size_t b = 0; b < k->table.nbuckets; b++)
        for (struct lock *l = k->table.buckets[b]; l; l = l->hnext)
            lock_rewatch(k, l);
    kick_all(k, now);
}

void core_unsubscribed(struct core *k, uint64_t now)
{
    k->notices_down = true;
    /* A waiter behind the long guard would miss every release until it:
     * its retry comes now, from core_tick() (this may be called from
     * inside a store's call), and the next ones by the short cap. */
    uint64_t cap = now + (uint64_t)k->cfg->retry_max_ms * NS_PER_MS;
    for (size_t b = 0; b < k->table.nbuckets; b++)
        for (struct lock *l = k->table.buckets[b]; l; l = l->hnext)
            if (l->phase == LOCK_BACKOFF && tnode_queued(&l->retry) && l->retry.due > cap)
                timer_set(k, &l->retry, now);
}

void core_unwatched(struct core *k, const char *name, size_t len, uint64_t now)
{
    struct lock *l = table_lock_find(&k->table, name, len);
    if (!l)
        return;
    lock_rewatch(k, l);
    lock_notice(k, l, now); /* a release may have come meanwhile */
}

/* Leases in doubt after a failover, or in jeopardy because a renewal
 * failed for want of a link, are renewed at once, not at their next retry. */
static void renew_waiting(struct core *k, uint64_t now)
{
    for (size_t b = 0; b < k->table.nbuckets; b++) {
        for (struct lock *l = k->table.buckets[b]; l; l = l->hnext) {
            struct lease *le;
            LIST_FOREACH(le, &l->holders, hlink)
            if ((le->doubt_since || le->state == DLOCK_STATE_JEOPARDY) && !le->renew_sent &&
                !le->stopped && now < le->deadline)
                timer_set(k, &le->timer, now);
        }
    }
}

/* The command link is up again: unconfirmed releases go out, leases in
 * doubt or in jeopardy for a failed renewal are renewed at once (the next
 * retry may come only at the deadline, too late), and waiters that rode
 * out the outage try at once. */
void core_store_ready(struct core *k, uint64_t now)
{
    k->down_since = 0;
    k->ready_seq++;
    keepalive_send(k, now); /* it may have lapsed meanwhile */
    retry_orphans(k, now);
    renew_waiting(k, now);
    kick_all(k, now);
}

/* The key of le may be gone after a failover: it is shown invalid and
 * renewed at once. */
static void lease_doubt(struct core *k, struct lease *le, uint64_t now)
{
    if (now >= le->deadline)
        return;
    log_kv(LOG_INFO, LEASE_FIELDS(le),
           "lease on %s held by pid %d: in doubt after a failover until its key is confirmed",
           le->lock->name, (int)le->owner->pid);
    k->stats.doubts++;
    le->doubt_since = PLANTED(CORE_BUG_DOUBT_IGNORED) ? 0 : now;
    lease_report(k, le, DLOCK_STATE_JEOPARDY, DLOCK_EFAILOVER);
    if (!le->renew_sent)
        timer_set(k, &le->timer, now);
}

/* The store failed over: every lease it may have cost its key is shown
 * invalid (JEOPARDY, DLOCK_EFAILOVER) and renewed at once; the first renewal
 * sent from now on that finds the key makes it HELD again, one that finds it
 * gone makes it LOST. A renewal already in flight confirms nothing (the
 * backend fails it); the retry after it does. */
void core_doubt(struct core *k, bool (*affected)(void *farg, const char *name, size_t len),
                void *farg, uint64_t now)
{
    core_flush(k, now); /* kept keys are not handed over in doubt */
    for (size_t b = 0; b < k->table.nbuckets; b++) {
        for (struct lock *l = k->table.buckets[b]; l; l = l->hnext) {
            if (!l->nholders || (affected && !affected(farg, l->name, l->name_len)))
                continue;
            struct lease *le;
            LIST_FOREACH(le, &l->holders, hlink)
            lease_doubt(k, le, now);
        }
    }
}

/* ---- timers ---- */

void core_tick(struct core *k, uint64_t now)
{
    struct tnode *t;
    while ((t = theap_top(&k->timers)) && t->due <= now) {
        theap_remove(&k->timers, t);
        switch (t->kind) {
        case TK_LEASE:
            lease_due(k, container_of(t, struct lease, timer), now);
            break;
        case TK_WAITER:
            waiter_expired(k, container_of(t, struct waiter, timer), now);
            break;
        case TK_LOCK: {
            struct lock *l = container_of(t, struct lock, retry);
            lock_rest(l); /* the fallback retry is due */
            lock_settle(k, l, now);
            break;
        }
        case TK_AGENT:
            retry_orphans(k, now);
            break;
        case TK_KEEPALIVE:
            keepalive_send(k, now);
            break;
        }
    }
}

uint64_t core_next_due(const struct core *k)
{
    const struct tnode *t = theap_top(&k->timers);
    return t ? t->due : 0;
}

void core_shutdown(struct core *k)
{
    k->shutting_down = true;
}

/* A lock as the status shows it; its waiters are counted by the queue. */
/* The view of lock l with its lease le (NULL: no local holder). */
static void lock_view(const struct lock *l, const struct lease *le, struct core_lock_view *v)
{
    *v = (struct core_lock_view){.name = l->name,
                                 .name_len = l->name_len,
                                 .waiters = l->nwaiters,
                                 .acquiring = l->phase == LOCK_ACQUIRING};
    v->nholders = l->nholders;
    if (le) {
        v->kind = (uint8_t)le->ask.kind;
        v->permits = le->ask.permits;
        v->holds = le->holds;
        v->holder = le->owner;
        v->state = le->state;
        v->fence = le->fence;
        v->granted_at = le->granted_at;
        v->deadline = le->deadline;
        v->ttl_ms = le->ttl_ms;
        v->renewals = le->renewals;
    }
}

struct lock_walk {
    core_lock_fn fn;
    void *arg;
};

/* Calls fn once per local holder of l, or once when it has none. */
static bool view_each(const struct lock *l, core_lock_fn fn, void *arg)
{
    struct core_lock_view v;
    const struct lease *le = LIST_FIRST(&l->holders);
    bool more = true;
    do {
        lock_view(l, le, &v);
        more &= fn(arg, &v);
    } while (le && (le = LIST_NEXT(le, hlink)));
    return more;
}

static bool walk_one(void *arg, const struct lock *l)
{
    struct lock_walk *w = arg;
    return view_each(l, w->fn, w->arg);
}

bool core_walk_locks(const struct core *k, uint64_t *cursor, size_t budget, core_lock_fn fn,
                     void *arg)
{
    struct lock_walk w = {fn, arg};
    return table_walk(&k->table, cursor, budget, walk_one, &w);
}

bool core_find_lock(const struct core *k, const char *name, size_t len, core_lock_fn fn, void *arg)
{
    const struct lock *l = table_lock_find(&k->table, name, len);
    if (!l)
        return false;
    view_each(l, fn, arg);
    return true;
}

/* ---- life ---- */

int core_init(struct core *k, const struct config *cfg, const struct core_env *env,
              struct backend *backend, uint64_t seed, const char *host)
{
    memset(k, 0, sizeof *k);
    k->cfg = cfg;
    k->env = *env;
    k->backend = backend;
    tnode_init(&k->orphan_retry, TK_AGENT);
    tnode_init(&k->keepalive, TK_KEEPALIVE);
    snprintf(k->host, sizeof k->host, "%s", host && host[0] ? host : "?");
    one_word(k->host);
    uint64_t id;
    if (k->env.random(k->env.arg, &id) != 0)
        id = seed ^ 0x9e3779b97f4a7c15ull;
    snprintf(k->waiter_id, sizeof k->waiter_id, "%016llx", (unsigned long long)id);
    /* The first keep-alive number, from the same random bits as the id (a
     * new one each run): far from wrapping, a whole number in Lua. */
    k->keepalive_seq = (id * 0x5851f42d4c957f2dull) >> 12;
    return table_init(&k->table, seed);
}

void core_attach_backend(struct core *k, struct backend *backend)
{
    k->backend = backend;
}

void core_free(struct core *k)
{
    theap_free(&k->timers);
    table_free(&k->table);
    while (k->orphans) {
        struct orphan *o = k->orphans;
        k->orphans = o->next;
        free(o);
    }
}
