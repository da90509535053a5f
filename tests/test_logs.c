/* SPDX-License-Identifier: BSD-3-Clause */
/* test_logs.c -- the log formats of a real agent: with log_format = json
 * every line of its log is one json object in valid UTF-8, and a lost lease
 * and a name the policy denies give lines with their fields (lock, lease,
 * fence, pid, uid), their names escaped whatever bytes they hold; logfmt
 * lines the same as key=value pairs; plain lines start with a time stamp;
 * and a reload changes the format of the lines that follow it. */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static const char *agent_log(void)
{
    const char *log = h_read_file(H.agent[0].log);
    return log ? log : "";
}

/* The first line of agent 0's log holding every one of the needles (up to
 * a NULL), in a static buffer; NULL when there is none. */
static const char *line_with_all(const char *const *needles)
{
    static char line[8192];
    for (const char *p = agent_log(); *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        bool all = true;
        for (int i = 0; needles[i] && all; i++)
            all = strstr(line, needles[i]) != NULL;
        if (all)
            return line;
        p = end ? end + 1 : p + n;
    }
    return NULL;
}

#define LINE_WITH(...) line_with_all((const char *const[]){__VA_ARGS__, NULL})

/* Whether s is well-formed UTF-8 throughout (no overlong forms, no
 * surrogates, nothing past U+10FFFF). */
static bool valid_utf8(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        unsigned n = *u < 0x80                  ? 1
                     : *u >= 0xc2 && *u <= 0xdf ? 2
                     : *u >= 0xe0 && *u <= 0xef ? 3
                     : *u >= 0xf0 && *u <= 0xf4 ? 4
                                                : 0;
        if (!n)
            return false;
        uint32_t cp = n == 1 ? *u : *u & (0x7fu >> n);
        for (unsigned i = 1; i < n; i++) {
            if ((u[i] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (u[i] & 0x3fu);
        }
        static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        u += n;
    }
    return true;
}

/* "2026-12-02T17:40:01.123Z" at s. */
static bool stamped(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    for (size_t i = 0; i < sizeof shape - 1; i++)
        if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
            return false;
    return true;
}

/* Every line of agent 0's log from its line `from` on (0: all) satisfies
 * what `format` asks; returns how many were checked. */
static int every_line_is(const char *format, int from)
{
    int n = 0, i = 0;
    static char line[8192];
    for (const char *p = agent_log(); *p; i++) {
        const char *end = strchr(p, '\n');
        cr_assert_not_null(end, "a line without its newline: %s", p);
        size_t len = (size_t)(end - p);
        cr_assert_lt(len, sizeof line);
        memcpy(line, p, len);
        line[len] = '\0';
        p = end + 1;
        if (i < from)
            continue;
        n++;
        if (strcmp(format, "json") == 0) {
            cr_assert(h_json_valid(line) && line[0] == '{', "not a json object: %s", line);
            cr_assert(valid_utf8(line), "not UTF-8: %s", line);
            cr_assert(strncmp(line, "{\"ts\":\"", 7) == 0 && stamped(line + 7), "%s", line);
        } else if (strcmp(format, "logfmt") == 0) {
            cr_assert(strncmp(line, "ts=", 3) == 0 && stamped(line + 3), "%s", line);
            cr_assert_not_null(strstr(line, " level="), "%s", line);
            cr_assert_not_null(strstr(line, " msg=\""), "%s", line);
        } else {
            cr_assert(stamped(line) && strncmp(line + 24, " dlockd[", 8) == 0, "%s", line);
        }
    }
    return n;
}

/* The number of lines in agent 0's log. */
static int log_lines(void)
{
    int n = 0;
    for (const char *p = agent_log(); (p = strchr(p, '\n')); p++)
        n++;
    return n;
}

ITEST(logs, json_lines_of_a_lost_and_a_denied_lease_carry_their_fields)
{
    /* Any uid may use the names that start with "ok", and the harness'
     * probe; no other name. */
    h_start("log_format = json\n[policy]\nallow = * __harness_probe__\nallow = * ok*\n");
    struct h_cl *a = h_client();
    /* A name with a quote, a backslash, a byte outside UTF-8, '=' and a
     * well-formed 'é'. */
    static const char lost[] = "ok\"q\\\xff=x\xc3\xa9";
    dlock_lease *l = h_must_acquire(a, lost, 600); /* renewed every 200 ms */
    h_redis_del(h_key(lost));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    char pid[32], uid[32];
    snprintf(pid, sizeof pid, ",\"pid\":%d,", (int)getpid());
    snprintf(uid, sizeof uid, ",\"uid\":%u}", (unsigned)getuid());
    static const char lock[] = "\"lock\":\"ok\\\"q\\\\\\ufffd=x\xc3\xa9\"";
    H_WAIT_UNTIL(H_EVENT_MS, LINE_WITH("\"msg\":\"lease on ", " lost: "));
    const char *line = LINE_WITH("\"msg\":\"lease on ", " lost: ");
    cr_log_info("%s", line);
    cr_assert(strncmp(line, "{\"ts\":\"", 7) == 0 && stamped(line + 7), "%s", line);
    cr_assert_not_null(strstr(line, "\"level\":\"info\""), "%s", line);
    cr_assert_not_null(strstr(line, "\"msg\":\"lease on ok\\\"q\\\\\\ufffd=x\xc3\xa9 held by pid "),
                       "%s", line);
    cr_assert_not_null(strstr(line, lock), "%s", line);
    cr_assert_not_null(strstr(line, ",\"lease\":\""), "%s", line);
    cr_assert_not_null(strstr(line, ",\"fence\":"), "%s", line);
    cr_assert_not_null(strstr(line, pid), "%s", line);
    cr_assert_not_null(strstr(line, uid), "%s", line);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);

    /* Denied by the policy: the name, pid and uid. */
    dlock_lease *d = NULL;
    cr_assert_eq(h_acquire(a, "no\"pe\xfe", 30000, 0, &d), DLOCK_EDENIED);
    H_WAIT_UNTIL(H_EVENT_MS, LINE_WITH("may not use lock"));
    line = LINE_WITH("may not use lock");
    cr_log_info("%s", line);
    cr_assert_not_null(strstr(line, "\"lock\":\"no\\\"pe\\ufffd\""), "%s", line);
    cr_assert_not_null(strstr(line, pid), "%s", line);
    cr_assert_not_null(strstr(line, uid), "%s", line);

    /* Every line, the start, the grants (debug) and the rest, is json. */
    cr_assert_geq(every_line_is("json", 0), 3);
}

