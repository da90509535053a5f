/* SPDX-License-Identifier: BSD-3-Clause */
/* test_kinds.c -- the kinds of lock through libdlock, dlockctl and the wire:
 * re-entrant, shared (read-write) and counting-semaphore leases against a
 * real redis-server and dlockd in single mode, and the library's side of
 * them (what it sends, the re-entered handle) against a scripted agent. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
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

static const dlock_lock_spec EXCLUSIVE = {.kind = DLOCK_KIND_EXCLUSIVE};
static const dlock_lock_spec SHARED = {.kind = DLOCK_KIND_SHARED};

static dlock_lock_spec semaphore(uint32_t permits)
{
    return (dlock_lock_spec){.kind = DLOCK_KIND_SEMAPHORE, .permits = permits};
}

static dlock_lock_spec owned(uint32_t kind, uint64_t owner)
{
    return (dlock_lock_spec){.kind = kind, .owner = owner};
}

static int64_t boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the library against a scripted agent ----
 *
 * A thread stands in for dlockd on a socket of its own: it answers HELLO
 * with a lease page, grants every acquire (a re-entrant one by the owner of
 * a lease on the name with that lease again, its count raised), lowers the
 * count at each RELEASE, answers PING, and logs every request. No Redis. */

#define F_SLOTS  8
#define F_LOG    64
#define F_LEASES 8

struct f_req {
    uint16_t type;
    uint32_t flags;
    uint8_t kind;
    uint32_t permits;
    uint64_t owner;
    uint16_t nnames;
    char name[64];
    uint64_t lease_id; /* RELEASE */
};

struct f_lease {
    uint64_t id; /* 0: free */
    uint32_t slot;
    uint32_t holds;
    uint64_t owner;
    uint64_t fence;
    char name[64];
};

static struct {
    char dir[64];
    char sock[108];
    int lfd, fd;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    void *page;
    int fds[2];
    struct f_req log[F_LOG];
    int nlog;
    struct f_lease lease[F_LEASES];
    uint64_t next_fence;
    /* A re-entrant grant names the slot after the lease's (a broken agent). */
    bool regrant_other_slot;
} F;

static int f_nlog(void)
{
    pthread_mutex_lock(&F.mu);
    int n = F.nlog;
    pthread_mutex_unlock(&F.mu);
    return n;
}

static struct f_req f_req_at(int i)
{
    pthread_mutex_lock(&F.mu);
    struct f_req r = F.log[i];
    pthread_mutex_unlock(&F.mu);
    return r;
}

static uint32_t f_holds(uint64_t id)
{
    uint32_t n = 0;
    pthread_mutex_lock(&F.mu);
    for (int i = 0; i < F_LEASES; i++)
        if (F.lease[i].id == id)
            n = F.lease[i].holds;
    pthread_mutex_unlock(&F.mu);
    return n;
}

static bool f_read_all(int fd, void *buf, size_t n)
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

/* Sends b whole (under F.mu), then empties it. */
static void f_send(struct wire_buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = send(F.fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    b->len = 0;
}

/* HELLO_OK in the version the client's HELLO asked for. */
static void f_hello_ok(uint32_t id, uint16_t version)
{
    struct wire_buf b = {0};
    struct wire_hello_ok ok = {.version = version,
                               .max_name_len = 200,
                               .max_leases = F_SLOTS,
                               .default_ttl_ms = TTL,
                               .clock_ns = (uint64_t)boot_ns()};
    wire_put_hello_ok(&b, id, &ok);
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = b.data, .iov_len = b.len};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(cm), F.fds, 2 * sizeof(int));
    (void)sendmsg(F.fd, &msg, MSG_NOSIGNAL);
    wire_buf_free(&b);
}

/* The lease a re-entrant acquire re-enters, or a new one in a free slot. */
static void f_grant(uint32_t id, const struct f_req *r, struct wire_buf *b)
{
    struct f_lease *l = NULL;
    for (int i = 0; i < F_LEASES && (r->flags & WIRE_ACQ_REENTRANT); i++)
        if (F.lease[i].id && F.lease[i].owner == r->owner && strcmp(F.lease[i].name, r->name) == 0)
            l = &F.lease[i];
    if (l) {
        l->holds++;
    } else {
        for (int i = 0; i < F_LEASES && !l; i++)
            if (!F.lease[i].id)
                l = &F.lease[i];
        cr_assert_not_null(l, "the scripted agent is out of leases");
        l->slot = (uint32_t)(l - F.lease);
        l->id = (1ull << 32) | l->slot;
        l->holds = 1;
        l->owner = r->owner;
        l->fence = ++F.next_fence;
        snprintf(l->name, sizeof l->name, "%s", r->name);
    }
    int64_t deadline = boot_ns() + 60 * 1000000000LL;
    shm_slot_write(&shm_slots(F.page)[l->slot], DLOCK_STATE_HELD, l->id, l->fence, deadline);
    struct wire_granted g = {.lease_id = l->id,
                             .deadline_ns = (uint64_t)deadline,
                             .fence = l->fence,
                             .ttl_ms = TTL,
                             .slot = l->slot};
    if (l->holds > 1 && F.regrant_other_slot)
        g.slot = (l->slot + 1) % F_SLOTS;
    wire_put_granted(b, id, &g);
}

static void f_release(uint32_t id, uint64_t lease_id, struct wire_buf *b)
{
    for (int i = 0; i < F_LEASES; i++) {
        struct f_lease *l = &F.lease[i];
        if (l->id != lease_id)
            continue;
        if (--l->holds == 0) {
            shm_slot_write(&shm_slots(F.page)[l->slot], 0, 0, 0, 0);
            memset(l, 0, sizeof *l);
        }
        wire_put_empty(b, id, WIRE_T_OK);
        return;
    }
    struct wire_error e = {.code = DLOCK_ENOTFOUND, .msg = "no such lease", .msg_len = 13};
    wire_put_error(b, id, &e);
}

/* Logs one request and answers it. */
static void f_handle(const struct wire_hdr *h, const uint8_t *body)
{
    struct f_req r = {.type = h->type};
    struct wire_acquire m;
    struct wire_release rel;
    if (h->type == WIRE_T_ACQUIRE)
        cr_assert_eq(wire_get_acquire(body, h->len, &m), 0);
    if (h->type == WIRE_T_ACQUIRE_EX)
        cr_assert_eq(wire_get_acquire_ex(body, h->len, &m), 0);
    if (h->type == WIRE_T_ACQUIRE || h->type == WIRE_T_ACQUIRE_EX) {
        r.flags = m.flags;
        r.kind = m.kind;
        r.permits = m.permits;
        r.owner = m.owner;
        r.nnames = m.nnames;
        snprintf(r.name, sizeof r.name, "%.*s", (int)m.name_len, m.name);
    }
    if (h->type == WIRE_T_RELEASE) {
        cr_assert_eq(wire_get_release(body, h->len, &rel), 0);
        r.lease_id = rel.lease_id;
    }
    struct wire_buf b = {0};
    pthread_mutex_lock(&F.mu);
    if (F.nlog < F_LOG)
        F.log[F.nlog++] = r;
    if (h->type == WIRE_T_ACQUIRE || h->type == WIRE_T_ACQUIRE_EX)
        f_grant(h->id, &r, &b);
    else if (h->type == WIRE_T_RELEASE)
        f_release(h->id, r.lease_id, &b);
    else
        wire_put_empty(&b, h->id, WIRE_T_OK);
    f_send(&b);
    pthread_mutex_unlock(&F.mu);
    wire_buf_free(&b);
}

