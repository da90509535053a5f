/* SPDX-License-Identifier: BSD-3-Clause */
/* test_policy.c -- the access policy: lock names by uid/gid, what the status
 * socket shows to whom, per-uid limits, and SIGHUP applying a changed policy
 * while leases keep being renewed. A second uid comes from a forked child
 * that drops to "nobody" (65534), so those tests need root. */
#include <grp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

static void need_root(void)
{
    if (geteuid() != 0)
        h_skip("needs root to run a client under a second uid");
}

/* The agent's sockets must be reachable by nobody. */
static const char *open_ini(const char *policy)
{
    static char ini[1024];
    snprintf(ini, sizeof ini, "socket_mode = 0666\n[policy]\n%s", policy);
    return ini;
}

static const char *status_path(void)
{
    static char path[H_PATH];
    snprintf(path, sizeof path, "%s/status0.sock", H.dir);
    return path;
}

static void become_nobody(void)
{
    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
        _exit(100);
}

/* As nobody: acquire name (try-once) and release it. Returns the acquire's
 * result (0 or a DLOCK_E* code). */
static int acquire_as_nobody(const char *name)
{
    pid_t pid = h_fork();
    if (pid == 0) {
        become_nobody();
        dlock_client *c = NULL;
        int rc = dlock_client_open(&c, H.agent[0].sock);
        if (rc != 0)
            _exit(101);
        dlock_lease *l = NULL;
        dlock_acquire_options o = {.wait_ms = 0};
        rc = dlock_lease_acquire(c, name, &o, &l);
        if (rc == 0)
            dlock_lease_release(l);
        dlock_client_close(c);
        _exit(-rc);
    }
    int st = h_wait_child(pid, 5000);
    cr_assert(st >= 0 && st < 100, "nobody's client failed (status %d)", st);
    return -st;
}

/* As nobody: does status-json show name? 1 yes, 0 no. */
static int nobody_sees(const char *name)
{
    pid_t pid = h_fork();
    if (pid == 0) {
        become_nobody();
        const char *out = h_status_ask(0, "status-json\n");
        if (!out || !strstr(out, "\"leases\":["))
            _exit(102);
        char needle[256];
        snprintf(needle, sizeof needle, "\"name\":\"%s\"", name);
        _exit(strstr(out, needle) ? 1 : 0);
    }
    int st = h_wait_child(pid, 5000);
    cr_assert(st == 0 || st == 1, "nobody's status query failed (status %d)", st);
    return st;
}

static void open_dir(void)
{
    cr_assert_eq(chmod(H.dir, 0755), 0);
    cr_assert_eq(chmod(status_path(), 0666), 0);
}

static bool log_has(const char *text)
{
    const char *log = h_read_file(H.agent[0].log);
    return log && strstr(log, text);
}

