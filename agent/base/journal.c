/* SPDX-License-Identifier: BSD-3-Clause */
/* journal.c -- the lease journal: its record codec, its replay, and its file
 * with compaction (see journal.h). */
#include "journal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The replay numbers records in 32 bits, and a record takes at least 20
 * bytes, so a file stays below 4 GiB: a live set that would need more
 * (millions of leases) breaks the journal instead. */
#define FILE_MAX 0xffffffffull

/* The payload offsets of a lease put (conn_id and lease_id lead a
 * connection's put and both ends as well). */
#define L_CONN       0
#define L_ID         8
#define L_HOLDER     16
#define L_FENCE      24
#define L_UNTIL      32
#define L_PROGRESS   40
#define L_SLOT       48
#define L_PERMITS    52
#define L_TTL        56
#define L_HOLDS      60
#define L_KIND       64
#define L_FORMAT     65
#define L_NAME_LEN   66
#define L_TOKEN      68
#define NEW_SUFFIX   ".new"
#define NAME_LEN_MAX (sizeof((struct journal *)0)->name - sizeof NEW_SUFFIX)

/* ---- CRC-32C ---- */

/* A compaction and a successor's replay checksum the whole file, while
 * the agent's loop waits: SSE 4.2's crc32 instruction does it many times
 * faster than a table. JOURNAL_CRC_TABLE_ONLY builds the table alone, as
 * other machines have it (a unit test does). */
static uint32_t crc_table[256];
static uint32_t (*crc_update)(uint32_t c, const uint8_t *p, size_t len);
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static uint32_t crc_soft(uint32_t c, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&                            \
    !defined(JOURNAL_CRC_TABLE_ONLY)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p,
                                                            size_t len)
{
    uint64_t c64 = c;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        c64 = _mm_crc32_u64(c64, v);
    }
    c = (uint32_t)c64;
    for (; len > 0; p++, len--)
        c = _mm_crc32_u8(c, *p);
    return c;
}
#endif

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
    crc_update = crc_soft;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&                            \
    !defined(JOURNAL_CRC_TABLE_ONLY)
    if (__builtin_cpu_supports("sse4.2"))
        crc_update = crc_sse42;
#endif
}

uint32_t journal_crc32c(const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return crc_update(0xffffffffu, buf, len) ^ 0xffffffffu;
}

/* ---- fields in host byte order ---- */

static void put16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, sizeof v);
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}

static uint16_t get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- the rules of the fields, the same for encoding and decoding ---- */

