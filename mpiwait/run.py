"""One run, wired in the order data flows: sources → hosts → probes → waiter → report → exec."""

from __future__ import annotations

import gc
import math
import os
import signal
import sys
from collections.abc import Callable, Mapping

from mpiwait.errors import ExitCode, InputError, MpiwaitError
from mpiwait.events import End, WaitStarted
from mpiwait.hosts import HostSources, SelfNames, Snapshot
from mpiwait.launch import check_remote_agent, exec_command, find_command, worker_role
from mpiwait.report import Reporter, summary_lines, write_termination_log
from mpiwait.settings import (
    DEFAULT_RETRY_INITIAL,
    DEFAULT_RETRY_MAX,
    DISCOVER_EXEC_TIMEOUT,
    PERMANENT_FAILURES_BEFORE_EXIT,
    SOURCE_REREAD_INTERVAL,
    STATUS_INTERVAL,
    Check,
    Settings,
)

_END_STATUS = {
    End.READY: ExitCode.OK,
    End.TIMEOUT: ExitCode.TIMEOUT,
    End.PERMANENT: ExitCode.PERMANENT,
}


def run(settings: Settings, environ: Mapping[str, str]) -> int:
    """Wait, then exec COMMAND (never returns in that case) or return the exit status."""
    try:
        return _run(settings, environ)
    except MpiwaitError as exc:
        # Failures found before or after the wait (an unusable key file, a COMMAND that is not
        # there, a malformed hostfile) end the container just as a deadline does: Kubernetes
        # shows the reason in `kubectl describe pod` only if it is in the termination log.
        lines = [f"error: {exc.message}"] + ([f"hint: {exc.hint}"] if exc.hint else [])
        write_termination_log(settings.termination_log, lines)
        raise


def _run(settings: Settings, environ: Mapping[str, str]) -> int:
    reporter = Reporter(settings.log_format, settings.quiet)
    role = worker_role(environ)
    if role is not None:
        # One image serves launcher and workers: on a worker, step aside at once.
        if not settings.command:
            reporter.info(f"K_MPI_JOB_ROLE={role}: nothing to wait for")
            return ExitCode.OK
        exec_command(settings.command)
    if settings.command and not settings.dry_run:
        find_command(settings.command)  # 127/126 now, not after minutes of waiting
        warning = check_remote_agent(settings.command, environ)  # mpirun without ssh: 127
        if warning:
            reporter.info(f"warning: {warning}")

    sources = _sources(settings, environ)
    first = sources.read()
    if settings.hosts_option is None and not first.sources:
        raise InputError(
            f"no host source: neither {settings.hostfile} nor {settings.discover_hosts} exists "
            "and --hosts is not given",
            hint="an initContainer must mount the mpi-job-config volume at /etc/mpi itself; "
            "or pass --hostfile / --hosts",
        )

    # paramiko imports invoke only to run `Match exec`, which sshconfig.py runs itself; left
    # out, paramiko's import takes ~55 ms instead of ~100 ms here (benchmarks/, scenario 3).
    sys.modules.setdefault("invoke", None)  # None: `import invoke` raises ImportError
    from mpiwait.probes import ProbeConfig, Prober
    from mpiwait.sshconfig import SSHResolver

    resolver = SSHResolver(
        config_path=settings.ssh_config,
        port=settings.port,
        user=settings.user,
        identity_files=settings.identity_files,
    )
    prober = Prober(
        ProbeConfig(settings.check, settings.connect_timeout, settings.remote_command), resolver
    )
    names = _names(first)
    if settings.dry_run:
        _print_plan(names, prober, first)
        return ExitCode.OK
    prober.preflight(names)  # unusable key files: exit 3 before any waiting

    notes: list[str] = []
    if settings.check is Check.SSH and not resolver.config_sets_host_key_policy():
        notes.append(
            "no ssh config sets StrictHostKeyChecking: accepting unknown host keys without "
            "storing them (a probe only authenticates by public key and sends nothing secret)"
        )
    reporter(
        WaitStarted(
            hosts=names,
            sources=first.sources,
            skipped_self=first.skipped_self,
            check=settings.check.value,
            timeout=settings.timeout,
            notes=tuple(notes),
        )
    )
    # Everything loaded so far (modules, config, keys) lives until exec: freezing it keeps the
    # cyclic collector from scanning it again and again while thousands of logins allocate
    # (the collector was ~7% of the CPU of a login here).
    gc.freeze()
    result = _wait(settings, sources, names, prober, reporter)
    reporter(result)
    if result.end is End.READY:
        if settings.command:
            exec_command(settings.command)
        return ExitCode.OK
    write_termination_log(settings.termination_log, summary_lines(result))
    if result.end is End.INTERRUPTED:
        return 128 + (signal.SIGTERM if result.signal_name == "SIGTERM" else signal.SIGINT)
    return _END_STATUS[result.end]


def _sources(settings: Settings, environ: Mapping[str, str]) -> HostSources:
    return HostSources(
        hostfile=settings.hostfile,
        hostfile_explicit=settings.hostfile_explicit,
        discover=settings.discover_hosts,
        discover_explicit=settings.discover_explicit,
        discover_exec=settings.discover_exec,
        hosts_option=settings.hosts_option,
        include_self=settings.include_self,
        self_names=SelfNames.from_system(environ),
        exec_timeout=DISCOVER_EXEC_TIMEOUT,
    )


def _names(snapshot: Snapshot) -> tuple[str, ...]:
    return tuple(host.name for host in snapshot.hosts)


def _wait(settings, sources: HostSources, names, prober, reporter):
    from mpiwait.waiter import ThreadRunner, WaitPolicy, wait_for_hosts

    return wait_for_hosts(
        first=names,
        read_hosts=_reread(sources, names, reporter),
        runner=ThreadRunner(prober.attempt, settings.parallel),
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


def _reread(
    sources: HostSources, first: tuple[str, ...], reporter: Reporter
) -> Callable[[], tuple[tuple[str, ...], tuple[str, ...]]]:
    """The waiting loop's once-a-second ``sources.read()``, tolerant of passing failures."""
    last: list = [(first, ())]
    reported: list[str] = []

    def read_hosts() -> tuple[tuple[str, ...], tuple[str, ...]]:
        try:
            snapshot = sources.read()
        except InputError as exc:
            # The sources read fine at the start; a discover script that failed once or a
            # file caught mid-rewrite must not end a wait that is going well. Keep the last
            # good list (hosts once listed stay waited for anyway) and try again next time.
            if exc.message not in reported:
                reported.append(exc.message)
                reporter.info(f"warning: keeping the hosts read before: {exc.message}")
            return last[0]
        last[0] = (_names(snapshot), snapshot.sources)
        return last[0]

    return read_hosts


def _print_plan(names: tuple[str, ...], prober, snapshot: Snapshot) -> None:
    print(f"# {len(names)} hosts from: {'; '.join(snapshot.sources) or 'no source'}")
    if snapshot.skipped_self:
        print(f"# not waiting for this machine: {', '.join(snapshot.skipped_self)}")
    for name in names:
        target = prober.target(name)
        keys = [
            path
            for path in target.identity_files
            if not target.identities_default or os.path.lexists(path)
        ]
        print(
            f"{name} address={target.address} port={target.port} user={target.user} "
            f"identity={','.join(keys) or '(none found)'} "
            f"strict_host_key_checking={target.strict_host_key_checking} "
            f"connect_timeout={prober.timeout_for(target):g}"
        )
