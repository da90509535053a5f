/* SPDX-License-Identifier: BSD-3-Clause */
/* unixsock.c -- listening unix sockets (made here or passed by the service
 * manager), a peer's groups and command name. */
#include "unixsock.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* Why dir, or one of the directories above it, could let another user
 * replace a socket made in it (and so stand in for the agent, or turn the
 * agent's changes of the file onto another one): a directory owned by
 * another user than root and us, or that its group or everyone may write
 * without the sticky bit. NULL when none can. As OpenSSH's StrictModes,
 * from the canonical path up to the root. why holds the message. */
static const char *unsafe_dir(const char *dir, char *why, size_t cap)
{
    char real[PATH_MAX];
    if (!realpath(dir, real)) {
        snprintf(why, cap, "socket directory %s: %s", dir, strerror(errno));
        return why;
    }
    uid_t me = geteuid();
    for (;;) {
        struct stat st;
        if (stat(real, &st) != 0) {
            snprintf(why, cap, "socket directory %s: %s", real, strerror(errno));
            return why;
        }
        if (st.st_uid != 0 && st.st_uid != me) {
            snprintf(why, cap,
                     "%s belongs to uid %u, neither root nor the agent's user (uid %u), who "
                     "could replace the socket in it",
                     real, (unsigned)st.st_uid, (unsigned)me);
            return why;
        }
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
            snprintf(why, cap,
                     "%s is writable by %s (mode %04o) and not sticky: another user could "
                     "replace the socket in it",
                     real, st.st_mode & S_IWOTH ? "everyone" : "its group",
                     (unsigned)(st.st_mode & 07777));
            return why;
        }
        char *slash = strrchr(real, '/');
        if (!slash || slash == real) {
            if (real[1] == '\0')
                return NULL;
            real[1] = '\0'; /* the root comes last */
        } else {
            *slash = '\0';
        }
    }
}

/* The directory of the socket at path must be safe (unsafe_dir()). */
static int check_socket_dir(const char *path)
{
    char dir[PATH_MAX], why[PATH_MAX + 200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir] = '\0';
    if (!unsafe_dir(dir, why, sizeof why))
        return 0;
    log_error("not listening on %s: %s; use a directory that only root and the agent's user "
              "may write (as /run/dlock), or a sticky one (as /tmp)",
              path, why);
    return -1;
}

/* Is something already serving on path? A stale file refuses connections. */
static int socket_in_use(const struct sockaddr_un *sa)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int live = connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0;
    close(fd);
    return live;
}

static int prepare_path(const struct sockaddr_un *sa)
{
    struct stat st;
    if (lstat(sa->sun_path, &st) != 0)
        return 0;
    if (!S_ISSOCK(st.st_mode)) {
        log_error("%s exists and is not a socket; not touching it", sa->sun_path);
        return -1;
    }
    if (socket_in_use(sa) == 1) {
        log_error("%s is in use by a running agent", sa->sun_path);
        return -1;
    }
    log_info("removing stale socket %s", sa->sun_path);
    return unlink(sa->sun_path);
}

/* The passed sockets taken for a configured path, by fd - SD_LISTEN_FDS_START. */
#define PASSED_MAX 64
static bool adopted[PASSED_MAX];

/* The listening socket for path that the service manager passed (socket
 * activation: LISTEN_FDS), or -1. */
static int inherited_socket(const char *path)
{
    int n = sd_listen_fds(0);
    for (int i = 0; i < n && i < PASSED_MAX; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        if (sd_is_socket_unix(fd, SOCK_STREAM, 1, path, 0) > 0) {
            adopted[i] = true;
            return fd;
        }
    }
    return -1;
}

void unix_listen_close_unused(void)
{
    int n = sd_listen_fds(0);
    for (int i = 0; i < n; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        if (i < PASSED_MAX && adopted[i])
            continue;
        struct sockaddr_un sa = {0};
        socklen_t len = sizeof sa;
        if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0 || sa.sun_family != AF_UNIX)
            snprintf(sa.sun_path, sizeof sa.sun_path, "(fd %d)", fd);
        /* Left open, its clients would wait for an answer that never comes. */
        log_warn("%.*s, passed by the service manager, is no socket of the configuration "
                 "(socket, status_socket); closing it",
                 (int)sizeof sa.sun_path, sa.sun_path);
        close(fd);
    }
}

int unix_listen_pass_on(void)
{
    int n = sd_listen_fds(0);
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        if (i >= PASSED_MAX || !adopted[i])
            return -1;
    for (int i = 0; i < n; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        int fl = fcntl(fd, F_GETFD);
        if (fl < 0 || fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) != 0)
            return -1;
    }
    return n;
}

