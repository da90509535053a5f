/* SPDX-License-Identifier: BSD-3-Clause */
/* admit.c -- the admission rule of each lock kind (admit.h). */
#include "admit.h"

#include "dlock.h"

#include "planted.h"

bool admit_compatible(const struct admit_ask *a, const struct admit_ask *b)
{
    if (a->kind == LOCK_EXCLUSIVE || b->kind == LOCK_EXCLUSIVE)
        return true;
    if (a->kind != b->kind)
        return false;
    return a->kind != LOCK_SEMAPHORE || a->permits == b->permits;
}

enum admit_verdict admit_first(const struct admit_held *h, const struct admit_ask *a)
{
    if (h->nholders == 0)
        return ADMIT_STORE;
    struct admit_ask held = {.kind = h->kind, .permits = h->permits};
    if (!admit_compatible(&held, a))
        return ADMIT_CLASH;
    if (a->kind == LOCK_EXCLUSIVE ||
        (h->kind == LOCK_EXCLUSIVE && !(PLANTED(CORE_BUG_READER_JOINS_WRITER) && h->can_join)))
        return ADMIT_WAIT;
    /* A reader joins the local readers' grant while it may take one more,
     * else asks the store for a grant of its own beside them. */
    if (a->kind == LOCK_SHARED)
        return h->can_join ? ADMIT_JOIN : ADMIT_STORE;
    /* A semaphore: each permit is a grant of its own from the store, which
     * counts the holders of every host. */
    return h->nholders < a->permits ? ADMIT_STORE : ADMIT_WAIT;
}

int admit_check(const struct admit_ask *a, const char **why)
{
    switch (a->kind) {
    case LOCK_EXCLUSIVE:
    case LOCK_SHARED:
        if (a->permits) {
            *why = "permits are for a semaphore only";
            return DLOCK_EINVAL;
        }
        return 0;
    case LOCK_SEMAPHORE:
        if (!a->permits) {
            *why = "a semaphore needs at least 1 permit";
            return DLOCK_EINVAL;
        }
        return 0;
    }
    *why = "unknown lock kind";
    return DLOCK_EINVAL;
}
