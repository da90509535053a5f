/* SPDX-License-Identifier: BSD-3-Clause */
/* config.c -- dlockd settings: defaults, INI parsing through inih, checks. */
#include "config.h"

#include <errno.h>
#include <fnmatch.h>
#include <grp.h>
#include <ini.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "keys.h"
#include "log.h"
#include "text.h"

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->socket, sizeof c->socket, "%s", CONFIG_DEFAULT_SOCKET);
    c->socket_mode = 0660;
    snprintf(c->status_socket, sizeof c->status_socket, "%s", CONFIG_DEFAULT_STATUS);
    c->status_socket_mode = 0660;
    snprintf(c->prefix, sizeof c->prefix, "dlock:");
    c->default_ttl_ms = 30000;
    c->min_ttl_ms = 30;
    /* Also the restart exclusion of quorum mode: with the 1 s by which a
     * node's uptime may be off, a freshly started node counts within 46 s
     * (docs/quorum.md). Renewal keeps longer holds alive. */
    c->max_ttl_ms = 45000;
    c->renew_fraction = 1.0 / 3.0;
    c->retry_fallback_ms = 100;
    c->retry_max_ms = 3000;
    c->cohort_handoffs = 32;
    c->cohort_ms = 20;
    c->max_name_len = 200;
    c->max_leases_per_conn = 100000;
    c->max_waiters_per_conn = 1024;
    c->max_connections = 1024;
    c->metrics_names_max = 100;
    c->handshake_timeout_ms = 10000;
    /* One uid cannot take every connection or pin much memory. */
    c->policy.max_connections_per_uid = 256;
    c->policy.max_output_per_uid = 16u << 20;
    /* Nor take the Redis pipeline from the others: a host's real load sits
     * far below these; a flood of short leases does not
     * (docs/architecture.md, "Fair renewal"). */
    c->policy.max_leases_per_uid = 10000;
    c->policy.max_waiters_per_uid = 4096;
    c->policy.renew_budget_per_uid = 600;
    c->shutdown_timeout_ms = 2000;
    c->outage_wait_ms = CONFIG_OUTAGE_NONE;
    c->log_level = LOG_INFO;
    memcpy(c->log_format, "plain", 6);
    config_parse_addr("127.0.0.1:6379", &c->nodes[0]);
    c->nnodes = 1;
    c->mode = REDIS_MODE_SINGLE;
    c->connect_timeout_ms = 1000;
    c->command_timeout_ms = 2000;
    c->reconnect_min_ms = 50;
    c->reconnect_max_ms = 2000;
    c->node_timeout_ms = 20;
    c->wait_timeout_ms = 100;
    c->topology_refresh_ms = 2000;
    c->tls_verify = true;
    memcpy(c->tls_min_version, "1.2", 4);
}

int config_parse_addr(const char *text, struct redis_addr *out)
{
    struct redis_addr a = {0};
    bool scheme = false;
    if (strncmp(text, "rediss://", 9) == 0) {
        a.tls = true;
        text += 9;
        scheme = true;
    } else if (strncmp(text, "redis://", 8) == 0) {
        text += 8;
        scheme = true;
    }
    if (strncmp(text, "unix:", 5) == 0) {
        size_t n = strlen(text + 5);
        if (scheme || n == 0 || n >= sizeof a.path)
            return -1;
        memcpy(a.path, text + 5, n + 1);
        *out = a;
        return 0;
    }
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text)
        return -1;
    const char *host = text;
    size_t hlen = (size_t)(colon - text);
    if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
        host++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= sizeof a.host)
        return -1;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
        return -1;
    memcpy(a.host, host, hlen);
    a.host[hlen] = '\0';
    a.port = (int)port;
    *out = a;
    return 0;
}

int config_parse_nodes(struct config *c, const char *text, bool append)
{
    struct redis_addr nodes[CONFIG_MAX_NODES];
    unsigned n = 0;
    if (append) {
        memcpy(nodes, c->nodes, c->nnodes * sizeof nodes[0]);
        n = c->nnodes;
    }
    const char *p = text;
    for (;;) {
        p += strspn(p, ", \t");
        size_t len = strcspn(p, ", \t");
        if (len == 0)
            break;
        char one[400];
        if (n == CONFIG_MAX_NODES || len >= sizeof one)
            return -1;
        memcpy(one, p, len);
        one[len] = '\0';
        if (config_parse_addr(one, &nodes[n++]) != 0)
            return -1;
        p += len;
    }
    if (n == 0 || n == (append ? c->nnodes : 0))
        return -1;
    memcpy(c->nodes, nodes, n * sizeof nodes[0]);
    c->nnodes = n;
    return 0;
}

const char *config_addr_str(const struct redis_addr *a, char *buf, size_t len)
{
    if (a->path[0])
        snprintf(buf, len, "unix:%s", a->path);
    else
        snprintf(buf, len, "%s%s:%d", a->tls ? "rediss://" : "", a->host, a->port);
    return buf;
}

static int parse_u32(const char *v, uint32_t *out, int base)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, base);
    if (errno || *end || end == v || v[0] == '-' || n > UINT32_MAX)
        return -1;
    *out = (uint32_t)n;
    return 0;
}

