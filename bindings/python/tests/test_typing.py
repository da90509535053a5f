"""The installed package is typed (py.typed) and passes mypy --strict."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

import dlock


def test_mypy_strict() -> None:
    pytest.importorskip("mypy")
    cache = os.environ.get("DLOCK_PY_MYPY_CACHE") or tempfile.mkdtemp(prefix="dlock-mypy-")
    pkg_dir = os.path.dirname(dlock.__file__)
    assert os.path.exists(os.path.join(pkg_dir, "py.typed"))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", cache, "-p", "dlock"],
        capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
