/* SPDX-License-Identifier: BSD-3-Clause */
/* test_force.c -- an operator's forced release (dlockctl release --force
 * NAME, the status socket's "release-force NAME"): the [policy] force lines
 * that allow it, the key deleted whoever holds it, the holder through this
 * agent told LOST at once, a holder through another agent at its next
 * renewal, and the answers for a name not held and a refused asker. A
 * second uid comes from a forked child that drops to "nobody" (65534), so
 * that test needs root. */
#include <grp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

static const char *status_path(int agent)
{
    return h_keepf("%s/status%d.sock", H.dir, agent);
}

/* dlockctl release --force name through agent 0; its exit status. */
static int force(const char *name)
{
    return h_ctl(10000, "-S", status_path(0), "release", "--force", name, NULL);
}

static const char *ctl_out(void)
{
    const char *out = h_read_file(h_path("ctl.out"));
    return out ? out : "";
}

static bool log_has(int agent, const char *text)
{
    const char *log = h_read_file(H.agent[agent].log);
    return log && strstr(log, text);
}

/* Whether cl was told that lease l is lost, pumping its events meanwhile. */
static bool told_lost(struct h_cl *cl, dlock_lease *l)
{
    h_pump(cl, 20);
    return h_events(cl, l, DLOCK_STATE_LOST) > 0;
}

