"""One run, wired in the order data flows: sources → hosts → probes → waiter → report → exec."""

from __future__ import annotations

import contextlib
import gc
import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from mpiwait.errors import ExitCode, InputError, MpiwaitError, interrupted_status
from mpiwait.hosts.sources import HostSources, Snapshot, rereader
from mpiwait.launch.command import (
    ROLE_VARIABLE,
    check_remote_agent,
    exec_command,
    find_command,
    is_mpi_launcher,
    worker_role,
)
from mpiwait.output.report import (
    Reporter,
    print_launch_plan,
    print_plan,
    print_worker_plan,
    summary_lines,
    write_termination_log,
)
from mpiwait.probe.outcome import Outcome
from mpiwait.settings import (
    DEFAULT_RETRY_INITIAL,
    DEFAULT_RETRY_MAX,
    PERMANENT_FAILURES_BEFORE_EXIT,
    SOURCE_REREAD_INTERVAL,
    STATUS_INTERVAL,
    Check,
    Settings,
)
from mpiwait.wait.events import End, WaitStarted

if TYPE_CHECKING:  # imported only on the paths that use them
    from mpiwait.launch.handover import Handover, Interface
    from mpiwait.probe.attempt import Prober

_END_STATUS = {
    End.READY: ExitCode.OK,
    End.TIMEOUT: ExitCode.TIMEOUT,
    End.PERMANENT: ExitCode.PERMANENT,
}


def run(settings: Settings, environ: Mapping[str, str]) -> int:
    """Wait, then exec COMMAND (never returns in that case) or return the exit status."""
    if settings.list_ready:
        # Run every second by horovodrun, inside its container: its failures are horovodrun's
        # to report, and a termination log left by one bad call would outlive it.
        from mpiwait.modes.list_ready import list_ready

        return list_ready(settings, environ)
    try:
        return _run(settings, environ)
    except MpiwaitError as exc:
        # Failures found before or after the wait (an unusable key file, a COMMAND that is not
        # there, a malformed hostfile) end the container just as a deadline does: Kubernetes
        # shows the reason in `kubectl describe pod` only if it is in the termination log.
        lines = [f"error: {exc.message}"] + ([f"hint: {exc.hint}"] if exc.hint else [])
        write_termination_log(
            settings.termination_log, lines, create=settings.termination_log_explicit
        )
        raise


def _run(settings: Settings, environ: Mapping[str, str]) -> int:
    reporter = Reporter(settings.log_format, settings.quiet)
    if worker_role(environ) is not None:
        return _step_aside(settings, environ, reporter)
    if settings.command and not settings.dry_run:
        _check_command(settings, environ, reporter)
    launch = _recognise(settings, environ, reporter)
    sources = HostSources.from_settings(settings, environ)
    first = _read_first(settings, sources, reporter)

    from mpiwait.probe.attempt import prober_for
    from mpiwait.probe.lookup import lookup_pool

    prober = prober_for(settings, lookup_pool(settings.parallel))
    if settings.dry_run:
        print_plan(prober, first)
        if launch is not None:
            handover = _plan(settings, environ, launch, None, first.skipped_self)
            print_launch_plan(launch.describe(), handover.lines())
        return ExitCode.OK
    # ssh settings ssh would refuse (exit 2), unusable key files (exit 3): before any waiting
    prober.preflight(first.names)
    reporter(_started(settings, prober, first, launch))
    attempt = _attempt(settings, prober, sources.self_names.is_self)
    with _collector_for_logins():
        result = _wait(settings, sources, first.names + first.skipped_self, attempt, reporter)
    reporter(result)
    if result.end is End.READY:
        _hand_over(settings, environ, launch, prober, result, sources.self_names.is_self, reporter)
        return ExitCode.OK
    write_termination_log(
        settings.termination_log, summary_lines(result), create=settings.termination_log_explicit
    )
    if result.end is End.INTERRUPTED:
        return interrupted_status(result.signal_name)
    return _END_STATUS[result.end]


