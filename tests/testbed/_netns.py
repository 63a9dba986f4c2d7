"""TestBed: a multi-host test bed on one machine, worker "hosts" being network namespaces
that run real sshd. This module holds the bed's layout and lifecycle; its other jobs are mixed
in: the launcher context (_launcher), what runs inside a worker (_workers), a host's fault
states (_faults), MPI launches over it (_mpi); the machine-wide registry of beds and the stale
cleanup are _registry's.

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
import re
import shlex
import subprocess
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _mpi
from ._faults import HostFaults
from ._launcher import ClientFile, LauncherContext, user_entry
from ._launcher import split_cpus as split_cpus_
from ._names import Mount, hosts_lines, write_hosts_file, write_nsswitch
from ._namespaces import (
    SSHD,
    NamespaceLab,
    Netns,
    add_bridge,
    add_namespaces,
    missing_requirements,
)
from ._registry import (
    PREFIX,
    beds_dir,
    cleanup_stale_locked,
    pub_root,
    teardown_until_gone,
)
from ._sshd import client_config, machine_sshd, make_key, release_sshd, sshd_config
from ._sys import BedError, b36, global_lock, kill_group, proc_starttime, sh

__all__ = ["SSHD", "TestBed", "WorkerHost", "missing_requirements"]

SUBNET = "10.123"  # bed <index> uses 10.123.<index>.0/24
FIRST_HOST = 11  # w1 is .11, w2 .12, ...
MAX_HOSTS = 254 - FIRST_HOST + 1

_IFNAMSIZ = 15
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_NAME_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


def _used_indexes() -> set[int]:
    cp = sh(["ip", "-o", "-4", "addr", "show"], check=False)
    pat = re.compile(rf"\binet {re.escape(SUBNET)}\.(\d+)\.\d+/")
    used = {int(m.group(1)) for m in pat.finditer(cp.stdout)}
    if beds_dir().is_dir():
        for f in beds_dir().glob("*.json"):
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


class TestBed(LauncherContext, HostFaults, NamespaceLab):
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
        sshd: str | None = None,
        split_cpus: bool = False,
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
        sshd: None, the machine's sshd tuned for tests; a Debian suite of
            testbed.releases.SERVER_SUITES ("trixie"), that release's sshd with its own
            defaults (PerSourcePenalties on, MaxStartups 10:30:100; LogLevel VERBOSE).
        split_cpus: the workers' sshds on one half of the CPUs, launcher_cmd's processes on the
            other (benchmarks: as on a cluster, the workers' work takes no launcher CPU).
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
        self._sshd_release = sshd
        self.sshd_build = machine_sshd()
        self.cpu_split = split_cpus_() if split_cpus else None
        self.index: int = -1
        self.bed_id = ""
        self.hosts: list[WorkerHost] = []
        self._published: list[bool] = [False] * n
        self._extra_names: list[tuple[str, str]] = []  # (address, names) in the launcher view
        self._sshd: dict[int, subprocess.Popen[Any]] = {}
        self._listeners: dict[int, subprocess.Popen[Any]] = {}
        self._views: dict[int, list[Mount]] = {}  # set_view(): (layer, folder) overlays
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

    # the workers' view: every worker, and the machine's hostname as the launcher address
    worker_hosts_file = ClientFile("hosts.workers")
    # executable ``ssh -F ssh_config "$@"`` (for hydra's -launcher-exec and friends)
    ssh_wrapper = ClientFile("ssh")
    # TMPDIR of the worker sessions (sshd SetEnv) and Open MPI's session-dir base: the workers
    # share the machine's /tmp, and concurrent beds' orteds would race on /tmp/ompi.<host>.<uid>
    tmp_dir = ClientFile("tmp")

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

    def _up(self) -> None:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        with global_lock():
            cleanup_stale_locked(self.prefix)
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
            self.bed_id = f"{self.prefix}{b36(os.getpid())}-{self.index}"
            beds_dir().mkdir(parents=True, exist_ok=True)
            self._down_done = False
            _live_beds.add(self)
            self._write_state()  # before creating anything, so a crash from here on is cleanable
            add_bridge(self.bridge, f"{self.launcher_addr}/24")
            if self.user != "root":
                self._ensure_user()
        self._client_dir = self._choose_client_dir()
        self.hosts = self._worker_hosts()
        for h in self.hosts:
            assert len(h.veth) <= _IFNAMSIZ, h.veth
        self._write_files()
        add_namespaces(
            (Netns(h.ns, h.veth, (f"{h.addr}/24",)) for h in self.hosts), bridge=self.bridge
        )
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
            d = pub_root() / self.bed_id
            pub_root().mkdir(parents=True, exist_ok=True)
            pub_root().chmod(0o755)
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
        return d

    @staticmethod
    def _reachable_by_others(path: Path) -> bool:
        return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])

    def _ensure_user(self) -> None:
        try:
            user_entry(self.user)
        except BedError:
            sh(["useradd", "-m", "-s", "/bin/bash", self.user])
        # a useradd'ed user is locked ("!"), and sshd without PAM refuses locked accounts
        shadow = Path("/etc/shadow").read_text().splitlines()
        entry = next((ln.split(":") for ln in shadow if ln.startswith(self.user + ":")), None)
        if entry is None or entry[1].startswith("!") or entry[1] == "":
            sh(["usermod", "-p", "*", self.user])

    def _write_files(self) -> None:
        if self._sshd_release is not None:
            self.sshd_build = release_sshd(self._sshd_release, self.workdir)
        if not self.host_key.exists():
            make_key(self.host_key, f"{self.bed_id}-host")
        make_key(self.key_path, f"{self.bed_id}-client", self.key_type)
        self.authorized_keys.write_text(self.pubkey_path.read_text())
        pw = user_entry(self.user)
        for p in (self.key_path, self.authorized_keys):
            p.chmod(0o600)
            os.chown(p, pw.pw_uid, pw.pw_gid)
        header = f"mpiwait test bed {self.bed_id}"
        config = client_config(header=header, port=self.port, user=self.user, key=self.key_path)
        self.ssh_config.write_text(config)
        self.ssh_config.chmod(0o644)
        self.tmp_dir.mkdir(exist_ok=True)
        self.tmp_dir.chmod(0o1777)
        self.empty_file.write_text("")
        self.empty_file.chmod(0o644)
        cfg = shlex.quote(str(self.ssh_config))
        self.ssh_wrapper.write_text(f'#!/bin/sh\nexec ssh -F {cfg} "$@"\n')
        self.ssh_wrapper.chmod(0o755)
        write_nsswitch(self.nsswitch_file)
        # the workers see the machine's hostname as the launcher (as pods resolve the launcher)
        lines = hosts_lines(
            [(h.addr, self._aliases(h)) for h in self.hosts], me_addr=self.launcher_addr
        )
        self.worker_hosts_file.write_text(f"# {header}: worker view\n" + "\n".join(lines) + "\n")
        self.worker_hosts_file.chmod(0o644)
        for h in self.hosts:
            h.sshd_config.write_text(self._sshd_config_text(h))

    def _sshd_config_text(self, h: WorkerHost, **settings: Any) -> str:
        """Worker ``h``'s sshd_config; ``settings`` override _sshd.sshd_config()'s (LoopBed)."""
        base: dict[str, Any] = {
            "header": f"mpiwait test bed {self.bed_id}: {h.name}",
            "listen": h.addr,
            "port": h.port,
            "host_key": self.host_key,
            "authorized_keys": self.authorized_keys,
            "tmp_dir": self.tmp_dir,
            "build": self.sshd_build,
        }
        return sshd_config(**(base | settings))

    @staticmethod
    def _aliases(h: WorkerHost) -> str:
        return h.name if h.name == h.short else f"{h.name} {h.short}"

    def _write_state(self) -> None:
        state = {
            "bed_id": self.bed_id,
            "pid": os.getpid(),
            "starttime": proc_starttime(os.getpid()),
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
        tmp = beds_dir() / f".{self.bed_id}.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(beds_dir() / f"{self.bed_id}.json")

    @classmethod
    def attach(cls, bed_id_or_state: str | Path) -> TestBed:
        """A handle on a bed that is up (made by another process, e.g. ``scripts/testbed up``).

        Every method works on it; processes it did not start are found through the namespaces.
        """
        p = Path(bed_id_or_state)
        if p.suffix != ".json":
            p = beds_dir() / f"{bed_id_or_state}.json"
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
            kill_group(p, grace=1.0)
        self._launched.clear()
        self._listeners.clear()
        self._sshd.clear()
        if self.bed_id:
            teardown_until_gone(
                self.bed_id,
                ns_names=[h.ns for h in self.hosts],
                links=[h.veth for h in self.hosts] + [self.bridge],
            )
        self._is_up = False
        self._down_done = True
        _live_beds.discard(self)

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
        if self.bed_id and (beds_dir() / f"{self.bed_id}.json").exists():
            self._write_state()

    def penalties(self) -> list[str]:
        """The lines of every worker's sshd log that put a PerSourcePenalties penalty into
        force (refusing its source address from then on): "activating ... penalty" and "new
        ... active ... penalty" (LogLevel VERBOSE, which a TestBed(sshd=...) sets)."""
        rx = re.compile(r"activating \S+ penalty|new \S+ active penalty")
        out = []
        for h in self.hosts:
            with contextlib.suppress(OSError):
                out += [f"{h.name}: {ln}" for ln in h.sshd_log.read_text().splitlines()
                        if rx.search(ln)]  # fmt: skip
        return out

    # ---- MPI and mpi-operator helpers --------------------------------------------------------

    def ssh_argv(self, host: int | str, *cmd: str, opts: Sequence[str] = ()) -> list[str]:
        """``ssh -F <bed ssh_config> [opts] HOST CMD...`` (``host``: index or name)."""
        name = self.hosts[host].name if isinstance(host, int) else host
        return ["ssh", "-F", str(self.ssh_config), *opts, name, *cmd]

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
        return _mpi.mpi_argv(
            self, _mpi.OPENMPI, cmd, np=np, hosts=hosts, ssh_config=ssh_config, net=True,
            extra=extra,
        )  # fmt: skip

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
        return _mpi.mpi_argv(
            self, _mpi.MPICH, cmd, np=np, hosts=hosts, ssh_config=ssh_config, net=iface,
            extra=extra,
        )  # fmt: skip
