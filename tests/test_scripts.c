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

/* The server's clock (TIME) in microseconds. */
static unsigned long long server_us(void)
{
    redisReply *t = cmd("TIME");
    unsigned long long us = strtoull(t->element[0]->str, NULL, 10) * 1000000ull +
                            strtoull(t->element[1]->str, NULL, 10);
    freeReplyObject(t);
    return us;
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
                                    const struct backend_req *req, uint32_t permits,
                                    struct script_holders *h)
{
    struct script_args a;
    cr_assert_eq(script_command(s, NULL, ctx, req, permits, &a), 0);
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
    return run_ctx(&ctx, s, &req, 0, NULL);
}

/* What a lookup of name finds (a counted key's kind and permits in *hs,
 * when hs is not NULL). */
static struct backend_holder lookup_all(const char *name, struct script_holders *hs)
{
    struct script_ctx ctx = ctx_of(false);
    struct backend_req req = {.name = name, .len = strlen(name)};
    struct script_holders h;
    struct script_result r = run_ctx(&ctx, SCRIPT_LOOKUP, &req, 0, &h);
    cr_assert_eq(r.kind, SR_HOLDER);
    if (hs)
        *hs = h;
    return h.holder;
}

static struct backend_holder lookup(const char *name)
{
    return lookup_all(name, NULL);
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
    unsigned long long us0 = server_us();
    struct script_result r = run(SCRIPT_ACQUIRE, a);
    unsigned long long us1 = server_us();
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
    cr_assert(r.fence >= us0 && r.fence <= us1, "token %llu, clock %llu to %llu",
              (unsigned long long)r.fence, us0, us1);
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
    cr_assert_eq(get_num(n.hw), 77, "and is overwritten");
    /* A mark of another type reads as 0 too, and is overwritten by a
     * string; a mark one below the floor leaves the floor the token. */
    run(SCRIPT_RELEASE, (struct backend_req){.name = "job", .len = 3, .token = TOK_C});
    cmdf("DEL %s", n.hw);
    cmdf("HSET %s f v", n.hw);
    a.token = TOK_A;
    a.floor = 90;
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).fence, 90);
    cr_assert_eq(get_num(n.hw), 90);
    run(SCRIPT_RELEASE, (struct backend_req){.name = "job", .len = 3, .token = TOK_A});
    a.token = TOK_B;
    a.floor = 91;
    a.block = 2;
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).fence, 91);
    cr_assert_eq(get_num(n.hw), 93);
    /* A mark equal to the floor: the token is one above it (the mark is the
     * last token handed over), and the mark goes to that token plus the block. */
    run(SCRIPT_RELEASE, (struct backend_req){.name = "job", .len = 3, .token = TOK_B});
    cmdf("SET %s 1004", n.hw);
    a.token = TOK_C;
    a.floor = 1004;
    a.block = 3;
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).fence, 1005);
    cr_assert_eq(get_num(n.hw), 1008);
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
    cr_assert_eq(script_command(SCRIPT_RELEASE, "0123", &ctx, &req, 0, &a), 0);
    cr_assert_str_eq(a.v[0], "EVALSHA");
    cr_assert_str_eq(a.v[2], "1");
    cr_assert_str_eq(a.v[3], n.key);
    /* SPUBLISH whenever asked, record or not. */
    redisContext *sub = subscriber(n.channel, true);
    run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0));
    cr_assert_eq(run_ctx(&ctx, SCRIPT_RELEASE, &req, 0, NULL).outcome, BACKEND_DONE);
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
        script_command(SCRIPT_RENEW, "0000000000000000000000000000000000000000", &ctx, &req, 0, &a),
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
        cr_assert_eq(script_command(s, sha, &ctx, &q, 2, &a), 0);
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
        if (i == 0) {
            /* A hash: shown as Redisson's format, its field and count. */
            cr_assert_str_eq(h.kind, "redisson");
            cr_assert_eq(h.permits, 1);
            cr_assert_str_eq(h.permit[0].record, "field");
            cr_assert_str_eq(h.permit[0].token, "", "no dlock token");
        } else {
            cr_assert_str_eq(h.value, "");
        }
        cr_assert(h.pttl > 0 && h.pttl <= 7000);
    }
    /* Without a TTL: taken, with no PTTL to wait for. */
    cmdf("PERSIST %s", n.key);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0)).pttl_ms, 0);
}

/* ---- the counted kinds ---- */

/* The token of permit i: 32 hex characters (valid until the next call with
 * the same i % 64). */
static const char *tk(unsigned i)
{
    static char t[64][33];
    snprintf(t[i % 64], sizeof t[i % 64], "%032x", i + 1);
    return t[i % 64];
}

/* A counted acquire of name (permits 0: the shared kind, N: a semaphore of
 * N) with the token of permit i, for ttl_ms; a waiting one for want_ms as
 * agent `waiter` unless want_ms is 0. */
static struct script_result counted(const char *name, unsigned i, uint32_t permits, uint32_t ttl_ms,
                                    const char *waiter, uint32_t want_ms)
{
    struct backend_req req = acq(name, tk(i), waiter, want_ms);
    req.ttl_ms = ttl_ms;
    struct script_ctx ctx = ctx_of(false);
    return run_ctx(&ctx, SCRIPT_ACQUIRE_COUNTED, &req, permits, NULL);
}

static enum backend_outcome counted_op(enum script_id s, const char *name, unsigned i)
{
    return run(s, tok(name, tk(i))).outcome;
}

/* The expiry (server time in ms) stored with permit i of the counted key. */
static long long permit_expiry(const char *key, unsigned i)
{
    redisReply *r = cmd("HGET %s %s", key, tk(i));
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "no permit %u", i);
    long long e = strtoll(r->str, NULL, 10);
    cr_assert(strstr(r->str, " " REC), "permit %u: %s", i, r->str);
    freeReplyObject(r);
    return e;
}

static long long server_ms(void)
{
    redisReply *t = cmd("TIME");
    long long ms =
        strtoll(t->element[0]->str, NULL, 10) * 1000 + strtoll(t->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(t);
    return ms;
}

/* The key's expiry is `last`, the latest permit's, as a script set it
 * that ran between the server times t0 and t1: the script sets the TTL
 * from the clock it reads (TIME), Redis counts it from the script's start,
 * so the expiry may come as much before `last` as the script took; and
 * both are microseconds cut to milliseconds, which may differ by one. */
static void expires_with(const char *key, long long last, long long t0, long long t1)
{
    long long at = cmd_int("PEXPIRETIME %s", key);
    cr_assert(at <= last + 1 && at >= last - (t1 - t0) - 1,
              "%s expires at %lld, its latest permit at %lld", key, at, last);
}

/* Makes permit i lapse now, as if its holder had stopped renewing it long
 * ago: its stored expiry goes into the past. */
static void lapse(const char *key, unsigned i)
{
    cmdf("HSET %s %s %s", key, tk(i), "1 " REC);
}

ITEST(scripts, shared_permits_in_one_hash)
{
    start();
    struct names n = names_of("job");
    uint32_t ttl[3] = {10000, 20000, 5000};
    uint64_t last = 0;
    long long t0 = 0, t1 = 0;
    for (unsigned i = 0; i < 3; i++) {
        long long before = t0 = server_ms();
        struct script_result r = counted("job", i, 0, ttl[i], NULL, 0);
        t1 = server_ms();
        cr_assert_eq(r.outcome, BACKEND_DONE, "permit %u", i);
        cr_assert(r.wrote && !r.mismatch);
        cr_assert_gt(r.fence, last, "every grant's token is above the earlier ones");
        last = r.fence;
        long long e = permit_expiry(n.key, i);
        cr_assert(e >= before + ttl[i] && e <= t1 + ttl[i], "permit %u expires at %lld", i, e);
    }
    redisReply *k = cmd("HGET %s %s", n.key, SCRIPT_KIND_FIELD);
    cr_assert_str_eq(k->str, "shared");
    freeReplyObject(k);
    cr_assert_eq(cmd_int("HLEN %s", n.key), 4);
    /* The key expires with its latest permit. */
    expires_with(n.key, permit_expiry(n.key, 1), t0, t1);
    t0 = server_ms();
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 1), BACKEND_DONE);
    t1 = server_ms();
    expires_with(n.key, permit_expiry(n.key, 0), t0, t1);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 1), BACKEND_NOT_OURS);
    t0 = server_ms();
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    t1 = server_ms();
    expires_with(n.key, permit_expiry(n.key, 2), t0, t1);
    /* Nothing left after the last release. */
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 2), BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
}

ITEST(scripts, semaphore_limit_and_turn)
{
    start();
    struct names n = names_of("job");
    cr_assert_eq(counted("job", 0, 2, 10000, "00000000000000aa", 1000).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 2, 8000, "00000000000000bb", 1000).outcome, BACKEND_DONE);
    /* The limit: taken, with the PTTL of the permit that lapses first. */
    struct script_result r = counted("job", 2, 2, 10000, "00000000000000cc", 1000);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert(!r.mismatch && !r.wrote);
    cr_assert(r.pttl_ms > 0 && r.pttl_ms <= 8000, "PTTL %lld", r.pttl_ms);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 1, "the waiter joined");
    redisReply *k = cmd("HGET %s %s", n.key, SCRIPT_KIND_FIELD);
    cr_assert_str_eq(k->str, "sem:2");
    freeReplyObject(k);
    cr_assert_eq(cmd_int("HLEN %s", n.key), 3, "no permit written for the refused acquire");
    /* A place frees; a host that did not wait before finds it another
     * host's turn (the record's FIFO order), then the waiter gets it. */
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    r = counted("job", 3, 2, 10000, "00000000000000dd", 1000);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 0);
    cr_assert_eq(counted("job", 2, 2, 10000, "00000000000000cc", 1000).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 0, "a grant leaves the record");
    /* Full again. */
    r = counted("job", 3, 2, 10000, "00000000000000dd", 1000);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_gt(r.pttl_ms, 0);
    /* A semaphore of one is a mutex. */
    cr_assert_eq(counted("one", 0, 1, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("one", 1, 1, 10000, NULL, 0).outcome, BACKEND_TAKEN);
}

