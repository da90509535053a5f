/* SPDX-License-Identifier: BSD-3-Clause */
/* backend_cluster.c -- Redis Cluster (docs/cluster.md): the slot map read
 * with CLUSTER SLOTS through a control link to any known node, one
 * single-node backend (backend_redis.c: a pipelined command link and a
 * sharded notice link) per master, every script routed by its lock key's
 * slot (all of a lock's keys share it), MOVED and ASK followed, TRYAGAIN and
 * CLUSTERDOWN retried for up to command_timeout_ms, the map read again on
 * redirects, on errors and every topology_refresh_ms, and a master failover
 * (a replica of the old master now serves its slots) reported to the core
 * as doubt over the names of those slots. */
#include "backend_cluster.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "backend_redis.h"
#include "dlock.h"
#include "keys.h"
#include "log.h"
#include "notice_link.h"
#include "redis_link.h"
#include "replies.h"
#include "util.h"
#include "wire.h"

#define MAX_REDIRECTS 5 /* MOVED and ASK answers followed for one command */
#define MAX_REPLICAS  8 /* replicas remembered per master, to tell a failover */
#define RETRY_MIN_NS  (10 * NS_PER_MS)
#define RETRY_MAX_NS  (200 * NS_PER_MS)
#define SOON_NS       (100 * NS_PER_MS) /* the least time between two map reads */
#define NO_NODE       UINT16_MAX

/* A node of the cluster that served slots: its single-node backend is made
 * when it is first seen as a master and kept (a demoted master answers
 * MOVED, a dead one fails its commands). */
struct cnode {
    struct cl *cl;
    struct redis_addr addr; /* stable: the node backend keeps a pointer */
    char name[280];         /* "host:port" */
    char label[300];        /* "redis host:port", for logs */
    struct backend *b;
    /* Raised when the node lost its slots to a replica: answers to
     * commands sent before then are taken for errors. */
    unsigned gen;
    unsigned nreplicas;
    char replica[MAX_REPLICAS][280]; /* "host:port" of its replicas, last map */
};

/* A name the core asked to watch while the map named no master for its
 * slot, or a stale one: the state of a redirect under way (as a command
 * waiting for its retry), reported unwatched once the map names the master,
 * so that the core asks again. */
struct waiting_watch {
    struct waiting_watch *next;
    uint16_t len;
    char name[];
};

/* A command of the core on its way through the cluster. */
struct cop {
    TAILQ_ENTRY(cop) q;
    struct cl *cl;
    bool lookup;            /* a lookup or a forced release (req.op): answered to lookup_cb */
    struct backend_req req; /* pointers into text */
    backend_cb cb;
    backend_lookup_cb lookup_cb;
    void *arg;
    unsigned slot;
    uint16_t node; /* where it was sent */
    unsigned gen;  /* that node's gen when sent */
    unsigned redirects;
    uint64_t give_up; /* TRYAGAIN / CLUSTERDOWN retries end then */
    uint64_t backoff;
    ev_timer retry;
    char text[]; /* name, token, holder, each NUL-terminated */
};

struct cl {
    struct backend base;
    struct ev_loop *loop;
    const struct config *cfg;
    struct backend_events ev;
    size_t prefix_len;
    struct cnode **node;
    size_t nnodes, cap;
    uint16_t owner[KEY_SLOTS]; /* index into node, NO_NODE unknown */
    bool have_map;
    bool closing;
    /* The control link, to one candidate address at a time. */
    struct redis_link ctl;
    struct redis_link_cmd ctl_cmd;
    bool ctl_busy; /* CLUSTER SLOTS in flight */
    struct redis_addr ctl_addr;
    unsigned ctl_next; /* the next candidate */
    char ctl_label[64];
    ev_timer refresh; /* periodic, and soon after a redirect or error */
    uint64_t last_read;
    TAILQ_HEAD(, cop) ops;
    /* Slots whose master by the map let a name's subscription go: the map
     * is stale there, and no subscription goes until it is read again. */
    uint8_t refused[KEY_SLOTS / 8];
    struct waiting_watch *waiting;
    size_t nwaiting;
};

static int cop_send(struct cop *op);
static void refresh_soon(struct cl *cl);

/* ---- nodes ---- */

static uint16_t node_find(const struct cl *cl, const char *name)
{
    for (size_t i = 0; i < cl->nnodes; i++)
        if (strcmp(cl->node[i]->name, name) == 0)
            return (uint16_t)i;
    return NO_NODE;
}

