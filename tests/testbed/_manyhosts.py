"""ManyHosts: the shared-namespace flavour of lab (stdlib only).

Hundreds of worker "hosts" as addresses of ONE network namespace, served by one sshd on 0.0.0.0
(or, for benchmarks, a listening socket per host and sshds on CPUs of their own),
each address individually refused, black-holed or stalled by iptables rules that are swapped in
one ``iptables-restore`` (cheap enough to flap 50 hosts at once). Its launcher context is a
TestBed's: files-only name resolution, nothing leaves the machine.

Addresses: ManyHosts sets use 10.124.<4k>.0/22 (k picked free under the bed's lock), so they
never collide with TestBed's 10.123.<index>.0/24. Namespace and link names start with "mh" and
carry the owner's pid (base 36): ``cleanup_stale()`` removes sets whose owner is gone.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _sys
from ._faults import ns_iptables
from ._launcher import LauncherContext, clean_shell
from ._launcher import split_cpus as split_cpus_
from ._names import mount_ns_cmd, published_entries, write_hosts_file, write_nsswitch
from ._namespaces import SSHD, NamespaceLab, Netns, add_namespaces
from ._proc import register_key
from ._registry import MANY_PREFIX, cleanup_stale_locked, teardown_until_gone
from ._sshd import client_config, make_key, sshd_config, start_sshd, wait_listening

SUBNET = "10.124"
FIRST_OFFSET = 10
STATES = ("up", "refuse", "drop", "stall")
LISTEN_SOCKS = 16


class ManyHosts(LauncherContext, NamespaceLab):
    """``n`` hosts (node-001 ...) as addresses of one namespace; one sshd serves them all,
    unless ``own_listeners``.

    ``own_listeners``: each host its own listening socket (accept queue), as each worker of a
    cluster has, served by one sshd per 16 hosts. ``split_cpus``: the sshds on one half of the
    CPUs, launcher_cmd's processes on the other, as a cluster's workers take no CPU from its
    launcher (what 400 sessions starting or ending cost falls on the workers' half).

    Per host: ``up`` (sshd answers), ``refuse`` (RST: connection refused), ``drop`` (SYNs
    dropped: connect times out), ``stall`` (TCP connects, then no packet gets through: no
    banner). ``set_states`` applies any mix in one iptables-restore. Names resolve in the
    launcher context only while published.
    """

    __test__ = False
    user = "root"

    def __init__(
        self,
        n: int,
        *,
        workdir: Path | str,
        sshd: bool = True,
        published: Iterable[int] | None = None,
        max_startups: str = "2000:30:4000",
        log_level: str = "ERROR",
        own_listeners: bool = False,
        split_cpus: bool = False,
    ) -> None:
        if not 1 <= n <= 1000:
            raise ValueError("1..1000 hosts")
        self.n = n
        self.workdir = Path(workdir).resolve()
        self._start_sshd = sshd
        self._max_startups = max_startups
        self._log_level = log_level  # VERBOSE: "Connection from A port P on DEST" per connection
        # A listening socket (accept queue) per host, as each worker of a cluster has its own.
        self._own_listeners = own_listeners
        self.cpu_split = split_cpus_() if split_cpus else None
        self._published = [True] * n if published is None else [False] * n
        for i in published or ():
            self._published[i] = True
        self.states = ["up"] * n
        self.set_id = ""  # set by up(), with the names and addresses made from it
        self.block = -1
        self.ns = self.veth = self.launcher_addr = ""
        self.client_dir = self.workdir  # key, ssh_config, hosts file: see LauncherContext
        self._sshds: list[subprocess.Popen[Any]] = []
        self._launched: list[subprocess.Popen[Any]] = []
        self._down_done = False
        self.names = [f"node-{k + 1:03d}" for k in range(n)]
        self.addrs: list[str] = []

    # ---- layout ---------------------------------------------------------------------------

    @property
    def bed_id(self) -> str:
        """The set's id (what its processes are tagged with), as a TestBed's."""
        return self.set_id

    def _addr(self, i: int) -> str:
        offsets = [o for o in range(FIRST_OFFSET, 1024) if o % 256 not in (0, 255)]
        o = offsets[i]
        return f"{SUBNET}.{self.block + o // 256}.{o % 256}"

    # ---- lifecycle --------------------------------------------------------------------------

    def _up(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with _sys.global_lock():
            cleanup_stale_locked(MANY_PREFIX)
            used = set()
            out = _sys.sh(["ip", "-o", "-4", "addr", "show"], check=False).stdout
            for m in re.finditer(rf"\binet {re.escape(SUBNET)}\.(\d+)\.", out):
                used.add(int(m.group(1)) // 4)
            free = [k for k in range(64) if k not in used]
            if not free:
                raise _sys.BedError(f"no free {SUBNET}.X.0/22")
            self.block = 4 * free[0]
            self.set_id = f"{MANY_PREFIX}{_sys.b36(os.getpid())}-{free[0]}"
            self.ns, self.veth = f"{self.set_id}n", f"{self.set_id}v"
            self.launcher_addr = f"{SUBNET}.{self.block}.1"
            self.addrs = [self._addr(i) for i in range(self.n)]
            add_namespaces(
                [Netns(self.ns, self.veth, tuple(f"{a}/22" for a in self.addrs))],
                root_cidr=f"{self.launcher_addr}/22",
            )
        ns_iptables(self.ns, "-N", "MH")
        ns_iptables(self.ns, "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "MH")
        self._write_files()
        if self._start_sshd:
            self.start_sshd()

    def _write_files(self) -> None:
        make_key(self.key_path, f"{self.set_id}-client")
        host_key = self.workdir / "ssh_host_ed25519_key"
        if not host_key.exists():
            make_key(host_key, f"{self.set_id}-host")
        register_key(self.key_path)
        self.authorized_keys.write_text(self.pubkey_path.read_text())
        header = f"mpiwait many-hosts set {self.set_id}"
        self.ssh_config.write_text(
            client_config(header=header, port=22, user="root", key=self.key_path)
        )
        for k, listen in enumerate(self._listen_groups()):
            (self.workdir / f"sshd_config.{k}").write_text(
                sshd_config(
                    header=header,
                    listen=listen,
                    port=22,
                    host_key=host_key,
                    authorized_keys=self.authorized_keys,
                    max_startups=self._max_startups,
                    log_level=self._log_level,
                )
            )
        write_nsswitch(self.nsswitch_file)
        self.empty_file.write_text("")
        self._write_hosts_file()

    def _write_hosts_file(self) -> None:
        write_hosts_file(
            self.hosts_file, published_entries(self.addrs, self.names, self._published)
        )

    def publish(self, *which: int) -> None:
        for i in which:
            self._published[i] = True
        self._write_hosts_file()

    def _listen_groups(self) -> list[list[str]]:
        """The ListenAddress lists, one per sshd: every address of one wildcard socket, or
        each host its own socket, at most LISTEN_SOCKS per sshd (OpenSSH's MAX_LISTEN_SOCKS)."""
        if not self._own_listeners:
            return [["0.0.0.0"]]
        return [self.addrs[k : k + LISTEN_SOCKS] for k in range(0, self.n, LISTEN_SOCKS)]

    def start_sshd(self) -> None:
        """The set's sshd (or, with own_listeners, one per LISTEN_SOCKS hosts), all logging to
        one file (sshd opens its -E file to append)."""
        prelude = mount_ns_cmd(
            [
                (self.hosts_file, "/etc/hosts"),
                (self.nsswitch_file, "/etc/nsswitch.conf"),
                *clean_shell(self.user, self.empty_file),
            ],
            "manyhosts-sshd",
            netns=self.ns,
        )
        configs = [self.workdir / f"sshd_config.{k}" for k in range(len(self._listen_groups()))]
        sshd = (*self.pinned(1), SSHD)
        self._sshds = [start_sshd(prelude, c, self.sshd_log, self.env(None), sshd) for c in configs]
        for p in self._sshds:
            wait_listening(p, 22, self.sshd_log)
        if self._own_listeners:  # any socket on port 22 answers wait_listening: wait for all
            deadline, pid = time.monotonic() + 10, self._sshds[0].pid  # one namespace: one table
            while missing := set(self.addrs) - (_sys.listening_on(pid, 22) or set()):
                if time.monotonic() > deadline:
                    raise _sys.BedError(f"sshd not listening on {sorted(missing)[:3]}...")
                time.sleep(0.01)

    @property
    def sshd_pids(self) -> list[int]:
        return [p.pid for p in self._sshds]

    @property
    def sshd_log(self) -> Path:
        return self.workdir / "sshd.log"

    def set_states(self, states: Mapping[int, str] | Sequence[str]) -> None:
        """Change hosts' states (a mapping index → state, or a full list) in one go."""
        items = states.items() if isinstance(states, Mapping) else enumerate(states)
        for i, s in items:
            if s not in STATES:
                raise ValueError(f"state must be one of {STATES}, not {s!r}")
            self.states[i] = s
        rules = ["*filter", "-F MH"]
        for a, s in zip(self.addrs, self.states, strict=True):
            match = f"-A MH -d {a}/32 -p tcp --dport 22"
            if s == "refuse":
                rules.append(f"{match} -j REJECT --reject-with tcp-reset")
            elif s == "drop":
                rules.append(f"{match} -j DROP")
            elif s == "stall":
                rules.append(f"{match} -m conntrack --ctstate ESTABLISHED -j DROP")
        rules.append("COMMIT")
        _sys.sh(
            ["ip", "netns", "exec", self.ns, "iptables-restore", "-w", "--noflush"],
            input="\n".join(rules) + "\n",
        )

    def down(self) -> None:
        if self._down_done:
            return
        for p in [*self._launched, *self._sshds]:
            _sys.kill_group(p, grace=1.0)
        if self.set_id:
            teardown_until_gone(self.set_id, ns_names=[self.ns], links=[self.veth])
        self._down_done = True
