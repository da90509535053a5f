/* SPDX-License-Identifier: BSD-3-Clause */
/* hsentinel.h -- Redis Sentinel for the integration tests (with harness.h):
 * a master, two replicas and three sentinels, each its own redis-server on a
 * free loopback TCP port, in the test's directory, and dlockd agents in
 * sentinel mode that find the master through them.
 *
 *   STEST(sentinel, name)              // ITEST() that also stops them
 *   {
 *       hs_start();                     // master + 2 replicas + 3 sentinels
 *       hs_agent_start(0, NULL, NULL);  // mode = sentinel, the 3 sentinels
 *       ...
 *       int old = hs_master();
 *       hs_sentinel_ok(0, "SENTINEL FAILOVER %s", HS_MASTER_NAME);
 *       int now = hs_wait_master_not(old);
 *   }
 *
 * The Redis servers are numbered 0 to 2 (0 starts as the master); every one
 * has the ACL user HS_USER (password HS_PASSWORD), allowed everything, which
 * the agents log in with, so that a test can take a command away from it on
 * one server (ACLs are not replicated). The sentinels monitor the master as
 * HS_MASTER_NAME with a quorum of 2, a down-after of 1 s and a failover
 * timeout of 4 s.
 *
 * hs_start_tls() starts the same over TLS, with the test's PKI (tlspki.h):
 * every server and sentinel also listens on a TLS port, the replicas
 * replicate over TLS and the sentinels reach the servers and each other over
 * TLS (tls-replication yes), so the master addresses they name are TLS ones.
 * The harness keeps talking plaintext on the other ports; the agents get the
 * sentinels as rediss:// addresses, and their [redis] lines must trust the
 * test CA (tls_redis_ini()). */
#ifndef DLOCK_TEST_HSENTINEL_H
#define DLOCK_TEST_HSENTINEL_H

#include <stdbool.h>

#include "harness.h"

#define HS_REDIS       3
#define HS_SENTINELS   3
#define HS_MASTER_NAME "mymaster"
#define HS_USER        "dlock"
#define HS_PASSWORD    "hs-secret"
/* How long a failover may take, with its detection (a killed master). */
#define HS_FAILOVER_MS 40000

struct hs_env {
    struct redisproc redis[HS_REDIS];
    int redis_port[HS_REDIS];
    redisContext *conn[HS_REDIS];
    struct redisproc sentinel[HS_SENTINELS];
    int sentinel_port[HS_SENTINELS];
    redisContext *sconn[HS_SENTINELS];
    int nagents; /* agents started with hs_agent_start() */
    /* hs_start_tls(): the TLS ports (the ports above stay plaintext, for the
     * harness); 0 without TLS. */
    bool tls;
    int redis_tls_port[HS_REDIS];
    int sentinel_tls_port[HS_SENTINELS];
};

extern struct hs_env HS;

/* Starts the three Redis servers (1 and 2 replicas of 0) and waits until both
 * replicas are in sync, then the sentinels, and waits until each sentinel
 * knows both replicas and both other sentinels. Agents configured afterwards
 * get the sentinels as their address list. */
void hs_start(void);
/* The same over TLS (above); with auth, servers and sentinels require a
 * client certificate of the test CA (tls-auth-clients yes): tls_redis_ini()
 * with "client". */
void hs_start_tls(bool auth);
/* Configures agent i for sentinel mode (HS_MASTER_NAME, the three sentinels,
 * HS_USER) with agent_ini under [agent] and redis_ini under [redis] (either
 * may be NULL), starts it, and waits until it grants a probe lock and has
 * subscribed to its release channel on the master. */
void hs_agent_start(int i, const char *agent_ini, const char *redis_ini);

/* Agent i in single-node mode on the current master (no sentinels), like
 * hs_agent_start() otherwise. */
void hs_agent_start_single(int i, const char *agent_ini, const char *redis_ini);

/* A command on Redis server i (reconnecting if needed); NULL when it cannot
 * be reached. Free the reply with freeReplyObject(). */
redisReply *hs_cmd(int i, const char *fmt, ...);
/* The same, failing the test unless it answers without an error. */
void hs_ok(int i, const char *fmt, ...);
/* A command on sentinel s; the reply must not be an error. */
void hs_sentinel_ok(int s, const char *fmt, ...);
/* GET on server i: a string of the harness, or NULL when the key is absent. */
char *hs_get(int i, const char *key);
int hs_exists(int i, const char *key);

/* The server that the running sentinels name as the master, all of them
 * alike, and that says ROLE master; -1 while that is not so. */
int hs_master(void);
/* Waits up to HS_FAILOVER_MS for a master other than old (as hs_master());
 * returns it. */
int hs_wait_master_not(int old);
/* SIGKILL of server i or sentinel s. */
void hs_kill(int i);
void hs_sentinel_kill(int s);

/* Fixtures: hs_teardown() stops the servers and sentinels, then runs
 * h_teardown(). */
void hs_teardown(void);

#define STEST(suite, name)                                                                         \
    static void suite##_##name##_body(void);                                                       \
    Test(suite, name, .init = h_setup, .fini = hs_teardown, .timeout = H_TEST_TIMEOUT_S)           \
    {                                                                                              \
        suite##_##name##_body();                                                                   \
        h_finish();                                                                                \
    }                                                                                              \
    static void suite##_##name##_body(void)

#endif
