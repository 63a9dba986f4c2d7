"""Which hosts to wait for: read from hostfiles, discover_hosts.sh, or ``--hosts``; validated.

Every name that leaves this module has passed ``validate_host``: names end up as arguments to
ssh and mpirun, so anything that is not a DNS name or an IP literal is refused here, with the
file and line that holds it, before it can be mistaken for an option or shell syntax.

Kept cheap to import (no paramiko, no click; subprocess and socket only when needed) because
the CLI imports it on every start, including the worker role that exits at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mpiwait.errors import InputError
from mpiwait.settings import DISCOVER_EXEC_TIMEOUT, SELF_LOOKUP_TIMEOUT, Settings

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_SLOTS",
    "Host",
    "HostSources",
    "SelfNames",
    "Snapshot",
    "parse_discover_script",
    "parse_host_lines",
    "parse_hostfile",
    "parse_hosts_option",
    "read_text_file",
    "rereader",
    "validate_host",
]

# No real node has more; the bound keeps a typo (an extra zero run) from passing, and keeps
# int() away from Python's limit on converting very long digit strings.
MAX_SLOTS = 1_000_000

# A hostfile for 100k hosts is a few MB; anything far larger is the wrong file, and reading it
# every second while waiting would cost real time.
MAX_INPUT_BYTES = 16 * 1024 * 1024

# Long enough to recognise the line, short enough that the error stays one readable line.
_SHOW_LIMIT = 80

_BOM = "\ufeff"

# Open MPI's hostfile lexer treats form feed and vertical tab as blanks too.
_BLANKS = " \t\f\v"
_BLANK_RUN = re.compile(r"[ \t\f\v]+")
_EQUALS = re.compile(r"[ \t\f\v]*=[ \t\f\v]*")

_IPV4 = re.compile(
    r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9.\-]")
# glibc's getaddrinfo reads a name such as "10.1", "1234" or "0x7f.1" as an IPv4 address
# (inet_aton), so a name whose last label is numeric would not be looked up as a name at all.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")
# Interface names and numeric zone ids; nothing a shell or ssh could read as syntax.
_IPV6_SCOPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_DIGITS = re.compile(r"[0-9]+")

# Open MPI's synonyms (hostfile_lex.l): these set the slot count ...
_SLOT_KEYS = frozenset({"slots", "count", "cpu"})
# ... and these the upper limit, which mpiwait only checks for sanity.
_MAX_SLOT_KEYS = frozenset(
    {
        "max_slots", "max-slots", "slots_max", "slots-max",
        "max_cpu", "max-cpu", "cpu_max", "cpu-max",
        "max_count", "max-count", "count_max", "count-max",
    }
)  # fmt: skip

# One `echo` of one word, as mpi-operator writes it; a trailing comment is allowed where sh
# would see one (a '#' that starts a word).
_ECHO = re.compile(r"echo[ \t]+(?P<word>\"[^\"]*\"|'[^']*'|[^ \t\"'#][^ \t\"']*)[ \t]*(?:#.*)?")
# Characters whose meaning sh would change (expansion, globbing, redirection, a second
# command): such a line is not plain data, and only running it would tell its output.
_SH_SPECIAL_UNQUOTED = frozenset("$`\\;&|<>()*?~{}!")
_SH_SPECIAL_DOUBLE_QUOTED = frozenset("$`\\")
_NO_COUNT_AFTER_COLON = "missing slot count after ':'"
_DISCOVER_SHAPE = "is not `echo HOST[:SLOTS]`; use --discover-exec to run the script instead"


@dataclass(frozen=True)
class Host:
    """One host to wait for, and where it was named (for messages)."""

    name: str  # as written, IPv6 without brackets
    slots: int | None  # None when the source gives none
    source: str  # "PATH:LINENO", "PATH (exec):LINENO" or "--hosts"


class _Problem(Exception):
    """What is wrong with one item; the caller adds where it was found."""


def _show(text: str, limit: int = _SHOW_LIMIT) -> str:
    """``text`` repr'd (so control characters are visible) and cut to about ``limit``."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def _is_ipv4(name: str) -> bool:
    # Not ipaddress: before 3.9.5 it accepted leading zeros, which inet_aton reads as octal.
    return _IPV4.fullmatch(name) is not None


