/* SPDX-License-Identifier: BSD-3-Clause */
/* test_cluster.c -- dlockd in cluster mode on a real Redis Cluster of 3
 * masters and 3 replicas (hcluster.h), driven through libdlock and read on
 * the nodes with hiredis:
 *
 * - locks on every master: their keys on the master of their slot and
 *   nowhere else, deleted by the release, waiters on another agent woken by
 *   the release notice;
 * - a slot moved to another master while leases in it are held, at once and
 *   with renewals, releases and acquires while it is MIGRATING/IMPORTING:
 *   the leases stay held throughout, their keys move and are renewed on the
 *   new master, nothing stays behind on the old one, a waiter's subscription
 *   moves to the new master and none is left on the old, waiters are woken;
 * - a master killed under held leases and its replica promoted: every lease
 *   ends HELD, its key confirmed on the new master, or LOST, and none is
 *   valid while its key is missing there once the agent has put it in doubt;
 *   and a slot that moved, unseen by the agent, to a master that then failed
 *   over is in doubt too; a waiter that listened on the dead master listens
 *   on the promoted replica, and is woken there;
 * - fencing tokens of a name increasing across slot moves and a failover;
 * - the shared counters of test_quorum_chaos.c over the cluster, through a
 *   failover and a slot move, with wait_replicas = 1;
 * - a cluster over TLS (tls-cluster, tls-replication, client certificates
 *   required): the agents, given TLS seeds, speak TLS to every master they
 *   discover, and after a failover to the promoted replica.
 *
 * Each test starts its own cluster (a few seconds). */
#define H_TEST_TIMEOUT_S 180
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hcluster.h"
#include "lockset.h"
#include "tlspki.h"

/* With this fallback (the longest there is), a waiter behind a holder of
 * LONG_TTL is not retried before about LONG_TTL: one granted within
 * H_EVENT_MS of the release was woken by the release notice. */
#define SLOW_FALLBACK "retry_fallback_ms = 60000"
#define LONG_TTL      30000
/* Renewals every 1.5 s of a LONG_TTL lease, so that a test sees several
 * while it holds a slot in migration. */
#define FAST_RENEWAL "renew_fraction = 0.05"

/* The cluster, then agents 0..n-1, agent i with the seeds seeds[i] (NULL:
 * every node for every agent). */
static void start(int n, const char *agent_ini, const char *redis_ini, const unsigned *seeds)
{
    hc_start();
    for (int i = 0; i < n; i++)
        hc_agent_config(i, agent_ini, redis_ini, seeds ? seeds[i] : 0);
    for (int i = 0; i < n; i++)
        hc_agent_start(i);
}

static uint64_t parse_u64(const char *s, const char *what)
{
    cr_assert_not_null(s, "%s: missing", what);
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    cr_assert(end != s && *end == '\0' && s[0] >= '0' && s[0] <= '9',
              "%s: '%s' is not a decimal number", what, s);
    return (uint64_t)v;
}

/* What lease l on name leaves on master m, the master of its slot: its
 * holder record "TOKEN HOST PID UID COMMAND" under the lock key, with a TTL
 * no longer than the lease's; the slot's fencing mark at
 * least the lease's fence; and no key of the slot on any other master.
 * Returns the token. */
static const char *check_held(int m, const char *name, const dlock_lease *l)
{
    unsigned slot = hc_name_slot(name);
    cr_assert_eq(hc_slot_node(slot), m, "%s: slot %u is not on node %d", name, slot, m);
    const char *key = hc_lock_key(name);
    char *tok = hc_get(m, key);
    cr_assert(h_is_token(tok), "%s on node %d: '%s' is no token", key, m, tok ? tok : "(none)");
    long long pttl = hc_pttl(m, key);
    cr_assert(pttl > 0 && pttl <= (long long)dlock_lease_ttl_ms(l), "%s on node %d: PTTL %lld", key,
              m, pttl);
    cr_assert(strlen(tok) > 33 && tok[32] == ' ', "%s on node %d: '%s' holds no holder record", key,
              m, tok);
    uint64_t mark = parse_u64(hc_get(m, hc_mark_key(name)), hc_mark_key(name));
    cr_assert_geq(mark, dlock_lease_fence(l), "%s: mark %" PRIu64 " below the fence %" PRIu64, name,
                  mark, dlock_lease_fence(l));
    int masters[HC_NODES];
    int n = hc_masters(masters);
    for (int k = 0; k < n; k++)
        if (masters[k] != m)
            cr_assert_eq(hc_count_slot(masters[k], slot), 0,
                         "master %d holds keys of slot %u (of %s), served by %d", masters[k], slot,
                         name, m);
    return tok;
}

/* Fails unless every lease of ls is valid and its client got neither a
 * JEOPARDY nor a LOST event for it. */
static void assert_held(struct h_cl *cl, dlock_lease *const *ls, int n)
{
    for (int k = 0; k < n; k++) {
        cr_assert(dlock_lease_valid(ls[k]), "lease on %s is not valid", dlock_lease_name(ls[k]));
        cr_assert_eq(h_events(cl, ls[k], DLOCK_STATE_JEOPARDY), 0, "lease on %s went JEOPARDY",
                     dlock_lease_name(ls[k]));
        cr_assert_eq(h_events(cl, ls[k], DLOCK_STATE_LOST), 0, "lease on %s was LOST",
                     dlock_lease_name(ls[k]));
    }
}

/* Keeps asserting the leases held for ms. */
static void held_for(int ms, struct h_cl *cl, dlock_lease *const *ls, int n)
{
    int64_t end = h_now_ms() + ms;
    while (h_now_ms() < end) {
        assert_held(cl, ls, n);
        h_pump_all(10);
    }
    assert_held(cl, ls, n);
}

