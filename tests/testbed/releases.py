"""OpenSSH releases as Debian builds them, each in a root of its own, run under ``chroot``.

- ``openssh_rootfs(suite)``: a tarball of ``containers.rootfs(suite)`` (debootstrap minbase) with
  that suite's ``openssh-client`` and ``netbase`` installed by its own apt (and
  ``openssh-server`` for the suites in ``SERVER_SUITES``: trixie's sshd 10.0p2 is the modern
  sshd the tests run against). No host keys, no sshd running: a lab makes its own keys and starts
  sshd itself.
- ``openssh_root(suite)``: that tarball extracted once into a directory under ``CACHE``, shared
  by every test: **read-only** for its users (put your files elsewhere and bind-mount them into a
  private mount namespace, as ``Release.ssh`` does).
- ``Release(suite)``: the root's ``ssh -V`` and ``ssh -G`` (or any ssh command) run under
  ``chroot`` in a private mount namespace, where a directory of the caller's under /tmp appears
  at the same path.

Both are cached keyed by their inputs (``ROOTFS_VERSION``, ``OPENSSH_ROOT_VERSION``, the suite),
so only the first run on a machine pays for debootstrap and the package downloads. Sid's Release
file is allowed to be past its Valid-Until (a mirror snapshot may be). Stdlib only; needs root,
debootstrap, chroot and unshare.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .containers import CACHE, ROOTFS_VERSION, _cached, _lock, _run, rootfs

SUITES = ("bullseye", "bookworm", "trixie", "sid")
SERVER_SUITES = ("trixie",)
# Bumped when what goes into an OpenSSH root changes.
OPENSSH_ROOT_VERSION = "2"
TOOLS = ("debootstrap", "chroot", "unshare", "tar")
_APT = ("-o", "Acquire::Check-Valid-Until=false", "-o", "APT::Sandbox::User=root", "-qq")
_JUNK = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")


def missing_requirements() -> str | None:
    """Why OpenSSH roots cannot be built or run here, or None."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, chroot, mounts)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install debootstrap util-linux)"
    return None


def _packages(suite: str) -> list[str]:
    # netbase: /etc/services, for `Port ssh` (a name ssh looks up there).
    return ["openssh-client", "netbase", *(["openssh-server"] if suite in SERVER_SUITES else [])]


def _key() -> str:
    return f"v{ROOTFS_VERSION}.{OPENSSH_ROOT_VERSION}"


def install(root: Path, packages: Sequence[str], *then: Sequence[str]) -> None:
    """apt-get install ``packages`` into ``root`` (chroot, no service started), then run each
    command of ``then`` there while the host's resolv.conf is in place (pip from PyPI)."""
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")  # no daemon starts while installing
    policy.chmod(0o755)
    resolv = root / "etc/resolv.conf"
    had_resolv = resolv.exists() or resolv.is_symlink()
    saved = root / "etc/resolv.conf.mpiwait-tests"
    if had_resolv:
        os.replace(resolv, saved)
    shutil.copyfile("/etc/resolv.conf", resolv)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    try:
        _run(["chroot", str(root), "apt-get", *_APT, "update"], timeout=900, env=env)
        _run(
            ["chroot", str(root), "apt-get", *_APT, "install", "-y", "--no-install-recommends",
             *packages],
            timeout=900, env=env,
        )  # fmt: skip
        _run(["chroot", str(root), "apt-get", "-qq", "clean"], env=env)
        for argv in then:
            _run(["chroot", str(root), *argv], timeout=900, env=env)
    finally:
        resolv.unlink()
        if had_resolv:
            os.replace(saved, resolv)
        policy.unlink()
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # a lab makes its own host keys; none is shared through the cache
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)
    for junk in _JUNK:
        shutil.rmtree(root / junk, ignore_errors=True)


def openssh_rootfs(suite: str) -> Path:
    """A tarball: ``rootfs(suite)`` plus that suite's openssh-client (and -server, see above)."""

    def make(root: Path, part: Path) -> None:
        root.mkdir()
        _run(["tar", "--numeric-owner", "-C", str(root), "-xf", str(rootfs(suite))])
        install(root, _packages(suite))
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(part), "."])

    return _cached(CACHE / "rootfs" / f"openssh-{suite}-{_key()}.tar", make)


def openssh_root(suite: str) -> Path:
    """``openssh_rootfs(suite)`` extracted into a cached directory. Read-only for its users."""
    return extracted(lambda: openssh_rootfs(suite), CACHE / "roots" / f"openssh-{suite}-{_key()}")


def extracted(tarball: Callable[[], Path], out: Path) -> Path:
    """The directory ``out``, unless cached the tarball ``tarball()`` (made only then) extracted
    there. One extractor at a time, across processes."""
    with _lock(out.with_name(out.name + ".lock")):
        if not out.is_dir():
            tar = tarball()
            with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
                part = Path(tmp) / "root"
                part.mkdir()
                _run(["tar", "--numeric-owner", "-C", str(part), "-xf", str(tar)])
                os.replace(part, out)
    return out


