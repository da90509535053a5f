/* SPDX-License-Identifier: BSD-3-Clause */
/* test_formats.c -- the [formats] section against a real redis-server and
 * dlockd, with Redisson's side played by the test itself: the Redis
 * commands Redisson's RLock, RReadWriteLock and RPermitExpirableSemaphore
 * run (docs/redisson.md), in small Lua scripts of the same effect, on the
 * test's own connection. No Java: the keys, fields, counts, TTLs and
 * messages both sides read and write are checked one by one.
 *
 * - RLock (orders:*): the bare name as key, dlock's field and count, the
 *   holder as dlockctl shows it, busy both ways, Redisson's unlock message
 *   waking a dlock waiter (with the fallback retry at its default, and far
 *   off), dlock's release and crash release publishing it, re-entrant
 *   holds as the count, both watchdogs side by side, a dead Redisson
 *   holder's key left to expire.
 * - The kinds each format takes, and the refusals of the others.
 * - RReadWriteLock (reports:*): readers of both sides (and of two hosts)
 *   together, writers of both sides waiting for them, the unlock messages
 *   (0 after a reader, 1 after a writer) waking dlock's waiters, readers of
 *   one host joined on one grant, dlock's renewals never shortening the
 *   hash that Redisson's reader needs.
 * - RPermitExpirableSemaphore (encoders:*): the free count and the permits
 *   with their expiries, a size mismatch, waiters, lapsed permits of
 *   Redisson's reclaimed, Redisson's release message waking a dlock waiter.
 *
 * How soon a message wakes a waiter is printed, never asserted; where the
 * wake-up must be the message's, the fallback retry is a minute and the
 * holder's key lasts 30 s, longer than any wait of the test. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"

#define TTL 30000

#define FORMATS                                                                                    \
    "[formats]\n"                                                                                  \
    "redisson = orders:*\n"                                                                        \
    "redisson_rwlock = reports:*\n"                                                                \
    "redisson_semaphore = encoders:*\n"

/* Redisson's client: the id of its connection manager and a thread id. */
#define R_ID    "6a1f3c1e-2b7d-4e8a-9c55-0d2f1b3a4c5e"
#define R_FIELD R_ID ":57"
#define R_WRITE R_FIELD ":write"

static const dlock_lock_spec SHARED = {.kind = DLOCK_KIND_SHARED};

static dlock_lock_spec semaphore(uint32_t permits)
{
    return (dlock_lock_spec){.kind = DLOCK_KIND_SEMAPHORE, .permits = permits};
}

/* Redis and an agent whose [agent] section has agent_ini (may be NULL) and
 * whose [formats] names orders:*, reports:* and encoders:*. */
static void start(const char *agent_ini)
{
    char ini[512];
    snprintf(ini, sizeof ini, "%s\n" FORMATS, agent_ini ? agent_ini : "");
    h_start(ini);
}

/* The same with two agents on the Redis, standing for two hosts. */
static void start_two(const char *agent_ini)
{
    char ini[512];
    snprintf(ini, sizeof ini, "%s\n" FORMATS, agent_ini ? agent_ini : "");
    h_start_two(ini);
}

/* ---- Redisson's side ---- */

/* RLock's acquire: the key when it does not exist or holds the field
 * (re-entry: one more hold), with the lease's TTL. KEYS: the name. ARGV:
 * the TTL, the field. nil: taken; else the holder's PTTL. */
static const char R_LOCK[] =
    "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) "
    "return nil end return redis.call('pttl', KEYS[1])";
/* RLock's watchdog: PEXPIRE while the field is there. 1 renewed, 0 not. */
static const char R_RENEW[] = "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
                              "redis.call('pexpire', KEYS[1], ARGV[1]) return 1 end return 0";
/* RLock's unlock: one hold less; at 0 the key goes and 0 is published on
 * the channel (KEYS[2]). nil: not held; 0: holds left; 1: unlocked. */
static const char R_UNLOCK[] =
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then "
    "redis.call('pexpire', KEYS[1], ARGV[1]) return 0 end "
    "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], 0) return 1";

/* RReadWriteLock's read lock: KEYS: the name, the prefix of the hold's
 * timeout keys ("{NAME}:FIELD:rwlock_timeout"). ARGV: the TTL, the field,
 * the same thread's write field. A hold I has the key PREFIX:I. */
static const char RW_READ_LOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if mode == false then redis.call('hset', KEYS[1], 'mode', 'read') "
    "redis.call('hset', KEYS[1], ARGV[2], 1) redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1]) "
    "redis.call('pexpire', KEYS[1], ARGV[1]) return nil end "
    "if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then "
    "local i = redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "redis.call('set', KEYS[2] .. ':' .. i, 1, 'px', ARGV[1]) "
    "redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1]))) "
    "return nil end return redis.call('pttl', KEYS[1])";
/* Its read unlock: KEYS: the name, the channel, the timeout prefix, "{NAME}".
 * ARGV: the field. While other holds remain, the hash lasts as long as the
 * latest of their timeout keys; else it goes and 0 is published. */
static const char RW_READ_UNLOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if mode == false then redis.call('publish', KEYS[2], 0) return 1 end "
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end "
    "local n = redis.call('hincrby', KEYS[1], ARGV[1], -1) "
    "if n == 0 then redis.call('hdel', KEYS[1], ARGV[1]) end "
    "redis.call('del', KEYS[3] .. ':' .. (n + 1)) "
    "if redis.call('hlen', KEYS[1]) > 1 then local latest = -3 "
    "for _, f in ipairs(redis.call('hkeys', KEYS[1])) do "
    "local c = tonumber(redis.call('hget', KEYS[1], f)) "
    "if type(c) == 'number' then for i = c, 1, -1 do latest = math.max(latest, "
    "redis.call('pttl', KEYS[4] .. ':' .. f .. ':rwlock_timeout:' .. i)) end end end "
    "if latest > 0 then redis.call('pexpire', KEYS[1], latest) return 0 end "
    "if mode == 'write' then return 0 end end "
    "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], 0) return 1";
/* Its write lock: KEYS: the name. ARGV: the TTL, the write field. */
static const char RW_WRITE_LOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if mode == false then redis.call('hset', KEYS[1], 'mode', 'write') "
    "redis.call('hset', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) return nil "
    "end if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1) "
    "redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1]) return nil end "
    "return redis.call('pttl', KEYS[1])";
/* Its write unlock: KEYS: the name, the channel. ARGV: the TTL, the write
 * field. The last hold deletes the hash (publishing 1), unless the
 * thread's reads remain (mode read). */