static void on_node_notice(void *arg, const char *name, size_t len,
                           const struct backend_grant *grant)
{
    struct cnode *n = arg;
    n->cl->ev.on_notice(n->cl->ev.arg, name, len, grant);
}

static void on_node_subscribed(void *arg)
{
    struct cnode *n = arg;
    n->cl->ev.on_subscribed(n->cl->ev.arg);
}

static void on_node_ready(void *arg)
{
    struct cnode *n = arg;
    n->cl->ev.on_ready(n->cl->ev.arg);
}

static void on_node_unwatched(void *arg, const char *name, size_t len);

/* The node that serves name (host:port), made when first seen. */
static uint16_t node_get(struct cl *cl, const char *name)
{
    uint16_t i = node_find(cl, name);
    if (i != NO_NODE)
        return i;
    if (cl->nnodes >= NO_NODE)
        return NO_NODE;
    if (cl->nnodes == cl->cap) {
        size_t cap = cl->cap ? cl->cap * 2 : 8;
        struct cnode **v = realloc(cl->node, cap * sizeof *v);
        if (!v)
            return NO_NODE;
        cl->node = v;
        cl->cap = cap;
    }
    struct cnode *n = calloc(1, sizeof *n);
    if (!n || config_parse_addr(name, &n->addr) != 0) {
        free(n);
        return NO_NODE;
    }
    /* The map names it host:port; with TLS every link uses it, and the logs
     * and the status say so (rediss://). */
    n->addr.tls = cl->cfg->tls;
    n->cl = cl;
    snprintf(n->name, sizeof n->name, "%s", name);
    snprintf(n->label, sizeof n->label, "redis %s", name);
    struct backend_events ev = {.arg = n,
                                .on_notice = on_node_notice,
                                .on_subscribed = on_node_subscribed,
                                .on_unwatched = on_node_unwatched,
                                .on_ready = on_node_ready};
    struct redis_node_opts opts = {.label = n->label, .sharded = true, .arg = n};
    n->b = backend_redis_new_opts(cl->loop, cl->cfg, &n->addr, &opts, &ev);
    if (!n->b) {
        free(n);
        return NO_NODE;
    }
    log_info("cluster: master %s", name);
    cl->node[cl->nnodes] = n;
    return (uint16_t)cl->nnodes++;
}

/* ---- release notices ---- */

/* The hash slot of lock name's key (names longer than the protocol allows
 * never reach a backend). */
static unsigned name_slot(const struct cl *cl, const char *name, size_t len)
{
    char key[CONFIG_PREFIX_MAX + WIRE_MAX_NAME];
    if (len > WIRE_MAX_NAME)
        len = WIRE_MAX_NAME;
    if (formats_of(&cl->cfg->formats, name, len) != KEY_FORMAT_DLOCK)
        return key_slot(name, len); /* the key is the bare name */
    memcpy(key, cl->cfg->prefix, cl->prefix_len);
    memcpy(key + cl->prefix_len, name, len);
    return key_slot(key, cl->prefix_len + len);
}

/* To the master of the name's slot as the map has it (no redirect is
 * followed: the entry lapses by itself when this misses). */
static void cl_leave(struct backend *be, const struct backend_req *req)
{
    struct cl *cl = (struct cl *)be;
    uint16_t to = cl->owner[name_slot(cl, req->name, req->len)];
    if (to != NO_NODE && cl->node[to]->b->ops->leave)
        cl->node[to]->b->ops->leave(cl->node[to]->b, req);
}

static bool slot_in(const uint8_t *bits, unsigned slot)
{
    return bits[slot / 8] & (1u << (slot % 8));
}

static void slot_set(uint8_t *bits, unsigned slot)
{
    bits[slot / 8] |= (uint8_t)(1u << (slot % 8));
}

/* Whether the map names a master for slot that has not let a subscription
 * of it go since the map was read. */
static bool slot_current(const struct cl *cl, unsigned slot)
{
    return cl->owner[slot] != NO_NODE && !slot_in(cl->refused, slot);
}

static struct waiting_watch **waiting_find(struct cl *cl, const char *name, size_t len)
{
    struct waiting_watch **p = &cl->waiting;
    while (*p && !((*p)->len == len && memcmp((*p)->name, name, len) == 0))
        p = &(*p)->next;
    return p;
}

