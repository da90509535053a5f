/* test_dlockctl.c -- `dlockctl run`: the lock is held while CMD runs, CMD's
 * exit status is passed on, a taken lock gives 75 (or -E), a lease lost while
 * CMD runs sends CMD SIGTERM and gives 79, and the usage and agent errors give
 * 64 and 69. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* A shell loop of at most ~10 s, so a CMD that is never stopped cannot
 * outlive the test for long. */
#define BOUNDED_WAIT "i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done"

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

ITEST(dlockctl, passes_on_command_exit_status)
{
    h_start(NULL);
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "job", "--", "sh", "-c", "exit 7", NULL);
    cr_assert_eq(st, 7, "dlockctl exit status %d, CMD exited 7", st);
    st = h_ctl(5000, "-s", H.agent[0].sock, "run", "job", "--", "true", NULL);
    cr_assert_eq(st, 0);
    H_KEY_GONE(h_key("job"));
}

ITEST(dlockctl, holds_the_lock_while_command_runs)
{
    h_start(NULL);
    char script[512];
    snprintf(script, sizeof script,
             "printf %%s \"$DLOCK_NAME\" > %s; touch %s; "
             "i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done",
             h_path("name"), h_path("started"), h_path("go"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "held", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));

    const char *name = h_read_file(h_path("name"));
    cr_assert_not_null(name);
    cr_assert_str_eq(name, "held", "CMD saw DLOCK_NAME='%s'", name);
    char *tok = h_redis_get(h_key("held"));
    cr_assert(h_is_token(tok), "no lock key while CMD runs");
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "held", 5000, 0, &l), DLOCK_EBUSY);

    FILE *f = fopen(h_path("go"), "w");
    cr_assert_not_null(f);
    fclose(f);
    int st = h_wait_child(pid, 3000);
    cr_assert_eq(st, 0, "dlockctl exit status %d", st);
    H_KEY_GONE(h_key("held"));
    l = h_must_acquire(a, "held", 5000);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(dlockctl, taken_lock_exits_75_or_the_E_code)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "taken", 30000);
    const char *sock = H.agent[0].sock;
    char marker[300];
    snprintf(marker, sizeof marker, "touch %s", h_path("ran"));

    int st = h_ctl(5000, "-s", sock, "run", "-n", "taken", "--", "sh", "-c", marker, NULL);
    cr_assert_eq(st, 75, "-n on a taken lock: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "-n", "-E", "3", "taken", "--", "sh", "-c", marker, NULL);
    cr_assert_eq(st, 3, "-n -E 3 on a taken lock: exit %d", st);

    int64_t t0 = h_now_ms();
    st = h_ctl(5000, "-s", sock, "run", "-w", "300", "taken", "--", "sh", "-c", marker, NULL);
    int64_t el = h_now_ms() - t0;
    cr_assert_eq(st, 75, "-w 300 on a taken lock: exit %d", st);
    cr_assert_geq(el, 250, "gave up after %lld ms of a 300 ms wait", (long long)el);
    cr_assert(!exists(h_path("ran")), "CMD ran without the lock");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(dlockctl, waits_for_the_lock_by_default)
{
    h_start("retry_fallback_ms = 10000");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "queue", 30000);
    char script[300];
    snprintf(script, sizeof script, "echo ran > %s", h_path("ran"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "queue", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    cr_assert_eq(h_wait_child(pid, 400), -1, "dlockctl did not wait for the lock");
    cr_assert(!exists(h_path("ran")));
    cr_assert_eq(dlock_lease_release(l), 0);
    int st = h_wait_child(pid, 1500);
    cr_assert_eq(st, 0, "dlockctl exit %d after the release", st);
    cr_assert(exists(h_path("ran")));
}

ITEST(dlockctl, lease_lost_terminates_command_and_exits_79)
{
    h_start(NULL);
    char script[600];
    snprintf(script, sizeof script,
             "trap 'echo got-term > %s; exit 0' TERM; touch %s; " BOUNDED_WAIT, h_path("term"),
             h_path("started"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "-t", "600", "fragile", "--", "sh",
                          "-c", script,          NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    cr_assert_eq(h_redis_exists(h_key("fragile")), 1);

    h_redis_del(h_key("fragile"));
    int st = h_wait_child(pid, 3000);
    cr_assert_neq(st, -1, "dlockctl still running 3 s after its lease was lost");
    cr_assert_eq(st, 79, "dlockctl exit %d after the lease was lost", st);
    const char *term = h_read_file(h_path("term"));
    cr_assert_not_null(term, "CMD did not receive SIGTERM");
    cr_assert_str_eq(term, "got-term\n");
}

ITEST(dlockctl, sigterm_is_forwarded_and_lock_released)
{
    h_start(NULL);
    char script[300];
    snprintf(script, sizeof script, "touch %s; " BOUNDED_WAIT, h_path("started"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "fwd", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    cr_assert_eq(h_redis_exists(h_key("fwd")), 1);
    kill(pid, SIGTERM);
    int st = h_wait_child(pid, 3000);
    cr_assert_eq(st, 128 + SIGTERM, "dlockctl exit %d; CMD was killed by SIGTERM", st);
    H_KEY_GONE(h_key("fwd"));
}

ITEST(dlockctl, agent_unreachable_usage_and_exec_errors)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    int st = h_ctl(5000, "-s", h_path("no-agent.sock"), "run", "x", "--", "true", NULL);
    cr_assert_eq(st, 69, "no agent: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", NULL);
    cr_assert_eq(st, 64, "no name: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "x", NULL);
    cr_assert_eq(st, 64, "no command: exit %d", st);
    st = h_ctl(5000, "-s", sock, "frobnicate", NULL);
    cr_assert_eq(st, 64, "unknown command: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "-w", "soon", "x", "--", "true", NULL);
    cr_assert_eq(st, 64, "bad wait: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "a b", "--", "true", NULL);
    cr_assert_eq(st, 64, "bad lock name: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "x", "--", "/nonexistent/cmd", NULL);
    cr_assert_eq(st, 127, "missing command: exit %d", st);
    H_KEY_GONE(h_key("x"));
}

ITEST(dlockctl, agent_crash_while_command_runs_exits_79)
{
    h_start(NULL);
    char script[600];
    snprintf(script, sizeof script,
             "trap 'echo got-term > %s; exit 0' TERM; touch %s; " BOUNDED_WAIT, h_path("term"),
             h_path("started"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "crashy", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    h_agent_kill(0);
    int st = h_wait_child(pid, 3000);
    cr_assert_neq(st, -1, "dlockctl still running 3 s after the agent died");
    cr_assert_eq(st, 79, "dlockctl exit %d after the agent died", st);
    const char *term = h_read_file(h_path("term"));
    cr_assert_not_null(term, "CMD did not receive SIGTERM");
}
