/* SPDX-License-Identifier: BSD-3-Clause */
/* rawclient.c -- a raw protocol-2 client for the restart tests (see
 * rawclient.h). */
#include "rawclient.h"

#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int64_t rc_boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Reads HELLO_OK (version 2) with its descriptors and maps the pages. No
 * assertion: 0 or a negative step (usable in a forked child). */
static int read_hello_ok(struct rc *c, uint32_t len)
{
    uint8_t frame[WIRE_HDR_LEN + 48];
    int fds[2] = {-1, -1};
    struct wire_hdr h;
    if (h_raw_recv_fds(c->fd, frame, WIRE_HDR_LEN + len, fds) != 0)
        return -1;
    if (wire_hdr_decode(frame, WIRE_HDR_LEN, WIRE_MAX_BODY, &h) != 1 || h.type != WIRE_T_HELLO_OK ||
        wire_get_hello_ok(frame + WIRE_HDR_LEN, h.len, &c->ok) != 0 || fds[0] < 0 || fds[1] < 0)
        return -2;
    if (!c->slots) {
        void *page = mmap(NULL, shm_page_size(c->ok.max_leases), PROT_READ, MAP_SHARED, fds[0], 0);
        void *touch = mmap(NULL, shm_touch_size(c->ok.max_leases), PROT_READ | PROT_WRITE,
                           MAP_SHARED, fds[1], 0);
        if (page == MAP_FAILED || touch == MAP_FAILED)
            return -3;
        c->slots = shm_slots(page);
        c->touch = touch;
    }
    close(fds[0]);
    close(fds[1]);
    return 0;
}

static int send_frames(int fd, struct wire_buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    int rc = off == b->len ? 0 : -1;
    wire_buf_free(b);
    return rc;
}

int rc_open_raw(struct rc *c, const char *sock, uint16_t version)
{
    memset(c, 0, sizeof *c);
    c->next_id = 2;
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return -10;
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = version};
    if (wire_put_hello(&b, 1, &m) != 0 || send_frames(c->fd, &b) != 0)
        return -11;
    return read_hello_ok(c, version >= 2 ? 48 : 24);
}

void rc_open(struct rc *c, uint16_t version)
{
    int rc = rc_open_raw(c, H.agent[0].sock, version);
    cr_assert_eq(rc, 0, "HELLO failed at step %d", rc);
}

int rc_acquire_raw(struct rc *c, const char *name, uint32_t ttl_ms, struct wire_granted *g)
{
    struct wire_buf b = {0};
    struct wire_acquire m = {.ttl_ms = ttl_ms, .name = name, .name_len = (uint16_t)strlen(name)};
    uint32_t id = c->next_id++;
    if (wire_put_acquire(&b, id, &m) != 0 || send_frames(c->fd, &b) != 0)
        return -100;
    for (;;) {
        struct wire_hdr h;
        uint8_t body[WIRE_MAX_BODY];
        if (h_raw_read_frame(c->fd, 5000, &h, body, sizeof body) != 1)
            return -101;
        if (h.id != id)
            continue; /* an event */
        if (h.type == WIRE_T_GRANTED)
            return wire_get_granted(body, h.len, g) == 0 ? 0 : -102;
        struct wire_error e;
        return h.type == WIRE_T_ERROR && wire_get_error(body, h.len, &e) == 0 ? e.code : -103;
    }
}

struct wire_granted rc_acquire(struct rc *c, const char *name, uint32_t ttl_ms)
{
    struct wire_granted g;
    int rc = rc_acquire_raw(c, name, ttl_ms, &g);
    cr_assert_eq(rc, 0, "acquire of %s: %d", name, rc);
    return g;
}

struct shm_slot rc_slot(const struct rc *c, uint32_t i)
{
    struct shm_slot s;
    cr_assert_eq(shm_slot_read(&c->slots[i], &s), 0);
    return s;
}

int rc_valid(const struct rc *c, uint32_t i, uint64_t lease_id)
{
    struct shm_slot s = rc_slot(c, i);
    return s.lease_id == lease_id && (s.state == DLOCK_STATE_HELD) && s.deadline_ns > rc_boot_ns();
}

