"""Client, Lease and LeaseSet: libdlock through ctypes, safe for threads and asyncio."""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import math
import os
import select
import threading
import time
import weakref
from ctypes import byref, c_void_p
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from . import _lib
from .errors import (
    BusyError,
    DlockError,
    ErrorCode,
    LockTimeout,
    LostError,
    UnavailableError,
    _code,
    error_for,
)

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "Client",
    "Lease",
    "LeaseSet",
    "Kind",
    "State",
    "EventCallback",
    "Name",
]

log = logging.getLogger("dlock")

#: A lock name: text (encoded as UTF-8) or bytes.
Name = Union[str, bytes]


class Kind(str, enum.Enum):
    """The kind of lock an acquire asks for (docs/protocol.md)."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SEMAPHORE = "semaphore"

    def __str__(self) -> str:
        return self.value


_KIND_C = {Kind.EXCLUSIVE: 0, Kind.SHARED: 1, Kind.SEMAPHORE: 2}
_KIND_PY = {v: k for k, v in _KIND_C.items()}


class State(str, enum.Enum):
    """A lease's state: HELD, JEOPARDY while renewal fails, and in the end LOST or RELEASED."""

    HELD = "held"
    JEOPARDY = "jeopardy"
    LOST = "lost"
    RELEASED = "released"

    def __str__(self) -> str:
        return self.value


_STATE_PY = {1: State.HELD, 2: State.JEOPARDY, 3: State.LOST, 4: State.RELEASED}

#: ``on_event(lease, state, reason)``: called from the client's dispatcher thread when a
#: lease turns JEOPARDY, HELD again or LOST; ``reason`` is the DLOCK_E* code telling why
#: (ErrorCode.OK for HELD). ErrorCode.ERESTART: the agent restarted (or died); a JEOPARDY
#: while libdlock takes the connection back from the next agent (the lease stays valid,
#: and is HELD again once that agent confirms it), a LOST if none took it over in time.
EventCallback = Callable[["Lease", State, "ErrorCode | int"], None]

_WAIT_GUARD = 15.0  # seconds past the wait before a silent agent counts as gone
_lease_valid: Callable[[int], int] = _lib.lease_valid  # Lease.valid's hot path: one lookup less
_REENTRANT = 0x1


def _encode(name: Name) -> bytes:
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogateescape")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        raw = bytes(name)
    else:
        raise TypeError(f"a lock name is str or bytes, not {type(name).__name__}")
    if b"\0" in raw:
        raise error_for(ErrorCode.EBADNAME, "a lock name cannot hold a NUL byte", _decode(raw))
    return raw


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _ms(seconds: Optional[float], what: str) -> int:
    """Seconds (None or 0: the agent's default) to whole milliseconds, rounded up."""
    if seconds is None:
        return 0
    if seconds < 0 or math.isnan(seconds):
        raise ValueError(f"{what} must be >= 0 seconds, not {seconds!r}")
    ms = math.ceil(seconds * 1000)
    if ms > 0xFFFFFFFF:
        raise ValueError(f"{what} too large: {seconds!r} s")
    return ms


# The owners of plain acquires, one per acquire, have this bit; callers' are
# below it. Every acquire is re-entrant on the wire: a plain one under an
# owner of its own, so that it waits for the client's other holders of the
# name (another thread's, say) instead of being refused with HeldError.
_OWN_OWNER = 1 << 63


def _wait_ms(wait: Optional[float]) -> int:
    if wait is None:
        return -1  # DLOCK_WAIT_FOREVER
    if wait < 0 or math.isnan(wait):
        raise ValueError(f"wait must be >= 0 seconds or None (forever), not {wait!r}")
    return min(math.ceil(wait * 1000), 2**62)


def _spec(kind: Union[str, Kind], permits: int, owner: Optional[int]) -> _lib.LockSpec:
    try:
        k = Kind(kind)
    except ValueError:
        raise ValueError(f"kind must be 'exclusive', 'shared' or 'semaphore', not {kind!r}") from None
    if k is Kind.SEMAPHORE and permits < 1:
        raise ValueError("a semaphore needs permits >= 1")
    if k is not Kind.SEMAPHORE and permits:
        raise ValueError(f"permits are for semaphores, not for a {k.value} lock")
    if owner is not None and not 0 <= owner < _OWN_OWNER:
        raise ValueError("owner must be an int in [0, 2**63)")
    return _lib.LockSpec(_KIND_C[k], permits, owner or 0)


class _Pending:
    """An asynchronous acquire in flight: completed by the acquire callback under the mutex."""

    __slots__ = (
        "id",
        "name",
        "on_event",
        "done",
        "status",
        "message",
        "lease",
        "abandoned",
        "event",
        "loop",
        "future",
    )

    def __init__(
        self,
        pid: int,
        name: str,
        on_event: Optional[EventCallback],
        loop: Optional[asyncio.AbstractEventLoop] = None,
        future: "Optional[asyncio.Future[None]]" = None,
    ) -> None:
        self.id = pid
        self.name = name
        self.on_event = on_event
        self.done = False
        self.status = 0
        self.message: Optional[str] = None
        self.lease: Optional[Lease] = None
        self.abandoned = False
        # A lock taken now and released by the callback: cheaper than a threading.Event.
        self.event: "Optional[threading.Lock]" = None
        if loop is None:
            self.event = threading.Lock()
            self.event.acquire()
        self.loop = loop
        self.future = future

    def error(self) -> DlockError:
        return error_for(self.status, self.message, self.name)


