"""ManyHosts: the shared-namespace flavour of lab (stdlib only).

Hundreds of worker "hosts" as addresses of ONE network namespace, served by one sshd on 0.0.0.0,
each address individually refused, black-holed or stalled by iptables rules that are swapped in
one ``iptables-restore`` (cheap enough to flap 50 hosts at once). Its launcher context is a
TestBed's: files-only name resolution, nothing leaves the machine.

Addresses: ManyHosts sets use 10.124.<4k>.0/22 (k picked free under the bed's lock), so they
never collide with TestBed's 10.123.<index>.0/24. Namespace and link names start with "mh" and
carry the owner's pid (base 36): ``cleanup_stale()`` removes sets whose owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _netns as testbed
from . import _sys
from ._faults import ns_iptables
from ._proc import register_key, tcp_states, wait_until

PREFIX = "mh"
SUBNET = "10.124"
FIRST_OFFSET = 10


# ManyHosts


def _b36(n: int) -> str:
    return _sys.b36(n)


STATES = ("up", "refuse", "drop", "stall")


class ManyHosts:
    """``n`` hosts (node-001 ...) as addresses of one namespace; one sshd serves them all.

    Per host: ``up`` (sshd answers), ``refuse`` (RST: connection refused), ``drop`` (SYNs
    dropped: connect times out), ``stall`` (TCP connects, then no packet gets through: no
    banner). ``set_states`` applies any mix in one iptables-restore. Names resolve in the
    launcher context only while published.
    """

    __test__ = False

    def __init__(
        self,
        n: int,
        *,
        workdir: Path | str,
        sshd: bool = True,
        published: Iterable[int] | None = None,
        max_startups: str = "2000:30:4000",
    ) -> None:
        if not 1 <= n <= 1000:
            raise ValueError("1..1000 hosts")
        self.n = n
        self.workdir = Path(workdir).resolve()
        self._start_sshd = sshd
        self._max_startups = max_startups
        self._published = [True] * n if published is None else [False] * n
        for i in published or ():
            self._published[i] = True
        self.states = ["up"] * n
        self.set_id = ""
        self.block = -1
        self._sshd: subprocess.Popen[Any] | None = None
        self._launched: list[subprocess.Popen[Any]] = []
        self._down_done = False
        self.names = [f"node-{k + 1:03d}" for k in range(n)]
        self.addrs: list[str] = []

    # ---- layout ---------------------------------------------------------------------------

    @property
    def ns(self) -> str:
        return f"{self.set_id}n"

    @property
    def veth(self) -> str:
        return f"{self.set_id}v"

    @property
    def launcher_addr(self) -> str:
        return f"{SUBNET}.{self.block}.1"

    @property
    def key_path(self) -> Path:
        return self.workdir / "id_key"

    @property
    def ssh_config(self) -> Path:
        return self.workdir / "ssh_config"

    @property
    def hosts_file(self) -> Path:
        return self.workdir / "hosts"

    @property
    def nsswitch_file(self) -> Path:
        return self.workdir / "nsswitch.conf"

    def _addr(self, i: int) -> str:
        offsets = [o for o in range(FIRST_OFFSET, 1024) if o % 256 not in (0, 255)]
        o = offsets[i]
        return f"{SUBNET}.{self.block + o // 256}.{o % 256}"

    # ---- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> ManyHosts:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        problem = testbed.missing_requirements()
        if problem:
            raise testbed.BedError(f"test bed unavailable: {problem}")
        try:
            self._up()
        except BaseException:
            self.down()
            raise

    def _up(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with _sys.global_lock():
            _cleanup_stale_locked()
            used = set()
            out = _sys.sh(["ip", "-o", "-4", "addr", "show"], check=False).stdout
            for m in re.finditer(rf"\binet {re.escape(SUBNET)}\.(\d+)\.", out):
                used.add(int(m.group(1)) // 4)
            free = [k for k in range(64) if k not in used]
            if not free:
                raise testbed.BedError(f"no free {SUBNET}.X.0/22")
            self.block = 4 * free[0]
            self.set_id = f"{PREFIX}{_b36(os.getpid())}-{free[0]}"
            _sys.sh(
                ["ip", "-batch", "-"],
                input=(
                    f"netns add {self.ns}\n"
                    f"link add {self.veth} type veth peer name eth0 netns {self.ns}\n"
                    f"link set dev {self.veth} addrgenmode none\n"
                    f"addr add {self.launcher_addr}/22 dev {self.veth}\n"
                    f"link set {self.veth} up\n"
                ),
            )
        self.addrs = [self._addr(i) for i in range(self.n)]
        batch = ["link set lo up", "link set dev eth0 addrgenmode none"]
        batch += [f"addr add {a}/22 dev eth0" for a in self.addrs]
        batch.append("link set eth0 up")
        _sys.sh(["ip", "-n", self.ns, "-batch", "-"], input="\n".join(batch) + "\n")
        ns_iptables(self.ns, "-N", "MH")
        ns_iptables(self.ns, "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "MH")
        self._write_files()
        if self._start_sshd:
            self.start_sshd()

    def _write_files(self) -> None:
        for p in (self.key_path, Path(f"{self.key_path}.pub")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
        _sys.sh([*keygen, "-C", f"{self.set_id}-client", "-f", self.key_path])
        host_key = self.workdir / "ssh_host_ed25519_key"
        if not host_key.exists():
            _sys.sh([*keygen, "-C", f"{self.set_id}-host", "-f", host_key])
        register_key(self.key_path)
        auth = self.workdir / "authorized_keys"
        auth.write_text(Path(f"{self.key_path}.pub").read_text())
        self.ssh_config.write_text(
            f"# mpiwait many-hosts set {self.set_id}\n"
            "Host *\n"
            "    Port 22\n"
            "    User root\n"
            f"    IdentityFile {self.key_path}\n"
            "    IdentitiesOnly yes\n"
            "    StrictHostKeyChecking no\n"
            "    UserKnownHostsFile /dev/null\n"
            "    BatchMode yes\n"
        )
        (self.workdir / "sshd_config").write_text(
            f"# mpiwait many-hosts set {self.set_id}\n"
            "Port 22\n"
            "ListenAddress 0.0.0.0\n"
            f"HostKey {host_key}\n"
            "PidFile none\n" + _sys.SSHD_KEY_LOGIN_ONLY + f"AuthorizedKeysFile {auth}\n"
            f"MaxStartups {self._max_startups}\n"
            "UseDNS no\n"
            "LogLevel ERROR\n"
        )
        try:
            nss = Path("/etc/nsswitch.conf").read_text().splitlines()
        except OSError:
            nss = ["passwd: files", "group: files"]
        nss = [ln for ln in nss if not re.match(r"^\s*hosts\s*:", ln)] + ["hosts: files"]
        self.nsswitch_file.write_text("\n".join(nss) + "\n")
        self._write_hosts_file()

    def _write_hosts_file(self) -> None:
        testbed.write_hosts_file(
            self.hosts_file,
            [
                (a, nm)
                for a, nm, p in zip(self.addrs, self.names, self._published, strict=True)
                if p
            ],
        )

    def publish(self, *which: int) -> None:
        for i in which:
            self._published[i] = True
        self._write_hosts_file()

    def start_sshd(self) -> None:
        conf = self.workdir / "sshd_config"
        log = self.workdir / "sshd.log"
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        script = (
            f"mount --bind {shlex.quote(str(self.hosts_file))} /etc/hosts && "
            f"mount --bind {shlex.quote(str(self.nsswitch_file))} /etc/nsswitch.conf && "
            'exec "$@"'
        )
        argv = [
            "ip", "netns", "exec", self.ns, "unshare", "-m", "--propagation", "private",
            "sh", "-c", script, "manyhosts-sshd",
            testbed.SSHD, "-D", "-f", str(conf), "-E", str(log),
        ]  # fmt: skip
        with open(log, "ab") as out:
            self._sshd = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env(None),
            )
        wait_until(
            lambda: "0A" in tcp_states(self._sshd.pid, 22) or self._sshd.poll() is not None,
            10,
            "the many-hosts sshd to listen",
        )
        if self._sshd.poll() is not None:
            raise testbed.BedError(f"sshd exited: {log.read_text()[-500:]}")

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

    # ---- launcher context -----------------------------------------------------------------

    def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``env`` (default: ours) tagged as this set's, for a process of its launcher context."""
        e = dict(os.environ if env is None else env)
        e[testbed.ENV_TAG] = self.set_id
        return e

    def launcher_cmd(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        mounts = [
            (self.hosts_file, "/etc/hosts"),
            (self.nsswitch_file, "/etc/nsswitch.conf"),
            (self.ssh_config, "/etc/ssh/ssh_config"),
        ]
        script = " && ".join(
            f"mount --bind {shlex.quote(str(src))} {shlex.quote(dst)}" for src, dst in mounts
        )
        return [
            "env", f"{testbed.ENV_TAG}={self.set_id}",
            "unshare", "-m", "--propagation", "private",
            "sh", "-c", script + ' && exec "$@"', "manyhosts-launcher",
            *(os.fspath(a) for a in argv),
        ]  # fmt: skip

    def popen(self, argv: Sequence[str | os.PathLike[str]], **kw: Any) -> subprocess.Popen[Any]:
        kw["env"] = self.env(kw.get("env"))
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(self.launcher_cmd(argv), **kw)
        self._launched = [q for q in self._launched if q.poll() is None] + [p]
        return p

    def down(self) -> None:
        if self._down_done:
            return
        for p in [*self._launched, *([self._sshd] if self._sshd else [])]:
            _sys.kill_group(p, grace=1.0)
        if self.set_id:
            with _sys.global_lock():
                _teardown(self.set_id)
        self._down_done = True


def _teardown(set_id: str) -> None:
    ns, veth = f"{set_id}n", f"{set_id}v"
    for _ in range(3):
        pids = (_sys.netns_pids(ns) if ns in _sys.list_ns() else []) + _sys.tagged_pids(set_id)
        if not _sys.kill_pids(pids):
            break
        time.sleep(0.05)
    _sys.sh(
        ["ip", "-force", "-batch", "-"], input=f"link del {veth}\nnetns del {ns}\n", check=False
    )


def _cleanup_stale_locked() -> list[str]:
    """Remove many-hosts sets whose owner process is gone (call under the bed lock)."""
    ids = set()
    for name in _sys.list_ns() + _sys.list_links():
        m = re.match(rf"^({PREFIX}([0-9a-z]+)-\d+)[nv]$", name)
        if m and not Path(f"/proc/{int(m.group(2), 36)}").exists():
            ids.add(m.group(1))
    for set_id in sorted(ids):
        _teardown(set_id)
    return sorted(ids)


def cleanup_stale() -> list[str]:
    if os.geteuid() != 0:
        return []
    with _sys.global_lock():
        return _cleanup_stale_locked()
