/* SPDX-License-Identifier: BSD-3-Clause */
/* test_replies.c -- unit tests of agent/backend/replies.c and of the reply
 * decoders of agent/backend/scripts.c: Redis' replies to the lock scripts,
 * Cluster redirects and CLUSTER SLOTS, read from RESP bytes by hiredis' own
 * reader, as the agent reads them. */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <string.h>

#include "dlock.h"
#include "replies.h"
#include "scripts.h"

/* The reply tree that RESP text stands for (freed by the caller). */
static redisReply *parse(const char *resp)
{
    redisReader *r = redisReaderCreate();
    cr_assert_not_null(r);
    cr_assert_eq(redisReaderFeed(r, resp, strlen(resp)), REDIS_OK);
    void *rep = NULL;
    cr_assert_eq(redisReaderGetReply(r, &rep), REDIS_OK);
    cr_assert_not_null(rep, "incomplete reply: %s", resp);
    redisReaderFree(r);
    return rep;
}

static struct script_reply script(const char *resp)
{
    redisReply *rep = parse(resp);
    struct script_reply out;
    reply_script(rep, &out);
    cr_assert(!out.text, "text outlives the reply");
    freeReplyObject(rep);
    return out;
}

/* The reply of script s, decoded (and its holder, for a lookup). */
static struct script_result decoded(enum script_id s, const char *resp, struct script_holders *h)
{
    redisReply *rep = parse(resp);
    struct script_result out;
    script_decode(s, rep, &out, h);
    cr_assert(!out.text, "text outlives the reply");
    freeReplyObject(rep);
    return out;
}

Test(reply_script, integers_errors_and_the_rest)
{
    struct script_reply r = script(":1700000000000123\r\n");
    cr_assert_eq(r.kind, SR_RESULT);
    cr_assert_eq(r.n, 1700000000000123ll);
    cr_assert_eq(script(":-2500\r\n").n, -2500);
    /* Out of the range a Lua number holds exactly: no answer of ours. */
    cr_assert_eq(script(":9007199254740993\r\n").kind, SR_UNEXPECTED);
    redisReply *e = parse("-NOSCRIPT No matching script\r\n");
    struct script_reply out;
    reply_script(e, &out);
    cr_assert_eq(out.kind, SR_NOSCRIPT);
    reply_script(NULL, &out);
    cr_assert_eq(out.kind, SR_NONE);
    cr_assert_eq(out.err, DLOCK_EUNAVAIL);
    freeReplyObject(e);
    e = parse("-MOVED 3999 10.0.0.2:6381\r\n");
    reply_script(e, &out);
    cr_assert_eq(out.kind, SR_REDIRECT);
    cr_assert_str_eq(out.text, "MOVED 3999 10.0.0.2:6381");
    freeReplyObject(e);
    e = parse("-OOM command not allowed when used memory > 'maxmemory'.\r\n");
    reply_script(e, &out);
    cr_assert_eq(out.kind, SR_ERROR);
    cr_assert_eq(out.err, DLOCK_EOOM);
    freeReplyObject(e);
    cr_assert_eq(script("+OK\r\n").kind, SR_UNEXPECTED);
}

Test(script_decode, the_holder_lookup)
{
    struct script_holders h;
    struct script_result r = decoded(
        SCRIPT_LOOKUP,
        "*3\r\n$32\r\n0123456789abcdef0123456789abcdef\r\n$10\r\nhost 1 0 x\r\n:1500\r\n", &h);
    cr_assert_eq(r.kind, SR_HOLDER);
    cr_assert_eq(r.err, 0);
    cr_assert_str_eq(h.holder.value, "0123456789abcdef0123456789abcdef");
    cr_assert_str_eq(h.holder.record, "host 1 0 x");
    cr_assert_eq(h.holder.pttl, 1500);
    cr_assert_eq(h.holder.nodes_holding, 1);
    cr_assert_str_eq(h.holder.kind, "");
    cr_assert_eq(h.holder.permits, 0);
    /* Not a lookup's shape, or a lookup's shape for another script. */
    r = decoded(SCRIPT_LOOKUP, "*2\r\n$1\r\na\r\n:1\r\n", &h);
    cr_assert_eq(r.kind, SR_UNEXPECTED);
    cr_assert_eq(r.err, DLOCK_EBACKEND);
    cr_assert_eq(decoded(SCRIPT_LOOKUP, ":1\r\n", &h).kind, SR_UNEXPECTED);
    cr_assert_eq(decoded(SCRIPT_RENEW, "*3\r\n$1\r\na\r\n$1\r\nb\r\n:1\r\n", NULL).kind,
                 SR_UNEXPECTED);
}

