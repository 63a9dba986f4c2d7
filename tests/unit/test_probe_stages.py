"""Each stage of an attempt (probe/stages/) on its own: fakes stand in for the resolver,
paramiko's transport and the key policies; sockets are loopback pairs in this process."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import paramiko
import pytest
import testbed

from mpiwait.errors import PermanentError
from mpiwait.openssh.config import SSHTarget
from mpiwait.probe.attempt import Prober
from mpiwait.probe.lookup import LookupTimeout, ResolverBusy
from mpiwait.probe.outcome import READY, Outcome, Reason, Stage, Status
from mpiwait.probe.stages import ssh as ssh_stage
from mpiwait.probe.stages.dns import Resolved, Resolver
from mpiwait.probe.stages.handshake import Handshake
from mpiwait.probe.stages.host_key import HostKeyCheck
from mpiwait.probe.stages.login import log_in
from mpiwait.probe.stages.remote_command import RemoteCommand
from mpiwait.probe.stages.step import Session
from mpiwait.probe.stages.tcp import connect, ends
from mpiwait.probe.stages.turned_away import CLOSED_BEFORE_BANNER, turned_away
from mpiwait.settings import REFUSED_ADDRESS_REUSE, Check, ProbeOptions

TARGET = testbed.ssh_target()
INFOS = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.2", 22))]


def session(transport: object, identities: tuple = (), timeout: float = 2.0) -> Session:
    return Session(transport, TARGET, timeout, identities)  # type: ignore[arg-type]


# --- dns ----------------------------------------------------------------------------------------


class CountingLookups:
    def __init__(self) -> None:
        self.calls = 0

    def resolve(self, host: str, port: int, timeout: float) -> list:
        self.calls += 1
        return INFOS


def test_dns_resolves_and_reuses_a_refused_address_for_a_while() -> None:
    clock = [100.0]
    lookups = CountingLookups()
    resolver = Resolver(lookups, clock=lambda: clock[0])  # type: ignore[arg-type]
    first = resolver.resolve("w1", "w1.example", 22, 1.0)
    assert (first.at, first.infos, lookups.calls) == (100.0, INFOS, 1)
    resolver.refused("w1", first)
    clock[0] += REFUSED_ADDRESS_REUSE - 0.5
    assert resolver.resolve("w1", "w1.example", 22, 1.0) is first and lookups.calls == 1
    # reused once: a second attempt looks the name up again unless refused again
    again = resolver.resolve("w1", "w1.example", 22, 1.0)
    assert isinstance(again, Resolved) and again.at == clock[0] and lookups.calls == 2
    resolver.refused("w1", first)
    clock[0] += 1.0  # older than the reuse allows
    resolver.resolve("w1", "w1.example", 22, 1.0)
    assert lookups.calls == 3


# each way a name lookup fails becomes its own not-yet outcome of the dns stage, through the
# prober (a fake resolver raises; nothing is looked up)


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


# --- tcp ----------------------------------------------------------------------------------------


def test_tcp_connects_to_a_listening_port_and_names_a_refused_one() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        infos = socket.getaddrinfo("127.0.0.1", port, type=socket.SOCK_STREAM)
        sock = connect(infos, 1.0)
        assert isinstance(sock, socket.socket)
        with sock:
            assert ends(sock) == ("127.0.0.1", f"127.0.0.1-{port}")
    refused = connect(infos, 1.0)
    assert refused == Outcome(
        Status.RETRY, Stage.TCP, Reason.REFUSED, f"127.0.0.1 port {port}: refused"
    )
    assert connect([], 1.0) == Outcome(Status.RETRY, Stage.DNS, Reason.UNRESOLVED, "no address")


# --- sshd's word before its banner --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        (b"SSH-2.0-OpenSSH_10.0p2\r\n", None),
        (b"Not allowed at this time\r\n", Reason.PENALTY),
        # what sshd 9.8+ writes at MaxStartups, whole (it fits in the peek) or cut short
        (b"Exceeded MaxStartups\r\n", Reason.CLOSED),
        (b"Exceeded Max", Reason.CLOSED),
        (b"Exceeded MaxStartups, and more", None),
        (b"", Reason.CLOSED),
        (None, None),  # silent: left to the handshake
    ],
)
def test_turned_away_reads_sshds_line_before_its_banner(
    sent: bytes | None, expected: Reason | None
) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        if sent is not None:
            theirs.sendall(sent)
            theirs.close()
        outcome = turned_away(ours, 0.05)
    if expected is None:
        assert outcome is None
        return
    assert outcome is not None
    assert (outcome.status, outcome.stage, outcome.reason) == (Status.RETRY, Stage.SSH, expected)
    if expected is Reason.PENALTY:
        assert "PerSourcePenalties" in outcome.detail and outcome.pace == 1.0
    else:
        assert "MaxStartups" in outcome.detail and outcome.pace == 0.0
    if sent == b"":
        assert outcome is CLOSED_BEFORE_BANNER


# --- the ssh stage's steps ----------------------------------------------------------------------


class FakeTransport:
    def __init__(self, **kw: object) -> None:
        self.remote_version = ""
        self.initial_kex_done = False
        self.start_error: BaseException | None = None
        self.auth_errors: list[BaseException | None] = []
        self.authenticated = False
        self.channel: FakeChannel | None = None
        self.closed = False
        self.__dict__.update(kw)

    def start_client(self, timeout: float) -> None:
        if self.start_error is not None:
            raise self.start_error

    def get_remote_server_key(self) -> str:
        return "the key"

    def auth_publickey(self, user: str, key: object) -> None:
        error = self.auth_errors.pop(0)
        if error is not None:
            raise error
        self.authenticated = True

    def is_authenticated(self) -> bool:
        return self.authenticated

    def open_session(self, timeout: float) -> FakeChannel:
        assert self.channel is not None
        return self.channel

    def close(self) -> None:
        self.closed = True


class FakeChannel:
    def __init__(self, status: int | None) -> None:
        self.status = status
        self.status_event = threading.Event()
        if status is not None:
            self.status_event.set()
        self.command = ""
        self.closed = False

    def exec_command(self, command: str) -> None:
        self.command = command

    def recv_exit_status(self) -> int | None:
        return self.status

    def close(self) -> None:
        self.closed = True


def _closed_before_banner() -> paramiko.SSHException:
    try:
        try:
            raise EOFError
        except EOFError:
            raise paramiko.SSHException("Error reading SSH protocol banner") from None
    except paramiko.SSHException as exc:
        exc.__context__ = EOFError()
        return exc


@pytest.mark.parametrize(
    ("transport", "reason", "detail"),
    [
        (FakeTransport(initial_kex_done=True, remote_version="SSH-2.0-x"), None, ""),
        (FakeTransport(start_error=_closed_before_banner()), Reason.CLOSED, "MaxStartups"),
        (FakeTransport(), Reason.NO_BANNER, "no SSH banner within 2s"),
        (
            FakeTransport(remote_version="SSH-2.0-x"),
            Reason.HANDSHAKE,
            "no SSH key exchange within 2s",
        ),
        (
            FakeTransport(remote_version="SSH-2.0-x", start_error=EOFError()),
            Reason.HANDSHAKE,
            "SSH handshake failed: EOFError",
        ),
    ],
)
def test_the_handshake_tells_where_it_stopped(
    transport: FakeTransport, reason: Reason | None, detail: str
) -> None:
    outcome = Handshake(None)(session(transport))  # type: ignore[arg-type]  # "no": not asked
    if reason is None:
        assert outcome is None
        return
    assert outcome is not None
    assert (outcome.status, outcome.reason) == (Status.RETRY, reason)
    assert detail in outcome.detail


class Policy:
    def __init__(self, error: PermanentError | None) -> None:
        self.error = error
        self.checked: list[dict] = []

    def check(self, **kw: object) -> None:
        self.checked.append(kw)
        if self.error is not None:
            raise self.error


def test_the_host_key_step_passes_or_ends_the_attempt_for_good() -> None:
    policy = Policy(None)
    assert HostKeyCheck(policy)(session(FakeTransport())) is None  # type: ignore[arg-type]
    assert policy.checked[0]["key"] == "the key"
    assert policy.checked[0]["address"] == "w1.example" and policy.checked[0]["port"] == 22
    policy.error = PermanentError("host key mismatch", hint="remove it")
    assert HostKeyCheck(policy)(session(FakeTransport())) == Outcome(  # type: ignore[arg-type]
        Status.FATAL, Stage.SSH, Reason.HOST_KEY, "host key mismatch", "remove it"
    )


KEYS = (SimpleNamespace(key="k1", label="id_a (ED25519)"), SimpleNamespace(key="k2", label="id_b"))


def test_login_tries_each_key_in_order_until_one_is_taken() -> None:
    transport = FakeTransport(auth_errors=[paramiko.AuthenticationException(), None])
    assert log_in(session(transport, KEYS)) is None
    rejected = log_in(
        session(FakeTransport(auth_errors=[paramiko.AuthenticationException()] * 2), KEYS)
    )
    assert rejected is not None
    assert (rejected.status, rejected.reason) == (Status.FATAL, Reason.AUTH_REJECTED)
    assert rejected.detail == (
        "Permission denied (publickey) for mpiuser@w1 port 22; keys tried: id_a (ED25519), id_b"
    )
    no_keys = paramiko.BadAuthenticationType("no", ["password"])
    method = log_in(session(FakeTransport(auth_errors=[no_keys]), KEYS))
    assert method is not None and method.reason is Reason.AUTH_METHOD
    assert method.detail == "mpiuser@w1 does not accept public keys (allowed: password)"


@pytest.mark.parametrize(
    ("status", "detail"),
    [(0, None), (3, "'true' exited with status 3"), (None, "'true' did not finish within 2s")],
)
def test_the_remote_command_must_exit_0_in_time(status: int | None, detail: str | None) -> None:
    channel = FakeChannel(status)
    outcome = RemoteCommand("true")(session(FakeTransport(channel=channel)))
    assert channel.command == "true" and channel.closed
    if detail is None:
        assert outcome is None
    else:
        assert outcome == Outcome(Status.RETRY, Stage.SSH, Reason.REMOTE_COMMAND, detail)


# --- the ssh stage: its steps in order on one transport -----------------------------------------


class Identities:
    def get(self, paths: object, *, defaults: bool) -> tuple:
        return KEYS


def _stage(monkeypatch: pytest.MonkeyPatch, steps: list) -> tuple[ssh_stage.SshStage, list]:
    transports: list[FakeTransport] = []

    def transport(sock: socket.socket, timeout: float) -> FakeTransport:
        transports.append(FakeTransport())
        return transports[-1]

    monkeypatch.setattr(ssh_stage.adapter, "transport", transport)
    stage = ssh_stage.SshStage(Identities(), None, None)  # type: ignore[arg-type]
    stage._steps = tuple(steps)
    return stage, transports


def test_the_ssh_stage_stops_at_the_first_step_that_does_not_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []
    failed = Outcome(Status.RETRY, Stage.SSH, Reason.HANDSHAKE, "no")
    steps = [
        lambda s: ran.append("one"),
        lambda s: ran.append("two") or failed,
        lambda s: ran.append("three"),
    ]
    stage, transports = _stage(monkeypatch, steps)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        result = stage(ours, TARGET, 2.0, duplicate=True)
    assert result == (failed, None) and ran == ["one", "two"]
    assert transports[0].closed


def test_the_ssh_stage_hands_back_a_passed_connection_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Session] = []
    stage, _ = _stage(monkeypatch, [seen.append])
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert stage(ours, TARGET, 2.0, duplicate=False) == (READY, None)
        outcome, connection = stage(ours, TARGET, 2.0, duplicate=True)
        assert outcome is READY and connection is not None
        with connection:
            assert connection.fileno() != ours.fileno()
    assert seen[0].identities == KEYS and seen[0].timeout == 2.0


def test_an_unusable_key_ends_the_ssh_stage_before_any_handshake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Broken:
        def get(self, paths: object, *, defaults: bool) -> tuple:
            raise PermanentError("identity file k: permissions 0644", hint="chmod 600 k")

    stage, transports = _stage(monkeypatch, [])
    stage._identities = Broken()  # type: ignore[assignment]
    ours, theirs = socket.socketpair()
    with ours, theirs:
        outcome, connection = stage(ours, TARGET, 2.0, duplicate=True)
    assert (outcome.status, outcome.reason, connection) == (Status.FATAL, Reason.IDENTITY, None)
    assert not transports
