/* SPDX-License-Identifier: BSD-3-Clause */
/* util.h -- small helpers of the agent: its clock, randomness, one-word text. */
#ifndef DLOCKD_UTIL_H
#define DLOCKD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NS_PER_MS  1000000ull
#define NS_PER_SEC 1000000000ull

/* CLOCK_BOOTTIME in nanoseconds: dlock's one clock for deadlines. Unlike
 * CLOCK_MONOTONIC it keeps counting while the host is suspended, as the
 * Redis TTLs on the other side do, so a lease never looks valid after a
 * resume when its key has expired meanwhile. */
uint64_t now_ns(void);
/* CLOCK_REALTIME in microseconds since the epoch. */
uint64_t realtime_us(void);
/* A uniform double in [0, 1), not for secrets. */
double random_unit(void);
/* 64 random bits from the kernel (for hash seeds; the clock if the kernel
 * would give none). */
uint64_t random_u64(void);
/* A hash of a lock name for hash tables: FNV-1a, seeded (per run, from
 * random_u64) so that local clients cannot pick names that collide. */
uint64_t name_hash(uint64_t seed, const char *s, size_t len);
/* n bytes from the kernel's CSPRNG. 0, or -1 if the kernel would give none. */
int random_bytes(void *dst, size_t n);
/* Replaces blanks and control characters with '?': a word that can neither
 * break a column or a space-separated record nor reach a terminal as a
 * control sequence. */
void one_word(char *s);

#endif
