"""Events as JSON lines on stderr (``--log-format json``), one record per event, for machines."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO

from mpiwait.output.groups import NAMES_PER_GROUP, group_not_ready, ready_count
from mpiwait.output.printable import writable
from mpiwait.wait import events as ev

# In every record; raised when a field is removed, renamed or changes type
# (docs/events.schema.json, docs/reference.md).
JSON_SCHEMA_VERSION = 1


def json_record(kind: str, **fields: object) -> str:
    """One JSON line: every record says its schema version (docs/events.schema.json)."""
    record = {
        "schema_version": JSON_SCHEMA_VERSION,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "event": kind,
        **fields,
    }
    return json.dumps(_writable(record), default=lambda value: writable(str(value)))


def _writable(value: object) -> object:
    """``value`` with every string in it writable: JSON has no lone surrogates."""
    if isinstance(value, str):
        return writable(value)
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_writable(item) for item in value]
    return value


@dataclass
class JsonEvents:
    """Writes events as JSON lines; ``quiet`` keeps only errors and the result."""

    quiet: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)

    def _write(self, kind: str, **fields: object) -> None:
        self.stream.write(json_record(kind, **fields) + "\n")
        self.stream.flush()

    def error(self, message: str, hint: str | None = None, *, exit_code: int) -> None:
        self._write("error", message=message, hint=hint, exit_code=exit_code)

    def info(self, message: str) -> None:
        if not self.quiet:
            self._write("info", message=message)

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.WaitResult):
            self._write(
                "result",
                end=event.end.value,
                elapsed=round(event.elapsed, 3),
                failed=_state_dict(event.failed) if event.failed else None,
                hint=event.hint,
                hosts=[_state_dict(h) for h in event.hosts],
            )
        elif self.quiet:
            return
        elif isinstance(event, ev.WaitStarted):
            self._write(
                "start",
                hosts=list(event.hosts),
                sources=list(event.sources),
                skipped_self=list(event.skipped_self),
                check=event.check,
                timeout=event.timeout,
                notes=list(event.notes),
                launch=event.launch or None,
            )
        elif isinstance(event, ev.HostsAdded):
            self._write("hosts_added", hosts=list(event.hosts), total=event.total)
        elif isinstance(event, ev.HostChanged):
            self._write("host", elapsed=round(event.elapsed, 3), **_state_dict(event.state))
        elif isinstance(event, ev.HostReady):
            self._write(
                "ready",
                host=event.host,
                ready=event.ready,
                total=event.total,
                elapsed=round(event.elapsed, 3),
            )
        elif isinstance(event, ev.Rechecking):
            self._write(
                "recheck",
                hosts=list(event.hosts),
                older_than=event.older_than,
                elapsed=round(event.elapsed, 3),
            )
        elif isinstance(event, ev.HostLost):
            self._write("lost", elapsed=round(event.elapsed, 3), **_state_dict(event.state))
        elif isinstance(event, ev.StillWaiting):
            self._write(
                "waiting",
                elapsed=round(event.elapsed, 3),
                ready=ready_count(event.hosts),
                total=len(event.hosts),
                groups=_group_records(event.hosts),
            )


def _group_records(hosts: Iterable[ev.HostState]) -> list[dict[str, object]]:
    """The "waiting" record's groups: bounded whatever the number of hosts (a count per group
    and the first few of each); the full list is in the final "result"."""
    return [
        {
            "stage": group[0].stage.value,
            "reason": group[0].reason,
            "count": len(group),
            "sample": [_state_dict(h) for h in group[:NAMES_PER_GROUP]],
        }
        for _, group in group_not_ready(hosts)
    ]


def _state_dict(state: ev.HostState) -> dict[str, object]:
    return {
        "host": state.host,
        "stage": state.stage.value,
        "reason": state.reason,
        "detail": state.detail,
        "attempts": state.attempts,
    }
