/* SPDX-License-Identifier: BSD-3-Clause */
/* status_render.c -- the status answers from a snapshot (status_render.h).
 * A lease's fields and a node's fields are each described once, in a
 * table: its JSON member, its text column, and how to read it; the text,
 * JSON and metrics renderers walk the tables. */
#include "status_render.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "text.h"
#include "util.h"
#include "wire.h"

/* ---- growable text ---- */

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Appends len bytes as they are. */
static void sb_put(struct sbuf *b, const char *p, size_t len)
{
    if (b->oom)
        return;
    if (b->cap - b->len <= len) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len <= len)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, len);
    b->len += len;
    b->p[b->len] = '\0';
}

/* Printable ASCII that a JSON string holds as it is. */
static bool json_plain(unsigned char ch)
{
    return ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\';
}

/* A JSON string, quoted and escaped. Names and command names may hold any
 * byte, and JSON must be UTF-8: control characters (C1 too, which
 * terminals obey) are escaped, and every byte outside a well-formed UTF-8
 * sequence is written as U+FFFD. Runs of plain ASCII go in one copy. */
static void sb_json_str(struct sbuf *b, const char *s)
{
    size_t len = strlen(s);
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < len;) {
        size_t run = i;
        while (run < len && json_plain((unsigned char)s[run]))
            run++;
        if (run > i) {
            sb_put(b, s + i, run - i);
            i = run;
            continue;
        }
        uint32_t cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (n == 0)
            sb_printf(b, "\\ufffd");
        else if (cp == '"' || cp == '\\')
            sb_printf(b, "\\%c", (char)cp);
        else if (text_is_control(cp))
            sb_printf(b, "\\u%04x", (unsigned)cp);
        else
            sb_put(b, s + i, n);
        i += n ? n : 1;
    }
    sb_put(b, "\"", 1);
}

/* A Prometheus label value, which must be UTF-8: backslash, quote and
 * newline escaped; as the format has no other escapes, other control
 * characters and bytes outside well-formed UTF-8 are shown as '?'. */
static void sb_label(struct sbuf *b, const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (n && (cp == '\\' || cp == '"'))
            sb_printf(b, "\\%c", (char)cp);
        else if (n && cp == '\n')
            sb_printf(b, "\\n");
        else if (n == 0 || text_is_control(cp))
            sb_printf(b, "?");
        else
            sb_printf(b, "%.*s", (int)n, s + i);
        i += n ? n : 1;
    }
}

/* ---- field tables ---- */

enum fkind { F_STR, F_NUM, F_BOOL };
enum { IN_TEXT = 1, IN_JSON = 2 };

/* A field's value: s for F_STR, n for F_NUM and F_BOOL. */
struct fval {
    const char *s;
    long long n;
    char buf[32];
};

