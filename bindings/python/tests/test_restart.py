"""Agent restarts (docs/restarts.md): an agent with a state directory (its default) leaves its
leases to the next agent started on the same configuration, and libdlock takes the connection
back. While it does, the client's descriptor is a timerfd, then the new connection's socket:
the dispatcher thread must follow it, or nothing is dispatched again."""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from typing import List, Optional, Tuple

import pytest

import dlock
from conftest import DEADLINE_S, Stack, wait_until

Event = Tuple[dlock.Lease, dlock.State, "dlock.ErrorCode | int"]


def _recorder() -> Tuple["queue.Queue[Event]", dlock.EventCallback]:
    q: "queue.Queue[Event]" = queue.Queue()

    def on_event(lease: dlock.Lease, state: dlock.State, reason: "dlock.ErrorCode | int") -> None:
        q.put((lease, state, reason))

    return q, on_event


def _held_again(q: "queue.Queue[Event]") -> None:
    """Waits for the HELD that ends a restart's JEOPARDY: a JEOPARDY on the way (the next
    agent checking the key) is fine, a LOST is not."""
    while True:
        _, state, reason = q.get(timeout=DEADLINE_S)
        if state is dlock.State.HELD:
            assert reason == dlock.ErrorCode.OK
            return
        assert state is dlock.State.JEOPARDY, f"while the agent restarts: {state} ({reason!r})"


def _wait_watching(c: dlock.Client, kind: str) -> None:
    """Waits until the client's dispatcher thread waits on libdlock's descriptor as it is now,
    and that is a `kind` ("anon_inode:[timerfd]", "socket:"). (Its poll() also times out every
    second, which would hide a dispatcher left on an old descriptor but for the latency.)"""
    core = c._core

    def watching() -> bool:
        with core.mutex:
            now = core._fd_id()
            if now is None or core.watched != now:
                return False
            return os.readlink(f"/proc/self/fd/{now[0]}").startswith(kind)

    wait_until(watching, f"the dispatcher to wait on libdlock's {kind} descriptor")


class _ValidSampler:
    """Reads lease.valid every millisecond until stopped; counts the readings that were False."""

    def __init__(self, lease: dlock.Lease) -> None:
        self.lease = lease
        self.reads = 0
        self.invalid = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.reads += 1
            if not self.lease.valid:
                self.invalid += 1
            if self._stop.wait(0.001):
                return

    def stop(self) -> Tuple[int, int]:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        return self.invalid, self.reads


def test_lease_survives_agent_kill9(stack: Stack) -> None:
    """kill -9 of the agent, then a new agent on the same configuration: the lease stays valid
    throughout, its holder sees JEOPARDY (ERESTART) then HELD, with the same fence; its
    release then works, and frees the lock for another client."""
    q, on_event = _recorder()
    c = stack.client()
    lease = c.acquire("restart", ttl=30, on_event=on_event)
    fence = lease.fence
    sampler = _ValidSampler(lease)

    stack.kill_agent()
    got, state, reason = q.get(timeout=DEADLINE_S)
    assert got is lease and state is dlock.State.JEOPARDY
    assert reason == dlock.ErrorCode.ERESTART and isinstance(reason, dlock.ErrorCode)
    assert lease.valid and lease.state is dlock.State.JEOPARDY
    lease.check()
    _wait_watching(c, "anon_inode:[timerfd]")

    stack.start_agent()
    _held_again(q)
    _wait_watching(c, "socket:")
    invalid, reads = sampler.stop()
    assert invalid == 0, f"the lease read invalid {invalid} times in {reads} readings"
    assert lease.valid and lease.state is dlock.State.HELD and lease.fence == fence
    assert [(e["name"], e["fence"]) for e in stack.leases("restart")] == [("restart", fence)]
    c.ping()

    lease.release()
    other = stack.client()
    with other.acquire("restart", wait=DEADLINE_S) as next_lease:
        assert next_lease.valid and next_lease.fence > fence
    assert q.empty(), f"events after the release: {q.get_nowait()}"


def test_wait_across_agent_kill9(stack: Stack) -> None:
    """An acquire waiting forever while the agent is killed (kill -9) and replaced is sent
    again to the new agent, which grants it once the holder (whose lease it took over)
    releases."""
    q, on_event = _recorder()
    holder = stack.client()
    held = holder.acquire("restart-wait", ttl=30, on_event=on_event)
    waiter = stack.client()
    got: List[dlock.Lease] = []
    errors: List[BaseException] = []
    granted = threading.Event()

    def wait() -> None:
        try:
            got.append(waiter.acquire("restart-wait", wait=None))
        except BaseException as exc:  # reported to the test
            errors.append(exc)
        granted.set()

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    stack.wait_waiters("restart-wait", 1)

    stack.kill_agent()
    _, state, reason = q.get(timeout=DEADLINE_S)
    assert state is dlock.State.JEOPARDY and reason == dlock.ErrorCode.ERESTART
    stack.start_agent()
    _held_again(q)
    stack.wait_waiters("restart-wait", 1)  # the acquire, sent again, waits in the new agent
    assert not granted.is_set(), f"the waiting acquire ended while the lock was held: {errors}"
    assert held.valid

    held.release()
    assert granted.wait(DEADLINE_S), "the waiting acquire was not granted after the release"
    assert not errors, errors
    lease: Optional[dlock.Lease] = got[0]
    assert lease is not None and lease.valid and lease.fence > held.fence
    lease.release()
    t.join(DEADLINE_S)


@pytest.mark.asyncio
async def test_aacquire_waits_across_agent_kill9(stack: Stack) -> None:
    """The same for an asyncio acquire: its future is completed by the dispatcher thread once
    the new agent grants it."""
    q, on_event = _recorder()
    holder = stack.client()
    held = holder.acquire("restart-async", ttl=30, on_event=on_event)
    waiter = stack.client()
    task = asyncio.ensure_future(waiter.aacquire("restart-async", wait=None))
    await asyncio.to_thread(stack.wait_waiters, "restart-async", 1)
    stack.kill_agent()
    _, state, reason = await asyncio.to_thread(q.get, True, DEADLINE_S)
    assert state is dlock.State.JEOPARDY and reason == dlock.ErrorCode.ERESTART
    await asyncio.to_thread(stack.start_agent)
    await asyncio.to_thread(_held_again, q)
    await asyncio.to_thread(stack.wait_waiters, "restart-async", 1)
    assert not task.done()
    held.release()
    lease = await asyncio.wait_for(task, DEADLINE_S)
    assert lease.valid and lease.fence > held.fence
    lease.release()