/* Waits until the PTTL of key on node rises above a value read before it (a
 * renewal reached that node), asserting meanwhile that the key stays there
 * and that the leases stay held. */
static void wait_renewal_on(int node, const char *key, struct h_cl *cl, dlock_lease *const *ls,
                            int n)
{
    long long lowest = hc_pttl(node, key);
    cr_assert_gt(lowest, 0, "%s is not on node %d (PTTL %lld)", key, node, lowest);
    int64_t end = h_deadline(H_EVENT_MS);
    for (;;) {
        assert_held(cl, ls, n);
        long long p = hc_pttl(node, key);
        cr_assert_gt(p, 0, "%s left node %d (PTTL %lld)", key, node, p);
        if (p > lowest)
            return;
        lowest = p;
        if (h_now_ms() > end)
            cr_assert_fail("%s on node %d was not renewed within %d ms", key, node,
                           h_scaled_ms(H_EVENT_MS));
        h_pump_all(20);
    }
}

/* After the last release in a slot: no lock key of the
 * names on `node`, and only the slot's mark left in the slot there; none of
 * the slot's keys on `old`. */
static void check_slot_empty(int node, int old, char (*names)[64], int n)
{
    unsigned slot = hc_name_slot(names[0]);
    for (int k = 0; k < n; k++) {
        HC_KEY_GONE(node, hc_lock_key(names[k]));
    }
    cr_assert_eq(hc_count_slot(node, slot), 1, "slot %u holds %lld keys, not only its mark", slot,
                 hc_count_slot(node, slot));
    cr_assert_eq(hc_exists(node, hc_mark_key(names[0])), 1);
    if (old >= 0)
        cr_assert_eq(hc_count_slot(old, slot), 0, "keys of slot %u left on its old master %d", slot,
                     old);
}

/* ---- a: every master ---- */

HCTEST(cluster, locks_on_every_master_and_waiters_woken_on_another_agent)
{
    /* Agent 0 knows one node to start with, agent 1 two others. */
    const unsigned seeds[] = {HC_SEED(0), HC_SEED(4) | HC_SEED(2)};
    start(2, SLOW_FALLBACK, NULL, seeds);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    char names[3][64];
    dlock_lease *l[3];
    const char *tok[3];
    for (int k = 0; k < 3; k++) {
        hc_name_on(m[k], "spread", names[k], sizeof names[k]);
        l[k] = h_must_acquire(a, names[k], LONG_TTL);
        tok[k] = check_held(m[k], names[k], l[k]);
    }
    struct h_acq w[3];
    for (int k = 0; k < 3; k++)
        h_acquire_async(b, names[k], LONG_TTL, DLOCK_WAIT_FOREVER, &w[k]);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(300, !w[0].done && !w[1].done && !w[2].done);
    for (int k = 0; k < 3; k++)
        cr_assert_str_eq(hc_get(m[k], hc_lock_key(names[k])), tok[k],
                         "a waiter touched the holder's key");
    for (int k = 0; k < 3; k++) {
        uint64_t f = dlock_lease_fence(l[k]);
        cr_assert_eq(dlock_lease_release(l[k]), 0);
        H_WAIT_UNTIL(H_EVENT_MS, w[k].done);
        cr_assert_eq(w[k].status, 0, "waiter for %s: %s (%d)", names[k],
                     dlock_strerror(w[k].status), w[k].status);
        cr_assert_gt(dlock_lease_fence(w[k].lease), f);
        const char *t2 = check_held(m[k], names[k], w[k].lease);
        cr_assert_str_neq(t2, tok[k]);
    }
    for (int k = 0; k < 3; k++) {
        uint64_t f = dlock_lease_fence(w[k].lease);
        cr_assert_eq(dlock_lease_release(w[k].lease), 0);
        check_slot_empty(m[k], -1, &names[k], 1);
        /* The token and the 32 after it, reserved for handoffs. */
        cr_assert_eq(parse_u64(hc_get(m[k], hc_mark_key(names[k])), "mark"), f + 32);
    }
}

/* ---- b: slot migration ---- */

/* The connections subscribed to name's release channel on node i. */
static long long shard_subscribers(int i, const char *name)
{
    redisReply *r = hc_cmd(i, "PUBSUB SHARDNUMSUB %s", h_channel(name));
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                  r->element[1]->type == REDIS_REPLY_INTEGER,
              "PUBSUB SHARDNUMSUB on node %d: reply type %d", i, r->type);
    long long n = r->element[1]->integer;
    freeReplyObject(r);
    return n;
}

#define NMIG 4

/* NMIG names in one slot of master `from`, held by cl; their tokens. */
static unsigned hold_slot_names(struct h_cl *cl, int from, char (*names)[64], dlock_lease **l,
                                const char **tok)
{
    hc_name_on(from, "mig0", names[0], sizeof names[0]);
    unsigned slot = hc_name_slot(names[0]);
    for (int k = 1; k < NMIG; k++) {
        char base[16];
        snprintf(base, sizeof base, "mig%d", k);
        hc_name_in_slot(slot, base, names[k], sizeof names[k]);
    }
    for (int k = 0; k < NMIG; k++) {
        l[k] = h_must_acquire(cl, names[k], LONG_TTL);
        tok[k] = check_held(from, names[k], l[k]);
    }
    return slot;
}