static int parse_yes_no(const char *v, bool *out)
{
    static const char *const yes[] = {"yes", "true", "on", "1"}, *const no[] = {"no", "false",
                                                                                "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int parse_level(const char *v, int *out)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return -1;
}

static int copy_str(char *dst, size_t cap, const char *v)
{
    size_t n = strlen(v);
    if (n >= cap)
        return -1;
    memcpy(dst, v, n + 1);
    return 0;
}

/* The u32 settings, by section and key. */
struct u32_key {
    const char *section, *key;
    size_t offset;
};

#define U32KEY(s, k)                                                                               \
    {                                                                                              \
        s, #k, offsetof(struct config, k)                                                          \
    }
static const struct u32_key u32_keys[] = {
    U32KEY("agent", default_ttl_ms),
    U32KEY("agent", min_ttl_ms),
    U32KEY("agent", max_ttl_ms),
    U32KEY("agent", retry_fallback_ms),
    U32KEY("agent", retry_max_ms),
    U32KEY("agent", cohort_handoffs),
    U32KEY("agent", cohort_ms),
    U32KEY("agent", max_name_len),
    U32KEY("agent", max_leases_per_conn),
    U32KEY("agent", max_waiters_per_conn),
    U32KEY("agent", max_connections),
    U32KEY("agent", handshake_timeout_ms),
    U32KEY("agent", shutdown_timeout_ms),
    U32KEY("agent", outage_wait_ms),
    U32KEY("agent", default_max_hold_ms),
    U32KEY("agent", max_hold_limit_ms),
    U32KEY("agent", default_progress_ms),
    U32KEY("agent", progress_limit_ms),
    U32KEY("agent", metrics_names_max),
    U32KEY("redis", connect_timeout_ms),
    U32KEY("redis", command_timeout_ms),
    U32KEY("redis", reconnect_min_ms),
    U32KEY("redis", reconnect_max_ms),
    U32KEY("redis", node_timeout_ms),
    U32KEY("redis", wait_replicas),
    U32KEY("redis", wait_timeout_ms),
    U32KEY("redis", topology_refresh_ms),
    {"policy", "max_leases_per_uid", offsetof(struct config, policy.max_leases_per_uid)},
    {"policy", "max_waiters_per_uid", offsetof(struct config, policy.max_waiters_per_uid)},
    {"policy", "max_connections_per_uid", offsetof(struct config, policy.max_connections_per_uid)},
    {"policy", "max_output_per_uid", offsetof(struct config, policy.max_output_per_uid)},
    {"policy", "renew_budget_per_uid", offsetof(struct config, policy.renew_budget_per_uid)},
};

int config_check_groups(const struct config *c, char *err, size_t errlen)
{
    const char *const groups[][2] = {{"socket_group", c->socket_group},
                                     {"status_socket_group", c->status_socket_group}};
    for (size_t i = 0; i < 2; i++) {
        char who[80];
        struct policy_who w;
        snprintf(who, sizeof who, "@%s", groups[i][1]);
        if (groups[i][1][0] && config_parse_who(who, &w) != 0) {
            snprintf(err, errlen, "[agent] %s = %s: no such group", groups[i][0], groups[i][1]);
            return -1;
        }
    }
    return 0;
}

/* "*", "user" or uid, "@group" or "@gid". */
int config_parse_who(const char *s, struct policy_who *out)
{
    char *end;
    if (strcmp(s, "*") == 0) {
        *out = (struct policy_who){.kind = POLICY_ANY};
        return 0;
    }
    bool group = s[0] == '@';
    const char *name = s + group;
    if (!name[0])
        return -1;
    unsigned long id = strtoul(name, &end, 10);
    if (*end == '\0' && name[0] >= '0' && name[0] <= '9' && id <= UINT32_MAX) {
        *out = (struct policy_who){.kind = group ? POLICY_GID : POLICY_UID, .id = (uint32_t)id};
        return 0;
    }
    if (group) {
        const struct group *g = getgrnam(name);
        if (!g)
            return -1;
        *out = (struct policy_who){.kind = POLICY_GID, .id = (uint32_t)g->gr_gid};
    } else {
        const struct passwd *pw = getpwnam(name);
        if (!pw)
            return -1;
        *out = (struct policy_who){.kind = POLICY_UID, .id = (uint32_t)pw->pw_uid};
    }
    return 0;
}

/* The next word of *p, separated by any of seps, into out; 0 at the end,
 * -1 when too long. */
static int next_word(const char **p, char *out, size_t cap, const char *seps)
{
    *p += strspn(*p, seps);
    size_t n = strcspn(*p, seps);
    if (n == 0)
        return 0;
    if (n >= cap)
        return -1;
    memcpy(out, *p, n);
    out[n] = '\0';
    *p += n;
    return 1;
}

/* "allow = WHO PATTERN...": one rule per pattern, added to the list. The
 * words are separated by blanks only: a glob may hold a comma ("[a,b]*"). */
static int parse_rules(struct policy_rule *rules, unsigned *nrules, const char *v)
{
    char word[POLICY_PATTERN_MAX];
    struct policy_who who;
    if (next_word(&v, word, sizeof word, " \t") != 1 || config_parse_who(word, &who) != 0)
        return -1;
    unsigned n = *nrules;
    int rc;
    while ((rc = next_word(&v, word, sizeof word, " \t")) == 1) {
        if (n == POLICY_MAX_RULES)
            return -1;
        rules[n].who = who;
        memcpy(rules[n].pattern, word, strlen(word) + 1);
        n++;
    }
    if (rc < 0 || n == *nrules)
        return -1; /* no pattern */
    *nrules = n;
    return 0;
}

static int parse_allow(struct policy *pol, const char *v)
{
    return parse_rules(pol->rules, &pol->nrules, v);
}

/* "force = WHO PATTERN...": as allow's, in a list of their own. */
static int parse_force(struct policy *pol, const char *v)
{
    return parse_rules(pol->force, &pol->nforce, v);
}

/* "see_all = WHO...": replaces the list. */
static int parse_see_all(struct policy *pol, const char *v)
{
    struct policy_who who[POLICY_MAX_WHO];
    unsigned n = 0;
    char word[64];
    int rc;
    while ((rc = next_word(&v, word, sizeof word, ", \t")) == 1) {
        if (n == POLICY_MAX_WHO || config_parse_who(word, &who[n]) != 0)
            return -1;
        n++;
    }
    if (rc < 0)
        return -1;
    memcpy(pol->see_all, who, n * sizeof who[0]);
    pol->nsee_all = n;
    pol->see_all_set = true;
    return 0;
}

static bool who_matches(const struct policy_who *w, uint32_t uid, const uint32_t *gids,
                        size_t ngids)
{
    if (w->kind == POLICY_ANY)
        return true;
    if (w->kind == POLICY_UID)
        return w->id == uid;
    for (size_t i = 0; i < ngids; i++)
        if (gids[i] == w->id)
            return true;
    return false;
}

/* Whether one of the n rules names the peer with a pattern that matches name. */
static bool rules_match(const struct policy_rule *rules, unsigned n, uint32_t uid,
                        const uint32_t *gids, size_t ngids, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (who_matches(&rules[i].who, uid, gids, ngids) && fnmatch(rules[i].pattern, name, 0) == 0)
            return true;
    return false;
}

bool policy_allows(const struct policy *p, uint32_t uid, const uint32_t *gids, size_t ngids,
                   const char *name)
{
    return p->nrules == 0 || rules_match(p->rules, p->nrules, uid, gids, ngids, name);
}

bool policy_sees_all(const struct policy *p, uint32_t uid, const uint32_t *gids, size_t ngids)
{
    if (!p->see_all_set)
        return true;
    for (unsigned i = 0; i < p->nsee_all; i++)
        if (who_matches(&p->see_all[i], uid, gids, ngids))
            return true;
    return false;
}

bool policy_may_force(const struct policy *p, uint32_t uid, const uint32_t *gids, size_t ngids,
                      const char *name)
{
    return rules_match(p->force, p->nforce, uid, gids, ngids, name);
}

static int set_special(struct config *c, const char *section, const char *key, const char *v)
{
    if (strcmp(section, "policy") == 0 && strcmp(key, "allow") == 0)
        return parse_allow(&c->policy, v);
    if (strcmp(section, "policy") == 0 && strcmp(key, "see_all") == 0)
        return parse_see_all(&c->policy, v);
    if (strcmp(section, "policy") == 0 && strcmp(key, "force") == 0)
        return parse_force(&c->policy, v);
    if (strcmp(section, "formats") == 0 && strcmp(key, "redisson") == 0)
        return formats_add(&c->formats, KEY_FORMAT_REDISSON, v);
    if (strcmp(section, "formats") == 0 && strcmp(key, "redisson_rwlock") == 0)
        return formats_add(&c->formats, KEY_FORMAT_REDISSON_RW, v);
    if (strcmp(section, "formats") == 0 && strcmp(key, "redisson_semaphore") == 0)
        return formats_add(&c->formats, KEY_FORMAT_REDISSON_SEM, v);
    bool agent = strcmp(section, "agent") == 0, redis = strcmp(section, "redis") == 0;
    if (agent && strcmp(key, "outage_wait_ms") == 0 && strcmp(v, "none") == 0) {
        c->outage_wait_ms = CONFIG_OUTAGE_NONE;
        return 0;
    }
    if (agent && strcmp(key, "socket") == 0)
        return copy_str(c->socket, sizeof c->socket, v);
    if (agent && strcmp(key, "prefix") == 0)
        return v[0] ? copy_str(c->prefix, sizeof c->prefix, v) : -1;
    if (agent && strcmp(key, "state_dir") == 0) {
        c->state_dir_set = true;
        return copy_str(c->state_dir, sizeof c->state_dir, v);
    }
    if (agent && strcmp(key, "status_socket") == 0) {
        c->status_socket_set = true;
        return copy_str(c->status_socket, sizeof c->status_socket, v);
    }
    if (agent && (strcmp(key, "socket_group") == 0 || strcmp(key, "status_socket_group") == 0)) {
        /* A group name or gid, looked up when the socket is made (and by
         * dlockd -n): the file may name a group that the package creates. */
        if (v[strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")] ||
            v[0] == '-')
            return -1;
        if (strcmp(key, "socket_group") == 0)
            return copy_str(c->socket_group, sizeof c->socket_group, v);
        return copy_str(c->status_socket_group, sizeof c->status_socket_group, v);
    }
    if (agent && strcmp(key, "metrics_listen") == 0) {
        struct redis_addr a;
        if (v[0] && (strstr(v, "://") || config_parse_addr(v, &a) != 0 || a.path[0]))
            return -1;
        return copy_str(c->metrics_listen, sizeof c->metrics_listen, v);
    }
    if (agent && strcmp(key, "metrics_names") == 0)
        return copy_str(c->metrics_names, sizeof c->metrics_names, v);
    if (agent && (strcmp(key, "socket_mode") == 0 || strcmp(key, "status_socket_mode") == 0)) {
        uint32_t m;
        if (parse_u32(v, &m, 8) || m > 0777)
            return -1;
        *(strcmp(key, "socket_mode") == 0 ? &c->socket_mode : &c->status_socket_mode) = m;
        return 0;
    }
    if (agent && strcmp(key, "renew_fraction") == 0) {
        char *end;
        c->renew_fraction = strtod(v, &end);
        return (*end || end == v) ? -1 : 0;
    }
    if (agent && strcmp(key, "log_level") == 0)
        return parse_level(v, &c->log_level);
    if (agent && strcmp(key, "log_format") == 0) {
        enum log_format f;
        if (log_format_parse(v, &f) != 0)
            return -1;
        return copy_str(c->log_format, sizeof c->log_format, log_format_name(f));
    }
    if (agent && strcmp(key, "fence_retention_ms") == 0) {
        /* Fencing keeps one mark per hash slot, without expiry: nothing is
         * retained per name any more. Files of earlier versions still load. */
        uint32_t ms;
        if (parse_u32(v, &ms, 10))
            return -1;
        log_warn("fence_retention_ms is obsolete and ignored");
        return 0;
    }
    if (redis && strcmp(key, "address") == 0)
        return config_parse_nodes(c, v, false);
    if (redis && strcmp(key, "user") == 0)
        return copy_str(c->redis_user, sizeof c->redis_user, v);
    if (redis && strcmp(key, "password") == 0)
        return copy_str(c->redis_password, sizeof c->redis_password, v);
    if (redis && strcmp(key, "sentinel_master") == 0)
        return v[0] && !strpbrk(v, " \t\r\n")
                   ? copy_str(c->sentinel_master, sizeof c->sentinel_master, v)
                   : -1;
    if (redis && strcmp(key, "sentinel_user") == 0)
        return copy_str(c->sentinel_user, sizeof c->sentinel_user, v);
    if (redis && strcmp(key, "sentinel_password") == 0)
        return copy_str(c->sentinel_password, sizeof c->sentinel_password, v);
    if (redis && strcmp(key, "mode") == 0)
        return config_parse_mode(v, &c->mode_setting);
    if (redis && strcmp(key, "tls") == 0)
        return parse_yes_no(v, &c->tls_setting);
    if (redis && strcmp(key, "tls_verify") == 0)
        return parse_yes_no(v, &c->tls_verify);
    if (redis && strcmp(key, "tls_min_version") == 0)
        return strcmp(v, "1.2") == 0 || strcmp(v, "1.3") == 0
                   ? copy_str(c->tls_min_version, sizeof c->tls_min_version, v)
                   : -1;
    static const struct {
        const char *key;
        size_t offset;
    } tls_files[] = {
        {"tls_ca_file", offsetof(struct config, tls_ca_file)},
        {"tls_ca_dir", offsetof(struct config, tls_ca_dir)},
        {"tls_cert_file", offsetof(struct config, tls_cert_file)},
        {"tls_key_file", offsetof(struct config, tls_key_file)},
        {"tls_server_name", offsetof(struct config, tls_server_name)},
    };
    for (size_t i = 0; redis && i < sizeof tls_files / sizeof tls_files[0]; i++)
        if (strcmp(key, tls_files[i].key) == 0)
            return strpbrk(v, "\r\n") ? -1 : copy_str((char *)c + tls_files[i].offset, 256, v);
    if (redis && strcmp(key, "database") == 0) {
        uint32_t db;
        if (parse_u32(v, &db, 10) || db > 1000000)
            return -1;
        c->redis_db = (int)db;
        return 0;
    }
    return 1; /* not a special key */
}

/* The range of a numeric setting parsed by set_special(), for its error
 * message; "" for the others. */
static const char *special_range(const char *key)
{
    if (strcmp(key, "database") == 0)
        return " (must be between 0 and 1000000)";
    if (strcmp(key, "mode") == 0)
        return " (auto, single, quorum, cluster or sentinel)";
    if (strcmp(key, "sentinel_master") == 0)
        return " (a master name, without blanks)";
    if (strcmp(key, "tls") == 0 || strcmp(key, "tls_verify") == 0)
        return " (yes or no)";
    if (strcmp(key, "tls_min_version") == 0)
        return " (1.2 or 1.3)";
    if (strncmp(key, "tls_", 4) == 0)
        return " (a path or name of up to 255 bytes)";
    if (strcmp(key, "socket_mode") == 0 || strcmp(key, "status_socket_mode") == 0)
        return " (an octal mode between 0 and 0777)";
    if (strcmp(key, "renew_fraction") == 0)
        return " (a decimal number between 0.05 and 0.8)";
    if (strcmp(key, "log_format") == 0)
        return " (plain, logfmt or json)";
    if (strncmp(key, "redisson", 8) == 0)
        return " (blank-separated name patterns, up to 64 in [formats])";
    return "";
}

/* ---- the report of a check ---- */

void config_report_init(struct config_report *r)
{
    r->nerrors = 0;
    r->len = 0;
    r->text[0] = '\0';
    r->norigins = 0;
}

static const char *origin_of(const struct config_report *r, const char *section, const char *key)
{
    if (!section || !key)
        return NULL;
    for (unsigned i = 0; i < r->norigins; i++)
        if (strcmp(r->origin[i].section, section) == 0 && strcmp(r->origin[i].key, key) == 0)
            return r->origin[i].from;
    return NULL;
}

void config_report_origin(struct config_report *r, const char *section, const char *key,
                          const char *from)
{
    unsigned i;
    for (i = 0; i < r->norigins; i++)
        if (strcmp(r->origin[i].section, section) == 0 && strcmp(r->origin[i].key, key) == 0)
            break;
    if (i == CONFIG_ORIGINS_MAX)
        return; /* more settings than there are: an unknown key's line, reported already */
    struct config_origin *o = &r->origin[i];
    snprintf(o->section, sizeof o->section, "%s", section);
    snprintf(o->key, sizeof o->key, "%s", key);
    snprintf(o->from, sizeof o->from, "%s", from);
    if (i == r->norigins)
        r->norigins++;
}

/* Appends one line "FROM: MSG" (or "MSG") to the report. */
static void report_line(struct config_report *r, const char *from, const char *msg)
{
    r->nerrors++;
    size_t room = sizeof r->text - r->len;
    int n = snprintf(r->text + r->len, room, "%s%s%s\n", from ? from : "", from ? ": " : "", msg);
    if (n < 0)
        return;
    if ((size_t)n >= room) { /* cut: the last line ends the text */
        r->len = sizeof r->text - 1;
        r->text[r->len - 1] = '\n';
        return;
    }
    r->len += (size_t)n;
}

void config_report_error(struct config_report *r, const char *section, const char *key,
                         const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    report_line(r, origin_of(r, section, key), msg);
}

void config_report_first(const struct config_report *r, char *buf, size_t len)
{
    size_t n = strcspn(r->text, "\n");
    snprintf(buf, len, "%.*s", (int)n, r->text);
}

int config_set(struct config *c, const char *section, const char *key, const char *value, char *err,
               size_t errlen)
{
    int rc = set_special(c, section, key, value);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        snprintf(err, errlen, "[%s] %s: invalid value '%s'%s", section, key, value,
                 special_range(key));
        return -1;
    }
    for (size_t i = 0; i < sizeof u32_keys / sizeof u32_keys[0]; i++) {
        const struct u32_key *k = &u32_keys[i];
        if (strcmp(section, k->section) || strcmp(key, k->key))
            continue;
        if (parse_u32(value, (uint32_t *)((char *)c + k->offset), 10) == 0)
            return 0;
        snprintf(err, errlen, "[%s] %s: not a number in 0..4294967295: '%s'", section, key, value);
        return -1;
    }
    snprintf(err, errlen, "unknown setting [%s] %s", section, key);
    return -1;
}

int config_set_report(struct config *c, const char *section, const char *key, const char *value,
                      const char *from, struct config_report *r)
{
    char err[1024];
    if (config_set(c, section, key, value, err, sizeof err) != 0) {
        report_line(r, from, err);
        return -1;
    }
    config_report_origin(r, section, key, from);
    return 0;
}

/* File reading counts lines so that a setting's error carries its own line:
 * inih reports only the first failing line, which may be a syntax error.
 * Every refused setting is kept, with its line, and the reading goes on. */
#define LOAD_ERRORS_MAX 32
struct load_ctx {
    struct config *c;
    FILE *f;
    const char *path;
    struct config_report *r;
    int line;      /* lines read so far */
    int long_line; /* a line longer than the parser takes, 0 if none */
    int max_line;
    bool nodes_seen; /* an address line was read: more of them add nodes */
    unsigned nerr, more;
    struct {
        int line;
        char msg[512];
    } err[LOAD_ERRORS_MAX];
};

static char *read_line(char *str, int num, void *stream)
{
    struct load_ctx *ctx = stream;
    char *s = fgets(str, num, ctx->f);
    if (!s)
        return NULL;
    ctx->line++;
    if (!strchr(s, '\n')) {
        /* A full buffer: the line fits if its end comes next. Otherwise the
         * parser would take the rest for a line of its own. */
        int next = getc(ctx->f);
        if (next != '\n' && next != EOF) {
            ctx->long_line = ctx->line;
            ctx->max_line = num - 1;
            return NULL;
        }
    }
    return s;
}

static void load_error(struct load_ctx *ctx, int line, const char *msg)
{
    if (ctx->nerr == LOAD_ERRORS_MAX) {
        ctx->more++;
        return;
    }
    ctx->err[ctx->nerr].line = line;
    snprintf(ctx->err[ctx->nerr].msg, sizeof ctx->err[ctx->nerr].msg, "%s", msg);
    ctx->nerr++;
}

static int on_ini_line(void *user, const char *section, const char *name, const char *value)
{
    struct load_ctx *ctx = user;
    char msg[512];
    if (strcmp(section, "redis") == 0 && strcmp(name, "address") == 0) {
        /* Repeated (or continued on indented lines), the list grows. */
        if (config_parse_nodes(ctx->c, value, ctx->nodes_seen) == 0) {
            ctx->nodes_seen = true;
            goto set;
        }
        snprintf(msg, sizeof msg,
                 "[redis] address: invalid value '%s' (an address is host:port or unix:/path; "
                 "at most %d nodes)",
                 value, CONFIG_MAX_NODES);
    } else if (config_set(ctx->c, section, name, value, msg, sizeof msg) == 0) {
        goto set;
    }
    load_error(ctx, ctx->line, msg);
    return 1; /* on to the next line: every error is reported */
set:
    if (ctx->r) {
        char from[300];
        snprintf(from, sizeof from, "%s:%d", ctx->path, ctx->line);
        config_report_origin(ctx->r, section, name, from);
    }
    return 1;
}

/* Reads path over c: the refused lines in ctx->err (in the order of the
 * file, a syntax error among them), or -1 with why in fail when the file
 * cannot be read. */
static int load_file(struct config *c, const char *path, struct config_report *r,
                     struct load_ctx *ctx, char *fail, size_t faillen)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->c = c;
    ctx->path = path;
    ctx->r = r;
    ctx->f = fopen(path, "r");
    if (!ctx->f) {
        snprintf(fail, faillen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int rc = ini_parse_stream(read_line, ctx, on_ini_line, ctx);
    /* inih takes a read error (a directory, an I/O error) for the end. */
    bool read_failed = ferror(ctx->f);
    int read_errno = errno;
    fclose(ctx->f);
    if (read_failed) {
        snprintf(fail, faillen, "%s: cannot read: %s", path, strerror(read_errno));
        return -1;
    }
    if (rc > 0) {
        /* The handler takes every line: inih's own first error, a syntax
         * error, goes where its line is among the others. */
        unsigned at = 0;
        while (at < ctx->nerr && ctx->err[at].line < rc)
            at++;
        if (at == LOAD_ERRORS_MAX) {
            ctx->more++; /* after every kept error: counted only */
        } else {
            if (ctx->nerr == LOAD_ERRORS_MAX) {
                ctx->nerr--;
                ctx->more++;
            }
            memmove(&ctx->err[at + 1], &ctx->err[at], (ctx->nerr - at) * sizeof ctx->err[0]);
            ctx->err[at].line = rc;
            snprintf(ctx->err[at].msg, sizeof ctx->err[at].msg, "syntax error");
            ctx->nerr++;
        }
    }
    if (ctx->long_line) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "line longer than %d bytes (split a long address list over several address "
                 "lines)",
                 ctx->max_line);
        load_error(ctx, ctx->long_line, msg);
    }
    return 0;
}

