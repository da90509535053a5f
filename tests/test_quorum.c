/* SPDX-License-Identifier: BSD-3-Clause */
/* test_quorum.c -- quorum mode (Redlock over 3 or 5 independent Redis nodes):
 * node counts and settings the agent accepts, the key and token on every node,
 * grants with a minority down or clogged by foreign values and refusals
 * without a majority, JEOPARDY and LOST when a holder's majority goes away,
 * restarted nodes excluded from quorums (the classic crash-restart hazard),
 * no key left behind by a failed acquire (also on a node that answered late),
 * release notices from any node, fencing tokens that keep increasing
 * when the counters run ahead of the clock and nodes are replaced, fresh
 * nodes that count within a minute with the default settings (and say when),
 * and nodes with appendfsync always that count at once. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* fresh_nodes_count_within_a_minute_by_default waits out the default
 * exclusion of 45 s. */
#define H_TEST_TIMEOUT_S 100
#include "harness.h"
#include "keys.h"

/* ---- helpers ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* A decimal u64 as Redis stores it; fails the test on anything else. */
static uint64_t parse_u64(const char *s, const char *what)
{
    cr_assert_not_null(s, "%s: missing", what);
    cr_assert(s[0] >= '0' && s[0] <= '9', "%s: '%s' is not a decimal number", what, s);
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    cr_assert(errno == 0 && *end == '\0', "%s: '%s' is not a decimal number", what, s);
    return (uint64_t)v;
}

/* The fencing high-water mark key of the hash slot of lock name under the
 * default prefix (docs/fencing.md). */
static const char *hw_key(const char *name)
{
    static struct slot_tags *tags;
    static char buf[512];
    if (!tags) {
        tags = malloc(sizeof *tags);
        cr_assert_not_null(tags);
        slot_tags_build(tags);
    }
    const char *key = h_key(name);
    fence_hw_key(tags, key, strlen(key), strlen("dlock:"), buf);
    return buf;
}

/* The fencing high-water mark of name's slot on node i, 0 when it has none. */
static uint64_t node_counter(int i, const char *name)
{
    char *v = h_node_get(i, hw_key(name));
    return v ? parse_u64(v, "fence counter") : 0;
}

/* How many of nodes 0..H.nnodes-1 hold value for key (NULL: hold the key at
 * all). Nodes that are down or paused count as not holding it. */
static int nodes_holding(const char *key, const char *value)
{
    int n = 0;
    for (int i = 0; i < H.nnodes; i++) {
        if (!h_node_running(i))
            continue;
        char *v = h_node_get(i, key);
        if (v && (!value || strcmp(v, value) == 0))
            n++;
    }
    return n;
}

/* The lock's value on the first running node of nodes 0..H.nnodes-1 that has
 * the key, or NULL. */
static char *any_value(const char *key)
{
    for (int i = 0; i < H.nnodes; i++)
        if (h_node_running(i)) {
            char *v = h_node_get(i, key);
            if (v)
                return v;
        }
    return NULL;
}

/* A grant needs a majority only: the other nodes' replies may still be on
 * their way when it arrives. */
#define ALL_NODES_HOLD(key, value, n) H_WAIT_UNTIL(H_EVENT_MS, nodes_holding(key, value) == (n))

/* key goes from every running node, deleted by the agent rather than left
 * to its TTL (see H_KEY_GONE). */
static void nodes_key_gone(const char *file, int line, const char *key)
{
    for (int i = 0; i < H.nnodes; i++)
        if (h_node_running(i))
            h_key_gone(file, line, i, key);
}
#define NODES_KEY_GONE(key) nodes_key_gone(__FILE__, __LINE__, key)

/* The value at least m running nodes hold for key, or NULL. */
static char *majority_value(const char *key, int m)
{
    for (int i = 0; i < H.nnodes; i++)
        if (h_node_running(i)) {
            char *v = h_node_get(i, key);
            if (v && nodes_holding(key, v) >= m)
                return v;
        }
    return NULL;
}

static int64_t realtime_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* Counts the lines of agent i's log that contain both needles, and copies
 * the last of them into last (room for 2048 bytes) unless it is NULL. */
static int scan_log(int agent, const char *a, const char *b, char *last)
{
    const char *log = h_read_file(H.agent[agent].log);
    int n = 0;
    while (log && *log) {
        const char *eol = strchr(log, '\n');
        size_t len = eol ? (size_t)(eol - log) : strlen(log);
        char line[2048];
        if (len >= sizeof line)
            len = sizeof line - 1;
        memcpy(line, log, len);
        line[len] = '\0';
        if (strstr(line, a) && strstr(line, b)) {
            n++;
            if (last)
                memcpy(last, line, len + 1);
        }
        log = eol ? eol + 1 : log + len;
    }
    return n;
}

/* How many lines of agent i's log contain both needles. */
static int log_lines_with(int agent, const char *a, const char *b)
{
    return scan_log(agent, a, b, NULL);
}

#define EXCLUDED "excluded from quorums"

/* ---- configuration ---- */

/* Runs `dlockd -n` with the given arguments (NULL-terminated) and returns its
 * exit status; its output is in DIR/check.out. */
static int check_config(const char *const *args)
{
    char *argv[32];
    int n = 0;
    argv[n++] = DLOCKD_PATH;
    argv[n++] = "-n";
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    unlink(h_path("check.out"));
    pid_t pid = h_spawn(argv, h_path("check.out"));
    int st = h_wait_child(pid, 5000);
    cr_assert_neq(st, -1, "dlockd -n did not exit");
    return st;
}

static const char *check_output(void)
{
    const char *out = h_read_file(h_path("check.out"));
    return out ? out : "";
}

ITEST(quorum, node_count_is_one_or_odd_from_3_to_9)
{
    static char addrs[11][H_PATH];
    for (int k = 0; k < 11; k++)
        snprintf(addrs[k], sizeof addrs[k], "unix:%s/n%d.sock", H.dir, k);
    /* -r repeated k times */
    for (int k = 1; k <= 11; k++) {
        const char *args[32];
        int n = 0;
        for (int j = 0; j < k; j++) {
            args[n++] = "-r";
            args[n++] = addrs[j];
        }
        args[n] = NULL;
        int ok = k == 1 || (k % 2 == 1 && k <= 9);
        int st = check_config(args);
        const char *out = check_output();
        if (ok) {
            cr_assert_eq(st, 0, "%d nodes refused (status %d): %s", k, st, out);
            cr_assert_not_null(strstr(out, "configuration OK"));
        } else {
            cr_assert_eq(st, 2, "%d nodes: status %d, expected 2 (config error): %s", k, st, out);
            cr_assert_not_null(strstr(out, "node"), "%d nodes: the message does not say why: %s", k,
                               out);
            cr_assert_null(strstr(out, "configuration OK"));
        }
    }
    /* The same list in the config file, separated by commas and/or blanks. */
    struct {
        const char *list;
        int status;
    } files[] = {
        {"unix:/a.sock, unix:/b.sock", 2},
        {"unix:/a.sock unix:/b.sock unix:/c.sock", 0},
        {"unix:/a.sock,unix:/b.sock,unix:/c.sock", 0},
        {"unix:/a.sock , unix:/b.sock,unix:/c.sock  127.0.0.1:7001, 127.0.0.1:7002", 0},
        {"unix:/a.sock, unix:/b.sock, unix:/c.sock, unix:/d.sock", 2},
        {"h1:1, h2:2, h3:3, h4:4, h5:5, h6:6, h7:7, h8:8, h9:9", 0},
        {"h1:1, h2:2, h3:3, h4:4, h5:5, h6:6, h7:7, h8:8, h9:9, h10:10, h11:11", 2},
    };
    char conf[H_PATH + 64];
    snprintf(conf, sizeof conf, "%s", h_path("nodes.conf"));
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "[redis]\naddress = %s\n", files[i].list);
        write_file(conf, text);
        const char *args[] = {"-c", conf, NULL};
        int st = check_config(args);
        cr_assert_eq(st, files[i].status, "address = %s: status %d, expected %d: %s", files[i].list,
                     st, files[i].status, check_output());
        if (st != 0)
            cr_assert(strstr(check_output(), "node") || strstr(check_output(), "address"),
                      "address = %s: the message does not say why: %s", files[i].list,
                      check_output());
    }
    /* The command line replaces the file's list. */
    write_file(conf, "[redis]\naddress = unix:/a.sock, unix:/b.sock\n");
    const char *over[] = {"-c", conf, "-r", addrs[0], NULL};
    cr_assert_eq(check_config(over), 0, "-r did not replace the file's list: %s", check_output());
}

