/* SPDX-License-Identifier: BSD-3-Clause */
/* plain.c -- the baseline: a plain hiredis client (sync API) doing the classic
 * lock by hand, SET NX PX and an EVALSHA compare-and-delete, plus a few
 * inspection commands on the private Redis. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "bench.h"

#define CONNECT_TIMEOUT_S 5

static const char release_script[] =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0";

struct plain {
    redisContext *c;
    char sha[41];
    uint64_t rng; /* xorshift64* state, for the tokens */
};

/* Sends one command; NULL when the connection broke. */
static redisReply *command(struct plain *p, int argc, const char **argv, const size_t *lens)
{
    return redisCommandArgv(p->c, argc, argv, lens);
}

static int load_script(struct plain *p)
{
    const char *argv[] = {"SCRIPT", "LOAD", release_script};
    size_t lens[] = {6, 4, sizeof release_script - 1};
    redisReply *r = command(p, 3, argv, lens);
    int rc = -1;
    if (r && r->type == REDIS_REPLY_STRING && r->len == 40) {
        memcpy(p->sha, r->str, 41);
        rc = 0;
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

struct plain *plain_open(const char *sock)
{
    struct plain *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    struct timeval tv = {CONNECT_TIMEOUT_S, 0};
    p->c = redisConnectUnixWithTimeout(sock, tv);
    if (getrandom(&p->rng, sizeof p->rng, 0) != sizeof p->rng)
        p->rng = now_ns();
    p->rng |= 1;
    if (!p->c || p->c->err || load_script(p) != 0) {
        plain_close(p);
        return NULL;
    }
    return p;
}

void plain_close(struct plain *p)
{
    if (!p)
        return;
    if (p->c)
        redisFree(p->c);
    free(p);
}

/* A fresh 32-hex-digit token, as unique per acquisition as dlock's. */
static void make_token(struct plain *p, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    for (int half = 0; half < 2; half++) {
        p->rng ^= p->rng >> 12;
        p->rng ^= p->rng << 25;
        p->rng ^= p->rng >> 27;
        uint64_t v = p->rng * 0x2545f4914f6cdd1dull;
        for (int i = 0; i < 16; i++, v >>= 4)
            out[half * 16 + i] = hex[v & 15];
    }
    out[32] = '\0';
}

/* OK from SET, nil when taken. */
static int set_nx(struct plain *p, const char *key, size_t klen, const char *token)
{
    static const char ttl[] = "30000";
    _Static_assert(BENCH_TTL_MS == 30000, "ttl string out of date");
    const char *argv[] = {"SET", key, token, "NX", "PX", ttl};
    size_t lens[] = {3, klen, 32, 2, 2, sizeof ttl - 1};
    redisReply *r = command(p, 6, argv, lens);
    if (!r)
        return PLAIN_EIO;
    int rc = PLAIN_EREPLY;
    if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0)
        rc = 0;
    else if (r->type == REDIS_REPLY_NIL)
        rc = PLAIN_EBUSY;
    freeReplyObject(r);
    return rc;
}

static int compare_and_delete(struct plain *p, const char *key, size_t klen, const char *token)
{
    const char *argv[] = {"EVALSHA", p->sha, "1", key, token};
    size_t lens[] = {7, 40, 1, klen, 32};
    redisReply *r = command(p, 5, argv, lens);
    if (!r)
        return PLAIN_EIO;
    int rc = PLAIN_EREPLY;
    if (r->type == REDIS_REPLY_INTEGER)
        rc = r->integer == 1 ? 0 : PLAIN_EOWNER;
    freeReplyObject(r);
    return rc;
}

int plain_pair(struct plain *p, const char *name, uint64_t *mid)
{
    char key[256], token[33];
    int klen = snprintf(key, sizeof key, "%s%s", BENCH_PREFIX, name);
    make_token(p, token);
    int rc = set_nx(p, key, (size_t)klen, token);
    *mid = now_ns();
    if (rc == 0)
        rc = compare_and_delete(p, key, (size_t)klen, token);
    return rc;
}

int plain_hold(struct plain *p, const char *name, long long ttl_ms)
{
    char key[256], px[24];
    int klen = snprintf(key, sizeof key, "%s%s", BENCH_PREFIX, name);
    int plen = snprintf(px, sizeof px, "%lld", ttl_ms);
    const char *argv[] = {"SET", key, "plain-holder", "NX", "PX", px};
    size_t lens[] = {3, (size_t)klen, 12, 2, 2, (size_t)plen};
    redisReply *r = command(p, 6, argv, lens);
    if (!r)
        return PLAIN_EIO;
    int rc = r->type == REDIS_REPLY_STATUS ? 0
             : r->type == REDIS_REPLY_NIL  ? PLAIN_EBUSY
                                           : PLAIN_EREPLY;
    freeReplyObject(r);
    return rc;
}

int plain_drop_notify(struct plain *p, const char *name, const char *channel)
{
    char key[256];
    int klen = snprintf(key, sizeof key, "%s%s", BENCH_PREFIX, name);
    const char *del[] = {"DEL", key};
    size_t del_lens[] = {3, (size_t)klen};
    const char *pub[] = {"PUBLISH", channel, name};
    size_t pub_lens[] = {7, strlen(channel), strlen(name)};
    redisReply *r = command(p, 2, del, del_lens);
    if (!r)
        return PLAIN_EIO;
    int rc = r->type == REDIS_REPLY_INTEGER && r->integer == 1 ? 0 : PLAIN_EREPLY;
    freeReplyObject(r);
    r = command(p, 3, pub, pub_lens);
    if (!r)
        return PLAIN_EIO;
    if (r->type != REDIS_REPLY_INTEGER)
        rc = PLAIN_EREPLY;
    freeReplyObject(r);
    return rc;
}

int plain_ping(struct plain *p)
{
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    redisReply *r = command(p, 1, argv, lens);
    int rc = r && r->type == REDIS_REPLY_STATUS ? 0 : PLAIN_EIO;
    if (r)
        freeReplyObject(r);
    return rc;
}

int plain_get(struct plain *p, const char *name)
{
    char key[256];
    int klen = snprintf(key, sizeof key, "%s%s", BENCH_PREFIX, name);
    const char *argv[] = {"GET", key};
    size_t lens[] = {3, (size_t)klen};
    redisReply *r = command(p, 2, argv, lens);
    if (!r)
        return PLAIN_EIO;
    int rc = r->type == REDIS_REPLY_STRING ? 0 : PLAIN_EREPLY;
    freeReplyObject(r);
    return rc;
}

const char *plain_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case PLAIN_EIO:
        return "redis connection broken";
    case PLAIN_EBUSY:
        return "SET NX found the key taken";
    case PLAIN_EOWNER:
        return "compare-and-delete found another token";
    case PLAIN_EREPLY:
        return "unexpected redis reply";
    default:
        return "unknown error";
    }
}

