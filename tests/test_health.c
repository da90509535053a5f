/* SPDX-License-Identifier: BSD-3-Clause */
/* test_health.c -- the agent's health: /healthz stays 200 while the agent
 * runs, /readyz (and the status socket's "health", and `dlockctl health`
 * with its exit codes) follow Redis: ready while it answers, not ready (503,
 * exit 2) while it is stopped, ready again once it is back; no agent is
 * exit 69. The metrics of the health work move as the locks do: the
 * waiters gauge rises and falls, the queue-wait and hold histograms and the
 * acquire outcomes count, build and process metrics are there, and the
 * whole scrape passes `promtool check metrics` (when promtool is
 * installed), and serves every metric the dashboard and the alert rules
 * of packaging/monitoring name. Per-name gauges are off unless configured, bounded by
 * metrics_names_max, and their label values escaped. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* ---- HTTP ---- */

/* Sends req to 127.0.0.1:port and returns the whole answer (static); the
 * agent closes after it. */
static const char *http_get(int port, const char *req)
{
    static char buf[1 << 18];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s",
              strerror(errno));
    cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t len = 0;
    int64_t end = h_deadline(10000);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end - h_now_ms());
        cr_assert_gt(left, 0, "no whole HTTP answer in time");
        if (poll(&p, 1, left) <= 0)
            continue;
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        cr_assert_geq(n, 0, "read: %s", strerror(errno));
        if (n == 0)
            break;
        len += (size_t)n;
        cr_assert_lt(len, sizeof buf - 1, "HTTP answer larger than the test's buffer");
    }
    close(fd);
    buf[len] = '\0';
    return buf;
}

/* The status code of an HTTP answer. */
static int http_code(const char *answer)
{
    int code = 0;
    cr_assert_eq(sscanf(answer, "HTTP/1.0 %d", &code), 1, "not an HTTP answer: %.80s", answer);
    return code;
}

static const char *http_body(const char *answer)
{
    const char *b = strstr(answer, "\r\n\r\n");
    cr_assert_not_null(b, "no end of the headers: %.200s", answer);
    return b + 4;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int ready_code(int port)
{
    return http_code(http_get(port, "GET /readyz HTTP/1.0\r\n\r\n"));
}

/* ---- dlockctl ---- */

static const char *status_sock(void)
{
    return h_path("status0.sock");
}

/* `dlockctl -S STATUS health ARGS...`: its exit status; its output in
 * *out (static until the next call). */
static int ctl_health(const char **out, const char *arg)
{
    unlink(h_path("ctl.out")); /* dlockctl's output is appended to it */
    int st = arg ? h_ctl(5000, "-S", status_sock(), "health", arg, (const char *)NULL)
                 : h_ctl(5000, "-S", status_sock(), "health", (const char *)NULL);
    const char *o = h_read_file(h_path("ctl.out"));
    *out = h_keep(o ? o : "");
    return st;
}

/* ---- metrics ---- */

/* The value of the series written exactly as `series` (name and labels) in
 * the exposition text; fails the test when it is not there. */
static double series(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; (p = strstr(p, series)); p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    cr_assert_fail("no series %s in the metrics:\n%s", series, text);
    return 0;
}

static bool has_series(const char *text, const char *series_prefix)
{
    size_t n = strlen(series_prefix);
    for (const char *p = text; (p = strstr(p, series_prefix)); p += n)
        if (p == text || p[-1] == '\n')
            return true;
    return false;
}

/* The number of lines that start with prefix. */
static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    size_t len = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        n += strncmp(p, prefix, len) == 0;
    return n;
}

static const char *metrics(void)
{
    const char *m = h_status_ask(0, "metrics\n");
    cr_assert_not_null(m, "no metrics");
    return h_keep(m);
}

static double gauge_now(const char *name)
{
    return series(metrics(), name);
}

/* Pipes text to `promtool check metrics`; false (with why logged) when
 * promtool is not installed. */
static bool promtool_check(const char *text)
{
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        cr_log_warn("promtool is not installed (Debian package prometheus): the scrape was not "
                    "checked by promtool");
        return false;
    }
    const char *file = h_path("scrape.txt");
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
    char cmd[H_PATH * 2 + 64];
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s > %s 2>&1", file,
             h_path("promtool.out"));
    int st = system(cmd);
    const char *out = h_read_file(h_path("promtool.out"));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "promtool check metrics failed:\n%s",
              out ? out : "");
    /* Lint problems are printed even when it exits 0 in some versions. */
    cr_assert(!out || !out[0], "promtool check metrics:\n%s", out);
    return true;
}

