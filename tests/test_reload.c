/* SPDX-License-Identifier: BSD-3-Clause */
/* test_reload.c -- a reload (SIGHUP, dlockctl reload) with a real agent: each
 * class of setting that changes in a running agent is in force afterwards,
 * as its behaviour shows (timeouts, TTLs, limits, bounded holds, cohorts,
 * Redis credentials, log level, policy, the metrics listener), leases and
 * connections stay, the settings that need a restart stay as they were and
 * say why, a refused file changes nothing, and dlockctl reload waits for the
 * outcome, also when two are asked at once. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

static const char *status_path(void)
{
    return h_keepf("%s/status0.sock", H.dir);
}

static const char *agent_log(void)
{
    const char *log = h_read_file(H.agent[0].log);
    return log ? log : "";
}

static int log_has(const char *text)
{
    return strstr(agent_log(), text) != NULL;
}

/* Runs dlockctl reload for agent 0 and returns its exit status; what it
 * printed (stdout and stderr) in *out. */
static int ctl_reload_to(const char *file, const char **out)
{
    unlink(file);
    char *argv[] = {DLOCKCTL_PATH, "-S", (char *)status_path(), "reload", NULL};
    int st = h_wait_child(h_spawn(argv, file), 30000);
    const char *text = h_read_file(file);
    *out = h_keep(text ? text : "");
    cr_assert_neq(st, -1, "dlockctl reload did not exit; it printed:\n%s", *out);
    return st;
}

static int ctl_reload(const char **out)
{
    return ctl_reload_to(h_path("reload.out"), out);
}

/* Rewrites agent 0's file, asks for a reload, and expects it to succeed with
 * `line` in what dlockctl prints. */
static void reload_with(const char *agent_ini, const char *redis_ini, const char *line)
{
    h_agent_config(0, agent_ini, redis_ini);
    const char *out;
    cr_assert_eq(ctl_reload(&out), 0, "dlockctl reload failed:\n%s", out);
    cr_assert_not_null(strstr(out, line), "'%s' is not in:\n%s", line, out);
}

/* ---- each class of setting ---- */

/* Timeouts: a handshake timeout applies to the connections that come after
 * the reload; the command timeout to the next command, whose link's watchdog
 * was armed with a quarter of the old one (15 s). */
ITEST(reload, timeouts_take_effect)
{
    h_redis_start();
    h_agent_config(0, "handshake_timeout_ms = 600000", "command_timeout_ms = 60000");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    int before = h_raw_connect(0); /* says nothing yet */
    reload_with("handshake_timeout_ms = 100", "command_timeout_ms = 1000",
                "reloaded: [agent] handshake_timeout_ms 600000 -> 100\n");
    cr_assert(log_has("reloaded: [redis] command_timeout_ms 60000 -> 1000\n"));
    int after = h_raw_connect(0);
    int code = 0;
    cr_assert_eq(h_raw_expect_close(after, H_EVENT_MS, &code), 1,
                 "a silent connection made after the reload stayed open");
    cr_assert(log_has("no hello within 100 ms"));
    /* The connection from before keeps the time it was given: it is still
     * there to say HELLO. */
    cr_assert_eq(h_raw_hello(before), 200);

    /* Redis freezes: the next command is given up after the new timeout. */
    h_redis_pause();
    struct h_acq w;
    h_acquire_async(a, "frozen", 30000, 0, &w);
    H_WAIT_UNTIL(H_EVENT_MS, log_has("no reply within 1000 ms"));
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_neq(w.status, 0);
    h_redis_resume();
}

/* A number member of name's lease in leases-json; -1 when not there. */
static long long lease_member(const char *name, const char *member)
{
    const char *json = h_status_ask(0, h_keepf("leases-json %s\n", name));
    cr_assert_not_null(json);
    const char *at = strstr(json, h_keepf("\"%s\":", member));
    return at ? atoll(at + strlen(member) + 3) : -1;
}

