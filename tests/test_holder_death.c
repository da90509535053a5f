/* SPDX-License-Identifier: BSD-3-Clause */
/* test_holder_death.c -- a holder that dies or closes its client gives its
 * leases up at once, not after their TTL. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

ITEST(holder_death, kill9_releases_at_once)
{
    h_start(NULL);
    struct h_holder h;
    h_holder_start(&h, "victim", 30000);
    char *tok = h_redis_get(h_key("victim"));
    cr_assert(h_is_token(tok));
    long long pttl = h_redis_pttl(h_key("victim"));
    cr_assert_gt(pttl, 25000);

    int64_t t0 = h_now_ms();
    h_holder_kill(&h, SIGKILL);
    H_KEY_GONE(h_key("victim")); /* deleted, not left to its 30 s TTL */
    cr_log_info("key gone %lld ms after kill -9", (long long)(h_now_ms() - t0));
}

ITEST(holder_death, kill9_wakes_waiter_at_once)
{
    /* No fallback retry for about 30 s: only the release notice wakes it. */
    h_start("retry_fallback_ms = 60000");
    struct h_holder h;
    h_holder_start(&h, "victim", 30000);
    struct h_cl *b = h_client();
    struct h_acq w;
    h_acquire_async(b, "victim", 30000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(200, !w.done);
    int64_t t0 = h_now_ms();
    h_holder_kill(&h, SIGKILL);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("waiter granted %lld ms after kill -9", (long long)(w.at_ms - t0));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(holder_death, exit_without_release_releases)
{
    h_start(NULL);
    pid_t pid = h_fork();
    if (pid == 0) {
        dlock_client *c;
        dlock_lease *l;
        dlock_acquire_options o = {.ttl_ms = 30000};
        if (h_client_try_open(0, &c) != 0 || dlock_lease_acquire(c, "quitter", &o, &l) != 0)
            _exit(1);
        _exit(0); /* no release, no close */
    }
    cr_assert_eq(h_wait_child(pid, 5000), 0, "child could not acquire");
    H_KEY_GONE(h_key("quitter"));
}

ITEST(holder_death, client_close_releases_every_lease)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    enum { N = 50 };
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "many-%d", i);
        h_must_acquire(a, name, 30000);
    }
    redisReply *r = h_redis_cmd("KEYS dlock:many-*");
    cr_assert_eq(r->elements, N);
    freeReplyObject(r);

    h_client_close(a);
    /* Deleted, every one, not left to their 30 s TTL. */
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "many-%d", i);
        H_KEY_GONE(h_key(name));
    }
}

ITEST(holder_death, close_with_pending_acquire_calls_no_callback)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "pend", 30000);
    struct h_acq w;
    h_acquire_async(b, "pend", 30000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    h_client_close(b); /* drops the waiter; its callback must not run */
    cr_assert_eq(w.done, 0);
    cr_assert_eq(dlock_lease_release(la), 0);
    h_pump_all(200);
    cr_assert_eq(w.done, 0);
    /* The agent may read the release before it sees b's connection close
     * (two sockets, no order between them): b's waiter may then be granted
     * for a moment, and its key is deleted as soon as the close is seen. */
    H_KEY_GONE(h_key("pend"));
    /* and the lock is free for others */
    struct h_cl *c = h_client();
    dlock_lease *lc = h_must_acquire(c, "pend", 30000);
    cr_assert_eq(dlock_lease_release(lc), 0);
}

ITEST(holder_death, close_right_after_acquire_leaks_no_key)
{
    /* The grant comes back from Redis after the connection is gone: the
     * agent must give the key back, not leave it for its 30 s TTL. */
    h_start(NULL);
    int64_t t0 = h_now_ms();
    for (int i = 0; i < 20; i++) {
        int fd = h_raw_connect(0);
        h_raw_hello(fd);
        char name[32];
        snprintf(name, sizeof name, "race-%d", i);
        struct wire_buf b = {0};
        struct wire_acquire m = {
            .ttl_ms = 30000, .wait_ms = 0, .name = name, .name_len = (uint16_t)strlen(name)};
        cr_assert_eq(wire_put_acquire(&b, 2, &m), 0);
        cr_assert_eq(h_raw_send_buf(fd, &b), 0);
        h_raw_close(fd);
    }
    /* Keys may come and go while the agent catches up; none may stay. */
    H_WAIT_UNTIL(H_EVENT_MS, h_now_ms() - t0 > 500 && h_redis_count_keys("dlock:race-*") == 0);
    H_HOLDS_FOR(500, h_redis_count_keys("dlock:race-*") == 0);
}

ITEST(holder_death, client_closed_with_async_acquires_leaks_no_key)
{
    h_start(NULL);
    int64_t t0 = h_now_ms();
    for (int round = 0; round < 5; round++) {
        struct h_cl *a = h_client();
        struct h_acq w[10];
        char name[32];
        for (int i = 0; i < 10; i++) {
            snprintf(name, sizeof name, "drop-%d-%d", round, i);
            h_acquire_async(a, name, 30000, 0, &w[i]);
        }
        h_client_close(a);
    }
    H_WAIT_UNTIL(H_EVENT_MS, h_now_ms() - t0 > 500 && h_redis_count_keys("dlock:drop-*") == 0);
    H_HOLDS_FOR(500, h_redis_count_keys("dlock:drop-*") == 0);
}

ITEST(holder_death, waiter_granted_as_it_disconnects_gives_lock_to_next)
{
    /* The first waiter goes away just as the lock is handed to it; the next
     * waiter must get the lock, promptly. */
    h_start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lease *la = h_must_acquire(a, "handoff", 30000);
    struct h_acq wb, wc;
    h_acquire_async(b, "handoff", 30000, DLOCK_WAIT_FOREVER, &wb);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    h_acquire_async(c, "handoff", 30000, DLOCK_WAIT_FOREVER, &wc);
    cr_assert_eq(dlock_client_ping(c->c), 0);
    cr_assert_eq(dlock_lease_release(la), 0);
    h_client_close(b); /* at about the moment the agent grants to b */
    H_WAIT_UNTIL(H_EVENT_MS, wc.done);
    cr_assert_eq(wc.status, 0, "next waiter: %s (%d)", dlock_strerror(wc.status), wc.status);
    cr_assert_eq(dlock_lease_release(wc.lease), 0);
    H_KEY_GONE(h_key("handoff"));
}
