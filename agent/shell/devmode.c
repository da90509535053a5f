/* SPDX-License-Identifier: BSD-3-Clause */
/* devmode.c -- `dlockd --dev`: runs a private redis-server on a unix socket
 * in a fresh temporary directory and removes it all on exit. */
#include "devmode.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"
#include "wire.h"

static char dir[256];
static pid_t redis_pid;
static ev_child child_watcher;

static void on_redis_exit(struct ev_loop *loop, ev_child *w, int revents)
{
    log_error("dev mode: redis-server exited (status %d); stopping", w->rstatus);
    redis_pid = 0;
    ev_child_stop(loop, w);
    kill(getpid(), SIGTERM);
}

/* Does the unix socket answer PING? */
static bool redis_answers(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    char buf[16] = "";
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
              write(fd, "PING\r\n", 6) == 6 && read(fd, buf, sizeof buf - 1) > 0 &&
              strncmp(buf, "+PONG", 5) == 0;
    close(fd);
    return ok;
}

static pid_t spawn_redis(const char *sock)
{
    char logfile[300];
    snprintf(logfile, sizeof logfile, "%s/redis.log", dir);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
    }
    execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm",
           "700", "--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
           "--logfile", logfile, (char *)NULL);
    fprintf(stderr, "dlockd: cannot run redis-server: %s\n", strerror(errno));
    _exit(127);
}

int devmode_start(struct ev_loop *loop, struct config *cfg, bool keep_socket)
{
    const char *tmp = getenv("TMPDIR");
    /* mkdtemp() replaces the six trailing 'X' of its template. */
    int stem = snprintf(dir, sizeof dir, "%s/dlock-dev.", tmp && *tmp ? tmp : "/tmp");
    if (stem < 0 || (size_t)stem + 7 > sizeof dir) {
        log_error("dev mode: TMPDIR too long");
        dir[0] = '\0';
        return -1;
    }
    memset(dir + stem, 'X', 6);
    dir[stem + 6] = '\0';
    if (!mkdtemp(dir)) {
        log_error("dev mode: mkdtemp: %s", strerror(errno));
        dir[0] = '\0';
        return -1;
    }
    char sock[300];
    snprintf(sock, sizeof sock, "%s/redis.sock", dir);
    if (strlen(sock) >= sizeof cfg->nodes[0].path) {
        log_error("dev mode: temp path too long: %s", sock);
        return -1;
    }
    redis_pid = spawn_redis(sock);
    if (redis_pid < 0) {
        log_error("dev mode: fork: %s", strerror(errno));
        redis_pid = 0;
        return -1;
    }
    uint64_t deadline = now_ns() + 5000000000ull;
    while (!redis_answers(sock)) {
        int status;
        if (waitpid(redis_pid, &status, WNOHANG) == redis_pid || now_ns() > deadline) {
            log_error("dev mode: redis-server did not start (see %s/redis.log)", dir);
            redis_pid = 0;
            return -1;
        }
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
    }
    memcpy(cfg->nodes[0].path, sock, strlen(sock) + 1);
    cfg->nodes[0].host[0] = '\0';
    cfg->nnodes = 1;
    cfg->mode = REDIS_MODE_SINGLE; /* whatever the file said */
    if (!keep_socket) {
        /* dlock.sock is no longer than redis.sock, checked above. */
        char path[300];
        int n = snprintf(path, sizeof path, "%s/dlock.sock", dir);
        memcpy(cfg->socket, path, (size_t)n + 1);
    }
    /* Unless configured, the status socket goes beside the client socket,
     * as without --dev: DIR/status.sock beside DIR/dlock.sock. */
    if (!cfg->status_socket_set &&
        wire_status_sibling(cfg->socket, cfg->status_socket, sizeof cfg->status_socket) != 0)
        log_warn("dev mode: no status socket: the path beside %s is too long", cfg->socket);
    ev_child_init(&child_watcher, on_redis_exit, redis_pid, 0);
    ev_child_start(loop, &child_watcher);
    log_info("dev mode: private redis-server pid %d in %s", (int)redis_pid, dir);
    return 0;
}

void devmode_banner(void *arg)
{
    const struct config *cfg = arg;
    printf("export DLOCK_SOCKET=%s\n", cfg->socket);
    if (cfg->status_socket[0])
        printf("export DLOCK_STATUS_SOCKET=%s\n", cfg->status_socket);
    printf("try: DLOCK_SOCKET=%s dlockctl run demo -- sh -c 'echo holding demo; sleep 1'\n",
           cfg->socket);
    fflush(stdout);
}

static void remove_in_dir(const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

void devmode_stop(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGTERM);
        uint64_t deadline = now_ns() + 3000000000ull;
        while (waitpid(redis_pid, NULL, WNOHANG) == 0) {
            if (now_ns() > deadline) {
                kill(redis_pid, SIGKILL);
                waitpid(redis_pid, NULL, 0);
                break;
            }
            nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
        }
        redis_pid = 0;
    }
    if (dir[0]) {
        static const char *const files[] = {"redis.sock", "dlock.sock", "redis.log", "dump.rdb"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            remove_in_dir(files[i]);
        if (rmdir(dir) != 0)
            log_warn("dev mode: could not remove %s: %s", dir, strerror(errno));
        dir[0] = '\0';
    }
}
