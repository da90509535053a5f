/* SPDX-License-Identifier: BSD-3-Clause */
/* test_tls.c -- the agent's Redis links over TLS (docs/redis.md, TLS), with
 * real redis-servers listening on TLS ports and a throwaway PKI made at
 * test time (tlspki.h): single and quorum modes, with mutual TLS required
 * and not; each failure saying what failed, in the log and in the status;
 * `dlockd -n` reading the files; a client certificate rotated by a reload
 * while a lease is held; and peers that stall mid-handshake or mid-record,
 * which stall nothing but their own link. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "tlspki.h"

/* Only notices wake a waiter: a grant after a release proves the pub/sub
 * link works. */
#define NOTICES_ONLY "retry_fallback_ms = 60000"

static int logged(int agent, const char *what)
{
    const char *log = h_read_file(H.agent[agent].log);
    return log && strstr(log, what);
}

/* A waiter on the other client is granted at the release: notices go
 * over the TLS pub/sub link. */
static void lock_and_hand_over(const char *name, uint32_t ttl)
{
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *l = h_must_acquire(a, name, ttl);
    cr_assert(dlock_lease_valid(l));
    uint64_t fence = dlock_lease_fence(l);
    struct h_acq w;
    h_acquire_async(b, name, ttl, 20000, &w);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_WAIT_UNTIL(H_EVENT_MS, w.done);
    cr_assert_eq(w.status, 0, "the waiter: %s", dlock_strerror(w.status));
    cr_assert_gt(dlock_lease_fence(w.lease), fence);
    cr_assert_eq(dlock_lease_release_sync(w.lease), 0);
}

ITEST(tls, single_mode_with_mutual_tls)
{
    tls_node(0, NULL, true);
    h_redis_start();
    h_agent_config(0, NOTICES_ONLY, tls_redis_ini("client", NULL));
    h_agent_start_n(0);
    cr_assert(logged(0, "command connection up (rediss://127.0.0.1:"), "%s",
              h_read_file(H.agent[0].log));
    cr_assert(logged(0, ", TLSv1.3 "), "%s", h_read_file(H.agent[0].log));
    cr_assert(logged(0, "a client certificate (mutual TLS)"));
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "tls-key", 10000);
    /* The key, seen on the server's plaintext unix socket. */
    cr_assert(h_redis_exists(h_key("tls-key")));
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_KEY_GONE(h_key("tls-key"));
    lock_and_hand_over("tls-handover", 10000);
    const char *st = h_status_ask(0, "status-json\n");
    cr_assert(st && strstr(st, "\"last_error\":\"\""), "%s", st);
}

ITEST(tls, server_that_asks_no_client_certificate)
{
    tls_node(0, NULL, false);
    h_redis_start();
    h_agent_config(0, NOTICES_ONLY, tls_redis_ini(NULL, "tls_min_version = 1.3"));
    h_agent_start_n(0);
    cr_assert(logged(0, "no client certificate"));
    lock_and_hand_over("tls-plain-auth", 10000);
}

/* tls = yes turns TLS on for addresses written without rediss://. */
ITEST(tls, tls_yes_with_a_plain_address)
{
    int port = tls_node(0, NULL, false);
    h_redis_start();
    h_agent_config_addr(0, NULL, h_keepf("127.0.0.1:%d", port), tls_redis_ini(NULL, "tls = yes"));
    H.agent[0].addr_in_config = 1;
    h_agent_start_n(0);
    lock_and_hand_over("tls-yes", 10000);
}

/* Quorum mode: nodes that require a client certificate (auth), or not. */
static void quorum_over_tls(bool auth)
{
    for (int i = 0; i < 3; i++)
        tls_node(i, NULL, auth);
    h_quorum_start(3, 1, NOTICES_ONLY, tls_redis_ini(auth ? "client" : NULL, NULL));
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "tls-quorum", 2000);
    int on = 0;
    for (int i = 0; i < 3; i++)
        on += h_node_exists(i, h_key("tls-quorum"));
    cr_assert_geq(on, 2, "the key is on %d node(s)", on);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    lock_and_hand_over("tls-quorum-handover", 1500);
}