def _complete_future(p: _Pending) -> None:
    fut = p.future
    if fut is not None and not fut.done():
        fut.set_result(None)


class _Core:
    """One libdlock client, its mutex and its dispatcher thread.

    Every libdlock call on the client (but the lease page readers, under
    ``page_lock``) is made under ``mutex``; callbacks run inside those calls,
    hence under it too, and only record what happened: user code (event
    callbacks) runs later in the dispatcher thread, outside the mutex.
    """

    def __init__(self, socket: Optional[str], on_event: Optional[EventCallback]) -> None:
        self.socket = socket
        self.on_event = on_event
        self.owner: "Optional[weakref.ref[Client]]" = None
        self.mutex = threading.Lock()
        # Held by the lease page readers (Lease.valid and the like) around loading a handle
        # and calling libdlock with it, and by whoever forgets a handle (before libdlock
        # frees it): a reader never calls libdlock with a freed handle or an unmapped page.
        self.page_lock = threading.Lock()
        self.pending: Dict[int, _Pending] = {}
        self.leases: Dict[int, Lease] = {}
        self.events: List[Tuple[Lease, State, "ErrorCode | int"]] = []
        self.ids = itertools.count(1)
        self.owners = itertools.count(1)
        # The handle inside dlock_lease_release_sync() (which refuses to release it meanwhile),
        # and the holds of it that callbacks gave back then: released once it returns.
        self.syncing: Optional[int] = None
        self.deferred: List[int] = []
        self.closed = False
        self.closing = False
        self.forked = False
        self.disconnected = False
        self.acquire_cb = _lib.ACQUIRE_CB(self._on_acquire)
        self.event_cb = _lib.EVENT_CB(self._on_event)
        handle = c_void_p()
        rc = _lib.client_open(byref(handle), socket.encode() if socket is not None else None)
        if rc != 0:
            where = socket or os.environ.get("DLOCK_SOCKET") or "/run/dlock/dlock.sock"
            raise error_for(rc, f"cannot open a client on {where}: {_strerror(rc)}")
        self.c: Optional[int] = handle.value
        _lib.client_set_event_cb(self.c, self.event_cb, None)
        # What the dispatcher waits on: libdlock's descriptor and the file it is (see _fd_id()).
        self.watched: Optional[Tuple[int, int, int]] = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.thread = threading.Thread(target=self._run, name="dlock-dispatch", daemon=True)
        self.thread_ident: Optional[int] = None
        self.thread.start()

    # ---- callbacks: run under the mutex, in whichever thread is inside libdlock ----

    def _on_acquire(self, _c: Any, status: int, handle: Optional[int], arg: Optional[int]) -> None:
        try:
            p = self.pending.pop(arg or 0, None)
            if p is None or (p.abandoned and status == 0):
                # Nobody wants it (a cancel crossed by the grant, a timed-out wait): give it
                # back. Of a re-entered lease this gives up the hold the grant added (the
                # Python count never had it).
                if status == 0 and handle:
                    self._give_back(handle)
                return
            if status == 0 and handle:
                lease = self.leases.get(handle)
                if lease is None:
                    lease = Lease._new(self, handle, p.on_event)
                    self.leases[handle] = lease
                else:  # a re-entrant acquire: the same lease, one more hold
                    lease._holds += 1
                p.lease = lease
            else:
                p.status = status
                raw = _lib.client_strerror(self.c, status) if self.c else None
                p.message = raw.decode("utf-8", "replace") if raw else None
            p.done = True
            if p.abandoned:
                return
            if p.event is not None:
                p.event.release()
                if threading.get_ident() != self.thread_ident:
                    # The dispatcher may be waiting for p itself (an acquire from an event
                    # callback, wait_here()) on a socket this thread has just drained.
                    self.wake()
            elif p.loop is not None:
                try:
                    p.loop.call_soon_threadsafe(_complete_future, p)
                except RuntimeError:  # the loop is closed: nobody will take the lease
                    p.abandoned = True
                    if p.lease is not None:
                        self._drop_hold(p.lease)
        except BaseException:  # pragma: no cover - never let an exception into C
            log.exception("dlock: acquire callback failed")

    def _on_event(self, _c: Any, handle: Optional[int], state: int, reason: int, _arg: Any) -> None:
        try:
            lease = self.leases.get(handle or 0)
            if lease is None:
                return
            st = _STATE_PY.get(state, State.LOST)
            if st is State.LOST:
                lease._lost_reason = reason or ErrorCode.ELOST
            self.events.append((lease, st, _code(reason)))
            if threading.get_ident() != self.thread_ident:
                self.wake()
        except BaseException:  # pragma: no cover
            log.exception("dlock: event callback failed")

    def _drop_hold(self, lease: "Lease") -> int:
        """Gives up one hold of lease (mutex held); the handle is forgotten with its last."""
        h = lease._handle
        if h is None:
            return ErrorCode.ENOTFOUND
        lease._holds -= 1
        if lease._holds <= 0:
            with self.page_lock:
                lease._handle = None
            self.leases.pop(h, None)
        return self._give_back(h)

    def _give_back(self, handle: int) -> int:
        """Releases one hold of handle (mutex held). libdlock refuses (EINVAL) to release a
        handle inside dlock_lease_release_sync(), where a crossed grant of a re-entrant
        acquire may come: that hold is released once the call returns (release_sync())."""
        if handle == self.syncing:
            self.deferred.append(handle)
            return 0
        return int(_lib.lease_release(handle))

    def release_sync(self, handle: int) -> int:
        """dlock_lease_release_sync(handle) (mutex held), then the holds given back meanwhile."""
        self.syncing = handle
        try:
            return int(_lib.lease_release_sync(handle))
        finally:
            self.syncing = None
            deferred, self.deferred = self.deferred, []
            for h in deferred:
                _lib.lease_release(h)

    # ---- the dispatcher thread ----

    def wake(self) -> None:
        if self.wake_w < 0:
            return
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake is pending anyway) or closed

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def _dispatch(self) -> None:
        """One dispatch of what the agent sent (mutex held)."""
        if self.c is not None and not self.disconnected:
            if _lib.client_dispatch(self.c) == ErrorCode.EDISCONNECTED:
                self.disconnected = True

    def _fd_id(self) -> Optional[Tuple[int, int, int]]:
        """libdlock's descriptor and the file it is, (fd, st_dev, st_ino), mutex held; None
        once the connection is gone for good (its socket stays readable: end of file).

        While the agent restarts, dlock_client_fd() is a timerfd that fires when it is time to
        reconnect, then the new connection's socket: it may change after any call on the
        client, and the new one may have the old one's number, so the file tells them apart.
        """
        if self.c is None or self.disconnected:
            return None
        fd = _lib.client_fd(self.c)
        try:
            st = os.fstat(fd)
        except OSError:
            return None
        return (fd, st.st_dev, st.st_ino)

    def follow(self) -> None:
        """After a call into libdlock on another thread than the dispatcher (mutex held): wakes
        the dispatcher if libdlock's descriptor is no longer the one it waits on (a blocking
        call reconnected, or a send found the connection broken), so that it waits on the new
        one. The dispatcher reads the descriptor again before each wait anyway."""
        if threading.get_ident() != self.thread_ident and self._fd_id() != self.watched:
            self.wake()

    def _rewatch(self, poller: "select.poll", registered: int) -> int:
        """Has poller watch self.watched's descriptor instead of registered (-1: none); returns
        the one now registered. poll() takes descriptors by number: one whose number stays is
        watched anew at each poll() whatever file it is now."""
        fd = self.watched[0] if self.watched is not None else -1
        if fd != registered:
            if registered >= 0:
                poller.unregister(registered)
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        return fd

    def _run(self) -> None:
        self.thread_ident = threading.get_ident()
        poller = select.poll()
        poller.register(self.wake_r, select.POLLIN)
        registered = -1
        while not self.closing:
            with self.mutex:
                if self.closing or self.c is None:
                    break
                self.watched = self._fd_id()
            registered = self._rewatch(poller, registered)
            # A timeout now and then also flushes a release still in the output buffer.
            for fd, _ in poller.poll(1000):
                if fd == self.wake_r:
                    self._drain_wake()
            with self.mutex:
                if self.closing or self.c is None:
                    break
                self._dispatch()
            self.deliver()
        self.deliver()
        # A close asked on this thread (from an event callback, or by the garbage collector,
        # maybe while this thread held the mutex) is done here, outside every lock.
        self.close_now()

    def wait_here(self, p: _Pending, timeout: Optional[float]) -> bool:
        """On the dispatcher thread (an acquire from an event callback): waits for p by
        dispatching, as libdlock's own blocking calls do, since no other thread will.
        Events that come meanwhile are delivered once the callback has returned. Returns
        whether p is done (False: the timeout passed, or the client is closing)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = select.poll()
        poller.register(self.wake_r, select.POLLIN)
        registered = -1
        while True:
            with self.mutex:
                # First what a blocking call of another thread may have read ahead.
                self._dispatch()
                if p.done or self.closing or self.c is None:
                    return p.done
                self.watched = self._fd_id()
            registered = self._rewatch(poller, registered)
            ms = -1
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ms = max(1, math.ceil(left * 1000))
            for fd, _ in poller.poll(ms):
                if fd == self.wake_r:
                    self._drain_wake()

    def deliver(self) -> None:
        """Calls the event callbacks of the events recorded so far, outside the mutex."""
        if not self.events:  # read without the mutex: a list's truth is atomic
            return
        with self.mutex:
            events, self.events = self.events, []
        for lease, state, reason in events:
            for cb in (lease._on_event, self.on_event):
                if cb is None:
                    continue
                try:
                    cb(lease, state, reason)
                except Exception:
                    log.exception("dlock: on_event callback raised")

    # ---- requests ----

    def check_open(self) -> int:
        if self.forked:
            raise error_for(
                ErrorCode.EDISCONNECTED,
                "this client was opened before fork(): a child process must open its own",
            )
        if self.closed or self.closing or self.c is None:
            raise UnavailableError(ErrorCode.EDISCONNECTED, "the client is closed")
        return self.c

    def start(
        self,
        name: Name,
        ttl: Optional[float],
        wait: Optional[float],
        kind: Union[str, Kind],
        permits: int,
        reentrant: bool,
        owner: Optional[int],
        max_hold: Optional[float],
        progress: Optional[float],
        on_event: Optional[EventCallback],
        loop: Optional[asyncio.AbstractEventLoop] = None,
        future: "Optional[asyncio.Future[None]]" = None,
    ) -> _Pending:
        raw = _encode(name)
        opts = _lib.AcquireOptions(
            _ms(ttl, "ttl"),
            _wait_ms(wait),
            _REENTRANT,
            _ms(max_hold, "max_hold"),
            _ms(progress, "progress"),
        )
        if not reentrant and owner is not None:
            raise ValueError("owner is for re-entrant acquires (reentrant=True)")
        spec = _spec(kind, permits, owner)
        if not reentrant:
            spec.owner = _OWN_OWNER | next(self.owners)
        with self.mutex:
            c = self.check_open()
            p = _Pending(next(self.ids), _decode(raw), on_event, loop, future)
            self.pending[p.id] = p
            rc = _lib.acquire_spec_async(c, raw, byref(opts), byref(spec), self.acquire_cb, p.id)
            if rc != 0:
                del self.pending[p.id]
                msg = _lib.client_strerror(c, rc)
                if rc == ErrorCode.EDISCONNECTED:
                    # Gone for good (noticed before the dispatcher does), or, while the agent
                    # restarts, a try-once that cannot wait for it: the dispatch tells which.
                    self._dispatch()
                self.follow()
                raise error_for(rc, msg.decode("utf-8", "replace") if msg else None, p.name)
            self.follow()
        return p

    def abandon(self, p: _Pending) -> None:
        """The caller stops waiting for p: cancel it in the agent; a grant that crosses is released."""
        with self.mutex:
            if p.done:
                if p.lease is not None and not p.abandoned:
                    p.abandoned = True
                    self._drop_hold(p.lease)
                return
            p.abandoned = True
            if self.c is not None and _lib.acquire_cancel is not None:
                _lib.acquire_cancel(self.c, self.acquire_cb, p.id)
                self.follow()
            # Without the cancel call (an older libdlock), the waiter stays in the agent
            # until it times out, and a late grant is released by the callback.

    def close(self) -> None:
        if self.closed or self.forked:
            return
        self.closing = True
        if threading.get_ident() == self.thread_ident and self.thread.is_alive():
            # On the dispatcher thread: an event callback, or the garbage collector (maybe
            # while this thread holds the mutex, inside libdlock). Only ask: the dispatcher
            # closes the client once the callback has returned (_run()).
            return
        self.wake()
        if self.thread.is_alive():
            self.thread.join()
        self.close_now()

    def close_now(self) -> None:
        """Closes the C client (the dispatcher has stopped, or is the caller)."""
        with self.mutex:
            if self.closed:
                return
            self.closed = True
            c, self.c = self.c, None
            with self.page_lock:
                for lease in self.leases.values():
                    lease._handle = None
                    lease._closed = True
            self.leases.clear()
            pending, self.pending = self.pending, {}
            if c is not None:
                _lib.client_close(c)
        for p in pending.values():
            p.status = ErrorCode.EDISCONNECTED
            p.message = "the client was closed"
            p.done = True
            if p.event is not None:
                p.event.release()
            elif p.loop is not None:
                try:
                    p.loop.call_soon_threadsafe(_complete_future, p)
                except RuntimeError:
                    pass
        self._close_pipe()

    def _close_pipe(self) -> None:
        fds, self.wake_r, self.wake_w = (self.wake_r, self.wake_w), -1, -1
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def after_fork_in_child(self) -> None:
        """In a forked child: forget the parent's connection without touching it.

        The child's copy of the socket is closed (SOCK_CLOEXEC does nothing across a fork
        without exec): while a child kept it open, the agent would never see the parent's
        end and would keep its leases. Closing a copy sends nothing: the parent's
        connection goes on. libdlock's own close is never called here (it would shut the
        connection down for the parent too), and the descriptor number is forgotten, so
        nothing here uses it again once the child reuses it. (While the agent restarts,
        libdlock's descriptor is a timer, whose copy is closed the same way.)
        """
        if self.closed:
            return
        self.forked = True
        c, self.c = self.c, None
        fd = _lib.client_fd(c) if c is not None else -1
        self.watched = None
        self.mutex = threading.Lock()
        # Another thread of the parent may have held these: the child's are new.
        self.page_lock = threading.Lock()
        for lease in self.leases.values():
            lease._page = self.page_lock
            lease._handle = None
            lease._closed = True
        self.leases.clear()
        self.pending.clear()
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        self._close_pipe()


def _strerror(code: int) -> str:
    raw = _lib.strerror(code)
    return raw.decode("utf-8", "replace") if raw else "unknown error"


_cores: "weakref.WeakSet[_Core]" = weakref.WeakSet()


class Client:
    """A connection to the local dlock agent (one libdlock client).

    ``socket`` is the agent's socket path: None for ``$DLOCK_SOCKET``, else
    ``/run/dlock/dlock.sock``. ``on_event(lease, state, reason)`` is called for
    every lease of the client that turns JEOPARDY, HELD again or LOST, from the
    client's dispatcher thread (after the lease's own ``on_event``).

    One client may be shared by any number of threads and asyncio tasks. The
    agent releases every lease of the client when it is closed (``close()``,
    the end of a ``with`` block, or the process exiting or dying). The
    connection outlives a restart of the agent (one with a state directory,
    its default): libdlock takes it back from the next agent, and the
    client's leases and waiting acquires go on.
    """

    def __init__(self, socket: "Optional[Union[str, os.PathLike[str]]]" = None, *,
                 on_event: Optional[EventCallback] = None) -> None:
        self._core = _Core(os.fspath(socket) if socket is not None else None, on_event)
        self._core.owner = weakref.ref(self)
        _cores.add(self._core)

    # ---- context manager and lifetime ----

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection: the agent releases every lease of this client.

        Waiting acquires fail with UnavailableError (EDISCONNECTED); the
        client's leases turn invalid. Idempotent.
        """
        self._core.close()

    def __del__(self) -> None:
        core = getattr(self, "_core", None)
        if core is not None:
            try:
                core.close()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    @property
    def closed(self) -> bool:
        core = self._core
        return core.closed or core.closing or core.forked

    @property
    def socket(self) -> Optional[str]:
        """The socket path given (None: the default)."""
        return self._core.socket

    def ping(self) -> None:
        """One round trip to the agent; raises UnavailableError if it does not answer."""
        core = self._core
        with core.mutex:
            rc = _lib.client_ping(core.check_open())
            if rc == ErrorCode.EDISCONNECTED:
                core._dispatch()  # gone for good: noticed before the dispatcher does
            core.follow()  # the ping may have reconnected, while the agent restarted
        if rc != 0:
            raise error_for(rc)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<dlock.Client socket={self.socket!r} {state}>"

    # ---- acquire ----

    def acquire(
        self,
        name: Name,
        ttl: Optional[float] = None,
        wait: Optional[float] = 0,
        kind: Union[str, Kind] = Kind.EXCLUSIVE,
        permits: int = 0,
        reentrant: bool = False,
        owner: Optional[int] = None,
        max_hold: Optional[float] = None,
        progress: Optional[float] = None,
        on_event: Optional[EventCallback] = None,
    ) -> "Lease":
        """Acquires ``name`` and returns its Lease; blocks up to ``wait`` seconds.

        ``ttl``: the lease's TTL on Redis in seconds (None: the agent's
        default); ``wait``: 0 tries once (BusyError), None waits forever, else
        at most that long (LockTimeout). ``kind``: "exclusive", "shared"
        (readers) or "semaphore" (with ``permits`` >= 1). Without
        ``reentrant``, each acquire is an owner of its own: threads (and
        tasks) that acquire one name through one client take turns as
        clients do, and one that acquires a name it already holds waits for
        itself, as a threading.Lock taken twice would. ``reentrant``: the same
        ``owner`` (an int below 2**63, default the client) may take a name it
        holds again: the same Lease comes back with one more hold.
        ``max_hold`` and ``progress`` bound the hold (seconds; see
        Lease.touch()).

        The wait does not hold the client's mutex: other threads use the
        client meanwhile (release leases, acquire others).
        """
        core = self._core
        p = core.start(name, ttl, wait, kind, permits, reentrant, owner, max_hold, progress, on_event)
        assert p.event is not None
        guard = None if wait is None else wait + _WAIT_GUARD
        try:
            if threading.get_ident() == core.thread_ident:
                # From an event callback: the dispatcher thread itself must dispatch the answer.
                answered = core.wait_here(p, guard)
            else:
                answered = p.event.acquire(timeout=-1 if guard is None else guard)
        except BaseException:  # KeyboardInterrupt and the like: leave no waiter, no lease
            core.abandon(p)
            raise
        if not answered and core.closing:
            core.abandon(p)
            raise error_for(ErrorCode.EDISCONNECTED, "the client was closed", p.name)
        if not answered:
            core.abandon(p)  # a grant that came meanwhile is released
            if p.done and p.lease is None:
                raise p.error()
            raise error_for(
                ErrorCode.ENOANSWER,
                f"the agent did not answer within the wait plus {_WAIT_GUARD:g} s",
                p.name,
            )
        if p.lease is None:
            raise p.error()
        return p.lease

    async def aacquire(
        self,
        name: Name,
        ttl: Optional[float] = None,
        wait: Optional[float] = 0,
        kind: Union[str, Kind] = Kind.EXCLUSIVE,
        permits: int = 0,
        reentrant: bool = False,
        owner: Optional[int] = None,
        max_hold: Optional[float] = None,
        progress: Optional[float] = None,
        on_event: Optional[EventCallback] = None,
    ) -> "Lease":
        """acquire() for asyncio: the event loop does not wait for the agent's answer.

        It takes the client's mutex to start the acquire, which another thread's
        release(sync=True) or ping() on the same client holds for a round trip.

        Cancelling the task cancels the acquire in the agent (no waiter is
        left behind; a grant that crossed the cancel is released) and the
        CancelledError propagates.
        """
        core = self._core
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[None]" = loop.create_future()
        p = core.start(name, ttl, wait, kind, permits, reentrant, owner, max_hold, progress, on_event,
                       loop, fut)
        guard = None if wait is None else wait + _WAIT_GUARD
        try:
            if guard is None:
                await fut
            else:
                await asyncio.wait_for(fut, guard)
        except asyncio.TimeoutError:
            core.abandon(p)
            raise error_for(
                ErrorCode.ENOANSWER,
                f"the agent did not answer within the wait plus {_WAIT_GUARD:g} s",
                p.name,
            ) from None
        except BaseException:  # CancelledError above all
            core.abandon(p)
            raise
        if p.lease is None:
            raise p.error()
        return p.lease

    def acquire_many(
        self,
        names: Sequence[Name],
        ttl: Optional[float] = None,
        wait: Optional[float] = 0,
        kind: Union[str, Kind] = Kind.EXCLUSIVE,
        permits: int = 0,
        reentrant: bool = False,
        owner: Optional[int] = None,
        max_hold: Optional[float] = None,
        progress: Optional[float] = None,
        on_event: Optional[EventCallback] = None,
    ) -> "LeaseSet":
        """Acquires every name or none (a LeaseSet), taking them in one global order.

        The names are taken one at a time in byte-wise ascending order,
        whatever the caller's order, so clients asking for overlapping sets
        never deadlock; ``wait`` is one wait for the whole set. When a name
        cannot be taken, or one already taken is lost meanwhile, every name
        taken so far is released and the error raised (a wait that ran out is
        LockTimeout, also when it ran out on a name tried once).
        """
        encoded, order = _set_order(names)
        deadline = None if wait is None else time.monotonic() + wait
        taken: Dict[int, Lease] = {}
        try:
            for i in order:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    taken[i] = self.acquire(encoded[i], ttl, left, kind, permits, reentrant, owner,
                                            max_hold, progress, on_event)
                except BusyError as exc:
                    if wait:
                        raise LockTimeout(ErrorCode.ETIMEDOUT, exc.message, exc.lock_name) from None
                    raise
            return _finish_set(encoded, taken)
        except BaseException:
            _release_all(taken.values())
            raise

    async def aacquire_many(
        self,
        names: Sequence[Name],
        ttl: Optional[float] = None,
        wait: Optional[float] = 0,
        kind: Union[str, Kind] = Kind.EXCLUSIVE,
        permits: int = 0,
        reentrant: bool = False,
        owner: Optional[int] = None,
        max_hold: Optional[float] = None,
        progress: Optional[float] = None,
        on_event: Optional[EventCallback] = None,
    ) -> "LeaseSet":
        """acquire_many() for asyncio (cancellation as for aacquire())."""
        encoded, order = _set_order(names)
        deadline = None if wait is None else time.monotonic() + wait
        taken: Dict[int, Lease] = {}
        try:
            for i in order:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    taken[i] = await self.aacquire(encoded[i], ttl, left, kind, permits, reentrant,
                                                   owner, max_hold, progress, on_event)
                except BusyError as exc:
                    if wait:
                        raise LockTimeout(ErrorCode.ETIMEDOUT, exc.message, exc.lock_name) from None
                    raise
            return _finish_set(encoded, taken)
        except BaseException:
            _release_all(taken.values())
            raise

    def lock(self, name: Name, **kwargs: Any) -> "LockContext":
        """A context manager (with / async with) that acquires on entry and releases on exit.

        Takes acquire()'s keywords; ``wait`` defaults to None (wait forever).
        Without ``reentrant`` or ``owner``, the calling thread (or asyncio
        task) owns the lease, re-entrant: see LockContext.
        """
        kwargs.setdefault("wait", None)
        return LockContext(lambda: self, name, kwargs)


