"""ssh_config evaluated for one destination in the order OpenSSH's ssh does (readconf.c, ssh.c),
by the rules of the installed ssh's release (``Rules``, client.py).

Files are read top to bottom and an option's first value wins; Host and Match blocks are judged
with the values known at that line; an Include is read even in a block that does not apply;
``Match final`` or CanonicalizeHostname ask for a second, final pass with the lowercased
HostName; an unknown keyword is an error unless IgnoreUnknown covers it. No DNS lookups here.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import ipaddress
import itertools
import os
import re
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from mpiwait.errors import InputError
from mpiwait.openssh.client import NEWEST_RULES, Rules
from mpiwait.openssh.keywords import FIRST_VALUE, parse_port, parse_time
from mpiwait.openssh.syntax import KEYWORDS, Line, read_lines

MAX_INCLUDE_DEPTH = 16  # READCONF_MAX_DEPTH

# Options whose first value this module keeps (one argument each): from the keyword table.
_SCALARS = FIRST_VALUE
_MATCH_WITH_ARG = frozenset(
    {"host", "originalhost", "user", "localuser", "exec"}
    | {"localnetwork", "tagged", "version", "sessiontype", "command"}
)
# Criteria whose argument may be empty (an empty tag, no command).
_MATCH_EMPTY_OK = frozenset({"tagged", "command"})
# What ``Match command`` sees of mpirun's remote command: not empty, and no text a pattern could
# name (a NUL cannot be in one), so only patterns every command matches (``*``, ``?*``) hold.
UNKNOWN_COMMAND = "\0"
# %-tokens of Match exec (%j from 9.3).
_EXEC_TOKENS = frozenset("%CdhiklLnpru")


@dataclass
class Options:
    """What the passes collected: first values, with the line that set each one."""

    scalars: dict[str, str] = field(default_factory=dict)
    where: dict[str, Line] = field(default_factory=dict)
    # (path as written, from a user config file) in the order ssh adds them, and their lines
    identity_files: list[tuple[str, bool]] = field(default_factory=list)
    identity_lines: list[Line] = field(default_factory=list)
    certificate_files: list[Line] = field(default_factory=list)
    user_known_hosts: list[str] | None = None
    global_known_hosts: list[str] | None = None
    proxy_command: str | None = None
    proxy_jump: str | None = None


@dataclass(frozen=True, slots=True)
class Root:
    """A top-level file and how ssh reads it."""

    path: str
    user_scope: bool  # Include relative to ~/.ssh, ~ allowed, IdentityFile "user provided"
    check_perms: bool
    required: bool


@dataclass(frozen=True, slots=True)
class Local:
    """What Match and tokens need to know about this side of the connection."""

    name: str
    home: str  # from passwd, for ~ in paths and %d
    glob_home: str  # $HOME as glob(3) GLOB_TILDE uses it, for ~ in Include
    uid: int
    host: str
    environ: Mapping[str, str]


@dataclass
class _Pass:
    host: str  # what Host patterns and "Match host" see
    original: str  # the name as given
    final: bool
    # The read at load time, for no host: values are checked per host later, and Include names
    # that depend on the host are not known.
    load: bool = False
    want_final: bool = False


class Evaluator:
    """Reads files once (lazily, cached); evaluates any number of destinations."""

    def __init__(
        self,
        roots: tuple[Root, ...],
        local: Local,
        system_dir: str,
        *,
        rules: Rules = NEWEST_RULES,
        tolerant: bool = False,
        remote_command: str | None = None,
    ) -> None:
        self._roots = roots
        self._local = local
        self._system_dir = system_dir
        self.rules = rules
        # tolerant: ssh -G accepted these files; lines only another release accepts are skipped
        self._tolerant = tolerant
        # Match command / sessiontype see the command ssh runs; None: mpirun's (orted, prted,
        # hydra_pmi_proxy, ...), never empty, its text not known here: "exec", UNKNOWN_COMMAND.
        self._remote_command = remote_command
        self._files: dict[tuple[str, bool], tuple[Line, ...] | None] = {}
        self._globs: dict[str, tuple[str, ...]] = {}
        self.files_read: list[str] = []
        self.sets_host_key_policy = False
        # Read everything once now, as ssh would for any host: a bad line anywhere fails here.
        self._run_pass(_Pass(host="", original="", final=False, load=True), Options())
        if not tolerant:
            self._refuse_unknown_keywords()

    def evaluate(self, host_arg: str, *, user: str | None, port: int | None) -> tuple[Options, str]:
        """The options for ``host_arg`` and the (lowercased) host name ssh connects to."""
        opts = Options()
        # ssh applies -l and -p before reading its config: Match user and %r see them.
        if user is not None:
            opts.scalars["user"] = user
        if port is not None:
            opts.scalars["port"] = str(port)
        first = _Pass(host=host_arg, original=host_arg, final=False)
        self._run_pass(first, opts)
        host = host_arg
        if "hostname" in opts.scalars:
            host = expand_hostname(opts.scalars["hostname"], host_arg, opts.where["hostname"])
        was_addr = _is_addr(host)
        if not was_addr:
            host = ascii_lower(host)
        # Canonicalizing a name needs DNS, which the workers may not have yet, and ssh falls
        # back to the name as given; an address becomes numeric (10.0.0.05 -> 10.0.0.5).
        canon = ascii_lower(opts.scalars.get("canonicalizehostname", "no"))
        if was_addr or canon not in ("no", "false"):
            host = _numeric_address(host) or host
        if first.want_final or canon not in ("no", "false"):
            opts.scalars["hostname"] = host
            self._run_pass(_Pass(host=host, original=host_arg, final=True), opts)
        return opts, host

    def _refuse_unknown_keywords(self) -> None:
        # Without any IgnoreUnknown, an unknown keyword fails ssh for every host: say so now.
        lines = [line for f in self._files.values() if f for line in f]
        if any(line.keyword == "ignoreunknown" for line in lines):
            return  # judged per host, with the IgnoreUnknown that applies there
        for line in lines:
            if line.keyword not in KEYWORDS:
                self._option(line, Options(), False, False, check=True)

    # -- reading ------------------------------------------------------------------------------

    def _lines(self, path: str, *, check_perms: bool) -> tuple[Line, ...] | None:
        key = (path, check_perms)
        if key not in self._files:
            lines = read_lines(
                path,
                check_perms=check_perms,
                legacy=self.rules.legacy_split,
                tolerant=self._tolerant,
            )
            self._files[key] = lines
            if lines is not None and path not in self.files_read:
                self.files_read.append(path)
                if any(line.keyword == "stricthostkeychecking" for line in lines):
                    self.sets_host_key_policy = True
        return self._files[key]

    def _glob(self, pattern: str) -> tuple[str, ...]:
        found = self._globs.get(pattern)
        if found is None:
            # glob(3) sorts; a pattern that matches nothing is skipped.
            found = tuple(sorted(glob.glob(pattern)))
            self._globs[pattern] = found
        return found

    # -- the passes ----------------------------------------------------------------------------

    def _run_pass(self, p: _Pass, opts: Options) -> None:
        for root in self._roots:
            lines = self._lines(root.path, check_perms=root.check_perms)
            if lines is None:
                if root.required:
                    raise InputError(f"cannot read ssh config {root.path}")
                continue
            self._run_file(lines, root.user_scope, p, opts, depth=0, never=p.load)

    def _run_file(
        self,
        lines: tuple[Line, ...],
        user_scope: bool,
        p: _Pass,
        opts: Options,
        *,
        depth: int,
        never: bool,
    ) -> None:
        """One file's lines; ``never``: none applies (an Include in a block that does not, or
        the load-time read). A file starts active; an included one cannot change the block
        state of the file that includes it (ssh restores it)."""
        active = not never
        for line in lines:
            kw = line.keyword
            if kw == "host":
                # case-sensitive, with the name as given (final pass: the lowercased HostName)
                active = not never and _host_matches(p.host, line.args)
            elif kw == "match":
                matched = self._match(line, p, opts, execute=not never)
                active = not never and matched
            elif kw == "include":
                self._include(line, user_scope, p, opts, depth=depth, never=not active)
            else:
                self._option(line, opts, active, user_scope, check=not p.load)

    def _include(
        self, line: Line, user_scope: bool, p: _Pass, opts: Options, *, depth: int, never: bool
    ) -> None:
        for arg in line.args:
            if self.rules.expands_include and ("%" in arg or "${" in arg):
                if p.load:
                    continue  # the names depend on the host
                try:
                    arg = self._include_path(arg, p, opts)
                except ValueError:
                    continue  # ssh: "Unable to expand user config file", and reads on
            if arg.startswith("~") and not user_scope:
                raise InputError(f"{line.where}: bad include path {arg}")
            if not os.path.isabs(arg) and not arg.startswith("~"):
                arg = ("~/.ssh/" if user_scope else self._system_dir + "/") + arg
            pattern = _glob_tilde(arg, self._local.glob_home)
            for path in self._glob(pattern):
                if depth + 1 > MAX_INCLUDE_DEPTH:
                    raise InputError(
                        f"{line.where}: Include nested more than {MAX_INCLUDE_DEPTH} deep "
                        "(ssh: Too many recursive configuration includes)"
                    )
                lines = self._lines(path, check_perms=True)
                if lines is None:
                    if not os.path.exists(path):
                        continue  # a dangling link: ssh skips it (ENOENT)
                    raise InputError(f"{line.where}: cannot read included file {path}")
                self._run_file(lines, user_scope, p, opts, depth=depth + 1, never=never)

    def _include_path(self, arg: str, p: _Pass, opts: Options) -> str:
        """expand_match_exec_or_include_path: ${VAR} and %-tokens for this pass's host."""
        tokens = self._pass_tokens(p, opts, _match_host(p, opts))
        return percent_expand(dollar_expand(arg, self._local.environ), tokens)

    def _pass_tokens(
        self, p: _Pass, opts: Options, host: str
    ) -> dict[str, str | Callable[[], str]]:
        scalars = opts.scalars
        tokens = connection_tokens(
            self._local,
            host=host,
            original=p.original,
            port=int(scalars["port"]) if "port" in scalars else 22,
            user=scalars.get("user") or self._local.name,
            host_key_alias=scalars.get("hostkeyalias") or host,
        )
        if self.rules.jump_token:
            tokens["j"] = opts.proxy_jump if opts.proxy_jump not in (None, "none") else ""
        return tokens

    def _option(
        self, line: Line, opts: Options, active: bool, user_scope: bool, *, check: bool
    ) -> None:
        kw = line.keyword
        if kw not in KEYWORDS:
            if not check or self._tolerant:
                return  # the load-time read (IgnoreUnknown depends on the host), or ssh -G
                # accepted a keyword this table does not know
            ignored = opts.scalars.get("ignoreunknown")
            if ignored is None or match_pattern_list(kw, ignored, lower=True) != 1:
                raise InputError(
                    f"{line.where}: Bad configuration option: {line.spelled} (ssh refuses an "
                    "unknown keyword unless IgnoreUnknown names it)"
                )
            return
        if not active:
            return
        if kw == "setuptimeout":
            # Debian's alias: of ServerAliveInterval (unused here) before 10.0.
            if not self.rules.setup_timeout_is_connect_timeout:
                return
            kw = "connecttimeout"
        if kw in _SCALARS:
            if kw not in opts.scalars:
                value = line.args[0]
                if kw == "port":
                    value = str(parse_port(value))  # a service name becomes its number
                opts.scalars[kw] = value
                opts.where[kw] = line
        elif kw in ("identityfile", "identityfile2"):
            entry = (line.args[0], user_scope)
            # add_identity_file: a path already added from the same kind of file is dropped.
            if entry not in opts.identity_files:
                opts.identity_files.append(entry)
                opts.identity_lines.append(line)
        elif kw == "certificatefile":
            opts.certificate_files.append(line)
        elif kw == "userknownhostsfile":
            if opts.user_known_hosts is None:
                opts.user_known_hosts = list(line.args)
                opts.where[kw] = line
        elif kw == "globalknownhostsfile":
            if opts.global_known_hosts is None:
                opts.global_known_hosts = list(line.args)
        elif kw == "proxyjump":
            if opts.proxy_jump is None:
                opts.proxy_jump = line.rest.lstrip(" \t=")
                opts.where[kw] = line
        # ssh ignores ProxyCommand once ProxyJump is set.
        elif kw == "proxycommand" and opts.proxy_command is None and opts.proxy_jump is None:
            opts.proxy_command = line.rest.lstrip(" \t=")
            opts.where[kw] = line

    # -- Match ---------------------------------------------------------------------------------

    def _match(self, line: Line, p: _Pass, opts: Options, *, execute: bool) -> bool:
        """match_cfg_line: criteria ANDed, judged with the values set so far."""
        host = _match_host(p, opts)
        args = list(line.args)
        result = True
        attributes = 0
        while args:
            attrib = args.pop(0)
            negate = attrib.startswith("!")
            name = ascii_lower(attrib[1:] if negate else attrib)
            if name == "all":
                if attributes > 1 or args:
                    raise InputError(
                        f"{line.where}: '{attrib}' cannot be combined with other Match attributes"
                    )
                return (not negate) and result
            attributes += 1
            if name in ("canonical", "final"):
                if name == "final" and (not negate or self.rules.not_final_asks_final):
                    p.want_final = True
                if p.final == negate:
                    result = False
                continue
            if name not in _MATCH_WITH_ARG:
                raise InputError(f"{line.where}: Unsupported Match attribute {attrib}")
            if not args or (args[0] == "" and name not in _MATCH_EMPTY_OK):
                raise InputError(f"{line.where}: Match {attrib} needs an argument")
            arg = args.pop(0)
            if name == "exec":
                command = self._exec_command(arg, line, p, opts, host)
                if not result or not execute:
                    continue  # ssh skips the command once an earlier criterion failed
                matched = run_match_exec(command, self._local.environ, line)
            else:
                try:
                    matched = self._criterion(name, arg, p, opts, host)
                except InputError as e:
                    raise InputError(f"{line.where}: {e.message}") from None
            if matched == negate:
                result = False
        if attributes == 0:
            raise InputError(f"{line.where}: One or more attributes required for Match")
        return result

    def _criterion(self, name: str, arg: str, p: _Pass, opts: Options, host: str) -> bool:
        if name == "host":
            return match_pattern_list(ascii_lower(host), arg, lower=True) == 1
        if name == "originalhost":
            return match_pattern_list(ascii_lower(p.original), arg, lower=True) == 1
        if name == "user":
            user = opts.scalars.get("user") or self._local.name
            return match_pattern_list(user, arg, lower=False) == 1
        if name == "localuser":
            return match_pattern_list(self._local.name, arg, lower=False) == 1
        if name == "localnetwork":
            return local_network_matches(arg)
        if name == "version":
            return match_pattern_list(self.rules.release, arg, lower=False) == 1
        if name == "sessiontype":
            return match_pattern_list(self._session_type(opts), arg, lower=False) == 1
        # tagged, command: an empty value matches only an empty pattern
        if name == "tagged":
            value = opts.scalars.get("tag", "")
        else:
            value = UNKNOWN_COMMAND if self._remote_command is None else self._remote_command
        if value == "":
            return arg == ""
        return match_pattern_list(value, arg, lower=False) == 1

    def _session_type(self, opts: Options) -> str:
        kind = ascii_lower(opts.scalars.get("sessiontype", "default"))
        if kind in ("subsystem", "none"):
            return kind
        return "exec" if self._remote_command is None or self._remote_command else "shell"

    def _exec_command(self, arg: str, line: Line, p: _Pass, opts: Options, host: str) -> str:
        # Expanded even when it will not run: an unknown token makes ssh exit either way.
        tokens = self._pass_tokens(p, opts, host)
        allowed = _EXEC_TOKENS | ({"j"} if self.rules.jump_token else set())
        try:
            return percent_expand(arg, tokens, allowed=frozenset(allowed))
        except ValueError as e:
            raise InputError(f"{line.where}: Match exec {arg!r}: {e}") from e


