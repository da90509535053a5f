/* SPDX-License-Identifier: BSD-3-Clause */
/* test_log.c -- unit tests of agent/base/log.c: the rate limit per message kind
 * and its "suppressed N" summaries, on an injected clock. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

static uint64_t fake_ns;

static uint64_t fake_clock(void)
{
    return fake_ns;
}

static FILE *out;
static int saved_stderr = -1;

/* stderr goes to a temporary file for the test, read back by captured(). */
static void capture(void)
{
    fake_ns = 5000000000ull;
    log_set_clock(fake_clock);
    log_set_level(LOG_DEBUG);
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