static const char RW_WRITE_UNLOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if mode == false then redis.call('publish', KEYS[2], 1) return 1 end "
    "if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end "
    "if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then "
    "redis.call('pexpire', KEYS[1], ARGV[1]) return 0 end "
    "redis.call('hdel', KEYS[1], ARGV[2]) "
    "if redis.call('hlen', KEYS[1]) == 1 then redis.call('del', KEYS[1]) "
    "redis.call('publish', KEYS[2], 1) else redis.call('hset', KEYS[1], 'mode', 'read') end "
    "return 1";

/* RPermitExpirableSemaphore's acquire of one permit: KEYS: the name (the
 * free count), "{NAME}:timeout", the channel. ARGV: the permit's expiry
 * (ms since 1970, the client's clock), the client's now, the permit id (16
 * bytes). A lapsed permit is given back first (the free count published);
 * 'OK': taken; nil: no permit free. */
static const char SEM_ACQUIRE[] =
    "local gone = redis.call('zrangebyscore', KEYS[2], 0, ARGV[2], 'limit', 0, 1) "
    "if #gone > 0 then redis.call('zrem', KEYS[2], unpack(gone)) "
    "local v = redis.call('incrby', KEYS[1], #gone) "
    "if tonumber(v) > 0 then redis.call('publish', KEYS[3], v) end end "
    "local v = redis.call('get', KEYS[1]) "
    "if v ~= false and tonumber(v) >= 1 then redis.call('decrby', KEYS[1], 1) "
    "redis.call('zadd', KEYS[2], ARGV[1], ARGV[3]) return 'OK' end return nil";
/* Its release: KEYS: the name, the channel, "{NAME}:timeout". ARGV: the
 * permit id, the client's now. The permit goes back and the free count is
 * published. 1 released, 0 not held (or lapsed). */
static const char SEM_RELEASE[] =
    "local e = redis.call('zscore', KEYS[3], ARGV[1]) "
    "if redis.call('zrem', KEYS[3], ARGV[1]) ~= 1 then return 0 end "
    "redis.call('publish', KEYS[2], redis.call('incrby', KEYS[1], 1)) "
    "if tonumber(e) <= tonumber(ARGV[2]) then return 0 end return 1";

/* The reply of a script run: REDIS_REPLY_NIL is -1 (Redisson's "taken"),
 * an integer its value, a status or string 0; the reply's type in *type. */
static long long eval_reply(redisReply *r, int *type)
{
    cr_assert_not_null(r);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "script error: %s", r->str);
    *type = r->type;
    long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : r->type == REDIS_REPLY_NIL ? -1 : 0;
    freeReplyObject(r);
    return n;
}

/* RLock's acquire: 1 taken, 0 busy (tryLock(0) is false). */
static int r_lock(const char *name, int ttl, const char *field)
{
    int type;
    eval_reply(h_redis_cmd("EVAL %s 1 %s %d %s", R_LOCK, name, ttl, field), &type);
    cr_assert(type == REDIS_REPLY_NIL || type == REDIS_REPLY_INTEGER);
    return type == REDIS_REPLY_NIL;
}

static long long r_renew(const char *name, int ttl, const char *field)
{
    int type;
    return eval_reply(h_redis_cmd("EVAL %s 1 %s %d %s", R_RENEW, name, ttl, field), &type);
}

static const char *lock_channel(const char *name)
{
    return h_keepf("redisson_lock__channel:{%s}", name);
}

static const char *rw_channel(const char *name)
{
    return h_keepf("redisson_rwlock:{%s}", name);
}

static const char *sem_channel(const char *name)
{
    return h_keepf("redisson_sc:{%s}", name);
}

/* RLock's unlock: -1 not held, 0 holds left, 1 unlocked (published). */
static long long r_unlock(const char *name, int ttl, const char *field)
{
    int type;
    return eval_reply(
        h_redis_cmd("EVAL %s 2 %s %s %d %s", R_UNLOCK, name, lock_channel(name), ttl, field),
        &type);
}

/* "{NAME}:FIELD:rwlock_timeout" */
static const char *rw_timeout_prefix(const char *name, const char *field)
{
    static char b[4][512];
    static int next;
    char *s = b[next++ % 4];
    snprintf(s, sizeof b[0], "{%s}:%s:rwlock_timeout", name, field);
    return s;
}

static int rw_read_lock(const char *name, int ttl, const char *field)
{
    int type;
    char write[256];
    snprintf(write, sizeof write, "%s:write", field);
    eval_reply(h_redis_cmd("EVAL %s 2 %s %s %d %s %s", RW_READ_LOCK, name,
                           rw_timeout_prefix(name, field), ttl, field, write),
               &type);
    return type == REDIS_REPLY_NIL;
}

static long long rw_read_unlock(const char *name, const char *field)
{
    int type;
    char tag[256];
    snprintf(tag, sizeof tag, "{%s}", name);
    return eval_reply(h_redis_cmd("EVAL %s 4 %s %s %s %s %s", RW_READ_UNLOCK, name,
                                  rw_channel(name), rw_timeout_prefix(name, field), tag, field),
                      &type);
}

static int rw_write_lock(const char *name, int ttl, const char *wfield)
{
    int type;
    eval_reply(h_redis_cmd("EVAL %s 1 %s %d %s", RW_WRITE_LOCK, name, ttl, wfield), &type);
    return type == REDIS_REPLY_NIL;
}

static long long rw_write_unlock(const char *name, int ttl, const char *wfield)
{
    int type;
    return eval_reply(
        h_redis_cmd("EVAL %s 2 %s %s %d %s", RW_WRITE_UNLOCK, name, rw_channel(name), ttl, wfield),
        &type);
}

static const char *sem_zset(const char *name)
{
    static char b[4][256];
    static int next;
    char *s = b[next++ % 4];
    snprintf(s, sizeof b[0], "{%s}:timeout", name);
    return s;
}

/* Milliseconds since 1970: Redisson's clock, on this host as Redis is. */
static long long epoch_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* A permit id of Redisson's: 16 bytes. */
static const char R_PERMIT[16] = {'\x8c', '\x6a', '\x01', '\xfe', '\x10', '\x22', '\x33', '\x44',
                                  '\x55', '\x66', '\x77', '\x88', '\x99', '\xaa', '\xbb', '\xcc'};
#define R_PERMIT_HEX "8c6a01fe102233445566778899aabbcc"

/* 1 taken, 0 no permit free. */
static int sem_acquire(const char *name, long long expiry, const char *id)
{
    int type;
    eval_reply(h_redis_cmd("EVAL %s 3 %s %s %s %lld %lld %b", SEM_ACQUIRE, name, sem_zset(name),
                           sem_channel(name), expiry, epoch_ms(), id, (size_t)16),
               &type);
    cr_assert(type == REDIS_REPLY_NIL || type == REDIS_REPLY_STATUS || type == REDIS_REPLY_STRING);
    return type != REDIS_REPLY_NIL;
}

