/* SPDX-License-Identifier: BSD-3-Clause */
/* stats.c -- latency histograms. */
#include "stats.h"

const double stats_bucket_le[STATS_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                               0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};

void histo_add(struct histo *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int i = 0;
    while (i < STATS_BUCKETS && s > stats_bucket_le[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum += s;
}
