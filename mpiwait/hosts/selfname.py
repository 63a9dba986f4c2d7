"""Which names mean this machine (the launcher), so that its own hostfile entry gets no login.

The short hostname, the FQDN (a lookup, bounded in time) and ``$HOSTNAME``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mpiwait.hosts.hostfile import host_key, is_ip
from mpiwait.settings import SELF_LOOKUP_TIMEOUT

__all__ = ["SelfNames"]


def _normalize_name(name: str) -> str:
    name = name.strip().lower()
    if name.endswith("."):
        name = name[:-1]
    return host_key(name)


def _answer_within(lookup: Callable[[], str], timeout: float) -> list[str]:
    """``[lookup()]``, or ``[]`` when it fails or takes longer than ``timeout``.

    The lookup runs in a daemon thread: waiting for it in ``join`` can be interrupted by
    SIGTERM, waiting inside getaddrinfo for an unanswered DNS query cannot.
    """
    answer: list[str] = []

    def run() -> None:
        with contextlib.suppress(OSError):
            answer.append(lookup())

    thread = threading.Thread(target=run, name="mpiwait-fqdn", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[:1]


@dataclass(frozen=True, slots=True)
class SelfNames:
    """The names that mean "this machine", to leave the launcher out of the hosts to wait for."""

    names: frozenset[str]  # lower-cased, without a trailing dot

    def __post_init__(self) -> None:
        normalized = frozenset(n for n in map(_normalize_name, self.names) if n)
        object.__setattr__(self, "names", normalized)

    @classmethod
    def from_system(cls, environ: Mapping[str, str] | None = None) -> SelfNames:
        """The short hostname, the FQDN and $HOSTNAME (whichever are known)."""
        env = os.environ if environ is None else environ
        found: list[str] = []
        # A machine whose name does not resolve still has the other names.
        with contextlib.suppress(OSError):
            found.append(socket.gethostname())
        found += _answer_within(socket.getfqdn, SELF_LOOKUP_TIMEOUT)
        found.append(env.get("HOSTNAME", ""))
        return cls(frozenset(found))

    def is_self(self, host: str) -> bool:
        """Whether ``host`` names this machine.

        Beyond an exact match, a multi-label DNS name matches on its first label:
        mpi-operator lists the launcher as ``pi-launcher.pi.default.svc`` while the pod's
        hostname is ``pi-launcher``. IP literals match only exactly.
        """
        name = _normalize_name(host)
        if not name:
            return False
        if name in self.names:
            return True
        if is_ip(name):
            return False
        first, dot, rest = name.partition(".")
        if not dot or not rest:
            return False
        return any(own.partition(".")[0] == first for own in self.names if not is_ip(own))
