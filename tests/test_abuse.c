/* SPDX-License-Identifier: BSD-3-Clause */
/* test_abuse.c -- hostile local peers against a real dlockd: descriptor
 * exhaustion past RLIMIT_NOFILE, clients that never read their replies,
 * peers that never say HELLO, and one uid's many connections. In each case a
 * victim lease with a 2 s TTL, held by another client of the same agent,
 * must stay HELD the whole time (no JEOPARDY or LOST event) and the agent
 * must keep answering the victim's pings between attack rounds. A release
 * goes through while its uid is over its output cap. The status socket and
 * HTTP attacks are in test_status.c. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

/* ---- the victim ---- */

struct victim {
    struct h_cl *cl;
    dlock_lease *lease;
};

static void victim_start(struct victim *v)
{
    v->cl = h_client();
    v->lease = h_must_acquire(v->cl, "victim", 2000);
}

/* The victim's lease never left HELD, and the agent answers it now. */
static void victim_check(const struct victim *v, const char *when)
{
    h_pump(v->cl, 0);
    cr_assert_eq(h_events(v->cl, v->lease, DLOCK_STATE_JEOPARDY), 0, "%s: lease in jeopardy", when);
    cr_assert_eq(h_events(v->cl, v->lease, DLOCK_STATE_LOST), 0, "%s: lease lost", when);
    cr_assert(dlock_lease_valid(v->lease), "%s: lease not valid", when);
    cr_assert_eq(dlock_client_ping(v->cl->c), 0, "%s: the agent did not answer a ping", when);
}

/* Keeps checking the victim for ms milliseconds (a few renewals of a 2 s
 * lease when ms is 2000 or more). */
static void victim_watch(const struct victim *v, int ms)
{
    int64_t end = h_now_ms() + ms;
    while (h_now_ms() < end) {
        victim_check(v, "during the attack");
        h_pump(v->cl, 50);
    }
}

/* ---- raw peers ---- */

/* A non-blocking connection to agent 0's client socket, or -1 (errno set;
 * EAGAIN when the agent's backlog is full). */
static int peer_connect(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", H.agent[0].sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* HELLO and its answer on a raw peer; 0, or -1 when refused or closed. */
static int peer_hello(int fd)
{
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION};
    if (wire_put_hello(&b, 1, &m) != 0 || h_raw_send_buf(fd, &b) != 0)
        return -1;
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    if (h_raw_read_frame(fd, 10000, &h, body, sizeof body) != 1)
        return -1;
    return h.type == WIRE_T_HELLO_OK ? 0 : -1;
}

/* Sends PING frames on a non-blocking peer, never reading the answers,
 * until the socket takes no more (the agent stopped reading it) or max
 * bytes went out. Returns the bytes sent. */
static size_t peer_flood_pings(int fd, size_t max)
{
    static uint8_t pings[64 * WIRE_HDR_LEN];
    static int ready;
    if (!ready) {
        struct wire_buf b = {0};
        for (int i = 0; i < 64; i++)
            wire_put_empty(&b, (uint32_t)i + 2, WIRE_T_PING);
        memcpy(pings, b.data, sizeof pings);
        wire_buf_free(&b);
        ready = 1;
    }
    size_t sent = 0;
    while (sent < max) {
        ssize_t n = send(fd, pings, sizeof pings, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0)
            break;
        sent += (size_t)n;
    }
    return sent;
}

/* Makes fd non-blocking and floods it with pings until the agent stops
 * reading it: the socket then takes nothing for a whole second. Returns the
 * bytes sent. */
static size_t flood_until_unread(int fd)
{
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t sent = 0;
    for (;;) {
        sent += peer_flood_pings(fd, 8u << 20);
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, h_scaled_ms(1000)) == 0)
            return sent;
    }
}

static long agent_rss_kib(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)H.agent[0].pid);
    const char *s = h_read_file(path);
    const char *p = s ? strstr(s, "VmRSS:") : NULL;
    return p ? strtol(p + 6, NULL, 10) : -1;
}

