/* SPDX-License-Identifier: BSD-3-Clause */
/* test_multi.c -- lease sets: several names taken all or nothing by libdlock
 * (ordered acquisition with rollback) and by dlockctl run -a, against a real
 * redis-server and dlockd, and against a real Redis Cluster with the names
 * in different slots. */
#define H_TEST_TIMEOUT_S 180 /* the cluster test forms a cluster of 6 nodes */

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcluster.h"

#define TTL 30000

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

/* A set acquire of the client, the options in short. */
static int set_acq(struct h_cl *cl, const char *const *names, size_t n, uint32_t ttl_ms,
                   int64_t wait_ms, uint32_t flags, dlock_lease_set **out)
{
    dlock_acquire_options o = {.ttl_ms = ttl_ms, .wait_ms = wait_ms, .flags = flags};
    return dlock_lease_set_acquire(cl->c, names, n, &o, NULL, out);
}

static dlock_lease_set *must_set(struct h_cl *cl, const char *const *names, size_t n)
{
    dlock_lease_set *set = NULL;
    int rc = set_acq(cl, names, n, TTL, DLOCK_WAIT_NONE, 0, &set);
    cr_assert_eq(rc, 0, "set acquire: %s", dlock_client_strerror(cl->c, rc));
    cr_assert_not_null(set);
    return set;
}

/* The agent's leases on names matching the glob, as JSON: "[]" when none. */
static int agent_has_leases(int agent, const char *glob)
{
    char req[128];
    snprintf(req, sizeof req, "leases-json %s\n", glob);
    const char *ans = h_status_ask(agent, req);
    cr_assert_not_null(ans, "no status socket");
    return strstr(ans, "\"leases\":[]") == NULL;
}

/* ---- a set taken in a thread of its own ----
 *
 * The thread opens its own client (a client belongs to one thread), takes
 * the set, reports, and holds it until told to release. It asserts nothing:
 * the test's thread reads what it reports. */

struct taker {
    pthread_t th;
    const char *sock;
    const char *const *names;
    size_t n;
    uint32_t ttl_ms;
    int64_t wait_ms;
    int rc;        /* the set acquire's result, once done */
    int done;      /* atomic */
    int lost_seen; /* atomic: a LOST event reached the client */
    int release;   /* atomic: the test asks the thread to release and leave */
};

static void taker_event(dlock_client *c, dlock_lease *l, dlock_state s, int reason, void *arg)
{
    struct taker *t = arg;
    (void)c, (void)l, (void)reason;
    if (s == DLOCK_STATE_LOST)
        __atomic_store_n(&t->lost_seen, 1, __ATOMIC_RELEASE);
}

static void *taker_main(void *arg)
{
    struct taker *t = arg;
    dlock_client *c = NULL;
    dlock_lease_set *set = NULL;
    int rc = dlock_client_open(&c, t->sock);
    if (rc == 0) {
        dlock_client_set_event_cb(c, taker_event, t);
        dlock_acquire_options o = {.ttl_ms = t->ttl_ms, .wait_ms = t->wait_ms};
        rc = dlock_lease_set_acquire(c, t->names, t->n, &o, NULL, &set);
    }
    t->rc = rc;
    __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
    while (rc == 0 && !__atomic_load_n(&t->release, __ATOMIC_ACQUIRE)) {
        dlock_client_dispatch(c);
        usleep(2000);
    }
    if (set)
        dlock_lease_set_release_sync(set);
    dlock_client_close(c);
    return NULL;
}

static void taker_start(struct taker *t, const char *const *names, size_t n, uint32_t ttl_ms,
                        int64_t wait_ms)
{
    *t = (struct taker){
        .sock = H.agent[0].sock, .names = names, .n = n, .ttl_ms = ttl_ms, .wait_ms = wait_ms};
    cr_assert_eq(pthread_create(&t->th, NULL, taker_main, t), 0);
}

static int taker_done(struct taker *t)
{
    return __atomic_load_n(&t->done, __ATOMIC_ACQUIRE);
}

static void taker_finish(struct taker *t)
{
    __atomic_store_n(&t->release, 1, __ATOMIC_RELEASE);
    pthread_join(t->th, NULL);
}

/* ---- the whole set ---- */

