/* SPDX-License-Identifier: BSD-3-Clause */
/* world.c -- the simulator's randomness, event queue, clocks and trace. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* ---- randomness ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    /* Lemire's multiply-shift; the bias (below 2^-40 here) does not matter. */
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
    return hi <= lo ? lo : lo + rng_below(r, hi - lo + 1);
}

bool rng_chance(struct rng *r, unsigned percent)
{
    return rng_below(r, 100) < percent;
}

/* ---- the event queue: a binary min-heap on (time, sequence) ---- */

static bool ev_less(const struct event *x, const struct event *y)
{
    return x->time < y->time || (x->time == y->time && x->seq < y->seq);
}

void ev_push(struct sim *s, uint64_t time, uint16_t type, uint32_t a, uint64_t b, void *p)
{
    if (time < s->now)
        time = s->now;
    if (s->nheap == s->heap_cap) {
        s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 256;
        s->heap = realloc(s->heap, s->heap_cap * sizeof *s->heap);
        if (!s->heap) {
            fprintf(stderr, "dlock-sim: out of memory\n");
            exit(2);
        }
    }
    struct event e = {.time = time, .seq = s->seq++, .type = type, .a = a, .b = b, .p = p};
    size_t i = s->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!ev_less(&e, &s->heap[parent]))
            break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = e;
}

