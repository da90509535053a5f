/* SPDX-License-Identifier: BSD-3-Clause */
/* test_wire.c -- unit tests of the frame codec in libclient/wire.c. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "dlock.h"
#include "wire.h"

/* ACQUIRE body: u32 ttl, i64 wait, u32 flags, u32 max_hold, u32 progress,
 * u16 name_len (at offset 24), then the name (docs/protocol.md). */
#define ACQ_FIXED    26
#define ACQ_NAME_LEN 24

/* Decodes the one frame at the start of b, checks its header against type/id
 * and returns a pointer to its body (length in *len). */
static const uint8_t *frame_body(const struct wire_buf *b, uint16_t type, uint32_t id, size_t *len)
{
    struct wire_hdr h;
    cr_assert_eq(wire_hdr_decode(b->data, b->len, WIRE_MAX_BODY, &h), 1);
    cr_assert_eq(h.type, type, "type 0x%x, expected 0x%x", h.type, type);
    cr_assert_eq(h.flags, 0);
    cr_assert_eq(h.id, id);
    cr_assert_eq(b->len, WIRE_HDR_LEN + (size_t)h.len, "frame is %zu bytes, header says %u + 12",
                 b->len, h.len);
    *len = h.len;
    return b->data + WIRE_HDR_LEN;
}

/* A decoder must refuse the body one byte shorter and one byte longer. */
#define CHECK_WRONG_LENGTHS(getter, body, len, msgtype)                                            \
    do {                                                                                           \
        uint8_t big_[WIRE_MAX_BODY + 16] = {0};                                                    \
        memcpy(big_, (body), (len));                                                               \
        msgtype m_;                                                                                \
        if ((len) > 0)                                                                             \
            cr_assert_eq(getter(big_, (len)-1, &m_), DLOCK_EPROTO, #getter " accepted len-1");     \
        cr_assert_eq(getter(big_, (len) + 1, &m_), DLOCK_EPROTO, #getter " accepted len+1");       \
        cr_assert_eq(getter(big_, 0, &m_), DLOCK_EPROTO, #getter " accepted len 0");               \
    } while (0)

Test(wire, header_layout_is_little_endian)
{
    struct wire_buf b = {0};
    struct wire_release r = {.lease_id = 0x0102030405060708ull};
    cr_assert_eq(wire_put_release(&b, 0xa1b2c3d4u, &r), 0);
    const uint8_t want[] = {8,    0,    0,    0,    0x03, 0x00, 0,    0,    0xd4, 0xc3,
                            0xb2, 0xa1, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    cr_assert_eq(b.len, sizeof want);
    cr_assert_arr_eq(b.data, want, sizeof want);
    wire_buf_free(&b);
}

Test(wire, hello_bytes_carry_magic_dlck)
{
    struct wire_buf b = {0};
    struct wire_hello m = {.magic = WIRE_MAGIC, .version = WIRE_VERSION};
    cr_assert_eq(wire_put_hello(&b, 1, &m), 0);
    cr_assert_eq(b.len, WIRE_HDR_LEN + 8);
    cr_assert_arr_eq(b.data + WIRE_HDR_LEN, "DLCK", 4);
    wire_buf_free(&b);
}

Test(wire, truncated_header_needs_more_bytes)
{
    struct wire_buf b = {0};
    cr_assert_eq(wire_put_empty(&b, 7, WIRE_T_PING), 0);
    struct wire_hdr h = {.len = 99, .type = 99, .flags = 99, .id = 99};
    for (size_t n = 0; n < WIRE_HDR_LEN; n++) {
        cr_assert_eq(wire_hdr_decode(b.data, n, WIRE_MAX_BODY, &h), 0, "n=%zu", n);
        cr_assert_eq(h.len, 99, "header written although incomplete (n=%zu)", n);
    }
    cr_assert_eq(wire_hdr_decode(b.data, WIRE_HDR_LEN, WIRE_MAX_BODY, &h), 1);
    cr_assert_eq(h.len, 0);
    cr_assert_eq(h.type, WIRE_T_PING);
    cr_assert_eq(h.id, 7);
    wire_buf_free(&b);
}

Test(wire, header_rejects_nonzero_flags_and_type_zero)
{
    uint8_t hdr[WIRE_HDR_LEN] = {0, 0, 0, 0, WIRE_T_PING, 0, 1, 0, 1, 0, 0, 0};
    struct wire_hdr h = {.len = 99};
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h), DLOCK_EPROTO);
    hdr[6] = 0;
    hdr[7] = 0x80;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h), DLOCK_EPROTO);
    hdr[7] = 0;
    hdr[4] = 0;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h), DLOCK_EPROTO);
    cr_assert_eq(h.len, 99, "out parameter written on error");
    hdr[4] = WIRE_T_PING;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h), 1);
}

Test(wire, header_body_length_limits)
{
    uint8_t hdr[WIRE_HDR_LEN] = {0, 0, 0, 0, WIRE_T_ACQUIRE, 0, 0, 0, 0, 0, 0, 0};
    struct wire_hdr h;
    /* exactly WIRE_MAX_BODY: accepted */
    hdr[0] = WIRE_MAX_BODY & 0xff;
    hdr[1] = (WIRE_MAX_BODY >> 8) & 0xff;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h), 1);
    cr_assert_eq(h.len, WIRE_MAX_BODY);
    /* one more: refused */
    hdr[0] = (WIRE_MAX_BODY + 1) & 0xff;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h), DLOCK_EPROTO);
    /* a caller's smaller cap applies */
    hdr[0] = 100;
    hdr[1] = 0;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, 99, &h), DLOCK_EPROTO);
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, 100, &h), 1);
    /* a caller's larger cap never lifts the protocol-wide one */
    hdr[0] = (WIRE_MAX_BODY + 1) & 0xff;
    hdr[1] = ((WIRE_MAX_BODY + 1) >> 8) & 0xff;
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, UINT32_MAX, &h), DLOCK_EPROTO);
    /* a huge length (e.g. ASCII garbage) */
    memcpy(hdr, "GET ", 4);
    cr_assert_eq(wire_hdr_decode(hdr, sizeof hdr, WIRE_MAX_BODY, &h), DLOCK_EPROTO);
}

