"""One attempt at one host: its stages (probe/stages/) in order, up to the check.

An attempt returns an Outcome (ready; not yet, and why; never, and why) and never decides about
retries or other hosts. The stages stop at the first that does not pass, so an unready host
costs a name lookup or a refused connect, and a host is logged into once its port answers. Here
is only what spans stages: the account of connections closed before authenticating
(probe/pace.py), and the hand-over of a passed login's connection to be kept (probe/kept.py)."""

from __future__ import annotations

import dataclasses
import socket

from mpiwait.errors import InputError
from mpiwait.openssh.client import find_client
from mpiwait.openssh.config import SSHConfig, SSHTarget
from mpiwait.probe.daemon import DaemonPlan
from mpiwait.probe.kept import KeptConnections
from mpiwait.probe.keys import HostKeyPolicy, IdentityCache
from mpiwait.probe.lookup import LookupPool
from mpiwait.probe.outcome import READY, Outcome, Reached, Reason, Stage, Status
from mpiwait.probe.pace import Pacer
from mpiwait.probe.stages.dns import Resolved, Resolver
from mpiwait.probe.stages.ssh import SshStage
from mpiwait.probe.stages.tcp import connect, ends
from mpiwait.probe.stages.turned_away import turned_away
from mpiwait.settings import DROP_NOTICE_WAIT, Check, ProbeOptions

# Outcomes of steps that run once logged in: sshd charges no penalty for those connections.
_AFTER_LOGIN = frozenset({Reason.REMOTE_COMMAND, Reason.DAEMON})


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
        daemons: DaemonPlan | None = None,
    ) -> None:
        self._options = options
        self._ssh = ssh
        self._pacer = pacer or Pacer(None)
        self._kept = kept  # where a passed login's connection stays open (None: closed)
        self._identities = identities or IdentityCache()
        self._resolver = Resolver(lookups)
        self._ssh_stage = SshStage(
            self._identities, host_keys or HostKeyPolicy(), options.remote_command, daemons
        )

    def target(self, host: str) -> SSHTarget:
        """The host's ssh settings, as OpenSSH resolves them (SSHConfig keeps them)."""
        return self._ssh.resolve(host)

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
            return Outcome(Status.FATAL, Stage.DNS, Reason.SSH_CONFIG, exc.message, exc.hint)
        timeout = self.timeout_for(target)
        resolved = self._resolver.resolve(host, target.address, target.port, timeout)
        if isinstance(resolved, Outcome):
            return resolved
        check = Check.DNS if name_only else self._options.check
        if check is Check.DNS:
            return _ready(target, resolved, "")
        if check is Check.TCP:
            return self._tcp(host, target, resolved, timeout)
        sock = self._connect(host, resolved, timeout)
        if isinstance(sock, Outcome):
            return sock
        local, peer = ends(sock)
        try:
            outcome = turned_away(sock, min(timeout, DROP_NOTICE_WAIT))
            if outcome is not None:
                return outcome
            outcome, connection = self._ssh_stage(
                sock, target, timeout, duplicate=self._kept is not None
            )
        finally:
            sock.close()
        if connection is not None and self._kept is not None:
            # watched only now: until the close, paramiko's thread decodes what sshd sends
            self._kept.keep(host, connection)
        if outcome is READY:
            return _ready(target, resolved, local)
        if outcome.status is Status.RETRY and outcome.reason not in _AFTER_LOGIN:
            # closed before authenticating, after sshd handed it to a session process
            return dataclasses.replace(outcome, pace=self._pacer.charge(peer))
        return outcome

    def _connect(self, host: str, resolved: Resolved, timeout: float) -> socket.socket | Outcome:
        sock = connect(resolved.infos, timeout)
        if isinstance(sock, Outcome) and sock.reason == Reason.REFUSED:
            self._resolver.refused(host, resolved)
        return sock

    def _tcp(self, host: str, target: SSHTarget, resolved: Resolved, timeout: float) -> Outcome:
        """--check tcp: the port accepts and sshd does not turn the connection away at once.
        Connect-only, so every connection ends before authentication and takes its turn in
        the address's account, across runs too (probe/pace.py)."""
        with self._pacer.turn(resolved.infos) as charge:
            sock = self._connect(host, resolved, timeout)
            if isinstance(sock, Outcome):
                return sock
            charge()
            local, _ = ends(sock)
            try:
                outcome = turned_away(sock, min(timeout, DROP_NOTICE_WAIT))
            finally:
                sock.close()
        return outcome or _ready(target, resolved, local)


def _ready(target: SSHTarget, resolved: Resolved, local: str) -> Outcome:
    addresses = tuple(info[4][0] for info in resolved.infos)
    reached = Reached(target.address, target.port, addresses, local)
    return Outcome(Status.READY, Stage.READY, Reason.READY, reached=reached)


def prober_for(
    options: ProbeOptions,
    lookups: LookupPool,
    pacer: Pacer | None = None,
    *,
    kept: KeptConnections | None = None,
    daemons: DaemonPlan | None = None,
) -> tuple[SSHConfig, Prober]:
    """ssh settings resolved as OpenSSH would, then our overrides (-p, -l, -i, -F); and the
    prober for them, with the stages up to --check (``pacer``: accounts of connections closed
    before authenticating, probe/pace.py; None: this run's only; ``daemons``: the daemon
    check's plan, probe/daemon.py)."""
    ssh = SSHConfig(
        config_path=options.ssh_config,
        port=options.port,
        user=options.user,
        identity_files=options.identity_files,
        client=find_client(),  # the ssh mpirun will run: its release's rules, its ssh -G
    )
    return ssh, Prober(options, ssh, lookups, pacer=pacer, kept=kept, daemons=daemons)
