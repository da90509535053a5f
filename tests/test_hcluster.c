/* SPDX-License-Identifier: BSD-3-Clause */
/* test_hcluster.c -- the Redis Cluster helpers of the integration tests
 * (hcluster.h), without dlockd: the cluster forms with a complete slot map,
 * commands are routed by key, a slot moves with its keys (at once, and in
 * steps that show ASK and TRYAGAIN meanwhile), and a killed master's replica
 * is promoted and the master comes back as its replica; and all of that
 * with the nodes serving TLS too, bus and replication over TLS (hc_tls()). */
#define H_TEST_TIMEOUT_S 120
#include <stdio.h>
#include <string.h>

#include "hcluster.h"

/* SET key value through whichever master holds it, starting at node start. */
static void set_from(int start, const char *key, const char *value)
{
    redisReply *r = hc_key_cmd_from(start, key, "SET %s %s", key, value);
    cr_assert_eq(r->type, REDIS_REPLY_STATUS, "SET %s: %s", key,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
}

/* Whether node i's raw answer for key is an error starting with word. */
static int answers_error(int i, const char *word, const char *fmt, const char *key)
{
    redisReply *r = hc_cmd(i, fmt, key);
    int yes = r->type == REDIS_REPLY_ERROR && strncmp(r->str, word, strlen(word)) == 0;
    freeReplyObject(r);
    return yes;
}

HCTEST(hcluster, forms_with_a_complete_slot_map_and_routes_by_key)
{
    hc_start();
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3, "not 3 masters");
    int replicas[3];
    for (int k = 0; k < 3; k++) {
        cr_assert(hc_is_master(m[k]), "node %d serves slots but is no master", m[k]);
        replicas[k] = hc_replica_of(m[k]);
        cr_assert_geq(replicas[k], 0, "master %d has no replica", m[k]);
        cr_assert(!hc_is_master(replicas[k]));
        for (int j = 0; j < k; j++)
            cr_assert_neq(replicas[k], replicas[j]);
    }
    /* Every node's own map covers every slot, with the same masters. */
    for (int i = 0; i < HC_NODES; i++) {
        redisReply *r = hc_cmd(i, "CLUSTER SLOTS");
        cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
        long long covered = 0;
        for (size_t e = 0; e < r->elements; e++)
            covered += r->element[e]->element[1]->integer - r->element[e]->element[0]->integer + 1;
        freeReplyObject(r);
        cr_assert_eq(covered, KEY_SLOTS, "node %d's CLUSTER SLOTS covers %lld slots", i, covered);
    }
    /* Keys land on their slot's master, found by following MOVED from a
     * master that does not hold them; their replica has them too. */
    int on[3] = {0, 0, 0};
    for (int k = 0; k < 60; k++) {
        char key[32], val[32];
        snprintf(key, sizeof key, "k%d", k);
        snprintf(val, sizeof val, "v%d", k);
        int owner = hc_key_node(key);
        int wrong = m[0] == owner ? m[1] : m[0];
        cr_assert(answers_error(wrong, "MOVED ", "GET %s", key), "node %d does not redirect %s",
                  wrong, key);
        set_from(wrong, key, val);
        cr_assert_str_eq(hc_get(owner, key), val);
        for (int j = 0; j < 3; j++) {
            if (m[j] == owner) {
                on[j]++;
                redisReply *w = hc_cmd(owner, "WAIT 1 5000");
                cr_assert_eq(w->integer, 1, "the replica did not acknowledge");
                freeReplyObject(w);
                cr_assert_str_eq(hc_get(replicas[j], key), val);
            } else {
                cr_assert_eq(hc_count_slot(m[j], hc_slot(key)), 0);
            }
        }
    }
    for (int j = 0; j < 3; j++)
        cr_assert_gt(on[j], 0, "no key of 60 on master %d", m[j]);
    /* The lock's keys share the lock key's slot. */
    char name[64];
    hc_name_on(m[2], "job", name, sizeof name);
    cr_assert_eq(hc_key_node(hc_lock_key(name)), m[2]);
    cr_assert_eq(hc_slot(hc_mark_key(name)), hc_name_slot(name));
    cr_assert_str_eq(hc_mark_key("job"), "dlock:{21206} fence-hw"); /* docs/fencing.md */
}