/* CPU time (user + system) agent 0 has used, in ms. */
static long agent_cpu_ms(void)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)H.agent[0].pid);
    FILE *f = fopen(path, "r");
    cr_assert(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields 14 and 15, counted after the command name's closing paren. */
    const char *p = strrchr(buf, ')');
    unsigned long utime = 0, stime = 0;
    cr_assert(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                          &stime) == 2);
    return (long)((utime + stime) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* Lines of agent 0's log, all of it, and of them those containing needle
 * (NULL: every line). */
static long log_count(const char *needle)
{
    FILE *f = fopen(H.agent[0].log, "r");
    cr_assert(f);
    char *line = NULL;
    size_t cap = 0;
    long n = 0;
    while (getline(&line, &cap, f) > 0)
        n += !needle || strstr(line, needle);
    free(line);
    fclose(f);
    return n;
}

/* Raises our own descriptor limit so that the test can hold many peers. */
static void allow_fds(rlim_t n)
{
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur >= n)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n)
        h_skip("the descriptor hard limit is too low for this test");
    rl.rlim_cur = n;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* ---- descriptor exhaustion ---- */

/* The agent runs out of descriptors: it must neither spin nor flood its log,
 * must keep serving the clients it has, and must serve new ones once the
 * idle connections are gone. */
ITEST(abuse, descriptor_exhaustion_neither_spins_nor_stalls)
{
    enum { IDLE = 1100 };
    allow_fds(IDLE + 256);
    h_start("max_connections = 4000\nhandshake_timeout_ms = 120000\n"
            "[policy]\nmax_connections_per_uid = 0");
    struct victim v;
    victim_start(&v);
    /* The agent is confined to 1024 descriptors, as with a default soft
     * limit and no LimitNOFILE, while max_connections asks for more. */
    struct rlimit lim = {1024, 1024};
    cr_assert_eq(prlimit(H.agent[0].pid, RLIMIT_NOFILE, &lim, NULL), 0, "prlimit: %s",
                 strerror(errno));
    static int idle[IDLE];
    int nidle = 0;
    for (int round = 0; round < 4; round++) {
        /* A full backlog refuses at once (EAGAIN): those are tried again
         * once the agent had a moment. */
        int64_t end = h_deadline(20000);
        while (nidle < (round + 1) * IDLE / 4 && h_now_ms() < end) {
            int fd = peer_connect();
            if (fd >= 0)
                idle[nidle++] = fd;
            else
                h_pump(v.cl, 1);
        }
        victim_check(&v, "between rounds");
    }
    cr_assert_eq(nidle, IDLE);
    /* By now the agent's table is full; some peers were refused or wait in
     * the backlog. The agent goes on renewing and answering, and does not
     * spin on its listener: it uses less than a fifth of a core meanwhile
     * (a spinning loop uses most of one; a slow machine only lowers the
     * share). */
    long cpu0 = agent_cpu_ms();
    int64_t t0 = h_now_ms();
    victim_watch(&v, 3000);
    long cpu = agent_cpu_ms() - cpu0, wall = (long)(h_now_ms() - t0);
    cr_assert_lt(cpu, wall / 5, "the agent used %ld ms of CPU in %ld ms", cpu, wall);
    long lines = log_count(NULL);
    cr_assert_gt(log_count("Too many open files"), 0, "the agent never ran out of descriptors");
    for (int i = 0; i < nidle; i++)
        close(idle[i]);
    /* Once they are gone, a new client is served again. */
    dlock_client *c = NULL;
    H_WAIT_UNTIL(20000, h_client_try_open(0, &c) == 0);
    dlock_lease *l = NULL;
    cr_assert_eq(dlock_lease_acquire(c, "after", &(dlock_acquire_options){.ttl_ms = 5000}, &l), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
    dlock_client_close(c);
    victim_check(&v, "after the attack");
    /* Rate-limited: a spinning accept loop logged millions of lines. */
    cr_assert_lt(lines, 3000, "the agent logged %ld lines", lines);
}

/* dlockd compares max_connections with its descriptor limit (at start, and
 * when checking its configuration) and says so when the limit cannot be
 * raised enough. */
ITEST(abuse, a_short_descriptor_limit_is_reported)
{
    h_agent_config(0, "max_connections = 5000", NULL);
    const char *out = h_path("nofile.out");
    pid_t pid = h_fork();
    if (pid == 0) {
        struct rlimit lim = {256, 256};
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || setrlimit(RLIMIT_NOFILE, &lim) != 0 || dup2(fd, 2) < 0 || dup2(fd, 1) < 0)
            _exit(100);
        execl(DLOCKD_PATH, DLOCKD_PATH, "-n", "-c", H.agent[0].conf, NULL);
        _exit(101);
    }
    cr_assert_eq(h_wait_child(pid, 10000), 0);
    const char *text = h_read_file(out);
    /* Two per connection (its socket and, with the default state
     * directory, its touch file): about 10,000. */
    cr_assert(text && strstr(text, "need about 10"), "%s", text ? text : "(no output)");
    cr_assert(strstr(text, "RLIMIT_NOFILE allows 256"), "%s", text);
}

