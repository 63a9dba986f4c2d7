"""Containers for the deploy tests without an image registry: a private dockerd and Debian bases.

- ``Engine``: a dockerd (and the containerd under it) of our own: own data root, exec root, socket
  and pidfile; ``--bridge=none --iptables=false --ip-forward=false``, so dockerd itself adds no
  bridge, rule or sysctl to the host. Containers talk over user-defined networks (addresses from
  ``POOL``) that ``stop()`` removes with their bridges; builds that fetch packages use
  ``--network host``. Where bridged traffic goes through iptables (br_netfilter loaded, as on any
  machine where a stock dockerd has run, which also sets FORWARD's policy to DROP), the engine
  inserts one ACCEPT rule of its own at the top of FORWARD for traffic within ``POOL``, tagged
  with its comment ``RULE_TAG + tag``, and removes it in ``stop()``. ``stop()`` leaves no
  process, mount or rule behind.
- Base images made by ``debootstrap --variant=minbase`` (bullseye, bookworm, trixie) and a
  glibc-only one (the files of bookworm's ``libc6``, no shell), imported as ``debian:<suite>-slim``
  and ``mpiwait-tests/glibc-only``. Root filesystems are cached as tarballs under ``CACHE`` and the
  data root (so the images and build cache) is kept there too, so only the first run on a machine
  pays for debootstrap and package downloads.
- The host's CA bundle and a ``pip.conf`` naming it go into the tests' Debian bases only (this
  machine reaches PyPI through a CA fresh images lack); the shipped Dockerfiles never carry them.
- linux/arm64 on this amd64 machine: ``arm64_emulation()`` registers Debian's qemu-user-static
  with binfmt_misc (mounting it if needed); ``rootfs(suite, "arm64")`` is ``debootstrap --arch
  arm64 --foreign`` plus its second stage under emulation, and ``Engine.debian_base(suite,
  "arm64")`` imports it as ``mpiwait-tests/debian-arm64:<suite>-slim`` (platform linux/arm64).

Stdlib only; importable without pytest. Needs root, docker.io (dockerd, containerd, runc, the
docker CLI) and debootstrap.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ._sys import ENV_TAG, b36, root_and_tools, spawn, unmount_below

CACHE = Path(os.environ.get("MPIWAIT_TEST_CACHE", "/var/cache/mpiwait-tests"))
MIRROR = os.environ.get("MPIWAIT_TEST_MIRROR", "http://deb.debian.org/debian")
SUITES = ("bullseye", "bookworm", "trixie")
GLIBC_ONLY = "mpiwait-tests/glibc-only"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
TOOLS = ("dockerd", "containerd", "runc", "docker", "debootstrap", "iptables")
QEMU_AARCH64 = Path("/usr/bin/qemu-aarch64-static")
BINFMT = Path("/proc/sys/fs/binfmt_misc")
# Bumped when what goes into a cached root filesystem changes.
ROOTFS_VERSION = "1"
# An Engine's containerd and dockerd carry MPIWAIT_TESTBED=<this><owner pid, base 36>-<n>, so the
# session's leak check finds them (and, as their descendants, the shims and containers).
ENGINE_PREFIX = "mc"
# Every network of an Engine takes its subnet from here (dockerd's --default-address-pool).
POOL = "10.211.0.0/16"
# The comment on an Engine's iptables rule: this, then the engine's tag (leaks.py looks for it).
RULE_TAG = "mpiwait-tests:"
BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


class EngineError(RuntimeError):
    pass


def missing_requirements() -> str | None:
    """Why the container tests cannot run here, or None."""
    need = "apt-get install docker.io debootstrap iptables"
    return root_and_tools("runs a dockerd of its own", TOOLS, need)


def _run(argv: Sequence[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        raise EngineError(
            f"{' '.join(map(str, argv))[:200]}: exit {p.returncode}: {p.stderr[-2000:]}"
        )
    return p


@contextlib.contextmanager
def _lock(path: Path, blocking: bool = True) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


# --- root filesystems (cached tarballs) -----------------------------------------------------


def _cached(out: Path, make: Callable[[Path, Path], None]) -> Path:
    """``out``, unless cached made by ``make(scratch, part)``: it writes the file ``part`` (with
    ``scratch``, a path in an empty directory, to use as it likes), which then becomes ``out``.
    One maker of a file at a time, across processes."""
    with _lock(out.with_suffix(".lock")):
        if not out.exists():
            with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
                part = Path(f"{out}.part")
                make(Path(tmp) / "root", part)
                os.replace(part, out)
    return out


def arm64_emulation() -> str | None:
    """Make this machine run arm64 binaries (qemu-user-static through binfmt_misc, registered
    with Debian's flags F: it works inside chroots and containers too); why not, or None."""
    if os.uname().machine == "aarch64":
        return None
    if not QEMU_AARCH64.exists() or shutil.which("update-binfmts") is None:
        return "qemu-user-static and binfmt-support not installed (apt-get install them)"
    if not (BINFMT / "register").exists():
        p = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
                           capture_output=True, text=True)  # fmt: skip
        if p.returncode != 0:
            return f"cannot mount binfmt_misc: {p.stderr.strip()}"
    entry = BINFMT / "qemu-aarch64"
    if not entry.exists() or "enabled" not in entry.read_text():
        p = subprocess.run(["update-binfmts", "--enable", "qemu-aarch64"],
                           capture_output=True, text=True)  # fmt: skip
        if p.returncode != 0 or not entry.exists():
            return f"update-binfmts --enable qemu-aarch64 failed: {p.stderr.strip()}"
    return None


