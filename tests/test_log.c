/* SPDX-License-Identifier: BSD-3-Clause */
/* test_log.c -- unit tests of agent/base/log.c: the rate limit per message kind
 * and its "suppressed N" summaries, on an injected clock; the plain, logfmt
 * and json formats and their escaping of hostile values; the journal's
 * entries and fields, through a fake sender and through the real
 * sd_journal_sendv() to a socket of the test's own. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "text.h"

static uint64_t fake_ns;

static uint64_t fake_clock(void)
{
    return fake_ns;
}

static FILE *out;
static int saved_stderr = -1;

/* 2026-12-02T17:40:01.123Z */
#define WALL_MS 1796233201123ull

static uint64_t fake_wall(void)
{
    return WALL_MS;
}

/* A journal that is not there: entries fall back to the stream. */
static int no_journal(const struct iovec *iov, int n)
{
    return -ENOENT;
}

/* stderr goes to a temporary file for the test, read back by captured(). */
static void capture(void)
{
    fake_ns = 5000000000ull;
    log_set_clock(fake_clock);
    log_set_wallclock(fake_wall);
    log_set_level(LOG_DEBUG);
    log_set_format(LOG_FORMAT_PLAIN);
    log_set_journal_sender(no_journal);
    out = tmpfile();
    cr_assert(out);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    dup2(fileno(out), STDERR_FILENO);
}

static void restore(void)
{
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    fclose(out);
    log_set_clock(NULL);
    log_set_wallclock(NULL);
    log_set_journal_sender(NULL);
    log_set_format(LOG_FORMAT_PLAIN);
    unsetenv("JOURNAL_STREAM");
    log_detect_journal();
}

/* Counts the captured lines containing needle. */
static int lines_with(const char *needle)
{
    fflush(stderr);
    rewind(out);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, out))
        n += strstr(line, needle) != NULL;
    return n;
}

TestSuite(log, .init = capture, .fini = restore);

Test(log, a_burst_of_one_kind_is_cut_to_the_limit)
{
    for (int i = 0; i < 1000; i++)
        log_warn("accept failed: %s (%d)", "too many open files", i);
    cr_assert_eq(lines_with("accept failed"), LOG_BURST);
    cr_assert_eq(lines_with("suppressed"), 0, "no summary while the second lasts");
}

Test(log, the_summary_counts_what_was_left_out)
{
    for (int i = 0; i < 1000; i++)
        log_warn("burst %d", i);
    log_flush_suppressed();
    cr_assert_eq(lines_with("suppressed"), 0);
    fake_ns += 1000000000ull;
    log_flush_suppressed();
    cr_assert_eq(lines_with("suppressed 990 similar message(s) (\"burst ...\")"), 1);
    log_flush_suppressed();
    cr_assert_eq(lines_with("suppressed"), 1, "summed up once");
    /* A new second admits a new burst. */
    for (int i = 0; i < 20; i++)
        log_warn("burst %d", i);
    cr_assert_eq(lines_with("burst"), 2 * LOG_BURST + 1);
}

Test(log, the_next_message_of_the_kind_brings_the_summary)
{
    for (int i = 0; i < 15; i++)
        log_info("again %d", i);
    fake_ns += 2000000000ull;
    log_info("again %d", 99);
    cr_assert_eq(lines_with("suppressed 5 similar"), 1);
    cr_assert_eq(lines_with("again 99"), 1);
}

Test(log, kinds_are_limited_apart)
{
    for (int i = 0; i < 100; i++) {
        log_warn("kind one %d", i);
        log_error("kind two %d", i);
    }
    cr_assert_eq(lines_with("kind one"), LOG_BURST);
    cr_assert_eq(lines_with("kind two"), LOG_BURST);
}

Test(log, many_kinds_evict_the_oldest_after_its_summary)
{
    static const char *const fmts[] = {
        "k00 %d", "k01 %d", "k02 %d", "k03 %d", "k04 %d", "k05 %d", "k06 %d", "k07 %d", "k08 %d",
        "k09 %d", "k10 %d", "k11 %d", "k12 %d", "k13 %d", "k14 %d", "k15 %d", "k16 %d", "k17 %d",
        "k18 %d", "k19 %d", "k20 %d", "k21 %d", "k22 %d", "k23 %d", "k24 %d", "k25 %d", "k26 %d",
        "k27 %d", "k28 %d", "k29 %d", "k30 %d", "k31 %d", "k32 %d", "k33 %d"};
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
        for (int i = 0; i < LOG_BURST + 3; i++) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
            log_msg(LOG_WARN, fmts[k], i); /* a kind is its format's address */
#pragma GCC diagnostic pop
        }
        fake_ns += 1000; /* later windows are younger */
    }
    /* 34 kinds in a table of fewer: the first ones were evicted, and their
     * suppressed lines were summed up on the way out. */
    cr_assert_geq(lines_with("suppressed 3 similar"), 2);
    fake_ns += 1000000000ull;
    log_flush_suppressed();
    cr_assert_eq(lines_with("suppressed 3 similar"), 34);
}