/* TTLs: a new default and cap for new acquires; a lease granted before keeps
 * its TTL and is renewed through the reload. SIGHUP does it as before. */
ITEST(reload, ttl_default_and_cap_by_sighup)
{
    h_start("default_ttl_ms = 3000");
    struct h_cl *a = h_client();
    dlock_lease *old = h_must_acquire(a, "old", 0);
    cr_assert_eq(dlock_lease_ttl_ms(old), 3000);
    h_agent_config(0, "default_ttl_ms = 2000\nmax_ttl_ms = 20000", NULL);
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    H_WAIT_UNTIL(H_EVENT_MS, log_has("reloaded: [agent] max_ttl_ms 45000 -> 20000\n"));
    cr_assert(log_has("reloaded: [agent] default_ttl_ms 3000 -> 2000\n"));
    dlock_lease *fresh = h_must_acquire(a, "fresh", 0);
    cr_assert_eq(dlock_lease_ttl_ms(fresh), 2000);
    cr_assert_eq(lease_member("fresh", "ttl_ms"), 2000);
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "long", 25000, 0, &l), DLOCK_EINVAL);
    /* The old lease keeps its 3 s through renewals after the reload. */
    long long renewed = lease_member("old", "renewals");
    H_WAIT_UNTIL(H_EVENT_MS, lease_member("old", "renewals") >= renewed + 2);
    cr_assert_eq(lease_member("old", "ttl_ms"), 3000);
    cr_assert(dlock_lease_valid(old));
    cr_assert_eq(h_events(a, old, DLOCK_STATE_LOST), 0);
    cr_assert_eq(dlock_lease_release(old), 0);
    cr_assert_eq(dlock_lease_release(fresh), 0);
}

/* Limits: the per-connection lease limit for the connections made after the
 * reload (a connection's lease page has the slots it was told); the waiter
 * limit and the policy's per-uid limits at once. */
ITEST(reload, limits_for_new_and_all_connections)
{
    h_start("max_leases_per_conn = 2");
    struct h_cl *before = h_client(), *waiter = h_client();
    reload_with("max_leases_per_conn = 3\nmax_waiters_per_conn = 1", NULL,
                "reloaded: [agent] max_leases_per_conn 2 -> 3\n");
    struct h_cl *after = h_client();
    dlock_lease *l[6];
    l[0] = h_must_acquire(before, "b0", 30000);
    l[1] = h_must_acquire(before, "b1", 30000);
    /* Refused before Redis is asked, naming the limit of the connection. */
    long long refused = h_metric(0, "dlock_refused_total");
    int rc = h_acquire(before, "b2", 30000, 0, &l[2]);
    cr_assert_eq(rc, DLOCK_ELIMIT);
    cr_assert_not_null(strstr(dlock_client_strerror(before->c, rc), "lease limit (2)"), "%s",
                       dlock_client_strerror(before->c, rc));
    cr_assert_eq(h_metric(0, "dlock_refused_total"), refused + 1);
    for (int i = 0; i < 3; i++)
        l[3 + i] = h_must_acquire(after, h_keepf("a%d", i), 30000);
    dlock_lease *x = NULL;
    rc = h_acquire(after, "a3", 30000, 0, &x);
    cr_assert_eq(rc, DLOCK_ELIMIT);
    cr_assert_not_null(strstr(dlock_client_strerror(after->c, rc), "lease limit (3)"), "%s",
                       dlock_client_strerror(after->c, rc));
    /* One waiter per connection now, on a connection from before too. */
    struct h_acq w1, w2;
    h_acquire_async(waiter, "a0", 30000, DLOCK_WAIT_FOREVER, &w1);
    h_acquire_async(waiter, "a1", 30000, DLOCK_WAIT_FOREVER, &w2);
    H_WAIT_UNTIL(H_EVENT_MS, w2.done);
    cr_assert_eq(w2.status, DLOCK_ELIMIT, "%s", dlock_strerror(w2.status));
    cr_assert_not(w1.done);
    /* The policy's limits: one lease per uid from now on. */
    reload_with("max_leases_per_conn = 3\n[policy]\nmax_leases_per_uid = 1", NULL,
                "reloaded: [policy] max_leases_per_uid 10000 -> 1\n");
    cr_assert_eq(h_acquire(h_client(), "more", 30000, 0, &x), DLOCK_ELIMIT);
    for (int i = 0; i < 6; i++)
        if (i != 2)
            cr_assert_eq(dlock_lease_release(l[i]), 0);
}

