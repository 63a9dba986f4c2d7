"""The daemon check (issue 36) as pure logic: launch/daemons.py's plan from COMMAND, the
environment and a launcher install made of empty files; the tree of Open MPI's radix routing;
probe/daemon.py's script run by a real /bin/sh and bash over fake worker folders (no network:
the worker's ssh is a stand-in script); the judgement of what a worker answered; the step that
runs it once per worker; the option and variable; and the --dry-run line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import testbed
from testbed import fake_install as install

from mpiwait.launch.daemons import daemon_plan, ompi_prefix_by_default, shell_kind, tree_pairs
from mpiwait.launch.handover import recognise
from mpiwait.probe.daemon import MARK, DaemonPlan, Found, missing, read, script
from mpiwait.probe.outcome import Outcome, Reason, Stage, Status
from mpiwait.probe.stages.daemon import DaemonCheck, judge
from mpiwait.probe.stages.step import Session


def ompi4(tmp_path: Path, name: str = "ompi4") -> Path:
    """Open MPI 4 as its own prefix: bin/mpirun -> orterun, orted beside it."""
    return install(tmp_path / name / "bin", "orterun", "orted", links={"mpirun": "orterun"})


def ompi5(tmp_path: Path) -> Path:
    """Open MPI 5 as PyPI installs it: mpirun beside PRRTE's programs."""
    return install(tmp_path / "ompi5/bin", "mpirun", "prterun", "prte", "prted", "ompi_info")


def mpich(tmp_path: Path, *, proxy: bool = True) -> Path:
    files = ("mpiexec.hydra", "hydra_pmi_proxy") if proxy else ("mpiexec.hydra",)
    return install(tmp_path / "mpich/bin", *files, links={"mpiexec": "mpiexec.hydra"})


def plan_of(
    argv: Sequence[str],
    environ: dict[str, str],
    hosts: Sequence[str] = (),
    *,
    by_default: bool | None = False,
    shell: str = "/bin/bash",
    seen: list[str] | None = None,
) -> DaemonPlan | str:
    """The plan for COMMAND ``argv`` as mpiwait makes it: the MPI recognised first."""
    launch = recognise(argv, environ)
    assert launch is not None, argv

    def prefix_by_default(folder: str) -> bool | None:
        if seen is not None:
            seen.append(folder)
        return by_default

    return daemon_plan(
        launch, argv, environ, hosts, prefix_by_default=prefix_by_default, shell=shell
    )


def a_plan(*args: object, **kw: object) -> DaemonPlan:
    plan = plan_of(*args, **kw)  # type: ignore[arg-type]
    assert isinstance(plan, DaemonPlan), plan
    return plan


HOSTS4 = ("h1", "h2", "h3", "h4")


# --- the plan: which daemon, where mpirun will start it ------------------------------------


def test_open_mpi_4_by_name_goes_by_the_workers_path_unless_it_passes_its_prefix(tmp_path):
    bin_dir = ompi4(tmp_path)
    env = {"PATH": str(bin_dir)}
    seen: list[str] = []
    plan = a_plan(["mpirun", "-n", "2", "a.out"], env, by_default=False, seen=seen)
    assert seen == [str(bin_dir)]  # ompi_info is asked in mpirun's own folder
    assert (plan.mpi, plan.daemon, plan.hydra) == ("Open MPI 4", "orted", False)
    assert (plan.paths, plan.by_name, plan.prefix) == ((), True, "")
    assert plan.how == "on the worker's non-interactive PATH (mpirun by name, no --prefix)"
    # built with --enable-mpirun-prefix-by-default: its own prefix, first on the worker's PATH
    plan = a_plan(["mpirun"], env, by_default=True)
    prefix = str(bin_dir.parent)
    assert (plan.paths, plan.by_name, plan.prefix) == ((f"{prefix}/bin/orted",), False, prefix)
    assert plan.how == f"at {prefix}/bin/orted (this Open MPI passes its prefix by default)"
    # ompi_info cannot tell: either passes
    plan = a_plan(["mpirun"], env, by_default=None)
    assert (plan.paths, plan.by_name, plan.prefix) == ((f"{prefix}/bin/orted",), True, "")
    assert "non-interactive PATH or at" in plan.how


@pytest.mark.parametrize(
    "argv",
    [
        ["mpirun", "--prefix", "/opt/ompi", "-n", "2", "a.out"],
        ["mpirun", "--prefix=/opt/ompi/", "a.out"],
        ["bash", "-c", "cd /work && mpirun --prefix /opt/ompi -n 2 a.out"],
    ],
    ids=["--prefix", "--prefix=", "bash -c"],
)
def test_open_mpi_4_with_prefix_starts_the_daemon_there(tmp_path, argv):
    bin_dir = ompi4(tmp_path)
    install(bin_dir, "bash")
    plan = a_plan(argv, {"PATH": str(bin_dir)}, by_default=True)  # --prefix wins over the build
    assert (plan.paths, plan.by_name, plan.prefix) == (("/opt/ompi/bin/orted",), False, "/opt/ompi")
    assert plan.how == "at /opt/ompi/bin/orted (--prefix)"


def test_open_mpi_4_started_by_its_absolute_path_implies_its_prefix(tmp_path):
    bin_dir = ompi4(tmp_path)
    plan = a_plan([str(bin_dir / "mpirun"), "a.out"], {"PATH": ""}, by_default=False)
    prefix = str(bin_dir.parent)
    assert (plan.paths, plan.by_name, plan.prefix) == ((f"{prefix}/bin/orted",), False, prefix)
    assert plan.how == f"at {prefix}/bin/orted (mpirun started by its path)"


def test_open_mpi_4_ignores_prte_and_opal_prefix(tmp_path):
    env = {"PATH": str(ompi4(tmp_path)), "PRTE_PREFIX": "/p", "OPAL_PREFIX": "/o"}
    plan = a_plan(["mpirun"], env, by_default=False)
    assert (plan.paths, plan.by_name, plan.prefix) == ((), True, "")


