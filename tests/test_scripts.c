/* SPDX-License-Identifier: BSD-3-Clause */
/* test_scripts.c -- the script table of agent/backend/scripts.c against a
 * real redis-server: every script built by script_command(), sent on a plain
 * synchronous hiredis connection and read back by script_decode(), with what
 * it leaves on Redis checked beside (the key, its value and TTL, the slot's
 * fencing mark, the waiting-hosts record, the release notice on a second
 * connection). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "harness.h"
#include "keys.h"
#include "scripts.h"

#define PREFIX "dlock:"
#define TOK_A  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B  "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define TOK_C  "cccccccccccccccccccccccccccccccc"
#define REC    "host-a 42 1000 job"

/* The test's own connection to the redis-server (the scripts' and the checks'). */
static redisContext *C;

/* The table is large (112 KiB): built once per test process. */
static const struct slot_tags *tags(void)
{
    static struct slot_tags *t;
    if (!t) {
        t = malloc(sizeof *t);
        cr_assert_not_null(t);
        slot_tags_build(t);
    }
    return t;
}

static struct script_ctx ctx_of(bool sharded)
{
    return (struct script_ctx){
        .prefix = PREFIX, .prefix_len = strlen(PREFIX), .tags = tags(), .sharded = sharded};
}

static redisContext *connect_redis(void)
{
    redisContext *c = redisConnectUnix(H.redis_sock);
    cr_assert(c && !c->err, "connect: %s", c ? c->errstr : "no memory");
    return c;
}

/* Starts the redis-server and connects to it. */
static void start(void)
{
    h_redis_start();
    C = connect_redis();
}

static redisReply *cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(C, fmt, ap);
    va_end(ap);
    cr_assert_not_null(r, "no reply: %s", C->errstr);
    return r;
}

/* A command whose reply is not read. */
static void cmdf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(C, fmt, ap);
    va_end(ap);
    cr_assert_not_null(r, "no reply: %s", C->errstr);
    freeReplyObject(r);
}

