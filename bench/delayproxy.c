/* SPDX-License-Identifier: BSD-3-Clause */
/* delayproxy.c -- a userspace stand-in for a network between a client and
 * Redis: listens on a unix socket, connects to the real Redis for each
 * connection it accepts, and forwards the bytes each way after a fixed
 * one-way delay. Every read is a chunk of its own, released at its arrival
 * time + the delay (delays are never coalesced across writes), in order.
 * One thread, epoll and a timerfd on CLOCK_BOOTTIME with 1 ns of timer slack. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CHUNK_MAX  65536
#define MAX_EVENTS 64
#define LATE_CAP   (1 << 20) /* lateness samples kept */

/* Bytes read at `due - delay`, to write at `due`. */
struct chunk {
    struct chunk *next;
    uint64_t due;
    size_t len, off;
    char data[];
};

/* One direction of a connection: bytes read from `from`, written to `to`. */
struct dir {
    int from, to;
    struct chunk *head, *tail;
    bool blocked; /* `to` said EAGAIN: wait for EPOLLOUT */
};

struct conn {
    struct conn *next;
    struct dir up, down; /* client -> Redis, Redis -> client */
    bool dead;
    bool out_up, out_down; /* EPOLLOUT is watched for up.to, down.to */
};

/* What epoll reports: a tag per descriptor. */
struct tag {
    int kind; /* 0 listener, 1 timer, 2 wake, 3 conn side */
    struct conn *c;
    bool client; /* the client side of c (else the Redis side) */
};

