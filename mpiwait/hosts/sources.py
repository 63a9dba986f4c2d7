"""Which hosts to wait for: the sources the options name (hostfile, discover_hosts.sh, or
``--hosts``), read together into one snapshot, again every second while waiting.

The pieces live next door, one job each: hostfile.py (the formats, pure), textfile.py
(reading a file safely), discover.py (running a discover script), selfname.py (which names
are this machine). The CLI imports it on every start, the worker role too: it must not import
paramiko or click.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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
from mpiwait.settings import DISCOVER_EXEC_TIMEOUT, SourceOptions

__all__ = ["Host", "HostReader", "HostSources", "SelfNames", "Snapshot"]

# What to do when no source exists: the operator mounts /etc/mpi in the launcher's main
# container only, so an initContainer has to mount it itself.
NO_SOURCE_HINT = (
    "mount the mpi-job-config volume at /etc/mpi (an initContainer must mount it itself), "
    "or pass --hostfile / --hosts"
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the sources said at one moment."""

    hosts: tuple[Host, ...]  # all sources, each host once (first wins), self removed
    skipped_self: tuple[str, ...]  # names dropped because they are this machine (no login)
    sources: tuple[str, ...]  # e.g. "/etc/mpi/hostfile (4 hosts)"; absent defaults not listed

    @property
    def names(self) -> tuple[str, ...]:
        """The hosts' names in order, this machine's entries left out."""
        return tuple(host.name for host in self.hosts)

    @property
    def waited(self) -> tuple[str, ...]:
        """Every name the wait waits for: this machine's entries too (their name must resolve)."""
        return self.names + self.skipped_self


@dataclass(frozen=True, slots=True)
class HostSources:
    """Where hosts come from; ``read()`` is called again every second while waiting."""

    options: SourceOptions
    self_names: SelfNames
    exec_timeout: float = DISCOVER_EXEC_TIMEOUT
    # The texts last read and the snapshot they gave (the one mutable part, private to read()).
    _last: dict[tuple[str | None, ...], Snapshot] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    @classmethod
    def from_options(cls, options: SourceOptions, environ: Mapping[str, str]) -> HostSources:
        """The sources the options name (the wait and --list-ready read the same ones)."""
        return cls(options, SelfNames.from_system(environ), DISCOVER_EXEC_TIMEOUT)

    @property
    def hostfile(self) -> Path | None:
        return self.options.hostfile

    @property
    def discover(self) -> Path | None:
        return self.options.discover_hosts

    @property
    def hosts_option(self) -> str | None:
        return self.options.hosts_option

    def found_none(self, snapshot: Snapshot) -> bool:
        """Whether ``snapshot`` found no source at all (no --hosts, no file)."""
        return self.hosts_option is None and not snapshot.sources

    def no_source_error(self) -> InputError:
        """The error when no source exists (the wait's and --list-ready's)."""
        return InputError(
            f"no host source: neither {self.hostfile} nor {self.discover} exists "
            "and --hosts is not given",
            hint=NO_SOURCE_HINT,
        )

    def read(self) -> Snapshot:
        """Read every source now; InputError when one is unreadable or malformed.

        Called every second while waiting, so the parse is skipped while every source reads the
        same as last time (the snapshot depends on nothing else; docs/design-decisions.md). A
        --discover-exec script is still run every time; only its output is compared."""
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
        return read_optional_text_file(self.hostfile, "hostfile", self.options.hostfile_explicit)

    def _discover_text(self) -> str | None:
        path = self.discover
        if path is None:
            return None
        if self.options.discover_exec:
            # Checked first because a missing #! interpreter also fails with ENOENT.
            if not os.path.lexists(path):
                if self.options.discover_explicit:
                    raise InputError(f"discover script {path}: does not exist")
                return None
            return run_discover(path, self.exec_timeout)
        return read_optional_text_file(path, "discover file", self.options.discover_explicit)

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
                if self.options.discover_exec:
                    hosts = parse_host_lines(discover_text, f"{self.discover} (exec)")
                    sources.append(f"{self.discover} (exec, {count_hosts(len(hosts))})")
                else:
                    hosts = parse_discover_script(discover_text, str(self.discover))
                    sources.append(f"{self.discover} ({count_hosts(len(hosts))})")
                found += hosts
        kept: list[Host] = []
        skipped: list[str] = []
        for host in dedupe(found):
            if self.self_names.is_self(host.name):
                host = replace(host, is_self=True)
                if not self.options.include_self:
                    skipped.append(host.name)
                    continue
            kept.append(host)
        return Snapshot(tuple(kept), tuple(skipped), tuple(sources))


class HostReader:
    """The waiting loop's once-a-second ``sources.read()``: (every name, this machine's
    included, and the sources' descriptions), tolerant of passing failures. It remembers which
    names are this machine, as the sources decided, for the attempts and the launch."""

    def __init__(self, sources: HostSources, first: Snapshot, warn: Callable[[str], None]):
        self._sources = sources
        self._warn = warn
        self._reported: set[str] = set()
        self._last: tuple[tuple[str, ...], tuple[str, ...]] = (first.waited, first.sources)
        self._noted: Snapshot | None = None
        # Both only grow, in the loop's thread, before the loop learns of a name: an attempt
        # (on a probe thread) always finds its host's entry.
        self._self: set[str] = set()
        self._no_login: set[str] = set()
        self._note(first)

    def _note(self, snapshot: Snapshot) -> None:
        if snapshot is self._noted:  # the sources read as last time (they cache their parse)
            return
        self._noted = snapshot
        self._self.update(host.name for host in snapshot.hosts if host.is_self)
        self._self.update(snapshot.skipped_self)
        self._no_login.update(snapshot.skipped_self)

    def is_self(self, name: str) -> bool:
        """Whether the sources found that ``name`` is this machine."""
        return name in self._self

    def skips_login(self, name: str) -> bool:
        """This machine's entry, not put through the full check (no --include-self)."""
        return name in self._no_login

    def __call__(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        try:
            snapshot = self._sources.read()
        except InputError as exc:
            # A discover script that failed once or a file caught mid-rewrite must not end a
            # wait that is going well: keep the last good list and read again next time.
            if exc.message not in self._reported:
                self._reported.add(exc.message)
                self._warn(f"warning: keeping the hosts read before: {exc.message}")
            return self._last
        self._note(snapshot)
        self._last = (snapshot.waited, snapshot.sources)
        return self._last