static void *f_serve(void *arg)
{
    (void)arg;
    F.fd = accept4(F.lfd, NULL, NULL, SOCK_CLOEXEC);
    if (F.fd < 0)
        return NULL;
    uint8_t hdr[WIRE_HDR_LEN], body[WIRE_MAX_BODY];
    struct wire_hdr h;
    while (f_read_all(F.fd, hdr, sizeof hdr) &&
           wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h) == 1 &&
           f_read_all(F.fd, body, h.len)) {
        struct wire_hello hello;
        if (h.type == WIRE_T_HELLO && wire_get_hello(body, h.len, &hello) == 0)
            f_hello_ok(h.id, hello.version);
        else
            f_handle(&h, body);
    }
    return NULL;
}

static int f_memfd(const char *name, size_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)size), 0);
    return fd;
}

static void f_setup(void)
{
    memset(&F, 0, sizeof F);
    F.lfd = F.fd = -1;
    pthread_mutex_init(&F.mu, NULL);
    snprintf(F.dir, sizeof F.dir, "/tmp/dlock-kinds.XXXXXX");
    cr_assert_not_null(mkdtemp(F.dir));
    snprintf(F.sock, sizeof F.sock, "%s/fake.sock", F.dir);
    F.fds[0] = f_memfd("fake-leases", shm_page_size(F_SLOTS));
    F.fds[1] = f_memfd("fake-touch", shm_touch_size(F_SLOTS));
    F.page = mmap(NULL, shm_page_size(F_SLOTS), PROT_READ | PROT_WRITE, MAP_SHARED, F.fds[0], 0);
    cr_assert_neq(F.page, MAP_FAILED);
    struct shm_hdr *hdr = F.page;
    hdr->magic = SHM_MAGIC;
    hdr->version = SHM_VERSION;
    hdr->slot_size = sizeof(struct shm_slot);
    hdr->nslots = F_SLOTS;
    F.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, F.sock, strlen(F.sock) + 1);
    cr_assert_eq(bind(F.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(F.lfd, 4), 0);
    cr_assert_eq(pthread_create(&F.th, NULL, f_serve, NULL), 0);
    F.started = true;
}

static void f_teardown(void)
{
    if (F.started) {
        shutdown(F.lfd, SHUT_RDWR);
        if (F.fd >= 0)
            shutdown(F.fd, SHUT_RDWR);
        pthread_join(F.th, NULL);
    }
    if (F.fd >= 0)
        close(F.fd);
    if (F.lfd >= 0)
        close(F.lfd);
    unlink(F.sock);
    rmdir(F.dir);
}

static dlock_client *f_client(void)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, F.sock);
    cr_assert_eq(rc, 0, "open the scripted agent: %s", dlock_strerror(rc));
    return c;
}

/* The agent's unsolicited event for a lease. */
static void f_event(uint64_t lease_id, dlock_state state, int reason)
{
    struct wire_buf b = {0};
    struct wire_event ev = {.lease_id = lease_id, .state = (uint16_t)state, .reason = reason};
    wire_put_event(&b, 0, &ev);
    pthread_mutex_lock(&F.mu);
    f_send(&b);
    pthread_mutex_unlock(&F.mu);
    wire_buf_free(&b);
}

static uint64_t f_lease_id_of(const char *name)
{
    uint64_t id = 0;
    pthread_mutex_lock(&F.mu);
    for (int i = 0; i < F_LEASES; i++)
        if (F.lease[i].id && strcmp(F.lease[i].name, name) == 0)
            id = F.lease[i].id;
    pthread_mutex_unlock(&F.mu);
    return id;
}

/* The file's one timeout (harness.h: Criterion leaks a shorter one's). */
#define LTEST(name)                                                                                \
    Test(kinds_lib, name, .init = f_setup, .fini = f_teardown, .timeout = H_TEST_TIMEOUT_S)

static int lacquire(dlock_client *c, const char *name, uint32_t flags, const dlock_lock_spec *spec,
                    dlock_lease **out)
{
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = DLOCK_WAIT_NONE, .flags = flags};
    return dlock_lease_acquire_spec(c, name, &o, spec, out);
}

/* An exclusive, non-re-entrant acquire owned by the client is a plain
 * ACQUIRE (an agent of any version takes it); every other one an ACQUIRE_EX
 * carrying what was asked. */
LTEST(plain_acquire_for_the_classic_lock_acquire_ex_otherwise)
{
    dlock_client *c = f_client();
    dlock_lease *l[7];
    dlock_lock_spec sem3 = semaphore(3), own = owned(DLOCK_KIND_EXCLUSIVE, 42),
                    own9 = owned(DLOCK_KIND_EXCLUSIVE, 9);
    dlock_acquire_options plain = {.ttl_ms = TTL},
                          re = {.ttl_ms = TTL, .flags = DLOCK_ACQUIRE_REENTRANT};
    cr_assert_eq(dlock_lease_acquire(c, "a", &plain, &l[0]), 0);
    cr_assert_eq(lacquire(c, "b", 0, &EXCLUSIVE, &l[1]), 0);
    cr_assert_eq(lacquire(c, "c", 0, &SHARED, &l[2]), 0);
    cr_assert_eq(lacquire(c, "d", 0, &sem3, &l[3]), 0);
    cr_assert_eq(lacquire(c, "e", DLOCK_ACQUIRE_REENTRANT, &own, &l[4]), 0);
    cr_assert_eq(dlock_lease_acquire(c, "f", &re, &l[5]), 0);
    cr_assert_eq(lacquire(c, "g", 0, &own9, &l[6]), 0);
    static const struct {
        uint16_t type;
        uint32_t flags;
        uint8_t kind;
        uint32_t permits;
        uint64_t owner;
        dlock_kind lease_kind;
    } want[] = {
        {WIRE_T_ACQUIRE, 0, 0, 0, 0, DLOCK_KIND_EXCLUSIVE},
        {WIRE_T_ACQUIRE, 0, 0, 0, 0, DLOCK_KIND_EXCLUSIVE},
        {WIRE_T_ACQUIRE_EX, 0, WIRE_KIND_SHARED, 0, 0, DLOCK_KIND_SHARED},
        {WIRE_T_ACQUIRE_EX, 0, WIRE_KIND_SEMAPHORE, 3, 0, DLOCK_KIND_SEMAPHORE},
        {WIRE_T_ACQUIRE_EX, WIRE_ACQ_REENTRANT, WIRE_KIND_EXCLUSIVE, 0, 42, DLOCK_KIND_EXCLUSIVE},
        {WIRE_T_ACQUIRE_EX, WIRE_ACQ_REENTRANT, WIRE_KIND_EXCLUSIVE, 0, 0, DLOCK_KIND_EXCLUSIVE},
        {WIRE_T_ACQUIRE_EX, 0, WIRE_KIND_EXCLUSIVE, 0, 9, DLOCK_KIND_EXCLUSIVE},
    };
    cr_assert_eq(f_nlog(), 7);
    for (int i = 0; i < 7; i++) {
        struct f_req r = f_req_at(i);
        cr_assert_eq(r.type, want[i].type, "request %d: type 0x%x", i, r.type);
        cr_assert_eq(r.flags, want[i].flags, "request %d: flags %u", i, r.flags);
        cr_assert_eq(r.kind, want[i].kind, "request %d: kind %u", i, r.kind);
        cr_assert_eq(r.permits, want[i].permits, "request %d: permits %u", i, r.permits);
        cr_assert_eq(r.owner, want[i].owner, "request %d: owner %llu", i,
                     (unsigned long long)r.owner);
        cr_assert_eq(r.nnames, 1);
        cr_assert_eq(r.name[0], 'a' + i);
        cr_assert_eq(dlock_lease_kind(l[i]), want[i].lease_kind, "lease %d", i);
        cr_assert_eq(dlock_lease_holds(l[i]), 1);
    }
    cr_assert_eq(dlock_lease_kind(NULL), DLOCK_KIND_EXCLUSIVE);
    cr_assert_eq(dlock_lease_holds(NULL), 0);
    dlock_client_close(c);
}

