/* SPDX-License-Identifier: BSD-3-Clause */
/* formats.h -- which key format a lock name is stored in, from the
 * [formats] section: dlock's own (the prefix, then the name) or Java
 * Redisson's (the name itself: docs/redisson.md). Pure. */
#ifndef DLOCKD_FORMATS_H
#define DLOCKD_FORMATS_H

#include <stdbool.h>
#include <stddef.h>

#define FORMATS_MAX_PATTERNS 64
#define FORMATS_PATTERN_MAX  256

enum key_format {
    KEY_FORMAT_DLOCK,       /* prefix + name; a string, or a counted hash (docs/protocol.md) */
    KEY_FORMAT_REDISSON,    /* the name; Redisson's RLock hash */
    KEY_FORMAT_REDISSON_RW, /* the name; Redisson's RReadWriteLock hash */
    /* the name (the free permits) and "{NAME}:timeout"; Redisson's
     * RPermitExpirableSemaphore */
    KEY_FORMAT_REDISSON_SEM,
};

/* "redisson = PATTERN...", "redisson_rwlock = PATTERN..." and
 * "redisson_semaphore = PATTERN...": fnmatch(3) patterns of the names in
 * Redisson's RLock, RReadWriteLock and RPermitExpirableSemaphore formats (the
 * first pattern that matches, in the order of the file); any other name keeps
 * dlock's. */
struct formats {
    char redisson[FORMATS_MAX_PATTERNS][FORMATS_PATTERN_MAX];
    enum key_format format[FORMATS_MAX_PATTERNS];
    unsigned nredisson;
};

/* Adds the blank-separated patterns of v for format. 0, or -1 when there is
 * none, one is too long, or the list is full. */
int formats_add(struct formats *f, enum key_format format, const char *v);

/* The format of name (len bytes, not NUL-terminated, at most
 * FORMATS_NAME_MAX). */
#define FORMATS_NAME_MAX 1024
enum key_format formats_of(const struct formats *f, const char *name, size_t len);

/* Redisson's channel for a lock named name in format f: RLock's
 * "redisson_lock__channel:{NAME}", RReadWriteLock's "redisson_rwlock:{NAME}",
 * RPermitExpirableSemaphore's "redisson_sc:{NAME}" (names hold no brace).
 * Writes it with a NUL into out (room for len + REDISSON_CHANNEL_EXTRA + 1
 * bytes); returns its length. */
#define REDISSON_CHANNEL_PREFIX     "redisson_lock__channel:{"
#define REDISSON_RW_CHANNEL_PREFIX  "redisson_rwlock:{"
#define REDISSON_SEM_CHANNEL_PREFIX "redisson_sc:{"
#define REDISSON_CHANNEL_EXTRA      (sizeof REDISSON_CHANNEL_PREFIX - 1 + 1)
size_t redisson_channel(enum key_format f, const char *name, size_t len, char *out);

/* The semaphore's permits: "{NAME}:timeout", a sorted set of permit id ->
 * expiry (ms since 1970). Into out (room for len + 11 bytes); its length. */
size_t redisson_timeout_key(const char *name, size_t len, char *out);

/* The lock name a Redisson channel (of any of the three), in place: its
 * start in *name and its length; 0 when ch is no Redisson lock channel. */
size_t redisson_channel_name(const char *ch, size_t len, const char **name);

#endif