Test(log, levels_below_the_threshold_count_nothing)
{
    log_set_level(LOG_WARN);
    for (int i = 0; i < 100; i++)
        log_debug("quiet %d", i);
    cr_assert_eq(lines_with("quiet"), 0);
    fake_ns += 1000000000ull;
    log_flush_suppressed();
    cr_assert_eq(lines_with("suppressed"), 0);
}

/* With stderr being the stream $JOURNAL_STREAM names, lines carry their
 * syslog priority for journald; elsewhere the text tag. */
Test(log, the_journal_gets_priorities)
{
    struct stat st;
    cr_assert_eq(fstat(STDERR_FILENO, &st), 0);
    char js[64];
    snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
    log_detect_journal();
    log_error("e %d", 1);
    log_warn("w %d", 2);
    log_info("i %d", 3);
    log_debug("d %d", 4);
    for (int i = 0; i < LOG_BURST + 1; i++)
        log_warn("burst %d", i);
    fake_ns += 1000000000ull;
    log_flush_suppressed();
    cr_assert_eq(lines_with("<3>e 1"), 1);
    cr_assert_eq(lines_with("<4>w 2"), 1);
    cr_assert_eq(lines_with("<6>i 3"), 1);
    cr_assert_eq(lines_with("<7>d 4"), 1);
    cr_assert_eq(lines_with("<4>suppressed 1 similar"), 1);
    cr_assert_eq(lines_with("dlockd["), 0);
    /* Configuration errors, printed before (or without) the log. */
    log_config_error("bad %d", 7);
    cr_assert_eq(lines_with("<3>dlockd: bad 7"), 1);
    /* Another stream (a terminal, a file the output was redirected to). */
    setenv("JOURNAL_STREAM", "1:1", 1);
    log_detect_journal();
    log_warn("plain %d", 5);
    cr_assert_eq(lines_with("dlockd[warn]: plain 5"), 1);
    log_config_error("plain %d", 6);
    cr_assert_eq(lines_with("dlockd: plain 6"), 1);
    cr_assert_eq(lines_with("<3>dlockd: plain 6"), 0);
    unsetenv("JOURNAL_STREAM");
    log_detect_journal();
}

/* ---- formats ---- */

/* The one captured line containing needle (without its newline); fails
 * unless there is exactly one. */
static const char *the_line(const char *needle)
{
    static char found[20000];
    char line[20000];
    int n = 0;
    fflush(stderr);
    rewind(out);
    while (fgets(line, sizeof line, out)) {
        if (!strstr(line, needle))
            continue;
        line[strcspn(line, "\n")] = '\0';
        memcpy(found, line, strlen(line) + 1);
        n++;
    }
    cr_assert_eq(n, 1, "%d lines with '%s'", n, needle);
    return found;
}

/* Every captured line, joined. */
static const char *captured(void)
{
    static char all[65536];
    fflush(stderr);
    rewind(out);
    size_t n = fread(all, 1, sizeof all - 1, out);
    all[n] = '\0';
    return all;
}

/* Whether s is valid UTF-8 throughout. */
static bool valid_utf8(const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (!n)
            return false;
        i += n;
    }
    return true;
}

/* A json string at *p (RFC 8259: no raw control character, known escapes
 * only); moves *p past it. */
static bool json_string(const char **p)
{
    const char *s = *p;
    if (*s++ != '"')
        return false;
    for (; *s != '"'; s++) {
        if ((unsigned char)*s < 0x20)
            return false;
        if (*s == '\\') {
            s++;
            if (*s == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i])
                        return false;
                s += 4;
            } else if (!*s || !strchr("\"\\/bfnrt", *s)) {
                return false;
            }
        }
    }
    *p = s + 1;
    return true;
}

