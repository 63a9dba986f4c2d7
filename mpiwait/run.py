"""One run, wired in the order data flows: sources → hosts → probes → waiter → report → exec."""

from __future__ import annotations

import gc
import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mpiwait.errors import ExitCode, InputError, MpiwaitError, interrupted_status
from mpiwait.events import End, WaitStarted
from mpiwait.hosts import HostSources, rereader
from mpiwait.launch import (
    ROLE_VARIABLE,
    check_remote_agent,
    exec_command,
    find_command,
    is_mpi_launcher,
    worker_role,
)
from mpiwait.report import (
    Reporter,
    print_launch_plan,
    print_plan,
    print_worker_plan,
    summary_lines,
    write_termination_log,
)
from mpiwait.settings import (
    DEFAULT_RETRY_INITIAL,
    DEFAULT_RETRY_MAX,
    PERMANENT_FAILURES_BEFORE_EXIT,
    SOURCE_REREAD_INTERVAL,
    STATUS_INTERVAL,
    Check,
    Settings,
)

if TYPE_CHECKING:  # handover.py is imported on the launcher path only, when COMMAND is given
    from mpiwait.handover import Handover, Interface

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
        from mpiwait.listready import list_ready

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
    role = worker_role(environ)
    if role is not None:
        # One image serves launcher and workers: on a worker, step aside at once.
        if settings.dry_run:
            print_worker_plan(f"{ROLE_VARIABLE}={role}", settings.command)
            return ExitCode.OK
        if not settings.command:
            reporter.info(f"K_MPI_JOB_ROLE={role}: nothing to wait for")
            return ExitCode.OK
        exec_command(settings.command)
    if settings.command and not settings.dry_run:
        find_command(settings.command)  # 127/126 now, not after minutes of waiting
        warning = check_remote_agent(settings.command, environ)  # mpirun without ssh: 127
        if warning:
            reporter.info(f"warning: {warning}")

    launch = _recognise(settings, environ, reporter)
    sources = HostSources.from_settings(settings, environ)
    first = sources.read()
    if settings.hosts_option is None and not first.sources:
        if _is_node(settings):
            # Kubeflow Trainer v2 mounts the hostfile in the launcher only and sets no role
            # variable: a pod with neither, whose COMMAND starts no MPI launch (sshd), is a
            # node. A launcher (its COMMAND is mpirun) without its hostfile is still an error.
            reporter.info(
                f"no {settings.hostfile}, no {settings.discover_hosts} and no K_MPI_JOB_ROLE, "
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

    from mpiwait.probes import ProbeConfig, Prober, prober_for
    from mpiwait.resolver import lookup_pool

    prober = prober_for(settings, lookup_pool(settings.parallel))
    resolver = prober.resolver
    # An entry naming this machine gets no login (the launcher runs no sshd), but the MPI
    # ssh's to it unless it resolves to this machine: it must resolve, as ssh resolves it.
    self_prober = Prober(ProbeConfig(Check.DNS, settings.connect_timeout), resolver)
    is_self = sources.self_names.is_self
    names = first.names
    if settings.dry_run:
        print_plan(prober, first)
        if launch is not None:
            handover = _plan(settings, environ, launch, None, first.skipped_self)
            print_launch_plan(launch.describe(), handover.lines())
        return ExitCode.OK
    # ssh settings ssh would refuse (exit 2), unusable key files (exit 3): before any waiting
    prober.preflight(names)

    notes: list[str] = []
    if settings.check is Check.SSH:
        notes.extend(resolver.offered_by_ssh_only())
    if settings.check is Check.SSH and not resolver.config_sets_host_key_policy():
        notes.append(
            "no ssh config sets StrictHostKeyChecking: accepting unknown host keys without "
            "storing them (a probe only authenticates by public key and sends nothing secret)"
        )
    reporter(
        WaitStarted(
            hosts=names + first.skipped_self,
            sources=first.sources,
            skipped_self=first.skipped_self,
            check=settings.check.value,
            timeout=settings.timeout,
            notes=tuple(notes),
            launch=launch.describe() if launch else "",
        )
    )
    # Everything loaded so far (modules, config, keys) lives until exec: freezing it keeps the
    # cyclic collector from scanning it again and again while thousands of logins allocate
    # (the collector was ~7% of the CPU of a login here).
    gc.freeze()

    def attempt(host: str):
        own = not settings.include_self and is_self(host)
        return (self_prober if own else prober).attempt(host)

    result = _wait(settings, sources, names + first.skipped_self, attempt, reporter)
    reporter(result)
    if result.end is End.READY:
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
            from mpiwait.handover import advice_without_command

            interface = _interface(prober, hosts, is_self)
            for line in advice_without_command(*_hostfile_text(settings), interface):
                reporter.info(line)
        return ExitCode.OK
    write_termination_log(
        settings.termination_log, summary_lines(result), create=settings.termination_log_explicit
    )
    if result.end is End.INTERRUPTED:
        return interrupted_status(result.signal_name)
    return _END_STATUS[result.end]


def _recognise(settings: Settings, environ: Mapping[str, str], reporter: Reporter):
    """The MPI that COMMAND launches, when mpiwait is to hand it what the wait learned."""
    if not settings.command or not settings.launch_env:
        return None
    from mpiwait.handover import LAUNCHER_NAMES, recognise

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
    from mpiwait.interfaces import interface_for

    reached = prober.local_addresses()
    return interface_for({h: reached[h] for h in hosts if h in reached and not is_self(h)})


def _handover(settings, environ, launch, prober, hosts, is_self) -> Handover:
    interface = _interface(prober, hosts, is_self)
    return _plan(settings, environ, launch, interface, tuple(h for h in hosts if is_self(h)))


def _plan(settings, environ, launch, interface, self_entries: tuple[str, ...]) -> Handover:
    """What the launch is handed; ``interface`` None: not known (a dry run connects nowhere)."""
    import socket

    from mpiwait.handover import plan

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


def _wait(settings, sources: HostSources, names, attempt, reporter):
    from mpiwait.waiter import ThreadRunner, WaitPolicy, wait_for_hosts

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
