"""mpiwait's SSH settings against the installed OpenSSH client (``ssh -G``), field by field.

A corpus of ssh_config files (the written CASES below, each divergence ever found kept as one,
plus hypothesis-generated Host/Match blocks, patterns, tokens, Includes and case variants) is
resolved by mpiwait and by ``ssh -G`` for each host: host name, port, user, identity files in
order (expanded as ssh expands them, see sshdiff.py), StrictHostKeyChecking, known-hosts
files and ConnectTimeout must agree, and a config ssh refuses (exit 255) must be refused by
mpiwait (InputError, exit 2). Two ways of reading the files:

- ``-F FILE`` (in-process; HOME points into the case, so relative Includes stay in it);
- the default ``~/.ssh/config`` + ``/etc/ssh/ssh_config`` pair, inside a private mount
  namespace where the case's files are bind-mounted over the user's home and /etc/ssh (needs
  root and unshare; skipped otherwise). The machine's own files are never touched.

Deliberate differences are not in the corpus but tested in test_sshconfig.py: mpiwait refuses
ProxyJump, ProxyCommand, CertificateFile and PKCS11Provider for a host (ssh follows them), and
probes with id_rsa, id_ecdsa and id_ed25519 only of ssh's seven default key names.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sshdiff
import testbed
from testbed import releases

from mpiwait.errors import InputError
from mpiwait.openssh import keywords, syntax
from mpiwait.openssh.client import Client, find_client, parse_banner
from mpiwait.openssh.config import NO_CLIENT, LocalUser, SSHConfig

pytestmark = testbed.needs("ssh")

ME = pwd.getpwuid(os.getuid()).pw_name
HOST_SSH = find_client()  # the machine's own ssh (the module needs one)


@dataclass(frozen=True)
class Case:
    name: str
    user: str  # ~/.ssh/config, and the -F file
    hosts: tuple[str, ...]
    system: str = ""  # /etc/ssh/ssh_config (default pair only)
    files: dict[str, str] = field(default_factory=dict)  # more files, relative to the case
    mode: int = 0o644  # of the user config
    dash_f: bool = True  # also compare with -F (which ignores system and mode)
    owner: int | None = None  # uid to give the user config (root only)


W = ("w1", "W1", "Worker-1", "worker-2", "node-7", "x")

# Options mpiwait does not use, whose values ssh checks anyway: (accepted, refused) pairs.
VALUE_CHECKS = [
    ("Ciphers aes128-ctr,chacha20-poly1305@openssh.com", "Ciphers aes128-ctr,bogus"),
    ("Ciphers -bogus", "Ciphers +aes*"),
    ("MACs ^hmac-sha2-256-etm@openssh.com", "MACs hmac-sha3"),
    ("KexAlgorithms +diffie-hellman-group1-sha1", "KexAlgorithms bogus"),
    ("HostKeyAlgorithms rsa-sha2-256,ssh-ed25519*", "HostKeyAlgorithms bogus*"),
    ("PubkeyAcceptedAlgorithms +ssh-rsa", "PubkeyAcceptedKeyTypes ssh-foo"),
    ("LogLevel DEBUG1", "LogLevel loud"),
    ("SyslogFacility LOCAL0", "SyslogFacility LOCAL8"),
    ("FingerprintHash sha1", "FingerprintHash sha3"),
    ("EscapeChar ^A", "EscapeChar ab"),
    ("ControlPersist 10m", "ControlPersist maybe"),
    ("IPQoS af21 cs1", "IPQoS bogus"),
    ("IPQoS 0x10", "IPQoS 256"),
    ("RekeyLimit 1G 1h", "RekeyLimit 10"),
    ("RekeyLimit default none", "RekeyLimit 1G forever"),
    ("StreamLocalBindMask 0177", "StreamLocalBindMask 9"),
    ("SetEnv A=b C=d", "SetEnv A"),
    ("SendEnv LANG LC_*", "SendEnv A=b"),
    ("LocalForward 8080 localhost:80", "LocalForward 8080"),
    ("CanonicalizePermittedCNAMEs x", "Ciphers aes128-ctr aes256-ctr"),
    ("ConnectionAttempts 10", "ConnectionAttempts ten"),
    ("ServerAliveInterval 30", "ServerAliveCountMax -1"),
    ("Compression yes", "Compression delayed"),
    ("AddressFamily inet6", "AddressFamily ipv6"),
    ("RequestTTY force", "RequestTTY always"),
    ("Tunnel point-to-point", "SessionType shell"),
    ("UpdateHostKeys ask", "VerifyHostKeyDNS maybe"),
]

CASES: list[Case] = [
    # --- the divergences of issue 11, each kept as a case
    Case("lowercase host", "Host Worker-1\n  Port 2201\n", ("Worker-1", "worker-1", "WORKER-1")),
    Case(
        "lowercase HostName and %h in IdentityFile",
        "Host Node-*\n  HostName %h.Example\n  IdentityFile %d/.ssh/id_%h\n",
        ("Node-7", "node-7"),
    ),
    Case(
        "upper-case name under StrictHostKeyChecking yes",
        "StrictHostKeyChecking yes\nUserKnownHostsFile ~/.ssh/kh_%h\n",
        ("Worker-3",),
    ),
    Case("Match originalhost is case-insensitive", "Match originalhost WORKER-*\n  Port 9\n", W),
    Case("Match host is case-insensitive", "Match host W*\n  User up\n", W),
    Case(
        "Match user sees only earlier values",
        "Match user late\n  Port 1111\nHost *\n  User late\n",
        ("w1",),
    ),
    Case(
        "Match host sees only an earlier HostName",
        "Match host real.mpi\n  Port 1111\nHost w1\n  HostName real.mpi\nMatch host real.mpi\n"
        "  User after\n",
        ("w1", "w2"),
    ),
    Case(
        "Match exec before the block that sets the user",
        'Match exec "test %r = late"\n  Port 1111\nHost *\n  User late\n'
        'Match exec "test %r = late"\n  ConnectTimeout 7\n',
        ("w1",),
    ),
    Case(
        "Match final re-parses with the new host name",
        "Host alias1\n  HostName real1.mpi\nHost real1.mpi\n  Port 3301\nMatch final\n  User fin\n",
        ("alias1", "real1.mpi", "other"),
    ),
    Case(
        "Match final placed first",
        "Match final host *.mpi\n  Port 4000\nHost a*\n  HostName %h.MPI\n",
        ("alias", "b"),
    ),
    Case(
        "CanonicalizeHostname asks for the final pass",
        "CanonicalizeHostname yes\nMatch canonical\n  Port 2020\nHost W*\n  HostName %h.X\n"
        "Host w1.x\n  User canon\n",
        ("W1", "w1", "z"),
    ),
    Case("Match canonical without canonicalization", "Match canonical\n  Port 5\n", ("w",)),
    Case("group-writable user config", "Port 2345\n", ("w",), mode=0o664, dash_f=False),
    Case("world-writable user config", "Port 2345\n", ("w",), mode=0o666, dash_f=False),
    Case(
        "user config owned by another user",
        "Port 2345\n",
        ("w",),
        owner=65534,
        dash_f=False,
    ),
    Case(
        "Include of a group-writable file",
        "Include {d}/inc/gw.conf\n",
        ("w",),
        files={"inc/gw.conf": "Port 1\n"},
    ),
    Case("unknown keyword", "Host *\n  Bogus yes\n", ("w",)),
    Case("unknown keyword in an unused block", "Host never\n  Bogus yes\n", ("w",)),
    *(
        Case(f"value check: {text}", f"Host never\n  {text}\n", ("w",))
        for pair in VALUE_CHECKS
        for text in pair
    ),
    # --- IgnoreUnknown
    Case("IgnoreUnknown before", "IgnoreUnknown Bogus,Other*\nBogus yes\nOtherThing 1\n", ("w",)),
    Case("IgnoreUnknown after", "Bogus yes\nIgnoreUnknown bogus\n", ("w",)),
    Case(
        "IgnoreUnknown for some hosts",
        "Host w*\n  IgnoreUnknown UseKeychain\nHost *\n  UseKeychain yes\n",
        ("w1", "x"),
    ),
    Case("UseKeychain as a Mac user writes it", "Host *\n  UseKeychain yes\n", ("w",)),
    # --- syntax
    Case("equals and case variants", "PORT=2022\nHost\tW1 w2\n\tUser=up\nhostname %h.x\n", W),
    Case("quotes and comments", 'Port 2222 # c\nUser "a b"\n# Port 1\n', ("w",)),
    Case("percent in HostName keeps case", "HostName %h.X%%\n", ("W1",)),
    Case("IP addresses", "Host 10.*\n  User ip\n", ("10.0.0.5", "10.0.0.05", "::1")),
    Case("unbalanced quotes", 'User "x\n', ("w",)),
    Case("no argument", "Port\n", ("w",)),
    Case("extra arguments", "Port 22 23\n", ("w",)),
    Case("bad port", "Host never\n  Port 0\n", ("w",)),
    Case("port service name", "Port ssh\n", ("w",)),
    Case("bad time", "ConnectTimeout 1.5\n", ("w",)),
    Case("time units", "Host a\n  ConnectTimeout 1m30s\nHost b\n  ConnectTimeout 0\n", ("a", "b")),
    Case("ConnectTimeout None is not none", "ConnectTimeout None\n", ("w",)),
    Case(
        "host key policies",
        "Host a\n  StrictHostKeyChecking accept-new\nHost b\n  StrictHostKeyChecking off\n"
        "Host c\n  StrictHostKeyChecking ask\nHost d\n  StrictHostKeyChecking TRUE\n",
        ("a", "b", "c", "d", "e"),
    ),
    Case("bad host key policy", "StrictHostKeyChecking on\n", ("w",)),
    Case("bad flag", "Host never\n  BatchMode maybe\n", ("w",)),
    Case("Host with an empty pattern", 'Host ""\n', ("w",)),
    # --- Host and Match
    Case(
        "negation and wildcards",
        "Host *.svc !launcher.*\n  Port 2201\nHost w?\n  User wq\nHost *\n  Port 2299\n",
        ("w1", "w12", "a.svc", "launcher.svc"),
    ),
    Case("negation alone never matches", "Host !w1\n  Port 3\n", ("w1", "w2")),
    Case("Match pattern lists", "Match host w*,!w2\n  Port 3\n", ("w1", "w2", "x")),
    Case("Match all", "Match all\n  Port 3\n", ("w",)),
    Case("Match !all", "Match !all\n  Port 3\n", ("w",)),
    Case("Match host then all", "Match host w1 all\n  Port 3\n", ("w1", "w2")),
    Case("Match all then more", "Match all host x\n  Port 3\n", ("w",)),
    Case("Match unknown criterion", "Match nonsense x\n", ("w",)),
    Case("Match localnetwork (9.4)", "Match localnetwork 10.0.0.0/8\n", ("w",)),
    Case("Match tagged (9.8)", "Match tagged x\n", ("w",)),
    Case("Match host without argument", "Match host\n", ("w",)),
    Case(
        "Match user and localuser",
        f"Host r*\n  User root\nMatch user root\n  Port 1\nMatch localuser {ME}\n"
        "  IdentityFile /k/%u\n",
        ("r1", "w"),
    ),
    Case(
        "Match exec with tokens",
        'Match exec "test %h:%p:%n = w1:22:w1"\n  Port 1\nMatch !exec false\n  User ex\n',
        ("w1", "W1"),
    ),
    Case("Match exec unknown token", "Match exec 'echo %z'\n", ("w",)),
    # --- identity files and known hosts
    Case(
        "IdentityFile order and repeats",
        "Host w1\n  IdentityFile /k1\nMatch host w*\n  IdentityFile /k2\n  IdentityFile /k1\n"
        "Host v\n  IdentityFile none\n",
        ("w1", "w2", "v"),
    ),
    Case(
        "IdentityFile tokens",
        "IdentityFile ~/.ssh/%r@%h:%p\nIdentityFile %d/%u/%n/%L/%i\nIdentityFile /c/%C\n"
        "IdentityFile /a/%%\nHostKeyAlias Alias1\nIdentityFile /k/%k\n",
        ("W1",),
    ),
    Case("IdentityFile with unknown token", "Host w1\n  IdentityFile /k/%z\n", ("w1", "w2")),
    Case("IdentityFile with ${VAR}", "IdentityFile ${HOME}/k\n", ("w",)),
    Case(
        "known hosts files",
        "Host a\n  UserKnownHostsFile /dev/null ~/kh %d/kh_%h\n  GlobalKnownHostsFile /g\n"
        "Host c\n  UserKnownHostsFile none\n  GlobalKnownHostsFile none\n",
        ("a", "b", "c"),
    ),
    Case("known hosts none not alone", "UserKnownHostsFile ~/kh none\n", ("w",)),
    # --- Include
    Case(
        "Include relative glob in order",
        "Include conf.d/*.conf missing.conf\nPort 3333\n",
        ("foo", "bar", "w1"),
        files={
            "home/.ssh/conf.d/20-b.conf": "Port 2000\nUser b\n",
            "home/.ssh/conf.d/10-a.conf": "Host foo\n  Port 1000\n",
            "home/.ssh/conf.d/notes.txt": "Port 9999\n",
        },
    ),
    Case(
        "Include inside Host applies only there",
        "Host special w*\n  Include {d}/inc/a.conf\n  Port 7\n",
        ("special", "other", "w1"),
        files={"inc/a.conf": "User inc\nHost *\n  ConnectTimeout 9\nMatch all\n  Port 8\n"},
    ),
    Case(
        "Include cannot change the includer's block",
        "Host b*\n  Include {d}/inc/a.conf\n  User bee\n",
        ("bar", "foo"),
        files={"inc/a.conf": "Host foo\n  Port 1111\n"},
    ),
    Case(
        "Include of a bad file in an unused block",
        "Host never\n  Include {d}/inc/bad.conf\n",
        ("w",),
        files={"inc/bad.conf": "Port 0\n"},
    ),
    Case(
        "Include with tilde",
        "Include ~/.ssh/t/*.conf\n",
        ("w",),
        files={"home/.ssh/t/x.conf": "User tilde\n"},
    ),
    Case(
        "Include of a world-writable file",
        "Include {d}/inc/ww.conf\n",
        ("w",),
        files={"inc/ww.conf": "Port 1\n"},
    ),
    Case(
        "Include loop",
        "Include {d}/inc/loop.conf\n",
        ("w",),
        files={"inc/loop.conf": "Include {d}/inc/loop.conf\n"},
    ),
    Case(
        "system config: relative Include under /etc/ssh",
        "User fromuser\n",
        ("w1",),
        system="Include ssh_config.d/*.conf\nHost *\n  Port 2222\n  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n",
        files={"etc-ssh/ssh_config.d/mpi.conf": "Host w*\n  User sys\n  Port 2000\n"},
        dash_f=False,
    ),
    Case(
        "system config: ~ in Include refused",
        "Port 1\n",
        ("w",),
        system="Include ~/x.conf\n",
        dash_f=False,
    ),
    Case(
        "user config beats system config, Match final across both",
        "Host alias\n  HostName real.mpi\n",
        ("alias", "x"),
        system="Match final host real.mpi\n  Port 4242\nHost *\n  User sysuser\n",
        dash_f=False,
    ),
    Case(
        "mpi-operator base image",
        "",
        ("pi-worker-0.pi.default.svc",),
        system="Include /etc/ssh/ssh_config.d/*.conf\nHost *\n    SendEnv LANG LC_*\n"
        "    HashKnownHosts yes\n    GSSAPIAuthentication yes\n    StrictHostKeyChecking no\n"
        "    Port 2222\n    UserKnownHostsFile /dev/null\n",
        dash_f=False,
    ),
]


OVERRIDE_CASES = {
    "Match user sees only earlier values",
    "Match exec before the block that sets the user",
    "Match user and localuser",
    "IdentityFile tokens",
    "Match exec with tokens",
    "equals and case variants",
}


def _lay_out(case: Case, d: Path) -> None:
    def put(rel: str, text: str, mode: int = 0o644) -> Path:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text.replace("{d}", str(d)))
        p.chmod(mode)
        return p

    (d / "etc-ssh").mkdir(parents=True, exist_ok=True)
    cfg = put("home/.ssh/config", case.user, case.mode)
    if case.owner is not None and os.getuid() == 0:
        os.chown(cfg, case.owner, -1)
    put("etc-ssh/ssh_config", case.system)
    for rel, text in case.files.items():
        mode = {"ww.conf": 0o666, "gw.conf": 0o664}.get(rel.rsplit("/", 1)[-1], 0o644)
        put(rel, text, mode)


def _diffs(case: Case, label: str, ssh_args: list[str], make_config, env, **compare) -> list[str]:
    """Where ``ssh -G SSH_ARGS`` and mpiwait (``make_config()``) disagree, for each host of the
    case, each difference labelled with the case's name and ``label``."""
    return [
        f"{case.name} ({label}): {diff}"
        for host in case.hosts
        for diff in sshdiff.compare(host, ssh_args, make_config, env, **compare)
    ]


