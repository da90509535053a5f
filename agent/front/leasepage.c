/* SPDX-License-Identifier: BSD-3-Clause */
/* leasepage.c -- a connection's shared-memory lease page and touch page. */
#include "leasepage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A memfd of size bytes, mapped read-write, with seals added: the size can
 * never change (a client shrinking it would make our accesses fault), and
 * the lease page takes no new writable mapping. */
static void *memfd_map(const char *name, size_t size, unsigned seals, int *fd)
{
    *fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (*fd < 0)
        return NULL;
    void *m = MAP_FAILED;
    if (ftruncate(*fd, (off_t)size) == 0)
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (m != MAP_FAILED && fcntl(*fd, F_ADD_SEALS, seals | F_SEAL_SHRINK | F_SEAL_GROW) == 0)
        return m;
    int e = errno;
    if (m != MAP_FAILED)
        munmap(m, size);
    close(*fd);
    *fd = -1;
    errno = e;
    return NULL;
}

int lease_page_init(struct lease_page *p, uint32_t nslots)
{
    memset(p, 0, sizeof *p);
    p->fds[0] = p->fds[1] = -1;
    p->nslots = nslots;
    p->page = memfd_map("dlock-leases", shm_page_size(nslots), F_SEAL_FUTURE_WRITE | F_SEAL_SEAL,
                        &p->fds[0]);
    if (p->page)
        p->touch = memfd_map("dlock-touch", shm_touch_size(nslots), F_SEAL_SEAL, &p->fds[1]);
    if (!p->touch) {
        lease_page_destroy(p);
        return -1;
    }
    struct shm_hdr *h = p->page;
    h->magic = SHM_MAGIC;
    h->version = SHM_VERSION;
    h->slot_size = sizeof(struct shm_slot);
    h->nslots = nslots;
    return 0;
}

void lease_page_close_fds(struct lease_page *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->fds[i] >= 0)
            close(p->fds[i]);
        p->fds[i] = -1;
    }
}

void lease_page_destroy(struct lease_page *p)
{
    lease_page_close_fds(p);
    if (p->page)
        munmap(p->page, shm_page_size(p->nslots));
    if (p->touch)
        munmap(p->touch, shm_touch_size(p->nslots));
    free(p->free_slots);
    memset(p, 0, sizeof *p);
    p->fds[0] = p->fds[1] = -1;
}

uint32_t lease_page_alloc(struct lease_page *p)
{
    uint32_t i;
    if (p->nfree)
        i = p->free_slots[--p->nfree];
    else if (p->next < p->nslots)
        i = p->next++;
    else
        return UINT32_MAX;
    /* The previous lease's last touch is no progress of the next one. */
    __atomic_store_n(&p->touch[i], 0, __ATOMIC_RELAXED);
    return i;
}

void lease_page_free(struct lease_page *p, uint32_t i)
{
    lease_page_write(p, i, 0, 0, 0, 0);
    if (p->nfree == p->free_cap) {
        uint32_t cap = p->free_cap ? p->free_cap * 2 : 16;
        uint32_t *f = realloc(p->free_slots, cap * sizeof *f);
        if (!f)
            return; /* the slot is lost to this connection; harmless */
        p->free_slots = f;
        p->free_cap = cap;
    }
    p->free_slots[p->nfree++] = i;
}

void lease_page_write(struct lease_page *p, uint32_t i, uint32_t state, uint64_t lease_id,
                      uint64_t fence, int64_t deadline_ns)
{
    shm_slot_write(&shm_slots(p->page)[i], state, lease_id, fence, deadline_ns);
}

uint64_t lease_page_touched(const struct lease_page *p, uint32_t i)
{
    return __atomic_load_n(&p->touch[i], __ATOMIC_RELAXED);
}
