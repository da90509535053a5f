/* SPDX-License-Identifier: BSD-3-Clause */
/* test_sentinel.c -- sentinel mode against a real master, two replicas and
 * three sentinels (hsentinel.h): locks through the master the sentinels
 * name; through a failover (forced, or a killed master) every lease is shown
 * invalid (JEOPARDY, DLOCK_EFAILOVER) and ends HELD with its key on the new
 * master, or LOST; a master demoted by hand is given up; a lost sentinel is
 * replaced by the next; wait_replicas makes grants and renewals wait for a
 * replica; fencing tokens keep rising across a failover; over mutual TLS
 * (servers, replication and sentinels), locks, notices and a failover. */
#define H_TEST_TIMEOUT_S 150
#include "hsentinel.h"
#include "tlspki.h"

#include <stdio.h>
#include <string.h>

/* The index of the last event of l that put it in doubt (JEOPARDY with
 * DLOCK_EFAILOVER), or -1. */
static int last_doubt(const struct h_cl *cl, const dlock_lease *l)
{
    int at = -1;
    for (int k = 0; k < cl->nev; k++)
        if (cl->ev[k].lease == l && cl->ev[k].state == DLOCK_STATE_JEOPARDY &&
            cl->ev[k].reason == DLOCK_EFAILOVER)
            at = k;
    return at;
}

static int doubted(const struct h_cl *cl, const dlock_lease *l)
{
    return last_doubt(cl, l) >= 0;
}

/* How the lease ended after the failover: LOST (with or without a doubt
 * first: its deadline may come before the sentinels act), HELD after its
 * last doubt, or 0 while neither. */
static int outcome(const struct h_cl *cl, const dlock_lease *l)
{
    if (h_events(cl, l, DLOCK_STATE_LOST))
        return DLOCK_STATE_LOST;
    int from = last_doubt(cl, l);
    if (from < 0)
        return 0;
    for (int k = from + 1; k < cl->nev; k++)
        if (cl->ev[k].lease == l && cl->ev[k].state == DLOCK_STATE_HELD)
            return DLOCK_STATE_HELD;
    return 0;
}

static int all_doubted(const struct h_cl *cl, dlock_lease *const *l, int n)
{
    for (int i = 0; i < n; i++)
        if (!doubted(cl, l[i]))
            return 0;
    return 1;
}

static int all_ended(const struct h_cl *cl, dlock_lease *const *l, int n)
{
    for (int i = 0; i < n; i++)
        if (!outcome(cl, l[i]))
            return 0;
    return 1;
}

/* The safety of a failover: a lease still valid has its key on master m. */
static void check_valid_means_key(dlock_lease *const *l, const char *const *names, int n, int m)
{
    for (int i = 0; i < n; i++)
        if (dlock_lease_valid(l[i]))
            cr_assert(hs_exists(m, h_key(names[i])),
                      "lease on %s is valid without its key on the new master", names[i]);
}

/* Whether the status JSON shows node addr with this connected flag. */
static int status_shows(const char *addr, int connected)
{
    const char *st = h_status_ask(0, "status-json\n");
    char want[200];
    snprintf(want, sizeof want, "{\"addr\":\"%s\",\"connected\":%s", addr,
             connected ? "true" : "false");
    return st && strstr(st, want);
}

/* A waiter's wake-up must come from the release notice, not the fallback
 * retry. */
STEST(sentinel, locks_through_the_master)
{
    hs_start();
    hs_agent_start(0, "retry_fallback_ms = 60000", NULL);
    struct h_cl *a = h_client(), *b = h_client();
    int m = hs_master();
    cr_assert_eq(m, 0, "the first master");
    dlock_lease *l = h_must_acquire(a, "job", 5000);
    const char *v = hs_get(m, h_key("job"));
    cr_assert(v && h_is_token(v), "the key is on the master");
    dlock_lease *none = NULL;
    cr_assert_eq(h_acquire(b, "job", 5000, 0, &none), DLOCK_EBUSY);
    /* A waiter is woken by the release notice on the master. */
    struct h_acq w = {0};
    h_acquire_async(b, "job", 5000, 60000, &w);
    const char *ls = NULL;
    H_WAIT_UNTIL(H_EVENT_MS,
                 (ls = h_status_ask(0, "leases-json\n")) && strstr(ls, "\"waiters\":1"));
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, !hs_exists(m, h_key("job")));
    /* The status: the mode, the master, then each sentinel (the first in
     * use). */
    const char *st = h_status_ask(0, "status-json\n");
    cr_assert_not_null(st);
    cr_assert(strstr(st, "\"mode\":\"sentinel\""), "%s", st);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", HS.redis_port[m]);
    cr_assert(status_shows(addr, 1), "%s", st);
    for (int s = 0; s < HS_SENTINELS; s++) {
        snprintf(addr, sizeof addr, "sentinel 127.0.0.1:%d", HS.sentinel_port[s]);
        cr_assert(status_shows(addr, s == 0), "%s", st);
    }
}

