/* SPDX-License-Identifier: BSD-3-Clause */
/* test_redisproc.c -- the redis-server launcher of tools/redisproc.c: start
 * and PING (from our own server only), the errors of a server that cannot start, stop, kill, pause
 * and persistence on request. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "redisproc.h"

static struct redisproc_opts opts(const char *sock)
{
    return (struct redisproc_opts){
        .unix_socket = h_path(sock), .dir = H.dir, .log = h_path("r.log")};
}

/* SET then GET through a fresh connection: the server serves commands. */
static void serves(const struct redisproc *r)
{
    redisContext *c = redisConnectUnix(r->sock);
    cr_assert(c && !c->err, "cannot connect to %s", r->sock);
    redisReply *rep = redisCommand(c, "SET k v");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    rep = redisCommand(c, "CONFIG GET save");
    cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
    cr_assert_str_eq(rep->element[1]->str, "", "a server without persistence saves");
    freeReplyObject(rep);
    redisFree(c);
}

ITEST(redisproc, starts_answers_and_stops)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), 0, "%s", r.err);
    cr_assert_gt(r.pid, 0);
    cr_assert(redisproc_alive(&r));
    cr_assert_eq(redisproc_ping(&r, 1000), 0);
    serves(&r);
    struct stat st;
    cr_assert_eq(stat(o.unix_socket, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "socket mode %o", st.st_mode & 0777);
    cr_assert_eq(redisproc_stop(&r, h_scaled_ms(H_STOP_MS)), 0, "redis-server exit status %d",
                 r.status);
    cr_assert_eq(r.pid, 0);
    cr_assert_not(redisproc_alive(&r));
    cr_assert_neq(redisproc_ping(&r, 200), 0, "a stopped server answers");
    cr_assert_eq(redisproc_stop(&r, h_scaled_ms(H_STOP_MS)), -1, "stopping twice");
    cr_assert_eq(access(h_path("dump.rdb"), F_OK), -1, "a server without persistence saved");
}

/* A server of another process on our address (which took the port first,
 * say) is not ours: its PONG does not make ours ready. */
ITEST(redisproc, another_process_server_does_not_answer_for_ours)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), 0, "%s", r.err);
    struct redisproc other = r;
    other.pid = r.pid + 1;
    cr_assert_neq(redisproc_ping(&other, 1000), 0, "the server answers for pid %d", other.pid);
    cr_assert_eq(redisproc_ping(&r, 1000), 0);
    cr_assert_eq(redisproc_stop(&r, h_scaled_ms(H_STOP_MS)), 0);
}

ITEST(redisproc, not_on_path_is_reported_at_spawn)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    o.program = "redis-server-that-is-not-there";
    cr_assert_eq(redisproc_spawn(&r, &o), -1);
    cr_assert_eq(r.pid, 0);
    cr_assert(strstr(r.err, "cannot run redis-server-that-is-not-there") &&
                  strstr(r.err, "is it on PATH?"),
              "%s", r.err);
    o.program = "/nonexistent/redis-server";
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), -1);
    cr_assert(strstr(r.err, "cannot run /nonexistent/redis-server: No such file"), "%s", r.err);
}

ITEST(redisproc, bad_argument_is_reported_with_the_server_words)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    const char *extra[] = {"--no-such-directive", "1", NULL};
    o.extra = extra;
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), -1);
    cr_assert_eq(r.pid, 0);
    cr_assert(strstr(r.err, "exited at start (status 1)"), "%s", r.err);
    cr_assert(strstr(r.err, "no-such-directive"), "the server's complaint is missing: %s", r.err);
}

ITEST(redisproc, bad_log_or_dir_is_reported)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    o.log = "/nonexistent/r.log";
    cr_assert_eq(redisproc_spawn(&r, &o), -1);
    cr_assert(strstr(r.err, "log file /nonexistent/r.log"), "%s", r.err);
    o = opts("a.sock");
    o.dir = "/nonexistent";
    cr_assert_eq(redisproc_spawn(&r, &o), -1);
    cr_assert(strstr(r.err, "directory /nonexistent"), "%s", r.err);
}