_SET_MAX = 64


def _set_order(names: Sequence[Name]) -> Tuple[List[bytes], List[int]]:
    if isinstance(names, (str, bytes)):
        raise TypeError("acquire_many() takes a sequence of names, not one name")
    encoded = [_encode(n) for n in names]
    if not 1 <= len(encoded) <= _SET_MAX:
        raise DlockError(ErrorCode.EINVAL, f"a set holds 1 to {_SET_MAX} names, not {len(encoded)}")
    if len(set(encoded)) != len(encoded):
        raise DlockError(ErrorCode.EINVAL, "a name appears twice in the set")
    return encoded, sorted(range(len(encoded)), key=lambda i: encoded[i])


def _finish_set(encoded: List[bytes], taken: Dict[int, "Lease"]) -> "LeaseSet":
    for lease in taken.values():
        if not lease.valid:
            raise LostError(ErrorCode.ELOST, "a member was lost before the last was granted",
                            lease.name, lease._lost_reason)
    return LeaseSet([taken[i] for i in range(len(encoded))])


def _release_all(leases: "Iterator[Lease] | Any") -> None:
    for lease in leases:
        try:
            lease.release()
        except DlockError:
            pass


class _ReleasedOnExit:
    """Leaving a ``with`` / ``async with`` block releases: a loss found then
    raises LostError, unless the block raised already."""

    __slots__ = ()

    def release(self) -> None:
        raise NotImplementedError

    def _releasable(self) -> bool:
        return True

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: "Optional[TracebackType]") -> None:
        if not self._releasable():
            return
        try:
            self.release()
        except LostError:
            if exc_type is None:
                raise

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: "Optional[TracebackType]") -> None:
        self.__exit__(exc_type, exc, tb)


