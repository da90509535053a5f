"""Lost leases, events, a holder that crashes, an agent that goes away."""

from __future__ import annotations

import gc
import os
import queue
import signal
import subprocess
import sys
import threading
import textwrap
import weakref
from typing import List, Tuple

import pytest

import dlock
from conftest import DEADLINE_S, Stack, child_env, wait_until

Event = Tuple[dlock.Lease, dlock.State, "dlock.ErrorCode | int"]


def _recorder() -> Tuple["queue.Queue[Event]", dlock.EventCallback]:
    q: "queue.Queue[Event]" = queue.Queue()

    def on_event(lease: dlock.Lease, state: dlock.State, reason: "dlock.ErrorCode | int") -> None:
        q.put((lease, state, reason))

    return q, on_event


def _next_state(q: "queue.Queue[Event]", state: dlock.State) -> Event:
    while True:
        ev = q.get(timeout=DEADLINE_S)
        if ev[1] is state:
            return ev


def test_lost_after_key_deleted(stack: Stack) -> None:
    q, on_event = _recorder()
    cq, client_event = _recorder()
    c = stack.client(on_event=client_event)
    seen_threads: List[str] = []

    def lease_event(lease: dlock.Lease, state: dlock.State, reason: "dlock.ErrorCode | int") -> None:
        seen_threads.append(threading.current_thread().name)
        on_event(lease, state, reason)

    lease = c.acquire("gone", ttl=1, on_event=lease_event)
    assert lease.valid
    assert stack.redis.delete("dlock:gone") == 1
    got, state, reason = _next_state(q, dlock.State.LOST)
    assert got is lease and reason != 0
    assert seen_threads and all(name == "dlock-dispatch" for name in seen_threads)
    # The client's callback hears it too.
    assert _next_state(cq, dlock.State.LOST)[0] is lease
    # And the next check raises.
    assert not lease.valid
    assert lease.state == dlock.State.LOST
    with pytest.raises(dlock.LostError) as err:
        lease.check()
    assert err.value.code == dlock.ErrorCode.ELOST and err.value.reason == reason
    with pytest.raises(dlock.LostError):
        lease.release()


def test_with_block_of_a_lost_lease_raises(stack: Stack) -> None:
    c = stack.client()
    with pytest.raises(dlock.LostError):
        with c.lock("lost-with", ttl=1) as lease:
            stack.redis.delete("dlock:lost-with")
            wait_until(lambda: not lease.valid, "the lease to turn invalid")
    # A block that raised already keeps its own exception.
    with pytest.raises(KeyError):
        with c.lock("lost-with2", ttl=1) as lease:
            stack.redis.delete("dlock:lost-with2")
            wait_until(lambda: not lease.valid, "the lease to turn invalid")
            raise KeyError("mine")


