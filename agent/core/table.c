/* SPDX-License-Identifier: BSD-3-Clause */
/* table.c -- locks by name, leases by id, waiter queues, validity math. */
#include "table.h"

#include <stdlib.h>
#include <string.h>

#include "dlock.h"

#define SLOT_BITS 32

/* ---- pools ----
 *
 * Leases and locks live as long as they are held, among the short-lived
 * allocations of every request (waiters, commands, replies). From malloc's
 * heap they would be strewn among those, and the holes the short-lived ones
 * leave behind would stay as long as the leases do. So the table takes them
 * from chunks of its own, one pool per size (in steps of TABLE_POOL_GRAIN
 * bytes, no header per object): a returned object goes on its pool's free
 * list for the next of its size. A chunk is twice the size of the pool's
 * last, from 4 KiB up to 256 KiB; a pool that has handed out nothing keeps
 * only its first. Under AddressSanitizer every object is a malloc of its
 * own, so that a use after free is still caught. */

#if defined(__SANITIZE_ADDRESS__)
#define POOLS_BYPASSED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOLS_BYPASSED 1
#endif
#endif
#ifndef POOLS_BYPASSED
#define POOLS_BYPASSED 0
#endif

#define POOL_CHUNK_FIRST 4096
#define POOL_CHUNK_MAX   (256 * 1024)
#define POOL_CHUNK_HEAD  16 /* the link to the next chunk, objects stay 16-aligned */

size_t table_pool_size(size_t n)
{
    return (n + TABLE_POOL_GRAIN - 1) / TABLE_POOL_GRAIN * TABLE_POOL_GRAIN;
}

static void *pool_get(struct table *t, size_t n)
{
    n = table_pool_size(n);
    if (POOLS_BYPASSED || n > TABLE_POOL_MAX)
        return calloc(1, n);
    struct table_pool *p = &t->pools[n / TABLE_POOL_GRAIN];
    void *o = p->free;
    if (o) {
        memcpy(&p->free, o, sizeof p->free);
    } else {
        if (p->cur == NULL || (size_t)(p->end - p->cur) < n) {
            size_t size = (size_t)POOL_CHUNK_FIRST << (p->nchunks < 6 ? p->nchunks : 6);
            char *c = malloc(size);
            if (!c)
                return NULL;
            memcpy(c, &p->chunks, sizeof p->chunks);
            p->chunks = c;
            p->nchunks++;
            p->cur = c + POOL_CHUNK_HEAD;
            p->end = c + size;
        }
        o = p->cur;
        p->cur += n;
    }
    p->used++;
    return memset(o, 0, n);
}

/* Frees the pool's chunks, all of them or all but the first. */
static void pool_drop(struct table_pool *p, bool keep_first)
{
    char *c = p->chunks, *first = NULL;
    while (c) {
        char *next;
        memcpy(&next, c, sizeof next);
        if (keep_first && !next)
            first = c;
        else
            free(c);
        c = next;
    }
    memset(p, 0, sizeof *p);
    if (first) {
        p->chunks = first;
        p->nchunks = 1;
        p->cur = first + POOL_CHUNK_HEAD;
        p->end = first + POOL_CHUNK_FIRST;
    }
}

static void pool_put(struct table *t, void *o, size_t n)
{
    n = table_pool_size(n);
    if (POOLS_BYPASSED || n > TABLE_POOL_MAX) {
        free(o);
        return;
    }
    struct table_pool *p = &t->pools[n / TABLE_POOL_GRAIN];
    if (--p->used == 0) {
        pool_drop(p, true); /* all of its objects are free */
        return;
    }
    memcpy(o, &p->free, sizeof p->free);
    p->free = o;
}

