/* SPDX-License-Identifier: BSD-3-Clause */
/* test_agent_cli.c -- dlockd as a program: configuration check, dev mode,
 * socket file handling (stale replaced, live refused, mode and group, a
 * directory others may write refused unless sticky, a planted symbolic link
 * never followed), sockets passed by the service manager and readiness
 * notification. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static int run_agent(char *const argv[], const char *out)
{
    pid_t pid = h_spawn(argv, out);
    int st = h_wait_child(pid, 5000);
    cr_assert_neq(st, -1, "dlockd did not exit");
    return st;
}

ITEST(agent_cli, check_accepts_good_config)
{
    const char *conf = h_path("good.conf");
    write_file(conf, "[agent]\nprefix = app:\ndefault_ttl_ms = 5000\n"
                     "[redis]\naddress = 127.0.0.1:6380\ndatabase = 3\n");
    char *argv[] = {DLOCKD_PATH, "-n", "-c", (char *)conf, NULL};
    cr_assert_eq(run_agent(argv, h_path("check.out")), 0);
    cr_assert_not_null(strstr(h_read_file(h_path("check.out")), "configuration OK"));
}

ITEST(agent_cli, check_rejects_bad_config)
{
    const char *conf = h_path("bad.conf");
    write_file(conf, "[agent]\nprefix = app:\nno_such_key = 1\n");
    char *argv[] = {DLOCKD_PATH, "-n", "-c", (char *)conf, NULL};
    cr_assert_eq(run_agent(argv, h_path("bad.out")), 2);
    const char *out = h_read_file(h_path("bad.out"));
    cr_assert_not_null(strstr(out, "bad.conf:3"), "no file:line in: %s", out);
    cr_assert_not_null(strstr(out, "no_such_key"), "key not named in: %s", out);
    cr_assert_null(strstr(out, "configuration OK"));

    char *argv2[] = {DLOCKD_PATH, "-n", "-r", "nowhere", NULL};
    cr_assert_eq(run_agent(argv2, h_path("bad2.out")), 2);
    char *argv3[] = {DLOCKD_PATH, "-n", "--default-ttl", "1", NULL};
    cr_assert_eq(run_agent(argv3, h_path("bad3.out")), 2);
}

/* dlockd -n lists every error of the file and of the flags, each with its
 * source: the file's line, or the flag as typed. */
