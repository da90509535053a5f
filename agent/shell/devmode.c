/* SPDX-License-Identifier: BSD-3-Clause */
/* devmode.c -- `dlockd --dev`: runs a private redis-server on a unix socket
 * in a fresh temporary directory and removes it all on exit. */
#include "devmode.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "redisproc.h"
#include "wire.h"

#define START_MS 5000 /* redis-server must answer PING by then */
#define STOP_MS  3000 /* and exit after SIGTERM, or it is killed */

static char dir[256];
static struct redisproc redis;
static ev_child child_watcher;
static struct ev_loop *watch_loop;

static void on_redis_exit(struct ev_loop *loop, ev_child *w, int revents)
{
    redisproc_reaped(&redis, w->rstatus);
    log_error("dev mode: redis-server exited (status %d); stopping", redis.status);
    ev_child_stop(loop, w);
    watch_loop = NULL;
    kill(getpid(), SIGTERM);
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
    char logfile[300];
    snprintf(logfile, sizeof logfile, "%s/redis.log", dir);
    struct redisproc_opts o = {.unix_socket = sock, .dir = dir, .log = logfile};
    if (redisproc_start(&redis, &o, START_MS) != 0) {
        log_error("dev mode: redis-server did not start: %s", redis.err);
        return -1;
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
    config_state_dir_follow(cfg);
    /* Unless configured, the status socket goes beside the client socket,
     * as without --dev: DIR/status.sock beside DIR/dlock.sock. */
    if (!cfg->status_socket_set &&
        wire_status_sibling(cfg->socket, cfg->status_socket, sizeof cfg->status_socket) != 0)
        log_warn("dev mode: no status socket: the path beside %s is too long", cfg->socket);
    ev_child_init(&child_watcher, on_redis_exit, redis.pid, 0);
    ev_child_start(loop, &child_watcher);
    watch_loop = loop;
    log_info("dev mode: private redis-server pid %d in %s", (int)redis.pid, dir);
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
    if (watch_loop) {
        /* Its exit is ours to see now, not the loop's. */
        ev_child_stop(watch_loop, &child_watcher);
        watch_loop = NULL;
    }
    redisproc_stop(&redis, STOP_MS);
    if (dir[0]) {
        static const char *const files[] = {"redis.sock", "dlock.sock", "redis.log", "dump.rdb"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            remove_in_dir(files[i]);
        if (rmdir(dir) != 0)
            log_warn("dev mode: could not remove %s: %s", dir, strerror(errno));
        dir[0] = '\0';
    }
}
