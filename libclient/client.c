/* SPDX-License-Identifier: BSD-3-Clause */
/* client.c -- libdlock: a connection to dlockd, its requests in flight and its leases.
 *
 * Everything is single-threaded and driven by the caller: frames are read only
 * inside dlock_client_dispatch() or a blocking call, and every callback runs
 * from there. A callback may release leases or start acquires on the same
 * client (even blocking ones), but must not call dlock_client_close() on it:
 * the frame being handled still refers to the client.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "idmap.h"
#include "shm.h"
#include "wire.h"

#define DEFAULT_SOCKET     "/run/dlock/dlock.sock"
#define HELLO_TIMEOUT_MS   5000
#define WRITE_TIMEOUT_MS   5000
#define PING_TIMEOUT_MS    5000
#define RELEASE_TIMEOUT_MS 10000
#define ACQUIRE_SLACK_MS   10000 /* beyond wait_ms before a blocking acquire gives up */
#define FRAME_MAX          (WIRE_HDR_LEN + WIRE_MAX_BODY)
#define READ_CHUNK         16384
#define AGENT_MSG_MAX      256 /* an agent's error message kept, with its NUL */

#define container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

enum req_kind { REQ_ACQUIRE, REQ_RELEASE, REQ_PING };

/* Where a blocking call waits for its reply; it lives on the caller's stack. */
struct waiter {
    bool done;
    int status;
    dlock_lease *lease; /* acquire: the new lease */
};

/* A request sent and not yet answered. */
struct pending {
    LIST_ENTRY(pending) link;
    struct idnode node; /* keyed by id */
    uint32_t id;
    enum req_kind kind;
    dlock_acquire_cb cb; /* acquire; NULL once abandoned */
    void *arg;
    struct waiter *waiter; /* release, ping; NULL when nobody waits */
    bool abandoned;        /* the caller gave up: undo a late grant */
    bool cancelled;        /* acquire: CANCEL sent for it */
    uint8_t lock_kind;     /* acquire: the dlock_kind asked for */
    char name[];           /* acquire: the lock name, NUL-terminated */
};

struct dlock_lease {
    LIST_ENTRY(dlock_lease) link;
    struct idnode node; /* keyed by id */
    dlock_client *client;
    uint64_t id;
    uint64_t fence;
    const struct shm_slot *slot; /* in the client's lease page */
    uint64_t *touch;             /* in the client's touch page */
    uint8_t gone;                /* reported LOST: read atomically by checks from any thread */
    uint32_t ttl_ms;
    dlock_state state;
    int lost_reason;
    /* Re-entrant grants of this lease and the first, not yet released: the
     * handle is freed with the last. */
    uint32_t holds;
    uint8_t kind;   /* dlock_kind */
    bool releasing; /* inside dlock_lease_release_sync(): no second release, and
                       no events while it gives up the last hold (lease_quiet()) */
    /* Of the holds, those of lease sets (one per set): only the set
     * releases them. */
    uint32_t set_holds;
    char name[];
};

/* A lease set: one lease per name, all taken or none (dlock_lease_set_acquire()). */
struct dlock_lease_set {
    LIST_ENTRY(dlock_lease_set) link;
    dlock_client *client;
    bool releasing; /* inside dlock_lease_set_release_sync() */
    size_t n;
    dlock_lease *member[]; /* in the caller's order */
};

struct dlock_client {
    int fd;
    uint32_t next_id;
    int err;       /* 0, or why the connection is broken */
    bool notified; /* leases and pending requests were told about err */
    uint32_t max_name_len;
    uint32_t max_leases;
    uint32_t default_ttl_ms;
    dlock_event_cb event_cb;
    void *event_arg;
    /* The agent's message with the last error it answered a request of ours
     * with, and that error; 0 once another request starts. */
    int agent_err;
    char agent_msg[AGENT_MSG_MAX];
    LIST_HEAD(, dlock_lease) leases;
    LIST_HEAD(, dlock_lease_set) sets;
    LIST_HEAD(, pending) pending;
    struct idmap leases_by_id, pending_by_id;
    struct wire_buf out;
    struct wire_buf in; /* bytes read; frames before in_off are handled */
    size_t in_off;
    int rx_fds[2];    /* lease-page descriptors received with HELLO_OK, else -1 */
    const void *page; /* the lease page, read-only */
    uint64_t *touch;  /* the touch page */
    uint32_t nslots;
};

/* The one clock of dlock: CLOCK_BOOTTIME, which keeps counting while the
 * host is suspended, as the Redis TTL of a lease does. Deadlines in the
 * lease page, timeouts and touch times are all on it. */
static int64_t boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ms(void)
{
    return boot_ns() / 1000000;
}

