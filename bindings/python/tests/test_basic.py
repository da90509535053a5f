"""Acquire, release, waits, timeouts, fencing and bad input."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import List

import pytest

import dlock
from conftest import DEADLINE_S, Stack, wait_until


def test_acquire_release(stack: Stack) -> None:
    c = stack.client()
    lease = c.acquire("basic", ttl=10)
    assert lease.valid
    assert lease.name == "basic"
    assert lease.fence > 0
    assert lease.ttl == 10.0
    assert 0 < lease.remaining <= 10.0
    assert lease.state == dlock.State.HELD == "held"
    assert lease.kind is dlock.Kind.EXCLUSIVE
    assert lease.holds == 1
    lease.check()
    [entry] = stack.leases("basic")
    assert entry["fence"] == lease.fence and entry["ttl_ms"] == 10000

    lease.release(sync=True)
    assert not lease.valid
    assert lease.released
    assert lease.state == dlock.State.RELEASED
    assert lease.remaining == 0.0
    assert stack.leases("basic") == []
    with pytest.raises(dlock.DlockError) as err:
        lease.release()
    assert err.value.code == dlock.ErrorCode.ENOTFOUND
    with pytest.raises(dlock.DlockError):
        lease.check()
    # Free again for another client, at once (the release was synchronous).
    stack.client().acquire("basic").release()


def test_context_manager_default_client(default_socket: str, stack: Stack) -> None:
    with dlock.lock("ctx", ttl=5, wait=5) as lease:
        assert lease.valid
        assert [e["name"] for e in stack.leases("ctx")] == ["ctx"]
        with pytest.raises(dlock.BusyError):
            stack.client().acquire("ctx")
    assert not lease.valid
    # The default client is one per process.
    assert dlock.default_client() is dlock.default_client()
    # Given up on the way out, so a waiting acquire elsewhere gets it.
    stack.client().acquire("ctx", wait=DEADLINE_S).release()


def test_client_context_manager_releases_everything(stack: Stack) -> None:
    with dlock.Client(stack.sock) as c:
        leases = [c.acquire(f"cm{i}") for i in range(3)]
        assert len(stack.leases("cm*")) == 3
    assert c.closed
    assert not any(lease.valid for lease in leases)
    wait_until(lambda: stack.leases("cm*") == [], "the agent to release a closed client's leases")
    with pytest.raises(dlock.UnavailableError):
        c.acquire("cm9")


def test_try_once_busy(stack: Stack) -> None:
    holder = stack.client().acquire("busy")
    other = stack.client()
    with pytest.raises(dlock.BusyError) as err:
        other.acquire("busy", wait=0)
    e = err.value
    assert e.code == dlock.ErrorCode.EBUSY and e.name == "EBUSY" and e.lock_name == "busy"
    assert isinstance(e, dlock.DlockError)
    assert e.message
    holder.release()


def test_wait_granted_after_release(stack: Stack) -> None:
    holder = stack.client().acquire("wait")
    got: List[dlock.Lease] = []
    errors: List[BaseException] = []
    waiter_client = stack.client()

    def wait() -> None:
        try:
            got.append(waiter_client.acquire("wait", wait=DEADLINE_S))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    stack.wait_waiters("wait", 1)
    assert not got  # still waiting while the holder holds
    holder.release()
    t.join(DEADLINE_S)
    assert not t.is_alive() and not errors
    assert got[0].valid and got[0].fence > holder.fence
    got[0].release()


def test_wait_runs_out(stack: Stack) -> None:
    holder = stack.client().acquire("timeout")
    other = stack.client()
    with pytest.raises(dlock.LockTimeout) as err:
        other.acquire("timeout", wait=0.2)
    assert isinstance(err.value, TimeoutError)
    assert err.value.code == dlock.ErrorCode.ETIMEDOUT
    assert holder.valid
    # The wait left no waiter behind.
    stack.wait_waiters("timeout", 0)


def test_fencing_order(stack: Stack) -> None:
    a, b = stack.client(), stack.client()
    fences = []
    for i in range(6):
        lease = (a if i % 2 else b).acquire("fence", wait=DEADLINE_S)
        fences.append(lease.fence)
        lease.release(sync=True)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_bad_names(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(dlock.InvalidNameError) as err:
        c.acquire("n" * 201)
    assert err.value.code == dlock.ErrorCode.ENAMETOOLONG
    assert isinstance(err.value, ValueError)
    c.acquire("n" * 200).release()  # the agent's default limit, exactly
    for bad in ("", "a b", "nul\0byte", "{brace}"):
        with pytest.raises(dlock.InvalidNameError) as err:
            c.acquire(bad)
        assert err.value.code == dlock.ErrorCode.EBADNAME, bad
    with pytest.raises(TypeError):
        c.acquire(42)  # type: ignore[arg-type]
    # Bytes names, and non-ASCII text (UTF-8 on the wire), are names too.
    with c.acquire(b"raw-bytes") as lease:
        assert lease.name == "raw-bytes"
    with c.acquire("заказ") as lease:
        assert lease.name == "заказ"
        assert stack.leases("заказ")[0]["name"] == "заказ"


def test_bad_arguments(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(ValueError):
        c.acquire("arg", ttl=-1)
    with pytest.raises(ValueError):
        c.acquire("arg", wait=-1)
    with pytest.raises(ValueError):
        c.acquire("arg", kind="mutex")
    with pytest.raises(ValueError):
        c.acquire("arg", kind="semaphore")  # no permits
    with pytest.raises(ValueError):
        c.acquire("arg", permits=2)  # permits on an exclusive lock
    with pytest.raises(dlock.DlockError) as err:
        c.acquire("arg", ttl=0.001)  # below the agent's min_ttl_ms
    assert err.value.code == dlock.ErrorCode.EINVAL
    assert "ttl" in err.value.message.lower()


def test_agent_down(tmp_root: Path) -> None:
    with pytest.raises(dlock.UnavailableError) as err:
        dlock.Client(str(tmp_root / "nobody.sock"))
    assert err.value.code == dlock.ErrorCode.ECONNECT
    assert "nobody.sock" in str(err.value)


def test_agent_down_default_socket(tmp_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLOCK_SOCKET", str(tmp_root / "none.sock"))
    monkeypatch.setattr(dlock._client, "_default", None)
    with pytest.raises(dlock.UnavailableError):
        with dlock.lock("x"):
            pass


def test_ping_and_repr(stack: Stack) -> None:
    c = stack.client()
    c.ping()
    lease = c.acquire("repr")
    assert "repr" in repr(lease) and "valid=True" in repr(lease)
    lease.release()
    assert "released" in repr(lease)
    c.close()
    c.close()  # idempotent
    assert "closed" in repr(c)
    with pytest.raises(dlock.UnavailableError):
        c.ping()


def test_error_codes_enum() -> None:
    assert dlock.ErrorCode.EKIND == -29
    assert dlock.ErrorCode(-8) is dlock.ErrorCode.ETIMEDOUT
    e = dlock.LockTimeout(-8)
    assert e.message == "timed out waiting for the lock"  # dlock_strerror()
    import pickle

    back = pickle.loads(pickle.dumps(dlock.BusyError(-7, "held", "n")))
    assert type(back) is dlock.BusyError and back.lock_name == "n" and back.code == -7
