/* SPDX-License-Identifier: BSD-3-Clause */
/* journal.h -- the agent's lease journal: a file of the connections and
 * leases it holds, from which a successor agent takes them over.
 *
 * The file lives on tmpfs, in the agent's private state directory: it must
 * outlive the agent (a restart, an upgrade, a crash), not the host. Every
 * connection and lease granted is appended as a "put" record, every one
 * that ends as an "end" record, each with one write(); a successor replays
 * the file, keeps what its holders still want and appends "end" records
 * for the rest. The file is compacted (rewritten with the live records
 * only) when it passes both JOURNAL_COMPACT_MIN bytes and
 * JOURNAL_COMPACT_RATIO times the bytes of the live records.
 *
 * A record is framed:
 *
 *   u32 payload length, u8 type, u8 version (1), u16 0, payload, u32 CRC-32C
 *
 * integers in host byte order (the file never leaves the host), the CRC
 * over everything before it. CRC-32C rather than a 64-bit FNV-1a: the
 * records are at most JOURNAL_REC_MAX bytes, where CRC-32C detects every
 * error of up to 3 bits and every burst of up to 32 bits for certain,
 * FNV-1a only by chance beyond a single byte; and the payload length of
 * each type is fixed (or, for a lease, tied to its name's length), so a
 * damaged length field is caught before the CRC is read. A torn record
 * (the writer died in its write()) or a damaged one ends the replay there;
 * everything before it stands.
 *
 * The codec is pure; the file layer adds the descriptor, the live set's
 * sizes and compaction. Nothing here knows the agent's core. */
#ifndef DLOCKD_JOURNAL_H
#define DLOCKD_JOURNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_TOKEN_HEX 32
#define JOURNAL_NAME_MAX  1024 /* the protocol's longest lock name */

#define JOURNAL_CONN_RESUMABLE 1u /* the client can take the connection back */

/* The header before a payload, and the CRC after it. */
#define JOURNAL_HDR_LEN 8
#define JOURNAL_CRC_LEN 4
#define JOURNAL_VERSION 1
/* The payloads: a connection's put, an end of either, a lease's put before
 * its name. */
#define JOURNAL_CONN_PUT_LEN  52
#define JOURNAL_CONN_END_LEN  8
#define JOURNAL_LEASE_FIXED   100
#define JOURNAL_LEASE_END_LEN 16
/* The longest record: a lease of the longest name. */
#define JOURNAL_REC_MAX (JOURNAL_HDR_LEN + JOURNAL_LEASE_FIXED + JOURNAL_NAME_MAX + JOURNAL_CRC_LEN)

struct journal_conn {       /* a client connection */
    uint64_t conn_id;       /* unique in the agent's life and its successors' */
    uint32_t pid, uid, gid; /* the peer, from SO_PEERCRED */
    uint64_t pid_start;     /* the peer's start time (/proc/PID/stat field 22), against pid reuse */
    uint8_t secret[16];     /* what the client shows to take the connection back */
    uint32_t nslots;        /* its lease page's slots */
    uint32_t flags;         /* JOURNAL_CONN_RESUMABLE; no other bit */
};

struct journal_lease { /* a lease of a connection */
    uint64_t conn_id;
    uint64_t lease_id;  /* unique per agent; (conn_id, lease_id) is the key */
    uint32_t slot;      /* in the connection's lease page */
    uint8_t kind;       /* 0 exclusive, 1 shared, 2 semaphore */
    uint8_t format;     /* key format (0 dlock, 1..3 Redisson's), as the agent chose it */
    uint32_t permits;   /* semaphore: the limit, >= 1; else 0 */
    uint32_t ttl_ms;    /* >= 1 */
    uint32_t holds;     /* re-entrant holds, >= 1 */
    uint64_t holder_id; /* the owner within the connection (0: the connection) */
    uint64_t fence;
    uint64_t hold_until_ns;            /* CLOCK_BOOTTIME ns; renewal stops then; 0 = never */
    uint64_t progress_ns;              /* renewal stops without a touch this long; 0 = off */
    char token[JOURNAL_TOKEN_HEX + 1]; /* NUL-terminated, 32 lowercase hex digits */
    uint16_t name_len;                 /* 1..JOURNAL_NAME_MAX */
    char name[JOURNAL_NAME_MAX + 1];   /* NUL-terminated, no NUL within name_len */
};

