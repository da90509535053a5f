/* SPDX-License-Identifier: BSD-3-Clause */
/* test_restart.c -- leases outlive the agent's process (docs/restarts.md):
 * a crash or a planned restart followed by a successor keeps them, on the
 * same lease page, until their client resumes its connection; a stop ends
 * them. Driven through raw protocol-2 connections (rawclient.h), so that
 * every frame of the resume is seen. */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "rawclient.h"
#include "shm.h"
#include "wire.h"

static const char *state_dir(void)
{
    return h_keepf("%s.state", H.agent[0].sock);
}

/* A crash (kill -9) and a successor: the lease stays valid on the same page
 * throughout, the successor confirms and renews it, and the client takes
 * its connection back with the lease's id, fence and token unchanged. */
ITEST(restart, crash_then_successor_keeps_the_lease)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    cr_assert(c.ok.flags & WIRE_HELLO_RESUMABLE, "a state directory, yet not resumable");
    cr_assert_neq(c.ok.conn_id, 0);
    struct wire_granted g = rc_acquire(&c, "job", 20000);
    char *token = h_keep(h_redis_get(h_key("job")));
    h_agent_kill(0);
    cr_assert(rc_valid(&c, g.slot, g.lease_id), "the lease is not valid with no agent");
    struct wire_hdr h;
    uint8_t body[64];
    cr_assert_eq(h_raw_read_frame(c.fd, 5000, &h, body, sizeof body), 0, "no EOF after the crash");
    h_agent_start_n(0);
    /* Confirmed by a renewal: a deadline later than the predecessor's. */
    rc_wait_confirmed(&c, &g);
    cr_assert_str_eq(h_redis_get(h_key("job")), token);
    rc_resume_held(&c, &g);
    /* The connection is the old one again: a second lease, then both go. */
    struct wire_granted g2 = rc_acquire(&c, "job2", 20000);
    cr_assert_neq(g2.slot, g.slot);
    rc_release(&c, g.lease_id);
    rc_release(&c, g2.lease_id);
    H_KEY_GONE(h_key("job"));
    H_KEY_GONE(h_key("job2"));
}

/* dlockd --successor: the running agent leaves (exit 0, nothing released)
 * and the successor takes over. */
ITEST(restart, successor_flag_takes_over_from_a_running_agent)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "handover", 20000);
    h_agent_successor(0);
    cr_assert(rc_valid(&c, g.slot, g.lease_id));
    cr_assert(h_redis_exists(h_key("handover")));
    rc_resume_held(&c, &g);
    rc_release(&c, g.lease_id);
    H_KEY_GONE(h_key("handover"));
}

/* SIGUSR2 asks for a restart too: the agent exits 0 leaving its leases. */
ITEST(restart, sigusr2_leaves_the_leases)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "usr2", 20000);
    cr_assert_eq(kill(H.agent[0].pid, SIGUSR2), 0);
    cr_assert_eq(h_wait_child(H.agent[0].pid, H_STOP_MS), 0);
    H.agent[0].pid = 0;
    cr_assert(h_redis_exists(h_key("usr2")));
    cr_assert(rc_valid(&c, g.slot, g.lease_id));
    h_agent_start_n(0);
    rc_resume_held(&c, &g);
    rc_release(&c, g.lease_id);
}

/* A stop (SIGTERM, no successor) ends every lease and leaves nothing: the
 * next agent knows no connection to resume. */
ITEST(restart, stop_ends_leases_and_removes_the_state)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "stopped", 20000);
    struct stat st;
    cr_assert_eq(stat(state_dir(), &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0700);
    cr_assert_eq(h_agent_stop(0), 0);
    H_KEY_GONE(h_key("stopped"));
    cr_assert_neq(access(state_dir(), F_OK), 0, "state directory left after a stop");
    cr_assert(!rc_valid(&c, g.slot, g.lease_id));
    h_agent_start_n(0);
    struct resumed r = rc_resume(&c, c.ok.conn_id, c.ok.secret);
    cr_assert_eq(r.code, DLOCK_ENOTFOUND);
}

