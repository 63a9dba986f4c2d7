"""The ssh that will run (mpirun's), and the rules of its release that mpiwait resolves by.

Where ``ssh`` is installed, ``ssh -V`` names the release whose rules the reader follows, and
``ssh -G`` is the authority on what it accepts: distributions patch keywords in and out
(Debian's GSS-API key exchange, its ``SetupTimeOut`` alias), which no table can follow for
every build. With no ``ssh`` (an initContainer image), the reader accepts what any supported
release accepts and resolves by the newest rules (docs/ssh-settings.md says what that costs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mpiwait.openssh.keywords import DECIMAL_TIMES, NEWEST, NEWEST_NAME, SUPPORTED
from mpiwait.settings import SSH_ASK_TIMEOUT

_VERSION_RE = re.compile(r"OpenSSH_(\d+)\.(\d+)(p\d+)?")


@dataclass(frozen=True, slots=True)
class Rules:
    """What changed between OpenSSH releases in how a config resolves (readconf.c, ssh.c)."""

    version: tuple[int, int]
    release: str  # "OpenSSH_9.2p1": what ``Match version`` matches

    @classmethod
    def for_version(cls, version: tuple[int, int], release: str = "") -> Rules:
        return cls(version, release or f"OpenSSH_{version[0]}.{version[1]}")

    @property
    def legacy_split(self) -> bool:
        return self.version < (8, 7)  # strdelim: double quotes only, no escapes, no comments

    @property
    def expands_include(self) -> bool:
        return self.version >= (9, 9)  # %-tokens and ${VAR} in Include file names

    @property
    def expands_user(self) -> bool:
        return self.version >= (10, 0)  # %-tokens and ${VAR} in User

    @property
    def not_final_asks_final(self) -> bool:
        # Up to 10.0 any "Match final" criterion, negated or not, asks for the final pass.
        return self.version < (10, 1)

    @property
    def jump_token(self) -> bool:
        return self.version >= (9, 3)  # %j (ProxyJump) in paths and Match exec

    @property
    def setup_timeout_is_connect_timeout(self) -> bool:
        # Debian's SetupTimeOut alias: of ServerAliveInterval up to 9.x, ConnectTimeout from 10.
        return self.version >= (10, 0)

    @property
    def decimal_times(self) -> bool:
        return self.version >= DECIMAL_TIMES  # "1.5" seconds (truncated); seconds given once

    @property
    def refuse_connection(self) -> bool:
        return self.version >= (10, 1)  # RefuseConnection yes: ssh exits before connecting

    @property
    def default_identity_names(self) -> tuple[str, ...]:
        """ssh's default key files that mpiwait probes with, in ssh's order: of its list, the
        security-key (``_sk``), XMSS and DSA ones are left out (no login without hardware or a
        non-default server); ``id_mldsa44_ed25519`` (10.5 on) is kept, so that a launcher
        whose key it is is told plainly that mpiwait cannot use it."""
        names = ("id_rsa", "id_ecdsa", "id_ed25519")
        return (*names, "id_mldsa44_ed25519") if self.version >= (10, 5) else names


NEWEST_RULES = Rules(NEWEST, NEWEST_NAME)


@dataclass(frozen=True, slots=True)
class Client:
    """The installed ssh (``path`` None: none installed) and the rules mpiwait follows."""

    path: str | None
    banner: str  # ssh -V's first line: "OpenSSH_9.2p1 Debian-2+deb12u10, OpenSSL 3.0.19 ..."
    rules: Rules

    def describe(self) -> str:
        """For the start line: which ssh decides, or that none does."""
        if self.path is None:
            what = self.banner or "no ssh installed"  # or why the ssh found cannot be asked
            return (
                f"{what}: ssh config read as {NEWEST_NAME} reads it, accepting what any "
                f"supported OpenSSH release ({SUPPORTED}) accepts"
            )
        return f"ssh config read as {self.path} reads it ({self.banner.split(',')[0]})"

    def ask(self, args: Sequence[str], environ: Mapping[str, str]) -> tuple[bool, str]:
        """``ssh -G ARGS``: (accepted, its output or error). Nothing is connected to."""
        if self.path is None:
            return True, ""
        try:
            p = subprocess.run(
                [self.path, "-G", *args],
                capture_output=True,
                text=True,
                errors="surrogateescape",  # ssh prints the config's bytes as they are
                env=dict(environ),
                stdin=subprocess.DEVNULL,
                timeout=SSH_ASK_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{self.path} -G: {exc}"
        if p.returncode != 0:
            return False, first_error(p.stderr)
        return True, p.stdout


def first_error(stderr: str) -> str:
    """ssh's complaint, on one line: its first lines (the line number may be on the second)."""
    lines = [
        ln.strip()
        for ln in stderr.splitlines()
        if ln.strip()
        and not ln.startswith("Pseudo-terminal will not be allocated")
        and "terminating, " not in ln
    ]
    return "; ".join(lines[:3]) if lines else "exit 255"


def parse_banner(banner: str) -> Rules | None:
    m = _VERSION_RE.search(banner)
    if m is None:
        return None
    return Rules((int(m.group(1)), int(m.group(2))), m.group(0))


def find_client(environ: Mapping[str, str] | None = None) -> Client:
    """The ssh on PATH (as mpirun finds it) and its release; the newest rules without one."""
    env = os.environ if environ is None else environ
    path = shutil.which("ssh", path=env.get("PATH", os.defpath))
    if path is None:
        return Client(None, "", NEWEST_RULES)
    try:
        p = subprocess.run(
            [path, "-V"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=SSH_ASK_TIMEOUT,
            check=False,
        )
        banner = (p.stderr or p.stdout).strip().splitlines()[0] if (p.stderr or p.stdout) else ""
    except (OSError, subprocess.TimeoutExpired):
        banner = ""
    rules = parse_banner(banner)
    if rules is None:
        # Not OpenSSH, or it cannot run here: no ssh -G to ask, nor a release to follow.
        if "No user exists for uid" in banner:
            # A uid without a passwd entry: ssh exits before anything else (mpirun's ssh too,
            # which the launch check reports); mpiwait's own probes need no entry.
            return Client(None, f"{path} cannot run at this uid ({banner})", NEWEST_RULES)
        return Client(None, f"{path} is not OpenSSH ({banner or 'no version'})", NEWEST_RULES)
    return Client(path, banner, rules)
