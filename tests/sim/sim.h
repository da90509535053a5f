/* SPDX-License-Identifier: BSD-3-Clause */
/* sim.h -- dlock-sim: a deterministic simulation of several agents (each a
 * real struct core), their clients, the links to a model of Redis nodes, and
 * faults, driven by one seeded PRNG in virtual time (tests/sim/README.md). */
#ifndef DLOCK_SIM_H
#define DLOCK_SIM_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "backend.h"
#include "config.h"
#include "core.h"

#define SIM_MAX_AGENTS  4
#define SIM_MAX_NODES   5
#define SIM_MAX_CLIENTS 16 /* in all: up to 8, and the members of up to 2 sets */
#define SIM_MAX_NAMES   3
#define SIM_MAX_FAULTS  12
#define SIM_PAGE_SLOTS  4
#define SIM_MAX_LATE    256
#define SIM_KEY_MAX     96
#define SIM_VAL_MAX     128
#define SIM_MAX_EVENTS  4000000 /* a run beyond it is a storm: a violation */

/* The permits one counted key holds at most; the counted kinds a name is
 * asked for as (shared, semaphores of 1 to 5 permits). */
#define SIM_MAX_PERMITS 16
#define SIM_KIND_SIGS   6

#define MS(x) ((uint64_t)(x)*1000000ull)
#define US(x) ((uint64_t)(x)*1000ull)

/* ---- randomness: xoshiro256**, seeded through splitmix64 ---- */

struct rng {
    uint64_t s[4];
};
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
uint64_t rng_below(struct rng *r, uint64_t n);               /* [0, n) */
uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi); /* [lo, hi] */
bool rng_chance(struct rng *r, unsigned percent);

/* ---- events ---- */

enum ev_type {
    EV_AGENT_TICK,     /* a: agent; b: generation */
    EV_QUORUM_TIMER,   /* a: agent; b: generation */
    EV_REQ_ARRIVE,     /* p: message at its node */
    EV_REPLY_ARRIVE,   /* p: message's answer at its agent */
    EV_NOTICE_ARRIVE,  /* p: a release notice (a message) at its agent */
    EV_LINK_DROP,      /* a: link; b: connection epoch */
    EV_LINK_CONNECT,   /* a: link; b: attempt generation */
    EV_LINK_UP,        /* a: link; b: attempt generation */
    EV_LINK_SUBSCRIBE, /* a: link; b: connection epoch */
    EV_LINK_WATCHDOG,  /* a: link; b: generation */
    EV_LINK_JOIN,      /* a: link; b: generation: its restart exclusion ends */
    EV_CLIENT,         /* a: client; b: generation */
    EV_FAULT_START,    /* a: fault */
    EV_FAULT_END,      /* a: fault */
    EV_RUN_END,        /* clients stop starting new work */
    EV_SETTLE_CHECK,   /* the orphan-key check */
    EV_DOUBT,          /* a: agent: it hears of a failover (sentinel mode) */
    EV_RELEASE_CHECK,  /* a: release intent: is its key gone from every reachable node? */
    EV_CLUSTER,        /* a: agent; b: what (cluster.c): its backend's map read, timers */
    EV_SLOT_MOVE,      /* a: fault: a step of a slot's migration (cluster mode) */
    EV_SUCCESSOR,      /* a: agent; b: generation: its successor retries its own releases */
    EV_COUNT
};

struct event {
    uint64_t time, seq;
    uint64_t b;
    void *p;
    uint32_t a;
    uint16_t type;
};

/* ---- messages on a link ---- */

enum op_kind {
    OP_ACQUIRE = BACKEND_ACQUIRE,
    OP_RENEW = BACKEND_RENEW,
    OP_RELEASE = BACKEND_RELEASE,
    OP_FENCE = BACKEND_FENCE,
    OP_LOOKUP
};
enum msg_state { M_QUEUED, M_SENT, M_AT_NODE, M_EXECUTED, M_LOST };

struct link;

/* The notice connection's: a release notice or a subscription's
 * confirmation (to the agent), a subscription asked for or dropped (to the
 * node). */
enum { OP_NOTICE = OP_LOOKUP + 1, OP_SUBSCRIBE, OP_UNSUBSCRIBE };
/* On the command connection, unanswered: the agent leaves the name's
 * waiting-hosts record (HDEL); the agent's keep-alive key is set (SET PX,
 * ttl_ms), which its bound entries count by. */
enum { OP_LEAVE = OP_UNSUBSCRIBE + 1, OP_KEEPALIVE };

