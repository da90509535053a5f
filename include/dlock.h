/* SPDX-License-Identifier: BSD-3-Clause */
/* dlock.h -- public API of libdlock, the client library of the dlock agent.
 *
 * A program opens a client (one Unix-socket connection to the local dlockd),
 * acquires leases on lock names through it, and releases them. The agent keeps
 * every lease alive on Redis while the connection lives and releases all of
 * them the moment the connection closes, whether the program exits, crashes or
 * closes the client.
 *
 * Agent restarts (docs/restarts.md): when the agent keeps a state directory
 * (its default), the connection outlives the agent's process. If the agent
 * restarts or crashes, its successor takes every lease over and the library
 * takes the connection back from it: each HELD lease is reported JEOPARDY
 * (reason DLOCK_ERESTART) when the connection breaks and HELD again once the
 * successor confirms it, and stays valid meanwhile by its lease page
 * (dlock_lease_valid()), with the same handle, lease id and fencing token.
 * A lease the successor did not take over, or whose deadline passes before
 * an agent is back, is reported LOST (DLOCK_ERESTART). An agent stopped
 * rather than restarted reports every lease LOST (DLOCK_ESHUTDOWN) as it
 * always did; the client then goes on with a fresh connection once an agent
 * is back. Acquires waiting for an answer are sent again, in the order
 * made, with what is left of their wait. The library reconnects only inside
 * dlock_client_dispatch() and blocking calls; meanwhile dlock_client_fd()
 * is a timer that tells an event loop when to call dispatch again. With an
 * agent that keeps no state, or one older than protocol version 2, the
 * connection ends with the agent as before (LOST, DLOCK_EDISCONNECTED).
 *
 * Conventions:
 * - Functions return 0 on success or a negative DLOCK_E* code; out parameters
 *   are written only on success. dlock_strerror() names a code.
 * - Callbacks are never called for a call that failed.
 * - Callbacks run only inside dlock_client_dispatch() or a blocking call made
 *   on the same client, never from another thread or a signal handler.
 * - The library never prints, aborts, exits or raises SIGPIPE.
 *
 * Threads: a dlock_client and the leases taken through it belong to one thread
 * at a time. Use one client per thread, or serialise calls on a client with
 * your own mutex. Different clients are independent.
 *
 * Ownership: a dlock_client is owned by the caller until dlock_client_close().
 * A dlock_lease is owned by its client; it stays valid until
 * dlock_lease_release(), dlock_lease_release_sync() or dlock_client_close(),
 * whichever comes first, even after the lease was lost (a re-entered lease:
 * until as many releases as acquires returned it). A dlock_lease_set is owned
 * by its client the same way, with its members' handles, until
 * dlock_lease_set_release(), dlock_lease_set_release_sync() or
 * dlock_client_close(). Strings returned by accessors are borrowed from the
 * lease and live as long as it does.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DLOCK_EXPORT __attribute__((visibility("default")))
#else
#define DLOCK_EXPORT
#endif

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0

/* Error codes. The wire protocol carries the same numbers. */
#define DLOCK_OK            0
#define DLOCK_EINVAL        (-1)  /* invalid argument */
#define DLOCK_ENOMEM        (-2)  /* out of memory */
#define DLOCK_ECONNECT      (-3)  /* cannot connect to the agent */
#define DLOCK_EDISCONNECTED (-4)  /* the connection to the agent was lost */
#define DLOCK_EPROTO        (-5)  /* protocol violation (either side) */
#define DLOCK_EVERSION      (-6)  /* no common protocol version */
#define DLOCK_EBUSY         (-7)  /* lock held elsewhere and no wait asked */
#define DLOCK_ETIMEDOUT     (-8)  /* the wait ran out before the lock was free */
#define DLOCK_ENAMETOOLONG  (-9)  /* lock name longer than the agent allows */
#define DLOCK_EBADNAME      (-10) /* lock name empty or with forbidden bytes */
#define DLOCK_ELIMIT        (-11) /* a lease, waiter or renewal limit, per connection or per uid */
#define DLOCK_ENOTFOUND     (-12) /* no such lease on this connection */
#define DLOCK_ELOST         (-13) /* the lease was lost before it was released */
#define DLOCK_EUNAVAIL      (-14) /* Redis is unreachable from the agent */
#define DLOCK_EBACKEND      (-15) /* Redis answered with an unexpected error */
#define DLOCK_EOOM          (-16) /* Redis is out of memory (OOM) */
#define DLOCK_EREADONLY     (-17) /* Redis is a read-only replica (READONLY) */
#define DLOCK_ELOADING      (-18) /* Redis is loading its dataset (LOADING) */
#define DLOCK_EAUTH         (-19) /* Redis refused the agent's credentials */
#define DLOCK_ESHUTDOWN     (-20) /* the agent is shutting down */
#define DLOCK_EHOLDLIMIT    (-21) /* the lease reached its maximum hold time */
#define DLOCK_ESTALLED      (-22) /* the holder did not touch the lease in time */
#define DLOCK_ECLOCK        (-23) /* the agent's clock (CLOCK_BOOTTIME) is not ours */
#define DLOCK_ENOQUORUM     (-24) /* quorum mode: no majority of Redis nodes usable */
#define DLOCK_EDENIED       (-25) /* the agent's policy does not let this user use the name */
#define DLOCK_ENOANSWER     (-26) /* the agent did not answer in time (stopped, wedged) */
#define DLOCK_EHELD         (-27) /* this client already holds the name (not re-entrant) */
#define DLOCK_EFAILOVER     (-28) /* Redis failed over: the lease is in doubt until confirmed */
#define DLOCK_EKIND         (-29) /* the name is held as another kind of lock (or other permits) */
/* the caller cancelled the acquire (dlock_lease_acquire_cancel()) */
#define DLOCK_ECANCELED (-30)
/* the agent restarted: the lease is in doubt until its successor confirms it */
#define DLOCK_ERESTART  (-31)
#define DLOCK_ERRNO_MIN (-31) /* lowest code in use */