HCTEST(hcluster, moves_a_slot_with_its_keys)
{
    hc_start();
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    /* 250 keys of one slot (a hash tag), half with a TTL. */
    unsigned slot = hc_slot("{mv}");
    int from = hc_slot_node(slot);
    int to = from == m[0] ? m[1] : m[0];
    for (int k = 0; k < 250; k++) {
        char key[32];
        snprintf(key, sizeof key, "{mv}:%d", k);
        redisReply *r = k % 2 ? hc_key_cmd(key, "SET %s x%d PX 600000", key, k)
                              : hc_key_cmd(key, "SET %s x%d", key, k);
        freeReplyObject(r);
    }
    cr_assert_eq(hc_count_slot(from, slot), 250);
    hc_move_slot(slot, to);
    cr_assert_eq(hc_slot_node(slot), to);
    cr_assert_eq(hc_count_slot(from, slot), 0);
    cr_assert_eq(hc_count_slot(to, slot), 250);
    for (int k = 0; k < 250; k++) {
        char key[32], val[32];
        snprintf(key, sizeof key, "{mv}:%d", k);
        snprintf(val, sizeof val, "x%d", k);
        cr_assert_str_eq(hc_get(to, key), val);
        long long pttl = hc_pttl(to, key);
        if (k % 2)
            cr_assert(pttl > 0 && pttl <= 600000, "%s: PTTL %lld after the move", key, pttl);
        else
            cr_assert_eq(pttl, -1);
    }
    cr_assert(answers_error(from, "MOVED ", "GET %s", "{mv}:1"));

    /* In steps: half the keys of another slot move, then the rest. */
    unsigned slot2 = hc_slot("{st}");
    int from2 = hc_slot_node(slot2);
    int to2 = from2 == m[1] ? m[2] : m[1];
    for (int k = 0; k < 40; k++) {
        char key[32];
        snprintf(key, sizeof key, "{st}:%d", k);
        freeReplyObject(hc_key_cmd(key, "SET %s y%d", key, k));
    }
    struct hc_migration mig;
    hc_migrate_begin(&mig, slot2, to2);
    cr_assert_eq(hc_migrate_some(&mig, 20), 20);
    cr_assert_eq(hc_count_slot(from2, slot2), 20);
    cr_assert_eq(hc_count_slot(to2, slot2), 20);
    char moved[32] = "", stayed[32] = "";
    for (int k = 0; k < 40; k++) {
        char key[32];
        snprintf(key, sizeof key, "{st}:%d", k);
        redisReply *r = hc_cmd(from2, "EXISTS %s", key);
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
            snprintf(stayed, sizeof stayed, "%s", key);
        else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0)
            snprintf(moved, sizeof moved, "%s", key);
        else
            cr_assert_fail("EXISTS %s on the old master: unexpected answer", key);
        freeReplyObject(r);
    }
    cr_assert(moved[0] && stayed[0]);
    /* The new master redirects back without ASKING; a routed GET follows ASK. */
    cr_assert(answers_error(to2, "MOVED ", "GET %s", moved));
    redisReply *r = hc_key_cmd(moved, "GET %s", moved);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    r = hc_key_cmd(stayed, "GET %s", stayed);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    /* A command on keys of both halves cannot run anywhere for now. */
    r = hc_cmd(from2, "MGET %s %s", moved, stayed);
    cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "TRYAGAIN", 8) == 0,
              "MGET across the halves: %s", r->type == REDIS_REPLY_ERROR ? r->str : "answered");
    freeReplyObject(r);
    hc_migrate_finish(&mig);
    cr_assert_eq(mig.moved, 40);
    cr_assert_eq(hc_count_slot(from2, slot2), 0);
    cr_assert_eq(hc_count_slot(to2, slot2), 40);
    r = hc_cmd(to2, "MGET %s %s", moved, stayed);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    hc_wait_ok(HC_SETTLE_MS);
}

/* Node i is a replica whose link to its master is up (its initial
 * synchronisation done). */
static bool link_up(int i)
{
    redisReply *r = hc_cmd(i, "INFO replication");
    bool up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
    if (r)
        freeReplyObject(r);
    return up;
}

