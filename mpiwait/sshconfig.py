"""SSH settings for one host, resolved the way OpenSSH's ``ssh`` (and so mpirun) resolves them.

mpiwait must probe each worker with the address, port, user, keys and host-key policy that
mpirun's ``ssh`` will use, or "ready" means nothing. paramiko's ``SSHConfig`` does the block
structure, first-value-wins and pattern matching; this module adds what paramiko lacks or does
differently from OpenSSH 9.x:

- ``Include`` (paramiko ignores it), with OpenSSH's scoping: an included file cannot change the
  block state of the file that includes it, and an Include inside a ``Host``/``Match`` block
  applies everything in the included file only to hosts that block matches;
- ``~`` and ``%d``/``%u`` from the passwd entry (ssh ignores ``$HOME``), not from the environment,
  because paramiko's ``getpass.getuser()`` raises for a uid without a passwd entry (OpenShift)
  and its ``~`` follows ``$HOME``;
- OpenSSH's argument syntax (quotes, trailing ``#`` comments) and its validation of every line,
  whichever host it applies to, so that a config ssh would refuse is reported once, up front;
- ``Match exec`` run the way ssh runs it (``$SHELL -c``), without paramiko's ``invoke``.

paramiko is imported only when a config file has something in it: importing it costs ~150 ms and
the worker path never resolves SSH settings.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import re
import shlex
import socket
import stat
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mpiwait.errors import InputError

# OpenSSH's own constants, not tunables of ours.
DEFAULT_PORT = 22
DEFAULT_SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
MAX_INCLUDE_DEPTH = 16  # READCONF_MAX_DEPTH; ssh refuses a config nested deeper
# ssh also tries id_ecdsa_sk, id_ed25519_sk, id_xmss and id_dsa; none of them can log in to a
# worker without hardware or a non-default server setting, so probing with them adds nothing.
DEFAULT_IDENTITY_NAMES = ("id_rsa", "id_ecdsa", "id_ed25519")
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
# Values that mean "no file" in the known-hosts lists.
_NO_FILE = frozenset({"none", "/dev/null"})

# The same keyword/value split paramiko applies, so a line we accept is one it can parse.
_KEYWORD_RE = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")
_TIME_PART_RE = re.compile(r"(\d+)([smhdwSMHDW]?)")
_TIME_RE = re.compile(r"(?:\d+[smhdwSMHDW]?)+")
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

# ask prompts on the terminal; mpirun's ssh has none, so an unknown key fails as with yes.
_HOST_KEY_POLICIES = {
    "yes": "yes",
    "true": "yes",
    "ask": "yes",
    "no": "no",
    "false": "no",
    "off": "no",
    "accept-new": "accept-new",
}

# %-tokens OpenSSH 9.2 accepts in IdentityFile, UserKnownHostsFile and Match exec (its
# DEFAULT_CLIENT_PERCENT_EXPAND_ARGS); an unknown one makes ssh exit, so it is an error here.
_PATH_TOKENS = frozenset("%CdhijkLlnpru")
_HOSTNAME_TOKENS = frozenset("%h")

_MATCH_BARE = frozenset({"all", "canonical", "final"})
_MATCH_WITH_ARG = frozenset(
    {"exec", "host", "originalhost", "user", "localuser", "localnetwork", "tagged"}
)
_MATCH_PATTERN_ARG = frozenset({"host", "originalhost", "user", "localuser", "tagged"})

# Keywords whose values this module reads, normalized at load time (one argument each).
_SINGLE_VALUE = frozenset(
    {"hostname", "port", "user", "identityfile", "stricthostkeychecking", "connecttimeout"}
)
_LIST_VALUE = frozenset({"userknownhostsfile", "globalknownhostsfile"})
# Lists are handed to paramiko joined by NUL, which no path contains, so paths with spaces
# survive the round trip through its line parser.
_LIST_SEP = "\0"

if TYPE_CHECKING:  # aliases for annotations only: `X | Y` cannot be evaluated on Python 3.9
    _Tokens = Mapping[str, str | Callable[[], str]]
    # A Match condition as criteria groups: ("host", "a,b"), ("!exec", "cmd"), ("all",), ...
    _Cond = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class SSHTarget:
    host: str  # the name as listed
    address: str  # HostName after resolution (== host when not set)
    port: int
    user: str
    identity_files: tuple[str, ...]  # expanded paths, in the order ssh tries them
    identities_default: bool  # True unless named by -i: missing ones are skipped, as by ssh
    strict_host_key_checking: str  # "yes" | "no" | "accept-new" | "unset"
    known_hosts_files: tuple[str, ...]  # user files then global files; /dev/null, none dropped
    connect_timeout: float | None  # from ConnectTimeout, None if not set (or 0/none)
    config_files: tuple[str, ...]  # the files that were read


@dataclass(frozen=True)
class LocalUser:
    """The local account as ssh sees it: its passwd entry, not $HOME or $USER."""

    name: str
    home: str
    # False for a uid with no passwd entry (OpenShift's arbitrary uids without nss_wrapper):
    # ssh itself then exits with "No user exists for uid N", so mpirun cannot work either.
    in_passwd: bool = True

    @classmethod
    def current(cls, environ: Mapping[str, str] | None = None) -> LocalUser:
        env = os.environ if environ is None else environ
        uid = os.getuid()
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            name = env.get("USER") or env.get("LOGNAME") or str(uid)
            return cls(name=name, home=env.get("HOME") or "/", in_passwd=False)
        return cls(name=entry.pw_name, home=entry.pw_dir or "/")


class SSHResolver:
    """Reads the ssh config files once; then resolves any number of hosts cheaply."""

    def __init__(
        self,
        *,
        config_path: Path | None = None,
        port: int | None = None,
        user: str | None = None,
        identity_files: tuple[Path, ...] = (),
        local_user: LocalUser | None = None,
        user_config: Path | None = None,
        system_config: Path = DEFAULT_SYSTEM_CONFIG,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._local = local_user if local_user is not None else LocalUser.current(self._environ)
        self._port = port
        self._user = user
        home = self._local.home
        # Checked now so that a bad --identity-file fails before any waiting; ~ is expanded
        # as ssh expands -i (the path may come from a container spec, where no shell did it).
        self._identity_overrides = tuple(
            _expand_tilde_or_fail(_checked_path(str(p), f"identity file {p}"), home, str(p))
            for p in identity_files
        )
        self._default_identities = tuple(
            _join_home(home, f"/.ssh/{name}") for name in DEFAULT_IDENTITY_NAMES
        )
        self._default_user_known_hosts = tuple(
            _join_home(home, p[1:]) for p in DEFAULT_USER_KNOWN_HOSTS
        )
        local_host = socket.gethostname()
        self._local_host = local_host
        self._local_short_host = local_host.split(".", 1)[0]

        loader = _Loader(home=home, system_dir=str(system_config.parent))
        if config_path is not None:
            # ssh -F none: no config files at all.
            if str(config_path) != "none":
                # ssh treats -F's file as a user config (Include relative to ~/.ssh) but does
                # not check its permissions.
                loader.load(config_path, user_scope=True, required=True, check_perms=False)
        else:
            user_path = user_config if user_config is not None else Path(home, ".ssh", "config")
            loader.load(user_path, user_scope=True, required=False, check_perms=True)
            loader.load(system_config, user_scope=False, required=False, check_perms=False)
        self._config_files = tuple(loader.files)
        self._sets_host_key_policy = loader.sets_host_key_policy
        self._paramiko: Any = None
        if any(lines for _, lines in loader.roots):
            self._paramiko = _build_paramiko_config(loader.roots, self._match_context())

    def config_sets_host_key_policy(self) -> bool:
        return self._sets_host_key_policy

    def resolve(self, host: str) -> SSHTarget:
        options: Mapping[str, Any] = (
            self._paramiko.lookup(host) if self._paramiko is not None else {}
        )
        address = options.get("hostname") or host
        port = self._port if self._port is not None else int(options.get("port", DEFAULT_PORT))
        user = self._user if self._user is not None else (options.get("user") or self._local.name)
        # As in ssh, %p and %r in paths see the final port and user, command line included.
        tokens = self._path_tokens(
            original=host,
            hostname=address,
            port=port,
            user=user,
            host_key_alias=options.get("hostkeyalias"),
            proxy_jump=options.get("proxyjump"),
        )

        if self._identity_overrides:
            raw_identities: Iterable[str] = self._identity_overrides
            identities_default = False
        elif options.get("identityfile"):
            raw_identities = options["identityfile"]
            # ssh passes over a config IdentityFile that does not exist, as over its defaults;
            # only a key named on our command line must exist.
            identities_default = True
        else:
            raw_identities = self._default_identities
            identities_default = True
        identities = _unique(
            self._expand_path(value, tokens, host, "IdentityFile")
            for value in raw_identities
            if value.lower() != "none"  # "IdentityFile none": no key files at all
        )

        user_known = options.get("userknownhostsfile")
        user_files = user_known.split(_LIST_SEP) if user_known else self._default_user_known_hosts
        global_known = options.get("globalknownhostsfile")
        # ssh expands neither ~ nor %-tokens in GlobalKnownHostsFile.
        global_files = global_known.split(_LIST_SEP) if global_known else DEFAULT_GLOBAL_KNOWN_HOSTS
        known_hosts = _unique(
            [
                *(
                    self._expand_path(f, tokens, host, "UserKnownHostsFile")
                    for f in user_files
                    if f.lower() not in _NO_FILE
                ),
                *(f for f in global_files if f.lower() not in _NO_FILE),
            ]
        )

        timeout = options.get("connecttimeout")
        # ConnectTimeout 0 and none both leave ssh with the kernel's connect timeout (minutes):
        # report "not set" so the caller applies its own default rather than a zero timeout.
        connect_timeout = float(timeout) if timeout not in (None, "none", "0") else None

        return SSHTarget(
            host=host,
            address=address,
            port=port,
            user=user,
            identity_files=identities,
            identities_default=identities_default,
            strict_host_key_checking=options.get("stricthostkeychecking", "unset"),
            known_hosts_files=known_hosts,
            connect_timeout=connect_timeout,
            config_files=self._config_files,
        )

    def _path_tokens(
        self,
        *,
        original: str,
        hostname: str,
        port: int,
        user: str,
        host_key_alias: str | None,
        proxy_jump: str | None,
    ) -> _Tokens:
        local_host = self._local_host
        return {
            "%": "%",
            # OpenSSH 9.2's %C: SHA-1 of %l%h%p%r; computed only when a path uses it.
            "C": lambda: hashlib.sha1(f"{local_host}{hostname}{port}{user}".encode()).hexdigest(),
            "d": self._local.home,
            "h": hostname,
            "i": str(os.getuid()),
            "j": proxy_jump or "",
            "k": host_key_alias or original,
            "L": self._local_short_host,
            "l": local_host,
            "n": original,
            "p": str(port),
            "r": user,
            "u": self._local.name,
        }

    def _expand_path(self, value: str, tokens: _Tokens, host: str, keyword: str) -> str:
        # ~ was expanded at load time (ssh expands it first); ${VAR} then %-tokens follow.
        try:
            return _percent_expand(_dollar_expand(value, self._environ), tokens)
        except ValueError as e:
            files = ", ".join(self._config_files) or "none"
            raise InputError(
                f"ssh settings for {host}: {keyword} {value!r}: {e} (config files: {files})"
            ) from e

    def _match_context(self) -> _MatchContext:
        return _MatchContext(
            local_user=self._local.name,
            user_override=self._user,
            port_override=self._port,
            environ=self._environ,
            tokens_for=self._path_tokens,
        )


# ---------------------------------------------------------------------------------------------
# Loading: Include expansion, OpenSSH argument syntax, validation


@dataclass(frozen=True)
class _Line:
    text: str  # the line as paramiko gets it
    path: str
    number: int


class _Loader:
    """Turns config files into lines for paramiko, one list per top-level file."""

    def __init__(self, *, home: str, system_dir: str) -> None:
        self.home = home
        self.system_dir = system_dir
        self.roots: list[tuple[str, list[_Line]]] = []
        self.files: list[str] = []
        self.sets_host_key_policy = False

    def load(self, path: Path, *, user_scope: bool, required: bool, check_perms: bool) -> None:
        text = self._read(str(path), check_perms=check_perms, required=required)
        if text is None:
            return
        lines: list[_Line] = []
        self._expand(str(path), text, user_scope=user_scope, cond=None, depth=0, out=lines)
        self.roots.append((str(path), lines))

    def _read(self, path: str, *, check_perms: bool, required: bool) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                if check_perms:
                    _check_perms(path, os.fstat(f.fileno()))
                text = f.read()
        except OSError as e:
            # ssh silently skips a default or included file it cannot open.
            if required:
                raise InputError(f"cannot read ssh config {path}: {e.strerror}") from e
            return None
        if path not in self.files:
            self.files.append(path)
        return text

    def _expand(
        self,
        path: str,
        text: str,
        *,
        user_scope: bool,
        cond: _Cond | None,
        depth: int,
        out: list[_Line],
    ) -> bool:
        """Append the lines of one file; return whether it changed the current block.

        ``cond`` is the condition of the block the file was included from (None: unconditional).
        """
        header: str | None = None  # the current block's header line, None before the first
        block = cond
        changed = False
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"ssh config {path} line {number}"
            m = _KEYWORD_RE.fullmatch(line)
            if m is None:
                raise InputError(f"{where}: cannot parse {line!r}")
            keyword, value = m.group(1).lower(), m.group(2)
            try:
                args = _split_args(value)
            except ValueError as e:
                raise InputError(f"{where}: {m.group(1)}: {e}") from e

            if keyword == "include":
                for target in self._include_targets(args, user_scope, where):
                    if depth + 1 > MAX_INCLUDE_DEPTH:
                        raise InputError(
                            f"{where}: Include nested more than {MAX_INCLUDE_DEPTH} deep "
                            "(does a file include itself?); ssh refuses this config"
                        )
                    included = self._read(target, check_perms=True, required=False)
                    if included is None:
                        continue
                    if self._expand(
                        target,
                        included,
                        user_scope=user_scope,
                        cond=block,
                        depth=depth + 1,
                        out=out,
                    ):
                        # ssh restores the includer's block state after an Include.
                        out.append(_Line(header or _header_for(cond), path, number))
                        changed = True
                continue

            if keyword in ("host", "match"):
                if not args:
                    raise InputError(f"{where}: {m.group(1)} needs an argument")
                own = _host_cond(args) if keyword == "host" else _match_cond(args, where)
                block = _and(cond, own)
                if keyword == "host" and cond is None:
                    header = "Host " + shlex.join(_literal_brackets(a) for a in args)
                else:
                    header = _header_for(block)
                out.append(_Line(header, path, number))
                changed = True
                continue

            out.append(
                _Line(self._value_line(keyword, m.group(1), args, line, where), path, number)
            )
        return changed

    def _include_targets(self, args: list[str], user_scope: bool, where: str) -> Iterator[str]:
        for arg in args:
            if arg.startswith("~"):
                if not user_scope:
                    raise InputError(
                        f"{where}: Include {arg}: ssh allows '~' only in user config files"
                    )
                pattern = _expand_tilde_or_fail(arg, self.home, where)
            elif not os.path.isabs(arg):
                base = _join_home(self.home, "/.ssh") if user_scope else self.system_dir
                pattern = os.path.join(base, arg)
            else:
                pattern = arg
            # glob(3) as ssh uses it sorts; a pattern that matches nothing is skipped.
            yield from sorted(glob.glob(pattern))

    def _value_line(
        self, keyword: str, spelled: str, args: list[str], line: str, where: str
    ) -> str:
        if keyword in _SINGLE_VALUE:
            if len(args) != 1:
                problem = "needs a value" if not args else "takes one value"
                raise InputError(f"{where}: {spelled} {problem}")
            value = self._single_value(keyword, spelled, args[0], where)
            # paramiko strips exactly one pair of surrounding double quotes.
            return f'{keyword} "{value}"'
        if keyword in _LIST_VALUE:
            if not args:
                raise InputError(f"{where}: {spelled} needs a value")
            if len(args) > 1 and any(a.lower() == "none" for a in args):
                raise InputError(f"{where}: {spelled} none must appear alone")
            if keyword == "userknownhostsfile":
                for arg in args:
                    _checked_path(arg, f"{where}: {spelled}")
                args = [_expand_tilde_or_fail(a, self.home, where) for a in args]
            return f'{keyword} "{_LIST_SEP.join(args)}"'
        if keyword == "canonicalizemaxdots" and not (args and args[0].isdigit()):
            # paramiko would raise ValueError from int() in every lookup.
            raise InputError(f"{where}: {spelled} needs a number")
        return line

    def _single_value(self, keyword: str, spelled: str, arg: str, where: str) -> str:
        if keyword == "port":
            return str(_parse_port(arg, f"{where}: {spelled}"))
        if keyword == "connecttimeout":
            seconds = _parse_time(arg, f"{where}: {spelled}")
            return "none" if seconds is None else str(seconds)
        if keyword == "stricthostkeychecking":
            policy = _HOST_KEY_POLICIES.get(arg.lower())
            if policy is None:
                raise InputError(
                    f"{where}: {spelled} {arg!r} is not yes, no, accept-new, ask or off"
                )
            self.sets_host_key_policy = True
            return policy
        if keyword == "hostname":
            _check_tokens(arg, _HOSTNAME_TOKENS, f"{where}: {spelled}")
            return arg
        if keyword == "identityfile":
            _checked_path(arg, f"{where}: {spelled}")
            # ssh expands ~ before any token, so doing it once here is the same.
            return _expand_tilde_or_fail(arg, self.home, where)
        return arg


def _check_perms(path: str, st: os.stat_result) -> None:
    # The check ssh makes for ~/.ssh/config and included files: it exits rather than read a
    # file another user could have written.
    if (st.st_uid not in (0, os.getuid())) or (stat.S_IMODE(st.st_mode) & 0o022):
        raise InputError(
            f"ssh config {path}: bad owner or permissions (ssh refuses a config file that is "
            "writable by group or others or owned by another user)",
            hint=f"chmod go-w {path}",
        )


def _split_args(value: str) -> list[str]:
    """Split a value as OpenSSH's argv_split does (quotes, escapes, '#' starting a word)."""
    args: list[str] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c in " \t":
            i += 1
            continue
        if c == "#":
            break
        arg: list[str] = []
        quote = ""
        while i < n:
            c = value[i]
            if (
                c == "\\"
                and i + 1 < n
                and (value[i + 1] in "'\"\\" or (not quote and value[i + 1] == " "))
            ):
                i += 1
                arg.append(value[i])
            elif not quote and c in " \t":
                break
            elif not quote and c in "'\"":
                quote = c
            elif quote and c == quote:
                quote = ""
            else:
                arg.append(c)
            i += 1
        if quote:
            raise ValueError("unbalanced quotes")
        args.append("".join(arg))
    return args


