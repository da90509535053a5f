/* SPDX-License-Identifier: BSD-3-Clause */
/* test_bad_input.c -- malformed and hostile clients on a raw socket. Each case
 * runs next to a well-behaved client holding a lease taken before; afterwards
 * that lease must still be HELD with its key intact, the agent alive, and a
 * fresh client able to acquire. Protocol errors get ERROR(DLOCK_EPROTO) and
 * the connection is closed; name errors and unknown leases get an ERROR and
 * the connection stays. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "harness.h"

#define MAX_NAME 32

static struct {
    struct h_cl *a;
    dlock_lease *l;
    char *tok;
} V;

static void victim_setup(const char *agent_ini)
{
    h_start(agent_ini ? agent_ini : "max_name_len = 32");
    V.a = h_client();
    V.l = h_must_acquire(V.a, "victim", 5000);
    V.tok = h_redis_get(h_key("victim"));
    cr_assert(h_is_token(V.tok));
}

static void victim_check(void)
{
    h_pump_all(20);
    cr_assert(h_agent_alive(0), "dlockd died (log above)");
    cr_assert_eq(h_events(V.a, V.l, DLOCK_STATE_LOST), 0, "the other client's lease was lost");
    cr_assert_eq(dlock_lease_state(V.l), DLOCK_STATE_HELD);
    char *v = h_redis_get(h_key("victim"));
    cr_assert_not_null(v, "the other client's key is gone");
    cr_assert_str_eq(v, V.tok, "the other client's key changed");
    cr_assert_eq(dlock_client_ping(V.a->c), 0);
    struct h_cl *f = h_client();
    dlock_lease *l = h_must_acquire(f, "fresh", 5000);
    cr_assert_eq(dlock_lease_release(l), 0);
    h_client_close(f);
}

static void put_hdr(uint8_t *p, uint32_t len, uint16_t type, uint16_t flags, uint32_t id)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(len >> (8 * i));
    p[4] = (uint8_t)type;
    p[5] = (uint8_t)(type >> 8);
    p[6] = (uint8_t)flags;
    p[7] = (uint8_t)(flags >> 8);
    for (int i = 0; i < 4; i++)
        p[8 + i] = (uint8_t)(id >> (8 * i));
}

/* The agent must answer ERROR(EPROTO) (or, with `lenient`, nothing) and close. */
static void expect_proto_close(int fd, int lenient)
{
    int code = 0;
    cr_assert(h_raw_expect_close(fd, 2000, &code),
              "the agent kept a connection that broke the protocol");
    if (lenient)
        cr_assert(code == 0 || code == DLOCK_EPROTO, "got ERROR %d", code);
    else
        cr_assert_eq(code, DLOCK_EPROTO, "expected ERROR(DLOCK_EPROTO) before close, got %d", code);
    h_raw_close(fd);
}

/* Reads the reply to request `id` (skipping events): returns its type; for
 * ERROR, *code gets the code. */
static int reply(int fd, uint32_t id, int *code)
{
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    for (;;) {
        int r = h_raw_read_frame(fd, 3000, &h, body, sizeof body);
        cr_assert_eq(r, 1, "no reply to request %u (%s)", id, r == 0 ? "closed" : "timeout");
        if (h.type == WIRE_T_EVENT)
            continue;
        cr_assert_eq(h.id, id, "reply id %u, expected %u", h.id, id);
        if (h.type == WIRE_T_ERROR) {
            struct wire_error e;
            cr_assert_eq(wire_get_error(body, h.len, &e), 0);
            *code = e.code;
        }
        return h.type;
    }
}

static void send_ping(int fd, uint32_t id)
{
    struct wire_buf b = {0};
    cr_assert_eq(wire_put_empty(&b, id, WIRE_T_PING), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
}

static void expect_ping_ok(int fd, uint32_t id)
{
    send_ping(fd, id);
    int code = 0;
    int t = reply(fd, id, &code);
    cr_assert_eq(t, WIRE_T_OK, "PING answered with 0x%x (code %d): connection not usable", t, code);
}

/* ACQUIRE body (docs/protocol.md): u32 ttl_ms, i64 wait_ms, u32 flags,
 * u32 max_hold_ms, u32 progress_ms, u16 name_len, then the name. */
#define ACQ_FIXED    26
#define ACQ_FLAGS    12
#define ACQ_NAME_LEN 24

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Sends ACQUIRE built by hand, with any field values, so names beyond the
 * encoder's WIRE_MAX_NAME cap can be sent too (the frame stays within
 * WIRE_MAX_BODY). */