ITEST(force, a_local_holder_is_told_lost_and_another_client_takes_the_name)
{
    h_start("[policy]\nforce = 0 job-*\n");
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *l = h_must_acquire(a, "job-1", 30000);
    /* A waiter of the same agent gets the name once it is forced free. */
    struct h_acq w;
    h_acquire_async(b, "job-1", 30000, 60000, &w);
    cr_assert_eq(force("job-1"), 0, "dlockctl: %s", ctl_out());
    cr_assert(strstr(ctl_out(), "released job-1: held by pid"), "answer: %s", ctl_out());
    H_WAIT_UNTIL(H_EVENT_MS, told_lost(a, l));
    H_WAIT_UNTIL(H_EVENT_MS, (h_pump(b, 20), w.done));
    cr_assert_eq(w.status, 0, "the waiter got %d", w.status);
    cr_assert_eq(h_metric(0, "dlock_forced_releases_total"), 1);
    cr_assert(log_has(0, "forced release of job-1 by uid 0 (pid "), "not logged");
    cr_assert(log_has(0, "the lease of pid "), "the lost lease is not logged");
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(force, a_holder_through_another_agent_loses_the_name_to_this_one)
{
    h_start_two("[policy]\nforce = 0 job-*\n");
    struct h_cl *far = h_client_at(1), *near = h_client_at(0);
    /* A short TTL: the far holder renews (and finds its key gone) soon. */
    dlock_lease *l = h_must_acquire(far, "job-2", 2000);
    struct h_acq w;
    h_acquire_async(near, "job-2", 30000, 60000, &w);
    cr_assert_eq(force("job-2"), 0, "dlockctl: %s", ctl_out());
    H_WAIT_UNTIL(H_EVENT_MS, (h_pump(near, 20), w.done));
    cr_assert_eq(w.status, 0, "the waiter through agent 0 got %d", w.status);
    H_WAIT_UNTIL(H_EVENT_MS, told_lost(far, l));
    cr_assert_eq(h_metric(0, "dlock_forced_releases_total"), 1);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(force, a_shared_name_loses_every_reader)
{
    h_start("[policy]\nforce = 0 *\n");
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lock_spec shared = {.kind = DLOCK_KIND_SHARED};
    dlock_acquire_options o = {.ttl_ms = 30000, .wait_ms = 5000};
    struct h_acq r1, r2;
    h_acquire_spec_async(a, "rw", &o, &shared, &r1);
    h_acquire_spec_async(b, "rw", &o, &shared, &r2);
    H_WAIT_UNTIL(H_EVENT_MS,
                 (h_pump_all(20), h_acq_done(&r1, 1, NULL) && h_acq_done(&r2, 1, NULL)));
    cr_assert_eq(r1.status, 0);
    cr_assert_eq(r2.status, 0);
    cr_assert_eq(force("rw"), 0, "dlockctl: %s", ctl_out());
    H_WAIT_UNTIL(H_EVENT_MS, told_lost(a, r1.lease) && told_lost(b, r2.lease));
    cr_assert_eq(h_redis_exists(h_key("rw")), 0, "the shared key is still there");
}

ITEST(force, a_name_not_held_answers_not_held_with_exit_1)
{
    h_start("[policy]\nforce = 0 *\n");
    cr_assert_eq(force("nobody-holds-this"), 1, "dlockctl: %s", ctl_out());
    cr_assert(strstr(ctl_out(), "not held: nobody-holds-this"), "answer: %s", ctl_out());
    cr_assert_eq(h_metric(0, "dlock_forced_releases_total"), 0);
}

ITEST(force, refused_without_a_force_line_with_exit_77)
{
    h_start("");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "job-3", 30000);
    cr_assert_eq(force("job-3"), 77, "dlockctl: %s", ctl_out());
    cr_assert(strstr(ctl_out(), "no [policy] force line"), "answer: %s", ctl_out());
    /* The lease is untouched. */
    cr_assert(h_is_token(h_redis_get(h_key("job-3"))) || h_redis_exists(h_key("job-3")));
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(force, refused_for_a_pattern_that_does_not_match)
{
    h_start("[policy]\nforce = 0 other-*\n");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "job-4", 30000);
    cr_assert_eq(force("job-4"), 77, "dlockctl: %s", ctl_out());
    cr_assert_eq(h_redis_exists(h_key("job-4")), 1);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(force, refused_for_a_uid_that_does_not_match)
{
    if (geteuid() != 0)
        h_skip("needs root to ask under a second uid");
    h_start("status_socket_mode = 0666\n[policy]\nforce = 0 *\n");
    cr_assert_eq(chmod(H.dir, 0755), 0); /* nobody reaches the status socket */
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "job-5", 30000);
    pid_t pid = h_fork();
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) != 0)
            _exit(100);
        const char *out = h_status_ask(0, "release-force job-5\n");
        if (!out)
            _exit(101);
        _exit(strncmp(out, "error: release --force: permission denied", 41) == 0 ? 0 : 102);
    }
    cr_assert_eq(h_wait_child(pid, 10000), 0, "nobody was not refused");
    /* dlockctl as nobody: exit 77. */
    const char *status = status_path(0);
    pid = h_fork();
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) != 0)
            _exit(100);
        execl(DLOCKCTL_PATH, "dlockctl", "-S", status, "release", "--force", "job-5", (char *)NULL);
        _exit(101);
    }
    cr_assert_eq(h_wait_child(pid, 10000), 77, "dlockctl as nobody did not exit 77");
    cr_assert_eq(h_redis_exists(h_key("job-5")), 1, "the key went all the same");
    cr_assert(log_has(0, "forced release of job-5 refused to uid 65534"), "not logged");
    h_pump(a, 50);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(force, quorum_mode_deletes_the_key_on_every_node)
{
    h_quorum_start(3, 1, "[policy]\nforce = 0 *\n", NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "qjob", 2000);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(h_node_exists(i, h_key("qjob")), 1, "node %d lacks the key", i);
    cr_assert_eq(force("qjob"), 0, "dlockctl: %s", ctl_out());
    cr_assert(strstr(ctl_out(), "released qjob: held by pid"), "answer: %s", ctl_out());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(h_node_exists(i, h_key("qjob")), 0, "node %d keeps the key", i);
    H_WAIT_UNTIL(H_EVENT_MS, told_lost(a, l));
    /* A node down: the other two, a majority, delete it. */
    l = h_must_acquire(a, "qjob2", 2000);
    h_node_stop(2);
    cr_assert_eq(force("qjob2"), 0, "dlockctl: %s", ctl_out());
    cr_assert_eq(h_node_exists(0, h_key("qjob2")), 0);
    cr_assert_eq(h_node_exists(1, h_key("qjob2")), 0);
    H_WAIT_UNTIL(H_EVENT_MS, told_lost(a, l));
    cr_assert_eq(h_metric(0, "dlock_forced_releases_total"), 2);
}