static long long cmd_int(const char *fmt, const char *key)
{
    redisReply *r = cmd(fmt, key);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s %s: type %d", fmt, key, r->type);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* GET key into buf ("" when there is none). */
static const char *get(const char *key, char *buf, size_t cap)
{
    redisReply *r = cmd("GET %s", key);
    snprintf(buf, cap, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return buf;
}

static unsigned long long get_num(const char *key)
{
    char buf[64];
    return strtoull(get(key, buf, sizeof buf), NULL, 10);
}

/* The keys of name: the lock key, the slot's mark, the waiting-hosts
 * record, the release channel. */
struct names {
    char key[SCRIPT_KEY_MAX + 1];
    char hw[CONFIG_PREFIX_MAX + FENCE_HW_EXTRA + 1];
    char waiting[SCRIPT_SIDE_KEY_MAX];
    char channel[SCRIPT_SIDE_KEY_MAX];
};

static struct names names_of(const char *name)
{
    struct names n;
    size_t p = strlen(PREFIX), len = p + strlen(name);
    snprintf(n.key, sizeof n.key, "%s%s", PREFIX, name);
    fence_hw_key(tags(), n.key, len, p, n.hw);
    waiting_key(n.key, len, p, n.waiting);
    release_channel(n.key, len, p, n.channel);
    return n;
}

/* Runs script s for req with ctx on C: the decoded reply, which must be an
 * answer (no error), and the lookup's holder into h. */
static struct script_result run_ctx(const struct script_ctx *ctx, enum script_id s,
                                    const struct backend_req *req, struct backend_holder *h)
{
    struct script_args a;
    cr_assert_eq(script_command(s, NULL, ctx, req, &a), 0);
    cr_assert_str_eq(a.v[0], "EVAL");
    redisReply *rep = redisCommandArgv(C, a.n, a.v, a.len);
    cr_assert_not_null(rep, "%s: no reply: %s", script_table[s].what, C->errstr);
    struct script_result r;
    script_decode(s, rep, &r, h);
    cr_assert_eq(r.err, 0, "%s: error %d: %s", script_table[s].what, r.err,
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "(not an error reply)");
    freeReplyObject(rep);
    r.text = NULL;
    return r;
}

static struct script_result run(enum script_id s, struct backend_req req)
{
    struct script_ctx ctx = ctx_of(false);
    return run_ctx(&ctx, s, &req, NULL);
}

static struct backend_holder lookup(const char *name)
{
    struct script_ctx ctx = ctx_of(false);
    struct backend_req req = {.name = name, .len = strlen(name)};
    struct backend_holder h;
    struct script_result r = run_ctx(&ctx, SCRIPT_LOOKUP, &req, &h);
    cr_assert_eq(r.kind, SR_HOLDER);
    return h;
}

/* An acquire of name with token: a waiting one (the record entry of agent
 * `waiter` lasts want_ms) unless want_ms is 0. */
static struct backend_req acq(const char *name, const char *token, const char *waiter,
                              uint32_t want_ms)
{
    return (struct backend_req){.name = name,
                                .len = strlen(name),
                                .token = token,
                                .holder = REC,
                                .ttl_ms = 10000,
                                .waiter_id = waiter,
                                .want_ms = want_ms};
}

static struct backend_req tok(const char *name, const char *token)
{
    return (struct backend_req){
        .name = name, .len = strlen(name), .token = token, .ttl_ms = 20000, .notify = true};
}

/* ---- acquire ---- */

ITEST(scripts, acquire_free_then_taken)
{
    start();
    struct names n = names_of("job");
    struct backend_req a = acq("job", TOK_A, NULL, 0);
    a.block = 5;
    struct script_result r = run(SCRIPT_ACQUIRE, a);
    cr_assert_eq(r.kind, SR_RESULT);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert(r.wrote);
    cr_assert_gt(r.fence, 0);
    char v[256];
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_A " " REC);
    long long pttl = cmd_int("PTTL %s", n.key);
    cr_assert(pttl > 0 && pttl <= 10000, "PTTL %lld", pttl);
    /* The token is the server's clock in microseconds (no floor), and the
     * slot's mark covers the block reserved for handoffs. */
    redisReply *t = cmd("TIME");
    unsigned long long us = strtoull(t->element[0]->str, NULL, 10) * 1000000ull;
    freeReplyObject(t);
    cr_assert(r.fence <= us + 1000000 && r.fence + 60000000ull > us, "token %llu, clock %llu",
              (unsigned long long)r.fence, us);
    cr_assert_eq(get_num(n.hw), r.fence + 5);

    struct backend_req b = acq("job", TOK_B, NULL, 0);
    r = run(SCRIPT_ACQUIRE, b);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert(!r.wrote);
    cr_assert(r.pttl_ms > 0 && r.pttl_ms <= 10000, "PTTL %lld", r.pttl_ms);
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_A " " REC, "a taken key is left alone");
    /* A try-once acquire joins no record. */
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0);
}

ITEST(scripts, acquire_with_floor_and_block)
{
    start();
    struct names n = names_of("job");
    struct backend_req a = acq("job", TOK_A, NULL, 0);
    a.floor = 1000;
    a.block = 3;
    struct script_result r = run(SCRIPT_ACQUIRE, a);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(r.fence, 1000, "the floor is the token above a lower mark");
    cr_assert_eq(get_num(n.hw), 1003);
    cr_assert_eq(
        run(SCRIPT_RELEASE, (struct backend_req){.name = "job", .len = 3, .token = TOK_A}).outcome,
        BACKEND_DONE);
    /* A floor under the mark: the token goes past the block. */
    a.token = TOK_B;
    a.floor = 10;
    a.block = 0;
    r = run(SCRIPT_ACQUIRE, a);
    cr_assert_eq(r.fence, 1004);
    cr_assert_eq(get_num(n.hw), 1004);
    /* A foreign mark that is no whole number reads as 0. */
    cmdf("SET %s 1e30", n.hw);
    run(SCRIPT_RELEASE, (struct backend_req){.name = "job", .len = 3, .token = TOK_B});
    a.token = TOK_C;
    a.floor = 77;
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).fence, 77);
}

