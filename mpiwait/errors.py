"""Error types and exit codes.

Expected failures are exceptions of our own (carrying their exit code) so that the CLI can turn
each into one line and a distinct status; anything else is a bug and is reported as such.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    INTERNAL = 1  # a bug in mpiwait: never an expected outcome
    USAGE = 2  # bad option, unreadable or malformed input file
    PERMANENT = 3  # configuration that waiting will not fix (key rejected, bad key file, ...)
    TIMEOUT = 124  # the deadline passed; same code as timeout(1), wait-for-it, wait4x
    NOT_EXECUTABLE = 126  # shell convention
    NOT_FOUND = 127  # shell convention
    SIGINT = 130  # 128 + SIGINT
    SIGTERM = 143  # 128 + SIGTERM


class MpiwaitError(Exception):
    """An expected failure: shown to the user as one line, mapped to ``exit_code``."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class InputError(MpiwaitError):
    """Bad input: an option, or a file that is unreadable or has a malformed line (exit 2)."""

    exit_code = ExitCode.USAGE


class PermanentError(MpiwaitError):
    """A configuration problem that time will not fix (exit 3)."""

    exit_code = ExitCode.PERMANENT


class LaunchError(MpiwaitError):
    """The COMMAND cannot be run (exit 126 or 127)."""

    def __init__(self, message: str, exit_code: ExitCode, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = exit_code


def interrupted_status(signal_name: str | None) -> ExitCode:
    """The exit status of a run ended by a signal, wherever the run noticed it (the handler's
    exception, the waiter's result, click's Abort): 128 + the signal's number, as a shell says.

    Only SIGINT and SIGTERM are handled; anything else (no name known) counts as SIGINT.
    """
    return ExitCode.SIGTERM if signal_name == "SIGTERM" else ExitCode.SIGINT


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived while waiting; raised from the signal handler."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name

    @property
    def exit_code(self) -> ExitCode:
        return interrupted_status(self.name)