/* Wait values for dlock_acquire_options.wait_ms. */
#define DLOCK_WAIT_NONE    0
#define DLOCK_WAIT_FOREVER (-1)

/* Lease states: HELD, JEOPARDY while renewal fails (HELD again if it
 * recovers), and in the end LOST or RELEASED, after which nothing changes. */
typedef enum dlock_state {
    DLOCK_STATE_HELD = 1,     /* the agent keeps the lease renewed */
    DLOCK_STATE_JEOPARDY = 2, /* renewal failing, still within its deadline */
    DLOCK_STATE_LOST = 3,     /* no longer provably held; stop using it */
    DLOCK_STATE_RELEASED = 4  /* given up by dlock_lease_release() or _sync() */
} dlock_state;

typedef struct dlock_client dlock_client;
typedef struct dlock_lease dlock_lease;

/* Lock kinds (dlock_lock_spec.kind): how many may hold a name at once. A
 * name is held as one kind at a time; an acquire of another kind than the
 * name's holders' waits (exclusive) or is refused with DLOCK_EKIND (shared
 * against a semaphore, a semaphore against shared holders or of another
 * permit count). See docs/protocol.md. */
typedef enum dlock_kind {
    DLOCK_KIND_EXCLUSIVE = 0, /* one holder (the default; the classic lock) */
    DLOCK_KIND_SHARED = 1,    /* the read side of a read-write lock: any number of shared
                                 holders, or one exclusive holder; once an exclusive acquire
                                 waits, later shared ones queue behind it */
    DLOCK_KIND_SEMAPHORE = 2  /* a counting semaphore: at most `permits` holders */
} dlock_kind;

/* Flags of dlock_acquire_options.flags. */
#define DLOCK_ACQUIRE_REENTRANT 0x1u /* the owner may take a name it holds again (below) */

/* Options for an acquire. The zero value is valid: the agent's default TTL,
 * try once without waiting. */