static bool token_ok(const char *t)
{
    for (int i = 0; i < JOURNAL_TOKEN_HEX; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
            return false;
    return true;
}

static bool conn_ok(const struct journal_conn *c)
{
    return (c->flags & ~JOURNAL_CONN_RESUMABLE) == 0;
}

static bool lease_ok(const struct journal_lease *l)
{
    if (l->kind > 2 || l->format > 3 || l->holds < 1 || l->ttl_ms < 1)
        return false;
    /* a semaphore's limit, as the protocol has it: at least 1, else none */
    if ((l->kind == 2) != (l->permits > 0))
        return false;
    if (l->name_len < 1 || l->name_len > JOURNAL_NAME_MAX || memchr(l->name, 0, l->name_len))
        return false;
    return token_ok(l->token);
}

/* ---- encoding ---- */

/* The header before the payload at buf + JOURNAL_HDR_LEN, and the CRC
 * after it; the record's length. */
static int seal(uint8_t *buf, enum journal_type type, size_t plen)
{
    put32(buf, (uint32_t)plen);
    buf[4] = (uint8_t)type;
    buf[5] = JOURNAL_VERSION;
    put16(buf + 6, 0);
    size_t n = JOURNAL_HDR_LEN + plen;
    put32(buf + n, journal_crc32c(buf, n));
    return (int)(n + JOURNAL_CRC_LEN);
}

static int enc_conn(const struct journal_conn *c, uint8_t *buf, size_t cap)
{
    if (!conn_ok(c))
        return -EINVAL;
    if (cap < JOURNAL_HDR_LEN + JOURNAL_CONN_PUT_LEN + JOURNAL_CRC_LEN)
        return -ENOBUFS;
    uint8_t *p = buf + JOURNAL_HDR_LEN;
    put64(p, c->conn_id);
    put64(p + 8, c->pid_start);
    put32(p + 16, c->pid);
    put32(p + 20, c->uid);
    put32(p + 24, c->gid);
    put32(p + 28, c->nslots);
    put32(p + 32, c->flags);
    memcpy(p + 36, c->secret, sizeof c->secret);
    return seal(buf, JOURNAL_CONN_PUT, JOURNAL_CONN_PUT_LEN);
}

static int enc_lease(const struct journal_lease *l, uint8_t *buf, size_t cap)
{
    if (!lease_ok(l))
        return -EINVAL;
    size_t plen = JOURNAL_LEASE_FIXED + l->name_len;
    if (cap < JOURNAL_HDR_LEN + plen + JOURNAL_CRC_LEN)
        return -ENOBUFS;
    uint8_t *p = buf + JOURNAL_HDR_LEN;
    put64(p + L_CONN, l->conn_id);
    put64(p + L_ID, l->lease_id);
    put64(p + L_HOLDER, l->holder_id);
    put64(p + L_FENCE, l->fence);
    put64(p + L_UNTIL, l->hold_until_ns);
    put64(p + L_PROGRESS, l->progress_ns);
    put32(p + L_SLOT, l->slot);
    put32(p + L_PERMITS, l->permits);
    put32(p + L_TTL, l->ttl_ms);
    put32(p + L_HOLDS, l->holds);
    p[L_KIND] = l->kind;
    p[L_FORMAT] = l->format;
    put16(p + L_NAME_LEN, l->name_len);
    memcpy(p + L_TOKEN, l->token, JOURNAL_TOKEN_HEX);
    memcpy(p + JOURNAL_LEASE_FIXED, l->name, l->name_len);
    return seal(buf, JOURNAL_LEASE_PUT, plen);
}

/* An end: of a connection (no lease id) or of a lease. */
static int enc_end(uint64_t conn_id, const uint64_t *lease_id, uint8_t *buf, size_t cap)
{
    size_t plen = lease_id ? JOURNAL_LEASE_END_LEN : JOURNAL_CONN_END_LEN;
    if (cap < JOURNAL_HDR_LEN + plen + JOURNAL_CRC_LEN)
        return -ENOBUFS;
    put64(buf + JOURNAL_HDR_LEN, conn_id);
    if (lease_id)
        put64(buf + JOURNAL_HDR_LEN + 8, *lease_id);
    return seal(buf, lease_id ? JOURNAL_LEASE_END : JOURNAL_CONN_END, plen);
}

int journal_encode(const struct journal_rec *r, void *buf, size_t cap)
{
    switch (r->type) {
    case JOURNAL_CONN_PUT:
        return enc_conn(&r->conn, buf, cap);
    case JOURNAL_CONN_END:
        return enc_end(r->conn.conn_id, NULL, buf, cap);
    case JOURNAL_LEASE_PUT:
        return enc_lease(&r->lease, buf, cap);
    case JOURNAL_LEASE_END:
        return enc_end(r->lease.conn_id, &r->lease.lease_id, buf, cap);
    }
    return -EINVAL;
}

/* ---- decoding ---- */

/* Is plen a payload length of type? For a lease, its name's length must
 * agree, when the bytes at hand reach it: so a damaged length is corrupt,
 * never mistaken for a torn tail or read as another record's span. */
static bool length_ok(unsigned type, uint32_t plen, const uint8_t *p, size_t avail)
{
    switch (type) {
    case JOURNAL_CONN_PUT:
        return plen == JOURNAL_CONN_PUT_LEN;
    case JOURNAL_CONN_END:
        return plen == JOURNAL_CONN_END_LEN;
    case JOURNAL_LEASE_END:
        return plen == JOURNAL_LEASE_END_LEN;
    case JOURNAL_LEASE_PUT:
        if (plen <= JOURNAL_LEASE_FIXED || plen > JOURNAL_LEASE_FIXED + JOURNAL_NAME_MAX)
            return false;
        return avail < L_NAME_LEN + 2 || get16(p + L_NAME_LEN) == plen - JOURNAL_LEASE_FIXED;
    }
    return false;
}

/* The header's fields that the first len bytes hold: could they start a
 * record? */
static bool header_ok(const uint8_t *b, size_t len)
{
    if (len > 4 && (b[4] < JOURNAL_CONN_PUT || b[4] > JOURNAL_LEASE_END))
        return false;
    if (len > 5 && b[5] != JOURNAL_VERSION)
        return false;
    if (len > 6 && b[6] != 0)
        return false;
    return len <= 7 || b[7] == 0;
}

static void dec_conn(const uint8_t *p, struct journal_conn *c)
{
    c->conn_id = get64(p);
    c->pid_start = get64(p + 8);
    c->pid = get32(p + 16);
    c->uid = get32(p + 20);
    c->gid = get32(p + 24);
    c->nslots = get32(p + 28);
    c->flags = get32(p + 32);
    memcpy(c->secret, p + 36, sizeof c->secret);
}

static void dec_lease(const uint8_t *p, struct journal_lease *l)
{
    l->conn_id = get64(p + L_CONN);
    l->lease_id = get64(p + L_ID);
    l->holder_id = get64(p + L_HOLDER);
    l->fence = get64(p + L_FENCE);
    l->hold_until_ns = get64(p + L_UNTIL);
    l->progress_ns = get64(p + L_PROGRESS);
    l->slot = get32(p + L_SLOT);
    l->permits = get32(p + L_PERMITS);
    l->ttl_ms = get32(p + L_TTL);
    l->holds = get32(p + L_HOLDS);
    l->kind = p[L_KIND];
    l->format = p[L_FORMAT];
    l->name_len = get16(p + L_NAME_LEN);
    memcpy(l->token, p + L_TOKEN, JOURNAL_TOKEN_HEX);
    l->token[JOURNAL_TOKEN_HEX] = '\0';
    memcpy(l->name, p + JOURNAL_LEASE_FIXED, l->name_len); /* name_len checked by length_ok */
    l->name[l->name_len] = '\0';
}

/* The payload p of a record of type whose frame is sound, into r; false
 * when a field breaks its rule. */
static bool dec_payload(unsigned type, const uint8_t *p, struct journal_rec *r)
{
    r->type = (enum journal_type)type;
    switch (type) {
    case JOURNAL_CONN_PUT:
        dec_conn(p, &r->conn);
        return conn_ok(&r->conn);
    case JOURNAL_CONN_END:
        memset(&r->conn, 0, sizeof r->conn);
        r->conn.conn_id = get64(p);
        return true;
    case JOURNAL_LEASE_PUT:
        dec_lease(p, &r->lease);
        return lease_ok(&r->lease);
    default:
        memset(&r->lease, 0, offsetof(struct journal_lease, name));
        r->lease.name[0] = '\0';
        r->lease.conn_id = get64(p);
        r->lease.lease_id = get64(p + 8);
        return true;
    }
}

enum journal_read journal_decode(const void *buf, size_t len, struct journal_rec *r, size_t *used)
{
    const uint8_t *b = buf;
    if (len == 0)
        return JOURNAL_READ_END;
    if (!header_ok(b, len))
        return JOURNAL_READ_CORRUPT;
    if (len < JOURNAL_HDR_LEN)
        return JOURNAL_READ_TORN;
    uint32_t plen = get32(b);
    const uint8_t *p = b + JOURNAL_HDR_LEN;
    if (!length_ok(b[4], plen, p, len - JOURNAL_HDR_LEN))
        return JOURNAL_READ_CORRUPT;
    size_t n = JOURNAL_HDR_LEN + (size_t)plen;
    if (len < n + JOURNAL_CRC_LEN)
        return JOURNAL_READ_TORN;
    if (get32(b + n) != journal_crc32c(b, n) || !dec_payload(b[4], p, r))
        return JOURNAL_READ_CORRUPT;
    *used = n + JOURNAL_CRC_LEN;
    return JOURNAL_READ_RECORD;
}

/* ---- the live set: a map of maps ---- */

static uint32_t slot_of(uint64_t key, uint32_t cap)
{
    /* splitmix64's finalizer: lease ids differ in their high bits only */
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return (uint32_t)key & (cap - 1);
}

static bool map_find(const struct journal_map *m, uint64_t key, uint32_t *ix)
{
    if (m->cap == 0)
        return false;
    for (uint32_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->val[i] == 0)
            return false;
        if (m->key[i] == key) {
            *ix = i;
            return true;
        }
    }
}

