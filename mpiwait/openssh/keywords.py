"""Every ssh_config keyword of the supported OpenSSH releases, one row each.

A row says what value the keyword takes (``Value``), the release that added it, removed it or
changed its syntax (each release's readconf.c; Debian's builds where they differ), and how
mpiwait follows it. The parser (syntax.py), the acceptance per release (``syntax_at``) and with
no ssh installed (``SYNTAXES``), the options evaluate.py keeps and the table in
docs/ssh-settings.md (``markdown_table``) all derive from ``TABLE``: a new keyword is one row.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from dataclasses import dataclass

Version = tuple[int, int]

# The supported releases: the oldest and newest that the differential test holds mpiwait to.
OLDEST_RELEASE = "8.4p1"
NEWEST_RELEASE = "10.6p1"


def _version(release: str) -> Version:
    major, minor = release.split("p", 1)[0].split(".")
    return int(major), int(minor)


OLDEST = _version(OLDEST_RELEASE)
NEWEST = _version(NEWEST_RELEASE)
NEWEST_NAME = f"OpenSSH_{NEWEST_RELEASE}"
SUPPORTED = f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"  # "8.4 to 10.6"
SUPPORTED_RELEASES = f"{OLDEST_RELEASE} to {NEWEST_RELEASE}"  # "8.4p1 to 10.6p1"

# Value kinds: how many arguments a line takes and which values ssh accepts.
FLAG = "flag"  # one of ``choices`` (yes/no/true/false unless the row says more)
TIME = "time"
INT = "int"
STRING = "string"  # one argument, any value
COMMAND = "command"  # the rest of the line, unsplit (ProxyCommand, ...)
ARRAY = "array"  # one or more arguments
PORT = "port"
HOST = "host"
MATCH = "match"
INCLUDE = "include"
PROXYJUMP = "proxyjump"
CHECKED = "checked"  # arguments judged by the row's ``check``
ANY = "any"  # arguments not checked here (forwardings, ...): see docs/ssh-settings.md
IGNORE = "ignore"  # deprecated, or unsupported in this build: ssh reads past any value

# How mpiwait follows a keyword.
USED = "used"  # evaluate.py keeps its value and resolves the host with it
REFUSED = "refused"  # ssh would act on it and mpiwait cannot: refused for a host it applies to
VALUE_CHECKED = "value checked"
NOT_CHECKED = "not checked"
READ_PAST = "read past"


@dataclass(frozen=True, slots=True)
class Value:
    """A value syntax: its kind, the words a flag takes, or a check of the arguments (with the
    most arguments ssh takes), and how the docs name it."""

    kind: str
    text: str
    choices: tuple[str, ...] = ()
    check: Callable[[tuple[str, ...]], bool] | None = None
    most: int = 1


@dataclass(frozen=True, slots=True)
class Keyword:
    """One row of the table: no two rows share a name."""

    name: str  # lowercase, as ssh compares it
    value: Value  # its syntax from ``since`` on (or from the oldest supported release)
    follow: str
    since: Version | None = None  # None: before the oldest supported release
    until: Version | None = None  # the first release that refuses it
    changed: tuple[tuple[Version, Value], ...] = ()  # a new syntax from that release on
    note: str = ""


# -- value checks (readconf.c, misc.c) ---------------------------------------------------------

_INT_RE = re.compile(r"[0-9]+")
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_TIME_PART_RE = re.compile(r"([0-9]+)([smhdwSMHDW]?)")
_DECIMAL_PART_RE = re.compile(r"([0-9.]+)([smhdwSMHDW]?)")
DECIMAL_TIMES = (10, 3)  # convtime accepts a fraction of a second from this release on


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


def valid_time(arg: str, version: Version | None = None) -> bool:
    """A time the release ``version`` accepts (None: some supported release)."""
    if parse_time(arg) is not None:
        return True
    return (version is None or version >= DECIMAL_TIMES) and parse_time(
        arg, decimal=True
    ) is not None


def parse_port(arg: str) -> int | None:
    """OpenSSH's a2port: 1-65535 or a service name from /etc/services."""
    if _INT_RE.fullmatch(arg):
        port = int(arg)
        return port if 1 <= port <= 65535 else None
    try:
        return socket.getservbyname(arg, "tcp")
    except OSError:
        return None


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# What Debian's builds of the supported releases know, together (ssh -Q cipher, mac, kex, key-sig).
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


