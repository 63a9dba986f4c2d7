"""What the steps of the ssh stage share: the attempt's values, and the one interface each step
(handshake.py, host_key.py, login.py, remote_command.py, daemon.py) implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mpiwait.openssh.config import SSHTarget
from mpiwait.probe.keys import Identity
from mpiwait.probe.outcome import Outcome

if TYPE_CHECKING:  # annotations only: importing paramiko here would load it for --check tcp
    import paramiko


@dataclass(frozen=True, slots=True)
class Session:
    """One attempt's ssh session, as the steps see it."""

    transport: paramiko.Transport
    target: SSHTarget
    timeout: float  # seconds each wait of the step may take
    identities: tuple[Identity, ...]  # the keys to log in with, in ssh's order


class Step(Protocol):
    """One step on the session: None when it passed, else the outcome that ends the attempt."""

    def __call__(self, session: Session) -> Outcome | None: ...
