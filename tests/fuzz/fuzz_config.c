/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_config.c -- libFuzzer target: dlockd's settings (agent/base/config.c)
 * built as dlockd's main.c builds them: the defaults, an INI file, then the
 * command-line flags, then the checks.
 *
 * The input is the file's text; after a NUL byte, if any, come the values
 * of the flags -s, -S, -r, --mode, --prefix and --default-ttl, each ended
 * by a NUL (an empty one is a flag not given). The file is read through a
 * memfd, by config_load_file() itself. A configuration that passes the
 * checks must hold what the checks promise; every error must say what is
 * wrong. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static char path[64];

/* The flags in the order of main.c's build_config(). */
static const char *const flags[][2] = {
    {"agent", "socket"}, {"agent", "status_socket"}, {"redis", "address"},
    {"redis", "mode"},   {"agent", "prefix"},        {"agent", "default_ttl_ms"},
};

static void terminated(const char *s, size_t cap)
{
    if (strnlen(s, cap) == cap)
        abort();
}

/* What config_validate() promises of a configuration it passes. */
static void check_valid(const struct config *c)
{
    terminated(c->socket, sizeof c->socket);
    terminated(c->status_socket, sizeof c->status_socket);
    terminated(c->prefix, sizeof c->prefix);
    terminated(c->sentinel_master, sizeof c->sentinel_master);
    if (!c->socket[0] || !c->prefix[0] || strcmp(c->socket, c->status_socket) == 0)
        abort();
    if (!(c->renew_fraction >= 0.05 && c->renew_fraction <= 0.8) || isnan(c->renew_fraction))
        abort();
    if (c->min_ttl_ms > c->default_ttl_ms || c->default_ttl_ms > c->max_ttl_ms ||
        c->min_ttl_ms < 10)
        abort();
    if (c->nnodes < 1 || c->nnodes > CONFIG_MAX_NODES)
        abort();
    if (c->mode == REDIS_MODE_QUORUM && (c->nnodes < 3 || c->nnodes % 2 == 0))
        abort();
    if (c->mode == REDIS_MODE_SENTINEL && !c->sentinel_master[0])
        abort();
    if (c->max_name_len < 1 || c->max_name_len > WIRE_MAX_NAME || c->max_leases_per_conn < 1 ||
        c->policy.nrules > POLICY_MAX_RULES || c->policy.nsee_all > POLICY_MAX_WHO)
        abort();
    char addr[400];
    for (unsigned i = 0; i < c->nnodes; i++)
        terminated(config_addr_str(&c->nodes[i], addr, sizeof addr), sizeof addr);
    for (unsigned i = 0; i < c->policy.nrules; i++)
        terminated(c->policy.rules[i].pattern, sizeof c->policy.rules[i].pattern);
    /* The policy as the agent asks it, for a few names and peers. */
    static const uint32_t gids[] = {0, 100, 1000};
    static const char *const names[] = {"a", "build/x", "x:1", ""};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
        (void)policy_allows(&c->policy, (uint32_t)n * 1000, gids, 3, names[n]);
    (void)policy_sees_all(&c->policy, 1000, gids, 3);
    char err[600] = "";
    if (config_check_groups(c, err, sizeof err) != 0 && !err[0])
        abort();
}

/* An error must say what is wrong. */
static void check_error(const char *err, size_t cap)
{
    terminated(err, cap);
    if (!err[0])
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    log_set_level(LOG_ERROR);
    memfd = memfd_create("dlockd.conf", MFD_CLOEXEC);
    if (memfd < 0)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t file_len = nul ? (size_t)(nul - data) : size;
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, file_len, 0) != (ssize_t)file_len)
        abort();
    static struct config cfg;
    char err[600] = "";
    config_defaults(&cfg);
    if (config_load_file(&cfg, path, err, sizeof err) != 0) {
        check_error(err, sizeof err);
        return 0;
    }
    /* The flags' values, NUL-terminated in a copy of the rest. */
    size_t rest_len = nul ? size - file_len - 1 : 0;
    char *rest = malloc(rest_len + 1);
    if (!rest)
        abort();
    if (rest_len)
        memcpy(rest, nul + 1, rest_len);
    rest[rest_len] = '\0';
    const char *v = rest;
    int rc = 0;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0] && v < rest + rest_len && rc == 0; i++) {
        if (*v)
            rc = config_set(&cfg, flags[i][0], flags[i][1], v, err, sizeof err);
        v += strlen(v) + 1;
    }
    free(rest);
    if (rc != 0) {
        check_error(err, sizeof err);
        return 0;
    }
    /* Not configured, the status socket goes beside the client socket. */
    if (!cfg.status_socket_set &&
        wire_status_sibling(cfg.socket, cfg.status_socket, sizeof cfg.status_socket) != 0)
        return 0;
    if (config_validate(&cfg, err, sizeof err) != 0)
        check_error(err, sizeof err);
    else
        check_valid(&cfg);
    return 0;
}
