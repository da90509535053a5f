/* SPDX-License-Identifier: BSD-3-Clause */
/* kind.h -- the kinds of lock a name can be held as (docs/architecture.md,
 * "Lock kinds"); the numbers are the wire protocol's (enum wire_kind). */
#ifndef DLOCKD_KIND_H
#define DLOCKD_KIND_H

enum lock_kind {
    LOCK_EXCLUSIVE = 0, /* one holder: the classic SET NX PX key with a token */
    LOCK_SHARED = 1,    /* the read side of a read-write lock: many holders, no exclusive one */
    LOCK_SEMAPHORE = 2, /* at most a given number of holders (permits) */
};

#endif