static long long sem_release(const char *name, const char *id)
{
    int type;
    return eval_reply(h_redis_cmd("EVAL %s 3 %s %s %s %b %lld", SEM_RELEASE, name,
                                  sem_channel(name), sem_zset(name), id, (size_t)16, epoch_ms()),
                      &type);
}

/* ---- reading Redis ---- */

/* The only field of a hash other than "mode" (kept), which must be the
 * only one. */
static char *only_field(const char *key)
{
    redisReply *r = h_redis_cmd("HKEYS %s", key);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    char *f = NULL;
    int n = 0;
    for (size_t i = 0; i < r->elements; i++)
        if (strcmp(r->element[i]->str, "mode") != 0) {
            f = h_keep(r->element[i]->str);
            n++;
        }
    freeReplyObject(r);
    cr_assert_eq(n, 1, "%s has %d holder fields", key, n);
    return f;
}

/* The holder fields of a hash (not "mode") into out[] (kept); how many. */
static int fields(const char *key, char **out, int max)
{
    redisReply *r = h_redis_cmd("HKEYS %s", key);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    int n = 0;
    for (size_t i = 0; i < r->elements; i++)
        if (strcmp(r->element[i]->str, "mode") != 0 && n < max)
            out[n++] = h_keep(r->element[i]->str);
    freeReplyObject(r);
    return n;
}

/* dlock's field: 32 lowercase hex characters (the lease's token), then
 * suffix (":0", or ":0:write"). */
static int is_dlock_field(const char *f, const char *suffix)
{
    if (!f || strlen(f) != 32 + strlen(suffix) || strcmp(f + 32, suffix) != 0)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!((f[i] >= '0' && f[i] <= '9') || (f[i] >= 'a' && f[i] <= 'f')))
            return 0;
    return 1;
}

static const char *str_of(const char *s)
{
    return s ? s : "(nil)";
}

/* ---- a subscriber of the test's own ---- */

static redisContext *subscribe(const char *channel)
{
    int ms = h_scaled_ms(H_EVENT_MS);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *sub = redisConnectUnixWithTimeout(H.redis_sock, tv);
    cr_assert(sub && !sub->err, "cannot connect the subscriber");
    redisSetTimeout(sub, tv);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel);
    cr_assert_not_null(r, "SUBSCRIBE %s: %s", channel, sub->errstr);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    return sub;
}

/* The next message on the subscriber's channel (kept); fails the test when
 * none comes within H_EVENT_MS. */
static char *next_message(redisContext *sub, const char *channel)
{
    void *vr = NULL;
    cr_assert_eq(redisGetReply(sub, &vr), REDIS_OK, "no message on %s within %d ms: %s", channel,
                 h_scaled_ms(H_EVENT_MS), sub->errstr);
    redisReply *r = vr;
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 3);
    cr_assert_str_eq(r->element[0]->str, "message");
    cr_assert_str_eq(r->element[1]->str, channel);
    char *m = h_keep(r->element[2]->str);
    freeReplyObject(r);
    return m;
}

/* ---- dlock's side ---- */

static int acq(struct h_cl *cl, const char *name, int64_t wait_ms, uint32_t flags,
               const dlock_lock_spec *spec, dlock_lease **out)
{
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = wait_ms, .flags = flags};
    return dlock_lease_acquire_spec(cl->c, name, &o, spec, out);
}

static void expect_rc(int rc, int want, const char *what, struct h_cl *cl)
{
    cr_assert_eq(rc, want, "%s: %s (%d), expected %s: %s", what, dlock_strerror(rc), rc,
                 dlock_strerror(want), dlock_client_strerror(cl->c, rc));
}

static dlock_lease *must(struct h_cl *cl, const char *name, uint32_t flags,
                         const dlock_lock_spec *spec)
{
    dlock_lease *l = NULL;
    expect_rc(acq(cl, name, DLOCK_WAIT_NONE, flags, spec, &l), 0, name, cl);
    cr_assert_not_null(l);
    return l;
}

/* An acquire that waits for ever, taken in by the agent (the ping's answer
 * comes after the acquire was queued). */
static void wait_async(struct h_cl *cl, const char *name, const dlock_lock_spec *spec,
                       struct h_acq *a)
{
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = DLOCK_WAIT_FOREVER};
    h_acquire_spec_async(cl, name, &o, spec, a);
    cr_assert_eq(dlock_client_ping(cl->c), 0);
}

/* Every client has had the answers the agent gives at once. */
static void settle(void)
{
    for (int i = 0; i < H_MAX_CLIENTS; i++)
        if (H.clients[i])
            cr_assert_eq(dlock_client_ping(H.clients[i]->c), 0);
    h_pump_all(5);
}

/* dlockctl with the agent's client and status sockets; its output (this
 * run's alone) in ctl_out(). */
#define CTL(...)                                                                                   \
    (unlink(h_path("ctl.out")),                                                                    \
     h_ctl(H_EVENT_MS, "-s", H.agent[0].sock, "-S", h_path("status0.sock"), __VA_ARGS__, NULL))

static const char *ctl_out(void)
{
    const char *s = h_read_file(h_path("ctl.out"));
    return s ? s : "";
}

/* ---- RLock ---- */

/* The key is the bare name, a hash of dlock's field and its count, with
 * the lease's TTL; nothing under the prefix but dlock's own marks; the
 * holder, the status and the lease list show it. */