struct delayproxy {
    char listen_path[BENCH_PATH], target_path[BENCH_PATH];
    uint64_t delay_ns;
    int lfd, tfd, efd, ep;
    pthread_t tid;
    bool running;
    struct conn *conns;
    struct tag ltag, ttag, etag;
    /* How late each chunk went out past its due time, ns, since the last
     * delayproxy_lateness(); under mu. */
    pthread_mutex_t mu;
    uint64_t *late;
    size_t nlate;
    long chunks;
};

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* A unix socket at path, or a loopback TCP one for "tcp:127.0.0.1:PORT". */
static int unix_socket(const char *path, bool listen_on)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr *sa = (struct sockaddr *)&a;
    socklen_t len = sizeof a;
    if (strncmp(path, "tcp:127.0.0.1:", 14) == 0) {
        in.sin_port = htons((uint16_t)atoi(path + 14));
        sa = (struct sockaddr *)&in;
        len = sizeof in;
    } else if (strlen(path) >= sizeof a.sun_path) {
        return -1;
    } else {
        strcpy(a.sun_path, path);
    }
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    if (sa->sa_family == AF_INET) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (listen_on)
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    }
    int rc = listen_on ? bind(fd, sa, len) == 0 ? listen(fd, 128) : -1 : connect(fd, sa, len);
    if (rc != 0 || set_nonblock(fd) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void conn_free(struct delayproxy *d, struct conn *c)
{
    struct dir *ds[2] = {&c->up, &c->down};
    for (int k = 0; k < 2; k++) {
        while (ds[k]->head) {
            struct chunk *n = ds[k]->head->next;
            free(ds[k]->head);
            ds[k]->head = n;
        }
    }
    epoll_ctl(d->ep, EPOLL_CTL_DEL, c->up.from, NULL);
    epoll_ctl(d->ep, EPOLL_CTL_DEL, c->down.from, NULL);
    close(c->up.from);
    close(c->down.from);
    /* The tags live right behind the conn (see on_accept). */
    free(c);
}

static int watch(struct delayproxy *d, int op, int fd, uint32_t events, struct tag *t)
{
    struct epoll_event ev = {.events = events, .data.ptr = t};
    return epoll_ctl(d->ep, op, fd, &ev);
}

static void on_accept(struct delayproxy *d)
{
    for (;;) {
        int cfd = accept4(d->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0)
            return;
        int rfd = unix_socket(d->target_path, false);
        struct conn *c = calloc(1, sizeof *c + 2 * sizeof(struct tag));
        if (rfd < 0 || !c) {
            close(cfd);
            if (rfd >= 0)
                close(rfd);
            free(c);
            continue;
        }
        struct tag *t = (struct tag *)(c + 1);
        t[0] = (struct tag){.kind = 3, .c = c, .client = true};
        t[1] = (struct tag){.kind = 3, .c = c, .client = false};
        c->up = (struct dir){.from = cfd, .to = rfd};
        c->down = (struct dir){.from = rfd, .to = cfd};
        watch(d, EPOLL_CTL_ADD, cfd, EPOLLIN, &t[0]);
        watch(d, EPOLL_CTL_ADD, rfd, EPOLLIN, &t[1]);
        c->next = d->conns;
        d->conns = c;
    }
}

/* Reads what `from` has, one chunk per read, each due `delay` from now. */
static void on_readable(struct delayproxy *d, struct conn *c, struct dir *dr)
{
    for (;;) {
        struct chunk *k = malloc(sizeof *k + CHUNK_MAX);
        if (!k) {
            c->dead = true;
            return;
        }
        ssize_t n = read(dr->from, k->data, CHUNK_MAX);
        if (n <= 0) {
            free(k);
            if (n == 0 || (errno != EAGAIN && errno != EINTR))
                c->dead = true;
            return;
        }
        k->next = NULL;
        k->due = now_ns() + d->delay_ns;
        k->len = (size_t)n;
        k->off = 0;
        if (dr->tail)
            dr->tail->next = k;
        else
            dr->head = k;
        dr->tail = k;
    }
}

/* Writes every chunk that is due, in order; stops at EAGAIN. */
static void flush_due(struct delayproxy *d, struct conn *c, struct dir *dr, uint64_t now)
{
    while (dr->head && dr->head->due <= now && !dr->blocked) {
        struct chunk *k = dr->head;
        ssize_t n = write(dr->to, k->data + k->off, k->len - k->off);
        if (n < 0) {
            if (errno == EAGAIN) {
                dr->blocked = true;
            } else if (errno != EINTR) {
                c->dead = true;
                return;
            }
            continue;
        }
        if (k->off == 0) {
            pthread_mutex_lock(&d->mu);
            if (d->nlate < LATE_CAP)
                d->late[d->nlate++] = now - k->due;
            d->chunks++;
            pthread_mutex_unlock(&d->mu);
        }
        k->off += (size_t)n;
        if (k->off < k->len)
            continue;
        dr->head = k->next;
        if (!dr->head)
            dr->tail = NULL;
        free(k);
    }
}

/* Interest of one side's descriptor: input always, output while its
 * direction towards it is blocked. */
static void rewatch(struct delayproxy *d, struct conn *c)
{
    struct tag *t = (struct tag *)(c + 1);
    if (c->out_down != c->down.blocked) {
        c->out_down = c->down.blocked;
        watch(d, EPOLL_CTL_MOD, c->down.to, EPOLLIN | (c->out_down ? EPOLLOUT : 0), &t[0]);
    }
    if (c->out_up != c->up.blocked) {
        c->out_up = c->up.blocked;
        watch(d, EPOLL_CTL_MOD, c->up.to, EPOLLIN | (c->out_up ? EPOLLOUT : 0), &t[1]);
    }
}

/* Flushes what is due everywhere, drops dead connections, and sets the timer
 * for the earliest chunk still waiting. */
static void service(struct delayproxy *d)
{
    uint64_t now = now_ns(), next = 0;
    for (struct conn **pc = &d->conns; *pc;) {
        struct conn *c = *pc;
        flush_due(d, c, &c->up, now);
        flush_due(d, c, &c->down, now);
        if (c->dead) {
            *pc = c->next;
            conn_free(d, c);
            continue;
        }
        rewatch(d, c);
        struct dir *ds[2] = {&c->up, &c->down};
        for (int k = 0; k < 2; k++)
            if (ds[k]->head && !ds[k]->blocked && (next == 0 || ds[k]->head->due < next))
                next = ds[k]->head->due;
        pc = &c->next;
    }
    struct itimerspec its = {{0, 0}, {0, 0}};
    if (next) {
        its.it_value.tv_sec = (time_t)(next / 1000000000ull);
        its.it_value.tv_nsec = (long)(next % 1000000000ull);
    }
    timerfd_settime(d->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void *proxy_main(void *arg)
{
    struct delayproxy *d = arg;
    /* The default slack (50 us) would add to every delay. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct epoll_event ev[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(d->ep, ev, MAX_EVENTS, -1);
        for (int i = 0; i < n; i++) {
            struct tag *t = ev[i].data.ptr;
            if (t->kind == 0) {
                on_accept(d);
            } else if (t->kind == 1) {
                uint64_t x;
                if (read(d->tfd, &x, sizeof x) < 0) {
                    /* Nothing expired yet: service() sets it again. */
                }
            } else if (t->kind == 2) {
                return NULL;
            } else {
                struct conn *c = t->c;
                struct dir *in = t->client ? &c->up : &c->down;
                struct dir *out = t->client ? &c->down : &c->up;
                if (ev[i].events & EPOLLOUT)
                    out->blocked = false;
                if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    on_readable(d, c, in);
            }
        }
        service(d);
    }
}