Test(wire, hello_round_trip)
{
    struct wire_buf b = {0};
    struct wire_hello in = {.magic = WIRE_MAGIC, .version = 0xbeef}, out;
    cr_assert_eq(wire_put_hello(&b, 42, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_HELLO, 42, &len);
    cr_assert_eq(len, 8);
    cr_assert_eq(wire_get_hello(body, len, &out), 0);
    cr_assert_eq(out.magic, WIRE_MAGIC);
    cr_assert_eq(out.version, 0xbeef);
    CHECK_WRONG_LENGTHS(wire_get_hello, body, len, struct wire_hello);
    /* the reserved u16 must be 0 */
    uint8_t copy[8];
    memcpy(copy, body, 8);
    copy[7] = 1;
    cr_assert_eq(wire_get_hello(copy, 8, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, hello_ok_round_trip)
{
    struct wire_buf b = {0};
    struct wire_hello_ok in = {.version = 1,
                               .max_name_len = 200,
                               .max_leases = 100000,
                               .default_ttl_ms = UINT32_MAX,
                               .clock_ns = 0x0123456789abcdefull},
                         out;
    cr_assert_eq(wire_put_hello_ok(&b, 0xffffffffu, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_HELLO_OK, 0xffffffffu, &len);
    cr_assert_eq(len, 24);
    cr_assert_eq(wire_get_hello_ok(body, len, &out), 0);
    cr_assert_eq(out.version, 1);
    cr_assert_eq(out.max_name_len, 200);
    cr_assert_eq(out.max_leases, 100000);
    cr_assert_eq(out.default_ttl_ms, UINT32_MAX);
    cr_assert_eq(out.clock_ns, 0x0123456789abcdefull);
    CHECK_WRONG_LENGTHS(wire_get_hello_ok, body, len, struct wire_hello_ok);
    wire_buf_free(&b);
}

/* Version 2 adds the flags, the connection's id and its secret; each length
 * goes with its version. */
Test(wire, hello_ok_version_2_round_trip)
{
    struct wire_buf b = {0};
    struct wire_hello_ok in = {.version = 2,
                               .max_name_len = 1024,
                               .max_leases = 7,
                               .default_ttl_ms = 30000,
                               .clock_ns = 5,
                               .flags = WIRE_HELLO_RESUMABLE,
                               .conn_id = 0xfedcba9876543210ull},
                         out;
    for (int i = 0; i < WIRE_SECRET_LEN; i++)
        in.secret[i] = (uint8_t)(0xa0 + i);
    cr_assert_eq(wire_put_hello_ok(&b, 3, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_HELLO_OK, 3, &len);
    cr_assert_eq(len, 48);
    cr_assert_eq(wire_get_hello_ok(body, len, &out), 0);
    cr_assert_eq(out.version, 2);
    cr_assert_eq(out.flags, WIRE_HELLO_RESUMABLE);
    cr_assert_eq(out.conn_id, in.conn_id);
    cr_assert_arr_eq(out.secret, in.secret, WIRE_SECRET_LEN);
    cr_assert_eq(out.max_leases, 7);
    CHECK_WRONG_LENGTHS(wire_get_hello_ok, body, len, struct wire_hello_ok);
    uint8_t copy[48];
    /* a version 1 body of 48 bytes, a version 2 body of 24, unknown flags */
    memcpy(copy, body, 48);
    copy[0] = 1;
    cr_assert_eq(wire_get_hello_ok(copy, 48, &out), DLOCK_EPROTO);
    cr_assert_eq(wire_get_hello_ok(body, 24, &out), DLOCK_EPROTO);
    memcpy(copy, body, 48);
    copy[2] = 2;
    cr_assert_eq(wire_get_hello_ok(copy, 48, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
    /* version 1 never carries flags, and reads them as zeros */
    struct wire_hello_ok v1 = in;
    v1.version = 1;
    cr_assert_eq(wire_put_hello_ok(&b, 3, &v1), 0);
    body = frame_body(&b, WIRE_T_HELLO_OK, 3, &len);
    cr_assert_eq(len, 24);
    cr_assert_eq(wire_get_hello_ok(body, len, &out), 0);
    cr_assert_eq(out.flags, 0);
    cr_assert_eq(out.conn_id, 0);
    memcpy(copy, body, 24);
    copy[2] = 1;
    cr_assert_eq(wire_get_hello_ok(copy, 24, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, resume_round_trip)
{
    struct wire_buf b = {0};
    struct wire_resume in = {.magic = WIRE_MAGIC, .version = 2, .conn_id = UINT64_MAX}, out;
    memset(in.secret, 0x5a, sizeof in.secret);
    cr_assert_eq(wire_put_resume(&b, 9, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_RESUME, 9, &len);
    cr_assert_eq(len, 32);
    cr_assert_eq(wire_get_resume(body, len, &out), 0);
    cr_assert_eq(out.magic, WIRE_MAGIC);
    cr_assert_eq(out.version, 2);
    cr_assert_eq(out.conn_id, UINT64_MAX);
    cr_assert_arr_eq(out.secret, in.secret, WIRE_SECRET_LEN);
    CHECK_WRONG_LENGTHS(wire_get_resume, body, len, struct wire_resume);
    uint8_t copy[32];
    memcpy(copy, body, 32);
    copy[6] = 1; /* the reserved u16 */
    cr_assert_eq(wire_get_resume(copy, 32, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, acquire_round_trip)
{
    struct wire_buf b = {0};
    const char name[] = "orders/42:migrate";
    struct wire_acquire in = {.ttl_ms = 30000,
                              .wait_ms = -1,
                              .flags = 0x5a5a5a5au,
                              .max_hold_ms = 0xdeadbeefu,
                              .progress_ms = 400,
                              .name = name,
                              .name_len = (uint16_t)strlen(name)},
                        out;
    cr_assert_eq(wire_put_acquire(&b, 3, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ACQUIRE, 3, &len);
    cr_assert_eq(len, ACQ_FIXED + strlen(name));
    cr_assert_eq(wire_get_acquire(body, len, &out), 0);
    cr_assert_eq(out.ttl_ms, 30000);
    cr_assert_eq(out.wait_ms, -1);
    cr_assert_eq(out.flags, 0x5a5a5a5au);
    cr_assert_eq(out.max_hold_ms, 0xdeadbeefu);
    cr_assert_eq(out.progress_ms, 400);
    cr_assert_eq(out.name_len, strlen(name));
    cr_assert_arr_eq(out.name, name, strlen(name));
    cr_assert_eq((const uint8_t *)out.name, body + ACQ_FIXED,
                 "name must be borrowed from the body");
    CHECK_WRONG_LENGTHS(wire_get_acquire, body, len, struct wire_acquire);
    /* shorter than the fixed part */
    cr_assert_eq(wire_get_acquire(body, ACQ_FIXED - 1, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, acquire_large_wait_and_empty_name)
{
    struct wire_buf b = {0};
    struct wire_acquire in = {.ttl_ms = 0, .wait_ms = INT64_MAX, .name = NULL, .name_len = 0}, out;
    cr_assert_eq(wire_put_acquire(&b, 9, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ACQUIRE, 9, &len);
    cr_assert_eq(len, ACQ_FIXED);
    cr_assert_eq(wire_get_acquire(body, len, &out), 0);
    cr_assert_eq(out.wait_ms, INT64_MAX);
    cr_assert_eq(out.ttl_ms, 0);
    cr_assert_eq(out.max_hold_ms, 0);
    cr_assert_eq(out.progress_ms, 0);
    cr_assert_eq(out.name_len, 0);
    wire_buf_free(&b);
}

Test(wire, acquire_declared_name_length_must_match_body)
{
    struct wire_buf b = {0};
    struct wire_acquire in = {.ttl_ms = 1, .wait_ms = 0, .name = "abc", .name_len = 3}, out;
    cr_assert_eq(wire_put_acquire(&b, 1, &in), 0);
    uint8_t body[ACQ_FIXED + 3];
    memcpy(body, b.data + WIRE_HDR_LEN, sizeof body);
    cr_assert_eq(wire_get_acquire(body, sizeof body, &out), 0);
    body[ACQ_NAME_LEN] = 4; /* says 4 name bytes, body has 3 */
    cr_assert_eq(wire_get_acquire(body, sizeof body, &out), DLOCK_EPROTO);
    body[ACQ_NAME_LEN] = 2; /* says 2, body has 3 */
    cr_assert_eq(wire_get_acquire(body, sizeof body, &out), DLOCK_EPROTO);
    body[ACQ_NAME_LEN] = 0xff; /* a huge declared length */
    body[ACQ_NAME_LEN + 1] = 0xff;
    cr_assert_eq(wire_get_acquire(body, sizeof body, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, acquire_name_cap_in_encoder)
{
    static char name[WIRE_MAX_NAME + 1];
    memset(name, 'n', sizeof name);
    struct wire_buf b = {0};
    struct wire_acquire in = {.ttl_ms = 1, .name = name, .name_len = WIRE_MAX_NAME}, out;
    cr_assert_eq(wire_put_acquire(&b, 1, &in), 0, "a name of exactly WIRE_MAX_NAME is allowed");
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ACQUIRE, 1, &len);
    cr_assert_eq(len, ACQ_FIXED + WIRE_MAX_NAME);
    cr_assert_eq(wire_get_acquire(body, len, &out), 0);
    cr_assert_eq(out.name_len, WIRE_MAX_NAME);

    size_t before = b.len;
    in.name_len = WIRE_MAX_NAME + 1;
    cr_assert_eq(wire_put_acquire(&b, 2, &in), DLOCK_EINVAL);
    cr_assert_eq(b.len, before, "a refused frame must not leave bytes in the buffer");
    in.name_len = UINT16_MAX;
    cr_assert_eq(wire_put_acquire(&b, 2, &in), DLOCK_EINVAL);
    cr_assert_eq(b.len, before);
    wire_buf_free(&b);
}

/* ACQUIRE_EX body: ACQUIRE's first 24 bytes, u8 kind, u8 0, u16 nnames, u32
 * permits, u64 owner, then nnames times (u16 len, name). */
#define ACQX_FIXED  40
#define ACQX_KIND   24
#define ACQX_RSVD   25
#define ACQX_NNAMES 26

/* Encodes an ACQUIRE_EX of the n names into b (id 1) and returns its body. */
static const uint8_t *put_ex(struct wire_buf *b, const struct wire_acquire *m,
                             const char *const *names, uint16_t n, size_t *len)
{
    uint16_t lens[WIRE_MAX_NAMES + 1];
    for (uint16_t i = 0; i < n; i++)
        lens[i] = (uint16_t)strlen(names[i]);
    b->len = 0;
    cr_assert_eq(wire_put_acquire_ex(b, 1, m, names, lens, n), 0);
    return frame_body(b, WIRE_T_ACQUIRE_EX, 1, len);
}

Test(wire, acquire_ex_round_trip)
{
    struct wire_buf b = {0};
    const char *names[] = {"orders/42", "x", "inventory:eu-west"};
    struct wire_acquire in = {.ttl_ms = 30000,
                              .wait_ms = -1,
                              .flags = WIRE_ACQ_REENTRANT,
                              .max_hold_ms = 0xdeadbeefu,
                              .progress_ms = 400,
                              .kind = WIRE_KIND_SEMAPHORE,
                              .permits = 0xa1b2c3d4u,
                              .owner = 0x0102030405060708ull},
                        out;
    size_t len;
    const uint8_t *body = put_ex(&b, &in, names, 3, &len);
    cr_assert_eq(len, ACQX_FIXED + 3 * 2 + strlen(names[0]) + 1 + strlen(names[2]));
    memset(&out, 0x5a, sizeof out);
    cr_assert_eq(wire_get_acquire_ex(body, len, &out), 0);
    cr_assert_eq(out.ttl_ms, 30000);
    cr_assert_eq(out.wait_ms, -1);
    cr_assert_eq(out.flags, WIRE_ACQ_REENTRANT);
    cr_assert_eq(out.max_hold_ms, 0xdeadbeefu);
    cr_assert_eq(out.progress_ms, 400);
    cr_assert_eq(out.kind, WIRE_KIND_SEMAPHORE);
    cr_assert_eq(out.permits, 0xa1b2c3d4u);
    cr_assert_eq(out.owner, 0x0102030405060708ull);
    cr_assert_eq(out.nnames, 3);
    /* name and name_len are the first name, borrowed from the body */
    cr_assert_eq(out.name_len, strlen(names[0]));
    cr_assert_eq((const uint8_t *)out.name, body + ACQX_FIXED + 2);
    for (uint16_t i = 0; i < 3; i++) {
        const char *n = NULL;
        uint16_t nl = 0xffff;
        wire_acquire_name(&out, i, &n, &nl);
        cr_assert_eq(nl, strlen(names[i]), "name %u", i);
        cr_assert_arr_eq(n, names[i], nl, "name %u", i);
        cr_assert((const uint8_t *)n > body && (const uint8_t *)n + nl <= body + len,
                  "name %u is not borrowed from the body", i);
    }
    const char *n = "?";
    uint16_t nl = 7;
    wire_acquire_name(&out, 3, &n, &nl);
    cr_assert_null(n, "a name past nnames");
    cr_assert_eq(nl, 0);
    wire_buf_free(&b);
}

/* The byte offsets of docs/protocol.md. */
Test(wire, acquire_ex_bytes_follow_the_documented_layout)
{
    struct wire_buf b = {0};
    const char *names[] = {"ab", "c"};
    struct wire_acquire in = {.ttl_ms = 0x11223344u,
                              .wait_ms = -2,
                              .flags = 1,
                              .max_hold_ms = 0x55667788u,
                              .progress_ms = 0x99aabbccu,
                              .kind = 1,
                              .permits = 0x0a0b0c0du,
                              .owner = 0x1112131415161718ull};
    size_t len;
    const uint8_t *p = put_ex(&b, &in, names, 2, &len);
    const uint8_t want[ACQX_FIXED + 4 + 3] = {
        0x44, 0x33, 0x22, 0x11,                         /* ttl_ms */
        0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* wait_ms = -2 */
        1,    0,    0,    0,                            /* flags */
        0x88, 0x77, 0x66, 0x55,                         /* max_hold_ms */
        0xcc, 0xbb, 0xaa, 0x99,                         /* progress_ms */
        1,                                              /* kind */
        0,                                              /* reserved */
        2,    0,                                        /* nnames */
        0x0d, 0x0c, 0x0b, 0x0a,                         /* permits */
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* owner */
        2,    0,    'a',  'b',                          /* name 0 */
        1,    0,    'c'};                               /* name 1 */
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(p, want, sizeof want);
    wire_buf_free(&b);
}

/* Every length but the right one is refused, shorter or longer. */
Test(wire, acquire_ex_every_wrong_length_is_malformed)
{
    struct wire_buf b = {0};
    const char *names[] = {"job", "db"};
    struct wire_acquire in = {.ttl_ms = 1, .kind = WIRE_KIND_SHARED}, out;
    size_t len;
    const uint8_t *body = put_ex(&b, &in, names, 2, &len);
    uint8_t big[WIRE_MAX_BODY + 1] = {0};
    memcpy(big, body, len);
    for (size_t n = 0; n <= len + 8; n++) {
        int want = n == len ? 0 : DLOCK_EPROTO;
        cr_assert_eq(wire_get_acquire_ex(big, n, &out), want, "length %zu of %zu", n, len);
    }
    /* a body of the right length read as a plain ACQUIRE is malformed too */
    cr_assert_eq(wire_get_acquire(body, len, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, acquire_ex_name_count_from_1_to_max)
{
    struct wire_buf b = {0};
    static const char *names[WIRE_MAX_NAMES + 1];
    for (int i = 0; i <= WIRE_MAX_NAMES; i++)
        names[i] = "n";
    struct wire_acquire in = {.ttl_ms = 1}, out;
    size_t len;
    const uint8_t *body = put_ex(&b, &in, names, WIRE_MAX_NAMES, &len);
    cr_assert_eq(wire_get_acquire_ex(body, len, &out), 0);
    cr_assert_eq(out.nnames, WIRE_MAX_NAMES);
    const char *n;
    uint16_t nl;
    wire_acquire_name(&out, WIRE_MAX_NAMES - 1, &n, &nl);
    cr_assert_eq(nl, 1);
    cr_assert_eq((const uint8_t *)n, body + len - 1, "the last name ends the body");

    /* The decoder: nnames 0, or one over the cap with a name to match. */
    uint8_t copy[WIRE_MAX_BODY];
    memcpy(copy, body, len);
    copy[ACQX_NNAMES] = 0;
    cr_assert_eq(wire_get_acquire_ex(copy, ACQX_FIXED, &out), DLOCK_EPROTO, "nnames 0");
    copy[ACQX_NNAMES] = WIRE_MAX_NAMES + 1;
    memcpy(copy + len, "\x01\x00n", 3);
    cr_assert_eq(wire_get_acquire_ex(copy, len + 3, &out), DLOCK_EPROTO, "nnames over the cap");
    copy[ACQX_NNAMES] = 0xff;
    copy[ACQX_NNAMES + 1] = 0xff;
    cr_assert_eq(wire_get_acquire_ex(copy, len + 3, &out), DLOCK_EPROTO, "nnames 65535");

    /* The encoder: nothing is written for 0 or too many names. */
    size_t before = b.len;
    uint16_t lens[WIRE_MAX_NAMES + 1];
    for (int i = 0; i <= WIRE_MAX_NAMES; i++)
        lens[i] = 1;
    cr_assert_eq(wire_put_acquire_ex(&b, 2, &in, names, lens, 0), DLOCK_EINVAL);
    cr_assert_eq(wire_put_acquire_ex(&b, 2, &in, names, lens, WIRE_MAX_NAMES + 1), DLOCK_EINVAL);
    cr_assert_eq(b.len, before, "a refused frame must not leave bytes in the buffer");
    wire_buf_free(&b);
}

/* The name list must fill the body exactly: a length that runs past it, one
 * that stops short of it, a list cut inside a length, more or fewer names
 * than nnames. */
Test(wire, acquire_ex_name_list_must_fill_the_body)
{
    struct wire_buf b = {0};
    const char *names[] = {"abc", "de"};
    struct wire_acquire in = {.ttl_ms = 1}, out;
    size_t len;
    const uint8_t *body = put_ex(&b, &in, names, 2, &len);
    cr_assert_eq(len, ACQX_FIXED + 2 + 3 + 2 + 2);
    uint8_t c[ACQX_FIXED + 16];
    size_t second = ACQX_FIXED + 5; /* offset of the second name's length */
#define RESET() memcpy(c, body, len)
    RESET();
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), 0);
    c[ACQX_FIXED] = 4; /* the first name runs into the second's length */
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), DLOCK_EPROTO, "first name too long");
    RESET();
    c[second] = 3; /* the last name runs past the body */
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), DLOCK_EPROTO, "last name past the end");
    RESET();
    c[second] = 1; /* the last name stops short: a byte left over */
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), DLOCK_EPROTO, "a byte after the last name");
    RESET();
    c[second] = 0xff;
    c[second + 1] = 0xff; /* a huge length */
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), DLOCK_EPROTO, "name length 65535");
    RESET();
    c[ACQX_NNAMES] = 1; /* the second name is left over */
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), DLOCK_EPROTO, "nnames 1 of 2");
    RESET();
    c[ACQX_NNAMES] = 3; /* a third name is missing */
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), DLOCK_EPROTO, "nnames 3 of 2");
    RESET();
    c[len] = 0; /* a third name cut inside its length (one byte of two) */
    c[ACQX_NNAMES] = 3;
    cr_assert_eq(wire_get_acquire_ex(c, len + 1, &out), DLOCK_EPROTO, "cut inside a length");
    c[len + 1] = 0; /* ... and whole: an empty third name is the agent's to refuse */
    cr_assert_eq(wire_get_acquire_ex(c, len + 2, &out), 0, "an empty third name");
    cr_assert_eq(out.nnames, 3);
#undef RESET
    wire_buf_free(&b);
}

/* The decoder checks the layout, not what it asks for: kind, flags, permits
 * and owner are the agent's to judge; the reserved byte must be 0. */
Test(wire, acquire_ex_reserved_byte_and_unjudged_fields)
{
    struct wire_buf b = {0};
    const char *names[] = {"n"};
    struct wire_acquire in = {.ttl_ms = 1,
                              .wait_ms = -7,
                              .flags = 0xffffffffu,
                              .kind = 0xff,
                              .permits = 0,
                              .owner = UINT64_MAX},
                        out;
    size_t len;
    const uint8_t *body = put_ex(&b, &in, names, 1, &len);
    cr_assert_eq(wire_get_acquire_ex(body, len, &out), 0);
    cr_assert_eq(out.kind, 0xff);
    cr_assert_eq(out.flags, 0xffffffffu);
    cr_assert_eq(out.wait_ms, -7);
    cr_assert_eq(out.owner, UINT64_MAX);
    uint8_t c[ACQX_FIXED + 3];
    memcpy(c, body, len);
    c[ACQX_RSVD] = 1;
    cr_assert_eq(wire_get_acquire_ex(c, len, &out), DLOCK_EPROTO, "reserved byte not 0");
    wire_buf_free(&b);
}

Test(wire, acquire_ex_encoder_caps_names_and_body)
{
    static char name[WIRE_MAX_NAME + 1];
    memset(name, 'n', sizeof name);
    const char *names[4] = {name, name, name, name};
    uint16_t lens[4] = {WIRE_MAX_NAME, WIRE_MAX_NAME, WIRE_MAX_NAME, 10};
    struct wire_buf b = {0};
    struct wire_acquire in = {.ttl_ms = 1}, out;
    /* 40 + 3 x 1026 + 12 = 3130 bytes: fits */
    cr_assert_eq(wire_put_acquire_ex(&b, 1, &in, names, lens, 4), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ACQUIRE_EX, 1, &len);
    cr_assert_eq(wire_get_acquire_ex(body, len, &out), 0);
    cr_assert_eq(out.name_len, WIRE_MAX_NAME);

    size_t before = b.len;
    lens[1] = WIRE_MAX_NAME + 1;
    cr_assert_eq(wire_put_acquire_ex(&b, 2, &in, names, lens, 4), DLOCK_EINVAL, "a name too long");
    lens[1] = WIRE_MAX_NAME;
    lens[3] = WIRE_MAX_NAME; /* 40 + 4 x 1026 = 4144 > WIRE_MAX_BODY */
    cr_assert_eq(wire_put_acquire_ex(&b, 2, &in, names, lens, 4), DLOCK_EINVAL, "body too long");
    cr_assert_eq(b.len, before, "a refused frame must not leave bytes in the buffer");
    wire_buf_free(&b);
}

/* A plain ACQUIRE decodes as the exclusive kind with one name, which
 * wire_acquire_name() gives as name 0. */
Test(wire, acquire_decodes_as_exclusive_with_one_name)
{
    struct wire_buf b = {0};
    struct wire_acquire in = {.ttl_ms = 1,
                              .name = "plain",
                              .name_len = 5,
                              .kind = WIRE_KIND_SHARED, /* not on the wire: ignored */
                              .permits = 9,
                              .owner = 9},
                        out;
    cr_assert_eq(wire_put_acquire(&b, 1, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ACQUIRE, 1, &len);
    cr_assert_eq(len, ACQ_FIXED + 5);
    memset(&out, 0x5a, sizeof out);
    cr_assert_eq(wire_get_acquire(body, len, &out), 0);
    cr_assert_eq(out.kind, WIRE_KIND_EXCLUSIVE);
    cr_assert_eq(out.permits, 0);
    cr_assert_eq(out.owner, 0);
    cr_assert_eq(out.nnames, 1);
    cr_assert_null(out.names);
    const char *n = NULL;
    uint16_t nl = 0;
    wire_acquire_name(&out, 0, &n, &nl);
    cr_assert_eq(n, out.name);
    cr_assert_eq(nl, 5);
    wire_acquire_name(&out, 1, &n, &nl);
    cr_assert_null(n);
    cr_assert_eq(nl, 0);
    /* A plain ACQUIRE's body read as ACQUIRE_EX: too short for it. */
    cr_assert_eq(wire_get_acquire_ex(body, len, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, release_round_trip)
{
    struct wire_buf b = {0};
    struct wire_release in = {.lease_id = UINT64_MAX}, out;
    cr_assert_eq(wire_put_release(&b, 5, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_RELEASE, 5, &len);
    cr_assert_eq(len, 8);
    cr_assert_eq(wire_get_release(body, len, &out), 0);
    cr_assert_eq(out.lease_id, UINT64_MAX);
    CHECK_WRONG_LENGTHS(wire_get_release, body, len, struct wire_release);
    wire_buf_free(&b);
}

Test(wire, empty_frames)
{
    struct wire_buf b = {0};
    cr_assert_eq(wire_put_empty(&b, 11, WIRE_T_PING), 0);
    cr_assert_eq(wire_put_empty(&b, 12, WIRE_T_OK), 0);
    cr_assert_eq(b.len, 2 * WIRE_HDR_LEN);
    struct wire_hdr h;
    cr_assert_eq(wire_hdr_decode(b.data, b.len, WIRE_MAX_BODY, &h), 1);
    cr_assert_eq(h.type, WIRE_T_PING);
    cr_assert_eq(h.len, 0);
    cr_assert_eq(h.id, 11);
    cr_assert_eq(wire_hdr_decode(b.data + WIRE_HDR_LEN, b.len - WIRE_HDR_LEN, 0, &h), 1);
    cr_assert_eq(h.type, WIRE_T_OK);
    cr_assert_eq(h.id, 12);
    wire_buf_free(&b);
}

Test(wire, granted_round_trip)
{
    struct wire_buf b = {0};
    struct wire_granted in = {.lease_id = 0x1122334455667788ull,
                              .deadline_ns = 0xfedcba9876543210ull,
                              .fence = 1ull << 63,
                              .ttl_ms = 300,
                              .slot = 0xa0b0c0d0u},
                        out;
    cr_assert_eq(wire_put_granted(&b, 77, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_GRANTED, 77, &len);
    cr_assert_eq(len, 32);
    cr_assert_eq(wire_get_granted(body, len, &out), 0);
    cr_assert_eq(out.lease_id, in.lease_id);
    cr_assert_eq(out.deadline_ns, in.deadline_ns);
    cr_assert_eq(out.fence, in.fence);
    cr_assert_eq(out.ttl_ms, 300);
    cr_assert_eq(out.slot, 0xa0b0c0d0u);
    CHECK_WRONG_LENGTHS(wire_get_granted, body, len, struct wire_granted);
    wire_buf_free(&b);
}

/* The byte offsets of docs/protocol.md, not just encoder/decoder symmetry. */
Test(wire, acquire_bytes_follow_the_documented_layout)
{
    struct wire_buf b = {0};
    struct wire_acquire in = {.ttl_ms = 0x11223344u,
                              .wait_ms = -2,
                              .flags = 0,
                              .max_hold_ms = 0x55667788u,
                              .progress_ms = 0x99aabbccu,
                              .name = "ab",
                              .name_len = 2};
    cr_assert_eq(wire_put_acquire(&b, 1, &in), 0);
    size_t len;
    const uint8_t *p = frame_body(&b, WIRE_T_ACQUIRE, 1, &len);
    const uint8_t want[ACQ_FIXED + 2] = {0x44, 0x33, 0x22, 0x11, /* ttl_ms */
                                         0xfe, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, /* wait_ms = -2 */
                                         0,    0,    0,    0,    /* flags */
                                         0x88, 0x77, 0x66, 0x55, /* max_hold_ms */
                                         0xcc, 0xbb, 0xaa, 0x99, /* progress_ms */
                                         2,    0,                /* name_len */
                                         'a',  'b'};
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(p, want, sizeof want);
    wire_buf_free(&b);
}

Test(wire, granted_bytes_follow_the_documented_layout)
{
    struct wire_buf b = {0};
    struct wire_granted in = {.lease_id = 0x0102030405060708ull,
                              .deadline_ns = 0x1112131415161718ull,
                              .fence = 0x2122232425262728ull,
                              .ttl_ms = 0x31323334u,
                              .slot = 0x41424344u};
    cr_assert_eq(wire_put_granted(&b, 2, &in), 0);
    size_t len;
    const uint8_t *p = frame_body(&b, WIRE_T_GRANTED, 2, &len);
    const uint8_t want[32] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x18, 0x17, 0x16,
                              0x15, 0x14, 0x13, 0x12, 0x11, 0x28, 0x27, 0x26, 0x25, 0x24, 0x23,
                              0x22, 0x21, 0x34, 0x33, 0x32, 0x31, 0x44, 0x43, 0x42, 0x41};
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(p, want, sizeof want);
    wire_buf_free(&b);
}

Test(wire, error_round_trip)
{
    struct wire_buf b = {0};
    const char msg[] = "name too long";
    struct wire_error in = {.code = DLOCK_ENAMETOOLONG, .msg = msg, .msg_len = sizeof msg - 1}, out;
    cr_assert_eq(wire_put_error(&b, 8, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ERROR, 8, &len);
    cr_assert_eq(len, 6 + sizeof msg - 1);
    cr_assert_eq(wire_get_error(body, len, &out), 0);
    cr_assert_eq(out.code, DLOCK_ENAMETOOLONG, "negative codes survive the u32 on the wire");
    cr_assert_eq(out.msg_len, sizeof msg - 1);
    cr_assert_arr_eq(out.msg, msg, sizeof msg - 1);
    CHECK_WRONG_LENGTHS(wire_get_error, body, len, struct wire_error);
    cr_assert_eq(wire_get_error(body, 5, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, error_with_empty_message)
{
    struct wire_buf b = {0};
    struct wire_error in = {.code = DLOCK_EPROTO, .msg = NULL, .msg_len = 0}, out;
    cr_assert_eq(wire_put_error(&b, 0, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ERROR, 0, &len);
    cr_assert_eq(len, 6);
    cr_assert_eq(wire_get_error(body, len, &out), 0);
    cr_assert_eq(out.code, DLOCK_EPROTO);
    cr_assert_eq(out.msg_len, 0);
    wire_buf_free(&b);
}

Test(wire, error_message_up_to_max_body)
{
    static char msg[WIRE_MAX_BODY];
    memset(msg, 'm', sizeof msg);
    struct wire_buf b = {0};
    struct wire_error in = {.code = -1, .msg = msg, .msg_len = WIRE_MAX_BODY - 6}, out;
    cr_assert_eq(wire_put_error(&b, 1, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_ERROR, 1, &len);
    cr_assert_eq(len, WIRE_MAX_BODY, "the largest frame fills exactly WIRE_MAX_BODY");
    cr_assert_eq(wire_get_error(body, len, &out), 0);
    cr_assert_eq(out.msg_len, WIRE_MAX_BODY - 6);

    size_t before = b.len;
    in.msg_len = WIRE_MAX_BODY - 5;
    cr_assert_eq(wire_put_error(&b, 2, &in), DLOCK_EINVAL);
    cr_assert_eq(b.len, before);
    wire_buf_free(&b);
}

Test(wire, event_round_trip)
{
    struct wire_buf b = {0};
    struct wire_event in = {.lease_id = 9,
                            .state = DLOCK_STATE_LOST,
                            .reason = DLOCK_EUNAVAIL,
                            .deadline_ns = 0},
                      out;
    cr_assert_eq(wire_put_event(&b, 0, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_EVENT, 0, &len);
    cr_assert_eq(len, 24);
    cr_assert_eq(wire_get_event(body, len, &out), 0);
    cr_assert_eq(out.lease_id, 9);
    cr_assert_eq(out.state, DLOCK_STATE_LOST);
    cr_assert_eq(out.reason, DLOCK_EUNAVAIL);
    cr_assert_eq(out.deadline_ns, 0);
    CHECK_WRONG_LENGTHS(wire_get_event, body, len, struct wire_event);
    uint8_t copy[24];
    memcpy(copy, body, 24);
    copy[10] = 1; /* reserved u16 */
    cr_assert_eq(wire_get_event(copy, 24, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
}

Test(wire, several_frames_in_one_buffer_and_consume)
{
    struct wire_buf b = {0};
    struct wire_release r = {.lease_id = 1};
    struct wire_acquire a = {.ttl_ms = 100, .wait_ms = 5, .name = "x", .name_len = 1};
    cr_assert_eq(wire_put_release(&b, 1, &r), 0);
    cr_assert_eq(wire_put_acquire(&b, 2, &a), 0);
    cr_assert_eq(wire_put_empty(&b, 3, WIRE_T_PING), 0);
    cr_assert_eq(b.len, (12 + 8) + (12 + ACQ_FIXED + 1) + 12);

    uint32_t ids[3] = {0};
    for (int i = 0; i < 3; i++) {
        struct wire_hdr h;
        cr_assert_eq(wire_hdr_decode(b.data, b.len, WIRE_MAX_BODY, &h), 1);
        ids[i] = h.id;
        wire_buf_consume(&b, WIRE_HDR_LEN + h.len);
    }
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 2);
    cr_assert_eq(ids[2], 3);
    cr_assert_eq(b.len, 0);

    /* partial consume keeps the rest in order */
    cr_assert_eq(wire_put_release(&b, 4, &r), 0);
    wire_buf_consume(&b, 5);
    cr_assert_eq(b.len, 15);
    cr_assert_eq(b.data[0], 0x00); /* byte 5 of the header: high byte of the type */
    cr_assert_eq(b.data[3], 4);    /* low byte of the id */
    wire_buf_consume(&b, 1000);
    cr_assert_eq(b.len, 0);
    wire_buf_free(&b);
    cr_assert_null(b.data);
    wire_buf_free(&b); /* idempotent */
}

Test(wire, buffer_grows_across_many_frames)
{
    struct wire_buf b = {0};
    static char name[WIRE_MAX_NAME];
    memset(name, 'q', sizeof name);
    struct wire_acquire a = {.ttl_ms = 1, .name = name, .name_len = WIRE_MAX_NAME};
    for (int i = 0; i < 100; i++)
        cr_assert_eq(wire_put_acquire(&b, (uint32_t)i, &a), 0);
    cr_assert_eq(b.len, 100 * (size_t)(12 + ACQ_FIXED + WIRE_MAX_NAME));
    cr_assert_geq(b.cap, b.len);
    size_t off = 0;
    for (int i = 0; i < 100; i++) {
        struct wire_hdr h;
        struct wire_acquire out;
        cr_assert_eq(wire_hdr_decode(b.data + off, b.len - off, WIRE_MAX_BODY, &h), 1);
        cr_assert_eq(h.id, (uint32_t)i);
        cr_assert_eq(wire_get_acquire(b.data + off + WIRE_HDR_LEN, h.len, &out), 0);
        cr_assert_eq(out.name_len, WIRE_MAX_NAME);
        off += WIRE_HDR_LEN + h.len;
    }
    wire_buf_free(&b);
}

/* ---- the status socket beside the client socket ---- */

Test(status_sibling, dlock_sock_gives_status_sock_else_a_status_suffix)
{
    static const char *const cases[][2] = {
        {"/run/dlock/dlock.sock", "/run/dlock/status.sock"},
        {"dlock.sock", "status.sock"},
        {"/tmp/a.sock", "/tmp/a-status.sock"},
        {"/tmp/a", "/tmp/a-status.sock"},
        {"/tmp/mydlock.sock", "/tmp/mydlock-status.sock"},
        {"/tmp/x.sock.d/a", "/tmp/x.sock.d/a-status.sock"},
        {"/tmp/.sock", "/tmp/.sock-status.sock"},
        {"rel/agent.sock", "rel/agent-status.sock"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[108];
        cr_assert_eq(wire_status_sibling(cases[i][0], out, sizeof out), 0);
        cr_assert_str_eq(out, cases[i][1], "beside %s", cases[i][0]);
    }
    /* Exactly fitting, then one byte short: "" and -1. */
    char out[19];
    cr_assert_eq(wire_status_sibling("/tmp/a.sock", out, sizeof out), 0);
    cr_assert_str_eq(out, "/tmp/a-status.sock");
    cr_assert_eq(wire_status_sibling("/tmp/a.sock", out, sizeof out - 1), -1);
    cr_assert_str_eq(out, "");
}

/* Version 3: a label after the 8 bytes, only when there is one; the
 * decoder takes exactly its length, 1 to WIRE_MAX_LABEL bytes, and none
 * before version 3. */
Test(wire, hello_label_round_trip)
{
    struct wire_buf b = {0};
    struct wire_hello in = {.magic = WIRE_MAGIC, .version = 3, .label = "sleep 30", .label_len = 8},
                      out;
    cr_assert_eq(wire_put_hello(&b, 5, &in), 0);
    size_t len;
    const uint8_t *body = frame_body(&b, WIRE_T_HELLO, 5, &len);
    cr_assert_eq(len, 8 + 2 + 8);
    cr_assert_eq(wire_get_hello(body, len, &out), 0);
    cr_assert_eq(out.version, 3);
    cr_assert_eq(out.label_len, 8);
    cr_assert_arr_eq(out.label, "sleep 30", 8);
    CHECK_WRONG_LENGTHS(wire_get_hello, body, len, struct wire_hello);
    uint8_t copy[8 + 2 + WIRE_MAX_LABEL + 1];
    memcpy(copy, body, len);
    copy[4] = 2; /* the same bytes in version 2 */
    cr_assert_eq(wire_get_hello(copy, len, &out), DLOCK_EPROTO);
    copy[4] = 3;
    copy[8] = 0; /* an empty label's part */
    cr_assert_eq(wire_get_hello(copy, 10, &out), DLOCK_EPROTO);
    wire_buf_free(&b);

    /* No label: the 8 bytes of version 2, in version 3 too. */
    struct wire_hello none = {.magic = WIRE_MAGIC, .version = 3};
    cr_assert_eq(wire_put_hello(&b, 6, &none), 0);
    body = frame_body(&b, WIRE_T_HELLO, 6, &len);
    cr_assert_eq(len, 8);
    cr_assert_eq(wire_get_hello(body, len, &out), 0);
    cr_assert_null(out.label);
    cr_assert_eq(out.label_len, 0);
    wire_buf_free(&b);

    /* The longest label, and one byte more. */
    char label[WIRE_MAX_LABEL + 1];
    memset(label, 'x', sizeof label);
    in.label = label;
    in.label_len = WIRE_MAX_LABEL;
    cr_assert_eq(wire_put_hello(&b, 7, &in), 0);
    body = frame_body(&b, WIRE_T_HELLO, 7, &len);
    cr_assert_eq(wire_get_hello(body, len, &out), 0);
    cr_assert_eq(out.label_len, WIRE_MAX_LABEL);
    memcpy(copy, body, len);
    copy[8] = WIRE_MAX_LABEL + 1;
    copy[len] = 'x';
    cr_assert_eq(wire_get_hello(copy, len + 1, &out), DLOCK_EPROTO);
    wire_buf_free(&b);
    in.label_len = WIRE_MAX_LABEL + 1;
    cr_assert_eq(wire_put_hello(&b, 8, &in), DLOCK_EINVAL);
    in.label_len = 1;
    in.version = 2;
    cr_assert_eq(wire_put_hello(&b, 8, &in), DLOCK_EINVAL);
    wire_buf_free(&b);
}
