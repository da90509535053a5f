/* SPDX-License-Identifier: BSD-3-Clause */
/* rawclient.h -- a raw resumable client of agent 0 for the restart tests
 * (with harness.h): a protocol-2 connection (HELLO_OK with its id and secret)
 * whose lease page and touch page it maps, ACQUIRE and RELEASE, and RESUME
 * on a new connection after the agent has been replaced, with every frame of
 * the exchange seen. The functions ending in _raw make no assertion (usable
 * in a forked child); the others fail the test. */
#ifndef DLOCK_TEST_RAWCLIENT_H
#define DLOCK_TEST_RAWCLIENT_H

#include <stdint.h>

#include "harness.h"
#include "shm.h"
#include "wire.h"

/* A raw resumable client. */
struct rc {
    int fd;
    struct wire_hello_ok ok;      /* of the last HELLO or RESUME */
    const struct shm_slot *slots; /* its lease page, mapped read-only */
    uint64_t *touch;              /* its touch page, mapped read-write */
    uint32_t next_id;
};

/* CLOCK_BOOTTIME in nanoseconds: the clock of the lease page's deadlines. */
int64_t rc_boot_ns(void);

/* Connects to sock with HELLO of `version` and maps the pages: 0 or a
 * negative step. */
int rc_open_raw(struct rc *c, const char *sock, uint16_t version);
/* The same to agent 0, which must succeed. */
void rc_open(struct rc *c, uint16_t version);

/* ACQUIRE of name without a wait: 0 with the grant in *g, or the ERROR's
 * code, or a negative step. */
int rc_acquire_raw(struct rc *c, const char *name, uint32_t ttl_ms, struct wire_granted *g);
/* The same, which must be granted. */
struct wire_granted rc_acquire(struct rc *c, const char *name, uint32_t ttl_ms);
/* RELEASE of lease_id, which must be answered OK. */
void rc_release(struct rc *c, uint64_t lease_id);

/* Slot i of the lease page, read consistently. */
struct shm_slot rc_slot(const struct rc *c, uint32_t i);
/* Whether slot i shows lease_id HELD with its deadline ahead now. */
int rc_valid(const struct rc *c, uint32_t i, uint64_t lease_id);

/* The events of a resume, up to the OK of the PING sent behind it. */
struct resumed {
    int code; /* 0, or the ERROR's code answering RESUME */
    int nevents;
    struct wire_event ev[8];
};

/* A new connection to agent 0 that takes conn_id back with secret: RESUME
 * and PING. Taken back, it is c's connection from then on (the old one is
 * closed, c->ok is the new HELLO_OK, the pages stay mapped) and the events
 * it brought are returned; refused, the code of the ERROR (the agent must
 * close that connection) and c's descriptor is the refused one. */
struct resumed rc_resume(struct rc *c, uint64_t conn_id, const uint8_t *secret);
/* Waits until a successor confirmed lease g (HELD on its page with a later
 * deadline than the grant's), and checks the page still names it with its
 * fence. */
void rc_wait_confirmed(const struct rc *c, const struct wire_granted *g);
/* Resumes c's connection and expects exactly one event: lease g HELD. */
void rc_resume_held(struct rc *c, const struct wire_granted *g);

#endif /* DLOCK_TEST_RAWCLIENT_H */