int config_load_file_report(struct config *c, const char *path, struct config_report *r)
{
    struct load_ctx *ctx = malloc(sizeof *ctx);
    char fail[600];
    if (!ctx || load_file(c, path, r, ctx, fail, sizeof fail) != 0) {
        report_line(r, NULL, ctx ? fail : "out of memory");
        free(ctx);
        return -1;
    }
    char where[300];
    for (unsigned i = 0; i < ctx->nerr; i++) {
        snprintf(where, sizeof where, "%s:%d", path, ctx->err[i].line);
        report_line(r, where, ctx->err[i].msg);
    }
    if (ctx->more) {
        char msg[80];
        snprintf(msg, sizeof msg, "%u more refused line(s)", ctx->more);
        report_line(r, path, msg);
    }
    int rc = ctx->nerr ? -1 : 0;
    free(ctx);
    return rc;
}

int config_load_file(struct config *c, const char *path, char *err, size_t errlen)
{
    struct load_ctx *ctx = malloc(sizeof *ctx);
    if (!ctx) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    int rc = load_file(c, path, NULL, ctx, err, errlen);
    if (rc == 0 && ctx->nerr) {
        snprintf(err, errlen, "%s:%d: %s", path, ctx->err[0].line, ctx->err[0].msg);
        rc = -1;
    }
    free(ctx);
    return rc;
}