typedef struct dlock_acquire_options {
    uint32_t ttl_ms; /* lease TTL on Redis; 0 = agent default (30 s) */
    int64_t wait_ms; /* 0 = try once, > 0 = wait at most this long,
                        DLOCK_WAIT_FOREVER = wait until granted */
    uint32_t flags;  /* DLOCK_ACQUIRE_* flags, or 0; any other bit: DLOCK_EINVAL */
    /* Bounded holds, against a hung holder renewed forever. 0 = the agent's
     * default (none unless configured); the agent's maximum caps both.
     * Both count from the moment the agent sent the winning acquire to Redis
     * (for a lease granted by cohort handoff, from the handoff): a little
     * before the grant reaches the caller, never from the request, so a wait
     * for the lock does not eat into them (docs/protocol.md). */
    uint32_t max_hold_ms; /* renewal stops this long after the acquire was
                             sent to Redis */
    uint32_t progress_ms; /* renewal stops when dlock_lease_touch() was not
                             called for this long */
} dlock_acquire_options;

/* What kind of lock an acquire asks for (dlock_lease_acquire_spec()). NULL,
 * or the zero value, is the exclusive kind owned by the client. The library
 * refuses with DLOCK_EINVAL, before sending anything, an unknown kind, a
 * semaphore with permits 0, and permits on another kind.
 *
 * Re-entrancy (DLOCK_ACQUIRE_REENTRANT in the options): an acquire by the
 * owner of a lease on the name (the same client and the same `owner`, with
 * or without the flag when the lease was taken) is granted at once, whatever
 * the wait and whoever else waits, with the same lease: the same handle,
 * fencing token and validity, one more hold (dlock_lease_holds()). Each
 * release lowers the count; the last one releases the lease. The handle
 * stays valid until as many releases as acquires that returned it. A
 * re-entrant acquire by another owner, even on the same client, waits like
 * any other's (a try-once: DLOCK_EBUSY), and a re-entrant acquire of another
 * kind or permit count than the held lease's is DLOCK_EHELD (no upgrade, no
 * downgrade). Without the flag, an acquire of a name the client holds, by
 * any owner, is DLOCK_EHELD. Closing the client, or the process dying,
 * releases every hold at once. */
typedef struct dlock_lock_spec {
    uint32_t kind;    /* a dlock_kind */
    uint32_t permits; /* DLOCK_KIND_SEMAPHORE: the most holders at once (>= 1), the same for
                         every acquirer of the name; 0 for the other kinds */
    uint64_t owner;   /* who owns the lease within this client, for DLOCK_ACQUIRE_REENTRANT:
                         e.g. a thread id; 0 = the client itself */
} dlock_lock_spec;

/* Called when a lease changes state without being asked (LOST, JEOPARDY, or
 * HELD again after JEOPARDY). `reason` is 0 for HELD; for JEOPARDY and LOST
 * it is the DLOCK_E* code telling why (docs/protocol.md lists them), or, for
 * a LOST, DLOCK_EDISCONNECTED or DLOCK_EPROTO when the connection broke.
 * DLOCK_ERESTART: the agent restarted; a JEOPARDY while the library takes
 * the connection back (the lease stays valid until its deadline), a LOST
 * when the agent did not take the lease over or none was back before the
 * lease's deadline. A
 * LOST with reason 0 (which dlockd never sends) means a loss with no cause
 * given: the lease counts as lost with DLOCK_ELOST. The lease handle stays
 * valid until released. */
typedef void (*dlock_event_cb)(dlock_client *client, dlock_lease *lease, dlock_state state,
                               int reason, void *arg);

/* Called once when an asynchronous acquire completes. On success status is 0
 * and lease is the new lease (owned by the client); otherwise lease is NULL. */
typedef void (*dlock_acquire_cb)(dlock_client *client, int status, dlock_lease *lease, void *arg);

/* Connects to the agent at socket_path, or, if NULL, at $DLOCK_SOCKET, or at
 * /run/dlock/dlock.sock. Blocks for the protocol handshake (version 2, or 1
 * with an older agent, which takes one more connection). DLOCK_ECLOCK: the
 * caller's CLOCK_BOOTTIME is not the agent's (a time namespace with a
 * boottime offset), so lease deadlines would mean nothing here. */
