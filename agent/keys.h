/* keys.h -- the Redis keys of a lock besides the lock key itself. Pure. */
#ifndef DLOCKD_KEYS_H
#define DLOCKD_KEYS_H

#include <stdbool.h>
#include <stddef.h>

/* The suffix of a lock's fencing counter key. It starts with a space, which
 * no lock name may contain, so no lock key can ever equal a counter key. */
#define FENCE_SUFFIX " fence"
/* The suffix of a lock's holder record: who holds it, for operators. */
#define HOLDER_SUFFIX " holder"
/* The most a counter or holder key adds to its lock key (besides the prefix
 * again). */
#define FENCE_KEY_EXTRA (sizeof "{}" - 1 + sizeof HOLDER_SUFFIX - 1)

/* Does key carry a Redis Cluster hash tag (a non-empty "{...}")? */
bool key_has_hash_tag(const char *key, size_t len);

/* Writes the fencing counter key of lock key `key`, whose first prefix_len
 * bytes are the agent's prefix, into out (room for prefix_len + len +
 * FENCE_KEY_EXTRA + 1 bytes) and returns its length. The counter starts with
 * the prefix too (ACL key patterns cover both) and lands in the lock key's
 * Cluster hash slot: a key with a hash tag keeps it ("key fence"); any other
 * key becomes the tag ("prefix{key} fence"). The prefix holds no brace
 * unless it has a hash tag (config_validate sees to it). */
size_t fence_key(const char *key, size_t len, size_t prefix_len, char *out);
/* The same with HOLDER_SUFFIX: the key of the lock's holder record. */
size_t holder_key(const char *key, size_t len, size_t prefix_len, char *out);

#endif