/* A prefix takes part in key names: no byte a name may not hold either, and
 * braces only as a whole Cluster hash tag (see keys.h). */
static bool prefix_ok(const char *p)
{
    size_t len = strlen(p);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)p[i] <= 0x20 || p[i] == 0x7f)
            return false;
    return !strpbrk(p, "{}") || key_has_hash_tag(p, len);
}

/* Whether two entries of the node list name the same address. */
static bool nodes_repeat(const struct config *c)
{
    for (unsigned i = 0; i < c->nnodes; i++)
        for (unsigned j = i + 1; j < c->nnodes; j++)
            if (c->nodes[i].port == c->nodes[j].port &&
                strcmp(c->nodes[i].host, c->nodes[j].host) == 0 &&
                strcmp(c->nodes[i].path, c->nodes[j].path) == 0)
                return true;
    return false;
}

/* ---- ranges ---- */

#define DAY_MS (24u * 3600 * 1000)

/* The values a u32 setting may take: lo to hi. zero, when set, says what 0
 * does (lo is 0 then); why, when set, says what the bounds protect. Every
 * setting of u32_keys belongs here: a value that parses may still make the
 * agent useless (no acquire can wait) or costly (gigabytes mapped per
 * connection). */
struct u32_range {
    const char *section, *key;
    size_t offset;
    uint32_t lo, hi;
    const char *zero, *why;
    bool none; /* also CONFIG_OUTAGE_NONE ("none"), outside lo..hi */
};

#define RANGE(s, k, lo, hi, zero, why)                                                             \
    {                                                                                              \
        s, #k, offsetof(struct config, k), lo, hi, zero, why, false                                \
    }
#define POLICY_RANGE(k, hi)                                                                        \
    {                                                                                              \
        "policy", #k, offsetof(struct config, policy.k), 0, hi, "no limit", NULL, false            \
    }
static const struct u32_range u32_ranges[] = {
    RANGE("agent", default_ttl_ms, 10, 7 * DAY_MS, NULL, NULL),
    RANGE("agent", min_ttl_ms, 10, 7 * DAY_MS, NULL, NULL),
    RANGE("agent", max_ttl_ms, 10, 7 * DAY_MS, NULL,
          "a crashed agent's locks stay taken for up to a TTL"),
    RANGE("agent", retry_fallback_ms, 10, 60000, NULL,
          "every waiting lock asks Redis this often when no release notice comes"),
    RANGE("agent", retry_max_ms, 0, 60000,
          "waiters retry every retry_fallback_ms whatever the notices",
          "a waiter whose release notice was lost waits up to this much longer"),
    RANGE("agent", cohort_handoffs, 0, 1000, "no handoff: every grant goes to Redis",
          "each grant from Redis reserves this many more fencing tokens"),
    RANGE("agent", cohort_ms, 1, 60000, NULL, "other hosts may wait this long for a name"),
    RANGE("agent", max_name_len, 1, 1024, NULL, "the protocol's limit"),
    RANGE("agent", max_leases_per_conn, 1, 1000000, NULL,
          "each connection maps a lease page of 40 bytes per lease"),
    RANGE("agent", max_waiters_per_conn, 1, 1000000, NULL, NULL),
    RANGE("agent", metrics_names_max, 1, 1000, NULL,
          "each name matched is two series in every scrape"),
    RANGE("agent", max_connections, 1, 65536, NULL, "each connection takes a file descriptor"),
    RANGE("agent", handshake_timeout_ms, 100, 600000, NULL,
          "a connection that has not said HELLO by then is closed"),
    RANGE("agent", shutdown_timeout_ms, 0, 60000, "do not wait", NULL),
    {"agent", "outage_wait_ms", offsetof(struct config, outage_wait_ms), 0, 3600000,
     "fail at once; none: no ceiling", NULL, true},
    RANGE("agent", default_max_hold_ms, 0, 7 * DAY_MS, "none", NULL),
    RANGE("agent", max_hold_limit_ms, 0, 7 * DAY_MS, "none", NULL),
    RANGE("agent", default_progress_ms, 0, 7 * DAY_MS, "none", NULL),
    RANGE("agent", progress_limit_ms, 0, 7 * DAY_MS, "none", NULL),
    RANGE("redis", connect_timeout_ms, 100, 60000, NULL, NULL),
    RANGE("redis", command_timeout_ms, 100, 60000, NULL,
          "a shorter one takes a busy Redis for a dead one"),
    RANGE("redis", reconnect_min_ms, 10, 60000, NULL, NULL),
    RANGE("redis", reconnect_max_ms, 10, 60000, NULL, NULL),
    RANGE("redis", node_timeout_ms, 1, 60000, NULL, NULL),
    RANGE("redis", wait_replicas, 0, 64, "no WAIT", NULL),
    RANGE("redis", wait_timeout_ms, 1, 60000, NULL, NULL),
    RANGE("redis", topology_refresh_ms, 100, 600000, NULL, NULL),
    POLICY_RANGE(max_leases_per_uid, 100000000),
    POLICY_RANGE(max_waiters_per_uid, 100000000),
    POLICY_RANGE(max_connections_per_uid, 65536),
    {"policy", "max_output_per_uid", offsetof(struct config, policy.max_output_per_uid), 65536,
     1u << 30, NULL, "bytes of unread replies one uid may pin; its connections wait past it",
     false},
    POLICY_RANGE(renew_budget_per_uid, 1000000),
};

