/* SPDX-License-Identifier: BSD-3-Clause */
/* test_resume.c -- libdlock across agent restarts (docs/restarts.md): a
 * resumable connection taken back with RESUME, its leases kept valid
 * meanwhile, its pending requests sent again, the fallback to a fresh HELLO
 * and to protocol version 1.
 *
 * Two halves. The library's side against a scripted agent in a thread
 * (suite resume_lib): it speaks versions 1 and 2, keeps its leases across a
 * "crash" (its sockets closed, its socket file gone) and takes the
 * connection back at RESUME, or refuses it, as told; it logs every frame,
 * and can stand for an agent older than version 2. And the whole of it
 * against a real redis-server and dlockd (suite resume): kill -9 of the
 * agent, a successor on the same config, a stop and a start without state. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "shm.h"

#define TTL 30000

static int64_t boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* What a descriptor is, from /proc: "socket:[...]", "anon_inode:[timerfd]". */
static const char *fd_kind(int fd)
{
    static char buf[128];
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* ---- the library against a scripted agent ----
 *
 * One connection at a time. Every acquire of a free name is granted at once
 * (a lease, a slot of the one lease page); one of a taken name waits (a
 * try-once is DLOCK_EBUSY) until a RELEASE, or the test, frees it. Names can
 * be taken by "another host" (r_take_foreign()). A crash (r_crash()) closes
 * the listening socket and the connection and removes the socket file,
 * keeping the leases and the pages (the same memfds); r_restart() listens
 * again, and the next RESUME gets HELLO_OK, the pages, one EVENT per lease
 * (but those r_drop_at_resume() names) and the PING's OK; or, after
 * r_forget(), ERROR DLOCK_ENOTFOUND (the leases gone). A connection the
 * client closes drops its leases and waiters, as dlockd's does. */

#define R_SLOTS   16
#define R_LEASES  16
#define R_WAITERS 16
#define R_LOG     128

struct r_req {
    uint16_t type;
    uint32_t id;
    uint16_t version; /* HELLO, RESUME */
    uint64_t conn_id; /* RESUME */
    uint8_t secret[WIRE_SECRET_LEN];
    char name[64];     /* ACQUIRE */
    int64_t wait_ms;   /* ACQUIRE */
    uint64_t lease_id; /* RELEASE */
};

struct r_lease {
    uint64_t id; /* 0: free */
    uint32_t slot;
    uint64_t fence;
    bool foreign; /* another host's: no slot, no connection */
    char name[64];
};

struct r_waiter {
    uint32_t id; /* the acquire's; 0: free */
    char name[64];
};

static struct {
    char dir[64];
    char sock[108];
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int lfd; /* listening; -1 while crashed */
    int fd;  /* the connection; -1 when none */
    bool quit, crashing;
    /* How it behaves. */
    bool resumable;    /* HELLO_OK version 2 says resumable */
    bool old;          /* an agent of version 1: HELLO 2 is DLOCK_EVERSION */
    bool forget;       /* the next RESUME is refused */
    bool silent_grant; /* grants "silent" without answering (the GRANTED lost) */
    char drop[64];     /* the successor does not take this name's lease over */
    uint64_t conn_id;
    uint8_t secret[WIRE_SECRET_LEN];
    void *page;
    uint64_t *touch;
    int fds[2];
    struct r_lease lease[R_LEASES];
    struct r_waiter waiter[R_WAITERS];
    uint64_t next_id, next_fence;
    struct r_req log[R_LOG];
    int nlog;
} R;

static void r_lock(void)
{
    pthread_mutex_lock(&R.mu);
}

static void r_unlock(void)
{
    pthread_mutex_unlock(&R.mu);
}

static int r_nlog(void)
{
    r_lock();
    int n = R.nlog;
    r_unlock();
    return n;
}

static struct r_req r_log_at(int i)
{
    r_lock();
    struct r_req r = R.log[i];
    r_unlock();
    return r;
}

/* The index of the first request of `type` logged at or after `from`, or -1. */
static int r_find(int from, uint16_t type)
{
    int found = -1;
    r_lock();
    for (int i = from; i < R.nlog && found < 0; i++)
        if (R.log[i].type == type)
            found = i;
    r_unlock();
    return found;
}

static bool r_read_all(int fd, void *buf, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t r = read(fd, (char *)buf + off, n - off);
        if (r <= 0 && !(r < 0 && errno == EINTR))
            return false;
        if (r > 0)
            off += (size_t)r;
    }
    return true;
}

/* Sends b whole on the connection (under R.mu), then empties it. */
static void r_send(struct wire_buf *b)
{
    size_t off = 0;
    while (R.fd >= 0 && off < b->len) {
        ssize_t n = send(R.fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    b->len = 0;
}

/* Sends b with the two page descriptors attached (HELLO_OK). */
static void r_send_fds(struct wire_buf *b)
{
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = b->data, .iov_len = b->len};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(cm), R.fds, 2 * sizeof(int));
    (void)sendmsg(R.fd, &msg, MSG_NOSIGNAL);
    b->len = 0;
}

static void r_hello_ok(struct wire_buf *b, uint32_t id, uint16_t version)
{
    struct wire_hello_ok ok = {.version = version,
                               .max_name_len = 200,
                               .max_leases = R_SLOTS,
                               .default_ttl_ms = TTL,
                               .clock_ns = (uint64_t)boot_ns()};
    if (version >= 2 && R.resumable) {
        ok.flags = WIRE_HELLO_RESUMABLE;
        ok.conn_id = R.conn_id;
        memcpy(ok.secret, R.secret, WIRE_SECRET_LEN);
    }
    wire_put_hello_ok(b, id, &ok);
    r_send_fds(b);
}

static void r_error(struct wire_buf *b, uint32_t id, int code)
{
    struct wire_error e = {.code = code, .msg = "scripted", .msg_len = 8};
    wire_put_error(b, id, &e);
}

static struct r_lease *r_lease_of(const char *name)
{
    for (int i = 0; i < R_LEASES; i++)
        if (R.lease[i].id && strcmp(R.lease[i].name, name) == 0)
            return &R.lease[i];
    return NULL;
}

static void r_free_lease(struct r_lease *l)
{
    if (!l->foreign)
        shm_slot_write(&shm_slots(R.page)[l->slot], 0, 0, 0, 0);
    memset(l, 0, sizeof *l);
}

/* A new lease of name for the connection, in the slot of its index. */
static struct r_lease *r_new_lease(const char *name, bool foreign)
{
    struct r_lease *l = NULL;
    for (int i = 0; i < R_LEASES && !l; i++)
        if (!R.lease[i].id)
            l = &R.lease[i];
    cr_assert_not_null(l, "the scripted agent is out of leases");
    l->slot = (uint32_t)(l - R.lease);
    l->id = ++R.next_id;
    l->fence = ++R.next_fence;
    l->foreign = foreign;
    snprintf(l->name, sizeof l->name, "%s", name);
    if (!foreign)
        shm_slot_write(&shm_slots(R.page)[l->slot], DLOCK_STATE_HELD, l->id, l->fence,
                       boot_ns() + 60 * 1000000000LL);
    return l;
}