struct msg {
    LIST_ENTRY(msg) all;    /* every message alive, for the clean-up */
    TAILQ_ENTRY(msg) link;  /* the link's queued or in-flight list */
    TAILQ_ENTRY(msg) nlink; /* the node's stall queue or the link's held list */
    struct link *l;
    uint64_t epoch;      /* the connection it went out on */
    uint64_t master_gen; /* sentinel mode: the node's master generation when sent */
    uint64_t id;
    uint8_t kind, state;
    uint8_t redirect;    /* cluster mode: the node's answer was a redirect (enum redirect) */
    uint8_t redirect_to; /* MOVED or ASK: the node named */
    bool asking;         /* cluster mode: sent after ASKING */
    bool dropped;        /* a notice: the node ended the subscription (sunsubscribe) */
    bool cb_done, in_event, in_stallq, in_held, discard, notify;
    bool confirm; /* a notice: the confirmation of a subscription */
    /* A notice: a grant on release to the agent grant_to (its token in
     * token, fence, seq the agent's keep-alive's, ttl_ms, block). */
    bool grant;
    char grant_to[BACKEND_WAITER_ID_MAX + 1];
    uint64_t seq;  /* a grant's; a keep-alive's sequence number */
    bool to_agent; /* held: an answer or notice (else a request) */
    uint32_t ttl_ms;
    uint64_t floor, fence;
    uint32_t block;     /* acquire: tokens reserved after the grant's */
    uint8_t lkind;      /* enum lock_kind of the request */
    uint32_t limit;     /* a semaphore's permits */
    uint32_t want_ms;   /* acquire: how long a waiting caller joins the waiting-hosts record */
    bool bound;         /* acquire: its entry is bound to the agent's keep-alive key */
    bool mismatch;      /* acquire: the name is held as another counted kind (or limit) */
    uint64_t sent_at;   /* agent clock */
    uint64_t failed_at; /* agent clock when answered with an error */
    backend_cb cb;
    backend_lookup_cb lcb;
    void *arg;
    long long n; /* the script's integer answer */
    struct backend_holder *holder_out;
    uint16_t name_len;
    char name[32];
    char token[33];
    char holder[SIM_VAL_MAX];
};
TAILQ_HEAD(msgq, msg);

/* ---- the Redis model ---- */

/* A permit of a counted key: its token and when it lapses (node clock, ms). */
struct rfield {
    char token[33];
    int64_t exp_ms;
};

struct rkey {
    char name[SIM_KEY_MAX];
    char val[SIM_VAL_MAX];
    int64_t expire_ms; /* node clock, ms; 0: none */
    uint64_t set_at;   /* virtual: when it was last written (set, restored, migrated) */
    /* A counted lock key (docs/redis.md, "Counted kinds"): a hash of its
     * kind ("shared", "sem:N") and its permits; val is then empty. */
    bool hash;
    uint8_t nf;
    char kind[12];
    struct rfield f[SIM_MAX_PERMITS];
};

/* A name's waiting-hosts record on a node (docs/protocol.md, "On Redis"),
 * one entry per agent, and the readers' marks beside it. */
struct wentry {
    bool used;
    bool bound;        /* counts only while its agent's keep-alive key lives */
    uint64_t since_us; /* node clock */
    int64_t exp_ms;    /* node clock */
    /* An exclusive acquire's bound entry carries its grant: the TTL, the
     * block and the key's value (grant on release). */
    bool carries;
    uint32_t ttl_ms, block;
    char val[SIM_VAL_MAX];
};
struct wrecord {
    int64_t exp_ms; /* the record key's expiry (node clock ms; 0: none) */
    struct wentry e[SIM_MAX_AGENTS];
    int64_t mark_ms[SIM_MAX_AGENTS]; /* a reader's mark: until then (0: none) */
};

struct undo {
    uint64_t t; /* virtual time of the change */
    bool existed;
    struct rkey k;
};

struct node {
    struct sim *s;
    unsigned id;
    bool durable; /* appendonly yes, appendfsync always: restarts keep every key */
    bool up;      /* false while restarting */
    bool stalled;
    uint64_t run_id;
    uint64_t master_gen;      /* sentinel mode: bumped by every failover (a new master) */
    int64_t started_at;       /* virtual; below 0: before the run */
    bool lost_data;           /* lost keys (restart without persistence, failover) */
    uint64_t lost_at;         /* virtual */
    uint64_t failover_at;     /* virtual: the last failover (keys may have come back) */
    uint64_t stepped_back_at; /* virtual: its clock last stepped back (keys outlive their TTL) */
    int64_t skew_ns, step_ns;
    int32_t ppm;
    struct rkey *keys;
    unsigned nkeys, cap;
    bool log_undo; /* keep an undo log (the seed fails it over) */
    struct undo *undo;
    size_t nundo, undo_cap, undo_head;
    struct msgq stallq;
    uint64_t executed;
    struct wrecord rec[SIM_MAX_NAMES]; /* modelled in the seeds that mix kinds */
    /* Each agent's keep-alive key: until then (node clock ms; 0: none). Lost
     * with the records. */
    int64_t ka_ms[SIM_MAX_AGENTS];
    uint64_t ka_set_at[SIM_MAX_AGENTS]; /* virtual: when it last set each */
    uint64_t ka_seq[SIM_MAX_AGENTS];    /* its value: the keep-alive's sequence number */
};

