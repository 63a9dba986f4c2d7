"""SSH settings for one host, resolved the way the installed ``ssh`` (and so mpirun) does.

mpiwait must probe each worker with the address, port, user, keys and host-key policy that
mpirun's ``ssh`` will use, or "ready" means nothing. syntax.py reads and checks the files and
evaluate.py evaluates them per host; this module makes an ``SSHTarget`` of the result (tokens,
``~`` and defaults as ssh has them) and refuses by name what mpiwait cannot follow. Where ssh
is installed, its ``ssh -G`` decides whether a config is accepted. It must not import paramiko.
"""

from __future__ import annotations

import os
import pwd
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mpiwait.errors import InputError
from mpiwait.openssh.client import NEWEST_RULES, Client
from mpiwait.openssh.evaluate import (
    Evaluator,
    Local,
    Options,
    Root,
    Tokens,
    ascii_lower,
    connection_tokens,
    dollar_expand,
    percent_expand,
)
from mpiwait.openssh.keywords import parse_time
from mpiwait.openssh.localuser import LocalUser

DEFAULT_PORT = 22
DEFAULT_SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
# The names of the newest rules (client.Rules.default_identity_names: by release).
DEFAULT_IDENTITY_NAMES = NEWEST_RULES.default_identity_names
NO_CLIENT = Client(None, "", NEWEST_RULES)
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
# %-tokens ssh 9.2 expands in IdentityFile and UserKnownHostsFile.
_PATH_TOKENS = frozenset("%CdhijkLlnpru")
# Values that mean "no file" in the known-hosts lists.
_NO_FILE = frozenset({"none", "/dev/null"})
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


@dataclass(frozen=True, slots=True)
class SSHTarget:
    host: str  # the name as listed
    address: str  # HostName (%h expanded), else host; lowercased as ssh does unless an address
    port: int
    user: str
    identity_files: tuple[str, ...]  # expanded paths, in the order ssh tries them
    identities_default: bool  # True unless named by -i: missing ones are skipped, as by ssh
    strict_host_key_checking: str  # "yes" | "no" | "accept-new" | "unset"
    known_hosts_files: tuple[str, ...]  # user files then global files; /dev/null, none dropped
    connect_timeout: float | None  # from ConnectTimeout, None if not set (or 0/none)
    config_files: tuple[str, ...]  # the files that were read
    host_key_alias: str | None = None  # HostKeyAlias, lowercased as ssh does
    # What ssh would also offer and mpiwait does not (an agent, certificates), for a note.
    offered_by_ssh_only: tuple[str, ...] = ()

    @property
    def known_hosts_address(self) -> tuple[str, int]:
        """Where ssh looks the host key up: HostKeyAlias as written, else [address]:port."""
        if self.host_key_alias:
            return self.host_key_alias, 22  # port 22: no [..]:port form
        return self.address, self.port


def _config_roots(
    config_path: Path | None, user_config: Path | None, system_config: Path, home: str
) -> tuple[Root, ...]:
    """The files ssh starts reading from: -F's alone, else the user's (default
    ``~/.ssh/config``) then the system's."""
    if config_path is None:
        user_path = user_config if user_config is not None else Path(home, ".ssh", "config")
        return (
            Root(str(user_path), user_scope=True, check_perms=True, required=False),
            Root(str(system_config), user_scope=False, check_perms=False, required=False),
        )
    # -F FILE: a user config (Include relative to ~/.ssh) whose permissions ssh does not
    # check; -F none: no config at all.
    if str(config_path) == "none":
        return ()
    return (Root(str(config_path), user_scope=True, check_perms=False, required=True),)


