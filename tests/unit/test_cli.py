"""mpiwait.cli: options and MPIWAIT_* variables → a Run, usage errors, and the modes'
timing-independent paths (worker role, no host source, bad input, COMMAND checks, bugs).

No network and no sshd: waiting itself is replaced by a stub where a test gets that far.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import click
import pytest
import testbed
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import mpiwait
import mpiwait.cli as cli
import mpiwait.modes.wait as run_module
import mpiwait.modes.waiting as waiting_module
from mpiwait.errors import ExitCode, InputError, Interrupted, LaunchError, PermanentError
from mpiwait.probe.outcome import Stage
from mpiwait.settings import (
    BACKOFF_DOUBLING,
    BACKOFF_GRACE,
    DEFAULT_DISCOVER_HOSTS,
    DEFAULT_HOSTFILE,
    DEFAULT_PARALLEL,
    DEFAULT_PROBE_RATE,
    DEFAULT_RECHECK_AFTER,
    DEFAULT_RETRY_INITIAL,
    DEFAULT_RETRY_MAX,
    DEFAULT_TERMINATION_LOG,
    DEFAULT_TIMEOUT,
    PERMANENT_FAILURES_BEFORE_EXIT,
    RETRY_FLOOR_DNS,
    RETRY_FLOOR_SSH,
    RETRY_FLOOR_TCP,
    SOURCE_REREAD_INTERVAL,
    STATUS_INTERVAL,
    Budget,
    Check,
    LogFormat,
    Mode,
    OutputOptions,
    ProbeOptions,
    RetryPolicy,
    Run,
    SourceOptions,
    WaitPolicy,
)
from mpiwait.wait.events import End, HostState, WaitResult

ROLE = "K_MPI_JOB_ROLE"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MPIWAIT_") or name == ROLE:
            monkeypatch.delenv(name)


def parse(*argv: str) -> Run:
    result = cli.parse(list(argv))
    assert isinstance(result, Run), result
    return result


# What `mpiwait` runs with, no option and no MPIWAIT_* given: every default spelled out.
DEFAULT_RUN = Run(
    mode=Mode.WAIT,
    command=(),
    launch_env=True,
    daemon_check=True,
    sources=SourceOptions(
        hostfile=DEFAULT_HOSTFILE,
        hostfile_explicit=False,
        discover_hosts=DEFAULT_DISCOVER_HOSTS,
        discover_explicit=False,
        discover_exec=False,
        hosts_option=None,
        include_self=False,
    ),
    probe=ProbeOptions(
        check=Check.SSH,
        ssh_config=None,
        port=None,
        user=None,
        identity_files=(),
        remote_command=None,
        connect_timeout=None,
    ),
    wait=WaitPolicy(
        timeout=DEFAULT_TIMEOUT,
        budget=Budget(parallel=DEFAULT_PARALLEL, rate=DEFAULT_PROBE_RATE),
        retry=RetryPolicy(
            initial=DEFAULT_RETRY_INITIAL,
            maximum=DEFAULT_RETRY_MAX,
            floor_dns=RETRY_FLOOR_DNS,
            floor_tcp=RETRY_FLOOR_TCP,
            floor_ssh=RETRY_FLOOR_SSH,
            grace=BACKOFF_GRACE,
            doubling=BACKOFF_DOUBLING,
            follow_budget=True,
        ),
        reread_interval=SOURCE_REREAD_INTERVAL,
        permanent_after=PERMANENT_FAILURES_BEFORE_EXIT,
        status_interval=STATUS_INTERVAL,
        recheck_after=DEFAULT_RECHECK_AFTER,
    ),
    output=OutputOptions(
        log_format=LogFormat.TEXT,
        quiet=False,
        termination_log=DEFAULT_TERMINATION_LOG,
        create_termination_log=False,
    ),
)


def default(changes: dict[str, object] | None = None) -> Run:
    """DEFAULT_RUN with the fields at the dotted paths of ``changes`` replaced
    (``{"probe.port": 22}``)."""
    run = DEFAULT_RUN
    for path, value in (changes or {}).items():
        run = _replaced(run, path.split("."), value)
    return run


def _replaced(parent: Any, path: list[str], value: object) -> Any:
    head, *rest = path
    new = _replaced(getattr(parent, head), rest, value) if rest else value
    return dataclasses.replace(parent, **{head: new})


def mpiwait_process(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 30
) -> testbed.Result:
    return testbed.run(None, argv, env=testbed.mpiwait_env(**(env or {})), timeout=timeout)


def options() -> list[click.Option]:
    return [
        p
        for p in cli.command_line.params
        if isinstance(p, click.Option) and p.name not in ("help", "version")
    ]


def env_name(option: click.Option) -> str:
    """MPIWAIT_<OPTION>, as the help promises: the long option's name, not the parameter's."""
    long = max(option.opts, key=len)
    return "MPIWAIT_" + long.lstrip("-").replace("-", "_").upper()


# --- options → the Run -------------------------------------------------------------------

OPTION_CASES = [
    (
        ["--hostfile", "/x/hostfile"],
        {"sources.hostfile": Path("/x/hostfile"), "sources.hostfile_explicit": True},
    ),
    (
        ["--discover-hosts", "/x/discover.sh"],
        {"sources.discover_hosts": Path("/x/discover.sh"), "sources.discover_explicit": True},
    ),
    (["--discover-exec"], {"sources.discover_exec": True}),
    (["--hosts", "a,b:2"], {"sources.hosts_option": "a,b:2"}),
    (["--hosts="], {"sources.hosts_option": ""}),
    (["--include-self"], {"sources.include_self": True}),
    (["--check", "dns"], {"probe.check": Check.DNS}),
    (["--check", "tcp"], {"probe.check": Check.TCP}),
    (["--check", "ssh"], {"probe.check": Check.SSH}),
    (["-F", "/x/ssh_config"], {"probe.ssh_config": Path("/x/ssh_config")}),
    (["--ssh-config", "/x/ssh_config"], {"probe.ssh_config": Path("/x/ssh_config")}),
    (["-p", "2222"], {"probe.port": 2222}),
    (["--port=65535"], {"probe.port": 65535}),
    (["-l", "mpiuser"], {"probe.user": "mpiuser"}),
    (["--user", "mpiuser"], {"probe.user": "mpiuser"}),
    (["-i", "/k/one"], {"probe.identity_files": (Path("/k/one"),)}),
    (
        ["-i", "/k/one", "--identity-file", "/k/two"],
        {"probe.identity_files": (Path("/k/one"), Path("/k/two"))},
    ),
    (["--remote-command", "test -d /data"], {"probe.remote_command": "test -d /data"}),
    (["--timeout", "30"], {"wait.timeout": 30.0}),
    (["--timeout", "0"], {"wait.timeout": 0.0}),
    (["--timeout", "1.5"], {"wait.timeout": 1.5}),
    (["--connect-timeout", "0.5"], {"probe.connect_timeout": 0.5}),
    (["--retry-initial", "0.5"], {"wait.retry.initial": 0.5, "wait.retry.follow_budget": False}),
    (["--retry-max", "10"], {"wait.retry.maximum": 10.0, "wait.retry.follow_budget": False}),
    (
        ["--retry-initial", "2", "--retry-max", "2"],
        {"wait.retry.initial": 2.0, "wait.retry.maximum": 2.0, "wait.retry.follow_budget": False},
    ),
    (["--parallel", "1"], {"wait.budget.parallel": 1}),
    (["--parallel", "4096"], {"wait.budget.parallel": 4096}),
    (["--probe-rate", "0"], {"wait.budget.rate": 0.0}),
    (["--probe-rate", "12.5"], {"wait.budget.rate": 12.5}),
    (["--recheck-after", "0"], {"wait.recheck_after": math.inf}),
    (["--recheck-after", "0.5"], {"wait.recheck_after": 0.5}),
    (["--dry-run"], {"mode": Mode.DRY_RUN}),
    (["--list-ready"], {"mode": Mode.LIST_READY}),
    (["--log-format", "json"], {"output.log_format": LogFormat.JSON}),
    (["--log-format", "text"], {"output.log_format": LogFormat.TEXT}),
    (["-q"], {"output.quiet": True}),
    (["--quiet"], {"output.quiet": True}),
    (
        ["--termination-log", "/x/log"],
        {"output.termination_log": Path("/x/log"), "output.create_termination_log": True},
    ),
    (["--no-launch-env"], {"launch_env": False}),
    (["--launch-env"], {"launch_env": True}),
    (["--no-daemon-check"], {"daemon_check": False}),
    (["--daemon-check"], {"daemon_check": True}),
]


def test_defaults() -> None:
    assert parse() == DEFAULT_RUN


@pytest.mark.parametrize(("argv", "changes"), OPTION_CASES, ids=lambda v: " ".join(v))
def test_option_maps_into_the_run(argv: list[str], changes: dict) -> None:
    # Exactly the named fields change; every other one keeps its default.
    assert parse(*argv) == default(changes)


def test_every_option_is_covered_by_the_table() -> None:
    given = {arg.split("=")[0] for argv, _ in OPTION_CASES for arg in argv if arg.startswith("-")}
    for option in options():
        assert given & set(option.opts), f"no test for {option.opts}"


def test_command_line_runner_returns_the_run() -> None:
    result = CliRunner().invoke(
        cli.command_line, ["--timeout", "5", "mpirun", "-np", "2"], standalone_mode=False
    )
    assert result.exit_code == 0, result.output
    assert result.return_value == default({"wait.timeout": 5.0, "command": ("mpirun", "-np", "2")})


def test_all_options_together() -> None:
    resolved = parse(
        "--hostfile=/h",
        "--discover-hosts=/d",
        "--discover-exec",
        "--include-self",
        "--check=tcp",
        "-F/c",
        "-p22",
        "-lbob",
        "-i/k",
        "--remote-command=true",
        "--timeout=9",
        "--connect-timeout=1",
        "--retry-initial=0.2",
        "--retry-max=3",
        "--parallel=7",
        "--probe-rate=5",
        "--dry-run",
        "--log-format=json",
        "-q",
        "--termination-log=/t",
        "mpirun",
    )
    assert resolved == default(
        {
            "command": ("mpirun",),
            "mode": Mode.DRY_RUN,
            "sources.hostfile": Path("/h"),
            "sources.hostfile_explicit": True,
            "sources.discover_hosts": Path("/d"),
            "sources.discover_explicit": True,
            "sources.discover_exec": True,
            "sources.include_self": True,
            "probe.check": Check.TCP,
            "probe.ssh_config": Path("/c"),
            "probe.port": 22,
            "probe.user": "bob",
            "probe.identity_files": (Path("/k"),),
            "probe.remote_command": "true",
            "probe.connect_timeout": 1.0,
            "wait.timeout": 9.0,
            "wait.retry.initial": 0.2,
            "wait.retry.maximum": 3.0,
            "wait.retry.follow_budget": False,
            "wait.budget.parallel": 7,
            "wait.budget.rate": 5.0,
            "output.log_format": LogFormat.JSON,
            "output.quiet": True,
            "output.termination_log": Path("/t"),
            "output.create_termination_log": True,
        }
    )


# --- MPIWAIT_* environment -------------------------------------------------------------------

ENV_CASES = [
    ({"MPIWAIT_HOSTFILE": "/e/hostfile"}, {"sources.hostfile": Path("/e/hostfile")}),
    ({"MPIWAIT_DISCOVER_HOSTS": "/e/d.sh"}, {"sources.discover_hosts": Path("/e/d.sh")}),
    ({"MPIWAIT_DISCOVER_EXEC": "1"}, {"sources.discover_exec": True}),
    ({"MPIWAIT_HOSTS": "w1,w2"}, {"sources.hosts_option": "w1,w2"}),
    ({"MPIWAIT_INCLUDE_SELF": "true"}, {"sources.include_self": True}),
    ({"MPIWAIT_CHECK": "tcp"}, {"probe.check": Check.TCP}),
    ({"MPIWAIT_SSH_CONFIG": "/e/config"}, {"probe.ssh_config": Path("/e/config")}),
    ({"MPIWAIT_PORT": "2222"}, {"probe.port": 2222}),
    ({"MPIWAIT_USER": "mpiuser"}, {"probe.user": "mpiuser"}),
    ({"MPIWAIT_IDENTITY_FILE": "/k/a"}, {"probe.identity_files": (Path("/k/a"),)}),
    (
        {"MPIWAIT_IDENTITY_FILE": "/k/a /k/b  /k/c"},
        {"probe.identity_files": (Path("/k/a"), Path("/k/b"), Path("/k/c"))},
    ),
    ({"MPIWAIT_REMOTE_COMMAND": "test -d /data"}, {"probe.remote_command": "test -d /data"}),
    ({"MPIWAIT_TIMEOUT": "300"}, {"wait.timeout": 300.0}),
    ({"MPIWAIT_CONNECT_TIMEOUT": "2.5"}, {"probe.connect_timeout": 2.5}),
    (
        {"MPIWAIT_RETRY_INITIAL": "0.5"},
        {"wait.retry.initial": 0.5, "wait.retry.follow_budget": False},
    ),
    ({"MPIWAIT_RETRY_MAX": "5"}, {"wait.retry.maximum": 5.0, "wait.retry.follow_budget": False}),
    ({"MPIWAIT_PARALLEL": "16"}, {"wait.budget.parallel": 16}),
    ({"MPIWAIT_PROBE_RATE": "50"}, {"wait.budget.rate": 50.0}),
    ({"MPIWAIT_RECHECK_AFTER": "2"}, {"wait.recheck_after": 2.0}),
    ({"MPIWAIT_DRY_RUN": "1"}, {"mode": Mode.DRY_RUN}),
    ({"MPIWAIT_LIST_READY": "1"}, {"mode": Mode.LIST_READY}),
    ({"MPIWAIT_LOG_FORMAT": "json"}, {"output.log_format": LogFormat.JSON}),
    ({"MPIWAIT_QUIET": "yes"}, {"output.quiet": True}),
    (
        {"MPIWAIT_TERMINATION_LOG": "/e/log"},
        {"output.termination_log": Path("/e/log"), "output.create_termination_log": True},
    ),
    ({"MPIWAIT_LAUNCH_ENV": "0"}, {"launch_env": False}),
    ({"MPIWAIT_LAUNCH_ENV": "false"}, {"launch_env": False}),
    ({"MPIWAIT_DAEMON_CHECK": "0"}, {"daemon_check": False}),
    ({"MPIWAIT_DAEMON_CHECK": "false"}, {"daemon_check": False}),
]
EXPLICIT_BY_ENV = {
    "MPIWAIT_HOSTFILE": {"sources.hostfile_explicit": True},
    "MPIWAIT_DISCOVER_HOSTS": {"sources.discover_explicit": True},
}


@pytest.mark.parametrize(
    ("env", "changes"), ENV_CASES, ids=lambda v: " ".join(f"{k}={v[k]}" for k in v)
)
def test_environment_maps_into_the_run(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], changes: dict
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
        changes = {**changes, **EXPLICIT_BY_ENV.get(name, {})}
    assert parse() == default(changes)


def test_every_option_has_its_mpiwait_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    covered = {name for env, _ in ENV_CASES for name in env}
    for option in options():
        assert env_name(option) in covered, f"no test for {env_name(option)}"


@pytest.mark.parametrize("value", ["0", "false", "no", "off", ""])
def test_false_flag_values_from_environment(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    for name in ("MPIWAIT_DRY_RUN", "MPIWAIT_QUIET", "MPIWAIT_INCLUDE_SELF"):
        monkeypatch.setenv(name, value)
    run = parse()
    assert (run.mode, run.output.quiet, run.sources.include_self) == (Mode.WAIT, False, False)


def test_environment_does_not_supply_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIWAIT_COMMAND", "echo hi")
    assert parse().command == ()


@pytest.mark.parametrize(
    ("env", "argv", "changes"),
    [
        ({"MPIWAIT_TIMEOUT": "300"}, ["--timeout", "5"], {"wait.timeout": 5.0}),
        ({"MPIWAIT_CHECK": "dns"}, ["--check", "tcp"], {"probe.check": Check.TCP}),
        ({"MPIWAIT_PORT": "2222"}, ["-p", "22"], {"probe.port": 22}),
        ({"MPIWAIT_HOSTS": "a,b"}, ["--hosts", "c"], {"sources.hosts_option": "c"}),
        (
            {"MPIWAIT_IDENTITY_FILE": "/k/a /k/b"},
            ["-i", "/k/c"],
            {"probe.identity_files": (Path("/k/c"),)},
        ),
        (
            {"MPIWAIT_HOSTFILE": "/e/h"},
            ["--hostfile", "/f/h"],
            {"sources.hostfile": Path("/f/h"), "sources.hostfile_explicit": True},
        ),
        ({"MPIWAIT_LOG_FORMAT": "json"}, ["--log-format", "text"], {}),
        ({"MPIWAIT_QUIET": "0"}, ["-q"], {"output.quiet": True}),
        ({"MPIWAIT_DAEMON_CHECK": "0"}, ["--daemon-check"], {}),
        # A bad variable does not matter when the flag overrides it.
        ({"MPIWAIT_TIMEOUT": "not-a-number"}, ["--timeout", "7"], {"wait.timeout": 7.0}),
    ],
)
def test_flags_win_over_environment(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], argv: list[str], changes: dict
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert parse(*argv) == default(changes)


def test_environment_and_flags_combine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIWAIT_TIMEOUT", "300")
    monkeypatch.setenv("MPIWAIT_QUIET", "1")
    assert parse("--check", "tcp", "mpirun") == default(
        {
            "wait.timeout": 300.0,
            "output.quiet": True,
            "probe.check": Check.TCP,
            "command": ("mpirun",),
        }
    )


# --- explicit host sources ------------------------------------------------------------------


def explicit(*argv: str) -> tuple[bool, bool]:
    sources = parse(*argv).sources
    return sources.hostfile_explicit, sources.discover_explicit


def test_explicit_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    assert explicit() == (False, False)
    assert explicit("--hostfile", "/h") == (True, False)
    assert explicit("--discover-hosts", "/d") == (False, True)
    # Naming the default path is still naming it: missing becomes an error.
    assert explicit(
        "--hostfile", str(DEFAULT_HOSTFILE), "--discover-hosts", str(DEFAULT_DISCOVER_HOSTS)
    ) == (True, True)
    monkeypatch.setenv("MPIWAIT_HOSTFILE", "/e/h")
    monkeypatch.setenv("MPIWAIT_DISCOVER_HOSTS", "/e/d")
    assert explicit() == (True, True)


# --- the COMMAND ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "command", "changes"),
    [
        (
            ["mpirun", "-np", "4", "python", "train.py"],
            ("mpirun", "-np", "4", "python", "train.py"),
            {},
        ),
        (
            ["--timeout", "5", "mpirun", "-x", "FOO", "--timeout", "9", "-q"],
            ("mpirun", "-x", "FOO", "--timeout", "9", "-q"),
            {"wait.timeout": 5.0},
        ),
        (["--", "mpirun", "-np", "4"], ("mpirun", "-np", "4"), {}),
        (["--", "--looks-like-an-option"], ("--looks-like-an-option",), {}),
        (["mpirun", "--", "a", "--"], ("mpirun", "--", "a", "--"), {}),
        (["-q", "--", "--"], ("--",), {"output.quiet": True}),
        (["sh", "-c", "echo $$"], ("sh", "-c", "echo $$"), {}),
        (["mpirun", "--help"], ("mpirun", "--help"), {}),
        (["mpirun", "-h"], ("mpirun", "-h"), {}),
        (["mpirun", "-V"], ("mpirun", "-V"), {}),
        (["mpirun", "--version"], ("mpirun", "--version"), {}),
        (["mpirun", "--bogus"], ("mpirun", "--bogus"), {}),
        (["mpirun", "--hosts", "x", "-p", "1"], ("mpirun", "--hosts", "x", "-p", "1"), {}),
        (["mpirun", "", " spaced  arg "], ("mpirun", "", " spaced  arg "), {}),
        (["--hosts=a", "mpirun"], ("mpirun",), {"sources.hosts_option": "a"}),
    ],
)
def test_command_is_everything_after_the_first_non_option(
    argv: list[str], command: tuple[str, ...], changes: dict
) -> None:
    assert parse(*argv) == default({"command": command, **changes})


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--bogus", "mpirun"], "--bogus"),
        (["-x", "FOO", "mpirun"], "-x"),
        (["-np", "4", "mpirun"], "-n"),
        (["--timeout", "5", "--np", "4", "mpirun"], "--np"),
    ],
)
def test_unknown_option_before_command_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert cli.parse(argv) == ExitCode.USAGE == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("mpiwait: error: ")
    # newer click quotes the option ('--np'), 8.1.0 does not (--np): both name it
    assert re.search(rf"(?<![\w-])'?{re.escape(named)}'?(?![\w-])", err), err


def test_unknown_option_subprocess_is_one_line_never_the_command() -> None:
    proc = mpiwait_process("--bogus", "mpirun")
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("mpiwait: error:")
    assert "--bogus" in line
    assert "Traceback" not in proc.stderr


# --- bad values ----------------------------------------------------------------------------

BAD_INPUTS = [
    (["--timeout", "-1"], {}, "--timeout"),
    (["--timeout", "abc"], {}, "--timeout"),
    (["--timeout", "nan"], {}, "--timeout"),
    (["--timeout", "inf"], {}, "--timeout"),
    (["--timeout"], {}, "--timeout"),
    (["--parallel", "0"], {}, "--parallel"),
    (["--parallel", "4097"], {}, "--parallel"),
    (["--parallel", "2.5"], {}, "--parallel"),
    (["--port", "70000"], {}, "--port"),
    (["-p", "0"], {}, "--port"),
    (["--check", "foo"], {}, "--check"),
    (["--log-format", "xml"], {}, "--log-format"),
    (["--retry-initial", "3", "--retry-max", "1"], {}, "--retry-max"),
    (["--retry-max", "0.05"], {}, "--retry-max"),  # below the default initial window
    (["--retry-initial", "0"], {}, "--retry-initial"),
    (["--retry-initial", "nan"], {}, "--retry-initial"),
    (["--connect-timeout", "0"], {}, "--connect-timeout"),
    (["--connect-timeout", "-2"], {}, "--connect-timeout"),
    (["--connect-timeout", "nan"], {}, "--connect-timeout"),
    (["--connect-timeout", "inf"], {}, "--connect-timeout"),
    (["--probe-rate", "-1"], {}, "--probe-rate"),
    (["--probe-rate", "inf"], {}, "--probe-rate"),
    (["--hosts"], {}, "--hosts"),
    ([], {"MPIWAIT_TIMEOUT": "soon"}, "MPIWAIT_TIMEOUT"),
    ([], {"MPIWAIT_TIMEOUT": "-5"}, "MPIWAIT_TIMEOUT"),
    ([], {"MPIWAIT_PARALLEL": "0"}, "MPIWAIT_PARALLEL"),
    ([], {"MPIWAIT_PORT": "ssh"}, "MPIWAIT_PORT"),
    ([], {"MPIWAIT_CHECK": "ping"}, "MPIWAIT_CHECK"),
    ([], {"MPIWAIT_DRY_RUN": "maybe"}, "MPIWAIT_DRY_RUN"),
    ([], {"MPIWAIT_CONNECT_TIMEOUT": "0"}, "MPIWAIT_CONNECT_TIMEOUT"),
    (["mpirun"], {"MPIWAIT_RETRY_INITIAL": "5", "MPIWAIT_RETRY_MAX": "1"}, "--retry-max"),
]


def _bad_id(case: tuple) -> str:
    argv, env, _ = case
    return " ".join([*(f"{k}={v}" for k, v in env.items()), *argv]) or "none"


@pytest.mark.parametrize(("argv", "env", "named"), BAD_INPUTS, ids=map(_bad_id, BAD_INPUTS))
def test_bad_value_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    named: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.parse(argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mpiwait: error: ")
    assert named in err
    assert err.rstrip().endswith("(see mpiwait --help)")


def test_bad_flag_value_does_not_blame_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MPIWAIT_TIMEOUT", "also-bad")
    assert cli.parse(["--timeout", "bad"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "'bad'" in err
    assert "MPIWAIT_TIMEOUT" not in err


def test_every_bad_input_in_a_subprocess_is_exit_2_and_one_line() -> None:
    # All at once: one interpreter start-up each, in parallel, to keep the suite fast.
    procs = [
        (case, testbed.start(None, case[0], env=testbed.mpiwait_env(**case[1])))
        for case in BAD_INPUTS
    ]
    problems = []
    for case, proc in procs:
        r = proc.finish(60)  # fails on a traceback
        lines = r.stderr.splitlines()
        if (
            r.returncode != 2
            or r.stdout
            or len(lines) != 1
            or not lines[0].startswith("mpiwait: error:")
            or "Traceback" in r.stderr
        ):
            problems.append((_bad_id(case), r.returncode, r.stdout, r.stderr))
    assert problems == []


# --- --version and --help -------------------------------------------------------------------


def _installed(name: str) -> str:
    return metadata.version(name)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """What a bug report needs: version, commit, Python, paramiko/cryptography, platform."""
    assert cli.parse([flag]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"mpiwait, version {mpiwait.__version__}"  # click's line, as before
    assert lines[1] == "commit: unknown (not a release build)"  # a checkout: not stamped
    version = ".".join(map(str, sys.version_info[:3]))
    assert lines[2] == f"python: {sys.implementation.name} {version} ({sys.executable})"
    assert lines[3] == (
        f"paramiko: {_installed('paramiko')}, cryptography: {_installed('cryptography')}"
    )
    uname = os.uname()
    assert lines[4] == (
        f"platform: {uname.sysname} {uname.release} {uname.machine}, "
        f"libc {os.confstr('CS_GNU_LIBC_VERSION')}"
    )
    assert len(lines) == 5


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--version", "--log-format", "json"], {}),
        (["--log-format=json", "-V"], {}),
        (["--version"], {"MPIWAIT_LOG_FORMAT": "json"}),
    ],
)
def test_version_json_is_one_object(argv: list[str], env: dict[str, str]) -> None:
    proc = mpiwait_process(*argv, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.count("\n") == 1
    record = json.loads(proc.stdout)
    assert record["event"] == "version"
    assert record["version"] == mpiwait.__version__
    assert record["commit"] == "unknown"
    assert record["paramiko"] == _installed("paramiko")
    assert record["cryptography"] == _installed("cryptography")
    assert set(record) == {
        "schema_version", "time", "event", "version", "commit", "commit_date", "python",
        "python_executable", "paramiko", "cryptography", "platform", "libc",
    }  # fmt: skip


def test_version_is_fast_it_imports_no_probing_code() -> None:
    """Versions come from metadata: neither paramiko nor cryptography is imported."""
    code = (
        "import sys, mpiwait.cli as c; status = c.parse(['--version']); "
        "heavy = [m for m in ('paramiko', 'cryptography', 'mpiwait.modes.wait', "
        "'mpiwait.probe.attempt', 'mpiwait.openssh.config') "
        "if m in sys.modules]; print(status, heavy)"
    )
    assert _last_line_of_python(code) == "0 []"


def _last_line_of_python(code: str) -> str:
    """The last line ``python -c code`` prints, in a fresh interpreter (what it imports)."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=testbed.mpiwait_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[-1]


