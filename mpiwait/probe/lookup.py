"""Name lookups with a timeout, on a bounded set of threads shared by every probe.

``getaddrinfo`` takes no timeout, and a resolver forwarding to an unreachable upstream (Docker's
embedded DNS before the container starts, a CoreDNS under load) can hold the calling thread for
its own retries. So a lookup runs on a pool thread while the probe waits at most its stage
timeout; a stuck one finishes in the background, holding its thread. Past ``threads`` lookups
outstanding, stuck ones included, a lookup is refused at once as "resolver busy" (a not-yet),
so stuck lookups never add up to a thread per host at scale."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpiwait.settings import MAX_PENDING_LOOKUPS


class LookupTimeout(Exception):
    """The lookup did not finish within the timeout (it goes on in the background)."""


class ResolverBusy(Exception):
    """Every resolver thread is taken by an unfinished lookup."""


def _taken_lock() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass(slots=True)
class _Request:
    """One lookup, filled in by the pool thread that makes it."""

    host: str
    port: int
    # Taken now, released by the lookup thread: a one-shot signal without an Event's Condition.
    done: threading.Lock = field(default_factory=_taken_lock)
    result: list[Any] | None = None
    error: BaseException | None = None


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
