"""The launch itself against a default modern sshd (TestBed(sshd="trixie"): Debian 13's OpenSSH
10.0p2 with its own PerSourcePenalties, MaxStartups and ML-KEM-first key exchange): mpiwait in
front of Open MPI's mpirun, one worker late, the early ones re-checked while it waits (full logins
every --recheck-after / 2 to --recheck-after) and their connections kept open to the end. Nothing
mpiwait does may get the launcher's address refused: sshd's log has no penalty line, mpirun
reaches every worker, and the launch's ssh still gets in afterwards (BatchMode, one try)."""

from __future__ import annotations

import time

import pytest
import testbed

pytestmark = [
    pytest.mark.root,
    pytest.mark.mpi,
    testbed.needs("netns", "openmpi4", "openssh-releases"),
]

RUN_TIMEOUT = 90.0
BOUND = 0.5  # --recheck-after: the early workers' passes are stale by the time w3 arrives


def test_openmpi_launch_with_a_late_worker_over_sshd_10_leaves_the_launcher_welcome(bed):
    b = bed(3, sshd="trixie")
    assert b.sshd_build.version >= (10, 0), b.sshd_build
    w1, w2, w3 = b.names
    b.stop_sshd(2)  # w3 is late
    args = ["--hosts", f"{w1},{w2},{w3}", "--timeout", "60", "--recheck-after", str(BOUND)]
    run = testbed.start(b, args, command=b.openmpi_argv(["hostname"]))
    run.wait_for(rf"^mpiwait: \[\+[\d.]+s\] {w3}: tcp refused")
    run.wait_for(r"^mpiwait: \[\+[\d.]+s\] 2/3 ready")
    time.sleep(2 * BOUND)
    b.start_sshd(2)
    r = run.finish(RUN_TIMEOUT)
    assert r.returncode == 0, r
    assert sorted(r.stdout.split()) == [w1, w2, w3], r
    # re-checked while waiting, not in a round after w3 (their kept connections watched)
    assert "re-checking" not in r.stderr, r
    logins = [h.sshd_log.read_text(errors="replace").count("Accepted publickey") for h in b.hosts]
    assert logins[0] >= 3 and logins[1] >= 3, logins  # mpiwait's first, re-checks, mpirun's
    assert b.penalties() == []
    for h in b.hosts:
        ssh = b.run(b.ssh_argv(h.i, "true"), timeout=60)
        assert ssh.returncode == 0, ssh
