"""asyncio: aacquire, alock, concurrent tasks, cancellation."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

import dlock
from conftest import DEADLINE_S, Stack


async def _until(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    """Polls pred() in a worker thread (it may run dlockctl) until true, with the deadline."""
    end = asyncio.get_running_loop().time() + DEADLINE_S
    while not await asyncio.to_thread(pred):
        if asyncio.get_running_loop().time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_alock_default_client(default_socket: str, stack: Stack) -> None:
    async with dlock.alock("async-ctx", ttl=5, wait=5) as lease:
        assert lease.valid
        with pytest.raises(dlock.BusyError):
            await stack.client().aacquire("async-ctx")
    assert not lease.valid


@pytest.mark.asyncio
async def test_aacquire_waits_without_blocking_the_loop(stack: Stack) -> None:
    holder = stack.client().acquire("async-wait")
    c = stack.client()
    task = asyncio.create_task(c.aacquire("async-wait", wait=DEADLINE_S))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    tick_task = asyncio.create_task(ticker())
    await _until(lambda: stack.waiters("async-wait") == 1, "the waiter")
    assert not task.done()
    assert ticks > 0  # the loop ran other tasks during the wait
    holder.release()
    lease = await asyncio.wait_for(task, DEADLINE_S)
    tick_task.cancel()
    assert lease.valid and lease.fence > holder.fence
    lease.release()


@pytest.mark.asyncio
async def test_async_timeout_and_busy(stack: Stack) -> None:
    stack.client().acquire("async-to")
    c = stack.client()
    with pytest.raises(dlock.BusyError):
        await c.aacquire("async-to")
    with pytest.raises(dlock.LockTimeout):
        await c.aacquire("async-to", wait=0.2)
    with pytest.raises(dlock.InvalidNameError):
        await c.aacquire("")


@pytest.mark.asyncio
async def test_cancel_leaves_no_waiter(stack: Stack) -> None:
    holder_client = stack.client()
    holder = holder_client.acquire("cancel")
    c = stack.client()
    task = asyncio.create_task(c.aacquire("cancel", wait=None))
    await _until(lambda: stack.waiters("cancel") == 1, "the waiter")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: stack.waiters("cancel") == 0, "the agent to drop the waiter")
    # Once the holder is gone, nobody holds the name: the cancelled waiter did not get it.
    holder.release(sync=True)
    assert stack.leases("cancel") == []
    other = stack.client().acquire("cancel")
    assert other.valid
    other.release()


@pytest.mark.asyncio
async def test_cancel_crossing_a_grant_releases_it(stack: Stack) -> None:
    """Cancel right as the holder releases: whichever wins, nothing stays held or waiting."""
    holder_client = stack.client()
    c = stack.client()
    for i in range(10):
        name = f"cross-{i}"
        holder = holder_client.acquire(name)
        task = asyncio.create_task(c.aacquire(name, wait=None))
        await _until(lambda: stack.waiters(name) == 1, "the waiter")
        holder.release()
        for _ in range(i):  # vary where the cancel lands
            await asyncio.sleep(0)
        task.cancel()
        try:
            lease = await task
        except asyncio.CancelledError:
            pass
        else:  # granted before the cancel reached it: an ordinary lease
            lease.release()
        await _until(lambda: stack.leases(name) == [], f"{name} free in the agent")
        stack.client().acquire(name, wait=DEADLINE_S).release()


@pytest.mark.asyncio
async def test_wait_for_timeout_cancels(stack: Stack) -> None:
    stack.client().acquire("async-waitfor")
    c = stack.client()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(c.aacquire("async-waitfor", wait=None), 0.2)
    await _until(lambda: stack.waiters("async-waitfor") == 0, "the agent to drop the waiter")


@pytest.mark.asyncio
async def test_concurrent_tasks_one_client(stack: Stack) -> None:
    c = stack.client()
    inside = 0
    max_inside = 0
    fences: List[int] = []

    async def worker(owner: int) -> None:
        nonlocal inside, max_inside
        for _ in range(10):
            lease = await c.aacquire("async-mutex", wait=DEADLINE_S, reentrant=True, owner=owner)
            async with lease:
                inside += 1
                max_inside = max(max_inside, inside)
                fences.append(lease.fence)
                await asyncio.sleep(0)
                lease.check()
                inside -= 1

    async def distinct(n: int) -> int:
        async with c.lock(f"async-d{n}") as lease:
            return lease.fence

    results = await asyncio.gather(*(worker(o) for o in range(1, 5)), *(distinct(n) for n in range(20)))
    assert max_inside == 1 and len(fences) == 40 and fences == sorted(fences)
    assert len(set(results[4:])) == 20
    await asyncio.to_thread(stack.wait_names, "async-*", [])


@pytest.mark.asyncio
async def test_async_set(stack: Stack) -> None:
    c = stack.client()
    async with await c.aacquire_many(["as-2", "as-1"], wait=DEADLINE_S) as leases:
        assert [lease.name for lease in leases] == ["as-2", "as-1"] and leases.valid
        with pytest.raises(dlock.BusyError):
            await stack.client().aacquire_many(["as-0", "as-1"])
        await asyncio.to_thread(stack.wait_names, "as-*", ["as-1", "as-2"])
    await asyncio.to_thread(stack.wait_names, "as-*", [])


@pytest.mark.asyncio
async def test_alock_tasks_wait_in_turn(default_socket: str, stack: Stack) -> None:
    inside = 0
    max_inside = 0

    async def work() -> None:
        nonlocal inside, max_inside
        for _ in range(5):
            async with dlock.alock("task-helper", wait=DEADLINE_S) as outer:
                inside += 1
                max_inside = max(max_inside, inside)
                async with dlock.alock("task-helper", wait=0) as inner:  # re-entered by this task
                    assert inner is outer
                await asyncio.sleep(0)
                inside -= 1

    await asyncio.gather(*(work() for _ in range(3)))
    assert max_inside == 1
    await asyncio.to_thread(stack.wait_names, "task-helper", [])
