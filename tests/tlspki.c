/* SPDX-License-Identifier: BSD-3-Clause */
/* tlspki.c -- TLS in the integration tests (tlspki.h). */
#include "tlspki.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static const char *pki_dir(void)
{
    const char *dir = h_keep(h_path("pki"));
    if (access(dir, F_OK) == 0)
        return dir;
    char script[] = TLS_PKI_SCRIPT;
    char *argv[] = {"sh", script, (char *)dir, NULL};
    cr_assert_eq(mkdir(dir, 0755), 0);
    const char *out = h_path("pki.out");
    pid_t pid = h_spawn(argv, out);
    int st = h_wait_child(pid, H_START_MS);
    cr_assert_eq(st, 0, "make-pki.sh exited %d: %s", st, h_read_file(out));
    return dir;
}

const char *tls_file(const char *name)
{
    return h_keepf("%s/%s", pki_dir(), name);
}

int tls_node(int i, const char *name, bool auth)
{
    name = name ? name : "server";
    int port = h_server_port();
    char args[512];
    int n = snprintf(args, sizeof args,
                     "--tls-port %d --bind 127.0.0.1 --tls-cert-file %s --tls-key-file %s "
                     "--tls-ca-cert-file %s --tls-auth-clients %s",
                     port, tls_file(h_keepf("%s.crt", name)), tls_file(h_keepf("%s.key", name)),
                     tls_file("ca.crt"), auth ? "yes" : "no");
    cr_assert_lt((size_t)n, sizeof args, "redis-server's TLS arguments are too long");
    h_node_set_args(i, args);
    snprintf(H.node[i].addr, sizeof H.node[i].addr, "rediss://127.0.0.1:%d", port);
    if (i == 0)
        memcpy(H.redis_addr, H.node[0].addr, sizeof H.redis_addr);
    return port;
}

const char *tls_redis_ini(const char *client, const char *more)
{
    if (!client)
        return h_keepf("tls_ca_file = %s\n%s", tls_file("ca.crt"), more ? more : "");
    return h_keepf("tls_ca_file = %s\ntls_cert_file = %s\ntls_key_file = %s\n%s",
                   tls_file("ca.crt"), tls_file(h_keepf("%s.crt", client)),
                   tls_file(h_keepf("%s.key", client)), more ? more : "");
}