static void send_acquire_full(int fd, uint32_t id, const char *name, size_t len, uint32_t ttl,
                              int64_t wait, uint32_t flags, uint32_t max_hold, uint32_t progress)
{
    static uint8_t buf[WIRE_HDR_LEN + WIRE_MAX_BODY];
    cr_assert_leq(ACQ_FIXED + len, WIRE_MAX_BODY);
    put_hdr(buf, (uint32_t)(ACQ_FIXED + len), WIRE_T_ACQUIRE, 0, id);
    uint8_t *p = buf + WIRE_HDR_LEN;
    put_le(p, ttl, 4);
    put_le(p + 4, (uint64_t)wait, 8);
    put_le(p + ACQ_FLAGS, flags, 4);
    put_le(p + 16, max_hold, 4);
    put_le(p + 20, progress, 4);
    put_le(p + ACQ_NAME_LEN, len, 2);
    if (len)
        memcpy(p + ACQ_FIXED, name, len);
    cr_assert_eq(h_raw_send(fd, buf, WIRE_HDR_LEN + ACQ_FIXED + len), 0);
}

static void send_acquire(int fd, uint32_t id, const char *name, size_t len, int64_t wait_ms)
{
    send_acquire_full(fd, id, name, len, 5000, wait_ms, 0, 0, 0);
}

ITEST(bad_input, garbage_before_hello)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    const char junk[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    h_raw_send(fd, junk, sizeof junk - 1);
    expect_proto_close(fd, 1);
    victim_check();
}

ITEST(bad_input, garbage_after_hello)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t junk[256];
    memset(junk, 0xff, sizeof junk);
    h_raw_send(fd, junk, sizeof junk);
    expect_proto_close(fd, 0);
    victim_check();
}

ITEST(bad_input, truncated_header_then_close)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t hdr[WIRE_HDR_LEN];
    put_hdr(hdr, 0, WIRE_T_PING, 0, 5);
    h_raw_send(fd, hdr, 7);
    h_pump_all(50);
    h_raw_close(fd);
    victim_check();
}

ITEST(bad_input, truncated_body_then_close)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    struct wire_buf b = {0};
    struct wire_acquire m = {.ttl_ms = 5000, .wait_ms = 0, .name = "trunc", .name_len = 5};
    cr_assert_eq(wire_put_acquire(&b, 9, &m), 0);
    h_raw_send(fd, b.data, b.len - 3);
    wire_buf_free(&b);
    h_pump_all(50);
    h_raw_close(fd);
    victim_check();
    cr_assert_eq(h_redis_exists(h_key("trunc")), 0, "a truncated acquire took a lock");
}

ITEST(bad_input, oversized_frame)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t buf[WIRE_HDR_LEN + 64] = {0};
    put_hdr(buf, WIRE_MAX_BODY + 1, WIRE_T_ACQUIRE, 0, 3);
    h_raw_send(fd, buf, sizeof buf);
    expect_proto_close(fd, 0);
    victim_check();
}

ITEST(bad_input, huge_length_before_hello)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    uint8_t buf[WIRE_HDR_LEN];
    put_hdr(buf, 0x7fffffff, WIRE_T_HELLO, 0, 1);
    h_raw_send(fd, buf, sizeof buf);
    expect_proto_close(fd, 1);
    victim_check();
}

ITEST(bad_input, unknown_type_after_hello)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t buf[WIRE_HDR_LEN];
    put_hdr(buf, 0, 0x7f, 0, 4);
    h_raw_send(fd, buf, sizeof buf);
    expect_proto_close(fd, 0);
    victim_check();
}

ITEST(bad_input, agent_message_type_from_client)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    struct wire_buf b = {0};
    struct wire_granted g = {.lease_id = 1, .deadline_ns = 1, .fence = 1, .ttl_ms = 1};
    cr_assert_eq(wire_put_granted(&b, 4, &g), 0);
    h_raw_send_buf(fd, &b);
    expect_proto_close(fd, 0);
    victim_check();
}

ITEST(bad_input, nonzero_flags)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t buf[WIRE_HDR_LEN];
    put_hdr(buf, 0, WIRE_T_PING, 1, 4);
    h_raw_send(fd, buf, sizeof buf);
    expect_proto_close(fd, 0);
    victim_check();
}