Test(script_decode, a_counted_lookup)
{
    struct script_holders h;
    struct script_result r =
        decoded(SCRIPT_LOOKUP,
                "*11\r\n$0\r\n\r\n$0\r\n\r\n:900\r\n$5\r\nsem:3\r\n:2\r\n"
                "$32\r\n0123456789abcdef0123456789abcdef\r\n:800\r\n$8\r\nh 1 0 cm\r\n"
                "$32\r\nfedcba9876543210fedcba9876543210\r\n:900\r\n$0\r\n\r\n",
                &h);
    cr_assert_eq(r.kind, SR_HOLDER);
    cr_assert_str_eq(h.holder.kind, "sem:3");
    cr_assert_str_eq(h.holder.value, "sem:3");
    cr_assert_eq(h.holder.nodes_holding, 1);
    cr_assert_eq(h.holder.pttl, 900);
    cr_assert_eq(h.holder.permits, 2);
    cr_assert_eq(h.holder.shown, 2);
    cr_assert_str_eq(h.holder.permit[0].token, "0123456789abcdef0123456789abcdef");
    cr_assert_eq(h.holder.permit[0].pttl_ms, 800);
    cr_assert_str_eq(h.holder.permit[0].record, "0123456789abcdef0123456789abcdef h 1 0 cm");
    cr_assert_str_eq(h.holder.record, h.holder.permit[0].record);
    cr_assert_str_eq(h.holder.permit[1].record, "fedcba9876543210fedcba9876543210");
    /* A permit cut short is no lookup's answer. */
    r = decoded(SCRIPT_LOOKUP,
                "*7\r\n$0\r\n\r\n$0\r\n\r\n:900\r\n$6\r\nshared\r\n:1\r\n$1\r\na\r\n:5\r\n", &h);
    cr_assert_eq(r.kind, SR_UNEXPECTED);
}

Test(script_decode, a_counted_acquire_of_another_kind)
{
    struct script_result r = decoded(SCRIPT_ACQUIRE_COUNTED, "$5\r\nsem:2\r\n", NULL);
    cr_assert_eq(r.kind, SR_RESULT);
    cr_assert_eq(r.err, 0);
    cr_assert(r.mismatch);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert(!r.wrote);
    cr_assert_str_eq(r.held, "sem:2");
    r = decoded(SCRIPT_ACQUIRE_COUNTED, ":77\r\n", NULL);
    cr_assert(r.outcome == BACKEND_DONE && r.fence == 77 && !r.mismatch);
    /* A string is no answer of the exclusive acquire. */
    cr_assert_eq(decoded(SCRIPT_ACQUIRE, "$5\r\nsem:2\r\n", NULL).kind, SR_UNEXPECTED);
}

