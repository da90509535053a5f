/* SPDX-License-Identifier: BSD-3-Clause */
/* wire.h -- the dlock wire protocol: frame layout, message types and a pure
 * encoder/decoder shared by the agent and the client library.
 *
 * Every frame is a 12-byte header followed by a body, all integers
 * little-endian:
 *
 *   u32 body_len   bytes after the header, at most WIRE_MAX_BODY
 *   u16 type       WIRE_T_*
 *   u16 flags      must be 0
 *   u32 id         request id chosen by the client, echoed in the reply;
 *                  0 in events
 *
 * The decoders check that a body has exactly the length its type implies.
 * See docs/protocol.md for the conversation. Nothing here does I/O.
 */
#ifndef DLOCK_WIRE_H
#define DLOCK_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* Version 2 is version 1 with resumable connections: HELLO_OK carries the
 * connection's id and secret, and RESUME takes a connection back after an
 * agent restart (docs/restarts.md). Version 3 is version 2 with a label in
 * HELLO: what the client says it is doing, shown in the agent's lease list
 * instead of its command name. An agent speaks all three; a client asks for
 * 3 only to send a label (an agent of version 2 finds its HELLO malformed),
 * else for 2, and falls back to 1 when an older agent answers
 * DLOCK_EVERSION. RESUME stays version 2. */
#define WIRE_VERSION     3
#define WIRE_VERSION_MIN 1
#define WIRE_MAGIC       0x4b434c44u /* "DLCK" read as a little-endian u32 */
#define WIRE_HDR_LEN     12
#define WIRE_MAX_BODY    4096 /* protocol-wide cap; names are far shorter */
#define WIRE_MAX_NAME    1024 /* hard cap on a name; the agent may set less */

enum wire_type {
    /* client -> agent */
    WIRE_T_HELLO = 0x01,
    WIRE_T_ACQUIRE = 0x02,
    WIRE_T_RELEASE = 0x03,
    WIRE_T_PING = 0x04,
    WIRE_T_ACQUIRE_EX = 0x05, /* ACQUIRE with a lock kind, an owner, several names */
    WIRE_T_CANCEL = 0x06,     /* empty; cancels the waiting acquire of the frame's id */
    WIRE_T_RESUME = 0x07,     /* instead of HELLO: takes a connection back (version 2) */
    /* agent -> client */
    WIRE_T_HELLO_OK = 0x81,
    WIRE_T_GRANTED = 0x82,
    WIRE_T_OK = 0x83,
    WIRE_T_ERROR = 0x84,
    WIRE_T_EVENT = 0x85
};

struct wire_hdr {
    uint32_t len;
    uint16_t type;
    uint16_t flags;
    uint32_t id;
};

/* HELLO's body: u32 magic, u16 version, u16 0; from version 3, then
 * optionally u16 label_len (1 to WIRE_MAX_LABEL) and the label. */
#define WIRE_MAX_LABEL 64

struct wire_hello {
    uint32_t magic;
    uint16_t version;
    const char *label; /* version 3: borrowed, not NUL-terminated; NULL or "" for none */
    uint16_t label_len;
};

#define WIRE_SECRET_LEN 16

/* HELLO_OK flags (version 2). */
#define WIRE_HELLO_RESUMABLE 0x1u /* the agent keeps the connection's leases across restarts */

struct wire_hello_ok {
    uint16_t version;
    uint32_t max_name_len;
    uint32_t max_leases;
    uint32_t default_ttl_ms;
    uint64_t clock_ns; /* the agent's CLOCK_BOOTTIME when it answered */
    /* Version 2 (24 more bytes): WIRE_HELLO_RESUMABLE, and then what RESUME
     * names the connection with; zeros otherwise. */
    uint16_t flags;
    uint64_t conn_id;
    uint8_t secret[WIRE_SECRET_LEN];
};

/* RESUME's body: u32 magic, u16 version (2), u16 0, u64 conn_id, 16 bytes
 * secret, as the connection's HELLO_OK gave them. */