/* A number in decimal, without printf: listings write millions. */
static size_t num_text(char out[24], long long n)
{
    char tmp[24];
    size_t len = 0;
    unsigned long long u = n < 0 ? 0ull - (unsigned long long)n : (unsigned long long)n;
    do {
        tmp[len++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t k = 0;
    if (n < 0)
        out[k++] = '-';
    while (len)
        out[k++] = tmp[--len];
    return k;
}

static void sb_blanks(struct sbuf *b, size_t n)
{
    static const char blanks[] = "                                ";
    for (size_t k; n; n -= k) {
        k = n < sizeof blanks - 1 ? n : sizeof blanks - 1;
        sb_put(b, blanks, k);
    }
}

/* s (len bytes) padded with blanks to |width|: before it when width is
 * positive, after it when negative, as printf's %*s does. */
static void sb_pad(struct sbuf *b, const char *s, size_t len, int width)
{
    size_t w = width < 0 ? (size_t)-width : (size_t)width, pad = len < w ? w - len : 0;
    if (width > 0)
        sb_blanks(b, pad);
    sb_put(b, s, len);
    if (width < 0)
        sb_blanks(b, pad);
}

/* Writes one field: JSON (a member after its key) or a text column
 * (blank-free, printable, padded to width; negative width: left-aligned). */
static void put_json(struct sbuf *b, enum fkind kind, const struct fval *v)
{
    char num[24];
    if (kind == F_STR)
        sb_json_str(b, v->s);
    else if (kind == F_BOOL)
        sb_put(b, v->n ? "true" : "false", v->n ? 4 : 5);
    else
        sb_put(b, num, num_text(num, v->n));
}

static void put_text(struct sbuf *b, enum fkind kind, int width, const struct fval *v)
{
    char num[24];
    if (kind == F_NUM) {
        sb_pad(b, num, num_text(num, v->n), width);
        return;
    }
    const char *s = kind == F_BOOL ? (v->n ? "yes" : "no") : v->s;
    /* Clients choose names and command names, and node errors come from
     * Redis as they are: shown without the control characters a terminal
     * would obey. */
    char shown[WIRE_MAX_NAME + 1]; /* the longest field: a name */
    text_printable(shown, sizeof shown, s);
    sb_pad(b, shown, strlen(shown), width);
}

/* ---- leases ---- */

struct lease_field {
    const char *key, *head;
    int width;
    enum fkind kind;
    void (*get)(const struct status_lease *l, uint64_t now, struct fval *v);
};

static uint64_t ms_left(uint64_t until, uint64_t now)
{
    return until > now ? (until - now) / NS_PER_MS : 0;
}

static void l_name(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->s = l->name;
}
static void l_state(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->s = dlock_state_name(l->state);
}
static void l_fence(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = (long long)l->fence;
}
static void l_pid(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = l->pid;
}
static void l_uid(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = l->uid;
}
static void l_comm(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->s = l->comm;
}
static void l_age(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = now > l->granted_at ? (long long)((now - l->granted_at) / NS_PER_MS) : 0;
}
static void l_ttl(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = l->ttl_ms;
}
static void l_valid(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = (long long)ms_left(l->deadline, now);
}
static void l_renewals(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = l->renewals;
}
static void l_waiters(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = l->waiters;
}
static void l_kind(const struct status_lease *l, uint64_t now, struct fval *v)
{
    static const char *const names[] = {
        [LOCK_EXCLUSIVE] = "exclusive", [LOCK_SHARED] = "shared", [LOCK_SEMAPHORE] = "semaphore"};
    v->s = l->kind < sizeof names / sizeof names[0] ? names[l->kind] : "?";
}
static void l_permits(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = l->permits;
}
static void l_holds(const struct status_lease *l, uint64_t now, struct fval *v)
{
    v->n = l->holds;
}

static const struct lease_field lease_fields[] = {
    {"name", "NAME", -32, F_STR, l_name},
    {"state", "STATE", -8, F_STR, l_state},
    {"fence", "FENCE", 20, F_NUM, l_fence},
    {"pid", "PID", 7, F_NUM, l_pid},
    {"uid", "UID", 5, F_NUM, l_uid},
    {"comm", "COMMAND", -15, F_STR, l_comm},
    {"age_ms", "AGE_MS", 9, F_NUM, l_age},
    {"ttl_ms", "TTL_MS", 8, F_NUM, l_ttl},
    {"valid_ms", "VALID_MS", 9, F_NUM, l_valid},
    {"renewals", "RENEWALS", 8, F_NUM, l_renewals},
    {"waiters", "WAITERS", 7, F_NUM, l_waiters},
    {"kind", "KIND", -9, F_STR, l_kind},
    {"permits", "PERMITS", 7, F_NUM, l_permits},
    {"holds", "HOLDS", 5, F_NUM, l_holds},
};
#define NLEASE_FIELDS (sizeof lease_fields / sizeof lease_fields[0])

/* One part of a listing: the leases of one slice of the walk. */
struct lease_walk {
    struct status_answer *a;
    uint64_t now; /* when this part is written */
    size_t high;
    struct sbuf *b;
};

static bool is_json(enum status_query q)
{
    return q == SQ_STATUS_JSON || q == SQ_LEASES_JSON;
}

/* Writes the lease's line, when the asker may see it and its name matches;
 * false once the buffer is full enough for this part. */
static bool lease_one(void *arg, const struct status_lease *l)
{
    struct lease_walk *w = arg;
    struct status_answer *a = w->a;
    if ((!a->who.all && l->uid != a->who.uid) ||
        (a->pattern[0] && !a->literal && fnmatch(a->pattern, l->name, 0) != 0))
        return true;
    struct sbuf *b = w->b;
    bool json = is_json(a->query);
    if (json)
        sb_put(b, a->listed ? ",{" : "{", a->listed ? 2 : 1);
    for (size_t i = 0; i < NLEASE_FIELDS; i++) {
        const struct lease_field *f = &lease_fields[i];
        struct fval v = {0};
        f->get(l, w->now, &v);
        if (json) {
            sb_put(b, i ? ",\"" : "\"", i ? 2 : 1);
            sb_put(b, f->key, strlen(f->key));
            sb_put(b, "\":", 2);
            put_json(b, f->kind, &v);
        } else {
            if (i)
                sb_put(b, " ", 1);
            put_text(b, f->kind, f->width, &v);
        }
    }
    sb_put(b, json ? "}" : "\n", 1);
    a->listed = true;
    return b->len < w->high;
}

static void leases_header(struct sbuf *b)
{
    for (size_t i = 0; i < NLEASE_FIELDS; i++)
        sb_printf(b, "%s%*s", i ? " " : "", lease_fields[i].width, lease_fields[i].head);
    sb_printf(b, "\n");
}

/* ---- nodes ---- */

struct node_field {
    const char *key, *head; /* NULL: not in JSON, not in the text */
    const char *sep;        /* before the text column: NULL for one space */
    int width;
    enum fkind kind;
    void (*get)(const struct backend_node *n, const struct status_snapshot *s, struct fval *v);
    /* The per-node gauge, if any: its name, help and value. */
    const char *metric, *help;
    double (*value)(const struct backend_node *n, uint64_t now);
};

static void n_addr(const struct backend_node *n, const struct status_snapshot *s, struct fval *v)
{
    v->s = n->addr;
}
static void n_connected(const struct backend_node *n, const struct status_snapshot *s,
                        struct fval *v)
{
    v->n = n->connected;
}
static void n_subscribed(const struct backend_node *n, const struct status_snapshot *s,
                         struct fval *v)
{
    v->n = n->subscribed;
}
static void n_rtt(const struct backend_node *n, const struct status_snapshot *s, struct fval *v)
{
    v->n = (long long)(n->last_rtt_ns / 1000);
}
/* The node's part in quorums: "counts", "joins in N s" (after a restart;
 * rounded up, so never 0 while excluded), "-" outside quorum mode. */
static void n_quorum(const struct backend_node *n, const struct status_snapshot *s, struct fval *v)
{
    if (!s->quorum)
        v->s = "-";
    else if (n->excluded_until > s->now) {
        snprintf(v->buf, sizeof v->buf, "joins in %llu s",
                 (unsigned long long)((n->excluded_until - s->now + NS_PER_SEC - 1) / NS_PER_SEC));
        v->s = v->buf;
    } else
        v->s = "counts";
}
static void n_error(const struct backend_node *n, const struct status_snapshot *s, struct fval *v)
{
    v->s = n->last_error_text;
}
static void n_error_text(const struct backend_node *n, const struct status_snapshot *s,
                         struct fval *v)
{
    v->s = n->last_error_text[0] ? n->last_error_text : "-";
}
static void n_excluded(const struct backend_node *n, const struct status_snapshot *s,
                       struct fval *v)
{
    v->n = (long long)ms_left(n->excluded_until, s->now);
}
static void n_run_id(const struct backend_node *n, const struct status_snapshot *s, struct fval *v)
{
    v->s = n->run_id;
}
static void n_durable(const struct backend_node *n, const struct status_snapshot *s, struct fval *v)
{
    v->n = n->durable;
}

static double m_up(const struct backend_node *n, uint64_t now)
{
    return n->connected;
}
static double m_excluded(const struct backend_node *n, uint64_t now)
{
    return n->excluded_until > now;
}
static double m_rtt(const struct backend_node *n, uint64_t now)
{
    return (double)n->last_rtt_ns / 1e9;
}

/* key: the JSON member (NULL: text only); head: the text column (NULL: JSON only). */
static const struct node_field node_fields[] = {
    {"addr", "NODE", NULL, -40, F_STR, n_addr, NULL, NULL, NULL},
    {"connected", "CONNECTED", NULL, -9, F_BOOL, n_connected, "dlock_node_up",
     "1 when the command link to the Redis node is set up.", m_up},
    {"subscribed", "SUBSCRIBED", NULL, -10, F_BOOL, n_subscribed, NULL, NULL, NULL},
    {"rtt_us", "RTT_US", NULL, 8, F_NUM, n_rtt, "dlock_node_rtt_seconds",
     "Round trip of the node's last answer.", m_rtt},
    {NULL, "QUORUM", "  ", -16, F_STR, n_quorum, NULL, NULL, NULL},
    {"last_error", NULL, NULL, 0, F_STR, n_error, NULL, NULL, NULL},
    {NULL, "LAST_ERROR", NULL, 0, F_STR, n_error_text, NULL, NULL, NULL},
    {"excluded_for_ms", NULL, NULL, 0, F_NUM, n_excluded, "dlock_node_excluded",
     "1 while a restarted node counts toward no quorum.", m_excluded},
    {"run_id", NULL, NULL, 0, F_STR, n_run_id, NULL, NULL, NULL},
    {"durable", NULL, NULL, 0, F_BOOL, n_durable, NULL, NULL, NULL},
};
#define NNODE_FIELDS (sizeof node_fields / sizeof node_fields[0])

/* The text columns: each after its separator (one space unless the field
 * says otherwise), the first after none. */
static const char *column_sep(const struct node_field *f, bool first)
{
    return first ? "" : f->sep ? f->sep : " ";
}

static void nodes_text(const struct status_snapshot *s, struct sbuf *b)
{
    bool first = true;
    for (size_t i = 0; i < NNODE_FIELDS; i++)
        if (node_fields[i].head) {
            const struct node_field *f = &node_fields[i];
            sb_printf(b, "%s%*s", column_sep(f, first), f->width, f->head);
            first = false;
        }
    sb_printf(b, "\n");
    for (size_t k = 0; k < s->nnodes; k++) {
        first = true;
        for (size_t i = 0; i < NNODE_FIELDS; i++) {
            const struct node_field *f = &node_fields[i];
            if (!f->head)
                continue;
            struct fval v = {0};
            f->get(&s->nodes[k], s, &v);
            sb_printf(b, "%s", column_sep(f, first));
            put_text(b, f->kind, f->width, &v);
            first = false;
        }
        sb_printf(b, "\n");
    }
}

static void nodes_json(const struct status_snapshot *s, struct sbuf *b)
{
    sb_printf(b, "[");
    for (size_t k = 0; k < s->nnodes; k++) {
        sb_printf(b, "%s{", k ? "," : "");
        const char *sep = "";
        for (size_t i = 0; i < NNODE_FIELDS; i++) {
            const struct node_field *f = &node_fields[i];
            if (!f->key)
                continue;
            struct fval v = {0};
            f->get(&s->nodes[k], s, &v);
            sb_printf(b, "%s\"%s\":", sep, f->key);
            put_json(b, f->kind, &v);
            sep = ",";
        }
        sb_printf(b, "}");
    }
    sb_printf(b, "]");
}

/* ---- counters ---- */

/* The agent's counters, by name: "renewal_failures" is the JSON member,
 * "renewal failures" in the text and dlock_renewal_failures_total in the
 * metrics. */
static const struct {
    const char *name, *help;
    size_t offset;
} counters[] = {
#define COUNTER(f, h)                                                                              \
    {                                                                                              \
#f, h, offsetof(struct agent_stats, f)                                                     \
    }
    COUNTER(grants, "Leases granted."),
    COUNTER(releases, "Leases released by their holder."),
    /* Operators' forced releases (dlockctl release --force). */
    COUNTER(forced_releases,
            "Names whose key an operator deleted, whoever held it (dlockctl release --force)."),
    COUNTER(handoffs,
            "Leases granted by cohort handoff: passed on within the agent without Redis."),
    COUNTER(grants_by_release,
            "Leases granted by a release in Redis that handed the key over to this agent's "
            "entry in the waiting-hosts record: no acquire of this agent's took it."),
    COUNTER(renewals, "Lease renewals that succeeded."),
    COUNTER(renewal_failures, "Lease renewals that failed without proof of loss."),
    COUNTER(losses, "Leases lost."),
    COUNTER(doubts, "Leases put in doubt by a Redis failover until their key was confirmed."),
    COUNTER(timeouts, "Acquire waits that ran out."),
    COUNTER(cancels, "Acquire waits cancelled by their client."),
    COUNTER(refused, "Acquire requests and connections refused by a limit before reaching Redis."),
    COUNTER(denied, "Acquire requests the access policy did not allow."),
#undef COUNTER
};
#define NCOUNTERS (sizeof counters / sizeof counters[0])

static unsigned long long counter_value(const struct status_snapshot *s, size_t i)
{
    return *(const uint64_t *)((const char *)&s->stats + counters[i].offset);
}

/* ---- the answers that list leases ---- */

enum { PART_HEAD, PART_LEASES, PART_TAIL, PART_DONE };

static void status_json_head(const struct status_source *src, struct sbuf *b)
{
    struct status_snapshot s;
    src->snapshot(src->arg, &s);
    sb_printf(b, "{\"agent\":{\"version\":\"%s\",\"pid\":%d,\"mode\":\"%s\",\"prefix\":",
              DLOCK_VERSION, (int)getpid(), s.mode);
    sb_json_str(b, src->cfg->prefix);
    sb_printf(b, ",\"uptime_ms\":%llu,\"connections\":%u},\"nodes\":",
              (unsigned long long)((s.now - s.started) / NS_PER_MS), s.connections);
    nodes_json(&s, b);
    sb_printf(b, ",\"counters\":{");
    for (size_t i = 0; i < NCOUNTERS; i++)
        sb_printf(b, "%s\"%s\":%llu", i ? "," : "", counters[i].name, counter_value(&s, i));
    sb_printf(b, "},\"leases\":[");
}

static void status_text_head(const struct status_source *src, struct sbuf *b)
{
    struct status_snapshot s;
    src->snapshot(src->arg, &s);
    char prefix[sizeof src->cfg->prefix];
    text_printable(prefix, sizeof prefix, src->cfg->prefix);
    sb_printf(b, "dlockd %s, pid %d, %s mode, prefix '%s', up %llu s, %u connection(s)\n\n",
              DLOCK_VERSION, (int)getpid(), s.mode, prefix,
              (unsigned long long)((s.now - s.started) / NS_PER_SEC), s.connections);
    nodes_text(&s, b);
    sb_printf(b, "\n");
    for (size_t i = 0; i < NCOUNTERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s", counters[i].name);
        for (char *p = name; *p; p++)
            if (*p == '_')
                *p = ' ';
        sb_printf(b, "%s%s %llu", i ? ", " : "", name, counter_value(&s, i));
    }
    sb_printf(b, "\n\n");
    leases_header(b);
}

void status_answer_init(struct status_answer *a, enum status_query query, const struct asker *who,
                        const char *pattern)
{
    memset(a, 0, sizeof *a);
    a->query = query;
    a->who = *who;
    if (pattern && (query == SQ_LEASES || query == SQ_LEASES_JSON)) {
        snprintf(a->pattern, sizeof a->pattern, "%s", pattern);
        /* Without *, ? , [ or \ a glob matches one name only. */
        a->literal = strpbrk(a->pattern, "*?[\\") == NULL;
    }
}

/* The leases of one slice of the walk, or the one lease of a plain name.
 * True when no lease is left to write. */
static bool answer_leases(const struct status_source *src, struct status_answer *a, size_t budget,
                          size_t high, struct sbuf *b)
{
    struct lease_walk w = {.a = a, .now = now_ns(), .high = high, .b = b};
    if (a->literal) {
        src->find_lease(src->arg, a->pattern, lease_one, &w);
        return true;
    }
    return !src->walk_leases(src->arg, &a->cursor, budget, lease_one, &w);
}

bool status_answer_next(const struct status_source *src, struct status_answer *a, size_t budget,
                        size_t high, struct sbuf *b)
{
    if (a->part == PART_HEAD) {
        if (a->query == SQ_STATUS)
            status_text_head(src, b);
        else if (a->query == SQ_STATUS_JSON)
            status_json_head(src, b);
        else if (a->query == SQ_LEASES)
            leases_header(b);
        else
            sb_printf(b, "{\"leases\":[");
        a->part = PART_LEASES;
    }
    if (a->part == PART_LEASES) {
        if (b->len >= high || !answer_leases(src, a, budget, high, b))
            return false;
        a->part = PART_TAIL;
    }
    if (a->part == PART_TAIL) {
        if (is_json(a->query))
            sb_printf(b, "]}\n");
        a->part = PART_DONE;
    }
    return true;
}

/* ---- metrics ---- */

static void metric(struct sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(struct sbuf *b, const char *name, const char *help, double v)
{
    metric(b, name, "gauge", help);
    sb_printf(b, "%s %.17g\n", name, v);
}

/* A histogram's series; labels ("node=\"...\"", already escaped) go before
 * le, or none when NULL. */
static void histo_series(struct sbuf *b, const char *name, const char *labels,
                         const struct histo *h)
{
    const char *sep = labels ? "," : "", *l = labels ? labels : "";
    uint64_t cum = 0;
    for (int i = 0; i < STATS_BUCKETS; i++) {
        cum += h->bucket[i];
        sb_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, l, sep, stats_bucket_le[i],
                  (unsigned long long)cum);
    }
    sb_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, l, sep, (unsigned long long)h->count);
    if (labels) {
        sb_printf(b, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", name, l, h->sum, name, l,
                  (unsigned long long)h->count);
        return;
    }
    sb_printf(b, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

static void histogram(struct sbuf *b, const char *name, const char *help, const struct histo *h)
{
    metric(b, name, "histogram", help);
    histo_series(b, name, NULL, h);
}

/* ---- health ---- */

static bool mode_is(const struct status_snapshot *s, const char *mode)
{
    return s->mode && strcmp(s->mode, mode) == 0;
}

/* Whether node k counts toward the agent's locks now: its command link is
 * up and (quorum mode) no restart excludes it. In sentinel mode only the
 * master (the first node) serves locks. */
static bool node_serves(const struct status_snapshot *s, size_t k)
{
    const struct backend_node *n = &s->nodes[k];
    if (mode_is(s, "sentinel") && k > 0)
        return false;
    return n->connected && !(s->quorum && n->excluded_until > s->now);
}

void health_of(const struct status_snapshot *s, struct health *h)
{
    memset(h, 0, sizeof *h);
    h->mode = s->mode ? s->mode : "?";
    size_t counted = mode_is(s, "sentinel") && s->nnodes ? 1 : s->nnodes;
    for (size_t k = 0; k < counted; k++)
        h->up += node_serves(s, k);
    if (s->quorum)
        h->needed = (unsigned)(s->nnodes / 2 + 1);
    else
        h->needed = counted ? (unsigned)counted : 1; /* every master (cluster), else the one */
    h->ready = counted && h->up >= h->needed;
    if (h->ready)
        return;
    char err[120] = "";
    for (size_t k = 0; k < counted && !err[0]; k++)
        if (!node_serves(s, k) && s->nodes[k].last_error_text[0])
            text_printable(err, sizeof err, s->nodes[k].last_error_text);
    const char *what = s->quorum                ? "no majority of the Redis nodes is up"
                       : mode_is(s, "cluster")  ? "a Redis Cluster master is unreachable"
                       : mode_is(s, "sentinel") ? "the Redis master is unreachable"
                                                : "Redis is unreachable";
    if (!counted)
        what = mode_is(s, "cluster") ? "no Redis Cluster slot map yet" : "no Redis node known";
    snprintf(h->reason, sizeof h->reason, "%s%s%s", what, err[0] ? ": " : "", err);
}

/* "up", "down", "excluded for N s" (quorum mode, after a restart), or "not
 * used" (a sentinel, which serves no locks). */
static const char *node_state(const struct status_snapshot *s, size_t k, char *buf, size_t len)
{
    const struct backend_node *n = &s->nodes[k];
    if (mode_is(s, "sentinel") && k > 0)
        return n->connected ? "sentinel, connected" : "sentinel";
    if (n->connected && s->quorum && n->excluded_until > s->now) {
        snprintf(buf, len, "excluded for %llu s",
                 (unsigned long long)((n->excluded_until - s->now + NS_PER_SEC - 1) / NS_PER_SEC));
        return buf;
    }
    return n->connected ? "up" : "down";
}

bool render_health(const struct status_source *src, enum health_form form, struct sbuf *b)
{
    struct status_snapshot s;
    src->snapshot(src->arg, &s);
    struct health h;
    health_of(&s, &h);
    if (form == HEALTH_JSON) {
        sb_printf(b,
                  "{\"ready\":%s,\"mode\":\"%s\",\"nodes_up\":%u,\"nodes_needed\":%u,\"reason\":",
                  h.ready ? "true" : "false", h.mode, h.up, h.needed);
        sb_json_str(b, h.reason);
        sb_printf(b, ",\"nodes\":[");
        for (size_t k = 0; k < s.nnodes; k++) {
            char buf[48];
            sb_printf(b, "%s{\"addr\":", k ? "," : "");
            sb_json_str(b, s.nodes[k].addr);
            sb_printf(b, ",\"up\":%s,\"state\":", node_serves(&s, k) ? "true" : "false");
            sb_json_str(b, node_state(&s, k, buf, sizeof buf));
            sb_printf(b, ",\"last_error\":");
            sb_json_str(b, s.nodes[k].last_error_text);
            sb_printf(b, "}");
        }
        sb_printf(b, "]}\n");
        return h.ready;
    }
    sb_printf(b, "%s: %s mode, %u of %u node%s up, %u needed%s%s\n",
              h.ready ? "ready" : "not ready", h.mode, h.up,
              mode_is(&s, "sentinel") && s.nnodes ? 1u : (unsigned)s.nnodes,
              s.nnodes == 1 ? "" : "s", h.needed, h.ready ? "" : "; ", h.reason);
    for (size_t k = 0; form == HEALTH_VERBOSE && k < s.nnodes; k++) {
        char addr[sizeof s.nodes[k].addr], err[sizeof s.nodes[k].last_error_text], buf[48];
        text_printable(addr, sizeof addr, s.nodes[k].addr);
        text_printable(err, sizeof err, s.nodes[k].last_error_text);
        const char *state = node_state(&s, k, buf, sizeof buf);
        bool show_err = err[0] && strcmp(state, "up") != 0;
        sb_printf(b, "node %s: %s%s%s\n", addr, state, show_err ? ": " : "", show_err ? err : "");
    }
    return h.ready;
}

/* ---- per-name gauges ---- */

struct name_count {
    char *name;
    uint32_t waiters, leases;
};

struct name_pick {
    const char *pattern;
    size_t max, n;
    struct name_count *v;
    bool oom;
};

static bool name_pick(void *arg, const char *name, uint32_t waiters, uint32_t leases)
{
    struct name_pick *p = arg;
    if (fnmatch(p->pattern, name, 0) != 0)
        return true;
    char *copy = strdup(name);
    if (!copy) {
        p->oom = true;
        return false;
    }
    p->v[p->n++] = (struct name_count){copy, waiters, leases};
    return p->n < p->max;
}

void render_per_name(const struct status_source *src, struct sbuf *b)
{
    const struct config *cfg = src->cfg;
    if (!cfg->metrics_names[0] || !src->walk_names)
        return;
    struct name_pick p = {.pattern = cfg->metrics_names, .max = cfg->metrics_names_max};
    p.v = p.max ? calloc(p.max, sizeof *p.v) : NULL;
    if (!p.v) {
        b->oom = true;
        return;
    }
    src->walk_names(src->arg, name_pick, &p);
    if (p.oom)
        b->oom = true;
    static const struct {
        const char *name, *help;
        size_t offset;
    } fam[] = {
        {"dlock_name_waiters",
         "Acquires queued in the agent for the name (names of metrics_names).",
         offsetof(struct name_count, waiters)},
        {"dlock_name_leases", "Leases held through the agent on the name (names of metrics_names).",
         offsetof(struct name_count, leases)},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        metric(b, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < p.n; i++) {
            sb_printf(b, "%s{name=\"", fam[f].name);
            sb_label(b, p.v[i].name);
            sb_printf(b, "\"} %u\n", *(const uint32_t *)((const char *)&p.v[i] + fam[f].offset));
        }
    }
    for (size_t i = 0; i < p.n; i++)
        free(p.v[i].name);
    free(p.v);
}

/* ---- metrics ---- */

static void process_metrics(const struct process_stats *p, struct sbuf *b)
{
    if (!p || !p->ok)
        return;
    metric(b, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.");
    sb_printf(b, "process_cpu_seconds_total %.17g\n", p->cpu_seconds);
    gauge(b, "process_resident_memory_bytes", "Resident memory size in bytes.", (double)p->rss);
    gauge(b, "process_virtual_memory_bytes", "Virtual memory size in bytes.", (double)p->vsize);
    gauge(b, "process_open_fds", "Number of open file descriptors.", (double)p->open_fds);
    gauge(b, "process_max_fds", "Maximum number of open file descriptors.", (double)p->max_fds);
    gauge(b, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
          p->start_time);
}

void render_metrics(const struct status_source *src, const struct process_stats *proc, bool names,
                    struct sbuf *b)
{
    struct status_snapshot s;
    src->snapshot(src->arg, &s);
    for (size_t i = 0; i < NCOUNTERS; i++) {
        char name[64];
        snprintf(name, sizeof name, "dlock_%s_total", counters[i].name);
        metric(b, name, "counter", counters[i].help);
        sb_printf(b, "%s %llu\n", name, counter_value(&s, i));
    }
    metric(b, "dlock_acquires_total", "counter", "Acquire requests answered, by outcome.");
    for (int o = 0; o < ACQ_OUTCOMES; o++)
        sb_printf(b, "dlock_acquires_total{outcome=\"%s\"} %llu\n", acq_outcome_name[o],
                  (unsigned long long)s.stats.acquires[o]);
    gauge(b, "dlock_leases", "Leases held now.", (double)s.leases);
    metric(b, "dlock_leases_by_kind", "gauge", "Leases held now, by kind of lock.");
    for (int kind = LOCK_EXCLUSIVE; kind <= LOCK_SEMAPHORE; kind++) {
        struct status_lease l = {.kind = (uint8_t)kind};
        struct fval v = {0};
        l_kind(&l, 0, &v);
        sb_printf(b, "dlock_leases_by_kind{kind=\"%s\"} %llu\n", v.s,
                  (unsigned long long)s.leases_by_kind[kind]);
    }
    gauge(b, "dlock_waiters", "Acquires queued in the agent now, waiting for a name.",
          (double)s.stats.waiters);
    gauge(b, "dlock_connections", "Client connections now.", (double)s.connections);
    gauge(b, "dlock_uptime_seconds", "Time since the agent started.",
          (double)(s.now - s.started) / 1e9);
    histogram(b, "dlock_acquire_seconds", "From sending an acquire to Redis to its grant.",
              &s.stats.acquire);
    histogram(b, "dlock_queue_wait_seconds",
              "From an acquire request's arrival to its answer, granted or not: what the caller "
              "waited.",
              &s.stats.queue_wait);
    histogram(b, "dlock_hold_seconds", "From a lease's grant to its release or loss.",
              &s.stats.hold);
    histogram(b, "dlock_renew_seconds", "Round trip of lease renewals.", &s.stats.renew);
    /* One gauge per node and field that has one, labelled with the address. */
    for (size_t i = 0; i < NNODE_FIELDS; i++) {
        const struct node_field *f = &node_fields[i];
        if (!f->metric)
            continue;
        metric(b, f->metric, "gauge", f->help);
        for (size_t k = 0; k < s.nnodes; k++) {
            sb_printf(b, "%s{node=\"", f->metric);
            sb_label(b, s.nodes[k].addr);
            sb_printf(b, "\"} %.17g\n", f->value(&s.nodes[k], s.now));
        }
    }
    metric(b, "dlock_node_command_seconds", "histogram",
           "Round trip of the Redis commands answered by the node (send -> reply).");
    for (size_t k = 0; k < s.nnodes; k++) {
        struct sbuf label = {0};
        sb_printf(&label, "node=\"");
        sb_label(&label, s.nodes[k].addr);
        sb_printf(&label, "\"");
        if (label.oom)
            b->oom = true;
        else
            histo_series(b, "dlock_node_command_seconds", label.p, &s.nodes[k].command);
        free(label.p);
    }
    struct health h;
    health_of(&s, &h);
    metric(b, "dlock_backend_up", "gauge", "1 when the agent can take locks now (its Redis mode).");
    sb_printf(b, "dlock_backend_up{mode=\"%s\"} %d\n", h.mode, h.ready);
    gauge(b, "dlock_quorum_nodes_up", "Redis nodes up that count toward the agent's locks.", h.up);
    gauge(b, "dlock_quorum_nodes_needed", "Redis nodes that must be up for the agent's locks.",
          h.needed);
    metric(b, "dlock_build_info", "gauge",
           "Always 1: the agent's version, and whether its Redis links use TLS.");
    sb_printf(b, "dlock_build_info{version=\"%s\",tls=\"%s\"} 1\n", DLOCK_VERSION,
              src->cfg->tls ? "true" : "false");
    process_metrics(proc, b);
    if (names)
        render_per_name(src, b);
}

/* ---- holder ---- */

/* Who Redis says holds a name: the key's value and, when the holder record
 * beside it starts with that token, dlock's record of the holder. Values
 * come from anyone who can write to Redis. */
struct holder_rec {
    bool ours; /* a dlock record of this token */
    char host[64], comm[32];
    int pid;
    unsigned uid;
};

/* Reads "TOKEN HOST PID UID COMMAND" when it starts with token. */
static void record_of(const char *record, const char *token, struct holder_rec *r)
{
    memset(r, 0, sizeof *r);
    size_t tlen = strlen(token);
    r->ours = tlen && strncmp(record, token, tlen) == 0 && record[tlen] == ' ' &&
              sscanf(record + tlen + 1, "%63s %d %u %31s", r->host, &r->pid, &r->uid, r->comm) == 4;
}

static void holder_rec(const struct backend_holder *h, struct holder_rec *r)
{
    record_of(h->record, h->kind[0] && h->shown ? h->permit[0].token : h->value, r);
}

/* A key in Redisson's format: its holders' fields (Redisson's "ID:THREAD",
 * or dlock's token) and hold counts. */
static bool redisson_kind(const struct backend_holder *h)
{
    return strncmp(h->kind, "redisson", 8) == 0;
}

/* A shared or semaphore key's permits, as JSON members. */
static void permits_json(struct sbuf *b, const struct backend_holder *h)
{
    sb_printf(b, ",\"kind\":");
    sb_json_str(b, h->kind[0] ? h->kind : h->value[0] ? "exclusive" : "");
    sb_printf(b, ",\"permits\":%u,\"holders\":[", h->kind[0] ? h->permits : h->value[0] != '\0');
    for (unsigned i = 0; h->kind[0] && i < h->shown; i++) {
        if (redisson_kind(h)) {
            sb_printf(b, "%s{\"field\":", i ? "," : "");
            sb_json_str(b, h->permit[i].record);
            sb_printf(b, ",\"dlock\":%s,\"holds\":%u,\"pttl_ms\":%lld}",
                      h->permit[i].token[0] ? "true" : "false", h->permit[i].holds,
                      h->permit[i].pttl_ms);
            continue;
        }
        struct holder_rec r;
        record_of(h->permit[i].record, h->permit[i].token, &r);
        sb_printf(b, "%s{\"host\":", i ? "," : "");
        sb_json_str(b, r.host);
        sb_printf(b, ",\"pid\":%d,\"uid\":%u,\"comm\":", r.pid, r.uid);
        sb_json_str(b, r.comm);
        sb_printf(b, ",\"pttl_ms\":%lld}", h->permit[i].pttl_ms);
    }
    sb_printf(b, "]");
}

static void holder_json(struct sbuf *b, const char *name, const struct backend_holder *h)
{
    struct holder_rec r;
    holder_rec(h, &r);
    bool held = h->value[0] != '\0', ours = r.ours;
    /* A key in Redisson's format: a dlock lease holds it when one of its
     * holder fields is dlock's. */
    for (unsigned i = 0; redisson_kind(h) && i < h->shown; i++)
        ours = ours || h->permit[i].token[0];
    sb_printf(b, "{\"name\":");
    sb_json_str(b, name);
    sb_printf(b, ",\"held\":%s,\"dlock\":%s,\"value\":", held ? "true" : "false",
              ours ? "true" : "false");
    sb_json_str(b, h->value);
    sb_printf(b, ",\"host\":");
    sb_json_str(b, r.host);
    sb_printf(b, ",\"pid\":%d,\"uid\":%u,\"comm\":", r.pid, r.uid);
    sb_json_str(b, r.comm);
    sb_printf(b, ",\"pttl_ms\":%lld,\"nodes_holding\":%u,\"nodes\":%u", held ? h->pttl : 0,
              h->nodes_holding, h->nodes);
    permits_json(b, h);
    sb_printf(b, "}\n");
}

/* The kind is "redisson" (RLock), "redisson:read" or "redisson:write"
 * (RReadWriteLock), or "redisson:semaphore", whose permit ids do not tell
 * which side took them. */
static void redisson_text(struct sbuf *b, const char *name, const struct backend_holder *h)
{
    const char *mode = h->kind[8] == ':' ? h->kind + 9 : "";
    bool sem = strcmp(mode, "semaphore") == 0;
    sb_printf(b, "%s: held in Redisson's format%s%s by %u holder%s", name, mode[0] ? ", " : "",
              strcmp(mode, "read") == 0 ? "read lock"
              : sem                     ? "semaphore"
              : mode[0]                 ? "write lock"
                                        : "",
              h->permits, h->permits == 1 ? "" : "s");
    for (unsigned i = 0; i < h->shown; i++) {
        const struct backend_permit *p = &h->permit[i];
        char id[BACKEND_RECORD_MAX];
        text_printable(id, sizeof id, p->token[0] ? p->token : p->record);
        if (sem) /* a permit's own expiry; which side took it, Redis cannot say */
            sb_printf(b, "%s permit %s, %lld ms left", i ? ";" : ":", id, p->pttl_ms);
        else
            sb_printf(b, "%s %s %s, %u hold%s", i ? ";" : ":",
                      p->token[0] ? "dlock lease" : "Redisson", id, p->holds,
                      p->holds == 1 ? "" : "s");
    }
    if (h->shown < h->permits)
        sb_printf(b, "; and %u more", h->permits - h->shown);
}

/* A shared or semaphore key in text: its kind and each holder shown. */
static void permits_text(struct sbuf *b, const char *name, const struct backend_holder *h)
{
    char kind[BACKEND_KIND_MAX];
    if (redisson_kind(h)) {
        redisson_text(b, name, h);
        return;
    }
    text_printable(kind, sizeof kind, h->kind);
    sb_printf(b, "%s: held as %s by %u holder%s", name, kind, h->permits,
              h->permits == 1 ? "" : "s");
    for (unsigned i = 0; i < h->shown; i++) {
        struct holder_rec r;
        record_of(h->permit[i].record, h->permit[i].token, &r);
        char host[sizeof r.host], comm[sizeof r.comm];
        text_printable(host, sizeof host, r.host);
        text_printable(comm, sizeof comm, r.comm);
        sb_printf(b, "%s pid %d (%s), uid %u, on host %s", i ? ";" : ":", r.pid, comm, r.uid, host);
    }
    if (h->shown < h->permits)
        sb_printf(b, "; and %u more", h->permits - h->shown);
}

/* One line, without control characters, which a terminal would obey. */
static void holder_text(struct sbuf *b, const char *name, const struct backend_holder *h)
{
    struct holder_rec r;
    holder_rec(h, &r);
    char value[BACKEND_RECORD_MAX], host[sizeof r.host], comm[sizeof r.comm];
    text_printable(value, sizeof value, h->value);
    text_printable(host, sizeof host, r.host);
    text_printable(comm, sizeof comm, r.comm);
    if (!h->value[0]) {
        sb_printf(b, "%s: free\n", name);
        return;
    }
    if (h->kind[0])
        permits_text(b, name, h);
    else if (r.ours)
        sb_printf(b, "%s: held by pid %d (%s), uid %u, on host %s; token %s", name, r.pid, comm,
                  r.uid, host, value);
    else
        sb_printf(b, "%s: held by a client outside dlock (value '%s')", name, value);
    if (strcmp(h->kind, "redisson:semaphore") == 0)
        ; /* each permit said its own; the free count has no expiry */
    else if (h->pttl >= 0)
        sb_printf(b, "; %lld ms left", h->pttl);
    else
        sb_printf(b, "; no expiry");
    if (h->nodes > 1)
        sb_printf(b, "; on %u of %u nodes", h->nodes_holding, h->nodes);
    sb_printf(b, "\n");
}

void render_holder(const char *name, int err, const struct backend_holder *h, bool json,
                   struct sbuf *b)
{
    char shown[WIRE_MAX_NAME + 1]; /* the name in text */
    text_printable(shown, sizeof shown, name);
    if (err) {
        sb_printf(b, "error: cannot read %s from Redis: %s\n", shown, dlock_strerror(err));
    } else if (h->undetermined && json) {
        sb_printf(b, "{\"name\":");
        sb_json_str(b, name);
        sb_printf(b, ",\"undetermined\":true,\"nodes\":%u}\n", h->nodes);
    } else if (h->undetermined) {
        sb_printf(b, "%s: undetermined: no value is on a majority of the %u nodes\n", shown,
                  h->nodes);
    } else if (json) {
        holder_json(b, name, h);
    } else {
        holder_text(b, shown, h);
    }
}