/* The name waits for the map (on), or no longer. */
static int waiting_set(struct cl *cl, const char *name, size_t len, bool on)
{
    struct waiting_watch **p = waiting_find(cl, name, len), *w = *p;
    if (!on && w) {
        *p = w->next;
        free(w);
        cl->nwaiting--;
    }
    if (!on || w)
        return 0;
    if (cl->nwaiting >= NOTICE_NAMES_MAX || !(w = malloc(sizeof *w + len)))
        return DLOCK_ENOMEM;
    w->next = NULL;
    w->len = (uint16_t)len;
    memcpy(w->name, name, len);
    *p = w;
    cl->nwaiting++;
    return 0;
}

/* After the map changed: the names that waited for a slot the map now
 * names a master of are reported unwatched, and the core asks again. */
static void waiting_flush(struct cl *cl)
{
    struct waiting_watch *w = cl->waiting, *next;
    cl->waiting = NULL;
    cl->nwaiting = 0;
    for (; w; w = next) {
        next = w->next;
        if (!slot_current(cl, name_slot(cl, w->name, w->len))) {
            w->next = cl->waiting; /* waits on */
            cl->waiting = w;
            cl->nwaiting++;
            continue;
        }
        /* The hook may ask for it: by then it no longer waits. */
        if (cl->ev.on_unwatched)
            cl->ev.on_unwatched(cl->ev.arg, w->name, w->len);
        free(w);
    }
}

/* Asked of the master of the name's slot by the map, which keeps the
 * subscription on its connection: when the slot leaves it (a map read, a
 * MOVED answer), or it refuses or ends the subscription, the name is
 * reported unwatched and the core asks again, here. While the map names no
 * master for the slot, or a stale one, the name waits for the next map. */
static int cl_watch(struct backend *be, const char *name, size_t len, bool on)
{
    struct cl *cl = (struct cl *)be;
    unsigned slot = name_slot(cl, name, len);
    uint16_t to = cl->owner[slot];
    bool current = slot_current(cl, slot);
    int rc = waiting_set(cl, name, len, on && !current);
    if (on && !current) {
        refresh_soon(cl);
        return rc;
    }
    if (to == NO_NODE)
        return 0; /* the master that lost the slot let it go then */
    struct backend *b = cl->node[to]->b;
    return b->ops->watch(b, name, len, on);
}

/* A master let a name's subscription go (its slot moved away, or it
 * answered the subscription with a redirect): the core asks again, and the
 * map says where. When the map still names that master it is stale: the
 * slot waits for the next read (or for a command's MOVED answer). */
static void on_node_unwatched(void *arg, const char *name, size_t len)
{
    struct cnode *n = arg;
    struct cl *cl = n->cl;
    unsigned slot = name_slot(cl, name, len);
    uint16_t to = cl->owner[slot];
    if (to == NO_NODE || cl->node[to] == n) {
        slot_set(cl->refused, slot);
        refresh_soon(cl);
    }
    if (cl->ev.on_unwatched)
        cl->ev.on_unwatched(cl->ev.arg, name, len);
}

/* Whether node i's notice link is up. */
static bool node_subscribed(const struct cl *cl, size_t i)
{
    struct backend_node info;
    return cl->node[i]->b->ops->nodes(cl->node[i]->b, &info, 1) == 1 && info.subscribed;
}

/* The map changed from before: each master that lost slots ends the
 * subscriptions of their names and reports each, which the core asks for
 * again, of the new master. One whose notice link is down lost them with
 * it, which the core hears when the link is back: that may be never (a dead
 * master), so the core asks for every name now. */
static void unwatch_moved(struct cl *cl, const uint16_t *before)
{
    bool *lost = calloc(cl->nnodes, sizeof *lost), all = false;
    for (size_t s = 0; s < KEY_SLOTS; s++) {
        if (before[s] == cl->owner[s])
            continue;
        cl->refused[s / 8] &= (uint8_t) ~(1u << (s % 8));
        if (before[s] != NO_NODE && lost)
            lost[before[s]] = true;
        all |= before[s] != NO_NODE && !lost;
    }
    uint8_t bits[KEY_SLOTS / 8];
    for (size_t i = 0; lost && i < cl->nnodes; i++) {
        if (!lost[i])
            continue;
        if (!node_subscribed(cl, i)) {
            all = true;
            continue;
        }
        memset(bits, 0, sizeof bits);
        for (size_t s = 0; s < KEY_SLOTS; s++)
            if (before[s] == i && cl->owner[s] != i)
                slot_set(bits, (unsigned)s);
        backend_redis_unwatch_slots(cl->node[i]->b, bits);
    }
    free(lost);
    if (all)
        cl->ev.on_subscribed(cl->ev.arg);
}