/* What the library refuses goes nowhere: DLOCK_EINVAL, nothing sent. */
LTEST(invalid_specs_are_refused_before_anything_is_sent)
{
    dlock_client *c = f_client();
    dlock_lease *l = NULL;
    dlock_lock_spec sem0 = semaphore(0), kind3 = {.kind = 3},
                    shared2 = {.kind = DLOCK_KIND_SHARED, .permits = 2},
                    excl1 = {.kind = DLOCK_KIND_EXCLUSIVE, .permits = 1};
    cr_assert_eq(lacquire(c, "x", 0x2, NULL, &l), DLOCK_EINVAL, "an unknown flag");
    cr_assert_eq(lacquire(c, "x", 0x80000000u, NULL, &l), DLOCK_EINVAL, "an unknown flag");
    cr_assert_eq(lacquire(c, "x", 0, &kind3, &l), DLOCK_EINVAL, "an unknown kind");
    cr_assert_eq(lacquire(c, "x", 0, &sem0, &l), DLOCK_EINVAL, "a semaphore of 0 permits");
    cr_assert_eq(lacquire(c, "x", 0, &shared2, &l), DLOCK_EINVAL, "permits of a shared lock");
    cr_assert_eq(lacquire(c, "x", 0, &excl1, &l), DLOCK_EINVAL, "permits of an exclusive lock");
    cr_assert_eq(dlock_lease_acquire_spec_async(c, "x", NULL, &kind3, NULL, NULL), DLOCK_EINVAL);
    cr_assert_null(l);
    cr_assert_eq(dlock_client_ping(c), 0);
    cr_assert_eq(f_nlog(), 1, "%d requests reached the agent", f_nlog());
    cr_assert_eq(f_req_at(0).type, WIRE_T_PING);
    dlock_client_close(c);
}

static void on_acq(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    struct h_acq *a = arg;
    (void)c;
    a->done = 1;
    a->status = status;
    a->lease = lease;
}

/* The agent answers a re-entrant acquire with the lease's id again: the
 * library hands back the same handle with one more hold, and each release
 * gives one up; the handle lives until the last. */
LTEST(a_reentered_lease_is_the_same_handle_and_each_release_gives_up_one_hold)
{
    dlock_client *c = f_client();
    dlock_lease *l1, *l2, *l3;
    cr_assert_eq(lacquire(c, "re", DLOCK_ACQUIRE_REENTRANT, NULL, &l1), 0);
    uint64_t id = f_lease_id_of("re");
    cr_assert_eq(lacquire(c, "re", DLOCK_ACQUIRE_REENTRANT, NULL, &l2), 0);
    cr_assert_eq(l2, l1, "a second handle for the same lease");
    struct h_acq a = {0};
    dlock_acquire_options o = {
        .ttl_ms = TTL, .wait_ms = DLOCK_WAIT_FOREVER, .flags = DLOCK_ACQUIRE_REENTRANT};
    cr_assert_eq(dlock_lease_acquire_spec_async(c, "re", &o, NULL, on_acq, &a), 0);
    while (!a.done)
        cr_assert_eq(dlock_client_dispatch(c), 0);
    cr_assert_eq(a.status, 0);
    cr_assert_eq(a.lease, l1, "the async acquire got another handle");
    l3 = a.lease;
    cr_assert_eq(dlock_lease_holds(l1), 3);
    cr_assert_eq(f_holds(id), 3);
    cr_assert_eq(dlock_lease_fence(l1), 1);

    cr_assert_eq(dlock_lease_release(l1), 0);
    cr_assert_eq(dlock_lease_holds(l1), 2);
    cr_assert(dlock_lease_valid(l1));
    cr_assert_eq(dlock_lease_release_sync(l2), 0);
    cr_assert_eq(f_holds(id), 1, "the agent's count: %u", f_holds(id));
    cr_assert_eq(dlock_lease_holds(l1), 1);
    cr_assert(dlock_lease_valid(l3));
    cr_assert_eq(dlock_lease_state(l3), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release_sync(l3), 0);
    cr_assert_eq(f_holds(id), 0);
    /* the handle is gone: a new acquire is a new lease of the agent */
    cr_assert_eq(lacquire(c, "re", DLOCK_ACQUIRE_REENTRANT, NULL, &l1), 0);
    cr_assert_eq(dlock_lease_holds(l1), 1);
    cr_assert_eq(dlock_lease_fence(l1), 2);
    int releases = 0;
    for (int i = 0; i < f_nlog(); i++)
        releases += f_req_at(i).type == WIRE_T_RELEASE;
    cr_assert_eq(releases, 3);
    dlock_client_close(c); /* frees the handle */
}

/* A re-entrant grant under a known lease id but another slot is the
 * agent's mistake: the connection breaks, the acquire fails with
 * DLOCK_EPROTO, and the lease is reported lost. */
static int lost_events;
static int lost_reason;

static void count_lost(dlock_client *c, dlock_lease *l, dlock_state s, int reason, void *arg)
{
    (void)c, (void)l, (void)arg;
    if (s == DLOCK_STATE_LOST) {
        lost_events++;
        lost_reason = reason;
    }
}

LTEST(a_reentrant_grant_in_another_slot_breaks_the_connection)
{
    dlock_client *c = f_client();
    dlock_client_set_event_cb(c, count_lost, NULL);
    dlock_lease *l, *l2 = NULL;
    cr_assert_eq(lacquire(c, "slot", DLOCK_ACQUIRE_REENTRANT, NULL, &l), 0);
    pthread_mutex_lock(&F.mu);
    F.regrant_other_slot = true;
    pthread_mutex_unlock(&F.mu);
    cr_assert_eq(lacquire(c, "slot", DLOCK_ACQUIRE_REENTRANT, NULL, &l2), DLOCK_EPROTO);
    cr_assert_null(l2);
    cr_assert_eq(lost_events, 1);
    cr_assert_eq(lost_reason, DLOCK_EPROTO);
    cr_assert_eq(dlock_lease_holds(l), 1);
    cr_assert_eq(dlock_lease_release(l), DLOCK_EDISCONNECTED);
    dlock_client_close(c);
}

/* A LOST event reaches the one handle once, whatever its holds; each
 * release then says so without sending anything, and the last frees it. */
LTEST(a_lost_reentered_lease_is_reported_once_and_released_hold_by_hold)
{
    dlock_client *c = f_client();
    lost_events = 0;
    dlock_client_set_event_cb(c, count_lost, NULL);
    dlock_lease *l, *l2;
    cr_assert_eq(lacquire(c, "lost", DLOCK_ACQUIRE_REENTRANT, NULL, &l), 0);
    cr_assert_eq(lacquire(c, "lost", DLOCK_ACQUIRE_REENTRANT, NULL, &l2), 0);
    cr_assert_eq(l2, l);
    f_event(f_lease_id_of("lost"), DLOCK_STATE_LOST, DLOCK_ELOST);
    cr_assert_eq(dlock_client_ping(c), 0); /* reads the event on the way */
    cr_assert_eq(lost_events, 1);
    cr_assert_eq(lost_reason, DLOCK_ELOST);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_LOST);
    int before = f_nlog();
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
    cr_assert_eq(dlock_lease_holds(l), 1);
    cr_assert_eq(dlock_lease_release_sync(l), DLOCK_ELOST);
    cr_assert_eq(dlock_client_ping(c), 0);
    cr_assert_eq(f_nlog(), before + 1, "a release of a lost lease reached the agent");
    cr_assert_eq(lost_events, 1);
    dlock_client_close(c);
}

/* A re-entrant acquire sent before a release of the lease's last hold is
 * granted first (the agent takes a connection's frames in order): the
 * release gives up one of two holds and the handle stays. */