ITEST(formats, the_key_is_the_bare_name_with_dlocks_field)
{
    start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = must(a, "orders:1", 0, NULL);
    cr_assert_gt(dlock_lease_fence(l), 0);
    cr_assert_eq(h_redis_int("HLEN %s", "orders:1"), 1, "orders:1 is not a hash of one field");
    char *f = only_field("orders:1");
    cr_assert(is_dlock_field(f, ":0"), "dlock's field: %s", f);
    cr_assert_str_eq(str_of(h_redis_hget("orders:1", f)), "1");
    long long pttl = h_redis_pttl("orders:1");
    cr_assert(pttl > 0 && pttl <= TTL, "PTTL %lld", pttl);
    cr_assert_eq(h_redis_exists(h_key("orders:1")), 0, "a key under the prefix");
    cr_assert_eq(h_redis_count_keys("dlock:orders*"), 0);

    cr_assert_eq(CTL("holder", "orders:1"), 0, "%s", ctl_out());
    char want[256];
    snprintf(want, sizeof want,
             "orders:1: held in Redisson's format by 1 holder: dlock lease %.32s, 1 hold", f);
    cr_assert(strstr(ctl_out(), want), "holder: %s", ctl_out());
    cr_assert_eq(CTL("holder", "--json", "orders:1"), 0, "%s", ctl_out());
    cr_assert(h_json_valid(ctl_out()), "%s", ctl_out());
    snprintf(want, sizeof want, "{\"field\":\"%s\",\"dlock\":true,\"holds\":1,", f);
    cr_assert(strstr(ctl_out(), "\"kind\":\"redisson\"") && strstr(ctl_out(), want), "%s",
              ctl_out());
    cr_assert(strstr(ctl_out(), "\"held\":true,\"dlock\":true"), "a dlock lease holds it: %s",
              ctl_out());

    cr_assert_eq(CTL("status"), 0, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "orders:1"), "status: %s", ctl_out());
    cr_assert_eq(CTL("leases", "orders:*"), 0, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "orders:1"), "leases: %s", ctl_out());

    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE("orders:1");
}

/* Redisson holds: dlock is busy (libdlock, dlockctl), leaves the key as it
 * is, and shows Redisson's field and count; a dlock waiter is granted after
 * Redisson's unlock, not before. The fallback retry is at its default. */
ITEST(formats, a_redisson_hold_is_busy_and_its_unlock_lets_the_waiter_in)
{
    start(NULL);
    struct h_cl *a = h_client();
    cr_assert(r_lock("orders:2", TTL, R_FIELD));
    long long before = h_redis_pttl("orders:2");
    dlock_lease *x = NULL;
    expect_rc(acq(a, "orders:2", DLOCK_WAIT_NONE, 0, NULL, &x), DLOCK_EBUSY, "try-once", a);
    int st = CTL("run", "-w", "0", "orders:2", "--", "true");
    cr_assert_eq(st, 75, "dlockctl run -w 0 on Redisson's hold: exit %d: %s", st, ctl_out());
    cr_assert_eq(h_redis_int("HLEN %s", "orders:2"), 1);
    cr_assert_str_eq(str_of(h_redis_hget("orders:2", R_FIELD)), "1");
    long long after = h_redis_pttl("orders:2");
    cr_assert(after > 0 && after <= before, "dlock changed Redisson's TTL: %lld, then %lld", before,
              after);

    /* Redisson re-enters: the count is 2, as the holder shows. */
    cr_assert(r_lock("orders:2", TTL, R_FIELD));
    cr_assert_eq(CTL("holder", "orders:2"), 0, "%s", ctl_out());
    cr_assert(
        strstr(ctl_out(), "held in Redisson's format by 1 holder: Redisson " R_FIELD ", 2 holds"),
        "holder: %s", ctl_out());
    cr_assert_eq(CTL("holder", "--json", "orders:2"), 0, "%s", ctl_out());
    cr_assert(h_json_valid(ctl_out()), "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "{\"field\":\"" R_FIELD "\",\"dlock\":false,\"holds\":2,"), "%s",
              ctl_out());
    cr_assert_eq(r_unlock("orders:2", TTL, R_FIELD), 0, "one of two holds");

    struct h_acq w;
    wait_async(a, "orders:2", NULL, &w);
    /* The agent listens on Redisson's channel once it found the name taken. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, lock_channel("orders:2")) == 1);
    H_HOLDS_FOR(300, !w.done); /* several fallback retries, all busy */
    cr_assert_eq(w.done, 0, "granted while Redisson held the key");
    int64_t t0 = h_now_ms();
    cr_assert_eq(r_unlock("orders:2", TTL, R_FIELD), 1, "Redisson's last unlock");
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s", dlock_strerror(w.status));
    fprintf(stderr,
            "formats: RLock: dlock waiter granted %lld ms after Redisson's unlock "
            "(DEL + PUBLISH); the fallback retry is 100-150 ms here\n",
            (long long)(w.at_ms - t0));
    char *f = only_field("orders:2");
    cr_assert(is_dlock_field(f, ":0"), "after the grant: %s", f);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_KEY_GONE("orders:2");
}

/* The same with the fallback retry a minute off and Redisson's key 30 s:
 * only the unlock message can wake the waiter within the test's wait. */
ITEST(formats, redissons_unlock_message_wakes_the_waiter)
{
    start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client();
    cr_assert(r_lock("orders:2m", TTL, R_FIELD));
    struct h_acq w;
    wait_async(a, "orders:2m", NULL, &w);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, lock_channel("orders:2m")) == 1);
    settle();
    cr_assert_eq(w.done, 0, "granted while Redisson held the key");
    int64_t t0 = h_now_ms();
    cr_assert_eq(r_unlock("orders:2m", TTL, R_FIELD), 1);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s", dlock_strerror(w.status));
    fprintf(stderr,
            "formats: RLock: dlock waiter granted %lld ms after Redisson's unlock message "
            "(fallback retry 60 s, key's PTTL 30 s)\n",
            (long long)(w.at_ms - t0));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* dlock holds: Redisson's tryLock(0) is false and its unlock does
 * nothing; dlock's release deletes the key and publishes 0 on Redisson's
 * channel, after which Redisson takes the key. */
ITEST(formats, dlocks_release_publishes_redissons_unlock_message)
{
    start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = must(a, "orders:3", 0, NULL);
    char *f = only_field("orders:3");
    cr_assert_eq(r_lock("orders:3", TTL, R_FIELD), 0, "Redisson took a key dlock holds");
    cr_assert_eq(r_unlock("orders:3", TTL, R_FIELD), -1, "Redisson unlocked dlock's hold");
    cr_assert_eq(r_renew("orders:3", TTL, R_FIELD), 0, "Redisson renewed dlock's hold");
    cr_assert_str_eq(str_of(h_redis_hget("orders:3", f)), "1");
    cr_assert_eq(h_redis_int("HLEN %s", "orders:3"), 1);

    redisContext *sub = subscribe(lock_channel("orders:3"));
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_str_eq(next_message(sub, lock_channel("orders:3")), "0");
    H_KEY_GONE("orders:3");
    /* Redisson's waiter tries again on the message, and gets the key. */
    cr_assert(r_lock("orders:3", TTL, R_FIELD), "Redisson's retry after the message");
    cr_assert_eq(r_unlock("orders:3", TTL, R_FIELD), 1);
    cr_assert_str_eq(next_message(sub, lock_channel("orders:3")), "0");
    redisFree(sub);
}

/* A dlock holder process dies: the agent releases its key at once and
 * publishes Redisson's unlock message. */
