// SPDX-License-Identifier: BSD-3-Clause

package dlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dlock"
)

// The tests share one redis-server and one dlockd, started by TestMain in a
// fresh temp dir (e.g. /tmp/dlock-go-123456/) and killed at the end; each
// test uses lock names of its own.
var env struct {
	dir, redisSock, agentSock, dlockd, dlockctl string
}

func TestMain(m *testing.M) {
	if name := os.Getenv("DLOCKGO_CHILD_LOCK"); name != "" {
		childHold(name)
		return
	}
	os.Exit(runMain(m))
}

// childHold is the child process of TestCrashRelease: it takes the lock,
// says so on stdout and waits to be killed.
func childHold(name string) {
	c, err := dlock.Open(dlock.Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	l, err := c.Acquire(context.Background(), name, dlock.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("held", l.Fence())
	select {}
}

func binary(envVar, rel string) string {
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	b := os.Getenv("DLOCK_BUILD_DIR")
	if b == "" {
		fmt.Fprintf(os.Stderr, "set DLOCK_BUILD_DIR (or %s)\n", envVar)
		os.Exit(2)
	}
	return filepath.Join(b, rel)
}

func runMain(m *testing.M) int {
	env.dlockd = binary("DLOCKD", "agent/dlockd")
	env.dlockctl = binary("DLOCKCTL", "tools/dlockctl")
	dir, err := os.MkdirTemp("", "dlock-go-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	env.dir = dir
	env.redisSock = filepath.Join(dir, "redis.sock")
	env.agentSock = filepath.Join(dir, "dlock.sock")

	redis := exec.Command("redis-server", "--port", "0", "--unixsocket", env.redisSock,
		"--save", "", "--appendonly", "no", "--dir", dir)
	redis.Stdout, redis.Stderr = nil, os.Stderr
	if err := redis.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "redis-server:", err)
		return 2
	}
	defer stop(redis)
	if err := poll(20*time.Second, func() bool { return redisPing(env.redisSock) }); err != nil {
		fmt.Fprintln(os.Stderr, "redis-server did not answer PING:", err)
		return 2
	}

	agent, err := startAgent(env.agentSock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer stop(agent)
	os.Setenv("DLOCK_SOCKET", env.agentSock)
	return m.Run()
}

// startAgent starts a dlockd on sock over the tests' Redis (its status
// socket goes beside sock: one agent per directory) and waits until it is
// ready.
func startAgent(sock string) (*exec.Cmd, error) { return startAgentWith(sock, "") }

// noStateDir is the configuration of an agent that keeps no state directory:
// its leases end with its process, and so does its clients' connection.
const noStateDir = "[agent]\nstate_dir =\n"

// startAgentWith is startAgent with conf (INI text; "" for none) as the
// agent's configuration file, written beside sock. Started again on the
// same sock (after a kill -9, say), an agent takes over the leases its
// predecessor left in its state directory (SOCK.state by default).
func startAgentWith(sock, conf string) (*exec.Cmd, error) {
	args := []string{"-s", sock, "-r", "unix:" + env.redisSock}
	if conf != "" {
		path := sock + ".conf"
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "-c", path)
	}
	agent := exec.Command(env.dlockd, args...)
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		return nil, fmt.Errorf("dlockd: %w", err)
	}
	if err := poll(20*time.Second, func() bool { return agentReady(sock) }); err != nil {
		stop(agent)
		return nil, fmt.Errorf("dlockd not ready (accepting, its Redis links up): %w", err)
	}
	return agent, nil
}

// agentReady: the agent on sock accepts clients and its Redis links are up
// (its status lists every node connected and subscribed).
func agentReady(sock string) bool {
	c, err := dlock.Open(dlock.Options{Socket: sock})
	if err != nil {
		return false
	}
	c.Close()
	out, err := exec.Command(env.dlockctl, "-s", sock, "status", "--json").Output()
	if err != nil {
		return false
	}
	var st struct {
		Nodes []struct {
			Connected  bool `json:"connected"`
			Subscribed bool `json:"subscribed"`
		} `json:"nodes"`
	}
	if json.Unmarshal(out, &st) != nil || len(st.Nodes) == 0 {
		return false
	}
	for _, n := range st.Nodes {
		if !n.Connected || !n.Subscribed {
			return false
		}
	}
	return true
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_, _ = cmd.Process.Wait()
}

// poll calls ok until it is true or the deadline passes.
func poll(deadline time.Duration, ok func() bool) error {
	end := time.Now().Add(deadline)
	for !ok() {
		if time.Now().After(end) {
			return fmt.Errorf("not within %v", deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// redisDo sends one command in RESP and returns the first line of the reply.
func redisDo(sock string, args ...string) (string, error) {
	conn, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func redisPing(sock string) bool {
	r, err := redisDo(sock, "PING")
	return err == nil && r == "+PONG"
}

type leaseInfo struct {
	Name    string `json:"name"`
	State   string `json:"state"`
	Fence   uint64 `json:"fence"`
	Waiters int    `json:"waiters"`
	Kind    string `json:"kind"`
	Holds   int    `json:"holds"`
}

// agentLeases is `dlockctl leases --json NAME`: the agent's leases of name.
func agentLeases(t *testing.T, name string) []leaseInfo {
	t.Helper()
	return agentLeasesOn(t, env.agentSock, name)
}

// agentLeasesOn is agentLeases of the agent on sock.
func agentLeasesOn(t *testing.T, sock, name string) []leaseInfo {
	t.Helper()
	out, err := exec.Command(env.dlockctl, "-s", sock, "leases", "--json", name).Output()
	if err != nil {
		t.Fatalf("dlockctl leases: %v", err)
	}
	var v struct {
		Leases []leaseInfo `json:"leases"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("dlockctl leases: %v in %q", err, out)
	}
	return v.Leases
}

// waiters is the agent's waiter count on name (0 when it lists no lease).
func waiters(t *testing.T, name string) int {
	n := 0
	for _, l := range agentLeases(t, name) {
		if l.Name == name && l.Waiters > n {
			n = l.Waiters
		}
	}
	return n
}

func waitWaiters(t *testing.T, name string, n int) {
	t.Helper()
	if err := poll(20*time.Second, func() bool { return waiters(t, name) == n }); err != nil {
		t.Fatalf("waiters of %s: want %d, have %d (%v)", name, n, waiters(t, name), err)
	}
}

func open(t *testing.T) *dlock.Client {
	t.Helper()
	return openOn(t, env.agentSock)
}

// openOn opens a client of the agent on sock, closed at the test's end.
func openOn(t *testing.T, sock string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(dlock.Options{Socket: sock})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lockName is a name of the test's own.
func lockName(t *testing.T, suffix string) string {
	return "go:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + suffix
}

// testCtx bounds a test's waits.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type result struct {
	l   *dlock.Lease
	err error
}

// acquireAsync runs Acquire on a goroutine; the result comes on the channel.
func acquireAsync(ctx context.Context, c *dlock.Client, name string, o dlock.AcquireOptions) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, name, o)
		ch <- result{l, err}
	}()
	return ch
}

func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30 s")
	}
	return result{}
}