def _strtol(arg: str, base: int) -> tuple[int, str] | None:
    """C's strtol: the number at the start of ``arg`` and what follows it; None for none."""
    m = re.match(
        {0: r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", 8: r"\s*([+-]?)([0-7]+)"}[base],
        arg,
    )
    if m is None:
        return None
    digits = m.group(2)
    number = int(
        digits, 16 if digits[:2].lower() == "0x" else 8 if base == 8 or digits[:1] == "0" else 10
    )
    return (-number if m.group(1) == "-" else number), arg[m.end() :]


def _ipqos(arg: str) -> bool:
    if arg.lower() in _IPQOS:
        return True
    parsed = _strtol(arg, 0)  # misc.c parse_ipqos: strtol(cp, &ep, 0), the whole of it
    return parsed is not None and parsed[1] == "" and 0 <= parsed[0] <= 255


def _bind_mask(arg: str) -> bool:
    parsed = _strtol(arg, 8)  # strtol(arg, &end, 8): what follows the digits is not checked
    return parsed is not None and 0 <= parsed[0] <= 0o777


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


def _rekey_limit(version: Version) -> Callable[[tuple[str, ...]], bool]:
    def check(args: tuple[str, ...]) -> bool:
        if args[0] != "default":
            size = _scaled(args[0])
            if size is None or 0 < size < 16:
                return False
        if len(args) > 2:
            return False
        return len(args) == 1 or args[1] == "none" or valid_time(args[1], version)

    return check


def _control_persist(version: Version) -> Callable[[tuple[str, ...]], bool]:
    return lambda a: a[0] in ("yes", "no", "true", "false") or valid_time(a[0], version)


def _cnames(*, none: bool) -> Callable[[tuple[str, ...]], bool]:
    """CanonicalizePermittedCNAMEs: "*" or source:targets; "none" alone from 8.8."""

    def check(args: tuple[str, ...]) -> bool:
        if none and args[0].lower() == "none":
            return len(args) == 1
        return all(a == "*" or a.find(":") not in (-1, len(a) - 1) for a in args)

    return check


def _flag(*more: str, text: str = "") -> Value:
    choices = ("yes", "no", "true", "false", *more)
    return Value(FLAG, text or "/".join(("yes", "no", *more)), choices=choices)


def _checked(text: str, check: Callable[[tuple[str, ...]], bool], most: int = 1) -> Value:
    return Value(CHECKED, text, check=check, most=most)


YES_NO = _flag()
A_TIME = Value(TIME, "a time or none")
A_NUMBER = Value(INT, "a number")
ONE = Value(STRING, "one word")
A_COMMAND = Value(COMMAND, "the rest of the line")
WORDS = Value(ARRAY, "one or more words")
A_PATH = Value(STRING, "a path")
UNCHECKED = Value(ANY, "not checked")
IGNORED = Value(IGNORE, "any (ignored)")
_HOST_ALGS = _checked("key algorithms", _algorithms(_KEY_ALGS, wildcards=True))
_CNAMES_84 = _checked("* or names:names", _cnames(none=False), 1 << 30)


def _rows(
    names: str,
    value: Value,
    follow: str,
    *,
    since: Version | None = None,
    until: Version | None = None,
    changed: tuple[tuple[Version, Value], ...] = (),
    note: str = "",
) -> list[Keyword]:
    """One row for ``names`` (aliases that share it)."""
    return [Keyword(name, value, follow, since, until, changed, note) for name in names.split()]


_D = "Debian's patch"
_NO_GSSAPI = ((10, 6), IGNORED)  # sid's plain client is built without GSS-API: read past

TABLE: dict[str, Keyword] = {
    k.name: k
    for k in [
        # -- what mpiwait resolves a host with
        *_rows("host", Value(HOST, "patterns"), USED),
        *_rows("match", Value(MATCH, "criteria"), USED),
        *_rows("include", Value(INCLUDE, "files"), USED),
        *_rows("hostname user", ONE, USED),
        *_rows("port", Value(PORT, "a port or service name"), USED),
        *_rows("identityfile identityfile2", A_PATH, USED),
        *_rows("userknownhostsfile globalknownhostsfile", WORDS, USED),
        *_rows("hostkeyalias ignoreunknown", ONE, USED),
        *_rows("stricthostkeychecking", _flag("ask", "off", "accept-new"), USED),
        *_rows("connecttimeout", A_TIME, USED),
        *_rows(
            "setuptimeout",
            A_TIME,
            USED,
            note=f"{_D}: ServerAliveInterval, from 10.0 ConnectTimeout",
        ),
        *_rows("canonicalizehostname", _flag("always"), USED),
        *_rows("tag", ONE, USED, since=(9, 4)),
        *_rows(
            "sessiontype",
            Value(FLAG, "none/subsystem/default", choices=("none", "subsystem", "default")),
            USED,
            since=(8, 7),
        ),
        *_rows("identityagent", ONE, USED, note="named in a note: mpiwait probes with key files"),
        # -- what ssh would act on and mpiwait cannot
        *_rows("proxyjump", Value(PROXYJUMP, "none or [user@]host[:port],..."), REFUSED),
        *_rows("proxycommand", A_COMMAND, REFUSED),
        *_rows("certificatefile", A_PATH, REFUSED),
        *_rows("pkcs11provider smartcarddevice", ONE, REFUSED),
        *_rows(
            "refuseconnection",
            Value(STRING, "a message"),
            REFUSED,
            since=(10, 1),
            note="any value makes ssh exit for a host it applies to",
        ),
        # -- unused; values checked as ssh checks them
        *_rows(
            "forwardx11 forwardx11trusted gatewayports exitonforwardfailure "
            "passwordauthentication kbdinteractiveauthentication "
            "challengeresponseauthentication tisauthentication hostbasedauthentication "
            "batchmode checkhostip nohostauthenticationforlocalhost "
            "clearallforwardings enablesshkeysign identitiesonly hashknownhosts "
            "permitlocalcommand visualhostkey proxyusefdpass canonicalizefallbacklocal "
            "streamlocalbindunlink",
            YES_NO,
            VALUE_CHECKED,
        ),
        *_rows(
            "tcpkeepalive keepalive",
            YES_NO,
            VALUE_CHECKED,
            changed=(((10, 6), _flag("transport", "all")),),
        ),
        *_rows(
            "gssapiauthentication gssapidelegatecredentials",
            YES_NO,
            VALUE_CHECKED,
            changed=(_NO_GSSAPI,),
        ),
        *_rows("skeyauthentication", IGNORED, VALUE_CHECKED, changed=(((8, 7), YES_NO),)),
        *_rows("stdinnull forkafterauthentication", YES_NO, VALUE_CHECKED, since=(8, 7)),
        *_rows("enableescapecommandline", YES_NO, VALUE_CHECKED, since=(9, 2)),
        *_rows(
            "gssapikeyexchange gssapirenewalforcesrekey gssapitrustdns",
            YES_NO,
            VALUE_CHECKED,
            until=(10, 6),
            note=_D,
        ),
        *_rows("dsaauthentication", YES_NO, VALUE_CHECKED, note=f"{_D}: PubkeyAuthentication"),
        *_rows("verifyhostkeydns updatehostkeys", _flag("ask"), VALUE_CHECKED),
        *_rows(
            "pubkeyauthentication",
            YES_NO,
            VALUE_CHECKED,
            changed=(((8, 9), _flag("unbound", "host-bound")),),
        ),
        *_rows("compression", Value(FLAG, "yes/no", choices=("yes", "no")), VALUE_CHECKED),
        *_rows(
            "addressfamily",
            Value(FLAG, "inet/inet6/any", choices=("inet", "inet6", "any")),
            VALUE_CHECKED,
        ),
        *_rows("controlmaster", _flag("auto", "ask", "autoask"), VALUE_CHECKED),
        *_rows("tunnel", _flag("ethernet", "point-to-point"), VALUE_CHECKED),
        *_rows("requesttty", _flag("force", "auto"), VALUE_CHECKED),
        *_rows("forwardx11timeout serveraliveinterval", A_TIME, VALUE_CHECKED),
        *_rows("protocolkeepalives", A_TIME, VALUE_CHECKED, note=f"{_D}: ServerAliveInterval"),
        *_rows(
            "connectionattempts numberofpasswordprompts serveralivecountmax canonicalizemaxdots",
            A_NUMBER,
            VALUE_CHECKED,
        ),
        *_rows("requiredrsasize", A_NUMBER, VALUE_CHECKED, since=(9, 1)),
        *_rows(
            "kbdinteractivedevices xauthlocation preferredauthentications bindaddress "
            "bindinterface securitykeyprovider controlpath",
            ONE,
            VALUE_CHECKED,
        ),
        *_rows(
            "gssapiclientidentity gssapiserveridentity", ONE, VALUE_CHECKED, until=(10, 6), note=_D
        ),
        *_rows(
            "revokedhostkeys",
            A_PATH,
            VALUE_CHECKED,
            changed=(((10, 3), Value(ARRAY, "paths (10.3 on), or none")),),
        ),
        *_rows("localcommand remotecommand", A_COMMAND, VALUE_CHECKED),
        *_rows("knownhostscommand", A_COMMAND, VALUE_CHECKED, since=(8, 5)),
        *_rows("versionaddendum", A_COMMAND, VALUE_CHECKED, since=(10, 0)),
        *_rows("logverbose", WORDS, VALUE_CHECKED, since=(8, 5)),
        *_rows(
            "ciphers", _checked("ciphers", _algorithms(_CIPHERS, wildcards=False)), VALUE_CHECKED
        ),
        *_rows("macs", _checked("MACs", _algorithms(_MACS, wildcards=False)), VALUE_CHECKED),
        *_rows(
            "kexalgorithms",
            _checked("key exchanges", _algorithms(_KEX, wildcards=False)),
            VALUE_CHECKED,
        ),
        *_rows(
            "hostkeyalgorithms casignaturealgorithms hostbasedkeytypes pubkeyacceptedkeytypes",
            _HOST_ALGS,
            VALUE_CHECKED,
        ),
        *_rows("hostbasedalgorithms", _HOST_ALGS, VALUE_CHECKED, since=(8, 5), until=(8, 7)),
        *_rows("pubkeyacceptedalgorithms", _HOST_ALGS, VALUE_CHECKED, since=(8, 5)),
        *_rows("hostbasedacceptedalgorithms", _HOST_ALGS, VALUE_CHECKED, since=(8, 7)),
        *_rows(
            "loglevel",
            _checked("a log level", lambda a: a[0].lower() in _LOG_LEVELS),
            VALUE_CHECKED,
        ),
        *_rows(
            "syslogfacility",
            _checked("a facility", lambda a: a[0].lower() in _FACILITIES),
            VALUE_CHECKED,
        ),
        *_rows(
            "fingerprinthash",
            _checked("md5/sha256/...", lambda a: a[0].lower() in _DIGESTS),
            VALUE_CHECKED,
        ),
        *_rows(
            "escapechar",
            _checked("a character, ^X or none", lambda a: _escape_char(a[0])),
            VALUE_CHECKED,
        ),
        *_rows(
            "controlpersist",
            _checked("yes/no or a time", _control_persist(OLDEST)),
            VALUE_CHECKED,
            changed=((DECIMAL_TIMES, _checked("yes/no or a time", _control_persist(NEWEST))),),
        ),
        *_rows(
            "ipqos",
            _checked("one or two DSCP names or numbers", lambda a: all(_ipqos(x) for x in a), 2),
            VALUE_CHECKED,
        ),
        *_rows(
            "rekeylimit",
            _checked("a size [and a time]", _rekey_limit(OLDEST), 2),
            VALUE_CHECKED,
            changed=((DECIMAL_TIMES, _checked("a size [and a time]", _rekey_limit(NEWEST), 2)),),
        ),
        *_rows(
            "streamlocalbindmask",
            _checked("an octal mask", lambda a: _bind_mask(a[0])),
            VALUE_CHECKED,
        ),
        *_rows(
            "setenv",
            _checked("NAME=value ...", lambda a: all("=" in x for x in a), 1 << 30),
            VALUE_CHECKED,
        ),
        *_rows(
            "sendenv",
            WORDS,
            VALUE_CHECKED,
            changed=(((8, 7), _checked("names", lambda a: all("=" not in x for x in a), 1 << 30)),),
        ),
        *_rows(
            "canonicalizepermittedcnames",
            _CNAMES_84,
            VALUE_CHECKED,
            changed=(((8, 8), _checked("* or names:names, or none", _cnames(none=True), 1 << 30)),),
        ),
        *_rows("localforward", _checked("port host:port", lambda a: len(a) == 2, 2), VALUE_CHECKED),
        # -- unused; values not checked here
        *_rows(
            "forwardagent remoteforward dynamicforward tunneldevice addkeystoagent "
            "canonicaldomains",
            UNCHECKED,
            NOT_CHECKED,
        ),
        *_rows("permitremoteopen", UNCHECKED, NOT_CHECKED, since=(8, 5)),
        *_rows("obscurekeystroketiming", UNCHECKED, NOT_CHECKED, since=(9, 5)),
        *_rows("channeltimeout", UNCHECKED, NOT_CHECKED, since=(9, 6)),
        *_rows("warnweakcrypto", UNCHECKED, NOT_CHECKED, since=(10, 1)),
        *_rows("gssapikexalgorithms", UNCHECKED, NOT_CHECKED, until=(10, 6), note=_D),
        # -- deprecated or unsupported: ssh reads past them
        *_rows(
            "protocol cipher fallbacktorsh globalknownhostsfile2 rhostsauthentication "
            "userknownhostsfile2 useroaming usersh useprivilegedport afstokenpassing "
            "kerberosauthentication kerberostgtpassing rsaauthentication "
            "rhostsrsaauthentication compressionlevel",
            IGNORED,
            READ_PAST,
        ),
        *_rows("useblacklistedkeys", IGNORED, READ_PAST, note=_D),
    ]
}


def syntax_at(keyword: Keyword, version: Version) -> Value | None:
    """The keyword's value syntax in release ``version``; None where it does not know it."""
    if (keyword.since is not None and version < keyword.since) or (
        keyword.until is not None and version >= keyword.until
    ):
        return None
    value = keyword.value
    for since, later in keyword.changed:
        if version >= since:
            value = later
    return value


def _supported(keyword: Keyword) -> tuple[Value, ...]:
    """The syntaxes some supported release gives the keyword, oldest first."""
    if not keyword.changed:  # nearly every row: known from ``since`` (or the oldest) on
        first = max(keyword.since or OLDEST, OLDEST)
        known = first <= NEWEST and (keyword.until is None or first < keyword.until)
        return (keyword.value,) if known else ()
    versions = [OLDEST, *(since for since, _ in keyword.changed), *(keyword.since or OLDEST,)]
    found: list[Value] = []
    for version in sorted(set(versions)):
        value = syntax_at(keyword, version) if OLDEST <= version <= NEWEST else None
        if value is not None and value not in found:
            found.append(value)
    return tuple(found)


# keyword -> the syntaxes some supported release accepts (what mpiwait accepts with no ssh
# installed); a keyword no supported release knows is not here.
SYNTAXES: dict[str, tuple[Value, ...]] = {
    name: values for name, row in TABLE.items() if (values := _supported(row))
}
# Options whose first value evaluate.py keeps (one argument each); the rest it collects by name.
FIRST_VALUE = frozenset(
    name
    for name, row in TABLE.items()
    if row.follow in (USED, REFUSED)
    and row.value.kind in (STRING, PORT, TIME, FLAG)
    and name not in ("identityfile", "identityfile2", "certificatefile")
)


def _release(version: Version | None) -> str:
    return "" if version is None else f"{version[0]}.{version[1]}"


def markdown_table() -> str:
    """The keyword table of docs/ssh-settings.md (tests/unit/test_docs.py keeps it in step)."""
    rows = ["| keyword | value | from | until | mpiwait |", "|---|---|---|---|---|"]
    for name, row in sorted(TABLE.items()):
        value = "; ".join(
            [row.value.text, *(f"{_release(v)} on: {later.text}" for v, later in row.changed)]
        )
        follow = f"{row.follow} ({row.note})" if row.note else row.follow
        rows.append(
            f"| `{name}` | {value} | {_release(row.since)} | {_release(row.until)} | {follow} |"
        )
    return "\n".join(rows) + "\n"
