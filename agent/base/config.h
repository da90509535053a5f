/* SPDX-License-Identifier: BSD-3-Clause */
/* config.h -- dlockd settings: defaults, INI file parsing and validation.
 * Pure: no I/O besides reading the named file. */
#ifndef DLOCKD_CONFIG_H
#define DLOCKD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "formats.h"

#define CONFIG_DEFAULT_SOCKET "/run/dlock/dlock.sock"
#define CONFIG_DEFAULT_STATUS "/run/dlock/status.sock"
#define CONFIG_PREFIX_MAX     128
#define CONFIG_MAX_NODES      9 /* Redis nodes in quorum mode */
/* outage_wait_ms = none: no agent-wide ceiling, each waiter's own wait
 * governs how long it rides out an outage. */
#define CONFIG_OUTAGE_NONE UINT32_MAX

#define POLICY_MAX_RULES   64
#define POLICY_MAX_WHO     16
#define POLICY_PATTERN_MAX 256

/* Who a policy line speaks of: anyone, a uid, or a gid. */
struct policy_who {
    uint8_t kind; /* POLICY_ANY, POLICY_UID, POLICY_GID */
    uint32_t id;
};
enum { POLICY_ANY = 1, POLICY_UID = 2, POLICY_GID = 3 };

/* "allow = WHO PATTERN...": who may use the lock names matching an
 * fnmatch(3) pattern (one rule per pattern). */
struct policy_rule {
    struct policy_who who;
    char pattern[POLICY_PATTERN_MAX];
};

/* [policy]: without any allow line everyone may use every name (under the
 * prefix, which no name can leave); with some, only what they allow. */
struct policy {
    struct policy_rule rules[POLICY_MAX_RULES];
    unsigned nrules;
    /* "see_all = WHO...": who sees every lease on the status socket; the
     * others see their own only. Without the line, everyone sees all. */
    struct policy_who see_all[POLICY_MAX_WHO];
    unsigned nsee_all;
    bool see_all_set;
    /* "force = WHO PATTERN...": who may force the release of the names
     * matching a pattern, whoever holds them (dlockctl release --force, on
     * the status socket); without any force line, nobody. */
    struct policy_rule force[POLICY_MAX_RULES];
    unsigned nforce;
    uint32_t max_leases_per_uid; /* leases and waiters together; 0 = no limit */
    uint32_t max_waiters_per_uid;
    uint32_t max_connections_per_uid; /* 0 = no limit */
    uint32_t max_output_per_uid;      /* bytes of replies queued for one uid */
    /* What one uid's leases and waiters may ask of the renewal pipeline: the
     * sum of 1 s / TTL over them, so a lease of TTL 100 ms counts 10 and one
     * of 30 s a thirtieth; 0 = no limit. */
    uint32_t renew_budget_per_uid;
};

/* How the agent uses Redis: chosen once, by config_validate(), from [redis]. */
enum redis_mode {
    REDIS_MODE_SINGLE,   /* one node */
    REDIS_MODE_QUORUM,   /* a majority of 3, 5, 7 or 9 independent nodes (docs/quorum.md) */
    REDIS_MODE_CLUSTER,  /* Redis Cluster, found through seed nodes (docs/cluster.md) */
    REDIS_MODE_SENTINEL, /* the master that Sentinel names (docs/failover.md) */
};
/* What [redis] mode asks for: auto (by the number of addresses: one is
 * single, 3 to 9 quorum) or a mode by name. */
enum redis_mode_setting {
    REDIS_ASK_AUTO,
    REDIS_ASK_SINGLE,
    REDIS_ASK_QUORUM,
    REDIS_ASK_CLUSTER,
    REDIS_ASK_SENTINEL,
};
/* The mode's name: "single", "quorum", "cluster", "sentinel". */
const char *config_mode_name(enum redis_mode mode);

/* A Redis address: TCP host and port, or a unix socket path. */
struct redis_addr {
    char host[256]; /* empty for unix sockets */
    int port;
    char path[108]; /* unix socket path, empty for TCP */
    bool tls;       /* written rediss://host:port */
};