ITEST(agent_cli, check_lists_every_error_with_its_source)
{
    const char *conf = h_keep(h_path("many.conf"));
    write_file(conf, "[agent]\nmax_ttl_ms = abc\nno_such_key = 1\nmin_ttl_ms = 5\n"
                     "[redis]\ncommand_timeout_ms = 99\n");
    char *argv[] = {DLOCKD_PATH,     "-n", "-c",          (char *)conf,
                    "--default-ttl", "1",  "--mode=nope", NULL};
    cr_assert_eq(run_agent(argv, h_path("many.out")), 2);
    const char *out = h_read_file(h_path("many.out"));
    cr_assert_not_null(out);
    const char *want[] = {
        ":2: [agent] max_ttl_ms: not a number",
        ":3: unknown setting [agent] no_such_key",
        ":4: [agent] min_ttl_ms = 5: must be between",
        ":6: [redis] command_timeout_ms = 99: must be between",
        "dlockd: --mode: [redis] mode: invalid value 'nope'",
        "dlockd: --default-ttl: [agent] default_ttl_ms = 1: must be between",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_not_null(strstr(out, want[i]), "'%s' lacks '%s'", out, want[i]);
    cr_assert_null(strstr(out, "configuration OK"));
    /* A start (no -n) reports them all too before refusing. */
    char *argv1[] = {DLOCKD_PATH, "-c", (char *)conf, "--default-ttl", "1", NULL};
    cr_assert_eq(run_agent(argv1, h_path("start.out")), 2);
    out = h_read_file(h_path("start.out"));
    cr_assert(out && strstr(out, ":3: unknown setting [agent] no_such_key") &&
                  strstr(out, ":6: [redis] command_timeout_ms = 99") &&
                  strstr(out, "--default-ttl: [agent] default_ttl_ms = 1"),
              "%s", out ? out : "");
    /* A short flag, its value in the same word. */
    char *argv2[] = {DLOCKD_PATH, "-n", "-rnowhere", NULL};
    cr_assert_eq(run_agent(argv2, h_path("short.out")), 2);
    out = h_read_file(h_path("short.out"));
    cr_assert(out && strstr(out, "dlockd: -r: [redis] address: invalid value 'nowhere'"), "%s",
              out ? out : "");
}

ITEST(agent_cli, check_rejects_out_of_range_values_naming_the_range)
{
    /* Values that parse but would break the agent: no acquire could ever
     * wait, or each connection would map gigabytes for its lease page. */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"[agent]\nmax_waiters_per_conn = 0\n",
         "max_waiters_per_conn = 0: must be between 1 and 1000000"},
        {"[agent]\nmax_leases_per_conn = 4294967295\n",
         "max_leases_per_conn = 4294967295: must be between 1 and 1000000"},
        {"[redis]\ncommand_timeout_ms = 99\n", "command_timeout_ms = 99: must be between 100"},
        {"[policy]\nmax_leases_per_uid = 100000001\n", "between 0 and 100000000 (0: no limit)"},
    };
    char conf[H_PATH + 64]; /* h_path()'s buffers are reused */
    snprintf(conf, sizeof conf, "%s", h_path("range.conf"));
    char *argv[] = {DLOCKD_PATH, "-n", "-c", conf, NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(conf, bad[i].text);
        char out[64];
        snprintf(out, sizeof out, "range%zu.out", i);
        cr_assert_eq(run_agent(argv, h_path(out)), 2, "accepted: %s", bad[i].text);
        const char *text = h_read_file(h_path(out));
        cr_assert(text && strstr(text, bad[i].want), "for %s: '%s' lacks '%s'", bad[i].text,
                  text ? text : "", bad[i].want);
    }
    /* The bounds themselves pass. */
    write_file(conf, "[agent]\nmax_waiters_per_conn = 1\nmax_leases_per_conn = 1000000\n"
                     "[redis]\ncommand_timeout_ms = 100\n");
    cr_assert_eq(run_agent(argv, h_path("range-ok.out")), 0, "%s",
                 h_read_file(h_path("range-ok.out")));
}

/* Reads the socket path from the agent's "export DLOCK_SOCKET=" line. */
static int dev_socket(const char *out, char *sock, size_t cap)
{
    const char *text = h_read_file(out);
    const char *p = text ? strstr(text, "export DLOCK_SOCKET=") : NULL;
    if (!p || !strchr(p, '\n'))
        return 0;
    p += strlen("export DLOCK_SOCKET=");
    size_t n = (size_t)(strchr(p, '\n') - p);
    cr_assert_lt(n, cap);
    memcpy(sock, p, n);
    sock[n] = '\0';
    return 1;
}

ITEST(agent_cli, dev_mode_runs_private_redis_and_cleans_up)
{
    setenv("TMPDIR", H.dir, 1);
    const char *out = h_path("dev.out");
    char *argv[] = {DLOCKD_PATH, "--dev", NULL};
    pid_t pid = h_spawn(argv, out);
    char sock[H_PATH];
    H_WAIT_UNTIL(H_START_MS, dev_socket(out, sock, sizeof sock));
    cr_assert_not_null(strstr(h_read_file(out), "try: "), "no try-it line");

    dlock_client *c;
    cr_assert_eq(dlock_client_open(&c, sock), 0);
    dlock_lease *lease;
    cr_assert_eq(dlock_lease_acquire(c, "dev-demo", NULL, &lease), 0);
    cr_assert_eq(dlock_lease_release(lease), 0);
    dlock_client_close(c);

    char dir[H_PATH];
    snprintf(dir, sizeof dir, "%s", sock);
    *strrchr(dir, '/') = '\0';
    cr_assert_eq(access(dir, F_OK), 0);
    kill(pid, SIGTERM);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 0);
    cr_assert_neq(access(dir, F_OK), 0, "dev directory %s left behind", dir);
}