ITEST(tls, quorum_mode_with_mutual_tls)
{
    quorum_over_tls(true);
}

ITEST(tls, quorum_mode_without_client_certificates)
{
    quorum_over_tls(false);
}

/* ---- what failed, in the log and in the status ---- */

/* Agent 0, as configured, cannot reach Redis: the log and the node's
 * last_error say `want`. */
static void fails_saying(const char *want)
{
    h_agent_spawn(0);
    H_WAIT_UNTIL(H_EVENT_MS, logged(0, want));
    const char *st = NULL;
    H_WAIT_UNTIL(H_EVENT_MS, (st = h_status_ask(0, "status-json\n")) && strstr(st, want));
}

ITEST(tls, unknown_ca)
{
    tls_node(0, NULL, false);
    h_redis_start();
    h_agent_config(0, NULL, h_keepf("tls_ca_file = %s\n", tls_file("other-ca.crt")));
    fails_saying("an unknown CA");
}

ITEST(tls, name_mismatch)
{
    tls_node(0, NULL, false);
    h_redis_start();
    h_agent_config(0, NULL, tls_redis_ini(NULL, "tls_server_name = redis.example.com"));
    fails_saying("hostname mismatch");
}

ITEST(tls, expired_certificate)
{
    tls_node(0, "expired", false);
    h_redis_start();
    h_agent_config(0, NULL, tls_redis_ini(NULL, NULL));
    fails_saying("certificate has expired");
}

ITEST(tls, missing_client_certificate)
{
    tls_node(0, NULL, true);
    h_redis_start();
    h_agent_config(0, NULL, tls_redis_ini(NULL, NULL));
    fails_saying("the server requires a client certificate");
}

ITEST(tls, client_certificate_of_an_untrusted_ca)
{
    tls_node(0, NULL, true);
    h_redis_start();
    h_agent_config(0, NULL, tls_redis_ini("other-client", NULL));
    fails_saying("the server refused the client certificate");
}

ITEST(tls, plaintext_server_on_a_tls_address)
{
    int port = h_redis_start_tcp();
    h_agent_config_addr(0, NULL, h_keepf("rediss://127.0.0.1:%d", port),
                        tls_redis_ini(NULL, "connect_timeout_ms = 300"));
    H.agent[0].addr_in_config = 1;
    fails_saying("a plaintext Redis on a TLS address?");
}

ITEST(tls, tls_server_on_a_plaintext_address)
{
    int port = tls_node(0, NULL, false);
    h_redis_start();
    h_agent_config_addr(0, NULL, h_keepf("127.0.0.1:%d", port), NULL);
    H.agent[0].addr_in_config = 1;
    fails_saying("a TLS port? then write rediss:// or tls = yes");
}

/* ---- dlockd -n ---- */

/* dlockd -n on agent 0's config: its exit status; its output in *out. */
static int check_config(const char **out)
{
    char *argv[] = {DLOCKD_PATH, "-n", "-c", H.agent[0].conf, NULL};
    const char *log = h_path("check.out");
    unlink(log);
    int st = h_wait_child(h_spawn(argv, log), H_START_MS);
    *out = h_keep(h_read_file(log) ? h_read_file(log) : "");
    return st;
}

/* A copy of the PKI's file name at DIR/to with mode; returns its path. */
static const char *copy_as(const char *name, const char *to, mode_t mode)
{
    const char *src = h_read_file(tls_file(name));
    cr_assert_not_null(src);
    const char *path = h_keep(h_path(to));
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(src, f);
    fclose(f);
    cr_assert_eq(chmod(path, mode), 0);
    return path;
}

