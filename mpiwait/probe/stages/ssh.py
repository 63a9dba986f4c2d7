"""The ssh stage on a connected socket: the steps (handshake, host key, login, remote command,
daemon check) in order on one paramiko transport, stopping at the first that does not pass.
paramiko is imported at the first login, never by --check tcp or dns; what of its internals
mpiwait relies on is in probe/paramiko_adapter.py.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from mpiwait.errors import PermanentError
from mpiwait.openssh.config import SSHTarget
from mpiwait.probe import paramiko_adapter as adapter
from mpiwait.probe.daemon import DaemonPlan
from mpiwait.probe.keys import HostKeyPolicy, IdentityCache
from mpiwait.probe.outcome import READY, Outcome, Reason, Stage, Status, retry
from mpiwait.probe.stages.daemon import DaemonCheck
from mpiwait.probe.stages.handshake import Handshake
from mpiwait.probe.stages.host_key import HostKeyCheck
from mpiwait.probe.stages.login import log_in
from mpiwait.probe.stages.remote_command import RemoteCommand
from mpiwait.probe.stages.step import Session, Step
from mpiwait.probe.stages.tcp import oserror

# The ssh stage's outcome, and, when it passed and a duplicate was asked for, the authenticated
# connection (paramiko closes its own socket, and sends nothing on close).
SshResult = tuple[Outcome, socket.socket | None]


class SshStage:
    def __init__(
        self,
        identities: IdentityCache,
        host_keys: HostKeyPolicy,
        remote_command: str | None,
        daemons: DaemonPlan | None = None,
    ) -> None:
        self._identities = identities
        steps: list[Step] = [Handshake(host_keys), HostKeyCheck(host_keys), log_in]
        if remote_command:
            steps.append(RemoteCommand(remote_command))
        if daemons is not None:
            steps.append(DaemonCheck(daemons))
        self._steps: Sequence[Step] = tuple(steps)

    def __call__(
        self, sock: socket.socket, target: SSHTarget, timeout: float, *, duplicate: bool
    ) -> SshResult:
        """The steps on ``sock``; ``duplicate``: hand back the connection of a pass."""
        import paramiko  # here, not at the top: --check tcp imports this module, never logs in

        try:
            identities = self._identities.get(
                target.identity_files, defaults=target.identities_default
            )
        except PermanentError as exc:
            fatal = Outcome(Status.FATAL, Stage.SSH, Reason.IDENTITY, exc.message, exc.hint)
            return fatal, None
        transport = adapter.transport(sock, timeout)
        session = Session(transport, target, timeout, identities)
        try:
            for step in self._steps:
                failed = step(session)
                if failed is not None:
                    return failed, None
            return READY, _duplicate(sock) if duplicate else None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            detail = f"SSH session failed: {oserror(exc)}"
            return retry(Stage.SSH, Reason.HANDSHAKE, detail), None
        finally:
            transport.close()


def _duplicate(sock: socket.socket) -> socket.socket | None:
    """A duplicate of ``sock``; None when out of file descriptors (the host is re-checked
    instead of kept)."""
    try:
        return sock.dup()
    except OSError:
        return None