Test(script_decode, what_a_scripts_integer_stands_for)
{
    struct script_result r = decoded(SCRIPT_ACQUIRE, ":42\r\n", NULL);
    cr_assert_eq(r.kind, SR_RESULT);
    cr_assert_eq(r.outcome, BACKEND_DONE);
    cr_assert_eq(r.fence, 42);
    cr_assert(r.wrote);
    r = decoded(SCRIPT_ACQUIRE, ":-800\r\n", NULL);
    cr_assert_eq(r.outcome, BACKEND_TAKEN);
    cr_assert_eq(r.pttl_ms, 800);
    cr_assert(!r.wrote);
    cr_assert_eq(decoded(SCRIPT_ACQUIRE, ":0\r\n", NULL).outcome, BACKEND_TAKEN);
    enum script_id flags[] = {SCRIPT_RENEW,         SCRIPT_RELEASE,         SCRIPT_FENCE,
                              SCRIPT_RENEW_COUNTED, SCRIPT_RELEASE_COUNTED, SCRIPT_FENCE_COUNTED};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        enum script_id s = flags[i];
        r = decoded(s, ":1\r\n", NULL);
        cr_assert(r.outcome == BACKEND_DONE && r.wrote);
        r = decoded(s, ":0\r\n", NULL);
        cr_assert(r.outcome == BACKEND_NOT_OURS && !r.wrote);
    }
    struct backend_result br = script_backend_result(&r, 0, NULL, 7);
    cr_assert_eq(br.outcome, BACKEND_NOT_OURS);
    cr_assert_eq(br.at, 7);
    br = script_backend_result(&r, DLOCK_EREADONLY, "READONLY", 7);
    cr_assert_eq(br.err, DLOCK_EREADONLY);
    cr_assert_str_eq(br.error_text, "READONLY");
    /* An error reply stays one, whatever the script. */
    redisReply *e = parse("-MOVED 3999 10.0.0.2:6381\r\n");
    script_decode(SCRIPT_ACQUIRE, e, &r, NULL);
    cr_assert_eq(r.kind, SR_REDIRECT);
    cr_assert_eq(r.err, DLOCK_EBACKEND);
    cr_assert_str_eq(r.text, "MOVED 3999 10.0.0.2:6381");
    freeReplyObject(e);
    script_decode(SCRIPT_RENEW, NULL, &r, NULL);
    cr_assert_eq(r.kind, SR_NONE);
    cr_assert_eq(r.err, DLOCK_EUNAVAIL);
}

Test(reply_redirect, slot_and_node)
{
    unsigned slot = 0;
    char name[64];
    cr_assert_eq(reply_redirect("MOVED 3999 127.0.0.1:6381", &slot, name, sizeof name), 0);
    cr_assert_eq(slot, 3999);
    cr_assert_str_eq(name, "127.0.0.1:6381");
    cr_assert_eq(reply_redirect("ASK 16383 [::1]:7000", &slot, name, sizeof name), 0);
    cr_assert_str_eq(name, "[::1]:7000");
    cr_assert_eq(reply_redirect("MOVED 16384 127.0.0.1:6381", &slot, name, sizeof name), -1);
    cr_assert_eq(reply_redirect("MOVED 12", &slot, name, sizeof name), -1);
    cr_assert_eq(reply_redirect("MOVED x 127.0.0.1:1", &slot, name, sizeof name), -1);
    cr_assert_eq(reply_redirect("MOVED 1 127.0.0.1:6381", &slot, name, 8), -1, "too long");
}

Test(reply_redirect, never_to_a_local_socket)
{
    unsigned slot = 0;
    char name[64];
    cr_assert_eq(reply_redirect("MOVED 1 unix:/run/other.sock", &slot, name, sizeof name), -1);
    cr_assert_eq(reply_redirect("ASK 1 /tmp/x.sock", &slot, name, sizeof name), -1);
    redisReply *n = parse("*3\r\n$12\r\nunix:/tmp/rs\r\n:6379\r\n$2\r\nid\r\n");
    cr_assert_eq(reply_slots_node(n, "10.0.0.1", name, sizeof name), -1);
    freeReplyObject(n);
}

Test(reply_slots, ranges_and_nodes)
{
    redisReply *range = parse("*4\r\n:0\r\n:5460\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
                              "*3\r\n$0\r\n\r\n:7003\r\n$2\r\nid\r\n");
    long long lo, hi;
    char master[64], replica[64];
    cr_assert_eq(reply_slots_range(range, "10.0.0.9", &lo, &hi, master, sizeof master), 0);
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 5460);
    cr_assert_str_eq(master, "10.0.0.1:7000");
    /* An empty ip is the node that answered. */
    cr_assert_eq(reply_slots_node(range->element[3], "10.0.0.9", replica, sizeof replica), 0);
    cr_assert_str_eq(replica, "10.0.0.9:7003");
    freeReplyObject(range);
    redisReply *v6 = parse("*2\r\n$3\r\n::1\r\n:7001\r\n");
    cr_assert_eq(reply_slots_node(v6, "x", replica, sizeof replica), 0);
    cr_assert_str_eq(replica, "[::1]:7001");
    freeReplyObject(v6);
    redisReply *bad = parse("*3\r\n:10\r\n:5\r\n*2\r\n$1\r\na\r\n:1\r\n");
    cr_assert_eq(reply_slots_range(bad, "x", &lo, &hi, master, sizeof master), -1, "lo > hi");
    freeReplyObject(bad);
}