/* Runs body(n) in a child as uid nobody, which opens connections and
 * reports how many it got; the child then waits to be killed, holding
 * them. The count comes back through a file opened before the child drops
 * its privileges (h_fork() closes every inherited descriptor). */
static int as_nobody(int (*body)(int n), int n, pid_t *pid)
{
    const char *report = h_path("nobody.count");
    cr_assert_eq(chmod(H.dir, 0711), 0); /* nobody reaches the agent's socket */
    *pid = h_fork();
    if (*pid == 0) {
        int fd = open(report, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
            _exit(100);
        char line[32];
        int len = snprintf(line, sizeof line, "%d\n", body(n));
        if (write(fd, line, (size_t)len) != len)
            _exit(101);
        for (;;)
            pause();
    }
    H_WAIT_UNTIL(50000, h_read_file(report) && strchr(h_read_file(report), '\n'));
    return atoi(h_read_file(report));
}

/* Opens n connections, says HELLO on each, and returns how many took it. */
static int connect_many(int n)
{
    int ok = 0;
    while (ok < n) {
        int fd = peer_connect();
        if (fd < 0 || peer_hello(fd) != 0)
            break;
        ok++;
    }
    return ok;
}

/* Opens n connections and floods each with pings it never reads. */
static int slow_readers(int n)
{
    static int fds[512];
    int ok = 0;
    while (ok < n && ok < 512) {
        fds[ok] = peer_connect();
        if (fds[ok] < 0 || peer_hello(fds[ok]) != 0)
            break;
        ok++;
    }
    /* The agent reads what fits, answers into buffers the peer never
     * drains, and stops reading at its caps: flood until no connection has
     * taken a byte for a second. */
    static struct pollfd pfd[512];
    for (;;) {
        for (int i = 0; i < ok; i++) {
            peer_flood_pings(fds[i], 4u << 20);
            pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLOUT};
        }
        if (poll(pfd, (nfds_t)ok, h_scaled_ms(1000)) <= 0)
            break;
    }
    return ok;
}

/* Clients of another uid that never read their replies cost the agent at
 * most the per-uid output cap, and nothing to other clients. */
ITEST(abuse, slow_readers_are_capped_per_uid)
{
    h_start("socket_mode = 0666\n[policy]\nmax_output_per_uid = 4194304");
    struct victim v;
    victim_start(&v);
    long before = agent_rss_kib();
    pid_t pid;
    int ok = as_nobody(slow_readers, 64, &pid);
    cr_assert_eq(ok, 64, "only %d slow readers connected", ok);
    victim_watch(&v, 2500);
    /* 64 connections would buffer 64 MiB of replies at the per-connection
     * mark alone; the uid's cap holds them to 4 MiB (with slack for the
     * allocator and the connections' own buffers). */
    long grown = agent_rss_kib() - before;
    cr_assert_lt(grown, 24 * 1024, "the agent grew by %ld KiB", grown);
    kill(pid, SIGKILL);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 128 + SIGKILL);
    victim_check(&v, "after the attack");
}

/* Once a slow reader drains its replies, its uid is under the cap again and
 * its connections (also the ones left unread meanwhile) are served. */
