/* SPDX-License-Identifier: BSD-3-Clause */
/* test_kinds_modes.c -- the kinds of lock in quorum, cluster and sentinel
 * modes, against real redis-servers: 3 independent nodes (harness.h), a Redis
 * Cluster of 3 masters and 3 replicas (hcluster.h), and a master, 2 replicas
 * and 3 sentinels (hsentinel.h), each with three agents standing for three
 * hosts. One test per mode shares its set-up across these checks:
 *
 * - re-entrant: the same lease (handle, token, key) on re-entry, its holds
 *   counted, the name freed only by the last release;
 * - shared: readers of two hosts hold together; a writer of a third waits;
 *   readers that come after it wait behind it, on its host and on another
 *   (the waiting-hosts record); a reader whose client closes lets the writer
 *   in; the writer's token is above every reader's; holder-json shows the
 *   kind and the holders;
 * - semaphore: N = 2 across hosts, the third waits and gets a permit at a
 *   release or a client's close, another N is DLOCK_EKIND from the agent and
 *   from Redis; refused in quorum mode with DLOCK_EINVAL and why;
 * - nothing of a name is left on any node after its last release;
 * - cluster mode: the slot of a name moves to another master while readers
 *   of two hosts hold it; sentinel mode: a failover under readers, who go
 *   through doubt and are confirmed;
 * - quorum mode: holder-json counts a reader whose permit a minority node
 *   misses (a test apart).
 *
 * The readers and writers across hosts come last in each test. Quorum mode
 * keeps the harness's short TTLs (its nodes must have been up for max_ttl_ms
 * before the agents start). */
#define H_TEST_TIMEOUT_S 240
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcluster.h"
#include "hsentinel.h"

/* The agents' cohort (the default, said here because the checks depend on
 * it): a reader of a host where a reader holds joins that reader's grant
 * within COHORT_MS of its acquire, and goes to Redis (and meets the
 * waiting-hosts record) afterwards. A waiting host's entry in the record
 * lasts 3 fallback retries and each retry refreshes it: a fallback of 500 ms
 * keeps the entry through a stall of the agent of 750 ms or more. */
#define COHORT_MS 20
#define AGENT_INI "cohort_ms = 20\nretry_fallback_ms = 500"
#define AGENTS    3
/* A span over which a waiter behind a holder retries (by its fallback, every
 * 500 to 750 ms) and must still wait. */
#define STILL_MS 800

enum mode { QUORUM, CLUSTER, SENTINEL };

static struct {
    enum mode mode;
    uint32_t ttl;
} K;

static const dlock_lock_spec SHARED = {.kind = DLOCK_KIND_SHARED};

static dlock_lock_spec semaphore(uint32_t permits)
{
    return (dlock_lock_spec){.kind = DLOCK_KIND_SEMAPHORE, .permits = permits};
}

/* ---- the set-ups ---- */

static void start_quorum(void)
{
    K.mode = QUORUM;
    K.ttl = 2000; /* h_quorum_start()'s max_ttl_ms */
    h_quorum_start(3, AGENTS, AGENT_INI, NULL);
}

static void start_cluster(void)
{
    K.mode = CLUSTER;
    K.ttl = 30000;
    hc_start();
    for (int i = 0; i < AGENTS; i++)
        hc_agent_config(i, AGENT_INI, NULL, 0);
    for (int i = 0; i < AGENTS; i++)
        hc_agent_start(i);
}

static void start_sentinel(void)
{
    K.mode = SENTINEL;
    K.ttl = 30000;
    hs_start();
    for (int i = 0; i < AGENTS; i++)
        hs_agent_start(i, AGENT_INI, NULL);
}

/* ---- the nodes ---- */

/* A command "VERB ARG [ARG2]" on node i of the mode (a harness node, a
 * cluster node, a sentinel's Redis server); the caller frees the reply. */
static redisReply *node_cmd(int i, const char *verb, const char *arg, const char *arg2)
{
    const char *fmt = arg2 ? "%s %s %s" : "%s %s";
    redisReply *r = NULL;
    switch (K.mode) {
    case QUORUM:
        r = h_node_cmd(i, fmt, verb, arg, arg2);
        break;
    case CLUSTER:
        r = hc_cmd(i, fmt, verb, arg, arg2);
        break;
    case SENTINEL:
        r = hs_cmd(i, fmt, verb, arg, arg2);
        break;
    }
    cr_assert_not_null(r, "node %d did not answer %s %s", i, verb, arg);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "node %d: %s %s: %s", i, verb, arg, r->str);
    return r;
}

/* The nodes that keep the data of the mode: the 3 nodes, the cluster's
 * masters, the sentinels' master. Returns how many. */
static int data_nodes(int out[HC_NODES])
{
    switch (K.mode) {
    case QUORUM:
        for (int i = 0; i < 3; i++)
            out[i] = i;
        return 3;
    case CLUSTER:
        return hc_masters(out);
    case SENTINEL:
        out[0] = hs_master();
        cr_assert_geq(out[0], 0, "no master");
        return 1;
    }
    return 0;
}

