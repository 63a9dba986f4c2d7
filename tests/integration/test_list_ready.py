"""``mpiwait --list-ready`` as horovodrun's --host-discovery-script, against real sshd hosts.

Worker hosts are network namespaces with sshd (tests/testbed/): some ready, one whose sshd
is down (refused), one whose name does not resolve yet, one that comes up while Horovod's own
discovery code (horovod.runner.elastic.discovery, when installed) keeps calling the script.
Where Horovod is not installed, the same contract is checked as Horovod documents it: exit 0,
one ``host[:slots]`` line per available host, empty output allowed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testbed


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    # the cache of recent passes, private to this test
    return testbed.mpiwait_env(XDG_RUNTIME_DIR=str(runtime), **extra)


def _list(bed, tmp_path: Path, *args: str, **kw) -> testbed.Result:
    """``mpiwait --list-ready ARGS`` (``bed`` None: here); ``kw`` as testbed.run()'s."""
    return testbed.run(bed, ["--list-ready", *args], env=_env(tmp_path), timeout=60, **kw)


def _horovod_contract(stdout: str) -> dict[str, int]:
    """What Horovod's HostDiscoveryScript makes of the output (its parser, restated)."""
    found: dict[str, int] = {}
    for line in set(stdout.strip().split("\n")):
        if ":" in line:
            host, slots = line.split(":")
            found[host] = int(slots)
        elif line:
            found[line] = 1
    return found


def _logins(bed, i: int) -> int:
    return bed.hosts[i].sshd_log.read_text(errors="replace").count("Accepted publickey")


@pytest.mark.root
def test_lists_only_hosts_that_accept_a_login_in_horovods_form(bed, tmp_path: Path) -> None:
    b = bed(4)
    b.stop_sshd(2)  # w3: its address refuses the SSH port
    b.unpublish(3)  # w4: no DNS record yet
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("w1 slots=2\nw2:3\nw3 slots=1\nw4\n")

    r = _list(b, tmp_path, "--hostfile", str(hostfile))
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["w1:2", "w2:3"], r.stdout
    assert r.stderr == "", r.stderr  # run every second: silent unless something is wrong
    assert _horovod_contract(r.stdout) == {"w1": 2, "w2": 3}
    assert [_logins(b, i) for i in range(2)] == [1, 1]

    # Called again at once: the two are listed from the memory of the last call, no login.
    r = _list(b, tmp_path, "--hostfile", str(hostfile))
    assert sorted(r.stdout.splitlines()) == ["w1:2", "w2:3"], r.stdout
    assert [_logins(b, i) for i in range(2)] == [1, 1]

    # A host whose name goes away (its pod deleted) is no longer listed, memory or not.
    b.unpublish(1)
    r = _list(b, tmp_path, "--hostfile", str(hostfile))
    assert r.stdout == "w1:2\n", r.stdout
    b.publish(1)

    b.start_sshd(2)
    b.publish(3)
    r = _list(b, tmp_path, "--hostfile", str(hostfile))
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["w1:2", "w2:3", "w3:1", "w4"], r.stdout

    # Every host ready and remembered: no login, and not even paramiko is loaded.
    logins = [_logins(b, i) for i in range(4)]
    r = _list(b, tmp_path, "--hostfile", str(hostfile), python=["-X", "importtime"])
    assert sorted(r.stdout.splitlines()) == ["w1:2", "w2:3", "w3:1", "w4"], r.stdout
    assert [_logins(b, i) for i in range(4)] == logins
    assert not [ln for ln in r.stderr.splitlines() if ln.endswith("| paramiko")]


@pytest.mark.root
def test_source_listing_nobody_yet_is_empty_output_and_exit_0(bed, tmp_path: Path) -> None:
    b = bed(1)
    etc_mpi = tmp_path / "etc-mpi"  # the operator's ConfigMap, without a hostfile
    etc_mpi.mkdir()
    discover = etc_mpi / "discover_hosts.sh"
    discover.write_text("#!/bin/sh\n")  # mpi-operator's file while no worker runs
    r = _list(b, tmp_path, etc_mpi=etc_mpi)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    # The operator adds the worker once its pod runs: listed as soon as it accepts a login.
    discover.write_text(f"#!/bin/sh\necho {b.names[0]}\n")
    r = _list(b, tmp_path, etc_mpi=etc_mpi)
    assert (r.returncode, r.stdout) == (0, f"{b.names[0]}\n"), r.stderr