ITEST(abuse, a_uid_back_under_its_cap_is_served_again)
{
    h_start("[policy]\nmax_output_per_uid = 65536");
    int a = h_raw_connect(0), b = h_raw_connect(0);
    h_raw_hello(a);
    h_raw_hello(b);
    size_t sent = flood_until_unread(a);
    cr_assert_gt(sent, 65536u);
    /* a's replies fill the uid's cap, so b (same uid) is most likely left
     * unread now; whether or not, once a drains its replies, b must be
     * answered, and a's every ping too, in order. */
    struct wire_buf buf = {0};
    wire_put_empty(&buf, 7, WIRE_T_PING);
    cr_assert_eq(h_raw_send_buf(b, &buf), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    fcntl(a, F_SETFL, 0);
    /* Drain a: every ping is answered, in order, and then b's too. */
    size_t got = 0;
    while (got < sent / WIRE_HDR_LEN) {
        cr_assert_eq(h_raw_read_frame(a, 20000, &h, body, sizeof body), 1, "after %zu replies",
                     got);
        cr_assert_eq(h.type, WIRE_T_OK);
        got++;
    }
    cr_assert_eq(h_raw_read_frame(b, 20000, &h, body, sizeof body), 1);
    cr_assert_eq(h.id, 7);
}

/* A reload that raises the cap lets the waiting connections of a uid go on
 * at once: no connection is left unread for good. */
ITEST(abuse, a_raised_cap_takes_effect_at_reload)
{
    h_start("[policy]\nmax_output_per_uid = 65536");
    int a = h_raw_connect(0), b = h_raw_connect(0);
    h_raw_hello(a);
    h_raw_hello(b);
    flood_until_unread(a);
    struct wire_buf buf = {0};
    wire_put_empty(&buf, 7, WIRE_T_PING);
    cr_assert_eq(h_raw_send_buf(b, &buf), 0);
    /* a never reads; the cap goes up to 64 MiB, far above what a holds. */
    h_agent_config(0, "[policy]\nmax_output_per_uid = 67108864", NULL);
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(b, 20000, &h, body, sizeof body), 1,
                 "b was not answered after the cap was raised");
    cr_assert_eq(h.id, 7);
}

/* Sends RELEASE frames of a lease nobody holds on a non-blocking peer,
 * never reading the answers, until the socket takes nothing for a second or
 * max bytes went out. Returns the bytes sent. */
