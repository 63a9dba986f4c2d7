"""What ``mpiwait --version`` reports: the build and the run-time a bug report needs, as data
and as text (the CLI writes the JSON form with the other JSON records).

A distribution's version is read from the name of its ``NAME-VERSION.dist-info`` directory on
sys.path: it must not import paramiko or cryptography, and importlib.metadata only as the
fallback (docs/performance.md). The commit comes from ``mpiwait/_build.py``, which a release
build writes (scripts/stamp-build); nothing here runs git.
"""

from __future__ import annotations

import os
import sys

from mpiwait import __version__, _build

# The distributions whose versions change how logins behave (paramiko's transport, the
# cryptography under it), in the order they are reported.
DEPENDENCIES = ("paramiko", "cryptography")


def dist_info_version(name: str) -> str | None:
    """The version of the first ``name`` installed on sys.path (as import would find it), from
    its dist-info directory's name; None when none is found (an egg-info install, or none)."""
    prefix = name.lower().replace("-", "_") + "-"
    for entry in sys.path:
        try:
            found = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for item in found:
            if item.endswith(".dist-info") and item.lower().startswith(prefix):
                return item[len(prefix) : -len(".dist-info")]
    return None


def _distribution_version(name: str) -> str:
    found = dist_info_version(name)
    if found is not None:
        return found
    # Imported only for an install without dist-info (egg-info): it loads email and zipfile.
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _libc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or "unknown"
    except (ValueError, OSError):  # not glibc (musl), or no such name here
        return "unknown"


def build_info() -> dict[str, str]:
    """Every field of ``--version``, as strings, in the order they are printed."""
    uname = os.uname()
    info = {
        "version": __version__,
        "commit": _build.COMMIT or "unknown",
        "commit_date": _build.COMMIT_DATE or "unknown",
        "python": f"{sys.implementation.name} {'.'.join(map(str, sys.version_info[:3]))}",
        "python_executable": sys.executable,
    }
    info.update({name: _distribution_version(name) for name in DEPENDENCIES})
    info["platform"] = f"{uname.sysname} {uname.release} {uname.machine}"
    info["libc"] = _libc()
    return info


def version_text(info: dict[str, str]) -> str:
    """The text form: click's own version line, then one ``key: value`` line a field."""
    lines = [f"mpiwait, version {info['version']}"]
    commit = info["commit"]
    if commit == "unknown":
        lines.append("commit: unknown (not a release build)")
    else:
        lines.append(f"commit: {commit} ({info['commit_date']})")
    lines.append(f"python: {info['python']} ({info['python_executable']})")
    lines.append(", ".join(f"{name}: {info[name]}" for name in DEPENDENCIES))
    lines.append(f"platform: {info['platform']}, libc {info['libc']}")
    return "\n".join(lines) + "\n"
