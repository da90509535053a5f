// SPDX-License-Identifier: BSD-3-Clause

// Package dlock is the Go binding of libdlock, the client library of the
// dlock agent (dlockd): distributed locks on Redis, kept alive by the agent
// on this host for as long as the client's connection lives.
//
// A Client is one connection to the agent; it is safe for concurrent use by
// many goroutines. Acquire takes a lease on a lock name; Lease.Valid tells,
// in some nanoseconds and without a message to the agent, whether it is
// still held; Lease.Release gives it up. When the process dies, the agent
// releases its leases at once.
package dlock

/*
#cgo pkg-config: dlock
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"runtime/cgo"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Options are the settings of Open.
type Options struct {
	// Socket is the agent's client socket; "" means $DLOCK_SOCKET, else
	// /run/dlock/dlock.sock.
	Socket string
}

// Client is a connection to the agent. Its methods are safe for concurrent
// use. Close it when done: the agent then releases every lease taken
// through it. The connection outlives a restart of the agent (one that
// keeps a state directory, its default): libdlock takes it back from the
// next agent, and the client's leases and waiting acquires go on.
type Client struct {
	mu      sync.Mutex // held around every call into libdlock on c
	c       *C.dlock_client
	closed  bool
	gone    bool          // dlock_client_dispatch() said the connection is gone for good
	stop    chan struct{} // closed by Close
	self    cgo.Handle
	w       *watch        // what the dispatcher watches; set by it, under mu
	done    chan struct{} // closed when the dispatcher returns
	pending map[cgo.Handle]*acquireOp
	leases  map[*C.dlock_lease]*Lease
	owners  atomic.Uint64 // the owner ids of plain acquires (ownerOwn | n)

	evMu    sync.Mutex
	evQueue []func()
	evWake  chan struct{}
}

// Open connects to the agent. The error is an *Error: ErrConnect (which also
// matches ErrUnavailable) when no agent listens on the socket, ErrClock when
// the agent runs in another time namespace.
func Open(opts Options) (*Client, error) {
	var path *C.char
	if opts.Socket != "" {
		path = C.CString(opts.Socket)
		defer C.free(unsafe.Pointer(path))
	}
	var cc *C.dlock_client
	if rc := C.dlock_client_open(&cc, path); rc != 0 {
		return nil, codeError(int(rc), C.GoString(C.dlock_strerror(rc)), "")
	}
	w, err := newWatch(int(C.dlock_client_fd(cc)))
	if err != nil {
		C.dlock_client_close(cc)
		return nil, err
	}
	c := &Client{
		c:       cc,
		w:       w,
		done:    make(chan struct{}),
		stop:    make(chan struct{}),
		pending: map[cgo.Handle]*acquireOp{},
		leases:  map[*C.dlock_lease]*Lease{},
		evWake:  make(chan struct{}, 1),
	}
	c.self = cgo.NewHandle(c)
	C.dlockgo_set_event_cb(cc, C.uintptr_t(c.self))
	go c.dispatcher(w)
	go c.deliverEvents()
	return c, nil
}

// watch is what the dispatcher waits on: a duplicate of the client's
// descriptor (dlock_client_fd()) in the runtime's netpoller, and the
// identity (device, inode) of the file it duplicates. libdlock's descriptor
// is the agent's socket, or, while the agent restarts, a timerfd that fires
// when it is time to reconnect, then the new connection's socket: it may
// change after any call on the client, and a new one may have the old one's
// number, so the file is what tells them apart. The duplicate keeps the file
// it watches open, so its inode cannot be reused while it is watched.
type watch struct {
	f   *os.File
	raw syscall.RawConn
	dev uint64
	ino uint64
}

// newWatch duplicates fd (libdlock's, non-blocking, which the duplicate
// shares) into a pollable *os.File. libdlock alone reads its descriptor;
// closing the duplicate leaves libdlock's open.
func newWatch(fd int) (*watch, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("dlock: the agent connection's descriptor: %w", err)
	}
	dup, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("dlock: duplicating the agent connection: %w", errno)
	}
	// A non-blocking descriptor makes a pollable File (one the netpoller
	// watches, whose deadlines work): a socket and a timerfd alike.
	f := os.NewFile(dup, "dlock")
	raw, err := f.SyscallConn()
	if err == nil {
		err = f.SetReadDeadline(time.Time{}) // ErrNoDeadline: not in the netpoller
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dlock: watching the agent connection: %w", err)
	}
	return &watch{f: f, raw: raw, dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// movedLocked reports whether libdlock's descriptor is no longer the file w
// watches (under c.mu).
func (c *Client) movedLocked(w *watch) bool {
	var st syscall.Stat_t
	if syscall.Fstat(int(C.dlock_client_fd(c.c)), &st) != nil {
		return true
	}
	return uint64(st.Dev) != w.dev || uint64(st.Ino) != w.ino
}

// followLocked, after a call into libdlock other than the dispatcher's (the
// descriptor may change after any call: a blocking one may reconnect, a send
// may find the connection broken), wakes the dispatcher if the descriptor is
// no longer the one it waits on: an expired read deadline ends its wait, and
// it watches the new one. Under c.mu.
func (c *Client) followLocked() {
	if c.w != nil && !c.gone && c.movedLocked(c.w) {
		_ = c.w.f.SetReadDeadline(longAgo)
	}
}

var longAgo = time.Unix(1, 0)

// dispatcher waits in the netpoller until the client's descriptor is
// readable, without the lock, then has libdlock read and handle what came
// under it: acquire completions and lease events (and, while the agent
// restarts, a reconnection when its timer fires). The read callback returns
// false ("not done") after each dispatch, so that the runtime waits for the
// next readiness and calls it again; the runtime itself reads nothing.
// dlock_client_dispatch() reads until the socket would block (and drains
// the timer), which the netpoller's edge-triggered wait needs. After each
// dispatch the callback checks the descriptor: when libdlock has another
// one, it returns true and the dispatcher watches the new one (a call made
// elsewhere wakes it with a read deadline for the same; see followLocked).
// It ends when the connection is gone for good or the client is closed.
func (c *Client) dispatcher(w *watch) {
	defer close(c.done)
	for {
		c.mu.Lock()
		if c.closed || c.gone {
			c.w = nil
			c.mu.Unlock()
			if w != nil {
				w.f.Close() // nobody else touches it now (they do so under c.mu)
			}
			return
		}
		if w == nil || c.movedLocked(w) {
			c.w = nil
			if w != nil {
				w.f.Close()
			}
			var err error
			if w, err = newWatch(int(C.dlock_client_fd(c.c))); err != nil {
				c.mu.Unlock()
				c.limp()
				continue
			}
			c.w = w
		}
		_ = w.f.SetReadDeadline(time.Time{}) // a wake for a move since undone
		c.mu.Unlock()
		_ = w.raw.Read(func(uintptr) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.closed || c.gone {
				return true
			}
			if C.dlock_client_dispatch(c.c) != 0 {
				// The connection is gone for good: every lease was told
				// LOST and every acquire in flight completed.
				c.gone = true
				return true
			}
			return c.movedLocked(w)
		})
		// Done, or a read deadline (a move seen elsewhere, Close): look again.
	}
}

// limp, when the descriptor cannot be watched (no descriptor left to
// duplicate it), dispatches every 50 ms until it can, or the client is
// closed. c.w is nil meanwhile, and nobody waits on anything to wake.
func (c *Client) limp() {
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.stop:
	}
	c.mu.Lock()
	if !c.closed && !c.gone && C.dlock_client_dispatch(c.c) != 0 {
		c.gone = true
	}
	c.mu.Unlock()
}

// Close closes the connection; the agent releases every lease of the client.
// Acquires still waiting return ErrClosed; the client's leases are released
// (their Valid is false, Release returns ErrClosed). Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.w != nil {
		_ = c.w.f.SetReadDeadline(longAgo) // ends the dispatcher's wait
	}
	close(c.stop)
	c.mu.Unlock()
	<-c.done // the dispatcher closes what it watched

	c.mu.Lock()
	for _, l := range c.leases {
		l.shut()
		l.h = nil
		l.state.Store(int32(Released))
	}
	c.leases = nil
	C.dlock_client_close(c.c)
	c.c = nil
	for h, op := range c.pending {
		delete(c.pending, h)
		h.Delete()
		op.done <- acquireResult{err: ErrClosed}
	}
	c.self.Delete()
	c.mu.Unlock()
	close(c.evWake) // the event goroutine delivers what is queued, then ends
	return nil
}

// Ping makes one round trip to the agent (holding the client meanwhile, at
// most 5 s).
func (c *Client) Ping() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	rc := C.dlock_client_ping(c.c)
	c.followLocked()
	err := c.errLocked(rc, "")
	c.mu.Unlock()
	return err
}

// errLocked turns a return code into an *Error with the agent's words.
func (c *Client) errLocked(rc C.int, name string) error {
	if rc == 0 {
		return nil
	}
	return codeError(int(rc), C.GoString(C.dlock_client_strerror(c.c, rc)), name)
}

// Kind is the kind of lock an acquire asks for.
type Kind int

const (
	// Exclusive: one holder (the default).
	Exclusive Kind = 0
	// Shared: the read side of a read-write lock: any number of shared
	// holders, or one exclusive holder; once an exclusive acquire waits,
	// later shared ones queue behind it.
	Shared Kind = 1
	// Semaphore: at most Permits holders at once.
	Semaphore Kind = 2
)

func (k Kind) String() string {
	switch k {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Semaphore:
		return "semaphore"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ownerOwn marks the owners of plain acquires, one per acquire.
const ownerOwn uint64 = 1 << 63

// WaitForever as AcquireOptions.Wait waits until the lock is granted (or the
// context ends).
const WaitForever time.Duration = -1

// AcquireOptions are the settings of one acquire. The zero value takes the
// agent's default TTL and tries once, without waiting.
type AcquireOptions struct {
	// TTL is the lease's time to live on Redis, renewed by the agent while
	// the client lives; 0 = the agent's default (30 s). Whole milliseconds.
	TTL time.Duration
	// Wait is how long to wait for the lock: 0 tries once (ErrBusy when it
	// is taken), WaitForever (or any negative value) waits until granted.
	// A context deadline sooner than Wait wins.
	Wait time.Duration
	// Kind of lock; Permits for a Semaphore (>= 1, the same for every
	// acquirer of the name), 0 for the other kinds.
	Kind    Kind
	Permits uint32
	// Without Reentrant, each acquire is an owner of its own: goroutines
	// that acquire one name through one client take turns as clients do (a
	// try-once finds it busy), and an acquire of a name its own goroutine
	// holds waits for itself, as a sync.Mutex locked twice does.
	// Reentrant lets the Owner take a name it holds again: the same *Lease
	// comes back with one more hold (Holds), and each Release gives up one.
	// Owner tells owners apart within the client (say, one per request);
	// 0 is the client itself. Another owner's acquire waits like anyone's.
	// Owners are below 1<<63 (those above are the plain acquires' own).
	Reentrant bool
	Owner     uint64
	// MaxHold stops renewal this long after the acquire was sent to Redis;
	// Progress stops it when Touch was not called for this long. 0 = the
	// agent's default (none unless configured).
	MaxHold  time.Duration
	Progress time.Duration
	// OnEvent, if set, is called for every state change of the lease that
	// was not asked for: Jeopardy (renewal failing), Held again, Lost. It
	// runs on the client's event goroutine, one event at a time in order,
	// and may call any method of the client and its leases.
	OnEvent func(Event)
}

// Event is a state change of a lease that the caller did not ask for.
type Event struct {
	Lease *Lease
	State State
	// Err tells why: nil for Held, the reason for Jeopardy and Lost (an
	// *Error: ErrUnavailable, ErrLost, ErrHoldLimit, ErrDisconnected, ...).
	// ErrRestart: the agent restarted (or died); a Jeopardy while libdlock
	// takes the connection back from the next agent (the lease stays valid
	// meanwhile, and is Held again once that agent confirms it), a Lost when
	// no agent took the lease over before its deadline.
	Err error
}

func durMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func clampU32(v int64) C.uint32_t {
	if v > 0xffffffff {
		v = 0xffffffff
	}
	return C.uint32_t(v)
}

type acquireResult struct {
	lease *Lease
	err   error
}

type acquireOp struct {
	c       *Client
	name    string
	onEvent func(Event)
	done    chan acquireResult // buffered: the final word, exactly once
}

// Acquire takes a lease on name. It returns ErrBusy when the lock is taken
// and opts.Wait is 0, ErrTimeout when the wait ran out, ErrHeld for a
// re-entrant acquire of another kind than its owner's lease, ErrNameTooLong or ErrBadName
// for a name the agent refuses, ErrKind for a kind clash, and errors that
// match ErrUnavailable when the agent or Redis cannot be reached.
//
// ctx bounds the wait: a deadline sooner than opts.Wait caps it (a wait
// that runs out on it matches both ErrTimeout and
// context.DeadlineExceeded); cancelling ctx cancels the acquire in the agent,
// which then keeps no waiter for it, and returns an error matching
// ctx.Err(). The client is not held while the acquire waits.
func (c *Client) Acquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlock: %s: %w", name, err)
	}
	wait := int64(0)
	if opts.Wait < 0 {
		wait = -1
	} else if opts.Wait > 0 {
		wait = durMs(opts.Wait)
	}
	capped := false
	if dl, ok := ctx.Deadline(); ok && wait != 0 {
		left := durMs(time.Until(dl))
		if left < 1 {
			left = 1
		}
		if wait < 0 || left < wait {
			wait, capped = left, true
		}
	}
	return c.acquire(ctx, name, opts, wait, capped)
}

func (c *Client) acquire(ctx context.Context, name string, opts AcquireOptions, wait int64,
	capped bool) (*Lease, error) {
	o := C.dlock_acquire_options{
		ttl_ms:      clampU32(durMs(opts.TTL)),
		wait_ms:     C.int64_t(wait),
		max_hold_ms: clampU32(durMs(opts.MaxHold)),
		progress_ms: clampU32(durMs(opts.Progress)),
	}
	// Every acquire is re-entrant on the wire: a plain one under an owner
	// of its own, so that it waits for the client's other holders of the
	// name instead of being refused with ErrHeld.
	o.flags = C.DLOCK_ACQUIRE_REENTRANT
	owner := opts.Owner
	if !opts.Reentrant {
		owner = ownerOwn | c.owners.Add(1)
	} else if owner&ownerOwn != 0 {
		return nil, codeError(codeInvalid, "Owner must be below 1<<63", name)
	}
	if opts.Kind < 0 || opts.Kind > Semaphore {
		return nil, codeError(codeInvalid, "unknown lock kind "+opts.Kind.String(), name)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return nil, codeError(codeBadName, "", name)
	}
	spec := C.dlock_lock_spec{kind: C.uint32_t(opts.Kind), permits: C.uint32_t(opts.Permits),
		owner: C.uint64_t(owner)}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))

	op := &acquireOp{c: c, name: name, onEvent: opts.OnEvent, done: make(chan acquireResult, 1)}
	h := cgo.NewHandle(op)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		h.Delete()
		return nil, ErrClosed
	}
	c.pending[h] = op
	rc := C.dlockgo_acquire(c.c, cname, &o, &spec, C.uintptr_t(h))
	if rc != 0 {
		delete(c.pending, h)
		h.Delete()
		err := c.errLocked(rc, name)
		c.followLocked()
		c.mu.Unlock()
		return nil, err
	}
	// Frames the send read while the socket was full wait in the library's
	// buffer, where the netpoller cannot see them: handle them now.
	C.dlock_client_dispatch(c.c)
	c.followLocked()
	c.mu.Unlock()

	var res acquireResult
	cancelled := false
	select {
	case res = <-op.done:
	case <-ctx.Done():
		res = c.cancel(h, op)
		cancelled = true
	}
	// ctxErr is the error of a wait the context ended: it matches
	// ctx.Err(), and ErrTimeout too when the context's deadline capped it.
	ctxErr := func() error {
		if capped && ctx.Err() == context.DeadlineExceeded {
			return deadlineError(nil, name)
		}
		return fmt.Errorf("dlock: %s: %w", name, ctx.Err())
	}
	switch {
	case res.lease != nil && cancelled:
		// The grant crossed the cancel: the caller gave up, so give the
		// lease back.
		_ = res.lease.Release()
		return nil, ctxErr()
	case res.err != nil && cancelled && isCode(res.err, codeCanceled):
		return nil, ctxErr()
	case res.err != nil && capped && isCode(res.err, codeTimedOut):
		return nil, deadlineError(res.err, name)
	}
	return res.lease, res.err
}

func isCode(err error, code int) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}

// cancel cancels the acquire of h in the agent and waits for its final word.
func (c *Client) cancel(h cgo.Handle, op *acquireOp) acquireResult {
	c.mu.Lock()
	if c.closed || c.pending[h] == nil {
		// Completed already (or Close completes it): the word is in op.done.
		c.mu.Unlock()
		return <-op.done
	}
	rc := C.dlockgo_cancel(c.c, C.uintptr_t(h))
	// A CANCEL the full socket kept back goes out with the next call.
	C.dlock_client_dispatch(c.c)
	c.followLocked()
	c.mu.Unlock()
	if rc != 0 && rc != C.DLOCK_ENOTFOUND {
		// Nothing was sent (no memory): the agent keeps the waiter until its
		// wait ends; a lease granted meanwhile is released on arrival.
		go func() {
			if res := <-op.done; res.lease != nil {
				_ = res.lease.Release()
			}
		}()
		return acquireResult{err: ErrCanceled}
	}
	// 0: the final word comes later; ENOTFOUND: it came already.
	return <-op.done
}

// Acquire callbacks run inside a libdlock call made under c.mu.
func (c *Client) acquireDone(h cgo.Handle, status C.int, cl *C.dlock_lease) {
	op := c.pending[h]
	if op == nil {
		return
	}
	delete(c.pending, h)
	h.Delete()
	if status != 0 {
		op.done <- acquireResult{err: c.errLocked(status, op.name)}
		return
	}
	l := c.leases[cl]
	if l == nil {
		l = newLease(c, cl, op.onEvent)
		c.leases[cl] = l
	}
	op.done <- acquireResult{lease: l}
}

func (c *Client) leaseEvent(cl *C.dlock_lease, state State, reason int) {
	l := c.leases[cl]
	if l == nil {
		return
	}
	var err error
	if reason != 0 {
		err = codeError(reason, C.GoString(C.dlock_strerror(C.int(reason))), l.name)
	} else if state == Lost {
		err = codeError(codeLost, "", l.name)
	}
	l.state.Store(int32(state))
	if state == Lost {
		l.lostErr = err
		l.lostOnce.Do(func() { close(l.lost) })
	}
	if l.onEvent != nil {
		ev := Event{Lease: l, State: state, Err: err}
		f := l.onEvent
		c.queueEvent(func() { f(ev) })
	}
}

// queueEvent hands an event callback to the event goroutine, which runs them
// in order without the client's lock.
func (c *Client) queueEvent(f func()) {
	c.evMu.Lock()
	c.evQueue = append(c.evQueue, f)
	c.evMu.Unlock()
	select {
	case c.evWake <- struct{}{}:
	default:
	}
}

func (c *Client) deliverEvents() {
	for {
		_, ok := <-c.evWake
		for {
			c.evMu.Lock()
			q := c.evQueue
			c.evQueue = nil
			c.evMu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, f := range q {
				f()
			}
		}
		if !ok {
			return
		}
	}
}
