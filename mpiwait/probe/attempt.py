"""One attempt at one host: resolve its name, connect to its SSH port, log in.

An attempt returns an Outcome value (ready / not yet, and why / never, and why); it never
decides about retries or other hosts. The stages run in order in a single attempt and stop at
the first that does not pass, so an unready host costs a name lookup or a refused connect (an
address whose port refused is reused for a few seconds rather than looked up again), and a host
is logged into once, when its port first answers. paramiko stays inside this module
(and probe/keys.py), is imported on first use, and what of its internals they rely on is
in probe/paramiko_adapter.py.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from mpiwait.errors import InputError, PermanentError
from mpiwait.openssh.client import find_client
from mpiwait.openssh.config import SSHConfig, SSHTarget
from mpiwait.probe import paramiko_adapter as adapter
from mpiwait.probe.kept import KeptConnections
from mpiwait.probe.keys import HostKeyPolicy, IdentityCache
from mpiwait.probe.lookup import LookupPool, LookupTimeout, ResolverBusy
from mpiwait.probe.outcome import PENALTY, Outcome, Reached, Stage, Status
from mpiwait.probe.pace import Pacer, address_key
from mpiwait.settings import (
    DROP_NOTICE_WAIT,
    NOAUTH_CHARGE,
    REFUSED_ADDRESS_REUSE,
    Check,
    ProbeOptions,
)

if TYPE_CHECKING:
    import paramiko

    from mpiwait.probe.keys import Identity

# Entries of getaddrinfo's answer: (family, type, proto, canonname, sockaddr).
AddrInfo = tuple[Any, ...]

READY = Outcome(Status.READY, Stage.READY, "ready")

# What sshd writes before it closes a connection it turns away at once: OpenSSH 9.8+ for an
# address under a PerSourcePenalties penalty and at MaxStartups alike, older releases only at
# MaxStartups (sshd.c, drop_connection).
_TURNED_AWAY = b"Not allowed at this time"
_AT_MAX_STARTUPS = b"Exceeded MaxStartups"


def _retry(stage: Stage, reason: str, detail: str) -> Outcome:
    return Outcome(Status.RETRY, stage, reason, detail)


class Prober:
    """Runs attempts; safe to call from many threads at once."""

    def __init__(
        self,
        options: ProbeOptions,
        ssh: SSHConfig,
        lookups: LookupPool,
        *,
        identities: IdentityCache | None = None,
        host_keys: HostKeyPolicy | None = None,
        pacer: Pacer | None = None,
        kept: KeptConnections | None = None,
    ) -> None:
        self._options = options
        self._pacer = pacer or Pacer(None)
        self._kept = kept  # where a passed login's connection stays open (None: closed)
        self._ssh = ssh
        self._identities = identities or IdentityCache()
        self._host_keys = host_keys or HostKeyPolicy()
        self._lookups = lookups
        self._targets: dict[str, SSHTarget] = {}
        # host -> (when looked up, getaddrinfo's answer), kept while its SSH port refuses
        self._refused: dict[str, tuple[float, list[AddrInfo]]] = {}
        self._lock = threading.Lock()

    def target(self, host: str) -> SSHTarget:
        """The host's ssh settings, as OpenSSH resolves them (once per host)."""
        with self._lock:
            target = self._targets.get(host)
        if target is None:
            target = self._ssh.resolve(host)
            with self._lock:
                self._targets[host] = target
        return target

    def timeout_for(self, target: SSHTarget) -> float:
        return self._options.timeout(target.connect_timeout)

    def preflight(self, hosts: tuple[str, ...]) -> None:
        """Fail now, not after minutes of waiting, on settings and key files that cannot work.

        Every host's ssh settings are resolved here, whatever the check: a config that ssh
        would refuse for a host (InputError, exit 2) must stop mpiwait before it waits.
        """
        targets = [self.target(host) for host in hosts]
        if self._options.check is not Check.SSH:
            return
        for target in targets:
            self._identities.get(target.identity_files, defaults=target.identities_default)

    def attempt(self, host: str, *, name_only: bool = False) -> Outcome:
        """One attempt at ``host``, up to the check (``name_only``: its name must resolve,
        for an entry naming this machine, which runs no sshd)."""
        try:
            target = self.target(host)
        except InputError as exc:
            # A host that appeared after start-up (discover_hosts.sh) for which ssh would
            # refuse its config: no waiting fixes that.
            return Outcome(Status.FATAL, Stage.DNS, "ssh-config", exc.message, exc.hint)
        timeout = self.timeout_for(target)
        with self._lock:
            kept = self._refused.pop(host, None)
        if kept is not None and time.monotonic() - kept[0] < REFUSED_ADDRESS_REUSE:
            looked_up, infos = kept
        else:
            looked_up = time.monotonic()
            try:
                infos = self._lookups.resolve(target.address, target.port, timeout)
            except (LookupTimeout, ResolverBusy, socket.gaierror, UnicodeError) as exc:
                return _lookup_failed(exc, target.address, timeout)
        check = Check.DNS if name_only else self._options.check
        if check is Check.DNS:
            return _ready(target, infos, "")
        if check is Check.TCP:
            return self._tcp(host, target, (looked_up, infos), timeout)
        sock, failure = _connect(infos, timeout)
        if sock is None:
            return self._not_connected(host, failure, (looked_up, infos))
        local, peer = _ends(sock)
        try:
            turned_away = _turned_away(sock, min(timeout, DROP_NOTICE_WAIT))
            if turned_away is not None:
                return turned_away
            outcome = self._login(sock, target, timeout, host)
        finally:
            sock.close()
        if outcome is READY:
            return _ready(target, infos, local)
        if outcome.status is Status.RETRY and outcome.reason != "remote-command":
            # closed before authenticating, after sshd handed it to a session process
            return outcome._replace(pace=self._pacer.charge(peer))
        return outcome

    def _not_connected(
        self, host: str, failure: Outcome | None, lookup: tuple[float, list[AddrInfo]]
    ) -> Outcome:
        assert failure is not None
        if failure.reason == "refused":
            # The address answered: the pod is there, its sshd is not listening yet.
            with self._lock:
                self._refused[host] = lookup
        return failure

    def _tcp(
        self, host: str, target: SSHTarget, lookup: tuple[float, list[AddrInfo]], timeout: float
    ) -> Outcome:
        """--check tcp: the port accepts and sshd does not turn the connection away at once.
        Connect-only, so every connection ends before authentication and takes its turn in
        the address's account, across runs too (probe/pace.py)."""
        infos = lookup[1]
        with self._pacer.turn(infos) as charge:
            sock, failure = _connect(infos, timeout)
            if sock is None:
                return self._not_connected(host, failure, lookup)
            charge()
            local, _ = _ends(sock)
            try:
                turned_away = _turned_away(sock, min(timeout, DROP_NOTICE_WAIT))
            finally:
                sock.close()
        return turned_away or _ready(target, infos, local)

    def _login(self, sock: socket.socket, target: SSHTarget, timeout: float, host: str) -> Outcome:
        import paramiko

        try:
            identities = self._identities.get(
                target.identity_files, defaults=target.identities_default
            )
        except PermanentError as exc:
            return Outcome(Status.FATAL, Stage.SSH, "identity", exc.message, exc.hint)
        transport = adapter.transport(sock, timeout)
        held: socket.socket | None = None
        try:
            outcome = self._session(transport, target, timeout, identities)
            if outcome is READY and self._kept is not None:
                # paramiko closes its socket below and sends nothing: a duplicate keeps the
                # authenticated connection open
                held = _duplicate(sock)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            return _retry(Stage.SSH, "handshake", f"SSH session failed: {_oserror(exc)}")
        finally:
            transport.close()
        if held is not None and self._kept is not None:
            # watched only now: until the close, paramiko's thread decodes what sshd sends
            self._kept.keep(host, held)
        return outcome

    def _session(
        self,
        transport: paramiko.Transport,
        target: SSHTarget,
        timeout: float,
        identities: tuple[Identity, ...],
    ) -> Outcome:
        """Handshake, host key, authentication and --remote-command on ``transport``."""
        failed = (
            self._handshake(transport, target, timeout)
            or self._check_host_key(transport, target)
            or self._authenticate(transport, target, identities)
        )
        if failed is not None:
            return failed
        if self._options.remote_command:
            return self._run_remote(transport, self._options.remote_command, timeout)
        return READY

    def _handshake(
        self, transport: paramiko.Transport, target: SSHTarget, timeout: float
    ) -> Outcome | None:
        """Banner and key exchange, asking first for the host key types known_hosts lists;
        None when the session is set up."""
        import paramiko

        if target.strict_host_key_checking != "no":
            try:
                kh_address, kh_port = target.known_hosts_address
                known = self._host_keys.known_types(
                    address=kh_address, port=kh_port, files=target.known_hosts_files
                )
            except PermanentError as exc:
                return Outcome(Status.FATAL, Stage.SSH, "host-key", exc.message, exc.hint)
            adapter.prefer_host_key_types(transport, known)
        try:
            transport.start_client(timeout=timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            return _before_banner(transport, exc, timeout) or _retry(
                Stage.SSH, "handshake", f"SSH handshake failed: {_oserror(exc)}"
            )
        if not adapter.kex_done(transport):
            # Tell a port that never sent a banner from a stalled key exchange.
            if not adapter.banner_seen(transport):
                return _retry(Stage.SSH, "no-banner", f"no SSH banner within {timeout:g}s")
            return _retry(Stage.SSH, "handshake", f"no SSH key exchange within {timeout:g}s")
        return None

    def _check_host_key(self, transport: paramiko.Transport, target: SSHTarget) -> Outcome | None:
        """StrictHostKeyChecking against the key the server showed; None when it passes."""
        try:
            kh_address, kh_port = target.known_hosts_address
            self._host_keys.check(
                host=target.host,
                address=kh_address,
                port=kh_port,
                key=transport.get_remote_server_key(),
                strict=target.strict_host_key_checking,
                files=target.known_hosts_files,
            )
        except PermanentError as exc:
            return Outcome(Status.FATAL, Stage.SSH, "host-key", exc.message, exc.hint)
        return None

    def _authenticate(
        self, transport: paramiko.Transport, target: SSHTarget, identities: tuple[Identity, ...]
    ) -> Outcome | None:
        import paramiko

        for identity in identities:
            try:
                transport.auth_publickey(target.user, identity.key)
            except paramiko.BadAuthenticationType as exc:
                return Outcome(
                    Status.FATAL,
                    Stage.SSH,
                    "auth-method",
                    f"{target.user}@{target.host} does not accept public keys "
                    f"(allowed: {', '.join(exc.allowed_types) or 'none'})",
                    "enable PubkeyAuthentication in the worker's sshd_config",
                )
            except paramiko.AuthenticationException:
                continue
            if transport.is_authenticated():
                return None
        tried = ", ".join(identity.label for identity in identities)
        return Outcome(
            Status.FATAL,
            Stage.SSH,
            "auth-rejected",
            f"Permission denied (publickey) for {target.user}@{target.host} "
            f"port {target.port}; keys tried: {tried}",
            "the worker's authorized_keys must hold the public half of this key for this user "
            "(mpi-operator: the job's ssh-auth secret, mounted on launcher and workers alike)",
        )

    def _run_remote(self, transport: paramiko.Transport, command: str, timeout: float) -> Outcome:
        channel = transport.open_session(timeout=timeout)
        try:
            # Sent as given: the remote user's shell interprets it, exactly as with ssh host CMD.
            channel.exec_command(command)
            status = adapter.exit_status(channel, timeout)
            if status is None:
                return _retry(
                    Stage.SSH, "remote-command", f"{command!r} did not finish within {timeout:g}s"
                )
        finally:
            channel.close()
        if status != 0:
            return _retry(Stage.SSH, "remote-command", f"{command!r} exited with status {status}")
        return READY


def _turned_away(sock: socket.socket, wait: float) -> Outcome | None:
    """The outcome when sshd turns the connection away before its banner, else None.

    Peeks (reads nothing) at what the server sent within ``wait`` seconds: sshd sends its
    banner, or the line of a dropped connection, at once after accepting; a server that waits
    for the client's banner first, or is slow, is left to the handshake (None).
    """
    try:
        sock.settimeout(wait)
        first = sock.recv(len(_TURNED_AWAY), socket.MSG_PEEK)
    except TimeoutError:
        return None
    except OSError:
        first = b""  # reset: as closed
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(None)
    if not first:
        return _retry(
            Stage.SSH,
            "closed",
            "connection closed before the SSH banner; is sshd at its MaxStartups limit?",
        )
    if first.startswith(b"SSH-") or b"SSH-".startswith(first):
        return None
    if _TURNED_AWAY.startswith(first):
        penalised = _retry(
            Stage.SSH,
            PENALTY,
            'sshd turned this address away before its banner ("Not allowed at this time"): '
            "a PerSourcePenalties penalty on it (OpenSSH 9.8+, after failed logins or "
            "connections closed before authenticating; sshd's log says "
            '"drop connection ... penalty: <why>"), or sshd is at its MaxStartups limit',
        )
        # sshd drops these itself, uncharged; once a second is enough while it lasts (>= 15 s)
        return penalised._replace(pace=NOAUTH_CHARGE)
    if _AT_MAX_STARTUPS.startswith(first):
        return _retry(Stage.SSH, "closed", "sshd is at its MaxStartups limit")
    return None  # other text before the banner: the handshake reads it


def _before_banner(
    transport: paramiko.Transport, exc: BaseException, timeout: float
) -> Outcome | None:
    """The outcome when ``start_client`` failed before the server's SSH banner arrived, else
    None (the failure came later, in the key exchange)."""
    if adapter.banner_seen(transport):
        return None
    why = adapter.before_banner(exc)
    if why == "closed":
        # sshd closes at once when it is past MaxStartups (after a line "Exceeded MaxStartups").
        return _retry(
            Stage.SSH,
            "closed",
            "connection closed before the SSH banner; is sshd at its MaxStartups limit?",
        )
    if why == "silent":
        return _retry(Stage.SSH, "no-banner", f"no SSH banner within {timeout:g}s")
    return None


def _lookup_failed(exc: Exception, address: str, timeout: float) -> Outcome:
    """The outcome of a name lookup that raised ``exc``."""
    if isinstance(exc, LookupTimeout):
        return _retry(Stage.DNS, "timeout", f"no answer from the resolver in {timeout:g}s")
    if isinstance(exc, ResolverBusy):
        return _retry(
            Stage.DNS, "resolver-busy", "every resolver thread holds an unanswered lookup"
        )
    if isinstance(exc, socket.gaierror):
        return _retry(Stage.DNS, "unresolved", f"{address}: {exc.strerror or exc}")
    return _retry(Stage.DNS, "unresolved", f"{address}: not a valid name")  # UnicodeError


def _connect(infos: list[AddrInfo], timeout: float) -> tuple[socket.socket | None, Outcome | None]:
    """Connect to the first address that accepts, as ssh does; a failure names the last error."""
    failure: Outcome | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            # paramiko does not set it; without it each SSH round trip waits on Nagle's
            # algorithm (docs/design-decisions.md).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeout)
            sock.connect(address)
        except ConnectionRefusedError:
            failure = _retry(Stage.TCP, "refused", f"{address[0]} port {address[1]}: refused")
        except TimeoutError:
            failure = _retry(
                Stage.TCP, "timeout", f"{address[0]} port {address[1]}: no answer in {timeout:g}s"
            )
        except OSError as exc:
            reason = (
                "unreachable"
                if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)
                else "connect-error"
            )
            failure = _retry(Stage.TCP, reason, f"{address[0]} port {address[1]}: {_oserror(exc)}")
        else:
            return sock, None
        sock.close()
    return None, failure or _retry(Stage.DNS, "unresolved", "no address")


