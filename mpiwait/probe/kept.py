"""The connection of each passed login, kept open until the launch and watched for its end.

The prober hands over a duplicate of the login's socket instead of closing it. Nothing is sent
on it again: the worker's sshd holds an idle authenticated session, which it never counts as a
connection closed before authentication. TCP keepalives run on it. It ends when the worker's
sshd session ends (container restarted, evicted) or keepalives go unanswered (node gone); one
thread waits on all of them (epoll) and reports each end, so the host is checked again. What
this proves and what it does not: docs/how-it-works.md."""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

from mpiwait.settings import KEEPALIVE, KEPT_FD_RESERVE


class KeptConnections:
    """host -> its last login's socket; ``on_lost(host)`` is called (from the watcher thread)
    when that connection ends. ``close()`` ends them all and restores the fd limit."""

    def __init__(self, on_lost: Callable[[str], None]) -> None:
        self._on_lost = on_lost
        self._selector = selectors.DefaultSelector()
        self._socks: dict[str, socket.socket] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._closed = False
        self._limit = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._budget = _raise_fd_limit(self._limit) - KEPT_FD_RESERVE
        self._thread = threading.Thread(target=self._watch, name="mpiwait-kept", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._socks)

    def holds(self, host: str) -> bool:
        with self._lock:
            return host in self._socks

    def peer(self, host: str) -> tuple[int, tuple[Any, ...]] | None:
        """(address family, peer address) of ``host``'s kept connection; None without one."""
        with self._lock:
            sock = self._socks.get(host)
            if sock is None:
                return None
            try:
                return sock.family, sock.getpeername()
            except OSError:  # already ended: its end is being reported
                return None

    def keep(self, host: str, sock: socket.socket) -> bool:
        """Watch ``sock``'s connection as ``host``'s, replacing the one kept before; ``sock``
        is handed over (the prober's duplicate: paramiko closes its own), and closed here when
        it cannot be kept (False)."""
        with self._lock:
            old = self._socks.pop(host, None)
            if old is not None:
                self._forget(old)
            if self._closed or sock.fileno() >= self._budget:
                sock.close()  # the host is re-checked instead
                return False
            try:
                _keepalive(sock)
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ, host)
            except OSError:
                sock.close()
                return False
            self._socks[host] = sock
        return True

    def close(self) -> None:
        """Close every kept connection (an authenticated session's end: no penalty) and put the
        fd limit back as it was, so that COMMAND inherits the limit mpiwait was given."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for sock in self._socks.values():
                self._forget(sock)
            self._socks.clear()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")  # the watcher ends by itself: no join on the way to exec
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, self._limit)

    def _forget(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()

    def _watch(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    with self._lock:
                        if self._closed:
                            self._selector.close()
                            self._wake_r.close()
                            self._wake_w.close()
                            return
                    continue
                self._readable(key.data, key.fileobj)  # type: ignore[arg-type]

    def _readable(self, host: str, sock: socket.socket) -> None:
        try:
            # The server may say something (a host-keys notice, a keepalive request): it is
            # encrypted and not ours to answer; only the end of the connection matters.
            if sock.recv(65536):
                return
        except BlockingIOError:
            return
        except OSError:
            pass  # reset, or the keepalives went unanswered (ETIMEDOUT)
        with self._lock:
            if self._socks.get(host) is not sock:
                return
            del self._socks[host]
            self._forget(sock)
        self._on_lost(host)


def _keepalive(sock: socket.socket) -> None:
    idle, interval, count = KEEPALIVE
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)


def _raise_fd_limit(limit: tuple[int, int]) -> int:
    """Raise the soft fd limit to the hard one (a kept connection is an fd); the limit now."""
    soft, hard = (1 << 20 if v == resource.RLIM_INFINITY else v for v in limit)
    if hard > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, limit[1]))
            return hard
    return soft
