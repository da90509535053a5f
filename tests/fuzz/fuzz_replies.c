/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_replies.c -- libFuzzer target: every Redis reply the agent decodes.
 *
 * The input is what a Redis server (or a sentinel) would send: RESP bytes,
 * read by hiredis' own reader into reply trees of any shape. Each reply goes
 * through every decoder of the agent:
 *   - a lock script's answer and the holder lookup's (replies.c and each
 *     script's decoder in scripts.c, as backend_redis.c reads them), the result the core gets from
 * it, and the holder as the status socket shows it, in text and in JSON;
 *   - INFO server's run_id and uptime_in_seconds (text_info_field());
 *   - CLUSTER SLOTS' ranges and nodes, and the node names made of them, as
 *     the cluster backend reads them; MOVED and ASK redirects;
 *   - Sentinel's get-master-addr-by-name answer and +switch-master message
 *     (sentinel_msg.c), as backend_sentinel.c reads them.
 * What they make must hold what their callers count on: bounded, terminated
 * strings, slots and ports in range, JSON that parses, text without control
 * characters. */
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "keys.h"
#include "replies.h"
#include "scripts.h"
#include "sentinel_msg.h"
#include "status_render.h"
#include "text.h"

#define MAX_ELEMENTS 4096 /* an array bigger than this is not built */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void terminated(const char *s, size_t cap)
{
    if (strnlen(s, cap) == cap)
        abort();
}

/* ---- a JSON checker, for the holder-json answer ---- */

struct json {
    const char *p, *end;
    int depth;
};

static bool json_value(struct json *j);

static void json_ws(struct json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static bool json_lit(struct json *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
        return false;
    j->p += n;
    return true;
}

/* A string: well-formed UTF-8, no raw control character, known escapes. */
static bool json_string(struct json *j)
{
    if (!json_lit(j, "\""))
        return false;
    while (j->p < j->end && *j->p != '"') {
        unsigned char ch = (unsigned char)*j->p;
        if (ch < 0x20)
            return false;
        if (ch == '\\') {
            if (j->end - j->p < 2)
                return false;
            char e = j->p[1];
            if (e == 'u') {
                if (j->end - j->p < 6)
                    return false;
                for (int i = 2; i < 6; i++)
                    if (!strchr("0123456789abcdefABCDEF", j->p[i]) || !j->p[i])
                        return false;
                j->p += 6;
            } else if (e && strchr("\"\\/bfnrt", e)) {
                j->p += 2;
            } else {
                return false;
            }
            continue;
        }
        uint32_t cp;
        size_t n = utf8_seq(j->p, (size_t)(j->end - j->p), &cp);
        if (n == 0)
            return false;
        j->p += n;
    }
    return json_lit(j, "\"");
}

static bool json_number(struct json *j)
{
    const char *start = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p > start && j->p[-1] != '-';
}

/* An object or array: open, members separated by commas, close. */
static bool json_container(struct json *j, bool object)
{
    j->p++;
    json_ws(j);
    if (json_lit(j, object ? "}" : "]"))
        return true;
    for (;;) {
        json_ws(j);
        if (object && (!json_string(j) || (json_ws(j), !json_lit(j, ":"))))
            return false;
        if (!json_value(j))
            return false;
        json_ws(j);
        if (json_lit(j, ","))
            continue;
        return json_lit(j, object ? "}" : "]");
    }
}

static bool json_value(struct json *j)
{
    json_ws(j);
    if (j->p >= j->end || ++j->depth > 32)
        return false;
    bool ok;
    if (*j->p == '{' || *j->p == '[')
        ok = json_container(j, *j->p == '{');
    else if (*j->p == '"')
        ok = json_string(j);
    else
        ok = json_lit(j, "true") || json_lit(j, "false") || json_lit(j, "null") || json_number(j);
    j->depth--;
    return ok;
}

/* One JSON value and a newline, nothing else. */
static void check_json(const struct sbuf *b)
{
    struct json j = {.p = b->p, .end = b->p + b->len};
    if (!json_value(&j) || !json_lit(&j, "\n") || j.p != j.end)
        abort();
}

/* Lines a terminal shows as they are: UTF-8 without control characters. */
static void check_text(const struct sbuf *b)
{
    for (size_t i = 0; i < b->len;) {
        uint32_t cp;
        size_t n = utf8_seq(b->p + i, b->len - i, &cp);
        if (n == 0 || (cp != '\n' && text_is_control(cp)))
            abort();
        i += n;
    }
}

/* ---- the decoders ---- */

/* The holder of a lookup, as "holder NAME" and "holder-json NAME" show it,
 * and a counted key's permits. */
static void holder(const struct script_holders *hs, const char *name)
{
    const struct backend_holder *h = &hs->holder;
    terminated(h->value, sizeof h->value);
    terminated(h->record, sizeof h->record);
    if (h->nodes != 1 || h->nodes_holding != (h->value[0] != '\0'))
        abort();
    terminated(h->kind, sizeof h->kind);
    if (h->shown > SCRIPT_PERMITS_SHOWN || (!h->kind[0] && (h->permits || h->shown)))
        abort();
    for (unsigned i = 0; i < h->shown; i++) {
        terminated(h->permit[i].token, sizeof h->permit[i].token);
        terminated(h->permit[i].record, sizeof h->permit[i].record);
    }
    for (int json = 0; json < 2; json++) {
        struct sbuf b = {0};
        render_holder(name, 0, h, json, &b);
        if (!b.oom)
            json ? check_json(&b) : check_text(&b);
        free(b.p);
    }
}

/* A lock script's reply, for each script, and the result the core gets. */
static void script(const redisReply *rep)
{
    for (int s = 0; s < SCRIPT_COUNT; s++) {
        struct script_result sr;
        struct script_holders h;
        script_decode(s, rep, &sr, &h);
        bool answered = sr.kind == SR_RESULT || sr.kind == SR_HOLDER;
        bool lookup = script_table[s].lookup;
        if (answered != (sr.err == 0) || (sr.kind == SR_HOLDER) != (answered && lookup))
            abort();
        if (sr.kind == SR_RESULT && (sr.n <= -(1ll << 53) || sr.n >= (1ll << 53)))
            abort();
        if ((sr.text != NULL) != (rep->type == REDIS_REPLY_ERROR))
            abort();
        if (sr.kind == SR_HOLDER)
            holder(&h, rep->element[0]->str ? rep->element[0]->str : "a");
        terminated(sr.held, sizeof sr.held);
        bool acquire = !lookup && script_table[s].op == BACKEND_ACQUIRE;
        if (sr.mismatch && (!acquire || sr.outcome != BACKEND_TAKEN || sr.wrote))
            abort();
        if (lookup)
            continue;
        struct backend_result r = script_backend_result(&sr, sr.err, sr.text, 1);
        if (r.err != sr.err || (r.err && r.error_text != sr.text))
            abort();
        if (!r.err && acquire && r.outcome == BACKEND_DONE && r.fence != (uint64_t)sr.n)
            abort();
        if (!r.err && r.outcome == BACKEND_TAKEN && (!acquire || r.pttl_ms < 0))
            abort();
        if (!r.err && sr.wrote != (r.outcome == BACKEND_DONE))
            abort();
    }
}

/* INFO server: the fields backend_redis.c reads. */
static void info(const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_STATUS)
        return;
    char run_id[41], uptime[24];
    text_info_field(rep->str, "run_id", run_id, sizeof run_id);
    text_info_field(rep->str, "uptime_in_seconds", uptime, sizeof uptime);
    terminated(run_id, sizeof run_id);
    terminated(uptime, sizeof uptime);
    if (strpbrk(run_id, "\r\n") || strpbrk(uptime, "\r\n"))
        abort();
    (void)strtoull(uptime, NULL, 10);
}

/* A node name made of a reply: what node_get() makes an address of. */
static void node_name(const char *name, size_t cap)
{
    terminated(name, cap);
    struct redis_addr a;
    if (config_parse_addr(name, &a) == 0) {
        terminated(a.host, sizeof a.host);
        terminated(a.path, sizeof a.path);
        if (!a.path[0] && (a.port < 1 || a.port > 65535))
            abort();
    }
}

/* CLUSTER SLOTS, as load_map() reads it, from a node with a host and from
 * one reached through a unix socket (no host). */
static void cluster_slots(const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_ARRAY)
        return;
    static const char *const selves[] = {"10.0.0.1", ""};
    for (size_t s = 0; s < 2; s++) {
        for (size_t r = 0; r < rep->elements; r++) {
            const redisReply *range = rep->element[r];
            long long lo, hi;
            char name[280];
            if (reply_slots_range(range, selves[s], &lo, &hi, name, sizeof name) != 0)
                continue;
            if (lo < 0 || lo > hi || hi >= KEY_SLOTS)
                abort();
            node_name(name, sizeof name);
            for (size_t e = 3; e < range->elements; e++)
                if (reply_slots_node(range->element[e], selves[s], name, sizeof name) == 0)
                    node_name(name, sizeof name);
        }
    }
}