def _step_aside(settings: Settings, environ: Mapping[str, str], reporter: Reporter) -> int:
    """On a worker (one image serves launcher and workers): exec COMMAND at once, or exit 0."""
    role = worker_role(environ)
    if settings.dry_run:
        print_worker_plan(f"{ROLE_VARIABLE}={role}", settings.command)
        return ExitCode.OK
    if not settings.command:
        reporter.info(f"{ROLE_VARIABLE}={role}: nothing to wait for")
        return ExitCode.OK
    exec_command(settings.command)


def _check_command(settings: Settings, environ: Mapping[str, str], reporter: Reporter) -> None:
    """Will COMMAND run once the hosts are ready? Said now, not after minutes of waiting."""
    find_command(settings.command)  # 127/126
    warning = check_remote_agent(settings.command, environ)  # mpirun without ssh: 127
    if warning:
        reporter.info(f"warning: {warning}")


def _read_first(settings: Settings, sources: HostSources, reporter: Reporter) -> Snapshot:
    """The sources' first reading; with none at all, either a node pod (exec) or an error."""
    first = sources.read()
    if settings.hosts_option is not None or first.sources:
        return first
    if _is_node(settings):
        # Kubeflow Trainer v2 mounts the hostfile in the launcher only and sets no role
        # variable: a pod with neither, whose COMMAND starts no MPI launch (sshd), is a
        # node. A launcher (its COMMAND is mpirun) without its hostfile is still an error.
        reporter.info(
            f"no {settings.hostfile}, no {settings.discover_hosts} and no {ROLE_VARIABLE}, "
            f"and {os.path.basename(settings.command[0])} is no MPI launcher: a worker "
            "(node) pod; nothing to wait for"
        )
        exec_command(settings.command)
    raise InputError(
        f"no host source: neither {settings.hostfile} nor {settings.discover_hosts} exists "
        "and --hosts is not given",
        hint="an initContainer must mount the mpi-job-config volume at /etc/mpi itself; "
        "or pass --hostfile / --hosts",
    )


def _started(settings: Settings, prober: Prober, first: Snapshot, launch) -> WaitStarted:
    """The start line, with the notes on what mpiwait's probe does differently from ssh."""
    resolver = prober.resolver
    notes: list[str] = []
    if resolver.client.path is None:
        notes.append(resolver.client.describe())
    if settings.check is Check.SSH:
        notes.extend(resolver.offered_by_ssh_only())
    if settings.check is Check.SSH and not resolver.config_sets_host_key_policy():
        notes.append(
            "no ssh config sets StrictHostKeyChecking: accepting unknown host keys without "
            "storing them (a probe only authenticates by public key and sends nothing secret)"
        )
    return WaitStarted(
        hosts=first.names + first.skipped_self,
        sources=first.sources,
        skipped_self=first.skipped_self,
        check=settings.check.value,
        timeout=settings.timeout,
        notes=tuple(notes),
        launch=launch.describe() if launch else "",
    )


def _attempt(
    settings: Settings, prober: Prober, is_self: Callable[[str], bool]
) -> Callable[[str], Outcome]:
    """One attempt at a host: the full check, or for an entry naming this machine its name only.

    That entry gets no login (the launcher runs no sshd), but the MPI ssh's to it unless it
    resolves to this machine: it must resolve, as ssh resolves it.
    """
    from mpiwait.probe.attempt import ProbeConfig, Prober

    self_prober = Prober(ProbeConfig(Check.DNS, settings.connect_timeout), prober.resolver)

    def attempt(host: str) -> Outcome:
        own = not settings.include_self and is_self(host)
        return (self_prober if own else prober).attempt(host)

    return attempt


def _hand_over(settings, environ, launch, prober, result, is_self, reporter: Reporter) -> None:
    """All ready: exec COMMAND (with what the launch is handed), or log the initContainer's
    advice and return."""
    hosts = tuple(h.host for h in result.hosts)
    if settings.command:
        if launch is None:
            exec_command(settings.command)
        else:
            handover = _handover(settings, environ, launch, prober, hosts, is_self)
            for line in handover.lines():
                reporter.info(line)
            exec_command(settings.command, env=handover.environ(environ))
    elif settings.launch_env:
        from mpiwait.launch.handover import advice_without_command

        interface = _interface(prober, hosts, is_self)
        for line in advice_without_command(*_hostfile_text(settings), interface):
            reporter.info(line)


