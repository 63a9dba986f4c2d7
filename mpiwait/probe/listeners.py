"""The sshd listeners of hosts held by a kept connection, tried once more as the wait ends.

A kept connection (probe/kept.py) outlives an sshd that stopped listening, so when every host is
ready each such host's listener gets a TCP connect to the kept connection's own peer address (no
lookup), all at once in one selector, each closed once connected. A host whose listener does not
accept in time goes back to a full check. An accepted connect is charged to the address's
account (probe/pace.py), and a host whose account has no room is not tried. Why and what it
proves: docs/how-it-works.md, "Fresh at the launch"."""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mpiwait.probe.kept import KeptConnections
from mpiwait.probe.pace import Pacer, address_key
from mpiwait.settings import LISTENER_RESEND, LISTENER_WINDOW


@dataclass(frozen=True, slots=True)
class Listener:
    family: int
    address: tuple[Any, ...]  # a sockaddr, as getpeername() gives it
    timeout: float  # seconds it has to accept


def not_accepting(
    listeners: Mapping[str, Listener],
    *,
    window: int = LISTENER_WINDOW,
    resend: float = LISTENER_RESEND,
    clock: Callable[[], float] = time.monotonic,
) -> set[str]:
    """The hosts whose listener refused, or did not accept within its timeout; every connect
    runs in parallel (at most ``window`` open at once) and is closed as soon as it is decided.
    One still unanswered after ``resend`` s is made again (its SYN was likely dropped)."""
    tries = _Tries(selectors.DefaultSelector(), clock, resend)
    pending = iter(listeners.items())
    try:
        while tries.fill(pending, window) or tries.open:
            wake = min(min(t.deadline, t.resend_at) for t in tries.open.values())
            for key, _ in tries.selector.select(max(0.0, wake - clock())):
                tries.answered(key.fileobj)  # type: ignore[arg-type]
            tries.expire()
    finally:
        tries.close()
    return tries.failed


@dataclass(frozen=True, slots=True)
class _Try:
    host: str
    listener: Listener
    deadline: float
    resend_at: float


class _Tries:
    """The connects under way, by socket."""

    def __init__(
        self, selector: selectors.BaseSelector, clock: Callable[[], float], resend: float
    ) -> None:
        self.selector = selector
        self.clock = clock
        self.resend = resend
        self.open: dict[socket.socket, _Try] = {}
        self.failed: set[str] = set()

    def fill(self, pending: Iterator[tuple[str, Listener]], window: int) -> bool:
        """Start connects until ``window`` are open; True when any was started."""
        started = False
        while len(self.open) < window:
            item = next(pending, None)
            if item is None:
                break
            host, listener = item
            started |= self.start(host, listener, self.clock() + listener.timeout)
        return started

    def start(self, host: str, listener: Listener, deadline: float) -> bool:
        sock = _start(listener)
        if sock is None:
            self.failed.add(host)
            return False
        resend_at = min(deadline, self.clock() + self.resend)
        self.open[sock] = _Try(host, listener, deadline, resend_at)
        self.selector.register(sock, selectors.EVENT_WRITE)
        return True

    def answered(self, sock: socket.socket) -> None:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
            self.failed.add(self.open[sock].host)
        self.drop(sock)

    def expire(self) -> None:
        """Fail the tries past their deadline; make again those past their resend time (a
        fresh SYN, where the kernel would wait a second before resending)."""
        now = self.clock()
        for sock, t in list(self.open.items()):
            if t.deadline <= now:
                self.failed.add(t.host)
                self.drop(sock)
            elif t.resend_at <= now:
                self.drop(sock)
                self.start(t.host, t.listener, t.deadline)

    def drop(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)
        del self.open[sock]
        sock.close()

    def close(self) -> None:
        for sock in self.open:
            sock.close()
        self.selector.close()


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
