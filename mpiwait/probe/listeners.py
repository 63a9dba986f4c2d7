"""The sshd listeners of hosts held by a kept connection, checked once more as the wait ends.

A kept connection (probe/kept.py) lives as long as the worker's sshd session for it, which an
sshd that stops listening (restarted outside a container) does not end. So when every host is
ready, the listener of each host that holds one is tried: a TCP connect to the kept
connection's own peer address and port (no name lookup: had the worker moved, its kept
connection would have ended), all at once in one selector, each closed as soon as it connects.
A connect the listener does not accept within the host's connect timeout sends the host back
to a full check. One that it accepts is a connection closed before authentication, which an
OpenSSH 9.8+ sshd charges 1 s (``PerSourcePenalties noauth``): it is charged to the address's
account in probe/pace.py, and a host whose account has no room for it is not tried
(docs/how-it-works.md, "Fresh at the launch").
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, NamedTuple

from mpiwait.probe.kept import KeptConnections
from mpiwait.probe.pace import Pacer, address_key

# Connects open at once: well under kept.FD_RESERVE, the descriptors left beside kept ones.
WINDOW = 128


class Listener(NamedTuple):
    family: int
    address: tuple[Any, ...]  # a sockaddr, as getpeername() gives it
    timeout: float  # seconds it has to accept


def not_accepting(
    listeners: Mapping[str, Listener],
    *,
    window: int = WINDOW,
    clock: Callable[[], float] = time.monotonic,
) -> set[str]:
    """The hosts whose listener refused, or did not accept within its timeout; every connect
    runs in parallel (at most ``window`` open at once) and is closed as soon as it is decided."""
    failed: set[str] = set()
    pending = iter(listeners.items())
    open_: dict[socket.socket, tuple[str, float]] = {}
    with selectors.DefaultSelector() as selector:
        try:
            while _fill(open_, pending, window, selector, failed, clock) or open_:
                first = min(deadline for _, deadline in open_.values())
                for key, _ in selector.select(max(0.0, first - clock())):
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                        failed.add(key.data)
                    _close(sock, open_, selector)
                now = clock()
                for sock, (host, deadline) in list(open_.items()):
                    if deadline <= now:
                        failed.add(host)
                        _close(sock, open_, selector)
        finally:
            for sock in open_:
                sock.close()
    return failed


def _fill(
    open_: dict[socket.socket, tuple[str, float]],
    pending: Iterator[tuple[str, Listener]],
    window: int,
    selector: selectors.BaseSelector,
    failed: set[str],
    clock: Callable[[], float],
) -> bool:
    """Start connects until ``window`` are open; True when any was started."""
    started = False
    while len(open_) < window:
        item = next(pending, None)
        if item is None:
            break
        host, listener = item
        sock = _start(listener)
        if sock is None:
            failed.add(host)
            continue
        open_[sock] = (host, clock() + listener.timeout)
        selector.register(sock, selectors.EVENT_WRITE, host)
        started = True
    return started


def _start(listener: Listener) -> socket.socket | None:
    """A non-blocking connect under way to ``listener``; None when it failed at once (refused
    on the spot, or no socket to be had: the full check decides then)."""
    try:
        sock = socket.socket(listener.family, socket.SOCK_STREAM)
    except OSError:
        return None
    sock.setblocking(False)
    code = sock.connect_ex(listener.address)
    if code in (0, errno.EINPROGRESS):
        return sock
    sock.close()
    return None


def _close(
    sock: socket.socket,
    open_: dict[socket.socket, tuple[str, float]],
    selector: selectors.BaseSelector,
) -> None:
    with contextlib.suppress(KeyError, ValueError):
        selector.unregister(sock)
    del open_[sock]
    sock.close()


def listener_check(
    kept: KeptConnections, pacer: Pacer, timeout_for: Callable[[str], float]
) -> Callable[[Collection[str]], set[str]]:
    """The wait loop's check of ``hosts``' listeners: the hosts to check again in full."""

    def check(hosts: Collection[str]) -> set[str]:
        listeners: dict[str, Listener] = {}
        for host in hosts:
            peer = kept.peer(host)
            if peer is None:
                continue  # its kept connection ended: that end is already reported
            if not pacer.room(address_key(peer[1])):
                continue  # a try could add to an sshd penalty: not worth the launch
            listeners[host] = Listener(peer[0], peer[1], timeout_for(host))
        failed = not_accepting(listeners)
        for host in listeners.keys() - failed:
            pacer.charge(address_key(listeners[host].address))
        return failed

    return check
