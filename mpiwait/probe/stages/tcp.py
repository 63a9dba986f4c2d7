"""The tcp stage: connect to the first address that accepts, as ssh does."""

from __future__ import annotations

import contextlib
import errno
import socket

from mpiwait.probe.outcome import Outcome, Reason, Stage, retry
from mpiwait.probe.pace import address_key
from mpiwait.probe.stages.dns import AddrInfo


def connect(infos: list[AddrInfo], timeout: float) -> socket.socket | Outcome:
    """A connected socket, or the outcome naming the last address's error."""
    failure: Outcome | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            # paramiko does not set it; without it each SSH round trip waits on Nagle's
            # algorithm (docs/design-decisions.md).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeout)
            sock.connect(address)
        except ConnectionRefusedError:
            failure = retry(Stage.TCP, Reason.REFUSED, f"{address[0]} port {address[1]}: refused")
        except TimeoutError:
            where = f"{address[0]} port {address[1]}"
            failure = retry(Stage.TCP, Reason.TIMEOUT, f"{where}: no answer in {timeout:g}s")
        except OSError as exc:
            reason = (
                Reason.UNREACHABLE
                if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)
                else Reason.CONNECT_ERROR
            )
            failure = retry(Stage.TCP, reason, f"{address[0]} port {address[1]}: {oserror(exc)}")
        else:
            return sock
        sock.close()
    return failure or retry(Stage.DNS, Reason.UNRESOLVED, "no address")


def ends(sock: socket.socket) -> tuple[str, str]:
    """This machine's address of a connected ``sock``, and the account (probe/pace.py) of the
    address it is connected to."""
    local, peer = "", "-"
    with contextlib.suppress(OSError):
        local = sock.getsockname()[0]
        peer = address_key(sock.getpeername())
    return local, peer


def oserror(exc: BaseException) -> str:
    """An error's words for a detail line: its strerror where it has one."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
