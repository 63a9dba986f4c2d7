"""What mpirun will run on each worker once it has logged in (orted, prted, hydra_pmi_proxy),
how it will find it, and which workers start daemons on others (Open MPI's tree spawn): the
plan of the daemon check (probe/stages/daemon.py) and the judgement of what a worker answered.
Decisions on argv, the environment and the launcher's own install (its parameter files, its
ompi_info); it must not touch the network. Each MPI's rule: docs/daemon-check.md.
"""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from mpiwait.launch.command import configured_agent, scheduler_allocation
from mpiwait.launch.handover import Launch, Mpi, truthy
from mpiwait.launch.launchers import launcher, option
from mpiwait.probe.daemon import DaemonPlan

# Each MPI's daemon, as its launcher starts it on a worker over ssh.
_DAEMON = {
    Mpi.OPENMPI4: "orted",
    Mpi.OPENMPI5: "prted",
    Mpi.OPENMPI: "prted",
    Mpi.MPICH: "hydra_pmi_proxy",
    Mpi.INTEL: "hydra_bstrap_proxy",  # which then starts hydra_pmi_proxy from the same folder
}
_MCA_FLAGS = frozenset({"--mca", "-mca", "--prtemca", "-prtemca", "--gmca", "-gmca"})
# mpirun's and mpiexec's options that take two values, and common ones that take none; any
# other option takes one (how mpirun's own options are told from its program's).
_TWO_VALUES = _MCA_FLAGS | {"-genv", "-env", "--genv", "--env"}
_NO_VALUE = frozenset({
    "--allow-run-as-root", "--oversubscribe", "--tag-output", "--timestamp-output",
    "--report-bindings", "--display-map", "--display-allocation", "--noprefix", "-noprefix",
    "--use-hwthread-cpus", "--nolocal", "-v", "--verbose", "-q", "--quiet", "-ppn-auto",
})  # fmt: skip
# Open MPI's reading of a login shell's name (find_shell): the first of these it contains.
_SHELLS = ("bash", "zsh", "tcsh", "csh", "ksh", "sh")
_DEFAULT_RADIX = 64  # ORTE's routed_radix and PRRTE's rml_base_radix


def daemon_plan(
    launch: Launch,
    argv: Sequence[str],
    environ: Mapping[str, str],
    hosts: Sequence[str] = (),
    *,
    prefix_by_default: Callable[[str], bool | None] | None = None,
    shell: str | None = None,
) -> DaemonPlan | str:
    """The plan for ``launch`` (COMMAND ``argv``) over ``hosts`` (the workers in the hostfile's
    order, this machine left out), or why there is none. ``prefix_by_default``: whether the
    Open MPI 4 installed in a folder passes its prefix by default (None: unknown)."""
    line = mpirun_line(launch, argv)
    environ = {**environ, **line.assigned}
    agent = configured_agent([argv[0], *line.options], environ)
    if agent is not None and not agent[0]:
        return f"{agent[1]} starts the daemons without ssh"
    if scheduler_allocation(environ):
        return "inside a batch allocation the daemons start through the scheduler"
    params = _Params(line.options, environ, _param_files(launch, environ))
    if _mca(params, "orte_launch_agent", "prte_launch_agent"):
        return "a launch agent replaces the daemon (orte_launch_agent)"
    if launch.mpi is Mpi.OPENMPI:
        return "which Open MPI (4 or 5, so orted or prted) could not be told"
    daemon = _DAEMON[launch.mpi]
    if launch.mpi.hydra:
        return _hydra(launch, daemon, environ)
    shell = shell_kind(shell if shell is not None else _login_shell(environ))
    if shell in ("csh", "tcsh"):
        return "mpirun writes the daemon's command line in csh syntax for a csh login shell"
    plan = _openmpi(launch, daemon, line, prefix_by_default or ompi_prefix_by_default)
    # Unseen options may turn tree spawn off (horovodrun does above 64 hosts): no tree check.
    radix = _tree_radix(launch.mpi, params) if line.started and launch.via != "horovodrun" else 0
    # A spawning worker's daemon runs the same agent, with the same arguments, as mpirun;
    # Open MPI splits both on white space.
    if agent is None:
        chosen = _mca(params, "plm_rsh_agent", "plm_ssh_agent", "orte_rsh_agent")
        agent = (chosen, "a parameter file") if chosen else None
    agent_words = agent[0].split(":")[0].split() if agent else ["ssh"]
    agent_words += _mca(params, "plm_rsh_args", "plm_ssh_args").split()
    return replace(
        plan,
        profile=shell in ("sh", "ksh"),
        tree=tree_pairs(hosts, radix) if radix else None,
        agent=tuple(agent_words) or ("ssh",),
        radix=radix,
    )


