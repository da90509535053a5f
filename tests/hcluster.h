/* SPDX-License-Identifier: BSD-3-Clause */
/* hcluster.h -- a real Redis Cluster for the integration tests: 3 masters and
 * 3 replicas on loopback TCP ports, started per test in the test's directory,
 * with helpers to route commands by key, move hash slots while keys are in
 * them, kill masters and wait for their replicas' promotion, and to run
 * dlockd agents in cluster mode on it.
 *
 *   HCTEST(suite, name)
 *   {
 *       hc_start();                          // 6 redis-servers, cluster formed and ok
 *       hc_agent_config(0, NULL, NULL, 0);   // [redis] mode = cluster, every node a seed
 *       hc_agent_start(0);
 *       ...
 *       int r = hc_kill_master(hc_key_node(hc_lock_key("job")));  // r: the promoted replica
 *   }
 *
 * HCTEST() is ITEST() (harness.h) whose cleanup also stops the cluster; call
 * hc_skip() rather than h_skip() in it. The nodes are numbered 0..HC_NODES-1
 * for the whole test: a node keeps its port (and its cluster identity, in
 * DIR/nodes-PORT.conf) across a kill and a restart, while its role may change
 * (a killed master comes back as the replica of the one that replaced it).
 * Nodes keep no data across a restart (no RDB, no AOF).
 *
 * Agents are harness agents (H.agent[i]: h_agent_stop(), h_agent_pause(),
 * h_client_at() ... work on them) but are configured and started here: the
 * harness's own start names one Redis on the command line. The helpers that
 * name a lock's keys assume the default prefix, "dlock:".
 *
 * These functions are for the test's main thread only. */
#ifndef DLOCK_TEST_HCLUSTER_H
#define DLOCK_TEST_HCLUSTER_H

#include <stdbool.h>

#include "harness.h"
#include "keys.h"

#define HC_NODES 6 /* 3 masters, each with one replica */

/* Deadlines (milliseconds). */
#define HC_START_MS    30000 /* the cluster to form, with every node ok */
#define HC_FAILOVER_MS 30000 /* a replica to be promoted, a restarted node to rejoin */
#define HC_SETTLE_MS   15000 /* every node to agree on a slot's new owner */
#define HC_AGENT_MS    20000 /* a fresh agent to find the cluster and take its probes */

struct hc_node {
    struct redisproc proc; /* pid 0 when not running */
    int port;              /* the cluster bus is port + 10000 */
    int tls_port;          /* with hc_tls(): its TLS port too; else 0 */
    char id[41];           /* its cluster node id */
    char log[H_PATH];
    redisContext *conn; /* the test's own connection (READONLY), NULL until needed */
};

struct hc_cluster {
    struct hc_node node[HC_NODES];
    bool tls, tls_auth; /* hc_tls() */
};

extern struct hc_cluster HC;

/* Criterion fixtures; HCTEST() installs them. */
void hc_setup(void);
void hc_teardown(void);
/* Stops the cluster, then h_skip(). */
void hc_skip(const char *why);

#define HCTEST(suite, name)                                                                        \
    static void suite##_##name##_body(void);                                                       \
    Test(suite, name, .init = hc_setup, .fini = hc_teardown, .timeout = H_TEST_TIMEOUT_S)          \
    {                                                                                              \
        suite##_##name##_body();                                                                   \
        h_finish();                                                                                \
    }                                                                                              \
    static void suite##_##name##_body(void)

/* ---- the cluster ---- */

/* Starts the 6 nodes (redis-server --cluster-enabled yes, node timeout
 * 1000 ms, bound to 127.0.0.1, on free ports whose bus ports are free too,
 * each with its own RDB file name for the full syncs of a replica), forms
 * the cluster with redis-cli --cluster create ... --cluster-replicas 1, has
 * every master write once (CLUSTER SLOTS lists a replica only once its
 * replication offset is above 0), and waits until the cluster is ok as
 * hc_wait_ok() says. */
void hc_start(void);
/* Waits (pumping the harness's clients) until, among the nodes that run,
 * every node says cluster_state:ok, every node's CLUSTER SLOTS covers all
 * 16384 slots with the same running masters and lists every replica, and
 * every replica's link to its master is up. */
void hc_wait_ok(int timeout_ms);

/* Before hc_start(): the nodes serve TLS as well, each on a TLS port of its
 * own beside its plaintext one, with the test's PKI (tlspki.h: server.crt,
 * whose SAN has IP:127.0.0.1, trusting ca.crt), the cluster bus and the
 * replication over TLS (tls-cluster, tls-replication yes), and with auth,
 * client certificates required (tls-auth-clients yes; the nodes present
 * server.crt to each other). The harness keeps to the plaintext ports; the
 * agents' seeds become hc_tls_addr(). Redis 7.0 names each node by its TLS
 * port to a client that came over TLS (CLUSTER SLOTS, CLUSTER NODES, MOVED,
 * ASK) and by its plaintext port to the others. */
void hc_tls(bool auth);

int hc_running(int i);
const char *hc_addr(int i);     /* "127.0.0.1:PORT" */
const char *hc_tls_addr(int i); /* "rediss://127.0.0.1:TLSPORT" (hc_tls()) */
/* Node i's own view: whether it is a master (INFO replication role). */
int hc_is_master(int i);
/* The running masters that serve slots, by the slot map, in the order of
 * their first slot; returns how many (3 in a healthy cluster). */
int hc_masters(int out[HC_NODES]);
/* A running replica of master m (by m's CLUSTER NODES), or -1. */
int hc_replica_of(int m);

/* ---- slots and keys ---- */

unsigned hc_slot(const char *key); /* key_slot() of the whole string */
/* The node serving slot s, by the slot map of the first running node that
 * gives one (call it once the nodes agree: hc_wait_ok()). */
