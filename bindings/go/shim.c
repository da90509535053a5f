/* SPDX-License-Identifier: BSD-3-Clause */
#include "shim.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "_cgo_export.h"

static void acquire_done(dlock_client *c, int status, dlock_lease *lease, void *arg)
{
    dlockgoAcquireDone(c, status, lease, (uintptr_t)arg);
}

static void lease_event(dlock_client *c, dlock_lease *lease, dlock_state state, int reason,
                        void *arg)
{
    dlockgoEvent(c, lease, (int)state, reason, (uintptr_t)arg);
}

int dlockgo_acquire(dlock_client *c, const char *name, const dlock_acquire_options *opts,
                    const dlock_lock_spec *spec, uintptr_t id)
{
    return dlock_lease_acquire_spec_async(c, name, opts, spec, acquire_done, (void *)id);
}

int dlockgo_cancel(dlock_client *c, uintptr_t id)
{
    return dlock_lease_acquire_cancel(c, acquire_done, (void *)id);
}

void dlockgo_set_event_cb(dlock_client *c, uintptr_t id)
{
    dlock_client_set_event_cb(c, lease_event, (void *)id);
}

int dlockgo_eventfd(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

void dlockgo_wake(int efd)
{
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(efd, &one, sizeof one);
    while (n < 0 && errno == EINTR);
}

int dlockgo_wait(int fd, int efd)
{
    struct pollfd p[2] = {{.fd = efd, .events = POLLIN}, {.fd = fd, .events = POLLIN}};
    for (;;) {
        int r = poll(p, fd >= 0 ? 2 : 1, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        int mask = 0;
        if (p[0].revents) {
            uint64_t v;
            while (read(efd, &v, sizeof v) < 0 && errno == EINTR)
                ;
            mask |= 2;
        }
        if (fd >= 0 && p[1].revents)
            mask |= 1;
        return mask;
    }
}
