// SPDX-License-Identifier: BSD-3-Clause

package dlock

/*
#include "shim.h"
*/
import "C"

import "runtime/cgo"

// The functions libdlock calls back, through the trampolines of shim.c, from
// inside dlock_client_dispatch() or another call on the client: always on a
// goroutine that holds the client's lock. arg is a runtime/cgo.Handle, never
// a Go pointer.

//export dlockgoAcquireDone
func dlockgoAcquireDone(_ *C.dlock_client, status C.int, lease *C.dlock_lease, arg C.uintptr_t) {
	h := cgo.Handle(arg)
	op := h.Value().(*acquireOp)
	op.c.acquireDone(h, status, lease)
}

//export dlockgoEvent
func dlockgoEvent(_ *C.dlock_client, lease *C.dlock_lease, state C.int, reason C.int, arg C.uintptr_t) {
	c := cgo.Handle(arg).Value().(*Client)
	c.leaseEvent(lease, State(state), int(reason))
}
