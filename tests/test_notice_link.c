/* SPDX-License-Identifier: BSD-3-Clause */
/* test_notice_link.c -- the single-node backend's release notices on a real
 * redis-server, driven in this process on its own libev loop, the test
 * playing the core (the owner that alone knows which names it wants):
 * thousands of names subscribed (in steps), each confirmation reported as a
 * notice, and subscribed again after the connection is lost when the owner
 * asks again; the link keeps no name across connections, not even one asked
 * for while it is down, and a name asked for twice is subscribed once; and a
 * sharded node (Redis Cluster, one node here): SSUBSCRIBE, the release
 * script's SPUBLISH, and a name the node lets go (the owner's word that its
 * slot moved, the unasked sunsubscribe when the slot leaves the node, a
 * subscription refused for a slot it does not serve) reported unwatched. */
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_redis.h"
#include "config.h"
#include "harness.h"
#include "keys.h"
#include "log.h"

#define NAMES 3000

static struct {
    struct config cfg;
    struct ev_loop *loop;
    ev_timer tick;
    struct backend *b;
    int ready, subscribed, unsubscribed;
    bool reask;                    /* on a new connection, ask for the names in want */
    bool want[NAMES];              /* the names "nI" the owner wants */
    unsigned char notified[NAMES]; /* notices per name "nI" */
    int notices;                   /* in all */
    char last_notice[64];
    char unwatched[64];
    int nunwatched;
    int results;
    struct backend_result last;
    bool has_grant; /* the last notice was a grant on release: */
    struct backend_grant grant;
} T;

static int name_index(const char *name, size_t len)
{
    if (len < 2 || name[0] != 'n')
        return -1;
    int i = atoi(name + 1);
    return i >= 0 && i < NAMES ? i : -1;
}

static void on_notice(void *arg, const char *name, size_t len, const struct backend_grant *grant)
{
    int i = name_index(name, len);
    if (i >= 0 && T.notified[i] < 255)
        T.notified[i]++;
    T.notices++;
    snprintf(T.last_notice, sizeof T.last_notice, "%.*s", (int)len, name);
    T.has_grant = grant != NULL;
    if (grant)
        T.grant = *grant;
}

static void watch(const char *name, bool on);

/* As the core does: a new connection has no subscription, so the owner
 * asks for every name it wants again. */
static void on_subscribed(void *arg)
{
    T.subscribed++;
    char name[16];
    for (int i = 0; T.reask && i < NAMES; i++) {
        if (T.want[i]) {
            snprintf(name, sizeof name, "n%d", i);
            watch(name, true);
        }
    }
}

static void on_unsubscribed(void *arg)
{
    T.unsubscribed++;
}

static void on_ready(void *arg)
{
    T.ready++;
}

static void on_unwatched(void *arg, const char *name, size_t len)
{
    T.nunwatched++;
    snprintf(T.unwatched, sizeof T.unwatched, "%.*s", (int)len, name);
}

static void on_result(void *arg, const struct backend_result *r)
{
    T.results++;
    T.last = *r;
    T.last.error_text = NULL;
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
}

/* One turn of the loop, as dlockd runs it: the backend's queued writes go
 * out, then the loop waits for something (10 ms at most). */
static void turn(void)
{
    T.b->ops->flush(T.b);
    ev_run(T.loop, EVRUN_ONCE);
}

#define RUN_UNTIL(timeout_ms, cond)                                                                \
    do {                                                                                           \
        int64_t end_ = h_deadline(timeout_ms);                                                     \
        while (!(cond)) {                                                                          \
            if (h_now_ms() > end_)                                                                 \
                cr_assert_fail("%s:%d: not true within %d ms: %s", __FILE__, __LINE__,             \
                               h_scaled_ms(timeout_ms), #cond);                                    \
            turn();                                                                                \
        }                                                                                          \
    } while (0)

static bool notice_link_up(void)
{
    struct backend_node n;
    return T.b->ops->nodes(T.b, &n, 1) == 1 && n.subscribed;
}

/* The backend for node 0, set up: commands go, and the notice link is up.
 * reask: the owner asks for its names again on every new connection. */
static void backend_start(bool sharded, bool reask)
{
    memset(&T, 0, sizeof T);
    T.reask = reask;
    signal(SIGPIPE, SIG_IGN); /* as dlockd: a write to a lost connection fails */
    log_set_level(LOG_WARN);
    config_defaults(&T.cfg);
    T.cfg.reconnect_min_ms = 20;
    T.cfg.reconnect_max_ms = 200;
    cr_assert_eq(config_parse_addr(H.redis_addr, &T.cfg.nodes[0]), 0);
    T.cfg.nnodes = 1;
    T.loop = ev_loop_new(EVFLAG_AUTO);
    ev_timer_init(&T.tick, on_tick, 0.01, 0.01);
    ev_timer_start(T.loop, &T.tick);
    struct backend_events ev = {.on_notice = on_notice,
                                .on_subscribed = on_subscribed,
                                .on_unsubscribed = on_unsubscribed,
                                .on_unwatched = on_unwatched,
                                .on_ready = on_ready};
    struct redis_node_opts opts = {.sharded = sharded};
    T.b = backend_redis_new_opts(T.loop, &T.cfg, &T.cfg.nodes[0], &opts, &ev);
    cr_assert_not_null(T.b);
    RUN_UNTIL(H_EVENT_MS, T.ready && T.subscribed && notice_link_up());
}

static void backend_stop(void)
{
    T.b->ops->destroy(T.b);
    ev_timer_stop(T.loop, &T.tick);
    ev_loop_destroy(T.loop);
}

/* The owner wants name's notices (on) or no longer. */
static void watch(const char *name, bool on)
{
    cr_assert_eq(T.b->ops->watch(T.b, name, strlen(name), on), 0, "watch %s", name);
    if (name[0] == 'n' && atoi(name + 1) < NAMES)
        T.want[atoi(name + 1)] = on;
}

static void watch_n(int i, bool on)
{
    char name[16];
    snprintf(name, sizeof name, "n%d", i);
    watch(name, on);
}

static int names_notified(int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++)
        n += T.notified[i] > 0;
    return n;
}

