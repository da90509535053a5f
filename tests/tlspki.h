/* SPDX-License-Identifier: BSD-3-Clause */
/* tlspki.h -- TLS in the integration tests: a throwaway PKI made at test
 * time (tests/tls/make-pki.sh, with the openssl command) in the test's
 * directory, Redis nodes that listen with TLS on a loopback port, and the
 * agent's [redis] lines that trust the test CA.
 *
 *   tls_node(0, "server", true);          // node 0: TLS, clients need a certificate
 *   h_redis_start();                      // the harness still reaches it on its unix socket
 *   h_agent_config(0, NULL, tls_redis_ini("client", NULL));
 *   h_agent_start_n(0);                   // the agent speaks rediss://127.0.0.1:PORT
 *
 * Failures fail the test (Criterion). */
#ifndef DLOCK_TEST_TLSPKI_H
#define DLOCK_TEST_TLSPKI_H

#include <stdbool.h>

/* The path of a file of the test's PKI (made at the first call): "ca.crt",
 * "server.key", "client.crt", "other-ca.crt", "other-client.key",
 * "expired.crt"... (tests/tls/make-pki.sh lists them). */
const char *tls_file(const char *name);
/* Node i (not running yet) will listen with TLS on a free loopback port,
 * with the certificate NAME.crt and NAME.key of the PKI (NULL: "server"),
 * trusting ca.crt and asking clients for a certificate when auth; its
 * plaintext unix socket stays, for the harness. Its address for the agents
 * becomes rediss://127.0.0.1:PORT. Returns the port. */
int tls_node(int i, const char *name, bool auth);
/* The [redis] lines that trust the test CA, with the client certificate
 * NAME.crt and NAME.key (NULL: none), then the lines of more (may be
 * NULL); kept until the teardown. */
const char *tls_redis_ini(const char *client, const char *more);

#endif