def _config_reader(cfg: Path, env: dict[str, str], client: Client, **options):
    """mpiwait's reading of ``cfg`` for sshdiff.compare: a fresh SSHConfig for each host."""
    return lambda: SSHConfig(
        config_path=cfg, local_user=LocalUser.current(env), environ=env, client=client, **options
    )


def _dash_f_diffs(case: Case, d: Path, *ssh_options: str, **config_options) -> list[str]:
    """The machine's ``ssh -G -F <the case's user config> SSH_OPTIONS`` against SSHConfig of the
    same file with ``config_options`` (ssh's -p/-l are its port=/user=), HOME in the case."""
    env = {**os.environ, "HOME": str(d / "home")}
    cfg = d / "home" / ".ssh" / "config"
    config = _config_reader(cfg, env, HOST_SSH, **config_options)
    label = " ".join(["-F", *ssh_options])
    ssh_args = ["-F", str(cfg), *ssh_options]
    return _diffs(case, label, ssh_args, config, env, version=HOST_SSH.rules.version)


@pytest.mark.parametrize("case", [c for c in CASES if c.dash_f], ids=lambda c: c.name)
def test_dash_f_agrees_with_ssh(case: Case, tmp_path: Path) -> None:
    _lay_out(case, tmp_path)
    assert _dash_f_diffs(case, tmp_path) == []


