/* SPDX-License-Identifier: BSD-3-Clause */
/* test_notices.c -- release notices per name: an agent listens on a name's
 * channel only while it has a waiter for it, so that a release costs nothing
 * to the other agents; the waiter is woken by the notice (not by a poll:
 * retry_fallback_ms = 60000 behind holders of 30 s), also when the release
 * came between its "taken" answer and its subscription (the subscription's
 * confirmation counts as a notice), after a Redis restart, and in quorum
 * mode from any one node. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

/* The waiter's fallback retry does not come before about 30 s behind these
 * holders: one granted within H_EVENT_MS of the release was woken by a
 * notice. */
#define SLOW_FALLBACK "retry_fallback_ms = 60000"
#define HOLD_TTL      30000

ITEST(notices, no_subscription_without_waiters)
{
    h_start_two(SLOW_FALLBACK);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    cr_assert(h_agent_notices_up(0) && h_agent_notices_up(1), "notice links not up");
    /* Grants, releases and try-once acquires that find the lock taken on
     * the other agent: nobody waits, so nobody listens. */
    for (int i = 0; i < 20; i++) {
        struct h_cl *owner = i % 2 ? b : a, *other = i % 2 ? a : b;
        dlock_lease *l = h_must_acquire(owner, "quiet", HOLD_TTL);
        dlock_lease *x = NULL;
        int rc = h_acquire(other, "quiet", HOLD_TTL, 0, &x);
        cr_assert_eq(rc, DLOCK_EBUSY, "try-once: %s (%d)", dlock_strerror(rc), rc);
        cr_assert_eq(h_node_channels(0, "*"), 0, "a channel has subscribers");
        cr_assert_eq(dlock_lease_release(l), 0);
        H_KEY_GONE(h_key("quiet"));
    }
    cr_assert_eq(h_node_channels(0, "*"), 0, "a channel has subscribers");
    cr_assert_eq(h_node_subscribers(0, h_channel("quiet")), 0);
    /* The status still says the notices would arrive. */
    const char *st = h_status_ask(1, "status-json\n");
    cr_assert(st && strstr(st, "\"subscribed\":true"), "status: %s", st ? st : "(none)");
}

ITEST(notices, a_waiter_listens_to_its_name_only_and_only_while_it_waits)
{
    h_start_two(SLOW_FALLBACK);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *lw = h_must_acquire(a, "wanted", HOLD_TTL);
    dlock_lease *lo = h_must_acquire(a, "other", HOLD_TTL);

    struct h_acq w;
    h_acquire_async(b, "wanted", HOLD_TTL, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, h_channel("wanted")) == 1);
    cr_assert_eq(h_node_channels(0, "*"), 1, "more than the waiter's channel");
    cr_assert_eq(h_node_subscribers(0, h_channel("other")), 0);
    /* A second local waiter for the name needs no second subscription. */
    struct h_cl *b2 = h_client_at(1);
    struct h_acq w2;
    h_acquire_async(b2, "wanted", HOLD_TTL, DLOCK_WAIT_FOREVER, &w2);
    cr_assert_eq(dlock_client_ping(b2->c), 0);
    H_HOLDS_FOR(300, !w.done && !w2.done && h_node_subscribers(0, h_channel("wanted")) == 1);

    /* The release on A wakes B's first waiter at once. */
    int64_t t0 = h_now_ms();
    cr_assert_eq(dlock_lease_release(lw), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("woken %lld ms after the release", (long long)(w.at_ms - t0));
    /* The second waits behind B's own lease, and its agent still listens. */
    cr_assert_eq(h_node_subscribers(0, h_channel("wanted")), 1);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w2.done);
    cr_assert_eq(w2.status, 0, "second waiter: %s (%d)", dlock_strerror(w2.status), w2.status);
    /* Nobody on B waits for the name any more: B stops listening. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_channels(0, "*") == 0);
    cr_assert_eq(dlock_lease_release(w2.lease), 0);

    /* A waiter that gives up stops listening too, */
    struct h_acq w3;
    h_acquire_async(b, "other", HOLD_TTL, 1500, &w3);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, h_channel("other")) == 1);
    H_WAIT_UNTIL(H_EVENT_MS, w3.done);
    cr_assert_eq(w3.status, DLOCK_ETIMEDOUT, "%s (%d)", dlock_strerror(w3.status), w3.status);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_channels(0, "*") == 0);
    /* and so does one whose client goes away. */
    struct h_acq w4;
    h_acquire_async(b2, "other", HOLD_TTL, DLOCK_WAIT_FOREVER, &w4);
    cr_assert_eq(dlock_client_ping(b2->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, h_channel("other")) == 1);
    h_client_close(b2);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_channels(0, "*") == 0);
    cr_assert_eq(dlock_lease_release(lo), 0);
}

