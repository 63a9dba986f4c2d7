"""The kept connections of passed logins (probe/kept.py), over real local TCP connections."""

from __future__ import annotations

import queue
import resource
import socket
from collections.abc import Iterator

import pytest

from mpiwait.probe.kept import KeptConnections

WAIT = 10.0  # generous: only a hang reaches it


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """Connected (client, server) TCP pairs on loopback, closed afterwards."""
    made: list[tuple[socket.socket, socket.socket]] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def make() -> tuple[socket.socket, socket.socket]:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        made.append((client, server))
        return client, server

    yield make  # type: ignore[misc]
    listener.close()
    for a, b in made:
        a.close()
        b.close()


@pytest.fixture
def kept() -> Iterator[tuple[KeptConnections, queue.SimpleQueue[str]]]:
    lost: queue.SimpleQueue[str] = queue.SimpleQueue()
    k = KeptConnections(lost.put)
    yield k, lost
    k.close()


def test_the_end_of_a_kept_connection_is_reported_once(pairs, kept) -> None:
    k, lost = kept
    client, server = pairs()
    assert k.keep("w1", client.dup())  # the prober's duplicate, handed over
    client.close()  # the socket paramiko closes: the kept duplicate stays open
    assert k.holds("w1")
    server.close()  # the worker's session ends
    assert lost.get(timeout=WAIT) == "w1"
    assert not k.holds("w1")
    with pytest.raises(queue.Empty):
        lost.get(timeout=0.2)


def test_what_the_server_says_is_read_and_dropped_not_taken_for_an_end(pairs, kept) -> None:
    k, lost = kept
    client, server = pairs()
    k.keep("w1", client.dup())
    server.sendall(b"x" * 100_000)
    with pytest.raises(queue.Empty):
        lost.get(timeout=0.5)
    assert k.holds("w1")
    server.close()
    assert lost.get(timeout=WAIT) == "w1"


def test_a_new_login_replaces_the_connection_kept_before_and_closes_it(pairs, kept) -> None:
    k, lost = kept
    first, first_server = pairs()
    second, _ = pairs()
    k.keep("w1", first.dup())
    first.close()
    k.keep("w1", second.dup())
    first_server.settimeout(WAIT)
    assert first_server.recv(1) == b""  # closed by us: the worker sees its session end
    with pytest.raises(queue.Empty):
        lost.get(timeout=0.3)  # and it is not reported as lost
    assert len(k) == 1


def test_close_ends_every_connection_and_keeps_no_more(pairs) -> None:
    lost: queue.SimpleQueue[str] = queue.SimpleQueue()
    k = KeptConnections(lost.put)
    client, server = pairs()
    k.keep("w1", client.dup())
    client.close()
    k.close()
    server.settimeout(WAIT)
    assert server.recv(1) == b""
    other, other_server = pairs()
    assert not k.keep("w2", other)
    other_server.settimeout(WAIT)
    assert other_server.recv(1) == b""  # a socket it cannot keep is closed, not leaked
    with pytest.raises(queue.Empty):
        lost.get(timeout=0.2)


def test_the_fd_limit_is_raised_while_keeping_and_put_back_after() -> None:
    original = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = original[1]
    low = min(original[0], 512)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))  # as a container may start us
    try:
        k = KeptConnections(lambda host: None)
        raised = resource.getrlimit(resource.RLIMIT_NOFILE)
        k.close()
        assert raised[0] == (hard if hard != resource.RLIM_INFINITY else 1 << 20) or hard == low
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (low, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, original)
