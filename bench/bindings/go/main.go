// SPDX-License-Identifier: BSD-3-Clause

// The Go binding's benchmark: the dlock binding against redsync (v4, over
// go-redis v9), uncontended pairs and a contended name, on the agent's
// loopback Redis and on a Redis behind the delay proxy. In each net and case
// the implementations take turns in alternating rounds, and each one's row
// sums its own rounds. The ROW and VALID lines go to stdout
// (bench/README.md); everything else to stderr.
package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"dlock"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

var (
	pairs   = envInt("BENCH_PAIRS", 2000)
	seconds = envFloat("BENCH_SECONDS", 2)
	runID   = strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
)

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func envFloat(k string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(k), 64); err == nil && v > 0 {
		return v
	}
	return def
}

func must(v string) string {
	s := os.Getenv(v)
	if s == "" {
		fmt.Fprintf(os.Stderr, "%s is not set\n", v)
		os.Exit(2)
	}
	return s
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}

// pct is the p-th percentile of sorted durations, in microseconds.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(d)))) - 1
	if i < 0 {
		i = 0
	}
	return float64(d[i]) / 1e3
}

func row(net, kase, impl string, ops float64, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("ROW go %s %s %s %.1f %.1f %.1f\n", net, kase, impl, ops, pct(lat, 50), pct(lat, 99))
}

// A locker is one implementation under test: lock waits until granted.
type locker interface {
	lock(ctx context.Context, name string, worker int) (unlock func() error, err error)
	close()
}

type dlockLocker struct{ c *dlock.Client }

func (d dlockLocker) lock(ctx context.Context, name string, worker int) (func() error, error) {
	// Workers share the client, and take turns as clients would.
	l, err := d.c.Acquire(ctx, name, dlock.AcquireOptions{Wait: dlock.WaitForever})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (d dlockLocker) close() { d.c.Close() }

type redsyncLocker struct {
	rdb *redis.Client
	rs  *redsync.Redsync
	opt []redsync.Option
}

func (r redsyncLocker) lock(ctx context.Context, name string, _ int) (func() error, error) {
	m := r.rs.NewMutex(name, r.opt...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error { _, err := m.UnlockContext(ctx); return err }, nil
}

func (r redsyncLocker) close() { r.rdb.Close() }

func newRedis(sock string) *redis.Client {
	return redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
}

func newLocker(impl, agentSock, redisSock string, contended bool) locker {
	if impl == "dlock" {
		c, err := dlock.Open(dlock.Options{Socket: agentSock})
		if err != nil {
			fail("dlock.Open", err)
		}
		return dlockLocker{c}
	}
	rdb := newRedis(redisSock)
	r := redsyncLocker{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb))}
	if contended {
		// The default 32 tries (50-250 ms apart) give up under contention;
		// a waiting acquire must wait instead.
		r.opt = []redsync.Option{redsync.WithTries(math.MaxInt32)}
	}
	return r
}

// The implementations under test, and the rounds each case alternates them
// in: a, b then b, a then a, b then b, a, so that a machine whose speed drifts
// during the run weighs on all of them alike.
var impls = []string{"dlock", "native"}

const rounds = 4

// order is the implementations' order in round r.
func order(r int) []int {
	o := make([]int, len(impls))
	for i := range o {
		if r%2 == 0 {
			o[i] = i
		} else {
			o[i] = len(impls) - 1 - i
		}
	}
	return o
}

// share is round r's part of n: n/rounds, the remainder to the first rounds.
func share(n, r int) int {
	s := n / rounds
	if r < n%rounds {
		s++
	}
	return s
}

// tally is one implementation's sums over its rounds: the samples, the
// operations and the time its own rounds took.
type tally struct {
	lat  []time.Duration
	ops  int
	took time.Duration
}

// openAll opens one locker per implementation, kept open across the rounds
// (the set-up is not timed), and warms each up with a few untimed pairs.
func openAll(net, kase, agentSock, redisSock string, contended bool) []locker {
	ctx := context.Background()
	lks := make([]locker, len(impls))
	for i, impl := range impls {
		lks[i] = newLocker(impl, agentSock, redisSock, contended)
		base := "bench:go:" + kase + ":" + net + ":" + impl + ":" + runID + ":warm:"
		for j := 0; j < warmup; j++ {
			unlock, err := lks[i].lock(ctx, base+strconv.Itoa(j), 0)
			if err != nil {
				fail(impl+" lock", err)
			}
			if err := unlock(); err != nil {
				fail(impl+" unlock", err)
			}
		}
	}
	return lks
}