static void r_grant(struct wire_buf *b, uint32_t id, const char *name)
{
    struct r_lease *l = r_new_lease(name, false);
    struct wire_granted g = {.lease_id = l->id,
                             .deadline_ns = (uint64_t)boot_ns() + 60 * 1000000000ULL,
                             .fence = l->fence,
                             .ttl_ms = TTL,
                             .slot = l->slot};
    if (!(R.silent_grant && strcmp(name, "silent") == 0))
        wire_put_granted(b, id, &g);
}

/* The name is free again: its first waiter gets it. */
static void r_wake(struct wire_buf *b, const char *name)
{
    for (int i = 0; i < R_WAITERS; i++)
        if (R.waiter[i].id && strcmp(R.waiter[i].name, name) == 0) {
            r_grant(b, R.waiter[i].id, name);
            memset(&R.waiter[i], 0, sizeof R.waiter[i]);
            return;
        }
}

static void r_acquire(struct wire_buf *b, uint32_t id, const struct r_req *r)
{
    if (!r_lease_of(r->name)) {
        r_grant(b, id, r->name);
        return;
    }
    if (r->wait_ms == 0) {
        r_error(b, id, DLOCK_EBUSY);
        return;
    }
    for (int i = 0; i < R_WAITERS; i++)
        if (!R.waiter[i].id) {
            R.waiter[i].id = id;
            snprintf(R.waiter[i].name, sizeof R.waiter[i].name, "%s", r->name);
            return;
        }
    cr_assert_fail("the scripted agent is out of waiters");
}

static void r_release(struct wire_buf *b, uint32_t id, uint64_t lease_id)
{
    for (int i = 0; i < R_LEASES; i++) {
        struct r_lease *l = &R.lease[i];
        if (l->id != lease_id || l->foreign)
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s", l->name);
        r_free_lease(l);
        wire_put_empty(b, id, WIRE_T_OK);
        r_wake(b, name);
        return;
    }
    r_error(b, id, DLOCK_ENOTFOUND);
}

/* Drops the leases and waiters of the connection (not the foreign ones). */
static void r_drop_connection_state(void)
{
    for (int i = 0; i < R_LEASES; i++)
        if (R.lease[i].id && !R.lease[i].foreign)
            r_free_lease(&R.lease[i]);
    memset(R.waiter, 0, sizeof R.waiter);
}

/* RESUME: refused, or HELLO_OK and an EVENT per lease taken over. Returns
 * false when the connection is to be closed. */
static bool r_resume(struct wire_buf *b, uint32_t id, const struct r_req *r)
{
    bool known = !R.forget && R.resumable && r->conn_id == R.conn_id &&
                 memcmp(r->secret, R.secret, WIRE_SECRET_LEN) == 0;
    if (!known) {
        R.forget = false;
        r_drop_connection_state();
        r_error(b, id, DLOCK_ENOTFOUND);
        r_send(b);
        return false;
    }
    r_hello_ok(b, id, 2);
    for (int i = 0; i < R_LEASES; i++) {
        struct r_lease *l = &R.lease[i];
        if (!l->id || l->foreign)
            continue;
        if (R.drop[0] && strcmp(l->name, R.drop) == 0) {
            r_free_lease(l);
            continue;
        }
        struct wire_event ev = {.lease_id = l->id,
                                .state = DLOCK_STATE_HELD,
                                .deadline_ns = (uint64_t)boot_ns() + 60 * 1000000000ULL};
        wire_put_event(b, 0, &ev);
    }
    return true;
}

/* Logs one frame and answers it. Returns false when the connection is to
 * be closed. */
static bool r_handle(const struct wire_hdr *h, const uint8_t *body)
{
    struct r_req r = {.type = h->type, .id = h->id};
    struct wire_hello hello;
    struct wire_resume res;
    struct wire_acquire m;
    struct wire_release rel;
    if (h->type == WIRE_T_HELLO) {
        cr_assert_eq(wire_get_hello(body, h->len, &hello), 0);
        r.version = hello.version;
    } else if (h->type == WIRE_T_RESUME) {
        cr_assert_eq(wire_get_resume(body, h->len, &res), 0);
        r.version = res.version;
        r.conn_id = res.conn_id;
        memcpy(r.secret, res.secret, WIRE_SECRET_LEN);
    } else if (h->type == WIRE_T_ACQUIRE || h->type == WIRE_T_ACQUIRE_EX) {
        if (h->type == WIRE_T_ACQUIRE)
            cr_assert_eq(wire_get_acquire(body, h->len, &m), 0);
        else
            cr_assert_eq(wire_get_acquire_ex(body, h->len, &m), 0);
        snprintf(r.name, sizeof r.name, "%.*s", (int)m.name_len, m.name);
        r.wait_ms = m.wait_ms;
    } else if (h->type == WIRE_T_RELEASE) {
        cr_assert_eq(wire_get_release(body, h->len, &rel), 0);
        r.lease_id = rel.lease_id;
    }
    struct wire_buf b = {0};
    bool keep = true;
    r_lock();
    if (R.nlog < R_LOG)
        R.log[R.nlog++] = r;
    switch (h->type) {
    case WIRE_T_HELLO:
        if (R.old && hello.version != 1) {
            r_error(&b, h->id, DLOCK_EVERSION);
            keep = false;
        } else {
            R.conn_id++;
            R.secret[0]++;
            r_hello_ok(&b, h->id, hello.version);
        }
        break;
    case WIRE_T_RESUME:
        if (R.old) {
            r_error(&b, h->id, DLOCK_EPROTO); /* "request before hello" */
            keep = false;
        } else {
            keep = r_resume(&b, h->id, &r);
        }
        break;
    case WIRE_T_ACQUIRE:
    case WIRE_T_ACQUIRE_EX:
        r_acquire(&b, h->id, &r);
        break;
    case WIRE_T_RELEASE:
        r_release(&b, h->id, r.lease_id);
        break;
    case WIRE_T_CANCEL:
        for (int i = 0; i < R_WAITERS; i++)
            if (R.waiter[i].id == h->id) {
                memset(&R.waiter[i], 0, sizeof R.waiter[i]);
                r_error(&b, h->id, DLOCK_ECANCELED);
            }
        break;
    default: /* PING */
        wire_put_empty(&b, h->id, WIRE_T_OK);
        break;
    }
    r_send(&b);
    r_unlock();
    wire_buf_free(&b);
    return keep;
}

static void r_serve_connection(int fd)
{
    uint8_t hdr[WIRE_HDR_LEN], body[WIRE_MAX_BODY];
    struct wire_hdr h;
    while (r_read_all(fd, hdr, sizeof hdr) &&
           wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h) == 1 &&
           r_read_all(fd, body, h.len) && r_handle(&h, body))
        ;
}

static void *r_serve(void *arg)
{
    (void)arg;
    r_lock();
    while (!R.quit) {
        if (R.lfd < 0) {
            pthread_cond_wait(&R.cv, &R.mu);
            continue;
        }
        int lfd = R.lfd;
        r_unlock();
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        r_lock();
        if (fd < 0) {
            if (R.lfd != lfd)
                close(lfd); /* shut down by r_crash() */
            continue;
        }
        R.fd = fd;
        r_unlock();
        r_serve_connection(fd);
        r_lock();
        if (!R.crashing)
            r_drop_connection_state(); /* the client closed it */
        memset(R.waiter, 0, sizeof R.waiter);
        close(fd);
        R.fd = -1;
        pthread_cond_broadcast(&R.cv);
    }
    r_unlock();
    return NULL;
}

