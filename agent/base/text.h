/* SPDX-License-Identifier: BSD-3-Clause */
/* text.h -- strings from outside (lock names, command names, Redis values)
 * made safe to show: one UTF-8 decoder, and a printable copy for text
 * output; and a field of Redis' INFO text. Pure, no I/O. */
#ifndef DLOCKD_TEXT_H
#define DLOCKD_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length (1 to 4) of the well-formed UTF-8 sequence that starts s (len
 * bytes, len >= 1), with its code point in *cp; 0 when s[0] starts none:
 * an overlong form, a surrogate, a code point above U+10FFFF, a sequence
 * cut short (also by len) or a stray continuation byte. */
size_t utf8_seq(const char *s, size_t len, uint32_t *cp);

/* Whether cp is a control character: C0, DEL or C1 (U+0080..U+009F). */
bool text_is_control(uint32_t cp);

/* Copies src into dst (cap >= 1 bytes, always terminated) for a terminal:
 * well-formed UTF-8 is kept, except control characters, which become one
 * '?' each, as does every byte outside a well-formed sequence. The copy is
 * never longer than src; when it does not fit it is cut between
 * characters. */
void text_printable(char *dst, size_t cap, const char *src);

/* The value of "field:" in the text of a Redis INFO reply (lines
 * "name:value", CRLF-terminated), copied into out (cap >= 1 bytes, cut to
 * fit); empty when the field is not there. */
void text_info_field(const char *info, const char *field, char *out, size_t cap);

#endif
