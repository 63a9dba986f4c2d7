"""Events as text lines on stderr for people (``kubectl logs``), and the final summary.

Lines are written and flushed one at a time so they survive the ``execvp`` that follows a
successful wait; the COMMAND's stdout stays the COMMAND's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from mpiwait.hosts.hostfile import count_hosts, hosts_word
from mpiwait.output.groups import NAMES_PER_GROUP, group_not_ready, ready_count
from mpiwait.output.printable import printable
from mpiwait.probe.outcome import Stage
from mpiwait.wait import events as ev

PREFIX = "mpiwait: "
# Above this many hosts a line per host would bury the log; hosts are reported in groups.
PER_HOST_LINES_UP_TO = 32
# The longest line a summary or a status line may be, whatever the number of hosts: names are
# dropped into "and N more" and long details cut until it fits.
LINE_WIDTH = 160
# A detail (an error message) longer than this is cut in a group line.
DETAIL_WIDTH = 100


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def _detail(host: ev.HostState) -> str:
    """The detail without the host's own name in front (``w7: Name or service not known``
    under w7 says w7 twice); a different name in front (ssh config's HostName) stays."""
    prefix = f"{host.host}: "
    return host.detail[len(prefix) :] if host.detail.startswith(prefix) else host.detail


def _names(hosts: list[ev.HostState], *, details: bool, count: int = NAMES_PER_GROUP) -> str:
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


def _group_line(key: str, hosts: list[ev.HostState]) -> str:
    """``  dns unresolved (120; Name or service not known): w1, w2 ... and 115 more``: a detail
    that all the hosts share is said once, otherwise each name carries its own."""
    shared = {_detail(h) for h in hosts}
    if len(hosts) > 1 and len(shared) == 1 and next(iter(shared)):
        head = f"  {key} ({len(hosts)}; {_cut(shared.pop(), DETAIL_WIDTH)}): "
        return _fit(lambda k: head + _names(hosts, details=False, count=k))
    head = f"  {key} ({len(hosts)}): "
    return _fit(lambda k: head + _names(hosts, details=True, count=k))


def summary_lines(result: ev.WaitResult) -> list[str]:
    """The final words, short enough for a screen (and a termination message) at any scale."""
    total = len(result.hosts)
    if result.end is ev.End.READY:
        everyone = "1 host" if total == 1 else f"all {total} hosts"
        return [f"{everyone} ready in {result.elapsed:.1f}s"]
    if result.end is ev.End.PERMANENT and result.failed is not None:
        lines = [f"error: {result.failed.host}: {result.failed.detail}"]
        if result.hint:
            lines.append(f"hint: {result.hint}")
        return lines
    not_ready = result.not_ready
    if result.end is ev.End.TIMEOUT:
        head = f"timed out after {result.elapsed:.1f}s"
    elif result.end is ev.End.INTERRUPTED:
        head = f"interrupted by {result.signal_name or 'a signal'} after {result.elapsed:.1f}s"
    else:  # permanent, but without the host that caused it
        head = f"failed after {result.elapsed:.1f}s"
    if not total:
        return [f"{head}: no hosts were listed by any source"]
    lines = [f"{head}: {len(not_ready)} of {count_hosts(total)} not ready"]
    for key, hosts in group_not_ready(not_ready):
        lines.append(_group_line(key, hosts))
    return lines


@dataclass
class TextEvents:
    """Writes events as lines; ``quiet`` keeps only errors and the summary."""

    quiet: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    _total: int = 0
    _last_progress: int = 0

    def line(self, text: str) -> None:
        self.stream.write(PREFIX + printable(text) + "\n")
        self.stream.flush()

    def error(self, message: str, hint: str | None = None, *, exit_code: int) -> None:
        self.line(f"error: {message}")
        if hint:
            self.line(f"hint: {hint}")

    def info(self, message: str) -> None:
        if not self.quiet:
            self.line(message)

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.WaitResult):
            for text in summary_lines(event):
                self.line(text)
            return
        if self.quiet:
            return
        if isinstance(event, ev.WaitStarted):
            self._total = len(event.hosts)
            for text in _start_lines(event):
                self.line(text)
        elif isinstance(event, ev.HostsAdded):
            self._total = event.total
            self.line(
                f"{len(event.hosts)} more {hosts_word(len(event.hosts))} listed: "
                f"{_names([ev.HostState(h, Stage.PENDING) for h in event.hosts], details=False)} "
                f"({event.total} in all)"
            )
        elif isinstance(event, ev.HostChanged):
            if self._total <= PER_HOST_LINES_UP_TO:
                state = event.state
                self.line(f"[+{event.elapsed:.1f}s] {state.host}: {_why(state)}")
        elif isinstance(event, ev.HostReady):
            self._total = event.total
            step = max(1, event.total // 10) if event.total > PER_HOST_LINES_UP_TO else 1
            if event.ready == event.total or event.ready - self._last_progress >= step:
                self._last_progress = event.ready
                who = f" ({event.host})" if event.total <= PER_HOST_LINES_UP_TO else ""
                self.line(f"[+{event.elapsed:.1f}s] {event.ready}/{event.total} ready{who}")
        elif isinstance(event, ev.Rechecking):
            count = len(event.hosts)
            names = _names([ev.HostState(h, Stage.READY) for h in event.hosts], details=False)
            self.line(
                f"[+{event.elapsed:.1f}s] re-checking {count_hosts(count)} ready for more than "
                f"{event.older_than:g}s: {names}"
            )
        elif isinstance(event, ev.HostLost):
            state = event.state  # always shown: it is why the launch waits again
            self.line(f"[+{event.elapsed:.1f}s] {state.host} no longer ready: {_why(state)}")
            self._last_progress -= 1  # the count fell: the next host ready is progress again
        elif isinstance(event, ev.StillWaiting):
            self.line(_waiting_line(event))


def _start_lines(event: ev.WaitStarted) -> list[str]:
    """What the wait is about to do: which hosts, from where, which check, until when."""
    sources = "; ".join(event.sources) or "no source lists any host yet"
    deadline = f"deadline {event.timeout:g}s" if event.timeout > 0 else "no deadline"
    then = f"; then {event.launch}" if event.launch else ""
    lines = [
        f"waiting for {count_hosts(len(event.hosts))} ({sources}) to pass the "
        f"{event.check} check; {deadline}{then}"
    ]
    if event.skipped_self:
        lines.append(
            f"this machine: {', '.join(event.skipped_self)} (no login; only its name "
            "must resolve, as the MPI will resolve it)"
        )
    lines.extend(event.notes)
    return lines


def _why(state: ev.HostState) -> str:
    """``tcp refused (10.0.0.7 port 22: refused)``: where a host is stuck, and why."""
    return f"{state.stage.value} {state.reason}" + (f" ({state.detail})" if state.detail else "")


def _waiting_line(event: ev.StillWaiting) -> str:
    """``[+20s] 3/8 ready; tcp refused: w1, w2 ...``: a group per reason, a few names each."""
    groups = group_not_ready(event.hosts)
    parts = "; ".join(f"{key}: {_names(hosts, details=False)}" for key, hosts in groups)
    return f"[+{event.elapsed:.0f}s] {ready_count(event.hosts)}/{len(event.hosts)} ready; {parts}"
