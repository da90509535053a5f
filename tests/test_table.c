/* SPDX-License-Identifier: BSD-3-Clause */
/* test_table.c -- unit tests of the lease table and validity arithmetic in
 * agent/core/table.c. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "table.h"
#include "theap.h"

#define MS NS_PER_MS

static struct lock *get(struct table *t, const char *name)
{
    struct lock *l = table_lock_get(t, name, strlen(name));
    cr_assert_not_null(l, "table_lock_get(%s) failed", name);
    return l;
}

static struct lock *find(struct table *t, const char *name)
{
    return table_lock_find(t, name, strlen(name));
}

/* ---- memory per lease ---- */

/* The agent holds one struct lease and one struct lock (with its name) per
 * held name: at 100,000 leases these are most of its memory, with a budget
 * of 512 bytes per lease in all (bench/README.md, "Many leases held").
 * They come from the table's pools, by size in steps of 8 bytes and with
 * no header: a lease of at most 184 bytes takes 184, and a lock whose name
 * starts by byte 170 takes 192 with a name of up to 21 bytes (the bench's
 * names). A field that pads or grows them passes these bounds: reorder, or
 * shrink another. */
_Static_assert(sizeof(struct lease) <= 184, "struct lease outgrew its budget of 184 bytes");
_Static_assert(offsetof(struct lock, name) <= 170,
               "struct lock's fixed fields outgrew their budget of 170 bytes");
_Static_assert(sizeof(struct waiter) <= 112, "struct waiter outgrew its budget of 112 bytes");

Test(table, lock_takes_its_name_in_its_tail)
{
    /* The name starts where the fixed fields end (in the tail padding of
     * the struct, if it has any); the pools round the size up to 8. */
    size_t fixed = offsetof(struct lock, name);
    cr_assert_eq(lock_alloc_size(0),
                 fixed + 1 > sizeof(struct lock) ? fixed + 1 : sizeof(struct lock));
    cr_assert_eq(lock_alloc_size(300), fixed + 301);
    cr_assert_leq(table_pool_size(lock_alloc_size(21)), 192,
                  "a lock with a 21-byte name takes %zu bytes",
                  table_pool_size(lock_alloc_size(21)));
    cr_assert_eq(table_pool_size(sizeof(struct lease)) % TABLE_POOL_GRAIN, 0);
    struct table t;
    cr_assert_eq(table_init(&t, 42), 0);
    char name[400];
    for (size_t len = 1; len < sizeof name; len += 7) {
        memset(name, 'a' + (int)(len % 26), len);
        name[len] = '\0';
        struct lock *l = get(&t, name);
        cr_assert_geq(table_pool_size(lock_alloc_size(len)), offsetof(struct lock, name) + len + 1);
        cr_assert_eq(l->name_len, len);
        cr_assert_str_eq(l->name, name);
        cr_assert_eq(find(&t, name), l);
    }
    table_free(&t);
}

/* Under AddressSanitizer the pools hand each object to malloc. */
#if defined(__SANITIZE_ADDRESS__)
#define POOLED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOLED 0
#endif
#endif
#ifndef POOLED
#define POOLED 1
#endif

Test(table, pools_reuse_what_is_freed_and_keep_sizes_apart)
{
    struct table t;
    cr_assert_eq(table_init(&t, 42), 0);
    struct lock *a = get(&t, "pool-a"), *b = get(&t, "pool-b");
    struct lease *la = table_lease_new(&t, a, NULL), *lb = table_lease_new(&t, b, NULL);
    cr_assert(la && lb);
    /* A fresh object is zeroed, whatever its bytes held before. */
    memset(la->token, 0xab, sizeof la->token);
    la->renewals = 7;
    table_lease_free(&t, la);
    struct lease *lc = table_lease_new(&t, a, NULL);
    cr_assert_not_null(lc);
    if (POOLED)
        cr_assert_eq(lc, la, "the freed lease's bytes serve the next one");
    cr_assert_eq(lc->renewals, 0);
    for (size_t i = 0; i < sizeof lc->token; i++)
        cr_assert_eq(lc->token[i], 0);
    cr_assert_eq(lc->lock, a);
    /* A lock of another size comes from another pool: no overlap. */
    char name[100];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    struct lock *big = get(&t, name);
    cr_assert_neq(table_pool_size(lock_alloc_size(strlen(name))),
                  table_pool_size(lock_alloc_size(6)));
    cr_assert_str_eq(big->name, name);
    cr_assert_str_eq(a->name, "pool-a");
    cr_assert_str_eq(b->name, "pool-b");
    /* Many at once, through several chunks, all distinct and intact. */
    enum { N = 5000 };
    static struct lease *many[N];
    for (int i = 0; i < N; i++) {
        many[i] = table_lease_new(&t, b, NULL);
        cr_assert_not_null(many[i]);
        many[i]->renewals = (uint32_t)i;
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(many[i]->renewals, (uint32_t)i);
        cr_assert_eq(table_lease_find(&t, many[i]->id), many[i]);
    }
    for (int i = 0; i < N; i += 2)
        table_lease_free(&t, many[i]);
    for (int i = 1; i < N; i += 2)
        cr_assert_eq(many[i]->renewals, (uint32_t)i);
    table_free(&t); /* frees the rest (LeakSanitizer checks) */
}

Test(table, lock_flags_are_independent)
{
    /* The flags share bytes as bit-fields: setting one leaves the rest. */
    struct table t;
    cr_assert_eq(table_init(&t, 42), 0);
    struct lock *l = get(&t, "flags");
    l->phase = LOCK_KEPT;
    l->forced = true;
    l->kept_listed = true;
    cr_assert_eq(l->phase, LOCK_KEPT);
    cr_assert(l->forced && l->kept_listed);
    cr_assert(!l->notice_missed && !l->watched && !l->joined && !l->others_listen &&
              !l->yield_next);
    l->forced = false;
    l->kept_listed = false;
    l->phase = LOCK_IDLE;
    cr_assert(table_lock_release_if_idle(&t, l));
    table_free(&t);
}

/* ---- locks ---- */

