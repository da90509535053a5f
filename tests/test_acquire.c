/* SPDX-License-Identifier: BSD-3-Clause */
/* test_acquire.c -- acquire and release through libdlock: the Redis key and
 * its token, lease accessors, busy and timed-out acquires, name checks,
 * per-connection limits, fencing tokens and cancelled acquires. */
#include <poll.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

ITEST(acquire, key_holds_token_release_deletes_it)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    int64_t before = mono_ns();
    dlock_lease *l = h_must_acquire(a, "alpha", 5000);
    int64_t after = mono_ns();

    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_str_eq(dlock_lease_name(l), "alpha");
    cr_assert_eq(dlock_lease_ttl_ms(l), 5000);
    cr_assert_eq(dlock_lease_client(l), a->c);

    /* Conservative validity: t_send + ttl - drift, t_send within the call. */
    int64_t drift_ns = (5000 / 100 + 2) * 1000000LL;
    int64_t deadline = dlock_lease_deadline_ns(l);
    cr_assert_geq(deadline, before + 5000 * 1000000LL - drift_ns - 1000000,
                  "deadline %lld earlier than expected", (long long)deadline);
    cr_assert_leq(deadline, after + 5000 * 1000000LL - drift_ns,
                  "deadline %lld ns past now is later than ttl - drift",
                  (long long)(deadline - after));

    char *tok = h_redis_get(h_key("alpha"));
    cr_assert(h_is_token(tok), "dlock:alpha holds '%s', not a 32-hex-char token",
              tok ? tok : "(nil)");
    long long pttl = h_redis_pttl(h_key("alpha"));
    cr_assert(pttl > 4000 && pttl <= 5000, "PTTL %lld", pttl);

    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("alpha"));
    /* The release did not wait for its OK: a ping reads it on the way (the
     * agent answers in order) and the library drops it. */
    cr_assert_eq(dlock_client_ping(a->c), 0);

    /* Nothing to dispatch (nothing to read): it returns rather than waiting
     * for the agent, which has nothing more to send (a dispatch that blocked
     * would hang the test until its timeout). */
    struct pollfd p = {.fd = dlock_client_fd(a->c), .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 0), 0, "the agent sent something unasked");
    cr_assert_eq(dlock_client_dispatch(a->c), 0);
    cr_assert_eq(dlock_client_ping(a->c), 0);
}

ITEST(acquire, open_uses_dlock_socket_environment)
{
    h_start(NULL);
    setenv("DLOCK_SOCKET", H.agent[0].sock, 1);
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, NULL);
    unsetenv("DLOCK_SOCKET");
    cr_assert_eq(rc, 0, "open via $DLOCK_SOCKET: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_geq(dlock_client_fd(c), 0);
    cr_assert_eq(dlock_client_ping(c), 0);
    dlock_client_close(c);
    dlock_client_close(NULL); /* a no-op */
}

