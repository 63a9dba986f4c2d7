"""End to end through real MPI: mpiwait in front of Open MPI's mpirun and MPICH's hydra, each
set up the way a user deploys it, over worker "hosts" that are network namespaces running real
sshd (tests/testbed/).

Every launch test has at least one worker that is not ready when mpiwait starts, and asserts
what a user sees: the exit status, every worker's hostname in mpirun's stdout and mpiwait's
progress lines on stderr. A mpiwait that did not wait (or whose probe checked too little) would
start mpirun while a worker is down, and mpirun fails at once in that case: the control run in
``test_openmpi_entrypoint_waits_for_staggered_workers`` and
``test_a_probe_that_checks_too_little_launches_too_early`` show that it does.

Timing: nothing asserts how fast anything was, and deadlines are far away (--timeout 60). The
order of events does not depend on the machine's speed either: a late worker comes up, or a
fault clears, only after mpiwait has reported it down (see ``finish``), so a slow start of
mpiwait cannot make it miss the moment that matters.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import testbed

pytestmark = [pytest.mark.root, pytest.mark.mpi, testbed.needs("netns")]

REPO = Path(__file__).resolve().parents[2]
# The interpreter running the tests: the CI venv (package installed) or a system Python with
# the dependencies; PYTHONPATH (see mpiwait_env) makes the checkout's package win either way.
MPIWAIT = [sys.executable, "-m", "mpiwait"]
DEADLINE = ["--timeout", "60"]
RUN_TIMEOUT = 90.0  # a bound for one launcher run; far above the 60 s deadline

# Settings of the outer environment that would change what mpiwait or MPI do here.
_FOREIGN_ENV = ("MPIWAIT_", "K_MPI_JOB_ROLE", "OMPI_", "HYDRA_", "I_MPI_", "PMIX_")


def mpiwait_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def show(r: subprocess.CompletedProcess[str] | testbed.Result) -> str:
    """What pytest prints when an assertion about a run fails."""
    args = r.argv if isinstance(r, testbed.Result) else r.args
    argv = args if isinstance(args, str) else shlex.join(map(str, args))
    return f"\n$ {argv}\nexit {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}"


def assert_launched(r: subprocess.CompletedProcess[str], hostnames: Sequence[str]) -> None:
    """mpiwait said all were ready, exec'd the launcher, and every worker answered."""
    assert r.returncode == 0, show(r)
    assert sorted(r.stdout.split()) == sorted(hostnames), show(r)
    assert re.search(r"^mpiwait: all \d+ hosts ready in ", r.stderr, re.M), show(r)
    assert "Traceback" not in r.stderr, show(r)


def assert_saw(r: subprocess.CompletedProcess[str], pattern: str) -> None:
    """mpiwait reported this host state while waiting (a progress line on stderr)."""
    assert re.search(progress(pattern), r.stderr, re.M), show(r)


Steps = Sequence[tuple[float, Callable[[], object]]]


