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
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mpiwait.errors import InputError
from mpiwait.openssh.config import LocalUser, SSHConfig

DEFAULT_NAMES = ("id_rsa", "id_ecdsa", "id_ed25519")  # the ones mpiwait probes with
SSH_DEFAULT_NAMES = (
    "id_rsa",
    "id_ecdsa",
    "id_ecdsa_sk",
    "id_ed25519",
    "id_ed25519_sk",
    "id_xmss",
    "id_dsa",
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


def ssh_identities(lines: list[str], host_arg: str, env: Mapping[str, str]) -> list[str]:
    """What ssh would load, in order (its defaults narrowed to the three mpiwait tries)."""
    first: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(" ")
        first.setdefault(key, value)
    raw = [line[len("identityfile ") :] for line in lines if line.startswith("identityfile ")]
    if raw == [f"~/.ssh/{n}" for n in SSH_DEFAULT_NAMES]:
        raw = [f"~/.ssh/{n}" for n in DEFAULT_NAMES]
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
        "j": first.get("proxyjump", ""),
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
) -> list[str]:
    """The differences between ssh and mpiwait for one host; [] when they agree."""
    rc, lines, err = ssh_g([*ssh_args, host], env)
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
        want_ids = ssh_identities(lines, host, env)
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


def run_spec(spec: dict) -> list[str]:
    """Run every case of a spec; only inside a private mount namespace (mounts are made here)."""
    diffs: list[str] = []
    home = pwd.getpwuid(os.getuid()).pw_dir
    _private_home(home, Path(spec["scratch"]))
    for case in spec["cases"]:
        d = Path(case["dir"])
        mounts = [(d / "home" / ".ssh", f"{home}/.ssh"), (d / "etc-ssh", "/etc/ssh")]
        for src, dst in mounts:
            subprocess.run(["mount", "--bind", str(src), dst], check=True)
        try:
            env = {**os.environ, "HOME": home}
            for host in case["hosts"]:
                for diff in compare(
                    host,
                    [],
                    lambda env=env: SSHConfig(local_user=LocalUser.current(env), environ=env),
                    env,
                ):
                    diffs.append(f"{case['name']} (default files): {diff}")
        finally:
            for _, dst in reversed(mounts):
                subprocess.run(["umount", dst], check=True)
    return diffs


if __name__ == "__main__":
    print(json.dumps(run_spec(json.loads(Path(sys.argv[1]).read_text()))))
