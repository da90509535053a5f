/* SPDX-License-Identifier: BSD-3-Clause */
/* test_config.c -- unit tests of dlockd's settings in agent/base/config.c:
 * defaults, the INI file, single keys, addresses and validation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

/* Writes text to a new temporary file; its path goes into path. */
static void write_temp(char *path, size_t len, const char *text)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/dlockd-test-XXXXXX", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp(%s) failed", path);
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    cr_assert_eq(close(fd), 0);
}

/* Loads text as a config file over c; returns config_load_file's result,
 * with its message in err. */
static int load_text(struct config *c, const char *text, char *path, size_t pathlen, char *err,
                     size_t errlen)
{
    write_temp(path, pathlen, text);
    err[0] = '\0';
    int rc = config_load_file(c, path, err, errlen);
    unlink(path);
    return rc;
}

/* Applies one key with config_set over defaults and checks it fails. */
static void expect_bad(const char *section, const char *key, const char *value)
{
    struct config c;
    config_defaults(&c);
    char err[512] = "";
    cr_assert_eq(config_set(&c, section, key, value, err, sizeof err), -1,
                 "[%s] %s = '%s' was accepted", section, key, value);
    cr_assert_neq(err[0], '\0', "no message for [%s] %s = '%s'", section, key, value);
    cr_assert_not_null(strstr(err, key), "message '%s' does not name the key %s", err, key);
}

static void expect_good(struct config *c, const char *section, const char *key, const char *value)
{
    char err[512] = "";
    cr_assert_eq(config_set(c, section, key, value, err, sizeof err), 0,
                 "[%s] %s = '%s' refused: %s", section, key, value, err);
}

/* ---- defaults ---- */

Test(defaults, documented_values)
{
    struct config c;
    memset(&c, 0x5a, sizeof c);
    config_defaults(&c);
    cr_assert_str_eq(c.socket, CONFIG_DEFAULT_SOCKET);
    cr_assert_str_eq(c.socket, "/run/dlock/dlock.sock");
    cr_assert_eq(c.socket_mode, 0660);
    cr_assert_str_eq(c.status_socket, "/run/dlock/status.sock");
    cr_assert_eq(c.status_socket_mode, 0660);
    cr_assert_str_eq(c.prefix, "dlock:");
    cr_assert_eq(c.default_ttl_ms, 30000);
    cr_assert_eq(c.min_ttl_ms, 30);
    cr_assert_eq(c.max_ttl_ms, 45000);
    cr_assert_float_eq(c.renew_fraction, 1.0 / 3.0, 1e-12);
    cr_assert_eq(c.retry_fallback_ms, 100);
    cr_assert_eq(c.retry_max_ms, 3000);
    cr_assert_eq(c.max_name_len, 200);
    cr_assert_eq(c.max_leases_per_conn, 100000);
    cr_assert_eq(c.max_waiters_per_conn, 1024);
    cr_assert_str_eq(c.metrics_names, "");
    cr_assert_eq(c.metrics_names_max, 100);
    cr_assert_eq(c.max_connections, 1024);
    cr_assert_eq(c.shutdown_timeout_ms, 2000);
    cr_assert_eq(c.log_level, LOG_INFO);
    cr_assert_str_eq(c.nodes[0].host, "127.0.0.1");
    cr_assert_eq(c.nodes[0].port, 6379);
    cr_assert_str_eq(c.nodes[0].path, "");
    cr_assert_str_eq(c.redis_user, "");
    cr_assert_str_eq(c.redis_password, "");
    cr_assert_eq(c.redis_db, 0);
    cr_assert_eq(c.connect_timeout_ms, 1000);
    cr_assert_eq(c.command_timeout_ms, 2000);
    cr_assert_eq(c.reconnect_min_ms, 50);
    cr_assert_eq(c.reconnect_max_ms, 2000);
    cr_assert_eq(c.nnodes, 1);
    cr_assert_eq(c.node_timeout_ms, 20);
    cr_assert_eq(c.mode, REDIS_MODE_SINGLE);
}

Test(defaults, pass_validation)
{
    struct config c;
    config_defaults(&c);
    char err[256] = "";
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "defaults rejected: %s", err);
}

/* ---- the file ---- */

Test(file, every_documented_key_lands_in_the_struct)
{
    static const char text[] = "; every key of packaging/dlockd.conf, none at its default\n"
                               "[agent]\n"
                               "socket = /tmp/dl/agent.sock\n"
                               "socket_mode = 0600\n"
                               "status_socket = /tmp/dl/status.sock\n"
                               "status_socket_mode = 0640\n"
                               "metrics_listen = 127.0.0.1:9464\n"
                               "metrics_names = batch.*\n"
                               "metrics_names_max = 7\n"
                               "status_socket_group = 0\n"
                               "prefix = myapp:locks:\n"
                               "default_ttl_ms = 15000\n"
                               "min_ttl_ms = 20\n"
                               "max_ttl_ms = 3600000\n"
                               "renew_fraction = 0.25\n"
                               "retry_fallback_ms = 250\n"
                               "max_name_len = 512\n"
                               "max_leases_per_conn = 77\n"
                               "max_waiters_per_conn = 88\n"
                               "max_connections = 99\n"
                               "shutdown_timeout_ms = 4500\n"
                               "log_level = debug\n"
                               "\n"
                               "[redis]\n"
                               "address = redis.example.net:7000\n"
                               "user = locker\n"
                               "password = s3cret!pw\n"
                               "database = 5\n"
                               "connect_timeout_ms = 1500\n"
                               "command_timeout_ms = 2500\n"
                               "reconnect_min_ms = 20\n"
                               "reconnect_max_ms = 9000\n"
                               "node_timeout_ms = 15\n";
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), 0, "load failed: %s",
                 err);
    cr_assert_str_eq(c.socket, "/tmp/dl/agent.sock");
    cr_assert_eq(c.socket_mode, 0600);
    cr_assert_str_eq(c.status_socket, "/tmp/dl/status.sock");
    cr_assert_eq(c.status_socket_mode, 0640);
    cr_assert_str_eq(c.metrics_listen, "127.0.0.1:9464");
    cr_assert_str_eq(c.metrics_names, "batch.*");
    cr_assert_eq(c.metrics_names_max, 7);
    cr_assert_str_eq(c.status_socket_group, "0");
    cr_assert_str_eq(c.prefix, "myapp:locks:");
    cr_assert_eq(c.default_ttl_ms, 15000);
    cr_assert_eq(c.min_ttl_ms, 20);
    cr_assert_eq(c.max_ttl_ms, 3600000);
    cr_assert_float_eq(c.renew_fraction, 0.25, 1e-12);
    cr_assert_eq(c.retry_fallback_ms, 250);
    cr_assert_eq(c.max_name_len, 512);
    cr_assert_eq(c.max_leases_per_conn, 77);
    cr_assert_eq(c.max_waiters_per_conn, 88);
    cr_assert_eq(c.max_connections, 99);
    cr_assert_eq(c.shutdown_timeout_ms, 4500);
    cr_assert_eq(c.log_level, LOG_DEBUG);
    cr_assert_str_eq(c.nodes[0].host, "redis.example.net");
    cr_assert_eq(c.nodes[0].port, 7000);
    cr_assert_str_eq(c.nodes[0].path, "");
    cr_assert_str_eq(c.redis_user, "locker");
    cr_assert_str_eq(c.redis_password, "s3cret!pw");
    cr_assert_eq(c.redis_db, 5);
    cr_assert_eq(c.connect_timeout_ms, 1500);
    cr_assert_eq(c.command_timeout_ms, 2500);
    cr_assert_eq(c.reconnect_min_ms, 20);
    cr_assert_eq(c.reconnect_max_ms, 9000);
    cr_assert_eq(c.node_timeout_ms, 15);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(file, keys_not_in_the_file_keep_their_values)
{
    struct config c, d;
    config_defaults(&c);
    config_defaults(&d);
    char path[256], err[512];
    cr_assert_eq(
        load_text(&c, "[agent]\nmax_connections = 5\n", path, sizeof path, err, sizeof err), 0,
        "%s", err);
    cr_assert_eq(c.max_connections, 5);
    d.max_connections = 5;
    cr_assert_eq(memcmp(&c, &d, sizeof c), 0, "other settings changed");
}

/* Whether the file names the status socket decides whether dlockd puts
 * it beside the client socket (agent/shell/main.c): an empty value counts. */
Test(set, status_socket_given_even_empty)
{
    struct config c;
    config_defaults(&c);
    cr_assert_not(c.status_socket_set);
    expect_good(&c, "agent", "socket", "/tmp/a.sock");
    cr_assert_not(c.status_socket_set);
    expect_good(&c, "agent", "status_socket", "");
    cr_assert(c.status_socket_set);
    cr_assert_str_eq(c.status_socket, "");
}

Test(file, empty_file_and_comments_only_are_fine)
{
    struct config c, d;
    config_defaults(&c);
    config_defaults(&d);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, "", path, sizeof path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(load_text(&c, "; nothing\n# here\n\n[agent]\n[redis]\n", path, sizeof path, err,
                           sizeof err),
                 0, "%s", err);
    cr_assert_eq(memcmp(&c, &d, sizeof c), 0);
}

Test(file, unix_address_and_unix_socket_path)
{
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, "[redis]\naddress = unix:/var/run/redis/redis.sock\n", path,
                           sizeof path, err, sizeof err),
                 0, "%s", err);
    cr_assert_str_eq(c.nodes[0].path, "/var/run/redis/redis.sock");
    cr_assert_str_eq(c.nodes[0].host, "");
}

/* The warnings of config_warnings(), one per line. */
static char warned[4096];

static void collect_warning(void *arg, const char *msg)
{
    (void)arg;
    size_t n = strlen(warned);
    snprintf(warned + n, sizeof warned - n, "%s\n", msg);
}

/* How many warnings c gets, their text in warned. */
static int warnings_of(const struct config *c)
{
    warned[0] = '\0';
    return config_warnings(c, collect_warning, NULL);
}

/* The source tree: from the build (unit.cmake), else from this file's path. */
static void source_file(char *buf, size_t len, const char *rel)
{
#ifdef DLOCK_SOURCE_DIR
    snprintf(buf, len, "%s/%s", DLOCK_SOURCE_DIR, rel);
#else
    const char *me = __FILE__, *tail = strstr(me, "tests/test_config.c");
    int dirlen = tail ? (int)(tail - me) : 0;
    snprintf(buf, len, "%.*s%s", dirlen, me, rel);
#endif
}

/* The packaged example file documents the defaults: it must load, and give
 * exactly the built-in settings. */
Test(file, packaged_dlockd_conf_matches_defaults)
{
    char path[1024];
    source_file(path, sizeof path, "packaging/dlockd.conf");
    if (access(path, R_OK) != 0)
        cr_skip_test("%s not readable", path);
    struct config c, d;
    memset(&c, 0, sizeof c);
    config_defaults(&c);
    config_defaults(&d);
    /* Start from something else, so every key must really be read. */
    c.default_ttl_ms = 1;
    c.socket_mode = 0;
    c.renew_fraction = 0;
    c.nodes[0].port = 1;
    char err[512] = "";
    cr_assert_eq(config_load_file(&c, path, err, sizeof err), 0, "%s", err);
    cr_assert_float_eq(c.renew_fraction, d.renew_fraction, 1e-4);
    c.renew_fraction = d.renew_fraction;
    /* The package gives the client socket to its group; an ad hoc agent
     * needs no such group. */
    cr_assert_str_eq(c.socket_group, "dlock");
    memcpy(c.socket_group, d.socket_group, sizeof c.socket_group);
    /* It names the status socket that goes beside the client socket anyway. */
    cr_assert(c.status_socket_set);
    c.status_socket_set = d.status_socket_set;
    cr_assert_eq(memcmp(&c, &d, sizeof c), 0, "%s does not spell out the defaults", path);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_warnings(&c, collect_warning, NULL), 0, "warned: %s", warned);
}

Test(file, unknown_key_names_file_line_and_key)
{
    static const char text[] = "; comment\n"
                               "[agent]\n"
                               "max_connections = 10\n"
                               "\n"
                               "frobnicate = yes\n";
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), -1);
    char want[300];
    snprintf(want, sizeof want, "%s:5:", path);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert_not_null(strstr(err, "frobnicate"), "message '%s' lacks the key", err);
}