class SSHConfig:
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
        client: Client = NO_CLIENT,
        remote_command: str | None = None,
    ) -> None:
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._client = client
        self.rules = client.rules
        self._local = local_user if local_user is not None else LocalUser.current(self._environ)
        self._port = port
        self._user = user
        home = self._local.home
        # -i replaces the config's keys, so the probe proves exactly the key the user named;
        # checked now, so that a bad --identity-file fails before any waiting.
        self._identity_overrides = tuple(
            _expand_tilde_or_fail(_checked_path(str(p), f"identity file {p}"), home, str(p))
            for p in identity_files
        )
        self._default_identities = tuple(
            f"~/.ssh/{name}" for name in self.rules.default_identity_names
        )
        self._ctx = Local(
            name=self._local.name,
            home=home,
            glob_home=self._environ.get("HOME") or home,
            uid=os.getuid(),
            host=socket.gethostname(),
            environ=self._environ,
        )
        self._roots = _config_roots(config_path, user_config, system_config, home)
        self._system_dir = str(system_config.parent)
        self._remote_command = remote_command
        # ssh -G's arguments but the host: what mpirun's ssh is given besides the config.
        self._ssh_args = [
            *(["-F", str(config_path)] if config_path is not None else []),
            *(["-p", str(port)] if port is not None else []),
            *(["-l", user] if user is not None else []),
        ]
        self._asked = False  # ssh -G has judged the files (for the first host)
        self._load_error: InputError | None = None
        self._tolerant: Evaluator | None = None
        self._evaluator: Evaluator | None = None
        try:
            self._evaluator = self._make_evaluator(tolerant=False)
        except InputError as exc:
            if client.path is None:
                raise
            # Only the installed ssh can tell whether it accepts these files: asked at the
            # first host, since ssh -G needs one.
            self._load_error = exc
        self._cache: dict[str, SSHTarget] = {}
        # Probe threads resolve hosts that appear late; the evaluator's file caches are shared.
        self._lock = threading.Lock()

    @property
    def client(self) -> Client:
        return self._client

    def config_sets_host_key_policy(self) -> bool:
        evaluator = self._evaluator or self._tolerant
        return evaluator is not None and evaluator.sets_host_key_policy

    def offered_by_ssh_only(self) -> tuple[str, ...]:
        """Notes on what ssh offers besides the key files mpiwait probes with, for the hosts
        resolved so far: an ssh-agent, certificates next to the keys. A login with the plain
        key proves ssh's login too (ssh tries the plain key as well), so these are not refused,
        but a worker that accepts only them is reported as refusing mpiwait's key."""
        with self._lock:
            targets = list(self._cache.values())
        return tuple(dict.fromkeys(n for t in targets for n in t.offered_by_ssh_only))

    def resolve(self, host: str) -> SSHTarget:
        with self._lock:
            target = self._cache.get(host)
            if target is None:
                target = self._resolve_judged(host)
                self._cache[host] = target
            return target

    def _resolve_judged(self, host: str) -> SSHTarget:
        """Resolve; where ssh is installed, its ``ssh -G`` has the last word on acceptance:
        asked for the first host, and for any host the reader refuses."""
        ours: InputError | None = self._load_error
        target: SSHTarget | None = None
        if self._evaluator is not None:
            try:
                target = self._resolve(host, self._evaluator)
            except InputError as exc:
                ours = exc
        if self._client.path is None:
            if ours is not None:
                raise ours
            assert target is not None
            return target
        if not self._asked or ours is not None:
            self._asked = True
            self._ask_ssh(host, ours)
        if target is not None:
            return target
        # ssh accepts what the reader refused (a keyword or value of another release or of a
        # distribution's patch): read again, passing over such lines.
        return self._resolve(host, self._tolerant_evaluator())

    def _make_evaluator(self, *, tolerant: bool) -> Evaluator:
        return Evaluator(
            self._roots,
            self._ctx,
            system_dir=self._system_dir,
            rules=self.rules,
            tolerant=tolerant,
            remote_command=self._remote_command,
        )

    def _tolerant_evaluator(self) -> Evaluator:
        if self._tolerant is None:
            self._tolerant = self._make_evaluator(tolerant=True)
        return self._tolerant

    def _ask_ssh(self, host: str, ours: InputError | None) -> None:
        """Raise InputError if the installed ssh refuses the config for ``host``."""
        accepted, said = self._client.ask([*self._ssh_args, host], self._environ)
        if accepted:
            return
        if ours is not None:
            raise InputError(f"{ours.message} ({self._client.path}: {said})", hint=ours.hint)
        raise InputError(f"{self._client.path} refuses the ssh config for {host}: {said}")

    def _resolve(self, host: str, evaluator: Evaluator) -> SSHTarget:
        opts, address = evaluator.evaluate(host, user=self._user, port=self._port)
        _refuse_unfollowed(opts, host)
        if self.rules.refuse_connection:
            _refuse_connection(opts, host)
        scalars = opts.scalars
        port = int(scalars.get("port", DEFAULT_PORT))
        user = scalars.get("user") or self._local.name
        alias = scalars.get("hostkeyalias")
        if self.rules.expands_user and self._user is None and "user" in scalars:
            user = self._expand_user(user, opts, address, host, port, alias)
        tokens = self._tokens(address, host, port, user, alias)
        if self.rules.jump_token:  # before 9.3, %j is an unknown token
            tokens["j"] = opts.proxy_jump or ""

        identities, identities_default = self._identity_files(opts, tokens, host)
        known_hosts = self._known_hosts_files(opts, tokens, host)
        offered = self._offered_by_ssh_only(opts, identities)
        timeout = scalars.get("connecttimeout")
        seconds = (
            parse_time(timeout, decimal=self.rules.decimal_times)
            if timeout not in (None, "none")
            else None
        )
        policy = scalars.get("stricthostkeychecking")
        return SSHTarget(
            host=host,
            address=address,
            port=port,
            user=user,
            identity_files=identities,
            identities_default=identities_default,
            strict_host_key_checking=_HOST_KEY_POLICIES[policy.lower()] if policy else "unset",
            known_hosts_files=known_hosts,
            # ConnectTimeout 0 and none both leave ssh with the kernel's connect timeout
            # (minutes): "not set", so the caller applies its own default.
            connect_timeout=float(seconds) if seconds else None,
            config_files=tuple(evaluator.files_read),
            host_key_alias=ascii_lower(alias) if alias else None,
            offered_by_ssh_only=offered,
        )

    def _tokens(self, address: str, host: str, port: int, user: str, alias: str | None) -> Tokens:
        """The %-tokens of one connection (HostKeyAlias, else the host, stands for %k)."""
        return connection_tokens(
            self._ctx,
            host=address,
            original=host,
            port=port,
            user=user,
            host_key_alias=ascii_lower(alias) if alias else host,
        )

    def _expand_user(
        self, user: str, opts: Options, address: str, host: str, port: int, alias: str | None
    ) -> str:
        """User from a config file, 10.0 on: ${VAR} and %-tokens but %r and %C expanded; a
        value that expansion changed must be a plausible user name (valid_ruser)."""
        tokens = self._tokens(address, host, port, user, alias)
        del tokens["r"], tokens["C"]
        tokens["j"] = opts.proxy_jump or ""
        where = opts.where["user"].where
        try:
            expanded = percent_expand(dollar_expand(user, self._environ), tokens)
        except ValueError as e:
            raise InputError(f"{where}: User {user!r} for {host}: {e}") from e
        if expanded != user and not _valid_ruser(expanded):
            raise InputError(
                f"{where}: User {user!r} becomes {expanded!r} for {host}: ssh refuses a remote "
                "user name with these characters"
            )
        return expanded

    def _identity_files(
        self, opts: Options, tokens: Tokens, host: str
    ) -> tuple[tuple[str, ...], bool]:
        """The key files ssh will try, expanded, and whether missing ones are skipped (ssh's
        defaults and the config's) rather than an error (named with -i)."""
        if self._identity_overrides:
            raw_identities: Iterable[tuple[str, str]] = (
                (path, "--identity-file") for path in self._identity_overrides
            )
            identities_default = False
        elif opts.identity_files:
            raw_identities = (
                (path, line.where)
                for (path, _), line in zip(opts.identity_files, opts.identity_lines, strict=True)
            )
            # ssh passes over a config IdentityFile that does not exist, as over its defaults;
            # only a key named on our command line must exist.
            identities_default = True
        else:
            raw_identities = ((path, "default") for path in self._default_identities)
            identities_default = True
        identities = _unique(
            self._expand_path(value, tokens, host, f"{where}: IdentityFile")
            for value, where in raw_identities
            if value.lower() != "none"  # "IdentityFile none": no key files at all
        )
        return identities, identities_default

    def _known_hosts_files(self, opts: Options, tokens: Tokens, host: str) -> tuple[str, ...]:
        """The user's known_hosts files (expanded) then the global ones, "none" left out."""
        user_files = opts.user_known_hosts or list(DEFAULT_USER_KNOWN_HOSTS)
        # ssh expands neither ~ nor %-tokens in GlobalKnownHostsFile.
        global_files = opts.global_known_hosts or list(DEFAULT_GLOBAL_KNOWN_HOSTS)
        known_where = opts.where["userknownhostsfile"].where if opts.user_known_hosts else ""
        return _unique(
            [
                *(
                    self._expand_path(f, tokens, host, f"{known_where}: UserKnownHostsFile")
                    for f in user_files
                    if f.lower() not in _NO_FILE
                ),
                *(f for f in global_files if f.lower() not in _NO_FILE),
            ]
        )

    def _offered_by_ssh_only(self, opts: Options, identities: tuple[str, ...]) -> tuple[str, ...]:
        notes: list[str] = []
        agent = opts.scalars.get("identityagent")
        if agent is not None and agent.lower() != "none":
            notes.append(
                f"{opts.where['identityagent'].where}: IdentityAgent: ssh also offers the "
                "agent's keys; mpiwait probes with key files only"
            )
        elif agent is None and self._environ.get("SSH_AUTH_SOCK"):
            notes.append(
                "SSH_AUTH_SOCK is set: ssh also offers the agent's keys; mpiwait probes with "
                "key files only"
            )
        for path in identities:
            for cert in (f"{path}-cert.pub", f"{path}-cert"):
                if os.path.exists(cert):
                    notes.append(
                        f"{cert}: ssh also offers this certificate; mpiwait logs in with the "
                        "plain key only"
                    )
                    break
        return tuple(notes)

    def _expand_path(self, value: str, tokens: Tokens, host: str, what: str) -> str:
        # As ssh: ~ first (from passwd), then ${VAR} and %-tokens; a failure makes ssh exit.
        try:
            return percent_expand(
                _dollar_expand(_expand_tilde(value, self._local.home), self._environ), tokens
            )
        except ValueError as e:
            raise InputError(f"{what.lstrip(': ')} {value!r} for {host}: {e}") from e


