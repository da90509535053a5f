/* SPDX-License-Identifier: BSD-3-Clause */
/* test_journal.c -- unit tests of agent/base/journal.c: the record codec and
 * its checks, torn and damaged records, replay semantics, and the file:
 * compaction against a model, a broken journal, a torn tail at open. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "journal.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

/* ---- records ---- */

static struct journal_conn conn_of(uint64_t id)
{
    struct journal_conn c = {.conn_id = id,
                             .pid = 1000 + (uint32_t)id,
                             .uid = 1001,
                             .gid = 1002,
                             .pid_start = 123456789 + id,
                             .nslots = 64,
                             .flags = JOURNAL_CONN_RESUMABLE};
    for (int i = 0; i < 16; i++)
        c.secret[i] = (uint8_t)(id * 31 + (uint64_t)i);
    return c;
}

/* A lease on conn_id of a name of len bytes ('a' + something of id). */
static void lease_of(struct journal_lease *l, uint64_t conn_id, uint64_t lease_id, size_t len)
{
    memset(l, 0, sizeof *l);
    l->conn_id = conn_id;
    l->lease_id = lease_id;
    l->slot = (uint32_t)(lease_id & 63);
    l->ttl_ms = 30000;
    l->holds = 1;
    l->fence = lease_id * 7;
    memcpy(l->token, TOKEN, sizeof TOKEN);
    l->name_len = (uint16_t)len;
    for (size_t i = 0; i < len; i++)
        l->name[i] = (char)('a' + (lease_id + i) % 26);
}

static void conn_eq(const struct journal_conn *a, const struct journal_conn *b)
{
    cr_assert_eq(a->conn_id, b->conn_id);
    cr_assert_eq(a->pid, b->pid);
    cr_assert_eq(a->uid, b->uid);
    cr_assert_eq(a->gid, b->gid);
    cr_assert_eq(a->pid_start, b->pid_start);
    cr_assert_arr_eq(a->secret, b->secret, sizeof a->secret);
    cr_assert_eq(a->nslots, b->nslots);
    cr_assert_eq(a->flags, b->flags);
}

static void lease_eq(const struct journal_lease *a, const struct journal_lease *b)
{
    cr_assert_eq(a->conn_id, b->conn_id);
    cr_assert_eq(a->lease_id, b->lease_id);
    cr_assert_eq(a->slot, b->slot);
    cr_assert_eq(a->kind, b->kind);
    cr_assert_eq(a->format, b->format);
    cr_assert_eq(a->permits, b->permits);
    cr_assert_eq(a->ttl_ms, b->ttl_ms);
    cr_assert_eq(a->holds, b->holds);
    cr_assert_eq(a->holder_id, b->holder_id);
    cr_assert_eq(a->fence, b->fence);
    cr_assert_eq(a->hold_until_ns, b->hold_until_ns);
    cr_assert_eq(a->progress_ns, b->progress_ns);
    cr_assert_str_eq(a->token, b->token);
    cr_assert_eq(a->name_len, b->name_len);
    cr_assert_arr_eq(a->name, b->name, a->name_len);
    cr_assert_eq(b->name[b->name_len], '\0');
}

/* Encodes r, decodes it again: the same record, the same length. */
static void round_trip(const struct journal_rec *r, size_t want_len)
{
    uint8_t buf[JOURNAL_REC_MAX];
    int n = journal_encode(r, buf, sizeof buf);
    cr_assert_eq(n, (int)want_len, "encoded %d bytes, not %zu", n, want_len);
    static struct journal_rec back;
    memset(&back, 0x5a, sizeof back);
    size_t used = 0;
    cr_assert_eq(journal_decode(buf, (size_t)n, &back, &used), JOURNAL_READ_RECORD);
    cr_assert_eq(used, (size_t)n);
    cr_assert_eq(back.type, r->type);
    if (r->type == JOURNAL_CONN_PUT)
        conn_eq(&r->conn, &back.conn);
    else if (r->type == JOURNAL_LEASE_PUT)
        lease_eq(&r->lease, &back.lease);
    else if (r->type == JOURNAL_CONN_END)
        cr_assert_eq(back.conn.conn_id, r->conn.conn_id);
    else {
        cr_assert_eq(back.lease.conn_id, r->lease.conn_id);
        cr_assert_eq(back.lease.lease_id, r->lease.lease_id);
    }
    /* and once more: the same bytes */
    uint8_t again[JOURNAL_REC_MAX];
    cr_assert_eq(journal_encode(&back, again, sizeof again), n);
    cr_assert_arr_eq(again, buf, (size_t)n);
}

static size_t lease_len(size_t name_len)
{
    return JOURNAL_HDR_LEN + JOURNAL_LEASE_FIXED + name_len + JOURNAL_CRC_LEN;
}

Test(codec, crc32c_check_value)
{
    /* the check value of CRC-32C (iSCSI) */
    cr_assert_eq(journal_crc32c("123456789", 9), 0xe3069283u);
    cr_assert_eq(journal_crc32c("", 0), 0);
}

/* CRC-32C a bit at a time, as its definition has it. */
static uint32_t crc_bitwise(const uint8_t *p, size_t len)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

Test(codec, crc32c_of_every_length_and_alignment)
{
    uint8_t buf[320];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 151 + 7);
    for (size_t at = 0; at < 8; at++)
        for (size_t len = 0; len + at <= sizeof buf; len++)
            cr_assert_eq(journal_crc32c(buf + at, len), crc_bitwise(buf + at, len),
                         "%zu bytes at %zu", len, at);
}

Test(codec, conn_round_trip_edges)
{
    struct journal_rec r = {.type = JOURNAL_CONN_PUT};
    r.conn = (struct journal_conn){.conn_id = UINT64_MAX,
                                   .pid = UINT32_MAX,
                                   .uid = UINT32_MAX,
                                   .gid = UINT32_MAX,
                                   .pid_start = UINT64_MAX,
                                   .nslots = UINT32_MAX,
                                   .flags = JOURNAL_CONN_RESUMABLE};
    memset(r.conn.secret, 0xff, sizeof r.conn.secret);
    size_t len = JOURNAL_HDR_LEN + JOURNAL_CONN_PUT_LEN + JOURNAL_CRC_LEN;
    round_trip(&r, len);
    r.conn = (struct journal_conn){0};
    round_trip(&r, len);
    r.conn = conn_of(42);
    round_trip(&r, len);
}

