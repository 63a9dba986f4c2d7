"""Where attempts run (one pool of threads, for the wait and --list-ready alike) and how fast
they may start (the probe budget).

The pool's threads are daemons (a stuck connect never delays the exit) and are started only as
attempts need them, so four hosts cost four threads, not 32.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# Refilled tokens add up in floating point; 0.9999999 must count as a whole token, or the loop
# would ask to wake again after a fraction of a nanosecond, forever.
_EPSILON = 1e-6


class ThreadRunner(Generic[T]):
    """``work(host)`` on at most ``workers`` threads; ``on_error`` turns an exception that
    escapes it (a probe bug, a library surprise) into a result, so no host is lost."""

    def __init__(
        self,
        work: Callable[[str], T],
        workers: int,
        on_error: Callable[[Exception], T],
        done: queue.SimpleQueue[tuple[str, T]] | None = None,
    ) -> None:
        self._work = work
        self._on_error = on_error
        self._workers = max(1, workers)
        self._threads: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
        # shared with whoever else reports (host, result): the kept connections' LOST
        self._done = done if done is not None else queue.SimpleQueue()
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
            self._done.put((host, result))

    def results(self, timeout: float) -> list[tuple[str, T]]:
        """Results finished so far, waiting up to ``timeout`` seconds for the first."""
        try:
            out = [self._done.get(timeout=timeout) if timeout > 0 else self._done.get_nowait()]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out


class TokenBucket:
    """The wait's probe budget: a burst of ``capacity``, then ``rate`` starts a second (0: no
    limit), so a thousand unready workers do not turn into a flood of DNS queries."""

    def __init__(self, rate: float, capacity: int, now: float) -> None:
        self.rate = rate
        self._capacity = float(max(1, capacity))
        self._tokens = self._capacity
        self._refilled = now

    def refill(self, now: float) -> None:
        if self.rate > 0:
            self._tokens = min(self._capacity, self._tokens + (now - self._refilled) * self.rate)
            self._refilled = now

    def take(self) -> bool:
        """One start, if the budget allows it now (after ``refill``)."""
        if self.rate > 0 and self._tokens < 1 - _EPSILON:
            return False
        self._tokens -= 1
        return True

    def next_token(self, now: float) -> float:
        """When ``take`` can next succeed."""
        if self.rate > 0 and self._tokens < 1 - _EPSILON:
            return now + (1 - self._tokens) / self.rate
        return now


class StartWindow:
    """--list-ready's probe budget: at most ``rate`` starts in any second, as --probe-rate
    promises; a rate under 1/s allows one start per 1/rate seconds. A window, not the wait's
    bucket: Horovod's 64 known hosts re-checked at once start at once (docs/design-decisions.md).
    """

    def __init__(self, rate: float) -> None:
        self._limit = max(1, int(rate)) if rate > 0 else 0
        self._span = self._limit / rate if rate > 0 else 0.0
        self._starts: deque[float] = deque()

    def take(self, now: float) -> bool:
        if not self._limit:
            return True
        while self._starts and self._starts[0] <= now - self._span:
            self._starts.popleft()
        if len(self._starts) >= self._limit:
            return False
        self._starts.append(now)
        return True

    def next_free(self) -> float:
        """When ``take`` can next succeed (after a refusal)."""
        return self._starts[0] + self._span if self._starts else 0.0


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
        while started < len(hosts) and window.take(now):
            runner.start(hosts[started])
            started += 1
        wait = deadline - now
        if started < len(hosts):
            wait = min(wait, window.next_free() - now)
        results.update(runner.results(max(wait, 0.001)))
    return results
