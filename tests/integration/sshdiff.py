"""Hold mpiwait's SSH settings against the installed ``ssh -G``, field by field.

Used by test_sshconfig_differential.py in-process (``ssh -G -F FILE``) and, for the
default ``~/.ssh/config`` + ``/etc/ssh/ssh_config`` pair, as a script run inside a private mount
namespace (``unshare -m``) where each case's files are bind-mounted over the real home and
/etc/ssh, so the machine's own files are never touched:

    unshare -m python tests/integration/sshdiff.py SPEC.json  ->  JSON list of differences

Identity files: ``ssh -G`` 9.2 prints them before expansion, so this module expands them as
ssh's load_public_identity_files does (``~`` from passwd, then ``${VAR}`` and %-tokens, using
the host, port and user that ssh itself printed), independently of mpiwait's code.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed import releases

from mpiwait.errors import InputError
from mpiwait.openssh.client import Client, find_client, first_error, parse_banner
from mpiwait.openssh.config import LocalUser, SSHConfig

# The ones mpiwait probes with, of any release's defaults (client.Rules.default_identity_names).
DEFAULT_NAMES = ("id_rsa", "id_ecdsa", "id_ed25519", "id_mldsa44_ed25519")
_SK = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk")
# ssh -G's default list, by release: 8.4, 9.2, 10.0 (Debian builds XMSS in), 10.6.
SSH_DEFAULT_LISTS = (
    ("id_rsa", "id_dsa", *_SK[1:], "id_xmss"),
    (*_SK, "id_xmss", "id_dsa"),
    (*_SK, "id_xmss"),
    (*_SK, "id_mldsa44_ed25519"),
)
_POLICY = {"true": {"yes"}, "false": {"no"}, "ask": {"yes", "unset"}, "accept-new": {"accept-new"}}


def ssh_g(args: list[str], env: Mapping[str, str]) -> tuple[int, list[str], str]:
    p = subprocess.run(
        ["ssh", "-G", *args],
        capture_output=True,
        text=True,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return p.returncode, p.stdout.splitlines(), p.stderr


def _expand_like_ssh(value: str, tokens: Mapping[str, str], env: Mapping[str, str]) -> str:
    home = pwd.getpwuid(os.getuid()).pw_dir
    if value.startswith("~"):
        slash = value.find("/")
        name = value[1:slash] if slash != -1 else value[1:]
        rest = value[slash:] if slash != -1 else ""
        base = pwd.getpwnam(name).pw_dir if name else home  # KeyError: ssh would exit
        value = base.rstrip("/") + rest if rest else base

    def dollar(m: re.Match[str]) -> str:
        return env[m.group(1)]  # KeyError: ssh would exit

    if "${" in value:
        if re.search(r"\$\{[^}]*$", value):
            raise KeyError("unterminated ${")
        value = re.sub(r"\$\{([^}]*)\}", dollar, value)
    out, i = [], 0
    while i < len(value):
        if value[i] == "%":
            out.append(tokens[value[i + 1]])  # KeyError/IndexError: ssh would exit
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def ssh_identities(
    lines: list[str], host_arg: str, env: Mapping[str, str], *, jump_token: bool = True
) -> list[str]:
    """What ssh would load, in order (its defaults narrowed to the three mpiwait tries)."""
    first: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(" ")
        first.setdefault(key, value)
    raw = [line[len("identityfile ") :] for line in lines if line.startswith("identityfile ")]
    if any(raw == [f"~/.ssh/{n}" for n in names] for names in SSH_DEFAULT_LISTS):
        raw = [v for v in raw if v[len("~/.ssh/") :] in DEFAULT_NAMES]
    this = socket.gethostname()
    entry = pwd.getpwuid(os.getuid())
    hostname, port, user = first["hostname"], first["port"], first["user"]
    tokens = {
        "%": "%",
        "C": hashlib.sha1(f"{this}{hostname}{port}{user}".encode()).hexdigest(),
        "L": this.split(".", 1)[0],
        "d": entry.pw_dir,
        "h": hostname,
        "i": str(os.getuid()),
        **({"j": first.get("proxyjump", "")} if jump_token else {}),  # %j: 9.3 on
        "k": first.get("hostkeyalias") or host_arg,
        "l": this,
        "n": host_arg,
        "p": port,
        "r": user,
        "u": entry.pw_name,
    }
    out: list[str] = []
    for value in raw:
        if value.lower() == "none":
            continue
        path = _expand_like_ssh(value, tokens, env)
        if path not in out:
            out.append(path)
    return out


def compare(
    host: str,
    ssh_args: list[str],
    make_resolver,
    env: Mapping[str, str],
    ssh_g=ssh_g,
    version: tuple[int, int] = (9, 2),
    command: tuple[str, ...] = (),
) -> list[str]:
    """The differences between ssh and mpiwait for one host; [] when they agree. ``ssh_g``
    runs ``ssh -G ARGS HOST COMMAND`` (the installed one, or a release's under chroot)."""
    rc, lines, err = ssh_g([*ssh_args, host, *command], env)
    try:
        got = make_resolver().resolve(host)
        ours_error = None
    except InputError as e:
        got, ours_error = None, e.message
    if rc != 0:
        if ours_error is None:
            return [f"{host}: ssh refuses ({err.strip()[-200:]!r}), mpiwait accepts"]
        # The refusal names the file and line, or (permissions) the file.
        if " line " not in ours_error and "permissions" not in ours_error:
            return [f"{host}: mpiwait's refusal names no line: {ours_error!r}"]
        return []
    try:
        want_ids = ssh_identities(lines, host, env, jump_token=version >= (9, 3))
    except (KeyError, IndexError):
        # ssh -G accepts, but ssh itself would exit when it expands the IdentityFile.
        if ours_error is not None and "IdentityFile" in ours_error:
            return []
        return [f"{host}: ssh cannot expand its IdentityFile, mpiwait says {ours_error!r}"]
    if got is None:
        return [f"{host}: ssh accepts, mpiwait refuses: {ours_error}"]
    want: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(" ")
        want.setdefault(key, value)
    diffs: list[str] = []

    def check(field: str, ours: object, theirs: object) -> None:
        if ours != theirs:
            diffs.append(f"{host}: {field}: mpiwait {ours!r}, ssh {theirs!r}")

    check("hostname", got.address, want["hostname"])
    check("port", str(got.port), want["port"])
    check("user", got.user, want["user"])
    if got.strict_host_key_checking not in _POLICY[want["stricthostkeychecking"]]:
        check("stricthostkeychecking", got.strict_host_key_checking, want["stricthostkeychecking"])
    timeout = want.get("connecttimeout", "none")
    check(
        "connecttimeout",
        got.connect_timeout,
        None if timeout in ("none", "0") else float(timeout),
    )
    known: list[str] = []
    for key in ("userknownhostsfile", "globalknownhostsfile"):
        for f in want.get(key, "").split():
            if f not in ("/dev/null", "none") and f not in known:
                known.append(f)
    check("known hosts files", list(got.known_hosts_files), known)
    check("identity files", list(got.identity_files), want_ids)
    return diffs


def _private_home(home: str, scratch: Path) -> None:
    """Give ``home`` an empty .ssh of its own, keeping everything else in it visible.

    The real home may hold the Python running this script (pyenv), so it cannot simply be
    covered: a tmpfs goes over it and each entry is bind-mounted back, except .ssh.
    """
    real = scratch / "real-home"
    real.mkdir()
    subprocess.run(["mount", "--bind", home, str(real)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "tmpfs", home], check=True)
    for entry in os.listdir(real):
        if entry == ".ssh":
            continue
        src, dst = real / entry, Path(home, entry)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
            continue
        if src.is_dir():
            dst.mkdir()
        else:
            dst.touch()
        subprocess.run(["mount", "--bind", str(src), str(dst)], check=True)
    Path(home, ".ssh").mkdir(mode=0o700)


@dataclass(frozen=True)
class ChrootClient(Client):
    """A release's ssh (testbed.releases) as mpiwait would find it installed: asked under
    chroot, with ``work`` and ``mounts`` as Release.ssh takes them."""

    release: releases.Release | None = None
    work: Path | None = None
    mounts: tuple[tuple[Path, str], ...] = ()

    @classmethod
    def of(
        cls, release: releases.Release, work: Path, mounts: Sequence[tuple[Path, str]] = ()
    ) -> ChrootClient:
        rules = parse_banner(release.version)
        assert rules is not None, release.version
        return cls("/usr/bin/ssh", release.version, rules, release, work, tuple(mounts))

    def ask(self, args: Sequence[str], environ: Mapping[str, str]) -> tuple[bool, str]:
        assert self.release is not None
        ran = self.release.ssh(["-G", *args], work=self.work, mounts=self.mounts, env=environ)
        if ran.returncode != 0:
            return False, first_error(ran.stderr)
        return True, ran.stdout

    def ssh_g(self, args: list[str], env: Mapping[str, str]) -> tuple[int, list[str], str]:
        assert self.release is not None
        ran = self.release.ssh(["-G", *args], work=self.work, mounts=self.mounts, env=env)
        return ran.returncode, ran.stdout.splitlines(), ran.stderr


def run_spec(spec: dict) -> list[str]:
    """Run every case of a spec; only inside a private mount namespace (mounts are made here).
    With ``suite``, the oracle is that release's ssh under chroot, the case's files mounted over
    its /etc/ssh and /root/.ssh (needs the user to be root, whose home is /root in the roots)."""
    diffs: list[str] = []
    home = pwd.getpwuid(os.getuid()).pw_dir
    _private_home(home, Path(spec["scratch"]))
    suite = spec.get("suite")
    release = releases.Release(suite) if suite else None
    for case in spec["cases"]:
        d = Path(case["dir"])
        mounts = [(d / "home" / ".ssh", f"{home}/.ssh"), (d / "etc-ssh", "/etc/ssh")]
        for src, dst in mounts:
            subprocess.run(["mount", "--bind", str(src), dst], check=True)
        try:
            env = {**os.environ, "HOME": home}
            if release is not None:
                env = {"HOME": home, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SHELL": "/bin/sh"}
                client: Client = ChrootClient.of(
                    release, Path(spec["scratch"]), [(src, dst) for src, dst in mounts]
                )
                oracle = client.ssh_g  # type: ignore[attr-defined]
            else:
                client, oracle = find_client(), ssh_g
            for host in case["hosts"]:
                for diff in compare(
                    host,
                    [],
                    lambda env=env, client=client: SSHConfig(
                        local_user=LocalUser.current(env),
                        environ=env,
                        client=client,
                        remote_command="" if release is not None else None,
                    ),
                    env,
                    ssh_g=oracle,
                    version=client.rules.version,
                ):
                    diffs.append(
                        f"{case['name']} (default files{', ' + suite if suite else ''}): {diff}"
                    )
        finally:
            for _, dst in reversed(mounts):
                subprocess.run(["umount", dst], check=True)
    return diffs


if __name__ == "__main__":
    print(json.dumps(run_spec(json.loads(Path(sys.argv[1]).read_text()))))
