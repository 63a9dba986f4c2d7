"""Reading the small text files mpiwait is given (hostfile, discover file): checked to be a
regular UTF-8 text file of sane size, and every failure one InputError that says why.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from mpiwait.errors import InputError

__all__ = ["MAX_INPUT_BYTES", "decode_text", "read_optional_text_file", "read_text_file"]

_BOM = "\ufeff"

# A hostfile for 100k hosts is a few MB; anything far larger is the wrong file, and reading it
# every second while waiting would cost real time.
MAX_INPUT_BYTES = 16 * 1024 * 1024


class _Missing(Exception):
    """The file does not exist (a default path may be absent; the caller decides)."""


def _read_text(path: Path, what: str) -> str:
    def fail(reason: str) -> InputError:
        return InputError(f"{what} {path}: {reason}")

    # O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears;
    # it has no effect on the regular files we accept.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        raise _Missing from None
    except IsADirectoryError:
        raise fail("is a directory") from None
    except PermissionError:
        raise fail("permission denied") from None
    except OSError as error:
        raise fail((error.strerror or str(error)).lower()) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise fail("is a directory")
        if not stat.S_ISREG(info.st_mode):
            # A pipe could be read once, but sources are re-read every second.
            raise fail("is not a regular file")
        if info.st_size > MAX_INPUT_BYTES:
            raise fail(f"too large ({info.st_size} bytes; the limit is {MAX_INPUT_BYTES})")
        with os.fdopen(fd, "rb", closefd=True) as stream:
            fd = -1
            # One byte over the limit tells a file that grew after fstat from one that fits.
            data = stream.read(MAX_INPUT_BYTES + 1)
    except OSError as error:
        raise fail((error.strerror or str(error)).lower()) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise fail(f"too large (more than {MAX_INPUT_BYTES} bytes)")
    return decode_text(data, fail)


def decode_text(data: bytes, fail: Callable[[str], InputError]) -> str:
    """``data`` as UTF-8 text without a BOM; ``fail(reason)`` is raised for binary data."""
    if b"\0" in data:
        raise fail("looks binary (contains NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise fail(f"looks binary (not UTF-8: byte {error.start})") from None
    return text[1:] if text.startswith(_BOM) else text


def read_text_file(path: Path, *, what: str) -> str:
    """The UTF-8 text of a small input file (BOM removed); InputError saying why if not."""
    try:
        return _read_text(path, what)
    except _Missing:
        raise InputError(f"{what} {path}: does not exist") from None


def read_optional_text_file(path: Path, what: str, explicit: bool) -> str | None:
    """As read_text_file, but None when the file does not exist and the user did not name it
    (``explicit``): a default path such as /etc/mpi/discover_hosts.sh may be absent."""
    try:
        return _read_text(path, what)
    except _Missing:
        if explicit:
            raise InputError(f"{what} {path}: does not exist") from None
        return None
