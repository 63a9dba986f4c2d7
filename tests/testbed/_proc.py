"""Running mpiwait (or anything) in a launcher context, and the one way to synchronise with it:
``Proc.wait_for`` (until a line appears). Also the key-leak check every run gets, and /proc
readers."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _jsonlog

REPO = Path(__file__).resolve().parents[2]


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


def mpiwait_argv(*args: str, python: Sequence[str] = ()) -> list[str]:
    """``python [PYTHON OPTIONS] -m mpiwait ARGS`` with this interpreter."""
    return [sys.executable, *python, "-m", "mpiwait", *args]


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


class Proc:
    """A running process (mpiwait through a launcher context, scripts/demo, ...) whose output is
    read as it comes. Its one synchronisation primitive is ``wait_for``: until a line appears."""

    def __init__(
        self, proc: subprocess.Popen[str], argv: list[str], started: float, *, read: bool = True
    ) -> None:
        """``read``: read its output from now on (default), not only from the first wait_for()
        or finish(): a process whose pipe fills blocks on its next write, and a JSON run of
        hundreds of hosts fills one while the test is busy with another process."""
        self.proc = proc
        self.argv = argv
        self.started = started
        self._readers: list[threading.Thread] = []  # once wait_for() has started reading
        self._out: list[str] = []
        self._err: list[str] = []
        self._done = {"stdout": proc.stdout is None, "stderr": proc.stderr is None}
        self._cond = threading.Condition()
        self.json_log = False  # start() sets it: finish() then validates the JSON records
        if read:
            self._read_in_threads()

    def wait_for(self, pattern: str, timeout: float = 30.0, *, stream: str = "stderr") -> str:
        """Until a line of ``stream`` ("stderr" or "stdout") matches ``pattern`` (a regex);
        returns that line. From the first call on, threads read both streams (finish() collects
        them). Fails (AssertionError) when the process ends or ``timeout`` passes first."""
        rx = re.compile(pattern)
        lines = self._err if stream == "stderr" else self._out
        self._read_in_threads()
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in lines:
                    if rx.search(line):
                        return line
                left = deadline - time.monotonic()
                if self._done[stream] or left <= 0:
                    why = "the process ended" if self._done[stream] else f"{timeout}s passed"
                    raise AssertionError(
                        f"{why} without a {stream} line matching {pattern!r}:\n{''.join(lines)}"
                    )
                self._cond.wait(left)

    def __str__(self) -> str:
        with self._cond:
            out, err = "".join(self._out), "".join(self._err)
        return f"argv: {shlex.join(self.argv)}\n--- stdout so far\n{out}--- stderr so far\n{err}"

    def lines(self, stream: str = "stderr") -> list[str]:
        """The lines of ``stream`` read so far (once wait_for() or finish() reads)."""
        with self._cond:
            return list(self._err if stream == "stderr" else self._out)

    def _read_in_threads(self) -> None:
        if self._readers:
            return

        def read(stream: Any, into: list[str], name: str) -> None:
            for line in stream:
                with self._cond:
                    into.append(line)
                    self._cond.notify_all()
            with self._cond:
                self._done[name] = True
                self._cond.notify_all()

        self._readers = [
            threading.Thread(target=read, args=(s, into, name), daemon=True)
            for s, into, name in (
                (self.proc.stdout, self._out, "stdout"),
                (self.proc.stderr, self._err, "stderr"),
            )
            if s is not None
        ]
        for t in self._readers:
            t.start()

    def _communicate(self, timeout: float) -> tuple[str, str]:
        if not self._readers:
            out, err = self.proc.communicate(timeout=timeout)
            return out or "", err or ""
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
            running = still_running(self.proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self._communicate(30)
            raise AssertionError(
                f"still running after {timeout}s\n{shlex.join(self.argv)}\n{out}\n{err}\n"
                f"what was running then:\n{running}"
            ) from None
        result = Result(
            self.argv, self.proc.returncode, out, err, time.monotonic() - self.started, self.pid
        )
        check_output_hygiene(out + err, result)
        if self.json_log:
            _jsonlog.check(out, err, result)
        return result


def start(
    ctx: Any,
    args: Sequence[str],
    *,
    command: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    wrapper: Sequence[str] = (),
    python: Sequence[str] = (),
    read: bool = True,
    **kw: Any,
) -> Proc:
    """Start ``python -m mpiwait ARGS [-- COMMAND]`` in ``ctx``'s launcher context: a TestBed
    or ManyHosts (``kw`` are its popen keywords), or, for a Lab or None, right here as this
    user in a session of its own (``kw`` are subprocess.Popen's). ``wrapper`` (from wrap())
    goes in front; ``python`` are interpreter options (e.g. ``["-X", "importtime"]``); ``read``
    as Proc's. Every key ``ctx`` holds now (its key_path, a Lab's keys) must never show in the
    output."""
    for key in [getattr(ctx, "key_path", None), *getattr(ctx, "keys", ())]:
        if key is not None:
            register_key(key)
    argv = [*wrapper, *mpiwait_argv(*args, *(["--", *command] if command else []), python=python)]
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("text", True)
    popen = getattr(ctx, "popen", None)
    if popen is None:
        popen = subprocess.Popen
        kw.setdefault("start_new_session", True)  # finish() kills the whole group on timeout
    began = time.monotonic()
    env = dict(env) if env is not None else mpiwait_env()
    proc = Proc(popen(argv, env=env, **kw), argv, began, read=read)
    proc.json_log = _jsonlog.asks_for_json(args, env)
    return proc


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


# An MPI's daemons on the workers: started by sshd, so not in the launcher's process group.
MPI_DAEMONS = ("prted", "orted", "hydra_pmi_proxy", "pmi_proxy")


def still_running(pgid: int) -> str:
    """The processes of process group ``pgid`` and the MPI daemons anywhere, one "pid ppid
    state command" line each: where a launch that never ended was stuck."""
    lines = []
    for entry in os.scandir("/proc"):
        f = _stat_fields(int(entry.name)) if entry.name.isdigit() else None
        if f is None:
            continue
        argv = cmdline(int(entry.name)).rstrip(b"\0").split(b"\0")
        if int(f[2]) == pgid or os.path.basename(argv[0]).decode(errors="replace") in MPI_DAEMONS:
            cmd = b" ".join(argv).decode(errors="replace")[:200]
            lines.append(f"  {entry.name} {f[1]} {f[0]} {cmd}")
    return "\n".join(lines) or "  nothing"


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
