/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_agent.c -- libFuzzer target: client connections' bytes through dlockd's
 * own loop (agent/shell/agent.c), front (front/server.c) and lock core, with a
 * store stub in place of Redis: this file's backend_new() is linked instead
 * of backend/backends.c's, and the rest of the agent is the real one.
 *
 * Each input gets a fresh agent on its own socket in a private directory.
 * The first byte picks the stub's answers; the rest is a stream of frames,
 * written one frame at a time to one of three client connections (each
 * frame's length comes from its own header), the loop run until the agent
 * is done with it. A frame of type 0xFFFF is no frame: it tells the harness
 * what to do (see control()). At the end every connection is shut down,
 * the agent closes them, and the agent is freed: leaks show.
 *
 * What the agent writes back must be well-formed frames of the agent's kinds,
 * and once every client is gone, every key the store granted must have been
 * released (or found gone), unless the store failed meanwhile (a release
 * may then wait for a retry); anything else aborts. */
#include <errno.h>
#include <ev.h>
#include <linux/sockios.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"
#include "backends.h"
#include "dlock.h"
#include "log.h"
#include "shm.h"
#include "util.h"
#include "wire.h"

#define NPEERS       3
#define CONTROL_TYPE 0xffffu
#define SETTLE_MAX   200 /* loop turns for one frame, at most */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ev_loop *loop;
static struct config cfg;
static struct policy policy, strict; /* as configured, and after a "reload" */
static char dir[64];
static bool stopped; /* the agent shut down (SIGTERM) */

/* ---- the store stub ---- */

enum op_kind {
    OP_ACQUIRE = BACKEND_ACQUIRE,
    OP_RENEW = BACKEND_RENEW,
    OP_RELEASE = BACKEND_RELEASE,
    OP_FENCE = BACKEND_FENCE,
    OP_NOTICE
};

struct stub_op {
    struct stub_op *next;
    enum op_kind kind;
    backend_cb cb;
    void *arg;
    char token[33]; /* the key's token (acquire, renew, release) */
    size_t len;
    char name[]; /* OP_NOTICE */
};

struct stub {
    struct backend base;
    struct backend_events ev;
    ev_idle idle; /* active while answers or news are due */
    struct stub_op *head, **tail;
    size_t pending;
    uint8_t script;   /* two bits per answer: which outcome */
    unsigned answers; /* answered so far */
    uint64_t fence;
    bool tell_ready; /* on_ready is due: at start, and after an error */
    bool failed;     /* an answer was an error */
    bool closing;
    /* The tokens of the keys the store holds for the agent: granted, and
     * neither released nor found gone by a renewal since. */
    char (*held)[33];
    size_t nheld, held_cap;
};

static struct stub *the_stub;

static int stub_queue(struct stub *s, enum op_kind kind, const struct backend_req *req,
                      backend_cb cb, void *arg, const char *name, size_t len)
{
    if (s->closing)
        return DLOCK_EUNAVAIL;
    struct stub_op *op = calloc(1, sizeof *op + len);
    if (!op)
        return DLOCK_ENOMEM;
    op->kind = kind;
    op->cb = cb;
    op->arg = arg;
    if (req && req->token)
        snprintf(op->token, sizeof op->token, "%s", req->token);
    op->len = len;
    if (len)
        memcpy(op->name, name, len);
    *s->tail = op;
    s->tail = &op->next;
    s->pending++;
    ev_idle_start(loop, &s->idle);
    return 0;
}

/* The store's record of the keys it holds for the agent. */
static void key_held(struct stub *s, const char *token)
{
    if (s->nheld == s->held_cap) {
        size_t cap = s->held_cap ? 2 * s->held_cap : 16;
        char(*v)[33] = realloc(s->held, cap * sizeof *v);
        if (!v)
            abort();
        s->held = v;
        s->held_cap = cap;
    }
    memcpy(s->held[s->nheld++], token, 33);
}

static void key_gone(struct stub *s, const char *token)
{
    for (size_t i = 0; i < s->nheld; i++) {
        if (strcmp(s->held[i], token) == 0) {
            memcpy(s->held[i], s->held[--s->nheld], 33);
            return;
        }
    }
}

/* The next answer, by two bits of the input's first byte: acquires are
 * granted, taken or fail; the rest are done, not ours, or fail. */
static struct backend_result stub_answer(struct stub *s, const struct stub_op *op)
{
    unsigned pick = (s->script >> (2 * (s->answers++ % 4))) & 3;
    struct backend_result r = {.at = now_ns()};
    if (pick == 2) {
        r.err = DLOCK_EUNAVAIL;
        s->failed = true;
        s->tell_ready = true; /* "reconnected" at the next turn */
    } else if (op->kind == OP_ACQUIRE && pick == 1) {
        r.outcome = BACKEND_TAKEN;
        r.pttl_ms = s->answers % 50;
    } else if (op->kind == OP_ACQUIRE) {
        key_held(s, op->token);
        r.outcome = BACKEND_DONE;
        r.fence = (s->fence += 100);
    } else {
        /* A release deletes the key, a renewal may find it gone. */
        if (op->kind == OP_RELEASE || (op->kind == OP_RENEW && pick == 1))
            key_gone(s, op->token);
        r.outcome = pick == 1 ? BACKEND_NOT_OURS : BACKEND_DONE;
    }
    return r;
}

/* Answers what was asked before this turn (what the answers ask in turn
 * waits for the next one), as Redis would. */
static void on_stub_idle(struct ev_loop *l, ev_idle *w, int revents)
{
    struct stub *s = w->data;
    struct stub_op *op = s->head;
    s->head = NULL;
    s->tail = &s->head;
    ev_idle_stop(l, w);
    if (s->tell_ready) {
        s->tell_ready = false;
        s->ev.on_ready(s->ev.arg);
    }
    while (op) {
        struct stub_op *next = op->next;
        s->pending--;
        if (op->kind == OP_NOTICE) {
            s->ev.on_notice(s->ev.arg, op->name, op->len, NULL);
        } else {
            /* A release nobody waits for is carried out all the same. */
            struct backend_result r = stub_answer(s, op);
            if (op->cb)
                op->cb(op->arg, &r);
        }
        free(op);
        op = next;
    }
}

static int stub_op(struct backend *b, const struct backend_req *req, backend_cb cb, void *arg)
{
    return stub_queue((struct stub *)b, (enum op_kind)req->op, req, cb, arg, NULL, 0);
}

/* A subscription is confirmed with a notice for the name (backend.h). */
static int stub_watch(struct backend *b, const char *name, size_t len, bool on)
{
    return on ? stub_queue((struct stub *)b, OP_NOTICE, NULL, NULL, NULL, name, len) : 0;
}

static void stub_leave(struct backend *b, const struct backend_req *req)
{
}

static int stub_lookup(struct backend *b, const char *name, size_t len, backend_lookup_cb cb,
                       void *arg)
{
    return DLOCK_EUNAVAIL;
}

static void stub_flush(struct backend *b)
{
}

static size_t stub_pending(const struct backend *b)
{
    return ((const struct stub *)b)->pending;
}

static size_t stub_nodes(const struct backend *b, struct backend_node *out, size_t max)
{
    if (max)
        *out = (struct backend_node){.addr = "stub", .connected = true, .subscribed = true};
    return 1;
}

/* What is still asked is answered with an error, as the contract wants
 * (core.h, core_free()). */
static void stub_destroy(struct backend *b)
{
    struct stub *s = (struct stub *)b;
    s->closing = true;
    ev_idle_stop(loop, &s->idle);
    while (s->head) {
        struct stub_op *op = s->head;
        s->head = op->next;
        if (op->kind != OP_NOTICE && op->cb) {
            struct backend_result r = {.err = DLOCK_EUNAVAIL, .at = now_ns()};
            op->cb(op->arg, &r);
        }
        free(op);
    }
    the_stub = NULL;
    free(s->held);
    free(s);
}

static const struct backend_ops stub_ops = {
    .op = stub_op,
    .watch = stub_watch,
    .leave = stub_leave,
    .lookup = stub_lookup,
    .flush = stub_flush,
    .pending = stub_pending,
    .nodes = stub_nodes,
    .destroy = stub_destroy,
};

/* agent_init() makes its store here. */
struct backend *backend_new(struct ev_loop *l, const struct config *c,
                            const struct backend_events *ev)
{
    struct stub *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base.ops = &stub_ops;
    s->ev = *ev;
    s->tail = &s->head;
    s->tell_ready = true;
    ev_idle_init(&s->idle, on_stub_idle);
    s->idle.data = s;
    ev_idle_start(l, &s->idle);
    the_stub = s;
    return &s->base;
}

/* ---- the client side ---- */

struct peer {
    int fd;          /* -1: not connected */
    bool eof;        /* the agent closed the connection */
    bool deaf;       /* reads none of the agent's replies */
    bool hello_ok;   /* the agent said HELLO_OK */
    uint64_t *touch; /* the touch page, once HELLO_OK brought it */
    size_t touch_len;
    struct wire_buf in; /* what the agent wrote, not yet checked */
};

static struct peer peers[NPEERS];

/* Whether the agent's bytes so far are whole frames of its kinds, with
 * bodies that decode (a frame cut at the end of the buffer waits); HELLO_OK
 * comes once, before anything but the ERROR that refuses the handshake. */
static void check_frames(struct peer *p)
{
    size_t off = 0;
    for (;;) {
        struct wire_hdr h;
        int got = wire_hdr_decode(p->in.data + off, p->in.len - off, WIRE_MAX_BODY, &h);
        if (got < 0)
            abort(); /* the agent wrote a malformed header */
        if (got == 0 || p->in.len - off < WIRE_HDR_LEN + (size_t)h.len)
            break;
        const uint8_t *body = p->in.data + off + WIRE_HDR_LEN;
        struct wire_hello_ok ok;
        struct wire_granted g;
        struct wire_error e;
        struct wire_event ev;
        bool good = false;
        if (!p->hello_ok && h.type != WIRE_T_HELLO_OK && h.type != WIRE_T_ERROR)
            abort(); /* an answer before the handshake */
        switch (h.type) {
        case WIRE_T_HELLO_OK:
            good = !p->hello_ok && wire_get_hello_ok(body, h.len, &ok) == 0 &&
                   ok.version >= WIRE_VERSION_MIN && ok.version <= WIRE_VERSION &&
                   ok.max_leases == cfg.max_leases_per_conn;
            p->hello_ok = true;
            break;
        case WIRE_T_GRANTED:
            good = wire_get_granted(body, h.len, &g) == 0 && g.slot < cfg.max_leases_per_conn;
            break;
        case WIRE_T_OK:
            good = h.len == 0;
            break;
        case WIRE_T_ERROR:
            good = wire_get_error(body, h.len, &e) == 0 && e.code < 0 && e.code >= DLOCK_ERRNO_MIN;
            break;
        case WIRE_T_EVENT:
            good = wire_get_event(body, h.len, &ev) == 0 && h.id == 0 &&
                   ev.state >= DLOCK_STATE_HELD && ev.state <= DLOCK_STATE_RELEASED;
            break;
        }
        if (!good)
            abort(); /* a frame no client could read */
        off += WIRE_HDR_LEN + h.len;
    }
    wire_buf_consume(&p->in, off);
}

/* Keeps the touch page of HELLO_OK (the lease page is the client's to read
 * only: closed). */
static void take_fds(struct peer *p, struct msghdr *m)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int fds[4];
        memcpy(fds, CMSG_DATA(c), (n < 4 ? n : 4) * sizeof(int));
        for (size_t i = 0; i < n && i < 4; i++) {
            if (i == 1 && !p->touch) {
                size_t len = shm_touch_size(cfg.max_leases_per_conn);
                void *t = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
                if (t != MAP_FAILED) {
                    p->touch = t;
                    p->touch_len = len;
                }
            }
            close(fds[i]);
        }
    }
}

