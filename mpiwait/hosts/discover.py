"""``--discover-exec``: run the discover script (no shell, with a timeout) and return its output.

The only place mpiwait runs a program before COMMAND; parsing what it printed is
hosts/hostfile.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from mpiwait.errors import InputError
from mpiwait.hosts.hostfile import repr_cut
from mpiwait.hosts.textfile import decode_text

__all__ = ["run_discover"]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(data: bytes) -> str:
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return repr_cut(lines[-1].strip()) if lines else ""


def run_discover(path: Path, timeout: float) -> str:
    """Run the discover script and return its stdout; InputError saying why if it fails."""

    def fail(reason: str) -> InputError:
        return InputError(f"discover script {path}: {reason}")

    try:
        # A new session puts the script and anything it starts in one process group, so a
        # timeout kills them all instead of leaving a grandchild holding our pipe open.
        process = subprocess.Popen(
            [os.path.abspath(path)],  # absolute: a bare name would be searched in $PATH
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except PermissionError:
        raise fail("cannot run it: permission denied (is it executable?)") from None
    except OSError as error:
        raise fail(f"cannot run it: {(error.strerror or str(error)).lower()}") from None
    with process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException as error:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
            if isinstance(error, subprocess.TimeoutExpired):
                raise fail(f"timed out after {timeout:g}s") from None
            raise
    if process.returncode != 0:
        if process.returncode < 0:
            reason = f"killed by {_signal_name(-process.returncode)}"
        else:
            reason = f"exited with status {process.returncode}"
        last = _last_line(stderr)
        raise fail(f"{reason}: {last}" if last else reason)
    return decode_text(stdout, lambda reason: fail(f"its output {reason}"))
