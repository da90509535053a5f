/* SPDX-License-Identifier: BSD-3-Clause */
/* log.c -- leveled logging to stderr: one line per message, with a level
 * tag (or, when stderr is the journal, the priority prefix journald reads),
 * and a rate limit per message kind so that a burst (a flood of
 * refused connections, a failing accept) cannot fill the journal or keep
 * the loop busy writing. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static enum log_level current = LOG_INFO;
static const char *const tags[] = {"error", "warn", "info", "debug"};
/* syslog priorities (err, warning, info, debug), as sd-daemon(3) prefixes. */
static const char prio[] = {'3', '4', '6', '7'};
static bool to_journal;

void log_detect_journal(void)
{
    /* systemd sets JOURNAL_STREAM to the device and inode of the stream it
     * gave us; stderr is still that stream unless it was redirected. */
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    to_journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
                 (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_level(enum log_level level)
{
    current = level;
}

enum log_level log_get_level(void)
{
    return current;
}

/* ---- rate limit ----
 *
 * A message kind is its format string (one call site, or a few sharing one
 * text). Each kind may log LOG_BURST lines per one-second window; further
 * lines in that window are counted, and the count is logged as one summary
 * line when the window is over (at the kind's next message, or at the next
 * log_flush_suppressed()). Kinds live in a small table; when it is full the
 * oldest window is evicted after its summary. */

#define KINDS     32
#define WINDOW_NS 1000000000ull

struct kind {
    const char *fmt;
    enum log_level level;
    uint64_t window; /* start of the current window, ns */
    unsigned logged, suppressed;
};

static struct kind kinds[KINDS];
static unsigned pending; /* kinds with suppressed lines not yet summed up */
/* The loop logs, and so may the thread that reads the configuration again
 * at SIGHUP: the rate limit's table is shared. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t (*clock_fn)(void) = mono_now;

void log_set_clock(uint64_t (*fn)(void))
{
    clock_fn = fn ? fn : mono_now;
}

/* The first words of a format, up to its first conversion, as its name in
 * a summary line. */
static int fmt_stem(const char *fmt)
{
    int n = 0;
    while (fmt[n] && fmt[n] != '%' && n < 60)
        n++;
    return n;
}

/* The start of a line: the journal's priority prefix, or a text tag. */
static void line_start(enum log_level level)
{
    if (to_journal)
        fprintf(stderr, "<%c>", prio[level]);
    else
        fprintf(stderr, "dlockd[%s]: ", tags[level]);
}

static void summarize(struct kind *k)
{
    if (!k->suppressed)
        return;
    line_start(k->level);
    fprintf(stderr, "suppressed %u similar message(s) (\"%.*s...\")\n", k->suppressed,
            fmt_stem(k->fmt), k->fmt);
    k->suppressed = 0;
    pending--;
}

static struct kind *kind_of(const char *fmt, enum log_level level)
{
    struct kind *oldest = &kinds[0];
    for (int i = 0; i < KINDS; i++) {
        if (kinds[i].fmt == fmt)
            return &kinds[i];
        if (!kinds[i].fmt || kinds[i].window < oldest->window)
            oldest = &kinds[i];
        if (!kinds[i].fmt)
            break;
    }
    if (oldest->fmt)
        summarize(oldest);
    *oldest = (struct kind){.fmt = fmt, .level = level};
    return oldest;
}

/* Whether a line of this kind may go out now. */
static bool admit(const char *fmt, enum log_level level)
{
    uint64_t now = clock_fn();
    struct kind *k = kind_of(fmt, level);
    if (now - k->window >= WINDOW_NS) {
        summarize(k);
        k->window = now;
        k->logged = 0;
    }
    if (k->logged < LOG_BURST) {
        k->logged++;
        return true;
    }
    if (k->suppressed++ == 0)
        pending++;
    return false;
}

void log_flush_suppressed(void)
{
    if (!__atomic_load_n(&pending, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&lock);
    uint64_t now = clock_fn();
    for (int i = 0; i < KINDS && kinds[i].fmt; i++)
        if (kinds[i].suppressed && now - kinds[i].window >= WINDOW_NS)
            summarize(&kinds[i]);
    pthread_mutex_unlock(&lock);
}

__attribute__((format(printf, 2, 0))) static void vlog(enum log_level level, const char *fmt,
                                                       va_list ap)
{
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    line_start(level);
    fprintf(stderr, "%s\n", line);
}

void log_config_error(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%sdlockd: %s\n", to_journal ? "<3>" : "", line);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level > current)
        return;
    pthread_mutex_lock(&lock);
    if (admit(fmt, level)) {
        va_list ap;
        va_start(ap, fmt);
        vlog(level, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&lock);
}

void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(LOG_ERROR, fmt, ap);
    va_end(ap);
    exit(1);
}
