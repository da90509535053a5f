/* keys.c -- Redis key names derived from a lock key (see keys.h). */
#include "keys.h"

#include <string.h>

bool key_has_hash_tag(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (!open)
        return false;
    size_t rest = len - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    return close && close > open + 1;
}

static size_t side_key(const char *key, size_t len, size_t prefix_len, const char *suffix,
                       char *out)
{
    size_t n = 0;
    bool tagged = key_has_hash_tag(key, len);
    if (!tagged) {
        memcpy(out, key, prefix_len);
        n = prefix_len;
        out[n++] = '{';
    }
    memcpy(out + n, key, len);
    n += len;
    if (!tagged)
        out[n++] = '}';
    size_t slen = strlen(suffix);
    memcpy(out + n, suffix, slen);
    n += slen;
    out[n] = '\0';
    return n;
}

size_t fence_key(const char *key, size_t len, size_t prefix_len, char *out)
{
    return side_key(key, len, prefix_len, FENCE_SUFFIX, out);
}

size_t holder_key(const char *key, size_t len, size_t prefix_len, char *out)
{
    return side_key(key, len, prefix_len, HOLDER_SUFFIX, out);
}