def _match_host(p: _Pass, opts: Options) -> str:
    """The host name a Match sees: HostName so far (with %h), else the name as given."""
    if p.final:
        return opts.scalars.get("hostname", p.host)
    if "hostname" in opts.scalars:
        return expand_hostname(opts.scalars["hostname"], p.original, opts.where["hostname"])
    return p.original


def expand_hostname(value: str, host: str, line: Line) -> str:
    try:
        return percent_expand(value, {"%": "%", "h": host})
    except ValueError as e:
        raise InputError(f"{line.where}: HostName {value!r}: {e}") from e


# %-token -> its value, or a function computing it when first used.
Tokens = dict[str, str | Callable[[], str]]


def connection_tokens(
    local: Local, *, host: str, original: str, port: int, user: str, host_key_alias: str
) -> Tokens:
    """ssh's %-tokens for one connection (DEFAULT_CLIENT_PERCENT_EXPAND_ARGS)."""
    this_host = local.host
    return {
        "%": "%",
        # SHA-1 of %l%h%p%r; computed only when a value uses it.
        "C": lambda: hashlib.sha1(f"{this_host}{host}{port}{user}".encode()).hexdigest(),
        "L": this_host.split(".", 1)[0],
        "d": local.home,
        "h": host,
        "i": str(local.uid),
        "k": host_key_alias,
        "l": this_host,
        "n": original,
        "p": str(port),
        "r": user,
        "u": local.name,
    }


