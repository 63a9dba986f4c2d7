"""mpiwait.launch.daemons and .probe.daemon: where Open MPI 5 started by name looks for prted,
and what mpiwait says when it is not there (pure logic, installs made of empty files)."""

from __future__ import annotations

from pathlib import Path

from mpiwait.launch.daemons import daemon_plan
from mpiwait.launch.handover import Launch, Mpi
from mpiwait.probe.daemon import DaemonPlan, missing, read, script


def _bin(root: Path, *files: str) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    for name in files:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _plan(bin_dir: Path, argv: list[str], via: str = "") -> DaemonPlan:
    launch = Launch(Mpi.OPENMPI5, "mpirun", str(bin_dir / "mpirun"), "PRRTE next to it", via)
    plan = daemon_plan(launch, argv, {"HOME": str(bin_dir.parent)}, shell="/bin/bash")
    assert isinstance(plan, DaemonPlan), plan
    return plan


def test_open_mpi_5_by_name_starts_prted_at_its_own_prefix(tmp_path: Path) -> None:
    """Its mpirun execs its own prterun by path and passes that prefix: Debian's 5.0.7 started
    as ``mpirun`` from a bash script ran /usr/bin/prted on the workers (the cluster tier), so
    a prted elsewhere on the worker's PATH does not do."""
    bin_dir = _bin(tmp_path / "usr", "mpirun", "prterun", "prte", "prted")
    prted = str(bin_dir / "prted")
    for argv, via in ((["mpirun", "-n", "2", "./pi"], ""), (["bash", "-c", "mpirun ./pi"], "bash")):
        plan = _plan(bin_dir, argv, via)
        assert (plan.paths, plan.by_name, plan.prefix) == ((prted,), False, str(tmp_path / "usr"))
        assert plan.describe() == f"prted at {prted} (Open MPI 5's mpirun passes its prefix)"
    assert f"echo mpiwait-daemon:path:0:{prted}" in script(plan)  # the worker's answer if none
    lines = ["mpiwait-daemon:begin", f"mpiwait-daemon:path:0:{prted}"]
    line, hint = missing(plan, read(plan, [*lines, "mpiwait-daemon:end"]))
    assert (
        line == f"no prted at {prted} (Open MPI 5's launch would fail: 'No such file or directory')"
    )
    assert hint == (
        "install the MPI at the same path in the worker image as in the launcher's (mpirun "
        f"starts prted as {prted}), or point mpirun at the workers' install (--prefix)"
    )
    on_path = [*lines, "mpiwait-daemon:name:prted:/opt/openmpi/bin/prted", "mpiwait-daemon:end"]
    found = read(plan, on_path)
    assert found.where == ""  # on PATH, but not where mpirun looks
    assert missing(plan, found)[0] == f"no prted at {prted}; prted is at /opt/openmpi/bin/prted"


def test_open_mpi_5_without_prted_beside_mpirun_may_start_it_either_way(tmp_path: Path) -> None:
    """An mpirun whose PRRTE is installed elsewhere: the worker's PATH or the prefix passes."""
    bin_dir = _bin(tmp_path / "usr", "mpirun")
    plan = _plan(bin_dir, ["mpirun", "./pi"])
    assert plan.by_name and plan.paths == (str(bin_dir / "prted"),)