HCTEST(cluster, leases_stay_held_while_their_slot_moves)
{
    const unsigned seeds[] = {HC_SEED(1), HC_SEED(3) | HC_SEED(5)};
    start(2, SLOW_FALLBACK "\n" FAST_RENEWAL, NULL, seeds);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    int from = m[0], to = m[1];
    char names[NMIG][64];
    dlock_lease *l[NMIG];
    const char *tok[NMIG];
    unsigned slot = hold_slot_names(a, from, names, l, tok);
    /* A waiter on the other agent, subscribed on the old master. */
    struct h_acq w;
    h_acquire_async(b, names[0], LONG_TTL, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(from, names[0]) == 1);
    H_HOLDS_FOR(300, !w.done);

    /* The subscription follows the slot, and none stays on the old master. */
    hc_move_slot(slot, to);
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(to, names[0]) == 1);
    cr_assert_eq(shard_subscribers(from, names[0]), 0);
    assert_held(a, l, NMIG);
    cr_assert_eq(hc_count_slot(from, slot), 0);
    for (int k = 0; k < NMIG; k++) {
        cr_assert_str_eq(hc_get(to, hc_lock_key(names[k])), tok[k]);
        check_held(to, names[k], l[k]);
    }
    for (int k = 0; k < NMIG; k++)
        wait_renewal_on(to, hc_lock_key(names[k]), a, l, NMIG);
    held_for(500, a, l, NMIG);
    cr_assert(!w.done, "the waiter got %s while it was held", names[0]);

    /* Woken on the new master by the release notice. */
    uint64_t f0 = dlock_lease_fence(l[0]);
    cr_assert_eq(dlock_lease_release(l[0]), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_gt(dlock_lease_fence(w.lease), f0);
    check_held(to, names[0], w.lease);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    for (int k = 1; k < NMIG; k++)
        cr_assert_eq(dlock_lease_release(l[k]), 0);
    check_slot_empty(to, from, names, NMIG);
}

HCTEST(cluster, leases_stay_held_through_renewals_and_releases_mid_migration)
{
    const unsigned seeds[] = {0, HC_SEED(2)};
    start(2, SLOW_FALLBACK "\n" FAST_RENEWAL, NULL, seeds);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    int from = m[2], to = m[0];
    char names[NMIG + 1][64];
    dlock_lease *l[NMIG];
    const char *tok[NMIG];
    unsigned slot = hold_slot_names(a, from, names, l, tok);
    hc_name_in_slot(slot, "late", names[NMIG], sizeof names[NMIG]);
    struct h_acq w1;
    h_acquire_async(b, names[1], LONG_TTL, DLOCK_WAIT_FOREVER, &w1);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(300, !w1.done);

    /* MIGRATING on the old master, IMPORTING on the new one, no key moved:
     * the old master renews them all. */
    struct hc_migration mig;
    hc_migrate_begin(&mig, slot, to);
    for (int k = 0; k < NMIG; k++)
        wait_renewal_on(from, hc_lock_key(names[k]), a, l, NMIG);

    /* The keys of two names move: their renewals follow ASK to the new
     * master; the others' are still served by the old one. */
    const char *moved[] = {hc_lock_key(names[0]), hc_lock_key(names[1])};
    cr_assert_eq(hc_migrate_keys(&mig, moved, 2), 2);
    cr_assert_str_eq(hc_get(to, moved[0]), tok[0]);
    cr_assert_str_eq(hc_get(to, moved[1]), tok[1]);
    wait_renewal_on(to, moved[0], a, l, NMIG);
    wait_renewal_on(to, moved[1], a, l, NMIG);
    wait_renewal_on(from, hc_lock_key(names[2]), a, l, NMIG);
    wait_renewal_on(from, hc_lock_key(names[3]), a, l, NMIG);
    /* The lock key of a third name moves on its own, without its slot's
     * fencing mark: a renewal touches the lock key alone, so the new master
     * renews it at once (after ASK). */
    const char *split[] = {hc_lock_key(names[2])};
    cr_assert_eq(hc_migrate_keys(&mig, split, 1), 1);
    wait_renewal_on(to, split[0], a, l, NMIG);
    wait_renewal_on(to, split[0], a, l, NMIG);

    /* Releases mid-migration: one whose keys moved (the waiter's), one whose
     * keys did not. */
    uint64_t f1 = dlock_lease_fence(l[1]);
    cr_assert_eq(dlock_lease_release(l[1]), 0);
    cr_assert_eq(dlock_lease_release(l[3]), 0);
    dlock_lease *still[] = {l[0], l[2]};
    HC_KEY_GONE(to, moved[1]);
    HC_KEY_GONE(from, hc_lock_key(names[3]));
    assert_held(a, still, 2);
    /* The other keys move too, the mark with them, while the slot is still
     * the old master's. An acquire of a free name of the slot now goes to
     * the old master, which sends it on with ASK, and gets TRYAGAIN from the
     * new one (its lock key is not there) until the slot is the new
     * master's, then MOVED from the old one. The agent retries TRYAGAIN for
     * command_timeout_ms and a waiter rides out the outage within its own
     * wait: the move ends well within that. */
    hc_migrate_some(&mig, 1L << 30);
    cr_assert_eq(hc_count_slot(from, slot), 0);
    struct h_acq late;
    h_acquire_async(a, names[NMIG], LONG_TTL, 60000, &late);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    held_for(1000, a, still, 2);
    hc_migrate_finish(&mig);
    assert_held(a, still, 2);
    H_WAIT_UNTIL(H_EVENT_MS, w1.done && late.done);
    cr_assert_eq(w1.status, 0, "waiter: %s (%d)", dlock_strerror(w1.status), w1.status);
    cr_assert_gt(dlock_lease_fence(w1.lease), f1);
    check_held(to, names[1], w1.lease);
    cr_assert_eq(late.status, 0, "acquire begun mid-migration: %s (%d)",
                 dlock_strerror(late.status), late.status);
    check_held(to, names[NMIG], late.lease);
    cr_assert_eq(hc_count_slot(from, slot), 0);
    for (int k = 0; k < 2; k++) {
        cr_assert_str_eq(hc_get(to, hc_lock_key(dlock_lease_name(still[k]))), tok[2 * k]);
        wait_renewal_on(to, hc_lock_key(dlock_lease_name(still[k])), a, still, 2);
    }

    /* A waiter that subscribes on the new master is woken there. */
    struct h_acq w2;
    h_acquire_async(b, names[2], LONG_TTL, DLOCK_WAIT_FOREVER, &w2);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(300, !w2.done);
    cr_assert_eq(dlock_lease_release(l[2]), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w2.done);
    cr_assert_eq(w2.status, 0, "waiter: %s (%d)", dlock_strerror(w2.status), w2.status);

    cr_assert_eq(dlock_lease_release(l[0]), 0);
    cr_assert_eq(dlock_lease_release(w1.lease), 0);
    cr_assert_eq(dlock_lease_release(w2.lease), 0);
    cr_assert_eq(dlock_lease_release(late.lease), 0);
    check_slot_empty(to, from, names, NMIG + 1);
}

