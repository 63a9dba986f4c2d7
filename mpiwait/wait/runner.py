"""Where attempts run (one pool of threads, for the wait and --list-ready alike) and how fast
they may start (the probe budget).

The pool's threads are daemons (a stuck connect never delays the exit) and are started only as
attempts need them, so four hosts cost four threads, not 32.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    """A host event, not an attempt: the connection kept from the host's last login ended."""

    host: str


# What the wait hears of a host between its attempts (one kind so far).
HostEvent = ConnectionLost


class Inbox(Generic[T]):
    """What the wait loop waits on, put from other threads, each kind by its own method: the
    results of attempts (the runner's threads) and host events (probe/kept.py's watcher). One
    queue, so that either wakes the loop."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, T] | HostEvent] = queue.SimpleQueue()

    def finished(self, host: str, result: T) -> None:
        self._queue.put((host, result))

    def post(self, event: HostEvent) -> None:
        self._queue.put(event)

    def take(self, timeout: float) -> list[tuple[str, T] | HostEvent]:
        """What arrived so far, waiting up to ``timeout`` seconds for the first."""
        get = self._queue.get_nowait
        try:
            out = [self._queue.get(timeout=timeout) if timeout > 0 else get()]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(get())
            except queue.Empty:
                return out


class ThreadRunner(Generic[T]):
    """``work(host)`` on at most ``workers`` threads; ``on_error`` turns an exception that
    escapes it (a probe bug, a library surprise) into a result, so no host is lost."""

    def __init__(
        self,
        work: Callable[[str], T],
        workers: int,
        on_error: Callable[[Exception], T],
        inbox: Inbox[T] | None = None,
    ) -> None:
        self._work = work
        self._on_error = on_error
        self._workers = max(1, workers)
        self._threads: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
        # where results go; host events may arrive there too, from whoever watches hosts
        self._inbox = inbox if inbox is not None else Inbox()
        self._idle = 0
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic()

    def start(self, host: str) -> None:
        with self._lock:
            spawn = self._idle == 0 and len(self._threads) < self._workers
            if not spawn:
                self._idle -= 1
        if spawn:
            thread = threading.Thread(target=self._serve, name="mpiwait-probe", daemon=True)
            self._threads.append(thread)
            thread.start()
        self._jobs.put(host)

    def _serve(self) -> None:
        while True:
            host = self._jobs.get()
            try:
                result = self._work(host)
            except Exception as exc:
                result = self._on_error(exc)
            with self._lock:
                self._idle += 1
            self._inbox.finished(host, result)

    def results(self, timeout: float) -> list[tuple[str, T] | HostEvent]:
        """Results finished so far, and host events, waiting up to ``timeout`` seconds for the
        first."""
        return self._inbox.take(timeout)


class StartWindow:
    """The probe budget of the wait and --list-ready alike: at most ``rate`` starts in any
    one-second window, as --probe-rate promises (a fractional rate above 1 rounds down); a rate
    under 1/s spaces single starts 1/rate apart; 0: no limit. --parallel bounds what is in
    flight, not this."""

    def __init__(self, rate: float) -> None:
        self._limit = max(1, int(rate)) if rate > 0 else 0
        self._span = max(1.0, 1.0 / rate) if rate > 0 else 0.0
        # when each start in the window leaves it: stored, not recomputed, so that waking at
        # next_free() frees the slot exactly (a subtraction could miss it by a rounding error)
        self._leaves: deque[float] = deque()

    def take(self, now: float) -> bool:
        """One start at ``now``, if the window has room for it."""
        if not self._limit:
            return True
        leaves = self._leaves
        while leaves and leaves[0] <= now:
            leaves.popleft()
        if len(leaves) >= self._limit:
            return False
        leaves.append(now + self._span)
        return True

    def next_free(self) -> float:
        """When ``take`` can next succeed: -inf while the window has room."""
        if self._limit and len(self._leaves) >= self._limit:
            return self._leaves[0]
        return -math.inf


def run_all(
    work: Callable[[str], T],
    hosts: list[str],
    *,
    parallel: int,
    rate: float,
    budget: float,
    on_error: Callable[[Exception], T],
) -> dict[str, T]:
    """``work`` of each host once, ``parallel`` at a time and at most ``rate`` started in any
    second; whatever has not finished within ``budget`` seconds is left out this time."""
    if not hosts:
        return {}
    runner = ThreadRunner(work, min(parallel, len(hosts)), on_error)
    deadline = runner.now() + budget
    window = StartWindow(rate)
    results: dict[str, T] = {}
    started = 0
    while len(results) < len(hosts):
        now = runner.now()
        if now >= deadline:
            break
        while started < len(hosts) and window.take(runner.now()):  # each when it happens
            runner.start(hosts[started])
            started += 1
        wait = deadline - now
        if started < len(hosts):
            wait = min(wait, window.next_free() - now)
        for item in runner.results(max(wait, 0.001)):
            if not isinstance(item, ConnectionLost):  # no host is watched here
                results[item[0]] = item[1]
    return results
