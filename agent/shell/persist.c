/* SPDX-License-Identifier: BSD-3-Clause */
/* persist.c -- the state directory, the journal, and the takeover of a
 * predecessor's connections and leases (docs/restarts.md). */
#include "persist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "formats.h"
#include "log.h"
#include "shm.h"
#include "unixsock.h"

#define JOURNAL_NAME "journal"

/* A lease of the predecessor's journal, its name kept apart. */
struct prev_lease {
    struct journal_lease rec; /* rec.name unused */
    char *name;
};

struct persist_prev {
    struct journal_conn *conns;
    size_t nconns, conns_cap;
    struct prev_lease *leases;
    size_t nleases, leases_cap;
};

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, ncap * size);
    if (!p)
        return -ENOMEM;
    *v = p;
    *cap = ncap;
    return 0;
}

static int prev_conn(void *arg, const struct journal_conn *c)
{
    struct persist_prev *pv = arg;
    if (grow((void **)&pv->conns, &pv->conns_cap, pv->nconns, sizeof *pv->conns) != 0)
        return -ENOMEM;
    pv->conns[pv->nconns++] = *c;
    return 0;
}

static int prev_lease(void *arg, const struct journal_lease *l)
{
    struct persist_prev *pv = arg;
    if (grow((void **)&pv->leases, &pv->leases_cap, pv->nleases, sizeof *pv->leases) != 0)
        return -ENOMEM;
    char *name = malloc((size_t)l->name_len + 1);
    if (!name)
        return -ENOMEM;
    memcpy(name, l->name, (size_t)l->name_len + 1);
    struct prev_lease *p = &pv->leases[pv->nleases++];
    memcpy(&p->rec, l, offsetof(struct journal_lease, name));
    p->name = name;
    return 0;
}

static void prev_free(struct persist_prev *pv)
{
    if (!pv)
        return;
    for (size_t i = 0; i < pv->nleases; i++)
        free(pv->leases[i].name);
    free(pv->leases);
    free(pv->conns);
    free(pv);
}

int persist_open(struct persist *p, const struct config *cfg, bool successor, char *err,
                 size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->dir.dirfd = p->dir.lockfd = -1;
    p->journal.fd = -1;
    if (!cfg->state_dir[0])
        return 0;
    /* A predecessor releases its leases within shutdown_timeout_ms when it
     * stops; leaving takes no time. */
    if (statedir_open(&p->dir, cfg->state_dir, successor, cfg->shutdown_timeout_ms + 5000, err,
                      errlen) != 0)
        return -1;
    p->on = true;
    p->prev = calloc(1, sizeof *p->prev);
    if (!p->prev) {
        snprintf(err, errlen, "out of memory");
        persist_close(p);
        return -1;
    }
    struct journal_visitor v = {.conn = prev_conn, .lease = prev_lease};
    struct journal_replay_info info = {0};
    int rc = journal_replay(p->dir.dirfd, JOURNAL_NAME, &v, p->prev, &info);
    if (rc != 0 && rc != -ENOENT) {
        snprintf(err, errlen, "cannot read %s/" JOURNAL_NAME ": %s", cfg->state_dir, strerror(-rc));
        persist_close(p);
        return -1;
    }
    if (info.stop != JOURNAL_READ_END && rc == 0)
        log_warn("%s/" JOURNAL_NAME ": a %s record at byte %llu; what comes before it stands",
                 cfg->state_dir, info.stop == JOURNAL_READ_TORN ? "torn" : "damaged",
                 (unsigned long long)info.good_bytes);
    rc = journal_open(&p->journal, p->dir.dirfd, JOURNAL_NAME, NULL);
    if (rc < 0) {
        snprintf(err, errlen, "cannot open %s/" JOURNAL_NAME ": %s", cfg->state_dir, strerror(-rc));
        persist_close(p);
        return -1;
    }
    p->journal_ok = true;
    statedir_unmark(&p->dir, STATEDIR_SUCCESSOR);
    p->store_changed = statedir_marked(&p->dir, STATEDIR_STORE_CHANGED);
    return 0;
}