struct config {
    /* [agent] */
    char socket[108];
    unsigned socket_mode;
    char socket_group[64];   /* group owning the client socket; empty: ours */
    char status_socket[108]; /* read-only queries; empty: none */
    bool status_socket_set;  /* given (file or -S); else it follows socket */
    unsigned status_socket_mode;
    char status_socket_group[64]; /* group owning the status socket; empty: ours */
    /* Where leases outlive the agent's process (docs/restarts.md); empty:
     * nowhere, a restart ends them. */
    char state_dir[128];
    bool state_dir_set;       /* given; else it follows socket: SOCKET.state */
    char metrics_listen[300]; /* host:port for GET /metrics; empty: off */
    /* Per-name metrics for the names matching this fnmatch(3) pattern, at
     * most metrics_names_max of them; empty: none. */
    char metrics_names[256];
    uint32_t metrics_names_max;
    char prefix[CONFIG_PREFIX_MAX];
    uint32_t default_ttl_ms;
    uint32_t min_ttl_ms;
    uint32_t max_ttl_ms;
    double renew_fraction;
    uint32_t retry_fallback_ms;
    uint32_t retry_max_ms; /* fallback retry once notices arrive (0: always the fast one) */
    /* Cohort handoff: a lock released here while another local process
     * waits for it passes to that process without Redis, up to this many
     * times per grant from Redis (0: never) and for at most cohort_ms. */
    uint32_t cohort_handoffs;
    uint32_t cohort_ms;
    uint32_t max_name_len;
    uint32_t max_leases_per_conn;
    uint32_t max_waiters_per_conn;
    uint32_t max_connections;
    uint32_t handshake_timeout_ms; /* a new connection must say HELLO by then */
    uint32_t shutdown_timeout_ms;
    uint32_t outage_wait_ms;      /* a ceiling on riding out an outage, or CONFIG_OUTAGE_NONE */
    uint32_t default_max_hold_ms; /* bounded holds: 0 = none */
    uint32_t max_hold_limit_ms;
    uint32_t default_progress_ms;
    uint32_t progress_limit_ms;
    int log_level;
    char log_format[8]; /* plain, logfmt or json (log.h) */
    /* [redis] */
    /* One: single-node mode; 3, 5, 7, 9: quorum; cluster: seed nodes;
     * sentinel: the sentinels. */
    struct redis_addr nodes[CONFIG_MAX_NODES];
    unsigned nnodes;
    char redis_user[128];
    char redis_password[256];
    int redis_db;
    uint32_t connect_timeout_ms;
    uint32_t command_timeout_ms;
    uint32_t reconnect_min_ms;
    uint32_t reconnect_max_ms;
    uint32_t node_timeout_ms; /* quorum: how long an acquire waits for a node */
    /* Acquires and renewals are followed by WAIT wait_replicas
     * wait_timeout_ms: granted or extended only once that many replicas
     * have the write (0: no WAIT). */
    uint32_t wait_replicas;
    uint32_t wait_timeout_ms;
    /* Cluster: the slot map is read again this often (and on redirects);
     * sentinel: the sentinels are asked for the master this often (and on
     * +switch-master). */
    uint32_t topology_refresh_ms;
    char sentinel_master[128]; /* sentinel mode: the master's name at the sentinels */
    char sentinel_user[128];   /* AUTH at the sentinels (empty: none) */
    char sentinel_password[256];
    /* TLS on every Redis link (docs/redis.md, TLS): tls = yes, or rediss://
     * addresses. The files are read when the agent starts and at each reload
     * (agent/backend/tls.c); empty: the default (the system's CA store, no
     * client certificate, the address's host as the name). */
    bool tls_setting;                     /* [redis] tls */
    bool tls;                             /* set by config_validate(): TLS is on */
    bool tls_verify;                      /* verify the server's certificate (default yes) */
    char tls_ca_file[256];                /* PEM CA certificates */
    char tls_ca_dir[256];                 /* a c_rehash'd directory of them */
    char tls_cert_file[256];              /* mutual TLS: our certificate (chain), PEM */
    char tls_key_file[256];               /* and its private key, PEM */
    char tls_server_name[256];            /* SNI and the name verified; empty: the address's host */
    char tls_min_version[8];              /* "1.2" or "1.3" */
    enum redis_mode_setting mode_setting; /* [redis] mode */
    enum redis_mode mode;                 /* set by config_validate(), from the settings above */
    /* [policy] */
    struct policy policy;
    /* [formats]: the names stored in another client's key format */
    struct formats formats;
};

/* "*", a user name or uid, "@group" or "@gid". 0, or -1 when unknown. */
int config_parse_who(const char *s, struct policy_who *out);
/* Whether the groups the sockets are given to exist (looked up through the
 * name service). 0, or -1 with the reason in err. */
int config_check_groups(const struct config *c, char *err, size_t errlen);

/* Whether the peer (uid and its groups) may use lock name under p. */
bool policy_allows(const struct policy *p, uint32_t uid, const uint32_t *gids, size_t ngids,
                   const char *name);
/* Whether the peer sees every lease on the status socket. */
bool policy_sees_all(const struct policy *p, uint32_t uid, const uint32_t *gids, size_t ngids);
/* Whether a force line lets uid (in groups gids) force the release of name. */
bool policy_may_force(const struct policy *p, uint32_t uid, const uint32_t *gids, size_t ngids,
                      const char *name);

/* Fills c with the built-in defaults. */
void config_defaults(struct config *c);

/* ---- every error of one check, each with its source ---- */

#define CONFIG_ORIGINS_MAX 160
#define CONFIG_REPORT_TEXT 8192

/* What one check of the settings found (dlockd -n, a start, a reload), and
 * where each setting was last set: "PATH:LINE" in the file, or a
 * command-line flag as typed. Each error is a line prefixed with the source
 * of the setting it is about ("dlockd.conf:12: [agent] max_ttl_ms = 50: must
 * be ...", "--default-ttl: [agent] default_ttl_ms = 5: must be ..."); an
 * error about a setting left at its default has no prefix. */