ITEST(formats, a_dead_holders_key_goes_with_the_message)
{
    start(NULL);
    struct h_holder h;
    h_holder_start(&h, "orders:4", TTL);
    cr_assert(is_dlock_field(only_field("orders:4"), ":0"));
    redisContext *sub = subscribe(lock_channel("orders:4"));
    h_holder_kill(&h, SIGKILL);
    cr_assert_str_eq(next_message(sub, lock_channel("orders:4")), "0");
    H_KEY_GONE("orders:4");
    redisFree(sub);
}

/* Re-entrant holds are the hash's count: 2, then 1, then the key goes.
 * Re-entry does not cross sides. */
ITEST(formats, reentrant_holds_are_the_hold_count)
{
    start(NULL);
    struct h_cl *a = h_client();
    dlock_lease *l = must(a, "orders:5", DLOCK_ACQUIRE_REENTRANT, NULL);
    char *f = only_field("orders:5");
    cr_assert_str_eq(str_of(h_redis_hget("orders:5", f)), "1");
    cr_assert_eq(must(a, "orders:5", DLOCK_ACQUIRE_REENTRANT, NULL), l);
    cr_assert_eq(dlock_lease_holds(l), 2);
    /* A renewal writes the count soon after the re-entry. */
    H_WAIT_UNTIL(H_EVENT_MS, strcmp(str_of(h_redis_hget("orders:5", f)), "2") == 0);
    cr_assert_eq(CTL("holder", "orders:5"), 0, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), ", 2 holds"), "holder: %s", ctl_out());
    cr_assert_eq(r_lock("orders:5", TTL, R_FIELD), 0, "Redisson entered dlock's hold");
    cr_assert_eq(h_redis_int("HLEN %s", "orders:5"), 1);

    cr_assert_eq(dlock_lease_release_sync(l), 0);
    cr_assert_eq(dlock_lease_holds(l), 1);
    H_WAIT_UNTIL(H_EVENT_MS, strcmp(str_of(h_redis_hget("orders:5", f)), "1") == 0);
    cr_assert_eq(r_lock("orders:5", TTL, R_FIELD), 0, "Redisson took a key with a hold left");
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_KEY_GONE("orders:5");
}

/* A lease of a short TTL held for several TTLs keeps its hash (dlock's
 * renewals PEXPIRE it to the TTL), while Redisson's watchdog renews
 * another key of its own beside it and cannot renew dlock's. The TTL is a
 * second, as in test_watchdog.c, so that a loaded machine does not make a
 * renewal late enough to lose the lease. */
ITEST(formats, both_watchdogs_renew_their_own_keys_only)
{
    start(NULL);
    struct h_cl *a = h_client();
    dlock_acquire_options o = {.ttl_ms = 1000};
    dlock_lease *l = NULL;
    expect_rc(dlock_lease_acquire(a->c, "orders:6", &o, &l), 0, "orders:6", a);
    int64_t first = dlock_lease_deadline_ns(l);
    char *f = only_field("orders:6");
    cr_assert(r_lock("orders:6r", TTL, R_FIELD));

    int64_t end = h_now_ms() + 3500;
    int samples = 0;
    long long rmin = TTL;
    while (h_now_ms() < end) {
        cr_assert_str_eq(str_of(h_redis_hget("orders:6", f)), "1", "dlock's hold after %d samples",
                         samples);
        cr_assert_eq(h_redis_int("HLEN %s", "orders:6"), 1);
        long long p = h_redis_pttl("orders:6");
        cr_assert(p > 0 && p <= 1000, "orders:6: PTTL %lld (TTL 1000)", p);
        /* Redisson's watchdog: its own key, never dlock's. */
        cr_assert_eq(r_renew("orders:6", TTL, R_FIELD), 0);
        cr_assert_eq(r_renew("orders:6r", TTL, R_FIELD), 1);
        cr_assert_str_eq(str_of(h_redis_hget("orders:6r", R_FIELD)), "1");
        cr_assert_eq(h_redis_int("HLEN %s", "orders:6r"), 1, "dlock wrote into Redisson's hold");
        long long rp = h_redis_pttl("orders:6r");
        if (rp < rmin)
            rmin = rp;
        cr_assert_eq(h_events(a, NULL, DLOCK_STATE_LOST), 0, "the lease was lost");
        samples++;
        h_pump_all(20);
    }
    cr_assert_geq(samples, 5, "only %d samples", samples);
    cr_assert_gt(rmin, 1000, "Redisson's key came down to %lld ms", rmin);
    cr_assert_gt(dlock_lease_deadline_ns(l), first, "the lease was not renewed");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
    H_KEY_GONE("orders:6");
    cr_assert_eq(r_unlock("orders:6r", TTL, R_FIELD), 1);
}

/* A Redisson holder that died (its watchdog stopped, no unlock) leaves its
 * key to expire; a dlock waiter gets the name once it has, not before, with
 * the fallback retry a minute off (the agent retries at the holder's PTTL). */
ITEST(formats, a_dead_redisson_holders_key_expires_and_the_waiter_gets_it)
{
    start("retry_fallback_ms = 60000");
    struct h_cl *a = h_client();
    int64_t t0 = h_now_ms(); /* before the lock: the key cannot expire before t0 + 700 */
    cr_assert(r_lock("orders:8", 700, R_FIELD));
    struct h_acq w;
    wait_async(a, "orders:8", NULL, &w);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s", dlock_strerror(w.status));
    cr_assert_geq(w.at_ms - t0, 700 - 1, "granted %lld ms after a key of 700 ms was set",
                  (long long)(w.at_ms - t0));
    fprintf(stderr,
            "formats: RLock: dlock waiter granted %lld ms after a dead holder's key of 700 ms was "
            "set\n",
            (long long)(w.at_ms - t0));
    cr_assert(is_dlock_field(only_field("orders:8"), ":0"));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
}

/* ---- kinds ---- */

static void expect_refused(struct h_cl *cl, const char *name, const dlock_lock_spec *spec,
                           const char *words)
{
    dlock_lease *x = NULL;
    int rc = acq(cl, name, DLOCK_WAIT_NONE, 0, spec, &x);
    const char *why = dlock_client_strerror(cl->c, rc);
    cr_assert_eq(rc, DLOCK_EINVAL, "%s as kind %u: %s (%d): %s", name, spec ? spec->kind : 0,
                 dlock_strerror(rc), rc, why);
    cr_assert(strstr(why, words), "%s as kind %u: \"%s\" does not say \"%s\"", name,
              spec ? spec->kind : 0, why, words);
    rc = acq(cl, name, DLOCK_WAIT_FOREVER, 0, spec, &x);
    cr_assert_eq(rc, DLOCK_EINVAL, "%s as kind %u, waiting: %s (%d)", name, spec ? spec->kind : 0,
                 dlock_strerror(rc), rc);
    cr_assert_null(x);
}

