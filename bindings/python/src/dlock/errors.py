"""Error codes and exceptions of the dlock binding."""

from __future__ import annotations

import enum
from typing import Dict, Optional, Type

__all__ = [
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
    "error_for",
]


class ErrorCode(enum.IntEnum):
    """The DLOCK_E* codes of libdlock (include/dlock.h); the wire protocol carries the same."""

    OK = 0
    EINVAL = -1
    ENOMEM = -2
    ECONNECT = -3
    EDISCONNECTED = -4
    EPROTO = -5
    EVERSION = -6
    EBUSY = -7
    ETIMEDOUT = -8
    ENAMETOOLONG = -9
    EBADNAME = -10
    ELIMIT = -11
    ENOTFOUND = -12
    ELOST = -13
    EUNAVAIL = -14
    EBACKEND = -15
    EOOM = -16
    EREADONLY = -17
    ELOADING = -18
    EAUTH = -19
    ESHUTDOWN = -20
    EHOLDLIMIT = -21
    ESTALLED = -22
    ECLOCK = -23
    ENOQUORUM = -24
    EDENIED = -25
    ENOANSWER = -26
    EHELD = -27
    EFAILOVER = -28
    EKIND = -29
    ECANCELED = -30
    ERESTART = -31


def _code(value: int) -> "ErrorCode | int":
    try:
        return ErrorCode(value)
    except ValueError:
        return value


class DlockError(Exception):
    """A libdlock call or the agent refused a request.

    ``code`` is the DLOCK_E* code (an :class:`ErrorCode`, or a plain int for a
    code this binding does not know), ``name`` its symbolic name ("EBUSY"),
    ``message`` the agent's words (``dlock_client_strerror()``), and
    ``lock_name`` the lock name the request was about, when there was one.
    """

    code: "ErrorCode | int"
    message: str
    lock_name: Optional[str]

    def __init__(self, code: int, message: Optional[str] = None, lock_name: Optional[str] = None) -> None:
        self.code = _code(code)
        self.message = message if message is not None else _default_message(code)
        self.lock_name = lock_name
        Exception.__init__(self, self.message)

    @property
    def name(self) -> str:
        """The code's symbolic name, such as "EBUSY"."""
        return self.code.name if isinstance(self.code, ErrorCode) else str(self.code)

    def __str__(self) -> str:
        where = f"{self.lock_name}: " if self.lock_name is not None else ""
        return f"{where}{self.message} ({self.name})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, {self.message!r}, lock_name={self.lock_name!r})"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild, (type(self), int(self.code), self.message, self.lock_name))


def _rebuild(cls: Type[DlockError], code: int, message: str, lock_name: Optional[str]) -> DlockError:
    return cls(code, message, lock_name)


def _default_message(code: int) -> str:
    # Imported late: errors.py must load without the library for type checkers.
    from . import _lib

    raw: Optional[bytes] = _lib.strerror(code)
    return raw.decode("utf-8", "replace") if raw else "unknown error"


class BusyError(DlockError):
    """EBUSY: the lock is held elsewhere and the acquire did not wait (wait=0)."""


class LockTimeout(DlockError, TimeoutError):
    """ETIMEDOUT: the wait ran out before the lock was free."""


class LostError(DlockError):
    """ELOST: the lease was lost (or its deadline passed) before it was released.

    ``reason`` tells why, when known: the code the agent gave with its LOST
    event (EUNAVAIL, EHOLDLIMIT, EDISCONNECTED, ...), else ELOST.
    """

    reason: "ErrorCode | int"

    def __init__(
        self,
        code: int = ErrorCode.ELOST,
        message: Optional[str] = None,
        lock_name: Optional[str] = None,
        reason: Optional[int] = None,
    ) -> None:
        super().__init__(code, message, lock_name)
        self.reason = _code(reason if reason else ErrorCode.ELOST)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild_lost, (int(self.code), self.message, self.lock_name, int(self.reason)))


def _rebuild_lost(code: int, message: str, lock_name: Optional[str], reason: int) -> LostError:
    return LostError(code, message, lock_name, reason)


class DeniedError(DlockError):
    """EDENIED: the agent's policy does not let this user use the name."""


class UnavailableError(DlockError):
    """The agent or Redis cannot serve the request now.

    EUNAVAIL, ENOQUORUM (Redis), ECONNECT, EDISCONNECTED, ENOANSWER,
    ESHUTDOWN (the agent).
    """


class InvalidNameError(DlockError, ValueError):
    """EBADNAME, ENAMETOOLONG: no lock can have this name."""


class LimitError(DlockError):
    """ELIMIT: a lease, waiter or renewal limit of the agent was reached."""


class HeldError(DlockError):
    """EHELD: this client already holds the name (and the acquire was not re-entrant)."""


class KindError(DlockError):
    """EKIND: the name is held as another kind of lock (or another permit count)."""


_CLASSES: Dict[int, Type[DlockError]] = {
    ErrorCode.EBUSY: BusyError,
    ErrorCode.ETIMEDOUT: LockTimeout,
    ErrorCode.ELOST: LostError,
    ErrorCode.EDENIED: DeniedError,
    ErrorCode.EUNAVAIL: UnavailableError,
    ErrorCode.ENOQUORUM: UnavailableError,
    ErrorCode.ECONNECT: UnavailableError,
    ErrorCode.EDISCONNECTED: UnavailableError,
    ErrorCode.ENOANSWER: UnavailableError,
    ErrorCode.ESHUTDOWN: UnavailableError,
    ErrorCode.EBADNAME: InvalidNameError,
    ErrorCode.ENAMETOOLONG: InvalidNameError,
    ErrorCode.ELIMIT: LimitError,
    ErrorCode.EHELD: HeldError,
    ErrorCode.EKIND: KindError,
}


def error_for(code: int, message: Optional[str] = None, lock_name: Optional[str] = None) -> DlockError:
    """The exception for a DLOCK_E* code, of the class that code maps to."""
    cls = _CLASSES.get(code, DlockError)
    return cls(code, message, lock_name)
