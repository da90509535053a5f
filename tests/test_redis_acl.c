/* SPDX-License-Identifier: BSD-3-Clause */
/* test_redis_acl.c -- the minimal Redis ACL user of docs/redis.md is enough
 * for everything the agent does: the test reads the ACL SETUSER line from
 * the document itself, creates that user on a real redis-server, and runs
 * two agents through it (grants, renewals, a waiter on the other agent woken
 * by the release notice, holder look-ups), then checks that the user can do
 * nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The ACL SETUSER line of docs/redis.md with its password placeholder
 * replaced by pw. */
static const char *documented_acl(void)
{
    static char line[1024];
    FILE *f = fopen(DLOCK_SOURCE_DIR "/docs/redis.md", "r");
    cr_assert(f, "cannot read docs/redis.md");
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strncmp(line, "ACL SETUSER dlock ", 18) == 0;
    fclose(f);
    cr_assert(found, "no 'ACL SETUSER dlock' line in docs/redis.md");
    line[strcspn(line, "\n")] = '\0';
    char *pw = strstr(line, ">CHANGE-ME");
    cr_assert(pw, "the documented ACL line has no >CHANGE-ME password");
    memmove(pw + 3, pw + 10, strlen(pw + 10) + 1);
    memcpy(pw, ">pw", 3);
    cr_assert_null(strchr(line, '%'));
    return line;
}

static void redis_ok(redisReply *r, const char *what)
{
    cr_assert(r && r->type == REDIS_REPLY_STATUS, "%s: %s", what,
              r && r->str ? r->str : "no status reply");
    freeReplyObject(r);
}

/* Two agents, both logging in as the documented user. */
static void start_with_acl_user(void)
{
    h_redis_start();
    const char *acl = documented_acl();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    redis_ok(h_redis_cmd(acl), acl); /* words split by hiredis; no '%' in it */
#pragma GCC diagnostic pop
    for (int i = 0; i < 2; i++) {
        h_agent_config(i, "min_ttl_ms = 30", "user = dlock\npassword = pw");
        h_agent_start_n(i);
    }
}

/* A command the ACL refuses shows as a warning (a script that fails half
 * way, a release that must be retried), though the lock logic may ride it
 * out: the agents must have logged no warning or error at all. */
static void no_warnings(void)
{
    for (int i = 0; i < 2; i++) {
        const char *log = h_read_file(H.agent[i].log);
        cr_assert(log && !strstr(log, "dlockd[warn]") && !strstr(log, "dlockd[error]"),
                  "agent %d logged a warning:\n%s", i, log ? log : "");
    }
}

ITEST(redis_acl, the_documented_user_can_do_all_the_agent_does)
{
    start_with_acl_user();
    struct h_cl *a = h_client_at(0), *b = h_client_at(1);
    /* Grant, and renewals: valid past its TTL. */
    dlock_lease *lease = h_must_acquire(a, "acl-job", 1500);
    H_HOLDS_FOR(2500, dlock_lease_valid(lease));
    cr_assert_eq(h_events(a, lease, DLOCK_STATE_LOST), 0);
    /* A waiter on the other agent, woken by the release notice. */
    struct h_acq w = {0};
    h_acquire_async(b, "acl-job", 30000, 20000, &w);
    cr_assert_eq(h_ctl(10000, "-S", h_path("status0.sock"), "holder", "acl-job", NULL), 0);
    cr_assert_eq(dlock_lease_release(lease), 0);
    H_WAIT_UNTIL(10000, w.done);
    cr_assert_eq(w.status, 0, "the waiter got %s", dlock_strerror(w.status));
    cr_assert_gt(dlock_lease_fence(w.lease), 0);
    cr_assert_eq(dlock_lease_release(w.lease), 0);
    H_KEY_GONE(h_key("acl-job"));
    no_warnings();
}

/* The user is as narrow as the document says: other keys, other channels
 * and administrative commands are refused. */
ITEST(redis_acl, the_documented_user_can_do_nothing_else)
{
    start_with_acl_user();
    static const char *const denied[] = {"ACL DRYRUN dlock GET other:key",
                                         "ACL DRYRUN dlock SET other:key x",
                                         "ACL DRYRUN dlock FLUSHALL",
                                         "ACL DRYRUN dlock KEYS *",
                                         "ACL DRYRUN dlock CONFIG SET save x",
                                         "ACL DRYRUN dlock PUBLISH other:chan x",
                                         "ACL DRYRUN dlock SUBSCRIBE other:chan"};
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        redisReply *r = h_redis_cmd(denied[i]);
#pragma GCC diagnostic pop
        cr_assert(r && r->type == REDIS_REPLY_STRING && strstr(r->str, "no permissions"),
                  "%s: allowed (%s)", denied[i], r && r->str ? r->str : "?");
        freeReplyObject(r);
    }
    redisReply *r = h_redis_cmd("ACL DRYRUN dlock GET dlock:x");
    cr_assert(r && r->type == REDIS_REPLY_STATUS, "a key under the prefix is refused");
    freeReplyObject(r);
}
