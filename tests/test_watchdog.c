/* SPDX-License-Identifier: BSD-3-Clause */
/* test_watchdog.c -- the agent renews leases while their holder lives: a lease
 * held for several times its TTL never expires on Redis and is never reported
 * lost. The TTLs are of a second or more, so that a loaded machine does not
 * make a renewal late enough to lose a lease; when renewals are due (the
 * renewal fraction, the schedule from the send time) is test_core.c's. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Samples the keys every ~20 ms (or as often as the machine allows) for
 * duration_ms: each must exist with its token and a positive PTTL no larger
 * than its TTL; no lease may be lost. */
static void watch(struct h_cl *cl, int n, const char *const *names, char *const *tokens,
                  const uint32_t *ttls, int duration_ms)
{
    int64_t end = h_now_ms() + duration_ms;
    int samples = 0;
    while (h_now_ms() < end) {
        for (int i = 0; i < n; i++) {
            char *v = h_redis_get(h_key(names[i]));
            cr_assert_not_null(v, "%s vanished from Redis after %d samples", names[i], samples);
            cr_assert_str_eq(v, tokens[i], "%s changed owner", names[i]);
            long long pttl = h_redis_pttl(h_key(names[i]));
            cr_assert(pttl > 0 && pttl <= (long long)ttls[i], "%s: PTTL %lld (ttl %u)", names[i],
                      pttl, ttls[i]);
        }
        if (cl)
            cr_assert_eq(h_events(cl, NULL, DLOCK_STATE_LOST), 0, "a lease was reported lost");
        samples++;
        h_pump_all(20);
    }
    /* Enough to have looked at each key across its renewals; how many fit
     * in duration_ms depends on the machine's load. */
    cr_assert_geq(samples, 5, "only %d samples", samples);
}

ITEST(watchdog, short_ttl_lease_survives_long_hold)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "wd", 1000);
    cr_assert_eq(dlock_lease_ttl_ms(l), 1000);
    char *tok = h_redis_get(h_key("wd"));
    cr_assert(h_is_token(tok));
    const char *names[] = {"wd"};
    uint32_t ttls[] = {1000};
    watch(a, 1, names, &tok, ttls, 3500);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("wd"));
}

ITEST(watchdog, leases_with_different_ttls_all_renewed)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    const char *names[] = {"r1", "r2", "r3", "r4"};
    uint32_t ttls[] = {1000, 1500, 2500, 1200};
    dlock_lease *l[4];
    char *tok[4];
    for (int i = 0; i < 4; i++) {
        l[i] = h_must_acquire(i < 2 ? a : b, names[i], ttls[i]);
        tok[i] = h_redis_get(h_key(names[i]));
    }
    watch(a, 4, names, tok, ttls, 3500);
    cr_assert_eq(h_events(b, NULL, DLOCK_STATE_LOST), 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(dlock_lease_state(l[i]), DLOCK_STATE_HELD);
        cr_assert_eq(dlock_lease_release(l[i]), 0);
    }
}

ITEST(watchdog, renewal_uses_configured_fraction)
{
    /* The agent takes renew_fraction and renews with it: the lease lives on
     * past three TTLs. When the renewals are due (here every 300 ms) is
     * test_core.c's. */
    h_start("renew_fraction = 0.2");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "frac", 1500);
    char *tok = h_redis_get(h_key("frac"));
    const char *names[] = {"frac"};
    uint32_t ttls[] = {1500};
    watch(a, 1, names, &tok, ttls, 4500);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(watchdog, stopped_holder_process_keeps_its_lease)
{
    /* The agent cannot tell a stopped process from a busy one: the lease is
     * kept while the connection lives. */
    h_start(NULL);
    struct h_holder h;
    h_holder_start(&h, "stopped", 1000);
    char *tok = h_redis_get(h_key("stopped"));
    h_holder_kill(&h, SIGSTOP);
    const char *names[] = {"stopped"};
    uint32_t ttls[] = {1000};
    watch(NULL, 1, names, &tok, ttls, 3000);
    h_holder_kill(&h, SIGCONT);
    cr_assert_eq(h_holder_release(&h), 0);
    H_KEY_GONE(h_key("stopped"));
}

ITEST(watchdog, thousand_leases_all_renewed)
{
    /* 1000 leases of TTL 1.5 s ask for more than a uid's default renewal budget. */
    h_start("[policy]\nrenew_budget_per_uid = 1000");
    struct h_cl *a = h_client();
    enum { N = 1000 };
    static struct h_acq w[N];
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "bulk-%d", i);
        h_acquire_async(a, name, 1500, 0, &w[i]);
    }
    H_WAIT_UNTIL(H_EVENT_MS, h_acq_done(w, N, NULL) == N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(w[i].status, 0, "lease %d: %s", i, dlock_strerror(w[i].status));
    H_HOLDS_FOR(3500, h_events(a, NULL, DLOCK_STATE_LOST) == 0);
    cr_assert_eq(h_redis_count_keys("dlock:bulk-*"), N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(dlock_lease_state(w[i].lease), DLOCK_STATE_HELD);
        cr_assert_eq(dlock_lease_release(w[i].lease), 0);
    }
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_count_keys("dlock:bulk-*") == 0);
}
