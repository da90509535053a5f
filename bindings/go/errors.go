// SPDX-License-Identifier: BSD-3-Clause

package dlock

import (
	"context"
	"errors"
	"fmt"
)

// Error is an error of libdlock or of the agent: Code is the DLOCK_E* code
// (negative, as in dlock.h), Msg the words that go with it, the agent's own
// when it refused a request ("per-uid lease limit (64) reached for uid
// 1000"), else the library's description of the code. Name is the lock name
// the error is about, when there is one.
//
// Compare with errors.Is against the sentinels (ErrBusy, ErrTimeout, ...):
// an *Error matches the sentinel of its code, and the codes that say the
// agent or Redis cannot be reached (ErrConnect, ErrDisconnected,
// ErrNoAnswer, ErrUnavailable, ErrNoQuorum) all match ErrUnavailable too.
type Error struct {
	Code int
	Msg  string
	Name string
	// deadline: a wait that a context's deadline cut short, which matches
	// context.DeadlineExceeded too.
	deadline bool
}

func (e *Error) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("dlock: %s: %s", e.Name, e.Msg)
	}
	return "dlock: " + e.Msg
}

// Is reports whether target is the sentinel of e's code, or ErrUnavailable
// for a code that says the agent or Redis cannot be reached.
func (e *Error) Is(target error) bool {
	if target == context.DeadlineExceeded {
		return e.deadline
	}
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.Code == e.Code {
		return true
	}
	return t == ErrUnavailable && unreachable(e.Code)
}

// Timeout reports whether the error is a wait that ran out (ErrTimeout), as
// net.Error's Timeout does.
func (e *Error) Timeout() bool { return e.Code == codeTimedOut }

func unreachable(code int) bool {
	switch code {
	case codeConnect, codeDisconnected, codeNoAnswer, codeUnavail, codeNoQuorum:
		return true
	}
	return false
}

// The DLOCK_E* codes of dlock.h.
const (
	codeInvalid      = -1
	codeNoMem        = -2
	codeConnect      = -3
	codeDisconnected = -4
	codeProto        = -5
	codeVersion      = -6
	codeBusy         = -7
	codeTimedOut     = -8
	codeNameTooLong  = -9
	codeBadName      = -10
	codeLimit        = -11
	codeNotFound     = -12
	codeLost         = -13
	codeUnavail      = -14
	codeBackend      = -15
	codeOOM          = -16
	codeReadOnly     = -17
	codeLoading      = -18
	codeAuth         = -19
	codeShutdown     = -20
	codeHoldLimit    = -21
	codeStalled      = -22
	codeClock        = -23
	codeNoQuorum     = -24
	codeDenied       = -25
	codeNoAnswer     = -26
	codeHeld         = -27
	codeFailover     = -28
	codeKind         = -29
	codeCanceled     = -30
	codeRestart      = -31
)

// Sentinels, one per DLOCK_E* code, for errors.Is.
var (
	ErrInvalid      = sentinel(codeInvalid, "invalid argument")
	ErrNoMem        = sentinel(codeNoMem, "out of memory")
	ErrConnect      = sentinel(codeConnect, "cannot connect to the agent")
	ErrDisconnected = sentinel(codeDisconnected, "the connection to the agent was lost")
	ErrProto        = sentinel(codeProto, "protocol violation")
	ErrVersion      = sentinel(codeVersion, "no common protocol version")
	ErrBusy         = sentinel(codeBusy, "lock held elsewhere and no wait asked")
	ErrTimeout      = sentinel(codeTimedOut, "the wait ran out before the lock was free")
	ErrNameTooLong  = sentinel(codeNameTooLong, "lock name longer than the agent allows")
	ErrBadName      = sentinel(codeBadName, "lock name empty or with forbidden bytes")
	ErrLimit        = sentinel(codeLimit, "a lease, waiter or renewal limit was reached")
	ErrNotFound     = sentinel(codeNotFound, "no such lease on this connection")
	ErrLost         = sentinel(codeLost, "the lease was lost before it was released")
	ErrUnavailable  = sentinel(codeUnavail, "Redis is unreachable from the agent")
	ErrBackend      = sentinel(codeBackend, "Redis answered with an unexpected error")
	ErrOOM          = sentinel(codeOOM, "Redis is out of memory")
	ErrReadOnly     = sentinel(codeReadOnly, "Redis is a read-only replica")
	ErrLoading      = sentinel(codeLoading, "Redis is loading its dataset")
	ErrAuth         = sentinel(codeAuth, "Redis refused the agent's credentials")
	ErrShutdown     = sentinel(codeShutdown, "the agent is shutting down")
	ErrHoldLimit    = sentinel(codeHoldLimit, "the lease reached its maximum hold time")
	ErrStalled      = sentinel(codeStalled, "the holder did not touch the lease in time")
	ErrClock        = sentinel(codeClock, "the agent's clock is not ours")
	ErrNoQuorum     = sentinel(codeNoQuorum, "no majority of Redis nodes usable")
	ErrDenied       = sentinel(codeDenied, "the agent's policy does not let this user use the name")
	ErrNoAnswer     = sentinel(codeNoAnswer, "the agent did not answer in time")
	ErrHeld         = sentinel(codeHeld, "this client already holds the name")
	ErrFailover     = sentinel(codeFailover, "Redis failed over: the lease is in doubt")
	ErrKind         = sentinel(codeKind, "the name is held as another kind of lock")
	ErrCanceled     = sentinel(codeCanceled, "the acquire was cancelled")
	ErrRestart      = sentinel(codeRestart, "the agent restarted: the lease is in doubt")
)

// ErrClosed is returned by calls on a Client after Close, and by an Acquire
// still waiting when Close was called.
var ErrClosed = errors.New("dlock: client closed")

func sentinel(code int, msg string) *Error { return &Error{Code: code, Msg: msg} }

var sentinels = func() map[int]*Error {
	m := map[int]*Error{}
	for _, e := range []*Error{ErrInvalid, ErrNoMem, ErrConnect, ErrDisconnected, ErrProto,
		ErrVersion, ErrBusy, ErrTimeout, ErrNameTooLong, ErrBadName, ErrLimit, ErrNotFound,
		ErrLost, ErrUnavailable, ErrBackend, ErrOOM, ErrReadOnly, ErrLoading, ErrAuth,
		ErrShutdown, ErrHoldLimit, ErrStalled, ErrClock, ErrNoQuorum, ErrDenied, ErrNoAnswer,
		ErrHeld, ErrFailover, ErrKind, ErrCanceled, ErrRestart} {
		m[e.Code] = e
	}
	return m
}()

// deadlineError is err (an ErrTimeout), or the ErrTimeout of name, cut short
// by a context's deadline: it matches both ErrTimeout and
// context.DeadlineExceeded.
func deadlineError(err error, name string) error {
	e, ok := err.(*Error)
	if !ok {
		e = codeError(codeTimedOut, "", name)
	}
	d := *e
	d.deadline = true
	return &d
}

// codeError builds the *Error of code with msg (the library's description
// when msg is empty).
func codeError(code int, msg, name string) *Error {
	if msg == "" {
		if s, ok := sentinels[code]; ok {
			msg = s.Msg
		} else {
			msg = fmt.Sprintf("error %d", code)
		}
	}
	return &Error{Code: code, Msg: msg, Name: name}
}