/* ---- failover ---- */

struct doubt_ctx {
    const struct cl *cl;
    const uint8_t *slots; /* bitmap */
};

static bool doubt_affected(void *farg, const char *name, size_t len)
{
    const struct doubt_ctx *d = farg;
    unsigned s = name_slot(d->cl, name, len);
    return d->slots[s / 8] & (1u << (s % 8));
}

static bool is_replica_of(const struct cnode *master, const char *name)
{
    for (unsigned r = 0; r < master->nreplicas; r++)
        if (strcmp(master->replica[r], name) == 0)
            return true;
    return false;
}

/* Whether the agent's command link to node i is up. */
static bool node_up(const struct cl *cl, uint16_t i)
{
    struct backend_node info;
    return cl->node[i]->b->ops->nodes(cl->node[i]->b, &info, 1) == 1 && info.connected;
}

/* The master whose replica node i was by the previous map, or NO_NODE. */
static uint16_t promoted_from(const struct cl *cl, uint16_t i)
{
    for (size_t m = 0; m < cl->nnodes; m++)
        if (m != i && is_replica_of(cl->node[m], cl->node[i]->name))
            return (uint16_t)m;
    return NO_NODE;
}

/* A slot goes from node `from` to node `to` (indexes, NO_NODE unknown): the
 * master that failed over, or NO_NODE when none did. It failed over when a
 * replica of `from` took it over, or when `from` is out of the agent's
 * reach: a migration needs the old master up (MIGRATE), and CLUSTER SLOTS
 * leaves out replicas that have not synced yet, so the replica lists alone
 * may miss a promotion. And when `to` was a replica of another master: the
 * slot moved there since the agent's map said `from`, and that master then
 * failed over, perhaps losing the keys MIGRATE wrote to it. Taking a
 * migration for a failover costs a renewal; the reverse could cost a lock. */
static uint16_t failed_over(const struct cl *cl, uint16_t from, uint16_t to)
{
    if (from == NO_NODE || to == NO_NODE || from == to)
        return NO_NODE;
    if (is_replica_of(cl->node[from], cl->node[to]->name) || !node_up(cl, from))
        return from;
    return promoted_from(cl, to);
}

/* The masters in failed (a bitmap over node indexes) lost their slots to
 * replicas: their answers to commands sent before now no longer count, and
 * the names of the slots in `slots` are in doubt. The map already routes
 * them to the new masters, so the core's renewals go there. */
static void report_failover(struct cl *cl, const uint8_t *slots, const bool *failed)
{
    for (size_t i = 0; i < cl->nnodes; i++) {
        if (!failed[i])
            continue;
        cl->node[i]->gen++;
        log_warn("cluster: %s failed over to a replica: its leases are in doubt until renewed "
                 "on the new master",
                 cl->node[i]->name);
    }
    if (cl->ev.on_doubt) {
        struct doubt_ctx d = {.cl = cl, .slots = slots};
        cl->ev.on_doubt(cl->ev.arg, doubt_affected, &d);
    }
}

/* ---- the slot map ---- */

/* Reads a CLUSTER SLOTS reply into the map: -1 (map unchanged) when it is
 * malformed. */