Test(file, key_in_the_wrong_section_is_unknown)
{
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(
        load_text(&c, "[redis]\nmax_connections = 10\n", path, sizeof path, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, ":2:"), "%s", err);
    cr_assert_not_null(strstr(err, "max_connections"), "%s", err);
    cr_assert_eq(
        load_text(&c, "[agent]\naddress = localhost:1\n", path, sizeof path, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "address"), "%s", err);
    /* A key before any section. */
    cr_assert_eq(load_text(&c, "socket = /x\n", path, sizeof path, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, ":1:"), "%s", err);
    /* An unknown section. */
    cr_assert_eq(load_text(&c, "[agnet]\nsocket = /x\n", path, sizeof path, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "agnet"), "%s", err);
}

Test(file, bad_value_names_file_line_key_and_value)
{
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(
        load_text(&c, "[agent]\n\n\nmax_name_len = 12x\n", path, sizeof path, err, sizeof err), -1);
    char want[300];
    snprintf(want, sizeof want, "%s:4:", path);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert_not_null(strstr(err, "max_name_len"), "%s", err);
    cr_assert_not_null(strstr(err, "12x"), "%s", err);
}

Test(file, syntax_error_names_the_line)
{
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, "[agent]\nthis line has no equals sign\n", path, sizeof path, err,
                           sizeof err),
                 -1);
    char want[300];
    snprintf(want, sizeof want, "%s:2:", path);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
}

/* With two bad lines, the message must describe one error consistently: the
 * line number and the key must belong to the same line. */
Test(file, two_errors_message_line_matches_key)
{
    static const char text[] = "[agent]\n"
                               "bogus_first = 1\n"         /* line 2 */
                               "max_connections = 10\n"    /* line 3 */
                               "max_name_len = notanum\n"; /* line 4 */
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), -1);
    char line2[300], line4[300];
    snprintf(line2, sizeof line2, "%s:2:", path);
    snprintf(line4, sizeof line4, "%s:4:", path);
    bool says2 = strstr(err, line2) != NULL, says4 = strstr(err, line4) != NULL;
    cr_assert(says2 || says4, "message '%s' names neither line 2 nor line 4", err);
    if (says2)
        cr_assert_not_null(strstr(err, "bogus_first"),
                           "message '%s' gives line 2 but describes another line's key", err);
    else
        cr_assert_not_null(strstr(err, "max_name_len"),
                           "message '%s' gives line 4 but describes another line's key", err);
}

Test(file, syntax_error_then_bad_key_message_is_consistent)
{
    static const char text[] = "[agent]\n"
                               "garbage without equals\n" /* line 2 */
                               "frobnicate = 1\n";        /* line 3 */
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), -1);
    char line2[300];
    snprintf(line2, sizeof line2, "%s:2:", path);
    if (strstr(err, line2))
        cr_assert_null(strstr(err, "frobnicate"),
                       "message '%s' gives line 2 but describes line 3's key", err);
}

Test(file, missing_file_cannot_open)
{
    struct config c;
    config_defaults(&c);
    char err[512] = "";
    const char *path = "/nonexistent-dir-dlock/dlockd.conf";
    cr_assert_eq(config_load_file(&c, path, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "cannot open"), "message '%s'", err);
    cr_assert_not_null(strstr(err, path), "message '%s' lacks the path", err);
}

/* A directory opens with fopen() but cannot be read: that is an error, not
 * an empty file. */