Test(codec, ends_round_trip)
{
    struct journal_rec r = {.type = JOURNAL_CONN_END};
    r.conn.conn_id = UINT64_MAX;
    round_trip(&r, JOURNAL_HDR_LEN + JOURNAL_CONN_END_LEN + JOURNAL_CRC_LEN);
    r.conn.conn_id = 0;
    round_trip(&r, JOURNAL_HDR_LEN + JOURNAL_CONN_END_LEN + JOURNAL_CRC_LEN);
    r.type = JOURNAL_LEASE_END;
    r.lease.conn_id = UINT64_MAX;
    r.lease.lease_id = UINT64_MAX - 1;
    round_trip(&r, JOURNAL_HDR_LEN + JOURNAL_LEASE_END_LEN + JOURNAL_CRC_LEN);
}

Test(codec, lease_round_trip_names_of_1_and_1024_bytes)
{
    static struct journal_rec r = {.type = JOURNAL_LEASE_PUT};
    lease_of(&r.lease, UINT64_MAX, UINT64_MAX, 1);
    r.lease.slot = UINT32_MAX;
    r.lease.kind = 2;
    r.lease.format = 3;
    r.lease.permits = UINT32_MAX;
    r.lease.ttl_ms = UINT32_MAX;
    r.lease.holds = UINT32_MAX;
    r.lease.holder_id = UINT64_MAX;
    r.lease.fence = UINT64_MAX;
    r.lease.hold_until_ns = UINT64_MAX;
    r.lease.progress_ns = UINT64_MAX;
    memcpy(r.lease.token, "ffffffffffffffffffffffffffffffff", JOURNAL_TOKEN_HEX + 1);
    round_trip(&r, lease_len(1));
    lease_of(&r.lease, 0, 0, JOURNAL_NAME_MAX);
    r.lease.name[0] = '\xff'; /* any byte but NUL */
    round_trip(&r, JOURNAL_REC_MAX);
    cr_assert_eq(lease_len(JOURNAL_NAME_MAX), JOURNAL_REC_MAX);
    for (uint8_t kind = 0; kind <= 2; kind++) {
        for (uint8_t format = 0; format <= 3; format++) {
            lease_of(&r.lease, 5, 6, 10);
            r.lease.kind = kind;
            r.lease.format = format;
            r.lease.permits = kind == 2 ? 1 : 0;
            round_trip(&r, lease_len(10));
        }
    }
}

Test(codec, encode_needs_room)
{
    static struct journal_rec r = {.type = JOURNAL_LEASE_PUT};
    lease_of(&r.lease, 1, 2, 30);
    uint8_t buf[JOURNAL_REC_MAX];
    cr_assert_eq(journal_encode(&r, buf, lease_len(30) - 1), -ENOBUFS);
    cr_assert_eq(journal_encode(&r, buf, lease_len(30)), (int)lease_len(30));
    r.type = JOURNAL_CONN_END;
    cr_assert_eq(journal_encode(&r, buf, 19), -ENOBUFS);
    r.type = (enum journal_type)9;
    cr_assert_eq(journal_encode(&r, buf, sizeof buf), -EINVAL);
}

/* ---- each rule, refused by the encoder and by the decoder ---- */

/* A valid lease record in buf; its length. */
static size_t valid_lease(uint8_t *buf, struct journal_rec *r, size_t name_len)
{
    r->type = JOURNAL_LEASE_PUT;
    lease_of(&r->lease, 3, 4, name_len);
    int n = journal_encode(r, buf, JOURNAL_REC_MAX);
    cr_assert_eq(n, (int)lease_len(name_len));
    return (size_t)n;
}

/* Recomputes the CRC of the record of n bytes in buf. */
static void reseal(uint8_t *buf, size_t n)
{
    uint32_t crc = journal_crc32c(buf, n - JOURNAL_CRC_LEN);
    memcpy(buf + n - JOURNAL_CRC_LEN, &crc, sizeof crc);
}

static void expect_corrupt(const uint8_t *buf, size_t n, const char *what)
{
    static struct journal_rec r;
    size_t used;
    cr_assert_eq(journal_decode(buf, n, &r, &used), JOURNAL_READ_CORRUPT, "%s was accepted", what);
}

/* The payload's field at off gets the bytes v (len); the CRC is made
 * right again, so that only the field's rule can refuse it. */
static void expect_field_refused(size_t off, const void *v, size_t len, const char *what)
{
    uint8_t buf[JOURNAL_REC_MAX];
    static struct journal_rec r;
    size_t n = valid_lease(buf, &r, 8);
    memcpy(buf + JOURNAL_HDR_LEN + off, v, len);
    reseal(buf, n);
    expect_corrupt(buf, n, what);
}

/* The same field rule, through a struct the encoder must refuse. */
static void expect_encode_refused(struct journal_rec *r, const char *what)
{
    uint8_t buf[JOURNAL_REC_MAX];
    memset(buf, 0x77, sizeof buf);
    cr_assert_eq(journal_encode(r, buf, sizeof buf), -EINVAL, "%s was encoded", what);
    cr_assert_eq(buf[0], 0x77, "%s: bytes written", what);
}

Test(rules, kind_at_most_2)
{
    uint8_t v = 3;
    expect_field_refused(64, &v, 1, "kind 3");
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.kind = 3;
    expect_encode_refused(&r, "kind 3");
}

Test(rules, format_at_most_3)
{
    uint8_t v = 4;
    expect_field_refused(65, &v, 1, "format 4");
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.format = 4;
    expect_encode_refused(&r, "format 4");
}

Test(rules, holds_at_least_1)
{
    uint32_t v = 0;
    expect_field_refused(60, &v, 4, "holds 0");
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.holds = 0;
    expect_encode_refused(&r, "holds 0");
}

Test(rules, ttl_at_least_1)
{
    uint32_t v = 0;
    expect_field_refused(56, &v, 4, "ttl 0");
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.ttl_ms = 0;
    expect_encode_refused(&r, "ttl 0");
}

Test(rules, permits_only_for_a_semaphore)
{
    uint32_t v = 2;
    expect_field_refused(52, &v, 4, "permits of an exclusive lease");
    uint8_t sem = 2;
    expect_field_refused(64, &sem, 1, "a semaphore without permits");
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.permits = 2;
    expect_encode_refused(&r, "permits of an exclusive lease");
    r.lease.permits = 0;
    r.lease.kind = 2;
    expect_encode_refused(&r, "a semaphore without permits");
}

Test(rules, token_lowercase_hex)
{
    expect_field_refused(68 + 5, "A", 1, "an uppercase token");
    expect_field_refused(68 + 31, "g", 1, "a token with g");
    expect_field_refused(68, "\0", 1, "a token with NUL");
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.token[0] = 'F';
    expect_encode_refused(&r, "an uppercase token");
    memcpy(r.lease.token, "0123", 5); /* too short */
    expect_encode_refused(&r, "a short token");
}