/* ---- c: failover ---- */

/* One lease followed through a failover. */
struct tracked {
    struct h_cl *cl;
    dlock_lease *l;
    char name[64];
    int node;      /* the master of its slot after the failover */
    char tok[256]; /* its value: token and holder record */
    int key_gone;  /* its key was deleted on the new master */
    int in_doubt;  /* the failover concerns it: it must be put in doubt */
    int doubted;   /* a JEOPARDY event with DLOCK_EFAILOVER came */
    int confirmed; /* a HELD event came after that */
    int lost;      /* a LOST event came */
};

/* Reads t's events so far. */
static void track_events(struct tracked *t)
{
    t->doubted = t->confirmed = t->lost = 0;
    for (int i = 0; i < t->cl->nev; i++) {
        const struct h_event *e = &t->cl->ev[i];
        if (e->lease != t->l)
            continue;
        if (e->state == DLOCK_STATE_JEOPARDY && e->reason == DLOCK_EFAILOVER) {
            t->doubted = 1;
            t->confirmed = 0;
        } else if (e->state == DLOCK_STATE_HELD && t->doubted) {
            t->confirmed = 1;
        } else if (e->state == DLOCK_STATE_LOST) {
            t->lost = 1;
        }
    }
}

/* Whenever a lease is valid, its key holds its token on its master. A lease
 * whose key is gone is checked from its doubt (or loss) on: until the
 * agent has seen the failover, it cannot know. */
static void check_valid_means_key(struct tracked *t, int n)
{
    for (int k = 0; k < n; k++) {
        track_events(&t[k]);
        if (t[k].key_gone && !t[k].doubted && !t[k].lost)
            continue;
        if (!dlock_lease_valid(t[k].l))
            continue;
        char *v = hc_get(t[k].node, hc_lock_key(t[k].name));
        cr_assert(v && strcmp(v, t[k].tok) == 0,
                  "lease on %s is valid but its key on node %d holds %s, not its token %s",
                  t[k].name, t[k].node, v ? v : "nothing", t[k].tok);
    }
}

static int all_settled(struct tracked *t, int n)
{
    for (int k = 0; k < n; k++) {
        track_events(&t[k]);
        if (t[k].in_doubt && !t[k].lost && !t[k].confirmed)
            return 0;
    }
    return 1;
}

HCTEST(cluster, failover_ends_every_lease_held_or_lost)
{
    start(2, NULL, NULL, NULL);
    struct h_cl *cl[2] = {h_client_at(0), h_client_at(1)};
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    int victim = m[0], other = m[1];
    int replica = hc_replica_of(victim);
    cr_assert_geq(replica, 0);
    /* Agent 0: three leases on the victim; agent 1: two on the victim, one
     * on another master. */
    enum { N = 6 };
    struct tracked t[N];
    memset(t, 0, sizeof t);
    for (int k = 0; k < N; k++) {
        int agent = k < 3 ? 0 : 1;
        int on = k == N - 1 ? other : victim;
        char base[16];
        snprintf(base, sizeof base, "fo%d", k);
        hc_name_on(on, base, t[k].name, sizeof t[k].name);
        t[k].cl = cl[agent];
        t[k].l = h_must_acquire(cl[agent], t[k].name, LONG_TTL);
        snprintf(t[k].tok, sizeof t[k].tok, "%s", check_held(on, t[k].name, t[k].l));
        t[k].node = on == victim ? replica : on;
        t[k].in_doubt = on == victim;
    }
    /* The replica has every key of the victim's leases. */
    for (int k = 0; k < N; k++)
        if (t[k].in_doubt) {
            const char *key = hc_lock_key(t[k].name);
            H_WAIT_UNTIL(H_EVENT_MS,
                         hc_get(replica, key) && !strcmp(hc_get(replica, key), t[k].tok));
        }

    /* Agent 0 sees nothing of the failover until its lease's key is gone on
     * the new master. */
    struct tracked *x = &t[0];
    h_agent_pause(0);
    int promoted = hc_kill_master(victim);
    cr_assert_eq(promoted, replica);
    hc_del(promoted, hc_lock_key(x->name));
    x->key_gone = 1;
    h_agent_resume(0);

    int64_t end = h_deadline(2 * H_EVENT_MS);
    for (;;) {
        check_valid_means_key(t, N);
        if (all_settled(t, N))
            break;
        if (h_now_ms() > end) {
            for (int k = 0; k < N; k++)
                fprintf(stderr, "%s: in doubt %d, doubted %d, confirmed %d, lost %d, valid %d\n",
                        t[k].name, t[k].in_doubt, t[k].doubted, t[k].confirmed, t[k].lost,
                        dlock_lease_valid(t[k].l));
            cr_assert_fail("not every lease on the failed master ended HELD or LOST within %d ms",
                           h_scaled_ms(2 * H_EVENT_MS));
        }
        h_pump_all(10);
    }
    cr_assert(x->lost, "the lease whose key was deleted on the new master was not lost");
    cr_assert(!dlock_lease_valid(x->l));
    for (int k = 1; k < N; k++) {
        cr_assert(!t[k].lost, "lease on %s was lost although its key was on the new master",
                  t[k].name);
        cr_assert_eq(dlock_lease_state(t[k].l), DLOCK_STATE_HELD, "lease on %s: %s", t[k].name,
                     dlock_state_name(dlock_lease_state(t[k].l)));
        cr_assert(dlock_lease_valid(t[k].l), "lease on %s is not valid", t[k].name);
    }
    /* And so it stays. */
    int64_t until = h_now_ms() + 2000;
    while (h_now_ms() < until) {
        check_valid_means_key(t, N);
        for (int k = 1; k < N; k++)
            cr_assert(dlock_lease_valid(t[k].l), "lease on %s is no longer valid", t[k].name);
        h_pump_all(10);
    }
    cr_assert_eq(dlock_lease_release(x->l), DLOCK_ELOST);
    for (int k = 1; k < N; k++) {
        cr_assert_eq(dlock_lease_release(t[k].l), 0);
        HC_KEY_GONE(t[k].node, hc_lock_key(t[k].name));
    }
    cr_assert_eq(hc_exists(promoted, hc_lock_key(x->name)), 0);
    /* The old master comes back as a replica; the agents carry on. */
    hc_node_restart(victim);
    for (int k = 0; k < N; k++) {
        dlock_lease *l = NULL;
        int rc = h_acquire(t[k].cl, t[k].name, LONG_TTL, H_EVENT_MS, &l);
        cr_assert_eq(rc, 0, "acquire %s after the failover: %s (%d)", t[k].name, dlock_strerror(rc),
                     rc);
        check_held(t[k].node, t[k].name, l);
        cr_assert_eq(dlock_lease_release(l), 0);
    }
}

