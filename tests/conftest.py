"""Shared fixtures. The test bed library is the package tests/testbed/ (see its docstring)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

import testbed
from testbed import leaks

# No per-example deadline: the property tests check logic, not time, and a loaded 2-core
# machine can exceed hypothesis's 200 ms default on any of them.
hypothesis_settings.register_profile("mpiwait", deadline=None)
hypothesis_settings.load_profile("mpiwait")

STRICT_ENV = testbed._needs.STRICT_ENV
STRICT = testbed.strict_mode()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "may_skip(reason): this test may skip even in strict mode (CI), because its skip means "
        "'not applicable here', never 'a requirement is missing'; the reason says why",
    )
    config.addinivalue_line(
        "markers",
        "needs(*names): what the test needs from the machine (testbed.needs; the table in "
        "tests/testbed/_needs.py): missing, it skips (in strict mode, fails) naming its install",
    )


# A test's tier is its folder under tests/, and a mark of the same name (registered in
# pyproject.toml) it carries without writing it: `-m "unit and not slow"`, `-m "not lint"`.
# What a tier costs per run is in docs/testing.md (scripts/suite-times).
TIERS = {
    tier: tier
    for tier in ("unit", "lint", "integration", "e2e", "pythons", "containers", "cluster")
}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path)).resolve()
        if path.is_relative_to(TESTS) and path.relative_to(TESTS).parts[0] in TIERS:
            item.add_marker(TIERS[path.relative_to(TESTS).parts[0]])


def pytest_report_header(config: pytest.Config) -> str:
    if STRICT:
        return f"strict mode ({STRICT}): a skipped test fails the run, naming what was missing"
    return f"skips allowed (set {STRICT_ENV}=1, or CI=true, to make them failures)"


def _strict_failure(reason: object) -> str:
    if isinstance(reason, tuple) and len(reason) == 3:  # (file, line, "Skipped: why")
        reason = reason[2]
    return (
        f"strict mode ({STRICT}): skipped, but in CI nothing may be skipped: {reason}\n"
        "Install what is missing ('sudo ./scripts/test' does, as .ci/run) or, only where the "
        "skip means 'not applicable', mark the test @pytest.mark.may_skip(reason)."
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    # A skip means "a requirement is missing" (root, namespaces, sshd, an MPI, a container
    # engine, a test extra): in strict mode that must fail the run instead of passing it.
    outcome = yield
    rep = outcome.get_result()
    if not STRICT or not rep.skipped or hasattr(rep, "wasxfail"):
        return
    marker = item.get_closest_marker("may_skip")
    if marker is not None:
        if not (marker.args and str(marker.args[0]).strip()):
            rep.outcome, rep.longrepr = "failed", "@pytest.mark.may_skip needs a reason"
        return
    rep.outcome, rep.longrepr = "failed", _strict_failure(rep.longrepr)


_SESSION_PROBLEMS = pytest.StashKey[list[str]]()  # what fails the session at its end


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    # A whole module skipped at import (pytest.importorskip at module level) counts as well; it
    # fails the session at its end rather than interrupting the collection of everything else.
    outcome = yield
    rep = outcome.get_result()
    if STRICT and rep.skipped:
        problems = collector.config.stash.setdefault(_SESSION_PROBLEMS, [])
        problems.append(f"{rep.nodeid}: {_strict_failure(rep.longrepr)}")


_LEAK_BASELINE = pytest.StashKey[leaks.Baseline]()


@pytest.fixture(scope="session", autouse=True)
def _leak_baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    request.config.stash[_LEAK_BASELINE] = leaks.baseline([tmp_path_factory.getbasetemp()])


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Every fixture is torn down by now: whatever of this session still exists leaked. It is
    # named (failing the run) and removed, so that the next run does not inherit it.
    base = session.config.stash.get(_LEAK_BASELINE, None)
    if base is not None:
        left = leaks.find(base)
        if left.describe():
            problems = session.config.stash.setdefault(_SESSION_PROBLEMS, [])
            problems.append("the session left behind (now removed):")
            problems += [f"  {what}" for what in left.describe()]
            leaks.clean(left)
    if session.config.stash.get(_SESSION_PROBLEMS, []) and session.exitstatus in (
        pytest.ExitCode.OK,
        pytest.ExitCode.NO_TESTS_COLLECTED,
    ):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    seen = testbed.json_log_seen
    if seen:
        counts = ", ".join(f"{event} {n}" for event, n in sorted(seen.items()))
        terminalreporter.write_line(
            f"JSON log: {sum(seen.values())} records of mpiwait's runs fit "
            f"docs/events.schema.json ({counts})"
        )
    problems = terminalreporter.config.stash.get(_SESSION_PROBLEMS, [])
    if problems:
        terminalreporter.section("session problems (they fail the run)", sep="=", red=True)
        for line in problems:
            terminalreporter.line(line, red=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    names = [name for mark in item.iter_markers("needs") for name in mark.args]
    if item.get_closest_marker("root") is not None:
        names.append("netns")
    if names:
        testbed.require(*dict.fromkeys(names))


@pytest.fixture(scope="session")
def _stale_beds_cleaned() -> None:
    if testbed.find("netns") is not None:
        testbed.cleanup_stale()


@pytest.fixture
def bed(tmp_path: Path, _stale_beds_cleaned: None):
    """Factory: ``b = bed(3, port=2222, user="mpiuser", ...)`` returns a TestBed that is up
    (same keywords as TestBed; a free /24 is picked unless ``index=`` is given). Every bed made
    is torn down after the test, pass or fail."""
    testbed.require("netns")
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
    import pwd
    import shlex

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