Test(rules, name_without_nul)
{
    expect_field_refused(100 + 3, "\0", 1, "a name with NUL");
    expect_field_refused(100 + 7, "\0", 1, "a name ending with NUL");
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.name[2] = '\0';
    expect_encode_refused(&r, "a name with NUL");
}

Test(rules, name_length_1_to_1024)
{
    static struct journal_rec r;
    valid_lease((uint8_t[JOURNAL_REC_MAX]){0}, &r, 8);
    r.lease.name_len = 0;
    expect_encode_refused(&r, "an empty name");
    r.lease.name_len = JOURNAL_NAME_MAX + 1;
    expect_encode_refused(&r, "a name of 1025 bytes");
    /* the frame: a payload with no name, or one too long */
    uint8_t buf[JOURNAL_REC_MAX + 8];
    size_t n = valid_lease(buf, &r, 1);
    uint32_t plen = JOURNAL_LEASE_FIXED;
    uint16_t nlen = 0;
    memcpy(buf, &plen, 4);
    memcpy(buf + JOURNAL_HDR_LEN + 66, &nlen, 2);
    reseal(buf, n - 1);
    expect_corrupt(buf, n - 1, "an empty name");
    memset(buf, 0, sizeof buf);
    n = valid_lease(buf, &r, JOURNAL_NAME_MAX);
    plen = JOURNAL_LEASE_FIXED + JOURNAL_NAME_MAX + 1;
    nlen = JOURNAL_NAME_MAX + 1;
    memcpy(buf, &plen, 4);
    memcpy(buf + JOURNAL_HDR_LEN + 66, &nlen, 2);
    buf[n - JOURNAL_CRC_LEN] = 'x';
    reseal(buf, n + 1);
    expect_corrupt(buf, n + 1, "a name of 1025 bytes");
}

Test(rules, name_length_agrees_with_the_frame)
{
    uint16_t v = 7;
    expect_field_refused(66, &v, 2, "a name length the frame does not have");
    v = 9;
    expect_field_refused(66, &v, 2, "a name length past the frame");
}

Test(rules, conn_flags_known)
{
    static struct journal_rec r = {.type = JOURNAL_CONN_PUT};
    r.conn = conn_of(1);
    uint8_t buf[JOURNAL_REC_MAX];
    int n = journal_encode(&r, buf, sizeof buf);
    cr_assert_gt(n, 0);
    uint32_t flags = 2;
    memcpy(buf + JOURNAL_HDR_LEN + 32, &flags, 4);
    reseal(buf, (size_t)n);
    expect_corrupt(buf, (size_t)n, "an unknown flag");
    r.conn.flags = 0x80000001u;
    expect_encode_refused(&r, "an unknown flag");
}

Test(rules, type_known)
{
    uint8_t buf[JOURNAL_REC_MAX];
    static struct journal_rec r;
    size_t n = valid_lease(buf, &r, 8);
    for (unsigned t = 0; t < 256; t++) {
        if (t == JOURNAL_LEASE_PUT)
            continue;
        buf[4] = (uint8_t)t;
        reseal(buf, n);
        expect_corrupt(buf, n, "another type with a lease's payload");
    }
}

Test(rules, version_1)
{
    uint8_t buf[JOURNAL_REC_MAX];
    static struct journal_rec r;
    size_t n = valid_lease(buf, &r, 8);
    buf[5] = 2;
    reseal(buf, n);
    expect_corrupt(buf, n, "version 2");
    buf[5] = 0;
    reseal(buf, n);
    expect_corrupt(buf, n, "version 0");
}

Test(rules, reserved_zero)
{
    uint8_t buf[JOURNAL_REC_MAX];
    static struct journal_rec r;
    for (int i = 6; i < 8; i++) {
        size_t n = valid_lease(buf, &r, 8);
        buf[i] = 1;
        reseal(buf, n);
        expect_corrupt(buf, n, "a reserved byte set");
    }
}

Test(rules, payload_length_of_each_type)
{
    /* each fixed-size type, with a payload one byte longer and shorter */
    static struct journal_rec r;
    uint8_t buf[JOURNAL_REC_MAX];
    const enum journal_type types[] = {JOURNAL_CONN_PUT, JOURNAL_CONN_END, JOURNAL_LEASE_END};
    for (size_t t = 0; t < 3; t++) {
        memset(&r, 0, sizeof r);
        r.type = types[t];
        int n = journal_encode(&r, buf, sizeof buf);
        cr_assert_gt(n, 0);
        for (int d = -1; d <= 1; d += 2) {
            uint8_t b[JOURNAL_REC_MAX] = {0};
            memcpy(b, buf, (size_t)n);
            uint32_t plen = (uint32_t)(n - JOURNAL_HDR_LEN - JOURNAL_CRC_LEN + d);
            memcpy(b, &plen, 4);
            reseal(b, (size_t)n + (size_t)d);
            expect_corrupt(b, (size_t)n + (size_t)d, "a payload of another length");
        }
    }
}

Test(rules, crc_must_match)
{
    uint8_t buf[JOURNAL_REC_MAX];
    static struct journal_rec r;
    size_t n = valid_lease(buf, &r, 8);
    buf[n - 1] ^= 0x80;
    expect_corrupt(buf, n, "a wrong CRC");
}

/* ---- streams: torn tails, flipped bits ---- */

/* A few records of every type, into buf; their ends in ends[]; the count. */
static size_t stream(uint8_t *buf, size_t cap, size_t *ends, size_t *len)
{
    static struct journal_rec r;
    size_t off = 0, k = 0;
    for (int i = 0; i < 6; i++) {
        memset(&r, 0, sizeof r);
        switch (i % 4) {
        case 0:
            r.type = JOURNAL_CONN_PUT;
            r.conn = conn_of((uint64_t)i + 1);
            break;
        case 1:
            r.type = JOURNAL_LEASE_PUT;
            lease_of(&r.lease, 1, (uint64_t)i, 5 + (size_t)i);
            break;
        case 2:
            r.type = JOURNAL_LEASE_END;
            r.lease.conn_id = 1;
            r.lease.lease_id = 1;
            break;
        default:
            r.type = JOURNAL_CONN_END;
            r.conn.conn_id = 1;
        }
        int n = journal_encode(&r, buf + off, cap - off);
        cr_assert_gt(n, 0);
        off += (size_t)n;
        ends[k++] = off;
    }
    *len = off;
    return k;
}