static uint32_t map_free_slot(const struct journal_map *m, uint64_t key)
{
    uint32_t i = slot_of(key, m->cap);
    while (m->val[i] != 0)
        i = (i + 1) & (m->cap - 1);
    return i;
}

/* A map of twice the slots (or 2), with the same entries. */
static int map_grow(struct journal_map *m, bool nested)
{
    uint32_t cap = m->cap ? m->cap * 2 : 2;
    if (cap > (1u << 31) || cap < m->cap)
        return -ENOMEM;
    struct journal_map g = {.cap = cap, .n = m->n};
    g.key = calloc(cap, sizeof *g.key);
    g.val = calloc(cap, sizeof *g.val);
    g.sub = nested ? calloc(cap, sizeof *g.sub) : NULL;
    if (!g.key || !g.val || (nested && !g.sub)) {
        free(g.key);
        free(g.val);
        free(g.sub);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->val[i] == 0)
            continue;
        uint32_t j = map_free_slot(&g, m->key[i]);
        g.key[j] = m->key[i];
        g.val[j] = m->val[i];
        if (nested)
            g.sub[j] = m->sub[i];
    }
    free(m->key);
    free(m->val);
    free(m->sub);
    *m = g;
    return 0;
}

/* Sets key's value (val != 0), adding key if need be; its slot in *ix and
 * the value it replaced (0: none) in *old. 0 or -ENOMEM. */
