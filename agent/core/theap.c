/* SPDX-License-Identifier: BSD-3-Clause */
/* theap.c -- binary min-heap of timer nodes (see theap.h). */
#include "theap.h"

#include <stdlib.h>

static void place(struct theap *h, uint32_t i, struct tnode *t)
{
    h->v[i] = t;
    t->idx = i;
}

static void sift_up(struct theap *h, uint32_t i)
{
    struct tnode *t = h->v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (h->v[parent]->due <= t->due)
            break;
        place(h, i, h->v[parent]);
        i = parent;
    }
    place(h, i, t);
}

static void sift_down(struct theap *h, uint32_t i)
{
    struct tnode *t = h->v[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && h->v[child + 1]->due < h->v[child]->due)
            child++;
        if (t->due <= h->v[child]->due)
            break;
        place(h, i, h->v[child]);
        i = child;
    }
    place(h, i, t);
}

int theap_set(struct theap *h, struct tnode *t, uint64_t due)
{
    if (tnode_queued(t)) {
        uint64_t old = t->due;
        t->due = due;
        if (due < old)
            sift_up(h, t->idx);
        else
            sift_down(h, t->idx);
        return 0;
    }
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 64;
        struct tnode **v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    t->due = due;
    place(h, h->n++, t);
    sift_up(h, t->idx);
    return 0;
}

void theap_remove(struct theap *h, struct tnode *t)
{
    if (!tnode_queued(t))
        return;
    uint32_t i = t->idx;
    t->idx = THEAP_NONE;
    struct tnode *last = h->v[--h->n];
    if (i == h->n)
        return;
    place(h, i, last);
    if (i > 0 && h->v[(i - 1) / 2]->due > last->due)
        sift_up(h, i);
    else
        sift_down(h, i);
}

void theap_free(struct theap *h)
{
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
