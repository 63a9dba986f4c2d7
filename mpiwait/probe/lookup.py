"""Name lookups with a timeout, on a bounded set of threads shared by every probe.

``getaddrinfo`` takes no timeout, and a resolver that forwards to an unreachable upstream
(Docker's embedded DNS for a container that has not started, a CoreDNS under load) holds the
calling thread for the resolver's own retries, ~10 s or more. A lookup therefore runs on a
thread of this pool while the probe waits for it at most its stage timeout; a lookup still
stuck after that finishes in the background, holding its thread. At most ``threads`` lookups
are outstanding at once, stuck ones included: past that, a lookup is refused at once as
"resolver busy" (a not-yet, like a timeout), so stuck lookups never add up to a thread per
host at scale.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

from mpiwait.settings import MAX_PENDING_LOOKUPS


class LookupTimeout(Exception):
    """The lookup did not finish within the timeout (it goes on in the background)."""


class ResolverBusy(Exception):
    """Every resolver thread is taken by an unfinished lookup."""


class _Request:
    __slots__ = ("done", "error", "host", "port", "result")

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        # A lock taken now and released by the lookup thread: the cheapest one-shot signal
        # (an Event builds a Condition and a second lock per wait).
        self.done = threading.Lock()
        self.done.acquire()
        self.result: list[Any] | None = None
        self.error: BaseException | None = None


class LookupPool:
    """``resolve(host, port, timeout)``: getaddrinfo's answer (SOCK_STREAM) or an exception:
    socket.gaierror / UnicodeError as getaddrinfo raises them, LookupTimeout, ResolverBusy."""

    def __init__(self, threads: int, lookup: Callable[..., list[Any]] | None = None) -> None:
        self._max = max(1, threads)
        self._lookup = lookup or socket.getaddrinfo
        self._jobs: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._outstanding = 0  # submitted and not finished, abandoned ones included
        self._threads = 0

    @property
    def threads(self) -> int:
        """Threads started so far (never more than the bound)."""
        return self._threads

    def resolve(self, host: str, port: int, timeout: float) -> list[Any]:
        with self._lock:
            if self._outstanding >= self._max:
                raise ResolverBusy
            self._outstanding += 1
            # Idle threads wait on the queue; start one only when every thread has a lookup.
            spawn = self._threads < self._outstanding
            if spawn:
                self._threads += 1
        if spawn:
            # Daemon: a lookup stuck in the C library must never delay the exit.
            threading.Thread(target=self._work, name="mpiwait-resolve", daemon=True).start()
        request = _Request(host, port)
        self._jobs.put(request)
        if not _acquire(request.done, timeout):
            raise LookupTimeout
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _work(self) -> None:
        while True:
            request = self._jobs.get()
            try:
                request.result = self._lookup(request.host, request.port, type=socket.SOCK_STREAM)
            except BaseException as exc:  # handed to the caller, who decides
                request.error = exc
            finally:
                with self._lock:
                    self._outstanding -= 1
                request.done.release()


def _acquire(lock: threading.Lock, timeout: float) -> bool:
    if timeout <= 0:
        return lock.acquire(blocking=False)
    return lock.acquire(timeout=min(timeout, threading.TIMEOUT_MAX))


def lookup_pool(parallel: int) -> LookupPool:
    """The pool for a run with ``--parallel`` probes: never fewer threads than probes in flight,
    so a resolver that is slow but answers never makes a lookup wait for a thread."""
    return LookupPool(max(MAX_PENDING_LOOKUPS, parallel))
