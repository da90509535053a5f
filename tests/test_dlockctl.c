/* SPDX-License-Identifier: BSD-3-Clause */
/* test_dlockctl.c -- `dlockctl run`: the lock is held while CMD runs, CMD's
 * exit status is passed on, a taken lock gives 75 (or -E), a lease lost while
 * CMD runs sends CMD SIGTERM and gives 79 (at once, also when the agent is
 * stopped), and the usage and agent errors give 64 and 69; durations in
 * seconds or with a unit, as flock(1) takes them; a Redis outage gives 69,
 * not the busy code; connection errors name the socket and the reason; the
 * help of each command; the status socket found beside the client socket; a
 * failover's doubt stops CMD even when it clears at once, another JEOPARDY
 * does not (against a stand-in agent that sends those events); `dlockctl
 * reload`'s answers and exit codes. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "shm.h"

/* A shell loop of at most ~10 s, so a CMD that is never stopped cannot
 * outlive the test for long. */
#define BOUNDED_WAIT "i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done"

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

ITEST(dlockctl, passes_on_command_exit_status)
{
    h_start(NULL);
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "job", "--", "sh", "-c", "exit 7", NULL);
    cr_assert_eq(st, 7, "dlockctl exit status %d, CMD exited 7", st);
    st = h_ctl(5000, "-s", H.agent[0].sock, "run", "job", "--", "true", NULL);
    cr_assert_eq(st, 0);
    H_KEY_GONE(h_key("job"));
}

/* -c STRING: the shell runs the string while the lock is held, as with
 * flock -c; its status is dlockctl's. Nothing may follow NAME. */
ITEST(dlockctl, runs_a_shell_string_with_c)
{
    h_start(NULL);
    const char *out = h_path("c.out");
    const char *script =
        h_keepf("printf '%%s %%s' \"$DLOCK_NAME\" \"$DLOCK_FENCE\" > %s; exit 5", out);
    int st = h_ctl(5000, "-s", H.agent[0].sock, "run", "-c", script, "shelljob", NULL);
    cr_assert_eq(st, 5, "dlockctl run -c: exit %d, the string exited 5", st);
    const char *said = h_read_file(out);
    cr_assert(said && strncmp(said, "shelljob ", 9) == 0 && strlen(said) > 9, "the string saw '%s'",
              said ? said : "(nothing)");
    H_KEY_GONE(h_key("shelljob"));
    st = h_ctl(5000, "-s", H.agent[0].sock, "run", "--command", "exit 0", "shelljob", NULL);
    cr_assert_eq(st, 0);
    st = h_ctl(5000, "-s", H.agent[0].sock, "run", "-c", "true", "shelljob", "--", "true", NULL);
    cr_assert_eq(st, 64, "-c with a CMD too: exit %d", st);
}

