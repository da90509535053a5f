/* SPDX-License-Identifier: BSD-3-Clause */
/* client.c -- libdlock: a connection to dlockd, its requests in flight and its leases.
 *
 * Everything is single-threaded and driven by the caller: frames are read only
 * inside dlock_client_dispatch() or a blocking call, and every callback runs
 * from there. A callback may release leases or start acquires on the same
 * client (even blocking ones), but must not call dlock_client_close() on it:
 * the frame being handled still refers to the client.
 *
 * Agent restarts (docs/restarts.md). A connection whose HELLO_OK says it is
 * resumable outlives its agent. When its socket breaks, the client goes
 * down instead of failing: each HELD lease is told JEOPARDY (DLOCK_ERESTART)
 * and stays valid by its lease page (the same file, which the agent's
 * successor goes on writing), and the client tries to connect again, 5 ms
 * later, then at a backoff doubling up to 200 ms; meanwhile
 * dlock_client_fd() is a timerfd that fires at the next attempt. An attempt
 * sends RESUME, with a PING right behind it: the successor answers HELLO_OK
 * and one EVENT per lease it took over, then the PING's OK, so a lease with
 * no EVENT by then is LOST. An agent that does not know the connection any
 * more answers ERROR: every lease is LOST and the client says HELLO afresh.
 * The requests the broken connection left unanswered, and those made while
 * the link was down, wait in the pending list, in the order made, and go out
 * once the link is up again: releases first, then acquires (each with what
 * is left of its wait) and pings. A lease released while down is marked so
 * in its touch slot, for the successor to read. Like everything else, the
 * reconnection runs only inside dlock_client_dispatch() or a blocking call.
 * A program that feeds the library (dlock_client_feed()) reads the socket
 * itself and cannot follow it to a new one: its connection ends as before.
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
#include <sys/timerfd.h>
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
#define BACKOFF_MIN_MS     5     /* the first attempt after the link broke */
#define BACKOFF_MAX_MS     200   /* attempts are never further apart */
#define FRAME_MAX          (WIRE_HDR_LEN + WIRE_MAX_BODY)
#define READ_CHUNK         16384
#define AGENT_MSG_MAX      256        /* an agent's error message kept, with its NUL */
#define NO_SLOT            UINT32_MAX /* a release of a lease whose slot is not known */

#define container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

enum req_kind { REQ_ACQUIRE, REQ_RELEASE, REQ_PING };

/* The link to the agent. UP: requests go out as they are made. DOWN: no
 * socket (the agent is restarting); an attempt is due at retry_at. RESUMING:
 * the agent's successor took the connection back (HELLO_OK to RESUME); its
 * EVENTs come until the OK of the PING sent behind RESUME. READY: connected
 * again (resumed, or a fresh HELLO), the requests that waited not yet sent. */
enum link_state { LINK_UP, LINK_DOWN, LINK_RESUMING, LINK_READY };

/* Where a blocking call waits for its reply; it lives on the caller's stack. */
struct waiter {
    bool done;
    int status;
    dlock_lease *lease; /* acquire: the new lease */
};

/* A request made and not yet answered: in flight, or waiting for the link. */
struct pending {
    TAILQ_ENTRY(pending) link; /* in the order made */
    struct idnode node;        /* keyed by id */
    uint32_t id;
    enum req_kind kind;
    dlock_acquire_cb cb; /* acquire; NULL once abandoned */
    void *arg;
    struct waiter *waiter; /* release, ping; NULL when nobody waits */
    bool abandoned;        /* the caller gave up: undo a late grant */
    bool cancelled;        /* acquire: CANCEL sent for it (or to be completed so) */
    bool sent;             /* written on the current connection */
    bool again;            /* not sent before the link broke, or sent on a broken one */
    uint8_t lock_kind;     /* acquire: the dlock_kind asked for */
    int fail;              /* acquire: the error it is to complete with, unsent */
    /* Release: the lease, its slot (or NO_SLOT), and what the release was
     * worth when made (0: valid up to it, DLOCK_ELOST), the answer to give
     * when an agent that took the connection back no longer knows it. */
    uint64_t lease_id;
    uint32_t slot;
    int verdict;
    /* Acquire: what to send again; wait_end is now_ms() when its wait runs
     * out (-1: a try-once, an endless wait, or one too long to count). */
    dlock_acquire_options opts;
    dlock_lock_spec spec;
    int64_t wait_end;
    char name[]; /* acquire: the lock name, NUL-terminated */
};