/* Decodes buf[0..len): how many records, and how it stopped. */
static enum journal_read decode_all(const uint8_t *buf, size_t len, size_t *count, size_t *good)
{
    static struct journal_rec r;
    size_t off = 0, n;
    enum journal_read st;
    *count = 0;
    while ((st = journal_decode(buf + off, len - off, &r, &n)) == JOURNAL_READ_RECORD) {
        off += n;
        ++*count;
    }
    *good = off;
    return st;
}

Test(streams, torn_tail_at_every_offset_keeps_earlier_records)
{
    uint8_t buf[4096];
    size_t ends[16], len, count, good;
    size_t k = stream(buf, sizeof buf, ends, &len);
    cr_assert_eq(decode_all(buf, len, &count, &good), JOURNAL_READ_END);
    cr_assert_eq(count, k);
    /* every record's tail, each in turn as the last */
    for (size_t last = 0; last < k; last++) {
        size_t start = last ? ends[last - 1] : 0;
        for (size_t cut = start + 1; cut < ends[last]; cut++) {
            cr_assert_eq(decode_all(buf, cut, &count, &good), JOURNAL_READ_TORN,
                         "record %zu cut at %zu not torn", last, cut);
            cr_assert_eq(count, last);
            cr_assert_eq(good, start);
        }
    }
}

Test(streams, a_flipped_bit_in_any_record_is_found)
{
    uint8_t buf[4096];
    size_t ends[16], len, count, good;
    size_t k = stream(buf, sizeof buf, ends, &len);
    for (size_t bit = 0; bit < len * 8; bit++) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        size_t rec = 0;
        while (ends[rec] <= bit / 8)
            rec++;
        enum journal_read st = decode_all(buf, len, &count, &good);
        cr_assert(st == JOURNAL_READ_CORRUPT || st == JOURNAL_READ_TORN,
                  "bit %zu flipped: read to the end", bit);
        cr_assert_eq(count, rec, "bit %zu of record %zu flipped: %zu records read", bit, rec,
                     count);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    cr_assert_eq(decode_all(buf, len, &count, &good), JOURNAL_READ_END);
    cr_assert_eq(count, k);
}

Test(streams, garbage_and_zeros_are_corrupt)
{
    uint8_t zeros[64] = {0};
    static struct journal_rec r;
    size_t used;
    cr_assert_eq(journal_decode(zeros, sizeof zeros, &r, &used), JOURNAL_READ_CORRUPT);
    cr_assert_eq(journal_decode(zeros, 0, &r, &used), JOURNAL_READ_END);
    /* a header that cannot be one, cut short: not taken for a torn tail */
    uint8_t bad[6] = {52, 0, 0, 0, 9, 1};
    cr_assert_eq(journal_decode(bad, sizeof bad, &r, &used), JOURNAL_READ_CORRUPT);
    uint8_t ok[6] = {52, 0, 0, 0, JOURNAL_CONN_PUT, 1};
    cr_assert_eq(journal_decode(ok, sizeof ok, &r, &used), JOURNAL_READ_TORN);
}

/* ---- replay ---- */

/* What a replay visited, in order. */
struct seen {
    size_t nconns, nleases;
    struct journal_conn conns[64];
    struct journal_lease *leases; /* room for 8192 */
    int stop_after;               /* > 0: the visitor ends the replay at that call */
};

static int see_conn(void *arg, const struct journal_conn *c)
{
    struct seen *s = arg;
    cr_assert_lt(s->nconns, 64);
    s->conns[s->nconns++] = *c;
    return s->stop_after && (int)(s->nconns + s->nleases) == s->stop_after ? 77 : 0;
}

static int see_lease(void *arg, const struct journal_lease *l)
{
    struct seen *s = arg;
    cr_assert_lt(s->nleases, 8192);
    s->leases[s->nleases++] = *l;
    return s->stop_after && (int)(s->nconns + s->nleases) == s->stop_after ? 77 : 0;
}

static const struct journal_visitor seer = {see_conn, see_lease};

static struct seen *seen_new(void)
{
    struct seen *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->leases = calloc(8192, sizeof *s->leases);
    cr_assert_not_null(s->leases);
    return s;
}

static void seen_free(struct seen *s)
{
    free(s->leases);
    free(s);
}

/* A buffer of records, built up by the helpers below. */
struct log {
    uint8_t buf[1 << 16];
    size_t len;
};

static void log_rec(struct log *g, const struct journal_rec *r)
{
    int n = journal_encode(r, g->buf + g->len, sizeof g->buf - g->len);
    cr_assert_gt(n, 0);
    g->len += (size_t)n;
}

static void log_conn(struct log *g, uint64_t id)
{
    struct journal_rec r = {.type = JOURNAL_CONN_PUT, .conn = conn_of(id)};
    log_rec(g, &r);
}

static void log_lease(struct log *g, uint64_t conn_id, uint64_t lease_id, uint32_t holds)
{
    static struct journal_rec r = {.type = JOURNAL_LEASE_PUT};
    lease_of(&r.lease, conn_id, lease_id, 4 + lease_id % 7);
    r.lease.holds = holds;
    log_rec(g, &r);
}

static void log_end(struct log *g, uint64_t conn_id, uint64_t lease_id, bool lease)
{
    static struct journal_rec r;
    memset(&r, 0, sizeof r);
    r.type = lease ? JOURNAL_LEASE_END : JOURNAL_CONN_END;
    r.lease.conn_id = conn_id; /* conn.conn_id shares the place */
    r.lease.lease_id = lease_id;
    if (!lease)
        r.conn.conn_id = conn_id;
    log_rec(g, &r);
}

static struct seen *replay_log(struct log *g, struct journal_replay_info *info)
{
    struct seen *s = seen_new();
    cr_assert_eq(journal_replay_buf(g->buf, g->len, &seer, s, info), 0);
    return s;
}

Test(replay, put_replace_and_order_of_last_put)
{
    static struct log g;
    log_conn(&g, 1);
    log_lease(&g, 1, 10, 1);
    log_lease(&g, 1, 11, 1);
    log_lease(&g, 1, 10, 3); /* re-entered: now after 11 */
    struct journal_replay_info info;
    struct seen *s = replay_log(&g, &info);
    cr_assert_eq(s->nconns, 1);
    cr_assert_eq(s->nleases, 2);
    cr_assert_eq(s->leases[0].lease_id, 11);
    cr_assert_eq(s->leases[1].lease_id, 10);
    cr_assert_eq(s->leases[1].holds, 3);
    cr_assert_eq(info.stop, JOURNAL_READ_END);
    cr_assert_eq(info.good_bytes, g.len);
    cr_assert_eq(info.file_bytes, g.len);
    cr_assert_eq(info.conns, 1);
    cr_assert_eq(info.leases, 2);
    seen_free(s);
}