/* The connections to node i whose last command is the PING that ends a
 * link's set-up: the agents' command and notice links to a replica. */
static int idle_links(int i)
{
    redisReply *r = hc_cmd(i, "CLIENT LIST");
    int n = 0;
    if (r->type == REDIS_REPLY_STRING)
        for (const char *q = r->str; (q = strstr(q, " cmd=ping ")); q++)
            n++;
    freeReplyObject(r);
    return n;
}

/* Waits until the lease on key is renewed on node (its PTTL rises), the
 * clients pumped meanwhile; the key must stay there. */
static void renewed_on(int node, const char *key)
{
    long long lowest = hc_pttl(node, key), p;
    int64_t end = h_deadline(H_EVENT_MS);
    while ((p = hc_pttl(node, key)) <= lowest) {
        cr_assert_gt(p, 0, "%s left the new master", key);
        cr_assert_leq(h_now_ms(), end, "%s was not renewed on the new master within %d ms", key,
                      h_scaled_ms(H_EVENT_MS));
        lowest = p;
        h_pump_all(20);
    }
}

/* A waiter that listens on a master that dies is not left deaf: the
 * master's subscriptions went with its connection, and once the agent's map
 * names the promoted replica the core asks for every name again, there; the
 * release on the new master wakes the waiter (whose fallback retry is a
 * minute off). */
HCTEST(cluster, a_waiter_on_a_master_that_fails_over_listens_on_its_replica)
{
    start(2, SLOW_FALLBACK "\n" FAST_RENEWAL, NULL, NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    int victim = m[1], replica = hc_replica_of(victim);
    cr_assert_geq(replica, 0);
    char name[64], val[256];
    hc_name_on(victim, "deaf", name, sizeof name);
    const char *key = hc_lock_key(name);
    dlock_lease *l = h_must_acquire(a, name, LONG_TTL);
    snprintf(val, sizeof val, "%s", check_held(victim, name, l));
    H_WAIT_UNTIL(H_EVENT_MS, hc_get(replica, key) && strcmp(hc_get(replica, key), val) == 0);
    struct h_acq w;
    h_acquire_async(b, name, LONG_TTL, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(victim, name) == 1);

    int promoted = hc_kill_master(victim);
    cr_assert_eq(promoted, replica);
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(promoted, name) == 1);
    cr_assert(!w.done, "the waiter got %s while it was held", name);
    /* The holder's lease is renewed on the new master (its key is there). */
    renewed_on(promoted, key);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    check_held(promoted, name, w.lease);
    cr_assert_eq(dlock_lease_release(w.lease), 0);

    /* Again, the other way: the old master, back as the new one's replica,
     * is promoted in turn. The agents' links to it are up by then (an agent
     * keeps every node it knew): no new connection says anything, and only
     * the map, which moves the slots off a master whose notice link is
     * down, makes the core ask again. */
    hc_node_restart(victim);
    H_WAIT_UNTIL(HC_FAILOVER_MS, hc_replica_of(promoted) == victim && idle_links(victim) >= 4);
    l = h_must_acquire(a, name, LONG_TTL);
    snprintf(val, sizeof val, "%s", check_held(promoted, name, l));
    H_WAIT_UNTIL(H_EVENT_MS, hc_get(victim, key) && strcmp(hc_get(victim, key), val) == 0);
    h_acquire_async(b, name, LONG_TTL, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(promoted, name) == 1);
    cr_assert_eq(hc_kill_master(promoted), victim);
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(victim, name) == 1);
    cr_assert(!w.done, "the waiter got %s while it was held", name);
    renewed_on(victim, key);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    check_held(victim, name, w.lease);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* The slot of a held lease moves to another master while the agent sees
 * nothing (stopped), and that master then fails over, its promoted replica
 * without the lease's key (the writes of MIGRATE lost with its last ones).
 * The agent's next map shows the slot going from its old master, still up,
 * to a node that was another master's replica: a failover all the same. The
 * lease is put in doubt (JEOPARDY, DLOCK_EFAILOVER) before its renewal finds
 * the key gone, not left valid until then. */