struct wire_resume {
    uint32_t magic;
    uint16_t version;
    uint64_t conn_id;
    uint8_t secret[WIRE_SECRET_LEN];
};

/* Lock kinds (ACQUIRE_EX; ACQUIRE is always WIRE_KIND_EXCLUSIVE). */
enum wire_kind {
    WIRE_KIND_EXCLUSIVE = 0, /* one holder */
    WIRE_KIND_SHARED = 1,    /* the read side of a read-write lock: many holders */
    WIRE_KIND_SEMAPHORE = 2, /* at most `permits` holders */
};
#define WIRE_KIND_MAX WIRE_KIND_SEMAPHORE

/* ACQUIRE and ACQUIRE_EX flags. */
#define WIRE_ACQ_REENTRANT 0x1u /* the owner may take a name it holds again */
#define WIRE_ACQ_FLAGS     WIRE_ACQ_REENTRANT

/* The most names one ACQUIRE_EX may carry. */
#define WIRE_MAX_NAMES 64

/* ACQUIRE and ACQUIRE_EX. ACQUIRE's body: u32 ttl_ms, i64 wait_ms, u32
 * flags (WIRE_ACQ_*), u32 max_hold_ms, u32 progress_ms, u16 name_len, name.
 * ACQUIRE_EX's body: the same first 24 bytes (flags: WIRE_ACQ_*), then u8
 * kind, u8 0, u16 nnames (1 to WIRE_MAX_NAMES), u32 permits, u64 owner, and
 * nnames times (u16 len, name). */
struct wire_acquire {
    uint32_t ttl_ms;
    int64_t wait_ms; /* -1 = forever */
    uint32_t flags;
    uint32_t max_hold_ms; /* 0 = the agent's default */
    uint32_t progress_ms; /* 0 = the agent's default */
    const char *name;     /* the first name: borrowed from the body, not NUL-terminated */
    uint16_t name_len;
    /* ACQUIRE_EX only; ACQUIRE decodes as exclusive, 0, 0, one name. */
    uint8_t kind;     /* enum wire_kind */
    uint32_t permits; /* semaphore: the most holders; 0 otherwise */
    uint64_t owner;   /* re-entrant: who owns the hold within the connection (0: the
                         connection itself) */
    uint16_t nnames;  /* 0 (from a caller that filled name only) means 1 */
    /* Every name, as in the body (u16 len, name), for wire_acquire_name(). */
    const uint8_t *names;
};

struct wire_release {
    uint64_t lease_id;
};

struct wire_granted {
    uint64_t lease_id;
    uint64_t deadline_ns; /* CLOCK_BOOTTIME */
    uint64_t fence;       /* fencing token */
    uint32_t ttl_ms;
    uint32_t slot; /* the lease's slot in the connection's lease page */
};

struct wire_error {
    int32_t code;    /* a DLOCK_E* code */
    const char *msg; /* borrowed, not NUL-terminated */
    uint16_t msg_len;
};

struct wire_event {
    uint64_t lease_id;
    uint16_t state; /* dlock_state */
    int32_t reason; /* 0 or a DLOCK_E* code */
    uint64_t deadline_ns;
};

/* A growable byte buffer that frames are appended to. */
struct wire_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
};

void wire_buf_free(struct wire_buf *b);
/* Drops the first n bytes (after a partial write). */
void wire_buf_consume(struct wire_buf *b, size_t n);

/* Decodes a header from buf[0..n). Returns 1 with *h set when a whole header
 * is there, 0 when more bytes are needed, and DLOCK_EPROTO when the flags are
 * not 0, the type is 0, or the body would be longer than max_body. */
int wire_hdr_decode(const uint8_t *buf, size_t n, uint32_t max_body, struct wire_hdr *h);

/* Encoders append one whole frame; they return 0 or DLOCK_ENOMEM (or
 * DLOCK_EINVAL for a string that does not fit a frame). */
/* With the label's part when there is a label (version 3 or later);
 * DLOCK_EINVAL for a label longer than WIRE_MAX_LABEL, or one in an earlier
 * version. */