static size_t flood_bogus_releases(int fd, size_t max)
{
    struct wire_buf b = {0};
    for (int i = 0; i < 64; i++)
        wire_put_release(&b, (uint32_t)i + 2, &(struct wire_release){.lease_id = 999999999});
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t sent = 0;
    for (;;) {
        while (sent < max) {
            ssize_t n = send(fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n <= 0)
                break;
            sent += (size_t)n;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (sent >= max || poll(&p, 1, h_scaled_ms(1000)) == 0)
            break;
    }
    wire_buf_free(&b);
    return sent;
}

/* A RELEASE is taken even while its uid is over its output cap: the lease
 * is given up and its key deleted at once, not once the uid's replies are
 * read (dlock_lease_release() has long returned by then). Other requests of
 * the uid still wait, and a flood of releases that give up nothing is not
 * read without bound. */
ITEST(abuse, a_release_is_taken_while_its_uid_is_over_its_output_cap)
{
    h_start("[policy]\nmax_output_per_uid = 65536");
    struct h_cl *v = h_client();
    dlock_lease *l = h_must_acquire(v, "freed", 40000);
    cr_assert(h_redis_exists(h_key("freed")));
    long long releases = h_metric(0, "dlock_releases_total");
    /* A peer of the same uid fills the uid's cap (64 KiB, far below the
     * connection's own mark of 1 MiB) with replies it never reads, until
     * the agent stops reading it. */
    int a = h_raw_connect(0), c = h_raw_connect(0);
    h_raw_hello(a);
    h_raw_hello(c); /* before the flood: a HELLO waits for room */
    cr_assert_gt(flood_until_unread(a), 65536u);
    /* The release goes through the throttle: the key is deleted long before
     * its 40 s TTL, and renewal stops (the agent holds no lease). */
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE(h_key("freed"));
    H_WAIT_UNTIL(H_EVENT_MS, h_metric(0, "dlock_leases") == 0);
    cr_assert_eq(h_metric(0, "dlock_releases_total"), releases + 1);
    /* Releases that give up no lease stop being read after the first: the
     * peer's socket fills up, as for any other request. */
    size_t sent = flood_bogus_releases(c, 64u << 20);
    cr_assert_lt(sent, 64u << 20, "the agent read %zu bytes of bogus releases past its cap", sent);
    /* The first was taken, and answered: no such lease. */
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    struct wire_error e;
    cr_assert_eq(h_raw_read_frame(c, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_ERROR);
    cr_assert_eq(h.id, 2);
    cr_assert_eq(wire_get_error(body, h.len, &e), 0);
    cr_assert_eq(e.code, DLOCK_ENOTFOUND);
}

/* ---- handshake and per-uid connections ---- */

/* A peer that connects and says nothing is closed after the handshake
 * timeout; one that said HELLO stays. */
ITEST(abuse, silent_peers_are_closed_after_the_handshake_timeout)
{
    h_start("handshake_timeout_ms = 1000");
    int silent = h_raw_connect(0), talker = h_raw_connect(0);
    h_raw_hello(talker);
    int code;
    cr_assert_eq(h_raw_expect_close(silent, 20000, &code), 1, "a silent peer stayed connected");
    cr_assert(strstr(h_read_file(H.agent[0].log), "no hello within 1000 ms"));
    /* The talker was connected as long: it is still served. */
    struct wire_buf buf = {0};
    wire_put_empty(&buf, 9, WIRE_T_PING);
    cr_assert_eq(h_raw_send_buf(talker, &buf), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(talker, 10000, &h, body, sizeof body), 1);
    cr_assert_eq(h.id, 9);
}

/* By default one uid holds at most 256 connections: the next is refused,
 * and other uids are still served. */
ITEST(abuse, one_uid_cannot_take_every_connection_by_default)
{
    allow_fds(1024);
    h_start("socket_mode = 0666");
    struct victim v;
    victim_start(&v); /* root's: another uid than the attacker */
    pid_t pid;
    int ok = as_nobody(connect_many, 300, &pid);
    cr_assert_eq(ok, 256, "uid %d got %d connections", NOBODY, ok);
    victim_check(&v, "with the uid at its limit");
    struct h_cl *other = h_client();
    cr_assert_eq(dlock_client_ping(other->c), 0);
    kill(pid, SIGKILL);
    h_wait_child(pid, H_STOP_MS);
}

/* ---- name look-ups at reload ---- */

/* SIGHUP reads the configuration again, resolving the user and group names
 * of the policy. With a name service that takes 3 s per look-up, the loop
 * must go on renewing a 2 s lease and answering meanwhile, and the policy
 * is swapped in once the look-ups are done. */
ITEST(abuse, a_slow_name_service_does_not_stall_a_reload)
{
    const char *flag = h_path("nss-slow");
    setenv("LD_PRELOAD", SLOW_NSS_PATH, 1);
    setenv("DLOCK_TEST_NSS_DELAY_FILE", flag, 1);
    setenv("DLOCK_TEST_NSS_DELAY_MS", "3000", 1);
    /* A sanitized agent wants its runtime first among the libraries. */
    char asan[512];
    const char *old = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", old ? old : "", old ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    h_start("[policy]\nallow = root *");
    unsetenv("LD_PRELOAD");
    struct victim v;
    victim_start(&v);
    FILE *f = fopen(flag, "w");
    cr_assert(f);
    fclose(f);
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    H_WAIT_UNTIL(10000, strstr(h_read_file(H.agent[0].log), "got SIGHUP"));
    /* A second SIGHUP during the reading is not lost either. */
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    /* The look-up takes 3 s: two renewals of the 2 s lease fall in it. */
    victim_watch(&v, 2500);
    unlink(flag);
    H_WAIT_UNTIL(20000, log_count("reloaded: 1 policy rule(s)") == 2);
    victim_check(&v, "after the reload");
}
