"""--remote-command: it runs on the session and exits 0, within the stage's timeout."""

from __future__ import annotations

from mpiwait.probe import paramiko_adapter as adapter
from mpiwait.probe.outcome import Outcome, Reason, Stage, retry
from mpiwait.probe.stages.step import Session


class RemoteCommand:
    def __init__(self, command: str) -> None:
        self._command = command

    def __call__(self, session: Session) -> Outcome | None:
        command, timeout = self._command, session.timeout
        channel = session.transport.open_session(timeout=timeout)
        try:
            # Sent as given: the remote user's shell interprets it, exactly as with ssh host CMD.
            channel.exec_command(command)
            status = adapter.exit_status(channel, timeout)
            if status is None:
                return _failed(f"{command!r} did not finish within {timeout:g}s")
        finally:
            channel.close()
        if status != 0:
            return _failed(f"{command!r} exited with status {status}")
        return None


def _failed(detail: str) -> Outcome:
    return retry(Stage.SSH, Reason.REMOTE_COMMAND, detail)