ITEST(logs, logfmt_lines_carry_the_fields_as_keys)
{
    h_start("log_format = logfmt");
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "lf=\"name\"", 600);
    h_redis_del(h_key("lf=\"name\""));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, l, DLOCK_STATE_LOST) > 0);
    char pid[32];
    snprintf(pid, sizeof pid, " pid=%d ", (int)getpid());
    H_WAIT_UNTIL(H_EVENT_MS, LINE_WITH("msg=\"lease on ", " lost: "));
    const char *line = LINE_WITH("msg=\"lease on ", " lost: ");
    cr_log_info("%s", line);
    cr_assert_not_null(strstr(line, " level=info msg=\"lease on lf=\\\"name\\\" held by pid "),
                       "%s", line);
    cr_assert_not_null(strstr(line, "\" lock=\"lf=\\\"name\\\"\" lease="), "%s", line);
    cr_assert_not_null(strstr(line, " fence="), "%s", line);
    cr_assert_not_null(strstr(line, pid), "%s", line);
    cr_assert_eq(dlock_lease_release(l), DLOCK_ELOST);
    cr_assert_geq(every_line_is("logfmt", 0), 3);
}

/* Plain lines start with their time stamp; after a reload to json, the
 * lines that follow are json. */
ITEST(logs, a_reload_changes_the_format)
{
    h_start(NULL);
    H_WAIT_UNTIL(H_EVENT_MS, LINE_WITH(" dlockd[info]: dlockd ", " started"));
    cr_assert_geq(every_line_is("plain", 0), 1);
    h_agent_config(0, "log_format = json", NULL);
    cr_assert_eq(kill(H.agent[0].pid, SIGHUP), 0);
    H_WAIT_UNTIL(H_EVENT_MS, LINE_WITH("dlockd[info]: reloaded: [agent] log_format plain -> json"));
    /* The summary of the reload is the last plain line. */
    H_WAIT_UNTIL(H_EVENT_MS, LINE_WITH("dlockd[info]: reloaded: 0 policy rule(s)"));
    int before = log_lines();
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "after", 30000);
    H_WAIT_UNTIL(H_EVENT_MS, LINE_WITH("{\"ts\":\"", "\"msg\":\"granted after to pid "));
    const char *line = LINE_WITH("\"msg\":\"granted after to pid ");
    cr_assert_not_null(strstr(line, "\"lock\":\"after\""), "%s", line);
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_geq(every_line_is("json", before), 1);
}
