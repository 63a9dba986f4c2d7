"""Tests of the multi-host test bed itself (tests/testbed/): real sshd, real ssh, real MPI."""

from __future__ import annotations

import random
import signal
import string
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import testbed
from testbed import _registry, _sys  # this file tests the library itself

pytestmark = [pytest.mark.root, testbed.needs("netns")]

SSH_FAST_FAIL = ["-o", "ConnectTimeout=2", "-o", "ConnectionAttempts=1"]


def ssh(bed: testbed.TestBed, host: str, *cmd: str, opts=(), **kw) -> subprocess.CompletedProcess:
    return bed.run(["ssh", "-F", str(bed.ssh_config), *opts, host, *cmd], timeout=30, **kw)


def leftovers(bed_id: str) -> list[str]:
    """Namespaces, links and live (non-zombie) processes of a bed that still exist."""
    out = [n for n in _sys.list_ns() + _sys.list_links() if _registry.belongs(n, bed_id)]
    for pid in _sys.tagged_pids(bed_id):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(f"pid {pid}")
    return out


def test_three_hosts_login_with_their_own_hostname(bed):
    b = bed(3)  # (how fast a bed comes up is not this test's business)
    assert [h.name for h in b.hosts] == ["w1", "w2", "w3"]
    assert len({h.addr for h in b.hosts}) == 3
    assert b.launcher_addr.endswith(".1") and b.subnet.startswith("10.123.")
    for h in b.hosts:
        r = ssh(b, h.name, "hostname")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == h.short
    # the same through the bind-mounted /etc/ssh/ssh_config, no -F
    r = b.run(["ssh", "w2", "hostname"])
    assert (r.returncode, r.stdout.strip()) == (0, "w2"), r.stderr


def test_launcher_context_resolves_from_files_only(bed):
    b = bed(2)
    r = b.run(["getent", "hosts", "w1"])
    assert r.returncode == 0 and r.stdout.split()[0] == b.hosts[0].addr
    t0 = time.monotonic()
    r = b.run(["getent", "hosts", "no-such-host.example.com"])
    assert r.returncode == 2 and time.monotonic() - t0 < 2  # no DNS server to wait for
    r = b.run(["cat", "/etc/nsswitch.conf"])
    assert "hosts: files\n" in r.stdout and "dns" not in r.stdout.split("hosts:")[-1]
    # the machine's own hostname resolves, to loopback
    import socket

    r = b.run(["getent", "hosts", socket.gethostname()])
    assert r.returncode == 0 and r.stdout.startswith("127.0.0.1")
    # workers see every worker, and the machine's hostname as the launcher
    r = b.ns_run(1, ["getent", "hosts", "w1", socket.gethostname()])
    assert r.stdout.split()[0] == b.hosts[0].addr and b.launcher_addr in r.stdout
    assert b.ns_run(1, ["hostname"]).stdout.strip() == "w2"


def test_delayed_sshd_start(bed):
    delay = 3.0
    b = bed(2, start=False)
    r = ssh(b, "w1", "true", opts=SSH_FAST_FAIL)
    assert r.returncode == 255 and "Connection refused" in r.stderr
    t0 = time.monotonic()
    b.start_sshd(0, delay=delay)
    # Returns without waiting for the delay (a bound for "did not wait", not a speed measure;
    # the delay is long enough that the checks below run before it is over, even under load).
    assert time.monotonic() - t0 < delay / 2
    assert b.sshd_running(0) and not b.listening(0)
    r = ssh(b, "w1", "true", opts=SSH_FAST_FAIL)
    assert r.returncode == 255 and "Connection refused" in r.stderr
    b.wait_listening([0], timeout=delay + 10)
    assert time.monotonic() - t0 >= delay - 0.1
    assert ssh(b, "w1", "hostname").stdout.strip() == "w1"
    b.start_sshd(1)  # immediate start waits until it listens
    assert ssh(b, "w2", "hostname").stdout.strip() == "w2"


