"""What happened while waiting, as values.

The waiter emits these; the report module decides how a person (text) or a machine (JSON lines)
sees them. Keeping them plain data is what makes ``-q``, ``--log-format json`` and a readable
summary for a thousand hosts cheap to add without touching the waiting logic.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mpiwait.probe.outcome import Stage


@dataclass(frozen=True, slots=True)
class HostState:
    """Where one host stands (in events and in the final result)."""

    host: str
    stage: Stage
    reason: str = ""
    detail: str = ""
    attempts: int = 0
    local_address: str = ""  # this machine's end of its passing connection (the launch's interface)


@dataclass(frozen=True, slots=True)
class WaitStarted:
    hosts: tuple[str, ...]
    sources: tuple[str, ...]
    skipped_self: tuple[str, ...]
    check: str
    timeout: float
    notes: tuple[str, ...] = ()  # one-time remarks, e.g. the host key policy in force
    launch: str = ""  # the MPI that COMMAND launches, when recognised (launch/handover.py)


@dataclass(frozen=True, slots=True)
class HostsAdded:
    hosts: tuple[str, ...]
    total: int
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HostChanged:
    """A host moved to another stage or failed for another reason (not one line per attempt)."""

    state: HostState
    elapsed: float


@dataclass(frozen=True, slots=True)
class HostReady:
    host: str
    ready: int
    total: int
    elapsed: float


@dataclass(frozen=True, slots=True)
class Rechecking:
    """Every host was ready, but these passed more than ``older_than`` seconds ago: checking
    them again before the wait ends."""

    hosts: tuple[str, ...]
    older_than: float
    elapsed: float


@dataclass(frozen=True, slots=True)
class HostLost:
    """A host that had passed failed its re-check: it is waited for again."""

    state: HostState
    elapsed: float


@dataclass(frozen=True, slots=True)
class StillWaiting:
    """A periodic reminder of who is not ready and why, so a quiet log never looks hung."""

    hosts: tuple[HostState, ...]
    elapsed: float


class End(str, enum.Enum):
    READY = "ready"
    TIMEOUT = "timeout"
    PERMANENT = "permanent"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class WaitResult:
    end: End
    hosts: tuple[HostState, ...]
    elapsed: float
    failed: HostState | None = None  # the host that ended the wait with a permanent failure
    hint: str | None = None
    signal_name: str | None = None

    @property
    def not_ready(self) -> tuple[HostState, ...]:
        return tuple(h for h in self.hosts if h.stage is not Stage.READY)


Event = (
    WaitStarted
    | HostsAdded
    | HostChanged
    | HostReady
    | Rechecking
    | HostLost
    | StillWaiting
    | WaitResult
)