Test(table, init_is_empty)
{
    struct table t;
    cr_assert_eq(table_init(&t, 1), 0);
    cr_assert_eq(t.nlocks, 0);
    cr_assert_eq(t.nleases, 0);
    cr_assert_null(find(&t, "x"));
    cr_assert_null(table_lease_find(&t, 0));
    cr_assert_null(table_lease_find(&t, 1));
    cr_assert_null(table_lease_find(&t, UINT64_MAX));
    table_free(&t);
}

Test(table, get_creates_once_and_find_returns_it)
{
    struct table t;
    cr_assert_eq(table_init(&t, 42), 0);
    cr_assert_null(find(&t, "alpha"));
    struct lock *l = get(&t, "alpha");
    cr_assert_eq(t.nlocks, 1);
    cr_assert_str_eq(l->name, "alpha");
    cr_assert_eq(l->name_len, 5);
    cr_assert_eq(l->nholders, 0u);
    cr_assert_null(l->qhead);
    cr_assert_null(l->qtail);
    cr_assert_null(l->acq_for);
    cr_assert_eq(l->phase, LOCK_IDLE);
    cr_assert_not(tnode_queued(&l->retry));
    cr_assert_eq(l->retry.kind, TK_LOCK);

    cr_assert_eq(get(&t, "alpha"), l, "second get created a new lock");
    cr_assert_eq(t.nlocks, 1);
    cr_assert_eq(find(&t, "alpha"), l);
    table_free(&t);
}

Test(table, names_are_compared_by_length_and_bytes)
{
    struct table t;
    cr_assert_eq(table_init(&t, 7), 0);
    struct lock *a = get(&t, "lock1");
    struct lock *b = get(&t, "lock10");
    struct lock *c = get(&t, "Lock1");
    cr_assert_neq(a, b);
    cr_assert_neq(a, c);
    cr_assert_eq(t.nlocks, 3);
    /* A prefix of a known name, given by length, is a different name. */
    cr_assert_null(table_lock_find(&t, "lock10", 4));
    cr_assert_eq(table_lock_find(&t, "lock10", 5), a);
    cr_assert_eq(table_lock_find(&t, "lock10", 6), b);
    /* Names need not be NUL-terminated in the caller's buffer. */
    char buf[8] = {'L', 'o', 'c', 'k', '1', 'Z', 'Z', 'Z'};
    cr_assert_eq(table_lock_find(&t, buf, 5), c);
    cr_assert_eq(c->name[5], '\0');
    table_free(&t);
}

/* Many names: the table rehashes past its initial 1024 buckets, and every
 * lock is still found at the same address afterwards. */
static void many_names(uint64_t seed)
{
    enum { N = 5000 };
    struct table t;
    cr_assert_eq(table_init(&t, seed), 0);
    size_t initial = t.nbuckets;
    cr_assert_eq(initial, 1024);
    struct lock **locks = calloc(N, sizeof *locks);
    cr_assert_not_null(locks);
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "job/%d", i);
        locks[i] = get(&t, name);
        cr_assert_eq(t.nlocks, (size_t)i + 1);
    }
    cr_assert_gt(t.nbuckets, initial, "no rehash after %d locks", N);
    cr_assert_geq(t.nbuckets, N / 2);
    cr_assert_eq(t.nbuckets & (t.nbuckets - 1), 0, "bucket count %zu not a power of two",
                 t.nbuckets);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "job/%d", i);
        cr_assert_eq(find(&t, name), locks[i], "%s lost after rehash", name);
        cr_assert_eq(get(&t, name), locks[i]);
        cr_assert_str_eq(locks[i]->name, name);
    }
    cr_assert_eq(t.nlocks, N);
    for (int i = N; i < N + 100; i++) {
        snprintf(name, sizeof name, "job/%d", i);
        cr_assert_null(find(&t, name), "%s found but never created", name);
    }

    /* Release every other lock; the rest stay findable (chain unlinking). */
    for (int i = 0; i < N; i += 2)
        cr_assert(table_lock_release_if_idle(&t, locks[i]));
    cr_assert_eq(t.nlocks, N / 2);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "job/%d", i);
        if (i % 2)
            cr_assert_eq(find(&t, name), locks[i]);
        else
            cr_assert_null(find(&t, name), "%s found after release", name);
    }
    for (int i = 1; i < N; i += 2)
        cr_assert(table_lock_release_if_idle(&t, locks[i]));
    cr_assert_eq(t.nlocks, 0);
    for (size_t b = 0; b < t.nbuckets; b++)
        cr_assert_null(t.buckets[b]);
    free(locks);
    table_free(&t);
}

Test(table, many_names_survive_rehash)
{
    many_names(0);
    many_names(0x0123456789abcdefull);
}

Test(table, idle_lock_release_frees_and_forgets)
{
    struct table t;
    cr_assert_eq(table_init(&t, 3), 0);
    struct lock *l = get(&t, "gone");
    get(&t, "stays");
    cr_assert(table_lock_release_if_idle(&t, l));
    cr_assert_eq(t.nlocks, 1);
    cr_assert_null(find(&t, "gone"));
    cr_assert_not_null(find(&t, "stays"));
    /* Getting it again makes a fresh, idle lock. */
    l = get(&t, "gone");
    cr_assert_eq(l->nholders, 0u);
    cr_assert_eq(t.nlocks, 2);
    table_free(&t);
}

Test(table, release_if_idle_refuses_busy_locks)
{
    struct table t;
    cr_assert_eq(table_init(&t, 9), 0);
    struct theap h = {0};
    struct lock *l = get(&t, "busy");

    /* A holder keeps it. */
    struct lease *le = table_lease_new(&t, l, NULL);
    cr_assert_not_null(le);
    cr_assert_not(table_lock_release_if_idle(&t, l));
    cr_assert_eq(find(&t, "busy"), l);
    table_lease_free(&t, le);

    /* A waiter keeps it. */
    struct waiter w = {0};
    tnode_init(&w.timer, TK_WAITER);
    table_waiter_enqueue(l, &w);
    cr_assert_not(table_lock_release_if_idle(&t, l));
    cr_assert_eq(find(&t, "busy"), l);
    table_waiter_dequeue(&w);

    /* An acquire in flight keeps it. */
    l->phase = LOCK_ACQUIRING;
    cr_assert_not(table_lock_release_if_idle(&t, l));
    cr_assert_eq(find(&t, "busy"), l);
    l->phase = LOCK_IDLE;

    /* A queued retry timer keeps it. */
    cr_assert_eq(theap_set(&h, &l->retry, 100), 0);
    cr_assert_not(table_lock_release_if_idle(&t, l));
    cr_assert_eq(find(&t, "busy"), l);
    theap_remove(&h, &l->retry);

    cr_assert_eq(t.nlocks, 1);
    cr_assert(table_lock_release_if_idle(&t, l), "idle lock was not released");
    cr_assert_eq(t.nlocks, 0);
    cr_assert_null(find(&t, "busy"));
    theap_free(&h);
    table_free(&t);
}

