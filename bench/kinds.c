/* SPDX-License-Identifier: BSD-3-Clause */
/* kinds.c -- the lock kinds part: worker processes of one agent on one name,
 * each looping acquire, the same critical section (a GET and about a
 * millisecond of work off the CPU, as an I/O-bound reader's) and release,
 * under the exclusive kind (the baseline), as shared readers, as a semaphore,
 * and as readers beside one writer (read-mostly); the workers are contend.c's. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "dlock.h"

/* One run of the part: `procs` workers of `kind`, and one exclusive writer
 * more when `writer`, on an agent of its own with the default cohort
 * settings (written out). */
static int one_run(struct env *e, struct contend_run *r, const char *tag, int procs, int kind,
                   bool writer, double seconds)
{
    static char settings[64];
    int agent_of[SIDE_MAX_WORKERS] = {0};
    snprintf(settings, sizeof settings, "cohort_handoffs = 32\ncohort_ms = %d\n",
             CONTEND_COHORT_MS);
    memset(r, 0, sizeof *r);
    r->nworkers = procs + (writer ? 1 : 0);
    r->nagents = 1;
    r->seconds = seconds;
    r->work_us = KINDS_WORK_US;
    r->permits = kind == DLOCK_KIND_SEMAPHORE ? KINDS_PERMITS : 0;
    r->write_one_in = writer ? KINDS_WRITE_ONE_IN : 0;
    r->agent[0] = (struct side_agent){.tag = tag, .settings = settings};
    for (int i = 0; i < procs; i++)
        r->w[i].kind = kind;
    if (writer)
        r->w[procs].kind = DLOCK_KIND_EXCLUSIVE;
    fprintf(stderr, "dlock-bench: kinds: %d processes on one agent, %s%s\n", procs,
            kind == DLOCK_KIND_EXCLUSIVE ? "exclusive"
            : kind == DLOCK_KIND_SHARED  ? "shared"
                                         : "semaphore",
            writer ? ", and one writer" : "");
    return contend(e, r, agent_of);
}

int run_kinds(struct env *e, int procs, double seconds, struct kinds_result *out)
{
    memset(out, 0, sizeof *out);
    if (procs < 1 || procs + 1 > SIDE_MAX_WORKERS)
        return -1;
    if (one_run(e, &out->ex, "kinds-exclusive", procs, DLOCK_KIND_EXCLUSIVE, false, seconds) != 0 ||
        one_run(e, &out->sh, "kinds-shared", procs, DLOCK_KIND_SHARED, false, seconds) != 0 ||
        one_run(e, &out->sem, "kinds-semaphore", procs, DLOCK_KIND_SEMAPHORE, false, seconds) !=
            0 ||
        one_run(e, &out->mix, "kinds-mix", procs, DLOCK_KIND_SHARED, true, seconds) != 0)
        return -1;
    return 0;
}
