/* SPDX-License-Identifier: BSD-3-Clause */
/* log.c -- leveled logging: one line per message on stderr, in the plain,
 * logfmt or json format, or one entry of the systemd journal with its
 * priority and fields; and a rate limit per message kind so that a burst (a
 * flood of refused connections, a failing accept) cannot fill the journal
 * or keep the loop busy writing.
 *
 * Every line is built whole in a buffer and written with one call, so lines
 * of the loop and of the thread that reads the configuration again do not
 * mix. What comes from outside (lock names, Redis' answers, values of the
 * configuration file) is escaped for the format: in no format can it end
 * the line, reach a terminal as a control character, or break the json. */
#define SD_JOURNAL_SUPPRESS_LOCATION /* CODE_FILE would always be log.c */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <systemd/sd-journal.h>
#include <time.h>
#include <unistd.h>

#include "text.h"

static enum log_level current = LOG_INFO;
static enum log_format format = LOG_FORMAT_PLAIN;
static const char *const tags[] = {"error", "warn", "info", "debug"};
static const char *const format_names[] = {"plain", "logfmt", "json"};
/* syslog priorities (err, warning, info, debug), as sd-daemon(3) prefixes. */
static const char prio[] = {'3', '4', '6', '7'};
static bool to_journal; /* stderr is the journal's stream */
static bool native;     /* and its native socket is there */
#define JOURNAL_SOCKET "/run/systemd/journal/socket"

static int default_sender(const struct iovec *iov, int n)
{
    return sd_journal_sendv(iov, n);
}

static int (*journal_sender)(const struct iovec *, int) = default_sender;

void log_set_journal_sender(int (*fn)(const struct iovec *iov, int n))
{
    journal_sender = fn ? fn : default_sender;
}

void log_detect_journal(void)
{
    /* systemd sets JOURNAL_STREAM to the device and inode of the stream it
     * gave us; stderr is still that stream unless it was redirected. */
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    to_journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
                 (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
    /* Entries go to journald's socket when it is there (sd_journal_sendv()
     * drops them silently when it is not): else on the stream. */
    native = to_journal && access(JOURNAL_SOCKET, W_OK) == 0;
}

void log_set_level(enum log_level level)
{
    current = level;
}

enum log_level log_get_level(void)
{
    return current;
}

/* The format is set by the loop and read by any thread that logs. */
void log_set_format(enum log_format f)
{
    __atomic_store_n(&format, f, __ATOMIC_RELAXED);
}

enum log_format log_get_format(void)
{
    return __atomic_load_n(&format, __ATOMIC_RELAXED);
}

int log_format_parse(const char *text, enum log_format *out)
{
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(text, format_names[i]) == 0) {
            *out = (enum log_format)i;
            return 0;
        }
    }
    return -1;
}

const char *log_format_name(enum log_format f)
{
    return (unsigned)f < 3 ? format_names[f] : "?";
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t (*wall_fn)(void) = wall_ms;

void log_set_wallclock(uint64_t (*fn)(void))
{
    wall_fn = fn ? fn : wall_ms;
}

/* ---- building a line ----
 *
 * A line is built in a fixed buffer. Each piece goes in whole or not at all
 * (an escape sequence is never cut); once one does not fit, the rest of the
 * line is left out, but for the closing quote and brace, for which room is
 * always kept, so that a cut json line is still json. */

#define CLOSING_ROOM 4 /* '"', '}', '\n', '\0' */

struct out {
    char *p;
    size_t len, cap; /* cap: what the pieces may fill, the closing room not counted */
    bool cut;
};

static void out_init(struct out *o, char *buf, size_t size)
{
    *o = (struct out){.p = buf, .cap = size - CLOSING_ROOM};
    buf[0] = '\0';
}

static bool put(struct out *o, const char *s, size_t n)
{
    if (o->cut || o->len + n > o->cap) {
        o->cut = true;
        return false;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
    o->p[o->len] = '\0';
    return true;
}

static bool puts_(struct out *o, const char *s)
{
    return put(o, s, strlen(s));
}

/* A closing quote or brace: it goes in even after a cut, into the room
 * kept for it. */
static void put_closing(struct out *o, char c)
{
    if (o->len + 2 <= o->cap + CLOSING_ROOM) {
        o->p[o->len++] = c;
        o->p[o->len] = '\0';
    }
}

enum esc {
    ESC_PLAIN,  /* a message for people: control characters and bytes outside UTF-8 escaped */
    ESC_LOGFMT, /* also '"' and '\\', for a quoted logfmt value */
    ESC_JSON,   /* a json string: RFC 8259, and always valid UTF-8 */
};

/* The escape of the character cp (n bytes at s, or one byte outside any
 * UTF-8 sequence when n is 0) into e, or NULL when it goes as it is. */
static const char *escape_of(const char *s, size_t n, uint32_t cp, enum esc mode, char e[8])
{
    if (n == 0) {
        /* JSON text must be UTF-8: the byte becomes U+FFFD. */
        if (mode == ESC_JSON)
            return "\\ufffd";
        snprintf(e, 8, "\\x%02x", (unsigned char)s[0]);
        return e;
    }
    switch (cp) {
    case '\n':
        return "\\n";
    case '\r':
        return "\\r";
    case '\t':
        return "\\t";
    case '"':
        return mode == ESC_PLAIN ? NULL : "\\\"";
    case '\\':
        return mode == ESC_PLAIN ? NULL : "\\\\";
    case 0x2028: /* line and paragraph separators: line ends to JavaScript */
    case 0x2029:
        if (mode != ESC_JSON)
            return NULL;
        snprintf(e, 8, "\\u%04x", (unsigned)cp);
        return e;
    default:
        break;
    }
    if (!text_is_control(cp))
        return NULL;
    if (cp < 0x80 && mode != ESC_JSON)
        snprintf(e, 8, "\\x%02x", (unsigned)cp);
    else
        snprintf(e, 8, "\\u%04x", (unsigned)cp);
    return e;
}

static void put_escaped(struct out *o, const char *s, size_t len, enum esc mode)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t n = utf8_seq(s + i, len - i, &cp);
        char e[8];
        const char *esc = escape_of(s + i, n, cp, mode, e);
        if (!(esc ? puts_(o, esc) : put(o, s + i, n)))
            return;
        i += n ? n : 1;
    }
}