/* ---- leases ---- */

Test(table, lease_new_sets_holder_and_is_found)
{
    struct table t;
    cr_assert_eq(table_init(&t, 5), 0);
    struct lock *l = get(&t, "res");
    struct core_client *owner = (struct core_client *)&t; /* any address: never read */
    struct lease *le = table_lease_new(&t, l, owner);
    cr_assert_not_null(le);
    cr_assert_eq(LIST_FIRST(&l->holders), le);
    cr_assert_eq(le->lock, l);
    cr_assert_eq(le->owner, owner);
    cr_assert_eq(le->timer.kind, TK_LEASE);
    cr_assert_not(tnode_queued(&le->timer));
    cr_assert_eq(t.nleases, 1);
    cr_assert_neq(le->id, 0, "lease id 0 would be ambiguous");
    cr_assert_eq(table_lease_find(&t, le->id), le);
    /* Same slot, other generations: not found. */
    cr_assert_null(table_lease_find(&t, le->id + (1ull << 32)));
    cr_assert_null(table_lease_find(&t, le->id - (1ull << 32)));
    cr_assert_null(table_lease_find(&t, (uint32_t)le->id));
    /* Slot out of range. */
    cr_assert_null(table_lease_find(&t, le->id + 1000));
    table_free(&t);
}

Test(table, lease_free_clears_holder_and_id)
{
    struct table t;
    cr_assert_eq(table_init(&t, 5), 0);
    struct lock *l = get(&t, "res");
    struct lease *le = table_lease_new(&t, l, NULL);
    uint64_t id = le->id;
    table_lease_free(&t, le);
    cr_assert_eq(l->nholders, 0u);
    cr_assert_eq(t.nleases, 0);
    cr_assert_null(table_lease_find(&t, id));
    cr_assert(table_lock_release_if_idle(&t, l));
    table_free(&t);
}

Test(table, lease_free_leaves_another_holder_alone)
{
    struct table t;
    cr_assert_eq(table_init(&t, 5), 0);
    struct lock *l = get(&t, "res");
    struct lease *old = table_lease_new(&t, l, NULL);
    struct lease *cur = table_lease_new(&t, l, NULL);
    cr_assert_eq(l->nholders, 2u);
    table_lease_free(&t, old);
    cr_assert_eq(l->nholders, 1u);
    cr_assert_eq(LIST_FIRST(&l->holders), cur, "freeing one holder's lease dropped another");
    cr_assert_eq(table_lease_find(&t, cur->id), cur);
    table_lease_free(&t, cur);
    cr_assert_eq(l->nholders, 0u);
    table_free(&t);
}

Test(table, stale_id_never_finds_reused_slot)
{
    struct table t;
    cr_assert_eq(table_init(&t, 5), 0);
    struct lock *l = get(&t, "res");
    struct lease *a = table_lease_new(&t, l, NULL);
    uint64_t ida = a->id;
    table_lease_free(&t, a);
    struct lease *b = table_lease_new(&t, l, NULL);
    /* The slot was reused (only one was ever allocated)... */
    cr_assert_eq((uint32_t)b->id, (uint32_t)ida, "expected the freed slot to be reused");
    /* ...with a new generation. */
    cr_assert_neq(b->id, ida);
    cr_assert_null(table_lease_find(&t, ida), "stale lease id finds the new lease");
    cr_assert_eq(table_lease_find(&t, b->id), b);
    table_free(&t);
}

/* Simple open-addressing set of ids, to check uniqueness. */
struct idset {
    uint64_t *v;
    size_t cap, n;
};

static bool idset_add(struct idset *s, uint64_t id)
{
    uint64_t key = id + 1; /* 0 marks an empty slot */
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (s->cap - 1);
    while (s->v[i]) {
        if (s->v[i] == key)
            return false;
        i = (i + 1) & (s->cap - 1);
    }
    s->v[i] = key;
    s->n++;
    return true;
}

Test(table, lease_ids_unique_across_churn)
{
    enum { LIVE = 600, ROUNDS = 20000 };
    struct table t;
    cr_assert_eq(table_init(&t, 11), 0);
    struct idset seen = {calloc(1u << 16, sizeof(uint64_t)), 1u << 16, 0};
    cr_assert_not_null(seen.v);
    struct lock *locks[LIVE];
    struct lease *live[LIVE];
    uint64_t dead[LIVE]; /* the last freed id per position, 0 if none */
    char name[32];
    for (int i = 0; i < LIVE; i++) {
        snprintf(name, sizeof name, "l%d", i);
        locks[i] = get(&t, name);
        live[i] = table_lease_new(&t, locks[i], NULL);
        cr_assert_not_null(live[i]);
        cr_assert(idset_add(&seen, live[i]->id), "duplicate lease id %llx",
                  (unsigned long long)live[i]->id);
        dead[i] = 0;
    }
    cr_assert_eq(t.nleases, LIVE);
    uint64_t x = 0x853c49e6748fea9bull;
    for (int r = 0; r < ROUNDS; r++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int i = (int)(x % LIVE);
        dead[i] = live[i]->id;
        table_lease_free(&t, live[i]);
        cr_assert_eq(locks[i]->nholders, 0u);
        cr_assert_null(table_lease_find(&t, dead[i]));
        live[i] = table_lease_new(&t, locks[i], NULL);
        cr_assert_not_null(live[i]);
        cr_assert(idset_add(&seen, live[i]->id), "round %d: lease id %llx issued twice", r,
                  (unsigned long long)live[i]->id);
    }
    cr_assert_eq(t.nleases, LIVE);
    cr_assert_leq(t.nslots, LIVE, "slots leak: %u slots for %d live leases", t.nslots, LIVE);
    for (int i = 0; i < LIVE; i++) {
        cr_assert_eq(table_lease_find(&t, live[i]->id), live[i]);
        cr_assert_eq(LIST_FIRST(&locks[i]->holders), live[i]);
        cr_assert_eq(locks[i]->nholders, 1u);
        if (dead[i])
            cr_assert_null(table_lease_find(&t, dead[i]));
    }
    free(seen.v);
    table_free(&t); /* frees the live leases; ASan checks for leaks */
}

