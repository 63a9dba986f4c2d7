"""probe/listeners.py: the parallel connect to the listeners of kept hosts, over real loopback
sockets (a port that listens, one that refuses, one whose backlog is full)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from mpiwait.probe.listeners import Listener, listener_check, not_accepting
from mpiwait.probe.pace import Pacer, address_key
from mpiwait.settings import NOAUTH_BUDGET


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    yield server
    server.close()


@pytest.fixture
def closed_port() -> int:
    # a port nothing listens on: bound, then released
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _at(port: int, timeout: float = 5.0) -> Listener:
    return Listener(socket.AF_INET, ("127.0.0.1", port), timeout)


def test_a_listening_port_accepts_and_a_closed_one_does_not(listening, closed_port) -> None:
    up = listening.getsockname()[1]
    assert not_accepting({"up": _at(up), "down": _at(closed_port)}) == {"down"}
    # the accepted connect was closed at once: the server reads its end
    conn, _ = listening.accept()
    conn.settimeout(5)
    assert conn.recv(1) == b""
    conn.close()


def test_many_hosts_go_through_a_small_window(listening, closed_port) -> None:
    up = listening.getsockname()[1]
    hosts = {f"u{i}": _at(up) for i in range(40)} | {f"d{i}": _at(closed_port) for i in range(9)}
    assert not_accepting(hosts, window=4) == {f"d{i}" for i in range(9)}


def test_a_listener_that_never_accepts_fails_within_its_timeout() -> None:
    # a listener whose backlog is full: further SYNs go unanswered, the connect hangs
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fillers.append(c)
        began = time.monotonic()
        assert not_accepting({"stuck": _at(port, timeout=0.3)}) == {"stuck"}
        assert time.monotonic() - began < 30  # bounded by the timeout, not the kernel's
    finally:
        for c in fillers:
            c.close()
        server.close()


class FakeKept:
    def __init__(self, peers):
        self.peers = peers

    def peer(self, host):
        return self.peers.get(host)


def test_accepted_tries_are_charged_and_an_account_without_room_is_not_tried(
    listening, closed_port
) -> None:
    up = ("127.0.0.1", listening.getsockname()[1])
    down = ("127.0.0.1", closed_port)
    full = socket.socket()  # a second listener whose account is already spent
    full.bind(("127.0.0.1", 0))
    spent = full.getsockname()[1]  # not listening: a try would be refused
    full.close()
    pacer = Pacer(None, clock=lambda: 1000.0)  # charges do not run down here
    for _ in range(int(NOAUTH_BUDGET)):
        pacer.charge(address_key(("127.0.0.1", spent)))
    kept = FakeKept(
        {"up": (socket.AF_INET, up), "down": (socket.AF_INET, down),
         "spent": (socket.AF_INET, ("127.0.0.1", spent))}
    )  # fmt: skip
    check = listener_check(kept, pacer, lambda host: 5.0)  # type: ignore[arg-type]
    assert check(["up", "down", "spent", "gone"]) == {"down"}
    for _ in range(int(NOAUTH_BUDGET) - 2):
        pacer.charge(address_key(up))
    assert pacer.room(address_key(up))  # the check's own charge and 3 more: room for one
    pacer.charge(address_key(up))
    assert not pacer.room(address_key(up))
    assert check(["up"]) == set()  # not tried: nothing to send back
