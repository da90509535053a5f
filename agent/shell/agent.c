/* SPDX-License-Identifier: BSD-3-Clause */
/* agent.c -- dlockd's driver: the libev loop around the lock core. Client
 * requests and closed connections, backend answers and events, and the one
 * CLOCK_BOOTTIME timer reach the core here, each with the time now; the
 * core's effects (answers, events, lease pages) go out to the connections
 * through the core_env below. */
#include "agent.h"

#include <errno.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends.h"
#include "dlock.h"
#include "leasepage.h"
#include "log.h"
#include "svcjob.h"
#include "text.h"
#include "unixsock.h"
#include "util.h"

#define conn_of(client) ((struct conn *)((char *)(client)-offsetof(struct conn, cc)))
#define agent_of(conn)  ((struct agent *)((char *)(conn)->srv - offsetof(struct agent, server)))

/* ---- the core's effects, on connections and their lease pages ---- */

/* A reply or event was queued for a client: it goes out as soon as the event
 * being handled is done, not after every other event of this loop turn. A
 * grant that came with one node's answer must not wait while the loop reads
 * the answers of slower nodes, or notices, or other clients. The replies of
 * one event still leave together, and Redis commands keep their batch (they
 * go out before the loop blocks). */
static void reply_soon(struct conn *c)
{
    struct agent *a = agent_of(c);
    if (!a->in_prepare && !ev_is_pending(&a->reply_flush))
        ev_feed_event(a->loop, &a->reply_flush, EV_CUSTOM);
}

static void on_reply_flush(struct ev_loop *loop, ev_idle *w, int revents)
{
    struct agent *a = w->data;
    server_flush(&a->server);
}

static void env_granted(void *arg, struct core_client *c, uint32_t req_id,
                        const struct wire_granted *g)
{
    conn_send_granted(conn_of(c), req_id, g);
    reply_soon(conn_of(c));
}

static void env_error(void *arg, struct core_client *c, uint32_t req_id, int code, const char *msg)
{
    conn_send_error(conn_of(c), req_id, code, msg);
    reply_soon(conn_of(c));
}

static void env_ok(void *arg, struct core_client *c, uint32_t req_id)
{
    conn_send_ok(conn_of(c), req_id);
    reply_soon(conn_of(c));
}

static void env_event(void *arg, struct core_client *c, const struct wire_event *ev)
{
    conn_send_event(conn_of(c), ev);
    reply_soon(conn_of(c));
}

static uint32_t env_slot_alloc(void *arg, struct core_client *c)
{
    return lease_page_alloc(&conn_of(c)->page);
}

static void env_slot_free(void *arg, struct core_client *c, uint32_t slot)
{
    lease_page_free(&conn_of(c)->page, slot);
}

static void env_slot_write(void *arg, struct core_client *c, uint32_t slot, uint32_t state,
                           uint64_t lease_id, uint64_t fence, uint64_t deadline)
{
    lease_page_write(&conn_of(c)->page, slot, state, lease_id, fence, (int64_t)deadline);
}

static uint64_t env_slot_touched(void *arg, struct core_client *c, uint32_t slot)
{
    return lease_page_touched(&conn_of(c)->page, slot);
}

static void env_lease_kept(void *arg, struct core_client *c, const struct lease *le, bool live)
{
    persist_lease(&agent_of(conn_of(c))->persist, conn_of(c), le, live);
}

static int env_random(void *arg, uint64_t *out)
{
    return random_bytes(out, sizeof *out);
}

static const struct core_env agent_env = {
    .granted = env_granted,
    .error = env_error,
    .ok = env_ok,
    .event = env_event,
    .slot_alloc = env_slot_alloc,
    .slot_free = env_slot_free,
    .slot_write = env_slot_write,
    .slot_touched = env_slot_touched,
    .lease_kept = env_lease_kept,
    .random = env_random,
};

/* ---- the server's hooks: requests and closed connections ---- */

static void agent_acquire(void *arg, struct conn *c, uint32_t id, const struct wire_acquire *m)
{
    struct agent *a = arg;
    core_acquire(&a->core, &c->cc, id, m, now_ns());
}

static void agent_release(void *arg, struct conn *c, uint32_t id, uint64_t lease_id)
{
    struct agent *a = arg;
    core_release(&a->core, &c->cc, id, lease_id, now_ns());
}

static void agent_cancel(void *arg, struct conn *c, uint32_t id)
{
    struct agent *a = arg;
    core_cancel(&a->core, &c->cc, id, now_ns());
}