/* A journal call's outcome: the first failure is logged, and records stop
 * when the journal broke (leases then end with a restart). */
static void journaled(struct persist *p, int rc, const char *what)
{
    if (rc == 0 || rc == -ENOENT)
        return;
    if (rc == JOURNAL_COMPACT_FAILED) {
        log_warn("state journal: compaction failed: %s", strerror(-journal_error(&p->journal)));
        return;
    }
    if (rc == -ENOMEM || rc == -EINVAL) {
        log_warn("state journal: %s not recorded: %s; it will not outlive a restart", what,
                 strerror(-rc));
        return;
    }
    p->journal_ok = false;
    log_error("state journal: %s; from now on leases end with the agent: a restart or crash "
              "leaves their keys to expire by TTL",
              strerror(-rc));
}

/* The id a connection has in the journal: a resumable one's own, else its
 * serial with the top bit set (resumable ids never have it). */
static uint64_t journal_id(const struct conn *c)
{
    return c->conn_id ? c->conn_id : (UINT64_C(1) << 63) | c->serial;
}

void persist_conn(struct persist *p, const struct conn *c)
{
    if (!p->journal_ok)
        return;
    struct journal_conn jc = {.conn_id = journal_id(c),
                              .pid = (uint32_t)c->cc.pid,
                              .uid = c->cc.uid,
                              .gid = c->gid,
                              .pid_start = c->pid_start,
                              .nslots = c->page.nslots,
                              .flags = c->conn_id ? JOURNAL_CONN_RESUMABLE : 0};
    memcpy(jc.secret, c->secret, sizeof jc.secret);
    journaled(p, journal_put_conn(&p->journal, &jc), "a connection");
}

void persist_conn_end(struct persist *p, const struct conn *c)
{
    if (p->journal_ok && c->hello)
        journaled(p, journal_end_conn(&p->journal, journal_id(c)), "a connection's end");
}

void persist_lease(struct persist *p, const struct conn *c, const struct lease *le, bool live)
{
    if (!p->journal_ok)
        return;
    if (!live) {
        journaled(p, journal_end_lease(&p->journal, journal_id(c), le->id), "a lease's end");
        return;
    }
    struct journal_lease jl = {
        .conn_id = journal_id(c),
        .lease_id = le->id,
        .slot = le->slot,
        .kind = (uint8_t)le->ask.kind,
        .format = (uint8_t)formats_of(&p->cfg->formats, le->lock->name, le->lock->name_len),
        .permits = le->ask.kind == LOCK_SEMAPHORE ? le->ask.permits : 0,
        .ttl_ms = le->ttl_ms,
        .holds = le->holds,
        .holder_id = le->holder_id,
        .fence = le->fence,
        .hold_until_ns = le->hold_until,
        .progress_ns = le->progress_ns,
        .name_len = le->lock->name_len};
    token_hex(le->token, jl.token);
    memcpy(jl.name, le->lock->name, (size_t)le->lock->name_len + 1);
    journaled(p, journal_put_lease(&p->journal, &jl), "a lease");
}

/* ---- the takeover ---- */

static int by_conn_then_slot(const void *a, const void *b)
{
    const struct prev_lease *x = a, *y = b;
    if (x->rec.conn_id != y->rec.conn_id)
        return x->rec.conn_id < y->rec.conn_id ? -1 : 1;
    return x->rec.slot < y->rec.slot ? -1 : x->rec.slot > y->rec.slot;
}

static struct admit_ask ask_of(const struct journal_lease *l)
{
    return (struct admit_ask){.kind = (enum lock_kind)l->kind, .permits = l->permits};
}

/* The key of a lease not taken over goes (once: shared holders of one
 * grant have one key), and so does its record. */
