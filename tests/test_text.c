/* SPDX-License-Identifier: BSD-3-Clause */
/* test_text.c -- unit tests of agent/base/text.c: the UTF-8 decoder at every
 * boundary and for each kind of ill-formed input, and printable copies. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "text.h"

/* Decodes the whole of s (len bytes) as one sequence: its code point, or
 * -1 when utf8_seq() finds none or stops short of len. */
static long one(const char *s, size_t len)
{
    uint32_t cp = 0xdeadbeef;
    size_t n = utf8_seq(s, len, &cp);
    if (n == 0)
        return -1;
    cr_assert_eq(n, len, "%zu of %zu bytes taken", n, len);
    return (long)cp;
}

#define ONE(lit) one(lit, sizeof lit - 1)

Test(text, one_to_four_bytes)
{
    cr_assert_eq(one("\0", 1), 0);
    cr_assert_eq(ONE("A"), 'A');
    cr_assert_eq(ONE("\x7f"), 0x7f);
    cr_assert_eq(ONE("\xd0\x96"), 0x416);           /* Cyrillic Zhe */
    cr_assert_eq(ONE("\xe2\x82\xac"), 0x20ac);      /* euro sign */
    cr_assert_eq(ONE("\xf0\x9f\x94\x92"), 0x1f512); /* lock */
}

Test(text, boundaries)
{
    cr_assert_eq(ONE("\xc2\x80"), 0x80);
    cr_assert_eq(ONE("\xdf\xbf"), 0x7ff);
    cr_assert_eq(ONE("\xe0\xa0\x80"), 0x800);
    cr_assert_eq(ONE("\xed\x9f\xbf"), 0xd7ff);
    cr_assert_eq(ONE("\xee\x80\x80"), 0xe000);
    cr_assert_eq(ONE("\xef\xbf\xbd"), 0xfffd);
    cr_assert_eq(ONE("\xef\xbf\xbf"), 0xffff);
    cr_assert_eq(ONE("\xf0\x90\x80\x80"), 0x10000);
    cr_assert_eq(ONE("\xf4\x8f\xbf\xbf"), 0x10ffff);
    cr_assert_eq(ONE("\xf4\x90\x80\x80"), -1, "U+110000");
    cr_assert_eq(ONE("\xf7\xbf\xbf\xbf"), -1, "U+1FFFFF");
}

Test(text, overlong_forms)
{
    cr_assert_eq(ONE("\xc0\x80"), -1);
    cr_assert_eq(ONE("\xc0\xaf"), -1);
    cr_assert_eq(ONE("\xc1\xbf"), -1);
    cr_assert_eq(ONE("\xe0\x80\xaf"), -1);
    cr_assert_eq(ONE("\xe0\x9f\xbf"), -1, "U+7FF in three bytes");
    cr_assert_eq(ONE("\xf0\x80\x80\xaf"), -1);
    cr_assert_eq(ONE("\xf0\x8f\xbf\xbf"), -1, "U+FFFF in four bytes");
}

Test(text, surrogates)
{
    cr_assert_eq(ONE("\xed\xa0\x80"), -1, "U+D800");
    cr_assert_eq(ONE("\xed\xaf\xbf"), -1, "U+DBFF");
    cr_assert_eq(ONE("\xed\xb0\x80"), -1, "U+DC00");
    cr_assert_eq(ONE("\xed\xbf\xbf"), -1, "U+DFFF");
}

Test(text, stray_and_impossible_bytes)
{
    cr_assert_eq(ONE("\x80"), -1);
    cr_assert_eq(ONE("\xbf"), -1);
    for (int b = 0xf5; b <= 0xff; b++) {
        char s[4] = {(char)b, '\x80', '\x80', '\x80'};
        cr_assert_eq(one(s, 4), -1, "lead byte %#x", b);
    }
}

