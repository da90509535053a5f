/* SPDX-License-Identifier: BSD-3-Clause */
/* stall.c -- dlock-stall: how long the agent's loop stalls while peers list
 * its leases on the status socket. It holds many leases, then a probe client
 * does a try-once acquire and a synchronous release of its own name about
 * every millisecond and records each round trip, first with no status peer,
 * then beside slow readers (each asks leases-json and reads 1 KiB every
 * 10 ms), then beside one reader that reads as fast as it can. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define HOLDERS        4   /* clients the leases are spread over */
#define INFLIGHT       256 /* asynchronous acquires in flight per client */
#define LEASE_TTL_MS   600000
#define ACQUIRE_LIMIT  900  /* seconds before acquiring counts as stuck */
#define MAX_READERS    16   /* the agent serves 16 status queries at once */
#define SLOW_CHUNK     1024 /* a slow reader's read, every SLOW_EVERY_MS */
#define SLOW_EVERY_MS  10
#define PROBE_EVERY_US 1000
#define SAMPLE_MS      100 /* the agent's RSS and CPU */
#define CATCH_UP_S     600 /* after a phase, for the agent to answer the probe again */

const char *bench_handoff_setting = ""; /* env.c's */

struct opts {
    long leases;
    double seconds;
    int readers;
    const char *dlockd;
    bool keep;
};

static struct env the_env;

/* ---- the children ---- */

static void on_signal(int sig)
{
    if (the_env.agent_pid > 0)
        kill(the_env.agent_pid, SIGKILL);
    if (the_env.redis.pid > 0)
        kill(the_env.redis.pid, SIGKILL);
    _exit(128 + sig);
}

/* The agent's settings: leases enough for one uid and connection, a TTL
 * that needs no renewal during the run, and a status socket. A setting the
 * agent does not know (an older agent) is left out. */
static int write_conf(const struct env *e, const char *dlockd, const char *status_sock)
{
    const char *optional = "renew_budget_per_uid = 0\n";
    for (int attempt = 0; attempt < 2; attempt++) {
        FILE *f = fopen(e->conf, "w");
        if (!f)
            return -1;
        fprintf(f,
                "[agent]\nmax_leases_per_conn = 1000000\nmax_ttl_ms = %d\nlog_level = warn\n"
                "status_socket = %s\n[policy]\nmax_leases_per_uid = 100000000\n%s",
                LEASE_TTL_MS, status_sock, attempt == 0 ? optional : "");
        if (fclose(f) != 0)
            return -1;
        char cmd[3 * BENCH_PATH];
        snprintf(cmd, sizeof cmd, "%s -n -c %s >/dev/null 2>&1", dlockd, e->conf);
        if (system(cmd) == 0)
            return 0;
    }
    fprintf(stderr, "dlock-stall: %s -n refuses %s\n", dlockd, e->conf);
    return -1;
}

static int start(struct env *e, const struct opts *o, char *status_sock, size_t len)
{
    snprintf(e->dir, sizeof e->dir, "/tmp/dlock-stall.XXXXXX");
    if (!mkdtemp(e->dir)) {
        e->dir[0] = '\0';
        return -1;
    }
    e->keep = o->keep;
    env_set_paths(e);
    snprintf(status_sock, len, "%s/status.sock", e->dir);
    if (write_conf(e, o->dlockd, status_sock) != 0)
        return -1;
    if (env_start_redis(e) != 0)
        return -1;
    return env_start_agent(e, o->dlockd);
}

/* ---- the leases ---- */

struct holder {
    int index;
    dlock_client *c;
    long want, issued, inflight, held, errors;
    int first_error;
};

static void on_acquired(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct holder *h = arg;
    h->inflight--;
    if (status == 0)
        h->held++;
    else if (h->errors++ == 0)
        h->first_error = status;
}

static void holder_fill(struct holder *h)
{
    dlock_acquire_options o = {.ttl_ms = LEASE_TTL_MS, .wait_ms = DLOCK_WAIT_NONE};
    char name[64];
    while (h->inflight < INFLIGHT && h->issued < h->want) {
        snprintf(name, sizeof name, "stall-%d-%07ld", h->index, h->issued++);
        int rc = dlock_lease_acquire_async(h->c, name, &o, on_acquired, h);
        if (rc == 0)
            h->inflight++;
        else if (h->errors++ == 0)
            h->first_error = rc;
    }
}

/* Acquires o->leases through HOLDERS clients, kept open (the leases with
 * them) until the end. */
