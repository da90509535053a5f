/* SPDX-License-Identifier: BSD-3-Clause */
/* test_status.c -- the agent's read-only status socket, read through
 * `dlockctl status`, `dlockctl leases` and `dlockctl metrics`: a lease held by
 * this process is listed with its name, pid, fencing token and a validity
 * that runs down; globs filter the leases; the metrics are valid Prometheus
 * text exposition and follow the grants; malformed requests are answered
 * with an error and cost only their connection; a peer that keeps writing
 * holds up no one, on the socket or over HTTP; names and command names with
 * any bytes give valid UTF-8 JSON and text without control characters; no
 * agent means exit 69. Listings of thousands of leases arrive whole when
 * read in small pieces, also while leases come and go; a plain name lists
 * its one lease; peers that ask and never read cost the agent little memory
 * and hold up no other client.
 *
 * The JSON and the exposition format are checked by small strict parsers
 * below, not by a library. */
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define CTL_MS 5000 /* a dlockctl query to exit */

/* ---- dlockctl with stdout and stderr kept apart ---- */

static struct {
    char out[1 << 18];
    char err[4096];
} R;

/* Reads path into dst (NUL-terminated); fails the test if it does not fit. */
static void slurp(const char *path, char *dst, size_t cap)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t n = fread(dst, 1, cap, f);
    fclose(f);
    cr_assert_lt(n, cap, "%s is larger than the test's buffer", path);
    dst[n] = '\0';
}

/* Runs dlockctl with args (NULL-terminated, without argv[0]); its stdout goes
 * to R.out and its stderr to R.err. Returns its exit status; fails the test
 * if it runs longer than CTL_MS. */
static int ctlv(const char *const *args)
{
    char *argv[32];
    int n = 0;
    argv[n++] = DLOCKCTL_PATH;
    for (int i = 0; args[i]; i++) {
        cr_assert_lt(n, 31);
        argv[n++] = (char *)args[i];
    }
    argv[n] = NULL;
    char out[H_PATH + 64], err[H_PATH + 64];
    snprintf(out, sizeof out, "%s", h_path("ctl.stdout"));
    snprintf(err, sizeof err, "%s", h_path("ctl.stderr"));
    pid_t pid = h_fork();
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        close(in);
        close(o);
        close(e);
        execv(argv[0], argv);
        _exit(127);
    }
    int st = h_wait_child(pid, CTL_MS);
    cr_assert_neq(st, -1, "dlockctl %s did not exit within %d ms", args[0], CTL_MS);
    slurp(out, R.out, sizeof R.out);
    slurp(err, R.err, sizeof R.err);
    return st;
}

#define CTL(...) ctlv((const char *const[]){__VA_ARGS__, NULL})

/* The status socket of agent 0, as the tests configure it. */
static const char *status_sock(void)
{
    static char path[H_PATH + 64];
    snprintf(path, sizeof path, "%s", h_path("status.sock"));
    return path;
}

/* Starts Redis and agent 0 with its status socket at status_sock(). */
static void start_agent(void)
{
    char ini[H_PATH + 128];
    snprintf(ini, sizeof ini, "status_socket = %s", status_sock());
    h_start(ini);
}

/* Runs a query that must succeed (exit 0, nothing on stderr); the answer is
 * in R.out. */
#define QUERY(...)                                                                                 \
    do {                                                                                           \
        int q_st_ = CTL("-S", status_sock(), __VA_ARGS__);                                         \
        cr_assert_eq(q_st_, 0, "dlockctl %s: exit %d, stderr: %s", #__VA_ARGS__, q_st_, R.err);    \
        cr_assert_str_empty(R.err, "dlockctl %s wrote on stderr: %s", #__VA_ARGS__, R.err);        \
    } while (0)

/* ---- a small strict JSON reader ----
 *
 * Values are read in place: a value is a pointer to its first character in
 * the document. j_skip() checks the JSON grammar (RFC 8259) as it goes. */

static const char *j_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static const char *j_skip_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    while (*p != '"') {
        if ((unsigned char)*p < 0x20) /* also the end of the text */
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!is_hex(p[i]))
                        return NULL;
                p += 4;
            } else if (*p == '\0' || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
        p++;
    }
    return p + 1;
}

static const char *j_skip_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (is_digit(*p))
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!is_digit(*++p))
            return NULL;
        while (is_digit(*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return NULL;
        while (is_digit(*p))
            p++;
    }
    return p;
}

/* Skips the value at p (no leading blanks); the end of it, or NULL when it is
 * not valid JSON. */
static const char *j_skip(const char *p, int depth)
{
    if (depth > 32)
        return NULL;
    switch (*p) {
    case '"':
        return j_skip_string(p);
    case '{':
    case '[': {
        char close = *p == '{' ? '}' : ']';
        p = j_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = j_skip_string(p);
                if (!p)
                    return NULL;
                p = j_ws(p);
                if (*p++ != ':')
                    return NULL;
                p = j_ws(p);
            }
            p = j_skip(p, depth + 1);
            if (!p)
                return NULL;
            p = j_ws(p);
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
            p = j_ws(p);
        }
    }
    case 't':
        return strncmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return strncmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return strncmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return j_skip_number(p);
    }
}

/* The document in text, which must be exactly one JSON object. */
static const char *j_doc(const char *text)
{
    const char *p = j_ws(text);
    cr_assert_eq(*p, '{', "not a JSON object: %.200s", text);
    const char *end = j_skip(p, 0);
    cr_assert_not_null(end, "invalid JSON: %.2000s", text);
    cr_assert_eq(*j_ws(end), '\0', "text after the JSON object: %.200s", end);
    return p;
}

/* 1 when the string value v is exactly s (s holds nothing to escape). */
static int j_is(const char *v, const char *s)
{
    size_t n = strlen(s);
    return v && v[0] == '"' && strncmp(v + 1, s, n) == 0 && v[n + 1] == '"';
}

/* The value of member key of the object obj, or NULL. Members must not be
 * repeated. */
static const char *j_get(const char *obj, const char *key)
{
    cr_assert_eq(*obj, '{', "not an object: %.80s", obj);
    const char *found = NULL;
    const char *p = j_ws(obj + 1);
    if (*p == '}')
        return NULL;
    for (;;) {
        const char *k = p;
        p = j_ws(j_skip_string(k)) + 1; /* the document was checked: ':' */
        p = j_ws(p);
        if (j_is(k, key)) {
            cr_assert_null(found, "member \"%s\" given twice", key);
            found = p;
        }
        p = j_ws(j_skip(p, 1));
        if (*p == '}')
            return found;
        p = j_ws(p + 1);
    }
}

static const char *j_must(const char *obj, const char *key)
{
    const char *v = j_get(obj, key);
    cr_assert_not_null(v, "no member \"%s\" in %.300s", key, obj);
    return v;
}

/* Element i of the array arr, or NULL past its end. */
static const char *j_elem(const char *arr, int i)
{
    cr_assert_eq(*arr, '[', "not an array: %.80s", arr);
    const char *p = j_ws(arr + 1);
    if (*p == ']')
        return NULL;
    for (int k = 0;; k++) {
        if (k == i)
            return p;
        p = j_ws(j_skip(p, 1));
        if (*p == ']')
            return NULL;
        p = j_ws(p + 1);
    }
}

static int j_len(const char *arr)
{
    int n = 0;
    while (j_elem(arr, n))
        n++;
    return n;
}

/* An integer member (a JSON number without fraction or exponent). */
static long long j_int(const char *obj, const char *key)
{
    const char *v = j_must(obj, key);
    const char *end = j_skip_number(v);
    cr_assert(end != NULL, "\"%s\" is not a number: %.40s", key, v);
    for (const char *c = v; c < end; c++)
        cr_assert(is_digit(*c) || (c == v && *c == '-'), "\"%s\" is not an integer: %.40s", key, v);
    errno = 0;
    long long x = strtoll(v, NULL, 10);
    cr_assert_eq(errno, 0, "\"%s\" out of range: %.40s", key, v);
    return x;
}

/* A non-negative integer member that may use all 64 bits (fencing tokens). */
static unsigned long long j_u64(const char *obj, const char *key)
{
    const char *v = j_must(obj, key);
    const char *end = j_skip_number(v);
    cr_assert(end != NULL && end > v, "\"%s\" is not a number: %.40s", key, v);
    for (const char *c = v; c < end; c++)
        cr_assert(is_digit(*c), "\"%s\" is not a non-negative integer: %.40s", key, v);
    errno = 0;
    unsigned long long x = strtoull(v, NULL, 10);
    cr_assert_eq(errno, 0, "\"%s\" out of range: %.40s", key, v);
    return x;
}

static int j_bool(const char *obj, const char *key)
{
    const char *v = j_must(obj, key);
    cr_assert(strncmp(v, "true", 4) == 0 || strncmp(v, "false", 5) == 0,
              "\"%s\" is not a boolean: %.40s", key, v);
    return v[0] == 't';
}

/* Copies a string member without escapes into out. */
static const char *j_str(const char *obj, const char *key, char *out, size_t cap)
{
    const char *v = j_must(obj, key);
    cr_assert_eq(*v, '"', "\"%s\" is not a string: %.40s", key, v);
    const char *end = j_skip_string(v);
    size_t n = (size_t)(end - v) - 2;
    cr_assert_lt(n, cap);
    memcpy(out, v + 1, n);
    out[n] = '\0';
    cr_assert_null(strchr(out, '\\'), "\"%s\" has escapes: %s", key, out);
    return out;
}

/* The member names of the object obj, in order, separated by commas (a
 * static buffer): what the tests compare with the members documented. */
static const char *j_keys(const char *obj)
{
    static char keys[1024];
    cr_assert_eq(*obj, '{', "not an object: %.80s", obj);
    keys[0] = '\0';
    const char *p = j_ws(obj + 1);
    while (*p != '}') {
        const char *end = j_skip_string(p);
        size_t n = strlen(keys), len = (size_t)(end - p) - 2;
        cr_assert_lt(n + len + 2, sizeof keys);
        snprintf(keys + n, sizeof keys - n, "%s%.*s", n ? "," : "", (int)len, p + 1);
        p = j_ws(j_skip(j_ws(j_ws(end) + 1), 1));
        if (*p == ',')
            p = j_ws(p + 1);
    }
    return keys;
}

/* The array of leases in the answer doc ({"leases":[...], ...}). */
static const char *j_leases(const char *doc)
{
    const char *arr = j_must(doc, "leases");
    cr_assert_eq(*arr, '[', "\"leases\" is not an array");
    for (int i = 0; j_elem(arr, i); i++)
        cr_assert_eq(*j_elem(arr, i), '{', "lease %d is not an object", i);
    return arr;
}

/* The lease object named name in the leases array arr, or NULL; a name listed
 * twice fails the test. */
static const char *j_lease(const char *arr, const char *name)
{
    const char *found = NULL;
    for (int i = 0; j_elem(arr, i); i++) {
        const char *l = j_elem(arr, i);
        if (j_is(j_must(l, "name"), name)) {
            cr_assert_null(found, "lease %s listed twice", name);
            found = l;
        }
    }
    return found;
}

/* Runs `dlockctl leases --json` and returns the valid_ms of lease name. */
static long long valid_ms_now(const char *name)
{
    QUERY("leases", "--json");
    const char *l = j_lease(j_leases(j_doc(R.out)), name);
    cr_assert_not_null(l, "lease %s not listed: %s", name, R.out);
    return j_int(l, "valid_ms");
}

