"""What one attempt at one host found, as a value the waiter decides on (retry, or give up)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Stage(str, enum.Enum):
    """How far a host has got. Each check stage includes the ones before it."""

    PENDING = "pending"  # listed, not probed yet
    DNS = "dns"  # its name does not resolve yet
    TCP = "tcp"  # resolves, but the SSH port does not accept
    SSH = "ssh"  # accepts TCP, but no banner / host key / login yet
    READY = "ready"


class Status(str, enum.Enum):
    READY = "ready"  # passed every stage asked for
    RETRY = "retry"  # not yet: time may fix it
    FATAL = "fatal"  # answered, but in a way time will not fix (key rejected, host key mismatch)


class Reason(str, enum.Enum):
    """Why an attempt ended as it did: short and stable, a change of it is worth a log line."""

    READY = "ready"
    SSH_CONFIG = "ssh-config"  # ssh would refuse its config (FATAL)
    UNRESOLVED = "unresolved"  # dns: no such name (yet), or not a valid one
    TIMEOUT = "timeout"  # dns or tcp: no answer within the stage's timeout
    RESOLVER_BUSY = "resolver-busy"  # dns: every resolver thread holds a stuck lookup
    REFUSED = "refused"  # tcp: the address answered, its SSH port is not listening yet
    UNREACHABLE = "unreachable"
    CONNECT_ERROR = "connect-error"
    # sshd turned the address away before its banner: it is penalised (PerSourcePenalties,
    # OpenSSH 9.8+) or sshd is at MaxStartups; they say the same to a client
    PENALTY = "penalty"
    CLOSED = "closed"  # closed before the banner (MaxStartups, a reset)
    NO_BANNER = "no-banner"
    HANDSHAKE = "handshake"
    HOST_KEY = "host-key"  # FATAL
    IDENTITY = "identity"  # an unusable key file (FATAL)
    AUTH_METHOD = "auth-method"  # public keys not accepted (FATAL)
    AUTH_REJECTED = "auth-rejected"  # every key refused (FATAL)
    REMOTE_COMMAND = "remote-command"  # --remote-command failed or did not finish
    DAEMON = "daemon"  # mpirun's daemon is not where it will look (FATAL), or not checked yet
    UNEXPECTED = "unexpected"  # an exception escaped the probe

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)


@dataclass(frozen=True, slots=True)
class Reached:
    """Where a passing attempt got, for its callers: the launch's interface, --list-ready's
    cache. Carried on the outcome so that nobody asks the prober again."""

    address: str  # the name or address looked up (ssh's HostName), and its port
    port: int
    addresses: tuple[str, ...]  # what it resolved to, in getaddrinfo's order
    local_address: str = ""  # this machine's end of the accepted connection; "" before a connect


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one attempt at one host."""

    status: Status
    stage: Stage  # READY when status is READY, otherwise the stage that did not pass
    reason: Reason
    detail: str = ""  # for people: what exactly went wrong
    hint: str | None = None  # what to do about a FATAL outcome
    reached: Reached | None = None  # set when the attempt passed
    # the least delay before the next attempt at this host (0: the schedule's own): one that
    # reached sshd and ended before authenticating counts against sshd's per-source penalties
    pace: float = 0.0


def retry(stage: Stage, reason: Reason, detail: str) -> Outcome:
    """Not yet, at ``stage``: time may fix it."""
    return Outcome(Status.RETRY, stage, reason, detail)


def unexpected(detail: str) -> Outcome:
    """An exception escaped the probe (a bug, a library surprise): retried like any other
    failure at the ssh stage, so that it kills neither the wait nor --list-ready."""
    return Outcome(Status.RETRY, Stage.SSH, Reason.UNEXPECTED, detail)


READY = Outcome(Status.READY, Stage.READY, Reason.READY)
