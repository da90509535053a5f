/* SPDX-License-Identifier: BSD-3-Clause */
/* sentinel_msg.c -- Sentinel's answers and messages, parsed (sentinel_msg.h). */
#include "sentinel_msg.h"

#include <string.h>

int sentinel_addr(const char *ip, size_t iplen, const char *port, size_t portlen,
                  struct redis_addr *out)
{
    if (iplen == 0 || iplen >= sizeof out->host || portlen == 0 || portlen > 5)
        return -1;
    for (size_t i = 0; i < iplen; i++)
        if ((unsigned char)ip[i] <= ' ' || ip[i] == 0x7f)
            return -1;
    unsigned long p = 0;
    for (size_t i = 0; i < portlen; i++) {
        if (port[i] < '0' || port[i] > '9')
            return -1;
        p = p * 10 + (unsigned long)(port[i] - '0');
    }
    if (p == 0 || p > 65535)
        return -1;
    memset(out, 0, sizeof *out);
    memcpy(out->host, ip, iplen);
    out->port = (int)p;
    return 0;
}

int sentinel_switch_parse(const char *msg, size_t len, const char *master, struct redis_addr *to)
{
    /* Five words separated by single spaces. */
    const char *word[5];
    size_t wlen[5];
    size_t n = 0, i = 0;
    while (n < 5) {
        size_t start = i;
        while (i < len && msg[i] != ' ')
            i++;
        if (i == start)
            return -1;
        word[n] = msg + start;
        wlen[n++] = i - start;
        if (i == len)
            break;
        i++; /* the space */
    }
    if (n != 5 || word[4] + wlen[4] != msg + len)
        return -1;
    struct redis_addr old, to_addr;
    if (sentinel_addr(word[1], wlen[1], word[2], wlen[2], &old) != 0 ||
        sentinel_addr(word[3], wlen[3], word[4], wlen[4], &to_addr) != 0)
        return -1;
    if (wlen[0] != strlen(master) || memcmp(word[0], master, wlen[0]) != 0)
        return 0;
    *to = to_addr;
    return 1;
}

int sentinel_addr_same(const struct redis_addr *a, const struct redis_addr *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0 && strcmp(a->path, b->path) == 0;
}
