"""What the wait learned, handed to the MPI launch: which MPI COMMAND starts (itself, or through
a wrapper: a shell, a script, horovodrun) and the environment changes its launch needs where
the operators' settings fall short (docs/launch-handover.md). Each change is a variable only
that MPI reads, so whatever COMMAND starts before it inherits it harmlessly, and a variable the
user already set is never changed. Pure decisions on argv, the environment and a few file
names: it must not start a process or touch the network.
"""

from __future__ import annotations

import enum
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from mpiwait.launch.launchers import ON_PATH, launcher, starts_no_mpi


class Mpi(str, enum.Enum):
    OPENMPI4 = "Open MPI 4"
    OPENMPI5 = "Open MPI 5"
    OPENMPI = "Open MPI"  # version not told apart: handled as 5 (the PRRTE names are harmless to 4)
    INTEL = "Intel MPI"
    MPICH = "MPICH"

    @property
    def hydra(self) -> bool:
        return self in (Mpi.INTEL, Mpi.MPICH)

    @property
    def prrte(self) -> bool:
        return self in (Mpi.OPENMPI5, Mpi.OPENMPI)


# Files an installation keeps next to its launcher, one set per MPI.
_PRRTE_FILES = ("prterun", "prte", "prted")  # Open MPI 5 runs its jobs through PRRTE
_ORTE_FILES = ("orted", "orterun")  # Open MPI 4 and older
_INTEL_FILES = ("impi_info", "hydra_bstrap_proxy")  # Intel's hydra; MPICH's has neither
_HYDRA_FILES = ("hydra_pmi_proxy", "mpiexec.hydra")


@dataclass(frozen=True, slots=True)
class Launch:
    """The MPI that COMMAND starts, and why mpiwait thinks so."""

    mpi: Mpi
    launcher: str  # argv[0] as given; for a wrapper, the launcher's name
    path: str  # where it was found
    evidence: str  # for the start line, e.g. "prterun next to it"
    via: str = ""  # the wrapper COMMAND is (bash, python3, horovodrun), if it is not the launcher

    def describe(self) -> str:
        if self.via:
            return f"{self.mpi.value} via {self.via} ({self.evidence})"
        return f"{self.mpi.value} ({self.launcher}: {self.evidence})"


def recognise(
    argv: Sequence[str], environ: Mapping[str, str], path: str | None = None
) -> Launch | None:
    """The MPI ``argv`` launches, from its name, where it is installed and what lies beside it;
    for a wrapper (a shell, a script, horovodrun), the MPI of the first ``mpirun``/``mpiexec``
    on its PATH, else of Intel MPI's under ``I_MPI_ROOT``. None when no MPI is found, its MPI
    cannot be told, or the wrapper's arguments say it starts none (deepspeed's pdsh)."""
    if not argv:
        return None
    search = path if path is not None else environ.get("PATH", os.defpath)
    own = launcher(argv[0])
    if own is not None and own.own:
        found = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=search)
        return _recognise_at(argv[0], found, environ, search) if found else None
    if starts_no_mpi(argv):
        return None
    wrapped = _launcher_on_path(search, environ)
    if wrapped is None:
        return None
    found, where = wrapped
    launch = _recognise_at(os.path.basename(found), found, environ, search)
    if launch is None:
        return None
    evidence = f"{launch.launcher} {where}: {found}, {launch.evidence}"
    return replace(launch, evidence=evidence, via=os.path.basename(argv[0]))