/* Milliseconds left until deadline (-1 = none) as a poll() timeout; 0 once passed. */
static int poll_timeout(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t left = deadline - now_ms();
    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/* A deadline timeout_ms from now; -1 (none) for a negative or absurdly long timeout. */
static int64_t deadline_after(int64_t timeout_ms)
{
    if (timeout_ms < 0 || timeout_ms > INT64_MAX / 4)
        return -1;
    return now_ms() + timeout_ms;
}

/* ---- pending requests ---- */

static struct pending *pending_find(dlock_client *c, uint32_t id)
{
    struct idnode *n = idmap_get(&c->pending_by_id, id);
    return n ? container_of(n, struct pending, node) : NULL;
}

static int pending_link(dlock_client *c, struct pending *p)
{
    p->node.id = p->id;
    if (idmap_put(&c->pending_by_id, &p->node) != 0)
        return DLOCK_ENOMEM;
    LIST_INSERT_HEAD(&c->pending, p, link);
    return 0;
}

static void pending_unlink(dlock_client *c, struct pending *p)
{
    idmap_del(&c->pending_by_id, &p->node);
    LIST_REMOVE(p, link);
}

/* A fresh request id: never 0, never one still in flight. */
static uint32_t new_id(dlock_client *c)
{
    for (;;) {
        uint32_t id = c->next_id++;
        if (id != 0 && !pending_find(c, id))
            return id;
    }
}

static struct pending *pending_new(dlock_client *c, enum req_kind kind, const char *name,
                                   size_t name_len)
{
    struct pending *p = calloc(1, sizeof(*p) + name_len + 1);
    if (!p)
        return NULL;
    p->id = new_id(c);
    p->kind = kind;
    if (name_len)
        memcpy(p->name, name, name_len);
    return p;
}

/* The caller of a blocking request gave up on it: its reply will be dropped,
 * and a late grant given back at once. */
static void pending_abandon(dlock_client *c, uint32_t id)
{
    struct pending *p = pending_find(c, id);
    if (!p)
        return;
    p->cb = NULL;
    p->waiter = NULL;
    p->abandoned = true;
}

/* Delivers the outcome of an unlinked request and frees it. */
static void pending_complete(dlock_client *c, struct pending *p, int status, dlock_lease *lease)
{
    dlock_acquire_cb cb = p->cb;
    void *arg = p->arg;
    if (p->waiter) {
        p->waiter->done = true;
        p->waiter->status = status;
        p->waiter->lease = lease;
    }
    free(p);
    if (cb)
        cb(c, status, status == 0 ? lease : NULL, arg);
}

/* ---- leases ---- */

static dlock_lease *lease_find(dlock_client *c, uint64_t id)
{
    struct idnode *n = idmap_get(&c->leases_by_id, id);
    return n ? container_of(n, dlock_lease, node) : NULL;
}

static dlock_lease *lease_new(dlock_client *c, const struct pending *p,
                              const struct wire_granted *g)
{
    const char *name = p->name;
    size_t len = strlen(name);
    dlock_lease *l = calloc(1, sizeof(*l) + len + 1);
    if (!l)
        return NULL;
    memcpy(l->name, name, len);
    l->client = c;
    l->id = g->lease_id;
    l->fence = g->fence;
    l->slot = &shm_slots((void *)c->page)[g->slot];
    l->touch = &c->touch[g->slot];
    l->ttl_ms = g->ttl_ms;
    l->state = DLOCK_STATE_HELD;
    l->holds = 1;
    l->kind = p->lock_kind;
    l->node.id = l->id;
    if (idmap_put(&c->leases_by_id, &l->node) != 0) {
        free(l);
        return NULL;
    }
    LIST_INSERT_HEAD(&c->leases, l, link);
    return l;
}

static void lease_free(dlock_lease *l)
{
    dlock_client *c = l->client;
    idmap_del(&c->leases_by_id, &l->node);
    LIST_REMOVE(l, link);
    free(l);
}

static bool state_is_final(dlock_state s)
{
    return s == DLOCK_STATE_LOST || s == DLOCK_STATE_RELEASED;
}

/* While dlock_lease_release_sync() gives up a lease's last hold, its events
 * are not delivered: the release's result tells the caller. A lease that
 * keeps other holds goes on being reported. */
static bool lease_quiet(const dlock_lease *l)
{
    return l->releasing && l->holds <= 1;
}

/* ---- connection failure ---- */

/* Marks the connection broken. Nobody is told here (this may run inside a
 * non-blocking call); notify_broken() does that from a dispatch or blocking
 * call. shutdown() makes the fd readable, so an event loop wakes up for it,
 * and makes the agent drop every lease of ours. */
static void client_fail(dlock_client *c, int code)
{
    if (c->err)
        return;
    c->err = code;
    c->in.len = c->in_off = 0;
    shutdown(c->fd, SHUT_RDWR);
}

/* Delivers a LOST event to every lease still held and completes every request
 * in flight with the error, once. Callbacks may release leases meanwhile, so
 * each pass starts again from the head of the list. */
static void notify_broken(dlock_client *c)
{
    if (!c->err || c->notified)
        return;
    c->notified = true;
    /* The leases to tell wait on a list of their own; each goes back to the
     * client's list before its callback, which may release it or others
     * (LIST_REMOVE works on whichever list a lease is on). */
    LIST_HEAD(, dlock_lease) tell = LIST_HEAD_INITIALIZER(tell);
    dlock_lease *l, *next;
    for (l = LIST_FIRST(&c->leases); l; l = next) {
        next = LIST_NEXT(l, link);
        if (state_is_final(l->state))
            continue;
        l->state = DLOCK_STATE_LOST;
        __atomic_store_n(&l->gone, 1, __ATOMIC_RELEASE);
        l->lost_reason = c->err;
        if (!lease_quiet(l)) {
            LIST_REMOVE(l, link);
            LIST_INSERT_HEAD(&tell, l, link);
        }
    }
    while ((l = LIST_FIRST(&tell)) != NULL) {
        LIST_REMOVE(l, link);
        LIST_INSERT_HEAD(&c->leases, l, link);
        if (c->event_cb)
            c->event_cb(c, l, DLOCK_STATE_LOST, c->err, c->event_arg);
    }
    struct pending *p;
    while ((p = LIST_FIRST(&c->pending)) != NULL) {
        pending_unlink(c, p);
        pending_complete(c, p, c->err, NULL);
    }
}

/* ---- reading ---- */

/* recv() that also takes the descriptors the agent attaches to HELLO_OK;
 * any others (there should be none) are closed at once. */
static ssize_t recv_with_fds(dlock_client *c, void *buf, size_t len)
{
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&msg) : NULL; cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        int fds[2] = {-1, -1};
        size_t nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        memcpy(fds, CMSG_DATA(cm), (nfds > 2 ? 2 : nfds) * sizeof(int));
        for (size_t i = 0; i < nfds && i < 2; i++) {
            if (c->rx_fds[i] < 0 && nfds == 2 && !c->page)
                c->rx_fds[i] = fds[i];
            else
                close(fds[i]);
        }
    }
    return n;
}

/* Room for need more bytes at the end of the input buffer, the frames
 * already handled dropped first. 0, or -1 without memory. */