/* text with each "PKI" replaced by dir; kept. */
static const char *in_pki(const char *text, const char *dir)
{
    char out[2048] = "";
    size_t n = 0;
    for (const char *p = text; *p && n + strlen(dir) + 1 < sizeof out;) {
        if (strncmp(p, "PKI", 3) == 0) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%s", dir);
            p += 3;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    return h_keep(out);
}

ITEST(tls, config_check_reads_the_files)
{
    static const struct {
        const char *ini, *want;
    } cases[] = {
        {"tls_ca_file = PKI/none.crt", "tls_ca_file = "},
        {"tls_cert_file = PKI/client.crt\ntls_key_file = PKI/open.key", "other users may read it"},
        {"tls_cert_file = PKI/ca.key\ntls_key_file = PKI/client.key", "not a PEM certificate"},
        {"tls_cert_file = PKI/client.crt\ntls_key_file = PKI/other-client.key",
         "is not the key of tls_cert_file"},
        {"tls_cert_file = PKI/client.crt", "tls_cert_file and tls_key_file go together"},
        {"tls_min_version = 1.1", "(1.2 or 1.3)"},
    };
    const char *dir = h_keep(tls_file("."));
    copy_as("client.key", "pki/open.key", 0644);
    const char *out;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        h_agent_config_addr(0, NULL, "rediss://127.0.0.1:6379", in_pki(cases[i].ini, dir));
        cr_assert_eq(check_config(&out), 2, "case %zu: %s", i, out);
        cr_assert_not_null(strstr(out, cases[i].want), "case %zu: expected '%s' in: %s", i,
                           cases[i].want, out);
    }
    h_agent_config_addr(0, NULL, "rediss://127.0.0.1:6379", tls_redis_ini("client", NULL));
    cr_assert_eq(check_config(&out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "configuration OK"), "%s", out);
    /* TLS needs TCP; and all addresses or none are rediss://. */
    h_agent_config_addr(0, NULL, "unix:/tmp/x.sock", "tls = yes");
    cr_assert_eq(check_config(&out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "TLS needs TCP addresses"), "%s", out);
    h_agent_config_addr(0, NULL, "rediss://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", NULL);
    cr_assert_eq(check_config(&out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "some addresses are rediss://"), "%s", out);
    /* Verification off is allowed, and said. */
    h_agent_config_addr(0, NULL, "rediss://127.0.0.1:6379", "tls_verify = no");
    cr_assert_eq(check_config(&out), 0, "%s", out);
    cr_assert_not_null(
        strstr(out, "tls_verify = no: the Redis server's certificate is not checked"), "%s", out);
}

/* ---- a certificate rotated while a lease is held ---- */

static int ctl_reload(void)
{
    const char *file = h_path("reload.out");
    char *argv[] = {DLOCKCTL_PATH, "-S", h_keepf("%s/status0.sock", H.dir), "reload", NULL};
    return h_wait_child(h_spawn(argv, file), 30000);
}

/* How many links came up over TLS so far, by the log. */
static int tls_ups(void)
{
    int n = 0;
    const char *log = h_read_file(H.agent[0].log);
    for (const char *p = log; p && (p = strstr(p, "connection up (rediss://")); p++)
        n++;
    return n;
}

/* The client certificate's files are renewed in place with one of another
 * CA, the only one Redis trusts from then on, and the agent is told to
 * reload: the links made after it (here after Redis drops the old ones)
 * present the new certificate, which the old one could not have done; the
 * lease stays held and valid throughout. */
