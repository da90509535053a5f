/* SPDX-License-Identifier: BSD-3-Clause */
/* test_ctl_lock.c -- `dlockctl lock` and `dlockctl unlock`, a lock held across
 * shell commands: lock returns once the lease is held and prints the holder,
 * the fencing token (the lease's) and the name for eval; the lease is listed
 * and keeps other clients out until unlock, which gives it back; the owner's
 * death gives it back too (a forked owner, and the shell of the eval idiom);
 * a lease lost meanwhile makes unlock exit 79; unlock of a name not held
 * exits 1; a taken lock exits 75 (or -E) and leaves no holder behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

/* Runs dlockctl with a fresh DIR/ctl.out; its exit status, the output in
 * ctl_out(). */
#define CTL(...) (unlink(h_path("ctl.out")), h_ctl(20000, __VA_ARGS__, NULL))

static const char *ctl_out(void)
{
    const char *out = h_read_file(h_path("ctl.out"));
    return out ? out : "";
}

/* The holders' state files go to the test's directory. */
static void private_runtime_dir(void)
{
    const char *dir = h_keep(h_path("xdg"));
    cr_assert(mkdir(dir, 0700) == 0 || errno == EEXIST);
    cr_assert_eq(setenv("XDG_RUNTIME_DIR", dir, 1), 0);
}

/* The value of VAR=value in lock's output; 0 when missing. */
static unsigned long long printed(const char *out, const char *var)
{
    char key[64];
    snprintf(key, sizeof key, "%s=", var);
    const char *p = strstr(out, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* The leases-json line of name, or NULL when the agent lists none. */
static const char *listed(const char *name)
{
    char req[128];
    snprintf(req, sizeof req, "leases-json %s\n", name);
    const char *ans = h_status_ask(0, req);
    return ans && strstr(ans, "\"name\"") ? ans : NULL;
}

ITEST(ctl_lock, lock_holds_until_unlock_and_prints_the_fence)
{
    h_start(NULL);
    private_runtime_dir();
    const char *sock = H.agent[0].sock;
    int st = CTL("-s", sock, "lock", "held");
    cr_assert_eq(st, 0, "lock: exit %d: %s", st, ctl_out());
    char out[512];
    snprintf(out, sizeof out, "%s", ctl_out());
    pid_t holder = (pid_t)printed(out, "DLOCK_HOLDER");
    unsigned long long fence = printed(out, "DLOCK_FENCE");
    cr_assert(holder > 0 && fence > 0, "%s", out);
    cr_assert(strstr(out, "DLOCK_NAME='held'\n"), "%s", out);

    /* Held when lock returns: listed, with the holder's pid and the fence
     * printed, and in Redis; others are kept out. */
    const char *ls = listed("held");
    cr_assert_not_null(ls, "the lease is not listed");
    char want[96];
    snprintf(want, sizeof want, "\"fence\":%llu,", fence);
    cr_assert(strstr(ls, want), "no %s in %s", want, ls);
    snprintf(want, sizeof want, "\"pid\":%d,", (int)holder);
    cr_assert(strstr(ls, want), "no %s in %s", want, ls);
    cr_assert(strstr(ls, "\"state\":\"held\""), "%s", ls);
    cr_assert(h_redis_exists(h_key("held")));
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "held", 5000, 0, &l), DLOCK_EBUSY);
    /* holder: held (0). */
    cr_assert_eq(CTL("-S", h_path("status0.sock"), "holder", "held"), 0, "%s", ctl_out());
    /* The same owner cannot take it twice (it would wait for itself). */
    cr_assert_eq(CTL("-s", sock, "lock", "-n", "held"), 64, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "holds held already"), "%s", ctl_out());

    st = CTL("-s", sock, "unlock", "held");
    cr_assert_eq(st, 0, "unlock: exit %d: %s", st, ctl_out());
    H_KEY_GONE(h_key("held"));
    cr_assert_null(listed("held"));
    l = h_must_acquire(a, "held", 5000);
    cr_assert_eq(dlock_lease_release(l), 0);

    /* Nothing to give back now: 1, with a message. */
    cr_assert_eq(CTL("-s", sock, "unlock", "held"), 1);
    cr_assert(strstr(ctl_out(), "held is not held by dlockctl lock"), "%s", ctl_out());
    cr_assert_eq(CTL("-s", sock, "unlock", "--holder", "2147483647"), 1);
    cr_assert(strstr(ctl_out(), "no holder 2147483647"), "%s", ctl_out());
    cr_assert_eq(CTL("-s", sock, "lock"), 64);
    cr_assert_eq(CTL("-s", sock, "unlock"), 64);
    cr_assert_eq(CTL("-s", sock, "unlock", "-n", "held"), 64);
}