static int r_memfd(const char *name, size_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)size), 0);
    return fd;
}

/* Listens on the socket (under R.mu). */
static void r_listen(void)
{
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(lfd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, R.sock, strlen(R.sock) + 1);
    unlink(R.sock);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(lfd, 4), 0);
    R.lfd = lfd;
    pthread_cond_broadcast(&R.cv);
}

static void r_setup(void)
{
    memset(&R, 0, sizeof R);
    R.lfd = R.fd = -1;
    R.resumable = true;
    pthread_mutex_init(&R.mu, NULL);
    pthread_cond_init(&R.cv, NULL);
    snprintf(R.dir, sizeof R.dir, "/tmp/dlock-resume.XXXXXX");
    cr_assert_not_null(mkdtemp(R.dir));
    snprintf(R.sock, sizeof R.sock, "%s/fake.sock", R.dir);
    R.fds[0] = r_memfd("fake-leases", shm_page_size(R_SLOTS));
    R.fds[1] = r_memfd("fake-touch", shm_touch_size(R_SLOTS));
    R.page = mmap(NULL, shm_page_size(R_SLOTS), PROT_READ | PROT_WRITE, MAP_SHARED, R.fds[0], 0);
    cr_assert_neq(R.page, MAP_FAILED);
    R.touch = mmap(NULL, shm_touch_size(R_SLOTS), PROT_READ | PROT_WRITE, MAP_SHARED, R.fds[1], 0);
    cr_assert_neq(R.touch, MAP_FAILED);
    struct shm_hdr *hdr = R.page;
    hdr->magic = SHM_MAGIC;
    hdr->version = SHM_VERSION;
    hdr->slot_size = sizeof(struct shm_slot);
    hdr->nslots = R_SLOTS;
    r_lock();
    r_listen();
    r_unlock();
    cr_assert_eq(pthread_create(&R.th, NULL, r_serve, NULL), 0);
    R.started = true;
}

static void r_teardown(void)
{
    if (R.started) {
        r_lock();
        R.quit = true;
        if (R.lfd >= 0)
            shutdown(R.lfd, SHUT_RDWR);
        if (R.fd >= 0)
            shutdown(R.fd, SHUT_RDWR);
        pthread_cond_broadcast(&R.cv);
        r_unlock();
        pthread_join(R.th, NULL);
    }
    if (R.lfd >= 0)
        close(R.lfd);
    unlink(R.sock);
    rmdir(R.dir);
}

/* The agent dies: no listener, no socket file, the connection closed; its
 * leases (and pages) stay for its successor. */
static void r_crash(void)
{
    r_lock();
    R.crashing = true;
    unlink(R.sock);
    if (R.lfd >= 0)
        shutdown(R.lfd, SHUT_RDWR);
    R.lfd = -1;
    if (R.fd >= 0)
        shutdown(R.fd, SHUT_RDWR);
    int64_t end = h_now_ms() + h_scaled_ms(H_EVENT_MS);
    while (R.fd >= 0 && h_now_ms() < end) {
        r_unlock();
        h_sleep_ms(1);
        r_lock();
    }
    cr_assert_eq(R.fd, -1, "the scripted agent did not let its connection go");
    R.crashing = false;
    r_unlock();
}

/* Its successor listens. */
static void r_restart(void)
{
    r_lock();
    r_listen();
    r_unlock();
}

/* Another host takes name (it must be free), or gives it up: the first
 * waiter of the connection gets it then. */
static void r_take_foreign(const char *name)
{
    r_lock();
    cr_assert_null(r_lease_of(name));
    r_new_lease(name, true);
    r_unlock();
}

static void r_give_foreign(const char *name)
{
    struct wire_buf b = {0};
    r_lock();
    struct r_lease *l = r_lease_of(name);
    cr_assert(l && l->foreign);
    r_free_lease(l);
    r_wake(&b, name);
    r_send(&b);
    r_unlock();
    wire_buf_free(&b);
}

/* The agent puts the lease of name in doubt after a failover: JEOPARDY
 * (DLOCK_EFAILOVER), the page's deadline the moment the doubt began, past. */
static void r_doubt(const char *name)
{
    struct wire_buf b = {0};
    r_lock();
    struct r_lease *l = r_lease_of(name);
    cr_assert_not_null(l);
    int64_t past = boot_ns() - 1000000;
    shm_slot_write(&shm_slots(R.page)[l->slot], DLOCK_STATE_JEOPARDY, l->id, l->fence, past);
    struct wire_event ev = {.lease_id = l->id,
                            .state = DLOCK_STATE_JEOPARDY,
                            .reason = DLOCK_EFAILOVER,
                            .deadline_ns = (uint64_t)past};
    wire_put_event(&b, 0, &ev);
    r_send(&b);
    r_unlock();
    wire_buf_free(&b);
}

static uint64_t r_touch_of(const dlock_lease *l)
{
    uint64_t id = 0;
    uint32_t slot = 0;
    r_lock();
    for (int i = 0; i < R_LEASES; i++)
        if (R.lease[i].id && strcmp(R.lease[i].name, dlock_lease_name(l)) == 0) {
            id = R.lease[i].id;
            slot = R.lease[i].slot;
        }
    r_unlock();
    cr_assert_neq(id, 0, "the scripted agent has no lease of %s", dlock_lease_name(l));
    return __atomic_load_n(&R.touch[slot], __ATOMIC_ACQUIRE);
}

/* ---- a client of the scripted agent that records its events ---- */

struct r_ev {
    dlock_lease *lease;
    dlock_state state;
    int reason;
};

struct r_cl {
    dlock_client *c;
    int nev;
    struct r_ev ev[64];
    int dispatch_rc; /* the last dispatch's */
};

static void r_on_event(dlock_client *c, dlock_lease *lease, dlock_state state, int reason,
                       void *arg)
{
    struct r_cl *cl = arg;
    (void)c;
    if (cl->nev < 64)
        cl->ev[cl->nev++] = (struct r_ev){lease, state, reason};
}

static void r_client(struct r_cl *cl)
{
    memset(cl, 0, sizeof *cl);
    int rc = dlock_client_open(&cl->c, R.sock);
    cr_assert_eq(rc, 0, "open the scripted agent: %s", dlock_strerror(rc));
    dlock_client_set_event_cb(cl->c, r_on_event, cl);
}

/* The i-th event of lease (any lease when NULL) in state, or NULL. */
static const struct r_ev *r_event(const struct r_cl *cl, const dlock_lease *lease,
                                  dlock_state state, int nth)
{
    for (int i = 0; i < cl->nev; i++)
        if (cl->ev[i].state == state && (!lease || cl->ev[i].lease == lease) && nth-- == 0)
            return &cl->ev[i];
    return NULL;
}

/* An event loop's turn: polls the client's descriptor, read afresh (it may
 * change with every call), and dispatches when it is readable. */
static void r_turn(struct r_cl *cl, int ms)
{
    struct pollfd p = {.fd = dlock_client_fd(cl->c), .events = POLLIN};
    if (poll(&p, 1, ms) > 0)
        cl->dispatch_rc = dlock_client_dispatch(cl->c);
}