static int map_put(struct journal_map *m, bool nested, uint64_t key, uint32_t val, uint32_t *ix,
                   uint32_t *old)
{
    *old = 0;
    if (map_find(m, key, ix)) {
        *old = m->val[*ix];
        m->val[*ix] = val;
        return 0;
    }
    if ((uint64_t)(m->n + 1) * 4 > (uint64_t)m->cap * 3 && map_grow(m, nested) < 0)
        return -ENOMEM;
    *ix = map_free_slot(m, key);
    m->key[*ix] = key;
    m->val[*ix] = val;
    m->n++;
    return 0;
}

/* Empties slot ix, moving back the entries after it that may move
 * (linear probing without tombstones). A nested map moves each entry's
 * leases with it; the caller has freed those of ix. */
static void map_remove(struct journal_map *m, uint32_t ix)
{
    uint32_t mask = m->cap - 1, i = ix;
    for (uint32_t j = (ix + 1) & mask; m->val[j] != 0; j = (j + 1) & mask) {
        uint32_t home = slot_of(m->key[j], m->cap);
        if (((j - home) & mask) < ((j - i) & mask))
            continue; /* its home lies after i: it must stay behind it */
        m->key[i] = m->key[j];
        m->val[i] = m->val[j];
        if (m->sub)
            m->sub[i] = m->sub[j];
        i = j;
    }
    m->key[i] = 0;
    m->val[i] = 0;
    if (m->sub)
        memset(&m->sub[i], 0, sizeof m->sub[i]);
    m->n--;
}

static uint64_t map_sum(const struct journal_map *m)
{
    uint64_t s = 0;
    for (uint32_t i = 0; i < m->cap; i++)
        s += m->val[i];
    return s;
}