/* Whether line is one flat json object of string and number members, in
 * valid UTF-8: what a log line in json is. */
static bool json_object(const char *line)
{
    if (!valid_utf8(line))
        return false;
    const char *p = line;
    if (*p++ != '{')
        return false;
    for (bool first = true; *p != '}'; first = false) {
        if (!first && *p++ != ',')
            return false;
        if (!json_string(&p) || *p++ != ':')
            return false;
        if (*p == '"') {
            if (!json_string(&p))
                return false;
        } else {
            const char *d = p;
            while (*p >= '0' && *p <= '9')
                p++;
            if (p == d)
                return false;
        }
    }
    return p[1] == '\0';
}

Test(log, plain_starts_with_an_rfc3339_utc_stamp)
{
    log_info("hello %d", 1);
    cr_assert_str_eq(the_line("hello"), "2026-12-02T17:40:01.123Z dlockd[info]: hello 1");
    log_warn("%s", "bye");
    cr_assert_str_eq(the_line("bye"), "2026-12-02T17:40:01.123Z dlockd[warn]: bye");
}

/* A value with a newline cannot start a second line; control sequences
 * and bytes outside UTF-8 do not reach a terminal as they are. */
Test(log, plain_escapes_what_could_forge_a_line)
{
    log_kv(LOG_INFO, LOG_FIELDS(LOG_F_LOCK("x", 1)), "lost %s here",
           "job\n2026-12-02T00:00:00.000Z dlockd[info]: forged\r\t\x1b[31m\x7f\xff\xc2\x85ok");
    cr_assert_str_eq(the_line("lost"), "2026-12-02T17:40:01.123Z dlockd[info]: lost "
                                       "job\\n2026-12-02T00:00:00.000Z dlockd[info]: "
                                       "forged\\r\\t\\x1b[31m\\x7f\\xff\\u0085ok here");
    cr_assert_eq(lines_with("forged"), 1);
    /* Well-formed UTF-8 is kept; so are quotes and backslashes. */
    log_info("name %s", "caf\xc3\xa9 \"q\" a\\b");
    cr_assert_str_eq(the_line("name"),
                     "2026-12-02T17:40:01.123Z dlockd[info]: name caf\xc3\xa9 \"q\" a\\b");
}

Test(log, logfmt_has_ts_level_msg_and_the_fields)
{
    log_set_format(LOG_FORMAT_LOGFMT);
    log_kv(LOG_WARN,
           LOG_FIELDS(LOG_F_LOCK("jobs", 4), LOG_F_LEASE(0x1a2bull), LOG_F_FENCE(42),
                      LOG_F_PID(4242), LOG_F_UID(0)),
           "lease on %s lost", "jobs");
    cr_assert_str_eq(the_line("lost"), "ts=2026-12-02T17:40:01.123Z level=warn msg=\"lease on jobs "
                                       "lost\" lock=jobs lease=1a2b fence=42 pid=4242 uid=0");
    log_info("plain %s", "words");
    cr_assert_str_eq(the_line("plain words"),
                     "ts=2026-12-02T17:40:01.123Z level=info msg=\"plain words\"");
}

Test(log, logfmt_quotes_and_escapes_hostile_values)
{
    log_set_format(LOG_FORMAT_LOGFMT);
    /* A name with every character that needs care, after a length that
     * holds a NUL byte. */
    static const char name[] = "a b\"c\\d=e\nf\x01\xff\xc2\x85g\xc3\xa9";
    log_kv(LOG_INFO, LOG_FIELDS(LOG_F_LOCK(name, sizeof name - 1), LOG_F_LOCK("n\0ul", 4)),
           "about %s", name);
    cr_assert_str_eq(the_line("about"),
                     "ts=2026-12-02T17:40:01.123Z level=info msg=\"about a "
                     "b\\\"c\\\\d=e\\nf\\x01\\xff\\u0085g\xc3\xa9\" "
                     "lock=\"a b\\\"c\\\\d=e\\nf\\x01\\xff\\u0085g\xc3\xa9\" lock=\"n\\x00ul\"");
    /* Empty, '=' and plain UTF-8 values. */
    log_kv(LOG_INFO, LOG_FIELDS(LOG_F_LOCK("", 0), LOG_F_LOCK("k=v", 3), LOG_F_LOCK("\xc3\xa9", 2)),
           "edge %d", 1);
    cr_assert_str_eq(the_line("edge"), "ts=2026-12-02T17:40:01.123Z level=info msg=\"edge 1\" "
                                       "lock=\"\" lock=\"k=v\" lock=\xc3\xa9");
}