def test_open_mpi_5_by_name_and_its_prefix_variables(tmp_path):
    bin_dir = ompi5(tmp_path)
    own = f"{bin_dir.parent}/bin/prted"
    plan = a_plan(["mpirun", "a.out"], {"PATH": str(bin_dir)}, by_default=False)
    assert (plan.mpi, plan.daemon) == ("Open MPI 5", "prted")
    # its mpirun starts prted by its own prefix (tests/unit/test_daemon_plan_prefix.py)
    assert (plan.paths, plan.by_name, plan.prefix) == ((own,), False, str(bin_dir.parent))
    # PRTE_PREFIX and OPAL_PREFIX do not move the daemon: Open MPI 5's mpirun sets PRTE_PREFIX
    # from its own location (tests/e2e/test_e2e_daemons.py shows it)
    env = {"PATH": str(bin_dir), "OPAL_PREFIX": "/o/", "PRTE_PREFIX": "/p"}
    plan = a_plan(["mpirun"], env)
    assert (plan.paths, plan.by_name, plan.prefix) == ((own,), False, str(bin_dir.parent))
    plan = a_plan(["mpirun", "--prefix", "/x", "a.out"], env)
    assert (plan.prefix, plan.how) == ("/x", "at /x/bin/prted (--prefix)")
    plan = a_plan([str(bin_dir / "mpirun")], {"PATH": ""})
    assert (plan.paths, plan.by_name) == ((own,), False)
    assert plan.how.endswith("(mpirun started by its path)")


def test_mpich_starts_its_proxy_by_the_launchers_own_folder(tmp_path):
    bin_dir = mpich(tmp_path)
    plan = a_plan(["mpiexec", "-n", "2", "a.out"], {"PATH": str(bin_dir)})
    proxy = f"{bin_dir}/hydra_pmi_proxy"
    assert (plan.mpi, plan.hydra, plan.daemon) == ("MPICH", True, "hydra_pmi_proxy")
    assert (plan.paths, plan.by_name, plan.prefix) == ((proxy,), False, "")
    assert plan.how == f"at {proxy} (hydra starts it by the launcher's own folder)"
    # hydra: no tree, no profile, whatever the shell and the host count
    plan = a_plan(
        ["mpiexec"], {"PATH": str(bin_dir)}, [f"h{i}" for i in range(200)], shell="/bin/sh"
    )
    assert (plan.tree, plan.radix, plan.profile) == (None, 0, False)


def test_mpich_with_no_proxy_next_to_it_is_not_checked(tmp_path):
    bin_dir = mpich(tmp_path, proxy=False)
    reason = plan_of(["mpiexec.hydra", "a.out"], {"PATH": str(bin_dir)})
    assert reason == (
        f"no hydra_pmi_proxy next to {bin_dir}/mpiexec.hydra: where hydra will look cannot be told"
    )


def test_intel_mpi_starts_both_proxies_from_one_folder(tmp_path):
    files = ("mpirun", "mpiexec.hydra", "hydra_pmi_proxy", "hydra_bstrap_proxy", "impi_info")
    bin_dir = install(tmp_path / "impi/bin", *files)
    plan = a_plan(["mpirun", "a.out"], {"PATH": str(bin_dir)})
    assert (plan.mpi, plan.daemon) == ("Intel MPI", "hydra_bstrap_proxy")
    assert plan.paths == (f"{bin_dir}/hydra_bstrap_proxy", f"{bin_dir}/hydra_pmi_proxy")
    assert not plan.by_name
    # a bootstrap proxy without the pmi proxy beside it: hydra's start would fail, not told
    (bin_dir / "hydra_pmi_proxy").unlink()
    assert plan_of(["mpirun"], {"PATH": str(bin_dir)}) == (
        f"no hydra_bstrap_proxy next to {bin_dir}/mpirun: where hydra will look cannot be told"
    )


def test_intel_mpi_proxies_under_i_mpi_root(tmp_path):
    """The launcher somewhere under I_MPI_ROOT, its proxies in I_MPI_ROOT/bin."""
    root = tmp_path / "oneapi/mpi/2021.18"
    install(root / "bin", "hydra_pmi_proxy", "hydra_bstrap_proxy")
    libexec = install(root / "libexec", "mpiexec.hydra")
    env = {"PATH": str(libexec), "I_MPI_ROOT": str(root)}
    plan = a_plan(["mpiexec.hydra"], env)
    assert plan.mpi == "Intel MPI"
    assert plan.paths == (f"{root}/bin/hydra_bstrap_proxy", f"{root}/bin/hydra_pmi_proxy")
    # without I_MPI_ROOT its bin folder is not looked in (and the MPI is taken for MPICH)
    reason = plan_of(["mpiexec.hydra"], {"PATH": str(libexec)})
    assert isinstance(reason, str) and reason.startswith("no hydra_pmi_proxy next to")


# --- the plan: when there is nothing to check --------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "reason"),
    [
        (
            ["mpiexec", "-launcher", "fork", "a.out"],
            {},
            "-launcher fork starts the daemons without ssh",
        ),
        (
            ["mpiexec", "-launcher", "slurm", "a.out"],
            {},
            "-launcher slurm starts the daemons without ssh",
        ),
        (
            ["mpiexec", "a.out"],
            {"HYDRA_LAUNCHER": "fork"},
            "HYDRA_LAUNCHER starts the daemons without ssh",
        ),
        (
            ["mpiexec", "a.out"],
            {"SLURM_JOB_ID": "42"},
            "inside a batch allocation the daemons start through the scheduler",
        ),
    ],
    ids=["-launcher fork", "-launcher slurm", "HYDRA_LAUNCHER", "SLURM_JOB_ID"],
)
def test_no_ssh_start_is_not_checked(tmp_path, argv, env, reason):
    bin_dir = mpich(tmp_path)
    assert plan_of(argv, {"PATH": str(bin_dir), **env}) == reason
    assert isinstance(plan_of(argv[:1], {"PATH": str(bin_dir)}), DaemonPlan)  # control


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["mpirun", "--mca", "orte_launch_agent", "/opt/x/orted", "a.out"], {}),
        (["mpirun", "a.out"], {"OMPI_MCA_orte_launch_agent": "/opt/x/orted"}),
    ],
    ids=["--mca", "OMPI_MCA_"],
)
def test_a_launch_agent_replaces_the_daemon(tmp_path, argv, env):
    bin_dir = ompi4(tmp_path)
    reason = plan_of(argv, {"PATH": str(bin_dir), **env})
    assert reason == "a launch agent replaces the daemon (orte_launch_agent)"


