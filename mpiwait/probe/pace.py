"""Connections that end before authentication, spaced per SSH address across runs.

``--check tcp`` connects and closes without logging in; OpenSSH 9.8+ sshd charges the
launcher's address 1 s for each such connection and refuses it once more than 15 s are
outstanding. One run connects to a ready host once, but a script that runs mpiwait every
second (a readiness probe, a discovery loop) would add up. So each connect-only attempt takes
its turn at an address: it waits until UNAUTHENTICATED_SPACING has passed since the last
connect-only attempt at that address, by this run or another of this uid. The turns are small
files ``pace-<address>-<port>`` (holding the CLOCK_MONOTONIC time of the last turn, which every
process of the machine shares) in the private directory of readycache.py, locked while a turn
runs. Where no such directory is usable,
turns are spaced within this run only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator

from mpiwait.settings import UNAUTHENTICATED_SPACING


class Pacer:
    def __init__(self, directory: str | None, spacing: float = UNAUTHENTICATED_SPACING) -> None:
        self._directory = directory
        self._spacing = spacing
        self._last: dict[str, float] = {}  # this run's turns, where no directory is usable
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def turn(self, infos: list) -> Iterator[None]:
        """Wait for this address's turn, hold it while the body connects, then mark it."""
        address, port = infos[0][4][:2] if infos else ("", 0)
        key = f"{address}-{port}".replace("/", "_")
        fd = self._open(key)
        try:
            last = self._last_turn(key, fd)
            wait = last + self._spacing - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, self._spacing))
            yield
        finally:
            now = time.monotonic()
            with self._lock:
                self._last[key] = now
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.pwrite(fd, f"{now:.3f}\n".encode(), 0)
                os.close(fd)  # releases the lock

    def _open(self, key: str) -> int | None:
        if self._directory is None:
            return None
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
        try:
            fd = os.open(os.path.join(self._directory, f"pace-{key}"), flags, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return None
        return fd

    def _last_turn(self, key: str, fd: int | None) -> float:
        with self._lock:
            last = self._last.get(key, 0.0)
        if fd is not None:
            with contextlib.suppress(OSError, ValueError):
                last = max(last, float(os.pread(fd, 32, 0) or b"0"))
        return last
