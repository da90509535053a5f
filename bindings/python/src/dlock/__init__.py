"""dlock: distributed locks on Redis through the host's dlock agent.

    import dlock

    with dlock.lock("orders:42", ttl=30, wait=5) as lease:
        lease.check()            # raises dlock.LostError once the lock is lost
        write(order, fence=lease.fence)

The binding wraps libdlock (libdlock.so.0) with ctypes; see docs/bindings/python.md.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from ._client import (
    Client,
    EventCallback,
    Kind,
    Lease,
    LeaseSet,
    LockContext,
    Name,
    State,
    default_client,
)
from .errors import (
    BusyError,
    DeniedError,
    DlockError,
    ErrorCode,
    HeldError,
    InvalidNameError,
    KindError,
    LimitError,
    LockTimeout,
    LostError,
    UnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Lease",
    "LeaseSet",
    "LockContext",
    "Kind",
    "State",
    "EventCallback",
    "Name",
    "ErrorCode",
    "DlockError",
    "BusyError",
    "LockTimeout",
    "LostError",
    "DeniedError",
    "UnavailableError",
    "InvalidNameError",
    "LimitError",
    "HeldError",
    "KindError",
    "lock",
    "alock",
    "default_client",
]


def lock(
    name: Name,
    ttl: Optional[float] = None,
    wait: Optional[float] = None,
    kind: Union[str, Kind] = Kind.EXCLUSIVE,
    **kwargs: Any,
) -> LockContext:
    """``with dlock.lock(name, ttl=30, wait=5) as lease:`` on the process-wide default client.

    Seconds throughout; ``wait`` None (the default) waits until granted, 0
    tries once. Takes Client.acquire()'s other keywords. Leaving the block
    releases the lease, and raises LostError if it was lost meanwhile (unless
    the block raised already).

    Unless given ``reentrant`` or ``owner``, the calling thread owns the lease
    and may take it again (like threading.RLock), and the process's other
    threads wait for it like any other holder's.
    """
    kwargs.update(ttl=ttl, wait=wait, kind=kind)
    return LockContext(default_client, name, kwargs)


def alock(
    name: Name,
    ttl: Optional[float] = None,
    wait: Optional[float] = None,
    kind: Union[str, Kind] = Kind.EXCLUSIVE,
    **kwargs: Any,
) -> LockContext:
    """``async with dlock.alock(name, ...) as lease:``: lock() for asyncio.

    Unless given ``reentrant`` or ``owner``, the calling task owns the lease
    (re-entrant); the process's other tasks wait for it.
    """
    kwargs.update(ttl=ttl, wait=wait, kind=kind)
    return LockContext(default_client, name, kwargs)