@pytest.mark.parametrize(
    ("shell", "outcome"),
    [
        ("/bin/csh", "csh"),
        ("/usr/bin/tcsh", "csh"),
        ("/bin/sh", True),
        ("/bin/ksh", True),
        ("/bin/bash", False),
        ("/usr/bin/zsh", False),
    ],
)
def test_the_login_shell_decides_the_profile_or_turns_the_check_off(tmp_path, shell, outcome):
    plan = plan_of(["mpirun"], {"PATH": str(ompi4(tmp_path))}, shell=shell)
    if outcome == "csh":
        assert plan == "mpirun writes the daemon's command line in csh syntax for a csh login shell"
    else:
        assert isinstance(plan, DaemonPlan) and plan.profile is outcome


def test_a_wrappers_script_chooses_the_launcher_and_the_agent_too(tmp_path):
    bin_dir = ompi4(tmp_path)
    install(bin_dir, "bash")
    env = {"PATH": str(bin_dir)}
    script = "cd /work && mpirun --mca plm_rsh_agent 'ssh -F /etc/cfg' -n 2 a.out"
    assert a_plan(["bash", "-c", script], env).agent == ("ssh", "-F", "/etc/cfg")
    hydra = mpich(tmp_path)
    install(hydra, "bash")
    reason = plan_of(["bash", "-c", "mpiexec -launcher fork a.out"], {"PATH": str(hydra)})
    assert reason == "-launcher fork starts the daemons without ssh"


def test_the_agent_a_spawning_worker_runs(tmp_path):
    env = {"PATH": str(ompi4(tmp_path))}
    assert a_plan(["mpirun"], env).agent == ("ssh",)
    argv = ["mpirun", "--mca", "plm_rsh_agent", "ssh -F /etc/cfg", "a.out"]
    assert a_plan(argv, env).agent == ("ssh", "-F", "/etc/cfg")
    # Open MPI's alternatives: the first
    assert a_plan(["mpirun"], {**env, "OMPI_MCA_plm_rsh_agent": "rsh : ssh"}).agent == ("rsh",)


# --- the plan: Open MPI's tree spawn -------------------------------------------------------


def hosts(n: int) -> tuple[str, ...]:
    return tuple(f"h{i}" for i in range(1, n + 1))


@pytest.mark.parametrize(
    ("argv", "env", "radix"),
    [
        (["mpirun"], {}, 64),
        (["mpirun", "--mca", "routed_radix", "2", "a.out"], {}, 2),
        (["mpirun", "-mca", "routed_radix", "2", "a.out"], {}, 2),
        (["mpirun"], {"OMPI_MCA_routed_radix": "2"}, 2),
        (["mpirun"], {"OMPI_MCA_routed_radix": "many"}, 64),
        (["bash", "-c", "mpirun --mca routed_radix 3 a.out"], {}, 3),
        (["mpirun", "--mca", "plm_rsh_no_tree_spawn", "1", "a.out"], {}, 0),
        (["mpirun", "--mca", "plm_rsh_no_tree_spawn", "true", "a.out"], {}, 0),
        (["mpirun", "--mca", "plm_rsh_no_tree_spawn", "0", "a.out"], {}, 64),
        (["mpirun"], {"OMPI_MCA_plm_rsh_no_tree_spawn": "1"}, 0),
        (["mpirun", "--mca", "routed", "direct", "a.out"], {}, 0),
        (["mpirun"], {"OMPI_MCA_routed": "direct", "OMPI_MCA_routed_radix": "2"}, 0),
    ],
)
def test_open_mpi_4_tree_radix(tmp_path, argv, env, radix):
    bin_dir = ompi4(tmp_path)
    install(bin_dir, "bash")
    plan = a_plan(argv, {"PATH": str(bin_dir), **env}, HOSTS4)
    assert plan.radix == radix
    if radix == 0:
        assert plan.tree is None
    elif radix == 2:
        assert plan.tree == {"h1": "h3", "h2": "h4"}
    elif radix == 3:
        assert plan.tree == {"h1": "h4"}
    else:
        assert plan.tree == {}  # 4 workers: every daemon started by mpirun itself


@pytest.mark.parametrize(
    ("argv", "env", "radix"),
    [
        (["mpirun"], {}, 64),
        (["mpirun", "--prtemca", "rml_base_radix", "2", "a.out"], {}, 2),
        (["mpirun"], {"PRTE_MCA_rml_base_radix": "2"}, 2),
        (["mpirun"], {"OMPI_MCA_routed_radix": "2"}, 2),  # the operators' ORTE name
        (["mpirun", "--prtemca", "plm_ssh_no_tree_spawn", "1", "a.out"], {}, 0),
        (["mpirun"], {"PRTE_MCA_plm_ssh_no_tree_spawn": "yes"}, 0),
        (["mpirun"], {"OMPI_MCA_plm_rsh_no_tree_spawn": "1"}, 0),
    ],
)
def test_open_mpi_5_tree_radix_under_prrtes_names(tmp_path, argv, env, radix):
    plan = a_plan(argv, {"PATH": str(ompi5(tmp_path)), **env}, HOSTS4)
    assert plan.radix == radix
    assert plan.tree == (None if radix == 0 else {"h1": "h3", "h2": "h4"} if radix == 2 else {})


def test_the_default_radix_spawns_through_workers_only_above_64(tmp_path):
    env = {"PATH": str(ompi4(tmp_path))}
    plan = a_plan(["mpirun"], env, hosts(64))
    assert plan.tree == {} and "tree spawn" not in plan.describe()
    plan = a_plan(["mpirun"], env, hosts(65))
    assert plan.tree == {"h1": "h65"}
    assert plan.describe() == (
        "orted on the worker's non-interactive PATH (mpirun by name, no --prefix); tree spawn "
        "(radix 64): 1 spawning worker checked, each logging in to one it spawns"
    )
    plan = a_plan(["mpirun", "--mca", "routed_radix", "2", "a.out"], env, HOSTS4)
    assert plan.describe().endswith(
        "(radix 2): 2 spawning workers checked, each logging in to one it spawns"
    )


