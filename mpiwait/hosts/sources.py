"""Which hosts to wait for: the sources the options name (hostfile, discover_hosts.sh, or
``--hosts``), read together into one snapshot, again every second while waiting.

The pieces live next door, one job each: hostfile.py (the formats, pure), textfile.py
(reading a file safely), discover.py (running a discover script), selfname.py (which names
are this machine). Kept cheap to import (no paramiko, no click; subprocess and socket only
when needed) because the CLI imports it on every start, including the worker role that exits
at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mpiwait.errors import InputError
from mpiwait.hosts.discover import run_discover
from mpiwait.hosts.hostfile import (
    Host,
    count_hosts,
    dedupe,
    parse_discover_script,
    parse_host_lines,
    parse_hostfile,
    parse_hosts_option,
)
from mpiwait.hosts.selfname import SelfNames
from mpiwait.hosts.textfile import read_optional_text_file
from mpiwait.settings import DISCOVER_EXEC_TIMEOUT, Settings

__all__ = ["Host", "HostSources", "SelfNames", "Snapshot", "rereader"]


@dataclass(frozen=True)
class Snapshot:
    """What the sources said at one moment."""

    hosts: tuple[Host, ...]  # all sources, each host once (first wins), self removed
    skipped_self: tuple[str, ...]  # names dropped because they are this machine
    sources: tuple[str, ...]  # e.g. "/etc/mpi/hostfile (4 hosts)"; absent defaults not listed

    @property
    def names(self) -> tuple[str, ...]:
        """The hosts' names in order, this machine's entries left out."""
        return tuple(host.name for host in self.hosts)


@dataclass(frozen=True)
class HostSources:
    """Where hosts come from; ``read()`` is called again every second while waiting."""

    hostfile: Path | None
    hostfile_explicit: bool  # named by the user: missing is an error, not a skip
    discover: Path | None
    discover_explicit: bool
    discover_exec: bool  # run the discover file instead of parsing it
    hosts_option: str | None  # --hosts as given; when set, no file is read
    include_self: bool
    self_names: SelfNames
    exec_timeout: float = DISCOVER_EXEC_TIMEOUT
    # The texts last read and the snapshot they gave (the one mutable part, private to read()).
    _last: dict[tuple[str | None, ...], Snapshot] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str]) -> HostSources:
        """The sources the options name (the wait and --list-ready read the same ones)."""
        return cls(
            hostfile=settings.hostfile,
            hostfile_explicit=settings.hostfile_explicit,
            discover=settings.discover_hosts,
            discover_explicit=settings.discover_explicit,
            discover_exec=settings.discover_exec,
            hosts_option=settings.hosts_option,
            include_self=settings.include_self,
            self_names=SelfNames.from_system(environ),
            exec_timeout=DISCOVER_EXEC_TIMEOUT,
        )

    def read(self) -> Snapshot:
        """Read every source now; InputError when one is unreadable or malformed.

        Called every second while waiting, so the parse is skipped while every source reads the
        same as last time (the snapshot depends on nothing else): parsing a hostfile and a
        discover_hosts.sh of 1000 hosts takes ~25 ms, ~8% of the client CPU of a 1000-host
        wait. A --discover-exec script is still run every time; only its output is compared."""
        if self.hosts_option is not None:
            texts: tuple[str | None, ...] = (self.hosts_option,)
        else:
            texts = (self._hostfile_text(), self._discover_text())
        snapshot = self._last.get(texts)
        if snapshot is None:
            snapshot = self._parse(texts)
            self._last.clear()
            self._last[texts] = snapshot
        return snapshot

    def _hostfile_text(self) -> str | None:
        if self.hostfile is None:
            return None
        return read_optional_text_file(self.hostfile, "hostfile", self.hostfile_explicit)

    def _discover_text(self) -> str | None:
        path = self.discover
        if path is None:
            return None
        if self.discover_exec:
            # Checked first because a missing #! interpreter also fails with ENOENT.
            if not os.path.lexists(path):
                if self.discover_explicit:
                    raise InputError(f"discover script {path}: does not exist")
                return None
            return run_discover(path, self.exec_timeout)
        return read_optional_text_file(path, "discover file", self.discover_explicit)

    def _parse(self, texts: tuple[str | None, ...]) -> Snapshot:
        found: list[Host] = []
        sources: list[str] = []
        if self.hosts_option is not None:
            hosts = parse_hosts_option(self.hosts_option)
            found += hosts
            sources.append(f"--hosts ({count_hosts(len(hosts))})")
        else:
            hostfile_text, discover_text = texts
            if hostfile_text is not None:
                hosts = parse_hostfile(hostfile_text, str(self.hostfile))
                found += hosts
                sources.append(f"{self.hostfile} ({count_hosts(len(hosts))})")
            if discover_text is not None:
                if self.discover_exec:
                    hosts = parse_host_lines(discover_text, f"{self.discover} (exec)")
                    sources.append(f"{self.discover} (exec, {count_hosts(len(hosts))})")
                else:
                    hosts = parse_discover_script(discover_text, str(self.discover))
                    sources.append(f"{self.discover} ({count_hosts(len(hosts))})")
                found += hosts
        kept: list[Host] = []
        skipped: list[str] = []
        for host in dedupe(found):
            if not self.include_self and self.self_names.is_self(host.name):
                skipped.append(host.name)
            else:
                kept.append(host)
        return Snapshot(tuple(kept), tuple(skipped), tuple(sources))


def rereader(
    sources: HostSources, first: tuple[str, ...], warn: Callable[[str], None]
) -> Callable[[], tuple[tuple[str, ...], tuple[str, ...]]]:
    """The waiting loop's once-a-second ``sources.read()``: (every name, this machine's
    included, and the sources' descriptions), tolerant of passing failures."""
    last: list[tuple[tuple[str, ...], tuple[str, ...]]] = [(first, ())]
    reported: set[str] = set()

    def read_hosts() -> tuple[tuple[str, ...], tuple[str, ...]]:
        try:
            snapshot = sources.read()
        except InputError as exc:
            # The sources read fine at the start; a discover script that failed once or a
            # file caught mid-rewrite must not end a wait that is going well. Keep the last
            # good list (hosts once listed stay waited for anyway) and try again next time.
            if exc.message not in reported:
                reported.add(exc.message)
                warn(f"warning: keeping the hosts read before: {exc.message}")
            return last[0]
        last[0] = (snapshot.names + snapshot.skipped_self, snapshot.sources)
        return last[0]

    return read_hosts
