"""A launcher's wait (modes/wait.py decides that this is one): probes every host until all pass,
the deadline passes or one fails for good, then execs COMMAND with what the launch is handed,
or leaves the summary in the termination log and returns the exit status."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping

from mpiwait.errors import ExitCode, interrupted_status
from mpiwait.hosts.sources import HostReader, HostSources, Snapshot
from mpiwait.launch.command import exec_command
from mpiwait.launch.handover import Interface, Launch, advice_without_command
from mpiwait.launch.interfaces import interface_for
from mpiwait.modes.common import daemon_check, handover_plan
from mpiwait.openssh.config import SSHConfig
from mpiwait.output.report import Reporter
from mpiwait.output.termination import write_termination_log
from mpiwait.output.text import summary_lines
from mpiwait.probe.attempt import Prober, prober_for
from mpiwait.probe.cachedir import cache_dir
from mpiwait.probe.kept import KeptConnections
from mpiwait.probe.listeners import listener_check
from mpiwait.probe.lookup import lookup_pool
from mpiwait.probe.outcome import Outcome, unexpected
from mpiwait.probe.pace import Pacer
from mpiwait.settings import Check, Run
from mpiwait.wait.events import End, WaitResult, WaitStarted
from mpiwait.wait.loop import wait_for_hosts
from mpiwait.wait.runner import ConnectionLost, Inbox, ThreadRunner

_END_STATUS = {
    End.READY: ExitCode.OK,
    End.TIMEOUT: ExitCode.TIMEOUT,
    End.PERMANENT: ExitCode.PERMANENT,
}


def wait_then_exec(
    run: Run,
    environ: Mapping[str, str],
    sources: HostSources,
    first: Snapshot,
    launch: Launch | None,
    reporter: Reporter,
) -> int:
    """Wait for the hosts of ``first`` (and those the sources add), then exec COMMAND (never
    returns in that case) or return the exit status."""
    pacer = Pacer(cache_dir(environ))
    inbox: Inbox[Outcome] = Inbox()
    daemons, daemon_line = daemon_check(run, environ, first)
    with _kept_connections(run, inbox) as kept:
        lookups = lookup_pool(run.wait.budget.parallel)
        ssh, prober = prober_for(run.probe, lookups, pacer, kept=kept, daemons=daemons)
        # ssh settings ssh would refuse (exit 2), unusable key files (exit 3): before any wait
        prober.preflight(first.names)
        reporter(_started(run, ssh, first, launch, daemon_line))
        reader = HostReader(sources, first, reporter.info)

        def attempt(host: str) -> Outcome:
            # This machine's entry gets no login (the launcher runs no sshd), but the MPI ssh's
            # to it unless it resolves to this machine: it must resolve, as ssh resolves it.
            return prober.attempt(host, name_only=reader.skips_login(host))

        listeners = _listeners(kept, pacer, prober)
        result = _wait(run, reader, first.waited, attempt, reporter, inbox, kept, listeners)
    reporter(result)
    if result.end is End.READY:
        _exec_or_advise(run, environ, launch, result, reader.is_self, reporter)
        return ExitCode.OK
    output = run.output
    write_termination_log(
        output.termination_log, summary_lines(result), create=output.create_termination_log
    )
    if result.end is End.INTERRUPTED:
        return interrupted_status(result.signal_name)
    return _END_STATUS[result.end]


def _started(
    run: Run, ssh: SSHConfig, first: Snapshot, launch: Launch | None, daemon_line: str
) -> WaitStarted:
    """The start line, with the notes on what mpiwait's probe does differently from ssh, and
    what the daemon check checks."""
    notes: list[str] = []
    if ssh.client.path is None:
        notes.append(ssh.client.describe())
    if run.probe.check is Check.SSH:
        notes.extend(ssh.offered_by_ssh_only())
    if run.probe.check is Check.SSH and not ssh.config_sets_host_key_policy():
        notes.append(
            "no ssh config sets StrictHostKeyChecking: accepting unknown host keys without "
            "storing them (a probe only authenticates by public key and sends nothing secret)"
        )
    if run.command:
        notes.append(daemon_line)
    return WaitStarted(
        hosts=first.waited,
        sources=first.sources,
        skipped_self=first.skipped_self,
        check=run.probe.check.value,
        timeout=run.wait.timeout,
        notes=tuple(notes),
        launch=launch.describe() if launch else "",
    )


def _exec_or_advise(
    run: Run,
    environ: Mapping[str, str],
    launch: Launch | None,
    result: WaitResult,
    is_self: Callable[[str], bool],
    reporter: Reporter,
) -> None:
    """All ready: exec COMMAND (with what the launch is handed), or log the initContainer's
    advice and return."""
    if run.command:
        if launch is None:
            exec_command(run.command)
        else:
            self_entries = tuple(h.host for h in result.hosts if is_self(h.host))
            interface = _interface(result, is_self)
            handover = handover_plan(run, environ, launch, interface, self_entries)
            for line in handover.lines():
                reporter.info(line)
            exec_command(run.command, env=handover.environ(environ))
    elif run.launch_env:
        interface = _interface(result, is_self)
        for line in advice_without_command(*_hostfile_text(run), interface):
            reporter.info(line)


def _interface(result: WaitResult, is_self: Callable[[str], bool]) -> Interface:
    """The interface the workers were reached on, from their passing connections."""
    return interface_for(
        {h.host: h.local_address for h in result.hosts if h.local_address and not is_self(h.host)}
    )


def _hostfile_text(run: Run) -> tuple[str | None, str | None]:
    """(path, text) of the hostfile, for the advice in an initContainer; None when absent."""
    hostfile = run.sources.hostfile
    if hostfile is None or run.sources.hosts_option is not None:
        return None, None
    try:
        with open(hostfile, encoding="utf-8", errors="replace") as f:
            return str(hostfile), f.read(1 << 20)
    except OSError:
        return None, None


@contextlib.contextmanager
def _kept_connections(run: Run, inbox: Inbox[Outcome]) -> Iterator[KeptConnections | None]:
    """With --check ssh, the connections of passed logins, held open until the wait ends
    (each end posted to ``inbox`` as a host event) and closed before COMMAND starts."""
    if run.probe.check is not Check.SSH:
        yield None
        return
    kept = KeptConnections(lambda host: inbox.post(ConnectionLost(host)))
    try:
        yield kept
    finally:
        kept.close()


def _listeners(
    kept: KeptConnections | None, pacer: Pacer, prober: Prober
) -> Callable[[Collection[str]], Collection[str]]:
    """The check of kept hosts' listeners as the wait ends (none without kept connections)."""
    if kept is None:
        return lambda hosts: ()
    return listener_check(kept, pacer, lambda host: prober.timeout_for(prober.target(host)))


def _wait(
    run: Run,
    reader: HostReader,
    names: tuple[str, ...],
    attempt: Callable[[str], Outcome],
    reporter: Reporter,
    inbox: Inbox[Outcome],
    kept: KeptConnections | None,
    listeners: Callable[[Collection[str]], Collection[str]],
) -> WaitResult:
    def on_error(exc: Exception) -> Outcome:
        # A probe bug or a library surprise must not kill the wait.
        return unexpected(f"{type(exc).__name__}: {exc}")

    return wait_for_hosts(
        first=names,
        read_hosts=reader,
        runner=ThreadRunner(attempt, run.wait.budget.parallel, on_error, inbox),
        holds_connection=kept.holds if kept is not None else lambda host: False,
        listeners=listeners,
        policy=run.wait,
        emit=reporter,
    )
