/* SPDX-License-Identifier: BSD-3-Clause */
/* idmap.c -- intrusive hash map from ids to nodes (see idmap.h). */
#include "idmap.h"

#include <stdlib.h>

#include "dlock.h"

static size_t slot(const struct idmap *m, uint64_t id)
{
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & (m->nbuckets - 1);
}

static int grow(struct idmap *m)
{
    size_t n = m->nbuckets ? m->nbuckets * 2 : 64;
    struct idnode **b = calloc(n, sizeof *b);
    if (!b)
        return DLOCK_ENOMEM;
    struct idmap bigger = {.buckets = b, .nbuckets = n, .count = m->count};
    for (size_t i = 0; i < m->nbuckets; i++) {
        for (struct idnode *x = m->buckets[i], *next; x; x = next) {
            next = x->hnext;
            size_t s = slot(&bigger, x->id);
            x->hnext = b[s];
            b[s] = x;
        }
    }
    free(m->buckets);
    *m = bigger;
    return 0;
}

int idmap_put(struct idmap *m, struct idnode *x)
{
    if (m->count >= m->nbuckets && grow(m) != 0 && m->nbuckets == 0)
        return DLOCK_ENOMEM; /* a full map still works, with longer chains */
    size_t s = slot(m, x->id);
    x->hnext = m->buckets[s];
    m->buckets[s] = x;
    m->count++;
    return 0;
}

struct idnode *idmap_get(const struct idmap *m, uint64_t id)
{
    if (!m->nbuckets)
        return NULL;
    for (struct idnode *x = m->buckets[slot(m, id)]; x; x = x->hnext)
        if (x->id == id)
            return x;
    return NULL;
}

void idmap_del(struct idmap *m, struct idnode *x)
{
    if (!m->nbuckets)
        return;
    for (struct idnode **p = &m->buckets[slot(m, x->id)]; *p; p = &(*p)->hnext) {
        if (*p == x) {
            *p = x->hnext;
            m->count--;
            return;
        }
    }
}

void idmap_free(struct idmap *m)
{
    free(m->buckets);
    m->buckets = NULL;
    m->nbuckets = m->count = 0;
}