LTEST(a_reentrant_grant_read_during_a_release_keeps_the_handle)
{
    dlock_client *c = f_client();
    dlock_lease *l;
    cr_assert_eq(lacquire(c, "race", DLOCK_ACQUIRE_REENTRANT, NULL, &l), 0);
    uint64_t id = f_lease_id_of("race");
    struct h_acq a = {0};
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = 0, .flags = DLOCK_ACQUIRE_REENTRANT};
    cr_assert_eq(dlock_lease_acquire_spec_async(c, "race", &o, NULL, on_acq, &a), 0);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    cr_assert(a.done, "the grant ahead of the release's OK was not delivered");
    cr_assert_eq(a.status, 0);
    cr_assert_eq(a.lease, l);
    cr_assert_eq(dlock_lease_holds(l), 1);
    cr_assert_eq(f_holds(id), 1);
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(dlock_client_ping(c), 0);
    cr_assert_eq(f_holds(id), 0);
    dlock_client_close(c);
}

/* The agent gone: every hold's release says so; the handle goes with the
 * last. */
LTEST(a_disconnected_reentered_lease_is_released_hold_by_hold)
{
    dlock_client *c = f_client();
    lost_events = 0;
    dlock_client_set_event_cb(c, count_lost, NULL);
    dlock_lease *l, *l2;
    cr_assert_eq(lacquire(c, "gone", DLOCK_ACQUIRE_REENTRANT, NULL, &l), 0);
    cr_assert_eq(lacquire(c, "gone", DLOCK_ACQUIRE_REENTRANT, NULL, &l2), 0);
    shutdown(F.fd, SHUT_RDWR);
    while (dlock_client_dispatch(c) == 0)
        ;
    cr_assert_eq(lost_events, 1);
    cr_assert_eq(lost_reason, DLOCK_EDISCONNECTED);
    cr_assert_eq(dlock_lease_release(l), DLOCK_EDISCONNECTED);
    cr_assert_eq(dlock_lease_holds(l), 1);
    cr_assert_eq(dlock_lease_release(l), DLOCK_EDISCONNECTED);
    dlock_client_close(c);
}

/* ---- against dlockd ---- */

static int acq(struct h_cl *cl, const char *name, int64_t wait_ms, uint32_t flags,
               const dlock_lock_spec *spec, dlock_lease **out)
{
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = wait_ms, .flags = flags};
    return dlock_lease_acquire_spec(cl->c, name, &o, spec, out);
}

static dlock_lease *must(struct h_cl *cl, const char *name, uint32_t flags,
                         const dlock_lock_spec *spec)
{
    dlock_lease *l = NULL;
    int rc = acq(cl, name, DLOCK_WAIT_NONE, flags, spec, &l);
    cr_assert_eq(rc, 0, "acquire %s (kind %u): %s (%d): %s", name, spec ? spec->kind : 0,
                 dlock_strerror(rc), rc, dlock_client_strerror(cl->c, rc));
    cr_assert_not_null(l);
    return l;
}

/* Starts an acquire that waits for ever, and makes sure the agent has
 * taken it (it handles a connection's frames in order: the ping's answer
 * comes after the acquire was queued). */
static void wait_async(struct h_cl *cl, const char *name, uint32_t flags,
                       const dlock_lock_spec *spec, struct h_acq *a)
{
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = DLOCK_WAIT_FOREVER, .flags = flags};
    h_acquire_spec_async(cl, name, &o, spec, a);
    cr_assert_eq(dlock_client_ping(cl->c), 0);
}

/* The agent has answered everything it would answer at once: a ping to each
 * client, whose answer comes behind anything queued for it before. */
static void settle(struct h_cl *const *cl, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(dlock_client_ping(cl[i]->c), 0);
    h_pump_all(5);
}

static void expect_rc(int rc, int want, const char *what, struct h_cl *cl)
{
    cr_assert_eq(rc, want, "%s: %s (%d), expected %s: %s", what, dlock_strerror(rc), rc,
                 dlock_strerror(want), dlock_client_strerror(cl->c, rc));
}

/* A process of its own takes name as spec (holds times, re-entrant when
 * more than once), writes "RC FENCE" to DIR/tag and waits to be killed. */
static pid_t kid_spawn(const char *tag, const char *name, const dlock_lock_spec *spec, int holds)
{
    char *path = h_keep(h_path(tag)), *tmp = h_keep(h_path("kid.tmp"));
    char *sock = h_keep(H.agent[0].sock);
    pid_t pid = h_fork();
    if (pid == 0) {
        dlock_client *c = NULL;
        int rc = dlock_client_open(&c, sock);
        uint64_t fence = 0;
        dlock_acquire_options o = {.ttl_ms = TTL,
                                   .wait_ms = DLOCK_WAIT_NONE,
                                   .flags = holds > 1 ? DLOCK_ACQUIRE_REENTRANT : 0};
        for (int i = 0; rc == 0 && i < holds; i++) {
            dlock_lease *l;
            rc = dlock_lease_acquire_spec(c, name, &o, spec, &l);
            if (rc == 0)
                fence = dlock_lease_fence(l);
        }
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "%d %llu\n", rc, (unsigned long long)fence);
            fclose(f);
            rename(tmp, path);
        }
        for (;;)
            pause();
    }
    return pid;
}

/* The kid's acquire result (waited for); its fence in *fence. */
static int kid_result(const char *tag, uint64_t *fence)
{
    const char *s;
    H_WAIT_UNTIL(H_EVENT_MS, (s = h_read_file(h_path(tag))) != NULL);
    int rc = 1;
    unsigned long long f = 0;
    cr_assert_eq(sscanf(s, "%d %llu", &rc, &f), 2, "kid wrote '%s'", s);
    *fence = f;
    return rc;
}

static void kid_kill(pid_t pid)
{
    kill(pid, SIGKILL);
    cr_assert_eq(h_wait_child(pid, H_EVENT_MS), 128 + SIGKILL);
}

/* ---- re-entrant ---- */

ITEST(kinds, reentrant_acquire_is_the_same_lease_with_a_count)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *l = must(a, "re", DLOCK_ACQUIRE_REENTRANT, NULL);
    char *tok = h_redis_get(h_key("re"));
    cr_assert(h_is_token(tok), "the exclusive kind keeps the classic key");
    uint64_t fence = dlock_lease_fence(l);
    int64_t deadline = dlock_lease_deadline_ns(l);

    dlock_lease *l2 = NULL, *l3 = NULL;
    expect_rc(acq(a, "re", DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, NULL, &l2), 0,
              "re-entrant try-once by the holder", a);
    expect_rc(acq(a, "re", DLOCK_WAIT_FOREVER, DLOCK_ACQUIRE_REENTRANT, NULL, &l3), 0,
              "re-entrant endless wait by the holder", a);
    cr_assert_eq(l2, l);
    cr_assert_eq(l3, l);
    cr_assert_eq(dlock_lease_holds(l), 3);
    cr_assert_eq(dlock_lease_fence(l), fence, "the fencing token changed on re-entry");
    cr_assert(dlock_lease_valid(l));
    cr_assert_geq(dlock_lease_deadline_ns(l), deadline);
    cr_assert_str_eq(h_redis_get(h_key("re")), tok, "the key changed on re-entry");

    dlock_lease *lb = NULL;
    expect_rc(acq(b, "re", DLOCK_WAIT_NONE, 0, NULL, &lb), DLOCK_EBUSY, "another client", b);
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    cr_assert_eq(dlock_lease_holds(l), 1);
    cr_assert(dlock_lease_valid(l), "a lease with a hold left is not valid");
    cr_assert_str_eq(h_redis_get(h_key("re")), tok, "the key went with a hold left");
    expect_rc(acq(b, "re", DLOCK_WAIT_NONE, 0, NULL, &lb), DLOCK_EBUSY,
              "another client, one hold left", b);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_KEY_GONE(h_key("re"));
    lb = must(b, "re", 0, NULL);
    cr_assert_gt(dlock_lease_fence(lb), fence);
    cr_assert_eq(dlock_lease_release(lb), 0);
}