int hc_slot_node(unsigned slot);
int hc_key_node(const char *key);

/* A lock's keys under the default prefix (docs/protocol.md), in rotating
 * static buffers: the lock key "dlock:NAME" and its slot's fencing mark
 * "dlock:{TAG} fence-hw". */
const char *hc_lock_key(const char *name);
const char *hc_mark_key(const char *name);
/* The slot of a name's lock key. */
unsigned hc_name_slot(const char *name);
/* Writes into out a name "base-N" whose lock key is served by master m. */
void hc_name_on(int m, const char *base, char *out, size_t cap);
/* Writes into out a name "base-N" whose lock key lies in slot s. */
void hc_name_in_slot(unsigned slot, const char *base, char *out, size_t cap);

/* ---- commands ---- */

/* Runs a command on node i over the test's own connection (which has sent
 * READONLY, so a replica answers reads of its master's keys); fails the test
 * when the node does not run or gives no reply. Error replies (MOVED, ASK,
 * TRYAGAIN) are returned as they are. The caller frees the reply. */
redisReply *hc_cmd(int i, const char *fmt, ...);
redisReply *hc_cmd_argv(int i, int argc, const char **argv);
/* Runs a command on whichever master holds key, starting at the node the
 * slot map names (hc_key_cmd) or at node `start` (hc_key_cmd_from), and
 * following MOVED and ASK (with ASKING) and retrying TRYAGAIN and
 * CLUSTERDOWN itself, for up to HC_SETTLE_MS. */
redisReply *hc_key_cmd(const char *key, const char *fmt, ...);
redisReply *hc_key_cmd_from(int start, const char *key, const char *fmt, ...);

/* What node i holds under key: the value or NULL (a string kept until
 * cleanup); EXISTS; PTTL (-2 no key, -1 no TTL); and DEL. They send ASKING
 * first, so that the new master of a slot being moved answers for the keys
 * it has already; the old master's ASK (it has not the key, or no longer)
 * counts as no key; a replica answers for its master's keys; MOVED (the
 * node has nothing to do with the key's slot) fails the test. */
char *hc_get(int i, const char *key);
int hc_exists(int i, const char *key);
long long hc_pttl(int i, const char *key);
void hc_del(int i, const char *key);
/* CLUSTER COUNTKEYSINSLOT on node i: the keys it holds in slot s, whoever
 * serves the slot. */
long long hc_count_slot(int i, unsigned slot);

/* Waits until key is gone from node i and fails unless it went before it
 * could have expired (like H_KEY_GONE()). */
#define HC_KEY_GONE(node, key) hc_key_gone(__FILE__, __LINE__, node, key)
void hc_key_gone(const char *file, int line, int node, const char *key);

/* ---- moving a slot (the procedure of the Redis Cluster specification) ----
 *
 * hc_move_slot() does it all. The steps are there for tests that act while
 * the slot is MIGRATING on its master and IMPORTING on the new one: the old
 * master answers for the keys it still has and sends ASK for the others;
 * commands naming several keys of which it has only some get TRYAGAIN. */
struct hc_migration {
    unsigned slot;
    int from, to; /* node indexes of the old and the new master */
    long moved;   /* keys moved so far */
};
/* SETSLOT IMPORTING on `to`, then MIGRATING on the slot's master. */
void hc_migrate_begin(struct hc_migration *m, unsigned slot, int to);
/* Moves those of keys[0..n-1] that the old master still has, in one MIGRATE
 * (so that they move together); returns how many moved. */
long hc_migrate_keys(struct hc_migration *m, const char *const *keys, size_t n);
/* Moves up to max keys of the slot (CLUSTER GETKEYSINSLOT, MIGRATE in
 * batches of up to 100); returns how many moved. */
long hc_migrate_some(struct hc_migration *m, long max);
/* Moves the rest, assigns the slot to `to` (SETSLOT NODE on `to`, the old
 * master, then the other masters) and waits until every running node's slot
 * map says so. */
void hc_migrate_finish(struct hc_migration *m);
/* All of the above: slot s moves to master `to` with its keys. */
void hc_move_slot(unsigned slot, int to);

/* ---- failures ---- */

/* SIGKILL; the node keeps its port and identity for hc_node_restart(). */
void hc_kill(int i);
/* Kills master i and waits until one of its replicas has been promoted and
 * serves all of i's slots and the cluster is ok again (hc_wait_ok()); returns
 * the promoted node. */
int hc_kill_master(int i);
/* Starts killed node i again on its port with its cluster identity (no
 * data), and waits until the cluster is ok with it (a replaced master comes
 * back as a replica, with its link up). */
void hc_node_restart(int i);

/* ---- dlockd in cluster mode ---- */

/* Which nodes an agent is given as seeds: a bit per node; 0 is all. */
#define HC_SEED(i) (1u << (i))

/* Writes agent i's config (the agent runs without -v: log_level is the
 * config's): [agent] with log_level = debug and its status
 * socket unless agent_ini sets them, then agent_ini (may be NULL); [redis]
 * with mode = cluster, an address line naming the seed nodes (their
 * hc_tls_addr() with hc_tls(): redis_ini then gives the TLS settings,
 * tls_redis_ini() of tlspki.h), short connect
 * and reconnect times unless redis_ini sets them, then redis_ini (may be
 * NULL). */
void hc_agent_config(int i, const char *agent_ini, const char *redis_ini, unsigned seeds);
/* Starts agent i (configured with every node as a seed unless
 * hc_agent_config() was called) and waits until a client can open and the
 * agent has taken and given back a probe lock on every master. */
void hc_agent_start(int i);

#endif /* DLOCK_TEST_HCLUSTER_H */