ITEST(quorum, node_timeout_below_min_ttl_in_quorum_mode)
{
    char conf[H_PATH + 64];
    snprintf(conf, sizeof conf, "%s", h_path("nt.conf"));
    write_file(conf, "[agent]\nmin_ttl_ms = 400\n[redis]\naddress = h1:1, h2:2, h3:3\n"
                     "node_timeout_ms = 400\n");
    const char *args[] = {"-c", conf, NULL};
    cr_assert_eq(check_config(args), 2, "node_timeout_ms = min_ttl_ms accepted: %s",
                 check_output());
    cr_assert_not_null(strstr(check_output(), "node_timeout_ms"), "not named: %s", check_output());
    write_file(conf, "[agent]\nmin_ttl_ms = 400\n[redis]\naddress = h1:1, h2:2, h3:3\n"
                     "node_timeout_ms = 399\n");
    cr_assert_eq(check_config(args), 0, "%s", check_output());
    /* The default (20) is below the default min_ttl_ms (30). */
    write_file(conf, "[redis]\naddress = h1:1, h2:2, h3:3\n");
    cr_assert_eq(check_config(args), 0, "%s", check_output());
    /* Single-node mode does not use it. */
    write_file(conf, "[agent]\nmin_ttl_ms = 400\n[redis]\naddress = h1:1\nnode_timeout_ms = 500\n");
    cr_assert_eq(check_config(args), 0, "single node: %s", check_output());
}

/* ---- grants on every node ---- */

/* The connections node n has, as CLIENT LIST shows them (the asking one
 * included). */
static int node_clients(int n)
{
    redisReply *r = h_node_cmd(n, "CLIENT LIST");
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "CLIENT LIST on node %d: reply type %d", n, r->type);
    int lines = 0;
    for (const char *p = r->str; (p = strchr(p, '\n')); p++)
        lines++;
    freeReplyObject(r);
    return lines;
}

ITEST(quorum, repeated_r_flags_run_quorum_mode)
{
    /* The file names one unusable address; three -r flags replace it. */
    h_nodes_start(3);
    for (int n = 0; n < 3; n++)
        H_WAIT_UNTIL(5000, h_node_uptime_s(n) >= 3); /* not excluded when first seen */
    char conf[H_PATH + 64], sock[H_PATH + 64];
    snprintf(conf, sizeof conf, "%s", h_path("flags.conf"));
    snprintf(sock, sizeof sock, "%s", h_path("flags.sock"));
    char text[512];
    snprintf(text, sizeof text,
             "[agent]\nmax_ttl_ms = 2000\ndefault_ttl_ms = 1500\nmin_ttl_ms = 400\n"
             "log_level = debug\n[redis]\naddress = unix:%s/nowhere.sock\n"
             "node_timeout_ms = 300\nreconnect_min_ms = 20\nreconnect_max_ms = 250\n",
             H.dir);
    write_file(conf, text);
    char *argv[] = {DLOCKD_PATH,    "-c", conf,           "-s", sock,           "-r",
                    H.node[0].addr, "-r", H.node[1].addr, "-r", H.node[2].addr, NULL};
    pid_t pid = h_spawn(argv, h_path("flags.log"));
    dlock_client *c = NULL;
    H_WAIT_UNTIL(5000, dlock_client_open(&c, sock) == 0);
    /* It connects to all three nodes (its command and notice links, beside
     * the harness's own connection), and a grant puts the key on all three
     * (once its links are up: the grant itself needs only two). */
    for (int n = 0; n < 3; n++)
        H_WAIT_UNTIL(5000, node_clients(n) >= 3);
    int64_t end = h_deadline(5000);
    for (;;) {
        dlock_lease *l = NULL;
        dlock_acquire_options o = {.ttl_ms = 1500, .wait_ms = 0};
        int rc = dlock_lease_acquire(c, "flags", &o, &l);
        cr_assert(rc == 0 || rc == DLOCK_EUNAVAIL || rc == DLOCK_ENOQUORUM, "acquire: %s (%d)",
                  dlock_strerror(rc), rc);
        int everywhere = 0;
        if (rc == 0) {
            char *tok = any_value(h_key("flags"));
            cr_assert(h_is_token(tok), "granted, but no token on the nodes");
            cr_assert_geq(nodes_holding(h_key("flags"), tok), 2, "granted without a majority");
            int64_t t = h_deadline(300);
            while (!(everywhere = nodes_holding(h_key("flags"), tok) == 3) && h_now_ms() < t)
                h_sleep_ms(5);
            cr_assert_eq(dlock_lease_release(l), 0);
            NODES_KEY_GONE(h_key("flags"));
        }
        if (everywhere)
            break;
        cr_assert_lt(h_now_ms(), end, "no grant on all three nodes within %d ms (last: %s)",
                     h_scaled_ms(5000), dlock_strerror(rc));
        h_sleep_ms(10);
    }
    dlock_client_close(c);
    kill(pid, SIGTERM);
    int st = h_wait_child(pid, H_STOP_MS);
    cr_assert_eq(st, 0, "dlockd exit status %d after SIGTERM", st);
}

ITEST(quorum, grant_puts_key_and_fence_on_every_node)
{
    h_quorum_start(3, 2, "cohort_handoffs = 0" /* the marks hold the fence itself */, NULL);
    struct h_cl *a = h_client_at(0);
    dlock_lease *l = h_must_acquire(a, "every", 1500);
    uint64_t f = dlock_lease_fence(l);
    cr_assert_gt(f, 0);
    char *tok = any_value(h_key("every"));
    cr_assert(h_is_token(tok), "'%s' is not a token", tok ? tok : "(none)");
    ALL_NODES_HOLD(h_key("every"), tok, 3);
    int at_fence = 0;
    for (int n = 0; n < 3; n++) {
        char *v = h_node_get(n, h_key("every"));
        cr_assert(v && strcmp(v, tok) == 0, "node %d holds '%s', node 0 '%s'", n, v ? v : "(none)",
                  tok);
        long long pttl = h_node_pttl(n, h_key("every"));
        cr_assert(pttl > 0 && pttl <= 1500, "node %d: PTTL %lld", n, pttl);
        uint64_t ctr = node_counter(n, "every");
        cr_assert_leq(ctr, f, "node %d: counter %" PRIu64 " above the fence %" PRIu64, n, ctr, f);
        at_fence += ctr == f;
    }
    cr_assert_geq(at_fence, 2, "the fence %" PRIu64 " is on %d node(s), not a majority", f,
                  at_fence);
    /* No agent listens for release notices: nobody waits. */
    for (int n = 0; n < 3; n++)
        cr_assert_eq(h_node_channels(n, "*"), 0, "node %d has subscribers", n);
    cr_assert_eq(dlock_lease_release(l), 0);
    NODES_KEY_GONE(h_key("every"));

    /* The next grant, from the other agent, has a higher fence. */
    struct h_cl *b = h_client_at(1);
    dlock_lease *l2 = h_must_acquire(b, "every", 1500);
    cr_assert_gt(dlock_lease_fence(l2), f);
    cr_assert_eq(dlock_lease_release(l2), 0);
}

