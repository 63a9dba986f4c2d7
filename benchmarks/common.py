"""What every scenario needs: the environment processes under test run in, a measured run (wall,
CPU and peak RSS from outside), statistics, and the counters read from outside the client
(iptables SYN counters, sshd's log, strace of /etc/hosts opens)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import testbed  # noqa: E402, F401  (the test bed library, tests/testbed/: used from here)

# The interpreter running the harness runs mpiwait too (never the pyenv shim on PATH, which alone
# costs ~80 ms a start and would bury what is measured). Not resolved through symlinks: a venv's
# python is a symlink to the base interpreter, and only the unresolved path finds the venv's
# site-packages (paramiko, click, tenacity).
PY = os.path.abspath(sys.executable)
PAGE = os.sysconf("SC_PAGE_SIZE")


def bench_env(cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of every process under test.

    mpiwait runs from this checkout (PYTHONPATH) as an installed package would: with compiled
    bytecode. This machine sets PYTHONDONTWRITEBYTECODE, which would make every start recompile
    mpiwait's modules (~25 ms); the bytecode goes to ``cache`` (under benchmarks/results/)
    instead of the source tree. MPIWAIT_* and K_MPI_JOB_ROLE from the caller's environment are
    dropped so that every run measures the defaults.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MPIWAIT_") and k not in ("K_MPI_JOB_ROLE", "PYTHONDONTWRITEBYTECODE")
    }
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    # `python -m mpiwait` must import the package PYTHONPATH names (--baseline-path), not the
    # one in the working directory: benchmarks/run runs from the checkout
    env["PYTHONSAFEPATH"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    env["LC_ALL"] = "C.UTF-8"
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------------------------
# statistics


@dataclass(frozen=True)
class Stat:
    """A figure over repetitions: median with min and max (and the p95 by nearest rank)."""

    median: float
    min: float
    max: float
    p95: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Stat | None:
        vals = sorted(v for v in values if v is not None and not math.isnan(v))
        if not vals:
            return None
        rank = max(1, math.ceil(0.95 * len(vals)))
        return cls(statistics.median(vals), vals[0], vals[-1], vals[rank - 1], len(vals))

    def as_dict(self) -> dict[str, float]:
        return {
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "p95": self.p95,
            "n": self.n,
        }


# --------------------------------------------------------------------------------------------
# measured runs


def stat_dict(values: Iterable[float | None]) -> dict[str, float] | None:
    """Stat.of(values) as a dict for results.json, or None when there is no value."""
    s = Stat.of(values)
    return s.as_dict() if s else None


def stat_dicts(runs: Sequence[dict], keys: Iterable[str]) -> dict[str, dict[str, float] | None]:
    """Each key's stat_dict over these runs' values of it."""
    return {key: stat_dict(r[key] for r in runs) for key in keys}


@dataclass
class RunResult:
    argv: list[str]
    rc: int | None  # None: killed at the timeout
    start: float  # time.time() just before the spawn
    wall: float  # spawn to exit (reaped), seconds
    cpu: float  # user + system seconds of the whole process tree (children reaped by it)
    maxrss_kb: int  # ru_maxrss: the largest single process of the tree
    peak_tree_rss_kb: int  # sampled sum over the tree's processes (0 if not sampled)
    stdout: str = ""
    stderr: str = ""

    @property
    def timed_out(self) -> bool:
        return self.rc is None

    @property
    def peak_rss_kb(self) -> int:
        return max(self.maxrss_kb, self.peak_tree_rss_kb)


def _session_rss_kb(sid: int) -> int:
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after the ")": state ppid pgrp session ... rss is field 24 overall, 22nd here
        if len(fields) > 21 and int(fields[3]) == sid:
            total += int(fields[21]) * PAGE // 1024
    return total


class Measured:
    """A process run in a session of its own and measured from outside (see run_measured)."""

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: dict[str, str],
        sample_rss: float = 0.0,
        cwd: Path | None = None,
    ) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self.sample_rss = sample_rss
        self._out = tempfile.TemporaryFile()  # noqa: SIM115  (closed by wait())
        self._err = tempfile.TemporaryFile()  # noqa: SIM115
        self._box: dict[str, object] = {}
        self._done = threading.Event()
        self.start = time.time()
        self._t0 = time.perf_counter()
        self.p = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        _, status, usage = os.wait4(self.p.pid, 0)
        self._box["t"] = time.perf_counter()
        self._box["status"], self._box["usage"] = status, usage
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float) -> RunResult:
        peak = 0
        deadline = time.perf_counter() + timeout
        killed = False
        while not self._done.is_set():
            left = deadline - time.perf_counter()
            if left <= 0:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.p.pid, signal.SIGKILL)
                killed = True
                self._done.wait()
                break
            if self.sample_rss > 0:
                peak = max(peak, _session_rss_kb(self.p.pid))
                self._done.wait(min(left, self.sample_rss))
            else:
                self._done.wait(left)
        # whatever the tree left behind in its session (an orted, a stuck ssh)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.p.pid, signal.SIGKILL)
        status = self._box["status"]
        usage: resource.struct_rusage = self._box["usage"]  # type: ignore[assignment]
        self.p.returncode = os.waitstatus_to_exitcode(status)  # type: ignore[arg-type]
        outs = []
        for f in (self._out, self._err):
            f.seek(0)
            outs.append(f.read().decode(errors="replace"))
            f.close()
        return RunResult(
            argv=self.argv,
            rc=None if killed else self.p.returncode,
            start=self.start,
            wall=float(self._box["t"]) - self._t0,  # type: ignore[arg-type]
            cpu=usage.ru_utime + usage.ru_stime,
            maxrss_kb=usage.ru_maxrss,
            peak_tree_rss_kb=peak,
            stdout=outs[0],
            stderr=outs[1],
        )


def run_measured(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: dict[str, str],
    timeout: float,
    sample_rss: float = 0.0,
    cwd: Path | None = None,
) -> RunResult:
    """Run ``argv`` in a session of its own; measure it from outside.

    CPU and ru_maxrss come from wait4() of the process: they include every descendant it reaped
    (ssh processes under a shell script, mpiwait's threads), nothing else (not sshd). With
    ``sample_rss`` > 0 the summed RSS of the session's processes is sampled that often, for
    methods made of many processes at once (xargs -P 32 ssh). On timeout the session is killed.
    """
    return Measured(argv, env=env, sample_rss=sample_rss, cwd=cwd).wait(timeout)


# --------------------------------------------------------------------------------------------
# counters read from outside the client


def strace_prefix(trace: Path) -> list[str]:
    """Prefix that records every openat of the traced tree with a timestamp.

    Name lookups go through a hosts file here (no DNS server is ever asked), so they cannot be
    counted on the wire; but glibc's files backend opens /etc/hosts once per lookup
    (getaddrinfo, gethostbyname, getent), so its opens are the lookups, counted from outside
    the client and the same way for every method. connect() calls give the times of the TCP
    connects (their count per host comes from iptables). --seccomp-bpf stops only on those two
    calls: the rest of the traced processes run at full speed.
    """
    return [
        "strace",
        "-f",
        "-qq",
        "--seccomp-bpf",
        "-e",
        "trace=openat,connect",
        "-e",
        "signal=none",
        "-ttt",
        "-o",
        str(trace),
        "--",
    ]


_HOSTS_OPEN = re.compile(r"^\d+\s+(\d+\.\d+)\s+openat\([^,]*,\s*\"/etc/hosts\"")


def hosts_opens(trace: Path) -> list[float]:
    """Timestamps (time.time()) of every open of /etc/hosts in an strace_prefix() trace."""
    out = []
    with contextlib.suppress(FileNotFoundError), open(trace, errors="replace") as f:
        for line in f:
            m = _HOSTS_OPEN.match(line)
            if m:
                out.append(float(m.group(1)))
    return out


_CONNECT = re.compile(
    r"^\d+\s+(\d+\.\d+)\s+connect\(\d+,\s*\{sa_family=AF_INET6?,\s*sin6?_port=htons\((\d+)\)"
)


def connects(trace: Path, port: int = 22) -> list[float]:
    """Timestamps of every connect() to ``port`` in an strace_prefix() trace."""
    out = []
    with contextlib.suppress(FileNotFoundError), open(trace, errors="replace") as f:
        for line in f:
            m = _CONNECT.match(line)
            if m and int(m.group(2)) == port:
                out.append(float(m.group(1)))
    return out


def peak_per_second(stamps: Sequence[float], window: float = 1.0) -> int:
    """Most events in any sliding window of ``window`` seconds."""
    s = sorted(stamps)
    best, j = 0, 0
    for i, t in enumerate(s):
        while s[j] < t - window + 1e-9:
            j += 1
        best = max(best, i - j + 1)
    return best


def have_strace() -> bool:
    return subprocess.run(["sh", "-c", "command -v strace"], capture_output=True).returncode == 0


@dataclass
class SynCounter:
    """Counts TCP connection attempts (SYNs) to port 22 per destination address, inside one
    network namespace, with iptables counters: a refused connect counts as well as an accepted
    one (the SYN passes INPUT before the stack answers it)."""

    ns: str
    addrs: Sequence[str]
    port: int = 22
    chain: str = "MWSYN"
    ok: bool = field(default=False, init=False)

    def _ipt(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cp = subprocess.run(
            ["ip", "netns", "exec", self.ns, "iptables", "-w", *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if check and cp.returncode != 0:
            raise RuntimeError(f"iptables {' '.join(args)}: {cp.stderr.strip()}")
        return cp

    def install(self) -> bool:
        try:
            self._ipt("-N", self.chain)
            self._ipt(
                "-I", "INPUT", "-p", "tcp", "--dport", str(self.port), "--syn", "-j", self.chain
            )
            batch = "".join(f"-A {self.chain} -d {a}/32 -j RETURN\n" for a in self.addrs)
            # one iptables-restore instead of an exec per address
            cp = subprocess.run(
                ["ip", "netns", "exec", self.ns, "iptables-restore", "-w", "--noflush"],
                input=f"*filter\n{batch}COMMIT\n",
                capture_output=True,
                text=True,
                timeout=30,
            )
            if cp.returncode != 0:
                raise RuntimeError(cp.stderr.strip())
        except (OSError, RuntimeError):
            return False
        self.ok = True
        return True

    def zero(self) -> None:
        if self.ok:
            self._ipt("-Z", self.chain)

    def read(self) -> dict[str, int]:
        """SYNs per destination address since the last zero()."""
        if not self.ok:
            return {}
        cp = self._ipt("-L", self.chain, "-v", "-x", "-n")
        counts: dict[str, int] = {}
        for line in cp.stdout.splitlines()[2:]:
            parts = line.split()
            if len(parts) >= 8 and parts[2] == "RETURN":
                counts[parts[8].split("/")[0]] = int(parts[0])
        return counts


_CONN = re.compile(r"Connection from (\S+) port (\d+) on (\S+) port \d+")
_ACCEPTED = re.compile(r"Accepted publickey for \S+ from (\S+) port (\d+)")


def sshd_logins(log_text: str) -> tuple[int, dict[str, int]]:
    """Logins in an sshd log (LogLevel VERBOSE): the total, and per destination address when
    the log tells (a connection's "on ADDR" line joined to its login by the client port)."""
    # A client port can serve two connections at once to different addresses: keep, per
    # port, the destinations not yet claimed by a login, oldest first.
    dest_of: dict[str, list[str]] = {}
    per: dict[str, int] = {}
    total = 0
    for line in log_text.splitlines():
        m = _CONN.search(line)
        if m:
            dest_of.setdefault(m.group(2), []).append(m.group(3))
            continue
        m = _ACCEPTED.search(line)
        if m:
            total += 1
            pending = dest_of.get(m.group(2))
            if pending:
                dest = pending.pop(0)
                per[dest] = per.get(dest, 0) + 1
    return total, per


def sshd_per_address(log_text: str) -> tuple[dict[str, int], dict[str, int]]:
    """Connections and logins per destination address in an sshd log (LogLevel VERBOSE); a
    connection without a login closed before authenticating."""
    dest_of: dict[str, list[str]] = {}
    connections: dict[str, int] = {}
    logins: dict[str, int] = {}
    for line in log_text.splitlines():
        m = _CONN.search(line)
        if m:
            dest_of.setdefault(m.group(2), []).append(m.group(3))
            connections[m.group(3)] = connections.get(m.group(3), 0) + 1
            continue
        m = _ACCEPTED.search(line)
        if m and dest_of.get(m.group(2)):
            dest = dest_of[m.group(2)].pop(0)
            logins[dest] = logins.get(dest, 0) + 1
    return connections, logins


class LogTail:
    """Reads what a log file gained since the last mark (sshd appends; nothing truncates)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.mark()

    def mark(self) -> None:
        try:
            self.offset = self.path.stat().st_size
        except FileNotFoundError:
            self.offset = 0

    def settle(self, quiet: float = 1.0, most: float = 15.0) -> None:
        """Until the log has not grown for ``quiet`` s (at most ``most`` s): sshd logs a
        connection when it gets round to accepting it, which can be after the client is gone."""
        size, still, deadline = -1, time.monotonic(), time.monotonic() + most
        while time.monotonic() < deadline:
            now_size = self.path.stat().st_size if self.path.exists() else 0
            if now_size != size:
                size, still = now_size, time.monotonic()
            elif time.monotonic() - still >= quiet:
                return
            time.sleep(0.1)

    def read(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""


def launches(starts: Path, exits: Path) -> list[tuple[float, int]]:
    """Each start of the real command (rec.sh's log) with how its container ended (job.sh's
    log: the first exit after that start; -1 if none, e.g. killed at the timeout)."""

    def rows(path: Path) -> list[list[str]]:
        with contextlib.suppress(FileNotFoundError):
            return [line.split() for line in path.read_text().splitlines() if line.strip()]
        return []

    ends = [(float(r[0]), int(r[1])) for r in rows(exits)]
    out = []
    for r in rows(starts):
        t = float(r[0])
        after = [rc for e, rc in ends if e >= t]
        out.append((t, after[0] if after else -1))
    return out


def uptime_load() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def log(msg: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()