/* ---- a link: one agent's connections to one node, as a backend ---- */

struct agent;

struct link {
    struct backend base; /* first: the backend is the link */
    struct sim *s;
    struct agent *ag;
    struct node *nd;
    unsigned idx; /* in sim.links */
    struct backend_events ev;
    bool have_ev;
    bool connected, subscribed, connecting, closing;
    bool cut_fence;       /* a fence-cut fault: the next write-back is lost with the connection */
    unsigned partitioned; /* the partitions that cut it off now */
    uint64_t lag;         /* added to every delay (a lag fault) */
    uint64_t epoch;       /* increases with every new connection */
    uint64_t attempt_gen; /* identifies the current connection attempt */
    unsigned attempt;     /* failed attempts in a row, for the backoff */
    struct msgq queued, inflight;
    struct msgq held; /* cut off by a partition, both ways, in order */
    size_t npending;
    uint64_t to_node_at, to_agent_at, notice_at; /* FIFO: last delivery times */
    uint64_t sub_at;                             /* the notice connection's, to the node */
    /* Release notices: the names the agent asked for on this connection,
     * and those the node holds a subscription of on it (both lost with it:
     * the core asks again). Indexed as sim.names. */
    bool want[SIM_MAX_NAMES];
    bool nsub[SIM_MAX_NAMES];
    uint64_t last_reply; /* agent clock */
    uint64_t watchdog_gen;
    bool watchdog_armed;
    uint64_t join_gen;
    /* what the command link read from INFO and CONFIG GET */
    uint64_t run_id;
    bool durable;
    uint64_t excluded_until; /* agent clock */
    /* Sentinel mode: the master generation the agent knows of (its node's
     * master_gen when it last heard of a failover): what it sends goes to
     * that master, and only that master's answers count. */
    uint64_t known_gen;
    int last_error;
    uint64_t last_rtt;
    /* Cluster mode: the link forgot a name the agent asked for (the node
     * answered MOVED or its slot moved away, or the agent's map says so),
     * as backend_events.on_unwatched. */
    void (*dropped)(void *arg, const char *name, size_t len);
    void *dropped_arg;
};

/* ---- clients ---- */

enum client_state { C_IDLE, C_WAITING, C_HOLDING, C_RELEASING, C_DONE };

struct page_slot {
    uint32_t state;
    uint64_t lease_id, fence, deadline;
    uint64_t touch;
    bool used;
};