/* MOVED and ASK, as the cluster backend follows them. */
static void redirect(const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_ERROR)
        return;
    unsigned slot;
    char name[280];
    if (reply_redirect(rep->str, &slot, name, sizeof name) != 0)
        return;
    if (slot >= KEY_SLOTS)
        abort();
    node_name(name, sizeof name);
}

static void check_addr(const struct redis_addr *a)
{
    terminated(a->host, sizeof a->host);
    if (!a->host[0] || a->path[0] || a->port < 1 || a->port > 65535)
        abort();
}

/* Sentinel's answer to get-master-addr-by-name and its +switch-master
 * messages, as backend_sentinel.c takes them apart. */
static void sentinel(const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_ARRAY)
        return;
    struct redis_addr a;
    const redisReply *const *e = (const redisReply *const *)rep->element;
    if (rep->elements == 2 && e[0]->type == REDIS_REPLY_STRING &&
        e[1]->type == REDIS_REPLY_STRING &&
        sentinel_addr(e[0]->str, e[0]->len, e[1]->str, e[1]->len, &a) == 0)
        check_addr(&a);
    if (rep->elements == 3 && e[0]->type == REDIS_REPLY_STRING &&
        strcmp(e[0]->str, "message") == 0 && e[2]->type == REDIS_REPLY_STRING &&
        sentinel_switch_parse(e[2]->str, e[2]->len, "mymaster", &a) == 1)
        check_addr(&a);
}

/* ---- the reader ---- */

static redisReplyObjectFunctions hiredis_fn, bounded_fn;

/* hiredis allocates an array's elements as soon as it reads their count:
 * an input need not be gigabytes long to ask for gigabytes. */
static void *create_array(const redisReadTask *task, int elements)
{
    if (elements > MAX_ELEMENTS)
        return NULL; /* hiredis: "Out of memory", the end of the input */
    return hiredis_fn.createArray(task, elements);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    redisReader *rd = redisReaderCreate();
    if (!rd)
        return 0;
    if (!bounded_fn.createArray) {
        hiredis_fn = *rd->fn;
        bounded_fn = hiredis_fn;
        bounded_fn.createArray = create_array;
    }
    rd->fn = &bounded_fn;
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        void *r;
        while (redisReaderGetReply(rd, &r) == REDIS_OK && r) {
            const redisReply *rep = r;
            script(rep);
            info(rep);
            cluster_slots(rep);
            redirect(rep);
            sentinel(rep);
            freeReplyObject(r);
        }
    }
    redisReaderFree(rd);
    return 0;
}
