/* SPDX-License-Identifier: BSD-3-Clause */
/* log.h -- leveled, rate-limited logging for dlockd: lines on stderr in one
 * of three formats, or entries of the systemd journal with fields. */
#ifndef DLOCKD_LOG_H
#define DLOCKD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* How a line looks ([agent] log_format, --log-format):
 *   plain   2026-12-02T17:40:01.123Z dlockd[info]: MESSAGE
 *   logfmt  ts=2026-12-02T17:40:01.123Z level=info msg="MESSAGE" lock=NAME ...
 *   json    {"ts":"2026-12-02T17:40:01.123Z","level":"info","msg":"MESSAGE","lock":"NAME",...}
 * Under the journal, plain is the message alone (journald stamps and
 * classifies entries itself); logfmt and json keep their whole line. */
enum log_format { LOG_FORMAT_PLAIN = 0, LOG_FORMAT_LOGFMT = 1, LOG_FORMAT_JSON = 2 };

void log_set_level(enum log_level level);
/* Checks whether stderr is the systemd journal ($JOURNAL_STREAM names it):
 * every entry is then sent to journald's socket with its priority and
 * fields (sd_journal_sendv()), or, when the socket is not there or the send
 * fails, written to stderr with its priority as "<N>" (sd-daemon(3)), so
 * that journalctl -p filters it either way. */
void log_detect_journal(void);
/* Prints "dlockd: " and the message, as errors of the command line and the
 * configuration are shown (with the error priority for the journal); in
 * logfmt and json, an error line of that format. */
void log_config_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
enum log_level log_get_level(void);
void log_set_format(enum log_format format);
enum log_format log_get_format(void);
/* "plain", "logfmt" or "json" (any case) into *out: 0, or -1. */
int log_format_parse(const char *text, enum log_format *out);
const char *log_format_name(enum log_format format);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- fields ----
 *
 * A line about one lease or one client carries what identifies it as
 * fields: journal fields under journald (journalctl -u dlockd
 * LOCK_NAME=jobs), lower-case keys in logfmt and json. The plain format
 * shows the message only, which names them in its text. A list ends with
 * an entry whose journal name is NULL; LOG_FIELDS() adds it:
 *
 *   log_kv(LOG_INFO, LOG_FIELDS(LOG_F_LOCK(l->name, l->name_len), LOG_F_PID(pid)),
 *          "lease on %s held by pid %d lost", l->name, pid);
 */
struct log_field {
    const char *journal; /* its journal field: upper case, digits and '_' */
    const char *key;     /* its logfmt and json key */
    const char *str;     /* a text of len bytes (any bytes), or NULL: the number num */
    size_t len;
    uint64_t num;
    bool hex; /* num in hexadecimal (a json string), else decimal (a json number) */
};
#define LOG_FIELDS_MAX 8 /* fields of one line; more are left out */
#define LOG_F_LOCK(name, n)                                                                        \
    {                                                                                              \
        .journal = "LOCK_NAME", .key = "lock", .str = (name), .len = (n)                           \
    }
#define LOG_F_LEASE(id)                                                                            \
    {                                                                                              \
        .journal = "LEASE_ID", .key = "lease", .num = (id), .hex = true                            \
    }
#define LOG_F_FENCE(token)                                                                         \
    {                                                                                              \
        .journal = "FENCE", .key = "fence", .num = (token)                                         \
    }
#define LOG_F_PID(pid)                                                                             \
    {                                                                                              \
        .journal = "CLIENT_PID", .key = "pid", .num = (uint64_t)(uint32_t)(pid)                    \
    }
#define LOG_F_UID(uid)                                                                             \
    {                                                                                              \
        .journal = "CLIENT_UID", .key = "uid", .num = (uint32_t)(uid)                              \
    }
#define LOG_FIELDS(...) ((const struct log_field[]){__VA_ARGS__, {.journal = NULL}})

/* log_msg() with fields (rate-limited with the other lines of its format). */
void log_kv_msg(enum log_level level, const struct log_field *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Builds the fields only when the level is logged. */
#define log_kv(level, fields, ...)                                                                 \
    do {                                                                                           \
        if ((level) <= log_get_level())                                                            \
            log_kv_msg(level, fields, __VA_ARGS__);                                                \
    } while (0)

/* Lines of one kind (one format string) logged per second at most; the
 * rest of a burst is counted and summed up in one "suppressed N" line. */
#define LOG_BURST 10
/* Logs the summaries of bursts whose second is over: called once per loop
 * turn, so a summary does not wait for the kind's next message. */
void log_flush_suppressed(void);
/* The rate limit's clock, in ns (NULL: CLOCK_MONOTONIC), for tests. */
void log_set_clock(uint64_t (*fn)(void));
/* The time stamps' clock, in ms since 1970 (NULL: CLOCK_REALTIME), for tests. */
void log_set_wallclock(uint64_t (*fn)(void));
/* What sends an entry to the journal (NULL: sd_journal_sendv()), for
 * tests; it returns 0, or a negative errno and the line goes to stderr. */
void log_set_journal_sender(int (*fn)(const struct iovec *iov, int n));
/* The entry's fields as the journal gets them: "PRIORITY=N",
 * "SYSLOG_IDENTIFIER=dlockd", "MESSAGE=..." and one "NAME=value" per field,
 * in iov (room for LOG_JOURNAL_IOV), their bytes in buf (len bytes; a field
 * that does not fit is left out). Returns the number of entries. */
#define LOG_JOURNAL_IOV (3 + LOG_FIELDS_MAX + 1)
int log_journal_entry(enum log_level level, const char *msg, const struct log_field *fields,
                      struct iovec *iov, char *buf, size_t len);
/* Renders one line of the current format (without its newline) into buf
 * (len bytes, at least 64), as it goes to stderr (journal: false) or into
 * the journal's MESSAGE (journal: true); returns its length. The message and
 * every value are escaped for the format: no byte of them can end the line,
 * reach a terminal as a control character or break the json. */
size_t log_render(enum log_level level, const char *msg, const struct log_field *fields,
                  bool journal, char *buf, size_t len);
/* Logs at error level (never suppressed) and exits with status 1. */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_get_level() >= LOG_DEBUG)                                                          \
            log_msg(LOG_DEBUG, __VA_ARGS__);                                                       \
    } while (0)

#endif