enum journal_type {
    JOURNAL_CONN_PUT = 1,  /* a connection, new or replaced */
    JOURNAL_CONN_END = 2,  /* a connection ended, and with it all its leases */
    JOURNAL_LEASE_PUT = 3, /* a lease, new or replaced (its holds changed) */
    JOURNAL_LEASE_END = 4, /* a lease ended */
};

/* One record. A connection's end uses conn.conn_id alone, a lease's end
 * lease.conn_id and lease.lease_id alone. */
struct journal_rec {
    enum journal_type type;
    union {
        struct journal_conn conn;
        struct journal_lease lease;
    };
};

/* ---- the codec: pure ---- */

/* CRC-32C (Castagnoli, reflected, as iSCSI and ext4 use it) of len bytes. */
uint32_t journal_crc32c(const void *buf, size_t len);

/* Encodes r into buf (cap bytes; JOURNAL_REC_MAX is always enough) and
 * returns its length; -EINVAL when a field is one journal_decode() would
 * refuse (nothing is written then), -ENOBUFS when cap is too small. */
int journal_encode(const struct journal_rec *r, void *buf, size_t cap);

enum journal_read {
    JOURNAL_READ_RECORD,  /* a record, whole and valid */
    JOURNAL_READ_END,     /* no byte left */
    JOURNAL_READ_TORN,    /* a record's beginning, whose rest is missing */
    JOURNAL_READ_CORRUPT, /* bytes that are no valid record */
};

/* Decodes the record at the start of buf[0..len) into *r, and its length
 * into *used, when it returns JOURNAL_READ_RECORD. Trusts nothing: every
 * field is checked as journal_encode() checks it, and a record that
 * decodes encodes again to the same bytes. Which slots a connection's page
 * has is not known here: slot is not checked. */
enum journal_read journal_decode(const void *buf, size_t len, struct journal_rec *r, size_t *used);

/* What a replay found. */
struct journal_replay_info {
    uint64_t file_bytes;    /* the bytes read */
    uint64_t good_bytes;    /* up to the end of the last good record */
    enum journal_read stop; /* why reading stopped: _END (all good), _TORN or _CORRUPT */
    size_t conns, leases;   /* the live ones visited */
};

/* A replay's calls, each with the arg given to the replay; either may be
 * NULL. A call that returns other than 0 ends the replay, which returns
 * that value. The records are valid only during the call. */
struct journal_visitor {
    int (*conn)(void *arg, const struct journal_conn *c);
    int (*lease)(void *arg, const struct journal_lease *l);
};

/* Replays the records of buf[0..len) up to the first torn or corrupt one:
 * calls v for each connection and each lease live at that point, the
 * connections first, each group in the order of its records' last puts. A
 * put replaces the live record of its key ((conn_id) or (conn_id,
 * lease_id)), an end removes it, a connection's end removes its leases too;
 * a lease whose connection is not live is ignored, and so is the end of
 * something not live. Pure. 0, the first visitor call's non-zero value, or
 * -ENOMEM (*info is filled unless NULL). */
int journal_replay_buf(const void *buf, size_t len, const struct journal_visitor *v, void *arg,
                       struct journal_replay_info *info);

/* ---- the file layer ---- */

#define JOURNAL_COMPACT_MIN   (1u << 20) /* bytes */
#define JOURNAL_COMPACT_RATIO 4          /* file bytes per live byte */
/* Returned (>0) by a call whose record is in the file but whose compaction
 * failed: the old file stays in use, journal_error() says why. Only the
 * first failure of a run is returned; the next attempt comes when the file
 * has doubled. */