/* ---- text tables ---- */

/* The line after the one at p. */
static const char *next_line(const char *p)
{
    const char *nl = strchr(p, '\n');
    return nl ? nl + 1 : p + strlen(p);
}

static int cmp_names(const void *x, const void *y)
{
    return strcmp(x, y);
}

#define MAX_WORDS 32

/* Splits the line at p (up to '\n') into blank-separated words; returns the
 * number of words. */
static int words(const char *p, char w[][128])
{
    int n = 0;
    while (*p && *p != '\n') {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '\n')
            break;
        size_t k = 0;
        while (*p && *p != '\n' && *p != ' ' && *p != '\t') {
            if (k < 127)
                w[n][k++] = *p;
            p++;
        }
        w[n][k] = '\0';
        if (++n == MAX_WORDS)
            break;
    }
    return n;
}

/* The line of text whose first word is first, or NULL; a second such line
 * fails the test. */
static const char *line_of(const char *text, const char *first)
{
    const char *found = NULL;
    for (const char *p = text; *p; p = next_line(p)) {
        char w[MAX_WORDS][128];
        if (words(p, w) > 0 && strcmp(w[0], first) == 0) {
            cr_assert_null(found, "two lines start with %s:\n%s", first, text);
            found = p;
        }
    }
    return found;
}

static int has_word(const char *line, const char *word)
{
    char w[MAX_WORDS][128];
    int n = words(line, w);
    for (int i = 0; i < n; i++)
        if (strcmp(w[i], word) == 0)
            return 1;
    return 0;
}

/* Index of the column of the header line named col, or with a name that
 * starts with col ("AGE_MS" for "AGE"); -1 when there is none. Two columns
 * that could be meant fail the test. */
static int column(const char *header, const char *col)
{
    char w[MAX_WORDS][128];
    int n = words(header, w), found = -1;
    for (int i = 0; i < n; i++)
        if (strcmp(w[i], col) == 0)
            return i;
    for (int i = 0; i < n; i++)
        if (strncmp(w[i], col, strlen(col)) == 0) {
            cr_assert_eq(found, -1, "columns %s and %s could both be %s", w[found], w[i], col);
            found = i;
        }
    return found;
}

/* Number of lines of text (each must end in '\n'). */
static int count_lines(const char *text)
{
    int n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    cr_assert(*text == '\0' || text[strlen(text) - 1] == '\n', "last line unterminated: %s", text);
    return n;
}

/* ---- a Prometheus text exposition (0.0.4) checker ---- */

#define MAX_LABELS   8
#define MAX_FAMILIES 128
#define MAX_SERIES   512
#define MAX_HSERIES  64

struct label {
    char name[64];
    char value[256]; /* unescaped */
};

struct sample {
    char name[128];
    int nlabels;
    struct label labels[MAX_LABELS];
    double value;
};

struct family {
    char name[128];
    char type[32]; /* "" until TYPEd */
    int helped;
    int seen;   /* samples seen */
    int closed; /* samples of another family came after them */
};

/* One histogram series: the buckets of one label set (without le). */
struct hseries {
    char key[512];
    int buckets;
    double last_le, last_count;
    int inf;          /* the +Inf bucket was seen */
    double inf_count; /* its value */
    int have_sum, have_count;
    double count;
};

static struct {
    struct family fam[MAX_FAMILIES];
    int nfam;
    char series[MAX_SERIES][512];
    int nseries;
    struct hseries hs[MAX_HSERIES];
    int nhs;
} P;

static int name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static int name_char(char c)
{
    return name_start(c) || is_digit(c);
}

static int label_start(char c)
{
    return name_start(c) && c != ':';
}

static int label_char(char c)
{
    return label_start(c) || is_digit(c);
}

/* Reads a metric name at *p into out; 0 when there is none. */
static int read_name(const char **p, char *out, size_t cap)
{
    const char *s = *p;
    if (!name_start(*s))
        return 0;
    size_t n = 0;
    while (name_char(*s)) {
        if (n + 1 < cap)
            out[n++] = *s;
        s++;
    }
    out[n] = '\0';
    *p = s;
    return 1;
}

/* A float as Go's strconv.ParseFloat reads it in the exposition format:
 * decimal with optional exponent, or [+-]Inf, NaN. */
static int parse_value(const char *s, double *out)
{
    if (strcmp(s, "+Inf") == 0 || strcmp(s, "Inf") == 0) {
        *out = INFINITY;
        return 1;
    }
    if (strcmp(s, "-Inf") == 0) {
        *out = -INFINITY;
        return 1;
    }
    if (strcmp(s, "NaN") == 0) {
        *out = NAN;
        return 1;
    }
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    int digits = 0;
    while (is_digit(*p))
        p++, digits++;
    if (*p == '.')
        for (p++; is_digit(*p); p++)
            digits++;
    if (!digits)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return 0;
        while (is_digit(*p))
            p++;
    }
    if (*p)
        return 0;
    *out = strtod(s, NULL);
    return 1;
}

static struct family *family_named(const char *name)
{
    for (int i = 0; i < P.nfam; i++)
        if (strcmp(P.fam[i].name, name) == 0)
            return &P.fam[i];
    return NULL;
}

static struct family *family_add(const char *name, int lineno)
{
    struct family *f = family_named(name);
    if (f)
        return f;
    cr_assert_lt(P.nfam, MAX_FAMILIES, "line %d: too many metric families", lineno);
    f = &P.fam[P.nfam++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The TYPEd family a sample name belongs to, or NULL. */
static struct family *family_of(const char *sample)
{
    for (int i = 0; i < P.nfam; i++) {
        struct family *f = &P.fam[i];
        size_t n = strlen(f->name);
        if (!f->type[0] || strncmp(sample, f->name, n) != 0)
            continue;
        const char *suffix = sample + n;
        if (*suffix == '\0' && strcmp(f->type, "histogram") != 0)
            return f;
        if (strcmp(f->type, "histogram") == 0 &&
            (strcmp(suffix, "_bucket") == 0 || strcmp(suffix, "_sum") == 0 ||
             strcmp(suffix, "_count") == 0))
            return f;
        if (strcmp(f->type, "summary") == 0 &&
            (strcmp(suffix, "_sum") == 0 || strcmp(suffix, "_count") == 0))
            return f;
    }
    return NULL;
}

/* Parses one sample line into *s (the whole line must be valid). */
static void parse_sample(const char *line, int lineno, struct sample *s, long long *ts, int *has_ts)
{
    const char *p = line;
    memset(s, 0, sizeof *s);
    cr_assert(read_name(&p, s->name, sizeof s->name), "line %d: no metric name: %s", lineno, line);
    if (*p == '{') {
        p++;
        while (*p != '}') {
            cr_assert_lt(s->nlabels, MAX_LABELS, "line %d: too many labels", lineno);
            struct label *l = &s->labels[s->nlabels++];
            size_t n = 0;
            cr_assert(label_start(*p), "line %d: bad label name at '%s'", lineno, p);
            while (label_char(*p)) {
                cr_assert_lt(n + 1, sizeof l->name);
                l->name[n++] = *p++;
            }
            cr_assert(strncmp(l->name, "__", 2) != 0, "line %d: reserved label name %s", lineno,
                      l->name);
            for (int i = 0; i < s->nlabels - 1; i++)
                cr_assert_str_neq(s->labels[i].name, l->name, "line %d: label %s twice", lineno,
                                  l->name);
            cr_assert_eq(*p, '=', "line %d: no '=' after label %s", lineno, l->name);
            cr_assert_eq(*++p, '"', "line %d: label %s value not quoted", lineno, l->name);
            p++;
            n = 0;
            while (*p != '"') {
                cr_assert(*p != '\0', "line %d: unterminated label value", lineno);
                char c = *p++;
                if (c == '\\') {
                    c = *p++;
                    cr_assert(c == '\\' || c == '"' || c == 'n',
                              "line %d: bad escape \\%c in label %s", lineno, c, l->name);
                    c = c == 'n' ? '\n' : c;
                }
                cr_assert_lt(n + 1, sizeof l->value);
                l->value[n++] = c;
            }
            p++;
            if (*p == ',')
                p++;
            else
                cr_assert_eq(*p, '}', "line %d: expected ',' or '}' at '%s'", lineno, p);
        }
        p++;
    }
    cr_assert(*p == ' ' || *p == '\t', "line %d: no blank before the value: %s", lineno, line);
    while (*p == ' ' || *p == '\t')
        p++;
    char tok[64];
    size_t n = strcspn(p, " \t");
    cr_assert(n > 0 && n < sizeof tok, "line %d: no value", lineno);
    memcpy(tok, p, n);
    tok[n] = '\0';
    cr_assert(parse_value(tok, &s->value), "line %d: bad value '%s'", lineno, tok);
    p += n;
    while (*p == ' ' || *p == '\t')
        p++;
    *has_ts = 0;
    if (*p) {
        const char *t = p;
        if (*t == '-')
            t++;
        cr_assert(is_digit(*t), "line %d: bad timestamp '%s'", lineno, p);
        while (is_digit(*t))
            t++;
        while (*t == ' ' || *t == '\t')
            t++;
        cr_assert_eq(*t, '\0', "line %d: text after the timestamp: '%s'", lineno, p);
        *ts = strtoll(p, NULL, 10);
        *has_ts = 1;
    }
}

static const char *label_value(const struct sample *s, const char *name)
{
    for (int i = 0; i < s->nlabels; i++)
        if (strcmp(s->labels[i].name, name) == 0)
            return s->labels[i].value;
    return NULL;
}

/* A key for the sample's series: name and labels (without `skip`). */
static void series_key(const struct sample *s, const char *skip, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s", s->name);
    for (int i = 0; i < s->nlabels && n < cap; i++)
        if (!skip || strcmp(s->labels[i].name, skip) != 0)
            n +=
                (size_t)snprintf(out + n, cap - n, "|%s=%s", s->labels[i].name, s->labels[i].value);
}

static struct hseries *hseries_of(const char *key, int lineno)
{
    for (int i = 0; i < P.nhs; i++)
        if (strcmp(P.hs[i].key, key) == 0)
            return &P.hs[i];
    cr_assert_lt(P.nhs, MAX_HSERIES, "line %d: too many histogram series", lineno);
    struct hseries *h = &P.hs[P.nhs++];
    memset(h, 0, sizeof *h);
    snprintf(h->key, sizeof h->key, "%s", key);
    return h;
}

static void histogram_sample(const struct family *f, const struct sample *s, int lineno)
{
    const char *suffix = s->name + strlen(f->name);
    const char *le = label_value(s, "le");
    char key[512];
    /* The series is the family plus the labels other than le. */
    struct sample base = *s;
    snprintf(base.name, sizeof base.name, "%s", f->name);
    series_key(&base, "le", key, sizeof key);
    struct hseries *h = hseries_of(key, lineno);
    if (strcmp(suffix, "_bucket") == 0) {
        double bound;
        cr_assert_not_null(le, "line %d: bucket without le", lineno);
        cr_assert(parse_value(le, &bound) && !isnan(bound), "line %d: bad le \"%s\"", lineno, le);
        cr_assert(!h->inf, "line %d: bucket after the +Inf bucket", lineno);
        cr_assert(h->buckets == 0 || bound > h->last_le, "line %d: le %s not above the last one",
                  lineno, le);
        cr_assert(s->value >= 0 && s->value < 9e15 && s->value == (double)(long long)s->value,
                  "line %d: bucket count %g is not a count", lineno, s->value);
        cr_assert(h->buckets == 0 || s->value >= h->last_count,
                  "line %d: bucket count %g below the previous bucket's %g", lineno, s->value,
                  h->last_count);
        h->buckets++;
        h->last_le = bound;
        h->last_count = s->value;
        if (isinf(bound) && bound > 0) {
            h->inf = 1;
            h->inf_count = s->value;
        }
    } else {
        cr_assert_null(le, "line %d: le on %s", lineno, s->name);
        if (strcmp(suffix, "_count") == 0) {
            cr_assert(!h->have_count, "line %d: second _count", lineno);
            h->have_count = 1;
            h->count = s->value;
        } else {
            cr_assert(!h->have_sum, "line %d: second _sum", lineno);
            h->have_sum = 1;
        }
    }
}

/* Checks that text is a valid exposition: every line, the TYPE before the
 * samples of each family, families in one group each, counters named
 * *_total, and the buckets of every histogram. */
static void check_exposition(const char *text)
{
    memset(&P, 0, sizeof P);
    cr_assert(*text, "empty exposition");
    cr_assert_eq(text[strlen(text) - 1], '\n', "the last line is not terminated");
    struct family *current = NULL;
    int lineno = 0, nsamples = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        char line[1024];
        size_t len = (size_t)(nl - p);
        lineno++;
        cr_assert_lt(len, sizeof line, "line %d is too long", lineno);
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl + 1;
        for (size_t i = 0; i < len; i++)
            cr_assert((unsigned char)line[i] >= 0x20 || line[i] == '\t',
                      "line %d: control character", lineno);
        const char *q = line;
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q == '\0')
            continue; /* blank lines are allowed */
        if (*q == '#') {
            q++;
            while (*q == ' ' || *q == '\t')
                q++;
            int help = strncmp(q, "HELP", 4) == 0 && (q[4] == ' ' || q[4] == '\t');
            int type = strncmp(q, "TYPE", 4) == 0 && (q[4] == ' ' || q[4] == '\t');
            if (!help && !type)
                continue; /* a comment */
            q += 4;
            while (*q == ' ' || *q == '\t')
                q++;
            char name[128];
            cr_assert(read_name(&q, name, sizeof name), "line %d: bad metric name: %s", lineno,
                      line);
            cr_assert(*q == '\0' || *q == ' ' || *q == '\t', "line %d: bad metric name: %s", lineno,
                      line);
            struct family *f = family_add(name, lineno);
            cr_assert(!f->seen, "line %d: %s after samples of %s", lineno, help ? "HELP" : "TYPE",
                      name);
            while (*q == ' ' || *q == '\t')
                q++;
            if (help) {
                cr_assert(!f->helped, "line %d: second HELP for %s", lineno, name);
                f->helped = 1;
                for (const char *c = q; *c; c++)
                    if (*c == '\\') {
                        c++;
                        cr_assert(*c == '\\' || *c == 'n', "line %d: bad escape in HELP", lineno);
                    }
            } else {
                cr_assert(!f->type[0], "line %d: second TYPE for %s", lineno, name);
                char t[32] = "";
                size_t n = strcspn(q, " \t");
                cr_assert_lt(n, sizeof t, "line %d: bad type", lineno);
                memcpy(t, q, n);
                t[n] = '\0';
                const char *rest = q + n;
                while (*rest == ' ' || *rest == '\t')
                    rest++;
                cr_assert_eq(*rest, '\0', "line %d: text after the type", lineno);
                cr_assert(strcmp(t, "counter") == 0 || strcmp(t, "gauge") == 0 ||
                              strcmp(t, "histogram") == 0 || strcmp(t, "summary") == 0 ||
                              strcmp(t, "untyped") == 0,
                          "line %d: unknown type '%s'", lineno, t);
                if (strcmp(t, "counter") == 0)
                    cr_assert(ends_with(name, "_total"), "line %d: counter %s is not *_total",
                              lineno, name);
                snprintf(f->type, sizeof f->type, "%s", t);
            }
            continue;
        }
        struct sample s;
        long long ts;
        int has_ts;
        parse_sample(q, lineno, &s, &ts, &has_ts);
        nsamples++;
        struct family *f = family_of(s.name);
        cr_assert_not_null(f, "line %d: sample %s of no family TYPEd before", lineno, s.name);
        if (f != current) {
            cr_assert(!f->closed, "line %d: samples of %s are not grouped together", lineno,
                      f->name);
            if (current)
                current->closed = 1;
            current = f;
        }
        f->seen = 1;
        char key[512];
        series_key(&s, NULL, key, sizeof key);
        for (int i = 0; i < P.nseries; i++)
            cr_assert_str_neq(P.series[i], key, "line %d: series %s given twice", lineno, key);
        cr_assert_lt(P.nseries, MAX_SERIES);
        snprintf(P.series[P.nseries++], sizeof P.series[0], "%s", key);
        if (strcmp(f->type, "counter") == 0)
            cr_assert(s.value >= 0, "line %d: counter %s is %g", lineno, s.name, s.value);
        if (strcmp(f->type, "histogram") == 0)
            histogram_sample(f, &s, lineno);
        else
            cr_assert_null(label_value(&s, "le"), "line %d: le outside a histogram", lineno);
    }
    cr_assert_gt(nsamples, 0, "no samples");
    for (int i = 0; i < P.nhs; i++) {
        struct hseries *h = &P.hs[i];
        cr_assert(h->inf, "histogram %s has no +Inf bucket", h->key);
        cr_assert(h->have_count && h->have_sum, "histogram %s lacks _count or _sum", h->key);
        cr_assert(h->count == h->inf_count, "histogram %s: _count %g, +Inf bucket %g", h->key,
                  h->count, h->inf_count);
    }
    for (int i = 0; i < P.nfam; i++)
        cr_assert(P.fam[i].type[0], "HELP for %s without a TYPE", P.fam[i].name);
}