ITEST(tls, a_reload_rotates_the_client_certificate_while_a_lease_is_held)
{
    int port = tls_node(0, NULL, true);
    h_redis_start();
    const char *crt = copy_as("client.crt", "agent.crt", 0644);
    const char *key = copy_as("client.key", "agent.key", 0600);
    h_agent_config(0, NULL,
                   h_keepf("tls_ca_file = %s\ntls_cert_file = %s\ntls_key_file = %s\n",
                           tls_file("ca.crt"), crt, key));
    h_agent_start_n(0);
    struct h_cl *a = h_client();
    dlock_lease *l = h_must_acquire(a, "rotated", 3000);
    redisReply *r = h_redis_cmd("CONFIG SET tls-ca-cert-file %s", tls_file("other-ca.crt"));
    cr_assert_eq(r->type, REDIS_REPLY_STATUS, "CONFIG SET: %s", r->str);
    freeReplyObject(r);
    copy_as("other-client.crt", "agent.crt", 0644);
    copy_as("other-client.key", "agent.key", 0600);
    cr_assert_eq(ctl_reload(), 0, "%s", h_read_file(h_path("reload.out")));
    cr_assert(logged(0, "TLS: certificates, keys and CAs read again"));
    int ups = tls_ups();
    r = h_redis_cmd("CLIENT KILL LADDR 127.0.0.1:%d", port);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    cr_assert_geq(r->integer, 2, "the agent's links: %lld", r->integer);
    freeReplyObject(r);
    H_WAIT_UNTIL(H_EVENT_MS, tls_ups() >= ups + 2 && h_agent_notices_up(0));
    /* A waiting acquire: the command link may still be in its set-up. */
    dlock_lease *m = NULL;
    int rc = h_acquire(a, "after-rotation", 3000, h_scaled_ms(H_EVENT_MS), &m);
    cr_assert_eq(rc, 0, "acquire after the rotation: %s", dlock_strerror(rc));
    cr_assert_eq(dlock_lease_release_sync(m), 0);
    cr_assert(dlock_lease_valid(l));
    cr_assert_eq(h_events(a, l, DLOCK_STATE_LOST), 0);
    cr_assert_eq(dlock_lease_release_sync(l), 0);
    H_KEY_GONE(h_key("rotated"));
}

/* ---- peers that stall ---- */

/* A TCP proxy to a TLS port that can stall: each connection made before
 * stall() gets the first bytes of its next chunk from the server (a TLS
 * record's header and a little of its body) and nothing after; the client's
 * bytes still go through. Connections made after it are left alone. */
#define PROXY_PAIRS 16
struct proxy {
    int lfd, upstream;
    int npairs;
    struct {
        int c, s;
        int cut;  /* the next server chunk is cut, then nothing */
        int dead; /* nothing more either way */
    } pair[PROXY_PAIRS];
    int stall, stop; /* atomics */
    pthread_t thread;
};

static void proxy_pair_add(struct proxy *p, int c)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)p->upstream),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (p->npairs == PROXY_PAIRS || s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(c);
        if (s >= 0)
            close(s);
        return;
    }
    p->pair[p->npairs].c = c;
    p->pair[p->npairs].s = s;
    p->npairs++;
}

static void *proxy_main(void *arg)
{
    struct proxy *p = arg;
    char buf[16384];
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd fds[1 + 2 * PROXY_PAIRS];
        int n = 0;
        fds[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        for (int i = 0; i < p->npairs; i++) {
            bool live = !p->pair[i].dead;
            fds[n++] = (struct pollfd){.fd = live ? p->pair[i].c : -1, .events = POLLIN};
            fds[n++] = (struct pollfd){.fd = live && p->pair[i].cut >= 0 ? p->pair[i].s : -1,
                                       .events = POLLIN};
        }
        if (poll(fds, (nfds_t)n, 50) <= 0)
            continue;
        if (fds[0].revents & POLLIN) {
            int c = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0)
                proxy_pair_add(p, c);
        }
        for (int i = 0; i < (n - 1) / 2; i++) {
            if (fds[1 + 2 * i].revents) {
                ssize_t got = read(p->pair[i].c, buf, sizeof buf);
                if (got <= 0 || write(p->pair[i].s, buf, (size_t)got) != got)
                    p->pair[i].dead = 1;
            }
            if (fds[2 + 2 * i].revents) {
                ssize_t got = read(p->pair[i].s, buf, sizeof buf);
                if (got <= 0) {
                    p->pair[i].dead = 1;
                    continue;
                }
                if (p->pair[i].cut > 0) {
                    got = got > 7 ? 7 : got; /* a 5-byte record header and 2 bytes of its body */
                    p->pair[i].cut = -1;
                }
                if (write(p->pair[i].c, buf, (size_t)got) != got)
                    p->pair[i].dead = 1;
            }
        }
        if (__atomic_exchange_n(&p->stall, 0, __ATOMIC_ACQ_REL))
            for (int i = 0; i < p->npairs; i++)
                p->pair[i].cut = p->pair[i].cut == 0 ? 1 : p->pair[i].cut;
    }
    return NULL;
}

