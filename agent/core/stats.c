/* SPDX-License-Identifier: BSD-3-Clause */
/* stats.c -- latency histograms and acquire outcomes. */
#include "stats.h"

#include "dlock.h"

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

const char *const acq_outcome_name[ACQ_OUTCOMES] = {
    [ACQ_GRANTED] = "granted",     [ACQ_BUSY] = "busy",   [ACQ_TIMEOUT] = "timeout",
    [ACQ_DENIED] = "denied",       [ACQ_LIMIT] = "limit", [ACQ_UNAVAILABLE] = "unavailable",
    [ACQ_CANCELLED] = "cancelled", [ACQ_ERROR] = "error"};

enum acq_outcome acq_outcome_of(int err)
{
    switch (err) {
    case 0:
        return ACQ_GRANTED;
    case DLOCK_EBUSY:
        return ACQ_BUSY;
    case DLOCK_ETIMEDOUT:
        return ACQ_TIMEOUT;
    case DLOCK_EDENIED:
        return ACQ_DENIED;
    case DLOCK_ELIMIT:
        return ACQ_LIMIT;
    case DLOCK_EUNAVAIL:
    case DLOCK_ENOQUORUM:
    case DLOCK_ESHUTDOWN:
    case DLOCK_ELOADING:
    case DLOCK_EREADONLY:
        return ACQ_UNAVAILABLE;
    case DLOCK_ECANCELED:
        return ACQ_CANCELLED;
    default:
        return ACQ_ERROR;
    }
}

void stats_acquire_done(struct agent_stats *s, int err, uint64_t waited_ns)
{
    s->acquires[acq_outcome_of(err)]++;
    histo_add(&s->queue_wait, waited_ns);
}