/* RLock names are exclusive, RReadWriteLock names shared or exclusive,
 * semaphore names semaphores; anything else is refused with DLOCK_EINVAL
 * and words naming the format, and leaves no key. */
ITEST(formats, each_format_takes_its_kinds_only)
{
    start(NULL);
    struct h_cl *a = h_client();
    dlock_lock_spec two = semaphore(2);
    expect_refused(a, "orders:7", &SHARED, "Redisson's RLock format");
    expect_refused(a, "orders:7", &two, "Redisson's RLock format");
    expect_refused(a, "reports:7", &two, "Redisson's RReadWriteLock format");
    expect_refused(a, "encoders:7", NULL, "Redisson's semaphore format");
    expect_refused(a, "encoders:7", &SHARED, "Redisson's semaphore format");
    /* dlockctl: DLOCK_EINVAL is a usage error (64), with the agent's words */
    int st = CTL("run", "-S", "orders:7", "--", "true");
    cr_assert_eq(st, 64, "dlockctl run -S on an RLock name: exit %d: %s", st, ctl_out());
    cr_assert(strstr(ctl_out(), "Redisson's RLock format"), "%s", ctl_out());
    st = CTL("run", "-x", "encoders:7", "--", "true");
    cr_assert_eq(st, 64, "dlockctl run -x on a semaphore name: exit %d: %s", st, ctl_out());
    cr_assert(strstr(ctl_out(), "Redisson's semaphore format"), "%s", ctl_out());
    cr_assert_eq(h_redis_count_keys("*:7*"), 0, "a refused acquire left a key");

    /* and the kinds they take */
    dlock_lease *l[4] = {must(a, "orders:7", 0, NULL), must(a, "reports:7", 0, &SHARED),
                         must(a, "reports:7x", 0, NULL), must(a, "encoders:7", 0, &two)};
    cr_assert_eq(dlock_lease_kind(l[3]), DLOCK_KIND_SEMAPHORE);
    /* the first acquire of a semaphore made its free count: 2 less 1 */
    cr_assert_str_eq(str_of(h_redis_get("encoders:7")), "1");
    cr_assert_eq(h_redis_int("ZCARD %s", sem_zset("encoders:7")), 1);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(dlock_lease_release_sync(l[i]), 0);
}

/* ---- RReadWriteLock ---- */

/* Readers of both sides hold together, in Redisson's layout; writers of
 * both sides wait for every reader; a dlock writer holds as Redisson's
 * does; the unlock messages (0 after a reader, 1 after a writer) wake
 * dlock's waiters, with the fallback retry a minute off. dlock's two
 * readers are on two hosts (agents), each with a grant of its own. */
ITEST(formats, rwlock_readers_share_and_writers_wait_on_both_sides)
{
    start_two("retry_fallback_ms = 60000");
    struct h_cl *r1 = h_client_at(0), *r2 = h_client_at(1), *w = h_client_at(0);
    dlock_lease *l1 = must(r1, "reports:1", 0, &SHARED), *l2 = must(r2, "reports:1", 0, &SHARED);
    cr_assert_str_eq(str_of(h_redis_hget("reports:1", "mode")), "read");
    char *f[4];
    cr_assert_eq(fields("reports:1", f, 4), 2, "two readers' fields");
    for (int i = 0; i < 2; i++) {
        cr_assert(is_dlock_field(f[i], ":0"), "reader's field %s", f[i]);
        cr_assert_str_eq(str_of(h_redis_hget("reports:1", f[i])), "1");
        char k[512];
        snprintf(k, sizeof k, "%s:1", rw_timeout_prefix("reports:1", f[i]));
        long long p = h_redis_pttl(k);
        cr_assert(p > 0 && p <= TTL, "%s: PTTL %lld", k, p);
    }
    cr_assert_gt(h_redis_pttl("reports:1"), 0);

    /* Redisson's writer cannot; its reader joins and leaves, and the hash
     * stays while dlock's readers' timeout keys last. */
    cr_assert_eq(rw_write_lock("reports:1", TTL, R_WRITE), 0, "Redisson wrote beside readers");
    cr_assert(rw_read_lock("reports:1", TTL, R_FIELD), "Redisson's reader beside dlock's");
    struct h_acq wa;
    wait_async(w, "reports:1", NULL, &wa);
    cr_assert_eq(rw_read_unlock("reports:1", R_FIELD), 0, "the hash went with readers left");
    cr_assert_str_eq(str_of(h_redis_hget("reports:1", "mode")), "read");
    cr_assert_gt(h_redis_pttl("reports:1"), 0, "no TTL after Redisson's read unlock");
    cr_assert_eq(h_redis_int("HLEN %s", "reports:1"), 3);

    cr_assert_eq(dlock_lease_release_sync(l1), 0);
    settle();
    cr_assert_eq(wa.done, 0, "the writer was granted beside a reader");
    cr_assert_eq(rw_write_lock("reports:1", TTL, R_WRITE), 0, "Redisson wrote beside a reader");
    /* The other host's reader goes: its release's message wakes the writer. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, rw_channel("reports:1")) == 1);
    cr_assert_eq(dlock_lease_release_sync(l2), 0);
    H_WAIT_UNTIL(H_EVENT_MS, wa.done);
    cr_assert_eq(wa.status, 0, "writer: %s", dlock_strerror(wa.status));
    cr_assert_str_eq(str_of(h_redis_hget("reports:1", "mode")), "write");
    char *wf = only_field("reports:1");
    cr_assert(is_dlock_field(wf, ":0:write"), "writer's field %s", wf);
    cr_assert_str_eq(str_of(h_redis_hget("reports:1", wf)), "1");
    cr_assert_eq(h_redis_count_keys("{reports:1}:*"), 0, "a reader's timeout key is left");
    cr_assert_eq(rw_read_lock("reports:1", TTL, R_FIELD), 0, "Redisson read beside a writer");
    cr_assert_eq(CTL("holder", "reports:1"), 0, "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "held in Redisson's format, write lock by 1 holder: dlock lease"),
              "holder: %s", ctl_out());
    redisContext *sub = subscribe(rw_channel("reports:1"));
    cr_assert_eq(dlock_lease_release(wa.lease), 0);
    cr_assert_str_eq(next_message(sub, rw_channel("reports:1")), "1");
    H_KEY_GONE("reports:1");
    redisFree(sub);

    /* Redisson's reader holds: a dlock writer waits, and Redisson's read
     * unlock (the hash deleted, 0 published) wakes it. */
    cr_assert(rw_read_lock("reports:1", TTL, R_FIELD));
    struct h_acq wb;
    wait_async(w, "reports:1", NULL, &wb);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, rw_channel("reports:1")) == 1);
    settle();
    cr_assert_eq(wb.done, 0, "a dlock writer beside Redisson's reader");
    int64_t t0 = h_now_ms();
    cr_assert_eq(rw_read_unlock("reports:1", R_FIELD), 1);
    H_WAIT_UNTIL(H_EVENT_MS, wb.done);
    cr_assert_eq(wb.status, 0, "writer: %s", dlock_strerror(wb.status));
    fprintf(stderr,
            "formats: RReadWriteLock: dlock writer granted %lld ms after Redisson's read "
            "unlock (fallback retry 60 s)\n",
            (long long)(wb.at_ms - t0));
    cr_assert_eq(dlock_lease_release_sync(wb.lease), 0);
    H_KEY_GONE("reports:1");

    /* Redisson's writer holds: a dlock reader waits, and the write unlock
     * (1 published) wakes it. */
    cr_assert(rw_write_lock("reports:1", TTL, R_WRITE));
    struct h_acq rb;
    wait_async(r1, "reports:1", &SHARED, &rb);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, rw_channel("reports:1")) == 1);
    settle();
    cr_assert_eq(rb.done, 0, "a dlock reader beside Redisson's writer");
    t0 = h_now_ms();
    cr_assert_eq(rw_write_unlock("reports:1", TTL, R_WRITE), 1);
    H_WAIT_UNTIL(H_EVENT_MS, rb.done);
    cr_assert_eq(rb.status, 0, "reader: %s", dlock_strerror(rb.status));
    fprintf(stderr,
            "formats: RReadWriteLock: dlock reader granted %lld ms after Redisson's write "
            "unlock (fallback retry 60 s)\n",
            (long long)(rb.at_ms - t0));
    cr_assert_str_eq(str_of(h_redis_hget("reports:1", "mode")), "read");
    cr_assert_eq(dlock_lease_release_sync(rb.lease), 0);
    H_KEY_GONE("reports:1");
}

