"""The termination log: the failure summary where Kubernetes shows it (``kubectl describe pod``)."""

from __future__ import annotations

import os
from pathlib import Path

from mpiwait.output.printable import printable

# Kubernetes keeps at most this many bytes of a termination message.
TERMINATION_LOG_BYTES = 4096


def write_termination_log(path: Path | None, lines: list[str], *, create: bool = False) -> None:
    """Leave the summary where Kubernetes shows it, if we may.

    An existing file (or character device) is written. A missing one is created only when the
    user named the path (``create``): the default /dev/termination-log exists only in a pod,
    and elsewhere is not ours to make. A dangling symlink is never followed into a new file.
    """
    if path is None:
        return
    # Bytes, not characters: one non-ASCII name would otherwise push past the limit. A
    # character cut in half at the end is dropped rather than left broken.
    data = ("\n".join(map(printable, lines)) + "\n").encode("utf-8")[:TERMINATION_LOG_BYTES]
    data = data.decode("utf-8", "ignore").encode("utf-8")
    try:
        if path.is_file() or path.is_char_device():
            path.write_bytes(data)
            return
        if not create or os.path.lexists(path):
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
    except OSError:
        return