struct sclient {
    struct core_client cc; /* first: the core's client is ours */
    struct sim *s;
    struct agent *ag;
    unsigned id;
    unsigned incarnation; /* after a crash, the client comes back as a new connection */
    uint8_t state;
    uint64_t gen; /* of its EV_CLIENT */
    uint32_t next_req;
    unsigned ops_left;
    /* the current acquire */
    uint32_t acq_req;
    unsigned acq_name;
    int64_t acq_wait_ms;
    uint64_t acq_at;    /* virtual */
    uint64_t acq_order; /* when it asked, among all asks (the order a restart resends in) */
    /* the lease it holds */
    uint64_t lease_id;
    uint32_t lease_slot;
    uint64_t lease_fence;
    unsigned lease_name;
    char lease_token[33];
    bool paused;
    bool crash_next;      /* its next event is a crash */
    bool cancel_next;     /* its next event cancels its wait */
    bool cancelling;      /* inside its cancel: DLOCK_ECANCELED expected */
    uint64_t pause_touch; /* agent clock of its last touch before the pause */
    bool releasing_sent;
    uint32_t rel_req;
    /* Sentinel mode: its agent heard of a failover at doubt_at (agent
     * clock) while it held the lease; a renewal sent from then on must
     * confirm the key before the lease shows valid again. */
    bool doubted;
    uint64_t doubt_at;
    uint64_t late_excused; /* the lease whose late-doubt window was excused */
    /* the lease's terms, for the bounded-hold and event checks */
    uint32_t acq_max_hold, acq_progress; /* asked for */
    uint64_t grant_at;                   /* agent clock */
    uint64_t hold_from;                  /* agent clock: the acquire's send, or the handoff */
    uint64_t key_since;                  /* virtual: the acquire that set the key was sent */
    uint32_t lease_ttl, hold_ms, progress_ms;
    /* The TTL of the confirmation its validity rests on: its own, or a
     * handoff's or a join's, whose validity is capped by the lease it came
     * from, that lease's if longer. */
    uint32_t key_ttl;
    /* Taken over by its agent's successor (an agent restart) and not yet
     * confirmed by a renewal the successor sent: until then shown no longer
     * than the predecessor's deadline (agent clock), and renewed at once. */
    bool adopt_pending, adopt_renew;
    uint64_t adopt_at, adopt_deadline;
    /* Progress counts from here at the latest (a takeover: touches of the
     * gap are unknown to the successor). */
    uint64_t progress_from;
    bool lost_seen, jeopardy_seen, dropping;
    bool held_due;        /* the page went from JEOPARDY to HELD: a HELD event is due */
    bool release_due;     /* LOST: the release of its key is due in the same turn */
    bool stopped;         /* renewal stopped for a bounded hold (JEOPARDY, not HELD since) */
    bool doubt_renew;     /* in doubt: a renewal is due at once (none in flight) */
    unsigned rn_inflight; /* renewals of its lease unanswered */
    uint64_t rn_start;    /* renewal rate: the current window (agent clock) */
    unsigned rn_count;
    struct page_slot page[SIM_PAGE_SLOTS];
    uint32_t gids[1];
    /* Lock kinds (the seeds that mix them): what the current acquire asks
     * for, and the lease's kind with the client's own count of its
     * re-entrant holds. */
    uint8_t acq_kind;
    bool acq_set; /* over two names (refused: multi-name is not implemented) */
    uint8_t set_buf[2 * (2 + 8)];
    uint32_t acq_permits, acq_flags, acq_ttl;
    uint64_t acq_owner;
    uint8_t lease_kind;
    uint32_t lease_permits, lease_flags;
    uint64_t lease_owner;
    unsigned holds, reenter_left;
    /* A request on the name it holds (a re-entry, or a plain acquire that
     * must get DLOCK_EHELD): answered within the call. */
    uint32_t side_req;
    bool side_pending, side_reenter;
    bool rel_nonlast;  /* a release of a re-entered lease that is not its last */
    bool rel_answered; /* the release was answered */
    bool slot_freed;   /* the lease's slot was freed (by a release or the close) */
    /* Multi-name sets (the set seeds): a set's leader (its member 0) takes
     * the set's names one at a time through its members, as
     * dlock_lease_set_acquire() does, each member one exclusive lease. */
    int set_lead;      /* the leader's index; -1: in no set */
    uint8_t set_phase; /* the leader's: SP_NONE, SP_TAKING, SP_HELD */
    unsigned set_n, set_taken;
    unsigned set_names[SIM_MAX_NAMES];   /* in the order taken */
    unsigned set_members[SIM_MAX_NAMES]; /* client indices; [0] is the leader */
    int64_t set_wait_ms;
    uint64_t set_deadline; /* virtual: a finite wait's end */
};
enum { SP_NONE, SP_TAKING, SP_HELD };

/* A lease in an agent's journal (docs: the agent records every lease it
 * grants, and a successor takes them over with core_adopt()). */
struct jentry {
    unsigned client, name;
    uint64_t lease_id, fence, deadline, hold_until, progress_ns, holder_id;
    uint32_t slot, holds, ttl_ms;
    struct admit_ask ask;
    char token[33];
};

/* A key the successor of an agent releases itself (a lease it refused, or
 * whose holder died during the gap), retried until confirmed or until the
 * key would have expired. */
struct srel {
    unsigned name;
    struct admit_ask ask;
    uint64_t expires; /* agent clock */
    bool inflight, done;
    char token[33];
};

#define SIM_JOURNAL (SIM_MAX_CLIENTS * SIM_PAGE_SLOTS)

/* A pending acquire, for the FIFO check. */
struct fifo_ent {
    unsigned client, incarnation;
    uint32_t req;
    bool forever;
    uint64_t at;
};