def dollar_expand(value: str, environ: Mapping[str, str] | None) -> str:
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


def local_network_matches(cidrs: str) -> bool:
    """Match localnetwork: does an address of this machine's interfaces lie in one of the
    comma-separated networks (addr_match_cidr_list, check_match_ifaddrs)?"""
    networks = []
    for item in cidrs.split(","):
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise InputError(f"Match localnetwork: {item!r} is not an address/prefix") from None
    return any(
        addr in net for addr in local_addresses() for net in networks if addr.version == net.version
    )


def local_addresses() -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """This network namespace's interface addresses (getifaddrs), from /proc."""
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    with contextlib.suppress(OSError):
        # fib_trie lists each local IPv4 address as a "/32 host LOCAL" leaf under it.
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for previous, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line:
                found.append(ipaddress.IPv4Address(previous.split()[-1]))
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            found.append(ipaddress.IPv6Address(int(line.split()[0], 16)))
    return list(dict.fromkeys(found))


def percent_expand(value: str, tokens: Tokens, allowed: frozenset[str] | None = None) -> str:
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
        if key not in tokens or (allowed is not None and key not in allowed):
            raise ValueError(f"unknown token %{key}")
        replacement = tokens[key]
        out.append(replacement if isinstance(replacement, str) else replacement())
        i += 2
    return "".join(out)