ITEST(quorum, waiter_woken_by_a_notice_from_any_node)
{
    /* Node 0 is gone, so the notice comes from node 1 or 2. (A waiter that
     * missed it would still retry once the holder's PTTL, at most 1.5 s, has
     * run out: this shows the hand-over with a node down, not what woke
     * the waiter; test_exclusion tells notices from retries.) */
    h_quorum_start(3, 2, "retry_fallback_ms = 10000", NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    h_node_kill(0);
    dlock_lease *l = h_must_acquire(a, "notice", 1500);
    struct h_acq w;
    h_acquire_async(b, "notice", 1500, 8000, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_HOLDS_FOR(300, !w.done);
    int64_t t0 = h_now_ms();
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("woken %lld ms after the release", (long long)(w.at_ms - t0));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* ---- nodes down ---- */

ITEST(quorum, minority_down_grants_majority_down_refuses)
{
    h_quorum_start(3, 1, "outage_wait_ms = 1000", NULL);
    struct h_cl *a = h_client();
    cr_assert_not_null(strstr(dlock_strerror(DLOCK_ENOQUORUM), "majority"), "strerror: %s",
                       dlock_strerror(DLOCK_ENOQUORUM));

    h_node_kill(2);
    dlock_lease *l = h_must_acquire(a, "down", 1500);
    char *tok = any_value(h_key("down"));
    cr_assert(h_is_token(tok));
    ALL_NODES_HOLD(h_key("down"), tok, 2);
    /* Renewed by the two nodes left: held past its TTL, no event. */
    H_HOLDS_FOR(2200, dlock_lease_valid(l) && a->nev == 0);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_gt(h_node_pttl(0, h_key("down")), 700, "not renewed on node 0");
    cr_assert_gt(h_node_pttl(1, h_key("down")), 700, "not renewed on node 1");
    cr_assert_eq(dlock_lease_release(l), 0);
    NODES_KEY_GONE(h_key("down"));

    /* Two of three down: no majority. A try-once is refused (it does not
     * ride the outage out, which takes outage_wait_ms). */
    h_node_kill(1);
    int rc = h_acquire(a, "down", 1500, 0, &l);
    cr_assert_eq(rc, DLOCK_ENOQUORUM, "try-once with 2 of 3 down: %s (%d)", dlock_strerror(rc), rc);
    NODES_KEY_GONE(h_key("down"));

    /* A waiting acquire rides the outage out for outage_wait_ms, then fails:
     * not before, and long before its own wait of a minute is up. */
    int64_t t0 = h_now_ms();
    struct h_acq w;
    h_acquire_async(a, "down", 1500, 60000, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    int64_t el = w.at_ms - t0;
    cr_assert_eq(w.status, DLOCK_ENOQUORUM, "waiting acquire with 2 of 3 down: %s (%d)",
                 dlock_strerror(w.status), w.status);
    cr_log_info("waiting acquire failed after %lld ms (outage_wait_ms 1000)", (long long)el);
    cr_assert_geq(el, 1000 - 1, "the waiting acquire gave up after %lld ms", (long long)el);
    NODES_KEY_GONE(h_key("down"));
    cr_assert_eq(dlock_client_ping(a->c), 0);
}

ITEST(quorum, waiter_rides_out_a_paused_majority)
{
    /* Two of three nodes hang (SIGSTOP): a waiting acquire keeps its place
     * and is granted once one of them answers again, within outage_wait_ms. */
    h_quorum_start(3, 1, "outage_wait_ms = 4000", NULL);
    struct h_cl *a = h_client();
    h_node_pause(1);
    h_node_pause(2);
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "ride", 1500, 0, &l);
    cr_assert_eq(rc, DLOCK_ENOQUORUM, "try-once with 2 of 3 hung: %s (%d)", dlock_strerror(rc), rc);
    struct h_acq w;
    h_acquire_async(a, "ride", 1500, 10000, &w);
    H_HOLDS_FOR(800, !w.done);
    h_node_resume(2);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter after node 2 came back: %s (%d)", dlock_strerror(w.status),
                 w.status);
    char *tok = any_value(h_key("ride"));
    cr_assert(h_is_token(tok));
    ALL_NODES_HOLD(h_key("ride"), tok, 2); /* nodes 0 and 2; node 1 still hangs */
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* Holds a lease, then takes two of three nodes away (killed, or hung with
 * SIGSTOP): the holder gets JEOPARDY, then LOST, and dlock_lease_valid() is
 * false by the TTL after the last renewal, no later than the LOST event. */
static void majority_goes_away(int hang)
{
    const uint32_t ttl = 1500;
    h_quorum_start(3, 1, NULL, hang ? "command_timeout_ms = 300" : NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "maj", ttl);
    H_HOLDS_FOR(200, dlock_lease_valid(l));
    int64_t t0 = h_now_ms();
    for (int n = 1; n <= 2; n++) {
        if (hang)
            h_node_pause(n);
        else
            h_node_kill(n);
    }
    /* Its last renewal was before t0: validity cannot outlast t0 + ttl.
     * Each look at dlock_lease_valid() is bracketed by clock reads: valid
     * seen after `before` means valid at `before` or later, whenever the
     * test got to run; it must then be before t0 + ttl. */
    int64_t invalid_at = 0;
    while (!h_events(a, l, DLOCK_STATE_LOST)) {
        cr_assert_lt(h_now_ms(), t0 + ttl + h_scaled_ms(H_EVENT_MS),
                     "no LOST event %d ms after the majority went",
                     (int)ttl + h_scaled_ms(H_EVENT_MS));
        int64_t before = h_now_ms();
        bool valid = dlock_lease_valid(l);
        cr_assert(!valid || before < t0 + ttl, "valid %lld ms after the majority went (ttl %u)",
                  (long long)(before - t0), ttl);
        if (!invalid_at && !valid)
            invalid_at = h_now_ms();
        h_pump_all(2);
    }
    int64_t lost_at = 0, jeopardy_at = 0;
    for (int i = 0; i < a->nev; i++) {
        if (a->ev[i].lease != l)
            continue;
        if (a->ev[i].state == DLOCK_STATE_LOST && !lost_at)
            lost_at = a->ev[i].at_ms;
        if (a->ev[i].state == DLOCK_STATE_JEOPARDY && !jeopardy_at)
            jeopardy_at = a->ev[i].at_ms;
    }
    cr_assert_not(dlock_lease_valid(l), "valid after LOST");
    if (!invalid_at)
        invalid_at = lost_at;
    cr_log_info("JEOPARDY +%lld ms, invalid +%lld ms, LOST +%lld ms (ttl %u)",
                (long long)(jeopardy_at - t0), (long long)(invalid_at - t0),
                (long long)(lost_at - t0), ttl);
    cr_assert_gt(jeopardy_at, 0, "no JEOPARDY event before LOST");
    cr_assert_leq(jeopardy_at, lost_at, "JEOPARDY after LOST");
    cr_assert_leq(invalid_at, lost_at);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

ITEST(quorum, holder_told_when_its_majority_is_killed)
{
    majority_goes_away(0);
}

ITEST(quorum, holder_told_when_its_majority_hangs)
{
    majority_goes_away(1);
}

/* ---- a minority clogged by foreign values ---- */

ITEST(quorum, every_clogged_subset_of_five)
{
    h_quorum_start(5, 1, "cohort_handoffs = 0" /* the marks hold the fence itself */, NULL);
    struct h_cl *a = h_client();
    for (int mask = 0; mask < 32; mask++) {
        char name[32], foreign[32];
        snprintf(name, sizeof name, "clog%02d", mask);
        snprintf(foreign, sizeof foreign, "foreign-%02d", mask);
        const char *key = h_key(name);
        int clogged = 0;
        for (int n = 0; n < 5; n++)
            if (mask & (1 << n)) {
                h_node_set_px(n, key, foreign, 60000);
                clogged++;
            }
        dlock_lease *l = NULL;
        int rc = h_acquire(a, name, 2000, 0, &l);
        if (clogged <= 2) {
            cr_assert_eq(rc, 0, "mask %02x (%d clogged): %s (%d)", mask, clogged,
                         dlock_strerror(rc), rc);
            uint64_t f = dlock_lease_fence(l);
            char *tok = NULL;
            int at_fence = 0;
            for (int n = 0; n < 5; n++) {
                if (mask & (1 << n))
                    continue;
                H_WAIT_UNTIL(H_EVENT_MS, h_node_exists(n, key));
                char *v = h_node_get(n, key);
                cr_assert(h_is_token(v), "mask %02x: node %d holds '%s'", mask, n,
                          v ? v : "(none)");
                if (!tok)
                    tok = v;
                cr_assert_str_eq(v, tok, "mask %02x: node %d holds another token", mask, n);
                uint64_t ctr = node_counter(n, name);
                cr_assert_leq(ctr, f, "mask %02x: node %d counter %" PRIu64 " > fence %" PRIu64,
                              mask, n, ctr, f);
                at_fence += ctr == f;
            }
            cr_assert_geq(at_fence, 3, "mask %02x: fence on %d node(s), not a majority", mask,
                          at_fence);
            cr_assert_eq(dlock_lease_release(l), 0);
        } else {
            cr_assert_eq(rc, DLOCK_EBUSY, "mask %02x (%d clogged): %s (%d)", mask, clogged,
                         dlock_strerror(rc), rc);
        }
        /* Whatever the outcome, our key goes from every unclogged node (a
         * released or refused key would otherwise stay 2 s). */
        for (int n = 0; n < 5; n++)
            if (!(mask & (1 << n)))
                H_NODE_KEY_GONE(n, key);
        /* and the foreign values are untouched */
        for (int n = 0; n < 5; n++)
            if (mask & (1 << n)) {
                char *v = h_node_get(n, key);
                cr_assert(v && strcmp(v, foreign) == 0,
                          "mask %02x: node %d's foreign value is '%s'", mask, n, v ? v : "(gone)");
                cr_assert_gt(h_node_pttl(n, key), 50000, "mask %02x: node %d's TTL changed", mask,
                             n);
            }
    }
}

/* ---- crash-restart: a restarted node does not count ---- */

/* n nodes, majority m. Client 1 (agent 0) holds the lock on nodes 0..m-1:
 * the others were clogged during its acquire, then cleared. Node m-1 is
 * killed and restarted empty. Without restart exclusion client 2 (agent 1)
 * could now take nodes m-1..n-1, a majority, while client 1 still holds. */
static void crash_restart(int n)
{
    const uint32_t ttl = 3000; /* renewed every second */
    h_quorum_start(n, 2, "max_ttl_ms = 3000\ndefault_ttl_ms = 3000", NULL);
    const int m = n / 2 + 1, victim = m - 1;
    struct h_cl *c1 = h_client_at(0), *c2 = h_client_at(1);
    const char *key = h_key("cr");
    for (int i = m; i < n; i++)
        h_node_set_px(i, key, "foreign", 60000);
    dlock_lease *l1 = h_must_acquire(c1, "cr", ttl);
    uint64_t f1 = dlock_lease_fence(l1);
    char *tok = any_value(key);
    cr_assert(h_is_token(tok));
    H_WAIT_UNTIL(H_EVENT_MS, nodes_holding(key, tok) == m);
    for (int i = m; i < n; i++)
        h_node_del(i, key);
    cr_assert_eq(log_lines_with(1, EXCLUDED, H.node[victim].sock), 0,
                 "node %d excluded before its restart", victim);

    /* Right after a renewal (a full TTL on node 0), so that client 1 stays
     * valid and renewal-free for the next second. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_pttl(0, key) > (long long)ttl - 150);
    h_node_restart(victim);
    cr_assert_eq(h_node_exists(victim, key), 0);
    /* Agent 1 is back on the node and knows it restarted. */
    H_WAIT_UNTIL(H_EVENT_MS, log_lines_with(1, EXCLUDED, H.node[victim].sock) > 0);
    dlock_lease *l2 = NULL;
    int rc = h_acquire(c2, "cr", ttl, 0, &l2);
    int valid1 = dlock_lease_valid(l1);
    cr_assert(valid1, "client 1's lease was lost before client 2 tried: the scenario is void");
    cr_assert_neq(rc, 0, "client 2 granted (fence %" PRIu64 ") while client 1 holds",
                  rc == 0 ? dlock_lease_fence(l2) : 0);
    cr_assert(rc == DLOCK_EBUSY || rc == DLOCK_ENOQUORUM, "client 2's try: %s (%d)",
              dlock_strerror(rc), rc);
    cr_log_info("n=%d: client 2's try-once while client 1 holds: %s", n, dlock_strerror(rc));
    /* Client 2's attempt took nothing from client 1. */
    for (int i = 0; i < victim; i++) {
        char *v = h_node_get(i, key);
        cr_assert(v && strcmp(v, tok) == 0, "node %d lost client 1's key", i);
    }

    /* Now client 2 waits: it gets the lock once client 1's lease is lost
     * (its renewals cannot reach a majority), and never while it is valid. */
    struct h_acq w;
    h_acquire_async(c2, "cr", ttl, 10000, &w);
    int64_t end = h_deadline(10000);
    while (!w.done) {
        cr_assert_lt(h_now_ms(), end, "client 2 still waiting after %d ms", h_scaled_ms(10000));
        h_pump_all(2);
        if (w.done && w.status == 0)
            cr_assert_not(dlock_lease_valid(l1),
                          "client 2 granted while client 1's lease is valid");
    }
    cr_assert_eq(w.status, 0, "client 2: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_gt(dlock_lease_fence(w.lease), f1);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(c1, l1, DLOCK_STATE_LOST) > 0);
    cr_assert_eq(dlock_lease_release(l1), DLOCK_ELOST);
    char *tok2 = NULL;
    H_WAIT_UNTIL(H_EVENT_MS, (tok2 = majority_value(key, m)) != NULL);
    cr_assert(h_is_token(tok2) && strcmp(tok2, tok) != 0, "client 2's key: '%s'", tok2);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(quorum, restarted_node_does_not_count_3)
{
    crash_restart(3);
}

ITEST(quorum, restarted_node_does_not_count_5)
{
    crash_restart(5);
}

ITEST(quorum, two_restarted_nodes_leave_no_quorum)
{
    /* Nodes 1 and 2 restart empty: node 0 alone is no majority, however few
     * nodes count, until their exclusion has passed. */
    /* Excluded for max_ttl_ms after the restart: 5 s, so that the refusal
     * is seen however slowly the test gets to it. */
    h_quorum_start(3, 1, "max_ttl_ms = 5000", NULL);
    struct h_cl *a = h_client();
    int64_t t0 = h_now_ms();
    h_node_restart(1);
    h_node_restart(2);
    H_WAIT_UNTIL(H_EVENT_MS, log_lines_with(0, EXCLUDED, H.node[1].sock) > 0 &&
                                 log_lines_with(0, EXCLUDED, H.node[2].sock) > 0);
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "two", 1500, 0, &l);
    cr_assert_neq(rc, 0, "granted with two of three nodes just restarted");
    cr_assert_eq(rc, DLOCK_ENOQUORUM, "%s (%d)", dlock_strerror(rc), rc);
    /* max_ttl_ms after the restart they count again. */
    int64_t end = h_deadline(5000 + H_EVENT_MS);
    while ((rc = h_acquire(a, "two", 1500, 0, &l)) != 0) {
        cr_assert_eq(rc, DLOCK_ENOQUORUM, "%s (%d)", dlock_strerror(rc), rc);
        cr_assert_lt(h_now_ms(), end, "still no quorum %d ms after the restarts",
                     h_scaled_ms(5000 + H_EVENT_MS));
        h_pump_all(20);
    }
    int64_t el = h_now_ms() - t0;
    cr_log_info("granted %lld ms after the restarts (max_ttl_ms 5000)", (long long)el);
    /* Not before (Redis counts uptime in whole seconds: one less). */
    cr_assert_geq(el, 4000, "the restarted nodes counted after %lld ms", (long long)el);
    ALL_NODES_HOLD(h_key("two"), any_value(h_key("two")), 3);
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* ---- no key left behind ---- */

ITEST(quorum, refused_acquire_leaves_no_key)
{
    /* Nodes 1 and 2 hold foreign values: node 0 takes our key, the acquire
     * fails, and the key goes from node 0 well before its TTL. */
    h_quorum_start(3, 1, NULL, NULL);
    struct h_cl *a = h_client();
    const char *key = h_key("refused");
    h_node_set_px(1, key, "foreign-1", 60000);
    h_node_set_px(2, key, "foreign-2", 60000);
    for (int i = 0; i < 5; i++) {
        dlock_lease *l = NULL;
        int rc = h_acquire(a, "refused", 2000, 0, &l);
        cr_assert_eq(rc, DLOCK_EBUSY, "attempt %d: %s (%d)", i, dlock_strerror(rc), rc);
        H_NODE_KEY_GONE(0, key);
        cr_assert_str_eq(h_node_get(1, key), "foreign-1");
        cr_assert_str_eq(h_node_get(2, key), "foreign-2");
    }
    /* A waiting acquire that runs out leaves nothing either. */
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "refused", 2000, 500, &l);
    cr_assert_eq(rc, DLOCK_ETIMEDOUT, "%s (%d)", dlock_strerror(rc), rc);
    H_NODE_KEY_GONE(0, key);
    /* Once the foreign values go, the lock is free. */
    h_node_del(1, key);
    dlock_lease *ok = h_must_acquire(a, "refused", 2000);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_exists(0, key) && h_node_exists(1, key));
    cr_assert(h_is_token(h_node_get(0, key)));
    cr_assert_str_eq(h_node_get(0, key), h_node_get(1, key));
    cr_assert_str_eq(h_node_get(2, key), "foreign-2");
    cr_assert_eq(dlock_lease_release(ok), 0);
}

ITEST(quorum, unanswered_nodes_are_cleaned_when_they_return)
{
    /* A node that did not answer in time (SIGSTOP) still runs our SET once it
     * wakes; the agent must delete that key then, not leave it for the TTL
     * (3 s from the wake-up at the earliest; the checks end 2.5 s after it).
     * The agent drops its link to a node silent for command_timeout_ms, here
     * before the acquire is decided (node_timeout_ms 300): the delete cannot
     * ride behind the SET on the same link, it has to be sent again. */
    const uint32_t ttl = 3000;
    h_quorum_start(3, 1, "max_ttl_ms = 3000\ndefault_ttl_ms = 3000", "command_timeout_ms = 100");
    struct h_cl *a = h_client();
    const char *key = h_key("late");

    /* Node 2 hangs, node 1 is clogged: no majority. */
    h_node_pause(2);
    h_node_set_px(1, key, "foreign", 60000);
    dlock_lease *l = NULL;
    int rc = h_acquire(a, "late", ttl, 0, &l);
    cr_assert(rc == DLOCK_EBUSY || rc == DLOCK_ENOQUORUM, "%s (%d)", dlock_strerror(rc), rc);
    H_NODE_KEY_GONE(0, key);
    int64_t t0 = h_now_ms();
    h_node_resume(2);
    int seen = h_node_exists(2, key);
    H_NODE_KEY_GONE(2, key); /* deleted, not left to its TTL of 3 s */
    cr_log_info("node 2: key %s after the resume, gone %lld ms later", seen ? "seen" : "not seen",
                (long long)(h_now_ms() - t0));
    cr_assert_str_eq(h_node_get(1, key), "foreign");

    /* Two nodes hang: no quorum; both are cleaned when they wake. */
    const char *key2 = h_key("late2");
    h_node_pause(1);
    h_node_pause(2);
    rc = h_acquire(a, "late2", ttl, 0, &l);
    cr_assert_eq(rc, DLOCK_ENOQUORUM, "%s (%d)", dlock_strerror(rc), rc);
    H_NODE_KEY_GONE(0, key2);
    t0 = h_now_ms();
    h_node_resume(1);
    h_node_resume(2);
    seen = h_node_exists(1, key2) + h_node_exists(2, key2);
    H_NODE_KEY_GONE(1, key2);
    H_NODE_KEY_GONE(2, key2);
    cr_log_info("nodes 1 and 2: key on %d after the resume, gone %lld ms later", seen,
                (long long)(h_now_ms() - t0));
    /* and the lock works again */
    dlock_lease *ok = h_must_acquire(a, "late2", ttl);
    ALL_NODES_HOLD(key2, any_value(key2), 3);
    cr_assert_eq(dlock_lease_release(ok), 0);
}

/* ---- fencing ---- */

/* Acquires name through cl (waiting: the previous holder's delete may still
 * be on its way), checks the fence against prev and the floor, releases. */
static uint64_t fenced_cycle(struct h_cl *cl, const char *name, uint64_t prev, uint64_t floor,
                             const char *when)
{
    dlock_lease *l = NULL;
    int rc = h_acquire(cl, name, 1500, 3000, &l);
    cr_assert_eq(rc, 0, "%s: acquire on agent %d: %s (%d)", when, cl->agent, dlock_strerror(rc),
                 rc);
    uint64_t f = dlock_lease_fence(l);
    cr_assert_gt(f, prev, "%s: agent %d got fence %" PRIu64 " after %" PRIu64, when, cl->agent, f,
                 prev);
    cr_assert_gt(f, floor, "%s: fence %" PRIu64 " not above the preset counters %" PRIu64, when, f,
                 floor);
    cr_assert_eq(dlock_lease_release(l), 0);
    return f;
}

ITEST(quorum, fences_increase_across_agents_and_node_replacements)
{
    h_quorum_start(3, 3, "cohort_handoffs = 0" /* the marks hold the fence itself */, NULL);
    struct h_cl *cl[3] = {h_client_at(0), h_client_at(1), h_client_at(2)};
    /* Marks far ahead of every clock: tokens must come from them. */
    uint64_t big = (uint64_t)realtime_us() + 1000000000000ull;
    char v[32];
    snprintf(v, sizeof v, "%" PRIu64, big);
    for (int n = 0; n < 3; n++)
        freeReplyObject(h_node_cmd(n, "SET %s %s", hw_key("fx"), v));
    uint64_t prev = fenced_cycle(cl[0], "fx", big, big, "first grant");
    cr_assert_eq(prev, big + 1, "first fence %" PRIu64 ", expected %" PRIu64, prev, big + 1);
    for (int i = 1; i < 30; i++)
        prev = fenced_cycle(cl[i % 3], "fx", prev, big, "before any restart");
    /* Replace node 2, then node 0, by empty ones; keep granting through
     * their exclusion and past it. */
    const int victims[2] = {2, 0};
    int k = 0;
    for (int r = 0; r < 2; r++) {
        h_node_restart(victims[r]);
        cr_assert_eq(h_node_exists(victims[r], hw_key("fx")), 0);
        char when[64];
        snprintf(when, sizeof when, "after node %d restarted", victims[r]);
        int64_t until = h_now_ms() + 2000 + 1500; /* max_ttl_ms + slack */
        int grants = 0;
        while (h_now_ms() < until || grants < 10) {
            prev = fenced_cycle(cl[k++ % 3], "fx", prev, big, when);
            grants++;
        }
        cr_log_info("%s: %d grants, node %d's counter %" PRIu64 " (last fence %" PRIu64 ")", when,
                    grants, victims[r], node_counter(victims[r], "fx"), prev);
    }
    /* By now the replaced nodes count again, and the grants wrote the fence
     * back to a majority. */
    int at_fence = 0;
    for (int n = 0; n < 3; n++)
        at_fence += node_counter(n, "fx") == prev;
    cr_assert_geq(at_fence, 2, "the last fence is on %d node(s)", at_fence);
}

/* ---- found in review ---- */

/* The calls of a command on node i so far (INFO commandstats). */
static long long node_calls(int i, const char *cmd)
{
    redisReply *r = h_node_cmd(i, "INFO commandstats");
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    char field[64];
    snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(r->str, field);
    long long n = p ? strtoll(p + strlen(field), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

ITEST(quorum, waiters_do_not_spin_while_a_minority_lacks_the_key)
{
    /* The lock is held on nodes 0 and 1 only. Each attempt of the waiter on
     * the other agent takes node 2 and must give it back; that clean-up must
     * not publish a release notice, or every waiter would retry at once, in
     * a loop, for as long as the lock is held. */
    h_quorum_start(3, 2, NULL, NULL);
    struct h_cl *c1 = h_client_at(0), *c2 = h_client_at(1);
    dlock_lease *l1 = h_must_acquire(c1, "spin", 1500);
    ALL_NODES_HOLD(h_key("spin"), any_value(h_key("spin")), 3);
    h_node_del(2, h_key("spin"));
    long long before = node_calls(0, "evalsha");
    dlock_lease *l2 = NULL;
    int rc = h_acquire(c2, "spin", 1500, 1500, &l2);
    cr_assert_eq(rc, DLOCK_ETIMEDOUT, "%s (%d)", dlock_strerror(rc), rc);
    long long calls = node_calls(0, "evalsha") - before;
    /* About 12 tries (fallback 100-150 ms) and their clean-ups, plus a few
     * renewals of client 1; a spinning waiter makes thousands. */
    cr_log_info("node 0 ran %lld scripts while the waiter waited 1.5 s", calls);
    cr_assert_lt(calls, 300, "the waiter spun: %lld scripts on node 0 in 1.5 s", calls);
    cr_assert(dlock_lease_valid(l1));
    cr_assert_eq(dlock_lease_release(l1), 0);
}

ITEST(quorum, lease_lost_by_renewal_leaves_no_key_on_the_minority)
{
    /* The key vanishes from nodes 0 and 1: the next renewal proves the lease
     * lost. Node 2 renewed it meanwhile and must let it go at once rather
     * than hold it for another TTL. */
    h_quorum_start(3, 1, "max_ttl_ms = 3000\ndefault_ttl_ms = 3000", NULL);
    struct h_cl *c = h_client();
    const char *key = h_key("renew-lost");
    dlock_lease *l = h_must_acquire(c, "renew-lost", 3000);
    char *tok = any_value(key);
    ALL_NODES_HOLD(key, tok, 3);
    h_node_del(0, key);
    h_node_del(1, key);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(c, l, DLOCK_STATE_LOST) > 0);
    cr_assert_not(dlock_lease_valid(l));
    H_NODE_KEY_GONE(2, key); /* at once, not after another TTL */
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

ITEST(quorum, shutdown_with_a_node_hung_exits_cleanly)
{
    /* Releases still unanswered by a hung node at shutdown are answered (as
     * unavailable) when the agent lets go of its links: nothing leaks (the
     * sanitizer build fails a leak at exit) and the exit status is 0. */
    h_quorum_start(3, 1, "shutdown_timeout_ms = 300", NULL);
    struct h_cl *c = h_client();
    dlock_lease *l = h_must_acquire(c, "hung", 1500);
    ALL_NODES_HOLD(h_key("hung"), any_value(h_key("hung")), 3);
    h_node_pause(2);
    cr_assert_eq(dlock_lease_release(l), 0);
    dlock_lease *l2 = NULL;
    cr_assert_eq(h_acquire(c, "hung-2", 1500, 0, &l2), 0);
    cr_assert_eq(h_agent_stop(0), 0);
    h_node_resume(2);
}

ITEST(quorum, node_replaced_by_another_server_does_not_count)
{
    /* Node 2 is replaced, at the same address, by a server that has been up
     * for longer than max_ttl_ms but holds none of the keys: a new run id.
     * Its uptime says nothing about what it lost; it must be excluded from
     * the moment it is seen, or client 2 could take nodes 1 and 2 while
     * client 1 holds the lock on nodes 0 and 2. */
    const uint32_t ttl = 3000;
    h_redis_spare("spare.sock");
    h_quorum_start(3, 2, "max_ttl_ms = 3000\ndefault_ttl_ms = 3000", NULL);
    struct h_cl *c1 = h_client_at(0), *c2 = h_client_at(1);
    const char *key = h_key("replaced");
    h_node_set_px(1, key, "foreign", 60000);
    dlock_lease *l1 = h_must_acquire(c1, "replaced", ttl);
    char *tok = any_value(key);
    H_WAIT_UNTIL(H_EVENT_MS, nodes_holding(key, tok) == 2 && h_node_exists(2, key));
    h_node_del(1, key);
    /* Right after a renewal, so that client 1 stays valid for a while. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_pttl(0, key) > (long long)ttl - 150);
    char node2[H_PATH];
    snprintf(node2, sizeof node2, "%s", H.node[2].sock);
    h_node_kill(2);
    cr_assert_eq(rename(h_path("spare.sock"), node2), 0, "rename: %s", strerror(errno));
    H_WAIT_UNTIL(3000, log_lines_with(1, EXCLUDED, node2) > 0);
    dlock_lease *l2 = NULL;
    int rc = h_acquire(c2, "replaced", ttl, 0, &l2);
    cr_assert(dlock_lease_valid(l1), "client 1's lease was lost first: the scenario is void");
    cr_assert_neq(rc, 0, "client 2 granted while client 1 holds");
    cr_assert(rc == DLOCK_EBUSY || rc == DLOCK_ENOQUORUM, "%s (%d)", dlock_strerror(rc), rc);
}

ITEST(quorum, holder_is_read_from_a_majority)
{
    h_quorum_start(3, 1, NULL, NULL);
    struct h_cl *c = h_client();
    dlock_lease *l = h_must_acquire(c, "seen", 1500);
    ALL_NODES_HOLD(h_key("seen"), any_value(h_key("seen")), 3);
    cr_assert_not_null(strstr(h_status_ask(0, "holder seen\n"), "on 3 of 3 nodes"));
    const char *json = h_status_ask(0, "holder-json seen\n");
    cr_assert(json && strstr(json, "\"dlock\":true,") &&
                  strstr(json, ",\"nodes_holding\":3,\"nodes\":3,\"kind\":\"exclusive\","),
              "%s", json);
    json = h_status_ask(0, "status-json\n");
    cr_assert(json && strstr(json, "\"mode\":\"quorum\""), "%s", json);
    cr_assert_eq(dlock_lease_release(l), 0);
    /* Node 2 silent, a foreign value on node 1, node 0 free: no value (nor
     * its absence) is on a majority, so nobody can say. */
    h_node_set_px(1, h_key("split"), "foreign", 60000);
    h_node_pause(2);
    cr_assert_not_null(strstr(h_status_ask(0, "holder split\n"), "split: undetermined"), "%s",
                       h_status_ask(0, "holder split\n"));
    /* The JSON's other form, with exactly these members (docs/status.md). */
    json = h_status_ask(0, "holder-json split\n");
    cr_assert(json && strcmp(json, "{\"name\":\"split\",\"undetermined\":true,\"nodes\":3}\n") == 0,
              "%s", json);
    /* dlockctl holder: neither held (0) nor free (1), but 69. */
    const char *status = h_keep(h_path("status0.sock"));
    cr_assert_eq(h_ctl(10000, "-S", status, "holder", "split", NULL), 69, "%s",
                 h_read_file(h_path("ctl.out")));
    cr_assert_eq(h_ctl(10000, "-S", status, "holder", "--json", "split", NULL), 69);
    h_node_resume(2);
}

/* ---- fresh nodes and nodes that keep every write ---- */

/* The last line of agent i's log that contains both needles, or NULL (a
 * static buffer). */
static const char *last_log_line(int agent, const char *a, const char *b)
{
    static char found[2048];
    return scan_log(agent, a, b, found) ? found : NULL;
}

/* How often needle occurs in s. */
static int occurrences(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The numbers after each `"member":` of a status-json answer, in order;
 * returns how many (at most max). true/false read as 1/0. */
static int json_numbers(const char *json, const char *member, long long *out, int max)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", member);
    int n = 0;
    for (const char *p = json; n < max && (p = strstr(p, pat)); n++) {
        p += strlen(pat);
        out[n] = strncmp(p, "true", 4) == 0 ? 1 : strtoll(p, NULL, 10);
    }
    return n;
}

/* dlockctl status, as text. */
static const char *ctl_status(void)
{
    unlink(h_path("ctl.out"));
    cr_assert_eq(h_ctl(5000, "-S", h_path("status0.sock"), "status", NULL), 0);
    const char *out = h_read_file(h_path("ctl.out"));
    cr_assert_not_null(out);
    return out;
}

#define JOINS_NOW "joins quorums now"

/* Three redis-servers just started, an agent with the default settings: each
 * node is excluded for max_ttl_ms (45 s by default) after its start, which
 * the log, the status and a refused client are told, with the time left;
 * then the nodes join and a lock is granted, within a minute of their start
 * (with the former default of 24 h, not for a day). */
ITEST(quorum, fresh_nodes_count_within_a_minute_by_default)
{
    h_nodes_start(3);
    int64_t t0 = h_now_ms(); /* the nodes started a moment before */
    h_agent_config(0, NULL, NULL);
    h_agent_spawn(0);
    for (int n = 0; n < 3; n++) {
        H_WAIT_UNTIL(10000, log_lines_with(0, EXCLUDED, H.node[n].sock) > 0);
        const char *line = last_log_line(0, EXCLUDED, H.node[n].sock);
        const char *in = strstr(line, "joins them in ");
        cr_assert_not_null(in, "the log does not say when node %d joins: %s", n, line);
        long long s = strtoll(in + strlen("joins them in "), NULL, 10);
        cr_assert(s >= 30 && s <= 45, "node %d joins in %lld s: %s", n, s, line);
    }

    /* A client is told why, and for how long. */
    struct h_cl *cl = h_client();
    dlock_lease *l = NULL;
    int rc = h_acquire(cl, "fresh", 0, 0, &l);
    cr_assert_eq(rc, DLOCK_ENOQUORUM, "%s (%d)", dlock_strerror(rc), rc);
    const char *why = dlock_client_strerror(cl->c, rc);
    cr_assert(strstr(why, "3 of 3 nodes are excluded") && strstr(why, "joins quorums in"),
              "the refusal does not say why: %s", why);
    H_WAIT_UNTIL(5000, log_lines_with(0, "acquire of fresh refused", "joins quorums in") > 0);
    /* A TTL above the default cap is refused, and the cap named. */
    rc = h_acquire(cl, "long", 60000, 0, &l);
    cr_assert_eq(rc, DLOCK_EINVAL, "TTL of 60 s: %s (%d)", dlock_strerror(rc), rc);
    why = dlock_client_strerror(cl->c, rc);
    cr_assert_not_null(strstr(why, "30 to 45000 ms"), "the refusal does not name the range: %s",
                       why);

    /* So are operators. */
    const char *text = ctl_status();
    cr_assert_eq(occurrences(text, "joins in "), 3, "dlockctl status:\n%s", text);
    const char *json = h_status_ask(0, "status-json\n");
    cr_assert_not_null(json);
    long long left[3], durable[3];
    cr_assert_eq(json_numbers(json, "excluded_for_ms", left, 3), 3, "%s", json);
    cr_assert_eq(json_numbers(json, "durable", durable, 3), 3, "%s", json);
    for (int n = 0; n < 3; n++) {
        cr_assert(left[n] > 0 && left[n] <= 45000, "node %d: excluded_for_ms %lld", n, left[n]);
        cr_assert_eq(durable[n], 0, "node %d persists nothing, yet reads durable", n);
    }

    /* Once the exclusion has passed, the lock is granted. */
    while ((rc = h_acquire(cl, "fresh", 0, 0, &l)) != 0) {
        cr_assert_eq(rc, DLOCK_ENOQUORUM, "%s (%d)", dlock_strerror(rc), rc);
        cr_assert_lt(h_now_ms() - t0, 90000, "no grant 90 s after the nodes started");
        h_sleep_ms(100);
    }
    int64_t el = h_now_ms() - t0;
    cr_log_info("granted %lld ms after the nodes started", (long long)el);
    cr_assert_geq(el, 40000, "granted after %lld ms: the fresh nodes were not excluded",
                  (long long)el);
    for (int n = 0; n < 3; n++)
        H_WAIT_UNTIL(5000, log_lines_with(0, JOINS_NOW, H.node[n].sock) > 0);
    text = ctl_status();
    cr_assert_eq(occurrences(text, "joins in "), 0, "dlockctl status:\n%s", text);
    cr_assert_eq(occurrences(text, " counts "), 3, "dlockctl status:\n%s", text);
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* Gives every node appendonly yes with appendfsync always (and extra, more
 * redis-server arguments for node n, or NULL). */
static void durable_nodes(int nnodes, const char *(*extra)(int n))
{
    for (int n = 0; n < nnodes; n++) {
        char args[512];
        snprintf(args, sizeof args,
                 "--appendonly yes --appendfsync always --appenddirname aof%d %s", n,
                 extra ? extra(n) : "");
        h_node_set_args(n, args);
    }
}

#define NO_EXCLUSION "no restart exclusion"

/* Nodes that lose no acknowledged write in a restart need no exclusion: on
 * fresh ones the first acquire is granted, and a node restarted while it
 * holds a key still has it, and counts at once. */
ITEST(quorum, nodes_that_keep_every_write_count_at_once)
{
    durable_nodes(3, NULL);
    h_nodes_start(3);
    /* A node timeout a loaded (or sanitized) run can keep to: the grants
     * below need both of two nodes. */
    h_agent_config(0, "min_ttl_ms = 1000", "node_timeout_ms = 500");
    h_agent_spawn(0);
    struct h_cl *cl = h_client();
    dlock_lease *l = NULL;
    /* The wait covers the agent's links coming up, not an exclusion. */
    int rc = h_acquire(cl, "durable", 0, 5000, &l);
    cr_assert_eq(rc, 0, "fresh nodes that keep every write: %s (%s)", dlock_strerror(rc),
                 dlock_client_strerror(cl->c, rc));
    cr_assert_eq(dlock_lease_release(l), 0);
    /* The grant needed two links only; now every one comes up. */
    H_WAIT_UNTIL(5000, occurrences(h_status_ask(0, "status-json\n"), "\"connected\":true") == 3);
    for (int n = 0; n < 3; n++)
        cr_assert_eq(log_lines_with(0, NO_EXCLUSION, H.node[n].sock), 1, "node %d", n);
    cr_assert_eq(log_lines_with(0, EXCLUDED, ""), 0, "a node was excluded");
    const char *json = h_status_ask(0, "status-json\n");
    long long left[3], durable[3];
    cr_assert_eq(json_numbers(json, "excluded_for_ms", left, 3), 3, "%s", json);
    cr_assert_eq(json_numbers(json, "durable", durable, 3), 3, "%s", json);
    for (int n = 0; n < 3; n++)
        cr_assert(left[n] == 0 && durable[n] == 1, "node %d: %s", n, json);
    rc = h_acquire(cl, "durable", 0, 5000, &l);
    cr_assert_eq(rc, 0, "durable: %s", dlock_strerror(rc));
    ALL_NODES_HOLD(h_key("durable"), any_value(h_key("durable")), 3);

    /* Node 1 crashes and comes back with its keys, under a new run id. */
    h_node_restart(1);
    cr_assert(h_node_exists(1, h_key("durable")), "node 1 lost the key in its restart");
    H_WAIT_UNTIL(5000, log_lines_with(0, NO_EXCLUSION, H.node[1].sock) == 2);
    cr_assert_eq(log_lines_with(0, EXCLUDED, ""), 0, "the restarted node was excluded");
    H_WAIT_UNTIL(5000, occurrences(h_status_ask(0, "status-json\n"), "\"connected\":true") == 3);
    /* With node 0 silent, nodes 1 and 2 make the majority. */
    h_node_pause(0);
    dlock_lease *l2 = NULL;
    rc = h_acquire(cl, "durable-2", 0, 5000, &l2);
    cr_assert_eq(rc, 0, "nodes 1 and 2: %s (%s)", dlock_strerror(rc),
                 dlock_client_strerror(cl->c, rc));
    h_node_resume(0);
    cr_assert_eq(dlock_lease_release(l2), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* The agent's user on node 2 may not run CONFIG. */
static const char *acl_user(int n)
{
    return n == 2 ? "--user dlock on >pw ~* &* +@all -config" : "--user dlock on >pw ~* &* +@all";
}

/* A node whose persistence the agent may not read is taken for one that can
 * lose writes: excluded when fresh and after a restart, while the others
 * count at once. The refusal is logged once. */
ITEST(quorum, node_hiding_its_persistence_is_excluded)
{
    durable_nodes(3, acl_user);
    h_nodes_start(3);
    h_agent_config(0, "min_ttl_ms = 1000", "user = dlock\npassword = pw\nnode_timeout_ms = 500");
    h_agent_start_n(0);
    const char *refused = "CONFIG GET appendonly refused";
    cr_assert_eq(log_lines_with(0, refused, H.node[2].sock), 1);
    cr_assert_eq(log_lines_with(0, refused, ""), 1, "only node 2 refuses");
    cr_assert_eq(log_lines_with(0, EXCLUDED, H.node[2].sock), 1);
    cr_assert_eq(log_lines_with(0, NO_EXCLUSION, H.node[2].sock), 0);
    /* Nodes 0 and 1 make the majority; node 2 gets the key all the same. */
    struct h_cl *cl = h_client();
    dlock_lease *l = NULL;
    int rc = h_acquire(cl, "hidden", 0, 5000, &l);
    cr_assert_eq(rc, 0, "hidden: %s", dlock_strerror(rc));
    ALL_NODES_HOLD(h_key("hidden"), any_value(h_key("hidden")), 3);
    cr_assert_eq(dlock_lease_release(l), 0);

    h_node_restart(0);
    h_node_restart(2);
    H_WAIT_UNTIL(5000, log_lines_with(0, EXCLUDED, H.node[2].sock) == 2);
    H_WAIT_UNTIL(5000, log_lines_with(0, NO_EXCLUSION, H.node[0].sock) == 2);
    cr_assert_eq(log_lines_with(0, EXCLUDED, H.node[0].sock), 0, "node 0 was excluded");
    cr_assert_eq(log_lines_with(0, "CONFIG GET", "refused"), 1, "the refusal was logged again");
    const char *json = h_status_ask(0, "status-json\n");
    long long left[3], durable[3];
    cr_assert_eq(json_numbers(json, "excluded_for_ms", left, 3), 3, "%s", json);
    cr_assert_eq(json_numbers(json, "durable", durable, 3), 3, "%s", json);
    cr_assert(durable[0] && durable[1] && !durable[2], "%s", json);
    cr_assert(left[0] == 0 && left[1] == 0 && left[2] > 0, "%s", json);
}
