/* SPDX-License-Identifier: BSD-3-Clause */
/* formats.c -- the key format of a lock name (formats.h). */
#include "formats.h"

#include <fnmatch.h>
#include <string.h>

int formats_add_redisson(struct formats *f, const char *v)
{
    unsigned n = f->nredisson;
    for (;;) {
        v += strspn(v, " \t");
        size_t len = strcspn(v, " \t");
        if (len == 0)
            break;
        if (len >= FORMATS_PATTERN_MAX || n == FORMATS_MAX_PATTERNS)
            return -1;
        memcpy(f->redisson[n], v, len);
        f->redisson[n][len] = '\0';
        n++;
        v += len;
    }
    if (n == f->nredisson)
        return -1;
    f->nredisson = n;
    return 0;
}

enum key_format formats_of(const struct formats *f, const char *name, size_t len)
{
    if (!f || f->nredisson == 0 || len > FORMATS_NAME_MAX)
        return KEY_FORMAT_DLOCK;
    char s[FORMATS_NAME_MAX + 1];
    memcpy(s, name, len);
    s[len] = '\0';
    for (unsigned i = 0; i < f->nredisson; i++)
        if (fnmatch(f->redisson[i], s, 0) == 0)
            return KEY_FORMAT_REDISSON;
    return KEY_FORMAT_DLOCK;
}

size_t redisson_channel(const char *name, size_t len, char *out)
{
    size_t p = sizeof REDISSON_CHANNEL_PREFIX - 1;
    memcpy(out, REDISSON_CHANNEL_PREFIX, p);
    memcpy(out + p, name, len);
    out[p + len] = '}';
    out[p + len + 1] = '\0';
    return p + len + 1;
}

size_t redisson_channel_name(const char *ch, size_t len, const char **name)
{
    size_t p = sizeof REDISSON_CHANNEL_PREFIX - 1;
    if (len <= p + 1 || memcmp(ch, REDISSON_CHANNEL_PREFIX, p) != 0 || ch[len - 1] != '}' ||
        memchr(ch + p, '{', len - p) || memchr(ch + p, '}', len - p - 1))
        return 0;
    *name = ch + p;
    return len - p - 1;
}
