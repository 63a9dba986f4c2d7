"""The benchmark lab that stands in for a cluster (scenario 6): what it promises, checked.

benchmarks/s6_gap_scale.py measures the launch gap at 400-1000 workers in testbed.ManyHosts
built like a cluster: each worker its own listening socket, the workers' sshds on other CPUs
than the launcher. Its figures mean something only if the lab is built that way.
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest
import testbed

N = 20  # two sshds: 16 listeners and 4


@pytest.mark.root
@testbed.needs("netns")
def test_a_cluster_like_lab_gives_each_worker_a_listener_and_cpus_of_their_own(tmp_path: Path):
    with testbed.ManyHosts(N, workdir=tmp_path / "many", own_listeners=True, split_cpus=True) as m:
        ss = ["ip", "netns", "exec", m.ns, "ss", "-Hltn", "sport = :22"]
        listening = subprocess.run(ss, capture_output=True, text=True, check=True).stdout
        listening = listening.splitlines()
        sshd_cpus = [os.sched_getaffinity(pid) for pid in m.sshd_pids]
        r = testbed.run(
            m,
            ["-F", str(m.ssh_config), "--hosts", ",".join(m.names), "--timeout", "60"],
            command=["python3", "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        )
    # one socket per worker address (not one on 0.0.0.0), served by two sshds
    assert sorted(ln.split()[3] for ln in listening) == sorted(f"{a}:22" for a in m.addrs)
    assert len(sshd_cpus) == 2
    # every worker reached through its own socket, and COMMAND ran on the launcher's CPUs,
    # which the sshds do not share
    assert r.returncode == 0 and f"all {N} hosts ready" in r.stderr, r
    launcher_cpus = set(ast.literal_eval(r.stdout))
    assert launcher_cpus and all(launcher_cpus.isdisjoint(c) and c for c in sshd_cpus), (
        launcher_cpus,
        sshd_cpus,
    )


@pytest.mark.root
@testbed.needs("netns")
def test_a_split_test_bed_runs_the_launcher_and_the_workers_on_cpus_of_their_own(tmp_path: Path):
    # scenario 1's lab: COMMAND's own CPUs, and those of a command run through a worker's sshd
    with testbed.TestBed(2, workdir=tmp_path / "bed", split_cpus=True) as b:
        r = testbed.run(
            b,
            ["--hosts", "w1,w2", "--timeout", "60"],
            command=["sh", "-c", "taskset -pc $$; ssh w1 'taskset -pc $$'"],
        )
    assert r.returncode == 0, r
    launcher, worker = (set(ln.rsplit(": ", 1)[1].split(",")) for ln in r.stdout.splitlines())
    assert launcher and worker and launcher.isdisjoint(worker), r.stdout


@pytest.mark.root
@testbed.needs("netns")
def test_worker_logins_run_a_clean_shell_not_the_machines_bashrc(tmp_path: Path):
    """A worker image's shell, not this machine's ~/.bashrc (a pyenv init: 190 ms a login),
    which would slow every login of a scale test; the launcher side keeps the machine's."""
    rc = Path.home() / ".bashrc"
    machine = str(rc.stat().st_size) if rc.is_file() else "none"
    probe = f"[ -f {rc} ] && wc -c < {rc} || echo none"
    with testbed.ManyHosts(1, workdir=tmp_path / "many") as m:
        many = testbed.run(
            m,
            ["-F", str(m.ssh_config), "--hosts", m.names[0], "--timeout", "60"],
            command=["sh", "-c", f"{probe}; ssh {m.names[0]} '{probe}'"],
        )
    with testbed.TestBed(1, workdir=tmp_path / "bed") as b:
        bed = testbed.run(
            b,
            ["--hosts", "w1", "--timeout", "60"],
            command=["sh", "-c", f"{probe}; ssh w1 '{probe}'"],
        )
    for r in (many, bed):
        assert r.returncode == 0, r
        launcher, worker = r.stdout.split()
        assert launcher == machine  # the control: the machine's file, as the lab found it
        assert worker in ("0", "none"), r.stdout
