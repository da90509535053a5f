/* SPDX-License-Identifier: BSD-3-Clause */
/* kind.h -- the kinds of lock a name can be held as (docs/architecture.md,
 * "Lock kinds"); the numbers are the wire protocol's (enum wire_kind). */
#ifndef DLOCKD_KIND_H
#define DLOCKD_KIND_H

#include <stdbool.h>

#include "formats.h"

enum lock_kind {
    LOCK_EXCLUSIVE = 0, /* one holder: the classic SET NX PX key with a token */
    LOCK_SHARED = 1,    /* the read side of a read-write lock: many holders, no exclusive one */
    LOCK_SEMAPHORE = 2, /* at most a given number of holders (permits) */
};

/* Whether a key format can store a lock of kind k: dlock's every kind;
 * Redisson's RLock exclusive locks, its RReadWriteLock shared and exclusive
 * ones, its semaphore semaphores (docs/redisson.md). */
static inline bool kind_in_format(enum lock_kind k, enum key_format f)
{
    switch (f) {
    case KEY_FORMAT_REDISSON:
        return k == LOCK_EXCLUSIVE;
    case KEY_FORMAT_REDISSON_RW:
        return k == LOCK_EXCLUSIVE || k == LOCK_SHARED;
    case KEY_FORMAT_REDISSON_SEM:
        return k == LOCK_SEMAPHORE;
    case KEY_FORMAT_DLOCK:
        break;
    }
    return true;
}

#endif