class Lease(_ReleasedOnExit):
    """A held lock. Obtained from Client.acquire() (or dlock.lock()), never built directly.

    Use it as a context manager: the block's end releases it, and raises
    LostError if the lease was lost before (unless the block raised already).
    """

    __slots__ = (
        "_core",
        "_client",
        "_page",
        "_handle",
        "_holds",
        "_on_event",
        "_lost_reason",
        "_closed",
        "name",
        "fence",
        "kind",
        "__weakref__",
    )

    _core: _Core
    _client: Optional[Client]
    _page: threading.Lock
    _handle: Optional[int]
    _holds: int
    _on_event: Optional[EventCallback]
    _lost_reason: int
    _closed: bool
    name: str
    fence: int
    kind: Kind

    def __init__(self) -> None:  # pragma: no cover - documentation only
        raise TypeError("leases come from Client.acquire()")

    @classmethod
    def _new(cls, core: _Core, handle: int, on_event: Optional[EventCallback]) -> "Lease":
        self = object.__new__(cls)
        self._core = core
        self._client = core.owner() if core.owner is not None else None  # keeps the client open
        self._page = core.page_lock
        self._handle = handle
        self._holds = 1
        self._on_event = on_event
        self._lost_reason = 0
        self._closed = False
        raw: bytes = _lib.lease_name(handle)
        self.name = _decode(raw)
        self.fence = int(_lib.lease_fence(handle))
        self.kind = _KIND_PY.get(_lib.lease_kind(handle), Kind.EXCLUSIVE)
        return self

    # ---- reading the lease page: no mutex, no system call ----
    #
    # Each takes the client's page lock around loading the handle and the libdlock call,
    # as release() and close() forget a handle under it before libdlock frees it. A handle
    # once forgotten never comes back, so a released lease answers without the lock.

    @property
    def valid(self) -> bool:
        """Is the lease provably held right now? Some nanoseconds: call it before each
        side effect that needs the lock. False once released or lost."""
        if self._handle is None:
            return False
        page = self._page
        page.acquire()  # cheaper than a with statement, on this hot path
        try:
            h = self._handle
            return h is not None and _lease_valid(h) != 0
        finally:
            page.release()

    @property
    def remaining(self) -> float:
        """Seconds of validity left (0.0 when not valid)."""
        if self._handle is None:
            return 0.0
        page = self._page
        page.acquire()
        try:
            h = self._handle
            return float(_lib.lease_remaining_ns(h)) / 1e9 if h is not None else 0.0
        finally:
            page.release()

    def check(self) -> None:
        """Raises LostError if the lease is lost or past its deadline (DlockError if released)."""
        if self._handle is not None:
            page = self._page
            page.acquire()
            try:
                held = self._handle
                if held is not None and _lease_valid(held):
                    return
            finally:
                page.release()
        h = self._handle
        if h is None and not self._lost_reason:
            why = "the client was closed" if self._closed else "the lease was released"
            raise DlockError(ErrorCode.ENOTFOUND, why, self.name)
        raise self._lost_error()

    def _lost_error(self) -> LostError:
        if self._lost_reason:
            msg = f"the lease was lost: {_strerror(self._lost_reason)}"
        else:
            msg = "the lease's validity deadline passed"
        return LostError(ErrorCode.ELOST, msg, self.name, self._lost_reason)

    def touch(self) -> None:
        """Tells the agent the holder makes progress (leases acquired with ``progress``)."""
        if self._handle is None:
            return
        page = self._page
        page.acquire()
        try:
            h = self._handle
            if h is not None:
                _lib.lease_touch(h)
        finally:
            page.release()

    # ---- the rest, under the client's mutex ----

    @property
    def state(self) -> State:
        """"held", "jeopardy", "lost" (as last reported by the agent) or "released"."""
        with self._core.mutex:
            h = self._handle
            if h is None:
                return State.LOST if self._lost_reason else State.RELEASED
            return _STATE_PY.get(_lib.lease_state(h), State.LOST)

    @property
    def ttl(self) -> float:
        """The TTL the agent granted, in seconds."""
        with self._core.mutex:
            h = self._handle
            return _lib.lease_ttl_ms(h) / 1000.0 if h is not None else 0.0

    @property
    def holds(self) -> int:
        """Holds of a re-entered lease (1 for a lease never re-entered, 0 once released)."""
        return self._holds if self._handle is not None else 0

    @property
    def released(self) -> bool:
        return self._handle is None

    def release(self, *, sync: bool = False) -> None:
        """Releases the lease (one hold of a re-entered lease).

        Raises LostError if the lease was not valid up to the release (lost,
        past its deadline, or the agent gone): its ``reason`` says why. Without
        ``sync`` it does not wait for the agent (the release still takes
        effect before anything this client sends next); with ``sync=True`` it
        returns once the agent has given the lease up (one round trip, under
        the client's mutex). A second release raises DlockError (ENOTFOUND).
        """
        core = self._core
        with core.mutex:
            h = self._handle
            if h is None:
                why = "the client was closed" if self._closed else "the lease was released already"
                raise DlockError(ErrorCode.ENOTFOUND, why, self.name)
            self._holds -= 1
            if self._holds <= 0:
                with self._page:
                    self._handle = None
                core.leases.pop(h, None)
            rc = core.release_sync(h) if sync else int(_lib.lease_release(h))
            core.follow()  # a release may reconnect (sync) or find the connection broken
        if rc == 0:
            return
        if rc in (ErrorCode.ELOST, ErrorCode.EDISCONNECTED):
            if not self._lost_reason:
                self._lost_reason = ErrorCode.ELOST if rc == ErrorCode.ELOST else rc
            raise self._lost_error()
        raise error_for(rc, None, self.name)

    @property
    def client(self) -> Optional[Client]:
        """The client the lease was taken through."""
        return self._client

    # ---- context managers ----

    def __enter__(self) -> "Lease":
        return self

    def _releasable(self) -> bool:
        return self._handle is not None  # not released in the block already, nor closed

    async def __aenter__(self) -> "Lease":
        return self

    def __repr__(self) -> str:
        if self._handle is None:
            return f"<dlock.Lease {self.name!r} fence={self.fence} released>"
        return f"<dlock.Lease {self.name!r} fence={self.fence} {self.kind.value} valid={self.valid}>"


