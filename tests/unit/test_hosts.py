"""Unit tests for mpiwait.hosts (sources, hostfile, textfile, discover, selfname):
every input format, every malformed shape, every source."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mpiwait.errors import ExitCode, InputError
from mpiwait.hosts.hostfile import (
    Host,
    parse_discover_script,
    parse_host_lines,
    parse_hostfile,
    parse_hosts_option,
    validate_host,
)
from mpiwait.hosts.selfname import SelfNames
from mpiwait.hosts.sources import HostReader, HostSources, Snapshot
from mpiwait.hosts.textfile import MAX_INPUT_BYTES, read_text_file
from mpiwait.settings import DISCOVER_EXEC_TIMEOUT, SourceOptions

SRC = "/etc/mpi/hostfile"
DISCOVER = "/etc/mpi/discover_hosts.sh"
SHAPE = "is not `echo HOST[:SLOTS]`; use --discover-exec to run the script instead"


def pairs(hosts: list[Host]) -> list[tuple[str, int | None]]:
    return [(h.name, h.slots) for h in hosts]


def assert_one_line(error: InputError) -> None:
    assert "\n" not in str(error) and "\r" not in str(error)
    assert error.exit_code == ExitCode.USAGE


# --- validate_host -------------------------------------------------------------------------

VALID_HOSTS = [
    "w1",
    "pi-worker-0.pi.default.svc",
    "pi-worker-0.pi.default.svc.cluster.local.",  # absolute name: one trailing dot
    "UPPER.Case.Example",
    "a",
    "1a",  # RFC 1123 allows a leading digit
    "123.x1",  # numeric labels are fine except the last
    "a" * 63,
    ".".join(["a" * 63] * 3 + ["b" * 61]),  # exactly 253
    "10.0.0.1",
    "0.0.0.0",
    "255.255.255.255",
    "::1",
    "fe80::1",
    "FE80::AbCd",
    "2001:db8::1:2:3:4",
    "::ffff:10.0.0.1",
    "fe80::1%eth0",
    "fe80::1%2",
]

INVALID_HOSTS = [
    "",
    " ",
    "w1 ",
    "w1;rm",
    "w1|x",
    "$(id)",
    "`id`",
    "a_b",
    "-oProxyCommand=x",
    "w1-",
    "-w1",
    "a..b",
    ".a",
    ".",
    "a..",
    "a" * 64,
    ".".join(["a" * 63] * 3 + ["b" * 62]),  # 254
    "256.1.1.1",
    "1.2.3",
    "1234",
    "010.0.0.1",  # inet_aton would read 010 as octal
    "1.2.3.4.",
    "0x7f.1",
    "0x7f000001",
    "user@host",
    "host:22",
    ":::",
    "fe80::1%",
    "fe80::1%eth0;id",
    "fe80::g",
    "[::1]",
    "h\u00e9te",
    "w\x00",
    "w1\n",
    "caf\u0301e",
]


@pytest.mark.parametrize("name", VALID_HOSTS)
def test_validate_host_accepts(name: str) -> None:
    assert validate_host(name)


@pytest.mark.parametrize("name", INVALID_HOSTS)
def test_validate_host_rejects(name: str) -> None:
    assert not validate_host(name)


# --- parse_hostfile: accepted formats ------------------------------------------------------

HOSTFILE_OK = [
    pytest.param("w1\n", [("w1", None)], id="bare"),
    pytest.param("w1", [("w1", None)], id="no-final-newline"),
    pytest.param("w1 slots=4\n", [("w1", 4)], id="openmpi-slots"),
    pytest.param("w1 slots=4 max_slots=8\n", [("w1", 4)], id="openmpi-max_slots"),
    pytest.param("w1 slots=4 max-slots=4\n", [("w1", 4)], id="openmpi-max-slots"),
    pytest.param("w1 max_slots=8\n", [("w1", None)], id="only-max"),
    pytest.param("w1 count=3\n", [("w1", 3)], id="openmpi-count"),
    pytest.param("w1 cpu=2\n", [("w1", 2)], id="openmpi-cpu"),
    pytest.param("w1 slots = 4\n", [("w1", 4)], id="openmpi-spaces-around-equals"),
    pytest.param("w1:4\n", [("w1", 4)], id="intel-mpich-horovod-colon"),
    pytest.param("w1:2 max_slots=4\n", [("w1", 2)], id="colon-plus-max"),
    pytest.param("w1:007\n", [("w1", 7)], id="leading-zeros"),
    pytest.param("w1:1000000\n", [("w1", 1_000_000)], id="max-slots-value"),
    pytest.param("10.0.0.1 slots=2\n", [("10.0.0.1", 2)], id="ipv4"),
    pytest.param("10.0.0.1:2\n", [("10.0.0.1", 2)], id="ipv4-colon"),
    pytest.param("fe80::1\n", [("fe80::1", None)], id="ipv6-bare"),
    pytest.param("fe80::1:4\n", [("fe80::1:4", None)], id="ipv6-bare-is-an-address"),
    pytest.param("[fe80::1]\n", [("fe80::1", None)], id="ipv6-bracketed"),
    pytest.param("[fe80::1]:4\n", [("fe80::1", 4)], id="ipv6-bracketed-slots"),
    pytest.param("fe80::1 slots=3\n", [("fe80::1", 3)], id="ipv6-openmpi"),
    pytest.param("[fe80::1%eth0]:2\n", [("fe80::1%eth0", 2)], id="ipv6-scoped"),
    pytest.param("# all comments\n\n#w9\n", [], id="only-comments"),
    pytest.param("", [], id="empty"),
    pytest.param("w1 # trailing comment\n", [("w1", None)], id="trailing-comment"),
    pytest.param("w1 slots=2#no-space\n", [("w1", 2)], id="comment-without-space"),
    pytest.param("w1\r\nw2 slots=2\r\n", [("w1", None), ("w2", 2)], id="crlf"),
    pytest.param("\ufeffw1\nw2\n", [("w1", None), ("w2", None)], id="bom"),
    pytest.param("\tw1\t\tslots=2  \n", [("w1", 2)], id="tabs-and-spaces"),
    pytest.param("  \t \n w1\n\n", [("w1", None)], id="blank-lines"),
    pytest.param("w1\fslots=2\v\n", [("w1", 2)], id="form-feed-vtab"),
    pytest.param("w1.\n", [("w1.", None)], id="trailing-dot"),
    pytest.param(
        "pi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc slots=1\n",
        [("pi-worker-0.pi.default.svc", 1), ("pi-worker-1.pi.default.svc", 1)],
        id="mpi-operator-openmpi",
    ),
    pytest.param(
        "pi-worker-0.pi.default.svc:2\npi-worker-1.pi.default.svc:2\n",
        [("pi-worker-0.pi.default.svc", 2), ("pi-worker-1.pi.default.svc", 2)],
        id="mpi-operator-intel",
    ),
    pytest.param(
        "w1 slots=2\nW1:8\nw2\nw1\n", [("w1", 2), ("w2", None)], id="duplicates-first-wins"
    ),
    pytest.param(
        "fe80::1\n[FE80:0::1]:4\n", [("fe80::1", None)], id="ipv6-duplicate-other-spelling"
    ),
]


@pytest.mark.parametrize(("text", "expected"), HOSTFILE_OK)
def test_parse_hostfile_accepts(text: str, expected: list[tuple[str, int | None]]) -> None:
    assert pairs(parse_hostfile(text, SRC)) == expected


def test_parse_hostfile_records_source_line() -> None:
    hosts = parse_hostfile("# header\n\nw1 slots=2\r\nw2:3\nw1\n", SRC)
    assert hosts == [Host("w1", 2, f"{SRC}:3"), Host("w2", 3, f"{SRC}:4")]


def test_parse_hostfile_keeps_the_name_as_written() -> None:
    assert parse_hostfile("Worker-0.Example\n", SRC)[0].name == "Worker-0.Example"


# --- parse_hostfile: malformed lines ------------------------------------------------------

HOSTFILE_BAD = [
    pytest.param("w1;rm -rf /", "contains ';'", id="shell-semicolon"),
    pytest.param("host slots=abc", "slots must be a whole number", id="slots-abc"),
    pytest.param("host:-1", "slot count must be a whole number", id="colon-negative"),
    pytest.param("host:0", "not '0'", id="colon-zero"),
    pytest.param("host slots=0", "not '0'", id="slots-zero"),
    pytest.param("host foo=1", "unsupported attribute 'foo'", id="unknown-attribute"),
    pytest.param("a b", "unexpected 'b' after the host name", id="two-words"),
    pytest.param("host:", "missing slot count", id="colon-empty"),
    pytest.param("[::1", "without a closing ']'", id="unclosed-bracket"),
    pytest.param("[nothost]:2", "in brackets is not an IPv6 address", id="bracket-not-ipv6"),
    pytest.param("[::1]x", "unexpected 'x' after ']'", id="junk-after-bracket"),
    pytest.param("[::1]:", "missing slot count", id="bracket-colon-empty"),
    pytest.param("[::1]:0", "not '0'", id="bracket-zero"),
    pytest.param("host:1000001", "not '1000001'", id="too-many-slots"),
    pytest.param("host:99999999999999999999999999", "from 1 to 1000000", id="huge-number"),
    pytest.param("host:+4", "not '+4'", id="plus-sign"),
    pytest.param("host:1e3", "not '1e3'", id="exponent"),
    pytest.param("host:\u0663", "from 1 to 1000000", id="non-ascii-digit"),
    pytest.param("host slots=", "missing value after 'slots='", id="slots-empty"),
    pytest.param("host slots=2 slots=3", "given twice", id="slots-twice"),
    pytest.param("host:2 slots=3", "given twice", id="colon-and-slots"),
    pytest.param("host max_slots=1 max-slots=2", "given twice", id="max-twice"),
    pytest.param("host slots=4 max_slots=2", "less than slots", id="max-below-slots"),
    pytest.param("host max_slots=0", "max_slots must be", id="max-zero"),
    pytest.param("a_b", "contains '_'", id="underscore"),
    pytest.param("-oProxyCommand=x", "contains '='", id="option-injection"),
    pytest.param("-w1", "starts or ends with '-'", id="leading-dash"),
    pytest.param("a:b:c", "not a valid IPv6 address", id="colons"),
    pytest.param("fe80::1::2", "not a valid IPv6 address", id="bad-ipv6"),
    pytest.param("999.1.1.1", "neither an IPv4 address nor a host name", id="bad-ipv4"),
    pytest.param("12345", "neither an IPv4 address nor a host name", id="all-digits"),
    pytest.param("user@w1 slots=2", "contains '@'", id="user-at-host"),
    pytest.param("a..b", "empty label", id="empty-label"),
    pytest.param("w1 $(id)", "unexpected '$(id)'", id="command-substitution"),
    pytest.param("w1`id`", "contains '`'", id="backtick"),
    pytest.param("w1\x00", "contains '\\x00'", id="nul"),
    pytest.param("w1\rw2", "contains '\\r'", id="lone-cr"),
    pytest.param("w\u00e9", "contains '\u00e9'", id="non-ascii"),
    pytest.param("w1 port=2222", "unsupported attribute 'port'", id="openmpi-port"),
    pytest.param("w1 Slots=2", "unsupported attribute 'Slots'", id="keys-are-case-sensitive"),
    pytest.param("x" * 300, "longer than 253", id="too-long"),
    pytest.param("=4", "contains '='", id="only-equals"),
]


@pytest.mark.parametrize(("line", "problem"), HOSTFILE_BAD)
def test_parse_hostfile_rejects(line: str, problem: str) -> None:
    text = f"# header\nw0 slots=1\n{line}\nw9\n"
    with pytest.raises(InputError) as caught:
        parse_hostfile(text, SRC)
    message = str(caught.value)
    assert message.startswith(f"{SRC}:3: ")
    assert problem in message
    shown = line if len(line) <= 80 else line[:77] + "..."
    assert message.endswith(f": {shown!r}")
    assert_one_line(caught.value)


def test_error_line_number_counts_crlf_and_bom_lines() -> None:
    with pytest.raises(InputError, match=r"^f:4: "):
        parse_hostfile("\ufeffw1\r\n\r\n# c\r\nbad_host\r\n", "f")


def test_error_truncates_long_lines() -> None:
    line = "w1 " + "x" * 500
    with pytest.raises(InputError) as caught:
        parse_hostfile(line, SRC)
    assert len(str(caught.value)) < 300
    assert "..." in str(caught.value)


# --- parse_discover_script -----------------------------------------------------------------

DISCOVER_OK = [
    pytest.param("#!/bin/sh\n", [], id="operator-no-worker-running"),
    pytest.param("#!/bin/sh", [], id="shebang-no-newline"),
    pytest.param("", [], id="empty"),
    pytest.param(
        "#!/bin/sh\necho pi-worker-0.pi.default.svc\necho pi-worker-1.pi.default.svc\n",
        [("pi-worker-0.pi.default.svc", None), ("pi-worker-1.pi.default.svc", None)],
        id="operator",
    ),
    pytest.param(
        "#!/bin/sh\necho pi-launcher.pi-worker:2\necho pi-worker-0.pi-worker:2\n",
        [("pi-launcher.pi-worker", 2), ("pi-worker-0.pi-worker", 2)],
        id="operator-v1-with-slots",
    ),
    pytest.param('echo "w1"\n', [("w1", None)], id="double-quoted"),
    pytest.param("echo 'w1:3'\n", [("w1", 3)], id="single-quoted-slots"),
    pytest.param("echo w1 # comment\n", [("w1", None)], id="trailing-comment"),
    pytest.param("echo 'w1'# comment\n", [("w1", None)], id="comment-after-quote"),
    pytest.param("# comment\n\n  \necho w1\n", [("w1", None)], id="comments-blank"),
    pytest.param("\ufeff#!/bin/sh\r\necho w1\r\n", [("w1", None)], id="bom-crlf"),
    pytest.param("  echo\t\tw1  \n", [("w1", None)], id="whitespace"),
    pytest.param("echo 10.0.0.1:2\n", [("10.0.0.1", 2)], id="ipv4"),
    pytest.param("echo fe80::1\n", [("fe80::1", None)], id="ipv6"),
    pytest.param("echo [fe80::1]:2\n", [("fe80::1", 2)], id="ipv6-bracketed"),
    pytest.param("echo w1\necho W1:4\n", [("w1", None)], id="duplicates"),
]


@pytest.mark.parametrize(("text", "expected"), DISCOVER_OK)
def test_parse_discover_script_accepts(text: str, expected: list[tuple[str, int | None]]) -> None:
    assert pairs(parse_discover_script(text, DISCOVER)) == expected


def test_parse_discover_script_records_source_line() -> None:
    hosts = parse_discover_script("#!/bin/sh\necho w1\n", DISCOVER)
    assert hosts == [Host("w1", None, f"{DISCOVER}:2")]


DISCOVER_NOT_ECHO = [
    pytest.param("exit 0", id="exit"),
    pytest.param("echo", id="echo-nothing"),
    pytest.param("echo ", id="echo-blank"),
    pytest.param("echo a b", id="two-words"),
    pytest.param("echo $HOST", id="variable"),
    pytest.param('echo "$HOST"', id="variable-in-double-quotes"),
    pytest.param("echo w1;", id="semicolon"),
    pytest.param("echo w1; rm -rf /", id="second-command"),
    pytest.param("echo w1 && echo w2", id="and"),
    pytest.param("echo w1 > /tmp/x", id="redirect"),
    pytest.param("echo $(hostname)", id="command-substitution"),
    pytest.param("echo `hostname`", id="backticks"),
    pytest.param("echo -n w1", id="echo-option"),
    pytest.param("echo ho'st'", id="quote-mid-word"),
    pytest.param('echo "w1', id="unclosed-quote"),
    pytest.param("echo w*", id="glob"),
    pytest.param("echo #w1", id="comment-instead-of-word"),
    pytest.param("printf 'w1\\n'", id="printf"),
    pytest.param("kubectl get pods", id="other-command"),
    pytest.param("w1", id="bare-host"),
    pytest.param("echo w\\1", id="backslash"),
    pytest.param("ECHO w1", id="uppercase-echo"),
]


@pytest.mark.parametrize("line", DISCOVER_NOT_ECHO)
def test_parse_discover_script_rejects_other_shapes(line: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_discover_script(f"#!/bin/sh\necho w1\n{line}\n", DISCOVER)
    assert str(caught.value) == f"{DISCOVER}:3: {line!r} {SHAPE}"
    assert_one_line(caught.value)


DISCOVER_BAD_HOST = [
    pytest.param("echo w1_x", "contains '_'", id="underscore"),
    pytest.param("echo w1#x", "contains '#'", id="hash-inside-word-is-literal-in-sh"),
    pytest.param("echo 'a b'", "contains ' '", id="space-in-quotes"),
    pytest.param("echo ''", "empty host name", id="empty-quotes"),
    pytest.param("echo 'w1;id'", "contains ';'", id="semicolon-in-quotes"),
    pytest.param("echo w1:0", "not '0'", id="zero-slots"),
    pytest.param("echo w1:x", "slot count must be", id="bad-slots"),
    pytest.param("echo [nothost]:2", "not an IPv6 address", id="bracket-not-ipv6"),
]


@pytest.mark.parametrize(("line", "problem"), DISCOVER_BAD_HOST)
def test_parse_discover_script_rejects_bad_hosts(line: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_discover_script(f"#!/bin/sh\n{line}\n", DISCOVER)
    message = str(caught.value)
    assert message.startswith(f"{DISCOVER}:2: ")
    assert problem in message
    assert message.endswith(f": {line!r}")
    assert_one_line(caught.value)


# --- parse_host_lines ----------------------------------------------------------------------

EXEC_SRC = "/opt/discover.sh (exec)"

HOST_LINES_OK = [
    pytest.param("w1\nw2:4\n", [("w1", None), ("w2", 4)], id="horovod"),
    pytest.param("\n# c\n  w1  \n\n", [("w1", None)], id="blank-comment-space"),
    pytest.param("w1 # c\n", [("w1", None)], id="trailing-comment"),
    pytest.param("w1\r\nw2\r\n", [("w1", None), ("w2", None)], id="crlf"),
    pytest.param("\ufeffw1", [("w1", None)], id="bom"),
    pytest.param("[::1]:3\nfe80::1\n", [("::1", 3), ("fe80::1", None)], id="ipv6"),
    pytest.param("w1:2\nw1:5\n", [("w1", 2)], id="duplicates"),
    pytest.param("", [], id="empty"),
]


@pytest.mark.parametrize(("text", "expected"), HOST_LINES_OK)
def test_parse_host_lines_accepts(text: str, expected: list[tuple[str, int | None]]) -> None:
    assert pairs(parse_host_lines(text, EXEC_SRC)) == expected


def test_parse_host_lines_source() -> None:
    assert parse_host_lines("\nw1\n", EXEC_SRC) == [Host("w1", None, f"{EXEC_SRC}:2")]


HOST_LINES_BAD = [
    pytest.param("w1 slots=2", "one HOST or HOST:SLOTS per line", id="openmpi-form"),
    pytest.param("w1 w2", "one HOST or HOST:SLOTS per line", id="two-hosts"),
    pytest.param("w1:", "missing slot count", id="colon-empty"),
    pytest.param("w1:abc", "slot count must be", id="bad-slots"),
    pytest.param("echo w1", "one HOST or HOST:SLOTS per line", id="echo"),
    pytest.param("w1;id", "contains ';'", id="semicolon"),
    pytest.param("[::1", "closing ']'", id="unclosed"),
]


@pytest.mark.parametrize(("line", "problem"), HOST_LINES_BAD)
def test_parse_host_lines_rejects(line: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_host_lines(f"w0\n{line}\n", EXEC_SRC)
    message = str(caught.value)
    assert message.startswith(f"{EXEC_SRC}:2: ")
    assert problem in message
    assert message.endswith(f": {line!r}")
    assert_one_line(caught.value)


# --- parse_hosts_option --------------------------------------------------------------------

HOSTS_OPTION_OK = [
    pytest.param("h1", [("h1", None)], id="one"),
    pytest.param("h1,h2:4, h3", [("h1", None), ("h2", 4), ("h3", None)], id="mixed"),
    pytest.param(" h1 ,\th2\t", [("h1", None), ("h2", None)], id="whitespace"),
    pytest.param("h1,,h2,", [("h1", None), ("h2", None)], id="empty-items"),
    pytest.param("[fe80::1]:2,::1", [("fe80::1", 2), ("::1", None)], id="ipv6"),
    pytest.param("10.0.0.1:8", [("10.0.0.1", 8)], id="ipv4"),
    pytest.param("h1:2,H1:4,h1", [("h1", 2)], id="duplicates"),
]


@pytest.mark.parametrize(("value", "expected"), HOSTS_OPTION_OK)
def test_parse_hosts_option_accepts(value: str, expected: list[tuple[str, int | None]]) -> None:
    hosts = parse_hosts_option(value)
    assert pairs(hosts) == expected
    assert {h.source for h in hosts} == {"--hosts"}


@pytest.mark.parametrize("value", ["", " ", ",", " , ", ",,,"])
def test_parse_hosts_option_empty(value: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_hosts_option(value)
    assert str(caught.value) == "--hosts: the list is empty"


HOSTS_OPTION_BAD = [
    pytest.param("h1,a;b", "a;b", "contains ';'", id="semicolon"),
    pytest.param("h1, h2 h3", "h2 h3", "contains ' '", id="space-inside"),
    pytest.param("h1:0", "h1:0", "not '0'", id="zero"),
    pytest.param("h1:", "h1:", "missing slot count", id="colon-empty"),
    pytest.param(":3", ":3", "empty host name", id="no-name"),
    pytest.param("[::1", "[::1", "closing ']'", id="unclosed"),
    pytest.param("h1 slots=2", "h1 slots=2", "contains ' '", id="openmpi-form"),
]


@pytest.mark.parametrize(("value", "item", "problem"), HOSTS_OPTION_BAD)
def test_parse_hosts_option_rejects(value: str, item: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_hosts_option(value)
    message = str(caught.value)
    assert message.startswith("--hosts: ")
    assert problem in message
    assert message.endswith(f": {item!r}")
    assert_one_line(caught.value)


# --- read_text_file ------------------------------------------------------------------------


def test_read_text_file_plain(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes(b"w1 slots=2\r\nw2\r\n")
    assert read_text_file(path, what="hostfile") == "w1 slots=2\r\nw2\r\n"


def test_read_text_file_strips_bom(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes(b"\xef\xbb\xbfw1\n")
    assert read_text_file(path, what="hostfile") == "w1\n"


def test_read_text_file_utf8(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes("# caf\u00e9\nw1\n".encode())
    assert read_text_file(path, what="hostfile") == "# caf\u00e9\nw1\n"


def test_read_text_file_empty(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes(b"")
    assert read_text_file(path, what="hostfile") == ""


def read_error(path: Path, what: str = "hostfile") -> str:
    with pytest.raises(InputError) as caught:
        read_text_file(path, what=what)
    assert_one_line(caught.value)
    return str(caught.value)


def test_read_text_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "nope"
    assert read_error(path) == f"hostfile {path}: does not exist"


def test_read_text_file_missing_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    path = tmp_path / "file" / "hostfile"
    assert read_error(path, "discover file") == f"discover file {path}: does not exist"


def test_read_text_file_dangling_symlink(tmp_path: Path) -> None:
    path = tmp_path / "link"
    path.symlink_to(tmp_path / "gone")
    assert read_error(path) == f"hostfile {path}: does not exist"


def test_read_text_file_directory(tmp_path: Path) -> None:
    assert read_error(tmp_path) == f"hostfile {tmp_path}: is a directory"


def test_read_text_file_nul_bytes(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes(b"w1\n\x00\x01\x02")
    assert read_error(path) == f"hostfile {path}: looks binary (contains NUL bytes)"


def test_read_text_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes(b"w1\n\xff\xfe")
    assert read_error(path).startswith(f"hostfile {path}: looks binary (not UTF-8")


def test_read_text_file_utf16_is_binary(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes("w1\n".encode("utf-16"))
    assert "looks binary" in read_error(path)


def test_read_text_file_too_large(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    with path.open("wb") as stream:
        stream.truncate(MAX_INPUT_BYTES + 1)  # sparse: costs no disk
    assert read_error(path).startswith(f"hostfile {path}: too large")


def test_read_text_file_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_bytes(b"w1\n" + b"#" * (MAX_INPUT_BYTES - 4) + b"\n")
    assert len(read_text_file(path, what="hostfile")) == MAX_INPUT_BYTES


def test_read_text_file_fifo_does_not_block(tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    assert read_error(path) == f"hostfile {path}: is not a regular file"


def test_read_text_file_character_device() -> None:
    assert read_error(Path("/dev/null")) == "hostfile /dev/null: is not a regular file"


def test_read_text_file_permission_denied(as_user) -> None:
    # A real refusal by the kernel. Root reads a mode-000 file, so as root the read runs as
    # `nobody` (setpriv); the file sits in a directory anyone may traverse, so that it is the
    # file's own mode that refuses, not the way to it.
    with tempfile.TemporaryDirectory(prefix="mpiwait-perm-", dir="/tmp") as d:
        Path(d).chmod(0o755)
        path = Path(d) / "hostfile"
        path.write_text("w1\n")
        path.chmod(0)
        if os.geteuid() != 0:
            assert read_error(path) == f"hostfile {path}: permission denied"
            return
        wrap, drop = as_user("nobody")
        code = (
            "import sys; from pathlib import Path; from mpiwait.errors import InputError\n"
            "from mpiwait.hosts.textfile import read_text_file\n"
            "try: read_text_file(Path(sys.argv[1]), what='hostfile')\n"
            "except InputError as e: print(str(e)); sys.exit(e.exit_code)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        r = subprocess.run(
            [*wrap, *drop, sys.executable, "-c", code, str(path)],
            capture_output=True, text=True, timeout=60, cwd="/", env=env,
        )  # fmt: skip
        assert r.stdout == f"hostfile {path}: permission denied\n", r.stderr
        assert r.returncode == ExitCode.USAGE


def test_read_text_file_permission_denied_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests often run as root, who reads any file; simulate the kernel's refusal instead.
    path = tmp_path / "hostfile"
    path.write_text("w1\n")

    def refuse(*args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)
    assert read_error(path) == f"hostfile {path}: permission denied"


def test_read_text_file_other_os_error(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert read_error(loop) == f"hostfile {loop}: too many levels of symbolic links"


# --- SelfNames -----------------------------------------------------------------------------


def test_self_names_normalized() -> None:
    names = SelfNames(frozenset({"Pi-Launcher", "pi-launcher.pi.default.svc.", "", "FE80:0::1"}))
    assert names.names == frozenset({"pi-launcher", "pi-launcher.pi.default.svc", "fe80::1"})


SELF_CASES = [
    ("pi-launcher", True),
    ("PI-LAUNCHER", True),
    ("pi-launcher.", True),
    ("pi-launcher.pi.default.svc", True),  # the operator's name for the launcher
    ("pi-launcher.pi.default.svc.cluster.local.", True),
    ("Pi-Launcher.Pi.Default.Svc", True),
    ("pi-worker-0.pi.default.svc", False),
    ("pi-launcher2.pi.default.svc", False),
    ("pi", False),
    ("launcher", False),
    ("10.0.0.5", True),
    ("10.0.0.50", False),
    ("", False),
]


@pytest.mark.parametrize(("host", "expected"), SELF_CASES)
def test_is_self(host: str, expected: bool) -> None:
    names = SelfNames(frozenset({"pi-launcher", "10.0.0.5"}))
    assert names.is_self(host) is expected


def test_is_self_ip_literals_match_only_exactly() -> None:
    names = SelfNames(frozenset({"10.0.0.5", "fe80::1"}))
    assert names.is_self("10.0.0.5")
    assert names.is_self("FE80:0:0::1")
    assert not names.is_self("10.foo.example")  # first label "10" is not a name of ours
    assert not names.is_self("10.0.0.6")


def test_is_self_fqdn_name_matches_short_and_long_hosts() -> None:
    names = SelfNames(frozenset({"node7.cluster.example"}))
    assert names.is_self("node7.cluster.example")
    assert names.is_self("node7.other.example")  # multi-label: first label decides
    assert not names.is_self("node7")  # a single label matches only exactly
    assert not names.is_self("node70.cluster.example")


def test_is_self_empty_names() -> None:
    assert not SelfNames(frozenset()).is_self("w1.example")


def test_from_system(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "Pi-Launcher")
    monkeypatch.setattr(socket, "getfqdn", lambda: "pi-launcher.pi.default.svc.cluster.local")
    names = SelfNames.from_system({"HOSTNAME": "alias-name"})
    assert names.names == frozenset(
        {"pi-launcher", "pi-launcher.pi.default.svc.cluster.local", "alias-name"}
    )


def test_from_system_tolerates_lookup_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise OSError("no name")

    monkeypatch.setattr(socket, "gethostname", lambda: "box")
    monkeypatch.setattr(socket, "getfqdn", broken)
    assert SelfNames.from_system({}).names == frozenset({"box"})


def test_from_system_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "box")
    monkeypatch.setattr(socket, "getfqdn", lambda: "box")
    monkeypatch.setenv("HOSTNAME", "from-env")
    assert SelfNames.from_system().names == frozenset({"box", "from-env"})


# --- HostSources.read ----------------------------------------------------------------------

LAUNCHER = SelfNames(frozenset({"pi-launcher"}))


def sources(
    *,
    discover: Path | None = None,
    exec_timeout: float = DISCOVER_EXEC_TIMEOUT,
    **overrides: object,
) -> HostSources:
    values: dict[str, object] = {
        "hostfile": None,
        "hostfile_explicit": False,
        "discover_hosts": discover,
        "discover_explicit": False,
        "discover_exec": False,
        "hosts_option": None,
        "include_self": False,
    }
    values.update(overrides)
    return HostSources(SourceOptions(**values), LAUNCHER, exec_timeout)  # type: ignore[arg-type]


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_read_missing_defaults_are_skipped(tmp_path: Path) -> None:
    snapshot = sources(hostfile=tmp_path / "hostfile", discover=tmp_path / "discover.sh").read()
    assert snapshot == Snapshot(hosts=(), skipped_self=(), sources=())


def test_read_missing_default_discover_exec_is_skipped(tmp_path: Path) -> None:
    snapshot = sources(discover=tmp_path / "discover.sh", discover_exec=True).read()
    assert snapshot == Snapshot(hosts=(), skipped_self=(), sources=())


def test_read_no_sources_at_all() -> None:
    assert sources().read() == Snapshot(hosts=(), skipped_self=(), sources=())


def test_read_missing_explicit_hostfile(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    with pytest.raises(InputError, match=r"^hostfile .*/hostfile: does not exist$"):
        sources(hostfile=path, hostfile_explicit=True).read()


def test_read_missing_explicit_discover(tmp_path: Path) -> None:
    path = tmp_path / "discover.sh"
    with pytest.raises(InputError, match=r"^discover file .*: does not exist$"):
        sources(discover=path, discover_explicit=True).read()


def test_read_missing_explicit_discover_exec(tmp_path: Path) -> None:
    path = tmp_path / "discover.sh"
    with pytest.raises(InputError, match=r"^discover script .*: does not exist$"):
        sources(discover=path, discover_explicit=True, discover_exec=True).read()


def test_read_default_that_exists_but_is_broken_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "hostfile", "w1;id\n")
    with pytest.raises(InputError, match=r"hostfile:1: host name 'w1;id' contains ';'"):
        sources(hostfile=path).read()


def test_read_default_that_is_a_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        sources(hostfile=tmp_path).read()


def test_read_union_hostfile_first(tmp_path: Path) -> None:
    hostfile = write(tmp_path / "hostfile", "w0 slots=2\nw1 slots=2\nw2 slots=2\n")
    discover = write(tmp_path / "discover.sh", "#!/bin/sh\necho w2\necho w3\n", 0o555)
    snapshot = sources(hostfile=hostfile, discover=discover).read()
    assert pairs(list(snapshot.hosts)) == [("w0", 2), ("w1", 2), ("w2", 2), ("w3", None)]
    assert snapshot.hosts[2].source == f"{hostfile}:3"
    assert snapshot.hosts[3].source == f"{discover}:3"
    assert snapshot.sources == (f"{hostfile} (3 hosts)", f"{discover} (2 hosts)")
    assert snapshot.skipped_self == ()


def test_read_empty_discover_beside_hostfile(tmp_path: Path) -> None:
    hostfile = write(tmp_path / "hostfile", "w0:1\n")
    discover = write(tmp_path / "discover.sh", "#!/bin/sh\n", 0o555)
    snapshot = sources(hostfile=hostfile, discover=discover).read()
    assert pairs(list(snapshot.hosts)) == [("w0", 1)]
    assert snapshot.sources == (f"{hostfile} (1 host)", f"{discover} (0 hosts)")


def test_read_removes_self(tmp_path: Path) -> None:
    hostfile = write(
        tmp_path / "hostfile",
        "pi-launcher.pi.default.svc slots=1\npi-worker-0.pi.default.svc slots=1\n",
    )
    snapshot = sources(hostfile=hostfile).read()
    assert pairs(list(snapshot.hosts)) == [("pi-worker-0.pi.default.svc", 1)]
    assert snapshot.skipped_self == ("pi-launcher.pi.default.svc",)
    assert snapshot.sources == (f"{hostfile} (2 hosts)",)


def test_read_include_self_keeps_it(tmp_path: Path) -> None:
    hostfile = write(tmp_path / "hostfile", "pi-launcher.pi.default.svc\nw1\n")
    snapshot = sources(hostfile=hostfile, include_self=True).read()
    assert [h.name for h in snapshot.hosts] == ["pi-launcher.pi.default.svc", "w1"]
    assert snapshot.skipped_self == ()


def test_read_hosts_option_wins(tmp_path: Path) -> None:
    hostfile = write(tmp_path / "hostfile", "not_read_at_all\n")  # would be an error if read
    snapshot = sources(
        hostfile=hostfile, hostfile_explicit=True, hosts_option="h1,h2:4,pi-launcher"
    ).read()
    assert pairs(list(snapshot.hosts)) == [("h1", None), ("h2", 4)]
    assert snapshot.skipped_self == ("pi-launcher",)
    assert snapshot.sources == ("--hosts (3 hosts)",)


def test_read_hosts_option_empty_is_an_error() -> None:
    with pytest.raises(InputError, match=r"^--hosts: the list is empty$"):
        sources(hosts_option=" , ").read()


def test_read_is_repeatable_and_sees_rewrites(tmp_path: Path) -> None:
    discover = write(tmp_path / "discover.sh", "#!/bin/sh\n", 0o555)
    reader = sources(discover=discover)
    assert reader.read().hosts == ()
    assert reader.read().hosts == ()
    # mpi-operator replaces the file as workers start running.
    discover.chmod(0o644)
    write(discover, "#!/bin/sh\necho w0\necho w1\n", 0o555)
    assert [h.name for h in reader.read().hosts] == ["w0", "w1"]


def test_read_discover_is_never_run_without_exec(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    discover = write(tmp_path / "discover.sh", f"#!/bin/sh\ntouch {marker}\necho w1\n", 0o755)
    with pytest.raises(InputError, match="use --discover-exec"):
        sources(discover=discover).read()
    assert not marker.exists()


def test_read_discover_exec(tmp_path: Path) -> None:
    script = write(
        tmp_path / "discover.sh",
        "#!/bin/sh\nfor i in 0 1; do echo w$i:2; done\necho '# comment'\necho pi-launcher\n",
        0o755,
    )
    snapshot = sources(discover=script, discover_exec=True).read()
    assert pairs(list(snapshot.hosts)) == [("w0", 2), ("w1", 2)]
    assert snapshot.hosts[0].source == f"{script} (exec):1"
    assert snapshot.skipped_self == ("pi-launcher",)
    assert snapshot.sources == (f"{script} (exec, 3 hosts)",)


def test_read_discover_exec_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "discover.sh", "#!/bin/sh\necho w1\n", 0o755)
    monkeypatch.chdir(tmp_path)
    snapshot = sources(discover=Path("discover.sh"), discover_exec=True).read()
    assert [h.name for h in snapshot.hosts] == ["w1"]


def test_read_discover_exec_stdin_is_closed(tmp_path: Path) -> None:
    # A script that reads stdin must see EOF at once, not wait on our terminal.
    script = write(tmp_path / "d.sh", "#!/bin/sh\ncat\necho w1\n", 0o755)
    snapshot = sources(discover=script, discover_exec=True, exec_timeout=5).read()
    assert [h.name for h in snapshot.hosts] == ["w1"]


def test_read_discover_exec_failing_script(tmp_path: Path) -> None:
    script = write(tmp_path / "d.sh", "#!/bin/sh\necho w1\necho 'kubectl: forbidden' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(InputError) as caught:
        sources(discover=script, discover_exec=True).read()
    assert str(caught.value) == (
        f"discover script {script}: exited with status 3: 'kubectl: forbidden'"
    )


def test_read_discover_exec_killed_by_signal(tmp_path: Path) -> None:
    script = write(tmp_path / "d.sh", "#!/bin/sh\nkill -TERM $$\n", 0o755)
    with pytest.raises(InputError, match=r": killed by SIGTERM$"):
        sources(discover=script, discover_exec=True).read()


def test_read_discover_exec_bad_output(tmp_path: Path) -> None:
    script = write(tmp_path / "d.sh", "#!/bin/sh\necho w1\necho 'w2 slots=2'\n", 0o755)
    with pytest.raises(InputError) as caught:
        sources(discover=script, discover_exec=True).read()
    assert str(caught.value).startswith(f"{script} (exec):2: expected one HOST")


def test_read_discover_exec_binary_output(tmp_path: Path) -> None:
    script = write(tmp_path / "d.sh", "#!/bin/sh\nprintf 'w1\\377\\n'\n", 0o755)
    with pytest.raises(InputError, match=r"its output looks binary \(not UTF-8"):
        sources(discover=script, discover_exec=True).read()


def test_read_discover_exec_not_executable(tmp_path: Path) -> None:
    script = write(tmp_path / "d.sh", "#!/bin/sh\necho w1\n", 0o644)
    # Even root may execute only a file with some x bit set, so this holds for root too.
    with pytest.raises(InputError) as caught:
        sources(discover=script, discover_exec=True).read()
    assert str(caught.value) == (
        f"discover script {script}: cannot run it: permission denied (is it executable?)"
    )


def test_read_discover_exec_missing_interpreter(tmp_path: Path) -> None:
    script = write(tmp_path / "d.sh", "#!/nonexistent/sh\necho w1\n", 0o755)
    with pytest.raises(InputError, match=r"^discover script .*: cannot run it: no such file"):
        sources(discover=script, discover_exec=True).read()


def test_read_discover_exec_timeout(tmp_path: Path) -> None:
    import time

    # The child 'sleep' holds the output pipe too: the whole group must die, or we would hang.
    script = write(tmp_path / "d.sh", "#!/bin/sh\necho w1\nsleep 30\necho w2\n", 0o755)
    started = time.monotonic()
    with pytest.raises(InputError) as caught:
        sources(discover=script, discover_exec=True, exec_timeout=0.5).read()
    assert time.monotonic() - started < 5
    assert str(caught.value) == f"discover script {script}: timed out after 0.5s"


def test_read_discover_exec_background_child_is_killed_on_timeout(tmp_path: Path) -> None:
    import time

    pidfile = tmp_path / "pid"
    script = write(tmp_path / "d.sh", f"#!/bin/sh\nsleep 30 &\necho $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    with pytest.raises(InputError, match="timed out"):
        sources(discover=script, discover_exec=True, exec_timeout=0.5).read()
    pid = int(pidfile.read_text())
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"the script's child {pid} outlived the timeout")


def alive(pid: int) -> bool:
    """Running, not a zombie (a container's PID 1 may never reap the orphan)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def test_read_parses_again_only_when_a_source_reads_differently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mpiwait.hosts.sources as hosts_module

    calls: list[str] = []
    real = hosts_module.parse_hostfile
    monkeypatch.setattr(
        hosts_module,
        "parse_hostfile",
        lambda text, source: calls.append(text) or real(text, source),
    )
    hostfile = write(tmp_path / "hostfile", "w1\n")
    discover = write(tmp_path / "discover.sh", "#!/bin/sh\n")
    src = sources(hostfile=hostfile, discover=discover)
    first = src.read()
    assert src.read() is first  # same bytes: the last snapshot, no parse
    assert len(calls) == 1
    write(discover, "#!/bin/sh\necho w2\n")
    assert [h.name for h in src.read().hosts] == ["w1", "w2"]
    assert len(calls) == 2
    write(hostfile, "w1 slots=x\n")
    with pytest.raises(InputError):
        src.read()
    with pytest.raises(InputError):  # a failed read is not remembered as seen
        src.read()


# --- re-reading the sources while waiting --------------------------------------------------


def test_rereader_keeps_the_last_good_list_while_a_source_fails(tmp_path: Path) -> None:
    hostfile = write(tmp_path / "hostfile", "w1\n")
    warnings: list[str] = []
    first = Snapshot((Host("w1", None, "test"),), (), ())
    read = HostReader(sources(hostfile=hostfile, hostfile_explicit=True), first, warnings.append)
    write(hostfile, "w1\nw2\n")
    assert read() == (("w1", "w2"), (f"{hostfile} (2 hosts)",))
    write(hostfile, "w1\nw2\nw3 slots=x\n")  # caught mid-rewrite
    assert read()[0] == ("w1", "w2")  # kept, not an exit
    assert read()[0] == ("w1", "w2")
    assert warnings == [
        f"warning: keeping the hosts read before: {hostfile}:3: slots must be a whole number "
        "from 1 to 1000000, not 'x': 'w3 slots=x'"
    ]  # once, however often the same failure repeats
    write(hostfile, "w1\nw2\nw3\n")
    assert read()[0] == ("w1", "w2", "w3")  # retried on the next round


def test_rereader_lists_this_machine_too(tmp_path: Path) -> None:
    # The waiter still waits for the launcher's own entry (its name must resolve).
    hostfile = write(tmp_path / "hostfile", "w1\npi-launcher\n")
    read = HostReader(sources(hostfile=hostfile), Snapshot((), (), ()), lambda _: None)
    assert read()[0] == ("w1", "pi-launcher")
    # decided by the sources once, as a property of the host: no login, and this machine
    assert read.skips_login("pi-launcher") and read.is_self("pi-launcher")
    assert not read.skips_login("w1") and not read.is_self("w1")


def test_reader_knows_this_machine_with_include_self(tmp_path: Path) -> None:
    # --include-self: the launcher's entry is logged into, yet it is still this machine
    # (the launch hands it over as such, and the interface is not learnt from it).
    hostfile = write(tmp_path / "hostfile", "w1\npi-launcher\n")
    snapshot = sources(hostfile=hostfile, include_self=True).read()
    assert [h.is_self for h in snapshot.hosts] == [False, True]
    read = HostReader(sources(hostfile=hostfile, include_self=True), snapshot, lambda _: None)
    assert read.is_self("pi-launcher") and not read.skips_login("pi-launcher")