Test(table, table_free_frees_everything)
{
    struct table t;
    cr_assert_eq(table_init(&t, 13), 0);
    char name[32];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "n%d", i);
        struct lock *l = get(&t, name);
        if (i % 2)
            cr_assert_not_null(table_lease_new(&t, l, NULL));
        for (int k = 0; k < i % 4; k++) {
            struct waiter *w = calloc(1, sizeof *w);
            cr_assert_not_null(w);
            tnode_init(&w->timer, TK_WAITER);
            table_waiter_enqueue(l, w);
        }
    }
    table_free(&t);
    cr_assert_null(t.buckets);
    cr_assert_eq(t.nlocks, 0);
    cr_assert_eq(t.nleases, 0);
}

/* ---- waiter queues ---- */

/* Checks the queue of l holds exactly ws[0..n) in this order, both ways. */
static void check_queue(const struct lock *l, struct waiter *const *ws, size_t n)
{
    size_t i = 0;
    const struct waiter *prev = NULL;
    for (const struct waiter *w = l->qhead; w; w = w->qnext, i++) {
        cr_assert_lt(i, n, "queue longer than %zu", n);
        cr_assert_eq(w, ws[i], "queue position %zu holds the wrong waiter", i);
        cr_assert_eq(w->qprev, prev, "qprev wrong at position %zu", i);
        cr_assert_eq(w->lock, l);
        prev = w;
    }
    cr_assert_eq(i, n, "queue has %zu waiters, expected %zu", i, n);
    cr_assert_eq(l->qtail, n ? ws[n - 1] : NULL);
    if (n == 0)
        cr_assert_null(l->qhead);
}

Test(table, waiters_queue_fifo_with_dequeue_anywhere)
{
    struct table t;
    cr_assert_eq(table_init(&t, 1), 0);
    struct lock *l = get(&t, "q");
    struct waiter w[6];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 6; i++) {
        w[i].req_id = (uint32_t)i;
        tnode_init(&w[i].timer, TK_WAITER);
    }
    check_queue(l, NULL, 0);
    for (int i = 0; i < 5; i++)
        table_waiter_enqueue(l, &w[i]);
    check_queue(l, (struct waiter *[]){&w[0], &w[1], &w[2], &w[3], &w[4]}, 5);

    table_waiter_dequeue(&w[2]); /* middle */
    cr_assert_null(w[2].qnext);
    cr_assert_null(w[2].qprev);
    check_queue(l, (struct waiter *[]){&w[0], &w[1], &w[3], &w[4]}, 4);

    table_waiter_dequeue(&w[0]); /* head */
    check_queue(l, (struct waiter *[]){&w[1], &w[3], &w[4]}, 3);

    table_waiter_dequeue(&w[4]); /* tail */
    check_queue(l, (struct waiter *[]){&w[1], &w[3]}, 2);

    table_waiter_enqueue(l, &w[5]); /* new arrivals go to the back */
    table_waiter_enqueue(l, &w[2]); /* a dequeued waiter can queue again */
    check_queue(l, (struct waiter *[]){&w[1], &w[3], &w[5], &w[2]}, 4);

    table_waiter_dequeue(&w[1]);
    table_waiter_dequeue(&w[3]);
    table_waiter_dequeue(&w[5]);
    check_queue(l, (struct waiter *[]){&w[2]}, 1);
    table_waiter_dequeue(&w[2]); /* the only one */
    check_queue(l, NULL, 0);
    cr_assert(table_lock_release_if_idle(&t, l));
    table_free(&t);
}

Test(table, waiters_of_different_locks_are_separate)
{
    struct table t;
    cr_assert_eq(table_init(&t, 1), 0);
    struct lock *a = get(&t, "a"), *b = get(&t, "b");
    struct waiter w[4];
    memset(w, 0, sizeof w);
    table_waiter_enqueue(a, &w[0]);
    table_waiter_enqueue(b, &w[1]);
    table_waiter_enqueue(a, &w[2]);
    table_waiter_enqueue(b, &w[3]);
    check_queue(a, (struct waiter *[]){&w[0], &w[2]}, 2);
    check_queue(b, (struct waiter *[]){&w[1], &w[3]}, 2);
    table_waiter_dequeue(&w[1]);
    check_queue(a, (struct waiter *[]){&w[0], &w[2]}, 2);
    check_queue(b, (struct waiter *[]){&w[3]}, 1);
    table_waiter_dequeue(&w[0]);
    table_waiter_dequeue(&w[2]);
    table_waiter_dequeue(&w[3]);
    table_free(&t);
}

Test(table, dequeue_of_acq_for_waiter_clears_acq_for)
{
    struct table t;
    cr_assert_eq(table_init(&t, 1), 0);
    struct lock *l = get(&t, "q");
    struct waiter w[3];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 3; i++)
        table_waiter_enqueue(l, &w[i]);

    l->acq_for = &w[0];
    table_waiter_dequeue(&w[1]); /* someone else: acq_for stays */
    cr_assert_eq(l->acq_for, &w[0]);
    table_waiter_dequeue(&w[0]);
    cr_assert_null(l->acq_for);

    l->acq_for = &w[2]; /* the tail, and the last one */
    table_waiter_dequeue(&w[2]);
    cr_assert_null(l->acq_for);
    check_queue(l, NULL, 0);
    table_free(&t);
}

/* ---- the walk over the locks, spread over many calls ---- */

#define WALK_NAMES 6000

struct walk_seen {
    int count[WALK_NAMES];
    size_t visited; /* in the current call */
    size_t stop_at; /* fn answers false at this visit of a call (0: never) */
};

static bool walk_count(void *arg, const struct lock *l)
{
    struct walk_seen *s = arg;
    int i = atoi(l->name + 1);
    cr_assert(i >= 0 && i < WALK_NAMES, "unexpected lock %s", l->name);
    s->count[i]++;
    return ++s->visited != s->stop_at;
}

