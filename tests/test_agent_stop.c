/* SPDX-License-Identifier: BSD-3-Clause */
/* test_agent_stop.c -- agent shutdown and crash: SIGTERM releases every lease
 * and exits 0; kill -9 leaves the keys to expire by their TTL; clients are told
 * either way; a restarted agent takes over its socket. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* An agent without a state directory, whose clients' connections end with
 * it: what the tests below watch them learn (a client of an agent that
 * keeps its state takes its connection back from a successor instead, or
 * on a fresh HELLO after a stop: test_resume). */
#define NO_STATE "state_dir ="

ITEST(agent_stop, sigterm_releases_everything_and_exits_0)
{
    h_start(NO_STATE);
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lease *lx = h_must_acquire(a, "x", 30000);
    dlock_lease *ly = h_must_acquire(a, "y", 30000);
    dlock_lease *lz = h_must_acquire(b, "z", 30000);
    struct h_acq w;
    h_acquire_async(c, "x", 30000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(c->c), 0);
    cr_assert_eq(
        h_redis_exists(h_key("x")) + h_redis_exists(h_key("y")) + h_redis_exists(h_key("z")), 3);

    int st = h_agent_stop(0);
    cr_assert_eq(st, 0, "dlockd exit status %d after SIGTERM", st);
    /* Deleted, not left to their 30 s TTL. */
    H_KEY_GONE(h_key("x"));
    H_KEY_GONE(h_key("y"));
    H_KEY_GONE(h_key("z"));
    const char *log = h_read_file(H.agent[0].log);
    cr_assert(log && strstr(log, "3 release(s) sent and answered; exiting"), "log: %s",
              log ? log : "");

    /* Every client learns it, through dispatch. */
    H_WAIT_UNTIL(H_EVENT_MS, a->disconnected && b->disconnected && c->disconnected);
    cr_assert_eq(h_events(a, lx, DLOCK_STATE_LOST), 1, "no LOST event for x");
    cr_assert_eq(h_events(a, ly, DLOCK_STATE_LOST), 1, "no LOST event for y");
    cr_assert_eq(h_events(b, lz, DLOCK_STATE_LOST), 1, "no LOST event for z");
    cr_assert_eq(dlock_lease_state(lx), DLOCK_STATE_LOST);
    cr_assert_eq(dlock_lease_state(lz), DLOCK_STATE_LOST);
    cr_assert_eq(w.done, 1, "the pending acquire's callback did not run");
    cr_assert_lt(w.status, 0);
    cr_assert_null(w.lease);
    cr_assert_eq(dlock_client_dispatch(a->c), DLOCK_EDISCONNECTED);

    int rc = dlock_lease_release(lx);
    cr_assert(rc == DLOCK_EDISCONNECTED || rc == DLOCK_ELOST, "release after shutdown: %s (%d)",
              dlock_strerror(rc), rc);
    dlock_lease *l = NULL;
    rc = h_acquire(a, "x", 1000, 0, &l);
    cr_assert_eq(rc, DLOCK_EDISCONNECTED, "acquire after shutdown: %s (%d)", dlock_strerror(rc),
                 rc);
    cr_assert_neq(dlock_client_ping(b->c), 0);

    dlock_client *d = NULL;
    rc = h_client_try_open(0, &d);
    cr_assert_eq(rc, DLOCK_ECONNECT, "open after shutdown: %s (%d)", dlock_strerror(rc), rc);
}

ITEST(agent_stop, sigint_also_releases)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    h_must_acquire(a, "int", 30000);
    kill(H.agent[0].pid, SIGINT);
    int st = h_wait_child(H.agent[0].pid, H_STOP_MS);
    H.agent[0].pid = 0;
    cr_assert_eq(st, 0, "exit status %d after SIGINT", st);
    H_KEY_GONE(h_key("int"));
}