@dataclass(frozen=True, slots=True)
class MpirunLine:
    """mpirun as COMMAND starts it, or as a ``bash -c`` script's words do."""

    started: str | None  # the word that names it; None: a script or program runs it unseen
    options: tuple[str, ...]  # its own options, up to its program's name
    assigned: Mapping[str, str]  # variables set before it: ``env X=1 mpirun``, ``X=1 mpirun``


def mpirun_line(launch: Launch, argv: Sequence[str]) -> MpirunLine:
    """How COMMAND starts the launcher, as far as its words show."""
    if not launch.via:
        return MpirunLine(launch.launcher, _own_options(argv[1:]), {})
    words = _words(argv)
    for k, word in enumerate(words):
        kind = launcher(word)
        if kind is not None and kind.own:
            assigned: dict[str, str] = {}
            for before in reversed(words[:k]):
                name, equals, value = before.rstrip(";").partition("=")
                if not equals or not name.isidentifier():
                    if before == "env":
                        continue
                    break
                assigned.setdefault(name, value)
            return MpirunLine(word, _own_options(words[k + 1 :]), assigned)
    return MpirunLine(None, (), {})


def _own_options(words: Sequence[str]) -> tuple[str, ...]:
    """The leading words that are the launcher's own options, not its program's arguments
    (``mpirun -np 4 python3 train.py --prefix exp1``: ``-np 4``)."""
    k = 0
    while k < len(words) and words[k].startswith("-"):
        word = words[k]
        if word in _TWO_VALUES:
            k += 3
        elif word in _NO_VALUE or "=" in word:
            k += 1
        else:
            k += 2
    return tuple(words[:k])


def _hydra(launch: Launch, daemon: str, environ: Mapping[str, str]) -> DaemonPlan | str:
    """hydra starts its proxy by the absolute path of its own folder (MPICH: where mpiexec was
    found; Intel MPI: its mpiexec.hydra's, under I_MPI_ROOT)."""
    found = os.path.abspath(launch.path)
    folders = [os.path.dirname(found), os.path.dirname(os.path.realpath(found))]
    root = environ.get("I_MPI_ROOT", "")
    if launch.mpi is Mpi.INTEL and root:
        folders.append(os.path.join(root, "bin"))
    names = (daemon, "hydra_pmi_proxy") if launch.mpi is Mpi.INTEL else (daemon,)
    for folder in dict.fromkeys(folders):
        if all(os.path.isfile(os.path.join(folder, n)) for n in names):
            paths = tuple(os.path.join(folder, n) for n in names)
            how = f"at {paths[0]} (hydra starts it by the launcher's own folder)"
            return _plan(launch, daemon, paths, by_name=False, prefix="", how=how)
    return f"no {daemon} next to {launch.path}: where hydra will look cannot be told"


