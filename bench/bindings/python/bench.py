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
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, List, Optional, Tuple

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


# ---- pairs ----

def pairs_dlock(sock: str, n: int) -> Tuple[float, List[float]]:
    with dlock.Client(sock) as client:
        base = unique("pairs")
        client.acquire(base + ":warm").release()
        samples = []
        start = time.perf_counter_ns()
        for i in range(n):
            t0 = time.perf_counter_ns()
            client.acquire(f"{base}:{i}").release()
            samples.append(time.perf_counter_ns() - t0)
        total = (time.perf_counter_ns() - start) / 1e9
    return n / total, samples


def pairs_native(rsock: str, n: int, sleep: Optional[float]) -> Tuple[float, List[float]]:
    r = redis.Redis(unix_socket_path=rsock)
    kw = {} if sleep is None else {"sleep": sleep}
    base = unique("npairs")
    warm = r.lock(base + ":warm", timeout=30, **kw)  # type: ignore[arg-type]
    warm.acquire()
    warm.release()
    samples = []
    start = time.perf_counter_ns()
    for i in range(n):
        t0 = time.perf_counter_ns()
        lk = r.lock(f"{base}:{i}", timeout=30, **kw)  # type: ignore[arg-type]
        lk.acquire()
        lk.release()
        samples.append(time.perf_counter_ns() - t0)
    total = (time.perf_counter_ns() - start) / 1e9
    r.close()
    return n / total, samples


# ---- contended ----

def contended(worker: Callable[[threading.Event, List[float]], int], seconds: float) -> Tuple[float, List[float]]:
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
    return sum(counts) / elapsed, [w for ws in waits for w in ws]


def contended_dlock(sock: str, seconds: float) -> Tuple[float, List[float]]:
    name = unique("contended")
    with dlock.Client(sock) as client:
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


def contended_native(rsock: str, seconds: float, sleep: Optional[float]) -> Tuple[float, List[float]]:
    name = unique("ncontended")
    r = redis.Redis(unix_socket_path=rsock)
    kw = {} if sleep is None else {"sleep": sleep}

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

    try:
        return contended(worker, seconds)
    finally:
        r.close()


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
    for net, sock, rsock in nets:
        if not sock or not rsock:
            log(f"{net}: no sockets given, skipped")
            continue
        log(f"{net}: pairs")
        row(net, "pairs", "dlock", *pairs_dlock(sock, pairs))
        for impl, sleep in natives:
            row(net, "pairs", impl, *pairs_native(rsock, pairs, sleep))
        log(f"{net}: contended")
        row(net, "contended", "dlock", *contended_dlock(sock, seconds))
        for impl, sleep in natives:
            row(net, "contended", impl, *contended_native(rsock, seconds, sleep))
    ns = valid_cost(os.environ["DLOCK_SOCKET"], 1_000_000)
    print(f"VALID {LANG} {ns:.1f} {get_p50(os.environ['REDIS_SOCKET']):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
