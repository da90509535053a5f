/* SPDX-License-Identifier: BSD-3-Clause */
/* scripts.h -- the Lua scripts the agent runs on Redis, as one table: each
 * script's text, the keys it names, how its keys and arguments are made from
 * a request, and how its reply reads. Pure: no I/O and no state; a backend
 * sends what script_command() builds (EVALSHA, or EVAL after NOSCRIPT) and
 * hands the reply to script_decode(). tests/test_scripts.c runs every script
 * against a real redis-server. The keys and values are in docs/protocol.md
 * ("On Redis"). */
#ifndef DLOCKD_SCRIPTS_H
#define DLOCKD_SCRIPTS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "formats.h"
#include "keys.h"
#include "replies.h"
#include "wire.h"

enum script_id {
    SCRIPT_ACQUIRE, /* SET NX PX with the holder record, the fencing token, the waiting hosts */
    SCRIPT_RENEW,   /* compare-and-PEXPIRE */
    SCRIPT_RELEASE, /* compare-and-DEL, then the release notice */
    SCRIPT_FENCE,   /* quorum mode: raise the slot's mark to the grant's token */
    SCRIPT_LOOKUP,  /* for operators: the lock key's value, holder record and PTTL; a counted
                       key's kind and live permits */
    /* The counted kinds (docs/redis.md, "Counted kinds"): the shared side of
     * a read-write lock and a semaphore of N permits, a permit per holder in
     * a hash at the lock key. */
    SCRIPT_ACQUIRE_COUNTED, /* a permit when fewer than the limit are live, and the turn is ours */
    SCRIPT_RENEW_COUNTED,   /* the permit's expiry moves, and the key's with the latest */
    SCRIPT_RELEASE_COUNTED, /* the permit goes (the key with the last), then the release notice */
    SCRIPT_FENCE_COUNTED,   /* quorum mode: raise the slot's mark while the permit is live */
    /* A name in Redisson's format (docs/redisson.md): Redisson's RLock hash
     * at the bare name, dlock's field in it. */
    SCRIPT_ACQUIRE_REDISSON, /* the key, when there is none, and our turn */
    SCRIPT_RENEW_REDISSON,   /* while our field is there: its count, and PEXPIRE */
    SCRIPT_RELEASE_REDISSON, /* while our field is there: DEL, and Redisson's unlock message */
    SCRIPT_FENCE_REDISSON,   /* quorum mode: raise the slot's mark while our field is there */
    /* Redisson's RReadWriteLock hash: a writer (LOCK_EXCLUSIVE) or a reader
     * (LOCK_SHARED) field. */
    SCRIPT_ACQUIRE_RW,
    SCRIPT_RENEW_RW,
    SCRIPT_RELEASE_RW,
    SCRIPT_FENCE_RW,
    /* Redisson's RPermitExpirableSemaphore: the free permits at the name,
     * the permits taken in "{NAME}:timeout". */
    SCRIPT_ACQUIRE_SEM,
    SCRIPT_RENEW_SEM,
    SCRIPT_RELEASE_SEM,
    SCRIPT_FENCE_SEM,
    SCRIPT_LOOKUP_SEM,
    /* An operator's forced release (docs/status.md): what the lookup finds,
     * and the key deleted whoever holds it; in Redisson's semaphore format,
     * every permit taken given back. */
    SCRIPT_FORCE,
    SCRIPT_FORCE_SEM,
    SCRIPT_COUNT,
};

/* What a backend adds to every request: the key prefix and the mode. */
struct script_ctx {
    const char *prefix; /* the agent's prefix (config.prefix) */
    size_t prefix_len;
    const struct slot_tags *tags; /* names the fencing mark of the lock key's slot */
    /* Redis Cluster: the release names the lock key alone (a slot migration
     * never splits it: TRYAGAIN) and publishes with SPUBLISH, always. */
    bool sharded;
    /* [formats]: the names in Redisson's format (NULL: none) */
    const struct formats *formats;
};

/* Redisson's format: dlock's field in the hash is its token and this; the
 * message that Redisson's unlock publishes. */
#define SCRIPT_FIELD_SUFFIX    ":0"
#define SCRIPT_REDISSON_UNLOCK "0"

/* The kind field of a counted key's hash, and its values: "shared", or
 * "sem:N" (N permits, 1 <= N < 2^32). */
#define SCRIPT_KIND_FIELD "~kind"
#define SCRIPT_KIND_MAX   BACKEND_KIND_MAX
/* The live permits a lookup shows at most (it counts them all). */
#define SCRIPT_PERMITS_SHOWN BACKEND_PERMITS_SHOWN

/* The longest lock key (prefix + name), and any key the scripts name besides. */
#define SCRIPT_KEY_MAX      (CONFIG_PREFIX_MAX + WIRE_MAX_NAME)
#define SCRIPT_SIDE_KEY_MAX (2 * CONFIG_PREFIX_MAX + WIRE_MAX_NAME + SIDE_KEY_EXTRA + 1)
#define SCRIPT_ARGV_MAX     20

/* One command, as redisCommandArgv() and redisAsyncCommandArgv() take it:
 * v[0..n-1] with their lengths. The strings are the request's, the table's,
 * or held here: valid while the request's strings and this struct are. */