def _parse_port(arg: str, what: str) -> int:
    if arg.isdigit():
        port = int(arg)
        if 1 <= port <= 65535:
            return port
    else:
        # ssh accepts a service name from /etc/services, as its a2port does.
        try:
            return socket.getservbyname(arg, "tcp")
        except OSError:
            pass
    raise InputError(f"{what} {arg!r} is not a port (1-65535)")


def _parse_time(arg: str, what: str) -> int | None:
    """OpenSSH's time format: 30, 30s, 1m30s, ...; 'none' for no timeout."""
    if arg.lower() == "none":
        return None
    if not _TIME_RE.fullmatch(arg):
        raise InputError(f"{what} {arg!r} is not a time in seconds (e.g. 10, 1m30s, none)")
    return sum(int(n) * _TIME_UNITS[u.lower()] for n, u in _TIME_PART_RE.findall(arg))


def _host_cond(patterns: list[str]) -> _Cond:
    return (("originalhost", ",".join(_literal_brackets(p) for p in patterns)),)


def _match_cond(args: list[str], where: str) -> _Cond:
    groups: list[tuple[str, ...]] = []
    tokens = list(args)
    while tokens:
        token = tokens.pop(0)
        negate = "!" if token.startswith("!") else ""
        # ssh compares criteria case-insensitively; paramiko would treat "Host" as unknown,
        # and an unknown criterion as matching.
        kind = token[len(negate) :].lower()
        if kind in _MATCH_BARE:
            groups.append((negate + kind,))
        elif kind in _MATCH_WITH_ARG:
            if not tokens:
                raise InputError(f"{where}: Match {kind} needs an argument")
            param = tokens.pop(0)
            if kind in _MATCH_PATTERN_ARG:
                param = _literal_brackets(param)
            elif kind == "exec":
                _check_tokens(param, _PATH_TOKENS, f"{where}: Match exec")
            groups.append((negate + kind, param))
        else:
            raise InputError(f"{where}: unsupported Match attribute {token!r}")
    return tuple(groups)