/* Starts a proxy to 127.0.0.1:upstream; returns its port. */
static int proxy_start(struct proxy *p, int upstream)
{
    memset(p, 0, sizeof *p);
    p->upstream = upstream;
    int port = h_server_port();
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    cr_assert_eq(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(p->lfd, 16), 0);
    cr_assert_eq(pthread_create(&p->thread, NULL, proxy_main, p), 0);
    return port;
}

static void proxy_stop(struct proxy *p)
{
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_join(p->thread, NULL);
    close(p->lfd);
    for (int i = 0; i < p->npairs; i++) {
        close(p->pair[i].c);
        close(p->pair[i].s);
    }
}

/* Quorum mode over nodes 0 and 1 (TLS) and a third address; the agent's
 * command timeout is short, so that a silent link is dropped soon. */
static void quorum_with_third(const char *third)
{
    tls_node(0, NULL, true);
    tls_node(1, NULL, true);
    h_nodes_start(2);
    if (!third) {
        h_node_start(2);
    } else {
        H.nnodes = 3; /* node 2 does not run: the agent has its address only */
        snprintf(H.node[2].addr, sizeof H.node[2].addr, "%s", third);
    }
    const char *aini = "max_ttl_ms = 2000\ndefault_ttl_ms = 1500\nmin_ttl_ms = 400";
    h_agent_config(0, aini,
                   tls_redis_ini("client", "node_timeout_ms = 300\ncommand_timeout_ms = 600\n"
                                           "connect_timeout_ms = 600"));
    for (int n = 0; n < H.nnodes; n++)
        if (h_node_running(n))
            H_WAIT_UNTIL(6000, (h_node_uptime_s(n) - 1) * 1000 >= 2000);
    h_agent_start_n(0);
}

/* Lock and unlock n times on a quorum one of whose nodes is stalled. */
static void pairs_despite_the_stall(int n)
{
    struct h_cl *a = h_client();
    for (int i = 0; i < n; i++) {
        dlock_lease *l = NULL;
        int rc = h_acquire(a, "stalled-quorum", 1500, h_scaled_ms(10000), &l);
        cr_assert_eq(rc, 0, "pair %d: %s", i, dlock_strerror(rc));
        cr_assert_eq(dlock_lease_release_sync(l), 0);
    }
    cr_assert_not_null(h_status_ask(0, "status\n"), "the status socket did not answer");
}

/* A peer that accepts the connection and never answers the handshake: its
 * link times out at connect_timeout_ms, again and again; the other two
 * nodes grant meanwhile. */
ITEST(tls, a_peer_silent_in_the_handshake_stalls_only_its_link)
{
    int port = h_server_port();
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(lfd, 64), 0); /* connections wait in the backlog, unanswered */
    quorum_with_third(h_keepf("rediss://127.0.0.1:%d", port));
    H_WAIT_UNTIL(H_EVENT_MS, logged(0, "TLS handshake timed out"));
    pairs_despite_the_stall(20);
    close(lfd);
}

/* A peer that stops in the middle of a TLS record: the link's watchdog
 * drops it at command_timeout_ms; the other two nodes grant meanwhile, and
 * the link comes back once the peer behaves. */
ITEST(tls, a_peer_silent_mid_record_stalls_only_its_link)
{
    int port = tls_node(2, NULL, true);
    struct proxy p;
    snprintf(H.node[2].addr, sizeof H.node[2].addr, "rediss://127.0.0.1:%d", proxy_start(&p, port));
    quorum_with_third(NULL);
    __atomic_store_n(&p.stall, 1, __ATOMIC_RELEASE);
    pairs_despite_the_stall(20);
    H_WAIT_UNTIL(H_EVENT_MS, logged(0, "no reply within"));
    proxy_stop(&p);
}