ITEST(scripts, another_kind_or_another_limit_is_a_mismatch)
{
    start();
    struct names n = names_of("job");
    cr_assert_eq(counted("job", 0, 2, 10000, NULL, 0).outcome, BACKEND_DONE);
    struct script_result r = counted("job", 1, 3, 10000, "00000000000000bb", 1000);
    cr_assert(r.mismatch);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_str_eq(r.held, "sem:2");
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0, "a mismatch joins nothing");
    r = counted("job", 1, 0, 10000, "00000000000000bb", 1000);
    cr_assert(r.mismatch);
    cr_assert_str_eq(r.held, "sem:2");
    cr_assert_eq(cmd_int("HLEN %s", n.key), 2, "nothing written");
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    /* Free again: another kind may take the name. */
    cr_assert_eq(counted("job", 2, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    r = counted("job", 3, 2, 10000, NULL, 0);
    cr_assert(r.mismatch);
    cr_assert_str_eq(r.held, "shared");
    /* A kind whose permits all lapsed holds nothing: no mismatch. */
    lapse(n.key, 2);
    r = counted("job", 3, 5, 10000, NULL, 0);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert(!r.mismatch);
    redisReply *k = cmd("HGET %s %s", n.key, SCRIPT_KIND_FIELD);
    cr_assert_str_eq(k->str, "sem:5");
    freeReplyObject(k);
    cr_assert_eq(cmd_int("HLEN %s", n.key), 2, "the lapsed permit went");
}

/* Waits (with the event deadline) until key is gone by itself. */
static void wait_key_gone(const char *key)
{
    int64_t end = h_deadline(H_EVENT_MS);
    while (cmd_int("EXISTS %s", key)) {
        cr_assert(h_now_ms() < end, "%s is still there", key);
        h_sleep_ms(5);
    }
}

ITEST(scripts, footprint_and_lapsed_permits)
{
    start();
    struct names n = names_of("job");
    /* A lapsed permit frees its place for the next acquire, which drops it. */
    cr_assert_eq(counted("job", 0, 1, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 1, 10000, NULL, 0).outcome, BACKEND_TAKEN);
    lapse(n.key, 0);
    cr_assert_eq(counted("job", 1, 1, 10000, NULL, 0).outcome, BACKEND_DONE);
    redisReply *gone = cmd("HEXISTS %s %s", n.key, tk(0));
    cr_assert_eq(gone->integer, 0);
    freeReplyObject(gone);
    /* The lapsed holder is not renewed, nor released. */
    cr_assert_eq(counted_op(SCRIPT_RENEW_COUNTED, "job", 0), BACKEND_NOT_OURS);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_NOT_OURS);
    /* A waiter joined the record and the readers' marks: after the last
     * release the lock key is gone at once, and the record and the marks
     * lapse by their TTL (at most BACKEND_WAIT_ENTRY_MAX_MS). */
    cr_assert_eq(counted("job", 2, 1, 10000, "00000000000000cc", 2000).outcome, BACKEND_TAKEN);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 1), BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    long long rec = cmd_int("PTTL %s", n.waiting);
    cr_assert(rec > 0 && rec <= BACKEND_WAIT_ENTRY_MAX_MS, "record PTTL %lld", rec);
    /* Shared permits: the key goes by itself when every permit lapsed. */
    cr_assert_eq(counted("two", 0, 0, 60, "00000000000000dd", 1000).outcome, BACKEND_DONE);
    cr_assert_eq(counted("two", 1, 0, 40, NULL, 0).outcome, BACKEND_DONE);
    struct names t = names_of("two");
    cr_assert_leq(cmd_int("PTTL %s", t.key), 60);
    wait_key_gone(t.key);
    cr_assert_eq(cmd_int("EXISTS %s", t.waiting), 0);
    /* Of the keys, only the slots' fencing marks and the lapsing record. */
    redisReply *keys = cmd("KEYS %s*", PREFIX);
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        cr_assert(strcmp(k, n.waiting) == 0 || strcmp(k, n.hw) == 0 || strcmp(k, t.hw) == 0,
                  "left behind: %s", k);
    }
    freeReplyObject(keys);
}

ITEST(scripts, classic_clients_and_the_counted_kinds_exclude_each_other)
{
    start();
    struct names n = names_of("job");
    /* A counted key is held: SET NX fails, and so does the exclusive
     * acquire, which joins the record as a writer (no reader's mark). */
    cr_assert_eq(counted("job", 0, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(h_redis_set_nx_px(n.key, "othertoken", 5000), 0);
    struct names r = names_of("job");
    char readers[SCRIPT_SIDE_KEY_MAX];
    readers_key(r.key, strlen(r.key), strlen(PREFIX), readers);
    struct script_result x = run(SCRIPT_ACQUIRE, acq("job", TOK_A, "00000000000000ee", 1000));
    cr_assert_eq(x.outcome, BACKEND_TAKEN);
    cr_assert(x.pttl_ms > 0 && x.pttl_ms <= 10000);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000ee", n.waiting), 1);
    cr_assert_eq(cmd_int("EXISTS %s", readers), 0);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    cmdf("DEL %s", n.waiting);
    /* A classic client holds: the counted acquires are taken (not a
     * mismatch), with its PTTL, and join; the counted renewal, release and
     * fence find no permit of theirs. */
    cr_assert_eq(h_redis_set_nx_px(n.key, "othertoken", 5000), 1);
    for (uint32_t permits = 0; permits < 3; permits += 2) {
        x = counted("job", 1, permits, 10000, "00000000000000bb", 1000);
        cr_assert_eq(x.outcome, BACKEND_TAKEN);
        cr_assert(!x.mismatch);
        cr_assert(x.pttl_ms > 0 && x.pttl_ms <= 5000, "PTTL %lld", x.pttl_ms);
        cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 1);
    }
    cr_assert_eq(counted_op(SCRIPT_RENEW_COUNTED, "job", 1), BACKEND_NOT_OURS);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 1), BACKEND_NOT_OURS);
    struct backend_req f = tok("job", tk(1));
    f.fence = 5;
    cr_assert_eq(run(SCRIPT_FENCE_COUNTED, f).outcome, BACKEND_NOT_OURS);
    char v[64];
    cr_assert_str_eq(get(n.key, v, sizeof v), "othertoken");
    /* A foreign hash (no kind field), a list: taken, never an error. */
    const char *fill[] = {"HSET %s field value", "RPUSH %s item"};
    for (size_t i = 0; i < 2; i++) {
        cmdf("DEL %s", n.key);
        cmdf(fill[i], n.key);
        x = counted("job", 1, 0, 10000, NULL, 0);
        cr_assert_eq(x.outcome, BACKEND_TAKEN, "%s", fill[i]);
        cr_assert(!x.mismatch);
        cr_assert_eq(x.pttl_ms, 0, "no TTL to wait for");
        cr_assert_eq(counted_op(SCRIPT_RENEW_COUNTED, "job", 1), BACKEND_NOT_OURS);
        cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 1), BACKEND_NOT_OURS);
        cr_assert_eq(cmd_int("EXISTS %s", n.key), 1, "left alone");
    }
}

ITEST(scripts, fencing_order_across_kinds)
{
    start();
    struct names n = names_of("job");
    uint64_t last = 0;
    /* exclusive (with a block), shared, shared, semaphore, exclusive: every
     * grant's token is above every earlier grant's and reserved block. */
    struct backend_req a = acq("job", TOK_A, NULL, 0);
    a.block = 3;
    struct script_result r = run(SCRIPT_ACQUIRE, a);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    last = r.fence + 3;
    cr_assert_eq(get_num(n.hw), last);
    run(SCRIPT_RELEASE, tok("job", TOK_A));
    for (unsigned i = 0; i < 2; i++) {
        struct backend_req s = acq("job", tk(i), NULL, 0);
        s.block = i; /* the shared kind's handoffs reserve tokens too */
        struct script_ctx ctx = ctx_of(false);
        r = run_ctx(&ctx, SCRIPT_ACQUIRE_COUNTED, &s, 0, NULL);
        cr_assert_eq(r.outcome, BACKEND_DONE);
        cr_assert_gt(r.fence, last);
        last = r.fence + i;
        cr_assert_eq(get_num(n.hw), last);
    }
    counted_op(SCRIPT_RELEASE_COUNTED, "job", 0);
    counted_op(SCRIPT_RELEASE_COUNTED, "job", 1);
    r = counted("job", 2, 4, 10000, NULL, 0);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_gt(r.fence, last);
    last = r.fence;
    /* A floor above the mark (quorum mode's clock) is the token itself. */
    struct backend_req s = acq("job", tk(3), NULL, 0);
    s.floor = last + 1000;
    struct script_ctx ctx = ctx_of(false);
    r = run_ctx(&ctx, SCRIPT_ACQUIRE_COUNTED, &s, 4, NULL);
    cr_assert_eq(r.fence, last + 1000);
    last = r.fence;
    counted_op(SCRIPT_RELEASE_COUNTED, "job", 2);
    counted_op(SCRIPT_RELEASE_COUNTED, "job", 3);
    r = run(SCRIPT_ACQUIRE, acq("job", TOK_B, NULL, 0));
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_gt(r.fence, last);
}

/* The keep-alive key of agent id under PREFIX. */
static void ka_of(const char *id, char *out)
{
    keepalive_key(PREFIX, strlen(PREFIX), id, out);
}