ITEST(agent_cli, live_socket_is_not_stolen)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *lease = h_must_acquire(a, "keep", 30000);
    char *argv[] = {DLOCKD_PATH, "-s", H.agent[0].sock, "-r", H.redis_addr, NULL};
    cr_assert_eq(run_agent(argv, h_path("second.out")), 1);
    cr_assert_not_null(strstr(h_read_file(h_path("second.out")), "in use"));
    /* The first agent still serves, and its lease is intact. */
    struct h_cl *b = h_client();
    dlock_lease *other;
    cr_assert_eq(h_acquire(b, "other", 30000, 0, &other), 0);
    cr_assert_eq(dlock_lease_state(lease), DLOCK_STATE_HELD);
    cr_assert(h_redis_exists(h_key("keep")));
}

ITEST(agent_cli, stale_socket_is_replaced_and_mode_applied)
{
    h_redis_start();
    /* A socket file nobody listens on, as a crashed agent leaves behind. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", H.agent[0].sock);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(fd);
    h_agent_config(0, "socket_mode = 0600", NULL);
    h_agent_start_n(0);
    struct stat st;
    cr_assert_eq(stat(H.agent[0].sock, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    struct h_cl *a = h_client();
    dlock_lease *fresh;
    cr_assert_eq(h_acquire(a, "fresh", 30000, 0, &fresh), 0);
}

ITEST(agent_cli, refuses_a_path_that_is_not_a_socket)
{
    h_redis_start();
    const char *path = h_path("plain-file");
    write_file(path, "precious\n");
    char *argv[] = {DLOCKD_PATH, "-s", (char *)path, "-r", H.redis_addr, NULL};
    cr_assert_eq(run_agent(argv, h_path("plain.out")), 1);
    cr_assert_str_eq(h_read_file(path), "precious\n");
}

ITEST(agent_cli, redis_password_and_database)
{
    h_redis_start();
    freeReplyObject(h_redis_cmd("CONFIG SET requirepass s3cret"));
    h_agent_config(0, NULL, "password = s3cret\ndatabase = 5");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    dlock_lease *lease = h_must_acquire(a, "in-db5", 30000);
    freeReplyObject(h_redis_cmd("SELECT 5"));
    cr_assert(h_redis_exists(h_key("in-db5")), "key not in database 5");
    freeReplyObject(h_redis_cmd("SELECT 0"));
    cr_assert_not(h_redis_exists(h_key("in-db5")));
    cr_assert_eq(dlock_lease_release(lease), 0);
}

ITEST(agent_cli, redis_acl_user)
{
    h_redis_start();
    freeReplyObject(h_redis_cmd("ACL SETUSER locker on >pw ~dlock:* &dlock:* +@all"));
    h_agent_config(0, NULL, "user = locker\npassword = pw");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    dlock_lease *lease = h_must_acquire(a, "acl", 30000);
    cr_assert_eq(dlock_lease_release(lease), 0);
}

ITEST(agent_cli, wrong_redis_password_is_a_typed_error)
{
    h_redis_start();
    freeReplyObject(h_redis_cmd("CONFIG SET requirepass s3cret"));
    h_agent_config(0, NULL, "password = wrong");
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    dlock_lease *lease = NULL;
    int rc = h_acquire(a, "nope", 30000, 0, &lease);
    cr_assert(rc == DLOCK_EAUTH || rc == DLOCK_EUNAVAIL, "got %s", dlock_strerror(rc));
    H_WAIT_UNTIL(3000, strstr(h_read_file(H.agent[0].log), "refused") != NULL);
}

/* A listening unix socket at path, as a service manager makes it. */
static int listen_at(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0)
        return -1;
    return fd;
}