DLOCK_EXPORT int dlock_client_open(dlock_client **out, const char *socket_path);

/* The longest label of dlock_client_open_labeled(), in bytes. */
#define DLOCK_LABEL_MAX 64

/* dlock_client_open() with a label: what the program does, such as the
 * command a wrapper runs ("make report"), which the agent's lease list
 * (dlockctl leases) shows for the client's leases instead of its command
 * name. At most DLOCK_LABEL_MAX bytes (DLOCK_EINVAL otherwise); the agent
 * shows control characters as '?'. NULL or "" for none. An agent older than
 * labels takes the connection without it (after one more connection); an
 * agent that takes the connection back after a restart shows the command
 * name again. */
DLOCK_EXPORT int dlock_client_open_labeled(dlock_client **out, const char *socket_path,
                                           const char *label);

/* Closes the connection; the agent releases every lease of this client.
 * Frees every lease handle and lease set of the client. Pending async
 * acquires are dropped without calling their callbacks. NULL is a no-op.
 * A connection that outlives its agent also marks each lease released in
 * the lease page's touch slot: should the agent be gone (restarting, or
 * dead unseen), its successor releases the leases on the mark.
 * Must not be called from a callback of the same client (releasing leases
 * and acquiring from one is fine). */
DLOCK_EXPORT void dlock_client_close(dlock_client *client);

/* The client's file descriptor, for poll/epoll/libev: when it is readable,
 * call dlock_client_dispatch(). Borrowed: do not close or read it.
 * It may change after any call on the client, dlock_client_dispatch()
 * included: while the agent restarts it is a timer (a timerfd) that becomes
 * readable when it is time to try to reconnect, and then a new connection's
 * socket. Read it again after each call and watch the new one: with poll(),
 * pass it afresh each time; with epoll or libev, register it again (a new
 * descriptor may have the old one's number: with epoll, EPOLL_CTL_ADD, where
 * EEXIST means it is still registered). */
DLOCK_EXPORT int dlock_client_fd(const dlock_client *client);

/* Handles everything the agent has sent, without blocking: completes async
 * acquires and delivers lease events through the callbacks. While the agent
 * restarts, it also tries to reconnect when it is time (dlock_client_fd()),
 * which may wait up to 5 s for a new agent's handshake. Returns 0 (also
 * while the agent restarts), or DLOCK_EDISCONNECTED once the connection is
 * gone for good: an agent without restarts gone, or a protocol error (every
 * held lease is then LOST and its event has been delivered). */
DLOCK_EXPORT int dlock_client_dispatch(dlock_client *client);

/* For an event loop that reads the connection itself (one that can watch a
 * descriptor only by reading it, as Node.js's): hands the library bytes read
 * from dlock_client_fd() (a dup() of it, say), to be handled as
 * dlock_client_dispatch() handles what it reads: acquires complete and
 * events are delivered through the callbacks, and releases and cancels a
 * full socket kept back go out. With len 0 (data not NULL) it handles what
 * the library read into its own buffer meanwhile (a blocking call, or a
 * send that found the socket full, may read ahead); data NULL (len 0) says
 * the connection ended: every held lease is LOST. A program that feeds must
 * read every byte the agent sends, in order, and never call
 * dlock_client_dispatch(). Its connection is not taken back after an agent
 * restart: it ends with the agent (leases LOST, DLOCK_EDISCONNECTED), as
 * with an agent without restarts, and its leases are marked released for
 * the agent's successor. Returns 0, DLOCK_EDISCONNECTED once the
 * connection is broken, DLOCK_ENOMEM (nothing was taken: feed the same
 * bytes again) or DLOCK_EINVAL. */
DLOCK_EXPORT int dlock_client_feed(dlock_client *client, const void *data, size_t len);

/* One round trip to the agent: 0 when it answered (within 5 s, reconnecting
 * meanwhile if the agent restarts; DLOCK_ENOANSWER otherwise). */
