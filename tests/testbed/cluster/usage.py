"""What mpiwait costs in a pod, read from the host's /proc while it runs: its CPU time (its own
and its reaped children's, ``ssh -G`` and ``discover_hosts.sh``) and its peak resident memory.
The nodes' containers are host processes, so the host's /proc sees them. A watch samples every
``INTERVAL``; the CPU figure is short by at most one interval's work."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

INTERVAL = 0.2
PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    """One process's cost as last sampled, and ``counted``: the watch's counter at that sample
    (what else happened while it lived, such as the DNS queries CoreDNS logged)."""

    pid: int
    cpu_seconds: float
    peak_rss_mib: float
    last_seen: float  # wall time of the last sample that found it
    counted: int | None


def _launchers(pid: int, program: str) -> tuple[float, float] | None:
    """CPU seconds (with reaped children) and peak RSS in MiB of ``pid`` if it is ``program``'s
    interpreter (not a shell that runs it) outside a worker (an initContainer, or the launcher's
    ENTRYPOINT before it execs mpirun); None otherwise, or if it is gone."""
    base = PROC / str(pid)
    try:
        # the interpreter, the shebang's options (the image's ``#!.../python3 -ISB``), the script
        argv = (base / "cmdline").read_bytes().split(b"\0")[:3]
        if program.encode() not in [a.rpartition(b"/")[2] for a in argv]:
            return None  # the common case, read with one file
        if b"K_MPI_JOB_ROLE=worker" in (base / "environ").read_bytes().split(b"\0"):
            return None
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # fields after the command's closing parenthesis start at field 3; utime..cstime are 14-17
    fields = stat.rpartition(")")[2].split()
    cpu = sum(int(f) for f in fields[11:15]) / TICKS
    hwm = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("VmHWM:")), "0")
    return cpu, int(hwm) / 1024


class Watch:
    """A thread that samples the launcher's ``program`` processes until the watch is left; the
    one with the most CPU time is ``usage()``. ``counter``, if given, is read at each sample in
    which one was alive."""

    def __init__(self, program: str = "mpiwait", counter: Callable[[], int] | None = None) -> None:
        self._program = program
        self._counter = counter
        self._seen: dict[int, Usage] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="usage-watch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def usage(self) -> Usage | None:
        return max(self._seen.values(), key=lambda u: u.cpu_seconds, default=None)

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            found = []
            for entry in PROC.iterdir():
                got = _launchers(int(entry.name), self._program) if entry.name.isdigit() else None
                if got is not None:
                    found.append((int(entry.name), *got))
            if not found:
                continue
            counted = self._counter() if self._counter else None
            for pid, cpu, rss in found:
                before = self._seen.get(pid)
                peak = max(rss, before.peak_rss_mib if before else 0.0)
                self._seen[pid] = Usage(pid, cpu, peak, time.time(), counted)