def test_stop_sshd_refuses_then_start_again(bed):
    b = bed(1)
    b.stop_sshd(0)
    assert not b.sshd_running(0)
    r = ssh(b, "w1", "true", opts=SSH_FAST_FAIL)
    assert r.returncode == 255 and "Connection refused" in r.stderr
    b.start_sshd(0)
    assert ssh(b, "w1", "hostname").stdout.strip() == "w1"


def test_blackhole_times_out_then_unblackhole_works(bed):
    b = bed(2)
    b.blackhole(0)
    b.blackhole(0)  # idempotent
    t0 = time.monotonic()
    r = ssh(b, "w1", "true", opts=SSH_FAST_FAIL)
    took = time.monotonic() - t0
    assert r.returncode == 255 and "timed out" in r.stderr, r.stderr
    assert 1.8 < took < 15  # ssh's ConnectTimeout=2 did the ending; the rest is load slack
    assert ssh(b, "w2", "hostname").stdout.strip() == "w2"  # others unaffected
    b.unblackhole(0)
    assert ssh(b, "w1", "hostname").stdout.strip() == "w1"


def test_silent_listener_banner_timeout(bed):
    b = bed(1)
    with pytest.raises(testbed.BedError, match="stop_sshd"):
        b.start_silent_listener(0)
    b.stop_sshd(0)
    b.start_silent_listener(0)
    t0 = time.monotonic()
    r = ssh(b, "w1", "true", opts=SSH_FAST_FAIL)
    assert r.returncode == 255 and "banner exchange" in r.stderr, r.stderr
    assert time.monotonic() - t0 > 1.8
    b.stop_silent_listener(0)
    assert not b.listening(0)
    b.start_sshd(0)
    assert ssh(b, "w1", "hostname").stdout.strip() == "w1"


def test_link_down_unreachable_then_up(bed):
    b = bed(2)
    assert ssh(b, "w1", "true").returncode == 0  # warm the ARP cache
    b.link_down(0)
    r = ssh(b, "w1", "true", opts=SSH_FAST_FAIL)
    assert r.returncode == 255
    assert "timed out" in r.stderr or "No route to host" in r.stderr, r.stderr
    b.link_up(0)
    assert ssh(b, "w1", "hostname").stdout.strip() == "w1"