def run_match_exec(command: str, environ: Mapping[str, str], line: Line) -> bool:
    # As ssh: $SHELL (or /bin/sh) -c, stdin and stdout on /dev/null, stderr left alone; a
    # shell that cannot run makes ssh exit, so it is an error here too.
    shell = environ.get("SHELL") or "/bin/sh"
    if not os.access(shell, os.X_OK):
        raise InputError(f'{line.where}: Match exec: shell "{shell}" is not executable')
    try:
        result = subprocess.run(
            [shell, "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=dict(environ),
            check=False,
        )
    except OSError as e:
        raise InputError(f"{line.where}: match exec {command!r} error ({e})") from e
    return result.returncode == 0


# -- patterns (match.c) ----------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _pattern_re(pattern: str) -> re.Pattern[str]:
    # OpenSSH patterns know only * and ?; everything else is literal.
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
        re.DOTALL,
    )


def match_pattern(string: str, pattern: str) -> bool:
    return _pattern_re(pattern).fullmatch(string) is not None


def match_pattern_list(string: str, patterns: str, *, lower: bool) -> int:
    """1 for a match, 0 for none, -1 for a negated match (match_pattern_list)."""
    got_positive = 0
    for sub in patterns.split(","):
        negated = sub.startswith("!")
        if negated:
            sub = sub[1:]
        if lower:
            sub = ascii_lower(sub)
        if match_pattern(string, sub):
            if negated:
                return -1
            got_positive = 1
    return got_positive


