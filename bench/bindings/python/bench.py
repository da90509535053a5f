"""Benchmark of the Python binding against redis-py's Lock.

Rows on stdout (everything else on stderr):

    ROW python NET CASE IMPL OPS_PER_S P50_US P99_US
    VALID python NS_PER_CALL GET_US

NET: loopback (DLOCK_SOCKET, REDIS_SOCKET) and delayed (DLOCK_SOCKET_DELAYED,
REDIS_SOCKET_DELAYED). CASE: pairs (one client, uncontended acquire+release of
a fresh name, BENCH_PAIRS times; percentiles of the pair) and contended (4
threads looping acquire of one name, waiting, then release, for BENCH_SECONDS;
percentiles of the acquire's wait). IMPL: dlock (this binding), native
(redis-py's Lock with its defaults, but timeout=30 s: its default, no expiry,
would leave a crashed holder's lock taken forever) and native-fastpoll (the
same with sleep=0.001 between tries instead of 0.1).

Timing on a busy machine drifts within a run, so for each net and case the
implementations take turns: ROUNDS rounds in the order a, b, c then c, b, a
(and again), each round BENCH_PAIRS/ROUNDS pairs or BENCH_SECONDS/ROUNDS
seconds. An implementation's row sums its own rounds: rate = its operations /
the time of its rounds, percentiles over all its samples. Clients stay open
across rounds (their set-up and the warm-up before the first round are not
timed).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import redis

import dlock

LANG = "python"
WORKERS = 4


def log(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


def pct(samples: List[float], q: float) -> float:
    if not samples:
        return 0.0
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def row(net: str, case: str, impl: str, ops: float, samples_ns: List[float]) -> None:
    p50 = pct(samples_ns, 0.50) / 1000.0
    p99 = pct(samples_ns, 0.99) / 1000.0
    print(f"ROW {LANG} {net} {case} {impl} {ops:.1f} {p50:.1f} {p99:.1f}", flush=True)
    log(f"  {net} {case} {impl}: {len(samples_ns)} samples, longest {max(samples_ns, default=0) / 1000:.1f} us")


def unique(tag: str) -> str:
    return f"bench:py:{os.getpid()}:{time.monotonic_ns()}:{tag}"


# ---- the implementations ----
#
# Each opens its connections in __init__ (not timed), warms up once in warm(),
# and measures one round in pairs(n) / contended(seconds), which return
# (operations, elapsed seconds, samples in ns); close() ends it.

class Impl:
    name = ""

    def warm(self) -> None:
        raise NotImplementedError

    def pairs(self, n: int) -> Tuple[int, float, List[float]]:
        raise NotImplementedError

    def contended(self, seconds: float) -> Tuple[int, float, List[float]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class DlockImpl(Impl):
    name = "dlock"

    def __init__(self, sock: str) -> None:
        self.client = dlock.Client(sock)
        self.base = unique("pairs")
        self.cname = unique("contended")
        self.next = 0

    def warm(self) -> None:
        self.client.acquire(self.base + ":warm").release()

    def pairs(self, n: int) -> Tuple[int, float, List[float]]:
        client, base, first = self.client, self.base, self.next
        self.next += n
        samples = []
        start = time.perf_counter_ns()
        for i in range(first, first + n):
            t0 = time.perf_counter_ns()
            client.acquire(f"{base}:{i}").release()
            samples.append(time.perf_counter_ns() - t0)
        return n, (time.perf_counter_ns() - start) / 1e9, samples

    def contended(self, seconds: float) -> Tuple[int, float, List[float]]:
        client, name = self.client, self.cname

        def worker(stop: threading.Event, waits: List[float]) -> int:
            n = 0
            while not stop.is_set():
                t0 = time.perf_counter_ns()
                # As dlock.lock() users do: one shared client, the thread owns the lease.
                with client.lock(name, wait=None):
                    waits.append(time.perf_counter_ns() - t0)
                    n += 1
            return n

        return contended(worker, seconds)

    def close(self) -> None:
        self.client.close()


class NativeImpl(Impl):
    def __init__(self, name: str, rsock: str, sleep: Optional[float]) -> None:
        self.name = name
        self.r = redis.Redis(unix_socket_path=rsock)
        self.kw = {} if sleep is None else {"sleep": sleep}
        self.base = unique("npairs:" + name)
        self.cname = unique("ncontended:" + name)
        self.next = 0

    def warm(self) -> None:
        warm = self.r.lock(self.base + ":warm", timeout=30, **self.kw)  # type: ignore[arg-type]
        warm.acquire()
        warm.release()

    def pairs(self, n: int) -> Tuple[int, float, List[float]]:
        r, kw, base, first = self.r, self.kw, self.base, self.next
        self.next += n
        samples = []
        start = time.perf_counter_ns()
        for i in range(first, first + n):
            t0 = time.perf_counter_ns()
            lk = r.lock(f"{base}:{i}", timeout=30, **kw)  # type: ignore[arg-type]
            lk.acquire()
            lk.release()
            samples.append(time.perf_counter_ns() - t0)
        return n, (time.perf_counter_ns() - start) / 1e9, samples

    def contended(self, seconds: float) -> Tuple[int, float, List[float]]:
        r, kw, name = self.r, self.kw, self.cname

        def worker(stop: threading.Event, waits: List[float]) -> int:
            n = 0
            while not stop.is_set():
                lk = r.lock(name, timeout=30, **kw)  # type: ignore[arg-type]
                t0 = time.perf_counter_ns()
                lk.acquire()
                waits.append(time.perf_counter_ns() - t0)
                lk.release()
                n += 1
            return n

        return contended(worker, seconds)

    def close(self) -> None:
        self.r.close()


def contended(worker: Callable[[threading.Event, List[float]], int], seconds: float) -> Tuple[int, float, List[float]]:
    """One round: WORKERS threads run worker until seconds have passed."""
    stop = threading.Event()
    waits: List[List[float]] = [[] for _ in range(WORKERS)]
    counts = [0] * WORKERS
    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            counts[i] = worker(stop, waits[i])
        except BaseException as exc:  # reported below
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WORKERS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(counts), elapsed, [w for ws in waits for w in ws]


# ---- alternating rounds ----

ROUNDS = 4


def alternate(net: str, case: str, impls: List[Impl],
              round_: Callable[[Impl, int], Tuple[int, float, List[float]]]) -> None:
    """Runs ROUNDS rounds, a, b, c then c, b, a, ...; one row per impl over its rounds."""
    ops: Dict[str, int] = {i.name: 0 for i in impls}
    secs: Dict[str, float] = {i.name: 0.0 for i in impls}
    samples: Dict[str, List[float]] = {i.name: [] for i in impls}
    for k in range(ROUNDS):
        for impl in (impls if k % 2 == 0 else impls[::-1]):
            n, t, s = round_(impl, k)
            log(f"    round {k + 1} {impl.name}: {n} in {t:.3f} s")
            ops[impl.name] += n
            secs[impl.name] += t
            samples[impl.name].extend(s)
    for impl in impls:
        rate = ops[impl.name] / secs[impl.name] if secs[impl.name] > 0 else 0.0
        row(net, case, impl.name, rate, samples[impl.name])


# ---- lease.valid and a GET ----

def valid_cost(sock: str, calls: int) -> float:
    with dlock.Client(sock) as client:
        lease = client.acquire(unique("valid"))
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                lease.valid
            best = min(best, (time.perf_counter_ns() - t0) / calls)
        assert lease.valid
        lease.release()
    return best


def get_p50(rsock: str, n: int = 5000) -> float:
    r = redis.Redis(unix_socket_path=rsock)
    r.set("bench:py:get", b"x")
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        r.get("bench:py:get")
        samples.append(time.perf_counter_ns() - t0)
    r.delete("bench:py:get")
    r.close()
    return pct(samples, 0.5) / 1000.0


def main() -> int:
    pairs = int(os.environ.get("BENCH_PAIRS", "2000"))
    seconds = float(os.environ.get("BENCH_SECONDS", "2"))
    nets = [
        ("loopback", os.environ["DLOCK_SOCKET"], os.environ["REDIS_SOCKET"]),
        ("delayed", os.environ.get("DLOCK_SOCKET_DELAYED", ""), os.environ.get("REDIS_SOCKET_DELAYED", "")),
    ]
    natives = [("native", None), ("native-fastpoll", 0.001)]
    # BENCH_PAIRS split over the rounds, the remainder to the first ones.
    per_round = [pairs // ROUNDS + (1 if k < pairs % ROUNDS else 0) for k in range(ROUNDS)]
    for net, sock, rsock in nets:
        if not sock or not rsock:
            log(f"{net}: no sockets given, skipped")
            continue
        impls: List[Impl] = [DlockImpl(sock)] + [NativeImpl(n, rsock, s) for n, s in natives]
        try:
            for impl in impls:
                impl.warm()
            log(f"{net}: pairs")
            alternate(net, "pairs", impls, lambda impl, k: impl.pairs(per_round[k]))
            log(f"{net}: contended")
            alternate(net, "contended", impls, lambda impl, k: impl.contended(seconds / ROUNDS))
        finally:
            for impl in impls:
                impl.close()
    ns = valid_cost(os.environ["DLOCK_SOCKET"], 1_000_000)
    print(f"VALID {LANG} {ns:.1f} {get_p50(os.environ['REDIS_SOCKET']):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
