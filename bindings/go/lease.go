// SPDX-License-Identifier: BSD-3-Clause

package dlock

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of a lease.
type State int32

const (
	// Held: the agent keeps the lease renewed.
	Held State = 1
	// Jeopardy: renewal failing, still within the validity deadline.
	Jeopardy State = 2
	// Lost: no longer provably held; stop using it. Final.
	Lost State = 3
	// Released: given up by Release (or Close). Final.
	Released State = 4
)

func (s State) String() string {
	switch s {
	case Held:
		return "held"
	case Jeopardy:
		return "jeopardy"
	case Lost:
		return "lost"
	case Released:
		return "released"
	}
	return "unknown"
}

// Lease is a lock held through a Client. Valid, Remaining and Touch are safe
// from any goroutine at any time, also during and after Release (then Valid
// is false).
type Lease struct {
	c       *Client
	name    string
	fence   uint64
	ttl     time.Duration
	kind    Kind
	onEvent func(Event)
	inSet   bool

	// gate guards h for the lock-free readers (Valid, Remaining, Touch):
	// each holds a count while it reads the handle; gateShut set means h is
	// about to be freed, and a reader then stays away. h itself changes only
	// under c.mu, with the gate shut and no reader inside.
	gate atomic.Int64
	h    *C.dlock_lease

	state    atomic.Int32
	lost     chan struct{}
	lostOnce sync.Once
	lostErr  error // set before lost is closed
}

const gateShut = int64(1) << 62

// enter lets a reader at the handle; false once the lease is released.
func (l *Lease) enter() bool {
	if l.gate.Add(1)&gateShut != 0 {
		l.gate.Add(-1)
		return false
	}
	return true
}

func (l *Lease) leave() { l.gate.Add(-1) }

// shut keeps new readers away from the handle and waits for those inside
// (each stays some nanoseconds); under c.mu.
func (l *Lease) shut() {
	for {
		g := l.gate.Load()
		if g&gateShut != 0 || l.gate.CompareAndSwap(g, g|gateShut) {
			break
		}
	}
	for l.gate.Load() != gateShut {
		runtime.Gosched()
	}
}

// newLease wraps a granted handle; under c.mu.
func newLease(c *Client, h *C.dlock_lease, onEvent func(Event)) *Lease {
	l := &Lease{
		c:       c,
		name:    C.GoString(C.dlock_lease_name(h)),
		fence:   uint64(C.dlock_lease_fence(h)),
		ttl:     time.Duration(C.dlock_lease_ttl_ms(h)) * time.Millisecond,
		kind:    Kind(C.dlock_lease_kind(h)),
		onEvent: onEvent,
		h:       h,
		lost:    make(chan struct{}),
	}
	l.state.Store(int32(Held))
	return l
}

// Name is the lock name.
func (l *Lease) Name() string { return l.name }

// Fence is the fencing token of the grant: strictly greater than every token
// granted before for the same name, by any agent on the same Redis. Hand it
// to the resource you write to, so that it can refuse a stale holder.
func (l *Lease) Fence() uint64 { return l.fence }

// TTL is the lease's TTL as granted by the agent.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Kind is the kind of lock the lease holds.
func (l *Lease) Kind() Kind { return l.kind }

// Valid reports whether the lease is provably held right now: held (or in
// jeopardy) as the agent last wrote in the shared lease page, and its
// validity deadline not passed. No message to the agent, no system call
// besides the vDSO clock. Call it right before each side effect that needs
// the lock.
func (l *Lease) Valid() bool {
	if !l.enter() {
		return false
	}
	ok := C.dlock_lease_valid(l.h) != 0
	l.leave()
	return ok
}

// Remaining is how long the lease stays valid if the agent renews it no more
// (0 when not valid).
func (l *Lease) Remaining() time.Duration {
	if !l.enter() {
		return 0
	}
	ns := C.dlock_lease_remaining_ns(l.h)
	l.leave()
	return time.Duration(ns)
}

// Touch tells the agent the holder makes progress, for a lease acquired with
// AcquireOptions.Progress. One store to shared memory.
func (l *Lease) Touch() {
	if l.enter() {
		C.dlock_lease_touch(l.h)
		l.leave()
	}
}

// State is the lease's state as the agent last reported it (Released after
// Release).
func (l *Lease) State() State { return State(l.state.Load()) }

// Holds is the number of holds of a re-entered lease: the acquires that
// returned it and were not released (0 once released).
func (l *Lease) Holds() int {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	if l.h == nil {
		return 0
	}
	return int(C.dlock_lease_holds(l.h))
}

// Lost returns a channel closed when the lease is lost (the LOST event: its
// key vanished or changed on Redis, the agent or its connection went away,
// a hold limit was reached). It stays open after a Release.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns nil while the lease is valid, else why it is not: an error
// matching ErrLost (with the loss's reason, if the LOST event came, in its
// message) or, once released, ErrNotFound.
func (l *Lease) Err() error {
	if l.Valid() {
		return nil
	}
	if l.State() == Released {
		return codeError(codeNotFound, "lease already released", l.name)
	}
	select {
	case <-l.lost:
		if e, ok := l.lostErr.(*Error); ok && e.Code != codeLost {
			return codeError(codeLost, "lease lost: "+e.Msg, l.name)
		}
	default:
	}
	return codeError(codeLost, "", l.name)
}

// Release gives the lease up (one hold of a re-entered lease) without a
// round trip: nil when the lease was valid up to the release, ErrLost when
// it had been lost, ErrDisconnected when the agent is gone (it released the
// lease then). A second Release returns an error matching ErrNotFound.
func (l *Lease) Release() error { return l.release(false) }

// ReleaseSync is Release waiting for the agent's word (one round trip, at
// most 10 s, holding the client meanwhile): once it returns, the agent has
// given the lease up.
func (l *Lease) ReleaseSync() error { return l.release(true) }

func (l *Lease) release(sync bool) error {
	if l.inSet {
		return codeError(codeInvalid, "a member of a lease set is released with its set", l.name)
	}
	return l.releaseMember(sync)
}

func (l *Lease) releaseMember(sync bool) error {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.h == nil {
		if c.closed {
			return ErrClosed
		}
		return codeError(codeNotFound, "lease already released", l.name)
	}
	last := C.dlock_lease_holds(l.h) <= 1
	var rc C.int
	if last {
		l.shut() // no Valid() reads the handle while it is freed
		h := l.h
		l.h = nil
		delete(c.leases, h)
		if sync {
			rc = C.dlock_lease_release_sync(h)
		} else {
			rc = C.dlock_lease_release(h)
		}
		l.state.Store(int32(Released))
	} else if sync {
		rc = C.dlock_lease_release_sync(l.h)
	} else {
		rc = C.dlock_lease_release(l.h)
	}
	c.followLocked() // a release may reconnect (ReleaseSync) or find the link broken
	if rc == 0 {
		return nil
	}
	return codeError(int(rc), "", l.name)
}