def rootfs(suite: str, arch: str = "amd64") -> Path:
    """A tarball of ``debootstrap --variant=minbase SUITE`` without docs, man pages and locales;
    for another ``arch`` (arm64) the two stages, the second under emulation."""

    def make(root: Path, part: Path) -> None:
        if arch == "amd64":
            _run(["debootstrap", "--variant=minbase", suite, str(root), MIRROR], timeout=900)
        else:
            problem = arm64_emulation()
            if problem:
                raise EngineError(f"no {arch} root filesystem: {problem}")
            _run(["debootstrap", f"--arch={arch}", "--foreign", "--variant=minbase", suite,
                  str(root), MIRROR], timeout=900)  # fmt: skip
            _run(["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"],
                 timeout=1800)  # fmt: skip
        for junk in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale"):
            shutil.rmtree(root / junk, ignore_errors=True)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True)
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(part), "."])

    name = suite if arch == "amd64" else f"{suite}-{arch}"
    return _cached(CACHE / "rootfs" / f"{name}-v{ROOTFS_VERSION}.tar", make)


def all_rootfs() -> None:
    """Make every root filesystem not cached yet, side by side (debootstrap mostly waits on the
    mirror)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(SUITES)) as pool:
        list(pool.map(rootfs, SUITES))
    glibc_only_rootfs()


def glibc_only_rootfs() -> Path:
    """A tarball of the files of bookworm's libc6 package alone: glibc and nothing else."""

    def make(root: Path, part: Path) -> None:
        root.mkdir()
        _run(["tar", "-C", str(root), "-xf", str(rootfs("bookworm"))])
        lists = sorted((root / "var/lib/dpkg/info").glob("libc6[.:]*list"))
        paths = {ln.strip() for f in lists for ln in f.read_text().splitlines() if ln.strip()}
        with tarfile.open(part, "w") as tar:
            # Merged /usr: the package lists /lib/..., which lives under usr/lib.
            seen: set[str] = set()
            for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
                if (root / top).is_symlink():
                    seen.add(top)
                    tar.add(root / top, arcname=top)
            for path in sorted(paths):
                if path in ("/", "/."):
                    continue
                parent = os.path.realpath(root / os.path.dirname(path).lstrip("/"))
                arc = os.path.normpath(
                    os.path.join(os.path.relpath(parent, root), os.path.basename(path))
                )
                src = root / arc
                if arc in seen or not (src.exists() or src.is_symlink()):
                    continue
                parts = arc.split("/")
                for depth in range(1, len(parts)):
                    d = "/".join(parts[:depth])
                    if d not in seen:
                        seen.add(d)
                        tar.add(root / d, arcname=d, recursive=False)
                seen.add(arc)
                tar.add(src, arcname=arc, recursive=False)

    return _cached(CACHE / "rootfs" / f"glibc-only-v{ROOTFS_VERSION}.tar", make)


# --- the engine -------------------------------------------------------------------------------