struct config_report {
    unsigned nerrors;
    size_t len;
    char text[CONFIG_REPORT_TEXT]; /* the errors, one line each; cut when full */
    unsigned norigins;
    struct config_origin {
        char section[16], key[32], from[280];
    } origin[CONFIG_ORIGINS_MAX];
};

void config_report_init(struct config_report *r);
/* Notes that [section] key was set at from (the last word counts). */
void config_report_origin(struct config_report *r, const char *section, const char *key,
                          const char *from);
/* Adds an error about [section] key (NULL, NULL: about no one setting),
 * prefixed with the setting's source when known. */
void config_report_error(struct config_report *r, const char *section, const char *key,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The first error line (without its newline) into buf. */
void config_report_first(const struct config_report *r, char *buf, size_t len);
/* Reads an INI file over c, every refused line reported as "PATH:LINE:
 * ..." (the file goes on being read after one). 0, or -1 when some line
 * was refused or the file could not be read. */
int config_load_file_report(struct config *c, const char *path, struct config_report *r);
/* Sets [section] key from a value given at from (a flag as typed, an
 * environment variable): its error is reported as "FROM: ...". 0 or -1. */
int config_set_report(struct config *c, const char *section, const char *key, const char *value,
                      const char *from, struct config_report *r);
/* config_validate(), every error reported. 0, or -1 when any. */
int config_validate_report(struct config *c, struct config_report *r);

/* Reads an INI file over c. On error returns -1 and writes a message that
 * names the file, line and key into err. */
int config_load_file(struct config *c, const char *path, char *err, size_t errlen);

/* Sets one key of a section from its text value, as a file line would. */
int config_set(struct config *c, const char *section, const char *key, const char *value, char *err,
               size_t errlen);

/* Parses [redis] mode: auto, single, quorum, cluster, sentinel. 0 or -1. */
int config_parse_mode(const char *text, enum redis_mode_setting *out);

/* Parses "host:port", "[v6addr]:port", "unix:/path", and either TCP form
 * after "redis://" or "rediss://" (TLS). */
int config_parse_addr(const char *text, struct redis_addr *out);

/* Parses a list of addresses separated by commas and/or blanks into
 * c->nodes, replacing the list or appended to it. -1 (c unchanged) when
 * empty, malformed or more than CONFIG_MAX_NODES in all. */
int config_parse_nodes(struct config *c, const char *text, bool append);

/* Chooses c->mode from [redis], then checks each numeric setting's range and
 * the rules between settings (min <= max). 0, or -1 with a message naming
 * the setting, its value and the range. */
int config_validate(struct config *c, char *err, size_t errlen);
/* Unless state_dir was given, it follows the client socket: SOCKET.state. */
void config_state_dir_follow(struct config *c);
/* Settings that pass config_validate() but make leases fragile (their
 * renewals have little time to come back; see check_timing() in config.c):
 * each is passed to warn as one message. config_validate() logs them
 * (dlockd -n shows them). Returns how many. */
int config_warnings(const struct config *c, void (*warn)(void *arg, const char *msg), void *arg);
/* The renewal arithmetic of the core (lease_deadline(), lease_next_renew()
 * in agent/core/table.c), in ms, for the checks: how long a lease of ttl_ms
 * is valid after a send (ttl - ttl/100 - 2), when its next renewal is sent
 * after the previous send (before the rounding down, which only makes it
 * earlier), and the time that renewal has to come back before the validity
 * ends. */
double config_lease_validity_ms(uint32_t ttl_ms);
double config_renew_after_ms(uint32_t ttl_ms, double fraction);
double config_renew_margin_ms(uint32_t ttl_ms, double fraction);

/* ---- reload (SIGHUP, dlockctl reload) ----
 *
 * A setting either changes at a reload, without dropping a lease or a
 * connection, or needs a restart, for a reason that the one table of
 * config.c (reload_rules) gives with it. */

#define CONFIG_SHOWN_MAX   160 /* a value as a change shows it, cut with "..." */
#define CONFIG_CHANGES_MAX 80  /* at least the settings of the table */

/* One setting that differs between the configuration in force and a fresh
 * one. */
struct config_change {
    const char *section, *key;
    char before[CONFIG_SHOWN_MAX], after[CONFIG_SHOWN_MAX]; /* "" for a secret */
    bool secret;         /* a password: shown as "(changed)", never its value */
    const char *restart; /* NULL: applied at a reload; else why it needs a restart */
};

/* The settings of fresh that differ from old (the ones in force), in the
 * table's order, into out (room for CONFIG_CHANGES_MAX); returns how many. */
size_t config_diff(const struct config *old, const struct config *fresh, struct config_change *out);
/* Copies into live the settings of fresh that config_diff() marks applied;
 * every other setting of live stays as it is. */
void config_reload(struct config *live, const struct config *fresh);
/* "[redis] command_timeout_ms 2000 -> 500", "[redis] password (changed)". */
void config_change_str(const struct config_change *c, char *buf, size_t len);

/* Formats an address for logs. */
const char *config_addr_str(const struct redis_addr *a, char *buf, size_t len);

#endif
