/* SPDX-License-Identifier: BSD-3-Clause */
/* tls.h -- TLS on the Redis links, with OpenSSL (docs/redis.md, TLS).
 *
 * hiredis 0.14 has no TLS, so the links keep hiredis for what it does well,
 * the reply reader and the command buffer, and move the bytes themselves:
 * hiredis makes the TCP connection, and a tls_conn on its socket does the
 * handshake, decrypts what comes into the context's reader, and encrypts
 * the context's output buffer (redis_link.c drives it from its watchers).
 * Everything is non-blocking: a call does what the socket allows now and
 * says what it waits for, so a peer that stalls mid-handshake or mid-record
 * stalls nothing but its own link.
 *
 * The client context holds the settings of [redis] tls_*: the protocol floor
 * (TLS 1.2 by default), Mozilla's "intermediate" cipher suites, the CAs to
 * trust, the client certificate and key (mutual TLS), and whether to verify.
 * Connections keep the context they were made with; a reload builds a new
 * one, which the next connections take. */
#ifndef DLOCKD_TLS_H
#define DLOCKD_TLS_H

#include <hiredis/read.h>
#include <stddef.h>

#include "config.h"

struct tls_ctx;
struct tls_conn;

/* Builds the client context of cfg's TLS settings, reading the CA,
 * certificate and key files (a key file readable or writable by others is
 * refused). NULL with the reason, naming the setting and the file, in err. */
struct tls_ctx *tls_ctx_new(const struct config *cfg, char *err, size_t errlen);
void tls_ctx_free(struct tls_ctx *ctx);
/* The context new connections take from now on (owned; the previous one
 * is freed, its connections keep what they use). NULL: none. */
void tls_ctx_install(struct tls_ctx *ctx);
struct tls_ctx *tls_ctx_current(void);

enum tls_io {
    TLS_IO_DONE,       /* handshake: finished; read: nothing more now; write: all written */
    TLS_IO_MORE,       /* read: stopped with decrypted bytes left: call again (next turn) */
    TLS_IO_WANT_READ,  /* wait until the socket is readable, then call again */
    TLS_IO_WANT_WRITE, /* wait until the socket is writable, then call again */
    TLS_IO_EOF,        /* the server closed the connection (tls_conn_error() says how) */
    TLS_IO_ERROR,      /* failed: tls_conn_error() says why */
};

/* A TLS client on fd, a connected non-blocking TCP socket, to host (the
 * address's): server_name, when not empty, is sent as SNI and verified
 * instead. NULL when out of memory. */
struct tls_conn *tls_conn_new(struct tls_ctx *ctx, int fd, const char *host,
                              const char *server_name);
/* Frees the stream, not the socket. */
void tls_conn_free(struct tls_conn *t);
/* One step of the handshake. */
enum tls_io tls_conn_handshake(struct tls_conn *t);
/* Decrypts what has come into reader; *fed: how many bytes. At most a
 * bounded amount per call (TLS_IO_MORE: call again), so that one link
 * cannot hold the loop. */
enum tls_io tls_conn_read(struct tls_conn *t, redisReader *reader, size_t *fed);
/* Encrypts and sends *obuf, hiredis' output buffer (an sds), trimming what
 * went; TLS_IO_DONE when it is empty. */
enum tls_io tls_conn_write(struct tls_conn *t, char **obuf);
/* Why the last call ended in TLS_IO_ERROR or TLS_IO_EOF: OpenSSL's reason,
 * and what it likely means for this set-up (an unknown CA, a name
 * mismatch, a plaintext server on a TLS address, a missing client
 * certificate...). No secret is in it. */
const char *tls_conn_error(const struct tls_conn *t);
/* The protocol version and cipher of an established stream, for the log. */
const char *tls_conn_describe(const struct tls_conn *t, char *buf, size_t len);

#endif