struct script_args {
    int n;
    const char *v[SCRIPT_ARGV_MAX];
    size_t len[SCRIPT_ARGV_MAX];
    char numkeys[4];
    char key[SCRIPT_KEY_MAX + 1]; /* the lock key */
    size_t key_len;
    char hw[CONFIG_PREFIX_MAX + FENCE_HW_EXTRA + 1]; /* the slot's fencing mark */
    char side[SCRIPT_SIDE_KEY_MAX];                  /* waiting hosts, or the old holder key */
    char readers[SCRIPT_SIDE_KEY_MAX];               /* acquires: the waiting readers' marks */
    char channel[SCRIPT_SIDE_KEY_MAX];               /* release: the name's channel */
    char extra[SCRIPT_SIDE_KEY_MAX];                 /* a Redisson semaphore's sorted set */
    char value[BACKEND_RECORD_MAX];                  /* acquire: "TOKEN HOLDER" */
    char kind[SCRIPT_KIND_MAX];                      /* counted acquire: "shared", "sem:N" */
    char num[6][24];                                 /* numbers among the arguments */
    /* acquire: a bound entry's life and the agent's keep-alive key */
    char want[24 + CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1];
};

/* What a script's reply says. */
struct script_result {
    /* SR_RESULT (the scripts with an answer of their own) or SR_HOLDER (a
     * lookup): decoded; else what replies.h says of the reply, and err. */
    enum script_reply_kind kind;
    int err;          /* 0 when decoded, else DLOCK_E* */
    const char *text; /* an error reply's text (points into the reply), else NULL */
    long long n;      /* an integer answer (SR_RESULT), as Redis gave it */
    /* The write took effect: an acquire took the key, a renewal extended it
     * (a WAIT for replicas follows those), a release deleted it, a fence
     * raised the mark (or found it high enough). */
    bool wrote;
    /* When decoded: acquire DONE with the token or TAKEN with the holder's
     * PTTL (0: unknown, or another host's turn); renew, release, fence: DONE
     * or NOT_OURS. */
    enum backend_outcome outcome;
    uint64_t fence;
    long long pttl_ms;
    /* Counted acquire: the name is held as another kind (or another N), so
     * the acquire can never succeed as asked: outcome is TAKEN (nothing was
     * written, nothing joined), and held is what the key says ("shared",
     * "sem:3", or a foreign hash's field, cut to fit). */
    bool mismatch;
    char held[SCRIPT_KIND_MAX];
    /* A release in Redisson's formats: the clients its message reached. */
    uint32_t listeners;
};

/* What a lookup found, as backend.h says (struct backend_holder: a counted
 * key's kind and permits too). */
struct script_holders {
    struct backend_holder holder;
};

/* One entry of the table. */
struct script_def {
    const char *what;   /* for logs: "acquire", "renewal", ... */
    enum backend_op op; /* the operation it does (a lookup: none; see lookup) */
    const char *src;    /* the Lua text */
    /* The KEYS it names (the release names one fewer on Redis Cluster, see
     * script_ctx). */
    int keys;
    /* A write that a WAIT for replicas follows (wait_replicas). */
    bool wait;
    /* It keeps or ends a lease: sent ahead of acquires and lookups. */
    bool urgent;
    /* A lookup: decoded into a struct script_holders. */
    bool lookup;
    /* Appends KEYS and ARGV (numkeys first) for req (and permits) to a. */
    void (*build)(const struct script_ctx *ctx, const struct backend_req *req, uint32_t permits,
                  struct script_args *a);
    /* Reads a reply that is neither an error nor missing (reply_script()
     * said SR_RESULT or SR_UNEXPECTED) into out, or into h for a lookup;
     * leaves kind SR_UNEXPECTED when it is none of the script's answers. */
    void (*decode)(const redisReply *rep, struct script_result *out, struct script_holders *h);
};

extern const struct script_def script_table[SCRIPT_COUNT];

/* The lock key of name (prefix and name, or the bare name in Redisson's
 * format) into out (room for SCRIPT_KEY_MAX + 1 bytes); its length. */
size_t script_lock_key(const struct script_ctx *ctx, const char *name, size_t len, char *out);

/* The command that runs script s for req: EVALSHA sha (or, with sha NULL
 * or empty, EVAL with the script's text), its keys and its arguments, into
 * a. The fields of req that s uses: every script the name; acquire (either
 * kind) the token, holder, ttl_ms, floor, block, waiter_id, want_ms, bound; renew
 * the token and ttl_ms; release the token and notify; fence the token and
 * fence. permits: the counted acquire's kind, 0 for the shared kind, N for
 * a semaphore of N permits (the other scripts ignore it). 0, or
 * DLOCK_EINVAL when the name is too long for a key. */
int script_command(enum script_id s, const char *sha, const struct script_ctx *ctx,
                   const struct backend_req *req, uint32_t permits, struct script_args *a);

/* Reads rep (NULL: none came), the reply to script s, into out; for a
 * lookup, what it found into h (may be NULL for the other scripts). */
void script_decode(enum script_id s, const redisReply *rep, struct script_result *out,
                   struct script_holders *h);

/* The result the core gets for a decoded reply, or for err (a DLOCK_E*
 * code: text goes with it as the error text) when err is nonzero; at: when
 * the answer came. */
struct backend_result script_backend_result(const struct script_result *sr, int err,
                                            const char *text, uint64_t at);

#endif
