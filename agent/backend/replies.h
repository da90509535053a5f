/* SPDX-License-Identifier: BSD-3-Clause */
/* replies.h -- what the agent reads in Redis' replies, decoded without I/O
 * or state: a lock script's answer (and the holder lookup's), a redirect of
 * Redis Cluster, and the ranges and nodes of CLUSTER SLOTS. The backends
 * call these on the replies they get; the fuzz targets (tests/fuzz) call
 * them on any reply tree hiredis can build. */
#ifndef DLOCKD_REPLIES_H
#define DLOCKD_REPLIES_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* What a reply to a lock script says. */
enum script_reply_kind {
    SR_NONE,       /* no reply: the link is going away; err DLOCK_EUNAVAIL */
    SR_RESULT,     /* an integer of the scripts' range (|n| < 2^53): n */
    SR_HOLDER,     /* the lookup's [value, record, PTTL]: holder */
    SR_NOSCRIPT,   /* NOSCRIPT: the server lost the script; err and text as SR_ERROR */
    SR_REDIRECT,   /* MOVED, ASK or TRYAGAIN (Redis Cluster): err DLOCK_EBACKEND, text */
    SR_ERROR,      /* another error reply: err (redis_error_code()), text */
    SR_UNEXPECTED, /* any other reply: err DLOCK_EBACKEND */
};

struct script_reply {
    enum script_reply_kind kind;
    int err;                      /* 0 for SR_RESULT and SR_HOLDER */
    const char *text;             /* an error reply's text (in the reply), else NULL */
    long long n;                  /* SR_RESULT */
    struct backend_holder holder; /* SR_HOLDER */
};

/* Reads rep (NULL: none came), the reply to a lock script; lookup: to the
 * holder lookup, whose answer may also be the array of SR_HOLDER. */
void reply_script(const redisReply *rep, bool lookup, struct script_reply *out);

/* The result that a script's integer n stands for, or err (then text, an
 * error reply's, goes with it): acquire: the token when taken, else the
 * holder's PTTL negated (0: unknown); the other scripts: 1 done, 0 not our
 * key. at: when the answer came. */
struct backend_result reply_result(bool acquire, int err, const char *text, long long n,
                                   uint64_t at);

/* Whether n says the write took effect: an acquire that took the key, a
 * renewal that extended it. */
bool reply_wrote(bool acquire, long long n);

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the slot, and the node's
 * "host:port" into name (cap bytes). 0, or -1 when malformed (a socket
 * path, "unix:/...", is no node's name). */
int reply_redirect(const char *text, unsigned *slot, char *name, size_t cap);

/* The "host:port" of a node entry of CLUSTER SLOTS ([ip, port, id, ...])
 * into out (cap bytes); an empty ip (or "?") means the node that answered,
 * whose host is self. 0, or -1 when malformed, too long or a socket path. */
int reply_slots_node(const redisReply *e, const char *self, char *out, size_t cap);

/* One range of CLUSTER SLOTS ([first, last, master, replica...]): its
 * slots *lo to *hi and its master's "host:port" (reply_slots_node()). 0, or
 * -1 when malformed (the replicas are read apart, from element 3 on). */
int reply_slots_range(const redisReply *range, const char *self, long long *lo, long long *hi,
                      char *master, size_t cap);

#endif
