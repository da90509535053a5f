/* SPDX-License-Identifier: BSD-3-Clause */
/* server.h -- the agent's listening socket and client connections: framing,
 * handshake, limits and output buffering. Lock logic lives in agent.c. */
#ifndef DLOCKD_SERVER_H
#define DLOCKD_SERVER_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "core.h"
#include "leasepage.h"
#include "listener.h"
#include "unixsock.h"
#include "util.h"
#include "wire.h"

/* What the connections of one uid use together, against the per-uid caps. */
struct uid_use {
    LIST_ENTRY(uid_use) link;
    LIST_HEAD(, conn) conns;
    uid_t uid;
    unsigned nconns;
    struct core_account acct; /* leases and waiters of its connections */
    size_t out_bytes;         /* output queued on all its connections */
};

struct conn {
    LIST_ENTRY(conn) link;  /* the server's connections */
    LIST_ENTRY(conn) ulink; /* its uid's connections */
    struct server *srv;
    struct uid_use *uu;
    int fd;
    ev_io rio, wio;
    ev_timer handshake; /* closes a peer that does not say HELLO in time */
    struct wire_buf in, out;
    size_t out_counted;    /* the part of out.len counted in uu->out_bytes */
    struct core_client cc; /* the peer as the lock core knows it: pid, uid, comm, groups */
    gid_t gid;
    uint32_t gids[PEER_GROUPS_MAX]; /* gid and supplementary groups (cc.gids points here) */
    uint64_t serial;
    bool hello;
    bool dirty;   /* has output waiting for the next flush */
    bool reading; /* rio is active */
    bool closing; /* being torn down */
    /* Out of room, it sent a RELEASE that gave up no lease: no more of its
     * frames are taken until it has room again. */
    bool release_stalled;
    struct conn *dirty_next;
    struct lease_page page; /* mapped at hello */
    /* Resumable (docs/restarts.md): what the client shows to take the
     * connection back from a successor, and its pages' files in the state
     * directory; conn_id 0 otherwise. */
    uint64_t conn_id;
    uint8_t secret[WIRE_SECRET_LEN];
    uint64_t pid_start; /* the peer's start time (proc_start_time()) */
    /* Taken over from a predecessor, its client not back yet: no socket;
     * pidfd watches its process, whose end ends its leases. */
    bool detached;
    bool closed;
    int pidfd;
    ev_io pidwatch;
    struct conn *resumed_into; /* RESUME gave this socket to that connection */
};

/* What the lock logic does with requests and connections: the server calls
 * it through these, and includes nothing of it. */
struct server_hooks {
    void *arg;
    void (*acquire)(void *arg, struct conn *c, uint32_t id, const struct wire_acquire *m);
    void (*release)(void *arg, struct conn *c, uint32_t id, uint64_t lease_id);
    /* Cancels the connection's acquire id if it still waits. */
    void (*cancel)(void *arg, struct conn *c, uint32_t id);
    /* The connection is closing: its leases and waiters go. */
    void (*conn_gone)(void *arg, struct conn *c);
    /* It said HELLO (or RESUME), and was answered. */
    void (*conn_hello)(void *arg, struct conn *c);
    /* Its client took it back after a restart (RESUME): HELLO_OK went. */
    void (*conn_resumed)(void *arg, struct conn *c);
    uint64_t *refused; /* counts connections refused at a limit */
};

struct server {
    struct ev_loop *loop;
    struct server_hooks hooks;
    const struct config *cfg;
    int lfd;
    struct listener lst;
    LIST_HEAD(, conn) conns;
    LIST_HEAD(, uid_use) uids;
    struct conn *dirty;
    uint32_t nconns;
    uint64_t serial;
    char path[108];
    bool inherited;  /* passed by the service manager, which owns the file */
    int state_dirfd; /* the state directory: resumable connections; -1: none */
};

/* Binds the socket (or takes the one passed by the service manager) (removing a stale file,
 * refusing a live one). 0 or -1. */
int server_open(struct server *s, struct ev_loop *loop, const struct server_hooks *hooks,
                const struct config *cfg);
/* Connections said HELLO from now on are resumable, their pages files in
 * dirfd (the state directory, which the caller keeps open). */
void server_keep_state(struct server *s, int dirfd);
/* A connection that a predecessor of this agent served (docs/restarts.md),
 * taken over without a socket until its client resumes it: its pages are
 * the files it left, its process (pid, started at pid_start) is watched.
 * NULL with errno set: ESRCH when that process is gone, else the pages'
 * failure. */
struct server_detached_conn {
    uint64_t conn_id;
    const uint8_t *secret;
    pid_t pid;
    uid_t uid;
    gid_t gid;
    uint64_t pid_start;
    uint32_t nslots;
};
struct conn *server_detached(struct server *s, const struct server_detached_conn *d);
/* Closes a connection as if its peer had gone (hooks.conn_gone). */
void server_drop(struct conn *c);
/* The name of a resumable connection's page files in the state directory. */
void server_page_name(uint64_t conn_id, char out[24]);
/* Stops accepting and removes the socket file. */
void server_stop_listening(struct server *s);
/* Writes every connection's queued output: once per loop turn. */
void server_flush(struct server *s);
/* After the limits changed (a reload): connections that stopped reading for
 * a cap get a turn to go on. */
void server_limits_changed(struct server *s);
/* Flushes and closes every connection (hooks.conn_gone is called for each). */
void server_close_all(struct server *s);

/* Replies and events; they queue output, written when the loop turns. */
void conn_send_granted(struct conn *c, uint32_t id, const struct wire_granted *m);
void conn_send_error(struct conn *c, uint32_t id, int code, const char *msg);
void conn_send_ok(struct conn *c, uint32_t id);
void conn_send_event(struct conn *c, const struct wire_event *m);

#endif