def finish(
    p: subprocess.Popen[str] | testbed.Proc,
    *,
    when: str | None = None,
    then: Steps = (),
    timeout: float = RUN_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Wait for a run (testbed.start()'s, or a Popen with stdout and stderr piped, in a session
    of its own). With ``when``: once a stderr line matches it, play ``then`` (seconds after
    that moment, action), so that a worker comes up (or a fault clears) only after mpiwait has
    reported it down, however slowly the machine runs. If the run ends first, the steps are
    not played."""
    if not isinstance(p, testbed.Proc):
        p = testbed.Proc(p, list(p.args), time.monotonic(), read=True)
    run = p
    timeline = None
    seen = True
    if when is not None:
        try:
            run.wait_for(when, timeout)
        except AssertionError:
            seen = False  # ended (or timed out) first: reported below, with the output
        else:
            timeline = Timeline(then).__enter__()
    try:
        res = run.finish(max(0.1, timeout - (time.monotonic() - run.started)))
    finally:
        if timeline is not None:
            timeline.__exit__(None, None, None)
    r = subprocess.CompletedProcess(run.argv, res.returncode, res.stdout, res.stderr)
    assert seen, f"no stderr line matched {when!r}" + show(r)
    return r


def launch(
    b: testbed.TestBed,
    mpiwait_args: Sequence[str],
    command: Sequence[str] = (),
    *,
    env: dict[str, str] | None = None,
    when: str | None = None,
    then: Steps = (),
    timeout: float = RUN_TIMEOUT,
    **kw,
) -> subprocess.CompletedProcess[str]:
    """``mpiwait ARGS [-- COMMAND]`` in the bed's launcher context (see finish())."""
    p = testbed.start(b, mpiwait_args, command=command, env=env or mpiwait_env(), read=True, **kw)
    return finish(p, when=when, then=then, timeout=timeout)


def progress(pattern: str) -> str:
    """A regex for mpiwait's progress line about a host, e.g. progress("w3: tcp refused")."""
    return rf"^mpiwait: \[\+[\d.]+s\] {pattern}"


@dataclass
class Timeline:
    """Runs ``(seconds, action)`` steps in order on a thread, each at its offset from the start
    (or as soon as the one before has finished); errors surface when the block ends."""

    steps: Steps
    errors: list[BaseException] = field(default_factory=list)

    def __enter__(self) -> Timeline:
        t0 = time.monotonic()

        def play() -> None:
            for at, action in self.steps:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                try:
                    action()
                except BaseException as e:  # reported by __exit__, in the test's thread
                    self.errors.append(e)
                    return

        self._thread = threading.Thread(target=play, name="timeline", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "timeline steps did not finish"
        if self.errors:
            raise self.errors[0]


# --------------------------------------------------------------------------------------------
# Entry-point mode and initContainer mode


@testbed.needs("openmpi4")
def test_openmpi_entrypoint_waits_for_staggered_workers(bed):
    b = bed(3, start=False)
    b.start_sshd(0)
    mpirun = b.openmpi_argv(["hostname"])

    # Control: the same mpirun without mpiwait, while w2 and w3 are down, fails.
    control = b.run(mpirun, timeout=RUN_TIMEOUT)
    assert control.returncode != 0, "mpirun succeeded with workers down: tests nothing" + show(
        control
    )
    assert "refused" in control.stderr, show(control)

    # w2 and w3 come up a little after mpiwait has found them down
    r = launch(
        b,
        ["--hosts", "w1,w2,w3", *DEADLINE, "-F", str(b.ssh_config)],
        mpirun,
        when=progress("w3: tcp refused"),
        then=[(1.0, lambda: b.start_sshd(1)), (2.5, lambda: b.start_sshd(2))],
    )
    assert_launched(r, ["w1", "w2", "w3"])
    assert_saw(r, r"w2: tcp refused")
    assert re.search(r"^mpiwait: waiting for 3 hosts \(--hosts \(3 hosts\)\)", r.stderr, re.M)
    assert re.search(r"^mpiwait: \[\+[\d.]+s\] 3/3 ready \(w\d\)$", r.stderr, re.M), show(r)


@testbed.needs("mpich4")
def test_mpich_hydra_entrypoint_waits_for_staggered_workers(bed):
    b = bed(3, start=False)
    b.start_sshd(0)
    r = launch(
        b,
        ["--hosts", ",".join(b.names), *DEADLINE, "-F", str(b.ssh_config)],
        b.mpich_argv(["hostname"]),
        when=progress("w3: tcp refused"),
        then=[(1.0, lambda: b.start_sshd(1)), (2.5, lambda: b.start_sshd(2))],
    )
    assert_launched(r, ["w1", "w2", "w3"])


@testbed.needs("openmpi4")
def test_init_container_then_mpirun_as_a_separate_process(bed, tmp_path):
    b = bed(3, start=False)
    etc_mpi = b.write_etc_mpi(tmp_path / "etc-mpi")
    b.start_sshd(0)
    # The initContainer: no COMMAND, no host or SSH flags (the /etc/mpi files and the
    # /etc/ssh/ssh_config of the image); it exits 0 once all workers are up.
    init = launch(
        b,
        DEADLINE,
        etc_mpi=etc_mpi,
        when=progress("w3: tcp refused"),
        then=[(1.0, lambda: b.start_sshd(1)), (2.5, lambda: b.start_sshd(2))],
    )
    assert init.returncode == 0, show(init)
    assert init.stdout == "", show(init)
    assert "/etc/mpi/hostfile (3 hosts); /etc/mpi/discover_hosts.sh (3 hosts)" in init.stderr
    assert "mpiwait: all 3 hosts ready in " in init.stderr, show(init)
    # The main container starts afterwards, as a process of its own.
    r = b.run(b.openmpi_argv(["hostname"]), etc_mpi=etc_mpi, timeout=RUN_TIMEOUT)
    assert r.returncode == 0, show(r)
    assert sorted(r.stdout.split()) == ["w1", "w2", "w3"], show(r)


# --------------------------------------------------------------------------------------------
# The mpi-operator layout (see shared/reference/mpi-operator.md)

JOB_WORKERS = ["job-worker-0.job.ns.svc", "job-worker-1.job.ns.svc"]
JOB_LAUNCHER = "job-launcher.job.ns.svc"

# The project's base images edit Debian's default /etc/ssh/ssh_config; the operator writes none.
OPERATOR_SSH_CONFIG = """\
Host *
    SendEnv LANG LC_*
    HashKnownHosts yes
    GSSAPIAuthentication yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    Port 2222
"""


@pytest.mark.parametrize(
    "flavor",
    [
        pytest.param("openmpi", marks=testbed.needs("openmpi4")),
        pytest.param("mpich", marks=testbed.needs("mpich4")),
    ],
)
def test_mpi_operator_layout_with_no_ssh_flags(bed, tmp_path, flavor):
    """/etc/mpi as the operator writes it (runLauncherAsWorker: the launcher listed first),
    the job's ECDSA P-521 PEM key as ~/.ssh/id_rsa, the image's ssh_config with Port 2222,
    workers named <pod>.<job>.<ns>.svc whose DNS records appear only once they are Ready (and
    whose sshd may lag that), and mpiwait with nothing but the defaults."""
    b = bed(2, names=JOB_WORKERS, port=2222, key_type="ecdsa-p521-pem", start=False)
    b.unpublish(1)
    b.start_sshd(0)

    etc_mpi = tmp_path / "etc-mpi"
    etc_mpi.mkdir()
    spec = "{} slots=1" if flavor == "openmpi" else "{}:1"
    (etc_mpi / "hostfile").write_text(
        "".join(spec.format(h) + "\n" for h in [JOB_LAUNCHER, *JOB_WORKERS])
    )
    (etc_mpi / "hostfile").chmod(0o444)
    # discover_hosts.sh lists Running pods only: worker 1 is not running yet
    b.write_discover_hosts(etc_mpi, [JOB_LAUNCHER, JOB_WORKERS[0]])
    ssh_auth = b.write_ssh_auth(tmp_path / "ssh-auth")
    assert (ssh_auth / "id_rsa").read_text().startswith("-----BEGIN EC PRIVATE KEY-----")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(OPERATOR_SSH_CONFIG)

    # The launcher pod: its own hostname (hydra runs a host locally only when the name is
    # exactly its hostname, so for MPICH the pod's hostname is the full name), and its name
    # in the launcher's view of DNS, kept in step with the bed's records.
    uts = JOB_LAUNCHER if flavor == "mpich" else JOB_LAUNCHER.split(".")[0]
    hosts = tmp_path / "launcher-hosts"

    def sync_hosts() -> None:
        lines = [ln for ln in b.hosts_file.read_text().splitlines() if ln.strip()]
        lines.append(f"{b.launcher_addr}\t{JOB_LAUNCHER} {JOB_LAUNCHER.split('.')[0]}")
        testbed.write_in_place(hosts, "\n".join(lines) + "\n")

    sync_hosts()
    pod = [
        "unshare",
        "--uts",
        "sh",
        "-c",
        f'hostname {uts} && mount --bind {shlex.quote(str(hosts))} /etc/hosts && exec "$@"',
        "launcher-pod",
    ]
    if flavor == "openmpi":
        env = mpiwait_env(
            K_MPI_JOB_ROLE="launcher",
            **testbed.OPERATOR_OPENMPI,
            # the bed's network, not the operator's
            OMPI_MCA_oob_tcp_if_include=b.subnet,
            OMPI_MCA_btl_tcp_if_include=b.subnet,
            OMPI_MCA_orte_tmpdir_base=str(b.tmp_dir),
        )
        command = ["mpirun", "--allow-run-as-root", "-np", "3", "hostname"]
        answers = ["job-launcher", "job-worker-0", "job-worker-1"]
    else:
        env = mpiwait_env(
            K_MPI_JOB_ROLE="launcher",
            HYDRA_HOST_FILE="/etc/mpi/hostfile",
            HYDRA_LAUNCH_EXTRA_ARGS="-o ConnectionAttempts=10",
        )
        command = ["mpiexec.hydra", "-launcher", "ssh", "-iface", b.bridge, "-n", "3", "hostname"]
        answers = [JOB_LAUNCHER, "job-worker-0", "job-worker-1"]
    mounts = {"etc_mpi": etc_mpi, "home_ssh": ssh_auth, "ssh_config": ssh_config}

    # What mpiwait makes of the files and defaults alone.
    plan = testbed.run(b, ["--dry-run"], env=env, wrapper=pod, **mounts)
    assert plan.returncode == 0, show(plan)
    for w in JOB_WORKERS:
        assert re.search(
            rf"^{re.escape(w)} .*port=2222 user=root identity=/root/\.ssh/id_rsa "
            r"strict_host_key_checking=no ",
            plan.stdout,
            re.M,
        ), show(plan)
    assert f"# this machine: {JOB_LAUNCHER} (no login; " in plan.stdout, show(plan)

    def worker_1_running() -> None:
        b.write_discover_hosts(etc_mpi, [JOB_LAUNCHER, *JOB_WORKERS])

    def worker_1_ready() -> None:  # Ready = containers started: the record appears...
        b.publish(1)
        sync_hosts()

    p = testbed.start(b, DEADLINE, command=command, env=env, wrapper=pod, read=True, **mounts)
    r = finish(
        p,
        when=progress(re.escape(JOB_WORKERS[1]) + r": dns unresolved"),
        then=[
            (0.5, worker_1_running),
            (1.5, worker_1_ready),
            (2.5, lambda: b.start_sshd(1)),  # ...and sshd listens a moment later
        ],
    )
    assert_launched(r, answers)
    assert re.search(
        r"^mpiwait: waiting for 3 hosts \(/etc/mpi/hostfile \(3 hosts\); "
        r"/etc/mpi/discover_hosts\.sh \(2 hosts\)\) to pass the ssh check",
        r.stderr,
        re.M,
    ), show(r)
    # the launcher's own entry: it must resolve (it does), and gets no login
    assert f"mpiwait: this machine: {JOB_LAUNCHER} (no login; " in r.stderr, show(r)


# --------------------------------------------------------------------------------------------
# Non-root: launcher and workers as mpiuser


@testbed.needs("openmpi4")
def test_non_root_launcher_and_workers_on_port_2222(bed, tmp_path, as_user):
    b = bed(3, user="mpiuser", port=2222, start=False)  # creates mpiuser if missing
    wrap, drop = as_user("mpiuser")  # lets mpiuser run this interpreter (see conftest)

    # Workers as in the operator's non-root images: sshd runs as mpiuser on 2222 and the job
    # key doubles as its host key.
    sshd_procs = []

    def start_worker(i: int) -> None:
        h = b.hosts[i]
        conf = b.client_dir / f"sshd_config.mpiuser.{i}"
        lines = h.sshd_config.read_text().splitlines()
        lines = [ln for ln in lines if not ln.startswith(("HostKey ", "PermitRootLogin "))]
        conf.write_text("\n".join([*lines, f"HostKey {b.key_path}", ""]))
        conf.chmod(0o644)
        argv = b.ns_exec_cmd(
            i,
            [
                *drop,
                testbed.SSHD,
                "-De",
                "-f",
                str(conf),
            ],
        )
        with open(tmp_path / f"sshd.{i}.log", "ab") as log:
            sshd_procs.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, testbed.ENV_TAG: b.bed_id},
                )
            )

    try:
        start_worker(0)
        b.wait_listening([0], timeout=20)
        # The launcher: mpiuser's own home, with the job key as ~/.ssh/id_rsa (as the
        # ssh-auth secret mounted at sshAuthMountPath /home/mpiuser/.ssh), no SSH flags.
        ssh_auth = b.write_ssh_auth(tmp_path / "ssh-auth", owner="mpiuser")
        ssh_config = tmp_path / "ssh_config"
        ssh_config.write_text(OPERATOR_SSH_CONFIG)
        ssh_config.chmod(0o644)
        mpirun = b.openmpi_argv(["sh", "-c", 'echo "$(id -un)@$(hostname)"'], ssh_config=False)
        argv = b.launcher_cmd(
            [*MPIWAIT, "--hosts", ",".join(b.names), *DEADLINE, "--", *mpirun],
            home_ssh=ssh_auth,
            ssh_config=ssh_config,
            as_user="mpiuser",
        )
        p = subprocess.Popen(
            [*wrap, *argv],
            env={**mpiwait_env(), testbed.ENV_TAG: b.bed_id},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/tmp",
            start_new_session=True,
        )
        r = finish(
            p,
            when=progress(r"w3: tcp refused \(10\.123\.\d+\.13 port 2222: refused\)"),
            then=[(1.0, lambda: start_worker(1)), (2.5, lambda: start_worker(2))],
        )
        assert_launched(r, ["mpiuser@w1", "mpiuser@w2", "mpiuser@w3"])
        for i in range(3):
            log = (tmp_path / f"sshd.{i}.log").read_text()
            assert "Accepted publickey for mpiuser" in log, log
    finally:
        for p in sshd_procs:
            testbed.kill_group(p)


