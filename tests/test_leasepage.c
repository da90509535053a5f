/* SPDX-License-Identifier: BSD-3-Clause */
/* test_leasepage.c -- unit tests of agent/front/leasepage.c: lease pages as
 * sealed memfds and as files of a state directory that a successor maps
 * again, slot allocation and taking over, and touch words read without a
 * mapping that a client could make fault. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "leasepage.h"
#include "shm.h"

static char dir[64];
static int dirfd_ = -1;

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/dlock-lp-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(dirfd_, 0);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    close(dirfd_);
}

TestSuite(leasepage, .init = setup, .fini = teardown);

static const struct shm_slot *slot_of(const void *page, uint32_t i)
{
    return &shm_slots((void *)page)[i];
}

/* The client's view: the page read-only (no writable mapping, no resize),
 * the touch page read-write; what the agent writes shows in the client's
 * mapping of the file. */
Test(leasepage, file_pages_map_as_memfds_do)
{
    struct lease_page p;
    cr_assert_eq(lease_page_init_at(&p, 8, dirfd_, "c1", false), 0, "%s", strerror(errno));
    cr_assert_geq(p.fds[0], 0);
    cr_assert_geq(p.fds[1], 0);
    cr_assert_eq(fcntl(p.fds[0], F_GETFL) & O_ACCMODE, O_RDONLY);
    cr_assert_eq(mmap(NULL, shm_page_size(8), PROT_READ | PROT_WRITE, MAP_SHARED, p.fds[0], 0),
                 MAP_FAILED, "a writable mapping of the page");
    cr_assert_neq(ftruncate(p.fds[0], 0), 0, "the client resized the page");
    const void *view = mmap(NULL, shm_page_size(8), PROT_READ, MAP_SHARED, p.fds[0], 0);
    cr_assert_neq(view, MAP_FAILED);
    const struct shm_hdr *h = view;
    cr_assert_eq(h->magic, SHM_MAGIC);
    cr_assert_eq(h->nslots, 8);
    uint32_t s = lease_page_alloc(&p);
    lease_page_write(&p, s, 1, 42, 7, 1000);
    struct shm_slot got;
    cr_assert_eq(shm_slot_read(slot_of(view, s), &got), 0);
    cr_assert_eq(got.lease_id, 42);
    cr_assert_eq(got.deadline_ns, 1000);
    uint64_t *touch =
        mmap(NULL, shm_touch_size(8), PROT_READ | PROT_WRITE, MAP_SHARED, p.fds[1], 0);
    cr_assert_neq(touch, MAP_FAILED);
    touch[s] = 555;
    cr_assert_eq(lease_page_touched(&p, s), 555);
    /* A fresh lease of the slot starts untouched. */
    lease_page_free(&p, s);
    cr_assert_eq(lease_page_alloc(&p), s);
    cr_assert_eq(touch[s], 0);
    munmap((void *)view, shm_page_size(8));
    munmap(touch, shm_touch_size(8));
    lease_page_destroy(&p);
    cr_assert_eq(faccessat(dirfd_, "c1.page", F_OK, 0), 0, "the page went with the process");
    lease_page_unlink(dirfd_, "c1");
    cr_assert_neq(faccessat(dirfd_, "c1.page", F_OK, 0), 0);
    cr_assert_neq(faccessat(dirfd_, "c1.touch", F_OK, 0), 0);
}

/* A client that shrinks its touch file costs the agent nothing: its touches
 * read as none, and a successor gives the file its size back. */