def _and(outer: _Cond | None, inner: _Cond) -> _Cond:
    if outer is None:
        return inner
    # "all" may not be combined with other criteria, and adds nothing to them.
    groups = tuple(g for g in (*outer, *inner) if g != ("all",))
    return groups or (("all",),)


def _header_for(cond: _Cond | None) -> str:
    if cond is None:
        return "Host *"
    return "Match " + shlex.join(token for group in cond for token in group)


def _literal_brackets(pattern: str) -> str:
    # OpenSSH patterns know only * and ?; fnmatch would read [..] as a character class.
    return pattern.replace("[", "[[]")


def _join_home(home: str, rest: str) -> str:
    return home.rstrip("/") + rest if rest else home


def _expand_tilde(path: str, home: str) -> str:
    """~ and ~user/ as ssh's tilde_expand_filename: from passwd, never from $HOME."""
    if not path.startswith("~"):
        return path
    slash = path.find("/")
    name, rest = (path[1:], "") if slash == -1 else (path[1:slash], path[slash:])
    if name:
        try:
            home = pwd.getpwnam(name).pw_dir
        except KeyError:
            raise ValueError(f"no such user {name!r}") from None
    return _join_home(home, rest)


def _expand_tilde_or_fail(path: str, home: str, where: str) -> str:
    try:
        return _expand_tilde(path, home)
    except ValueError as e:
        raise InputError(f"{where}: {path}: {e}") from e


