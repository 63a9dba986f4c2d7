"""Helpers for fault, signal, security and soak tests against the test bed (stdlib only).

What tests/testbed.py does not have, kept apart from it:

- ``ManyHosts``: hundreds of worker "hosts" as addresses of ONE network namespace, served by
  one sshd on 0.0.0.0, each address individually refused, black-holed or stalled by iptables
  rules that are swapped in one ``iptables-restore`` (cheap enough to flap 50 hosts at once).
  Its launcher context is the bed's: files-only name resolution, nothing leaves the machine.
- ``wrap()``: extra bind mounts inside a launcher context (a resolv.conf pointing at a
  black hole, a private /tmp, a read-only HOME) and a drop to an unprivileged user who can
  still reach the Python interpreter (which may live under root's 0700 home).
- Running mpiwait through a bed and checking every run for key material and tracebacks.
- Small /proc readers: process-group members, fd and thread counts, TCP connection states.

Addresses: ManyHosts sets use 10.124.<4k>.0/22 (k picked free under the bed's lock), so they
never collide with TestBed's 10.123.<index>.0/24. Namespace and link names start with "mh" and
carry the owner's pid (base 36): ``cleanup_stale()`` removes sets whose owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import testbed

REPO = Path(__file__).resolve().parent.parent
SSH_BANNER = b"SSH-2.0-OpenSSH_9.2\r\n"
PREFIX = "mh"
SUBNET = "10.124"
STAGE_DIR = Path("/run/mpiwait-testbed-stage")  # an empty mount point, used only inside mount ns
# Where the checkout and its venv stay reachable when a bind hides them (a clone under /tmp, with
# the test binding a private directory over /tmp). Also only ever mounted on inside a mount ns.
PY_STAGE_DIR = Path("/run/mpiwait-testbed-py")
FIRST_OFFSET = 10

# ---------------------------------------------------------------------------------------------
# running mpiwait


# Every private key (and passphrase) a test made: no output of any run may contain any of them.
_SECRETS: set[str] = set()


def key_secret_lines(private: Path | str) -> list[str]:
    """The base64 body lines of a private key file."""
    out = []
    for line in Path(private).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("-----") and ":" not in line and len(line) >= 16:
            out.append(line)
    return out


def register_secret(*values: str) -> None:
    _SECRETS.update(v for v in values if v)


def register_key(private: Path | str) -> None:
    with contextlib.suppress(OSError):
        register_secret(*key_secret_lines(private))


def check_output_hygiene(text: str, what: object = "") -> None:
    """No traceback and no secret that any test registered, anywhere in ``text``."""
    assert "Traceback (most recent call last)" not in text, f"traceback in the output\n{what}"
    for secret in _SECRETS:
        assert secret not in text, f"secret material in the output\n{what}"


def mpiwait_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "mpiwait", *args]


def mpiwait_env(**extra: str) -> dict[str, str]:
    """This environment minus anything that configures mpiwait, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MPIWAIT_") and k != "K_MPI_JOB_ROLE"
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Never the real /dev/termination-log, should this machine have one.
    env["MPIWAIT_TERMINATION_LOG"] = "/nonexistent/mpiwait-test/termination-log"
    env.update(extra)
    return env


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    elapsed: float  # from start to exit, as the test saw it
    pid: int

    def __str__(self) -> str:
        return (
            f"argv: {shlex.join(self.argv)}\nexit {self.returncode} after {self.elapsed:.2f}s\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()


class Launch:
    """A running mpiwait (started through a bed's launcher context)."""

    def __init__(self, proc: subprocess.Popen[str], argv: list[str], started: float) -> None:
        self.proc = proc
        self.argv = argv
        self.started = started
        self._readers: list[threading.Thread] = []  # once wait_for() has started reading
        self._out: list[str] = []
        self._err: list[str] = []
        self._err_done = False
        self._cond = threading.Condition()

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        """Until a line of mpiwait's stderr matches ``pattern`` (a regex); returns that line.
        From the first call on, threads read stdout and stderr (finish() collects them)."""
        rx = re.compile(pattern)
        self._read_in_threads()
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self._err:
                    if rx.search(line):
                        return line
                left = deadline - time.monotonic()
                if self._err_done or left <= 0:
                    why = "mpiwait ended" if self._err_done else f"{timeout}s passed"
                    raise AssertionError(
                        f"{why} without a stderr line matching {pattern!r}:\n{''.join(self._err)}"
                    )
                self._cond.wait(left)

    def _read_in_threads(self) -> None:
        if self._readers:
            return

        def read(stream: Any, into: list[str], is_err: bool) -> None:
            for line in stream:
                with self._cond:
                    into.append(line)
                    self._cond.notify_all()
            if is_err:
                with self._cond:
                    self._err_done = True
                    self._cond.notify_all()

        self._readers = [
            threading.Thread(target=read, args=(self.proc.stdout, self._out, False), daemon=True),
            threading.Thread(target=read, args=(self.proc.stderr, self._err, True), daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _communicate(self, timeout: float) -> tuple[str, str]:
        if not self._readers:
            return self.proc.communicate(timeout=timeout)
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is not None:
                for t in self._readers:
                    t.join(10)
        return "".join(self._out), "".join(self._err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_exec(self, timeout: float = 10.0) -> None:
        """Until the launcher wrapper has exec'd into python -m mpiwait (same pid)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"mpiwait" in cmdline(self.pid) and b"-m" in cmdline(self.pid):
                return
            if self.proc.poll() is not None:
                return
            time.sleep(0.005)
        raise AssertionError(f"pid {self.pid} never became mpiwait")

    def finish(self, timeout: float = 60.0) -> Result:
        try:
            out, err = self._communicate(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self._communicate(30)
            raise AssertionError(
                f"mpiwait still running after {timeout}s\n{shlex.join(self.argv)}\n{out}\n{err}"
            ) from None
        result = Result(
            self.argv, self.proc.returncode, out, err, time.monotonic() - self.started, self.pid
        )
        check_output_hygiene(out + err, result)
        return result


def start(
    ctx: Any,
    args: Sequence[str],
    *,
    command: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    wrapper: Sequence[str] = (),
    **kw: Any,
) -> Launch:
    """Start ``python -m mpiwait ARGS [-- COMMAND]`` in ``ctx``'s launcher context (a TestBed or
    ManyHosts; ``kw`` are its popen keywords). ``wrapper`` (from wrap()) goes in front."""
    key = getattr(ctx, "key_path", None)
    if key is not None:
        register_key(key)
    argv = [*wrapper, *mpiwait_argv(*args, *(["--", *command] if command else []))]
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("text", True)
    began = time.monotonic()
    proc = ctx.popen(argv, env=dict(env) if env is not None else mpiwait_env(), **kw)
    return Launch(proc, argv, began)


def run(ctx: Any, args: Sequence[str], *, timeout: float = 60.0, **kw: Any) -> Result:
    return start(ctx, args, **kw).finish(timeout)


def summary(result: Result) -> list[str]:
    """The deadline/interrupt summary block of a text log: its head line and group lines."""
    lines = result.lines
    for k, line in enumerate(lines):
        if re.match(r"mpiwait: (timed out|interrupted by|failed) after", line):
            block = [line]
            for more in lines[k + 1 :]:
                if not more.startswith("mpiwait:   "):
                    break
                block.append(more)
            return block
    return []


# ---------------------------------------------------------------------------------------------
# extra mounts and an unprivileged user, inside a launcher context


def _blocked_ancestor(path: Path) -> Path | None:
    """The outermost directory on the way to ``path`` that others cannot traverse."""
    parts = path.resolve().parts
    for n in range(1, len(parts) + 1):
        p = Path(*parts[:n])
        try:
            if not p.stat().st_mode & 0o001:
                return p
        except OSError:
            return None
    return None


def _python_paths() -> list[Path]:
    """What `python -m mpiwait` needs to read: the interpreter's trees, site-packages, repo."""
    wanted = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent, REPO}
    wanted |= {Path(p) for p in sys.path if p and Path(p).is_dir()}
    resolved = sorted({p.resolve() for p in wanted}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in resolved:
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out


def wrap(
    *,
    binds: Sequence[tuple[Path | str, Path | str]] = (),
    readonly: Sequence[Path | str] = (),
    user: str | None = None,
    cwd: Path | str | None = None,
    home: Path | str | None = None,
) -> list[str]:
    """argv prefix for a bed's ``run``/``popen`` (which run it as root in a private mount
    namespace): bind ``binds`` (src → dst, sources staged first, so a dst may hide another's
    source), remount ``readonly`` paths read-only, then ``cd cwd`` and, with ``user``, drop to
    that user (HOME ``home`` or theirs) after making the Python interpreter reachable for them."""
    lines = ["set -e", f"mount -t tmpfs -o mode=0700,size=1m mwstage {STAGE_DIR}"]
    staged: list[tuple[str, Path]] = []

    def stage(src: Path) -> str:
        slot = f"{STAGE_DIR}/s{len(staged)}"
        if src.is_dir():
            lines.append(f"mkdir -p {slot}")
        else:
            lines.append(f": > {slot}")
        lines.append(f"mount --bind {shlex.quote(str(src))} {slot}")
        staged.append((slot, src))
        return slot

    # The checkout (the source `-m mpiwait` runs) and the venv must survive the binds: where a bind
    # destination hides one of them, bind it first to a place of its own, and run from there.
    dsts = [Path(dst) for _, dst in binds]
    hidden = [
        p
        for p in sorted({REPO, Path(sys.prefix)}, key=lambda p: len(p.parts))
        if any(p == d or d in p.parents for d in dsts)
    ]
    hidden = [p for p in hidden if not any(q in p.parents for q in hidden)]
    moved: dict[Path, str] = {}
    if hidden:
        lines.append(f"mount -t tmpfs -o mode=0755,size=1m mwpy {PY_STAGE_DIR}")
        for k, p in enumerate(hidden):
            moved[p] = f"{PY_STAGE_DIR}/p{k}"
            lines.append(f"mkdir -p {moved[p]}")
            lines.append(f"mount --bind {shlex.quote(str(p))} {moved[p]}")

    def relocate(path: Path) -> str:
        for old, new in moved.items():
            if path == old or old in path.parents:
                return new + "/" + str(path.relative_to(old)) if path != old else new
        return str(path)

    reach: dict[Path, list[Path]] = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        for p in _python_paths():
            a = _blocked_ancestor(p)
            if a is not None and pw.pw_uid != a.stat().st_uid:
                reach.setdefault(a, []).append(p)
    reach_slots = {a: stage(a) for a in reach}
    bind_slots = [(stage(Path(src).resolve()), Path(dst)) for src, dst in binds]
    for a, paths in reach.items():
        lines.append(f"mount -t tmpfs -o mode=0755,size=1m mwreach {shlex.quote(str(a))}")
        for p in paths:
            rel = p.relative_to(a)
            lines.append(f"mkdir -p {shlex.quote(str(p))}")
            lines.append(
                f"mount --bind {reach_slots[a]}/{shlex.quote(str(rel))} {shlex.quote(str(p))}"
            )
    for slot, dst in bind_slots:
        lines.append(f"mount --bind {slot} {shlex.quote(str(dst))}")
    for p in readonly:
        q = shlex.quote(str(p))
        lines.append(f"mount --bind {q} {q}")
        lines.append(f"mount -o remount,bind,ro {q}")
    lines.append(f"umount -l {STAGE_DIR}")
    if moved:
        lines.append(
            f"export PYTHONPATH={shlex.quote(relocate(REPO))}${{PYTHONPATH:+:$PYTHONPATH}}"
        )
        old_python, new_python = (
            shlex.quote(sys.executable),
            shlex.quote(relocate(Path(sys.executable))),
        )
        lines.append(
            f'for a do shift; [ "$a" = {old_python} ] && a={new_python}; set -- "$@" "$a"; done'
        )
    if cwd is not None:
        lines.append(f"cd {shlex.quote(str(cwd))}")
    drop: list[str] = []
    if user is not None:
        pw = pwd.getpwnam(user)
        drop = [
            "setpriv",
            f"--reuid={pw.pw_uid}",
            f"--regid={pw.pw_gid}",
            "--init-groups",
            "env",
            f"HOME={home or pw.pw_dir}",
            f"USER={pw.pw_name}",
            f"LOGNAME={pw.pw_name}",
        ]
    lines.append('exec "$@"')
    STAGE_DIR.mkdir(mode=0o700, exist_ok=True)
    if moved:
        PY_STAGE_DIR.mkdir(mode=0o755, exist_ok=True)
    return ["sh", "-c", "\n".join(lines), "mpiwait-test-wrap", *drop]


def dns_blackhole_files(workdir: Path, nameserver: str, *, timeout: int = 30) -> list[tuple]:
    """Bind pairs for a launcher whose lookups of unknown names go to ``nameserver`` (an address
    in a namespace of ours that drops port 53) and hang ``timeout`` s there."""
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        nss = Path("/etc/nsswitch.conf").read_text().splitlines()
    except OSError:
        nss = ["passwd: files", "group: files"]
    nss = [ln for ln in nss if not re.match(r"^\s*hosts\s*:", ln)] + ["hosts: files dns"]
    nsswitch = workdir / "nsswitch.dns.conf"
    nsswitch.write_text("\n".join(nss) + "\n")
    resolv = workdir / "resolv.blackhole.conf"
    resolv.write_text(f"nameserver {nameserver}\noptions timeout:{timeout} attempts:1\n")
    for f in (nsswitch, resolv):
        f.chmod(0o644)
    return [(nsswitch, "/etc/nsswitch.conf"), (resolv, "/etc/resolv.conf")]


# ---------------------------------------------------------------------------------------------
# /proc


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def related_pids(pid: int) -> list[int]:
    """Live (non-zombie) processes in ``pid``'s process group or whose parent is ``pid``."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == pid:
            continue
        f = _stat_fields(int(entry.name))
        if f is None or f[0] == "Z":
            continue
        ppid, pgrp = int(f[1]), int(f[2])
        if pgrp == pid or ppid == pid:
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    f = _stat_fields(pid)
    return f is not None and f[0] != "Z"


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def tcp_states(pid: int, port: int) -> list[str]:
    """States (hex, "01" = ESTABLISHED) of TCP sockets on local ``port`` in pid's netns."""
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    want = f":{port:04X}"
    return [p[3] for p in (ln.split() for ln in lines) if len(p) > 3 and p[1].endswith(want)]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# worker-side helpers for a TestBed


def ns_iptables(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return testbed._sh(["ip", "netns", "exec", ns, "iptables", "-w", *args], check=check)


def rule_packets(ns: str, chain: str = "INPUT") -> list[int]:
    """Packet counters of ``chain``'s rules in namespace ``ns``, in order."""
    out = ns_iptables(ns, "-L", chain, "-v", "-x", "-n").stdout.splitlines()[2:]
    return [int(line.split()[0]) for line in out if line.strip()]


def ns_pid(bed: testbed.TestBed, i: int) -> int:
    pids = testbed._netns_pids(bed.hosts[i].ns)
    assert pids, f"nothing runs in {bed.hosts[i].ns}"
    return pids[0]


_BANNER_CODE = """# mpiwait-test banner-then-silence listener
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1024)
held = []
while True:
    c, _ = s.accept()
    c.sendall(BANNER)
    held.append(c)
""".replace("BANNER", repr(SSH_BANNER))


def start_banner_listener(bed: testbed.TestBed, i: int) -> subprocess.Popen[Any]:
    """On worker i (sshd stopped): accept, send an SSH banner, then say nothing more."""
    h = bed.hosts[i]
    p = bed._spawn(
        bed.ns_exec_cmd(i, [sys.executable, "-c", _BANNER_CODE, h.addr, str(h.port)]),
        bed.workdir / f"banner.{i}.log",
    )
    bed._listeners[i] = p  # so start_sshd refuses while it holds the port, and down() kills it
    bed.wait_listening([i], timeout=10)
    return p


def set_max_startups(bed: testbed.TestBed, i: int, value: str) -> None:
    """Restart worker i's sshd with ``MaxStartups value``."""
    cfg = bed.hosts[i].sshd_config
    text = re.sub(r"(?m)^MaxStartups .*$", f"MaxStartups {value}", cfg.read_text())
    bed.stop_sshd(i)
    cfg.write_text(text)
    bed.start_sshd(i)


def slow_link(bed: testbed.TestBed, i: int, rate: str = "8kbit") -> None:
    """Shape both directions of worker i's link to ``rate`` (an SSH handshake then takes s)."""
    h = bed.hosts[i]
    tbf = ["tbf", "rate", rate, "burst", "1600", "latency", "30s"]
    testbed._sh(["tc", "qdisc", "replace", "dev", h.veth, "root", *tbf])
    testbed._sh(
        ["ip", "netns", "exec", h.ns, "tc", "qdisc", "replace", "dev", "eth0", "root", *tbf]
    )


def unslow_link(bed: testbed.TestBed, i: int) -> None:
    h = bed.hosts[i]
    testbed._sh(["tc", "qdisc", "del", "dev", h.veth, "root"], check=False)
    testbed._sh(
        ["ip", "netns", "exec", h.ns, "tc", "qdisc", "del", "dev", "eth0", "root"], check=False
    )


# ---------------------------------------------------------------------------------------------
# ManyHosts


def _b36(n: int) -> str:
    return testbed._b36(n)


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
        with testbed._global_lock():
            _cleanup_stale_locked()
            used = set()
            out = testbed._sh(["ip", "-o", "-4", "addr", "show"], check=False).stdout
            for m in re.finditer(rf"\binet {re.escape(SUBNET)}\.(\d+)\.", out):
                used.add(int(m.group(1)) // 4)
            free = [k for k in range(64) if k not in used]
            if not free:
                raise testbed.BedError(f"no free {SUBNET}.X.0/22")
            self.block = 4 * free[0]
            self.set_id = f"{PREFIX}{_b36(os.getpid())}-{free[0]}"
            testbed._sh(
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
        testbed._sh(["ip", "-n", self.ns, "-batch", "-"], input="\n".join(batch) + "\n")
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
        testbed._sh([*keygen, "-C", f"{self.set_id}-client", "-f", self.key_path])
        host_key = self.workdir / "ssh_host_ed25519_key"
        if not host_key.exists():
            testbed._sh([*keygen, "-C", f"{self.set_id}-host", "-f", host_key])
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
            "PidFile none\n"
            "UsePAM no\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\n"
            "StrictModes no\n"
            f"AuthorizedKeysFile {auth}\n"
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
                env=self._env(None),
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
        testbed._sh(
            ["ip", "netns", "exec", self.ns, "iptables-restore", "-w", "--noflush"],
            input="\n".join(rules) + "\n",
        )

    # ---- launcher context -----------------------------------------------------------------

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
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
        kw["env"] = self._env(kw.get("env"))
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(self.launcher_cmd(argv), **kw)
        self._launched = [q for q in self._launched if q.poll() is None] + [p]
        return p

    def down(self) -> None:
        if self._down_done:
            return
        for p in [*self._launched, *([self._sshd] if self._sshd else [])]:
            testbed._kill_group(p, grace=1.0)
        if self.set_id:
            with testbed._global_lock():
                _teardown(self.set_id)
        self._down_done = True


def _teardown(set_id: str) -> None:
    ns, veth = f"{set_id}n", f"{set_id}v"
    for _ in range(3):
        pids = (testbed._netns_pids(ns) if ns in testbed._list_ns() else []) + testbed._tagged_pids(
            set_id
        )
        if not testbed._kill_pids(pids):
            break
        time.sleep(0.05)
    testbed._sh(
        ["ip", "-force", "-batch", "-"], input=f"link del {veth}\nnetns del {ns}\n", check=False
    )


def _cleanup_stale_locked() -> list[str]:
    """Remove many-hosts sets whose owner process is gone (call under the bed lock)."""
    ids = set()
    for name in testbed._list_ns() + testbed._list_links():
        m = re.match(rf"^({PREFIX}([0-9a-z]+)-\d+)[nv]$", name)
        if m and not Path(f"/proc/{int(m.group(2), 36)}").exists():
            ids.add(m.group(1))
    for set_id in sorted(ids):
        _teardown(set_id)
    return sorted(ids)


def cleanup_stale() -> list[str]:
    if os.geteuid() != 0:
        return []
    with testbed._global_lock():
        return _cleanup_stale_locked()