Test(replay, lease_end_removes_the_lease)
{
    static struct log g;
    log_conn(&g, 1);
    log_lease(&g, 1, 10, 1);
    log_lease(&g, 1, 11, 1);
    log_end(&g, 1, 10, true);
    log_end(&g, 1, 99, true); /* nothing live: nothing happens */
    log_end(&g, 2, 11, true);
    struct seen *s = replay_log(&g, NULL);
    cr_assert_eq(s->nleases, 1);
    cr_assert_eq(s->leases[0].lease_id, 11);
    seen_free(s);
}

Test(replay, conn_end_removes_its_leases_only)
{
    static struct log g;
    log_conn(&g, 1);
    log_conn(&g, 2);
    log_lease(&g, 1, 10, 1);
    log_lease(&g, 2, 10, 1); /* the same lease id under another connection */
    log_lease(&g, 1, 11, 1);
    log_end(&g, 1, 0, false);
    log_end(&g, 7, 0, false); /* not live */
    struct seen *s = replay_log(&g, NULL);
    cr_assert_eq(s->nconns, 1);
    cr_assert_eq(s->conns[0].conn_id, 2);
    cr_assert_eq(s->nleases, 1);
    cr_assert_eq(s->leases[0].conn_id, 2);
    cr_assert_eq(s->leases[0].lease_id, 10);
    seen_free(s);
}

Test(replay, connections_first_then_leases_in_order_of_last_put)
{
    static struct log g;
    log_conn(&g, 3);
    log_lease(&g, 3, 1, 1);
    log_conn(&g, 1);
    log_lease(&g, 1, 2, 1);
    log_lease(&g, 3, 3, 1);
    log_conn(&g, 2);
    log_lease(&g, 2, 4, 1);
    log_conn(&g, 3); /* replaced: its leases stay, it moves last */
    log_lease(&g, 3, 1, 2);
    struct seen *s = replay_log(&g, NULL);
    cr_assert_eq(s->nconns, 3);
    uint64_t conns[] = {1, 2, 3};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(s->conns[i].conn_id, conns[i]);
    uint64_t leases[] = {2, 3, 4, 1};
    cr_assert_eq(s->nleases, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(s->leases[i].lease_id, leases[i], "lease %d is %llu", i,
                     (unsigned long long)s->leases[i].lease_id);
    seen_free(s);
}

Test(replay, a_lease_without_its_connection_is_ignored)
{
    static struct log g;
    log_lease(&g, 1, 10, 1); /* before its connection */
    log_conn(&g, 1);
    log_lease(&g, 1, 11, 1);
    log_end(&g, 1, 0, false);
    log_conn(&g, 1); /* the same id again: none of the old leases */
    log_lease(&g, 1, 12, 1);
    struct seen *s = replay_log(&g, NULL);
    cr_assert_eq(s->nconns, 1);
    cr_assert_eq(s->nleases, 1);
    cr_assert_eq(s->leases[0].lease_id, 12);
    seen_free(s);
}

Test(replay, stops_at_a_torn_or_corrupt_record)
{
    static struct log g;
    log_conn(&g, 1);
    log_lease(&g, 1, 10, 1);
    size_t good = g.len;
    log_lease(&g, 1, 11, 1);
    struct journal_replay_info info;
    struct seen *s = seen_new();
    cr_assert_eq(journal_replay_buf(g.buf, g.len - 3, &seer, s, &info), 0);
    cr_assert_eq(info.stop, JOURNAL_READ_TORN);
    cr_assert_eq(info.good_bytes, good);
    cr_assert_eq(info.file_bytes, g.len - 3);
    cr_assert_eq(s->nleases, 1);
    seen_free(s);
    /* a damaged record in the middle: the one after it is lost too */
    log_lease(&g, 1, 12, 1);
    g.buf[good + 20] ^= 1;
    s = seen_new();
    cr_assert_eq(journal_replay_buf(g.buf, g.len, &seer, s, &info), 0);
    cr_assert_eq(info.stop, JOURNAL_READ_CORRUPT);
    cr_assert_eq(info.good_bytes, good);
    cr_assert_eq(s->nleases, 1);
    cr_assert_eq(s->leases[0].lease_id, 10);
    seen_free(s);
}

Test(replay, a_visitor_ends_it)
{
    static struct log g;
    log_conn(&g, 1);
    log_lease(&g, 1, 10, 1);
    log_lease(&g, 1, 11, 1);
    struct seen *s = seen_new();
    s->stop_after = 2;
    cr_assert_eq(journal_replay_buf(g.buf, g.len, &seer, s, NULL), 77);
    cr_assert_eq(s->nleases, 1);
    seen_free(s);
    cr_assert_eq(journal_replay_buf(g.buf, g.len, NULL, NULL, NULL), 0);
}

/* ---- the file ---- */

struct dir {
    char path[512];
    int fd;
};

static void dir_make(struct dir *d)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(d->path, sizeof d->path, "%s/dlock-journal-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(d->path));
    d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(d->fd, 0);
}

static void dir_remove(struct dir *d)
{
    DIR *dd = opendir(d->path);
    cr_assert_not_null(dd);
    struct dirent *e;
    while ((e = readdir(dd)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (unlinkat(d->fd, e->d_name, 0) < 0)
            unlinkat(d->fd, e->d_name, AT_REMOVEDIR);
    }
    closedir(dd);
    close(d->fd);
    cr_assert_eq(rmdir(d->path), 0);
}

static off_t file_size(struct dir *d, const char *name)
{
    struct stat st;
    cr_assert_eq(fstatat(d->fd, name, &st, 0), 0);
    return st.st_size;
}

static struct seen *replay_file(struct dir *d, struct journal_replay_info *info)
{
    struct seen *s = seen_new();
    cr_assert_eq(journal_replay(d->fd, "journal", &seer, s, info), 0);
    return s;
}

static void put_conn(struct journal *j, uint64_t id)
{
    struct journal_conn c = conn_of(id);
    cr_assert_eq(journal_put_conn(j, &c), 0);
}

static void put_lease(struct journal *j, uint64_t conn_id, uint64_t lease_id, size_t name_len)
{
    static struct journal_lease l;
    lease_of(&l, conn_id, lease_id, name_len);
    cr_assert_eq(journal_put_lease(j, &l), 0);
}

Test(file, open_creates_0600_removes_a_stale_new_file_checks_names)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    struct journal_replay_info info;
    cr_assert_eq(journal_replay(d.fd, "journal", &seer, NULL, &info), -ENOENT);
    /* what a compaction cut short by a crash left */
    int fd = openat(d.fd, "journal.new", O_WRONLY | O_CREAT, 0600);
    cr_assert_eq(write(fd, "half", 4), 4);
    close(fd);
    cr_assert_eq(journal_open(&j, d.fd, "journal", &info), 0);
    cr_assert_eq(faccessat(d.fd, "journal.new", F_OK, 0), -1, "journal.new left in place");
    cr_assert_eq(info.file_bytes, 0);
    cr_assert_eq(info.stop, JOURNAL_READ_END);
    struct stat st;
    cr_assert_eq(fstatat(d.fd, "journal", &st, 0), 0);
    cr_assert_eq(st.st_mode & 07777, 0600);
    cr_assert(fcntl(j.fd, F_GETFD) & FD_CLOEXEC);
    cr_assert_eq(journal_close(&j), 0);
    const char *bad[] = {"", "a/b", ".", ".."};
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(journal_open(&j, d.fd, bad[i], NULL), -EINVAL, "'%s' taken", bad[i]);
    char longname[300];
    memset(longname, 'x', sizeof longname);
    longname[252] = '\0';
    cr_assert_eq(journal_open(&j, d.fd, longname, NULL), -EINVAL);
    longname[251] = '\0'; /* NAME.new is 255 bytes long, as long as a name may be */
    cr_assert_eq(journal_open(&j, d.fd, longname, NULL), 0);
    journal_close(&j);
    dir_remove(&d);
}

Test(file, refusals_write_nothing_and_break_nothing)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    static struct journal_lease l;
    lease_of(&l, 1, 10, 5);
    cr_assert_eq(journal_put_lease(&j, &l), -ENOENT, "a lease of no connection");
    cr_assert_eq(journal_end_conn(&j, 1), -ENOENT);
    put_conn(&j, 1);
    cr_assert_eq(journal_end_lease(&j, 1, 10), -ENOENT);
    l.kind = 7;
    cr_assert_eq(journal_put_lease(&j, &l), -EINVAL);
    struct journal_conn c = conn_of(2);
    c.flags = 4;
    cr_assert_eq(journal_put_conn(&j, &c), -EINVAL);
    off_t one = file_size(&d, "journal");
    cr_assert_eq(one, JOURNAL_HDR_LEN + JOURNAL_CONN_PUT_LEN + JOURNAL_CRC_LEN);
    cr_assert_eq(j.size, (uint64_t)one);
    cr_assert_eq(j.live, (uint64_t)one);
    cr_assert_not(j.broken);
    cr_assert_eq(journal_error(&j), 0);
    put_lease(&j, 1, 10, 5);
    cr_assert_eq(j.live, (uint64_t)one + lease_len(5));
    journal_close(&j);
    dir_remove(&d);
}

