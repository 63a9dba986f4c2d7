"""Low-level helpers every flavour of lab shares: running setup commands, finding and killing
processes (by bed tag, by namespace, by process group), the lock that serialises allocation and
cleanup across processes, and listing namespaces and links."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ._needs import REPO

STATE_ROOT = Path("/tmp/mpiwait-testbed")  # state files, lock, files a non-root user must read
ENV_TAG = "MPIWAIT_TESTBED"  # env var marking every process a bed starts


class BedError(RuntimeError):
    """The bed could not do what was asked (the message says what and why)."""


def b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def sh(
    argv: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float = 30.0,
) -> subprocess.CompletedProcess[str]:
    """Run a setup command (never through a shell); raise BedError with its stderr on failure."""
    args = [os.fspath(a) for a in argv]
    try:
        cp = subprocess.run(
            args,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BedError(f"{shlex.join(args)}: {e}") from e
    if check and cp.returncode != 0:
        raise BedError(f"{shlex.join(args)} exited {cp.returncode}: {cp.stderr.strip()}")
    return cp


def proc_starttime(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # field 22, counted after the ")" that ends the command name
    return int(stat.rsplit(")", 1)[1].split()[19])


def ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def kill_pids(pids: Iterator[int] | Sequence[int], sig: int = signal.SIGKILL) -> int:
    protected = ancestors()
    n = 0
    for pid in pids:
        if pid in protected:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            n += 1
    return n


def tagged_pids(bed_id: str) -> list[int]:
    """Processes whose environment carries this bed's tag."""
    needle = f"{ENV_TAG}={bed_id}\0".encode()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                data = b"\0" + f.read()
        except OSError:
            continue
        if b"\0" + needle in data + b"\0":
            out.append(int(entry.name))
    return out


def netns_pids(ns: str) -> list[int]:
    cp = sh(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def kill_group(p: subprocess.Popen[Any], grace: float = 2.0) -> None:
    """SIGTERM the process group led by ``p`` (started with start_new_session), then SIGKILL."""
    try:
        leads_group = os.getpgid(p.pid) == p.pid
    except ProcessLookupError:
        leads_group = True  # already gone: sweep its group below
    if p.poll() is None:
        kill = (lambda sig: os.killpg(p.pid, sig)) if leads_group else p.send_signal
        with contextlib.suppress(ProcessLookupError):
            kill(signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                kill(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
    if leads_group:  # members of the group that outlived the leader
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


def listening(pid: int, port: int) -> bool | None:
    """Whether anything listens on TCP ``port`` in the network namespace of ``pid``.

    Reads /proc/<pid>/net/tcp (the table of that process's namespace): no traffic, no exec.
    None when the process is gone.
    """
    found = listening_on(pid, port)
    return None if found is None else bool(found)


def listening_on(pid: int, port: int) -> set[str] | None:
    """The IPv4 addresses with a socket listening on TCP ``port`` in ``pid``'s namespace (as
    listening() reads them); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    found = set()
    for line in lines:
        parts = line.split()
        if len(parts) > 3 and parts[3] == "0A":
            address, _, hexport = parts[1].partition(":")
            if int(hexport, 16) == port:
                found.add(socket.inet_ntoa(struct.pack("<I", int(address, 16))))
    return found


@cache
def openssh_version() -> tuple[int, int]:
    cp = subprocess.run(["ssh", "-V"], capture_output=True, text=True)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", cp.stderr + cp.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


@contextlib.contextmanager
def global_lock() -> Iterator[None]:
    """Serialises index allocation, stale cleanup and shared-dir bookkeeping across processes."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        STATE_ROOT.chmod(0o755)
    with open(STATE_ROOT / "lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def list_ns() -> list[str]:
    cp = sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def unmount_below(roots: Sequence[str]) -> None:
    """Lazily unmount every mount point that starts with one of ``roots``, deepest first."""
    prefixes = tuple(roots)
    for mnt in reversed(Path("/proc/self/mounts").read_text().splitlines()):
        target = mnt.split()[1].replace("\\040", " ")
        if target.startswith(prefixes):
            subprocess.run(["umount", "-l", target], capture_output=True)


def list_links() -> list[str]:
    cp = sh(["ip", "-o", "link", "show"], check=False)
    out = []
    for line in cp.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            out.append(parts[1].strip().split("@")[0])
    return out


def unnamed_uid() -> int:
    """A uid with no passwd entry, as Kubernetes' runAsUser or OpenShift give a pod."""
    for uid in range(54321, 54421):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("every uid from 54321 to 54420 has a passwd entry")


def built_commit() -> str:
    """The commit scripts/build-dist and build-image stamp from this checkout: HEAD when no
    tracked file has changed, "" otherwise."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    clean = git("status", "--porcelain", "--untracked-files=no") == ""
    return git("rev-parse", "HEAD") if clean else ""


def write_in_place(path: Path | str, text: str) -> None:
    """Rewrite a bind-mounted file (a launcher's hosts file) without replacing its inode and
    never shorter than before (a longer old text is padded with a comment), so a concurrent
    reader sees the old or the new text, never an empty file."""
    data = text.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pad = os.fstat(fd).st_size - len(data)
        if pad == 1:
            data += b"\n"
        elif pad > 1:
            data += b"#" + b" " * (pad - 2) + b"\n"
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)


def drop_to(pw: pwd.struct_passwd, home: str | None = None) -> list[str]:
    """argv prefix that runs the rest as ``pw``'s user, with the environment ssh reads."""
    return [
        "setpriv",
        f"--reuid={pw.pw_uid}",
        f"--regid={pw.pw_gid}",
        "--init-groups",
        "env",
        f"HOME={home or pw.pw_dir}",
        f"USER={pw.pw_name}",
        f"LOGNAME={pw.pw_name}",
    ]


# The sshd settings of every lab: key logins only, nothing that needs a system user's set-up.
SSHD_KEY_LOGIN_ONLY = (
    "UsePAM no\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
    "PubkeyAuthentication yes\n"
    "PermitRootLogin prohibit-password\n"
    "StrictModes no\n"
)


def root_and_tools(why_root: str, tools: Sequence[str], install: str) -> str | None:
    """Why something that needs root and ``tools`` cannot run here (a phrase), or None."""
    if os.geteuid() != 0:
        return f"needs root ({why_root})"
    missing = [t for t in tools if shutil.which(t) is None]
    return f"{', '.join(missing)} not installed ({install})" if missing else None


def spawn(argv: Sequence[str], log: Path | None, env: Mapping[str, str]) -> subprocess.Popen[Any]:
    """Start ``argv`` in a process group of its own, output appended to ``log``."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env),
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