ITEST(multi, the_whole_set_is_granted_in_the_callers_order_and_released_whole)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    const char *const *names = NAMES("m-c", "m-a", "m-b");
    dlock_lease_set *set = must_set(a, names, 3);
    cr_assert_eq(dlock_lease_set_count(set), 3);
    for (size_t i = 0; i < 3; i++) {
        dlock_lease *l = dlock_lease_set_lease(set, i);
        cr_assert_not_null(l);
        cr_assert_str_eq(dlock_lease_name(l), names[i], "member %zu is not names[%zu]", i, i);
        cr_assert(h_is_token(h_redis_get(h_key(names[i]))), "no lock key of %s", names[i]);
        cr_assert(dlock_lease_valid(l));
        cr_assert_gt(dlock_lease_fence(l), 0);
        cr_assert_eq(dlock_lease_release(l), DLOCK_EINVAL, "a member was released alone");
        cr_assert_eq(dlock_lease_release_sync(l), DLOCK_EINVAL, "a member was released alone");
        dlock_lease *other = NULL;
        cr_assert_eq(h_acquire(b, names[i], TTL, 0, &other), DLOCK_EBUSY);
    }
    cr_assert_null(dlock_lease_set_lease(set, 3));
    cr_assert(dlock_lease_set_valid(set));
    cr_assert_eq(dlock_lease_set_release(set), 0);
    for (size_t i = 0; i < 3; i++)
        H_KEY_GONE(h_key(names[i]));
    H_WAIT_UNTIL(H_EVENT_MS, !agent_has_leases(0, "m-*"));

    /* The synchronous release: the agent has given every member up when it
     * returns, so another client's try-once finds each name free. */
    set = must_set(a, names, 3);
    cr_assert_eq(dlock_lease_set_release_sync(set), 0);
    dlock_lease *l[3];
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(h_acquire(b, names[i], TTL, 0, &l[i]), 0, "%s still held", names[i]);
}

/* The names are taken in byte-wise order whatever the caller's: with the
 * middle name taken elsewhere, the first is held and the last not yet. */
ITEST(multi, names_are_taken_in_one_order_and_a_wait_holds_only_those_before)
{
    h_start(NULL);
    struct h_cl *b = h_client();
    dlock_lease *held = h_must_acquire(b, "o-2", TTL);
    struct taker t;
    taker_start(&t, NAMES("o-3", "o-2", "o-1"), 3, TTL, DLOCK_WAIT_FOREVER);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_exists(h_key("o-1")));
    const char *ls;
    H_WAIT_UNTIL(H_EVENT_MS,
                 (ls = h_status_ask(0, "leases-json o-2\n")) && strstr(ls, "\"waiters\":1"));
    cr_assert(!taker_done(&t), "the set was granted beside a holder of o-2");
    cr_assert_eq(h_redis_exists(h_key("o-3")), 0, "o-3 was taken before o-2");
    cr_assert_eq(dlock_lease_release(held), 0);
    H_WAIT_UNTIL(H_EVENT_MS, taker_done(&t));
    cr_assert_eq(t.rc, 0, "set: %s", dlock_strerror(t.rc));
    cr_assert(h_is_token(h_redis_get(h_key("o-3"))));
    taker_finish(&t);
    H_KEY_GONE(h_key("o-1"));
    H_KEY_GONE(h_key("o-3"));
}

/* ---- rollback ---- */

ITEST(multi, a_busy_member_leaves_nothing_held)
{
    h_start(NULL);
    struct h_cl *a = h_client(), *b = h_client();
    dlock_lease *held = h_must_acquire(b, "r-b", TTL);
    const char *const *names = NAMES("r-c", "r-b", "r-a");
    dlock_lease_set *set = NULL;
    cr_assert_eq(set_acq(a, names, 3, TTL, DLOCK_WAIT_NONE, 0, &set), DLOCK_EBUSY);
    cr_assert_null(set);
    H_KEY_GONE(h_key("r-a")); /* taken before r-b, given back */
    cr_assert_eq(h_redis_exists(h_key("r-c")), 0);
    H_WAIT_UNTIL(H_EVENT_MS, !agent_has_leases(0, "r-[ac]"));

    /* A wait that runs out: the same, with DLOCK_ETIMEDOUT. */
    cr_assert_eq(set_acq(a, names, 3, TTL, 300, 0, &set), DLOCK_ETIMEDOUT);
    H_KEY_GONE(h_key("r-a"));
    cr_assert_eq(h_redis_exists(h_key("r-c")), 0);
    H_WAIT_UNTIL(H_EVENT_MS, !agent_has_leases(0, "r-[ac]"));

    /* The client holds none of them: no DLOCK_EHELD. */
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "r-a", TTL, 0, &l), 0);
    cr_assert_eq(dlock_lease_release(l), 0);
    cr_assert_eq(dlock_lease_release(held), 0);
    set = must_set(a, names, 3);
    cr_assert_eq(dlock_lease_set_release(set), 0);
}

