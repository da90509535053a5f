/* SPDX-License-Identifier: BSD-3-Clause */
/* test_cohort.c -- cohort handoff with real agents on a real Redis: a lock
 * released while another client of the same agent waits passes to it
 * without Redis, with a fresh, higher fencing token and a lease that is
 * renewed like any other; the cohort is bounded, and a host that waits in
 * the name's waiting-hosts record gets the lock before the holder's host
 * takes it again from Redis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The waiting-hosts record of name: how many agents it lists. */
static long long waiting_hosts(const char *name)
{
    char key[256];
    snprintf(key, sizeof key, "dlock:{dlock:%s} waiting", name);
    redisReply *r = h_redis_cmd("HLEN %s", key);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* The server's clock in ms (the record's times are the server's). */
static long long server_ms(void)
{
    redisReply *r = h_redis_cmd("TIME");
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* When the of name's record lapses (server ms), the only
 * entry there; -1 when there is none. */
static long long entry_expires(const char *name)
{
    char key[256];
    snprintf(key, sizeof key, "dlock:{dlock:%s} waiting", name);
    redisReply *r = h_redis_cmd("HGETALL %s", key);
    long long since = -1, exp = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        sscanf(r->element[1]->str, "%lld %lld", &since, &exp) != 2)
        exp = -1;
    freeReplyObject(r);
    return exp;
}

/* Client a of agent 0 holds "job" (TTL 2 s) while client b waits for it;
 * a releases, b is granted. Returns b's grant; *value is the key's value
 * while a held it, *fa a's fencing token. */
static struct h_acq pass_on(char **value, uint64_t *fa)
{
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *la = h_must_acquire(a, "job", 2000);
    *value = h_keep(h_redis_get(h_key("job")));
    *fa = dlock_lease_fence(la);
    struct h_acq w;
    h_acquire_async(b, "job", 2000, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    cr_assert_not(w.done);
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    return w;
}

ITEST(cohort, handoff_keeps_the_key_and_gives_a_higher_token)
{
    h_start("cohort_handoffs = 4\ncohort_ms = 60000");
    char *value;
    uint64_t fa;
    struct h_acq w = pass_on(&value, &fa);
    cr_assert_eq(dlock_lease_fence(w.lease), fa + 1, "handoff token %llu after %llu",
                 (unsigned long long)dlock_lease_fence(w.lease), (unsigned long long)fa);
    cr_assert(dlock_lease_valid(w.lease));
    cr_assert_eq(h_metric(0, "dlock_handoffs_total"), 1);
    /* The key never left Redis: the same value, renewed for the new holder
     * past the first lease's TTL. */
    cr_assert_str_eq(h_redis_get(h_key("job")), value);
    int64_t end = h_now_ms() + 3000;
    H_WAIT_UNTIL(5000, h_now_ms() >= end);
    cr_assert(dlock_lease_valid(w.lease), "the handed-over lease was not renewed");
    cr_assert_eq(dlock_lease_state(w.lease), DLOCK_STATE_HELD);
    cr_assert_str_eq(h_redis_get(h_key("job")), value);
    /* Its release is a release: the key goes. */
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_KEY_GONE(h_key("job"));
    /* The next grant from Redis is above every token of the cohort. */
    dlock_lease *again = h_must_acquire(h_client(), "job", 2000);
    cr_assert_gt(dlock_lease_fence(again), fa + 4, "the reserved tokens were granted again");
    cr_assert_eq(dlock_lease_release(again), 0);
}

/* A handoff may go to the releasing connection itself (docs/protocol.md,
 * "Cohort handoff"): a's two acquires wait behind b; b's release hands the
 * key to a's first, whose release hands it to a's second, each a new lease
 * with the next token of the block, on the same key. */
ITEST(cohort, a_handoff_may_go_to_the_releasing_connection)
{
    h_start("cohort_handoffs = 4\ncohort_ms = 60000");
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *lb = h_must_acquire(b, "self", 30000);
    char *value = h_keep(h_redis_get(h_key("self")));
    uint64_t fb = dlock_lease_fence(lb);
    struct h_acq w1, w2;
    h_acquire_async(a, "self", 30000, DLOCK_WAIT_FOREVER, &w1);
    h_acquire_async(a, "self", 30000, DLOCK_WAIT_FOREVER, &w2);
    cr_assert_eq(dlock_client_ping(a->c), 0);
    cr_assert_not(w1.done || w2.done);
    cr_assert_eq(dlock_lease_release(lb), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w1.done);
    cr_assert_eq(w1.status, 0, "first waiter: %s (%d)", dlock_strerror(w1.status), w1.status);
    cr_assert_eq(dlock_lease_fence(w1.lease), fb + 1);
    cr_assert_not(w2.done, "a's second acquire was granted while its first holds the lock");

    /* a gives the lock up: its own second acquire gets it. */
    cr_assert_eq(dlock_lease_release_sync(w1.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w2.done);
    cr_assert_eq(w2.status, 0, "second waiter: %s (%d)", dlock_strerror(w2.status), w2.status);
    cr_assert_eq(dlock_lease_fence(w2.lease), fb + 2, "not handed over: token %llu after %llu",
                 (unsigned long long)dlock_lease_fence(w2.lease), (unsigned long long)fb);
    cr_assert(dlock_lease_valid(w2.lease));
    cr_assert_str_eq(h_redis_get(h_key("self")), value, "the key left Redis");
    cr_assert_eq(h_metric(0, "dlock_handoffs_total"), 2);
    cr_assert_eq(dlock_lease_release(w2.lease), 0);
    H_KEY_GONE(h_key("self"));
}

ITEST(cohort, off_every_grant_comes_from_redis)
{
    h_start("cohort_handoffs = 0");
    char *value;
    uint64_t fa;
    struct h_acq w = pass_on(&value, &fa);
    cr_assert_gt(dlock_lease_fence(w.lease), fa);
    cr_assert_str_neq(h_redis_get(h_key("job")), value, "the key was handed over");
    cr_assert_eq(h_metric(0, "dlock_handoffs_total"), 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* Host A hands the lock from client to client; host B waits. Once A's
 * cohort is spent, B is served before A takes the lock again from Redis,
 * even though A's next acquire goes out right behind its release. */
ITEST(cohort, a_waiting_host_goes_before_the_holders_host_takes_it_again)
{
    h_start_two("cohort_handoffs = 1\ncohort_ms = 60000");
    struct h_cl *a1 = h_client_at(0), *a2 = h_client_at(0), *b = h_client_at(1);
    dlock_lease *l1 = h_must_acquire(a1, "turn", 5000);
    uint64_t f0 = dlock_lease_fence(l1);

    struct h_acq wb, wa2, wa1;
    h_acquire_async(b, "turn", 5000, DLOCK_WAIT_FOREVER, &wb);
    /* B found the lock taken: it is in the waiting-hosts record. */
    H_WAIT_UNTIL(H_EVENT_MS, waiting_hosts("turn") == 1);
    h_acquire_async(a2, "turn", 5000, DLOCK_WAIT_FOREVER, &wa2);
    cr_assert_eq(dlock_client_ping(a2->c), 0);

    /* The one handoff of the cohort. */
    cr_assert_eq(dlock_lease_release(l1), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wa2.done);
    cr_assert_eq(wa2.status, 0);
    cr_assert_eq(dlock_lease_fence(wa2.lease), f0 + 1);
    cr_assert_not(wb.done, "B was granted while A held the lock");

    /* A asks again behind its own holder, then the cohort ends: the lock
     * goes back to Redis, and B's turn comes first. */
    h_acquire_async(a1, "turn", 5000, DLOCK_WAIT_FOREVER, &wa1);
    cr_assert_eq(dlock_client_ping(a1->c), 0);
    cr_assert_eq(dlock_lease_release(wa2.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wb.done);
    cr_assert_eq(wb.status, 0, "B: %s (%d)", dlock_strerror(wb.status), wb.status);
    cr_assert_not(wa1.done, "A took the lock again before the waiting host");
    uint64_t fb = dlock_lease_fence(wb.lease);
    cr_assert_gt(fb, f0 + 1);
    /* A is in the record now, and gets the lock when B lets go. */
    H_WAIT_UNTIL(H_EVENT_MS, waiting_hosts("turn") == 1);
    cr_assert_eq(dlock_lease_release(wb.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wa1.done);
    cr_assert_eq(wa1.status, 0);
    cr_assert_gt(dlock_lease_fence(wa1.lease), fb);
    cr_assert_eq(dlock_lease_release(wa1.lease), 0);
    H_KEY_GONE(h_key("turn"));
    H_WAIT_UNTIL(H_EVENT_MS, waiting_hosts("turn") == 0);
}

/* A try-once acquire neither joins the record nor jumps it: while another
 * host waits its turn, a free lock is busy to it. A foreign client of the
 * classic convention knows nothing of the record and takes a free lock. */
ITEST(cohort, try_once_and_foreign_clients_with_a_waiting_host)
{
    h_start_two(NULL);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1), *c = h_client_at(0);
    dlock_lease *la = h_must_acquire(a, "q", 5000);
    struct h_acq wb;
    h_acquire_async(b, "q", 5000, DLOCK_WAIT_FOREVER, &wb);
    H_WAIT_UNTIL(H_EVENT_MS, waiting_hosts("q") == 1);
    dlock_lease *lc = NULL;
    cr_assert_eq(h_acquire(c, "q", 5000, 0, &lc), DLOCK_EBUSY);
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wb.done);
    cr_assert_eq(wb.status, 0);
    cr_assert_eq(waiting_hosts("q"), 0, "B's entry stayed after its grant");
    cr_assert_eq(dlock_lease_release(wb.lease), 0);
    H_KEY_GONE(h_key("q"));
    cr_assert_eq(h_redis_set_nx_px(h_key("q"), "foreign", 5000), 1);
}

/* A host whose waiters all give up leaves the record at once: the other
 * hosts need not wait for its entry to lapse (3 s, the cap, with this
 * fallback); it is gone before it could have lapsed. */
ITEST(cohort, a_host_whose_waiters_give_up_leaves_the_record)
{
    h_start_two("retry_fallback_ms = 10000");
    struct h_cl *a = h_client_at(0), *b = h_client_at(1), *c = h_client_at(0);
    dlock_lease *la = h_must_acquire(a, "gone", 5000);
    struct h_acq wb;
    h_acquire_async(b, "gone", 5000, 300, &wb);
    H_WAIT_UNTIL(H_EVENT_MS, waiting_hosts("gone") == 1);
    long long expires = entry_expires("gone");
    H_WAIT_UNTIL(H_EVENT_MS, wb.done);
    cr_assert_eq(wb.status, DLOCK_ETIMEDOUT, "%s (%d)", dlock_strerror(wb.status), wb.status);
    H_WAIT_UNTIL(H_EVENT_MS, waiting_hosts("gone") == 0);
    cr_assert_lt(server_ms(), expires, "the entry lapsed; the host did not leave");
    cr_assert_eq(dlock_lease_release(la), 0);
    H_KEY_GONE(h_key("gone"));
    /* The free lock is not busy to a try-once of host A. */
    dlock_lease *lc = NULL;
    cr_assert_eq(h_acquire(c, "gone", 5000, 0, &lc), 0);
    cr_assert_eq(dlock_lease_release(lc), 0);
}

/* Writes an entry of agent id into name's record, older than any other,
 * that lapses ttl_ms from now (what an agent that died wrote). */
static void plant_entry(const char *name, const char *id, long long ttl_ms)
{
    long long now = server_ms();
    char key[256];
    snprintf(key, sizeof key, "dlock:{dlock:%s} waiting", name);
    char value[64];
    snprintf(value, sizeof value, "%lld %lld", now - 1000, now + ttl_ms);
    redisReply *r = h_redis_cmd("HSET %s %s %s", key, id, value);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "HSET: %s", r->str ? r->str : "?");
    freeReplyObject(r);
    freeReplyObject(h_redis_cmd("PEXPIRE %s %lld", key, ttl_ms));
}

/* How long another host's entry holds a free lock back is the reader's
 * bound, not the writer's setting: an entry that claims more than the cap
 * (3 s) counts as lapsed; one within it holds the others back until it
 * lapses. */
ITEST(cohort, a_dead_hosts_entry_holds_the_others_back_no_longer_than_the_cap)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    /* As an agent with retry_fallback_ms = 60000 wrote it before the cap. */
    plant_entry("far", "00000000deadbeef", 180000);
    struct h_acq w;
    h_acquire_async(a, "far", 5000, DLOCK_WAIT_FOREVER, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "%s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(waiting_hosts("far"), 0, "the entry past the cap was not dropped");
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    /* Within the cap, the dead host keeps its turn: the agent joins the
     * record behind it, and is granted once it lapses. */
    plant_entry("near", "00000000deadbeef", 2500);
    h_acquire_async(a, "near", 5000, DLOCK_WAIT_FOREVER, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done || waiting_hosts("near") == 2);
    cr_assert_not(w.done, "granted past another host's live entry");
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "%s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* On a single node the entries are bound to their agents' keep-alive keys:
 * a dead host's bound entry holds the others back only while its key
 * lives, whatever its own expiry (here 50 s); the agent's own entry names
 * its own key, which the agent keeps set while it waits. */
ITEST(cohort, a_dead_hosts_bound_entry_counts_while_its_keepalive_key_lives)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    const char *dead = "00000000deadbeef", *dead_ka = "dlock:alive 00000000deadbeef";
    const char *key = "dlock:{dlock:bound} waiting";
    h_redis_set_px(dead_ka, "1", 600000); /* until the host "dies" below */
    long long now = server_ms();
    char value[128];
    snprintf(value, sizeof value, "%lld %lld %s", now - 1000, now + 50000, dead_ka);
    freeReplyObject(h_redis_cmd("HSET %s %s %s", key, dead, value));
    freeReplyObject(h_redis_cmd("PEXPIRE %s 50000", key));
    struct h_acq w;
    h_acquire_async(a, "bound", 5000, DLOCK_WAIT_FOREVER, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done || waiting_hosts("bound") == 2);
    cr_assert_not(w.done, "granted past a live host's bound entry");
    /* The agent's entry: SINCE EXPIRES and its own keep-alive key, set. */
    redisReply *r = h_redis_cmd("HGETALL %s", key);
    cr_assert_eq(r->elements, 4);
    int mine = strcmp(r->element[0]->str, dead) == 0 ? 2 : 0;
    long long since = 0, expires = 0;
    int off = 0;
    cr_assert_eq(sscanf(r->element[mine + 1]->str, "%lld %lld %n", &since, &expires, &off), 2);
    char want[64], ka[128];
    snprintf(want, sizeof want, "dlock:alive %s", r->element[mine]->str);
    snprintf(ka, sizeof ka, "%s", r->element[mine + 1]->str + off);
    freeReplyObject(r);
    /* (An exclusive acquire's entry carries its grant after the key:
     * " TTL BLOCK VALUE".) */
    cr_assert(strncmp(ka, want, strlen(want)) == 0 && ka[strlen(want)] == ' ',
              "the entry is not bound to the agent's key: %s", ka);
    cr_assert_gt(expires, server_ms() + 3000, "a bound entry lives past the 3 s of its key");
    cr_assert_eq(h_redis_exists(want), 1, "the agent does not keep its keep-alive key");
    /* The other host dies: its key goes, and its entry stops counting. */
    h_redis_del(dead_ka);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "%s (%d)", dlock_strerror(w.status), w.status);
    r = h_redis_cmd("HEXISTS %s %s", key, dead);
    cr_assert_eq(r->integer, 0, "the dead host's entry was not dropped");
    freeReplyObject(r);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* Two hosts whose entries joined the record at the same time are ordered by
 * their ids, the same for both: the agent does not take the lock while a
 * live entry as old as its own has the lower id. */
ITEST(cohort, hosts_that_joined_at_the_same_time_go_by_id)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    const char *low = "0000000000000000";
    plant_entry("tie", low, 2800);
    struct h_acq w;
    h_acquire_async(a, "tie", 5000, DLOCK_WAIT_FOREVER, &w);
    H_WAIT_UNTIL(H_EVENT_MS, waiting_hosts("tie") == 2);
    /* The agent's own entry: its id, SINCE and EXPIRES. */
    const char *key = "dlock:{dlock:tie} waiting";
    redisReply *r = h_redis_cmd("HGETALL %s", key);
    cr_assert_eq(r->elements, 4);
    int mine = strcmp(r->element[0]->str, low) == 0 ? 2 : 0;
    long long since = 0, expires = 0;
    cr_assert_eq(sscanf(r->element[mine + 1]->str, "%lld %lld", &since, &expires), 2);
    char id[32];
    snprintf(id, sizeof id, "%s", r->element[mine]->str);
    freeReplyObject(r);
    cr_assert_gt(strcmp(id, low), 0);
    /* The planted host joined at the same time, and its id is lower. */
    char value[64];
    snprintf(value, sizeof value, "%lld %lld", since, server_ms() + 2800);
    freeReplyObject(h_redis_cmd("HSET %s %s %s", key, low, value));
    /* The agent tries again (its entry is refreshed) and still waits. */
    H_WAIT_UNTIL(H_EVENT_MS, w.done || ({
                                 redisReply *e = h_redis_cmd("HGET %s %s", key, id);
                                 long long s2 = 0, e2 = 0;
                                 if (e->str)
                                     sscanf(e->str, "%lld %lld", &s2, &e2);
                                 freeReplyObject(e);
                                 e2 > expires;
                             }));
    cr_assert_not(w.done, "granted ahead of a host as old with a lower id");
    /* Once that host's entry lapses, the lock is the agent's. */
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "%s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}
