"""The programs that start an MPI job, in one table: what the ssh check before the wait
(command.py), the node-pod test (modes/common.py) and the hand-over's recognition (handover.py)
each need to know of them.

Any other COMMAND (``bash -c``, ``python3 launch.py``, a script) is a wrapper: the MPI it would
start is found on its PATH by handover.recognise().
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Launcher:
    own: bool  # an MPI's own launcher: its name and install tell the MPI (else it builds one)
    ssh: bool  # starts the remote processes over ssh unless told otherwise


_MPI = Launcher(own=True, ssh=True)

LAUNCHERS: Mapping[str, Launcher] = MappingProxyType(
    {
        "mpirun": _MPI,
        "mpiexec": _MPI,
        "mpiexec.hydra": _MPI,
        "mpiexec.mpich": _MPI,
        "mpiexec.openmpi": _MPI,
        "orterun": _MPI,
        "prterun": _MPI,
        # builds an mpirun command line (or starts Gloo), after ssh'ing `true` to every host
        "horovodrun": Launcher(own=False, ssh=True),
        # builds an mpirun/mpiexec command line (--launcher openmpi|mvapich|impi), or runs pdsh
        "deepspeed": Launcher(own=False, ssh=False),
    }
)

# What a wrapper is taken to run, in this order in each PATH directory.
ON_PATH = ("mpirun", "mpiexec")


def launcher(command: str) -> Launcher | None:
    """The table's entry for ``command`` (a name or path), None for a wrapper; any other
    ``mpiexec.*`` is taken as an MPI's own launcher too, its MPI told by its install."""
    name = os.path.basename(command)
    found = LAUNCHERS.get(name)
    if found is None and name.startswith("mpiexec"):
        return _MPI
    return found


# deepspeed's --launcher values that build an mpirun/mpiexec command line; its default, pdsh,
# ssh's by itself, and slurm runs srun.
_DEEPSPEED_MPI = frozenset({"openmpi", "mvapich", "impi", "mpich"})
# horovodrun options under which it starts no mpirun: Gloo, and elastic mode (Gloo only).
_HOROVOD_NO_MPI = frozenset({"--gloo", "--host-discovery-script", "--min-np", "--max-np"})


def starts_no_mpi(argv: Sequence[str]) -> bool:
    """Whether a wrapper's own arguments say it runs no MPI launcher (deepspeed with pdsh or
    slurm, horovodrun with Gloo); any other wrapper may, and is taken to."""
    name = os.path.basename(argv[0]) if argv else ""
    if name == "deepspeed":
        return option(argv, "--launcher", "pdsh").lower() not in _DEEPSPEED_MPI
    if name == "horovodrun":
        return any(arg.partition("=")[0] in _HOROVOD_NO_MPI for arg in argv[1:])
    return False


def option(argv: Sequence[str], flag: str, default: str) -> str:
    """The first value of ``flag`` (``--flag V`` or ``--flag=V``) in ``argv``, else ``default``."""
    for k, arg in enumerate(argv[1:], start=1):
        if arg == flag and k + 1 < len(argv):
            return argv[k + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1 :]
    return default