#define R_WAIT_UNTIL(cl, cond)                                                                     \
    do {                                                                                           \
        int64_t r_end_ = h_deadline(H_EVENT_MS);                                                   \
        while (!(cond)) {                                                                          \
            if (h_now_ms() > r_end_)                                                               \
                cr_assert_fail("%s:%d: not true within %d ms: %s", __FILE__, __LINE__,             \
                               h_scaled_ms(H_EVENT_MS), #cond);                                    \
            r_turn(cl, 2);                                                                         \
        }                                                                                          \
    } while (0)

static dlock_lease *r_must_acquire(struct r_cl *cl, const char *name)
{
    dlock_lease *l = NULL;
    dlock_acquire_options o = {.ttl_ms = TTL};
    int rc = dlock_lease_acquire(cl->c, name, &o, &l);
    cr_assert_eq(rc, 0, "acquire %s: %s", name, dlock_strerror(rc));
    return l;
}

struct r_acq {
    int done;
    int status;
    dlock_lease *lease;
};

static void r_acq_done(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct r_acq *a = arg;
    (void)c;
    a->done++;
    a->status = status;
    a->lease = lease;
}

static void r_acquire_async(struct r_cl *cl, const char *name, int64_t wait_ms, struct r_acq *a)
{
    memset(a, 0, sizeof *a);
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = wait_ms};
    int rc = dlock_lease_acquire_async(cl->c, name, &o, r_acq_done, a);
    cr_assert_eq(rc, 0, "async acquire %s: %s", name, dlock_strerror(rc));
}

/* The file's one timeout (harness.h: Criterion leaks a shorter one's). */
#define LTEST(name)                                                                                \
    Test(resume_lib, name, .init = r_setup, .fini = r_teardown, .timeout = H_TEST_TIMEOUT_S)

/* Version 2 first; an agent of version 1 answers DLOCK_EVERSION and hangs
 * up, and the library says HELLO again in version 1. That connection is not
 * resumable: when the agent goes, its leases are LOST and the client is
 * disconnected, as always. */
LTEST(an_older_agent_gets_version_1_and_no_resume)
{
    R.old = true;
    struct r_cl a;
    r_client(&a);
    cr_assert_eq(r_nlog(), 2);
    cr_assert_eq(r_log_at(0).type, WIRE_T_HELLO);
    cr_assert_eq(r_log_at(0).version, 2);
    cr_assert_eq(r_log_at(1).type, WIRE_T_HELLO);
    cr_assert_eq(r_log_at(1).version, 1);
    dlock_lease *l = r_must_acquire(&a, "v1");
    cr_assert(dlock_lease_valid(l));
    r_crash();
    R_WAIT_UNTIL(&a, a.dispatch_rc == DLOCK_EDISCONNECTED);
    const struct r_ev *e = r_event(&a, l, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(e, "no LOST event");
    cr_assert_eq(e->reason, DLOCK_EDISCONNECTED);
    cr_assert_null(r_event(&a, l, DLOCK_STATE_JEOPARDY, 0));
    cr_assert_not(dlock_lease_valid(l));
    r_restart();
    cr_assert_eq(dlock_client_ping(a.c), DLOCK_EDISCONNECTED);
    cr_assert_eq(r_find(2, WIRE_T_RESUME), -1, "a version 1 connection was resumed");
    dlock_client_close(a.c);
}

/* Version 2 without the resumable flag (an agent without a state
 * directory): today's behaviour too. */
LTEST(a_connection_not_resumable_ends_with_its_agent)
{
    R.resumable = false;
    struct r_cl a;
    r_client(&a);
    cr_assert_eq(r_log_at(0).version, 2);
    dlock_lease *l = r_must_acquire(&a, "plain");
    r_crash();
    R_WAIT_UNTIL(&a, a.dispatch_rc == DLOCK_EDISCONNECTED);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);
    cr_assert_eq(dlock_lease_release(l), DLOCK_EDISCONNECTED);
    dlock_client_close(a.c);
}

/* The lease is held across the restart: JEOPARDY (DLOCK_ERESTART) when the
 * socket breaks, valid throughout by its page, HELD again once the
 * successor names it after RESUME; same handle, id and fence. While down,
 * the client's descriptor is a timer; an event loop that reads it afresh
 * after each call follows it there and back. */
LTEST(a_lease_is_held_across_a_restart)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *l = r_must_acquire(&a, "keep");
    uint64_t fence = dlock_lease_fence(l);
    int64_t deadline = dlock_lease_deadline_ns(l);
    cr_assert(strstr(fd_kind(dlock_client_fd(a.c)), "socket:"), "the descriptor: %s",
              fd_kind(dlock_client_fd(a.c)));
    int from = r_nlog();
    r_crash();
    R_WAIT_UNTIL(&a, r_event(&a, l, DLOCK_STATE_JEOPARDY, 0));
    const struct r_ev *j = r_event(&a, l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_eq(j->reason, DLOCK_ERESTART);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_JEOPARDY);
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_deadline_ns(l), deadline);
    cr_assert_eq(a.dispatch_rc, 0, "dispatch while down: %d", a.dispatch_rc);
    cr_assert(strstr(fd_kind(dlock_client_fd(a.c)), "timerfd"), "the descriptor while down: %s",
              fd_kind(dlock_client_fd(a.c)));
    /* A few turns of the loop while nobody listens: attempts that fail. */
    for (int i = 0; i < 5; i++)
        r_turn(&a, 50);
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(a.dispatch_rc, 0);
    r_restart();
    R_WAIT_UNTIL(&a, r_event(&a, l, DLOCK_STATE_HELD, 0));
    cr_assert_eq(r_event(&a, l, DLOCK_STATE_HELD, 0)->reason, 0);
    cr_assert_eq(a.nev, 2, "events: %d", a.nev);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_fence(l), fence);
    cr_assert(strstr(fd_kind(dlock_client_fd(a.c)), "socket:"), "the descriptor once back: %s",
              fd_kind(dlock_client_fd(a.c)));
    /* RESUME with the connection's name, the PING right behind it. */
    int res = r_find(from, WIRE_T_RESUME);
    cr_assert_geq(res, 0, "no RESUME");
    struct r_req rq = r_log_at(res);
    cr_assert_eq(rq.version, 2);
    cr_assert_eq(rq.conn_id, R.conn_id);
    cr_assert_eq(memcmp(rq.secret, R.secret, WIRE_SECRET_LEN), 0);
    cr_assert_eq(r_log_at(res + 1).type, WIRE_T_PING);
    cr_assert_eq(r_find(from, WIRE_T_HELLO), -1, "a HELLO instead of the resume");
    /* The connection works as before; the lease is released as any. */
    cr_assert_eq(dlock_client_ping(a.c), 0);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    r_lock();
    cr_assert_null(r_lease_of("keep"));
    r_unlock();
    dlock_client_close(a.c);
}

/* A lease the successor does not name in its EVENTs before the PING's OK
 * is LOST (DLOCK_ERESTART); the others are HELD. */