ITEST(bad_input, wrong_body_length)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t buf[WIRE_HDR_LEN + 7] = {0};
    put_hdr(buf, 7, WIRE_T_RELEASE, 0, 4); /* RELEASE is 8 bytes */
    h_raw_send(fd, buf, sizeof buf);
    expect_proto_close(fd, 0);

    fd = h_raw_connect(0);
    h_raw_hello(fd);
    put_hdr(buf, 4, WIRE_T_PING, 0, 5); /* PING is empty */
    h_raw_send(fd, buf, WIRE_HDR_LEN + 4);
    expect_proto_close(fd, 0);

    fd = h_raw_connect(0);
    h_raw_hello(fd);
    put_hdr(buf, 4, WIRE_T_CANCEL, 0, 5); /* CANCEL is empty */
    h_raw_send(fd, buf, WIRE_HDR_LEN + 4);
    expect_proto_close(fd, 0);

    fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t acq[WIRE_HDR_LEN + ACQ_FIXED + 2] = {0};
    put_hdr(acq, ACQ_FIXED + 2, WIRE_T_ACQUIRE, 0, 6);
    acq[WIRE_HDR_LEN + ACQ_NAME_LEN] = 5; /* declares 5 name bytes, has 2 */
    acq[WIRE_HDR_LEN + ACQ_FIXED] = 'a';
    acq[WIRE_HDR_LEN + ACQ_FIXED + 1] = 'b';
    h_raw_send(fd, acq, sizeof acq);
    expect_proto_close(fd, 0);

    /* An ACQUIRE in the old 18-byte layout is now too short for its name. */
    fd = h_raw_connect(0);
    h_raw_hello(fd);
    uint8_t old[WIRE_HDR_LEN + 18 + 2] = {0};
    put_hdr(old, 20, WIRE_T_ACQUIRE, 0, 7);
    old[WIRE_HDR_LEN] = 0x88; /* ttl 5000 */
    old[WIRE_HDR_LEN + 1] = 0x13;
    old[WIRE_HDR_LEN + 16] = 2; /* old name_len offset */
    memcpy(old + WIRE_HDR_LEN + 18, "ol", 2);
    h_raw_send(fd, old, sizeof old);
    expect_proto_close(fd, 0);
    cr_assert_eq(h_redis_exists(h_key("ol")), 0, "an old-layout acquire took a lock");
    victim_check();
}

ITEST(bad_input, request_before_hello)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    send_ping(fd, 1);
    expect_proto_close(fd, 0);

    fd = h_raw_connect(0);
    send_acquire(fd, 2, "early", 5, 0);
    expect_proto_close(fd, 0);
    cr_assert_eq(h_redis_exists(h_key("early")), 0, "an acquire before HELLO took a lock");
    victim_check();
}

static void send_hello(int fd, uint32_t magic, uint16_t version)
{
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = magic, .version = version};
    cr_assert_eq(wire_put_hello(&b, 1, &m), 0);
    h_raw_send_buf(fd, &b);
}

/* docs/protocol.md: "DLOCK_EVERSION: bad magic or unsupported version in
 * HELLO". */
ITEST(bad_input, bad_magic_gets_eversion)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    send_hello(fd, 0x12345678, WIRE_VERSION);
    int code = 0;
    cr_assert(h_raw_expect_close(fd, 2000, &code), "bad magic: connection kept");
    cr_assert_eq(code, DLOCK_EVERSION, "bad magic: ERROR %d, expected DLOCK_EVERSION", code);
    h_raw_close(fd);
    victim_check();
}

ITEST(bad_input, unsupported_version_gets_eversion)
{
    victim_setup(NULL);
    uint16_t bad[] = {0, WIRE_VERSION + 1, UINT16_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = h_raw_connect(0);
        send_hello(fd, WIRE_MAGIC, bad[i]);
        int code = 0;
        cr_assert(h_raw_expect_close(fd, 2000, &code), "version %u: connection kept",
                  (unsigned)bad[i]);
        cr_assert_eq(code, DLOCK_EVERSION, "version %u: ERROR %d", (unsigned)bad[i], code);
        h_raw_close(fd);
    }
    victim_check();
}

