/* SPDX-License-Identifier: BSD-3-Clause */
/* wire.c -- encoder and decoder of dlock protocol frames (see wire.h). */
#include "wire.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"

/* Fixed body sizes of the message types. */
#define HELLO_LEN     8
#define HELLO_OK_LEN  24
#define HELLO_OK2_LEN 48 /* version 2: flags, conn_id, secret */
#define RESUME_LEN    32
#define ACQUIRE_FIXED 26
#define ACQ_EX_FIXED  40 /* ACQUIRE's first 24 bytes, kind, 0, nnames, permits, owner */
#define RELEASE_LEN   8
#define GRANTED_LEN   32
#define ERROR_FIXED   6
#define EVENT_LEN     24

void wire_buf_free(struct wire_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void wire_buf_consume(struct wire_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

static int buf_reserve(struct wire_buf *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return DLOCK_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Reserves a whole frame and writes its header; returns the body pointer. */
static uint8_t *frame_start(struct wire_buf *b, uint16_t type, uint32_t id, size_t body_len)
{
    if (body_len > WIRE_MAX_BODY || buf_reserve(b, WIRE_HDR_LEN + body_len) != 0)
        return NULL;
    uint8_t *p = b->data + b->len;
    put32(p, (uint32_t)body_len);
    put16(p + 4, type);
    put16(p + 6, 0);
    put32(p + 8, id);
    b->len += WIRE_HDR_LEN + body_len;
    return p + WIRE_HDR_LEN;
}

int wire_hdr_decode(const uint8_t *buf, size_t n, uint32_t max_body, struct wire_hdr *h)
{
    if (n < WIRE_HDR_LEN)
        return 0;
    struct wire_hdr t = {
        .len = get32(buf), .type = get16(buf + 4), .flags = get16(buf + 6), .id = get32(buf + 8)};
    if (t.flags != 0 || t.type == 0 || t.len > max_body || t.len > WIRE_MAX_BODY)
        return DLOCK_EPROTO;
    *h = t;
    return 1;
}

int wire_put_hello(struct wire_buf *b, uint32_t id, const struct wire_hello *m)
{
    /* The label's part only when there is a label. */
    size_t label_len = m->label ? m->label_len : 0;
    bool v3 = m->version >= 3 && label_len > 0;
    if (label_len > WIRE_MAX_LABEL || (label_len && m->version < 3))
        return DLOCK_EINVAL;
    uint8_t *p = frame_start(b, WIRE_T_HELLO, id, HELLO_LEN + (v3 ? 2 + label_len : 0));
    if (!p)
        return DLOCK_ENOMEM;
    put32(p, m->magic);
    put16(p + 4, m->version);
    put16(p + 6, 0);
    if (v3) {
        put16(p + 8, (uint16_t)label_len);
        memcpy(p + 10, m->label, label_len);
    }
    return 0;
}

int wire_put_hello_ok(struct wire_buf *b, uint32_t id, const struct wire_hello_ok *m)
{
    bool v2 = m->version >= 2;
    uint8_t *p = frame_start(b, WIRE_T_HELLO_OK, id, v2 ? HELLO_OK2_LEN : HELLO_OK_LEN);
    if (!p)
        return DLOCK_ENOMEM;
    put16(p, m->version);
    put16(p + 2, v2 ? m->flags : 0);
    put32(p + 4, m->max_name_len);
    put32(p + 8, m->max_leases);
    put32(p + 12, m->default_ttl_ms);
    put64(p + 16, m->clock_ns);
    if (v2) {
        put64(p + 24, m->conn_id);
        memcpy(p + 32, m->secret, WIRE_SECRET_LEN);
    }
    return 0;
}

int wire_put_resume(struct wire_buf *b, uint32_t id, const struct wire_resume *m)
{
    uint8_t *p = frame_start(b, WIRE_T_RESUME, id, RESUME_LEN);
    if (!p)
        return DLOCK_ENOMEM;
    put32(p, m->magic);
    put16(p + 4, m->version);
    put16(p + 6, 0);
    put64(p + 8, m->conn_id);
    memcpy(p + 16, m->secret, WIRE_SECRET_LEN);
    return 0;
}

/* The first 24 bytes of ACQUIRE and ACQUIRE_EX: TTL, wait, flags, bounds. */
static void put_acquire_head(uint8_t *p, const struct wire_acquire *m)
{
    put32(p, m->ttl_ms);
    put64(p + 4, (uint64_t)m->wait_ms);
    put32(p + 12, m->flags);
    put32(p + 16, m->max_hold_ms);
    put32(p + 20, m->progress_ms);
}

static void get_acquire_head(const uint8_t *body, struct wire_acquire *m)
{
    m->ttl_ms = get32(body);
    m->wait_ms = (int64_t)get64(body + 4);
    m->flags = get32(body + 12);
    m->max_hold_ms = get32(body + 16);
    m->progress_ms = get32(body + 20);
}

int wire_put_acquire(struct wire_buf *b, uint32_t id, const struct wire_acquire *m)
{
    if (m->name_len > WIRE_MAX_NAME)
        return DLOCK_EINVAL;
    uint8_t *p = frame_start(b, WIRE_T_ACQUIRE, id, ACQUIRE_FIXED + (size_t)m->name_len);
    if (!p)
        return DLOCK_ENOMEM;
    put_acquire_head(p, m);
    put16(p + 24, m->name_len);
    if (m->name_len)
        memcpy(p + ACQUIRE_FIXED, m->name, m->name_len);
    return 0;
}

/* The body length of an ACQUIRE_EX with these names, or 0 when one is too
 * long or there are none or too many of them. */
static size_t acquire_ex_len(const uint16_t *lens, uint16_t nnames)
{
    if (nnames == 0 || nnames > WIRE_MAX_NAMES)
        return 0;
    size_t len = ACQ_EX_FIXED;
    for (uint16_t i = 0; i < nnames; i++) {
        if (lens[i] > WIRE_MAX_NAME)
            return 0;
        len += 2 + (size_t)lens[i];
    }
    return len;
}

int wire_put_acquire_ex(struct wire_buf *b, uint32_t id, const struct wire_acquire *m,
                        const char *const *names, const uint16_t *lens, uint16_t nnames)
{
    size_t len = acquire_ex_len(lens, nnames);
    if (len == 0 || len > WIRE_MAX_BODY)
        return DLOCK_EINVAL;
    uint8_t *p = frame_start(b, WIRE_T_ACQUIRE_EX, id, len);
    if (!p)
        return DLOCK_ENOMEM;
    put_acquire_head(p, m);
    p[24] = m->kind;
    p[25] = 0;
    put16(p + 26, nnames);
    put32(p + 28, m->permits);
    put64(p + 32, m->owner);
    p += ACQ_EX_FIXED;
    for (uint16_t i = 0; i < nnames; i++) {
        put16(p, lens[i]);
        if (lens[i])
            memcpy(p + 2, names[i], lens[i]);
        p += 2 + lens[i];
    }
    return 0;
}

int wire_put_release(struct wire_buf *b, uint32_t id, const struct wire_release *m)
{
    uint8_t *p = frame_start(b, WIRE_T_RELEASE, id, RELEASE_LEN);
    if (!p)
        return DLOCK_ENOMEM;
    put64(p, m->lease_id);
    return 0;
}

int wire_put_empty(struct wire_buf *b, uint32_t id, uint16_t type)
{
    return frame_start(b, type, id, 0) ? 0 : DLOCK_ENOMEM;
}

int wire_put_granted(struct wire_buf *b, uint32_t id, const struct wire_granted *m)
{
    uint8_t *p = frame_start(b, WIRE_T_GRANTED, id, GRANTED_LEN);
    if (!p)
        return DLOCK_ENOMEM;
    put64(p, m->lease_id);
    put64(p + 8, m->deadline_ns);
    put64(p + 16, m->fence);
    put32(p + 24, m->ttl_ms);
    put32(p + 28, m->slot);
    return 0;
}

int wire_put_error(struct wire_buf *b, uint32_t id, const struct wire_error *m)
{
    if (m->msg_len > WIRE_MAX_BODY - ERROR_FIXED)
        return DLOCK_EINVAL;
    uint8_t *p = frame_start(b, WIRE_T_ERROR, id, ERROR_FIXED + (size_t)m->msg_len);
    if (!p)
        return DLOCK_ENOMEM;
    put32(p, (uint32_t)m->code);
    put16(p + 4, m->msg_len);
    if (m->msg_len)
        memcpy(p + ERROR_FIXED, m->msg, m->msg_len);
    return 0;
}

int wire_put_event(struct wire_buf *b, uint32_t id, const struct wire_event *m)
{
    uint8_t *p = frame_start(b, WIRE_T_EVENT, id, EVENT_LEN);
    if (!p)
        return DLOCK_ENOMEM;
    put64(p, m->lease_id);
    put16(p + 8, m->state);
    put16(p + 10, 0);
    put32(p + 12, (uint32_t)m->reason);
    put64(p + 16, m->deadline_ns);
    return 0;
}

int wire_get_hello(const uint8_t *body, size_t len, struct wire_hello *m)
{
    if (len < HELLO_LEN || get16(body + 6) != 0)
        return DLOCK_EPROTO;
    m->magic = get32(body);
    m->version = get16(body + 4);
    m->label = NULL;
    m->label_len = 0;
    /* 8 bytes in any version (the version is the agent's to judge); a label
     * from version 3 on. */
    if (len == HELLO_LEN)
        return 0;
    if (m->version < 3 || len < HELLO_LEN + 2)
        return DLOCK_EPROTO;
    uint16_t n = get16(body + 8);
    if (n == 0 || n > WIRE_MAX_LABEL || len != HELLO_LEN + 2 + (size_t)n)
        return DLOCK_EPROTO;
    m->label = (const char *)body + 10;
    m->label_len = n;
    return 0;
}

int wire_get_hello_ok(const uint8_t *body, size_t len, struct wire_hello_ok *m)
{
    if (len != HELLO_OK_LEN && len != HELLO_OK2_LEN)
        return DLOCK_EPROTO;
    uint16_t version = get16(body), flags = get16(body + 2);
    bool v2 = len == HELLO_OK2_LEN;
    if (v2 != (version >= 2) || (!v2 && flags) || (flags & ~WIRE_HELLO_RESUMABLE))
        return DLOCK_EPROTO;
    m->version = version;
    m->flags = flags;
    m->max_name_len = get32(body + 4);
    m->max_leases = get32(body + 8);
    m->default_ttl_ms = get32(body + 12);
    m->clock_ns = get64(body + 16);
    m->conn_id = v2 ? get64(body + 24) : 0;
    if (v2)
        memcpy(m->secret, body + 32, WIRE_SECRET_LEN);
    else
        memset(m->secret, 0, WIRE_SECRET_LEN);
    return 0;
}

int wire_get_resume(const uint8_t *body, size_t len, struct wire_resume *m)
{
    if (len != RESUME_LEN || get16(body + 6) != 0)
        return DLOCK_EPROTO;
    m->magic = get32(body);
    m->version = get16(body + 4);
    m->conn_id = get64(body + 8);
    memcpy(m->secret, body + 16, WIRE_SECRET_LEN);
    return 0;
}

int wire_get_acquire(const uint8_t *body, size_t len, struct wire_acquire *m)
{
    if (len < ACQUIRE_FIXED)
        return DLOCK_EPROTO;
    uint16_t name_len = get16(body + 24);
    if (len != ACQUIRE_FIXED + (size_t)name_len)
        return DLOCK_EPROTO;
    get_acquire_head(body, m);
    m->name_len = name_len;
    m->name = (const char *)body + ACQUIRE_FIXED;
    m->kind = WIRE_KIND_EXCLUSIVE;
    m->permits = 0;
    m->owner = 0;
    m->nnames = 1;
    m->names = NULL;
    return 0;
}

/* Whether the name list names[0..len) holds exactly nnames names, each a
 * u16 length and that many bytes. */
static bool names_fill(const uint8_t *names, size_t len, uint16_t nnames)
{
    size_t off = 0;
    for (uint16_t i = 0; i < nnames; i++) {
        if (len - off < 2)
            return false;
        size_t n = get16(names + off);
        if (len - off - 2 < n)
            return false;
        off += 2 + n;
    }
    return off == len;
}

int wire_get_acquire_ex(const uint8_t *body, size_t len, struct wire_acquire *m)
{
    if (len < ACQ_EX_FIXED || body[25] != 0)
        return DLOCK_EPROTO;
    uint16_t nnames = get16(body + 26);
    if (nnames == 0 || nnames > WIRE_MAX_NAMES ||
        !names_fill(body + ACQ_EX_FIXED, len - ACQ_EX_FIXED, nnames))
        return DLOCK_EPROTO;
    get_acquire_head(body, m);
    m->kind = body[24];
    m->nnames = nnames;
    m->permits = get32(body + 28);
    m->owner = get64(body + 32);
    m->names = body + ACQ_EX_FIXED;
    m->name_len = get16(m->names);
    m->name = (const char *)m->names + 2;
    return 0;
}

void wire_acquire_name(const struct wire_acquire *m, uint16_t i, const char **name, uint16_t *len)
{
    if (!m->names || i >= m->nnames) {
        /* A plain ACQUIRE's one name (nnames 0, from a caller that filled
         * only name, counts as 1). */
        bool first = !m->names && i == 0;
        *name = first ? m->name : NULL;
        *len = first ? m->name_len : 0;
        return;
    }
    const uint8_t *p = m->names;
    for (uint16_t k = 0; k < i; k++)
        p += 2 + get16(p);
    *len = get16(p);
    *name = (const char *)p + 2;
}

int wire_get_release(const uint8_t *body, size_t len, struct wire_release *m)
{
    if (len != RELEASE_LEN)
        return DLOCK_EPROTO;
    m->lease_id = get64(body);
    return 0;
}

int wire_get_granted(const uint8_t *body, size_t len, struct wire_granted *m)
{
    if (len != GRANTED_LEN)
        return DLOCK_EPROTO;
    m->lease_id = get64(body);
    m->deadline_ns = get64(body + 8);
    m->fence = get64(body + 16);
    m->ttl_ms = get32(body + 24);
    m->slot = get32(body + 28);
    return 0;
}

int wire_get_error(const uint8_t *body, size_t len, struct wire_error *m)
{
    if (len < ERROR_FIXED)
        return DLOCK_EPROTO;
    uint16_t msg_len = get16(body + 4);
    if (len != ERROR_FIXED + (size_t)msg_len)
        return DLOCK_EPROTO;
    m->code = (int32_t)get32(body);
    m->msg_len = msg_len;
    m->msg = (const char *)body + ERROR_FIXED;
    return 0;
}

int wire_get_event(const uint8_t *body, size_t len, struct wire_event *m)
{
    if (len != EVENT_LEN || get16(body + 10) != 0)
        return DLOCK_EPROTO;
    m->lease_id = get64(body);
    m->state = get16(body + 8);
    m->reason = (int32_t)get32(body + 12);
    m->deadline_ns = get64(body + 16);
    return 0;
}

int wire_status_sibling(const char *sock, char *out, size_t cap)
{
    const char *slash = strrchr(sock, '/');
    const char *base = slash ? slash + 1 : sock;
    size_t len = strlen(sock), dir = (size_t)(base - sock), suffix = strlen(".sock");
    int n;
    if (strcmp(base, "dlock.sock") == 0)
        n = snprintf(out, cap, "%.*sstatus.sock", (int)dir, sock);
    else if (len > dir + suffix && strcmp(sock + len - suffix, ".sock") == 0)
        n = snprintf(out, cap, "%.*s-status.sock", (int)(len - suffix), sock);
    else
        n = snprintf(out, cap, "%s-status.sock", sock);
    if (n < 0 || (size_t)n >= cap) {
        if (cap)
            out[0] = '\0';
        return -1;
    }
    return 0;
}