/* Whether a logfmt value must be quoted: it is empty, or holds a blank, '=',
 * '"', a backslash, a control character or a byte outside UTF-8. */
static bool logfmt_quoted(const char *s, size_t len)
{
    if (len == 0)
        return true;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (n == 0 || cp == ' ' || cp == '=' || cp == '"' || cp == '\\' || text_is_control(cp))
            return true;
        i += n;
    }
    return false;
}

/* "2026-12-02T17:40:01.123Z" (RFC 3339, UTC, milliseconds) into ts[64]. */
static void timestamp(char ts[64])
{
    uint64_t ms = wall_fn();
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&sec, &tm))
        memset(&tm, 0, sizeof tm);
    snprintf(ts, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000));
}

static void put_number(struct out *o, const struct log_field *f, bool quote_hex)
{
    char num[24];
    snprintf(num, sizeof num, f->hex ? "%llx" : "%llu", (unsigned long long)f->num);
    if (f->hex && quote_hex) {
        if (puts_(o, "\"") && puts_(o, num))
            put_closing(o, '"');
    } else {
        puts_(o, num);
    }
}

static void render_logfmt(struct out *o, const char *ts, enum log_level level, const char *msg,
                          const struct log_field *fields)
{
    puts_(o, "ts=");
    puts_(o, ts);
    puts_(o, " level=");
    puts_(o, tags[level]);
    if (!puts_(o, " msg=\""))
        return;
    put_escaped(o, msg, strlen(msg), ESC_LOGFMT);
    put_closing(o, '"');
    for (int i = 0; fields && i < LOG_FIELDS_MAX && fields[i].journal; i++) {
        const struct log_field *f = &fields[i];
        char key[40];
        snprintf(key, sizeof key, " %s=", f->key);
        if (!puts_(o, key))
            return;
        if (!f->str) {
            put_number(o, f, false);
        } else if (logfmt_quoted(f->str, f->len)) {
            if (!puts_(o, "\""))
                return;
            put_escaped(o, f->str, f->len, ESC_LOGFMT);
            put_closing(o, '"');
        } else {
            put(o, f->str, f->len);
        }
    }
}

static void render_json(struct out *o, const char *ts, enum log_level level, const char *msg,
                        const struct log_field *fields)
{
    /* The head always fits (a buffer holds at least 64 bytes). */
    puts_(o, "{\"ts\":\"");
    puts_(o, ts);
    puts_(o, "\",\"level\":\"");
    puts_(o, tags[level]);
    if (puts_(o, "\",\"msg\":\"")) {
        put_escaped(o, msg, strlen(msg), ESC_JSON);
        put_closing(o, '"');
    }
    for (int i = 0; fields && i < LOG_FIELDS_MAX && fields[i].journal; i++) {
        const struct log_field *f = &fields[i];
        char key[40];
        snprintf(key, sizeof key, ",\"%s\":", f->key);
        if (!puts_(o, key))
            break;
        if (!f->str) {
            put_number(o, f, true);
        } else if (puts_(o, "\"")) {
            put_escaped(o, f->str, f->len, ESC_JSON);
            put_closing(o, '"');
        }
    }
    /* A field cut after its key ("...,\"lock\":") would leave a member
     * without a value: drop the key. */
    if (o->len && o->p[o->len - 1] == ':') {
        char *comma = strrchr(o->p, ',');
        if (comma) {
            o->len = (size_t)(comma - o->p);
            o->p[o->len] = '\0';
        }
    }
    put_closing(o, '}');
}