ITEST(redisproc, no_answer_is_reported_at_the_deadline)
{
    /* A "server" that runs but never opens its socket. */
    const char *script = h_path("silent-server");
    FILE *f = fopen(script, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\nexec sleep 60\n");
    fclose(f);
    cr_assert_eq(chmod(script, 0755), 0);
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    o.program = script;
    cr_assert_eq(redisproc_start(&r, &o, 300), -1);
    cr_assert(strstr(r.err, "did not answer PING within 300 ms"), "%s", r.err);
    cr_assert_eq(r.pid, 0, "the silent server was left running");
}

ITEST(redisproc, pause_resume_kill)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), 0, "%s", r.err);
    cr_assert_eq(redisproc_pause(&r), 0);
    cr_assert(r.paused);
    cr_assert(redisproc_alive(&r), "a paused server runs");
    cr_assert_neq(redisproc_ping(&r, 200), 0, "a paused server answers");
    redisproc_resume(&r);
    cr_assert_not(r.paused);
    H_WAIT_UNTIL(H_START_MS, redisproc_ping(&r, 200) == 0);
    redisproc_pause(&r);
    redisproc_kill(&r);
    cr_assert_eq(r.pid, 0);
    cr_assert_eq(r.status, 128 + SIGKILL);
}

ITEST(redisproc, paused_server_stops)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), 0, "%s", r.err);
    cr_assert_eq(redisproc_pause(&r), 0);
    cr_assert_eq(redisproc_stop(&r, h_scaled_ms(H_STOP_MS)), 0, "status %d", r.status);
}

ITEST(redisproc, persistence_on_request_keeps_data_across_restarts)
{
    struct redisproc r;
    struct redisproc_opts o = opts("a.sock");
    o.persist = true;
    const char *extra[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    o.extra = extra;
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), 0, "%s", r.err);
    redisContext *c = redisConnectUnix(r.sock);
    cr_assert(c && !c->err);
    freeReplyObject(redisCommand(c, "SET kept yes"));
    redisFree(c);
    redisproc_kill(&r);
    cr_assert_eq(redisproc_start(&r, &o, h_scaled_ms(H_START_MS)), 0, "%s", r.err);
    c = redisConnectUnix(r.sock);
    cr_assert(c && !c->err);
    redisReply *rep = redisCommand(c, "GET kept");
    cr_assert(rep && rep->type == REDIS_REPLY_STRING, "the key did not survive a kill");
    freeReplyObject(rep);
    redisFree(c);
    cr_assert_eq(redisproc_stop(&r, h_scaled_ms(H_STOP_MS)), 0);
}

ITEST(redisproc, tcp_port)
{
    struct redisproc r;
    /* A port that is free now (the kernel's pick), then given to the server. */
    int port = 0;
    for (int tries = 0; tries < 20 && !port; tries++) {
        int cand = 20000 + (int)(getpid() * 7 + tries * 131) % 30000;
        struct redisproc_opts o = {.port = cand, .dir = H.dir, .log = h_path("tcp.log")};
        if (redisproc_start(&r, &o, h_scaled_ms(H_START_MS)) == 0)
            port = cand;
    }
    cr_assert_neq(port, 0, "no free TCP port: %s", r.err);
    cr_assert_str_eq(r.host, "127.0.0.1");
    cr_assert_eq(redisproc_ping(&r, 1000), 0);
    /* Our server answers there, not another one. */
    redisContext *c = redisConnect("127.0.0.1", port);
    cr_assert(c && !c->err);
    redisReply *rep = redisCommand(c, "INFO server");
    cr_assert(rep && rep->type == REDIS_REPLY_STRING);
    char want[64];
    snprintf(want, sizeof want, "process_id:%d\r", (int)r.pid);
    cr_assert_not_null(strstr(rep->str, want), "another server on port %d", port);
    freeReplyObject(rep);
    redisFree(c);
    cr_assert_eq(redisproc_stop(&r, h_scaled_ms(H_STOP_MS)), 0);
}