def _in_namespace(cases: list[Case], root: Path, suite: str | None = None) -> list[str]:
    spec: dict = {"cases": [], "scratch": str(root), "suite": suite}
    for n, case in enumerate(cases):
        d = root / f"c{n}"
        _lay_out(case, d)
        spec["cases"].append({"name": case.name, "dir": str(d), "hosts": list(case.hosts)})
    spec_file = root / "spec.json"
    spec_file.write_text(json.dumps(spec))
    p = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            str(Path(sshdiff.__file__)),
            str(spec_file),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@testbed.needs("root", "unshare")  # bind-mounts test files in a private mount namespace
def test_default_files_agree_with_ssh(tmp_path: Path) -> None:
    assert _in_namespace(CASES, tmp_path) == []


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60


# --- generated configs ------------------------------------------------------------------------

HOSTS = ("w1", "W1", "worker-2", "Worker-10", "node-7.example", "10.0.0.5", "alias1")
PATTERNS = ("*", "w*", "W*", "worker-?", "*-1*", "node-*.example", "10.0.0.*", "*.mpi", "alias?")
_pattern = st.sampled_from(PATTERNS)
_negatable = st.builds(lambda neg, p: ("!" if neg else "") + p, st.booleans(), _pattern)


def _header() -> st.SearchStrategy[str]:
    plist = st.lists(_negatable, min_size=1, max_size=3).map(",".join)
    return st.one_of(
        st.lists(_negatable, min_size=1, max_size=3).map(lambda ps: "Host " + " ".join(ps)),
        st.builds(
            lambda kw, neg, ps: f"Match {'!' if neg else ''}{kw} {ps}",
            st.sampled_from(["host", "originalhost", "Host", "OriginalHost", "user"]),
            st.booleans(),
            plist,
        ),
        st.sampled_from(
            [
                "Match final",
                "Match canonical",
                "Match all",
                "Match final host *.mpi",
                "Match !final",
                'Match exec "test %h = w1"',
                'Match exec "test %r = late"',
                f"Match localuser {ME}",
                "match USER late",
            ]
        ),
    )