bool ev_pop(struct sim *s, struct event *out)
{
    if (s->nheap == 0)
        return false;
    *out = s->heap[0];
    struct event last = s->heap[--s->nheap];
    size_t i = 0, n = s->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && ev_less(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!ev_less(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return true;
}

/* ---- clocks ---- */

/* An agent's CLOCK_BOOTTIME at virtual time t: its boot offset plus t run at
 * its rate (ppm). */
uint64_t agent_clock(const struct agent *ag, uint64_t t)
{
    /* t * ppm fits in 64 bits for runs below 50 hours of virtual time. */
    return (uint64_t)(ag->boot_ns + (int64_t)t + (int64_t)t * ag->ppm / 1000000);
}

uint64_t agent_now(const struct agent *ag)
{
    return agent_clock(ag, ag->s->now);
}

uint64_t agent_virt(const struct agent *ag, uint64_t due)
{
    const struct sim *s = ag->s;
    if (agent_clock(ag, s->now) >= due)
        return s->now;
    __int128 t = ((__int128)due - ag->boot_ns) * 1000000 / (1000000 + ag->ppm);
    if (t < (__int128)s->now)
        t = s->now;
    while (agent_clock(ag, (uint64_t)t) < due)
        t++;
    while (t > (__int128)s->now && agent_clock(ag, (uint64_t)t - 1) >= due)
        t--;
    return (uint64_t)t;
}

/* The wall clock (NTP-disciplined: the virtual rate) with the agent's skew. */
uint64_t agent_wall_us(const struct agent *ag)
{
    return (uint64_t)((int64_t)1700000000000000ll + ag->wall_skew_us +
                      (int64_t)(ag->s->now / 1000));
}

/* A node's wall clock in ns: its skew, rate and steps. */
int64_t node_clock_ns(const struct node *nd)
{
    int64_t t = (int64_t)nd->s->now;
    return 1700000000000000000ll + nd->skew_ns + nd->step_ns + t + t * nd->ppm / 1000000;
}

/* One message's delay: mostly tens to hundreds of microseconds, sometimes
 * milliseconds, rarely up to 20 ms. */
uint64_t net_delay(struct sim *s)
{
    uint64_t r = rng_below(&s->rng, 100);
    if (r < s->slow_percent / 4)
        return rng_range(&s->rng, MS(5), MS(20));
    if (r < s->slow_percent)
        return rng_range(&s->rng, US(500), MS(5));
    return rng_range(&s->rng, s->delay_lo, s->delay_hi);
}

/* ---- trace and verdicts ---- */

void tracef(struct sim *s, const char *fmt, ...)
{
    char line[160];
    int n = snprintf(line, sizeof line, "%4llu.%06llu ", (unsigned long long)(s->now / 1000000000),
                     (unsigned long long)(s->now / 1000 % 1000000));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (s->opts.trace)
        printf("%s\n", line);
    if (s->opts.ring && s->ring) {
        memcpy(s->ring[s->ring_pos], line, sizeof line);
        s->ring_pos = (s->ring_pos + 1) % TRACE_RING;
        if (s->ring_n < TRACE_RING)
            s->ring_n++;
    }
}

/* Notes a fault the contract excludes, and names it (the first of its kind). */
/* How long after it happens an excluded fault excuses what it can cause:
 * a lost key, a key that expired early or a lost write is renewed by no
 * lease past one max_ttl (and the drift allowance) after the fault; a clock
 * that runs beyond the allowance does it for the whole run; the orphan-key
 * and late-doubt excuses are judged where they are used. */
static uint64_t excl_window(const struct sim *s, unsigned bit)
{
    switch (bit) {
    case X_DATA_LOSS:
    case X_UNDETECTED_LOSS:
    case X_CLOCK_FORWARD:
    case X_MARK_LOST_CLOCK:
    case X_PERMIT_CLOCK:
        return MS(s->agents[0].cfg.max_ttl_ms) * 21 / 20 + MS(100);
    default:
        return UINT64_MAX;
    }
}

void excl_note(struct sim *s, unsigned bit, const char *fmt, ...)
{
    unsigned i = (unsigned)__builtin_ctz(bit);
    uint64_t w = excl_window(s, bit);
    uint64_t until = w == UINT64_MAX ? UINT64_MAX : s->now + w;
    if (until > s->excl_until[i])
        s->excl_until[i] = until;
    if (s->excl & bit)
        return;
    s->excl |= bit;
    size_t used = strlen(s->excl_text);
    if (used + 4 >= sizeof s->excl_text)
        return;
    if (used)
        used += (size_t)snprintf(s->excl_text + used, sizeof s->excl_text - used, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->excl_text + used, sizeof s->excl_text - used, fmt, ap);
    va_end(ap);
    char what[256];
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    TRACE(s, "excluded fault: %s", what);
}

uint64_t excuse_until(const struct sim *s, unsigned excl_mask)
{
    uint64_t until = 0;
    for (unsigned i = 0; i < X_BITS; i++)
        if ((excl_mask & (1u << i)) && (s->excl & (1u << i)) && s->now <= s->excl_until[i] &&
            s->excl_until[i] > until)
            until = s->excl_until[i];
    return until;
}

bool violation(struct sim *s, const char *kind, unsigned excl_mask, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    struct sim_result *r = s->res;
    if (excuse_until(s, excl_mask)) {
        r->excused = true;
        r->excused_count++;
        if (excl_mask == X_LATE_DOUBT)
            r->excused_late++;
        else if (strcmp(kind, "mutual exclusion") == 0 || strcmp(kind, "key life") == 0 ||
                 strcmp(kind, "permits") == 0)
            r->excused_mutex++;
        else if (strcmp(kind, "fencing") == 0)
            r->excused_fence++;
        else
            r->excused_orphan++;
        TRACE(s, "EXCUSED %s: %s (after: %s)", kind, what, s->excl_text);
        return true;
    }
    TRACE(s, "VIOLATION %s: %s", kind, what);
    if (!r->violation) {
        r->violation = true;
        snprintf(r->what, sizeof r->what, "%s: %s", kind, what);
    }
    s->stop = true;
    return false;
}

int sim_name_index(const struct sim *s, const char *name, size_t len)
{
    for (unsigned i = 0; i < s->nnames; i++)
        if (strlen(s->names[i]) == len && memcmp(s->names[i], name, len) == 0)
            return (int)i;
    return -1;
}