ITEST(agent_stop, kill9_leaves_keys_to_expire_by_ttl)
{
    h_start(NO_STATE);
    struct h_cl *a = h_client();
    /* A TTL of seconds: the key is still there when the test looks, however
     * slowly it gets to it after the kill, and goes by its TTL after that. */
    dlock_lease *l = h_must_acquire(a, "crash", 3000);
    char *tok = h_redis_get(h_key("crash"));

    h_agent_kill(0);
    int64_t t0 = h_now_ms();
    long long pttl = h_redis_pttl(h_key("crash"));
    cr_assert_gt(pttl, 0, "key gone right after kill -9 (PTTL %lld)", pttl);
    char *v = h_redis_get(h_key("crash"));
    cr_assert_str_eq(v, tok);
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("crash")));
    cr_log_info("key expired %lld ms after kill -9", (long long)(h_now_ms() - t0));

    H_WAIT_UNTIL(H_EVENT_MS, a->disconnected);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 1, "no LOST event after the agent died");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);
    cr_assert_eq(dlock_client_dispatch(a->c), DLOCK_EDISCONNECTED);
}

ITEST(agent_stop, restart_after_crash_takes_over_socket)
{
    h_start(NO_STATE);
    struct h_cl *a = h_client();
    h_must_acquire(a, "again", 1000);
    h_agent_kill(0);
    H_WAIT_UNTIL(H_EVENT_MS, a->disconnected);
    h_client_close(a);

    /* The stale socket file is still there; a new agent must replace it. */
    h_agent_start_n(0);
    struct h_cl *b = h_client();
    /* The dead agent's key is still on Redis until it expires: waiting works. */
    dlock_lease *l = NULL;
    int64_t t0 = h_now_ms();
    int rc = h_acquire(b, "again", 5000, H_EVENT_MS, &l);
    cr_assert_eq(rc, 0, "acquire after restart: %s (%d)", dlock_strerror(rc), rc);
    cr_log_info("granted after %lld ms", (long long)(h_now_ms() - t0));
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(agent_stop, second_agent_refuses_live_socket)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "live", 30000);
    char *argv[] = {DLOCKD_PATH,     "-c", H.agent[0].conf, "-s",
                    H.agent[0].sock, "-r", H.redis_addr,    NULL};
    pid_t pid = h_spawn(argv, h_path("dlockd-second.log"));
    int st = h_wait_child(pid, 3000);
    cr_assert_neq(st, -1, "a second dlockd on a live socket did not exit");
    cr_assert_neq(st, 0, "a second dlockd on a live socket exited 0");
    /* the first one is unaffected */
    cr_assert_eq(dlock_client_ping(a->c), 0);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    struct h_cl *b = h_client();
    cr_assert_eq(dlock_client_ping(b->c), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(agent_stop, sigterm_with_acquires_in_flight_leaves_no_keys)
{
    /* Grants still on their way back from Redis at shutdown must be given
     * back too, not left to their 30 s TTL. */
    h_start(NO_STATE);
    struct h_cl *a = h_client();
    struct h_acq w[50];
    char name[32];
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof name, "inflight-%d", i);
        h_acquire_async(a, name, 30000, 0, &w[i]);
    }
    int st = h_agent_stop(0);
    cr_assert_eq(st, 0, "exit status %d", st);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_count_keys("dlock:inflight-*") == 0);
    H_WAIT_UNTIL(H_EVENT_MS, a->disconnected);
    for (int i = 0; i < 50; i++)
        cr_assert_eq(w[i].done, 1, "async acquire %d: callback ran %d times", i, w[i].done);
}

/* With Redis down, nothing is released at the stop: the log says so, and
 * that the keys expire by their TTL, instead of claiming the releases were
 * sent. */
ITEST(agent_stop, sigterm_with_redis_down_says_the_releases_were_not_sent)
{
    h_start(NO_STATE);
    struct h_cl *a = h_client();
    h_must_acquire(a, "x", 30000);
    h_must_acquire(a, "y", 30000);
    h_redis_stop();
    H_WAIT_UNTIL(H_EVENT_MS, strstr(h_status_ask(0, "status-json\n"), "\"connected\":false"));
    int st = h_agent_stop(0);
    cr_assert_eq(st, 0, "dlockd exit status %d after SIGTERM", st);
    const char *log = h_read_file(H.agent[0].log);
    cr_assert(log && strstr(log, "2 release(s) not sent or not answered: Redis unreachable; their "
                                 "keys expire within the TTL; 0 release(s) sent and answered"),
              "log: %s", log ? log : "");
    cr_assert_null(strstr(log, "all releases sent and answered"));
}