ITEST(multi, bad_arguments_are_refused_before_anything_is_taken)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease_set *set = NULL;
    const char *many[DLOCK_SET_MAX + 1];
    char buf[DLOCK_SET_MAX + 1][16];
    for (int i = 0; i <= DLOCK_SET_MAX; i++) {
        snprintf(buf[i], sizeof buf[i], "n-%02d", i);
        many[i] = buf[i];
    }
    cr_assert_eq(set_acq(a, many, 0, TTL, 0, 0, &set), DLOCK_EINVAL);
    cr_assert_eq(set_acq(a, many, DLOCK_SET_MAX + 1, TTL, 0, 0, &set), DLOCK_EINVAL);
    cr_assert_eq(set_acq(a, NAMES("n-a", "n-b", "n-a"), 3, TTL, 0, 0, &set), DLOCK_EINVAL);
    cr_assert_eq(set_acq(a, NAMES("n-a", NULL), 2, TTL, 0, 0, &set), DLOCK_EINVAL);
    cr_assert_eq(set_acq(a, NAMES("n-a", "n b"), 2, TTL, 0, 0, &set), DLOCK_EBADNAME);
    cr_assert_eq(set_acq(a, NAMES("n-a", ""), 2, TTL, 0, 0, &set), DLOCK_EBADNAME);
    cr_assert_eq(dlock_lease_set_acquire(a->c, NAMES("n-a"), 1, NULL, NULL, NULL), DLOCK_EINVAL);
    cr_assert_eq(dlock_lease_set_acquire(NULL, NAMES("n-a"), 1, NULL, NULL, &set), DLOCK_EINVAL);
    cr_assert_null(set);
    cr_assert_eq(h_redis_count_keys("dlock:n-*"), 0, "a name was taken for a refused set");
    cr_assert_eq(dlock_lease_set_release(NULL), DLOCK_EINVAL);
    cr_assert_eq(dlock_lease_set_valid(NULL), 0);
    cr_assert_eq(dlock_lease_set_count(NULL), 0);

    /* The most names a set takes. */
    cr_assert_eq(set_acq(a, many, DLOCK_SET_MAX, TTL, 0, 0, &set), 0);
    cr_assert_eq(h_redis_count_keys("dlock:n-*"), DLOCK_SET_MAX);
    cr_assert_eq(dlock_lease_set_release_sync(set), 0);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_count_keys("dlock:n-*") == 0);
}

/* A name the client holds is DLOCK_EHELD for a set without the re-entrant
 * flag (and nothing else stays taken); with it, the member is that lease,
 * one hold more, which only the set gives back. */
ITEST(multi, a_name_held_already_is_eheld_or_reentered)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_acquire_options ro = {.ttl_ms = TTL, .flags = DLOCK_ACQUIRE_REENTRANT};
    dlock_lease *own = NULL;
    cr_assert_eq(dlock_lease_acquire(a->c, "e-b", &ro, &own), 0);
    dlock_lease_set *set = NULL;
    cr_assert_eq(set_acq(a, NAMES("e-a", "e-b"), 2, TTL, 0, 0, &set), DLOCK_EHELD);
    H_KEY_GONE(h_key("e-a"));

    cr_assert_eq(set_acq(a, NAMES("e-a", "e-b"), 2, TTL, 0, DLOCK_ACQUIRE_REENTRANT, &set), 0);
    cr_assert_eq(dlock_lease_set_lease(set, 1), own, "the member is not the lease held");
    cr_assert_eq(dlock_lease_holds(own), 2);
    cr_assert_eq(dlock_lease_release(own), 0, "the caller's own hold");
    cr_assert_eq(dlock_lease_holds(own), 1);
    cr_assert_eq(dlock_lease_release(own), DLOCK_EINVAL, "the set's hold was given up alone");
    cr_assert(dlock_lease_set_valid(set));
    cr_assert_eq(dlock_lease_set_release(set), 0);
    H_KEY_GONE(h_key("e-a"));
    H_KEY_GONE(h_key("e-b"));
}

/* ---- losses ---- */

