"""Which hosts passed a check recently, remembered between runs of ``mpiwait --list-ready``.

horovodrun runs its discovery script every second; a host that passed recently, and whose name
still resolves to the addresses it had then, is listed again without a new login
(modes/list_ready.py; why: docs/design-decisions.md). The memory is one small JSON file in a
directory only this uid can write (cachedir.py); where none is usable, every call checks every
host. A stale or unreadable file is never an error: it is the same as an empty one."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mpiwait.settings import LIST_READY_ABANDONED_AFTER, LIST_READY_DUE_EVERY

# A file far larger than any real job's entries is not ours to parse.
_MAX_BYTES = 4 * 1024 * 1024
_VERSION = 1


def fingerprint(values: Sequence[object]) -> str:
    """A short stable name for the settings a result depends on (not a secret: zlib's two
    checksums, 64 bits, where hashlib would load OpenSSL on every call)."""
    data = json.dumps([str(v) for v in values]).encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def file_signatures(paths: Sequence[str]) -> list[object]:
    """What identifies the current content of each file (a directory: of each entry in it),
    without reading it: a changed ssh config or a rotated key then means "check again"."""
    out: list[object] = []
    for path in paths:
        try:
            info = os.stat(path)  # follows the symlinks of a Kubernetes Secret volume
        except OSError:
            out.append((path, None))
            continue
        out.append((path, info.st_ino, info.st_size, info.st_mtime_ns))
        if stat.S_ISDIR(info.st_mode):
            with contextlib.suppress(OSError):
                entries = sorted(e for e in os.listdir(path) if not e.startswith(".."))
                out += file_signatures([os.path.join(path, e) for e in entries][:256])
    return out


@dataclass(frozen=True, slots=True)
class Entry:
    """One host that passed: when (CLOCK_MONOTONIC), and where its name pointed then."""

    at: float
    address: str  # what was looked up (ssh config's HostName, else the name)
    port: int
    addresses: tuple[str, ...]  # the answer, sorted


@dataclass(frozen=True, slots=True)
class ReadyCache:
    """host -> Entry, in one file named after the settings the passes depend on."""

    path: str | None  # None: remember nothing
    ttl: float

    @classmethod
    def at(cls, directory: str | None, settings_key: str, ttl: float) -> ReadyCache:
        if directory is None or ttl <= 0:
            return cls(None, ttl)
        return cls(os.path.join(directory, f"ready-{settings_key}.json"), ttl)

    def load(self) -> dict[str, Entry]:
        if self.path is None:
            return {}
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except OSError:
            return {}
        try:
            info = os.fstat(fd)
            if (
                not stat.S_ISREG(info.st_mode)
                or info.st_uid != os.getuid()
                or info.st_size > _MAX_BYTES
            ):
                return {}
            data = os.read(fd, _MAX_BYTES + 1)
        except OSError:
            return {}
        finally:
            os.close(fd)
        try:
            record = json.loads(data)
            if record.get("version") != _VERSION:
                return {}
            return {
                str(host): Entry(float(at), str(address), int(port), tuple(map(str, addresses)))
                for host, (at, address, port, addresses) in record["hosts"].items()
            }
        except (ValueError, TypeError, KeyError, AttributeError):
            return {}

    def fresh(self, entry: Entry | None, host: str, now: float) -> bool:
        """Whether ``host`` passed recently enough to be spared a login.

        Each host keeps its own period, between half the TTL and the TTL, so that hosts which
        came up together do not all come due in one call; due times are then rounded down to
        a multiple of ``LIST_READY_DUE_EVERY`` seconds, so that the few hosts due in a row of
        calls are checked together by one call, and the calls in between load no SSH code at all.
        """
        if entry is None or self.path is None:
            return False
        spread = 0.5 + 0.5 * (zlib.crc32(host.encode()) / 0xFFFFFFFF)
        due = entry.at + self.ttl * spread
        if self.ttl >= 4 * LIST_READY_DUE_EVERY:
            due = max(entry.at + self.ttl / 4, due // LIST_READY_DUE_EVERY * LIST_READY_DUE_EVERY)
        return entry.at <= now < due

    def save(self, hosts: Mapping[str, Entry]) -> None:
        """Replace the file atomically; failures are ignored (the next call checks again)."""
        if self.path is None:
            return
        directory = os.path.dirname(self.path)
        record = {host: [e.at, e.address, e.port, list(e.addresses)] for host, e in hosts.items()}
        data = json.dumps({"version": _VERSION, "hosts": record}).encode()
        # A name of our own in a directory only we can write: O_EXCL is enough (no tempfile
        # module to import on every call).
        tmp = os.path.join(directory, f".ready-{os.getpid()}-{threading.get_ident()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _prune(directory, self.path)


def _prune(directory: str, keep: str) -> None:
    """Remove this directory's abandoned files (ours alone: the directory is 0700 and ours),
    --check tcp's accounts (probe/pace.py) among them: idle that long, they hold nothing."""
    horizon = time.time() - LIST_READY_ABANDONED_AFTER
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.path == keep or not entry.name.startswith(("ready-", ".ready-", "pace-")):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_mtime < horizon:
                    os.unlink(entry.path)


def now() -> float:
    # CLOCK_MONOTONIC is the same for every process of one boot and never jumps back; an entry
    # from "the future" (another boot) simply is not fresh.
    return time.monotonic()