/* The expiry (server ms) in an entry or mark, and the rest after it. */
static unsigned long long entry_field(const char *hash, const char *id, int field, char *rest,
                                      size_t cap)
{
    redisReply *e = cmd("HGET %s %s", hash, id);
    cr_assert_eq(e->type, REDIS_REPLY_STRING, "no entry of %s in %s", id, hash);
    unsigned long long v[2] = {0, 0};
    int off = 0;
    int got = field ? sscanf(e->str, "%llu %llu %n", &v[0], &v[1], &off)
                    : sscanf(e->str, "%llu %n", &v[1], &off);
    cr_assert_geq(got, 1, "entry %s", e->str);
    if (rest)
        snprintf(rest, cap, "%s", e->str + off);
    freeReplyObject(e);
    return v[1];
}

ITEST(scripts, bound_entries_live_by_the_agents_keepalive_key)
{
    start();
    struct names n = names_of("job");
    char ka_b[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1], rest[256];
    ka_of("00000000000000bb", ka_b);
    cr_assert_str_eq(ka_b, PREFIX "alive 00000000000000bb");
    /* Host A holds; host B waits with an entry bound to its keep-alive key,
     * for as long as a bound entry lasts at most; host C waits after it,
     * with an entry of its own (an agent in Cluster or quorum mode). */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, "00000000000000aa", 1000)).outcome,
                 BACKEND_DONE);
    cmdf("SET %s 1 PX 3000", ka_b);
    struct backend_req b = acq("job", TOK_B, "00000000000000bb", BACKEND_WAIT_BOUND_MAX_MS + 5000);
    b.bound = true;
    unsigned long long ms0 = server_us() / 1000;
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_TAKEN);
    unsigned long long exp = entry_field(n.waiting, "00000000000000bb", 1, rest, sizeof rest);
    char carried[512];
    snprintf(carried, sizeof carried, "%s 10000 0 %s %s", ka_b, TOK_B, REC);
    cr_assert_str_eq(rest, carried,
                     "the entry names the key it is bound to, and carries the grant (TTL, "
                     "block, value)");
    cr_assert(exp > ms0 + BACKEND_WAIT_ENTRY_MAX_MS && exp <= ms0 + BACKEND_WAIT_BOUND_MAX_MS + 5,
              "a bound entry lasts up to the bound: %llu from %llu", exp, ms0);
    long long pttl = cmd_int("PTTL %s", n.waiting);
    cr_assert(pttl > BACKEND_WAIT_ENTRY_MAX_MS && pttl <= BACKEND_WAIT_BOUND_MAX_MS, "PTTL %lld",
              pttl);
    struct backend_req c = acq("job", TOK_C, "00000000000000cc", 1000);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_TAKEN);
    /* A's release (with no channel: no grant on release): while B's
     * keep-alive key lives, B's entry is live though no acquire of B
     * refreshed it, and C waits for B's turn. */
    struct backend_req rel_a = tok("job", TOK_A);
    rel_a.notify = false;
    cr_assert_eq(run(SCRIPT_RELEASE, rel_a).outcome, BACKEND_DONE);
    struct script_result r = run(SCRIPT_ACQUIRE, c);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 0, "B's turn");
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 1);
    /* B's agent dies: its keep-alive key lapses, and with it its entry,
     * which the next acquire drops: C's turn. */
    cmdf("DEL %s", ka_b);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_C)).outcome, BACKEND_DONE);

    /* A bound entry claiming more than the bound is dropped, live key or
     * not; so is one that names no key after its space. */
    cmdf("SET %s 1 PX 3000", ka_b);
    unsigned long long now = server_us() / 1000;
    char v[256];
    snprintf(v, sizeof v, "1 %llu %s", now + BACKEND_WAIT_BOUND_MAX_MS + 60000, ka_b);
    cmdf("HSET %s 00000000000000bb %s", n.waiting, v);
    snprintf(v, sizeof v, "2 %llu ", now + 2000);
    cmdf("HSET %s 00000000000000dd %s", n.waiting, v);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000dd", n.waiting), 0);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_C)).outcome, BACKEND_DONE);

    /* A live agent's bound entry whose removal was lost lapses at its own
     * expiry, keep-alive key or not. */
    snprintf(v, sizeof v, "1 %llu %s", now - 1, ka_b);
    cmdf("HSET %s 00000000000000bb %s", n.waiting, v);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_C)).outcome, BACKEND_DONE);
}

ITEST(scripts, entries_of_earlier_versions_are_read_beside_bound_ones)
{
    start();
    struct names n = names_of("job");
    char ka_b[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1], v[256];
    ka_of("00000000000000bb", ka_b);
    cmdf("SET %s 1 PX 3000", ka_b);
    unsigned long long now = server_us() / 1000;
    /* An earlier version's entries, "SINCE EXPIRES", one with SINCE in
     * milliseconds: read as before, the oldest first, whatever the form. */
    snprintf(v, sizeof v, "%llu %llu", now - 5, now + 2000); /* SINCE in ms */
    cmdf("HSET %s 00000000000000ee %s", n.waiting, v);
    snprintf(v, sizeof v, "%llu %llu %s", (now - 3) * 1000, now + 30000, ka_b);
    cmdf("HSET %s 00000000000000bb %s", n.waiting, v);
    cmdf("PEXPIRE %s 30000", n.waiting);
    struct backend_req c = acq("job", TOK_C, "00000000000000cc", 1000);
    c.bound = true; /* C binds its own entry: it still reads the others' */
    struct script_result r = run(SCRIPT_ACQUIRE, c);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 0, "E's turn");
    /* E's entry lapses (not refreshed): B's turn, whose key lives. */
    snprintf(v, sizeof v, "%llu %llu", now - 5, now - 1);
    cmdf("HSET %s 00000000000000ee %s", n.waiting, v);
    r = run(SCRIPT_ACQUIRE, c);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000ee", n.waiting), 0);
    /* An earlier version's entry that claims more than it may write is
     * dropped as before. */
    snprintf(v, sizeof v, "%llu %llu", now - 9, now + BACKEND_WAIT_ENTRY_MAX_MS + 10000);
    cmdf("HSET %s 00000000000000ee %s", n.waiting, v);
    run(SCRIPT_ACQUIRE, c);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000ee", n.waiting), 0);
    /* B's turn until its key goes. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_TAKEN);
    cmdf("DEL %s", ka_b);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_DONE);
}

/* ---- grant on release ---- */

/* A waiting acquire of agent id with token, its entry bound to the agent's
 * keep-alive key (which is set to seq for 3 s), reserving block tokens. */
static struct backend_req bound_waiter(const char *id, const char *token, const char *seq,
                                       uint32_t block)
{
    char ka[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1];
    ka_of(id, ka);
    cmdf("SET %s %s PX 3000", ka, seq);
    struct backend_req w = acq("job", token, id, 30000);
    w.bound = true;
    w.block = block;
    return w;
}

ITEST(scripts, release_grants_the_oldest_bound_entry_and_an_acquire_adopts_it)
{
    start();
    struct names n = names_of("job");
    redisContext *sub = subscriber(n.channel, false);
    char m[256], v[256], ka_b[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1];
    ka_of("00000000000000bb", ka_b);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, "00000000000000aa", 1000)).outcome,
                 BACKEND_DONE);
    /* B waits, then C: both bound, both carrying a grant. */
    struct backend_req b = bound_waiter("00000000000000bb", TOK_B, "41", 5);
    struct backend_req c = bound_waiter("00000000000000cc", TOK_C, "7", 0);
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_TAKEN);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_TAKEN);
    unsigned long long mark0 = get_num(n.hw);
    /* A's release hands the key to B, the oldest: B's value, for no longer
     * than B's keep-alive key lives; a token above the mark, which rises by
     * B's block; B's entry gone, C's left; the grant on the channel. */
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_B " " REC);
    long long pttl = cmd_int("PTTL %s", n.key), ka_pttl = cmd_int("PTTL %s", ka_b);
    cr_assert(pttl > 0 && pttl <= 3000 && pttl <= ka_pttl + 1,
              "the key lives no longer than B's keep-alive key: %lld, %lld", pttl, ka_pttl);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 1);
    next_message(sub, m, sizeof m);
    char to[32], token[64];
    unsigned long long fence, seq;
    unsigned ttl, block;
    cr_assert_eq(
        sscanf(m, "grant %31s %63s %llu %llu %u %u", to, token, &fence, &seq, &ttl, &block), 6,
        "the grant message: %s", m);
    cr_assert_str_eq(to, "00000000000000bb");
    cr_assert_str_eq(token, TOK_B);
    cr_assert_gt(fence, mark0, "the grant's token is above the slot's mark");
    cr_assert_eq(seq, 41, "the keep-alive's value when the release ran");
    cr_assert_eq(ttl, 10000);
    cr_assert_eq(block, 5);
    cr_assert_eq(get_num(n.hw), fence + 5, "the mark rises by the block");
    /* C finds it taken: by B now. */
    struct script_result r = run(SCRIPT_ACQUIRE, c);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_gt(r.pttl_ms, 0);
    /* B's agent missed the message: its acquire with the same token adopts
     * the key, for its whole TTL, with a new token above the release's. */
    r = run(SCRIPT_ACQUIRE, b);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_gt(r.fence, fence + 5, "adoption's token is above the release's block");
    cr_assert_gt(cmd_int("PTTL %s", n.key), 3000, "adopted for the whole TTL");
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_B " " REC);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    /* B's release hands it on to C. */
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_B)).outcome, BACKEND_DONE);
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_C " " REC);
    next_message(sub, m, sizeof m);
    cr_assert_eq(strncmp(m, "grant 00000000000000cc " TOK_C " ", 56), 0, "%s", m);
    /* Another host's token is no adoption: taken. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, bound_waiter("00000000000000bb", TOK_B, "42", 0)).outcome,
                 BACKEND_TAKEN);
    redisFree(sub);
}

ITEST(scripts, release_does_not_grant_a_reader_an_old_entry_or_a_dead_agent)
{
    start();
    struct names n = names_of("job");
    redisContext *sub = subscriber(n.channel, false);
    char m[256], v[256], readers[SCRIPT_SIDE_KEY_MAX],
        ka_b[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1];
    readers_key(n.key, strlen(n.key), strlen(PREFIX), readers);
    ka_of("00000000000000bb", ka_b);
    struct backend_req a = acq("job", TOK_A, "00000000000000aa", 1000);
    struct backend_req b = bound_waiter("00000000000000bb", TOK_B, "41", 0);

    /* B's entry carries a grant, but B has a live reader's mark: no grant,
     * the release notice (the bare name). */
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_TAKEN);
    unsigned long long now = server_us() / 1000;
    cmdf("HSET %s 00000000000000bb %llu", readers, now + 2000);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    cmdf("DEL %s", readers);

    /* B's entry in an earlier version's form (bound, no grant): none. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_TAKEN); /* B's turn */
    cmdf("DEL %s", n.waiting);
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_DONE);
    snprintf(v, sizeof v, "%llu %llu %s", server_us(), now + 20000, ka_b);
    cmdf("HSET %s 00000000000000bb %s", n.waiting, v);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    cmdf("DEL %s", n.waiting);

    /* B's agent died (its keep-alive key is gone): its entry is dropped,
     * and C, live, after it, gets the key. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, b).outcome, BACKEND_TAKEN);
    struct backend_req c = bound_waiter("00000000000000cc", TOK_C, "9", 0);
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_TAKEN);
    cmdf("DEL %s", ka_b);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_C " " REC);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    next_message(sub, m, sizeof m);
    cr_assert_eq(strncmp(m, "grant 00000000000000cc ", 23), 0, "%s", m);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_C)).outcome, BACKEND_DONE);

    /* A waiter of its own (no keep-alive key: Cluster or quorum mode)
     * carries no grant: the notice. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_B, "00000000000000dd", 2000)).outcome,
                 BACKEND_TAKEN);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    cmdf("DEL %s", n.waiting);

    /* A released token is spent, the key its or not (the withdraw of an
     * acquire that failed): the entry that carries it leaves, so no later
     * release hands a key to it. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, bound_waiter("00000000000000bb", TOK_B, "43", 0)).outcome,
                 BACKEND_TAKEN);
    struct backend_req withdraw = tok("job", TOK_B);
    withdraw.notify = false;
    cr_assert_eq(run(SCRIPT_RELEASE, withdraw).outcome, BACKEND_NOT_OURS);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0, "no grant to a spent token");
    redisFree(sub);
}

/* An entry of agent id in the record, bound to its keep-alive key (set to
 * live 3 s), carrying the grant of token (TTL 10 s, no block), SINCE
 * since_us. */
