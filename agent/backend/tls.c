/* SPDX-License-Identifier: BSD-3-Clause */
/* tls.c -- TLS on the Redis links with OpenSSL (tls.h). */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Mozilla's "intermediate" configuration (version 5.7): for TLS 1.2, these
 * AEAD suites with forward secrecy; TLS 1.3's own suites are OpenSSL's
 * defaults, which are the same three. */
#define INTERMEDIATE_CIPHERS                                                                       \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"       \
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"
#define INTERMEDIATE_GROUPS "X25519:prime256v1:secp384r1"

/* Decrypted bytes handed to the reader per tls_conn_read() call at most. */
#define READ_BUDGET (64 * 1024)

struct tls_ctx {
    SSL_CTX *ssl;
    bool verify;
};

struct tls_conn {
    SSL *ssl;
    bool handshaken;
    char name[256]; /* the name verified, for messages */
    char err[512];
};

static struct tls_ctx *current;

/* OpenSSL's last queued error, as text ("" when none). */
static const char *ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    buf[0] = '\0';
    if (e)
        ERR_error_string_n(e, buf, len);
    return buf;
}

/* A file the settings name must exist and be readable. */
static int check_file(const char *key, const char *path, char *err, size_t errlen)
{
    if (access(path, R_OK) == 0)
        return 0;
    snprintf(err, errlen, "[redis] %s = %s: %s", key, path, strerror(errno));
    return -1;
}

/* A private key that other users can read is no longer private; one they
 * can write could be swapped. As ssh does with its keys, such a file is
 * refused. */
