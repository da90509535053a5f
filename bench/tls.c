/* SPDX-License-Identifier: BSD-3-Clause */
/* tls.c -- TLS to Redis against plaintext. A redis-server of its own with a
 * plaintext and a TLS port (certificates from tests/tls/make-pki.sh), an
 * agent on each (127.0.0.1:PORT and rediss://127.0.0.1:TLSPORT, handoff
 * off so that every pair goes to Redis), the 1-client and many-client runs
 * of pairs.c on each, the 1-client run again with both ports behind the
 * delay proxy, and redis-benchmark's SET on each port as the plain clients'
 * baseline (hiredis 0.14, the plain client of the other parts, has no TLS;
 * redis-benchmark is built with it). */
#include <ctype.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define START_MS 10000

enum { SIDE_PLAIN, SIDE_TLS, SIDES };

static volatile pid_t agent_pids[2 * SIDES];
static struct redisproc redis;

/* A loopback port nothing listens on (the kernel's choice). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int make_pki(const char *pki)
{
    char cmd[3 * BENCH_PATH];
    snprintf(cmd, sizeof cmd, "sh '%s' '%s' >'%s/make-pki.out' 2>&1", TLS_PKI_SCRIPT, pki, pki);
    if (mkdir(pki, 0755) != 0 || system(cmd) != 0) {
        fprintf(stderr, "dlock-bench: cannot make the TLS certificates (%s; is openssl there?)\n",
                cmd);
        return -1;
    }
    return 0;
}

static int start_redis(const struct env *e, const char *pki, int port, int tls_port, char *sock)
{
    char tport[16], cert[BENCH_PATH + 16], key[BENCH_PATH + 16], ca[BENCH_PATH + 16],
        log[BENCH_PATH + 16];
    snprintf(tport, sizeof tport, "%d", tls_port);
    snprintf(cert, sizeof cert, "%s/server.crt", pki);
    snprintf(key, sizeof key, "%s/server.key", pki);
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(log, sizeof log, "%s/tls-redis.log", e->dir);
    snprintf(sock, BENCH_PATH, "%s/tls-redis.sock", e->dir);
    const char *extra[] = {"--tls-port",
                           tport,
                           "--tls-cert-file",
                           cert,
                           "--tls-key-file",
                           key,
                           "--tls-ca-cert-file",
                           ca,
                           "--tls-auth-clients",
                           "no",
                           NULL};
    struct redisproc_opts o = {
        .unix_socket = sock, .port = port, .dir = e->dir, .log = log, .extra = extra};
    if (redisproc_start(&redis, &o, START_MS) != 0) {
        fprintf(stderr, "dlock-bench: TLS redis-server: %s\n", redis.err);
        return -1;
    }
    return 0;
}

/* Agent i on address addr (with the CA for TLS): its view of the run. */
static int start_agent(const struct env *e, int i, const char *addr, const char *pki, struct env *v,
                       struct agent_start *s)
{
    *v = *e;
    snprintf(v->agent_sock, sizeof v->agent_sock, "%s/tls-dlock%d.sock", e->dir, i);
    snprintf(v->agent_log, sizeof v->agent_log, "%s/tls-dlockd%d.log", e->dir, i);
    snprintf(v->conf, sizeof v->conf, "%s/tls-dlockd%d.conf", e->dir, i);
    FILE *f = fopen(v->conf, "w");
    if (!f)
        return -1;
    fprintf(
        f,
        "[agent]\nlog_level = warn\ncohort_handoffs = 0\nstatus_socket =\n[redis]\naddress = %s\n",
        addr);
    if (strncmp(addr, "rediss://", 9) == 0)
        fprintf(f, "tls_ca_file = %s/ca.crt\n", pki);
    fclose(f);
    char *argv[] = {DLOCKD_PATH, "-s", v->agent_sock, "-c", v->conf, NULL};
    pid_t pid = env_spawn(argv, v->agent_log);
    if (pid < 0)
        return -1;
    agent_pids[i] = v->agent_pid = pid;
    *s = (struct agent_start){.what = "dlockd of the TLS part",
                              .sock = v->agent_sock,
                              .log = v->agent_log,
                              .pid = &v->agent_pid,
                              .started = now_ns()};
    return 0;
}

static void stop_agents(struct env *v, int n)
{
    for (int i = 0; i < n; i++) {
        pid_t pid = v[i].agent_pid;
        if (pid > 0)
            env_stop_child(&pid);
        v[i].agent_pid = 0;
        agent_pids[i] = 0;
    }
}

/* redis-benchmark's SET rate on a port, with `clients` connections:
 * requests/s, or -1 after printing what it said. */
static double redis_benchmark(int port, bool tls, const char *pki, int clients, long n)
{
    char cmd[3 * BENCH_PATH], tail[512] = "";
    snprintf(cmd, sizeof cmd,
             "redis-benchmark -h 127.0.0.1 -p %d %s%s%s -c %d -n %ld -q SET bench:tls v 2>&1 | "
             "tr '\\r' '\\n'",
             port, tls ? "--tls --cacert '" : "", tls ? pki : "", tls ? "/ca.crt'" : "", clients,
             n);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512];
    double rps = -1;
    while (fgets(line, sizeof line, p)) {
        /* "SET bench:tls v: 41152.26 requests per second, p50=0.023 msec" */
        char *at = strstr(line, " requests per second");
        if (line[0] != '\n' && line[0] != ' ')
            snprintf(tail, sizeof tail, "%s", line);
        if (!at)
            continue;
        char *num = at;
        while (num > line && (isdigit((unsigned char)num[-1]) || num[-1] == '.'))
            num--;
        rps = strtod(num, NULL);
    }
    pclose(p);
    if (rps < 0)
        fprintf(stderr, "dlock-bench: redis-benchmark%s -c %d gave no rate; it said: %s",
                tls ? " --tls" : "", clients, tail[0] ? tail : "nothing\n");
    return rps;
}