/* Bounded holds: a default maximum hold for the leases granted after the
 * reload; one granted before keeps having none. */
ITEST(reload, bounded_holds_for_new_leases)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *old = h_must_acquire(a, "old", 2000);
    reload_with("default_max_hold_ms = 1000\nmax_hold_limit_ms = 5000", NULL,
                "reloaded: [agent] default_max_hold_ms 0 -> 1000\n");
    dlock_lease *bounded = h_must_acquire(a, "bounded", 2000);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, bounded, DLOCK_STATE_LOST) == 1);
    for (int i = 0; i < a->nev; i++)
        if (a->ev[i].lease == bounded)
            cr_assert_eq(a->ev[i].reason, DLOCK_EHOLDLIMIT, "reason %d", a->ev[i].reason);
    cr_assert(dlock_lease_valid(old), "the lease from before the reload was bounded too");
    cr_assert_eq(h_events(a, old, DLOCK_STATE_JEOPARDY), 0);
    cr_assert_eq(dlock_lease_release(old), 0);
}

/* Cohorts: with handoffs switched on by a reload, a released lock passes to
 * the local waiter without Redis. */
ITEST(reload, cohort_handoffs_switched_on)
{
    h_start("cohort_handoffs = 0\ncohort_ms = 60000");
    struct h_cl *a = h_client(), *b = h_client();
    for (int round = 0; round < 2; round++) {
        dlock_lease *la = h_must_acquire(a, "job", 30000);
        struct h_acq w;
        h_acquire_async(b, "job", 30000, DLOCK_WAIT_FOREVER, &w);
        cr_assert_eq(dlock_client_ping(b->c), 0);
        cr_assert_not(w.done);
        cr_assert_eq(dlock_lease_release(la), 0);
        H_WAIT_UNTIL(H_EVENT_MS, w.done);
        cr_assert_eq(w.status, 0);
        cr_assert_eq(h_metric(0, "dlock_handoffs_total"), round, "round %d", round);
        cr_assert_eq(dlock_lease_release(w.lease), 0);
        if (round == 0)
            reload_with("cohort_handoffs = 4\ncohort_ms = 60000", NULL,
                        "reloaded: [agent] cohort_handoffs 0 -> 4\n");
    }
}

/* Credentials: the new password is used from each link's next connection;
 * the links logged in before stay. It is never shown. */
ITEST(reload, a_new_password_for_the_next_connection)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    reload_with(NULL, "password = s3cret-Pw", "reloaded: [redis] password (changed)\n");
    /* The links logged in as nobody in particular still work. */
    dlock_lease *l = h_must_acquire(a, "before", 30000);
    cr_assert_eq(dlock_lease_release(l), 0);
    /* Redis now wants the password; its connections are cut (not ours). */
    freeReplyObject(h_redis_cmd("CONFIG SET requirepass s3cret-Pw"));
    freeReplyObject(h_redis_cmd("CLIENT KILL TYPE normal SKIPME yes"));
    freeReplyObject(h_redis_cmd("CLIENT KILL TYPE pubsub SKIPME yes"));
    /* The agent logs in again with the new password: locks work. */
    H_WAIT_UNTIL(H_EVENT_MS, h_acquire(a, "after", 30000, 0, &l) == 0);
    cr_assert(h_redis_exists(h_key("after")));
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_not(log_has("s3cret"), "the password is in the log");
    cr_assert_not(log_has("AUTH refused"));
}

/* The log level: debug lines from the reload on (the harness's -v makes
 * each level one more verbose). */