/* The new master cannot run scripts for the agent at first (its user lost
 * EVAL and EVALSHA there): the leases stay in doubt, shown invalid, while
 * the test looks. One key is deleted on the new master; then the scripts
 * are allowed again: that lease is LOST, the others HELD. */
STEST(sentinel, failover_puts_leases_in_doubt)
{
    hs_start();
    hs_agent_start(0, NULL, NULL);
    struct h_cl *a = h_client();
    const char *names[] = {"d0", "d1", "d2"};
    dlock_lease *l[3];
    for (int i = 0; i < 3; i++)
        l[i] = h_must_acquire(a, names[i], 20000);
    int old = hs_master();
    for (int r = 0; r < HS_REDIS; r++) {
        if (r == old)
            continue;
        for (int i = 0; i < 3; i++)
            H_WAIT_UNTIL(H_EVENT_MS, hs_exists(r, h_key(names[i])));
        hs_ok(r, "ACL SETUSER %s -eval -evalsha", HS_USER);
    }
    hs_sentinel_ok(0, "SENTINEL FAILOVER %s", HS_MASTER_NAME);
    int now = hs_wait_master_not(old);
    H_WAIT_UNTIL(HS_FAILOVER_MS, all_doubted(a, l, 3));
    for (int i = 0; i < 3; i++) {
        cr_assert_not(dlock_lease_valid(l[i]), "lease on %s valid while in doubt", names[i]);
        cr_assert_eq(dlock_lease_state(l[i]), DLOCK_STATE_JEOPARDY);
        cr_assert_eq(outcome(a, l[i]), 0, "no renewal could confirm %s", names[i]);
    }
    hs_ok(now, "DEL %s", h_key("d0"));
    hs_ok(now, "ACL SETUSER %s +eval +evalsha", HS_USER);
    H_WAIT_UNTIL(H_EVENT_MS, all_ended(a, l, 3));
    cr_assert_eq(outcome(a, l[0]), DLOCK_STATE_LOST, "its key is gone on the new master");
    cr_assert_not(dlock_lease_valid(l[0]));
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(outcome(a, l[i]), DLOCK_STATE_HELD, "%s: its key came with the replica",
                     names[i]);
        cr_assert(dlock_lease_valid(l[i]));
    }
    check_valid_means_key(l, names, 3, now);
    /* Locks work on the new master, and the old one is no longer used. */
    dlock_lease *n = h_must_acquire(a, "after", 5000);
    cr_assert(hs_exists(now, h_key("after")));
    cr_assert_eq(dlock_lease_release(n), 0);
    const char *st = h_status_ask(0, "status\n");
    cr_assert(st && strstr(st, "doubts 3,"), "%s", st);
}

/* A SIGKILLed master: the sentinels find it down and promote a replica.
 * Every lease ends HELD or LOST, and none is valid without its key on the
 * new master. */
STEST(sentinel, killed_master)
{
    hs_start();
    hs_agent_start(0, "outage_wait_ms = 60000", NULL);
    struct h_cl *a = h_client();
    const char *names[] = {"k0", "k1", "k2"};
    dlock_lease *l[3];
    for (int i = 0; i < 3; i++)
        l[i] = h_must_acquire(a, names[i], 30000);
    int old = hs_master();
    for (int r = 0; r < HS_REDIS; r++)
        for (int i = 0; r != old && i < 3; i++)
            H_WAIT_UNTIL(H_EVENT_MS, hs_exists(r, h_key(names[i])));
    hs_kill(old);
    int now = hs_wait_master_not(old);
    H_WAIT_UNTIL(HS_FAILOVER_MS, all_ended(a, l, 3));
    check_valid_means_key(l, names, 3, now);
    for (int i = 0; i < 3; i++)
        if (outcome(a, l[i]) == DLOCK_STATE_HELD)
            cr_assert(doubted(a, l[i]), "HELD again only after the doubt");
    /* A waiter rides out the switch and gets a new lock. */
    dlock_lease *n = NULL;
    cr_assert_eq(h_acquire(a, "after", 5000, 30000, &n), 0);
    cr_assert(hs_exists(now, h_key("after")));
    cr_assert_eq(dlock_lease_release(n), 0);
}