/* ---- a proxy that holds back a subscription ----
 *
 * Agent B reaches Redis through it. Once armed, it keeps the first command
 * stream that carries a SUBSCRIBE (from that command on, so nothing
 * overtakes it) until the test lets it go. B sends the SUBSCRIBE after its
 * acquire was answered "taken": while it is held, a release comes between
 * the two. */

#define PROXY_MAX 8

struct pipe_pair {
    int client, server;
    int holding;
    char *held;
    size_t nheld;
};

struct proxy {
    char path[108]; /* fits sockaddr_un.sun_path */
    int listen_fd;
    pthread_t thread;
    atomic_int armed, caught, let_go, stop;
    struct pipe_pair p[PROXY_MAX];
    int n;
};

static void unix_addr(struct sockaddr_un *sa, const char *path)
{
    *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof sa->sun_path, "socket path too long: %s", path);
    memcpy(sa->sun_path, path, strlen(path) + 1);
}

static int connect_unix(const char *path)
{
    struct sockaddr_un sa;
    unix_addr(&sa, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w <= 0)
            return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static void pair_close(struct pipe_pair *pp)
{
    close(pp->client);
    close(pp->server);
    free(pp->held);
    *pp = (struct pipe_pair){.client = -1, .server = -1};
}

/* Client to server: passed on, or held. */
static int client_data(struct proxy *px, struct pipe_pair *pp, const char *buf, size_t n)
{
    if (!pp->holding && atomic_load(&px->armed) && !atomic_load(&px->caught) &&
        memmem(buf, n, "\r\nSUBSCRIBE\r\n", 13)) {
        pp->holding = 1;
        atomic_store(&px->caught, 1);
    }
    if (!pp->holding)
        return write_all(pp->server, buf, n);
    char *h = realloc(pp->held, pp->nheld + n);
    if (!h)
        return -1;
    memcpy(h + pp->nheld, buf, n);
    pp->held = h;
    pp->nheld += n;
    return 0;
}

static void *proxy_run(void *arg)
{
    struct proxy *px = arg;
    char buf[65536];
    while (!atomic_load(&px->stop)) {
        if (atomic_load(&px->let_go)) {
            for (int i = 0; i < px->n; i++) {
                struct pipe_pair *pp = &px->p[i];
                if (pp->holding) {
                    pp->holding = 0;
                    if (pp->client >= 0 && write_all(pp->server, pp->held, pp->nheld) != 0)
                        pair_close(pp);
                    pp->nheld = 0;
                }
            }
        }
        struct pollfd fds[1 + 2 * PROXY_MAX];
        int nf = 0;
        fds[nf++] = (struct pollfd){.fd = px->listen_fd, .events = POLLIN};
        for (int i = 0; i < px->n; i++) {
            fds[nf++] = (struct pollfd){.fd = px->p[i].client, .events = POLLIN};
            fds[nf++] = (struct pollfd){.fd = px->p[i].server, .events = POLLIN};
        }
        if (poll(fds, (nfds_t)nf, 10) <= 0)
            continue;
        if (fds[0].revents & POLLIN) {
            int c = accept4(px->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            int s = c >= 0 ? connect_unix(H.redis_sock) : -1;
            if (c >= 0 && s >= 0 && px->n < PROXY_MAX) {
                px->p[px->n++] = (struct pipe_pair){.client = c, .server = s};
            } else {
                if (c >= 0)
                    close(c);
                if (s >= 0)
                    close(s);
            }
        }
        for (int i = 0; i < px->n; i++) {
            struct pipe_pair *pp = &px->p[i];
            for (int dir = 0; dir < 2 && pp->client >= 0; dir++) {
                if (!(fds[1 + 2 * i + dir].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t r = read(dir ? pp->server : pp->client, buf, sizeof buf);
                int bad = r <= 0;
                if (!bad && dir == 0)
                    bad = client_data(px, pp, buf, (size_t)r) != 0;
                else if (!bad)
                    bad = write_all(pp->client, buf, (size_t)r) != 0;
                if (bad)
                    pair_close(pp);
            }
        }
    }
    return NULL;
}

static void proxy_start(struct proxy *px)
{
    memset(px, 0, sizeof *px);
    struct sockaddr_un sa;
    unix_addr(&sa, h_path("proxy.sock"));
    memcpy(px->path, sa.sun_path, sizeof px->path);
    px->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(px->listen_fd, 0);
    cr_assert_eq(bind(px->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(px->listen_fd, 16), 0);
    cr_assert_eq(pthread_create(&px->thread, NULL, proxy_run, px), 0);
}

static void proxy_stop(struct proxy *px)
{
    atomic_store(&px->stop, 1);
    pthread_join(px->thread, NULL);
    for (int i = 0; i < px->n; i++)
        if (px->p[i].client >= 0)
            pair_close(&px->p[i]);
    close(px->listen_fd);
}

/* Grant on release (docs/redis.md): A's release hands the key to B's entry
 * in the waiting-hosts record, and B grants its waiter on the grant message
 * alone: no acquire of B's takes it (B's grants from acquires stay as they
 * were), and B's fallback retry is 30 s away. */
ITEST(notices, a_release_hands_the_key_to_the_waiting_host)
{
    h_start_two(SLOW_FALLBACK);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *la = h_must_acquire(a, "handed", HOLD_TTL);
    struct h_acq w;
    h_acquire_async(b, "handed", HOLD_TTL, DLOCK_WAIT_FOREVER, &w);
    /* B found it taken: its entry is in the record, and it listens. */
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_int("HLEN %s", "dlock:{dlock:handed} waiting") == 1 &&
                                 h_node_subscribers(0, h_channel("handed")) == 1);
    long long acquired = h_metric(1, "dlock_acquire_seconds_count");
    uint64_t fence_a = dlock_lease_fence(la);
    cr_assert_eq(h_metric(1, "dlock_grants_by_release_total"), 0);
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_assert_eq(h_metric(1, "dlock_grants_by_release_total"), 1);
    cr_assert_gt(dlock_lease_fence(w.lease), fence_a, "fencing tokens rise from A to B");
    cr_assert_eq(h_metric(1, "dlock_acquire_seconds_count"), acquired,
                 "B's grant came from an acquire of its own");
    cr_assert_eq(h_redis_int("HLEN %s", "dlock:{dlock:handed} waiting"), 0);
    /* B's lease is renewed to its own TTL at once. */
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_pttl(h_key("handed")) > 3000);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_KEY_GONE(h_key("handed"));
    cr_assert_eq(h_metric(0, "dlock_grants_by_release_total"), 0);
}

/* Does key no longer hold the value was? */
static bool value_moved(const char *key, const char *was)
{
    const char *v = h_redis_get(key);
    return !v || strcmp(v, was) != 0;
}

ITEST(notices, a_release_before_the_subscription_still_wakes_the_waiter)
{
    /* A on Redis, B through the proxy. */
    h_redis_start();
    static struct proxy px;
    proxy_start(&px);
    for (int i = 0; i < 2; i++)
        h_agent_config(i, SLOW_FALLBACK, NULL);
    h_agent_start_n(0);
    char saved[H_PATH];
    snprintf(saved, sizeof saved, "%s", H.redis_addr);
    snprintf(H.redis_addr, sizeof H.redis_addr, "unix:%s", px.path);
    h_agent_start_n(1);
    snprintf(H.redis_addr, sizeof H.redis_addr, "%s", saved);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);

    dlock_lease *la = h_must_acquire(a, "race", HOLD_TTL);
    atomic_store(&px.armed, 1);
    struct h_acq w;
    h_acquire_async(b, "race", HOLD_TTL, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    /* B found the lock taken and asked for its notices; the proxy holds
     * the request, so Redis has no subscriber for the release to reach. */
    H_WAIT_UNTIL(H_EVENT_MS, atomic_load(&px.caught));
    cr_assert_eq(h_node_subscribers(0, h_channel("race")), 0);
    const char *held = h_redis_get(h_key("race"));
    cr_assert_not_null(held);
    cr_assert_eq(dlock_lease_release(la), 0);
    /* A's key goes: deleted, or handed over to B's entry in the
     * waiting-hosts record (grant on release), whose message B cannot
     * hear yet: B's next acquire takes the key as its own then. */
    H_WAIT_UNTIL(H_EVENT_MS, value_moved(h_key("race"), held));
    H_HOLDS_FOR(300, !w.done);
    /* The subscription reaches Redis now: its confirmation wakes B. */
    int64_t t0 = h_now_ms();
    atomic_store(&px.let_go, 1);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("woken %lld ms after the subscription went on", (long long)(w.at_ms - t0));
    cr_assert_eq(h_metric(1, "dlock_grants_by_release_total"), 0,
                 "B heard no grant message: its acquire took the key");
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_channels(0, "*") == 0);
    h_agent_stop(1);
    proxy_stop(&px);
}

ITEST(notices, a_waiter_listens_again_after_a_redis_restart)
{
    /* Redis keeps its keys across the restart, so A still holds the lock
     * after it: only a notice can wake B soon. */
    h_node_set_args(0, "--appendonly yes --appendfsync always --appenddirname aof0");
    h_start_two(SLOW_FALLBACK);
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    dlock_lease *la = h_must_acquire(a, "again", HOLD_TTL);
    struct h_acq w;
    h_acquire_async(b, "again", HOLD_TTL, DLOCK_WAIT_FOREVER, &w);
    cr_assert_eq(dlock_client_ping(b->c), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, h_channel("again")) == 1);

    h_redis_restart();
    cr_assert(h_redis_exists(h_key("again")), "the holder's key did not survive the restart");
    /* B subscribes again by itself, and A's lease is held again. */
    H_WAIT_UNTIL(H_EVENT_MS, h_node_subscribers(0, h_channel("again")) == 1);
    H_WAIT_UNTIL(H_EVENT_MS, dlock_lease_state(la) == DLOCK_STATE_HELD);
    H_HOLDS_FOR(300, !w.done);
    int64_t t0 = h_now_ms();
    cr_assert_eq(dlock_lease_release(la), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "waiter: %s (%d)", dlock_strerror(w.status), w.status);
    cr_log_info("woken %lld ms after the release", (long long)(w.at_ms - t0));
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_node_channels(0, "*") == 0);
}