/* Reads what the agent wrote; true when something came. */
static bool peer_read(struct peer *p)
{
    if (p->fd < 0 || p->eof || p->deaf)
        return false;
    bool any = false;
    for (;;) {
        uint8_t buf[8192];
        union {
            struct cmsghdr hdr;
            char b[CMSG_SPACE(4 * sizeof(int))];
        } u;
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
        ssize_t n = recvmsg(p->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return any;
        if (n < 0) {
            p->eof = true; /* ECONNRESET: the agent closed with input unread */
            return true;
        }
        take_fds(p, &m);
        if (n == 0) {
            p->eof = true;
            return true;
        }
        any = true;
        size_t need = p->in.len + (size_t)n;
        if (need > p->in.cap) {
            uint8_t *d = realloc(p->in.data, need);
            if (!d)
                abort();
            p->in.data = d;
            p->in.cap = need;
        }
        memcpy(p->in.data + p->in.len, buf, (size_t)n);
        p->in.len += (size_t)n;
        check_frames(p);
    }
}

/* Bytes written to p that the agent has not read yet. */
static int peer_unread(const struct peer *p)
{
    int n = 0;
    if (p->fd < 0 || p->eof || ioctl(p->fd, SIOCOUTQ, &n) != 0)
        return 0;
    return n;
}

/* Runs the loop until the store stub has answered and two turns went by
 * in which the agent read nothing more and wrote nothing more (a client
 * that does not read its replies may leave it with input it does not take). */
static void settle(struct agent *a)
{
    int quiet = 0;
    long last = -1;
    for (int turn = 0; turn < SETTLE_MAX && quiet < 2; turn++) {
        ev_run(loop, EVRUN_NOWAIT);
        bool busy = the_stub && the_stub->pending;
        long unread = 0;
        for (int i = 0; i < NPEERS; i++) {
            busy |= peer_read(&peers[i]);
            unread += peer_unread(&peers[i]);
        }
        busy |= unread != last;
        last = unread;
        quiet = busy ? 0 : quiet + 1;
    }
}

static void peer_close(struct peer *p)
{
    if (p->fd >= 0)
        close(p->fd);
    if (p->touch)
        munmap(p->touch, p->touch_len);
    wire_buf_free(&p->in);
    *p = (struct peer){.fd = -1};
}

/* Connects p and lets the agent accept it (or refuse it at a limit). The
 * agent's end of the socket gets a small send buffer: a client that does not
 * read soon leaves replies queued in the agent, against its caps. */
static void peer_connect(struct agent *a, struct peer *p)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", cfg.socket);
    p->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (p->fd < 0)
        abort(); /* the harness' own failure, not the agent's */
    if (connect(p->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        p->eof = true; /* the agent stopped listening */
        return;
    }
    uint32_t before = a->server.nconns;
    settle(a);
    if (a->server.nconns > before) {
        int size = 4096;
        setsockopt(LIST_FIRST(&a->server.conns)->fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    }
}

/* Writes one frame (or the rest of the input) to p, waiting for the agent
 * to read while the socket is full. */
static void peer_write(struct agent *a, struct peer *p, const uint8_t *d, size_t n)
{
    for (int tries = 0; n && !p->eof && tries < 100; tries++) {
        ssize_t w = send(p->fd, d, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            d += w;
            n -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            break; /* the agent closed the connection */
        }
        settle(a);
    }
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A frame of type 0xFFFF: id's low byte says what to do, its next byte
 * with what. */
static void control(struct agent *a, int *cur, uint32_t id, const uint8_t *body, size_t len)
{
    unsigned arg = (id >> 8) & 0xff;
    switch (id & 0xff) {
    case 0: /* write to another connection from now on */
        *cur = (int)(arg % NPEERS);
        break;
    case 1: /* the store's notice subscription was set up again */
        if (the_stub)
            the_stub->ev.on_subscribed(the_stub->ev.arg);
        break;
    case 2: /* the store failed over: every lease is in doubt */
        if (the_stub && the_stub->ev.on_doubt)
            the_stub->ev.on_doubt(the_stub->ev.arg, NULL, NULL);
        break;
    case 3: /* the client goes away at once (connects again when next written) */
        peer_close(&peers[*cur]);
        break;
    case 4: /* time passes: up to 31 ms, timers run */
        ev_sleep((arg % 32) / 1000.0);
        break;
    case 5: /* the client touches a slot of its lease page with any value */
        if (peers[*cur].touch && len >= 8) {
            uint64_t v;
            memcpy(&v, body, 8);
            size_t slots = peers[*cur].touch_len / sizeof v;
            peers[*cur].touch[arg % slots] = v;
        }
        break;
    case 6: /* a store event out of turn: the store is back */
        if (the_stub)
            the_stub->ev.on_ready(the_stub->ev.arg);
        break;
    case 7: /* the client stops reading its replies, or reads them again */
        peers[*cur].deaf = !peers[*cur].deaf;
        break;
    case 8: /* SIGHUP: a stricter policy, or the first one again */
        cfg.policy = arg & 1 ? policy : strict;
        agent_policy_changed(a);
        break;
    case 9: /* SIGTERM: the agent releases everything and stops */
        agent_shutdown(a);
        ev_run(loop, 0); /* until it is done (shutdown_timeout_ms at most) */
        stopped = true;
        break;
    }
    if (!stopped)
        settle(a);
}

static void remove_dir(void)
{
    rmdir(dir); /* each agent removed its socket */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    signal(SIGPIPE, SIG_IGN);
    /* Quiet, unless one input is being looked at. */
    log_set_level(getenv("DLOCK_FUZZ_VERBOSE") ? LOG_DEBUG : LOG_ERROR);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dlock-fuzz-XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(dir))
        abort();
    atexit(remove_dir);
    config_defaults(&cfg);
    snprintf(cfg.socket, sizeof cfg.socket, "%s/a.sock", dir);
    cfg.status_socket[0] = '\0';
    cfg.metrics_listen[0] = '\0';
    /* Small limits, so that inputs reach them. */
    cfg.max_leases_per_conn = 8;
    cfg.max_waiters_per_conn = 4;
    cfg.max_connections = 8;
    cfg.policy.max_connections_per_uid = 2; /* the third connection is refused */
    cfg.policy.max_leases_per_uid = 12;
    cfg.policy.max_waiters_per_uid = 6;
    cfg.shutdown_timeout_ms = 50;
    char err[300];
    if (config_set(&cfg, "policy", "allow", "* a* l* x/*", err, sizeof err) != 0 ||
        config_validate(&cfg, err, sizeof err) != 0 ||
        config_set(&cfg, "policy", "allow", "* x/*", err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_agent: %s\n", err);
        abort();
    }
    strict = cfg.policy;
    strict.nrules = 0;
    /* The rule just added is the only one of the strict policy. */
    strict.rules[strict.nrules++] = cfg.policy.rules[cfg.policy.nrules - 1];
    cfg.policy.nrules--;
    /* Below what dlockd -n allows: a few replies fill it. */
    cfg.policy.max_output_per_uid = 512;
    strict.max_output_per_uid = 512;
    policy = cfg.policy;
    loop = EV_DEFAULT;
    for (int i = 0; i < NPEERS; i++)
        peers[i] = (struct peer){.fd = -1};
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static struct agent a;
    cfg.policy = policy;
    stopped = false;
    if (agent_init(&a, loop, &cfg, false) != 0)
        abort();
    the_stub->script = data[0];
    data++;
    size--;
    settle(&a);
    int cur = 0;
    while (size && !stopped) {
        size_t n = size;
        uint32_t len = 0, id = 0;
        uint16_t type = 0;
        if (size >= WIRE_HDR_LEN) {
            len = get32(data);
            type = (uint16_t)(data[4] | data[5] << 8);
            id = get32(data + 8);
            if (len < size - WIRE_HDR_LEN)
                n = WIRE_HDR_LEN + len;
        }
        if (type == CONTROL_TYPE) {
            control(&a, &cur, id, data + WIRE_HDR_LEN, n - WIRE_HDR_LEN);
        } else {
            if (peers[cur].fd < 0 && !peers[cur].eof)
                peer_connect(&a, &peers[cur]);
            if (peers[cur].fd >= 0)
                peer_write(&a, &peers[cur], data, n);
        }
        data += n;
        size -= n;
    }
    /* Every client is done: it reads what is left, and the agent closes
     * each connection. */
    for (int i = 0; i < NPEERS; i++) {
        peers[i].deaf = false;
        if (peers[i].fd >= 0)
            shutdown(peers[i].fd, SHUT_WR);
    }
    for (int turn = 0; turn < 10 && a.server.nconns; turn++)
        settle(&a);
    if (!a.server.nconns && !the_stub->pending && !the_stub->failed && the_stub->nheld) {
        fprintf(stderr,
                "fuzz_agent: every client is gone, and the store still holds %zu key(s) "
                "for the agent, first token %s\n",
                the_stub->nheld, the_stub->held[0]);
        abort();
    }
    agent_free(&a);
    for (int i = 0; i < NPEERS; i++)
        peer_close(&peers[i]);
    return 0;
}
