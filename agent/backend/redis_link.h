/* SPDX-License-Identifier: BSD-3-Clause */
/* redis_link.h -- one hiredis connection to one Redis address, kept up:
 * connect with a timeout, the set-up (AUTH, SELECT, the owner's own
 * commands, a closing PING), reconnection with exponential backoff and full
 * jitter, drops deferred out of hiredis' callbacks, and a watchdog that
 * drops a link on which commands wait while nothing comes back. Every
 * backend opens its links through it: single-node Redis (a command and a
 * notice link per node), and the Cluster and Sentinel links.
 *
 * Two flavours share all of that. The asynchronous one is hiredis' async
 * context: the owner sends commands with callbacks, which find the link as
 * ac->data. The raw one (REDIS_LINK_RAW) is a plain non-blocking
 * redisContext on libev watchers, for pub/sub: hiredis 0.14's async context
 * knows only SUBSCRIBE and PSUBSCRIBE, and would abort on the pushes of
 * sharded pub/sub. The owner of a raw link writes commands with
 * redis_link_raw_send() and gets every reply and push, in order, through
 * its reply hook.
 *
 * With TLS (cfg->tls), both flavours keep hiredis' reader and output
 * buffer and move the bytes through a TLS stream on the socket hiredis
 * connected (tls.h): the async context gets an event adapter of ours in
 * place of hiredis' libev one, and is connected for hiredis only once the
 * handshake is done; the raw one reads and writes through the stream.
 *
 * The owner embeds struct redis_link, reads its public fields, and hears of
 * it through struct redis_link_hooks. */
#ifndef DLOCKD_REDIS_LINK_H
#define DLOCKD_REDIS_LINK_H

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config.h"
#include "stats.h"

struct redis_link;
struct tls_conn;

struct redis_link_hooks {
    void *arg;
    /* Connected, AUTH and SELECT queued: queue the link's own set-up
     * commands on l->ac. Their replies come before the link is ready; one
     * that must stop the link calls redis_link_fail(). Not called for a raw
     * link (may then be NULL): its set-up is AUTH and PING. */
    void (*setup)(void *arg, struct redis_link *l);
    /* Set up: commands may go (after the closing PING, or, with
     * REDIS_LINK_USER_READY, when the owner called redis_link_ready()). */
    void (*ready)(void *arg, struct redis_link *l);
    /* A failure to note in the node's health: a DLOCK_E* code and what Redis
     * or the connection said. */
    void (*error)(void *arg, int code, const char *text);
    /* A connection that was up is lost, and will be made again (not called
     * by redis_link_close()); its pending commands have been answered with a
     * NULL reply. May be NULL. */
    void (*down)(void *arg, struct redis_link *l);
    /* The watchdog dropped the link: Redis stopped answering (the owner may
     * drop its other links to that server). May be NULL. */
    void (*stalled)(void *arg, struct redis_link *l);
    /* A raw link that is ready: each reply and push that comes, in order;
     * r is freed after the call. The hook may send, fail or drop the link. */
    void (*reply)(void *arg, struct redis_link *l, const redisReply *r);
};

enum {
    REDIS_LINK_SELECT = 1,     /* SELECT cfg->redis_db after AUTH (not for pub/sub) */
    REDIS_LINK_USER_READY = 2, /* ready when the owner says so (pub/sub: the subscription's
                                  confirmation), not after the set-up; the connect timeout
                                  then covers the connect only */
    REDIS_LINK_RAW = 4,        /* the raw flavour: a plain non-blocking redisContext */
};

/* A command sent with redis_link_send(), embedded in the owner's record:
 * the watchdog looks at the oldest one. */
struct redis_link_cmd {
    TAILQ_ENTRY(redis_link_cmd) q;
    uint64_t sent; /* agent clock */
};

struct redis_link {
    /* Read only, for the owner. */
    redisAsyncContext *ac; /* NULL while down (and always for a raw link) */
    bool connected;        /* set up: commands may go */
    size_t pending;        /* commands sent with redis_link_send() not yet answered */
    uint64_t last_reply;   /* when one of them was last answered */
    uint64_t last_rtt;     /* and its round trip, ns */
    struct histo rtt;      /* the round trips of the commands answered */