/* A re-entrant acquire by the holder is granted at once even while others
 * wait; the waiter gets the lock only after the last hold is released. */
ITEST(kinds, reentry_goes_ahead_of_waiters_and_the_last_release_hands_over)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *l = must(a, "rw", DLOCK_ACQUIRE_REENTRANT, NULL);
    struct h_acq w;
    wait_async(b, "rw", 0, NULL, &w);
    dlock_lease *l2 = NULL;
    expect_rc(acq(a, "rw", DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, NULL, &l2), 0,
              "re-entry while another client waits", a);
    cr_assert_eq(l2, l);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    settle((struct h_cl *[]){a, b}, 2);
    cr_assert_eq(w.done, 0, "the waiter was granted while a hold was left");
    uint64_t fence = dlock_lease_fence(l);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s", dlock_strerror(w.status));
    cr_assert_gt(dlock_lease_fence(w.lease), fence);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(kinds, closing_the_client_releases_every_hold)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    for (int i = 0; i < 3; i++)
        must(a, "cl", DLOCK_ACQUIRE_REENTRANT, NULL);
    struct h_acq w;
    wait_async(b, "cl", 0, NULL, &w);
    h_client_close(a);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s", dlock_strerror(w.status));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(kinds, killing_a_reentrant_holder_releases_every_hold)
{
    h_start(NULL);
    pid_t kid = kid_spawn("kr", "kr", NULL, 2);
    uint64_t fence;
    cr_assert_eq(kid_result("kr", &fence), 0);
    struct h_cl *b = h_client();
    struct h_acq w;
    wait_async(b, "kr", 0, NULL, &w);
    kid_kill(kid);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s", dlock_strerror(w.status));
    cr_assert_gt(dlock_lease_fence(w.lease), fence);
}

/* The owner is the connection and the owner value: another owner on the
 * same client waits like anyone. */
ITEST(kinds, another_owner_on_the_same_client_waits)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lock_spec t1 = owned(DLOCK_KIND_EXCLUSIVE, 1), t2 = owned(DLOCK_KIND_EXCLUSIVE, 2);
    dlock_lease *l1 = must(a, "own", DLOCK_ACQUIRE_REENTRANT, &t1);
    dlock_lease *again = must(a, "own", DLOCK_ACQUIRE_REENTRANT, &t1);
    cr_assert_eq(again, l1);
    dlock_lease *l2 = NULL;
    expect_rc(acq(a, "own", DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, &t2, &l2), DLOCK_EBUSY,
              "another owner's try-once", a);
    struct h_acq w;
    wait_async(a, "own", DLOCK_ACQUIRE_REENTRANT, &t2, &w);
    cr_assert_eq(dlock_lease_release_sync(l1), 0);
    settle((struct h_cl *[]){a}, 1);
    cr_assert_eq(w.done, 0, "owner 2 was granted while owner 1 held a hold");
    uint64_t fence = dlock_lease_fence(l1);
    cr_assert_eq(dlock_lease_release_sync(l1), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "owner 2: %s", dlock_strerror(w.status));
    cr_assert_gt(dlock_lease_fence(w.lease), fence);
    cr_assert_eq(dlock_lease_holds(w.lease), 1);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* The flag is the re-entrant acquire's: a lease taken without it is
 * re-entered by its owner all the same. */
ITEST(kinds, a_lease_taken_without_the_flag_is_reentered_by_its_owner)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lock_spec t5 = owned(DLOCK_KIND_EXCLUSIVE, 5);
    dlock_lease *l0 = must(a, "plain0", 0, NULL), *l5 = must(a, "plain5", 0, &t5);
    cr_assert_eq(must(a, "plain0", DLOCK_ACQUIRE_REENTRANT, NULL), l0);
    cr_assert_eq(must(a, "plain5", DLOCK_ACQUIRE_REENTRANT, &t5), l5);
    cr_assert_eq(dlock_lease_holds(l0), 2);
    cr_assert_eq(dlock_lease_holds(l5), 2);
    dlock_lease *x = NULL;
    expect_rc(acq(a, "plain5", DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, NULL, &x), DLOCK_EBUSY,
              "owner 0 on owner 5's lease", a);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(dlock_lease_release_sync(l0), 0);
        cr_assert_eq(dlock_lease_release_sync(l5), 0);
    }
    H_KEY_GONE(h_key("plain0"));
    H_KEY_GONE(h_key("plain5"));
}

/* Without the flag a held name is DLOCK_EHELD as before; with it, a kind
 * other than the held lease's is DLOCK_EHELD too (no upgrade or
 * downgrade). */
ITEST(kinds, eheld_without_the_flag_and_for_another_kind)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = must(a, "eh", DLOCK_ACQUIRE_REENTRANT, NULL), *x = NULL;
    expect_rc(acq(a, "eh", DLOCK_WAIT_FOREVER, 0, NULL, &x), DLOCK_EHELD, "without the flag", a);
    expect_rc(acq(a, "eh", DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, &SHARED, &x), DLOCK_EHELD,
              "re-entrant shared on an exclusive hold", a);
    dlock_lease *s = must(a, "ek", DLOCK_ACQUIRE_REENTRANT, &SHARED);
    cr_assert_eq(dlock_lease_kind(s), DLOCK_KIND_SHARED);
    expect_rc(acq(a, "ek", DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, NULL, &x), DLOCK_EHELD,
              "re-entrant exclusive on a shared hold", a);
    cr_assert_eq(must(a, "ek", DLOCK_ACQUIRE_REENTRANT, &SHARED), s);
    cr_assert_eq(dlock_lease_holds(s), 2);
    cr_assert_null(x);
    cr_assert_eq(dlock_lease_holds(l), 1);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(dlock_lease_release(s), 0);
    cr_assert_eq(dlock_lease_release(s), 0);
}

/* ---- shared ---- */

/* Readers hold together; a writer waits for all of them; once it waits, a
 * new reader queues behind it; every grant's token is above every earlier
 * one's, whatever the kind. */
