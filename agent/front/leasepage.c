/* SPDX-License-Identifier: BSD-3-Clause */
/* leasepage.c -- a connection's shared-memory lease page and touch page. */
#include "leasepage.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

/* The page's header, written once by its creator. */
static void write_header(struct lease_page *p)
{
    struct shm_hdr *h = p->page;
    h->magic = SHM_MAGIC;
    h->version = SHM_VERSION;
    h->slot_size = sizeof(struct shm_slot);
    h->nslots = p->nslots;
}

static void page_reset(struct lease_page *p, uint32_t nslots)
{
    memset(p, 0, sizeof *p);
    p->fds[0] = p->fds[1] = p->touch_fd = -1;
    p->nslots = nslots;
}

int lease_page_init(struct lease_page *p, uint32_t nslots)
{
    page_reset(p, nslots);
    p->page = memfd_map("dlock-leases", shm_page_size(nslots), F_SEAL_FUTURE_WRITE | F_SEAL_SEAL,
                        &p->fds[0]);
    if (p->page)
        p->touch = memfd_map("dlock-touch", shm_touch_size(nslots), F_SEAL_SEAL, &p->fds[1]);
    if (!p->touch) {
        lease_page_destroy(p);
        return -1;
    }
    write_header(p);
    return 0;
}

static void file_names(const char *name, char page[PATH_MAX], char touch[PATH_MAX])
{
    snprintf(page, PATH_MAX, "%s.page", name);
    snprintf(touch, PATH_MAX, "%s.touch", name);
}

/* Opens (or creates) one of the files with the size it must have. */
static int open_sized(int dirfd, const char *file, bool create, size_t size)
{
    int fd = openat(dirfd, file, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0),
                    0600);
    if (fd < 0)
        return -1;
    struct stat st;
    /* A touch file the client shrank comes back to its size. */
    /* Allocated, not sparse: a write through the agent's mapping never
     * meets a full tmpfs (SIGBUS). */
    errno = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_size != (off_t)size && ftruncate(fd, (off_t)size) != 0) ||
        (errno = posix_fallocate(fd, 0, (off_t)size)) != 0) {
        int e = errno ? errno : EINVAL;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* A predecessor's page: its header must be the one of nslots. */
static bool header_fits(const struct lease_page *p)
{
    const struct shm_hdr *h = p->page;
    return h->magic == SHM_MAGIC && h->version == SHM_VERSION &&
           h->slot_size == sizeof(struct shm_slot) && h->nslots == p->nslots;
}

int lease_page_init_at(struct lease_page *p, uint32_t nslots, int dirfd, const char *name,
                       bool reopen)
{
    page_reset(p, nslots);
    char page[PATH_MAX], touch[PATH_MAX];
    file_names(name, page, touch);
    size_t size = shm_page_size(nslots);
    int fd = open_sized(dirfd, page, !reopen, size);
    bool created = fd >= 0 && !reopen; /* a failure removes what it made, and only that */
    if (fd >= 0) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        p->page = m == MAP_FAILED ? NULL : m;
        close(fd);
    }
    if (p->page)
        p->touch_fd = open_sized(dirfd, touch, !reopen, shm_touch_size(nslots));
    if (p->touch_fd >= 0 && reopen && !header_fits(p))
        errno = EINVAL;
    else if (p->touch_fd >= 0 && (reopen || lease_page_reopen_fds(p, dirfd, name) == 0)) {
        if (!reopen)
            write_header(p);
        return 0;
    }
    int e = errno;
    lease_page_destroy(p);
    if (created)
        lease_page_unlink(dirfd, name);
    errno = e;
    return -1;
}

void lease_page_unlink(int dirfd, const char *name)
{
    char page[PATH_MAX], touch[PATH_MAX];
    file_names(name, page, touch);
    unlinkat(dirfd, page, 0);
    unlinkat(dirfd, touch, 0);
}

int lease_page_reopen_fds(struct lease_page *p, int dirfd, const char *name)
{
    char page[PATH_MAX], touch[PATH_MAX];
    file_names(name, page, touch);
    lease_page_close_fds(p);
    p->fds[0] = openat(dirfd, page, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    /* The touch file opened again, not a copy of the agent's descriptor:
     * the client's O_APPEND or offset are its own description's. */
    if (p->fds[0] >= 0)
        p->fds[1] = openat(dirfd, touch, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (p->fds[1] >= 0)
        return 0;
    int e = errno;
    lease_page_close_fds(p);
    errno = e;
    return -1;
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
    if (p->touch_fd >= 0)
        close(p->touch_fd);
    free(p->free_slots);
    page_reset(p, 0);
}

static void touch_set(struct lease_page *p, uint32_t i, uint64_t v)
{
    if (p->touch)
        __atomic_store_n(&p->touch[i], v, __ATOMIC_RELAXED);
    else if (pwrite(p->touch_fd, &v, sizeof v, (off_t)i * (off_t)sizeof v) != (ssize_t)sizeof v)
        return; /* a touch file the client shrank: its touches are lost, its own doing */
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
    touch_set(p, i, 0);
    return i;
}

bool lease_page_take(struct lease_page *p, uint32_t i)
{
    if (i >= p->nslots)
        return false;
    if (i >= p->next) {
        /* The ones skipped are free; ascending takes cost nothing more. */
        for (uint32_t j = p->next; j < i; j++) {
            p->next = j + 1;
            lease_page_free(p, j);
        }
        p->next = i + 1;
        return true;
    }
    for (uint32_t k = 0; k < p->nfree; k++) {
        if (p->free_slots[k] == i) {
            p->free_slots[k] = p->free_slots[--p->nfree];
            return true;
        }
    }
    return false;
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
    if (p->touch)
        return __atomic_load_n(&p->touch[i], __ATOMIC_RELAXED);
    uint64_t v;
    if (pread(p->touch_fd, &v, sizeof v, (off_t)i * (off_t)sizeof v) != (ssize_t)sizeof v)
        return 0;
    return v;
}
