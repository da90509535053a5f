/* SPDX-License-Identifier: BSD-3-Clause */
/* idmap.h -- an intrusive hash map from ids to nodes: the client finds its
 * requests in flight and its leases by id in constant time. */
#ifndef DLOCK_IDMAP_H
#define DLOCK_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct idnode {
    struct idnode *hnext;
    uint64_t id;
};

struct idmap {
    struct idnode **buckets;
    size_t nbuckets; /* a power of two, or 0 before the first put */
    size_t count;
};

/* Adds x (its id set, not already in m). 0, or DLOCK_ENOMEM. */
int idmap_put(struct idmap *m, struct idnode *x);
struct idnode *idmap_get(const struct idmap *m, uint64_t id);
/* Removes x if it is in m. */
void idmap_del(struct idmap *m, struct idnode *x);
/* Frees the buckets, not the nodes. */
void idmap_free(struct idmap *m);

#endif