class LeaseSet(_ReleasedOnExit):
    """Several leases taken all or nothing (Client.acquire_many()), in the caller's order."""

    __slots__ = ("leases",)

    def __init__(self, leases: List[Lease]) -> None:
        self.leases: Tuple[Lease, ...] = tuple(leases)

    def __len__(self) -> int:
        return len(self.leases)

    def __iter__(self) -> Iterator[Lease]:
        return iter(self.leases)

    def __getitem__(self, key: Union[int, str]) -> Lease:
        if isinstance(key, int):
            return self.leases[key]
        for lease in self.leases:
            if lease.name == key:
                return lease
        raise KeyError(key)

    @property
    def valid(self) -> bool:
        """Is every member valid right now?"""
        return all(lease.valid for lease in self.leases)

    def check(self) -> None:
        """Raises LostError if a member is lost or past its deadline."""
        for lease in self.leases:
            lease.check()

    def release(self, *, sync: bool = False) -> None:
        """Releases every member; raises the first member's error (LostError) after all are."""
        first: Optional[DlockError] = None
        for lease in self.leases:
            if lease.released:
                continue
            try:
                lease.release(sync=sync)
            except DlockError as exc:
                first = first or exc
        if first is not None:
            raise first

    def __enter__(self) -> "LeaseSet":
        return self

    async def __aenter__(self) -> "LeaseSet":
        return self

    def __repr__(self) -> str:
        return f"<dlock.LeaseSet {[lease.name for lease in self.leases]!r}>"