ITEST(kinds, readers_share_a_writer_waits_and_later_readers_queue_behind_it)
{
    h_start(NULL);
    struct h_cl *r[3] = {h_client(), h_client(), h_client()}, *w = h_client(), *late = h_client();
    dlock_lease *rl[3];
    uint64_t last = 0;
    for (int i = 0; i < 3; i++) {
        rl[i] = must(r[i], "rw", 0, &SHARED);
        cr_assert_eq(dlock_lease_kind(rl[i]), DLOCK_KIND_SHARED);
        cr_assert_gt(dlock_lease_fence(rl[i]), last, "reader %d's token is not above", i);
        last = dlock_lease_fence(rl[i]);
    }
    for (int i = 0; i < 3; i++)
        cr_assert(dlock_lease_valid(rl[i]), "reader %d not valid beside the others", i);
    dlock_lease *x = NULL;
    expect_rc(acq(w, "rw", DLOCK_WAIT_NONE, 0, NULL, &x), DLOCK_EBUSY, "writer's try-once", w);
    expect_rc(acq(late, "rw", DLOCK_WAIT_NONE, 0, &SHARED, &x), 0, "a reader while no writer waits",
              late);
    cr_assert_gt(dlock_lease_fence(x), last);
    last = dlock_lease_fence(x);
    cr_assert_eq(dlock_lease_release_sync(x), 0);

    struct h_acq wa, ra;
    wait_async(w, "rw", 0, NULL, &wa);
    x = NULL;
    expect_rc(acq(late, "rw", DLOCK_WAIT_NONE, 0, &SHARED, &x), DLOCK_EBUSY,
              "a reader's try-once while a writer waits", late);
    wait_async(late, "rw", 0, &SHARED, &ra);
    cr_assert_eq(dlock_lease_release_sync(rl[0]), 0);
    cr_assert_eq(dlock_lease_release_sync(rl[1]), 0);
    settle((struct h_cl *[]){w, late}, 2);
    cr_assert_eq(wa.done, 0, "the writer was granted beside a reader");
    cr_assert_eq(ra.done, 0, "a reader went ahead of the waiting writer");
    cr_assert_eq(dlock_lease_release_sync(rl[2]), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wa.done);
    cr_assert_eq(wa.status, 0, "writer: %s", dlock_strerror(wa.status));
    cr_assert_gt(dlock_lease_fence(wa.lease), last, "the writer's token is not above the readers'");
    settle((struct h_cl *[]){w, late}, 2);
    cr_assert_eq(ra.done, 0, "a reader was granted beside the writer");
    uint64_t wf = dlock_lease_fence(wa.lease);
    cr_assert_eq(dlock_lease_release_sync(wa.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, ra.done);
    cr_assert_eq(ra.status, 0, "late reader: %s", dlock_strerror(ra.status));
    cr_assert_gt(dlock_lease_fence(ra.lease), wf);
    cr_assert_eq(dlock_lease_release(ra.lease), 0);
}

/* Readers hold together however far apart they come: a reader that comes
 * long after the first (past any cohort of the agent's, or with handoffs
 * off) is granted beside it while no writer waits. */
ITEST(kinds, a_reader_long_after_the_first_is_granted_beside_it)
{
    h_start("cohort_ms = 1");
    struct h_cl *r1 = h_client(), *r2 = h_client(), *r3 = h_client();
    dlock_lease *l1 = must(r1, "late", 0, &SHARED);
    h_sleep_ms(50); /* well past the 1 ms cohort of l1's grant */
    dlock_lease *l2 = NULL;
    expect_rc(acq(r2, "late", DLOCK_WAIT_NONE, 0, &SHARED, &l2), 0,
              "a reader 50 ms after the first, try-once", r2);
    struct h_acq w;
    wait_async(r3, "late", 0, &SHARED, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "a waiting reader beside two: %s", dlock_strerror(w.status));
    cr_assert(dlock_lease_valid(l1) && dlock_lease_valid(l2) && dlock_lease_valid(w.lease));
    cr_assert_eq(dlock_lease_release(l1), 0);
    cr_assert_eq(dlock_lease_release(l2), 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(kinds, readers_hold_together_with_handoffs_off)
{
    h_start("cohort_handoffs = 0");
    struct h_cl *r1 = h_client(), *r2 = h_client();
    dlock_lease *l1 = must(r1, "noho", 0, &SHARED), *l2 = NULL;
    expect_rc(acq(r2, "noho", DLOCK_WAIT_NONE, 0, &SHARED, &l2), 0, "a second reader", r2);
    cr_assert_gt(dlock_lease_fence(l2), dlock_lease_fence(l1));
    cr_assert(dlock_lease_valid(l1) && dlock_lease_valid(l2));
}

/* Two owners of one client hold a name shared side by side: two leases. */
ITEST(kinds, two_owners_of_one_client_hold_shared_together)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lock_spec t1 = owned(DLOCK_KIND_SHARED, 1), t2 = owned(DLOCK_KIND_SHARED, 2);
    dlock_lease *l1 = must(a, "two", DLOCK_ACQUIRE_REENTRANT, &t1);
    dlock_lease *l2 = must(a, "two", DLOCK_ACQUIRE_REENTRANT, &t2);
    cr_assert_neq(l1, l2);
    cr_assert_gt(dlock_lease_fence(l2), dlock_lease_fence(l1));
    cr_assert(dlock_lease_valid(l1) && dlock_lease_valid(l2));
    dlock_lease *x = NULL;
    expect_rc(acq(b, "two", DLOCK_WAIT_NONE, 0, NULL, &x), DLOCK_EBUSY, "a writer's try-once", b);
    cr_assert_eq(dlock_lease_release(l1), 0);
    expect_rc(acq(b, "two", DLOCK_WAIT_NONE, 0, NULL, &x), DLOCK_EBUSY,
              "a writer's try-once beside one reader", b);
    cr_assert_eq(dlock_lease_release(l2), 0);
    struct h_acq w;
    wait_async(b, "two", 0, NULL, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "writer: %s", dlock_strerror(w.status));
}

ITEST(kinds, a_killed_reader_lets_the_writer_in)
{
    h_start(NULL);
    struct h_cl *r = h_client(), *w = h_client();
    pid_t kid = kid_spawn("kid", "kr", &SHARED, 1);
    uint64_t fence;
    cr_assert_eq(kid_result("kid", &fence), 0);
    dlock_lease *mine = must(r, "kr", 0, &SHARED);
    struct h_acq wa;
    wait_async(w, "kr", 0, NULL, &wa);
    cr_assert_eq(dlock_lease_release_sync(mine), 0);
    settle((struct h_cl *[]){w}, 1);
    cr_assert_eq(wa.done, 0, "the writer was granted beside the other reader");
    kid_kill(kid);
    H_WAIT_UNTIL(H_EVENT_MS, wa.done);
    cr_assert_eq(wa.status, 0, "writer: %s", dlock_strerror(wa.status));
    cr_assert_gt(dlock_lease_fence(wa.lease), fence);
}

/* ---- semaphore ---- */

ITEST(kinds, a_semaphore_admits_n_and_the_next_wait_in_order)
{
    h_start(NULL);
    struct h_cl *c[4] = {h_client(), h_client(), h_client(), h_client()};
    dlock_lock_spec two = semaphore(2);
    dlock_lease *p1 = must(c[0], "sem", 0, &two), *p2 = must(c[1], "sem", 0, &two), *x = NULL;
    cr_assert_eq(dlock_lease_kind(p1), DLOCK_KIND_SEMAPHORE);
    cr_assert_gt(dlock_lease_fence(p2), dlock_lease_fence(p1));
    cr_assert(dlock_lease_valid(p1) && dlock_lease_valid(p2));
    expect_rc(acq(c[2], "sem", DLOCK_WAIT_NONE, 0, &two, &x), DLOCK_EBUSY, "a third permit", c[2]);
    struct h_acq w3, w4;
    wait_async(c[2], "sem", 0, &two, &w3);
    wait_async(c[3], "sem", 0, &two, &w4);
    uint64_t last = dlock_lease_fence(p2);
    cr_assert_eq(dlock_lease_release_sync(p1), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w3.done);
    cr_assert_eq(w3.status, 0, "third: %s", dlock_strerror(w3.status));
    settle(c, 4);
    cr_assert_eq(w4.done, 0, "a third holder of 2 permits");
    cr_assert_gt(dlock_lease_fence(w3.lease), last);
    cr_assert(dlock_lease_valid(p2) && dlock_lease_valid(w3.lease));
    cr_assert_eq(dlock_lease_release_sync(p2), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w4.done);
    cr_assert_eq(w4.status, 0, "fourth: %s", dlock_strerror(w4.status));
    cr_assert_gt(dlock_lease_fence(w4.lease), dlock_lease_fence(w3.lease));
    cr_assert_eq(dlock_lease_release(w3.lease), 0);
    cr_assert_eq(dlock_lease_release(w4.lease), 0);
}

/* A name is one kind at a time, and a semaphore has one count. */
ITEST(kinds, mismatched_kinds_and_counts_are_ekind)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client(), *c = h_client();
    dlock_lock_spec two = semaphore(2), three = semaphore(3);
    dlock_lease *x = NULL;
    dlock_lease *p = must(a, "mm", 0, &two);
    expect_rc(acq(b, "mm", DLOCK_WAIT_NONE, 0, &three, &x), DLOCK_EKIND, "3 permits on 2", b);
    expect_rc(acq(b, "mm", DLOCK_WAIT_FOREVER, 0, &three, &x), DLOCK_EKIND,
              "3 permits on 2, waiting", b);
    expect_rc(acq(b, "mm", DLOCK_WAIT_NONE, 0, &SHARED, &x), DLOCK_EKIND, "shared on a semaphore",
              b);
    /* an exclusive acquire waits: the name is taken */
    expect_rc(acq(b, "mm", DLOCK_WAIT_NONE, 0, NULL, &x), DLOCK_EBUSY,
              "exclusive try-once on a semaphore", b);
    struct h_acq w;
    wait_async(b, "mm", 0, NULL, &w);
    cr_assert_eq(dlock_lease_release_sync(p), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "exclusive after the semaphore: %s", dlock_strerror(w.status));
    cr_assert_eq(dlock_lease_release_sync(w.lease), 0);

    dlock_lease *s = must(a, "ms", 0, &SHARED);
    expect_rc(acq(b, "ms", DLOCK_WAIT_NONE, 0, &two, &x), DLOCK_EKIND, "a semaphore on shared", b);
    cr_assert_eq(dlock_lease_release(s), 0);

    /* waited for as a semaphore of 2 (held exclusive): 3 is refused */
    dlock_lease *e = must(a, "mw", 0, NULL);
    struct h_acq w2;
    wait_async(b, "mw", 0, &two, &w2);
    expect_rc(acq(c, "mw", DLOCK_WAIT_NONE, 0, &three, &x), DLOCK_EKIND,
              "3 permits while 2 are waited for", c);
    cr_assert_null(x);
    cr_assert_eq(dlock_lease_release(e), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w2.done);
    cr_assert_eq(w2.status, 0, "semaphore waiter: %s", dlock_strerror(w2.status));
}

ITEST(kinds, a_killed_permit_holder_frees_its_permit)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lock_spec one = semaphore(1);
    pid_t kid = kid_spawn("kid", "kp", &one, 1);
    uint64_t fence;
    cr_assert_eq(kid_result("kid", &fence), 0);
    struct h_acq w;
    wait_async(a, "kp", 0, &one, &w);
    kid_kill(kid);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s", dlock_strerror(w.status));
    cr_assert_gt(dlock_lease_fence(w.lease), fence);
}