/* The value of the sample named name whose label `label` (when not NULL) is
 * `value` in the exposition text; fails the test if there is none or more
 * than one. */
static double metric(const char *text, const char *name, const char *label, const char *value)
{
    int found = 0;
    double v = 0;
    for (const char *p = text; *p; p = next_line(p)) {
        if (*p == '#' || *p == '\n')
            continue;
        char line[1024];
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        struct sample s;
        long long ts;
        int has_ts;
        parse_sample(line, 0, &s, &ts, &has_ts);
        if (strcmp(s.name, name) != 0)
            continue;
        const char *lv = label ? label_value(&s, label) : NULL;
        if (label && (!lv || strcmp(lv, value) != 0))
            continue;
        found++;
        v = s.value;
    }
    cr_assert_eq(found, 1, "%d samples %s%s%s%s%s in:\n%s", found, name, label ? "{" : "",
                 label ? label : "", label ? "=" : "", label ? value : "", text);
    return v;
}

/* ---- raw status connections ---- */

static int status_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect %s: %s", path,
                 strerror(errno));
    for (int i = 0; i < H_MAX_FDS; i++)
        if (H.fds[i] < 0) {
            H.fds[i] = fd; /* closed at teardown */
            break;
        }
    return fd;
}

/* Reads until the agent closes fd (EOF, or a reset after the answer when it
 * did not read everything sent), within timeout_ms; returns the answer. */
static const char *read_to_close(int fd, int timeout_ms)
{
    static char buf[1 << 16];
    size_t n = 0;
    int64_t end = h_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - h_now_ms();
        cr_assert_gt(left, 0, "the agent did not close within %d ms; got: %.*s", timeout_ms, (int)n,
                     buf);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)left) <= 0)
            continue;
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            break;
        cr_assert_gt(r, 0, "read: %s", strerror(errno));
        n += (size_t)r;
        cr_assert_lt(n, sizeof buf - 1, "answer too long");
    }
    buf[n] = '\0';
    return buf;
}

/* Sends req (len bytes) on a new connection and returns the whole answer,
 * which must come within timeout_ms. */
static const char *raw_query_within(const void *req, size_t len, int timeout_ms)
{
    int fd = status_connect(status_sock());
    cr_assert_eq(h_raw_send(fd, req, len), 0);
    const char *a = read_to_close(fd, timeout_ms);
    h_raw_close(fd);
    return a;
}

static const char *raw_query(const void *req, size_t len)
{
    return raw_query_within(req, len, 3000);
}

/* The answer is exactly one line starting with "error: ". */
static void assert_error_line(const char *a, const char *what)
{
    cr_assert(strncmp(a, "error: ", 7) == 0, "%s: answer is not an error: %s", what, a);
    const char *nl = strchr(a, '\n');
    cr_assert(nl && nl[1] == '\0', "%s: not one line: %s", what, a);
}

/* ---- tests ---- */

