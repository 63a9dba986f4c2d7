"""ssh_config files as OpenSSH's readconf.c reads them: lines, arguments, value checks.

Independent of any host: ssh checks every line it reaches on every run (an Include inside a
block that does not apply is still read), so a value ssh refuses is refused here once, at load
time, with its file and line; IgnoreUnknown, Match and tokens are left to evaluate.py. With no
ssh installed it must not refuse what some supported release accepts (keywords.TABLE);
``tolerant`` checks nothing (ssh -G accepted the files), ``legacy`` splits as before 8.7.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
from dataclasses import dataclass

from mpiwait.errors import InputError
from mpiwait.openssh.keywords import (
    ANY,
    ARRAY,
    COMMAND,
    FLAG,
    HOST,
    IGNORE,
    INCLUDE,
    INT,
    MATCH,
    PORT,
    PROXYJUMP,
    SYNTAXES,
    TABLE,
    TIME,
    Value,
    Version,
    parse_port,
    syntax_at,
    valid_time,
)

# Every keyword some supported release knows, with the value syntaxes it has there (the
# table: keywords.py). Not listed: "Bad configuration option".
KEYWORDS = SYNTAXES

_WHITESPACE = " \t\r\n"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_INT_RE = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
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


def check_line(line: Line, version: Version | None = None) -> None:
    """Refuse a value ssh refuses: that of release ``version``, or (None) every supported
    release; unknown keywords are judged later (IgnoreUnknown)."""
    if version is None:
        values = KEYWORDS.get(line.keyword)
        if not values:
            return
    else:
        row = TABLE.get(line.keyword)
        value = syntax_at(row, version) if row is not None else None
        if value is None:
            return
        values = (value,)
    refusal: InputError | None = None
    for value in values:  # one but for the keywords whose syntax changed between releases
        try:
            _check_value(line, value, version)
            return
        except InputError as exc:
            refusal = refusal or exc
    assert refusal is not None
    raise refusal


def _check_value(line: Line, value: Value, version: Version | None) -> None:
    kind = value.kind
    if value.check is not None:
        if not line.args or any(a == "" for a in line.args) or not value.check(line.args):
            raise InputError(
                f"{line.where}: {line.spelled} {' '.join(line.args)!r}: ssh refuses this value"
            )
        if len(line.args) > value.most:
            raise InputError(f"{line.where}: {line.spelled}: extra arguments at end of line")
        return
    if kind in (IGNORE, ANY, COMMAND, HOST, MATCH, INCLUDE):
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
    _check_one_value(line, value, version)


def _check_one_value(line: Line, value: Value, version: Version | None) -> None:
    """A keyword that takes exactly one value of its kind (a flag, a time, a number, ...)."""
    args = line.args
    if not args or args[0] == "":
        raise InputError(f"{line.where}: {line.spelled} needs a value")
    arg = args[0]
    kind = value.kind
    if kind == FLAG:
        if arg.lower() not in value.choices:
            raise InputError(
                f"{line.where}: {line.spelled} {arg!r} is not one of {', '.join(value.choices)}"
            )
    elif kind == TIME:
        if arg != "none" and not valid_time(arg, version):
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


def check_proxy_jump(value: str, where: str) -> None:
    # parse_jump: "none" alone, or [user@]host[:port] items separated by commas.
    if value.lower() == "none":
        return
    for item in value.split(","):
        if not item or any(c in item for c in " \t"):
            raise InputError(f'{where}: Invalid ProxyJump "{value}"')