/* "[section] key = value: must be between lo and hi (0: zero | why)". */
static void range_error(const struct u32_range *r, uint32_t v, struct config_report *rep)
{
    char note[128] = "";
    if (r->zero)
        snprintf(note, sizeof note, " (0: %s)", r->zero);
    else if (r->why)
        snprintf(note, sizeof note, " (%s)", r->why);
    config_report_error(rep, r->section, r->key, "[%s] %s = %u: must be between %u and %u%s",
                        r->section, r->key, (unsigned)v, (unsigned)r->lo, (unsigned)r->hi, note);
}

/* Each numeric setting on its own: every one out of its range reported. */
static void check_ranges(const struct config *c, struct config_report *rep)
{
    for (size_t i = 0; i < sizeof u32_ranges / sizeof u32_ranges[0]; i++) {
        const struct u32_range *r = &u32_ranges[i];
        uint32_t v = *(const uint32_t *)((const char *)c + r->offset);
        if (r->none && v == CONFIG_OUTAGE_NONE)
            continue;
        if (v < r->lo || v > r->hi)
            range_error(r, v, rep);
    }
    /* Written so that NaN fails too. */
    if (!(c->renew_fraction >= 0.05 && c->renew_fraction <= 0.8))
        config_report_error(rep, "agent", "renew_fraction",
                            "[agent] renew_fraction = %g: must be between 0.05 and 0.8",
                            c->renew_fraction);
}

/* "[section] key = value: must not exceed other (its value)[ why]". */
static void above(const char *section, const char *key, uint32_t v, const char *other,
                  uint32_t limit, const char *why, struct config_report *rep)
{
    config_report_error(rep, section, key, "[%s] %s = %u: must not exceed %s (%u)%s", section, key,
                        (unsigned)v, other, (unsigned)limit, why);
}

/* Settings bounded by other settings: every rule broken reported. */
static void check_relations(const struct config *c, struct config_report *rep)
{
    if (c->min_ttl_ms > c->max_ttl_ms)
        above("agent", "min_ttl_ms", c->min_ttl_ms, "max_ttl_ms", c->max_ttl_ms, "", rep);
    if (c->default_ttl_ms < c->min_ttl_ms || c->default_ttl_ms > c->max_ttl_ms)
        config_report_error(rep, "agent", "default_ttl_ms",
                            "[agent] default_ttl_ms = %u: must be between %u and %u (min_ttl_ms "
                            "and max_ttl_ms)",
                            (unsigned)c->default_ttl_ms, (unsigned)c->min_ttl_ms,
                            (unsigned)c->max_ttl_ms);
    /* A default above its limit would silently be the limit. */
    if (c->max_hold_limit_ms && c->default_max_hold_ms > c->max_hold_limit_ms)
        above("agent", "default_max_hold_ms", c->default_max_hold_ms, "max_hold_limit_ms",
              c->max_hold_limit_ms, ", which caps it", rep);
    if (c->progress_limit_ms && c->default_progress_ms > c->progress_limit_ms)
        above("agent", "default_progress_ms", c->default_progress_ms, "progress_limit_ms",
              c->progress_limit_ms, ", which caps it", rep);
    if (c->reconnect_min_ms > c->reconnect_max_ms)
        above("redis", "reconnect_min_ms", c->reconnect_min_ms, "reconnect_max_ms",
              c->reconnect_max_ms, "", rep);
    if (c->wait_replicas && c->wait_timeout_ms >= c->command_timeout_ms)
        above("redis", "wait_timeout_ms", c->wait_timeout_ms, "command_timeout_ms",
              c->command_timeout_ms - 1,
              " (a WAIT that outlasts it would take Redis for a dead one)", rep);
    if (c->mode == REDIS_MODE_QUORUM && c->node_timeout_ms >= c->min_ttl_ms)
        config_report_error(rep, "redis", "node_timeout_ms",
                            "[redis] node_timeout_ms = %u: must be between 1 and %u in quorum "
                            "mode (below min_ttl_ms)",
                            (unsigned)c->node_timeout_ms, (unsigned)c->min_ttl_ms - 1);
}

/* ---- timing: whether leases of every allowed TTL can be kept ---- */

/* A renewal has less than this to come back: one that fails or is late
 * cannot be retried in time (lease_renew_retry() waits 5 ms at least), and
 * on a busy host such leases are lost within a second. Refused. */
#define MARGIN_REFUSED_MS 5.0
/* Less than this: a scheduling delay of a few milliseconds on the agent's
 * or Redis' host puts the lease in JEOPARDY, twice that loses it. Warned. */
#define MARGIN_FRAGILE_MS 10.0
/* Above this TTL every renewal has at least MARGIN_FRAGILE_MS: it is sent at
 * ttl x fraction (>= 0.05, so >= 50 ms, whose rounding quantum is 10 ms) only
 * when that leaves more than a quantum, else at half the validity. */
#define MARGIN_TTL_SCAN 1000u

double config_lease_validity_ms(uint32_t ttl_ms)
{
    return ttl_ms - (ttl_ms / 100.0 + 2);
}

double config_renew_after_ms(uint32_t ttl_ms, double fraction)
{
    double validity = config_lease_validity_ms(ttl_ms), period = ttl_ms * fraction;
    double quantum = period / 4 < 10 ? period / 4 : 10;
    return period + quantum >= validity ? validity / 2 : period;
}

double config_renew_margin_ms(uint32_t ttl_ms, double fraction)
{
    return config_lease_validity_ms(ttl_ms) - config_renew_after_ms(ttl_ms, fraction);
}

/* The allowed TTL whose renewals have the least time to come back. */
static uint32_t tightest_ttl(const struct config *c)
{
    uint32_t hi = c->max_ttl_ms < MARGIN_TTL_SCAN ? c->max_ttl_ms : MARGIN_TTL_SCAN;
    uint32_t at = c->min_ttl_ms;
    for (uint32_t t = c->min_ttl_ms + 1; t <= hi; t++)
        if (config_renew_margin_ms(t, c->renew_fraction) <
            config_renew_margin_ms(at, c->renew_fraction))
            at = t;
    return at;
}

/* The least min_ttl_ms from which every TTL's renewals have `need` ms. */
static uint32_t min_ttl_for(double fraction, double need, uint32_t from)
{
    uint32_t ok = from;
    for (uint32_t t = from; t <= MARGIN_TTL_SCAN; t++)
        if (config_renew_margin_ms(t, fraction) < need)
            ok = t + 1;
    return ok;
}

/* "[agent] min_ttl_ms = M with renew_fraction = F: leases of T ms ...",
 * and what would give their renewals `need` ms. */
static void margin_note(const struct config *c, uint32_t ttl, double need, const char *verdict,
                        char *out, size_t cap)
{
    double f = c->renew_fraction, m = config_renew_margin_ms(ttl, f);
    snprintf(out, cap,
             "[agent] min_ttl_ms = %u with renew_fraction = %g: leases of %u ms %s: a renewal has "
             "%.1f ms to come back (JEOPARDY after %.1f); set min_ttl_ms to %u or more%s",
             (unsigned)c->min_ttl_ms, f, (unsigned)ttl, verdict, m, m / 2,
             (unsigned)min_ttl_for(f, need, ttl),
             config_renew_margin_ms(ttl, 0.05) >= need ? ", or lower renew_fraction" : "");
}

/* Settings that leave a renewal no time to come back. */
static void check_timing(const struct config *c, struct config_report *rep)
{
    uint32_t ttl = tightest_ttl(c);
    if (config_renew_margin_ms(ttl, c->renew_fraction) >= MARGIN_REFUSED_MS)
        return;
    char msg[600];
    margin_note(c, ttl, MARGIN_FRAGILE_MS, "cannot be kept", msg, sizeof msg);
    config_report_error(rep, "agent", "min_ttl_ms", "%s", msg);
}

int config_warnings(const struct config *c, void (*warn)(void *arg, const char *msg), void *arg)
{
    char msg[600];
    int n = 0;
    uint32_t ttl = tightest_ttl(c);
    double margin = config_renew_margin_ms(ttl, c->renew_fraction);
    if (margin < MARGIN_FRAGILE_MS) {
        margin_note(c, ttl, MARGIN_FRAGILE_MS, "are fragile", msg, sizeof msg);
        warn(arg, msg);
        n++;
    }
    if (c->wait_replicas && c->wait_timeout_ms >= margin) {
        snprintf(msg, sizeof msg,
                 "[redis] wait_timeout_ms = %u with wait_replicas = %u: a renewal waits that long "
                 "for a slow replica, but leases of %u ms have %.1f ms for it: they are lost "
                 "whenever a replica lags that long",
                 (unsigned)c->wait_timeout_ms, (unsigned)c->wait_replicas, (unsigned)ttl, margin);
        warn(arg, msg);
        n++;
    }
    double validity = config_lease_validity_ms(c->min_ttl_ms);
    if (c->mode == REDIS_MODE_QUORUM && c->node_timeout_ms >= validity) {
        snprintf(msg, sizeof msg,
                 "[redis] node_timeout_ms = %u: an acquire of a lease of %u ms (min_ttl_ms) that "
                 "waits for a silent node is decided after the lease's validity (%.1f ms): it "
                 "fails",
                 (unsigned)c->node_timeout_ms, (unsigned)c->min_ttl_ms, validity);
        warn(arg, msg);
        n++;
    }
    if (c->tls && !c->tls_verify) {
        warn(arg, "[redis] tls_verify = no: the Redis server's certificate is not checked, so "
                  "anyone on the network path can pose as Redis, and read the password and every "
                  "lock");
        n++;
    }
    if (!c->tls &&
        (c->tls_ca_file[0] || c->tls_ca_dir[0] || c->tls_cert_file[0] || c->tls_server_name[0])) {
        warn(arg, "[redis] tls_* settings are set but TLS is off (tls = yes, or rediss:// "
                  "addresses, turn it on): they are not used");
        n++;
    }
    return n;
}