struct agent {
    struct sim *s;
    unsigned id;
    struct config cfg;
    struct core core;
    bool core_live;
    struct backend *be;   /* the store: one link, or the quorum over links */
    struct backend *seam; /* what the core sees: be, watched (proxy.c) */
    /* The acquire whose answer the core is handling now. */
    const char *watch_token;
    /* The renewal whose answer "done" the core is handling now (the token,
     * the send time): it confirms the lease it shows HELD again. */
    const char *confirm_token;
    uint64_t confirm_sent;
    /* The token of the lease last released per name: a grant outside an
     * acquire's answer is a cohort handoff of that key. */
    char released_token[SIM_MAX_NAMES][33];
    uint64_t released_deadline[SIM_MAX_NAMES]; /* that lease's, agent clock */
    uint32_t released_ttl[SIM_MAX_NAMES];
    bool watch_released, watch_granted;
    int64_t boot_ns; /* its CLOCK_BOOTTIME at virtual 0 */
    int32_t ppm;
    int64_t wall_skew_us;
    uint64_t tick_due, tick_gen;
    uint64_t paused_until; /* virtual: its process runs nothing before */
    uint64_t qt_due, qt_gen;
    unsigned doubts_due; /* sentinel mode: failovers it has not heard of (paused) */
    char host[16];
    /* The cohort check: the acquire in flight per name, and the grant from
     * the store whose key the handoffs pass on. */
    struct acq_rec {
        char token[33];
        uint64_t sent_at; /* agent clock */
        uint64_t sent_vt; /* virtual */
        uint64_t wall_us; /* its wall clock then: a quorum acquire's floor */
        uint32_t block;
    } acq[SIM_MAX_NAMES];
    /* The keep-alives the core sent (proxy.c): the last few, by sequence
     * number, with their send times as acq_rec has them. */
    struct ka_rec {
        uint64_t seq, sent_at, sent_vt, wall_us;
    } ka[CORE_KEEPALIVE_KEPT];
    struct cohort_rec {
        char token[33];
        uint64_t sent_at, sent_vt, wall_us, fence0;
        uint32_t block;
        unsigned handoffs; /* and shared joins */
        uint8_t kind;      /* enum lock_kind of the grant */
    } cohort[SIM_MAX_NAMES];
    /* The outage-aware liveness check: the first failure of the store since
     * it last answered an acquire or came back (agent clock; 0: none). */
    uint64_t down_since;
    bool ready_once; /* its store has reported on_ready once */
    struct fifo_ent fifo[SIM_MAX_NAMES][SIM_MAX_CLIENTS];
    unsigned nfifo[SIM_MAX_NAMES];
    /* Agent restarts: down while its process is gone; each successor is
     * one more incarnation (events of an earlier one are ignored). The
     * journal is taken at the crash; srel are the successor's releases. */
    bool down;
    uint64_t died_at; /* virtual: when its last process died */
    unsigned incarnation;
    struct jentry journal[SIM_JOURNAL];
    unsigned njournal;
    struct srel srel[SIM_JOURNAL];
    unsigned nsrel;
    uint64_t srel_gen;
};

/* ---- faults ---- */

enum fault_kind {
    F_LINK_DROP,
    F_PARTITION,    /* an agent cannot reach one node (or, quorum, several) */
    F_NODE_STALL,   /* a node answers nothing, then everything queued */
    F_RESTART,      /* a node restarts: a durable one keeps its keys */
    F_FAILOVER,     /* a node is replaced by one some ms behind */
    F_STEP_SMALL,   /* a node's clock steps forward within the drift allowance */
    F_STEP_FORWARD, /* a node's clock steps forward beyond it */
    F_STEP_BACK,    /* a node's clock steps back */
    F_AGENT_DRIFT,  /* an agent's clock runs slow beyond the drift allowance */
    F_NODE_DRIFT,   /* a node's clock runs fast beyond it */
    F_LAG,          /* an agent's messages to and from nodes take much longer */
    F_AGENT_PAUSE,  /* an agent's process stops (SIGSTOP, a long page fault), then goes on */
    F_FRESH,        /* a node was started less than max_ttl_ms before the run */
    F_SLOT_MOVE,    /* cluster: a name's slot migrates to another master, with its keys */
    F_FENCE_CUT,    /* quorum: an agent's next fencing write-back to a node is lost, and its link */
    F_AGENT_RESTART, /* an agent's process dies; a successor takes its leases over */
    F_KINDS
};
extern const char *const fault_names[F_KINDS];

struct fault {
    uint8_t kind;
    unsigned agent, node;
    unsigned nodes_mask; /* partition: which nodes */
    uint64_t start, dur; /* virtual */
    int64_t amount;      /* step ns, rollback ns, ppm */
    bool done;
};

/* What the contract excludes, as far as it happened. */
enum excl {
    X_DATA_LOSS = 1,        /* single mode: the node lost keys */
    X_UNDETECTED_LOSS = 2,  /* quorum: a node lost writes and still reads as durable */
    X_CLOCK_FORWARD = 4,    /* a node's clock stepped forward beyond the allowance */
    X_DRIFT = 8,            /* a clock ran beyond the allowance */
    X_MARK_LOST_CLOCK = 16, /* fencing: marks lost while the token's clock stood back */
    X_RESURRECT = 32,       /* a failover brought back keys already deleted */
    X_LATE_ACQUIRE = 64,    /* a stalled node ran an acquire after the agent's clean-up gave up */
    X_STEP_BACK = 128,      /* a node's clock stepped back: keys outlive their TTL */
    X_LATE_DOUBT = 256,     /* sentinel: an agent paused across a failover hears of it late */
    X_PERMIT_CLOCK = 512,   /* cluster: a slot move took permits to a master whose clock is ahead */
    X_AGENT_RESTART = 1024, /* keys of work a restarted agent lost (releases, commands in flight) */
};
#define X_BITS 11

/* What the runs reached, for the summary: that the new checks are not
 * vacuous (a cohort that used its whole block, a bounded hold that
 * stopped renewal, and so on). */