int run_tls(struct env *e, double delay_us, long pairs, int clients, double seconds,
            struct tls_result *out)
{
    memset(out, 0, sizeof *out);
    out->pairs = pairs;
    out->clients = clients;
    out->delay_us = delay_us;
    char pki[BENCH_PATH], sock[BENCH_PATH];
    snprintf(pki, sizeof pki, "%s/pki", e->dir);
    int port = free_port(), tls_port = free_port();
    while (tls_port == port)
        tls_port = free_port();
    if (port < 0 || tls_port < 0 || make_pki(pki) != 0 ||
        start_redis(e, pki, port, tls_port, sock) != 0)
        return -1;
    /* The plain client's baseline, before any agent runs. */
    long rb = pairs * 5;
    out->rb[SIDE_PLAIN][0] = redis_benchmark(port, false, pki, 1, rb);
    out->rb[SIDE_TLS][0] = redis_benchmark(tls_port, true, pki, 1, rb);
    out->rb[SIDE_PLAIN][1] = redis_benchmark(port, false, pki, clients, rb * 4);
    out->rb[SIDE_TLS][1] = redis_benchmark(tls_port, true, pki, clients, rb * 4);
    struct env v[2 * SIDES];
    struct agent_start s[2 * SIDES];
    struct delayproxy *proxy[SIDES] = {0};
    char addr[2 * SIDES][BENCH_PATH];
    snprintf(addr[SIDE_PLAIN], BENCH_PATH, "127.0.0.1:%d", port);
    snprintf(addr[SIDE_TLS], BENCH_PATH, "rediss://127.0.0.1:%d", tls_port);
    int n = 0, rc = 0, via[SIDES] = {0};
    /* Behind the delay proxy: each port through a proxy of its own, and an
     * agent more on each. */
    for (int side = 0; side < SIDES && delay_us > 0 && rc == 0; side++) {
        via[side] = free_port();
        char listen[32], target[32];
        snprintf(listen, sizeof listen, "tcp:127.0.0.1:%d", via[side]);
        snprintf(target, sizeof target, "tcp:127.0.0.1:%d", side == SIDE_TLS ? tls_port : port);
        proxy[side] = delayproxy_start(listen, target, (uint64_t)(delay_us * 1e3));
        rc = proxy[side] ? 0 : -1;
        snprintf(addr[SIDES + side], BENCH_PATH, "%s127.0.0.1:%d",
                 side == SIDE_TLS ? "rediss://" : "", via[side]);
    }
    int nagents = delay_us > 0 ? 2 * SIDES : SIDES;
    for (int i = 0; i < nagents && rc == 0; i++, n++) {
        rc = start_agent(e, i, addr[i], pki, &v[i], &s[i]);
        /* The part's Redis is the one whose CPU counts (and the one whose
         * INFO cpu the many-client run reads, over its unix socket). */
        v[i].redis.pid = redis.pid;
        snprintf(v[i].redis_sock, sizeof v[i].redis_sock, "%s", sock);
    }
    if (rc == 0)
        rc = agents_wait_ready(s, n, BENCH_TTL_MS, START_MS);
    for (int side = 0; side < SIDES && rc == 0 && delay_us > 0; side++)
        out->rb[side][2] = redis_benchmark(via[side], side == SIDE_TLS, pki, 1, pairs / 5);
    for (int side = 0; side < SIDES && rc == 0; side++) {
        fprintf(stderr, "dlock-bench: TLS part: %s, 1 client\n", side ? "TLS" : "plaintext");
        struct tls_side *t = &out->side[side];
        rc = run_single(&dlock_driver, NULL, &v[side], pairs, &t->d1, NULL);
        if (rc == 0) {
            fprintf(stderr, "dlock-bench: TLS part: %s, %d clients\n", side ? "TLS" : "plaintext",
                    clients);
            rc = run_multi(&dlock_driver, NULL, &v[side], clients, seconds, &t->dm, NULL);
        }
        if (rc == 0 && delay_us > 0) {
            fprintf(stderr, "dlock-bench: TLS part: %s across the delay, 1 client\n",
                    side ? "TLS" : "plaintext");
            rc = run_single(&dlock_driver, NULL, &v[SIDES + side], pairs / 10, &t->dd, NULL);
        }
    }
    for (int i = 0; i < n; i++)
        out->log_lines += env_log_lines(v[i].agent_log);
    stop_agents(v, n);
    for (int side = 0; side < SIDES; side++)
        if (proxy[side])
            delayproxy_stop(proxy[side]);
    redisproc_stop(&redis, START_MS);
    return rc;
}

void tls_kill(void)
{
    for (int i = 0; i < 2 * SIDES; i++)
        if (agent_pids[i] > 0)
            kill(agent_pids[i], SIGKILL);
    if (redis.pid > 0)
        kill(redis.pid, SIGKILL);
}
