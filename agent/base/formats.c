/* SPDX-License-Identifier: BSD-3-Clause */
/* formats.c -- the key format of a lock name (formats.h). */
#include "formats.h"

#include <fnmatch.h>
#include <string.h>

int formats_add(struct formats *f, enum key_format format, const char *v)
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
        f->format[n++] = format;
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
            return f->format[i];
    return KEY_FORMAT_DLOCK;
}

size_t redisson_channel(enum key_format f, const char *name, size_t len, char *out)
{
    const char *prefix = f == KEY_FORMAT_REDISSON_RW    ? REDISSON_RW_CHANNEL_PREFIX
                         : f == KEY_FORMAT_REDISSON_SEM ? REDISSON_SEM_CHANNEL_PREFIX
                                                        : REDISSON_CHANNEL_PREFIX;
    size_t p = strlen(prefix);
    memcpy(out, prefix, p);
    memcpy(out + p, name, len);
    out[p + len] = '}';
    out[p + len + 1] = '\0';
    return p + len + 1;
}

static size_t name_after(const char *prefix, const char *ch, size_t len, const char **name)
{
    size_t p = strlen(prefix);
    if (len <= p + 1 || memcmp(ch, prefix, p) != 0 || ch[len - 1] != '}' ||
        memchr(ch + p, '{', len - p) || memchr(ch + p, '}', len - p - 1))
        return 0;
    *name = ch + p;
    return len - p - 1;
}

size_t redisson_channel_name(const char *ch, size_t len, const char **name)
{
    size_t n = name_after(REDISSON_CHANNEL_PREFIX, ch, len, name);
    if (!n)
        n = name_after(REDISSON_RW_CHANNEL_PREFIX, ch, len, name);
    return n ? n : name_after(REDISSON_SEM_CHANNEL_PREFIX, ch, len, name);
}

size_t redisson_timeout_key(const char *name, size_t len, char *out)
{
    out[0] = '{';
    memcpy(out + 1, name, len);
    memcpy(out + 1 + len, "}:timeout", sizeof "}:timeout");
    return len + sizeof "{}:timeout" - 1;
}
