/* test_dlockctl.c -- `dlockctl run`: the lock is held while CMD runs, CMD's
 * exit status is passed on, a taken lock gives 75 (or -E), a lease lost while
 * CMD runs sends CMD SIGTERM and gives 79 (at once, also when the agent is
 * stopped), and the usage and agent errors give 64 and 69. */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

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

    int64_t t0 = h_now_ms();
    st = h_ctl(5000, "-s", sock, "run", "-w", "300", "taken", "--", "sh", "-c", marker, NULL);
    int64_t el = h_now_ms() - t0;
    cr_assert_eq(st, 75, "-w 300 on a taken lock: exit %d", st);
    cr_assert_geq(el, 250, "gave up after %lld ms of a 300 ms wait", (long long)el);
    cr_assert(!exists(h_path("ran")), "CMD ran without the lock");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(dlockctl, waits_for_the_lock_by_default)
{
    h_start("retry_fallback_ms = 10000");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "queue", 30000);
    char script[300];
    snprintf(script, sizeof script, "echo ran > %s", h_path("ran"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "queue", "--", "sh", "-c", script, NULL};
    pid_t pid = h_ctl_spawn(args);
    cr_assert_eq(h_wait_child(pid, 400), -1, "dlockctl did not wait for the lock");
    cr_assert(!exists(h_path("ran")));
    cr_assert_eq(dlock_lease_release(l), 0);
    int st = h_wait_child(pid, 1500);
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
    const char *args[] = {"-s", H.agent[0].sock, "run", "-t", "600", "fragile", "--", "sh",
                          "-c", script,          NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(3000, exists(h_path("started")));
    cr_assert_eq(h_redis_exists(h_key("fragile")), 1);

    h_redis_del(h_key("fragile"));
    int st = h_wait_child(pid, 3000);
    cr_assert_neq(st, -1, "dlockctl still running 3 s after its lease was lost");
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

ITEST(dlockctl, agent_crash_while_command_runs_exits_79)
{
    h_start(NULL);
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
    const char *args[] = {"-s", sock, "run", "-t", "300", "wedged", "--", "sh", "-c", script, NULL};
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