/* A lock taken and given back through the backend while another host
 * waits for it, with its notice. */
static void take_and_release(const char *name)
{
    static const char token[] = "0123456789abcdef0123456789abcdef";
    struct backend_req req = {.name = name,
                              .len = strlen(name),
                              .token = token,
                              .holder = "test",
                              .ttl_ms = 5000,
                              .notify = true};
    int before = T.results;
    cr_assert_eq(T.b->ops->op(T.b, &req, on_result, NULL), 0);
    RUN_UNTIL(H_EVENT_MS, T.results > before);
    cr_assert_eq(T.last.err, 0, "acquire %s: %d", name, T.last.err);
    cr_assert_eq(T.last.outcome, BACKEND_DONE, "acquire %s: outcome %d", name, T.last.outcome);
    /* Another host waits: it joins the name's waiting-hosts record, and the
     * release publishes only then. */
    struct backend_req other = {.op = BACKEND_ACQUIRE,
                                .name = name,
                                .len = strlen(name),
                                .token = "fedcba9876543210fedcba9876543210",
                                .holder = "other",
                                .ttl_ms = 5000,
                                .waiter_id = "otherhost",
                                .want_ms = 5000};
    cr_assert_eq(T.b->ops->op(T.b, &other, on_result, NULL), 0);
    RUN_UNTIL(H_EVENT_MS, T.results > before + 1);
    cr_assert_eq(T.last.outcome, BACKEND_TAKEN, "the other host's acquire: outcome %d",
                 T.last.outcome);
    before++;
    req.op = BACKEND_RELEASE;
    cr_assert_eq(T.b->ops->op(T.b, &req, on_result, NULL), 0);
    RUN_UNTIL(H_EVENT_MS, T.results > before + 1);
    cr_assert_eq(T.last.err, 0, "release %s: %d", name, T.last.err);
    cr_assert_eq(T.last.outcome, BACKEND_DONE);
}

/* Drops the node's pub/sub connection, and runs the loop until the link
 * has seen it go (it comes back after its backoff, 10 ms at least). */
static void kill_notice_link(void)
{
    redisReply *r = h_redis_cmd("CLIENT KILL TYPE pubsub");
    cr_assert(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "killed %lld connections",
              r->integer);
    freeReplyObject(r);
    RUN_UNTIL(H_EVENT_MS, !notice_link_up());
}

ITEST(notice_link, thousands_of_names_and_again_after_the_connection_is_lost)
{
    h_redis_start();
    backend_start(false, true);
    cr_assert_eq(h_node_channels(0, "*"), 0);
    for (int i = 0; i < NAMES; i++)
        watch_n(i, true);
    /* Each subscription is confirmed with a notice for its name. */
    RUN_UNTIL(H_EVENT_MS, names_notified(0, NAMES) == NAMES);
    cr_assert_eq(h_node_channels(0, "dlock:*"), NAMES);
    cr_assert_eq(h_node_subscribers(0, h_channel("n7")), 1);

    /* A release publishes on the name's own channel. */
    int before = T.notified[7];
    take_and_release("n7");
    RUN_UNTIL(H_EVENT_MS, T.notified[7] > before);

    /* The connection is lost; some names are watched off meanwhile. */
    memset(T.notified, 0, sizeof T.notified);
    int subscribed = T.subscribed;
    kill_notice_link();
    for (int i = NAMES / 2; i < NAMES; i++)
        watch_n(i, false);
    /* The new connection is reported, the owner asks for the names it still
     * wants, and each is confirmed again. */
    RUN_UNTIL(H_EVENT_MS, T.subscribed > subscribed && names_notified(0, NAMES / 2) == NAMES / 2);
    cr_assert_eq(h_node_channels(0, "dlock:*"), NAMES / 2);
    cr_assert_eq(h_node_subscribers(0, h_channel("n1")), 1);
    cr_assert_eq(h_node_subscribers(0, h_channel("n2999")), 0);
    cr_assert_eq(names_notified(NAMES / 2, NAMES), 0);
    cr_assert(notice_link_up());

    /* Off, on and off again in one turn: none is left. */
    for (int i = 0; i < NAMES / 2; i++) {
        watch_n(i, false);
        watch_n(i, true);
        watch_n(i, false);
    }
    RUN_UNTIL(H_EVENT_MS, h_node_channels(0, "dlock:*") == 0);
    backend_stop();
}

