/* SPDX-License-Identifier: BSD-3-Clause */
/* replies.c -- Redis' replies decoded without I/O or state (replies.h). */
#include "replies.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "keys.h"
#include "redis_link.h"

/* The answers of Redis Cluster while slots move or fail over: not the
 * node's health. */
static bool is_redirect(const char *msg)
{
    return strncmp(msg, "MOVED ", 6) == 0 || strncmp(msg, "ASK ", 4) == 0 ||
           strncmp(msg, "TRYAGAIN", 8) == 0;
}

void reply_script(const redisReply *rep, struct script_reply *out)
{
    memset(out, 0, sizeof *out);
    if (!rep) {
        out->kind = SR_NONE;
        out->err = DLOCK_EUNAVAIL;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        out->text = rep->str;
        if (strncmp(rep->str, "NOSCRIPT", 8) == 0)
            out->kind = SR_NOSCRIPT;
        else
            out->kind = is_redirect(rep->str) ? SR_REDIRECT : SR_ERROR;
        out->err = out->kind == SR_REDIRECT ? DLOCK_EBACKEND : redis_error_code(rep->str);
    } else if (rep->type == REDIS_REPLY_INTEGER && rep->integer > -(1ll << 53) &&
               rep->integer < (1ll << 53)) {
        /* Tokens, PTTLs and flags: a value out of that range is no answer
         * of ours (and could not be negated safely). */
        out->kind = SR_RESULT;
        out->n = rep->integer;
    } else {
        out->kind = SR_UNEXPECTED;
        out->err = DLOCK_EBACKEND;
    }
}

/* Whether host may name a node: Redis names its nodes by IP address or host
 * name, never by a socket path (which the agent's address syntax would take
 * for one: "unix:/path"). A reply must not point the agent at a local
 * socket. */
static bool node_host_ok(const char *host)
{
    return strncmp(host, "unix:", 5) != 0 && !strchr(host, '/');
}

int reply_redirect(const char *text, unsigned *slot, char *name, size_t cap)
{
    const char *p = strchr(text, ' ');
    if (!p)
        return -1;
    char *end;
    unsigned long s = strtoul(p + 1, &end, 10);
    if (end == p + 1 || *end != ' ' || s >= KEY_SLOTS || !end[1] || strlen(end + 1) >= cap ||
        !node_host_ok(end + 1))
        return -1;
    *slot = (unsigned)s;
    snprintf(name, cap, "%s", end + 1);
    return 0;
}

int reply_slots_node(const redisReply *e, const char *self, char *out, size_t cap)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    const char *host = e->element[0]->str;
    if (!host[0] || strcmp(host, "?") == 0)
        host = self;
    if (!node_host_ok(host))
        return -1;
    long long port = e->element[1]->integer;
    int n = strchr(host, ':') ? snprintf(out, cap, "[%s]:%lld", host, port)
                              : snprintf(out, cap, "%s:%lld", host, port);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int reply_slots_range(const redisReply *range, const char *self, long long *lo, long long *hi,
                      char *master, size_t cap)
{
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    *lo = range->element[0]->integer;
    *hi = range->element[1]->integer;
    if (*lo < 0 || *hi >= KEY_SLOTS || *lo > *hi)
        return -1;
    return reply_slots_node(range->element[2], self, master, cap);
}