# --------------------------------------------------------------------------------------------
# The same image on a worker


@testbed.needs("openmpi4")
def test_worker_role_execs_sshd_at_once_and_it_serves_the_launcher(bed, tmp_path):
    b = bed(2, start=False)
    b.start_sshd(0)
    h = b.hosts[1]
    # A worker pod of the same image: the entrypoint is mpiwait, the command sshd. No /etc/mpi
    # on a worker, no hosts to wait for: it must step aside at once.
    argv = b.ns_exec_cmd(1, [*MPIWAIT, *DEADLINE, "--", testbed.SSHD, "-De", "-f", h.sshd_config])
    log = tmp_path / "worker.log"
    env = mpiwait_env(K_MPI_JOB_ROLE="worker", **{testbed.ENV_TAG: b.bed_id})
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    try:
        b.wait_listening([1], timeout=30)
        # exec'd in place: the process we started is now sshd itself, nothing of mpiwait left
        assert os.readlink(f"/proc/{worker.pid}/exe") == os.path.realpath(testbed.SSHD)
        assert "mpiwait:" not in log.read_text(), log.read_text()

        mpirun = b.openmpi_argv(["hostname"])
        r = launch(b, ["--hosts", "w1,w2", *DEADLINE, "-F", str(b.ssh_config)], mpirun)
        assert_launched(r, ["w1", "w2"])
        assert "Accepted publickey for root" in log.read_text(), log.read_text()
    finally:
        testbed.kill_group(worker)


