"""paramiko as mpiwait uses it: the behaviour it relies on that paramiko does not promise
(private attributes, the shape of its exceptions, the handler of MSG_DEBUG it overrides), in
one place.

tests/integration/test_probes_paramiko.py pins each of these against the installed paramiko
(and CI against the oldest allowed one), so that a release that changes one fails there, not as
a probe that silently misreports. Importing this module must not import paramiko: --check tcp
and --check dns run the stages without it."""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: importing paramiko here would load it for --check tcp
    import paramiko

# Without a handler, paramiko's ERROR records (a traceback per failed handshake) reach stderr
# among mpiwait's lines and its JSON; each failure is reported once already, as an Outcome.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def transport(sock: socket.socket, timeout: float) -> paramiko.Transport:
    """A client transport on ``sock`` whose every wait (banner, key exchange, auth) is bounded
    by ``timeout``: paramiko's own 15 s banner and 30 s auth defaults would let one silent
    host hold a probe slot far longer than the per-stage timeout promised to the user."""
    t = _transport_class()(sock)
    t.banner_timeout = timeout
    t.handshake_timeout = timeout
    t.auth_timeout = timeout
    return t


@functools.cache
def _transport_class() -> type[paramiko.Transport]:
    """paramiko's Transport, except that a MSG_DEBUG (sshd sends two after every login) is
    acknowledged at once, and decoded only when paramiko's logger would log it: paramiko builds
    the line byte by byte first (``util.safe_string``), and mpiwait discards paramiko's
    records."""
    import paramiko  # here, not at the top: only a login needs paramiko

    class Transport(paramiko.Transport):
        def _parse_debug(self, m: paramiko.Message) -> None:
            # Until these are acknowledged, sshd (Nagle) holds back its answer to the next
            # request, the daemon check's session: acknowledge now, not after the kernel's delay.
            if isinstance(self.sock, socket.socket):  # always, for a probe
                with contextlib.suppress(OSError):
                    self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            if self.logger.isEnabledFor(logging.DEBUG):
                super()._parse_debug(m)  # type: ignore[misc]  # private: not in the stubs

    return Transport


def kex_done(t: paramiko.Transport) -> bool:
    """Whether the first key exchange finished: ``start_client`` returns silently, without an
    exception, when its own timeout passes first."""
    return bool(t.initial_kex_done)


def banner_seen(t: paramiko.Transport) -> bool:
    """Whether the server's SSH banner arrived (``remote_version`` stays empty until then)."""
    return bool(t.remote_version)


def before_banner(exc: BaseException) -> Literal["closed", "silent"] | None:
    """Why ``start_client`` failed before a banner: the server closed the connection, or stayed
    silent; None when neither can be told.

    paramiko raises a plain SSHException ("Error reading SSH protocol banner...") for both; no
    subclass or attribute says which. It is raised while handling the socket's own error, which
    ``__context__`` keeps (EOFError or a reset for a close, a timeout for silence); a reset that
    hits the sending of our own banner comes as the OSError itself.
    """
    cause = exc if isinstance(exc, (EOFError, OSError)) else exc.__context__
    if isinstance(cause, (EOFError, ConnectionError)):
        return "closed"
    if isinstance(cause, TimeoutError):  # socket.timeout is TimeoutError
        return "silent"
    return None


def prefer_host_key_types(t: paramiko.Transport, known: tuple[str, ...]) -> None:
    """Ask first for the host key types in ``known``, as ssh does (order_hostkeyalgs)."""
    if not known:
        return
    options = t.get_security_options()
    offered = list(options.key_types)
    # rsa-sha2-256/512 are signatures made with an ssh-rsa key.
    first = [a for a in offered if ("ssh-rsa" if a.startswith("rsa-sha2-") else a) in known]
    if first:
        options.key_types = first + [a for a in offered if a not in first]


def exit_status(channel: paramiko.Channel, timeout: float) -> int | None:
    """The remote command's exit status, or None if it did not finish within ``timeout``
    (``recv_exit_status`` alone would wait forever)."""
    if not channel.status_event.wait(timeout):
        return None
    return channel.recv_exit_status()


def run(transport: paramiko.Transport, command: str, timeout: float) -> tuple[int | None, str]:
    """Run ``command`` on a new session: its exit status (None if it did not finish within
    ``timeout``) and its output, stdout and stderr merged."""
    channel = transport.open_session(timeout=timeout)
    try:
        channel.set_combine_stderr(True)
        channel.settimeout(timeout)
        channel.exec_command(command)
        chunks = []
        try:
            while chunk := channel.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            return None, b"".join(chunks).decode(errors="replace")
        status = exit_status(channel, timeout)
    finally:
        channel.close()
    return status, b"".join(chunks).decode(errors="replace")