/* Two agents on one Redis stand for two hosts: readers of both hold
 * together, a semaphore counts the permits of both, and a mismatch found
 * on Redis is DLOCK_EKIND. */
ITEST(kinds, kinds_across_two_hosts)
{
    h_start_two(NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1), *c = h_client_at(1);
    dlock_lock_spec one = semaphore(1), two = semaphore(2);
    dlock_lease *ra = must(a, "xr", 0, &SHARED), *rb = NULL;
    expect_rc(acq(c, "xr", DLOCK_WAIT_NONE, 0, &SHARED, &rb), 0, "a reader on the other host", c);
    cr_assert_gt(dlock_lease_fence(rb), dlock_lease_fence(ra));
    dlock_lease *x = NULL;
    cr_assert_eq(dlock_lease_release_sync(rb), 0);
    expect_rc(acq(b, "xr", DLOCK_WAIT_NONE, 0, &two, &x), DLOCK_EKIND,
              "a semaphore on a reader of another host", b);
    expect_rc(acq(b, "xr", DLOCK_WAIT_NONE, 0, NULL, &x), DLOCK_EBUSY,
              "a writer on a reader of another host", b);

    dlock_lease *pa = must(a, "xp", 0, &one);
    expect_rc(acq(b, "xp", DLOCK_WAIT_NONE, 0, &one, &x), DLOCK_EBUSY,
              "the one permit, held on another host", b);
    expect_rc(acq(b, "xp", DLOCK_WAIT_NONE, 0, &two, &x), DLOCK_EKIND,
              "2 permits on 1 of another host", b);
    expect_rc(acq(b, "xp", DLOCK_WAIT_NONE, 0, &SHARED, &x), DLOCK_EKIND,
              "a reader on a semaphore of another host", b);
    struct h_acq w;
    wait_async(b, "xp", 0, &one, &w);
    cr_assert_eq(dlock_lease_release(pa), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "the permit across hosts: %s", dlock_strerror(w.status));
    cr_assert_eq(dlock_lease_release(ra), 0);
    cr_assert_null(x);
}

/* ---- every kind ---- */

/* Leases of every kind are renewed past their TTL, valid on the lease page
 * with a token, and lost by nobody. */
ITEST(kinds, every_kind_is_renewed_and_valid_on_the_lease_page)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lock_spec three = semaphore(3);
    const dlock_lock_spec *specs[] = {NULL, &SHARED, &three};
    const char *names[] = {"ttl-x", "ttl-s", "ttl-p"};
    dlock_lease *l[3];
    int64_t first[3];
    for (int i = 0; i < 3; i++) {
        dlock_acquire_options o = {.ttl_ms = 1000, .flags = i == 0 ? DLOCK_ACQUIRE_REENTRANT : 0};
        int rc = dlock_lease_acquire_spec(a->c, names[i], &o, specs[i], &l[i]);
        expect_rc(rc, 0, names[i], a);
        cr_assert_gt(dlock_lease_fence(l[i]), 0);
        cr_assert_eq(dlock_lease_ttl_ms(l[i]), 1000);
        first[i] = dlock_lease_deadline_ns(l[i]);
        cr_assert_leq(first[i], boot_ns() + 1000 * 1000000LL);
    }
    H_HOLDS_FOR(3500,
                dlock_lease_valid(l[0]) && dlock_lease_valid(l[1]) && dlock_lease_valid(l[2]));
    for (int i = 0; i < 3; i++) {
        cr_assert_gt(dlock_lease_deadline_ns(l[i]), first[i], "%s was not renewed", names[i]);
        cr_assert_eq(dlock_lease_state(l[i]), DLOCK_STATE_HELD);
        cr_assert_eq(a->nev, 0, "an event came");
        cr_assert_eq(dlock_lease_release(l[i]), 0);
    }
}

/* After the last release of every kind, no key that names the lock is
 * left on Redis (the waiting-hosts record may take its own short lapse). */
ITEST(kinds, nothing_that_names_the_lock_is_left_after_the_last_release)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lock_spec two = semaphore(2);
    dlock_lease *x = must(a, "fpx", DLOCK_ACQUIRE_REENTRANT, NULL);
    must(a, "fpx", DLOCK_ACQUIRE_REENTRANT, NULL);
    dlock_lease *s1 = must(a, "fps", 0, &SHARED), *s2 = must(b, "fps", 0, &SHARED);
    dlock_lease *p1 = must(a, "fpp", 0, &two), *p2 = must(b, "fpp", 0, &two);
    cr_assert_gt(h_redis_count_keys("*fp[xsp]*"), 0, "no key names a held lock");
    dlock_lease *all[] = {x, x, s1, s2, p1, p2};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(dlock_lease_release_sync(all[i]), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_count_keys("*fp[xsp]*") == 0);
}

/* ---- dlockctl ---- */

static pid_t ctl_bg(const char *const *args)
{
    return h_ctl_spawn(args);
}

