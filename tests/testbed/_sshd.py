"""The sshd of a namespace lab and the client side that logs into it: keys, the sshd_config
and the client ssh_config every lab writes, and starting sshd as a process of the lab.

Which sshd: the machine's, tuned for tests (``machine_sshd``: no per-source penalties, a high
MaxStartups), or a Debian release's from its root (``release_sshd("trixie")``: OpenSSH 10.0p2
with that release's own defaults, PerSourcePenalties on, ML-KEM key exchange first). A release's
sshd, sshd-session and sshd-auth run from the root through the root's own dynamic loader, not
under chroot: the sessions they start run this machine's programs (the MPIs installed here,
orted, hydra_pmi_proxy), as a worker's sessions run its image's.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._namespaces import SSHD
from ._sys import SSHD_KEY_LOGIN_ONLY, BedError, listening, openssh_version, sh, spawn


@dataclass(frozen=True)
class SshdBuild:
    """How a lab runs sshd: ``argv`` (the sshd command), its ``version``, whether the lab's
    sshd_config ``tuned`` it for tests, and ``extra`` lines that config needs."""

    argv: tuple[str, ...]
    version: tuple[int, int]
    tuned: bool = True
    extra: str = ""
    name: str = "machine"


def machine_sshd() -> SshdBuild:
    """The machine's sshd, tuned: no per-source penalties, MaxStartups high."""
    return SshdBuild((SSHD,), openssh_version())


def release_sshd(suite: str, workdir: Path) -> SshdBuild:
    """``suite``'s sshd (testbed.releases, SERVER_SUITES) with its own defaults, run from its
    cached root by the root's loader; wrappers in ``workdir`` do the same for the programs it
    executes per connection (SshdSessionPath, SshdAuthPath)."""
    from .releases import openssh_root

    root = openssh_root(suite)
    loaders = sorted(root.glob("usr/lib/*/ld-linux*.so.*"))
    if not loaders:
        raise BedError(f"no dynamic loader in {root}")
    loader = loaders[0]
    run = (str(loader), "--inhibit-cache", "--library-path", str(loader.parent))
    sshd = root / "usr/sbin/sshd"
    extra = ""
    for option, program in (("SshdSessionPath", "sshd-session"), ("SshdAuthPath", "sshd-auth")):
        real = root / "usr/lib/openssh" / program
        if not real.exists():
            continue
        wrapper = workdir / f"{suite}-{program}"
        wrapper.write_text(f'#!/bin/sh\nexec {" ".join(run)} --argv0 "$0" {real} "$@"\n')
        wrapper.chmod(0o755)
        extra += f"{option} {wrapper}\n"
    cp = sh([*run, str(sshd), "-V"], check=False)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", cp.stderr + cp.stdout)
    if m is None:
        raise BedError(f"{suite}'s sshd -V: {cp.stderr.strip()}")
    version = (int(m.group(1)), int(m.group(2)))
    argv = (*run, "--argv0", str(sshd), str(sshd))
    return SshdBuild(argv, version, tuned=False, extra=extra, name=f"{suite} {m.group(0)}")


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
    listen: str | Sequence[str],
    port: int,
    host_key: Path,
    authorized_keys: Path,
    max_startups: str = "1000:30:2000",
    log_level: str = "INFO",
    tmp_dir: Path | None = None,
    build: SshdBuild | None = None,
) -> str:
    """The sshd_config of a lab: key logins only, as many concurrent logins as a scale test
    makes, and no per-source penalties (every client of a lab comes from one address).
    ``tmp_dir``: the sessions' TMPDIR. ``build`` not tuned (a release's sshd): its own
    MaxStartups and PerSourcePenalties, and LogLevel VERBOSE, where sshd logs penalties."""
    build = build or machine_sshd()
    ver = build.version
    extra = "PerSourcePenalties no\n" if ver >= (9, 8) and build.tuned else ""
    extra += f"SetEnv TMPDIR={tmp_dir}\n" if tmp_dir is not None and ver >= (8, 7) else ""
    extra += build.extra
    if build.tuned:
        extra += f"MaxStartups {max_startups}\n"
    else:
        log_level = "VERBOSE"
    addresses = [listen] if isinstance(listen, str) else listen
    return (
        f"# {header}\n"
        f"Port {port}\n"
        + "".join(f"ListenAddress {a}\n" for a in addresses)
        + f"HostKey {host_key}\n"
        "PidFile none\n" + SSHD_KEY_LOGIN_ONLY + f"AuthorizedKeysFile {authorized_keys}\n"
        "MaxSessions 100\n"
        "UseDNS no\n"
        "PrintMotd no\n"
        "PrintLastLog no\n"
        "X11Forwarding no\n"
        f"LogLevel {log_level}\n" + extra
    )


def start_sshd(
    prelude: Sequence[str],
    config: Path,
    log: Path,
    env: Mapping[str, str],
    sshd: Sequence[str] = (SSHD,),
) -> subprocess.Popen[Any]:
    """sshd -D with ``config``, logging to ``log``, run through ``prelude`` (which enters the
    namespace: _names.mount_ns_cmd); ``sshd``: the command (SshdBuild.argv)."""
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    return spawn([*prelude, *sshd, "-D", "-f", str(config), "-E", str(log)], log, env)


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
