/* SPDX-License-Identifier: BSD-3-Clause */
/* cluster.c -- the simulator's Redis Cluster: the hash slots of the run's
 * names spread over 2 or 3 masters (the nodes), slot migrations with their
 * ASK window, and a model of agent/backend/backend_cluster.c as a struct
 * backend over one link per master: the slot map read (CLUSTER SLOTS) at
 * start, every topology_refresh_ms and soon after redirects and errors;
 * every op routed by its name's slot; MOVED and ASK followed (at most
 * MAX_REDIRECTS), TRYAGAIN retried with backoff for command_timeout_ms;
 * release notices asked of the master of the name's slot, which lets them
 * go when the slot leaves it (the core asks again, of the new master);
 * a master's failover, seen in the map, reported as on_doubt over the names
 * of that master's slots before the new master serves (tests/sim/README.md,
 * "Cluster mode"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "keys.h"
#include "sim.h"

/* Bugs of the model's own backend, for the planted-bug tests: a failover
 * seen in the map is not reported as doubt; an ASK is followed as if it
 * were a MOVED (the map takes the importing node for the slot's owner); a
 * promoted master is taken for a failover only when it was the replica of
 * the slot's owner by the previous map (failed_over()). */
bool sim_bug_cluster_no_doubt;
bool sim_bug_cluster_ask_as_moved;
bool sim_bug_cluster_stale_owner;
#ifdef DLOCK_PLANTED_BUGS
#define BUG_STALE_OWNER  sim_bug_cluster_stale_owner
#define BUG_NO_DOUBT     sim_bug_cluster_no_doubt
#define BUG_ASK_AS_MOVED sim_bug_cluster_ask_as_moved
#else
#define BUG_NO_DOUBT     0
#define BUG_ASK_AS_MOVED 0
#define BUG_STALE_OWNER  0
#endif

#define MAX_REDIRECTS 5
#define RETRY_MIN_NS  MS(10)
#define RETRY_MAX_NS  MS(200)
#define SOON_NS       MS(100)

/* What an EV_CLUSTER event is (its b: what | generation << 3). */
enum { CE_REFRESH, CE_MAP_AT_NODE, CE_MAP_REPLY, CE_RETRY };

/* A seed that draws single mode, is not a sentinel seed, and runs in
 * cluster mode: chosen by the seed alone, outside the random stream, as
 * sentinel seeds are. */
bool cluster_seed(uint64_t seed)
{
    uint64_t z = seed + 0xc1a5e7c1a5e7ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % 3 == 0;
}

/* ---- the cluster ---- */

static unsigned name_slot(const struct sim *s, unsigned n)
{
    return key_slot(s->lock_keys[n], strlen(s->lock_keys[n]));
}

/* The slots of the names; each master serves a range of slots, the
 * boundaries drawn between the names' slots so that, as far as there are
 * names, they live on different masters. */