static int load_map(struct cl *cl, const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements == 0)
        return -1;
    uint16_t *owner = malloc(sizeof cl->owner);
    uint16_t *master = calloc(rep->elements, sizeof *master); /* of each range */
    bool *failed = NULL;
    if (!owner || !master)
        goto bad;
    for (size_t s = 0; s < KEY_SLOTS; s++)
        owner[s] = NO_NODE;
    /* Every range checked, its master made; the replicas wait until the
     * whole reply is known to be good. */
    for (size_t r = 0; r < rep->elements; r++) {
        const char *self = cl->ctl_addr.host; /* the node that answered */
        long long lo, hi;
        char name[280];
        if (reply_slots_range(rep->element[r], self, &lo, &hi, name, sizeof name) != 0 ||
            (master[r] = node_get(cl, name)) == NO_NODE)
            goto bad;
        for (long long s = lo; s <= hi; s++)
            owner[s] = master[r];
    }
    /* Failovers, judged with the replica lists of the previous map. */
    failed = calloc(cl->nnodes, sizeof *failed);
    if (!failed)
        goto bad;
    uint8_t slots[KEY_SLOTS / 8] = {0};
    bool any_failover = false, changed = false;
    for (size_t s = 0; s < KEY_SLOTS; s++) {
        changed |= owner[s] != cl->owner[s];
        uint16_t gone = failed_over(cl, cl->owner[s], owner[s]);
        if (gone != NO_NODE) {
            slots[s / 8] |= (uint8_t)(1u << (s % 8));
            failed[gone] = true;
            any_failover = true;
        }
    }
    /* The new replica lists, of every master in the reply. */
    for (size_t r = 0; r < rep->elements; r++)
        cl->node[master[r]]->nreplicas = 0;
    for (size_t r = 0; r < rep->elements; r++) {
        const redisReply *range = rep->element[r];
        struct cnode *m = cl->node[master[r]];
        for (size_t e = 3; e < range->elements && m->nreplicas < MAX_REPLICAS; e++) {
            char rn[280];
            if (reply_slots_node(range->element[e], cl->ctl_addr.host, rn, sizeof rn) == 0 &&
                !is_replica_of(m, rn))
                snprintf(m->replica[m->nreplicas++], sizeof m->replica[0], "%s", rn);
        }
    }
    /* The new map in, the old one kept in owner for unwatch_moved(). */
    for (size_t s = 0; s < KEY_SLOTS; s++) {
        uint16_t before = cl->owner[s];
        cl->owner[s] = owner[s];
        owner[s] = before;
    }
    memset(cl->refused, 0, sizeof cl->refused);
    bool first = !cl->have_map;
    cl->have_map = true;
    if (first || changed) {
        size_t covered = 0;
        for (size_t s = 0; s < KEY_SLOTS; s++)
            covered += cl->owner[s] != NO_NODE;
        log_info("cluster: slot map read: %zu masters known, %zu of %d slots served", cl->nnodes,
                 covered, KEY_SLOTS);
    }
    if (any_failover)
        report_failover(cl, slots, failed);
    if (changed)
        unwatch_moved(cl, owner);
    waiting_flush(cl);
    if (first)
        cl->ev.on_ready(cl->ev.arg);
    free(owner);
    free(master);
    free(failed);
    return 0;
bad:
    free(owner);
    free(master);
    free(failed);
    log_warn("cluster: malformed CLUSTER SLOTS reply from %s", cl->ctl_label);
    return -1;
}

/* A slot changes hands on a MOVED answer: the map follows at once (a
 * replica that took over is a failover), and is read again soon. */
static void note_moved(struct cl *cl, unsigned slot, uint16_t to)
{
    uint16_t from = cl->owner[slot];
    uint16_t *before = malloc(sizeof cl->owner);
    if (before)
        memcpy(before, cl->owner, sizeof cl->owner);
    uint16_t gone = failed_over(cl, from, to);
    if (gone != NO_NODE) {
        /* Every slot of the master that failed over went to the replica,
         * and so did this one. */
        uint8_t slots[KEY_SLOTS / 8] = {0};
        bool *failed = calloc(cl->nnodes, sizeof *failed);
        for (size_t s = 0; s < KEY_SLOTS; s++) {
            if (cl->owner[s] == gone || s == slot) {
                cl->owner[s] = to;
                slots[s / 8] |= (uint8_t)(1u << (s % 8));
            }
        }
        if (failed) {
            failed[gone] = true;
            report_failover(cl, slots, failed);
            free(failed);
        } else {
            /* No memory to say which: every name is in doubt. */
            cl->node[gone]->gen++;
            if (cl->ev.on_doubt)
                cl->ev.on_doubt(cl->ev.arg, NULL, NULL);
        }
    } else {
        cl->owner[slot] = to;
    }
    if (before)
        unwatch_moved(cl, before);
    else if (from != to)
        cl->ev.on_subscribed(cl->ev.arg); /* no memory to say which: every name */
    free(before);
    waiting_flush(cl);
    refresh_soon(cl);
}

/* ---- the control link ---- */

/* The candidates for the control link: the seeds, then every node known. */
static void next_candidate(struct cl *cl)
{
    size_t total = cl->cfg->nnodes + cl->nnodes;
    unsigned i = cl->ctl_next++ % (unsigned)total;
    cl->ctl_addr = i < cl->cfg->nnodes ? cl->cfg->nodes[i] : cl->node[i - cl->cfg->nnodes]->addr;
    char a[300];
    snprintf(cl->ctl_label, sizeof cl->ctl_label, "cluster %s",
             config_addr_str(&cl->ctl_addr, a, sizeof a));
}

