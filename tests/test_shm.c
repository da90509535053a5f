/* SPDX-License-Identifier: BSD-3-Clause */
/* test_shm.c -- the shared-memory lease page (docs/protocol.md, "Lease
 * page"): dlock_lease_valid() and dlock_lease_remaining_ns() follow grants,
 * renewals and loss; a paused holder whose agent is paused too finds its
 * lease invalid by itself and cannot write to a fenced resource; a stopped
 * agent's leases turn invalid at their deadline without a message; the page
 * is read-only and sealed for the client, private to its connection, and a
 * client that tramples its own mappings harms nobody else. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

#define NS_PER_MS 1000000ll
/* The longest validity a lease of ttl ms may show: TTL - drift (ttl/100 + 2). */
#define MAX_VALID(ttl) (((ttl) - (ttl) / 100 - 2) * NS_PER_MS)

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void agent_signal(int i, int sig)
{
    cr_assert(H.agent[i].pid > 0, "agent %d is not running", i);
    cr_assert_eq(kill(H.agent[i].pid, sig), 0);
}

/* ---- this process's own lease pages, found in /proc/self/maps ---- */

struct mapping {
    void *addr;
    size_t len;
};

/* Whether a line of /proc/self/maps maps a page of kind `tag`: a memfd of
 * that name ("dlock-leases" or "dlock-touch"), or, for a resumable
 * connection (protocol 2 with an agent that keeps a state directory), its
 * file in the state directory, NAME.page or NAME.touch. */
static int is_page_mapping(const char *line, const char *tag)
{
    char want[64];
    snprintf(want, sizeof want, "/memfd:%s", tag);
    if (strstr(line, want))
        return 1;
    const char *suffix = strcmp(tag, "dlock-leases") == 0 ? ".page" : ".touch";
    size_t n = strcspn(line, "\n"), k = strlen(suffix);
    return n >= k && strncmp(line + n - k, suffix, k) == 0;
}

/* Mappings of this process's pages of kind `tag` (is_page_mapping()). */
static int find_mappings(const char *tag, struct mapping *out, int max)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (!is_page_mapping(line, tag) || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        if (n < max) {
            out[n].addr = (void *)lo;
            out[n].len = hi - lo;
        }
        n++;
    }
    fclose(f);
    return n;
}

/* The one lease page of the one client of this process. */
static const void *my_lease_page(void)
{
    struct mapping m[4];
    int n = find_mappings("dlock-leases", m, 4);
    cr_assert_eq(n, 1, "%d lease-page mappings in this process, expected 1", n);
    const struct shm_hdr *h = m[0].addr;
    cr_assert_eq(h->magic, SHM_MAGIC);
    cr_assert_eq(h->version, SHM_VERSION);
    cr_assert_eq(h->slot_size, sizeof(struct shm_slot));
    cr_assert_geq(m[0].len, shm_page_size(h->nslots));
    return m[0].addr;
}

/* Slots of the page that are not free; the last one in *one. */
static int used_slots(const void *page, struct shm_slot *one)
{
    const struct shm_hdr *h = page;
    const struct shm_slot *s = shm_slots((void *)page);
    int n = 0;
    for (uint32_t i = 0; i < h->nslots; i++) {
        struct shm_slot c;
        cr_assert_eq(shm_slot_read(&s[i], &c), 0, "slot %u stays mid-write", i);
        if (c.state != 0 || c.lease_id != 0) {
            n++;
            *one = c;
        }
    }
    return n;
}

/* ---- raw connections that keep the lease-page descriptors ---- */

/* Sends HELLO on fd and reads HELLO_OK with its two descriptors. Returns 0,
 * or a negative step number; usable in a forked child (no assertions). */
static int hello_fds(int fd, int fds[2], struct wire_hello_ok *ok)
{
    fds[0] = fds[1] = -1;
    struct wire_buf b = {0};
    /* Version 1: its HELLO_OK is 24 bytes (version 2's is checked in
     * test_bad_input.c). */
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION_MIN};
    if (wire_put_hello(&b, 1, &m) != 0)
        return -1;
    ssize_t w = send(fd, b.data, b.len, MSG_NOSIGNAL);
    size_t len = b.len;
    wire_buf_free(&b);
    if (w != (ssize_t)len)
        return -2;
    uint8_t frame[WIRE_HDR_LEN + 24];
    if (h_raw_recv_fds(fd, frame, sizeof frame, fds) != 0)
        return -3;
    struct wire_hdr h;
    if (wire_hdr_decode(frame, WIRE_HDR_LEN, WIRE_MAX_BODY, &h) != 1 || h.type != WIRE_T_HELLO_OK ||
        h.len != 24 || wire_get_hello_ok(frame + WIRE_HDR_LEN, 24, ok) != 0)
        return -4;
    if (fds[0] < 0 || fds[1] < 0)
        return -5;
    return 0;
}