_option = st.sampled_from(
    [
        "Port 2201",
        "port 3301",
        "PORT=4401",
        "User late",
        "User Root",
        "user=u2",
        "HostName %h.mpi",
        "HostName real1.mpi",
        "HostName %h.Example",
        "Hostname UPPER.X",
        "IdentityFile ~/.ssh/id_%h",
        "IdentityFile %d/k_%r",
        "IdentityFile /k/%p-%n",
        "IdentityFile ~/k%%",
        "StrictHostKeyChecking yes",
        "StrictHostKeyChecking accept-new",
        "StrictHostKeyChecking off",
        "ConnectTimeout 5",
        "ConnectTimeout 1m",
        "ConnectTimeout 0",
        "UserKnownHostsFile ~/kh_%h /dev/null",
        "GlobalKnownHostsFile /g1 /g2",
        "Include inc/*.conf",
        "Include inc/1.conf",
        "CanonicalizeHostname yes",
        "HostKeyAlias Alias.X",
        "IgnoreUnknown Foo*",
        "FooBar yes",
        "IdentityFile none",
        "UserKnownHostsFile none",
        "GlobalKnownHostsFile none",
        "HostName 10.0.0.05",
        "User %u",
        "Port 0",
        'User "two words"',
        "BatchMode yes # comment",
    ]
)
_block = st.tuples(_header(), st.lists(_option, min_size=1, max_size=3))
_text = st.tuples(st.lists(_option, max_size=2), st.lists(_block, max_size=4)).map(
    lambda t: (
        "".join(f"{o}\n" for o in t[0])
        + "".join(f"{h}\n" + "".join(f"  {o}\n" for o in opts) for h, opts in t[1])
    )
)
_config = st.builds(
    lambda user, inc1, inc2: Case(
        "generated",
        user,
        HOSTS,
        files={
            # no Include inside the included files: a loop would only test the depth limit
            "home/.ssh/inc/1.conf": inc1.replace("Include", "# Include"),
            "home/.ssh/inc/2.conf": inc2.replace("Include", "# Include"),
        },
    ),
    _text,
    _text,
    _text,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_config)