ITEST(multi, a_lost_member_makes_the_set_invalid)
{
    h_start(NULL);
    struct h_cl *a = h_client();
    dlock_lease_set *set = NULL;
    cr_assert_eq(set_acq(a, NAMES("l-a", "l-b"), 2, 3000, 0, 0, &set), 0);
    dlock_lease *la = dlock_lease_set_lease(set, 0), *lb = dlock_lease_set_lease(set, 1);
    cr_assert(dlock_lease_set_valid(set));
    h_redis_del(h_key("l-b"));
    H_WAIT_UNTIL(H_EVENT_MS, h_events(a, lb, DLOCK_STATE_LOST) == 1);
    cr_assert_eq(dlock_lease_set_valid(set), 0, "a set with a lost member is valid");
    cr_assert(dlock_lease_valid(la), "the other member was lost too");
    cr_assert_eq(h_events(a, la, DLOCK_STATE_LOST), 0);
    cr_assert_eq(dlock_lease_set_release(set), DLOCK_ELOST);
    H_KEY_GONE(h_key("l-a"));
}

/* A member lost while a later one is waited for: the set is given up when
 * the last is granted, and that one is given back too. */
ITEST(multi, a_member_lost_during_the_wait_fails_the_set)
{
    h_start(NULL);
    struct h_cl *b = h_client();
    dlock_lease *held = h_must_acquire(b, "w-b", TTL);
    struct taker t;
    taker_start(&t, NAMES("w-b", "w-a"), 2, 3000, DLOCK_WAIT_FOREVER);
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_exists(h_key("w-a")));
    h_redis_del(h_key("w-a"));
    H_WAIT_UNTIL(H_EVENT_MS, __atomic_load_n(&t.lost_seen, __ATOMIC_ACQUIRE));
    cr_assert(!taker_done(&t));
    cr_assert_eq(dlock_lease_release(held), 0);
    H_WAIT_UNTIL(H_EVENT_MS, taker_done(&t));
    cr_assert_eq(t.rc, DLOCK_ELOST, "set: %s", dlock_strerror(t.rc));
    H_KEY_GONE(h_key("w-b")); /* granted to the set, then given back */
    H_WAIT_UNTIL(H_EVENT_MS, !agent_has_leases(0, "w-*"));
    taker_finish(&t);
}

/* ---- no deadlock ---- */

#define LOOPS 150

struct looper {
    pthread_t th;
    const char *sock;
    const char *const *names;
    size_t n;
    int64_t wait_ms;
    int *inside;  /* holders of a set now, across the loopers */
    int loops;    /* sets taken and released */
    int overlaps; /* a set taken while another looper held one */
    int invalid;  /* a set taken and not valid */
    int rc;       /* the first error, or 0 */
    int done;     /* atomic */
};

