"""Many threads on one client."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List

import pytest

import dlock
import dlock._client
import dlock._lib
from conftest import DEADLINE_S, Stack, wait_until


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


def test_page_readers_while_leases_are_released_and_the_client_closed(stack: Stack) -> None:
    """Threads read leases (valid, remaining, check, touch) while another releases them and
    then closes the client: libdlock frees the handles and unmaps the page meanwhile, so a
    reader that called it with a freed handle would crash the process or read garbage."""
    c = stack.client()
    leases = [c.acquire(f"readers-{i}") for i in range(20)]
    stop = threading.Event()
    errors: List[BaseException] = []

    def read() -> None:
        try:
            while not stop.is_set():
                for lease in leases:
                    valid = lease.valid
                    left = lease.remaining
                    lease.touch()
                    try:
                        lease.check()
                    except dlock.DlockError:
                        pass
                    assert left >= 0.0 and valid in (True, False)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches between any two bytecodes, as often as can be
    for t in threads:
        t.start()
    try:
        for lease in leases[:10]:
            lease.release()
        for lease in leases[10:15]:
            lease.release(sync=True)
        c.close()  # frees the other five and unmaps the page
    finally:
        stop.set()
        for t in threads:
            t.join(DEADLINE_S)
        sys.setswitchinterval(interval)
    assert not errors
    assert not any(lease.valid for lease in leases)
    assert all(lease.remaining == 0.0 for lease in leases)


class _WatchedLock:
    """A lock that tells when someone had to wait for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waited = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.lock.acquire(False):
            return True
        self.waited.set()
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("how", ["release", "release_sync", "close"])
def test_handle_not_freed_under_a_page_reader(stack: Stack, monkeypatch: pytest.MonkeyPatch,
                                              how: str) -> None:
    """A reader stopped between loading a lease's handle and libdlock's answer (a thread
    switch, a finalizer): release() and close() wait for it before libdlock frees the
    handle or unmaps the page."""
    c = stack.client()
    lease = c.acquire("page-reader")
    watched = _WatchedLock()
    c._core.page_lock = lease._page = watched  # type: ignore[assignment]
    entered, go = threading.Event(), threading.Event()
    freed: List[str] = []
    real_valid = dlock._client._lease_valid

    def paused_valid(h: int) -> int:
        entered.set()
        assert go.wait(DEADLINE_S)
        return 0 if freed else real_valid(h)  # never libdlock with a freed handle

    def recording(fn: Any) -> Any:
        def call(h: int) -> Any:
            freed.append(fn.__name__)
            return fn(h)
        return call

    monkeypatch.setattr(dlock._client, "_lease_valid", paused_valid)
    monkeypatch.setattr(dlock._lib, "lease_release", recording(dlock._lib.lease_release))
    monkeypatch.setattr(dlock._lib, "lease_release_sync", recording(dlock._lib.lease_release_sync))
    monkeypatch.setattr(dlock._lib, "client_close", recording(dlock._lib.client_close))
    seen: List[bool] = []
    reader = threading.Thread(target=lambda: seen.append(lease.valid))
    reader.start()
    assert entered.wait(DEADLINE_S)
    if how == "close":
        ender = threading.Thread(target=c.close)
    else:
        ender = threading.Thread(target=lambda: lease.release(sync=how == "release_sync"))
    ender.start()
    try:
        wait_until(lambda: watched.waited.is_set() or freed, f"{how} to wait for the reader")
        assert not freed, f"{how} freed the handle under a reader"
    finally:
        go.set()
        reader.join(DEADLINE_S)
        ender.join(DEADLINE_S)
    assert seen == [True]
    assert not lease.valid and lease.remaining == 0.0
    stack.wait_names("page-reader", [])


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
