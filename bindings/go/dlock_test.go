// SPDX-License-Identifier: BSD-3-Clause

package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"dlock"
)

var forever = dlock.AcquireOptions{Wait: dlock.WaitForever}

func TestAcquireRelease(t *testing.T) {
	c := open(t)
	name := lockName(t, "a")
	l, err := c.Acquire(testCtx(t), name, dlock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Valid() || l.Name() != name || l.TTL() != 10*time.Second || l.State() != dlock.Held ||
		l.Kind() != dlock.Exclusive || l.Fence() == 0 || l.Err() != nil {
		t.Fatalf("lease: valid %v name %q ttl %v state %v kind %v fence %d err %v",
			l.Valid(), l.Name(), l.TTL(), l.State(), l.Kind(), l.Fence(), l.Err())
	}
	if r := l.Remaining(); r <= 0 || r > 10*time.Second {
		t.Fatalf("remaining %v", r)
	}
	ls := agentLeases(t, name)
	if len(ls) != 1 || ls[0].State != "held" || ls[0].Fence != l.Fence() {
		t.Fatalf("agent lists %+v", ls)
	}
	l.Touch()
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if l.Valid() || l.State() != dlock.Released || l.Remaining() != 0 {
		t.Fatalf("after release: valid %v state %v", l.Valid(), l.State())
	}
	// A second release is an error, not a crash.
	if err := l.Release(); !errors.Is(err, dlock.ErrNotFound) {
		t.Fatalf("second Release: %v", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotFound) {
		t.Fatalf("Err after release: %v", err)
	}
	// The same client takes it again at once (the release went first).
	l2, err := c.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatalf("re-acquire: %v", err)
	}
	if err := l2.ReleaseSync(); err != nil {
		t.Fatalf("ReleaseSync: %v", err)
	}
	if ls := agentLeases(t, name); len(ls) != 0 {
		t.Fatalf("agent still lists %+v after ReleaseSync", ls)
	}
	if err := c.Ping(); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func TestTryOnceBusy(t *testing.T) {
	a, b := open(t), open(t)
	name := lockName(t, "x")
	l, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	var de *dlock.Error
	if !errors.Is(err, dlock.ErrBusy) || !errors.As(err, &de) || de.Code != -7 || de.Msg == "" {
		t.Fatalf("try-once on a taken lock: %v", err)
	}
	// The same client again, not re-entrant: another owner, busy as for
	// any other client; one that waits gets it once the first is released.
	if _, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrBusy) {
		t.Fatalf("try-once through the holder's client: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := a.Acquire(testCtx(t), name, forever)
		if err == nil {
			err = l2.Release()
		}
		got <- err
	}()
	waitWaiters(t, name, 1)
	select {
	case err := <-got:
		t.Fatalf("a second acquire through the holder's client did not wait: %v", err)
	default:
	}
	l.Release()
	if err := <-got; err != nil {
		t.Fatalf("the waiting acquire through the same client: %v", err)
	}
	// Caller-chosen owners are below 1<<63.
	if _, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{Reentrant: true, Owner: 1 << 63}); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("an owner with the top bit: %v", err)
	}
}

func TestWaitGrantedAfterRelease(t *testing.T) {
	a, b := open(t), open(t)
	name := lockName(t, "x")
	la, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(testCtx(t), b, name, forever)
	waitWaiters(t, name, 1)
	select {
	case r := <-ch:
		t.Fatalf("granted while held: %+v", r)
	default:
	}
	if err := la.Release(); err != nil {
		t.Fatal(err)
	}
	r := recv(t, ch)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if !r.l.Valid() || r.l.Fence() <= la.Fence() {
		t.Fatalf("waiter's lease: valid %v fence %d after %d", r.l.Valid(), r.l.Fence(), la.Fence())
	}
	r.l.Release()
}