def orte_children(n_hosts: int, radix: int) -> dict[int, list[int]]:
    """ORTE's routed_radix radix_tree() for daemons 0..n_hosts (0: mpirun's), as in its C."""
    children: dict[int, list[int]] = {}
    for rank in range(n_hosts + 1):
        total, in_level = 1, 1
        while total < rank + 1:
            in_level *= radix
            total += in_level
        peer = rank + in_level
        for _ in range(radix):
            if peer < n_hosts + 1:
                children.setdefault(rank, []).append(peer)
            peer += in_level
    return children


@pytest.mark.parametrize("radix", [2, 3, 7, 64])
def test_tree_pairs_are_ortes_radix_tree(radix):
    for n in range(0, 300, 7):
        names = hosts(n)
        tree = orte_children(n, radix)
        # every worker that starts daemons (mpirun's own children aside), and its first child
        expected = {names[v - 1]: names[kids[0] - 1] for v, kids in tree.items() if v != 0}
        assert tree_pairs(names, radix) == expected, (n, radix)
        # mpirun itself starts the first `radix` workers
        assert tree.get(0, []) == list(range(1, min(n, radix) + 1))


def test_a_radix_of_1_is_a_chain(tmp_path):
    """Each daemon starts the next: every worker but the last logs in to another."""
    plan = a_plan(
        ["mpirun", "--mca", "routed_radix", "1", "a.out"], {"PATH": str(ompi4(tmp_path))}, HOSTS4
    )
    assert plan.radix == 1
    assert plan.tree == {"h1": "h2", "h2": "h3", "h3": "h4"}
    assert orte_children(4, 1) == {0: [1], 1: [2], 2: [3], 3: [4]}


def test_tree_pairs_examples():
    assert tree_pairs(HOSTS4, 2) == {"h1": "h3", "h2": "h4"}
    assert tree_pairs(hosts(65), 64) == {"h1": "h65"}
    big = tree_pairs(hosts(500), 64)
    # each of mpirun's 64 children starts some of the 436 others (h1: h65, h129, ... h449)
    assert len(big) == 64 and big["h1"] == "h65" and big["h64"] == "h128"
    assert len(orte_children(500, 64)[1]) == 7
    assert tree_pairs((), 64) == {} and tree_pairs(("h1",), 2) == {}


# --- ompi_info: does this Open MPI pass its prefix by default ------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("mca:x:y\nmpirun:prefix_by_default:yes\n", True),
        ("mpirun:prefix_by_default:no\n", False),
        ("ompi:version:full:4.1.4\n", None),
        (None, None),
    ],
)
def test_ompi_info_tells_prefix_by_default(tmp_path, output, expected):
    if output is not None:
        info = tmp_path / "ompi_info"
        info.write_text(f"#!/bin/sh\n[ \"$1\" = --parsable ] || exit 1\nprintf '{output}'\n")
        info.chmod(0o755)
    assert ompi_prefix_by_default(str(tmp_path)) is expected


# --- the script, run by a real shell over fake workers -------------------------------------
# A worker is a folder of fake daemons on PATH; `tools` holds what the script itself runs (sed)
# and a stand-in ssh that runs the command it is given as the named worker would (its PATH),
# or answers as a worker that cannot be reached. /usr/bin and /bin stay off PATH: this machine
# may have a real MPI there.

SHELLS = ["/bin/sh", "/bin/bash"]