enum coverage {
    COV_BLOCK_END,        /* a handoff took the last token of its block */
    COV_HOLD_STOP,        /* renewal stopped for a maximum hold or a stalled holder */
    COV_LOST,             /* a LOST event */
    COV_OUTAGE_FAIL,      /* a waiter for ever failed after riding out an outage */
    COV_RELEASE_LAG,      /* a released key still on a node 1.2 s after its release */
    COV_RECOVERED,        /* an excuse's window ended with a lease valid and checked again */
    COV_JOIN,             /* a shared request joined the local holders' grant */
    COV_SEM_BESIDE,       /* a semaphore permit granted beside local holders of the name */
    COV_REENTER,          /* a re-entrant acquire took the holder's lease again */
    COV_EKIND,            /* an acquire answered DLOCK_EKIND */
    COV_READER_WAIT,      /* a shared acquire found the name taken for another host's writer */
    COV_REFUSED,          /* a kind the agent's store does not keep refused (DLOCK_EINVAL) */
    COV_SET_GRANT,        /* a set of names held whole */
    COV_SET_ROLLBACK,     /* a set's members given back after a failure */
    COV_CANCEL,           /* a waiter cancelled its acquire */
    COV_RESTART,          /* an agent restarted */
    COV_ADOPTED,          /* a lease taken over by a successor */
    COV_ADOPT_HELD,       /* a lease taken over, then HELD again */
    COV_ADOPT_LOST,       /* a lease taken over, then lost */
    COV_GAP_EXPIRED,      /* a lease that expired during the gap (refused, LOST) */
    COV_GRANT_ON_RELEASE, /* a release handed the key over to a waiting host's entry */
    COV_GRANT_BY_MESSAGE, /* a lease granted from a grant on release's message */
    COV_ADOPTED_GRANT,    /* an acquire took a key a release had handed to it */
    COV_COUNT
};
extern const char *const coverage_names[COV_COUNT];

/* ---- the world ---- */

enum sim_mode { MODE_ANY, MODE_SINGLE, MODE_QUORUM, MODE_SENTINEL, MODE_CLUSTER };

/* Cluster mode: a hash slot of the run's names, where it truly is. */
struct cslot {
    unsigned slot;
    int owner;  /* node */
    int mig_to; /* node it migrates to (IMPORTING there, MIGRATING on owner); -1: none */
};

/* Cluster mode: a node's answer that is not the script's. */
enum redirect { R_NONE, R_MOVED, R_ASK, R_TRYAGAIN };

struct sim_opts {
    enum sim_mode mode;
    bool trace; /* print every event */
    bool ring;  /* keep the last events for a report */
    const char *bug;
    bool expect_violation;
    bool quiet;
};

#define TRACE_RING 400

struct sim_result {
    bool violation;
    bool excused; /* a violation was seen, but after a fault the contract excludes */
    char what[512];
    uint64_t digest;
    uint64_t end_time;
    uint64_t grants;
    unsigned faults_seen[F_KINDS];
    unsigned excused_count;
    uint64_t events;
    unsigned cov[COV_COUNT];
    unsigned excused_mutex, excused_fence, excused_orphan, excused_late;
    bool quorum;
    bool sentinel;
    bool cluster;
    unsigned nnodes;
    bool fault_free;
    bool restarted; /* an agent restarted */
};

