"""The SSH banner and key exchange, asking first for the host key types known_hosts lists."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpiwait.errors import PermanentError
from mpiwait.probe import paramiko_adapter as adapter
from mpiwait.probe.keys import HostKeyPolicy
from mpiwait.probe.outcome import Outcome, Reason, Stage, Status, retry
from mpiwait.probe.stages.step import Session
from mpiwait.probe.stages.tcp import oserror
from mpiwait.probe.stages.turned_away import CLOSED_BEFORE_BANNER

if TYPE_CHECKING:  # annotations only: importing paramiko here would load it for --check tcp
    import paramiko


class Handshake:
    def __init__(self, host_keys: HostKeyPolicy) -> None:
        self._host_keys = host_keys

    def __call__(self, session: Session) -> Outcome | None:
        import paramiko  # here, not at the top: --check tcp imports this module, never logs in

        transport, target, timeout = session.transport, session.target, session.timeout
        if target.strict_host_key_checking != "no":
            try:
                kh_address, kh_port = target.known_hosts_address
                known = self._host_keys.known_types(
                    address=kh_address, port=kh_port, files=target.known_hosts_files
                )
            except PermanentError as exc:
                return Outcome(Status.FATAL, Stage.SSH, Reason.HOST_KEY, exc.message, exc.hint)
            adapter.prefer_host_key_types(transport, known)
        try:
            transport.start_client(timeout=timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            return _before_banner(transport, exc, timeout) or retry(
                Stage.SSH, Reason.HANDSHAKE, f"SSH handshake failed: {oserror(exc)}"
            )
        if not adapter.kex_done(transport):
            # Tell a port that never sent a banner from a stalled key exchange.
            if not adapter.banner_seen(transport):
                return _no_banner(timeout)
            return retry(Stage.SSH, Reason.HANDSHAKE, f"no SSH key exchange within {timeout:g}s")
        return None


def _before_banner(
    transport: paramiko.Transport, exc: BaseException, timeout: float
) -> Outcome | None:
    """The outcome when ``start_client`` failed before the server's SSH banner arrived, else
    None (the failure came later, in the key exchange)."""
    if adapter.banner_seen(transport):
        return None
    why = adapter.before_banner(exc)
    if why == "closed":
        return CLOSED_BEFORE_BANNER
    if why == "silent":
        return _no_banner(timeout)
    return None


def _no_banner(timeout: float) -> Outcome:
    return retry(Stage.SSH, Reason.NO_BANNER, f"no SSH banner within {timeout:g}s")
