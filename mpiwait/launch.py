"""The end of the line: who we are (launcher or worker), whether COMMAND can run, and exec.

``execvp`` keeps our PID, so the COMMAND receives the pod's signals directly and its exit status
is the container's; nothing of mpiwait stays resident.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

from mpiwait.errors import ExitCode, LaunchError

ROLE_VARIABLE = "K_MPI_JOB_ROLE"
# Commands that start remote processes over ssh unless told otherwise.
MPI_LAUNCHERS = frozenset(
    {
        "mpirun",
        "mpiexec",
        "mpiexec.hydra",
        "mpiexec.mpich",
        "mpiexec.openmpi",
        "orterun",
        "prterun",
        "horovodrun",
        "deepspeed",
    }
)


def worker_role(environ: Mapping[str, str]) -> str | None:
    """The role when it is not the launcher's (mpi-operator sets ``worker`` on workers)."""
    role = environ.get(ROLE_VARIABLE, "")
    return role if role and role != "launcher" else None


def find_command(argv: Sequence[str], path: str | None = None) -> str:
    """Where ``argv[0]`` would be found by execvp; LaunchError (127/126) when it cannot run."""
    name = argv[0]
    if not name:
        raise LaunchError("the COMMAND is an empty string", ExitCode.NOT_FOUND)
    if "/" in name:
        if not os.path.exists(name):
            raise LaunchError(f"command not found: {name}", ExitCode.NOT_FOUND)
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise LaunchError(f"command is not executable: {name}", ExitCode.NOT_EXECUTABLE)
        return name
    found = shutil.which(name, path=path)
    if found is None:
        # A file of that name without the execute bit is 126 for a shell; say so too.
        for directory in (path or os.environ.get("PATH", os.defpath)).split(os.pathsep):
            candidate = os.path.join(directory or ".", name)
            if os.path.isfile(candidate):
                raise LaunchError(
                    f"command is not executable: {candidate}", ExitCode.NOT_EXECUTABLE
                )
        raise LaunchError(
            f"command not found: {name} (PATH={path or os.environ.get('PATH', '')})",
            ExitCode.NOT_FOUND,
        )
    return found


def missing_ssh_client(argv: Sequence[str], path: str | None = None) -> bool:
    """True when COMMAND is an MPI launcher and no ``ssh`` client is on PATH for it to use."""
    return os.path.basename(argv[0]) in MPI_LAUNCHERS and shutil.which("ssh", path=path) is None


def exec_command(argv: Sequence[str]) -> None:
    """Replace this process with COMMAND; returns only by raising LaunchError."""
    try:
        os.execvp(argv[0], list(argv))
    except FileNotFoundError:
        raise LaunchError(f"command not found: {argv[0]}", ExitCode.NOT_FOUND) from None
    except PermissionError:
        raise LaunchError(
            f"command is not executable: {argv[0]}", ExitCode.NOT_EXECUTABLE
        ) from None
    except OSError as exc:
        raise LaunchError(
            f"cannot run {argv[0]}: {exc.strerror or exc}", ExitCode.NOT_EXECUTABLE
        ) from None
