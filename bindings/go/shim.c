/* SPDX-License-Identifier: BSD-3-Clause */
#include <dlock.h>

/* A libdlock older than dlock_lease_acquire_cancel() lacks the call: bind it
 * weakly then, so that the binding still loads against it (ctx cancellation
 * then leaves the wait to run out in the agent). */
#ifndef DLOCK_ECANCELED
#define DLOCKGO_WEAK_CANCEL 1
int dlock_lease_acquire_cancel(dlock_client *client, dlock_acquire_cb cb, void *arg)
    __attribute__((weak));
#endif

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

int dlockgo_can_cancel(void)
{
#ifdef DLOCKGO_WEAK_CANCEL
    return dlock_lease_acquire_cancel != NULL;
#else
    return 1;
#endif
}

int dlockgo_cancel(dlock_client *c, uintptr_t id)
{
    if (!dlockgo_can_cancel())
        return DLOCK_EINVAL;
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