ITEST(status, lists_a_held_lease_with_pid_fence_and_validity)
{
    start_agent();
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "stat-one", 30000);
    unsigned long long fence = dlock_lease_fence(l);

    QUERY("status", "--json");
    const char *doc = j_doc(R.out);
    const char *agent = j_must(doc, "agent");
    char s[256];
    cr_assert_str_eq(j_str(agent, "version", s, sizeof s), "0.1.0");
    cr_assert_eq(j_int(agent, "pid"), H.agent[0].pid);
    cr_assert_str_eq(j_str(agent, "mode", s, sizeof s), "single");
    cr_assert_str_eq(j_str(agent, "prefix", s, sizeof s), "dlock:");
    cr_assert_geq(j_int(agent, "uptime_ms"), 0);
    cr_assert_geq(j_int(agent, "connections"), 1, "this test's client is connected");

    const char *nodes = j_must(doc, "nodes");
    cr_assert_eq(j_len(nodes), 1, "single-node mode lists %d nodes", j_len(nodes));
    const char *node = j_elem(nodes, 0);
    cr_assert_str_eq(j_str(node, "addr", s, sizeof s), H.redis_addr);
    cr_assert(j_bool(node, "connected"));
    cr_assert(j_bool(node, "subscribed"));
    cr_assert_geq(j_int(node, "rtt_us"), 0);
    cr_assert_eq(j_int(node, "excluded_for_ms"), 0);
    j_str(node, "last_error", s, sizeof s);
    j_str(node, "run_id", s, sizeof s);

    const char *counters = j_must(doc, "counters");
    cr_assert_geq(j_int(counters, "grants"), 1, "stat-one was granted");
    const char *names[] = {"releases", "renewals", "renewal_failures",
                           "losses",   "timeouts", "refused"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        cr_assert_geq(j_int(counters, names[i]), 0);

    const char *lease = j_lease(j_leases(doc), "stat-one");
    cr_assert_not_null(lease, "the held lease is not listed: %s", R.out);
    cr_assert_eq(j_len(j_leases(doc)), 1, "only stat-one is held: %s", R.out);
    cr_assert_str_eq(j_str(lease, "state", s, sizeof s), "held");
    cr_assert_eq(j_u64(lease, "fence"), fence);
    cr_assert_eq(j_int(lease, "pid"), getpid(), "the test process holds the lease");
    cr_assert_eq(j_int(lease, "uid"), getuid());
    cr_assert_str_eq(j_str(lease, "comm", s, sizeof s), "test_status");
    cr_assert_eq(j_int(lease, "ttl_ms"), 30000);
    long long age = j_int(lease, "age_ms");
    long long valid = j_int(lease, "valid_ms");
    cr_assert(age >= 0 && age < 5000, "age_ms %lld", age);
    cr_assert(valid > 25000 && valid < 30000, "valid_ms %lld of a 30 s lease", valid);
    cr_assert_eq(j_int(lease, "renewals"), 0);
    cr_assert_eq(j_int(lease, "waiters"), 0);

    /* The validity runs down between two queries. */
    long long later = valid;
    H_WAIT_UNTIL(3000, (later = valid_ms_now("stat-one")) < valid);
    cr_assert_gt(later, 25000);

    /* A waiter in another client is counted on the lease. */
    struct h_cl *b = h_client();
    struct h_acq acq = {0};
    h_acquire_async(b, "stat-one", 30000, 20000, &acq);
    int64_t end = h_now_ms() + 3000;
    for (;;) {
        QUERY("leases", "--json");
        const char *w = j_lease(j_leases(j_doc(R.out)), "stat-one");
        cr_assert_not_null(w);
        if (j_int(w, "waiters") == 1)
            break;
        cr_assert_lt(h_now_ms(), end, "the waiter is not counted: %s", R.out);
        h_pump_all(5);
    }
    cr_assert(!acq.done);

    /* The text tables name the same lease, holder and token. */
    char pid[24], fence_s[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(fence_s, sizeof fence_s, "%llu", fence);
    QUERY("status");
    const char *line = line_of(R.out, "stat-one");
    cr_assert_not_null(line, "stat-one not in `dlockctl status`:\n%s", R.out);
    cr_assert(has_word(line, pid), "pid %s not on the line: %.300s", pid, line);
    cr_assert(has_word(line, fence_s), "fence %s not on the line: %.300s", fence_s, line);

    QUERY("leases");
    const char *header = R.out;
    const char *cols[] = {"NAME", "STATE", "FENCE", "PID", "COMM", "AGE", "TTL", "VALID"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        cr_assert_geq(column(header, cols[i]), 0, "no %s column: %.300s", cols[i], header);
    line = line_of(R.out, "stat-one");
    cr_assert_not_null(line, "stat-one not in `dlockctl leases`:\n%s", R.out);
    char w[MAX_WORDS][128];
    int nw = words(line, w);
    cr_assert_gt(nw, column(header, "VALID"));
    cr_assert_str_eq(w[column(header, "NAME")], "stat-one");
    cr_assert_str_eq(w[column(header, "STATE")], "held");
    cr_assert_str_eq(w[column(header, "FENCE")], fence_s);
    cr_assert_str_eq(w[column(header, "PID")], pid);
    cr_assert_str_eq(w[column(header, "COMM")], "test_status");
    cr_assert_str_eq(w[column(header, "TTL")], "30000");
    long long valid_col = atoll(w[column(header, "VALID")]);
    cr_assert(valid_col > 25000 && valid_col < 30000, "VALID column: %s",
              w[column(header, "VALID")]);

    cr_assert_eq(dlock_lease_release(l), 0);
    H_WAIT_UNTIL(3000, acq.done);
    cr_assert_eq(acq.status, 0);
    cr_assert_eq(dlock_lease_release(acq.lease), 0);
}

/* The first words of the lines after the header, sorted into one string. */
static const char *listed_names(const char *text)
{
    static char out[1024];
    char names[16][128];
    int n = 0;
    const char *p = strchr(text, '\n');
    cr_assert_not_null(p, "no header line: %s", text);
    for (p++; *p; p = next_line(p)) {
        char w[MAX_WORDS][128];
        if (words(p, w) == 0)
            continue;
        cr_assert_lt(n, 16);
        snprintf(names[n++], sizeof names[0], "%s", w[0]);
    }
    qsort(names, (size_t)n, sizeof names[0], cmp_names);
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", names[i]);
    return out;
}

/* The names in a leases-json answer, sorted into one string. */
static const char *listed_json_names(const char *text)
{
    static char out[1024];
    char names[16][128];
    const char *arr = j_leases(j_doc(text));
    int n = j_len(arr);
    cr_assert_leq(n, 16);
    for (int i = 0; i < n; i++)
        j_str(j_elem(arr, i), "name", names[i], sizeof names[i]);
    qsort(names, (size_t)n, sizeof names[0], cmp_names);
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", names[i]);
    return out;
}

ITEST(status, leases_filtered_by_glob_text_and_json)
{
    start_agent();
    struct h_cl *a = h_client();
    h_must_acquire(a, "pat-a", 30000);
    h_must_acquire(a, "pat-b", 30000);
    h_must_acquire(a, "other", 30000);

    QUERY("leases", "pat*");
    cr_assert_eq(count_lines(R.out), 3, "a header and two leases:\n%s", R.out);
    cr_assert_str_eq(listed_names(R.out), "pat-a pat-b");
    QUERY("leases");
    cr_assert_str_eq(listed_names(R.out), "other pat-a pat-b");
    QUERY("leases", "*-[b]");
    cr_assert_str_eq(listed_names(R.out), "pat-b");
    QUERY("leases", "?ther");
    cr_assert_str_eq(listed_names(R.out), "other");
    QUERY("leases", "nomatch*");
    cr_assert_str_eq(listed_names(R.out), "");

    QUERY("leases", "--json", "pat*");
    cr_assert_str_eq(listed_json_names(R.out), "pat-a pat-b");
    QUERY("leases", "pat*", "--json"); /* options may follow the pattern */
    cr_assert_str_eq(listed_json_names(R.out), "pat-a pat-b");
    QUERY("leases", "--json", "nomatch*");
    cr_assert_eq(j_len(j_leases(j_doc(R.out))), 0);
    const char *only = j_doc(R.out);
    cr_assert_null(j_get(only, "agent"), "leases-json is {\"leases\":[...]} only");

    /* leases --json gives the objects of status --json. */
    QUERY("leases", "--json");
    static char leases[sizeof R.out];
    memcpy(leases, R.out, sizeof leases);
    cr_assert_str_eq(listed_json_names(leases), "other pat-a pat-b");
    QUERY("status", "--json");
    const char *from_status = j_leases(j_doc(R.out));
    const char *from_leases = j_leases(j_doc(leases));
    cr_assert_eq(j_len(from_status), 3);
    const char *same[] = {"state", "comm"};
    const char *same_int[] = {"pid", "uid", "ttl_ms", "renewals", "waiters"};
    const char *lock_names[] = {"pat-a", "pat-b", "other"};
    for (int i = 0; i < 3; i++) {
        const char *x = j_lease(from_status, lock_names[i]);
        const char *y = j_lease(from_leases, lock_names[i]);
        cr_assert(x && y, "%s missing", lock_names[i]);
        char sx[256], sy[256];
        for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
            cr_assert_str_eq(j_str(x, same[k], sx, sizeof sx), j_str(y, same[k], sy, sizeof sy));
        for (size_t k = 0; k < sizeof same_int / sizeof same_int[0]; k++)
            cr_assert_eq(j_int(x, same_int[k]), j_int(y, same_int[k]), "%s of %s", same_int[k],
                         lock_names[i]);
        cr_assert_eq(j_u64(x, "fence"), j_u64(y, "fence"));
        /* A later query sees an older lease with less validity left. */
        cr_assert_geq(j_int(x, "age_ms"), j_int(y, "age_ms"));
        cr_assert_leq(j_int(x, "valid_ms"), j_int(y, "valid_ms"));
    }
}

ITEST(status, metrics_are_valid_prometheus_text)
{
    start_agent();
    QUERY("metrics");
    check_exposition(R.out);
    double grants = metric(R.out, "dlock_grants_total", NULL, NULL);
    cr_assert_geq(grants, 0);
    cr_assert_eq(metric(R.out, "dlock_node_up", "node", H.redis_addr), 1);
    struct family *f = family_named("dlock_acquire_seconds");
    cr_assert(f && strcmp(f->type, "histogram") == 0, "no histogram dlock_acquire_seconds");
    f = family_named("dlock_renew_seconds");
    cr_assert(f && strcmp(f->type, "histogram") == 0, "no histogram dlock_renew_seconds");
    double acquires = metric(R.out, "dlock_acquire_seconds_count", NULL, NULL);
    /* The families of the health work, each with its type. */
    static const char *const histograms[] = {"dlock_queue_wait_seconds", "dlock_hold_seconds",
                                             "dlock_node_command_seconds"};
    for (size_t i = 0; i < sizeof histograms / sizeof histograms[0]; i++) {
        f = family_named(histograms[i]);
        cr_assert(f && strcmp(f->type, "histogram") == 0, "no histogram %s", histograms[i]);
    }
    static const char *const gauges[] = {"dlock_waiters",         "dlock_backend_up",
                                         "dlock_quorum_nodes_up", "dlock_quorum_nodes_needed",
                                         "dlock_build_info",      "process_open_fds",
                                         "process_max_fds",       "process_start_time_seconds"};
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        f = family_named(gauges[i]);
        cr_assert(f && strcmp(f->type, "gauge") == 0, "no gauge %s", gauges[i]);
    }
    f = family_named("dlock_acquires_total");
    cr_assert(f && strcmp(f->type, "counter") == 0, "no counter dlock_acquires_total");
    cr_assert_eq(metric(R.out, "dlock_backend_up", "mode", "single"), 1);
    cr_assert_gt(metric(R.out, "process_open_fds", NULL, NULL), 0);
    double granted = metric(R.out, "dlock_acquires_total", "outcome", "granted");
    double waited = metric(R.out, "dlock_queue_wait_seconds_count", NULL, NULL);

    /* A grant shows in the counter and the acquire histogram. */
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "metered", 30000);
    QUERY("metrics");
    check_exposition(R.out);
    cr_assert_eq(metric(R.out, "dlock_grants_total", NULL, NULL), grants + 1);
    cr_assert_eq(metric(R.out, "dlock_acquire_seconds_count", NULL, NULL), acquires + 1);
    /* ... in the outcomes and what the caller waited. */
    cr_assert_eq(metric(R.out, "dlock_acquires_total", "outcome", "granted"), granted + 1);
    cr_assert_eq(metric(R.out, "dlock_queue_wait_seconds_count", NULL, NULL), waited + 1);
    /* ... and in the gauge of its kind. */
    cr_assert_eq(metric(R.out, "dlock_leases_by_kind", "kind", "exclusive"), 1);
    cr_assert_eq(metric(R.out, "dlock_leases_by_kind", "kind", "shared"), 0);
    cr_assert_eq(metric(R.out, "dlock_leases_by_kind", "kind", "semaphore"), 0);

    /* Renewals of a short lease show in the renewal histogram. */
    dlock_lease *s = h_must_acquire(a, "renewed", 1000);
    int64_t end = h_now_ms() + 3000;
    for (;;) {
        QUERY("leases", "--json", "renewed");
        const char *r = j_lease(j_leases(j_doc(R.out)), "renewed");
        cr_assert_not_null(r);
        if (j_int(r, "renewals") >= 1)
            break;
        cr_assert_lt(h_now_ms(), end, "no renewal within 3 s: %s", R.out);
        h_pump_all(20);
    }
    QUERY("metrics");
    check_exposition(R.out);
    cr_assert_geq(metric(R.out, "dlock_renew_seconds_count", NULL, NULL), 1);
    cr_assert_geq(metric(R.out, "dlock_renewals_total", NULL, NULL), 1);
    cr_assert_eq(metric(R.out, "dlock_node_up", "node", H.redis_addr), 1);
    cr_assert_eq(dlock_lease_release(s), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(status, malformed_requests_get_an_error_and_the_agent_keeps_serving)
{
    start_agent();
    struct h_cl *a = h_client();
    h_must_acquire(a, "still", 30000);

    /* A client that connects and says nothing holds up no one. */
    int silent = status_connect(status_sock());

    assert_error_line(raw_query("bogus\n", 6), "bogus");
    assert_error_line(raw_query("\n", 1), "empty line");
    assert_error_line(raw_query("status-json now\n", 16), "status-json with an argument");
    assert_error_line(raw_query("metrics now\n", 12), "metrics with an argument");
    assert_error_line(raw_query("stat\0us\n", 8), "a NUL byte");
    char longreq[400];
    memset(longreq, 'a', sizeof longreq);
    assert_error_line(raw_query(longreq, sizeof longreq), "an over-long line");
    memcpy(longreq, "leases ", 7);
    longreq[sizeof longreq - 1] = '\n';
    assert_error_line(raw_query(longreq, sizeof longreq), "an over-long pattern");

    /* The agent still answers, on the socket and through dlockctl. */
    const char *ans = raw_query("leases-json\n", 12);
    cr_assert(strncmp(ans, "error: ", 7) != 0, "leases-json refused: %s", ans);
    cr_assert_not_null(j_lease(j_leases(j_doc(ans)), "still"));
    QUERY("status");
    cr_assert_not_null(line_of(R.out, "still"), "`dlockctl status`:\n%s", R.out);
    h_raw_close(silent);
    QUERY("status", "--json");
    cr_assert_not_null(j_lease(j_leases(j_doc(R.out)), "still"));
}

ITEST(status, no_agent_exits_69_and_usage_errors_64)
{
    start_agent();
    const char *none = h_path("none.sock");
    int st = CTL("-S", none, "status");
    cr_assert_eq(st, 69, "no agent: exit %d", st);
    cr_assert(strstr(R.err, none), "stderr does not name the socket: %s", R.err);
    cr_assert_str_empty(R.out);
    st = CTL("--status-socket", none, "leases", "--json");
    cr_assert_eq(st, 69, "no agent: exit %d", st);
    st = CTL("metrics", "-S", none);
    cr_assert_eq(st, 69, "no agent: exit %d", st);

    /* Not a socket. */
    FILE *f = fopen(h_path("plain"), "w");
    cr_assert_not_null(f);
    fclose(f);
    st = CTL("-S", h_path("plain"), "status");
    cr_assert_eq(st, 69, "a plain file: exit %d", st);

    /* $DLOCK_STATUS_SOCKET when there is no -S; -S wins. */
    cr_assert_eq(setenv("DLOCK_STATUS_SOCKET", status_sock(), 1), 0);
    st = CTL("status", "--json");
    cr_assert_eq(st, 0, "with $DLOCK_STATUS_SOCKET: exit %d: %s", st, R.err);
    j_doc(R.out);
    st = CTL("-S", none, "status");
    cr_assert_eq(st, 69, "-S over $DLOCK_STATUS_SOCKET: exit %d", st);
    cr_assert_eq(setenv("DLOCK_STATUS_SOCKET", none, 1), 0);
    st = CTL("status");
    cr_assert_eq(st, 69, "$DLOCK_STATUS_SOCKET without an agent: exit %d", st);
    st = CTL("-S", status_sock(), "metrics");
    cr_assert_eq(st, 0, "-S over $DLOCK_STATUS_SOCKET: exit %d: %s", st, R.err);
    unsetenv("DLOCK_STATUS_SOCKET");

    const char *sock = status_sock();
    cr_assert_eq(CTL("-S", sock, "status", "extra"), 64);
    cr_assert_eq(CTL("-S", sock, "leases", "a*", "b*"), 64);
    cr_assert_eq(CTL("-S", sock, "leases", ""), 64);
    cr_assert_eq(CTL("-S", sock, "leases", "a b"), 64);
    cr_assert_eq(CTL("-S", sock, "metrics", "--json"), 64);
    cr_assert_eq(CTL("-S", sock, "status", "--jason"), 64);
    cr_assert_eq(CTL("status", "-S"), 64);
    cr_assert_eq(CTL("-S", sock, "state"), 64);
    cr_assert_str_empty(R.out);
    /* The longest pattern makes a request line of exactly 256 bytes,
     * "leases-json PATTERN\n", which the agent takes; one more is refused. */
    char pat[245];
    memset(pat, 'x', 243);
    pat[242] = '*';
    pat[243] = '\0';
    cr_assert_eq(CTL("-S", sock, "leases", "--json", pat), 0, "a 243-byte pattern: %s", R.err);
    cr_assert_eq(j_len(j_leases(j_doc(R.out))), 0);
    cr_assert_eq(CTL("-S", sock, "leases", pat), 0, "a 243-byte pattern: %s", R.err);
    strcat(pat, "x");
    cr_assert_eq(CTL("-S", sock, "leases", "--json", pat), 64);
    cr_assert_eq(CTL("-S", sock, "leases", "--help"), 0);
    cr_assert(strstr(R.out, "leases [--json] [PATTERN]"), "usage: %s", R.out);
}

/* ---- the HTTP metrics endpoint ---- */

/* Sends req to 127.0.0.1:port and returns the whole answer (static), which
 * must come within 10 s. */
static const char *http_get(int port, const char *req)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s",
              strerror(errno));
    cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    const char *out = read_to_close(fd, 10000);
    close(fd);
    return out;
}