static void walk_name(char *buf, size_t len, int i)
{
    snprintf(buf, len, "w%05d", i);
}

static size_t longest_chain(const struct table *t)
{
    size_t most = 0;
    for (size_t b = 0; b < t->nbuckets; b++) {
        size_t n = 0;
        for (const struct lock *l = t->buckets[b]; l; l = l->hnext)
            n++;
        most = n > most ? n : most;
    }
    return most;
}

/* Between the calls of a walk, names come (the table doubles twice) and go:
 * each name known throughout is visited exactly once, any other at most
 * once; no call walks much past its budget. */
Test(table, walk_resumes_across_growth_and_churn)
{
    struct table t;
    cr_assert_eq(table_init(&t, 99), 0);
    static struct walk_seen s;
    memset(&s, 0, sizeof s);
    char name[16];
    enum { FIRST = 1500 };
    for (int i = 0; i < FIRST; i++) {
        walk_name(name, sizeof name, i);
        get(&t, name);
    }
    size_t nbuckets = t.nbuckets;
    uint64_t cursor = 0;
    int added = FIRST, removed = 0, calls = 0;
    for (bool more = true; more; calls++) {
        s.visited = 0;
        size_t chain = longest_chain(&t);
        more = table_walk(&t, &cursor, 16, walk_count, &s);
        cr_assert_leq(s.visited, 16 + chain, "call %d visited %zu locks", calls, s.visited);
        for (int k = 0; k < 12 && added < WALK_NAMES; k++) {
            walk_name(name, sizeof name, added++);
            get(&t, name);
        }
        if (calls % 2 == 0 && removed < FIRST / 3) {
            walk_name(name, sizeof name, removed++);
            cr_assert(table_lock_release_if_idle(&t, find(&t, name)));
        }
    }
    cr_assert_eq(cursor, 0);
    cr_assert_geq(t.nbuckets, 4 * nbuckets, "the table grew from %zu to %zu buckets only", nbuckets,
                  t.nbuckets);
    for (int i = 0; i < WALK_NAMES; i++) {
        if (i >= removed && i < FIRST)
            cr_assert_eq(s.count[i], 1, "w%05d visited %d times", i, s.count[i]);
        else
            cr_assert_leq(s.count[i], 1, "w%05d visited %d times", i, s.count[i]);
    }
    table_free(&t);
}

/* A walk of an empty table visits its buckets and ends; fn's false ends a
 * call after the current bucket, and the next call goes on from there. */
Test(table, walk_stops_when_asked_and_goes_on)
{
    struct table t;
    cr_assert_eq(table_init(&t, 5), 0);
    static struct walk_seen s;
    memset(&s, 0, sizeof s);
    uint64_t cursor = 0;
    int calls = 0;
    while (table_walk(&t, &cursor, 100, walk_count, &s))
        calls++;
    cr_assert_eq(calls, (int)(t.nbuckets / 100), "%d calls for %zu buckets", calls, t.nbuckets);
    char name[16];
    for (int i = 0; i < 500; i++) {
        walk_name(name, sizeof name, i);
        get(&t, name);
    }
    cursor = 0;
    calls = 0;
    for (bool more = true; more; calls++) {
        s.visited = 0;
        s.stop_at = 1; /* stop after the first lock's bucket */
        more = table_walk(&t, &cursor, SIZE_MAX, walk_count, &s);
        cr_assert_leq(s.visited, longest_chain(&t));
    }
    cr_assert_geq(calls, 500 / (int)longest_chain(&t));
    for (int i = 0; i < 500; i++)
        cr_assert_eq(s.count[i], 1, "w%05d visited %d times", i, s.count[i]);
    table_free(&t);
}

/* The queue length is kept on the lock. */
Test(table, waiters_are_counted)
{
    struct table t;
    cr_assert_eq(table_init(&t, 8), 0);
    struct lock *l = get(&t, "counted");
    struct waiter w[3] = {0};
    for (int i = 0; i < 3; i++)
        table_waiter_enqueue(l, &w[i]);
    cr_assert_eq(l->nwaiters, 3);
    table_waiter_dequeue(&w[1]);
    cr_assert_eq(l->nwaiters, 2);
    table_waiter_dequeue(&w[0]);
    table_waiter_dequeue(&w[2]);
    cr_assert_eq(l->nwaiters, 0);
    table_free(&t);
}

/* ---- validity arithmetic ---- */

Test(validity, drift_is_ttl_over_100_plus_2ms)
{
    cr_assert_eq(lease_drift_ns(30000), 300 * MS + 2 * MS);
    cr_assert_eq(lease_drift_ns(10), 100000 + 2 * MS);
    cr_assert_eq(lease_drift_ns(150), 1500000 + 2 * MS);
    cr_assert_eq(lease_drift_ns(33), 330000 + 2 * MS);
    cr_assert_eq(lease_drift_ns(0), 2 * MS);
    cr_assert_eq(lease_drift_ns(UINT32_MAX), (uint64_t)UINT32_MAX * 10000 + 2 * MS);
}

Test(validity, deadline_is_send_plus_ttl_minus_drift_exactly)
{
    const uint64_t sends[] = {0, 1, 123456789, 5000000000000ull, (uint64_t)1 << 62};
    const uint32_t ttls[] = {10, 30, 33, 100, 150, 999, 30000, 86400000, UINT32_MAX};
    for (size_t i = 0; i < sizeof sends / sizeof sends[0]; i++) {
        for (size_t j = 0; j < sizeof ttls / sizeof ttls[0]; j++) {
            uint64_t s = sends[i];
            uint64_t ttl = ttls[j];
            /* ttl/100 in nanoseconds: ttl ms / 100 = ttl * 10000 ns */
            uint64_t want = s + ttl * MS - (ttl * 10000 + 2 * MS);
            cr_assert_eq(lease_deadline(s, ttls[j]), want, "t_send %llu ttl %llu: %llu != %llu",
                         (unsigned long long)s, (unsigned long long)ttl,
                         (unsigned long long)lease_deadline(s, ttls[j]), (unsigned long long)want);
            cr_assert_gt(lease_deadline(s, ttls[j]), s);
        }
    }
    /* The defaults, spelled out: 30 s TTL sent at 1 s ends at 30.698 s. */
    cr_assert_eq(lease_deadline(1000 * MS, 30000), 30698 * MS);
}

