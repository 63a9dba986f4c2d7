"""Property tests for mpiwait.hosts.hostfile (and SelfNames): no input crashes the parsers;
valid hosts round-trip."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from hypothesis import example, given
from hypothesis import strategies as st

from mpiwait.errors import InputError
from mpiwait.hosts.hostfile import (
    MAX_SLOTS,
    Host,
    parse_discover_script,
    parse_host_lines,
    parse_hostfile,
    parse_hosts_option,
    validate_host,
)
from mpiwait.hosts.selfname import SelfNames

SRC = "/etc/mpi/hostfile"

Parser = Callable[[str, str], "list[Host]"]
PARSERS: list[Parser] = [parse_hostfile, parse_discover_script, parse_host_lines]

# Text made of the characters the grammars care about, so that random input often gets deep
# into the parsers instead of failing on its first character.
GRAMMAR_TOKENS = [
    *"aZ09-.:[]%#=_ \t\r\n\"'$;`\\@fe",
    "slots",
    "max_slots",
    "echo ",
    "\ufeff",
    "::1",
]
GRAMMAR_TEXT = st.lists(st.sampled_from(GRAMMAR_TOKENS), max_size=60).map("".join)
ANY_TEXT = st.text(max_size=200)

_NUMERIC_LAST_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")


_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _dns_names() -> st.SearchStrategy[str]:
    # Built from characters rather than st.from_regex, which is several times slower.
    edge = st.sampled_from(_ALNUM)
    middle = st.text(alphabet=_ALNUM + "-", max_size=61)
    label = st.one_of(edge, st.builds(lambda a, m, b: a + m + b, edge, middle, edge))
    labels = st.lists(label, min_size=1, max_size=5)
    names = st.builds(
        lambda parts, dot: ".".join(parts) + ("." if dot else ""), labels, st.booleans()
    )
    return names.filter(
        lambda n: (
            len(n.rstrip(".")) <= 253
            and _NUMERIC_LAST_LABEL.fullmatch(n.rstrip(".").rsplit(".", 1)[-1]) is None
        )
    )


def _ipv6_spellings(address: ipaddress.IPv6Address) -> st.SearchStrategy[str]:
    return st.sampled_from([address.compressed, address.exploded, address.compressed.upper()])


HOST_NAMES = st.one_of(
    _dns_names(),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).flatmap(_ipv6_spellings),
)
SLOTS = st.one_of(st.none(), st.integers(min_value=1, max_value=MAX_SLOTS))


def _key(name: str) -> str:
    """Independent of the module's own: when two names are the same host."""
    if ":" in name:
        return ipaddress.IPv6Address(name).compressed
    return name.lower()


HOST_LISTS = st.lists(
    st.tuples(HOST_NAMES, SLOTS), min_size=1, max_size=8, unique_by=lambda h: _key(h[0])
)
BLANKS = st.sampled_from([" ", "\t", "  ", " \t "])


def _is_ipv6(name: str) -> bool:
    return ":" in name


def _spec(name: str, slots: int | None, bracket: bool) -> str:
    """HOST[:SLOTS] as Intel MPI, MPICH and Horovod write it (IPv6 in brackets for slots)."""
    host = f"[{name}]" if _is_ipv6(name) and (slots is not None or bracket) else name
    return host if slots is None else f"{host}:{slots}"


def _check(parsed: list[Host], expected: list[tuple[str, int | None]]) -> None:
    assert [(h.name, h.slots) for h in parsed] == expected


# --- never anything but InputError ---------------------------------------------------------


def _only_input_error(parse: Callable[[], list[Host]], source: str) -> None:
    try:
        hosts = parse()
    except InputError as error:
        message = str(error)
        assert message.startswith(f"{source}:" if source != "--hosts" else "--hosts: ")
        assert "\n" not in message and "\r" not in message
        assert len(message) < 600
    else:
        for host in hosts:
            assert validate_host(host.name), host
            assert host.slots is None or 1 <= host.slots <= MAX_SLOTS
            assert not host.name.startswith("-")
        assert len({_key(h.name) for h in hosts}) == len(hosts)