void token_hex(const uint8_t raw[TOKEN_BYTES], char out[TOKEN_HEX + 1])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < TOKEN_BYTES; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[TOKEN_HEX] = '\0';
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int token_raw(const char *hex, uint8_t raw[TOKEN_BYTES])
{
    for (int i = 0; i < TOKEN_BYTES; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hi < 0 ? -1 : hex_digit(hex[2 * i + 1]);
        if (lo < 0)
            return -1;
        raw[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int table_init(struct table *t, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->seed = seed;
    t->gen_base = (uint32_t)(seed >> 34); /* below 2^30: room for 3 * 2^30 more uses */
    t->nbuckets = 1024;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    t->pools = calloc(TABLE_POOL_MAX / TABLE_POOL_GRAIN + 1, sizeof *t->pools);
    if (!t->buckets || !t->pools) {
        free(t->buckets);
        free(t->pools);
        return -1;
    }
    return 0;
}

void table_free(struct table *t)
{
    for (uint32_t i = 0; i < t->nslots; i++)
        if (t->slots[i])
            pool_put(t, t->slots[i], sizeof(struct lease));
    for (size_t b = 0; b < t->nbuckets; b++) {
        struct lock *l = t->buckets[b];
        while (l) {
            struct lock *next = l->hnext;
            for (struct waiter *w = l->qhead, *wn; w; w = wn) {
                wn = w->qnext;
                free(w);
            }
            pool_put(t, l, lock_alloc_size(l->name_len));
            l = next;
        }
    }
    for (size_t i = 0; i <= TABLE_POOL_MAX / TABLE_POOL_GRAIN; i++)
        pool_drop(&t->pools[i], false);
    free(t->pools);
    free(t->buckets);
    free(t->slots);
    free(t->gens);
    free(t->free_slots);
    memset(t, 0, sizeof *t);
}

static void rehash(struct table *t)
{
    size_t n = t->nbuckets * 2;
    if (n > (size_t)UINT32_MAX)
        return; /* a lock's hash has 32 bits */
    struct lock **b = calloc(n, sizeof *b);
    if (!b)
        return; /* keep the longer chains; lookups stay correct */
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (struct lock *l = t->buckets[i], *next; l; l = next) {
            next = l->hnext;
            l->hnext = b[l->hash & (n - 1)];
            b[l->hash & (n - 1)] = l;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

struct lock *table_lock_find(const struct table *t, const char *name, size_t len)
{
    uint32_t h = (uint32_t)name_hash(t->seed, name, len);
    for (struct lock *l = t->buckets[h & (t->nbuckets - 1)]; l; l = l->hnext)
        if (l->hash == h && l->name_len == len && memcmp(l->name, name, len) == 0)
            return l;
    return NULL;
}

size_t lock_alloc_size(size_t len)
{
    /* The name starts where the fixed fields end, in the tail padding of the
     * struct; a short name takes no more than the struct alone. */
    size_t n = offsetof(struct lock, name) + len + 1;
    return n > sizeof(struct lock) ? n : sizeof(struct lock);
}

struct lock *table_lock_get(struct table *t, const char *name, size_t len)
{
    struct lock *l = table_lock_find(t, name, len);
    if (l)
        return l;
    l = pool_get(t, lock_alloc_size(len));
    if (!l)
        return NULL;
    l->hash = (uint32_t)name_hash(t->seed, name, len);
    l->name_len = (uint16_t)len;
    memcpy(l->name, name, len);
    tnode_init(&l->retry, TK_LOCK);
    LIST_INIT(&l->holders);
    if (t->nlocks >= t->nbuckets)
        rehash(t);
    struct lock **b = &t->buckets[l->hash & (t->nbuckets - 1)];
    l->hnext = *b;
    *b = l;
    t->nlocks++;
    return l;
}

bool table_lock_release_if_idle(struct table *t, struct lock *l)
{
    if (l->phase != LOCK_IDLE || l->nholders || l->qhead || l->kept_listed ||
        tnode_queued(&l->retry))
        return false;
    struct lock **p = &t->buckets[l->hash & (t->nbuckets - 1)];
    while (*p != l)
        p = &(*p)->hnext;
    *p = l->hnext;
    t->nlocks--;
    pool_put(t, l, lock_alloc_size(l->name_len));
    return true;
}

static uint64_t bits_reversed(uint64_t v)
{
    v = ((v >> 1) & 0x5555555555555555ull) | ((v & 0x5555555555555555ull) << 1);
    v = ((v >> 2) & 0x3333333333333333ull) | ((v & 0x3333333333333333ull) << 2);
    v = ((v >> 4) & 0x0f0f0f0f0f0f0f0full) | ((v & 0x0f0f0f0f0f0f0f0full) << 4);
    return __builtin_bswap64(v);
}

/* Buckets are visited by their index with its bits reversed, counting up.
 * When the table doubles, bucket b splits into b and b + n, both of which
 * come right where b came: the buckets before the cursor stay before it. */
bool table_walk(const struct table *t, uint64_t *cursor, size_t budget,
                bool (*fn)(void *arg, const struct lock *l), void *arg)
{
    uint64_t v = *cursor, mask = t->nbuckets - 1;
    size_t spent = 0;
    bool more = true;
    do {
        for (const struct lock *l = t->buckets[v & mask]; l; l = l->hnext) {
            spent++;
            if (!fn(arg, l))
                more = false;
        }
        spent++;
        /* The next index in reverse-bit order over the mask's bits. */
        v |= ~mask;
        v = bits_reversed(bits_reversed(v) + 1);
    } while (v != 0 && more && spent < budget);
    *cursor = v;
    return v != 0;
}

/* One more slot index, never used: nslots - 1. */
static int slot_grow(struct table *t)
{
    if (t->nslots == t->slot_cap) {
        uint32_t cap = t->slot_cap ? t->slot_cap * 2 : 256;
        struct lease **s = realloc(t->slots, cap * sizeof *s);
        if (!s)
            return -1;
        t->slots = s;
        uint32_t *g = realloc(t->gens, cap * sizeof *g);
        if (!g)
            return -1;
        t->gens = g;
        uint32_t *f = realloc(t->free_slots, cap * sizeof *f);
        if (!f)
            return -1;
        t->free_slots = f;
        t->slot_cap = cap;
    }
    t->gens[t->nslots] = t->gen_base;
    t->slots[t->nslots] = NULL;
    t->nslots++;
    return 0;
}

static int slot_alloc(struct table *t, uint32_t *idx)
{
    if (t->nfree) {
        *idx = t->free_slots[--t->nfree];
        return 0;
    }
    if (slot_grow(t) != 0)
        return -1;
    *idx = t->nslots - 1;
    return 0;
}

/* The most slot indexes a predecessor's lease id may name: far beyond the
 * leases an agent can hold, and a bound on what a bad id costs. */
#define ADOPT_IDX_MAX (1u << 26)

/* Takes slot index idx, free or never used yet (those below it that were
 * never used join the free list). */
static int slot_take(struct table *t, uint32_t idx)
{
    if (idx >= ADOPT_IDX_MAX)
        return -1;
    while (t->nslots <= idx) {
        if (slot_grow(t) != 0)
            return -1;
        if (t->nslots - 1 == idx)
            return 0;
        t->free_slots[t->nfree++] = t->nslots - 1;
    }
    if (t->slots[idx])
        return -1;
    for (uint32_t i = 0; i < t->nfree; i++) {
        if (t->free_slots[i] == idx) {
            t->free_slots[i] = t->free_slots[--t->nfree];
            return 0;
        }
    }
    return -1;
}

static struct lease *lease_place(struct table *t, struct lease *le, struct lock *l,
                                 struct core_client *owner, uint32_t idx, uint32_t gen)
{
    t->gens[idx] = gen;
    t->slots[idx] = le;
    le->id = ((uint64_t)gen << SLOT_BITS) | idx;
    le->lock = l;
    le->owner = owner;
    tnode_init(&le->timer, TK_LEASE);
    LIST_INSERT_HEAD(&l->holders, le, hlink);
    l->nholders++;
    t->nleases++;
    return le;
}

struct lease *table_lease_new(struct table *t, struct lock *l, struct core_client *owner)
{
    struct lease *le = pool_get(t, sizeof *le);
    uint32_t idx;
    if (!le || slot_alloc(t, &idx) != 0) {
        if (le)
            pool_put(t, le, sizeof *le);
        return NULL;
    }
    /* A fresh generation per use of the slot: a stale id never matches. */
    return lease_place(t, le, l, owner, idx, t->gens[idx] + 1);
}

struct lease *table_lease_new_id(struct table *t, struct lock *l, struct core_client *owner,
                                 uint64_t id)
{
    uint32_t idx = (uint32_t)id, gen = (uint32_t)(id >> SLOT_BITS);
    struct lease *le = pool_get(t, sizeof *le);
    if (!le || gen == 0 || slot_take(t, idx) != 0) {
        if (le)
            pool_put(t, le, sizeof *le);
        return NULL;
    }
    if (t->gens[idx] >= gen && t->gens[idx] != t->gen_base) {
        /* The slot had this id or a later one here: an id is never reused.
         * (A slot this table never used stands at gen_base, which a
         * predecessor's ids know nothing of.) */
        t->free_slots[t->nfree++] = idx;
        pool_put(t, le, sizeof *le);
        return NULL;
    }
    return lease_place(t, le, l, owner, idx, gen);
}

struct lease *table_lease_find(const struct table *t, uint64_t id)
{
    uint32_t idx = (uint32_t)id;
    if (idx >= t->nslots || !t->slots[idx] || t->slots[idx]->id != id)
        return NULL;
    return t->slots[idx];
}

void table_lease_free(struct table *t, struct lease *le)
{
    uint32_t idx = (uint32_t)le->id;
    t->slots[idx] = NULL;
    t->free_slots[t->nfree++] = idx;
    if (le->lock) {
        LIST_REMOVE(le, hlink);
        le->lock->nholders--;
    }
    t->nleases--;
    pool_put(t, le, sizeof *le);
}

void table_waiter_enqueue(struct lock *l, struct waiter *w)
{
    l->nwaiters++;
    if (w->ask.kind != LOCK_EXCLUSIVE) {
        l->ncounted++;
        l->counted = w->ask;
    }
    w->lock = l;
    w->qnext = NULL;
    w->qprev = l->qtail;
    if (l->qtail)
        l->qtail->qnext = w;
    else
        l->qhead = w;
    l->qtail = w;
}

void table_waiter_dequeue(struct waiter *w)
{
    struct lock *l = w->lock;
    l->nwaiters--;
    if (w->ask.kind != LOCK_EXCLUSIVE)
        l->ncounted--;
    if (w->qprev)
        w->qprev->qnext = w->qnext;
    else
        l->qhead = w->qnext;
    if (w->qnext)
        w->qnext->qprev = w->qprev;
    else
        l->qtail = w->qprev;
    if (l->acq_for == w)
        l->acq_for = NULL;
    w->qnext = w->qprev = NULL;
}

uint64_t lease_drift_ns(uint32_t ttl_ms)
{
    return (uint64_t)ttl_ms * NS_PER_MS / 100 + 2 * NS_PER_MS;
}

uint64_t lease_deadline(uint64_t t_send, uint32_t ttl_ms)
{
    return t_send + (uint64_t)ttl_ms * NS_PER_MS - lease_drift_ns(ttl_ms);
}

uint64_t lease_next_renew(uint64_t t_send, uint32_t ttl_ms, double fraction)
{
    uint64_t period = (uint64_t)((double)ttl_ms * fraction * (double)NS_PER_MS);
    uint64_t quantum = 10 * NS_PER_MS;
    if (quantum > period / 4)
        quantum = period / 4 ? period / 4 : 1;
    uint64_t due = t_send + period;
    /* Whatever the fraction, renew well before the lease runs out. */
    uint64_t limit = lease_deadline(t_send, ttl_ms);
    if (due + quantum >= limit)
        due = t_send + (limit - t_send) / 2;
    return due - due % quantum;
}

uint64_t lease_renew_retry(uint64_t now, uint64_t deadline, uint32_t ttl_ms)
{
    uint64_t step = (uint64_t)ttl_ms * NS_PER_MS / 10;
    if (step > 200 * NS_PER_MS)
        step = 200 * NS_PER_MS;
    if (step < 5 * NS_PER_MS)
        step = 5 * NS_PER_MS;
    return now + step < deadline ? now + step : deadline;
}

uint64_t waiter_retry_delay(uint32_t fallback_ms, long long pttl_ms, double r)
{
    uint64_t base = (uint64_t)fallback_ms * NS_PER_MS;
    uint64_t delay = base + (uint64_t)((double)base * 0.5 * r);
    if (pttl_ms > 0 && (uint64_t)pttl_ms < delay / NS_PER_MS) {
        /* The key expires by itself sooner: try right after. */
        delay = ((uint64_t)pttl_ms + 1) * NS_PER_MS;
    }
    return delay;
}

int lock_name_check(const char *name, size_t len, uint32_t max_len)
{
    if (len == 0)
        return DLOCK_EBADNAME;
    if (len > max_len)
        return DLOCK_ENAMETOOLONG;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= 0x20 || ch == 0x7f || ch == '{' || ch == '}')
            return DLOCK_EBADNAME;
    }
    return 0;
}
