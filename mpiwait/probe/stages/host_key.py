"""StrictHostKeyChecking against the key the server showed in the handshake."""

from __future__ import annotations

from mpiwait.errors import PermanentError
from mpiwait.probe.keys import HostKeyPolicy
from mpiwait.probe.outcome import Outcome, Reason, Stage, Status
from mpiwait.probe.stages.step import Session


class HostKeyCheck:
    def __init__(self, host_keys: HostKeyPolicy) -> None:
        self._host_keys = host_keys

    def __call__(self, session: Session) -> Outcome | None:
        target = session.target
        try:
            kh_address, kh_port = target.known_hosts_address
            self._host_keys.check(
                host=target.host,
                address=kh_address,
                port=kh_port,
                key=session.transport.get_remote_server_key(),
                strict=target.strict_host_key_checking,
                files=target.known_hosts_files,
            )
        except PermanentError as exc:
            return Outcome(Status.FATAL, Stage.SSH, Reason.HOST_KEY, exc.message, exc.hint)
        return None
