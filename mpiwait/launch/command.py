"""The end of the line: who we are (launcher or worker), whether COMMAND can run, and exec.

``execvp`` keeps our PID, so the COMMAND receives the pod's signals directly and its exit status
is the container's; nothing of mpiwait stays resident.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Mapping, Sequence
from typing import NoReturn

from mpiwait.errors import ExitCode, LaunchError
from mpiwait.launch.launchers import launcher

ROLE_VARIABLE = "K_MPI_JOB_ROLE"


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


# Where a user points Open MPI or hydra (MPICH, Intel MPI) at another remote agent than ssh: a
# command line each ("ssh -F cfg"; Open MPI also takes alternatives separated by ":").
AGENT_VARIABLES = (
    "OMPI_MCA_plm_rsh_agent",
    "PRTE_MCA_plm_ssh_agent",
    "HYDRA_LAUNCHER_EXEC",
    "HYDRA_BOOTSTRAP_EXEC",
    "I_MPI_HYDRA_BOOTSTRAP_EXEC",
)
# The same on the launcher's command line: ``--mca plm_rsh_agent X``, ``-launcher-exec X``.
_AGENT_MCA = frozenset({"plm_rsh_agent", "plm_ssh_agent", "orte_rsh_agent"})
_AGENT_FLAGS = frozenset({"-launcher-exec", "--launcher-exec", "-bootstrap-exec"})
# hydra's launcher choice (``-launcher fork``, HYDRA_LAUNCHER=slurm): anything but ssh/rsh
# starts the remote processes without an ssh client.
_LAUNCHER_FLAGS = frozenset({"-launcher", "--launcher", "-bootstrap", "--bootstrap"})
_LAUNCHER_VARIABLES = ("HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP", "I_MPI_HYDRA_BOOTSTRAP")
# Inside a batch allocation the launchers start remote processes through the scheduler.
_SCHEDULER_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID", "COBALT_JOBID")


def configured_agent(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(agent command line, where it was set) when the user chose another remote agent;
    ("", where) when they chose a launcher that needs none."""
    args = list(argv[1:])
    for k, arg in enumerate(args[:-1]):
        value = args[k + 1]
        if arg in ("--mca", "-mca", "--prtemca", "-prtemca") and value in _AGENT_MCA:
            if k + 2 < len(args):
                return args[k + 2], f"{arg} {value}"
        elif arg in _AGENT_FLAGS:
            return value, arg
        elif arg in _LAUNCHER_FLAGS and value not in ("ssh", "rsh"):
            return "", f"{arg} {value}"
    for name in AGENT_VARIABLES:
        if environ.get(name, "").strip():
            return environ[name], name
    for name in _LAUNCHER_VARIABLES:
        if environ.get(name, "").strip() not in ("", "ssh", "rsh"):
            return "", name
    return None


def scheduler_allocation(environ: Mapping[str, str]) -> bool:
    """Inside a batch scheduler's allocation (Slurm, PBS, LSF, SGE, Cobalt)."""
    return any(environ.get(v) for v in _SCHEDULER_VARIABLES)


def check_remote_agent(
    argv: Sequence[str],
    environ: Mapping[str, str],
    path: str | None = None,
    uid: int | None = None,
) -> str | None:
    """Before waiting: can COMMAND reach the workers once they are ready?

    For an MPI launcher that starts its workers over ssh (mpirun, mpiexec*, horovodrun), no
    ``ssh`` on PATH, or no program for the agent the user configured instead, is a LaunchError
    (127), and an ssh that will refuse to run because ``uid`` (default: ours) has no passwd
    entry is one too (126): mpirun would fail at once after all the waiting. Returns a warning
    instead where it cannot be sure (deepspeed, a batch scheduler's allocation), else None.
    """
    name = os.path.basename(argv[0])
    kind = launcher(name)
    if kind is None:
        return None
    uid = os.getuid() if uid is None else uid
    agent = configured_agent(argv, environ)
    if agent is not None:
        _check_configured_agent(*agent, launcher=name, uid=uid, path=path)
        return None
    scheduler = scheduler_allocation(environ)
    if shutil.which("ssh", path=path) is not None:
        if kind.ssh and not scheduler:
            _check_ssh_runs_as(uid, name)
        return None
    if not kind.ssh or scheduler:
        return f"no ssh client on PATH; {name} may need one to reach the workers"
    raise LaunchError(
        f"{name} needs an ssh client to start processes on the workers, and there is no ssh "
        f"on PATH ({path or os.environ.get('PATH', '')})",
        ExitCode.NOT_FOUND,
        hint="install openssh-client in the launcher image, or point the launcher at another "
        "agent (OMPI_MCA_plm_rsh_agent, HYDRA_LAUNCHER_EXEC, I_MPI_HYDRA_BOOTSTRAP_EXEC)",
    )


def _check_configured_agent(
    command: str, where: str, *, launcher: str, uid: int, path: str | None
) -> None:
    """The agent the user chose instead of plain ssh (``command``, set at ``where``) must be
    on PATH; when it is ssh after all, it must be able to run as ``uid``. An empty ``command``
    (a launcher that needs no agent) passes."""
    if not command:
        return
    programs = [part.split()[0] for part in command.split(":") if part.split()]
    # Open MPI takes the first of the alternatives that is found.
    used = next((p for p in programs if shutil.which(p, path=path)), None)
    if used is not None:
        if os.path.basename(used) == "ssh":
            _check_ssh_runs_as(uid, launcher)
        return
    raise LaunchError(
        f"{launcher} is set to reach the workers with {command!r} ({where}), "
        f"which is not found on PATH ({path or os.environ.get('PATH', '')})",
        ExitCode.NOT_FOUND,
        hint=f"install it in the launcher image, or fix {where}",
    )


def _check_ssh_runs_as(uid: int, launcher: str) -> None:
    """OpenSSH's ssh looks up its own user first and exits ("No user exists for uid N") when
    the uid has no passwd entry, as an arbitrary uid (OpenShift, ``runAsUser``) often has not:
    the hosts would pass mpiwait's probes (paramiko needs no passwd entry) and mpirun fail."""
    try:
        pwd.getpwuid(uid)
    except KeyError:
        raise LaunchError(
            f"{launcher} starts processes on the workers with ssh, which refuses to run as uid "
            f"{uid}: it has no passwd entry (ssh: No user exists for uid {uid})",
            ExitCode.NOT_EXECUTABLE,
            hint="run the launcher as a uid with a passwd entry (add one to the image's "
            "/etc/passwd, or with nss_wrapper), or use mpiwait as an initContainer without "
            "COMMAND",
        ) from None


def is_mpi_launcher(command: str) -> bool:
    """Whether ``command`` starts an MPI job (mpirun, mpiexec*, horovodrun, deepspeed, ...)."""
    return launcher(command) is not None


def exec_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> NoReturn:
    """Replace this process with COMMAND (in ``env``, else ours); returns only by raising
    LaunchError."""
    try:
        if env is None:
            os.execvp(argv[0], list(argv))
        else:
            os.execvpe(argv[0], list(argv), dict(env))
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