static void on_slots(redisAsyncContext *ac, void *r, void *priv)
{
    struct cl *cl = priv;
    const redisReply *rep = r;
    redis_link_answered(&cl->ctl, &cl->ctl_cmd, rep);
    cl->ctl_busy = false;
    if (!rep || cl->closing)
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        log_warn("%s: CLUSTER SLOTS refused: %s", cl->ctl_label, rep->str);
        redis_link_fail(&cl->ctl, "not a cluster node");
        return;
    }
    if (load_map(cl, rep) != 0)
        redis_link_fail(&cl->ctl, "malformed slot map");
}

static void read_map(struct cl *cl)
{
    if (cl->ctl_busy || !cl->ctl.connected)
        return;
    const char *argv[] = {"CLUSTER", "SLOTS"};
    const size_t len[] = {7, 5};
    if (redis_link_send(&cl->ctl, &cl->ctl_cmd, on_slots, cl, 2, argv, len) == 0) {
        cl->ctl_busy = true;
        cl->last_read = now_ns();
        redis_link_flush(&cl->ctl);
    }
}

static void on_refresh(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct cl *cl = w->data;
    read_map(cl);
    ev_timer_set(w, cl->cfg->topology_refresh_ms / 1000.0, 0.0);
    ev_timer_start(loop, w);
}

/* Reads the map again soon (at most every SOON_NS). */
static void refresh_soon(struct cl *cl)
{
    if (cl->closing)
        return;
    uint64_t now = now_ns(), at = cl->last_read + SOON_NS;
    ev_timer_stop(cl->loop, &cl->refresh);
    ev_timer_set(&cl->refresh, at > now ? (double)(at - now) / 1e9 : 0.0, 0.0);
    ev_timer_start(cl->loop, &cl->refresh);
}

static void ctl_setup(void *arg, struct redis_link *l)
{
}

static void ctl_ready(void *arg, struct redis_link *l)
{
    read_map(arg);
}

/* The control link failed: the next attempt goes to the next candidate. */
static void ctl_error(void *arg, int code, const char *text)
{
    next_candidate(arg);
}

/* ---- commands ---- */

static void cop_free(struct cop *op)
{
    struct cl *cl = op->cl;
    ev_timer_stop(cl->loop, &op->retry);
    TAILQ_REMOVE(&cl->ops, op, q);
    free(op);
}

static void cop_finish(struct cop *op, const struct backend_result *r)
{
    if (op->lookup)
        op->lookup_cb(op->arg,
                      r->err      ? r->err
                      : r->holder ? 0
                                  : DLOCK_EBACKEND,
                      r->err ? NULL : r->holder);
    else if (op->cb)
        op->cb(op->arg, r);
    cop_free(op);
}

static void cop_fail(struct cop *op, int err)
{
    struct backend_result r = {.err = err, .at = now_ns()};
    cop_finish(op, &r);
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct cop *op = w->data;
    int rc = cop_send(op);
    if (rc)
        cop_fail(op, rc);
}

/* TRYAGAIN (keys of a slot being moved) or CLUSTERDOWN: again after a
 * backoff, until command_timeout_ms after the first try. */
static bool cop_retry_later(struct cop *op, uint64_t now)
{
    if (now >= op->give_up)
        return false;
    op->redirects = 0; /* the ASK that may come again is a new one */
    op->backoff = op->backoff ? op->backoff * 2 : RETRY_MIN_NS;
    if (op->backoff > RETRY_MAX_NS)
        op->backoff = RETRY_MAX_NS;
    ev_timer_set(&op->retry, (double)op->backoff / 1e9, 0.0);
    ev_timer_start(op->cl->loop, &op->retry);
    return true;
}