LTEST(a_lease_not_taken_over_is_lost)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *keep = r_must_acquire(&a, "keep");
    dlock_lease *gone = r_must_acquire(&a, "gone");
    snprintf(R.drop, sizeof R.drop, "gone");
    r_crash();
    r_restart();
    R_WAIT_UNTIL(&a, r_event(&a, gone, DLOCK_STATE_LOST, 0));
    cr_assert_eq(r_event(&a, gone, DLOCK_STATE_LOST, 0)->reason, DLOCK_ERESTART);
    cr_assert_not(dlock_lease_valid(gone));
    cr_assert_eq(dlock_lease_state(gone), DLOCK_STATE_LOST);
    cr_assert_eq(dlock_lease_state(keep), DLOCK_STATE_HELD);
    cr_assert(dlock_lease_valid(keep));
    cr_assert_eq(dlock_lease_release(gone), DLOCK_ELOST);
    cr_assert_eq(dlock_lease_release(keep), 0);
    dlock_client_close(a.c);
}

/* A blocking call takes the link up again by itself, without a dispatch:
 * the events come through it, in order. */
LTEST(a_blocking_call_reconnects_by_itself)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *l = r_must_acquire(&a, "blocking");
    r_crash();
    r_restart();
    cr_assert_eq(dlock_client_ping(a.c), 0);
    cr_assert_eq(a.nev, 2, "events: %d", a.nev);
    cr_assert_eq(a.ev[0].state, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(a.ev[0].reason, DLOCK_ERESTART);
    cr_assert_eq(a.ev[1].state, DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    dlock_lease *m = r_must_acquire(&a, "after");
    cr_assert(dlock_lease_valid(m));
    dlock_client_close(a.c);
}

/* The acquires pending when the link broke, and those made while it was
 * down, go out again in the order made once it is back, each with what is
 * left of its wait (an endless one stays endless), and are served. */
LTEST(pending_acquires_go_out_again_in_order)
{
    struct r_cl a;
    r_client(&a);
    r_take_foreign("x");
    r_take_foreign("y");
    struct r_acq ax, ay, az;
    r_acquire_async(&a, "x", DLOCK_WAIT_FOREVER, &ax);
    r_acquire_async(&a, "y", 60000, &ay);
    cr_assert_eq(dlock_client_ping(a.c), 0); /* both are with the agent */
    int from = r_nlog();
    r_crash();
    R_WAIT_UNTIL(&a, strstr(fd_kind(dlock_client_fd(a.c)), "timerfd"));
    r_acquire_async(&a, "z", 60000, &az); /* made while down */
    cr_assert_eq(ax.done + ay.done + az.done, 0);
    r_restart();
    R_WAIT_UNTIL(&a, az.done);
    cr_assert_eq(az.status, 0, "z: %s", dlock_strerror(az.status));
    int res = r_find(from, WIRE_T_RESUME);
    cr_assert_geq(res, 0);
    int i = r_find(res, WIRE_T_ACQUIRE);
    cr_assert_geq(i, 0, "no acquire sent again");
    const char *want[] = {"x", "y", "z"};
    for (int k = 0; k < 3; k++) {
        struct r_req rq = r_log_at(i + k);
        cr_assert_eq(rq.type, WIRE_T_ACQUIRE, "request %d: type 0x%x", i + k, rq.type);
        cr_assert_str_eq(rq.name, want[k]);
        if (k == 0)
            cr_assert_eq(rq.wait_ms, DLOCK_WAIT_FOREVER);
        else
            cr_assert(rq.wait_ms > 0 && rq.wait_ms <= 60000, "%s: wait %lld", rq.name,
                      (long long)rq.wait_ms);
    }
    cr_assert_eq(ax.done + ay.done, 0);
    r_give_foreign("y");
    R_WAIT_UNTIL(&a, ay.done);
    cr_assert_eq(ay.status, 0);
    r_give_foreign("x");
    R_WAIT_UNTIL(&a, ax.done);
    cr_assert_eq(ax.status, 0);
    cr_assert_eq(ax.done + ay.done + az.done, 3);
    dlock_client_close(a.c);
}

/* While the agent is away: a try-once fails at once (DLOCK_EDISCONNECTED),
 * as does one that was in flight; a wait that runs out fails with
 * DLOCK_ETIMEDOUT, blocking or not; a cancelled acquire completes with
 * DLOCK_ECANCELED and is not sent again; an endless wait goes on. */
LTEST(waits_run_out_while_the_agent_is_away)
{
    struct r_cl a;
    r_client(&a);
    r_take_foreign("w");
    struct r_acq shortw, forever, cancelled;
    r_acquire_async(&a, "w", 300, &shortw);
    r_acquire_async(&a, "w", DLOCK_WAIT_FOREVER, &forever);
    r_acquire_async(&a, "w", DLOCK_WAIT_FOREVER, &cancelled);
    cr_assert_eq(dlock_client_ping(a.c), 0);
    int from = r_nlog();
    r_crash();
    R_WAIT_UNTIL(&a, strstr(fd_kind(dlock_client_fd(a.c)), "timerfd"));
    dlock_lease *l = NULL;
    dlock_acquire_options once = {.ttl_ms = TTL};
    cr_assert_eq(dlock_lease_acquire(a.c, "free", &once, &l), DLOCK_EDISCONNECTED);
    dlock_acquire_options brief = {.ttl_ms = TTL, .wait_ms = 50};
    cr_assert_eq(dlock_lease_acquire(a.c, "free", &brief, &l), DLOCK_ETIMEDOUT);
    cr_assert_eq(dlock_lease_acquire_cancel(a.c, r_acq_done, &cancelled), 0);
    R_WAIT_UNTIL(&a, shortw.done && cancelled.done);
    cr_assert_eq(shortw.status, DLOCK_ETIMEDOUT);
    cr_assert_eq(cancelled.status, DLOCK_ECANCELED);
    cr_assert_eq(forever.done, 0);
    r_restart();
    cr_assert_eq(dlock_client_ping(a.c), 0);
    /* Only the endless wait went out again. */
    int n = 0;
    for (int i = r_find(from, WIRE_T_RESUME); i >= 0 && i < r_nlog(); i++)
        n += r_log_at(i).type == WIRE_T_ACQUIRE;
    cr_assert_eq(n, 1, "%d acquires sent again", n);
    r_give_foreign("w");
    R_WAIT_UNTIL(&a, forever.done);
    cr_assert_eq(forever.status, 0);
    cr_assert_eq(shortw.done + cancelled.done + forever.done, 3);
    dlock_client_close(a.c);
}

/* A try-once the agent had not answered when it went fails: it cannot wait
 * for the next one. */
LTEST(a_try_once_in_flight_fails_with_the_link)
{
    struct r_cl a;
    r_client(&a);
    R.silent_grant = true; /* "silent" is granted without a word */
    struct r_acq once;
    r_acquire_async(&a, "silent", 0, &once);
    cr_assert_eq(dlock_client_ping(a.c), 0);
    r_crash();
    R_WAIT_UNTIL(&a, once.done);
    cr_assert_eq(once.status, DLOCK_EDISCONNECTED);
    dlock_client_close(a.c);
}

/* A lease the successor names but the client never heard of (its GRANTED
 * went with the connection) is given back before the acquire goes out
 * again, which is then granted. */
LTEST(a_grant_lost_with_the_connection_is_given_back)
{
    struct r_cl a;
    r_client(&a);
    R.silent_grant = true;
    struct r_acq s;
    r_acquire_async(&a, "silent", DLOCK_WAIT_FOREVER, &s);
    cr_assert_eq(dlock_client_ping(a.c), 0);
    int from = r_nlog();
    r_crash();
    r_lock();
    R.silent_grant = false;
    r_unlock();
    r_restart();
    R_WAIT_UNTIL(&a, s.done);
    cr_assert_eq(s.status, 0, "%s", dlock_strerror(s.status));
    int rel = r_find(from, WIRE_T_RELEASE), acq = r_find(from, WIRE_T_ACQUIRE);
    cr_assert_geq(rel, 0, "the unknown lease was not released");
    cr_assert_lt(rel, acq, "the acquire went out before the release");
    cr_assert_eq(r_log_at(rel).lease_id, 1);
    cr_assert_neq(dlock_lease_fence(s.lease), 1);
    dlock_client_close(a.c);
}

/* A lease released while the agent is away: released at once for the
 * caller (the page's verdict), marked so in its touch slot for the
 * successor, and its RELEASE goes out after RESUME, ahead of the acquires. A
 * release_sync drives the reconnection and waits for the agent's word. */
LTEST(a_release_while_the_agent_is_away)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *r = r_must_acquire(&a, "r");
    dlock_lease *s = r_must_acquire(&a, "s");
    dlock_lease *t = r_must_acquire(&a, "t");
    uint64_t rid = 0;
    r_lock();
    rid = r_lease_of("r")->id;
    r_unlock();
    r_take_foreign("x");
    struct r_acq ax;
    r_acquire_async(&a, "x", DLOCK_WAIT_FOREVER, &ax);
    cr_assert_eq(dlock_client_ping(a.c), 0);
    int from = r_nlog();
    r_crash();
    R_WAIT_UNTIL(&a, r_event(&a, t, DLOCK_STATE_JEOPARDY, 0));
    cr_assert_eq(r_touch_of(r) & SHM_TOUCH_RELEASED, 0);
    cr_assert_eq(dlock_lease_release(r), 0);
    r_lock();
    uint64_t mark = __atomic_load_n(&R.touch[r_lease_of("r")->slot], __ATOMIC_ACQUIRE);
    uint64_t other = __atomic_load_n(&R.touch[r_lease_of("s")->slot], __ATOMIC_ACQUIRE);
    r_unlock();
    cr_assert_neq(mark & SHM_TOUCH_RELEASED, 0, "no released mark in the touch slot");
    cr_assert_eq(other & SHM_TOUCH_RELEASED, 0, "another lease marked released");
    r_restart();
    cr_assert_eq(dlock_lease_release_sync(s), 0);
    int res = r_find(from, WIRE_T_RESUME);
    cr_assert_geq(res, 0);
    int i = r_find(res, WIRE_T_RELEASE);
    cr_assert_geq(i, 0, "no RELEASE after RESUME");
    cr_assert_eq(r_log_at(i).lease_id, rid);
    int acq = r_find(res, WIRE_T_ACQUIRE);
    cr_assert(acq < 0 || acq > i, "an acquire went out before the release");
    r_lock();
    cr_assert_null(r_lease_of("r"));
    cr_assert_null(r_lease_of("s"));
    cr_assert_not_null(r_lease_of("t"));
    r_unlock();
    R_WAIT_UNTIL(&a, r_event(&a, t, DLOCK_STATE_HELD, 0));
    cr_assert_eq(ax.done, 0);
    dlock_client_close(a.c);
}