static void carrying_entry(const char *waiting, const char *id, const char *token,
                           unsigned long long since_us)
{
    char ka[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1], v[256];
    ka_of(id, ka);
    cmdf("SET %s 1 PX 3000", ka);
    snprintf(v, sizeof v, "%llu %llu %s 10000 0 %s %s", since_us, since_us / 1000 + 20000, ka,
             token, REC);
    cmdf("HSET %s %s %s", waiting, id, v);
    cmdf("PEXPIRE %s 20000", waiting);
}

ITEST(scripts, an_acquire_adopts_its_granted_key_with_or_without_a_record)
{
    start();
    struct names n = names_of("job");
    char v[256], readers[SCRIPT_SIDE_KEY_MAX];
    readers_key(n.key, strlen(n.key), strlen(PREFIX), readers);
    struct backend_req b = bound_waiter("00000000000000bb", TOK_B, "1", 0);
    /* No record (nobody waits): the key holds B's token, under another
     * holder record and a short life, as a grant leaves it. B's acquire
     * (SET NX fails) adopts it: B's value for its whole TTL, a token above
     * the mark, and no record made. */
    cmdf("SET %s %s PX 2000", n.key, TOK_B " other-host 1 2 x");
    cmdf("SET %s 5000000000000000", n.hw);
    struct script_result r = run(SCRIPT_ACQUIRE, b);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(r.fence, 5000000000000001ull, "above the mark");
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_B " " REC);
    cr_assert_gt(cmd_int("PTTL %s", n.key), 3000, "adopted for the whole TTL");
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0, "an adoption joins no record");
    /* The bare token (an earlier version's value) is B's too. */
    cmdf("SET %s %s PX 2000", n.key, TOK_B);
    r = run(SCRIPT_ACQUIRE, b);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(r.fence, 5000000000000002ull);
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_B " " REC);
    /* Another token, no record: taken, with the holder's PTTL, and the
     * waiting acquire joins the record. */
    struct backend_req c = bound_waiter("00000000000000cc", TOK_C, "1", 0);
    r = run(SCRIPT_ACQUIRE, c);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_gt(r.pttl_ms, 0);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 1);
    /* With a record (C waits, older than B's entry): B's key is still B's
     * to adopt, C's turn or not; B's entry and reader's mark leave, C's
     * entry stays. */
    cmdf("SET %s %s PX 2000", n.key, TOK_B " " REC);
    carrying_entry(n.waiting, "00000000000000bb", TOK_B, server_us());
    cmdf("HSET %s 00000000000000bb %llu", readers, server_us() / 1000 + 2000);
    r = run(SCRIPT_ACQUIRE, b);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(r.fence, 5000000000000003ull);
    cr_assert_gt(cmd_int("PTTL %s", n.key), 3000);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", n.waiting), 0);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", readers), 0);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 1);
    /* B's release grants the key to C, whose acquire adopts it (the
     * record gone with C's entry). */
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_B)).outcome, BACKEND_DONE);
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_C " " REC);
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0);
    r = run(SCRIPT_ACQUIRE, c);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_gt(r.fence, 5000000000000003ull);
    cr_assert_gt(cmd_int("PTTL %s", n.key), 3000);
    /* A free key with a record, C's turn: B is taken (no PTTL), C gets it. */
    cmdf("DEL %s", n.key);
    carrying_entry(n.waiting, "00000000000000cc", TOK_C, server_us() - 10);
    r = run(SCRIPT_ACQUIRE, b);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 0, "C's turn");
    cr_assert_eq(run(SCRIPT_ACQUIRE, c).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 0, "C's entry leaves");
}

ITEST(scripts, a_release_whose_spent_entry_empties_the_record)
{
    start();
    struct names n = names_of("job");
    redisContext *sub = subscriber(n.channel, false);
    char m[256], v[256];
    unsigned long long t = server_us();
    /* The record's one entry carries the released token (A's agent lost
     * its removal): it leaves, the record with it, and the release grants
     * nothing (not to A itself) and publishes nothing. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0)).outcome, BACKEND_DONE);
    carrying_entry(n.waiting, "00000000000000aa", TOK_A, t - 10);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0);
    cmdf("PUBLISH %s marker1", n.channel);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "marker1");
    /* Beside it, a younger entry carrying B's grant: B gets the key. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0)).outcome, BACKEND_DONE);
    carrying_entry(n.waiting, "00000000000000aa", TOK_A, t - 10);
    carrying_entry(n.waiting, "00000000000000bb", TOK_B, t);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_str_eq(get(n.key, v, sizeof v), TOK_B " " REC);
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0);
    next_message(sub, m, sizeof m);
    cr_assert_eq(strncmp(m, "grant 00000000000000bb " TOK_B " ", 56), 0, "%s", m);
    cmdf("DEL %s", n.key);
    /* Beside it, an entry of its own (no grant): the notice. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0)).outcome, BACKEND_DONE);
    carrying_entry(n.waiting, "00000000000000aa", TOK_A, t - 10);
    snprintf(v, sizeof v, "%llu %llu", t, t / 1000 + 2000);
    cmdf("HSET %s 00000000000000cc %s", n.waiting, v);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000aa", n.waiting), 0);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    cmdf("DEL %s", n.waiting);
    /* Beside it, only entries that are not live: the release drops them
     * all, and with the record gone, publishes nothing. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0)).outcome, BACKEND_DONE);
    carrying_entry(n.waiting, "00000000000000aa", TOK_A, t - 10);
    snprintf(v, sizeof v, "%llu %llu", t, t / 1000 - 1);
    cmdf("HSET %s 00000000000000cc %s", n.waiting, v);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cr_assert_eq(cmd_int("EXISTS %s", n.waiting), 0);
    cmdf("PUBLISH %s marker2", n.channel);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "marker2");
    redisFree(sub);
}

ITEST(scripts, a_bound_readers_mark_lives_by_the_keepalive_key)
{
    start();
    struct names n = names_of("job");
    char readers[SCRIPT_SIDE_KEY_MAX], ka_r[CONFIG_PREFIX_MAX + KEEPALIVE_EXTRA + 1], rest[256];
    readers_key(n.key, strlen(n.key), strlen(PREFIX), readers);
    ka_of("00000000000000rr", ka_r);
    cmdf("SET %s 1 PX 3000", ka_r);
    /* A writer holds; host R's reader waits, bound, with its mark. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, "00000000000000aa", 1000)).outcome,
                 BACKEND_DONE);
    struct backend_req rr = acq("job", tk(1), "00000000000000rr", 30000);
    rr.bound = true;
    struct script_ctx ctx = ctx_of(false);
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_COUNTED, &rr, 0, NULL).outcome, BACKEND_TAKEN);
    entry_field(readers, "00000000000000rr", 0, rest, sizeof rest);
    cr_assert_str_eq(rest, ka_r, "the mark is bound as the entry is");
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    /* A reader of host S does not wait for R, a reader, though R's entry is
     * older: its mark lives by R's key. */
    cr_assert_eq(counted("job", 2, 0, 10000, "00000000000000ss", 1000).outcome, BACKEND_DONE);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 2), BACKEND_DONE);
    /* A writer does wait for R; once R's key goes, neither counts. */
    struct backend_req w = acq("job", TOK_B, "00000000000000ww", 1000);
    cr_assert_eq(run(SCRIPT_ACQUIRE, w).outcome, BACKEND_TAKEN);
    cmdf("DEL %s", ka_r);
    cr_assert_eq(run(SCRIPT_ACQUIRE, w).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000rr", n.waiting), 0);
}

