"""argv of an MPI launch over a TestBed: one builder, each MPI's launcher, options and ways of
being told which ssh to run as data."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._netns import TestBed


@dataclass(frozen=True)
class Mpi:
    program: tuple[str, ...]
    hosts_opt: str
    np_opt: str
    # how the launcher is told to run ``ssh -F CFG``; {agent} is that command ("command") or
    # an executable running it ("program")
    agent_opts: tuple[str, ...]
    agent_kind: str
    # keep the launch on the bed's network; {subnet}, {bridge}, {tmp} from the bed
    net_opts: tuple[str, ...]


OPENMPI = Mpi(
    program=("mpirun", "--allow-run-as-root"),
    hosts_opt="--host",
    np_opt="-np",
    agent_opts=("--mca", "plm_rsh_agent", "{agent}"),
    agent_kind="command",
    net_opts=(
        "--mca", "oob_tcp_if_include", "{subnet}",
        "--mca", "btl_tcp_if_include", "{subnet}",
        # the workers share the machine's /tmp: concurrent beds' orteds would race on
        # /tmp/ompi.<host>.<uid>
        "--mca", "orte_tmpdir_base", "{tmp}",
    ),
)  # fmt: skip
# Without -iface the proxies call back to the launcher's name, which resolves to their own
# loopback, and the launch hangs.
MPICH = Mpi(
    program=("mpiexec.hydra", "-launcher", "ssh"),
    hosts_opt="-hosts",
    np_opt="-n",
    agent_opts=("-launcher-exec", "{agent}"),
    agent_kind="program",
    net_opts=("-iface", "{bridge}"),
)


def _agent(bed: TestBed, mpi: Mpi, ssh_config: Path | str | bool) -> str:
    if mpi.agent_kind == "command":
        return f"ssh -F {bed.ssh_config if ssh_config is True else Path(ssh_config)}"
    if ssh_config is True:
        return str(bed.ssh_wrapper)
    w = bed.workdir / f"ssh-wrapper-{abs(hash(str(ssh_config)))}"
    w.write_text(f'#!/bin/sh\nexec ssh -F {shlex.quote(str(ssh_config))} "$@"\n')
    w.chmod(0o755)
    return str(w)


def mpi_argv(
    bed: TestBed,
    mpi: Mpi,
    cmd: Sequence[str],
    *,
    np: int | None,
    hosts: Sequence[int | str] | None,
    ssh_config: Path | str | bool,
    net: bool,
    extra: Sequence[str],
) -> list[str]:
    """``mpi``'s launch of ``cmd`` on ``hosts`` of ``bed`` (indexes or names, default all), ``np``
    ranks (default one per host); ssh with ``ssh_config`` (True: the bed's, a path, False: plain
    ``ssh``, which reads the launcher context's /etc/ssh/ssh_config); ``net``: keep MPI's own
    traffic on the bed's network."""
    names = bed._pick(hosts)
    fill = {"subnet": bed.subnet, "bridge": bed.bridge, "tmp": str(bed.tmp_dir)}
    argv = list(mpi.program)
    if ssh_config is not False:
        fill["agent"] = _agent(bed, mpi, ssh_config)
        argv += [o.format(**fill) for o in mpi.agent_opts]
    if net:
        argv += [o.format(**fill) for o in mpi.net_opts]
    argv += [mpi.hosts_opt, ",".join(names), mpi.np_opt, str(np if np is not None else len(names))]
    return [*argv, *extra, *cmd]