/* The nodes that keep key: every node in quorum mode, else the master of its
 * slot, or the master. */
static int key_nodes(const char *key, int out[HC_NODES])
{
    if (K.mode != CLUSTER)
        return data_nodes(out);
    out[0] = hc_key_node(key);
    return 1;
}

/* How many keys that name the lock are on the nodes that keep data (the
 * lock key, its waiting-hosts record, the readers' marks). */
static long long keys_named(const char *name)
{
    char pattern[128];
    snprintf(pattern, sizeof pattern, "*%s*", name);
    int nodes[HC_NODES], n = data_nodes(nodes);
    long long count = 0;
    for (int k = 0; k < n; k++) {
        redisReply *r = node_cmd(nodes[k], "KEYS", pattern, NULL);
        count += (long long)r->elements;
        freeReplyObject(r);
    }
    return count;
}

/* The string reply of VERB KEY [ARG] on node i, kept until the teardown, or
 * NULL for nil. */
static const char *node_str(int i, const char *verb, const char *key, const char *arg)
{
    redisReply *r = node_cmd(i, verb, key, arg);
    const char *s = r->type == REDIS_REPLY_STRING ? h_keep(r->str) : NULL;
    freeReplyObject(r);
    return s;
}

/* Waits until every node that keeps key answers VERB KEY [ARG] with one and
 * the same string (the agent writes every node of quorum mode, but grants
 * on a majority), and returns it. */
static const char *agreed(const char *verb, const char *key, const char *arg)
{
    int nodes[HC_NODES], n = key_nodes(key, nodes);
    int64_t end = h_deadline(H_EVENT_MS);
    for (;;) {
        const char *first = node_str(nodes[0], verb, key, arg);
        bool same = first != NULL;
        for (int k = 1; same && k < n; k++) {
            const char *v = node_str(nodes[k], verb, key, arg);
            same = v && strcmp(v, first) == 0;
        }
        if (same)
            return first;
        cr_assert_leq(h_now_ms(), end, "%s %s: not one value on the %d nodes within %d ms", verb,
                      key, n, h_scaled_ms(H_EVENT_MS));
        h_pump_all(10);
    }
}

/* The lock key's value (an exclusive lease's token and record). */
static const char *lock_value(const char *name)
{
    return agreed("GET", h_key(name), NULL);
}

/* The kind a counted key says it holds: "shared", "sem:N". */
static const char *counted_kind(const char *name)
{
    return agreed("HGET", h_key(name), "~kind");
}

static long long hs_pttl(int i, const char *key)
{
    redisReply *r = hs_cmd(i, "PTTL %s", key);
    cr_assert(r && r->type == REDIS_REPLY_INTEGER, "Redis server %d: PTTL %s", i, key);
    long long p = r->integer;
    freeReplyObject(r);
    return p;
}

/* The lock key went from every node that keeps it, deleted before it could
 * have expired (harness.h, H_KEY_GONE). */
#define KEY_DELETED(name) key_deleted(__FILE__, __LINE__, name)
static void key_deleted(const char *file, int line, const char *name)
{
    const char *key = h_key(name);
    int nodes[HC_NODES], n = key_nodes(key, nodes);
    for (int k = 0; k < n; k++) {
        if (K.mode == QUORUM)
            h_key_gone(file, line, nodes[k], key);
        else if (K.mode == CLUSTER)
            hc_key_gone(file, line, nodes[k], key);
        else
            h_key_gone_at(file, line, "Redis server", nodes[k], key, hs_pttl);
    }
}

/* The waiting-hosts record of name (docs/redis.md). */
static const char *record_key(const char *name)
{
    char buf[256];
    snprintf(buf, sizeof buf, "dlock:{dlock:%s} waiting", name);
    return h_keep(buf);
}