static int acquire_all(const struct env *e, struct holder *hs, long leases)
{
    for (int i = 0; i < HOLDERS; i++) {
        hs[i].index = i;
        hs[i].want = leases / HOLDERS + (i < leases % HOLDERS);
        int rc = dlock_client_open(&hs[i].c, e->agent_sock);
        if (rc != 0) {
            fprintf(stderr, "dlock-stall: dlock_client_open: %s\n", dlock_strerror(rc));
            return -1;
        }
    }
    uint64_t limit = now_ns() + ACQUIRE_LIMIT * 1000000000ull, next_note = now_ns();
    for (;;) {
        bool busy = false;
        long held = 0;
        struct pollfd pfd[HOLDERS];
        for (int i = 0; i < HOLDERS; i++) {
            holder_fill(&hs[i]);
            busy |= hs[i].issued < hs[i].want || hs[i].inflight > 0;
            held += hs[i].held;
            pfd[i] = (struct pollfd){.fd = dlock_client_fd(hs[i].c), .events = POLLIN};
        }
        if (!busy)
            break;
        if (now_ns() > next_note) {
            fprintf(stderr, "dlock-stall: %ld leases held\n", held);
            next_note = now_ns() + 10000000000ull;
        }
        if (now_ns() > limit) {
            fprintf(stderr, "dlock-stall: acquiring took over %d s\n", ACQUIRE_LIMIT);
            return -1;
        }
        if (poll(pfd, HOLDERS, 1000) <= 0)
            continue;
        for (int i = 0; i < HOLDERS; i++)
            if (pfd[i].revents && dlock_client_dispatch(hs[i].c) != 0) {
                fprintf(stderr, "dlock-stall: holder %d lost its connection\n", i);
                return -1;
            }
    }
    for (int i = 0; i < HOLDERS; i++)
        if (hs[i].errors) {
            fprintf(stderr, "dlock-stall: %ld acquires failed, the first with: %s\n", hs[i].errors,
                    dlock_strerror(hs[i].first_error));
            return -1;
        }
    return 0;
}

/* ---- status readers, in a thread of their own ---- */

struct reader {
    int fd;
    size_t got; /* of the current answer */
    char tail[3];
};

struct readers {
    const char *sock;
    int n;       /* readers */
    bool fast;   /* read all there is, at once */
    pid_t agent; /* sampled */
    atomic_int stop;
    pthread_t thread;
    /* Out. */
    long complete, cut, refused;
    long long bytes;
    long rss_peak_kb;
    double listing_s; /* time of the complete listings, summed */
};

static int reader_connect_req(struct reader *r, const char *sock, const char *req)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    r->got = 0;
    memset(r->tail, 0, sizeof r->tail);
    if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        send(r->fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
        if (r->fd >= 0)
            close(r->fd);
        r->fd = -1;
        return -1;
    }
    return 0;
}

static int reader_connect(struct reader *r, const char *sock)
{
    return reader_connect_req(r, sock, "leases-json\n");
}

/* Reads up to max bytes (0: all there is); at the end of the answer counts
 * it complete (it ends with "]}\n") or cut, and asks again. */