def _split_ipv6(name: str) -> ipaddress.IPv6Address | None:
    """The address if ``name`` is an IPv6 literal (optionally with a %scope), else None."""
    address, percent, scope = name.partition("%")
    if percent and _IPV6_SCOPE.fullmatch(scope) is None:
        return None
    if ":" not in address:
        return None
    try:
        return ipaddress.IPv6Address(address)
    except ValueError:
        return None


def _is_ipv6(name: str) -> bool:
    return _split_ipv6(name) is not None


def _is_ip(name: str) -> bool:
    return _is_ipv4(name) or _is_ipv6(name)


def _name_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS name or IP literal, or None when it is one."""
    if not name:
        return "empty host name"
    if _is_ip(name):
        return None
    bad = _NOT_NAME_CHAR.search(name)
    if bad is not None:
        char = bad.group()
        if char == ":":
            return f"{_show(name, 60)} is not a valid IPv6 address or host name"
        if char == "@":
            return (
                f"host name {_show(name, 60)} contains '@' "
                "(give the user with --user or in ssh_config)"
            )
        return f"host name {_show(name, 60)} contains {char!r}"
    dotless = name[:-1] if name.endswith(".") else name
    if len(dotless) > 253:
        return f"host name {_show(name, 60)} is longer than 253 characters"
    labels = dotless.split(".")
    for label in labels:
        if not label:
            return f"host name {_show(name, 60)} has an empty label"
        if len(label) > 63:
            return f"host name {_show(name, 60)} has a label longer than 63 characters"
        if _LABEL.fullmatch(label) is None:
            return f"host name {_show(name, 60)} has a label that starts or ends with '-'"
    if _NUMERIC_LABEL.fullmatch(labels[-1]) is not None:
        return f"{_show(name, 60)} is neither an IPv4 address nor a host name (numeric last label)"
    return None


def validate_host(name: str) -> bool:
    """True for an RFC 1123 DNS name, an IPv4 dotted quad or an IPv6 literal; False otherwise."""
    return _name_problem(name) is None


def _check_name(name: str) -> str:
    problem = _name_problem(name)
    if problem is not None:
        raise _Problem(problem)
    return name


def _parse_count(text: str, what: str, missing: str) -> int:
    if not text:
        raise _Problem(missing)
    if _DIGITS.fullmatch(text) is None or len(text.lstrip("0")) > len(str(MAX_SLOTS)):
        value = -1
    else:
        value = int(text)
    if not 1 <= value <= MAX_SLOTS:
        raise _Problem(
            f"{what} must be a whole number from 1 to {MAX_SLOTS}, not {_show(text, 40)}"
        )
    return value


def _parse_spec(token: str) -> tuple[str, int | None]:
    """``HOST``, ``HOST:SLOTS``, ``IPV6``, ``[IPV6]`` or ``[IPV6]:SLOTS`` -> (name, slots)."""
    if token.startswith("["):
        close = token.find("]")
        if close < 0:
            raise _Problem("'[' without a closing ']'")
        inside, rest = token[1:close], token[close + 1 :]
        if not _is_ipv6(inside):
            raise _Problem(f"{_show(inside, 60)} in brackets is not an IPv6 address")
        if not rest:
            return inside, None
        if not rest.startswith(":"):
            raise _Problem(f"unexpected {_show(rest, 40)} after ']'")
        return inside, _parse_count(rest[1:], "slot count", _NO_COUNT_AFTER_COLON)
    # A whole token that is an IPv6 address has no slot count: "fe80::1:4" is an address.
    if _is_ipv6(token):
        return token, None
    name, colon, slots = token.rpartition(":")
    if not colon:
        return _check_name(token), None
    if ":" in name:
        raise _Problem(
            f"{_show(token, 60)} is not a valid IPv6 address "
            "(give an IPv6 address a slot count as [ADDRESS]:SLOTS)"
        )
    return _check_name(name), _parse_count(slots, "slot count", _NO_COUNT_AFTER_COLON)


def _parse_attributes(fields: list[str], slots: int | None) -> int | None:
    """Open MPI's ``slots=N`` / ``max_slots=N`` (and synonyms) after the host name."""
    max_slots: int | None = None
    for item in fields:
        key, equals, value = item.partition("=")
        if not equals:
            raise _Problem(f"unexpected {_show(item, 40)} after the host name (expected slots=N)")
        if key in _SLOT_KEYS:
            if slots is not None:
                raise _Problem("the slot count is given twice")
            slots = _parse_count(value, key, f"missing value after '{key}='")
        elif key in _MAX_SLOT_KEYS:
            if max_slots is not None:
                raise _Problem("the maximum slot count is given twice")
            max_slots = _parse_count(value, key, f"missing value after '{key}='")
        else:
            raise _Problem(
                f"unsupported attribute {_show(key, 40)} (mpiwait understands slots=, count=, "
                "cpu= and max_slots=)"
            )
    if max_slots is not None and slots is not None and max_slots < slots:
        raise _Problem(f"max_slots={max_slots} is less than slots={slots}")
    return slots


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) with a BOM and CR line ends removed.

    Only "\\n" ends a line (not str.splitlines' form feeds and Unicode separators), so line
    numbers match what an editor or ``sed -n Np`` shows.
    """
    if text.startswith(_BOM):
        text = text[1:]
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line[:-1] if line.endswith("\r") else line


def _error(source: str, lineno: int, problem: str, line: str) -> InputError:
    return InputError(f"{source}:{lineno}: {problem}: {_show(line)}")


def _host_key(name: str) -> str:
    """What makes two names the same host: DNS is case-insensitive; IPv6 has many spellings."""
    address = _split_ipv6(name)
    if address is not None:
        _, percent, scope = name.partition("%")
        return f"{address.compressed}{percent}{scope}"
    return name.lower()


def _dedupe(hosts: Iterable[Host]) -> list[Host]:
    """Hosts in order, each once; the first mention wins (its slots and source)."""
    seen: set[str] = set()
    unique: list[Host] = []
    for host in hosts:
        key = _host_key(host.name)
        if key not in seen:
            seen.add(key)
            unique.append(host)
    return unique


def parse_hostfile(text: str, source: str) -> list[Host]:
    """An Open MPI, Intel MPI, MPICH or Horovod hostfile; raises InputError on any bad line."""
    hosts: list[Host] = []
    for lineno, line in _lines(text):
        # Open MPI's lexer starts a comment at any '#', and '#' is never part of a host name.
        content = _EQUALS.sub("=", line.split("#", 1)[0]).strip(_BLANKS)
        if not content:
            continue
        fields = _BLANK_RUN.split(content)
        try:
            name, slots = _parse_spec(fields[0])
            slots = _parse_attributes(fields[1:], slots)
        except _Problem as problem:
            raise _error(source, lineno, str(problem), line) from None
        hosts.append(Host(name, slots, f"{source}:{lineno}"))
    return _dedupe(hosts)


def _echo_word(line: str) -> str | None:
    """The text ``line`` would print if it is a plain one-word echo, else None."""
    match = _ECHO.fullmatch(line.strip(_BLANKS))
    if match is None:
        return None
    word = match.group("word")
    if word.startswith("'"):
        return word[1:-1]
    if word.startswith('"'):
        inner = word[1:-1]
        return None if _SH_SPECIAL_DOUBLE_QUOTED.intersection(inner) else inner
    # A leading '-' would be an option to echo, not a word it prints.
    if word.startswith("-") or _SH_SPECIAL_UNQUOTED.intersection(word):
        return None
    return word


def parse_discover_script(text: str, source: str) -> list[Host]:
    """mpi-operator's discover_hosts.sh, read as data (never run); InputError on other shapes."""
    hosts: list[Host] = []
    for lineno, line in _lines(text):
        stripped = line.strip(_BLANKS)
        if not stripped or stripped.startswith("#"):
            continue
        word = _echo_word(line)
        if word is None:
            raise InputError(f"{source}:{lineno}: {_show(line)} {_DISCOVER_SHAPE}")
        try:
            name, slots = _parse_spec(word)
        except _Problem as problem:
            raise _error(source, lineno, str(problem), line) from None
        hosts.append(Host(name, slots, f"{source}:{lineno}"))
    return _dedupe(hosts)


def parse_host_lines(text: str, source: str) -> list[Host]:
    """``HOST`` or ``HOST:SLOTS`` per line (a discover script's output, Horovod style)."""
    hosts: list[Host] = []
    for lineno, line in _lines(text):
        content = line.split("#", 1)[0].strip(_BLANKS)
        if not content:
            continue
        try:
            if _BLANK_RUN.search(content):
                raise _Problem("expected one HOST or HOST:SLOTS per line")
            name, slots = _parse_spec(content)
        except _Problem as problem:
            raise _error(source, lineno, str(problem), line) from None
        hosts.append(Host(name, slots, f"{source}:{lineno}"))
    return _dedupe(hosts)


def parse_hosts_option(value: str) -> list[Host]:
    """``--hosts "h1,h2:4,[fe80::1]:2"``; empty items are ignored, an empty list is an error."""
    hosts: list[Host] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            name, slots = _parse_spec(item)
        except _Problem as problem:
            raise InputError(f"--hosts: {problem}: {_show(item)}") from None
        hosts.append(Host(name, slots, "--hosts"))
    if not hosts:
        raise InputError("--hosts: the list is empty")
    return _dedupe(hosts)


class _Missing(Exception):
    """The file does not exist (a default path may be absent; the caller decides)."""


def _read_text(path: Path, what: str) -> str:
    def fail(reason: str) -> InputError:
        return InputError(f"{what} {path}: {reason}")

    # O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears;
    # it has no effect on the regular files we accept.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        raise _Missing from None
    except IsADirectoryError:
        raise fail("is a directory") from None
    except PermissionError:
        raise fail("permission denied") from None
    except OSError as error:
        raise fail((error.strerror or str(error)).lower()) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise fail("is a directory")
        if not stat.S_ISREG(info.st_mode):
            # A pipe could be read once, but sources are re-read every second.
            raise fail("is not a regular file")
        if info.st_size > MAX_INPUT_BYTES:
            raise fail(f"too large ({info.st_size} bytes; the limit is {MAX_INPUT_BYTES})")
        with os.fdopen(fd, "rb", closefd=True) as stream:
            fd = -1
            # One byte over the limit tells a file that grew after fstat from one that fits.
            data = stream.read(MAX_INPUT_BYTES + 1)
    except OSError as error:
        raise fail((error.strerror or str(error)).lower()) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise fail(f"too large (more than {MAX_INPUT_BYTES} bytes)")
    return _decode(data, fail)


def _decode(data: bytes, fail: Callable[[str], InputError]) -> str:
    if b"\0" in data:
        raise fail("looks binary (contains NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise fail(f"looks binary (not UTF-8: byte {error.start})") from None
    return text[1:] if text.startswith(_BOM) else text


def read_text_file(path: Path, *, what: str) -> str:
    """The UTF-8 text of a small input file (BOM removed); InputError saying why if not."""
    try:
        return _read_text(path, what)
    except _Missing:
        raise InputError(f"{what} {path}: does not exist") from None


def _read_optional(path: Path, what: str, explicit: bool) -> str | None:
    try:
        return _read_text(path, what)
    except _Missing:
        if explicit:
            raise InputError(f"{what} {path}: does not exist") from None
        return None


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(data: bytes) -> str:
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return _show(lines[-1].strip()) if lines else ""


def _run_discover(path: Path, timeout: float) -> str:
    """Run the discover script and return its stdout; InputError saying why if it fails."""
    import signal
    import subprocess

    def fail(reason: str) -> InputError:
        return InputError(f"discover script {path}: {reason}")

    try:
        # A new session puts the script and anything it starts in one process group, so a
        # timeout kills them all instead of leaving a grandchild holding our pipe open.
        process = subprocess.Popen(
            [os.path.abspath(path)],  # absolute: a bare name would be searched in $PATH
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except PermissionError:
        raise fail("cannot run it: permission denied (is it executable?)") from None
    except OSError as error:
        raise fail(f"cannot run it: {(error.strerror or str(error)).lower()}") from None
    with process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException as error:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
            if isinstance(error, subprocess.TimeoutExpired):
                raise fail(f"timed out after {timeout:g}s") from None
            raise
    if process.returncode != 0:
        if process.returncode < 0:
            reason = f"killed by {_signal_name(-process.returncode)}"
        else:
            reason = f"exited with status {process.returncode}"
        last = _last_line(stderr)
        raise fail(f"{reason}: {last}" if last else reason)
    return _decode(stdout, lambda reason: fail(f"its output {reason}"))


def _count(hosts: int) -> str:
    return f"{hosts} host" if hosts == 1 else f"{hosts} hosts"


def _normalize_name(name: str) -> str:
    name = name.strip().lower()
    if name.endswith("."):
        name = name[:-1]
    address = _split_ipv6(name)
    if address is not None:
        _, percent, scope = name.partition("%")
        return f"{address.compressed}{percent}{scope}"
    return name


def _fqdn_within(timeout: float) -> list[str]:
    """``[socket.getfqdn()]``, or ``[]`` when it fails or takes longer than ``timeout``.

    The lookup runs in a daemon thread: waiting for it in ``join`` can be interrupted by
    SIGTERM, waiting inside getaddrinfo for an unanswered DNS query cannot.
    """
    import socket
    import threading

    answer: list[str] = []

    def lookup() -> None:
        with contextlib.suppress(OSError):
            answer.append(socket.getfqdn())

    thread = threading.Thread(target=lookup, name="mpiwait-fqdn", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[:1]


@dataclass(frozen=True)
class SelfNames:
    """The names that mean "this machine", to leave the launcher out of the hosts to wait for."""

    names: frozenset[str]  # lower-cased, without a trailing dot

    def __post_init__(self) -> None:
        normalized = frozenset(n for n in map(_normalize_name, self.names) if n)
        object.__setattr__(self, "names", normalized)

    @classmethod
    def from_system(cls, environ: Mapping[str, str] | None = None) -> SelfNames:
        """The short hostname, the FQDN and $HOSTNAME (whichever are known)."""
        import socket

        env = os.environ if environ is None else environ
        found: list[str] = []
        # A machine whose name does not resolve still has the other names.
        with contextlib.suppress(OSError):
            found.append(socket.gethostname())
        found += _fqdn_within(SELF_LOOKUP_TIMEOUT)
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
        if _is_ip(name):
            return False
        first, dot, rest = name.partition(".")
        if not dot or not rest:
            return False
        return any(own.partition(".")[0] == first for own in self.names if not _is_ip(own))


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
    _last: dict = field(default_factory=dict, init=False, compare=False, repr=False)

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
        if self._last.get("texts") == texts:
            return self._last["snapshot"]
        snapshot = self._parse(texts)
        self._last.update(texts=texts, snapshot=snapshot)
        return snapshot

    def _hostfile_text(self) -> str | None:
        if self.hostfile is None:
            return None
        return _read_optional(self.hostfile, "hostfile", self.hostfile_explicit)

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
            return _run_discover(path, self.exec_timeout)
        return _read_optional(path, "discover file", self.discover_explicit)

    def _parse(self, texts: tuple[str | None, ...]) -> Snapshot:
        found: list[Host] = []
        sources: list[str] = []
        if self.hosts_option is not None:
            hosts = parse_hosts_option(self.hosts_option)
            found += hosts
            sources.append(f"--hosts ({_count(len(hosts))})")
        else:
            hostfile_text, discover_text = texts
            if hostfile_text is not None:
                hosts = parse_hostfile(hostfile_text, str(self.hostfile))
                found += hosts
                sources.append(f"{self.hostfile} ({_count(len(hosts))})")
            if discover_text is not None:
                if self.discover_exec:
                    hosts = parse_host_lines(discover_text, f"{self.discover} (exec)")
                    sources.append(f"{self.discover} (exec, {_count(len(hosts))})")
                else:
                    hosts = parse_discover_script(discover_text, str(self.discover))
                    sources.append(f"{self.discover} ({_count(len(hosts))})")
                found += hosts
        kept: list[Host] = []
        skipped: list[str] = []
        for host in _dedupe(found):
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