static void log_warning(void *arg, const char *msg)
{
    (void)arg;
    log_warn("%s", msg);
}

int config_parse_mode(const char *text, enum redis_mode_setting *out)
{
    static const char *const names[] = {"auto", "single", "quorum", "cluster", "sentinel"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = (enum redis_mode_setting)i;
            return 0;
        }
    }
    return -1;
}

/* The one place the Redis mode is chosen, from the [redis] settings: with
 * mode = auto, one node is single-node mode, an odd number from 3 to 9
 * quorum mode; cluster and sentinel are asked for by name. NULL, or why the
 * settings make no mode (c->mode is then single). */
static const char *choose_mode(struct config *c)
{
    c->mode = REDIS_MODE_SINGLE;
    switch (c->mode_setting) {
    case REDIS_ASK_CLUSTER:
        c->mode = REDIS_MODE_CLUSTER;
        return c->redis_db ? "cluster mode has database 0 only" : NULL;
    case REDIS_ASK_SENTINEL:
        c->mode = REDIS_MODE_SENTINEL;
        return c->sentinel_master[0] ? NULL : "sentinel mode needs [redis] sentinel_master";
    case REDIS_ASK_SINGLE:
        return c->nnodes == 1 ? NULL : "single mode takes one Redis address";
    case REDIS_ASK_AUTO:
        if (c->nnodes == 1)
            return NULL;
        break;
    case REDIS_ASK_QUORUM:
        break;
    }
    if (c->nnodes < 3 || c->nnodes > CONFIG_MAX_NODES || c->nnodes % 2 == 0)
        return "quorum mode needs an odd number of Redis nodes, 3 to 9 (or one node)";
    c->mode = REDIS_MODE_QUORUM;
    return NULL;
}

/* TLS is on with tls = yes or any rediss:// address, for every link: the
 * nodes a cluster's slot map or the sentinels name use the same transport as
 * the addresses given. NULL, or why the settings make no sense. */
static const char *check_tls(struct config *c)
{
    unsigned tls = 0, unix_socket = 0;
    for (unsigned i = 0; i < c->nnodes; i++) {
        tls += c->nodes[i].tls;
        unix_socket += c->nodes[i].path[0] != '\0';
    }
    c->tls = c->tls_setting || tls;
    if (tls && tls < c->nnodes && !c->tls_setting)
        return "some addresses are rediss:// and some are not: TLS is for every Redis link or none "
               "(write rediss:// for all, or tls = yes)";
    if (c->tls && unix_socket)
        return "TLS needs TCP addresses: a unix: socket cannot be used with TLS";
    if (!c->tls_cert_file[0] != !c->tls_key_file[0])
        return "tls_cert_file and tls_key_file go together (the client certificate and its key)";
    return NULL;
}

void config_state_dir_follow(struct config *c)
{
    if (!c->state_dir_set)
        snprintf(c->state_dir, sizeof c->state_dir, "%s.state", c->socket);
}

int config_validate_report(struct config *c, struct config_report *r)
{
    unsigned before = r->nerrors;
    /* First: the checks below depend on the mode. */
    const char *mode_why = choose_mode(c);
    check_ranges(c, r);
    check_relations(c, r);
    if (r->nerrors == before)
        check_timing(c, r); /* its arithmetic needs the values in their ranges */
    /* The first of the rules below that is broken, and the setting it is
     * about (for the report's source). */
    const char *why = NULL, *section = "agent", *key = NULL;
    if (!prefix_ok(c->prefix)) {
        why = "prefix must not contain spaces or control characters, nor braces outside a "
              "{hash tag}";
        key = "prefix";
    } else if (c->socket[0] == '\0') {
        why = "socket path is empty";
        key = "socket";
    } else if (mode_why) {
        why = mode_why;
        section = "redis";
        key = origin_of(r, "redis", "mode") ? "mode" : "address";
    } else if (nodes_repeat(c)) {
        why = "the same Redis node is listed twice";
        section = "redis";
        key = "address";
    } else if ((why = check_tls(c)) != NULL) {
        section = "redis";
        key = origin_of(r, "redis", "tls") ? "tls" : "address";
    } else if (strcmp(c->socket, c->status_socket) == 0) {
        why = "socket and status_socket must differ";
        key = "status_socket";
    } else if (c->mode == REDIS_MODE_CLUSTER && c->formats.nredisson &&
               key_has_hash_tag(c->prefix, strlen(c->prefix))) {
        /* A Redisson-format key is the bare name, in the name's own slot;
         * the keys dlock keeps beside it start with the prefix, whose tag
         * would put them in another. */
        why = "[formats] cannot be used in cluster mode with a prefix that has a {hash tag}";
        key = "prefix";
    }
    if (why)
        config_report_error(r, section, key, "%s", why);
    if (r->nerrors != before)
        return -1;
    config_warnings(c, log_warning, NULL);
    return 0;
}