static int in_room(dlock_client *c, size_t need)
{
    if (c->in_off) {
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    if (c->in.cap - c->in.len < need) {
        size_t cap = c->in.cap * 2 > c->in.len + need ? c->in.cap * 2 : c->in.len + need;
        uint8_t *p = realloc(c->in.data, cap);
        if (!p)
            return -1;
        c->in.data = p;
        c->in.cap = cap;
    }
    return 0;
}

/* Reads what the socket holds into the input buffer, which grows as needed
 * (frames are handled later). Returns the bytes read, 0 when the socket would
 * block, -1 at end of stream or on an error. */
static ssize_t read_some(dlock_client *c)
{
    if (in_room(c, READ_CHUNK) != 0)
        return -1;
    for (;;) {
        ssize_t n = recv_with_fds(c, c->in.data + c->in.len, c->in.cap - c->in.len);
        if (n > 0) {
            c->in.len += (size_t)n;
            return n;
        }
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
}

/* ---- writing ---- */

/* Writes c->out whole: the frame just encoded, behind any a release left
 * queued (flush_nowait()). Frames are tiny, so waiting a little for POLLOUT
 * is simpler than an output queue for requests that wait for their answer. While waiting, whatever
 * the agent sends is read (and handled later): an agent whose replies we did
 * not read stops reading our requests. An agent that reads nothing for
 * WRITE_TIMEOUT_MS counts as gone. */
static int flush_out(dlock_client *c)
{
    int64_t deadline = deadline_after(WRITE_TIMEOUT_MS);
    size_t off = 0;
    int rc = 0;
    while (off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + off, c->out.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && poll_timeout(deadline) > 0) {
            struct pollfd pfd = {.fd = c->fd, .events = POLLOUT | POLLIN};
            int r = poll(&pfd, 1, poll_timeout(deadline));
            if (r > 0 && (pfd.revents & POLLIN) && read_some(c) < 0)
                r = -1, errno = EPIPE;
            if (r >= 0 || errno == EINTR)
                continue;
        }
        /* A partial frame may be on the wire: the stream cannot be trusted. */
        rc = DLOCK_EDISCONNECTED;
        client_fail(c, rc);
        break;
    }
    c->out.len = 0;
    return rc;
}

/* Writes what c->out holds without waiting: what the socket does not take
 * stays there, in order, ahead of any later frame, and goes out with the next
 * call on the client (flush_out() or dispatch). Returns 0, or
 * DLOCK_EDISCONNECTED when the agent is gone. */
static int flush_nowait(dlock_client *c)
{
    size_t off = 0;
    int rc = 0;
    while (off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + off, c->out.len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        rc = DLOCK_EDISCONNECTED;
        client_fail(c, rc);
        c->out.len = off = 0;
        break;
    }
    if (off) {
        memmove(c->out.data, c->out.data + off, c->out.len - off);
        c->out.len -= off;
    }
    return rc;
}

/* Writes the frame just encoded for p (rc is the encoder's result; frames
 * queued before it go out first) and, once it is out, files p among the
 * requests in flight; frees p on failure. An encoder that failed added
 * nothing to c->out. */
static int pending_send(dlock_client *c, struct pending *p, int rc)
{
    if (rc == 0)
        rc = flush_out(c);
    if (rc != 0) {
        free(p);
        return rc;
    }
    rc = pending_link(c, p);
    if (rc != 0)
        free(p);
    return rc;
}

/* Sends a RELEASE or PING whose reply goes to w (NULL: nobody waits). */
static int send_simple(dlock_client *c, enum req_kind kind, uint64_t lease_id, struct waiter *w,
                       uint32_t *idp)
{
    if (c->err)
        return DLOCK_EDISCONNECTED;
    if (w)
        c->agent_err = 0; /* a caller's request: older messages are not its */
    struct pending *p = pending_new(c, kind, NULL, 0);
    if (!p)
        return DLOCK_ENOMEM;
    p->waiter = w;
    p->abandoned = (w == NULL);
    *idp = p->id;
    struct wire_release m = {.lease_id = lease_id};
    if (kind == REQ_RELEASE)
        return pending_send(c, p, wire_put_release(&c->out, p->id, &m));
    return pending_send(c, p, wire_put_empty(&c->out, p->id, WIRE_T_PING));
}

/* Queues RELEASE and writes what the socket takes, without waiting for
 * anything. Its answer is dropped when it comes: the request is filed as
 * abandoned, so its id is not reused while it is in flight. */
static int release_nowait(dlock_client *c, uint64_t lease_id)
{
    if (c->err)
        return DLOCK_EDISCONNECTED;
    struct pending *p = pending_new(c, REQ_RELEASE, NULL, 0);
    /* Without memory for the record, an id of its own still keeps the answer
     * from being taken for another request's: the agent answers a RELEASE
     * as soon as it reads it, long before the ids come round again. */
    uint32_t id = p ? p->id : new_id(c);
    struct wire_release m = {.lease_id = lease_id};
    int rc = wire_put_release(&c->out, id, &m);
    if (rc != 0) {
        free(p);
        return rc;
    }
    if (p) {
        p->abandoned = true;
        if (pending_link(c, p) != 0)
            free(p);
    }
    return flush_nowait(c);
}

/* Gives a lease back without waiting: a grant nobody wants any more. */
static void release_unwanted(dlock_client *c, uint64_t lease_id)
{
    (void)release_nowait(c, lease_id);
}

/* ---- handling frames ---- */

/* A GRANTED for a lease this client has a handle of: the agent re-entered
 * it for a re-entrant acquire, so the handle takes one more hold (same
 * lease, same slot). Anything else under a known lease id breaks the
 * protocol. */
static int reentered(dlock_client *c, dlock_lease *l, const struct pending *p,
                     const struct wire_granted *g)
{
    if (state_is_final(l->state) || l->slot != &shm_slots((void *)c->page)[g->slot] ||
        strcmp(l->name, p->name) != 0 || l->holds == UINT32_MAX)
        return DLOCK_EPROTO;
    l->holds++;
    l->ttl_ms = g->ttl_ms;
    return 0;
}

static int on_granted(dlock_client *c, const struct wire_hdr *h, const uint8_t *body)
{
    struct wire_granted g;
    if (wire_get_granted(body, h->len, &g) != 0 || g.slot >= c->nslots)
        return DLOCK_EPROTO;
    struct pending *p = pending_find(c, h->id);
    if (p && p->kind != REQ_ACQUIRE)
        return DLOCK_EPROTO;
    if (!p || p->abandoned) {
        /* A lease nobody waits for would stay held until we disconnect. */
        if (p) {
            pending_unlink(c, p);
            free(p);
        }
        release_unwanted(c, g.lease_id);
        return 0;
    }
    dlock_lease *l = lease_find(c, g.lease_id);
    if (l) {
        int rc = reentered(c, l, p, &g);
        if (rc != 0)
            return rc; /* p stays in flight: the broken connection completes it */
        pending_unlink(c, p);
        pending_complete(c, p, 0, l);
        return 0;
    }
    pending_unlink(c, p);
    l = lease_new(c, p, &g);
    if (!l)
        release_unwanted(c, g.lease_id);
    pending_complete(c, p, l ? 0 : DLOCK_ENOMEM, l);
    return 0;
}

static int on_ok(dlock_client *c, const struct wire_hdr *h)
{
    if (h->len != 0)
        return DLOCK_EPROTO;
    struct pending *p = pending_find(c, h->id);
    if (!p)
        return 0; /* nobody asked; harmless */
    if (p->kind == REQ_ACQUIRE)
        return DLOCK_EPROTO;
    pending_unlink(c, p);
    pending_complete(c, p, 0, NULL);
    return 0;
}

/* Keeps the agent's message for dlock_client_strerror(), truncated, with
 * anything unprintable replaced: it may end up on a terminal. */
static void keep_agent_msg(dlock_client *c, const struct wire_error *e)
{
    size_t n = e->msg_len < AGENT_MSG_MAX - 1 ? e->msg_len : AGENT_MSG_MAX - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)e->msg[i];
        c->agent_msg[i] = ch < 0x20 || ch >= 0x7f ? '?' : (char)ch;
    }
    c->agent_msg[n] = '\0';
    c->agent_err = n ? e->code : 0;
}

