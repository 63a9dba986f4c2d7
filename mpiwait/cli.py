"""Command line and MPIWAIT_* environment → Settings; our error types → exit codes.

This module is the only one that knows click. Everything after parsing is ``run(settings)``,
which wires sources → hosts → probes → waiter → report → exec and returns an exit status.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
from pathlib import Path

import click

from mpiwait.errors import ExitCode, Interrupted, MpiwaitError, interrupted_status
from mpiwait.settings import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DISCOVER_HOSTS,
    DEFAULT_HOSTFILE,
    DEFAULT_PARALLEL,
    DEFAULT_PROBE_RATE,
    DEFAULT_RECHECK_AFTER,
    DEFAULT_RETRY_INITIAL,
    DEFAULT_RETRY_MAX,
    DEFAULT_TERMINATION_LOG,
    DEFAULT_TIMEOUT,
    Check,
    LogFormat,
    Settings,
)

CONTEXT = {
    "auto_envvar_prefix": "MPIWAIT",
    # Everything from the first non-option on is the COMMAND's, untouched; an unknown option
    # before it is an error rather than a COMMAND named "--bogus".
    "allow_interspersed_args": False,
    "help_option_names": ["-h", "--help"],
    "max_content_width": 100,
}

EPILOG = """\b
Exit status: 0 ready (or COMMAND's own status after exec), 2 bad input or option,
3 permanent failure (key rejected, host key mismatch, unusable key file), 124 deadline passed,
126 COMMAND not executable (or its ssh cannot run: uid without passwd entry),
127 COMMAND (or the ssh it needs) not found, 130/143 interrupted by SIGINT/SIGTERM.
Every option can also be set as MPIWAIT_<OPTION> (e.g. MPIWAIT_TIMEOUT=300); flags win.
"""


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    # float() takes "nan" and "inf", and every range check lets NaN through; neither is a
    # number of seconds (NaN would fail every probe inside a thread, inf overflows a timeout).
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, not {value:g}", ctx, param)
    return value


def _positive(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    value = _finite(ctx, param, value)
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be greater than 0, not {value:g}", ctx, param)
    return value


class _WordList(click.Path):
    """A path option whose environment variable holds several paths separated by blanks."""

    envvar_list_splitter = None  # type: ignore[assignment]


@click.command(context_settings=CONTEXT, epilog=EPILOG)
@click.option(
    "--hostfile",
    type=click.Path(path_type=Path),
    default=DEFAULT_HOSTFILE,
    show_default=True,
    help="MPI hostfile listing every worker (Open MPI `host slots=N`, MPICH/Intel `host:N`).",
)
@click.option(
    "--discover-hosts",
    type=click.Path(path_type=Path),
    default=DEFAULT_DISCOVER_HOSTS,
    show_default=True,
    help="mpi-operator's discover_hosts.sh, re-read every second and parsed as data.",
)
@click.option(
    "--discover-exec",
    is_flag=True,
    help="Run the discover file (with a timeout) and parse its stdout as host[:slots] lines.",
)
@click.option(
    "--hosts",
    "hosts_option",
    # Named after the option, not the parameter: auto_envvar_prefix would say MPIWAIT_HOSTS_OPTION.
    envvar="MPIWAIT_HOSTS",
    metavar="H1,H2,...",
    help="Explicit hosts; the files are not read.",
)
@click.option(
    "--include-self",
    is_flag=True,
    help="Put entries that name this machine through the full check; by default only their "
    "name must resolve (no login to itself).",
)
@click.option(
    "--check",
    type=click.Choice([c.value for c in Check]),
    default=Check.SSH.value,
    show_default=True,
    help="How far each host must get: name resolves, port accepts, or SSH login succeeds.",
)
@click.option(
    "-F", "--ssh-config", type=click.Path(path_type=Path), help="Read only this ssh config file."
)
@click.option("-p", "--port", type=click.IntRange(1, 65535), help="SSH port (overrides config).")
@click.option("-l", "--user", help="SSH user (overrides config).")
@click.option(
    "-i",
    "--identity-file",
    "identity_files",
    envvar="MPIWAIT_IDENTITY_FILE",  # not MPIWAIT_IDENTITY_FILES, the parameter's name
    # readable=False: an unreadable key is probe/keys.py's to report (exit 3, with a hint about the
    # volume's mode), not click's "Path ... is not readable" (exit 2, no hint).
    type=_WordList(path_type=Path, readable=False),
    multiple=True,
    help="Private key (repeatable; replaces the config's and the defaults; "
    "MPIWAIT_IDENTITY_FILE takes several separated by spaces).",
)
@click.option("--remote-command", metavar="CMD", help="Also run CMD on each host; it must exit 0.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    callback=_finite,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Overall deadline in seconds; 0 waits forever.",
)
@click.option(
    "--connect-timeout",
    type=float,
    callback=_positive,
    help=f"Seconds per attempt and stage [default: ssh ConnectTimeout, else "
    f"{DEFAULT_CONNECT_TIMEOUT:g}]",
)
@click.option(
    "--retry-initial",
    type=float,
    callback=_positive,
    help="First backoff window in seconds (full jitter, doubling) [default: "
    f"{DEFAULT_RETRY_INITIAL:g}; without either --retry option, the probe budget decides "
    "within the window]",
)
@click.option(
    "--retry-max",
    type=float,
    callback=_positive,
    help=f"Largest backoff window in seconds [default: {DEFAULT_RETRY_MAX:g}]",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 4096),
    default=DEFAULT_PARALLEL,
    show_default=True,
    help="Most probes in flight at once.",
)
@click.option(
    "--probe-rate",
    type=click.FloatRange(min=0),
    callback=_finite,
    default=DEFAULT_PROBE_RATE,
    show_default=True,
    help="Most probes started per second, all hosts together; 0: no limit.",
)
@click.option(
    "--recheck-after",
    type=click.FloatRange(min=0),
    callback=_finite,
    default=DEFAULT_RECHECK_AFTER,
    show_default=True,
    help="Before the launch, check again the hosts that passed more than S seconds ago; 0: never.",
    metavar="S",
)
@click.option("--dry-run", is_flag=True, help="Print hosts and SSH settings, then exit.")
@click.option(
    "--list-ready",
    is_flag=True,
    help="Print the hosts that pass the check now as host[:slots] lines on stdout and exit 0, "
    "without waiting (for horovodrun --host-discovery-script).",
)
@click.option(
    "--log-format",
    type=click.Choice([f.value for f in LogFormat]),
    default=LogFormat.TEXT.value,
    show_default=True,
    help="Text lines for people, or JSON lines.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors and the final summary.")
@click.option(
    "--termination-log",
    type=click.Path(path_type=Path, readable=False),  # only ever written
    default=DEFAULT_TERMINATION_LOG,
    show_default=True,
    help="Where to leave the failure summary for `kubectl describe pod` (the default only if "
    "it exists; a path given is created).",
)
@click.option(
    "--launch-env/--no-launch-env",
    default=True,
    show_default=True,
    help="Hand an MPI COMMAND what the wait learned: hydra's interface (Intel MPI, MPICH), "
    "Open MPI 5's names for the operators' OMPI_MCA_orte_* variables, MPICH's "
    "HYDRA_LAUNCHER_EXTRA_ARGS; each logged. Off: COMMAND's environment stays as it is.",
)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: _print_version(ctx, value),
    help="Print the version, the commit it was built from, Python, paramiko, cryptography and "
    "the platform, then exit (one JSON object with --log-format json).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def command_line(ctx: click.Context, **params: object) -> Settings:
    """Wait until every MPI worker accepts an SSH login, then exec COMMAND.

    Hosts come from the hostfile and discover_hosts.sh that mpi-operator mounts at /etc/mpi,
    or from --hosts. SSH settings come from ssh_config, as for mpirun's own ssh. Without
    COMMAND, exit 0 once all are ready (for an initContainer). With K_MPI_JOB_ROLE set to
    anything but "launcher", exec COMMAND at once.
    """
    _check_together(ctx, params)

    def explicit(name: str) -> bool:
        return ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT

    return Settings(
        command=tuple(params["command"]),  # type: ignore[arg-type]
        hostfile=params["hostfile"],  # type: ignore[arg-type]
        hostfile_explicit=explicit("hostfile"),
        discover_hosts=params["discover_hosts"],  # type: ignore[arg-type]
        discover_explicit=explicit("discover_hosts"),
        discover_exec=bool(params["discover_exec"]),
        hosts_option=params["hosts_option"],  # type: ignore[arg-type]
        include_self=bool(params["include_self"]),
        check=Check(params["check"]),
        ssh_config=params["ssh_config"],  # type: ignore[arg-type]
        port=params["port"],  # type: ignore[arg-type]
        user=params["user"],  # type: ignore[arg-type]
        identity_files=tuple(params["identity_files"]),  # type: ignore[arg-type]
        remote_command=params["remote_command"],  # type: ignore[arg-type]
        timeout=float(params["timeout"]),  # type: ignore[arg-type]
        connect_timeout=params["connect_timeout"],  # type: ignore[arg-type]
        retry_initial=params["retry_initial"],  # type: ignore[arg-type]
        retry_max=params["retry_max"],  # type: ignore[arg-type]
        parallel=int(params["parallel"]),  # type: ignore[call-overload]
        probe_rate=float(params["probe_rate"]),  # type: ignore[arg-type]
        recheck_after=float(params["recheck_after"]),  # type: ignore[arg-type]
        dry_run=bool(params["dry_run"]),
        list_ready=bool(params["list_ready"]),
        log_format=LogFormat(params["log_format"]),
        quiet=bool(params["quiet"]),
        termination_log=params["termination_log"],  # type: ignore[arg-type]
        termination_log_explicit=explicit("termination_log"),
        launch_env=bool(params["launch_env"]),
    )


def _print_version(ctx: click.Context, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from mpiwait import about

    info = about.build_info()
    argv = ctx.obj if isinstance(ctx.obj, list) else []
    text = about.version_json(info) if _asks_for_json(argv) else about.version_text(info)
    click.echo(text, nl=False)
    ctx.exit()


def _check_together(ctx: click.Context, params: dict[str, object]) -> None:
    """Options each valid alone that cannot go together."""
    retry_initial = params["retry_initial"] or DEFAULT_RETRY_INITIAL
    retry_max = params["retry_max"] or DEFAULT_RETRY_MAX
    if retry_max < retry_initial:  # type: ignore[operator]
        raise click.BadParameter(
            f"--retry-max ({retry_max:g}) is smaller than --retry-initial ({retry_initial:g})",
            ctx,
        )
    if params["list_ready"] and params["command"]:
        raise click.UsageError(
            "--list-ready takes no COMMAND (it prints hosts for horovodrun to read)", ctx
        )
    if params["list_ready"] and params["dry_run"]:
        raise click.UsageError("--list-ready and --dry-run cannot be combined", ctx)


def parse(argv: list[str]) -> Settings | int:
    """Settings, or the exit status when parsing already answered (help, version, error)."""
    try:
        result = command_line.main(args=argv, prog_name="mpiwait", standalone_mode=False, obj=argv)
    except click.exceptions.UsageError as exc:
        message = exc.format_message().replace("\n", " ")
        envvar = _bad_envvar(exc, argv)
        if envvar:
            message = f"{message} (from {envvar})"
        if _asks_for_json(argv):
            # A program reading the JSON lines must not meet one line of plain text.
            from mpiwait.output.report import Reporter

            Reporter(LogFormat.JSON).error(message, "see mpiwait --help", exit_code=ExitCode.USAGE)
        else:
            sys.stderr.write(f"mpiwait: error: {message} (see mpiwait --help)\n")
        return ExitCode.USAGE
    except click.exceptions.Abort:  # click's own KeyboardInterrupt
        return interrupted_status("SIGINT")
    except click.exceptions.Exit as exc:
        return exc.exit_code
    if isinstance(result, Settings):
        return result
    return int(result or 0)


def _asks_for_json(argv: list[str]) -> bool:
    """Whether the options (not COMMAND) choose --log-format json, by flag or environment.

    Read from the words themselves, since the parse that failed may not have reached it.
    """
    takes_value = {
        opt
        for param in command_line.params
        if isinstance(param, click.Option) and not param.is_flag and not param.count
        for opt in param.opts
    }
    choice: str | None = None
    words = iter(argv)
    for word in words:
        if word == "--" or not word.startswith("-") or word == "-":
            break
        name, equals, value = word.partition("=")
        if name == "--log-format":
            choice = value if equals else next(words, "")
        elif not equals and word in takes_value:
            next(words, None)
    if choice is None:
        choice = os.environ.get("MPIWAIT_LOG_FORMAT", "")
    return choice == LogFormat.JSON.value


def _bad_envvar(exc: click.exceptions.UsageError, argv: list[str]) -> str | None:
    """The MPIWAIT_* variable a bad value came from, when no flag for it is on the line.

    click names only the option ("Invalid value for '--timeout'"), which misleads whoever
    set MPIWAIT_TIMEOUT and never typed --timeout.
    """
    param = getattr(exc, "param", None)
    if not isinstance(param, click.Option) or exc.ctx is None:
        return None
    name = param.envvar if isinstance(param.envvar, str) else None
    if name is None and exc.ctx.auto_envvar_prefix and param.name:
        name = f"{exc.ctx.auto_envvar_prefix}_{param.name.upper()}"
    if not name or name not in os.environ:
        return None
    for arg in argv:
        for opt in param.opts + param.secondary_opts:
            if arg == opt or arg.startswith(opt + "=") or (len(opt) == 2 and arg.startswith(opt)):
                return None
    return name


def main(argv: list[str] | None = None) -> None:
    """Console entry point: never returns normally and never shows a traceback for our errors."""
    args = sys.argv[1:] if argv is None else argv
    parsed = parse(args)
    if not isinstance(parsed, Settings):
        sys.exit(int(parsed))

    def on_signal(signum: int, _frame: object) -> None:
        # Raised in the main thread wherever it is (file read, preflight, the waiting loop);
        # the waiter turns it into a summary of who was not ready yet.
        raise Interrupted(signum, signal.Signals(signum).name)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        from mpiwait.modes.wait import run

        status = run(parsed, os.environ)
    except MpiwaitError as exc:
        status = int(exc.exit_code)
        _one_line_error(parsed, exc.message, exc.hint, status)
    except Interrupted as exc:
        status = exc.exit_code
    except Exception as exc:  # a bug: one line, and the traceback only on request
        if os.environ.get("MPIWAIT_DEBUG"):
            raise
        status = ExitCode.INTERNAL
        _one_line_error(
            parsed,
            f"internal error: {type(exc).__name__}: {exc}",
            "please report it; MPIWAIT_DEBUG=1 shows the traceback",
            status,
        )
    _exit(int(status))


def _one_line_error(settings: Settings, message: str, hint: str | None, status: int) -> None:
    # Through the Reporter, so that with --log-format json an error (a bad key file, a COMMAND
    # that is not found, a malformed hostfile) is a JSON line like every other, not plain text.
    from mpiwait.output.report import Reporter

    Reporter(settings.log_format).error(message, hint, exit_code=status)


def _exit(status: int) -> None:
    # Probe threads may sit in a connect or a name lookup; they must not delay the exit, and
    # interpreter teardown around them is needless work: flush and leave.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os._exit(status)
