/* SPDX-License-Identifier: BSD-3-Clause */
/* kind.h -- the kinds of lock a name can be held as (docs/architecture.md,
 * "Lock kinds"). */
#ifndef DLOCKD_KIND_H
#define DLOCKD_KIND_H

enum lock_kind {
    LOCK_EXCLUSIVE, /* one holder: the classic SET NX PX key with a token */
};

#endif