Test(log, json_has_ts_level_msg_and_the_fields)
{
    log_set_format(LOG_FORMAT_JSON);
    log_kv(LOG_ERROR,
           LOG_FIELDS(LOG_F_LOCK("jobs", 4), LOG_F_LEASE(0xffffffffffffffffull),
                      LOG_F_FENCE(18446744073709551615ull), LOG_F_PID(1), LOG_F_UID(65534)),
           "denied %s", "jobs");
    const char *l = the_line("denied");
    cr_assert_str_eq(l, "{\"ts\":\"2026-12-02T17:40:01.123Z\",\"level\":\"error\",\"msg\":\"denied "
                        "jobs\",\"lock\":\"jobs\",\"lease\":\"ffffffffffffffff\","
                        "\"fence\":18446744073709551615,\"pid\":1,\"uid\":65534}");
    cr_assert(json_object(l));
    log_debug("no fields %d", 2);
    cr_assert_str_eq(the_line("no fields"), "{\"ts\":\"2026-12-02T17:40:01.123Z\",\"level\":"
                                            "\"debug\",\"msg\":\"no fields 2\"}");
}

Test(log, json_escapes_every_byte)
{
    log_set_format(LOG_FORMAT_JSON);
    static const char name[] = "q\"b\\n\nt\tc\x01\x1f\x7f\xc2\x85\xe2\x80\xa8"
                               "bad\xff\xc3(\xed\xa0\x80\xc3\xa9/";
    log_kv(LOG_INFO, LOG_FIELDS(LOG_F_LOCK(name, sizeof name - 1)), "x%sx", name);
    const char *l = the_line("\"msg\"");
    cr_assert(json_object(l), "%s", l);
    static const char want[] =
        "q\\\"b\\\\n\\nt\\tc\\u0001\\u001f\\u007f\\u0085\\u2028bad\\ufffd\\ufffd("
        "\\ufffd\\ufffd\\ufffd\xc3\xa9/";
    char expect[512];
    snprintf(expect, sizeof expect,
             "{\"ts\":\"2026-12-02T17:40:01.123Z\",\"level\":\"info\",\"msg\":\"x%sx\","
             "\"lock\":\"%s\"}",
             want, want);
    cr_assert_str_eq(l, expect);
}

/* Every byte value, alone and in every pair, as a name: each line is one
 * json object in valid UTF-8. */
Test(log, json_stays_json_for_any_bytes)
{
    log_set_format(LOG_FORMAT_JSON);
    log_set_level(LOG_INFO);
    for (int a = 0; a < 256; a++) {
        for (int b = 0; b < 256; b++) {
            char name[3] = {(char)a, (char)b, 'z'};
            char line[512];
            size_t n = log_render(LOG_INFO, "m", LOG_FIELDS(LOG_F_LOCK(name, 3)), false, line,
                                  sizeof line);
            cr_assert_eq(strlen(line), n);
            cr_assert(json_object(line), "bytes %02x %02x: %s", a, b, line);
        }
    }
}

/* A line longer than the buffer is cut, between characters, and stays one
 * line of its format. */
Test(log, a_cut_line_keeps_its_format)
{
    static char big[3000];
    memset(big, '\n', sizeof big - 1);
    for (size_t cap = 64; cap < 2200; cap += 37) {
        char line[2200];
        log_set_format(LOG_FORMAT_JSON);
        size_t n =
            log_render(LOG_WARN, big, LOG_FIELDS(LOG_F_LOCK(big, sizeof big - 1), LOG_F_PID(7)),
                       false, line, cap);
        cr_assert_lt(n, cap);
        cr_assert_eq(strlen(line), n);
        cr_assert(json_object(line), "cap %zu: %s", cap, line);
        log_set_format(LOG_FORMAT_LOGFMT);
        n = log_render(LOG_WARN, big, LOG_FIELDS(LOG_F_LOCK(big, sizeof big - 1)), false, line,
                       cap);
        cr_assert_lt(n, cap);
        cr_assert_null(strchr(line, '\n'));
        cr_assert_eq(line[n - 1], '"', "cap %zu: the quote is closed: %s", cap, line);
    }
}