func closeAll(lks []locker) {
	for _, lk := range lks {
		lk.close()
	}
}

const warmup = 10

func benchPairs(net, agentSock, redisSock string) {
	lks := openAll(net, "pairs", agentSock, redisSock, false)
	defer closeAll(lks)
	ctx := context.Background()
	t := make([]tally, len(impls))
	for r := 0; r < rounds; r++ {
		n := share(pairs, r)
		for _, i := range order(r) {
			impl := impls[i]
			// A name of its own for each pair, as in the other languages'
			// parts: every grant comes from Redis, for either implementation.
			base := "bench:go:pairs:" + net + ":" + impl + ":" + runID + ":"
			start := time.Now()
			for k := 0; k < n; k++ {
				t0 := time.Now()
				unlock, err := lks[i].lock(ctx, base+strconv.Itoa(t[i].ops), 0)
				if err != nil {
					fail(impl+" lock", err)
				}
				if err := unlock(); err != nil {
					fail(impl+" unlock", err)
				}
				t[i].lat = append(t[i].lat, time.Since(t0))
				t[i].ops++
			}
			t[i].took += time.Since(start)
		}
	}
	for i, impl := range impls {
		row(net, "pairs", impl, float64(t[i].ops)/t[i].took.Seconds(), t[i].lat)
	}
}

// contendRound runs the 4 workers on one name for d, adding to t.
func contendRound(lk locker, impl, name string, d time.Duration, t *tally) {
	ctx := context.Background()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for w := 1; w <= 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(stop) {
				t0 := time.Now()
				unlock, err := lk.lock(ctx, name, w)
				if err != nil {
					fail(impl+" lock", err)
				}
				mine = append(mine, time.Since(t0))
				if err := unlock(); err != nil {
					fail(impl+" unlock", err)
				}
			}
			mu.Lock()
			t.lat = append(t.lat, mine...)
			t.ops += len(mine)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	t.took += time.Since(start)
}

func benchContended(net, agentSock, redisSock string) {
	lks := openAll(net, "contended", agentSock, redisSock, true)
	defer closeAll(lks)
	d := time.Duration(seconds * float64(time.Second) / rounds)
	t := make([]tally, len(impls))
	for r := 0; r < rounds; r++ {
		for _, i := range order(r) {
			name := "bench:go:contended:" + net + ":" + impls[i] + ":" + runID
			contendRound(lks[i], impls[i], name, d, &t[i])
		}
	}
	for i, impl := range impls {
		row(net, "contended", impl, float64(t[i].ops)/t[i].took.Seconds(), t[i].lat)
	}
}

// benchValid prints the cost of Lease.Valid and the p50 of a Redis GET.
func benchValid(agentSock, redisSock string) {
	c, err := dlock.Open(dlock.Options{Socket: agentSock})
	if err != nil {
		fail("dlock.Open", err)
	}
	defer c.Close()
	l, err := c.Acquire(context.Background(), "bench:go:valid:"+runID,
		dlock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		fail("acquire", err)
	}
	const n = 2000000
	ok := 0
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if l.Valid() {
			ok++
		}
	}
	ns := float64(time.Since(t0).Nanoseconds()) / n
	if ok != n {
		fail("valid", fmt.Errorf("%d of %d calls false", n-ok, n))
	}
	_ = l.Release()

	rdb := newRedis(redisSock)
	defer rdb.Close()
	ctx := context.Background()
	key := "bench:go:get:" + runID
	if err := rdb.Set(ctx, key, "x", time.Minute).Err(); err != nil {
		fail("redis SET", err)
	}
	lat := make([]time.Duration, 0, pairs)
	for i := 0; i < pairs; i++ {
		t := time.Now()
		if err := rdb.Get(ctx, key).Err(); err != nil {
			fail("redis GET", err)
		}
		lat = append(lat, time.Since(t))
	}
	rdb.Del(ctx, key)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("VALID go %.1f %.1f\n", ns, pct(lat, 50))
}

func main() {
	nets := []struct{ name, agent, redis string }{
		{"loopback", must("DLOCK_SOCKET"), must("REDIS_SOCKET")},
		{"delayed", must("DLOCK_SOCKET_DELAYED"), must("REDIS_SOCKET_DELAYED")},
	}
	for _, n := range nets {
		fmt.Fprintf(os.Stderr, "bench: %s pairs\n", n.name)
		benchPairs(n.name, n.agent, n.redis)
		fmt.Fprintf(os.Stderr, "bench: %s contended\n", n.name)
		benchContended(n.name, n.agent, n.redis)
	}
	benchValid(nets[0].agent, nets[0].redis)
}