ITEST(status, metrics_over_http_when_configured)
{
    int port = h_free_port();
    char ini[H_PATH + 256];
    snprintf(ini, sizeof ini, "status_socket = %s\nmetrics_listen = 127.0.0.1:%d", status_sock(),
             port);
    h_start(ini);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "scraped", 30000);
    const char *out = http_get(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n"
                                     "User-Agent: Prometheus/2.45.0\r\nAccept: text/plain\r\n\r\n");
    cr_assert(strncmp(out, "HTTP/1.0 200 OK\r\n", 17) == 0, "answer: %.80s", out);
    cr_assert_not_null(strstr(out, "Content-Type: text/plain; version=0.0.4"));
    const char *body = strstr(out, "\r\n\r\n");
    cr_assert_not_null(body);
    body += 4;
    long long clen = atoll(strstr(out, "Content-Length: ") + 16);
    cr_assert_eq(clen, (long long)strlen(body), "Content-Length %lld, body %zu bytes", clen,
                 strlen(body));
    check_exposition(body);
    cr_assert_geq(metric(body, "dlock_grants_total", NULL, NULL), 1.0);
    cr_assert(strncmp(http_get(port, "GET /other HTTP/1.0\r\n\r\n"), "HTTP/1.0 404", 12) == 0);
    cr_assert(strncmp(http_get(port, "POST /metrics HTTP/1.0\r\n\r\n"), "HTTP/1.0 405", 12) == 0);
    const char *head = http_get(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
    cr_assert(strncmp(head, "HTTP/1.0 200", 12) == 0);
    cr_assert_str_empty(strstr(head, "\r\n\r\n") + 4, "HEAD answered with a body");
    /* Idle HTTP peers cannot take the operators' status socket away. */
    int idle[20];
    for (int i = 0; i < 20; i++) {
        idle[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert_eq(connect(idle[i], (struct sockaddr *)&sa, sizeof sa), 0);
    }
    QUERY("status");
    for (int i = 0; i < 20; i++)
        close(idle[i]);
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* ---- who holds a name in Redis ---- */

ITEST(status, holder_names_a_lock_taken_through_another_agent)
{
    /* Two agents on one Redis stand for two hosts; the lock is taken
     * through agent 1 and looked up through agent 0's status socket. */
    h_start_two(NULL);
    char sock0[H_PATH];
    snprintf(sock0, sizeof sock0, "%s/status0.sock", H.dir);
    struct h_cl *other = h_client_at(1);
    dlock_lease *l = h_must_acquire(other, "shared", 30000);
    char host[64] = "";
    gethostname(host, sizeof host);
    int st = CTL("-S", sock0, "holder", "shared");
    cr_assert_eq(st, 0, "exit %d: %s", st, R.err);
    char want[256];
    snprintf(want, sizeof want,
             "shared: held by pid %d (test_status), uid %u, on host %s; token %.32s", (int)getpid(),
             (unsigned)getuid(), host, h_redis_get(h_key("shared")));
    cr_assert(strncmp(R.out, want, strlen(want)) == 0, "got: %s\nwant: %s", R.out, want);
    st = CTL("-S", sock0, "holder", "--json", "shared");
    cr_assert_eq(st, 0);
    const char *doc = j_doc(R.out);
    cr_assert_eq(j_bool(doc, "held"), 1);
    cr_assert_eq(j_bool(doc, "dlock"), 1);
    cr_assert_eq(j_int(doc, "pid"), getpid());
    cr_assert(j_int(doc, "pttl_ms") > 25000);
    cr_assert_eq(dlock_lease_release(l), 0);
    /* Free once released (the key goes one round trip later). */
    H_KEY_GONE(h_key("shared"));
    /* Held exits 0, free 1, as test -e does. */
    cr_assert_eq(CTL("-S", sock0, "holder", "shared"), 1);
    cr_assert_str_eq(R.out, "shared: free\n");
    cr_assert_str_empty(R.err, "%s", R.err);
    cr_assert_eq(CTL("-S", sock0, "holder", "--json", "shared"), 1);
    cr_assert_eq(j_bool(j_doc(R.out), "held"), 0);
    /* A value written by another kind of client is shown as such. */
    h_redis_set_px(h_key("plain"), "someone-else", 10000);
    cr_assert_eq(CTL("-S", sock0, "holder", "plain"), 0);
    cr_assert(strstr(R.out, "held by a client outside dlock (value 'someone-else')"), "%s", R.out);
    /* Even one whose words look like a holder record's, but with no token. */
    h_redis_set_px(h_key("words"), "a b 1 2 c", 10000);
    cr_assert_eq(CTL("-S", sock0, "holder", "words"), 0);
    cr_assert(strstr(R.out, "held by a client outside dlock (value 'a b 1 2 c')"), "%s", R.out);
    /* Control bytes in a stored value never reach the terminal. */
    h_redis_set_px(h_key("esc"), "tok\033]0;x\007\nforged: free", 10000);
    cr_assert_eq(CTL("-S", sock0, "holder", "esc"), 0);
    cr_assert_null(strpbrk(R.out, "\033\007"), "raw control bytes: %s", R.out);
    cr_assert_eq(count_lines(R.out), 1, "a forged line: %s", R.out);
    cr_assert_eq(CTL("-S", sock0, "holder", "--json", "esc"), 0);
    cr_assert_not_null(j_doc(R.out));
    /* A name no lock can have is refused: a usage error, as for run. */
    cr_assert_eq(CTL("-S", sock0, "holder", "{x}"), 64);
}

/* The members of each JSON answer are exactly those docs/status.md lists,
 * in its order, with the values it gives for a free name, a foreign value
 * without expiry and a key of another type. */
#define AGENT_KEYS "version,pid,mode,prefix,uptime_ms,connections"
#define NODE_KEYS  "addr,connected,subscribed,rtt_us,last_error,excluded_for_ms,run_id,durable"
#define COUNTER_KEYS                                                                               \
    "grants,releases,forced_releases,handoffs,grants_by_release,renewals,renewal_failures,losses," \
    "doubts,timeouts,"                                                                             \
    "cancels,refused,"                                                                             \
    "denied"
#define LEASE_KEYS                                                                                 \
    "name,state,fence,pid,uid,comm,age_ms,ttl_ms,valid_ms,renewals,waiters,kind,permits,holds"
#define HOLDER_KEYS                                                                                \
    "name,held,dlock,value,host,pid,uid,comm,pttl_ms,nodes_holding,nodes,kind,permits,holders"

ITEST(status, json_members_are_exactly_the_documented_ones)
{
    start_agent();
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "members", 30000);
    char s[256];

    QUERY("status", "--json");
    const char *doc = j_doc(R.out);
    cr_assert_str_eq(j_keys(doc), "agent,nodes,counters,leases");
    const char *agent = j_must(doc, "agent");
    cr_assert_str_eq(j_keys(agent), AGENT_KEYS);
    cr_assert_str_eq(j_str(agent, "mode", s, sizeof s), "single");
    const char *node = j_elem(j_must(doc, "nodes"), 0);
    cr_assert_str_eq(j_keys(node), NODE_KEYS);
    /* The server's run id, read when the agent set up its link. */
    j_str(node, "run_id", s, sizeof s);
    cr_assert_eq(strlen(s), 40, "run_id \"%s\"", s);
    for (const char *c = s; *c; c++)
        cr_assert(is_hex(*c), "run_id \"%s\"", s);
    cr_assert_eq(j_bool(node, "durable"), 0, "durable outside quorum mode");
    cr_assert_eq(j_int(node, "excluded_for_ms"), 0);
    cr_assert_str_eq(j_keys(j_must(doc, "counters")), COUNTER_KEYS);
    const char *lease = j_lease(j_leases(doc), "members");
    cr_assert_not_null(lease, "%s", R.out);
    cr_assert_str_eq(j_keys(lease), LEASE_KEYS);

    QUERY("leases", "--json", "members");
    doc = j_doc(R.out);
    cr_assert_str_eq(j_keys(doc), "leases");
    cr_assert_str_eq(j_keys(j_elem(j_leases(doc), 0)), LEASE_KEYS);

    /* holder-json of a dlock key: the token alone, and its record. */
    QUERY("holder", "--json", "members");
    doc = j_doc(R.out);
    cr_assert_str_eq(j_keys(doc), HOLDER_KEYS);
    cr_assert(j_bool(doc, "held") && j_bool(doc, "dlock"));
    char tok[64];
    snprintf(tok, sizeof tok, "%.32s", h_redis_get(h_key("members")));
    cr_assert_str_eq(j_str(doc, "value", s, sizeof s), tok);
    cr_assert_eq(j_int(doc, "pid"), getpid());
    cr_assert_eq(j_int(doc, "nodes_holding"), 1);
    cr_assert_eq(j_int(doc, "nodes"), 1);

    /* A free name, a foreign value without expiry, a key of another type. */
    freeReplyObject(h_redis_cmd("SET %s foreign", h_key("forever")));
    freeReplyObject(h_redis_cmd("RPUSH %s x", h_key("listed")));
    static const struct {
        const char *name, *value;
        int held;
        long long pttl_ms;
    } cases[] = {{"nobody", "", 0, 0}, {"forever", "foreign", 1, -1}, {"listed", "", 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* 0 held, 1 free. */
        int st = CTL("-S", status_sock(), "holder", "--json", cases[i].name);
        cr_assert_eq(st, cases[i].held ? 0 : 1, "%s: exit %d: %s", cases[i].name, st, R.err);
        cr_assert_str_empty(R.err, "%s: %s", cases[i].name, R.err);
        doc = j_doc(R.out);
        cr_assert_str_eq(j_keys(doc), HOLDER_KEYS, "%s", cases[i].name);
        cr_assert_str_eq(j_str(doc, "name", s, sizeof s), cases[i].name);
        cr_assert_eq(j_bool(doc, "held"), cases[i].held, "%s: %s", cases[i].name, R.out);
        cr_assert_eq(j_bool(doc, "dlock"), 0, "%s", cases[i].name);
        cr_assert_str_eq(j_str(doc, "value", s, sizeof s), cases[i].value, "%s", cases[i].name);
        cr_assert_str_eq(j_str(doc, "host", s, sizeof s), "", "%s", cases[i].name);
        cr_assert_eq(j_int(doc, "pid"), 0, "%s", cases[i].name);
        cr_assert_eq(j_int(doc, "uid"), 0, "%s", cases[i].name);
        cr_assert_str_eq(j_str(doc, "comm", s, sizeof s), "", "%s", cases[i].name);
        cr_assert_eq(j_int(doc, "pttl_ms"), cases[i].pttl_ms, "%s: %s", cases[i].name, R.out);
        cr_assert_eq(j_int(doc, "nodes_holding"), cases[i].held, "%s", cases[i].name);
        cr_assert_eq(j_int(doc, "nodes"), 1, "%s", cases[i].name);
    }
    cr_assert_eq(dlock_lease_release(l), 0);
}

/* ---- peers that keep writing ----
 *
 * A child process connects, sends a valid request and then writes without
 * end, connecting again whenever the agent closes; meanwhile the test checks
 * that the agent goes on serving everyone else. */

#define FLOOD_BLOCK  (64 * 1024)
#define FLOOD_SNDBUF (256 * 1024) /* the flooder's send buffer, kept small */
/* What one connection may take after its request: the agent reads away
 * 64 KiB at most, the rest fills the socket buffers. A peer that can send
 * more is read from without end. */
#define FLOOD_CONN_MAX (16 * 1024 * 1024)
#define FLOOD_MAX_MS   30000 /* the flooder's own limit, should the test be gone */
#define FLOOD_RUN_MS   3000  /* how long the test keeps querying under the flood */
#define WAIT_MS        10000 /* for any one answer while flooded */

/* In a page shared with the flooding child: the fork closes every
 * descriptor, but a shared mapping stays. */
struct flood {
    pid_t pid;
    atomic_int stop;    /* set by the test */
    atomic_llong bytes; /* written past the request, over all connections */
    atomic_llong most;  /* ... on the one connection that took the most */
};

/* A connection to the status socket (port 0) or to 127.0.0.1:port, or -1;
 * for the child, which must not use the test's assertions. */
static int peer_connect(const char *sock, int port)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    struct sockaddr_in in = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (strlen(sock) >= sizeof un.sun_path)
        return -1;
    memcpy(un.sun_path, sock, strlen(sock) + 1);
    int fd = socket(port ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = port ? connect(fd, (struct sockaddr *)&in, sizeof in)
                  : connect(fd, (struct sockaddr *)&un, sizeof un);
    if (fd >= 0 && rc != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Writes blocks on fd after the request req until the agent closes, the
 * test says stop, or end; counts them in f. */
static void flood_conn(struct flood *f, int fd, const char *req, int64_t end)
{
    static char block[FLOOD_BLOCK];
    memset(block, 'x', sizeof block);
    /* Sends time out, so that the stop flag is seen also when the agent
     * reads nothing. */
    struct timeval tv = {.tv_usec = 100000};
    int sndbuf = FLOOD_SNDBUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        return;
    long long mine = 0;
    while (!atomic_load(&f->stop) && h_now_ms() < end) {
        ssize_t n = send(fd, block, sizeof block, MSG_NOSIGNAL);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return; /* closed by the agent */
        if (n < 0)
            continue;
        mine += n;
        atomic_fetch_add(&f->bytes, n);
        if (mine > atomic_load(&f->most))
            atomic_store(&f->most, mine); /* the only writer */
    }
}

/* The child: floods, on a new connection whenever the agent closes one,
 * until told to stop or FLOOD_MAX_MS pass. */
static void flood_main(struct flood *f, const char *sock, int port, const char *req)
{
    int64_t end = h_now_ms() + FLOOD_MAX_MS;
    while (!atomic_load(&f->stop) && h_now_ms() < end) {
        int fd = peer_connect(sock, port);
        if (fd >= 0) {
            flood_conn(f, fd, req, end);
            close(fd);
        }
    }
    _exit(0);
}

/* Starts a flood of the status socket (port 0) or the HTTP endpoint at port,
 * each connection opening with req, and waits until it is under way. */
static struct flood *flood_start(int port, const char *req)
{
    struct flood *f =
        mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(f, MAP_FAILED);
    atomic_init(&f->stop, 0);
    atomic_init(&f->bytes, 0);
    atomic_init(&f->most, 0);
    pid_t pid = h_fork();
    if (pid == 0)
        flood_main(f, status_sock(), port, req);
    f->pid = pid; /* not in the child: the page is shared */
    H_WAIT_UNTIL(WAIT_MS, atomic_load(&f->bytes) >= 4 * FLOOD_BLOCK);
    return f;
}

static void flood_stop(struct flood *f)
{
    atomic_store(&f->stop, 1);
    int st = h_wait_child(f->pid, WAIT_MS);
    cr_assert_eq(st, 0, "the flooder ended with %d", st);
    munmap(f, sizeof *f);
}

/* One round of service checks on a flooded agent: a status query, a metrics
 * scrape over HTTP (port != 0) and a ping, each answered. */
static void served_under_flood(struct h_cl *cl, int port)
{
    const char *ans = raw_query_within("leases-json\n", 12, WAIT_MS);
    cr_assert_not_null(j_lease(j_leases(j_doc(ans)), "flooded"), "not listed: %s", ans);
    if (port) {
        const char *out = http_get(port, "GET /metrics HTTP/1.0\r\n\r\n");
        cr_assert(strncmp(out, "HTTP/1.0 200 OK\r\n", 17) == 0, "answer: %.80s", out);
    }
    cr_assert_eq(dlock_client_ping(cl->c), 0);
}

/* Floods with req (on the HTTP endpoint when http) and checks that, while the
 * flood goes on, the agent answers others and keeps a short lease renewed. */
static void flood_and_check(bool http, const char *req)
{
    int port = http ? h_free_port() : 0;
    char ini[H_PATH + 256];
    snprintf(ini, sizeof ini, "status_socket = %s%s", status_sock(),
             http ? "\nmetrics_listen = 127.0.0.1:" : "");
    if (http)
        snprintf(ini + strlen(ini), sizeof ini - strlen(ini), "%d", port);
    h_start(ini);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "flooded", 1500);

    struct flood *f = flood_start(port, req);
    int rounds = 0;
    int64_t end = h_now_ms() + FLOOD_RUN_MS; /* twice the lease's TTL */
    while (rounds < 3 || h_now_ms() < end) {
        long long before = atomic_load(&f->bytes);
        served_under_flood(a, port);
        h_pump_all(5);
        rounds++;
        /* In order: the flooder was still writing after this round. */
        H_WAIT_UNTIL(WAIT_MS, atomic_load(&f->bytes) > before);
    }
    cr_assert_eq(waitpid(f->pid, NULL, WNOHANG), 0, "the flooder stopped by itself");
    long long most = atomic_load(&f->most);
    flood_stop(f);
    cr_assert_lt(most, FLOOD_CONN_MAX, "the agent read %lld bytes from one peer", most);

    served_under_flood(a, port);
    h_pump_all(5);
    cr_assert_eq(h_events(a, l, DLOCK_STATE_JEOPARDY), 0, "the lease was in jeopardy");
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0, "the lease was lost");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);
    cr_assert_eq(dlock_lease_release(l), 0);
}

ITEST(status, a_peer_that_keeps_writing_holds_up_no_one)
{
    flood_and_check(false, "status\n");
}

ITEST(status, an_http_peer_that_keeps_writing_holds_up_no_one)
{
    flood_and_check(true, "GET /metrics HTTP/1.0\r\n\r\n");
}

/* An over-long request still gets its error line when the client reads it
 * only after sending everything. */
ITEST(status, an_over_long_request_is_answered_before_the_close)
{
    start_agent();
    static char longreq[8 * 1024];
    memset(longreq, 'a', sizeof longreq);
    longreq[sizeof longreq - 1] = '\n';
    assert_error_line(raw_query(longreq, sizeof longreq), "an 8 KiB line");
}

/* ---- names and command names that are not plain ASCII ---- */

/* The length of the well-formed UTF-8 sequence at s (the Unicode standard's
 * table 3-7), its code point in *cp; 0 when there is none. */
static int utf8_len(const unsigned char *s, uint32_t *cp)
{
    static const struct {
        unsigned char lo, hi, lo2, hi2; /* the first byte, the second */
        int n;
    } seqs[] = {
        {0xc2, 0xdf, 0x80, 0xbf, 2}, {0xe0, 0xe0, 0xa0, 0xbf, 3}, {0xe1, 0xec, 0x80, 0xbf, 3},
        {0xed, 0xed, 0x80, 0x9f, 3}, {0xee, 0xef, 0x80, 0xbf, 3}, {0xf0, 0xf0, 0x90, 0xbf, 4},
        {0xf1, 0xf3, 0x80, 0xbf, 4}, {0xf4, 0xf4, 0x80, 0x8f, 4},
    };
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        if (s[0] < seqs[i].lo || s[0] > seqs[i].hi)
            continue;
        if (s[1] < seqs[i].lo2 || s[1] > seqs[i].hi2)
            return 0;
        *cp = s[0] & (0x7f >> seqs[i].n);
        for (int k = 1; k < seqs[i].n; k++) {
            if ((s[k] & 0xc0) != 0x80)
                return 0;
            *cp = *cp << 6 | (s[k] & 0x3f);
        }
        return seqs[i].n;
    }
    return 0;
}