def test_generated_configs_agree_with_ssh_dash_f(case: Case, tmp_path_factory) -> None:
    d = tmp_path_factory.mktemp("gen")
    _lay_out(case, d)
    assert _dash_f_diffs(case, d) == [], case.user


@testbed.needs("root", "unshare")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases=st.lists(_config, min_size=4, max_size=4))
def test_generated_default_files_agree_with_ssh(cases: list[Case], tmp_path_factory) -> None:
    # Four configs per namespace; the system file gets the first one's text as well.
    cases = [
        Case(c.name, c.user, c.hosts, system=cases[0].user, files=c.files, dash_f=False)
        for c in cases
    ]
    assert _in_namespace(cases, tmp_path_factory.mktemp("gen")) == []


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.name in OVERRIDE_CASES],
    ids=lambda c: c.name,
)
def test_port_and_user_options_agree_with_ssh(case: Case, tmp_path: Path) -> None:
    # mpiwait's --port/--user are ssh's -p/-l: set before the config is read, so Match user,
    # %p and %r see them and the config's Port and User do not apply.
    _lay_out(case, tmp_path)
    ssh_options = ("-p", "2200", "-l", "late")
    assert _dash_f_diffs(case, tmp_path, *ssh_options, port=2200, user="late") == []


# --- every supported release: Debian's builds in debootstrap roots, their ssh -G as oracle ------

# Values whose syntax differs between the supported releases (keywords.TABLE's since, until and
# changed), or that ssh reads as C's strtol does: each in a block that does not apply.
VALUE_SYNTAX = (
    "RefuseConnection use-the-bastion",  # 10.1: a message, not yes/no
    "RefuseConnection no",
    "RevokedHostKeys /a /b",  # 10.3: several files
    "RevokedHostKeys none",
    "CanonicalizePermittedCNAMEs none",  # 8.8
    "CanonicalizePermittedCNAMEs * a:b",
    "CanonicalizePermittedCNAMEs a:",
    "TCPKeepAlive no",
    "TCPKeepAlive 30",
    "TCPKeepAlive all",  # 10.6: all and transport
    "IPQoS 0177",  # strtol base 0: octal
    "StreamLocalBindMask 0x10",  # strtol base 8 stops at the x
    "SkeyAuthentication maybe",  # 8.4: unsupported, any value
    "SendEnv A=b",  # 8.4: not checked
    "SetEnv A",  # refused by every release
    "GSSAPIAuthentication maybe",  # sid's plain client is built without GSS-API
    "GSSAPIClientIdentity x",  # Debian's patch, not in sid's plain client
    "WarnWeakCrypto no-pq-kex",  # 10.1
    "PubkeyAuthentication host-bound",  # 8.9
    "HostbasedAlgorithms +ssh-rsa",  # 8.5 and 8.6 only
    "ServerAliveInterval 1.5",  # 10.3: a fraction of a second
    "RekeyLimit 1G 1.5",
)