static void on_node_result(struct cop *op, const struct backend_result *r)
{
    struct cl *cl = op->cl;
    struct cnode *n = cl->node[op->node];
    if (cl->closing)
        goto done;
    if (n->gen != op->gen) {
        /* Sent to a master that has failed over since: its word no longer
         * counts (backend.h, on_doubt). */
        cop_fail(op, DLOCK_EUNAVAIL);
        return;
    }
    if (r->err == DLOCK_EUNAVAIL || r->err == DLOCK_EREADONLY)
        refresh_soon(cl); /* the master may be gone, or a replica now */
    const char *t = r->err ? r->error_text : NULL;
    if (!t)
        goto done;
    bool moved = strncmp(t, "MOVED ", 6) == 0, ask = strncmp(t, "ASK ", 4) == 0;
    if (moved || ask) {
        unsigned slot;
        char name[280];
        uint16_t to;
        if (op->redirects >= MAX_REDIRECTS || reply_redirect(t, &slot, name, sizeof name) != 0 ||
            (to = node_get(cl, name)) == NO_NODE) {
            log_warn("cluster: %s: not followed", t);
            goto done;
        }
        op->redirects++;
        if (moved) {
            note_moved(cl, slot, to);
            op->req.asking = false;
        } else {
            op->req.asking = true;
            op->node = to;
        }
        int rc = cop_send(op);
        if (rc)
            cop_fail(op, rc);
        return;
    }
    if (strncmp(t, "TRYAGAIN", 8) == 0 || strncmp(t, "CLUSTERDOWN", 11) == 0) {
        if (t[0] == 'C')
            refresh_soon(cl);
        op->req.asking = false;
        if (cop_retry_later(op, r->at))
            return;
        struct backend_result u = *r;
        u.err = DLOCK_EUNAVAIL;
        cop_finish(op, &u);
        return;
    }
done:
    cop_finish(op, r);
}

static void on_node_cb(void *arg, const struct backend_result *r)
{
    on_node_result(arg, r);
}

/* Sends op to the node its slot is served by (or, after ASK, the node the
 * redirect named). */
static int cop_send(struct cop *op)
{
    struct cl *cl = op->cl;
    if (cl->closing)
        return DLOCK_EUNAVAIL;
    uint16_t to = op->req.asking ? op->node : cl->owner[op->slot];
    if (to == NO_NODE) {
        refresh_soon(cl);
        return DLOCK_EUNAVAIL;
    }
    struct backend *b = cl->node[to]->b;
    op->node = to;
    op->gen = cl->node[to]->gen;
    /* A lookup too goes as an operation: its redirects are followed as an
     * acquire's are. */
    return b->ops->op(b, &op->req, on_node_cb, op);
}

static int submit(struct cl *cl, bool lookup, const struct backend_req *req, backend_cb cb,
                  backend_lookup_cb lookup_cb, void *arg)
{
    if (!cl->have_map)
        return DLOCK_EUNAVAIL;
    size_t tlen = req->token ? 32 : 0, hlen = req->holder ? strlen(req->holder) : 0;
    struct cop *op = calloc(1, sizeof *op + cl->prefix_len + req->len + 1 + tlen + 1 + hlen + 1);
    if (!op)
        return DLOCK_ENOMEM;
    op->cl = cl;
    op->lookup = lookup;
    op->req = *req;
    op->req.asking = false;
    op->cb = cb;
    op->lookup_cb = lookup_cb;
    op->arg = arg;
    /* The key (for its slot), then the name, token and holder copies. */
    char *key = op->text;
    memcpy(key, cl->cfg->prefix, cl->prefix_len);
    memcpy(key + cl->prefix_len, req->name, req->len);
    key[cl->prefix_len + req->len] = '\0';
    op->slot = name_slot(cl, req->name, req->len);
    op->req.name = key + cl->prefix_len;
    char *token = key + cl->prefix_len + req->len + 1;
    memcpy(token, req->token ? req->token : "", tlen);
    token[tlen] = '\0';
    op->req.token = req->token ? token : NULL;
    char *holder = token + tlen + 1;
    memcpy(holder, req->holder ? req->holder : "", hlen);
    holder[hlen] = '\0';
    op->req.holder = req->holder ? holder : NULL;
    op->give_up = now_ns() + (uint64_t)cl->cfg->command_timeout_ms * NS_PER_MS;
    ev_timer_init(&op->retry, on_retry, 0.0, 0.0);
    op->retry.data = op;
    TAILQ_INSERT_TAIL(&cl->ops, op, q);
    int rc = cop_send(op);
    if (rc) {
        TAILQ_REMOVE(&cl->ops, op, q);
        free(op);
    }
    return rc;
}

/* Any operation goes to the node that serves its key's slot as it is. */
static int cl_op(struct backend *be, const struct backend_req *req, backend_cb cb, void *arg)
{
    return submit((struct cl *)be, false, req, cb, NULL, arg);
}

static int cl_lookup(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                     void *arg)
{
    struct backend_req req = {.op = BACKEND_LOOKUP, .name = name, .len = len};
    return submit((struct cl *)be, true, &req, NULL, cb, arg);
}

/* A forced release goes to the node that serves the name's slot, as any
 * operation, redirects followed. */
static int cl_force(struct backend *be, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    struct backend_req req = {.op = BACKEND_FORCE, .name = name, .len = len};
    return submit((struct cl *)be, true, &req, NULL, cb, arg);
}

