/* SPDX-License-Identifier: BSD-3-Clause */
/* shim.h -- C side of the Go binding: trampolines from libdlock's callbacks
 * into exported Go functions. Declarations only (cgo forbids definitions in
 * the preamble of a file that exports). */
#ifndef DLOCK_GO_SHIM_H
#define DLOCK_GO_SHIM_H

#include <stdint.h>
#include <dlock.h>

/* dlock_lease_acquire_spec_async() with the Go trampoline as the callback
 * and id (a runtime/cgo.Handle) as its arg. */
int dlockgo_acquire(dlock_client *c, const char *name, const dlock_acquire_options *opts,
                    const dlock_lock_spec *spec, uintptr_t id);

/* dlock_lease_acquire_cancel() of the acquire started with id. */
int dlockgo_cancel(dlock_client *c, uintptr_t id);

/* Routes the client's lease events to Go, tagged with id. */
void dlockgo_set_event_cb(dlock_client *c, uintptr_t id);

#endif