Test(leasepage, a_shrunk_touch_file_reads_as_no_touch)
{
    struct lease_page p;
    cr_assert_eq(lease_page_init_at(&p, 4, dirfd_, "c2", false), 0);
    uint32_t s = lease_page_alloc(&p);
    cr_assert_eq(ftruncate(p.fds[1], 0), 0);
    cr_assert_eq(lease_page_touched(&p, s), 0);
    lease_page_free(&p, s);
    cr_assert_eq(lease_page_alloc(&p), s);
    lease_page_destroy(&p);
    cr_assert_eq(lease_page_init_at(&p, 4, dirfd_, "c2", true), 0);
    struct stat st;
    cr_assert_eq(fstatat(dirfd_, "c2.touch", &st, 0), 0);
    cr_assert_eq(st.st_size, (off_t)shm_touch_size(4));
    lease_page_destroy(&p);
}

/* A successor maps the same page: what the predecessor wrote is there, and
 * it keeps the slots of the leases it takes over; the others are freed. */
Test(leasepage, a_successor_takes_the_slots_over)
{
    struct lease_page p;
    cr_assert_eq(lease_page_init_at(&p, 16, dirfd_, "c3", false), 0);
    const void *view = mmap(NULL, shm_page_size(16), PROT_READ, MAP_SHARED, p.fds[0], 0);
    cr_assert_neq(view, MAP_FAILED);
    for (uint32_t i = 0; i < 6; i++)
        lease_page_write(&p, lease_page_alloc(&p), 1, 100 + i, i, 5000);
    lease_page_destroy(&p);
    /* Not created twice; reopened only with the size it has. */
    cr_assert_neq(lease_page_init_at(&p, 16, dirfd_, "c3", false), 0);
    cr_assert_eq(faccessat(dirfd_, "c3.page", F_OK, 0), 0, "a failed creation removed the page");
    cr_assert_neq(lease_page_init_at(&p, 17, dirfd_, "c3", true), 0);
    cr_assert_eq(lease_page_init_at(&p, 16, dirfd_, "c3", true), 0);
    cr_assert(lease_page_take(&p, 1));
    cr_assert(lease_page_take(&p, 4));
    cr_assert_not(lease_page_take(&p, 4), "a slot taken twice");
    cr_assert_not(lease_page_take(&p, 16), "a slot beyond the page");
    struct shm_slot got;
    cr_assert_eq(shm_slot_read(slot_of(view, 4), &got), 0);
    cr_assert_eq(got.lease_id, 104, "the predecessor's slot is gone");
    cr_assert_eq(shm_slot_read(slot_of(view, 2), &got), 0);
    cr_assert_eq(got.lease_id, 0, "a slot not taken over still shows its lease");
    /* New leases get the free slots, never a taken one. */
    for (int i = 0; i < 14; i++) {
        uint32_t s = lease_page_alloc(&p);
        cr_assert_neq(s, UINT32_MAX);
        cr_assert(s != 1 && s != 4, "slot %u handed out while taken", s);
    }
    cr_assert_eq(lease_page_alloc(&p), UINT32_MAX);
    /* The client of a resumed connection gets new descriptors. */
    cr_assert_eq(p.fds[0], -1);
    cr_assert_eq(lease_page_reopen_fds(&p, dirfd_, "c3"), 0);
    cr_assert_eq(fcntl(p.fds[0], F_GETFL) & O_ACCMODE, O_RDONLY);
    lease_page_destroy(&p);
    munmap((void *)view, shm_page_size(16));
}

/* A page file that is not a page (another size, a bad header) is refused. */
Test(leasepage, a_foreign_file_is_not_taken_for_a_page)
{
    int fd = openat(dirfd_, "c4.page", O_RDWR | O_CREAT, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)shm_page_size(2)), 0);
    close(fd);
    fd = openat(dirfd_, "c4.touch", O_RDWR | O_CREAT, 0600);
    close(fd);
    struct lease_page p;
    cr_assert_neq(lease_page_init_at(&p, 2, dirfd_, "c4", true), 0, "a page of zeros was taken");
    cr_assert_neq(symlinkat("/etc/passwd", dirfd_, "c5.page"), -1);
    cr_assert_neq(lease_page_init_at(&p, 2, dirfd_, "c5", true), 0, "a symlink was followed");
}