def _checked_path(value: str, what: str) -> str:
    """Reject at load time what would make ssh exit when it expands the path."""
    try:
        without_vars = _dollar_expand(value, None)
    except ValueError as e:
        raise InputError(f"{what} {value!r}: {e}") from e
    _check_tokens(without_vars, _PATH_TOKENS, f"{what} {value!r}")
    return value


def _check_tokens(value: str, allowed: frozenset[str], what: str) -> None:
    try:
        _percent_expand(value, dict.fromkeys(allowed, ""))
    except ValueError as e:
        raise InputError(f"{what}: {e}") from e


def _dollar_expand(value: str, environ: Mapping[str, str] | None) -> str:
    """${VAR} as ssh expands it; with environ None, only check the syntax."""
    out: list[str] = []
    i = 0
    while True:
        start = value.find("${", i)
        if start == -1:
            out.append(value[i:])
            return "".join(out)
        end = value.find("}", start + 2)
        if end == -1:
            raise ValueError("'${' without a closing '}'")
        name = value[start + 2 : end]
        out.append(value[i:start])
        if environ is not None:
            if name not in environ:
                raise ValueError(f"environment variable {name} is not set")
            out.append(environ[name])
        i = end + 1


def _percent_expand(value: str, tokens: _Tokens) -> str:
    if "%" not in value:
        return value
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            raise ValueError("'%' at the end")
        key = value[i + 1]
        if key not in tokens:
            raise ValueError(f"unknown token %{key}")
        replacement = tokens[key]
        out.append(replacement if isinstance(replacement, str) else replacement())
        i += 2
    return "".join(out)


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    # ssh ignores a repeated identity file; order is the order it tries them.
    return tuple(dict.fromkeys(values))


