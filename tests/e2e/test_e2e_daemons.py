"""The daemon check (issue 36) against the real MPIs: a worker whose image lacks the daemon
where mpirun will start it, fixed through --prefix; a worker with the other Open MPI; Open
MPI 4's tree spawn with a worker that cannot log in to the one it spawns. Each starts with a
control: the same mpirun without mpiwait fails, and its own message is asserted. Through
mpiwait the run then ends with exit 3 and the one line naming the host and what is missing,
long before the deadline (--timeout 60), where without the check mpiwait would say go.

A worker's image is made with the bed's ``set_view``: its sshd runs in a mount namespace of
its own where the daemon's file is gone (a whiteout of a read-only overlay) or another MPI's
daemon is on its PATH. Everything else is the machine's: Debian's Open MPI 4 (/usr/bin/orted)
and MPICH 4 (/usr/bin/hydra_pmi_proxy) are on every worker's non-interactive PATH, so a worker
"without an MPI" has those hidden too.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import testbed
from test_e2e_handover import bed_network, control, path_with, pypi_mpi
from test_e2e_mpi import RUN_TIMEOUT, mpiwait_env, show

pytestmark = [pytest.mark.root, pytest.mark.mpi, testbed.needs("netns")]

DEADLINE = ["--timeout", "60"]
# A failing control ends in a second or two; MPICH 4.0 hangs instead, and this bounds it.
CONTROL_TIMEOUT = 15.0
# The Debian MPIs' daemons, on every worker's non-interactive PATH unless hidden.
DEBIAN_DAEMONS = (Path("/usr/bin/orted"), Path("/usr/bin/hydra_pmi_proxy"))


def through_mpiwait(
    b: testbed.TestBed, command: Sequence[str], env: dict[str, str], *args: str
) -> testbed.Result:
    return testbed.run(
        b, ["--hosts", ",".join(b.names), *DEADLINE, *args], command=command, env=env,
        timeout=RUN_TIMEOUT,
    )  # fmt: skip


def assert_stopped_on(r: testbed.Result, host: str, detail: str, *, whole: bool = True) -> None:
    """mpiwait ended with exit 3 (not 124: the deadline) on one line naming ``host`` and
    ``detail`` (the whole of the line, or its start), and did not start COMMAND."""
    assert r.returncode == 3, show(r)
    assert f"mpiwait: error: {host}: {detail}{chr(10) if whole else ''}" in r.stderr, show(r)
    assert r.stderr.count("mpiwait: error: ") == 1, show(r)
    assert "mpiwait: hint: " in r.stderr, show(r)
    assert r.stdout == "", show(r)


def second_install(prefix: Path, daemon: Path) -> Path:
    """Another install prefix holding a copy of ``daemon`` in its bin (a file of its own, so
    that hiding the first leaves it), the rest of the first install linked (libraries found
    through the daemon's $ORIGIN)."""
    first = daemon.parent.parent
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(daemon, prefix / "bin" / daemon.name)
    if first != Path("/usr"):
        for entry in first.iterdir():
            if entry.name != "bin":
                (prefix / entry.name).symlink_to(entry)
        for entry in (first / "bin").iterdir():
            if entry.name != daemon.name:
                (prefix / "bin" / entry.name).symlink_to(entry)
    return prefix


# --------------------------------------------------------------------------------------------
# 1. A worker without the daemon where mpirun will start it


def _case(mpi: str, b: testbed.TestBed) -> tuple[list[str], dict[str, str], list[Path], str]:
    """(COMMAND over w1 and w2, its environment, what w2's image lacks, mpirun's own message
    for it)."""
    if mpi == "openmpi4":
        return (b.openmpi_argv(["hostname"]), mpiwait_env(), [],
                "bash: line 1: orted: command not found")  # fmt: skip
    if mpi == "mpich4":
        command = b.mpich_argv(["hostname"], ssh_config=False)
        said = "bash: line 1: /usr/bin/hydra_pmi_proxy: No such file or directory"
        return command, mpiwait_env(), [], said
    if mpi == "openmpi5":
        bin_dir = pypi_mpi("openmpi5")
        command = ["mpirun", "--allow-run-as-root", "--host", "w1,w2", "-np", "2", "hostname"]
        env = mpiwait_env(PATH=path_with(bin_dir), **bed_network(b))
        said = f"bash: line 1: {bin_dir}/prted: No such file or directory"
        return command, env, [bin_dir / "prted"], said
    command = ["mpirun", "-hosts", "w1,w2", "-n", "2", "-ppn", "1", "hostname"]
    if mpi == "mpich5":
        bin_dir = pypi_mpi("mpich5")
        env = mpiwait_env(PATH=path_with(bin_dir), HYDRA_IFACE=b.bridge)
        said = f"bash: line 1: {bin_dir}/hydra_pmi_proxy: No such file or directory"
        return command, env, [bin_dir / "hydra_pmi_proxy"], said
    bin_dir = pypi_mpi("impi")
    env = mpiwait_env(PATH=path_with(bin_dir), I_MPI_HYDRA_IFACE=b.bridge)
    # Intel MPI's hydra puts a second slash after its folder
    said = f"bash: line 1: {bin_dir}//hydra_bstrap_proxy: No such file or directory"
    return command, env, [bin_dir / "hydra_bstrap_proxy"], said


MISSING = {
    "openmpi4": "orted is not on the non-interactive PATH (Open MPI 4's launch would fail: "
    "'orted: command not found')",
    "mpich4": "no hydra_pmi_proxy at /usr/bin/hydra_pmi_proxy (MPICH's launch would fail: "
    "'No such file or directory')",
    "openmpi5": "no prted at {bin}/prted (Open MPI 5's launch would fail: 'No such file or "
    "directory')",
    "mpich5": "no hydra_pmi_proxy at {bin}/hydra_pmi_proxy (MPICH's launch would fail: "
    "'No such file or directory')",
    "intel": "no hydra_bstrap_proxy at {bin}/hydra_bstrap_proxy (Intel MPI's launch would "
    "fail: 'No such file or directory')",
}


@pytest.mark.parametrize(
    "mpi",
    [
        pytest.param("openmpi4", marks=testbed.needs("openmpi4")),
        pytest.param("mpich4", marks=testbed.needs("mpich4")),
        "openmpi5",
        "mpich5",
        "intel",
    ],
)
def test_a_worker_without_the_daemon_where_mpirun_starts_it_stops_the_wait(bed, mpi):
    b = bed(2)
    command, env, lacks, said = _case(mpi, b)
    # w2's image has no MPI where mpirun looks: neither the launcher's nor Debian's
    b.set_view(1, hide=[*lacks, *DEBIAN_DAEMONS])

    plain = control(b, None, command, env, timeout=CONTROL_TIMEOUT)
    assert plain.returncode != 0, "mpirun started with no daemon on w2" + show(plain)
    assert said in plain.stderr, show(plain)

    r = through_mpiwait(b, command, env)
    bin_dir = lacks[0].parent if lacks else None
    assert_stopped_on(r, "w2", MISSING[mpi].format(bin=bin_dir))
    assert said not in r.stderr, "mpiwait started the launch" + show(r)

    if mpi == "openmpi4":
        # The check is what stops it: turned off, mpiwait says go and mpirun fails as above
        r = through_mpiwait(b, command, env, "--no-daemon-check")
        assert r.returncode not in (0, 3, 124), show(r)
        assert "mpiwait: all 2 hosts ready in " in r.stderr and said in r.stderr, show(r)


# --------------------------------------------------------------------------------------------
# 2. The same worker, mpirun pointed at a second install through --prefix


@pytest.mark.parametrize(
    "mpi", [pytest.param("openmpi4", marks=testbed.needs("openmpi4")), "openmpi5"]
)
def test_the_same_worker_with_mpirun_prefix_at_a_second_install_launches(bed, tmp_path, mpi):
    b = bed(2)
    command, env, lacks, _ = _case(mpi, b)
    daemon = lacks[0] if lacks else DEBIAN_DAEMONS[0]
    other = second_install(tmp_path / "other", daemon)
    b.set_view(1, hide=[*lacks, *DEBIAN_DAEMONS])
    at = command.index("--allow-run-as-root") + 1
    command[at:at] = ["--prefix", str(other)]

    r = through_mpiwait(b, command, env)
    assert r.returncode == 0, show(r)
    assert sorted(r.stdout.split()) == ["w1", "w2"], show(r)
    check = f"mpiwait: daemon check: {daemon.name} at {other}/bin/{daemon.name} (--prefix)\n"
    assert check in r.stderr, show(r)


def test_open_mpi_5_ignores_opal_prefix_and_so_does_the_check(bed, tmp_path):
    """Open MPI 5's mpirun sets PRTE_PREFIX from its own location: OPAL_PREFIX (or PRTE_PREFIX)
    naming a second install does not move the daemon, and the check does not take it to."""
    b = bed(2)
    command, env, lacks, said = _case("openmpi5", b)
    other = second_install(tmp_path / "other", lacks[0])
    b.set_view(1, hide=[*lacks, *DEBIAN_DAEMONS])
    for variable in ("OPAL_PREFIX", "PRTE_PREFIX"):
        moved = env | {variable: str(other)}
        plain = control(b, None, command, moved, timeout=CONTROL_TIMEOUT)
        assert plain.returncode != 0, show(plain)
        assert said in plain.stderr, show(plain)
        r = through_mpiwait(b, command, moved)
        assert_stopped_on(r, "w2", MISSING["openmpi5"].format(bin=lacks[0].parent))


# --------------------------------------------------------------------------------------------
# 3. A worker with the other Open MPI


@pytest.mark.parametrize("launcher", ["openmpi4", "openmpi5"])
@testbed.needs("openmpi4")
def test_a_worker_with_the_other_open_mpi_stops_the_wait(bed, launcher):
    b = bed(2)
    command, env, lacks, said = _case(launcher, b)
    if launcher == "openmpi4":
        # w2's image has Open MPI 5: prted on its PATH, no orted
        prted = pypi_mpi("openmpi5") / "prted"
        b.set_view(1, hide=DEBIAN_DAEMONS, add={"/usr/local/sbin/prted": prted})
        detail = (
            "orted is not on the non-interactive PATH; it has prted at /usr/local/sbin/prted "
            "(Open MPI 5), the launcher runs Open MPI 4"
        )
    else:
        # w2's image has Open MPI 4 (Debian's orted on its PATH), not the launcher's Open MPI 5
        b.set_view(1, hide=[*lacks, DEBIAN_DAEMONS[1]])
        detail = (
            f"no prted at {lacks[0]}; it has orted at /usr/bin/orted (Open MPI 4), the "
            "launcher runs Open MPI 5"
        )

    plain = control(b, None, command, env, timeout=CONTROL_TIMEOUT)
    assert plain.returncode != 0, show(plain)
    assert said in plain.stderr, show(plain)

    r = through_mpiwait(b, command, env)
    assert_stopped_on(r, "w2", detail)
    hint = "use the same MPI, at the same version, in the launcher and worker images"
    assert f"mpiwait: hint: {hint}\n" in r.stderr, show(r)


# --------------------------------------------------------------------------------------------
# 4. Open MPI 4's tree spawn: with routed_radix 2, of w1..w4 the launcher starts w1 and w2,
# w1 starts w3 and w2 starts w4 (ssh from one worker to the other, with the same agent)

TREE = ["--mca", "routed_radix", "2"]


@testbed.needs("openmpi4")
def test_tree_spawn_through_a_worker_that_cannot_log_in_stops_the_wait(bed, tmp_path):
    b = bed(4)
    # the agent's ssh_config and key in a folder of their own (set_view makes it read-only)
    agent = tmp_path / "agent"
    agent.mkdir()
    key = agent / "id_key"
    shutil.copy2(b.key_path, key)
    config = agent / "ssh_config"
    config.write_text(b.ssh_config.read_text().replace(str(b.key_path), str(key)))
    command = b.openmpi_argv(["hostname"], ssh_config=config, extra=TREE)
    env = mpiwait_env()
    # w1's image lacks the job's key: it cannot log in to w3 (the launcher still reaches w1)
    b.set_view(0, hide=[key])

    plain = control(b, None, command, env, timeout=CONTROL_TIMEOUT)
    assert plain.returncode != 0, "tree spawn went without w1's key" + show(plain)
    assert "Permission denied (publickey)" in plain.stderr, show(plain)
    assert sorted(plain.stdout.split()) != ["w1", "w2", "w3", "w4"], show(plain)

    r = through_mpiwait(b, command, env)
    assert_stopped_on(r, "w1", "cannot log in to w3 as tree spawn will: ", whole=False)
    assert "Permission denied (publickey)" in r.stderr, show(r)


@testbed.needs("openmpi4")
def test_tree_spawn_that_works_is_not_held_up(bed):
    b = bed(4)
    command = b.openmpi_argv(["hostname"], extra=TREE)
    r = through_mpiwait(b, command, mpiwait_env())
    assert r.returncode == 0, show(r)
    assert sorted(r.stdout.split()) == ["w1", "w2", "w3", "w4"], show(r)
    assert "; tree spawn (radix 2): 2 spawning workers checked, each logging in to one it " in (
        r.stderr
    ), show(r)
