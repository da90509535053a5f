/* SPDX-License-Identifier: BSD-3-Clause */
/* util.c -- the agent's clock and random tokens, and small text helpers. */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

/* Random bytes come from getrandom() in 4 KiB refills, so that a token costs
 * no system call in the common case. */
static unsigned char pool[4096];
static size_t pool_left;

static int pool_take(void *dst, size_t n)
{
    if (pool_left < n) {
        size_t got = 0;
        while (got < sizeof pool) {
            ssize_t r = getrandom(pool + got, sizeof pool - got, 0);
            if (r <= 0)
                return -1;
            got += (size_t)r;
        }
        pool_left = sizeof pool;
    }
    memcpy(dst, pool + sizeof pool - pool_left, n);
    /* Bytes once handed out are wiped from the pool. */
    memset(pool + sizeof pool - pool_left, 0, n);
    pool_left -= n;
    return 0;
}

int random_bytes(void *dst, size_t n)
{
    return pool_take(dst, n);
}

uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (pool_take(&v, sizeof v) != 0)
        v = now_ns();
    return v;
}

double random_unit(void)
{
    static uint64_t s;
    if (s == 0)
        s = random_u64() | 1;
    /* xorshift64*: jitter only. */
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return (double)((s * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

void one_word(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || *s == 0x7f)
            *s = '?';
}

uint64_t name_hash(uint64_t seed, const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}