static void agent_conn_gone(void *arg, struct conn *c)
{
    struct agent *a = arg;
    core_client_drop(&a->core, &c->cc, 0, now_ns());
    persist_conn_end(&a->persist, c);
}

static void agent_conn_hello(void *arg, struct conn *c)
{
    struct agent *a = arg;
    persist_conn(&a->persist, c);
}

static void agent_conn_resumed(void *arg, struct conn *c)
{
    struct agent *a = arg;
    core_client_resumed(&a->core, &c->cc);
}

void agent_policy_changed(struct agent *a)
{
    server_limits_changed(&a->server);
    struct conn *c;
    uint64_t now = now_ns();
    LIST_FOREACH(c, &a->server.conns, link)
    core_client_policy(&a->core, &c->cc, now);
}

/* ---- backend events ---- */

static void on_notice(void *arg, const char *name, size_t len, const struct backend_grant *grant)
{
    struct agent *a = arg;
    if (grant)
        core_grant(&a->core, name, len, grant, now_ns());
    else
        core_notice(&a->core, name, len, now_ns());
}

static void on_subscribed(void *arg)
{
    struct agent *a = arg;
    core_resubscribed(&a->core, now_ns());
}

static void on_unsubscribed(void *arg)
{
    struct agent *a = arg;
    core_unsubscribed(&a->core, now_ns());
}

static void on_unwatched(void *arg, const char *name, size_t len)
{
    struct agent *a = arg;
    core_unwatched(&a->core, name, len, now_ns());
}

static void on_doubt(void *arg, backend_affected_fn affected, void *farg)
{
    struct agent *a = arg;
    core_doubt(&a->core, affected, farg, now_ns());
}

static void on_ready(void *arg)
{
    struct agent *a = arg;
    core_store_ready(&a->core, now_ns());
    if (!a->ready) {
        a->ready = true;
        sd_notify(0, "STATUS=Redis answered; serving");
        if (a->ready_hook)
            a->ready_hook(a->ready_arg);
    }
}

/* ---- what the status socket shows ---- */

static void src_snapshot(void *arg, struct status_snapshot *s)
{
    const struct agent *a = arg;
    s->now = now_ns();
    s->started = a->started;
    s->quorum = a->cfg->mode == REDIS_MODE_QUORUM;
    s->mode = config_mode_name(a->cfg->mode);
    s->connections = a->server.nconns;
    s->leases = a->core.table.nleases;
    memcpy(s->leases_by_kind, a->core.leases_by_kind, sizeof s->leases_by_kind);
    s->stats = a->core.stats;
    s->nnodes = 0;
    if (a->backend) {
        const size_t max = sizeof s->nodes / sizeof s->nodes[0];
        size_t n = a->backend->ops->nodes(a->backend, s->nodes, max);
        s->nnodes = n < max ? n : max;
    }
}

struct lease_walk {
    status_lease_fn fn;
    void *fnarg;
};

/* A lock with a local holder, as the status shows its lease. */
static bool src_lock(void *arg, const struct core_lock_view *v)
{
    if (!v->holder)
        return true;
    struct lease_walk *w = arg;
    struct status_lease l = {.name = v->name,
                             .state = v->state,
                             .fence = v->fence,
                             .pid = v->holder->pid,
                             .uid = v->holder->uid,
                             /* read at connect: no file I/O here */
                             .comm = v->holder->label[0] ? v->holder->label : v->holder->comm,
                             .granted_at = v->granted_at,
                             .deadline = v->deadline,
                             .ttl_ms = v->ttl_ms,
                             .renewals = v->renewals,
                             .waiters = v->waiters,
                             .kind = v->kind,
                             .permits = v->permits,
                             .holds = v->holds};
    return w->fn(w->fnarg, &l);
}

static bool src_walk_leases(void *arg, uint64_t *cursor, size_t budget, status_lease_fn fn,
                            void *fnarg)
{
    const struct agent *a = arg;
    struct lease_walk w = {.fn = fn, .fnarg = fnarg};
    return core_walk_locks(&a->core, cursor, budget, src_lock, &w);
}

static void src_find_lease(void *arg, const char *name, status_lease_fn fn, void *fnarg)
{
    const struct agent *a = arg;
    struct lease_walk w = {.fn = fn, .fnarg = fnarg};
    core_find_lock(&a->core, name, strlen(name), src_lock, &w);
}