def _recognise(settings: Settings, environ: Mapping[str, str], reporter: Reporter):
    """The MPI that COMMAND launches, when mpiwait is to hand it what the wait learned."""
    if not settings.command or not settings.launch_env:
        return None
    from mpiwait.launch.handover import LAUNCHER_NAMES, recognise

    launch = recognise(settings.command, environ)
    if launch is None and os.path.basename(settings.command[0]) in LAUNCHER_NAMES:
        reporter.info(
            f"launch: which MPI {settings.command[0]} belongs to could not be told; "
            "its environment is left as it is"
        )
    return launch


def _is_node(settings: Settings) -> bool:
    """No host source at all, none named by the user, and a COMMAND that starts no MPI."""
    return bool(
        settings.command
        and not settings.hostfile_explicit
        and not settings.discover_explicit
        and not is_mpi_launcher(settings.command[0])
    )


def _interface(prober, hosts: tuple[str, ...], is_self: Callable[[str], bool]) -> Interface:
    from mpiwait.launch.interfaces import interface_for

    reached = prober.local_addresses()
    return interface_for({h: reached[h] for h in hosts if h in reached and not is_self(h)})


def _handover(settings, environ, launch, prober, hosts, is_self) -> Handover:
    interface = _interface(prober, hosts, is_self)
    return _plan(settings, environ, launch, interface, tuple(h for h in hosts if is_self(h)))


def _plan(settings, environ, launch, interface, self_entries: tuple[str, ...]) -> Handover:
    """What the launch is handed; ``interface`` None: not known (a dry run connects nowhere)."""
    import socket

    from mpiwait.launch.handover import plan

    return plan(
        launch,
        settings.command,
        environ,
        interface=interface,
        self_entries=self_entries,
        hostname=socket.gethostname(),
    )


def _hostfile_text(settings: Settings) -> tuple[str | None, str | None]:
    """(path, text) of the hostfile, for the advice in an initContainer; None when absent."""
    if settings.hostfile is None or settings.hosts_option is not None:
        return None, None
    try:
        with open(settings.hostfile, encoding="utf-8", errors="replace") as f:
            return str(settings.hostfile), f.read(1 << 20)
    except OSError:
        return None, None


@contextlib.contextmanager
def _collector_for_logins() -> Iterator[None]:
    """The cyclic garbage collector tuned for a wait of many logins, restored afterwards.

    Everything loaded before the wait (modules, config, keys) lives until exec: freezing it
    keeps the collector from scanning it again and again while thousands of logins allocate
    (the collector was ~7% of the CPU of a login here). Every finished login leaves a cycle
    (paramiko's Transport, its thread, auth handler and saved exception refer to each other)
    that reaches the oldest generation before it dies, and that generation is collected only
    after ten collections of the middle one: about 9 s at 1000 hosts, by when some 7 MB of
    dead transports had piled up, a sixth of the peak RSS. With the old objects frozen a
    full collection only walks what the wait itself made, so it is cheap to run one after
    every second collection of the middle generation.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(thresholds[0], thresholds[1], 1)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _wait(settings, sources: HostSources, names, attempt, reporter):
    from mpiwait.wait.loop import ThreadRunner, WaitPolicy, wait_for_hosts

    return wait_for_hosts(
        first=names,
        read_hosts=rereader(sources, names, reporter.info),
        runner=ThreadRunner(attempt, settings.parallel),
        policy=WaitPolicy(
            timeout=settings.timeout,
            retry_initial=settings.retry_initial or DEFAULT_RETRY_INITIAL,
            retry_max=settings.retry_max or DEFAULT_RETRY_MAX,
            follow_budget=settings.retry_initial is None and settings.retry_max is None,
            parallel=settings.parallel,
            probe_rate=settings.probe_rate,
            reread_interval=SOURCE_REREAD_INTERVAL,
            permanent_after=PERMANENT_FAILURES_BEFORE_EXIT,
            status_interval=STATUS_INTERVAL,
            recheck_after=settings.recheck_after or math.inf,  # 0: never
        ),
        emit=reporter,
    )