static void map_free(struct journal_map *m)
{
    for (uint32_t i = 0; m->sub && i < m->cap; i++)
        map_free(&m->sub[i]);
    free(m->key);
    free(m->val);
    free(m->sub);
    memset(m, 0, sizeof *m);
}

/* Applies a record of type for conn_id (and lease_id) to the live set
 * conns, whose value for a put is val; *gone is the sum of the values it
 * replaced or removed. -ENOENT when the record concerns nothing live
 * (nothing changes then), -ENOMEM. */
static int apply(struct journal_map *conns, unsigned type, uint64_t conn_id, uint64_t lease_id,
                 uint32_t val, uint64_t *gone)
{
    uint32_t ix, lx, old = 0;
    *gone = 0;
    if (type == JOURNAL_CONN_PUT) {
        int rc = map_put(conns, true, conn_id, val, &ix, &old);
        *gone = old;
        return rc;
    }
    if (!map_find(conns, conn_id, &ix))
        return -ENOENT;
    struct journal_map *leases = &conns->sub[ix];
    if (type == JOURNAL_CONN_END) {
        *gone = conns->val[ix] + map_sum(leases);
        map_free(leases);
        map_remove(conns, ix);
        return 0;
    }
    if (type == JOURNAL_LEASE_PUT) {
        int rc = map_put(leases, false, lease_id, val, &lx, &old);
        *gone = old;
        return rc;
    }
    if (!map_find(leases, lease_id, &lx))
        return -ENOENT;
    *gone = leases->val[lx];
    map_remove(leases, lx);
    return 0;
}

/* The ids of a record whose type is known. */
static void rec_ids(const struct journal_rec *r, uint64_t *conn_id, uint64_t *lease_id)
{
    bool conn = r->type == JOURNAL_CONN_PUT || r->type == JOURNAL_CONN_END;
    *conn_id = conn ? r->conn.conn_id : r->lease.conn_id;
    *lease_id = conn ? 0 : r->lease.lease_id;
}

/* ---- replay ---- */

/* A journal's bytes and what is live in them. While reading, a live
 * entry's value is the ordinal (from 1) of its last put; once visited, its
 * record's length. */
struct scan {
    const uint8_t *buf;
    size_t len, good;
    enum journal_read stop;
    struct journal_map live;
    uint64_t live_bytes;
};

/* A live record, its bytes raw[0..n) in the file (read whole and valid). */
typedef int (*visit_fn)(void *arg, const uint8_t *raw, size_t n);

static int scan_read(struct scan *s)
{
    struct journal_rec r;
    size_t off = 0, n = 0;
    uint32_t seq = 0;
    for (;;) {
        s->stop = journal_decode(s->buf + off, s->len - off, &r, &n);
        if (s->stop != JOURNAL_READ_RECORD)
            break;
        uint64_t conn_id, lease_id, gone;
        rec_ids(&r, &conn_id, &lease_id);
        if (apply(&s->live, r.type, conn_id, lease_id, ++seq, &gone) == -ENOMEM)
            return -ENOMEM;
        off += n;
    }
    s->good = off;
    return 0;
}

/* Is the record at p, number seq, of type want and the last put of a live
 * entry? Its entry's value then. */
static uint32_t *last_put(struct scan *s, const uint8_t *p, unsigned want, uint32_t seq)
{
    uint32_t ix, lx;
    if (p[4] != want || !map_find(&s->live, get64(p + JOURNAL_HDR_LEN), &ix))
        return NULL;
    uint32_t *val = &s->live.val[ix];
    if (want == JOURNAL_LEASE_PUT) {
        if (!map_find(&s->live.sub[ix], get64(p + JOURNAL_HDR_LEN + L_ID), &lx))
            return NULL;
        val = &s->live.sub[ix].val[lx];
    }
    return *val == seq ? val : NULL;
}

/* Walks the good records twice, for the connections and then for the
 * leases, calling fn on each live one; the live values become lengths. A
 * value turned to a length cannot be taken for the ordinal of a later
 * record: a live entry has no put after its last. */
