/* SPDX-License-Identifier: BSD-3-Clause */
/* test_keys.c -- unit tests of agent/base/keys.c: Redis Cluster hash slots against
 * values Redis gives, the table of one hash tag per slot, and the key names
 * derived from a lock key. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"

static unsigned slot_of(const char *key)
{
    return key_slot(key, strlen(key));
}

/* The table is large (112 KiB): built once per test process, on the heap. */
static struct slot_tags *tags(void)
{
    static struct slot_tags *t;
    if (!t) {
        t = malloc(sizeof *t);
        cr_assert_not_null(t);
        slot_tags_build(t);
    }
    return t;
}

Test(keys, crc16_is_xmodem)
{
    /* The check value of CRC-16/XMODEM. */
    cr_assert_eq(key_crc16("123456789", 9), 0x31c3);
    cr_assert_eq(key_crc16("", 0), 0);
}

Test(keys, slots_match_redis_cluster_keyslot)
{
    /* CLUSTER KEYSLOT answers of a Redis Cluster. */
    cr_assert_eq(slot_of("foo"), 12182);
    cr_assert_eq(slot_of("bar"), 5061);
    cr_assert_eq(slot_of("hello"), 866);
    cr_assert_eq(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
    cr_assert_eq(slot_of("{user1000}.following"), slot_of("user1000"));
}

Test(keys, hash_tag_rules)
{
    /* The first "{" and the first "}" after it; an empty tag hashes the whole
     * key, and so does an unclosed brace. */
    cr_assert_eq(slot_of("a{foo}b"), slot_of("foo"));
    cr_assert_eq(slot_of("{foo}{bar}"), slot_of("foo"));
    cr_assert_eq(slot_of("x{foo}}bar"), slot_of("foo"));
    cr_assert_eq(slot_of("{{foo}}"), slot_of("{foo"));
    cr_assert_eq(slot_of("foo{}{bar}"), key_crc16("foo{}{bar}", 10) % KEY_SLOTS);
    cr_assert_eq(slot_of("foo{bar"), key_crc16("foo{bar", 7) % KEY_SLOTS);
    cr_assert(key_has_hash_tag("dlock:{a}", 9));
    cr_assert_not(key_has_hash_tag("dlock:{}a}", 10));
    cr_assert_not(key_has_hash_tag("dlock:a", 7));
    /* Only the first len bytes count. */
    cr_assert_not(key_has_hash_tag("{a}", 2));
}

Test(keys, every_slot_has_its_own_tag)
{
    /* Each tag hashes to its own slot, so no two slots share a tag. */
    const struct slot_tags *t = tags();
    for (unsigned s = 0; s < KEY_SLOTS; s++) {
        const char *tag = t->tag[s];
        size_t len = strlen(tag);
        cr_assert(len >= 1 && len <= SLOT_TAG_MAX, "slot %u: tag '%s'", s, tag);
        cr_assert_eq(key_crc16(tag, len) % KEY_SLOTS, s, "tag '%s' is not slot %u's", tag, s);
        /* The tag inside braces, as the keys carry it, hashes the same. */
        char braced[SLOT_TAG_MAX + 8];
        snprintf(braced, sizeof braced, "x{%s}y", tag);
        cr_assert_eq(slot_of(braced), s);
    }
}

Test(keys, tags_follow_the_documented_rule)
{
    /* Slot s's tag is the smallest integer whose decimal string hashes to s:
     * no smaller number may hash to the same slot, and the build tries
     * exactly the numbers up to the largest tag. */
    struct slot_tags *t = tags();
    unsigned max = 0;
    for (unsigned s = 0; s < KEY_SLOTS; s++) {
        unsigned long n = strtoul(t->tag[s], NULL, 10);
        char again[SLOT_TAG_MAX + 2];
        snprintf(again, sizeof again, "%lu", n);
        cr_assert_str_eq(again, t->tag[s], "slot %u: '%s' is not canonical", s, t->tag[s]);
        if (n > max)
            max = (unsigned)n;
    }
    for (unsigned i = 0; i <= max; i++) {
        char s[SLOT_TAG_MAX + 2];
        int len = snprintf(s, sizeof s, "%u", i);
        unsigned long tag = strtoul(t->tag[key_crc16(s, (size_t)len) % KEY_SLOTS], NULL, 10);
        cr_assert_leq(tag, i, "%u hashes to a slot whose tag %lu is larger", i, tag);
    }
    cr_assert_eq(max, 109757);
    struct slot_tags *again = malloc(sizeof *again);
    cr_assert_not_null(again);
    cr_assert_eq(slot_tags_build(again), max + 1);
    cr_assert(memcmp(again, t, sizeof *t) == 0, "a second build differs");
    free(again);
    /* A few fixed points, so that a change of the rule cannot go unnoticed:
     * the keys are shared by all agents of all versions. */
    cr_assert_str_eq(t->tag[0], "3560");
    cr_assert_str_eq(t->tag[866], "2622");
    cr_assert_str_eq(t->tag[12182], "43681");
    cr_assert_str_eq(t->tag[16383], "39296");
}

Test(keys, high_water_key_lies_in_the_lock_keys_slot)
{
    const struct slot_tags *t = tags();
    const char *cases[][2] = {
        {"dlock:", "foo"},   {"dlock:", "{user1000}.x"}, {"dlock:", "a{}b{c}"}, {"dlock:", "a{b"},
        {"{locks}:", "job"}, {"{locks}:", "{other}"},    {"x}{t}:", "payroll"}, {"p:", "hello"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char key[128], hw[128];
        int klen = snprintf(key, sizeof key, "%s%s", cases[i][0], cases[i][1]);
        size_t plen = strlen(cases[i][0]);
        size_t n = fence_hw_key(t, key, (size_t)klen, plen, hw);
        cr_assert_eq(n, strlen(hw));
        cr_assert_leq(n, plen + FENCE_HW_EXTRA);
        cr_assert_eq(strncmp(hw, cases[i][0], plen), 0, "'%s' does not start with the prefix", hw);
        cr_assert_eq(slot_of(hw), slot_of(key), "'%s' and '%s' in different slots", hw, key);
        cr_assert(strstr(hw, FENCE_HW_SUFFIX) == hw + n - strlen(FENCE_HW_SUFFIX));
    }
    /* Worked out by hand: "dlock:foo" is in slot 3641, whose tag is 24979;
     * "{locks}:job" in slot("locks") = 1236, tag 40142; "foo" in 12182. */
    char hw[64];
    fence_hw_key(t, "dlock:foo", 9, 6, hw);
    cr_assert_str_eq(hw, "dlock:{24979} fence-hw");
    fence_hw_key(t, "{locks}:job", 11, 8, hw);
    cr_assert_str_eq(hw, "{locks}:{40142} fence-hw");
    fence_hw_key(t, "foo", 3, 0, hw);
    cr_assert_str_eq(hw, "{43681} fence-hw");
}

Test(keys, holder_and_legacy_keys)
{
    char out[128];
    cr_assert_eq(holder_key("dlock:job", 9, 6, out), strlen("dlock:{dlock:job} holder"));
    cr_assert_str_eq(out, "dlock:{dlock:job} holder");
    legacy_fence_key("dlock:job", 9, 6, out);
    cr_assert_str_eq(out, "dlock:{dlock:job} fence");
    legacy_fence_key("{locks}:job", 11, 8, out);
    cr_assert_str_eq(out, "{locks}:job fence");
    cr_assert_eq(slot_of(out), slot_of("{locks}:job"));
}

Test(keys, release_channel_lies_in_the_lock_keys_slot)
{
    /* Lock names hold no brace (docs/protocol.md): a lock key has a hash tag
     * only from its prefix. */
    const char *cases[][2] = {
        {"dlock:", "foo"}, {"dlock:", "job"},   {"dlock:", "a.b-c/d:e"},
        {"p:", "hello"},   {"{locks}:", "job"}, {"a{locks}:", "x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char key[128], ch[256], holder[256];
        int klen = snprintf(key, sizeof key, "%s%s", cases[i][0], cases[i][1]);
        size_t plen = strlen(cases[i][0]);
        size_t n = release_channel(key, (size_t)klen, plen, ch);
        cr_assert_eq(n, strlen(ch));
        cr_assert_leq(n, plen + (size_t)klen + SIDE_KEY_EXTRA);
        cr_assert_eq(strncmp(ch, cases[i][0], plen), 0, "'%s' does not start with the prefix", ch);
        cr_assert_eq(slot_of(ch), slot_of(key), "'%s' and '%s' in different slots", ch, key);
        cr_assert(strstr(ch, RELEASED_SUFFIX) == ch + n - strlen(RELEASED_SUFFIX));
        /* Named like the holder record, with its own suffix. */
        size_t hn = holder_key(key, (size_t)klen, plen, holder);
        cr_assert_eq(n - strlen(RELEASED_SUFFIX), hn - strlen(HOLDER_SUFFIX));
        cr_assert_eq(memcmp(ch, holder, hn - strlen(HOLDER_SUFFIX)), 0);
    }
    char out[128];
    cr_assert_eq(release_channel("dlock:job", 9, 6, out), strlen("dlock:{dlock:job} released"));
    cr_assert_str_eq(out, "dlock:{dlock:job} released");
    release_channel("{locks}:job", 11, 8, out);
    cr_assert_str_eq(out, "{locks}:job released");
    /* CLUSTER KEYSLOT gives 12182 for "foo". */
    release_channel("foo", 3, 0, out);
    cr_assert_str_eq(out, "{foo} released");
    cr_assert_eq(slot_of(out), 12182);
}

Test(keys, readers_marks_lie_beside_the_waiting_hosts_record)
{
    char out[128], rec[128];
    cr_assert_eq(readers_key("dlock:job", 9, 6, out), strlen("dlock:{dlock:job} readers"));
    cr_assert_str_eq(out, "dlock:{dlock:job} readers");
    waiting_key("dlock:job", 9, 6, rec);
    cr_assert_eq(slot_of(out), slot_of(rec));
    cr_assert_eq(slot_of(out), slot_of("dlock:job"));
    readers_key("{locks}:job", 11, 8, out);
    cr_assert_str_eq(out, "{locks}:job readers");
    cr_assert_leq(strlen(out), 11 + SIDE_KEY_EXTRA);
}