/* The master turned into a replica by hand (of a port nobody listens on,
 * so it keeps its data): its READONLY answers (or, after a reconnection,
 * its ROLE) make the agent give it up and doubt every lease; nothing it says
 * afterwards confirms one. Made master again (or replaced by the sentinels,
 * who see it as a replica), the lease ends HELD or LOST. */
STEST(sentinel, demoted_master)
{
    hs_start();
    hs_agent_start(0, NULL, NULL);
    struct h_cl *a = h_client();
    const char *names[] = {"ro"};
    dlock_lease *l[1];
    l[0] = h_must_acquire(a, "ro", 9000);
    int old = hs_master();
    /* Port 1 of loopback: nothing listens there. */
    hs_ok(old, "REPLICAOF 127.0.0.1 1");
    H_WAIT_UNTIL(HS_FAILOVER_MS, doubted(a, l[0]));
    hs_ok(old, "REPLICAOF NO ONE");
    H_WAIT_UNTIL(HS_FAILOVER_MS, all_ended(a, l, 1));
    int m = -1;
    H_WAIT_UNTIL(HS_FAILOVER_MS, (m = hs_master()) >= 0);
    check_valid_means_key(l, names, 1, m);
    const char *log = h_read_file(H.agent[0].log);
    cr_assert(log && (strstr(log, "READONLY") || strstr(log, "not master")), "why it was given up");
}

/* The sentinel in use dies: the agent turns to the next one, and hears of
 * a failover from it. */
STEST(sentinel, next_sentinel)
{
    hs_start();
    hs_agent_start(0, NULL, NULL);
    struct h_cl *a = h_client();
    const char *names[] = {"r"};
    dlock_lease *l[1];
    l[0] = h_must_acquire(a, "r", 30000);
    int old = hs_master();
    for (int r = 0; r < HS_REDIS; r++)
        if (r != old)
            H_WAIT_UNTIL(H_EVENT_MS, hs_exists(r, h_key("r")));
    char s0[64], s1[64], s2[64];
    snprintf(s0, sizeof s0, "sentinel 127.0.0.1:%d", HS.sentinel_port[0]);
    snprintf(s1, sizeof s1, "sentinel 127.0.0.1:%d", HS.sentinel_port[1]);
    snprintf(s2, sizeof s2, "sentinel 127.0.0.1:%d", HS.sentinel_port[2]);
    cr_assert(status_shows(s0, 1));
    hs_sentinel_kill(0);
    H_WAIT_UNTIL(H_EVENT_MS, status_shows(s1, 1) || status_shows(s2, 1));
    cr_assert(status_shows(s0, 0));
    /* It subscribed to +switch-master there too. */
    const char *st = NULL;
    H_WAIT_UNTIL(H_EVENT_MS, (st = h_status_ask(0, "status-json\n")) &&
                                 strstr(st, "\"connected\":true,\"subscribed\":true,") &&
                                 (strstr(st, s1) || strstr(st, s2)));
    hs_sentinel_ok(1, "SENTINEL FAILOVER %s", HS_MASTER_NAME);
    int now = hs_wait_master_not(old);
    H_WAIT_UNTIL(HS_FAILOVER_MS, all_ended(a, l, 1));
    cr_assert_eq(outcome(a, l[0]), DLOCK_STATE_HELD, "the key was on both replicas");
    check_valid_means_key(l, names, 1, now);
}

/* wait_replicas = 1: with both replicas stopped, WAIT counts none, so an
 * acquire fails (and leaves no key) and a renewal fails (JEOPARDY) until
 * they are back, in sentinel mode as in single-node mode; an agent without
 * it is not held up. */