ITEST(scripts, acquire_joins_the_waiting_hosts_record)
{
    start();
    struct names n = names_of("job");
    /* Host A holds; host B waits and joins the record. */
    struct backend_req a = acq("job", TOK_A, "00000000000000aa", 1000);
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0, "a grant leaves no entry");
    struct backend_req b = acq("job", TOK_B, "00000000000000bb", 1000);
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_TAKEN);
    redisReply *e = cmd("HGET %s 00000000000000bb", n.waiting);
    cr_assert_eq(e->type, REDIS_REPLY_STRING);
    unsigned long long since, exp;
    cr_assert_eq(sscanf(e->str, "%llu %llu", &since, &exp), 2, "entry %s", e->str);
    freeReplyObject(e);
    long long pttl = cmd_int("PTTL %s", n.waiting);
    cr_assert(pttl > 0 && pttl <= 1000, "the record lapses with its entry: PTTL %lld", pttl);
    /* A's release; A's next acquire finds the lock free but B's turn: taken
     * with no PTTL, and A joins behind B. */
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    struct script_result r = run(SCRIPT_ACQUIRE, a);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 0);
    char entry_a[64];
    redisReply *ea = cmd("HGET %s 00000000000000aa", n.waiting);
    cr_assert_eq(ea->type, REDIS_REPLY_STRING);
    snprintf(entry_a, sizeof entry_a, "%s", ea->str);
    freeReplyObject(ea);
    /* A try-once acquire neither takes B's turn nor joins. */
    struct backend_req c = acq("job", TOK_C, "00000000000000cc", 0);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_TAKEN);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 0);
    /* B's turn: granted, and its entry leaves. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    cr_assert_eq(cmd_int("HLEN %s", n.waiting), 1);
    /* A joins again (B holds): its entry keeps the time it first joined. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_TAKEN);
    ea = cmd("HGET %s 00000000000000aa", n.waiting);
    cr_assert_eq(ea->type, REDIS_REPLY_STRING);
    cr_assert_eq(strtoull(ea->str, NULL, 10), strtoull(entry_a, NULL, 10), "%s then %s", entry_a,
                 ea->str);
    freeReplyObject(ea);
    /* An entry that claims to last longer than the most any agent writes is
     * dropped by the next acquire that reads the record. */
    cmdf("HSET %s %s %s", n.waiting, "00000000000000dd", "1 99999999999999");
    run(SCRIPT_ACQUIRE, a);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000dd", n.waiting), 0);
}

/* ---- renew, release, fence ---- */

ITEST(scripts, renew_ours_and_not_ours)
{
    start();
    struct names n = names_of("job");
    struct backend_req a = acq("job", TOK_A, NULL, 0);
    run(SCRIPT_ACQUIRE, a);
    struct script_result r = run(SCRIPT_RENEW, tok("job", TOK_A));
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert(r.wrote);
    cr_assert_gt(cmd_int("PTTL %s", n.key), 10000, "extended to the renewal's TTL");
    r = run(SCRIPT_RENEW, tok("job", TOK_B));
    cr_assert_eq(r.outcome, BACKEND_NOT_OURS);
    cr_assert(!r.wrote);
    /* The bare token of earlier versions is ours too. */
    cmdf("SET %s %s PX 5000", n.key, TOK_A);
    cr_assert_eq(run(SCRIPT_RENEW, tok("job", TOK_A)).outcome, BACKEND_DONE);
    /* A foreign value that merely starts with the token is not. */
    cmdf("SET %s %sx PX 5000", n.key, TOK_A);
    cr_assert_eq(run(SCRIPT_RENEW, tok("job", TOK_A)).outcome, BACKEND_NOT_OURS);
    cmdf("DEL %s", n.key);
    cr_assert_eq(run(SCRIPT_RENEW, tok("job", TOK_A)).outcome, BACKEND_NOT_OURS);
}

/* A second connection subscribed to channel (sharded: SSUBSCRIBE), whose
 * reads give up after the event deadline. */
static redisContext *subscriber(const char *channel, bool sharded)
{
    redisContext *s = connect_redis();
    int ms = h_scaled_ms(H_EVENT_MS);
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    cr_assert_eq(redisSetTimeout(s, tv), REDIS_OK);
    redisReply *r = redisCommand(s, sharded ? "SSUBSCRIBE %s" : "SUBSCRIBE %s", channel);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY, "subscribe");
    freeReplyObject(r);
    return s;
}

