"""What mpiwait must never do: run the discover file unasked, print key material, pass the
remote command through a local shell, write where it was not told to, need root or a
writable HOME.

Every run in this file (and in test_faults, test_signals, test_soak) goes through
testbed.Proc.finish, which fails the test on a traceback or on any base64 line of any
private key (or any passphrase) a test made; the tests here add the runs most likely to leak.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import testbed

pytestmark = [pytest.mark.root, testbed.needs("netns")]

PASSPHRASE = "correct horse battery staple 7319"


def keygen(path: Path, *extra: str, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", path, *extra], check=True
    )
    testbed.register_key(path)
    return path


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every file and directory under ``roots``: type, mode, owner, size, mtime."""
    out: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [".", *dirnames, *filenames]:
                p = os.path.normpath(os.path.join(dirpath, name))
                st = os.lstat(p)
                out[p] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns)
    return out


def changed(before: dict, after: dict) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


# ---------------------------------------------------------------------------------------------
# discover_hosts.sh is data unless --discover-exec


def test_discover_file_is_never_run_without_discover_exec(bed, tmp_path) -> None:
    b = bed(2)
    b.stop_sshd(1)
    marker = tmp_path / "marker"
    # Run, the file would execute this "interpreter" (its #! line), which leaves the marker;
    # read as data, the #! line is a comment and the echo lines list w1 and w2.
    interpreter = tmp_path / "leave-marker"
    interpreter.write_text(f"#!/bin/sh\ntouch {marker}\necho w1\necho w2\n")
    interpreter.chmod(0o755)
    etc_mpi = tmp_path / "etc-mpi"
    etc_mpi.mkdir()
    discover = etc_mpi / "discover_hosts.sh"
    discover.write_text(f"#!{interpreter}\necho w1\necho w2\n")
    discover.chmod(0o555)

    # w2 comes up 2.5 s in: mpiwait re-reads the file (as data) a few times meanwhile
    b.start_sshd(1, delay=2.5)
    r = testbed.run(b, ["--timeout", "30"], etc_mpi=etc_mpi, command=["echo", "ran"])
    assert r.returncode == 0 and r.stdout == "ran\n", r
    assert "/etc/mpi/discover_hosts.sh (2 hosts)" in r.stderr, r
    assert not marker.exists()

    # a line that is not `echo HOST` is an error, and still nothing runs
    discover.chmod(0o755)
    discover.write_text(f"#!/bin/sh\necho w1\ntouch {marker}\n")
    discover.chmod(0o555)
    r = testbed.run(b, ["--timeout", "30"], etc_mpi=etc_mpi)
    assert r.returncode == 2 and "--discover-exec" in r.stderr, r
    assert not marker.exists()

    # control: run on purpose, the file does leave the marker
    discover.chmod(0o755)
    discover.write_text(f"#!{interpreter}\necho w1\necho w2\n")
    r = testbed.run(b, ["--timeout", "30", "--discover-exec"], etc_mpi=etc_mpi)
    assert r.returncode == 0, r
    assert marker.exists()


# ---------------------------------------------------------------------------------------------
# no key material, no passphrase


def test_no_key_material_or_passphrase_in_any_output(bed, tmp_path) -> None:
    b = bed(1)
    testbed.register_secret(PASSPHRASE)
    keys = tmp_path / "keys"
    keys.mkdir()
    locked = keygen(keys / "locked", passphrase=PASSPHRASE)
    good = keygen(keys / "good")
    lines = good.read_text().splitlines()
    broken = {
        "truncated": good.read_text()[:300],
        "one-line-changed": "\n".join([*lines[:2], lines[2].replace("A", "B"), *lines[3:]]),
        "no-header": "\n".join(lines[1:]),
        "public-half": Path(f"{good}.pub").read_text(),
    }
    for name, text in broken.items():
        (keys / name).write_text(text)
        (keys / name).chmod(0o600)
    wrong = keygen(keys / "wrong")  # a good key the worker does not accept
    runs = {
        name: testbed.start(b, ["--hosts", "w1", "-i", str(keys / name), *fmt])
        for name in ["locked", *broken, "wrong"]
        for fmt in ([], ["--log-format", "json"])
    }
    # a private key where a host list or an ssh config is expected
    runs["as-hostfile"] = testbed.start(b, ["--hostfile", str(good)])
    runs["as-discover"] = testbed.start(b, ["--discover-hosts", str(good)])
    runs["as-ssh-config"] = testbed.start(b, ["-F", str(good), "--hosts", "w1"])
    runs["dry-run"] = testbed.start(b, ["--hosts", "w1", "-i", str(good), "--dry-run"])
    results = {name: p.finish(30) for name, p in runs.items()}  # finish() checks every output
    assert results["locked"].returncode == 3 and "passphrase" in results["locked"].stderr
    for name in broken:
        assert results[name].returncode == 3, results[name]
    assert results["wrong"].returncode == 3 and "Permission denied" in results["wrong"].stderr
    for name in ("as-hostfile", "as-discover", "as-ssh-config"):
        assert results[name].returncode == 2, results[name]
    assert results["dry-run"].returncode == 0, results["dry-run"]
    everything = "".join(r.stdout + r.stderr for r in results.values())
    for secret in [PASSPHRASE, *testbed.key_secret_lines(good), *testbed.key_secret_lines(locked)]:
        assert secret not in everything
    assert wrong.exists()


# ---------------------------------------------------------------------------------------------
# --remote-command goes to the worker as given


