/* SPDX-License-Identifier: BSD-3-Clause */
/* shim.h -- C side of the Go binding: trampolines from libdlock's callbacks
 * into exported Go functions, and the dispatcher's wait. Declarations only
 * (cgo forbids definitions in the preamble of a file that exports). */
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

/* A non-blocking, close-on-exec eventfd, or -errno. */
int dlockgo_eventfd(void);

/* Writes 1 to the eventfd. */
void dlockgo_wake(int efd);

/* Blocks in poll() until fd (when >= 0) or efd is readable. Returns a bit
 * mask: 1 fd readable (or hung up), 2 efd readable (drained); -errno on a
 * poll() failure other than EINTR. */
int dlockgo_wait(int fd, int efd);

#endif