DLOCK_EXPORT int dlock_client_ping(dlock_client *client);

/* Sets the callback for unsolicited lease events (NULL to unset). */
DLOCK_EXPORT void dlock_client_set_event_cb(dlock_client *client, dlock_event_cb cb, void *arg);

/* Acquires `name`, blocking up to opts->wait_ms (plus one round trip). opts
 * may be NULL for the defaults. On success *out is the new lease. Returns
 * DLOCK_EBUSY (wait 0) or DLOCK_ETIMEDOUT when the lock stayed taken; a wait
 * that runs out while Redis is unreachable gives DLOCK_EUNAVAIL (quorum
 * mode: DLOCK_ENOQUORUM), as an outage longer than the agent's
 * outage_wait_ms ceiling does, if it has one (a DLOCK_WAIT_FOREVER wait
 * rides out any outage by default). DLOCK_ENOANSWER: the agent did not answer within the
 * wait plus 10 s (it is stopped or wedged; the request is abandoned).
 * While the agent restarts, a wait goes on (the acquire is sent again to
 * its successor with what is left of it) and one that runs out meanwhile
 * gives DLOCK_ETIMEDOUT; a try-once (wait 0) gives DLOCK_EDISCONNECTED.
 * DLOCK_EHELD, at once: this client already holds `name` (and opts->flags
 * lacks DLOCK_ACQUIRE_REENTRANT, below). That answer wins, whatever the
 * wait, over DLOCK_ELIMIT and over the DLOCK_EBUSY of a try-once, even while
 * other clients wait for the name; only DLOCK_ESHUTDOWN, a bad name
 * (DLOCK_EBADNAME, DLOCK_ENAMETOOLONG), DLOCK_EINVAL and DLOCK_EDENIED come
 * before it. The client holds `name` from the grant until the agent has
 * taken its release or lost the lease (LOST event); an acquire of it still
 * pending is no hold (docs/protocol.md). With DLOCK_ACQUIRE_REENTRANT, the
 * acquire is that of an exclusive re-entrant lock owned by the client (see
 * dlock_lock_spec). */
DLOCK_EXPORT int dlock_lease_acquire(dlock_client *client, const char *name,
                                     const dlock_acquire_options *opts, dlock_lease **out);

/* Starts an acquire and returns at once; cb runs later from
 * dlock_client_dispatch() or a blocking call. Returns 0 if the request was
 * sent (cb will be called exactly once, unless the client is closed first),
 * or an error (cb will not be called). */
DLOCK_EXPORT int dlock_lease_acquire_async(dlock_client *client, const char *name,
                                           const dlock_acquire_options *opts, dlock_acquire_cb cb,
                                           void *arg);

/* dlock_lease_acquire() and dlock_lease_acquire_async() for the kind of lock
 * spec asks for (NULL: exclusive; see dlock_lock_spec). Besides their
 * errors: DLOCK_EKIND when the name is held, or waited for, as another kind
 * (or as a semaphore of another permit count); DLOCK_EINVAL from the agent
 * for a kind it does not support in its mode. An exclusive, non-re-entrant
 * acquire owned by the client (owner 0) goes on the wire as the plain
 * ACQUIRE that agents of every version take. */
DLOCK_EXPORT int dlock_lease_acquire_spec(dlock_client *client, const char *name,
                                          const dlock_acquire_options *opts,
                                          const dlock_lock_spec *spec, dlock_lease **out);
DLOCK_EXPORT int dlock_lease_acquire_spec_async(dlock_client *client, const char *name,
                                                const dlock_acquire_options *opts,
                                                const dlock_lock_spec *spec, dlock_acquire_cb cb,
                                                void *arg);