Test(log, suppressed_lines_in_every_format)
{
    static const enum log_format formats[] = {LOG_FORMAT_PLAIN, LOG_FORMAT_LOGFMT, LOG_FORMAT_JSON};
    static const char *const want[] = {
        "2026-12-02T17:40:01.123Z dlockd[warn]: suppressed 5 similar message(s) (\"lease on "
        "...\")",
        "ts=2026-12-02T17:40:01.123Z level=warn msg=\"suppressed 5 similar message(s) "
        "(\\\"lease on ...\\\")\" suppressed=5",
        "{\"ts\":\"2026-12-02T17:40:01.123Z\",\"level\":\"warn\",\"msg\":\"suppressed 5 similar "
        "message(s) (\\\"lease on ...\\\")\",\"suppressed\":5}"};
    for (int f = 0; f < 3; f++) {
        log_set_format(formats[f]);
        for (int i = 0; i < LOG_BURST + 5; i++)
            log_kv(LOG_WARN, LOG_FIELDS(LOG_F_LOCK("n", 1)), "lease on %s: %d", "n", i);
        fake_ns += 1000000000ull;
        log_flush_suppressed();
        cr_assert_str_eq(the_line("suppressed"), want[f]);
        if (formats[f] == LOG_FORMAT_JSON)
            cr_assert(json_object(the_line("suppressed")));
        /* The next format's lines are told apart by a fresh capture. */
        fflush(stderr);
        cr_assert_eq(ftruncate(fileno(out), 0), 0);
        rewind(out);
    }
}

Test(log, configuration_errors_in_every_format)
{
    log_config_error("bad %s", "va\nlue");
    cr_assert_str_eq(the_line("bad"), "dlockd: bad va\\nlue");
    log_set_format(LOG_FORMAT_JSON);
    log_config_error("worse %d", 2);
    const char *l = the_line("worse");
    cr_assert_str_eq(l, "{\"ts\":\"2026-12-02T17:40:01.123Z\",\"level\":\"error\",\"msg\":\"worse "
                        "2\"}");
    log_set_format(LOG_FORMAT_LOGFMT);
    log_config_error("worst %d", 3);
    cr_assert_str_eq(the_line("worst"), "ts=2026-12-02T17:40:01.123Z level=error msg=\"worst 3\"");
}

Test(log, format_names)
{
    enum log_format f;
    cr_assert_eq(log_format_parse("json", &f), 0);
    cr_assert_eq(f, LOG_FORMAT_JSON);
    cr_assert_eq(log_format_parse("LogFmt", &f), 0);
    cr_assert_eq(f, LOG_FORMAT_LOGFMT);
    cr_assert_eq(log_format_parse("plain", &f), 0);
    cr_assert_eq(f, LOG_FORMAT_PLAIN);
    cr_assert_eq(log_format_parse("text", &f), -1);
    cr_assert_eq(log_format_parse("", &f), -1);
    cr_assert_str_eq(log_format_name(LOG_FORMAT_LOGFMT), "logfmt");
}

/* ---- the journal ---- */

static const char *iov_str(const struct iovec *v)
{
    static char s[4][2048];
    static int k;
    char *p = s[k++ & 3];
    snprintf(p, sizeof s[0], "%.*s", (int)v->iov_len, (const char *)v->iov_base);
    return p;
}