ITEST(reload, log_level)
{
    h_start("log_level = warn");
    struct h_cl *a = h_client();
    cr_assert_eq(dlock_lease_release(h_must_acquire(a, "quiet", 30000)), 0);
    reload_with("log_level = info", NULL, "reloaded: [agent] log_level info -> debug\n");
    cr_assert_eq(dlock_lease_release(h_must_acquire(a, "loud", 30000)), 0);
    H_WAIT_UNTIL(H_EVENT_MS, log_has("granted loud"));
    cr_assert_not(log_has("granted quiet"));
}

/* The policy: names allowed by the new rules from the reload on. */
ITEST(reload, policy_rules)
{
    char ini[128];
    snprintf(ini, sizeof ini, "[policy]\nallow = %u a-* __harness_probe__", (unsigned)geteuid());
    h_start(ini);
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "b-1", 30000, 0, &l), DLOCK_EDENIED);
    snprintf(ini, sizeof ini, "[policy]\nallow = %u a-* b-* __harness_probe__",
             (unsigned)geteuid());
    reload_with(ini, NULL, "reloaded: [policy] allow ");
    cr_assert_eq(h_acquire(a, "b-1", 30000, 0, &l), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* ---- the metrics listener ---- */

/* A listener of the test's own on a loopback port: the agent cannot have it. */
static int occupy_port(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0 &&
              getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* Whether GET /metrics on 127.0.0.1:port is answered 200; 0 when nothing
 * listens there. */
static int scrape(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_geq(fd, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        cr_assert_eq(e, ECONNREFUSED, "connect: %s", strerror(e));
        return 0;
    }
    struct timeval tv = {.tv_sec = h_scaled_ms(H_EVENT_MS) / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    cr_assert_eq(write(fd, req, sizeof req - 1), (ssize_t)sizeof req - 1);
    char head[16] = "";
    ssize_t n = read(fd, head, sizeof head - 1);
    close(fd);
    cr_assert_gt(n, 0, "no answer from port %d", port);
    return strncmp(head, "HTTP/1.0 200", 12) == 0;
}

ITEST(reload, the_metrics_listener_moves_or_stays)
{
    int p1 = h_free_port(), p2 = h_free_port();
    h_start(h_keepf("metrics_listen = 127.0.0.1:%d", p1));
    cr_assert(scrape(p1));
    reload_with(h_keepf("metrics_listen = 127.0.0.1:%d", p2), NULL,
                h_keepf("reloaded: [agent] metrics_listen 127.0.0.1:%d -> 127.0.0.1:%d\n", p1, p2));
    cr_assert(scrape(p2));
    cr_assert_not(scrape(p1), "the old listener is still open");
    /* A port the agent cannot have: the listener stays where it was. */
    int busy;
    int fd = occupy_port(&busy);
    h_agent_config(0, h_keepf("metrics_listen = 127.0.0.1:%d", busy), NULL);
    const char *out;
    cr_assert_eq(ctl_reload(&out), 70, "dlockctl reload:\n%s", out);
    cr_assert_not_null(strstr(out, h_keepf("not applied: [agent] metrics_listen 127.0.0.1:%d -> "
                                           "127.0.0.1:%d: ",
                                           p2, busy)),
                       "%s", out);
    cr_assert_not_null(strstr(out, "the old listener stays"), "%s", out);
    cr_assert(log_has("the old listener stays"));
    cr_assert(scrape(p2));
    close(fd);
    /* Off. */
    reload_with("metrics_listen =", NULL,
                h_keepf("reloaded: [agent] metrics_listen 127.0.0.1:%d -> \"\"\n", p2));
    cr_assert_not(scrape(p2));
}

/* ---- what does not change ---- */

ITEST(reload, settings_that_need_a_restart_stay_and_say_why)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *held = h_must_acquire(a, "held", 2000);
    const char *other = h_keepf("%s/other-status.sock", H.dir);
    reload_with(h_keepf("prefix = app:\nstatus_socket = %s", other), "database = 3",
                "needs a restart: [agent] prefix dlock: -> app: (every held key would change "
                "name)\n");
    const char *out = h_read_file(h_path("reload.out"));
    cr_assert_not_null(strstr(out, "needs a restart: [redis] database 0 -> 3 ("), "%s", out);
    cr_assert_not_null(strstr(out, h_keepf("needs a restart: [agent] status_socket %s -> %s (",
                                           status_path(), other)),
                       "%s", out);
    cr_assert_not_null(strstr(out, "connect to the status socket by path"), "%s", out);
    cr_assert_not_null(strstr(out, "; 0 setting(s) applied, 3 need(s) a restart\n"), "%s", out);
    cr_assert(log_has("dlockd[warn]: needs a restart: [agent] prefix dlock: -> app: "));
    /* Keys keep their names, the status socket its path, the lease its key. */
    dlock_lease *l = h_must_acquire(h_client(), "new", 30000);
    cr_assert(h_redis_exists(h_key("new")));
    cr_assert_eq(access(other, F_OK), -1);
    cr_assert_not_null(h_status_ask(0, "metrics\n"));
    long long renewed = lease_member("held", "renewals");
    H_WAIT_UNTIL(H_EVENT_MS, lease_member("held", "renewals") >= renewed + 2);
    cr_assert(dlock_lease_valid(held));
    cr_assert(h_redis_exists(h_key("held")));
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(dlock_lease_release(held), 0);
}

ITEST(reload, a_reload_without_change_says_so)
{
    h_start(NULL);
    const char *out;
    cr_assert_eq(ctl_reload(&out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "; no setting changed\n"), "%s", out);
    cr_assert_null(strstr(out, "reloaded: ["), "%s", out);
}

/* A file that does not pass the checks changes nothing, not even the
 * settings of it that would pass; dlockctl says why and exits 78. */
ITEST(reload, a_refused_file_changes_nothing)
{
    h_start("default_ttl_ms = 3000");
    h_agent_config(0, "default_ttl_ms = 2000", "command_timeout_ms = 5");
    const char *out;
    cr_assert_eq(ctl_reload(&out), 78, "%s", out);
    cr_assert_not_null(strstr(out, "dlockctl: error: configuration not reloaded: "), "%s", out);
    cr_assert_not_null(strstr(out, "[redis] command_timeout_ms = 5: must be between 100 and 60000"),
                       "%s", out);
    cr_assert(log_has("dlockd[error]: configuration not reloaded: "));
    cr_assert(log_has("; the old one stays in force"));
    dlock_lease *l = h_must_acquire(h_client(), "x", 0);
    cr_assert_eq(dlock_lease_ttl_ms(l), 3000);
    /* One that does not parse either. */
    FILE *f = fopen(H.agent[0].conf, "a");
    cr_assert_not_null(f);
    fputs("[agent\n", f);
    fclose(f);
    cr_assert_eq(ctl_reload(&out), 78, "%s", out);
    cr_assert_not_null(strstr(out, "syntax error"), "%s", out);
    /* Fixed, it is taken. */
    reload_with("default_ttl_ms = 2000", NULL, "reloaded: [agent] default_ttl_ms 3000 -> 2000\n");
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* ---- who may ask, and several at once ---- */

ITEST(reload, only_root_and_the_agents_user_may_ask)
{
    if (geteuid() != 0)
        h_skip("needs root to ask as a second uid");
    h_start("status_socket_mode = 0666");
    cr_assert_eq(chmod(H.dir, 0711), 0); /* nobody reaches the status socket */
    const char *file = h_path("nobody.out");
    pid_t pid = h_fork();
    if (pid == 0) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || setgroups(0, NULL) != 0 ||
            setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
            _exit(100);
        execl(DLOCKCTL_PATH, DLOCKCTL_PATH, "-S", status_path(), "reload", (char *)NULL);
        _exit(101);
    }
    cr_assert_eq(h_wait_child(pid, 10000), 77);
    const char *out = h_read_file(file);
    cr_assert_not_null(out);
    cr_assert_not_null(strstr(out, "permission denied: only root and the agent's user (uid 0)"),
                       "%s", out);
    cr_assert_not(log_has("reading the configuration again"), "nobody's request started a reload");
    /* Root may. */
    cr_assert_eq(ctl_reload(&out), 0, "%s", out);
}

/* Whether agent 0 has its configuration file open and has read from it:
 * a reading is under way, past the point where the file can change it (a
 * file this small is read whole at once). */
static int agent_has_read_its_file(void)
{
    char dir[64], link[PATH_MAX], target[PATH_MAX];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)H.agent[0].pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    const struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strcmp(target, H.agent[0].conf) != 0)
            continue;
        const char *info =
            h_read_file(h_keepf("/proc/%d/fdinfo/%s", (int)H.agent[0].pid, e->d_name));
        found = info && strncmp(info, "pos:", 4) == 0 && atoll(info + 4) > 0;
    }
    closedir(d);
    return found;
}