/* unlock --holder PID, as lock printed it, and a lock whose owner is given
 * with --pid: unlock finds it by its name alone. */
ITEST(ctl_lock, unlock_by_holder_pid_and_by_name_for_another_owner)
{
    h_start(NULL);
    private_runtime_dir();
    const char *sock = H.agent[0].sock;
    pid_t owner = h_fork();
    if (owner == 0) {
        for (;;)
            pause();
    }
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)owner);
    cr_assert_eq(CTL("-s", sock, "lock", "--pid", pid, "-t", "20", "one"), 0, "%s", ctl_out());
    cr_assert_eq(CTL("-s", sock, "lock", "--pid", pid, "-S", "two"), 0, "%s", ctl_out());
    char holder[16];
    snprintf(holder, sizeof holder, "%llu", printed(ctl_out(), "DLOCK_HOLDER"));
    cr_assert(strstr(listed("one"), "\"ttl_ms\":20000"), "%s", listed("one"));
    cr_assert(strstr(listed("two"), "\"kind\":\"shared\""), "%s", listed("two"));
    cr_assert_eq(CTL("-s", sock, "unlock", "--holder", holder), 0, "%s", ctl_out());
    H_KEY_GONE(h_key("two"));
    cr_assert_eq(CTL("-s", sock, "unlock", "one"), 0, "%s", ctl_out());
    H_KEY_GONE(h_key("one"));
}

/* The owner's death gives the lease back, at once: no unlock needed. */
ITEST(ctl_lock, owner_death_releases_the_lease)
{
    h_start(NULL);
    private_runtime_dir();
    pid_t owner = h_fork();
    if (owner == 0) {
        for (;;)
            pause();
    }
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)owner);
    cr_assert_eq(CTL("-s", H.agent[0].sock, "lock", "--pid", pid, "orphan"), 0, "%s", ctl_out());
    cr_assert(printed(ctl_out(), "DLOCK_HOLDER") > 0, "%s", ctl_out());
    cr_assert(h_redis_exists(h_key("orphan")));
    kill(owner, SIGKILL);
    cr_assert_eq(h_wait_child(owner, 5000), 128 + SIGKILL);
    H_KEY_GONE(h_key("orphan"));
    H_WAIT_UNTIL(H_EVENT_MS, !listed("orphan"));
    /* Nothing left to unlock: its state went with it. */
    cr_assert_eq(CTL("-s", H.agent[0].sock, "unlock", "--pid", pid, "orphan"), 1, "%s", ctl_out());
    /* A process that does not exist owns nothing. */
    cr_assert_eq(CTL("-s", H.agent[0].sock, "lock", "--pid", pid, "orphan"), 64, "%s", ctl_out());
}

/* The idiom of dlockctl(1): eval in a shell, commands, unlock; and the shell
 * as the owner: its exit gives the lease back. */
ITEST(ctl_lock, eval_idiom_in_a_shell)
{
    h_start(NULL);
    private_runtime_dir();
    const char *script = h_keepf(
        "eval \"$(%s -s %s lock idiom)\" || exit 9; echo \"$DLOCK_FENCE $DLOCK_NAME\" > %s; "
        "%s -S %s holder idiom >/dev/null || exit 8; %s -s %s unlock idiom || exit 7; "
        "%s -S %s holder idiom >/dev/null; [ $? -eq 1 ] || exit 6; "
        "eval \"$(%s -s %s lock kept)\" || exit 5; echo $DLOCK_HOLDER > %s",
        DLOCKCTL_PATH, H.agent[0].sock, h_path("fence"), DLOCKCTL_PATH, h_path("status0.sock"),
        DLOCKCTL_PATH, H.agent[0].sock, DLOCKCTL_PATH, h_path("status0.sock"), DLOCKCTL_PATH,
        H.agent[0].sock, h_path("kept"));
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    pid_t pid = h_spawn(argv, h_path("sh.out"));
    int st = h_wait_child(pid, 20000);
    cr_assert_eq(st, 0, "the script exited %d: %s", st, h_read_file(h_path("sh.out")));
    const char *f = h_read_file(h_path("fence"));
    cr_assert(f && strtoull(f, NULL, 10) > 0 && strstr(f, " idiom\n"), "%s", f ? f : "");
    H_KEY_GONE(h_key("idiom"));
    /* The shell has exited: "kept" goes back without an unlock. */
    H_KEY_GONE(h_key("kept"));
    H_WAIT_UNTIL(H_EVENT_MS, !listed("kept"));
}