int config_validate(struct config *c, char *err, size_t errlen)
{
    struct config_report *r = malloc(sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_report_init(r);
    int rc = config_validate_report(c, r);
    if (rc != 0)
        config_report_first(r, err, errlen);
    free(r);
    return rc;
}

const char *config_mode_name(enum redis_mode mode)
{
    switch (mode) {
    case REDIS_MODE_QUORUM:
        return "quorum";
    case REDIS_MODE_CLUSTER:
        return "cluster";
    case REDIS_MODE_SENTINEL:
        return "sentinel";
    case REDIS_MODE_SINGLE:
        break;
    }
    return "single";
}

/* ---- reload: what a running agent may take from a fresh file ---- */

/* How a setting is compared, copied and shown. */
enum show {
    SHOW_U32,
    SHOW_OUTAGE,   /* u32, or "none" */
    SHOW_FRACTION, /* renew_fraction */
    SHOW_OCTAL,    /* a socket's mode */
    SHOW_TEXT,
    SHOW_SECRET, /* a password: compared, never shown */
    SHOW_LEVEL,
    SHOW_INT,
    SHOW_YES_NO,
    SHOW_NODES,
    SHOW_MODE,
    SHOW_ALLOW,   /* [policy] allow: the rules */
    SHOW_SEE_ALL, /* [policy] see_all */
    SHOW_FORCE,   /* [policy] force: the rules */
    SHOW_FORMAT,  /* the patterns of one [formats] key */
};

/* One setting: where it is, and whether a reload changes it. */
struct reload_rule {
    const char *section, *key;
    enum show show;
    size_t offset, size;    /* the field (SHOW_ALLOW, SHOW_SEE_ALL: the policy) */
    enum key_format format; /* SHOW_FORMAT: which format's patterns */
    /* NULL: changes at a reload; else why it needs a restart. */
    const char *restart;
    /* For a setting that changes at a reload: why this change needs a
     * restart after all, or NULL. */
    const char *(*restart_if)(const struct config *old, const struct config *fresh);
};

#define SOCKET_PATH_WHY "clients connect to the socket by path; a new path needs a restart"
#define STATE_DIR_WHY                                                                              \
    "the state directory holds the running leases for a successor; a new one needs a restart"
#define STATUS_PATH_WHY "operators connect to the status socket by path; a new path needs a restart"
#define SOCKET_MADE_WHY "the socket file gets its mode and group when it is made, at start"
#define ADDRESS_WHY     "the Redis links are made for these addresses at start"
#define MODE_WHY        "the Redis links are made for this mode at start"
#define MASTER_WHY      "the sentinels are asked for this master from the start"
#define PREFIX_WHY      "every held key would change name"
#define FORMATS_WHY     "held names would change keys"
#define DATABASE_WHY    "links on the old and the new database would hold one lock twice"
#define TLS_WHY         "the Redis links are made with or without TLS at start"
#define QUORUM_MAX_TTL_WHY                                                                         \
    "in quorum mode a restarted node is left out of quorums for max_ttl_ms, which must outlast "   \
    "the TTL of the leases granted before: lowering it needs a restart"

/* Quorum mode: the restart exclusion is max_ttl_ms, and leases keep their TTL
 * through a reload. */
static const char *max_ttl_restart(const struct config *old, const struct config *fresh)
{
    return old->mode == REDIS_MODE_QUORUM && fresh->max_ttl_ms < old->max_ttl_ms
               ? QUORUM_MAX_TTL_WHY
               : NULL;
}

#define FIELD(k) offsetof(struct config, k), sizeof(((struct config *)0)->k)
#define RELOADS(s, k)                                                                              \
    {                                                                                              \
        s, #k, SHOW_U32, FIELD(k), 0, NULL, NULL                                                   \
    }
#define POLICY(k)                                                                                  \
    {                                                                                              \
        "policy", #k, SHOW_U32, FIELD(policy.k), 0, NULL, NULL                                     \
    }
#define FORMAT(k, f)                                                                               \
    {                                                                                              \
        "formats", k, SHOW_FORMAT, FIELD(formats), f, FORMATS_WHY, NULL                            \
    }
/* Every setting, section by section. The agent reads those that
 * change at a reload where it uses them (a connection's limits when it
 * says HELLO, a timer's period when it is armed again, a Redis link's
 * credentials when it connects), and the reload refreshes what keeps a
 * copy (main.c). */
static const struct reload_rule reload_rules[] = {
    {"agent", "socket", SHOW_TEXT, FIELD(socket), 0, SOCKET_PATH_WHY, NULL},
    {"agent", "socket_mode", SHOW_OCTAL, FIELD(socket_mode), 0, SOCKET_MADE_WHY, NULL},
    {"agent", "socket_group", SHOW_TEXT, FIELD(socket_group), 0, SOCKET_MADE_WHY, NULL},
    {"agent", "status_socket", SHOW_TEXT, FIELD(status_socket), 0, STATUS_PATH_WHY, NULL},
    {"agent", "state_dir", SHOW_TEXT, FIELD(state_dir), 0, STATE_DIR_WHY, NULL},
    {"agent", "status_socket_mode", SHOW_OCTAL, FIELD(status_socket_mode), 0, SOCKET_MADE_WHY,
     NULL},
    {"agent", "status_socket_group", SHOW_TEXT, FIELD(status_socket_group), 0, SOCKET_MADE_WHY,
     NULL},
    {"agent", "metrics_listen", SHOW_TEXT, FIELD(metrics_listen), 0, NULL, NULL},
    {"agent", "metrics_names", SHOW_TEXT, FIELD(metrics_names), 0, NULL, NULL},
    RELOADS("agent", metrics_names_max),
    {"agent", "prefix", SHOW_TEXT, FIELD(prefix), 0, PREFIX_WHY, NULL},
    RELOADS("agent", default_ttl_ms),
    RELOADS("agent", min_ttl_ms),
    {"agent", "max_ttl_ms", SHOW_U32, FIELD(max_ttl_ms), 0, NULL, max_ttl_restart},
    {"agent", "renew_fraction", SHOW_FRACTION, FIELD(renew_fraction), 0, NULL, NULL},
    RELOADS("agent", retry_fallback_ms),
    RELOADS("agent", retry_max_ms),
    RELOADS("agent", cohort_handoffs),
    RELOADS("agent", cohort_ms),
    RELOADS("agent", max_name_len),
    RELOADS("agent", max_leases_per_conn),
    RELOADS("agent", max_waiters_per_conn),
    RELOADS("agent", max_connections),
    RELOADS("agent", handshake_timeout_ms),
    RELOADS("agent", shutdown_timeout_ms),
    {"agent", "outage_wait_ms", SHOW_OUTAGE, FIELD(outage_wait_ms), 0, NULL, NULL},
    RELOADS("agent", default_max_hold_ms),
    RELOADS("agent", max_hold_limit_ms),
    RELOADS("agent", default_progress_ms),
    RELOADS("agent", progress_limit_ms),
    {"agent", "log_level", SHOW_LEVEL, FIELD(log_level), 0, NULL, NULL},
    {"agent", "log_format", SHOW_TEXT, FIELD(log_format), 0, NULL, NULL},
    {"redis", "address", SHOW_NODES, FIELD(nodes), 0, ADDRESS_WHY, NULL},
    {"redis", "mode", SHOW_MODE, FIELD(mode_setting), 0, MODE_WHY, NULL},
    {"redis", "database", SHOW_INT, FIELD(redis_db), 0, DATABASE_WHY, NULL},
    {"redis", "sentinel_master", SHOW_TEXT, FIELD(sentinel_master), 0, MASTER_WHY, NULL},
    {"redis", "tls", SHOW_YES_NO, FIELD(tls_setting), 0, TLS_WHY, NULL},
    {"redis", "tls_verify", SHOW_YES_NO, FIELD(tls_verify), 0, NULL, NULL},
    {"redis", "tls_ca_file", SHOW_TEXT, FIELD(tls_ca_file), 0, NULL, NULL},
    {"redis", "tls_ca_dir", SHOW_TEXT, FIELD(tls_ca_dir), 0, NULL, NULL},
    {"redis", "tls_cert_file", SHOW_TEXT, FIELD(tls_cert_file), 0, NULL, NULL},
    {"redis", "tls_key_file", SHOW_TEXT, FIELD(tls_key_file), 0, NULL, NULL},
    {"redis", "tls_server_name", SHOW_TEXT, FIELD(tls_server_name), 0, NULL, NULL},
    {"redis", "tls_min_version", SHOW_TEXT, FIELD(tls_min_version), 0, NULL, NULL},
    {"redis", "user", SHOW_TEXT, FIELD(redis_user), 0, NULL, NULL},
    {"redis", "password", SHOW_SECRET, FIELD(redis_password), 0, NULL, NULL},
    {"redis", "sentinel_user", SHOW_TEXT, FIELD(sentinel_user), 0, NULL, NULL},
    {"redis", "sentinel_password", SHOW_SECRET, FIELD(sentinel_password), 0, NULL, NULL},
    RELOADS("redis", connect_timeout_ms),
    RELOADS("redis", command_timeout_ms),
    RELOADS("redis", reconnect_min_ms),
    RELOADS("redis", reconnect_max_ms),
    RELOADS("redis", node_timeout_ms),
    RELOADS("redis", wait_replicas),
    RELOADS("redis", wait_timeout_ms),
    RELOADS("redis", topology_refresh_ms),
    {"policy", "allow", SHOW_ALLOW, FIELD(policy), 0, NULL, NULL},
    {"policy", "see_all", SHOW_SEE_ALL, FIELD(policy), 0, NULL, NULL},
    {"policy", "force", SHOW_FORCE, FIELD(policy), 0, NULL, NULL},
    POLICY(max_leases_per_uid),
    POLICY(max_waiters_per_uid),
    POLICY(max_connections_per_uid),
    POLICY(max_output_per_uid),
    POLICY(renew_budget_per_uid),
    FORMAT("redisson", KEY_FORMAT_REDISSON),
    FORMAT("redisson_rwlock", KEY_FORMAT_REDISSON_RW),
    FORMAT("redisson_semaphore", KEY_FORMAT_REDISSON_SEM),
};
#define NRULES (sizeof reload_rules / sizeof reload_rules[0])
_Static_assert(NRULES <= CONFIG_CHANGES_MAX, "CONFIG_CHANGES_MAX is below the settings");

static const void *field_of(const struct config *c, const struct reload_rule *r)
{
    return (const char *)c + r->offset;
}

static bool same_who(const struct policy_who *a, const struct policy_who *b)
{
    return a->kind == b->kind && (a->kind == POLICY_ANY || a->id == b->id);
}

static bool same_nodes(const struct config *a, const struct config *b)
{
    if (a->nnodes != b->nnodes)
        return false;
    for (unsigned i = 0; i < a->nnodes; i++)
        if (strcmp(a->nodes[i].host, b->nodes[i].host) || a->nodes[i].port != b->nodes[i].port ||
            strcmp(a->nodes[i].path, b->nodes[i].path) || a->nodes[i].tls != b->nodes[i].tls)
            return false;
    return true;
}

static bool same_rules(const struct policy_rule *a, unsigned na, const struct policy_rule *b,
                       unsigned nb)
{
    if (na != nb)
        return false;
    for (unsigned i = 0; i < na; i++)
        if (!same_who(&a[i].who, &b[i].who) || strcmp(a[i].pattern, b[i].pattern))
            return false;
    return true;
}

static bool same_allow(const struct policy *a, const struct policy *b)
{
    return same_rules(a->rules, a->nrules, b->rules, b->nrules);
}

static bool same_see_all(const struct policy *a, const struct policy *b)
{
    if (a->see_all_set != b->see_all_set || a->nsee_all != b->nsee_all)
        return false;
    for (unsigned i = 0; i < a->nsee_all; i++)
        if (!same_who(&a->see_all[i], &b->see_all[i]))
            return false;
    return true;
}

/* The next pattern of format f in fm from *i on, or NULL. */
static const char *next_pattern(const struct formats *fm, enum key_format f, unsigned *i)
{
    for (; *i < fm->nredisson; (*i)++)
        if (fm->format[*i] == f)
            return fm->redisson[(*i)++];
    return NULL;
}

static bool same_format(const struct formats *a, const struct formats *b, enum key_format f)
{
    unsigned i = 0, j = 0;
    for (;;) {
        const char *pa = next_pattern(a, f, &i), *pb = next_pattern(b, f, &j);
        if (!pa || !pb)
            return pa == pb;
        if (strcmp(pa, pb) != 0)
            return false;
    }
}

static bool same_setting(const struct reload_rule *r, const struct config *a,
                         const struct config *b)
{
    const void *x = field_of(a, r), *y = field_of(b, r);
    switch (r->show) {
    case SHOW_FRACTION:
        return *(const double *)x == *(const double *)y;
    case SHOW_TEXT:
    case SHOW_SECRET:
        return strcmp(x, y) == 0;
    case SHOW_NODES:
        return same_nodes(a, b);
    case SHOW_ALLOW:
        return same_allow(&a->policy, &b->policy);
    case SHOW_SEE_ALL:
        return same_see_all(&a->policy, &b->policy);
    case SHOW_FORCE:
        return same_rules(a->policy.force, a->policy.nforce, b->policy.force, b->policy.nforce);
    case SHOW_FORMAT:
        return same_format(&a->formats, &b->formats, r->format);
    default:
        return memcmp(x, y, r->size) == 0;
    }
}

/* Copies one setting of fresh into live. */
static void copy_setting(const struct reload_rule *r, struct config *live,
                         const struct config *fresh)
{
    struct policy *p = &live->policy;
    const struct policy *q = &fresh->policy;
    switch (r->show) {
    case SHOW_ALLOW:
        memcpy(p->rules, q->rules, sizeof p->rules);
        p->nrules = q->nrules;
        break;
    case SHOW_SEE_ALL:
        memcpy(p->see_all, q->see_all, sizeof p->see_all);
        p->nsee_all = q->nsee_all;
        p->see_all_set = q->see_all_set;
        break;
    case SHOW_FORCE:
        memcpy(p->force, q->force, sizeof p->force);
        p->nforce = q->nforce;
        break;
    default:
        memcpy((char *)live + r->offset, field_of(fresh, r), r->size);
        break;
    }
}

/* Text for a value, cut with "..." when it does not fit. */
struct shown {
    char *p;
    size_t cap, len;
    bool full;
};

static void show_add(struct shown *s, const char *text)
{
    if (s->full)
        return;
    size_t room = s->cap - s->len, n = strlen(text);
    if (n < room) {
        memcpy(s->p + s->len, text, n + 1);
        s->len += n;
        return;
    }
    /* Cut between characters, with room for the dots. */
    text_printable(s->p + s->len, room > 4 ? room - 3 : 1, text);
    s->len += strlen(s->p + s->len);
    snprintf(s->p + s->len, s->cap - s->len, "...");
    s->full = true;
}

static void show_printable(struct shown *s, const char *text)
{
    char buf[POLICY_PATTERN_MAX + 128];
    text_printable(buf, sizeof buf, text);
    show_add(s, buf);
}

static void show_who(struct shown *s, const struct policy_who *w)
{
    char buf[24];
    if (w->kind == POLICY_ANY)
        snprintf(buf, sizeof buf, "*");
    else
        snprintf(buf, sizeof buf, "%s%u", w->kind == POLICY_GID ? "@" : "", (unsigned)w->id);
    show_add(s, buf);
}

/* A list of policy rules, "WHO PATTERN, WHO PATTERN", or none when empty. */
static void show_rules(struct shown *s, const struct policy_rule *rules, unsigned n,
                       const char *none)
{
    show_add(s, n ? "" : none);
    for (unsigned i = 0; i < n; i++) {
        show_add(s, i ? ", " : "");
        show_who(s, &rules[i].who);
        show_add(s, " ");
        show_printable(s, rules[i].pattern);
    }
}

static void show_list(struct shown *s, const struct reload_rule *r, const struct config *c)
{
    const struct policy *p = &c->policy;
    char addr[400];
    if (r->show == SHOW_NODES) {
        for (unsigned i = 0; i < c->nnodes; i++) {
            show_add(s, i ? ", " : "");
            show_printable(s, config_addr_str(&c->nodes[i], addr, sizeof addr));
        }
    } else if (r->show == SHOW_ALLOW) {
        show_rules(s, p->rules, p->nrules, "(none: every name to everyone)");
    } else if (r->show == SHOW_FORCE) {
        show_rules(s, p->force, p->nforce, "(none: nobody)");
    } else if (r->show == SHOW_SEE_ALL) {
        show_add(s, p->see_all_set ? "" : "(unset: everyone)");
        for (unsigned i = 0; i < p->nsee_all; i++) {
            show_add(s, i ? ", " : "");
            show_who(s, &p->see_all[i]);
        }
    } else {
        unsigned i = 0;
        const char *pat;
        for (bool first = true; (pat = next_pattern(&c->formats, r->format, &i)); first = false) {
            show_add(s, first ? "" : " ");
            show_printable(s, pat);
        }
        if (s->len == 0)
            show_add(s, "\"\"");
    }
}

static void show_setting(const struct reload_rule *r, const struct config *c, char *out, size_t cap)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    static const char *const modes[] = {"auto", "single", "quorum", "cluster", "sentinel"};
    const void *v = field_of(c, r);
    struct shown s = {.p = out, .cap = cap};
    out[0] = '\0';
    switch (r->show) {
    case SHOW_U32:
        snprintf(out, cap, "%u", (unsigned)*(const uint32_t *)v);
        break;
    case SHOW_OUTAGE:
        if (*(const uint32_t *)v == CONFIG_OUTAGE_NONE)
            snprintf(out, cap, "none");
        else
            snprintf(out, cap, "%u", (unsigned)*(const uint32_t *)v);
        break;
    case SHOW_FRACTION:
        snprintf(out, cap, "%g", *(const double *)v);
        break;
    case SHOW_OCTAL:
        snprintf(out, cap, "%04o", *(const unsigned *)v);
        break;
    case SHOW_TEXT:
        if (*(const char *)v)
            show_printable(&s, v);
        else
            show_add(&s, "\"\"");
        break;
    case SHOW_SECRET:
        break;
    case SHOW_LEVEL: {
        int l = *(const int *)v;
        snprintf(out, cap, "%s", l >= 0 && l <= 3 ? levels[l] : "?");
        break;
    }
    case SHOW_INT:
        snprintf(out, cap, "%d", *(const int *)v);
        break;
    case SHOW_YES_NO:
        snprintf(out, cap, "%s", *(const bool *)v ? "yes" : "no");
        break;
    case SHOW_MODE: {
        unsigned m = (unsigned)*(const enum redis_mode_setting *)v;
        snprintf(out, cap, "%s", m < 5 ? modes[m] : "?");
        break;
    }
    case SHOW_NODES:
    case SHOW_ALLOW:
    case SHOW_SEE_ALL:
    case SHOW_FORCE:
    case SHOW_FORMAT:
        show_list(&s, r, c);
        break;
    }
}