struct dlock_lease {
    LIST_ENTRY(dlock_lease) link;
    struct idnode node; /* keyed by id */
    dlock_client *client;
    uint64_t id;
    uint64_t fence;
    /* In the client's lease page and touch page; read atomically, as a
     * connection taken back on other pages moves them (take_pages_back()). */
    const struct shm_slot *slot;
    uint64_t *touch;
    uint32_t slot_idx;
    uint8_t gone; /* reported LOST: read atomically by checks from any thread */
    uint32_t ttl_ms;
    dlock_state state;
    int reason; /* of the last state reported */
    int lost_reason;
    /* Re-entrant grants of this lease and the first, not yet released: the
     * handle is freed with the last. */
    uint32_t holds;
    uint8_t kind;          /* dlock_kind */
    bool releasing;        /* inside dlock_lease_release_sync(): no second release, and
                              no events while it gives up the last hold (lease_quiet()) */
    bool indexed;          /* in leases_by_id: a lease of the current connection */
    bool tell;             /* a state the library set itself, to report (tell_marked()) */
    int64_t down_deadline; /* the page's deadline when the link broke (0: not valid then) */
    uint32_t resume_gen;   /* the last resume whose EVENTs named it */
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

/* Pages of an earlier connection: lease handles may still point into them,
 * so they stay mapped until the client is closed. */
struct retired {
    const void *page;
    uint64_t *touch;
    uint32_t nslots;
};

struct dlock_client {
    int fd;
    char *path; /* the agent's socket, for reconnecting */
    /* What dlock_client_open_labeled() said the client does, sent in every
     * HELLO (version 3); label_len 0 for none. */
    char label[WIRE_MAX_LABEL];
    uint16_t label_len;
    uint32_t next_id;
    int err;       /* 0, or why the connection is broken for good */
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
    TAILQ_HEAD(, pending) pending;
    struct idmap leases_by_id, pending_by_id;
    struct wire_buf out;
    struct wire_buf in; /* bytes read; frames before in_off are handled */
    size_t in_off;
    int rx_fds[2];    /* lease-page descriptors received with HELLO_OK, else -1 */
    bool want_fds;    /* reading HELLO_OK: descriptors are expected */
    const void *page; /* the lease page, read-only */
    uint64_t *touch;  /* the touch page */
    uint32_t nslots;
    dev_t page_dev[2]; /* the files of the lease page and the touch page */
    ino_t page_ino[2];
    struct retired *retired;
    size_t nretired;
    /* Resumable connections (docs/restarts.md). */
    bool resumable; /* HELLO_OK said so: the link is taken up again when it breaks */
    bool fed;       /* dlock_client_feed() was used: never resumed */
    uint64_t conn_id;
    uint8_t secret[WIRE_SECRET_LEN];
    enum link_state link;
    bool link_lost;       /* the socket broke; link_down() has yet to run */
    bool need_hello;      /* the agent refused RESUME: the next attempt says HELLO */
    int timer_fd;         /* fires at the next attempt while down; -1 until needed */
    int64_t retry_at;     /* now_ms() of the next attempt */
    int backoff_ms;       /* the wait before it */
    uint32_t resume_ping; /* the PING sent behind RESUME */
    uint32_t resume_gen;  /* resumes so far */
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

/* ---- the link ---- */

/* Frames may be read and written on the socket. */
static bool link_ok(const dlock_client *c)
{
    return !c->err && !c->link_lost && c->link != LINK_DOWN;
}

/* Requests go out as they are made. */
static bool can_send(const dlock_client *c)
{
    return link_ok(c) && c->link == LINK_UP;
}

/* The agent is out of reach for now: the link broke and is not back. */
static bool is_down(const dlock_client *c)
{
    return !c->err && (c->link_lost || c->link == LINK_DOWN);
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
    TAILQ_INSERT_TAIL(&c->pending, p, link);
    return 0;
}

static void pending_unlink(dlock_client *c, struct pending *p)
{
    idmap_del(&c->pending_by_id, &p->node);
    TAILQ_REMOVE(&c->pending, p, link);
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
    p->slot = NO_SLOT;
    p->wait_end = -1;
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
    l->slot_idx = g->slot;
    l->ttl_ms = g->ttl_ms;
    l->state = DLOCK_STATE_HELD;
    l->holds = 1;
    l->kind = p->lock_kind;
    l->resume_gen = c->resume_gen;
    l->node.id = l->id;
    if (idmap_put(&c->leases_by_id, &l->node) != 0) {
        free(l);
        return NULL;
    }
    l->indexed = true;
    LIST_INSERT_HEAD(&c->leases, l, link);
    return l;
}

/* Takes a lease the agent no longer knows out of the index, so that a later
 * lease of the same id (from another agent) is not taken for it. */
static void lease_unindex(dlock_lease *l)
{
    if (l->indexed)
        idmap_del(&l->client->leases_by_id, &l->node);
    l->indexed = false;
}

static void lease_free(dlock_lease *l)
{
    lease_unindex(l);
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

/* Sets a state the library found by itself (not an agent's EVENT), to be
 * reported by tell_marked(). */
static void lease_mark(dlock_lease *l, dlock_state state, int reason)
{
    l->state = state;
    l->reason = reason;
    if (state == DLOCK_STATE_LOST) {
        __atomic_store_n(&l->gone, 1, __ATOMIC_RELEASE);
        l->lost_reason = reason ? reason : DLOCK_ELOST;
    }
    l->tell = true;
}

/* Delivers the states lease_mark() set. Callbacks may release leases
 * meanwhile: the leases to tell wait on a list of their own, and each goes
 * back to the client's list before its callback, which may release it or
 * others (LIST_REMOVE works on whichever list a lease is on). */
static void tell_marked(dlock_client *c)
{
    LIST_HEAD(, dlock_lease) tell = LIST_HEAD_INITIALIZER(tell);
    dlock_lease *l, *next;
    for (l = LIST_FIRST(&c->leases); l; l = next) {
        next = LIST_NEXT(l, link);
        if (l->tell) {
            LIST_REMOVE(l, link);
            LIST_INSERT_HEAD(&tell, l, link);
        }
    }
    while ((l = LIST_FIRST(&tell)) != NULL) {
        LIST_REMOVE(l, link);
        LIST_INSERT_HEAD(&c->leases, l, link);
        l->tell = false;
        if (c->event_cb && !lease_quiet(l))
            c->event_cb(c, l, l->state, l->reason, c->event_arg);
    }
}

/* What slot s of a lease page says of lease lease_id: its deadline while it
 * holds the lease, held or in jeopardy, else 0 (a slot taken over by a later
 * lease says nothing of this one). */
static int64_t slot_deadline(const struct shm_slot *s, uint64_t lease_id)
{
    struct shm_slot now;
    if (shm_slot_read(s, &now) != 0 || now.lease_id != lease_id)
        return 0;
    if (now.state != DLOCK_STATE_HELD && now.state != DLOCK_STATE_JEOPARDY)
        return 0;
    return now.deadline_ns;
}

/* Marks the lease in slot `slot` of the current pages released in its
 * touch slot (SHM_TOUCH_RELEASED over the last touch), for an agent that is
 * not running: its successor reads the mark before it renews the lease,
 * and releases the key instead. Not when the page shows another lease there
 * (the slot was freed and given to a later one). */
static void touch_mark_released(dlock_client *c, uint32_t slot, uint64_t lease_id)
{
    if (slot == NO_SLOT || slot >= c->nslots || !c->touch)
        return;
    struct shm_slot now;
    if (shm_slot_read(&shm_slots((void *)c->page)[slot], &now) == 0 && now.lease_id != lease_id)
        return;
    uint64_t *t = &c->touch[slot];
    uint64_t v = __atomic_load_n(t, __ATOMIC_RELAXED);
    __atomic_store_n(t, v | SHM_TOUCH_RELEASED, __ATOMIC_RELEASE);
}

/* Marks every lease of the current connection released in its touch slot,
 * when the connection is one an agent's successor may take over: the
 * client gives it up (closes it, or it failed for good), and an agent that
 * died unseen would leave its leases to a successor that keeps them for as
 * long as the process lives. A live agent releases a marked lease at its
 * next timer at the latest, as the end of the connection does anyway. */
static void mark_all_released(dlock_client *c)
{
    if (!c->resumable)
        return;
    dlock_lease *l;
    LIST_FOREACH(l, &c->leases, link)
    {
        if (l->indexed)
            touch_mark_released(c, l->slot_idx, l->id);
    }
}

/* ---- connection failure ---- */

/* How far the input buffer holds whole frames: those a broken link left
 * are still handled; a partial one is dropped. */
static size_t whole_frames(const dlock_client *c)
{
    size_t off = c->in_off;
    struct wire_hdr h;
    while (c->in.len > off &&
           wire_hdr_decode(c->in.data + off, c->in.len - off, WIRE_MAX_BODY, &h) == 1 &&
           c->in.len - off >= WIRE_HDR_LEN + (size_t)h.len)
        off += WIRE_HDR_LEN + (size_t)h.len;
    return off;
}

/* Marks the connection broken for good. Nobody is told here (this may run
 * inside a non-blocking call); notify_broken() does that from a dispatch or
 * blocking call. shutdown() makes the fd readable, so an event loop wakes up
 * for it, and makes the agent drop every lease of ours. */
static void client_fail(dlock_client *c, int code)
{
    if (c->err)
        return;
    c->err = code;
    c->in.len = c->in_off = 0;
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    mark_all_released(c);
}

/* The socket broke (end of stream, or an error reading or writing it). A
 * resumable connection is taken up again later (link_down(), from a
 * dispatch or blocking call; the fd stays readable until then); any other
 * fails for good. While down, an attempt that fails handles that itself. */
static void client_break(dlock_client *c)
{
    if (c->err)
        return;
    if (!c->resumable || c->fed) {
        client_fail(c, DLOCK_EDISCONNECTED);
        return;
    }
    if (c->link_lost || c->link == LINK_DOWN)
        return;
    c->link_lost = true;
    c->in.len = whole_frames(c);
    c->out.len = 0;
    shutdown(c->fd, SHUT_RDWR);
}

/* Delivers a LOST event to every lease still held and completes every request
 * in flight with the error, once. */
static void notify_broken(dlock_client *c)
{
    if (!c->err || c->notified)
        return;
    c->notified = true;
    dlock_lease *l;
    LIST_FOREACH(l, &c->leases, link)
    {
        if (!state_is_final(l->state))
            lease_mark(l, DLOCK_STATE_LOST, c->err);
    }
    tell_marked(c);
    struct pending *p;
    while ((p = TAILQ_FIRST(&c->pending)) != NULL) {
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
            if (c->rx_fds[i] < 0 && nfds == 2 && c->want_fds)
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
        client_break(c);
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
        client_break(c);
        c->out.len = off = 0;
        break;
    }
    if (off) {
        memmove(c->out.data, c->out.data + off, c->out.len - off);
        c->out.len -= off;
    }
    return rc;
}

static int put_acquire(dlock_client *c, uint32_t id, const char *name,
                       const dlock_acquire_options *opts, const dlock_lock_spec *spec);

/* Appends request p to c->out. An acquire sent again after the link broke
 * asks for what is left of its wait (expire_unsent() completed those whose
 * wait ran out); an endless wait stays endless, a try-once a try-once. */
static int encode(dlock_client *c, struct pending *p)
{
    struct wire_release m = {.lease_id = p->lease_id};
    switch (p->kind) {
    case REQ_ACQUIRE: {
        dlock_acquire_options o = p->opts;
        if (p->again && o.wait_ms > 0 && p->wait_end >= 0) {
            int64_t left = p->wait_end - now_ms();
            o.wait_ms = left > 0 ? left : 1;
        }
        return put_acquire(c, p->id, p->name, &o, &p->spec);
    }
    case REQ_RELEASE:
        return wire_put_release(&c->out, p->id, &m);
    default:
        return wire_put_empty(&c->out, p->id, WIRE_T_PING);
    }
}

/* Files request p among those in flight and writes it: at once when the
 * link is up (flush_out() when wait, else flush_nowait()), or else once it
 * is up again (go_up()). Frees p on failure. A link that breaks while p
 * goes out is not one: p goes out again once the link is back. */
static int submit(dlock_client *c, struct pending *p, bool wait)
{
    if (pending_link(c, p) != 0) {
        free(p);
        return DLOCK_ENOMEM;
    }
    if (!can_send(c)) {
        p->again = true;
        return 0;
    }
    int rc = encode(c, p);
    if (rc == 0) {
        p->sent = true;
        rc = wait ? flush_out(c) : flush_nowait(c);
        if (rc != 0 && !c->err)
            rc = 0;
    }
    if (rc != 0) {
        pending_unlink(c, p);
        free(p);
    }
    return rc;
}

/* The slot a release of l marks released while the agent is away: its own
 * for the last hold; none (NO_SLOT) for one of several re-entrant holds,
 * which gives up that hold alone, not the lease. */
static uint32_t mark_slot(const dlock_lease *l)
{
    return l->holds > 1 ? NO_SLOT : l->slot_idx;
}

/* Sends a RELEASE of lease l (its verdict taken from the lease page now) or
 * a PING (l NULL), whose reply goes to w. While the agent is out of reach, a
 * release also marks the lease released in its touch slot. */
static int send_simple(dlock_client *c, enum req_kind kind, const dlock_lease *l, struct waiter *w,
                       uint32_t *idp)
{
    if (c->err)
        return DLOCK_EDISCONNECTED;
    c->agent_err = 0; /* a caller's request: older messages are not its */
    struct pending *p = pending_new(c, kind, NULL, 0);
    if (!p)
        return DLOCK_ENOMEM;
    p->waiter = w;
    if (l) {
        p->lease_id = l->id;
        p->slot = mark_slot(l);
        p->verdict = dlock_lease_valid(l) ? 0 : DLOCK_ELOST;
        if (is_down(c))
            touch_mark_released(c, p->slot, p->lease_id);
    }
    *idp = p->id;
    return submit(c, p, true);
}

/* Queues RELEASE and writes what the socket takes, without waiting for
 * anything. Its answer is dropped when it comes: the request is filed as
 * abandoned, so its id is not reused while it is in flight. While the agent
 * is out of reach, the lease is marked released in its touch slot, and the
 * RELEASE goes out once the link is back. */
static int release_nowait(dlock_client *c, uint64_t lease_id, uint32_t slot, int verdict)
{
    if (c->err)
        return DLOCK_EDISCONNECTED;
    if (is_down(c))
        touch_mark_released(c, slot, lease_id);
    struct pending *p = pending_new(c, REQ_RELEASE, NULL, 0);
    if (p) {
        p->abandoned = true;
        p->lease_id = lease_id;
        p->slot = slot;
        p->verdict = verdict;
        return submit(c, p, false);
    }
    if (!can_send(c))
        return is_down(c) ? 0 : DLOCK_ENOMEM;
    /* Without memory for the record, an id of its own still keeps the answer
     * from being taken for another request's: the agent answers a RELEASE
     * as soon as it reads it, long before the ids come round again. */
    struct wire_release m = {.lease_id = lease_id};
    int rc = wire_put_release(&c->out, new_id(c), &m);
    if (rc != 0)
        return rc;
    return flush_nowait(c);
}

/* Gives a lease back without waiting: a grant nobody wants any more. */
static void release_unwanted(dlock_client *c, uint64_t lease_id, uint32_t slot)
{
    (void)release_nowait(c, lease_id, slot, 0);
}

/* ---- the link taken up again ---- */

static int64_t page_deadline(const dlock_lease *lease);

/* While no agent is connected, a lease whose deadline passes is LOST
 * (DLOCK_ERESTART): with no successor in time, the holder is told so at the
 * deadline. The deadline is the page's when the link broke, or a later one
 * a successor wrote since. A lease the page did not show valid when the
 * link broke (in doubt after a failover) waits for an agent's word: its
 * page deadline is past by design, as is a successor's while it confirms a
 * lease it took over in sentinel and cluster modes. */
static void expire_leases(dlock_client *c)
{
    int64_t now = boot_ns();
    dlock_lease *l;
    LIST_FOREACH(l, &c->leases, link)
    {
        if (state_is_final(l->state) || l->down_deadline == 0)
            continue;
        int64_t d = page_deadline(l);
        if (d < l->down_deadline)
            d = l->down_deadline;
        if (now >= d)
            lease_mark(l, DLOCK_STATE_LOST, DLOCK_ERESTART);
    }
    tell_marked(c);
}

/* Completes the acquires that wait for the link and cannot wait any longer:
 * cancelled, their wait run out, or a try-once the broken link left
 * unanswered. Those due are taken out first, then completed: callbacks may
 * make requests meanwhile. */
static void expire_unsent(dlock_client *c)
{
    TAILQ_HEAD(, pending) done = TAILQ_HEAD_INITIALIZER(done);
    int64_t now = now_ms();
    struct pending *p, *next;
    for (p = TAILQ_FIRST(&c->pending); p; p = next) {
        next = TAILQ_NEXT(p, link);
        if (p->sent || p->kind != REQ_ACQUIRE)
            continue;
        if (!p->fail && p->cancelled)
            p->fail = DLOCK_ECANCELED;
        if (!p->fail && p->wait_end >= 0 && now >= p->wait_end)
            p->fail = DLOCK_ETIMEDOUT;
        if (!p->fail)
            continue;
        pending_unlink(c, p);
        TAILQ_INSERT_TAIL(&done, p, link);
    }
    while ((p = TAILQ_FIRST(&done)) != NULL) {
        TAILQ_REMOVE(&done, p, link);
        pending_complete(c, p, p->fail, NULL);
    }
}

/* The link is READY (connected again): completes what cannot wait, then,
 * the link UP, sends what waited for it, in the order made: releases first
 * (a release made before an acquire of the same name must not make it
 * DLOCK_EHELD), then acquires and pings; and reports the states the
 * library marked. */
static void go_up(dlock_client *c)
{
    expire_unsent(c); /* requests made by its callbacks wait behind the others */
    if (!link_ok(c) || c->link != LINK_READY)
        return; /* a blocking call of a callback did it, or the link broke again */
    c->link = LINK_UP;
    TAILQ_HEAD(, pending) failed = TAILQ_HEAD_INITIALIZER(failed);
    for (int pass = 0; pass < 2; pass++) {
        struct pending *p, *next;
        for (p = TAILQ_FIRST(&c->pending); p; p = next) {
            next = TAILQ_NEXT(p, link);
            if (p->sent || (p->kind == REQ_RELEASE) != (pass == 0))
                continue;
            /* Cancelled by a callback of expire_unsent(): never sent. */
            int rc = p->kind == REQ_ACQUIRE && p->cancelled ? DLOCK_ECANCELED : encode(c, p);
            if (rc == 0) {
                p->sent = true;
                continue;
            }
            p->fail = rc;
            pending_unlink(c, p);
            TAILQ_INSERT_TAIL(&failed, p, link);
        }
    }
    (void)flush_out(c); /* a link broken again puts them back */
    struct pending *p;
    while ((p = TAILQ_FIRST(&failed)) != NULL) {
        TAILQ_REMOVE(&failed, p, link);
        pending_complete(c, p, p->fail, NULL);
    }
    tell_marked(c);
}

/* The OK of the PING sent behind RESUME: the successor has named every
 * lease it took over with an EVENT; the others are LOST. */
static void finish_resume(dlock_client *c)
{
    dlock_lease *l;
    LIST_FOREACH(l, &c->leases, link)
    {
        if (!state_is_final(l->state) && l->resume_gen != c->resume_gen) {
            lease_mark(l, DLOCK_STATE_LOST, DLOCK_ERESTART);
            lease_unindex(l);
        }
    }
    c->link = LINK_READY;
    go_up(c);
}

/* Whether a RELEASE of lease_id waits to go out, or is in flight. */
static bool release_pending(dlock_client *c, uint64_t lease_id)
{
    struct pending *p;
    TAILQ_FOREACH(p, &c->pending, link)
    {
        if (p->kind == REQ_RELEASE && p->lease_id == lease_id)
            return true;
    }
    return false;
}

/* ---- handling frames ---- */

/* A GRANTED for a lease this client has a handle of: the agent re-entered
 * it for a re-entrant acquire, so the handle takes one more hold (same
 * lease, same slot). Anything else under a known lease id breaks the
 * protocol. */
static int reentered(dlock_lease *l, const struct pending *p, const struct wire_granted *g)
{
    if (state_is_final(l->state) || l->slot_idx != g->slot || strcmp(l->name, p->name) != 0 ||
        l->holds == UINT32_MAX)
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
    if (p && (p->kind != REQ_ACQUIRE || !p->sent))
        return DLOCK_EPROTO;
    if (!p || p->abandoned) {
        /* A lease nobody waits for would stay held until we disconnect. */
        if (p) {
            pending_unlink(c, p);
            free(p);
        }
        release_unwanted(c, g.lease_id, g.slot);
        return 0;
    }
    dlock_lease *l = lease_find(c, g.lease_id);
    if (l) {
        int rc = reentered(l, p, &g);
        if (rc != 0)
            return rc; /* p stays in flight: the broken connection completes it */
        pending_unlink(c, p);
        pending_complete(c, p, 0, l);
        return 0;
    }
    pending_unlink(c, p);
    l = lease_new(c, p, &g);
    if (!l)
        release_unwanted(c, g.lease_id, g.slot);
    pending_complete(c, p, l ? 0 : DLOCK_ENOMEM, l);
    return 0;
}

static int on_ok(dlock_client *c, const struct wire_hdr *h)
{
    if (h->len != 0)
        return DLOCK_EPROTO;
    if (c->link == LINK_RESUMING && h->id == c->resume_ping) {
        finish_resume(c);
        return 0;
    }
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
    int status = e.code < 0 ? e.code : DLOCK_EPROTO;
    /* A release made while the agent restarted: its successor may have
     * released the lease already, on the touch slot's mark. */
    if (p->kind == REQ_RELEASE && p->again && status == DLOCK_ENOTFOUND)
        status = p->verdict;
    else if (!p->abandoned && e.code < 0)
        keep_agent_msg(c, &e);
    pending_complete(c, p, status, NULL);
    return 0;
}

static int on_event(dlock_client *c, const struct wire_hdr *h, const uint8_t *body)
{
    struct wire_event ev;
    if (h->id != 0 || wire_get_event(body, h->len, &ev) != 0)
        return DLOCK_EPROTO;
    if (ev.state < DLOCK_STATE_HELD || ev.state > DLOCK_STATE_RELEASED)
        return DLOCK_EPROTO;
    bool resuming = c->link == LINK_RESUMING;
    dlock_lease *l = lease_find(c, ev.lease_id);
    if (!l) {
        /* A lease the successor took over that nobody here knows (its
         * GRANTED was lost with the connection, or its handle released
         * meanwhile): give it back before anything else goes out. */
        if (resuming && ev.state != DLOCK_STATE_LOST && !release_pending(c, ev.lease_id))
            release_unwanted(c, ev.lease_id, NO_SLOT);
        return 0;
    }
    if (resuming)
        l->resume_gen = c->resume_gen;
    if (state_is_final(l->state)) {
        /* Counted lost here while no agent ran (expire_leases()), yet taken
         * over: give it back, the handle stays lost. */
        if (resuming && ev.state != DLOCK_STATE_LOST && !release_pending(c, ev.lease_id))
            release_unwanted(c, ev.lease_id, l->slot_idx);
        return 0; /* released meanwhile, or already over: a lease never comes back */
    }
    /* A resume's EVENTs repeat what the client knows as often as not (a
     * lease in jeopardy for a Redis outage before the restart): only a
     * change is reported. */
    bool change = l->state != (dlock_state)ev.state || l->reason != ev.reason;
    l->state = (dlock_state)ev.state;
    l->reason = ev.reason;
    if (ev.state == DLOCK_STATE_LOST) {
        __atomic_store_n(&l->gone, 1, __ATOMIC_RELEASE);
        l->lost_reason = ev.reason ? ev.reason : DLOCK_ELOST;
    }
    if ((change || !resuming) && !lease_quiet(l) && c->event_cb)
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
    while (link_ok(c)) {
        ssize_t n = read_some(c);
        if (n == 0)
            return;
        if (n < 0)
            client_break(c);
        else
            process_input(c);
    }
}

/* ---- connecting ---- */

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

static void close_rx_fds(dlock_client *c)
{
    for (int i = 0; i < 2; i++) {
        if (c->rx_fds[i] >= 0)
            close(c->rx_fds[i]);
        c->rx_fds[i] = -1;
    }
}

/* Closes the socket (if any) and forgets what was read from it or queued
 * for it. */
static void drop_socket(dlock_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->in.len = c->in_off = 0;
    c->out.len = 0;
    close_rx_fds(c);
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

/* Reads the answer to HELLO or RESUME, sent at boot time `sent`: returns 0
 * with *ok (the frame then handled), 1 with the code of the agent's ERROR in
 * *refused, or an error of ours. */
static int read_hello_ok(dlock_client *c, int64_t sent, struct wire_hello_ok *ok, int *refused)
{
    struct wire_hdr h;
    c->want_fds = true;
    int rc = read_first_frame(c, &h, deadline_after(HELLO_TIMEOUT_MS));
    c->want_fds = false;
    int64_t received = boot_ns();
    if (rc != 0)
        return rc;
    const uint8_t *body = c->in.data + WIRE_HDR_LEN;
    if (h.type == WIRE_T_ERROR) {
        struct wire_error e;
        if (wire_get_error(body, h.len, &e) != 0 || e.code >= 0)
            return DLOCK_EPROTO;
        *refused = e.code;
        return 1;
    }
    if (h.type != WIRE_T_HELLO_OK || wire_get_hello_ok(body, h.len, ok) != 0)
        return DLOCK_EPROTO;
    /* The lease page holds deadlines on the agent's CLOCK_BOOTTIME: if its
     * reading does not fall between our own two, our clock is another one
     * (a time namespace with a boottime offset) and every validity check
     * would be wrong. */
    if ((int64_t)ok->clock_ns < sent || (int64_t)ok->clock_ns > received)
        return DLOCK_ECLOCK;
    c->in_off = WIRE_HDR_LEN + (size_t)h.len;
    return 0;
}

/* Takes the agent's limits and, in version 2, the connection's name from
 * HELLO_OK. */
static void apply_hello_ok(dlock_client *c, const struct wire_hello_ok *ok)
{
    /* Our encoder cannot send more than WIRE_MAX_NAME whatever the agent allows. */
    c->max_name_len = ok->max_name_len;
    if (c->max_name_len == 0 || c->max_name_len > WIRE_MAX_NAME)
        c->max_name_len = WIRE_MAX_NAME;
    c->max_leases = ok->max_leases;
    c->default_ttl_ms = ok->default_ttl_ms;
    c->resumable = ok->version >= 2 && (ok->flags & WIRE_HELLO_RESUMABLE) && ok->conn_id != 0;
    c->conn_id = ok->conn_id;
    memcpy(c->secret, ok->secret, WIRE_SECRET_LEN);
}

/* The pages of an earlier connection stay mapped (see struct retired); when
 * they cannot be recorded, they are never unmapped. */
static void retire_pages(dlock_client *c)
{
    if (!c->page)
        return;
    struct retired *r = realloc(c->retired, (c->nretired + 1) * sizeof *r);
    if (r) {
        c->retired = r;
        r[c->nretired++] =
            (struct retired){.page = c->page, .touch = c->touch, .nslots = c->nslots};
    }
    c->page = NULL;
    c->touch = NULL;
    c->nslots = 0;
}

/* Maps the lease page (read-only) and the touch page received with HELLO_OK,
 * after checking that they are what the agent says they are, as the
 * client's pages; those it had before are retired. */
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
    retire_pages(c);
    c->page = page;
    c->touch = touch;
    c->nslots = n;
    for (int i = 0; i < 2; i++) {
        c->page_dev[i] = st[i].st_dev;
        c->page_ino[i] = st[i].st_ino;
    }
    close_rx_fds(c);
    return 0;
}

/* Sends HELLO of the given version and takes the agent's limits and pages
 * from HELLO_OK. */
static int handshake(dlock_client *c, uint16_t version)
{
    struct wire_hello hello = {.magic = WIRE_MAGIC,
                               .version = version,
                               .label = c->label,
                               .label_len = version >= 3 ? c->label_len : 0};
    int rc = wire_put_hello(&c->out, new_id(c), &hello);
    if (rc != 0)
        return rc;
    int64_t sent = boot_ns();
    if (flush_out(c) != 0)
        return DLOCK_ECONNECT;
    struct wire_hello_ok ok;
    int refused = 0;
    rc = read_hello_ok(c, sent, &ok, &refused);
    if (rc == 1)
        return refused;
    if (rc != 0)
        return rc;
    if (ok.version != hello.version)
        return DLOCK_EVERSION;
    rc = map_pages(c);
    if (rc == 0)
        apply_hello_ok(c, &ok);
    return rc;
}

/* Connects and says HELLO in version 2 (3 with a label), or, to an older
 * agent, which answers DLOCK_EVERSION and hangs up, again in the version
 * before. An agent of version 2 answers a HELLO with a label DLOCK_EPROTO
 * (malformed): then version 2, without the label. */
static int connect_hello(dlock_client *c)
{
    int rc = DLOCK_EVERSION;
    for (int v = c->label_len ? 3 : 2;
         (rc == DLOCK_EVERSION || (rc == DLOCK_EPROTO && v == 2)) && v >= WIRE_VERSION_MIN; v--) {
        drop_socket(c);
        rc = connect_socket(c->path, &c->fd);
        if (rc == 0)
            rc = handshake(c, (uint16_t)v);
    }
    return rc;
}

/* The pages a successor sent with its HELLO_OK to RESUME: the same files
 * as the client maps (docs/restarts.md), whose descriptors are closed; any
 * others are mapped instead, and every lease handle moved to them (a lease
 * whose slot is not there any more is as good as lost). */
static int take_pages_back(dlock_client *c)
{
    struct stat st[2];
    if (c->rx_fds[0] < 0 || c->rx_fds[1] < 0 || fstat(c->rx_fds[0], &st[0]) != 0 ||
        fstat(c->rx_fds[1], &st[1]) != 0)
        return DLOCK_EPROTO;
    bool same = true;
    for (int i = 0; i < 2; i++)
        same = same && st[i].st_dev == c->page_dev[i] && st[i].st_ino == c->page_ino[i];
    if (same) {
        close_rx_fds(c);
        return 0;
    }
    int rc = map_pages(c);
    if (rc != 0)
        return rc;
    dlock_lease *l;
    LIST_FOREACH(l, &c->leases, link)
    {
        if (state_is_final(l->state))
            continue;
        if (l->slot_idx >= c->nslots) {
            __atomic_store_n(&l->gone, 1, __ATOMIC_RELEASE);
            continue;
        }
        __atomic_store_n(&l->slot, &shm_slots((void *)c->page)[l->slot_idx], __ATOMIC_RELEASE);
        __atomic_store_n(&l->touch, &c->touch[l->slot_idx], __ATOMIC_RELEASE);
    }
    return 0;
}

/* The agent does not know the connection any more (a stop rather than a
 * restart, or one its successor could not take over): every lease is LOST
 * (DLOCK_ERESTART), a release waiting for the link is over (the agent let
 * the leases go), and the next attempt says HELLO. */
static void resume_refused(dlock_client *c)
{
    c->need_hello = true;
    dlock_lease *l;
    LIST_FOREACH(l, &c->leases, link)
    {
        if (!state_is_final(l->state))
            lease_mark(l, DLOCK_STATE_LOST, DLOCK_ERESTART);
        lease_unindex(l);
    }
    struct pending *p, *next;
    for (p = TAILQ_FIRST(&c->pending); p; p = next) {
        next = TAILQ_NEXT(p, link);
        if (p->kind == REQ_RELEASE) {
            pending_unlink(c, p);
            pending_complete(c, p, p->verdict, NULL); /* no callback: a waiter at most */
        }
    }
}

/* One attempt to take the connection back: RESUME and a PING, then
 * HELLO_OK. 0: RESUMING (the EVENTs and the PING's OK follow); else the
 * error, the socket closed. An agent that refuses (it does not know the
 * connection, or RESUME at all) gets a fresh HELLO at once. */
static int reconnect_resume(dlock_client *c)
{
    int rc = connect_socket(c->path, &c->fd);
    /* Version 2's RESUME: version 3 changed only HELLO. */
    struct wire_resume m = {.magic = WIRE_MAGIC, .version = 2, .conn_id = c->conn_id};
    memcpy(m.secret, c->secret, WIRE_SECRET_LEN);
    uint32_t id = new_id(c);
    c->resume_ping = new_id(c);
    if (rc == 0)
        rc = wire_put_resume(&c->out, id, &m);
    if (rc == 0)
        rc = wire_put_empty(&c->out, c->resume_ping, WIRE_T_PING);
    int64_t sent = boot_ns();
    if (rc == 0 && flush_out(c) != 0)
        rc = DLOCK_ECONNECT;
    struct wire_hello_ok ok;
    int refused = 0;
    if (rc == 0)
        rc = read_hello_ok(c, sent, &ok, &refused);
    if (rc == 0 && ok.version < 2)
        rc = 1, refused = DLOCK_EVERSION;
    if (rc == 1 &&
        (refused == DLOCK_ENOTFOUND || refused == DLOCK_EPROTO || refused == DLOCK_EVERSION)) {
        /* Not known, or an agent older than RESUME ("request before hello"). */
        drop_socket(c);
        resume_refused(c);
        return DLOCK_ENOTFOUND;
    }
    if (rc == 1)
        rc = DLOCK_ECONNECT; /* another refusal (it is stopping, out of memory): later */
    if (rc == 0)
        rc = take_pages_back(c);
    if (rc != 0) {
        drop_socket(c);
        return rc;
    }
    apply_hello_ok(c, &ok);
    c->resume_gen++;
    c->link = LINK_RESUMING;
    return 0;
}

/* A fresh connection, the agent having refused to take the old one back:
 * HELLO (version 2, else 1), new pages. 0: READY. */
static int reconnect_hello(dlock_client *c)
{
    int rc = connect_hello(c);
    if (rc != 0) {
        drop_socket(c);
        return rc;
    }
    c->need_hello = false;
    c->link = LINK_READY;
    return 0;
}

/* Arms the timer of the next attempt, ms from now. */
static int arm_retry(dlock_client *c, int ms)
{
    if (c->timer_fd < 0) {
        c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (c->timer_fd < 0)
            return DLOCK_ENOMEM;
    }
    struct itimerspec its = {
        .it_value = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000}};
    if (timerfd_settime(c->timer_fd, 0, &its, NULL) != 0)
        return DLOCK_ENOMEM;
    c->backoff_ms = ms;
    c->retry_at = now_ms() + ms;
    return 0;
}

/* Whether the next attempt is due: its time has come, or its timer fired
 * (which this drains). */
static bool retry_due(dlock_client *c)
{
    uint64_t fired = 0;
    bool due = read(c->timer_fd, &fired, sizeof fired) == (ssize_t)sizeof fired && fired;
    return due || now_ms() >= c->retry_at;
}

/* One attempt to bring the link up again, and the next one armed when it
 * fails: the socket unreachable, no answer, an agent that is stopping. */
static void attempt(dlock_client *c)
{
    int rc = c->need_hello ? DLOCK_ENOTFOUND : reconnect_resume(c);
    if (rc == DLOCK_ENOTFOUND)
        rc = reconnect_hello(c);
    if (rc == 0) {
        struct itimerspec off = {{0, 0}, {0, 0}};
        (void)timerfd_settime(c->timer_fd, 0, &off, NULL);
        c->backoff_ms = BACKOFF_MIN_MS;
        return;
    }
    if (rc == DLOCK_EPROTO || rc == DLOCK_ECLOCK) {
        client_fail(c, rc); /* not an agent this client can use */
        return;
    }
    int next = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
    if (arm_retry(c, next) != 0)
        client_fail(c, DLOCK_EDISCONNECTED);
}

/* The resumable link broke (client_break()): closes the socket, after the
 * whole frames it left are handled; puts every request in flight back to
 * wait for the link (an abandoned acquire or ping is dropped, a try-once
 * fails with DLOCK_EDISCONNECTED, a release marks its lease released in its
 * touch slot); tells each HELD lease it is in JEOPARDY (DLOCK_ERESTART);
 * and arms the first attempt. */
static void link_down(dlock_client *c)
{
    process_input(c);
    if (!c->link_lost || c->err)
        return; /* a blocking call of a callback did it already */
    c->link_lost = false;
    c->link = LINK_DOWN;
    drop_socket(c);
    struct pending *p, *next;
    for (p = TAILQ_FIRST(&c->pending); p; p = next) {
        next = TAILQ_NEXT(p, link);
        if (p->abandoned && p->kind != REQ_RELEASE) {
            pending_unlink(c, p);
            free(p);
            continue;
        }
        p->sent = false;
        p->again = true;
        if (p->kind == REQ_RELEASE)
            touch_mark_released(c, p->slot, p->lease_id);
        if (p->kind == REQ_ACQUIRE && p->opts.wait_ms == DLOCK_WAIT_NONE)
            p->fail = DLOCK_EDISCONNECTED;
    }
    dlock_lease *l;
    LIST_FOREACH(l, &c->leases, link)
    {
        int64_t d = state_is_final(l->state) ? 0 : page_deadline(l);
        l->down_deadline = d > boot_ns() ? d : 0; /* 0: not valid (in doubt, expired) */
        if (l->state == DLOCK_STATE_HELD)
            lease_mark(l, DLOCK_STATE_JEOPARDY, DLOCK_ERESTART);
    }
    if (arm_retry(c, BACKOFF_MIN_MS) != 0)
        client_fail(c, DLOCK_EDISCONNECTED);
    tell_marked(c);
}

/* Drives a link that is not up: takes one that broke down, completes the
 * requests that cannot wait for it, makes an attempt when one is due, and
 * sends what waited once it is up. From dispatch and blocking calls. */
static void drive(dlock_client *c)
{
    if (c->link_lost && !c->err)
        link_down(c);
    if (c->err || c->link == LINK_UP)
        return;
    if (c->link == LINK_READY) {
        go_up(c);
        return;
    }
    expire_unsent(c);
    if (c->link == LINK_DOWN)
        expire_leases(c);
    if (c->err || c->link != LINK_DOWN || !retry_due(c))
        return;
    attempt(c);
    tell_marked(c); /* LOST, when the agent refused to take the connection back */
    if (c->link == LINK_READY)
        go_up(c);
    else if (c->link == LINK_RESUMING)
        process_input(c); /* what came with HELLO_OK */
}

/* What dlock_client_dispatch() does: sends what a full socket kept back,
 * reads and handles what the agent sent, and drives a link that is not up. */
static void service(dlock_client *c)
{
    if (link_ok(c)) {
        if (c->out.len && can_send(c))
            (void)flush_nowait(c); /* releases left queued by a full socket */
        read_input(c);
    }
    bool was_up = can_send(c);
    drive(c);
    if (!was_up && link_ok(c))
        read_input(c); /* what a link taken up again brought */
    notify_broken(c);
}

/* Handles frames until w is done or timeout_ms (-1 = forever) has passed,
 * taking the link up again meanwhile when it breaks. Returns 0 (w->status
 * holds the outcome), DLOCK_ENOANSWER (the agent did not answer in time: not
 * a lock that stayed taken) or DLOCK_ENOMEM; the caller abandons its request
 * on an error. */
static int wait_for(dlock_client *c, struct waiter *w, int64_t timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    for (;;) {
        process_input(c);
        drive(c);
        notify_broken(c); /* completes w too when the connection broke */
        if (w->done)
            return 0;
        int ms = poll_timeout(deadline);
        if (ms == 0)
            return DLOCK_ENOANSWER;
        struct pollfd pfd = {.fd = dlock_client_fd(c), .events = POLLIN};
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno != EINTR)
            return DLOCK_ENOMEM;
        if (r > 0 && link_ok(c))
            read_input(c);
    }
}

/* ---- opening ---- */

/* Frees the client and everything it owns, without calling anybody. */
static void client_free(dlock_client *c)
{
    drop_socket(c);
    if (c->timer_fd >= 0)
        close(c->timer_fd);
    retire_pages(c);
    for (size_t i = 0; i < c->nretired; i++) {
        munmap((void *)c->retired[i].page, shm_page_size(c->retired[i].nslots));
        munmap(c->retired[i].touch, shm_touch_size(c->retired[i].nslots));
    }
    free(c->retired);
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
    while ((p = TAILQ_FIRST(&c->pending)) != NULL) {
        TAILQ_REMOVE(&c->pending, p, link);
        free(p);
    }
    idmap_free(&c->leases_by_id);
    idmap_free(&c->pending_by_id);
    wire_buf_free(&c->out);
    wire_buf_free(&c->in);
    free(c->path);
    free(c);
}

int dlock_client_open(dlock_client **out, const char *socket_path)
{
    return dlock_client_open_labeled(out, socket_path, NULL);
}

int dlock_client_open_labeled(dlock_client **out, const char *socket_path, const char *label)
{
    size_t label_len = label ? strlen(label) : 0;
    if (!out || label_len > DLOCK_LABEL_MAX)
        return DLOCK_EINVAL;
    if (!socket_path) {
        socket_path = getenv("DLOCK_SOCKET");
        if (!socket_path || !socket_path[0])
            socket_path = DEFAULT_SOCKET;
    }
    dlock_client *c = calloc(1, sizeof(*c));
    if (!c)
        return DLOCK_ENOMEM;
    c->fd = c->timer_fd = -1;
    c->rx_fds[0] = c->rx_fds[1] = -1;
    c->next_id = 1;
    c->link = LINK_UP;
    c->backoff_ms = BACKOFF_MIN_MS;
    TAILQ_INIT(&c->pending);
    if (label_len)
        memcpy(c->label, label, label_len);
    c->label_len = (uint16_t)label_len;
    c->path = strdup(socket_path);
    int rc = c->path ? connect_hello(c) : DLOCK_ENOMEM;
    if (rc != 0) {
        client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Callbacks are not allowed to call this on their own client (see the top of
 * this file). The agent releases the leases of a connection that closes;
 * one that died meanwhile, unseen (or that the client knows is restarting),
 * cannot: they are marked released for its successor (mark_all_released()). */
void dlock_client_close(dlock_client *client)
{
    if (!client)
        return;
    mark_all_released(client);
    client_free(client);
}

/* The socket, or, while the link is down, the timer of the next attempt. */
int dlock_client_fd(const dlock_client *client)
{
    if (!client)
        return DLOCK_EINVAL;
    return client->link == LINK_DOWN ? client->timer_fd : client->fd;
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
    service(client);
    return client->err ? DLOCK_EDISCONNECTED : 0;
}

/* A program that feeds reads the socket itself: it cannot follow the client
 * to another one, so its connection is never resumed (a link already down
 * or taken up again behind its back ends here). */
int dlock_client_feed(dlock_client *client, const void *data, size_t len)
{
    if (!client || (!data && len))
        return DLOCK_EINVAL;
    client->fed = true;
    if (!client->err && (client->link_lost || client->link != LINK_UP))
        client_fail(client, DLOCK_EDISCONNECTED);
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
    int rc = send_simple(client, REQ_PING, NULL, &w, &id);
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
    /* A try-once cannot wait for an agent that is restarting. */
    if (is_down(c) && opts->wait_ms == DLOCK_WAIT_NONE)
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
    p->opts = *opts;
    p->spec = *spec;
    if (opts->wait_ms > 0)
        p->wait_end = deadline_after(opts->wait_ms);
    *idp = p->id;
    return submit(c, p, true);
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
    /* Requests are filed in the order made: the first match is the oldest. */
    struct pending *p, *oldest = NULL;
    TAILQ_FOREACH(p, &client->pending, link)
    {
        if (p->kind == REQ_ACQUIRE && p->cb == cb && p->arg == arg && !p->cancelled) {
            oldest = p;
            break;
        }
    }
    if (!oldest)
        return DLOCK_ENOTFOUND;
    oldest->cancelled = true;
    if (client->err)
        return 0; /* its callback gets the broken connection's error */
    if (!can_send(client) || !oldest->sent)
        return 0; /* it waits for the link: completed with DLOCK_ECANCELED, unsent */
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
    int rc = send_simple(c, REQ_RELEASE, l, &w, &id);
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
        rc = release_nowait(c, lease->id, mark_slot(lease), verdict);
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

/* What the lease page says of the lease (slot_deadline()). A lease the
 * library already reported lost (the connection broke, or the agent's
 * successor did not take it over) is not valid either, whatever the page
 * still says. */
static int64_t page_deadline(const dlock_lease *lease)
{
    if (!lease || __atomic_load_n(&lease->gone, __ATOMIC_ACQUIRE))
        return 0;
    return slot_deadline(__atomic_load_n(&lease->slot, __ATOMIC_ACQUIRE), lease->id);
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
        __atomic_store_n(__atomic_load_n(&lease->touch, __ATOMIC_ACQUIRE), (uint64_t)boot_ns(),
                         __ATOMIC_RELAXED);
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