/* The next message on s: its payload into buf. */
static const char *next_message(redisContext *s, char *buf, size_t cap)
{
    void *v = NULL;
    cr_assert_eq(redisGetReply(s, &v), REDIS_OK, "no message: %s", s->errstr);
    redisReply *r = v;
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    snprintf(buf, cap, "%s", r->element[2]->str);
    freeReplyObject(r);
    return buf;
}

ITEST(scripts, release_ours_and_the_notice)
{
    start();
    struct names n = names_of("job");
    redisContext *sub = subscriber(n.channel, false);
    char m[64];
    /* Nobody waits (no record): deleted, no notice. The marker published
     * after it is the first message the subscriber gets. */
    run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0));
    struct script_result r = run(SCRIPT_RELEASE, tok("job", TOK_A));
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cmdf("PUBLISH %s marker1", n.channel);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "marker1");
    /* Another host waits: the release publishes the bare name. */
    run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0));
    struct backend_req b = acq("job", TOK_B, "00000000000000bb", 2000);
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_TAKEN);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    /* Not ours: the key stays, no notice; without notify (the clean-up
     * after a missed acquire): deleted, no notice. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_DONE);
    cmdf("HSET %s %s %s", n.waiting, "00000000000000cc", "1 1"); /* a record again */
    cmdf("PEXPIRE %s 5000", n.waiting);
    r = run(SCRIPT_RELEASE, tok("job", TOK_A));
    cr_assert_eq(r.outcome, BACKEND_NOT_OURS);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 1);
    struct backend_req quiet = tok("job", TOK_B);
    quiet.notify = false;
    cr_assert_eq(run(SCRIPT_RELEASE, quiet).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cmdf("PUBLISH %s marker2", n.channel);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "marker2");
    redisFree(sub);
}

ITEST(scripts, release_on_redis_cluster_names_the_lock_key_alone)
{
    start();
    struct names n = names_of("job");
    struct script_ctx ctx = ctx_of(true);
    struct backend_req req = tok("job", TOK_A);
    struct script_args a;
    cr_assert_eq(script_command(SCRIPT_RELEASE, "0123", &ctx, &req, &a), 0);
    cr_assert_str_eq(a.v[0], "EVALSHA");
    cr_assert_str_eq(a.v[2], "1");
    cr_assert_str_eq(a.v[3], n.key);
    /* SPUBLISH whenever asked, record or not. */
    redisContext *sub = subscriber(n.channel, true);
    run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0));
    cr_assert_eq(run_ctx(&ctx, SCRIPT_RELEASE, &req, NULL).outcome, BACKEND_DONE);
    char m[64];
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    redisFree(sub);
}

ITEST(scripts, fence_raises_the_mark_while_ours)
{
    start();
    struct names n = names_of("job");
    struct backend_req a = acq("job", TOK_A, NULL, 0);
    a.floor = 500;
    run(SCRIPT_ACQUIRE, a);
    struct backend_req f = tok("job", TOK_A);
    f.fence = 900;
    struct script_result r = run(SCRIPT_FENCE, f);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(get_num(n.hw), 900);
    f.fence = 600; /* below the mark: stays */
    cr_assert_eq(run(SCRIPT_FENCE, f).outcome, BACKEND_DONE);
    cr_assert_eq(get_num(n.hw), 900);
    f.token = TOK_B;
    f.fence = 2000;
    cr_assert_eq(run(SCRIPT_FENCE, f).outcome, BACKEND_NOT_OURS);
    cr_assert_eq(get_num(n.hw), 900);
}

/* ---- lookup ---- */

ITEST(scripts, lookup_of_each_kind_of_value)
{
    start();
    struct names n = names_of("job");
    struct backend_holder h = lookup("job");
    cr_assert_str_eq(h.value, "");
    cr_assert_eq(h.nodes_holding, 0);
    cr_assert_eq(h.pttl, -2);
    run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0));
    h = lookup("job");
    cr_assert_str_eq(h.value, TOK_A);
    cr_assert_str_eq(h.record, TOK_A " " REC);
    cr_assert(h.pttl > 0 && h.pttl <= 10000);
    cr_assert_eq(h.nodes_holding, 1);
    cr_assert_eq(h.nodes, 1);
    /* A foreign client's value, shown whole. */
    cmdf("SET %s foreign-value PX 5000", n.key);
    h = lookup("job");
    cr_assert_str_eq(h.value, "foreign-value");
    cr_assert_str_eq(h.record, "");
    /* The bare token and the separate record of earlier versions. */
    char old[SCRIPT_SIDE_KEY_MAX];
    holder_key(n.key, strlen(n.key), strlen(PREFIX), old);
    cmdf("SET %s %s PX 5000", n.key, TOK_B);
    cmdf("SET %s %s PX 5000", old, TOK_B " host-b 7 0 old");
    h = lookup("job");
    cr_assert_str_eq(h.value, TOK_B);
    cr_assert_str_eq(h.record, TOK_B " host-b 7 0 old");
}

