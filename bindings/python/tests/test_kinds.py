"""Every kind of lock: exclusive, shared, semaphore, re-entrant holds, sets of names."""

from __future__ import annotations

import threading
from typing import List

import pytest

import dlock
import dlock._lib
from conftest import DEADLINE_S, Stack


def test_shared_readers_together_writer_waits(stack: Stack) -> None:
    r1 = stack.client().acquire("rw", kind="shared")
    r2 = stack.client().acquire("rw", kind=dlock.Kind.SHARED)
    assert r1.valid and r2.valid and r1.kind is dlock.Kind.SHARED
    assert len(stack.leases("rw")) == 2
    writer_client = stack.client()
    with pytest.raises(dlock.BusyError):
        writer_client.acquire("rw", kind="exclusive")

    got: List[dlock.Lease] = []
    t = threading.Thread(target=lambda: got.append(writer_client.acquire("rw", wait=DEADLINE_S)))
    t.start()
    stack.wait_waiters("rw", 1)
    r1.release()
    # One reader left: the writer still waits.
    assert not got and t.is_alive()
    r2.release()
    t.join(DEADLINE_S)
    assert got and got[0].valid and got[0].kind is dlock.Kind.EXCLUSIVE
    # A reader now waits for the writer.
    with pytest.raises(dlock.BusyError):
        stack.client().acquire("rw", kind="shared")
    got[0].release()


def test_semaphore_permits(stack: Stack) -> None:
    a = stack.client().acquire("sem", kind="semaphore", permits=2)
    b = stack.client().acquire("sem", kind="semaphore", permits=2)
    assert a.kind is dlock.Kind.SEMAPHORE and a.valid and b.valid
    c = stack.client()
    with pytest.raises(dlock.BusyError):
        c.acquire("sem", kind="semaphore", permits=2)
    with pytest.raises(dlock.KindError) as err:
        c.acquire("sem", kind="semaphore", permits=3)
    assert err.value.code == dlock.ErrorCode.EKIND
    with pytest.raises(dlock.KindError):
        c.acquire("sem", kind="shared")
    entries = stack.leases("sem")
    assert len(entries) == 2 and all(e["kind"] == "semaphore" and e["permits"] == 2 for e in entries)
    b.release()
    third = c.acquire("sem", kind="semaphore", permits=2, wait=DEADLINE_S)
    assert third.valid
    a.release()
    third.release()


def test_reentrant_same_owner(stack: Stack) -> None:
    c = stack.client()
    first = c.acquire("re", reentrant=True)
    again = c.acquire("re", reentrant=True)
    assert again is first and first.holds == 2
    assert stack.leases("re")[0]["holds"] == 2
    # Another owner on the same client, and another client, wait like anyone.
    with pytest.raises(dlock.BusyError):
        c.acquire("re", reentrant=True, owner=7)
    with pytest.raises(dlock.BusyError):
        stack.client().acquire("re", reentrant=True)
    # Not re-entrant: an owner of its own, busy like any other; a caller's
    # owner is below 2**63, and only for re-entrant acquires.
    with pytest.raises(dlock.BusyError):
        c.acquire("re")
    with pytest.raises(ValueError):
        c.acquire("re", reentrant=True, owner=2**63)
    with pytest.raises(ValueError):
        c.acquire("re", owner=7)
    # Of another kind, by the lease's owner: refused at once.
    with pytest.raises(dlock.HeldError) as err:
        c.acquire("re", reentrant=True, kind="shared", wait=DEADLINE_S)
    assert err.value.code == dlock.ErrorCode.EHELD
    first.release()
    assert first.valid and first.holds == 1
    first.release()
    assert not first.valid and first.holds == 0
    stack.client().acquire("re", wait=DEADLINE_S).release()


def test_reentrant_with_blocks(stack: Stack) -> None:
    c = stack.client()
    with c.lock("nest", reentrant=True) as outer:
        with c.lock("nest", reentrant=True) as inner:
            assert inner is outer and outer.holds == 2
        assert outer.valid and outer.holds == 1
    assert not outer.valid


@pytest.mark.parametrize("holds", [1, 2])
def test_crossed_reentrant_grant_inside_release_sync(stack: Stack, monkeypatch: pytest.MonkeyPatch,
                                                     holds: int) -> None:
    """An abandoned re-entrant acquire whose grant crossed its cancel, handled inside
    release(sync=True) of that same lease (libdlock refuses to release it there): its hold
    is given back once the release returns, not leaked."""
    c = stack.client()
    core = c._core
    lease = c.acquire("crossed", reentrant=True, owner=1)
    for _ in range(holds - 1):
        assert c.acquire("crossed", reentrant=True, owner=1) is lease
    # The dispatcher reads nothing for a while, so the grant waits for the release's round trip.
    monkeypatch.setattr(dlock._lib, "client_dispatch", lambda _c: 0)
    p = core.start("crossed", None, 0, "exclusive", 0, True, 1, None, None, None)
    core.abandon(p)
    assert p.id in core.pending  # not answered yet
    lease.release(sync=True)
    assert p.id not in core.pending and p.lease is None  # the grant came, and was given back
    monkeypatch.undo()
    core.wake()
    if holds == 2:
        assert lease.holds == 1 and stack.leases("crossed")[0]["holds"] == 1
        lease.release(sync=True)
    assert not lease.valid
    stack.wait_names("crossed", [])
    stack.client().acquire("crossed").release()


def test_reentrant_other_kind_is_held_error(stack: Stack) -> None:
    c = stack.client()
    with c.acquire("rk", reentrant=True):
        with pytest.raises(dlock.HeldError):
            c.acquire("rk", reentrant=True, kind="shared")


def test_set_all_or_nothing(stack: Stack) -> None:
    other = stack.client()
    blocker = other.acquire("set-b")
    c = stack.client()
    with pytest.raises(dlock.BusyError):
        c.acquire_many(["set-c", "set-a", "set-b"])
    # Nothing of the set is kept: set-a (taken before set-b in the order) was given back.
    stack.wait_names("set-*", ["set-b"])
    with pytest.raises(dlock.LockTimeout):
        c.acquire_many(["set-c", "set-a", "set-b"], wait=0.2)

    got: List[dlock.LeaseSet] = []
    t = threading.Thread(target=lambda: got.append(
        c.acquire_many(["set-c", "set-a", "set-b"], wait=DEADLINE_S)))
    t.start()
    stack.wait_waiters("set-b", 1)
    blocker.release()
    t.join(DEADLINE_S)
    assert got
    with got[0] as leases:
        assert [lease.name for lease in leases] == ["set-c", "set-a", "set-b"]  # the caller's order
        assert leases.valid and len(leases) == 3 and leases["set-b"].fence > blocker.fence
        leases.check()
    assert not any(lease.valid for lease in got[0])
    stack.wait_names("set-*", [])


def test_set_bad_input(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(dlock.DlockError) as err:
        c.acquire_many(["x", "x"])
    assert err.value.code == dlock.ErrorCode.EINVAL
    with pytest.raises(dlock.DlockError):
        c.acquire_many([])
    with pytest.raises(TypeError):
        c.acquire_many("abc")
    with pytest.raises(dlock.InvalidNameError):
        c.acquire_many(["ok", ""])
    assert stack.leases() == []