/* The owner hears of a lost connection once, when it goes (no notice
 * comes until the next is set up), and of the new one when it is up. */
ITEST(notice_link, tells_the_owner_once_the_connection_is_lost)
{
    h_redis_start();
    backend_start(false, true);
    cr_assert_eq(T.unsubscribed, 0);
    watch_n(0, true); /* a connection in pub/sub mode, which CLIENT KILL finds */
    RUN_UNTIL(H_EVENT_MS, T.notified[0] == 1);
    int subscribed = T.subscribed;
    kill_notice_link();
    RUN_UNTIL(H_EVENT_MS, T.unsubscribed == 1);
    RUN_UNTIL(H_EVENT_MS, T.subscribed > subscribed && T.notified[0] == 2);
    cr_assert_eq(T.unsubscribed, 1, "told %d times of one lost connection", T.unsubscribed);
    kill_notice_link();
    RUN_UNTIL(H_EVENT_MS, T.unsubscribed == 2);
    backend_stop();
}

ITEST(notice_link, keeps_no_name_across_connections_and_subscribes_a_name_once)
{
    h_redis_start();
    backend_start(false, false);
    for (int i = 0; i < 10; i++)
        watch_n(i, true);
    RUN_UNTIL(H_EVENT_MS, names_notified(0, 10) == 10);
    /* Asked for again while subscribed: nothing is sent. Subscriptions are
     * confirmed in order, so n10's comes after any second one of n0's. */
    watch_n(0, true);
    watch_n(10, true);
    RUN_UNTIL(H_EVENT_MS, T.notified[10] == 1);
    cr_assert_eq(T.notified[0], 1, "n0 subscribed twice");
    cr_assert_eq(h_node_channels(0, "dlock:*"), 11);

    /* The connection is lost; a name is asked for while the link is down.
     * The owner does not ask again this time: the new connection has no
     * subscription, n11's included. */
    int subscribed = T.subscribed;
    kill_notice_link();
    watch_n(11, true);
    RUN_UNTIL(H_EVENT_MS, T.subscribed > subscribed);
    watch_n(12, true);
    RUN_UNTIL(H_EVENT_MS, T.notified[12] == 1);
    cr_assert_eq(T.notified[11], 0);
    cr_assert_eq(h_node_channels(0, "dlock:*"), 1);
    cr_assert_eq(h_node_subscribers(0, h_channel("n12")), 1);

    /* Asked for again, a name is subscribed again. */
    watch_n(0, true);
    RUN_UNTIL(H_EVENT_MS, T.notified[0] == 2);
    cr_assert_eq(h_node_subscribers(0, h_channel("n0")), 1);
    cr_assert_eq(T.nunwatched, 0);
    backend_stop();
}

/* A grant on release's message (docs/redis.md) on a name's channel is
 * reported for the name its channel names, with the grant it says; a
 * message that only looks like one is a plain notice of its payload. */