@given(st.one_of(GRAMMAR_TEXT, ANY_TEXT))
@example("w1;rm -rf /\n")
@example("\ufeff\r\n#!/bin/sh\r\necho 'x'\r\n")
@example("[")
@example("host:" + "9" * 5000)  # beyond Python's int() digit limit
def test_file_parsers_raise_only_input_error(text: str) -> None:
    for parse in PARSERS:
        _only_input_error(lambda parse=parse: parse(text, SRC), SRC)  # type: ignore[misc]


@given(st.one_of(GRAMMAR_TEXT, ANY_TEXT))
@example(",,,")
@example("[::1,h1")
def test_hosts_option_raises_only_input_error(text: str) -> None:
    _only_input_error(lambda: parse_hosts_option(text), "--hosts")


@given(ANY_TEXT)
def test_validate_host_is_total(text: str) -> None:
    assert validate_host(text) in (True, False)


@given(st.one_of(GRAMMAR_TEXT, ANY_TEXT), st.frozensets(st.one_of(HOST_NAMES, ANY_TEXT)))
def test_is_self_is_total(host: str, names: frozenset[str]) -> None:
    assert SelfNames(names).is_self(host) in (True, False)


# --- round trips ---------------------------------------------------------------------------


@given(HOST_NAMES)
def test_generated_names_are_valid(name: str) -> None:
    assert validate_host(name)


@given(
    HOST_LISTS,
    st.sampled_from(["slots", "count", "cpu"]),
    BLANKS,
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.booleans(),
)
def test_openmpi_hostfile_round_trip(
    hosts: list[tuple[str, int | None]],
    key: str,
    blank: str,
    newline: str,
    bom: bool,
    comments: bool,
) -> None:
    lines = ["# written by a test"] if comments else []
    for name, slots in hosts:
        line = name if slots is None else f"{name}{blank}{key}={slots}"
        lines.append(f"{line}{blank}# note" if comments else line)
        if comments:
            lines.append("")
    text = ("\ufeff" if bom else "") + newline.join(lines) + newline
    _check(parse_hostfile(text, SRC), hosts)


@given(HOST_LISTS, st.booleans(), st.sampled_from(["\n", "\r\n"]))
def test_colon_hostfile_round_trip(
    hosts: list[tuple[str, int | None]], bracket: bool, newline: str
) -> None:
    text = newline.join(_spec(name, slots, bracket) for name, slots in hosts)
    _check(parse_hostfile(text, SRC), hosts)


@given(HOST_LISTS, st.sampled_from(["", "'", '"']), st.booleans(), st.booleans())
def test_discover_script_round_trip(
    hosts: list[tuple[str, int | None]], quote: str, bracket: bool, shebang: bool
) -> None:
    lines = ["#!/bin/sh"] if shebang else []
    lines += [f"echo {quote}{_spec(name, slots, bracket)}{quote}" for name, slots in hosts]
    _check(parse_discover_script("\n".join(lines) + "\n", SRC), hosts)


@given(HOST_LISTS, st.booleans())
def test_host_lines_round_trip(hosts: list[tuple[str, int | None]], bracket: bool) -> None:
    text = "".join(f"{_spec(name, slots, bracket)}\n" for name, slots in hosts)
    _check(parse_host_lines(text, f"{SRC} (exec)"), hosts)


@given(HOST_LISTS, st.booleans(), BLANKS)
def test_hosts_option_round_trip(
    hosts: list[tuple[str, int | None]], bracket: bool, blank: str
) -> None:
    value = ",".join(f"{blank}{_spec(name, slots, bracket)}" for name, slots in hosts)
    _check(parse_hosts_option(value), hosts)


@given(HOST_LISTS, st.data())
def test_duplicates_collapse_to_the_first(
    hosts: list[tuple[str, int | None]], data: st.DataObject
) -> None:
    # Repeat some hosts, with other slots and other letter case; the first mention must win.
    repeats = data.draw(st.lists(st.sampled_from(hosts), max_size=8))
    lines = [_spec(name, slots, False) for name, slots in hosts]
    lines += [_spec(name.swapcase(), data.draw(SLOTS), False) for name, _ in repeats]
    _check(parse_hostfile("\n".join(lines), SRC), hosts)
