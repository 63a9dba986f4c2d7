"""The daemon check as text: the plan of what mpirun will start on a worker and how it will
find it (launch/daemons.py makes it from COMMAND), the script a worker runs through its own
non-interactive shell, and the reading of its answer. No network here: the step that runs it is
probe/stages/daemon.py."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# What a worker's daemon on its PATH says of the MPI it has.
FAMILY = {
    "orted": "Open MPI 4",
    "prted": "Open MPI 5",
    "hydra_bstrap_proxy": "Intel MPI",
    "hydra_pmi_proxy": "MPICH or Intel MPI",
}
MARK = "mpiwait-daemon"


@dataclass(frozen=True, slots=True)
class DaemonPlan:
    """How mpirun will start its daemon on a worker, as far as can be told from here."""

    mpi: str  # the launcher's MPI, for people: "Open MPI 4"
    hydra: bool  # MPICH or Intel MPI: the proxy is started by the launcher's own folder
    daemon: str  # its file name: orted, prted, hydra_bstrap_proxy, hydra_pmi_proxy
    paths: tuple[str, ...]  # absolute paths mpirun may start it by
    by_name: bool  # mpirun may start it by name, through the worker's non-interactive PATH
    prefix: str  # the install prefix mpirun puts first on the worker's PATH, if any
    how: str  # for people: how mpirun finds it, and why mpiwait thinks so
    profile: bool = False  # sh or ksh: Open MPI sources ~/.profile first
    tree: Mapping[str, str] | None = None  # a sample of spawning worker -> a worker it spawns
    agent: tuple[str, ...] = ("ssh",)  # what a spawning worker's daemon runs to reach another
    radix: int = 0  # Open MPI's routing tree radix (0: no tree spawn)

    def describe(self) -> str:
        text = f"{self.daemon} {self.how}"
        if self.tree:
            text += (
                f"; tree spawn (radix {self.radix}): {len(self.tree)} spawning "
                f"worker{'s' if len(self.tree) != 1 else ''} checked, each logging in to one "
                "it spawns"
            )
        return text


def script(plan: DaemonPlan, child: str | None = None, timeout: float = 5.0) -> str:
    """The command to run on a worker: where it finds the daemon as mpirun will start it; with
    ``child``, the same again on ``child`` over the worker's own ssh (tree spawn), its lines
    marked ``via``, within ``timeout`` seconds to connect."""
    body = _find(plan)
    if child is not None:
        login = list(plan.agent)
        if os.path.basename(plan.agent[0]) == "ssh":
            # first, so that they win over the same options in mpirun's own arguments: they
            # bound the check's time, and change nothing of what a login needs
            wait = f"ConnectTimeout={max(1, int(timeout))}"
            login[1:1] = ["-o", "BatchMode=yes", "-o", wait, "-o", "ConnectionAttempts=1"]
        nested = shlex.join([*login, child, script(plan)])
        agent = shlex.quote(plan.agent[0])
        body += (
            f"; echo {MARK}:agent:$(command -v {agent}); out=$({nested} 2>&1); "
            f"printf '%s\\n' \"$out\" | while IFS= read -r line; do "
            f"printf '{MARK}:via:%s\\n' \"$line\"; done"
        )
    if plan.prefix:
        body = f"PATH={shlex.quote(plan.prefix)}/bin:$PATH ; export PATH ; {body}"
    if plan.profile:
        body = f"( test ! -r ./.profile || . ./.profile; {body} )"
    return body


def _find(plan: DaemonPlan) -> str:
    # the first echo ends a line that the login's own output may have left open
    checks = [f"echo; echo {MARK}:begin"]
    for path in plan.paths:
        q = shlex.quote(path)
        checks.append(f"if [ -f {q} ] && [ -x {q} ]; then echo {MARK}:path:1:{q}; "
                      f"else echo {MARK}:path:0:{q}; fi")  # fmt: skip
    # shell builtins only, no $(...): each subshell would be a fork on the worker, on the way
    # from its login to the launch
    names = " ".join(FAMILY)
    checks.append(
        f'for n in {names}; do printf \'{MARK}:name:%s:\' "$n"; command -v "$n" || echo; done'
    )
    checks.append(f"echo {MARK}:end")
    return "; ".join(checks)


@dataclass(frozen=True, slots=True)
class Found:
    """What a worker answered: its daemon, as mpirun will start it, and the MPI it has."""

    ran: bool  # the script ran to its end (else: a shell mpiwait cannot read)
    where: str  # where the daemon was found as mpirun will start it; "" when it was not
    on_path: Mapping[str, str]  # each MPI's daemon on the worker's PATH -> its path
    absent: tuple[str, ...] = ()  # the plan's paths the worker has no executable at


def read(plan: DaemonPlan, lines: Sequence[str]) -> Found:
    """The worker's answer to the script's lines."""
    ours = [line.partition(":")[2] for line in lines if line.startswith(f"{MARK}:")]
    ran = "begin" in ours and "end" in ours
    present: list[str] = []
    on_path: dict[str, str] = {}
    for line in ours:
        kind, _, rest = line.partition(":")
        if kind == "path" and rest.startswith("1:"):
            present.append(rest[2:])
        elif kind == "name":
            name, _, path = rest.partition(":")
            if path.strip():
                on_path[name] = path.strip()
    # hydra needs every one of its paths (Intel MPI: hydra_bstrap_proxy, which starts
    # hydra_pmi_proxy from the same folder); Open MPI any of them
    if plan.hydra:
        where = plan.paths[0] if present and len(present) == len(plan.paths) else ""
    else:
        where = present[0] if present else ""
    if not where and plan.by_name:
        where = on_path.get(plan.daemon, "")
    absent = tuple(p for p in plan.paths if p not in present)
    return Found(ran, where, on_path, absent)


def missing(plan: DaemonPlan, found: Found, via: str = "") -> tuple[str, str]:
    """The one line (what is missing, where mpirun will look) and the remedy, for a worker that
    lacks the daemon; ``via``: the worker it was reached from (tree spawn)."""
    where = f"on {via}, reached as tree spawn will: " if via else ""
    if plan.by_name and plan.paths:
        head = f"{where}{plan.daemon} is neither on the non-interactive PATH nor at {plan.paths[0]}"
    elif plan.by_name:
        head = f"{where}{plan.daemon} is not on the non-interactive PATH"
    elif plan.hydra and found.absent:  # each is needed
        head = where + ", ".join(f"no {os.path.basename(p)} at {p}" for p in found.absent)
    else:
        head = f"{where}no {plan.daemon} at {' or '.join(plan.paths)}"
    if plan.daemon in found.on_path:  # installed elsewhere than where mpirun will look
        line = f"{head}; {plan.daemon} is at {found.on_path[plan.daemon]}"
        if plan.hydra:  # hydra has no --prefix
            return line, (
                "install the MPI at the same path in the launcher and worker images (hydra "
                f"starts {plan.daemon} by the launcher's own folder)"
            )
        return line, (
            "install the MPI at the same path in the launcher and worker images, or point "
            "mpirun at the workers' install (mpirun --prefix)"
        )
    other = next((n for n in found.on_path if FAMILY[n] != FAMILY[plan.daemon]), None)
    if other is not None and not (plan.hydra and FAMILY[other] == FAMILY["hydra_pmi_proxy"]):
        line = (
            f"{head}; it has {other} at {found.on_path[other]} ({FAMILY[other]}), the "
            f"launcher runs {plan.mpi}"
        )
        return line, "use the same MPI, at the same version, in the launcher and worker images"
    fails = f"{plan.daemon}: command not found" if plan.by_name else "No such file or directory"
    line = f"{head} ({plan.mpi}'s launch would fail: '{fails}')"
    if plan.hydra:
        return line, (
            "install the MPI at the same path in the worker image as in the launcher's "
            f"(hydra starts {plan.daemon} by the launcher's own folder)"
        )
    if not plan.by_name:  # by its path: the worker's PATH does not matter
        return line, (
            "install the MPI at the same path in the worker image as in the launcher's "
            f"(mpirun starts {plan.daemon} as {plan.paths[0]}), or point mpirun at the "
            "workers' install (--prefix)"
        )
    return line, (
        "add the MPI's bin folder to PATH for non-interactive logins in the worker image "
        "(/etc/environment, or before .bashrc's early return), or pass mpirun --prefix "
        "<install prefix>"
    )