# --------------------------------------------------------------------------------------------
# Faults while waiting, each ending in a successful launch once it clears


@dataclass(frozen=True)
class Fault:
    setup: Callable[[testbed.TestBed], object]  # before mpiwait starts
    clear: Sequence[tuple[float, Callable[[testbed.TestBed], object]]]  # after `seen`
    seen: str  # the progress line mpiwait prints while the fault lasts
    args: tuple[str, ...] = ()  # more mpiwait options


def _stop_and_listen_silently(b: testbed.TestBed) -> None:
    b.stop_sshd(2)
    b.start_silent_listener(2)


def _replace_listener_by_sshd(b: testbed.TestBed) -> None:
    b.stop_silent_listener(2)
    b.start_sshd(2)


FAULTS = {
    # Kubernetes publishes a worker's record only once the pod is Ready
    "name-appears-later": Fault(
        lambda b: b.unpublish(2), [(1.0, lambda b: b.publish(2))], r"w3: dns unresolved"
    ),
    "blackholed-then-open": Fault(
        lambda b: b.blackhole(2), [(1.0, lambda b: b.unblackhole(2))], r"w3: tcp timeout"
    ),
    "link-down-then-up": Fault(
        lambda b: b.link_down(2),
        [(1.0, lambda b: b.link_up(2))],
        r"w3: tcp (timeout|unreachable)",
    ),
    "banner-less-listener-then-sshd": Fault(
        _stop_and_listen_silently, [(1.0, _replace_listener_by_sshd)], r"w3: ssh no-banner"
    ),
    # w3 comes up and passes; while w1 is still late, mpiwait goes on probing w1 but never w3
    # again, also not when w3 goes down and up again meanwhile; then w1 comes up.
    "flapping-host": Fault(
        lambda b: (b.stop_sshd(0), b.stop_sshd(2), b.syns(0), b.syns(2)),
        [(0.0, lambda b: b.start_sshd(2)), (0.0, lambda b: _flap_after_the_pass(b))],
        r"w3: tcp refused",
        args=("--retry-max", "0.5"),  # w1's attempts come at least every 0.5 s
    ),
}