/* A lease lost while held: the holder ends, and unlock says so with 79. */
ITEST(ctl_lock, lost_lease_is_reported_by_unlock)
{
    h_start(NULL);
    private_runtime_dir();
    cr_assert_eq(CTL("-s", H.agent[0].sock, "lock", "-t", "0.6", "fragile"), 0, "%s", ctl_out());
    h_redis_del(h_key("fragile"));
    H_WAIT_UNTIL(H_EVENT_MS, !listed("fragile"));
    int st = CTL("-s", H.agent[0].sock, "unlock", "fragile");
    cr_assert_eq(st, 79, "unlock after the loss: exit %d: %s", st, ctl_out());
    cr_assert(strstr(ctl_out(), "lease on fragile lost"), "%s", ctl_out());
    /* Told once: the state is gone. */
    cr_assert_eq(CTL("-s", H.agent[0].sock, "unlock", "fragile"), 1, "%s", ctl_out());
}

/* A taken lock: 75, or the -E code, as for run; no holder stays behind. */
ITEST(ctl_lock, taken_lock_exits_75_or_the_E_code)
{
    h_start(NULL);
    private_runtime_dir();
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "taken", 30000);
    cr_assert_eq(CTL("-s", H.agent[0].sock, "lock", "-n", "taken"), 75, "%s", ctl_out());
    cr_assert_str_empty(ctl_out());
    cr_assert_eq(CTL("-s", H.agent[0].sock, "lock", "-w", "0.2", "-E", "3", "taken"), 3, "%s",
                 ctl_out());
    cr_assert_eq(CTL("-s", H.agent[0].sock, "unlock", "taken"), 1, "%s", ctl_out());
    cr_assert_eq(dlock_lease_release(l), 0);
    /* No agent: 69, as for run. */
    cr_assert_eq(CTL("-s", h_path("none.sock"), "lock", "x"), 69, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "cannot connect to the dlock agent at ") &&
                  strstr(ctl_out(), "none.sock"),
              "%s", ctl_out());
}

/* lock --help and unlock --help: the idiom, every option, the exit codes. */
ITEST(ctl_lock, help_lists_the_options_and_the_idiom)
{
    static const char *const want[] = {"usage: dlockctl lock [OPTIONS] NAME",
                                       "dlockctl unlock [--pid PID] NAME | --holder PID",
                                       "eval \"$(dlockctl lock",
                                       "DLOCK_HOLDER=PID",
                                       "DLOCK_FENCE=TOKEN",
                                       "-x, --exclusive",
                                       "-S, --shared",
                                       "-p, --permits N",
                                       "-w, --wait, --timeout DURATION",
                                       "-n, --nonblock",
                                       "-t, --ttl DURATION",
                                       "-E, --conflict-exit-code CODE",
                                       "--pid PID",
                                       "--holder PID",
                                       "unlock: no such holder",
                                       "unlock: the lease had been lost",
                                       "Exit status"};
    for (int u = 0; u < 2; u++) {
        const char *cmd = u ? "unlock" : "lock";
        cr_assert_eq(CTL(cmd, "--help"), 0);
        char out[16384];
        snprintf(out, sizeof out, "%s", ctl_out());
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            cr_assert(strstr(out, want[i]), "%s --help lacks '%s':\n%s", cmd, want[i], out);
    }
    cr_assert_eq(CTL("--help"), 0);
    cr_assert(strstr(ctl_out(), "lock NAME") && strstr(ctl_out(), "unlock NAME"), "%s", ctl_out());
}

/* The holder keeps none of the descriptors it was started with but its own:
 * a pipe given to `lock` as fd 9 reads EOF once lock has returned, while the
 * holder still holds the lease. Nor the signals ignored: started with
 * SIGTERM ignored (as by nohup or trap), it still obeys unlock. */
ITEST(ctl_lock, holder_keeps_no_inherited_descriptor)
{
    h_start(NULL);
    private_runtime_dir();
    const char *fifo = h_keep(h_path("fifo"));
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(rfd, 0);
    const char *script = h_keepf("trap '' TERM INT HUP; exec %s -s %s lock --pid %d fds 9>%s",
                                 DLOCKCTL_PATH, H.agent[0].sock, (int)getpid(), fifo);
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    int st = h_wait_child(h_spawn(argv, h_path("sh.out")), 20000);
    cr_assert_eq(st, 0, "lock: exit %d: %s", st, h_read_file(h_path("sh.out")));
    cr_assert_not_null(listed("fds"), "the holder does not hold the lease");
    char c;
    cr_assert_eq(read(rfd, &c, 1), 0, "fd 9 is still open for writing (%s)",
                 errno == EAGAIN ? "a holder keeps it" : strerror(errno));
    close(rfd);
    cr_assert_eq(CTL("-s", H.agent[0].sock, "unlock", "fds"), 0, "%s", ctl_out());
}