HCTEST(cluster, a_moved_slot_whose_new_master_failed_over_is_in_doubt)
{
    /* A lease of 90 s, renewed every 30 s: the map read after the resume
     * comes long before its next renewal. */
    start(1, "max_ttl_ms = 120000", NULL, NULL);
    struct h_cl *cl = h_client_at(0);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    int from = m[0], to = m[1];
    int replica = hc_replica_of(to);
    cr_assert_geq(replica, 0);
    char name[64];
    hc_name_on(from, "stale", name, sizeof name);
    dlock_lease *l = h_must_acquire(cl, name, 3 * LONG_TTL);
    check_held(from, name, l);

    h_agent_pause(0);
    hc_move_slot(hc_name_slot(name), to);
    const char *key = hc_lock_key(name);
    H_WAIT_UNTIL(H_EVENT_MS, hc_exists(replica, key));
    int promoted = hc_kill_master(to);
    cr_assert_eq(promoted, replica);
    hc_del(promoted, key);
    h_agent_resume(0);

    H_WAIT_UNTIL(3 * LONG_TTL, h_events(cl, l, DLOCK_STATE_LOST) > 0);
    int doubt = -1, lost = -1;
    for (int i = 0; i < cl->nev; i++) {
        if (cl->ev[i].lease != l)
            continue;
        if (doubt < 0 && cl->ev[i].state == DLOCK_STATE_JEOPARDY &&
            cl->ev[i].reason == DLOCK_EFAILOVER)
            doubt = i;
        if (lost < 0 && cl->ev[i].state == DLOCK_STATE_LOST)
            lost = i;
    }
    cr_assert_geq(doubt, 0, "the lease was LOST without being put in doubt first");
    cr_assert_lt(doubt, lost);
    cr_assert(!dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

/* ---- d: fencing ---- */

/* Acquires and releases name n times, alternating between the clients; each
 * fence must be above the one before (*prev, updated). */
static void cycles(struct h_cl **cl, const char *name, int n, uint64_t *prev, const char *when)
{
    for (int i = 0; i < n; i++) {
        dlock_lease *l = NULL;
        int rc = h_acquire(cl[i % 2], name, 5000, H_EVENT_MS, &l);
        cr_assert_eq(rc, 0, "%s: acquire %d of %s: %s (%d)", when, i, name, dlock_strerror(rc), rc);
        uint64_t f = dlock_lease_fence(l);
        cr_assert_gt(f, *prev, "%s: fence %" PRIu64 " after %" PRIu64, when, f, *prev);
        *prev = f;
        cr_assert_eq(dlock_lease_release(l), 0);
    }
}

HCTEST(cluster, fencing_tokens_increase_across_slot_moves_and_a_failover)
{
    /* No block reserved for handoffs: the mark holds the last token. */
    start(2, "cohort_handoffs = 0", "wait_replicas = 1", NULL);
    struct h_cl *cl[2] = {h_client_at(0), h_client_at(1)};
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    char name[64];
    hc_name_on(m[0], "fence", name, sizeof name);
    unsigned slot = hc_name_slot(name);
    uint64_t prev = 0;
    cycles(cl, name, 10, &prev, "before");
    cr_assert_eq(parse_u64(hc_get(m[0], hc_mark_key(name)), "mark"), prev);

    hc_move_slot(slot, m[1]);
    cr_assert_eq(parse_u64(hc_get(m[1], hc_mark_key(name)), "mark"), prev);
    cycles(cl, name, 10, &prev, "after the move");

    /* Held while the slot starts to move, its keys moved ahead of the mark,
     * released mid-migration, acquired again from then on. */
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(cl[0], name, LONG_TTL, H_EVENT_MS, &l), 0);
    cr_assert_gt(dlock_lease_fence(l), prev);
    prev = dlock_lease_fence(l);
    struct hc_migration mig;
    hc_migrate_begin(&mig, slot, m[2]);
    const char *keys[] = {hc_lock_key(name)};
    cr_assert_eq(hc_migrate_keys(&mig, keys, 1), 1);
    cr_assert_eq(dlock_lease_release(l), 0);
    struct h_acq next;
    h_acquire_async(cl[1], name, 5000, 60000, &next);
    cr_assert_eq(dlock_client_ping(cl[1]->c), 0);
    hc_migrate_finish(&mig);
    H_WAIT_UNTIL(H_EVENT_MS, next.done);
    cr_assert_eq(next.status, 0, "acquire begun mid-migration: %s (%d)",
                 dlock_strerror(next.status), next.status);
    cr_assert_gt(dlock_lease_fence(next.lease), prev);
    prev = dlock_lease_fence(next.lease);
    cr_assert_eq(dlock_lease_release(next.lease), 0);
    cycles(cl, name, 5, &prev, "after the move in steps");

    /* wait_replicas = 1: the replica had the mark before the grant. */
    int promoted = hc_kill_master(m[2]);
    cr_assert_eq(parse_u64(hc_get(promoted, hc_mark_key(name)), "mark"), prev,
                 "the promoted replica lacks the last grant's mark");
    /* Its replica back, so that grants can wait for one again. */
    hc_node_restart(m[2]);
    cycles(cl, name, 10, &prev, "after the failover");
    cr_assert_eq(parse_u64(hc_get(promoted, hc_mark_key(name)), "mark"), prev);
}

/* ---- e: shared counters ---- */

#define NAGENTS      3
#define PER_AGENT    3
#define NTHREADS     (NAGENTS * PER_AGENT)
#define NNAMES       3
#define LEASE_TTL    1500
#define ACQUIRE_WAIT 1000

/* Results a client may meet while masters fail and slots move; anything
 * else is counted as unexpected. */
static int expected_failure(int rc)
{
    switch (rc) {
    case DLOCK_EBUSY:
    case DLOCK_ETIMEDOUT:
    case DLOCK_EUNAVAIL:
    case DLOCK_ELOST:
    case DLOCK_EDISCONNECTED:
    case DLOCK_EFAILOVER:
        return 1;
    default:
        return 0;
    }
}

HCTEST(cluster, shared_counters_under_a_failover_and_a_slot_move)
{
    /* Info, not debug: the logs stay short enough for the harness to show
     * their tails when the test fails. */
    start(NAGENTS, "log_level = info", "wait_replicas = 1", NULL);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    static char names[NNAMES][64];
    for (int j = 0; j < NNAMES; j++) {
        char base[16];
        snprintf(base, sizeof base, "set%d", j);
        hc_name_on(m[j], base, names[j], sizeof names[j]);
    }
    /* One counter per name (lockset.c). Mostly a few milliseconds; one hold
     * in 8 lasts about the TTL, so that renewals run through the failover
     * and the slot move. */
    struct ls_params p = {.nnames = NNAMES,
                          .ttl_ms = LEASE_TTL,
                          .wait_ms = ACQUIRE_WAIT,
                          .long_hold = 8,
                          .long_min_ms = 300,
                          .long_span_ms = 1200,
                          .expected = expected_failure};
    for (int j = 0; j < NNAMES; j++)
        p.names[j] = names[j];
    const char *socks[NTHREADS];
    for (int t = 0; t < NTHREADS; t++)
        socks[t] = H.agent[t / PER_AGENT].sock;
    static struct ls_run run;
    ls_start(&run, &p, socks, NTHREADS, ls_seed());

    h_sleep_ms(3000); /* the workers run meanwhile */
    /* The master of the first name fails; once its replica took over, it
     * comes back as that replica's replica (wait_replicas = 1 needs one). */
    int victim = hc_slot_node(hc_name_slot(names[0]));
    int promoted = hc_kill_master(victim);
    hc_node_restart(victim);
    h_sleep_ms(2000);
    /* The second name's slot moves to the promoted node, in steps. */
    unsigned slot = hc_name_slot(names[1]);
    int to = hc_slot_node(slot) == promoted ? m[2] : promoted;
    struct hc_migration mig;
    hc_migrate_begin(&mig, slot, to);
    h_sleep_ms(1000);
    hc_migrate_some(&mig, 1L << 30);
    h_sleep_ms(1000);
    hc_migrate_finish(&mig);
    h_sleep_ms(3000);

    ls_stop(&run);
    cr_log_info("clients: %ld grants; busy %ld, timed out %ld, unavailable %ld, lost %ld, "
                "failover %ld, disconnected %ld",
                run.grants, ls_failures(&run, DLOCK_EBUSY), ls_failures(&run, DLOCK_ETIMEDOUT),
                ls_failures(&run, DLOCK_EUNAVAIL), ls_failures(&run, DLOCK_ELOST),
                ls_failures(&run, DLOCK_EFAILOVER), ls_failures(&run, DLOCK_EDISCONNECTED));
    ls_check(&run, 30);
}

/* ---- e: TLS ---- */

/* Agent a's log has what. */
static int logged(int a, const char *what)
{
    const char *log = h_read_file(H.agent[a].log);
    return log && strstr(log, what);
}

/* Agent a's command link to node i is up over TLS 1.3, on the node's TLS
 * port (the one Redis names to a TLS client). */
static int tls_link_up(int a, int i)
{
    return logged(a, h_keepf("redis 127.0.0.1:%d: command connection up (rediss://127.0.0.1:%d, "
                             "TLSv1.3 ",
                             HC.node[i].tls_port, HC.node[i].tls_port));
}

/* Agent a never spoke to a plaintext port. */
static void no_plaintext_link(int a)
{
    cr_assert(!logged(a, "connection up (127.0.0.1:"), "agent %d: a link without TLS", a);
    for (int i = 0; i < HC_NODES; i++)
        cr_assert(!logged(a, h_keepf("127.0.0.1:%d", HC.node[i].port)),
                  "agent %d was told of node %d's plaintext port %d", a, i, HC.node[i].port);
}

/* The nodes serve TLS beside their plaintext ports (the harness's), with
 * the bus and the replication over TLS and client certificates required;
 * the agents are given TLS seeds only (one node, and two others), and find
 * the other masters, by their TLS ports, in the slot map that Redis gives a
 * TLS client. Locks on every master, waiters on the other agent woken by
 * the release notices over TLS; then a master fails over, its lease's key
 * replicated over TLS to the replica, which the agents reach over TLS, and
 * locks in its slots work again there. */
HCTEST(cluster, over_tls_with_client_certificates_through_a_failover)
{
    hc_tls(true);
    const unsigned seeds[] = {HC_SEED(0), HC_SEED(4) | HC_SEED(2)};
    start(2, SLOW_FALLBACK "\n" FAST_RENEWAL, tls_redis_ini("client", NULL), seeds);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    for (int ag = 0; ag < 2; ag++) {
        for (int k = 0; k < 3; k++)
            H_WAIT_UNTIL(H_EVENT_MS, tls_link_up(ag, m[k]));
        cr_assert(logged(ag, "a client certificate (mutual TLS)"));
        /* The status names the masters as they are reached. */
        const char *st = h_status_ask(ag, "status-json\n");
        for (int k = 0; k < 3; k++)
            cr_assert(st && strstr(st, h_keepf("\"addr\":\"rediss://127.0.0.1:%d\"",
                                               HC.node[m[k]].tls_port)),
                      "agent %d's status: %s", ag, st);
    }

    char names[3][64];
    for (int k = 0; k < 3; k++) {
        hc_name_on(m[k], "tls", names[k], sizeof names[k]);
        dlock_lease *l = h_must_acquire(a, names[k], LONG_TTL);
        const char *tok = check_held(m[k], names[k], l);
        struct h_acq w;
        h_acquire_async(b, names[k], LONG_TTL, DLOCK_WAIT_FOREVER, &w);
        cr_assert_eq(dlock_client_ping(b->c), 0);
        H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(m[k], names[k]) == 1);
        cr_assert(!w.done, "the waiter got %s while it was held", names[k]);
        uint64_t f = dlock_lease_fence(l);
        cr_assert_eq(dlock_lease_release(l), 0);
        /* Within H_EVENT_MS of the release, a minute before any retry: the
         * release notice woke it. */
        H_WAIT_UNTIL(H_EVENT_MS, w.done);
        cr_assert_eq(w.status, 0, "waiter for %s: %s (%d)", names[k], dlock_strerror(w.status),
                     w.status);
        cr_assert_gt(dlock_lease_fence(w.lease), f);
        cr_assert_str_neq(check_held(m[k], names[k], w.lease), tok);
        cr_assert_eq(dlock_lease_release(w.lease), 0);
        check_slot_empty(m[k], -1, &names[k], 1);
    }

    /* A lease on the victim, its key on the replica (replication over TLS),
     * and a waiter listening on the victim. */
    int victim = m[1], replica = hc_replica_of(victim);
    cr_assert_geq(replica, 0);
    char name[64], val[256];
    hc_name_on(victim, "tls-fo", name, sizeof name);
    const char *key = hc_lock_key(name);
    dlock_lease *l = h_must_acquire(a, name, LONG_TTL);
    snprintf(val, sizeof val, "%s", check_held(victim, name, l));
    H_WAIT_UNTIL(H_EVENT_MS, hc_get(replica, key) && strcmp(hc_get(replica, key), val) == 0);
    struct h_acq w;
    h_acquire_async(b, name, LONG_TTL, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(victim, name) == 1);

    int promoted = hc_kill_master(victim);
    cr_assert_eq(promoted, replica);
    /* Both agents reach the promoted replica over TLS: the waiter listens
     * there, and the holder's lease is renewed there. */
    for (int ag = 0; ag < 2; ag++)
        H_WAIT_UNTIL(H_EVENT_MS, tls_link_up(ag, promoted));
    H_WAIT_UNTIL(H_EVENT_MS, shard_subscribers(promoted, name) == 1);
    cr_assert(!w.done, "the waiter got %s while it was held", name);
    renewed_on(promoted, key);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    check_held(promoted, name, w.lease);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    HC_KEY_GONE(promoted, key);

    /* A new lock in the promoted replica's slots, from either agent. */
    for (int ag = 0; ag < 2; ag++) {
        char fresh[64], base[16];
        snprintf(base, sizeof base, "tls-after%d", ag);
        hc_name_on(promoted, base, fresh, sizeof fresh);
        dlock_lease *nl = NULL;
        int rc = h_acquire(h_client_at(ag), fresh, LONG_TTL, H_EVENT_MS, &nl);
        cr_assert_eq(rc, 0, "acquire %s after the failover: %s (%d)", fresh, dlock_strerror(rc),
                     rc);
        check_held(promoted, fresh, nl);
        cr_assert_eq(dlock_lease_release(nl), 0);
        HC_KEY_GONE(promoted, hc_lock_key(fresh));
        no_plaintext_link(ag);
    }
}
/* The status socket's answer to req on agent 0, which must be one. */
static const char *ask0(const char *req)
{
    const char *out = h_status_ask(0, req);
    cr_assert_not_null(out, "no answer to %s", req);
    return h_keep(out);
}