#define JOURNAL_COMPACT_FAILED 1
/* Returned by every call after the one that broke the journal, which
 * itself returned the error (journal_error() keeps it). */
#define JOURNAL_EBROKEN (-ESHUTDOWN)

/* An open-addressed map of 64-bit ids to non-zero 32-bit values (0 marks
 * a free slot); at the connections' level each id also has a map of its
 * leases. 12 bytes a slot, at most 3/4 full: 16 to 32 bytes a live lease. */
struct journal_map {
    uint64_t *key;
    uint32_t *val;
    struct journal_map *sub; /* the connections' level only: each one's leases */
    uint32_t cap, n;
};

/* An open journal, for one thread at a time. Read its fields, change none. */
struct journal {
    int fd;                 /* the file, O_APPEND; -1 when closed */
    int dirfd;              /* its directory (the journal's own descriptor) */
    int err;                /* the last failure, -errno; 0 */
    bool broken;            /* a write failed: nothing more is appended */
    bool compact_failing;   /* the last compaction failed, and was reported */
    uint64_t size;          /* the file's bytes */
    uint64_t live;          /* the bytes of its live records */
    uint64_t compact_after; /* no compaction below this size (after a failure) */
    unsigned long compactions;
    struct journal_map map; /* conn_id -> its put's bytes; its leases' lease_id -> bytes */
    char name[256];
    uint8_t rec[JOURNAL_REC_MAX];
};

/* Opens the journal file name (a name in dirfd, at most 251 bytes, no
 * '/') for appending, creating it (0600) if need be. What the file holds
 * stays, up to its first torn or corrupt record: the rest is cut off, so
 * that no new record follows garbage (*info, unless NULL, says what was
 * read). A NAME.new left by an unfinished compaction is removed, and a
 * file due for compaction is compacted. 0, JOURNAL_COMPACT_FAILED
 * (open all the same), or -errno (j is closed then). */
int journal_open(struct journal *j, int dirfd, const char *name, struct journal_replay_info *info);

/* Each appends one record with one write(), so that a writer's crash can
 * tear only the last one, and compacts when the file is due. 0 when the
 * record is in the file, or JOURNAL_COMPACT_FAILED; -EINVAL for a record
 * journal_encode() refuses, -ENOENT for a lease of a connection not live or
 * the end of something not live, -ENOMEM (nothing written, the journal
 * goes on).
 * The first write that fails (-ENOSPC, -EIO, -EFBIG ...) breaks the
 * journal: it returns its error, leaves no part of its record in the file,
 * and every call after it returns JOURNAL_EBROKEN and appends nothing. */
int journal_put_conn(struct journal *j, const struct journal_conn *c);
int journal_end_conn(struct journal *j, uint64_t conn_id);
int journal_put_lease(struct journal *j, const struct journal_lease *l);
int journal_end_lease(struct journal *j, uint64_t conn_id, uint64_t lease_id);

/* Rewrites the file with its live records only, through NAME.new renamed
 * over it (no fsync: tmpfs). 0, or -errno with the old file still in use
 * (JOURNAL_EBROKEN on a broken journal); -EIO breaks the journal when the
 * file no longer reads back as it was written (changed behind its back).
 * The cost is linear in the file: a few milliseconds a MB. */
int journal_compact(struct journal *j);

/* The last failure (-errno), 0 if none. */
int journal_error(const struct journal *j);

/* Closes the file and frees the journal; 0 or -errno of close(). */
int journal_close(struct journal *j);

/* Reads the journal file name in dirfd and replays it as
 * journal_replay_buf() does. 0, a visitor's value, or -errno (-ENOENT: no
 * such file). */
int journal_replay(int dirfd, const char *name, const struct journal_visitor *v, void *arg,
                   struct journal_replay_info *info);

#endif
