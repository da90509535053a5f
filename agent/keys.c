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

size_t fence_key(const char *key, size_t len, size_t prefix_len, char *out)
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
    memcpy(out + n, FENCE_SUFFIX, sizeof FENCE_SUFFIX - 1);
    n += sizeof FENCE_SUFFIX - 1;
    out[n] = '\0';
    return n;
}