struct resumed rc_resume(struct rc *c, uint64_t conn_id, const uint8_t *secret)
{
    struct resumed r = {0};
    int old = c->fd;
    c->fd = h_raw_connect(0);
    struct wire_buf b = {0};
    struct wire_resume m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION, .conn_id = conn_id};
    memcpy(m.secret, secret, sizeof m.secret);
    cr_assert_eq(wire_put_resume(&b, 1, &m), 0);
    cr_assert_eq(wire_put_empty(&b, 2, WIRE_T_PING), 0);
    cr_assert_eq(send_frames(c->fd, &b), 0);
    uint8_t peek[WIRE_HDR_LEN];
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, h_scaled_ms(5000)), 1, "no answer to RESUME");
    cr_assert_eq(recv(c->fd, peek, sizeof peek, MSG_PEEK | MSG_WAITALL), WIRE_HDR_LEN);
    struct wire_hdr h;
    cr_assert_eq(wire_hdr_decode(peek, sizeof peek, WIRE_MAX_BODY, &h), 1);
    if (h.type == WIRE_T_ERROR) {
        uint8_t body[WIRE_MAX_BODY];
        cr_assert_eq(h_raw_read_frame(c->fd, 5000, &h, body, sizeof body), 1);
        struct wire_error e;
        cr_assert_eq(wire_get_error(body, h.len, &e), 0);
        r.code = e.code;
        int code;
        cr_assert(h_raw_expect_close(c->fd, 5000, &code), "refused RESUME left open");
        return r;
    }
    int rc = read_hello_ok(c, h.len);
    cr_assert_eq(rc, 0, "HELLO_OK after RESUME: step %d", rc);
    cr_assert_eq(c->ok.conn_id, conn_id);
    cr_assert_eq(memcmp(c->ok.secret, secret, WIRE_SECRET_LEN), 0);
    for (;;) {
        uint8_t body[WIRE_MAX_BODY];
        cr_assert_eq(h_raw_read_frame(c->fd, 5000, &h, body, sizeof body), 1, "RESUME: no OK");
        if (h.type == WIRE_T_OK && h.id == 2)
            break;
        cr_assert_eq(h.type, WIRE_T_EVENT, "RESUME answered with type 0x%x", h.type);
        cr_assert_lt(r.nevents, 8);
        cr_assert_eq(wire_get_event(body, h.len, &r.ev[r.nevents++]), 0);
    }
    if (old >= 0)
        h_raw_close(old);
    return r;
}

void rc_release(struct rc *c, uint64_t lease_id)
{
    struct wire_buf b = {0};
    struct wire_release m = {.lease_id = lease_id};
    uint32_t id = c->next_id++;
    cr_assert_eq(wire_put_release(&b, id, &m), 0);
    cr_assert_eq(send_frames(c->fd, &b), 0);
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    do
        cr_assert_eq(h_raw_read_frame(c->fd, 5000, &h, body, sizeof body), 1);
    while (h.id != id);
    cr_assert_eq(h.type, WIRE_T_OK, "RELEASE answered with type 0x%x", h.type);
}

void rc_wait_confirmed(const struct rc *c, const struct wire_granted *g)
{
    H_WAIT_UNTIL(H_EVENT_MS, rc_slot(c, g->slot).state == DLOCK_STATE_HELD &&
                                 (uint64_t)rc_slot(c, g->slot).deadline_ns > g->deadline_ns);
    struct shm_slot s = rc_slot(c, g->slot);
    cr_assert_eq(s.lease_id, g->lease_id);
    cr_assert_eq(s.fence, g->fence);
}

void rc_resume_held(struct rc *c, const struct wire_granted *g)
{
    struct resumed r = rc_resume(c, c->ok.conn_id, c->ok.secret);
    cr_assert_eq(r.code, 0, "RESUME refused: %d", r.code);
    cr_assert_eq(r.nevents, 1);
    cr_assert_eq(r.ev[0].lease_id, g->lease_id);
    cr_assert_eq(r.ev[0].state, DLOCK_STATE_HELD);
}
