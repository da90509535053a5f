"""Fixtures: a real redis-server and a real dlockd per test, in a fresh temp dir.

Binaries: $DLOCKD, $DLOCKCTL and $DLOCK_LIBRARY, else under $DLOCK_BUILD_DIR
(agent/dlockd, tools/dlockctl, libclient/libdlock.so.0); redis-server from
$REDIS_SERVER or the PATH.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, TypeVar

import pytest

_BUILD = os.environ.get("DLOCK_BUILD_DIR", "")


def _path(env: str, rel: str) -> str:
    value = os.environ.get(env)
    if value:
        return value
    if _BUILD:
        return os.path.join(_BUILD, rel)
    raise RuntimeError(f"set DLOCK_BUILD_DIR (a C build tree) or {env}")


DLOCKD = _path("DLOCKD", "agent/dlockd")
DLOCKCTL = _path("DLOCKCTL", "tools/dlockctl")
os.environ["DLOCK_LIBRARY"] = _path("DLOCK_LIBRARY", "libclient/libdlock.so.0")
REDIS_SERVER = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "redis-server"

import dlock  # noqa: E402  (after DLOCK_LIBRARY is set)
import dlock._client  # noqa: E402
import redis  # noqa: E402

#: The bound of every test, past which the run is stopped with a traceback.
TEST_LIMIT_S = 120
#: The deadline of every wait for a state, generous for a busy 2-core machine.
DEADLINE_S = 30.0

T = TypeVar("T")


def wait_until(pred: Callable[[], T], what: str, timeout: float = DEADLINE_S) -> T:
    """Polls pred() until it returns something true; fails the test at the deadline."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def _can_connect(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class Stack:
    """redis-server + dlockd in one temp dir; killed at the end of the test."""

    def __init__(self, root: Path, config: Optional[str] = None) -> None:
        self.root = root
        self.redis_sock = str(root / "redis.sock")
        self.sock = str(root / "dlock.sock")
        self.config = config
        self.redis_proc: Optional[subprocess.Popen[bytes]] = None
        self.agent_proc: Optional[subprocess.Popen[bytes]] = None
        self.clients: List[dlock.Client] = []
        self.redis = redis.Redis(unix_socket_path=self.redis_sock)

    def start_redis(self) -> None:
        log = open(self.root / "redis.log", "wb")
        self.redis_proc = subprocess.Popen(
            [REDIS_SERVER, "--port", "0", "--unixsocket", self.redis_sock, "--save", "",
             "--appendonly", "no", "--dir", str(self.root)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

        def ready() -> bool:
            assert self.redis_proc is not None and self.redis_proc.poll() is None, "redis-server died"
            try:
                return bool(self.redis.ping())
            except redis.exceptions.ConnectionError:
                return False

        wait_until(ready, "redis-server to answer PING")

    def start_agent(self) -> None:
        args = [DLOCKD, "-s", self.sock, "-r", f"unix:{self.redis_sock}"]
        if self.config is not None:
            conf = self.root / "dlockd.conf"
            conf.write_text(self.config)
            args += ["-c", str(conf)]
        log = open(self.root / "dlockd.log", "ab")
        self.agent_proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL)
        log.close()

        def ready() -> bool:
            assert self.agent_proc is not None and self.agent_proc.poll() is None, \
                f"dlockd died: {(self.root / 'dlockd.log').read_text()}"
            if not (_can_connect(self.sock) and _can_connect(str(self.root / "status.sock"))):
                return False
            # Ready when its Redis links are up: the command one and the notice one
            # (a wait relies on release notices).
            nodes = self.status()["nodes"]
            return all(n["connected"] and n["subscribed"] for n in nodes)

        wait_until(ready, "dlockd to accept and to be connected to Redis")

    def status(self) -> Dict[str, Any]:
        """`dlockctl status --json`."""
        args = [DLOCKCTL, "-s", self.sock, "status", "--json"]
        out = subprocess.run(args, check=True, capture_output=True, timeout=DEADLINE_S).stdout
        status: Dict[str, Any] = json.loads(out)
        return status

    def client(self, **kwargs: Any) -> dlock.Client:
        c = dlock.Client(self.sock, **kwargs)
        self.clients.append(c)
        return c

    def leases(self, pattern: Optional[str] = None) -> List[Dict[str, Any]]:
        """`dlockctl leases --json [PATTERN]`."""
        args = [DLOCKCTL, "-s", self.sock, "leases", "--json"] + ([pattern] if pattern else [])
        out = subprocess.run(args, check=True, capture_output=True, timeout=DEADLINE_S).stdout
        leases: List[Dict[str, Any]] = json.loads(out)["leases"]
        return leases

    def names(self, pattern: Optional[str] = None) -> List[str]:
        return sorted(entry["name"] for entry in self.leases(pattern))

    def wait_names(self, pattern: str, names: List[str]) -> None:
        """Waits until the agent's leases matching pattern are exactly names (a release that
        does not wait for the agent reaches it a moment later)."""
        wait_until(lambda: self.names(pattern) == sorted(names),
                   f"the agent's leases {pattern!r} to be {sorted(names)}")

    def waiters(self, name: str) -> int:
        """The agent's local waiters for name (0 when nobody holds it)."""
        return max((entry["waiters"] for entry in self.leases(name)), default=0)

    def wait_waiters(self, name: str, n: int) -> None:
        wait_until(lambda: self.waiters(name) == n, f"{n} waiter(s) for {name!r} in the agent")

    def kill_agent(self, sig: int = signal.SIGKILL) -> None:
        assert self.agent_proc is not None
        self.agent_proc.send_signal(sig)
        self.agent_proc.wait(timeout=DEADLINE_S)

    def stop(self) -> None:
        for c in self.clients:
            c.close()
        self.redis.close()
        for proc in (self.agent_proc, self.redis_proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=DEADLINE_S)


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    """Every test is bounded: past TEST_LIMIT_S the run stops with every thread's traceback."""
    faulthandler.dump_traceback_later(TEST_LIMIT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def tmp_root() -> Iterator[Path]:
    # A short path: a Unix socket path must fit in 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="dlock-py-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _make_stack(root: Path, config: Optional[str]) -> Stack:
    stack = Stack(root, config)
    try:
        stack.start_redis()
        stack.start_agent()
    except BaseException:
        stack.stop()
        raise
    return stack


@pytest.fixture
def stack(tmp_root: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """A running redis-server + dlockd; ``@pytest.mark.agent_config("...")`` gives dlockd an INI."""
    marker = request.node.get_closest_marker("agent_config")
    s = _make_stack(tmp_root, marker.args[0] if marker else None)
    yield s
    s.stop()


@pytest.fixture
def default_socket(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Points the process-wide default client (dlock.lock()) at the test's agent."""
    monkeypatch.setenv("DLOCK_SOCKET", stack.sock)
    dlock._client._default = None
    yield stack.sock
    c = dlock._client._default
    dlock._client._default = None
    if c is not None:
        c.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "agent_config(text): an INI file for dlockd")


def child_env() -> Dict[str, str]:
    """The environment of a Python child process that imports dlock."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