ITEST(agent_cli, serves_sockets_passed_by_the_service_manager)
{
    /* Socket activation as systemd does it: the client and status sockets
     * exist before the agent runs and come as fds 3 and 4 with LISTEN_FDS
     * and LISTEN_PID, with a third one that no setting names. The agent
     * serves the two, closes the third with a warning (its clients would
     * wait in vain), reports READY=1 on NOTIFY_SOCKET once its sockets
     * listen, and leaves the socket files (they belong to the service
     * manager) when it stops. */
    h_redis_start();
    char sock[H_PATH], status[H_PATH], notify[H_PATH], conf[H_PATH], stray[H_PATH];
    snprintf(stray, sizeof stray, "%s", h_path("stray.sock"));
    snprintf(sock, sizeof sock, "%s", h_path("passed.sock"));
    snprintf(status, sizeof status, "%s", h_path("passed-status.sock"));
    snprintf(notify, sizeof notify, "%s", h_path("notify.sock"));
    snprintf(conf, sizeof conf, "%s", h_path("passed.conf"));
    char text[1024];
    snprintf(text, sizeof text,
             "[agent]\nsocket = %s\nstatus_socket = %s\nlog_level = debug\n"
             "[redis]\naddress = %s\n",
             sock, status, H.redis_addr);
    write_file(conf, text);
    int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un na = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(notify), sizeof na.sun_path);
    memcpy(na.sun_path, notify, strlen(notify) + 1);
    cr_assert(nfd >= 0 && bind(nfd, (struct sockaddr *)&na, sizeof na) == 0);

    pid_t pid = h_fork();
    if (pid == 0) {
        int a = listen_at(sock), b = listen_at(status), x = listen_at(stray);
        if (a < 0 || b < 0 || x < 0 || dup2(a, 3) != 3 || dup2(b, 4) != 4 || dup2(x, 5) != 5)
            _exit(120);
        char n[16];
        snprintf(n, sizeof n, "%d", (int)getpid());
        setenv("LISTEN_PID", n, 1);
        setenv("LISTEN_FDS", "3", 1);
        setenv("NOTIFY_SOCKET", notify, 1);
        int out = open(h_path("passed.out"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(out, 2);
        execl(DLOCKD_PATH, DLOCKD_PATH, "-c", conf, (char *)NULL);
        _exit(127);
    }
    /* READY=1 comes once the sockets listen. */
    char msg[256] = "";
    int64_t end = h_deadline(H_START_MS);
    while (!strstr(msg, "READY=1")) {
        cr_assert_lt(h_now_ms(), end, "no READY=1 on NOTIFY_SOCKET");
        ssize_t n = recv(nfd, msg, sizeof msg - 1, MSG_DONTWAIT);
        msg[n > 0 ? n : 0] = '\0';
        if (n <= 0)
            h_sleep_ms(10);
    }
    dlock_client *c = NULL;
    cr_assert_eq(dlock_client_open(&c, sock), 0);
    dlock_lease *l = NULL;
    /* Redis may still be on its way: the wait rides that out. */
    dlock_acquire_options o = {.wait_ms = 10000};
    cr_assert_eq(dlock_lease_acquire(c, "passed", &o, &l), 0);
    cr_assert(h_redis_exists(h_key("passed")));
    cr_assert_eq(dlock_lease_release(l), 0);
    dlock_client_close(c);
    const char *log = h_read_file(h_path("passed.out"));
    cr_assert(log && strstr(log, "using the socket passed for"), "%s", log ? log : "");
    cr_assert(strstr(log, "stray.sock, passed by the service manager, is no socket"), "%s", log);
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un pa = {.sun_family = AF_UNIX};
    memcpy(pa.sun_path, stray, strlen(stray) + 1);
    cr_assert_neq(connect(probe, (struct sockaddr *)&pa, sizeof pa), 0,
                  "the stray passed socket still accepts");
    close(probe);
    kill(pid, SIGTERM);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 0);
    struct stat st;
    cr_assert_eq(stat(sock, &st), 0, "the passed socket's file was removed");
    cr_assert_eq(stat(status, &st), 0, "the passed status socket's file was removed");
    close(nfd);
}