static void let_go(struct persist *p, struct core *k, const struct prev_lease *pl, const char *why,
                   uint64_t now)
{
    const struct journal_lease *l = &pl->rec;
    struct admit_ask ask = ask_of(l);
    log_info("lease on %s (fence %llu) not taken over: %s; releasing its key", pl->name,
             (unsigned long long)l->fence, why);
    if (formats_of(&p->cfg->formats, pl->name, l->name_len) != (enum key_format)l->format)
        log_warn("%s is in another key format now ([formats] changed): its key expires by TTL",
                 pl->name);
    else
        core_release_key(k, pl->name, l->name_len, l->token, &ask, l->ttl_ms, now);
    if (p->journal_ok)
        journaled(p, journal_end_lease(&p->journal, l->conn_id, l->lease_id), "a lease's end");
}

/* Takes over the leases [from, to) of connection c (sorted by slot). */
static void adopt_leases(struct persist *p, struct core *k, struct conn *c,
                         const struct prev_lease *from, const struct prev_lease *to, uint64_t now)
{
    /* A failover may have happened unseen; or the leases were taken on
     * another Redis than this agent's (a reload moved it): either way a
     * lease is not shown valid until its key is confirmed. */
    bool doubt = p->store_changed || p->cfg->mode == REDIS_MODE_SENTINEL ||
                 p->cfg->mode == REDIS_MODE_CLUSTER;
    const struct shm_slot *slots = shm_slots(c->page.page);
    for (const struct prev_lease *pl = from; pl < to; pl++) {
        const struct journal_lease *l = &pl->rec;
        struct shm_slot s = {0};
        const char *why = NULL;
        if (l->slot >= c->page.nslots || shm_slot_read(&slots[l->slot], &s) != 0)
            why = "its page slot is unreadable";
        else if (s.lease_id != l->lease_id ||
                 (s.state != DLOCK_STATE_HELD && s.state != DLOCK_STATE_JEOPARDY))
            why = "its page slot shows another lease";
        else if (s.fence != l->fence)
            why = "its page slot shows another fence";
        else if (formats_of(&p->cfg->formats, pl->name, l->name_len) != (enum key_format)l->format)
            why = "its name is in another key format now";
        else if (!lease_page_take(&c->page, l->slot))
            why = "its page slot is taken twice";
        if (!why) {
            struct core_adopted a = {.lease_id = l->lease_id,
                                     .slot = l->slot,
                                     .name = pl->name,
                                     .name_len = l->name_len,
                                     .token = l->token,
                                     .ask = ask_of(l),
                                     .holder_id = l->holder_id,
                                     .holds = l->holds,
                                     .ttl_ms = l->ttl_ms,
                                     .fence = l->fence,
                                     /* Moved to another Redis, the page shows
                                      * the lease in doubt since the move: it
                                      * has a TTL's time to be confirmed. */
                                     .deadline = p->store_changed
                                                     ? now + (uint64_t)l->ttl_ms * NS_PER_MS
                                                     : (uint64_t)s.deadline_ns,
                                     .hold_until = l->hold_until_ns,
                                     .progress_ns = l->progress_ns,
                                     .doubt = doubt};
            int rc = core_adopt(k, &c->cc, &a, now);
            if (rc == 0)
                continue;
            lease_page_free(&c->page, l->slot);
            why = rc == DLOCK_ELOST       ? "it expired meanwhile"
                  : rc == DLOCK_ENOTFOUND ? "its holder released it meanwhile"
                                          : dlock_strerror(rc);
        }
        let_go(p, k, pl, why, now);
    }
    /* Slots past the last one taken may still show what the predecessor
     * wrote there: nothing valid is left in them. */
    for (uint32_t i = c->page.next; i < c->page.nslots; i++)
        lease_page_write(&c->page, i, 0, 0, 0, 0);
}

/* Page files of no connection taken over: left by a connection that ended
 * while no agent ran, or by a crash between a file's creation and its
 * record. */
struct sweep {
    struct persist *p;
    struct server *s;
};

