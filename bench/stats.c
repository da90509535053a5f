/* SPDX-License-Identifier: BSD-3-Clause */
/* stats.c -- growable arrays of pair durations and their summary (nearest-rank
 * percentiles, mean, rate). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

int lat_reserve(struct lat *l, size_t cap)
{
    if (cap <= l->cap)
        return 0;
    uint64_t *v = realloc(l->v, cap * sizeof *v);
    if (!v)
        return -1;
    l->v = v;
    l->cap = cap;
    return 0;
}

int lat_push(struct lat *l, uint64_t ns)
{
    if (l->n == l->cap && lat_reserve(l, l->cap ? l->cap * 2 : 4096) != 0)
        return -1;
    l->v[l->n++] = ns;
    return 0;
}

int lat_append(struct lat *dst, const struct lat *src)
{
    if (lat_reserve(dst, dst->n + src->n) != 0)
        return -1;
    if (src->n)
        memcpy(dst->v + dst->n, src->v, src->n * sizeof *src->v);
    dst->n += src->n;
    return 0;
}

void lat_free(struct lat *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array: the smallest value with at
 * least q of the values at or below it. */
static double percentile_us(const struct lat *l, double q)
{
    size_t rank = (size_t)(q * (double)l->n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > l->n)
        rank = l->n;
    return (double)l->v[rank - 1] / 1e3;
}

void lat_summarise(struct lat *l, double wall_s, struct summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = l->n;
    if (l->n == 0)
        return;
    qsort(l->v, l->n, sizeof *l->v, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < l->n; i++)
        sum += (double)l->v[i];
    out->mean_us = sum / (double)l->n / 1e3;
    out->p50_us = percentile_us(l, 0.50);
    out->p90_us = percentile_us(l, 0.90);
    out->p99_us = percentile_us(l, 0.99);
    out->max_us = (double)l->v[l->n - 1] / 1e3;
    out->per_s = wall_s > 0 ? (double)l->n / wall_s : 0.0;
}