static const double fractions[] = {0.05, 0.1, 0.25, 1.0 / 3.0, 0.3333, 0.5, 0.75, 0.8};
static const uint32_t renew_ttls[] = {10,   11,    30,    31,    97,       100,     333,
                                      1000, 10007, 30000, 65536, 86400000, 1u << 31};

Test(validity, next_renew_after_send_and_no_later_than_fraction)
{
    uint64_t x = 88172645463325252ull;
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
        for (size_t j = 0; j < sizeof renew_ttls / sizeof renew_ttls[0]; j++) {
            for (int k = 0; k < 200; k++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                uint64_t s = k == 0 ? 0 : (k == 1 ? 10 * MS : x >> 14);
                uint32_t ttl = renew_ttls[j];
                double fr = fractions[f];
                uint64_t due = lease_next_renew(s, ttl, fr);
                double exact = (double)s + (double)ttl * fr * (double)MS;
                cr_assert_gt(due, s, "ttl %u fraction %g sent %llu: due %llu not after send", ttl,
                             fr, (unsigned long long)s, (unsigned long long)due);
                cr_assert_leq((double)due, exact + 1.0,
                              "ttl %u fraction %g sent %llu: due %llu after %.0f", ttl, fr,
                              (unsigned long long)s, (unsigned long long)due, exact);
                cr_assert_lt(due, lease_deadline(s, ttl),
                             "ttl %u fraction %g sent %llu: due %llu not before the deadline", ttl,
                             fr, (unsigned long long)s, (unsigned long long)due);
                /* Not needlessly early: rounded down by at most one quantum
                 * (10 ms, or a quarter of a short period) from the fraction,
                 * or, when the fraction would leave less than a quantum
                 * before the deadline, from half the validity. */
                double period = (double)ttl * fr * (double)MS;
                double q = period / 4 < 10.0 * MS ? period / 4 : 10.0 * MS;
                double half = (double)(lease_deadline(s, ttl) - s) / 2;
                double target = period + q < 2 * half ? exact : (double)s + half;
                cr_assert_geq((double)due, target - q - 1.0,
                              "ttl %u fraction %g: due %llu more than a quantum before %.0f", ttl,
                              fr, (unsigned long long)due, target);
            }
        }
    }
}

Test(validity, next_renew_of_defaults)
{
    /* 30 s TTL, 1/3: every 10 s, on a 10 ms boundary. */
    uint64_t due = lease_next_renew(0, 30000, 1.0 / 3.0);
    cr_assert_leq(due, 10000 * MS);
    cr_assert_geq(due, 9990 * MS);
    cr_assert_eq(due % (10 * MS), 0);
    due = lease_next_renew(12345678901ull, 30000, 0.3333);
    cr_assert_eq(due % (10 * MS), 0, "due %llu not on a 10 ms boundary", (unsigned long long)due);
    cr_assert_leq(due, 12345678901ull + 9999 * MS);
    cr_assert_gt(due, 12345678901ull + 9989 * MS);
}

Test(validity, renewals_due_in_same_quantum_share_due_time)
{
    const uint32_t ttl = 30000;
    /* A period that is a whole number of quanta (15 s): every renewal sent
     * within one 10 ms quantum falls due at the same time. */
    for (uint64_t base = 0; base < 1000 * MS; base += 10 * MS) {
        uint64_t want = lease_next_renew(base, ttl, 0.5);
        for (uint64_t off = 0; off < 10 * MS; off += 333333)
            cr_assert_eq(lease_next_renew(base + off, ttl, 0.5), want,
                         "sent at %llu + %llu: due %llu, sent at the quantum start: %llu",
                         (unsigned long long)base, (unsigned long long)off,
                         (unsigned long long)lease_next_renew(base + off, ttl, 0.5),
                         (unsigned long long)want);
        cr_assert_eq(lease_next_renew(base + 10 * MS, ttl, 0.5), want + 10 * MS);
    }
    /* Any period: renewals whose exact due times fall in one quantum share
     * the rounded due time, and sends within one quantum are at most one
     * quantum apart. */
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
        double fr = fractions[f];
        uint64_t period = (uint64_t)((double)ttl * fr * (double)MS);
        for (uint64_t s = 5 * MS; s < 200 * MS; s += 1700001) {
            uint64_t due = lease_next_renew(s, ttl, fr);
            uint64_t qstart = (s + period) - (s + period) % (10 * MS);
            cr_assert_eq(due, qstart);
            /* another send whose exact due lies in the same quantum */
            uint64_t s2 = qstart + 10 * MS - 1 - period;
            cr_assert_eq(lease_next_renew(s2, ttl, fr), due, "fraction %g: %llu vs %llu", fr,
                         (unsigned long long)s, (unsigned long long)s2);
            uint64_t s3 = s - s % (10 * MS) + 10 * MS - 1;
            uint64_t d3 = lease_next_renew(s3, ttl, fr);
            cr_assert_geq(d3, due);
            cr_assert_leq(d3 - due, 10 * MS);
        }
    }
}

/* Over the whole range of each setting (min_ttl_ms >= 10, renew_fraction
 * <= 0.8: config_validate refuses some of these pairs, as too short to hold a
 * lease, but the arithmetic must hold for all), the renewal must still fall
 * due before the lease's deadline; the core's lease_due() treats a timer
 * firing at or after the deadline as a lost lease. */
Test(validity, next_renew_comes_before_deadline_for_valid_settings)
{
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
        for (size_t j = 0; j < sizeof renew_ttls / sizeof renew_ttls[0]; j++) {
            for (uint64_t s = 0; s < 20 * MS; s += 250000) {
                uint32_t ttl = renew_ttls[j];
                double fr = fractions[f];
                uint64_t due = lease_next_renew(s, ttl, fr);
                uint64_t deadline = lease_deadline(s, ttl);
                cr_expect_lt(due, deadline,
                             "ttl %u ms, renew_fraction %g, sent at %llu: renewal due %llu is not "
                             "before the deadline %llu",
                             ttl, fr, (unsigned long long)s, (unsigned long long)due,
                             (unsigned long long)deadline);
                if (due >= deadline)
                    return; /* one report is enough */
            }
        }
    }
}

