/* SPDX-License-Identifier: BSD-3-Clause */
/* test_theap.c -- unit tests of the timer min-heap in agent/core/theap.c. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "theap.h"

/* A small deterministic PRNG (xorshift64*), so failures reproduce. */
static uint64_t rng_state;

static void rng_seed(uint64_t s)
{
    rng_state = s ? s : 0x9e3779b97f4a7c15ull;
}

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static uint64_t rng_below(uint64_t n)
{
    return rng_next() % n;
}

/* Checks every structural invariant of h: each slot's node knows its index,
 * every parent is due no later than its children, n <= cap. */
static void check_heap(const struct theap *h)
{
    cr_assert_leq(h->n, h->cap);
    for (uint32_t i = 0; i < h->n; i++) {
        cr_assert_not_null(h->v[i]);
        cr_assert_eq(h->v[i]->idx, i, "node at slot %u believes it is at %u", i, h->v[i]->idx);
        if (i > 0) {
            uint32_t p = (i - 1) / 2;
            cr_assert_leq(h->v[p]->due, h->v[i]->due, "heap order broken: v[%u]=%llu > v[%u]=%llu",
                          p, (unsigned long long)h->v[p]->due, i, (unsigned long long)h->v[i]->due);
        }
    }
    if (h->n == 0)
        cr_assert_null(theap_top(h));
    else
        cr_assert_eq(theap_top(h), h->v[0]);
}

/* Pops the top node (top + remove), checking it is no longer queued. */
static struct tnode *pop(struct theap *h)
{
    struct tnode *t = theap_top(h);
    if (t) {
        theap_remove(h, t);
        cr_assert_not(tnode_queued(t));
    }
    return t;
}

Test(theap, empty_heap_has_no_top)
{
    struct theap h = {0};
    cr_assert_null(theap_top(&h));
    theap_free(&h);
    cr_assert_null(h.v);
    cr_assert_eq(h.n, 0);
    cr_assert_eq(h.cap, 0);
}

Test(theap, init_leaves_node_unqueued_with_kind)
{
    struct tnode t;
    memset(&t, 0xab, sizeof t);
    tnode_init(&t, 7);
    cr_assert_not(tnode_queued(&t));
    cr_assert_eq(t.idx, THEAP_NONE);
    cr_assert_eq(t.kind, 7);
    cr_assert_eq(t.due, 0);
}

Test(theap, single_node_set_and_remove)
{
    struct theap h = {0};
    struct tnode t;
    tnode_init(&t, 1);
    cr_assert_eq(theap_set(&h, &t, 42), 0);
    cr_assert(tnode_queued(&t));
    cr_assert_eq(t.due, 42);
    cr_assert_eq(theap_top(&h), &t);
    theap_remove(&h, &t);
    cr_assert_not(tnode_queued(&t));
    cr_assert_null(theap_top(&h));
    cr_assert_eq(h.n, 0);
    theap_free(&h);
}

Test(theap, removing_unqueued_node_is_a_no_op)
{
    struct theap h = {0};
    struct tnode a, b, stray;
    tnode_init(&a, 1);
    tnode_init(&b, 1);
    tnode_init(&stray, 1);
    stray.due = 5;

    /* On an empty heap. */
    theap_remove(&h, &stray);
    cr_assert_eq(h.n, 0);
    cr_assert_not(tnode_queued(&stray));

    cr_assert_eq(theap_set(&h, &a, 10), 0);
    cr_assert_eq(theap_set(&h, &b, 20), 0);
    theap_remove(&h, &stray);
    cr_assert_eq(h.n, 2);
    cr_assert_eq(stray.due, 5);
    check_heap(&h);

    /* Removing twice: the second is a no-op and leaves b alone. */
    theap_remove(&h, &a);
    theap_remove(&h, &a);
    cr_assert_eq(h.n, 1);
    cr_assert_eq(theap_top(&h), &b);
    cr_assert(tnode_queued(&b));
    cr_assert_eq(b.idx, 0);
    check_heap(&h);
    theap_free(&h);
}