static int on_error(dlock_client *c, const struct wire_hdr *h, const uint8_t *body)
{
    struct wire_error e;
    if (wire_get_error(body, h->len, &e) != 0)
        return DLOCK_EPROTO;
    /* An error with id 0 (or an unknown id) answers no request of ours; the
     * agent closes the connection after it, and EOF tells us that. */
    struct pending *p = pending_find(c, h->id);
    if (!p)
        return 0;
    pending_unlink(c, p);
    if (!p->abandoned && e.code < 0)
        keep_agent_msg(c, &e);
    pending_complete(c, p, e.code < 0 ? e.code : DLOCK_EPROTO, NULL);
    return 0;
}

static int on_event(dlock_client *c, const struct wire_hdr *h, const uint8_t *body)
{
    struct wire_event ev;
    if (h->id != 0 || wire_get_event(body, h->len, &ev) != 0)
        return DLOCK_EPROTO;
    if (ev.state < DLOCK_STATE_HELD || ev.state > DLOCK_STATE_RELEASED)
        return DLOCK_EPROTO;
    dlock_lease *l = lease_find(c, ev.lease_id);
    if (!l || state_is_final(l->state))
        return 0; /* released meanwhile, or already over: a lease never comes back */
    l->state = (dlock_state)ev.state;
    if (ev.state == DLOCK_STATE_LOST) {
        __atomic_store_n(&l->gone, 1, __ATOMIC_RELEASE);
        l->lost_reason = ev.reason ? ev.reason : DLOCK_ELOST;
    }
    if (!lease_quiet(l) && c->event_cb)
        c->event_cb(c, l, l->state, ev.reason, c->event_arg);
    return 0;
}

static int handle_frame(dlock_client *c, const struct wire_hdr *h, const uint8_t *body)
{
    switch (h->type) {
    case WIRE_T_GRANTED:
        return on_granted(c, h, body);
    case WIRE_T_OK:
        return on_ok(c, h);
    case WIRE_T_ERROR:
        return on_error(c, h, body);
    case WIRE_T_EVENT:
        return on_event(c, h, body);
    default:
        return DLOCK_EPROTO;
    }
}

/* Handles every whole frame in the input buffer. Each frame is copied out and
 * marked handled before it is handled, so a callback that makes a blocking
 * call (which reads and handles later frames itself) finds the buffer
 * consistent. */
static void process_input(dlock_client *c)
{
    uint8_t frame[FRAME_MAX];
    while (!c->err) {
        struct wire_hdr h;
        const uint8_t *at = c->in.data + c->in_off;
        size_t avail = c->in.len - c->in_off;
        int r = wire_hdr_decode(at, avail, WIRE_MAX_BODY, &h);
        if (r == 0)
            return;
        if (r < 0) {
            client_fail(c, DLOCK_EPROTO);
            return;
        }
        size_t len = WIRE_HDR_LEN + (size_t)h.len;
        if (avail < len)
            return;
        memcpy(frame, at, len);
        c->in_off += len;
        if (handle_frame(c, &h, frame + WIRE_HDR_LEN) != 0)
            client_fail(c, DLOCK_EPROTO);
    }
}

/* Reads until the socket would block, handling frames as they complete. */
static void read_input(dlock_client *c)
{
    process_input(c);
    while (!c->err) {
        ssize_t n = read_some(c);
        if (n == 0)
            return;
        if (n < 0)
            client_fail(c, DLOCK_EDISCONNECTED);
        else
            process_input(c);
    }
}

/* Handles frames until w is done or timeout_ms (-1 = forever) has passed.
 * Returns 0 (w->status holds the outcome), DLOCK_ENOANSWER (the agent did
 * not answer in time: not a lock that stayed taken) or DLOCK_ENOMEM; the
 * caller abandons its request on an error. */
static int wait_for(dlock_client *c, struct waiter *w, int64_t timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    for (;;) {
        process_input(c);
        notify_broken(c); /* completes w too when the connection broke */
        if (w->done)
            return 0;
        int ms = poll_timeout(deadline);
        if (ms == 0)
            return DLOCK_ENOANSWER;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno != EINTR)
            return DLOCK_ENOMEM;
        if (r > 0)
            read_input(c);
    }
}

/* ---- opening ---- */

static int connect_socket(const char *path, int *fdp)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (path[0] == '\0' || strlen(path) >= sizeof(sa.sun_path))
        return DLOCK_EINVAL;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno == ENOMEM || errno == ENOBUFS ? DLOCK_ENOMEM : DLOCK_ECONNECT;
    *fdp = fd;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (errno != EINTR)
            return DLOCK_ECONNECT;
        /* Interrupted: the connect goes on; wait for it and ask how it went. */
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        while (poll(&pfd, 1, HELLO_TIMEOUT_MS) < 0 && errno == EINTR)
            ;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0 ||
            !(pfd.revents & POLLOUT))
            return DLOCK_ECONNECT;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return DLOCK_ECONNECT;
    return 0;
}