static void cl_flush(struct backend *be)
{
    struct cl *cl = (struct cl *)be;
    for (size_t i = 0; i < cl->nnodes; i++)
        cl->node[i]->b->ops->flush(cl->node[i]->b);
}

static size_t cl_pending(const struct backend *be)
{
    const struct cl *cl = (const struct cl *)be;
    size_t n = 0;
    const struct cop *op;
    TAILQ_FOREACH(op, &cl->ops, q)
    n++;
    return n;
}

/* The masters that serve slots now, each with its health. */
static size_t cl_nodes(const struct backend *be, struct backend_node *out, size_t max)
{
    const struct cl *cl = (const struct cl *)be;
    size_t n = 0;
    for (size_t i = 0; i < cl->nnodes; i++) {
        bool serves = false;
        for (size_t s = 0; s < KEY_SLOTS && !serves; s++)
            serves = cl->owner[s] == i;
        if (!serves)
            continue;
        if (n < max)
            cl->node[i]->b->ops->nodes(cl->node[i]->b, &out[n], 1);
        n++;
    }
    return n;
}

static void cl_destroy(struct backend *be)
{
    struct cl *cl = (struct cl *)be;
    cl->closing = true;
    ev_timer_stop(cl->loop, &cl->refresh);
    redis_link_close(&cl->ctl);
    /* The nodes answer what they hold (as errors); what waits for a retry
     * is answered here. */
    for (size_t i = 0; i < cl->nnodes; i++)
        cl->node[i]->b->ops->destroy(cl->node[i]->b);
    while (!TAILQ_EMPTY(&cl->ops))
        cop_fail(TAILQ_FIRST(&cl->ops), DLOCK_EUNAVAIL);
    for (size_t i = 0; i < cl->nnodes; i++)
        free(cl->node[i]);
    free(cl->node);
    while (cl->waiting) {
        struct waiting_watch *w = cl->waiting;
        cl->waiting = w->next;
        free(w);
    }
    free(cl);
}

/* The slot map's next periodic reading comes no later than the new
 * topology_refresh_ms (the links read their settings when they use them). */
static void cl_reconfigured(struct backend *b)
{
    struct cl *cl = (struct cl *)b;
    double every = cl->cfg->topology_refresh_ms / 1000.0;
    if (cl->closing || ev_timer_remaining(cl->loop, &cl->refresh) <= every)
        return;
    ev_timer_stop(cl->loop, &cl->refresh);
    ev_timer_set(&cl->refresh, every, 0.0);
    ev_timer_start(cl->loop, &cl->refresh);
}

static const struct backend_ops cl_ops = {
    .op = cl_op,
    .watch = cl_watch,
    .leave = cl_leave,
    .lookup = cl_lookup,
    .force = cl_force,
    .flush = cl_flush,
    .pending = cl_pending,
    .nodes = cl_nodes,
    .reconfigured = cl_reconfigured,
    .destroy = cl_destroy,
};

struct backend *backend_cluster_new(struct ev_loop *loop, const struct config *cfg,
                                    const struct backend_events *events)
{
    struct cl *cl = calloc(1, sizeof *cl);
    if (!cl)
        return NULL;
    cl->base.ops = &cl_ops;
    cl->base.kinds = BACKEND_REDIS_KINDS;
    cl->loop = loop;
    cl->cfg = cfg;
    cl->ev = *events;
    cl->prefix_len = strlen(cfg->prefix);
    for (size_t s = 0; s < KEY_SLOTS; s++)
        cl->owner[s] = NO_NODE;
    TAILQ_INIT(&cl->ops);
    if (key_has_hash_tag(cfg->prefix, cl->prefix_len))
        log_warn("cluster: the prefix %s has a hash tag: every lock lives in one slot, on one "
                 "master",
                 cfg->prefix);
    next_candidate(cl);
    struct redis_link_hooks hooks = {
        .arg = cl, .setup = ctl_setup, .ready = ctl_ready, .error = ctl_error};
    redis_link_init(&cl->ctl, loop, cfg, &cl->ctl_addr, cl->ctl_label, "control", 0, &hooks);
    ev_timer_init(&cl->refresh, on_refresh, cfg->topology_refresh_ms / 1000.0, 0.0);
    cl->refresh.data = cl;
    ev_timer_start(loop, &cl->refresh);
    redis_link_start(&cl->ctl);
    return &cl->base;
}