ITEST(scripts, a_waiting_writer_goes_before_later_readers)
{
    start();
    struct names n = names_of("job");
    char readers[SCRIPT_SIDE_KEY_MAX];
    readers_key(n.key, strlen(n.key), strlen(PREFIX), readers);
    /* Host A reads. Host W's writer waits (taken: the readers' hash). */
    cr_assert_eq(counted("job", 0, 0, 10000, "00000000000000aa", 1000).outcome, BACKEND_DONE);
    struct backend_req w = acq("job", TOK_A, "00000000000000ff", 1000);
    struct script_result r = run(SCRIPT_ACQUIRE, w);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_gt(r.pttl_ms, 0);
    /* Readers of other hosts that come now wait behind the writer, host
     * A's too (its grant left no entry), and join as readers. */
    r = counted("job", 1, 0, 10000, "00000000000000cc", 1000);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 0, "the writer's turn: no PTTL");
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", readers), 1);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000ff", readers), 0, "the writer has no mark");
    cr_assert_eq(counted("job", 2, 0, 10000, "00000000000000aa", 1000).outcome, BACKEND_TAKEN);
    /* A try-once reader is turned away too. */
    cr_assert_eq(counted("job", 3, 0, 10000, NULL, 0).outcome, BACKEND_TAKEN);
    /* The last reader leaves: the writer gets the lock, the readers after. */
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 0, 10000, "00000000000000cc", 1000).outcome, BACKEND_TAKEN);
    cr_assert_eq(run(SCRIPT_ACQUIRE, w).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 0, 10000, "00000000000000cc", 1000).outcome, BACKEND_TAKEN);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    /* Readers do not wait for readers: host A's, whose entry is younger
     * than host C's, goes first. */
    cr_assert_eq(counted("job", 2, 0, 10000, "00000000000000aa", 1000).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 0, 10000, "00000000000000cc", 1000).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HLEN %s", n.key), 3);
}

ITEST(scripts, readers_that_waited_before_the_writer_go_first)
{
    start();
    struct names n = names_of("job");
    char readers[SCRIPT_SIDE_KEY_MAX];
    readers_key(n.key, strlen(n.key), strlen(PREFIX), readers);
    /* Host X writes; host C's reader waits, then host W's writer. */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, "00000000000000ee", 1000)).outcome,
                 BACKEND_DONE);
    cr_assert_eq(counted("job", 0, 0, 10000, "00000000000000cc", 1000).outcome, BACKEND_TAKEN);
    struct backend_req w = acq("job", TOK_B, "00000000000000ff", 1000);
    cr_assert_eq(run(SCRIPT_ACQUIRE, w).outcome, BACKEND_TAKEN);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    /* The lock is free: the older reader's turn, not the writer's. */
    struct script_result r = run(SCRIPT_ACQUIRE, w);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 0);
    cr_assert_eq(counted("job", 0, 0, 10000, "00000000000000cc", 1000).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000cc", n.waiting), 0);
    /* A reader that comes after the writer waits; the writer waits for the
     * reader that holds. */
    cr_assert_eq(counted("job", 1, 0, 10000, "00000000000000dd", 1000).outcome, BACKEND_TAKEN);
    r = run(SCRIPT_ACQUIRE, w);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_gt(r.pttl_ms, 0);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, w).outcome, BACKEND_DONE);
    /* An agent whose entry was a reader's and that now waits to write loses
     * its reader's mark. */
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000dd", readers), 1);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_C, "00000000000000dd", 1000)).outcome,
                 BACKEND_TAKEN);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000dd", readers), 0);
}

ITEST(scripts, renew_a_permit)
{
    start();
    struct names n = names_of("job");
    cr_assert_eq(counted("job", 0, 3, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 3, 5000, NULL, 0).outcome, BACKEND_DONE);
    long long before = permit_expiry(n.key, 1);
    struct backend_req req = tok("job", tk(1));
    req.ttl_ms = 30000;
    long long t0 = server_ms();
    struct script_result r = run(SCRIPT_RENEW_COUNTED, req);
    long long t1 = server_ms();
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert(r.wrote);
    long long after = permit_expiry(n.key, 1);
    cr_assert_gt(after, before);
    cr_assert(after >= t0 + 30000 && after <= t1 + 30000);
    expires_with(n.key, after, t0, t1); /* the key follows its latest permit */
    /* A shorter TTL never brings a permit's expiry forward: local readers
     * of one grant share its permit, each renewing it with its own TTL. */
    req.ttl_ms = 1000;
    t0 = server_ms();
    cr_assert_eq(run(SCRIPT_RENEW_COUNTED, req).outcome, BACKEND_DONE);
    t1 = server_ms();
    cr_assert_eq(permit_expiry(n.key, 1), after, "a shorter renewal moved the permit's expiry");
    expires_with(n.key, after, t0, t1);
    /* Not ours: an unknown token, a name without a key, an exclusive key. */
    cr_assert_eq(counted_op(SCRIPT_RENEW_COUNTED, "job", 7), BACKEND_NOT_OURS);
    cr_assert_eq(counted_op(SCRIPT_RENEW_COUNTED, "none", 0), BACKEND_NOT_OURS);
    run(SCRIPT_ACQUIRE, acq("excl", TOK_A, NULL, 0));
    cr_assert_eq(run(SCRIPT_RENEW_COUNTED, tok("excl", TOK_A)).outcome, BACKEND_NOT_OURS);
    /* The exclusive scripts find no lease of theirs in a counted key. */
    cr_assert_eq(run(SCRIPT_RENEW, tok("job", tk(0))).outcome, BACKEND_NOT_OURS);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", tk(0))).outcome, BACKEND_NOT_OURS);
    cr_assert_eq(cmd_int("HLEN %s", n.key), 3);
}