/* Readers of one host that join a grant (the cohort) share its field: the
 * hash stays while any of them holds, and goes with the last, whose
 * release publishes 0. */
ITEST(formats, rwlock_readers_joined_on_one_host_keep_the_hash_until_the_last)
{
    start("cohort_ms = 60000");
    struct h_cl *r1 = h_client(), *r2 = h_client();
    dlock_lease *l1 = must(r1, "reports:2", 0, &SHARED), *l2 = must(r2, "reports:2", 0, &SHARED);
    char *f[4];
    int n = fields("reports:2", f, 4);
    fprintf(stderr, "formats: RReadWriteLock: two readers of one agent show as %d field%s\n", n,
            n == 1 ? "" : "s");
    cr_assert(n >= 1 && n <= 2, "%d fields", n);
    cr_assert_eq(dlock_lease_release_sync(l1), 0);
    settle();
    cr_assert(dlock_lease_valid(l2));
    cr_assert_str_eq(str_of(h_redis_hget("reports:2", "mode")), "read",
                     "the hash went with a reader left");
    cr_assert_geq(fields("reports:2", f, 4), 1);
    cr_assert_eq(rw_write_lock("reports:2", TTL, R_WRITE), 0, "Redisson wrote beside a reader");
    redisContext *sub = subscribe(rw_channel("reports:2"));
    cr_assert_eq(dlock_lease_release(l2), 0);
    cr_assert_str_eq(next_message(sub, rw_channel("reports:2")), "0");
    H_KEY_GONE("reports:2");
    cr_assert_eq(h_redis_count_keys("{reports:2}:*"), 0, "a reader's timeout key is left");
    redisFree(sub);
}

/* A dlock reader of a short TTL beside Redisson's reader of 30 s: dlock's
 * renewals keep its own timeout key to its TTL and never shorten the hash,
 * which Redisson's hold needs; when dlock's reader goes, the hash stays for
 * Redisson's. The TTL is a second, as in test_watchdog.c. */
ITEST(formats, rwlock_renewals_never_shorten_the_hash)
{
    start(NULL);
    struct h_cl *a = h_client();
    cr_assert(rw_read_lock("reports:3", TTL, R_FIELD));
    dlock_acquire_options o = {.ttl_ms = 1000};
    dlock_lease *l = NULL;
    expect_rc(dlock_lease_acquire_spec(a->c, "reports:3", &o, &SHARED, &l), 0, "reader", a);
    char *f[4], *mine = NULL;
    cr_assert_eq(fields("reports:3", f, 4), 2);
    for (int i = 0; i < 2; i++)
        if (is_dlock_field(f[i], ":0"))
            mine = f[i];
    cr_assert_not_null(mine, "no field of dlock's among %s, %s", f[0], f[1]);
    char tk[512];
    snprintf(tk, sizeof tk, "%s:1", rw_timeout_prefix("reports:3", mine));
    int64_t first = dlock_lease_deadline_ns(l);
    int64_t end = h_now_ms() + 3500;
    int samples = 0;
    while (h_now_ms() < end) {
        long long hp = h_redis_pttl("reports:3"), tp = h_redis_pttl(tk);
        cr_assert_gt(hp, 1000, "the hash came down to %lld ms beside Redisson's reader", hp);
        cr_assert(tp > 0 && tp <= 1000, "dlock's timeout key: PTTL %lld (TTL 1000)", tp);
        cr_assert_eq(h_events(a, NULL, DLOCK_STATE_LOST), 0, "the lease was lost");
        samples++;
        h_pump_all(20);
    }
    cr_assert_geq(samples, 5, "only %d samples", samples);
    cr_assert_gt(dlock_lease_deadline_ns(l), first, "the lease was not renewed");
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_KEY_GONE(tk);
    cr_assert_str_eq(str_of(h_redis_hget("reports:3", "mode")), "read");
    cr_assert_str_eq(str_of(h_redis_hget("reports:3", R_FIELD)), "1");
    cr_assert_eq(h_redis_int("HLEN %s", "reports:3"), 2, "dlock's field is left");
    cr_assert_gt(h_redis_pttl("reports:3"), 1000);
    cr_assert_eq(rw_read_unlock("reports:3", R_FIELD), 1);
    cr_assert_eq(h_redis_exists("reports:3"), 0);
}

/* ---- RPermitExpirableSemaphore ---- */