/* Every metric the dashboard and the alert rules of packaging/monitoring
 * name is served by this agent (the scrape promtool_check() saved): a
 * renamed metric breaks them, and this. */
static void monitoring_names_served(void)
{
    char cmd[H_PATH * 2 + 512];
    snprintf(cmd, sizeof cmd, "python3 %s --no-promtool --metrics %s %s %s > %s 2>&1",
             DLOCK_MONITORING_CHECK, h_path("scrape.txt"), DLOCK_MONITORING_DIR,
             DLOCK_MONITORING_DOC, h_path("names.out"));
    int st = system(cmd);
    const char *out = h_read_file(h_path("names.out"));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the dashboard or the alert rules name metrics this agent does not serve:\n%s",
              out ? out : "");
}

/* ---- tests ---- */

ITEST(health, readyz_and_dlockctl_health_follow_redis)
{
    int port = h_free_port();
    h_start(h_keepf("metrics_listen = 127.0.0.1:%d", port));

    /* Ready: 200 with one line, or a line per node, or JSON. */
    const char *a = http_get(port, "GET /readyz HTTP/1.0\r\n\r\n");
    cr_assert_eq(http_code(a), 200, "%s", a);
    cr_assert(starts_with(http_body(a), "ready: single mode, 1 of 1 node up"), "%s", a);
    a = http_get(port, "GET /readyz?verbose HTTP/1.0\r\n\r\n");
    cr_assert_not_null(strstr(http_body(a), h_keepf("node %s: up\n", H.redis_addr)), "%s", a);
    a = http_get(port, "GET /readyz?json HTTP/1.1\r\nHost: x\r\n\r\n");
    cr_assert_eq(http_code(a), 200);
    cr_assert_not_null(strstr(a, "Content-Type: application/json"), "%s", a);
    cr_assert(h_json_valid(http_body(a)), "not JSON: %s", http_body(a));
    cr_assert_not_null(strstr(http_body(a), "\"ready\":true,\"mode\":\"single\""), "%s", a);
    a = http_get(port, "GET /healthz HTTP/1.0\r\n\r\n");
    cr_assert_eq(http_code(a), 200);
    cr_assert_str_eq(http_body(a), "ok\n");
    a = http_get(port, "HEAD /readyz HTTP/1.0\r\n\r\n");
    cr_assert_eq(http_code(a), 200);
    cr_assert_str_empty(http_body(a), "HEAD answered with a body");
    cr_assert_eq(http_code(http_get(port, "GET /readyzz HTTP/1.0\r\n\r\n")), 404);
    cr_assert_eq(http_code(http_get(port, "GET /health HTTP/1.0\r\n\r\n")), 404);
    cr_assert_eq(http_code(http_get(port, "POST /readyz HTTP/1.0\r\n\r\n")), 405);

    const char *out;
    int st = ctl_health(&out, NULL);
    cr_assert_eq(st, 0, "health while ready: exit %d: %s", st, out);
    cr_assert(starts_with(out, "OK - dlockd ready: single mode"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "more than one line: %s", out);
    cr_assert_eq(gauge_now("dlock_backend_up{mode=\"single\"}"), 1);
    cr_assert_eq(gauge_now("dlock_quorum_nodes_up"), 1);
    cr_assert_eq(gauge_now("dlock_quorum_nodes_needed"), 1);

    /* Redis stopped: not ready, the agent alive. */
    h_redis_stop();
    H_WAIT_UNTIL(10000, ready_code(port) == 503);
    a = http_get(port, "GET /readyz HTTP/1.0\r\n\r\n");
    cr_assert(starts_with(http_body(a), "not ready: single mode, 0 of 1 node up, 1 needed; Redis "
                                        "is unreachable"),
              "%s", a);
    a = http_get(port, "GET /readyz?json HTTP/1.0\r\n\r\n");
    cr_assert_eq(http_code(a), 503);
    cr_assert(h_json_valid(http_body(a)), "not JSON: %s", http_body(a));
    cr_assert_not_null(strstr(http_body(a), "\"ready\":false"), "%s", a);
    cr_assert_eq(http_code(http_get(port, "GET /healthz HTTP/1.0\r\n\r\n")), 200);
    st = ctl_health(&out, NULL);
    cr_assert_eq(st, 2, "health with Redis stopped: exit %d: %s", st, out);
    cr_assert(starts_with(out, "CRITICAL - dlockd not ready: single mode"), "%s", out);
    st = ctl_health(&out, "--verbose");
    cr_assert_eq(st, 2);
    cr_assert_not_null(strstr(out, h_keepf("\nnode %s: down", H.redis_addr)), "%s", out);
    st = ctl_health(&out, "--live");
    cr_assert_eq(st, 0, "--live with Redis stopped: exit %d: %s", st, out);
    cr_assert_str_eq(out, "OK - dlockd answers\n");
    cr_assert_eq(gauge_now("dlock_backend_up{mode=\"single\"}"), 0);
    cr_assert_eq(gauge_now("dlock_quorum_nodes_up"), 0);

    /* Back. */
    h_redis_start();
    H_WAIT_UNTIL(15000, ready_code(port) == 200);
    st = ctl_health(&out, NULL);
    cr_assert_eq(st, 0, "health after Redis came back: exit %d: %s", st, out);
    cr_assert_eq(gauge_now("dlock_backend_up{mode=\"single\"}"), 1);
}

ITEST(health, no_agent_is_exit_69_and_bad_usage_64)
{
    h_redis_start();
    const char *none = h_path("none.sock");
    int st = h_ctl(5000, "-S", none, "health", (const char *)NULL);
    cr_assert_eq(st, 69, "no agent: exit %d", st);
    const char *out = h_read_file(h_path("ctl.out"));
    cr_assert_not_null(out);
    cr_assert_not_null(strstr(out, "CRITICAL - dlockd does not answer"), "%s", out);
    st = h_ctl(5000, "-S", none, "health", "--live", (const char *)NULL);
    cr_assert_eq(st, 69, "no agent, --live: exit %d", st);
    cr_assert_eq(h_ctl(5000, "-S", none, "health", "--bogus", (const char *)NULL), 64);
    cr_assert_eq(h_ctl(5000, "-S", none, "health", "extra", (const char *)NULL), 64);
    unlink(h_path("ctl.out"));
    cr_assert_eq(h_ctl(5000, "health", "--help", (const char *)NULL), 0);
    out = h_read_file(h_path("ctl.out"));
    cr_assert_not_null(strstr(out, "69     the agent is unreachable"), "%s", out);
}

/* The status socket's own requests, without the HTTP listener. */
ITEST(health, status_socket_health_requests)
{
    h_start(NULL);
    const char *a = h_status_ask(0, "health\n");
    cr_assert_not_null(a);
    cr_assert(starts_with(a, "ready: single mode"), "%s", a);
    cr_assert_not_null(strstr(a, "\nnode "), "%s", a);
    a = h_status_ask(0, "health-json\n");
    cr_assert(h_json_valid(a), "%s", a);
    cr_assert_not_null(strstr(a, "\"nodes_up\":1,\"nodes_needed\":1"), "%s", a);
    a = h_status_ask(0, "health now\n");
    cr_assert(starts_with(a, "error: "), "%s", a);
}

ITEST(health, metrics_move_with_the_locks_and_pass_promtool)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    const char *m = metrics();
    double granted = series(m, "dlock_acquires_total{outcome=\"granted\"}");
    double queued = series(m, "dlock_queue_wait_seconds_count");
    double holds = series(m, "dlock_hold_seconds_count");
    cr_assert_eq(series(m, "dlock_waiters"), 0);
    cr_assert_eq(series(m, h_keepf("dlock_build_info{version=\"%d.%d.%d\",tls=\"false\"}",
                                   DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH)),
                 1);
    cr_assert_gt(series(m, "process_open_fds"), 0);
    cr_assert_gt(series(m, "process_max_fds"), 0);
    cr_assert_gt(series(m, "process_resident_memory_bytes"), 0);
    cr_assert_gt(series(m, "process_virtual_memory_bytes"), 0);
    cr_assert_geq(series(m, "process_cpu_seconds_total"), 0);
    /* Started after the epoch's first billion seconds and not in the future. */
    double start = series(m, "process_start_time_seconds");
    cr_assert(start > 1e9 && start <= (double)time(NULL) + 1, "start time %f", start);
    /* It agrees with the agent's own uptime (whole seconds: the boot time's). */
    double uptime = series(m, "dlock_uptime_seconds");
    cr_assert_lt(fabs(start + uptime - (double)time(NULL)), 30, "start %f + uptime %f vs now",
                 start, uptime);
    cr_assert_gt(series(m, h_keepf("dlock_node_command_seconds_count{node=\"%s\"}", H.redis_addr)),
                 0);
    /* Off by default. */
    cr_assert(!has_series(m, "dlock_name_waiters"), "per-name series without metrics_names");

    /* A waiter raises the gauge, and it drops to 0 after the grant. */
    dlock_lease *l = h_must_acquire(a, "queue", 30000);
    struct h_acq w;
    h_acquire_async(b, "queue", 30000, 60000, &w);
    H_WAIT_UNTIL(5000, gauge_now("dlock_waiters") == 1);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(5000, w.done);
    cr_assert_eq(w.status, 0, "%s", dlock_strerror(w.status));
    m = metrics();
    cr_assert_eq(series(m, "dlock_waiters"), 0);
    cr_assert_eq(series(m, "dlock_acquires_total{outcome=\"granted\"}"), granted + 2);
    cr_assert_eq(series(m, "dlock_queue_wait_seconds_count"), queued + 2);
    cr_assert_eq(series(m, "dlock_hold_seconds_count"), holds + 1);
    /* The waiter waited for the release: more than nothing. */
    cr_assert_gt(series(m, "dlock_queue_wait_seconds_sum"), 0);

    /* Busy, timeout and cancelled outcomes. */
    double busy = series(m, "dlock_acquires_total{outcome=\"busy\"}");
    double timeout = series(m, "dlock_acquires_total{outcome=\"timeout\"}");
    double cancelled = series(m, "dlock_acquires_total{outcome=\"cancelled\"}");
    dlock_lease *x = NULL;
    cr_assert_eq(h_acquire(a, "queue", 30000, 0, &x), DLOCK_EBUSY);
    cr_assert_eq(h_acquire(a, "queue", 30000, 100, &x), DLOCK_ETIMEDOUT);
    struct h_acq c;
    h_acquire_async(a, "queue", 30000, 60000, &c);
    H_WAIT_UNTIL(5000, gauge_now("dlock_waiters") == 1);
    h_acquire_cancel(a, &c);
    H_WAIT_UNTIL(5000, gauge_now("dlock_waiters") == 0);
    m = metrics();
    cr_assert_eq(series(m, "dlock_acquires_total{outcome=\"busy\"}"), busy + 1);
    cr_assert_eq(series(m, "dlock_acquires_total{outcome=\"timeout\"}"), timeout + 1);
    cr_assert_eq(series(m, "dlock_acquires_total{outcome=\"cancelled\"}"), cancelled + 1);

    /* A loss ends a hold too. */
    double losses = series(m, "dlock_losses_total");
    holds = series(m, "dlock_hold_seconds_count");
    dlock_lease *gone = h_must_acquire(a, "gone", 600);
    h_redis_del(h_key("gone"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, gone, DLOCK_STATE_LOST) > 0);
    m = metrics();
    cr_assert_eq(series(m, "dlock_losses_total"), losses + 1);
    cr_assert_eq(series(m, "dlock_hold_seconds_count"), holds + 1);
    cr_assert_eq(dlock_lease_release(gone), DLOCK_ELOST);

    /* The whole scrape, with a lease and a waiter in it, passes promtool. */
    struct h_acq w2;
    h_acquire_async(a, "queue", 30000, 60000, &w2);
    H_WAIT_UNTIL(5000, gauge_now("dlock_waiters") == 1);
    if (promtool_check(metrics()))
        monitoring_names_served();
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_WAIT_UNTIL(5000, w2.done);
    cr_assert_eq(dlock_lease_release(w2.lease), 0);
}

