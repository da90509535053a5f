/* log.c -- leveled logging to stderr: one line per message, with a level tag. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static enum log_level current = LOG_INFO;
static const char *const tags[] = {"error", "warn", "info", "debug"};

void log_set_level(enum log_level level)
{
    current = level;
}

enum log_level log_get_level(void)
{
    return current;
}

static void vlog(enum log_level level, const char *fmt, va_list ap)
{
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "dlockd[%s]: %s\n", tags[level], line);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level > current)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(LOG_ERROR, fmt, ap);
    va_end(ap);
    exit(1);
}
