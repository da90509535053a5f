/* SPDX-License-Identifier: BSD-3-Clause */
/* fairness.c -- a victim's renewal lateness with and without another uid's
 * flood, on an agent of its own with the default settings: the victim holds
 * a few leases and watches their lease pages; each time a deadline moves, the
 * renewal that moved it was sent late by its send time (read off the new
 * deadline) minus the time it was due (from the previous renewal's send
 * time, as the agent schedules it), and took the time until it showed in
 * the page to come back.
 * The flood comes from a forked process running as nobody (so the part needs
 * root): connections that each keep 1000 try-once acquires of fresh names in
 * flight, at a short TTL, for the whole window. */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define NOBODY        65534
#define FLOOD_DEPTH   1000
#define VICTIM_LEASES 8
#define MS            1000000ull

static uint64_t boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* When the agent sends the renewal after one sent at `sent` (its rule: a
 * third of the TTL, on 10 ms quanta of the clock, well before the deadline;
 * agent/core/table.c lease_next_renew, at the default renew_fraction). */
static uint64_t renew_due(uint64_t sent, uint32_t ttl_ms)
{
    uint64_t period = (uint64_t)ttl_ms * MS / 3, quantum = 10 * MS;
    if (quantum > period / 4)
        quantum = period / 4 ? period / 4 : 1;
    uint64_t limit = sent + (uint64_t)ttl_ms * MS - ((uint64_t)ttl_ms * MS / 100 + 2 * MS);
    uint64_t due = sent + period;
    if (due + quantum >= limit)
        due = sent + (limit - sent) / 2;
    return due - due % quantum;
}

/* The send time behind a deadline: deadline = send + TTL - drift. */
static uint64_t sent_of(int64_t deadline, uint32_t ttl_ms)
{
    return (uint64_t)deadline - (uint64_t)ttl_ms * MS + ((uint64_t)ttl_ms * MS / 100 + 2 * MS);
}

/* ---- the flood (a child process) ---- */

struct flooder {
    dlock_client *c;
    int conn, in_flight;
    long next, granted, refused, other;
    uint32_t ttl_ms;
};

static void on_flood(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct flooder *f = arg;
    f->in_flight--;
    if (status == 0)
        f->granted++; /* held until the process ends */
    else if (status == DLOCK_ELIMIT)
        f->refused++;
    else
        f->other++;
}

static void flood_fill(struct flooder *f)
{
    while (f->in_flight < FLOOD_DEPTH) {
        char name[48];
        snprintf(name, sizeof name, "flood-%d-%ld", f->conn, f->next++);
        dlock_acquire_options o = {.ttl_ms = f->ttl_ms, .wait_ms = 0};
        if (dlock_lease_acquire_async(f->c, name, &o, on_flood, f) != 0)
            return;
        f->in_flight++;
    }
}

/* Floods as nobody for `seconds`, then writes "GRANTED REFUSED OTHER" to fd
 * and exits. */
static void flood(const char *sock, int conns, uint32_t ttl_ms, double seconds, int fd)
{
    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
        _exit(100);
    struct flooder *f = calloc((size_t)conns, sizeof *f);
    struct pollfd *p = calloc((size_t)conns, sizeof *p);
    if (!f || !p)
        _exit(101);
    for (int i = 0; i < conns; i++) {
        f[i] = (struct flooder){.conn = i, .ttl_ms = ttl_ms};
        if (dlock_client_open(&f[i].c, sock) != 0)
            _exit(102);
        flood_fill(&f[i]);
        p[i] = (struct pollfd){.fd = dlock_client_fd(f[i].c), .events = POLLIN};
    }
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
    while (now_ns() < end) {
        if (poll(p, (nfds_t)conns, 10) <= 0)
            continue;
        for (int i = 0; i < conns; i++) {
            if (p[i].revents && dlock_client_dispatch(f[i].c) != 0)
                p[i].fd = -1;
            flood_fill(&f[i]);
        }
    }
    long g = 0, r = 0, o = 0;
    for (int i = 0; i < conns; i++)
        g += f[i].granted, r += f[i].refused, o += f[i].other;
    dprintf(fd, "%ld %ld %ld", g, r, o);
    _exit(0);
}

/* ---- the victim ---- */

/* Watches the leases' pages for `seconds` (every 1 ms): for each renewal,
 * how late the agent sent it (its send time, read off the new deadline, less
 * its due time) goes to late, and how long it then took to show in the page
 * to shown. */