# ---------------------------------------------------------------------------------------------
# paramiko


@dataclass(frozen=True)
class _MatchContext:
    local_user: str
    # ssh reads -l and -p before its config files, so Match user, %r and %p already see them.
    user_override: str | None
    port_override: int | None
    environ: Mapping[str, str]
    tokens_for: Callable[..., _Tokens]


def _build_paramiko_config(roots: list[tuple[str, list[_Line]]], ctx: _MatchContext) -> Any:
    import paramiko

    config = _paramiko_config_class()(ctx)
    for root, lines in roots:
        # One parse() per top-level file: each starts a fresh implicit "Host *" block, as each
        # file does in ssh.
        current: list[_Line | None] = [None]

        def feed(
            lines: list[_Line] = lines, current: list[_Line | None] = current
        ) -> Iterator[str]:
            for line in lines:
                current[0] = line
                yield line.text

        try:
            config.parse(feed())
        except (paramiko.ssh_exception.ConfigParseError, ValueError) as e:
            last = current[0]
            where = f"ssh config {last.path} line {last.number}" if last else f"ssh config {root}"
            raise InputError(f"{where}: {e}") from e
    # Without CanonicalDomains paramiko raises KeyError whenever CanonicalizeHostname applies;
    # ssh simply has no domain to try. A last, empty value makes "none" the fallback.
    config.parse(iter(['CanonicalDomains ""']))
    return config