/* Each version the agent speaks gets the HELLO_OK of that version. */
ITEST(bad_input, each_version_gets_its_own_hello_ok)
{
    victim_setup(NULL);
    for (uint16_t v = WIRE_VERSION_MIN; v <= WIRE_VERSION; v++) {
        int fd = h_raw_connect(0);
        send_hello(fd, WIRE_MAGIC, v);
        struct wire_hdr h;
        uint8_t body[WIRE_MAX_BODY];
        cr_assert_eq(h_raw_read_frame(fd, H_EVENT_MS, &h, body, sizeof body), 1);
        cr_assert_eq(h.type, WIRE_T_HELLO_OK, "version %u: type 0x%x", (unsigned)v, h.type);
        cr_assert_eq(h.len, v == 1 ? 24u : 48u, "version %u: HELLO_OK of %u bytes", (unsigned)v,
                     h.len);
        struct wire_hello_ok ok;
        cr_assert_eq(wire_get_hello_ok(body, h.len, &ok), 0);
        cr_assert_eq(ok.version, v);
        h_raw_close(fd);
    }
    victim_check();
}

ITEST(bad_input, name_errors_keep_the_connection)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    cr_assert_eq(h_raw_hello(fd), MAX_NAME, "HELLO_OK does not carry max_name_len");
    char name[2001];
    memset(name, 'n', sizeof name);
    int code = 0;

    send_acquire(fd, 5, name, MAX_NAME + 1, 0);
    cr_assert_eq(reply(fd, 5, &code), WIRE_T_ERROR);
    cr_assert_eq(code, DLOCK_ENAMETOOLONG, "name of max+1 bytes: ERROR %d", code);
    expect_ping_ok(fd, 6);

    send_acquire(fd, 7, name, 2000, 0); /* beyond WIRE_MAX_NAME, frame still valid */
    cr_assert_eq(reply(fd, 7, &code), WIRE_T_ERROR);
    cr_assert_eq(code, DLOCK_ENAMETOOLONG, "name of 2000 bytes: ERROR %d", code);
    expect_ping_ok(fd, 8);

    send_acquire(fd, 9, "", 0, 0);
    cr_assert_eq(reply(fd, 9, &code), WIRE_T_ERROR);
    cr_assert_eq(code, DLOCK_EBADNAME, "empty name: ERROR %d", code);
    send_acquire(fd, 10, "a b", 3, 0);
    cr_assert_eq(reply(fd, 10, &code), WIRE_T_ERROR);
    cr_assert_eq(code, DLOCK_EBADNAME, "name with a space: ERROR %d", code);
    send_acquire(fd, 11, "nul\0x", 5, 0);
    cr_assert_eq(reply(fd, 11, &code), WIRE_T_ERROR);
    cr_assert_eq(code, DLOCK_EBADNAME, "name with NUL: ERROR %d", code);
    expect_ping_ok(fd, 12);

    send_acquire(fd, 13, name, MAX_NAME, 0); /* exactly the limit */
    cr_assert_eq(reply(fd, 13, &code), WIRE_T_GRANTED, "name of max bytes refused (%d)", code);
    h_raw_close(fd);

    /* and the same through the library */
    dlock_lease *l = NULL;
    name[MAX_NAME + 1] = '\0';
    int rc = h_acquire(V.a, name, 5000, 0, &l);
    cr_assert_eq(rc, DLOCK_ENAMETOOLONG, "library: %s (%d)", dlock_strerror(rc), rc);
    victim_check();
}

ITEST(bad_input, foreign_lease_ids_are_not_found)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    /* Guess at other connections' lease ids: none may be released. */
    for (uint32_t i = 0; i < 64; i++) {
        struct wire_buf b = {0};
        uint64_t id = i < 32 ? i : (uint64_t)1 << (i - 32 + 16);
        struct wire_release m = {.lease_id = id};
        cr_assert_eq(wire_put_release(&b, 100 + i, &m), 0);
        cr_assert_eq(h_raw_send_buf(fd, &b), 0);
        int code = 0;
        cr_assert_eq(reply(fd, 100 + i, &code), WIRE_T_ERROR, "RELEASE %llu accepted",
                     (unsigned long long)id);
        cr_assert_eq(code, DLOCK_ENOTFOUND, "RELEASE of a foreign id: ERROR %d", code);
    }
    expect_ping_ok(fd, 1000);
    h_raw_close(fd);
    victim_check();
}

