"""Many threads on one client."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List

import dlock
from conftest import DEADLINE_S, Stack


def test_threads_distinct_names_one_client(stack: Stack) -> None:
    c = stack.client()

    def work(t: int) -> List[int]:
        fences = []
        for i in range(25):
            with c.acquire(f"thr-{t}-{i % 3}", wait=DEADLINE_S) as lease:
                assert lease.valid
                fences.append(lease.fence)
        return fences

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    fences = [f for r in results for f in r]
    assert len(fences) == 200 and len(set(fences)) == 200
    stack.wait_names("thr-*", [])


def test_threads_exclude_each_other_one_client(stack: Stack) -> None:
    """Threads of one client contend for one name as distinct owners: one at a time."""
    c = stack.client()
    inside = 0
    max_inside = 0
    counter_lock = threading.Lock()
    last_fence = [0]

    def work() -> None:
        nonlocal inside, max_inside
        me = threading.get_ident()
        for _ in range(15):
            with c.acquire("thr-mutex", wait=DEADLINE_S, reentrant=True, owner=me) as lease:
                with counter_lock:
                    inside += 1
                    max_inside = max(max_inside, inside)
                    assert lease.fence > last_fence[0]
                    last_fence[0] = lease.fence
                lease.check()
                with counter_lock:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not any(t.is_alive() for t in threads)
    assert max_inside == 1 and inside == 0


def test_waiting_thread_does_not_block_the_client(stack: Stack) -> None:
    """A thread waits for a name the client itself holds; another thread releases it (a lease
    handed between threads): the wait must not hold the client's mutex."""
    c = stack.client()
    lease = c.acquire("handover", reentrant=True, owner=1)
    got: List[dlock.Lease] = []
    t = threading.Thread(target=lambda: got.append(
        c.acquire("handover", wait=DEADLINE_S, reentrant=True, owner=2)))
    t.start()
    stack.wait_waiters("handover", 1)
    # Meanwhile the same client serves this thread.
    with c.acquire("handover-other") as other:
        assert other.valid
    c.ping()
    lease.release()
    t.join(DEADLINE_S)
    assert got and got[0] is not lease and got[0].valid and got[0].fence > lease.fence
    got[0].release()


def test_valid_from_other_threads(stack: Stack) -> None:
    c = stack.client()
    lease = c.acquire("valid-threads")
    seen: List[bool] = []

    def read() -> None:
        seen.append(all(lease.valid for _ in range(10000)))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert seen == [True] * 4
    lease.release()
    assert not lease.valid


def test_lock_helper_threads_wait_in_turn(default_socket: str, stack: Stack) -> None:
    """dlock.lock() on the shared default client: threads exclude each other, a thread nests."""
    inside = 0
    max_inside = 0
    counter_lock = threading.Lock()
    errors: List[BaseException] = []

    def work() -> None:
        nonlocal inside, max_inside
        try:
            for _ in range(10):
                with dlock.lock("helper", wait=DEADLINE_S) as outer:
                    with counter_lock:
                        inside += 1
                        max_inside = max(max_inside, inside)
                    with dlock.lock("helper", wait=0) as inner:  # the same thread: re-entered
                        assert inner is outer and outer.holds == 2
                    with counter_lock:
                        inside -= 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not errors and max_inside == 1
    stack.wait_names("helper", [])
    # Not re-entrant, asked explicitly: each acquire is an owner of its own,
    # so a second one through the same client finds the name busy.
    with dlock.lock("helper", reentrant=False):
        try:
            dlock.default_client().acquire("helper")
            raise AssertionError("expected BusyError")
        except dlock.BusyError:
            pass


def test_plain_acquires_of_threads_on_one_client_take_turns(stack: Stack) -> None:
    """Two threads' plain acquires of one name through one client: the second waits its turn."""
    c = stack.client()
    first = c.acquire("turns")
    got: List[Any] = []

    def second() -> None:
        try:
            got.append(c.acquire("turns", wait=DEADLINE_S))
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=second)
    t.start()
    stack.wait_waiters("turns", 1)
    assert not got, f"the second acquire did not wait: {got}"
    first.release()
    t.join(DEADLINE_S)
    assert len(got) == 1 and isinstance(got[0], dlock.Lease), got
    assert got[0].fence > first.fence
    got[0].release()