static int src_lookup(void *arg, const char *name, size_t len, backend_lookup_cb cb, void *cbarg)
{
    struct agent *a = arg;
    if (!a->backend)
        return DLOCK_EUNAVAIL;
    return a->backend->ops->lookup(a->backend, name, len, cb, cbarg);
}

/* The names known, each once with its local waiters and leases (the walk
 * shows a lock once per local holder, one after the other). */
struct name_walk {
    status_name_fn fn;
    void *fnarg;
    const char *last;
    bool stop;
};

static bool src_name(void *arg, const struct core_lock_view *v)
{
    struct name_walk *w = arg;
    if (w->stop || v->name == w->last)
        return !w->stop;
    w->last = v->name;
    w->stop = !w->fn(w->fnarg, v->name, v->waiters, v->nholders);
    return !w->stop;
}

static void src_walk_names(void *arg, status_name_fn fn, void *fnarg)
{
    const struct agent *a = arg;
    struct name_walk w = {.fn = fn, .fnarg = fnarg};
    uint64_t cursor = 0;
    while (!w.stop && core_walk_locks(&a->core, &cursor, SIZE_MAX, src_name, &w))
        ;
}

/* ---- an operator's forced release ---- */

#define FORCED_SHOWN 4 /* local leases lost, named in the log at most */

/* A forced release on its way to the store, and who asked. */
struct forcing {
    backend_lookup_cb cb;
    void *cbarg;
    struct agent_stats *stats;
    uint32_t uid;
    int pid;
    char name[];
};

/* The holder a forced release removed, for the log. */
static void forced_holder(const struct backend_holder *h, char *out, size_t len)
{
    char value[BACKEND_RECORD_MAX], record[BACKEND_RECORD_MAX];
    text_printable(value, sizeof value, h->value);
    text_printable(record, sizeof record, h->record);
    if (h->permits)
        snprintf(out, len, "%s with %u permit(s), the first '%s'", value, h->permits, record);
    else if (record[0])
        snprintf(out, len, "'%s'", record);
    else
        snprintf(out, len, "value '%s'", value);
}

static void on_forced(void *arg, int err, const struct backend_holder *h)
{
    struct forcing *f = arg;
    const struct log_field *who =
        LOG_FIELDS(LOG_F_LOCK(f->name, strlen(f->name)), LOG_F_PID(f->pid), LOG_F_UID(f->uid));
    char shown[WIRE_MAX_NAME + 1], was[3 * BACKEND_RECORD_MAX];
    text_printable(shown, sizeof shown, f->name);
    if (err) {
        log_kv(LOG_WARN, who, "forced release of %s by uid %u (pid %d) failed: %s", shown,
               (unsigned)f->uid, f->pid, dlock_strerror(err));
    } else if (backend_holder_free(h)) {
        log_kv(LOG_WARN, who,
               "forced release of %s by uid %u (pid %d): the name is not held in Redis", shown,
               (unsigned)f->uid, f->pid);
    } else {
        f->stats->forced_releases++;
        forced_holder(h, was, sizeof was);
        log_kv(LOG_WARN, who,
               "forced release of %s by uid %u (pid %d): its key is deleted; it held %s%s", shown,
               (unsigned)f->uid, f->pid, was,
               h->undetermined ? " (undetermined: on no majority of the nodes)" : "");
    }
    f->cb(f->cbarg, err, h);
    free(f);
}

/* The key's delete goes out first; then the local leases of the name are
 * lost, so that the acquires of its local waiters go out behind it. */
static int src_force(void *arg, const char *name, size_t len, uint32_t uid, int pid,
                     backend_lookup_cb cb, void *cbarg)
{
    struct agent *a = arg;
    if (!a->backend)
        return DLOCK_EUNAVAIL;
    if (!a->backend->ops->force)
        return DLOCK_EBACKEND;
    struct forcing *f = malloc(sizeof *f + len + 1);
    if (!f)
        return DLOCK_ENOMEM;
    *f =
        (struct forcing){.cb = cb, .cbarg = cbarg, .stats = &a->core.stats, .uid = uid, .pid = pid};
    memcpy(f->name, name, len);
    f->name[len] = '\0';
    int rc = a->backend->ops->force(a->backend, name, len, on_forced, f);
    if (rc != 0) {
        free(f);
        return rc;
    }
    char shown[WIRE_MAX_NAME + 1];
    text_printable(shown, sizeof shown, f->name);
    struct core_forced lost[FORCED_SHOWN];
    size_t n = core_force(&a->core, name, len, lost, FORCED_SHOWN, now_ns());
    for (size_t i = 0; i < n && i < FORCED_SHOWN; i++)
        log_kv(LOG_WARN,
               LOG_FIELDS(LOG_F_LOCK(name, len), LOG_F_FENCE(lost[i].fence), LOG_F_PID(lost[i].pid),
                          LOG_F_UID(lost[i].uid)),
               "forced release of %s by uid %u (pid %d): the lease of pid %d (uid %u), fencing "
               "token %llu, is lost",
               shown, (unsigned)uid, pid, lost[i].pid, (unsigned)lost[i].uid,
               (unsigned long long)lost[i].fence);
    if (n > FORCED_SHOWN)
        log_kv(LOG_WARN, LOG_FIELDS(LOG_F_LOCK(name, len)),
               "forced release of %s: %zu more local lease(s) lost", shown, n - FORCED_SHOWN);
    return 0;
}