static void sweep_one(void *arg, const char *name)
{
    struct sweep *w = arg;
    char *end;
    unsigned long long id = strtoull(name, &end, 16);
    if (end != name + 16 || (strcmp(end, ".page") != 0 && strcmp(end, ".touch") != 0))
        return;
    struct conn *c;
    LIST_FOREACH(c, &w->s->conns, link)
    if (c->conn_id == id)
        return;
    unlinkat(w->p->dir.dirfd, name, 0);
}

void persist_takeover(struct persist *p, struct core *k, struct server *s, uint64_t now)
{
    if (!p->on)
        return;
    server_keep_state(s, p->dir.dirfd);
    struct persist_prev *pv = p->prev;
    p->prev = NULL;
    if (pv->nleases)
        qsort(pv->leases, pv->nleases, sizeof *pv->leases, by_conn_then_slot);
    size_t taken = 0, conns = 0, j = 0;
    for (size_t i = 0; i < pv->nconns; i++) {
        const struct journal_conn *jc = &pv->conns[i];
        /* Its leases: sorted, as the connections are not. */
        const struct prev_lease *from = pv->leases, *to = pv->leases + pv->nleases;
        while (from < to && from->rec.conn_id < jc->conn_id)
            from++;
        const struct prev_lease *end = from;
        while (end < to && end->rec.conn_id == jc->conn_id)
            end++;
        struct conn *c = NULL;
        const char *why = "its client cannot resume a connection (protocol version 1)";
        bool gone = !jc->pid_start || proc_start_time((int)jc->pid) != jc->pid_start;
        if (jc->flags & JOURNAL_CONN_RESUMABLE) {
            struct server_detached_conn d = {.conn_id = jc->conn_id,
                                             .secret = jc->secret,
                                             .pid = (pid_t)jc->pid,
                                             .uid = jc->uid,
                                             .gid = jc->gid,
                                             .pid_start = jc->pid_start,
                                             .nslots = jc->nslots};
            c = server_detached(s, &d);
            gone = !c && errno == ESRCH;
            why = c ? NULL : gone ? "its process is gone" : strerror(errno);
        }
        if (c) {
            uint32_t before = c->cc.nleases;
            adopt_leases(p, k, c, from, end, now);
            taken += c->cc.nleases - before;
            conns++;
            if (!c->cc.nleases) {
                /* Nothing to come back for. */
                server_drop(c);
            }
        } else if (gone) {
            if (end > from)
                log_info("client pid %u: %s", jc->pid, why);
            for (const struct prev_lease *pl = from; pl < end; pl++)
                let_go(p, k, pl, why, now);
            if (p->journal_ok)
                journaled(p, journal_end_conn(&p->journal, jc->conn_id), "a connection's end");
        } else {
            /* Its process may live on, with the lease valid on its page
             * (which this agent cannot write) until its deadline: the keys
             * stay until their TTL, which outlasts it. */
            if (end > from)
                log_warn("client pid %u holds %zu lease(s) this agent cannot take over (%s): "
                         "their keys expire by their TTL",
                         jc->pid, (size_t)(end - from), why);
            if (p->journal_ok)
                journaled(p, journal_end_conn(&p->journal, jc->conn_id), "a connection's end");
        }
        j += (size_t)(end - from);
    }
    if (pv->nconns)
        log_info("took over %zu lease(s) of %zu connection(s) from the previous agent (%zu "
                 "recorded)",
                 taken, conns, j);
    prev_free(pv);
    statedir_unmark(&p->dir, STATEDIR_STORE_CHANGED);
    statedir_each(&p->dir, sweep_one, &(struct sweep){p, s});
}

void persist_remove(struct persist *p)
{
    if (!p->on)
        return;
    journal_close(&p->journal);
    p->journal_ok = false;
    statedir_remove(&p->dir);
    p->on = false;
}

void persist_close(struct persist *p)
{
    prev_free(p->prev);
    p->prev = NULL;
    if (p->journal.fd >= 0)
        journal_close(&p->journal);
    p->journal_ok = false;
    statedir_close(&p->dir);
    p->on = false;
}