/* Every whole-ms TTL from the smallest allowed up to 2 s, every fraction in
 * 0.05..0.8 by 0.01: the renewal falls due after the send, no later than the
 * fraction, and before the deadline. */
Test(validity, next_renew_sweep_of_tight_settings)
{
    const uint64_t sends[] = {0, 3 * MS + 1, 987654321, 7000000000123ull};
    for (uint32_t ttl = 10; ttl <= 2000; ttl++) {
        for (int pct = 5; pct <= 80; pct++) {
            double fr = pct / 100.0;
            for (size_t i = 0; i < sizeof sends / sizeof sends[0]; i++) {
                uint64_t s = sends[i];
                uint64_t due = lease_next_renew(s, ttl, fr);
                uint64_t deadline = lease_deadline(s, ttl);
                uint64_t period = (uint64_t)((double)ttl * fr * (double)MS);
                if (due <= s || due > s + period || due >= deadline)
                    cr_assert_fail("ttl %u fraction %g sent %llu: due %llu, want in (%llu, "
                                   "min(%llu, deadline %llu))",
                                   ttl, fr, (unsigned long long)s, (unsigned long long)due,
                                   (unsigned long long)s, (unsigned long long)(s + period),
                                   (unsigned long long)deadline);
            }
        }
    }
}

Test(validity, renew_retry_is_soon_and_never_past_deadline)
{
    const uint32_t ttls[] = {10, 30, 49, 50, 100, 1000, 2000, 2001, 30000, 86400000};
    for (size_t j = 0; j < sizeof ttls / sizeof ttls[0]; j++) {
        uint32_t ttl = ttls[j];
        uint64_t step = (uint64_t)ttl * MS / 10;
        if (step > 200 * MS)
            step = 200 * MS;
        if (step < 5 * MS)
            step = 5 * MS;
        uint64_t send = 1000 * MS;
        uint64_t deadline = lease_deadline(send, ttl);
        /* 2000 points from the send to past the deadline, and around it */
        uint64_t span = deadline + 50 * MS - send;
        for (uint64_t k = 0; k <= 2000 + 200; k++) {
            uint64_t now =
                k <= 2000 ? send + span / 2000 * k : deadline - 100 * 100000 + (k - 2000) * 100000;
            uint64_t r = lease_renew_retry(now, deadline, ttl);
            cr_assert_leq(r, deadline, "ttl %u now %llu: retry %llu after deadline %llu", ttl,
                          (unsigned long long)now, (unsigned long long)r,
                          (unsigned long long)deadline);
            if (now < deadline) {
                cr_assert_gt(r, now, "ttl %u: retry not in the future", ttl);
                cr_assert_eq(r, now + step < deadline ? now + step : deadline);
            }
        }
    }
    /* The step is a tenth of the TTL, within 5..200 ms. */
    cr_assert_eq(lease_renew_retry(0, UINT64_MAX, 1000), 100 * MS);
    cr_assert_eq(lease_renew_retry(0, UINT64_MAX, 30), 5 * MS);
    cr_assert_eq(lease_renew_retry(0, UINT64_MAX, 30000), 200 * MS);
}

/* ---- waiter retry delay ---- */

Test(retry, delay_within_fallback_and_one_and_a_half)
{
    const uint32_t fb[] = {1, 7, 100, 1000, 60000};
    const double rs[] = {0.0, 1e-12, 0.25, 0.5, 0.75, 0.999, 0.9999999999999999};
    for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++) {
        uint64_t base = (uint64_t)fb[i] * MS;
        for (size_t k = 0; k < sizeof rs / sizeof rs[0]; k++) {
            /* pttl_ms <= 0: no expiry known */
            for (long long pttl = -2; pttl <= 0; pttl++) {
                uint64_t d = waiter_retry_delay(fb[i], pttl, rs[k]);
                cr_assert_geq(d, base, "fallback %u r %g: %llu", fb[i], rs[k],
                              (unsigned long long)d);
                cr_assert_lt(d, base + base / 2, "fallback %u r %g: %llu", fb[i], rs[k],
                             (unsigned long long)d);
            }
        }
        cr_assert_eq(waiter_retry_delay(fb[i], 0, 0.0), base);
    }
    /* Monotonic in r. */
    uint64_t prev = 0;
    for (int k = 0; k < 1000; k++) {
        uint64_t d = waiter_retry_delay(100, -1, k / 1000.0);
        cr_assert_geq(d, prev);
        prev = d;
    }
    cr_assert_eq(waiter_retry_delay(100, -1, 0.5), 125 * MS);
}

Test(retry, delay_is_pttl_plus_1ms_when_key_expires_sooner)
{
    /* fallback 100 ms: delay at least 100 ms, so a 20 ms PTTL wins */
    cr_assert_eq(waiter_retry_delay(100, 20, 0.0), 21 * MS);
    cr_assert_eq(waiter_retry_delay(100, 20, 0.9), 21 * MS);
    cr_assert_eq(waiter_retry_delay(100, 1, 0.3), 2 * MS);
    cr_assert_eq(waiter_retry_delay(100, 98, 0.0), 99 * MS);
    /* pttl + 1 equal to the jittered delay: either way the same */
    cr_assert_eq(waiter_retry_delay(100, 99, 0.0), 100 * MS);
    /* the key outlives the jittered delay: the jitter stands */
    cr_assert_eq(waiter_retry_delay(100, 100, 0.0), 100 * MS);
    cr_assert_eq(waiter_retry_delay(100, 130, 0.5), 125 * MS);
    cr_assert_eq(waiter_retry_delay(100, 120, 0.5), 121 * MS);
    for (long long p = 1; p < 400; p++) {
        uint64_t d = waiter_retry_delay(100, p, 0.5);
        uint64_t want = (uint64_t)(p + 1) * MS < 125 * MS ? (uint64_t)(p + 1) * MS : 125 * MS;
        cr_assert_eq(d, want, "pttl %lld: %llu, expected %llu", p, (unsigned long long)d,
                     (unsigned long long)want);
    }
}

/* A key set by a foreign client with a very long PX (Redis accepts PX up to
 * about LLONG_MAX minus the current time) expires long after the fallback
 * delay, so the jittered fallback delay must stand. */
