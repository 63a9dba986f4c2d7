"""The charge OpenSSH 9.8+ sshd holds against this launcher's address, as mpiwait's own
connections add it up, so that they never get the address refused (docs/how-it-works.md,
"Per-source penalties"). Per SSH address, each connection closed before authenticating adds
NOAUTH_CHARGE, time runs it down, and the next connection waits while the account is above
NOAUTH_BUDGET - NOAUTH_CHARGE. Within a run the account lives in memory and a wait goes to the
schedule (``Outcome.pace``); ``--check tcp``, which scripts run every second, also keeps it in
a locked file per address in cachedir.py's directory and sleeps its wait. It must never let an
account go above NOAUTH_BUDGET."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mpiwait.settings import NOAUTH_BUDGET, NOAUTH_CHARGE


def address_key(peer: tuple[Any, ...]) -> str:
    """The account of a connected peer (``getpeername()``), usable as a file name."""
    return f"{peer[0]}-{peer[1]}".replace("/", "_")


class Pacer:
    """Accounts per SSH address; safe to use from many threads at once. With a ``directory``,
    connect-only turns also keep one file per address, ``pace-<address>-<port>`` holding
    "<CLOCK_MONOTONIC time> <charge>" (every process of the machine shares that clock);
    without one, the accounts are this run's only."""

    def __init__(
        self,
        directory: str | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._directory = directory
        self._clock = clock
        self._sleep = sleep
        self._accounts: dict[str, tuple[float, float]] = {}  # key -> (when, charge then)
        self._lock = threading.Lock()

    def charge(self, key: str) -> float:
        """Add one connection closed before authentication to ``key``'s account now; return
        how long the next connection to it must wait."""
        now = self._clock()
        with self._lock:
            owed = _run_down(self._accounts.get(key), now) + NOAUTH_CHARGE
            self._accounts[key] = (now, owed)
        return _wait(owed)

    def room(self, key: str) -> bool:
        """Whether one more connection closed before authentication fits ``key``'s account
        now (this run's), without waiting."""
        now = self._clock()
        with self._lock:
            return _wait(_run_down(self._accounts.get(key), now)) == 0

    @contextlib.contextmanager
    def turn(self, infos: list[tuple[Any, ...]]) -> Iterator[Callable[[], None]]:
        """A connect-only attempt at the first address of ``infos``: wait while its account
        (this run's and, through its file, earlier runs') is too high, and hold it while the
        body connects; the body calls what it is given once sshd has accepted the connection,
        which charges the account (a refused connect never reaches sshd)."""
        key = address_key(infos[0][4]) if infos else "-"
        fd = self._open(key)
        charged: list[bool] = []
        try:
            now = self._clock()
            with self._lock:
                owed = _run_down(self._accounts.get(key), now)
            if fd is not None:
                owed = max(owed, _run_down(_read(fd), now))
            wait = _wait(owed)
            if wait > 0:
                self._sleep(wait)
            then = self._clock()
            yield lambda: charged.append(True)
            if charged:
                now = self._clock()
                owed = _run_down((then, owed), now) + NOAUTH_CHARGE
                with self._lock:
                    self._accounts[key] = (now, owed)
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.pwrite(fd, f"{now:.3f} {owed:.3f}\n".ljust(32).encode(), 0)
        finally:
            if fd is not None:
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


def _run_down(account: tuple[float, float] | None, now: float) -> float:
    """What an account (when, charge then) still holds ``now``; one from the future (a
    file kept across a reboot) holds nothing."""
    if account is None or account[0] > now:
        return 0.0
    when, owed = account
    return max(0.0, owed - (now - when))


def _wait(owed: float) -> float:
    """How long the next connection must wait, with ``owed`` outstanding now, for the account
    to stay within the budget once that connection is charged too (never longer than the
    budget takes to run down, whatever a file says)."""
    return min(max(0.0, owed + NOAUTH_CHARGE - NOAUTH_BUDGET), NOAUTH_BUDGET)


def _read(fd: int) -> tuple[float, float] | None:
    with contextlib.suppress(OSError, ValueError):
        when, owed = os.pread(fd, 64, 0).split()[:2]
        return float(when), float(owed)
    return None
