"""What the unit tier builds mpiwait's inputs from: fake installs, an SSH target."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpiwait.openssh.config import SSHTarget


def fake_install(root: Path, *files: str, links: dict[str, str] | None = None) -> Path:
    """A folder with these (executable, empty) files and symlinks: an install to look at."""
    root.mkdir(parents=True, exist_ok=True)
    for f in files:
        p = root / f
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
    for name, target in (links or {}).items():
        (root / name).symlink_to(target)
    return root


def ssh_target(**changes: Any) -> SSHTarget:
    """mpiwait's SSHTarget for w1 (w1.example:22 as mpiuser, default identities, host keys not
    checked), with ``changes``. Imported here, not at the top: the test bed is stdlib only."""
    from mpiwait.openssh.config import SSHTarget

    fields: dict[str, Any] = {
        "host": "w1",
        "address": "w1.example",
        "port": 22,
        "user": "mpiuser",
        "identity_files": (),
        "identities_default": True,
        "strict_host_key_checking": "no",
        "known_hosts_files": (),
        "connect_timeout": None,
        "config_files": (),
    }
    return SSHTarget(**(fields | changes))