STEST(sentinel, wait_replicas_needs_a_replica)
{
    hs_start();
    hs_agent_start(0, "outage_wait_ms = 0", "wait_replicas = 1\nwait_timeout_ms = 100");
    hs_agent_start(1, "outage_wait_ms = 0", NULL);
    hs_agent_start_single(2, "outage_wait_ms = 0", "wait_replicas = 1");
    struct h_cl *a = h_client_at(0), *b = h_client_at(1), *c = h_client_at(2);
    dlock_lease *held = h_must_acquire(a, "w-held", 10000);
    int m = hs_master();
    for (int r = 0; r < HS_REDIS; r++)
        if (r != m)
            cr_assert_eq(redisproc_pause(&HS.redis[r]), 0, "%s", HS.redis[r].err);
    dlock_lease *none = NULL;
    cr_assert_eq(h_acquire(a, "w-new", 5000, 0, &none), DLOCK_EUNAVAIL);
    H_WAIT_UNTIL(H_EVENT_MS, !hs_exists(m, h_key("w-new"))); /* withdrawn */
    cr_assert_eq(h_acquire(c, "w-single", 5000, 0, &none), DLOCK_EUNAVAIL, "single-node mode");
    H_WAIT_UNTIL(H_EVENT_MS, !hs_exists(m, h_key("w-single")));
    dlock_lease *other = h_must_acquire(b, "w-other", 5000);
    cr_assert_eq(dlock_lease_release(other), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, held, DLOCK_STATE_JEOPARDY));
    const char *log = h_read_file(H.agent[0].log);
    cr_assert(log && strstr(log, "WAIT: 0 of 1 replicas acknowledged"), "the log says why");
    for (int r = 0; r < HS_REDIS; r++)
        redisproc_resume(&HS.redis[r]);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, held, DLOCK_STATE_HELD));
    cr_assert(dlock_lease_valid(held));
    dlock_lease *n = h_must_acquire(a, "w-new", 5000);
    cr_assert_eq(dlock_lease_release(n), 0);
    n = h_must_acquire(c, "w-single", 5000);
    cr_assert_eq(dlock_lease_release(n), 0);
    cr_assert_eq(dlock_lease_release(held), 0);
}

/* wait_replicas = 1 through a failover: the grant was on a replica before it
 * was reported, the lease is in doubt after the switch, and the renewal on
 * the new master (which waits for a replica of its own) confirms it. (On
 * loopback replication is quick, so the key would most likely be there
 * without WAIT too: that it must be is for docs/failover.md to say.) */
STEST(sentinel, wait_replicas_lease_survives_failover)
{
    hs_start();
    hs_agent_start(0, NULL, "wait_replicas = 1");
    struct h_cl *a = h_client();
    const char *names[] = {"s"};
    dlock_lease *l[1];
    l[0] = h_must_acquire(a, "s", 30000);
    int old = hs_master();
    hs_sentinel_ok(0, "SENTINEL FAILOVER %s", HS_MASTER_NAME);
    int now = hs_wait_master_not(old);
    H_WAIT_UNTIL(HS_FAILOVER_MS, all_ended(a, l, 1));
    cr_assert_eq(outcome(a, l[0]), DLOCK_STATE_HELD);
    cr_assert(doubted(a, l[0]));
    check_valid_means_key(l, names, 1, now);
}

/* Tokens of a name keep rising across a failover: the slot's mark came with
 * the replica (or, lost, the new master's clock is above it). */
STEST(sentinel, fencing_across_failover)
{
    hs_start();
    hs_agent_start(0, "outage_wait_ms = 60000", NULL);
    struct h_cl *a = h_client();
    uint64_t last = 0;
    for (int i = 0; i < 3; i++) {
        dlock_lease *l = h_must_acquire(a, "fence", 5000);
        cr_assert_gt(dlock_lease_fence(l), last);
        last = dlock_lease_fence(l);
        cr_assert_eq(dlock_lease_release(l), 0);
    }
    dlock_lease *held = h_must_acquire(a, "held", 30000);
    uint64_t held_fence = dlock_lease_fence(held);
    int old = hs_master();
    hs_sentinel_ok(0, "SENTINEL FAILOVER %s", HS_MASTER_NAME);
    hs_wait_master_not(old);
    H_WAIT_UNTIL(HS_FAILOVER_MS, outcome(a, held));
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "fence", 5000, 30000, &l), 0);
    cr_assert_gt(dlock_lease_fence(l), last, "after the failover");
    cr_assert_eq(dlock_lease_release(l), 0);
    dlock_lease_release(held);
    cr_assert_eq(h_acquire(a, "held", 5000, 30000, &l), 0);
    cr_assert_gt(dlock_lease_fence(l), held_fence);
    cr_assert_eq(dlock_lease_release(l), 0);
}

static int logged(const char *what)
{
    const char *log = h_read_file(H.agent[0].log);
    return log && strstr(log, what);
}