/* The lines of the log at level `level` ("error", "warn"), joined, or "". */
static const char *log_lines(const char *log, const char *level, const char *about)
{
    static char found[4096];
    char tag[32];
    snprintf(tag, sizeof tag, "dlockd[%s]: ", level);
    found[0] = '\0';
    for (const char *p = log; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        if (strstr(line, tag) && (!about || strstr(line, about)))
            snprintf(found + strlen(found), sizeof found - strlen(found), "%s\n", line);
        p = end ? end + 1 : NULL;
    }
    return found;
}

ITEST(agent_cli, status_socket_goes_beside_a_given_client_socket)
{
    /* `dlockd -s DIR/a.sock -r ...`, no configuration file: the status
     * socket is DIR/a-status.sock, where dlockctl -s DIR/a.sock looks. */
    h_redis_start();
    char sock[H_PATH], status[H_PATH], out[H_PATH];
    snprintf(sock, sizeof sock, "%s/a.sock", H.dir);
    snprintf(status, sizeof status, "%s/a-status.sock", H.dir);
    snprintf(out, sizeof out, "%s", h_path("a.out"));
    char *argv[] = {DLOCKD_PATH, "-s", sock, "-r", H.redis_addr, NULL};
    pid_t pid = h_spawn(argv, out);
    H_WAIT_UNTIL(H_START_MS, h_read_file(out) && strstr(h_read_file(out), "notice link up"));
    cr_assert_eq(access(status, F_OK), 0, "no %s:\n%s", status, h_read_file(out));
    int st = h_ctl(10000, "-s", sock, "status", "--json", NULL);
    const char *answer = h_read_file(h_path("ctl.out"));
    cr_assert_eq(st, 0, "dlockctl -s %s status --json: exit %d: %s", sock, st, answer);
    cr_assert(h_json_valid(answer), "not JSON: %s", answer);
    kill(pid, SIGTERM);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 0);
    const char *log = h_read_file(out);
    cr_assert_str_empty(log_lines(log, "error", NULL), "errors logged:\n%s", log);
    cr_assert_str_empty(log_lines(log, "warn", "status"), "warnings logged:\n%s", log);

    /* -S wins, and "" means none. */
    char custom[H_PATH];
    snprintf(custom, sizeof custom, "%s/custom.sock", H.dir);
    char *argv2[] = {DLOCKD_PATH, "-s", sock, "-S", custom, "-r", H.redis_addr, NULL};
    snprintf(out, sizeof out, "%s", h_path("custom.out"));
    pid = h_spawn(argv2, out);
    H_WAIT_UNTIL(H_START_MS, h_read_file(out) && strstr(h_read_file(out), "notice link up"));
    cr_assert_eq(access(custom, F_OK), 0, "no %s:\n%s", custom, h_read_file(out));
    cr_assert_neq(access(status, F_OK), 0, "%s is there too", status);
    kill(pid, SIGTERM);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 0);
    char *argv3[] = {DLOCKD_PATH, "-s", sock, "-S", "", "-r", H.redis_addr, NULL};
    snprintf(out, sizeof out, "%s", h_path("none.out"));
    pid = h_spawn(argv3, out);
    H_WAIT_UNTIL(H_START_MS, h_read_file(out) && strstr(h_read_file(out), "notice link up"));
    cr_assert_null(strstr(h_read_file(out), "status socket on"), "%s", h_read_file(out));
    cr_assert_neq(access(status, F_OK), 0, "%s is there", status);
    kill(pid, SIGTERM);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 0);
}

/* ---- socket groups ---- */