def _host_matches(host: str, args: tuple[str, ...]) -> bool:
    matched = False
    for arg in args:
        negated = arg.startswith("!")
        if match_pattern(host, arg[1:] if negated else arg):
            if negated:
                return False
            matched = True
    return matched


def _glob_tilde(pattern: str, home: str) -> str:
    # glob(3) with GLOB_TILDE: "~" is $HOME (not passwd), "~user" is that user's home.
    if not pattern.startswith("~"):
        return pattern
    slash = pattern.find("/")
    name, rest = (pattern[1:], "") if slash == -1 else (pattern[1:slash], pattern[slash:])
    if not name:
        return home.rstrip("/") + rest if rest else home
    expanded = os.path.expanduser("~" + name)
    return expanded + rest if not expanded.startswith("~") else pattern


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(s: str) -> str:
    """C's tolower() in the C locale ssh runs in: ASCII letters only."""
    return s.translate(_ASCII_LOWER)


def _numeric_address(name: str) -> str | None:
    """ssh.c's resolve_addr: the numeric form of a literal address, None for a name."""
    try:
        infos = socket.getaddrinfo(
            name, 22, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        )
    except (OSError, UnicodeError):
        return None
    if len(infos) != 1:
        return None
    try:
        address, _ = socket.getnameinfo(infos[0][4], socket.NI_NUMERICHOST)
    except OSError:
        return None
    return address


def _is_addr(name: str) -> bool:
    """ssh.c's is_addr: a name that can only be an address is not lowercased."""
    if "%" in name or ":" in name or not name.strip("0123456789."):
        return True
    try:
        socket.inet_aton(name)  # what getaddrinfo(AI_NUMERICHOST) takes: 0x7f.1, 127.1, ...
        return True
    except (OSError, UnicodeError):  # a byte that is not UTF-8 (surrogate) is no address either
        return False


__all__ = [
    "Evaluator",
    "Local",
    "Options",
    "Root",
    "connection_tokens",
    "match_pattern_list",
    "parse_port",
    "parse_time",
    "percent_expand",
]