/* Cancels a pending asynchronous acquire: the one started with this cb and
 * arg (the oldest, if several share them and were not cancelled yet). It
 * never blocks: a CANCEL goes to the agent, which drops the request from the
 * name's queue if it still waits there, so that no waiter of it remains.
 * Returns 0 when such an acquire was pending: its callback is still called
 * exactly once, later, from dlock_client_dispatch() or a blocking call on the
 * client, with DLOCK_ECANCELED when the agent dropped the request, or with
 * whatever answer crossed the cancel on the way: a lease (status 0; the
 * caller owns it and releases it as any other) or another error.
 * DLOCK_ENOTFOUND when no such acquire is pending (it completed, or was
 * cancelled already), DLOCK_EINVAL for a NULL client or cb, DLOCK_ENOMEM
 * when the request cannot be queued (nothing was sent). If the socket is
 * full, the CANCEL waits in the client's output buffer and goes out with the
 * next call on the client (dlock_client_dispatch() included), as a RELEASE
 * of dlock_lease_release() does. Blocking acquires cannot be cancelled:
 * their wait bounds them. */
DLOCK_EXPORT int dlock_lease_acquire_cancel(dlock_client *client, dlock_acquire_cb cb, void *arg);

/* Releases the lease and frees its handle at once, whatever the outcome,
 * without a round trip: the verdict comes from the lease page, and the
 * RELEASE is sent without waiting for the agent's answer (which the library
 * drops when it comes). Returns:
 * - 0: the lease was valid up to the release (held or in jeopardy, deadline
 *   not passed). The agent deletes the key on Redis (compare-and-delete)
 *   shortly after and a waiter elsewhere is woken by the release notice, as
 *   with dlock_lease_release_sync(); if the agent dies first, the key expires
 *   at its TTL.
 * - DLOCK_ELOST: the lease was lost, or its deadline had passed, before the
 *   release (the lease page says so, or a LOST event was already received).
 * - DLOCK_EDISCONNECTED: the agent is gone (known from an earlier call, or
 *   the send found the connection closed): it released the lease when the
 *   connection dropped, or its key expires at its TTL. Not while the agent
 *   restarts: the release is then 0 or DLOCK_ELOST by the lease page as
 *   above, the lease is marked released in its touch slot (the agent's
 *   successor releases it instead of renewing it), and the RELEASE goes to
 *   the successor once the connection is taken back.
 * - DLOCK_ENOMEM: no memory to queue the request; the lease stays held
 *   until the client is closed.
 * It never blocks on the agent: if the socket is full, the RELEASE waits in
 * the client's output buffer and goes out with the next call on the client
 * (dlock_client_dispatch() included), or the agent releases the lease when
 * the client is closed. The agent handles the frames of a connection in
 * order, so the release takes effect before anything the client sends after
 * it: an acquire of the same name right behind it on the same client finds
 * the lease given up (never DLOCK_EHELD) and its key deleted first on Redis
 * (or handed over to it, or to another client of the agent that asked in the
 * same loop turn, without Redis: see docs/protocol.md), and is granted
 * unless another waiter is served first. Nothing orders it with other
 * connections: a try-once acquire through another client (even of the same
 * process) may still find the lock taken for a moment. Use
 * dlock_lease_release_sync() when that matters (or acquire with a wait:
 * waiters are woken by the release).
 * Of a re-entered lease (dlock_lease_holds() > 1), this and
 * dlock_lease_release_sync() give up one hold: the RELEASE lowers the
 * agent's count, the handle stays valid with one hold less, and the return
 * value is as for the last hold (0 while the lease is valid); a lease
 * already lost, or a client disconnected, sends nothing. The handle is freed
 * with its last hold. */
DLOCK_EXPORT int dlock_lease_release(dlock_lease *lease);

/* Releases the lease and frees its handle, whatever the outcome, waiting for
 * the agent's word: one round trip to the agent, which answers once it has
 * given the lease up; the key is deleted on Redis right behind, or handed
 * over to a client of the agent (this one included) that asks for the name
 * in the same loop turn (see docs/protocol.md). Returns 0, DLOCK_ELOST if the lease had
 * been lost (even if its event was not yet dispatched), DLOCK_EDISCONNECTED
 * if the agent is gone (it released the lease when the connection dropped),
 * or DLOCK_ENOANSWER if the agent did not answer within 10 s. While the
 * agent restarts, the lease is marked released in its touch slot as by
 * dlock_lease_release(), and the call reconnects and asks the successor
 * within those 10 s; a successor that no longer knows the lease (it
 * released it on the mark) counts as an answer: the result is then 0 or
 * DLOCK_ELOST by the lease page when the call was made. Of a
 * re-entered lease, it gives up one hold (see dlock_lease_release()). */