    /* The link's own. */
    struct ev_loop *loop;
    const struct config *cfg;
    const struct redis_addr *addr;
    const char *label; /* the node, for logs: "redis" or "redis ADDR" */
    const char *what;  /* the link, for logs: "command", "pub/sub" */
    unsigned flags;
    struct redis_link_hooks hooks;
    int setup_left;   /* set-up replies still to come; -1 when it failed */
    unsigned attempt; /* failed attempts in a row, for the backoff */
    bool closing;
    bool unflushed;                        /* commands queued since the last flush */
    TAILQ_HEAD(, redis_link_cmd) inflight; /* in send order */
    ev_timer timer;                        /* connect and set-up timeout, then reconnect backoff */
    ev_timer kill;                         /* deferred drop of the connection */
    ev_timer watchdog;                     /* while commands are in flight */
    /* The raw flavour. */
    redisContext *rc;         /* NULL while down */
    bool raw_connecting;      /* the socket's connect is in progress */
    unsigned raw_gen;         /* a new one with every connection made or dropped */
    const char *raw_setup[2]; /* the set-up commands sent, for the log */
    unsigned raw_setup_seen;  /* their replies come in order */
    ev_io rio, wio;           /* readable; writable (connect, or output pending) */
    /* TLS, either flavour (the async one watches with rio and wio too). */
    struct tls_conn *tls;                            /* the stream, once the socket is connected */
    bool tls_open;                                   /* its handshake is done */
    bool tls_read_wants_write, tls_write_wants_read; /* the stream's cross wishes */
    char tls_why[512]; /* why the stream failed, for the log and the node's health */
};

/* Sets the link up to connect to addr with cfg's credentials, timeouts and
 * backoff; label, what and addr must outlive it. Nothing is sent before
 * redis_link_start(). */
void redis_link_init(struct redis_link *l, struct ev_loop *loop, const struct config *cfg,
                     const struct redis_addr *addr, const char *label, const char *what,
                     unsigned flags, const struct redis_link_hooks *hooks);
/* Connects, and from then on keeps the link up until redis_link_close(). */
void redis_link_start(struct redis_link *l);
/* Closes for good: timers stop, pending commands are answered with a NULL
 * reply, no hook is called. */
void redis_link_close(struct redis_link *l);

/* A REDIS_LINK_USER_READY link is set up. */
void redis_link_ready(struct redis_link *l);
/* The set-up failed (a refused command): the link is dropped, from outside
 * hiredis' callbacks, and made again after the backoff; the set-up replies
 * still to come are ignored. */
void redis_link_fail(struct redis_link *l, const char *why);
/* Whether the current set-up failed (for the owner's set-up callbacks). */
static inline bool redis_link_failed(const struct redis_link *l)
{
    return l->setup_left < 0;
}
/* Drops the connection at once, from outside hiredis' callbacks: pending
 * commands are answered with a NULL reply; it is made again after the
 * backoff. */
void redis_link_drop(struct redis_link *l);

/* Sends a command on a connected link, in the loop turn's pipelined write
 * (redis_link_flush()); fn's reply (NULL: the link is going away) must
 * begin with redis_link_answered(). 0, or DLOCK_EUNAVAIL. */
int redis_link_send(struct redis_link *l, struct redis_link_cmd *c, redisCallbackFn *fn, void *priv,
                    int argc, const char **argv, const size_t *argvlen);
/* The reply of c has come (reply NULL: the link is going away). Returns the
 * agent clock now. */
uint64_t redis_link_answered(struct redis_link *l, struct redis_link_cmd *c, const void *reply);
/* Writes the commands queued during this loop turn now, in one write. */
void redis_link_flush(struct redis_link *l);

/* Writes a command on a connected raw link, in the loop turn's write
 * (redis_link_flush(), or when the socket takes it). Its reply comes
 * through the reply hook. 0, DLOCK_EUNAVAIL, or DLOCK_ENOMEM. */
int redis_link_raw_send(struct redis_link *l, int argc, const char **argv, const size_t *argvlen);

/* A Redis error reply as a DLOCK_E* code (OOM, READONLY, LOADING, NOAUTH...;
 * else DLOCK_EBACKEND). */
int redis_error_code(const char *msg);

/* The delay before the attempt-th retry (from 0), in seconds: exponential
 * backoff from reconnect_min_ms to reconnect_max_ms, with full jitter (half
 * the cap, plus up to half of it at random). */
double redis_backoff_s(const struct config *cfg, unsigned attempt);

#endif