/* Runs dlockd as nobody (65534) with the given [agent] lines, a client
 * socket and the Redis of the test, its stderr in DIR/run/agent.log, and
 * returns its pid. */
static pid_t agent_as_nobody(const char *agent_ini)
{
    static char run[H_PATH], conf[H_PATH + 16], log[H_PATH + 16];
    snprintf(run, sizeof run, "%s/run", H.dir);
    snprintf(conf, sizeof conf, "%s/dlockd.conf", run);
    snprintf(log, sizeof log, "%s/agent.log", run);
    cr_assert_eq(chmod(H.dir, 0711), 0);
    /* Sticky: nobody may make the sockets here, and nobody else remove them. */
    cr_assert_eq(mkdir(run, 0700), 0);
    cr_assert_eq(chmod(run, 01777), 0);
    FILE *f = fopen(conf, "w");
    cr_assert(f);
    fprintf(f,
            "[agent]\nsocket = %s/a.sock\nstatus_socket = %s/s.sock\n%s\n[redis]\naddress = %s\n",
            run, run, agent_ini, H.redis_addr);
    fclose(f);
    cr_assert_eq(chmod(conf, 0644), 0);
    pid_t pid = h_fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 2) < 0 || setgroups(0, NULL) != 0 || setgid(65534) != 0 ||
            setuid(65534) != 0)
            _exit(100);
        execl(DLOCKD_PATH, DLOCKD_PATH, "-c", conf, NULL);
        _exit(101);
    }
    return pid;
}

static const char *nobody_log(void)
{
    return h_read_file(h_path("run/agent.log"));
}

/* The client socket cannot be given to a group the agent is not in: an
 * error that says why, and no agent (its members could not lock). */
ITEST(agent_cli, a_socket_group_the_agent_cannot_use_stops_it)
{
    h_redis_start();
    pid_t pid = agent_as_nobody("socket_group = root");
    int st = h_wait_child(pid, 10000);
    cr_assert(st != 0 && st != -1, "the agent ran on (status %d)", st);
    const char *log = nobody_log();
    cr_assert(log && strstr(log, "a.sock to group root: Operation not permitted"), "%s",
              log ? log : "(no log)");
    cr_assert_null(strstr(log, "listening on"), "a success line: %s", log);
}

/* The status socket likewise: the error is logged, no line claims the
 * group, and the agent serves locks without a status socket. */
ITEST(agent_cli, a_status_socket_group_the_agent_cannot_use_is_an_error)
{
    h_redis_start();
    pid_t pid = agent_as_nobody("status_socket_group = root");
    H_WAIT_UNTIL(10000, nobody_log() && strstr(nobody_log(), "listening on"));
    H_WAIT_UNTIL(10000, strstr(nobody_log(), "s.sock to group root: Operation not permitted"));
    /* The next line of the log, written after that one. */
    H_WAIT_UNTIL(10000, strstr(nobody_log(), "running without a status socket"));
    cr_assert_null(strstr(nobody_log(), "group root)"), "a success line: %s", nobody_log());
    H_WAIT_UNTIL(10000, strstr(nobody_log(), "started;")); /* SIGTERM is handled */
    cr_assert_eq(kill(pid, SIGTERM), 0);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 0);
}

/* dlockd -n names a group that does not exist. */
ITEST(agent_cli, an_unknown_socket_group_is_refused_by_the_check)
{
    h_agent_config(0, "socket_group = no-such-group-here", NULL);
    char cmd[H_PATH * 2];
    snprintf(cmd, sizeof cmd, "%s -n -c %s 2>&1", DLOCKD_PATH, H.agent[0].conf);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char out[512] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s", out);
    cr_assert(strstr(out, "socket_group = no-such-group-here: no such group"), "%s", out);
}

/* ---- socket directories ---- */

#define NOBODY 65534