static long long node_int(int i, const char *verb, const char *key)
{
    redisReply *r = node_cmd(i, verb, key, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "node %d: %s %s: no integer", i, verb, key);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Waits until every node that keeps name's record has n hosts in it. */
static void hosts_waiting(const char *name, long long n)
{
    const char *key = record_key(name);
    int nodes[HC_NODES], nn = key_nodes(key, nodes);
    for (int k = 0; k < nn; k++) {
        long long have = -1;
        int64_t end = h_deadline(H_EVENT_MS);
        while ((have = node_int(nodes[k], "HLEN", key)) != n) {
            cr_assert_leq(h_now_ms(), end, "%s on node %d: %lld hosts, not %lld", key, nodes[k],
                          have, n);
            h_pump_all(10);
        }
    }
}

/* ---- clients ---- */

static int acq(struct h_cl *cl, const char *name, int64_t wait_ms, uint32_t flags,
               const dlock_lock_spec *spec, dlock_lease **out)
{
    dlock_acquire_options o = {.ttl_ms = K.ttl, .wait_ms = wait_ms, .flags = flags};
    return dlock_lease_acquire_spec(cl->c, name, &o, spec, out);
}

static void expect_rc(int rc, int want, const char *what, struct h_cl *cl)
{
    cr_assert_eq(rc, want, "%s (agent %d): %s (%d), expected %s: %s", what, cl->agent,
                 dlock_strerror(rc), rc, dlock_strerror(want), dlock_client_strerror(cl->c, rc));
}

static dlock_lease *must(struct h_cl *cl, const char *name, uint32_t flags,
                         const dlock_lock_spec *spec)
{
    dlock_lease *l = NULL;
    expect_rc(acq(cl, name, DLOCK_WAIT_NONE, flags, spec, &l), 0, name, cl);
    cr_assert_not_null(l);
    return l;
}

/* Starts an acquire that waits for ever, and makes sure the agent has
 * taken it (it handles a connection's frames in order). */
static void wait_async(struct h_cl *cl, const char *name, uint32_t flags,
                       const dlock_lock_spec *spec, struct h_acq *a)
{
    dlock_acquire_options o = {.ttl_ms = K.ttl, .wait_ms = DLOCK_WAIT_FOREVER, .flags = flags};
    h_acquire_spec_async(cl, name, &o, spec, a);
    cr_assert_eq(dlock_client_ping(cl->c), 0);
}

/* Waits for a, which must have been granted. */
static dlock_lease *granted(struct h_acq *a, const char *what)
{
    H_WAIT_UNTIL(H_EVENT_MS, a->done);
    cr_assert_eq(a->status, 0, "%s: %s (%d)", what, dlock_strerror(a->status), a->status);
    return a->lease;
}

/* Keeps checking for STILL_MS that none of the n acquires is done (they
 * wait behind a holder, retrying); fails naming the first that is. */
#define STILL_WAITING(...) still_waiting(__LINE__, __VA_ARGS__)
static void still_waiting(int line, struct h_acq *const *a, const char *const *who, int n)
{
    int64_t end = h_now_ms() + STILL_MS;
    do {
        for (int i = 0; i < n; i++)
            cr_assert(!a[i]->done, "line %d: %s was %s while it should wait (%s)", line, who[i],
                      a[i]->status ? "answered" : "granted", dlock_strerror(a[i]->status));
        h_pump_all(2);
    } while (h_now_ms() < end);
}

/* Leases valid and HELD (neither in JEOPARDY nor LOST). */
static void all_valid(dlock_lease *const *l, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert(dlock_lease_valid(l[i]) && dlock_lease_state(l[i]) == DLOCK_STATE_HELD,
                  "lease %d on %s: state %d, valid %d", i, dlock_lease_name(l[i]),
                  dlock_lease_state(l[i]), dlock_lease_valid(l[i]));
}

/* The agent of cl has leases-json NAME listing one lease with these holds. */
static void agent_shows_holds(struct h_cl *cl, const char *name, unsigned holds)
{
    char req[128], want[32];
    snprintf(req, sizeof req, "leases-json %s\n", name);
    snprintf(want, sizeof want, "\"holds\":%u", holds);
    const char *js = h_status_ask(cl->agent, req);
    cr_assert(js && strstr(js, want), "agent %d: %s", cl->agent, js ? js : "(no answer)");
    const char *second = strstr(strstr(js, "\"name\":") + 1, "\"name\":");
    cr_assert_null(second, "agent %d lists the lease twice: %s", cl->agent, js);
}

/* How often needle occurs in s. */
static int occurrences(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Each node's fields of the lock key, on stderr (when a check fails). */
static void dump_key(const char *name)
{
    int nodes[HC_NODES], n = key_nodes(h_key(name), nodes);
    for (int k = 0; k < n; k++) {
        redisReply *r = node_cmd(nodes[k], "HGETALL", h_key(name), NULL);
        fprintf(stderr, "node %d, HGETALL %s:", nodes[k], h_key(name));
        for (size_t i = 0; i < r->elements; i++)
            fprintf(stderr, " '%s'", r->element[i]->str);
        fprintf(stderr, "\n");
        freeReplyObject(r);
    }
}

/* holder-json of a counted key, asked of agent i: its kind, its n live
 * holders, each of this process, from every node there is to ask. Waited
 * for (quorum mode grants on a majority before the last node has the
 * permit). */
static void holder_json_shows(int agent, const char *name, const char *kind, unsigned n)
{
    char req[128], want[128], pid[32];
    snprintf(req, sizeof req, "holder-json %s\n", name);
    snprintf(want, sizeof want, "\"nodes\":%d,\"kind\":\"%s\",\"permits\":%u,\"holders\":[{",
             K.mode == QUORUM ? 3 : 1, kind, n);
    snprintf(pid, sizeof pid, "\"pid\":%d,", (int)getpid());
    const char *js = NULL, *holders = NULL;
    int64_t end = h_deadline(H_EVENT_MS);
    while (!((js = h_status_ask(agent, req)) && (holders = strstr(js, want)) &&
             occurrences(holders, pid) == (int)n)) {
        if (h_now_ms() > end) {
            dump_key(name);
            cr_assert_fail("agent %d: holder-json %s: not %s with %u holders within %d ms: %s",
                           agent, name, kind, n, h_scaled_ms(H_EVENT_MS), js ? js : "(none)");
        }
        h_pump_all(10);
    }
    cr_assert(h_json_valid(js), "%s", js);
    cr_assert(strstr(js, "\"held\":true,\"dlock\":true,"), "%s", js);
    cr_assert_eq(occurrences(holders, "{\"host\":"), (int)n, "%s", js);
}

/* ---- re-entrant ---- */

/* An exclusive lease re-entered by its owner is the same handle, token and
 * key, its holds counted; another host's waiter gets the name only at the
 * last of three releases. */
static void check_reentrant_exclusive(void)
{
    const char *name = "kinds-rex";
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *l = must(a, name, DLOCK_ACQUIRE_REENTRANT, NULL), *l2 = NULL, *l3 = NULL;
    const char *val = lock_value(name);
    cr_assert(h_is_token(val), "%s: '%s' is no dlock value", name, val);
    uint64_t fence = dlock_lease_fence(l);
    expect_rc(acq(a, name, DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, NULL, &l2), 0,
              "re-entry, try-once", a);
    expect_rc(acq(a, name, DLOCK_WAIT_FOREVER, DLOCK_ACQUIRE_REENTRANT, NULL, &l3), 0,
              "re-entry, waiting", a);
    cr_assert(l2 == l && l3 == l, "another handle on re-entry");
    cr_assert_eq(dlock_lease_holds(l), 3);
    cr_assert_eq(dlock_lease_fence(l), fence, "the token changed on re-entry");
    agent_shows_holds(a, name, 3);
    cr_assert_str_eq(lock_value(name), val, "the key changed on re-entry");
    dlock_lease *x = NULL;
    expect_rc(acq(b, name, DLOCK_WAIT_NONE, DLOCK_ACQUIRE_REENTRANT, NULL, &x), DLOCK_EBUSY,
              "another host's re-entrant try-once", b);
    struct h_acq w;
    wait_async(b, name, 0, NULL, &w);
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    cr_assert_eq(dlock_lease_holds(l), 1);
    agent_shows_holds(a, name, 1);
    STILL_WAITING((struct h_acq *[]){&w}, (const char *[]){"the waiter"}, 1);
    all_valid(&l, 1);
    cr_assert_str_eq(lock_value(name), val, "the key changed with a hold left");
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    dlock_lease *wl = granted(&w, "the other host's waiter");
    cr_assert_gt(dlock_lease_fence(wl), fence);
    cr_assert_eq(dlock_lease_release_sync(wl), 0);
    KEY_DELETED(name);
    h_client_close(a);
    h_client_close(b);
}

/* A re-entered shared lease is one permit; a reader of another host holds
 * beside it, and a writer of a third waits for the last hold. */
static void check_reentrant_shared(void)
{
    const char *name = "kinds-res";
    struct h_cl *a = h_client_at(0), *b = h_client_at(1), *c = h_client_at(2);
    dlock_lease *s = must(a, name, DLOCK_ACQUIRE_REENTRANT, &SHARED);
    uint64_t fence = dlock_lease_fence(s);
    cr_assert_eq(must(a, name, DLOCK_ACQUIRE_REENTRANT, &SHARED), s, "another handle on re-entry");
    cr_assert_eq(dlock_lease_holds(s), 2);
    cr_assert_eq(dlock_lease_fence(s), fence, "the token changed on re-entry");
    agent_shows_holds(a, name, 2);
    holder_json_shows(1, name, "shared", 1);
    dlock_lease *r = must(b, name, 0, &SHARED);
    uint64_t rf = dlock_lease_fence(r);
    cr_assert_gt(rf, fence);
    holder_json_shows(2, name, "shared", 2);
    struct h_acq w;
    wait_async(c, name, 0, NULL, &w);
    cr_assert_eq(dlock_lease_release_sync(r), 0);
    cr_assert_eq(dlock_lease_release_sync(s), 0);
    STILL_WAITING((struct h_acq *[]){&w}, (const char *[]){"the waiter"}, 1);
    all_valid(&s, 1);
    cr_assert_eq(dlock_lease_holds(s), 1);
    holder_json_shows(2, name, "shared", 1);
    cr_assert_eq(dlock_lease_release_sync(s), 0);
    dlock_lease *wl = granted(&w, "the writer");
    cr_assert_gt(dlock_lease_fence(wl), rf);
    cr_assert_eq(dlock_lease_release_sync(wl), 0);
    KEY_DELETED(name);
    h_client_close(a);
    h_client_close(b);
    h_client_close(c);
}

/* ---- shared ---- */

/* Readers of hosts 0 and 1 hold together; a writer of host 2 waits; readers
 * that come after it, on host 1 (which holds a reader: Redis's waiting-hosts
 * record) and on host 2 (behind the writer in its agent), wait behind it.
 * The last reader's client closes: the writer goes first, with a token
 * above every reader's, then both late readers together. */
static const char *const WHO_RW[] = {"the writer of host 2", "the late reader of host 1",
                                     "the late reader of host 2"};

static void check_shared(void)
{
    const char *name = "kinds-rw";
    struct h_cl *r0 = h_client_at(0), *r1 = h_client_at(1), *w = h_client_at(2);
    struct h_cl *late1 = h_client_at(1), *late2 = h_client_at(2);
    dlock_lease *l[2] = {must(r0, name, 0, &SHARED), must(r1, name, 0, &SHARED)}, *x = NULL;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(dlock_lease_kind(l[i]), DLOCK_KIND_SHARED);
    cr_assert_gt(dlock_lease_fence(l[1]), dlock_lease_fence(l[0]));
    all_valid(l, 2);
    cr_assert_str_eq(counted_kind(name), "shared");
    holder_json_shows(2, name, "shared", 2);
    h_sleep_ms(2 * COHORT_MS); /* the readers' cohorts are over */
    expect_rc(acq(w, name, DLOCK_WAIT_NONE, 0, NULL, &x), DLOCK_EBUSY,
              "a writer's try-once beside readers of two hosts", w);
    struct h_acq wa, ra1, ra2;
    wait_async(w, name, 0, NULL, &wa);
    hosts_waiting(name, 1);
    expect_rc(acq(late1, name, DLOCK_WAIT_NONE, 0, &SHARED, &x), DLOCK_EBUSY,
              "a reader's try-once while a writer of another host waits", late1);
    wait_async(late1, name, 0, &SHARED, &ra1);
    wait_async(late2, name, 0, &SHARED, &ra2);
    STILL_WAITING((struct h_acq *[]){&wa, &ra1, &ra2}, WHO_RW, 3);
    hosts_waiting(name, 2);
    all_valid(l, 2);
    uint64_t top = dlock_lease_fence(l[1]);
    cr_assert_eq(dlock_lease_release_sync(l[0]), 0);
    STILL_WAITING((struct h_acq *[]){&wa, &ra1, &ra2}, WHO_RW, 3);
    h_client_close(r1); /* the last reader's process dies */
    dlock_lease *wl = granted(&wa, "the writer");
    cr_assert_gt(dlock_lease_fence(wl), top, "the writer's token is not above the readers'");
    STILL_WAITING((struct h_acq *[]){&ra1, &ra2}, WHO_RW + 1, 2);
    uint64_t wf = dlock_lease_fence(wl);
    cr_assert_eq(dlock_lease_release_sync(wl), 0);
    dlock_lease *m[2] = {granted(&ra1, "the late reader of host 1"),
                         granted(&ra2, "the late reader of host 2")};
    all_valid(m, 2);
    for (int i = 0; i < 2; i++)
        cr_assert_gt(dlock_lease_fence(m[i]), wf);
    holder_json_shows(0, name, "shared", 2);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(dlock_lease_release_sync(m[i]), 0);
    KEY_DELETED(name);
    h_client_close(r0);
    h_client_close(w);
    h_client_close(late1);
    h_client_close(late2);
}

/* ---- semaphore ---- */

/* Two permits held on hosts 0 and 1; a third host's acquire waits, another
 * N or kind is DLOCK_EKIND, said by Redis on a host that holds nothing. The
 * waiting hosts get permits in their order in the record: at a release, and
 * when a holder's client closes. */
static const char *const WHO_SEM[] = {"the waiter of host 2", "the waiter of host 0"};

static void check_semaphore(void)
{
    const char *name = "kinds-sem";
    dlock_lock_spec two = semaphore(2), three = semaphore(3);
    struct h_cl *c0 = h_client_at(0), *c1 = h_client_at(1), *c2 = h_client_at(2);
    struct h_cl *c0b = h_client_at(0);
    dlock_lease *p[2] = {must(c0, name, 0, &two), must(c1, name, 0, &two)}, *x = NULL;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(dlock_lease_kind(p[i]), DLOCK_KIND_SEMAPHORE);
    cr_assert_gt(dlock_lease_fence(p[1]), dlock_lease_fence(p[0]));
    all_valid(p, 2);
    cr_assert_str_eq(counted_kind(name), "sem:2");
    holder_json_shows(2, name, "sem:2", 2);
    expect_rc(acq(c2, name, DLOCK_WAIT_NONE, 0, &two, &x), DLOCK_EBUSY, "a third of 2 permits", c2);
    expect_rc(acq(c2, name, DLOCK_WAIT_NONE, 0, &three, &x), DLOCK_EKIND, "3 permits on 2", c2);
    expect_rc(acq(c2, name, DLOCK_WAIT_FOREVER, 0, &three, &x), DLOCK_EKIND,
              "3 permits on 2, waiting", c2);
    expect_rc(acq(c2, name, DLOCK_WAIT_NONE, 0, &SHARED, &x), DLOCK_EKIND, "shared on 2 permits",
              c2);
    expect_rc(acq(c0b, name, DLOCK_WAIT_NONE, 0, &three, &x), DLOCK_EKIND,
              "3 permits on 2, on a host holding one", c0b);
    cr_assert_null(x);
    struct h_acq w2, w0;
    wait_async(c2, name, 0, &two, &w2);
    hosts_waiting(name, 1);
    wait_async(c0b, name, 0, &two, &w0);
    hosts_waiting(name, 2);
    STILL_WAITING((struct h_acq *[]){&w2, &w0}, WHO_SEM, 2);
    uint64_t top = dlock_lease_fence(p[1]);
    cr_assert_eq(dlock_lease_release_sync(p[0]), 0);
    dlock_lease *g2 = granted(&w2, "the first waiting host");
    cr_assert_gt(dlock_lease_fence(g2), top);
    STILL_WAITING((struct h_acq *[]){&w0}, WHO_SEM + 1, 1);
    all_valid((dlock_lease *[]){p[1], g2}, 2);
    h_client_close(c1); /* a permit holder's process dies */
    dlock_lease *g0 = granted(&w0, "the second waiting host");
    cr_assert_gt(dlock_lease_fence(g0), dlock_lease_fence(g2));
    holder_json_shows(1, name, "sem:2", 2);
    cr_assert_eq(dlock_lease_release_sync(g2), 0);
    cr_assert_eq(dlock_lease_release_sync(g0), 0);
    KEY_DELETED(name);
    h_client_close(c0);
    h_client_close(c2);
    h_client_close(c0b);
}

/* Quorum mode refuses a semaphore (docs/redis.md, "Kinds in each mode"),
 * through the library and dlockctl, and writes nothing. */
static void check_semaphore_refused(void)
{
    const char *name = "kinds-qsem";
    const char *why = "not available with this agent's Redis mode";
    dlock_lock_spec two = semaphore(2);
    for (int i = 0; i < 2; i++) {
        struct h_cl *c = h_client_at(i);
        dlock_lease *x = NULL;
        int rc = acq(c, name, DLOCK_WAIT_NONE, 0, &two, &x);
        expect_rc(rc, DLOCK_EINVAL, "a semaphore in quorum mode", c);
        const char *msg = dlock_client_strerror(c->c, rc);
        cr_assert(msg && strstr(msg, why), "agent %d says '%s'", i, msg ? msg : "");
        expect_rc(acq(c, name, DLOCK_WAIT_FOREVER, 0, &two, &x), DLOCK_EINVAL,
                  "a waiting semaphore in quorum mode", c);
        cr_assert_null(x);
        h_client_close(c);
    }
    int st = h_ctl(H_EVENT_MS, "-s", H.agent[0].sock, "run", "-p", "2", name, "--", "true", NULL);
    cr_assert_eq(st, 64, "dlockctl run -p 2 in quorum mode: exit %d", st);
    const char *out = h_read_file(h_path("ctl.out"));
    cr_assert(out && strstr(out, why), "%s", out ? out : "(no output)");
    cr_assert_eq(keys_named(name), 0);
}

/* ---- footprint ---- */

/* No key that names any of the locks is left on any node (the waiting-hosts
 * records and readers' marks lapse on their own, within 3 s). */
static void nothing_left(const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        H_WAIT_UNTIL(H_EVENT_MS, keys_named(names[i]) == 0);
}

/* ---- cluster: a slot moved under readers ---- */

/* Readers of hosts 0 and 1 hold a name whose slot moves to another master,
 * with a writer of host 2 waiting: the readers stay held, their key (and the
 * record) move whole, and their releases let the writer in on the new
 * master. */
static void check_readers_through_a_slot_move(void)
{
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    char name[64];
    hc_name_on(m[0], "kinds-mv", name, sizeof name);
    unsigned slot = hc_name_slot(name);
    struct h_cl *r0 = h_client_at(0), *r1 = h_client_at(1), *w = h_client_at(2);
    dlock_lease *l[2] = {must(r0, name, 0, &SHARED), must(r1, name, 0, &SHARED)};
    struct h_acq wa;
    wait_async(w, name, 0, NULL, &wa);
    hosts_waiting(name, 1);
    hc_move_slot(slot, m[1]);
    cr_assert_eq(hc_key_node(h_key(name)), m[1]);
    cr_assert_eq(hc_count_slot(m[0], slot), 0, "keys of slot %u left on its old master", slot);
    all_valid(l, 2);
    cr_assert_str_eq(counted_kind(name), "shared");
    holder_json_shows(2, name, "shared", 2);
    STILL_WAITING((struct h_acq *[]){&wa}, (const char *[]){"the writer"}, 1);
    uint64_t top = dlock_lease_fence(l[1]);
    cr_assert_eq(dlock_lease_release_sync(l[0]), 0);
    STILL_WAITING((struct h_acq *[]){&wa}, (const char *[]){"the writer"}, 1);
    cr_assert_eq(dlock_lease_release_sync(l[1]), 0);
    dlock_lease *wl = granted(&wa, "the writer after the move");
    cr_assert_gt(dlock_lease_fence(wl), top);
    cr_assert_eq(dlock_lease_release_sync(wl), 0);
    KEY_DELETED(name);
    H_WAIT_UNTIL(H_EVENT_MS, keys_named(name) == 0);
    cr_assert_eq(hc_count_slot(m[0], slot), 0);
    h_client_close(r0);
    h_client_close(r1);
    h_client_close(w);
}

/* ---- sentinel: a failover under readers ---- */

/* How the lease of cl ended after a failover: HELD once it was doubted
 * (JEOPARDY with DLOCK_EFAILOVER) and confirmed, LOST, or 0 while
 * neither. */
static int failover_outcome(const struct h_cl *cl, const dlock_lease *l)
{
    if (h_events(cl, l, DLOCK_STATE_LOST))
        return DLOCK_STATE_LOST;
    int doubt = -1;
    for (int k = 0; k < cl->nev; k++)
        if (cl->ev[k].lease == l && cl->ev[k].state == DLOCK_STATE_JEOPARDY &&
            cl->ev[k].reason == DLOCK_EFAILOVER)
            doubt = k;
    for (int k = doubt + 1; doubt >= 0 && k < cl->nev; k++)
        if (cl->ev[k].lease == l && cl->ev[k].state == DLOCK_STATE_HELD)
            return DLOCK_STATE_HELD;
    return 0;
}

/* HLEN of key on Redis server i; -1 without an answer. */
static long long hs_hlen(int i, const char *key)
{
    redisReply *r = hs_cmd(i, "HLEN %s", key);
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

/* Readers of hosts 0 and 1, their permits on both replicas; the sentinels
 * fail over: each lease goes through doubt and is HELD again (its permit
 * came with the replica), the new master shows both, and their releases let
 * a writer of host 2 in. */
static void check_readers_through_a_failover(void)
{
    const char *name = "kinds-fo";
    struct h_cl *r[2] = {h_client_at(0), h_client_at(1)}, *w = h_client_at(2);
    dlock_lease *l[2] = {must(r[0], name, 0, &SHARED), must(r[1], name, 0, &SHARED)};
    int old = hs_master();
    for (int s = 0; s < HS_REDIS; s++)
        if (s != old)
            H_WAIT_UNTIL(H_EVENT_MS, hs_hlen(s, h_key(name)) == 3); /* ~kind and 2 permits */
    hs_sentinel_ok(0, "SENTINEL FAILOVER %s", HS_MASTER_NAME);
    int now = hs_wait_master_not(old);
    H_WAIT_UNTIL(HS_FAILOVER_MS, failover_outcome(r[0], l[0]) && failover_outcome(r[1], l[1]));
    for (int i = 0; i < 2; i++)
        cr_assert_eq(failover_outcome(r[i], l[i]), DLOCK_STATE_HELD,
                     "reader %d: its permit came with the replica", i);
    all_valid(l, 2);
    cr_assert_eq(hs_master(), now);
    cr_assert_str_eq(counted_kind(name), "shared");
    holder_json_shows(2, name, "shared", 2);
    struct h_acq wa;
    wait_async(w, name, 0, NULL, &wa);
    STILL_WAITING((struct h_acq *[]){&wa}, (const char *[]){"the writer"}, 1);
    uint64_t top = dlock_lease_fence(l[1]);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(dlock_lease_release_sync(l[i]), 0);
    dlock_lease *wl = granted(&wa, "the writer after the failover");
    cr_assert_gt(dlock_lease_fence(wl), top);
    cr_assert_eq(dlock_lease_release_sync(wl), 0);
    KEY_DELETED(name);
    H_WAIT_UNTIL(H_EVENT_MS, keys_named(name) == 0);
    for (int i = 0; i < 2; i++)
        h_client_close(r[i]);
    h_client_close(w);
}

/* ---- quorum: a permit missing on a minority ---- */

/* A field of the lock key on node i that is a permit (not ~kind), other
 * than other_than (may be NULL); NULL when there is none. */
static const char *permit_on(int i, const char *name, const char *other_than)
{
    redisReply *r = node_cmd(i, "HKEYS", h_key(name), NULL);
    const char *found = NULL;
    for (size_t k = 0; k < r->elements && !found; k++)
        if (r->element[k]->str[0] != '~' && (!other_than || strcmp(r->element[k]->str, other_than)))
            found = h_keep(r->element[k]->str);
    freeReplyObject(r);
    return found;
}

/* Quorum mode grants a reader on a majority, so a node may miss a permit
 * (say, the writer's release had not reached it yet when the reader asked):
 * here reader 0's permit is taken off node 0 by hand. Both readers hold; holder-json counts
 * every holder whose permit is on a majority, whichever node misses it. */
static void check_holder_json_past_a_missing_permit(void)
{
    const char *name = "kinds-minority";
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *l[2] = {must(a, name, 0, &SHARED), NULL};
    const char *first = NULL;
    H_WAIT_UNTIL(H_EVENT_MS, (first = permit_on(0, name, NULL)) != NULL);
    l[1] = must(b, name, 0, &SHARED);
    holder_json_shows(0, name, "shared", 2);
    redisReply *r = node_cmd(0, "HDEL", h_key(name), first);
    cr_assert_eq(r->integer, 1);
    freeReplyObject(r);
    cr_assert_not_null(permit_on(0, name, first), "node 0 lost both permits");
    all_valid(l, 2);
    holder_json_shows(2, name, "shared", 2);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(dlock_lease_release_sync(l[i]), 0);
    KEY_DELETED(name);
    h_client_close(a);
    h_client_close(b);
}

/* ---- the modes ----
 *
 * One set-up per mode for all its checks; the readers and writers across
 * hosts come last. */

static const char *const NAMES[] = {"kinds-rex", "kinds-res", "kinds-sem", "kinds-qsem",
                                    "kinds-rw"};

ITEST(kinds_modes, quorum_of_three_nodes)
{
    start_quorum();
    check_reentrant_exclusive();
    check_reentrant_shared();
    check_semaphore_refused();
    check_shared();
    nothing_left(NAMES, 5);
}

/* Apart: the agent's own answer, not the kinds. */
ITEST(kinds_modes, quorum_holder_json_past_a_permit_missing_on_a_minority)
{
    start_quorum();
    check_holder_json_past_a_missing_permit();
}

HCTEST(kinds_modes, cluster)
{
    start_cluster();
    check_reentrant_exclusive();
    check_reentrant_shared();
    check_semaphore();
    check_readers_through_a_slot_move();
    check_shared();
    nothing_left(NAMES, 5);
}

STEST(kinds_modes, sentinel)
{
    start_sentinel();
    check_reentrant_exclusive();
    check_reentrant_shared();
    check_semaphore();
    check_readers_through_a_failover();
    check_shared();
    nothing_left(NAMES, 5);
}

/* ---- names in Redisson's formats on Redis Cluster ---- */

/* A string reply's text, or "" (valid until the next call). */
static const char *reply_str(redisReply *r)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return buf;
}

static long long reply_int(redisReply *r)
{
    cr_assert(r && r->type == REDIS_REPLY_INTEGER, "not an integer reply");
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* Two agents whose fallback retry (60 s) cannot wake a waiter within the
 * test's deadlines: only a release message can. The Redisson side is played
 * on the name's node, as Redisson's scripts do it there (SPUBLISH). */
HCTEST(kinds_modes, redisson_formats_in_cluster)
{
    K.mode = CLUSTER;
    K.ttl = 30000;
    hc_start();
    for (int i = 0; i < 2; i++)
        hc_agent_config(i, "retry_fallback_ms = 60000",
                        "\n[formats]\nredisson = orders:*\nredisson_rwlock = reports:*", 0);
    for (int i = 0; i < 2; i++)
        hc_agent_start(i);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);

    /* The key is the bare name, on its own slot's node: dlock's field. */
    dlock_lease *l = must(a, "orders:1", 0, NULL);
    redisReply *r = hc_key_cmd("orders:1", "HGETALL %s", "orders:1");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "HGETALL orders:1");
    cr_assert_eq(strlen(r->element[0]->str), 34, "dlock's field: %s", r->element[0]->str);
    cr_assert_str_eq(r->element[1]->str, "1");
    freeReplyObject(r);
    cr_assert_eq(keys_named("dlock:orders:1"), 0, "a key under the prefix");

    /* A waiter on the other agent is woken by the release's SPUBLISH on
     * Redisson's channel, in the name's slot. */
    struct h_acq w;
    wait_async(b, "orders:1", 0, NULL, &w);
    cr_assert_eq(dlock_lease_release(l), 0);
    dlock_lease *lb = granted(&w, "b after a's release");
    cr_assert_eq(dlock_lease_release(lb), 0);
    H_WAIT_UNTIL(H_EVENT_MS, reply_int(hc_key_cmd("orders:1", "EXISTS %s", "orders:1")) == 0);

    /* Redisson holds orders:2: busy; its unlock (DEL, SPUBLISH 0) wakes a
     * dlock waiter. */
    freeReplyObject(hc_key_cmd("orders:2", "HSET %s %s 1", "orders:2", "uuid-of-a-jvm:57"));
    freeReplyObject(hc_key_cmd("orders:2", "PEXPIRE %s 60000", "orders:2"));
    dlock_lease *none = NULL;
    expect_rc(acq(a, "orders:2", DLOCK_WAIT_NONE, 0, NULL, &none), DLOCK_EBUSY, "orders:2", a);
    struct h_acq w2;
    wait_async(b, "orders:2", 0, NULL, &w2);
    struct h_acq *w2s[] = {&w2};
    const char *who[] = {"b behind Redisson"};
    still_waiting(__LINE__, w2s, who, 1);
    freeReplyObject(hc_key_cmd("orders:2", "DEL %s", "orders:2"));
    freeReplyObject(hc_key_cmd("orders:2", "SPUBLISH %s 0", "redisson_lock__channel:{orders:2}"));
    cr_assert_eq(dlock_lease_release(granted(&w2, "b after Redisson's unlock")), 0);

    /* RReadWriteLock: readers of both agents share the hash. */
    dlock_lease *r1 = must(a, "reports:1", 0, &SHARED), *r2 = must(b, "reports:1", 0, &SHARED);
    cr_assert_str_eq(reply_str(hc_key_cmd("reports:1", "HGET %s mode", "reports:1")), "read");
    cr_assert_eq(reply_int(hc_key_cmd("reports:1", "HLEN %s", "reports:1")), 3);
    cr_assert_eq(dlock_lease_release(r1), 0);
    cr_assert_eq(dlock_lease_release(r2), 0);
    H_WAIT_UNTIL(H_EVENT_MS, reply_int(hc_key_cmd("reports:1", "EXISTS %s", "reports:1")) == 0);
}
