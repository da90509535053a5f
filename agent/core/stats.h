/* SPDX-License-Identifier: BSD-3-Clause */
/* stats.h -- the agent's counters and latency histograms, for the status
 * socket and its Prometheus metrics. Pure. */
#ifndef DLOCKD_STATS_H
#define DLOCKD_STATS_H

#include <stdint.h>

/* Upper bounds of the histogram buckets, in seconds (then +Inf). */
#define STATS_BUCKETS 14
extern const double stats_bucket_le[STATS_BUCKETS];

struct histo {
    uint64_t bucket[STATS_BUCKETS + 1]; /* not cumulative; the last is +Inf */
    uint64_t count;
    double sum; /* seconds */
};

/* How an acquire request ended: each is answered once, with one of these
 * (dlock_acquires_total{outcome}). */
enum acq_outcome {
    ACQ_GRANTED,
    ACQ_BUSY,        /* try-once on a held name */
    ACQ_TIMEOUT,     /* the wait ran out */
    ACQ_DENIED,      /* the policy */
    ACQ_LIMIT,       /* a per-connection or per-uid limit */
    ACQ_UNAVAILABLE, /* Redis unreachable, no quorum, the agent stopping */
    ACQ_CANCELLED,   /* by the client, or the client went away */
    ACQ_ERROR,       /* anything else: a bad request, Redis' error, out of memory */
    ACQ_OUTCOMES
};
extern const char *const acq_outcome_name[ACQ_OUTCOMES];
/* The outcome of an acquire answered with err (0: granted; a DLOCK_E* code). */
enum acq_outcome acq_outcome_of(int err);

struct agent_stats {
    uint64_t grants;                 /* leases granted */
    uint64_t releases;               /* leases released by their holder */
    uint64_t forced_releases;        /* names an operator forced free (dlockctl release --force) */
    uint64_t handoffs;               /* grants handed on within the agent, without the store */
    uint64_t grants_by_release;      /* grants a release on the store handed over (no acquire) */
    uint64_t renewals;               /* renewals that succeeded */
    uint64_t renewal_failures;       /* renewals that failed without proof of loss */
    uint64_t losses;                 /* leases lost */
    uint64_t doubts;                 /* leases put in doubt by a failover */
    uint64_t adoptions;              /* leases taken over from a predecessor of the agent */
    uint64_t timeouts;               /* waits that ran out */
    uint64_t cancels;                /* waits cancelled by their client */
    uint64_t refused;                /* acquires refused before reaching Redis */
    uint64_t denied;                 /* acquires the policy did not allow */
    struct histo acquire;            /* acquire sent to Redis -> granted */
    struct histo renew;              /* renewal sent -> answered */
    uint64_t waiters;                /* gauge: acquires queued now, waiting for a name */
    uint64_t acquires[ACQ_OUTCOMES]; /* acquire requests answered, by outcome */
    struct histo queue_wait;         /* acquire received -> answered, whatever the answer */
    struct histo hold;               /* lease granted -> released or lost */
};

void histo_add(struct histo *h, uint64_t ns);
/* An acquire answered: its outcome counted, and its wait (ns) from the
 * request to the answer. */
void stats_acquire_done(struct agent_stats *s, int err, uint64_t waited_ns);

#endif