static int scan_visit(struct scan *s, visit_fn fn, void *arg)
{
    static const unsigned want[2] = {JOURNAL_CONN_PUT, JOURNAL_LEASE_PUT};
    for (int pass = 0; pass < 2; pass++) {
        uint32_t seq = 0;
        for (size_t off = 0, n; off < s->good; off += n) {
            const uint8_t *p = s->buf + off;
            n = JOURNAL_HDR_LEN + get32(p) + JOURNAL_CRC_LEN;
            uint32_t *val = last_put(s, p, want[pass], ++seq);
            if (!val)
                continue;
            *val = (uint32_t)n;
            s->live_bytes += n;
            int rc = fn ? fn(arg, p, n) : 0;
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* Reads and visits buf[0..len). */
static int scan_run(struct scan *s, const void *buf, size_t len, visit_fn fn, void *arg)
{
    memset(s, 0, sizeof *s);
    s->buf = buf;
    s->len = len;
    if (len > FILE_MAX) {
        s->stop = JOURNAL_READ_CORRUPT; /* no journal grows so long */
        return -EFBIG;
    }
    int rc = scan_read(s);
    return rc < 0 ? rc : scan_visit(s, fn, arg);
}

struct visitor_call {
    const struct journal_visitor *v;
    void *arg;
    size_t conns, leases;
};

static int call_visitor(void *arg, const uint8_t *raw, size_t n)
{
    struct visitor_call *c = arg;
    bool conn = raw[4] == JOURNAL_CONN_PUT;
    c->conns += conn;
    c->leases += !conn;
    if (!c->v || (conn ? !c->v->conn : !c->v->lease))
        return 0;
    struct journal_rec r;
    size_t used;
    journal_decode(raw, n, &r, &used); /* whole and valid: scan_read read it */
    return conn ? c->v->conn(c->arg, &r.conn) : c->v->lease(c->arg, &r.lease);
}

int journal_replay_buf(const void *buf, size_t len, const struct journal_visitor *v, void *arg,
                       struct journal_replay_info *info)
{
    struct visitor_call c = {.v = v, .arg = arg};
    struct scan s;
    int rc = scan_run(&s, buf, len, call_visitor, &c);
    map_free(&s.live);
    if (info)
        *info = (struct journal_replay_info){.file_bytes = len,
                                             .good_bytes = s.good,
                                             .stop = s.stop,
                                             .conns = c.conns,
                                             .leases = c.leases};
    return rc;
}

/* ---- the file ---- */

/* The whole file fd, as fstat() sizes it (a device reads as empty). */
static int read_all(int fd, uint8_t **buf, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (st.st_size < 0 || (uint64_t)st.st_size > FILE_MAX)
        return -EFBIG;
    size_t want = S_ISREG(st.st_mode) ? (size_t)st.st_size : 0, got = 0;
    *buf = malloc(want ? want : 1);
    if (!*buf)
        return -ENOMEM;
    while (got < want) {
        ssize_t r = pread(fd, *buf + got, want - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(*buf);
            *buf = NULL;
            return -errno;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    *len = got;
    return 0;
}

/* Writes all of buf[0..n) at the end of fd; 0 or -errno. A write cut short
 * (the disk filled in it) is continued, so that it reports its error. */
static int write_all(int fd, const uint8_t *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static int broken(struct journal *j, int err)
{
    j->broken = true;
    j->err = err;
    return err;
}

/* Appends the n bytes encoded in j->rec. A failure breaks the journal and
 * takes back the part of the record that went in: no later reader may
 * find half a record before anything else. */
static int append(struct journal *j, size_t n)
{
    if (j->size + n > FILE_MAX)
        return broken(j, -EFBIG);
    int rc = write_all(j->fd, j->rec, n);
    if (rc < 0) {
        /* Should this fail too, the tail stays torn: a reader stops there. */
        int cut = ftruncate(j->fd, (off_t)j->size);
        (void)cut;
        return broken(j, rc);
    }
    j->size += n;
    return 0;
}

static void name_new(const struct journal *j, char *out)
{
    size_t n = strlen(j->name);
    memcpy(out, j->name, n);
    memcpy(out + n, NEW_SUFFIX, sizeof NEW_SUFFIX);
}

struct copy {
    uint8_t *out;
    size_t len, cap;
};

static int copy_record(void *arg, const uint8_t *raw, size_t n)
{
    struct copy *c = arg;
    if (n > c->cap - c->len)
        return -EIO; /* more is live in the file than the journal wrote */
    memcpy(c->out + c->len, raw, n);
    c->len += n;
    return 0;
}

/* Writes out[0..len) to NAME.new and renames it over NAME; the new file's
 * descriptor, or -errno with NAME untouched. The descriptor of NAME.new is
 * the one kept: no window in which NAME is gone or not yet open. */
static int replace_file(struct journal *j, const uint8_t *out, size_t len)
{
    char tmp[sizeof j->name];
    name_new(j, tmp);
    int fd = openat(j->dirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = write_all(fd, out, len);
    if (rc == 0 && renameat(j->dirfd, tmp, j->dirfd, j->name) < 0)
        rc = -errno;
    if (rc == 0)
        return fd;
    close(fd);
    unlinkat(j->dirfd, tmp, 0);
    return rc;
}

/* The live records of the file, read back into c: they must be what the
 * journal wrote, to the byte, or the file is no longer the journal's own
 * (-EIO). */
static int read_live(struct journal *j, struct scan *s, struct copy *c)
{
    uint8_t *buf;
    size_t len;
    int rc = read_all(j->fd, &buf, &len);
    if (rc < 0)
        return rc;
    c->cap = (size_t)j->live;
    c->out = malloc(c->cap ? c->cap : 1);
    rc = c->out ? scan_run(s, buf, len, copy_record, c) : -ENOMEM;
    free(buf);
    if (rc == -ENOMEM)
        return rc;
    if (rc != 0 || s->good != len || len != j->size || c->len != j->live)
        return -EIO;
    return 0;
}

int journal_compact(struct journal *j)
{
    if (j->broken)
        return JOURNAL_EBROKEN;
    struct scan s = {0};
    struct copy c = {0};
    int rc = read_live(j, &s, &c);
    if (rc == -EIO)
        rc = broken(j, rc);
    int fd = rc < 0 ? rc : replace_file(j, c.out, c.len);
    free(c.out);
    if (fd < 0) {
        map_free(&s.live);
        j->err = fd;
        return fd;
    }
    close(j->fd);
    j->fd = fd;
    j->size = c.len;
    /* the scan's map has the same entries, packed afresh */
    map_free(&j->map);
    j->map = s.live;
    j->compactions++;
    j->compact_after = 0;
    j->compact_failing = false;
    return 0;
}

/* Compacts when the file is due: past JOURNAL_COMPACT_MIN and
 * JOURNAL_COMPACT_RATIO times its live bytes, and past where the last
 * failed attempt was (linear work per put would make a full disk
 * quadratic). */
static int maybe_compact(struct journal *j)
{
    if (j->size <= JOURNAL_COMPACT_MIN || j->size <= JOURNAL_COMPACT_RATIO * j->live ||
        j->size < j->compact_after)
        return 0;
    int rc = journal_compact(j);
    if (rc == 0 || j->broken)
        return rc;
    j->compact_after = j->size * 2;
    if (j->compact_failing)
        return 0;
    j->compact_failing = true;
    return JOURNAL_COMPACT_FAILED;
}

/* Appends the record encoded in j->rec (n, or encoding's error), of type
 * for conn_id and lease_id, and keeps the live set. The live set changes
 * first, so that running out of memory writes nothing; after a write that
 * failed it no longer matters. */
static int record(struct journal *j, int n, unsigned type, uint64_t conn_id, uint64_t lease_id)
{
    if (n < 0)
        return n;
    uint64_t gone;
    int rc = apply(&j->map, type, conn_id, lease_id, (uint32_t)n, &gone);
    if (rc < 0)
        return rc;
    rc = append(j, (size_t)n);
    if (rc < 0)
        return rc;
    bool put = type == JOURNAL_CONN_PUT || type == JOURNAL_LEASE_PUT;
    j->live = j->live + (put ? (uint64_t)n : 0) - gone;
    return maybe_compact(j);
}

int journal_put_conn(struct journal *j, const struct journal_conn *c)
{
    if (j->broken)
        return JOURNAL_EBROKEN;
    int n = enc_conn(c, j->rec, sizeof j->rec);
    return record(j, n, JOURNAL_CONN_PUT, c->conn_id, 0);
}

int journal_end_conn(struct journal *j, uint64_t conn_id)
{
    if (j->broken)
        return JOURNAL_EBROKEN;
    int n = enc_end(conn_id, NULL, j->rec, sizeof j->rec);
    return record(j, n, JOURNAL_CONN_END, conn_id, 0);
}

int journal_put_lease(struct journal *j, const struct journal_lease *l)
{
    if (j->broken)
        return JOURNAL_EBROKEN;
    int n = enc_lease(l, j->rec, sizeof j->rec);
    return record(j, n, JOURNAL_LEASE_PUT, l->conn_id, l->lease_id);
}

int journal_end_lease(struct journal *j, uint64_t conn_id, uint64_t lease_id)
{
    if (j->broken)
        return JOURNAL_EBROKEN;
    int n = enc_end(conn_id, &lease_id, j->rec, sizeof j->rec);
    return record(j, n, JOURNAL_LEASE_END, conn_id, lease_id);
}

int journal_error(const struct journal *j)
{
    return j->err;
}

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= NAME_LEN_MAX && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

/* Reads what the file holds into the journal, and cuts off what follows
 * its last good record. */
static int load(struct journal *j, struct journal_replay_info *info)
{
    uint8_t *buf;
    size_t len;
    int rc = read_all(j->fd, &buf, &len);
    if (rc < 0)
        return rc;
    struct scan s;
    struct visitor_call c = {0};
    rc = scan_run(&s, buf, len, call_visitor, &c);
    free(buf);
    if (rc == 0 && s.good < len && ftruncate(j->fd, (off_t)s.good) < 0)
        rc = -errno;
    if (info)
        *info = (struct journal_replay_info){.file_bytes = len,
                                             .good_bytes = s.good,
                                             .stop = s.stop,
                                             .conns = c.conns,
                                             .leases = c.leases};
    if (rc < 0) {
        map_free(&s.live);
        return rc;
    }
    j->map = s.live;
    j->live = s.live_bytes;
    j->size = s.good;
    return 0;
}

int journal_open(struct journal *j, int dirfd, const char *name, struct journal_replay_info *info)
{
    memset(j, 0, sizeof *j);
    j->fd = -1;
    j->dirfd = -1;
    if (!name_ok(name))
        return -EINVAL;
    strcpy(j->name, name);
    j->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (j->dirfd >= 0)
        j->fd = openat(dirfd, name, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int rc = j->fd < 0 ? -errno : load(j, info);
    if (rc < 0) {
        journal_close(j);
        return rc;
    }
    /* what a compaction that its writer did not finish left behind */
    char tmp[sizeof j->name];
    name_new(j, tmp);
    unlinkat(j->dirfd, tmp, 0);
    return maybe_compact(j);
}

int journal_close(struct journal *j)
{
    int rc = 0;
    if (j->fd >= 0 && close(j->fd) < 0)
        rc = -errno;
    if (j->dirfd >= 0)
        close(j->dirfd);
    map_free(&j->map);
    j->fd = -1;
    j->dirfd = -1;
    return rc;
}

int journal_replay(int dirfd, const char *name, const struct journal_visitor *v, void *arg,
                   struct journal_replay_info *info)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint8_t *buf;
    size_t len;
    int rc = read_all(fd, &buf, &len);
    close(fd);
    if (rc < 0)
        return rc;
    rc = journal_replay_buf(buf, len, v, arg, info);
    free(buf);
    return rc;
}