Test(text, truncated_sequences)
{
    cr_assert_eq(ONE("\xc2"), -1);
    cr_assert_eq(ONE("\xe2\x82"), -1);
    cr_assert_eq(ONE("\xf0\x9f\x94"), -1);
    /* Cut by a byte that is no continuation, the end of a C string too. */
    uint32_t cp;
    cr_assert_eq(utf8_seq("\xe2\x82z", 3, &cp), 0);
    cr_assert_eq(utf8_seq("\xe2\x82", 3, &cp), 0, "the terminating NUL");
    cr_assert_eq(utf8_seq("\xc3\xc3\xa9", 3, &cp), 0);
    /* ... and by len, whatever follows. */
    cr_assert_eq(utf8_seq("\xe2\x82\xac", 2, &cp), 0);
    /* A sequence followed by more takes its own bytes only. */
    cr_assert_eq(utf8_seq("\xc3\xa9\xc3\xa9", 4, &cp), 2);
    cr_assert_eq(cp, 0xe9);
}

Test(text, controls)
{
    for (uint32_t cp = 0; cp < 0x20; cp++)
        cr_assert(text_is_control(cp), "U+%04X", cp);
    cr_assert(!text_is_control(' '));
    cr_assert(!text_is_control('~'));
    cr_assert(text_is_control(0x7f));
    cr_assert(text_is_control(0x80));
    cr_assert(text_is_control(0x85));
    cr_assert(text_is_control(0x9f));
    cr_assert(!text_is_control(0xa0));
    cr_assert(!text_is_control(0x416));
}

static const char *printable(const char *s)
{
    static char out[64];
    text_printable(out, sizeof out, s);
    return out;
}

Test(text, printable_copies)
{
    cr_assert_str_eq(printable("plain-name_1.2"), "plain-name_1.2");
    cr_assert_str_eq(printable("\xd0\x91\xd0\xbe\xd0\xb1"), "\xd0\x91\xd0\xbe\xd0\xb1");
    cr_assert_str_eq(printable("a\tb\nc\x1b[2J\x7f"), "a?b?c?[2J?");
    cr_assert_str_eq(printable("nel\xc2\x85 csi\xc2\x9b"), "nel? csi?");
    cr_assert_str_eq(printable("\xc2\xa0nbsp"), "\xc2\xa0nbsp");
    cr_assert_str_eq(printable("ff\xff\xfe"), "ff??");
    cr_assert_str_eq(printable("\xc0\xaf"), "??");
    cr_assert_str_eq(printable("\xed\xa0\x80"), "???");
    cr_assert_str_eq(printable("\xf4\x90\x80\x80"), "????");
    cr_assert_str_eq(printable("cut\xe2\x82"), "cut??");
    cr_assert_str_eq(printable("\x80x"), "?x");
    cr_assert_str_eq(printable(""), "");
}

Test(text, printable_copies_are_cut_between_characters)
{
    char out[6];
    text_printable(out, sizeof out, "ab\xe2\x82\xac\xe2\x82\xac");
    cr_assert_str_eq(out, "ab\xe2\x82\xac", "room for 5 bytes: the second euro sign does not fit");
    text_printable(out, sizeof out, "abcd\xd0\x96");
    cr_assert_str_eq(out, "abcd");
    text_printable(out, sizeof out, "abcdefgh");
    cr_assert_str_eq(out, "abcde");
    text_printable(out, 1, "abc");
    cr_assert_str_eq(out, "");
    /* A copy is never longer than the original: its size is room enough. */
    const char *odd = "\xc2\x85\xc2\x85\xff\xd0\x96";
    char exact[8];
    text_printable(exact, strlen(odd) + 1, odd);
    cr_assert_str_eq(exact, "???\xd0\x96");
}

Test(text, info_field_finds_whole_field_names)
{
    const char *info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n"
                       "uptime_in_seconds:42\r\nuptime:x\r\n";
    char out[16];
    text_info_field(info, "run_id", out, sizeof out);
    cr_assert_str_eq(out, "abc123");
    text_info_field(info, "uptime_in_seconds", out, sizeof out);
    cr_assert_str_eq(out, "42");
    text_info_field(info, "uptime", out, sizeof out);
    cr_assert_str_eq(out, "x", "a field whose name starts another's: %s", out);
    text_info_field(info, "missing", out, sizeof out);
    cr_assert_str_eq(out, "");
    text_info_field(info, "redis_version", out, 4);
    cr_assert_str_eq(out, "7.0", "cut to fit");
}
