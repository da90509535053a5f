/* SPDX-License-Identifier: BSD-3-Clause */
/* sentinel_msg.h -- what Redis Sentinel says, read without I/O: the
 * +switch-master message and the address of a master (docs/failover.md). */
#ifndef DLOCKD_SENTINEL_MSG_H
#define DLOCKD_SENTINEL_MSG_H

#include <stddef.h>

#include "config.h"

/* An address from the IP and port strings a sentinel gives ("10.0.0.2" and
 * "6379", or an IPv6 address without brackets). 0, or -1 when the host is
 * empty, too long or holds a blank or control character, or the port is not
 * a number from 1 to 65535. */
int sentinel_addr(const char *ip, size_t iplen, const char *port, size_t portlen,
                  struct redis_addr *out);

/* The payload of a +switch-master message, "NAME OLD-IP OLD-PORT NEW-IP
 * NEW-PORT" (single spaces), len bytes, not NUL-terminated: 1 with the new
 * address in *to when it is about the master called master, 0 when about
 * another master, -1 when malformed. */
int sentinel_switch_parse(const char *msg, size_t len, const char *master, struct redis_addr *to);

/* Whether two addresses are the same (host compared as text). */
int sentinel_addr_same(const struct redis_addr *a, const struct redis_addr *b);

#endif