size_t log_render(enum log_level level, const char *msg, const struct log_field *fields,
                  bool journal, char *buf, size_t len)
{
    struct out o;
    out_init(&o, buf, len);
    char ts[64] = "";
    enum log_format f = log_get_format();
    if (f != LOG_FORMAT_PLAIN || !journal)
        timestamp(ts);
    if (f == LOG_FORMAT_LOGFMT) {
        render_logfmt(&o, ts, level, msg, fields);
    } else if (f == LOG_FORMAT_JSON) {
        render_json(&o, ts, level, msg, fields);
    } else {
        /* plain: the fields are in the message's text. */
        if (!journal) {
            puts_(&o, ts);
            puts_(&o, " dlockd[");
            puts_(&o, tags[level]);
            puts_(&o, "]: ");
        }
        put_escaped(&o, msg, strlen(msg), ESC_PLAIN);
    }
    return o.len;
}

/* ---- the journal ---- */

int log_journal_entry(enum log_level level, const char *msg, const struct log_field *fields,
                      struct iovec *iov, char *buf, size_t len)
{
    static const char *const prios[] = {"PRIORITY=3", "PRIORITY=4", "PRIORITY=6", "PRIORITY=7"};
    int n = 0;
    iov[n++] = (struct iovec){(void *)prios[level], strlen(prios[level])};
    iov[n++] = (struct iovec){(void *)"SYSLOG_IDENTIFIER=dlockd", 24};
    /* MESSAGE first in buf: at most half of it, so that fields fit too. */
    size_t used = 0, half = len / 2;
    if (half > 8 + 64) {
        memcpy(buf, "MESSAGE=", 8);
        size_t m = log_render(level, msg, fields, true, buf + 8, half - 8);
        iov[n++] = (struct iovec){buf, 8 + m};
        used = 8 + m;
    }
    for (int i = 0; fields && i < LOG_FIELDS_MAX && fields[i].journal; i++) {
        const struct log_field *f = &fields[i];
        char num[24];
        const char *v = f->str;
        size_t vlen = f->len;
        if (!v) {
            vlen = (size_t)snprintf(num, sizeof num, f->hex ? "%llx" : "%llu",
                                    (unsigned long long)f->num);
            v = num;
        }
        size_t klen = strlen(f->journal);
        if (used + klen + 1 + vlen > len)
            continue; /* left out; the next, shorter one may fit */
        /* The value as it is: a journal field holds any bytes (a newline
         * too: sd_journal_sendv() sends such a field in its binary form). */
        char *p = buf + used;
        memcpy(p, f->journal, klen);
        p[klen] = '=';
        memcpy(p + klen + 1, v, vlen);
        iov[n++] = (struct iovec){p, klen + 1 + vlen};
        used += klen + 1 + vlen;
    }
    return n;
}

/* ---- writing ---- */

/* A line of the format, with its newline, in one write to stderr; under the
 * journal, after its "<N>" priority. */
static void to_stderr(enum log_level level, const char *msg, const struct log_field *fields,
                      bool journal)
{
    char line[16384];
    size_t n = 0;
    if (journal) {
        line[0] = '<';
        line[1] = prio[level];
        line[2] = '>';
        n = 3;
    }
    n += log_render(level, msg, fields, journal, line + n, sizeof line - n - 1);
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}

/* One line or journal entry. */
static void emit(enum log_level level, const char *msg, const struct log_field *fields)
{
    /* (A sender set by a test stands in for the socket.) */
    if (to_journal && (native || journal_sender != default_sender)) {
        struct iovec iov[LOG_JOURNAL_IOV];
        char buf[16384];
        int n = log_journal_entry(level, msg, fields, iov, buf, sizeof buf);
        if (journal_sender(iov, n) >= 0)
            return;
    }
    to_stderr(level, msg, fields, to_journal);
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

static void summarize(struct kind *k)
{
    if (!k->suppressed)
        return;
    char msg[128];
    snprintf(msg, sizeof msg, "suppressed %u similar message(s) (\"%.*s...\")", k->suppressed,
             fmt_stem(k->fmt), k->fmt);
    emit(k->level, msg,
         (const struct log_field[]){
             {.journal = "SUPPRESSED", .key = "suppressed", .num = k->suppressed},
             {.journal = NULL}});
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

__attribute__((format(printf, 3, 0))) static void
vlog(enum log_level level, const struct log_field *fields, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    emit(level, msg, fields);
}

void log_config_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_get_format() != LOG_FORMAT_PLAIN) {
        to_stderr(LOG_ERROR, msg, NULL, to_journal);
        return;
    }
    char line[4096 + 16];
    struct out o;
    out_init(&o, line, sizeof line);
    puts_(&o, to_journal ? "<3>dlockd: " : "dlockd: ");
    put_escaped(&o, msg, strlen(msg), ESC_PLAIN);
    line[o.len++] = '\n';
    fwrite(line, 1, o.len, stderr);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level > current)
        return;
    pthread_mutex_lock(&lock);
    if (admit(fmt, level)) {
        va_list ap;
        va_start(ap, fmt);
        vlog(level, NULL, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&lock);
}

void log_kv_msg(enum log_level level, const struct log_field *fields, const char *fmt, ...)
{
    if (level > current)
        return;
    pthread_mutex_lock(&lock);
    if (admit(fmt, level)) {
        va_list ap;
        va_start(ap, fmt);
        vlog(level, fields, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&lock);
}

void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(LOG_ERROR, NULL, fmt, ap);
    va_end(ap);
    exit(1);
}