/* text is valid UTF-8 and holds no control character (C0, DEL, C1) but
 * line ends. */
static void assert_clean_utf8(const char *text, const char *what)
{
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        uint32_t cp;
        int n = utf8_len(p, &cp);
        cr_assert_gt(n, 0, "%s: not UTF-8 at byte %td: %.40s", what, (const char *)p - text,
                     (const char *)p);
        cr_assert(cp >= 0x20 || cp == '\n', "%s: control U+%04X at byte %td", what, cp,
                  (const char *)p - text);
        cr_assert(cp < 0x7f || cp > 0x9f, "%s: control U+%04X at byte %td", what, cp,
                  (const char *)p - text);
        p += n;
    }
}

/* A JSON document in valid UTF-8, without escaped surrogates. */
static const char *clean_json(const char *text, const char *what)
{
    assert_clean_utf8(text, what);
    for (const char *p = strstr(text, "\\u"); p; p = strstr(p + 1, "\\u"))
        cr_assert(strncasecmp(p + 2, "d8", 2) < 0 || strncasecmp(p + 2, "df", 2) > 0,
                  "%s: an escaped surrogate: %.12s", what, p);
    return j_doc(text);
}

/* Lock names as acquired, as JSON shows them and as text shows them. */
static const struct {
    const char *raw, *json, *text;
} odd_names[] = {
    {"cyr-\xd0\x91\xd0\xbe\xd0\xb1", "cyr-\xd0\x91\xd0\xbe\xd0\xb1",
     "cyr-\xd0\x91\xd0\xbe\xd0\xb1"},
    {"euro-\xe2\x82\xac", "euro-\xe2\x82\xac", "euro-\xe2\x82\xac"},
    {"lock-\xf0\x9f\x94\x92", "lock-\xf0\x9f\x94\x92", "lock-\xf0\x9f\x94\x92"},
    {"max-\xf4\x8f\xbf\xbf", "max-\xf4\x8f\xbf\xbf", "max-\xf4\x8f\xbf\xbf"},
    {"ff-\xff\xfe", "ff-\\ufffd\\ufffd", "ff-??"},
    {"lone-\x80", "lone-\\ufffd", "lone-?"},
    {"overlong-\xc0\xaf", "overlong-\\ufffd\\ufffd", "overlong-??"},
    {"nel-\xc2\x85", "nel-\\u0085", "nel-?"},
    {"csi-\xc2\x9bm", "csi-\\u009bm", "csi-?m"},
    {"surrogate-\xed\xa0\x80", "surrogate-\\ufffd\\ufffd\\ufffd", "surrogate-???"},
    {"big-\xf4\x90\x80\x80", "big-\\ufffd\\ufffd\\ufffd\\ufffd", "big-????"},
    {"cut-\xe2\x82", "cut-\\ufffd\\ufffd", "cut-??"},
    {"quote-\"\\", "quote-\\\"\\\\", "quote-\"\\"},
};
#define NODD (sizeof odd_names / sizeof odd_names[0])

