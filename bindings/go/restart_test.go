// SPDX-License-Identifier: BSD-3-Clause

package dlock_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"dlock"
)

// Agent restarts (docs/restarts.md): an agent with a state directory (its
// default) leaves its leases to the next agent started on the same
// configuration, and libdlock takes the connection back. While it does, the
// client's descriptor is a timerfd, then the new connection's socket: the
// dispatcher must follow it, or nothing is dispatched again.

// restartAgent is an agent of the test's own, in a directory of its own,
// that the test kills and starts again.
type restartAgent struct {
	t    *testing.T
	sock string
	cmd  *exec.Cmd
}

func newRestartAgent(t *testing.T) *restartAgent {
	t.Helper()
	dir, err := os.MkdirTemp(env.dir, "restart-")
	if err != nil {
		t.Fatal(err)
	}
	a := &restartAgent{t: t, sock: filepath.Join(dir, "dlock.sock")}
	a.start()
	t.Cleanup(func() {
		if a.cmd != nil {
			stop(a.cmd)
		}
	})
	return a
}

// name is a lock name of the test's own, and of this run's: a key the agent
// left behind when the test ended (it is killed, not stopped) outlives it
// until its TTL, and a run again in the same go test process (-count) must
// not find it.
func (a *restartAgent) name(suffix string) string {
	return lockName(a.t, suffix+strconv.FormatInt(time.Now().UnixNano(), 36))
}

func (a *restartAgent) start() {
	a.t.Helper()
	cmd, err := startAgent(a.sock)
	if err != nil {
		a.t.Fatal(err)
	}
	a.cmd = cmd
}

// kill9 kills the agent with SIGKILL and reaps it.
func (a *restartAgent) kill9() {
	stop(a.cmd)
	a.cmd = nil
}

// nextEvent is the next event on ch, within 30 s.
func nextEvent(t *testing.T, ch <-chan dlock.Event) dlock.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
	}
	return dlock.Event{}
}

// heldAgain waits for the HELD that ends a restart's JEOPARDY; a JEOPARDY
// on the way (the successor checking the key) is fine, a LOST is not.
func heldAgain(t *testing.T, ch <-chan dlock.Event) {
	t.Helper()
	for {
		ev := nextEvent(t, ch)
		switch ev.State {
		case dlock.Held:
			if ev.Err != nil {
				t.Fatalf("HELD with an error: %v", ev.Err)
			}
			return
		case dlock.Jeopardy:
		default:
			t.Fatalf("while the agent restarts: %v (%v)", ev.State, ev.Err)
		}
	}
}

// validSampler reads l.Valid() every millisecond until stopped, and counts
// the readings that were false.
type validSampler struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	invalid int
	reads   int
}