class Workers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.tools = root / "tools"
        self.tools.mkdir()
        (self.tools / "sed").symlink_to("/bin/sed")
        self.calls = root / "ssh-calls"
        ssh = self.tools / "ssh"
        ssh.write_text(
            "#!/bin/sh\n"
            f'echo "$*" >> {self.calls}\n'
            'while [ $# -gt 0 ]; do case "$1" in -o|-F) shift 2 ;; -*) shift ;; *) break ;; '
            "esac; done\n"
            "host=$1; shift\n"
            'case "$host" in\n'
            '  denied) echo "denied: Permission denied (publickey)." >&2; exit 255 ;;\n'
            '  nowhere) echo "ssh: Could not resolve hostname nowhere: Name or service not '
            'known" >&2; exit 255 ;;\n'
            "esac\n"
            f'cd {self.home} && PATH={root}/$host:{self.tools} exec /bin/sh -c "$*"\n'
        )
        ssh.chmod(0o755)

    def worker(self, name: str, *daemons: str) -> Path:
        return install(self.root / name, *daemons)

    def run(
        self, plan: DaemonPlan, host: str, child: str | None = None, shell: str = "/bin/sh",
        *, ssh: bool = True,
    ) -> list[str]:  # fmt: skip
        """The lines ``host`` answers to the script, as the step reads them."""
        path = f"{self.root / host}:{self.tools}" if ssh else str(self.root / host)
        done = subprocess.run(
            [shell, "-c", script(plan, child, timeout=3)], cwd=self.home, env={"PATH": path},
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return (done.stdout + done.stderr).splitlines()


@pytest.fixture
def workers(tmp_path: Path) -> Workers:
    return Workers(tmp_path)


def by_name(**kw: object) -> DaemonPlan:
    """Open MPI 4's mpirun by name, no prefix."""
    how = "on the worker's non-interactive PATH (mpirun by name, no --prefix)"
    plan = DaemonPlan("Open MPI 4", False, "orted", (), True, "", how)
    return dataclasses.replace(plan, **kw)


def at_prefix(prefix: str) -> DaemonPlan:
    return by_name(paths=(f"{prefix}/bin/orted",), by_name=False, prefix=prefix)


def fatal(outcome: Outcome | None) -> Outcome:
    assert outcome is not None and outcome.status is Status.FATAL, outcome
    assert (outcome.stage, outcome.reason) == (Stage.SSH, Reason.DAEMON)
    return outcome


@pytest.mark.parametrize("shell", SHELLS)
def test_found_by_name_on_the_workers_path(workers, shell):
    home = workers.worker("w1", "orted", "hydra_pmi_proxy")
    lines = workers.run(by_name(), "w1", shell=shell)
    # an empty line first: it ends one that the login's own output may have left open
    assert lines[:2] == ["", f"{MARK}:begin"] and lines[-1] == f"{MARK}:end"
    found = read(by_name(), lines)
    assert found == Found(
        True,
        f"{home}/orted",
        {"orted": f"{home}/orted", "hydra_pmi_proxy": f"{home}/hydra_pmi_proxy"},
    )
    assert judge(by_name(), "w1", None, lines) is None


@pytest.mark.parametrize("shell", SHELLS)
def test_not_found_by_name(workers, shell):
    workers.worker("w1")
    plan = by_name()
    lines = workers.run(plan, "w1", shell=shell)
    assert read(plan, lines) == Found(True, "", {})
    outcome = fatal(judge(plan, "w1", None, lines))
    assert outcome.detail == (
        "orted is not on the non-interactive PATH (Open MPI 4's launch would fail: "
        "'orted: command not found')"
    )
    assert outcome.hint is not None and "mpirun --prefix" in outcome.hint
    assert "non-interactive logins" in outcome.hint


@pytest.mark.parametrize("shell", SHELLS)
def test_found_at_the_prefix_which_goes_first_on_path(workers, tmp_path, shell):
    workers.worker("w1")
    prefix = tmp_path / "opt/ompi"
    install(prefix / "bin", "orted")
    plan = at_prefix(str(prefix))
    lines = workers.run(plan, "w1", shell=shell)
    assert f"{MARK}:path:1:{prefix}/bin/orted" in lines
    # mpirun puts <prefix>/bin first on PATH: the worker's shell finds it by name too
    assert read(plan, lines) == Found(True, f"{prefix}/bin/orted", {"orted": f"{prefix}/bin/orted"})
    assert judge(plan, "w1", None, lines) is None


def test_not_found_at_the_prefix_nor_elsewhere(workers):
    workers.worker("w1")
    plan = at_prefix("/nonexistent/ompi")
    lines = workers.run(plan, "w1")
    assert f"{MARK}:path:0:/nonexistent/ompi/bin/orted" in lines
    outcome = fatal(judge(plan, "w1", None, lines))
    assert outcome.detail == (
        "no orted at /nonexistent/ompi/bin/orted (Open MPI 4's launch would fail: "
        "'No such file or directory')"
    )


def test_found_elsewhere_than_at_the_prefix(workers):
    home = workers.worker("w1", "orted")
    plan = at_prefix("/nonexistent/ompi")
    outcome = fatal(judge(plan, "w1", None, workers.run(plan, "w1")))
    assert outcome.detail == f"no orted at /nonexistent/ompi/bin/orted; orted is at {home}/orted"
    assert outcome.hint is not None and "same path" in outcome.hint and "--prefix" in outcome.hint


def test_by_name_and_at_its_own_prefix_passes_either_way(workers, tmp_path):
    """Open MPI 5 by name (or 4 whose ompi_info cannot tell): the PATH or its own prefix."""
    prefix = tmp_path / "venv"
    plan = DaemonPlan("Open MPI 5", False, "prted", (f"{prefix}/bin/prted",), True, "", "how")
    install(prefix / "bin", "prted")
    workers.worker("w1")
    assert judge(plan, "w1", None, workers.run(plan, "w1")) is None
    (prefix / "bin/prted").unlink()
    home = workers.worker("w2", "prted")
    assert judge(plan, "w2", None, workers.run(plan, "w2")) is None
    assert read(plan, workers.run(plan, "w2")).where == f"{home}/prted"
    workers.worker("w3")
    outcome = fatal(judge(plan, "w3", None, workers.run(plan, "w3")))
    assert outcome.detail.startswith(
        f"prted is neither on the non-interactive PATH nor at {prefix}/bin/prted (Open MPI 5's"
    )


@pytest.mark.parametrize(
    ("plan", "has", "detail"),
    [
        (
            by_name(),
            "prted",
            "it has prted at {w}/prted (Open MPI 5), the launcher runs Open MPI 4",
        ),
        (
            DaemonPlan(
                "MPICH", True, "hydra_pmi_proxy", ("/x/bin/hydra_pmi_proxy",), False, "", ""
            ),
            "orted",
            "it has orted at {w}/orted (Open MPI 4), the launcher runs MPICH",
        ),
        (
            DaemonPlan("Open MPI 5", False, "prted", (), True, "", ""),
            "hydra_pmi_proxy",
            "it has hydra_pmi_proxy at {w}/hydra_pmi_proxy (MPICH or Intel MPI), the launcher "
            "runs Open MPI 5",
        ),
    ],
    ids=["orted-vs-prted", "mpich-vs-orted", "prted-vs-hydra"],
)
def test_another_mpi_on_the_worker(workers, plan, has, detail):
    w = workers.worker("w1", has)
    outcome = fatal(judge(plan, "w1", None, workers.run(plan, "w1")))
    assert outcome.detail.endswith("; " + detail.format(w=w)), outcome.detail
    assert (
        outcome.hint == "use the same MPI, at the same version, in the launcher and worker images"
    )


def test_intels_launcher_and_a_worker_with_hydra_pmi_proxy_only(workers):
    """MPICH's proxy could be Intel's own: not called another MPI, only the missing file."""
    plan = DaemonPlan(
        "Intel MPI", True, "hydra_bstrap_proxy",
        ("/i/bin/hydra_bstrap_proxy", "/i/bin/hydra_pmi_proxy"), False, "", "",
    )  # fmt: skip
    workers.worker("w1", "hydra_pmi_proxy")
    outcome = fatal(judge(plan, "w1", None, workers.run(plan, "w1")))
    assert outcome.detail == (
        "no hydra_bstrap_proxy at /i/bin/hydra_bstrap_proxy, no hydra_pmi_proxy at "
        "/i/bin/hydra_pmi_proxy (Intel MPI's launch would fail: 'No such file or directory')"
    )
    assert outcome.hint is not None and "launcher's own folder" in outcome.hint


@pytest.mark.parametrize("shell", SHELLS)
def test_the_profile_variant_reads_dot_profile_first(workers, tmp_path, shell):
    """Open MPI with an sh or ksh login shell sources ~/.profile before starting orted."""
    workers.worker("w1")
    hidden = install(tmp_path / "opt/hidden/bin", "orted")
    (workers.home / ".profile").write_text(f"PATH=$PATH:{hidden}; export PATH\n")
    profile = by_name(profile=True)
    lines = workers.run(profile, "w1", shell=shell)
    assert read(profile, lines).where == f"{hidden}/orted"
    assert judge(profile, "w1", None, lines) is None
    # control: bash's plan sources nothing, the same worker fails
    assert fatal(judge(by_name(), "w1", None, workers.run(by_name(), "w1", shell=shell)))
    # no .profile: the test ! -r ./.profile branch
    (workers.home / ".profile").unlink()
    assert read(profile, workers.run(profile, "w1", shell=shell)) == Found(True, "", {})


def test_the_profile_and_prefix_variants_together(workers, tmp_path):
    prefix = tmp_path / "opt/ompi"
    install(prefix / "bin", "orted")
    workers.worker("w1")
    (workers.home / ".profile").write_text("echo from-profile\n")
    plan = dataclasses.replace(at_prefix(str(prefix)), profile=True)
    text = script(plan)
    assert text.startswith("( test ! -r ./.profile || . ./.profile; PATH=")
    lines = workers.run(plan, "w1")
    assert lines[0] == "from-profile"
    assert judge(plan, "w1", None, lines) is None


# --- tree spawn: the spawning worker logs in to its child with its own ssh -----------------


@pytest.mark.parametrize("shell", SHELLS)
def test_tree_spawn_found_through_the_child(workers, shell):
    workers.worker("w1", "orted")
    workers.worker("w3", "orted")
    plan = by_name(tree={"w1": "w3"}, radix=2)
    lines = workers.run(plan, "w1", "w3", shell=shell)
    assert f"{MARK}:agent:{workers.tools}/ssh" in lines
    assert f"{MARK}:via:{MARK}:begin" in lines
    assert judge(plan, "w1", "w3", lines) is None
    (call,) = workers.calls.read_text().splitlines()
    assert call.startswith("-o BatchMode=yes -o ConnectTimeout=3 -o ConnectionAttempts=1 w3 ")


def test_tree_spawn_with_an_agent_of_the_users(workers):
    workers.worker("w1", "orted")
    workers.worker("w3", "orted")
    plan = by_name(tree={"w1": "w3"}, agent=("ssh", "-F", "/etc/cfg"))
    assert judge(plan, "w1", "w3", workers.run(plan, "w1", "w3")) is None
    # the check's own options first: they win over the same ones in mpirun's arguments
    assert workers.calls.read_text().startswith(
        "-o BatchMode=yes -o ConnectTimeout=3 -o ConnectionAttempts=1 -F /etc/cfg w3 "
    )


def test_tree_spawn_child_without_the_daemon(workers):
    workers.worker("w1", "orted")
    workers.worker("w3")
    plan = by_name(tree={"w1": "w3"})
    outcome = fatal(judge(plan, "w1", "w3", workers.run(plan, "w1", "w3")))
    assert outcome.detail == (
        "on w3, reached as tree spawn will: orted is not on the non-interactive PATH (Open MPI "
        "4's launch would fail: 'orted: command not found')"
    )


def test_tree_spawn_the_spawning_worker_itself_is_checked_first(workers):
    workers.worker("w1")
    workers.worker("w3", "orted")
    plan = by_name(tree={"w1": "w3"})
    outcome = fatal(judge(plan, "w1", "w3", workers.run(plan, "w1", "w3")))
    assert outcome.detail.startswith("orted is not on the non-interactive PATH")


def test_tree_spawn_without_ssh_on_the_spawning_worker(workers):
    workers.worker("w1", "orted")
    workers.worker("w3", "orted")
    plan = by_name(tree={"w1": "w3"})
    lines = workers.run(plan, "w1", "w3", ssh=False)
    assert f"{MARK}:agent:" in lines
    outcome = fatal(judge(plan, "w1", "w3", lines))
    assert outcome.detail == (
        "no ssh on the non-interactive PATH, and the daemon here starts orted on w3 with it "
        "(tree spawn)"
    )
    assert outcome.hint is not None and "plm_rsh_no_tree_spawn 1" in outcome.hint


def test_tree_spawn_login_refused_is_fatal(workers):
    workers.worker("w1", "orted")
    plan = by_name(tree={"w1": "denied"})
    outcome = fatal(judge(plan, "w1", "denied", workers.run(plan, "w1", "denied")))
    assert outcome.detail == (
        "cannot log in to denied as tree spawn will: denied: Permission denied (publickey)."
    )
    assert outcome.hint is not None and "plm_rsh_no_tree_spawn" in outcome.hint


def test_tree_spawn_child_not_resolving_yet_is_retried(workers):
    workers.worker("w1", "orted")
    plan = by_name(tree={"w1": "nowhere"})
    outcome = judge(plan, "w1", "nowhere", workers.run(plan, "w1", "nowhere"))
    assert outcome == Outcome(
        Status.RETRY, Stage.SSH, Reason.DAEMON,
        "cannot log in to nowhere as tree spawn will: ssh: Could not resolve hostname nowhere: "
        "Name or service not known",
    )  # fmt: skip


def test_tree_spawn_no_answer_at_all_is_retried():
    plan = by_name(tree={"w1": "w3"})
    lines = [f"{MARK}:begin", f"{MARK}:name:orted:/usr/bin/orted", f"{MARK}:end",
             f"{MARK}:agent:/usr/bin/ssh", f"{MARK}:via:", f"{MARK}:via-status:255"]  # fmt: skip
    outcome = judge(plan, "w1", "w3", lines)
    assert outcome is not None and outcome.status is Status.RETRY
    assert outcome.detail == "cannot log in to w3 as tree spawn will: no answer"


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["Illegal variable name."],  # csh
        ["This account is currently not available."],  # nologin
        [f"{MARK}:begin", f"{MARK}:name:orted:"],  # cut short
    ],
)
def test_a_shell_that_did_not_run_the_script_is_not_judged(lines):
    assert judge(by_name(), "w1", None, lines) is None
    assert judge(by_name(tree={"w1": "w3"}), "w1", "w3", lines) is None