/* No successor within the lease's validity: JEOPARDY, then LOST
 * (DLOCK_ERESTART) at the deadline, which the page shows. A successor that
 * names the lease after all gets it back with a RELEASE; the handle stays
 * lost. */
LTEST(a_lease_is_lost_at_its_deadline_when_no_agent_comes)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *l = r_must_acquire(&a, "short");
    dlock_lease *m = r_must_acquire(&a, "long");
    uint64_t id = 0;
    r_lock();
    struct r_lease *rl = r_lease_of("short");
    id = rl->id;
    /* The last renewal the dead agent wrote: a deadline a second away (the
     * client sees the link break well before, and records it). */
    shm_slot_write(&shm_slots(R.page)[rl->slot], DLOCK_STATE_HELD, rl->id, rl->fence,
                   boot_ns() + h_scaled_ms(1000) * 1000000LL);
    r_unlock();
    r_crash();
    R_WAIT_UNTIL(&a, r_event(&a, l, DLOCK_STATE_LOST, 0));
    cr_assert_not_null(r_event(&a, l, DLOCK_STATE_JEOPARDY, 0), "no JEOPARDY before the LOST");
    cr_assert_eq(r_event(&a, l, DLOCK_STATE_LOST, 0)->reason, DLOCK_ERESTART);
    cr_assert_not(dlock_lease_valid(l));
    cr_assert(dlock_lease_valid(m));
    cr_assert_null(r_event(&a, m, DLOCK_STATE_LOST, 0));
    int from = r_nlog();
    r_restart();
    cr_assert_eq(dlock_client_ping(a.c), 0);
    int rel = r_find(from, WIRE_T_RELEASE);
    cr_assert_geq(rel, 0, "the lease counted lost was not given back");
    cr_assert_eq(r_log_at(rel).lease_id, id);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);
    cr_assert_eq(dlock_lease_state(m), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
    dlock_client_close(a.c);
}

/* A lease in doubt after a failover when the agent went (its page deadline
 * past by design) is not counted lost while no agent is there: the
 * successor's word decides. */
LTEST(a_lease_in_doubt_waits_for_the_successor)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *l = r_must_acquire(&a, "doubt");
    r_doubt("doubt");
    R_WAIT_UNTIL(&a, r_event(&a, l, DLOCK_STATE_JEOPARDY, 0));
    cr_assert_eq(r_event(&a, l, DLOCK_STATE_JEOPARDY, 0)->reason, DLOCK_EFAILOVER);
    cr_assert_not(dlock_lease_valid(l));
    r_crash();
    R_WAIT_UNTIL(&a, strstr(fd_kind(dlock_client_fd(a.c)), "timerfd"));
    for (int i = 0; i < 5; i++)
        r_turn(&a, 50);
    cr_assert_null(r_event(&a, l, DLOCK_STATE_LOST, 0), "lost while no agent was there");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_JEOPARDY);
    r_lock();
    struct r_lease *rl = r_lease_of("doubt");
    shm_slot_write(&shm_slots(R.page)[rl->slot], DLOCK_STATE_HELD, rl->id, rl->fence,
                   boot_ns() + 60 * 1000000000LL);
    r_unlock();
    r_restart();
    R_WAIT_UNTIL(&a, r_event(&a, l, DLOCK_STATE_HELD, 0));
    cr_assert_null(r_event(&a, l, DLOCK_STATE_LOST, 0));
    cr_assert(dlock_lease_valid(l));
    dlock_client_close(a.c);
}

/* Closing the client while the agent is away: nobody is there to release
 * its leases when the connection closes, so each is marked released in its
 * touch slot. */