# Lines that one supported release accepts and another refuses, or resolves differently: every
# keyword and Match criterion added or removed between 8.4p1 and 10.6p1, Debian's aliases and
# GSS-API patch, the values, tokens and quoting that changed.
RELEASE_CASES: list[Case] = [
    *(
        Case(f"keyword: {text}", f"Host w*\n  {text}\n", ("w1",))
        for text in (
            "ObscureKeystrokeTiming no",  # 9.5
            "ChannelTimeout session=5m",  # 9.6
            "WarnWeakCrypto no",  # 10.1
            "RefuseConnection no",  # 10.1
            "VersionAddendum none",  # 10.0
            "Tag x",  # 9.4
            "EnableEscapeCommandline yes",  # 9.2
            "RequiredRSASize 2048",  # 9.1
            "SessionType none",  # 8.7
            "StdinNull no",  # 8.7
            "ForkAfterAuthentication no",  # 8.7
            "KnownHostsCommand /bin/true",  # 8.5
            "LogVerbose kex.c:*",  # 8.5
            "PermitRemoteOpen any",  # 8.5
            "PubkeyAcceptedAlgorithms +ssh-rsa",  # 8.5
            "HostbasedAcceptedAlgorithms +ssh-rsa",  # 8.7
            "GSSAPIKeyExchange yes",  # Debian's patch, gone in sid's plain client
            "GSSAPITrustDNS no",
            "GSSAPIKexAlgorithms gss-curve25519-sha256-",
            "SetupTimeOut 9",  # Debian: ServerAliveInterval, ConnectTimeout from 10.0
            "ProtocolKeepAlives 7",  # Debian's alias of ServerAliveInterval
            "DSAAuthentication no",  # Debian's alias of PubkeyAuthentication
            "UseBlacklistedKeys yes",  # Debian, deprecated
            "KexAlgorithms mlkem768x25519-sha256",  # 9.9
            "KexAlgorithms mlkem768nistp256-sha256",
            "KexAlgorithms sntrup4591761x25519-sha512@tinyssh.org",  # gone in 8.5
            "HostKeyAlgorithms ssh-dss",  # gone in 10.0
            "PubkeyAcceptedAlgorithms ssh-mldsa44-ed25519",
            "Ciphers rijndael-cbc@lysator.liu.se",  # gone in 8.5
        )
    ),
    Case("RefuseConnection for one host", "Host w1\n  RefuseConnection yes\n", ("w1", "w2")),
    Case(
        "RefuseConnection with a message (10.1)",
        'Host w1\n  RefuseConnection "use the bastion"\n',
        ("w1", "w2"),
    ),
    *(Case(f"value syntax: {text}", f"Host never\n  {text}\n", ("w",)) for text in VALUE_SYNTAX),
    Case("SetupTimeOut before ConnectTimeout", "SetupTimeOut 9\nConnectTimeout 4\n", ("w",)),
    Case("ConnectTimeout before SetupTimeOut", "ConnectTimeout 4\nSetupTimeOut 9\n", ("w",)),
    Case("Match localnetwork (9.4)", "Match localnetwork 127.0.0.0/8\n  Port 9\n", ("w",)),
    Case("Match localnetwork elsewhere", "Match localnetwork 192.0.2.128/25\n  Port 9\n", ("w",)),
    Case("Match localnetwork bad", "Match localnetwork 10.0.0.0/40\n  Port 9\n", ("w",)),
    Case("Match tagged (9.4)", "Tag foo\nMatch tagged foo\n  Port 7\n", ("w",)),
    Case("Match tagged empty", 'Match tagged ""\n  Port 7\n', ("w",)),
    Case("Match version (10.0)", "Match version OpenSSH_10*\n  Port 9\n", ("w",)),
    Case("Match !version", "Match !version OpenSSH_8*,OpenSSH_9.2*\n  Port 9\n", ("w",)),
    Case("Match sessiontype (10.0)", "Match sessiontype shell\n  Port 9\n", ("w",)),
    Case("Match command (10.0)", 'Match command ""\n  Port 9\n', ("w",)),
    Case("User with tokens (10.0)", "Host w*\n  User u%h-%p\n", ("w1",)),
    Case("User with ${VAR} (10.0)", "User ${HOME}x\n", ("w",)),
    Case("User expanded to a bad name", "User %n;x\n", ("w",)),
    Case("User literal with odd characters", "User 'a;b'\n", ("w",)),
    Case(
        "Include with tokens (9.9)",
        "Include {d}/inc/%h.conf\nPort 1\n",
        ("w1", "w2"),
        files={"inc/w1.conf": "Port 1234\n"},
    ),
    Case(
        "Match !final asks for the final pass up to 10.0",
        "Match !final\n  Port 7\nHost *\n  HostName X\nMatch final\n  User fin\n",
        ("w1",),
    ),
    Case(
        "Match !final alone",
        "Host w*\n  HostName %h.mpi\nHost *.mpi\n  Port 5\nMatch !final\n  User nf\n",
        ("w1",),
    ),
    Case("%j in IdentityFile (9.3)", "IdentityFile /k/%j\n", ("w",)),
    Case("%j in Match exec (9.3)", 'Match exec "test x%j = x"\n  Port 9\n', ("w",)),
    Case("comment after a value", "Port 2222 # the port\n", ("w",)),
    Case("single quotes", "User 'two words'\n", ("w",)),
    Case("backslash", "User a\\\\b\n", ("w",)),
]

