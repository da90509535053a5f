/* SPDX-License-Identifier: BSD-3-Clause */
/* errors.c -- English names for the DLOCK_E* codes and the lease states. */
#include "dlock.h"

/* Indexed by -code; the wire carries the same numbers, so keep the order. */
static const char *const error_messages[] = {
    "success",                                    /* DLOCK_OK */
    "invalid argument",                           /* DLOCK_EINVAL */
    "out of memory",                              /* DLOCK_ENOMEM */
    "cannot connect to the dlock agent",          /* DLOCK_ECONNECT */
    "connection to the dlock agent lost",         /* DLOCK_EDISCONNECTED */
    "protocol error",                             /* DLOCK_EPROTO */
    "no common protocol version with the agent",  /* DLOCK_EVERSION */
    "lock is held elsewhere",                     /* DLOCK_EBUSY */
    "timed out waiting for the lock",             /* DLOCK_ETIMEDOUT */
    "lock name too long",                         /* DLOCK_ENAMETOOLONG */
    "invalid lock name",                          /* DLOCK_EBADNAME */
    "lease, waiter or renewal limit reached",     /* DLOCK_ELIMIT */
    "no such lease",                              /* DLOCK_ENOTFOUND */
    "lease lost",                                 /* DLOCK_ELOST */
    "Redis is unreachable",                       /* DLOCK_EUNAVAIL */
    "unexpected error from Redis",                /* DLOCK_EBACKEND */
    "Redis is out of memory",                     /* DLOCK_EOOM */
    "Redis is a read-only replica",               /* DLOCK_EREADONLY */
    "Redis is loading its dataset",               /* DLOCK_ELOADING */
    "Redis refused the agent's credentials",      /* DLOCK_EAUTH */
    "the dlock agent is shutting down",           /* DLOCK_ESHUTDOWN */
    "the lease reached its maximum hold time",    /* DLOCK_EHOLDLIMIT */
    "the holder did not touch the lease in time", /* DLOCK_ESTALLED */
    "the agent's boot-time clock differs from ours (another time namespace?)", /* ECLOCK */
    "no majority of the Redis nodes is reachable and counting",                /* DLOCK_ENOQUORUM */
    "the agent's policy does not allow this lock name for this user",          /* DLOCK_EDENIED */
    "the dlock agent did not answer in time (stopped or wedged?)",             /* DLOCK_ENOANSWER */
    "this client already holds this lock (locks are not re-entrant)",          /* DLOCK_EHELD */
    "Redis failed over: the lease is in doubt until its key is confirmed",     /* DLOCK_EFAILOVER */
    "the name is held as another kind of lock, or with another number of permits", /* DLOCK_EKIND */
    "the acquire was cancelled",                                                   /* ECANCELED */
    "the dlock agent restarted: the lease is in doubt until it is confirmed",      /* ERESTART */
};

_Static_assert(sizeof(error_messages) / sizeof(error_messages[0]) == 1 - DLOCK_ERRNO_MIN,
               "one message per error code");

const char *dlock_strerror(int err)
{
    if (err > 0 || err < DLOCK_ERRNO_MIN)
        return "unknown error";
    return error_messages[-err];
}

const char *dlock_state_name(dlock_state state)
{
    switch (state) {
    case DLOCK_STATE_HELD:
        return "held";
    case DLOCK_STATE_JEOPARDY:
        return "jeopardy";
    case DLOCK_STATE_LOST:
        return "lost";
    case DLOCK_STATE_RELEASED:
        return "released";
    }
    return "unknown";
}