Test(theap, set_on_queued_node_moves_it_without_duplicating)
{
    struct theap h = {0};
    struct tnode n[5];
    for (int i = 0; i < 5; i++) {
        tnode_init(&n[i], 1);
        cr_assert_eq(theap_set(&h, &n[i], (uint64_t)(i + 1) * 10), 0);
    }
    cr_assert_eq(theap_top(&h), &n[0]);

    /* Move the last node to the front. */
    cr_assert_eq(theap_set(&h, &n[4], 1), 0);
    cr_assert_eq(h.n, 5);
    cr_assert_eq(theap_top(&h), &n[4]);
    check_heap(&h);

    /* Move the front node to the back. */
    cr_assert_eq(theap_set(&h, &n[4], 1000), 0);
    cr_assert_eq(h.n, 5);
    cr_assert_eq(theap_top(&h), &n[0]);
    check_heap(&h);

    /* Same due again: nothing changes. */
    cr_assert_eq(theap_set(&h, &n[2], n[2].due), 0);
    cr_assert_eq(h.n, 5);
    check_heap(&h);

    uint64_t want[] = {10, 20, 30, 40, 1000};
    for (int i = 0; i < 5; i++) {
        struct tnode *t = pop(&h);
        cr_assert_not_null(t);
        cr_assert_eq(t->due, want[i]);
    }
    cr_assert_null(pop(&h));
    theap_free(&h);
}

Test(theap, equal_due_times_all_pop)
{
    struct theap h = {0};
    struct tnode n[100];
    for (int i = 0; i < 100; i++) {
        tnode_init(&n[i], 1);
        cr_assert_eq(theap_set(&h, &n[i], 7), 0);
    }
    check_heap(&h);
    bool seen[100] = {false};
    for (int i = 0; i < 100; i++) {
        struct tnode *t = pop(&h);
        cr_assert_not_null(t);
        cr_assert_eq(t->due, 7);
        size_t k = (size_t)(t - n);
        cr_assert_lt(k, 100);
        cr_assert_not(seen[k], "node %zu popped twice", k);
        seen[k] = true;
        check_heap(&h);
    }
    cr_assert_null(theap_top(&h));
    theap_free(&h);
}

Test(theap, extreme_due_values_order_correctly)
{
    struct theap h = {0};
    struct tnode a, b, c;
    tnode_init(&a, 1);
    tnode_init(&b, 1);
    tnode_init(&c, 1);
    cr_assert_eq(theap_set(&h, &a, UINT64_MAX), 0);
    cr_assert_eq(theap_set(&h, &b, 0), 0);
    cr_assert_eq(theap_set(&h, &c, UINT64_MAX - 1), 0);
    cr_assert_eq(pop(&h), &b);
    cr_assert_eq(pop(&h), &c);
    cr_assert_eq(pop(&h), &a);
    theap_free(&h);
}

Test(theap, grows_past_initial_capacity)
{
    enum { N = 1000 };
    struct theap h = {0};
    struct tnode *n = calloc(N, sizeof *n);
    cr_assert_not_null(n);
    /* Descending dues: every insert sifts all the way up. */
    for (int i = 0; i < N; i++) {
        tnode_init(&n[i], 1);
        cr_assert_eq(theap_set(&h, &n[i], (uint64_t)(N - i)), 0);
    }
    cr_assert_eq(h.n, N);
    cr_assert_geq(h.cap, N);
    check_heap(&h);
    for (int i = 0; i < N; i++) {
        struct tnode *t = pop(&h);
        cr_assert_eq(t, &n[N - 1 - i]);
        cr_assert_eq(t->due, (uint64_t)(i + 1));
    }
    theap_free(&h);
    free(n);
}

Test(theap, remove_from_every_position)
{
    enum { N = 31 };
    for (int victim = 0; victim < N; victim++) {
        struct theap h = {0};
        struct tnode n[N];
        rng_seed(1000 + (uint64_t)victim);
        for (int i = 0; i < N; i++) {
            tnode_init(&n[i], 1);
            cr_assert_eq(theap_set(&h, &n[i], rng_below(50)), 0);
        }
        /* Remove whatever node sits at heap slot `victim`. */
        struct tnode *t = h.v[victim];
        theap_remove(&h, t);
        cr_assert_not(tnode_queued(t));
        cr_assert_eq(h.n, N - 1);
        check_heap(&h);
        for (uint32_t i = 0; i < h.n; i++)
            cr_assert_neq(h.v[i], t, "removed node still in slot %u", i);
        uint64_t last = 0;
        while (h.n) {
            struct tnode *p = pop(&h);
            cr_assert_geq(p->due, last);
            last = p->due;
            check_heap(&h);
        }
        theap_free(&h);
    }
}

/* Random insert/update/remove/pop sequences against a reference model: the
 * model knows which nodes are queued and at which due time. */