def _duplicate(sock: socket.socket) -> socket.socket | None:
    """A duplicate of ``sock``; None when out of file descriptors (the host is re-checked
    instead of kept)."""
    try:
        return sock.dup()
    except OSError:
        return None


def _ends(sock: socket.socket) -> tuple[str, str]:
    """This machine's address of a connected ``sock``, and the account (probe/pace.py) of the
    address it is connected to."""
    local, peer = "", "-"
    with contextlib.suppress(OSError):
        local = sock.getsockname()[0]
        peer = address_key(sock.getpeername())
    return local, peer


def _oserror(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _ready(target: SSHTarget, infos: list[AddrInfo], local: str) -> Outcome:
    addresses = tuple(info[4][0] for info in infos)
    reached = Reached(target.address, target.port, addresses, local)
    return Outcome(Status.READY, Stage.READY, "ready", reached=reached)


def prober_for(
    options: ProbeOptions,
    lookups: LookupPool,
    pacer: Pacer | None = None,
    *,
    kept: KeptConnections | None = None,
) -> tuple[SSHConfig, Prober]:
    """ssh settings resolved as OpenSSH would, then our overrides (-p, -l, -i, -F); and the
    prober for them, with the stages up to --check (``pacer``: accounts of connections closed
    before authenticating, probe/pace.py; None: this run's only)."""
    ssh = SSHConfig(
        config_path=options.ssh_config,
        port=options.port,
        user=options.user,
        identity_files=options.identity_files,
        client=find_client(),  # the ssh mpirun will run: its release's rules, its ssh -G
    )
    return ssh, Prober(options, ssh, lookups, pacer=pacer, kept=kept)