def _refuse_unfollowed(opts: Options, host: str) -> None:
    """What ssh would do and mpiwait cannot: refused by name, never silently ignored."""
    for keyword, value in (("proxyjump", opts.proxy_jump), ("proxycommand", opts.proxy_command)):
        if value is not None and value.lower() != "none":
            line = opts.where[keyword]
            raise InputError(
                f"{line.where}: {line.keyword} applies to {host}: mpiwait cannot probe "
                "through a proxy, so it cannot prove that mpirun's ssh will get in",
                hint="wait for the hosts another way (e.g. --check tcp from a host on the "
                "workers' network), or limit the proxy to other hosts with a Host block",
            )
    for line in opts.certificate_files:
        raise InputError(
            f"{line.where}: CertificateFile applies to {host}: mpiwait logs in with plain "
            "keys and cannot prove a certificate login",
            hint="limit CertificateFile to other hosts, or use plain keys for the workers",
        )
    for keyword in ("pkcs11provider", "smartcarddevice"):
        found = opts.where.get(keyword)
        if found is not None and opts.scalars[keyword].lower() != "none":
            raise InputError(
                f"{found.where}: {keyword} applies to {host}: mpiwait cannot use keys held by a "
                "PKCS#11 token"
            )


def _refuse_connection(opts: Options, host: str) -> None:
    # Its argument is a message, not a flag: "RefuseConnection no" makes ssh exit too.
    line = opts.where.get("refuseconnection")
    if line is not None:
        raise InputError(
            f"{line.where}: RefuseConnection applies to {host}: ssh will not connect "
            f"({opts.scalars['refuseconnection']})"
        )


def _valid_ruser(name: str) -> bool:
    """ssh.c's valid_ruser (10.0 on), for a User that ${VAR} or a %-token changed."""
    if name.startswith("-"):
        return False
    for i, c in enumerate(name):
        if ord(c) < 32 or ord(c) == 127 or c in "'`\";&<>|(){}":
            return False
        if c in " \t\n\v\f\r" and name[i + 1 : i + 2] == "-":
            return False
    return not name.endswith("\\")


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
    try:
        percent_expand(without_vars, dict.fromkeys(_PATH_TOKENS, ""))
    except ValueError as e:
        raise InputError(f"{what}: {e}") from e
    return value


def _dollar_expand(value: str, environ: Mapping[str, str] | None) -> str:
    return dollar_expand(value, environ)


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    # ssh ignores a repeated identity file; order is the order it tries them.
    return tuple(dict.fromkeys(values))