/* ---- inspection ---- */

static long long int_reply(struct plain *p, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    redisReply *r = command(p, argc, argv, lens);
    long long v = (r && r->type == REDIS_REPLY_INTEGER) ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return v;
}

long long redis_dbsize(struct plain *p)
{
    const char *argv[] = {"DBSIZE"};
    return int_reply(p, 1, argv);
}

long long redis_count_keys(struct plain *p, const char *pattern)
{
    const char *argv[] = {"EVAL", "return #redis.call('keys', ARGV[1])", "0", pattern};
    return int_reply(p, 4, argv);
}

long long redis_pttl(struct plain *p, const char *name)
{
    char key[256];
    snprintf(key, sizeof key, "%s%s", BENCH_PREFIX, name);
    const char *argv[] = {"PTTL", key};
    return int_reply(p, 2, argv);
}

#define INFO_SECTIONS 8 /* sections one redis_info() asks for, at most */

char *redis_info(struct plain *p, const char *sections)
{
    const char *argv[1 + INFO_SECTIONS] = {"INFO"};
    size_t lens[1 + INFO_SECTIONS] = {4};
    int argc = 1;
    for (const char *s = sections + strspn(sections, " "); *s && argc <= INFO_SECTIONS;
         s += strspn(s, " ")) {
        argv[argc] = s;
        lens[argc] = strcspn(s, " ");
        s += lens[argc++];
    }
    redisReply *r = command(p, argc, argv, lens);
    char *text = NULL;
    if (r && r->type == REDIS_REPLY_STRING)
        text = strdup(r->str);
    if (r)
        freeReplyObject(r);
    return text;
}

int info_value(const char *info, const char *field, char *buf, size_t len)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\n%s:", field);
    const char *s = strstr(info, pat);
    if (!s)
        return -1;
    s += strlen(pat);
    size_t n = strcspn(s, "\r\n");
    snprintf(buf, len, "%.*s", (int)n, s);
    return 0;
}

/* The value of `field:` in an INFO section, copied to buf. */
static int info_field(struct plain *p, const char *section, const char *field, char *buf,
                      size_t len)
{
    char *info = redis_info(p, section);
    int rc = info ? info_value(info, field, buf, len) : -1;
    free(info);
    return rc;
}

long long redis_evalsha_calls(struct plain *p)
{
    char buf[256];
    long long calls;
    if (info_field(p, "commandstats", "cmdstat_evalsha", buf, sizeof buf) != 0)
        return 0; /* no EVALSHA yet */
    if (sscanf(buf, "calls=%lld", &calls) != 1)
        return -1;
    return calls;
}

int redis_version(struct plain *p, char *buf, size_t len)
{
    return info_field(p, "server", "redis_version", buf, len);
}

long long redis_numsub(struct plain *p, const char *channel)
{
    const char *argv[] = {"PUBSUB", "NUMSUB", channel};
    size_t lens[] = {6, 6, strlen(channel)};
    redisReply *r = command(p, 3, argv, lens);
    long long v = -1;
    /* [channel, count] */
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        v = r->element[1]->integer;
    if (r)
        freeReplyObject(r);
    return v;
}

long long redis_channels(struct plain *p, const char *pattern)
{
    const char *argv[] = {"PUBSUB", "CHANNELS", pattern};
    size_t lens[] = {6, 8, strlen(pattern)};
    redisReply *r = command(p, 3, argv, lens);
    long long v = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
    if (r)
        freeReplyObject(r);
    return v;
}

long long redis_maxclients(struct plain *p)
{
    const char *argv[] = {"CONFIG", "GET", "maxclients"};
    size_t lens[] = {6, 3, 10};
    redisReply *r = command(p, 3, argv, lens);
    long long v = -1;
    /* [name, value] (RESP2) */
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        v = strtoll(r->element[1]->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    return v;
}

double redis_cpu_seconds(struct plain *p)
{
    char *info = redis_info(p, "cpu");
    char user[32], sys[32];
    double v = -1;
    if (info && info_value(info, "used_cpu_user", user, sizeof user) == 0 &&
        info_value(info, "used_cpu_sys", sys, sizeof sys) == 0)
        v = strtod(user, NULL) + strtod(sys, NULL);
    free(info);
    return v;
}
