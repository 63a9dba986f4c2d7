"""ssh_config files as OpenSSH's readconf.c reads them: lines, arguments, value checks.

Pure and independent of any host: every line of every file ssh reaches is checked on every run
of ssh (an Include inside a Host block that does not apply is still read, "parse only"), so a
value ssh refuses is refused here once, at load time, with its file and line. What depends on
the host (IgnoreUnknown, Match, tokens) is left to ``evaluate``.

The keywords and values accepted are those of *any* supported release (8.4 to 10.6, Debian's
patches included): where ssh is installed, ``ssh -G`` decides what it accepts (client.py), and
where none is, mpiwait must not refuse what some release would accept. ``tolerant`` skips every
check (ssh -G has accepted the files). Releases before 8.7 split a line differently (strdelim:
double quotes only, no escapes, ``=`` between arguments): ``legacy``.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass

from mpiwait.errors import InputError

# Keyword kinds. A kind decides how many arguments a line takes and which values ssh accepts.
FLAG = "flag"
TIME = "time"
INT = "int"
STRING = "string"  # one argument, any value
COMMAND = "command"  # the rest of the line, unsplit (ProxyCommand, ...)
ARRAY = "array"  # one or more arguments, "none" only alone
PORT = "port"
IDENTITY = "identity"  # one argument (IdentityFile, CertificateFile)
HOST = "host"
MATCH = "match"
INCLUDE = "include"
PROXYJUMP = "proxyjump"
ANY = "any"  # arguments not checked here (forwardings, ...): see the README
IGNORE = "ignore"  # deprecated, or unsupported in this build: ssh reads past them


def _words(text: str) -> list[str]:
    return text.split()


_FLAG_VALUES = ("yes", "no", "true", "false")
_MULTISTATE: dict[str, tuple[str, ...]] = {
    "stricthostkeychecking": (*_FLAG_VALUES, "ask", "off", "accept-new"),
    "verifyhostkeydns": (*_FLAG_VALUES, "ask"),
    "updatehostkeys": (*_FLAG_VALUES, "ask"),
    "pubkeyauthentication": (*_FLAG_VALUES, "unbound", "host-bound"),
    "compression": ("yes", "no"),
    "addressfamily": ("inet", "inet6", "any"),
    "controlmaster": (*_FLAG_VALUES, "auto", "ask", "autoask"),
    "tunnel": (*_FLAG_VALUES, "ethernet", "point-to-point"),
    "requesttty": (*_FLAG_VALUES, "force", "auto"),
    "sessiontype": ("none", "subsystem", "default"),
    "canonicalizehostname": (*_FLAG_VALUES, "always"),
}

# Every keyword of OpenSSH 8.4p1 to 10.6p1 as Debian builds them (GSSAPI and PKCS#11 enabled,
# Debian's GSSAPI key exchange patch up to 10.0, its aliases). Not listed: "Bad configuration
# option".
KEYWORDS: dict[str, str] = {
    **dict.fromkeys(
        _words(
            "protocol cipher fallbacktorsh globalknownhostsfile2 rhostsauthentication "
            "userknownhostsfile2 useroaming usersh useprivilegedport afstokenpassing "
            "kerberosauthentication kerberostgtpassing rsaauthentication "
            "rhostsrsaauthentication compressionlevel useblacklistedkeys"
        ),
        IGNORE,
    ),
    **dict.fromkeys(
        _words(
            "forwardx11 forwardx11trusted gatewayports exitonforwardfailure "
            "passwordauthentication kbdinteractiveauthentication "
            "challengeresponseauthentication skeyauthentication tisauthentication "
            "hostbasedauthentication gssapiauthentication gssapidelegatecredentials batchmode "
            "checkhostip tcpkeepalive keepalive nohostauthenticationforlocalhost "
            "clearallforwardings enablesshkeysign identitiesonly hashknownhosts "
            "permitlocalcommand visualhostkey stdinnull forkafterauthentication proxyusefdpass "
            "canonicalizefallbacklocal streamlocalbindunlink enableescapecommandline "
            "gssapikeyexchange gssapirenewalforcesrekey gssapitrustdns dsaauthentication "
            "refuseconnection"
        ),
        FLAG,
    ),
    **dict.fromkeys(_MULTISTATE, FLAG),
    # setuptimeout and protocolkeepalives: Debian's aliases (of ServerAliveInterval up to
    # 9.x; setuptimeout of ConnectTimeout from 10.0).
    **dict.fromkeys(
        _words(
            "connecttimeout forwardx11timeout serveraliveinterval setuptimeout protocolkeepalives"
        ),
        TIME,
    ),
    **dict.fromkeys(
        _words(
            "connectionattempts numberofpasswordprompts serveralivecountmax "
            "canonicalizemaxdots requiredrsasize"
        ),
        INT,
    ),
    **dict.fromkeys(
        _words(
            "kbdinteractivedevices xauthlocation user hostname hostkeyalias "
            "preferredauthentications bindaddress bindinterface pkcs11provider smartcarddevice "
            "securitykeyprovider controlpath revokedhostkeys ignoreunknown "
            "gssapiclientidentity gssapiserveridentity tag"
        ),
        STRING,
    ),
    **dict.fromkeys(
        _words("proxycommand knownhostscommand localcommand remotecommand versionaddendum"),
        COMMAND,
    ),
    **dict.fromkeys(
        _words("globalknownhostsfile userknownhostsfile logverbose canonicaldomains"), ARRAY
    ),
    **dict.fromkeys(_words("identityfile identityfile2 certificatefile"), IDENTITY),
    **dict.fromkeys(
        _words(
            "forwardagent ciphers macs kexalgorithms hostkeyalgorithms casignaturealgorithms "
            "hostbasedacceptedalgorithms hostbasedkeytypes pubkeyacceptedalgorithms "
            "pubkeyacceptedkeytypes loglevel syslogfacility localforward remoteforward "
            "dynamicforward permitremoteopen escapechar controlpersist tunneldevice ipqos "
            "rekeylimit streamlocalbindmask fingerprinthash addkeystoagent identityagent "
            "canonicalizepermittedcnames sendenv setenv gssapikexalgorithms channeltimeout "
            "obscurekeystroketiming warnweakcrypto"
        ),
        ANY,
    ),
    "port": PORT,
    "host": HOST,
    "match": MATCH,
    "include": INCLUDE,
    "proxyjump": PROXYJUMP,
}

_WHITESPACE = " \t\r\n"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_INT_RE = re.compile(r"[0-9]+")
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_TIME_PART_RE = re.compile(r"([0-9]+)([smhdwSMHDW]?)")


@dataclass(frozen=True)
class Line:
    """One directive: its keyword (lowercased), arguments, and where it was written."""

    keyword: str
    spelled: str  # as written, for messages
    args: tuple[str, ...]
    rest: str  # the text after the keyword, for the keywords that take it unsplit
    path: str
    number: int

    @property
    def where(self) -> str:
        return f"ssh config {self.path} line {self.number}"


def read_lines(
    path: str, *, check_perms: bool, legacy: bool = False, tolerant: bool = False
) -> tuple[Line, ...] | None:
    """The directives of one file; None when it cannot be opened (ssh's fopen() failing).
    ``tolerant``: a line that cannot be read or whose value is refused is left out, not an
    error (ssh -G accepted it)."""
    try:
        with open(path, "rb") as f:
            if check_perms:
                check_permissions(path, os.fstat(f.fileno()))
            data = f.read()
    except OSError:
        return None
    text = data.decode("utf-8", "surrogateescape")
    lines: list[Line] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        try:
            line = lex_line(raw, path, number, legacy=legacy)
            if line is not None:
                check_line(line)
        except InputError:
            if tolerant:
                continue
            raise
        if line is not None:
            lines.append(line)
    return tuple(lines)


def check_permissions(path: str, st: os.stat_result) -> None:
    """Debian's ssh rule for ~/.ssh/config and every included file ("secure_permissions").

    Upstream refuses any group-writable file; Debian (and Ubuntu) accept one whose group has
    the owner as its only member, as umask 002 with per-user groups produces. Others-writable
    or owned by neither the user nor root is refused everywhere.
    """
    uid = os.getuid()
    mode = stat.S_IMODE(st.st_mode)
    ok = st.st_uid in (0, uid) and not mode & 0o002
    if ok and mode & 0o020:
        ok = _group_has_only_the_owner(st.st_gid, st.st_uid)
    if not ok:
        raise InputError(
            f"ssh config {path}: bad owner or permissions (mode {mode:04o}, uid {st.st_uid}): "
            'ssh refuses it ("Bad owner or permissions")',
            hint=f"chmod go-w {path}",
        )


def _group_has_only_the_owner(gid: int, owner_uid: int) -> bool:
    try:
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    members = 0
    for entry in pwd.getpwall():
        if entry.pw_gid == gid:
            members += 1
            if entry.pw_name != group.gr_name:
                return False
    if group.gr_mem:
        try:
            owner = pwd.getpwuid(owner_uid).pw_name
        except KeyError:
            return False
        members += 1
        if group.gr_mem != [owner]:
            return False
    return members > 0


def lex_line(raw: str, path: str, number: int, *, legacy: bool = False) -> Line | None:
    """Split one line as process_config_line does; None for blank and comment lines."""
    # Trailing whitespace goes; a form feed only at the end of the line.
    line = raw.rstrip(_WHITESPACE + "\f")
    keyword, rest = _strdelim(line.lstrip(_WHITESPACE))
    if not keyword or keyword.startswith("#"):
        return None
    spelled = keyword
    rest = rest.lstrip(_WHITESPACE)
    where = f"ssh config {path} line {number}"
    if not rest:
        lowered = keyword.translate(_ASCII_LOWER)
        if lowered in KEYWORDS:
            raise InputError(f"{where}: {spelled} needs a value (ssh: no argument after keyword)")
        # Not echoed: a lone word is what a line of a key file looks like (-F pointed at a key).
        raise InputError(f"{where}: not a 'Keyword value' line (ssh: no argument after keyword)")
    try:
        args = tuple(split_args_legacy(rest) if legacy else split_args(rest))
    except ValueError:
        raise InputError(f"{where}: {spelled}: unbalanced quotes") from None
    return Line(keyword.translate(_ASCII_LOWER), spelled, args, rest, path, number)


def _strdelim(s: str) -> tuple[str, str]:
    """The keyword and what follows: whitespace and at most one '=' separate them."""
    m = re.match(r'([^ \t\r\n="]*)', s)
    assert m is not None
    word, rest = m.group(1), s[m.end() :]
    rest = rest.lstrip(_WHITESPACE)
    if rest.startswith("="):
        rest = rest[1:].lstrip(_WHITESPACE)
    return word, rest


def split_args_legacy(value: str) -> list[str]:
    """OpenSSH before 8.7 (strdelim): whitespace or one '=' between words, double quotes
    only, no escapes and no comments."""
    args: list[str] = []
    rest = value
    while rest:
        if rest[0] == '"':
            end = rest.find('"', 1)
            if end == -1:
                raise ValueError("unbalanced quotes")
            args.append(rest[1:end])
            rest = rest[end + 1 :].lstrip(_WHITESPACE)
            continue
        word, rest = _strdelim(rest)
        args.append(word)
        if not word and not rest:
            break
    return args


def split_args(value: str) -> list[str]:
    """OpenSSH's argv_split with comments: quotes, backslash escapes, '#' starting a word."""
    args: list[str] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c in " \t\r\n":
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
            elif not quote and c in " \t\r\n":
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


# What Debian's builds of 8.4p1 to 10.6p1 know, together (ssh -Q cipher, mac, kex, key-sig).
_CIPHERS = frozenset(
    _words(
        "rijndael-cbc@lysator.liu.se 3des-cbc aes128-cbc aes192-cbc aes256-cbc aes128-ctr "
        "aes192-ctr aes256-ctr "
        "aes128-gcm@openssh.com aes256-gcm@openssh.com chacha20-poly1305@openssh.com"
    )
)
_MACS = frozenset(
    _words(
        "hmac-sha1 hmac-sha1-96 hmac-sha2-256 hmac-sha2-512 hmac-md5 hmac-md5-96 "
        "umac-64@openssh.com umac-128@openssh.com hmac-sha1-etm@openssh.com "
        "hmac-sha1-96-etm@openssh.com hmac-sha2-256-etm@openssh.com hmac-sha2-512-etm@openssh.com "
        "hmac-md5-etm@openssh.com hmac-md5-96-etm@openssh.com umac-64-etm@openssh.com "
        "umac-128-etm@openssh.com"
    )
)
_KEX = frozenset(
    _words(
        "diffie-hellman-group1-sha1 diffie-hellman-group14-sha1 diffie-hellman-group14-sha256 "
        "diffie-hellman-group16-sha512 diffie-hellman-group18-sha512 "
        "diffie-hellman-group-exchange-sha1 diffie-hellman-group-exchange-sha256 "
        "ecdh-sha2-nistp256 ecdh-sha2-nistp384 ecdh-sha2-nistp521 curve25519-sha256 "
        "curve25519-sha256@libssh.org sntrup761x25519-sha512 sntrup761x25519-sha512@openssh.com "
        "sntrup4591761x25519-sha512@tinyssh.org mlkem768x25519-sha256 mlkem768nistp256-sha256"
    )
)
_KEY_ALGS = frozenset(
    _words(
        "ssh-ed25519 ssh-ed25519-cert-v01@openssh.com sk-ssh-ed25519@openssh.com "
        "sk-ssh-ed25519-cert-v01@openssh.com ecdsa-sha2-nistp256 "
        "ecdsa-sha2-nistp256-cert-v01@openssh.com ecdsa-sha2-nistp384 "
        "ecdsa-sha2-nistp384-cert-v01@openssh.com ecdsa-sha2-nistp521 "
        "ecdsa-sha2-nistp521-cert-v01@openssh.com sk-ecdsa-sha2-nistp256@openssh.com "
        "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com webauthn-sk-ecdsa-sha2-nistp256@openssh.com "
        "ssh-dss ssh-dss-cert-v01@openssh.com ssh-rsa ssh-rsa-cert-v01@openssh.com rsa-sha2-256 "
        "rsa-sha2-256-cert-v01@openssh.com rsa-sha2-512 rsa-sha2-512-cert-v01@openssh.com "
        "ssh-mldsa44-ed25519 ssh-mldsa44-ed25519-cert "
        "webauthn-sk-ecdsa-sha2-nistp256-cert-v01@openssh.com"
    )
)
_LOG_LEVELS = frozenset(_words("quiet fatal error info verbose debug debug1 debug2 debug3"))
_FACILITIES = frozenset(
    _words("daemon user auth authpriv local0 local1 local2 local3 local4 local5 local6 local7")
)
_DIGESTS = frozenset(_words("md5 sha1 sha256 sha384 sha512"))
_IPQOS = frozenset(
    _words(
        "none af11 af12 af13 af21 af22 af23 af31 af32 af33 af41 af42 af43 cs0 cs1 cs2 cs3 cs4 "
        "cs5 cs6 cs7 ef le lowdelay throughput reliability"
    )
)


def _algorithms(known: frozenset[str], *, wildcards: bool) -> Callable[[tuple[str, ...]], bool]:
    def check(args: tuple[str, ...]) -> bool:
        arg = args[0]
        if arg.startswith("-"):
            return True  # ssh does not check a list of algorithms to remove
        names = arg[1:] if arg[:1] in ("+", "^") else arg
        for name in names.split(","):
            if wildcards and any(c in name for c in "*?"):
                pattern = re.compile(
                    "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in name)
                )
                if not any(pattern.fullmatch(k) for k in known):
                    return False
            elif name not in known:
                return False
        return True

    return check


def _ipqos(arg: str) -> bool:
    if arg.lower() in _IPQOS:
        return True
    try:
        return 0 <= int(arg, 0) <= 255
    except ValueError:
        return False


def _escape_char(arg: str) -> bool:
    return (
        arg == "none"
        or len(arg) == 1
        or (len(arg) == 2 and arg[0] == "^" and "@" <= arg[1] <= "\x7f")
    )


def _scaled(arg: str) -> int | None:
    m = re.fullmatch(r"([0-9]+)([KMGTPE]?)", arg, re.IGNORECASE)
    if m is None:
        return None
    scale: int = 1024 ** " KMGTPE".index((m.group(2) or " ").upper())
    return int(m.group(1)) * scale


def _rekey_limit(args: tuple[str, ...]) -> bool:
    if args[0] != "default":
        size = _scaled(args[0])
        if size is None or 0 < size < 16:
            return False
    if len(args) > 2:
        return False
    return len(args) == 1 or args[1] == "none" or valid_time(args[1])


# keyword -> (check of the arguments, the most arguments ssh takes)
_CHECKS: dict[str, tuple[Callable[[tuple[str, ...]], bool], int]] = {
    "ciphers": (_algorithms(_CIPHERS, wildcards=False), 1),
    "macs": (_algorithms(_MACS, wildcards=False), 1),
    "kexalgorithms": (_algorithms(_KEX, wildcards=False), 1),
    **dict.fromkeys(
        _words(
            "hostkeyalgorithms casignaturealgorithms hostbasedacceptedalgorithms "
            "hostbasedkeytypes pubkeyacceptedalgorithms pubkeyacceptedkeytypes"
        ),
        (_algorithms(_KEY_ALGS, wildcards=True), 1),
    ),
    "loglevel": (lambda a: a[0].lower() in _LOG_LEVELS, 1),
    "syslogfacility": (lambda a: a[0].lower() in _FACILITIES, 1),
    "fingerprinthash": (lambda a: a[0].lower() in _DIGESTS, 1),
    "escapechar": (lambda a: _escape_char(a[0]), 1),
    "controlpersist": (
        lambda a: a[0] in ("yes", "no", "true", "false") or valid_time(a[0]),
        1,
    ),
    "ipqos": (lambda a: all(_ipqos(x) for x in a), 2),
    "rekeylimit": (_rekey_limit, 2),
    "streamlocalbindmask": (
        lambda a: re.fullmatch(r"[0-7]+", a[0]) is not None and int(a[0], 8) <= 0o777,
        1,
    ),
    "setenv": (lambda a: all("=" in x for x in a), 1 << 30),
    "sendenv": (lambda a: all("=" not in x for x in a), 1 << 30),
    "canonicalizepermittedcnames": (lambda a: all(":" in x for x in a), 1 << 30),
    "localforward": (lambda a: len(a) == 2, 2),
}


def check_line(line: Line) -> None:
    """Refuse a value ssh refuses; unknown keywords are judged later (IgnoreUnknown)."""
    kind = KEYWORDS.get(line.keyword)
    if line.keyword in _CHECKS:
        check, most = _CHECKS[line.keyword]
        if not line.args or any(a == "" for a in line.args) or not check(line.args):
            raise InputError(
                f"{line.where}: {line.spelled} {' '.join(line.args)!r}: ssh refuses this value"
            )
        if len(line.args) > most:
            raise InputError(f"{line.where}: {line.spelled}: extra arguments at end of line")
        return
    if kind is None or kind in (IGNORE, ANY, COMMAND, HOST, MATCH, INCLUDE):
        if kind in (HOST, INCLUDE) and any(a == "" for a in line.args):
            raise InputError(f"{line.where}: {line.spelled} has an empty argument")
        return
    args = line.args
    if kind == ARRAY:
        if any(a == "" for a in args):
            raise InputError(f"{line.where}: {line.spelled} has an empty argument")
        # "none" among other values: refused from 8.7 on (ssh -G says so), accepted by 8.4.
        return
    if kind == PROXYJUMP:
        check_proxy_jump(line.rest.lstrip(_WHITESPACE + "="), line.where)
        return
    _check_one_value(line, kind)


def _check_one_value(line: Line, kind: str) -> None:
    """A keyword that takes exactly one value of its kind (a flag, a time, a number, ...)."""
    args = line.args
    if not args or args[0] == "":
        raise InputError(f"{line.where}: {line.spelled} needs a value")
    arg = args[0]
    if kind == FLAG:
        allowed = _MULTISTATE.get(line.keyword, _FLAG_VALUES)
        if arg.lower() not in allowed:
            raise InputError(
                f"{line.where}: {line.spelled} {arg!r} is not one of {', '.join(allowed)}"
            )
    elif kind == TIME:
        if arg != "none" and not valid_time(arg):
            raise InputError(
                f"{line.where}: {line.spelled} {arg!r} is not a time (e.g. 10, 1m30s, none)"
            )
    elif kind == INT:
        if not _INT_RE.fullmatch(arg) or int(arg) > 2**31 - 1:
            raise InputError(f"{line.where}: {line.spelled} {arg!r} is not a number")
    elif kind == PORT and parse_port(arg) is None:
        raise InputError(f"{line.where}: {line.spelled} {arg!r} is not a port (1-65535)")
    if len(args) > 1:
        raise InputError(f"{line.where}: {line.spelled} takes one value (extra arguments)")


def parse_time(arg: str, *, decimal: bool = False) -> int | None:
    """OpenSSH's convtime: 30, 30s, 1m30s, ...; None if ssh would refuse it. ``decimal``: as
    10.3 on (convtime_double): seconds may have a fraction (truncated), given once."""
    if decimal:
        return _parse_time_decimal(arg)
    parts = _time_parts(_TIME_PART_RE, arg)
    if parts is None:
        return None
    total = sum(int(number) * _TIME_UNITS[unit] for number, unit in parts)
    return total if total <= 2**31 - 1 else None


def _time_parts(part_re: re.Pattern[str], arg: str) -> list[tuple[str, str]] | None:
    """``arg`` cut into (number, lower-case unit) matches of ``part_re``, one after the other
    from its start to its end; None when it is empty or a part does not match."""
    parts: list[tuple[str, str]] = []
    pos = 0
    while pos < len(arg):
        m = part_re.match(arg, pos)
        if m is None:
            return None
        parts.append((m.group(1), m.group(2).lower()))
        pos = m.end()
    return parts or None


_DECIMAL_PART_RE = re.compile(r"([0-9.]+)([smhdwSMHDW]?)")


def _parse_time_decimal(arg: str) -> int | None:
    parts = _time_parts(_DECIMAL_PART_RE, arg)
    if parts is None or not all(_decimal_part_ok(number, unit) for number, unit in parts):
        return None
    if sum(unit in ("", "s") for _, unit in parts) > 1:  # seconds given twice
        return None
    total = sum(float(number) * _TIME_UNITS[unit] for number, unit in parts)
    return int(total) if total <= 2**31 - 1 else None


def _decimal_part_ok(number: str, unit: str) -> bool:
    """At most one point, and one only in seconds and never last (1.5, .5s: yes; 1., 1.5m: no)."""
    if not re.fullmatch(r"[0-9]*\.?[0-9]*", number) or number == ".":
        return False
    return "." not in number or (unit in ("", "s") and not number.endswith("."))


def valid_time(arg: str) -> bool:
    """A time some supported release accepts."""
    return parse_time(arg) is not None or parse_time(arg, decimal=True) is not None


def parse_port(arg: str) -> int | None:
    """OpenSSH's a2port: 1-65535 or a service name from /etc/services."""
    if _INT_RE.fullmatch(arg):
        port = int(arg)
        return port if 1 <= port <= 65535 else None
    try:
        return socket.getservbyname(arg, "tcp")
    except OSError:
        return None


def check_proxy_jump(value: str, where: str) -> None:
    # parse_jump: "none" alone, or [user@]host[:port] items separated by commas.
    if value.lower() == "none":
        return
    for item in value.split(","):
        if not item or any(c in item for c in " \t"):
            raise InputError(f'{where}: Invalid ProxyJump "{value}"')