ITEST(acquire, every_acquisition_gets_a_fresh_token)
{
    /* Every grant from Redis: a release followed at once by an acquire of
     * the same name may otherwise be a cohort handoff, which keeps the key
     * (and gives a fresh fencing token: test_cohort). */
    h_start("cohort_handoffs = 0");
    struct h_cl *a = h_client();
    dlock_lease *l1 = h_must_acquire(a, "t1", 5000);
    dlock_lease *l2 = h_must_acquire(a, "t2", 5000);
    char *k1 = h_redis_get(h_key("t1")), *k2 = h_redis_get(h_key("t2"));
    cr_assert(h_is_token(k1) && h_is_token(k2));
    cr_assert_str_neq(k1, k2);
    cr_assert_eq(dlock_lease_release(l1), 0);
    l1 = h_must_acquire(a, "t1", 5000);
    char *k1b = h_redis_get(h_key("t1"));
    cr_assert(h_is_token(k1b));
    cr_assert_str_neq(k1, k1b, "re-acquisition reused the old token");
    cr_assert_eq(dlock_lease_release(l1), 0);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(acquire, default_ttl_and_null_options)
{
    h_start("default_ttl_ms = 7000");
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    cr_assert_eq(dlock_lease_acquire(a->c, "dflt", NULL, &l), 0);
    cr_assert_eq(dlock_lease_ttl_ms(l), 7000);
    long long pttl = h_redis_pttl(h_key("dflt"));
    cr_assert(pttl > 6000 && pttl <= 7000, "PTTL %lld with default_ttl_ms 7000", pttl);

    dlock_lease *l2 = NULL;
    dlock_acquire_options zero = {0};
    cr_assert_eq(dlock_lease_acquire(a->c, "dflt2", &zero, &l2), 0);
    cr_assert_eq(dlock_lease_ttl_ms(l2), 7000);
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(acquire, key_prefix_from_config)
{
    h_start("prefix = myapp:locks:");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "job", 5000);
    char *tok = h_redis_get("myapp:locks:job");
    cr_assert(h_is_token(tok), "no token under the configured prefix");
    cr_assert_eq(h_redis_exists("dlock:job"), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE("myapp:locks:job");
}

ITEST(acquire, try_once_on_held_lock_is_busy)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "busy", 5000);
    char *tok = h_redis_get(h_key("busy"));

    dlock_lease *sentinel = (dlock_lease *)(uintptr_t)0x1234;
    dlock_lease *lb = sentinel;
    /* Answered while the lock is still held (a waiting acquire would get no
     * answer until the holder lets go, nor end in EBUSY). */
    int rc = h_acquire(b, "busy", 5000, 0, &lb);
    cr_assert_eq(rc, DLOCK_EBUSY, "got %s (%d)", dlock_strerror(rc), rc);
    cr_assert_eq(lb, sentinel, "out parameter written on failure");

    /* The same client asking again for its own lock: not re-entrant. */
    rc = h_acquire(a, "busy", 5000, 0, &lb);
    cr_assert_eq(rc, DLOCK_EHELD, "second acquire by the holder: %s (%d)", dlock_strerror(rc), rc);

    char *now = h_redis_get(h_key("busy"));
    cr_assert_str_eq(now, tok, "the holder's key changed");
    cr_assert_eq(dlock_lease_state(la), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(la), 0);
}

/* Asking again for a name the connection holds is an immediate error naming
 * the lock: with an endless wait it would queue behind the connection's own
 * lease for ever (a self-deadlock). Waiting twice for a name held elsewhere
 * stays allowed (threads sharing a client take turns). */
ITEST(acquire, asking_again_for_a_held_name_is_an_error_not_a_deadlock)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *held = h_must_acquire(a, "mine", 30000);
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "mine", 30000, DLOCK_WAIT_FOREVER, &l);
    cr_assert_eq(rc, DLOCK_EHELD, "got %s (%d)", dlock_strerror(rc), rc);
    cr_assert(strstr(dlock_client_strerror(a->c, rc), "already holds mine"), "%s",
              dlock_client_strerror(a->c, rc));
    cr_assert_eq(dlock_lease_state(held), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(held), 0);
    /* Released: the name can be taken again at once. */
    cr_assert_eq(dlock_lease_release(h_must_acquire(a, "mine", 30000)), 0);
}

/* The rule of docs/protocol.md: an acquire of one's own name is EHELD
 * whatever else the agent has for it, neither the try-once's EBUSY while
 * another client waits for the name, nor the ELIMIT of a connection at its
 * lease limit; only the checks before it (here the TTL range) answer first. */