static void random_ops(uint64_t seed, int nnodes, int nops, uint64_t due_range)
{
    struct theap h = {0};
    struct tnode *n = calloc((size_t)nnodes, sizeof *n);
    bool *queued = calloc((size_t)nnodes, sizeof *queued);
    uint64_t *due = calloc((size_t)nnodes, sizeof *due);
    cr_assert(n && queued && due);
    for (int i = 0; i < nnodes; i++)
        tnode_init(&n[i], (uint8_t)(i % 3 + 1));
    rng_seed(seed);
    uint32_t count = 0;

    for (int op = 0; op < nops; op++) {
        int k = (int)rng_below((uint64_t)nnodes);
        unsigned what = (unsigned)rng_below(10);
        if (what < 5) {
            /* set: insert or move */
            uint64_t d = rng_below(due_range);
            cr_assert_eq(theap_set(&h, &n[k], d), 0);
            if (!queued[k])
                count++;
            queued[k] = true;
            due[k] = d;
        } else if (what < 8) {
            /* remove, queued or not */
            theap_remove(&h, &n[k]);
            if (queued[k])
                count--;
            queued[k] = false;
        } else {
            /* pop the earliest: it must be a queued node with the minimum due */
            struct tnode *t = pop(&h);
            if (count == 0) {
                cr_assert_null(t, "op %d: heap returned a node, model is empty", op);
                continue;
            }
            cr_assert_not_null(t, "op %d: heap empty, model has %u", op, count);
            size_t j = (size_t)(t - n);
            cr_assert_lt(j, (size_t)nnodes);
            cr_assert(queued[j], "op %d: popped node %zu was not queued", op, j);
            cr_assert_eq(t->due, due[j]);
            for (int i = 0; i < nnodes; i++)
                if (queued[i])
                    cr_assert_geq(due[i], t->due, "op %d: node %d due %llu < popped %llu", op, i,
                                  (unsigned long long)due[i], (unsigned long long)t->due);
            queued[j] = false;
            count--;
        }
        cr_assert_eq(h.n, count, "op %d: heap has %u nodes, model %u", op, h.n, count);
        for (int i = 0; i < nnodes; i++) {
            cr_assert_eq(tnode_queued(&n[i]), queued[i], "op %d: node %d queued=%d, model %d", op,
                         i, tnode_queued(&n[i]), queued[i]);
            if (queued[i]) {
                cr_assert_eq(n[i].due, due[i]);
                cr_assert_eq(h.v[n[i].idx], &n[i], "op %d: node %d idx %u is stale", op, i,
                             n[i].idx);
            }
        }
        check_heap(&h);
    }

    /* Drain: non-decreasing, and exactly the model's queued nodes, sorted. */
    uint64_t last = 0;
    uint32_t drained = 0;
    while (theap_top(&h)) {
        struct tnode *t = pop(&h);
        size_t j = (size_t)(t - n);
        cr_assert(queued[j]);
        cr_assert_geq(t->due, last, "drain out of order: %llu after %llu",
                      (unsigned long long)t->due, (unsigned long long)last);
        last = t->due;
        queued[j] = false;
        drained++;
    }
    cr_assert_eq(drained, count);
    for (int i = 0; i < nnodes; i++) {
        cr_assert_not(queued[i], "node %d never popped", i);
        cr_assert_not(tnode_queued(&n[i]));
    }
    theap_free(&h);
    free(n);
    free(queued);
    free(due);
}

Test(theap, random_ops_match_model_small_range)
{
    /* Few distinct due values: lots of ties. */
    random_ops(12345, 40, 4000, 8);
}

Test(theap, random_ops_match_model_wide_range)
{
    random_ops(0xdeadbeefcafef00dull, 200, 5000, UINT64_MAX);
}

Test(theap, random_ops_match_model_many_seeds)
{
    for (uint64_t s = 1; s <= 20; s++)
        random_ops(s * 7919, 1 + (int)(s * 3), 500, 1000);
}

Test(theap, node_can_be_reused_after_removal)
{
    struct theap h = {0};
    struct tnode a, b;
    tnode_init(&a, 1);
    tnode_init(&b, 1);
    cr_assert_eq(theap_set(&h, &a, 5), 0);
    cr_assert_eq(theap_set(&h, &b, 6), 0);
    cr_assert_eq(pop(&h), &a);
    cr_assert_eq(theap_set(&h, &a, 9), 0);
    cr_assert(tnode_queued(&a));
    cr_assert_eq(h.n, 2);
    cr_assert_eq(pop(&h), &b);
    cr_assert_eq(pop(&h), &a);
    cr_assert_null(pop(&h));
    theap_free(&h);
}