def test_missing_without_a_worker_line_names_the_daemon_and_mpirun_s_message():
    plan = DaemonPlan("MPICH", True, "hydra_pmi_proxy", ("/m/bin/hydra_pmi_proxy",), False, "", "")
    line, hint = missing(plan, Found(True, "", {}))
    assert line == (
        "no hydra_pmi_proxy at /m/bin/hydra_pmi_proxy (MPICH's launch would fail: 'No such file "
        "or directory')"
    )
    assert "hydra starts hydra_pmi_proxy by the launcher's own folder" in hint


# --- the step: once per worker, over the session it already has ----------------------------


class LocalChannel:
    """paramiko's channel as probe/paramiko_adapter.run uses it; the command runs in
    ``run`` (a real shell over a fake worker), or never finishes (``run`` None)."""

    def __init__(self, run: Callable[[str], str] | None) -> None:
        self._run = run
        self._out: list[bytes] = []
        self.status_event = threading.Event()
        self.timeout: float | None = None

    def set_combine_stderr(self, combine: bool) -> None:
        assert combine

    def settimeout(self, timeout: float) -> None:
        self.timeout = timeout

    def exec_command(self, command: str) -> None:
        if self._run is not None:
            self._out = [self._run(command).encode(), b""]
            self.status_event.set()

    def recv(self, size: int) -> bytes:
        if not self._out:
            raise TimeoutError
        return self._out.pop(0)

    def recv_exit_status(self) -> int:
        return 0

    def close(self) -> None:
        pass


