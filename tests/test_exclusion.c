/* SPDX-License-Identifier: BSD-3-Clause */
/* test_exclusion.c -- one holder at a time: waiters in another client, another
 * process and another agent wait while the lock is held, and are woken by the
 * release notice (not by a fallback poll) when it is released. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

/* With this fallback (the longest there is), a waiter behind a holder of 30 s
 * TTL is not retried before about 30 s: one granted within H_EVENT_MS of the
 * release was woken by the release notice. */
#define SLOW_FALLBACK "retry_fallback_ms = 60000"

ITEST(exclusion, async_waiter_gets_lock_after_release)
{
    h_start(SLOW_FALLBACK);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "ex", 30000);
    char *tok_a = h_redis_get(h_key("ex"));

    struct h_acq w;
    h_acquire_async(b, "ex", 30000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(300, !w.done);
    char *still = h_redis_get(h_key("ex"));
    cr_assert_str_eq(still, tok_a, "the waiter touched the holder's key");

    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_lease_state(w.lease), DLOCK_STATE_HELD);
    char *tok_b = h_redis_get(h_key("ex"));
    cr_assert(h_is_token(tok_b));
    cr_assert_str_neq(tok_a, tok_b);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_KEY_GONE(h_key("ex"));
}

ITEST(exclusion, bounded_waiter_gets_lock_released_in_time)
{
    h_start(SLOW_FALLBACK);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "bw", 30000);
    struct h_acq w;
    h_acquire_async(b, "bw", 30000, 3000, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(200, !w.done);
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(exclusion, forked_process_waits_for_forked_holder)
{
    h_start(SLOW_FALLBACK);
    struct h_holder h1, h2;
    h_holder_start(&h1, "proc", 30000);
    char *tok1 = h_redis_get(h_key("proc"));
    cr_assert(h_is_token(tok1));

    h_holder_spawn(&h2, "proc", 30000, DLOCK_WAIT_FOREVER);
    cr_assert_eq(h_holder_poll(&h2, 400), 0, "second process got the lock while it was held");

    cr_assert_eq(h_holder_release(&h1), 0);
    cr_assert_eq(h_holder_poll(&h2, H_EVENT_MS), 1,
                 "waiting process not granted after the release");
    cr_assert_eq(h2.acquire_rc, 0, "%s", dlock_strerror(h2.acquire_rc));
    char *tok2 = h_redis_get(h_key("proc"));
    cr_assert(h_is_token(tok2));
    cr_assert_str_neq(tok1, tok2);
    cr_assert_eq(h_holder_release(&h2), 0);
    H_KEY_GONE(h_key("proc"));
}

ITEST(exclusion, waiter_on_another_agent_woken_by_release_notice)
{
    /* Two agents on one Redis stand for two hosts. */
    h_start_two(SLOW_FALLBACK);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *la = h_must_acquire(a, "xhost", 30000);

    dlock_lease *lb = NULL;
    int rc = h_acquire(b, "xhost", 30000, 0, &lb);
    cr_assert_eq(rc, DLOCK_EBUSY, "other agent, try once: %s (%d)", dlock_strerror(rc), rc);

    struct h_acq w;
    h_acquire_async(b, "xhost", 30000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(300, !w.done);
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);

    /* and the other way round */
    struct h_acq w2;
    h_acquire_async(a, "xhost", 30000, DLOCK_WAIT_FOREVER, &w2);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    H_HOLDS_FOR(300, !w2.done);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w2.done);
    cr_assert_eq(w2.status, 0, "waiter: %s (%d)", dlock_strerror(w2.status), w2.status);
    cr_assert_eq(dlock_lease_release(w2.lease), 0);
}

/* Several processes on two agents take the same lock repeatedly; a counter in
 * shared memory checks that no two are ever inside at the same time. */
struct shared {
    atomic_int inside;
    atomic_int max_inside;
    atomic_int entries;
};

static int worker(int agent, struct shared *sh, int rounds)
{
    dlock_client *c;
    if (h_client_try_open(agent, &c) != 0)
        return 10;
    for (int i = 0; i < rounds; i++) {
        dlock_lease *l;
        dlock_acquire_options o = {.ttl_ms = 5000, .wait_ms = 10000};
        if (dlock_lease_acquire(c, "mutex", &o, &l) != 0)
            return 11;
        int now = atomic_fetch_add(&sh->inside, 1) + 1;
        int prev = atomic_load(&sh->max_inside);
        while (now > prev && !atomic_compare_exchange_weak(&sh->max_inside, &prev, now))
            ;
        atomic_fetch_add(&sh->entries, 1);
        usleep(2000);
        atomic_fetch_sub(&sh->inside, 1);
        if (dlock_lease_release(l) != 0)
            return 12;
    }
    dlock_client_close(c);
    return 0;
}

ITEST(exclusion, processes_on_two_agents_never_overlap)
{
    h_start_two(NULL);
    struct shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    enum { NPROC = 4, ROUNDS = 15 };
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = h_fork();
        if (pids[i] == 0)
            _exit(worker(i % 2, sh, ROUNDS));
    }
    for (int i = 0; i < NPROC; i++) {
        int st = h_wait_child(pids[i], 30000);
        cr_assert_eq(st, 0, "worker %d exit status %d", i, st);
    }
    cr_assert_eq(atomic_load(&sh->entries), NPROC * ROUNDS);
    cr_assert_eq(atomic_load(&sh->max_inside), 1, "%d holders at once",
                 atomic_load(&sh->max_inside));
    H_KEY_GONE(h_key("mutex"));
    munmap(sh, sizeof *sh);
}
