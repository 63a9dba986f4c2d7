"""Another Debian release's Python, to run the suite's unit and integration tiers on
(tests/pythons/): the package claims more Python versions than the host's.

- ``python_rootfs(suite)``: a tarball of ``containers.rootfs(suite)`` with that suite's
  ``python3`` and ``python3-venv``, what the two tiers use of a machine (OpenSSH's client and
  server, iproute2, ...; the table in _needs.py), and a virtualenv at ``VENV`` holding the
  build backend, mpiwait's dependencies and its test and release extras from PyPI (newest
  allowed, as ``.venv``). Cached as the OpenSSH roots are (releases.py), keyed by those
  requirements as pyproject.toml states them, so a new pin makes a new root; extracted once by
  ``python_root(suite)``, read-only for its users.
- ``run(suite, argv, scratch)``: ``argv`` in that root under chroot, in a private mount
  namespace: the root is an overlay (its writes go to ``scratch`` and vanish), with /proc, /sys,
  /dev, a fresh /tmp and /run, and this checkout at its own path (so paths mean the same inside
  and out; its .venv, the host Python's, read-only). Same network namespace as the host:
  loopback sshd works as on the host.

Needs root, debootstrap, chroot, unshare, tar and overlayfs (``testbed.needs("python-releases")``);
stdlib only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import ssl
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import tomllib

from ._needs import REPO
from .containers import CACHE, ROOTFS_VERSION, _cached, _run, rootfs
from .releases import _tool, extracted, install

# The suites whose Python is not the host's, and the version each carries.
PYTHONS = {"trixie": "3.13"}
VENV = "/opt/mpiwait-venv"
# Bumped when what goes into a Python root changes (other than pyproject's requirements).
PYTHON_ROOT_VERSION = "1"
# What the unit and integration tiers find on a machine (tests/testbed/_needs.py's rows).
PACKAGES = (
    "python3", "python3-venv", "openssh-client", "openssh-server", "netbase", "iproute2",
    "iptables", "strace", "procps", "util-linux", "mount", "git", "ca-certificates",
)  # fmt: skip
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "LANG": "C.UTF-8",
    # The checkout is the host's: no cpython-3xx caches left in it; its .venv (read-only there)
    # is the host Python's, so scripts/test --fast takes the root's.
    "PYTHONDONTWRITEBYTECODE": "1",
    "MPIWAIT_TEST_VENV": VENV,
}


def requirements() -> list[str]:
    """What the venv holds: pyproject.toml's build backend, dependencies, test and release
    extras (the unit tier checks the release's files with the latter)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    deps = [*project["project"]["dependencies"], *extras["test"], *extras["release"]]
    return [*project["build-system"]["requires"], *deps]


def _key() -> str:
    said = "\n".join([*requirements(), *PACKAGES])
    digest = hashlib.sha256(said.encode()).hexdigest()[:12]
    return f"v{ROOTFS_VERSION}.{PYTHON_ROOT_VERSION}-{digest}"


def python_rootfs(suite: str) -> Path:
    """A tarball: ``rootfs(suite)`` plus its python3, the tiers' tools and ``VENV`` (above)."""
    # pip in the root trusts what the host's trusts (a proxy's CA, as on a CI machine behind one).
    cafile = os.environ.get("PIP_CERT") or ssl.get_default_verify_paths().cafile
    pip = [f"{VENV}/bin/pip", "install", "--quiet", "--disable-pip-version-check"]

    def make(root: Path, part: Path) -> None:
        root.mkdir()
        _run(["tar", "--numeric-owner", "-C", str(root), "-xf", str(rootfs(suite))])
        if cafile:
            shutil.copyfile(cafile, root / "tmp/host-ca.crt")
            pip.append("--cert=/tmp/host-ca.crt")
        install(root, PACKAGES, ["python3", "-m", "venv", VENV], [*pip, *requirements()])
        (root / "tmp/host-ca.crt").unlink(missing_ok=True)
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(part), "."])

    return _cached(CACHE / "rootfs" / f"python-{suite}-{_key()}.tar", make)


def python_root(suite: str) -> Path:
    """``python_rootfs(suite)`` extracted into a cached directory. Read-only for its users."""
    return extracted(lambda: python_rootfs(suite), CACHE / "roots" / f"python-{suite}-{_key()}")


# $0 the root, $1 the scratch directory, $2 the checkout, then the command.
_ENTER = """R="$0"; S="$1"; C="$2"; shift 2
mkdir -p "$S/upper" "$S/work" "$S/root" || exit 125
mount -t overlay overlay -o "lowerdir=$R,upperdir=$S/upper,workdir=$S/work" "$S/root" || exit 125
R="$S/root"
mount -t proc proc "$R/proc" && mount --rbind /sys "$R/sys" && mount --rbind /dev "$R/dev" &&
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp" && mount -t tmpfs -o mode=0755 tmpfs "$R/run" &&
cp /etc/hosts "$R/etc/hosts" && mkdir -p "$R$C" && mount --bind "$C" "$R$C" || exit 125
if [ -d "$C/.venv" ]; then
    mount --bind "$C/.venv" "$R$C/.venv" && mount -o remount,bind,ro "$R$C/.venv" || exit 125
fi
exec chroot "$R" "$@"
"""


def run(
    suite: str,
    argv: Sequence[str],
    scratch: Path,
    *,
    env: Mapping[str, str] = {},
    timeout: float = 1800,
) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``python_root(suite)`` as described above (``env`` over ``ENV``), from the
    checkout; its output (stdout and stderr together) and exit status."""
    root = python_root(suite)
    scratch.mkdir(parents=True, exist_ok=True)
    inner = f'cd {REPO} && exec "$@"'
    return subprocess.run(
        [_tool("unshare"), "-m", "--propagation", "private", "/bin/sh", "-c", _ENTER,
         str(root), str(scratch), str(REPO), "/bin/sh", "-c", inner, "in-root", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, env={**ENV, **env}, check=False,
    )  # fmt: skip