def _private_tmp(tmp_path: Path, bed: testbed.TestBed, owner: str = "root") -> Path:
    """A directory to mount over /tmp, holding a copy of the bed's key and an ssh config that
    points at it (the bed's own files live under the real /tmp, which it hides)."""
    pw = pwd.getpwnam(owner)
    t = tmp_path / "private-tmp"
    (t / "k").mkdir(parents=True)
    t.chmod(0o1777)
    shutil.copyfile(bed.key_path, t / "k" / "id_key")
    (t / "k" / "id_key").chmod(0o600)
    (t / "k" / "ssh_config").write_text(
        "Host *\n"
        f"    User {bed.user}\n"
        "    IdentityFile /tmp/k/id_key\n"
        "    StrictHostKeyChecking accept-new\n"  # tempts a write of ~/.ssh/known_hosts
        "    UserKnownHostsFile ~/.ssh/known_hosts\n"
    )
    for p in (t / "k", t / "k" / "id_key", t / "k" / "ssh_config"):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    return t


def test_remote_command_is_sent_as_given_never_through_a_local_shell(bed, tmp_path) -> None:
    b = bed(1)
    t = _private_tmp(tmp_path, b)
    (t / "local-home-of-the-launcher" / ".ssh").mkdir(parents=True)  # writable, as root's is
    name = f"mpiwait-remote-{uuid.uuid4().hex}"
    remote_file = Path("/tmp") / name  # the worker shares this machine's /tmp; mpiwait does not
    command = f"printf '%s|' \"$HOME\" 'a b' > /tmp/{name}"
    try:
        before = snapshot(t)
        r = testbed.run(
            b,
            ["-F", "/tmp/k/ssh_config", "--hosts", "w1", "--remote-command", command],
            wrapper=testbed.wrap(binds=[(t, "/tmp")], cwd="/tmp"),
            env=testbed.mpiwait_env(HOME="/tmp/local-home-of-the-launcher"),
        )
        assert r.returncode == 0, r
        # run by the worker's shell: its $HOME (root's), the quoting intact
        assert remote_file.read_text() == "/root|a b|"
        # nothing by a local shell: no file in mpiwait's own /tmp, no local $HOME anywhere;
        # and, as root with a writable HOME and accept-new, no known_hosts written either
        assert changed(before, snapshot(t)) == []
        assert "local-home-of-the-launcher" not in r.stdout + r.stderr
    finally:
        remote_file.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# unprivileged, read-only HOME, writes only what it is told to


def test_unprivileged_read_only_home_writes_only_where_told(bed, tmp_path) -> None:
    user = "mpiuser"
    b = bed(2, user=user)  # (creates the user if the machine has none)
    pw = pwd.getpwnam(user)
    t = _private_tmp(tmp_path, b, owner=user)
    work = t / "work"  # the cwd
    work.mkdir()
    os.chown(work, pw.pw_uid, pw.pw_gid)
    termination_log = t / "termination-log"
    termination_log.write_text("")
    os.chown(termination_log, pw.pw_uid, pw.pw_gid)
    root_only_key = t / "k" / "root-only-key"
    shutil.copyfile(b.key_path, root_only_key)
    root_only_key.chmod(0o600)  # owned by root: mpiuser cannot read it
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    for p in (home, home / ".ssh"):
        os.chown(p, pw.pw_uid, pw.pw_gid)
        p.chmod(0o700)
    mounts = testbed.wrap(
        binds=[(t, "/tmp"), (home, pw.pw_dir)],
        readonly=[pw.pw_dir],
        user=user,
        cwd="/tmp/work",
    )
    common = ["-F", "/tmp/k/ssh_config", "--termination-log", "/tmp/termination-log"]

    def go(*args: str, command=()) -> testbed.Result:
        return testbed.run(b, [*common, *args], command=command, wrapper=mounts, ssh_config=False)

    # control: the harness sees writes, and HOME really is read-only for this user
    probe = b.run(
        [*mounts, "sh", "-c", 'id -u; echo x > /tmp/seen; touch "$HOME/x" 2>/dev/null || echo ro'],
        env=testbed.mpiwait_env(),
        ssh_config=False,
    )
    assert probe.stdout.split() == [str(pw.pw_uid), "ro"], probe
    assert (t / "seen").exists()
    (t / "seen").unlink()

    roots = (t, home)
    before = snapshot(*roots)
    ok = go("--hosts", "w1,w2", command=["id", "-un"])
    assert ok.returncode == 0 and ok.stdout == f"{user}\n", ok
    assert changed(before, snapshot(*roots)) == []

    b.stop_sshd(1)
    late = go("--hosts", "w1,w2", "--timeout", "2")
    assert late.returncode == 124, late
    assert changed(before, snapshot(*roots)) == [str(termination_log)]
    assert termination_log.read_text().startswith("timed out after 2.0s")

    # identity file it cannot read: exit 3 at once, saying whose uid could not read it
    before = snapshot(*roots)
    unreadable = go("--hosts", "w1", "-i", "/tmp/k/root-only-key", "--timeout", "60")
    assert unreadable.returncode == 3, unreadable
    assert unreadable.elapsed < 10, unreadable
    assert f"/tmp/k/root-only-key is not readable by uid {pw.pw_uid}" in unreadable.stderr
    assert "waiting for" not in unreadable.stderr
    assert changed(before, snapshot(*roots)) == [str(termination_log)]


def test_snapshot_helper_sees_changes(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    before = snapshot(tmp_path)
    time.sleep(0.01)
    (tmp_path / "a" / "f").write_text("x")
    assert changed(before, snapshot(tmp_path)) == [str(tmp_path / "a"), str(tmp_path / "a" / "f")]
