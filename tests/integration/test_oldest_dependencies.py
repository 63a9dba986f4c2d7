"""The oldest releases pyproject.toml allows of paramiko, click and tenacity still do the job.

The rest of the suite runs against the newest releases (what `pip install` picks today); users
whose images already carry an older paramiko get the floor instead, and a floor nobody runs is a
guess. This runs the tests that exercise mpiwait through its dependencies (paramiko's handshake
and error shapes, click's parsing and messages, tenacity's backoff, and real logins to a
loopback sshd end to end) once more, in a second pytest, with the interpreter of the virtualenv
that scripts/install-test-oldest made (`.ci/run` runs it) and this checkout on its path.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
from pathlib import Path

import pytest
import testbed

ROOT = Path(__file__).resolve().parents[2]
# What reaches paramiko, click and tenacity without namespaces or an MPI: the paramiko error
# shapes probe/attempt.py relies on, the CLI, the waiting loop, and whole runs against a real sshd.
TESTS = (
    "tests/integration/test_probes_paramiko.py",
    "tests/unit/test_cli.py",
    "tests/unit/test_waiter.py",
    "tests/integration/test_integration.py",
    "tests/unit/test_launch.py",
)
INNER_TIMEOUT = 900.0  # seconds; the selection takes about one minute here


def floors() -> dict[str, str]:
    """name -> the lowest version pyproject.toml allows, for every dependency (read from the
    installed package's metadata, which scripts/test refreshes on every run)."""
    found = {}
    for req in importlib.metadata.requires("mpiwait") or ():
        if ";" in req:  # an extra's (test) requirement
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", req)
        floor = re.search(r">=\s*([^,\s]+)", req)
        assert name and floor, f"dependency without a '>=' floor: {req!r}"
        found[name[0].lower()] = floor[1]
    return found


@pytest.fixture(scope="module")
def oldest_python() -> Path:
    venv = testbed.require("oldest-deps").path
    assert venv is not None
    return venv / "bin" / "python"


def installed_versions(python: Path, names: list[str]) -> dict[str, str]:
    code = "import importlib.metadata as m, sys\nfor n in sys.argv[1:]: print(n, m.version(n))\n"
    out = subprocess.run(
        [str(python), "-c", code, *names], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split() for line in out.splitlines())


def test_the_venv_holds_exactly_the_floors(oldest_python: Path) -> None:
    # A venv left from older floors would test the wrong releases: install-test-oldest
    # rebuilds it whenever pyproject.toml's floors change.
    want = floors()
    have = installed_versions(oldest_python, sorted(want))
    for name, floor in want.items():
        assert _release(have[name]) == _release(floor), (name, have[name], floor)


@pytest.mark.slow  # a pytest of its own over the tests that reach the dependencies
def test_suite_passes_on_the_oldest_allowed_releases(oldest_python: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONHOME", None)
    proc = subprocess.run(
        [
            str(oldest_python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'inner'}",
            *TESTS,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=INNER_TIMEOUT,
    )
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, tail
    assert re.search(r"^\d+ passed", proc.stdout.splitlines()[-1]), tail  # it found the tests


def _release(version: str) -> tuple[int, ...]:
    """3.4.1 and 3.4.1.0 alike; 8.1 and 8.1.0 alike."""
    parts = [int(p) for p in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)