static int check_key_mode(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "[redis] tls_key_file = %s: %s", path, strerror(errno));
        return -1;
    }
    if (st.st_mode & (S_IROTH | S_IWOTH)) {
        snprintf(err, errlen,
                 "[redis] tls_key_file = %s: other users may %s it (mode %04o): make it private "
                 "(chmod o-rw; readable by the agent's user or group only)",
                 path, (st.st_mode & S_IROTH) ? "read" : "write", (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

static int set_trust(SSL_CTX *ssl, const struct config *cfg, char *err, size_t errlen)
{
    const char *file = cfg->tls_ca_file[0] ? cfg->tls_ca_file : NULL;
    const char *dir = cfg->tls_ca_dir[0] ? cfg->tls_ca_dir : NULL;
    char why[256];
    if (!file && !dir) {
        if (SSL_CTX_set_default_verify_paths(ssl) == 1)
            return 0;
        snprintf(err, errlen, "TLS: cannot load the system's CA certificates: %s",
                 ssl_reason(why, sizeof why));
        return -1;
    }
    if (file && check_file("tls_ca_file", file, err, errlen) != 0)
        return -1;
    if (dir && check_file("tls_ca_dir", dir, err, errlen) != 0)
        return -1;
    if (SSL_CTX_load_verify_locations(ssl, file, dir) != 1) {
        snprintf(err, errlen, "[redis] %s = %s: no CA certificate could be read from it: %s",
                 file ? "tls_ca_file" : "tls_ca_dir", file ? file : dir,
                 ssl_reason(why, sizeof why));
        return -1;
    }
    return 0;
}

static int set_identity(SSL_CTX *ssl, const struct config *cfg, char *err, size_t errlen)
{
    char why[256];
    if (!cfg->tls_cert_file[0])
        return 0;
    if (check_file("tls_cert_file", cfg->tls_cert_file, err, errlen) != 0 ||
        check_file("tls_key_file", cfg->tls_key_file, err, errlen) != 0 ||
        check_key_mode(cfg->tls_key_file, err, errlen) != 0)
        return -1;
    if (SSL_CTX_use_certificate_chain_file(ssl, cfg->tls_cert_file) != 1) {
        snprintf(err, errlen, "[redis] tls_cert_file = %s: not a PEM certificate: %s",
                 cfg->tls_cert_file, ssl_reason(why, sizeof why));
        return -1;
    }
    if (SSL_CTX_use_PrivateKey_file(ssl, cfg->tls_key_file, SSL_FILETYPE_PEM) != 1 &&
        ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
        snprintf(err, errlen, "[redis] tls_key_file = %s: not a PEM private key: %s",
                 cfg->tls_key_file, ssl_reason(why, sizeof why));
        return -1;
    }
    if (SSL_CTX_check_private_key(ssl) != 1) {
        snprintf(err, errlen, "[redis] tls_key_file = %s is not the key of tls_cert_file = %s",
                 cfg->tls_key_file, cfg->tls_cert_file);
        return -1;
    }
    return 0;
}

struct tls_ctx *tls_ctx_new(const struct config *cfg, char *err, size_t errlen)
{
    ERR_clear_error();
    struct tls_ctx *ctx = calloc(1, sizeof *ctx);
    SSL_CTX *ssl = SSL_CTX_new(TLS_client_method());
    if (!ctx || !ssl) {
        snprintf(err, errlen, "TLS: out of memory");
        goto fail;
    }
    int floor = strcmp(cfg->tls_min_version, "1.3") == 0 ? TLS1_3_VERSION : TLS1_2_VERSION;
    if (SSL_CTX_set_min_proto_version(ssl, floor) != 1 ||
        SSL_CTX_set_cipher_list(ssl, INTERMEDIATE_CIPHERS) != 1 ||
        SSL_CTX_set1_groups_list(ssl, INTERMEDIATE_GROUPS) != 1) {
        snprintf(err, errlen, "TLS: this OpenSSL refuses the protocol settings");
        goto fail;
    }
    SSL_CTX_set_options(ssl, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    /* Partial writes: a write returns what went, and hiredis' buffer is
     * trimmed by that much (it may move and grow between the calls). */
    SSL_CTX_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* One read() takes all the socket has (several records, or a record's
     * header and body), not a header and then its body. */
    SSL_CTX_set_read_ahead(ssl, 1);
    if (set_trust(ssl, cfg, err, errlen) != 0 || set_identity(ssl, cfg, err, errlen) != 0)
        goto fail;
    ctx->verify = cfg->tls_verify;
    SSL_CTX_set_verify(ssl, ctx->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    ctx->ssl = ssl;
    return ctx;
fail:
    SSL_CTX_free(ssl);
    free(ctx);
    ERR_clear_error();
    return NULL;
}

void tls_ctx_free(struct tls_ctx *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl);
    free(ctx);
}

void tls_ctx_install(struct tls_ctx *ctx)
{
    if (current != ctx)
        tls_ctx_free(current);
    current = ctx;
}

struct tls_ctx *tls_ctx_current(void)
{
    return current;
}

/* ---- connections ---- */

static bool is_ip(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

struct tls_conn *tls_conn_new(struct tls_ctx *ctx, int fd, const char *host,
                              const char *server_name)
{
    struct tls_conn *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    ERR_clear_error();
    t->ssl = SSL_new(ctx->ssl);
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
        tls_conn_free(t);
        return NULL;
    }
    const char *name = server_name && server_name[0] ? server_name : host;
    snprintf(t->name, sizeof t->name, "%s", name);
    bool ip = is_ip(name);
    /* SNI is for host names only (RFC 6066). */
    if (!ip)
        SSL_set_tlsext_host_name(t->ssl, name);
    if (ctx->verify) {
        X509_VERIFY_PARAM *param = SSL_get0_param(t->ssl);
        if (ip)
            X509_VERIFY_PARAM_set1_ip_asc(param, name);
        else {
            X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            X509_VERIFY_PARAM_set1_host(param, name, 0);
        }
    }
    SSL_set_connect_state(t->ssl);
    return t;
}

void tls_conn_free(struct tls_conn *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);
    free(t);
}

/* What a verification failure most likely means here. */
static const char *verify_hint(long v)
{
    switch (v) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
        return "an unknown CA: name the CA that signed the server's certificate in tls_ca_file "
               "or tls_ca_dir";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return "a name mismatch: the certificate is for another name; connect by that name, or "
               "set tls_server_name to it";
    case X509_V_ERR_CERT_HAS_EXPIRED:
        return "an expired certificate: the server's certificate must be renewed";
    case X509_V_ERR_CERT_NOT_YET_VALID:
        return "a certificate not valid yet: check the clocks";
    default:
        return "the server's certificate is not trusted";
    }
}

/* Notes why the call failed with SSL_get_error() e, from OpenSSL's error
 * queue (or errno) and the verification result; EOF or ERROR. */
static enum tls_io failed(struct tls_conn *t, int e, const char *doing)
{
    unsigned long code = ERR_peek_last_error();
    int reason = ERR_GET_REASON(code);
    char text[256] = "";
    if (code)
        ERR_error_string_n(code, text, sizeof text);
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN) {
        snprintf(t->err, sizeof t->err, "the server closed the TLS connection");
        return TLS_IO_EOF;
    }
    if (e == SSL_ERROR_SYSCALL && !code) {
        /* The socket failed, or closed without a TLS close (errno 0). */
        if (errno == 0)
            snprintf(t->err, sizeof t->err, "the server closed the connection (TLS %s)%s", doing,
                     t->handshaken ? ""
                                   : " (a plaintext Redis on a TLS address, or one that refused "
                                     "this client)");
        else if (errno == ECONNRESET || errno == EPIPE)
            snprintf(t->err, sizeof t->err,
                     "TLS %s: %s (the server dropped this client: one it requires a client "
                     "certificate of (tls_cert_file), or not a TLS server?)",
                     doing, strerror(errno));
        else
            snprintf(t->err, sizeof t->err, "TLS %s: %s", doing, strerror(errno));
        return TLS_IO_EOF;
    }
    const char *hint = NULL;
    if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        long v = SSL_get_verify_result(t->ssl);
        snprintf(t->err, sizeof t->err, "TLS %s: certificate verify failed for '%.100s': %s (%s)",
                 doing, t->name, X509_verify_cert_error_string(v), verify_hint(v));
        return TLS_IO_ERROR;
    }
    switch (reason) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
        if (!t->handshaken)
            hint = "the server does not speak TLS there: a plaintext Redis on a TLS address?";
        break;
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
        hint = "the server requires a client certificate: set tls_cert_file and tls_key_file";
        break;
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
        hint = "the server refused the handshake: a client certificate it requires, or no "
               "protocol version or cipher in common (tls_min_version)";
        break;
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        hint = "the server refused the client certificate (tls_cert_file): not signed by a CA it "
               "trusts, or expired";
        break;
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
    case SSL_R_UNSUPPORTED_PROTOCOL:
        hint = "no protocol version in common (tls_min_version)";
        break;
    default:
        break;
    }
    snprintf(t->err, sizeof t->err, "TLS %s: %s%s%s%s", doing, text[0] ? text : "failed",
             hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
    return TLS_IO_ERROR;
}