/* The agent's log shows a TLS connection to server i, the master. */
static int master_link_over_tls(int i)
{
    char want[100];
    snprintf(want, sizeof want, "connection up (rediss://127.0.0.1:%d, TLSv1.",
             HS.redis_tls_port[i]);
    return logged(want);
}

/* A waiter on b is granted at a's release: the notice came over the master's
 * TLS pub/sub link (only notices wake it, retry_fallback_ms = 60000). */
static void hand_over(struct h_cl *a, struct h_cl *b, const char *name, int m)
{
    dlock_lease *l = h_must_acquire(a, name, 10000);
    const char *v = hs_get(m, h_key(name));
    cr_assert(v && h_is_token(v), "the key of %s is on the master", name);
    struct h_acq w = {0};
    h_acquire_async(b, name, 10000, 60000, &w);
    const char *ls = NULL;
    H_WAIT_UNTIL(H_EVENT_MS,
                 (ls = h_status_ask(0, "leases-json\n")) && strstr(ls, "\"waiters\":1"));
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "the waiter: %s", dlock_strerror(w.status));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, !hs_exists(m, h_key(name)));
}

/* Servers and sentinels that the agent reaches on their TLS ports, with
 * client certificates required (tls-auth-clients yes), replication and the
 * sentinels' own links over TLS (hs_start_tls()): the agent asks the
 * sentinels over TLS and reaches the master they name (its TLS address)
 * over TLS; locks and notices work there. A failover: the held lease, whose
 * key is on both replicas, is in doubt and then HELD on the new master,
 * which the agent reaches over TLS too, and where locks and notices work. */
STEST(sentinel, tls_with_failover)
{
    hs_start_tls(true);
    hs_agent_start(0, "retry_fallback_ms = 60000", tls_redis_ini("client", NULL));
    struct h_cl *a = h_client(), *b = h_client();
    int old = hs_master();
    cr_assert_eq(old, 0, "the first master");
    hand_over(a, b, "tls-job", old);
    /* Every link over TLS: the sentinel in use, and the master. */
    char want[100];
    snprintf(want, sizeof want, "connection up (rediss://127.0.0.1:%d, TLSv1.",
             HS.sentinel_tls_port[0]);
    cr_assert(logged(want), "%s", h_read_file(H.agent[0].log));
    cr_assert(master_link_over_tls(old), "%s", h_read_file(H.agent[0].log));
    /* The status shows them as TLS addresses, the master first. */
    const char *st = h_status_ask(0, "status-json\n");
    cr_assert(st && strstr(st, "\"last_error\":\"\""), "%s", st);
    snprintf(want, sizeof want, "rediss://127.0.0.1:%d", HS.redis_tls_port[old]);
    cr_assert(status_shows(want, 1), "%s", st);
    /* Each sentinel by its TLS address; one of them answers the agent (the
     * first, unless it dropped the link meanwhile: the agent then asks
     * another, as a busy machine showed). */
    int up = 0;
    for (int s = 0; s < HS_SENTINELS; s++) {
        snprintf(want, sizeof want, "sentinel rediss://127.0.0.1:%d", HS.sentinel_tls_port[s]);
        cr_assert(status_shows(want, 1) || status_shows(want, 0), "%s", st);
        up += status_shows(want, 1) != 0;
    }
    cr_assert_eq(up, 1, "%s", st);

    const char *names[] = {"tls-held"};
    dlock_lease *l[1];
    l[0] = h_must_acquire(a, "tls-held", 30000);
    for (int r = 0; r < HS_REDIS; r++)
        if (r != old)
            H_WAIT_UNTIL(H_EVENT_MS, hs_exists(r, h_key("tls-held")));
    hs_sentinel_ok(0, "SENTINEL FAILOVER %s", HS_MASTER_NAME);
    int now = hs_wait_master_not(old);
    H_WAIT_UNTIL(HS_FAILOVER_MS, all_ended(a, l, 1));
    cr_assert_eq(outcome(a, l[0]), DLOCK_STATE_HELD, "the key was on both replicas");
    cr_assert(doubted(a, l[0]));
    check_valid_means_key(l, names, 1, now);
    cr_assert(master_link_over_tls(now), "%s", h_read_file(H.agent[0].log));
    /* Locks and notices on the new master. */
    hand_over(a, b, "tls-after", now);
    cr_assert_eq(dlock_lease_release(l[0]), 0);
    H_WAIT_UNTIL(H_EVENT_MS, !hs_exists(now, h_key("tls-held")));
}
