"""What the wait and --dry-run share: the MPI COMMAND launches, the first reading of the host
sources, what the launch is handed, and the daemon check's plan."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from mpiwait.hosts.sources import HostSources, Snapshot
from mpiwait.launch.command import ROLE_VARIABLE, is_mpi_launcher
from mpiwait.launch.daemons import daemon_plan
from mpiwait.launch.handover import Handover, Interface, Launch, plan, recognise
from mpiwait.launch.launchers import launcher
from mpiwait.output.report import Reporter
from mpiwait.probe.daemon import DaemonPlan
from mpiwait.settings import Check, Run


def recognise_launch(run: Run, environ: Mapping[str, str], reporter: Reporter) -> Launch | None:
    """The MPI that COMMAND launches, when mpiwait is to hand it what the wait learned."""
    if not run.command or not run.launch_env:
        return None
    launch = recognise(run.command, environ)
    own = launcher(run.command[0])
    if launch is None and own is not None and own.own:
        reporter.info(
            f"launch: which MPI {run.command[0]} belongs to could not be told; "
            "its environment is left as it is"
        )
    return launch


def daemon_check(
    run: Run, environ: Mapping[str, str], first: Snapshot
) -> tuple[DaemonPlan | None, str]:
    """The daemon check's plan for COMMAND over the hosts of ``first``, and the line that says
    what it checks, or why it is off."""
    if not run.daemon_check:
        return None, "daemon check: off (--no-daemon-check)"
    if run.probe.check is not Check.SSH:
        return None, f"daemon check: off (--check {run.probe.check.value} logs in nowhere)"
    launch = recognise(run.command, environ) if run.command else None
    if launch is None:
        return None, "daemon check: off (COMMAND starts no MPI that mpiwait recognises)"
    plan = daemon_plan(launch, run.command, environ, first.names)
    if isinstance(plan, str):
        return None, f"daemon check: off ({plan})"
    return plan, f"daemon check: {plan.describe()}"


def read_first(run: Run, sources: HostSources) -> Snapshot | None:
    """The sources' first reading; None on a node pod, which waits for no one (node_reason).
    No source at all on any other pod is an error."""
    first = sources.read()
    if not sources.found_none(first):
        return first
    if not _is_node(run):
        raise sources.no_source_error()
    return None


def node_reason(run: Run, sources: HostSources) -> str:
    """Why a pod is a node. Kubeflow Trainer v2 mounts the hostfile in the launcher only and
    sets no role variable: a pod with neither, whose COMMAND starts no MPI launch (sshd), is
    a node; a launcher (its COMMAND is mpirun) without its hostfile is still an error."""
    return (
        f"no {sources.hostfile}, no {sources.discover} and no {ROLE_VARIABLE}, "
        f"and {os.path.basename(run.command[0])} is no MPI launcher, so a worker (node) pod"
    )


def _is_node(run: Run) -> bool:
    """No host source named by the user, and a COMMAND that starts no MPI."""
    return bool(
        run.command
        and not run.sources.hostfile_explicit
        and not run.sources.discover_explicit
        and not is_mpi_launcher(run.command[0])
    )


def handover_plan(
    run: Run,
    environ: Mapping[str, str],
    launch: Launch,
    interface: Interface | None,
    self_entries: tuple[str, ...],
) -> Handover:
    """What the launch is handed; ``interface`` None: not known (a dry run connects nowhere)."""
    return plan(
        launch,
        run.command,
        environ,
        interface=interface,
        self_entries=self_entries,
        hostname=socket.gethostname(),
    )
