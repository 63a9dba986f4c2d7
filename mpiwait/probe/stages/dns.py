"""The dns stage: a host's SSH address resolves (within the stage's timeout); an address whose
port refused is reused for a while instead of looked up again."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpiwait.probe.lookup import LookupPool, LookupTimeout, ResolverBusy
from mpiwait.probe.outcome import Outcome, Reason, Stage, retry
from mpiwait.settings import REFUSED_ADDRESS_REUSE

# Entries of getaddrinfo's answer: (family, type, proto, canonname, sockaddr).
AddrInfo = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Resolved:
    """A name looked up."""

    at: float  # when it was looked up
    infos: list[AddrInfo]  # getaddrinfo's answer


class Resolver:
    """``resolve`` a host's address, or the outcome of a failed lookup; ``refused`` keeps an
    answer whose port refused, for the host's next attempts (safe from many threads)."""

    def __init__(self, lookups: LookupPool, clock: Callable[[], float] = time.monotonic) -> None:
        self._lookups = lookups
        self._clock = clock
        self._refused: dict[str, Resolved] = {}  # host -> its answer, while its port refuses
        self._lock = threading.Lock()

    def resolve(self, host: str, address: str, port: int, timeout: float) -> Resolved | Outcome:
        with self._lock:
            earlier = self._refused.pop(host, None)
        if earlier is not None and self._clock() - earlier.at < REFUSED_ADDRESS_REUSE:
            return earlier
        at = self._clock()
        try:
            return Resolved(at, self._lookups.resolve(address, port, timeout))
        except (LookupTimeout, ResolverBusy, socket.gaierror, UnicodeError) as exc:
            return lookup_failed(exc, address, timeout)

    def refused(self, host: str, resolved: Resolved) -> None:
        """The address answered: the pod is there, its sshd is not listening yet."""
        with self._lock:
            self._refused[host] = resolved


def lookup_failed(exc: Exception, address: str, timeout: float) -> Outcome:
    """The outcome of a name lookup that raised ``exc``."""
    if isinstance(exc, LookupTimeout):
        return retry(Stage.DNS, Reason.TIMEOUT, f"no answer from the resolver in {timeout:g}s")
    if isinstance(exc, ResolverBusy):
        return retry(
            Stage.DNS, Reason.RESOLVER_BUSY, "every resolver thread holds an unanswered lookup"
        )
    if isinstance(exc, socket.gaierror):
        return retry(Stage.DNS, Reason.UNRESOLVED, f"{address}: {exc.strerror or exc}")
    return retry(Stage.DNS, Reason.UNRESOLVED, f"{address}: not a valid name")  # UnicodeError