def _paramiko_config_class() -> type:
    """An SSHConfig that matches and expands from our LocalUser, never getpass or $HOME."""
    import paramiko
    from paramiko.ssh_exception import CouldNotCanonicalize

    class _SSHConfig(paramiko.SSHConfig):  # type: ignore[misc]
        def __init__(self, ctx: _MatchContext) -> None:
            super().__init__()
            self._mpiwait_ctx = ctx

        def _expand_variables(self, config: Any, target_hostname: str) -> Any:
            # Only HostName's %h here; paths are expanded by the resolver after our overrides
            # apply (ssh expands %p and %r with the command line's port and user).
            hostname = config.get("hostname")
            if hostname is not None:
                config["hostname"] = _percent_expand(hostname, {"%": "%", "h": target_hostname})
            return config

        def canonicalize(self, hostname: str, options: Any, domains: list[str]) -> str:
            try:
                return str(super().canonicalize(hostname, options, domains))
            except CouldNotCanonicalize:
                # The name may just not be in DNS yet (mpiwait waits for exactly that); ssh
                # will canonicalize for itself when it runs.
                return hostname

        # paramiko 3.3 inserted a `final` parameter before `options`; accept both layouts.
        def _does_match(
            self,
            match_list: list[dict[str, Any]],
            target_hostname: str,
            canonical: bool,
            *rest: Any,
        ) -> bool:
            options = rest[-1]
            final = bool(rest[0]) if len(rest) > 1 else False
            if not match_list:
                return False
            ctx = self._mpiwait_ctx
            for candidate in match_list:
                kind, param = candidate["type"], candidate["param"]
                hostname = options.get("hostname")
                if hostname is not None:
                    hostname = _percent_expand(hostname, {"%": "%", "h": target_hostname})
                user = ctx.user_override or options.get("user") or ctx.local_user
                if kind == "all":
                    passed = True
                elif kind == "canonical":
                    passed = canonical
                elif kind == "final":
                    passed = final
                elif kind == "host":
                    passed = self._pattern_matches(param, hostname or target_hostname)
                elif kind == "originalhost":
                    passed = self._pattern_matches(param, target_hostname)
                elif kind == "user":
                    passed = self._pattern_matches(param, user)
                elif kind == "localuser":
                    passed = self._pattern_matches(param, ctx.local_user)
                elif kind == "tagged":
                    passed = self._pattern_matches(param, options.get("tag", ""))
                elif kind == "exec":
                    tokens = ctx.tokens_for(
                        original=target_hostname,
                        hostname=hostname or target_hostname,
                        port=ctx.port_override or int(options.get("port", DEFAULT_PORT)),
                        user=user,
                        host_key_alias=options.get("hostkeyalias"),
                        proxy_jump=options.get("proxyjump"),
                    )
                    passed = _run_match_exec(_percent_expand(param, tokens), ctx.environ)
                else:
                    # localnetwork needs the local interface list, which the standard library
                    # does not give; not matching is the conservative reading.
                    passed = False
                if passed == candidate["negate"]:
                    return False
            return True

    return _SSHConfig


def _run_match_exec(command: str, environ: Mapping[str, str]) -> bool:
    # As ssh does: the user's shell, stdin and stdout on /dev/null, stderr left alone.
    shell = environ.get("SHELL") or "/bin/sh"
    try:
        result = subprocess.run(
            [shell, "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=dict(environ),
            check=False,
        )
    except OSError:
        return False
    return result.returncode == 0