/* ---- quorum mode ---- */

/* A key no dlock agent holds, on every node, for long. */
static void foreign_hold(const char *name)
{
    for (int n = 0; n < 3; n++)
        h_node_set_px(n, h_key(name), "foreigntoken", 60000);
}

static int subscribed_on_every_node(const char *name)
{
    for (int n = 0; n < 3; n++)
        if (h_node_subscribers(n, h_channel(name)) != 1)
            return 0;
    return 1;
}

static int channels_on_any_node(void)
{
    long long c = 0;
    for (int n = 0; n < 3; n++)
        c += h_node_channels(n, "*");
    return (int)c;
}

ITEST(notices, quorum_a_notice_from_any_one_node_wakes_the_waiter)
{
    h_quorum_start(3, 1, SLOW_FALLBACK, NULL);
    struct h_cl *b = h_client();
    cr_assert_eq(channels_on_any_node(), 0, "listening without a waiter");
    for (int node = 0; node < 3; node++) {
        char name[16];
        snprintf(name, sizeof name, "qn%d", node);
        /* Held by someone else for a minute: the waiter's retry is far off. */
        foreign_hold(name);
        struct h_acq w;
        h_acquire_async(b, name, 1500, DLOCK_WAIT_FOREVER, &w);
        cr_assert_eq(dlock_client_ping(b->c), 0);
        H_WAIT_UNTIL(H_EVENT_MS, subscribed_on_every_node(name));
        H_HOLDS_FOR(300, !w.done);
        /* Released on every node, announced on one only. */
        for (int n = 0; n < 3; n++)
            h_node_del(n, h_key(name));
        int64_t t0 = h_now_ms();
        redisReply *r = h_node_cmd(node, "PUBLISH %s %s", h_channel(name), name);
        cr_assert(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "node %d: no subscriber",
                  node);
        freeReplyObject(r);
        H_WAIT_UNTIL(H_EVENT_MS, w.done);
        cr_assert_eq(w.status, 0, "node %d: %s (%d)", node, dlock_strerror(w.status), w.status);
        cr_log_info("node %d: woken %lld ms after its notice", node, (long long)(w.at_ms - t0));
        cr_assert_eq(dlock_lease_release(w.lease), 0);
        H_WAIT_UNTIL(H_EVENT_MS, channels_on_any_node() == 0);
    }
}
