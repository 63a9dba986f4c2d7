"""The README's first command, scripts/demo, run as a newcomer runs it: it exits 0, mpiwait's
progress shows, every worker answers, and nothing of it is left behind, also after Ctrl-C.

As root the demo uses the namespace test bed (its namespaces and links start with "md", the
tests' beds with "mw"); as any user (and as root with --loopback) it uses unprivileged sshd on
127.0.0.x. Where the checkout's .venv already has mpiwait installed (CI: scripts/test made it)
the demo runs exactly as the README says; otherwise it is pointed at this interpreter with
--python, so that the test never installs anything.
"""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import testbed

pytestmark = [pytest.mark.root, pytest.mark.mpi, testbed.needs("netns"), testbed.needs("openmpi4")]

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo"
BED_PREFIX = "md"  # scripts/demo's namespaces and links
TMP_PREFIX = "mpiwait-demo-"  # scripts/demo's temporary directory
RUN_TIMEOUT = 120.0
_FOREIGN_ENV = ("MPIWAIT_", "K_MPI_JOB_ROLE", "OMPI_", "HYDRA_", "I_MPI_", "PMIX_")


def demo_argv(*args: str, as_root: bool = True) -> list[str]:
    venv_ready = (REPO / ".venv" / "bin" / "mpiwait").exists()
    if as_root and venv_ready:
        return [str(DEMO), *args]
    return [str(DEMO), "--python", sys.executable, *args]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}


@dataclass
class Snapshot:
    """What of the demo's kind exists at one moment (to tell its leftovers from others')."""

    links: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)

    @classmethod
    def take(cls) -> Snapshot:
        links = set(testbed.bed_names(BED_PREFIX))
        tmp = Path(tempfile.gettempdir())
        return cls(links, {str(p) for p in tmp.glob(TMP_PREFIX + "*")})


def _demo_processes() -> list[str]:
    """Live processes started by a demo: tagged with its bed, or naming its directory."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        tagged = f"\0{testbed.ENV_TAG}={BED_PREFIX}".encode() in b"\0" + environ
        if tagged or f"/{TMP_PREFIX}".encode() in cmdline + environ:
            args = cmdline.replace(b"\0", b" ").decode(errors="replace")
            out.append(f"pid {entry.name}: {args[:150]}")
    return out


def leftovers(before: Snapshot) -> list[str]:
    """What the demo left behind; waits a little for what is already on its way out."""
    deadline = time.monotonic() + 5
    while True:
        now = Snapshot.take()
        left = sorted(now.links - before.links) + sorted(now.dirs - before.dirs)
        left += _demo_processes()
        beds = testbed.STATE_ROOT / "beds"
        left += [str(p) for p in beds.glob(f"{BED_PREFIX}*.json")] if beds.is_dir() else []
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


class DemoRun(testbed.Proc):
    """scripts/demo as in a terminal: its own session (as a shell job), stdout and stderr
    together, read as they come (``wait_for(..., stream="stdout")``)."""

    def __init__(self, argv: list[str], *, wrap: list[str] = (), cwd: Path = REPO) -> None:
        p = subprocess.Popen(
            [*wrap, *argv],
            cwd=cwd,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        super().__init__(p, [*wrap, *argv], time.monotonic(), read=True)

    @property
    def lines(self) -> list[str]:  # type: ignore[override]
        return [ln.rstrip("\n") for ln in super().lines("stdout")]

    @property
    def output(self) -> str:
        return "".join(super().lines("stdout"))

    def ctrl_c(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to the whole foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self, timeout: float = RUN_TIMEOUT) -> int:  # type: ignore[override]
        return super().finish(timeout).returncode


def assert_demo_succeeded(run: DemoRun, status: int) -> None:
    out = run.output
    assert status == 0, out
    lines = run.lines
    running = next(i for i, ln in enumerate(lines) if ln.startswith("demo: running: "))
    assert re.search(r"mpiwait .*--hosts w1,w2,w3 .*-- mpirun ", lines[running]), out
    assert "mpiwait: waiting for 3 hosts" in out, out
    assert re.search(r"^mpiwait: \[\+[\d.]+s\] w3: tcp refused", out, re.M), out
    ready = lines.index(next(ln for ln in lines if ln.startswith("mpiwait: all 3 hosts ready")))
    answers = [i for i, ln in enumerate(lines) if ln in ("w1", "w2", "w3")]
    assert sorted(lines[i] for i in answers) == ["w1", "w2", "w3"], out
    assert running < ready < min(answers), out  # mpirun ran only after the wait
    assert "demo: every worker answered: w1, w2, w3" in out, out
    assert "Traceback" not in out, out


def ensure_user(name: str) -> pwd.struct_passwd:
    """An ordinary user that sshd (without PAM) lets log in: not locked."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
    shadow = Path("/etc/shadow").read_text().splitlines()
    entry = next((ln.split(":") for ln in shadow if ln.startswith(name + ":")), None)
    if entry is None or entry[1].startswith("!") or entry[1] == "":
        subprocess.run(["usermod", "-p", "*", name], check=True)
    return pwd.getpwnam(name)


# --------------------------------------------------------------------------------------------


def test_demo_as_root_uses_network_namespaces():
    before = Snapshot.take()
    run = DemoRun(demo_argv())  # the README's command, with its defaults (w3 5 s late)
    status = run.finish()
    assert_demo_succeeded(run, status)
    assert "network namespaces" in run.output
    assert leftovers(before) == []


def test_demo_loopback_path_as_root():
    before = Snapshot.take()
    run = DemoRun(demo_argv("--loopback", "--delay", "3"))
    status = run.finish()
    assert_demo_succeeded(run, status)
    assert "sshd instances on loopback addresses" in run.output
    assert leftovers(before) == []


def test_demo_as_an_ordinary_user(as_user):
    ensure_user("mpiuser")
    wrap, drop = as_user("mpiuser")
    before = Snapshot.take()
    run = DemoRun([*drop, *demo_argv("--delay", "3", as_root=False)], wrap=wrap, cwd=Path("/"))
    status = run.finish()
    assert_demo_succeeded(run, status)
    assert "serving only mpiuser" in run.output
    assert leftovers(before) == []


@pytest.mark.parametrize("path", ["namespaces", "loopback"])
def test_ctrl_c_while_waiting_stops_and_removes_everything(path):
    before = Snapshot.take()
    extra = ["--loopback"] if path == "loopback" else []
    run = DemoRun(demo_argv(*extra, "--delay", "60"))
    try:
        run.wait_for(r"^mpiwait: \[\+[\d.]+s\] w3: tcp refused", RUN_TIMEOUT, stream="stdout")
        run.wait_for(r"^mpiwait: \[\+[\d.]+s\] 2/3 ready", RUN_TIMEOUT, stream="stdout")
    finally:
        run.ctrl_c()
    status = run.finish(timeout=60)
    out = run.output
    assert status == 130, out
    # mpiwait got the Ctrl-C too (same process group) and said who was not ready
    assert re.search(r"^mpiwait: interrupted by SIGINT after .*: 1 of 3 hosts not ready", out, re.M)
    assert "demo: interrupted by SIGINT: cleaning up" in out, out
    assert not re.search(r"^w[123]$", out, re.M), out  # mpirun never ran
    assert "Traceback" not in out, out
    assert leftovers(before) == []