/* Reads until the input buffer starts with one whole frame (header in *h). */
static int read_first_frame(dlock_client *c, struct wire_hdr *h, int64_t deadline)
{
    for (;;) {
        int r = wire_hdr_decode(c->in.data, c->in.len, WIRE_MAX_BODY, h);
        if (r < 0)
            return DLOCK_EPROTO;
        if (r > 0 && c->in.len >= WIRE_HDR_LEN + (size_t)h->len)
            return 0;
        ssize_t n = read_some(c);
        if (n > 0)
            continue;
        if (n < 0)
            return DLOCK_ECONNECT; /* the agent hung up on us */
        int ms = poll_timeout(deadline);
        if (ms == 0)
            return DLOCK_ECONNECT; /* no answer: not a working agent */
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return DLOCK_ECONNECT;
    }
}

/* Maps the lease page (read-only) and the touch page received with HELLO_OK,
 * after checking that they are what the agent says they are. */
static int map_pages(dlock_client *c)
{
    struct stat st[2];
    if (c->rx_fds[0] < 0 || c->rx_fds[1] < 0 || fstat(c->rx_fds[0], &st[0]) != 0 ||
        fstat(c->rx_fds[1], &st[1]) != 0 || (size_t)st[0].st_size < SHM_HDR_SIZE)
        return DLOCK_EPROTO;
    void *page = mmap(NULL, (size_t)st[0].st_size, PROT_READ, MAP_SHARED, c->rx_fds[0], 0);
    if (page == MAP_FAILED)
        return DLOCK_ENOMEM;
    const struct shm_hdr *hdr = page;
    uint32_t n = hdr->nslots;
    if (hdr->magic != SHM_MAGIC || hdr->version != SHM_VERSION ||
        hdr->slot_size != sizeof(struct shm_slot) || (size_t)st[0].st_size != shm_page_size(n) ||
        (size_t)st[1].st_size != shm_touch_size(n) || n == 0) {
        munmap(page, (size_t)st[0].st_size);
        return DLOCK_EPROTO;
    }
    void *touch =
        mmap(NULL, shm_touch_size(n), PROT_READ | PROT_WRITE, MAP_SHARED, c->rx_fds[1], 0);
    if (touch == MAP_FAILED) {
        munmap(page, shm_page_size(n));
        return DLOCK_ENOMEM;
    }
    c->page = page;
    c->touch = touch;
    c->nslots = n;
    for (int i = 0; i < 2; i++) {
        close(c->rx_fds[i]);
        c->rx_fds[i] = -1;
    }
    return 0;
}

/* Sends HELLO and takes the agent's limits from HELLO_OK. */
static int handshake(dlock_client *c)
{
    struct wire_hello hello = {.magic = WIRE_MAGIC, .version = WIRE_VERSION_MIN};
    int rc = wire_put_hello(&c->out, new_id(c), &hello);
    if (rc != 0)
        return rc;
    int64_t sent = boot_ns();
    if (flush_out(c) != 0)
        return DLOCK_ECONNECT;
    struct wire_hdr h;
    rc = read_first_frame(c, &h, deadline_after(HELLO_TIMEOUT_MS));
    int64_t received = boot_ns();
    if (rc != 0)
        return rc;
    const uint8_t *body = c->in.data + WIRE_HDR_LEN;
    if (h.type == WIRE_T_ERROR) {
        struct wire_error e;
        if (wire_get_error(body, h.len, &e) != 0 || e.code >= 0)
            return DLOCK_EPROTO;
        return e.code;
    }
    struct wire_hello_ok ok;
    if (h.type != WIRE_T_HELLO_OK || wire_get_hello_ok(body, h.len, &ok) != 0)
        return DLOCK_EPROTO;
    if (ok.version != hello.version)
        return DLOCK_EVERSION;
    /* The lease page holds deadlines on the agent's CLOCK_BOOTTIME: if its
     * reading does not fall between our own two, our clock is another one
     * (a time namespace with a boottime offset) and every validity check
     * would be wrong. */
    if ((int64_t)ok.clock_ns < sent || (int64_t)ok.clock_ns > received)
        return DLOCK_ECLOCK;
    /* Our encoder cannot send more than WIRE_MAX_NAME whatever the agent allows. */
    c->max_name_len = ok.max_name_len;
    if (c->max_name_len == 0 || c->max_name_len > WIRE_MAX_NAME)
        c->max_name_len = WIRE_MAX_NAME;
    c->max_leases = ok.max_leases;
    c->default_ttl_ms = ok.default_ttl_ms;
    c->in_off = WIRE_HDR_LEN + (size_t)h.len;
    return map_pages(c);
}

/* Frees the client and everything it owns, without calling anybody. */
static void client_free(dlock_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    for (int i = 0; i < 2; i++)
        if (c->rx_fds[i] >= 0)
            close(c->rx_fds[i]);
    if (c->page)
        munmap((void *)c->page, shm_page_size(c->nslots));
    if (c->touch)
        munmap(c->touch, shm_touch_size(c->nslots));
    dlock_lease *l;
    while ((l = LIST_FIRST(&c->leases)) != NULL) {
        LIST_REMOVE(l, link);
        free(l);
    }
    dlock_lease_set *set;
    while ((set = LIST_FIRST(&c->sets)) != NULL) {
        LIST_REMOVE(set, link);
        free(set);
    }
    struct pending *p;
    while ((p = LIST_FIRST(&c->pending)) != NULL) {
        LIST_REMOVE(p, link);
        free(p);
    }
    idmap_free(&c->leases_by_id);
    idmap_free(&c->pending_by_id);
    wire_buf_free(&c->out);
    wire_buf_free(&c->in);
    free(c);
}