struct sim {
    uint64_t seed;
    struct sim_opts opts;
    struct rng rng;
    uint64_t now, seq;
    struct event *heap;
    size_t nheap, heap_cap;
    uint64_t digest;
    uint64_t msg_ids;
    LIST_HEAD(, msg) all_msgs;
    bool quorum;
    bool sentinel;      /* one node whose failovers the agents hear of (doubt) */
    bool stale_answers; /* sentinel: renewals answered by the old master get through */
    bool cluster;       /* nodes are the masters of a Redis Cluster (cluster.c) */
    struct cslot cslots[SIM_MAX_NAMES];
    unsigned ncslots;
    unsigned name_cslot[SIM_MAX_NAMES]; /* index into cslots */
    /* The master generation a failover of a node that served the name gave
     * it (0: none): an agent whose link knows an older one has not heard of
     * it yet, wherever the slot has gone since. */
    uint64_t cl_fail_gen[SIM_MAX_NAMES][SIM_MAX_NODES];
    unsigned nnodes, nagents, nclients, nnames;
    struct node nodes[SIM_MAX_NODES];
    struct agent agents[SIM_MAX_AGENTS];
    struct link links[SIM_MAX_AGENTS * SIM_MAX_NODES];
    struct sclient clients[SIM_MAX_CLIENTS];
    struct fault faults[SIM_MAX_FAULTS];
    unsigned nfaults;
    char names[SIM_MAX_NAMES][8];
    char lock_keys[SIM_MAX_NAMES][16]; /* "dlock:NAME" */
    /* network profile */
    uint64_t delay_lo, delay_hi;
    unsigned slow_percent;
    /* the schedule */
    uint64_t run_end;
    bool running; /* clients start new work */
    bool settling;
    uint64_t hard_end;
    uint32_t ttl_lo, ttl_hi;
    /* checker */
    unsigned excl;       /* X_* that happened */
    char excl_text[256]; /* the first of each, named */
    /* Until when (virtual) each X_* excuses what it may cause: about one
     * max_ttl after the fault, for ever for a clock that runs beyond the
     * allowance. Past it, the checks see the core's recovery. */
    uint64_t excl_until[X_BITS];
    uint64_t me_quiet_until, fence_quiet_until; /* an excused violation's window */
    uint64_t last_fence[SIM_MAX_NAMES];
    bool fence_seen[SIM_MAX_NAMES];
    uint64_t last_fence_at[SIM_MAX_NAMES];   /* virtual time of that grant */
    uint64_t last_fence_sent[SIM_MAX_NAMES]; /* virtual: when its acquire was sent */
    /* The same for the exclusive grants alone: a shared or semaphore
     * grant's token is above every earlier exclusive grant's. */
    uint64_t excl_fence[SIM_MAX_NAMES];
    bool excl_seen[SIM_MAX_NAMES];
    uint64_t excl_fence_at[SIM_MAX_NAMES];
    uint64_t excl_fence_sent[SIM_MAX_NAMES];
    /* Lock kinds: the seed mixes them (and the nodes keep the waiting-hosts
     * record); each name's mix and its semaphore's permits. */
    bool kinds;
    uint8_t name_mix[SIM_MAX_NAMES];
    uint32_t name_permits[SIM_MAX_NAMES];
    /* Until when (virtual) each counted kind (0: shared, N: a semaphore of
     * N permits) was asked for or held on each name, for DLOCK_EKIND. */
    uint64_t kind_until[SIM_MAX_NAMES][SIM_KIND_SIGS];
    /* The tokens of the counted grants (unique per name). */
    struct cgrant {
        unsigned name;
        uint64_t fence, at, sent; /* virtual: granted, its acquire sent */
    } * cgrants;
    size_t ncgrants, cgrants_cap;
    bool wall_apart;    /* the agents' wall clocks disagree */
    bool any_step_back; /* a node clock ever stepped back */
    /* Releases the cores sent: each must reach every node it can (the
     * release check). */
    struct rel_intent {
        char token[33];
        unsigned agent, name;
        uint64_t at;       /* virtual */
        uint64_t give_up;  /* agent clock: the core retries until then */
        unsigned inflight; /* attempts sent and not answered yet */
        uint64_t done_at;  /* virtual: the last attempt was answered */
        bool dead;         /* its agent restarted: nobody retries it */
    } * intents;
    size_t nintents, intents_cap;
    /* Every grant's token and virtual time, for the quorum key-life rule. */
    struct grant_rec {
        char token[33];
        uint64_t at;
    } * grants;
    size_t ngrants, grants_cap;
    uint64_t healthy_since[SIM_MAX_AGENTS * SIM_MAX_NODES]; /* virtual; UINT64_MAX: not now */
    /* A run without faults whose agents retry after "taken" only when the
     * holder's key expires (the fallback is a minute): the wake-up check. */
    bool notices_only;
    uint64_t wake_due[SIM_MAX_AGENTS][SIM_MAX_NAMES]; /* virtual; 0: none */
    char late[SIM_MAX_LATE][33]; /* tokens of acquires that ran after they failed */
    unsigned nlate;
    /* Tokens of work agents lost when they restarted: releases not
     * confirmed, acquires in flight (their keys lapse by their TTL). */
    char (*lost_tokens)[33];
    size_t nlost, lost_cap;
    uint64_t ask_seq; /* counts the clients' asks */
    struct sim_result *res;
    bool stop;
    /* A core caught in a loop within one call (a renewal storm at one
     * instant) is left through here once the violation is reported. */
    jmp_buf wedge;
    bool wedge_armed;
    /* trace */
    char (*ring)[160];
    unsigned ring_n, ring_pos;
};