/* A wrong secret resumes nothing, and the lease stays for the right one. */
ITEST(restart, wrong_secret_is_refused)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "secret", 20000);
    h_agent_kill(0);
    h_agent_start_n(0);
    uint8_t bad[WIRE_SECRET_LEN];
    memcpy(bad, c.ok.secret, sizeof bad);
    bad[7] ^= 1;
    struct rc other = c;
    struct resumed r = rc_resume(&other, c.ok.conn_id, bad);
    cr_assert_eq(r.code, DLOCK_ENOTFOUND);
    cr_assert(h_redis_exists(h_key("secret")));
    rc_resume_held(&c, &g);
    rc_release(&c, g.lease_id);
    H_KEY_GONE(h_key("secret"));
}

/* Leases whose key went away, or was taken by another, while no agent ran
 * are lost: the page stops showing them, another's key is left alone, and
 * the resumed client hears of neither. */
ITEST(restart, key_lost_during_the_gap_is_lost)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted gone = rc_acquire(&c, "gone", 20000);
    struct wire_granted taken = rc_acquire(&c, "taken", 20000);
    h_agent_kill(0);
    h_redis_del(h_key("gone"));
    h_redis_del(h_key("taken"));
    h_redis_set_px(h_key("taken"), "another-holder", 60000);
    h_agent_start_n(0);
    H_WAIT_UNTIL(H_EVENT_MS, rc_slot(&c, gone.slot).lease_id != gone.lease_id &&
                                 rc_slot(&c, taken.slot).lease_id != taken.lease_id);
    cr_assert_str_eq(h_redis_get(h_key("taken")), "another-holder");
    struct resumed r = rc_resume(&c, c.ok.conn_id, c.ok.secret);
    cr_assert_eq(r.nevents, 0);
}

/* A lease its client released while no agent ran (the touch slot's mark)
 * is released by the successor. */
ITEST(restart, release_marked_while_down_is_released)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "marked", 20000);
    h_agent_kill(0);
    __atomic_store_n(&c.touch[g.slot], SHM_TOUCH_RELEASED | (uint64_t)rc_boot_ns(),
                     __ATOMIC_RELEASE);
    h_agent_start_n(0);
    H_KEY_GONE(h_key("marked"));
    struct resumed r = rc_resume(&c, c.ok.conn_id, c.ok.secret);
    cr_assert_eq(r.nevents, 0);
}

/* A holder in another process, which acquires name and then waits to be
 * killed; its acquire's result comes back through shared memory (a forked
 * child keeps no descriptor of the test's). */
static pid_t holder(const char *name)
{
    volatile int *res =
        mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq((void *)res, MAP_FAILED);
    *res = 1;
    pid_t pid = h_fork();
    if (pid == 0) {
        struct rc c;
        struct wire_granted g;
        int rc = rc_open_raw(&c, H.agent[0].sock, WIRE_VERSION);
        if (rc == 0)
            rc = rc_acquire_raw(&c, name, 20000, &g);
        __atomic_store_n(res, rc, __ATOMIC_RELEASE);
        for (;;)
            pause();
    }
    H_WAIT_UNTIL(5000, __atomic_load_n(res, __ATOMIC_ACQUIRE) != 1);
    cr_assert_eq(*res, 0, "the holder's acquire: %d", *res);
    return pid;
}

static void reap(pid_t pid)
{
    kill(pid, SIGKILL);
    cr_assert_neq(h_wait_child(pid, H_STOP_MS), -1);
}

/* A holder that died while no agent ran has its key released by the
 * successor; one that dies after the takeover, when it does. */
ITEST(restart, holder_death_around_the_gap_releases)
{
    h_start(NULL);
    pid_t early = holder("early"), late = holder("late");
    h_agent_kill(0);
    reap(early);
    h_agent_start_n(0);
    H_KEY_GONE(h_key("early"));
    cr_assert(h_redis_exists(h_key("late")), "a live holder's lease was not taken over");
    reap(late);
    H_KEY_GONE(h_key("late"));
}

/* A connection of protocol version 1 cannot come back, and its page (a
 * memfd) is out of the successor's reach: while its process lives, the
 * page may show the lease valid until its deadline, so the key stays until
 * its TTL rather than being freed for another holder. */
ITEST(restart, version_1_connection_of_a_live_process_keeps_its_key_to_the_ttl)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION_MIN);
    struct wire_granted g = rc_acquire(&c, "old-client", 30000);
    h_agent_kill(0);
    h_agent_start_n(0);
    cr_assert(h_redis_exists(h_key("old-client")), "released while its page shows it valid");
    cr_assert(rc_valid(&c, g.slot, g.lease_id));
    cr_assert(h_redis_pttl(h_key("old-client")) > 0);
}

