"""Events to text for people (``kubectl logs``), JSON lines for machines, and the final summary;
and the plan ``--dry-run`` prints.

Events go to stderr: the COMMAND's stdout stays the COMMAND's. Lines are written and flushed one
at a time so they survive the ``execvp`` that follows a successful wait. Only the plan, which
is what ``--dry-run`` was asked for, goes to stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from mpiwait.probe.outcome import Stage
from mpiwait.settings import LogFormat
from mpiwait.wait.events import (
    End,
    Event,
    HostChanged,
    HostLost,
    HostReady,
    HostsAdded,
    HostState,
    Rechecking,
    StillWaiting,
    WaitResult,
    WaitStarted,
)

if TYPE_CHECKING:
    from mpiwait.hosts.sources import Snapshot
    from mpiwait.probe.attempt import Prober

PREFIX = "mpiwait: "
# Above this many hosts a line per host would bury the log; hosts are reported in groups.
PER_HOST_LINES_UP_TO = 32
# How many names a grouped line spells out before "and N more".
NAMES_PER_GROUP = 5
# The longest line a summary or a status line may be, whatever the number of hosts: names are
# dropped into "and N more" and long details cut until it fits.
LINE_WIDTH = 160
# A detail (an error message) longer than this is cut in a group line.
DETAIL_WIDTH = 100
# Kubernetes keeps at most this many bytes of a termination message.
TERMINATION_LOG_BYTES = 4096


def _hosts(count: int) -> str:
    return f"{count} host" if count == 1 else f"{count} hosts"


def group_not_ready(hosts: Iterable[HostState]) -> list[tuple[str, list[HostState]]]:
    """Not-ready hosts grouped by where they are stuck and why, largest group first."""
    groups: dict[str, list[HostState]] = {}
    for host in hosts:
        if host.stage is Stage.READY:
            continue
        key = f"{host.stage.value} {host.reason}".strip() if host.reason else "not probed yet"
        groups.setdefault(key, []).append(host)
    return sorted(groups.items(), key=lambda item: -len(item[1]))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def _detail(host: HostState) -> str:
    """The detail without the host's own name in front (``w7: Name or service not known``
    under w7 says w7 twice); a different name in front (ssh config's HostName) stays."""
    prefix = f"{host.host}: "
    return host.detail[len(prefix) :] if host.detail.startswith(prefix) else host.detail


def _names(hosts: list[HostState], *, details: bool, count: int = NAMES_PER_GROUP) -> str:
    shown = [
        f"{h.host} ({_cut(_detail(h), DETAIL_WIDTH)})" if details and h.detail else h.host
        for h in hosts[:count]
    ]
    more = len(hosts) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def _fitting(build: Callable[[int], str], width: int) -> str | None:
    """``build(k)`` with the most names per group, up to NAMES_PER_GROUP, that fits ``width``."""
    for count in range(NAMES_PER_GROUP, 0, -1):
        line = build(count)
        if len(line) <= width:
            return line
    return None


def _fit(build: Callable[[int], str], width: int = LINE_WIDTH) -> str:
    """As _fitting, cut at the end when even one name does not fit (a 250-character name)."""
    return _fitting(build, width) or _cut(build(1), width)


def _group_line(key: str, hosts: list[HostState]) -> str:
    """``  dns unresolved (120; Name or service not known): w1, w2 ... and 115 more``: a detail
    that all the hosts share is said once, otherwise each name carries its own."""
    shared = {_detail(h) for h in hosts}
    if len(hosts) > 1 and len(shared) == 1 and next(iter(shared)):
        head = f"  {key} ({len(hosts)}; {_cut(shared.pop(), DETAIL_WIDTH)}): "
        return _fit(lambda k: head + _names(hosts, details=False, count=k))
    head = f"  {key} ({len(hosts)}): "
    return _fit(lambda k: head + _names(hosts, details=True, count=k))


def summary_lines(result: WaitResult) -> list[str]:
    """The final words, short enough for a screen (and a termination message) at any scale."""
    total = len(result.hosts)
    if result.end is End.READY:
        everyone = "1 host" if total == 1 else f"all {total} hosts"
        return [f"{everyone} ready in {result.elapsed:.1f}s"]
    if result.end is End.PERMANENT and result.failed is not None:
        lines = [f"error: {result.failed.host}: {result.failed.detail}"]
        if result.hint:
            lines.append(f"hint: {result.hint}")
        return lines
    not_ready = result.not_ready
    if result.end is End.TIMEOUT:
        head = f"timed out after {result.elapsed:.1f}s"
    elif result.end is End.INTERRUPTED:
        head = f"interrupted by {result.signal_name or 'a signal'} after {result.elapsed:.1f}s"
    else:  # permanent, but without the host that caused it
        head = f"failed after {result.elapsed:.1f}s"
    if not total:
        return [f"{head}: no hosts were listed by any source"]
    lines = [f"{head}: {len(not_ready)} of {_hosts(total)} not ready"]
    for key, hosts in group_not_ready(not_ready):
        lines.append(_group_line(key, hosts))
    return lines


@dataclass
class Reporter:
    """Writes events; ``-q`` keeps only errors and the summary."""

    log_format: LogFormat = LogFormat.TEXT
    quiet: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    _total: int = 0
    _last_progress: int = 0

    def line(self, text: str) -> None:
        self.stream.write(PREFIX + text + "\n")
        self.stream.flush()

    def _json(self, kind: str, **fields: object) -> None:
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "event": kind, **fields}
        self.stream.write(json.dumps(record, default=str) + "\n")
        self.stream.flush()

    def error(self, message: str, hint: str | None = None, *, exit_code: int) -> None:
        if self.log_format is LogFormat.JSON:
            self._json("error", message=message, hint=hint, exit_code=exit_code)
            return
        self.line(f"error: {message}")
        if hint:
            self.line(f"hint: {hint}")

    def info(self, message: str) -> None:
        if self.quiet:
            return
        if self.log_format is LogFormat.JSON:
            self._json("info", message=message)
        else:
            self.line(message)

    def __call__(self, event: Event) -> None:
        if self.log_format is LogFormat.JSON:
            self._emit_json(event)
        else:
            self._emit_text(event)

    def _emit_json(self, event: Event) -> None:
        if isinstance(event, WaitResult):
            self._json(
                "result",
                end=event.end.value,
                elapsed=round(event.elapsed, 3),
                failed=_state_dict(event.failed) if event.failed else None,
                hint=event.hint,
                hosts=[_state_dict(h) for h in event.hosts],
            )
        elif self.quiet:
            return
        elif isinstance(event, WaitStarted):
            self._json(
                "start",
                hosts=list(event.hosts),
                sources=list(event.sources),
                skipped_self=list(event.skipped_self),
                check=event.check,
                timeout=event.timeout,
                notes=list(event.notes),
                launch=event.launch or None,
            )
        elif isinstance(event, HostsAdded):
            self._json("hosts_added", hosts=list(event.hosts), total=event.total)
        elif isinstance(event, HostChanged):
            self._json("host", elapsed=round(event.elapsed, 3), **_state_dict(event.state))
        elif isinstance(event, HostReady):
            self._json(
                "ready",
                host=event.host,
                ready=event.ready,
                total=event.total,
                elapsed=round(event.elapsed, 3),
            )
        elif isinstance(event, Rechecking):
            self._json(
                "recheck",
                hosts=list(event.hosts),
                older_than=event.older_than,
                elapsed=round(event.elapsed, 3),
            )
        elif isinstance(event, HostLost):
            self._json("lost", elapsed=round(event.elapsed, 3), **_state_dict(event.state))
        elif isinstance(event, StillWaiting):
            self._json(
                "waiting",
                elapsed=round(event.elapsed, 3),
                ready=_ready_count(event.hosts),
                total=len(event.hosts),
                groups=_group_records(event.hosts),
            )

    def _emit_text(self, event: Event) -> None:
        if isinstance(event, WaitResult):
            for text in summary_lines(event):
                self.line(text)
            return
        if self.quiet:
            return
        if isinstance(event, WaitStarted):
            self._total = len(event.hosts)
            for text in _start_lines(event):
                self.line(text)
        elif isinstance(event, HostsAdded):
            self._total = event.total
            self.line(
                f"{len(event.hosts)} more {'host' if len(event.hosts) == 1 else 'hosts'} listed: "
                f"{_names([HostState(h, Stage.PENDING) for h in event.hosts], details=False)} "
                f"({event.total} in all)"
            )
        elif isinstance(event, HostChanged):
            if self._total <= PER_HOST_LINES_UP_TO:
                state = event.state
                self.line(f"[+{event.elapsed:.1f}s] {state.host}: {_why(state)}")
        elif isinstance(event, HostReady):
            self._total = event.total
            step = max(1, event.total // 10) if event.total > PER_HOST_LINES_UP_TO else 1
            if event.ready == event.total or event.ready - self._last_progress >= step:
                self._last_progress = event.ready
                who = f" ({event.host})" if event.total <= PER_HOST_LINES_UP_TO else ""
                self.line(f"[+{event.elapsed:.1f}s] {event.ready}/{event.total} ready{who}")
        elif isinstance(event, Rechecking):
            count = len(event.hosts)
            names = _names([HostState(h, Stage.READY) for h in event.hosts], details=False)
            self.line(
                f"[+{event.elapsed:.1f}s] re-checking {_hosts(count)} ready for more than "
                f"{event.older_than:g}s: {names}"
            )
        elif isinstance(event, HostLost):
            state = event.state  # always shown: it is why the launch waits again
            self.line(f"[+{event.elapsed:.1f}s] {state.host} no longer ready: {_why(state)}")
            self._last_progress -= 1  # the count fell: the next host ready is progress again
        elif isinstance(event, StillWaiting):
            self.line(_waiting_line(event))


def _start_lines(event: WaitStarted) -> list[str]:
    """What the wait is about to do: which hosts, from where, which check, until when."""
    sources = "; ".join(event.sources) or "no source lists any host yet"
    deadline = f"deadline {event.timeout:g}s" if event.timeout > 0 else "no deadline"
    then = f"; then {event.launch}" if event.launch else ""
    lines = [
        f"waiting for {_hosts(len(event.hosts))} ({sources}) to pass the "
        f"{event.check} check; {deadline}{then}"
    ]
    if event.skipped_self:
        lines.append(
            f"this machine: {', '.join(event.skipped_self)} (no login; only its name "
            "must resolve, as the MPI will resolve it)"
        )
    lines.extend(event.notes)
    return lines


def _why(state: HostState) -> str:
    """``tcp refused (10.0.0.7 port 22: refused)``: where a host is stuck, and why."""
    return f"{state.stage.value} {state.reason}" + (f" ({state.detail})" if state.detail else "")


def _ready_count(hosts: Iterable[HostState]) -> int:
    return sum(1 for h in hosts if h.stage is Stage.READY)


def _waiting_line(event: StillWaiting) -> str:
    """``[+20s] 3/8 ready; tcp refused: w1, w2 ...``: a group per reason, a few names each."""
    groups = group_not_ready(event.hosts)
    parts = "; ".join(f"{key}: {_names(hosts, details=False)}" for key, hosts in groups)
    return f"[+{event.elapsed:.0f}s] {_ready_count(event.hosts)}/{len(event.hosts)} ready; {parts}"


def _group_records(hosts: Iterable[HostState]) -> list[dict[str, object]]:
    """The JSON "waiting" record's groups: bounded whatever the number of hosts (a count per
    group and the first few of each); the full list is in the final "result"."""
    return [
        {
            "stage": group[0].stage.value,
            "reason": group[0].reason,
            "count": len(group),
            "sample": [_state_dict(h) for h in group[:NAMES_PER_GROUP]],
        }
        for _, group in group_not_ready(hosts)
    ]


def _state_dict(state: HostState) -> dict[str, object]:
    return {
        "host": state.host,
        "stage": state.stage.value,
        "reason": state.reason,
        "detail": state.detail,
        "attempts": state.attempts,
    }


def write_termination_log(path: Path | None, lines: list[str], *, create: bool = False) -> None:
    """Leave the summary where Kubernetes shows it (``kubectl describe pod``), if we may.

    An existing file (or character device) is written. A missing one is created only when the
    user named the path (``create``): the default /dev/termination-log exists only in a pod,
    and elsewhere is not ours to make. A dangling symlink is never followed into a new file.
    """
    if path is None:
        return
    # Bytes, not characters: one non-ASCII name would otherwise push past the limit. A
    # character cut in half at the end is dropped rather than left broken.
    data = ("\n".join(lines) + "\n").encode("utf-8")[:TERMINATION_LOG_BYTES]
    data = data.decode("utf-8", "ignore").encode("utf-8")
    try:
        if path.is_file() or path.is_char_device():
            path.write_bytes(data)
            return
        if not create or os.path.lexists(path):
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
    except OSError:
        return


def print_plan(prober: Prober, snapshot: Snapshot, out: TextIO | None = None) -> None:
    """``--dry-run``: each host's address, port, user and the keys ssh will try, on stdout."""
    from mpiwait.probe.keys import present_identity_files

    out = out if out is not None else sys.stdout
    names = snapshot.names
    out.write(f"# {len(names)} hosts from: {'; '.join(snapshot.sources) or 'no source'}\n")
    if snapshot.skipped_self:
        out.write(
            f"# this machine: {', '.join(snapshot.skipped_self)} (no login; "
            "only its name must resolve)\n"
        )
    for name in names:
        target = prober.target(name)
        keys = present_identity_files(target.identity_files, defaults=target.identities_default)
        out.write(
            f"{name} address={target.address} port={target.port} user={target.user} "
            f"identity={','.join(keys) or '(none found)'} "
            f"strict_host_key_checking={target.strict_host_key_checking} "
            f"connect_timeout={prober.timeout_for(target):g}\n"
        )
    out.flush()


def print_launch_plan(description: str, lines: Iterable[str], out: TextIO | None = None) -> None:
    """``--dry-run`` with an MPI COMMAND: which MPI, and what the launch would be handed."""
    out = out if out is not None else sys.stdout
    out.write(f"# launch: {description}\n")
    out.write("".join(f"# {line}\n" for line in lines))
    out.flush()


def print_worker_plan(role_line: str, command: tuple[str, ...], out: TextIO | None = None) -> None:
    """``--dry-run`` on a worker: mpiwait would wait for no one, only exec COMMAND (or exit)."""
    import shlex

    out = out if out is not None else sys.stdout
    out.write(f"# {role_line}: not waiting for any host\n")
    out.write(f"exec {shlex.join(command)}\n" if command else "exit 0\n")
    out.flush()