/* A plain connection to agent i, for forked children (no harness state). */
static int plain_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (fd < 0 || strlen(path) >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- state shared with forked children ---- */

struct shared {
    atomic_int cmd;  /* commands sent: the child runs one when cmd > done */
    atomic_int done; /* commands finished */
    atomic_int ticks;
    atomic_int ready; /* the child's acquire is done (rc set) */
    char op;
    int rc; /* the child's acquire result, then a command's result */
    int valid;
    int wrote;
    int state;
    uint64_t fence;
    int64_t page_deadline_ns; /* now + remaining, republished every tick */
    /* the fenced resource: remembers the highest fence, refuses lower ones */
    atomic_flag lock;
    uint64_t highest;
    int accepted, rejected;
};

static struct shared *shared_new(void)
{
    struct shared *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(s, MAP_FAILED);
    memset(s, 0, sizeof *s);
    atomic_flag_clear(&s->lock);
    return s;
}

/* A write to the fenced resource: 1 accepted, 0 refused (a lower fence than
 * one already seen). */
static int resource_write(struct shared *s, uint64_t fence)
{
    while (atomic_flag_test_and_set(&s->lock))
        ;
    int ok = fence >= s->highest;
    if (ok) {
        s->highest = fence;
        s->accepted++;
    } else {
        s->rejected++;
    }
    atomic_flag_clear(&s->lock);
    return ok;
}

/* Runs op in the child and waits for it to finish. */
static void child_do(struct shared *s, char op, int timeout_ms)
{
    s->op = op;
    int n = atomic_fetch_add(&s->cmd, 1) + 1;
    H_WAIT_UNTIL(timeout_ms, atomic_load(&s->done) >= n);
}

/* Child: holds `name` through its own client and runs commands: 'c' a write
 * only if dlock_lease_valid(), 'u' a write without the check, 'e' waits for
 * the LOST event, 'q' exits. Between commands it republishes its page
 * deadline and, with a progress deadline, touches the lease (every ~1 ms). */
static void holder_child(struct shared *s, const char *sock, const char *name, uint32_t ttl_ms,
                         uint32_t progress_ms)
{
    dlock_client *c = NULL;
    dlock_lease *l = NULL;
    int rc = dlock_client_open(&c, sock);
    if (rc == 0) {
        dlock_acquire_options o = {.ttl_ms = ttl_ms, .progress_ms = progress_ms};
        rc = dlock_lease_acquire(c, name, &o, &l);
    }
    if (rc == 0)
        s->fence = dlock_lease_fence(l);
    s->rc = rc;
    atomic_store(&s->ready, 1);
    if (rc != 0)
        _exit(1);
    int handled = 0;
    for (;;) {
        if (progress_ms)
            dlock_lease_touch(l);
        int64_t rem = dlock_lease_remaining_ns(l);
        if (rem > 0)
            s->page_deadline_ns = now_ns() + rem;
        atomic_fetch_add(&s->ticks, 1);
        if (atomic_load(&s->cmd) > handled) {
            switch (s->op) {
            case 'c':
                s->valid = dlock_lease_valid(l);
                s->wrote = s->valid ? resource_write(s, s->fence) : -1;
                break;
            case 'u':
                s->wrote = resource_write(s, s->fence);
                break;
            case 'e': {
                int64_t end = now_ns() + 3000 * NS_PER_MS;
                while (dlock_lease_state(l) != DLOCK_STATE_LOST && now_ns() < end) {
                    struct pollfd p = {.fd = dlock_client_fd(c), .events = POLLIN};
                    if (poll(&p, 1, 10) > 0)
                        dlock_client_dispatch(c);
                }
                s->state = dlock_lease_state(l);
                s->valid = dlock_lease_valid(l);
                break;
            }
            case 'q':
                dlock_client_close(c);
                _exit(0);
            }
            atomic_store(&s->done, ++handled);
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* ---- validity from the page ---- */

ITEST(shm, valid_after_grant_renewed_and_false_after_loss)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    int64_t t0 = now_ns();
    dlock_lease *l = h_must_acquire(a, "pg", 1500);
    cr_assert(dlock_lease_valid(l), "not valid right after the grant");
    /* Never more than TTL - drift (1500/100 + 2 ms) from now. */
    int64_t rem = dlock_lease_remaining_ns(l);
    cr_assert(rem > 0 && rem <= MAX_VALID(1500), "remaining %" PRId64 " ns after a 1500 ms grant",
              rem);
    cr_assert_leq(dlock_lease_deadline_ns(l), t0 + 1500 * NS_PER_MS,
                  "deadline later than send time + TTL");

    const void *page = my_lease_page();
    struct shm_slot s;
    cr_assert_eq(used_slots(page, &s), 1);
    cr_assert_eq(s.state, DLOCK_STATE_HELD);
    cr_assert_eq(s.fence, dlock_lease_fence(l), "page fence %" PRIu64 ", lease fence %" PRIu64,
                 s.fence, dlock_lease_fence(l));
    cr_assert_geq(s.deadline_ns, dlock_lease_deadline_ns(l));

    /* Renewals move the page's deadline: valid long past the first one. */
    int64_t first = dlock_lease_deadline_ns(l);
    H_HOLDS_FOR(3000, dlock_lease_valid(l) && dlock_lease_remaining_ns(l) <= MAX_VALID(1500));
    cr_assert_gt(now_ns(), first, "the grant's own deadline has not passed yet");
    cr_assert_eq(used_slots(page, &s), 1);
    cr_assert_gt(s.deadline_ns, first, "renewals did not move the deadline in the page");

    /* Loss: the key deleted behind the agent's back. */
    h_redis_del(h_key("pg"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    cr_assert_not(dlock_lease_valid(l), "valid after LOST");
    cr_assert_eq(dlock_lease_remaining_ns(l), 0);
    cr_assert_eq(used_slots(page, &s), 0, "the lost lease's slot was not freed");

    /* A second lease reuses the slot; the lost handle, still alive, is told
     * apart by its lease id. */
    dlock_lease *l2 = h_must_acquire(a, "pg2", 5000);
    cr_assert(dlock_lease_valid(l2));
    cr_assert_not(dlock_lease_valid(l), "a lost lease is valid again through a reused slot");
    cr_assert_eq(dlock_lease_remaining_ns(l), 0);
    cr_assert_eq(used_slots(page, &s), 1);
    cr_assert_eq(s.fence, dlock_lease_fence(l2));
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
    cr_assert(dlock_lease_valid(l2));
    cr_assert_eq(dlock_lease_release(l2), 0);
    /* The release does not wait for the agent: it frees the slot when it
     * reads the RELEASE. */
    H_WAIT_UNTIL(H_EVENT_MS, used_slots(page, &s) == 0);
}

ITEST(shm, loss_of_one_lease_leaves_the_other_valid)
{
    /* One client, two leases in two slots: the one whose key is overwritten
     * is lost, the other stays valid. */
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l1 = h_must_acquire(a, "one", 600); /* renewed every 200 ms: lost soon */
    dlock_lease *l2 = h_must_acquire(a, "two", 30000);
    cr_assert(dlock_lease_valid(l1) && dlock_lease_valid(l2));
    cr_assert_neq(dlock_lease_fence(l1), 0);
    h_redis_set_px(h_key("one"), "other", 10000);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l1, DLOCK_STATE_LOST) > 0);
    cr_assert_not(dlock_lease_valid(l1));
    H_HOLDS_FOR(300, dlock_lease_valid(l2));
    cr_assert_eq(dlock_lease_release(l2), 0);
    cr_assert_eq(dlock_lease_release(l1), DLOCK_ELOST);
}

/* ---- a paused holder behind a paused agent ---- */

/* Holder child on agent 0 and its agent both stopped past the deadline;
 * a holder on agent 1 takes the lock. Returns the shared state with the new
 * holder's lease in *lb (its fence written to the resource). */
static struct shared *paused_holder_setup(pid_t *child, struct h_cl **bout, dlock_lease **lb)
{
    h_start_two(NULL);
    struct shared *s = shared_new();
    char sock[sizeof H.agent[0].sock];
    memcpy(sock, H.agent[0].sock, sizeof sock);
    pid_t pid = h_fork();
    if (pid == 0)
        holder_child(s, sock, "fenced", 1500, 0);
    *child = pid;
    H_WAIT_UNTIL(5000, atomic_load(&s->ready));
    cr_assert_eq(s->rc, 0, "child's acquire: %s (%d)", dlock_strerror(s->rc), s->rc);
    uint64_t f1 = s->fence;
    child_do(s, 'c', 2000);
    cr_assert_eq(s->valid, 1, "the child's fresh lease is not valid");
    cr_assert_eq(s->wrote, 1, "the child's first write was refused");

    /* The agent first, so the page cannot move after the child's last look. */
    agent_signal(0, SIGSTOP);
    int t = atomic_load(&s->ticks);
    H_WAIT_UNTIL(H_EVENT_MS, atomic_load(&s->ticks) >= t + 2);
    cr_assert_eq(kill(pid, SIGSTOP), 0);
    int64_t deadline = s->page_deadline_ns;
    cr_assert_gt(deadline, 0);
    H_WAIT_UNTIL(H_EVENT_MS, now_ns() > deadline && !h_redis_exists(h_key("fenced")));

    struct h_cl *b = h_client_at(1);
    int rc = h_acquire(b, "fenced", 5000, H_EVENT_MS, lb);
    cr_assert_eq(rc, 0, "second holder: %s (%d)", dlock_strerror(rc), rc);
    uint64_t f2 = dlock_lease_fence(*lb);
    cr_assert_gt(f2, f1, "new holder's fence %" PRIu64 " not above the old %" PRIu64, f2, f1);
    cr_assert(dlock_lease_valid(*lb));
    cr_assert_eq(resource_write(s, f2), 1, "the new holder's write was refused");
    cr_assert_eq(kill(pid, SIGCONT), 0);
    *bout = b;
    return s;
}

/* Agent 0 comes back: it finds the child's lease past its deadline and says
 * LOST, without touching the new holder's key. */
static void paused_holder_finish(struct shared *s, pid_t pid, struct h_cl *b, dlock_lease *lb)
{
    char *tok = h_redis_get(h_key("fenced"));
    cr_assert(h_is_token(tok));
    agent_signal(0, SIGCONT);
    child_do(s, 'e', 5000);
    cr_assert_eq(s->state, DLOCK_STATE_LOST, "old holder in state %d after its agent resumed",
                 s->state);
    cr_assert_eq(s->valid, 0);
    H_HOLDS_FOR(300, h_events(b, lb, DLOCK_STATE_LOST) == 0 && dlock_lease_valid(lb));
    char *now = h_redis_get(h_key("fenced"));
    cr_assert_not_null(now, "the new holder's key is gone");
    cr_assert_str_eq(now, tok, "the new holder's key changed");
    s->op = 'q'; /* the child exits without answering */
    atomic_fetch_add(&s->cmd, 1);
    cr_assert_eq(h_wait_child(pid, 3000), 0, "holder child did not exit cleanly");
}

ITEST(shm, paused_holder_sees_invalid_lease_and_does_not_write)
{
    pid_t pid;
    struct h_cl *b;
    dlock_lease *lb;
    struct shared *s = paused_holder_setup(&pid, &b, &lb);
    child_do(s, 'c', 2000);
    cr_assert_eq(s->valid, 0, "the paused holder still sees its lease valid");
    cr_assert_eq(s->wrote, -1);
    cr_assert_eq(s->accepted, 2, "accepted writes: %d (old holder once, new holder once)",
                 s->accepted);
    cr_assert_eq(s->rejected, 0, "stale writes reached the resource: %d", s->rejected);
    cr_assert_eq(s->highest, dlock_lease_fence(lb));
    paused_holder_finish(s, pid, b, lb);
    cr_assert_eq(dlock_lease_release(lb), 0);
    munmap(s, sizeof *s);
}

ITEST(shm, paused_holder_writing_anyway_is_refused_by_the_fence)
{
    pid_t pid;
    struct h_cl *b;
    dlock_lease *lb;
    struct shared *s = paused_holder_setup(&pid, &b, &lb);
    child_do(s, 'u', 2000);
    cr_assert_eq(s->wrote, 0, "the resource took a write with a stale fence");
    cr_assert_eq(s->rejected, 1);
    cr_assert_eq(s->accepted, 2);
    cr_assert_eq(s->highest, dlock_lease_fence(lb), "the stale write lowered the fence");
    paused_holder_finish(s, pid, b, lb);
    cr_assert_eq(dlock_lease_release(lb), 0);
    munmap(s, sizeof *s);
}

/* A holder process stops (SIGSTOP) while its agent runs on. With a progress
 * deadline, renewal stops; the lease is lost, the key deleted, and another
 * client gets the lock. Resumed, the old holder finds its lease invalid (the
 * agent freed its slot) and its stale write is refused by the fence. */
ITEST(shm, stopped_holder_with_progress_deadline_loses_its_lease)
{
    h_start(NULL);
    struct shared *s = shared_new();
    char sock[sizeof H.agent[0].sock];
    memcpy(sock, H.agent[0].sock, sizeof sock);
    pid_t pid = h_fork();
    if (pid == 0)
        holder_child(s, sock, "hung", 1000, 1000);
    H_WAIT_UNTIL(5000, atomic_load(&s->ready));
    cr_assert_eq(s->rc, 0, "child's acquire: %s (%d)", dlock_strerror(s->rc), s->rc);
    /* Touching, the child keeps its lease across several renewals. */
    struct h_cl *b = h_client();
    H_HOLDS_FOR(2500, h_redis_exists(h_key("hung")));
    child_do(s, 'c', 2000);
    cr_assert_eq(s->wrote, 1, "the touching holder's lease is not valid");

    cr_assert_eq(kill(pid, SIGSTOP), 0);
    int64_t t0 = h_now_ms();
    dlock_lease *lb = NULL;
    int rc = h_acquire(b, "hung", 5000, H_EVENT_MS, &lb);
    cr_assert_eq(rc, 0, "lock not freed from a stopped holder: %s (%d)", dlock_strerror(rc), rc);
    cr_log_info("lock changed hands %lld ms after the holder stopped",
                (long long)(h_now_ms() - t0));
    cr_assert_gt(dlock_lease_fence(lb), s->fence);
    cr_assert_eq(resource_write(s, dlock_lease_fence(lb)), 1);

    cr_assert_eq(kill(pid, SIGCONT), 0);
    child_do(s, 'c', 2000);
    cr_assert_eq(s->valid, 0, "the resumed holder still sees its lease valid");
    child_do(s, 'u', 2000);
    cr_assert_eq(s->wrote, 0, "the resource took the resumed holder's stale write");
    cr_assert_eq(s->accepted, 2);
    cr_assert_eq(s->rejected, 1);
    child_do(s, 'e', 5000);
    cr_assert_eq(s->state, DLOCK_STATE_LOST);
    s->op = 'q';
    atomic_fetch_add(&s->cmd, 1);
    cr_assert_eq(h_wait_child(pid, 3000), 0);
    cr_assert(dlock_lease_valid(lb));
    cr_assert_eq(dlock_lease_release(lb), 0);
    munmap(s, sizeof *s);
}

/* ---- a stopped, stopping or dead agent ---- */

ITEST(shm, agent_shutdown_invalidates_at_once)
{
    /* SIGTERM releases every lease: the holder's page must say so before
     * anyone else can take the lock (long TTL: the deadline is far away). */
    h_start_two(NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *la = h_must_acquire(a, "sd", 30000);
    cr_assert(dlock_lease_valid(la));
    struct h_acq w;
    h_acquire_async(b, "sd", 30000, 5000, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    cr_assert_eq(h_agent_stop(0), 0);
    H_WAIT_UNTIL(3000, w.done);
    cr_assert_eq(w.status, 0, "other agent's waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_not(dlock_lease_valid(la), "valid after the agent released it at shutdown");
    cr_assert_eq(dlock_lease_remaining_ns(la), 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(shm, killed_agent_lease_invalid_before_another_agent_grants)
{
    /* kill -9: the key runs out by its TTL; by the time another agent is
     * granted the lock, the old holder's page deadline has passed. */
    h_start_two(NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *la = h_must_acquire(a, "kx", 1500);
    struct h_acq w;
    h_acquire_async(b, "kx", 5000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    h_pump_all(50);
    cr_assert(dlock_lease_valid(la));
    h_agent_kill(0);
    int64_t end = h_deadline(H_EVENT_MS);
    while (!w.done) {
        cr_assert_lt(h_now_ms(), end, "the other agent never got the lock");
        h_pump(b, 1);
    }
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_not(dlock_lease_valid(la), "two holders valid at once after kill -9 of an agent");
    cr_assert_gt(dlock_lease_fence(w.lease), dlock_lease_fence(la));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(shm, stopped_agent_lease_turns_invalid_at_its_deadline)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "stopped", 1500);
    h_pump_all(50);
    agent_signal(0, SIGSTOP);
    /* The deadline, between lo and hi (the clock read around the page's). */
    int64_t lo = now_ns();
    int64_t rem = dlock_lease_remaining_ns(l);
    int64_t hi = now_ns() + rem;
    lo += rem;
    cr_assert(rem > 0 && rem <= MAX_VALID(1500), "remaining %" PRId64 " ns", rem);
    /* The page alone turns it invalid at the deadline, as each look shows
     * whenever the test gets to it: valid seen at or after `before` means
     * `before` was not past the deadline; invalid seen no later than
     * `after` means `after` was not before it. */
    for (;;) {
        int64_t before = now_ns();
        bool valid = dlock_lease_valid(l);
        int64_t after = now_ns();
        if (!valid) {
            cr_assert_geq(after, lo - NS_PER_MS, "invalid %" PRId64 " us before the deadline",
                          (lo - after) / 1000);
            break;
        }
        cr_assert_leq(before, hi, "valid %" PRId64 " us after the deadline", (before - hi) / 1000);
        h_pump_all(1);
    }
    cr_assert_eq(dlock_lease_remaining_ns(l), 0);
    /* Nothing came from the (stopped) agent: this was the page alone. */
    cr_assert_eq(a->nev, 0, "%d event(s) from a stopped agent", a->nev);
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    H_HOLDS_FOR(200, !dlock_lease_valid(l) && dlock_lease_remaining_ns(l) == 0);

    agent_signal(0, SIGCONT);
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    cr_assert_not(dlock_lease_valid(l));
    cr_assert_eq(h_events(a, l, DLOCK_STATE_HELD), 0, "HELD reported after the deadline passed");
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
    /* The agent works on. */
    dlock_lease *l2 = h_must_acquire(a, "stopped", 5000);
    cr_assert(dlock_lease_valid(l2));
    cr_assert_eq(dlock_lease_release(l2), 0);
}

/* ---- the page is read-only, sealed and private ---- */

enum {
    RO_OK,
    RO_CONNECT,
    RO_HELLO,
    RO_FSTAT,
    RO_SIZE,
    RO_MAP_RW,
    RO_MAP_RO,
    RO_HEADER,
    RO_MPROTECT,
    RO_WRITE,
    RO_TRUNC_PAGE,
    RO_GROW_PAGE,
    RO_TRUNC_TOUCH,
    RO_GROW_TOUCH,
    RO_SEALS,
    RO_ADD_SEAL,
    RO_REOPEN,
    RO_TOUCH_MAP,
    RO_NCHECKS
};

static const char *const ro_what[RO_NCHECKS] = {
    [RO_CONNECT] = "connect to the agent",
    [RO_HELLO] = "HELLO with two descriptors",
    [RO_FSTAT] = "fstat of the descriptors",
    [RO_SIZE] = "page and touch sizes match max_leases",
    [RO_MAP_RW] = "a writable shared mapping of the lease page was allowed",
    [RO_MAP_RO] = "a read-only mapping of the lease page failed",
    [RO_HEADER] = "the page header (magic, version, slot size, nslots)",
    [RO_MPROTECT] = "mprotect(PROT_WRITE) of the read-only mapping was allowed",
    [RO_WRITE] = "write() to the lease page was allowed",
    [RO_TRUNC_PAGE] = "ftruncate() shrank the lease page",
    [RO_GROW_PAGE] = "ftruncate() grew the lease page",
    [RO_TRUNC_TOUCH] = "ftruncate() shrank the touch page",
    [RO_GROW_TOUCH] = "ftruncate() grew the touch page",
    [RO_SEALS] = "the lease page lacks a seal (future-write, shrink, grow, seal)",
    [RO_ADD_SEAL] = "F_ADD_SEALS was allowed on a page sealed with F_SEAL_SEAL",
    [RO_REOPEN] = "a writable mapping through /proc/self/fd was allowed",
    [RO_TOUCH_MAP] = "the touch page cannot be mapped read-write",
};

/* Child: every check on the two descriptors; exits with the first that
 * failed (RO_OK when none did). */
static int ro_checks(const char *sock)
{
    int fd = plain_connect(sock);
    if (fd < 0)
        return RO_CONNECT;
    int fds[2];
    struct wire_hello_ok ok;
    if (hello_fds(fd, fds, &ok) != 0)
        return RO_HELLO;
    struct stat st[2];
    if (fstat(fds[0], &st[0]) != 0 || fstat(fds[1], &st[1]) != 0)
        return RO_FSTAT;
    size_t size = shm_page_size(ok.max_leases), tsize = shm_touch_size(ok.max_leases);
    if ((size_t)st[0].st_size != size || (size_t)st[1].st_size != tsize)
        return RO_SIZE;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (p != MAP_FAILED || errno != EPERM)
        return RO_MAP_RW;
    p = mmap(NULL, size, PROT_READ, MAP_SHARED, fds[0], 0);
    if (p == MAP_FAILED)
        return RO_MAP_RO;
    const struct shm_hdr *h = p;
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION ||
        h->slot_size != sizeof(struct shm_slot) || h->nslots != ok.max_leases)
        return RO_HEADER;
    if (mprotect(p, size, PROT_READ | PROT_WRITE) == 0)
        return RO_MPROTECT;
    char x = 1;
    if (pwrite(fds[0], &x, 1, 100) >= 0)
        return RO_WRITE;
    if (ftruncate(fds[0], 0) == 0)
        return RO_TRUNC_PAGE;
    if (ftruncate(fds[0], (off_t)size * 2) == 0)
        return RO_GROW_PAGE;
    if (ftruncate(fds[1], 0) == 0)
        return RO_TRUNC_TOUCH;
    if (ftruncate(fds[1], (off_t)tsize * 2) == 0)
        return RO_GROW_TOUCH;
    int seals = fcntl(fds[0], F_GET_SEALS);
    int want = F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (seals < 0 || (seals & want) != want)
        return RO_SEALS;
    if (fcntl(fds[1], F_ADD_SEALS, F_SEAL_WRITE) == 0 ||
        fcntl(fds[0], F_ADD_SEALS, F_SEAL_WRITE) == 0)
        return RO_ADD_SEAL;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
    int again = open(path, O_RDWR | O_CLOEXEC);
    if (again >= 0) {
        void *q = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0);
        if (q != MAP_FAILED || pwrite(again, &x, 1, 100) >= 0)
            return RO_REOPEN;
        close(again);
    }
    void *t = mmap(NULL, tsize, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    if (t == MAP_FAILED)
        return RO_TOUCH_MAP;
    return RO_OK;
}

ITEST(shm, lease_page_is_read_only_and_sealed)
{
    h_start("max_leases_per_conn = 64");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "victim", 30000);
    char sock[sizeof H.agent[0].sock];
    memcpy(sock, H.agent[0].sock, sizeof sock);

    pid_t pid = h_fork();
    if (pid == 0)
        _exit(ro_checks(sock));
    int st = h_wait_child(pid, 5000);
    cr_assert(st >= 0 && st < RO_NCHECKS, "checking child: status %d", st);
    cr_assert_eq(st, RO_OK, "%s", ro_what[st]);

    /* Writing through the read-only mapping faults. */
    pid = h_fork();
    if (pid == 0) {
        int fd = plain_connect(sock), fds[2];
        struct wire_hello_ok ok;
        if (fd < 0 || hello_fds(fd, fds, &ok) != 0)
            _exit(2);
        volatile uint32_t *p =
            mmap(NULL, shm_page_size(ok.max_leases), PROT_READ, MAP_SHARED, fds[0], 0);
        if (p == MAP_FAILED)
            _exit(3);
        p[0] = 0; /* the magic */
        _exit(4);
    }
    st = h_wait_child(pid, 5000);
    cr_assert_eq(st, 128 + SIGSEGV, "write through the read-only page: status %d", st);

    /* Nobody else noticed. */
    H_HOLDS_FOR(300, dlock_lease_valid(l) && a->nev == 0);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(shm, each_connection_has_its_own_page)
{
    h_start("max_leases_per_conn = 64");
    int ca = h_raw_connect(0), cb = h_raw_connect(0);
    int fa[2], fb[2];
    struct wire_hello_ok oka, okb;
    cr_assert_eq(hello_fds(ca, fa, &oka), 0);
    cr_assert_eq(hello_fds(cb, fb, &okb), 0);
    cr_assert_eq(oka.max_leases, 64);
    struct stat sa[2], sb[2];
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fstat(fa[i], &sa[i]), 0);
        cr_assert_eq(fstat(fb[i], &sb[i]), 0);
        cr_assert(sa[i].st_ino != sb[i].st_ino || sa[i].st_dev != sb[i].st_dev,
                  "two connections share their %s page", i == 0 ? "lease" : "touch");
    }
    cr_assert(sa[0].st_ino != sa[1].st_ino, "lease page and touch page are one file");
    size_t size = shm_page_size(64);
    const void *pa = mmap(NULL, size, PROT_READ, MAP_SHARED, fa[0], 0);
    const void *pb = mmap(NULL, size, PROT_READ, MAP_SHARED, fb[0], 0);
    cr_assert(pa != MAP_FAILED && pb != MAP_FAILED);
    for (int i = 0; i < 2; i++) {
        close(fa[i]);
        close(fb[i]);
    }

    struct wire_buf b = {0};
    struct wire_acquire m = {.ttl_ms = 5000, .name = "mine", .name_len = 4};
    cr_assert_eq(wire_put_acquire(&b, 2, &m), 0);
    cr_assert_eq(h_raw_send_buf(ca, &b), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(ca, 3000, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_GRANTED, "acquire answered with 0x%x", h.type);
    struct wire_granted g;
    cr_assert_eq(wire_get_granted(body, h.len, &g), 0);
    cr_assert_lt(g.slot, 64);

    struct shm_slot s;
    cr_assert_eq(shm_slot_read(&shm_slots((void *)pa)[g.slot], &s), 0);
    cr_assert_eq(s.state, DLOCK_STATE_HELD);
    cr_assert_eq(s.lease_id, g.lease_id);
    cr_assert_eq(s.fence, g.fence);
    cr_assert_eq(s.deadline_ns, (int64_t)g.deadline_ns);
    cr_assert_eq(s.seq % 2, 0);
    struct shm_slot one;
    cr_assert_eq(used_slots(pa, &one), 1);
    static const uint8_t zero[64 * sizeof(struct shm_slot)];
    cr_assert_eq(memcmp(shm_slots((void *)pb), zero, sizeof zero), 0,
                 "the other connection's page shows something");
    const struct shm_hdr *hb = pb;
    cr_assert_eq(hb->magic, SHM_MAGIC);

    /* Release: the slot is freed (state 0, id 0). */
    struct wire_release r = {.lease_id = g.lease_id};
    cr_assert_eq(wire_put_release(&b, 3, &r), 0);
    cr_assert_eq(h_raw_send_buf(ca, &b), 0);
    cr_assert_eq(h_raw_read_frame(ca, 3000, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_OK);
    cr_assert_eq(shm_slot_read(&shm_slots((void *)pa)[g.slot], &s), 0);
    cr_assert_eq(s.state, 0);
    cr_assert_eq(s.lease_id, 0);
    cr_assert_eq(memcmp(shm_slots((void *)pb), zero, sizeof zero), 0);
    munmap((void *)pa, size);
    munmap((void *)pb, size);
}

/* deadline_ns is one value in GRANTED, the lease page and EVENT
 * (docs/protocol.md): nanoseconds on CLOCK_BOOTTIME with bit 63 clear, so
 * that the wire's u64 and the page's int64_t agree. A maximum hold of 50 ms
 * stops renewal before the first one, so the grant's deadline holds until
 * the lease is lost: JEOPARDY carries it, and LOST carries its reason (a
 * code, not 0) and deadline 0, and leaves the slot free. */
ITEST(shm, one_deadline_in_granted_page_and_events)
{
    h_start(NULL);
    int fd = h_raw_connect(0);
    int fds[2];
    struct wire_hello_ok ok;
    cr_assert_eq(hello_fds(fd, fds, &ok), 0);
    size_t size = shm_page_size(ok.max_leases);
    const void *page = mmap(NULL, size, PROT_READ, MAP_SHARED, fds[0], 0);
    cr_assert(page != MAP_FAILED);
    close(fds[0]);
    close(fds[1]);

    int64_t before = now_ns();
    struct wire_buf b = {0};
    struct wire_acquire m = {.ttl_ms = 3000, .max_hold_ms = 50, .name = "one", .name_len = 3};
    cr_assert_eq(wire_put_acquire(&b, 2, &m), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_GRANTED, "acquire answered with 0x%x", h.type);
    struct wire_granted g;
    cr_assert_eq(wire_get_granted(body, h.len, &g), 0);
    cr_assert_eq(g.deadline_ns >> 63, 0, "bit 63 set: %" PRIu64, g.deadline_ns);
    cr_assert_gt((int64_t)g.deadline_ns, before);
    cr_assert_leq((int64_t)g.deadline_ns, now_ns() + MAX_VALID(3000));
    struct shm_slot s;
    cr_assert_eq(shm_slot_read(&shm_slots((void *)page)[g.slot], &s), 0);
    cr_assert_eq(s.lease_id, g.lease_id);
    cr_assert(s.state == DLOCK_STATE_HELD || s.state == DLOCK_STATE_JEOPARDY, "state %u", s.state);
    cr_assert_eq(s.deadline_ns, (int64_t)g.deadline_ns);

    struct wire_event ev;
    cr_assert_eq(h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_EVENT, "0x%x", h.type);
    cr_assert_eq(h.id, 0);
    cr_assert_eq(wire_get_event(body, h.len, &ev), 0);
    cr_assert_eq(ev.lease_id, g.lease_id);
    cr_assert_eq(ev.state, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(ev.reason, DLOCK_EHOLDLIMIT);
    cr_assert_eq(ev.deadline_ns, g.deadline_ns, "JEOPARDY's deadline is not the grant's");
    cr_assert_eq(shm_slot_read(&shm_slots((void *)page)[g.slot], &s), 0);
    cr_assert_eq(s.state, DLOCK_STATE_JEOPARDY);
    cr_assert_eq(s.deadline_ns, (int64_t)ev.deadline_ns);

    cr_assert_eq(h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body), 1);
    cr_assert_eq(h.type, WIRE_T_EVENT, "0x%x", h.type);
    cr_assert_eq(wire_get_event(body, h.len, &ev), 0);
    cr_assert_eq(ev.lease_id, g.lease_id);
    cr_assert_eq(ev.state, DLOCK_STATE_LOST);
    cr_assert_eq(ev.reason, DLOCK_EHOLDLIMIT, "LOST with reason %d", ev.reason);
    cr_assert_eq(ev.deadline_ns, 0);
    cr_assert_eq(shm_slot_read(&shm_slots((void *)page)[g.slot], &s), 0);
    cr_assert_eq(s.state, 0);
    cr_assert_eq(s.lease_id, 0);
    cr_assert_eq(s.deadline_ns, 0);
    munmap((void *)page, size);
}

/* ---- the seqlock: a reader never sees half a write ---- */

#define TORN_CYCLES     400  /* grant and release cycles at least */
#define TORN_MAX_CYCLES 8000 /* ... and on, until the reader has seen a few */
#define TORN_SEEN       4096

struct torn {
    const struct shm_slot *slot;
    atomic_int stop, nseen;
    int gave_up;
    long reads;
    struct shm_slot seen[TORN_SEEN];
};

/* Reads the slot as fast as it can, keeping every distinct value seen. */
static void *torn_reader(void *arg)
{
    struct torn *t = arg;
    struct shm_slot last = {0};
    while (!atomic_load(&t->stop)) {
        struct shm_slot c;
        t->reads++;
        if (shm_slot_read(t->slot, &c) != 0) {
            t->gave_up++;
            continue;
        }
        if (c.state == last.state && c.lease_id == last.lease_id && c.fence == last.fence &&
            c.deadline_ns == last.deadline_ns)
            continue;
        last = c;
        int n = atomic_load(&t->nseen);
        if (n < TORN_SEEN) {
            t->seen[n] = c;
            atomic_store(&t->nseen, n + 1);
        }
    }
    return NULL;
}

ITEST(shm, page_reads_are_never_torn)
{
    /* One slot rewritten by grant and release, hundreds of times, while a
     * thread reads it: every copy it gets is a whole grant or a free slot. */
    h_start("max_leases_per_conn = 4");
    int fd = h_raw_connect(0), fds[2];
    struct wire_hello_ok ok;
    cr_assert_eq(hello_fds(fd, fds, &ok), 0);
    const void *page = mmap(NULL, shm_page_size(4), PROT_READ, MAP_SHARED, fds[0], 0);
    cr_assert_neq(page, MAP_FAILED);
    close(fds[0]);
    close(fds[1]);
    static struct torn t;
    memset(&t, 0, sizeof t);
    t.slot = &shm_slots((void *)page)[0];
    static struct wire_granted g[TORN_MAX_CYCLES];
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, torn_reader, &t), 0);
    /* On a busy machine the reader may get no CPU for a while: the cycles go
     * on until it has seen a few values (or for long). */
    int64_t end = h_deadline(10000);
    int cycles = 0;
    for (int i = 0; i < TORN_MAX_CYCLES; i++, cycles++) {
        if (i >= TORN_CYCLES && (atomic_load(&t.nseen) > 8 || h_now_ms() > end))
            break;
        struct wire_buf b = {0};
        struct wire_acquire m = {.ttl_ms = 30000, .name = "torn", .name_len = 4};
        struct wire_release r;
        struct wire_hdr h;
        uint8_t body[WIRE_MAX_BODY];
        if (wire_put_acquire(&b, 1, &m) != 0 || h_raw_send_buf(fd, &b) != 0 ||
            h_raw_read_frame(fd, 3000, &h, body, sizeof body) != 1 || h.type != WIRE_T_GRANTED ||
            wire_get_granted(body, h.len, &g[i]) != 0) {
            atomic_store(&t.stop, 1);
            pthread_join(th, NULL);
            cr_assert_fail("cycle %d: no grant (frame 0x%x)", i, h.type);
        }
        r.lease_id = g[i].lease_id;
        if (g[i].slot != 0 || wire_put_release(&b, 2, &r) != 0 || h_raw_send_buf(fd, &b) != 0 ||
            h_raw_read_frame(fd, 3000, &h, body, sizeof body) != 1 || h.type != WIRE_T_OK) {
            atomic_store(&t.stop, 1);
            pthread_join(th, NULL);
            cr_assert_fail("cycle %d: slot %u, or no OK to the release", i, g[i].slot);
        }
    }
    atomic_store(&t.stop, 1);
    pthread_join(th, NULL);
    int nseen = atomic_load(&t.nseen);
    cr_log_info("%d cycles, %ld reads, %d distinct values, %d gave up", cycles, t.reads, nseen,
                t.gave_up);
    cr_assert_gt(nseen, 2, "the reader saw (almost) nothing change");
    for (int k = 0; k < nseen; k++) {
        const struct shm_slot *c = &t.seen[k];
        cr_assert_eq(c->seq % 2, 0);
        if (c->state == 0) {
            cr_assert(c->lease_id == 0 && c->fence == 0 && c->deadline_ns == 0,
                      "torn read: a free slot with id %" PRIx64 " fence %" PRIu64, c->lease_id,
                      c->fence);
            continue;
        }
        cr_assert_eq(c->state, DLOCK_STATE_HELD);
        int found = 0;
        for (int i = 0; i < cycles && !found; i++)
            found = g[i].lease_id == c->lease_id && g[i].fence == c->fence &&
                    (int64_t)g[i].deadline_ns == c->deadline_ns;
        cr_assert(found,
                  "torn read: id %" PRIx64 " fence %" PRIu64 " deadline %" PRId64 " is no grant's",
                  c->lease_id, c->fence, c->deadline_ns);
    }
    munmap((void *)page, shm_page_size(4));
}

/* Child: holds a lease with a progress deadline, then writes garbage over
 * its touch page and unmaps both of its pages behind the library's back. */
static void trampler_child(struct shared *s, const char *sock)
{
    /* The parent's client's pages came along with fork(): ours are the
     * mappings that are new after our dlock_client_open(). */
    struct mapping old_t[4], old_p[4], t[4], p[4];
    int nt0 = find_mappings("dlock-touch", old_t, 4), np0 = find_mappings("dlock-leases", old_p, 4);
    dlock_client *c = NULL;
    dlock_lease *l = NULL;
    int rc = dlock_client_open(&c, sock);
    if (rc == 0) {
        dlock_acquire_options o = {.ttl_ms = 300, .progress_ms = 200};
        rc = dlock_lease_acquire(c, "trampler", &o, &l);
    }
    if (rc == 0) {
        int nt = find_mappings("dlock-touch", t, 4), np = find_mappings("dlock-leases", p, 4);
        if (nt != nt0 + 1 || np != np0 + 1 || nt > 4 || np > 4)
            rc = -100;
        struct mapping *mt = NULL, *mp = NULL;
        for (int i = 0; rc == 0 && i < nt; i++) {
            int seen = 0;
            for (int j = 0; j < nt0; j++)
                seen |= old_t[j].addr == t[i].addr;
            if (!seen)
                mt = &t[i];
        }
        for (int i = 0; rc == 0 && i < np; i++) {
            int seen = 0;
            for (int j = 0; j < np0; j++)
                seen |= old_p[j].addr == p[i].addr;
            if (!seen)
                mp = &p[i];
        }
        if (rc == 0 && (!mt || !mp))
            rc = -101;
        if (rc == 0) {
            uint8_t *tb = mt->addr;
            for (size_t i = 0; i < mt->len; i++)
                tb[i] = (uint8_t)(i * 37 + 0xa5);
            memset(tb, 0xff, 8);
            munmap(mt->addr, mt->len);
            munmap(mp->addr, mp->len);
            rc = dlock_client_ping(c);
        }
    }
    s->rc = rc;
    atomic_store(&s->ready, 1);
    /* Keep the connection open until told to go; never touch the pages. */
    while (atomic_load(&s->cmd) < 1) {
        struct pollfd pf = {.fd = dlock_client_fd(c), .events = POLLIN};
        poll(&pf, 1, 5);
    }
    _exit(0);
}

ITEST(shm, client_trampling_its_pages_harms_nobody_else)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "bystander", 1500);
    const void *page = my_lease_page();
    struct shared *s = shared_new();
    char sock[sizeof H.agent[0].sock];
    memcpy(sock, H.agent[0].sock, sizeof sock);
    pid_t pid = h_fork();
    if (pid == 0)
        trampler_child(s, sock);
    H_WAIT_UNTIL(5000, atomic_load(&s->ready));
    cr_assert_eq(s->rc, 0, "trampling child: %d", s->rc);

    /* Several renewals of both leases go by. */
    H_HOLDS_FOR(2000, dlock_lease_valid(l) && a->nev == 0 && h_agent_alive(0));
    cr_assert_eq(dlock_client_ping(a->c), 0);
    struct shm_slot one;
    cr_assert_eq(used_slots(page, &one), 1);
    cr_assert_eq(one.state, DLOCK_STATE_HELD);
    cr_assert_eq(one.fence, dlock_lease_fence(l));
    cr_assert_gt(one.deadline_ns, now_ns());

    atomic_store(&s->cmd, 1);
    cr_assert_eq(h_wait_child(pid, 3000), 0);
    H_KEY_GONE(h_key("trampler"));
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(dlock_lease_release(l), 0);
    munmap(s, sizeof *s);
}