SUITES = releases.SUITES


_RELEASES: dict[str, releases.Release | Exception] = {}


def _release(suite: str) -> releases.Release:
    """The suite's release, its root built on first use (cached on disk); a root that cannot
    be built fails every test of that release (never a skip), without building it again."""
    testbed.require("openssh-releases")  # skips with the reason, a failure in CI
    if suite not in _RELEASES:
        try:
            _RELEASES[suite] = releases.Release(suite)
        except Exception as exc:  # the build's error, kept for the suite's other tests
            _RELEASES[suite] = exc
    found = _RELEASES[suite]
    if isinstance(found, Exception):
        raise found
    return found


def _chroot_env(d: Path) -> dict[str, str]:
    return {"HOME": str(d / "home"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SHELL": "/bin/sh"}


def _release_ssh_g(release: releases.Release, work: Path):
    def run(args: list[str], env) -> tuple[int, list[str], str]:
        ran = release.ssh(["-G", *args], work=work, env=env)
        return ran.returncode, ran.stdout.splitlines(), ran.stderr

    return run


def _release_diffs(
    case: Case, d: Path, suite: str, client: Client | None = None, command: tuple[str, ...] = ()
) -> list[str]:
    release = _release(suite)
    version = release.version  # ssh -V under chroot: asked once
    rules = parse_banner(version)
    assert rules is not None, version
    env = _chroot_env(d)
    cfg = d / "home" / ".ssh" / "config"
    if client is None:
        client = sshdiff.ChrootClient.of(release, d)
    # No command: ssh -G's own (none, "shell"); with one: mpirun's (None, unknown to mpiwait).
    config = _config_reader(cfg, env, client, remote_command=None if command else "")
    label = " ".join([f"{suite} {version.split(',')[0]}", *command])
    ssh_g = _release_ssh_g(release, d)
    return _diffs(
        case, label, ["-F", str(cfg)], config, env,
        ssh_g=ssh_g, version=rules.version, command=command,
    )  # fmt: skip


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize(
    "case", [c for c in CASES + RELEASE_CASES if c.dash_f], ids=lambda c: c.name
)
def test_each_release_agrees(suite: str, case: Case, tmp_path: Path) -> None:
    """Installed as the launcher's ssh, each release decides acceptance; mpiwait resolves as it."""
    _lay_out(case, tmp_path)
    assert _release_diffs(case, tmp_path, suite) == []


# mpirun's ssh always runs a command (Open MPI 4's orted, 5's prted, Hydra's proxy), never
# a shell: Match command and sessiontype as ssh -G sees them with one, against mpiwait reading
# for mpirun (docs/ssh-settings.md: a command whose text it does not know).
MPIRUN_COMMANDS = [
    ("orted",),
    ("prted", "--prtemca", "ess", "env"),
    ('"/usr/bin/hydra_pmi_proxy"',),
]
COMMAND_CASES = [
    Case("Match command empty, with a command", 'Match command ""\n  User empty\n', ("w",)),
    Case("Match command *, with a command", "Match command *\n  User any\n", ("w",)),
    Case("Match !command empty", 'Match !command ""\n  User some\n', ("w",)),
    Case("Match sessiontype exec", "Match sessiontype exec\n  User ex\n", ("w",)),
    Case("Match sessiontype shell, with a command", "Match sessiontype shell\n  User sh\n", ("w",)),
    Case("Match !sessiontype shell", "Match !sessiontype shell\n  Port 9\n", ("w",)),
    Case(
        "SessionType none then Match",
        "SessionType none\nMatch sessiontype exec\n  Port 9\n",
        ("w",),
    ),
]


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("command", MPIRUN_COMMANDS, ids=lambda c: c[0].strip('"'))
@pytest.mark.parametrize("case", COMMAND_CASES, ids=lambda c: c.name)
def test_each_release_agrees_with_mpiruns_command(
    suite: str, command: tuple[str, ...], case: Case, tmp_path: Path
) -> None:
    _lay_out(case, tmp_path)
    assert _release_diffs(case, tmp_path, suite, command=command) == []


def _table_accepts(line: syntax.Line, version: tuple[int, int]) -> bool:
    """Release ``version`` by the keyword table: the keyword known there, the value valid."""
    row = keywords.TABLE.get(line.keyword)
    if row is None or keywords.syntax_at(row, version) is None:
        return False
    try:
        syntax.check_line(line, version)
    except InputError:
        return False
    return True


@pytest.mark.parametrize("text", VALUE_SYNTAX)
def test_keyword_table_agrees_with_each_release(text: str, tmp_path: Path) -> None:
    """The table's acceptance for each release is that release's ssh -G; without ssh, mpiwait
    accepts the line when any of them does."""
    cfg = tmp_path / "config"
    cfg.write_text(f"Host never\n  {text}\n")
    line = syntax.lex_line(text, str(cfg), 2)
    assert line is not None
    accepted_by = []
    for suite in SUITES:
        release = _release(suite)
        rc, _, err = _release_ssh_g(release, tmp_path)(["-F", str(cfg), "w"], _chroot_env(tmp_path))
        ours = _table_accepts(line, release.version_tuple)
        assert ours == (rc == 0), (suite, text, err)
        if rc == 0:
            accepted_by.append(suite)
    try:
        SSHConfig(config_path=cfg, environ={**os.environ, "HOME": str(tmp_path)}, client=NO_CLIENT)
        without_ssh = True
    except InputError:
        without_ssh = False
    assert without_ssh or not accepted_by, accepted_by


def test_release_cases_cover_every_change() -> None:
    assert len(RELEASE_CASES) >= 50


# --- what a user sees: the ssh on PATH decides ---------------------------------------------------

NEW_IN_10 = "Host w*\n  Port 2201\n  ObscureKeystrokeTiming no\n"  # 9.5 on


@pytest.mark.parametrize("suite", SUITES)
def test_the_ssh_on_path_decides(suite: str, tmp_path: Path) -> None:
    release = _release(suite)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    release.write_wrapper(bin_dir / "ssh", tmp_path)
    cfg = tmp_path / "config"
    cfg.write_text(NEW_IN_10)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = testbed.run(None, ["-F", str(cfg), "--hosts", "w1", "--dry-run"], env=env)
    if release.version_tuple >= (9, 5):
        assert result.returncode == 0, result
        assert "w1 address=w1 port=2201 " in result.stdout, result
    else:
        assert result.returncode == 2, result
        assert re.search(rf"{re.escape(str(cfg))}:? line 3", result.stderr), result
        assert "obscurekeystroketiming" in result.stderr.lower(), result


def test_without_ssh_the_start_line_says_which_rules(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        cfg = tmp_path / "config"
        cfg.write_text(
            f"Host 127.0.0.1\n  Port {port}\n  WarnWeakCrypto no\n  GSSAPIKeyExchange no\n"
        )
        empty = tmp_path / "bin"
        empty.mkdir()
        env = {**os.environ, "PATH": str(empty), "HOME": str(tmp_path)}
        result = testbed.run(
            None, ["-F", str(cfg), "--hosts", "127.0.0.1", "--check", "tcp"], env=env
        )
    assert result.returncode == 0, result
    assert (
        "no ssh installed: ssh config read as OpenSSH_10.6p1 reads it, accepting what any "
        "supported OpenSSH release (8.4 to 10.6) accepts" in result.stderr
    ), result


# --- a key OpenSSH 10.5+ makes and logs in with, and paramiko cannot read ----------------------


def _mldsa_key(tmp_path: Path) -> Path:
    key = tmp_path / "id_mldsa44_ed25519"
    made = _release("sid").run(
        ["/usr/bin/ssh-keygen", "-q", "-t", "mldsa44-ed25519", "-N", "", "-f", str(key)],
        work=tmp_path,
    )
    assert made.returncode == 0, made
    return key


def test_an_mldsa_key_alone_is_named_not_a_traceback(tmp_path: Path) -> None:
    key = _mldsa_key(tmp_path)
    cfg = tmp_path / "config"
    cfg.write_text(f"IdentityFile {key}\nIdentityFile {tmp_path}/id_ed25519\n")
    result = testbed.run(None, ["-F", str(cfg), "--hosts", "127.0.0.1", "--timeout", "30"])
    assert result.returncode == 3, result
    assert f"identity file {key}: Unsupported key type" in result.stderr, result
    assert "mpiwait (paramiko) cannot" in result.stderr, result


def test_an_mldsa_key_beside_a_usable_one_is_passed_over(tmp_path: Path) -> None:
    key = _mldsa_key(tmp_path)
    ed25519 = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ed25519)], check=True)
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    cfg = tmp_path / "config"
    cfg.write_text(f"Port {port}\nIdentityFile {key}\nIdentityFile {ed25519}\n")
    # Nothing listens: the wait runs to its deadline, past the key check that would exit 3.
    result = testbed.run(None, ["-F", str(cfg), "--hosts", "127.0.0.1", "--timeout", "2"])
    assert result.returncode == 124, result
    assert "tcp refused" in result.stderr, result


@pytest.mark.parametrize("suite", SUITES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_config)
def test_generated_configs_agree_with_each_release(
    suite: str, case: Case, tmp_path_factory
) -> None:
    d = tmp_path_factory.mktemp("gen")
    _lay_out(case, d)
    assert _release_diffs(case, d, suite) == [], case.user


@testbed.needs("root", "unshare", "openssh-releases")
@pytest.mark.parametrize("suite", SUITES)
def test_default_files_agree_with_each_release(suite: str, tmp_path: Path) -> None:
    """~/.ssh/config and /etc/ssh/ssh_config (permissions, relative Includes, precedence) as
    each release reads them, the case's files mounted over both, here and in the release's root."""
    _release(suite)  # built (or its failure raised) before the namespace script needs it
    assert _in_namespace(CASES + RELEASE_CASES, tmp_path, suite) == []