/* ---- the file against a model ---- */

#define MCONNS  16
#define MLEASES 2048

/* What must be live, and the order of each live thing's last put. */
struct model {
    struct {
        bool live;
        uint64_t seq;
        struct journal_conn c;
    } conn[MCONNS];
    struct {
        bool live;
        uint64_t seq;
        struct journal_lease l;
    } lease[MLEASES];
    uint64_t seq, live_bytes;
    unsigned rng;
};

static unsigned rnd(struct model *m, unsigned n)
{
    m->rng = m->rng * 1103515245u + 12345u;
    return (m->rng >> 8) % n;
}

/* Lease k belongs to connection k % MCONNS. */
static uint64_t lease_id_of(size_t k)
{
    return ((uint64_t)(k + 1) << 32) | 5;
}

static void model_end_conn(struct model *m, size_t c)
{
    m->conn[c].live = false;
    m->live_bytes -= JOURNAL_HDR_LEN + JOURNAL_CONN_PUT_LEN + JOURNAL_CRC_LEN;
    for (size_t k = c; k < MLEASES; k += MCONNS) {
        if (m->lease[k].live)
            m->live_bytes -= lease_len(m->lease[k].l.name_len);
        m->lease[k].live = false;
    }
}

/* One random step, in the journal and the model alike. */
static void step(struct journal *j, struct model *m)
{
    unsigned op = rnd(m, 100);
    size_t k = rnd(m, MLEASES), c = k % MCONNS;
    if (op < 4 || !m->conn[c].live) {
        if (!m->conn[c].live)
            m->live_bytes += JOURNAL_HDR_LEN + JOURNAL_CONN_PUT_LEN + JOURNAL_CRC_LEN;
        m->conn[c].c = conn_of(c + 100);
        m->conn[c].c.nslots = rnd(m, 1000);
        m->conn[c].live = true;
        m->conn[c].seq = ++m->seq;
        cr_assert_eq(journal_put_conn(j, &m->conn[c].c), 0);
    } else if (op < 6) {
        model_end_conn(m, c);
        cr_assert_eq(journal_end_conn(j, c + 100), 0);
    } else if (op < 60) {
        struct journal_lease *l = &m->lease[k].l;
        if (m->lease[k].live) {
            m->live_bytes -= lease_len(l->name_len);
            l->holds++;
        } else {
            size_t len = rnd(m, 10) == 0 ? 1 + rnd(m, JOURNAL_NAME_MAX) : 1 + rnd(m, 60);
            lease_of(l, c + 100, lease_id_of(k), len);
        }
        m->live_bytes += lease_len(l->name_len);
        m->lease[k].live = true;
        m->lease[k].seq = ++m->seq;
        cr_assert_eq(journal_put_lease(j, l), 0);
    } else {
        int want = m->lease[k].live ? 0 : -ENOENT;
        if (m->lease[k].live)
            m->live_bytes -= lease_len(m->lease[k].l.name_len);
        m->lease[k].live = false;
        cr_assert_eq(journal_end_lease(j, c + 100, lease_id_of(k)), want);
    }
}