/* Two reloads asked at once both get an answer. The first reading is slowed
 * down by a name service that takes 3 s to resolve the policy's user; the
 * second request comes during it, with the file changed again: the file is
 * read again after the first reading, and both callers get the changes. */
ITEST(reload, two_at_once_are_both_answered)
{
    const char *flag = h_path("nss-slow");
    setenv("LD_PRELOAD", SLOW_NSS_PATH, 1);
    setenv("DLOCK_TEST_NSS_DELAY_FILE", flag, 1);
    setenv("DLOCK_TEST_NSS_DELAY_MS", "3000", 1);
    /* A sanitized agent wants its runtime first among the libraries. */
    const char *old = getenv("ASAN_OPTIONS");
    setenv("ASAN_OPTIONS", h_keepf("%s%sverify_asan_link_order=0", old ? old : "", old ? ":" : ""),
           1);
    const struct passwd *pw = getpwuid(geteuid());
    cr_assert_not_null(pw);
    const char *policy = h_keepf("[policy]\nallow = %s *\n", pw->pw_name);
    h_start(h_keepf("max_waiters_per_conn = 100\n%s", policy));
    unsetenv("LD_PRELOAD");
    FILE *f = fopen(flag, "w");
    cr_assert_not_null(f);
    fclose(f);

    /* The first reading has the file open while the second file is written:
     * it is no longer, so that the first reading finds its end where it was
     * (the comment stands for the line the second adds). */
    h_agent_config(0, h_keepf("max_waiters_per_conn = 101\n; cohort_ms = 21\n%s", policy), NULL);
    const char *out1 = h_path("first.out"), *out2 = h_path("second.out");
    char *argv[] = {DLOCKCTL_PATH, "-S", (char *)status_path(), "reload", NULL};
    pid_t first = h_spawn(argv, out1);
    H_WAIT_UNTIL(H_EVENT_MS, agent_has_read_its_file());
    h_agent_config(0, h_keepf("max_waiters_per_conn = 101\ncohort_ms = 21\n%s", policy), NULL);
    pid_t second = h_spawn(argv, out2);
    cr_assert_eq(h_wait_child(first, 30000), 0, "first: %s", h_read_file(out1));
    cr_assert_eq(h_wait_child(second, 30000), 0, "second: %s", h_read_file(out2));
    const char *a = h_keep(h_read_file(out1)), *b = h_keep(h_read_file(out2));
    cr_assert_not_null(strstr(a, "reloaded: [agent] max_waiters_per_conn 100 -> 101\n"), "%s", a);
    cr_assert_not_null(strstr(b, "reloaded: [agent] cohort_ms 20 -> 21\n"), "%s", b);
    if (log_has("while the configuration is being read")) {
        /* They overlapped (the first reading takes 3 s): the file was read
         * again after the first reading, and both got what both changed. */
        cr_assert_not_null(strstr(a, "reloaded: [agent] cohort_ms 20 -> 21\n"), "%s", a);
        cr_assert_str_eq(a, b);
    }
    unlink(flag);
}