@pytest.mark.root
def test_key_the_workers_refuse_is_named_and_the_others_still_listed(bed, tmp_path) -> None:
    b = bed(2)
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    # w2 accepts only the other key; mpiwait offers the bed's.
    conf = b.hosts[1].sshd_config
    text = conf.read_text().replace(f"{b.authorized_keys}\n", f"{other}.pub\n")
    conf.write_text(text)
    os.chmod(f"{other}.pub", 0o644)
    b.stop_sshd(1)
    b.start_sshd(1)
    r = _list(b, tmp_path, "--hosts", ",".join(b.names))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{b.names[0]}\n"
    assert f"warning: {b.names[1]} not listed: Permission denied (publickey)" in r.stderr


def test_bad_input_still_fails_with_one_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    r = _list(None, tmp_path, "--hostfile", missing)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"mpiwait: error: hostfile {missing}: does not exist\n"
    default = _list(None, tmp_path, "--hostfile", missing + "1", "--discover-hosts", missing)
    assert default.returncode == 2 and "does not exist" in default.stderr
    key = tmp_path / "id_unreadable"
    key.write_text("not a key\n")
    key.chmod(0o600)
    r = _list(None, tmp_path, "--hosts", "127.0.0.1", "-p", "1", "-i", str(key))
    assert r.returncode == 3 and r.stdout == "", r.stderr
    assert r.stderr.startswith(f"mpiwait: error: identity file {key} is not a private key")
    r = _list(None, tmp_path, "--hosts", "h1", command=["true"])
    assert r.returncode == 2 and "--list-ready takes no COMMAND" in r.stderr


@pytest.mark.root
def test_horovods_own_discovery_sees_hosts_as_they_accept_logins(
    bed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    testbed.require("horovod")
    from horovod.runner.elastic import discovery

    b = bed(3)
    b.stop_sshd(1)
    b.unpublish(2)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{n} slots=2\n" for n in b.names))
    env = _env(tmp_path)
    script = " ".join(
        shlex.quote(a)
        for a in b.launcher_cmd(
            [sys.executable, "-m", "mpiwait", "--list-ready", "--hostfile", str(hostfile)]
        )
    )
    # Horovod runs the script through a shell, in its own environment.
    for name in ("XDG_RUNTIME_DIR", "PYTHONPATH"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("MPIWAIT_TESTBED", b.bed_id)
    manager = discovery.HostManager(discovery.HostDiscoveryScript(script, 1))
    manager.update_available_hosts()  # the first call: a failure here would end horovodrun
    assert manager.current_hosts.host_slots == {b.names[0]: 2}

    b.start_sshd(1, delay=1.0)  # w2 comes up late; w3 gets its DNS record later still
    deadline = time.monotonic() + 30
    while b.names[1] not in manager.current_hosts.host_slots and time.monotonic() < deadline:
        manager.update_available_hosts()
    assert manager.current_hosts.host_slots == {b.names[0]: 2, b.names[1]: 2}
    assert b.listening(1)  # listed only once its sshd took a login
    b.publish(2)
    manager.update_available_hosts()
    assert manager.current_hosts.host_slots == {n: 2 for n in b.names}
    assert manager.current_hosts.host_assignment_order[:2] == b.names[:2]


@pytest.mark.root
def test_remembers_in_dev_shm_as_another_uid_on_a_read_only_root(as_user, tmp_path) -> None:
    # As a pod with readOnlyRootFilesystem and an arbitrary uid: no $XDG_RUNTIME_DIR, / (and
    # so /tmp) read-only; /dev/shm is a tmpfs of its own, writable by anyone.
    import socket

    wrap, drop = as_user("nobody")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    second = socket.create_server(("127.0.0.2", port))
    shm = tmp_path / "shm"
    shm.mkdir(mode=0o1777)
    shm.chmod(0o1777)
    env = {k: v for k, v in _env(tmp_path).items() if k not in ("XDG_RUNTIME_DIR", "TMPDIR")}
    script = f'mount --bind {shm} /dev/shm && mount -o remount,bind,ro / && exec "$@"'
    ro_root = [*wrap, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "ro-root",
               *drop]  # fmt: skip
    args = ["--list-ready", "--check", "tcp", "--hosts", "127.0.0.1,127.0.0.2:2", "-p", str(port)]
    try:
        for _ in range(2):
            r = testbed.run(None, args, wrapper=ro_root, env=env, timeout=60, cwd="/")
            assert (r.returncode, r.stderr) == (0, ""), r
            assert r.stdout == "127.0.0.1\n127.0.0.2:2\n"
    finally:
        listener.close()
        second.close()
    uid = 65534
    memory = list((shm / f"mpiwait-{uid}").glob("ready-*.json"))
    assert len(memory) == 1 and memory[0].stat().st_uid == uid
    assert '"127.0.0.1"' in memory[0].read_text()