HCTEST(hcluster, kill_a_master_and_see_the_promotion)
{
    hc_start();
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    int victim = m[1];
    int replica = hc_replica_of(victim);
    cr_assert_geq(replica, 0);
    char keys[20][64];
    int n = 0;
    for (int k = 0; n < 20; k++) {
        char key[32];
        snprintf(key, sizeof key, "f%d", k);
        if (hc_key_node(key) != victim)
            continue;
        snprintf(keys[n++], sizeof keys[0], "%s", key);
        freeReplyObject(hc_cmd(victim, "SET %s %s", key, key));
    }
    redisReply *w = hc_cmd(victim, "WAIT 1 5000");
    cr_assert_eq(w->integer, 1);
    freeReplyObject(w);

    int promoted = hc_kill_master(victim);
    cr_assert_eq(promoted, replica, "node %d was promoted, not the replica %d", promoted, replica);
    cr_assert(!hc_running(victim));
    cr_assert(hc_is_master(promoted));
    int now[HC_NODES];
    cr_assert_eq(hc_masters(now), 3);
    for (int k = 0; k < 3; k++)
        cr_assert_neq(now[k], victim);
    for (int k = 0; k < n; k++) {
        cr_assert_eq(hc_key_node(keys[k]), promoted);
        cr_assert_str_eq(hc_get(promoted, keys[k]), keys[k]);
    }
    /* Back, without data, as the replica of the node that replaced it. */
    hc_node_restart(victim);
    cr_assert(!hc_is_master(victim));
    /* The other nodes learn its new role by gossip, a little later. */
    H_WAIT_UNTIL(H_EVENT_MS, hc_replica_of(promoted) == victim);
    /* Its full resynchronisation first: on a busy machine it may take
     * longer than a WAIT's few seconds. */
    H_WAIT_UNTIL(H_EVENT_MS, link_up(victim));
    freeReplyObject(hc_cmd(promoted, "SET %s again", keys[0]));
    w = hc_cmd(promoted, "WAIT 1 5000");
    cr_assert_eq(w->integer, 1, "the restarted node does not replicate");
    freeReplyObject(w);
    cr_assert_str_eq(hc_get(victim, keys[0]), "again");
    cr_assert_str_eq(hc_get(victim, keys[1]), keys[1]);
}

/* hc_tls(): the harness keeps to the plaintext ports, the bus stays at
 * port + 10000, MIGRATE goes over TLS to the TLS port, and replication
 * over TLS brings a restarted master's data back to it as a replica. */
HCTEST(hcluster, over_tls_moves_a_slot_and_fails_over)
{
    hc_tls(true);
    hc_start();
    for (int i = 0; i < HC_NODES; i++) {
        redisReply *r = hc_cmd(i, "CLUSTER NODES");
        cr_assert_eq(r->type, REDIS_REPLY_STRING);
        char me[64];
        snprintf(me, sizeof me, " %s@%d ", hc_addr(i), HC.node[i].port + 10000);
        cr_assert(strstr(r->str, me), "node %d's CLUSTER NODES has no '%s': %s", i, me, r->str);
        freeReplyObject(r);
        cr_assert_neq(HC.node[i].tls_port, 0);
        cr_assert_str_eq(hc_tls_addr(i), h_keepf("rediss://127.0.0.1:%d", HC.node[i].tls_port));
    }
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    unsigned slot = hc_slot("{tls}");
    int from = hc_slot_node(slot);
    int to = from == m[0] ? m[1] : m[0];
    for (int k = 0; k < 20; k++)
        set_from(m[2], h_keepf("{tls}:%d", k), "v");
    hc_move_slot(slot, to);
    cr_assert_eq(hc_count_slot(from, slot), 0);
    cr_assert_eq(hc_count_slot(to, slot), 20);

    int replica = hc_replica_of(to);
    cr_assert_geq(replica, 0);
    redisReply *w = hc_cmd(to, "WAIT 1 5000");
    cr_assert_eq(w->integer, 1);
    freeReplyObject(w);
    cr_assert_eq(hc_kill_master(to), replica);
    cr_assert_str_eq(hc_get(replica, "{tls}:7"), "v");
    hc_node_restart(to);
    H_WAIT_UNTIL(H_EVENT_MS, hc_replica_of(replica) == to);
    H_WAIT_UNTIL(H_EVENT_MS, link_up(to));
    H_WAIT_UNTIL(H_EVENT_MS, hc_get(to, "{tls}:7") != NULL);
    cr_assert_str_eq(hc_get(to, "{tls}:7"), "v");
}
