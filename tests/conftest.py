"""Shared fixtures. The multi-host test bed lives in tests/testbed.py (see its docstring)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import testbed

_BED_PROBLEM = testbed.missing_requirements()

# Usable as a decorator or in `pytestmark`; tests marked `@pytest.mark.root` and tests using the
# `bed` fixture are skipped for the same reason automatically.
requires_root_netns = pytest.mark.skipif(
    _BED_PROBLEM is not None, reason=f"multi-host test bed unavailable: {_BED_PROBLEM}"
)

requires_openmpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or shutil.which("orted") is None,
    reason="Open MPI (mpirun, orted) not installed",
)
requires_mpich = pytest.mark.skipif(
    shutil.which("mpiexec.hydra") is None, reason="MPICH (mpiexec.hydra) not installed"
)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _BED_PROBLEM is not None and item.get_closest_marker("root") is not None:
        pytest.skip(f"multi-host test bed unavailable: {_BED_PROBLEM}")


@pytest.fixture(scope="session")
def _stale_beds_cleaned() -> None:
    if _BED_PROBLEM is None:
        testbed.cleanup_stale()


@pytest.fixture
def bed(tmp_path: Path, _stale_beds_cleaned: None):
    """Factory: ``b = bed(3, port=2222, user="mpiuser", ...)`` returns a TestBed that is up
    (same keywords as TestBed; a free /24 is picked unless ``index=`` is given). Every bed made
    is torn down after the test, pass or fail."""
    if _BED_PROBLEM is not None:
        pytest.skip(f"multi-host test bed unavailable: {_BED_PROBLEM}")
    made: list[testbed.TestBed] = []

    def make(n: int = 3, **kw) -> testbed.TestBed:
        kw.setdefault("workdir", tmp_path / f"bed{len(made)}")
        b = testbed.TestBed(n, **kw)
        made.append(b)
        b.up()
        return b

    yield make
    for b in reversed(made):
        b.down()
