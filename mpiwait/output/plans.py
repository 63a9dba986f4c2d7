"""What ``--dry-run`` prints on stdout (the one output that is asked for, so not on stderr):
each host's SSH settings, what an MPI launch would be handed, or a worker's exec; as text, or
with ``--log-format json`` as one JSON object (event ``plan``)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

from mpiwait.output.jsonl import json_record
from mpiwait.output.printable import printable


@dataclass(frozen=True, slots=True)
class HostPlan:
    """One host's settings as the probe will use them."""

    name: str
    address: str
    port: int
    user: str
    identity_files: tuple[str, ...]  # those ssh will find (or that were named with -i)
    strict_host_key_checking: str
    connect_timeout: float


def print_plan(
    hosts: Sequence[HostPlan],
    sources: tuple[str, ...],
    skipped_self: tuple[str, ...],
    out: TextIO | None = None,
) -> None:
    """Each host's address, port, user and the keys ssh will try."""
    out = out if out is not None else sys.stdout
    _write(out, f"# {len(hosts)} hosts from: {'; '.join(sources) or 'no source'}")
    if skipped_self:
        _write(
            out,
            f"# this machine: {', '.join(skipped_self)} (no login; only its name must resolve)",
        )
    for host in hosts:
        _write(
            out,
            f"{host.name} address={host.address} port={host.port} user={host.user} "
            f"identity={','.join(host.identity_files) or '(none found)'} "
            f"strict_host_key_checking={host.strict_host_key_checking} "
            f"connect_timeout={host.connect_timeout:g}",
        )
    out.flush()


def print_launch_plan(description: str, lines: Iterable[str], out: TextIO | None = None) -> None:
    """With an MPI COMMAND: which MPI, and what the launch would be handed."""
    out = out if out is not None else sys.stdout
    _write(out, f"# launch: {description}", *(f"# {line}" for line in lines))
    out.flush()


def print_daemon_check(line: str, out: TextIO | None = None) -> None:
    """With a COMMAND: what the daemon check would check on each worker, or why it is off."""
    out = out if out is not None else sys.stdout
    _write(out, f"# {line}")
    out.flush()


def print_worker_plan(role_line: str, command: tuple[str, ...], out: TextIO | None = None) -> None:
    """On a worker: mpiwait would wait for no one, only exec COMMAND (or exit)."""
    out = out if out is not None else sys.stdout
    _write(out, f"# {role_line}: not waiting for any host")
    _write(out, f"exec {shlex.join(command)}" if command else "exit 0")
    out.flush()


def print_plan_json(
    hosts: Sequence[HostPlan],
    sources: tuple[str, ...],
    skipped_self: tuple[str, ...],
    launch: tuple[str, list[str]] | None,
    daemon_check: str | None = None,
    out: TextIO | None = None,
) -> None:
    """The launcher's plan as one JSON object: hosts, the launch (which MPI, what it is
    handed) when COMMAND is an MPI launcher, and the daemon check's line with a COMMAND."""
    out = out if out is not None else sys.stdout
    record = json_record(
        "plan",
        role=None,
        hosts=[
            {
                "host": h.name,
                "address": h.address,
                "port": h.port,
                "user": h.user,
                "identity": list(h.identity_files),
                "strict_host_key_checking": h.strict_host_key_checking,
                "connect_timeout": h.connect_timeout,
            }
            for h in hosts
        ],
        sources=list(sources),
        skipped_self=list(skipped_self),
        launch={"mpi": launch[0], "changes": launch[1]} if launch else None,
        daemon_check=daemon_check,
        exec=None,
    )
    out.write(record + "\n")
    out.flush()


def print_worker_plan_json(
    role_line: str, command: tuple[str, ...], out: TextIO | None = None
) -> None:
    """On a worker, as one JSON object: no hosts, only what it would exec."""
    out = out if out is not None else sys.stdout
    record = json_record(
        "plan", role=role_line, hosts=[], sources=[], skipped_self=[], launch=None,
        exec=list(command) or None,
    )  # fmt: skip
    out.write(record + "\n")
    out.flush()


def _write(out: TextIO, *lines: str) -> None:
    # A config's stray byte or control character shows as an escape; never unwritable.
    out.write("".join(printable(line) + "\n" for line in lines))