/* DIR/name, a new directory with this mode (whatever the umask). */
static const char *new_dir(const char *name, mode_t mode)
{
    const char *d = h_path(name);
    cr_assert_eq(mkdir(d, 0700), 0, "mkdir %s", d);
    cr_assert_eq(chmod(d, mode), 0);
    return d;
}

/* Runs dlockd with its client socket at dir/x.sock and no status socket,
 * expects it to refuse to start, and returns its output. */
static const char *refused_in(const char *dir)
{
    char sock[H_PATH + 16], out[H_PATH + 16];
    snprintf(sock, sizeof sock, "%s/x.sock", dir);
    snprintf(out, sizeof out, "%s.out", dir);
    char *argv[] = {DLOCKD_PATH, "-s", sock, "-S", "", "-r", H.redis_addr, NULL};
    int st = run_agent(argv, out);
    const char *log = h_read_file(out);
    cr_assert_eq(st, 1, "dlockd exited %d:\n%s", st, log ? log : "");
    cr_assert_neq(access(sock, F_OK), 0, "%s was made", sock);
    return log ? log : "";
}

/* Another user could replace the socket in a directory its group or everyone
 * may write: the agent refuses to start, naming the directory and why; also
 * when it is a directory above. */
ITEST(agent_cli, refuses_a_socket_directory_others_may_write)
{
    h_redis_start();
    const struct {
        const char *name;
        mode_t mode;
        const char *says;
    } cases[] = {
        {"open", 0777, "open is writable by everyone (mode 0777) and not sticky"},
        {"shared", 0770, "shared is writable by its group (mode 0770) and not sticky"},
        {"open/inner", 0755, "open is writable by everyone (mode 0777) and not sticky"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *log = refused_in(new_dir(cases[i].name, cases[i].mode));
        cr_assert(strstr(log, cases[i].says) && strstr(log, "not listening on"), "%s: %s",
                  cases[i].name, log);
    }
}

/* A sticky directory that everyone may write (as /tmp) is accepted; the
 * sockets get the configured mode and group whatever the umask. */
ITEST(agent_cli, a_sticky_directory_is_accepted_with_the_configured_mode_and_group)
{
    h_redis_start();
    const char *dir = new_dir("tmp", 01777);
    /* As root, any group; otherwise our own. */
    gid_t gid = geteuid() == 0 ? NOBODY : getegid();
    char conf[H_PATH + 16], out[H_PATH + 16], sock[H_PATH + 16], status[H_PATH + 16];
    snprintf(conf, sizeof conf, "%s", h_path("sticky.conf"));
    snprintf(out, sizeof out, "%s", h_path("sticky.out"));
    snprintf(sock, sizeof sock, "%s/x.sock", dir);
    snprintf(status, sizeof status, "%s/s.sock", dir);
    FILE *f = fopen(conf, "w");
    cr_assert(f);
    fprintf(f,
            "[agent]\nsocket = %s\nsocket_mode = 0640\nsocket_group = %u\nstatus_socket = %s\n"
            "status_socket_mode = 0604\nstatus_socket_group = %u\n[redis]\naddress = %s\n",
            sock, (unsigned)gid, status, (unsigned)gid, H.redis_addr);
    fclose(f);
    mode_t old = umask(0); /* a wide umask of the agent changes nothing */
    char *argv[] = {DLOCKD_PATH, "-c", conf, NULL};
    pid_t pid = h_spawn(argv, out);
    umask(old);
    /* Started: both sockets are made, and SIGTERM is handled. */
    H_WAIT_UNTIL(H_START_MS, h_read_file(out) && strstr(h_read_file(out), "started;"));
    const struct {
        const char *path;
        mode_t mode;
    } want[] = {{sock, 0640}, {status, 0604}};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        cr_assert_eq(lstat(want[i].path, &st), 0, "%s", want[i].path);
        cr_assert(S_ISSOCK(st.st_mode), "%s", want[i].path);
        cr_assert_eq(st.st_mode & 07777, want[i].mode, "%s: mode %04o", want[i].path,
                     (unsigned)(st.st_mode & 07777));
        cr_assert_eq(st.st_gid, gid, "%s: group %u", want[i].path, (unsigned)st.st_gid);
    }
    cr_assert_eq(kill(pid, SIGTERM), 0);
    cr_assert_eq(h_wait_child(pid, H_STOP_MS), 0);
}