/* A command name with C1 and C0 controls (ESC c resets a terminal), an
 * invalid byte and a Cyrillic letter, as JSON and text show it (the agent
 * turns C0 into '?' first). */
#define ODD_COMM      "t\xc2\x85\xff\033c\xd0\x96"
#define ODD_COMM_JSON "t\\u0085\\ufffd?c\xd0\x96"
#define ODD_COMM_TEXT "t???c\xd0\x96"

/* Starts a holder of name whose process is called ODD_COMM. */
static void odd_comm_holder(struct h_holder *h, const char *name)
{
    char saved[16] = "";
    cr_assert_eq(prctl(PR_GET_NAME, saved), 0);
    cr_assert_eq(prctl(PR_SET_NAME, ODD_COMM), 0); /* the child inherits it */
    h_holder_start(h, name, 30000);
    cr_assert_eq(prctl(PR_SET_NAME, saved), 0);
}

/* The lease lines of a text table hold each odd name, as text shows it. */
static void assert_text_names(const char *text, const char *what)
{
    assert_clean_utf8(text, what);
    for (size_t i = 0; i < NODD; i++)
        cr_assert_not_null(line_of(text, odd_names[i].text), "%s: no line for %s:\n%s", what,
                           odd_names[i].text, text);
    const char *line = line_of(text, "odd-comm");
    cr_assert_not_null(line, "%s: no line for odd-comm:\n%s", what, text);
    cr_assert(has_word(line, ODD_COMM_TEXT), "%s: command name not shown as %s: %.200s", what,
              ODD_COMM_TEXT, line);
}

static void assert_json_names(const char *text, const char *what)
{
    const char *arr = j_leases(clean_json(text, what));
    for (size_t i = 0; i < NODD; i++)
        cr_assert_not_null(j_lease(arr, odd_names[i].json), "%s: %s not listed: %s", what,
                           odd_names[i].json, text);
    const char *l = j_lease(arr, "odd-comm");
    cr_assert_not_null(l, "%s: odd-comm not listed", what);
    cr_assert(j_is(j_must(l, "comm"), ODD_COMM_JSON), "%s: comm %.40s", what, j_must(l, "comm"));
}

ITEST(status, odd_bytes_in_names_give_valid_utf8_without_controls)
{
    start_agent();
    struct h_cl *a = h_client();
    for (size_t i = 0; i < NODD; i++)
        h_must_acquire(a, odd_names[i].raw, 30000);
    struct h_holder h;
    odd_comm_holder(&h, "odd-comm");

    QUERY("status", "--json");
    assert_json_names(R.out, "status-json");
    QUERY("leases", "--json");
    assert_json_names(R.out, "leases-json");
    QUERY("status");
    assert_text_names(R.out, "status");
    QUERY("leases");
    assert_text_names(R.out, "leases");

    /* What Redis holds, named by odd names, in text and JSON. */
    char req[128], want[128];
    for (size_t i = 0; i < NODD; i++) {
        snprintf(req, sizeof req, "holder %s\n", odd_names[i].raw);
        const char *ans = raw_query(req, strlen(req));
        assert_clean_utf8(ans, req);
        snprintf(want, sizeof want, "%s: held by pid %d (test_status)", odd_names[i].text,
                 (int)getpid());
        cr_assert(strncmp(ans, want, strlen(want)) == 0, "got: %s\nwant: %s", ans, want);
        snprintf(req, sizeof req, "holder-json %s\n", odd_names[i].raw);
        ans = raw_query(req, strlen(req));
        cr_assert(j_is(j_must(clean_json(ans, req), "name"), odd_names[i].json), "%s", ans);
    }
    const char *ans = raw_query("holder odd-comm\n", 16);
    assert_clean_utf8(ans, "holder odd-comm");
    snprintf(want, sizeof want, "odd-comm: held by pid %d (%s)", (int)h.pid, ODD_COMM_TEXT);
    cr_assert(strncmp(ans, want, strlen(want)) == 0, "got: %s\nwant: %s", ans, want);
    ans = raw_query("holder-json odd-comm\n", 21);
    cr_assert(j_is(j_must(clean_json(ans, "holder-json"), "comm"), ODD_COMM_JSON), "%s", ans);
    cr_assert_eq(h_holder_release(&h), 0);
}

/* ---- long listings, rendered as the peer reads ----
 *
 * A listing is rendered a part at a time while the peer drains it, and each
 * lease as it is when its line is written. These tests hold thousands of
 * leases, so that an answer is many times the agent's buffer. */

#define MANY_MAX    8000
#define MANY_WINDOW 256 /* acquires in flight */
#define SLOW_PIECE  512 /* bytes per read of a slow reader */
#define BIG_ANSWER  (8 << 20)

static struct h_acq many[MANY_MAX];
static char big[BIG_ANSWER];

static const char *many_name(const char *prefix, int i)
{
    static char name[256];
    snprintf(name, sizeof name, "%s-%05d", prefix, i);
    return name;
}

/* Takes the leases prefix-from .. prefix-(to-1) through cl (TTL ttl_ms),
 * MANY_WINDOW at a time; each must be granted. */
static void hold_many(struct h_cl *cl, const char *prefix, int from, int to, uint32_t ttl_ms)
{
    cr_assert_leq(to, MANY_MAX);
    int next = from, ok = 0;
    int64_t end = h_deadline(WAIT_MS);
    while (h_acq_done(many + from, to - from, &ok) < to - from) {
        cr_assert_lt(h_now_ms(), end, "%d of %d acquires answered",
                     h_acq_done(many + from, to - from, NULL), to - from);
        int done = h_acq_done(many + from, next - from, NULL);
        for (; next < to && next - from - done < MANY_WINDOW; next++)
            h_acquire_async(cl, many_name(prefix, next), ttl_ms, DLOCK_WAIT_NONE, &many[next]);
        h_pump(cl, 50);
    }
    cr_assert_eq(ok, to - from, "%d of %d leases granted", ok, to - from);
}

/* Sends req on a new status connection and reads the answer until the agent
 * closes, in pieces of SLOW_PIECE bytes, yielding the CPU between pieces;
 * once `at` bytes are in, calls midway (when given) once. Returns the answer
 * (in big). */
