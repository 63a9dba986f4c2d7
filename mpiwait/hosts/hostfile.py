"""The syntax of every host list mpiwait reads: hostfiles (Open MPI, MPICH, Intel MPI, Horovod),
mpi-operator's discover_hosts.sh read as data, a discover script's output and ``--hosts``.

Pure functions of text: no file, process or network is touched here. Every name that leaves
this module has passed ``validate_host``: names end up as arguments to ssh and mpirun, so
anything that is not a DNS name or an IP literal is refused here, with the file and line that
holds it, before it can be mistaken for an option or shell syntax.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from mpiwait.errors import InputError

__all__ = [
    "MAX_SLOTS",
    "Host",
    "count_hosts",
    "dedupe",
    "host_key",
    "hosts_word",
    "is_ip",
    "parse_discover_script",
    "parse_host_lines",
    "parse_hostfile",
    "parse_hosts_option",
    "repr_cut",
    "split_ipv6",
    "validate_host",
]

# No real node has more; the bound keeps a typo (an extra zero run) from passing, and keeps
# int() away from Python's limit on converting very long digit strings.
MAX_SLOTS = 1_000_000

# Long enough to recognise the line, short enough that the error stays one readable line.
_CUT_LIMIT = 80

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


@dataclass(frozen=True, slots=True)
class Host:
    """One host to wait for, and where it was named (for messages)."""

    name: str  # as written, IPv6 without brackets
    slots: int | None  # None when the source gives none
    source: str  # "PATH:LINENO", "PATH (exec):LINENO" or "--hosts"
    is_self: bool = False  # names this machine (decided once, when the sources are read)


class _Problem(Exception):
    """What is wrong with one item; the caller adds where it was found."""


def repr_cut(text: str, limit: int = _CUT_LIMIT) -> str:
    """``text`` repr'd (so control characters are visible) and cut to about ``limit``."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def _is_ipv4(name: str) -> bool:
    # Not ipaddress: before 3.9.5 it accepted leading zeros, which inet_aton reads as octal.
    return _IPV4.fullmatch(name) is not None


def split_ipv6(name: str) -> ipaddress.IPv6Address | None:
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
    return split_ipv6(name) is not None


def is_ip(name: str) -> bool:
    return _is_ipv4(name) or _is_ipv6(name)


def _name_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS name or IP literal, or None when it is one."""
    if not name:
        return "empty host name"
    if is_ip(name):
        return None
    bad = _NOT_NAME_CHAR.search(name)
    if bad is not None:
        char = bad.group()
        if char == ":":
            return f"{repr_cut(name, 60)} is not a valid IPv6 address or host name"
        if char == "@":
            return (
                f"host name {repr_cut(name, 60)} contains '@' "
                "(give the user with --user or in ssh_config)"
            )
        return f"host name {repr_cut(name, 60)} contains {char!r}"
    dotless = name[:-1] if name.endswith(".") else name
    if len(dotless) > 253:
        return f"host name {repr_cut(name, 60)} is longer than 253 characters"
    labels = dotless.split(".")
    for label in labels:
        if not label:
            return f"host name {repr_cut(name, 60)} has an empty label"
        if len(label) > 63:
            return f"host name {repr_cut(name, 60)} has a label longer than 63 characters"
        if _LABEL.fullmatch(label) is None:
            return f"host name {repr_cut(name, 60)} has a label that starts or ends with '-'"
    if _NUMERIC_LABEL.fullmatch(labels[-1]) is not None:
        return (
            f"{repr_cut(name, 60)} is neither an IPv4 address nor a host name (numeric last label)"
        )
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
            f"{what} must be a whole number from 1 to {MAX_SLOTS}, not {repr_cut(text, 40)}"
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
            raise _Problem(f"{repr_cut(inside, 60)} in brackets is not an IPv6 address")
        if not rest:
            return inside, None
        if not rest.startswith(":"):
            raise _Problem(f"unexpected {repr_cut(rest, 40)} after ']'")
        return inside, _parse_count(rest[1:], "slot count", _NO_COUNT_AFTER_COLON)
    # A whole token that is an IPv6 address has no slot count: "fe80::1:4" is an address.
    if _is_ipv6(token):
        return token, None
    name, colon, slots = token.rpartition(":")
    if not colon:
        return _check_name(token), None
    if ":" in name:
        raise _Problem(
            f"{repr_cut(token, 60)} is not a valid IPv6 address "
            "(give an IPv6 address a slot count as [ADDRESS]:SLOTS)"
        )
    return _check_name(name), _parse_count(slots, "slot count", _NO_COUNT_AFTER_COLON)


def _parse_attributes(fields: list[str], slots: int | None) -> int | None:
    """Open MPI's ``slots=N`` / ``max_slots=N`` (and synonyms) after the host name."""
    max_slots: int | None = None
    for item in fields:
        key, equals, value = item.partition("=")
        if not equals:
            raise _Problem(
                f"unexpected {repr_cut(item, 40)} after the host name (expected slots=N)"
            )
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
                f"unsupported attribute {repr_cut(key, 40)} (mpiwait understands slots=, count=, "
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
    return InputError(f"{source}:{lineno}: {problem}: {repr_cut(line)}")


def host_key(name: str) -> str:
    """What makes two names the same host: DNS is case-insensitive; IPv6 has many spellings."""
    address = split_ipv6(name)
    if address is not None:
        _, percent, scope = name.partition("%")
        return f"{address.compressed}{percent}{scope}"
    return name.lower()


def dedupe(hosts: Iterable[Host]) -> list[Host]:
    """Hosts in order, each once; the first mention wins (its slots and source)."""
    seen: set[str] = set()
    unique: list[Host] = []
    for host in hosts:
        key = host_key(host.name)
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
    return dedupe(hosts)


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
            raise InputError(f"{source}:{lineno}: {repr_cut(line)} {_DISCOVER_SHAPE}")
        try:
            name, slots = _parse_spec(word)
        except _Problem as problem:
            raise _error(source, lineno, str(problem), line) from None
        hosts.append(Host(name, slots, f"{source}:{lineno}"))
    return dedupe(hosts)


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
    return dedupe(hosts)


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
            raise InputError(f"--hosts: {problem}: {repr_cut(item)}") from None
        hosts.append(Host(name, slots, "--hosts"))
    if not hosts:
        raise InputError("--hosts: the list is empty")
    return dedupe(hosts)


def hosts_word(count: int) -> str:
    """``host`` or ``hosts``: the one plural every message about hosts uses."""
    return "host" if count == 1 else "hosts"


def count_hosts(count: int) -> str:
    """``1 host``, ``3 hosts``."""
    return f"{count} {hosts_word(count)}"
