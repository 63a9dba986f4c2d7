"""Shared fixtures. The multi-host test bed lives in tests/testbed.py (see its docstring)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import testbed

_BED_PROBLEM = testbed.missing_requirements()

# Usable as a decorator or in `pytestmark`; tests marked `@pytest.mark.root` and tests using the
# `bed` fixture are skipped for the same reason automatically.
requires_root_netns = pytest.mark.skipif(
    _BED_PROBLEM is not None, reason=f"multi-host test bed unavailable: {_BED_PROBLEM}"
)

requires_openmpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or shutil.which("orted") is None,
    reason="Open MPI (mpirun, orted) not installed",
)
requires_mpich = pytest.mark.skipif(
    shutil.which("mpiexec.hydra") is None, reason="MPICH (mpiexec.hydra) not installed"
)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _BED_PROBLEM is not None and item.get_closest_marker("root") is not None:
        pytest.skip(f"multi-host test bed unavailable: {_BED_PROBLEM}")


@pytest.fixture(scope="session")
def _stale_beds_cleaned() -> None:
    if _BED_PROBLEM is None:
        testbed.cleanup_stale()


@pytest.fixture
def bed(tmp_path: Path, _stale_beds_cleaned: None):
    """Factory: ``b = bed(3, port=2222, user="mpiuser", ...)`` returns a TestBed that is up
    (same keywords as TestBed; a free /24 is picked unless ``index=`` is given). Every bed made
    is torn down after the test, pass or fail."""
    if _BED_PROBLEM is not None:
        pytest.skip(f"multi-host test bed unavailable: {_BED_PROBLEM}")
    made: list[testbed.TestBed] = []

    def make(n: int = 3, **kw) -> testbed.TestBed:
        kw.setdefault("workdir", tmp_path / f"bed{len(made)}")
        b = testbed.TestBed(n, **kw)
        made.append(b)
        b.up()
        return b

    yield make
    for b in reversed(made):
        b.down()


@pytest.fixture
def as_user(tmp_path: Path):
    """Factory: ``wrap, drop = as_user("mpiuser")``; ``[*wrap, *drop, sys.executable, ...]``
    runs this interpreter as that user (as root only), with the checkout importable when
    PYTHONPATH names it. ``drop`` is setpriv to the user plus HOME/USER/LOGNAME. ``wrap`` is
    empty, or, where a directory on the way to the interpreter, its packages or the checkout
    is closed to others (pyenv under a 0700 /root, a clone in /root), a private mount namespace
    in which that directory is replaced by a traversable one holding bind mounts of just the
    entries needed; commands after ``wrap`` still run as root (e.g. a bed's launcher_cmd with
    ``as_user``). Skips the test when the user still cannot import mpiwait."""
    import os
    import pwd
    import shlex
    import subprocess

    repo = Path(__file__).resolve().parent.parent

    def make(user: str) -> tuple[list[str], list[str]]:
        pw = pwd.getpwnam(user)
        needed = {os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, str(repo)}
        needed |= {p for p in sys.path if os.path.isabs(p) and os.path.exists(p)}
        blocked: dict[str, set[str]] = {}
        for path in needed:
            parts = Path(os.path.realpath(path)).parts
            for depth in range(1, len(parts)):
                parent = Path(*parts[:depth])
                st = parent.stat()
                if not st.st_mode & (0o100 if st.st_uid == pw.pw_uid else 0o001):
                    blocked.setdefault(str(parent), set()).add(parts[depth])
                    break
        script = []
        for k, (parent, children) in enumerate(sorted(blocked.items())):
            stage = tmp_path / f"as-user-{user}-{k}"
            stage.mkdir(parents=True)
            stage.chmod(0o755)
            for child in sorted(children):
                src, dst = Path(parent) / child, stage / child
                dst.mkdir() if src.is_dir() else dst.touch()
                script.append(f"mount --bind {shlex.quote(str(src))} {shlex.quote(str(dst))}")
            script.append(f"mount --rbind {shlex.quote(str(stage))} {shlex.quote(parent)}")
        wrap = []
        if script:
            wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c"]
            wrap += [" && ".join([*script, 'exec "$@"']), "as-user"]
        drop = [
            "setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups",
            "env", f"HOME={pw.pw_dir}", f"USER={user}", f"LOGNAME={user}",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(repo)}
        check = subprocess.run(
            [*wrap, *drop, sys.executable, "-c", "import mpiwait, paramiko, click, tenacity"],
            env=env, capture_output=True, text=True, timeout=60, cwd="/",
        )  # fmt: skip
        if check.returncode != 0:
            pytest.skip(f"{user} cannot run {sys.executable} with mpiwait: {check.stderr[-300:]}")
        return wrap, drop

    return make