/* The free count at the name and one member per permit in {NAME}:timeout;
 * the size is the count plus the permits; permits of both sides count; a
 * lapsed permit of Redisson's is reclaimed by dlock's next acquire; a
 * release of either side publishes the free count, and Redisson's wakes a
 * dlock waiter with the fallback retry a minute off. */
ITEST(formats, semaphore_permits_of_both_sides)
{
    start("retry_fallback_ms = 60000");
    struct h_cl *c[4] = {h_client(), h_client(), h_client(), h_client()};
    dlock_lock_spec two = semaphore(2), three = semaphore(3);
    const char *z = sem_zset("encoders:1");
    freeReplyObject(h_redis_cmd("SET encoders:1 2")); /* trySetPermits(2) */

    long long t0 = epoch_ms();
    dlock_lease *p1 = must(c[0], "encoders:1", 0, &two);
    cr_assert_str_eq(str_of(h_redis_get("encoders:1")), "1", "the free count");
    cr_assert_eq(h_redis_int("ZCARD %s", z), 1);
    redisReply *r = h_redis_cmd("ZRANGE %s 0 -1 WITHSCORES", z);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 2);
    cr_assert_eq(r->element[0]->len, 16, "a permit id of %zu bytes", r->element[0]->len);
    long long exp = atoll(r->element[1]->str);
    freeReplyObject(r);
    cr_assert(exp >= t0 + TTL - 1000 && exp <= epoch_ms() + TTL + 1000,
              "the permit's expiry %lld is not the TTL from now (%lld)", exp, t0);

    dlock_lease *x = NULL;
    expect_rc(acq(c[1], "encoders:1", DLOCK_WAIT_NONE, 0, &three, &x), DLOCK_EKIND,
              "3 permits on 2", c[1]);
    expect_rc(acq(c[1], "encoders:1", DLOCK_WAIT_FOREVER, 0, &three, &x), DLOCK_EKIND,
              "3 permits on 2, waiting", c[1]);
    dlock_lease *p2 = must(c[1], "encoders:1", 0, &two);
    cr_assert_str_eq(str_of(h_redis_get("encoders:1")), "0");
    cr_assert_eq(h_redis_int("ZCARD %s", z), 2);
    cr_assert_eq(sem_acquire("encoders:1", epoch_ms() + TTL, R_PERMIT), 0,
                 "Redisson took a third permit of 2");
    cr_assert_eq(CTL("holder", "--json", "encoders:1"), 0, "%s", ctl_out());
    cr_assert(h_json_valid(ctl_out()), "%s", ctl_out());
    cr_assert(strstr(ctl_out(), "\"kind\":\"redisson:semaphore\",\"permits\":2,"), "%s", ctl_out());

    /* a third dlock holder waits for a release */
    struct h_acq w3;
    wait_async(c[2], "encoders:1", &two, &w3);
    settle();
    cr_assert_eq(w3.done, 0, "a third holder of 2 permits");
    redisContext *sub = subscribe(sem_channel("encoders:1"));
    cr_assert_eq(dlock_lease_release_sync(p1), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w3.done);
    cr_assert_eq(w3.status, 0, "third: %s", dlock_strerror(w3.status));
    cr_assert_str_eq(next_message(sub, sem_channel("encoders:1")), "1",
                     "the free count after dlock's release");
    cr_assert_str_eq(str_of(h_redis_get("encoders:1")), "0");
    cr_assert_eq(h_redis_int("ZCARD %s", z), 2);
    cr_assert_eq(dlock_lease_release_sync(p2), 0);
    cr_assert_eq(dlock_lease_release_sync(w3.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_int("ZCARD %s", z) == 0);
    cr_assert_str_eq(str_of(h_redis_get("encoders:1")), "2");
    cr_assert_str_eq(next_message(sub, sem_channel("encoders:1")), "1");
    cr_assert_str_eq(next_message(sub, sem_channel("encoders:1")), "2");

    /* Redisson's permit lapsed (its expiry is past): dlock's next acquire
     * gives it back, publishing the count, and both permits are dlock's. */
    cr_assert(sem_acquire("encoders:1", epoch_ms() - 1000, R_PERMIT));
    cr_assert_str_eq(str_of(h_redis_get("encoders:1")), "1");
    p1 = must(c[0], "encoders:1", 0, &two);
    cr_assert_str_eq(next_message(sub, sem_channel("encoders:1")), "2", "the reclaim's count");
    p2 = must(c[1], "encoders:1", 0, &two);
    cr_assert_str_eq(str_of(h_redis_get("encoders:1")), "0");
    cr_assert_eq(h_redis_int("ZCARD %s", z), 2);
    r = h_redis_cmd("ZSCORE %s %b", z, R_PERMIT, (size_t)16);
    cr_assert_eq(r->type, REDIS_REPLY_NIL, "Redisson's lapsed permit is still there");
    freeReplyObject(r);
    redisFree(sub);

    /* Redisson holds a live permit beside dlock's: a dlock waiter is woken
     * by Redisson's release (the free count published). */
    cr_assert_eq(dlock_lease_release_sync(p2), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_int("ZCARD %s", z) == 1);
    cr_assert(sem_acquire("encoders:1", epoch_ms() + TTL, R_PERMIT));
    cr_assert_eq(CTL("holder", "encoders:1"), 0, "%s", ctl_out());
    cr_assert(
        strstr(ctl_out(), "encoders:1: held in Redisson's format, semaphore by 2 holders: ") &&
            strstr(ctl_out(), "permit " R_PERMIT_HEX ", ") && strstr(ctl_out(), " ms left") &&
            !strstr(ctl_out(), "no expiry"),
        "holder: %s", ctl_out());
    struct h_acq w4;
    wait_async(c[3], "encoders:1", &two, &w4);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, sem_channel("encoders:1")) == 1);
    settle();
    cr_assert_eq(w4.done, 0, "a third permit beside Redisson's and dlock's");
    int64_t t1 = h_now_ms();
    cr_assert_eq(sem_release("encoders:1", R_PERMIT), 1);
    H_WAIT_UNTIL(H_EVENT_MS, w4.done);
    cr_assert_eq(w4.status, 0, "waiter: %s", dlock_strerror(w4.status));
    fprintf(stderr,
            "formats: semaphore: dlock waiter granted %lld ms after Redisson's release "
            "(fallback retry 60 s)\n",
            (long long)(w4.at_ms - t1));
    cr_assert_eq(dlock_lease_release_sync(p1), 0);
    cr_assert_eq(dlock_lease_release_sync(w4.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_int("ZCARD %s", z) == 0);
    cr_assert_str_eq(str_of(h_redis_get("encoders:1")), "2", "permits lost or made");
}