LTEST(closing_while_the_agent_is_away_marks_every_lease)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *l = r_must_acquire(&a, "one");
    dlock_lease *m = r_must_acquire(&a, "two");
    r_crash();
    R_WAIT_UNTIL(&a, r_event(&a, m, DLOCK_STATE_JEOPARDY, 0));
    uint32_t slot[2];
    r_lock();
    slot[0] = r_lease_of("one")->slot;
    slot[1] = r_lease_of("two")->slot;
    r_unlock();
    (void)l;
    dlock_client_close(a.c);
    for (int i = 0; i < 2; i++)
        cr_assert_neq(__atomic_load_n(&R.touch[slot[i]], __ATOMIC_ACQUIRE) & SHM_TOUCH_RELEASED, 0,
                      "lease %d not marked released", i);
}

/* An agent that does not know the connection (a stop, not a restart)
 * refuses RESUME: every lease is LOST (DLOCK_ERESTART), the client says
 * HELLO afresh, and what was pending goes out on the new connection. */
LTEST(a_refused_resume_gives_a_fresh_hello)
{
    struct r_cl a;
    r_client(&a);
    dlock_lease *l = r_must_acquire(&a, "old");
    r_take_foreign("x");
    struct r_acq ax;
    r_acquire_async(&a, "x", DLOCK_WAIT_FOREVER, &ax);
    cr_assert_eq(dlock_client_ping(a.c), 0);
    uint64_t old_conn = R.conn_id;
    int from = r_nlog();
    r_crash();
    R.forget = true;
    r_restart();
    R_WAIT_UNTIL(&a, r_event(&a, l, DLOCK_STATE_LOST, 0));
    cr_assert_eq(r_event(&a, l, DLOCK_STATE_LOST, 0)->reason, DLOCK_ERESTART);
    cr_assert_not(dlock_lease_valid(l));
    int res = r_find(from, WIRE_T_RESUME);
    cr_assert_geq(res, 0);
    int hello = r_find(res, WIRE_T_HELLO);
    cr_assert_gt(hello, res, "no fresh HELLO after the refused RESUME");
    cr_assert_eq(r_log_at(hello).version, 2);
    R_WAIT_UNTIL(&a, r_find(hello, WIRE_T_ACQUIRE) > hello);
    cr_assert_str_eq(r_log_at(r_find(hello, WIRE_T_ACQUIRE)).name, "x");
    cr_assert_neq(R.conn_id, old_conn);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
    dlock_lease *n = r_must_acquire(&a, "new");
    cr_assert(dlock_lease_valid(n));
    r_give_foreign("x");
    R_WAIT_UNTIL(&a, ax.done);
    cr_assert_eq(ax.status, 0);
    /* The new connection is resumable too. */
    r_crash();
    r_restart();
    cr_assert_eq(dlock_client_ping(a.c), 0);
    cr_assert_eq(dlock_lease_state(n), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_state(ax.lease), DLOCK_STATE_HELD);
    dlock_client_close(a.c);
}

/* ---- against a real dlockd ----
 *
 * These need the agent's side of restarts (docs/restarts.md: the state
 * directory, the takeover, RESUME). */

/* Waits for cond, pumping every client, and checks on the way that the
 * lease stays valid. */
#define H_WAIT_VALID(lease, cond)                                                                  \
    do {                                                                                           \
        int64_t h_end_ = h_deadline(H_EVENT_MS);                                                   \
        while (!(cond)) {                                                                          \
            cr_assert(dlock_lease_valid(lease), "%s:%d: the lease went invalid", __FILE__,         \
                      __LINE__);                                                                   \
            if (h_now_ms() > h_end_)                                                               \
                cr_assert_fail("%s:%d: not true within %d ms: %s", __FILE__, __LINE__,             \
                               h_scaled_ms(H_EVENT_MS), #cond);                                    \
            h_pump_all(2);                                                                         \
        }                                                                                          \
    } while (0)

/* The n-th event (from 0) of lease at client cl, or NULL. */
static const struct h_event *nth_event(const struct h_cl *cl, const dlock_lease *lease, int n)
{
    for (int i = 0; i < cl->nev; i++)
        if (cl->ev[i].lease == lease && n-- == 0)
            return &cl->ev[i];
    return NULL;
}

/* kill -9 of the agent and a successor on the same config: the lease stays
 * valid throughout, its holder sees JEOPARDY (DLOCK_ERESTART) then HELD,
 * with the same handle, lease id and fence, and the key on Redis is still
 * its own. The client is an event loop (the harness's pump polls
 * dlock_client_fd(), read afresh, and dispatches). */
ITEST(resume, lease_held_across_kill9_and_successor)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "across", 30000);
    uint64_t fence = dlock_lease_fence(l);
    char *tok = h_redis_get(h_key("across"));

    h_agent_kill(0);
    H_WAIT_VALID(l, h_events(a, l, DLOCK_STATE_JEOPARDY) == 1);
    cr_assert_eq(nth_event(a, l, 0)->state, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(nth_event(a, l, 0)->reason, DLOCK_ERESTART);
    cr_assert_eq(a->disconnected, 0);
    cr_assert(strstr(fd_kind(dlock_client_fd(a->c)), "timerfd"), "the descriptor while down: %s",
              fd_kind(dlock_client_fd(a->c)));

    h_agent_start_n(0);
    H_WAIT_VALID(l, h_events(a, l, DLOCK_STATE_HELD) == 1);
    cr_assert_eq(nth_event(a, l, 1)->state, DLOCK_STATE_HELD);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_fence(l), fence);
    cr_assert_str_eq(h_redis_get(h_key("across")), tok);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    /* Still the lease the agent knows: its release deletes the key. */
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_KEY_GONE(h_key("across"));
}

/* A planned restart (dlockd --successor takes over from the running agent,
 * which leaves): an event loop of its own, which polls the descriptor read
 * afresh before each poll and dispatches, follows the client from the old
 * socket to the timer and to the new socket; its lease stays valid, with
 * JEOPARDY (DLOCK_ERESTART) then HELD. */
ITEST(resume, event_loop_follows_a_planned_restart)
{
    h_start(NULL);
    dlock_client *c = NULL;
    cr_assert_eq(h_client_try_open(0, &c), 0);
    struct r_cl cl = {.c = c};
    dlock_client_set_event_cb(c, r_on_event, &cl);
    dlock_lease *l = NULL;
    dlock_acquire_options o = {.ttl_ms = 30000};
    cr_assert_eq(dlock_lease_acquire(c, "planned", &o, &l), 0);
    uint64_t fence = dlock_lease_fence(l);

    h_agent_successor(0);
    bool saw_timer = false;
    int64_t end = h_deadline(H_EVENT_MS);
    while (!r_event(&cl, l, DLOCK_STATE_HELD, 0)) {
        cr_assert(h_now_ms() < end, "no HELD within %d ms", h_scaled_ms(H_EVENT_MS));
        cr_assert(dlock_lease_valid(l), "the lease went invalid");
        int fd = dlock_client_fd(c);
        saw_timer = saw_timer || strstr(fd_kind(fd), "timerfd") != NULL;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            cr_assert_eq(dlock_client_dispatch(c), 0);
    }
    cr_assert(saw_timer, "the descriptor was never the timer");
    const struct r_ev *j = r_event(&cl, l, DLOCK_STATE_JEOPARDY, 0);
    cr_assert_not_null(j, "no JEOPARDY before HELD");
    cr_assert_eq(j->reason, DLOCK_ERESTART);
    cr_assert_lt(j - cl.ev, r_event(&cl, l, DLOCK_STATE_HELD, 0) - cl.ev);
    cr_assert_eq(dlock_lease_fence(l), fence);
    cr_assert(strstr(fd_kind(dlock_client_fd(c)), "socket:"));
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_KEY_GONE(h_key("planned"));
    dlock_client_close(c);
}

