"""What the steps of the ssh stage share: the attempt's values, and the one interface each step
(handshake.py, host_key.py, login.py, remote_command.py) implements."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Protocol

    import paramiko

    from mpiwait.openssh.config import SSHTarget
    from mpiwait.probe.keys import Identity
    from mpiwait.probe.outcome import Outcome


class Session:
    """One attempt's ssh session, as the steps see it (a plain class, as in wait/runner.py's
    ConnectionLost)."""

    __slots__ = ("identities", "target", "timeout", "transport")

    def __init__(
        self,
        transport: paramiko.Transport,
        target: SSHTarget,
        timeout: float,
        identities: tuple[Identity, ...],
    ) -> None:
        self.transport = transport
        self.target = target
        self.timeout = timeout  # seconds each wait of the step may take
        self.identities = identities  # the keys to log in with, in ssh's order


if TYPE_CHECKING:  # an interface for the type checker: a Protocol class costs every start

    class Step(Protocol):
        """One step on the session: None when it passed, else the outcome that ends the
        attempt."""

        def __call__(self, session: Session) -> Outcome | None: ...
