/* SPDX-License-Identifier: BSD-3-Clause */
#include "shim.h"

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
