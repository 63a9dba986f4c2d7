"""Command line and MPIWAIT_* environment → one Run (every default applied here, once); our
error types → exit codes.

This module is the only one that knows click. ``main`` parses, then hands the Run to its mode
(``run_mode``: modes/wait.py, list_ready.py or dry_run.py) and turns what comes back into an
exit status.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import click

from mpiwait import about
from mpiwait.errors import ExitCode, Interrupted, MpiwaitError, interrupted_status
from mpiwait.output.termination import write_termination_log
from mpiwait.settings import (
    BACKOFF_DOUBLING,
    BACKOFF_GRACE,
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

    def split_envvar_value(self, rv: str) -> Sequence[str]:
        return rv.split()


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
    help="While others are missing, check a host that passed again S/2 to S seconds after each "
    "pass, so that none is more than S seconds past its last check at the launch; 0: never.",
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
    "--daemon-check/--no-daemon-check",
    default=True,
    show_default=True,
    help="With an MPI COMMAND, also check on each worker, over the same login, that the daemon "
    "mpirun will start there (orted, prted, hydra's proxy) is where it will look, through the "
    "workers' own ssh where Open MPI's tree spawn will start it; a miss exits 3.",
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
def command_line(
    ctx: click.Context,
    /,
    *,
    command: tuple[str, ...],
    hostfile: Path,
    discover_hosts: Path,
    discover_exec: bool,
    hosts_option: str | None,
    include_self: bool,
    check: str,
    ssh_config: Path | None,
    port: int | None,
    user: str | None,
    identity_files: tuple[Path, ...],
    remote_command: str | None,
    timeout: float,
    connect_timeout: float | None,
    retry_initial: float | None,
    retry_max: float | None,
    parallel: int,
    probe_rate: float,
    recheck_after: float,
    dry_run: bool,
    list_ready: bool,
    log_format: str,
    quiet: bool,
    termination_log: Path,
    launch_env: bool,
    daemon_check: bool,
) -> Run:
    """Wait until every MPI worker accepts an SSH login, then exec COMMAND.

    Hosts come from the hostfile and discover_hosts.sh that mpi-operator mounts at /etc/mpi,
    or from --hosts. SSH settings come from ssh_config, as for mpirun's own ssh. Without
    COMMAND, exit 0 once all are ready (for an initContainer). With K_MPI_JOB_ROLE set to
    anything but "launcher", exec COMMAND at once.
    """
    _check_retry_window(ctx, retry_initial, retry_max)
    if list_ready and command:
        raise click.UsageError(
            "--list-ready takes no COMMAND (it prints hosts for horovodrun to read)", ctx
        )
    if list_ready and dry_run:
        raise click.UsageError("--list-ready and --dry-run cannot be combined", ctx)

    def explicit(name: str) -> bool:
        # Named by the user (flag or MPIWAIT_*), even as the default's value: a missing
        # hostfile is then an error, a missing termination log is created.
        return ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT

    return Run(
        mode=Mode.LIST_READY if list_ready else Mode.DRY_RUN if dry_run else Mode.WAIT,
        command=tuple(command),
        launch_env=launch_env,
        daemon_check=daemon_check,
        sources=SourceOptions(
            hostfile=hostfile,
            hostfile_explicit=explicit("hostfile"),
            discover_hosts=discover_hosts,
            discover_explicit=explicit("discover_hosts"),
            discover_exec=discover_exec,
            hosts_option=hosts_option,
            include_self=include_self,
        ),
        probe=ProbeOptions(
            check=Check(check),
            ssh_config=ssh_config,
            port=port,
            user=user,
            identity_files=tuple(identity_files),
            remote_command=remote_command,
            connect_timeout=connect_timeout,
        ),
        wait=WaitPolicy(
            timeout=float(timeout),
            budget=Budget(parallel, float(probe_rate)),
            retry=_retry_policy(retry_initial, retry_max),
            reread_interval=SOURCE_REREAD_INTERVAL,
            permanent_after=PERMANENT_FAILURES_BEFORE_EXIT,
            status_interval=STATUS_INTERVAL,
            recheck_after=float(recheck_after) or math.inf,  # 0: never
        ),
        output=OutputOptions(
            log_format=LogFormat(log_format),
            quiet=quiet,
            termination_log=termination_log,
            create_termination_log=explicit("termination_log"),
        ),
    )


def _print_version(ctx: click.Context, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    info = about.build_info()
    argv = ctx.obj if isinstance(ctx.obj, list) else []
    if _chosen_log_format(argv) is LogFormat.JSON:
        from mpiwait.output.jsonl import json_record  # the JSON writer only for JSON

        click.echo(json_record("version", **info))
    else:
        click.echo(about.version_text(info), nl=False)
    ctx.exit()


def _check_retry_window(
    ctx: click.Context, retry_initial: float | None, retry_max: float | None
) -> None:
    """--retry-max below --retry-initial (either given, the other its default) is no window."""
    initial = retry_initial or DEFAULT_RETRY_INITIAL
    maximum = retry_max or DEFAULT_RETRY_MAX
    if maximum < initial:
        raise click.BadParameter(
            f"--retry-max ({maximum:g}) is smaller than --retry-initial ({initial:g})", ctx
        )


def _retry_policy(retry_initial: float | None, retry_max: float | None) -> RetryPolicy:
    """Neither --retry option: the budget-following schedule under the default envelope; either
    given: full-jitter backoff over that window."""
    return RetryPolicy(
        initial=retry_initial or DEFAULT_RETRY_INITIAL,
        maximum=retry_max or DEFAULT_RETRY_MAX,
        floor_dns=RETRY_FLOOR_DNS,
        floor_tcp=RETRY_FLOOR_TCP,
        floor_ssh=RETRY_FLOOR_SSH,
        grace=BACKOFF_GRACE,
        doubling=BACKOFF_DOUBLING,
        follow_budget=retry_initial is None and retry_max is None,
    )


def parse(argv: list[str]) -> Run | int:
    """The Run, or the exit status when parsing already answered (help, version, error)."""
    try:
        result = command_line.main(args=argv, prog_name="mpiwait", standalone_mode=False, obj=argv)
    except click.exceptions.UsageError as exc:
        message = exc.format_message().replace("\n", " ")
        envvar = _bad_envvar(exc, argv)
        if envvar:
            message = f"{message} (from {envvar})"
        if _chosen_log_format(argv) is LogFormat.JSON:
            # A program reading the JSON lines must not meet one line of plain text.
            from mpiwait.output.jsonl import JsonEvents  # the JSON writer only for JSON

            JsonEvents().error(message, "see mpiwait --help", exit_code=ExitCode.USAGE)
        else:
            sys.stderr.write(f"mpiwait: error: {message} (see mpiwait --help)\n")
        return ExitCode.USAGE
    except click.exceptions.Abort:  # click's own KeyboardInterrupt
        return interrupted_status("SIGINT")
    except click.exceptions.Exit as exc:
        return exc.exit_code
    if isinstance(result, Run):
        return result
    return int(result or 0)


def _chosen_log_format(argv: list[str]) -> LogFormat:
    """The --log-format the options (not COMMAND) or MPIWAIT_LOG_FORMAT choose, also when the
    parse failed: click's resilient parsing reads what it can, passing over bad values and
    unknown options, and stops at COMMAND."""
    with command_line.make_context(
        "mpiwait", list(argv), resilient_parsing=True, ignore_unknown_options=True
    ) as ctx:
        chosen = ctx.params.get("log_format")
    return LogFormat(chosen) if chosen else LogFormat.TEXT


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
    run = parse(args)
    if not isinstance(run, Run):
        sys.exit(int(run))

    def on_signal(signum: int, _frame: object) -> None:
        # Raised in the main thread wherever it is (file read, preflight, the waiting loop);
        # the waiter turns it into a summary of who was not ready yet.
        raise Interrupted(signum, signal.Signals(signum).name)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        status = run_mode(run, os.environ)
    except MpiwaitError as exc:
        status = int(exc.exit_code)
        _leave_termination_log(run, exc)
        _one_line_error(run.output, exc.message, exc.hint, status)
    except Interrupted as exc:
        status = exc.exit_code
    except Exception as exc:  # a bug: one line, and the traceback only on request
        if os.environ.get("MPIWAIT_DEBUG"):
            raise
        status = ExitCode.INTERNAL
        _one_line_error(
            run.output,
            f"internal error: {type(exc).__name__}: {exc}",
            "please report it; MPIWAIT_DEBUG=1 shows the traceback",
            status,
        )
    _exit(int(status))


def run_mode(run: Run, environ: Mapping[str, str]) -> int:
    """The run's mode, by its one entry function."""
    # Each mode is imported only when it runs: --help, --version and usage errors load none.
    if run.mode is Mode.LIST_READY:
        from mpiwait.modes.list_ready import list_ready

        return list_ready(run, environ)
    if run.mode is Mode.DRY_RUN:
        from mpiwait.modes.dry_run import dry_run

        return dry_run(run, environ)
    from mpiwait.modes.wait import wait_and_exec

    return wait_and_exec(run, environ)


def _one_line_error(output: OutputOptions, message: str, hint: str | None, status: int) -> None:
    # Through the Reporter, so that with --log-format json an error (a bad key file, a COMMAND
    # that is not found, a malformed hostfile) is a JSON line like every other, not plain text.
    from mpiwait.output.report import Reporter  # not loaded by --help, --version, usage errors

    Reporter(output.log_format).error(message, hint, exit_code=status)


def _leave_termination_log(run: Run, exc: MpiwaitError) -> None:
    """A failure found before or after the wait (an unusable key file, a COMMAND that is not
    there, a malformed hostfile) ends the container just as a deadline does: Kubernetes shows
    the reason in `kubectl describe pod` only if it is in the termination log. Not for
    --list-ready: horovodrun runs it every second and reports its failures itself."""
    if run.mode is Mode.LIST_READY:
        return
    lines = [f"error: {exc.message}"] + ([f"hint: {exc.hint}"] if exc.hint else [])
    output = run.output
    write_termination_log(output.termination_log, lines, create=output.create_termination_log)


def _exit(status: int) -> None:
    # Probe threads may sit in a connect or a name lookup; they must not delay the exit, and
    # interpreter teardown around them is needless work: flush and leave.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os._exit(status)
