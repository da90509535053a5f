"""Loading libdlock and declaring the C functions the binding calls.

The library is found at ``$DLOCK_LIBRARY`` if set, else by
``ctypes.util.find_library("dlock")``, else as ``libdlock.so.0`` on the
dynamic loader's search path.

Two handles are opened on the same library: ``lib`` (ctypes.CDLL) releases
the GIL around each call and is used for everything that may block or take
more than a moment; ``fast`` (ctypes.PyDLL) keeps the GIL for the calls that
only read the shared lease page (a few nanoseconds in C), which saves the
GIL round trip on the hot path of ``Lease.valid``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int64,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any, Callable, Optional

__all__ = [
    "AcquireOptions",
    "LockSpec",
    "ACQUIRE_CB",
    "EVENT_CB",
    "lib",
    "fast",
    "path",
    "has_cancel",
]


class AcquireOptions(Structure):
    """struct dlock_acquire_options."""

    _fields_ = [
        ("ttl_ms", c_uint32),
        ("wait_ms", c_int64),
        ("flags", c_uint32),
        ("max_hold_ms", c_uint32),
        ("progress_ms", c_uint32),
    ]


class LockSpec(Structure):
    """struct dlock_lock_spec."""

    _fields_ = [
        ("kind", c_uint32),
        ("permits", c_uint32),
        ("owner", c_uint64),
    ]


# void (*)(dlock_client *, int status, dlock_lease *, void *arg)
ACQUIRE_CB = CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_void_p)
# void (*)(dlock_client *, dlock_lease *, dlock_state, int reason, void *arg)
EVENT_CB = CFUNCTYPE(None, c_void_p, c_void_p, c_int, c_int, c_void_p)


def _find() -> str:
    env = os.environ.get("DLOCK_LIBRARY")
    if env:
        return env
    found = ctypes.util.find_library("dlock")
    return found or "libdlock.so.0"


path = _find()

try:
    lib: Any = ctypes.CDLL(path)
    fast: Any = ctypes.PyDLL(path)
except OSError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"dlock: cannot load libdlock ({path!r}): {exc}. Install libdlock "
        "(the dlock package, or build the C tree), or set DLOCK_LIBRARY to the "
        "path of libdlock.so.0."
    ) from exc


def _declare(handle: Any, name: str, restype: Any, *argtypes: Any) -> Any:
    fn = getattr(handle, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_OPTS = POINTER(AcquireOptions)
_SPEC = POINTER(LockSpec)

# Client.
client_open = _declare(lib, "dlock_client_open", c_int, POINTER(c_void_p), c_char_p)
client_close = _declare(lib, "dlock_client_close", None, c_void_p)
client_fd = _declare(lib, "dlock_client_fd", c_int, c_void_p)
client_dispatch = _declare(lib, "dlock_client_dispatch", c_int, c_void_p)
client_ping = _declare(lib, "dlock_client_ping", c_int, c_void_p)
client_set_event_cb = _declare(lib, "dlock_client_set_event_cb", None, c_void_p, EVENT_CB, c_void_p)
client_strerror = _declare(lib, "dlock_client_strerror", c_char_p, c_void_p, c_int)
strerror = _declare(lib, "dlock_strerror", c_char_p, c_int)
state_name = _declare(lib, "dlock_state_name", c_char_p, c_int)

# Acquire and release.
acquire_spec_async = _declare(
    lib, "dlock_lease_acquire_spec_async", c_int, c_void_p, c_char_p, _OPTS, _SPEC, ACQUIRE_CB, c_void_p
)
lease_release = _declare(lib, "dlock_lease_release", c_int, c_void_p)
lease_release_sync = _declare(lib, "dlock_lease_release_sync", c_int, c_void_p)

acquire_cancel: Optional[Callable[..., int]]
try:
    acquire_cancel = _declare(lib, "dlock_lease_acquire_cancel", c_int, c_void_p, ACQUIRE_CB, c_void_p)
except AttributeError:  # a libdlock older than the cancel call
    acquire_cancel = None
has_cancel = acquire_cancel is not None

# Accessors that read the lease handle itself: under the client's mutex.
lease_name = _declare(lib, "dlock_lease_name", c_char_p, c_void_p)
lease_kind = _declare(lib, "dlock_lease_kind", c_int, c_void_p)
lease_holds = _declare(lib, "dlock_lease_holds", c_uint32, c_void_p)
lease_state = _declare(lib, "dlock_lease_state", c_int, c_void_p)
lease_fence = _declare(lib, "dlock_lease_fence", c_uint64, c_void_p)
lease_ttl_ms = _declare(lib, "dlock_lease_ttl_ms", c_uint32, c_void_p)

# Lease page readers, safe from any thread while the handle lives; they keep the GIL.
lease_valid = _declare(fast, "dlock_lease_valid", c_int, c_void_p)
lease_remaining_ns = _declare(fast, "dlock_lease_remaining_ns", c_int64, c_void_p)
lease_deadline_ns = _declare(fast, "dlock_lease_deadline_ns", c_int64, c_void_p)
lease_touch = _declare(fast, "dlock_lease_touch", None, c_void_p)
