/* SPDX-License-Identifier: BSD-3-Clause */
/* test_release.c -- dlock_lease_release() answers from the lease page and
 * sends RELEASE without waiting for the agent; dlock_lease_release_sync()
 * waits for the agent's word. What each returns, that the key still goes,
 * that a release is ordered before what the client sends next, and that a
 * release never waits for an agent that is stopped, dead or not reading. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

ITEST(release, fast_returns_0_and_the_key_goes)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "fast", 30000);
    long long m0 = h_metric(0, "dlock_releases_total");
    cr_assert(h_is_token(h_redis_get(h_key("fast"))));
    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, 0, "release: %s (%d)", dlock_strerror(rc), rc);
    /* Deleted by the agent, long before its 30 s TTL. */
    H_KEY_GONE(h_key("fast"));
    H_WAIT_UNTIL(H_EVENT_MS, h_metric(0, "dlock_releases_total") == m0 + 1);
}

ITEST(release, lost_lease_seen_as_an_event_gives_elost)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "lost-ev", 600);
    h_redis_del(h_key("lost-ev"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, DLOCK_ELOST, "release of a lost lease: %s (%d)", dlock_strerror(rc), rc);
}

ITEST(release, lost_lease_seen_on_the_page_only_gives_elost)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "lost-page", 600);
    h_redis_del(h_key("lost-page"));
    /* No dispatch: the LOST event stays unread, only the page tells. */
    int64_t end = h_deadline(H_EVENT_MS);
    while (dlock_lease_valid(l) && h_now_ms() < end)
        h_sleep_ms(10);
    cr_assert_eq(dlock_lease_valid(l), 0, "the lease page never showed the loss");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD, "the event was dispatched after all");
    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, DLOCK_ELOST, "release of a lost lease: %s (%d)", dlock_strerror(rc), rc);
    /* The connection is fine: the name can be taken again. */
    dlock_lease *l2 = h_must_acquire(a, "lost-page", 600);
    cr_assert_eq(dlock_lease_release(l2), 0);
    H_KEY_GONE(h_key("lost-page"));
}

ITEST(release, then_acquire_on_the_same_connection_is_granted)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    /* The agent handles a connection's frames in order: each RELEASE is done
     * with before the ACQUIRE right behind it, never EHELD, never EBUSY. */
    long long m0 = h_metric(0, "dlock_releases_total");
    dlock_lease *l = h_must_acquire(a, "order", 30000);
    for (int i = 0; i < 500; i++) {
        cr_assert_eq(dlock_lease_release(l), 0, "release %d", i);
        int rc = h_acquire(a, "order", 30000, DLOCK_WAIT_NONE, &l);
        cr_assert_eq(rc, 0, "acquire %d right after the release: %s (%d)", i, dlock_strerror(rc),
                     rc);
    }
    char *tok = h_redis_get(h_key("order"));
    cr_assert(h_is_token(tok), "the last grant has no key");
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("order"));
    H_WAIT_UNTIL(H_EVENT_MS, h_metric(0, "dlock_releases_total") == m0 + 501);
}

ITEST(release, then_close_deletes_the_key)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "closing", 30000);
    long long m0 = h_metric(0, "dlock_releases_total");
    cr_assert_eq(dlock_lease_release(l), 0);
    h_client_close(a);
    H_KEY_GONE(h_key("closing"));
    /* Released by the RELEASE, which came before the close, not by the close. */
    H_WAIT_UNTIL(H_EVENT_MS, h_metric(0, "dlock_releases_total") == m0 + 1);
}

ITEST(release, many_without_dispatch_neither_block_nor_get_lost)
{
    h_start("max_leases_per_conn = 100000\nmax_waiters_per_conn = 100000\nlog_level = warn\n"
            "[policy]\nmax_leases_per_uid = 0\nmax_waiters_per_uid = 0\nrenew_budget_per_uid = 0");
    struct h_cl *a = h_client();
    enum { N = 20000 };
    struct h_acq *acq = calloc(N, sizeof *acq);
    cr_assert_not_null(acq);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "many-%d", i);
        h_acquire_async(a, name, 30000, 0, &acq[i]);
    }
    int ok = 0;
    H_WAIT_UNTIL(30000, (h_acq_done(acq, N, &ok), ok == N));
    cr_assert_eq(h_redis_count_keys(h_key("many-*")), N);
    long long m0 = h_metric(0, "dlock_releases_total");
    /* With the agent stopped nothing is read: 20000 RELEASEs (400 KB) fill
     * the socket, and the rest wait in the client's output buffer. */
    h_agent_pause(0);
    for (int i = 0; i < N; i++) {
        int rc = dlock_lease_release(acq[i].lease);
        cr_assert_eq(rc, 0, "release %d: %s (%d)", i, dlock_strerror(rc), rc);
    }
    h_agent_resume(0);
    /* Dispatching writes what waited and reads the answers. */
    int64_t end = h_deadline(30000);
    long long left;
    while ((left = h_redis_count_keys(h_key("many-*"))) > 0 && h_now_ms() < end) {
        cr_assert_eq(dlock_client_dispatch(a->c), 0);
        h_pump(a, 10);
    }
    cr_assert_eq(left, 0, "%lld keys left of %d", left, N);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    cr_assert_eq(h_metric(0, "dlock_releases_total") - m0, N);
    free(acq);
}

ITEST(release, sync_returns_the_agents_verdict)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "sync", 30000);
    long long m0 = h_metric(0, "dlock_releases_total");
    int rc = dlock_lease_release_sync(l);
    cr_assert_eq(rc, 0, "release_sync: %s (%d)", dlock_strerror(rc), rc);
    /* The agent answered: it gave the lease up before. */
    cr_assert_eq(h_metric(0, "dlock_releases_total"), m0 + 1);
    H_KEY_GONE(h_key("sync"));

    /* Lost, event unread: the agent says ENOTFOUND, reported as ELOST. */
    l = h_must_acquire(a, "sync-lost", 600);
    h_redis_del(h_key("sync-lost"));
    int64_t end = h_deadline(H_EVENT_MS);
    while (dlock_lease_valid(l) && h_now_ms() < end)
        h_sleep_ms(10);
    rc = dlock_lease_release_sync(l);
    cr_assert_eq(rc, DLOCK_ELOST, "release_sync of a lost lease: %s (%d)", dlock_strerror(rc), rc);
}

ITEST(release, fast_does_not_wait_for_a_stopped_agent)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "stopped", 30000);
    h_agent_pause(0);
    /* Valid up to the release (30 s TTL): 0, without an answer. */
    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, 0, "release with the agent stopped: %s (%d)", dlock_strerror(rc), rc);
    cr_assert(h_is_token(h_redis_get(h_key("stopped"))));
    /* Once it runs again it reads the RELEASE and deletes the key. */
    h_agent_resume(0);
    H_KEY_GONE(h_key("stopped"));
}

/* An agent without a state directory: the connection ends with it (one
 * that keeps its state leaves the lease to a successor, and a release
 * meanwhile is the page's verdict: test_resume). */
ITEST(release, after_the_agent_died_returns_edisconnected)
{
    h_start("state_dir =");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "dead", 3000);
    h_agent_kill(0);
    /* Nothing dispatched: the page still reads valid, the send finds the
     * connection closed. The key is left to its TTL. */
    int rc = dlock_lease_release(l);
    cr_assert_eq(rc, DLOCK_EDISCONNECTED, "release with the agent dead: %s (%d)",
                 dlock_strerror(rc), rc);
    cr_assert_eq(dlock_client_dispatch(a->c), DLOCK_EDISCONNECTED);
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("dead")));
}