/* A CANCEL of an id this connection has no waiting acquire under (another
 * connection's, or none) is answered by nothing and cancels nothing. */
ITEST(bad_input, cancels_of_foreign_ids_do_nothing)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    for (uint32_t id = 0; id < 64; id++) {
        struct wire_buf b = {0};
        cr_assert_eq(wire_put_empty(&b, id, WIRE_T_CANCEL), 0);
        cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    }
    expect_ping_ok(fd, 1000);
    h_raw_close(fd);
    cr_assert_eq(h_metric(0, "dlock_cancels_total"), 0);
    victim_check();
}

ITEST(bad_input, disconnect_while_waiting)
{
    victim_setup("max_name_len = 32\nretry_fallback_ms = 10000");
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    send_acquire(fd, 7, "victim", 6, -1);
    expect_ping_ok(fd, 8); /* the acquire was read before the ping: it is queued */
    h_raw_close(fd);
    h_pump_all(50);
    victim_check();

    /* The vanished waiter must not be granted: after the release the lock
     * goes to a live waiter. */
    struct h_cl *b = h_client();
    struct h_acq w;
    h_acquire_async(b, "victim", 5000, H_EVENT_MS, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    cr_assert_eq(dlock_lease_release(V.l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "live waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

ITEST(bad_input, slow_writer_one_byte_at_a_time)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION};
    cr_assert_eq(wire_put_hello(&b, 1, &m), 0);
    struct wire_acquire a = {.ttl_ms = 5000, .wait_ms = 0, .name = "slow", .name_len = 4};
    cr_assert_eq(wire_put_acquire(&b, 2, &a), 0);
    for (size_t i = 0; i < b.len; i++) {
        cr_assert_eq(h_raw_send(fd, b.data + i, 1), 0);
        h_sleep_ms(1);
    }
    wire_buf_free(&b);
    int code = 0;
    cr_assert_eq(reply(fd, 1, &code), WIRE_T_HELLO_OK);
    cr_assert_eq(reply(fd, 2, &code), WIRE_T_GRANTED, "acquire: 0x%x", code);
    cr_assert_eq(h_redis_exists(h_key("slow")), 1);
    h_raw_close(fd);
    H_KEY_GONE(h_key("slow"));
    victim_check();
}

ITEST(bad_input, pipelined_requests_in_one_write)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION};
    cr_assert_eq(wire_put_hello(&b, 1, &m), 0);
    cr_assert_eq(wire_put_empty(&b, 2, WIRE_T_PING), 0);
    struct wire_acquire a = {.ttl_ms = 5000, .wait_ms = 0, .name = "pipe", .name_len = 4};
    cr_assert_eq(wire_put_acquire(&b, 3, &a), 0);
    cr_assert_eq(wire_put_empty(&b, 4, WIRE_T_PING), 0);
    cr_assert_eq(h_raw_send_buf(fd, &b), 0);
    int seen[5] = {0};
    for (int i = 0; i < 4; i++) {
        struct wire_hdr h;
        uint8_t body[WIRE_MAX_BODY];
        cr_assert_eq(h_raw_read_frame(fd, 3000, &h, body, sizeof body), 1);
        cr_assert(h.id >= 1 && h.id <= 4, "reply with id %u", h.id);
        seen[h.id]++;
        int want = h.id == 1 ? WIRE_T_HELLO_OK : h.id == 3 ? WIRE_T_GRANTED : WIRE_T_OK;
        cr_assert_eq(h.type, want, "reply %u has type 0x%x", h.id, h.type);
    }
    cr_assert(seen[1] == 1 && seen[2] == 1 && seen[3] == 1 && seen[4] == 1);
    h_raw_close(fd);
    victim_check();
}

ITEST(bad_input, flooding_client_does_not_stall_others)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    cr_assert_eq(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    /* PINGs without ever reading the replies, until the socket is full. */
    struct wire_buf b = {0};
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(wire_put_empty(&b, (uint32_t)i, WIRE_T_PING), 0);
    size_t total = 0;
    int64_t end = h_now_ms() + 2000;
    while (total < (8u << 20) && h_now_ms() < end) {
        ssize_t w = send(fd, b.data, b.len, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            h_sleep_ms(1);
            continue;
        }
        if (w <= 0)
            break; /* the agent may drop a flooder */
        total += (size_t)w;
    }
    wire_buf_free(&b);
    cr_log_info("flooder wrote %zu bytes", total);
    /* The other client is served while the flooder's bytes are still
     * unread (it never reads its replies, so the agent cannot go through
     * them): were the agent stuck on them, this would never return. */
    victim_check();
    h_raw_close(fd);
    cr_assert_eq(dlock_client_ping(V.a->c), 0);
}

