/* SPDX-License-Identifier: BSD-3-Clause */
/* test_status_render.c -- readiness and the metrics rendered from a made-up
 * snapshot (agent/front/status_render.c): readiness in each Redis mode
 * (single, quorum with a node excluded after its restart, cluster, sentinel
 * with the master unknown), the health answers, the per-node command
 * histogram, and the opt-in per-name gauges: bounded by metrics_names_max,
 * only names of the pattern, label values escaped. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "status_render.h"
#include "util.h"

#define NOW (1000ull * NS_PER_SEC)

static struct {
    struct config cfg;
    struct status_snapshot snap;
    const char *const *names; /* the names the fake walk shows */
    size_t nnames;
    size_t walked; /* names shown before the walk was stopped */
} F;

static void fake_snapshot(void *arg, struct status_snapshot *out)
{
    *out = F.snap;
}

static void fake_walk_names(void *arg, status_name_fn fn, void *fnarg)
{
    for (size_t i = 0; i < F.nnames; i++) {
        F.walked++;
        if (!fn(fnarg, F.names[i], (uint32_t)i, 1))
            return;
    }
}

static struct status_source source(void)
{
    return (struct status_source){
        .cfg = &F.cfg, .snapshot = fake_snapshot, .walk_names = fake_walk_names};
}

static void setup(void)
{
    memset(&F, 0, sizeof F);
    config_defaults(&F.cfg);
    F.snap.now = NOW;
    F.snap.started = NOW - NS_PER_SEC;
    F.snap.mode = "single";
}

TestSuite(render, .init = setup);

static struct backend_node *node(const char *addr, bool connected)
{
    struct backend_node *n = &F.snap.nodes[F.snap.nnodes++];
    snprintf(n->addr, sizeof n->addr, "%s", addr);
    n->connected = connected;
    if (!connected)
        snprintf(n->last_error_text, sizeof n->last_error_text, "Connection refused");
    return n;
}

static struct health health(void)
{
    struct health h;
    health_of(&F.snap, &h);
    return h;
}

static char *render(enum health_form form, bool *ready)
{
    struct status_source src = source();
    struct sbuf b = {0};
    *ready = render_health(&src, form, &b);
    cr_assert_not(b.oom);
    return b.p;
}

static char *metrics(void)
{
    struct status_source src = source();
    struct sbuf b = {0};
    render_metrics(&src, NULL, true, &b);
    cr_assert_not(b.oom);
    return b.p;
}

Test(render, single_mode_follows_the_one_node)
{
    node("127.0.0.1:6379", true);
    struct health h = health();
    cr_assert(h.ready);
    cr_assert_eq(h.up, 1);
    cr_assert_eq(h.needed, 1);
    F.snap.nodes[0].connected = false;
    snprintf(F.snap.nodes[0].last_error_text, sizeof F.snap.nodes[0].last_error_text, "refused");
    h = health();
    cr_assert_not(h.ready);
    cr_assert_eq(h.up, 0);
    cr_assert_str_eq(h.reason, "Redis is unreachable: refused");
    bool ready;
    char *t = render(HEALTH_VERBOSE, &ready);
    cr_assert_not(ready);
    cr_assert_str_eq(t, "not ready: single mode, 0 of 1 node up, 1 needed; Redis is unreachable: "
                        "refused\nnode 127.0.0.1:6379: down: refused\n");
    free(t);
}

Test(render, quorum_needs_a_majority_that_counts)
{
    F.snap.mode = "quorum";
    F.snap.quorum = true;
    node("a:1", true);
    node("b:1", true);
    struct backend_node *c = node("c:1", false);
    struct health h = health();
    cr_assert(h.ready);
    cr_assert_eq(h.up, 2);
    cr_assert_eq(h.needed, 2);
    /* A restarted node, connected but excluded, does not count. */
    c->connected = true;
    F.snap.nodes[1].excluded_until = NOW + 3 * NS_PER_SEC;
    h = health();
    cr_assert(h.ready);
    cr_assert_eq(h.up, 2);
    F.snap.nodes[0].connected = false;
    h = health();
    cr_assert_not(h.ready);
    cr_assert_eq(h.up, 1);
    cr_assert(strncmp(h.reason, "no majority of the Redis nodes is up", 36) == 0, "%s", h.reason);
    bool ready;
    char *t = render(HEALTH_VERBOSE, &ready);
    cr_assert_not_null(strstr(t, "\nnode b:1: excluded for 3 s\n"), "%s", t);
    free(t);
    char *m = metrics();
    cr_assert_not_null(strstr(m, "\ndlock_backend_up{mode=\"quorum\"} 0\n"), "%s", m);
    cr_assert_not_null(strstr(m, "\ndlock_quorum_nodes_up 1\n"));
    cr_assert_not_null(strstr(m, "\ndlock_quorum_nodes_needed 2\n"));
    free(m);
}