DLOCK_EXPORT int dlock_lease_release_sync(dlock_lease *lease);

/* ---- Sets of names, all or nothing ----
 *
 * A lease set holds several names at once, or none of them. The library
 * builds it from ordinary leases, one per name (the agent knows nothing of
 * sets, so this works in every Redis mode, Cluster with names in different
 * hash slots included; docs/protocol.md, "Several names"):
 * - the names are taken one at a time in one global order, byte-wise
 *   ascending (strcmp()), whatever the caller's order, each as
 *   dlock_lease_acquire_spec() would take it with opts and spec;
 * - opts->wait_ms is one wait for the whole set: each name gets what is left
 *   of it (a name reached after the wait ran out gets one try);
 * - when a name cannot be taken (taken, wait run out, any error), or a name
 *   already taken is lost meanwhile, every name taken so far is released at
 *   once, as by dlock_lease_release(), and the error is returned: the caller
 *   is never given part of a set.
 * Because every set is taken in the same order, clients that ask for
 * overlapping sets, in whatever order, never deadlock: a client waits only
 * for a name above every name it holds, so along a chain of clients each
 * waiting for the next, the names waited for only rise and never come back
 * to the first. (That holds for leases taken outside the set too only when
 * they come before the set's names in the order.) Other observers see the
 * members taken one by one for a moment, and given back after a failure. */

/* The most names in one set. */
#define DLOCK_SET_MAX 64

typedef struct dlock_lease_set dlock_lease_set;

/* Takes every name of names[0..n-1] (1 <= n <= DLOCK_SET_MAX, no two equal)
 * or none; opts and spec as for dlock_lease_acquire_spec() (NULL for the
 * defaults), the same for every name. On success *out is the set, owned by
 * the client like a lease. Returns what the first name that could not be
 * taken got (DLOCK_EBUSY for a try-once; a wait that ran out is
 * DLOCK_ETIMEDOUT, also when the name it ran out on was tried once),
 * DLOCK_ELOST when a name already taken was lost before the last was
 * granted, DLOCK_EINVAL for n out of range, a NULL name, or a name given
 * twice, and DLOCK_EBADNAME or DLOCK_ENAMETOOLONG for a bad name, before
 * anything is sent. dlock_client_strerror() gives the agent's words on the
 * name it refused. */
DLOCK_EXPORT int dlock_lease_set_acquire(dlock_client *client, const char *const *names, size_t n,
                                         const dlock_acquire_options *opts,
                                         const dlock_lock_spec *spec, dlock_lease_set **out);

/* How many names the set holds (0 for NULL). */
DLOCK_EXPORT size_t dlock_lease_set_count(const dlock_lease_set *set);

/* The lease of names[i] of the acquire, in the caller's order (NULL when i
 * is out of range): an ordinary lease for its name, fencing token, validity
 * and events (the client's event callback gets each member's). A member is
 * released only with its set: dlock_lease_release() and _sync() refuse it
 * with DLOCK_EINVAL (unless it holds re-entrant holds of its own, beside
 * the set's: they give up one of those). */
DLOCK_EXPORT dlock_lease *dlock_lease_set_lease(const dlock_lease_set *set, size_t i);

/* Is every member valid right now (dlock_lease_valid())? A member lost, or
 * past its deadline, makes the whole set invalid. Same cost per member and
 * the same rules as dlock_lease_valid(). */
DLOCK_EXPORT int dlock_lease_set_valid(const dlock_lease_set *set);

/* Releases every member as dlock_lease_release() does (no round trip) and
 * frees the set; returns 0, or the first error of a member in the caller's
 * order (DLOCK_ELOST: that member was not valid up to the release). */
DLOCK_EXPORT int dlock_lease_set_release(dlock_lease_set *set);