def _openmpi(
    launch: Launch,
    daemon: str,
    line: MpirunLine,
    prefix_by_default: Callable[[str], bool | None],
) -> DaemonPlan:
    """Open MPI starts its daemon as ``<prefix>/bin/<daemon>`` with ``<prefix>/bin`` first on
    PATH when it has a prefix (--prefix, an absolute mpirun, a prefix-by-default build), else
    by name through the remote PATH."""
    own = os.path.dirname(os.path.dirname(os.path.abspath(launch.path)))
    argv = ("mpirun", *line.options)
    given = option(argv, "--prefix", "") or option(argv, "-prefix", "")
    started = line.started
    # Not PRTE_PREFIX or OPAL_PREFIX: Open MPI 5's mpirun sets PRTE_PREFIX from its own
    # location whatever they say (docs/daemon-check.md).
    sources = [(given, "--prefix"), (_absolute(started), "mpirun started by its path")]
    for prefix, why in sources:
        if prefix:
            prefix = prefix.rstrip("/") or "/"
            path = os.path.join(prefix, "bin", daemon)
            how = f"at {path} ({why})"
            return _plan(launch, daemon, (path,), by_name=False, prefix=prefix, how=how)
    own_path = os.path.join(own, "bin", daemon)
    if started is None:  # a script or program runs mpirun, by a name or a path not seen here
        how = f"on the worker's non-interactive PATH or at {own_path} ({launch.via} runs mpirun)"
        return _plan(launch, daemon, (own_path,), by_name=True, prefix="", how=how)
    if launch.mpi is Mpi.OPENMPI4:
        noprefix = {"--noprefix", "-noprefix"} & set(line.options)
        by_default = False if noprefix else prefix_by_default(os.path.dirname(launch.path))
        if by_default:
            how = f"at {own_path} (this Open MPI passes its prefix by default)"
            return _plan(launch, daemon, (own_path,), by_name=False, prefix=own, how=how)
        if by_default is False:
            how = "on the worker's non-interactive PATH (mpirun by name, no --prefix)"
            return _plan(launch, daemon, (), by_name=True, prefix="", how=how)
    if launch.mpi is Mpi.OPENMPI5 and os.path.isfile(own_path):
        # its mpirun runs its own install's prterun by path, which starts prted by that prefix
        # (Debian's and PyPI's alike: docs/daemon-check.md)
        how = f"at {own_path} (Open MPI 5's mpirun passes its prefix)"
        return _plan(launch, daemon, (own_path,), by_name=False, prefix=own, how=how)
    # Open MPI 5 by name may still pass its prefix (a prefix-by-default build, a relocated
    # install that sets OPAL_PREFIX itself): either way passes.
    how = f"on the worker's non-interactive PATH or at {own_path} (mpirun by name)"
    return _plan(launch, daemon, (own_path,), by_name=True, prefix="", how=how)


def _plan(
    launch: Launch, daemon: str, paths: tuple[str, ...], *, by_name: bool, prefix: str, how: str
) -> DaemonPlan:
    mpi = launch.mpi
    return DaemonPlan(mpi.value, mpi.hydra, daemon, paths, by_name, prefix, how)


def _absolute(started: str | None) -> str:
    """The prefix an mpirun started by its absolute path implies (``<prefix>/bin/mpirun``)."""
    if started is None or not os.path.isabs(started):
        return ""
    folder = os.path.dirname(started)
    return os.path.dirname(folder) if os.path.basename(folder) == "bin" else ""