def _sshd_logins(b: testbed.TestBed, i: int) -> int:
    return b.hosts[i].sshd_log.read_text(errors="replace").count("Accepted publickey for ")


def _flap_after_the_pass(b: testbed.TestBed) -> None:
    deadline = time.monotonic() + 60
    while _sshd_logins(b, 2) < 1:  # mpiwait's login: w3 passed
        assert time.monotonic() < deadline, "mpiwait never logged into w3"
        time.sleep(0.02)
    w3_syns = b.syns(2)
    b.stop_sshd(2)
    b.start_sshd(2)  # returns once it listens again
    w1_syns = b.syns(0)
    while b.syns(0) < w1_syns + 3:  # mpiwait kept waiting: three more attempts on w1
        assert time.monotonic() < deadline, "mpiwait stopped probing the late w1"
        time.sleep(0.02)
    assert b.syns(2) == w3_syns, "mpiwait probed w3 again after it had passed"
    b.start_sshd(0)


@testbed.needs("openmpi4")
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_while_waiting_then_launch(bed, tmp_path, fault):
    f = FAULTS[fault]
    b = bed(3)
    # ssh gives up on a silent host after ConnectTimeout (without it, the kernel's SYN retries
    # and an endless wait for a banner would ride out a short fault for a plain mpirun too);
    # mpiwait takes its per-attempt timeout from the same file. Each fault lasts longer.
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(b.ssh_config.read_text() + "    ConnectTimeout 2\n")
    f.setup(b)
    mpirun = b.openmpi_argv(["hostname"], ssh_config=ssh_config)
    args = ["--hosts", "w1,w2,w3", *DEADLINE, "-F", str(ssh_config), *f.args]
    # The fault clears a moment after mpiwait has reported it.
    clear = [(at, lambda a=action: a(b)) for at, action in f.clear]
    r = launch(b, args, mpirun, when=progress(f.seen), then=clear)
    assert_launched(r, ["w1", "w2", "w3"])


# --------------------------------------------------------------------------------------------
# The wait is what makes the launch work


@testbed.needs("openmpi4")
def test_a_probe_that_checks_too_little_launches_too_early(bed):
    """Names resolve before sshd listens (a Service with publishNotReadyAddresses): a probe
    that stops at DNS lets mpirun start while w3's sshd is down, and mpirun fails. The SSH
    check, in the same situation, waits and the launch succeeds."""
    b = bed(3, start=False)
    b.start_sshd(0)
    b.start_sshd(1)
    mpirun = b.openmpi_argv(["hostname"])
    args = ["--hosts", "w1,w2,w3", *DEADLINE, "-F", str(b.ssh_config)]

    early = launch(b, [*args, "--check", "dns"], mpirun)
    assert "mpiwait: all 3 hosts ready in " in early.stderr, show(early)
    assert early.returncode != 0, "mpirun succeeded with w3 down: tests nothing" + show(early)
    assert "w3 port 22: Connection refused" in early.stderr, show(early)
    assert "w3" not in early.stdout.split(), show(early)

    r = launch(
        b, args, mpirun, when=progress("w3: tcp refused"), then=[(1.0, lambda: b.start_sshd(2))]
    )
    assert_launched(r, ["w1", "w2", "w3"])