ITEST(bad_input, connection_limit)
{
    victim_setup("max_name_len = 32\nmax_connections = 4");
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = h_raw_connect(0);
        h_raw_hello(fds[i]);
    }
    /* The fifth connection is turned away, maybe with an error. */
    int fd = h_raw_connect(0);
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION};
    cr_assert_eq(wire_put_hello(&b, 1, &m), 0);
    h_raw_send_buf(fd, &b);
    int code = 0;
    cr_assert(h_raw_expect_close(fd, 2000, &code), "connection over max_connections kept open");
    h_raw_close(fd);
    for (int i = 0; i < 3; i++)
        h_raw_close(fds[i]);
    /* Room again once the agent has seen the closes. */
    dlock_client *c = NULL;
    H_WAIT_UNTIL(H_EVENT_MS, h_client_try_open(0, &c) == 0);
    dlock_client_close(c);
    victim_check();
}

/* Sends ACQUIRE with any ttl and wait, by hand. */
static void send_acquire_tw(int fd, uint32_t id, const char *name, uint32_t ttl, int64_t wait)
{
    send_acquire_full(fd, id, name, strlen(name), ttl, wait, 0, 0, 0);
}

ITEST(bad_input, out_of_range_values_keep_the_connection)
{
    victim_setup(NULL);
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    int code = 0;
    send_acquire_tw(fd, 2, "ttl", UINT32_MAX, 0); /* beyond any max TTL */
    cr_assert_eq(reply(fd, 2, &code), WIRE_T_ERROR, "TTL of 2^32-1 ms granted");
    cr_assert_eq(code, DLOCK_EINVAL, "huge TTL: ERROR %d", code);
    send_acquire_tw(fd, 3, "wait", 5000, -5);
    cr_assert_eq(reply(fd, 3, &code), WIRE_T_ERROR, "wait -5 accepted");
    cr_assert_eq(code, DLOCK_EINVAL, "wait -5: ERROR %d", code);
    send_acquire_full(fd, 4, "fl", 2, 5000, 0, 0x80000000u /* an unknown flag */, 0, 0);
    cr_assert_eq(reply(fd, 4, &code), WIRE_T_ERROR, "nonzero acquire flags accepted");
    cr_assert_eq(code, DLOCK_EINVAL, "acquire flags: ERROR %d", code);
    /* The largest bounded-hold values are a hold without a bound in practice,
     * or an EINVAL; either way the connection and the agent carry on. */
    send_acquire_full(fd, 6, "bh", 2, 5000, 0, 0, UINT32_MAX, UINT32_MAX);
    int t = reply(fd, 6, &code);
    cr_assert(t == WIRE_T_GRANTED || (t == WIRE_T_ERROR && code == DLOCK_EINVAL),
              "max_hold/progress of 2^32-1 ms: reply 0x%x (code %d)", t, code);
    expect_ping_ok(fd, 5);
    h_raw_close(fd);
    cr_assert_eq(h_redis_exists(h_key("ttl")) + h_redis_exists(h_key("fl")), 0);
    victim_check();
}

ITEST(bad_input, huge_wait_is_forever_not_an_instant_timeout)
{
    victim_setup("max_name_len = 32\nretry_fallback_ms = 10000");
    int fd = h_raw_connect(0);
    h_raw_hello(fd);
    send_acquire_tw(fd, 7, "victim", 5000, INT64_MAX);
    expect_ping_ok(fd, 8); /* no early ERROR(ETIMEDOUT) came before the pong */
    struct wire_hdr h;
    uint8_t body[WIRE_MAX_BODY];
    cr_assert_eq(h_raw_read_frame(fd, 300, &h, body, sizeof body), -1,
                 "a wait of INT64_MAX ms was answered at once (type 0x%x)", h.type);
    victim_check();
    cr_assert_eq(dlock_lease_release(V.l), 0);
    int code = 0;
    cr_assert_eq(reply(fd, 7, &code), WIRE_T_GRANTED, "waiter not granted (ERROR %d)", code);
    h_raw_close(fd);
}