ITEST(kinds, dlockctl_shared_runs_go_together_and_a_plain_run_waits_for_them)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    char s1[256], s2[256], s3[256];
    snprintf(s1, sizeof s1, "touch %s; while [ ! -e %s ]; do sleep 0.01; done", h_path("r1"),
             h_path("go"));
    snprintf(s2, sizeof s2, "touch %s; while [ ! -e %s ]; do sleep 0.01; done", h_path("r2"),
             h_path("go"));
    snprintf(s3, sizeof s3, "touch %s", h_path("w"));
    const char *a1[] = {"-s", sock, "run", "-S", "tbl", "--", "sh", "-c", s1, NULL};
    const char *a2[] = {"-s", sock, "run", "--shared", "tbl", "--", "sh", "-c", s2, NULL};
    const char *a3[] = {"-s", sock, "run", "-x", "tbl", "--", "sh", "-c", s3, NULL};
    pid_t p1 = ctl_bg(a1), p2 = ctl_bg(a2);
    H_WAIT_UNTIL(H_EVENT_MS, h_read_file(h_path("r1")) && h_read_file(h_path("r2")));
    int st = h_ctl(5000, "-s", sock, "run", "-n", "tbl", "--", "true", NULL);
    cr_assert_eq(st, 75, "a plain run -n beside two shared runs: exit %d", st);
    pid_t p3 = ctl_bg(a3);
    const char *ls;
    H_WAIT_UNTIL(H_EVENT_MS,
                 (ls = h_status_ask(0, "leases-json tbl\n")) && strstr(ls, "\"waiters\":1"));
    cr_assert_null(h_read_file(h_path("w")), "the plain run ran beside the shared ones");
    FILE *f = fopen(h_path("go"), "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(h_wait_child(p1, H_EVENT_MS), 0);
    cr_assert_eq(h_wait_child(p2, H_EVENT_MS), 0);
    cr_assert_eq(h_wait_child(p3, H_EVENT_MS), 0);
    cr_assert_not_null(h_read_file(h_path("w")));
}

ITEST(kinds, dlockctl_permits_bound_the_runs_and_a_mismatch_exits_70)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    char s1[256], s2[256];
    snprintf(s1, sizeof s1, "touch %s; while [ ! -e %s ]; do sleep 0.01; done", h_path("p1"),
             h_path("go"));
    snprintf(s2, sizeof s2, "touch %s; while [ ! -e %s ]; do sleep 0.01; done", h_path("p2"),
             h_path("go"));
    const char *a1[] = {"-s", sock, "run", "-p", "2", "enc", "--", "sh", "-c", s1, NULL};
    const char *a2[] = {"-s", sock, "run", "--permits", "2", "enc", "--", "sh", "-c", s2, NULL};
    pid_t p1 = ctl_bg(a1), p2 = ctl_bg(a2);
    H_WAIT_UNTIL(H_EVENT_MS, h_read_file(h_path("p1")) && h_read_file(h_path("p2")));
    int st = h_ctl(5000, "-s", sock, "run", "-n", "-p", "2", "enc", "--", "true", NULL);
    cr_assert_eq(st, 75, "a third of 2 permits: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "-n", "-p", "3", "enc", "--", "true", NULL);
    cr_assert_eq(st, 70, "3 permits on 2: exit %d", st);
    cr_assert(strstr(h_read_file(h_path("ctl.out")), "cannot lock enc"), "%s",
              h_read_file(h_path("ctl.out")));
    st = h_ctl(5000, "-s", sock, "run", "-n", "-S", "enc", "--", "true", NULL);
    cr_assert_eq(st, 70, "shared on a semaphore: exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "-p", "2", "-S", "enc", "--", "true", NULL);
    cr_assert_eq(st, 64, "-p with -S: exit %d", st);
    FILE *f = fopen(h_path("go"), "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(h_wait_child(p1, H_EVENT_MS), 0);
    cr_assert_eq(h_wait_child(p2, H_EVENT_MS), 0);
}

/* ---- the wire ---- */

#define ACQX_FIXED 40

/* Sends an ACQUIRE_EX of one name built by hand. */
static void raw_acquire_ex(int fd, uint32_t id, const char *name, uint32_t flags, uint8_t kind,
                           uint32_t permits, uint64_t owner, uint16_t nnames)
{
    const char *names[2] = {name, name};
    uint16_t lens[2] = {(uint16_t)strlen(name), (uint16_t)strlen(name)};
    struct wire_acquire m = {.ttl_ms = TTL,
                             .wait_ms = 0,
                             .flags = flags,
                             .kind = kind,
                             .permits = permits,
                             .owner = owner};
    struct wire_buf b = {0};
    cr_assert_eq(wire_put_acquire_ex(&b, id, &m, names, lens, nnames), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
}

/* The answer to request id (events skipped): its type; *code for ERROR. */
static int raw_reply(int fd, uint32_t id, int *code)
{
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    for (;;) {
        int r = h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body);
        cr_assert_eq(r, 1, "no answer to request %u", id);
        if (h.type == WIRE_T_EVENT)
            continue;
        cr_assert_eq(h.id, id);
        *code = 0;
        if (h.type == WIRE_T_ERROR) {
            struct wire_error e;
            cr_assert_eq(wire_get_error(body, h.len, &e), 0);
            *code = e.code;
        }
        return h.type;
    }
}

/* What the agent judges in an ACQUIRE_EX: DLOCK_EINVAL for what it does
 * not take, and the connection carries on; the classic lock as ACQUIRE_EX
 * is granted on the classic key. */
ITEST(kinds, acquire_ex_fields_the_agent_refuses_keep_the_connection)
{
    h_start(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    static const struct {
        const char *what;
        uint32_t flags;
        uint8_t kind;
        uint32_t permits;
        uint64_t owner;
        uint16_t nnames;
    } bad[] = {
        {"unknown kind", 0, 3, 0, 0, 1},
        {"kind 255", 0, 255, 0, 0, 1},
        {"semaphore of 0 permits", 0, WIRE_KIND_SEMAPHORE, 0, 0, 1},
        {"permits of a shared lock", 0, WIRE_KIND_SHARED, 2, 0, 1},
        {"permits of an exclusive lock", 0, WIRE_KIND_EXCLUSIVE, 1, 0, 1},
        {"an unknown flag", 0x2, WIRE_KIND_EXCLUSIVE, 0, 0, 1},
        {"two names", 0, WIRE_KIND_EXCLUSIVE, 0, 0, 2},
    };
    uint32_t id = 10;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++, id++) {
        raw_acquire_ex(fd, id, "bad", bad[i].flags, bad[i].kind, bad[i].permits, bad[i].owner,
                       bad[i].nnames);
        int code, t = raw_reply(fd, id, &code);
        cr_assert_eq(t, WIRE_T_ERROR, "%s: answered 0x%x", bad[i].what, t);
        cr_assert_eq(code, DLOCK_EINVAL, "%s: %s (%d)", bad[i].what, dlock_strerror(code), code);
    }
    cr_assert_eq(h_redis_count_keys("*bad*"), 0);
    raw_acquire_ex(fd, id, "plainex", 0, WIRE_KIND_EXCLUSIVE, 0, 0, 1);
    int code, t = raw_reply(fd, id, &code);
    cr_assert_eq(t, WIRE_T_GRANTED, "exclusive ACQUIRE_EX: 0x%x (%d)", t, code);
    cr_assert(h_is_token(h_redis_get(h_key("plainex"))), "not on the classic key");
    h_raw_close(fd);
    H_KEY_GONE(h_key("plainex"));
}

ITEST(kinds, a_malformed_acquire_ex_closes_the_connection)
{
    h_start(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    struct wire_buf b = {0};
    const char *name = "m";
    uint16_t len = 1;
    struct wire_acquire m = {.ttl_ms = TTL};
    cr_assert_eq(wire_put_acquire_ex(&b, 5, &m, &name, &len, 1), 0);
    b.data[WIRE_HDR_LEN + ACQX_FIXED] = 2; /* the name's length runs past the body */
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_ERROR);
    cr_assert_eq(h.id, 5);
    struct wire_error e;
    cr_assert_eq(wire_get_error(body, h.len, &e), 0);
    cr_assert_eq(e.code, DLOCK_EPROTO);
    cr_assert(e.msg_len == 17 && memcmp(e.msg, "malformed acquire", 17) == 0, "message '%.*s'",
              (int)e.msg_len, e.msg);
    cr_assert_eq(h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body), 0, "not closed");
    h_raw_close(fd);
}