Test(log, the_journal_entry_has_priority_identifier_message_and_fields)
{
    struct iovec iov[LOG_JOURNAL_IOV];
    char buf[4096];
    static const char name[] = "we\"ird\\na\nme\xff";
    int n = log_journal_entry(LOG_WARN, "lease on x lost",
                              LOG_FIELDS(LOG_F_LOCK(name, sizeof name - 1), LOG_F_LEASE(0xabc),
                                         LOG_F_FENCE(99), LOG_F_PID(321), LOG_F_UID(1000)),
                              iov, buf, sizeof buf);
    cr_assert_eq(n, 8);
    cr_assert_str_eq(iov_str(&iov[0]), "PRIORITY=4");
    cr_assert_str_eq(iov_str(&iov[1]), "SYSLOG_IDENTIFIER=dlockd");
    /* plain: the message alone; journald stamps the entry. */
    cr_assert_str_eq(iov_str(&iov[2]), "MESSAGE=lease on x lost");
    /* The name as it is: journalctl LOCK_NAME=... matches its bytes. */
    cr_assert_eq(iov[3].iov_len, 10 + sizeof name - 1);
    cr_assert_eq(memcmp(iov[3].iov_base, "LOCK_NAME=", 10), 0);
    cr_assert_eq(memcmp((char *)iov[3].iov_base + 10, name, sizeof name - 1), 0);
    cr_assert_str_eq(iov_str(&iov[4]), "LEASE_ID=abc");
    cr_assert_str_eq(iov_str(&iov[5]), "FENCE=99");
    cr_assert_str_eq(iov_str(&iov[6]), "CLIENT_PID=321");
    cr_assert_str_eq(iov_str(&iov[7]), "CLIENT_UID=1000");
    /* In json the MESSAGE is the whole json line. */
    log_set_format(LOG_FORMAT_JSON);
    n = log_journal_entry(LOG_INFO, "m", LOG_FIELDS(LOG_F_PID(5)), iov, buf, sizeof buf);
    cr_assert_eq(n, 4);
    cr_assert_str_eq(iov_str(&iov[2]), "MESSAGE={\"ts\":\"2026-12-02T17:40:01.123Z\",\"level\":"
                                       "\"info\",\"msg\":\"m\",\"pid\":5}");
    /* A field that does not fit is left out, not cut. */
    static char big[3000];
    memset(big, 'b', sizeof big - 1);
    n = log_journal_entry(LOG_INFO, "m", LOG_FIELDS(LOG_F_LOCK(big, sizeof big - 1), LOG_F_PID(6)),
                          iov, buf, 2048);
    cr_assert_eq(n, 4);
    cr_assert_str_eq(iov_str(&iov[3]), "CLIENT_PID=6");
}

static char sent[8][2048];
static int nsent, sends;

static int record_sender(const struct iovec *iov, int n)
{
    sends++;
    nsent = n < 8 ? n : 8;
    for (int i = 0; i < nsent; i++)
        snprintf(sent[i], sizeof sent[i], "%.*s", (int)iov[i].iov_len,
                 (const char *)iov[i].iov_base);
    return 0;
}

/* Makes stderr the stream $JOURNAL_STREAM names. */
static void stderr_is_the_journal(void)
{
    struct stat st;
    cr_assert_eq(fstat(STDERR_FILENO, &st), 0);
    char js[64];
    snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
    log_detect_journal();
}

/* Under the journal every entry goes to journald with its fields, the
 * suppression summaries too; nothing is written to the stream. */
Test(log, under_the_journal_entries_go_to_journald)
{
    log_set_journal_sender(record_sender);
    stderr_is_the_journal();
    log_kv(LOG_INFO, LOG_FIELDS(LOG_F_LOCK("jobs", 4), LOG_F_UID(0)), "denied %s", "jobs");
    cr_assert_eq(sends, 1);
    cr_assert_eq(nsent, 5);
    cr_assert_str_eq(sent[0], "PRIORITY=6");
    cr_assert_str_eq(sent[2], "MESSAGE=denied jobs");
    cr_assert_str_eq(sent[3], "LOCK_NAME=jobs");
    cr_assert_str_eq(sent[4], "CLIENT_UID=0");
    for (int i = 0; i < LOG_BURST + 2; i++)
        log_error("again %d", i);
    fake_ns += 1000000000ull;
    log_flush_suppressed();
    cr_assert_eq(sends, 2 + LOG_BURST);
    cr_assert_str_eq(sent[0], "PRIORITY=3");
    cr_assert_str_eq(sent[2], "MESSAGE=suppressed 2 similar message(s) (\"again ...\")");
    cr_assert_str_eq(sent[3], "SUPPRESSED=2");
    cr_assert_str_eq(captured(), "");
    /* When journald does not take it, the entry goes to the stream. */
    log_set_journal_sender(no_journal);
    log_kv(LOG_WARN, LOG_FIELDS(LOG_F_LOCK("jobs", 4)), "lost %s", "jobs");
    cr_assert_str_eq(the_line("lost"), "<4>lost jobs");
}

/* The real sd_journal_sendv(), to a socket of the test's own at journald's
 * path (in a mount namespace of a child process, where /run is a tmpfs):
 * the datagram holds the fields in journald's native protocol. Skipped
 * where no mount namespace can be made. */

/* The value of field `name` in a native-protocol datagram (text form
 * "NAME=value\n" or binary form "NAME\n" le64 length, value, "\n"), into
 * val; its length, or -1. */
