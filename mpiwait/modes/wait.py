"""The wait mode's entry: a worker or node pod execs COMMAND at once; a launcher checks that
COMMAND will run, then waits for its hosts (modes/waiting.py) and execs it (or exits 0).

The worker and node paths must not load the probes or the waiting loop (modes/waiting.py):
their COMMAND is often the sshd the launcher waits for."""

from __future__ import annotations

from collections.abc import Mapping

from mpiwait.errors import ExitCode
from mpiwait.hosts.sources import HostSources
from mpiwait.launch.command import (
    ROLE_VARIABLE,
    check_remote_agent,
    exec_command,
    find_command,
    worker_role,
)
from mpiwait.modes.common import node_reason, read_first, recognise_launch
from mpiwait.output.report import Reporter
from mpiwait.settings import Run


def wait_and_exec(run: Run, environ: Mapping[str, str]) -> int:
    """Wait, then exec COMMAND (never returns in that case) or return the exit status."""
    reporter = Reporter(run.output.log_format, run.output.quiet)
    if worker_role(environ) is not None:
        return _step_aside(run, environ, reporter)
    if run.command:
        _check_command(run, environ, reporter)
    launch = recognise_launch(run, environ, reporter)
    sources = HostSources.from_options(run.sources, environ)
    first = read_first(run, sources)
    if first is None:
        reporter.info(f"{node_reason(run, sources)}; nothing to wait for")
        exec_command(run.command)
    from mpiwait.modes import waiting  # the probes and the loop: only a launcher loads them

    return waiting.wait_then_exec(run, environ, sources, first, launch, reporter)


def _step_aside(run: Run, environ: Mapping[str, str], reporter: Reporter) -> int:
    """On a worker (one image serves launcher and workers): exec COMMAND at once, or exit 0."""
    if not run.command:
        reporter.info(f"{ROLE_VARIABLE}={worker_role(environ)}: nothing to wait for")
        return ExitCode.OK
    exec_command(run.command)


def _check_command(run: Run, environ: Mapping[str, str], reporter: Reporter) -> None:
    """Will COMMAND run once the hosts are ready? Said now, not after minutes of waiting."""
    find_command(run.command)  # 127/126
    warning = check_remote_agent(run.command, environ)  # mpirun without ssh: 127
    if warning:
        reporter.info(f"warning: {warning}")