struct delayproxy *delayproxy_start(const char *listen_path, const char *target_path,
                                    uint64_t delay_ns)
{
    struct delayproxy *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->lfd = d->tfd = d->efd = d->ep = -1;
    snprintf(d->listen_path, sizeof d->listen_path, "%s", listen_path);
    snprintf(d->target_path, sizeof d->target_path, "%s", target_path);
    d->delay_ns = delay_ns;
    pthread_mutex_init(&d->mu, NULL);
    d->late = malloc(LATE_CAP * sizeof *d->late);
    unlink(listen_path);
    d->lfd = unix_socket(listen_path, true);
    d->tfd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    d->ep = epoll_create1(EPOLL_CLOEXEC);
    d->ltag.kind = 0;
    d->ttag.kind = 1;
    d->etag.kind = 2;
    if (!d->late || d->lfd < 0 || d->tfd < 0 || d->efd < 0 || d->ep < 0 ||
        watch(d, EPOLL_CTL_ADD, d->lfd, EPOLLIN, &d->ltag) != 0 ||
        watch(d, EPOLL_CTL_ADD, d->tfd, EPOLLIN, &d->ttag) != 0 ||
        watch(d, EPOLL_CTL_ADD, d->efd, EPOLLIN, &d->etag) != 0 ||
        pthread_create(&d->tid, NULL, proxy_main, d) != 0) {
        fprintf(stderr, "dlock-bench: cannot start the delay proxy on %s: %s\n", listen_path,
                strerror(errno));
        delayproxy_stop(d);
        return NULL;
    }
    d->running = true;
    return d;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void delayproxy_lateness(struct delayproxy *d, struct delay_lateness *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&d->mu);
    size_t n = d->nlate;
    out->chunks = d->chunks;
    if (n > 0) {
        qsort(d->late, n, sizeof *d->late, cmp_u64);
        out->p50_us = (double)d->late[n / 2] / 1e3;
        out->p99_us = (double)d->late[n * 99 / 100] / 1e3;
        out->max_us = (double)d->late[n - 1] / 1e3;
    }
    d->nlate = 0;
    d->chunks = 0;
    pthread_mutex_unlock(&d->mu);
}

void delayproxy_stop(struct delayproxy *d)
{
    if (!d)
        return;
    if (d->running) {
        uint64_t one = 1;
        if (write(d->efd, &one, sizeof one) != sizeof one)
            fprintf(stderr, "dlock-bench: cannot wake the delay proxy\n");
        pthread_join(d->tid, NULL);
    }
    while (d->conns) {
        struct conn *c = d->conns;
        d->conns = c->next;
        conn_free(d, c);
    }
    int fds[] = {d->lfd, d->tfd, d->efd, d->ep};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (d->lfd >= 0)
        unlink(d->listen_path);
    pthread_mutex_destroy(&d->mu);
    free(d->late);
    free(d);
}