static const char *slow_query(const char *req, size_t at, void (*midway)(void *), void *arg)
{
    int fd = peer_connect(status_sock(), 0);
    cr_assert_geq(fd, 0, "connect %s: %s", status_sock(), strerror(errno));
    cr_assert_eq(h_raw_send(fd, req, strlen(req)), 0);
    size_t n = 0;
    int64_t end = h_deadline(WAIT_MS);
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        cr_assert_gt(poll(&pfd, 1, (int)(end - h_now_ms() > 0 ? end - h_now_ms() : 0)), 0,
                     "no end of the answer to %s within %d ms; got %zu bytes", req, WAIT_MS, n);
        cr_assert_lt(n + SLOW_PIECE, sizeof big, "answer too long");
        ssize_t r = read(fd, big + n, SLOW_PIECE);
        if (r == 0)
            break;
        cr_assert_gt(r, 0, "read: %s", strerror(errno));
        n += (size_t)r;
        if (midway && n >= at) {
            midway(arg);
            midway = NULL;
        }
        sched_yield();
    }
    close(fd);
    big[n] = '\0';
    return big;
}

/* The leases array of a long answer (j_leases() would be quadratic). */
static const char *leases_of(const char *doc)
{
    return j_must(doc, "leases");
}

/* The names in a JSON leases array (each once: sorted and unique), into
 * names[]; returns how many. Walks the array once (j_elem would be
 * quadratic here). */
static int json_names(const char *arr, char (*names)[256], int max)
{
    int n = 0;
    cr_assert_eq(*arr, '[', "\"leases\" is not an array");
    const char *p = j_ws(arr + 1);
    while (*p == '{') {
        cr_assert_lt(n, max, "more than %d leases", max);
        j_str(p, "name", names[n++], sizeof names[0]);
        p = j_ws(j_skip(p, 1));
        if (*p == ',')
            p = j_ws(p + 1);
    }
    cr_assert_eq(*p, ']');
    qsort(names, (size_t)n, sizeof names[0], cmp_names);
    for (int i = 1; i < n; i++)
        cr_assert_str_neq(names[i - 1], names[i], "%s listed twice", names[i]);
    return n;
}

/* The same for the first words of the lines of a text table after its
 * header. */
static int text_names(const char *text, char (*names)[256], int max)
{
    int n = 0;
    const char *p = strchr(text, '\n');
    cr_assert_not_null(p, "no header line");
    for (p++; *p; p = next_line(p)) {
        cr_assert_lt(n, max, "more than %d leases", max);
        size_t len = strcspn(p, " \n");
        cr_assert_lt(len, sizeof names[0]);
        memcpy(names[n], p, len);
        names[n++][len] = '\0';
    }
    qsort(names, (size_t)n, sizeof names[0], cmp_names);
    for (int i = 1; i < n; i++)
        cr_assert_str_neq(names[i - 1], names[i], "%s listed twice", names[i]);
    return n;
}

static bool listed(char (*names)[256], int n, const char *name)
{
    return bsearch(name, names, (size_t)n, sizeof names[0], cmp_names) != NULL;
}

static char names_seen[MANY_MAX + 16][256];

ITEST(status, a_long_listing_read_in_small_pieces_arrives_whole)
{
    enum { N = 3000 };
    start_agent();
    struct h_cl *a = h_client();
    hold_many(a, "many", 0, N, 30000);

    const char *ans = slow_query("leases-json\n", 0, NULL, NULL);
    cr_assert_gt(strlen(ans), (size_t)(N * 100), "%zu bytes", strlen(ans));
    int n = json_names(leases_of(j_doc(ans)), names_seen, MANY_MAX + 16);
    cr_assert_eq(n, N, "%d of %d leases listed", n, N);
    for (int i = 0; i < N; i++)
        cr_assert(listed(names_seen, n, many_name("many", i)), "%s missing", many_name("many", i));

    ans = slow_query("leases\n", 0, NULL, NULL);
    cr_assert_eq(count_lines(ans), N + 1, "a header and %d leases", N);
    cr_assert_eq(text_names(ans, names_seen, MANY_MAX + 16), N);
    cr_assert(listed(names_seen, N, many_name("many", N - 1)));

    /* status-json: the agent, nodes and counters, then every lease. */
    const char *doc = j_doc(slow_query("status-json\n", 0, NULL, NULL));
    cr_assert_eq(j_int(j_must(doc, "agent"), "pid"), H.agent[0].pid);
    cr_assert_geq(j_int(j_must(doc, "counters"), "grants"), N);
    cr_assert_eq(json_names(leases_of(doc), names_seen, MANY_MAX + 16), N);

    /* A glob walks every lease and lists the matches. */
    ans = slow_query("leases-json many-00*\n", 0, NULL, NULL);
    cr_assert_eq(json_names(leases_of(j_doc(ans)), names_seen, MANY_MAX + 16), 1000,
                 "many-00000..00999");
}

/* During a listing, leases of the first third of the names are released and
 * as many new ones again are taken: the table grows (its buckets double)
 * while the walk is under way. */
struct churn {
    struct h_cl *cl;
    int n;
};

static void churn(void *arg)
{
    struct churn *c = arg;
    for (int i = 0; i < c->n / 3; i++)
        cr_assert_eq(dlock_lease_release(many[i].lease), 0);
    hold_many(c->cl, "new", c->n, c->n + c->n, 30000);
}

ITEST(status, leases_come_and_go_during_a_listing)
{
    enum { N = 1500 };
    start_agent();
    struct h_cl *a = h_client();
    hold_many(a, "old", 0, N, 30000);
    struct churn c = {a, N};
    const char *ans = slow_query("leases-json\n", 4096, churn, &c);
    /* Well-formed, each name once; every lease held throughout is there;
     * the released and the new ones may be or not. */
    int n = json_names(leases_of(j_doc(ans)), names_seen, MANY_MAX + 16);
    for (int i = N / 3; i < N; i++)
        cr_assert(listed(names_seen, n, many_name("old", i)), "%s missing", many_name("old", i));
    for (int i = 0; i < n; i++)
        cr_assert(strncmp(names_seen[i], "old-", 4) == 0 || strncmp(names_seen[i], "new-", 4) == 0,
                  "%s listed", names_seen[i]);
    cr_assert_leq(n, N + N, "%d listed", n);
    /* The next listing shows the table as it is now. */
    n = json_names(leases_of(j_doc(slow_query("leases-json\n", 0, NULL, NULL))), names_seen,
                   MANY_MAX + 16);
    cr_assert_eq(n, N - N / 3 + N);
    cr_assert_not(listed(names_seen, n, many_name("old", 0)));
    cr_assert(listed(names_seen, n, many_name("new", N)));
}

ITEST(status, a_plain_name_lists_its_one_lease)
{
    start_agent();
    struct h_cl *a = h_client();
    h_must_acquire(a, "lit-a", 30000);
    h_must_acquire(a, "lit-ab", 30000);
    h_must_acquire(a, "lit-b", 30000);
    h_must_acquire(a, "lit-a*", 30000); /* glob characters are allowed in names */
    QUERY("leases", "lit-a");
    cr_assert_str_eq(listed_names(R.out), "lit-a");
    QUERY("leases", "--json", "lit-ab");
    cr_assert_str_eq(listed_json_names(R.out), "lit-ab");
    QUERY("leases", "lit-none");
    cr_assert_eq(count_lines(R.out), 1, "the header alone:\n%s", R.out);
    QUERY("leases", "--json", "lit-none");
    cr_assert_eq(j_len(j_leases(j_doc(R.out))), 0);
    /* A glob is still a glob. */
    QUERY("leases", "lit-a*");
    cr_assert_str_eq(listed_names(R.out), "lit-a lit-a* lit-ab");
    QUERY("leases", "lit-a\\*");
    cr_assert_str_eq(listed_names(R.out), "lit-a*");
}

/* The agent's resident memory, in KiB. */
static long agent_rss_kb(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)H.agent[0].pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    fclose(f);
    cr_assert_gt(kb, 0);
    return kb;
}

/* The renewals of one lease, by its plain name. */
static long long renewals_of(const char *name)
{
    QUERY("leases", "--json", name);
    const char *l = j_lease(j_leases(j_doc(R.out)), name);
    cr_assert_not_null(l, "%s not listed: %s", name, R.out);
    return j_int(l, "renewals");
}

#define STALLED      15         /* peers that ask and never read: all slots but one */
#define STALL_LEASES 8000       /* of about 400 bytes each in JSON: 3 MB an answer */
#define STALL_RSS_KB (8 * 1024) /* the whole answers would take 15 x 3 MB */

ITEST(status, peers_that_never_read_cost_bounded_memory_and_delay_no_one)
{
    start_agent();
    struct h_cl *a = h_client();
    char prefix[192];
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[sizeof prefix - 1] = '\0';
    hold_many(a, prefix, 0, STALL_LEASES, 30000);
    struct h_cl *b = h_client();
    dlock_lease *l = h_must_acquire(b, "busy", 1500);
    /* Once, read whole, so that what a listing allocates is allocated. */
    cr_assert_eq(json_names(leases_of(j_doc(slow_query("leases-json\n", 0, NULL, NULL))),
                            names_seen, MANY_MAX + 16),
                 STALL_LEASES + 1);
    long before = agent_rss_kb();

    int fd[STALLED];
    for (int i = 0; i < STALLED; i++) {
        fd[i] = peer_connect(status_sock(), 0);
        cr_assert_geq(fd[i], 0);
        cr_assert_eq(h_raw_send(fd[i], "leases-json\n", 12), 0);
        /* The agent has begun the answer (and would have rendered all of it
         * by now if it rendered answers whole). */
        struct pollfd pfd = {.fd = fd[i], .events = POLLIN};
        cr_assert_eq(poll(&pfd, 1, h_scaled_ms(WAIT_MS)), 1, "no answer to peer %d", i);
    }
    long grown = agent_rss_kb() - before;
    cr_assert_lt(grown, STALL_RSS_KB, "%d peers that read nothing cost the agent %ld KiB", STALLED,
                 grown);

    /* While they stall, the short lease is renewed, and another client's
     * acquire and release go through. */
    long long r0 = renewals_of("busy");
    H_WAIT_UNTIL(WAIT_MS, renewals_of("busy") >= r0 + 2);
    dlock_lease *m = h_must_acquire(a, "meanwhile", 30000);
    cr_assert_eq(dlock_lease_release_sync(m), 0);
    for (int i = 0; i < STALLED; i++) {
        struct pollfd pfd = {.fd = fd[i], .events = POLLRDHUP};
        cr_assert_eq(poll(&pfd, 1, 0), 0, "peer %d was dropped before the renewals", i);
    }
    cr_assert_eq(h_events(b, l, DLOCK_STATE_JEOPARDY), 0, "the lease was in jeopardy");
    cr_assert_eq(h_events(b, l, DLOCK_STATE_LOST), 0, "the lease was lost");
    cr_assert_eq(dlock_lease_state(l), DLOCK_STATE_HELD);

    /* A peer that never reads is dropped at its deadline. */
    for (int i = 0; i < STALLED; i++) {
        struct pollfd pfd = {.fd = fd[i], .events = POLLRDHUP};
        cr_assert_eq(poll(&pfd, 1, h_scaled_ms(WAIT_MS)), 1, "peer %d not dropped", i);
        close(fd[i]);
    }
    cr_assert_eq(dlock_lease_release(l), 0);
}
