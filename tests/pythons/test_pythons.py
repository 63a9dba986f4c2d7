"""The unit and integration tiers once more, on a Python the host does not have: Debian 13's
3.13, in a trixie root of its own (testbed.pythons: debootstrap, its python3 and OpenSSH, a venv
with mpiwait's dependencies and test extras from PyPI, cached). mpiwait is pip-installed there
(editable, from this checkout), then pytest runs as it does here, under chroot, sharing the host's
network: the loopback sshd labs and the network-namespace beds work as on the host, with the
root's own OpenSSH 10.0. Strict mode passes through: in CI nothing may skip inside either.

Left out there, each about another axis than Python's version and run on the host: the oldest
dependencies (a venv of the host's Python), other OpenSSH releases (roots of their own), the
sdist and wheel build, and whatever is marked slow (docs/testing.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import testbed
from testbed import pythons

pytestmark = [pytest.mark.slow, testbed.needs("python-releases")]

# Not run in the other Python (see above): files of tests/integration/ by what they are about.
ELSEWHERE = (
    "tests/integration/test_oldest_dependencies.py",
    "tests/integration/test_modern_sshd.py",
    "tests/integration/test_dist.py",
)


@pytest.mark.parametrize("suite", sorted(pythons.PYTHONS))
def test_unit_and_integration_tiers_pass_on_the_release_python(suite: str, tmp_path: Path) -> None:
    version = pythons.PYTHONS[suite]
    venv = pythons.VENV
    pytest_argv = [
        f"{venv}/bin/python", "-m", "pytest", "-p", "no:cacheprovider", "-rfEs",
        "-m", "not slow", "tests/unit", "tests/integration",
        *(f"--ignore={path}" for path in ELSEWHERE),
    ]  # fmt: skip
    install = f"{venv}/bin/pip install --quiet --no-deps --no-build-isolation --no-index -e ."
    strict = "1" if testbed.strict_mode() else "0"
    done = pythons.run(
        suite,
        ["/bin/sh", "-c", f'{install} && exec "$@"', "run", *pytest_argv],
        tmp_path / "scratch",
        env={"MPIWAIT_TEST_STRICT": strict},
    )
    out = done.stdout
    tail = out[-6000:]
    assert re.search(rf"^platform linux -- Python {re.escape(version)}\.\d+", out, re.M), tail
    assert done.returncode == 0, tail
    summary = out.rstrip().splitlines()[-1]
    assert re.search(r"\b\d{3,} passed\b", summary), tail
    assert not re.search(r"\b(failed|error|errors)\b", summary), tail
