/* SPDX-License-Identifier: BSD-3-Clause */
/* log.h -- leveled, rate-limited logging to stderr for dlockd. */
#ifndef DLOCKD_LOG_H
#define DLOCKD_LOG_H

#include <stdint.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_set_level(enum log_level level);
/* Checks whether stderr is the systemd journal ($JOURNAL_STREAM names it):
 * lines then start with their priority as "<N>" (sd-daemon(3)), so that
 * journalctl -p filters them; elsewhere they start with "dlockd[LEVEL]: ". */
void log_detect_journal(void);
/* Prints "dlockd: " and the message, as errors of the command line and the
 * configuration are shown (with the error priority for the journal). */
void log_config_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
enum log_level log_get_level(void);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Lines of one kind (one format string) logged per second at most; the
 * rest of a burst is counted and summed up in one "suppressed N" line. */
#define LOG_BURST 10
/* Logs the summaries of bursts whose second is over: called once per loop
 * turn, so a summary does not wait for the kind's next message. */
void log_flush_suppressed(void);
/* The rate limit's clock, in ns (NULL: CLOCK_MONOTONIC), for tests. */
void log_set_clock(uint64_t (*fn)(void));
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