static int by_seq(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The replay of the file is the model: the same records, in its order. */
static void check_model(struct dir *d, struct model *m)
{
    struct journal_replay_info info;
    struct seen *s = replay_file(d, &info);
    cr_assert_eq(info.stop, JOURNAL_READ_END);
    static uint64_t order[MLEASES][2];
    size_t n = 0;
    for (size_t c = 0; c < MCONNS; c++)
        if (m->conn[c].live)
            order[n][0] = m->conn[c].seq, order[n++][1] = c;
    qsort(order, n, sizeof order[0], by_seq);
    cr_assert_eq(s->nconns, n);
    for (size_t i = 0; i < n; i++)
        conn_eq(&m->conn[order[i][1]].c, &s->conns[i]);
    n = 0;
    for (size_t k = 0; k < MLEASES; k++)
        if (m->lease[k].live)
            order[n][0] = m->lease[k].seq, order[n++][1] = k;
    qsort(order, n, sizeof order[0], by_seq);
    cr_assert_eq(s->nleases, n);
    for (size_t i = 0; i < n; i++)
        lease_eq(&m->lease[order[i][1]].l, &s->leases[i]);
    seen_free(s);
}

Test(file, compaction_keeps_exactly_the_live_set, .timeout = 60)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    struct model *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->rng = 12345;
    uint64_t written = 0;
    for (int i = 0; i < 60000; i++) {
        uint64_t before = j.size;
        step(&j, m);
        written += j.size > before ? j.size - before : 0;
        cr_assert_eq(j.live, m->live_bytes, "step %d: live bytes %llu, the model's %llu", i,
                     (unsigned long long)j.live, (unsigned long long)m->live_bytes);
        /* it never stays past its threshold */
        cr_assert(j.size <= JOURNAL_COMPACT_MIN || j.size <= JOURNAL_COMPACT_RATIO * j.live,
                  "step %d: %llu bytes for %llu live", i, (unsigned long long)j.size,
                  (unsigned long long)j.live);
        if (i % 20000 == 19999) {
            cr_assert_eq(file_size(&d, "journal"), (off_t)j.size);
            check_model(&d, m);
        }
    }
    cr_assert_geq(j.compactions, 3, "only %lu compactions", j.compactions);
    cr_assert_gt(written, 4 * JOURNAL_COMPACT_MIN);
    cr_assert_eq(journal_compact(&j), 0);
    cr_assert_eq(j.size, j.live, "a compacted file holds the live records only");
    cr_assert_eq(file_size(&d, "journal"), (off_t)j.live);
    cr_assert_eq(faccessat(d.fd, "journal.new", F_OK, 0), -1);
    check_model(&d, m);
    /* a successor takes the file over and goes on */
    cr_assert_eq(journal_close(&j), 0);
    struct journal_replay_info info;
    cr_assert_eq(journal_open(&j, d.fd, "journal", &info), 0);
    cr_assert_eq(j.live, m->live_bytes);
    cr_assert_eq(info.stop, JOURNAL_READ_END);
    for (int i = 0; i < 5000; i++)
        step(&j, m);
    cr_assert_eq(j.live, m->live_bytes);
    check_model(&d, m);
    journal_close(&j);
    free(m);
    dir_remove(&d);
}

Test(file, memory_per_live_lease)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    put_conn(&j, 1);
    for (uint64_t n = 1; n <= 20000; n++) {
        put_lease(&j, 1, n << 32, 3);
        const struct journal_map *leases = &j.map.sub[0];
        for (uint32_t i = 0; i < j.map.cap; i++)
            if (j.map.val[i])
                leases = &j.map.sub[i];
        size_t bytes = (size_t)leases->cap * (sizeof *leases->key + sizeof *leases->val);
        cr_assert_eq(leases->n, n);
        cr_assert_leq(bytes, 32 * n, "%zu bytes for %llu leases", bytes, (unsigned long long)n);
    }
    for (uint64_t n = 1; n <= 20000; n += 2)
        cr_assert_eq(journal_end_lease(&j, 1, n << 32), 0);
    cr_assert_eq(journal_end_conn(&j, 1), 0);
    cr_assert_eq(j.live, 0);
    cr_assert_eq(j.map.n, 0);
    journal_close(&j);
    dir_remove(&d);
}

Test(file, compaction_at_open)
{
    struct dir d;
    dir_make(&d);
    /* a file past the threshold, as a journal that was never compacted
     * leaves it */
    static struct log g;
    int fd = openat(d.fd, "journal", O_WRONLY | O_CREAT, 0600);
    cr_assert_geq(fd, 0);
    log_conn(&g, 1);
    log_lease(&g, 1, 1, 1);
    cr_assert_eq(write(fd, g.buf, g.len), (ssize_t)g.len);
    size_t live = g.len, total = g.len;
    while (total <= JOURNAL_COMPACT_MIN) {
        g.len = 0;
        for (uint64_t k = 2; k < 200; k++) {
            log_lease(&g, 1, k, 1);
            log_end(&g, 1, k, true);
        }
        cr_assert_eq(write(fd, g.buf, g.len), (ssize_t)g.len);
        total += g.len;
    }
    close(fd);
    struct journal j;
    struct journal_replay_info info;
    cr_assert_eq(journal_open(&j, d.fd, "journal", &info), 0);
    cr_assert_eq(info.file_bytes, total);
    cr_assert_eq(info.conns, 1);
    cr_assert_eq(info.leases, 1);
    cr_assert_eq(j.compactions, 1);
    cr_assert_eq(j.size, live);
    cr_assert_eq(file_size(&d, "journal"), (off_t)live);
    journal_close(&j);
    struct seen *s = replay_file(&d, NULL);
    cr_assert_eq(s->nleases, 1);
    cr_assert_eq(s->leases[0].lease_id, 1);
    seen_free(s);
    dir_remove(&d);
}

Test(file, a_torn_tail_is_cut_at_open)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    put_conn(&j, 1);
    put_lease(&j, 1, 10, 20);
    uint64_t good = j.size;
    journal_close(&j);
    /* the writer died in the middle of a record */
    static struct log g;
    log_lease(&g, 1, 11, 1);
    int fd = openat(d.fd, "journal", O_WRONLY | O_APPEND);
    cr_assert_eq(write(fd, g.buf, g.len / 2), (ssize_t)(g.len / 2));
    close(fd);
    struct journal_replay_info info;
    cr_assert_eq(journal_open(&j, d.fd, "journal", &info), 0);
    cr_assert_eq(info.stop, JOURNAL_READ_TORN);
    cr_assert_eq(info.good_bytes, good);
    cr_assert_eq(info.file_bytes, good + g.len / 2);
    cr_assert_eq(file_size(&d, "journal"), (off_t)good);
    put_lease(&j, 1, 12, 3);
    journal_close(&j);
    struct seen *s = replay_file(&d, &info);
    cr_assert_eq(info.stop, JOURNAL_READ_END);
    cr_assert_eq(s->nleases, 2);
    cr_assert_eq(s->leases[0].lease_id, 10);
    cr_assert_eq(s->leases[1].lease_id, 12);
    seen_free(s);
    dir_remove(&d);
}