ITEST(dlockctl, holds_the_lock_while_command_runs)
{
    h_start(NULL);
    char script[512];
    snprintf(script, sizeof script,
             "printf %%s \"$DLOCK_NAME\" > %s; touch %s; "
             "i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done",
             h_path("name"), h_path("started"), h_path("go"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "held", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));

    const char *name = h_read_file(h_path("name"));
    cr_assert_not_null(name);
    cr_assert_str_eq(name, "held", "CMD saw DLOCK_NAME='%s'", name);
    char *tok = h_redis_get(h_key("held"));
    cr_assert(h_is_token(tok), "no lock key while CMD runs");
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "held", 5000, 0, &l), DLOCK_EBUSY);

    FILE *f = fopen(h_path("go"), "w");
    cr_assert_not_null(f);
    fclose(f);
    int st = h_wait_child(pid, 3000);
    cr_assert_eq(st, 0, "dlockctl exit status %d", st);
    H_KEY_GONE(h_key("held"));
    l = h_must_acquire(a, "held", 5000);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(dlockctl, taken_lock_exits_75_or_the_E_code)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "taken", 30000);
    const char *sock = H.agent[0].sock;
    char marker[300];
    snprintf(marker, sizeof marker, "touch %s", h_path("ran"));

    int st = h_ctl(5000, "-s", sock, "run", "-n", "taken", "--", "sh", "-c", marker, NULL);
    cr_assert_eq(st, 75, "-n on a taken lock: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "-n", "-E", "3", "taken", "--", "sh", "-c", marker, NULL);
    cr_assert_eq(st, 3, "-n -E 3 on a taken lock: exit %d", st);

    st = h_ctl(5000, "-s", sock, "run", "--nonblock", "--conflict-exit-code", "4", "taken", "--",
               "sh", "-c", marker, NULL);
    cr_assert_eq(st, 4, "--nonblock --conflict-exit-code 4 on a taken lock: exit %d", st);

    /* -w counts seconds, as flock -w does, or the unit it ends in: each
     * of these waits half a second (not half a millisecond, nor not at all)
     * before giving up. */
    const char *const half[] = {"0.5", "500ms", ".5s"};
    for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) {
        int64_t t0 = h_now_ms();
        st = h_ctl(5000, "-s", sock, "run", "-w", half[i], "taken", "--", "sh", "-c", marker, NULL);
        int64_t el = h_now_ms() - t0;
        cr_assert_eq(st, 75, "-w %s on a taken lock: exit %d", half[i], st);
        cr_assert_geq(el, 490, "-w %s gave up after %lld ms", half[i], (long long)el);
    }
    cr_assert(!exists(h_path("ran")), "CMD ran without the lock");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert(h_redis_exists(h_key("taken")));
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(dlockctl, waits_for_the_lock_by_default)
{
    h_start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "queue", 30000);
    char script[300];
    snprintf(script, sizeof script, "echo ran > %s", h_path("ran"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "queue", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    cr_assert_eq(h_wait_child(pid, 400), -1, "dlockctl did not wait for the lock");
    cr_assert(!exists(h_path("ran")));
    cr_assert_eq(dlock_lease_release(l), 0);
    int st = h_wait_child(pid, H_EVENT_MS); /* woken by the notice, not the fallback */
    cr_assert_eq(st, 0, "dlockctl exit %d after the release", st);
    cr_assert(exists(h_path("ran")));
}

ITEST(dlockctl, lease_lost_terminates_command_and_exits_79)
{
    h_start(NULL);
    char script[600];
    snprintf(script, sizeof script,
             "trap 'echo got-term > %s; exit 0' TERM; touch %s; " BOUNDED_WAIT, h_path("term"),
             h_path("started"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "-t", "0.6", "fragile", "--", "sh",
                          "-c", script,          NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    cr_assert_eq(h_redis_exists(h_key("fragile")), 1);

    h_redis_del(h_key("fragile"));
    int st = h_wait_child(pid, H_EVENT_MS);
    cr_assert_neq(st, -1, "dlockctl still running %d ms after its lease was lost",
                  h_scaled_ms(H_EVENT_MS));
    cr_assert_eq(st, 79, "dlockctl exit %d after the lease was lost", st);
    const char *term = h_read_file(h_path("term"));
    cr_assert_not_null(term, "CMD did not receive SIGTERM");
    cr_assert_str_eq(term, "got-term\n");
}

ITEST(dlockctl, sigterm_is_forwarded_and_lock_released)
{
    h_start(NULL);
    char script[300];
    snprintf(script, sizeof script, "touch %s; " BOUNDED_WAIT, h_path("started"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "fwd", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    cr_assert_eq(h_redis_exists(h_key("fwd")), 1);
    kill(pid, SIGTERM);
    int st = h_wait_child(pid, 3000);
    cr_assert_eq(st, 128 + SIGTERM, "dlockctl exit %d; CMD was killed by SIGTERM", st);
    H_KEY_GONE(h_key("fwd"));
}

ITEST(dlockctl, agent_unreachable_usage_and_exec_errors)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    int st = h_ctl(5000, "-s", h_path("no-agent.sock"), "run", "x", "--", "true", NULL);
    cr_assert_eq(st, 69, "no agent: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", NULL);
    cr_assert_eq(st, 64, "no name: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "x", NULL);
    cr_assert_eq(st, 64, "no command: exit %d", st);
    st = h_ctl(5000, "-s", sock, "frobnicate", NULL);
    cr_assert_eq(st, 64, "unknown command: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "-w", "soon", "x", "--", "true", NULL);
    cr_assert_eq(st, 64, "bad wait: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "a b", "--", "true", NULL);
    cr_assert_eq(st, 64, "bad lock name: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "x", "--", "/nonexistent/cmd", NULL);
    cr_assert_eq(st, 127, "missing command: exit %d", st);
    H_KEY_GONE(h_key("x"));
}

/* An agent without a state directory: its crash ends the lease. (One that
 * keeps its state leaves it to a successor: the next test.) */
ITEST(dlockctl, agent_crash_while_command_runs_exits_79)
{
    h_start("state_dir =");
    char script[600];
    snprintf(script, sizeof script,
             "trap 'echo got-term > %s; exit 0' TERM; touch %s; " BOUNDED_WAIT, h_path("term"),
             h_path("started"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "crashy", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    h_agent_kill(0);
    int st = h_wait_child(pid, 3000);
    cr_assert_neq(st, -1, "dlockctl still running 3 s after the agent died");
    cr_assert_eq(st, 79, "dlockctl exit %d after the agent died", st);
    const char *term = h_read_file(h_path("term"));
    cr_assert_not_null(term, "CMD did not receive SIGTERM");
}

/* kill -9 of an agent that keeps its state, and a successor: the lease is
 * taken over and CMD runs on (JEOPARDY for a restart is no loss); dlockctl
 * exits with CMD's status and releases the lock. */
ITEST(dlockctl, agent_crash_and_successor_leave_the_command_running)
{
    h_start(NULL);
    char script[512];
    snprintf(script, sizeof script,
             "trap 'echo got-term > %s; exit 0' TERM; touch %s; "
             "i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
             "[ -e %s ] && exit 5",
             h_path("term"), h_path("started"), h_path("go"), h_path("go"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "across", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    char *tok = h_redis_get(h_key("across"));
    h_agent_kill(0);
    h_agent_start_n(0);
    cr_assert_str_eq(h_redis_get(h_key("across")), tok);
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "across", 5000, 0, &l), DLOCK_EBUSY);
    FILE *f = fopen(h_path("go"), "w");
    cr_assert_not_null(f);
    fclose(f);
    int st = h_wait_child(pid, H_EVENT_MS);
    cr_assert_eq(st, 5, "dlockctl exit %d (CMD exits 5 when it runs to the end)", st);
    cr_assert_null(h_read_file(h_path("term")), "CMD was signalled");
    H_KEY_GONE(h_key("across"));
}

/* ---- a relay that shows what dlockctl asks of the agent ---- */

/* A socket listening at path, or connected to it; for the relay's child,
 * which exits when it cannot have one. */
static int unix_socket(const char *path, int listening)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || strlen(path) >= sizeof sa.sun_path)
        _exit(120);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int rc = listening ? bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 1)
                       : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc != 0)
        _exit(121);
    return fd;
}

/* Client to agent: passes the bytes on and logs the type of each whole
 * frame. -1 once the client has gone. */
static int relay_client(int from, int to, uint8_t *buf, size_t cap, size_t *have, FILE *log)
{
    ssize_t n = recv(from, buf + *have, cap - *have, 0);
    if (n <= 0 || send(to, buf + *have, (size_t)n, MSG_NOSIGNAL) != n)
        return -1;
    *have += (size_t)n;
    struct wire_hdr h;
    while (wire_hdr_decode(buf, *have, WIRE_MAX_BODY, &h) > 0 && *have >= WIRE_HDR_LEN + h.len) {
        fprintf(log, "frame 0x%02x\n", (unsigned)h.type);
        fflush(log);
        *have -= WIRE_HDR_LEN + h.len;
        memmove(buf, buf + WIRE_HDR_LEN + h.len, *have);
    }
    return 0;
}

/* Agent to client, with the lease-page descriptors HELLO_OK carries. */
static int relay_agent(int from, int to)
{
    uint8_t buf[8192];
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t n = recvmsg(from, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return -1;
    iov.iov_len = (size_t)n;
    if (msg.msg_controllen == 0)
        msg.msg_control = NULL;
    return sendmsg(to, &msg, MSG_NOSIGNAL) == n ? 0 : -1;
}

/* Starts a child that serves one connection at path, relayed to agent 0,
 * and writes to log a line per frame the client sends, then "client gone". */
static void relay_start(const char *path, const char *log)
{
    if (h_fork() != 0) {
        H_WAIT_UNTIL(H_START_MS, exists(path));
        return;
    }
    char tmp[H_PATH + 72];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int lfd = unix_socket(tmp, 1);
    if (rename(tmp, path) != 0) /* only a listening socket appears at path */
        _exit(122);
    int cfd = accept(lfd, NULL, NULL), afd = unix_socket(H.agent[0].sock, 0);
    FILE *f = fopen(log, "w");
    if (cfd < 0 || !f)
        _exit(123);
    uint8_t buf[2 * (WIRE_HDR_LEN + WIRE_MAX_BODY)];
    size_t have = 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = cfd, .events = POLLIN}, {.fd = afd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[0].revents && relay_client(cfd, afd, buf, sizeof buf, &have, f) != 0)
            break;
        if (p[1].revents && relay_agent(afd, cfd) != 0)
            break;
    }
    fprintf(f, "client gone\n");
    fclose(f);
    _exit(0);
}

/* Is the process stopped (SIGSTOP), by its state in /proc? */
static int stopped(pid_t pid)
{
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *end = strrchr(text, ')'); /* the command name may hold anything */
    return end && end[1] == ' ' && end[2] == 'T';
}

ITEST(dlockctl, stopped_agent_lease_loss_exits_without_waiting_for_it)
{
    /* With the agent stopped, dlockctl sees the lease run out on the lease
     * page, stops CMD and exits 79 while the agent is still stopped: it did
     * not wait for an answer, and did not even ask for a release (closing
     * its connection gives back whatever the agent still holds). */
    h_start(NULL);
    char sock[H_PATH + 64], frames[H_PATH + 64]; /* h_path()'s buffers are reused */
    snprintf(sock, sizeof sock, "%s", h_path("relay.sock"));
    snprintf(frames, sizeof frames, "%s", h_path("frames"));
    relay_start(sock, frames);
    char script[300];
    snprintf(script, sizeof script, "touch %s; exec sleep 1000", h_path("started"));
    const char *args[] = {"-s", sock, "run", "-t", "0.3", "wedged", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    h_agent_pause(0);

    int st = h_wait_child(pid, 30000);
    cr_assert(stopped(H.agent[0].pid), "the agent ran again before dlockctl was seen to exit");
    cr_assert_neq(st, -1, "dlockctl still running 30 s after its lease ran out");
    cr_assert_eq(st, 79, "dlockctl exit %d after the lease ran out", st);
    H_WAIT_UNTIL(3000, h_read_file(frames) && strstr(h_read_file(frames), "client gone"));
    char release[32];
    snprintf(release, sizeof release, "frame 0x%02x", WIRE_T_RELEASE);
    const char *sent = h_read_file(frames);
    cr_assert_null(strstr(sent, release), "dlockctl asked the stopped agent for a release:\n%s",
                   sent);
    cr_assert_not_null(strstr(h_read_file(h_path("ctl.out")), "lease on wedged lost"));

    h_agent_resume(0);
    H_WAIT_UNTIL(3000, !h_redis_exists(h_key("wedged")));
}

/* ---- durations, outages, connection errors, help, the status socket ---- */

/* Runs dlockctl with a fresh DIR/ctl.out and returns its exit status; the
 * output (stdout and stderr) is then in ctl_out(). */
#define CTL(...) (unlink(h_path("ctl.out")), h_ctl(10000, __VA_ARGS__, NULL))

static const char *ctl_out(void)
{
    const char *out = h_read_file(h_path("ctl.out"));
    return out ? out : "";
}

ITEST(dlockctl, durations_take_units_and_bad_ones_are_usage_errors)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    static const char *const good[][2] = {
        {"-w", "5s"},      {"-w", "5"}, {"--wait", "1.5m"}, {"--timeout", "0.01h"},
        {"-w", "forever"}, {"-w", "0"}, {"-t", "30s"},      {"--ttl", "2.5"},
        {"-t", "1500ms"},  {"-k", "0"}, {"-k", "1.5"},      {"--kill-after", "250ms"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int st = CTL("-s", sock, "run", good[i][0], good[i][1], "free", "--", "true");
        cr_assert_eq(st, 0, "%s %s: exit %d: %s", good[i][0], good[i][1], st, ctl_out());
    }
    /* Each with the reason the message gives. */
    static const char *const bad[][3] = {
        {"-w", "soon", "not a number"},
        {"-w", "-1", "negative"},
        {"-w", "5x", "unknown unit"},
        {"-w", "1e3", "unknown unit"},
        {"-w", "", "not a number"},
        {"-w", "0.5.5", "unknown unit"},
        {"-w", "5 s", "unknown unit"},
        {"-w", "+5", "not a number"},
        {"-w", "5S", "unknown unit"},
        {"-w", ".", "not a number"},
        {"-w", "9999999999999999999", "too long"},
        {"--wait", "3000000000000000h", "too long"},
        {"-t", "0", "must be at least 1ms"},
        {"-t", "50d", "unknown unit"},
        {"--ttl", "1200h", "too long"},
        {"-t", "-3s", "negative"},
        {"-k", "-1", "negative"},
        {"--kill-after", "x", "not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = CTL("-s", sock, "run", bad[i][0], bad[i][1], "free", "--", "true");
        cr_assert_eq(st, 64, "%s '%s': exit %d", bad[i][0], bad[i][1], st);
        char want[64];
        snprintf(want, sizeof want, "'%s': %s", bad[i][1], bad[i][2]);
        cr_assert(strstr(ctl_out(), "dlockctl: invalid ") && strstr(ctl_out(), want),
                  "%s '%s': the message lacks \"%s\": %s", bad[i][0], bad[i][1], want, ctl_out());
    }
    H_KEY_GONE(h_key("free"));
}

ITEST(dlockctl, redis_outage_exits_69_with_a_message_not_the_busy_code)
{
    /* The wait (1 s) runs out while the agent rides out the outage (with
     * no outage_wait_ms ceiling, for as long as the wait): that is still an
     * outage, not a lock that stayed taken. */
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    char marker[300];
    snprintf(marker, sizeof marker, "touch %s", h_path("ran"));
    h_redis_stop();
    int st = CTL("-s", sock, "run", "-w", "1", "out", "--", "sh", "-c", marker);
    cr_assert_eq(st, 69, "run -w 1 with Redis down: exit %d: %s", st, ctl_out());
    cr_assert(strstr(ctl_out(), "cannot lock out") && strstr(ctl_out(), "Redis"),
              "no message naming Redis: %s", ctl_out());
    st = CTL("-s", sock, "run", "-n", "out", "--", "sh", "-c", marker);
    cr_assert_eq(st, 69, "run -n with Redis down: exit %d: %s", st, ctl_out());
    cr_assert(!exists(h_path("ran")), "CMD ran without the lock");

    /* holder reads Redis: the same outage, the same code. */
    char status[H_PATH + 32];
    snprintf(status, sizeof status, "%s/status0.sock", H.dir);
    st = CTL("-S", status, "holder", "out");
    cr_assert_eq(st, 69, "holder with Redis down: exit %d: %s", st, ctl_out());
    cr_assert(strstr(ctl_out(), "Redis"), "%s", ctl_out());
    /* A name no lock can have is a usage error, as for run. */
    h_redis_start();
    cr_assert_eq(CTL("-S", status, "holder", "{x}"), 64, "%s", ctl_out());
}

/* An agent that stops answering (SIGSTOP, a wedged host) while dlockctl
 * waits for a lock is not a lock that stayed taken: exit 69 with a message,
 * once the library's allowance past the wait has run out, and CMD never
 * runs. */
ITEST(dlockctl, a_stopped_agent_is_not_a_taken_lock)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *held = h_must_acquire(a, "wedged", 30000);
    char marker[300];
    snprintf(marker, sizeof marker, "touch %s", h_path("ran"));
    unlink(h_path("ctl.out"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "-w", "3", "wedged", "--", "sh",
                          "-c", marker,          NULL};
    pid_t pid = h_ctl_spawn(args);
    /* Stopped once dlockctl's acquire is queued behind the held lease (the
     * lease shows one waiter), well before its 3 s wait is answered: not
     * merely connected, when the handshake would be what goes unanswered. */
    const char *ls;
    H_WAIT_UNTIL(10000,
                 (ls = h_status_ask(0, "leases-json wedged\n")) && strstr(ls, "\"waiters\":1"));
    h_agent_pause(0);
    int st = h_wait_child(pid, 30000);
    h_agent_resume(0);
    cr_assert_eq(st, 69, "exit %d: %s", st, ctl_out());
    cr_assert(strstr(ctl_out(), "did not answer"), "%s", ctl_out());
    cr_assert(!exists(h_path("ran")), "CMD ran without the lock");
    cr_assert_eq(dlock_lease_release(held), 0);
}

/* Binds a unix socket at path and closes it: what a crashed agent leaves. */
static void stale_socket(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    close(fd);
}

/* Asserts the output names the socket and the reason. */
#define SAYS(what, path, reason)                                                                   \
    cr_assert(strstr(ctl_out(), path) && strstr(ctl_out(), reason), "%s: %s", what, ctl_out())

ITEST(dlockctl, connection_errors_name_the_socket_and_the_reason)
{
    h_start(NULL);
    char none[H_PATH + 32], stale[H_PATH + 32];
    snprintf(none, sizeof none, "%s", h_path("none.sock"));
    snprintf(stale, sizeof stale, "%s", h_path("stale.sock"));
    stale_socket(stale);

    cr_assert_eq(CTL("-s", none, "run", "x", "--", "true"), 69);
    SAYS("no such socket", none, "No such file or directory");
    cr_assert(strstr(ctl_out(), "is dlockd running?") && strstr(ctl_out(), "DLOCK_SOCKET"), "%s",
              ctl_out());
    cr_assert_eq(CTL("-s", stale, "run", "x", "--", "true"), 69);
    SAYS("stale socket", stale, "Connection refused");
    cr_assert(strstr(ctl_out(), "stale"), "%s", ctl_out());
    cr_assert_eq(CTL("-S", none, "status"), 69);
    SAYS("no status socket", none, "No such file or directory");
    cr_assert_eq(CTL("-S", stale, "leases"), 69);
    SAYS("stale status socket", stale, "Connection refused");
}

/* Runs dlockctl with up to 5 arguments as nobody (uid and gid 65534, no
 * supplementary groups); its exit status, its output in DIR/nobody.out. */
static int ctl_as_nobody(const char *const args[5])
{
    unlink(h_path("nobody.out"));
    pid_t pid = h_fork();
    if (pid == 0) {
        /* lock's state files: in the test's directory, not in /tmp. */
        const char *xdg = h_path("nobody-xdg");
        if ((mkdir(xdg, 0700) != 0 && errno != EEXIST) || chown(xdg, 65534, 65534) != 0 ||
            setenv("XDG_RUNTIME_DIR", xdg, 1) != 0)
            _exit(99);
        int fd = open(h_path("nobody.out"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || setgroups(0, NULL) != 0 ||
            setgid(65534) != 0 || setuid(65534) != 0)
            _exit(100);
        execl(DLOCKCTL_PATH, DLOCKCTL_PATH, args[0], args[1], args[2], args[3], args[4],
              (char *)NULL);
        _exit(101);
    }
    return h_wait_child(pid, 10000);
}

/* A socket the user may not connect to is no agent down: 77, not 69, with
 * the socket, the reason and what to do (join its group; or, for a socket
 * only its owner may use, that its mode keeps the group out). */
ITEST(dlockctl, permission_denied_exits_77_and_names_the_socket_and_its_group)
{
    if (geteuid() != 0)
        h_skip("needs root to run dlockctl under a second uid");
    h_start(NULL); /* both sockets mode 0660, of root's group */
    cr_assert_eq(chmod(H.dir, 0755), 0);
    char status[H_PATH + 32];
    snprintf(status, sizeof status, "%s/status0.sock", H.dir);
    struct group *g = getgrgid(getegid());
    cr_assert_not_null(g);
    char group[128];
    snprintf(group, sizeof group, "group '%s'", g->gr_name);
    const char *const runs[][5] = {{"-s", H.agent[0].sock, "run", "x", "true"},
                                   {"-S", status, "status", NULL, NULL},
                                   {"-S", status, "holder", "x", NULL},
                                   {"-S", status, "health", NULL, NULL},
                                   {"-s", H.agent[0].sock, "lock", "x", NULL}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int st = ctl_as_nobody(runs[i]);
        const char *out = h_read_file(h_path("nobody.out"));
        cr_assert_eq(st, 77, "%s as nobody: exit %d: %s", runs[i][2], st, out ? out : "");
        cr_assert(out && strstr(out, runs[i][1]) && strstr(out, "Permission denied") &&
                      strstr(out, group) && strstr(out, "join it"),
                  "%s as nobody: %s", runs[i][2], out ? out : "");
    }
    /* Mode 0600: only root may connect; joining a group would not help. */
    cr_assert_eq(chmod(H.agent[0].sock, 0600), 0);
    cr_assert_eq(chmod(status, 0600), 0);
    for (size_t i = 0; i < 2; i++) {
        int st = ctl_as_nobody(runs[i]);
        const char *out = h_read_file(h_path("nobody.out"));
        cr_assert_eq(st, 77, "%s as nobody, mode 0600: exit %d: %s", runs[i][2], st,
                     out ? out : "");
        cr_assert(out && strstr(out, runs[i][1]) && strstr(out, "Permission denied") &&
                      strstr(out, "only its owner, user 'root'"),
                  "%s as nobody, mode 0600: %s", runs[i][2], out ? out : "");
    }
    /* A missing socket is still 69. */
    const char *const none[5] = {"-s", h_path("none.sock"), "run", "x", "true"};
    cr_assert_eq(ctl_as_nobody(none), 69, "%s", h_read_file(h_path("nobody.out")));
}

ITEST(dlockctl, help_of_each_command_lists_every_option)
{
    static const struct {
        const char *cmd;
        const char *want[24];
    } helps[] = {
        {NULL,
         {"usage:", "run", "status", "leases", "metrics", "holder", "reload", "-s, --socket",
          "-S, --status-socket", "-h, --help", "-V, --version", "Exit status", NULL}},
        {"run",
         {"usage: dlockctl run", "-w, --wait, --timeout DURATION", "-n, --nonblock, --nb",
          "-t, --ttl DURATION", "-E, --conflict-exit-code CODE", "-k, --kill-after DURATION",
          "-s, --socket PATH", "-h, --help", "ms, s, m or h", "64", "69", "70", "73", "75", "77",
          "79", "126", "127", NULL}},
        {"status",
         {"status [--json]", "--json", "-S, --status-socket", "-s, --socket", "-h, --help",
          "Exit status", NULL}},
        {"leases",
         {"leases [--json] [PATTERN]", "--json", "-S, --status-socket", "-s, --socket",
          "-h, --help", "Exit status", NULL}},
        {"metrics",
         {"metrics", "-S, --status-socket", "-s, --socket", "-h, --help", "Exit status", NULL}},
        {"holder",
         {"holder [--json] NAME", "--json", "-S, --status-socket", "-s, --socket", "-h, --help",
          "Exit status", NULL}},
        {"reload",
         {"usage: dlockctl [-S PATH] reload", "needs a restart", "-S, --status-socket",
          "-s, --socket", "-h, --help", "Exit status", "77", "78", NULL}},
    };
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        const char *cmd = helps[i].cmd ? helps[i].cmd : "--help";
        int st = helps[i].cmd ? CTL(cmd, "--help") : CTL("--help");
        cr_assert_eq(st, 0, "%s --help: exit %d", cmd, st);
        char out[16384];
        snprintf(out, sizeof out, "%s", ctl_out());
        for (int j = 0; helps[i].want[j]; j++)
            cr_assert(strstr(out, helps[i].want[j]), "%s --help lacks '%s':\n%s", cmd,
                      helps[i].want[j], out);
        if (helps[i].cmd) { /* -h as well */
            cr_assert_eq(CTL(cmd, "-h"), 0);
            cr_assert_str_eq(ctl_out(), out);
        }
    }
    cr_assert_eq(CTL("metrics", "--json"), 64);
    cr_assert(strstr(ctl_out(), "dlockctl metrics --help"), "%s", ctl_out());
    cr_assert_eq(CTL("reload", "--json"), 64);
    cr_assert_eq(CTL("reload", "now"), 64);
    cr_assert(strstr(ctl_out(), "unexpected argument: now"), "%s", ctl_out());
    /* run's kinds of lock */
    static const char *const kinds[] = {"-x, --exclusive", "-S, --shared", "-p, --permits N"};
    cr_assert_eq(CTL("run", "--help"), 0);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        cr_assert(strstr(ctl_out(), kinds[i]), "run --help lacks '%s':\n%s", kinds[i], ctl_out());
}

ITEST(dlockctl, status_socket_is_found_beside_the_client_socket)
{
    /* The agent's client socket is DIR/dlock.sock: its status socket goes
     * to DIR/status.sock, where dlockctl looks for it given -s or
     * $DLOCK_SOCKET and neither -S nor $DLOCK_STATUS_SOCKET. */
    char status[H_PATH + 32], ini[H_PATH + 64], other[H_PATH + 32];
    snprintf(status, sizeof status, "%s/status.sock", H.dir);
    snprintf(ini, sizeof ini, "status_socket = %s", status);
    h_start(ini);
    const char *sock = H.agent[0].sock;
    unsetenv("DLOCK_STATUS_SOCKET");
    int st = CTL("-s", sock, "status", "--json");
    cr_assert_eq(st, 0, "-s %s status: exit %d: %s", sock, st, ctl_out());
    cr_assert(h_json_valid(ctl_out()), "not JSON: %s", ctl_out());
    cr_assert_eq(CTL("leases", "--socket", sock, "--json"), 0, "%s", ctl_out());
    cr_assert(h_json_valid(ctl_out()), "not JSON: %s", ctl_out());
    cr_assert_eq(setenv("DLOCK_SOCKET", sock, 1), 0);
    cr_assert_eq(CTL("metrics"), 0, "with $DLOCK_SOCKET: %s", ctl_out());
    cr_assert(strstr(ctl_out(), "dlock_grants_total"));

    /* -S and $DLOCK_STATUS_SOCKET win. */
    char none[H_PATH + 32];
    snprintf(none, sizeof none, "%s", h_path("none.sock"));
    cr_assert_eq(setenv("DLOCK_STATUS_SOCKET", none, 1), 0);
    cr_assert_eq(CTL("status"), 69);
    SAYS("$DLOCK_STATUS_SOCKET", none, "No such file");
    unsetenv("DLOCK_STATUS_SOCKET");
    cr_assert_eq(CTL("-S", none, "status"), 69);
    SAYS("-S", none, "No such file");
    unsetenv("DLOCK_SOCKET");

    /* X.sock: X-status.sock. */
    snprintf(other, sizeof other, "%s/other-status.sock", H.dir);
    cr_assert_eq(CTL("-s", h_path("other.sock"), "status"), 69);
    SAYS("beside other.sock", other, "No such file");
    cr_assert(strstr(ctl_out(), "beside the client socket"), "%s", ctl_out());
}

/* ---- failover ---- */

/* A stand-in for dlockd, enough for one `dlockctl run`: the handshake with a
 * lease page, one grant (lease 1, fence 7, in slot 0), then the events a test
 * sends, and the OK of a release. It lets a test send events that the real
 * agent sends only around a Redis failover. */
struct fake {
    int lfd, fd;
    struct shm_slot *slot; /* slot 0 of the lease page */
    uint16_t version;      /* of the HELLO answered */
    char label[WIRE_MAX_LABEL + 1];
};

static int64_t boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void fake_listen(struct fake *f, const char *path)
{
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->lfd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(f->lfd, 4), 0);
}

/* A memfd of size bytes. */
static int fake_memfd(const char *name, size_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)size), 0);
    return fd;
}

/* HELLO_OK with the lease page and touch page of 4 slots attached. */
static void fake_hello(struct fake *f, uint32_t id, uint16_t version)
{
    int fds[2] = {fake_memfd("fake-leases", shm_page_size(4)),
                  fake_memfd("fake-touch", shm_touch_size(4))};
    void *page = mmap(NULL, shm_page_size(4), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    cr_assert_neq(page, MAP_FAILED);
    *(struct shm_hdr *)page = (struct shm_hdr){.magic = SHM_MAGIC,
                                               .version = SHM_VERSION,
                                               .slot_size = sizeof(struct shm_slot),
                                               .nslots = 4};
    f->slot = shm_slots(page);
    struct wire_buf b = {0};
    struct wire_hello_ok ok = {.version = version,
                               .max_name_len = 200,
                               .max_leases = 4,
                               .default_ttl_ms = 30000,
                               .clock_ns = (uint64_t)boot_ns()};
    cr_assert_eq(wire_put_hello_ok(&b, id, &ok), 0);
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {.iov_base = b.data, .iov_len = b.len};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    cr_assert_eq(sendmsg(f->fd, &msg, MSG_NOSIGNAL), (ssize_t)b.len);
    wire_buf_free(&b);
    close(fds[0]);
    close(fds[1]);
}

/* Takes dlockctl's connection, answers its HELLO and grants its ACQUIRE. */
static void fake_grant(struct fake *f)
{
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, h_scaled_ms(H_EVENT_MS)), 1, "dlockctl did not connect");
    f->fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(f->fd, 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(f->fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_HELLO);
    struct wire_hello hello;
    cr_assert_eq(wire_get_hello(body, h.len, &hello), 0);
    f->version = hello.version;
    snprintf(f->label, sizeof f->label, "%.*s", (int)hello.label_len,
             hello.label ? hello.label : "");
    fake_hello(f, h.id, hello.version);
    cr_assert_eq(h_raw_read_frame(f->fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_ACQUIRE);
    int64_t deadline = boot_ns() + 60 * 1000000000ll;
    shm_slot_write(f->slot, DLOCK_STATE_HELD, 1, 7, deadline);
    struct wire_buf b = {0};
    struct wire_granted g = {
        .lease_id = 1, .deadline_ns = (uint64_t)deadline, .fence = 7, .ttl_ms = 30000, .slot = 0};
    cr_assert_eq(wire_put_granted(&b, h.id, &g), 0);
    cr_assert_eq(h_raw_send_buf(f->fd, &b), 0);
}

/* JEOPARDY for reason, then HELD again, both already over in the lease page
 * and sent in one write: the lease was in JEOPARDY for less time than
 * dlockctl takes to look. A failover's doubt shows the lease invalid from
 * the moment it began (as the agent does), another reason keeps its
 * deadline. */
static void fake_jeopardy_then_held(struct fake *f, int reason)
{
    int64_t now = boot_ns(), deadline = now + 60 * 1000000000ll;
    int64_t shown = reason == DLOCK_EFAILOVER ? now : deadline;
    struct wire_buf b = {0};
    shm_slot_write(f->slot, DLOCK_STATE_JEOPARDY, 1, 7, shown);
    cr_assert_eq(wire_put_event(&b, 0,
                                &(struct wire_event){.lease_id = 1,
                                                     .state = DLOCK_STATE_JEOPARDY,
                                                     .reason = reason,
                                                     .deadline_ns = (uint64_t)shown}),
                 0);
    shm_slot_write(f->slot, DLOCK_STATE_HELD, 1, 7, deadline);
    cr_assert_eq(wire_put_event(&b, 0,
                                &(struct wire_event){.lease_id = 1,
                                                     .state = DLOCK_STATE_HELD,
                                                     .deadline_ns = (uint64_t)deadline}),
                 0);
    cr_assert_eq(h_raw_send_buf(f->fd, &b), 0);
}

/* Bytes sent on fd that its peer has not read yet. */
static int unread_by_peer(int fd)
{
    int n = -1;
    cr_assert_eq(ioctl(fd, SIOCOUTQ, &n), 0);
    return n;
}

/* `dlockctl run` through the stand-in agent, with a CMD that says it
 * started, notes a SIGTERM, and exits 0 once DIR/go exists (or after 30 s). */
static pid_t run_through_fake(struct fake *f)
{
    const char *sock = h_path("fake.sock");
    fake_listen(f, sock);
    char script[1024];
    snprintf(script, sizeof script,
             "trap 'touch %s; exit 143' TERM; touch %s; "
             "i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
             h_path("terminated"), h_path("started"), h_path("go"));
    const char *args[] = {"-s", sock, "run", "job", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    fake_grant(f);
    H_WAIT_UNTIL(H_EVENT_MS, exists(h_path("started")));
    return pid;
}

/* A failover puts the lease in doubt: CMD is stopped and dlockctl exits 79,
 * also when the doubt is over (HELD again) before dlockctl looks. */
ITEST(dlockctl, a_failover_doubt_stops_the_command_even_when_it_clears_at_once)
{
    struct fake f;
    pid_t pid = run_through_fake(&f);
    fake_jeopardy_then_held(&f, DLOCK_EFAILOVER);
    int st = h_wait_child(pid, H_EVENT_MS);
    const char *out = h_read_file(h_path("ctl.out"));
    cr_assert_eq(st, 79, "dlockctl exited %d: %s", st, out ? out : "");
    cr_assert(exists(h_path("terminated")), "CMD got no SIGTERM");
    cr_assert(out && strstr(out, "dlockctl: lease on job lost: Redis failed over"), "%s",
              out ? out : "");
}

/* A JEOPARDY of another kind (a renewal late or failing) leaves the lease
 * valid up to its deadline: CMD runs on, and its exit status is passed on
 * after the release. */
ITEST(dlockctl, another_jeopardy_that_clears_leaves_the_command_running)
{
    struct fake f;
    pid_t pid = run_through_fake(&f);
    fake_jeopardy_then_held(&f, DLOCK_EUNAVAIL);
    /* dlockctl has read both events before CMD is let go. */
    H_WAIT_UNTIL(H_EVENT_MS, unread_by_peer(f.fd) == 0);
    FILE *go = fopen(h_path("go"), "w");
    cr_assert(go);
    fclose(go);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(f.fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_RELEASE);
    struct wire_buf b = {0};
    cr_assert_eq(wire_put_empty(&b, h.id, WIRE_T_OK), 0);
    cr_assert_eq(h_raw_send_buf(f.fd, &b), 0);
    int st = h_wait_child(pid, H_EVENT_MS);
    cr_assert_eq(st, 0, "dlockctl exited %d: %s", st, h_read_file(h_path("ctl.out")));
    cr_assert(!exists(h_path("terminated")), "CMD got a SIGTERM");
}

/* An agent older than labels (protocol version 2) finds the HELLO of
 * version 3 malformed: dlockctl connects again with version 2, without the
 * label, and runs CMD. */
ITEST(dlockctl, an_agent_without_labels_gets_a_hello_of_version_2)
{
    struct fake f = {0};
    const char *sock = h_path("fake.sock");
    fake_listen(&f, sock);
    const char *args[] = {"-s", sock, "run", "job", "--", "sh", "-c", "exit 3", NULL};
    pid_t pid = h_ctl_spawn(args);
    struct pollfd p = {.fd = f.lfd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, h_scaled_ms(H_EVENT_MS)), 1, "dlockctl did not connect");
    int fd = accept4(f.lfd, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(fd, 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_HELLO);
    struct wire_hello hello;
    cr_assert_eq(wire_get_hello(body, h.len, &hello), 0);
    cr_assert_eq(hello.version, 3);
    cr_assert_eq(hello.label_len, strlen("sh -c exit 3"));
    cr_assert_arr_eq(hello.label, "sh -c exit 3", hello.label_len);
    /* What an agent of version 2 answers: its decoder wants 8 bytes. */
    struct wire_buf b = {0};
    struct wire_error e = {.code = DLOCK_EPROTO, .msg = "malformed hello", .msg_len = 15};
    cr_assert_eq(wire_put_error(&b, h.id, &e), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    close(fd);

    fake_grant(&f);
    cr_assert_eq(f.version, 2);
    cr_assert_str_empty(f.label);
    cr_assert_eq(h_raw_read_frame(f.fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_RELEASE);
    struct wire_buf ok = {0};
    cr_assert_eq(wire_put_empty(&ok, h.id, WIRE_T_OK), 0);
    cr_assert_eq(h_raw_send_buf(f.fd, &ok), 0);
    int st = h_wait_child(pid, H_EVENT_MS);
    cr_assert_eq(st, 3, "dlockctl exited %d: %s", st, h_read_file(h_path("ctl.out")));
}

/* dlockctl reload: found beside the client socket like the queries, 0 with
 * the changes printed, 78 with the reason for a refused file (the agent
 * keeps its settings), 69 without an agent. */
ITEST(dlockctl, reload_prints_the_outcome_and_exits_by_it)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    /* The harness's status socket is not beside the client socket. */
    const char *status = h_keep(h_path("status0.sock"));
    cr_assert_eq(CTL("-S", status, "reload"), 0, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "no setting changed"), "%s", ctl_out());
    h_agent_config(0, "cohort_ms = 25", "password = not-shown");
    cr_assert_eq(CTL("-S", status, "reload"), 0, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "reloaded: [agent] cohort_ms 20 -> 25\n"), "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "reloaded: [redis] password (changed)\n"), "%s", ctl_out());
    cr_assert_null(strstr(ctl_out(), "not-shown"), "%s", ctl_out());
    h_agent_config(0, "cohort_ms = 0", NULL);
    cr_assert_eq(CTL("-S", status, "reload"), 78, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "dlockctl: error: configuration not reloaded: ") &&
                  strstr(ctl_out(), "[agent] cohort_ms = 0: must be between 1 and 60000"),
              "%s", ctl_out());
    cr_assert_eq(CTL("-s", sock, "reload"), 69, "%s", ctl_out());
    SAYS("no status socket beside the client socket", "status.sock", "No such file or directory");
    cr_assert_eq(CTL("-S", h_path("none.sock"), "reload"), 69, "%s", ctl_out());
}