def all_roots(suites: Sequence[str] = SUITES) -> list[Path]:
    """Every OpenSSH root not cached yet, side by side (debootstrap mostly waits on the mirror)."""
    with ThreadPoolExecutor(len(suites)) as pool:
        return list(pool.map(openssh_root, suites))


# --- running a release's ssh ------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Release:
    """One suite's OpenSSH client, run under chroot. ``Release("trixie").version`` is its
    ``ssh -V`` line (``OpenSSH_10.0p2 Debian-7, OpenSSL ...``)."""

    suite: str
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = openssh_root(self.suite)

    @property
    def version(self) -> str:
        return self.ssh(["-V"]).stderr.strip()

    @property
    def version_tuple(self) -> tuple[int, int]:
        """(10, 0) for ``OpenSSH_10.0p2 ...``."""
        major, minor = self.version.split("_", 1)[1].split("p", 1)[0].split(".")[:2]
        return int(major), int(minor)

    def ssh(
        self,
        args: Sequence[str],
        *,
        work: Path | None = None,
        mounts: Sequence[tuple[Path, str]] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
    ) -> Ran:
        """``ssh ARGS`` in the root, as root (HOME /root), in a private mount namespace: ``work``
        (a directory of the caller's under /tmp) appears at the same path inside (on a tmpfs
        over the root's /tmp), and each ``(source, target)`` of ``mounts`` is bind-mounted over
        the root's ``target`` (an existing file or directory, or a directory under /root, made on
        a tmpfs over the root's /root), so the cached root itself is
        never written and the paths a config names mean the same inside and out."""
        argv = ["/usr/bin/ssh", *args]  # not PATH's: the caller's directory may be on it
        return self.run(argv, work=work, mounts=mounts, env=env, timeout=timeout)

    def run(
        self,
        argv: Sequence[str],
        *,
        work: Path | None = None,
        mounts: Sequence[tuple[Path, str]] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
    ) -> Ran:
        """Any command in the root, as ``ssh`` above."""
        if work is not None and not str(work.resolve()).startswith("/tmp/"):
            raise ValueError(f"work directory {work} is not under /tmp")
        pairs = [str(x) for src, dst in mounts for x in (src, dst)]
        where = str(work.resolve()) if work is not None else ""
        p = subprocess.run(
            [_tool("unshare"), "-m", "--propagation", "private", "/bin/sh", "-c",
             _binder(len(mounts)), str(self.root), where, *pairs, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else {
                "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "USER": "root",
                "LOGNAME": "root",
            },
            check=False,
        )  # fmt: skip
        return Ran(p.returncode, p.stdout, p.stderr)

    def write_wrapper(self, path: Path, work: Path) -> Path:
        """An executable ``path`` (name it ``ssh``, put its directory first on PATH) that runs
        this release's ssh with its arguments, as ``ssh`` above: a program that looks for
        ``ssh`` finds this release installed."""
        path.write_text(
            "#!/bin/sh\n"
            f"exec {_tool('unshare')} -m --propagation private /bin/sh -c "
            f"{shlex.quote(_binder(0))} "
            f'{shlex.quote(str(self.root))} {shlex.quote(str(work.resolve()))} /usr/bin/ssh "$@"\n'
        )
        path.chmod(0o755)
        return path


def _tool(name: str) -> str:
    # Absolute: the caller's PATH (a test's) need not hold /usr/sbin.
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if os.access(f"{d}/{name}", os.X_OK):
            return f"{d}/{name}"
    return name


def _binder(n: int) -> str:
    """A sh -c script: $0 is the root, $1 the work directory (or ""), then n (source, target)
    pairs, then the command."""
    mount, chroot, mkdir = _tool("mount"), _tool("chroot"), _tool("mkdir")
    lines = [
        'R="$0"; W="$1"; shift',
        f'if [ -n "$W" ]; then {mount} -t tmpfs -o mode=1777 tmpfs "$R/tmp" &&'
        f' {mkdir} -p "$R$W" && {mount} --bind "$W" "$R$W" || exit 125; fi',
    ]
    for _ in range(n):
        # A target under /root (whose home has no .ssh): on a tmpfs over the root's /root.
        lines.append(
            f'case "$2" in /root/*) [ -n "$H" ] || {{ {mount} -t tmpfs -o mode=0700 tmpfs '
            f'"$R/root" && H=1; }} && {mkdir} -p "$R$2" || exit 125;; esac'
        )
        lines.append(f'{mount} --bind "$1" "$R$2" || exit 125; shift 2')
    lines.append(f'exec {chroot} "$R" "$@"')
    return "\n".join(lines)