Test(file, a_successor_ends_what_it_does_not_keep)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    put_conn(&j, 1);
    put_conn(&j, 2);
    put_lease(&j, 1, 10, 4);
    put_lease(&j, 2, 20, 4);
    put_lease(&j, 2, 21, 4);
    journal_close(&j); /* the agent stops */
    struct seen *s = replay_file(&d, NULL);
    cr_assert_eq(s->nleases, 3);
    seen_free(s);
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    cr_assert_eq(journal_end_conn(&j, 1), 0); /* its client is gone */
    cr_assert_eq(journal_end_lease(&j, 2, 20), 0);
    put_lease(&j, 2, 22, 4);
    cr_assert_eq(j.live,
                 (JOURNAL_HDR_LEN + JOURNAL_CONN_PUT_LEN + JOURNAL_CRC_LEN) + 2 * lease_len(4));
    journal_close(&j);
    s = replay_file(&d, NULL);
    cr_assert_eq(s->nconns, 1);
    cr_assert_eq(s->conns[0].conn_id, 2);
    cr_assert_eq(s->nleases, 2);
    cr_assert_eq(s->leases[0].lease_id, 21);
    cr_assert_eq(s->leases[1].lease_id, 22);
    seen_free(s);
    dir_remove(&d);
}

Test(file, a_full_device_breaks_it_once)
{
    struct dir d;
    dir_make(&d);
    cr_assert_eq(symlinkat("/dev/full", d.fd, "journal"), 0);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    struct journal_conn c = conn_of(1);
    cr_assert_eq(journal_put_conn(&j, &c), -ENOSPC);
    cr_assert(j.broken);
    cr_assert_eq(journal_error(&j), -ENOSPC);
    cr_assert_eq(journal_put_conn(&j, &c), JOURNAL_EBROKEN);
    cr_assert_eq(journal_end_conn(&j, 1), JOURNAL_EBROKEN);
    cr_assert_eq(journal_end_lease(&j, 1, 2), JOURNAL_EBROKEN);
    static struct journal_lease l;
    lease_of(&l, 1, 2, 3);
    cr_assert_eq(journal_put_lease(&j, &l), JOURNAL_EBROKEN);
    cr_assert_eq(journal_compact(&j), JOURNAL_EBROKEN);
    cr_assert_eq(journal_error(&j), -ENOSPC);
    journal_close(&j);
    dir_remove(&d);
}

Test(file, a_write_cut_short_leaves_no_part_of_its_record)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    put_conn(&j, 1);
    put_lease(&j, 1, 10, 8);
    uint64_t good = j.size;
    /* the file may grow by half a long record more: the next write goes
     * in part, then fails */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = good + JOURNAL_REC_MAX / 2, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    static struct journal_lease l;
    lease_of(&l, 1, 11, JOURNAL_NAME_MAX);
    cr_assert_eq(journal_put_lease(&j, &l), -EFBIG);
    cr_assert_eq(file_size(&d, "journal"), (off_t)good);
    cr_assert_eq(journal_put_lease(&j, &l), JOURNAL_EBROKEN);
    cr_assert_eq(journal_end_lease(&j, 1, 10), JOURNAL_EBROKEN);
    cr_assert_eq(file_size(&d, "journal"), (off_t)good);
    journal_close(&j);
    struct journal_replay_info info;
    struct seen *s = replay_file(&d, &info);
    cr_assert_eq(info.stop, JOURNAL_READ_END);
    cr_assert_eq(s->nleases, 1);
    cr_assert_eq(s->leases[0].lease_id, 10);
    seen_free(s);
    dir_remove(&d);
}

/* Puts and ends one lease (99) until a compaction is due; the result of
 * the call that made it due, and whether the lease is live then. */
static int churn_past_threshold(struct journal *j, bool *live)
{
    static struct journal_lease l;
    lease_of(&l, 1, 99, JOURNAL_NAME_MAX);
    unsigned long at = j->compactions;
    for (;;) {
        uint64_t due = j->compact_after;
        int rc = journal_put_lease(j, &l);
        *live = true;
        if (rc != 0 || j->compactions != at || j->compact_after != due)
            return rc;
        rc = journal_end_lease(j, 1, 99);
        *live = false;
        if (rc != 0 || j->compactions != at || j->compact_after != due)
            return rc;
        cr_assert_lt(j->size, 64u * JOURNAL_COMPACT_MIN);
    }
}

Test(file, a_failed_compaction_keeps_the_old_file, .timeout = 60)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    put_conn(&j, 1);
    put_lease(&j, 1, 10, 8);
    /* NAME.new cannot be made: a directory is in its place */
    cr_assert_eq(mkdirat(d.fd, "journal.new", 0700), 0);
    bool live99;
    cr_assert_eq(churn_past_threshold(&j, &live99), JOURNAL_COMPACT_FAILED);
    cr_assert_eq(journal_error(&j), -EISDIR);
    cr_assert_not(j.broken);
    cr_assert_eq(j.compactions, 0);
    uint64_t failed_at = j.size;
    /* reported once: the puts go on, and no attempt until the file doubled
     * (that one fails again, unreported) */
    if (live99)
        cr_assert_eq(journal_end_lease(&j, 1, 99), 0);
    while (j.size < 2 * failed_at) {
        put_lease(&j, 1, 99, JOURNAL_NAME_MAX);
        cr_assert_eq(journal_end_lease(&j, 1, 99), 0);
    }
    cr_assert_eq(j.compactions, 0);
    cr_assert_gt(j.compact_after, 2 * failed_at);
    cr_assert_eq(file_size(&d, "journal"), (off_t)j.size);
    struct seen *s = replay_file(&d, NULL);
    cr_assert_eq(s->nleases, 1);
    seen_free(s);
    /* once NAME.new can be made, the next due call compacts */
    cr_assert_eq(unlinkat(d.fd, "journal.new", AT_REMOVEDIR), 0);
    cr_assert_eq(churn_past_threshold(&j, &live99), 0);
    cr_assert_eq(j.compactions, 1);
    cr_assert_eq(j.size, j.live);
    cr_assert_lt(j.size, 4096);
    s = replay_file(&d, NULL);
    cr_assert_eq(s->nleases, live99 ? 2 : 1);
    cr_assert_eq(s->leases[0].lease_id, 10);
    seen_free(s);
    journal_close(&j);
    dir_remove(&d);
}

Test(file, a_file_changed_behind_its_back_breaks_it)
{
    struct dir d;
    dir_make(&d);
    struct journal j;
    cr_assert_eq(journal_open(&j, d.fd, "journal", NULL), 0);
    put_conn(&j, 1);
    int fd = openat(d.fd, "journal", O_WRONLY | O_APPEND);
    cr_assert_eq(write(fd, "junk", 4), 4);
    close(fd);
    cr_assert_eq(journal_compact(&j), -EIO);
    cr_assert(j.broken);
    cr_assert_eq(journal_put_conn(&j, &(struct journal_conn){.conn_id = 2}), JOURNAL_EBROKEN);
    journal_close(&j);
    dir_remove(&d);
}
