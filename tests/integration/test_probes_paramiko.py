"""The contract of probe/paramiko_adapter.py, pinned against the paramiko the venv installs
(pyproject allows >=3.4.1,<5; CI also runs this against the oldest): paramiko raises the same
plain SSHException for a closed port and a silent one before the SSH banner, so the adapter reads
``Transport.remote_version`` and the exception's ``__context__``; ``initial_kex_done`` says
whether start_client finished. If a paramiko release changes either, these tests fail here
instead of the probe silently reporting every close as a handshake failure. (The adapter's
``exit_status``, a channel's ``status_event``, is pinned through real sshd by
tests/integration/test_integration.py's --remote-command tests.)

Servers are plain sockets on 127.0.0.1 in a thread of this process (no namespace); the MSG_DEBUG
test logs into a real sshd of a testbed.Lab, since what it pins is what OpenSSH sends.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest
import testbed

from mpiwait.probe import paramiko_adapter as adapter
from mpiwait.probe.attempt import prober_for
from mpiwait.probe.lookup import lookup_pool
from mpiwait.probe.outcome import Reached, Stage, Status
from mpiwait.settings import Check, ProbeOptions

TIMEOUT = 1.0  # the per-stage timeout of the probe; only the silent server waits it out


def close_at_once(conn: socket.socket, _: threading.Event) -> None:
    conn.close()


def reset(conn: socket.socket, _: threading.Event) -> None:
    # Once the client has sent its banner (so the reset cannot beat the connect itself on
    # loopback), SO_LINGER 0: close() sends a RST, as a crashing server may.
    conn.recv(64)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def silent(conn: socket.socket, done: threading.Event) -> None:
    done.wait(30)
    conn.close()


def turned_away(conn: socket.socket, _: threading.Event) -> None:
    conn.sendall(b"Not allowed at this time\r\n")  # OpenSSH 9.8+: penalty or MaxStartups
    conn.close()


def exceeded_max_startups(conn: socket.socket, _: threading.Event) -> None:
    conn.sendall(b"Exceeded MaxStartups\r\n")  # OpenSSH before 9.8
    conn.close()


def banner_then_silence(conn: socket.socket, done: threading.Event) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_10.0p2 Debian-7\r\n")
    done.wait(30)
    conn.close()


def banner_then_close(conn: socket.socket, _: threading.Event) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
    conn.recv(64)  # the client's own banner
    conn.close()


@contextlib.contextmanager
def server(behave: Callable[[socket.socket, threading.Event], None]) -> Iterator[int]:
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            behave(conn, done)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        listener.close()
        thread.join(30)


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "id_ecdsa"
    paramiko.ECDSAKey.generate().write_private_key_file(str(path))
    path.chmod(0o600)
    return path


def probe(port: int, key: Path, tmp_path: Path, check: Check = Check.SSH):
    config = tmp_path / "ssh_config"
    config.write_text("")
    options = ProbeOptions(
        ssh_config=config, port=port, identity_files=(key,), connect_timeout=TIMEOUT, check=check
    )
    _, prober = prober_for(options, lookup_pool(1))
    return prober.attempt("127.0.0.1")


@pytest.mark.parametrize(
    ("behave", "reason"),
    [
        (close_at_once, "closed"),
        (reset, "closed"),
        (silent, "no-banner"),
        (banner_then_close, "handshake"),
        (turned_away, "penalty"),
        (exceeded_max_startups, "closed"),
    ],
)
def test_probe_tells_where_the_handshake_stopped(
    key: Path, tmp_path: Path, behave: Callable, reason: str
) -> None:
    with server(behave) as port:
        outcome = probe(port, key, tmp_path)
    assert (outcome.status, outcome.stage, outcome.reason) == (Status.RETRY, Stage.SSH, reason)
    if reason == "closed":
        assert "MaxStartups" in outcome.detail
    if behave is exceeded_max_startups:  # sshd said so: no question mark
        assert outcome.detail == "sshd is at its MaxStartups limit"
    if reason == "penalty":
        assert "PerSourcePenalties" in outcome.detail
        assert outcome.pace == 1.0  # sshd refuses for >= 15 s: once a second will do


@pytest.mark.parametrize(
    ("behave", "status", "reason"),
    [
        (banner_then_silence, Status.READY, "ready"),
        (silent, Status.READY, "ready"),  # a port that accepts, as --check tcp always took it
        (turned_away, Status.RETRY, "penalty"),
        (close_at_once, Status.RETRY, "closed"),
    ],
)
def test_check_tcp_takes_a_port_sshd_turns_away_for_not_ready(
    key: Path, tmp_path: Path, behave: Callable, status: Status, reason: str
) -> None:
    with server(behave) as port:
        outcome = probe(port, key, tmp_path, Check.TCP)
    assert (outcome.status, outcome.reason) == (status, reason)


def test_paramiko_still_says_a_close_before_the_banner_the_way_probes_reads_it() -> None:
    # The facts _before_banner relies on, straight from paramiko: no banner read (empty
    # remote_version) and the socket's EOFError kept as the SSHException's context.
    with server(close_at_once) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        transport = paramiko.Transport(sock)
        transport.banner_timeout = TIMEOUT
        try:
            with pytest.raises(paramiko.SSHException) as info:
                transport.start_client(timeout=10)
            assert transport.remote_version == ""
            assert isinstance(info.value.__context__, (EOFError, ConnectionError))
        finally:
            transport.close()


def test_paramiko_keeps_the_banner_it_read() -> None:
    with server(banner_then_close) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        transport = paramiko.Transport(sock)
        try:
            with pytest.raises((paramiko.SSHException, EOFError, OSError)):
                transport.start_client(timeout=10)
            assert transport.remote_version == "SSH-2.0-OpenSSH_9.2p1 Debian-2"
        finally:
            transport.close()


@pytest.mark.parametrize(
    ("behave", "banner", "why"),
    [
        (close_at_once, False, "closed"),
        (reset, False, "closed"),
        (silent, False, "silent"),
        (banner_then_close, True, None),
    ],
)
def test_the_adapter_reads_where_start_client_stopped(
    behave: Callable, banner: bool, why: str | None
) -> None:
    with server(behave) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        transport = adapter.transport(sock, TIMEOUT)
        try:
            try:
                transport.start_client(timeout=TIMEOUT)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                assert adapter.banner_seen(transport) is banner
                if not banner:
                    assert adapter.before_banner(exc) == why
            else:  # start_client may also just return when its own timeout passes first
                assert why == "silent"
                assert not adapter.banner_seen(transport)
            assert not adapter.kex_done(transport)
        finally:
            transport.close()


@pytest.mark.parametrize("check", ["tcp", "dns"])
def test_a_passing_attempt_carries_where_it_got(tmp_path: Path, check: str) -> None:
    """What the launch (its interface) and --list-ready (its cache) need comes with the
    outcome: the name looked up, what it resolved to, and this machine's end of the connect."""
    config = tmp_path / "ssh_config"
    config.write_text("Host w1\n  HostName 127.0.0.1\n")
    # a port that closes at once is no sshd to --check tcp: this one sends a banner and waits
    with server(banner_then_silence) as port:
        options = ProbeOptions(Check(check), ssh_config=config, port=port, connect_timeout=TIMEOUT)
        _, prober = prober_for(options, lookup_pool(1))
        outcome = prober.attempt("w1")
        name_only = prober.attempt("w1", name_only=True)
        if check == "dns":  # nothing connected: release the server's accept
            socket.create_connection(("127.0.0.1", port)).close()
    local = "127.0.0.1" if check == "tcp" else ""
    assert outcome.status is Status.READY
    assert outcome.reached == Reached("127.0.0.1", port, ("127.0.0.1",), local)
    assert name_only.reached == Reached("127.0.0.1", port, ("127.0.0.1",), "")