/* Why the change of r from old to fresh needs a restart, or NULL. */
static const char *restart_reason(const struct reload_rule *r, const struct config *old,
                                  const struct config *fresh)
{
    if (r->restart)
        return r->restart;
    return r->restart_if ? r->restart_if(old, fresh) : NULL;
}

size_t config_diff(const struct config *old, const struct config *fresh, struct config_change *out)
{
    size_t n = 0;
    for (size_t i = 0; i < NRULES; i++) {
        const struct reload_rule *r = &reload_rules[i];
        if (same_setting(r, old, fresh))
            continue;
        struct config_change *c = &out[n++];
        *c = (struct config_change){.section = r->section,
                                    .key = r->key,
                                    .secret = r->show == SHOW_SECRET,
                                    .restart = restart_reason(r, old, fresh)};
        show_setting(r, old, c->before, sizeof c->before);
        show_setting(r, fresh, c->after, sizeof c->after);
    }
    return n;
}

void config_reload(struct config *live, const struct config *fresh)
{
    for (size_t i = 0; i < NRULES; i++) {
        const struct reload_rule *r = &reload_rules[i];
        if (!same_setting(r, live, fresh) && !restart_reason(r, live, fresh))
            copy_setting(r, live, fresh);
    }
}

void config_change_str(const struct config_change *c, char *buf, size_t len)
{
    if (c->secret)
        snprintf(buf, len, "[%s] %s (changed)", c->section, c->key);
    else
        snprintf(buf, len, "[%s] %s %s -> %s", c->section, c->key, c->before, c->after);
}