def test_publish_unpublish_seen_by_a_running_launcher(bed):
    b = bed(2, published=False)
    r = b.run(["getent", "hosts", "w2"])
    assert r.returncode == 2
    r = ssh(b, "w2", "true", opts=SSH_FAST_FAIL)
    assert r.returncode == 255 and "Could not resolve hostname" in r.stderr
    # a launcher already running sees the name appear: the hosts file is edited in place
    waiter = b.popen(
        ["sh", "-c", "until getent hosts w2; do sleep 0.05; done"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)
    assert waiter.poll() is None
    b.publish(1)
    out, _ = waiter.communicate(timeout=5)
    assert waiter.returncode == 0 and out.split()[0] == b.hosts[1].addr
    assert ssh(b, "w2", "hostname").stdout.strip() == "w2"
    assert b.run(["getent", "hosts", "w1"]).returncode == 2  # w1 still unpublished
    b.unpublish(1)
    assert b.run(["getent", "hosts", "w2"]).returncode == 2


def test_fqdn_names(bed):
    names = [f"job-worker-{k}.job.ns.svc" for k in range(2)]
    b = bed(2, names=names)
    assert [h.short for h in b.hosts] == ["job-worker-0", "job-worker-1"]
    assert ssh(b, names[1], "hostname").stdout.strip() == "job-worker-1"
    assert ssh(b, "job-worker-0", "hostname").stdout.strip() == "job-worker-0"
    r = b.run(["getent", "hosts", names[0]])
    assert r.stdout.split() == [b.hosts[0].addr, names[0], "job-worker-0"]


def test_non_root_user_on_port_2222(bed):
    b = bed(2, user="mpiuser", port=2222)
    st = b.key_path.stat()
    import pwd

    pw = pwd.getpwnam("mpiuser")
    assert (st.st_uid, st.st_mode & 0o777) == (pw.pw_uid, 0o600)
    r = ssh(b, "w1", "id -un; hostname", as_user="mpiuser")
    assert r.stdout.split() == ["mpiuser", "w1"], r.stderr
    r = ssh(b, "w2", "id -un")  # root launcher, `User mpiuser` from the bed's ssh_config
    assert r.stdout.strip() == "mpiuser", r.stderr
    assert "Port 2222" in b.ssh_config.read_text()
    r = b.run(["ssh", "-p", "22", "w1", "true"], as_user="mpiuser")
    assert r.returncode == 255 and "refused" in r.stderr


def test_ecdsa_p521_pem_key_and_operator_style_mounts(bed, tmp_path):
    b = bed(1, key_type="ecdsa-p521-pem")
    assert b.key_path.read_text().startswith("-----BEGIN EC PRIVATE KEY-----")
    assert b.pubkey_path.read_text().startswith("ecdsa-sha2-nistp521 ")
    assert ssh(b, "w1", "hostname").stdout.strip() == "w1"
    # as mpi-operator mounts it: the key as ~/.ssh/id_rsa, no IdentityFile in any config
    home_ssh = b.write_ssh_auth(tmp_path / "ssh-auth")
    etc_mpi = b.write_etc_mpi(tmp_path / "etc-mpi")
    opts = [
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
    ]
    r = b.run(["ssh", *opts, "w1", "hostname"], ssh_config=False, home_ssh=home_ssh)
    assert r.stdout.strip() == "w1", r.stderr
    r = b.run(
        [
            "sh",
            "-c",
            "cat /etc/mpi/hostfile; /etc/mpi/discover_hosts.sh; "
            "stat -c %a /etc/mpi/hostfile /etc/mpi/discover_hosts.sh",
        ],
        etc_mpi=etc_mpi,
    )
    assert r.stdout.split("\n")[:5] == ["w1 slots=1", "w1", "444", "555", ""], r.stdout
    # "permissions too open" is reproducible
    bad = b.write_ssh_auth(tmp_path / "ssh-auth-0640", key_mode=0o640)
    r = b.run(["ssh", *opts, "w1", "true"], ssh_config=False, home_ssh=bad)
    assert r.returncode == 255 and "too open" in r.stderr


def test_set_view_hides_and_adds_files_for_one_worker_only(bed, tmp_path):
    b = bed(2)
    folder = tmp_path / "image"
    folder.mkdir()
    for name in ("daemon", "other"):
        (folder / name).write_text("#!/bin/sh\necho here\n")
        (folder / name).chmod(0o755)
    b.set_view(1, hide=[folder / "daemon"], add={"/usr/local/sbin/other": folder / "other"})
    probe = f"ls {folder}; command -v other; echo end"
    assert ssh(b, "w1", probe).stdout == "daemon\nother\nend\n"
    assert ssh(b, "w2", probe).stdout == "other\n/usr/local/sbin/other\nend\n"
    gone = ssh(b, "w2", str(folder / "daemon"))
    assert gone.returncode == 127 and "No such file or directory" in gone.stderr, gone
    b.set_view(1)  # the machine's filesystem again
    assert ssh(b, "w2", probe).stdout == "daemon\nother\nend\n"


def test_two_beds_coexist(bed):
    b1, b2 = bed(1), bed(1)
    assert b1.subnet != b2.subnet and b1.bridge != b2.bridge
    with pytest.raises(testbed.BedError, match="in use"):
        testbed.TestBed(1, workdir=b1.workdir / "x", index=b1.index).up()
    assert ssh(b1, "w1", "hostname").stdout.strip() == "w1"
    assert ssh(b2, "w1", "hostname").stdout.strip() == "w1"


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def test_down_leaves_nothing(tmp_path):
    b = testbed.TestBed(2, workdir=tmp_path / "bed")
    try:
        _down_leaves_nothing(b, tmp_path)
    finally:
        b.down()  # also when an assertion above failed: this test must not leak what it tests


def _down_leaves_nothing(b: testbed.TestBed, tmp_path: Path) -> None:
    b.up()
    bed_id = b.bed_id
    b.stop_sshd(1)
    b.start_silent_listener(1)
    session = b.popen(["ssh", "-F", str(b.ssh_config), "w1", "sleep 300"])
    stray = b.popen(["sh", "-c", "sleep 300 & sleep 300"])  # a launcher and a child of it
    b.wait_listening([0])
    wait_until(  # the ssh session has started on w1
        lambda: b.ns_run(0, ["pgrep", "-f", "sleep 300"]).returncode == 0, 30, "session on w1"
    )
    etc_mpi_existed = Path("/etc/mpi").exists()
    b.run(["true"], etc_mpi=tmp_path)
    assert leftovers(bed_id)
    t0 = time.monotonic()
    b.down()
    # A hang guard, not a speed measure: down() gives each process group 1 s before SIGKILL.
    assert time.monotonic() - t0 < 30
    assert leftovers(bed_id) == []
    assert session.poll() is not None and stray.poll() is not None
    assert not (testbed.STATE_ROOT / "beds" / f"{bed_id}.json").exists()
    claims = _registry.shared_dirs_load()
    assert all(bed_id not in users for users in claims.values())
    if not etc_mpi_existed and "/etc/mpi" not in claims:  # (a concurrent bed may hold it)
        assert not Path("/etc/mpi").exists()
    b.down()  # idempotent


def test_failed_up_cleans_up(tmp_path, monkeypatch):
    b = testbed.TestBed(2, workdir=tmp_path / "bed")

    def boom():
        raise testbed.BedError("injected")

    monkeypatch.setattr(testbed.TestBed, "start_sshd", lambda self, i, **kw: boom())
    with pytest.raises(testbed.BedError, match="injected"):
        b.up()
    assert b.bed_id and leftovers(b.bed_id) == []


def test_cleanup_stale_after_a_crashed_run(tmp_path):
    # a prefix of its own, so that no concurrent test session's cleanup gets there first
    prefix = "x" + "".join(random.choice(string.ascii_lowercase) for _ in range(2))
    code = textwrap.dedent(f"""
        import os, signal, subprocess, sys
        sys.path.insert(0, {str(Path(testbed.__file__).parent.parent)!r})
        import testbed
        b = testbed.TestBed(2, workdir={str(tmp_path / "bed")!r}, prefix={prefix!r})
        b.up()
        b.popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(b.bed_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == -signal.SIGKILL, r.stderr
    bed_id = r.stdout.strip()
    assert leftovers(bed_id)  # a crashed run leaves things behind...
    assert bed_id not in testbed.cleanup_stale()  # another prefix: not touched
    removed = testbed.cleanup_stale(prefix)
    assert bed_id in removed
    assert leftovers(bed_id) == []  # ...which cleanup_stale removes


def test_cleanup_stale_spares_live_beds(bed):
    b = bed(1)
    assert b.bed_id not in testbed.cleanup_stale()
    assert ssh(b, "w1", "hostname").stdout.strip() == "w1"


@pytest.mark.mpi
@testbed.needs("openmpi4")
def test_openmpi_over_the_bed(bed):
    b = bed(3)
    r = b.run(b.openmpi_argv(["hostname"]), timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["w1", "w2", "w3"]
    # plain `ssh` through the bind-mounted /etc/ssh/ssh_config works as well
    r = b.run(b.openmpi_argv(["hostname"], hosts=[1], ssh_config=False), timeout=60)
    assert r.stdout.split() == ["w2"], r.stderr
    # and a worker without sshd fails fast (what mpiwait exists to prevent)
    b.stop_sshd(2)
    t0 = time.monotonic()
    r = b.run(b.openmpi_argv(["hostname"]), timeout=60)
    assert r.returncode != 0 and time.monotonic() - t0 < 20
    assert "refused" in r.stderr or "ORTE" in r.stderr, r.stderr


@pytest.mark.mpi
@testbed.needs("openmpi4")
def test_openmpi_as_non_root_user(bed):
    b = bed(2, user="mpiuser", port=2222)
    r = b.run(b.openmpi_argv(["id", "-un"]), as_user="mpiuser", cwd="/tmp", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mpiuser", "mpiuser"]


@pytest.mark.mpi
@testbed.needs("mpich4")
def test_mpich_hydra_over_the_bed(bed):
    b = bed(3)
    r = b.run(b.mpich_argv(["hostname"]), timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["w1", "w2", "w3"]
