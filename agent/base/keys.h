/* SPDX-License-Identifier: BSD-3-Clause */
/* keys.h -- the Redis keys of a lock besides the lock key itself, and the
 * Redis Cluster hash slots they live in. Pure. */
#ifndef DLOCKD_KEYS_H
#define DLOCKD_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Redis Cluster's hash slots. */
#define KEY_SLOTS 16384

/* The suffix of a slot's fencing high-water mark key. It holds a space,
 * which no lock name may contain, so no lock key can ever equal it; and it
 * differs from the holder and legacy counter suffixes. */
#define FENCE_HW_SUFFIX " fence-hw"
/* The suffix of the separate holder record of earlier versions (now the
 * record is the lock key's value), still read by lookups. */
#define HOLDER_SUFFIX " holder"
/* The suffix of the per-name fencing counter of earlier versions (no longer
 * read). */
#define LEGACY_FENCE_SUFFIX " fence"
/* The suffix of a lock's waiting-hosts record: the agents whose clients
 * wait for the name, served oldest first (docs/protocol.md). */
#define WAITING_SUFFIX " waiting"
/* The suffix of the marks of the waiting-hosts record's entries that wait
 * for the shared side of a read-write lock: the readers, whom no reader
 * waits for (docs/protocol.md). */
#define READERS_SUFFIX " readers"
/* The suffix of a lock's release channel (a Pub/Sub channel, not a key). */
#define RELEASED_SUFFIX " released"
/* An agent's keep-alive key: PREFIX "alive " ID, which its entries in the
 * waiting-hosts records are bound to outside Redis Cluster and quorum mode
 * (docs/protocol.md, "Waiting hosts"). The space keeps it apart from every
 * lock key. */
#define KEEPALIVE_INFIX "alive "
/* The most a keep-alive key adds to the prefix: the infix and an agent id
 * (BACKEND_WAITER_ID_MAX). */
#define KEEPALIVE_EXTRA (sizeof KEEPALIVE_INFIX - 1 + 16)
/* The most a holder record, legacy counter, waiting-hosts record, readers'
 * marks or release channel name adds to its lock key (besides the prefix
 * again): the longest suffix is the channel's. */
#define SIDE_KEY_EXTRA (sizeof "{}" - 1 + sizeof RELEASED_SUFFIX - 1)

/* The longest slot tag: the tags are decimal numbers below 10^6. */
#define SLOT_TAG_MAX 6
/* The most a high-water mark key adds to the prefix. */
#define FENCE_HW_EXTRA (sizeof "{}" - 1 + SLOT_TAG_MAX + sizeof FENCE_HW_SUFFIX - 1)

/* For every hash slot s, a hash tag that Redis Cluster maps to s: the
 * decimal digits (no leading zero) of the smallest integer i >= 0 whose
 * string maps to s. Built by trying i = 0, 1, 2, ... in turn, which fills
 * all slots by i = 109757. The same in every agent and every version: it
 * names keys that all agents share. */
struct slot_tags {
    char tag[KEY_SLOTS][SLOT_TAG_MAX + 1];
};

/* CRC16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster uses. */
uint16_t key_crc16(const char *buf, size_t len);

/* Does key carry a Redis Cluster hash tag (a non-empty "{...}" after the
 * first "{")? */
bool key_has_hash_tag(const char *key, size_t len);

/* The Redis Cluster hash slot of key: CRC16 of its hash tag when it has
 * one, else of the whole key, modulo KEY_SLOTS. */
unsigned key_slot(const char *key, size_t len);

/* Fills t (about 1.1e5 CRCs of short strings); returns how many integers it
 * tried. */
unsigned slot_tags_build(struct slot_tags *t);

/* Writes the fencing high-water mark key of lock key `key` (whose first
 * prefix_len bytes are the agent's prefix) into out (room for prefix_len +
 * FENCE_HW_EXTRA + 1 bytes) and returns its length: prefix "{" TAG "}"
 * FENCE_HW_SUFFIX, TAG the tag of the lock key's slot. It starts with the
 * prefix (ACL key patterns cover it) and lies in the lock key's slot: the
 * prefix holds no brace unless it has a hash tag (config_validate sees to
 * it), and then both keys hash that tag. */
size_t fence_hw_key(const struct slot_tags *t, const char *key, size_t len, size_t prefix_len,
                    char *out);
/* The same for a lock key that need not start with the prefix (a key in
 * another client's format is the bare name): prefix "{" TAG "}" suffix. */
size_t fence_hw_key_of(const struct slot_tags *t, const char *prefix, size_t prefix_len,
                       const char *key, size_t len, char *out);

/* Writes the holder record key of lock key `key` into out (room for
 * prefix_len + len + SIDE_KEY_EXTRA + 1 bytes) and returns its length. It
 * lands in the lock key's slot: a key with a hash tag keeps it ("key
 * holder"); any other key becomes the tag ("prefix{key} holder"). */
size_t holder_key(const char *key, size_t len, size_t prefix_len, char *out);
/* The side key of `suffix` for a lock key that need not start with the
 * prefix (room for prefix_len + len + SIDE_KEY_EXTRA + 1 bytes):
 * "prefix{key}suffix", or "key suffix" when key has a hash tag. */
size_t side_key_of(const char *prefix, size_t prefix_len, const char *key, size_t len,
                   const char *suffix, char *out);
/* The same with LEGACY_FENCE_SUFFIX: the earlier per-name counter. */
size_t legacy_fence_key(const char *key, size_t len, size_t prefix_len, char *out);
/* The same with WAITING_SUFFIX: the lock's waiting-hosts record. */
size_t waiting_key(const char *key, size_t len, size_t prefix_len, char *out);
/* The same with READERS_SUFFIX: the marks of the record's readers. */
size_t readers_key(const char *key, size_t len, size_t prefix_len, char *out);
/* The same with RELEASED_SUFFIX: the lock's release channel, on which its
 * release notices go ("prefix{key} released", or "key released" for a key
 * with a hash tag). It lies in the lock key's Cluster slot (lock names hold
 * no brace), so the release script may SPUBLISH on it in Redis Cluster, and
 * starts with the prefix, so ACL channel patterns cover it. */
size_t release_channel(const char *key, size_t len, size_t prefix_len, char *out);
/* Writes the keep-alive key of agent id (at most KEEPALIVE_EXTRA - the
 * infix characters; longer is cut) under prefix into out (room for
 * prefix_len + KEEPALIVE_EXTRA + 1 bytes); its length. */
size_t keepalive_key(const char *prefix, size_t prefix_len, const char *id, char *out);

#endif
