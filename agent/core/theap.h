/* SPDX-License-Identifier: BSD-3-Clause */
/* theap.h -- the agent's single timer structure: a binary min-heap of
 * intrusive nodes keyed by a due time in nanoseconds. Pure, no I/O. */
#ifndef DLOCKD_THEAP_H
#define DLOCKD_THEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define THEAP_NONE UINT32_MAX

struct tnode {
    uint64_t due;
    uint32_t idx; /* position in the heap, THEAP_NONE when not queued */
    uint8_t kind; /* what the node is embedded in; for the owner's dispatch */
};

struct theap {
    struct tnode **v;
    uint32_t n, cap;
};

static inline void tnode_init(struct tnode *t, uint8_t kind)
{
    t->due = 0;
    t->idx = THEAP_NONE;
    t->kind = kind;
}

static inline bool tnode_queued(const struct tnode *t)
{
    return t->idx != THEAP_NONE;
}

/* Queues t at due, or moves it there if queued. 0, or -1 when out of memory. */
int theap_set(struct theap *h, struct tnode *t, uint64_t due);
/* Removes t if queued. */
void theap_remove(struct theap *h, struct tnode *t);
/* The earliest node, or NULL. */
static inline struct tnode *theap_top(const struct theap *h)
{
    return h->n ? h->v[0] : NULL;
}
void theap_free(struct theap *h);

#endif