static void watch(dlock_client *c, dlock_lease **le, int n, uint32_t ttl_ms, double seconds,
                  struct lat *late, struct lat *shown, struct fairness_run *run)
{
    int64_t last[VICTIM_LEASES];
    for (int i = 0; i < n; i++)
        last[i] = dlock_lease_deadline_ns(le[i]);
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
    while (now_ns() < end) {
        sleep_ms(1);
        dlock_client_dispatch(c);
        uint64_t seen = boot_ns();
        for (int i = 0; i < n; i++) {
            int64_t d = dlock_lease_deadline_ns(le[i]);
            if (d == last[i] || d <= 0)
                continue;
            uint64_t due = renew_due(sent_of(last[i], ttl_ms), ttl_ms), sent = sent_of(d, ttl_ms);
            lat_push(late, sent > due ? sent - due : 0);
            lat_push(shown, seen > sent ? seen - sent : 0);
            last[i] = d;
        }
    }
    for (int i = 0; i < n; i++) {
        dlock_state s = dlock_lease_state(le[i]);
        run->lost += s == DLOCK_STATE_LOST;
        run->held += s == DLOCK_STATE_HELD;
    }
}

static void on_event(dlock_client *c, dlock_lease *lease, dlock_state state, int reason, void *arg)
{
    struct fairness_run *run = arg;
    run->jeopardy += state == DLOCK_STATE_JEOPARDY;
}

/* One window: the victim's leases, with a flood of `conns` connections (0:
 * none) beside them. */
static int one_run(const char *sock, uint32_t victim_ttl, int conns, uint32_t flood_ttl,
                   double seconds, struct fairness_run *run)
{
    memset(run, 0, sizeof *run);
    run->victim_ttl_ms = victim_ttl;
    run->flood_conns = conns;
    run->flood_ttl_ms = flood_ttl;
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, sock);
    if (rc != 0) {
        fprintf(stderr, "dlock-bench: fairness: %s\n", dlock_strerror(rc));
        return -1;
    }
    dlock_client_set_event_cb(c, on_event, run);
    dlock_lease *le[VICTIM_LEASES];
    for (int i = 0; i < VICTIM_LEASES; i++) {
        char name[32];
        snprintf(name, sizeof name, "victim-%d", i);
        dlock_acquire_options o = {.ttl_ms = victim_ttl, .wait_ms = 0};
        if ((rc = dlock_lease_acquire(c, name, &o, &le[i])) != 0) {
            fprintf(stderr, "dlock-bench: fairness: victim: %s\n", dlock_strerror(rc));
            dlock_client_close(c);
            return -1;
        }
    }
    int out[2] = {-1, -1};
    pid_t pid = 0;
    if (conns) {
        fflush(NULL);
        if (pipe(out) != 0 || (pid = fork()) < 0) {
            fprintf(stderr, "dlock-bench: fairness: %s\n", strerror(errno));
            dlock_client_close(c); /* the leases go with it */
            return -1;
        }
        if (pid == 0) {
            close(out[0]);
            flood(sock, conns, flood_ttl, seconds, out[1]);
        }
        close(out[1]);
        side_track_worker(0, pid);
    }
    struct lat late = {0}, shown = {0};
    watch(c, le, VICTIM_LEASES, victim_ttl, seconds, &late, &shown, run);
    if (pid > 0) {
        char buf[96] = "";
        int st = 0;
        waitpid(pid, &st, 0);
        side_track_worker(0, 0);
        ssize_t got = read(out[0], buf, sizeof buf - 1);
        close(out[0]);
        if (got <= 0 || sscanf(buf, "%ld %ld %ld", &run->granted, &run->refused, &run->other) != 3)
            fprintf(stderr, "dlock-bench: fairness: the flood failed (status %d)\n", st);
    }
    run->renewals = (long)late.n;
    lat_summarise(&late, seconds, &run->late);
    lat_summarise(&shown, seconds, &run->shown);
    lat_free(&late);
    lat_free(&shown);
    for (int i = 0; i < VICTIM_LEASES; i++)
        dlock_lease_release(le[i]);
    dlock_client_close(c);
    return 0;
}

int run_fairness(struct env *e, double seconds, struct fairness_result *out)
{
    memset(out, 0, sizeof *out);
    if (geteuid() != 0) {
        out->skipped = "needs root, to run the flood under a second uid";
        return 0;
    }
    /* The flood must reach the agent as nobody. */
    if (chmod(e->dir, 0755) != 0) {
        fprintf(stderr, "dlock-bench: chmod %s: %s\n", e->dir, strerror(errno));
        return -1;
    }
    struct side_agent a = {.tag = "fair", .settings = "socket_mode = 0666\n"};
    int rc = side_start(e, &a, 1);
    /* The review's two attacks: 16 x 1000 at TTL 100 ms against a 2 s
     * lease, 8 x 1000 at TTL 300 ms against a 300 ms lease; each beside the
     * same victim alone. */
    static const struct {
        uint32_t victim_ttl;
        int conns;
        uint32_t flood_ttl;
    } plan[FAIRNESS_RUNS] = {{2000, 0, 0}, {2000, 16, 100}, {300, 0, 0}, {300, 8, 300}};
    for (int i = 0; rc == 0 && i < FAIRNESS_RUNS; i++)
        rc = one_run(a.sock, plan[i].victim_ttl, plan[i].conns, plan[i].flood_ttl, seconds,
                     &out->run[i]);
    side_stop(e, &a, 1);
    return rc;
}
