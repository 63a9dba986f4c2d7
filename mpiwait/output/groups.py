"""Not-ready hosts grouped by where they are stuck and why: shared by the text lines, the JSON
records and the summary, so each says the same about a thousand hosts in a bounded space."""

from __future__ import annotations

from collections.abc import Iterable

from mpiwait.probe.outcome import Stage
from mpiwait.wait.events import HostState

# How many names a grouped line (or JSON sample) spells out before "and N more".
NAMES_PER_GROUP = 5


def group_not_ready(hosts: Iterable[HostState]) -> list[tuple[str, list[HostState]]]:
    """Not-ready hosts grouped by where they are stuck and why, largest group first."""
    groups: dict[str, list[HostState]] = {}
    for host in hosts:
        if host.stage is Stage.READY:
            continue
        key = f"{host.stage.value} {host.reason}".strip() if host.reason else "not probed yet"
        groups.setdefault(key, []).append(host)
    return sorted(groups.items(), key=lambda item: -len(item[1]))


def ready_count(hosts: Iterable[HostState]) -> int:
    return sum(1 for h in hosts if h.stage is Stage.READY)