ITEST(policy, other_uid_denied_counted_logged_and_blind)
{
    need_root();
    h_start(open_ini("allow = 0 *\nsee_all = 0\n"));
    open_dir();
    struct h_cl *root = h_client();
    dlock_lease *l = h_must_acquire(root, "root-secret", 30000);
    cr_assert_eq(acquire_as_nobody("anything"), DLOCK_EDENIED);
    cr_assert_eq(h_metric(0, "dlock_denied_total"), 1);
    cr_assert(log_has("denied: pid") && log_has("uid 65534"), "not logged");
    /* Root sees the lease on the status socket; nobody does not. */
    cr_assert_not_null(strstr(h_status_ask(0, "status-json\n"), "\"name\":\"root-secret\""));
    cr_assert_eq(nobody_sees("root-secret"), 0, "nobody learnt root's lock name");
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(policy, group_rules_and_patterns)
{
    need_root();
    h_start(open_ini("allow = @65534 shared-* tmp-?\nallow = 0 *\n"));
    open_dir();
    /* nobody's primary group is 65534 (nogroup): its rule applies. */
    cr_assert_eq(acquire_as_nobody("shared-x"), 0);
    cr_assert_eq(acquire_as_nobody("tmp-1"), 0);
    cr_assert_eq(acquire_as_nobody("tmp-12"), DLOCK_EDENIED);
    cr_assert_eq(acquire_as_nobody("private"), DLOCK_EDENIED);
    /* Without see_all, everyone who can open the status socket sees all. */
    struct h_cl *root = h_client();
    dlock_lease *l = h_must_acquire(root, "visible", 30000);
    cr_assert_eq(nobody_sees("visible"), 1);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(policy, sighup_applies_a_changed_policy_and_keeps_leases)
{
    need_root();
    h_start(open_ini("allow = 0 *\n"));
    open_dir();
    struct h_cl *root = h_client();
    dlock_lease *l = h_must_acquire(root, "kept", 1500);
    cr_assert_eq(acquire_as_nobody("pub-1"), DLOCK_EDENIED);

    h_agent_config(0, open_ini("allow = 0 *\nallow = nobody pub-*\n"), NULL);
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    H_WAIT_UNTIL(3000, log_has("reloaded: 2 policy rule(s)"));
    cr_assert_eq(acquire_as_nobody("pub-1"), 0);
    cr_assert_eq(acquire_as_nobody("priv"), DLOCK_EDENIED);
    /* The lease (TTL 1500 ms) lives on through the reload: it is renewed. */
    H_HOLDS_FOR(3000, dlock_lease_valid(l));
    cr_assert_eq(h_events(root, l, DLOCK_STATE_LOST), 0);
    cr_assert_eq(dlock_lease_release(l), 0);

    /* A policy that does not parse leaves the old one in force. */
    h_agent_config(0, open_ini("allow = no-such-user-here x\n"), NULL);
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    H_WAIT_UNTIL(3000, log_has("not reloaded"));
    cr_assert_eq(acquire_as_nobody("pub-2"), 0);
}

ITEST(policy, per_uid_limits)
{
    h_start("[policy]\nmax_leases_per_uid = 2\nmax_waiters_per_uid = 1\n"
            "max_connections_per_uid = 3\n");
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *l1 = h_must_acquire(a, "u1", 30000);
    /* A waiter counts as a lease to come. */
    struct h_acq w;
    h_acquire_async(b, "u1", 30000, 10000, &w);
    H_WAIT_UNTIL(H_EVENT_MS, strstr(h_status_ask(0, "leases-json u1\n"), "\"waiters\":1"));
    dlock_lease *l2 = NULL;
    cr_assert_eq(h_acquire(a, "u2", 30000, 0, &l2), DLOCK_ELIMIT);
    cr_assert_eq(h_metric(0, "dlock_refused_total"), 1);
    /* Connections: a, b and one more; a fourth is turned away. */
    dlock_client *c3 = NULL, *c4 = NULL;
    cr_assert_eq(h_client_try_open(0, &c3), 0);
    cr_assert_neq(h_client_try_open(0, &c4), 0, "a fourth connection of one uid was served");
    dlock_client_close(c3);
    cr_assert_eq(dlock_lease_release(l1), 0);
    H_WAIT_UNTIL(3000, w.done);
    cr_assert_eq(w.status, 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* The agent's message with the last refusal on cl, through the library. */
static const char *limit_message(const struct h_cl *cl)
{
    return dlock_client_strerror(cl->c, DLOCK_ELIMIT);
}

/* The agent's message for a per-uid limit of ours; kind: lease or waiter. */
static const char *uid_limit(const char *kind, unsigned limit)
{
    static char text[128];
    snprintf(text, sizeof text, "per-uid %s limit (%u) reached for uid %u", kind, limit,
             (unsigned)geteuid());
    return text;
}

ITEST(policy, limit_errors_name_the_limit_hit)
{
    h_start("max_leases_per_conn = 2\nmax_waiters_per_conn = 1\n"
            "[policy]\nmax_leases_per_uid = 3\nmax_waiters_per_uid = 1\n");
    struct h_cl *h = h_client(), *a = h_client(), *b = h_client();
    dlock_lease *h1 = h_must_acquire(h, "h1", 30000), *h2 = h_must_acquire(h, "h2", 30000);
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(h, "h3", 30000, 0, &l), DLOCK_ELIMIT);
    cr_assert_str_eq(limit_message(h), "per-connection lease limit (2) reached");
    /* a waits for h1: the uid has 3 leases and waiters, 1 of them waiting. */
    struct h_acq w;
    h_acquire_async(a, "h1", 30000, 20000, &w);
    H_WAIT_UNTIL(H_EVENT_MS, strstr(h_status_ask(0, "leases-json h1\n"), "\"waiters\":1"));
    cr_assert_eq(h_acquire(a, "a2", 30000, 0, &l), DLOCK_ELIMIT);
    cr_assert_str_eq(limit_message(a), "per-connection waiter limit (1) reached");
    cr_assert_eq(h_acquire(b, "b1", 30000, 0, &l), DLOCK_ELIMIT);
    cr_assert_str_eq(limit_message(b), uid_limit("lease", 3));
    /* Waits for the agent: b's acquire below, through another connection,
     * must find the lease given up. */
    cr_assert_eq(dlock_lease_release_sync(h2), 0);
    cr_assert_eq(h_acquire(b, "b1", 30000, 0, &l), DLOCK_ELIMIT);
    cr_assert_str_eq(limit_message(b), uid_limit("waiter", 1));
    /* The agent's words are for the code it sent; other codes read as ever. */
    cr_assert_str_eq(dlock_client_strerror(b->c, DLOCK_EBUSY), dlock_strerror(DLOCK_EBUSY));
    cr_assert_eq(dlock_lease_release(h1), 0);
    H_WAIT_UNTIL(3000, w.done);
    cr_assert_eq(w.status, 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    /* A later request that succeeds leaves no stale message behind. */
    l = h_must_acquire(b, "b2", 30000);
    cr_assert_str_eq(limit_message(b), dlock_strerror(DLOCK_ELIMIT));
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(policy, dlockctl_run_exits_73_on_a_limit_and_names_it)
{
    h_start("[policy]\nmax_leases_per_uid = 1\n");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "first", 30000);
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "-n", "second", "--", "true", NULL);
    cr_assert_eq(st, 73, "dlockctl run exit status %d", st);
    const char *out = h_read_file(h_path("ctl.out"));
    char want[200];
    snprintf(want, sizeof want, "dlockctl: cannot lock second: %s", uid_limit("lease", 1));
    cr_assert(out && strstr(out, want), "stderr '%s' lacks '%s'", out ? out : "", want);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(policy, dlockctl_run_exits_77_when_denied)
{
    /* Root may take only the harness' probe lock here. */
    h_start("[policy]\nallow = 0 __harness_probe__\nallow = 65534 *\n");
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "-n", "job", "--", "true", NULL);
    cr_assert_eq(st, 77, "dlockctl run exit status %d", st);
    cr_assert_eq(h_metric(0, "dlock_denied_total"), 1);
}

ITEST(policy, status_socket_belongs_to_its_group)
{
    need_root();
    h_start("status_socket_group = 65534\n");
    struct stat st;
    cr_assert_eq(stat(status_path(), &st), 0);
    cr_assert_eq(st.st_gid, 65534u, "status socket group %u", (unsigned)st.st_gid);
    cr_assert_eq(st.st_mode & 0777, 0660);
}

ITEST(policy, sighup_fails_waiters_no_longer_allowed)
{
    /* A waiter queued under the old policy does not keep a right the new
     * one took away: it fails with DLOCK_EDENIED at the reload. */
    need_root();
    h_start(open_ini("allow = 0 *\nallow = nobody pub-*\n"));
    open_dir();
    struct h_cl *root = h_client();
    dlock_lease *l = h_must_acquire(root, "pub-w", 30000);
    pid_t pid = h_fork();
    if (pid == 0) {
        become_nobody();
        dlock_client *c = NULL;
        if (dlock_client_open(&c, H.agent[0].sock) != 0)
            _exit(101);
        dlock_lease *wl = NULL;
        dlock_acquire_options o = {.wait_ms = 20000};
        _exit(-dlock_lease_acquire(c, "pub-w", &o, &wl));
    }
    H_WAIT_UNTIL(3000, strstr(h_status_ask(0, "leases-json pub-w\n"), "\"waiters\":1"));
    h_agent_config(0, open_ini("allow = 0 *\n"), NULL);
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    cr_assert_eq(h_wait_child(pid, 5000), -DLOCK_EDENIED, "the waiter was not failed");
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_release(l), 0);
}
