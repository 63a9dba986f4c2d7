"""Where mpiwait keeps what it remembers between runs (the --list-ready cache, the sshd
penalty accounts of probe/pace.py): a directory only this uid can write, in
``$XDG_RUNTIME_DIR``, else ``/dev/shm`` (a tmpfs in every container, writable even with a
read-only root filesystem), else the temporary directory. Apart from readycache.py, so
that the wait does not load the cache's classes to find the directory."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping


def _private_dir(base: str) -> str | None:
    """``base/mpiwait-<uid>``, made 0700 if missing, or None when it is not safely ours.

    /dev/shm and /tmp are shared by every uid: a directory someone else made (or a symlink
    they planted) could feed us "ready" for hosts that are not, so it must be ours and closed.
    """
    if not base or not os.path.isabs(base):
        return None
    path = os.path.join(base, f"mpiwait-{os.getuid()}")
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(path, 0o700)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or info.st_mode & 0o077
        or not os.access(path, os.W_OK | os.X_OK)
    ):
        return None
    return path


def cache_dir(environ: Mapping[str, str]) -> str | None:
    """The first usable place for the file, or None (then nothing is remembered)."""
    temporary = environ.get("TMPDIR") or "/tmp"
    for base in (environ.get("XDG_RUNTIME_DIR", ""), "/dev/shm", temporary):
        found = _private_dir(base)
        if found is not None:
            return found
    return None
