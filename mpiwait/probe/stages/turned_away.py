"""sshd's word before its banner: the line it writes before closing a connection it turns away
at once (OpenSSH 9.8+ for an address under a PerSourcePenalties penalty and at MaxStartups
alike, older releases only at MaxStartups: sshd.c, drop_connection), or a close."""

from __future__ import annotations

import contextlib
import socket

from mpiwait.probe.outcome import Outcome, Reason, Stage, Status, retry
from mpiwait.settings import NOAUTH_CHARGE

_TURNED_AWAY = b"Not allowed at this time"
_AT_MAX_STARTUPS = b"Exceeded MaxStartups"

# sshd closes at once when it is past MaxStartups (older ones after "Exceeded MaxStartups").
CLOSED_BEFORE_BANNER = retry(
    Stage.SSH,
    Reason.CLOSED,
    "connection closed before the SSH banner; is sshd at its MaxStartups limit?",
)
_PENALISED = Outcome(
    Status.RETRY,
    Stage.SSH,
    Reason.PENALTY,
    'sshd turned this address away before its banner ("Not allowed at this time"): '
    "a PerSourcePenalties penalty on it (OpenSSH 9.8+, after failed logins or "
    "connections closed before authenticating; sshd's log says "
    '"drop connection ... penalty: <why>"), or sshd is at its MaxStartups limit',
    # sshd drops these itself, uncharged; once a second is enough while it lasts (>= 15 s)
    pace=NOAUTH_CHARGE,
)
_MAX_STARTUPS = retry(Stage.SSH, Reason.CLOSED, "sshd is at its MaxStartups limit")


def turned_away(sock: socket.socket, wait: float) -> Outcome | None:
    """The outcome when sshd turns the connection away before its banner, else None.

    Peeks (reads nothing) at what the server sent within ``wait`` seconds: sshd sends its
    banner, or the line of a dropped connection, at once after accepting; a server that waits
    for the client's banner first, or is slow, is left to the handshake (None).
    """
    try:
        sock.settimeout(wait)
        first = sock.recv(len(_TURNED_AWAY), socket.MSG_PEEK)
    except TimeoutError:
        return None
    except OSError:
        first = b""  # reset: as closed
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(None)
    if not first:
        return CLOSED_BEFORE_BANNER
    if first.startswith(b"SSH-") or b"SSH-".startswith(first):
        return None
    line = first.rstrip(b"\r\n")  # the peek can hold the whole line, "Exceeded MaxStartups\r\n"
    if _TURNED_AWAY.startswith(line):
        return _PENALISED
    if _AT_MAX_STARTUPS.startswith(line):
        return _MAX_STARTUPS
    return None  # other text before the banner: the handshake reads it
