/* SPDX-License-Identifier: BSD-3-Clause */
/* leasepage.h -- one client connection's shared-memory lease page and touch
 * page (layout in libclient/shm.h): creation, sealing, slot allocation. */
#ifndef DLOCKD_LEASEPAGE_H
#define DLOCKD_LEASEPAGE_H

#include <stdint.h>

#include "shm.h"

struct lease_page {
    void *page;      /* header + slots, mapped read-write here only */
    uint64_t *touch; /* written by the client */
    uint32_t nslots;
    uint32_t next;  /* slots below have been handed out at least once */
    uint32_t nfree; /* entries in free_slots */
    uint32_t free_cap;
    uint32_t *free_slots;
    int fds[2]; /* page and touch memfds until sent, else -1 */
};

/* Creates both memfds for nslots leases, maps them and seals them. 0, or -1
 * with errno set. */
int lease_page_init(struct lease_page *p, uint32_t nslots);
/* Closes the memfds (after they were sent) but keeps the mappings. */
void lease_page_close_fds(struct lease_page *p);
void lease_page_destroy(struct lease_page *p);

/* A free slot index, or UINT32_MAX when all are taken. */
uint32_t lease_page_alloc(struct lease_page *p);
/* Marks slot i free (writing state 0) for reuse. */
void lease_page_free(struct lease_page *p, uint32_t i);
void lease_page_write(struct lease_page *p, uint32_t i, uint32_t state, uint64_t lease_id,
                      uint64_t fence, int64_t deadline_ns);
/* The client's last touch of slot i (CLOCK_BOOTTIME ns; untrusted). */
uint64_t lease_page_touched(const struct lease_page *p, uint32_t i);

#endif