ITEST(acquire, eheld_wins_over_busy_and_limits_for_ones_own_lease)
{
    h_start("max_leases_per_conn = 1");
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lease *held = h_must_acquire(a, "own", 30000);
    struct h_acq w;
    h_acquire_async(b, "own", 30000, DLOCK_WAIT_FOREVER, &w);
    const char *ls;
    H_WAIT_UNTIL(H_EVENT_MS,
                 (ls = h_status_ask(0, "leases-json own\n")) && strstr(ls, "\"waiters\":1"));

    dlock_lease *l = NULL;
    int rc = h_acquire(c, "own", 30000, DLOCK_WAIT_NONE, &l);
    cr_assert_eq(rc, DLOCK_EBUSY, "another client's try-once: %s (%d)", dlock_strerror(rc), rc);
    rc = h_acquire(a, "own", 30000, DLOCK_WAIT_NONE, &l);
    cr_assert_eq(rc, DLOCK_EHELD, "the holder's try-once: %s (%d)", dlock_strerror(rc), rc);
    /* a is at its limit of one lease: another name is ELIMIT, its own EHELD. */
    rc = h_acquire(a, "other", 30000, DLOCK_WAIT_NONE, &l);
    cr_assert_eq(rc, DLOCK_ELIMIT, "a second name at the limit: %s (%d)", dlock_strerror(rc), rc);
    rc = h_acquire(a, "own", 30000, 1000, &l);
    cr_assert_eq(rc, DLOCK_EHELD, "the holder's wait at the limit: %s (%d)", dlock_strerror(rc),
                 rc);
    /* A TTL out of range is checked before. */
    rc = h_acquire(a, "own", 60000, DLOCK_WAIT_NONE, &l);
    cr_assert_eq(rc, DLOCK_EINVAL, "TTL of 60 s: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_null(l);

    /* None of it touched the lease or the waiter. */
    cr_assert(dlock_lease_valid(held));
    cr_assert_not(w.done);
    cr_assert_eq(dlock_lease_release(held), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(acquire, bounded_wait_times_out)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "slow", 5000);
    dlock_lease *lb = NULL;
    int64_t t0 = h_now_ms();
    int rc = h_acquire(b, "slow", 5000, 500, &lb);
    int64_t el = h_now_ms() - t0;
    /* Timed out while a holds the lock: the wait ended it, not a release;
     * and not before the 500 ms asked for. */
    cr_assert_eq(rc, DLOCK_ETIMEDOUT, "got %s (%d)", dlock_strerror(rc), rc);
    cr_assert_geq(el, 500 - 1, "timed out after %lld ms, wait was 500", (long long)el);
    cr_assert_eq(dlock_lease_state(la), DLOCK_STATE_HELD);
    cr_assert_null(lb);

    /* The timed-out waiter is gone: a release leaves the key free. */
    cr_assert_eq(dlock_lease_release(la), 0);
    H_KEY_GONE(h_key("slow"));
    H_HOLDS_FOR(100, !h_redis_exists(h_key("slow")));
    /* and b's connection still works */
    cr_assert_eq(dlock_client_ping(b->c), 0);
    dlock_lease *l2 = h_must_acquire(b, "slow", 5000);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(acquire, bad_names_are_refused_and_connection_stays)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    int rc;
    cr_assert_eq(rc = h_acquire(a, "", 1000, 0, &l), DLOCK_EBADNAME, "empty: %d", rc);
    cr_assert_eq(rc = h_acquire(a, "a b", 1000, 0, &l), DLOCK_EBADNAME, "space: %d", rc);
    cr_assert_eq(rc = h_acquire(a, "a\tb", 1000, 0, &l), DLOCK_EBADNAME, "tab: %d", rc);
    cr_assert_eq(rc = h_acquire(a, "a\x01", 1000, 0, &l), DLOCK_EBADNAME, "ctrl: %d", rc);
    cr_assert_eq(rc = h_acquire(a, "a\x7f", 1000, 0, &l), DLOCK_EBADNAME, "DEL: %d", rc);
    /* Braces would upset the Cluster hash tags of the lock's keys. */
    cr_assert_eq(rc = h_acquire(a, "a{b}", 1000, 0, &l), DLOCK_EBADNAME, "braces: %d", rc);
    cr_assert_eq(rc = h_acquire(a, "a}", 1000, 0, &l), DLOCK_EBADNAME, "brace: %d", rc);

    char name[202];
    memset(name, 'x', sizeof name);
    name[200] = '\0'; /* exactly the default max_name_len */
    dlock_lease *ok = h_must_acquire(a, name, 1000);
    cr_assert_eq(h_redis_exists(h_key(name)), 1);
    cr_assert_eq(dlock_lease_release(ok), 0);
    name[200] = 'x';
    name[201] = '\0';
    cr_assert_eq(rc = h_acquire(a, name, 1000, 0, &l), DLOCK_ENAMETOOLONG, "201 bytes: %d", rc);
    cr_assert_null(l);

    /* Names with any other byte (UTF-8, punctuation) are fine. */
    dlock_lease *u = h_must_acquire(a, "caf\xc3\xa9/[orders]:42", 1000);
    cr_assert_eq(h_redis_exists("dlock:caf\xc3\xa9/[orders]:42"), 1);
    cr_assert_eq(dlock_lease_release(u), 0);
    cr_assert_eq(dlock_client_ping(a->c), 0);
}

ITEST(acquire, invalid_arguments)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    dlock_acquire_options o = {.ttl_ms = 1000, .wait_ms = 0, .flags = 0x80000000u};
    int rc = dlock_lease_acquire(a->c, "flags", &o, &l);
    cr_assert_eq(rc, DLOCK_EINVAL, "an unknown flag: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_eq(h_redis_exists(h_key("flags")), 0);
    o.flags = 0;
    rc = dlock_lease_acquire(a->c, NULL, &o, &l);
    cr_assert_eq(rc, DLOCK_EINVAL, "NULL name: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_null(l);
    cr_assert_eq(dlock_client_ping(a->c), 0);
}

ITEST(acquire, open_without_agent_fails)
{
    dlock_client *c = (dlock_client *)(uintptr_t)0x1234;
    int rc = dlock_client_open(&c, h_path("nothing.sock"));
    cr_assert_eq(rc, DLOCK_ECONNECT, "got %s (%d)", dlock_strerror(rc), rc);
    cr_assert_eq(c, (dlock_client *)(uintptr_t)0x1234, "out parameter written on failure");
    cr_assert_str_neq(dlock_strerror(DLOCK_EBUSY), dlock_strerror(DLOCK_ETIMEDOUT));
    cr_assert_str_eq(dlock_strerror(12345), "unknown error");
    cr_assert_str_eq(dlock_state_name(DLOCK_STATE_HELD), "held");
    cr_assert_str_eq(dlock_state_name(DLOCK_STATE_LOST), "lost");
}

ITEST(acquire, lease_limit_per_connection)
{
    h_start("max_leases_per_conn = 2");
    struct h_cl *a = h_client();
    dlock_lease *l1 = h_must_acquire(a, "m1", 5000);
    dlock_lease *l2 = h_must_acquire(a, "m2", 5000);
    dlock_lease *l3 = NULL;
    int rc = h_acquire(a, "m3", 5000, 0, &l3);
    cr_assert_eq(rc, DLOCK_ELIMIT, "third lease: %s (%d)", dlock_strerror(rc), rc);
    cr_assert_eq(h_redis_exists(h_key("m3")), 0);
    /* another connection has its own budget */
    struct h_cl *b = h_client();
    dlock_lease *lb = h_must_acquire(b, "m3", 5000);
    /* Waits for the agent: a's try-once acquire below comes through another
     * connection, which a release without a round trip is not ordered with. */
    cr_assert_eq(dlock_lease_release_sync(lb), 0);
    /* after a release there is room again */
    cr_assert_eq(dlock_lease_release(l1), 0);
    l3 = h_must_acquire(a, "m3", 5000);
    cr_assert_eq(dlock_lease_release(l3), 0);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(acquire, waiter_limit_per_connection)
{
    h_start("max_waiters_per_conn = 2");
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "w", 5000);
    struct h_acq w1, w2, w3;
    h_acquire_async(b, "w", 5000, DLOCK_WAIT_FOREVER, &w1);
    h_acquire_async(b, "w2", 5000, 0, &w2); /* w2 is free: granted, not a waiter */
    H_WAIT_UNTIL(H_EVENT_MS, w2.done);
    cr_assert_eq(w2.status, 0);
    h_acquire_async(b, "w", 5000, DLOCK_WAIT_FOREVER, &w3);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    struct h_acq w4;
    h_acquire_async(b, "w", 5000, DLOCK_WAIT_FOREVER, &w4);
    H_WAIT_UNTIL(H_EVENT_MS, w4.done);
    cr_assert_eq(w4.status, DLOCK_ELIMIT, "third waiter: %s (%d)", dlock_strerror(w4.status),
                 w4.status);
    cr_assert_eq(w1.done + w3.done, 0, "waiters finished while the lock is held");
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w1.done);
    cr_assert_eq(w1.status, 0);
    cr_assert_eq(dlock_lease_release(w1.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w3.done);
    cr_assert_eq(w3.status, 0);
    cr_assert_eq(dlock_lease_release(w3.lease), 0);
    cr_assert_eq(dlock_lease_release(w2.lease), 0);
}

/* Acquires name over a raw connection and returns its GRANTED message. */
static struct wire_granted raw_grant(int fd, const char *name, uint32_t id)
{
    struct wire_buf b = {0};
    struct wire_acquire m = {
        .ttl_ms = 5000, .wait_ms = 2000, .name = name, .name_len = (uint16_t)strlen(name)};
    cr_assert_eq(wire_put_acquire(&b, id, &m), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(fd, 3000, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_GRANTED, "acquire answered with type 0x%x", h.type);
    cr_assert_eq(h.id, id);
    struct wire_granted g;
    cr_assert_eq(wire_get_granted(body, h.len, &g), 0);
    return g;
}

static void raw_release(int fd, uint64_t lease_id, uint32_t id)
{
    struct wire_buf b = {0};
    struct wire_release m = {.lease_id = lease_id};
    cr_assert_eq(wire_put_release(&b, id, &m), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(fd, 3000, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_OK, "release answered with type 0x%x", h.type);
    cr_assert_eq(h.id, id);
}

ITEST(acquire, fencing_tokens_increase_across_agent_restarts)
{
    h_start(NULL);
    uint64_t last = 0;
    for (int round = 0; round < 2; round++) {
        int fd = h_raw_connect(0);
        h_raw_hello(fd);
        for (int i = 0; i < 3; i++) {
            struct wire_granted g = raw_grant(fd, "fenced", (uint32_t)(10 + i));
            if (g.fence == 0)
                h_skip("the backend issues no fencing tokens (fence 0)");
            cr_assert_gt(g.fence, last, "fence %llu not above the previous %llu",
                         (unsigned long long)g.fence, (unsigned long long)last);
            last = g.fence;
            raw_release(fd, g.lease_id, (uint32_t)(20 + i));
        }
        h_raw_close(fd);
        cr_assert_eq(h_agent_stop(0), 0);
        if (round == 0)
            h_agent_start_n(0);
    }
}

/* wait_replicas with no replica to acknowledge: the acquire fails with a
 * message that names WAIT, not as a Redis that cannot be reached, and the
 * key it wrote is taken back. */
ITEST(acquire, a_write_no_replica_acknowledges_is_named_in_the_error)
{
    h_redis_start();
    h_agent_config(0, NULL, "wait_replicas = 1\nwait_timeout_ms = 50");
    h_agent_spawn(0);
    struct h_cl *a = h_client();
    const char *want = "WAIT: 0 of 1 replicas acknowledged within 50 ms (wait_replicas)";
    int rc = 0;
    dlock_lease *l = NULL;
    /* The first tries may come before the agent's link to Redis is up. */
    H_WAIT_UNTIL(H_EVENT_MS, (rc = h_acquire(a, "w", 5000, 0, &l)) == DLOCK_EUNAVAIL &&
                                 strstr(dlock_client_strerror(a->c, rc), want));
    H_KEY_GONE(h_key("w"));
}

/* A cancelled wait is answered DLOCK_ECANCELED once and leaves no waiter:
 * when the holder releases, a try-once of a third client finds the lock
 * free (a waiter left behind would be served first, and the try-once
 * busy). A second cancel, and one of a finished acquire, find nothing. */
ITEST(acquire, a_cancelled_wait_leaves_no_waiter)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lease *held = h_must_acquire(a, "cx", 10000);
    struct h_acq w, other;
    h_acquire_async(b, "cx", 10000, DLOCK_WAIT_FOREVER, &w);
    h_acquire_async(b, "cy", 10000, DLOCK_WAIT_FOREVER, &other);
    H_WAIT_UNTIL(H_EVENT_MS, other.done);
    cr_assert_eq(other.status, 0);
    cr_assert_eq(h_acquire_cancel(b, &other), DLOCK_ENOTFOUND, "a finished acquire was cancelled");
    cr_assert_eq(h_acquire_cancel(b, &w), 0);
    cr_assert_eq(h_acquire_cancel(b, &w), DLOCK_ENOTFOUND, "cancelled twice");
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, DLOCK_ECANCELED, "%s", dlock_strerror(w.status));
    cr_assert_null(w.lease);
    cr_assert_eq(h_metric(0, "dlock_cancels_total"), 1);
    cr_assert_eq(dlock_lease_release_sync(held), 0);
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(c, "cx", 10000, 0, &l), 0, "a waiter was left behind");
    cr_assert_eq(w.done, 1, "the cancelled acquire was answered twice");
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    cr_assert_eq(dlock_lease_release_sync(other.lease), 0);
}

/* A cancel that crosses its grant: each answer comes exactly once, and a
 * grant that won is an ordinary lease, whose release frees the name. */
ITEST(acquire, a_cancel_that_crosses_the_grant_loses_nothing)
{
    h_start(NULL);
    struct h_cl *b = h_client(), *c = h_client();
    int granted = 0, cancelled = 0;
    for (int i = 0; i < 50; i++) {
        struct h_acq w;
        h_acquire_async(b, "cz", 10000, 2000, &w);
        int rc = h_acquire_cancel(b, &w);
        cr_assert(rc == 0 || rc == DLOCK_ENOTFOUND, "cancel: %s", dlock_strerror(rc));
        H_WAIT_UNTIL(H_EVENT_MS, w.done);
        cr_assert_eq(w.done, 1);
        if (w.status == 0) {
            granted++;
            cr_assert_eq(dlock_lease_release_sync(w.lease), 0);
        } else {
            cr_assert_eq(w.status, DLOCK_ECANCELED, "%s", dlock_strerror(w.status));
            cancelled++;
        }
        /* A key won for a cancelled acquire goes back right behind the
         * grant: the name is free soon, if not at this very moment. */
        dlock_lease *l = NULL;
        cr_assert_eq(h_acquire(c, "cz", 10000, 10000, &l), 0, "round %d: the name stayed taken", i);
        cr_assert_eq(dlock_lease_release_sync(l), 0);
    }
    cr_log_info("of 50 cancels right behind their acquire: %d granted first, %d cancelled", granted,
                cancelled);
}

ITEST(acquire, cancel_arguments)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    struct h_acq w = {0};
    cr_assert_eq(h_acquire_cancel(a, &w), DLOCK_ENOTFOUND);
    cr_assert_eq(dlock_lease_acquire_cancel(NULL, NULL, NULL), DLOCK_EINVAL);
    cr_assert_eq(dlock_lease_acquire_cancel(a->c, NULL, &w), DLOCK_EINVAL);
}