ITEST(scripts, release_a_permit_and_the_notice)
{
    start();
    struct names n = names_of("job");
    redisContext *sub = subscriber(n.channel, false);
    char m[64];
    cr_assert_eq(counted("job", 0, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    /* Nobody waits: no notice. */
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    cmdf("PUBLISH %s marker1", n.channel);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "marker1");
    /* A writer waits: every freed permit publishes the name. */
    cr_assert_eq(counted("job", 0, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_A, "00000000000000ff", 2000)).outcome,
                 BACKEND_TAKEN);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_DONE);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 1, "permit 1 holds it");
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "job", 0), BACKEND_NOT_OURS);
    struct backend_req quiet = tok("job", tk(1));
    quiet.notify = false;
    cr_assert_eq(run(SCRIPT_RELEASE_COUNTED, quiet).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0, "gone with its last permit");
    cmdf("PUBLISH %s marker2", n.channel);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "marker2");
    redisFree(sub);
    /* On Redis Cluster: the lock key alone, and SPUBLISH whenever asked
     * (the writer stopped waiting: no record). */
    cmdf("HDEL %s 00000000000000ff", n.waiting);
    sub = subscriber(n.channel, true);
    cr_assert_eq(counted("job", 2, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    struct script_ctx ctx = ctx_of(true);
    struct backend_req req = tok("job", tk(2));
    cr_assert_eq(run_ctx(&ctx, SCRIPT_RELEASE_COUNTED, &req, 0, NULL).outcome, BACKEND_DONE);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    redisFree(sub);
}

ITEST(scripts, lookup_of_a_counted_key)
{
    start();
    struct names n = names_of("job");
    cr_assert_eq(counted("job", 0, 3, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 1, 3, 20000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("job", 2, 3, 20000, NULL, 0).outcome, BACKEND_DONE);
    lapse(n.key, 2); /* lapsed, not yet dropped: not shown */
    struct script_holders hs;
    struct backend_holder h = lookup_all("job", &hs);
    cr_assert_str_eq(hs.holder.kind, "sem:3");
    cr_assert_str_eq(h.value, "sem:3");
    cr_assert_eq(h.nodes_holding, 1);
    cr_assert(h.pttl > 0 && h.pttl <= 20000, "PTTL %lld", h.pttl);
    cr_assert_eq(hs.holder.permits, 2);
    cr_assert_eq(hs.holder.shown, 2);
    bool seen[2] = {false, false};
    for (unsigned i = 0; i < hs.holder.shown; i++) {
        const struct backend_permit *p = &hs.holder.permit[i];
        int which = strcmp(p->token, tk(0)) == 0 ? 0 : strcmp(p->token, tk(1)) == 0 ? 1 : -1;
        cr_assert_geq(which, 0, "unknown permit %s", p->token);
        seen[which] = true;
        char rec[BACKEND_RECORD_MAX];
        snprintf(rec, sizeof rec, "%s %s", p->token, REC);
        cr_assert_str_eq(p->record, rec);
        cr_assert(p->pttl_ms > 0 && p->pttl_ms <= (which ? 20000 : 10000), "permit PTTL %lld",
                  p->pttl_ms);
    }
    cr_assert(seen[0] && seen[1]);
    /* Permit 1 (20 s, taken after permit 0) lapses after permit 0 (10 s). */
    const struct backend_permit
        *p0 = &hs.holder.permit[strcmp(hs.holder.permit[0].token, tk(0)) != 0],
        *p1 = &hs.holder.permit[strcmp(hs.holder.permit[0].token, tk(0)) == 0];
    cr_assert_gt(p1->pttl_ms, p0->pttl_ms);
    cr_assert_str_eq(h.record, hs.holder.permit[0].record);
    /* Many readers: all counted, the first ones shown. */
    for (unsigned i = 0; i < SCRIPT_PERMITS_SHOWN + 4; i++)
        cr_assert_eq(counted("many", i, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    lookup_all("many", &hs);
    cr_assert_str_eq(hs.holder.kind, "shared");
    cr_assert_eq(hs.holder.permits, SCRIPT_PERMITS_SHOWN + 4);
    cr_assert_eq(hs.holder.shown, SCRIPT_PERMITS_SHOWN);
    /* An exclusive key reads as before. */
    run(SCRIPT_ACQUIRE, acq("excl", TOK_A, NULL, 0));
    h = lookup_all("excl", &hs);
    cr_assert_str_eq(h.value, TOK_A);
    cr_assert_str_eq(hs.holder.kind, "");
    cr_assert_eq(hs.holder.permits, 0);
}

ITEST(scripts, fence_a_permit)
{
    start();
    struct names n = names_of("job");
    struct backend_req a = acq("job", tk(0), NULL, 0);
    a.floor = 500;
    struct script_ctx ctx = ctx_of(false);
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_COUNTED, &a, 2, NULL).fence, 500);
    struct backend_req f = tok("job", tk(0));
    f.fence = 900;
    cr_assert_eq(run(SCRIPT_FENCE_COUNTED, f).outcome, BACKEND_DONE);
    cr_assert_eq(get_num(n.hw), 900);
    f.fence = 600;
    cr_assert_eq(run(SCRIPT_FENCE_COUNTED, f).outcome, BACKEND_DONE);
    cr_assert_eq(get_num(n.hw), 900, "marks only rise");
    f.token = tk(1);
    f.fence = 2000;
    cr_assert_eq(run(SCRIPT_FENCE_COUNTED, f).outcome, BACKEND_NOT_OURS);
    lapse(n.key, 0);
    f.token = tk(0);
    cr_assert_eq(run(SCRIPT_FENCE_COUNTED, f).outcome, BACKEND_NOT_OURS, "a lapsed permit");
    cr_assert_eq(get_num(n.hw), 900);
}

/* ---- the documented ACL user ---- */

/* The ACL SETUSER line of docs/redis.md, its password "pw". */
static const char *documented_acl(void)
{
    static char line[1024];
    FILE *f = fopen(DLOCK_SOURCE_DIR "/docs/redis.md", "r");
    cr_assert(f, "cannot read docs/redis.md");
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strncmp(line, "ACL SETUSER dlock ", 18) == 0;
    fclose(f);
    cr_assert(found);
    line[strcspn(line, "\n")] = '\0';
    char *pw = strstr(line, ">CHANGE-ME");
    cr_assert(pw);
    memmove(pw + 3, pw + 10, strlen(pw + 10) + 1);
    memcpy(pw, ">pw", 3);
    cr_assert_null(strchr(line, '%'));
    return line;
}

/* Every script, on each of its paths that runs other commands, as the
 * user of docs/redis.md: a command a script runs that the user may not
 * fails the script (run() asserts no error). */
ITEST(scripts, the_documented_acl_user_may_run_every_script)
{
    start();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    redisReply *ok = cmd(documented_acl());
#pragma GCC diagnostic pop
    cr_assert_eq(ok->type, REDIS_REPLY_STATUS, "%s", ok->str);
    freeReplyObject(ok);
    redisFree(C);
    C = connect_redis();
    ok = cmd("AUTH dlock pw");
    cr_assert_eq(ok->type, REDIS_REPLY_STATUS, "%s", ok->str);
    freeReplyObject(ok);
    /* The exclusive kind: a grant, a waiter of another host, a renewal, a
     * fence, a lookup, a release that publishes, the next waiter's grant. */
    struct backend_req a = acq("job", TOK_A, "00000000000000aa", 1000);
    cr_assert_eq(run(SCRIPT_ACQUIRE, a).outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_B, "00000000000000bb", 1000)).outcome,
                 BACKEND_TAKEN);
    cr_assert_eq(run(SCRIPT_RENEW, tok("job", TOK_A)).outcome, BACKEND_DONE);
    struct backend_req f = tok("job", TOK_A);
    f.fence = 1ull << 52;
    cr_assert_eq(run(SCRIPT_FENCE, f).outcome, BACKEND_DONE);
    cr_assert_str_eq(lookup("job").value, TOK_A);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_A)).outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_B, "00000000000000bb", 1000)).outcome,
                 BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_RELEASE, tok("job", TOK_B)).outcome, BACKEND_DONE);
    /* The counted kinds: grants, a mismatch, a reader behind a writer, the
     * limit, renewals, fences, lookups, releases that publish. */
    cr_assert_eq(counted("rw", 0, 0, 10000, "00000000000000aa", 1000).outcome, BACKEND_DONE);
    cr_assert(counted("rw", 1, 2, 10000, NULL, 0).mismatch);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("rw", TOK_A, "00000000000000ff", 1000)).outcome,
                 BACKEND_TAKEN);
    cr_assert_eq(counted("rw", 1, 0, 10000, "00000000000000cc", 1000).outcome, BACKEND_TAKEN);
    cr_assert_eq(counted_op(SCRIPT_RENEW_COUNTED, "rw", 0), BACKEND_DONE);
    f = tok("rw", tk(0));
    f.fence = (1ull << 52) + 1;
    cr_assert_eq(run(SCRIPT_FENCE_COUNTED, f).outcome, BACKEND_DONE);
    cr_assert_str_eq(lookup("rw").value, "shared");
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "rw", 0), BACKEND_DONE);
    cr_assert_eq(counted("sem", 0, 1, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("sem", 1, 1, 10000, "00000000000000cc", 1000).outcome, BACKEND_TAKEN);
    cr_assert_eq(counted_op(SCRIPT_RELEASE_COUNTED, "sem", 0), BACKEND_DONE);
    cr_assert_eq(counted("sem", 1, 1, 10000, "00000000000000cc", 1000).outcome, BACKEND_DONE);
    lapse(names_of("sem").key, 1);
    cr_assert_eq(counted_op(SCRIPT_RENEW_COUNTED, "sem", 1), BACKEND_NOT_OURS);
}

/* ---- Redisson's format ---- */

static const struct formats *redisson_all(void)
{
    static struct formats f;
    if (!f.nredisson) {
        cr_assert_eq(formats_add(&f, KEY_FORMAT_REDISSON, "orders:*"), 0);
        cr_assert_eq(formats_add(&f, KEY_FORMAT_REDISSON_RW, "rw:*"), 0);
        cr_assert_eq(formats_add(&f, KEY_FORMAT_REDISSON_SEM, "sem:*"), 0);
    }
    return &f;
}

static struct script_result run_r(enum script_id s, struct backend_req req, bool sharded,
                                  struct script_holders *h)
{
    struct script_ctx ctx = ctx_of(sharded);
    ctx.formats = redisson_all();
    return run_ctx(&ctx, s, &req, 0, h);
}

#define FIELD_A TOK_A ":0"

/* A hash field's count. */
static long long hget_num(const char *key, const char *field)
{
    redisReply *r = cmd("HGET %s %s", key, field);
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "HGET %s %s: type %d", key, field, r->type);
    long long n = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return n;
}

/* The key is the bare name, Redisson's RLock hash with dlock's field; the
 * keys beside it are dlock's, under the prefix, in the name's slot. */
