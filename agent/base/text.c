/* SPDX-License-Identifier: BSD-3-Clause */
/* text.c -- the UTF-8 decoder and printable copies of outside strings. */
#include "text.h"

#include <string.h>

/* The smallest code point a sequence of n bytes may encode: below it the
 * form is overlong. */
static const uint32_t seq_min[5] = {0, 0, 0x80, 0x800, 0x10000};

/* The length a sequence starting with lead byte b has, 0 when b cannot lead
 * one (a continuation byte, or C0, C1, F5..FF, which lead only overlong or
 * too large forms). */
static size_t seq_len(unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf)
        return 2;
    if (b >= 0xe0 && b <= 0xef)
        return 3;
    if (b >= 0xf0 && b <= 0xf4)
        return 4;
    return 0;
}

size_t utf8_seq(const char *s, size_t len, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = seq_len(u[0]);
    if (n == 0 || n > len)
        return 0;
    uint32_t c = n == 1 ? u[0] : u[0] & (0x7fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (u[i] & 0x3fu);
    }
    if (c < seq_min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

bool text_is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
}

void text_printable(char *dst, size_t cap, const char *src)
{
    size_t len = strlen(src), out = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_seq(src + i, len - i, &cp);
        const char *put = src + i;
        size_t m = n;
        if (n == 0 || text_is_control(cp)) {
            put = "?";
            m = 1;
        }
        if (out + m >= cap)
            break;
        memcpy(dst + out, put, m);
        out += m;
        i += n ? n : 1;
    }
    dst[out] = '\0';
}

void text_info_field(const char *info, const char *field, char *out, size_t cap)
{
    out[0] = '\0';
    size_t flen = strlen(field);
    for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, field, flen) != 0 || p[flen] != ':')
            continue;
        p += flen + 1;
        size_t n = strcspn(p, "\r\n");
        if (n >= cap)
            n = cap - 1;
        memcpy(out, p, n);
        out[n] = '\0';
        return;
    }
}