ITEST(notice_link, a_grant_message_names_its_channels_name)
{
    h_redis_start();
    backend_start(false, false);
    watch_n(7, true);
    RUN_UNTIL(H_EVENT_MS, T.notified[7] == 1);
    cr_assert_not(T.has_grant);
    freeReplyObject(
        h_redis_cmd("PUBLISH %s %s", h_channel("n7"),
                    "grant 00000000000000bb bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb 1700000000000001 "
                    "41 10000 32"));
    RUN_UNTIL(H_EVENT_MS, T.notified[7] == 2);
    cr_assert_str_eq(T.last_notice, "n7");
    cr_assert(T.has_grant);
    cr_assert_str_eq(T.grant.to, "00000000000000bb");
    cr_assert_str_eq(T.grant.token, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    cr_assert_eq(T.grant.fence, 1700000000000001ull);
    cr_assert_eq(T.grant.seq, 41);
    cr_assert_eq(T.grant.ttl_ms, 10000);
    cr_assert_eq(T.grant.block, 32);
    /* A short token: no grant, the payload as a name (which no name is). */
    int notices = T.notices;
    freeReplyObject(
        h_redis_cmd("PUBLISH %s %s", h_channel("n7"), "grant 00000000000000bb bb 1 2 3 4"));
    RUN_UNTIL(H_EVENT_MS, T.notices == notices + 1);
    cr_assert_not(T.has_grant);
    cr_assert_str_eq(T.last_notice, "grant 00000000000000bb bb 1 2 3 4");
    backend_stop();
}

static void cluster_ok(void)
{
    redisReply *r = h_redis_cmd("CLUSTER ADDSLOTSRANGE 0 16383");
    cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER ADDSLOTSRANGE: %s", r->str ? r->str : "?");
    freeReplyObject(r);
    int ok = 0;
    int64_t end = h_deadline(H_EVENT_MS);
    while (!ok && h_now_ms() < end) {
        r = h_redis_cmd("CLUSTER INFO");
        ok = r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL;
        freeReplyObject(r);
        if (!ok)
            h_sleep_ms(20);
    }
    cr_assert(ok, "the one-node cluster is not ok");
}

static long long shard_channels(void)
{
    redisReply *r = h_redis_cmd("PUBSUB SHARDCHANNELS");
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    long long n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

/* The one-node cluster's slot of lock name's key (and of its channel). */
static unsigned slot_of(const char *name)
{
    char key[64], ch[128];
    size_t n = (size_t)snprintf(key, sizeof key, "dlock:%s", name);
    size_t c = release_channel(key, n, 6, ch);
    cr_assert_eq(key_slot(ch, c), key_slot(key, n));
    return key_slot(key, n);
}

ITEST(notice_link, sharded_node_of_a_cluster)
{
    h_node_set_args(0, "--cluster-enabled yes --cluster-port 0 --cluster-config-file nodes0.conf");
    h_redis_start();
    cluster_ok();
    backend_start(true, false);
    watch("job", true);
    RUN_UNTIL(H_EVENT_MS, T.notices == 1);
    cr_assert_str_eq(T.last_notice, "job");
    cr_assert_eq(shard_channels(), 1);
    cr_assert_eq(h_node_channels(0, "*"), 0, "subscribed to a plain channel");

    /* The release script publishes with SPUBLISH, which comes back as an
     * smessage. */
    take_and_release("job");
    RUN_UNTIL(H_EVENT_MS, T.notices == 2);
    cr_assert_str_eq(T.last_notice, "job");

    /* The owner says the slot of job moved away: the link unsubscribes it
     * and reports it; a name of another slot stays. */
    unsigned slot = slot_of("job");
    cr_assert(slot_of("n1") != slot && slot_of("n2") != slot && slot_of("n3") != slot);
    watch("n1", true);
    RUN_UNTIL(H_EVENT_MS, T.notified[1] == 1);
    uint8_t bits[KEY_SLOTS / 8] = {0};
    bits[slot / 8] |= (uint8_t)(1u << (slot % 8));
    backend_redis_unwatch_slots(T.b, bits);
    cr_assert_eq(T.nunwatched, 1);
    cr_assert_str_eq(T.unwatched, "job");
    RUN_UNTIL(H_EVENT_MS, shard_channels() == 1);
    watch("n2", true); /* confirmed after the unsubscription */
    RUN_UNTIL(H_EVENT_MS, T.notified[2] == 1);
    cr_assert_eq(shard_channels(), 2);
    cr_assert_eq(T.nunwatched, 1);

    /* Asked for again: the node serves the slot still. */
    int notices = T.notices;
    watch("job", true);
    RUN_UNTIL(H_EVENT_MS, T.notices > notices);
    cr_assert_str_eq(T.last_notice, "job");
    cr_assert_eq(shard_channels(), 3);

    /* The slot leaves the node: the node says so, and the owner hears it. */
    redisReply *r = h_redis_cmd("CLUSTER DELSLOTS %u", slot);
    cr_assert_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    RUN_UNTIL(H_EVENT_MS, T.nunwatched == 2);
    cr_assert_str_eq(T.unwatched, "job");
    cr_assert_eq(shard_channels(), 2);

    /* Asked for again there, it is refused: unwatched again, the link
     * stays. */
    watch("job", true);
    RUN_UNTIL(H_EVENT_MS, T.nunwatched == 3);
    cr_assert_str_eq(T.unwatched, "job");
    watch("n3", true);
    RUN_UNTIL(H_EVENT_MS, T.notified[3] == 1);
    cr_assert_eq(shard_channels(), 3);
    cr_assert(notice_link_up());
    backend_stop();
}