func sampleValid(l *dlock.Lease) *validSampler {
	s := &validSampler{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			s.reads++
			if !l.Valid() {
				s.invalid++
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *validSampler) done() (invalid, reads int) {
	close(s.stop)
	s.wg.Wait()
	return s.invalid, s.reads
}

// TestLeaseSurvivesAgentKill9: kill -9 of the agent, then a new agent on the
// same configuration. The lease stays valid throughout, its holder sees
// JEOPARDY (ErrRestart) then HELD, with the same fence; its release then
// works, and frees the lock for another client.
func TestLeaseSurvivesAgentKill9(t *testing.T) {
	agent := newRestartAgent(t)
	a := openOn(t, agent.sock)
	name := agent.name("x")
	events := make(chan dlock.Event, 16)
	l, err := a.Acquire(testCtx(t), name, dlock.AcquireOptions{TTL: 30 * time.Second,
		OnEvent: func(ev dlock.Event) { events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	fence := l.Fence()
	sampler := sampleValid(l)

	agent.kill9()
	ev := nextEvent(t, events)
	if ev.Lease != l || ev.State != dlock.Jeopardy || !errors.Is(ev.Err, dlock.ErrRestart) {
		t.Fatalf("first event after the kill: %+v", ev)
	}
	var de *dlock.Error
	if !errors.As(ev.Err, &de) || de.Code != -31 || de.Name != name {
		t.Fatalf("the JEOPARDY's reason: %#v", ev.Err)
	}
	if !l.Valid() || l.State() != dlock.Jeopardy || l.Err() != nil {
		t.Fatalf("while no agent runs: valid %v state %v err %v", l.Valid(), l.State(), l.Err())
	}

	agent.start()
	heldAgain(t, events)
	invalid, reads := sampler.done()
	if invalid != 0 {
		t.Fatalf("the lease read invalid %d times in %d readings across the restart", invalid, reads)
	}
	if !l.Valid() || l.State() != dlock.Held || l.Fence() != fence {
		t.Fatalf("after the restart: valid %v state %v fence %d (was %d)", l.Valid(), l.State(),
			l.Fence(), fence)
	}
	if ls := agentLeasesOn(t, agent.sock, name); len(ls) != 1 || ls[0].Fence != fence {
		t.Fatalf("the new agent's leases of %s: %+v", name, ls)
	}
	if err := a.Ping(); err != nil {
		t.Fatalf("Ping after the restart: %v", err)
	}

	if err := l.Release(); err != nil {
		t.Fatalf("Release after the restart: %v", err)
	}
	b := openOn(t, agent.sock)
	lb, err := b.Acquire(testCtx(t), name, dlock.AcquireOptions{Wait: 20 * time.Second})
	if err != nil {
		t.Fatalf("another client's acquire after the release: %v", err)
	}
	if !lb.Valid() || lb.Fence() <= fence {
		t.Fatalf("the next holder: valid %v fence %d, the first's %d", lb.Valid(), lb.Fence(), fence)
	}
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		t.Fatalf("an event after the release: %+v", ev)
	default:
	}
}

// TestWaitAcrossAgentKill9: an acquire waiting forever while the agent is
// killed (kill -9) and replaced is sent again to the new agent, which
// grants it once the holder (whose lease it took over) releases.
func TestWaitAcrossAgentKill9(t *testing.T) {
	agent := newRestartAgent(t)
	holder, waiter := openOn(t, agent.sock), openOn(t, agent.sock)
	name := agent.name("x")
	events := make(chan dlock.Event, 16)
	lh, err := holder.Acquire(testCtx(t), name, dlock.AcquireOptions{TTL: 30 * time.Second,
		OnEvent: func(ev dlock.Event) { events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(testCtx(t), waiter, name, forever)
	waitAgentWaiters := func(what string) {
		t.Helper()
		if err := poll(20*time.Second, func() bool {
			ls := agentLeasesOn(t, agent.sock, name)
			return len(ls) == 1 && ls[0].Waiters == 1
		}); err != nil {
			t.Fatalf("%s: %v (leases %+v)", what, err, agentLeasesOn(t, agent.sock, name))
		}
	}
	waitAgentWaiters("the acquire never waited in the first agent")

	agent.kill9()
	if ev := nextEvent(t, events); ev.State != dlock.Jeopardy || !errors.Is(ev.Err, dlock.ErrRestart) {
		t.Fatalf("the holder's first event after the kill: %+v", ev)
	}
	agent.start()
	heldAgain(t, events)
	waitAgentWaiters("the acquire never waited in the new agent")
	select {
	case r := <-ch:
		t.Fatalf("the waiting acquire ended while the lock was held: %+v", r)
	default:
	}
	if !lh.Valid() {
		t.Fatal("the holder's lease is not valid after the restart")
	}

	if err := lh.Release(); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
	r := recv(t, ch)
	if r.err != nil {
		t.Fatalf("the acquire that waited across the restart: %v", r.err)
	}
	if !r.l.Valid() || r.l.Fence() <= lh.Fence() {
		t.Fatalf("granted lease: valid %v fence %d, the holder's %d", r.l.Valid(), r.l.Fence(), lh.Fence())
	}
	if err := r.l.Release(); err != nil {
		t.Fatal(err)
	}
}