Test(retry, delay_with_huge_pttl_is_the_fallback)
{
    const long long pttls[] = {
        1000000LL,                           /* 16 minutes */
        10000000000LL,                       /* 115 days */
        18446744073709LL,                    /* 584 years: (pttl + 1) ms in ns just exceeds 2^64 */
        18446744073710LL, 100000000000000LL, /* 3170 years */
        LLONG_MAX / 2,    LLONG_MAX,
    };
    for (size_t i = 0; i < sizeof pttls / sizeof pttls[0]; i++) {
        uint64_t d = waiter_retry_delay(100, pttls[i], 0.0);
        cr_expect_eq(d, 100 * MS, "pttl %lld ms: retry delay %llu ns, expected the 100 ms fallback",
                     pttls[i], (unsigned long long)d);
    }
}

/* ---- lock names ---- */

Test(names, empty_is_bad)
{
    cr_assert_eq(lock_name_check("", 0, 200), DLOCK_EBADNAME);
    cr_assert_eq(lock_name_check("abc", 0, 200), DLOCK_EBADNAME);
}

Test(names, length_limit_is_inclusive)
{
    char buf[1100];
    memset(buf, 'a', sizeof buf);
    cr_assert_eq(lock_name_check(buf, 200, 200), 0);
    cr_assert_eq(lock_name_check(buf, 201, 200), DLOCK_ENAMETOOLONG);
    cr_assert_eq(lock_name_check(buf, 1, 1), 0);
    cr_assert_eq(lock_name_check(buf, 2, 1), DLOCK_ENAMETOOLONG);
    cr_assert_eq(lock_name_check(buf, 1024, 1024), 0);
    cr_assert_eq(lock_name_check(buf, 1025, 1024), DLOCK_ENAMETOOLONG);
    /* Too long and a bad byte: an error either way. */
    buf[500] = ' ';
    cr_assert_neq(lock_name_check(buf, 1000, 200), 0);
}

Test(names, forbidden_bytes)
{
    char name[8];
    for (int ch = 0; ch < 256; ch++) {
        memcpy(name, "ab?cd", 6);
        name[2] = (char)ch;
        int want = (ch <= 0x20 || ch == 0x7f || ch == '{' || ch == '}') ? DLOCK_EBADNAME : 0;
        cr_assert_eq(lock_name_check(name, 5, 200), want, "byte 0x%02x in the middle: %d", ch,
                     lock_name_check(name, 5, 200));
        /* at the start and the end too */
        name[0] = (char)ch;
        name[2] = 'x';
        cr_assert_eq(lock_name_check(name, 5, 200), want, "byte 0x%02x at the start", ch);
        name[0] = 'a';
        name[4] = (char)ch;
        cr_assert_eq(lock_name_check(name, 5, 200), want, "byte 0x%02x at the end", ch);
        /* alone */
        cr_assert_eq(lock_name_check(name + 4, 1, 200), want, "byte 0x%02x alone", ch);
    }
    cr_assert_eq(lock_name_check("a b", 3, 200), DLOCK_EBADNAME);
    cr_assert_eq(lock_name_check("a\tb", 3, 200), DLOCK_EBADNAME);
    cr_assert_eq(lock_name_check("a\nb", 3, 200), DLOCK_EBADNAME);
    cr_assert_eq(lock_name_check("a\x7f", 2, 200), DLOCK_EBADNAME);
    /* an embedded NUL inside the given length */
    cr_assert_eq(lock_name_check("ab\0cd", 5, 200), DLOCK_EBADNAME);
}

Test(names, printable_and_utf8_are_fine)
{
    cr_assert_eq(lock_name_check("backup", 6, 200), 0);
    cr_assert_eq(lock_name_check("db/shard-1:primary.lock_#2", 26, 200), 0);
    const char *utf8 = "r\xc3\xa9sum\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac-\xf0\x9f\x94\x92";
    cr_assert_eq(lock_name_check(utf8, strlen(utf8), 200), 0);
    /* bytes are not validated as UTF-8: any byte >= 0x80 is accepted */
    cr_assert_eq(lock_name_check("\xff\xfe", 2, 200), 0);
    /* the length limit counts bytes, not characters */
    cr_assert_eq(lock_name_check("\xc3\xa9\xc3\xa9", 4, 3), DLOCK_ENAMETOOLONG);
}

/* A predecessor's lease ids are taken as they are: the slot index below the
 * ones in use, or far beyond them; an id in use, of a generation the slot
 * has had, or of generation 0 is refused; new ids never repeat them. */
Test(table, leases_taken_over_keep_their_ids)
{
    struct table t;
    cr_assert_eq(table_init(&t, 5), 0);
    struct lock *l = table_lock_get(&t, "n", 1);
    cr_assert_not_null(l);
    uint64_t far = (7ull << 32) | 300, near = (2ull << 32) | 4;
    struct lease *a = table_lease_new_id(&t, l, NULL, far);
    cr_assert_not_null(a);
    cr_assert_eq(a->id, far);
    cr_assert_eq(table_lease_find(&t, far), a);
    struct lease *b = table_lease_new_id(&t, l, NULL, near);
    cr_assert_not_null(b);
    cr_assert_eq(table_lease_find(&t, near), b);
    cr_assert_null(table_lease_new_id(&t, l, NULL, far), "an id in use was taken again");
    cr_assert_null(table_lease_new_id(&t, l, NULL, (9ull << 32) | 300), "a slot in use");
    cr_assert_null(table_lease_new_id(&t, l, NULL, 300), "generation 0");
    cr_assert_null(table_lease_new_id(&t, l, NULL, (1ull << 32) | (1u << 30)), "far too far");
    /* New leases fill the slots below, never with an id seen before. */
    struct lease *news[400];
    for (int i = 0; i < 400; i++) {
        news[i] = table_lease_new(&t, l, NULL);
        cr_assert_not_null(news[i]);
        cr_assert_neq(news[i]->id, far);
        cr_assert_neq(news[i]->id, near);
    }
    table_lease_free(&t, a);
    cr_assert_null(table_lease_new_id(&t, l, NULL, far), "an id came back after its lease");
    struct lease *again = table_lease_new(&t, l, NULL);
    cr_assert_eq((uint32_t)again->id, 300u);
    cr_assert_gt(again->id >> 32, 7u, "the slot's next lease reused a generation");
    cr_assert_eq(t.nleases, 402u);
    table_free(&t);
}
