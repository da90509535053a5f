/* SPDX-License-Identifier: BSD-3-Clause */
/* test_sentinel_msg.c -- unit tests of agent/backend/sentinel_msg.c: the
 * master addresses sentinels answer with and their +switch-master messages. */
#include <criterion/criterion.h>
#include <string.h>

#include "sentinel_msg.h"

static int addr_of(const char *ip, const char *port, struct redis_addr *out)
{
    return sentinel_addr(ip, strlen(ip), port, strlen(port), out);
}

static int parse(const char *msg, const char *master, struct redis_addr *to)
{
    return sentinel_switch_parse(msg, strlen(msg), master, to);
}

Test(sentinel_addr, ip_and_port)
{
    struct redis_addr a;
    cr_assert_eq(addr_of("10.0.0.2", "6379", &a), 0);
    cr_assert_str_eq(a.host, "10.0.0.2");
    cr_assert_eq(a.port, 6379);
    cr_assert_str_eq(a.path, "");
    cr_assert_eq(addr_of("::1", "1", &a), 0, "IPv6 addresses come without brackets");
    cr_assert_str_eq(a.host, "::1");
    cr_assert_eq(a.port, 1);
    cr_assert_eq(addr_of("redis-1.example.net", "65535", &a), 0);
    cr_assert_eq(a.port, 65535);
}

Test(sentinel_addr, refuses_what_is_no_address)
{
    struct redis_addr a;
    const char *bad_ports[] = {"", "0", "65536", "99999", "123456", "-1", "+80", "80a", " 80"};
    for (size_t i = 0; i < sizeof bad_ports / sizeof bad_ports[0]; i++)
        cr_assert_eq(addr_of("10.0.0.2", bad_ports[i], &a), -1, "port '%s'", bad_ports[i]);
    const char *bad_hosts[] = {"", "10.0.0.2 ", "a\tb", "a\nb", "a\x7f"};
    for (size_t i = 0; i < sizeof bad_hosts / sizeof bad_hosts[0]; i++)
        cr_assert_eq(addr_of(bad_hosts[i], "6379", &a), -1, "host %zu", i);
    char longhost[300];
    memset(longhost, 'a', sizeof longhost - 1);
    longhost[sizeof longhost - 1] = '\0';
    cr_assert_eq(addr_of(longhost, "6379", &a), -1, "a host longer than struct redis_addr holds");
    /* Not NUL-terminated: only len bytes count. */
    cr_assert_eq(sentinel_addr("10.0.0.2X", 8, "6379X", 4, &a), 0);
    cr_assert_str_eq(a.host, "10.0.0.2");
    cr_assert_eq(a.port, 6379);
}

Test(sentinel_switch, our_master)
{
    struct redis_addr to;
    cr_assert_eq(parse("mymaster 127.0.0.1 6379 127.0.0.1 6380", "mymaster", &to), 1);
    cr_assert_str_eq(to.host, "127.0.0.1");
    cr_assert_eq(to.port, 6380);
    cr_assert_eq(parse("m 10.0.0.1 7000 fe80::1 7001", "m", &to), 1);
    cr_assert_str_eq(to.host, "fe80::1");
    cr_assert_eq(to.port, 7001);
}

Test(sentinel_switch, another_master)
{
    struct redis_addr to = {.port = 42};
    cr_assert_eq(parse("other 127.0.0.1 6379 127.0.0.1 6380", "mymaster", &to), 0);
    cr_assert_eq(parse("mymaster2 127.0.0.1 6379 127.0.0.1 6380", "mymaster", &to), 0);
    cr_assert_eq(parse("my 127.0.0.1 6379 127.0.0.1 6380", "mymaster", &to), 0);
    cr_assert_eq(to.port, 42, "left alone");
}

Test(sentinel_switch, malformed)
{
    struct redis_addr to = {.port = 42};
    const char *bad[] = {
        "",
        "mymaster",
        "mymaster 127.0.0.1 6379 127.0.0.1",
        "mymaster 127.0.0.1 6379 127.0.0.1 6380 extra",
        "mymaster 127.0.0.1 6379 127.0.0.1 6380 ",
        " mymaster 127.0.0.1 6379 127.0.0.1 6380",
        "mymaster  127.0.0.1 6379 127.0.0.1 6380",
        "mymaster 127.0.0.1 6379 127.0.0.1 port",
        "mymaster 127.0.0.1 6379 127.0.0.1 0",
        "mymaster 127.0.0.1 x 127.0.0.1 6380",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(parse(bad[i], "mymaster", &to), -1, "'%s'", bad[i]);
    cr_assert_eq(to.port, 42, "left alone");
    /* Only len bytes are the message. */
    const char *msg = "mymaster 127.0.0.1 6379 127.0.0.1 6380 and more";
    cr_assert_eq(sentinel_switch_parse(msg, 38, "mymaster", &to), 1);
    cr_assert_eq(to.port, 6380);
}

Test(sentinel_addr, same)
{
    struct redis_addr a, b;
    addr_of("127.0.0.1", "6379", &a);
    addr_of("127.0.0.1", "6379", &b);
    cr_assert(sentinel_addr_same(&a, &b));
    addr_of("127.0.0.1", "6380", &b);
    cr_assert_not(sentinel_addr_same(&a, &b));
    addr_of("127.0.0.2", "6379", &b);
    cr_assert_not(sentinel_addr_same(&a, &b));
}