ITEST(scripts, redisson_acquire_renew_release)
{
    start();
    char hw[CONFIG_PREFIX_MAX + FENCE_HW_EXTRA + 1], waiting[SCRIPT_SIDE_KEY_MAX];
    fence_hw_key_of(tags(), PREFIX, strlen(PREFIX), "orders:1", 8, hw);
    side_key_of(PREFIX, strlen(PREFIX), "orders:1", 8, WAITING_SUFFIX, waiting);
    cr_assert_str_eq(waiting, "dlock:{orders:1} waiting");
    cr_assert_eq(key_slot(hw, strlen(hw)), key_slot("orders:1", 8));

    struct backend_req a = acq("orders:1", TOK_A, NULL, 0);
    struct script_result r = run_r(SCRIPT_ACQUIRE_REDISSON, a, false, NULL);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_gt(r.fence, 0);
    uint64_t first = r.fence;
    cr_assert_eq(get_num(hw), r.fence, "the slot's mark, as for dlock's format");
    cr_assert_eq(cmd_int("EXISTS %s", PREFIX "orders:1"), 0, "no prefixed key");
    redisReply *v = cmd("HGETALL %s", "orders:1");
    cr_assert_eq(v->elements, 2);
    cr_assert_str_eq(v->element[0]->str, FIELD_A);
    cr_assert_str_eq(v->element[1]->str, "1");
    freeReplyObject(v);
    long long pttl = cmd_int("PTTL %s", "orders:1");
    cr_assert(pttl > 0 && pttl <= 10000, "PTTL %lld", pttl);

    /* Taken for another: with the PTTL; a waiting one joins dlock's record. */
    r = run_r(SCRIPT_ACQUIRE_REDISSON, acq("orders:1", TOK_B, "00000000000000bb", 1000), false,
              NULL);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert(r.pttl_ms > 0 && r.pttl_ms <= 10000);
    cr_assert_eq(cmd_int("HEXISTS %s 00000000000000bb", waiting), 1);

    /* Renewal: the count follows the holds, the TTL is set anew. */
    struct backend_req n = tok("orders:1", TOK_A);
    n.holds = 3;
    cr_assert_eq(run_r(SCRIPT_RENEW_REDISSON, n, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(hget_num("orders:1", FIELD_A), 3);
    pttl = cmd_int("PTTL %s", "orders:1");
    cr_assert(pttl > 10000 && pttl <= 20000, "PTTL %lld", pttl);
    cr_assert_eq(run_r(SCRIPT_RENEW_REDISSON, tok("orders:1", TOK_B), false, NULL).outcome,
                 BACKEND_NOT_OURS);

    /* The lookup shows dlock's field, its token and count. */
    struct script_holders h;
    struct backend_req q = {.name = "orders:1", .len = 8};
    cr_assert_eq(run_r(SCRIPT_LOOKUP, q, false, &h).kind, SR_HOLDER);
    cr_assert_str_eq(h.holder.kind, "redisson");
    cr_assert_eq(h.holder.permits, 1);
    cr_assert_str_eq(h.holder.permit[0].record, FIELD_A);
    cr_assert_str_eq(h.holder.permit[0].token, TOK_A);
    cr_assert_eq(h.holder.permit[0].holds, 3);

    /* Release: not ours, left alone; ours: the key goes, and Redisson's
     * unlock message goes on Redisson's channel. */
    redisContext *sub = subscriber("redisson_lock__channel:{orders:1}", false);
    cr_assert_eq(run_r(SCRIPT_RELEASE_REDISSON, tok("orders:1", TOK_B), false, NULL).outcome,
                 BACKEND_NOT_OURS);
    cr_assert_eq(cmd_int("EXISTS %s", "orders:1"), 1);
    r = run_r(SCRIPT_RELEASE_REDISSON, tok("orders:1", TOK_A), false, NULL);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(r.listeners, 1, "the release counts who heard it");
    cr_assert_eq(cmd_int("EXISTS %s", "orders:1"), 0);
    char buf[64];
    cr_assert_str_eq(next_message(sub, buf, sizeof buf), "0");
    redisFree(sub);

    /* The waiting host's turn; its token is above the last grant's. */
    cr_assert_eq(run_r(SCRIPT_ACQUIRE_REDISSON, a, false, NULL).outcome, BACKEND_TAKEN);
    struct script_result r2 = run_r(SCRIPT_ACQUIRE_REDISSON,
                                    acq("orders:1", TOK_B, "00000000000000bb", 1000), false, NULL);
    cr_assert_eq(r2.outcome, BACKEND_DONE);
    cr_assert_gt(r2.fence, first);
}

/* A key that Redisson holds (its field "UUID:THREAD" with a count) is
 * taken; dlock's renewal, release and fence leave it alone; the lookup
 * shows Redisson's field and count. A key of another type is taken too. */
ITEST(scripts, redisson_holder_is_respected)
{
    start();
    const char *field = "8c6a6b1e-5b36-4e0b-9a43-0d2f6c6f1a7e:57";
    redisReply *x = cmd("HSET orders:2 %s 2", field);
    freeReplyObject(x);
    cmdf("PEXPIRE orders:2 30000");
    struct script_result r =
        run_r(SCRIPT_ACQUIRE_REDISSON, acq("orders:2", TOK_A, NULL, 0), false, NULL);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert(r.pttl_ms > 20000 && r.pttl_ms <= 30000, "PTTL %lld", r.pttl_ms);
    struct backend_req f = tok("orders:2", TOK_A);
    f.fence = 9;
    cr_assert_eq(run_r(SCRIPT_RENEW_REDISSON, tok("orders:2", TOK_A), false, NULL).outcome,
                 BACKEND_NOT_OURS);
    cr_assert_eq(run_r(SCRIPT_FENCE_REDISSON, f, false, NULL).outcome, BACKEND_NOT_OURS);
    cr_assert_eq(run_r(SCRIPT_RELEASE_REDISSON, tok("orders:2", TOK_A), false, NULL).outcome,
                 BACKEND_NOT_OURS);
    cr_assert_eq(hget_num("orders:2", field), 2, "Redisson's hold is untouched");

    struct script_holders h;
    struct backend_req q = {.name = "orders:2", .len = 8};
    cr_assert_eq(run_r(SCRIPT_LOOKUP, q, false, &h).kind, SR_HOLDER);
    cr_assert_str_eq(h.holder.kind, "redisson");
    cr_assert_str_eq(h.holder.permit[0].record, field);
    cr_assert_str_eq(h.holder.permit[0].token, "");
    cr_assert_eq(h.holder.permit[0].holds, 2);

    /* Redisson's read-write lock: its mode shows. */
    cmdf("DEL orders:2");
    x = cmd("HSET orders:2 mode read %s 1", field);
    freeReplyObject(x);
    cr_assert_eq(run_r(SCRIPT_LOOKUP, q, false, &h).kind, SR_HOLDER);
    cr_assert_str_eq(h.holder.kind, "redisson:read");
    cr_assert_eq(h.holder.permits, 1);

    /* A string at the name (another client's): taken, never an error. */
    cmdf("DEL orders:2");
    cmdf("SET orders:2 someone PX 5000");
    r = run_r(SCRIPT_ACQUIRE_REDISSON, acq("orders:2", TOK_A, NULL, 0), false, NULL);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(run_r(SCRIPT_RELEASE_REDISSON, tok("orders:2", TOK_A), false, NULL).outcome,
                 BACKEND_NOT_OURS);
}

/* Redis Cluster: the release publishes with SPUBLISH (as Redisson does
 * there), on Redisson's channel, which lies in the name's slot. */
ITEST(scripts, redisson_release_sharded)
{
    start();
    cr_assert_eq(key_slot("redisson_lock__channel:{orders:3}", 33), key_slot("orders:3", 8));
    cr_assert_eq(
        run_r(SCRIPT_ACQUIRE_REDISSON, acq("orders:3", TOK_A, NULL, 0), true, NULL).outcome,
        BACKEND_DONE);
    redisContext *sub = subscriber("redisson_lock__channel:{orders:3}", true);
    cr_assert_eq(run_r(SCRIPT_RELEASE_REDISSON, tok("orders:3", TOK_A), true, NULL).outcome,
                 BACKEND_DONE);
    char buf[64];
    cr_assert_str_eq(next_message(sub, buf, sizeof buf), "0");
    redisFree(sub);
}

/* Redisson's RReadWriteLock format: dlock readers beside each other (a
 * timeout key per hold, as Redisson's read lock keeps), a writer shut out
 * until the last reader goes; the last release deletes the hash and
 * publishes on redisson_rwlock:{NAME}, 0 after a reader and 1 after a
 * writer. */
ITEST(scripts, redisson_rwlock_readers_and_writer)
{
    start();
    struct backend_req ra = acq("rw:1", TOK_A, NULL, 0), rb = acq("rw:1", TOK_B, NULL, 0),
                       wc = acq("rw:1", TOK_C, NULL, 0);
    ra.kind = rb.kind = LOCK_SHARED;
    cr_assert_eq(run_r(SCRIPT_ACQUIRE_RW, ra, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(run_r(SCRIPT_ACQUIRE_RW, rb, false, NULL).outcome, BACKEND_DONE);
    char mode[16];
    redisReply *x = cmd("HGET rw:1 mode");
    snprintf(mode, sizeof mode, "%s", x->str);
    freeReplyObject(x);
    cr_assert_str_eq(mode, "read");
    cr_assert_eq(hget_num("rw:1", FIELD_A), 1);
    cr_assert_eq(hget_num("rw:1", TOK_B ":0"), 1);
    const char *ta1 = "{rw:1}:" FIELD_A ":rwlock_timeout:1";
    long long p = cmd_int("PTTL %s", ta1);
    cr_assert(p > 0 && p <= 10000, "timeout key PTTL %lld", p);
    /* The writer waits for the readers. */
    struct script_result r = run_r(SCRIPT_ACQUIRE_RW, wc, false, NULL);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_gt(r.pttl_ms, 0);

    /* A's holds go to 2: a second timeout key; back to 1: it goes. */
    struct backend_req na = tok("rw:1", TOK_A);
    na.kind = LOCK_SHARED;
    na.holds = 2;
    cr_assert_eq(run_r(SCRIPT_RENEW_RW, na, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(hget_num("rw:1", FIELD_A), 2);
    cr_assert_eq(cmd_int("EXISTS %s", "{rw:1}:" FIELD_A ":rwlock_timeout:2"), 1);
    long long hp = cmd_int("PTTL %s", "rw:1");
    cr_assert(hp > 10000, "the hash lasts the longest hold: %lld", hp);
    na.holds = 1;
    cr_assert_eq(run_r(SCRIPT_RENEW_RW, na, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", "{rw:1}:" FIELD_A ":rwlock_timeout:2"), 0);

    struct script_holders h;
    struct backend_req q = {.name = "rw:1", .len = 4};
    cr_assert_eq(run_r(SCRIPT_LOOKUP, q, false, &h).kind, SR_HOLDER);
    cr_assert_str_eq(h.holder.kind, "redisson:read");
    cr_assert_eq(h.holder.permits, 2);

    /* A goes: B's hold keeps the hash, no message; B goes: the hash goes,
     * and 0 on the read-write lock's channel. */
    redisContext *sub = subscriber("redisson_rwlock:{rw:1}", false);
    struct backend_req xa = tok("rw:1", TOK_A), xb = tok("rw:1", TOK_B);
    xa.kind = xb.kind = LOCK_SHARED;
    cr_assert_eq(run_r(SCRIPT_RELEASE_RW, xa, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", ta1), 0);
    cr_assert_eq(cmd_int("EXISTS %s", "rw:1"), 1);
    cr_assert_eq(run_r(SCRIPT_RELEASE_RW, xa, false, NULL).outcome, BACKEND_NOT_OURS);
    cr_assert_eq(run_r(SCRIPT_RELEASE_RW, xb, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", "rw:1"), 0);
    char buf[64];
    cr_assert_str_eq(next_message(sub, buf, sizeof buf), "0");

    /* The writer: mode write, its field with ":write"; a reader is shut
     * out; its release publishes 1. */
    cr_assert_eq(run_r(SCRIPT_ACQUIRE_RW, wc, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(hget_num("rw:1", TOK_C ":0:write"), 1);
    cr_assert_eq(run_r(SCRIPT_ACQUIRE_RW, ra, false, NULL).outcome, BACKEND_TAKEN);
    cr_assert_eq(run_r(SCRIPT_LOOKUP, q, false, &h).kind, SR_HOLDER);
    cr_assert_str_eq(h.holder.kind, "redisson:write");
    cr_assert_str_eq(h.holder.permit[0].token, TOK_C);
    struct backend_req fc = tok("rw:1", TOK_C);
    fc.fence = 7;
    cr_assert_eq(run_r(SCRIPT_FENCE_RW, fc, false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(run_r(SCRIPT_RELEASE_RW, tok("rw:1", TOK_C), false, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(cmd_int("EXISTS %s", "rw:1"), 0);
    cr_assert_str_eq(next_message(sub, buf, sizeof buf), "1");
    redisFree(sub);

    /* An RLock hash (no mode) at the name is taken, never an error. */
    x = cmd("HSET rw:1 someone:1 1");
    freeReplyObject(x);
    cr_assert_eq(run_r(SCRIPT_ACQUIRE_RW, ra, false, NULL).outcome, BACKEND_TAKEN);
    cr_assert_eq(run_r(SCRIPT_ACQUIRE_RW, wc, false, NULL).outcome, BACKEND_TAKEN);
}

/* The number at a key. */
static long long get_ll(const char *key)
{
    char buf[64];
    return strtoll(get(key, buf, sizeof buf), NULL, 10);
}

/* Redisson's RPermitExpirableSemaphore format: the free permits at the
 * name, set to N by the first acquire (as Redisson's trySetPermits); each
 * permit in "{NAME}:timeout" with its expiry, its id the token's 16 bytes;
 * a release gives it back and publishes the free count on
 * redisson_sc:{NAME}; a lapsed permit (a dead Java holder's) goes back to
 * the pool on the next acquire; another N is a mismatch. */
ITEST(scripts, redisson_semaphore_permits)
{
    start();
    struct script_ctx ctx = ctx_of(false);
    ctx.formats = redisson_all();
    struct backend_req a = acq("sem:1", TOK_A, NULL, 0), b = acq("sem:1", TOK_B, NULL, 0),
                       c = acq("sem:1", TOK_C, NULL, 0);
    a.kind = b.kind = c.kind = LOCK_SEMAPHORE;
    struct script_result r = run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &a, 2, NULL);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_gt(r.fence, 0);
    cr_assert_eq(get_ll("sem:1"), 1);
    cr_assert_eq(cmd_int("ZCARD %s", "{sem:1}:timeout"), 1);
    redisReply *x =
        cmd("ZSCORE {sem:1}:timeout %b",
            "\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa\xaa", (size_t)16);
    cr_assert_eq(x->type, REDIS_REPLY_STRING, "the permit id is the token's 16 bytes");
    freeReplyObject(x);
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &b, 2, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(get_ll("sem:1"), 0);
    r = run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &c, 2, NULL);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert(r.pttl_ms > 0 && r.pttl_ms <= 10000, "until the first permit lapses: %lld",
              r.pttl_ms);
    /* Another N: never granted as asked. */
    r = run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &c, 3, NULL);
    cr_assert(r.mismatch);
    cr_assert_str_eq(r.held, "sem:2");

    /* Renewal moves A's expiry; the lookup shows both permits. */
    struct backend_req na = tok("sem:1", TOK_A);
    na.kind = LOCK_SEMAPHORE;
    cr_assert_eq(run_ctx(&ctx, SCRIPT_RENEW_SEM, &na, 2, NULL).outcome, BACKEND_DONE);
    struct script_holders h;
    struct backend_req q = {.name = "sem:1", .len = 5};
    cr_assert_eq(run_ctx(&ctx, SCRIPT_LOOKUP_SEM, &q, 0, &h).kind, SR_HOLDER);
    cr_assert_str_eq(h.holder.kind, "redisson:semaphore");
    cr_assert_eq(h.holder.permits, 2);
    cr_assert_str_eq(h.holder.permit[0].record, TOK_B, "the earliest expiry first");
    cr_assert_str_eq(h.holder.permit[1].record, TOK_A);
    cr_assert_gt(h.holder.permit[1].pttl_ms, 10000);

    /* Release: the permit goes back, the free count on the channel. */
    redisContext *sub = subscriber("redisson_sc:{sem:1}", false);
    cr_assert_eq(run_ctx(&ctx, SCRIPT_RELEASE_SEM, &na, 2, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(run_ctx(&ctx, SCRIPT_RELEASE_SEM, &na, 2, NULL).outcome, BACKEND_NOT_OURS);
    cr_assert_eq(get_ll("sem:1"), 1);
    char buf[64];
    cr_assert_str_eq(next_message(sub, buf, sizeof buf), "1");
    redisFree(sub);

    /* A Java holder's permit that lapsed goes back on the next acquire. */
    cmdf("ZADD {sem:1}:timeout 1000 javapermit0000000");
    cmdf("DECRBY sem:1 1");
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &c, 2, NULL).outcome, BACKEND_DONE);
    x = cmd("ZSCORE {sem:1}:timeout javapermit0000000");
    cr_assert_eq(x->type, REDIS_REPLY_NIL, "reclaimed");
    freeReplyObject(x);

    /* A semaphore that Redisson set up with 3 permits is one of 3. */
    cmdf("DEL sem:2");
    cmdf("SET sem:2 3");
    struct backend_req d = acq("sem:2", TOK_A, NULL, 0);
    d.kind = LOCK_SEMAPHORE;
    r = run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &d, 2, NULL);
    cr_assert(r.mismatch);
    cr_assert_str_eq(r.held, "sem:3");
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &d, 3, NULL).outcome, BACKEND_DONE);
    /* A key of another type: taken, never an error. */
    cmdf("DEL sem:3");
    cmdf("HSET sem:3 a b");
    d.name = "sem:3";
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &d, 3, NULL).outcome, BACKEND_TAKEN);
}

/* ---- an operator's forced release ---- */

/* Runs the forced release of name (the semaphore's script for a name in
 * Redisson's semaphore format) with the Redisson formats: what it held. */
static struct backend_holder force_of(const char *name, bool sharded)
{
    struct script_ctx ctx = ctx_of(sharded);
    ctx.formats = redisson_all();
    struct backend_req req = {.op = BACKEND_FORCE, .name = name, .len = strlen(name)};
    enum script_id s = strncmp(name, "sem:", 4) == 0 ? SCRIPT_FORCE_SEM : SCRIPT_FORCE;
    struct script_holders h;
    struct script_result r = run_ctx(&ctx, s, &req, 0, &h);
    cr_assert_eq(r.kind, SR_HOLDER, "%s: not a holder's answer", name);
    return h.holder;
}

/* Whoever holds it, of every kind: the key goes, the answer says what it
 * held, the fencing mark stays, and waiting hosts hear the notice. */
ITEST(scripts, force_deletes_every_kind_of_key)
{
    start();
    struct names n = names_of("job");
    /* An exclusive key, with another host waiting. */
    struct script_result r = run(SCRIPT_ACQUIRE, acq("job", TOK_A, NULL, 0));
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_B, "00000000000000bb", 1000)).outcome,
                 BACKEND_TAKEN);
    redisContext *sub = subscriber(n.channel, false);
    struct backend_holder h = force_of("job", false);
    cr_assert_str_eq(h.value, TOK_A);
    cr_assert_str_eq(h.record, TOK_A " " REC);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
    cr_assert_eq(get_num(n.hw), r.fence, "the fencing mark stays");
    char m[64];
    cr_assert_str_eq(next_message(sub, m, sizeof m), "job");
    redisFree(sub);
    /* Nothing left: nothing held. */
    h = force_of("job", false);
    cr_assert_str_eq(h.value, "");
    cr_assert_eq(h.permits, 0);

    /* A shared key of two readers. */
    cr_assert_eq(counted("rd", 0, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    cr_assert_eq(counted("rd", 1, 0, 10000, NULL, 0).outcome, BACKEND_DONE);
    h = force_of("rd", false);
    cr_assert_str_eq(h.kind, "shared");
    cr_assert_eq(h.permits, 2);
    cr_assert_eq(cmd_int("EXISTS %s", PREFIX "rd"), 0);

    /* Redisson's RLock hash, at the bare name. */
    cr_assert_eq(
        run_r(SCRIPT_ACQUIRE_REDISSON, acq("orders:9", TOK_A, NULL, 0), false, NULL).outcome,
        BACKEND_DONE);
    h = force_of("orders:9", false);
    cr_assert_str_eq(h.kind, "redisson");
    cr_assert_eq(cmd_int("EXISTS %s", "orders:9"), 0);

    /* Redisson's semaphore: every permit taken goes back to the free count. */
    struct script_ctx ctx = ctx_of(false);
    ctx.formats = redisson_all();
    struct backend_req a = acq("sem:9", TOK_A, NULL, 0), b = acq("sem:9", TOK_B, NULL, 0);
    a.kind = b.kind = LOCK_SEMAPHORE;
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &a, 2, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(run_ctx(&ctx, SCRIPT_ACQUIRE_SEM, &b, 2, NULL).outcome, BACKEND_DONE);
    cr_assert_eq(get_ll("sem:9"), 0);
    sub = subscriber("redisson_sc:{sem:9}", false);
    h = force_of("sem:9", false);
    cr_assert_str_eq(h.kind, "redisson:semaphore");
    cr_assert_eq(h.permits, 2);
    cr_assert_eq(cmd_int("EXISTS %s", "{sem:9}:timeout"), 0);
    cr_assert_eq(get_ll("sem:9"), 2);
    cr_assert_str_eq(next_message(sub, m, sizeof m), "2");
    redisFree(sub);

    /* On Redis Cluster the script names the lock key alone. (The waiting
     * host, whose entry stayed, takes the name first.) */
    cr_assert_eq(run(SCRIPT_ACQUIRE, acq("job", TOK_C, "00000000000000bb", 1000)).outcome,
                 BACKEND_DONE);
    struct script_ctx sh = ctx_of(true);
    struct backend_req q = {.op = BACKEND_FORCE, .name = "job", .len = 3};
    struct script_args args;
    cr_assert_eq(script_command(SCRIPT_FORCE, NULL, &sh, &q, 0, &args), 0);
    cr_assert_str_eq(args.v[2], "1");
    h = force_of("job", true);
    cr_assert_str_eq(h.value, TOK_C);
    cr_assert_eq(cmd_int("EXISTS %s", n.key), 0);
}