/* As nobody, the attack of a user who may write the socket's directory:
 * as soon as a socket appears at path, it is moved away and a symbolic link
 * to target put in its place, again and again until killed. */
static pid_t swap_for_link(const char *path, const char *target)
{
    pid_t pid = h_fork();
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
            _exit(100);
        char aside[H_PATH * 2];
        snprintf(aside, sizeof aside, "%s.aside", path);
        for (;;) {
            struct stat st;
            if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && rename(path, aside) == 0 &&
                symlink(target, path) != 0)
                continue; /* the agent may have made its socket again meanwhile: try again */
        }
    }
    /* Under way once it runs as nobody. */
    char status[64];
    snprintf(status, sizeof status, "/proc/%d/status", (int)pid);
    H_WAIT_UNTIL(H_EVENT_MS, h_read_file(status) && strstr(h_read_file(status), "Uid:\t65534"));
    return pid;
}

/* A root agent never changes a root file through a symbolic link that
 * another user puts at its socket path once the socket is bound: in a
 * directory that user may write, the agent refuses to start; in a sticky
 * one, the user cannot move the agent's socket. A directory of another user
 * is refused too. */
ITEST(agent_cli, a_symlink_at_the_socket_path_is_never_followed)
{
    if (geteuid() != 0)
        h_skip("needs root: the agent runs as root, the attacker as nobody");
    h_redis_start();
    cr_assert_eq(chmod(H.dir, 0711), 0);
    const char *target = h_path("precious");
    write_file(target, "root only\n");
    cr_assert_eq(chmod(target, 0600), 0);
    const char *dirs[] = {new_dir("open", 0777), new_dir("tmp", 01777)};
    for (int i = 0; i < 2; i++) {
        char sock[H_PATH + 16], out[H_PATH + 16];
        snprintf(sock, sizeof sock, "%s/x.sock", dirs[i]);
        snprintf(out, sizeof out, "%s.out", dirs[i]);
        pid_t attacker = swap_for_link(sock, target);
        char *argv[] = {DLOCKD_PATH, "-s", sock, "-S", "", "-r", H.redis_addr, NULL};
        pid_t agent = h_spawn(argv, out);
        if (i == 0) {
            int st = h_wait_child(agent, 5000);
            cr_assert_eq(st, 1, "dlockd in %s exited %d: %s", dirs[i], st, h_read_file(out));
        } else {
            H_WAIT_UNTIL(H_START_MS, h_read_file(out) && strstr(h_read_file(out), "started;"));
            struct stat st;
            cr_assert_eq(lstat(sock, &st), 0);
            cr_assert(S_ISSOCK(st.st_mode), "the agent's socket was replaced");
            cr_assert_eq(kill(agent, SIGTERM), 0);
            cr_assert_eq(h_wait_child(agent, H_STOP_MS), 0);
        }
        kill(attacker, SIGKILL);
        h_wait_child(attacker, H_STOP_MS);
        struct stat t;
        cr_assert_eq(stat(target, &t), 0);
        cr_assert_eq(t.st_mode & 07777, 0600, "the target's mode is %04o",
                     (unsigned)(t.st_mode & 07777));
        cr_assert_eq(t.st_uid, 0);
        cr_assert_str_eq(h_read_file(target), "root only\n");
    }
    /* A directory of another user: it may replace the socket as it likes. */
    const char *theirs = new_dir("theirs", 0755);
    cr_assert_eq(chown(theirs, NOBODY, NOBODY), 0);
    cr_assert(strstr(refused_in(theirs), "theirs belongs to uid 65534"));
}