def ompi_prefix_by_default(folder: str) -> bool | None:
    """Whether the Open MPI whose ompi_info is in ``folder`` was built to pass its prefix by
    default (``--enable-mpirun-prefix-by-default``); None when ompi_info cannot tell."""
    try:
        done = subprocess.run(
            [os.path.join(folder, "ompi_info"), "--parsable", "--config"],
            # no component loaded: the answer is the same, in milliseconds instead of 0.2 s
            env={**os.environ, "OMPI_MCA_mca_base_component_path": os.devnull},
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in done.stdout.splitlines():
        if line.startswith("mpirun:prefix_by_default:"):
            return line.rpartition(":")[2].strip() == "yes"
    return None


def _tree_radix(mpi: Mpi, params: _Params) -> int:
    """Open MPI's routing radix when its daemons start through other workers, else 0."""
    if mpi is Mpi.OPENMPI4:
        off = _mca(params, "plm_rsh_no_tree_spawn")
        routed = _mca(params, "routed") or "radix"
        radix = _mca(params, "routed_radix")
    else:
        off = _mca(params, "plm_ssh_no_tree_spawn", "plm_rsh_no_tree_spawn")
        routed = "radix"
        radix = _mca(params, "rml_base_radix", "routed_radix")
    if truthy(off) or routed != "radix":
        return 0
    try:
        value = int(radix) if radix else _DEFAULT_RADIX
    except ValueError:
        return _DEFAULT_RADIX
    # ORTE takes radix 1 as a chain; PRRTE raises anything below 2 to 2
    return max(1 if mpi is Mpi.OPENMPI4 else 2, value)


def tree_pairs(hosts: Sequence[str], radix: int) -> dict[str, str]:
    """Each worker that starts daemons on others, and the first of them, in Open MPI's radix
    tree: daemon 0 is mpirun's, the workers are daemons 1..N in the hostfile's order."""
    pairs = {}
    for vpid in range(1, len(hosts) + 1):
        level, total = 1, 1
        while total < vpid + 1:
            level *= radix
            total += level
        child = vpid + level
        if child <= len(hosts):
            pairs[hosts[vpid - 1]] = hosts[child - 1]
    return pairs


@dataclass(frozen=True, slots=True)
class _Params:
    """Where Open MPI's MCA parameters are set, in its order of precedence."""

    words: Sequence[str]  # mpirun's command line: --mca NAME VALUE
    environ: Mapping[str, str]  # OMPI_MCA_NAME, PRTE_MCA_NAME
    files: Mapping[str, str]  # the parameter files' NAME = VALUE


def _mca(params: _Params, *names: str) -> str:
    """An MCA parameter's value, the first of ``names`` set; "" when none is."""
    words = params.words
    for k, word in enumerate(words[:-2]):
        if word in _MCA_FLAGS and words[k + 1] in names:
            return words[k + 2]
    for name in names:
        for variable in (f"OMPI_MCA_{name}", f"PRTE_MCA_{name}"):
            if params.environ.get(variable, "").strip():
                return params.environ[variable].strip()
    return next((params.files[n] for n in names if params.files.get(n)), "")


def _param_files(launch: Launch, environ: Mapping[str, str]) -> dict[str, str]:
    """The parameters set in the user's and the install's parameter files (the user's win);
    the workers' daemons read the same files, from the same image."""
    home = environ.get("HOME") or os.path.expanduser("~")
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(launch.path)))
    etc = "/etc/openmpi" if prefix == "/usr" else os.path.join(prefix, "etc")  # Debian's
    files = [
        os.path.join(home, ".openmpi", "mca-params.conf"),
        os.path.join(home, ".prte", "mca-params.conf"),
        os.path.join(etc, "openmpi-mca-params.conf"),
        os.path.join(prefix, "etc", "prte-mca-params.conf"),
    ]
    found: dict[str, str] = {}
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read(1 << 20).splitlines()
        except OSError:
            continue
        for line in lines:
            name, equals, value = line.partition("#")[0].partition("=")
            if equals and name.strip():
                found.setdefault(name.strip(), value.strip())
    return found


def _words(argv: Sequence[str]) -> list[str]:
    """COMMAND's words, those of a ``bash -c 'mpirun ...'`` script included."""
    words: list[str] = []
    for arg in argv[1:]:
        try:
            words.extend(shlex.split(arg) if any(c.isspace() for c in arg) else [arg])
        except ValueError:
            words.extend(arg.split())
    return words


def _login_shell(environ: Mapping[str, str]) -> str:
    """The shell Open MPI takes the workers' to be: ours from passwd, else $SHELL."""
    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    return shell if shell_kind(shell) else environ.get("SHELL", "")


def shell_kind(shell: str) -> str:
    """The shell Open MPI takes ``shell`` for: the first of its names that it contains
    (``dash`` is sh, ``mksh`` ksh); "" for none."""
    name = os.path.basename(shell)
    return next((kind for kind in _SHELLS if kind in name), "")
