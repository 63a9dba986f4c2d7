"""The launcher context of a namespace lab (TestBed, ManyHosts): running a command where the
lab's names resolve from files only, ssh reads the lab's ssh_config, as the lab's user; and
laying out what mpi-operator gives a launcher (/etc/mpi, the ssh-auth secret)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ._names import files_only_cmd
from ._registry import claim_dir
from ._sys import ENV_TAG, BedError, drop_to, kill_group

_LAUNCHER_KW = ("etc_mpi", "home_ssh", "ssh_config", "as_user")

# What mpi-operator sets in an Open MPI launcher's environment (read-only: tests share it).
OPERATOR_OPENMPI: Mapping[str, str] = MappingProxyType(
    {
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": "1",
    }
)


def user_entry(user: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(user)
    except KeyError:
        raise BedError(f"no such user {user!r}") from None


def clean_shell(user: str, empty: Path) -> list[tuple[Path, Path]]:
    """Mounts that give ``user``'s logins a clean shell, like a container image's: ``empty``
    over the machine's ~/.bashrc (a pyenv init, say), which bash runs for every ssh command."""
    rc = Path(user_entry(user).pw_dir) / ".bashrc"
    return [(empty, rc)] if rc.is_file() else []


class ClientFile:
    """A read-only attribute: the file ``name`` in the lab's ``client_dir``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, lab: Any, owner: type | None = None) -> Any:
        return self if lab is None else lab.client_dir / self.name

    def __set__(self, lab: Any, value: object) -> None:
        raise AttributeError(f"{self.name} is where the lab keeps it")


class LauncherContext:
    """Mixed into a lab, which provides these (and keeps ``_launched`` for its down())."""

    bed_id: str
    user: str
    names: list[str]
    client_dir: Path  # files a client (and a non-root user) reads: key, ssh_config, hosts
    _launched: list[subprocess.Popen[Any]]

    # (launcher CPUs, workers' CPUs) for taskset, or None: see split_cpus()
    cpu_split: tuple[str, str] | None = None

    key_path = ClientFile("id_key")
    pubkey_path = ClientFile("id_key.pub")
    authorized_keys = ClientFile("authorized_keys")
    ssh_config = ClientFile("ssh_config")
    # the launcher view: only published names (rewritten in place by publish/unpublish)
    hosts_file = ClientFile("hosts")
    nsswitch_file = ClientFile("nsswitch.conf")
    empty_file = ClientFile("empty")  # mounted over the workers' ~/.bashrc: clean_shell()

    def pinned(self, side: int) -> tuple[str, ...]:
        """The taskset prefix for the launcher (0) or the workers' sshds (1); () unsplit."""
        return () if self.cpu_split is None else ("taskset", "-c", self.cpu_split[side])

    def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``env`` (default: ours) tagged as this bed's, for a process of its launcher context."""
        e = dict(os.environ if env is None else env)
        e[ENV_TAG] = self.bed_id
        return e

    def launcher_cmd(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        etc_mpi: Path | str | None = None,
        home_ssh: Path | str | None = None,
        ssh_config: Path | str | bool | None = None,
        as_user: str | None = None,
    ) -> list[str]:
        """argv that runs ``argv`` as the launcher: private mount namespace with the bed's hosts
        file over /etc/hosts, nsswitch ``hosts: files``, ``ssh_config`` over /etc/ssh/ssh_config
        (None: the bed's; False: leave the machine's), optionally ``etc_mpi`` over /etc/mpi and
        ``home_ssh`` over ~``as_user``/.ssh (or ~root), then drop to ``as_user`` if given."""
        if not self.bed_id:
            raise BedError("bed is not up")
        if ssh_config is None or ssh_config is True:
            config: Path | None = self.ssh_config
        else:
            config = None if ssh_config is False else Path(ssh_config)
        pw = user_entry(as_user) if as_user else None
        more: list[tuple[Path, Path]] = []
        if etc_mpi is not None:
            claim_dir(Path("/etc/mpi"), self.bed_id)
            more.append((Path(etc_mpi), Path("/etc/mpi")))
        if home_ssh is not None:
            home = Path((pw or user_entry("root")).pw_dir)
            claim_dir(home / ".ssh", self.bed_id, owner=pw)
            more.append((Path(home_ssh), home / ".ssh"))
        cmd = files_only_cmd(
            argv,
            hosts_file=self.hosts_file,
            nsswitch_file=self.nsswitch_file,
            ssh_config=config,
            tag=self.bed_id,
            title="testbed-launcher",
            more=more,
            prefix=drop_to(pw) if pw is not None else [],
        )
        return [*self.pinned(0), *cmd]

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        timeout: float = 60.0,
        check: bool = False,
        **kw: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the launcher context and wait. Takes launcher_cmd()'s keywords and
        subprocess.run()'s (defaults: capture_output, text, stdin=DEVNULL). On timeout the
        whole process group is killed and TimeoutExpired is raised."""
        lk = {k: kw.pop(k) for k in _LAUNCHER_KW if k in kw}
        kw.setdefault("text", True)
        kw["env"] = self.env(kw.get("env"))
        inp = kw.pop("input", None)
        if kw.pop("capture_output", True):
            kw.setdefault("stdout", subprocess.PIPE)
            kw.setdefault("stderr", subprocess.PIPE)
        if inp is not None:
            kw["stdin"] = subprocess.PIPE
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("start_new_session", True)
        cmd = self.launcher_cmd(argv, **lk)
        with subprocess.Popen(cmd, **kw) as p:
            try:
                out, err = p.communicate(inp, timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(p, grace=0.5)
                out, err = p.communicate()
                raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
            except BaseException:
                kill_group(p, grace=0.5)
                raise
            # children the command left behind in its group (e.g. a stuck orted)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        cp = subprocess.CompletedProcess(cmd, p.returncode, out, err)
        if check:
            cp.check_returncode()
        return cp

    def popen(self, argv: Sequence[str | os.PathLike[str]], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in the launcher context (own process group, killed by down()).
        Takes launcher_cmd()'s keywords and subprocess.Popen()'s."""
        lk = {k: kw.pop(k) for k in _LAUNCHER_KW if k in kw}
        kw["env"] = self.env(kw.get("env"))
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(self.launcher_cmd(argv, **lk), **kw)
        self._launched = [q for q in self._launched if q.poll() is None] + [p]
        return p

    # ---- what mpi-operator lays out for a launcher -------------------------------------------

    def _pick(self, hosts: Sequence[int | str] | None) -> list[str]:
        """Host names from indexes or names (None: all)."""
        if hosts is None:
            return list(self.names)
        return [self.names[h] if isinstance(h, int) else h for h in hosts]

    def write_ssh_auth(
        self, dest: Path | str, *, key_mode: int = 0o600, owner: str | None = None
    ) -> Path:
        """Make a directory like mpi-operator's ``ssh-auth`` secret mount: ``id_rsa`` (the bed's
        client key, whatever its type), ``id_rsa.pub``, ``authorized_keys``. Use it as
        ``home_ssh=``. ``key_mode`` lets a test reproduce "permissions too open"."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.key_path, dest / "id_rsa")
        shutil.copyfile(self.pubkey_path, dest / "id_rsa.pub")
        shutil.copyfile(self.pubkey_path, dest / "authorized_keys")
        (dest / "id_rsa").chmod(key_mode)
        (dest / "id_rsa.pub").chmod(0o644)
        (dest / "authorized_keys").chmod(0o644)
        pw = user_entry(owner or self.user)
        for p in (dest, *dest.iterdir()):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        dest.chmod(0o700)
        return dest

    def write_etc_mpi(
        self,
        dest: Path | str,
        *,
        flavor: str = "openmpi",
        slots: int = 1,
        running: Sequence[int] | None = None,
        hosts: Sequence[int | str] | None = None,
    ) -> Path:
        """Make a directory like mpi-operator's /etc/mpi: ``hostfile`` (0444; ``h slots=N`` for
        "openmpi", ``h:N`` for "mpich"/"intel") and ``discover_hosts.sh`` (0555; ``running``
        lists the indexes it echoes, default all; sorted by name as the operator does)."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        names = self._pick(hosts)
        if flavor == "openmpi":
            lines = [f"{h} slots={slots}" for h in names]
        elif flavor in ("mpich", "intel"):
            lines = [f"{h}:{slots}" for h in names]
        else:
            raise ValueError(f"flavor must be openmpi, mpich or intel, got {flavor!r}")
        p = dest / "hostfile"
        with contextlib.suppress(FileNotFoundError):
            p.chmod(0o644)
        p.write_text("\n".join(lines) + "\n")
        p.chmod(0o444)
        up = names if running is None else self._pick(running)
        self.write_discover_hosts(dest, sorted(up))
        return dest

    @staticmethod
    def write_discover_hosts(dest: Path | str, names: Sequence[str]) -> Path:
        """(Re)write ``dest/discover_hosts.sh`` in place (keeps the inode under bind mounts)."""
        p = Path(dest) / "discover_hosts.sh"
        text = "#!/bin/sh\n" + "".join(f"echo {n}\n" for n in names)
        if p.exists():
            p.chmod(0o755)
            with open(p, "r+") as f:
                f.truncate(0)
                f.write(text)
        else:
            p.write_text(text)
        p.chmod(0o555)
        return p


def split_cpus() -> tuple[str, str]:
    """taskset's CPU lists for the launcher and the workers: this process's CPUs in two halves.
    A lab that splits them runs its workers' sshds on the second and launcher_cmd's processes on
    the first, as on a cluster, where what the workers' sshds do takes no CPU from the launcher
    (benchmarks; docs/performance.md says why)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise BedError("split_cpus needs 2 CPUs or more")
    half = len(cpus) // 2
    return ",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:]))
