"""A multi-host test bed on one machine: worker "hosts" are network namespaces running real sshd.

Layout of one bed (``index`` picks its /24, so several beds can coexist)::

    root namespace                         worker namespaces (one per host)
    bridge <id>b  10.123.<index>.1/24  --  veth <id>v<i>  <->  eth0 10.123.<index>.<11+i>/24
    (the "launcher" side)                  sshd -D, UTS hostname = first label of the host's name

Nothing is routed anywhere else: the namespaces have no default route, and every process the bed
runs resolves names from files only (bind mounts inside private mount namespaces), so no test
traffic and no name lookup leaves the machine.

Processes started by a bed carry ``MPIWAIT_TESTBED=<bed id>`` in their environment and run in
process groups of their own; ``down()`` kills them (and anything left in the namespaces), then
removes namespaces, links and files. ``cleanup_stale()`` does the same for beds whose owning
process is gone (a crashed or killed test run).

Example::

    with TestBed(3, workdir=tmp_path) as bed:          # w1..w3 on 10.123.<free>.11-13
        bed.run(bed.ssh_argv(0, "hostname")).stdout     # "w1\n"
        bed.blackhole(1); bed.stop_sshd(2)              # faults, and their inverses
        bed.run(bed.openmpi_argv(["hostname"]))         # real mpirun over the bed

Stdlib only; importable without pytest. Needs root, iproute2, util-linux (unshare, setpriv),
openssh-server/client; iptables only for ``blackhole()``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ._faults import HostFaults
from ._sys import ENV_TAG, SSHD_KEY_LOGIN_ONLY, STATE_ROOT, BedError, drop_to, write_in_place
from ._sys import b36 as _b36
from ._sys import global_lock as _global_lock
from ._sys import kill_group as _kill_group
from ._sys import kill_pids as _kill_pids
from ._sys import list_links as _list_links
from ._sys import list_ns as _list_ns
from ._sys import listening as _listening
from ._sys import netns_pids as _netns_pids
from ._sys import openssh_version as _openssh_version
from ._sys import proc_starttime as _proc_starttime
from ._sys import sh as _sh
from ._sys import tagged_pids as _tagged_pids

PREFIX = "mw"  # starts every namespace and link name of a bed, unless TestBed(prefix=) says
SUBNET = "10.123"  # bed <index> uses 10.123.<index>.0/24
FIRST_HOST = 11  # w1 is .11, w2 .12, ...
MAX_HOSTS = 254 - FIRST_HOST + 1
SSHD = "/usr/sbin/sshd"
_SILENT_MARK = "# mpiwait-testbed silent listener"
_SYN_MARK = "mpiwait-testbed-syns"

_IFNAMSIZ = 15
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_NAME_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


# --------------------------------------------------------------------------------------------
# small helpers


@cache
def missing_requirements() -> str | None:
    """Why a bed cannot run here (a sentence), or None when it can. Cached."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, bind mounts, sshd)"
    for tool in ("ip", "unshare", "setpriv", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} not found (install openssh-server)"
    try:
        cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
        if cp.returncode != 0:
            return f"`ip netns` does not work: {cp.stderr.strip()}"
        cp = subprocess.run(
            ["unshare", "-n", "-m", "--propagation", "private", "true"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if cp.returncode != 0:
            return f"cannot create namespaces: {cp.stderr.strip()}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"namespace probe failed: {e}"
    return None


def _beds_dir() -> Path:
    return STATE_ROOT / "beds"


def _pub_root() -> Path:
    return STATE_ROOT / "pub"


# Directories we had to create as bind-mount targets (/etc/mpi, ~user/.ssh) are shared by all
# beds on the machine: removing one while another bed's launcher has it mounted would detach
# that mount, so they are reference-counted (under the global lock).
def _shared_dirs_file() -> Path:
    return STATE_ROOT / "created-dirs.json"


def _shared_dirs_load() -> dict[str, list[str]]:
    try:
        return json.loads(_shared_dirs_file().read_text())
    except (OSError, ValueError):
        return {}


def _shared_dirs_save(d: dict[str, list[str]]) -> None:
    _shared_dirs_file().write_text(json.dumps(d, indent=1))


def _release_shared_dirs(bed_id: str) -> None:
    d = _shared_dirs_load()
    for path in list(d):
        users = [b for b in d[path] if b != bed_id]
        if users:
            d[path] = users
            continue
        del d[path]
        with contextlib.suppress(OSError):
            os.rmdir(path)  # only if still empty
    _shared_dirs_save(d)


def _bed_alive(
    bed_id: str, state: dict[str, Any] | None, include_persistent: bool, prefix: str
) -> bool:
    if state is not None:
        if state.get("persistent") and not include_persistent:
            return True
        if state.get("persistent"):
            return False
        pid = int(state.get("pid", 0))
        return pid > 0 and _proc_starttime(pid) == state.get("starttime")
    m = re.match(rf"^{re.escape(prefix)}([0-9a-z]+)-\d+$", bed_id)
    if not m:
        return True  # not ours to judge
    return Path(f"/proc/{int(m.group(1), 36)}").exists()


def _teardown_by_id(
    bed_id: str, *, ns_names: Sequence[str] = (), links: Sequence[str] = ()
) -> None:
    """Kill and remove everything named after ``bed_id``; no TestBed object needed."""
    ns_names = sorted({*ns_names, *(n for n in _list_ns() if _belongs(n, bed_id))})
    existing = set(_list_links())
    links = sorted({*links, *(n for n in existing if _belongs(n, bed_id))} & existing)
    for _ in range(3):  # processes can fork while we kill; repeat until quiet
        pids = [p for ns in ns_names for p in _netns_pids(ns)] + _tagged_pids(bed_id)
        if not _kill_pids(pids):
            break
        time.sleep(0.05)
    # veth first (takes its peer in the namespace along), then the bridge, then the namespaces
    batch = [f"link del {ln}" for ln in sorted(links, key=lambda s: s.endswith("b"))]
    batch += [f"netns del {ns}" for ns in ns_names]
    if batch:
        _sh(["ip", "-force", "-batch", "-"], input="\n".join(batch) + "\n", check=False)
    with contextlib.suppress(OSError):
        (_beds_dir() / f"{bed_id}.json").unlink()
    shutil.rmtree(_pub_root() / bed_id, ignore_errors=True)
    _release_shared_dirs(bed_id)


def _belongs(name: str, bed_id: str) -> bool:
    """Whether a namespace or link name is one of bed ``bed_id``'s (<id>b, <id>v<i>, <id>n<i>)."""
    return name.startswith(bed_id) and re.fullmatch(r"[bvn]\d*", name[len(bed_id) :]) is not None


def bed_names(prefix: str = PREFIX) -> list[str]:
    """Namespaces and links named like a bed of ``prefix`` (of any owner, live or gone)."""
    return [n for n in _list_ns() + _list_links() if _bed_of(n, prefix)]


def bed_owner(name: str, prefix: str = PREFIX) -> int | None:
    """The pid that made the bed of ``prefix`` a namespace or link name belongs to (it may be
    gone), or None when the name is not one of such a bed."""
    bed_id = _bed_of(name, prefix)
    return int(bed_id[len(prefix) :].split("-")[0], 36) if bed_id else None


def _bed_of(name: str, prefix: str | None = None) -> str | None:
    prefix = PREFIX if prefix is None else prefix
    m = re.match(rf"^({re.escape(prefix)}[0-9a-z]+-\d+)[bvn]\d*$", name)
    return m.group(1) if m else None


def write_hosts_file(
    path: Path, entries: Iterable[tuple[str, str]], *, header: str | None = None
) -> None:
    """(Re)write a launcher's hosts file: localhost, this machine's name, then ``entries``
    (address, names). In place, since running launchers have its inode bind-mounted, and never
    shorter than before (padded with a comment), so a concurrent reader sees the old or the new
    set of entries, never an empty file."""
    me = socket.gethostname()
    lines = [f"# {header}"] if header else []
    lines += ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    if me and me != "localhost":
        lines.append(f"127.0.0.1\t{me}")
    lines += [f"{addr}\t{names}" for addr, names in entries]
    write_in_place(path, "\n".join(lines) + "\n")


def cleanup_stale(
    prefix: str | None = None, *, include_persistent: bool = False, force: bool = False
) -> list[str]:
    """Remove leftovers of beds whose owner process is gone; return the bed ids removed.

    Beds are found by name (namespaces and links starting with ``prefix``) and by their state
    files. A bed whose owner still runs is left alone unless ``force``; a bed made by
    ``scripts/testbed up`` (persistent) only with ``include_persistent`` (or ``force``).
    """
    if os.geteuid() != 0:
        return []
    with _global_lock():
        return _cleanup_stale_locked(
            PREFIX if prefix is None else prefix, include_persistent=include_persistent, force=force
        )


def _cleanup_stale_locked(prefix: str, *, include_persistent: bool, force: bool) -> list[str]:
    all_ns, all_links = _list_ns(), _list_links()
    ids: set[str] = set()
    for n in all_ns + all_links:
        b = _bed_of(n, prefix)
        if b:
            ids.add(b)
    states: dict[str, dict[str, Any]] = {}
    for f in _beds_dir().glob(f"{prefix}*.json") if _beds_dir().is_dir() else ():
        with contextlib.suppress(OSError, ValueError):
            states[f.stem] = json.loads(f.read_text())
        ids.add(f.stem)
    for d in _pub_root().glob(f"{prefix}*") if _pub_root().is_dir() else ():
        ids.add(d.name)
    removed = []
    for bed_id in sorted(ids):
        if not force and _bed_alive(bed_id, states.get(bed_id), include_persistent, prefix):
            continue
        _teardown_by_id(
            bed_id,
            ns_names=[n for n in all_ns if _bed_of(n, prefix) == bed_id],
            links=[n for n in all_links if _bed_of(n, prefix) == bed_id],
        )
        removed.append(bed_id)
    return removed


def _used_indexes() -> set[int]:
    cp = _sh(["ip", "-o", "-4", "addr", "show"], check=False)
    pat = re.compile(rf"\binet {re.escape(SUBNET)}\.(\d+)\.\d+/")
    used = {int(m.group(1)) for m in pat.finditer(cp.stdout)}
    if _beds_dir().is_dir():
        for f in _beds_dir().glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                used.add(int(json.loads(f.read_text())["index"]))
    return used


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerHost:
    i: int  # position in TestBed.hosts (0-based; every TestBed method takes this)
    name: str  # as published, e.g. "w1" or "job-worker-0.job.ns.svc"
    short: str  # first label: the UTS hostname inside the namespace
    ns: str  # network namespace
    veth: str  # root-namespace end of the veth pair (the worker's end is "eth0")
    addr: str
    port: int
    sshd_config: Path
    sshd_log: Path


_live_beds: weakref.WeakSet[TestBed] = weakref.WeakSet()


@atexit.register
def _down_all_at_exit() -> None:
    for bed in list(_live_beds):
        if not bed.persistent:
            with contextlib.suppress(Exception):
                bed.down()


class TestBed(HostFaults):
    """N worker hosts (network namespaces with sshd) and a launcher context, on one machine.

    Use as a context manager (``with TestBed(3, workdir=tmp) as bed:``) or call ``up()`` and
    ``down()``. Hosts are addressed by their 0-based position ``i`` in ``hosts``.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        n: int,
        *,
        workdir: Path | str,
        index: int | None = None,
        port: int = 22,
        user: str = "root",
        names: Sequence[str] | None = None,
        key_type: str = "ed25519",
        start: bool = True,
        published: bool = True,
        persistent: bool = False,
        prefix: str = PREFIX,
    ) -> None:
        """
        n: number of workers (1..244).
        workdir: where configs, keys and logs go (files a non-root ``user`` must read go to
            /tmp/mpiwait-testbed/pub/<id>/ instead when ``workdir`` is not reachable by others).
        index: selects 10.123.<index>.0/24; None picks a free one (safe with concurrent beds).
        port: sshd port on every worker. user: the login user (created if missing).
        names: host names, default w1..wN; FQDNs allowed (UTS hostname = first label; the
            hosts file maps the full name and the first label).
        key_type: "ed25519" or "ecdsa-p521-pem" (PEM "BEGIN EC PRIVATE KEY", as mpi-operator).
        start: start sshd on every worker in up(). published: names in the hosts file at up().
        persistent: the bed outlives this process (scripts/testbed); cleanup_stale() keeps it.
        prefix: starts every namespace and link name (1-3 lowercase letters; scripts/demo: md).
        """
        if not 1 <= n <= MAX_HOSTS:
            raise ValueError(f"n must be 1..{MAX_HOSTS}, got {n}")
        if index is not None and not 0 <= index <= 255:
            raise ValueError(f"index must be 0..255, got {index}")
        if key_type not in ("ed25519", "ecdsa-p521-pem"):
            raise ValueError(f"key_type must be 'ed25519' or 'ecdsa-p521-pem', got {key_type!r}")
        names = list(names) if names is not None else [f"w{k + 1}" for k in range(n)]
        if len(names) != n:
            raise ValueError(f"{len(names)} names for {n} hosts")
        for nm in names:
            if not _NAME_RE.match(nm):
                raise ValueError(f"bad host name {nm!r}")
        shorts = [nm.split(".")[0] for nm in names]
        if len(set(names)) != n or len(set(shorts)) != n:
            raise ValueError(f"host names (and their first labels) must be unique: {names}")
        self.n = n
        self.workdir = Path(workdir).resolve()
        self.port = port
        self.user = user
        self.key_type = key_type
        self.persistent = persistent
        if not re.fullmatch(r"[a-z]{1,3}", prefix):
            raise ValueError(f"prefix must be 1-3 lowercase letters, got {prefix!r}")
        self.prefix = prefix
        self._names = names
        self._start_at_up = start
        self._published_at_up = published
        self._index_req = index
        self.index: int = -1
        self.bed_id = ""
        self.hosts: list[WorkerHost] = []
        self._published: list[bool] = [False] * n
        self._extra_names: list[tuple[str, str]] = []  # (address, names) in the launcher view
        self._sshd: dict[int, subprocess.Popen[Any]] = {}
        self._listeners: dict[int, subprocess.Popen[Any]] = {}
        self._launched: list[subprocess.Popen[Any]] = []
        self._is_up = False
        self._down_done = False
        self._client_dir = self.workdir / "client"
        self.up_seconds = 0.0  # how long up() took

    # ---- derived names and paths -----------------------------------------------------------

    @property
    def subnet(self) -> str:
        return f"{SUBNET}.{self.index}.0/24"

    @property
    def launcher_addr(self) -> str:
        return f"{SUBNET}.{self.index}.1"

    @property
    def bridge(self) -> str:
        return f"{self.bed_id}b"

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts] if self.hosts else list(self._names)

    @property
    def client_dir(self) -> Path:
        """Files a client (and a non-root user) reads: key, ssh_config, hosts, wrapper."""
        return self._client_dir

    @property
    def key_path(self) -> Path:
        return self._client_dir / "id_key"

    @property
    def pubkey_path(self) -> Path:
        return self._client_dir / "id_key.pub"

    @property
    def authorized_keys(self) -> Path:
        return self._client_dir / "authorized_keys"

    @property
    def ssh_config(self) -> Path:
        return self._client_dir / "ssh_config"

    @property
    def hosts_file(self) -> Path:
        """Launcher view: only published names (rewritten in place by publish/unpublish)."""
        return self._client_dir / "hosts"

    @property
    def worker_hosts_file(self) -> Path:
        """Worker view: every worker, and the machine's hostname as the launcher address."""
        return self._client_dir / "hosts.workers"

    @property
    def nsswitch_file(self) -> Path:
        return self._client_dir / "nsswitch.conf"

    @property
    def ssh_wrapper(self) -> Path:
        """Executable ``ssh -F ssh_config "$@"`` (for hydra's -launcher-exec and friends)."""
        return self._client_dir / "ssh"

    @property
    def tmp_dir(self) -> Path:
        """TMPDIR of the worker sessions (sshd SetEnv) and Open MPI's session-dir base: the
        workers share the machine's /tmp, and concurrent beds' orteds would race on
        /tmp/ompi.<host>.<uid> ("mkdir ... File exists")."""
        return self._client_dir / "tmp"

    @property
    def empty_file(self) -> Path:
        return self._client_dir / "empty"

    @property
    def host_key(self) -> Path:
        return self.workdir / "ssh_host_ed25519_key"

    def __repr__(self) -> str:
        state = "up" if self._is_up else "down"
        net = self.subnet if self.index >= 0 else "-"
        return f"<TestBed {self.bed_id or '?'} {self.n} hosts {net} {state}>"

    def _worker_hosts(self) -> list[WorkerHost]:
        """Each worker's names, namespace, link, address and files, from the bed's id and index."""
        return [
            WorkerHost(
                i=i,
                name=nm,
                short=nm.split(".")[0],
                ns=f"{self.bed_id}n{i}",
                veth=f"{self.bed_id}v{i}",
                addr=f"{SUBNET}.{self.index}.{FIRST_HOST + i}",
                port=self.port,
                sshd_config=self.workdir / f"sshd_config.{i}",
                sshd_log=self.workdir / f"sshd.{i}.log",
            )
            for i, nm in enumerate(self._names)
        ]

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> TestBed:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Create everything; on any failure, tear down what was made and raise BedError."""
        if self._is_up:
            return
        problem = missing_requirements()
        if problem:
            raise BedError(f"test bed unavailable: {problem}")
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        self._is_up = True

    def _up(self) -> None:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        with _global_lock():
            _cleanup_stale_locked(self.prefix, include_persistent=False, force=False)
            used = _used_indexes()
            if self._index_req is None:
                free = [k for k in range(256) if k not in used]
                if not free:
                    raise BedError("no free 10.123.X.0/24 for a bed")
                self.index = free[0]
            else:
                if self._index_req in used:
                    raise BedError(f"{SUBNET}.{self._index_req}.0/24 is in use by another bed")
                self.index = self._index_req
            self.bed_id = f"{self.prefix}{_b36(os.getpid())}-{self.index}"
            _beds_dir().mkdir(parents=True, exist_ok=True)
            self._down_done = False
            _live_beds.add(self)
            self._write_state()  # before creating anything, so a crash from here on is cleanable
            _sh(
                ["ip", "-batch", "-"],
                input=(
                    f"link add {self.bridge} type bridge\n"
                    f"link set dev {self.bridge} addrgenmode none\n"
                    f"addr add {self.launcher_addr}/24 dev {self.bridge}\n"
                    f"link set {self.bridge} up\n"
                ),
            )
            if self.user != "root":
                self._ensure_user()
        self._client_dir = self._choose_client_dir()
        self.hosts = self._worker_hosts()
        for h in self.hosts:
            assert len(h.veth) <= _IFNAMSIZ, h.veth
        self._write_files()
        self._create_hosts()
        self._published = [self._published_at_up] * self.n
        self._write_hosts_file()
        self._write_state()
        if self._start_at_up:
            for i in range(self.n):
                self.start_sshd(i, wait=False)
            self.wait_listening(range(self.n), timeout=max(10.0, self.n * 0.2))
        self.up_seconds = time.monotonic() - t0

    def _choose_client_dir(self) -> Path:
        d = self.workdir / "client"
        if self.user != "root" and not self._reachable_by_others(self.workdir):
            d = _pub_root() / self.bed_id
            _pub_root().mkdir(parents=True, exist_ok=True)
            _pub_root().chmod(0o755)
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
        return d

    @staticmethod
    def _reachable_by_others(path: Path) -> bool:
        return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])

    def _ensure_user(self) -> None:
        try:
            pwd.getpwnam(self.user)
        except KeyError:
            _sh(["useradd", "-m", "-s", "/bin/bash", self.user])
        # a useradd'ed user is locked ("!"), and sshd without PAM refuses locked accounts
        shadow = Path("/etc/shadow").read_text().splitlines()
        entry = next((ln.split(":") for ln in shadow if ln.startswith(self.user + ":")), None)
        if entry is None or entry[1].startswith("!") or entry[1] == "":
            _sh(["usermod", "-p", "*", self.user])

    def _pw(self, user: str) -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(user)
        except KeyError:
            raise BedError(f"no such user {user!r}") from None

    def _write_files(self) -> None:
        if not self.host_key.exists():
            _sh(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"{self.bed_id}-host",
                    "-f",
                    self.host_key,
                ]
            )
        for p in (self.key_path, self.pubkey_path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        if self.key_type == "ed25519":
            kargs = ["-t", "ed25519"]
        else:
            kargs = ["-t", "ecdsa", "-b", "521", "-m", "PEM"]
        _sh(
            [
                "ssh-keygen",
                "-q",
                *kargs,
                "-N",
                "",
                "-C",
                f"{self.bed_id}-client",
                "-f",
                self.key_path,
            ]
        )
        self.authorized_keys.write_text(self.pubkey_path.read_text())
        pw = self._pw(self.user)
        for p in (self.key_path, self.authorized_keys):
            p.chmod(0o600)
            os.chown(p, pw.pw_uid, pw.pw_gid)
        self.ssh_config.write_text(
            f"# mpiwait test bed {self.bed_id}\n"
            "Host *\n"
            f"    Port {self.port}\n"
            f"    User {self.user}\n"
            f"    IdentityFile {self.key_path}\n"
            "    IdentitiesOnly yes\n"
            "    StrictHostKeyChecking no\n"
            "    UserKnownHostsFile /dev/null\n"
            "    CheckHostIP no\n"
            "    UpdateHostKeys no\n"
            "    BatchMode yes\n"
            "    PasswordAuthentication no\n"
            "    KbdInteractiveAuthentication no\n"
            "    GSSAPIAuthentication no\n"
            "    LogLevel ERROR\n"
        )
        self.ssh_config.chmod(0o644)
        self.tmp_dir.mkdir(exist_ok=True)
        self.tmp_dir.chmod(0o1777)
        self.empty_file.write_text("")
        self.empty_file.chmod(0o644)
        cfg = shlex.quote(str(self.ssh_config))
        self.ssh_wrapper.write_text(f'#!/bin/sh\nexec ssh -F {cfg} "$@"\n')
        self.ssh_wrapper.chmod(0o755)
        try:
            nss = Path("/etc/nsswitch.conf").read_text().splitlines()
        except OSError:
            nss = ["passwd: files", "group: files", "shadow: files"]
        nss = [ln for ln in nss if not re.match(r"^\s*hosts\s*:", ln)] + ["hosts: files"]
        self.nsswitch_file.write_text("\n".join(nss) + "\n")
        self.nsswitch_file.chmod(0o644)
        me = socket.gethostname()
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        # the workers see the machine's hostname as the launcher (as pods resolve the launcher)
        if me and me != "localhost":
            lines.append(f"{self.launcher_addr}\t{me}")
        lines += [f"{h.addr}\t{self._aliases(h)}" for h in self.hosts]
        self.worker_hosts_file.write_text(
            f"# mpiwait test bed {self.bed_id}: worker view\n" + "\n".join(lines) + "\n"
        )
        self.worker_hosts_file.chmod(0o644)
        ver = _openssh_version()
        pen = "PerSourcePenalties no\n" if ver >= (9, 8) else ""
        pen += f"SetEnv TMPDIR={self.tmp_dir}\n" if ver >= (8, 7) else ""
        for h in self.hosts:
            h.sshd_config.write_text(
                f"# mpiwait test bed {self.bed_id}: {h.name}\n"
                f"Port {h.port}\n"
                f"ListenAddress {h.addr}\n"
                f"HostKey {self.host_key}\n"
                "PidFile none\n"
                + SSHD_KEY_LOGIN_ONLY
                + f"AuthorizedKeysFile {self.authorized_keys}\n"
                "MaxStartups 1000:30:2000\n"
                "MaxSessions 100\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "X11Forwarding no\n"
                "LogLevel INFO\n" + pen
            )

    @staticmethod
    def _aliases(h: WorkerHost) -> str:
        return h.name if h.name == h.short else f"{h.name} {h.short}"

    def _create_hosts(self) -> None:
        batch = []
        for h in self.hosts:
            batch += [
                f"netns add {h.ns}",
                f"link add {h.veth} type veth peer name eth0 netns {h.ns}",
                f"link set dev {h.veth} addrgenmode none",
                f"link set {h.veth} master {self.bridge} up",
            ]
        _sh(["ip", "-batch", "-"], input="\n".join(batch) + "\n")
        for h in self.hosts:
            _sh(
                ["ip", "-n", h.ns, "-batch", "-"],
                input=(
                    "link set lo up\n"
                    "link set dev eth0 addrgenmode none\n"
                    f"addr add {h.addr}/24 dev eth0\n"
                    "link set eth0 up\n"
                ),
            )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    def _write_state(self) -> None:
        state = {
            "bed_id": self.bed_id,
            "pid": os.getpid(),
            "starttime": _proc_starttime(os.getpid()),
            "persistent": self.persistent,
            "index": self.index,
            "n": self.n,
            "names": self._names,
            "port": self.port,
            "user": self.user,
            "key_type": self.key_type,
            "workdir": str(self.workdir),
            "client_dir": str(getattr(self, "_client_dir", "")),
            "published": self._published,
        }
        tmp = _beds_dir() / f".{self.bed_id}.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(_beds_dir() / f"{self.bed_id}.json")

    @classmethod
    def attach(cls, bed_id_or_state: str | Path) -> TestBed:
        """A handle on a bed that is up (made by another process, e.g. ``scripts/testbed up``).

        Every method works on it; processes it did not start are found through the namespaces.
        """
        p = Path(bed_id_or_state)
        if p.suffix != ".json":
            p = _beds_dir() / f"{bed_id_or_state}.json"
        st = json.loads(p.read_text())
        bed = cls(
            st["n"],
            workdir=st["workdir"],
            index=st["index"],
            port=st["port"],
            user=st["user"],
            names=st["names"],
            key_type=st["key_type"],
            persistent=st["persistent"],
        )
        bed.index, bed.bed_id = st["index"], st["bed_id"]
        bed._client_dir = Path(st["client_dir"])
        bed._published = list(st["published"])
        bed.hosts = bed._worker_hosts()
        bed._is_up = True
        return bed

    def down(self) -> None:
        """Kill every process of the bed, remove namespaces, links, state. Idempotent."""
        if self._down_done:
            return
        for p in [*self._launched, *self._listeners.values(), *self._sshd.values()]:
            _kill_group(p, grace=1.0)
        self._launched.clear()
        self._listeners.clear()
        self._sshd.clear()
        if self.bed_id:
            with _global_lock():
                _teardown_by_id(
                    self.bed_id,
                    ns_names=[h.ns for h in self.hosts],
                    links=[h.veth for h in self.hosts] + [self.bridge],
                )
            # namespaces/links vanish asynchronously; wait until they are really gone
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                left = [n for n in _list_ns() + _list_links() if _belongs(n, self.bed_id)]
                if not left:
                    break
                _teardown_by_id(self.bed_id)
                time.sleep(0.05)
        self._is_up = False
        self._down_done = True
        _live_beds.discard(self)

    # ---- sshd --------------------------------------------------------------------------------

    def _worker_prelude(self, i: int, *, delay: float = 0) -> list[str]:
        """argv prefix: enter worker i's netns, its own UTS name, files-only name resolution."""
        h = self.hosts[i]
        # Workers get a clean shell, like a container image: the machine's ~/.bashrc (pyenv
        # init here, ~0.4 s) would otherwise run on every ssh command.
        rc = Path(self._pw(self.user).pw_dir) / ".bashrc"
        rc_mount = (
            f"mount --bind {shlex.quote(str(self.empty_file))} {shlex.quote(str(rc))} && "
            if rc.is_file()
            else ""
        )
        script = (
            (f"sleep {float(delay)!r}; " if delay > 0 else "")
            + f"hostname {shlex.quote(h.short)} && "
            + f"mount --bind {shlex.quote(str(self.worker_hosts_file))} /etc/hosts && "
            + f"mount --bind {shlex.quote(str(self.nsswitch_file))} /etc/nsswitch.conf && "
            + rc_mount
            + 'exec "$@"'
        )
        return [
            "ip",
            "netns",
            "exec",
            h.ns,
            "unshare",
            "--uts",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            f"testbed-{h.short}",
        ]

    def ns_exec_cmd(self, i: int, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        """argv that runs ``argv`` inside worker i (its netns, UTS hostname and hosts file)."""
        return [*self._worker_prelude(i), *(os.fspath(a) for a in argv)]

    def ns_run(
        self, i: int, argv: Sequence[str | os.PathLike[str]], *, timeout: float = 30.0, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw["env"] = self.env(kw.get("env"))
        return subprocess.run(self.ns_exec_cmd(i, argv), timeout=timeout, **kw)

    def _spawn(self, argv: list[str], log: Path | None) -> subprocess.Popen[Any]:
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env(None),
            )
        finally:
            if log:
                out.close()  # type: ignore[union-attr]

    def sshd_pid(self, i: int) -> int | None:
        """The pid of worker i's sshd as this bed started it (None when it did not)."""
        p = self._sshd.get(i)
        return p.pid if p is not None and p.poll() is None else None

    def sshd_running(self, i: int) -> bool:
        """Whether sshd (or its delayed start) of worker i is alive."""
        p = self._sshd.get(i)
        if p is not None:
            return p.poll() is None
        return bool(self._sshd_pids_in_ns(i))

    def _pids_in_ns(self, i: int, *words: bytes) -> list[int]:
        """Processes in worker i's namespace whose command line contains all ``words``."""
        out = []
        for pid in _netns_pids(self.hosts[i].ns):
            cmd = self._cmdline(pid)
            if cmd and all(w in cmd for w in words):
                out.append(pid)
        return out

    def _sshd_pids_in_ns(self, i: int) -> list[int]:
        """Listener sshd of worker i (or its pending delayed start), found by command line, for
        attached beds. sshd retitles itself "sshd: /usr/sbin/sshd -D -f CONF ... [listener]";
        its per-connection children carry "-R" or a title without the config path."""
        conf = str(self.hosts[i].sshd_config).encode()
        return [
            pid
            for pid in self._pids_in_ns(i, conf)
            if b"\0-R" not in self._cmdline(pid) and b" -R" not in self._cmdline(pid)
        ]

    @staticmethod
    def _cmdline(pid: int) -> bytes:
        try:
            return b"\0" + Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    def start_sshd(self, i: int, *, delay: float = 0, wait: bool = True) -> None:
        """Start sshd -D on worker i. ``delay`` > 0: return at once, sshd starts ``delay`` s later
        (a ``sleep; exec sshd`` child). Otherwise wait until it listens (``wait``). No-op if it
        is already running or pending."""
        if self.sshd_running(i):
            return
        if i in self._listeners and self._listeners[i].poll() is None:
            raise BedError(
                f"{self.hosts[i].name}: silent listener holds the port; "
                "stop_silent_listener() first"
            )
        h = self.hosts[i]
        argv = [
            *self._worker_prelude(i, delay=delay),
            SSHD,
            "-D",
            "-f",
            str(h.sshd_config),
            "-E",
            str(h.sshd_log),
        ]
        self._sshd[i] = self._spawn(argv, h.sshd_log)
        if delay <= 0 and wait:
            self.wait_listening([i])

    def stop_sshd(self, i: int, *, sessions: bool = False) -> None:
        """Stop worker i's sshd listener (the port then refuses). Open sessions survive, as with a
        real sshd restart, unless ``sessions``: then everything in the namespace is killed."""
        p = self._sshd.pop(i, None)
        if p is not None:
            _kill_group(p)
        else:
            _kill_pids(self._sshd_pids_in_ns(i), signal.SIGTERM)
        if sessions:
            keep = {lp.pid for lp in self._listeners.values() if lp.poll() is None}
            _kill_pids([x for x in _netns_pids(self.hosts[i].ns) if x not in keep])
        self._wait_not_listening(i)

    def listening(self, i: int) -> bool:
        """Whether anything accepts on worker i's SSH port (read from the kernel; no traffic)."""
        pids = [p.pid for p in (self._sshd.get(i), self._listeners.get(i)) if p is not None]
        pids += _netns_pids(self.hosts[i].ns)[:1] if not pids else []
        for pid in pids:
            r = _listening(pid, self.hosts[i].port)
            if r is not None:
                return r
        return False

    def wait_listening(self, which: Sequence[int] | range, timeout: float = 10.0) -> None:
        """Wait until each worker in ``which`` listens on its port; BedError on timeout."""
        pending = set(which)
        deadline = time.monotonic() + timeout
        while pending:
            for i in list(pending):
                if self.listening(i):
                    pending.discard(i)
                else:
                    p = self._sshd.get(i)
                    if p is not None and p.poll() is not None and i not in self._listeners:
                        raise BedError(
                            f"sshd of {self.hosts[i].name} exited {p.returncode}: "
                            f"{self._tail(self.hosts[i].sshd_log)}"
                        )
            if not pending:
                break
            if time.monotonic() > deadline:
                names = ", ".join(self.hosts[i].name for i in sorted(pending))
                raise BedError(f"not listening after {timeout} s: {names}")
            time.sleep(0.01)

    def _wait_not_listening(self, i: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.listening(i) and time.monotonic() < deadline:
            time.sleep(0.01)

    @staticmethod
    def _tail(p: Path, n: int = 5) -> str:
        try:
            return " | ".join(p.read_text(errors="replace").strip().splitlines()[-n:])
        except OSError:
            return "(no log)"

    # ---- faults ------------------------------------------------------------------------------

    def _iptables(self, i: int, op: str) -> None:
        h = self.hosts[i]
        rule = ["INPUT", "-p", "tcp", "--dport", str(h.port), "-j", "DROP"]
        base = ["ip", "netns", "exec", h.ns, "iptables", "-w"]
        present = _sh([*base, "-C", *rule], check=False).returncode == 0
        if op == "-A" and not present:
            _sh([*base, "-A", *rule])
        elif op == "-D" and present:
            _sh([*base, "-D", *rule])

    def blackhole(self, i: int) -> None:
        """Drop every packet to worker i's SSH port (connects time out). Idempotent."""
        self._iptables(i, "-A")

    def unblackhole(self, i: int) -> None:
        self._iptables(i, "-D")

    def syns(self, i: int) -> int:
        """Connection attempts (TCP SYNs) to worker i's SSH port since the first call, which
        installs a rule that only counts (first in INPUT, so blackhole() does not hide any)."""
        h = self.hosts[i]
        base = ["ip", "netns", "exec", h.ns, "iptables", "-w"]
        rule = ["-p", "tcp", "--dport", str(h.port), "--syn", "-m", "comment", "--comment"]
        rule.append(_SYN_MARK)
        if _sh([*base, "-C", "INPUT", *rule], check=False).returncode != 0:
            _sh([*base, "-I", "INPUT", "1", *rule])
        for line in _sh([*base, "-L", "INPUT", "-vnx"]).stdout.splitlines():
            if f"/* {_SYN_MARK} */" in line:
                return int(line.split()[0])
        raise BedError(f"{h.name}: the SYN counting rule is missing")

    def link_down(self, i: int) -> None:
        """Take worker i's link down (root end of the veth): the host is unreachable."""
        _sh(["ip", "link", "set", self.hosts[i].veth, "down"])

    def link_up(self, i: int) -> None:
        _sh(["ip", "link", "set", self.hosts[i].veth, "up"])

    def start_silent_listener(self, i: int) -> None:
        """Accept TCP on worker i's SSH port and never send a banner (sshd must be stopped)."""
        if self.sshd_running(i):
            raise BedError(f"{self.hosts[i].name}: sshd holds the port; stop_sshd() first")
        if i in self._listeners and self._listeners[i].poll() is None:
            return
        h = self.hosts[i]
        code = (
            f"{_SILENT_MARK}\n"
            "import socket\n"
            "s=socket.socket()\n"
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            f"s.bind(({h.addr!r},{h.port}))\n"
            "s.listen(1024)\n"
            "held=[]\n"
            "while True:\n"
            "    c,_=s.accept()\n"
            "    held.append(c)\n"
        )
        self._listeners[i] = self._spawn(
            self.ns_exec_cmd(i, [sys.executable, "-c", code]), self.workdir / f"silent.{i}.log"
        )
        self.wait_listening([i], timeout=10)

    def stop_silent_listener(self, i: int) -> None:
        p = self._listeners.pop(i, None)
        if p is not None:
            _kill_group(p)
        else:  # attached bed: find it by its marker
            _kill_pids(self._pids_in_ns(i, _SILENT_MARK.encode()))
        self._wait_not_listening(i)

    def publish(self, i: int) -> None:
        """Make worker i's name resolve in the launcher context (its "DNS record" appears)."""
        self._published[i] = True
        self._write_hosts_file()

    def unpublish(self, i: int) -> None:
        self._published[i] = False
        self._write_hosts_file()

    def published(self, i: int) -> bool:
        return self._published[i]

    def publish_name(self, name: str, addr: str | None = None) -> None:
        """Make ``name`` resolve in the launcher view too, to ``addr`` (default: the launcher's
        own address), e.g. the launcher pod's record under publishNotReadyAddresses."""
        self._extra_names.append((addr or self.launcher_addr, name))
        self._write_hosts_file()

    def _write_hosts_file(self) -> None:
        """Rewrite the launcher hosts file in place: running launchers have its inode bind-mounted.

        Never truncates: a shorter text is padded with a comment, so a concurrent reader sees
        either the old or the new set of entries, never an empty file.
        """
        write_hosts_file(
            self.hosts_file,
            [(h.addr, self._aliases(h)) for h in self.hosts if self._published[h.i]]
            + list(getattr(self, "_extra_names", [])),
            header=f"mpiwait test bed {self.bed_id}: launcher view (publish/unpublish edit it)",
        )
        if self.bed_id and (_beds_dir() / f"{self.bed_id}.json").exists():
            self._write_state()

    # ---- launcher context --------------------------------------------------------------------

    def env(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """``env`` (default: ours) tagged as this bed's, for a process of its launcher context."""
        e = dict(os.environ if env is None else env)
        e[ENV_TAG] = self.bed_id
        return e

    def _claim_dir(self, path: Path, owner: pwd.struct_passwd | None = None) -> None:
        """Make a bind-mount target exist; if we create it, it is removed when no bed needs it."""
        if path.is_dir():
            with _global_lock():
                d = _shared_dirs_load()
                if str(path) in d and self.bed_id not in d[str(path)]:
                    d[str(path)].append(self.bed_id)
                    _shared_dirs_save(d)
            return
        with _global_lock():
            created = not path.exists()
            path.mkdir(parents=True, exist_ok=True)
            if owner is not None and created:
                os.chown(path, owner.pw_uid, owner.pw_gid)
                path.chmod(0o700)
            d = _shared_dirs_load()
            if created or str(path) in d:
                d.setdefault(str(path), [])
                if self.bed_id not in d[str(path)]:
                    d[str(path)].append(self.bed_id)
                _shared_dirs_save(d)

    def launcher_cmd(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        etc_mpi: Path | str | None = None,
        home_ssh: Path | str | None = None,
        ssh_config: Path | str | bool | None = None,
        as_user: str | None = None,
    ) -> list[str]:
        """argv that runs ``argv`` as the launcher: private mount namespace with the bed's hosts
        file over /etc/hosts, nsswitch ``hosts: files``, ``ssh_config`` over /etc/ssh/ssh_config
        (None: the bed's; False: leave the machine's), optionally ``etc_mpi`` over /etc/mpi and
        ``home_ssh`` over ~``as_user``/.ssh (or ~root), then drop to ``as_user`` if given."""
        if not self.bed_id:
            raise BedError("bed is not up")
        mounts = [
            (self.hosts_file, Path("/etc/hosts")),
            (self.nsswitch_file, Path("/etc/nsswitch.conf")),
        ]
        if ssh_config is None or ssh_config is True:
            mounts.append((self.ssh_config, Path("/etc/ssh/ssh_config")))
        elif ssh_config is not False:
            mounts.append((Path(ssh_config), Path("/etc/ssh/ssh_config")))
        pw = self._pw(as_user) if as_user else None
        if etc_mpi is not None:
            self._claim_dir(Path("/etc/mpi"))
            mounts.append((Path(etc_mpi), Path("/etc/mpi")))
        if home_ssh is not None:
            home = Path((pw or self._pw("root")).pw_dir)
            self._claim_dir(home / ".ssh", owner=pw)
            mounts.append((Path(home_ssh), home / ".ssh"))
        for src, _ in mounts:
            if not src.exists():
                raise BedError(f"bind-mount source {src} does not exist")
        script = (
            " && ".join(
                f"mount --bind {shlex.quote(str(src.resolve()))} {shlex.quote(str(dst))}"
                for src, dst in mounts
            )
            + ' && exec "$@"'
        )
        drop = drop_to(pw) if pw is not None else []
        return [
            "env",
            f"{ENV_TAG}={self.bed_id}",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "testbed-launcher",
            *drop,
            *(os.fspath(a) for a in argv),
        ]

    _LAUNCHER_KW = ("etc_mpi", "home_ssh", "ssh_config", "as_user")

    def _split_kw(self, kw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        lk = {k: kw.pop(k) for k in self._LAUNCHER_KW if k in kw}
        return lk, kw

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        timeout: float = 60.0,
        check: bool = False,
        **kw: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the launcher context and wait. Takes launcher_cmd()'s keywords and
        subprocess.run()'s (defaults: capture_output, text, stdin=DEVNULL). On timeout the
        whole process group is killed and TimeoutExpired is raised."""
        lk, kw = self._split_kw(kw)
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        if "input" not in kw:
            kw.setdefault("stdin", subprocess.DEVNULL)
        kw["env"] = self.env(kw.get("env"))
        inp = kw.pop("input", None)
        cap = kw.pop("capture_output")
        if cap:
            kw.setdefault("stdout", subprocess.PIPE)
            kw.setdefault("stderr", subprocess.PIPE)
        if inp is not None:
            kw["stdin"] = subprocess.PIPE
        kw.setdefault("start_new_session", True)
        cmd = self.launcher_cmd(argv, **lk)
        with subprocess.Popen(cmd, **kw) as p:
            try:
                out, err = p.communicate(inp, timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(p, grace=0.5)
                out, err = p.communicate()
                raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
            except BaseException:
                _kill_group(p, grace=0.5)
                raise
            # children the command left behind in its group (e.g. a stuck orted)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        cp = subprocess.CompletedProcess(cmd, p.returncode, out, err)
        if check:
            cp.check_returncode()
        return cp

    def popen(self, argv: Sequence[str | os.PathLike[str]], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in the launcher context (own process group, killed by down()).
        Takes launcher_cmd()'s keywords and subprocess.Popen()'s."""
        lk, kw = self._split_kw(kw)
        kw["env"] = self.env(kw.get("env"))
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(self.launcher_cmd(argv, **lk), **kw)
        self._launched = [q for q in self._launched if q.poll() is None] + [p]
        return p

    # ---- MPI and mpi-operator helpers --------------------------------------------------------

    def ssh_argv(self, host: int | str, *cmd: str, opts: Sequence[str] = ()) -> list[str]:
        """``ssh -F <bed ssh_config> [opts] HOST CMD...`` (``host``: index or name)."""
        name = self.hosts[host].name if isinstance(host, int) else host
        return ["ssh", "-F", str(self.ssh_config), *opts, name, *cmd]

    def _pick(self, hosts: Sequence[int | str] | None) -> list[str]:
        if hosts is None:
            return self.names
        return [self.hosts[h].name if isinstance(h, int) else h for h in hosts]

    def openmpi_argv(
        self,
        cmd: Sequence[str],
        *,
        np: int | None = None,
        hosts: Sequence[int | str] | None = None,
        ssh_config: Path | str | bool = True,
        extra: Sequence[str] = (),
    ) -> list[str]:
        """Open MPI ``mpirun`` over the bed (run it through run()/popen()). ``hosts``: indexes or
        names (default all); ``np`` default one per host; ``ssh_config``: True the bed's
        (``--mca plm_rsh_agent "ssh -F ..."``), a path, or False for plain ``ssh`` (which, in the
        launcher context, reads the bind-mounted /etc/ssh/ssh_config)."""
        names = self._pick(hosts)
        argv = [
            "mpirun",
            "--allow-run-as-root",
            "--host",
            ",".join(names),
            "-np",
            str(np if np is not None else len(names)),
            "--mca",
            "oob_tcp_if_include",
            self.subnet,
            "--mca",
            "btl_tcp_if_include",
            self.subnet,
            "--mca",
            "orte_tmpdir_base",
            str(self.tmp_dir),
        ]
        if ssh_config is not False:
            cfg = self.ssh_config if ssh_config is True else Path(ssh_config)
            argv += ["--mca", "plm_rsh_agent", f"ssh -F {cfg}"]
        return [*argv, *extra, *cmd]

    def mpich_argv(
        self,
        cmd: Sequence[str],
        *,
        np: int | None = None,
        hosts: Sequence[int | str] | None = None,
        ssh_config: Path | str | bool = True,
        iface: bool = True,
        extra: Sequence[str] = (),
    ) -> list[str]:
        """MPICH ``mpiexec.hydra`` over the bed. ``ssh_config`` True: ``-launcher-exec`` the bed's
        ssh wrapper; False: plain ssh (bind-mounted config). ``iface``: ``-iface <bridge>`` so the
        proxies call back to the launcher's bridge address."""
        names = self._pick(hosts)
        argv = ["mpiexec.hydra", "-launcher", "ssh"]
        if ssh_config is True:
            argv += ["-launcher-exec", str(self.ssh_wrapper)]
        elif ssh_config is not False:
            w = self.workdir / f"ssh-wrapper-{abs(hash(str(ssh_config)))}"
            w.write_text(f'#!/bin/sh\nexec ssh -F {shlex.quote(str(ssh_config))} "$@"\n')
            w.chmod(0o755)
            argv += ["-launcher-exec", str(w)]
        if iface:
            argv += ["-iface", self.bridge]
        argv += ["-hosts", ",".join(names), "-n", str(np if np is not None else len(names))]
        return [*argv, *extra, *cmd]

    def write_ssh_auth(
        self, dest: Path | str, *, key_mode: int = 0o600, owner: str | None = None
    ) -> Path:
        """Make a directory like mpi-operator's ``ssh-auth`` secret mount: ``id_rsa`` (the bed's
        client key, whatever its type), ``id_rsa.pub``, ``authorized_keys``. Use it as
        ``home_ssh=``. ``key_mode`` lets a test reproduce "permissions too open"."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.key_path, dest / "id_rsa")
        shutil.copyfile(self.pubkey_path, dest / "id_rsa.pub")
        shutil.copyfile(self.pubkey_path, dest / "authorized_keys")
        (dest / "id_rsa").chmod(key_mode)
        (dest / "id_rsa.pub").chmod(0o644)
        (dest / "authorized_keys").chmod(0o644)
        pw = self._pw(owner or self.user)
        for p in (dest, *dest.iterdir()):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        dest.chmod(0o700)
        return dest

    def write_etc_mpi(
        self,
        dest: Path | str,
        *,
        flavor: str = "openmpi",
        slots: int = 1,
        running: Sequence[int] | None = None,
        hosts: Sequence[int | str] | None = None,
    ) -> Path:
        """Make a directory like mpi-operator's /etc/mpi: ``hostfile`` (0444; ``h slots=N`` for
        "openmpi", ``h:N`` for "mpich"/"intel") and ``discover_hosts.sh`` (0555; ``running``
        lists the indexes it echoes, default all; sorted by name as the operator does)."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        names = self._pick(hosts)
        if flavor == "openmpi":
            lines = [f"{h} slots={slots}" for h in names]
        elif flavor in ("mpich", "intel"):
            lines = [f"{h}:{slots}" for h in names]
        else:
            raise ValueError(f"flavor must be openmpi, mpich or intel, got {flavor!r}")
        p = dest / "hostfile"
        with contextlib.suppress(FileNotFoundError):
            p.chmod(0o644)
        p.write_text("\n".join(lines) + "\n")
        p.chmod(0o444)
        up = names if running is None else [self.hosts[i].name for i in running]
        self.write_discover_hosts(dest, sorted(up))
        return dest

    @staticmethod
    def write_discover_hosts(dest: Path | str, names: Sequence[str]) -> Path:
        """(Re)write ``dest/discover_hosts.sh`` in place (keeps the inode under bind mounts)."""
        p = Path(dest) / "discover_hosts.sh"
        text = "#!/bin/sh\n" + "".join(f"echo {n}\n" for n in names)
        if p.exists():
            p.chmod(0o755)
            with open(p, "r+") as f:
                f.truncate(0)
                f.write(text)
        else:
            p.write_text(text)
        p.chmod(0o555)
        return p
