// SPDX-License-Identifier: BSD-3-Clause

package dlock

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// MaxSetNames is the most names one AcquireSet takes (DLOCK_SET_MAX).
const MaxSetNames = 64

// LeaseSet holds several names at once, or none of them.
type LeaseSet struct {
	leases []*Lease // in the caller's order
}

// AcquireSet takes every name of names or none, as libdlock's
// dlock_lease_set_acquire() does: one at a time in byte-wise ascending
// order, whatever the caller's order (so that clients asking for
// overlapping sets never deadlock), each with opts, and opts.Wait is one
// wait for the whole set (a name reached after it ran out gets one try).
// When a name cannot be taken, or one already taken is lost meanwhile,
// every name taken so far is released and the error returned (a wait that
// ran out is ErrTimeout, ErrLost for a loss). ErrInvalid: no names, more
// than MaxSetNames, or a name given twice. ctx works as for Acquire.
//
// The set is built here from asynchronous acquires rather than with the
// blocking dlock_lease_set_acquire(), so that the client is never held
// while the set waits, and ctx can cancel it.
func (c *Client) AcquireSet(ctx context.Context, names []string, opts AcquireOptions) (*LeaseSet, error) {
	if len(names) == 0 || len(names) > MaxSetNames {
		return nil, codeError(codeInvalid, fmt.Sprintf("a set takes 1 to %d names", MaxSetNames), "")
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return names[order[a]] < names[order[b]] })
	for i := 1; i < len(order); i++ {
		if names[order[i]] == names[order[i-1]] {
			return nil, codeError(codeInvalid, "a name given twice", names[order[i]])
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlock: set: %w", err)
	}
	var deadline time.Time
	if opts.Wait > 0 {
		deadline = time.Now().Add(opts.Wait)
	}
	if dl, ok := ctx.Deadline(); ok && opts.Wait != 0 && (deadline.IsZero() || dl.Before(deadline)) {
		deadline = dl
	}
	s := &LeaseSet{leases: make([]*Lease, len(names))}
	taken := 0
	fail := func(err error) (*LeaseSet, error) {
		for _, i := range order[:taken] {
			_ = s.leases[i].releaseMember(false)
		}
		return nil, err
	}
	for _, i := range order {
		wait := int64(0)
		ranOut := false
		switch {
		case opts.Wait < 0 && deadline.IsZero():
			wait = -1
		case !deadline.IsZero():
			wait = durMs(time.Until(deadline))
			ranOut = wait == 0
		}
		l, err := c.acquire(ctx, names[i], opts, wait, false)
		if err != nil {
			if ranOut && isCode(err, codeBusy) {
				err = codeError(codeTimedOut, "", names[i])
			}
			return fail(err)
		}
		s.leases[i] = l
		taken++
		for _, j := range order[:taken] {
			if !s.leases[j].Valid() {
				return fail(codeError(codeLost, "", names[j]))
			}
		}
	}
	for _, l := range s.leases {
		l.inSet = true
	}
	return s, nil
}

// Leases are the set's leases, in the order of the names given to
// AcquireSet. Release them with the set, not one by one.
func (s *LeaseSet) Leases() []*Lease { return append([]*Lease(nil), s.leases...) }

// Len is the number of names the set holds.
func (s *LeaseSet) Len() int { return len(s.leases) }

// Valid reports whether every member is valid right now.
func (s *LeaseSet) Valid() bool {
	for _, l := range s.leases {
		if !l.Valid() {
			return false
		}
	}
	return true
}

// Release releases every member (as Lease.Release) and returns the first
// member's error in the caller's order, nil when all were valid up to the
// release.
func (s *LeaseSet) Release() error {
	var first error
	for _, l := range s.leases {
		if err := l.releaseMember(false); err != nil && first == nil {
			first = err
		}
	}
	return first
}