ITEST(restart, no_state_dir_means_no_resume)
{
    h_start("state_dir =\n");
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    cr_assert_eq(c.ok.flags & WIRE_HELLO_RESUMABLE, 0);
    cr_assert_eq(c.ok.conn_id, 0);
    cr_assert_neq(access(state_dir(), F_OK), 0);
}

/* Two agents on one state directory: the second is refused, saying why. */
ITEST(restart, state_dir_is_one_agents)
{
    h_start(NULL);
    const char *log = h_path("second.out");
    char *other = h_keep(h_path("other.sock"));
    char *argv[] = {DLOCKD_PATH, "-c", H.agent[0].conf, "-s", other, "-r", H.redis_addr, NULL};
    /* Another socket, the same state directory. */
    char ini[300];
    snprintf(ini, sizeof ini, "state_dir = %s\n", state_dir());
    h_agent_config(1, ini, NULL);
    argv[2] = H.agent[1].conf;
    pid_t pid = h_spawn(argv, log);
    cr_assert_eq(h_wait_child(pid, H_START_MS), 1);
    cr_assert_not_null(strstr(h_read_file(log), "in use by another dlockd"), "%s",
                       h_read_file(log));
}

/* ---- Redis moved by a reload: a restart in place ---- */

static int ctl_reload(const char **out)
{
    const char *file = h_path("reload.out");
    unlink(file);
    char *argv[] = {DLOCKCTL_PATH, "-S", h_keepf("%s/status0.sock", H.dir), "reload", NULL};
    int st = h_wait_child(h_spawn(argv, file), 30000);
    const char *text = h_read_file(file);
    *out = h_keep(text ? text : "");
    return st;
}

/* A reload that changes the Redis of the leases (here its mode setting,
 * with the same Redis behind) restarts the agent in place (the same
 * process): the leases are taken over in doubt, not valid until their keys
 * are confirmed, then HELD again on the same page, and the client resumes. */
ITEST(restart, reload_moving_redis_restarts_in_place_and_confirms)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "moved", 20000);
    pid_t pid = H.agent[0].pid;
    h_agent_config(0, NULL, "mode = single");
    const char *out;
    cr_assert_eq(ctl_reload(&out), 0, "dlockctl reload:\n%s", out);
    cr_assert_not_null(strstr(out, "reloaded: [redis] mode auto -> single (by a restart in place)"),
                       "%s", out);
    struct wire_hdr h;
    uint8_t body[64];
    cr_assert_eq(h_raw_read_frame(c.fd, 5000, &h, body, sizeof body), 0, "no EOF at the re-exec");
    rc_wait_confirmed(&c, &g);
    cr_assert_eq(H.agent[0].pid, pid);
    cr_assert(h_agent_alive(0), "the agent did not restart in place");
    rc_resume_held(&c, &g);
    rc_release(&c, g.lease_id);
    H_KEY_GONE(h_key("moved"));
}

/* Another database is another Redis for the leases: theirs are not there,
 * so they are lost, never valid on the new one; the agent serves the new
 * database. */
ITEST(restart, reload_to_another_database_loses_the_leases)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted g = rc_acquire(&c, "db", 20000);
    h_agent_config(0, NULL, "database = 1");
    const char *out;
    cr_assert_eq(ctl_reload(&out), 0, "dlockctl reload:\n%s", out);
    cr_assert_not_null(strstr(out, "(by a restart in place)"), "%s", out);
    H_WAIT_UNTIL(H_EVENT_MS, rc_slot(&c, g.slot).lease_id != g.lease_id);
    struct resumed r = rc_resume(&c, c.ok.conn_id, c.ok.secret);
    cr_assert_eq(r.nevents, 0);
    struct wire_granted g2 = rc_acquire(&c, "db", 20000);
    cr_assert(rc_valid(&c, g2.slot, g2.lease_id));
    rc_release(&c, g2.lease_id);
}

/* Copies node 0's keys, all but skip, to node 1 with their TTLs: what a
 * replica promoted by hand has, which missed the last write (skip). */
