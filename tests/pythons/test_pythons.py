"""The unit and integration tiers once more, on a Python the host does not have: Debian 13's
3.13, in a trixie root of its own (testbed.pythons: debootstrap, its python3 and OpenSSH, a venv
with mpiwait's dependencies and test extras from PyPI, cached). mpiwait is pip-installed there
(editable, from this checkout), then pytest runs as it does here, under chroot, sharing the host's
network: the loopback sshd labs and the network-namespace beds work as on the host, with the
root's own OpenSSH 10.0. Strict mode passes through: in CI nothing may skip inside either.

What runs there is PATHS below; the rest is about other axes than Python's version and runs on
the host's Python only (docs/testing.md).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import testbed
from testbed import pythons

pytestmark = [pytest.mark.slow, testbed.needs("python-releases")]

# What runs on the other Python: the unit tier, and the integration tests that drive mpiwait's
# Python side against a real sshd (the CLI, the waiting loop, paramiko's errors, signals, name
# lookups, --list-ready, a uid without passwd entry). The rest of tests/integration/ is about
# other axes (OpenSSH releases, the oldest dependencies, the sdist and wheel, network faults and
# soaks through the same code) and runs on the host's Python only: docs/testing.md.
PATHS = (
    "tests/unit",
    "tests/integration/test_integration.py",
    "tests/integration/test_probes_paramiko.py",
    "tests/integration/test_signals.py",
    "tests/integration/test_dns_timeout.py",
    "tests/integration/test_list_ready.py",
    "tests/integration/test_uid_without_passwd.py",
)
# Horovod's own discovery script: Horovod builds from source (no wheels; a C++ toolchain and
# cmake in the root) and is a third party's code, not mpiwait's, so it runs on the host only.
HOST_ONLY = (
    "tests/integration/test_list_ready.py::test_horovods_own_discovery_sees_hosts_as_they_accept_logins",
)


@pytest.mark.parametrize("suite", sorted(pythons.PYTHONS))
def test_unit_and_integration_tiers_pass_on_the_release_python(
    suite: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    version = pythons.PYTHONS[suite]
    venv = pythons.VENV
    pytest_argv = [f"{venv}/bin/python", "-m", "pytest", "-p", "no:cacheprovider", "-rfEs", *PATHS]
    pytest_argv += [f"--deselect={test}" for test in HOST_ONLY]
    install = f"{venv}/bin/pip install --quiet --no-deps --no-build-isolation --no-index -e ."
    # The inner session's temporary directory has this one's name, as on a fresh machine (both
    # /tmp/pytest-of-root/pytest-0): its end-of-session leak check must not take this session's
    # processes for its own, as it once did (it killed the container tier's dockerd). Only under
    # /tmp, the root's own tmpfs, and not in the checkout (bound into the root): elsewhere the
    # inner pytest could empty a directory of ours.
    basetemp = tmp_path_factory.getbasetemp().resolve()
    if basetemp.is_relative_to("/tmp") and not basetemp.is_relative_to(pythons.REPO.resolve()):
        pytest_argv += [f"--basetemp={basetemp}"]
        install = f"mkdir -p {basetemp.parent} && {install}"  # --basetemp makes no parents
    strict = "1" if testbed.strict_mode() else "0"
    ours = subprocess.Popen(
        ["sh", "-c", "sleep 3600; true", str(tmp_path / "a-process-of-the-host-session")],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        done = pythons.run(
            suite,
            ["/bin/sh", "-c", f'{install} && exec "$@"', "run", *pytest_argv],
            tmp_path / "scratch",
            env={"MPIWAIT_TEST_STRICT": strict},
        )
        assert ours.poll() is None, "the inner session killed a process of this one"
    finally:
        os.killpg(ours.pid, signal.SIGKILL)  # the shell and its sleep
        ours.wait()
    out = done.stdout
    tail = out[-6000:]
    assert re.search(rf"^platform linux -- Python {re.escape(version)}\.\d+", out, re.M), tail
    assert done.returncode == 0, tail
    summary = out.rstrip().splitlines()[-1]
    assert re.search(r"\b\d{3,} passed\b", summary), tail
    assert not re.search(r"\b(failed|errors?|skipped)\b", summary), tail
