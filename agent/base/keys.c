/* SPDX-License-Identifier: BSD-3-Clause */
/* keys.c -- Redis key names derived from a lock key, and hash slots (see keys.h). */
#include "keys.h"

#include <stdio.h>
#include <string.h>

uint16_t key_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/* The hash tag's bytes in *tag and its length, or 0 when key has none. */
static size_t hash_tag(const char *key, size_t len, const char **tag)
{
    const char *open = memchr(key, '{', len);
    if (!open)
        return 0;
    size_t rest = len - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (!close || close == open + 1)
        return 0; /* Redis hashes the whole key then, not a later "{...}" */
    *tag = open + 1;
    return (size_t)(close - open - 1);
}

bool key_has_hash_tag(const char *key, size_t len)
{
    const char *tag;
    return hash_tag(key, len, &tag) > 0;
}

unsigned key_slot(const char *key, size_t len)
{
    const char *tag;
    size_t tlen = hash_tag(key, len, &tag);
    if (tlen == 0) {
        tag = key;
        tlen = len;
    }
    return key_crc16(tag, tlen) % KEY_SLOTS;
}

unsigned slot_tags_build(struct slot_tags *t)
{
    memset(t, 0, sizeof *t);
    unsigned filled = 0, i = 0;
    /* Every slot is reached by i = 109757 (the unit test checks it), so the
     * loop ends long before the digits could outgrow SLOT_TAG_MAX. */
    for (; filled < KEY_SLOTS; i++) {
        char s[SLOT_TAG_MAX + 1];
        int n = snprintf(s, sizeof s, "%u", i);
        char *slot = t->tag[key_crc16(s, (size_t)n) % KEY_SLOTS];
        if (slot[0])
            continue;
        memcpy(slot, s, (size_t)n + 1);
        filled++;
    }
    return i;
}

size_t fence_hw_key_of(const struct slot_tags *t, const char *prefix, size_t prefix_len,
                       const char *key, size_t len, char *out)
{
    const char *tag = t->tag[key_slot(key, len)];
    size_t tlen = strlen(tag), n = prefix_len;
    memcpy(out, prefix, prefix_len);
    out[n++] = '{';
    memcpy(out + n, tag, tlen);
    n += tlen;
    out[n++] = '}';
    memcpy(out + n, FENCE_HW_SUFFIX, sizeof FENCE_HW_SUFFIX);
    return n + sizeof FENCE_HW_SUFFIX - 1;
}

size_t fence_hw_key(const struct slot_tags *t, const char *key, size_t len, size_t prefix_len,
                    char *out)
{
    return fence_hw_key_of(t, key, prefix_len, key, len, out);
}

size_t side_key_of(const char *prefix, size_t prefix_len, const char *key, size_t len,
                   const char *suffix, char *out)
{
    size_t n = 0;
    bool tagged = key_has_hash_tag(key, len);
    if (!tagged) {
        memcpy(out, prefix, prefix_len);
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

static size_t side_key(const char *key, size_t len, size_t prefix_len, const char *suffix,
                       char *out)
{
    return side_key_of(key, prefix_len, key, len, suffix, out);
}

size_t holder_key(const char *key, size_t len, size_t prefix_len, char *out)
{
    return side_key(key, len, prefix_len, HOLDER_SUFFIX, out);
}

size_t legacy_fence_key(const char *key, size_t len, size_t prefix_len, char *out)
{
    return side_key(key, len, prefix_len, LEGACY_FENCE_SUFFIX, out);
}

size_t waiting_key(const char *key, size_t len, size_t prefix_len, char *out)
{
    return side_key(key, len, prefix_len, WAITING_SUFFIX, out);
}

size_t readers_key(const char *key, size_t len, size_t prefix_len, char *out)
{
    return side_key(key, len, prefix_len, READERS_SUFFIX, out);
}

size_t release_channel(const char *key, size_t len, size_t prefix_len, char *out)
{
    return side_key(key, len, prefix_len, RELEASED_SUFFIX, out);
}

size_t keepalive_key(const char *prefix, size_t prefix_len, const char *id, char *out)
{
    size_t n = prefix_len;
    memcpy(out, prefix, prefix_len);
    memcpy(out + n, KEEPALIVE_INFIX, sizeof KEEPALIVE_INFIX - 1);
    n += sizeof KEEPALIVE_INFIX - 1;
    size_t ilen = strnlen(id, KEEPALIVE_EXTRA - (sizeof KEEPALIVE_INFIX - 1));
    memcpy(out + n, id, ilen);
    n += ilen;
    out[n] = '\0';
    return n;
}