/* The same with dlock_lease_release_sync(), one member after the other:
 * returns once the agent has given every member up. */
DLOCK_EXPORT int dlock_lease_set_release_sync(dlock_lease_set *set);

/* The lock name (borrowed, NUL-terminated). */
DLOCK_EXPORT const char *dlock_lease_name(const dlock_lease *lease);

/* The kind of lock the lease holds (DLOCK_KIND_EXCLUSIVE for NULL). */
DLOCK_EXPORT dlock_kind dlock_lease_kind(const dlock_lease *lease);

/* How many holds the lease has: the re-entrant acquires that returned it
 * and have not been released, 1 for a lease never re-entered (0 for NULL). */
DLOCK_EXPORT uint32_t dlock_lease_holds(const dlock_lease *lease);

/* The lease state as last reported by the agent. */
DLOCK_EXPORT dlock_state dlock_lease_state(const dlock_lease *lease);

/* The validity deadline in nanoseconds on CLOCK_BOOTTIME (which, unlike
 * CLOCK_MONOTONIC, keeps counting while the host is suspended, as the lock's
 * Redis TTL does): the lease is
 * provably held until then. Read from the lease page, so every renewal moves
 * it; 0 once the lease is lost. Never negative: nanoseconds since the boot,
 * far below INT64_MAX, the same value the wire protocol carries as an
 * unsigned 64-bit field. Same cost and rules as dlock_lease_valid(). */
DLOCK_EXPORT int64_t dlock_lease_deadline_ns(const dlock_lease *lease);

/* Is the lease provably held right now? True while the agent reports it
 * held (or in jeopardy: renewal failing, deadline not passed) and the
 * validity deadline has not passed. Reads the connection's shared-memory
 * lease page and CLOCK_BOOTTIME: no system call besides the vDSO clock, no
 * message to the agent, some nanoseconds. It turns false by itself when the
 * deadline passes, even if the agent is stopped or dead. Call it right before
 * each side effect that needs the lock. Safe from any thread while the handle
 * lives. */
DLOCK_EXPORT int dlock_lease_valid(const dlock_lease *lease);

/* Nanoseconds of validity left (0 when not valid). Same cost and rules as
 * dlock_lease_valid(). */
DLOCK_EXPORT int64_t dlock_lease_remaining_ns(const dlock_lease *lease);

/* Tells the agent the holder is making progress, for leases acquired with a
 * progress_ms: one store to shared memory, no system call besides the vDSO
 * clock. Safe from any thread while the handle lives. */
DLOCK_EXPORT void dlock_lease_touch(dlock_lease *lease);

/* The fencing token of the grant: strictly greater than every token granted
 * before for the same lock name, by any agent on the same Redis (see
 * docs/fencing.md for the exact guarantee). Hand it to the resource you write
 * to, so that it can refuse a stale holder. */
DLOCK_EXPORT uint64_t dlock_lease_fence(const dlock_lease *lease);

/* The lease TTL granted by the agent, in milliseconds. */
DLOCK_EXPORT uint32_t dlock_lease_ttl_ms(const dlock_lease *lease);

/* The client the lease belongs to (borrowed). */
DLOCK_EXPORT dlock_client *dlock_lease_client(const dlock_lease *lease);

/* A static English description of a DLOCK_E* code (or "unknown error"). */
DLOCK_EXPORT const char *dlock_strerror(int err);

/* Like dlock_strerror(), but in the agent's own words when the client's last
 * request was refused by the agent with err: they may say more, such as which
 * limit was hit ("per-uid lease limit (64) reached for uid 1000"). Call it
 * right after the failed call, or in the acquire callback that got err.
 * Borrowed: valid until the next call on the client. */
DLOCK_EXPORT const char *dlock_client_strerror(const dlock_client *client, int err);

/* The name of a state ("held", "jeopardy", "lost", "released"). */
DLOCK_EXPORT const char *dlock_state_name(dlock_state state);

#ifdef __cplusplus
}
#endif
#endif /* DLOCK_H */
