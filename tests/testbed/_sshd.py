"""The sshd of a namespace lab and the client side that logs into it: keys, the sshd_config
and the client ssh_config every lab writes, and starting sshd as a process of the lab."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._namespaces import SSHD
from ._sys import SSHD_KEY_LOGIN_ONLY, BedError, listening, openssh_version, sh, spawn


def make_key(path: Path, comment: str, key_type: str = "ed25519") -> None:
    """A new key pair at ``path`` (and .pub), replacing any. ``key_type`` "ed25519" or
    "ecdsa-p521-pem" (PEM "BEGIN EC PRIVATE KEY", as mpi-operator makes them)."""
    for p in (path, Path(f"{path}.pub")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    kargs = (
        ["-t", "ed25519"] if key_type == "ed25519" else ["-t", "ecdsa", "-b", "521", "-m", "PEM"]
    )
    sh(["ssh-keygen", "-q", *kargs, "-N", "", "-C", comment, "-f", path])


def client_config(*, header: str, port: int, user: str, key: Path) -> str:
    """The client ssh_config of a lab: its key only, no host key checks, never a prompt."""
    return (
        f"# {header}\n"
        "Host *\n"
        f"    Port {port}\n"
        f"    User {user}\n"
        f"    IdentityFile {key}\n"
        "    IdentitiesOnly yes\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        "    CheckHostIP no\n"
        "    UpdateHostKeys no\n"
        "    BatchMode yes\n"
        "    PasswordAuthentication no\n"
        "    KbdInteractiveAuthentication no\n"
        "    GSSAPIAuthentication no\n"
        "    LogLevel ERROR\n"
    )


def sshd_config(
    *,
    header: str,
    listen: str,
    port: int,
    host_key: Path,
    authorized_keys: Path,
    max_startups: str = "1000:30:2000",
    log_level: str = "INFO",
    tmp_dir: Path | None = None,
) -> str:
    """The sshd_config of a lab: key logins only, as many concurrent logins as a scale test
    makes, and no per-source penalties (every client of a lab comes from one address).
    ``tmp_dir``: the sessions' TMPDIR."""
    ver = openssh_version()
    extra = "PerSourcePenalties no\n" if ver >= (9, 8) else ""
    extra += f"SetEnv TMPDIR={tmp_dir}\n" if tmp_dir is not None and ver >= (8, 7) else ""
    return (
        f"# {header}\n"
        f"Port {port}\n"
        f"ListenAddress {listen}\n"
        f"HostKey {host_key}\n"
        "PidFile none\n" + SSHD_KEY_LOGIN_ONLY + f"AuthorizedKeysFile {authorized_keys}\n"
        f"MaxStartups {max_startups}\n"
        "MaxSessions 100\n"
        "UseDNS no\n"
        "PrintMotd no\n"
        "PrintLastLog no\n"
        "X11Forwarding no\n"
        f"LogLevel {log_level}\n" + extra
    )


def start_sshd(
    prelude: Sequence[str], config: Path, log: Path, env: Mapping[str, str]
) -> subprocess.Popen[Any]:
    """sshd -D with ``config``, logging to ``log``, run through ``prelude`` (which enters the
    namespace: _names.mount_ns_cmd)."""
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    return spawn([*prelude, SSHD, "-D", "-f", str(config), "-E", str(log)], log, env)


def tail(p: Path, n: int = 5) -> str:
    try:
        return " | ".join(p.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return "(no log)"


def wait_listening(p: subprocess.Popen[Any], port: int, log: Path, timeout: float = 10) -> None:
    """Until ``p`` (an sshd) listens on ``port`` in its namespace; BedError if it exits."""
    deadline = time.monotonic() + timeout
    while not listening(p.pid, port):
        if p.poll() is not None:
            raise BedError(f"sshd exited {p.returncode}: {tail(log)}")
        if time.monotonic() > deadline:
            raise BedError(f"sshd not listening after {timeout} s: {tail(log)}")
        time.sleep(0.01)