@testbed.needs("loopback")
def test_sshd_debug_lines_after_a_login_are_decoded_only_when_paramiko_would_log_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenSSH sends MSG_DEBUG lines after a login; the adapter's transport skips paramiko's
    byte-by-byte decoding of them unless paramiko's logger is on for DEBUG. Pins that paramiko
    still hands them to ``Transport._parse_debug``, which the adapter overrides."""
    transport_class = adapter._transport_class()
    parse, safe_string = transport_class._parse_debug, paramiko.util.safe_string
    seen: list[bytes] = []
    decoded: list[bytes] = []

    def counting_parse(self: paramiko.Transport, m: paramiko.Message) -> None:
        seen.append(m.asbytes())
        parse(self, m)

    def counting_safe_string(s: bytes) -> bytes:
        decoded.append(s)
        return safe_string(s)

    monkeypatch.setattr(transport_class, "_parse_debug", counting_parse)
    monkeypatch.setattr(paramiko.util, "safe_string", counting_safe_string)
    logger = logging.getLogger("paramiko")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    with testbed.Lab(tmp_path / "lab") as lab:
        key = lab.key()
        sshd = lab.sshd("127.0.0.1", authorized=[key])

        def login() -> None:
            with socket.create_connection(("127.0.0.1", sshd.port)) as sock:
                transport = adapter.transport(sock, 10.0)
                try:
                    transport.start_client(timeout=10.0)
                    transport.auth_publickey(
                        getpass.getuser(), paramiko.Ed25519Key.from_private_key_file(str(key))
                    )
                    testbed.wait_until(lambda: seen, 10.0, "a MSG_DEBUG from sshd")
                finally:
                    transport.close()

        login()  # paramiko's logger as mpiwait leaves it: not on for DEBUG
        assert seen and not decoded
        seen.clear()
        level = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
        try:
            login()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
    assert seen and decoded
    assert any(r.getMessage().startswith("Debug msg: ") for r in records)


class _RecordingSocket(socket.socket):
    """A TCP socket that notes the options set on it."""

    options: list[tuple[int, int, int]]

    def setsockopt(self, level: int, option: int, value: int) -> None:  # type: ignore[override]
        self.options.append((level, option, value))
        super().setsockopt(level, option, value)


@testbed.needs("loopback")
def test_sshd_debug_lines_are_acknowledged_at_once(tmp_path: Path) -> None:
    """sshd holds back its answer to the session after a login (the daemon check's) until its
    MSG_DEBUG lines are acknowledged; the adapter's transport asks the kernel to acknowledge
    them at once (TCP_QUICKACK) instead of after its delay. The control: before the login, no
    such request was made."""
    quickack = (socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
    with testbed.Lab(tmp_path / "lab") as lab:
        key = lab.key()
        sshd = lab.sshd("127.0.0.1", authorized=[key])
        with _RecordingSocket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.options = []
            sock.connect(("127.0.0.1", sshd.port))
            transport = adapter.transport(sock, 10.0)
            try:
                transport.start_client(timeout=10.0)
                assert quickack not in sock.options
                transport.auth_publickey(
                    getpass.getuser(), paramiko.Ed25519Key.from_private_key_file(str(key))
                )
                testbed.wait_until(lambda: quickack in sock.options, 10.0, "TCP_QUICKACK")
                status, _ = adapter.run(transport, "true", 10.0)
                assert status == 0
            finally:
                transport.close()