/* `holder` and `release-force` go to the master of the name's slot as the
 * lock operations do, and follow its redirects: MOVED after the slot moved
 * unseen by the agent (no map read meanwhile), ASK while it migrates. */
HCTEST(cluster, holder_and_forced_release_follow_moved_and_ask)
{
    start(1, "[policy]\nforce = 0 *\n", "topology_refresh_ms = 600000\n", NULL);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    char name[64];
    hc_name_on(m[0], "who", name, sizeof name);
    const char *key = hc_lock_key(name);
    freeReplyObject(hc_key_cmd(key, "SET %s foreign-value PX 60000", key));
    char req[128], want[128];
    snprintf(req, sizeof req, "holder %s\n", name);
    snprintf(want, sizeof want, "%s: held by a client outside dlock (value 'foreign-value')", name);
    const char *out = ask0(req);
    cr_assert(strstr(out, want), "holder before the move: %s", out);

    /* The slot moves; the agent's map still names the old master. */
    unsigned slot = hc_name_slot(name);
    hc_move_slot(slot, m[1]);
    cr_assert_str_eq(hc_get(m[1], key), "foreign-value");
    out = ask0(req);
    cr_assert(strstr(out, want), "holder after MOVED: %s", out);

    /* Mid-migration to the third master, with the key moved: ASK. */
    struct hc_migration mig;
    hc_migrate_begin(&mig, slot, m[2]);
    const char *keys[] = {key};
    cr_assert_eq(hc_migrate_keys(&mig, keys, 1), 1);
    out = ask0(req);
    cr_assert(strstr(out, want), "holder after ASK: %s", out);
    snprintf(req, sizeof req, "release-force %s\n", name);
    out = ask0(req);
    cr_assert(strncmp(out, "released ", 9) == 0 && strstr(out, want), "forced release: %s", out);
    cr_assert_eq(hc_exists(m[2], key), 0, "the key is still on the new master");
    hc_migrate_finish(&mig);
    snprintf(req, sizeof req, "holder %s\n", name);
    snprintf(want, sizeof want, "%s: free", name);
    out = ask0(req);
    cr_assert(strstr(out, want), "holder after the forced release: %s", out);
}