/* The number of holders' state files. */
static int state_files(void)
{
    DIR *d = opendir(h_path("xdg/dlockctl"));
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* lock ended while it waits (a terminal's ^C, a kill): its holder goes with
 * it, so no lease is taken that nobody knows of; the state file it leaves
 * goes at the next lock once its owner is gone. */
ITEST(ctl_lock, killing_lock_while_it_waits_leaves_no_holder)
{
    h_start(NULL);
    private_runtime_dir();
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "queue", 30000);
    pid_t owner = h_fork();
    if (owner == 0) {
        for (;;)
            pause();
    }
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)owner);
    const char *args[] = {"-s", H.agent[0].sock, "lock", "--pid", pid, "queue", NULL};
    pid_t ctl = h_ctl_spawn(args);
    const char *ls;
    H_WAIT_UNTIL(H_EVENT_MS, (ls = listed("queue")) && strstr(ls, "\"waiters\":1"));
    kill(ctl, SIGTERM);
    cr_assert_eq(h_wait_child(ctl, 5000), 128 + SIGTERM);
    H_WAIT_UNTIL(H_EVENT_MS, (ls = listed("queue")) && strstr(ls, "\"waiters\":0"));
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(state_files(), 1);
    kill(owner, SIGKILL);
    cr_assert_eq(h_wait_child(owner, 5000), 128 + SIGKILL);
    cr_assert_eq(CTL("-s", H.agent[0].sock, "lock", "other"), 0, "%s", ctl_out());
    cr_assert_eq(state_files(), 1, "the state file of the killed lock stays");
    cr_assert_eq(CTL("-s", H.agent[0].sock, "unlock", "other"), 0, "%s", ctl_out());
    cr_assert_eq(state_files(), 0);
}

/* The "comm" of name's lease in the agent's lease list, in a static buffer;
 * "" when not listed. */
static const char *listed_comm(const char *name)
{
    static char comm[256];
    const char *ls = listed(name), *p = ls ? strstr(ls, "\"comm\":\"") : NULL;
    comm[0] = '\0';
    if (p) {
        p += 8;
        size_t n = 0;
        while (p[n] && p[n] != '"' && n + 1 < sizeof comm) {
            if (p[n] == '\\' && p[n + 1]) /* keep escapes as they are */
                comm[n] = p[n], n++;
            comm[n] = p[n];
            n++;
        }
        comm[n] = '\0';
    }
    return comm;
}

/* The lease list shows what dlockctl does, not "dlockctl": run's CMD and its
 * arguments, lock's name and owner; printable, and cut to 64 bytes. */
ITEST(ctl_lock, the_lease_list_shows_the_command_not_dlockctl)
{
    h_start(NULL);
    private_runtime_dir();
    const char *sock = H.agent[0].sock;
    const char *args[] = {"-s", sock, "run", "job", "--", "sleep", "30", NULL};
    pid_t run = h_ctl_spawn(args);
    H_WAIT_UNTIL(H_EVENT_MS, listed("job"));
    cr_assert_str_eq(listed_comm("job"), "sleep 30", "%s", listed("job"));
    /* The text table too. */
    const char *table = h_status_ask(0, "leases job\n");
    cr_assert(table && strstr(table, " sleep 30 "), "%s", table ? table : "");
    kill(run, SIGTERM);
    cr_assert_eq(h_wait_child(run, 10000), 128 + SIGTERM);

    /* A terminal's escape in an argument shows as '?'; a long command is
     * cut, with "..." at the end. */
    char long_arg[100];
    memset(long_arg, 'a', sizeof long_arg - 1);
    long_arg[sizeof long_arg - 1] = '\0';
    const char *odd[] = {"-s", sock,       "run",          "odd",    "--", "/bin/sh",
                         "-c", "sleep 30", "\033]0;x\007", long_arg, NULL};
    run = h_ctl_spawn(odd);
    H_WAIT_UNTIL(H_EVENT_MS, listed("odd"));
    const char *comm = listed_comm("odd");
    cr_assert(strncmp(comm, "sh -c sleep 30 ?]0;x? aaaa", 26) == 0, "%s", comm);
    cr_assert_eq(strlen(comm), 64, "%s", comm);
    cr_assert_str_eq(comm + 61, "...");
    kill(run, SIGTERM);
    cr_assert_eq(h_wait_child(run, 10000), 128 + SIGTERM);

    cr_assert_eq(CTL("-s", sock, "lock", "held"), 0, "%s", ctl_out());
    char want[64];
    snprintf(want, sizeof want, "lock held for pid %d", (int)getpid());
    cr_assert_str_eq(listed_comm("held"), want, "%s", listed("held"));
    cr_assert_eq(CTL("-s", sock, "unlock", "held"), 0, "%s", ctl_out());
}