int wire_put_hello(struct wire_buf *b, uint32_t id, const struct wire_hello *m);
/* HELLO_OK of m->version: 24 bytes for version 1, 48 from version 2. */
int wire_put_hello_ok(struct wire_buf *b, uint32_t id, const struct wire_hello_ok *m);
int wire_put_resume(struct wire_buf *b, uint32_t id, const struct wire_resume *m);
int wire_put_acquire(struct wire_buf *b, uint32_t id, const struct wire_acquire *m);
/* ACQUIRE_EX with the names names[0..nnames) of lengths lens[]; m->name,
 * m->names and m->nnames are not read. DLOCK_EINVAL for no names or more
 * than WIRE_MAX_NAMES, a name longer than WIRE_MAX_NAME, or a body over
 * WIRE_MAX_BODY. */
int wire_put_acquire_ex(struct wire_buf *b, uint32_t id, const struct wire_acquire *m,
                        const char *const *names, const uint16_t *lens, uint16_t nnames);
int wire_put_release(struct wire_buf *b, uint32_t id, const struct wire_release *m);
int wire_put_empty(struct wire_buf *b, uint32_t id, uint16_t type); /* PING, OK */
int wire_put_granted(struct wire_buf *b, uint32_t id, const struct wire_granted *m);
int wire_put_error(struct wire_buf *b, uint32_t id, const struct wire_error *m);
int wire_put_event(struct wire_buf *b, uint32_t id, const struct wire_event *m);

/* Decoders read a body (after the header) of exactly len bytes. They return
 * 0, or DLOCK_EPROTO when the length does not match the type. */
/* 8 bytes of any version (no label), or, from version 3, 10 plus a label
 * of at most WIRE_MAX_LABEL bytes; DLOCK_EPROTO for anything else. */
int wire_get_hello(const uint8_t *body, size_t len, struct wire_hello *m);
/* 24 bytes of version 1 (flags, conn_id and secret then read as zeros), or
 * 48 of version 2 or later; DLOCK_EPROTO for any other length, a version
 * that does not go with it, or a nonzero reserved field. */
int wire_get_hello_ok(const uint8_t *body, size_t len, struct wire_hello_ok *m);
int wire_get_resume(const uint8_t *body, size_t len, struct wire_resume *m);
int wire_get_acquire(const uint8_t *body, size_t len, struct wire_acquire *m);
/* ACQUIRE_EX: DLOCK_EPROTO also when nnames is 0 or over WIRE_MAX_NAMES, or
 * the names do not fill the body exactly. Kind, flags and permits are the
 * agent's to judge (DLOCK_EINVAL), not the decoder's. */
int wire_get_acquire_ex(const uint8_t *body, size_t len, struct wire_acquire *m);
/* Name i (< m->nnames) of a decoded acquire, borrowed from its body (name
 * 0 of a plain ACQUIRE is m->name); NULL and 0 for i >= m->nnames. */
void wire_acquire_name(const struct wire_acquire *m, uint16_t i, const char **name, uint16_t *len);
int wire_get_release(const uint8_t *body, size_t len, struct wire_release *m);
int wire_get_granted(const uint8_t *body, size_t len, struct wire_granted *m);
int wire_get_error(const uint8_t *body, size_t len, struct wire_error *m);
int wire_get_event(const uint8_t *body, size_t len, struct wire_event *m);

/* The status socket that goes with the client socket at sock when none is
 * configured, the one rule dlockd and dlockctl share: DIR/status.sock beside
 * a socket named dlock.sock (so /run/dlock/dlock.sock gives the packaged
 * /run/dlock/status.sock), else sock without a trailing ".sock" plus
 * "-status.sock" (/tmp/a.sock gives /tmp/a-status.sock). Writes it to
 * out[0..cap); returns 0, or -1 when it does not fit (out is then ""). */
int wire_status_sibling(const char *sock, char *out, size_t cap);

#endif /* DLOCK_WIRE_H */
