"""Public-key authentication as mpirun's user, with each key in ssh's order."""

from __future__ import annotations

from mpiwait.probe.outcome import Outcome, Reason, Stage, Status
from mpiwait.probe.stages.step import Session


def log_in(session: Session) -> Outcome | None:
    import paramiko  # here, not at the top: --check tcp imports this module, never logs in

    transport, target = session.transport, session.target
    for identity in session.identities:
        try:
            transport.auth_publickey(target.user, identity.key)
        except paramiko.BadAuthenticationType as exc:
            return Outcome(
                Status.FATAL,
                Stage.SSH,
                Reason.AUTH_METHOD,
                f"{target.user}@{target.host} does not accept public keys "
                f"(allowed: {', '.join(exc.allowed_types) or 'none'})",
                "enable PubkeyAuthentication in the worker's sshd_config",
            )
        except paramiko.AuthenticationException:
            continue
        if transport.is_authenticated():
            return None
    tried = ", ".join(identity.label for identity in session.identities)
    return Outcome(
        Status.FATAL,
        Stage.SSH,
        Reason.AUTH_REJECTED,
        f"Permission denied (publickey) for {target.user}@{target.host} "
        f"port {target.port}; keys tried: {tried}",
        "the worker's authorized_keys must hold the public half of this key for this user "
        "(mpi-operator: the job's ssh-auth secret, mounted on launcher and workers alike)",
    )
