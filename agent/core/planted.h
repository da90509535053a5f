/* SPDX-License-Identifier: BSD-3-Clause */
/* planted.h -- known bugs the simulator must catch (tests/sim), compiled
 * only into the simulator's copy of the core (DLOCK_PLANTED_BUGS); in
 * dlockd, PLANTED() is 0 and the compiler drops what it guards. */
#ifndef DLOCKD_PLANTED_H
#define DLOCKD_PLANTED_H

#ifdef DLOCK_PLANTED_BUGS
/* Known bugs the simulator must catch (tests/sim): set by the simulator,
 * compiled only into its copy of the core. */
enum core_bug {
    CORE_BUG_NONE,
    CORE_BUG_NO_DRIFT,            /* validity without the drift allowance */
    CORE_BUG_RENEW_FROM_REPLY,    /* renewal extends from the reply, not the send */
    CORE_BUG_GRANT_LATE,          /* grants a reply that came after the validity */
    CORE_BUG_NO_WITHDRAW,         /* an unanswered acquire is not withdrawn */
    CORE_BUG_JEOPARDY_VALID,      /* a failed renewal extends the deadline anyway */
    CORE_BUG_QUORUM_LOW_FENCE,    /* quorum: grants the lowest proposal, writes back nowhere */
    CORE_BUG_NO_REWATCH,          /* a waiter behind a pending retry does not listen for notices */
    CORE_BUG_DOUBT_IGNORED,       /* a failover leaves the leases' pages valid until renewed */
    CORE_BUG_HANDOFF_SAME_FENCE,  /* a handoff grants the previous holder's token again */
    CORE_BUG_HOLD_FOREVER,        /* renewal goes on past the maximum hold */
    CORE_BUG_NO_PROGRESS,         /* a stalled holder's lease is renewed all the same */
    CORE_BUG_SILENT_LOSS,         /* a lost lease leaves its page without a LOST event */
    CORE_BUG_NO_JEOPARDY,         /* an overdue renewal is not reported before the deadline */
    CORE_BUG_COHORT_UNBOUNDED,    /* handoffs go on past cohort_ms */
    CORE_BUG_DROP_RELEASE,        /* a release that failed is not sent again */
    CORE_BUG_NOT_OURS_RENEWS,     /* a renewal answered "not yours" extends the lease */
    CORE_BUG_NO_OUTAGE_RIDE,      /* a waiter fails at the first outage */
    CORE_BUG_RENEW_STORM,         /* renews again as soon as a renewal is confirmed */
    CORE_BUG_QUORUM_NO_EXCLUSION, /* quorum: a restarted node counts at once */
    CORE_BUG_QUEUE_JUMP,          /* a new waiter goes ahead of all but the first */
    CORE_BUG_STALE_CONFIRM,       /* a renewal sent before a doubt confirms the lease */
    CORE_BUG_QUORUM_FENCE_UNCONFIRMED, /* quorum: a write-back counts before it is answered */
    CORE_BUG_REENTRY_FIRST_RELEASE,    /* a re-entered lease goes at its first release */
    CORE_BUG_JOIN_SAME_FENCE,          /* a joining reader gets the holders' token again */
    CORE_BUG_SEM_OVER_LIMIT,           /* a semaphore asks the store for one permit more */
    CORE_BUG_READER_JOINS_WRITER,      /* a reader joins a writer's grant */
    CORE_BUG_ADOPT_UNCHECKED,          /* a lease taken over is held anew, key unchecked */
    CORE_BUG_GRANT_FROM_NOTICE_TIME,   /* a grant on release is valid from its message's arrival */
};
extern enum core_bug core_bug;
#define PLANTED(b) (core_bug == (b))
#else
#define PLANTED(b) 0
#endif

#endif