void cluster_setup(struct sim *s)
{
    struct rng *r = &s->rng;
    unsigned order[SIM_MAX_NAMES];
    s->ncslots = 0;
    for (unsigned n = 0; n < s->nnames; n++) {
        unsigned slot = name_slot(s, n), i;
        for (i = 0; i < s->ncslots && s->cslots[i].slot != slot; i++)
            ;
        if (i == s->ncslots)
            s->cslots[s->ncslots++] = (struct cslot){.slot = slot, .owner = 0, .mig_to = -1};
        s->name_cslot[n] = i;
    }
    for (unsigned i = 0; i < s->ncslots; i++)
        order[i] = i;
    for (unsigned i = 1; i < s->ncslots; i++)
        for (unsigned j = i; j > 0 && s->cslots[order[j]].slot < s->cslots[order[j - 1]].slot;
             j--) {
            unsigned t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* Range k of the masters holds the k-th slot in order (the last master
     * the rest), unless the draw puts two in one range. */
    unsigned m = 0;
    for (unsigned i = 0; i < s->ncslots; i++) {
        if (i > 0 && m + 1 < s->nnodes && rng_chance(r, 80))
            m++;
        s->cslots[order[i]].owner = (int)m;
    }
    for (unsigned a = 0; a < s->nagents; a++)
        s->agents[a].cfg.topology_refresh_ms = (uint32_t)rng_range(r, 100, 2000);
}

/* Does node serve name's keys now: it owns the slot, or imports it? */
bool cluster_serves(const struct sim *s, unsigned name, unsigned node)
{
    const struct cslot *cs = &s->cslots[s->name_cslot[name]];
    return cs->owner == (int)node || cs->mig_to == (int)node;
}

/* What node nd answers to m, as Redis Cluster's getNodeByQuery decides:
 * the slot's owner serves it (while it migrates the slot: if it has every
 * key; ASK when it has none; TRYAGAIN when some); the node importing it
 * serves a command sent after ASKING (TRYAGAIN when it names several keys
 * and some are missing); any other node answers MOVED. A shard channel
 * (SSUBSCRIBE) is served by the owner until the migration ends. */
enum redirect cluster_route(struct node *nd, const struct msg *m, unsigned *to)
{
    struct sim *s = nd->s;
    int idx = sim_name_index(s, m->name, m->name_len);
    if (idx < 0)
        return R_NONE;
    const struct cslot *cs = &s->cslots[s->name_cslot[idx]];
    unsigned nkeys, present;
    *to = (unsigned)cs->owner;
    if (m->kind == OP_SUBSCRIBE || m->kind == OP_UNSUBSCRIBE)
        return cs->owner == (int)nd->id ? R_NONE : R_MOVED;
    if (cs->owner == (int)nd->id) {
        if (cs->mig_to < 0)
            return R_NONE;
        node_keys_present(nd, m, &nkeys, &present);
        if (present == nkeys)
            return R_NONE;
        if (present)
            return R_TRYAGAIN;
        *to = (unsigned)cs->mig_to;
        return R_ASK;
    }
    if (cs->mig_to == (int)nd->id && m->asking) {
        node_keys_present(nd, m, &nkeys, &present);
        return nkeys > 1 && present < nkeys ? R_TRYAGAIN : R_NONE;
    }
    return R_MOVED;
}

static struct link *link_at(struct sim *s, unsigned agent, unsigned node)
{
    return &s->links[agent * s->nnodes + node];
}

/* Has ag not yet heard of a failover of a master that served name's slot
 * then (wherever the slot went since)? Until its map shows the new master,
 * its leases of the name may be valid without their keys: the window of
 * docs/failover.md ("Redis Cluster"). */
bool cluster_unheard(const struct agent *ag, unsigned name)
{
    struct sim *s = ag->s;
    for (unsigned n = 0; n < s->nnodes; n++)
        if (link_at(s, ag->id, n)->known_gen < s->cl_fail_gen[name][n])
            return true;
    return false;
}

/* A master fails over: a replica some ms behind takes its slots. Not while
 * it takes part in a migration (a replica does not inherit the MIGRATING or
 * IMPORTING state; operators then fix the slot by hand): false, skipped. */
bool cluster_failover(struct sim *s, struct fault *f)
{
    for (unsigned i = 0; i < s->ncslots; i++) {
        const struct cslot *cs = &s->cslots[i];
        if (cs->mig_to >= 0 && (cs->owner == (int)f->node || cs->mig_to == (int)f->node)) {
            TRACE(s, "failover of node%u skipped: it takes part in a slot migration", f->node);
            return false;
        }
    }
    for (unsigned n = 0; n < s->nnames; n++)
        if (cluster_serves(s, n, f->node))
            s->cl_fail_gen[n][f->node] = s->nodes[f->node].master_gen + 1;
    excl_note(s, X_LATE_DOUBT,
              "node%u failed over: the agents hear of it at their next read of the slot map",
              f->node);
    return true;
}

/* ---- slot migration ---- */

/* A name's slot starts to migrate to another master: f->nodes_mask is the
 * slot (index into cslots), f->node the source, f->amount the target. Its
 * keys move one by one at random times (EV_SLOT_MOVE), the rest when it
 * ends (fault_end). Skipped when the slot already moves or a master is
 * down. */
void cluster_slot_move(struct sim *s, struct fault *f)
{
    unsigned i = (unsigned)rng_below(&s->rng, s->ncslots);
    struct cslot *cs = &s->cslots[i];
    unsigned to = (unsigned)rng_below(&s->rng, s->nnodes - 1);
    if (to >= (unsigned)cs->owner)
        to++;
    f->dur = rng_range(&s->rng, MS(5), MS(400));
    unsigned steps = (unsigned)rng_range(&s->rng, 1, 4);
    if (cs->mig_to >= 0 || !s->nodes[cs->owner].up || !s->nodes[to].up) {
        TRACE(s, "slot move of %u skipped", cs->slot);
        f->dur = 0;
        return;
    }
    f->nodes_mask = i;
    f->node = (unsigned)cs->owner;
    f->amount = to;
    cs->mig_to = (int)to;
    TRACE(s, "slot %u migrates from node%d to node%u (%" PRIu64 " ms)", cs->slot, cs->owner, to,
          f->dur / 1000000);
    for (unsigned k = 0; k < steps; k++)
        ev_push(s, s->now + rng_below(&s->rng, f->dur), EV_SLOT_MOVE, (uint32_t)(f - s->faults), 0,
                NULL);
}

static bool can_migrate(const struct node *a, const struct node *b)
{
    return a->up && b->up && !a->stalled && !b->stalled;
}

static void slot_move_step(struct sim *s, struct fault *f)
{
    struct cslot *cs = &s->cslots[f->nodes_mask];
    struct node *src = &s->nodes[f->node], *dst = &s->nodes[f->amount];
    if (f->done || cs->mig_to != (int)f->amount || !can_migrate(src, dst))
        return;
    node_migrate_one(src, dst, cs->slot);
}

/* The migration ends (CLUSTER SETSLOT NODE): the rest of the keys move, the
 * target owns the slot, and the source ends the subscriptions to the
 * channels of the slot. While a master is down or stalled, later. */
void cluster_slot_move_end(struct sim *s, struct fault *f)
{
    if (f->dur == 0)
        return;
    struct cslot *cs = &s->cslots[f->nodes_mask];
    struct node *src = &s->nodes[f->node], *dst = &s->nodes[f->amount];
    if (!can_migrate(src, dst)) {
        f->done = false;
        ev_push(s, s->now + MS(20), EV_FAULT_END, (uint32_t)(f - s->faults), 0, NULL);
        return;
    }
    while (node_migrate_one(src, dst, cs->slot))
        ;
    cs->owner = (int)f->amount;
    cs->mig_to = -1;
    TRACE(s, "slot %u now on node%d", cs->slot, cs->owner);
    for (unsigned n = 0; n < s->nnames; n++)
        if (s->name_cslot[n] == f->nodes_mask)
            for (unsigned a = 0; a < s->nagents; a++)
                link_sunsubscribe(link_at(s, a, f->node), n);
}

/* ---- the backend (backend_cluster.c's model) ---- */

struct cop {
    TAILQ_ENTRY(cop) q;
    struct cb *cb;
    uint64_t id;
    uint8_t kind; /* OP_* */
    struct backend_req req;
    backend_cb ucb;
    backend_lookup_cb lcb;
    void *arg;
    unsigned cslot;
    int node;     /* where it was sent */
    unsigned gen; /* that node's gen when sent */
    unsigned redirects;
    uint64_t give_up, backoff; /* agent clock */
    char name[32];
    char token[33];
    char holder[SIM_VAL_MAX];
};

struct cb {
    struct backend base;
    struct sim *s;
    struct agent *ag;
    struct backend_events ev;
    int owner[SIM_MAX_NAMES];     /* per cslot: the node, -1 unknown */
    uint64_t mgen[SIM_MAX_NODES]; /* each master's generation by the last map */
    unsigned gen[SIM_MAX_NODES];  /* raised when a master lost its slots to a replica */
    /* per cslot: its master by the map let a subscription go (the map is
     * stale there): none goes until the map is read again */
    bool refused[SIM_MAX_NAMES];
    /* per name: asked for while its slot was not current, reported
     * unwatched once the map names its master */
    bool waiting[SIM_MAX_NAMES];
    bool have_map, closing, reading;
    uint64_t read_gen, last_read, refresh_gen; /* last_read: agent clock */
    unsigned ctl_next;
    /* The map the read in flight took at its node: each slot's owner, each
     * master's generation (every master serves some range of slots). */
    int snap_owner[SIM_MAX_NAMES];
    uint64_t snap_gen[SIM_MAX_NODES];
    uint64_t op_ids;
    TAILQ_HEAD(, cop) ops;
};

static int cop_send(struct cop *op);

static void cb_push(struct cb *cb, uint64_t agent_due, unsigned what, uint64_t gen)
{
    ev_push(cb->s, agent_virt(cb->ag, agent_due), EV_CLUSTER, cb->ag->id, what | gen << 3, NULL);
}

/* The refresh timer: at agent clock `due` (replacing the earlier one). */
static void refresh_at(struct cb *cb, uint64_t due)
{
    cb_push(cb, due, CE_REFRESH, ++cb->refresh_gen);
}

/* Reads the map again soon (at most every SOON_NS). */
static void refresh_soon(struct cb *cb)
{
    if (cb->closing)
        return;
    uint64_t now = agent_now(cb->ag), at = cb->last_read + SOON_NS;
    refresh_at(cb, at > now ? at : now);
}

static bool ctl_reachable(struct cb *cb, unsigned n)
{
    const struct node *nd = &cb->s->nodes[n];
    return nd->up && !nd->stalled && !link_at(cb->s, cb->ag->id, n)->partitioned;
}

/* CLUSTER SLOTS on the control link, to one candidate at a time; when none
 * can be reached, again after reconnect_min_ms (false: that retry is set). */
static bool read_map(struct cb *cb)
{
    struct sim *s = cb->s;
    if (cb->reading || cb->closing)
        return true;
    for (unsigned i = 0; i < s->nnodes; i++) {
        unsigned n = (cb->ctl_next + i) % s->nnodes;
        if (!ctl_reachable(cb, n))
            continue;
        cb->ctl_next = n;
        cb->reading = true;
        cb->last_read = agent_now(cb->ag);
        ev_push(s, s->now + net_delay(s), EV_CLUSTER, cb->ag->id,
                CE_MAP_AT_NODE | ++cb->read_gen << 3, NULL);
        return true;
    }
    cb->ctl_next++;
    refresh_at(cb, agent_now(cb->ag) + MS(cb->ag->cfg.reconnect_min_ms));
    return false;
}

static void map_at_node(struct cb *cb)
{
    struct sim *s = cb->s;
    if (!ctl_reachable(cb, cb->ctl_next)) {
        /* The control link fails: the next candidate, later. */
        cb->reading = false;
        cb->ctl_next++;
        refresh_at(cb, agent_now(cb->ag) + MS(cb->ag->cfg.command_timeout_ms));
        return;
    }
    for (unsigned i = 0; i < s->ncslots; i++)
        cb->snap_owner[i] = s->cslots[i].owner;
    for (unsigned n = 0; n < s->nnodes; n++)
        cb->snap_gen[n] = s->nodes[n].master_gen;
    ev_push(s, s->now + net_delay(s), EV_CLUSTER, cb->ag->id, CE_MAP_REPLY | cb->read_gen << 3,
            NULL);
}

/* A slot goes from `from` to `to` (promoted: `to` is a master that was a
 * replica by the previous map; here: a master index with a new
 * generation). A failover when `to` was promoted, or when `from` is out of
 * the agent's reach (a migration needs it up): backend_cluster.c's
 * failed_over(), but for one case it misses. It takes a promoted `to` for a
 * failover only when it was `from`'s replica; yet the slot may have moved
 * from `from` to another master, which then failed over, before this map
 * read (the keys MIGRATE wrote there lost with the rest of its last writes):
 * the planted bug cluster_stale_owner is that rule. */
static bool failed_over(const struct cb *cb, int from, int to, bool promoted)
{
    if (from < 0 || to < 0)
        return false;
    if (promoted && (from == to || !BUG_STALE_OWNER))
        return true;
    return from != to && !link_at(cb->s, cb->ag->id, (unsigned)from)->connected;
}

struct doubt_ctx {
    const struct cb *cb;
    const bool *slots; /* per cslot */
};

static bool doubt_affected(void *farg, const char *name, size_t len)
{
    const struct doubt_ctx *d = farg;
    int idx = sim_name_index(d->cb->s, name, len);
    return idx >= 0 && d->slots[d->cb->s->name_cslot[idx]];
}

static bool cslot_current(const struct cb *cb, unsigned cslot)
{
    return cb->owner[cslot] >= 0 && !cb->refused[cslot];
}

/* The names that waited for a slot the map now names a master of are
 * reported unwatched, and the core asks again (backend_cluster.c's
 * waiting_flush()). */
static void waiting_flush(struct cb *cb)
{
    struct sim *s = cb->s;
    for (unsigned n = 0; n < s->nnames; n++) {
        if (!cb->waiting[n] || !cslot_current(cb, s->name_cslot[n]))
            continue;
        cb->waiting[n] = false;
        if (cb->ev.on_unwatched)
            cb->ev.on_unwatched(cb->ev.arg, s->names[n], strlen(s->names[n]));
    }
}

/* The map changed from before (per cslot): each master that lost slots
 * ends the subscriptions of their names and reports each, which the core
 * asks for again, of the new master; one whose notice link is down lost
 * them with it, so the core asks for every name (backend_cluster.c's
 * unwatch_moved()). */
static void unwatch_moved(struct cb *cb, const int *before)
{
    struct sim *s = cb->s;
    bool all = false;
    for (unsigned i = 0; i < s->ncslots; i++)
        if (before[i] != cb->owner[i])
            cb->refused[i] = false;
    for (unsigned n = 0; n < s->nnodes; n++) {
        bool lost[SIM_MAX_NAMES] = {false}, any = false;
        for (unsigned i = 0; i < s->ncslots; i++)
            if (before[i] == (int)n && cb->owner[i] != (int)n)
                lost[i] = any = true;
        if (!any)
            continue;
        struct link *l = link_at(s, cb->ag->id, n);
        if (l->subscribed)
            link_unwatch_cslots(l, lost);
        else
            all = true;
    }
    if (all)
        cb->ev.on_subscribed(cb->ev.arg);
}

/* The map read arrives: failovers are judged against the previous map,
 * reported (doubt over their slots' names) before anything goes to the new
 * masters, whose links then connect. */
static void map_reply(struct cb *cb)
{
    struct sim *s = cb->s;
    bool slots[SIM_MAX_NAMES] = {false}, failed[SIM_MAX_NODES] = {false},
         promoted[SIM_MAX_NODES] = {false};
    bool any = false;
    int before[SIM_MAX_NAMES];
    memcpy(before, cb->owner, sizeof before);
    cb->reading = false;
    for (unsigned i = 0; i < s->ncslots; i++) {
        int from = cb->owner[i], to = cb->snap_owner[i];
        if (failed_over(cb, from, to, to >= 0 && cb->snap_gen[to] != cb->mgen[to]))
            slots[i] = failed[from] = any = true;
    }
    for (unsigned i = 0; i < s->ncslots; i++)
        cb->owner[i] = cb->snap_owner[i];
    memset(cb->refused, 0, sizeof cb->refused);
    for (unsigned n = 0; n < s->nnodes; n++) {
        promoted[n] = cb->snap_gen[n] != cb->mgen[n];
        cb->mgen[n] = cb->snap_gen[n];
    }
    bool first = !cb->have_map;
    cb->have_map = true;
    TRACE(s, "agent%u: slot map read%s", cb->ag->id, any ? ": a master failed over" : "");
    if (any) {
        for (unsigned n = 0; n < s->nnodes; n++)
            if (failed[n])
                cb->gen[n]++;
        if (cb->ev.on_doubt && !BUG_NO_DOUBT) {
            struct doubt_ctx d = {.cb = cb, .slots = slots};
            cb->ev.on_doubt(cb->ev.arg, doubt_affected, &d);
        }
    }
    /* The new masters: their links connect (the old ones are gone). */
    for (unsigned n = 0; n < s->nnodes; n++) {
        struct link *l = link_at(s, cb->ag->id, n);
        if (promoted[n] && l->known_gen != cb->mgen[n])
            link_doubt(l); /* no on_doubt of its own: given above */
    }
    unwatch_moved(cb, before);
    waiting_flush(cb);
    if (first)
        cb->ev.on_ready(cb->ev.arg);
}

/* MOVED: the slot's entry follows at once (a failover if the old master is
 * out of reach), the whole map is read again soon. */
static void note_moved(struct cb *cb, unsigned cslot, int to)
{
    struct sim *s = cb->s;
    int from = cb->owner[cslot];
    int before[SIM_MAX_NAMES];
    memcpy(before, cb->owner, sizeof before);
    if (from != to && from >= 0 && failed_over(cb, from, to, false)) {
        bool slots[SIM_MAX_NAMES] = {false};
        for (unsigned i = 0; i < s->ncslots; i++) {
            if (cb->owner[i] == from) {
                cb->owner[i] = to;
                slots[i] = true;
            }
        }
        cb->gen[from]++;
        if (cb->ev.on_doubt && !BUG_NO_DOUBT) {
            struct doubt_ctx d = {.cb = cb, .slots = slots};
            cb->ev.on_doubt(cb->ev.arg, doubt_affected, &d);
        }
    } else {
        cb->owner[cslot] = to;
    }
    unwatch_moved(cb, before);
    waiting_flush(cb);
    refresh_soon(cb);
}

/* ---- commands ---- */

static void cop_free(struct cop *op)
{
    TAILQ_REMOVE(&op->cb->ops, op, q);
    free(op);
}

static void cop_finish(struct cop *op, const struct backend_result *r)
{
    if (op->kind == OP_LOOKUP)
        op->lcb(op->arg, r->err ? r->err : DLOCK_EBACKEND, NULL);
    else if (op->ucb)
        op->ucb(op->arg, r);
    cop_free(op);
}

static void cop_fail(struct cop *op, int err)
{
    struct backend_result r = {.err = err, .at = agent_now(op->cb->ag)};
    cop_finish(op, &r);
}

/* TRYAGAIN: again after a backoff, until command_timeout_ms after the first
 * try. */
static bool cop_retry_later(struct cop *op, uint64_t now)
{
    if (now >= op->give_up)
        return false;
    op->redirects = 0;
    op->backoff = op->backoff ? op->backoff * 2 : RETRY_MIN_NS;
    if (op->backoff > RETRY_MAX_NS)
        op->backoff = RETRY_MAX_NS;
    cb_push(op->cb, now + op->backoff, CE_RETRY, op->id);
    return true;
}

static void on_node_result(void *arg, const struct backend_result *r)
{
    struct cop *op = arg;
    struct cb *cb = op->cb;
    if (cb->closing)
        goto done;
    if (cb->gen[op->node] != op->gen) {
        /* Sent to a master that has failed over since: its word no longer
         * counts (backend.h, on_doubt). */
        cop_fail(op, DLOCK_EUNAVAIL);
        return;
    }
    if (r->err == DLOCK_EUNAVAIL)
        refresh_soon(cb);
    const char *t = r->err ? r->error_text : NULL;
    if (!t)
        goto done;
    bool moved = strncmp(t, "MOVED ", 6) == 0, ask = strncmp(t, "ASK ", 4) == 0;
    if (moved || ask) {
        unsigned slot, node;
        if (op->redirects >= MAX_REDIRECTS ||
            sscanf(t + (moved ? 6 : 4), "%u 10.0.0.%u:6379", &slot, &node) != 2 || node == 0 ||
            node > cb->s->nnodes || slot != cb->s->cslots[op->cslot].slot) {
            TRACE(cb->s, "agent%u: %s not followed", cb->ag->id, t);
            goto done;
        }
        op->redirects++;
        if (moved || BUG_ASK_AS_MOVED) {
            note_moved(cb, op->cslot, (int)node - 1);
            op->req.asking = false;
        } else {
            op->req.asking = true;
            op->node = (int)node - 1;
        }
        int rc = cop_send(op);
        if (rc)
            cop_fail(op, rc);
        return;
    }
    if (strncmp(t, "TRYAGAIN", 8) == 0 || strncmp(t, "CLUSTERDOWN", 11) == 0) {
        if (t[0] == 'C')
            refresh_soon(cb);
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

static void on_node_lookup(void *arg, int err, const struct backend_holder *h)
{
    struct cop *op = arg;
    if (err == DLOCK_EUNAVAIL || err == DLOCK_EBACKEND)
        refresh_soon(op->cb);
    op->lcb(op->arg, err, h);
    cop_free(op);
}

/* To the master of the op's slot by the map (after ASK: the node named). */
static int cop_send(struct cop *op)
{
    struct cb *cb = op->cb;
    if (cb->closing)
        return DLOCK_EUNAVAIL;
    int to = op->req.asking ? op->node : cb->owner[op->cslot];
    if (to < 0) {
        refresh_soon(cb);
        return DLOCK_EUNAVAIL;
    }
    struct backend *b = &link_at(cb->s, cb->ag->id, (unsigned)to)->base;
    op->node = to;
    op->gen = cb->gen[to];
    if (op->kind == OP_LOOKUP)
        return b->ops->lookup(b, op->req.name, op->req.len, on_node_lookup, op);
    return b->ops->op(b, &op->req, on_node_result, op);
}

static int submit(struct backend *be, uint8_t kind, const struct backend_req *req, backend_cb ucb,
                  backend_lookup_cb lcb, void *arg)
{
    struct cb *cb = (struct cb *)be;
    int idx = sim_name_index(cb->s, req->name, req->len);
    if (!cb->have_map)
        return DLOCK_EUNAVAIL;
    if (idx < 0 || req->len >= sizeof((struct cop *)0)->name)
        return DLOCK_EINVAL;
    struct cop *op = calloc(1, sizeof *op);
    if (!op)
        return DLOCK_ENOMEM;
    op->cb = cb;
    op->id = ++cb->op_ids;
    op->kind = kind;
    op->req = *req;
    op->req.asking = false;
    memcpy(op->name, req->name, req->len);
    op->req.name = op->name;
    if (req->token) {
        memcpy(op->token, req->token, 32);
        op->req.token = op->token;
    }
    if (req->holder) {
        snprintf(op->holder, sizeof op->holder, "%s", req->holder);
        op->req.holder = op->holder;
    }
    op->ucb = ucb;
    op->lcb = lcb;
    op->arg = arg;
    op->cslot = cb->s->name_cslot[idx];
    op->node = -1;
    op->give_up = agent_now(cb->ag) + MS(cb->ag->cfg.command_timeout_ms);
    TAILQ_INSERT_TAIL(&cb->ops, op, q);
    int rc = cop_send(op);
    if (rc) {
        TAILQ_REMOVE(&cb->ops, op, q);
        free(op);
    }
    return rc;
}

static int c_op(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    return submit(b, (uint8_t)req->op, req, cb, NULL, arg);
}

/* To the master of the name's slot by the map, unanswered (a redirect is
 * not followed: the entry lapses), as backend_cluster.c's cl_leave. */
static void c_leave(struct backend *be, const struct backend_req *req)
{
    struct cb *cb = (struct cb *)be;
    int idx = sim_name_index(cb->s, req->name, req->len);
    if (!cb->have_map || cb->closing || idx < 0)
        return;
    int to = cb->owner[cb->s->name_cslot[idx]];
    if (to < 0)
        return;
    struct backend *b = &link_at(cb->s, cb->ag->id, (unsigned)to)->base;
    b->ops->leave(b, req);
}

static int c_lookup(struct backend *b, const char *name, size_t len, backend_lookup_cb cb,
                    void *arg)
{
    struct backend_req req = {.name = name, .len = len};
    return submit(b, OP_LOOKUP, &req, NULL, cb, arg);
}

/* To the master of the name's slot by the map, which keeps the
 * subscription; while the map names none, or a stale one, the name waits
 * for the next map (backend_cluster.c's cl_watch()). */
static int c_watch(struct backend *b, const char *name, size_t len, bool on)
{
    struct cb *cb = (struct cb *)b;
    int idx = sim_name_index(cb->s, name, len);
    if (idx < 0)
        return DLOCK_EINVAL;
    unsigned cslot = cb->s->name_cslot[idx];
    int to = cb->owner[cslot];
    cb->waiting[idx] = on && !cslot_current(cb, cslot);
    if (cb->waiting[idx]) {
        refresh_soon(cb);
        return 0;
    }
    if (to < 0)
        return 0;
    struct link *l = link_at(cb->s, cb->ag->id, (unsigned)to);
    return l->base.ops->watch(&l->base, name, len, on);
}

/* A master let a name's subscription go (its slot moved away, it answered
 * MOVED, or the map moved it): the core asks again; when the map still names
 * that master it is stale, and the slot waits for the next read. */
static void on_dropped(void *arg, const char *name, size_t len)
{
    struct link *l = arg;
    struct cb *cb = (struct cb *)l->ag->be;
    int idx = sim_name_index(l->s, name, len);
    if (!cb || idx < 0)
        return;
    unsigned cslot = cb->s->name_cslot[idx];
    int owner = cb->owner[cslot];
    if (owner < 0 || owner == (int)l->nd->id) {
        cb->refused[cslot] = true;
        refresh_soon(cb);
    }
    if (cb->ev.on_unwatched)
        cb->ev.on_unwatched(cb->ev.arg, name, len);
}

static void c_flush(struct backend *b)
{
    struct cb *cb = (struct cb *)b;
    for (unsigned n = 0; n < cb->s->nnodes; n++) {
        struct link *l = link_at(cb->s, cb->ag->id, n);
        l->base.ops->flush(&l->base);
    }
}

static size_t c_pending(const struct backend *b)
{
    const struct cb *cb = (const struct cb *)b;
    size_t n = 0;
    const struct cop *op;
    TAILQ_FOREACH(op, &cb->ops, q)
    n++;
    return n;
}

static size_t c_nodes(const struct backend *b, struct backend_node *out, size_t max)
{
    const struct cb *cb = (const struct cb *)b;
    size_t n = 0;
    for (unsigned i = 0; i < cb->s->nnodes; i++) {
        struct link *l = link_at(cb->s, cb->ag->id, i);
        if (n < max)
            l->base.ops->nodes(&l->base, &out[n], 1);
        n++;
    }
    return n;
}

static void c_destroy(struct backend *b)
{
    struct cb *cb = (struct cb *)b;
    cb->closing = true;
    for (unsigned n = 0; n < cb->s->nnodes; n++)
        link_teardown(link_at(cb->s, cb->ag->id, n));
    while (!TAILQ_EMPTY(&cb->ops))
        cop_fail(TAILQ_FIRST(&cb->ops), DLOCK_EUNAVAIL);
    cb->ag->be = NULL;
    free(cb);
}

static const struct backend_ops cluster_ops = {
    .op = c_op,
    .watch = c_watch,
    .leave = c_leave,
    .lookup = c_lookup,
    .flush = c_flush,
    .pending = c_pending,
    .nodes = c_nodes,
    .destroy = c_destroy,
};

/* A master's link is ready: passed on once the map is known (before, the
 * backend has no master to send to). */
static void on_node_ready(void *arg)
{
    struct cb *cb = arg;
    if (cb->have_map)
        cb->ev.on_ready(cb->ev.arg);
}

static void on_node_notice(void *arg, const char *name, size_t len,
                           const struct backend_grant *grant)
{
    struct cb *cb = arg;
    cb->ev.on_notice(cb->ev.arg, name, len, grant);
}

static void on_node_subscribed(void *arg)
{
    struct cb *cb = arg;
    cb->ev.on_subscribed(cb->ev.arg);
}

struct backend *cluster_backend_new(struct agent *ag, const struct backend_events *ev)
{
    struct sim *s = ag->s;
    struct cb *cb = calloc(1, sizeof *cb);
    if (!cb)
        return NULL;
    cb->base.ops = &cluster_ops;
    cb->base.kinds = BACKEND_KIND(LOCK_SHARED) | BACKEND_KIND(LOCK_SEMAPHORE);
    cb->s = s;
    cb->ag = ag;
    cb->ev = *ev;
    TAILQ_INIT(&cb->ops);
    /* A successor's backend (an agent restart) numbers its events past its
     * predecessor's, whose events may still be on their way. */
    cb->refresh_gen = cb->read_gen = cb->op_ids = (uint64_t)ag->incarnation << 32;
    for (unsigned i = 0; i < SIM_MAX_NAMES; i++)
        cb->owner[i] = -1;
    struct backend_events nev = {.arg = cb,
                                 .on_notice = on_node_notice,
                                 .on_subscribed = on_node_subscribed,
                                 .on_ready = on_node_ready};
    for (unsigned n = 0; n < s->nnodes; n++) {
        struct link *l = link_at(s, ag->id, n);
        link_set_events(l, &nev);
        l->dropped = on_dropped;
        l->dropped_arg = l;
        cb->mgen[n] = s->nodes[n].master_gen;
    }
    cb->ctl_next = (unsigned)rng_below(&s->rng, s->nnodes);
    /* The control link connects, then reads the map. */
    refresh_at(cb, agent_now(ag) + rng_range(&s->rng, 0, MS(3)));
    return &cb->base;
}

static struct cop *cop_find(struct cb *cb, uint64_t id)
{
    struct cop *op;
    TAILQ_FOREACH(op, &cb->ops, q)
    if (op->id == id)
        return op;
    return NULL;
}

void cluster_event(struct sim *s, const struct event *e)
{
    if (e->type == EV_SLOT_MOVE) {
        slot_move_step(s, &s->faults[e->a]);
        return;
    }
    struct cb *cb = (struct cb *)s->agents[e->a].be;
    if (!cb || cb->closing)
        return;
    uint64_t gen = e->b >> 3;
    switch (e->b & 7) {
    case CE_REFRESH:
        if (gen != cb->refresh_gen)
            return;
        if (read_map(cb))
            refresh_at(cb, agent_now(cb->ag) + MS(cb->ag->cfg.topology_refresh_ms));
        break;
    case CE_MAP_AT_NODE:
        if (gen == cb->read_gen && cb->reading)
            map_at_node(cb);
        break;
    case CE_MAP_REPLY:
        if (gen == cb->read_gen && cb->reading)
            map_reply(cb);
        break;
    case CE_RETRY: {
        struct cop *op = cop_find(cb, gen);
        if (op) {
            int rc = cop_send(op);
            if (rc)
                cop_fail(op, rc);
        }
        break;
    }
    default:
        break;
    }
}