func TestTimeout(t *testing.T) {
	a, b := open(t), open(t)
	name := lockName(t, "x")
	l, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	_, err = b.Acquire(testCtx(t), name, dlock.AcquireOptions{Wait: 200 * time.Millisecond})
	if !errors.Is(err, dlock.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a held lock: %v", err)
	}
	var de *dlock.Error
	if !errors.As(err, &de) || !de.Timeout() {
		t.Fatalf("not a timeout *Error: %v", err)
	}
	// A context deadline sooner than Wait caps the wait.
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err = b.Acquire(ctx, name, forever)
	if !errors.Is(err, dlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait capped by the context: %v", err)
	}
	waitWaiters(t, name, 0)
	if !l.Valid() {
		t.Fatal("holder lost its lease")
	}
}

func TestFencingOrder(t *testing.T) {
	a, b := open(t), open(t)
	name := lockName(t, "x")
	var last uint64
	for i := 0; i < 6; i++ {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Acquire(testCtx(t), name, forever)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("grant %d: fence %d not above %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.ReleaseSync(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCrashRelease(t *testing.T) {
	name := lockName(t, "x")
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "DLOCKGO_CHILD_LOCK="+name, "DLOCK_SOCKET="+env.agentSock)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer stop(child)
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 || f[0] != "held" {
		t.Fatalf("child: %q %v", line, err)
	}
	childFence, _ := strconv.ParseUint(f[1], 10, 64)

	c := open(t)
	if _, err := c.Acquire(testCtx(t), name, dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrBusy) {
		t.Fatalf("while the child holds: %v", err)
	}
	ch := acquireAsync(testCtx(t), c, name, forever)
	waitWaiters(t, name, 1)
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	r := recv(t, ch)
	if r.err != nil {
		t.Fatalf("waiter after the holder died: %v", r.err)
	}
	if !r.l.Valid() || r.l.Fence() <= childFence {
		t.Fatalf("lease valid %v fence %d, child's %d", r.l.Valid(), r.l.Fence(), childFence)
	}
	r.l.Release()
}

func TestLostAfterKeyDeleted(t *testing.T) {
	c := open(t)
	name := lockName(t, "x")
	events := make(chan dlock.Event, 8)
	l, err := c.Acquire(testCtx(t), name, dlock.AcquireOptions{TTL: time.Second,
		OnEvent: func(e dlock.Event) { events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := redisDo(env.redisSock, "DEL", "dlock:"+name); err != nil || r != ":1" {
		t.Fatalf("DEL dlock:%s: %q %v", name, r, err)
	}
	select {
	case <-l.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("no LOST within 30 s")
	}
	var e dlock.Event
	select {
	case e = <-events:
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
	}
	if e.Lease != l || e.State != dlock.Lost || !errors.Is(e.Err, dlock.ErrLost) {
		t.Fatalf("event %+v", e)
	}
	if l.Valid() || l.State() != dlock.Lost || !errors.Is(l.Err(), dlock.ErrLost) {
		t.Fatalf("after LOST: valid %v state %v err %v", l.Valid(), l.State(), l.Err())
	}
	if err := l.Release(); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Release of a lost lease: %v", err)
	}
}

func TestCancelLeavesNoWaiter(t *testing.T) {
	a, b := open(t), open(t)
	name := lockName(t, "x")
	l, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := waiters(t, name); n != 0 {
		t.Fatalf("waiters before: %d", n)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	ch := acquireAsync(ctx, b, name, forever)
	waitWaiters(t, name, 1)
	cancel()
	r := recv(t, ch)
	if !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("cancelled acquire: %+v", r)
	}
	// The agent answered the cancel: no waiter is left behind.
	if n := waiters(t, name); n != 0 {
		t.Fatalf("waiters after the cancel: %d", n)
	}
	if err := l.ReleaseSync(); err != nil {
		t.Fatal(err)
	}
	// The release went to nobody: the lock is free for a try-once.
	l2, err := b.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatalf("after the cancel: %v", err)
	}
	l2.Release()

	// A context already done sends nothing.
	if _, err := b.Acquire(ctx, name, forever); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a done context: %v", err)
	}
}

// Many goroutines on one client: distinct names at once, and one name
// contended by owners (re-entrant acquires with an owner each).
func TestGoroutinesOneClient(t *testing.T) {
	c := open(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				l, err := c.Acquire(testCtx(t), lockName(t, "d"+strconv.Itoa(g)), forever)
				if err != nil {
					errs <- err
					return
				}
				if !l.Valid() {
					errs <- errors.New("granted lease not valid")
				}
				if err := l.Release(); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	name := lockName(t, "shared")
	var inside atomic.Int32
	var fences sync.Map
	for g := 1; g <= 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				l, err := c.Acquire(testCtx(t), name, dlock.AcquireOptions{Wait: dlock.WaitForever})
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- errors.New("two owners inside at once")
				}
				if _, dup := fences.LoadOrStore(l.Fence(), g); dup {
					errs <- errors.New("a fence granted twice")
				}
				inside.Add(-1)
				if err := l.Release(); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestBadInputAndAgentDown(t *testing.T) {
	c := open(t)
	_, err := c.Acquire(testCtx(t), strings.Repeat("n", 201), dlock.AcquireOptions{})
	if !errors.Is(err, dlock.ErrNameTooLong) {
		t.Fatalf("201-byte name: %v", err)
	}
	if _, err := c.Acquire(testCtx(t), "", dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrBadName) {
		t.Fatalf("empty name: %v", err)
	}
	if _, err := c.Acquire(testCtx(t), "a b", dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrBadName) {
		t.Fatalf("name with a space: %v", err)
	}
	if _, err := c.Acquire(testCtx(t), "a\x00b", dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrBadName) {
		t.Fatalf("name with a NUL: %v", err)
	}
	_, err = c.Acquire(testCtx(t), lockName(t, "x"), dlock.AcquireOptions{Kind: dlock.Semaphore})
	if !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("semaphore without permits: %v", err)
	}
	// The client still works after refusals.
	l, err := c.Acquire(testCtx(t), lockName(t, "x"), dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()

	_, err = dlock.Open(dlock.Options{Socket: env.dir + "/nobody.sock"})
	var de *dlock.Error
	if !errors.Is(err, dlock.ErrConnect) || !errors.Is(err, dlock.ErrUnavailable) ||
		!errors.As(err, &de) || de.Code != -3 {
		t.Fatalf("Open with no agent: %v", err)
	}
}

func TestClose(t *testing.T) {
	a := open(t)
	b, err := dlock.Open(dlock.Options{Socket: env.agentSock})
	if err != nil {
		t.Fatal(err)
	}
	name := lockName(t, "x")
	l, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held, err := b.Acquire(testCtx(t), lockName(t, "y"), dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(testCtx(t), b, name, forever)
	waitWaiters(t, name, 1)
	b.Close()
	if r := recv(t, ch); !errors.Is(r.err, dlock.ErrClosed) {
		t.Fatalf("acquire pending at Close: %+v", r)
	}
	if held.Valid() || held.Release() != dlock.ErrClosed {
		t.Fatal("lease of a closed client")
	}
	if _, err := b.Acquire(testCtx(t), name, dlock.AcquireOptions{}); err != dlock.ErrClosed {
		t.Fatalf("acquire after Close: %v", err)
	}
	b.Close()
	waitWaiters(t, name, 0)
	// The agent released what b held.
	l2, err := a.Acquire(testCtx(t), lockName(t, "y"), dlock.AcquireOptions{})
	if err != nil {
		t.Fatalf("lock of the closed client: %v", err)
	}
	l2.Release()
	l.Release()
}

// TestOpenCloseKeepsNoDescriptor: Close closes both the client's socket and
// the duplicate the dispatcher watches.
func TestOpenCloseKeepsNoDescriptor(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd:", err)
		}
		return len(ents)
	}
	before := fds()
	for i := 0; i < 20; i++ {
		c, err := dlock.Open(dlock.Options{Socket: env.agentSock})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && fds() <= before {
			t.Fatal("an open client holds no descriptor")
		}
		if err := c.Ping(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if after := fds(); after != before {
		t.Fatalf("descriptors: %d before 20 clients opened and closed, %d after", before, after)
	}
}

// TestAgentGone: when an agent without a state directory dies, the
// dispatcher sees the connection end: a held lease is lost (its event, with
// ErrDisconnected, its channel, its error) and an acquire waiting in the
// agent fails with ErrDisconnected. (An agent with one leaves its leases to
// its successor: restart_test.go.)
func TestAgentGone(t *testing.T) {
	dir, err := os.MkdirTemp(env.dir, "gone-") // the agent's status socket goes there too
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "dlock.sock")
	agent, err := startAgentWith(sock, noStateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(agent)
	a, err := dlock.Open(dlock.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(dlock.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The dead agent's key outlives the test until its TTL: a name per run.
	name := lockName(t, "x"+strconv.FormatInt(time.Now().UnixNano(), 36))
	events := make(chan dlock.Event, 4)
	l, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{
		OnEvent: func(ev dlock.Event) { events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(testCtx(t), b, name, forever)
	if err := poll(20*time.Second, func() bool {
		ls := agentLeasesOn(t, sock, name)
		return len(ls) == 1 && ls[0].Waiters == 1
	}); err != nil {
		t.Fatalf("b's acquire never waited in the agent: %v", err)
	}

	stop(agent) // SIGKILL
	if r := recv(t, ch); !errors.Is(r.err, dlock.ErrDisconnected) {
		t.Fatalf("acquire waiting when the agent died: %+v", r)
	}
	select {
	case ev := <-events:
		if ev.Lease != l || ev.State != dlock.Lost || !errors.Is(ev.Err, dlock.ErrDisconnected) {
			t.Fatalf("event of a lease whose agent died: %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no LOST event within 30 s of the agent's death")
	}
	<-l.Lost()
	if l.Valid() || !errors.Is(l.Err(), dlock.ErrLost) {
		t.Fatalf("lease whose agent died: valid %v, err %v", l.Valid(), l.Err())
	}
	if _, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrDisconnected) {
		t.Fatalf("acquire after the agent died: %v", err)
	}
}

func TestShared(t *testing.T) {
	r1, r2, w := open(t), open(t), open(t)
	name := lockName(t, "rw")
	shared := dlock.AcquireOptions{Kind: dlock.Shared}
	l1, err := r1.Acquire(testCtx(t), name, shared)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := r2.Acquire(testCtx(t), name, shared)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if l1.Kind() != dlock.Shared || !l1.Valid() || !l2.Valid() {
		t.Fatal("readers not both valid")
	}
	if _, err := w.Acquire(testCtx(t), name, dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrBusy) {
		t.Fatalf("writer try-once among readers: %v", err)
	}
	ch := acquireAsync(testCtx(t), w, name, forever)
	waitWaiters(t, name, 1)
	l1.Release()
	select {
	case r := <-ch:
		t.Fatalf("writer granted with a reader inside: %+v", r)
	default:
	}
	l2.Release()
	r := recv(t, ch)
	if r.err != nil || r.l.Kind() != dlock.Exclusive {
		t.Fatalf("writer: %+v", r)
	}
	r.l.Release()
}

func TestSemaphore(t *testing.T) {
	a, b, c := open(t), open(t), open(t)
	name := lockName(t, "sem")
	sem := dlock.AcquireOptions{Kind: dlock.Semaphore, Permits: 2}
	la, err := a.Acquire(testCtx(t), name, sem)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(testCtx(t), name, sem)
	if err != nil {
		t.Fatalf("second permit: %v", err)
	}
	if _, err := c.Acquire(testCtx(t), name, sem); !errors.Is(err, dlock.ErrBusy) {
		t.Fatalf("third of two permits: %v", err)
	}
	other := dlock.AcquireOptions{Kind: dlock.Semaphore, Permits: 3}
	if _, err := c.Acquire(testCtx(t), name, other); !errors.Is(err, dlock.ErrKind) {
		t.Fatalf("other permit count: %v", err)
	}
	if _, err := c.Acquire(testCtx(t), name, dlock.AcquireOptions{Kind: dlock.Shared}); !errors.Is(err, dlock.ErrKind) {
		t.Fatalf("shared against a semaphore: %v", err)
	}
	sem.Wait = dlock.WaitForever
	ch := acquireAsync(testCtx(t), c, name, sem)
	waitWaiters(t, name, 1)
	lb.Release()
	r := recv(t, ch)
	if r.err != nil || !r.l.Valid() || !la.Valid() {
		t.Fatalf("third after a release: %+v", r)
	}
	r.l.Release()
	la.Release()
}

func TestReentrant(t *testing.T) {
	a, b := open(t), open(t)
	name := lockName(t, "re")
	re := dlock.AcquireOptions{Reentrant: true}
	l1, err := a.Acquire(testCtx(t), name, re)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Acquire(testCtx(t), name, re)
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if l1 != l2 || l1.Holds() != 2 {
		t.Fatalf("re-entry gave %p (%d holds), first %p", l2, l2.Holds(), l1)
	}
	// Another owner of the same client waits like anyone.
	if _, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{Reentrant: true, Owner: 7}); !errors.Is(err, dlock.ErrBusy) {
		t.Fatalf("other owner: %v", err)
	}
	if _, err := b.Acquire(testCtx(t), name, re); !errors.Is(err, dlock.ErrBusy) {
		t.Fatalf("other client: %v", err)
	}
	if err := l1.Release(); err != nil || !l1.Valid() || l1.Holds() != 1 {
		t.Fatalf("first release: %v valid %v holds %d", err, l1.Valid(), l1.Holds())
	}
	if err := l1.ReleaseSync(); err != nil || l1.Valid() || l1.Holds() != 0 {
		t.Fatalf("last release: %v valid %v", err, l1.Valid())
	}
	l3, err := b.Acquire(testCtx(t), name, dlock.AcquireOptions{})
	if err != nil {
		t.Fatalf("after the last release: %v", err)
	}
	l3.Release()
}

func TestAcquireSet(t *testing.T) {
	a, b := open(t), open(t)
	n := func(s string) string { return lockName(t, s) }
	s, err := a.AcquireSet(testCtx(t), []string{n("c"), n("a"), n("b")}, dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 || !s.Valid() || s.Leases()[0].Name() != n("c") {
		t.Fatalf("set: %d valid %v", s.Len(), s.Valid())
	}
	if err := s.Leases()[1].Release(); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("member released alone: %v", err)
	}
	// All or nothing: d is free but c is not, so b holds neither after.
	_, err = b.AcquireSet(testCtx(t), []string{n("d"), n("c")}, dlock.AcquireOptions{Wait: 100 * time.Millisecond})
	if !errors.Is(err, dlock.ErrTimeout) {
		t.Fatalf("overlapping set: %v", err)
	}
	if ls := agentLeases(t, n("d")); len(ls) != 0 {
		t.Fatalf("d still held after a failed set: %+v", ls)
	}
	if _, err := b.AcquireSet(testCtx(t), []string{n("d"), n("d")}, dlock.AcquireOptions{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("a name twice: %v", err)
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	s2, err := b.AcquireSet(testCtx(t), []string{n("d"), n("c")}, forever)
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	s2.Release()
}

// Valid from many goroutines while the lease is released must never touch
// a freed handle (run with -race).
func TestValidRacesRelease(t *testing.T) {
	c := open(t)
	for i := 0; i < 20; i++ {
		l, err := c.Acquire(testCtx(t), lockName(t, "x"), forever)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						l.Valid()
						l.Remaining()
					}
				}
			}()
		}
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		if l.Valid() {
			t.Fatal("valid after release")
		}
	}
}