/* world.c */
void ev_push(struct sim *s, uint64_t time, uint16_t type, uint32_t a, uint64_t b, void *p);
bool ev_pop(struct sim *s, struct event *out);
uint64_t agent_clock(const struct agent *ag, uint64_t t);
uint64_t agent_now(const struct agent *ag);
uint64_t agent_virt(const struct agent *ag, uint64_t due); /* first virtual time at due */
uint64_t agent_wall_us(const struct agent *ag);
int64_t node_clock_ns(const struct node *nd);
uint64_t net_delay(struct sim *s);
void tracef(struct sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TRACE(s, ...)                                                                              \
    do {                                                                                           \
        if ((s)->opts.trace || (s)->opts.ring)                                                     \
            tracef((s), __VA_ARGS__);                                                              \
    } while (0)
/* Reports a violation; true when an excluded fault excuses it (then
 * *until, if given, is when the excuse ends). */
bool violation(struct sim *s, const char *kind, unsigned excl_mask, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
uint64_t excuse_until(const struct sim *s, unsigned excl_mask); /* 0: not excused now */
void excl_note(struct sim *s, unsigned bit, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* redis.c */
void node_init(struct sim *s, struct node *nd, unsigned id);
void node_free(struct node *nd);
void node_arrive(struct node *nd, struct msg *m);
void node_restart(struct node *nd, uint64_t down_ns);
void node_failover(struct node *nd, uint64_t rollback_ns, uint64_t down_ns);
void node_stall_end(struct node *nd);
void node_preload(struct node *nd, const char *name, uint64_t legacy, uint64_t mark);
bool node_key_live(const struct node *nd, const struct rkey *k);
void node_keys_present(struct node *nd, const struct msg *m, unsigned *nkeys, unsigned *present);
bool node_migrate_one(struct node *src, struct node *dst, unsigned slot);
bool node_key_expired(const struct node *nd, const struct rkey *k);
bool node_key_holds(const struct node *nd, const struct rkey *k, const char *token);
/* The key of that name on nd, unless it is absent or expired (the
 * checker's read: nothing is removed). */
const struct rkey *node_key(const struct node *nd, const char *name);
extern bool sim_bug_release_no_compare;
extern bool sim_bug_no_confirm;
extern bool sim_bug_counted_renew_shortens;
extern bool sim_bug_counted_no_mismatch;
extern bool sim_bug_set_unsorted;
extern bool sim_bug_bound_ignores_keepalive;
extern bool sim_bug_grant_lapsed_keepalive;

/* sim.c */
bool sim_quorum_available(void);
void sim_released(struct sim *s, const char *name,
                  size_t len); /* a node deleted a key, notifying */
void sim_acquire_sent(struct agent *ag, const struct backend_req *req);
void sim_acquire_answered(struct agent *ag, const struct backend_result *r);
/* true: a storm, leave the core; *who: the client it is counted for (-1:
 * none; -2 - id: one of several holders of its key) */
bool sim_renew_sent(struct agent *ag, const char *token, uint32_t ttl_ms, int *who);
void sim_renew_answered(struct agent *ag, const char *token, int who, uint64_t sent_at,
                        const struct backend_result *r);
void sim_wedged(struct sim *s) __attribute__((noreturn));
int sim_release_sent(struct agent *ag, const struct backend_req *req); /* its intent, or -1 */
void sim_release_answered(struct sim *s, int intent);
int sim_run(uint64_t seed, const struct sim_opts *opts, struct sim_result *res);

/* cluster.c */
bool cluster_seed(uint64_t seed);
void cluster_setup(struct sim *s); /* after the nodes and agents' configurations */
struct backend *cluster_backend_new(struct agent *ag, const struct backend_events *ev);
void cluster_event(struct sim *s, const struct event *e);
bool cluster_failover(struct sim *s, struct fault *f); /* false: skipped */
void cluster_slot_move(struct sim *s, struct fault *f);
void cluster_slot_move_end(struct sim *s, struct fault *f);
enum redirect cluster_route(struct node *nd, const struct msg *m, unsigned *to);
bool cluster_serves(const struct sim *s, unsigned name, unsigned node);
bool cluster_unheard(const struct agent *ag, unsigned name);
extern bool sim_bug_cluster_no_doubt;
extern bool sim_bug_cluster_ask_as_moved;
extern bool sim_bug_cluster_stale_owner;

/* proxy.c */
struct backend *proxy_new(struct agent *ag, struct backend *inner);
/* A renewal sent at sent_at (agent clock) found the key of token: its
 * answer is being handled (token NULL: handled). */
void sim_renewed(struct agent *ag, const char *token, uint64_t sent_at);

/* link.c */
void link_init(struct sim *s, struct link *l, struct agent *ag, struct node *nd, unsigned idx);
void link_set_events(struct link *l, const struct backend_events *ev);
void link_start(struct link *l);
void link_drop(struct link *l, const char *why); /* the agent sees the connection lost */
void link_set_partition(struct link *l, bool on);
void link_event(struct sim *s, const struct event *e);
void link_reply(struct msg *m); /* the node answered m */
void link_node_down(struct link *l);
void link_doubt(struct link *l); /* sentinel: the agent gives the old master up */
void link_publish(struct link *l, const char *name, size_t len);
/* A grant on release's message on the name's channel (m: its fields). */
void link_publish_grant(struct link *l, const struct msg *g);
/* Cluster mode: the agent's map moved the slots set in cslots off l's node. */
void link_unwatch_cslots(struct link *l, const bool *cslots);
void link_sunsubscribe(struct link *l, unsigned idx); /* cluster: the node ends it */
void link_subscription(struct msg *m);                /* the node runs a SUBSCRIBE or UNSUBSCRIBE */
int sim_name_index(const struct sim *s, const char *name, size_t len); /* -1: none */
void msg_maybe_free(struct msg *m);
void link_teardown(struct link *l);
void link_restart(struct link *l); /* the agent's successor connects afresh */

#endif