/* ---- EVALSHA ---- */

ITEST(scripts, evalsha_and_noscript)
{
    start();
    struct script_ctx ctx = ctx_of(false);
    struct backend_req req = tok("job", TOK_A);
    struct script_args a;
    cr_assert_eq(
        script_command(SCRIPT_RENEW, "0000000000000000000000000000000000000000", &ctx, &req, &a),
        0);
    redisReply *rep = redisCommandArgv(C, a.n, a.v, a.len);
    struct script_result r;
    script_decode(SCRIPT_RENEW, rep, &r, NULL);
    cr_assert_eq(r.kind, SR_NOSCRIPT);
    cr_assert_neq(r.err, 0);
    freeReplyObject(rep);
    for (int s = 0; s < SCRIPT_COUNT; s++) {
        rep = cmd("SCRIPT LOAD %s", script_table[s].src);
        cr_assert_eq(rep->type, REDIS_REPLY_STRING, "%s: %s", script_table[s].what, rep->str);
        char sha[41];
        snprintf(sha, sizeof sha, "%s", rep->str);
        freeReplyObject(rep);
        struct backend_req q = acq("job", TOK_A, NULL, 0);
        cr_assert_eq(script_command(s, sha, &ctx, &q, &a), 0);
        cr_assert_str_eq(a.v[0], "EVALSHA");
        cr_assert_eq(atoi(a.v[2]), script_table[s].keys);
        rep = redisCommandArgv(C, a.n, a.v, a.len);
        script_decode(s, rep, &r, NULL);
        cr_assert_eq(r.err, 0, "%s", script_table[s].what);
        freeReplyObject(rep);
    }
}

/* ---- a key of another type ---- */

/* A hash or a list at the lock key (a foreign client's, or a counted kind's
 * hash) is a key someone else holds: taken, not ours; never an error reply,
 * which would cost a waiter its place or a holder its lease. */
ITEST(scripts, a_key_of_another_type_is_taken_never_an_error)
{
    start();
    struct names n = names_of("job");
    const char *fill[] = {"HSET %s field value", "RPUSH %s item", "SADD %s member"};
    for (size_t i = 0; i < sizeof fill / sizeof *fill; i++) {
        cmdf("DEL %s", n.key);
        cmdf(fill[i], n.key);
        cmdf("PEXPIRE %s 7000", n.key);
        struct script_result r = run(SCRIPT_ACQUIRE, acq("job", TOK_A, "00000000000000aa", 1000));
        cr_assert_eq(r.outcome, BACKEND_TAKEN, "%s", fill[i]);
        cr_assert(r.pttl_ms > 0 && r.pttl_ms <= 7000, "PTTL %lld", r.pttl_ms);
        cr_assert_eq(cmd_int("HEXISTS %s 00000000000000aa", n.waiting), 1, "the waiter joined");
        cr_assert_eq(run(SCRIPT_RENEW, tok("job", TOK_A)).outcome, BACKEND_NOT_OURS);
        cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_NOT_OURS);
        struct backend_req f = tok("job", TOK_A);
        f.fence = 5;
        cr_assert_eq(run(SCRIPT_FENCE, f).outcome, BACKEND_NOT_OURS);
        cr_assert_eq(cmd_int("EXISTS %s", n.key), 1, "left alone");
        struct backend_holder h = lookup("job");
        cr_assert_str_eq(h.value, "");
        cr_assert(h.pttl > 0 && h.pttl <= 7000);
    }
    /* Without a TTL: taken, with no PTTL to wait for. */
    cmdf("PERSIST %s", n.key);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0)).pttl_ms, 0);
}