class Engine:
    """A private dockerd. ``with Engine(workdir) as e: e.docker("run", ...)``."""

    def __init__(self, workdir: Path, data_root: Path | None = None) -> None:
        self.workdir = workdir
        self._data_root = data_root
        self._procs: list[subprocess.Popen[bytes]] = []
        self.tag = f"{ENGINE_PREFIX}{b36(os.getpid())}-{id(self):x}"
        self._rules: list[list[str]] = []  # iptables rule specs this engine inserted
        self._lock: contextlib.ExitStack | None = None
        self.data_root = data_root or CACHE / "docker"
        self.sock = workdir / "docker.sock"
        self.env = {
            **os.environ,
            "DOCKER_HOST": f"unix://{self.sock}",
            "DOCKER_BUILDKIT": "0",  # dockerd 20.10's classic builder; no buildx needed
            "DOCKER_CONFIG": str(workdir / "cli"),
        }

    # lifecycle

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "cli").mkdir(exist_ok=True)
        stack = contextlib.ExitStack()
        self._lock = stack
        # One test run at a time uses the cached data root; another one gets a fresh one.
        if self._data_root is None and not stack.enter_context(
            _lock(CACHE / "docker.lock", blocking=False)
        ):
            self.data_root = self.workdir / "data-root"
        self.data_root.mkdir(parents=True, exist_ok=True)
        ctr = self.workdir / "containerd"
        ctr.mkdir(exist_ok=True)
        (ctr / "config.toml").write_text(
            "version = 2\n"
            f'root = "{self.data_root}/containerd"\nstate = "{ctr}/state"\n'
            f'[grpc]\n  address = "{ctr}/containerd.sock"\n'
            f'[ttrpc]\n  address = "{ctr}/containerd.sock.ttrpc"\n'
            '[debug]\n  address = ""\n[metrics]\n  address = ""\n'
        )
        self._spawn(["containerd", "--config", str(ctr / "config.toml")], ctr / "containerd.log")
        self._wait_for(ctr / "containerd.sock", "containerd")
        self._spawn(
            [
                "dockerd",
                "--data-root", str(self.data_root),
                "--exec-root", str(self.workdir / "exec"),
                "--pidfile", str(self.workdir / "dockerd.pid"),
                "--host", f"unix://{self.sock}",
                "--containerd", str(ctr / "containerd.sock"),
                "--storage-driver", "overlay2",
                "--bridge=none", "--iptables=false", "--ip6tables=false",
                "--ip-forward=false", "--ip-masq=false",
                "--default-address-pool", f"base={POOL},size=24",
                "--log-level", "warn",
            ],
            self.workdir / "dockerd.log",
        )  # fmt: skip
        self._wait_for(self.sock, "dockerd")
        deadline = time.monotonic() + 60
        while self.docker("version", check=False).returncode != 0:
            if time.monotonic() > deadline:
                self.stop()
                raise EngineError(f"dockerd did not answer: {self.log()[-2000:]}")
            time.sleep(0.2)
        self._clean()
        try:
            self._allow_forwarding()
        except EngineError:
            self.stop()
            raise

    def _spawn(self, argv: list[str], log: Path) -> None:
        self._procs.append(spawn(argv, log, {**os.environ, ENV_TAG: self.tag}))

    def rule(self) -> list[str]:
        """This engine's FORWARD rule (iptables arguments after the chain)."""
        return [
            "-s", POOL, "-d", POOL,
            "-m", "comment", "--comment", f"{RULE_TAG}{self.tag}", "-j", "ACCEPT",
        ]  # fmt: skip

    def _allow_forwarding(self) -> None:
        """Let traffic between this engine's containers through FORWARD, where bridged frames
        pass iptables at all (br_netfilter): a stock Docker's DROP policy would drop it."""
        try:
            bridged = BRIDGE_NF.read_text().strip() == "1"
        except OSError:
            bridged = False  # br_netfilter not loaded: bridged frames bypass iptables
        if not bridged:
            return
        _run(["iptables", "-w", "-I", "FORWARD", "1", *self.rule()], timeout=60)
        self._rules.append(self.rule())

    def _remove_rules(self) -> None:
        while self._rules:
            spec = self._rules.pop()
            subprocess.run(
                ["iptables", "-w", "-D", "FORWARD", *spec], capture_output=True, timeout=60
            )

    def _wait_for(self, path: Path, what: str) -> None:
        deadline = time.monotonic() + 60
        while not path.exists():
            if self._procs[-1].poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EngineError(f"{what} did not start: {self.log()[-2000:]}")
            time.sleep(0.05)

    def pids(self) -> list[int]:
        """The containerd and dockerd this engine started (running or not)."""
        return [p.pid for p in self._procs]

    def log(self) -> str:
        return "".join(
            p.read_text(errors="replace")
            for p in (self.workdir / "containerd/containerd.log", self.workdir / "dockerd.log")
            if p.exists()
        )

    def _clean(self) -> None:
        """Remove containers and networks (and so their bridges) a crashed run left behind."""
        ids = self.docker("ps", "-aq", check=False).stdout.split()
        if ids:
            self.docker("rm", "-f", *ids, check=False)
        self.docker("network", "prune", "-f", check=False)
        self.docker("volume", "prune", "-f", check=False)

    def stop(self) -> None:
        if self._procs and self._procs[-1].poll() is None:
            with contextlib.suppress(Exception):
                self._clean()
                # Images no tag leads to any more (older builds): the cache stays bounded.
                self.docker("image", "prune", "-f", check=False)
        for p in reversed(self._procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
        self._procs.clear()
        self._remove_rules()
        # Anything still mounted below our directories (overlay layers, netns) goes too.
        unmount_below((str(self.workdir), str(self.data_root)))
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # the CLI

    def docker(
        self, *args: str, check: bool = True, timeout: float = 600, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout,
            env=self.env, input=input, stdin=None if input is not None else subprocess.DEVNULL,
        )  # fmt: skip
        if check and p.returncode != 0:
            raise EngineError(
                f"docker {' '.join(args)[:300]}: exit {p.returncode}:\n{p.stdout[-3000:]}"
                f"\n{p.stderr[-3000:]}"
            )
        return p

    def has_image(self, ref: str, label: str | None = None) -> bool:
        fmt = '{{index .Config.Labels "mpiwait.tests.rootfs"}}'
        p = self.docker("image", "inspect", "-f", fmt, ref, check=False)
        return p.returncode == 0 and (label is None or p.stdout.strip() == label)

    def import_tar(self, tar: Path, ref: str, changes: Sequence[str] = ()) -> None:
        label = f"{tar.name}@{int(tar.stat().st_mtime)}"
        if self.has_image(ref, label):
            return
        args = ["import", "-c", f'LABEL mpiwait.tests.rootfs="{label}"']
        for c in changes:
            args += ["-c", c]
        self.docker(*args, str(tar), ref)

    def load_rootfs(self, tar: Path, ref: str, arch: str, cmd: Sequence[str] = ()) -> None:
        """A root filesystem tarball as a one-layer image of ``arch``: ``docker import`` of
        dockerd 20.10 always labels an image with the host's architecture, and the builder
        then refuses it for ``--platform linux/<arch>``; ``docker load`` takes the config's."""
        label = f"{tar.name}@{int(tar.stat().st_mtime)}/{arch}"
        if self.has_image(ref, label):
            return
        digest = hashlib.sha256()
        with open(tar, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        config = json.dumps({
            "architecture": arch, "os": "linux",
            "config": {"Cmd": list(cmd), "Labels": {"mpiwait.tests.rootfs": label}},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest.hexdigest()}"]},
        }).encode()  # fmt: skip
        name = f"{hashlib.sha256(config).hexdigest()}.json"
        manifest = json.dumps([{"Config": name, "RepoTags": [ref], "Layers": ["layer.tar"]}])
        with tempfile.TemporaryDirectory(dir=self.workdir) as tmp:
            image = Path(tmp) / "image.tar"
            with tarfile.open(image, "w") as out:
                out.add(tar, arcname="layer.tar")
                for member, data in ((name, config), ("manifest.json", manifest.encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    out.addfile(info, io.BytesIO(data))
            self.docker("load", "-i", str(image))

    def build(self, context: Path, tag: str, *args: str, timeout: float = 900) -> str:
        """``docker build`` (classic builder, host network for package fetches); the log."""
        return self.docker(
            "build", "--network", "host", "-t", tag, *args, str(context), timeout=timeout
        ).stdout

    def debian_base(self, suite: str, arch: str = "amd64") -> str:
        """``debian:<suite>-slim`` made from debootstrap, with the host's CA bundle for pip;
        another ``arch``: ``mpiwait-tests/debian-<arch>:<suite>-slim``, of that platform."""
        native = arch == "amd64"
        ref = f"debian:{suite}-slim" if native else f"mpiwait-tests/debian-{arch}:{suite}-slim"
        raw = f"mpiwait-tests/rootfs:{suite}" + ("" if native else f"-{arch}")
        platform = [] if native else ["--platform", f"linux/{arch}"]
        if native:
            self.import_tar(rootfs(suite), raw, ['CMD ["bash"]'])
        else:
            self.load_rootfs(rootfs(suite, arch), raw, arch, ["bash"])
        ctx = self.workdir / (f"trust-{suite}" + ("" if native else f"-{arch}"))
        ctx.mkdir(exist_ok=True)
        shutil.copyfile(HOST_CA, ctx / "ca.crt")
        (ctx / "pip.conf").write_text("[global]\ncert = /etc/mpiwait-tests/ca.crt\n")
        (ctx / "Dockerfile").write_text(
            f"FROM {raw}\nCOPY ca.crt /etc/mpiwait-tests/ca.crt\nCOPY pip.conf /etc/pip.conf\n"
        )
        self.docker("build", "-q", *platform, "-t", ref, str(ctx))
        return ref

    def glibc_only_base(self) -> str:
        self.import_tar(glibc_only_rootfs(), GLIBC_ONLY)
        return GLIBC_ONLY

    def image_size(self, ref: str) -> int:
        return int(self.docker("image", "inspect", "-f", "{{.Size}}", ref).stdout)


# --- images of the tests ---------------------------------------------------------------------


def operator_pi_dockerfile(suite: str, mpi: str) -> str:
    """mpi-operator's pi image (``mpioperator/mpi-pi:<mpi>``) as far as mpiwait and mpirun can
    tell: Debian ``suite``, the MPI package ``mpi``, OpenSSH with the operator's base-image edits
    (client and server on port 2222, no host key checks), mpiuser (uid 1000) with the non-root
    sshd config the operator's images carry. /home/mpiuser/pi prints where it ran instead of
    computing pi (no compiler here)."""
    return rf"""
FROM debian:{suite}-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openssh-server openssh-client {mpi} hostname \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/run/sshd \
    && sed -i "s/[ #]\(.*StrictHostKeyChecking \).*/ \1no/g" /etc/ssh/ssh_config \
    && echo "    UserKnownHostsFile /dev/null" >> /etc/ssh/ssh_config \
    && sed -i "s/[ #]\(.*Port \).*/ \12222/g" /etc/ssh/ssh_config \
    && sed -i "s/#\(StrictModes \).*/\1no/g" /etc/ssh/sshd_config \
    && sed -i "s/#\(Port \).*/\12222/g" /etc/ssh/sshd_config \
    && useradd -m -u 1000 -s /bin/bash mpiuser && usermod -p '*' mpiuser \
    && printf 'PidFile %s/sshd.pid\nHostKey %s/.ssh/id_rsa\nStrictModes no\nPort 2222\n' \
        /home/mpiuser /home/mpiuser > /home/mpiuser/.sshd_config \
    && printf '#!/bin/sh\necho "pi on $(hostname)"\n' > /home/mpiuser/pi \
    && chmod 0755 /home/mpiuser/pi && chown -R mpiuser:mpiuser /home/mpiuser
WORKDIR /home/mpiuser
"""


# --- Compose --------------------------------------------------------------------------------


def compose_v2(engine: Engine) -> Path:
    """A DOCKER_CONFIG directory whose cli-plugins/ holds trixie's docker-compose (v2), taken
    from its .deb (apt-get download in a trixie container), so nothing is installed system-wide."""
    config = CACHE / "compose-v2"
    plugin = config / "cli-plugins/docker-compose"
    with _lock(CACHE / "compose-v2.lock"):
        if plugin.exists():
            return config
        engine.debian_base("trixie")
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            engine.docker(
                "run", "--rm", "--network", "host", "-v", f"{tmp}:/out", "-w", "/out",
                "debian:trixie-slim", "sh", "-c",
                "apt-get update -qq && apt-get download -qq docker-compose",
            )  # fmt: skip
            debs = sorted(Path(tmp).glob("docker-compose_*.deb"))
            if not debs:
                raise EngineError("apt-get download docker-compose gave no .deb")
            _run(["dpkg-deb", "-x", str(debs[-1]), f"{tmp}/x"])
            found = sorted(Path(tmp, "x").rglob("cli-plugins/docker-compose"))
            if not found:
                raise EngineError(f"no cli-plugins/docker-compose in {debs[-1].name}")
            plugin.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found[0], f"{plugin}.part")
            os.replace(f"{plugin}.part", plugin)
    return config


COMPOSE_V1 = "mpiwait-tests/docker-compose:bookworm"


def compose_v1(engine: Engine) -> str:
    """An image with Debian 12's own docker-compose (1.29), run against the engine's socket."""
    engine.debian_base("bookworm")
    ctx = engine.workdir / "compose-v1"
    ctx.mkdir(exist_ok=True)
    (ctx / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y"
        " --no-install-recommends docker-compose && rm -rf /var/lib/apt/lists/*\n"
    )
    engine.build(ctx, COMPOSE_V1)
    return COMPOSE_V1