class LockContext:
    """What dlock.lock() / dlock.alock() / Client.lock() return: acquires on entry.

    Unless given ``reentrant`` or ``owner``, the lease is owned by the calling
    thread (``with``) or asyncio task (``async with``), re-entrant, like a
    threading.RLock: threads and tasks of one process sharing a client
    exclude each other (they wait in turn), and one that holds the name may
    take it again.
    """

    __slots__ = ("_get_client", "_name", "_kwargs", "_lease", "_per_owner")

    def __init__(self, get_client: Callable[[], Client], name: Name, kwargs: Dict[str, Any]) -> None:
        self._get_client = get_client
        self._name = name
        self._kwargs = kwargs
        self._lease: Optional[Lease] = None
        self._per_owner = kwargs.get("owner") is None and "reentrant" not in kwargs

    def __enter__(self) -> Lease:
        kwargs = self._kwargs
        if self._per_owner:
            kwargs = dict(kwargs, reentrant=True, owner=threading.get_ident())
        self._lease = self._get_client().acquire(self._name, **kwargs)
        return self._lease

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: "Optional[TracebackType]") -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Lease:
        kwargs = self._kwargs
        if self._per_owner:
            task = asyncio.current_task()
            owner = id(task) if task is not None else threading.get_ident()
            kwargs = dict(kwargs, reentrant=True, owner=owner)
        self._lease = await self._get_client().aacquire(self._name, **kwargs)
        return self._lease

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: "Optional[TracebackType]") -> None:
        self.__exit__(exc_type, exc, tb)


# ---- the process-wide default client ----

_default: Optional[Client] = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process-wide client of dlock.lock() and dlock.alock(), opened on first use
    (``$DLOCK_SOCKET`` or /run/dlock/dlock.sock). A forked child gets a new one, and so
    does a process whose client lost its agent for good (an agent without a state
    directory went away); across an agent restart the client goes on."""
    global _default
    c = _default
    if c is None or c.closed or c._core.disconnected:
        with _default_lock:
            c = _default
            if c is None or c.closed or c._core.disconnected:
                # The agent went away for good: a new connection. The old client is
                # not closed here: its leases report LOST as usual, and it is closed once
                # nothing refers to it any more.
                c = _default = Client()
    return c


def _after_fork_in_child() -> None:
    global _default, _default_lock
    _default_lock = threading.Lock()
    _default = None
    for core in list(_cores):
        core.after_fork_in_child()


def _at_exit() -> None:
    for core in list(_cores):
        try:
            core.close()
        except Exception:  # pragma: no cover
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

import atexit  # noqa: E402

atexit.register(_at_exit)