ITEST(health, per_name_series_are_bounded_by_the_pattern_and_the_cap)
{
    h_start("metrics_names = hot*\nmetrics_names_max = 3");
    struct h_cl *a = h_client();
    h_must_acquire(a, "cold", 30000);
    char name[16];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "hot%d", i);
        h_must_acquire(a, name, 30000);
    }
    /* At most 3 names, each once in both families, and only names of the pattern. */
    const char *m = metrics();
    cr_assert_eq(count_lines(m, "dlock_name_leases{"), 3, "%s", m);
    cr_assert_eq(count_lines(m, "dlock_name_waiters{"), 3, "%s", m);
    cr_assert_eq(count_lines(m, "dlock_name_leases{name=\"hot"), 3, "%s", m);
    cr_assert_eq(count_lines(m, "# TYPE dlock_name_leases gauge"), 1);
    cr_assert(!has_series(m, "dlock_name_leases{name=\"cold\"}"));
    promtool_check(m);
}

ITEST(health, per_name_label_values_are_escaped)
{
    h_start("metrics_names = q*");
    struct h_cl *a = h_client(), *b = h_client();
    /* A quote, a backslash and a byte outside UTF-8: names take them (not
     * newlines: names have no control characters). */
    const char *hostile = "q\"b\\s\xff";
    dlock_lease *l = h_must_acquire(a, hostile, 30000);
    struct h_acq w;
    h_acquire_async(b, hostile, 30000, 60000, &w);
    const char *want = "dlock_name_waiters{name=\"q\\\"b\\\\s?\"}";
    H_WAIT_UNTIL(5000, has_series(metrics(), want) && series(metrics(), want) == 1);
    const char *m = metrics();
    cr_assert_eq(series(m, "dlock_name_leases{name=\"q\\\"b\\\\s?\"}"), 1, "%s", m);
    promtool_check(m);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(5000, w.done);
    cr_assert_eq(w.status, 0);
    /* The per-name gauges are rendered again a second after the last time. */
    H_WAIT_UNTIL(5000, series(metrics(), want) == 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* Quorum mode: ready while a majority of the nodes is up. */
ITEST(health, quorum_readiness_follows_the_majority)
{
    h_quorum_start(3, 1, NULL, NULL);
    const char *a = h_status_ask(0, "health\n");
    cr_assert(starts_with(a, "ready: quorum mode, 3 of 3 nodes up, 2 needed\n"), "%s", a);
    h_node_stop(2);
    H_WAIT_UNTIL(10000, starts_with(h_status_ask(0, "health\n"), "ready: quorum mode, 2 of 3"));
    const char *m = metrics();
    cr_assert_eq(series(m, "dlock_backend_up{mode=\"quorum\"}"), 1);
    cr_assert_eq(series(m, "dlock_quorum_nodes_up"), 2);
    cr_assert_eq(series(m, "dlock_quorum_nodes_needed"), 2);
    h_node_stop(1);
    H_WAIT_UNTIL(10000,
                 starts_with(h_status_ask(0, "health\n"), "not ready: quorum mode, 1 of 3 "
                                                          "nodes up, 2 needed; no majority"));
    m = metrics();
    cr_assert_eq(series(m, "dlock_backend_up{mode=\"quorum\"}"), 0);
    cr_assert_eq(series(m, "dlock_quorum_nodes_up"), 1);
    const char *out;
    int st = ctl_health(&out, NULL);
    cr_assert_eq(st, 2, "health without a majority: exit %d: %s", st, out);
    cr_assert(starts_with(out, "CRITICAL - dlockd not ready: quorum mode"), "%s", out);
}

/* Per-name gauges name locks: on the status socket only for peers that see
 * every lease ([policy] see_all); over HTTP for whoever reaches the port. */
ITEST(health, per_name_series_follow_see_all_on_the_status_socket)
{
    int port = h_free_port();
    h_start(h_keepf("metrics_names = hot*\nmetrics_listen = 127.0.0.1:%d\n[policy]\nsee_all = 4242",
                    port));
    struct h_cl *a = h_client();
    h_must_acquire(a, "hot1", 30000);
    const char *m = metrics();
    cr_assert(!has_series(m, "dlock_name_leases"), "per-name series to a peer outside see_all");
    cr_assert_eq(series(m, "dlock_leases"), 1);
    const char *h = http_get(port, "GET /metrics HTTP/1.0\r\n\r\n");
    cr_assert_eq(series(http_body(h), "dlock_name_leases{name=\"hot1\"}"), 1);
}