/* A group by name or number. 0, or -1 when there is no such group. */
static int group_id(const char *group, gid_t *out)
{
    char *end;
    errno = 0;
    unsigned long id = strtoul(group, &end, 10);
    if (group[0] >= '0' && group[0] <= '9' && *end == '\0' && errno == 0 && id < UINT32_MAX) {
        *out = (gid_t)id;
        return 0;
    }
    const struct group *g = getgrnam(group);
    if (!g)
        return -1;
    *out = g->gr_gid;
    return 0;
}

/* Gives the socket file at path to group: an error that says why when it
 * cannot (a wrong group is no success). Never through a symbolic link. 0 or
 * -1. */
static int give_to_group(const char *path, const char *group)
{
    gid_t gid;
    if (group_id(group, &gid) != 0) {
        log_error("cannot give %s to group %s: no such group", path, group);
        return -1;
    }
    if (fchownat(AT_FDCWD, path, (uid_t)-1, gid, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    int e = errno;
    log_error("cannot give %s to group %s: %s%s", path, group, strerror(e),
              e == EPERM ? " (the agent must run as root or as a member of that group; under "
                           "systemd, add it with SupplementaryGroups=)"
                         : "");
    return -1;
}

/* The socket the service manager passed: its group is the .socket unit's
 * SocketGroup=, which should be the configured one. */
static int adopt_socket(int fd, const char *path, const char *group)
{
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        log_error("%s: passed socket: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    gid_t gid;
    if (group[0] && group_id(group, &gid) == 0 && stat(path, &st) == 0 && st.st_gid != gid)
        log_warn("%s, passed by the service manager, belongs to group %u, not %s: set "
                 "SocketGroup=%s in its .socket unit",
                 path, (unsigned)st.st_gid, group, group);
    log_info("using the socket passed for %s", path);
    return fd;
}

/* Binds fd to sa's path, the file made with the given mode from the start:
 * Linux gives it the socket's mode (0777) less the umask, which is set for
 * the call (the agent sets up its sockets before it starts a thread). Then
 * the file is checked, never followed: a socket of ours, with that mode
 * (a default ACL of the directory may have overridden the umask; the
 * directory is safe, so the name is still ours to chmod). 0, or -1 with
 * errno set. */
static int bind_with_mode(int fd, const struct sockaddr_un *sa, unsigned mode)
{
    mode_t old = umask(~mode & 0777);
    int rc = bind(fd, (const struct sockaddr *)sa, sizeof *sa);
    umask(old);
    if (rc != 0)
        return -1;
    struct stat st;
    if (lstat(sa->sun_path, &st) != 0)
        return -1;
    if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
        errno = EEXIST; /* replaced under our feet */
        return -1;
    }
    return (st.st_mode & 07777) == mode ? 0 : chmod(sa->sun_path, mode);
}

int unix_listen(const char *path, unsigned mode, const char *group, bool *inherited)
{
    int fd = inherited_socket(path);
    *inherited = fd >= 0;
    if (fd >= 0)
        return adopt_socket(fd, path, group);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        log_error("socket path too long: %s", path);
        return -1;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (check_socket_dir(path) != 0 || prepare_path(&sa) != 0)
        return -1;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind_with_mode(fd, &sa, mode) != 0) {
        log_error("cannot listen on %s: %s", sa.sun_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    /* The group, then the backlog: nobody may connect before. */
    int rc = group[0] ? give_to_group(path, group) : 0; /* logs why */
    if (rc == 0 && listen(fd, 128) != 0) {
        log_error("cannot listen on %s: %s", sa.sun_path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        close(fd);
        unlink(path); /* ours: bound just now */
        return -1;
    }
    return fd;
}

size_t peer_groups(int fd, uint32_t primary, uint32_t *out, size_t max)
{
    gid_t groups[PEER_GROUPS_MAX];
    socklen_t len = sizeof groups;
    size_t n = 0;
    if (max)
        out[n++] = primary;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
        return n; /* too many, or unknown: the primary gid alone */
    for (size_t i = 0; i < len / sizeof groups[0] && n < max; i++)
        if (groups[i] != primary)
            out[n++] = (uint32_t)groups[i];
    return n;
}

/* The command name of pid, from /proc ("?" when gone or unreadable). */
void proc_comm(int pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(out, (int)cap, f))
        snprintf(out, cap, "?");
    if (f)
        fclose(f);
    out[strcspn(out, "\n")] = '\0';
    one_word(out); /* a process names itself */
}

uint64_t proc_start_time(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: count the
     * fields from the last ')'. Field 3 follows it; 22 is 19 further on. */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return 0;
    return strtoull(p + 1, NULL, 10);
}