def _launcher_on_path(search: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(path, how found) of the launcher a wrapper would run: the first of ON_PATH in PATH's
    order, else Intel MPI's mpirun under I_MPI_ROOT (an image whose script sources setvars.sh)."""
    for directory in search.split(os.pathsep):
        for name in ON_PATH:
            candidate = os.path.join(directory or ".", name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate, "on PATH"
    root = environ.get("I_MPI_ROOT", "")
    candidate = os.path.join(root, "bin", "mpirun")
    if root and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate, "under I_MPI_ROOT"
    return None


def _recognise_at(
    launcher_name: str, found: str, environ: Mapping[str, str], search: str
) -> Launch | None:
    """The MPI of the launcher ``launcher_name`` (argv[0] as given) found at ``found``."""
    name = os.path.basename(launcher_name)
    real = os.path.realpath(found)
    real_name = os.path.basename(real)
    dirs = list(dict.fromkeys([os.path.dirname(os.path.abspath(found)), os.path.dirname(real)]))

    def launch(mpi: Mpi, evidence: str) -> Launch:
        return Launch(mpi, launcher_name, found, evidence)

    # The name itself, or what a symlink chain (Debian's alternatives) ends in.
    for label in dict.fromkeys([name, real_name]):
        if label == "prterun":
            return launch(Mpi.OPENMPI5, "PRRTE's launcher")
        if label == "orterun":
            how = "ORTE's launcher" if label == name else f"a link to {real}"
            return launch(Mpi.OPENMPI4, how)
    # Intel MPI ships hydra too (mpiexec.hydra, hydra_pmi_proxy): tell it first.
    intel = _beside(dirs, _INTEL_FILES)
    if intel is not None:
        return launch(Mpi.INTEL, f"{intel} next to it")
    root = environ.get("I_MPI_ROOT", "")
    if root and real.startswith(os.path.join(os.path.realpath(root), "")):
        return launch(Mpi.INTEL, "installed under I_MPI_ROOT")
    if {name, real_name} & {"mpiexec.hydra", "mpiexec.mpich"}:
        return launch(Mpi.MPICH, "hydra's launcher")
    if name == "mpiexec.openmpi" or real_name.endswith(".openmpi"):
        return launch(*_openmpi_version(dirs, search, f"{real_name}"))
    prrte, orte, hydra = (_beside(dirs, f) for f in (_PRRTE_FILES, _ORTE_FILES, _HYDRA_FILES))
    if sum(x is not None for x in (prrte, orte, hydra)) > 1:
        return None  # one directory holds several MPIs and the name does not tell which
    if prrte is not None:
        return launch(Mpi.OPENMPI5, f"{prrte} next to it")
    if orte is not None:
        return launch(Mpi.OPENMPI4, f"{orte} next to it")
    if hydra is not None:
        return launch(Mpi.MPICH, f"{hydra} next to it")
    if _beside(dirs, ("ompi_info",)) is not None:
        return launch(*_openmpi_version(dirs, search, "ompi_info next to it"))
    return None


def _beside(dirs: list[str], files: Iterable[str]) -> str | None:
    """The first of ``files`` found in one of ``dirs`` (the launcher's own and its link's)."""
    for directory in dirs:
        for file in files:
            if os.path.exists(os.path.join(directory, file)):
                return file
    return None


def _openmpi_version(dirs: list[str], search: str, evidence: str) -> tuple[Mpi, str]:
    """Open MPI 4 or 5, from PRRTE's or ORTE's programs beside it or else on PATH."""
    for directory in [*dirs, *search.split(os.pathsep)]:
        if any(os.path.exists(os.path.join(directory, f)) for f in _PRRTE_FILES):
            return Mpi.OPENMPI5, f"{evidence}, PRRTE in {directory}"
        if any(os.path.exists(os.path.join(directory, f)) for f in _ORTE_FILES):
            return Mpi.OPENMPI4, f"{evidence}, ORTE in {directory}"
    return Mpi.OPENMPI, evidence


@dataclass(frozen=True, slots=True)
class Change:
    """One variable mpiwait sets in COMMAND's environment, and why (for the log line)."""

    name: str
    value: str
    why: str

    def line(self) -> str:
        return f"launch: {self.name}={self.value} ({self.why})"


@dataclass(frozen=True, slots=True)
class Handover:
    changes: tuple[Change, ...] = ()
    notes: tuple[str, ...] = ()  # what mpiwait could not do, or chose not to, and why

    def environ(self, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(environ)
        env.update((c.name, c.value) for c in self.changes)
        return env

    def lines(self) -> list[str]:
        return [c.line() for c in self.changes] + [f"launch: {n}" for n in self.notes]


@dataclass(frozen=True, slots=True)
class Interface:
    """The interface the probes reached the workers through, or why it is not known."""

    name: str | None
    why: str  # "the interface the workers answered on", or why there is none


# Open MPI 5 reads these under PRRTE's names only (PRRTE's own table: orte_X -> prte_X,
# plm_rsh_X -> plm_ssh_X); mpi-operator and Trainer set the ORTE ones.
PRRTE_NAMES = {
    "OMPI_MCA_orte_default_hostfile": "PRTE_MCA_prte_default_hostfile",
    "OMPI_MCA_plm_rsh_args": "PRTE_MCA_plm_ssh_args",
    "OMPI_MCA_plm_rsh_agent": "PRTE_MCA_plm_ssh_agent",
    "OMPI_MCA_orte_set_default_slots": "PRTE_MCA_prte_set_default_slots",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "PRTE_MCA_prte_keep_fqdn_hostnames",
}
_KEEP_FQDN = "OMPI_MCA_orte_keep_fqdn_hostnames"
IFACE_VARIABLES = ("I_MPI_HYDRA_IFACE", "HYDRA_IFACE")
_IFACE_FLAGS = ("-iface", "--iface")


def iface_variable(mpi: Mpi) -> str:
    return "I_MPI_HYDRA_IFACE" if mpi is Mpi.INTEL else "HYDRA_IFACE"


def _iface_chosen(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """Where the user already chose hydra's interface, if they did."""
    for name in IFACE_VARIABLES:
        if environ.get(name, "").strip():
            return name
    for word in (w for arg in argv[1:] for w in arg.split()):  # words: `bash -c 'mpirun ...'`
        if word in _IFACE_FLAGS or word.startswith(tuple(f + "=" for f in _IFACE_FLAGS)):
            return word.partition("=")[0]
    return None


def plan(
    launch: Launch,
    argv: Sequence[str],
    environ: Mapping[str, str],
    *,
    interface: Interface | None,
    self_entries: Sequence[str] = (),
    hostname: str = "",
) -> Handover:
    """The changes for ``launch``. ``interface`` None: not known yet (--dry-run, before the
    wait); ``self_entries``: the names in the host sources that mean this machine."""
    changes: list[Change] = []
    notes: list[str] = []
    mpi = launch.mpi
    # hydra's proxies call back to the launcher by its host name, which workers may not resolve
    # until its pod is Ready: an interface makes them call back to that interface's address.
    if mpi.hydra:
        variable = iface_variable(mpi)
        chosen = _iface_chosen(argv, environ)
        if chosen is not None:
            pass  # the user's choice stands, and there is nothing to say about it
        elif interface is None:
            changes.append(
                Change(variable, "<interface>", "the interface the workers answer on, once known")
            )
        elif interface.name is None:
            notes.append(
                f"{variable} not set: {interface.why}; the workers call back to this machine by "
                "its name, which they may not resolve yet"
            )
        else:
            changes.append(Change(variable, interface.name, interface.why))
    # mpi-operator sets HYDRA_LAUNCH_EXTRA_ARGS; MPICH reads HYDRA_LAUNCHER_EXTRA_ARGS.
    misnamed = environ.get("HYDRA_LAUNCH_EXTRA_ARGS")
    if mpi is Mpi.MPICH and misnamed is not None and "HYDRA_LAUNCHER_EXTRA_ARGS" not in environ:
        changes.append(
            Change(
                "HYDRA_LAUNCHER_EXTRA_ARGS",
                misnamed,
                "from HYDRA_LAUNCH_EXTRA_ARGS, a name hydra does not read",
            )
        )
    if mpi.prrte:
        prrte = _prrte_names(mpi, environ, self_entries, hostname)
        changes += prrte.changes
        notes += prrte.notes
    return Handover(tuple(changes), tuple(notes))


def _prrte_names(
    mpi: Mpi,
    environ: Mapping[str, str],
    self_entries: Sequence[str],
    hostname: str,
) -> Handover:
    """The PRRTE names of the ORTE-era variables set (and not already set under their new
    name), and why one is not carried over."""
    changes: list[Change] = []
    notes: list[str] = []
    not_self = [e for e in self_entries if e.lower().rstrip(".") != hostname.lower()]
    for old, new in PRRTE_NAMES.items():
        if environ.get(old) is None or environ.get(new) is not None:
            continue
        if old == _KEEP_FQDN and not_self and truthy(environ[old]):
            notes.append(
                f"{old} not carried over to {new}: this machine is listed as "
                f"{not_self[0]}, not as its host name {hostname or '(unknown)'}, and PRRTE "
                "keeping full names would ssh to itself"
            )
            continue
        changes.append(Change(new, environ[old], f"from {old}, which {mpi.value} ignores"))
    return Handover(tuple(changes), tuple(notes))


def truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "t", "y", "on", "enabled")


_HYDRA_LINE = re.compile(r"^\s*[^\s#:]+:\d+\s*(#.*)?$", re.M)
_SLOTS_LINE = re.compile(r"^\s*\S+\s+(slots|max_slots|max-slots)\s*=", re.M)


def advice_without_command(
    hostfile: str | None, hostfile_text: str | None, interface: Interface | None
) -> list[str]:
    """initContainer use: what the MPI container must set itself, from what the hostfile's
    format tells (mpi-operator writes ``host:N`` for Intel MPI and MPICH, ``host slots=N`` for
    Open MPI); nothing when it tells nothing."""
    if not hostfile_text:
        return []
    lines = []
    if _HYDRA_LINE.search(hostfile_text):
        if interface is not None and interface.name:
            value = interface.name
            where = f" ({interface.why})"
        else:
            value, where = "<interface to the workers>", ""
        lines.append(
            f"launch: not mine to change from here: the MPI container must set "
            f"I_MPI_HYDRA_IFACE={value} (Intel MPI) or HYDRA_IFACE={value} (MPICH){where}, "
            "or its workers call back to it by a name they may not resolve; MPICH also "
            "reads HYDRA_LAUNCHER_EXTRA_ARGS, not HYDRA_LAUNCH_EXTRA_ARGS"
        )
    if _SLOTS_LINE.search(hostfile_text):
        lines.append(
            "launch: not mine to change from here: with Open MPI 5 the MPI container must "
            f"set PRTE_MCA_prte_default_hostfile={hostfile or '<hostfile>'} (and "
            "PRTE_MCA_plm_ssh_args for OMPI_MCA_plm_rsh_args): Open MPI 5 ignores the "
            "OMPI_MCA_orte_* variables and runs every rank on the launcher"
        )
    return lines
