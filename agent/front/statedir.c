/* SPDX-License-Identifier: BSD-3-Clause */
/* statedir.c -- the agent's state directory: made private, locked for one
 * agent, handed to a successor, removed at a stop. */
#include "statedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define LOCK_NAME    "lock"
#define WAIT_STEP_MS 10

/* The pid the lock file names, 0 if none. */
static pid_t holder_pid(int lockfd)
{
    char buf[24] = "";
    ssize_t n = pread(lockfd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    long pid = strtol(buf, NULL, 10);
    return pid > 0 && pid < (1L << 22) ? (pid_t)pid : 0;
}

/* The directory, made if need be, this user's and private. -1 with err. */
static int open_private(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make the state directory %s: %s", path, strerror(errno));
        return -1;
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open the state directory %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen,
                 "the state directory %s belongs to uid %u, not to this agent's uid %u: it keeps "
                 "the leases of another agent, or was made by hand",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        close(fd);
        return -1;
    }
    /* Ours, but open to others: nobody else may read its secrets. */
    if ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0) {
        snprintf(err, errlen, "cannot make the state directory %s private: %s", path,
                 strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int statedir_open(struct statedir *d, const char *path, bool successor, uint32_t wait_ms, char *err,
                  size_t errlen)
{
    d->dirfd = d->lockfd = -1;
    snprintf(d->path, sizeof d->path, "%s", path);
    int dirfd = open_private(path, err, errlen);
    if (dirfd < 0)
        return -1;
    int lockfd = openat(dirfd, LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lockfd < 0) {
        snprintf(err, errlen, "cannot open %s/" LOCK_NAME ": %s", path, strerror(errno));
        close(dirfd);
        return -1;
    }
    bool signalled = false, marked = false;
    uint64_t until = now_ns() + (uint64_t)wait_ms * NS_PER_MS;
    while (flock(lockfd, LOCK_EX | LOCK_NB) != 0) {
        pid_t pid = holder_pid(lockfd);
        if (errno != EWOULDBLOCK) {
            snprintf(err, errlen, "cannot lock %s/" LOCK_NAME ": %s", path, strerror(errno));
        } else if (!successor) {
            snprintf(err, errlen,
                     "the state directory %s is in use by another dlockd (pid %d): stop it "
                     "first, or start this one with --successor to take its leases over",
                     path, (int)pid);
        } else if (!signalled) {
            /* The mark first: the agent reads it when the signal comes. */
            int m = openat(dirfd, STATEDIR_SUCCESSOR, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (m >= 0)
                close(m);
            marked = m >= 0;
            if (m < 0 || pid <= 0 || kill(pid, SIGTERM) != 0)
                snprintf(err, errlen, "cannot ask the dlockd (pid %d) of %s to leave: %s", (int)pid,
                         path, m < 0 ? strerror(errno) : "no such process");
            else {
                signalled = true;
                continue;
            }
        } else if (now_ns() < until) {
            struct timespec ts = {0, WAIT_STEP_MS * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        } else {
            snprintf(err, errlen, "the dlockd (pid %d) of %s did not leave within %u ms", (int)pid,
                     path, wait_ms);
        }
        if (marked) /* else the next SIGTERM of that agent would not be a stop */
            unlinkat(dirfd, STATEDIR_SUCCESSOR, 0);
        close(lockfd);
        close(dirfd);
        return -1;
    }
    /* The predecessor may have stopped meanwhile, removing the directory:
     * the lock then holds a file nobody else finds. Start again there. */
    struct stat st;
    if (fstat(lockfd, &st) == 0 && st.st_nlink == 0) {
        close(lockfd);
        close(dirfd);
        return statedir_open(d, path, false, wait_ms, err, errlen);
    }
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
    if (ftruncate(lockfd, 0) != 0 || pwrite(lockfd, buf, (size_t)n, 0) != n) {
        /* The pid is for messages only: go on without it. */
    }
    d->dirfd = dirfd;
    d->lockfd = lockfd;
    return 0;
}

bool statedir_marked(const struct statedir *d, const char *mark)
{
    return d->dirfd >= 0 && faccessat(d->dirfd, mark, F_OK, 0) == 0;
}

int statedir_mark(const struct statedir *d, const char *mark)
{
    int fd = d->dirfd >= 0 ? openat(d->dirfd, mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

void statedir_unmark(const struct statedir *d, const char *mark)
{
    if (d->dirfd >= 0)
        unlinkat(d->dirfd, mark, 0);
}

void statedir_each(const struct statedir *d, void (*fn)(void *arg, const char *name), void *arg)
{
    /* A descriptor of its own: a dup() would share (and move) the offset. */
    int fd = d->dirfd >= 0 ? openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            fn(arg, e->d_name);
    closedir(dir);
}

static void remove_one(void *arg, const char *name)
{
    const struct statedir *d = arg;
    if (strcmp(name, LOCK_NAME) != 0)
        unlinkat(d->dirfd, name, 0);
}

void statedir_remove(struct statedir *d)
{
    if (d->dirfd < 0)
        return;
    statedir_each(d, remove_one, d);
    /* The lock file last, while it is still held: a successor that opened
     * it meanwhile locks a file nobody else will find, and makes its own. */
    unlinkat(d->dirfd, LOCK_NAME, 0);
    rmdir(d->path);
    statedir_close(d);
}

void statedir_close(struct statedir *d)
{
    if (d->lockfd >= 0)
        close(d->lockfd);
    if (d->dirfd >= 0)
        close(d->dirfd);
    d->dirfd = d->lockfd = -1;
}