/* ---- the timer ---- */

static void on_tick(struct ev_loop *loop, ev_io *w, int revents)
{
    struct agent *a = w->data;
    uint64_t expirations;
    if (read(a->tick_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
        log_warn("timerfd: %s", strerror(errno));
    a->tick_due = 0; /* disarmed: a one-shot timer that fired */
    core_tick(&a->core, now_ns());
}

/* Points the timerfd at `due` (0: nothing due). The timerfd runs on
 * CLOCK_BOOTTIME, the clock of every deadline, so a timer due during a
 * suspend of the host fires at the resume, not as much later as the host
 * slept (libev's timers run on CLOCK_MONOTONIC). It is set only when the
 * earliest due time moved earlier, or nothing was armed: no system call in
 * most loop turns. A timer left armed earlier than the earliest due time
 * fires once for nothing (core_tick() runs what is due, and the timer is
 * set again here): one wake-up now and then, where following the due time
 * both ways cost two system calls per lease to a client that acquires and
 * releases in a loop, the earliest due time coming and going with each
 * lease. */
static void arm_tick(struct agent *a, uint64_t due)
{
    if (due == a->tick_due || (a->tick_due && (!due || a->tick_due < due)))
        return;
    struct itimerspec its = {0};
    if (due) {
        its.it_value.tv_sec = (time_t)(due / NS_PER_SEC);
        its.it_value.tv_nsec = (long)(due % NS_PER_SEC);
    }
    if (timerfd_settime(a->tick_fd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        fatal("timerfd_settime: %s", strerror(errno));
    a->tick_due = due;
}

/* Before the loop blocks: locks released in this turn that no local acquire
 * took over are released to Redis (core_flush); replies to clients go out
 * first (they wait on
 * them; most left already, right after the event that made them), then the
 * batch of Redis commands; a broken Redis link can queue more replies, hence
 * the second client flush. Last, the one timer is pointed at the earliest
 * node of the heap. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
    struct agent *a = w->data;
    a->in_prepare = true;
    log_flush_suppressed();
    core_flush(&a->core, now_ns());
    server_flush(&a->server);
    a->backend->ops->flush(a->backend);
    server_flush(&a->server);
    a->in_prepare = false;
    arm_tick(a, core_next_due(&a->core));
}

/* ---- shutdown ---- */

static void finish_shutdown(struct agent *a)
{
    ev_timer_stop(a->loop, &a->shutdown_timer);
    server_close_all(&a->server);
    persist_remove(&a->persist); /* a stop leaves nothing for a successor */
    ev_break(a->loop, EVBREAK_ALL);
}

static void on_shutdown_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct agent *a = w->data;
    size_t pending = a->backend->ops->pending(a->backend);
    const struct core *k = &a->core;
    if (pending == 0) {
        /* Every release was answered, or could not be sent (or failed):
         * say which, and how many. */
        if (k->stop_unsent)
            log_warn("%zu release(s) not sent or not answered: Redis unreachable; their keys "
                     "expire within the TTL; %zu release(s) sent and answered; exiting",
                     k->stop_unsent, k->stop_answered);
        else
            log_info("%zu release(s) sent and answered; exiting", k->stop_answered);
        finish_shutdown(a);
    } else if (ev_now(loop) >= a->shutdown_deadline) {
        log_warn("%zu Redis command(s) unanswered at shutdown; their keys expire by TTL", pending);
        finish_shutdown(a);
    }
}

void agent_shutdown(struct agent *a)
{
    if (a->shutting_down)
        return;
    a->shutting_down = true;
    sd_notify(0, "STOPPING=1");
    log_info("shutting down: releasing %zu lease(s)", a->core.table.nleases);
    server_stop_listening(&a->server);
    core_shutdown(&a->core);
    struct conn *c;
    uint64_t now = now_ns();
    LIST_FOREACH(c, &a->server.conns, link)
    core_client_drop(&a->core, &c->cc, DLOCK_ESHUTDOWN, now);
    a->shutdown_deadline = ev_now(a->loop) + a->cfg->shutdown_timeout_ms / 1000.0;
    ev_timer_init(&a->shutdown_timer, on_shutdown_timer, 0.0, 0.01);
    a->shutdown_timer.data = a;
    ev_timer_start(a->loop, &a->shutdown_timer);
}

void agent_leave(struct agent *a, const char *why)
{
    if (!a->persist.on) {
        log_info("%s, but there is no state directory to leave the leases in: stopping", why);
        agent_shutdown(a);
        return;
    }
    log_info("%s: leaving %zu lease(s) of %u connection(s) to a successor", why,
             a->core.table.nleases, a->server.nconns);
    sd_notify(0, "STOPPING=1");
    log_flush_suppressed();
    /* Releases already journaled as ended go to Redis (best effort: the
     * answers are not waited for), or their keys would wait for the TTL. */
    core_flush(&a->core, now_ns());
    a->backend->ops->flush(a->backend);
    /* Nothing is released, closed or removed: the kernel closes the
     * connections (their clients then wait for the successor), and the
     * state directory, the keys in Redis and the lease pages stay. */
    _exit(0);
}

bool agent_can_reexec(const struct agent *a)
{
    return a->persist.on && !a->shutting_down;
}

int agent_reexec(struct agent *a, char *const argv[], const char *why)
{
    int keep = unix_listen_pass_on();
    if (keep < 0) {
        log_warn("cannot restart in place: the service manager passed sockets that are not the "
                 "configuration's");
        return -1;
    }
    if (statedir_mark(&a->persist.dir, STATEDIR_STORE_CHANGED) != 0) {
        log_warn("cannot restart in place: %s: %s", a->persist.dir.path, strerror(errno));
        return -1;
    }
    log_info("restarting in place for %s: %zu lease(s) of %u connection(s) are taken over and "
             "confirmed on the new Redis",
             why, a->core.table.nleases, a->server.nconns);
    /* From now on no lease is proven on the Redis its holders will be
     * told of: every page shows it in doubt (not valid) until the next
     * image confirms it there. */
    core_doubt(&a->core, NULL, NULL, now_ns());
    log_flush_suppressed();
    /* Nothing of this image but the passed sockets (and stdio) reaches the
     * next: the state directory's lock and every connection close, as in
     * a restart, and its successor takes the leases over. */
    /* The signal mask is inherited: the loop's blocked signals would stay
     * blocked in the new image. */
    sigset_t none, old;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, &old);
    if (close_range(SD_LISTEN_FDS_START + (unsigned)keep, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        execv("/proc/self/exe", argv);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int e = errno;
    statedir_unmark(&a->persist.dir, STATEDIR_STORE_CHANGED);
    log_error("cannot restart in place: %s", strerror(e));
    return -1;
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct agent *a = w->data;
    log_info("got signal %d", w->signum);
    if (w->signum == SIGUSR2) {
        agent_leave(a, "asked to restart (SIGUSR2)");
        return;
    }
    if (w->signum == SIGTERM && !a->shutting_down && a->persist.on) {
        if (statedir_marked(&a->persist.dir, STATEDIR_SUCCESSOR)) {
            agent_leave(a, "a successor waits for the state directory");
            return;
        }
        /* Under systemd: the stop job of `systemctl restart` (a package
         * upgrade's too) is a restart; `systemctl stop` is a stop. */
        char why[300];
        int r = svcjob_restarting(why, sizeof why);
        if (r == 1) {
            log_info("the service manager's job: %s", why);
            agent_leave(a, "the service manager restarts the agent");
            return;
        }
        if (r < 0)
            log_warn("cannot tell a restart from a stop (%s): stopping", why);
        else
            log_info("a stop, not a restart: %s", why);
    }
    agent_shutdown(a);
}

int agent_init(struct agent *a, struct ev_loop *loop, const struct config *cfg, bool successor)
{
    memset(a, 0, sizeof *a);
    a->loop = loop;
    a->cfg = cfg;
    char err[400];
    if (persist_open(&a->persist, cfg, successor, err, sizeof err) != 0) {
        log_error("%s", err);
        return -1;
    }
    a->tick_fd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (a->tick_fd < 0) {
        log_error("timerfd_create(CLOCK_BOOTTIME): %s", strerror(errno));
        persist_close(&a->persist);
        return -1;
    }
    char host[64] = "";
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    if (core_init(&a->core, cfg, &agent_env, NULL, random_u64(), host) != 0)
        goto fail_core;
    a->started = now_ns();
    struct server_hooks hooks = {.arg = a,
                                 .acquire = agent_acquire,
                                 .release = agent_release,
                                 .cancel = agent_cancel,
                                 .conn_gone = agent_conn_gone,
                                 .conn_hello = agent_conn_hello,
                                 .conn_resumed = agent_conn_resumed,
                                 .refused = &a->core.stats.refused};
    if (server_open(&a->server, loop, &hooks, cfg) != 0)
        goto fail_server;
    /* Locks matter more than their status: the agent runs without it. */
    struct status_source src = {.cfg = cfg,
                                .arg = a,
                                .snapshot = src_snapshot,
                                .walk_leases = src_walk_leases,
                                .find_lease = src_find_lease,
                                .lookup = src_lookup,
                                .walk_names = src_walk_names,
                                .force = src_force};
    if (status_open(&a->status, loop, &src, cfg->status_socket, cfg->status_socket_mode) != 0)
        log_warn("running without a status socket");
    if (status_open_http(&a->status, cfg->metrics_listen) != 0)
        log_warn("running without the HTTP metrics endpoint");
    unix_listen_close_unused();
    struct backend_events ev = {.arg = a,
                                .on_notice = on_notice,
                                .on_subscribed = on_subscribed,
                                .on_unsubscribed = on_unsubscribed,
                                .on_unwatched = on_unwatched,
                                .on_ready = on_ready,
                                .on_doubt = on_doubt};
    a->backend = backend_new(loop, cfg, &ev);
    if (!a->backend)
        goto fail_backend;
    core_attach_backend(&a->core, a->backend);
    persist_takeover(&a->persist, &a->core, &a->server, now_ns());
    ev_io_init(&a->tick, on_tick, a->tick_fd, EV_READ);
    a->tick.data = a;
    ev_io_start(loop, &a->tick);
    ev_prepare_init(&a->prepare, on_prepare);
    a->prepare.data = a;
    ev_prepare_start(loop, &a->prepare);
    ev_idle_init(&a->reply_flush, on_reply_flush);
    ev_set_priority(&a->reply_flush, EV_MAXPRI);
    a->reply_flush.data = a;
    ev_signal_init(&a->sigterm, on_signal, SIGTERM);
    ev_signal_init(&a->sigint, on_signal, SIGINT);
    ev_signal_init(&a->sigusr2, on_signal, SIGUSR2);
    a->sigterm.data = a->sigint.data = a->sigusr2.data = a;
    ev_signal_start(loop, &a->sigterm);
    ev_signal_start(loop, &a->sigint);
    ev_signal_start(loop, &a->sigusr2);
    /* Ready (Type=notify) once the sockets listen: clients are served from
     * now on, with typed errors while Redis cannot be reached. Waiting for
     * Redis here would hold the boot, and a start timeout would restart the
     * agent in a loop, while Redis is away. */
    sd_notify(0, "READY=1\nSTATUS=waiting for Redis");
    return 0;
fail_backend:
    status_close(&a->status);
    server_stop_listening(&a->server);
fail_server:
    core_free(&a->core);
fail_core:
    close(a->tick_fd);
    persist_close(&a->persist);
    return -1;
}

void agent_free(struct agent *a)
{
    status_close(&a->status);
    server_stop_listening(&a->server);
    server_close_all(&a->server);
    if (a->backend)
        a->backend->ops->destroy(a->backend);
    ev_io_stop(a->loop, &a->tick);
    if (a->tick_fd >= 0)
        close(a->tick_fd);
    a->tick_fd = -1;
    ev_prepare_stop(a->loop, &a->prepare);
    ev_clear_pending(a->loop, &a->reply_flush); /* fed by the closes above */
    ev_signal_stop(a->loop, &a->sigterm);
    ev_signal_stop(a->loop, &a->sigint);
    ev_signal_stop(a->loop, &a->sigusr2);
    core_free(&a->core);
    persist_close(&a->persist);
}
