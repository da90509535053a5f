/* SPDX-License-Identifier: BSD-3-Clause */
/* leasepage.h -- one client connection's shared-memory lease page and touch
 * page (layout in libclient/shm.h): creation, sealing, slot allocation.
 *
 * The pages are sealed memfds, or, when the agent keeps a state directory
 * (docs/restarts.md), files in it that outlive the agent's process: the
 * client maps the same objects either way, the page through a read-only
 * descriptor. A client may shrink its touch file (its descriptor is
 * read-write and a file takes no seals), so the agent never maps that one:
 * it reads and writes it with pread() and pwrite(), and a short file reads
 * as no touch. */
#ifndef DLOCKD_LEASEPAGE_H
#define DLOCKD_LEASEPAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "shm.h"

struct lease_page {
    void *page;      /* header + slots, mapped read-write here only */
    uint64_t *touch; /* written by the client (memfd: mapped here; file: NULL) */
    int touch_fd;    /* file: the touch page, read and written here with pread/pwrite */
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
/* The same as files NAME.page and NAME.touch in the directory dirfd (mode
 * 0600, which must not hold them yet), or, with `reopen`, the files a
 * predecessor left there (their size must fit nslots; slots in use are for
 * the caller to mark, lease_page_take()). 0, or -1 with errno set (nothing
 * is left behind by a failed creation). */
int lease_page_init_at(struct lease_page *p, uint32_t nslots, int dirfd, const char *name,
                       bool reopen);
/* Removes the files of lease_page_init_at() (the mappings stay until
 * lease_page_destroy()). */
void lease_page_unlink(int dirfd, const char *name);
/* Descriptors to send the client for another connection to the same pages
 * (a resumed one): fds[0] read-only, fds[1] read-write; they are closed by
 * lease_page_close_fds(). 0, or -1 with errno set (file pages only). */
int lease_page_reopen_fds(struct lease_page *p, int dirfd, const char *name);
/* Slot i is in use by a lease taken over; false when i is out of range or
 * already taken. */
bool lease_page_take(struct lease_page *p, uint32_t i);
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
