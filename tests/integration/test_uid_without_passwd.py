"""A uid without a passwd entry (OpenShift's arbitrary uids, ``runAsUser``), run for real.

OpenSSH's ssh looks up its own user before anything else and exits ("No user exists for uid
N"), so an mpirun started at such a uid dies on its first ssh. mpiwait must say so before
waiting when COMMAND is an MPI launch over ssh (exit 126), and must still wait and log in with
its own probes (paramiko needs no passwd entry) when it runs without COMMAND, as an
initContainer at any uid.

Each case runs ``python -m mpiwait`` as a real process at a uid this machine has no entry for
(setpriv, as root), next to a real ssh at the same uid to show the premise holds here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import testbed
from testbed import Lab

from mpiwait.errors import ExitCode

ADDRESS = "127.0.0.2"

# root: runs a process at another uid
pytestmark = testbed.needs("root", "loopback", "ssh")


UID = testbed.unnamed_uid()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the unnamed uid may traverse (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="mpiwait-nopasswd-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
def at_uid(as_user):
    """argv prefix that runs a command at UID (no passwd entry), with this interpreter and the
    checkout reachable (as_user's mount namespace, when a directory on the way is closed)."""
    wrap, _ = as_user("nobody")
    return [
        *wrap,
        "setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups",
        "env", f"HOME=/tmp/mpiwait-no-home-{UID}",
    ]  # fmt: skip


def mpiwait_at_uid(
    at_uid: list[str], args: list[str], command: list[str] = (), path: str | None = None
) -> testbed.Result:
    env = testbed.mpiwait_env(**({"PATH": path} if path is not None else {}))
    return testbed.run(None, args, command=command, wrapper=at_uid, env=env, cwd="/", timeout=120)


def test_ssh_itself_refuses_to_run_at_that_uid(at_uid: list[str]) -> None:
    # The premise, with the installed OpenSSH client: it fails before reading any config.
    result = subprocess.run(
        [*at_uid, "ssh", "-G", "w1"], capture_output=True, text=True, timeout=60, cwd="/",
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 255
    assert f"No user exists for uid {UID}" in result.stderr


def test_an_mpi_launch_over_ssh_is_refused_before_waiting(
    at_uid: list[str], open_dir: Path
) -> None:
    # An mpirun on PATH that would leave a mark if it ever ran; ssh is the real client.
    bin_dir = open_dir / "bin"
    bin_dir.mkdir(mode=0o755)
    bin_dir.chmod(0o755)
    mark = open_dir / "mpirun-ran"
    mpirun = bin_dir / "mpirun"
    mpirun.write_text(f"#!/bin/sh\ntouch {mark}\n")
    mpirun.chmod(0o755)
    path = f"{bin_dir}:{testbed.require('ssh').path.parent}:/usr/bin:/bin"
    # No host answers at ADDRESS's port 9: a wait would run into the 5 s deadline (124).
    result = mpiwait_at_uid(
        at_uid,
        ["--hosts", ADDRESS, "-p", "9", "--timeout", "5"],
        ["mpirun", "-np", "2", "true"],
        path=path,
    )
    assert result.returncode == ExitCode.NOT_EXECUTABLE, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == (
        f"mpiwait: error: mpirun starts processes on the workers with ssh, which refuses to run "
        f"as uid {UID}: it has no passwd entry (ssh: No user exists for uid {UID})"
    ), result
    assert lines[1].startswith("mpiwait: hint: run the launcher as a uid with a passwd entry")
    assert "nss_wrapper" in lines[1] and "initContainer without COMMAND" in lines[1]
    assert len(lines) == 2 and "waiting for" not in result.stderr
    assert not mark.exists()


def test_without_command_it_waits_and_logs_in_at_that_uid(
    at_uid: list[str], open_dir: Path, tmp_path: Path
) -> None:
    # The initContainer: any uid, mpiwait's own probes log in (paramiko needs no passwd entry).
    key = testbed.keygen(open_dir / "id_ed25519")
    os.chown(key, UID, UID)  # a key of its own, 0600, as the ssh-auth volume gives it
    config = open_dir / "ssh_config"
    config.write_text(
        f"Host *\n    User root\n    IdentityFile {key}\n    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n    GlobalKnownHostsFile /dev/null\n"
    )
    with Lab(tmp_path / "lab") as lab:
        server = lab.sshd(ADDRESS, authorized=[key])
        testbed.register_key(key)  # never in the output (finish() checks)
        result = mpiwait_at_uid(
            at_uid,
            ["-F", str(config), "--hosts", ADDRESS, "-p", str(server.port), "--timeout", "60"],
        )
        accepted = server.log().count("Accepted publickey for root")
    assert result.returncode == ExitCode.OK, result
    assert "1 host ready in" in result.stderr, result
    # ssh cannot be asked about the config at this uid: the start notes say what decides.
    assert "cannot run at this uid (No user exists for uid" in result.stderr, result
    assert accepted >= 1
    output = result.stdout + result.stderr
    assert not any(line in output for line in testbed.key_secret_lines(key))
