/* SPDX-License-Identifier: BSD-3-Clause */
/* test_fairness.c -- no uid can make another uid's lease lost: with the
 * default settings, a second uid floods the agent with short leases (16
 * connections, 1000 acquires in flight on each, as fast as it is answered)
 * while a lease of the test's uid is watched through several renewals. The
 * flood runs into its uid's renewal budget (DLOCK_ELIMIT), and the victim
 * stays HELD, renewed on time. The second uid comes from a forked child that
 * drops to nobody, so the test needs root. */
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY      65534
#define FLOOD_CONNS 16
#define FLOOD_DEPTH 1000

struct flood {
    dlock_client *c;
    int conn, next, in_flight;
    long granted, refused, other;
};

static void on_flood(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct flood *f = arg;
    f->in_flight--;
    if (status == 0)
        f->granted++; /* held until the child exits */
    else if (status == DLOCK_ELIMIT)
        f->refused++;
    else
        f->other++;
}

/* Keeps FLOOD_DEPTH acquires of fresh names (TTL 100 ms, try once) in flight. */
static void flood_send(struct flood *f)
{
    while (f->in_flight < FLOOD_DEPTH) {
        char name[48];
        snprintf(name, sizeof name, "flood-%d-%d", f->conn, f->next++);
        dlock_acquire_options o = {.ttl_ms = 100, .wait_ms = 0};
        if (dlock_lease_acquire_async(f->c, name, &o, on_flood, f) != 0)
            return;
        f->in_flight++;
    }
}

/* The child: floods as nobody until the file stop_path appears, then writes
 * "GRANTED REFUSED OTHER" to out_path and exits 0 (1: no connection, 2: no
 * report). (A forked child keeps no descriptor of the test's.) */
static void flood_as_nobody(const char *stop_path, const char *out_path)
{
    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
        _exit(100);
    static struct flood f[FLOOD_CONNS];
    struct pollfd p[FLOOD_CONNS];
    for (int i = 0; i < FLOOD_CONNS; i++) {
        f[i].conn = i;
        if (dlock_client_open(&f[i].c, H.agent[0].sock) != 0)
            _exit(1);
        flood_send(&f[i]);
        p[i] = (struct pollfd){.fd = dlock_client_fd(f[i].c), .events = POLLIN};
    }
    while (access(stop_path, F_OK) != 0) {
        if (poll(p, FLOOD_CONNS, 10) <= 0)
            continue;
        for (int i = 0; i < FLOOD_CONNS; i++) {
            if (p[i].revents)
                dlock_client_dispatch(f[i].c);
            flood_send(&f[i]); /* the answered ones go again at once */
        }
    }
    long g = 0, r = 0, o = 0;
    for (int i = 0; i < FLOOD_CONNS; i++)
        g += f[i].granted, r += f[i].refused, o += f[i].other;
    FILE *out = fopen(out_path, "w");
    if (!out || fprintf(out, "%ld %ld %ld", g, r, o) < 0 || fclose(out) != 0)
        _exit(2);
    _exit(0);
}

ITEST(fairness, a_flood_of_short_leases_from_one_uid_leaves_another_uids_lease_held)
{
    if (geteuid() != 0)
        h_skip("needs root to run a client under a second uid");
    h_start("socket_mode = 0666\nlog_level = info");
    cr_assert_eq(chmod(H.dir, 0755), 0);
    struct h_cl *v = h_client();
    dlock_lease *victim = h_must_acquire(v, "victim", 2000);
    int64_t first = dlock_lease_deadline_ns(victim);
    char stop[H_PATH], out[H_PATH];
    snprintf(stop, sizeof stop, "%s/flood.stop", H.dir);
    snprintf(out, sizeof out, "%s/flood.out", H.dir);
    /* Written by nobody, in a directory of root's. */
    FILE *o = fopen(out, "w");
    cr_assert_not_null(o);
    fclose(o);
    cr_assert_eq(chmod(out, 0666), 0);
    pid_t pid = h_fork();
    if (pid == 0)
        flood_as_nobody(stop, out);
    /* Six renewals of the victim (every ~660 ms) under the flood. */
    int64_t until = first + 4000 * 1000000ll;
    H_WAIT_UNTIL(30000, (h_pump(v, 10), dlock_lease_deadline_ns(victim) >= until ||
                                            h_events(v, victim, DLOCK_STATE_LOST) > 0));
    FILE *s = fopen(stop, "w");
    cr_assert_not_null(s);
    fclose(s);
    int st = h_wait_child(pid, 30000);
    cr_assert_eq(st, 0, "the flooding child failed (status %d)", st);
    const char *counts = h_read_file(out);
    cr_assert_not_null(counts, "the flood reported nothing");
    long granted = 0, refused = 0, other = 0;
    cr_assert_eq(sscanf(counts, "%ld %ld %ld", &granted, &refused, &other), 3);
    cr_log_info("flood: %ld granted, %ld refused (DLOCK_ELIMIT), %ld other", granted, refused,
                other);
    cr_assert_eq(h_events(v, victim, DLOCK_STATE_LOST), 0, "the victim's lease was lost");
    cr_assert_eq(dlock_lease_state(victim), DLOCK_STATE_HELD);
    cr_assert(dlock_lease_valid(victim));
    /* The budget is what held the flood back: at most 60 leases of 100 ms. */
    cr_assert_gt(refused, 0, "the flood was never refused");
    cr_assert_gt(granted, 0, "the flood got nothing at all");
    cr_assert_eq(dlock_lease_release(victim), 0);
}