class RecordingTransport:
    def __init__(self, run: Callable[[str], str] | None) -> None:
        self._run = run
        self.commands: list[str] = []
        self.channels: list[LocalChannel] = []

    def open_session(self, timeout: float) -> LocalChannel:
        def run(command: str) -> str:
            self.commands.append(command)
            return self._run(command) if self._run else ""

        self.channels.append(LocalChannel(run if self._run else None))
        return self.channels[-1]


def on(workers: Workers, host: str) -> Callable[[str], str]:
    def run(command: str) -> str:
        done = subprocess.run(
            ["/bin/sh", "-c", command], cwd=workers.home,
            env={"PATH": f"{workers.root / host}:{workers.tools}"},
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return done.stdout + done.stderr

    return run


def session(transport: RecordingTransport, host: str = "w1", timeout: float = 2.0) -> Session:
    return Session(transport, testbed.ssh_target(host=host), timeout, ())  # type: ignore[arg-type]


def test_a_worker_that_passed_is_not_checked_again(workers):
    workers.worker("w1", "orted")
    step = DaemonCheck(by_name())
    transport = RecordingTransport(on(workers, "w1"))
    assert step(session(transport)) is None
    assert len(transport.commands) == 1 and transport.commands[0] == script(by_name(), None, 2.0)
    assert step(session(transport)) is None  # its next login (a recheck, a lost connection)
    assert len(transport.channels) == 1  # no second round trip
    # another worker is checked on its own
    workers.worker("w2", "orted")
    other = RecordingTransport(on(workers, "w2"))
    assert step(session(other, "w2")) is None and len(other.commands) == 1


def test_a_worker_that_failed_is_checked_again(workers):
    home = workers.worker("w1")
    step = DaemonCheck(by_name())
    transport = RecordingTransport(on(workers, "w1"))
    fatal(step(session(transport)))
    fatal(step(session(transport)))
    install(home, "orted")  # fixed (an image rebuilt, a worker replaced)
    assert step(session(transport)) is None
    assert step(session(transport)) is None
    assert len(transport.commands) == 3


def test_a_check_that_does_not_finish_is_retried_and_checked_again():
    step = DaemonCheck(by_name())
    transport = RecordingTransport(None)
    outcome = step(session(transport, timeout=1.5))
    assert outcome == Outcome(
        Status.RETRY, Stage.SSH, Reason.DAEMON, "the daemon check took over 30s"
    )
    step(session(transport))
    assert len(transport.channels) == 2


def test_a_spawning_worker_has_its_connect_timeout_more_for_its_child(workers):
    workers.worker("w1", "orted")
    workers.worker("w3", "orted")
    plan = by_name(tree={"w1": "w3"}, radix=2)
    step = DaemonCheck(plan)
    transport = RecordingTransport(on(workers, "w1"))
    assert step(session(transport, timeout=4.0)) is None
    assert transport.commands == [script(plan, "w3", 4.0)]
    assert transport.channels[0].timeout == 34.0  # DAEMON_CHECK_TIMEOUT, and its login
    assert "ConnectTimeout=4" in transport.commands[0]
    # a worker that spawns no one checks only itself
    workers.worker("w2", "orted")
    other = RecordingTransport(on(workers, "w2"))
    assert step(session(other, "w2", timeout=4.0)) is None
    assert other.commands == [script(plan, None, 4.0)] and other.channels[0].timeout == 30.0


# --- what --dry-run shows (a process of its own, nothing connected to) ---------------------

FOREIGN = ("MPIWAIT_", "K_MPI_JOB_ROLE", "OMPI_", "HYDRA_", "I_MPI_", "PRTE_", "OPAL_", "SLURM_")
FOREIGN_VARIABLES = ("PBS_JOBID", "LSB_JOBID", "JOB_ID", "COBALT_JOBID")


def dry_run(bin_dir: Path, *args: str, command: Sequence[str] = (), **env: str) -> testbed.Result:
    base = {
        k: v
        for k, v in testbed.mpiwait_env().items()
        if not k.startswith(FOREIGN) and k not in FOREIGN_VARIABLES
    }
    base["PATH"] = f"{bin_dir}{os.pathsep}{base.get('PATH', os.defpath)}"
    r = testbed.run(
        None, ["--hosts", "192.0.2.1,192.0.2.2", "--dry-run", *args], command=command,
        env={**base, **env}, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r
    return r


@pytest.fixture
def ompi4_by_name(tmp_path: Path) -> Path:
    """Open MPI 4 whose ompi_info says it does not pass its prefix by default."""
    bin_dir = ompi4(tmp_path)
    install(bin_dir, "ssh")
    info = bin_dir / "ompi_info"
    info.write_text("#!/bin/sh\necho mpirun:prefix_by_default:no\n")
    info.chmod(0o755)
    return bin_dir


def test_dry_run_says_what_the_daemon_check_checks(ompi4_by_name):
    mpirun = ("mpirun", "-n", "2", "a.out")
    lines = dry_run(ompi4_by_name, command=mpirun).stdout.splitlines()
    assert [ln for ln in lines if "daemon check" in ln] == [
        "# daemon check: orted on the worker's non-interactive PATH (mpirun by name, no --prefix)"
    ]
    assert lines[-1].startswith("# daemon check:")  # after the hosts and the launch
    off = dry_run(ompi4_by_name, "--no-daemon-check", command=mpirun).stdout
    assert "# daemon check: off (--no-daemon-check)\n" in off
    off = dry_run(ompi4_by_name, "--check", "tcp", command=mpirun).stdout
    assert "# daemon check: off (--check tcp logs in nowhere)\n" in off
    off = dry_run(ompi4_by_name, command=("deepspeed", "train.py")).stdout  # pdsh, no MPI
    assert "# daemon check: off (COMMAND starts no MPI that mpiwait recognises)\n" in off
    assert "daemon check" not in dry_run(ompi4_by_name).stdout  # no COMMAND, no line


def test_dry_run_json_plan_has_the_daemon_check(ompi4_by_name):
    """Each run is also checked against docs/events.schema.json by testbed.run."""
    mpirun = ("mpirun", "--prefix", "/opt/ompi", "a.out")
    r = dry_run(ompi4_by_name, "--log-format", "json", command=mpirun)
    (line,) = r.stdout.splitlines()
    assert (
        json.loads(line)["daemon_check"] == "daemon check: orted at /opt/ompi/bin/orted (--prefix)"
    )
    r = dry_run(ompi4_by_name, "--log-format", "json", MPIWAIT_DAEMON_CHECK="0", command=mpirun)
    assert json.loads(r.stdout)["daemon_check"] == "daemon check: off (--no-daemon-check)"
    r = dry_run(ompi4_by_name, "--log-format", "json")
    assert json.loads(r.stdout)["daemon_check"] is None


# --- what mpirun's own line says, and what it does not -------------------------------------


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        # the program's own --prefix is not mpirun's
        (["mpirun", "-np", "4", "python3", "train.py", "--prefix", "exp1"], ""),
        (["mpirun", "--allow-run-as-root", "--mca", "a", "b", "a.out", "--prefix", "x"], ""),
        (["bash", "-c", "mpirun -np 2 python3 train.py --prefix exp1"], ""),
        # Open MPI 4 takes the one-dash spelling too
        (["mpirun", "-prefix", "/opt/ompi", "a.out"], "/opt/ompi"),
        (["mpirun", "--mca", "a", "b", "-x", "V", "--prefix", "/opt/ompi", "a.out"], "/opt/ompi"),
    ],
)
def test_only_mpiruns_own_options_give_a_prefix(tmp_path, argv, prefix):
    bin_dir = ompi4(tmp_path)
    install(bin_dir, "bash", "python3")
    plan = a_plan(argv, {"PATH": str(bin_dir)}, by_default=False)
    assert plan.prefix == prefix
    assert plan.by_name is (not prefix)