Test(render, cluster_needs_every_master)
{
    F.snap.mode = "cluster";
    struct health h = health();
    cr_assert_not(h.ready);
    cr_assert_str_eq(h.reason, "no Redis Cluster slot map yet");
    node("m1:7000", true);
    node("m2:7000", true);
    node("m3:7000", true);
    h = health();
    cr_assert(h.ready);
    cr_assert_eq(h.needed, 3);
    F.snap.nodes[2].connected = false;
    h = health();
    cr_assert_not(h.ready);
    cr_assert_eq(h.up, 2);
    cr_assert(strncmp(h.reason, "a Redis Cluster master is unreachable", 37) == 0);
}

Test(render, sentinel_needs_the_master_only)
{
    F.snap.mode = "sentinel";
    node("master mymaster (not known)", false);
    node("sentinel s1:26379", true);
    node("sentinel s2:26379", false);
    struct health h = health();
    cr_assert_not(h.ready);
    cr_assert_eq(h.needed, 1);
    cr_assert_eq(h.up, 0);
    F.snap.nodes[0].connected = true;
    h = health();
    cr_assert(h.ready);
    cr_assert_eq(h.up, 1);
    bool ready;
    char *t = render(HEALTH_JSON, &ready);
    cr_assert(ready);
    const char *want = "{\"ready\":true,\"mode\":\"sentinel\",\"nodes_up\":1,\"nodes_needed\":1,";
    cr_assert(strncmp(t, want, strlen(want)) == 0, "%s", t);
    cr_assert_not_null(strstr(t, "\"state\":\"sentinel, connected\""), "%s", t);
    free(t);
}

Test(render, node_command_histogram_is_cumulative_and_labelled)
{
    struct backend_node *n = node("unix:/run/a\"b\\c.sock", true);
    histo_add(&n->command, 50 * 1000);          /* 50 us: first bucket */
    histo_add(&n->command, 3 * NS_PER_MS);      /* 3 ms */
    histo_add(&n->command, 10ull * NS_PER_SEC); /* past the last bucket */
    char *m = metrics();
    const char *l = "node=\"unix:/run/a\\\"b\\\\c.sock\"";
    char want[256];
    snprintf(want, sizeof want, "\ndlock_node_command_seconds_bucket{%s,le=\"0.0001\"} 1\n", l);
    cr_assert_not_null(strstr(m, want), "%s", m);
    snprintf(want, sizeof want, "\ndlock_node_command_seconds_bucket{%s,le=\"0.005\"} 2\n", l);
    cr_assert_not_null(strstr(m, want), "%s", m);
    snprintf(want, sizeof want, "\ndlock_node_command_seconds_bucket{%s,le=\"2.5\"} 2\n", l);
    cr_assert_not_null(strstr(m, want), "%s", m);
    snprintf(want, sizeof want, "\ndlock_node_command_seconds_bucket{%s,le=\"+Inf\"} 3\n", l);
    cr_assert_not_null(strstr(m, want), "%s", m);
    snprintf(want, sizeof want, "\ndlock_node_command_seconds_count{%s} 3\n", l);
    cr_assert_not_null(strstr(m, want), "%s", m);
    cr_assert_not_null(strstr(m, "# TYPE dlock_node_command_seconds histogram\n"));
    free(m);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

Test(render, per_name_gauges_are_off_bounded_and_escaped)
{
    static const char *const names[] = {"job-a", "other", "job-\"q\\\xff", "job-c", "job-d"};
    F.names = names;
    F.nnames = 5;
    node("r:1", true);
    char *m = metrics();
    cr_assert_eq(count(m, "dlock_name_"), 0, "per-name gauges while off:\n%s", m);
    free(m);
    cr_assert_eq(F.walked, 0, "the table was walked while off");

    snprintf(F.cfg.metrics_names, sizeof F.cfg.metrics_names, "job-*");
    F.cfg.metrics_names_max = 2;
    m = metrics();
    cr_assert_eq(count(m, "\ndlock_name_leases{"), 2, "%s", m);
    cr_assert_eq(count(m, "\ndlock_name_waiters{"), 2, "%s", m);
    cr_assert_not_null(strstr(m, "\ndlock_name_waiters{name=\"job-a\"} 0\n"), "%s", m);
    cr_assert_not_null(strstr(m, "\ndlock_name_waiters{name=\"job-\\\"q\\\\?\"} 2\n"), "%s", m);
    cr_assert_null(strstr(m, "other"));
    /* The walk stops once the cap is reached. */
    cr_assert_eq(F.walked, 3);
    free(m);
}
