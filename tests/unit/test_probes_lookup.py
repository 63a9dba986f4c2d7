"""Each way a name lookup fails becomes its own not-yet outcome of the dns stage (pure logic:
a fake resolver raises; nothing is looked up or connected)."""

from __future__ import annotations

import socket

import pytest

from mpiwait.openssh.config import SSHTarget
from mpiwait.probe.attempt import Prober
from mpiwait.probe.lookup import LookupTimeout, ResolverBusy
from mpiwait.probe.outcome import Outcome, Stage, Status
from mpiwait.settings import Check, ProbeOptions

TARGET = SSHTarget(
    host="w1",
    address="w1.example",
    port=22,
    user="mpiuser",
    identity_files=(),
    identities_default=True,
    strict_host_key_checking="no",
    known_hosts_files=(),
    connect_timeout=None,
    config_files=(),
)


class _Targets:
    def resolve(self, host: str) -> SSHTarget:
        return TARGET


class _Failing:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def resolve(self, host: str, port: int, timeout: float) -> list:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "reason", "detail"),
    [
        (LookupTimeout(), "timeout", "no answer from the resolver in 2.5s"),
        (ResolverBusy(), "resolver-busy", "every resolver thread holds an unanswered lookup"),
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "unresolved",
            "w1.example: Name or service not known",
        ),
        (UnicodeError("label too long"), "unresolved", "w1.example: not a valid name"),
    ],
)
def test_a_failed_lookup_is_a_dns_retry_naming_why(
    exc: BaseException, reason: str, detail: str
) -> None:
    prober = Prober(
        ProbeOptions(Check.DNS, connect_timeout=2.5),
        _Targets(),  # type: ignore[arg-type]
        lookups=_Failing(exc),  # type: ignore[arg-type]
    )
    assert prober.attempt("w1") == Outcome(Status.RETRY, Stage.DNS, reason, detail)


def test_any_other_lookup_error_is_not_swallowed() -> None:
    prober = Prober(
        ProbeOptions(Check.DNS, connect_timeout=2.5),
        _Targets(),  # type: ignore[arg-type]
        lookups=_Failing(RuntimeError("bug")),  # type: ignore[arg-type]
    )
    with pytest.raises(RuntimeError):
        prober.attempt("w1")