def test_noprefix_overrides_a_prefix_by_default_build(tmp_path):
    env = {"PATH": str(ompi4(tmp_path))}
    assert a_plan(["mpirun", "a.out"], env, by_default=True).by_name is False
    assert a_plan(["mpirun", "--noprefix", "a.out"], env, by_default=True).by_name is True


@pytest.mark.parametrize(
    "argv",
    [
        ["env", "OMPI_MCA_plm_rsh_no_tree_spawn=1", "mpirun", "a.out"],
        ["bash", "-c", "OMPI_MCA_plm_rsh_no_tree_spawn=1 mpirun a.out"],
        ["bash", "-c", "export OMPI_MCA_plm_rsh_no_tree_spawn=1; mpirun a.out"],
    ],
)
def test_a_variable_set_before_mpirun_counts(tmp_path, argv):
    bin_dir = ompi4(tmp_path)
    install(bin_dir, "bash", "env")
    plan = a_plan(argv, {"PATH": str(bin_dir)}, hosts(100))
    assert (plan.radix, plan.tree) == (0, None)
    control = a_plan(["bash", "-c", "mpirun a.out"], {"PATH": str(bin_dir)}, hosts(100))
    assert control.radix == 64 and control.tree


@pytest.mark.parametrize(
    "argv",
    [
        ["horovodrun", "-np", "100", "python3", "train.py"],  # it turns tree spawn off itself
        ["python3", "launch.py"],  # mpirun's options are not seen
    ],
)
def test_no_tree_check_where_mpiruns_options_are_not_seen(tmp_path, argv):
    bin_dir = ompi4(tmp_path)
    install(bin_dir, "horovodrun", "python3")
    plan = a_plan(argv, {"PATH": str(bin_dir)}, hosts(100))
    assert (plan.radix, plan.tree) == (0, None)


def test_an_unclosed_quote_in_the_agents_arguments_is_split_as_open_mpi_does(tmp_path):
    env = {"PATH": str(ompi4(tmp_path)), "OMPI_MCA_plm_rsh_args": "-o 'ProxyCommand=x -W %h:%p"}
    plan = a_plan(["mpirun", "a.out"], env)
    assert plan.agent == ("ssh", "-o", "'ProxyCommand=x", "-W", "%h:%p")


def test_an_open_mpi_of_unknown_version_is_not_checked(tmp_path):
    # an mpiexec.openmpi with neither ORTE's nor PRRTE's programs anywhere
    bin_dir = install(tmp_path / "ompi/bin", "mpiexec.openmpi")
    why = plan_of(["mpiexec.openmpi", "a.out"], {"PATH": str(bin_dir)})
    assert why == "which Open MPI (4 or 5, so orted or prted) could not be told"


@pytest.mark.parametrize(
    ("shell", "kind"),
    [
        ("/bin/bash", "bash"),
        ("/bin/dash", "sh"),
        ("/bin/ash", "sh"),
        ("/bin/mksh", "ksh"),
        ("/usr/bin/zsh", "zsh"),
        ("/bin/tcsh", "tcsh"),
        ("/usr/sbin/nologin", ""),
    ],
)
def test_a_login_shell_is_read_as_open_mpi_reads_it(shell, kind):
    assert shell_kind(shell) == kind


def test_dash_sources_dot_profile_as_open_mpi_does(tmp_path):
    env = {"PATH": str(ompi4(tmp_path))}
    assert a_plan(["mpirun", "a.out"], env, shell="/bin/dash").profile is True
    assert a_plan(["mpirun", "a.out"], env, shell="/bin/bash").profile is False
