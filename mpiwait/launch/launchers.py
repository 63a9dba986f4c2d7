"""The programs that start an MPI job, in one table: what the ssh check before the wait
(command.py), the node-pod test (modes/wait.py) and the hand-over's recognition (handover.py)
each need to know of them.

Any other COMMAND (``bash -c``, ``python3 launch.py``, a script) is a wrapper: the MPI it would
start is found on its PATH by handover.recognise().
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple


class Launcher(NamedTuple):
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