def test_crashed_holder_releases(stack: Stack) -> None:
    """A child killed (SIGKILL) while it holds: the parent's waiting acquire is granted."""
    script = textwrap.dedent(f"""
        import sys, dlock
        lease = dlock.Client({stack.sock!r}).acquire("crash", ttl=30)
        print(lease.fence, flush=True)
        sys.stdin.read()  # hold until killed
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=child_env())
    try:
        assert child.stdout is not None
        child_fence = int(child.stdout.readline())
        [entry] = stack.leases("crash")
        assert entry["pid"] == child.pid
        c = stack.client()
        got: List[dlock.Lease] = []
        t = threading.Thread(target=lambda: got.append(c.acquire("crash", wait=DEADLINE_S)))
        t.start()
        stack.wait_waiters("crash", 1)
        child.kill()
        child.wait(timeout=DEADLINE_S)
        t.join(DEADLINE_S)
        assert got and got[0].valid and got[0].fence > child_fence
        got[0].release()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_max_hold_ends_the_lease(stack: Stack) -> None:
    q, on_event = _recorder()
    c = stack.client()
    lease = c.acquire("bounded", ttl=1, max_hold=0.5, on_event=on_event)
    _, _, reason = _next_state(q, dlock.State.LOST)
    assert reason in (dlock.ErrorCode.EHOLDLIMIT, dlock.ErrorCode.ELOST)
    with pytest.raises(dlock.LostError):
        lease.check()


def test_progress_touch(stack: Stack) -> None:
    c = stack.client()
    # Touched often enough: stays held past several TTLs' worth of renewals.
    lease = c.acquire("progress", ttl=1, progress=0.5)
    for _ in range(3):
        entry = stack.leases("progress")[0]
        renewals = entry["renewals"]
        def renewed_again() -> bool:
            lease.touch()
            return bool(stack.leases("progress")[0]["renewals"] > renewals)
        wait_until(renewed_again, "a renewal")
        assert lease.valid
    lease.release()


#: An agent without a state directory: its leases, and its clients' connections, end with it
#: (an agent with one leaves them to the next agent: test_restart.py).
NO_STATE_DIR = "[agent]\nstate_dir =\n"


@pytest.mark.agent_config(NO_STATE_DIR)
def test_agent_killed_loses_leases(stack: Stack) -> None:
    """An agent without a state directory killed: every lease LOST (EDISCONNECTED), a waiting
    acquire fails, the client is unusable."""
    q, on_event = _recorder()
    c = stack.client()
    lease = c.acquire("agent-gone", on_event=on_event)
    waiting = stack.client()
    holder = stack.client()
    held = holder.acquire("agent-gone2")
    errors: List[BaseException] = []

    def wait() -> None:
        try:
            waiting.acquire("agent-gone2", wait=DEADLINE_S)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    stack.wait_waiters("agent-gone2", 1)
    stack.kill_agent()
    _, _, reason = _next_state(q, dlock.State.LOST)
    assert reason == dlock.ErrorCode.EDISCONNECTED
    assert not lease.valid
    # The other client's dispatcher notices the closed connection on its own.
    wait_until(lambda: not held.valid, "the other client's lease to turn invalid")
    with pytest.raises(dlock.LostError) as err:
        lease.check()
    assert err.value.reason == dlock.ErrorCode.EDISCONNECTED
    t.join(DEADLINE_S)
    assert len(errors) == 1 and isinstance(errors[0], dlock.UnavailableError)
    assert errors[0].code == dlock.ErrorCode.EDISCONNECTED  # type: ignore[attr-defined]
    with pytest.raises(dlock.UnavailableError):
        c.acquire("after")


def test_close_fails_a_waiting_acquire(stack: Stack) -> None:
    stack.client().acquire("closing")
    c = stack.client()
    errors: List[BaseException] = []

    def wait() -> None:
        try:
            c.acquire("closing", wait=DEADLINE_S)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    stack.wait_waiters("closing", 1)
    c.close()
    t.join(DEADLINE_S)
    assert len(errors) == 1 and isinstance(errors[0], dlock.UnavailableError)
    stack.wait_waiters("closing", 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_opens_its_own_client(default_socket: str, stack: Stack) -> None:
    parent = dlock.default_client()
    lease = parent.acquire("fork-parent")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanups
        code = 1
        try:
            child_client = dlock.default_client()
            ok = child_client is not parent and parent.closed and not lease.valid
            try:
                parent.acquire("fork-x")
                ok = False
            except dlock.UnavailableError as exc:
                ok = ok and exc.code == dlock.ErrorCode.EDISCONNECTED
            with dlock.lock("fork-child", wait=DEADLINE_S) as mine:
                os.write(w, f"{int(ok)} {mine.fence}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        line = f.readline()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert line.split()[0] == "1"
    # The parent's connection and lease are untouched by the child.
    assert lease.valid and not parent.closed
    parent.ping()
    stack.wait_names("fork-*", ["fork-parent"])
    lease.release()


def _alive(pid: int) -> bool:
    """Is pid a live process (not a zombie)? It need not be a child of ours."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_does_not_keep_the_parent_connection(stack: Stack) -> None:
    """A holder forks a child that lives on; the holder is killed (SIGKILL): the agent sees
    its connection end and releases the lease although the child still lives."""
    script = textwrap.dedent(f"""
        import os, dlock
        lease = dlock.Client({stack.sock!r}).acquire("forked-held", ttl=30)
        pid = os.fork()
        if pid == 0:
            try:
                os.read(0, 1)  # lives until the test closes the pipe
            finally:
                os._exit(0)
        print(pid, lease.fence, flush=True)
        os.read(0, 1)  # holds until killed
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=child_env())
    child_pid = 0
    try:
        assert parent.stdout is not None and parent.stdin is not None
        child_pid, fence = map(int, parent.stdout.readline().split())
        assert stack.names("forked-*") == ["forked-held"]
        parent.kill()
        parent.wait(timeout=DEADLINE_S)
        stack.wait_names("forked-*", [])
        assert _alive(child_pid)
        with stack.client().acquire("forked-held", wait=DEADLINE_S) as lease:
            assert lease.valid and lease.fence > fence
        assert _alive(child_pid)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdin is not None:
            parent.stdin.close()  # the child reads the end of the pipe and leaves
        if child_pid:
            try:
                wait_until(lambda: not _alive(child_pid), "the forked child to leave")
            except AssertionError:
                os.kill(child_pid, signal.SIGKILL)
                raise


def test_jeopardy_then_held_again(stack: Stack) -> None:
    """Redis stops answering for a while: JEOPARDY, then HELD again once it answers."""
    q, on_event = _recorder()
    c = stack.client()
    lease = c.acquire("jeopardy", ttl=3, on_event=on_event)
    assert stack.redis_proc is not None
    stack.redis_proc.send_signal(signal.SIGSTOP)
    try:
        _, _, reason = _next_state(q, dlock.State.JEOPARDY)
        assert reason != 0
    finally:
        stack.redis_proc.send_signal(signal.SIGCONT)
    ev = q.get(timeout=DEADLINE_S)
    # Back to HELD if Redis answered within the deadline, else LOST: both are events.
    assert ev[1] in (dlock.State.HELD, dlock.State.LOST)
    if ev[1] is dlock.State.HELD:
        assert ev[2] == 0 and lease.valid


def test_event_callback_acquires_with_a_wait(stack: Stack) -> None:
    """A LOST callback (on the dispatcher thread) acquires another name with a wait: the
    dispatcher thread dispatches the answer itself, and the acquire is granted."""
    holder = stack.client()
    held = holder.acquire("cb-other")
    results: "queue.Queue[object]" = queue.Queue()
    c = stack.client()

    def on_event(lease: dlock.Lease, state: dlock.State, reason: "dlock.ErrorCode | int") -> None:
        if state is not dlock.State.LOST:
            return
        try:
            got = c.acquire("cb-other", wait=DEADLINE_S)
            results.put((got.valid, got.fence))
            got.release()
        except BaseException as exc:  # reported to the test
            results.put(exc)

    c.acquire("cb-lost", ttl=1, on_event=on_event)
    assert stack.redis.delete("dlock:cb-lost") == 1
    stack.wait_waiters("cb-other", 1)  # the callback waits for the holder
    held.release()
    result = results.get(timeout=DEADLINE_S)
    assert result == (True, result[1]) and result[1] > held.fence  # type: ignore[index]
    # The client goes on as before.
    stack.wait_names("cb-*", [])
    with c.acquire("cb-after", wait=DEADLINE_S) as after:
        assert after.valid


def test_close_from_the_dispatcher_thread_holding_the_mutex(stack: Stack) -> None:
    """The garbage collector may run a Client's __del__ on its dispatcher thread while that
    thread holds the client's mutex (an allocation inside a libdlock callback): it must not
    take the mutex again, and the dispatcher closes the client afterwards."""
    c = stack.client()
    done = threading.Event()

    def on_event(lease: dlock.Lease, state: dlock.State, reason: "dlock.ErrorCode | int") -> None:
        with c._core.mutex:  # as inside a libdlock callback
            c.__del__()
        done.set()

    lease = c.acquire("gc-lost", ttl=1, on_event=on_event)
    other = c.acquire("gc-kept")
    assert stack.redis.delete("dlock:gc-lost") == 1
    assert done.wait(DEADLINE_S)
    wait_until(lambda: c._core.closed, "the dispatcher to close the client")
    assert c.closed and not lease.valid and not other.valid
    stack.wait_names("gc-*", [])
    with pytest.raises(dlock.UnavailableError):
        c.acquire("gc-after")


@pytest.mark.agent_config(NO_STATE_DIR)
def test_default_client_replaced_after_agent_restart(default_socket: str, stack: Stack) -> None:
    """An agent without a state directory restarts: dlock.lock() opens a new default client
    instead of raising for ever; the old one is not closed under its leases (they report
    LOST), but once unused."""
    q, on_event = _recorder()
    old = dlock.default_client()
    lease = old.acquire("restart-a", on_event=on_event)
    stack.kill_agent()
    _, _, reason = _next_state(q, dlock.State.LOST)
    assert reason == dlock.ErrorCode.EDISCONNECTED
    stack.start_agent()
    with dlock.lock("restart-b", wait=DEADLINE_S) as fresh:
        assert fresh.valid
        assert stack.names("restart-*") == ["restart-b"]
    new = dlock.default_client()
    assert new is not old and not new.closed
    assert not old.closed and lease.state is dlock.State.LOST
    with pytest.raises(dlock.LostError) as err:
        lease.release()
    assert err.value.reason == dlock.ErrorCode.EDISCONNECTED
    core = old._core
    ref = weakref.ref(old)
    del old, lease, err  # the traceback refers to the lease, the lease to its client

    def collected() -> bool:
        gc.collect()
        return ref() is None

    wait_until(collected, "the old client to be collected")
    assert core.closed