static void reader_step(struct readers *rs, struct reader *r, size_t max, uint64_t *began)
{
    static char buf[1 << 16];
    for (;;) {
        size_t want = max && max < sizeof buf ? max : sizeof buf;
        ssize_t n = recv(r->fd, buf, want, MSG_DONTWAIT);
        if (n > 0) {
            rs->bytes += n;
            r->got += (size_t)n;
            for (ssize_t i = n > 3 ? n - 3 : 0; i < n; i++) {
                memmove(r->tail, r->tail + 1, 2);
                r->tail[2] = buf[i];
            }
            if (max)
                return;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        bool done = memcmp(r->tail, "]}\n", 3) == 0;
        if (done) {
            rs->complete++;
            rs->listing_s += ns_to_s(now_ns() - *began);
        } else {
            rs->cut++;
        }
        close(r->fd);
        if (reader_connect(r, rs->sock) != 0)
            rs->refused++;
        *began = now_ns();
        return;
    }
}

static void *readers_main(void *arg)
{
    struct readers *rs = arg;
    struct reader r[MAX_READERS];
    uint64_t began[MAX_READERS];
    for (int i = 0; i < rs->n; i++) {
        began[i] = now_ns();
        if (reader_connect(&r[i], rs->sock) != 0)
            rs->refused++;
    }
    uint64_t next_sample = 0;
    while (!atomic_load(&rs->stop)) {
        uint64_t t = now_ns();
        if (t >= next_sample) {
            struct proc_sample s;
            if (proc_sample(rs->agent, &s) == 0 && s.rss_kb > rs->rss_peak_kb)
                rs->rss_peak_kb = s.rss_kb;
            next_sample = t + SAMPLE_MS * 1000000ull;
        }
        struct pollfd pfd[MAX_READERS];
        for (int i = 0; i < rs->n; i++) {
            if (r[i].fd < 0 && reader_connect(&r[i], rs->sock) != 0) {
                rs->refused++;
                began[i] = now_ns();
            }
            pfd[i] = (struct pollfd){.fd = r[i].fd, .events = POLLIN};
        }
        if (rs->fast) {
            if (poll(pfd, (nfds_t)rs->n, SAMPLE_MS) > 0)
                for (int i = 0; i < rs->n; i++)
                    if (pfd[i].revents && r[i].fd >= 0)
                        reader_step(rs, &r[i], 0, &began[i]);
            continue;
        }
        sleep_ms(SLOW_EVERY_MS);
        for (int i = 0; i < rs->n; i++)
            if (r[i].fd >= 0)
                reader_step(rs, &r[i], SLOW_CHUNK, &began[i]);
    }
    for (int i = 0; i < rs->n; i++)
        if (r[i].fd >= 0)
            close(r[i].fd);
    return NULL;
}

/* ---- the probe ---- */

/* One try-once acquire and synchronous release of the probe's name. */
static int probe_once(dlock_client *c)
{
    dlock_acquire_options o = {.ttl_ms = 30000, .wait_ms = DLOCK_WAIT_NONE};
    dlock_lease *l;
    int rc = dlock_lease_acquire(c, "stall-probe", &o, &l);
    if (rc == 0)
        rc = dlock_lease_release_sync(l);
    return rc;
}

struct phase {
    const char *label;
    struct summary probe;
    long probe_errors;
    int first_error;
    double cpu_pct;
    struct readers rs;
    double catch_up_s; /* after the readers stopped, until a probe went through */
};

static int run_phase(struct env *e, dlock_client *c, const char *status_sock, double seconds,
                     int readers, bool fast, struct phase *ph)
{
    struct lat lat = {0};
    ph->rs =
        (struct readers){.sock = status_sock, .n = readers, .fast = fast, .agent = e->agent_pid};
    atomic_init(&ph->rs.stop, 0);
    if (pthread_create(&ph->rs.thread, NULL, readers_main, &ph->rs) != 0)
        return -1;
    struct proc_sample a0, a1;
    proc_sample(e->agent_pid, &a0);
    uint64_t t_start = now_ns(), end = t_start + (uint64_t)(seconds * 1e9);
    for (uint64_t t0; (t0 = now_ns()) < end;) {
        int rc = probe_once(c);
        uint64_t t1 = now_ns();
        if (rc != 0 && ph->probe_errors++ == 0)
            ph->first_error = rc;
        lat_push(&lat, t1 - t0);
        uint64_t next = t0 + PROBE_EVERY_US * 1000ull;
        if (t1 < next)
            usleep((useconds_t)((next - t1) / 1000));
    }
    proc_sample(e->agent_pid, &a1);
    atomic_store(&ph->rs.stop, 1);
    pthread_join(ph->rs.thread, NULL);
    ph->cpu_pct = proc_cpu_pct(&a0, &a1);
    lat_summarise(&lat, ns_to_s(a1.t_ns - t_start), &ph->probe);
    lat_free(&lat);
    /* A stalled agent answers the next probe late: that is the phase's too. */
    uint64_t t = now_ns();
    while (probe_once(c) != 0 && now_ns() - t < CATCH_UP_S * 1000000000ull)
        sleep_ms(10);
    ph->catch_up_s = ns_to_s(now_ns() - t);
    return 0;
}

static void print_phase(const struct phase *ph)
{
    printf("%-34s %7zu %8.3f %8.3f %9.3f %7.0f %9.1f %6ld %5ld %8.1f %9.3f\n", ph->label,
           ph->probe.n, ph->probe.p50_us / 1e3, ph->probe.p99_us / 1e3, ph->probe.max_us / 1e3,
           (double)ph->rs.rss_peak_kb / 1024.0, ph->cpu_pct, ph->rs.complete, ph->rs.cut,
           (double)ph->rs.bytes / 1e6, ph->catch_up_s);
    if (ph->probe_errors)
        printf("  %ld probes failed, the first with: %s\n", ph->probe_errors,
               dlock_strerror(ph->first_error));
    if (ph->rs.complete)
        printf("  a complete listing took %.2f s on average\n",
               ph->rs.listing_s / (double)ph->rs.complete);
}

/* ---- one filtered query ---- */

/* Asks req and reads the whole answer; its time in *s and its lease lines
 * (objects) in *leases. 0, or -1. */
static int timed_query(const char *sock, const char *req, double *s, long *leases)
{
    struct reader r;
    uint64_t t0 = now_ns();
    if (reader_connect_req(&r, sock, req) != 0)
        return -1;
    static char buf[1 << 16];
    *leases = 0;
    for (;;) {
        ssize_t n = recv(r.fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            *leases += buf[i] == '{';
    }
    close(r.fd);
    *s = ns_to_s(now_ns() - t0);
    (*leases)--; /* the answer's own object */
    return 0;
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: dlock-stall [-K] [-l LEASES] [-d SECONDS] [-r READERS] [-A DLOCKD]\n"
               "  -l LEASES   leases held during the run (default 1000000)\n"
               "  -d SECONDS  length of each phase (default 10)\n"
               "  -r READERS  slow status readers (default 16, at most 16)\n"
               "  -A DLOCKD   the agent to run (default: the one built beside)\n"
               "  -K          keep the temp dir (logs, configuration)\n");
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.leases = 1000000, .seconds = 10, .readers = 16, .dlockd = DLOCKD_PATH};
    int ch;
    while ((ch = getopt(argc, argv, "l:d:r:A:Kh")) != -1) {
        if (ch == 'l')
            o->leases = atol(optarg);
        else if (ch == 'd')
            o->seconds = atof(optarg);
        else if (ch == 'r')
            o->readers = atoi(optarg);
        else if (ch == 'A')
            o->dlockd = optarg;
        else if (ch == 'K')
            o->keep = true;
        else {
            usage(ch == 'h' ? stdout : stderr);
            exit(ch == 'h' ? 0 : 64);
        }
    }
    if (o->leases < 0 || o->leases > 4000000 || o->seconds <= 0 || o->readers < 1 ||
        o->readers > MAX_READERS || optind < argc) {
        usage(stderr);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_opts(argc, argv, &o) != 0)
        return 64;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct env *e = &the_env;
    char status_sock[BENCH_PATH];
    struct holder hs[HOLDERS] = {0};
    dlock_client *probe = NULL;
    int rc = 1;
    if (start(e, &o, status_sock, sizeof status_sock) != 0)
        goto out;
    fprintf(stderr, "dlock-stall: acquiring %ld leases\n", o.leases);
    uint64_t t0 = now_ns();
    if (acquire_all(e, hs, o.leases) != 0)
        goto out;
    double acq_s = ns_to_s(now_ns() - t0);
    struct proc_sample held;
    proc_sample(e->agent_pid, &held);
    if (dlock_client_open(&probe, e->agent_sock) != 0)
        goto out;
    char slow[64];
    snprintf(slow, sizeof slow, "%d slow readers (1 KiB / 10 ms)", o.readers);
    struct phase ph[3] = {
        {.label = "no status readers"}, {.label = slow}, {.label = "1 fast reader"}};
    fprintf(stderr, "dlock-stall: %s\n", ph[0].label);
    if (run_phase(e, probe, status_sock, o.seconds, 0, false, &ph[0]) != 0)
        goto out;
    fprintf(stderr, "dlock-stall: %s\n", ph[1].label);
    if (run_phase(e, probe, status_sock, o.seconds, o.readers, false, &ph[1]) != 0)
        goto out;
    fprintf(stderr, "dlock-stall: %s\n", ph[2].label);
    if (run_phase(e, probe, status_sock, o.seconds, 1, true, &ph[2]) != 0)
        goto out;
    /* What a filter costs: one name, and a pattern that matches ten. */
    double lit_s = -1, pat_s = -1;
    long lit_n = -1, pat_n = -1;
    timed_query(status_sock, "leases-json stall-0-0000001\n", &lit_s, &lit_n);
    timed_query(status_sock, "leases-json stall-0-000001?\n", &pat_s, &pat_n);
    printf("dlock-stall: %ld leases held (TTL %d s, acquired in %.1f s), agent RSS %.0f MB, "
           "agent %s\n",
           o.leases, LEASE_TTL_MS / 1000, acq_s, (double)held.rss_kb / 1024.0, o.dlockd);
    printf("probe: try-once acquire + synchronous release of its own name, every %d us; "
           "%.0f s per phase\n\n",
           PROBE_EVERY_US, o.seconds);
    printf("%-34s %7s %8s %8s %9s %7s %9s %6s %5s %8s %9s\n", "phase", "probes", "p50 ms", "p99 ms",
           "max ms", "RSS MB", "agent CPU%", "lists", "cut", "read MB", "after s");
    for (int i = 0; i < 3; i++)
        print_phase(&ph[i]);
    printf("\nleases-json of one name: %ld lease(s) in %.3f ms; of a pattern: %ld lease(s) in %.3f "
           "ms\n",
           lit_n, lit_s * 1e3, pat_n, pat_s * 1e3);
    rc = 0;
out:
    if (probe)
        dlock_client_close(probe);
    for (int i = 0; i < HOLDERS; i++)
        if (hs[i].c)
            dlock_client_close(hs[i].c);
    if (rc != 0 && e->agent_log[0])
        env_print_log(e->agent_log, 20);
    env_stop(e);
    return rc;
}
