"""What runs inside a TestBed worker (mixed into TestBed): commands in its namespace (own
hostname, the workers' hosts file, its own view of the filesystem: set_view()), and its sshd:
started (at once or later), stopped, whether it listens. Found by command line when the bed was
made by another process (attach())."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._launcher import clean_shell
from ._names import Mount, mount_ns_cmd
from ._sshd import SshdBuild, start_sshd, tail
from ._sys import BedError, kill_group, kill_pids, netns_pids, spawn
from ._sys import listening as port_listening

if TYPE_CHECKING:
    from ._netns import WorkerHost


class WorkerProcesses:
    """Mixed into TestBed, which provides these."""

    hosts: list[WorkerHost]
    user: str
    workdir: Path
    empty_file: Path
    _views: dict[int, list[Mount]]
    worker_hosts_file: Path
    nsswitch_file: Path
    _sshd: dict[int, subprocess.Popen[Any]]
    sshd_build: SshdBuild
    _listeners: dict[int, subprocess.Popen[Any]]

    if TYPE_CHECKING:  # the launcher context's

        def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]: ...

    def _worker_prelude(self, i: int, *, delay: float = 0) -> list[str]:
        """argv prefix: enter worker i's netns, its own UTS name, files-only name resolution."""
        h = self.hosts[i]
        mounts: list[Mount] = [
            (self.worker_hosts_file, "/etc/hosts"),
            (self.nsswitch_file, "/etc/nsswitch.conf"),
            *clean_shell(self.user, self.empty_file),
        ]
        return mount_ns_cmd(
            mounts, f"testbed-{h.short}", netns=h.ns, hostname=h.short, delay=delay,
            overlays=self._views.get(i, ()),
        )  # fmt: skip

    def set_view(
        self,
        i: int,
        *,
        hide: Sequence[Path | str] = (),
        add: Mapping[Path | str, Path | str] | None = None,
    ) -> None:
        """Give worker i a filesystem of its own where a worker image would differ from this
        machine: each path of ``hide`` is gone there (a PATH search goes on past it, "command
        not found"; by its path, "No such file or directory"), and each ``add`` destination
        (absolute; its folder must exist) is there as a symlink to its source. Made with
        read-only overlays of the folders concerned (a whiteout for each hidden name) in the
        worker's own mount namespace. Replaces the view set before; no arguments: the
        machine's filesystem again. Worker i's sshd, if it runs, is restarted, so that every
        login from now on sees the view (sessions already open keep theirs); ns_run and
        ns_exec_cmd see it too."""
        layers: dict[Path, list[tuple[str, Path | None]]] = {}
        for path in map(Path, hide):
            if not path.is_absolute() or not (path.exists() or path.is_symlink()):
                raise BedError(f"set_view: cannot hide {path}: no such absolute path")
            layers.setdefault(path.parent, []).append((path.name, None))
        for to, src in (add or {}).items():
            dest = Path(to)
            if not dest.is_absolute() or not dest.parent.is_dir():
                raise BedError(f"set_view: cannot add {dest}: its folder does not exist")
            layers.setdefault(dest.parent, []).append((dest.name, Path(src)))
        root = self.workdir / "views" / str(i)
        if root.exists():
            shutil.rmtree(root)
        overlays: list[Mount] = []
        for k, (folder, entries) in enumerate(sorted(layers.items())):
            layer = root / str(k)
            layer.mkdir(parents=True)
            for name, target in entries:
                if target is None:
                    os.mknod(layer / name, stat.S_IFCHR | 0o600, os.makedev(0, 0))  # whiteout
                else:
                    (layer / name).symlink_to(target)
            overlays.append((layer, folder))
        self._views[i] = overlays
        if self.sshd_running(i):
            self.stop_sshd(i)
            self.start_sshd(i)

    def ns_exec_cmd(self, i: int, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        """argv that runs ``argv`` inside worker i (its netns, UTS hostname and hosts file)."""
        return [*self._worker_prelude(i), *(os.fspath(a) for a in argv)]

    def ns_run(
        self, i: int, argv: Sequence[str | os.PathLike[str]], *, timeout: float = 30.0, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw["env"] = self.env(kw.get("env"))
        return subprocess.run(self.ns_exec_cmd(i, argv), timeout=timeout, **kw)

    def _spawn(self, argv: list[str], log: Path | None) -> subprocess.Popen[Any]:
        return spawn(argv, log, self.env(None))

    def sshd_pid(self, i: int) -> int | None:
        """The pid of worker i's sshd as this bed started it (None when it did not)."""
        p = self._sshd.get(i)
        return p.pid if p is not None and p.poll() is None else None

    def sshd_running(self, i: int) -> bool:
        """Whether sshd (or its delayed start) of worker i is alive."""
        p = self._sshd.get(i)
        if p is not None:
            return p.poll() is None
        return bool(self._sshd_pids_in_ns(i))

    def _pids_in_ns(self, i: int, *words: bytes) -> list[int]:
        """Processes in worker i's namespace whose command line contains all ``words``."""
        out = []
        for pid in netns_pids(self.hosts[i].ns):
            cmd = self._cmdline(pid)
            if cmd and all(w in cmd for w in words):
                out.append(pid)
        return out

    def _sshd_pids_in_ns(self, i: int) -> list[int]:
        """Listener sshd of worker i (or its pending delayed start), found by command line, for
        attached beds. sshd retitles itself "sshd: /usr/sbin/sshd -D -f CONF ... [listener]";
        its per-connection children carry "-R" or a title without the config path."""
        conf = str(self.hosts[i].sshd_config).encode()
        return [
            pid
            for pid in self._pids_in_ns(i, conf)
            if b"\0-R" not in self._cmdline(pid) and b" -R" not in self._cmdline(pid)
        ]

    @staticmethod
    def _cmdline(pid: int) -> bytes:
        try:
            return b"\0" + Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    def start_sshd(self, i: int, *, delay: float = 0, wait: bool = True) -> None:
        """Start sshd -D on worker i. ``delay`` > 0: return at once, sshd starts ``delay`` s later
        (a ``sleep; exec sshd`` child). Otherwise wait until it listens (``wait``). No-op if it
        is already running or pending."""
        if self.sshd_running(i):
            return
        if i in self._listeners and self._listeners[i].poll() is None:
            raise BedError(
                f"{self.hosts[i].name}: silent listener holds the port; "
                "stop_silent_listener() first"
            )
        h = self.hosts[i]
        prelude = self._worker_prelude(i, delay=delay)
        argv = (*self.pinned(1), *self.sshd_build.argv)
        self._sshd[i] = start_sshd(prelude, h.sshd_config, h.sshd_log, self.env(None), argv)
        if delay <= 0 and wait:
            self.wait_listening([i])

    def stop_sshd(self, i: int, *, sessions: bool = False) -> None:
        """Stop worker i's sshd listener (the port then refuses). Open sessions survive, as with a
        real sshd restart, unless ``sessions``: then everything in the namespace is killed."""
        p = self._sshd.pop(i, None)
        if p is not None:
            kill_group(p)
        else:
            kill_pids(self._sshd_pids_in_ns(i), signal.SIGTERM)
        if sessions:
            keep = {lp.pid for lp in self._listeners.values() if lp.poll() is None}
            kill_pids([x for x in netns_pids(self.hosts[i].ns) if x not in keep])
        self._wait_not_listening(i)

    def listening(self, i: int) -> bool:
        """Whether anything accepts on worker i's SSH port (read from the kernel; no traffic)."""
        pids = [p.pid for p in (self._sshd.get(i), self._listeners.get(i)) if p is not None]
        pids += netns_pids(self.hosts[i].ns)[:1] if not pids else []
        for pid in pids:
            r = port_listening(pid, self.hosts[i].port)
            if r is not None:
                return r
        return False

    def wait_listening(self, which: Sequence[int] | range, timeout: float = 10.0) -> None:
        """Wait until each worker in ``which`` listens on its port; BedError on timeout."""
        pending = set(which)
        deadline = time.monotonic() + timeout
        while pending:
            for i in list(pending):
                if self.listening(i):
                    pending.discard(i)
                else:
                    p = self._sshd.get(i)
                    if p is not None and p.poll() is not None and i not in self._listeners:
                        raise BedError(
                            f"sshd of {self.hosts[i].name} exited {p.returncode}: "
                            f"{tail(self.hosts[i].sshd_log)}"
                        )
            if not pending:
                break
            if time.monotonic() > deadline:
                names = ", ".join(self.hosts[i].name for i in sorted(pending))
                raise BedError(f"not listening after {timeout} s: {names}")
            time.sleep(0.01)

    def _wait_not_listening(self, i: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.listening(i) and time.monotonic() < deadline:
            time.sleep(0.01)