static long native_field(const char *d, size_t len, const char *name, char *val, size_t cap)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < len;) {
        const char *line = d + i;
        const char *eq = memchr(line, '=', len - i), *end = memchr(line, '\n', len - i);
        if (!end)
            return -1;
        if (eq && eq < end) {
            if ((size_t)(eq - line) == nl && memcmp(line, name, nl) == 0) {
                size_t vlen = (size_t)(end - eq - 1);
                if (vlen >= cap)
                    return -1;
                memcpy(val, eq + 1, vlen);
                val[vlen] = '\0';
                return (long)vlen;
            }
            i = (size_t)(end - d) + 1;
            continue;
        }
        /* binary: NAME\n, 8 bytes of length, the bytes, \n */
        uint64_t vlen = 0;
        const unsigned char *lp = (const unsigned char *)end + 1;
        if ((size_t)(end - d) + 9 > len)
            return -1;
        for (int b = 7; b >= 0; b--)
            vlen = vlen << 8 | lp[b];
        const char *v = end + 9;
        if ((size_t)(v - d) + vlen + 1 > len)
            return -1;
        if ((size_t)(end - line) == nl && memcmp(line, name, nl) == 0) {
            if (vlen >= cap)
                return -1;
            memcpy(val, v, vlen);
            val[vlen] = '\0';
            return (long)vlen;
        }
        i = (size_t)(v - d) + vlen + 1;
    }
    return -1;
}

#define SKIP_EXIT 77

/* The child's part: 0 when the datagram is right, SKIP_EXIT without a
 * namespace, else 1 with why in msg. */
static int journal_child(char *msg, size_t cap)
{
    if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
        snprintf(msg, cap, "unshare: %s", strerror(errno));
        return SKIP_EXIT;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") != 0) {
        snprintf(msg, cap, "mount: %s", strerror(errno));
        return SKIP_EXIT;
    }
    if (mkdir("/run/systemd", 0755) != 0 || mkdir("/run/systemd/journal", 0755) != 0) {
        snprintf(msg, cap, "mkdir: %s", strerror(errno));
        return 1;
    }
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "/run/systemd/journal/socket"};
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(msg, cap, "bind: %s", strerror(errno));
        return 1;
    }
    log_set_journal_sender(NULL);
    stderr_is_the_journal();
    static const char name[] = "odd\nname\"\xff";
    log_kv(LOG_INFO,
           LOG_FIELDS(LOG_F_LOCK(name, sizeof name - 1), LOG_F_LEASE(0x5f), LOG_F_FENCE(12),
                      LOG_F_PID(77), LOG_F_UID(1001)),
           "lease on %s held by pid %d lost", "odd", 77);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static char d[65536];
    ssize_t len = recv(s, d, sizeof d, 0);
    if (len <= 0) {
        snprintf(msg, cap, "no datagram: %s", strerror(errno));
        return 1;
    }
    static const struct {
        const char *name, *value;
        size_t len;
    } want[] = {{"PRIORITY", "6", 1},
                {"SYSLOG_IDENTIFIER", "dlockd", 6},
                {"MESSAGE", "lease on odd held by pid 77 lost", 32},
                {"LOCK_NAME", name, sizeof name - 1},
                {"LEASE_ID", "5f", 2},
                {"FENCE", "12", 2},
                {"CLIENT_PID", "77", 2},
                {"CLIENT_UID", "1001", 4}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char v[256];
        long n = native_field(d, (size_t)len, want[i].name, v, sizeof v);
        if (n != (long)want[i].len || memcmp(v, want[i].value, want[i].len) != 0) {
            snprintf(msg, cap, "field %s: %ld bytes '%s'", want[i].name, n, n >= 0 ? v : "");
            return 1;
        }
    }
    if (strlen(captured()) != 0) {
        snprintf(msg, cap, "the stream got: %.200s", captured());
        return 1;
    }
    return 0;
}

Test(log, sd_journal_sendv_sends_the_fields_to_journald)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char msg[512] = "";
        int rc = journal_child(msg, sizeof msg);
        if (write(p[1], msg, strlen(msg)) < 0)
            rc = 1;
        _exit(rc);
    }
    close(p[1]);
    char msg[512] = "";
    ssize_t n = read(p[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(p[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "the child died");
    if (WEXITSTATUS(st) == SKIP_EXIT)
        cr_skip_test("no private mount namespace here: %s", msg);
    cr_assert_eq(WEXITSTATUS(st), 0, "%s", msg);
}