int dlock_client_open(dlock_client **out, const char *socket_path)
{
    if (!out)
        return DLOCK_EINVAL;
    if (!socket_path) {
        socket_path = getenv("DLOCK_SOCKET");
        if (!socket_path || !socket_path[0])
            socket_path = DEFAULT_SOCKET;
    }
    dlock_client *c = calloc(1, sizeof(*c));
    if (!c)
        return DLOCK_ENOMEM;
    c->fd = -1;
    c->rx_fds[0] = c->rx_fds[1] = -1;
    c->next_id = 1;
    int rc = connect_socket(socket_path, &c->fd);
    if (rc == 0)
        rc = handshake(c);
    if (rc != 0) {
        client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Callbacks are not allowed to call this on their own client (see the top of
 * this file). */
void dlock_client_close(dlock_client *client)
{
    if (client)
        client_free(client);
}

int dlock_client_fd(const dlock_client *client)
{
    return client ? client->fd : DLOCK_EINVAL;
}

void dlock_client_set_event_cb(dlock_client *client, dlock_event_cb cb, void *arg)
{
    if (!client)
        return;
    client->event_cb = cb;
    client->event_arg = arg;
}

int dlock_client_dispatch(dlock_client *client)
{
    if (!client)
        return DLOCK_EINVAL;
    if (client->out.len && !client->err)
        (void)flush_nowait(client); /* releases left queued by a full socket */
    read_input(client);
    notify_broken(client);
    return client->err ? DLOCK_EDISCONNECTED : 0;
}

int dlock_client_feed(dlock_client *client, const void *data, size_t len)
{
    if (!client || (!data && len))
        return DLOCK_EINVAL;
    if (client->out.len && !client->err)
        (void)flush_nowait(client);
    if (!data) {
        process_input(client); /* what came before the end */
        if (!client->err)
            client_fail(client, DLOCK_EDISCONNECTED);
    } else if (!client->err) {
        if (in_room(client, len) != 0)
            return DLOCK_ENOMEM; /* nothing taken: the caller may feed it again */
        memcpy(client->in.data + client->in.len, data, len);
        client->in.len += len;
        process_input(client);
    }
    notify_broken(client);
    return client->err ? DLOCK_EDISCONNECTED : 0;
}

int dlock_client_ping(dlock_client *client)
{
    if (!client)
        return DLOCK_EINVAL;
    struct waiter w = {0};
    uint32_t id = 0;
    int rc = send_simple(client, REQ_PING, 0, &w, &id);
    if (rc == 0)
        rc = wait_for(client, &w, PING_TIMEOUT_MS);
    if (rc != 0) {
        pending_abandon(client, id);
        return rc;
    }
    return w.status;
}

/* ---- acquire ---- */

/* What the library itself refuses in a lock spec (the agent judges the rest,
 * such as a kind its mode does not support). */
static bool spec_ok(const dlock_lock_spec *spec)
{
    if (spec->kind > DLOCK_KIND_SEMAPHORE)
        return false;
    return (spec->kind == DLOCK_KIND_SEMAPHORE) == (spec->permits != 0);
}

static int check_acquire(const dlock_client *c, const char *name, const dlock_acquire_options *opts,
                         const dlock_lock_spec *spec)
{
    if (!c || !name || (opts->flags & ~DLOCK_ACQUIRE_REENTRANT) != 0 ||
        opts->wait_ms < DLOCK_WAIT_FOREVER || !spec_ok(spec))
        return DLOCK_EINVAL;
    if (c->err)
        return DLOCK_EDISCONNECTED;
    size_t len = strlen(name);
    if (len == 0)
        return DLOCK_EBADNAME;
    if (len > c->max_name_len)
        return DLOCK_ENAMETOOLONG;
    return 0;
}

/* Encodes the acquire: a plain ACQUIRE when it is exclusive, not
 * re-entrant and owned by the client, which agents of every version take;
 * else ACQUIRE_EX. */
static int put_acquire(dlock_client *c, uint32_t id, const char *name,
                       const dlock_acquire_options *opts, const dlock_lock_spec *spec)
{
    size_t len = strlen(name);
    struct wire_acquire m = {.ttl_ms = opts->ttl_ms,
                             .wait_ms = opts->wait_ms,
                             .flags = opts->flags,
                             .max_hold_ms = opts->max_hold_ms,
                             .progress_ms = opts->progress_ms,
                             .name = name,
                             .name_len = (uint16_t)len,
                             .kind = (uint8_t)spec->kind,
                             .permits = spec->permits,
                             .owner = spec->owner};
    if (spec->kind == DLOCK_KIND_EXCLUSIVE && opts->flags == 0 && spec->owner == 0)
        return wire_put_acquire(&c->out, id, &m);
    uint16_t len16 = (uint16_t)len;
    return wire_put_acquire_ex(&c->out, id, &m, &name, &len16, 1);
}

/* Validates and sends an acquire whose outcome goes to cb; *idp gets its id. */
static int start_acquire(dlock_client *c, const char *name, const dlock_acquire_options *opts,
                         const dlock_lock_spec *spec, dlock_acquire_cb cb, void *arg, uint32_t *idp)
{
    static const dlock_acquire_options defaults;
    static const dlock_lock_spec exclusive;
    if (!opts)
        opts = &defaults;
    if (!spec)
        spec = &exclusive;
    if (c)
        c->agent_err = 0; /* an older message says nothing of this request */
    int rc = check_acquire(c, name, opts, spec);
    if (rc != 0)
        return rc;
    struct pending *p = pending_new(c, REQ_ACQUIRE, name, strlen(name));
    if (!p)
        return DLOCK_ENOMEM;
    p->cb = cb;
    p->arg = arg;
    p->lock_kind = (uint8_t)spec->kind;
    *idp = p->id;
    return pending_send(c, p, put_acquire(c, p->id, name, opts, spec));
}

int dlock_lease_acquire_spec_async(dlock_client *client, const char *name,
                                   const dlock_acquire_options *opts, const dlock_lock_spec *spec,
                                   dlock_acquire_cb cb, void *arg)
{
    uint32_t id;
    if (!cb)
        return DLOCK_EINVAL;
    return start_acquire(client, name, opts, spec, cb, arg, &id);
}

int dlock_lease_acquire_async(dlock_client *client, const char *name,
                              const dlock_acquire_options *opts, dlock_acquire_cb cb, void *arg)
{
    return dlock_lease_acquire_spec_async(client, name, opts, NULL, cb, arg);
}

int dlock_lease_acquire_cancel(dlock_client *client, dlock_acquire_cb cb, void *arg)
{
    if (!client || !cb)
        return DLOCK_EINVAL;
    /* Requests are filed newest first: the last match is the oldest. */
    struct pending *p, *oldest = NULL;
    LIST_FOREACH(p, &client->pending, link)
    {
        if (p->kind == REQ_ACQUIRE && p->cb == cb && p->arg == arg && !p->cancelled)
            oldest = p;
    }
    if (!oldest)
        return DLOCK_ENOTFOUND;
    oldest->cancelled = true;
    if (client->err)
        return 0; /* its callback gets the broken connection's error */
    /* The CANCEL has no answer of its own: the acquire's answer is it. */
    int rc = wire_put_empty(&client->out, oldest->id, WIRE_T_CANCEL);
    if (rc != 0) {
        oldest->cancelled = false;
        return rc;
    }
    (void)flush_nowait(client);
    return 0;
}

static void blocking_acquire_done(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct waiter *w = arg;
    (void)c;
    w->done = true;
    w->status = status;
    w->lease = lease;
}

int dlock_lease_acquire_spec(dlock_client *client, const char *name,
                             const dlock_acquire_options *opts, const dlock_lock_spec *spec,
                             dlock_lease **out)
{
    if (!out)
        return DLOCK_EINVAL;
    struct waiter w = {0};
    uint32_t id;
    int rc = start_acquire(client, name, opts, spec, blocking_acquire_done, &w, &id);
    if (rc != 0)
        return rc;
    /* The agent answers when the wait runs out; the slack only guards against
     * an agent that never does. */
    int64_t wait_ms = opts ? opts->wait_ms : DLOCK_WAIT_NONE;
    int64_t limit = -1;
    if (wait_ms >= 0 && wait_ms <= INT64_MAX - ACQUIRE_SLACK_MS)
        limit = wait_ms + ACQUIRE_SLACK_MS;
    rc = wait_for(client, &w, limit);
    if (rc != 0) {
        pending_abandon(client, id);
        return rc;
    }
    if (w.status != 0)
        return w.status;
    *out = w.lease;
    return 0;
}

int dlock_lease_acquire(dlock_client *client, const char *name, const dlock_acquire_options *opts,
                        dlock_lease **out)
{
    return dlock_lease_acquire_spec(client, name, opts, NULL, out);
}

/* ---- release ---- */

/* Sends RELEASE and waits for the answer; the caller frees the handle. */
static int release_round_trip(dlock_client *c, dlock_lease *l)
{
    struct waiter w = {0};
    uint32_t id = 0;
    int rc = send_simple(c, REQ_RELEASE, l->id, &w, &id);
    if (rc != 0)
        return rc;
    rc = wait_for(c, &w, RELEASE_TIMEOUT_MS);
    if (rc != 0) {
        pending_abandon(c, id);
        return rc;
    }
    if (w.status == DLOCK_ENOTFOUND)
        return DLOCK_ELOST; /* lost while the request was on its way */
    if (w.status != 0 && c->err)
        return DLOCK_EDISCONNECTED;
    return w.status;
}

/* What a release reports before asking the agent anything, or 1 when the
 * lease is still with the agent. */
static int release_gone(const dlock_lease *lease)
{
    dlock_client *c = lease->client;
    if (state_is_final(lease->state)) {
        /* Gone already: the agent no longer knows it. A loss caused by the
         * connection dropping is reported as such. */
        bool dropped = lease->state == DLOCK_STATE_LOST && c->err && lease->lost_reason == c->err;
        return dropped ? DLOCK_EDISCONNECTED : DLOCK_ELOST;
    }
    if (c->err)
        return DLOCK_EDISCONNECTED;
    return 1;
}

/* One hold of the lease given up: the handle goes with the last. */
static void release_hold(dlock_lease *lease)
{
    if (--lease->holds == 0)
        lease_free(lease);
}

/* A lease whose holds left are all its sets' is released with them only. */
static bool release_refused(const dlock_lease *lease)
{
    return !lease || lease->releasing || lease->holds <= lease->set_holds;
}

int dlock_lease_release(dlock_lease *lease)
{
    if (release_refused(lease))
        return DLOCK_EINVAL;
    dlock_client *c = lease->client;
    int rc = release_gone(lease);
    if (rc == 1) {
        /* The verdict is the lease page's, read before the RELEASE goes:
         * valid up to the release, or not provably held any more. */
        int verdict = dlock_lease_valid(lease) ? 0 : DLOCK_ELOST;
        rc = release_nowait(c, lease->id);
        if (rc == 0)
            rc = verdict;
    }
    release_hold(lease);
    return rc;
}

int dlock_lease_release_sync(dlock_lease *lease)
{
    if (release_refused(lease))
        return DLOCK_EINVAL;
    dlock_client *c = lease->client;
    int rc = release_gone(lease);
    if (rc == 1) {
        /* A callback run meanwhile may re-enter the lease (a hold more) but
         * not release it: the handle outlives the round trip. */
        lease->releasing = true;
        rc = release_round_trip(c, lease);
        lease->releasing = false;
    }
    release_hold(lease);
    return rc;
}

/* ---- sets of names ---- */

/* A name of a set and its place in the caller's order. */
struct set_entry {
    const char *name;
    size_t i;
};

static int entry_cmp(const void *a, const void *b)
{
    const struct set_entry *x = a, *y = b;
    return strcmp(x->name, y->name); /* byte-wise: as unsigned char */
}

/* Checks the set's arguments and writes the order to take the names in
 * (byte-wise ascending), before anything is sent. */
static int set_order(dlock_client *c, const char *const *names, size_t n,
                     const dlock_acquire_options *opts, const dlock_lock_spec *spec,
                     struct set_entry *order)
{
    if (!c || !names || n == 0 || n > DLOCK_SET_MAX)
        return DLOCK_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = check_acquire(c, names[i], opts, spec);
        if (rc != 0)
            return rc;
        order[i] = (struct set_entry){.name = names[i], .i = i};
    }
    qsort(order, n, sizeof order[0], entry_cmp);
    for (size_t k = 1; k < n; k++)
        if (strcmp(order[k - 1].name, order[k].name) == 0)
            return DLOCK_EINVAL; /* one name twice: it would wait for itself */
    return 0;
}

/* What is left of the set's one wait: a try-once (0) or an endless wait
 * stays so; a deadline of -1 (a wait too long to count) passes the wait on. */
static int64_t set_wait_left(int64_t wait_ms, int64_t deadline)
{
    if (wait_ms <= 0 || deadline < 0)
        return wait_ms;
    int64_t left = deadline - now_ms();
    return left > 0 ? left : 0;
}

/* Gives back, as dlock_lease_release() does, the members taken so far: the
 * first `taken` names of the order. */
static void set_rollback(dlock_lease_set *set, const struct set_entry *order, size_t taken)
{
    for (size_t k = 0; k < taken; k++) {
        dlock_lease *l = set->member[order[k].i];
        l->set_holds--;
        (void)dlock_lease_release(l);
    }
}

/* Takes the names in order, each with what is left of the wait; 0 once
 * every member is in the set, else the first failure, everything given
 * back. */
static int set_take(dlock_lease_set *set, const char *const *names, const struct set_entry *order,
                    const dlock_acquire_options *opts, const dlock_lock_spec *spec)
{
    dlock_acquire_options o = *opts;
    int64_t deadline = opts->wait_ms > 0 ? deadline_after(opts->wait_ms) : -1;
    for (size_t k = 0; k < set->n; k++) {
        dlock_lease *l = NULL;
        o.wait_ms = set_wait_left(opts->wait_ms, deadline);
        int rc = dlock_lease_acquire_spec(set->client, names[order[k].i], &o, spec, &l);
        if (rc == DLOCK_EBUSY && opts->wait_ms != DLOCK_WAIT_NONE)
            rc = DLOCK_ETIMEDOUT; /* the set's wait ran out before this name's turn */
        if (rc != 0) {
            set_rollback(set, order, k);
            return rc;
        }
        l->set_holds++; /* from now on, only the set releases it */
        set->member[order[k].i] = l;
    }
    /* A member lost while a later one was waited for: the set is not whole. */
    for (size_t i = 0; i < set->n; i++)
        if (set->member[i]->state == DLOCK_STATE_LOST) {
            set_rollback(set, order, set->n);
            return DLOCK_ELOST;
        }
    return 0;
}

int dlock_lease_set_acquire(dlock_client *client, const char *const *names, size_t n,
                            const dlock_acquire_options *opts, const dlock_lock_spec *spec,
                            dlock_lease_set **out)
{
    static const dlock_acquire_options defaults;
    static const dlock_lock_spec exclusive;
    struct set_entry order[DLOCK_SET_MAX];
    if (!opts)
        opts = &defaults;
    if (!spec)
        spec = &exclusive;
    if (client)
        client->agent_err = 0;
    if (!out)
        return DLOCK_EINVAL;
    int rc = set_order(client, names, n, opts, spec, order);
    if (rc != 0)
        return rc;
    dlock_lease_set *set = calloc(1, sizeof(*set) + n * sizeof(set->member[0]));
    if (!set)
        return DLOCK_ENOMEM;
    set->client = client;
    set->n = n;
    rc = set_take(set, names, order, opts, spec);
    if (rc != 0) {
        free(set);
        return rc;
    }
    LIST_INSERT_HEAD(&client->sets, set, link);
    *out = set;
    return 0;
}

size_t dlock_lease_set_count(const dlock_lease_set *set)
{
    return set ? set->n : 0;
}

dlock_lease *dlock_lease_set_lease(const dlock_lease_set *set, size_t i)
{
    return set && i < set->n ? set->member[i] : NULL;
}

int dlock_lease_set_valid(const dlock_lease_set *set)
{
    if (!set)
        return 0;
    for (size_t i = 0; i < set->n; i++)
        if (!dlock_lease_valid(set->member[i]))
            return 0;
    return 1;
}

/* Releases every member with release() and frees the set; the first error
 * in the caller's order. */
static int set_release(dlock_lease_set *set, int (*release)(dlock_lease *))
{
    if (!set || set->releasing)
        return DLOCK_EINVAL;
    set->releasing = true; /* a callback run meanwhile cannot release it again */
    int rc = 0;
    for (size_t i = 0; i < set->n; i++) {
        dlock_lease *l = set->member[i];
        l->set_holds--;
        int r = release(l);
        if (rc == 0)
            rc = r;
    }
    LIST_REMOVE(set, link);
    free(set);
    return rc;
}

int dlock_lease_set_release(dlock_lease_set *set)
{
    return set_release(set, dlock_lease_release);
}

int dlock_lease_set_release_sync(dlock_lease_set *set)
{
    return set_release(set, dlock_lease_release_sync);
}

/* ---- accessors ---- */

const char *dlock_lease_name(const dlock_lease *lease)
{
    return lease ? lease->name : NULL;
}

dlock_kind dlock_lease_kind(const dlock_lease *lease)
{
    return lease ? (dlock_kind)lease->kind : DLOCK_KIND_EXCLUSIVE;
}

uint32_t dlock_lease_holds(const dlock_lease *lease)
{
    return lease ? lease->holds : 0;
}

/* A NULL handle is nothing the caller may rely on: report it as lost. */
dlock_state dlock_lease_state(const dlock_lease *lease)
{
    return lease ? lease->state : DLOCK_STATE_LOST;
}

/* What the lease page says of the lease: its deadline while it is held or
 * in jeopardy, else 0 (a slot taken over by a later lease says nothing of
 * this one). A lease the library already reported lost (the connection
 * broke) is not valid either, whatever the page still says. */
static int64_t page_deadline(const dlock_lease *lease)
{
    struct shm_slot now;
    if (!lease || __atomic_load_n(&lease->gone, __ATOMIC_ACQUIRE) ||
        shm_slot_read(lease->slot, &now) != 0 || now.lease_id != lease->id)
        return 0;
    if (now.state != DLOCK_STATE_HELD && now.state != DLOCK_STATE_JEOPARDY)
        return 0;
    return now.deadline_ns;
}

int64_t dlock_lease_deadline_ns(const dlock_lease *lease)
{
    return page_deadline(lease);
}

int64_t dlock_lease_remaining_ns(const dlock_lease *lease)
{
    int64_t deadline = page_deadline(lease);
    if (deadline == 0)
        return 0;
    int64_t left = deadline - boot_ns();
    return left > 0 ? left : 0;
}

int dlock_lease_valid(const dlock_lease *lease)
{
    return dlock_lease_remaining_ns(lease) > 0;
}

/* Only while the slot still holds this lease: after a loss the agent may
 * give the slot to a later lease, whose progress this is not. (A slot handed
 * over between the check and the store takes one stale touch at most.) */
void dlock_lease_touch(dlock_lease *lease)
{
    if (page_deadline(lease) != 0)
        __atomic_store_n(lease->touch, (uint64_t)boot_ns(), __ATOMIC_RELAXED);
}

uint64_t dlock_lease_fence(const dlock_lease *lease)
{
    return lease ? lease->fence : 0;
}

uint32_t dlock_lease_ttl_ms(const dlock_lease *lease)
{
    return lease ? lease->ttl_ms : 0;
}

dlock_client *dlock_lease_client(const dlock_lease *lease)
{
    return lease ? lease->client : NULL;
}

const char *dlock_client_strerror(const dlock_client *client, int err)
{
    if (client && err != 0 && client->agent_err == err)
        return client->agent_msg;
    return dlock_strerror(err);
}
