"""A byte that is not UTF-8 in what mpiwait quotes (ssh config, hostfile path, resolved values):
every output takes it (text, JSON lines, termination log, dry-run plan), shown as ``\\x9b``.

Through the real CLI (a process, real files); no network: ``--dry-run`` or ``--check dns``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import testbed

from mpiwait.output.jsonl import json_record
from mpiwait.output.printable import printable, writable
from mpiwait.output.termination import write_termination_log

STRAY = os.fsdecode(b"\x9b")  # how Python holds the byte: a lone surrogate


def test_printable_shows_each_stray_byte_and_control_and_keeps_the_rest() -> None:
    assert printable(f"Us{STRAY}er") == writable(f"Us{STRAY}er") == "Us\\x9ber"
    assert printable("\x0bMatch\ta\x1b[1m\r\n") == "\\x0bMatch\ta\\x1b[1m\\x0d\\x0a"
    assert writable("line\nbreak") == "line\nbreak"  # JSON escapes controls itself
    assert printable("w1 é") == "w1 é"
    assert printable(os.fsdecode("é".encode())) == "é"  # escaped bytes that are UTF-8 together
    assert printable("x\ud800y") == "x\\ud800y"  # a surrogate no bytes made: still writable


def test_json_record_and_termination_log_take_a_stray_byte(tmp_path: Path) -> None:
    record = json.loads(json_record("error", message=f"a{STRAY}", hosts=[{"user": STRAY}]))
    assert (record["message"], record["hosts"]) == ("a\\x9b", [{"user": "\\x9b"}])
    log = tmp_path / "log"
    log.write_text("")
    write_termination_log(log, [f"error: a{STRAY}"])
    assert log.read_bytes() == b"error: a\\x9b\n"


def _mpiwait(tmp_path: Path, *args: str, **env: str) -> tuple[testbed.Result, str]:
    log = tmp_path / "termination-log"
    log.write_text("")
    result = testbed.run(
        None, [*args, "--termination-log", str(log)], env=testbed.mpiwait_env(**env), timeout=30
    )
    return result, log.read_bytes().decode("utf-8")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_stray_byte_in_an_ssh_config_keyword_is_one_line_and_exit_2(
    tmp_path: Path, log_format: str
) -> None:
    config = tmp_path / "ssh_config"
    config.write_bytes(b"Host *\n  Us\x9ber root\n")
    result, log = _mpiwait(
        tmp_path, "--hosts", "w1", "-F", str(config), "--log-format", log_format, "--dry-run"
    )
    assert result.returncode == 2, result
    (line,) = result.stderr.splitlines()
    message = json.loads(line)["message"] if log_format == "json" else line
    assert f"ssh config {config} line 2: Bad configuration option: Us\\x9ber" in message
    assert log.startswith(f"error: ssh config {config} line 2: ") and "Us\\x9ber" in log


def test_stray_byte_in_a_hostfile_path_and_in_a_hostfile(tmp_path: Path) -> None:
    missing = tmp_path / f"hostfile{STRAY}"
    result, log = _mpiwait(tmp_path, "--hostfile", str(missing), "--dry-run")
    assert result.returncode == 2, result
    shown = f"{tmp_path}/hostfile\\x9b"
    assert result.stderr == f"mpiwait: error: hostfile {shown}: does not exist\n"
    assert log == f"error: hostfile {shown}: does not exist\n"
    hostfile = tmp_path / "hostfile"
    hostfile.write_bytes(b"w1\nw\x9b2 slots=1\n")
    result, log = _mpiwait(tmp_path, "--hostfile", str(hostfile), "--dry-run")
    assert result.returncode == 2, result
    binary = "looks binary (not UTF-8: byte 4)"
    assert result.stderr == f"mpiwait: error: hostfile {hostfile}: {binary}\n"


def test_stray_bytes_in_resolved_values_reach_the_plan_and_the_summary(tmp_path: Path) -> None:
    """ssh takes them (a HostName it then cannot resolve): mpiwait too, and says so."""
    config = tmp_path / "ssh_config"
    config.write_bytes(b"Host *\n  HostName h\x9bx\n  User u\x9bv\n")
    # A strict stdout, as under a UTF-8 locale: the plan still prints.
    strict = {"PYTHONIOENCODING": "utf-8:strict"}
    result, _ = _mpiwait(tmp_path, "--hosts", "w1", "-F", str(config), "--dry-run", **strict)
    assert result.returncode == 0, result
    assert "w1 address=h\\x9bx port=22 user=u\\x9bv " in result.stdout
    result, log = _mpiwait(
        tmp_path, "--hosts", "w1", "-F", str(config), "--check", "dns", "--timeout", "0.5"
    )
    assert result.returncode == 124, result
    assert "w1: dns unresolved (h\\x9bx: " in result.stderr
    assert "dns unresolved (1): w1 (h\\x9bx: " in log


HOSTFILE = b"# workers\nw1 slots=2\nw2:4\nw3\n"
SSH_CONFIG = b"Host w2\n  User mpiuser\n  Port 2222\nMatch host w3\n  Hostname 127.0.0.1\nHost *\n  ConnectTimeout 5\n  StrictHostKeyChecking no\n"  # noqa: E501
BYTES = b'\x9b\xff\xc3\x80\x00\t ="#\n'


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(out))
        byte = rng.choice([rng.choice(BYTES), rng.randrange(256)])
        op = rng.choice(("replace", "insert", "delete"))
        if op == "replace":
            out[at] = byte
        elif op == "insert":
            out.insert(at, byte)
        elif len(out) > 1:
            del out[at]
    return bytes(out)


@pytest.mark.slow  # 1,300 runs of the CLI
def test_mutated_hostfiles_and_ssh_configs_end_in_0_or_2_never_a_traceback(
    tmp_path: Path,
) -> None:
    """A small fuzz (seeded, so each run is the same): each case one line at most on error."""
    rng = random.Random(29)
    hostfile, config = tmp_path / "hostfile", tmp_path / "ssh_config"
    for case in range(32):
        hostfile.write_bytes(_mutate(HOSTFILE, rng) if case % 2 else HOSTFILE)
        config.write_bytes(_mutate(SSH_CONFIG, rng) if case % 3 else SSH_CONFIG)
        log_format = "json" if case % 4 == 3 else "text"
        args = ["--hostfile", str(hostfile), "-F", str(config), "--log-format", log_format]
        result, log = _mpiwait(tmp_path, *args, "--dry-run")
        what = f"case {case}: {hostfile.read_bytes()!r} {config.read_bytes()!r}\n{result}"
        assert result.returncode in (0, 2), what
        assert "internal error" not in result.stderr, what
        if result.returncode == 2:
            assert len(result.stderr.splitlines()) == 1, what
            assert log.startswith("error: "), what
