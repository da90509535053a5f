/* SPDX-License-Identifier: BSD-3-Clause */
/* replies.h -- what the agent reads in Redis' replies, decoded without I/O
 * or state: what kind of answer a lock script got (each script's own
 * answers are read by its entry of scripts.h), a redirect of Redis Cluster,
 * and the ranges and nodes of CLUSTER SLOTS. The backends
 * call these on the replies they get; the fuzz targets (tests/fuzz) call
 * them on any reply tree hiredis can build. */
#ifndef DLOCKD_REPLIES_H
#define DLOCKD_REPLIES_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a reply to a lock script says. */
enum script_reply_kind {
    SR_NONE,       /* no reply: the link is going away; err DLOCK_EUNAVAIL */
    SR_RESULT,     /* an integer of the scripts' range (|n| < 2^53): n */
    SR_HOLDER,     /* a lookup's answer (scripts.c reads it) */
    SR_NOSCRIPT,   /* NOSCRIPT: the server lost the script; err and text as SR_ERROR */
    SR_REDIRECT,   /* MOVED, ASK or TRYAGAIN (Redis Cluster): err DLOCK_EBACKEND, text */
    SR_ERROR,      /* another error reply: err (redis_error_code()), text */
    SR_UNEXPECTED, /* any other reply (a script may read it: scripts.c): err DLOCK_EBACKEND */
};

struct script_reply {
    enum script_reply_kind kind;
    int err;          /* 0 for SR_RESULT */
    const char *text; /* an error reply's text (in the reply), else NULL */
    long long n;      /* SR_RESULT */
};

/* Reads rep (NULL: none came), the reply to a lock script: none, an error
 * reply of some kind, an integer, or something else (SR_UNEXPECTED), which
 * the script's own decoder may read (script_decode(), scripts.h). */
void reply_script(const redisReply *rep, struct script_reply *out);

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
