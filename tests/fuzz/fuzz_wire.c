/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_wire.c -- libFuzzer target: the frame decoder of libclient/wire.c, as
 * the agent reads a client's frames and as the library reads the agent's.
 *
 * The input is a stream of frames. Each whole frame's body goes through the
 * decoder of its type and through every other decoder; a body that decodes
 * must encode again to the very same frame (the decoders check every
 * reserved field, so nothing is lost). The input, as a socket path, also
 * goes through wire_status_sibling(). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "wire.h"

#define ACQ_EX_FIXED 40 /* ACQUIRE_EX's body before its names */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The frame just encoded into b must be the frame read. */
static void same(struct wire_buf *b, int rc, const uint8_t *frame, size_t len)
{
    if (rc != 0 || b->len != len || memcmp(b->data, frame, len) != 0)
        abort();
    b->len = 0;
}

/* A decoded ACQUIRE_EX: its names, read one by one, lie in the body in
 * order, the first is m->name, and they encode again to the frame read
 * (unless one is longer than any agent takes: then nothing is written). */
static void acquire_ex_again(uint32_t id, const struct wire_acquire *m, struct wire_buf *b,
                             const uint8_t *frame, size_t len)
{
    const char *names[WIRE_MAX_NAMES];
    uint16_t lens[WIRE_MAX_NAMES];
    bool too_long = false;
    const char *end = (const char *)frame + WIRE_HDR_LEN + ACQ_EX_FIXED;
    if (m->nnames == 0 || m->nnames > WIRE_MAX_NAMES)
        abort();
    for (uint16_t i = 0; i < m->nnames; i++) {
        wire_acquire_name(m, i, &names[i], &lens[i]);
        if (!names[i] || names[i] != end + 2 ||
            (i == 0 && (names[0] != m->name || lens[0] != m->name_len)))
            abort();
        end = names[i] + lens[i];
        too_long |= lens[i] > WIRE_MAX_NAME;
    }
    if (end != (const char *)frame + len)
        abort();
    int rc = wire_put_acquire_ex(b, id, m, names, lens, m->nnames);
    if (!too_long)
        same(b, rc, frame, len);
    else if (rc != DLOCK_EINVAL || b->len != 0)
        abort();
}

/* Every decoder on one body; those that take it must give back the frame. */
static void decode_all(const struct wire_hdr *h, const uint8_t *frame, struct wire_buf *b)
{
    const uint8_t *body = frame + WIRE_HDR_LEN;
    size_t len = WIRE_HDR_LEN + h->len;
    struct wire_hello hello;
    struct wire_hello_ok ok;
    struct wire_acquire acq;
    struct wire_release rel;
    struct wire_granted g;
    struct wire_error e;
    struct wire_event ev;
    struct wire_resume res;
    if (h->type == WIRE_T_HELLO && wire_get_hello(body, h->len, &hello) == 0)
        same(b, wire_put_hello(b, h->id, &hello), frame, len);
    if (h->type == WIRE_T_HELLO_OK && wire_get_hello_ok(body, h->len, &ok) == 0)
        same(b, wire_put_hello_ok(b, h->id, &ok), frame, len);
    if (h->type == WIRE_T_RESUME && wire_get_resume(body, h->len, &res) == 0)
        same(b, wire_put_resume(b, h->id, &res), frame, len);
    if (h->type == WIRE_T_ACQUIRE && wire_get_acquire(body, h->len, &acq) == 0) {
        int rc = wire_put_acquire(b, h->id, &acq);
        /* A name longer than any agent takes is read, never written. */
        if (acq.name_len <= WIRE_MAX_NAME)
            same(b, rc, frame, len);
        else if (rc != DLOCK_EINVAL || b->len != 0)
            abort();
    }
    if (h->type == WIRE_T_ACQUIRE_EX && wire_get_acquire_ex(body, h->len, &acq) == 0)
        acquire_ex_again(h->id, &acq, b, frame, len);
    if (h->type == WIRE_T_RELEASE && wire_get_release(body, h->len, &rel) == 0)
        same(b, wire_put_release(b, h->id, &rel), frame, len);
    if ((h->type == WIRE_T_PING || h->type == WIRE_T_OK) && h->len == 0)
        same(b, wire_put_empty(b, h->id, h->type), frame, len);
    if (h->type == WIRE_T_GRANTED && wire_get_granted(body, h->len, &g) == 0)
        same(b, wire_put_granted(b, h->id, &g), frame, len);
    if (h->type == WIRE_T_ERROR && wire_get_error(body, h->len, &e) == 0)
        same(b, wire_put_error(b, h->id, &e), frame, len);
    if (h->type == WIRE_T_EVENT && wire_get_event(body, h->len, &ev) == 0)
        same(b, wire_put_event(b, h->id, &ev), frame, len);
    /* A body read as any other type: only its length and reserved fields
     * decide, and nothing may read past it. */
    (void)wire_get_hello(body, h->len, &hello);
    (void)wire_get_hello_ok(body, h->len, &ok);
    (void)wire_get_acquire(body, h->len, &acq);
    (void)wire_get_acquire_ex(body, h->len, &acq);
    (void)wire_get_release(body, h->len, &rel);
    (void)wire_get_granted(body, h->len, &g);
    (void)wire_get_error(body, h->len, &e);
    (void)wire_get_event(body, h->len, &ev);
    (void)wire_get_resume(body, h->len, &res);
}

/* The frames of the stream, with the agent's limit on a body (a client
 * reads with the same one). */
static void frames(const uint8_t *data, size_t size, struct wire_buf *b)
{
    size_t off = 0;
    for (;;) {
        struct wire_hdr h;
        int got = wire_hdr_decode(data + off, size - off, WIRE_MAX_BODY, &h);
        if (got < 0 || got == 0)
            return;
        if (h.len > WIRE_MAX_BODY || h.flags != 0 || h.type == 0)
            abort(); /* a header the decoder should have refused */
        if (size - off < WIRE_HDR_LEN + (size_t)h.len)
            return;
        /* A smaller limit refuses what is above it, and only that. */
        struct wire_hdr h2;
        if ((wire_hdr_decode(data + off, size - off, 64, &h2) < 0) != (h.len > 64))
            abort();
        decode_all(&h, data + off, b);
        off += WIRE_HDR_LEN + h.len;
    }
}

/* The input as a client socket's path. */
static void sibling(const uint8_t *data, size_t size)
{
    char path[512], out[128];
    size_t n = size < sizeof path - 1 ? size : sizeof path - 1;
    memcpy(path, data, n);
    path[n] = '\0';
    for (size_t cap = 1; cap <= sizeof out; cap *= 2) {
        int rc = wire_status_sibling(path, out, cap);
        size_t len = strnlen(out, cap);
        if (len == cap || (rc == 0 && (len < 11 || strcmp(out + len - 11, "status.sock") != 0)) ||
            (rc != 0 && out[0] != '\0'))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_buf b = {0};
    frames(data, size, &b);
    wire_buf_free(&b);
    sibling(data, size);
    return 0;
}