def test_version_subprocess() -> None:
    proc = mpiwait_process("--version")
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == f"mpiwait, version {mpiwait.__version__}"
    assert "paramiko: " in proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_option(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    assert cli.parse([flag]) == 0
    out = capsys.readouterr().out
    for option in options():
        for opt in option.opts:
            assert opt in out, opt
    for word in ("--version", "--help", "COMMAND", "MPIWAIT_", "124", "126", "127"):
        assert word in out


def run(resolved: Run, environ: dict[str, str]) -> int:
    """One run as main() makes it: its mode's entry."""
    return cli.run_mode(resolved, environ)


# --- run(): the worker role ---------------------------------------------------------------


def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: object, **_kw: object) -> None:
        raise AssertionError("must not get this far")

    monkeypatch.setattr(run_module.HostSources, "from_options", fail)
    monkeypatch.setattr(waiting_module, "_wait", fail)


def test_worker_without_command_exits_0_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_waiting(monkeypatch)
    assert run(parse(), {ROLE: "worker"}) == ExitCode.OK
    assert "K_MPI_JOB_ROLE=worker: nothing to wait for" in capsys.readouterr().err


def test_worker_without_command_quiet_says_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_waiting(monkeypatch)
    assert run(parse("-q"), {ROLE: "worker"}) == ExitCode.OK
    assert capsys.readouterr().err == ""