/* kill -9 and no successor within the lease's validity: JEOPARDY
 * (DLOCK_ERESTART), then LOST (DLOCK_ERESTART) at the deadline, the key left
 * to its TTL; the client is not disconnected, and takes its connection back
 * from an agent started later (which no longer has the lease). */
ITEST(resume, no_successor_in_time_loses_the_lease_at_its_deadline)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "late", 1000);
    h_agent_kill(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) == 1);
    cr_assert_eq(nth_event(a, l, 0)->state, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(nth_event(a, l, 0)->reason, DLOCK_ERESTART);
    cr_assert_eq(nth_event(a, l, 1)->reason, DLOCK_ERESTART);
    cr_assert_not(dlock_lease_valid(l));
    cr_assert_eq(a->disconnected, 0);
    H_WAIT_UNTIL(H_EVENT_MS, !h_redis_exists(h_key("late")));
    h_agent_start_n(0);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    cr_assert_eq(a->nev, 2, "events after the late start: %d", a->nev);
    dlock_lease *m = h_must_acquire(a, "late", 30000);
    cr_assert(dlock_lease_valid(m));
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
}

/* A client closed after its agent died, before it noticed (nothing
 * dispatched since): its leases are marked released in the touch slots, and
 * the successor releases their keys, although the process lives on (else
 * it would keep them for as long as the process lives). */
ITEST(resume, close_after_an_unseen_crash_releases_through_the_successor)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    h_must_acquire(a, "unseen", 45000);
    h_agent_kill(0);
    h_client_close(a);
    cr_assert_eq(h_redis_exists(h_key("unseen")), 1);
    h_agent_start_n(0);
    H_KEY_GONE(h_key("unseen"));
}

/* A program that feeds the library is not resumed: when its agent dies,
 * its connection ends there (LOST, DLOCK_EDISCONNECTED), and its leases are
 * marked released, so that the successor, which takes the connection of a
 * live process over, releases their keys at once although the client is
 * not closed. The client is no harness client: those are dispatched. */
ITEST(resume, a_fed_client_ends_with_its_agent_and_leaves_nothing_held)
{
    h_start(NULL);
    dlock_client *c = NULL;
    cr_assert_eq(h_client_try_open(0, &c), 0);
    struct r_cl cl = {.c = c};
    dlock_client_set_event_cb(c, r_on_event, &cl);
    dlock_lease *l = NULL;
    dlock_acquire_options o = {.ttl_ms = 45000};
    cr_assert_eq(dlock_lease_acquire(c, "fed", &o, &l), 0);
    cr_assert_eq(dlock_client_feed(c, "", 0), 0); /* from now on, it is fed */
    h_agent_kill(0);
    cr_assert_eq(dlock_client_feed(c, NULL, 0), DLOCK_EDISCONNECTED); /* its reader's EOF */
    const struct r_ev *e = r_event(&cl, l, DLOCK_STATE_LOST, 0);
    cr_assert_not_null(e, "no LOST");
    cr_assert_eq(e->reason, DLOCK_EDISCONNECTED);
    h_agent_start_n(0);
    H_KEY_GONE(h_key("fed"));
    cr_assert_eq(dlock_lease_release(l), DLOCK_EDISCONNECTED);
    dlock_client_close(c);
}

/* A waiter pending at the crash is queued again on the successor, and
 * granted once the holder (another client, resumed too) releases. */
ITEST(resume, pending_waiter_requeued_and_granted)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *held = h_must_acquire(b, "queue", 30000);
    struct h_acq w;
    h_acquire_async(a, "queue", 30000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(a->c), 0);

    h_agent_kill(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(b, held, DLOCK_STATE_JEOPARDY) == 1);
    h_agent_start_n(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(b, held, DLOCK_STATE_HELD) == 1);
    cr_assert_eq(dlock_client_ping(a->c), 0); /* a has resumed and asked again */
    cr_assert_eq(w.done, 0, "the waiter completed while the name was held: %s",
                 dlock_strerror(w.status));
    cr_assert_eq(dlock_lease_release(held), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "the waiter: %s", dlock_strerror(w.status));
    cr_assert(dlock_lease_valid(w.lease));
}

/* A lease released while no agent runs: marked in its touch slot, its
 * RELEASE sent after the resume; another client gets the name from the
 * successor well before the key's TTL. */
ITEST(resume, release_while_down_frees_the_name)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "gone-while-down", 45000);
    h_agent_kill(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_JEOPARDY) == 1);
    cr_assert_eq(dlock_lease_release(l), 0);
    h_agent_start_n(0);
    struct h_cl *b = h_client();
    dlock_lease *m = NULL;
    int rc = h_acquire(b, "gone-while-down", 30000, H_EVENT_MS, &m);
    cr_assert_eq(rc, 0, "acquire after the release while down: %s", dlock_strerror(rc));
    cr_assert_eq(dlock_client_ping(a->c), 0);
}

/* An agent stopped (SIGTERM: a stop, not a restart) and started again
 * without state refuses RESUME: every lease of the client is LOST, and the
 * client works again on a fresh connection. */
ITEST(resume, refused_after_stop_and_start_without_state)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l1 = h_must_acquire(a, "stop-1", 30000);
    dlock_lease *l2 = h_must_acquire(a, "stop-2", 30000);
    cr_assert_eq(h_agent_stop(0), 0);
    h_agent_config(0, "state_dir =", NULL);
    h_agent_start_n(0);
    H_WAIT_UNTIL(H_EVENT_MS,
                 h_events(a, l1, DLOCK_STATE_LOST) == 1 && h_events(a, l2, DLOCK_STATE_LOST) == 1);
    cr_assert_not(dlock_lease_valid(l1));
    cr_assert_not(dlock_lease_valid(l2));
    cr_assert_eq(a->disconnected, 0);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    dlock_lease *n = h_must_acquire(a, "stop-1", 30000);
    cr_assert(dlock_lease_valid(n));
    cr_assert_eq(dlock_lease_release(l1), DLOCK_ELOST);
}

/* kill -9 and a successor without state: RESUME refused, the leases LOST
 * (DLOCK_ERESTART), a fresh HELLO. */
ITEST(resume, refused_after_kill9_and_start_without_state)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "crash-fresh", 3000);
    h_agent_kill(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_JEOPARDY) == 1);
    h_agent_config(0, "state_dir =", NULL);
    h_agent_start_n(0);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) == 1);
    cr_assert_eq(nth_event(a, l, 1)->reason, DLOCK_ERESTART);
    cr_assert_eq(a->disconnected, 0);
    /* The crashed agent's key goes by its TTL; then the name is free. */
    dlock_lease *n = NULL;
    int rc = h_acquire(a, "crash-fresh", 3000, H_EVENT_MS, &n);
    cr_assert_eq(rc, 0, "acquire on the fresh connection: %s", dlock_strerror(rc));
}