enum tls_io tls_conn_handshake(struct tls_conn *t)
{
    ERR_clear_error();
    errno = 0;
    int ret = SSL_do_handshake(t->ssl);
    if (ret == 1) {
        t->handshaken = true;
        return TLS_IO_DONE;
    }
    switch (SSL_get_error(t->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        return TLS_IO_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return TLS_IO_WANT_WRITE;
    default:
        return failed(t, SSL_get_error(t->ssl, ret), "handshake");
    }
}

enum tls_io tls_conn_read(struct tls_conn *t, redisReader *reader, size_t *fed)
{
    char buf[16384];
    *fed = 0;
    while (*fed < READ_BUDGET) {
        size_t n = 0;
        ERR_clear_error();
        errno = 0;
        int ret = SSL_read_ex(t->ssl, buf, sizeof buf, &n);
        if (ret == 1) {
            if (redisReaderFeed(reader, buf, n) != REDIS_OK) {
                snprintf(t->err, sizeof t->err, "out of memory");
                return TLS_IO_ERROR;
            }
            *fed += n;
            /* Nothing buffered: wait for the socket, rather than a read()
             * that would only say EAGAIN (the watcher is level-triggered). */
            if (!SSL_has_pending(t->ssl))
                return TLS_IO_DONE;
            continue;
        }
        switch (SSL_get_error(t->ssl, ret)) {
        case SSL_ERROR_WANT_READ:
            return TLS_IO_DONE;
        case SSL_ERROR_WANT_WRITE:
            return TLS_IO_WANT_WRITE;
        default:
            return failed(t, SSL_get_error(t->ssl, ret), "read");
        }
    }
    return SSL_has_pending(t->ssl) ? TLS_IO_MORE : TLS_IO_DONE;
}

/* A write failed because the server closed: what it said before (an alert
 * in the socket's buffer, such as TLS 1.3's "certificate required", which
 * comes after the client's side of the handshake is over) tells why. */
static enum tls_io write_failed(struct tls_conn *t, int e)
{
    if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN) {
        int saved = errno;
        char b;
        size_t n;
        ERR_clear_error();
        int ret = SSL_peek_ex(t->ssl, &b, 1, &n);
        if (ret != 1 && SSL_get_error(t->ssl, ret) == SSL_ERROR_SSL)
            return failed(t, SSL_ERROR_SSL, "write");
        errno = saved;
    }
    return failed(t, e, "write");
}

enum tls_io tls_conn_write(struct tls_conn *t, char **obuf)
{
    while (sdslen(*obuf) > 0) {
        size_t n = 0;
        ERR_clear_error();
        errno = 0;
        int ret = SSL_write_ex(t->ssl, *obuf, sdslen(*obuf), &n);
        if (ret != 1) {
            int e = SSL_get_error(t->ssl, ret);
            if (e == SSL_ERROR_WANT_WRITE)
                return TLS_IO_WANT_WRITE;
            if (e == SSL_ERROR_WANT_READ)
                return TLS_IO_WANT_READ;
            return write_failed(t, e);
        }
        if (n == sdslen(*obuf)) {
            sdsfree(*obuf);
            *obuf = sdsempty();
            if (!*obuf) {
                snprintf(t->err, sizeof t->err, "out of memory");
                return TLS_IO_ERROR;
            }
        } else {
            sdsrange(*obuf, (int)n, -1);
        }
    }
    return TLS_IO_DONE;
}

const char *tls_conn_error(const struct tls_conn *t)
{
    return t->err[0] ? t->err : "TLS failed";
}

const char *tls_conn_describe(const struct tls_conn *t, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s", SSL_get_version(t->ssl), SSL_get_cipher_name(t->ssl));
    return buf;
}
