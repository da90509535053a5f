/* SPDX-License-Identifier: BSD-3-Clause */
/* listener.c -- the agent's accept loop: at most a batch of connections per
 * loop turn, and, when descriptors run out (EMFILE, ENFILE) or the kernel
 * lacks memory, a pause instead of a spin. A listener that cannot accept
 * stays readable: watched on, libev would call it again at once, forever. */
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

#define ACCEPT_BATCH 64  /* connections per loop turn, per listener */
#define PAUSE_S      0.1 /* how long accepting stops when descriptors run out */

/* One descriptor kept in reserve: when the table is full it is given up for
 * a moment to accept pending peers and close them, so that they learn at
 * once that they were refused instead of hanging in the backlog. */
static int reserve_fd = -1;

static void reserve_take(void)
{
    if (reserve_fd < 0)
        reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Accepts and closes up to ACCEPT_BATCH pending peers with the reserve
 * descriptor. The reserve may be lost in between (another thread of ours,
 * or another process under ENFILE, takes the freed slot): it is taken again
 * at every pause, and without it one accept is still tried. */
static void shed_pending(struct listener *l)
{
    reserve_take();
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        bool had = reserve_fd >= 0;
        if (had) {
            close(reserve_fd);
            reserve_fd = -1;
        }
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            close(fd);
        reserve_take();
        if (fd < 0 || !had)
            break;
    }
}

static void on_pause_over(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct listener *l = w->data;
    reserve_take();
    if (l->active)
        ev_io_start(loop, &l->io);
}

/* Out of descriptors or memory, or another error: turn the pending peers
 * away (when descriptors ran out) and stop watching the listener for a
 * moment. */
static void pause_accepting(struct listener *l, int err)
{
    struct rlimit rl = {0};
    getrlimit(RLIMIT_NOFILE, &rl);
    log_warn("%s: cannot accept: %s (descriptor limit %llu); refusing new connections for "
             "%.0f ms",
             l->what, strerror(err), (unsigned long long)rl.rlim_cur, PAUSE_S * 1000);
    if (err == EMFILE || err == ENFILE)
        shed_pending(l);
    ev_io_stop(l->loop, &l->io);
    ev_timer_set(&l->pause, PAUSE_S, 0.0);
    ev_timer_start(l->loop, &l->pause);
}

static void on_acceptable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct listener *l = w->data;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            l->cb(l->arg, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        /* Any other error may last (descriptors, memory, a security
         * module refusing a peer that stays in the backlog): a listener
         * that stays readable must not be watched meanwhile. */
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            pause_accepting(l, errno);
        return;
    }
}

void listener_start(struct listener *l, struct ev_loop *loop, int fd, const char *what,
                    listener_cb cb, void *arg)
{
    reserve_take();
    *l = (struct listener){.loop = loop, .fd = fd, .what = what, .cb = cb, .arg = arg};
    ev_io_init(&l->io, on_acceptable, fd, EV_READ);
    l->io.data = l;
    ev_timer_init(&l->pause, on_pause_over, PAUSE_S, 0.0);
    l->pause.data = l;
    l->active = true;
    ev_io_start(loop, &l->io);
}

void listener_stop(struct listener *l)
{
    if (!l->active)
        return;
    l->active = false;
    ev_io_stop(l->loop, &l->io);
    ev_timer_stop(l->loop, &l->pause);
}

unsigned long listener_fit_nofile(unsigned long needed)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= needed ? needed : rl.rlim_max;
        struct rlimit raised = {.rlim_cur = want, .rlim_max = rl.rlim_max};
        if (want > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) == 0) {
            log_info("raised the descriptor limit from %llu to %llu",
                     (unsigned long long)rl.rlim_cur, (unsigned long long)want);
            rl.rlim_cur = want;
        }
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed)
        log_warn("the settings need about %lu file descriptors but RLIMIT_NOFILE allows %llu "
                 "(hard limit %llu): connections beyond the limit are refused; raise the limit "
                 "(LimitNOFILE= in the unit, ulimit -n) or lower max_connections",
                 needed, (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    return rl.rlim_cur == RLIM_INFINITY ? (unsigned long)-1 : (unsigned long)rl.rlim_cur;
}