static void replicate_but(const char *skip)
{
    redisReply *keys = h_node_cmd(0, "KEYS *");
    cr_assert_eq(keys->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        if (strcmp(k, skip) == 0)
            continue;
        long long ttl = h_node_pttl(0, k);
        redisReply *dump = h_node_cmd(0, "DUMP %s", k);
        cr_assert_eq(dump->type, REDIS_REPLY_STRING, "DUMP %s", k);
        redisReply *r =
            h_node_cmd(1, "RESTORE %s %lld %b", k, ttl > 0 ? ttl : 0, dump->str, dump->len);
        cr_assert_eq(r->type, REDIS_REPLY_STATUS, "RESTORE %s: %s", k, r->str);
        freeReplyObject(r);
        freeReplyObject(dump);
    }
    freeReplyObject(keys);
}

/* A failover by hand: the operator promotes another server and points the
 * agent at it with a reload. The agent restarts in place and confirms each
 * lease on the new server: one whose key is there, with its token, is HELD
 * again; one whose key is not is LOST (its slot cleared, never valid on the
 * new server), and the name is free there for the next holder. No lease is
 * valid on two servers: every lease is in doubt until its key is found. */
ITEST(restart, reload_to_a_promoted_server_keeps_the_leases_it_has)
{
    H.agent[0].addr_in_config = 1;
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    struct wire_granted kept = rc_acquire(&c, "kept", 20000);
    struct wire_granted missed = rc_acquire(&c, "missed", 20000);
    char *token = h_keep(h_redis_get(h_key("kept")));
    h_node_start(1);
    replicate_but(h_key("missed"));
    h_agent_config_addr(0, NULL, H.node[1].addr, NULL);
    const char *out;
    cr_assert_eq(ctl_reload(&out), 0, "dlockctl reload:\n%s", out);
    cr_assert_not_null(strstr(out, "reloaded: [redis] address"), "%s", out);
    cr_assert_not_null(strstr(out, "(by a restart in place)"), "%s", out);
    rc_wait_confirmed(&c, &kept);
    H_WAIT_UNTIL(H_EVENT_MS, rc_slot(&c, missed.slot).lease_id != missed.lease_id);
    cr_assert(!rc_valid(&c, missed.slot, missed.lease_id));
    rc_resume_held(&c, &kept);
    cr_assert_str_eq(h_node_get(1, h_key("kept")), token);
    /* The missed name is free on the new server, with a higher fence. */
    struct rc d;
    rc_open(&d, WIRE_VERSION);
    struct wire_granted again = rc_acquire(&d, "missed", 20000);
    cr_assert_gt(again.fence, missed.fence);
    cr_assert(!rc_valid(&c, missed.slot, missed.lease_id));
    rc_release(&d, again.lease_id);
    rc_release(&c, kept.lease_id);
    H_WAIT_UNTIL(H_EVENT_MS, !h_node_exists(1, h_key("kept")));
}

/* A connection taken over whose client is not back yet has no socket: a
 * reload, then a stop, pass it by (the stop releases its leases) rather
 * than reading or writing it. */
ITEST(restart, reload_and_stop_with_a_client_not_back)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    rc_acquire(&c, "away", 20000);
    h_agent_kill(0);
    h_agent_start_n(0);
    h_agent_config(0, "handshake_timeout_ms = 5000", NULL);
    const char *out;
    cr_assert_eq(ctl_reload(&out), 0, "dlockctl reload:\n%s", out);
    cr_assert(h_agent_alive(0));
    cr_assert_eq(h_agent_stop(0), 0);
    H_KEY_GONE(h_key("away"));
}

/* A successor's new lease ids are not its predecessor's: a resumed client
 * may still know an old one. */
ITEST(restart, lease_ids_are_not_reused_by_a_successor)
{
    h_start(NULL);
    struct rc c;
    rc_open(&c, WIRE_VERSION);
    uint64_t old[4];
    for (int i = 0; i < 4; i++) {
        old[i] = rc_acquire(&c, h_keepf("id%d", i), 20000).lease_id;
        if (i < 3)
            rc_release(&c, old[i]);
    }
    struct wire_granted kept = {.lease_id = old[3]};
    h_agent_kill(0);
    h_agent_start_n(0);
    struct resumed r = rc_resume(&c, c.ok.conn_id, c.ok.secret);
    cr_assert_eq(r.nevents, 1);
    cr_assert_eq(r.ev[0].lease_id, kept.lease_id);
    for (int i = 0; i < 4; i++) {
        uint64_t id = rc_acquire(&c, h_keepf("new%d", i), 20000).lease_id;
        for (int j = 0; j < 4; j++)
            cr_assert_neq(id, old[j], "lease id %llx granted again", (unsigned long long)id);
    }
}