def test_worker_with_command_execs_it_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_waiting(monkeypatch)
    execs: list[tuple[str, ...]] = []

    def fake_exec(argv: tuple[str, ...]) -> None:
        execs.append(tuple(argv))
        raise SystemExit(0)  # an exec does not come back

    monkeypatch.setattr(run_module, "exec_command", fake_exec)
    with pytest.raises(SystemExit):
        run(parse("mpirun", "-np", "2"), {ROLE: "worker"})
    assert execs == [("mpirun", "-np", "2")]


def test_worker_with_missing_command_is_127(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_waiting(monkeypatch)
    with pytest.raises(LaunchError) as info:
        run(parse("/nonexistent/mpiwait-cmd"), {ROLE: "worker"})
    assert info.value.exit_code == ExitCode.NOT_FOUND


def test_worker_subprocess_runs_the_command() -> None:
    proc = mpiwait_process("echo", "hi", env={ROLE: "worker"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hi\n", "")


def test_worker_subprocess_without_command() -> None:
    proc = mpiwait_process(env={ROLE: "worker"})
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert proc.stderr == "mpiwait: K_MPI_JOB_ROLE=worker: nothing to wait for\n"


def test_worker_loads_neither_the_probes_nor_the_loop() -> None:
    """A worker pod's COMMAND is often the sshd the launcher waits for: it starts at once."""
    code = (
        "import sys, mpiwait.cli as c; "
        "status = c.run_mode(c.parse(['-q']), {'K_MPI_JOB_ROLE': 'worker'}); "
        "heavy = [m for m in ('mpiwait.modes.waiting', 'mpiwait.probe.attempt', "
        "'mpiwait.wait.loop', 'paramiko', 'tenacity') "
        "if m in sys.modules]; print(status, heavy)"
    )
    assert _last_line_of_python(code) == "0 []"


# --- run(): the launcher waits -------------------------------------------------------------


class WaitStub:
    """Replaces the waiting loop: records the call, returns a fixed result."""

    def __init__(self, end: End, signal_name: str | None = None) -> None:
        self.end = end
        self.signal_name = signal_name
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, run, sources, names, prober, reporter, *_queue_and_kept) -> WaitResult:
        self.calls.append(names)
        stage = Stage.READY if self.end is End.READY else Stage.TCP
        hosts = tuple(HostState(n, stage, "" if stage is Stage.READY else "refused") for n in names)
        return WaitResult(self.end, hosts, 1.0, signal_name=self.signal_name)


@pytest.mark.parametrize("role", ["launcher", ""])
def test_launcher_waits_as_usual(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], role: str
) -> None:
    stub = WaitStub(End.READY)
    monkeypatch.setattr(waiting_module, "_wait", stub)
    assert run(parse("--hosts", "w1,w2", "--check", "tcp"), {ROLE: role}) == ExitCode.OK
    assert stub.calls == [("w1", "w2")]
    err = capsys.readouterr().err
    assert "waiting for 2 hosts (--hosts (2 hosts)) to pass the tcp check" in err
    assert "all 2 hosts ready" in err


def test_launcher_execs_the_command_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    stub = WaitStub(End.READY)

    def wait(*args):
        order.append("wait")
        return stub(*args)

    monkeypatch.setattr(waiting_module, "_wait", wait)
    monkeypatch.setattr(
        waiting_module, "exec_command", lambda argv, env=None: order.append(f"exec {argv}")
    )
    assert run(parse("--hosts", "w1", "--check", "tcp", "sh", "-c", "true"), {}) == ExitCode.OK
    assert order == ["wait", "exec ('sh', '-c', 'true')"]


@pytest.mark.parametrize(
    ("end", "signal_name", "status"),
    [
        (End.TIMEOUT, None, 124),
        (End.INTERRUPTED, "SIGTERM", 143),
        (End.INTERRUPTED, "SIGINT", 130),
    ],
)
def test_failed_wait_status_and_termination_log(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    end: End,
    signal_name: str | None,
    status: int,
) -> None:
    monkeypatch.setattr(waiting_module, "_wait", WaitStub(end, signal_name))
    monkeypatch.setattr(
        waiting_module, "exec_command", lambda argv: pytest.fail("exec after failure")
    )
    log = tmp_path / "termination-log"
    log.touch()
    resolved = default(
        {
            "sources.hosts_option": "w1",
            "probe.check": Check.TCP,
            "output.termination_log": log,
            "command": ("sh",),
        }
    )
    assert run(resolved, {}) == status
    text = log.read_text()
    assert "1 of 1 host not ready" in text
    assert "w1" in text


def test_dry_run_skips_the_command_check_and_the_wait(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(waiting_module, "_wait", WaitStub(End.TIMEOUT))
    resolved = parse("--hosts", "w1", "--check", "tcp", "--dry-run", "mpiwait-no-such-cmd")
    assert run(resolved, {}) == ExitCode.OK
    assert "w1 address=w1 port=22" in capsys.readouterr().out


# --- run(): bad input, before any waiting ----------------------------------------------------


def test_no_host_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_wait = WaitStub(End.READY)
    monkeypatch.setattr(waiting_module, "_wait", _no_wait)
    # Not named by the user (the defaults elsewhere): missing files are skipped, not errors.
    resolved = default(
        {
            "sources.hostfile": tmp_path / "hostfile",
            "sources.discover_hosts": tmp_path / "discover.sh",
        }
    )
    with pytest.raises(InputError) as info:
        run(resolved, {})
    assert info.value.exit_code == ExitCode.USAGE
    assert "no host source" in info.value.message
    assert str(tmp_path / "hostfile") in info.value.message
    assert "mpi-job-config" in (info.value.hint or "")
    assert _no_wait.calls == []


@pytest.mark.skipif(
    DEFAULT_HOSTFILE.exists() or DEFAULT_DISCOVER_HOSTS.exists(),
    reason="this machine has mpi-operator's /etc/mpi files",
)
@pytest.mark.may_skip("the defaults are only absent on a machine that is not an MPIJob launcher")
def test_no_host_source_with_the_defaults_subprocess() -> None:
    proc = mpiwait_process("--timeout", "1")
    assert proc.returncode == 2
    assert proc.stdout == ""
    error, hint = proc.stderr.splitlines()
    assert error.startswith("mpiwait: error: no host source: neither /etc/mpi/hostfile nor ")
    assert hint.startswith("mpiwait: hint: ")
    assert "mpi-job-config" in hint
    assert "Traceback" not in proc.stderr


def test_malformed_hostfile_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(waiting_module, "_wait", WaitStub(End.READY))
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("good slots=2\nbad slots=many\n")
    with pytest.raises(InputError) as info:
        run(parse("--hostfile", str(hostfile)), {})
    assert info.value.exit_code == ExitCode.USAGE
    assert info.value.message.startswith(f"{hostfile}:2: ")


def test_malformed_hostfile_line_subprocess(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# workers\nw1 slots=2\nw2 slots=two\n")
    proc = mpiwait_process("--hostfile", str(hostfile), "--timeout", "1")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"mpiwait: error: {hostfile}:3: ")


def test_missing_explicit_hostfile(tmp_path: Path) -> None:
    missing = tmp_path / "hostfile"
    proc = mpiwait_process("--hostfile", str(missing), "--timeout", "1")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line == f"mpiwait: error: hostfile {missing}: does not exist"


def test_missing_hostfile_from_environment(tmp_path: Path) -> None:
    missing = tmp_path / "hostfile"
    proc = mpiwait_process("--timeout", "1", env={"MPIWAIT_HOSTFILE": str(missing)})
    assert proc.returncode == 2
    assert proc.stderr == f"mpiwait: error: hostfile {missing}: does not exist\n"


def test_command_not_found_before_any_waiting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_waiting(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    # Checked even before the host sources: none exists here, yet the answer is 127.
    resolved = default(
        {
            "sources.hostfile": tmp_path / "none",
            "sources.discover_hosts": tmp_path / "none",
            "command": ("mpirun",),
        }
    )
    with pytest.raises(LaunchError) as info:
        run(resolved, {})
    assert info.value.exit_code == ExitCode.NOT_FOUND


def test_command_not_executable_before_any_waiting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_waiting(monkeypatch)
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    with pytest.raises(LaunchError) as info:
        run(parse("--hosts", "w1", str(script)), {})
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE


def test_command_not_found_subprocess_does_not_wait() -> None:
    # --timeout 0 would wait forever for w1: only the early check can end this quickly.
    proc = mpiwait_process(
        "--hosts", "w1.invalid", "--timeout", "0", "mpiwait-no-such-command", timeout=20
    )
    assert proc.returncode == 127
    (line,) = proc.stderr.splitlines()
    assert line.startswith("mpiwait: error: command not found: mpiwait-no-such-command")


def test_command_not_executable_subprocess(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    proc = mpiwait_process("--hosts", "w1.invalid", "--timeout", "0", str(script), timeout=20)
    assert proc.returncode == 126
    assert proc.stderr == f"mpiwait: error: command is not executable: {script}\n"


def test_missing_ssh_client_warns_where_unsure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    # deepspeed may launch without ssh (pdsh, a scheduler): a warning, not an error.
    deepspeed = tmp_path / "deepspeed"
    deepspeed.write_text("#!/bin/sh\n")
    deepspeed.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(waiting_module, "_wait", WaitStub(End.TIMEOUT))
    resolved = default(
        {
            "sources.hosts_option": "w1",
            "probe.check": Check.TCP,
            "command": ("deepspeed",),
            "output.termination_log": None,
        }
    )
    assert run(resolved, {}) == ExitCode.TIMEOUT
    assert "warning: no ssh client on PATH; deepspeed may need one" in capsys.readouterr().err


# --- main(): errors to exit statuses, one line, no traceback --------------------------------


@pytest.fixture
def in_process_main(monkeypatch: pytest.MonkeyPatch):
    """main() with os._exit replaced by SystemExit, and the signal handlers it sets undone."""

    def fake_exit(status: int) -> None:
        raise SystemExit(status)

    monkeypatch.setattr(cli, "_exit", fake_exit)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def call(argv: list[str]) -> int:
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        return int(info.value.code or 0)

    yield call
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _raise(exc: BaseException):
    def run_mode(run: Run, environ: object) -> int:
        raise exc

    return run_mode


def test_internal_error_is_one_line_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], in_process_main
) -> None:
    monkeypatch.setattr(cli, "run_mode", _raise(KeyError("boom")))
    assert in_process_main(["--hosts", "w1"]) == ExitCode.INTERNAL == 1
    out, err = capsys.readouterr()
    assert out == ""
    error, hint = err.splitlines()
    assert error == "mpiwait: error: internal error: KeyError: 'boom'"
    assert hint.startswith("mpiwait: hint: please report it; MPIWAIT_DEBUG=1")
    assert "Traceback" not in err


def test_internal_error_with_debug_raises(monkeypatch: pytest.MonkeyPatch, in_process_main) -> None:
    monkeypatch.setenv("MPIWAIT_DEBUG", "1")
    monkeypatch.setattr(cli, "run_mode", _raise(KeyError("boom")))
    with pytest.raises(KeyError):
        cli.main(["--hosts", "w1"])


@pytest.mark.parametrize(
    ("exc", "status", "expected"),
    [
        (InputError("bad file"), 2, ["mpiwait: error: bad file"]),
        (
            PermanentError("key rejected", hint="add the key"),
            3,
            ["mpiwait: error: key rejected", "mpiwait: hint: add the key"],
        ),
        (LaunchError("command not found: x", ExitCode.NOT_FOUND), 127, None),
        (Interrupted(signal.SIGTERM, "SIGTERM"), 143, []),
        (Interrupted(signal.SIGINT, "SIGINT"), 130, []),
    ],
)
def test_main_maps_errors_to_statuses(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    in_process_main,
    exc: BaseException,
    status: int,
    expected: list[str] | None,
) -> None:
    monkeypatch.setattr(cli, "run_mode", _raise(exc))
    assert in_process_main(["--hosts", "w1"]) == status
    err = capsys.readouterr().err
    if expected is not None:
        assert err.splitlines() == expected


def test_main_exits_124_when_the_deadline_passes(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    in_process_main,
) -> None:
    # The real run, no stub: a loopback port that refuses, a 1 s deadline. Its 124 (and not
    # the COMMAND) must come out of main(), after the summary.
    key = tmp_path / "id_ed25519"
    key.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n")
    with socket.socket() as s:  # a port nothing listens on: connects are refused at once
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MPIWAIT_TERMINATION_LOG", str(tmp_path / "termination-log"))
    marker = tmp_path / "command-ran"
    argv = ["-F", str(config), "-i", str(key), "--hosts", "127.0.0.2", "-p", str(port)]
    status = in_process_main([*argv, "--timeout", "1", "--", "touch", str(marker)])
    err = capsys.readouterr().err
    assert status == 124, err
    assert not marker.exists(), "COMMAND ran although the wait timed out"
    assert "mpiwait: timed out after" in err and "tcp refused (1): 127.0.0.2" in err, err


def test_main_usage_error_exits_2_without_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], in_process_main
) -> None:
    monkeypatch.setattr(cli, "run_mode", _raise(AssertionError("ran")))
    assert in_process_main(["--bogus"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_main_passes_the_run_and_environment(
    monkeypatch: pytest.MonkeyPatch, in_process_main
) -> None:
    seen = []

    def run_mode(run: Run, environ) -> int:
        seen.append((run, environ))
        return 0

    monkeypatch.setattr(cli, "run_mode", run_mode)
    assert in_process_main(["--hosts", "w1", "mpirun"]) == 0
    ((run, environ),) = seen
    assert run == default({"sources.hosts_option": "w1", "command": ("mpirun",)})
    assert environ is os.environ


def test_main_error_as_json_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], in_process_main
) -> None:
    monkeypatch.setattr(cli, "run_mode", _raise(PermanentError("key rejected", hint="add it")))
    assert in_process_main(["--log-format", "json", "--hosts", "w1"]) == 3
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert (record["event"], record["message"], record["hint"], record["exit_code"]) == (
        "error",
        "key rejected",
        "add it",
        3,
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--list-ready", "mpirun"], "--list-ready takes no COMMAND"),
        (["--list-ready", "--", "true"], "--list-ready takes no COMMAND"),
        (["--list-ready", "--dry-run"], "--list-ready and --dry-run cannot be combined"),
    ],
)
def test_list_ready_refuses_what_it_cannot_do(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert cli.parse(argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and says in err


def test_a_word_after_list_ready_options_is_still_command_not_an_option() -> None:
    # Everything from the first non-option is COMMAND: --list-ready after it is COMMAND's.
    resolved = parse("--hosts=a", "mpirun", "--list-ready")
    assert resolved.command == ("mpirun", "--list-ready") and resolved.mode is Mode.WAIT


def test_termination_log_is_explicit_only_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MPIWAIT_TERMINATION_LOG", raising=False)
    assert not parse().output.create_termination_log
    assert parse("--termination-log=/t").output.create_termination_log
    monkeypatch.setenv("MPIWAIT_TERMINATION_LOG", "/t")
    assert parse().output.create_termination_log


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--log-format", "json", "--timeout", "soon"], {}),
        (["--log-format=json", "--bogus", "mpirun"], {}),
        (["--hosts", "a", "--parallel", "0"], {"MPIWAIT_LOG_FORMAT": "json"}),
        (["--log-format", "json", "--list-ready", "--", "true"], {}),
        (["--bogus", "--log-format", "json"], {}),  # an unknown option before it
        (["-x", "--log-format=json"], {}),
    ],
)
def test_usage_errors_are_json_when_json_was_asked_for(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
) -> None:
    monkeypatch.delenv("MPIWAIT_LOG_FORMAT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.parse(argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    record = json.loads(err)
    assert record["event"] == "error" and record["exit_code"] == 2
    assert record["message"] and "mpiwait: error" not in record["message"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-format", "yaml"],  # the format itself is what is wrong
        ["--timeout", "soon", "mpirun", "--log-format", "json"],  # COMMAND's, not ours
        ["--hosts", "--log-format", "--timeout", "soon"],  # --log-format is --hosts' value
    ],
)
def test_usage_errors_stay_text_otherwise(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.delenv("MPIWAIT_LOG_FORMAT", raising=False)
    assert cli.parse(argv) == ExitCode.USAGE
    assert capsys.readouterr().err.startswith("mpiwait: error: ")