Test(file, directory_is_not_an_empty_config)
{
    const char *tmp = getenv("TMPDIR");
    char dir[256];
    snprintf(dir, sizeof dir, "%s/dlockd-test-dir-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(dir));
    struct config c;
    config_defaults(&c);
    char err[512] = "";
    int rc = config_load_file(&c, dir, err, sizeof err);
    rmdir(dir);
    cr_assert_eq(rc, -1, "loading the directory %s succeeded", dir);
    cr_assert_not_null(strstr(err, dir), "message '%s' lacks the path", err);
}

Test(file, message_is_truncated_safely)
{
    struct config c;
    config_defaults(&c);
    char path[256], err[16];
    memset(err, 'x', sizeof err);
    cr_assert_eq(load_text(&c, "[agent]\nfrobnicate = 1\n", path, sizeof path, err, sizeof err),
                 -1);
    cr_assert_lt(strlen(err), sizeof err);
}

/* ---- single keys ---- */

Test(set, numbers_accept_full_u32_range)
{
    struct config c;
    config_defaults(&c);
    expect_good(&c, "agent", "max_connections", "0");
    cr_assert_eq(c.max_connections, 0);
    expect_good(&c, "agent", "max_connections", "4294967295");
    cr_assert_eq(c.max_connections, UINT32_MAX);
    expect_good(&c, "agent", "max_connections", "007");
    cr_assert_eq(c.max_connections, 7, "numbers are decimal, not octal");
    expect_good(&c, "redis", "reconnect_max_ms", "123456");
    cr_assert_eq(c.reconnect_max_ms, 123456);
}

Test(set, bad_numbers)
{
    static const char *const keys[][2] = {
        {"agent", "default_ttl_ms"},       {"agent", "min_ttl_ms"},
        {"agent", "max_ttl_ms"},           {"agent", "retry_fallback_ms"},
        {"agent", "max_name_len"},         {"agent", "max_leases_per_conn"},
        {"agent", "max_waiters_per_conn"}, {"agent", "max_connections"},
        {"agent", "shutdown_timeout_ms"},  {"redis", "connect_timeout_ms"},
        {"redis", "command_timeout_ms"},   {"redis", "reconnect_min_ms"},
        {"redis", "reconnect_max_ms"},
    };
    static const char *const bad[] = {
        "-1",
        "-0",
        "-4294967295",
        "4294967296",
        "99999999999999999999",
        "18446744073709551616",
        "12abc",
        "12 ",
        "1.5",
        "1e3",
        "0x10",
        "",
        "abc",
        "ten",
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        struct config c;
        config_defaults(&c);
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
            expect_bad(keys[k][0], keys[k][1], bad[b]);
        /* and each key takes a good number */
        expect_good(&c, keys[k][0], keys[k][1], "1234");
    }
}

Test(set, failed_number_leaves_value_alone)
{
    struct config c;
    config_defaults(&c);
    char err[256];
    cr_assert_eq(config_set(&c, "agent", "max_connections", "4294967296", err, sizeof err), -1);
    cr_assert_eq(c.max_connections, 1024);
    cr_assert_eq(config_set(&c, "agent", "max_connections", "-5", err, sizeof err), -1);
    cr_assert_eq(c.max_connections, 1024);
}

Test(set, socket_mode_is_octal_up_to_0777)
{
    struct config c;
    config_defaults(&c);
    expect_good(&c, "agent", "socket_mode", "0600");
    cr_assert_eq(c.socket_mode, 0600);
    expect_good(&c, "agent", "socket_mode", "660");
    cr_assert_eq(c.socket_mode, 0660);
    expect_good(&c, "agent", "socket_mode", "0777");
    cr_assert_eq(c.socket_mode, 0777);
    expect_good(&c, "agent", "socket_mode", "0");
    cr_assert_eq(c.socket_mode, 0);
    static const char *const bad[] = {"01000", "1777", "0800", "0659",  "9",         "rw-rw----",
                                      "0x1ff", "-1",   "",     "0660x", "4294967296"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad("agent", "socket_mode", bad[i]);
}

Test(set, log_levels)
{
    struct config c;
    config_defaults(&c);
    static const struct {
        const char *text;
        int level;
    } good[] = {
        {"error", LOG_ERROR}, {"warn", LOG_WARN},   {"info", LOG_INFO},
        {"debug", LOG_DEBUG}, {"DEBUG", LOG_DEBUG}, {"Warn", LOG_WARN},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        expect_good(&c, "agent", "log_level", good[i].text);
        cr_assert_eq(c.log_level, good[i].level, "%s", good[i].text);
    }
    static const char *const bad[] = {"verbose", "warning", "", "2", "info ", "err", "trace"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad("agent", "log_level", bad[i]);
}

Test(set, log_format)
{
    struct config c;
    config_defaults(&c);
    cr_assert_str_eq(c.log_format, "plain");
    static const struct {
        const char *text, *stored;
    } good[] = {{"json", "json"}, {"logfmt", "logfmt"}, {"PLAIN", "plain"}, {"Json", "json"}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        expect_good(&c, "agent", "log_format", good[i].text);
        cr_assert_str_eq(c.log_format, good[i].stored, "%s", good[i].text);
    }
    static const char *const bad[] = {"text", "", "jsonl", "json ", "syslog"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad("agent", "log_format", bad[i]);
    char err[512] = "";
    cr_assert_eq(config_set(&c, "agent", "log_format", "xml", err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "plain, logfmt or json"), "%s", err);
}

Test(set, renew_fraction)
{
    struct config c;
    config_defaults(&c);
    expect_good(&c, "agent", "renew_fraction", "0.5");
    cr_assert_float_eq(c.renew_fraction, 0.5, 1e-12);
    expect_good(&c, "agent", "renew_fraction", ".25");
    cr_assert_float_eq(c.renew_fraction, 0.25, 1e-12);
    static const char *const bad[] = {"", "abc", "0.5x", "0,5", "half"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad("agent", "renew_fraction", bad[i]);
}

Test(set, strings_and_their_limits)
{
    struct config c;
    config_defaults(&c);
    char big[300];

    /* socket: up to 107 bytes (sun_path) */
    memset(big, 's', sizeof big);
    big[0] = '/';
    big[107] = '\0';
    expect_good(&c, "agent", "socket", big);
    cr_assert_eq(strlen(c.socket), 107);
    big[107] = 's';
    big[108] = '\0';
    expect_bad("agent", "socket", big);

    /* prefix: non-empty, up to 127 bytes */
    memset(big, 'p', sizeof big);
    big[127] = '\0';
    expect_good(&c, "agent", "prefix", big);
    cr_assert_eq(strlen(c.prefix), 127);
    big[127] = 'p';
    big[128] = '\0';
    expect_bad("agent", "prefix", big);
    expect_bad("agent", "prefix", "");

    /* user up to 127, password up to 255; both may be empty */
    memset(big, 'u', sizeof big);
    big[127] = '\0';
    expect_good(&c, "redis", "user", big);
    cr_assert_eq(strlen(c.redis_user), 127);
    big[127] = 'u';
    big[128] = '\0';
    expect_bad("redis", "user", big);
    expect_good(&c, "redis", "user", "");
    cr_assert_str_eq(c.redis_user, "");

    memset(big, 'w', sizeof big);
    big[255] = '\0';
    expect_good(&c, "redis", "password", big);
    cr_assert_eq(strlen(c.redis_password), 255);
    big[255] = 'w';
    big[256] = '\0';
    expect_bad("redis", "password", big);
    expect_good(&c, "redis", "password", "");
    cr_assert_str_eq(c.redis_password, "");
}

Test(set, database)
{
    struct config c;
    config_defaults(&c);
    expect_good(&c, "redis", "database", "15");
    cr_assert_eq(c.redis_db, 15);
    expect_good(&c, "redis", "database", "1000000");
    cr_assert_eq(c.redis_db, 1000000);
    static const char *const bad[] = {"-1", "1000001", "4294967295", "x", "", "3x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad("redis", "database", bad[i]);
}

Test(set, address)
{
    struct config c;
    config_defaults(&c);
    expect_good(&c, "redis", "address", "10.1.2.3:6380");
    cr_assert_str_eq(c.nodes[0].host, "10.1.2.3");
    cr_assert_eq(c.nodes[0].port, 6380);
    expect_good(&c, "redis", "address", "unix:/tmp/redis.sock");
    cr_assert_str_eq(c.nodes[0].path, "/tmp/redis.sock");
    cr_assert_str_eq(c.nodes[0].host, "");
    /* Back to TCP: the old unix path must not linger. */
    expect_good(&c, "redis", "address", "localhost:6379");
    cr_assert_str_eq(c.nodes[0].path, "");
    cr_assert_str_eq(c.nodes[0].host, "localhost");
    static const char *const bad[] = {"localhost",  "localhost:", ":6379", "host:0",
                                      "host:70000", "unix:",      "",      "host:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad("redis", "address", bad[i]);
    /* A refused address leaves the previous one. */
    char err[256];
    cr_assert_eq(config_set(&c, "redis", "address", "host:0", err, sizeof err), -1);
    cr_assert_str_eq(c.nodes[0].host, "localhost");
    cr_assert_eq(c.nodes[0].port, 6379);
}

Test(set, address_list)
{
    struct config c;
    config_defaults(&c);
    expect_good(&c, "redis", "address", "unix:/r/a.sock, 10.0.0.2:6379,\t[::1]:7000");
    cr_assert_eq(c.nnodes, 3);
    cr_assert_str_eq(c.nodes[0].path, "/r/a.sock");
    cr_assert_str_eq(c.nodes[1].host, "10.0.0.2");
    cr_assert_eq(c.nodes[1].port, 6379);
    cr_assert_str_eq(c.nodes[2].host, "::1");
    cr_assert_eq(c.nodes[2].port, 7000);
    /* Separators: commas, blanks, or both, leading and trailing too. */
    expect_good(&c, "redis", "address", " a:1 b:2,c:3,, d:4 e:5 ,");
    cr_assert_eq(c.nnodes, 5);
    cr_assert_str_eq(c.nodes[4].host, "e");
    expect_good(&c, "redis", "address", "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9");
    cr_assert_eq(c.nnodes, CONFIG_MAX_NODES);
    /* One address again: single-node mode. */
    expect_good(&c, "redis", "address", "solo:6379");
    cr_assert_eq(c.nnodes, 1);
    /* Too many, empty, or one bad entry: refused, the list left alone. */
    static const char *const bad[] = {"a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9,j:10", ",", " , ",
                                      "a:1, b, c:3", "a:1,,host:0"};
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(config_set(&c, "redis", "address", bad[i], err, sizeof err), -1, "took '%s'",
                     bad[i]);
        cr_assert_eq(c.nnodes, 1);
        cr_assert_str_eq(c.nodes[0].host, "solo");
    }
}

Test(file, address_lines_add_up_to_nine_nodes)
{
    /* Repeated address lines, and indented continuation lines, add nodes:
     * a list of 9 long host names does not fit on one parser line. */
    static const char text[] = "[redis]\n"
                               "address = redis-a.example.net:6379, redis-b.example.net:6379\n"
                               "address = redis-c.example.net:6379\n"
                               "  redis-d.example.net:6379, redis-e.example.net:6379\n";
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.nnodes, 5);
    cr_assert_str_eq(c.nodes[0].host, "redis-a.example.net");
    cr_assert_str_eq(c.nodes[2].host, "redis-c.example.net");
    cr_assert_str_eq(c.nodes[4].host, "redis-e.example.net");
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    /* A second file starts a new list. */
    cr_assert_eq(load_text(&c, "[redis]\naddress = solo:1\n", path, sizeof path, err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(c.nnodes, 1);
    /* A tenth node is refused, naming the line. */
    static const char ten[] = "[redis]\n"
                              "address = a:1, b:2, c:3, d:4, e:5\n"
                              "address = f:6, g:7, h:8, i:9\n"
                              "address = j:10\n";
    cr_assert_eq(load_text(&c, ten, path, sizeof path, err, sizeof err), -1);
    cr_assert(strstr(err, ":4: [redis] address") && strstr(err, "at most 9"), "%s", err);
}

Test(file, overlong_line_is_named)
{
    char text[600];
    int n = snprintf(text, sizeof text, "[redis]\naddress = ");
    for (int i = 0; i < 9; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "%sredis-%c.example.net:6379",
                      i ? ", " : "", 'a' + i);
    snprintf(text + n, sizeof text - (size_t)n, "\n");
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), -1);
    cr_assert(strstr(err, ":2: line longer than"), "%s", err);
    /* A line that just fills the parser's buffer is whole. */
    int max = 0;
    cr_assert_eq(sscanf(strstr(err, "longer than ") + 12, "%d", &max), 1, "%s", err);
    n = snprintf(text, sizeof text, "; ");
    while (n < max)
        text[n++] = 'x';
    snprintf(text + n, sizeof text - (size_t)n, "\n[redis]\naddress = unix:/r.sock\n");
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(c.nodes[0].path, "/r.sock");
}

Test(set, unknown_keys_and_sections)
{
    struct config c, d;
    config_defaults(&c);
    config_defaults(&d);
    char err[256] = "";
    cr_assert_eq(config_set(&c, "agent", "nope", "1", err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "nope"), "%s", err);
    cr_assert_eq(config_set(&c, "redis", "socket", "/x", err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "socket"), "%s", err);
    cr_assert_eq(config_set(&c, "Agent", "socket", "/x", err, sizeof err), -1);
    cr_assert_eq(config_set(&c, "", "socket", "/x", err, sizeof err), -1);
    cr_assert_eq(config_set(&c, "other", "max_connections", "1", err, sizeof err), -1);
    cr_assert_eq(memcmp(&c, &d, sizeof c), 0, "an unknown key changed the config");
}

/* ---- addresses ---- */

Test(addr, host_and_port)
{
    struct redis_addr a;
    memset(&a, 0x55, sizeof a);
    cr_assert_eq(config_parse_addr("127.0.0.1:6379", &a), 0);
    cr_assert_str_eq(a.host, "127.0.0.1");
    cr_assert_eq(a.port, 6379);
    cr_assert_str_eq(a.path, "");
    cr_assert_eq(config_parse_addr("redis-1.internal:1", &a), 0);
    cr_assert_str_eq(a.host, "redis-1.internal");
    cr_assert_eq(a.port, 1);
    cr_assert_eq(config_parse_addr("h:65535", &a), 0);
    cr_assert_str_eq(a.host, "h");
    cr_assert_eq(a.port, 65535);
}

Test(addr, bracketed_ipv6)
{
    struct redis_addr a;
    cr_assert_eq(config_parse_addr("[::1]:6379", &a), 0);
    cr_assert_str_eq(a.host, "::1");
    cr_assert_eq(a.port, 6379);
    cr_assert_str_eq(a.path, "");
    cr_assert_eq(config_parse_addr("[fe80::1:2:3]:7000", &a), 0);
    cr_assert_str_eq(a.host, "fe80::1:2:3");
    cr_assert_eq(a.port, 7000);
}

Test(addr, unix_path)
{
    struct redis_addr a;
    memset(&a, 0x55, sizeof a);
    cr_assert_eq(config_parse_addr("unix:/var/run/redis.sock", &a), 0);
    cr_assert_str_eq(a.path, "/var/run/redis.sock");
    cr_assert_str_eq(a.host, "");
    cr_assert_eq(a.port, 0);
    /* Colons inside the path are part of it. */
    cr_assert_eq(config_parse_addr("unix:/tmp/a:b", &a), 0);
    cr_assert_str_eq(a.path, "/tmp/a:b");
    /* The longest path that fits sun_path: 107 bytes. */
    char text[300] = "unix:";
    memset(text + 5, 'p', 107);
    text[5] = '/';
    text[5 + 107] = '\0';
    cr_assert_eq(config_parse_addr(text, &a), 0);
    cr_assert_eq(strlen(a.path), 107);
}

Test(addr, rejections_leave_output_alone)
{
    char longpath[300] = "unix:/";
    memset(longpath + 6, 'p', 107);
    longpath[6 + 107] = '\0'; /* 108-byte path */
    char longhost[400];
    memset(longhost, 'h', 256);
    strcpy(longhost + 256, ":6379"); /* 256-byte host */
    const char *bad[] = {
        "localhost",  /* no port */
        "localhost:", /* empty port */
        ":6379",      /* empty host */
        "[]:6379",    /* empty bracketed host */
        "host:0",     /* port 0 */
        "host:70000", /* port too big */
        "host:65536", /* port too big */
        "host:-1",    /* negative */
        "host:63x",   /* junk */
        "host:99999999999999999999",
        "unix:",  /* empty path */
        longpath, /* path too long */
        longhost, /* host too long */
        "",       /* nothing */
        "[::1]",  /* v6 without a port */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct redis_addr a, before;
        memset(&a, 0x5a, sizeof a);
        memcpy(&before, &a, sizeof a);
        cr_assert_eq(config_parse_addr(bad[i], &a), -1, "'%s' accepted", bad[i]);
        cr_assert_eq(memcmp(&a, &before, sizeof a), 0, "'%s' changed the output", bad[i]);
    }
    /* 255-byte host is the longest that fits. */
    struct redis_addr a;
    memset(longhost, 'h', 255);
    strcpy(longhost + 255, ":6379");
    cr_assert_eq(config_parse_addr(longhost, &a), 0);
    cr_assert_eq(strlen(a.host), 255);
}

Test(addr, formatting_round_trips)
{
    static const char *const texts[] = {"127.0.0.1:6379", "redis.example:7001", "[::1]:6379",
                                        "unix:/run/redis/redis.sock"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        struct redis_addr a, b;
        char buf[512];
        cr_assert_eq(config_parse_addr(texts[i], &a), 0);
        const char *s = config_addr_str(&a, buf, sizeof buf);
        cr_assert_eq(s, buf);
        cr_assert_eq(config_parse_addr(s, &b), 0, "'%s' formatted as unparsable '%s'", texts[i], s);
        cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "'%s' -> '%s' is not the same address", texts[i],
                     s);
    }
    struct redis_addr a;
    char buf[64];
    config_parse_addr("127.0.0.1:6379", &a);
    cr_assert_str_eq(config_addr_str(&a, buf, sizeof buf), "127.0.0.1:6379");
    config_parse_addr("unix:/tmp/r.sock", &a);
    cr_assert_str_eq(config_addr_str(&a, buf, sizeof buf), "unix:/tmp/r.sock");
    /* A short buffer truncates, NUL-terminated. */
    char tiny[6];
    config_parse_addr("127.0.0.1:6379", &a);
    cr_assert_str_eq(config_addr_str(&a, tiny, sizeof tiny), "127.0");
}

/* ---- validation ---- */

/* Applies a change to the defaults and checks validation refuses it with a
 * message containing what. */
#define EXPECT_INVALID(what, ...)                                                                  \
    do {                                                                                           \
        struct config c_;                                                                          \
        config_defaults(&c_);                                                                      \
        __VA_ARGS__;                                                                               \
        char err_[256] = "";                                                                       \
        cr_assert_eq(config_validate(&c_, err_, sizeof err_), -1, "accepted: %s", #__VA_ARGS__);   \
        cr_assert_not_null(strstr(err_, what), "for %s: message '%s' lacks '%s'", #__VA_ARGS__,    \
                           err_, what);                                                            \
    } while (0)

#define EXPECT_VALID(...)                                                                          \
    do {                                                                                           \
        struct config c_;                                                                          \
        config_defaults(&c_);                                                                      \
        __VA_ARGS__;                                                                               \
        char err_[256] = "";                                                                       \
        cr_assert_eq(config_validate(&c_, err_, sizeof err_), 0, "refused %s: %s", #__VA_ARGS__,   \
                     err_);                                                                        \
    } while (0)

Test(validate, ttl_ranges)
{
    EXPECT_INVALID("min_ttl_ms", c_.min_ttl_ms = 5000, c_.max_ttl_ms = 4000,
                   c_.default_ttl_ms = 4500);
    EXPECT_INVALID("min_ttl_ms", c_.min_ttl_ms = 9);
    EXPECT_INVALID("min_ttl_ms", c_.min_ttl_ms = 0);
    EXPECT_INVALID("default_ttl_ms", c_.default_ttl_ms = 29);
    EXPECT_INVALID("default_ttl_ms", c_.default_ttl_ms = 86400001);
    EXPECT_INVALID("default_ttl_ms", c_.default_ttl_ms = 0);
    EXPECT_VALID(c_.min_ttl_ms = 10, c_.renew_fraction = 0.05);
    EXPECT_VALID(c_.min_ttl_ms = c_.max_ttl_ms = c_.default_ttl_ms = 1000);
    EXPECT_VALID(c_.default_ttl_ms = c_.min_ttl_ms);
    EXPECT_VALID(c_.default_ttl_ms = c_.max_ttl_ms);
    EXPECT_VALID(c_.max_ttl_ms = 604800000);
    EXPECT_INVALID("max_ttl_ms = 604800001: must be between 10 and 604800000",
                   c_.max_ttl_ms = 604800001);
    /* Bounded by the others, the message gives the values they allow. */
    EXPECT_INVALID("default_ttl_ms = 29: must be between 30 and 45000", c_.default_ttl_ms = 29);
    EXPECT_INVALID("min_ttl_ms = 5000: must not exceed max_ttl_ms (4000)", c_.min_ttl_ms = 5000,
                   c_.max_ttl_ms = 4000, c_.default_ttl_ms = 4000);
}

/* n distinct nodes (same host, ports 7000 + i). */
static void nodes_n(struct config *c, unsigned n)
{
    for (unsigned i = 0; i < n && i < CONFIG_MAX_NODES; i++) {
        config_parse_addr("10.0.0.1:7000", &c->nodes[i]);
        c->nodes[i].port += (int)i;
    }
    c->nnodes = n;
}

Test(validate, quorum_node_count_is_odd_3_to_9)
{
    EXPECT_INVALID("odd number", nodes_n(&c_, 2));
    EXPECT_INVALID("odd number", nodes_n(&c_, 4));
    EXPECT_INVALID("odd number", nodes_n(&c_, 8));
    EXPECT_INVALID("odd number", nodes_n(&c_, 0));
    EXPECT_VALID(nodes_n(&c_, 3));
    EXPECT_VALID(nodes_n(&c_, 5));
    EXPECT_VALID(nodes_n(&c_, 9));
}

/* The mode is chosen by validation, from the node count, each time: one
 * node is single-node mode, an odd number from 3 to 9 quorum mode, and any
 * other count is refused and leaves no quorum mode behind. */
Test(validate, mode_from_node_count)
{
    struct config c;
    config_defaults(&c);
    char err[256] = "";
    for (unsigned n = 0; n <= CONFIG_MAX_NODES; n++) {
        nodes_n(&c, n);
        c.mode = REDIS_MODE_QUORUM; /* left over: must not stay */
        int rc = config_validate(&c, err, sizeof err);
        if (n == 1) {
            cr_assert_eq(rc, 0, "1 node: %s", err);
            cr_assert_eq(c.mode, REDIS_MODE_SINGLE);
        } else if (n >= 3 && n % 2 == 1) {
            cr_assert_eq(rc, 0, "%u nodes: %s", n, err);
            cr_assert_eq(c.mode, REDIS_MODE_QUORUM, "%u nodes", n);
        } else {
            cr_assert_eq(rc, -1, "%u nodes accepted", n);
            cr_assert_eq(c.mode, REDIS_MODE_SINGLE, "%u nodes", n);
        }
    }
    /* From a list of addresses, and back to one. */
    cr_assert_eq(config_parse_nodes(&c, "a:1, b:2, c:3", false), 0);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.mode, REDIS_MODE_QUORUM);
    cr_assert_eq(config_parse_nodes(&c, "a:1", false), 0);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.mode, REDIS_MODE_SINGLE);
}

/* The status answers' "mode" (docs/status.md) is the mode chosen: one of
 * four words, never "auto". */
Test(validate, the_mode_status_shows_is_the_one_chosen)
{
    static const struct {
        const char *setting;
        unsigned nodes;
        const char *shown;
    } cases[] = {
        {"auto", 1, "single"},       {"auto", 3, "quorum"},     {"single", 1, "single"},
        {"quorum", 5, "quorum"},     {"cluster", 3, "cluster"}, {"sentinel", 1, "sentinel"},
        {"sentinel", 3, "sentinel"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct config c;
        config_defaults(&c);
        nodes_n(&c, cases[i].nodes);
        expect_good(&c, "redis", "mode", cases[i].setting);
        if (strcmp(cases[i].setting, "sentinel") == 0)
            expect_good(&c, "redis", "sentinel_master", "m");
        char err[256] = "";
        cr_assert_eq(config_validate(&c, err, sizeof err), 0, "mode = %s, %u node(s): %s",
                     cases[i].setting, cases[i].nodes, err);
        cr_assert_str_eq(config_mode_name(c.mode), cases[i].shown, "mode = %s, %u node(s)",
                         cases[i].setting, cases[i].nodes);
    }
}

Test(validate, a_node_listed_twice)
{
    struct config c;
    config_defaults(&c);
    char err[256] = "";
    cr_assert_eq(config_parse_nodes(&c, "a:1, unix:/x, b:2", false), 0);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_parse_nodes(&c, "a:1, unix:/x, a:1", false), 0);
    cr_assert_eq(config_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "twice"), "%s", err);
    cr_assert_eq(config_parse_nodes(&c, "unix:/x, a:1, unix:/x", false), 0);
    cr_assert_eq(config_validate(&c, err, sizeof err), -1);
    /* Same host, other port: two nodes. */
    cr_assert_eq(config_parse_nodes(&c, "a:1, a:2, a:3", false), 0);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(validate, node_timeout_below_min_ttl_in_quorum_mode)
{
    EXPECT_INVALID("node_timeout_ms = 30: must be between 1 and 29", nodes_n(&c_, 3),
                   c_.node_timeout_ms = 30);
    EXPECT_INVALID("node_timeout_ms", nodes_n(&c_, 3), c_.node_timeout_ms = 0);
    EXPECT_VALID(nodes_n(&c_, 3), c_.node_timeout_ms = 29);
    EXPECT_VALID(nodes_n(&c_, 3), c_.node_timeout_ms = 300, c_.min_ttl_ms = 400);
    /* Single-node mode does not use it. */
    EXPECT_VALID(c_.node_timeout_ms = 30);
}

Test(validate, renew_fraction_range)
{
    EXPECT_INVALID("renew_fraction = 0.049: must be between 0.05 and 0.8",
                   c_.renew_fraction = 0.049);
    EXPECT_INVALID("renew_fraction = 0.81: must be between 0.05 and 0.8", c_.renew_fraction = 0.81);
    EXPECT_INVALID("renew_fraction", c_.renew_fraction = 0.0);
    EXPECT_INVALID("renew_fraction", c_.renew_fraction = -0.5);
    EXPECT_INVALID("renew_fraction", c_.renew_fraction = 0.81);
    EXPECT_INVALID("renew_fraction", c_.renew_fraction = 1.0);
    EXPECT_INVALID("renew_fraction", c_.renew_fraction = NAN);
    EXPECT_INVALID("renew_fraction", c_.renew_fraction = INFINITY);
    EXPECT_VALID(c_.renew_fraction = 0.05);
    EXPECT_VALID(c_.renew_fraction = 0.8);
    EXPECT_VALID(c_.renew_fraction = 0.5);
}

/* The arithmetic of the checks is the core's (agent/core/table.c): valid
 * for ttl - ttl/100 - 2 ms after a send, renewed at ttl x fraction after
 * the previous send, or at half the validity when that would come within a
 * rounding quantum (a quarter of the period, at most 10 ms) of its end. */
Test(validate, renewal_arithmetic_is_the_core_s)
{
    cr_assert_float_eq(config_lease_validity_ms(30), 27.7, 1e-9);
    cr_assert_float_eq(config_renew_after_ms(30, 1.0 / 3), 10.0, 1e-9);
    cr_assert_float_eq(config_renew_margin_ms(30, 1.0 / 3), 17.7, 1e-9);
    /* 8 ms + a quantum of 2 ms would pass the validity of 7.9 ms. */
    cr_assert_float_eq(config_renew_after_ms(10, 0.8), 3.95, 1e-9);
    cr_assert_float_eq(config_renew_margin_ms(10, 0.8), 3.95, 1e-9);
    /* Either side of the switch: 50.4 + 10 >= 60.37; 51.2 + 10 < 61.36. */
    cr_assert_float_eq(config_renew_after_ms(63, 0.8), 30.185, 1e-9);
    cr_assert_float_eq(config_renew_margin_ms(64, 0.8), 10.16, 1e-9);
    cr_assert_float_eq(config_renew_margin_ms(10, 0.05), 7.4, 1e-9);
}

/* Past 1000 ms the checks look no further: no TTL leaves a renewal less
 * than 10 ms there, whatever the fraction. */
Test(validate, long_leases_leave_renewals_time)
{
    const double fractions[] = {0.05, 0.2, 1.0 / 3, 0.5, 0.7, 0.8};
    for (size_t i = 0; i < sizeof fractions / sizeof fractions[0]; i++)
        for (uint32_t t = 1000; t <= 200000; t++)
            cr_assert_geq(config_renew_margin_ms(t, fractions[i]), 10.0, "ttl %u, fraction %g",
                          (unsigned)t, fractions[i]);
}

/* A lease whose renewals have less than 5 ms to come back is lost on the
 * first late one: refused, naming both settings and what would do. */
Test(validate, leases_that_cannot_be_kept_are_refused)
{
    EXPECT_INVALID("[agent] min_ttl_ms = 10 with renew_fraction = 0.8: leases of 10 ms cannot be "
                   "kept",
                   c_.min_ttl_ms = 10, c_.renew_fraction = 0.8);
    EXPECT_INVALID("a renewal has 4.0 ms to come back (JEOPARDY after 2.0)", c_.min_ttl_ms = 10,
                   c_.renew_fraction = 0.8);
    EXPECT_INVALID("set min_ttl_ms to 23 or more", c_.min_ttl_ms = 10, c_.renew_fraction = 0.8);
    EXPECT_INVALID("min_ttl_ms = 12 with renew_fraction = 0.8", c_.min_ttl_ms = 12,
                   c_.renew_fraction = 0.8);
    /* The default fraction too, and the 10 ms the range allows. */
    EXPECT_INVALID("set min_ttl_ms to 19 or more", c_.min_ttl_ms = 10);
    /* From 5 ms on, a warning (below). */
    EXPECT_VALID(c_.min_ttl_ms = 13, c_.renew_fraction = 0.8);
    EXPECT_VALID(c_.min_ttl_ms = 11);
    /* The shortest lease is the one that counts: max_ttl_ms caps the rest. */
    EXPECT_VALID(c_.min_ttl_ms = c_.default_ttl_ms = c_.max_ttl_ms = 1000, c_.renew_fraction = 0.8);
}

/* Settings that pass but leave renewals little time are warned about,
 * once each; the defaults and the packaged file (above) are not. */
Test(validate, fragile_leases_are_warned)
{
    struct config c;
    config_defaults(&c);
    char err[512] = "";
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
    c.renew_fraction = 0.8; /* 13.85 ms at 30 ms, 10.16 at 64 ms */
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
    c.min_ttl_ms = 22;
    cr_assert_eq(warnings_of(&c), 1);
    cr_assert(strstr(warned, "[agent] min_ttl_ms = 22 with renew_fraction = 0.8: leases of 22 ms "
                             "are fragile") &&
                  strstr(warned, "set min_ttl_ms to 23 or more"),
              "%s", warned);
    c.min_ttl_ms = 23;
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
    /* At the default fraction: fragile up to 18 ms; a lower fraction
     * helps. */
    c.renew_fraction = 1.0 / 3;
    c.min_ttl_ms = 15;
    cr_assert_eq(warnings_of(&c), 1);
    cr_assert(strstr(warned, "7.8 ms to come back") && strstr(warned, "or lower renew_fraction"),
              "%s", warned);
    c.min_ttl_ms = 19;
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
}

/* A renewal that waits for replicas may take wait_timeout_ms: more than the
 * shortest lease has for it is a warning. */
Test(validate, a_wait_longer_than_short_renewals_is_warned)
{
    struct config c;
    config_defaults(&c);
    c.wait_replicas = 1; /* waits up to 100 ms; 30 ms leases have 17.7 */
    cr_assert_eq(warnings_of(&c), 1);
    cr_assert(strstr(warned, "[redis] wait_timeout_ms = 100 with wait_replicas = 1") &&
                  strstr(warned, "leases of 30 ms have 17.7 ms"),
              "%s", warned);
    c.min_ttl_ms = 200; /* 129.3 ms */
    c.default_ttl_ms = 200;
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
    c.wait_replicas = 0;
    c.min_ttl_ms = 30;
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
}

/* In quorum mode, an acquire that waits node_timeout_ms for a silent node
 * past the shortest lease's validity fails: a warning. */
Test(validate, a_node_timeout_past_the_validity_is_warned)
{
    struct config c;
    config_defaults(&c);
    char err[512] = "";
    nodes_n(&c, 3);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(warnings_of(&c), 0, "default quorum: %s", warned);
    c.min_ttl_ms = 400;
    c.default_ttl_ms = 1000;
    c.node_timeout_ms = 394; /* the validity is 394 ms */
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(warnings_of(&c), 1);
    cr_assert(strstr(warned, "[redis] node_timeout_ms = 394: an acquire of a lease of 400 ms"),
              "%s", warned);
    c.node_timeout_ms = 393;
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
    /* Single-node mode does not use it. */
    nodes_n(&c, 1);
    c.node_timeout_ms = 399;
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(warnings_of(&c), 0, "%s", warned);
}

Test(validate, max_name_len_range)
{
    EXPECT_INVALID("max_name_len", c_.max_name_len = 0);
    EXPECT_INVALID("max_name_len", c_.max_name_len = 1025);
    EXPECT_INVALID("max_name_len", c_.max_name_len = UINT32_MAX);
    EXPECT_VALID(c_.max_name_len = 1);
    EXPECT_VALID(c_.max_name_len = 1024);
}

Test(validate, reconnect_backoff)
{
    EXPECT_INVALID("reconnect_min_ms = 3000: must not exceed reconnect_max_ms (2000)",
                   c_.reconnect_min_ms = 3000, c_.reconnect_max_ms = 2000);
    EXPECT_INVALID("reconnect_min_ms", c_.reconnect_min_ms = 0);
    EXPECT_VALID(c_.reconnect_min_ms = c_.reconnect_max_ms = 500);
    EXPECT_VALID(c_.reconnect_min_ms = 10);
}

Test(validate, other_minimums)
{
    EXPECT_INVALID("max_connections", c_.max_connections = 0);
    EXPECT_INVALID("max_leases_per_conn", c_.max_leases_per_conn = 0);
    EXPECT_INVALID("max_waiters_per_conn", c_.max_waiters_per_conn = 0);
    EXPECT_INVALID("retry_fallback_ms", c_.retry_fallback_ms = 0);
    EXPECT_INVALID("connect_timeout_ms", c_.connect_timeout_ms = 0);
    EXPECT_INVALID("command_timeout_ms", c_.command_timeout_ms = 0);
    EXPECT_INVALID("socket", c_.socket[0] = '\0');
    EXPECT_VALID(c_.max_connections = 1, c_.max_leases_per_conn = 1, c_.max_waiters_per_conn = 1,
                 c_.retry_fallback_ms = 10, c_.connect_timeout_ms = 100,
                 c_.command_timeout_ms = 100);
}

/* A numeric setting and its allowed values. The bounds of some depend on
 * other settings: `lo_with` and `hi_with` ("key=value ...", same section)
 * set those so that the bound itself is allowed. */
struct bounded {
    const char *section, *key;
    uint32_t lo, hi;
    const char *lo_with, *hi_with;
};

#define WEEK_MS 604800000u
static const struct bounded bounded[] = {
    /* A lease of 10 ms can be kept only when renewed early (check_timing). */
    {"agent", "default_ttl_ms", 10, WEEK_MS, "min_ttl_ms=10 renew_fraction=0.05",
     "max_ttl_ms=604800000"},
    {"agent", "min_ttl_ms", 10, WEEK_MS, "renew_fraction=0.05",
     "max_ttl_ms=604800000 default_ttl_ms=604800000"},
    {"agent", "max_ttl_ms", 10, WEEK_MS, "min_ttl_ms=10 default_ttl_ms=10 renew_fraction=0.05",
     NULL},
    {"agent", "retry_fallback_ms", 10, 60000, NULL, NULL},
    {"agent", "retry_max_ms", 0, 60000, NULL, NULL},
    {"agent", "max_name_len", 1, 1024, NULL, NULL},
    {"agent", "max_leases_per_conn", 1, 1000000, NULL, NULL},
    {"agent", "max_waiters_per_conn", 1, 1000000, NULL, NULL},
    {"agent", "max_connections", 1, 65536, NULL, NULL},
    {"agent", "metrics_names_max", 1, 1000, NULL, NULL},
    {"agent", "shutdown_timeout_ms", 0, 60000, NULL, NULL},
    {"agent", "outage_wait_ms", 0, 3600000, NULL, NULL},
    {"agent", "default_max_hold_ms", 0, WEEK_MS, NULL, NULL},
    {"agent", "max_hold_limit_ms", 0, WEEK_MS, NULL, NULL},
    {"agent", "default_progress_ms", 0, WEEK_MS, NULL, NULL},
    {"agent", "progress_limit_ms", 0, WEEK_MS, NULL, NULL},
    {"redis", "connect_timeout_ms", 100, 60000, NULL, NULL},
    {"redis", "command_timeout_ms", 100, 60000, NULL, NULL},
    {"redis", "reconnect_min_ms", 10, 60000, NULL, "reconnect_max_ms=60000"},
    {"redis", "reconnect_max_ms", 10, 60000, "reconnect_min_ms=10", NULL},
    {"redis", "node_timeout_ms", 1, 60000, NULL, NULL},
    {"redis", "database", 0, 1000000, NULL, NULL},
    {"policy", "max_leases_per_uid", 0, 100000000, NULL, NULL},
    {"policy", "max_waiters_per_uid", 0, 100000000, NULL, NULL},
    {"policy", "max_connections_per_uid", 0, 65536, NULL, NULL},
};

/* Sets key to v over the defaults (and b's companions for that bound), as
 * a file would, then validates: NULL when accepted, else the message. */
static const char *try_value(const struct bounded *b, uint32_t v, const char *with)
{
    static char err[512];
    struct config c;
    config_defaults(&c);
    char buf[200], text[16];
    snprintf(buf, sizeof buf, "%s", with ? with : "");
    for (char *save = NULL, *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        cr_assert_not_null(eq);
        *eq = '\0';
        expect_good(&c, b->section, kv, eq + 1);
    }
    snprintf(text, sizeof text, "%u", (unsigned)v);
    err[0] = '\0';
    if (config_set(&c, b->section, b->key, text, err, sizeof err) != 0 ||
        config_validate(&c, err, sizeof err) != 0)
        return err;
    return NULL;
}

/* Refused, with a message naming the setting, the value and the range. */
static void expect_out_of_range(const struct bounded *b, uint32_t v, const char *with)
{
    const char *err = try_value(b, v, with);
    cr_assert_not_null(err, "[%s] %s = %u accepted", b->section, b->key, (unsigned)v);
    char want[128];
    snprintf(want, sizeof want, "between %u and %u", (unsigned)b->lo, (unsigned)b->hi);
    cr_assert(strstr(err, b->key) && strstr(err, want), "[%s] %s = %u: message '%s' lacks '%s'",
              b->section, b->key, (unsigned)v, err, want);
    snprintf(want, sizeof want, "%u", (unsigned)v);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks the value %s", err, want);
}

Test(validate, every_bound_is_allowed_and_one_beyond_is_refused)
{
    for (size_t i = 0; i < sizeof bounded / sizeof bounded[0]; i++) {
        const struct bounded *b = &bounded[i];
        const char *err = try_value(b, b->lo, b->lo_with);
        cr_assert_null(err, "[%s] %s = %u refused: %s", b->section, b->key, (unsigned)b->lo, err);
        err = try_value(b, b->hi, b->hi_with);
        cr_assert_null(err, "[%s] %s = %u refused: %s", b->section, b->key, (unsigned)b->hi, err);
        if (b->lo > 0)
            expect_out_of_range(b, b->lo - 1, b->lo_with);
        expect_out_of_range(b, b->hi + 1, b->hi_with);
    }
}

Test(validate, zero_says_what_it_means)
{
    EXPECT_VALID(c_.policy.max_leases_per_uid = 0, c_.policy.max_waiters_per_uid = 0,
                 c_.policy.max_connections_per_uid = 0, c_.outage_wait_ms = 0,
                 c_.shutdown_timeout_ms = 0, c_.max_hold_limit_ms = 0);
    EXPECT_INVALID("between 0 and 100000000 (0: no limit)",
                   c_.policy.max_leases_per_uid = 100000001);
    EXPECT_INVALID("between 0 and 604800000 (0: none)", c_.max_hold_limit_ms = 604800001);
}

/* outage_wait_ms: none (the default) or a number of ms, 0 failing at once. */
Test(set, outage_wait_ms_none_is_no_ceiling)
{
    struct config c;
    config_defaults(&c);
    cr_assert_eq(c.outage_wait_ms, CONFIG_OUTAGE_NONE, "the default is a ceiling of %u ms",
                 (unsigned)c.outage_wait_ms);
    expect_good(&c, "agent", "outage_wait_ms", "5000");
    cr_assert_eq(c.outage_wait_ms, 5000);
    expect_good(&c, "agent", "outage_wait_ms", "none");
    cr_assert_eq(c.outage_wait_ms, CONFIG_OUTAGE_NONE);
    char err[256] = "";
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "none refused: %s", err);
    expect_bad("agent", "outage_wait_ms", "forever");
    expect_bad("agent", "outage_wait_ms", "None ");
    EXPECT_INVALID("between 0 and 3600000 (0: fail at once; none: no ceiling)",
                   c_.outage_wait_ms = 3600001);
}

Test(validate, hold_defaults_within_their_limits)
{
    EXPECT_INVALID("default_max_hold_ms = 600: must not exceed max_hold_limit_ms (400)",
                   c_.default_max_hold_ms = 600, c_.max_hold_limit_ms = 400);
    EXPECT_INVALID("default_progress_ms = 501: must not exceed progress_limit_ms (500)",
                   c_.default_progress_ms = 501, c_.progress_limit_ms = 500);
    EXPECT_VALID(c_.default_max_hold_ms = 400, c_.max_hold_limit_ms = 400);
    EXPECT_VALID(c_.default_max_hold_ms = 600, c_.max_hold_limit_ms = 0);
    EXPECT_VALID(c_.default_progress_ms = 0, c_.progress_limit_ms = 500);
}

Test(set, octal_modes_name_their_range)
{
    char err[512] = "";
    struct config c;
    config_defaults(&c);
    cr_assert_eq(config_set(&c, "agent", "status_socket_mode", "01000", err, sizeof err), -1);
    cr_assert(strstr(err, "status_socket_mode") && strstr(err, "01000") &&
                  strstr(err, "between 0 and 0777"),
              "%s", err);
}

Test(validate, message_is_truncated_safely)
{
    struct config c;
    config_defaults(&c);
    c.max_name_len = 0;
    char err[8];
    memset(err, 'x', sizeof err);
    cr_assert_eq(config_validate(&c, err, sizeof err), -1);
    cr_assert_eq(strlen(err), sizeof err - 1);
}

/* ---- access policy ---- */

Test(policy, rules_parse_and_match)
{
    struct config c;
    config_defaults(&c);
    uint32_t root_groups[] = {0}, app_groups[] = {1000, 27};
    /* Without rules everyone may use every name. */
    cr_assert(policy_allows(&c.policy, 1000, app_groups, 2, "anything"));
    cr_assert(policy_sees_all(&c.policy, 1000, app_groups, 2));
    expect_good(&c, "policy", "allow", "0 *");
    expect_good(&c, "policy", "allow", "@27 shared-*  tmp-?");
    expect_good(&c, "policy", "allow", "root admin-*");
    cr_assert_eq(c.policy.nrules, 4);
    cr_assert(policy_allows(&c.policy, 0, root_groups, 1, "x"));
    cr_assert(policy_allows(&c.policy, 1000, app_groups, 2, "shared-a"));
    cr_assert(policy_allows(&c.policy, 1000, app_groups, 2, "tmp-1"));
    cr_assert_not(policy_allows(&c.policy, 1000, app_groups, 2, "tmp-12"));
    cr_assert_not(policy_allows(&c.policy, 1000, app_groups, 1, "shared-a")); /* not in 27 */
    cr_assert_not(policy_allows(&c.policy, 1000, app_groups, 2, "admin-x"));
    /* Patterns are separated by blanks: a bracket may hold a comma. */
    expect_good(&c, "policy", "allow", "1000 [a,b]-*");
    cr_assert(policy_allows(&c.policy, 1000, app_groups, 2, "b-1"));
    cr_assert(policy_allows(&c.policy, 1000, app_groups, 2, ",-1"));
    cr_assert_not(policy_allows(&c.policy, 1000, app_groups, 2, "c-1"));
    expect_good(&c, "policy", "see_all", "0 @27");
    cr_assert(policy_sees_all(&c.policy, 0, root_groups, 1));
    cr_assert(policy_sees_all(&c.policy, 1000, app_groups, 2));
    cr_assert_not(policy_sees_all(&c.policy, 1000, app_groups, 1));
    /* An empty see_all: nobody sees others' leases. */
    expect_good(&c, "policy", "see_all", "");
    cr_assert_not(policy_sees_all(&c.policy, 0, root_groups, 1));
}

Test(policy, bad_lines)
{
    static const char *const bad[] = {"", "*", "no-such-user-zz x", "@no-such-group-zz x", "@ x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad("policy", "allow", bad[i]);
    expect_bad("policy", "see_all", "no-such-user-zz");
    expect_bad("policy", "max_leases_per_uid", "-1");
    struct config c;
    config_defaults(&c);
    expect_good(&c, "policy", "max_leases_per_uid", "10");
    cr_assert_eq(c.policy.max_leases_per_uid, 10);
}

/* ---- key formats ---- */

Test(formats, redisson_patterns_select_names)
{
    struct config c;
    config_defaults(&c);
    cr_assert_eq(formats_of(&c.formats, "orders:1", 8), KEY_FORMAT_DLOCK, "none by default");
    char path[256], err[512];
    int rc = load_text(&c,
                       "[formats]\n"
                       "redisson = orders:* product_?\n"
                       "redisson = jobs:[ab]*\n"
                       "redisson_rwlock = reports:*\n"
                       "redisson_semaphore = encoders:* orders:9\n",
                       path, sizeof path, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.formats.nredisson, 6, "lines add up");
    cr_assert_eq(formats_of(&c.formats, "reports:1", 9), KEY_FORMAT_REDISSON_RW);
    cr_assert_eq(formats_of(&c.formats, "encoders:x", 10), KEY_FORMAT_REDISSON_SEM);
    /* The first pattern that matches, in the order of the file. */
    cr_assert_eq(formats_of(&c.formats, "orders:9", 8), KEY_FORMAT_REDISSON);
    static const char *const yes[] = {"orders:1", "orders:", "product_9", "jobs:a1"};
    static const char *const no[] = {"orders", "product_10", "jobs:c", "xorders:1"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        cr_assert_eq(formats_of(&c.formats, yes[i], strlen(yes[i])), KEY_FORMAT_REDISSON, "%s",
                     yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        cr_assert_eq(formats_of(&c.formats, no[i], strlen(no[i])), KEY_FORMAT_DLOCK, "%s", no[i]);
    /* The name is given with its length, not NUL-terminated. */
    cr_assert_eq(formats_of(&c.formats, "orders:1xyz", 8), KEY_FORMAT_REDISSON);
    cr_assert_eq(formats_of(&c.formats, "ordersXYZ", 6), KEY_FORMAT_DLOCK);
}

Test(formats, bad_lines)
{
    expect_bad("formats", "redisson", "");
    expect_bad("formats", "redisson", "   ");
    expect_bad("formats", "other", "x*");
    char longp[FORMATS_PATTERN_MAX + 2];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    expect_bad("formats", "redisson", longp);
    struct config c;
    config_defaults(&c);
    for (unsigned i = 0; i < FORMATS_MAX_PATTERNS; i++)
        expect_good(&c, "formats", "redisson", "a*");
    char err[512];
    cr_assert_eq(config_set(&c, "formats", "redisson", "b*", err, sizeof err), -1, "full");
}

Test(formats, cluster_with_a_tagged_prefix_is_refused)
{
    struct config c;
    config_defaults(&c);
    expect_good(&c, "formats", "redisson", "orders:*");
    expect_good(&c, "redis", "mode", "cluster");
    expect_good(&c, "redis", "address", "127.0.0.1:7000");
    expect_good(&c, "agent", "prefix", "{locks}:");
    char err[512];
    cr_assert_eq(config_validate(&c, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "[formats]"), "%s", err);
    expect_good(&c, "agent", "prefix", "locks:");
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
}

/* Redisson's channel of a name, and the name of a channel. */
Test(formats, redisson_channels)
{
    char ch[64];
    size_t n = redisson_channel(KEY_FORMAT_REDISSON, "orders:1", 8, ch);
    cr_assert_str_eq(ch, "redisson_lock__channel:{orders:1}");
    cr_assert_eq(n, strlen(ch));
    const char *name;
    cr_assert_eq(redisson_channel_name(ch, n, &name), 8);
    cr_assert_eq(memcmp(name, "orders:1", 8), 0);
    n = redisson_channel(KEY_FORMAT_REDISSON_RW, "rw", 2, ch);
    cr_assert_str_eq(ch, "redisson_rwlock:{rw}");
    cr_assert_eq(redisson_channel_name(ch, n, &name), 2);
    n = redisson_channel(KEY_FORMAT_REDISSON_SEM, "sem", 3, ch);
    cr_assert_str_eq(ch, "redisson_sc:{sem}");
    cr_assert_eq(redisson_channel_name(ch, n, &name), 3);
    cr_assert_eq(memcmp(name, "sem", 3), 0);
    cr_assert_eq(redisson_timeout_key("sem", 3, ch), strlen("{sem}:timeout"));
    cr_assert_str_eq(ch, "{sem}:timeout");
    static const char *const not_ours[] = {"redisson_lock__channel:{}", "redisson_lock__channel:x",
                                           "redisson_lock__channel:{a{b}", "dlock:{x} released",
                                           "redisson_lock__channel:{a}b}"};
    for (size_t i = 0; i < sizeof not_ours / sizeof *not_ours; i++)
        cr_assert_eq(redisson_channel_name(not_ours[i], strlen(not_ours[i]), &name), 0, "%s",
                     not_ours[i]);
}

/* ---- sentinel mode, WAIT ---- */

Test(sentinel, defaults)
{
    struct config c;
    memset(&c, 0x5a, sizeof c);
    config_defaults(&c);
    cr_assert_eq(c.mode_setting, REDIS_ASK_AUTO);
    cr_assert_str_eq(c.sentinel_master, "");
    cr_assert_str_eq(c.sentinel_user, "");
    cr_assert_str_eq(c.sentinel_password, "");
    cr_assert_eq(c.wait_replicas, 0);
    cr_assert_eq(c.wait_timeout_ms, 100);
    cr_assert_eq(c.topology_refresh_ms, 2000);
}

Test(sentinel, from_a_file)
{
    struct config c;
    config_defaults(&c);
    char path[256], err[512];
    int rc = load_text(&c,
                       "[redis]\n"
                       "mode = sentinel\n"
                       "sentinel_master = mymaster\n"
                       "address = 10.0.0.1:26379, 10.0.0.2:26379\n"
                       "address = 10.0.0.3:26379\n"
                       "sentinel_user = watcher\n"
                       "sentinel_password = s3cret\n"
                       "user = dlock\n"
                       "password = other\n"
                       "wait_replicas = 1\n"
                       "wait_timeout_ms = 50\n"
                       "topology_refresh_ms = 500\n",
                       path, sizeof path, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.mode, REDIS_MODE_SENTINEL);
    cr_assert_str_eq(config_mode_name(c.mode), "sentinel");
    cr_assert_eq(c.nnodes, 3, "the address lines are the sentinels");
    cr_assert_str_eq(c.nodes[2].host, "10.0.0.3");
    cr_assert_eq(c.nodes[2].port, 26379);
    cr_assert_str_eq(c.sentinel_master, "mymaster");
    cr_assert_str_eq(c.sentinel_user, "watcher");
    cr_assert_str_eq(c.sentinel_password, "s3cret");
    cr_assert_str_eq(c.redis_user, "dlock", "the master's credentials are apart");
    cr_assert_str_eq(c.redis_password, "other");
    cr_assert_eq(c.wait_replicas, 1);
    cr_assert_eq(c.wait_timeout_ms, 50);
    cr_assert_eq(c.topology_refresh_ms, 500);
}

/* Any number of sentinels, 1 to 9 (unlike quorum mode's odd counts). */
Test(sentinel, any_number_of_sentinels)
{
    for (unsigned n = 1; n <= CONFIG_MAX_NODES; n++) {
        struct config c;
        config_defaults(&c);
        nodes_n(&c, n);
        expect_good(&c, "redis", "mode", "sentinel");
        expect_good(&c, "redis", "sentinel_master", "m");
        char err[256] = "";
        cr_assert_eq(config_validate(&c, err, sizeof err), 0, "%u sentinels: %s", n, err);
        cr_assert_eq(c.mode, REDIS_MODE_SENTINEL, "%u sentinels", n);
    }
}

Test(sentinel, needs_the_master_name)
{
    EXPECT_INVALID("sentinel_master", c_.mode_setting = REDIS_ASK_SENTINEL);
    EXPECT_VALID(c_.mode_setting = REDIS_ASK_SENTINEL, strcpy(c_.sentinel_master, "m"));
    /* A master name is one word. */
    expect_bad("redis", "sentinel_master", "");
    expect_bad("redis", "sentinel_master", "my master");
    expect_bad("redis", "sentinel_master", "m\t");
    expect_bad("redis", "mode", "sentinels");
    expect_bad("redis", "mode", "");
    struct config c;
    config_defaults(&c);
    expect_good(&c, "redis", "mode", "auto");
    cr_assert_eq(c.mode_setting, REDIS_ASK_AUTO);
    expect_good(&c, "redis", "mode", "sentinel");
    cr_assert_eq(c.mode_setting, REDIS_ASK_SENTINEL);
}

/* WAIT must answer before the watchdog takes Redis for dead. */
Test(sentinel, wait_timeout_below_command_timeout)
{
    EXPECT_INVALID("wait_timeout_ms = 2000: must not exceed command_timeout_ms (1999)",
                   c_.wait_replicas = 1, c_.wait_timeout_ms = 2000);
    EXPECT_VALID(c_.wait_replicas = 1, c_.wait_timeout_ms = 1999);
    /* Without WAIT it does not matter. */
    EXPECT_VALID(c_.wait_replicas = 0, c_.wait_timeout_ms = 2000);
    /* In every mode. */
    EXPECT_INVALID("wait_timeout_ms", nodes_n(&c_, 3), c_.wait_replicas = 2,
                   c_.wait_timeout_ms = 5000);
}

Test(sentinel, bounds)
{
    static const struct bounded b[] = {
        {"redis", "wait_replicas", 0, 64, NULL, NULL},
        {"redis", "wait_timeout_ms", 1, 60000, NULL, NULL},
        {"redis", "topology_refresh_ms", 100, 600000, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        const char *err = try_value(&b[i], b[i].lo, b[i].lo_with);
        cr_assert_null(err, "%s = %u refused: %s", b[i].key, (unsigned)b[i].lo, err);
        err = try_value(&b[i], b[i].hi, b[i].hi_with);
        cr_assert_null(err, "%s = %u refused: %s", b[i].key, (unsigned)b[i].hi, err);
        if (b[i].lo > 0)
            expect_out_of_range(&b[i], b[i].lo - 1, b[i].lo_with);
        expect_out_of_range(&b[i], b[i].hi + 1, b[i].hi_with);
    }
}

/* ---- reload: which settings change in a running agent ---- */

/* c after defaults and the lines of text as a file. */
static void config_of(struct config *c, const char *text)
{
    char path[256], err[600];
    config_defaults(c);
    cr_assert_eq(load_text(c, text, path, sizeof path, err, sizeof err), 0, "%s", err);
}

/* The change of [section] key among n, or NULL. */
static const struct config_change *change_of(const struct config_change *ch, size_t n,
                                             const char *section, const char *key)
{
    const struct config_change *found = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(ch[i].section, section) == 0 && strcmp(ch[i].key, key) == 0) {
            cr_assert_null(found, "[%s] %s is listed twice", section, key);
            found = &ch[i];
        }
    return found;
}

/* The one line of a diff of old and fresh, which must hold just one change. */
static const char *one_change(const struct config *old, const struct config *fresh,
                              const struct config_change **out)
{
    static struct config_change ch[CONFIG_CHANGES_MAX];
    static char line[2 * CONFIG_SHOWN_MAX + 64];
    size_t n = config_diff(old, fresh, ch);
    cr_assert_eq(n, 1, "%zu changes, not one", n);
    config_change_str(&ch[0], line, sizeof line);
    if (out)
        *out = &ch[0];
    return line;
}

Test(reload, the_same_file_changes_nothing)
{
    static struct config a, b;
    static struct config_change ch[CONFIG_CHANGES_MAX];
    const char *text = "[agent]\nprefix = app:\nmetrics_listen = 127.0.0.1:9464\n"
                       "[redis]\naddress = 10.0.0.1:6379\npassword = s3cret\n"
                       "[policy]\nallow = 0 *\nsee_all = 0\n[formats]\nredisson = r-*\n";
    config_of(&a, text);
    config_of(&b, text);
    cr_assert_eq(config_diff(&a, &b, ch), 0);
    /* Bytes past a string's end, left by a longer value set before, are no
     * change. */
    expect_good(&b, "agent", "prefix", "a-much-longer-prefix:");
    expect_good(&b, "agent", "prefix", "app:");
    cr_assert_eq(config_diff(&a, &b, ch), 0);
}

Test(reload, a_changed_setting_is_named_with_both_values)
{
    static struct config a, b;
    config_defaults(&a);
    config_defaults(&b);
    expect_good(&b, "redis", "command_timeout_ms", "500");
    const struct config_change *c;
    cr_assert_str_eq(one_change(&a, &b, &c), "[redis] command_timeout_ms 2000 -> 500");
    cr_assert_null(c->restart);
    cr_assert_not(c->secret);

    config_defaults(&b);
    expect_good(&b, "agent", "outage_wait_ms", "1500");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[agent] outage_wait_ms none -> 1500");
    config_defaults(&b);
    expect_good(&b, "agent", "log_level", "debug");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[agent] log_level info -> debug");
    config_defaults(&b);
    expect_good(&b, "agent", "log_format", "json");
    const struct config_change *lf;
    cr_assert_str_eq(one_change(&a, &b, &lf), "[agent] log_format plain -> json");
    cr_assert_null(lf->restart, "the format changes at a reload");
    config_defaults(&b);
    expect_good(&b, "agent", "renew_fraction", "0.25");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[agent] renew_fraction 0.333333 -> 0.25");
    config_defaults(&b);
    expect_good(&b, "agent", "metrics_listen", "127.0.0.1:9464");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[agent] metrics_listen \"\" -> 127.0.0.1:9464");
    config_defaults(&b);
    expect_good(&b, "policy", "max_leases_per_uid", "7");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[policy] max_leases_per_uid 10000 -> 7");
    config_defaults(&b);
    expect_good(&b, "policy", "allow", "0 *");
    expect_good(&b, "policy", "allow", "@65534 pub-* tmp-?");
    cr_assert_str_eq(one_change(&a, &b, NULL),
                     "[policy] allow (none: every name to everyone) -> 0 *, @65534 pub-*, "
                     "@65534 tmp-?");
    config_defaults(&b);
    expect_good(&b, "policy", "see_all", "0, @4");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[policy] see_all (unset: everyone) -> 0, @4");
}

/* A password is never shown, not even cut or in part. */
Test(reload, secrets_are_shown_as_changed)
{
    static struct config a, b;
    config_defaults(&a);
    config_defaults(&b);
    expect_good(&a, "redis", "password", "old-secret");
    expect_good(&b, "redis", "password", "new-secret");
    const struct config_change *c;
    cr_assert_str_eq(one_change(&a, &b, &c), "[redis] password (changed)");
    cr_assert(c->secret);
    cr_assert_null(c->restart, "a new password is used from the next connection");
    cr_assert_null(strstr(c->before, "secret"));
    cr_assert_null(strstr(c->after, "secret"));
    config_defaults(&b);
    expect_good(&b, "redis", "password", "old-secret");
    expect_good(&b, "redis", "sentinel_password", "x");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[redis] sentinel_password (changed)");
    /* The user name is no secret. */
    config_defaults(&b);
    expect_good(&b, "redis", "password", "old-secret");
    expect_good(&b, "redis", "user", "dlock");
    cr_assert_str_eq(one_change(&a, &b, NULL), "[redis] user \"\" -> dlock");
}

/* Each setting that cannot change in a running agent, with its reason. */
Test(reload, settings_that_need_a_restart_say_why)
{
    static const struct {
        const char *section, *key, *value, *why;
    } t[] = {
        {"agent", "socket", "/tmp/other.sock", "clients connect to the socket by path"},
        {"agent", "socket_mode", "0600", "mode and group"},
        {"agent", "socket_group", "adm", "mode and group"},
        {"agent", "status_socket", "/tmp/other-status.sock", "connect to the status socket"},
        {"agent", "status_socket_mode", "0600", "mode and group"},
        {"agent", "status_socket_group", "adm", "mode and group"},
        {"agent", "prefix", "app:", "every held key would change name"},
        {"redis", "address", "10.0.0.9:6379", "addresses"},
        {"redis", "mode", "single", "mode"},
        {"redis", "database", "3", "database"},
        {"redis", "sentinel_master", "other", "master"},
        {"formats", "redisson", "r-*", "held names would change keys"},
        {"formats", "redisson_rwlock", "rw-*", "held names would change keys"},
        {"formats", "redisson_semaphore", "s-*", "held names would change keys"},
    };
    static struct config a, b, live;
    static struct config_change ch[CONFIG_CHANGES_MAX];
    config_defaults(&a);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        config_defaults(&b);
        expect_good(&b, t[i].section, t[i].key, t[i].value);
        const struct config_change *c;
        const char *line = one_change(&a, &b, &c);
        cr_assert_not_null(c->restart, "%s: applied at a reload", line);
        cr_assert_not_null(strstr(c->restart, t[i].why), "%s: %s", line, c->restart);
        cr_assert_not_null(strstr(line, t[i].value), "%s does not show %s", line, t[i].value);
        /* And a reload leaves it as it is. */
        live = a;
        config_reload(&live, &b);
        cr_assert_eq(config_diff(&live, &a, ch), 0, "%s was applied", line);
    }
}

/* In quorum mode a restarted node is left out for max_ttl_ms: lower, it
 * would no longer cover the leases granted before. */
Test(reload, a_lower_max_ttl_needs_a_restart_in_quorum_mode)
{
    static struct config a, b, live;
    char err[600];
    config_of(&a, "[redis]\naddress = 10.0.0.1:1, 10.0.0.2:1, 10.0.0.3:1\n");
    cr_assert_eq(config_validate(&a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.mode, REDIS_MODE_QUORUM);
    b = a;
    expect_good(&b, "agent", "max_ttl_ms", "40000");
    const struct config_change *c;
    one_change(&a, &b, &c);
    cr_assert_not_null(c->restart);
    cr_assert_not_null(strstr(c->restart, "quorum"), "%s", c->restart);
    live = a;
    config_reload(&live, &b);
    cr_assert_eq(live.max_ttl_ms, 45000);
    /* Higher, it keeps every node out longer: applied. */
    expect_good(&b, "agent", "max_ttl_ms", "50000");
    one_change(&a, &b, &c);
    cr_assert_null(c->restart);
    config_reload(&live, &b);
    cr_assert_eq(live.max_ttl_ms, 50000);
    /* Without a quorum it is the TTL cap alone. */
    config_defaults(&a);
    b = a;
    expect_good(&b, "agent", "max_ttl_ms", "40000");
    one_change(&a, &b, &c);
    cr_assert_null(c->restart);
}

/* Every setting is in the table: a file that changes all of them shows each
 * once, and a reload brings the running config to what the file says, but
 * for the settings that need a restart. */
Test(reload, every_setting_is_in_the_table)
{
    static const char reloadable[] =
        "[agent]\nmetrics_listen = 127.0.0.1:9\ndefault_ttl_ms = 20000\nmin_ttl_ms = 100\n"
        "max_ttl_ms = 60000\nrenew_fraction = 0.25\nretry_fallback_ms = 200\n"
        "cohort_handoffs = 4\ncohort_ms = 30\nmax_name_len = 100\nmax_leases_per_conn = 50\n"
        "max_waiters_per_conn = 60\nmax_connections = 70\nhandshake_timeout_ms = 5000\n"
        "shutdown_timeout_ms = 3000\noutage_wait_ms = 4000\ndefault_max_hold_ms = 1000\n"
        "max_hold_limit_ms = 2000\ndefault_progress_ms = 3000\nprogress_limit_ms = 4000\n"
        "log_level = warn\n"
        "[redis]\nuser = u\npassword = p\nsentinel_user = su\nsentinel_password = sp\n"
        "connect_timeout_ms = 700\ncommand_timeout_ms = 800\nreconnect_min_ms = 30\n"
        "reconnect_max_ms = 3000\nnode_timeout_ms = 25\nwait_replicas = 1\n"
        "wait_timeout_ms = 90\ntopology_refresh_ms = 3000\n"
        "[policy]\nallow = 0 *\nsee_all = 0\nforce = 0 job-*\nmax_leases_per_uid = "
        "1\nmax_waiters_per_uid = 2\n"
        "max_connections_per_uid = 3\nmax_output_per_uid = 70000\nrenew_budget_per_uid = 5\n";
    static const char restart[] =
        "[agent]\nsocket = /tmp/x.sock\nsocket_mode = 0600\nsocket_group = adm\n"
        "status_socket = /tmp/y.sock\nstatus_socket_mode = 0600\nstatus_socket_group = adm\n"
        "prefix = app:\n"
        "[redis]\naddress = 10.0.0.1:1, 10.0.0.2:1, 10.0.0.3:1\nmode = quorum\ndatabase = 2\n"
        "sentinel_master = m\n"
        "[formats]\nredisson = r-*\nredisson_rwlock = rw-*\nredisson_semaphore = s-*\n";
    static struct config live, all, applied;
    static struct config_change ch[CONFIG_CHANGES_MAX];
    static char text[sizeof reloadable + sizeof restart];
    snprintf(text, sizeof text, "%s%s", reloadable, restart);
    config_defaults(&live);
    config_of(&all, text);
    config_of(&applied, reloadable);
    size_t n = config_diff(&live, &all, ch), restarts = 0;
    /* Every key of both texts, once each. */
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        char sect[16], key[40];
        if (p[0] == '[')
            sscanf(p, "[%15[^]]", sect);
        else if (sscanf(p, "%39s =", key) == 1)
            cr_assert_not_null(change_of(ch, n, sect, key), "[%s] %s is not in the diff", sect,
                               key);
        p += len + (p[len] == '\n');
    }
    for (size_t i = 0; i < n; i++)
        restarts += ch[i].restart != NULL;
    cr_assert_eq(restarts, 14, "%zu settings need a restart", restarts);
    config_reload(&live, &all);
    /* (Compared setting by setting: the bytes between fields may differ.) */
    cr_assert_eq(config_diff(&live, &applied, ch), 0, "a reload does not give what the file gives");
    /* What is left is what needs a restart. */
    n = config_diff(&live, &all, ch);
    cr_assert_eq(n, restarts);
    for (size_t i = 0; i < n; i++)
        cr_assert_not_null(ch[i].restart, "[%s] %s was not applied", ch[i].section, ch[i].key);
}

/* A long value is cut, with dots, and a diff never writes past its room. */
Test(reload, long_values_are_cut)
{
    static struct config a, b;
    config_defaults(&a);
    config_defaults(&b);
    char line[300];
    for (int i = 0; i < 20; i++) {
        snprintf(line, sizeof line, "%d name-pattern-%02d-*", 1000 + i, i);
        expect_good(&b, "policy", "allow", line);
    }
    const struct config_change *c;
    one_change(&a, &b, &c);
    size_t n = strlen(c->after);
    cr_assert_lt(n, CONFIG_SHOWN_MAX);
    cr_assert_gt(n, CONFIG_SHOWN_MAX - 40, "cut too short: %s", c->after);
    cr_assert_str_eq(c->after + n - 3, "...");
    cr_assert_eq(strncmp(c->after, "1000 name-pattern-00-*, 1001", 28), 0, "%s", c->after);
    /* A control character in a value is not written out as it is. */
    config_defaults(&b);
    expect_good(&b, "redis", "user", "a\033[2Jb");
    one_change(&a, &b, &c);
    cr_assert_null(strchr(c->after, '\033'), "%s", c->after);
}

/* ---- TLS ---- */

/* config_of(), then config_validate(), which must pass. */
static void validated(struct config *c, const char *text)
{
    char err[512];
    config_of(c, text);
    cr_assert_eq(config_validate(c, err, sizeof err), 0, "%s", err);
}

Test(tls, rediss_addresses_turn_it_on)
{
    struct redis_addr a;
    cr_assert_eq(config_parse_addr("rediss://redis.example.net:6380", &a), 0);
    cr_assert(a.tls);
    cr_assert_str_eq(a.host, "redis.example.net");
    cr_assert_eq(a.port, 6380);
    cr_assert_eq(config_parse_addr("redis://[::1]:6379", &a), 0);
    cr_assert_not(a.tls);
    cr_assert_str_eq(a.host, "::1");
    char shown[300];
    cr_assert_eq(config_parse_addr("rediss://10.0.0.1:6380", &a), 0);
    cr_assert_str_eq(config_addr_str(&a, shown, sizeof shown), "rediss://10.0.0.1:6380");
    /* No scheme before a unix socket, no empty host, no port 0. */
    cr_assert_eq(config_parse_addr("rediss://unix:/tmp/r.sock", &a), -1);
    cr_assert_eq(config_parse_addr("redis://unix:/tmp/r.sock", &a), -1);
    cr_assert_eq(config_parse_addr("rediss://:6380", &a), -1);
    cr_assert_eq(config_parse_addr("rediss://host:0", &a), -1);

    static struct config c;
    validated(&c, "[redis]\naddress = rediss://10.0.0.1:6380\n");
    cr_assert(c.tls);
    cr_assert(c.tls_verify, "verification is on by default");
    cr_assert_str_eq(c.tls_min_version, "1.2");
    validated(&c, "[redis]\naddress = 10.0.0.1:6380\ntls = yes\n");
    cr_assert(c.tls);
    validated(&c, "[redis]\naddress = 10.0.0.1:6380\n");
    cr_assert_not(c.tls);
}

/* validate() of text's settings fails with a message holding want. */
static void refused(const char *text, const char *want)
{
    static struct config c;
    char path[64], err[512];
    config_defaults(&c);
    cr_assert_eq(load_text(&c, text, path, sizeof path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_validate(&c, err, sizeof err), -1, "accepted: %s", text);
    cr_assert_not_null(strstr(err, want), "'%s' does not say '%s'", err, want);
}

Test(tls, settings_that_make_no_sense_are_refused)
{
    refused("[redis]\naddress = rediss://10.0.0.1:1, 10.0.0.2:2, rediss://10.0.0.3:3\n",
            "some addresses are rediss:// and some are not");
    refused("[redis]\naddress = unix:/run/redis.sock\ntls = yes\n", "TLS needs TCP addresses");
    refused("[redis]\naddress = rediss://h:1\ntls_cert_file = /c.crt\n",
            "tls_cert_file and tls_key_file go together");
    refused("[redis]\naddress = rediss://h:1\ntls_key_file = /c.key\n",
            "tls_cert_file and tls_key_file go together");
    /* tls = yes takes any mix. */
    static struct config c;
    validated(&c, "[redis]\naddress = rediss://10.0.0.1:1, 10.0.0.2:2, 10.0.0.3:3\ntls = yes\n");
    cr_assert(c.tls);
    expect_bad("redis", "tls", "maybe");
    expect_bad("redis", "tls_verify", "2");
    expect_bad("redis", "tls_min_version", "1.1");
    expect_bad("redis", "tls_min_version", "TLSv1.3");
    struct config d;
    config_defaults(&d);
    expect_good(&d, "redis", "tls_min_version", "1.3");
    expect_good(&d, "redis", "tls_verify", "off");
    cr_assert_not(d.tls_verify);
}

Test(tls, a_reload_reads_the_files_and_switching_restarts)
{
    static struct config a, b;
    const char *base = "[redis]\naddress = rediss://10.0.0.1:6380\ntls_ca_file = /etc/a.crt\n";
    config_of(&a, base);
    config_of(&b, "[redis]\naddress = rediss://10.0.0.1:6380\ntls_ca_file = /etc/b.crt\n");
    const struct config_change *c;
    cr_assert_str_eq(one_change(&a, &b, &c), "[redis] tls_ca_file /etc/a.crt -> /etc/b.crt");
    cr_assert_null(c->restart);
    config_of(&b, "[redis]\naddress = rediss://10.0.0.1:6380\ntls_ca_file = /etc/a.crt\n"
                  "tls_verify = no\n");
    cr_assert_str_eq(one_change(&a, &b, &c), "[redis] tls_verify yes -> no");
    cr_assert_null(c->restart);
    /* The same address without TLS is another address: a restart in place. */
    config_of(&b, "[redis]\naddress = 10.0.0.1:6380\ntls_ca_file = /etc/a.crt\n");
    cr_assert_str_eq(one_change(&a, &b, &c),
                     "[redis] address rediss://10.0.0.1:6380 -> 10.0.0.1:6380");
    cr_assert_not_null(c->restart);
    config_of(&a, "[redis]\naddress = 10.0.0.1:6380\n");
    config_of(&b, "[redis]\naddress = 10.0.0.1:6380\ntls = yes\n");
    cr_assert_str_eq(one_change(&a, &b, &c), "[redis] tls no -> yes");
    cr_assert_not_null(c->restart);
}

/* ---- a check reports every error, each with its source ---- */

/* The line of r's text that contains want, or NULL. */
static const char *report_line_with(const struct config_report *r, const char *want)
{
    const char *at = strstr(r->text, want);
    return at;
}

Test(report, every_refused_line_of_the_file_is_listed_with_its_line)
{
    static struct config c;
    static struct config_report r;
    char path[256], want[400];
    const char *text = "[agent]\n"                   /* 1 */
                       "prefix = app:\n"             /* 2 */
                       "max_ttl_ms = abc\n"          /* 3 */
                       "no_such_key = 1\n"           /* 4 */
                       "min_ttl_ms = 5\n"            /* 5: passes the parse, not the range */
                       "[redis]\n"                   /* 6 */
                       "command_timeout_ms = 99\n"   /* 7 */
                       "this line is no setting\n"   /* 8 */
                       "address = not an address\n"; /* 9 */
    write_temp(path, sizeof path, text);
    config_defaults(&c);
    config_report_init(&r);
    cr_assert_eq(config_load_file_report(&c, path, &r), -1);
    cr_assert_eq(config_validate_report(&c, &r), -1);
    unlink(path);
    const char *lines[] = {
        ":3: [agent] max_ttl_ms: not a number in 0..4294967295: 'abc'",
        ":4: unknown setting [agent] no_such_key",
        ":8: syntax error",
        ":9: [redis] address: invalid value 'not an address'",
        ":5: [agent] min_ttl_ms = 5: must be between 10 and",
        ":7: [redis] command_timeout_ms = 99: must be between 100 and 60000",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        snprintf(want, sizeof want, "%s%s", path, lines[i]);
        cr_assert_not_null(report_line_with(&r, want), "'%s' lacks '%s'", r.text, want);
    }
    cr_assert_eq(r.nerrors, 6, "%u errors: %s", r.nerrors, r.text);
    /* The file's errors come in the order of its lines. */
    cr_assert_lt(strstr(r.text, ":3: "), strstr(r.text, ":4: "));
    cr_assert_lt(strstr(r.text, ":4: "), strstr(r.text, ":8: "));
    cr_assert_lt(strstr(r.text, ":8: "), strstr(r.text, ":9: "));
}

Test(report, a_flag_error_names_the_flag_not_the_file)
{
    static struct config c;
    static struct config_report r;
    char path[256];
    write_temp(path, sizeof path, "[agent]\ndefault_ttl_ms = 5000\n");
    config_defaults(&c);
    config_report_init(&r);
    cr_assert_eq(config_load_file_report(&c, path, &r), 0, "%s", r.text);
    cr_assert_eq(config_set_report(&c, "agent", "default_ttl_ms", "zz", "--default-ttl", &r), -1);
    cr_assert_str_eq(
        r.text, "--default-ttl: [agent] default_ttl_ms: not a number in 0..4294967295: 'zz'\n");
    /* A value the flag set that passes the parse but not the range: the
     * range error names the flag, not the file that set the key before. */
    config_report_init(&r);
    cr_assert_eq(config_load_file_report(&c, path, &r), 0);
    cr_assert_eq(config_set_report(&c, "agent", "default_ttl_ms", "1", "--default-ttl", &r), 0);
    cr_assert_eq(config_validate_report(&c, &r), -1);
    unlink(path);
    cr_assert_not_null(strstr(r.text, "--default-ttl: [agent] default_ttl_ms = 1: must be between"),
                       "%s", r.text);
    cr_assert_null(strstr(r.text, path), "the file is named: %s", r.text);
}

Test(report, an_error_about_a_default_has_no_source)
{
    static struct config c;
    static struct config_report r;
    config_defaults(&c);
    config_report_init(&r);
    cr_assert_eq(config_set_report(&c, "agent", "max_ttl_ms", "1000", "-x", &r), 0);
    cr_assert_eq(config_validate_report(&c, &r), -1);
    /* default_ttl_ms (30000 by default) above the flag's max_ttl_ms: about
     * a default, told as before. */
    cr_assert_not_null(strstr(r.text, "\n[agent] default_ttl_ms = ") ||
                               strncmp(r.text, "[agent] default_ttl_ms = ", 25) == 0
                           ? r.text
                           : NULL,
                       "%s", r.text);
}

/* The refused lines of a file with more errors than the report keeps (32):
 * nbad unknown keys in [agent] from line 2, and a line without '=' before
 * them (syntax_first) or after them. The report is checked against the
 * file; config_load_file (a reload) names the first error. */
#define KEPT_ERRORS 32

static void check_many_errors(int nbad, bool syntax_first)
{
    static struct config c;
    static struct config_report r;
    static char text[8192];
    char path[256], want[400], err[512];
    size_t len = 0;
    int syntax_line = syntax_first ? 2 : nbad + 2, line = 2;
    len += (size_t)snprintf(text + len, sizeof text - len, "[agent]\n");
    for (int i = 0; i < nbad + 1; i++, line++) {
        if (line == syntax_line)
            len += (size_t)snprintf(text + len, sizeof text - len, "this line is no setting\n");
        else
            len += (size_t)snprintf(text + len, sizeof text - len, "bogus_key_%d = 1\n", line);
        cr_assert_lt(len, sizeof text);
    }
    write_temp(path, sizeof path, text);
    config_defaults(&c);
    config_report_init(&r);
    cr_assert_eq(config_load_file_report(&c, path, &r), -1, "%s", r.text);
    /* The first 32 errors, each with its line, in the order of the file;
     * the others counted. */
    const char *prev = r.text;
    for (line = 2; line < 2 + KEPT_ERRORS; line++) {
        if (line == syntax_line)
            snprintf(want, sizeof want, "%s:%d: syntax error\n", path, line);
        else
            snprintf(want, sizeof want, "%s:%d: unknown setting [agent] bogus_key_%d\n", path, line,
                     line);
        const char *at = strstr(r.text, want);
        cr_assert_not_null(at, "'%s' lacks '%s'", r.text, want);
        cr_assert_geq(at, prev, "'%s' out of the order of the file: %s", want, r.text);
        prev = at;
    }
    snprintf(want, sizeof want, "%s:%d:", path, 2 + KEPT_ERRORS);
    cr_assert_null(strstr(r.text, want), "more than %d errors listed: %s", KEPT_ERRORS, r.text);
    snprintf(want, sizeof want, "%s: %d more refused line(s)\n", path, nbad + 1 - KEPT_ERRORS);
    cr_assert_not_null(strstr(r.text, want), "'%s' lacks '%s'", r.text, want);
    cr_assert_eq(r.nerrors, KEPT_ERRORS + 1, "%u errors: %s", r.nerrors, r.text);

    /* A reload reads the file the same way, and names its first error. */
    config_defaults(&c);
    cr_assert_eq(config_load_file(&c, path, err, sizeof err), -1);
    unlink(path);
    if (syntax_first)
        snprintf(want, sizeof want, "%s:2: syntax error", path);
    else
        snprintf(want, sizeof want, "%s:2: unknown setting [agent] bogus_key_2", path);
    cr_assert_str_eq(err, want);
}

Test(report, a_syntax_error_after_as_many_refused_lines_as_are_kept_is_counted)
{
    check_many_errors(KEPT_ERRORS, false);
}

Test(report, a_syntax_error_after_more_refused_lines_than_are_kept_is_counted)
{
    check_many_errors(40, false);
}

Test(report, a_syntax_error_before_many_refused_lines_comes_first)
{
    check_many_errors(40, true);
    check_many_errors(KEPT_ERRORS, true);
}

/* One fewer refused line than are kept: the syntax error is the last one
 * listed, nothing more counted. */
Test(report, a_syntax_error_after_one_refused_line_fewer_than_are_kept_is_listed)
{
    static struct config c;
    static struct config_report r;
    static char text[8192];
    char path[256], want[400];
    size_t len = (size_t)snprintf(text, sizeof text, "[agent]\n");
    for (int line = 2; line < 2 + KEPT_ERRORS - 1; line++)
        len += (size_t)snprintf(text + len, sizeof text - len, "bogus_key_%d = 1\n", line);
    snprintf(text + len, sizeof text - len, "this line is no setting\n");
    write_temp(path, sizeof path, text);
    config_defaults(&c);
    config_report_init(&r);
    cr_assert_eq(config_load_file_report(&c, path, &r), -1);
    unlink(path);
    snprintf(want, sizeof want, "%s:%d: syntax error\n", path, 1 + KEPT_ERRORS);
    cr_assert_not_null(strstr(r.text, want), "'%s' lacks '%s'", r.text, want);
    cr_assert_null(strstr(r.text, "more refused"), "%s", r.text);
    cr_assert_eq(r.nerrors, KEPT_ERRORS, "%u errors: %s", r.nerrors, r.text);
}
