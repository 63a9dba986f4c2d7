"""``mpiwait --dry-run``: the hosts, each one's SSH settings, what an MPI launch would be
handed and what the daemon check would check, on stdout; nothing is connected to, and nothing
is run but Open MPI's ompi_info, which tells whether mpirun passes its prefix by default."""

from __future__ import annotations

from collections.abc import Mapping

from mpiwait.errors import ExitCode
from mpiwait.hosts.sources import HostSources
from mpiwait.launch.command import ROLE_VARIABLE, worker_role
from mpiwait.modes.common import (
    daemon_check,
    handover_plan,
    node_reason,
    read_first,
    recognise_launch,
)
from mpiwait.output.plans import (
    HostPlan,
    print_daemon_check,
    print_launch_plan,
    print_plan,
    print_plan_json,
    print_worker_plan,
    print_worker_plan_json,
)
from mpiwait.output.report import Reporter
from mpiwait.probe.attempt import prober_for
from mpiwait.probe.keys import present_identity_files
from mpiwait.probe.lookup import lookup_pool
from mpiwait.settings import LogFormat, Run


def dry_run(run: Run, environ: Mapping[str, str]) -> int:
    """Print the plan (text, or one JSON object) and return 0; raise MpiwaitError for bad
    input."""
    reporter = Reporter(run.output.log_format, run.output.quiet)
    as_json = run.output.log_format is LogFormat.JSON
    show_worker = print_worker_plan_json if as_json else print_worker_plan
    role = worker_role(environ)
    if role is not None:
        show_worker(f"{ROLE_VARIABLE}={role}", run.command)
        return ExitCode.OK
    launch = recognise_launch(run, environ, reporter)
    sources = HostSources.from_options(run.sources, environ)
    first = read_first(run, sources)
    if first is None:  # a node pod: the wait would exec COMMAND at once; a dry run says so
        show_worker(node_reason(run, sources), run.command)
        return ExitCode.OK
    hosts = host_plans(run, first.names)
    launch_plan = None
    if launch is not None:
        handover = handover_plan(run, environ, launch, None, first.skipped_self)
        launch_plan = (launch.describe(), handover.lines())
    daemon_line = daemon_check(run, environ, first)[1] if run.command else None
    if as_json:
        print_plan_json(hosts, first.sources, first.skipped_self, launch_plan, daemon_line)
        return ExitCode.OK
    print_plan(hosts, first.sources, first.skipped_self)
    if launch_plan is not None:
        print_launch_plan(*launch_plan)
    if daemon_line is not None:
        print_daemon_check(daemon_line)
    return ExitCode.OK


def host_plans(run: Run, names: tuple[str, ...]) -> list[HostPlan]:
    """Each host's settings as the probe will use them."""
    _, prober = prober_for(run.probe, lookup_pool(run.wait.budget.parallel))
    plans = []
    for name in names:
        target = prober.target(name)
        plans.append(
            HostPlan(
                name=name,
                address=target.address,
                port=target.port,
                user=target.user,
                identity_files=present_identity_files(
                    target.identity_files, defaults=target.identities_default
                ),
                strict_host_key_checking=target.strict_host_key_checking,
                connect_timeout=prober.timeout_for(target),
            )
        )
    return plans