static void *looper_main(void *arg)
{
    struct looper *lp = arg;
    dlock_client *c = NULL;
    lp->rc = dlock_client_open(&c, lp->sock);
    dlock_acquire_options o = {.ttl_ms = TTL, .wait_ms = lp->wait_ms};
    while (lp->rc == 0 && lp->loops < LOOPS) {
        dlock_lease_set *set = NULL;
        lp->rc = dlock_lease_set_acquire(c, lp->names, lp->n, &o, NULL, &set);
        if (lp->rc != 0)
            break;
        if (__atomic_fetch_add(lp->inside, 1, __ATOMIC_ACQ_REL) != 0)
            lp->overlaps++;
        if (!dlock_lease_set_valid(set))
            lp->invalid++;
        sched_yield();
        __atomic_fetch_sub(lp->inside, 1, __ATOMIC_ACQ_REL);
        lp->rc = dlock_lease_set_release(set);
        lp->loops++;
    }
    dlock_client_close(c);
    __atomic_store_n(&lp->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Three clients on two agents (two hosts) take overlapping sets, each in
 * its own order, over and over, each acquire with a long wait: without the
 * one order, two of them would soon hold a name each and wait for the
 * other's until the wait ran out. */
ITEST(multi, overlapping_sets_in_opposite_orders_never_deadlock_or_overlap)
{
    h_start_two(NULL);
    int inside = 0;
    struct looper lp[3] = {
        {.sock = H.agent[0].sock, .names = NAMES("d-a", "d-b", "d-c"), .n = 3},
        {.sock = H.agent[1].sock, .names = NAMES("d-c", "d-b", "d-a"), .n = 3},
        {.sock = H.agent[0].sock, .names = NAMES("d-c", "d-a"), .n = 2},
    };
    for (int i = 0; i < 3; i++) {
        lp[i].inside = &inside;
        lp[i].wait_ms = h_scaled_ms(H_EVENT_MS);
        cr_assert_eq(pthread_create(&lp[i].th, NULL, looper_main, &lp[i]), 0);
    }
    H_WAIT_UNTIL(120000, __atomic_load_n(&lp[0].done, __ATOMIC_ACQUIRE) &&
                             __atomic_load_n(&lp[1].done, __ATOMIC_ACQUIRE) &&
                             __atomic_load_n(&lp[2].done, __ATOMIC_ACQUIRE));
    for (int i = 0; i < 3; i++) {
        pthread_join(lp[i].th, NULL);
        cr_assert_eq(lp[i].rc, 0, "looper %d, after %d sets: %s", i, lp[i].loops,
                     dlock_strerror(lp[i].rc));
        cr_assert_eq(lp[i].loops, LOOPS);
        cr_assert_eq(lp[i].overlaps, 0, "looper %d held a set beside another's", i);
        cr_assert_eq(lp[i].invalid, 0, "looper %d was given a set not valid", i);
    }
    H_WAIT_UNTIL(H_EVENT_MS, h_redis_count_keys("dlock:d-*") == 0);
}

/* ---- dlockctl run -a ---- */

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* A shell loop of at most ~10 s, so a CMD that is never stopped cannot
 * outlive the test for long. */
#define BOUNDED_WAIT_FOR_GO                                                                        \
    "i=0; while [ ! -e %s ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done"

ITEST(multi, dlockctl_runs_under_every_name_with_their_tokens)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    char script[1024];
    snprintf(script, sizeof script,
             "printf '%%s\\n%%s\\n%%s\\n' \"$DLOCK_NAME\" \"$DLOCK_FENCE\" \"$DLOCK_FENCES\" > %s; "
             "touch %s; " BOUNDED_WAIT_FOR_GO,
             h_path("env"), h_path("started"), h_path("go"));
    const char *args[] = {"-s", sock, "run", "-a",   "ctl-b", "ctl-a",
                          "--", "sh", "-c",  script, NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(H_EVENT_MS, exists(h_path("started")));
    struct h_cl *a = h_client();
    dlock_lease *l = NULL;
    cr_assert_eq(h_acquire(a, "ctl-a", TTL, 0, &l), DLOCK_EBUSY);
    cr_assert_eq(h_acquire(a, "ctl-b", TTL, 0, &l), DLOCK_EBUSY);

    char name[64] = "", fences[256] = "";
    unsigned long long fence = 0, fa = 0, fb = 0;
    FILE *f = fopen(h_path("env"), "r");
    cr_assert_not_null(f);
    cr_assert_eq(fscanf(f, "%63s %llu %255[^\n]", name, &fence, fences), 3);
    fclose(f);
    cr_assert_str_eq(name, "ctl-a", "DLOCK_NAME is NAME's");
    cr_assert_eq(sscanf(fences, "ctl-a=%llu ctl-b=%llu", &fa, &fb), 2, "DLOCK_FENCES='%s'", fences);
    cr_assert_eq(fa, fence, "DLOCK_FENCE is not NAME's token in DLOCK_FENCES");
    char want[128];
    const char *ls = h_status_ask(0, "leases-json ctl-*\n");
    cr_assert_not_null(ls);
    snprintf(want, sizeof want, "\"name\":\"ctl-a\",\"state\":\"held\",\"fence\":%llu,", fa);
    cr_assert(strstr(ls, want), "ctl-a's token is not %llu: %s", fa, ls);
    snprintf(want, sizeof want, "\"name\":\"ctl-b\",\"state\":\"held\",\"fence\":%llu,", fb);
    cr_assert(strstr(ls, want), "ctl-b's token is not %llu: %s", fb, ls);

    f = fopen(h_path("go"), "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(h_wait_child(pid, H_EVENT_MS), 0);
    H_KEY_GONE(h_key("ctl-a"));
    H_KEY_GONE(h_key("ctl-b"));
}

ITEST(multi, dlockctl_with_a_busy_name_runs_nothing_and_holds_nothing)
{
    h_start(NULL);
    const char *sock = H.agent[0].sock;
    struct h_cl *b = h_client();
    dlock_lease *held = h_must_acquire(b, "bz-b", TTL);
    char script[256];
    snprintf(script, sizeof script, "touch %s", h_path("ran"));
    int st =
        h_ctl(5000, "-s", sock, "run", "-n", "-a", "bz-b", "bz-a", "--", "sh", "-c", script, NULL);
    cr_assert_eq(st, 75, "exit %d", st);
    st = h_ctl(5000, "-s", sock, "run", "-w", "0.2", "--also", "bz-b", "-E", "3", "bz-a", "--",
               "sh", "-c", script, NULL);
    cr_assert_eq(st, 3, "exit %d", st);
    cr_assert(!exists(h_path("ran")), "CMD ran without every lock");
    H_KEY_GONE(h_key("bz-a"));
    H_WAIT_UNTIL(H_EVENT_MS, !agent_has_leases(0, "bz-a"));
    st = h_ctl(5000, "-s", sock, "run", "-a", "bz-a", "bz-a", "--", "true", NULL);
    cr_assert_eq(st, 64, "a name twice: exit %d", st);
    cr_assert_eq(dlock_lease_release(held), 0);
    st = h_ctl(5000, "-s", sock, "run", "-a", "bz-b", "bz-a", "--", "sh", "-c", script, NULL);
    cr_assert_eq(st, 0, "exit %d", st);
    cr_assert(exists(h_path("ran")));
}

ITEST(multi, dlockctl_stops_the_command_when_any_name_is_lost)
{
    h_start(NULL);
    char script[512];
    snprintf(script, sizeof script,
             "trap 'echo got-term > %s; exit 0' TERM; touch %s; i=0; "
             "while [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done",
             h_path("term"), h_path("started"));
    const char *args[] = {"-s", H.agent[0].sock, "run", "-t", "1", "-a", "lo-b", "lo-a", "--", "sh",
                          "-c", script,          NULL};
    pid_t pid = h_ctl_spawn(args);
    H_WAIT_UNTIL(H_EVENT_MS, exists(h_path("started")));
    h_redis_del(h_key("lo-b"));
    int st = h_wait_child(pid, H_EVENT_MS);
    cr_assert_eq(st, 79, "dlockctl exit %d after a member was lost", st);
    cr_assert_str_eq(h_read_file(h_path("term")), "got-term\n");
    const char *out = h_read_file(h_path("ctl.out"));
    cr_assert(out && strstr(out, "lease on lo-b lost"), "%s", out ? out : "(no output)");
    H_KEY_GONE(h_key("lo-a"));
}

/* ---- Redis Cluster: names in different slots ---- */

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

HCTEST(multi_cluster, a_set_over_every_master_all_or_nothing)
{
    hc_start();
    hc_agent_config(0, NULL, NULL, 0);
    hc_agent_start(0);
    int m[HC_NODES];
    cr_assert_eq(hc_masters(m), 3);
    char n0[64], n1[64], n2[64];
    hc_name_on(m[0], "mc", n0, sizeof n0);
    hc_name_on(m[1], "mc", n1, sizeof n1);
    hc_name_on(m[2], "mc", n2, sizeof n2);
    const char *const names[] = {n2, n0, n1};
    struct h_cl *a = h_client_at(0), *b = h_client_at(0);

    dlock_lease_set *set = must_set(a, names, 3);
    for (int i = 0; i < 3; i++) {
        const char *key = hc_lock_key(names[i]);
        cr_assert(h_is_token(hc_get(hc_key_node(key), key)), "no key of %s", names[i]);
    }
    cr_assert(dlock_lease_set_valid(set));
    cr_assert_eq(dlock_lease_set_release(set), 0);
    for (int i = 0; i < 3; i++) {
        const char *key = hc_lock_key(names[i]);
        HC_KEY_GONE(hc_key_node(key), key);
    }

    /* The middle name of the order taken elsewhere: the first, on another
     * master, is given back, and the last never taken. */
    const char *sorted[] = {n0, n1, n2};
    qsort(sorted, 3, sizeof sorted[0], str_cmp);
    const char *middle = sorted[1];
    dlock_lease *held = NULL;
    cr_assert_eq(h_acquire(b, middle, TTL, 0, &held), 0);
    cr_assert_eq(set_acq(a, names, 3, TTL, DLOCK_WAIT_NONE, 0, &set), DLOCK_EBUSY);
    for (int i = 0; i < 3; i++) {
        if (names[i] == middle)
            continue;
        const char *key = hc_lock_key(names[i]);
        HC_KEY_GONE(hc_key_node(key), key);
    }
    cr_assert_eq(dlock_lease_release(held), 0);
    set = NULL;
    cr_assert_eq(set_acq(a, names, 3, TTL, h_scaled_ms(H_EVENT_MS), 0, &set), 0);
    cr_assert_eq(dlock_lease_set_release_sync(set), 0);
}
