"""The test bed's table of what tests need (testbed.needs/require/find, tests/testbed/_needs.py):
each requirement says how it is checked and what installs it; a missing one skips a test with
that sentence, or fails it in strict mode; scripts/install-test-deps installs from the same
table; and no test checks the machine on its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import testbed
from testbed import _namespaces, _needs

REPO = Path(__file__).resolve().parents[2]
SSH_HINT = "sudo apt-get install -y --no-install-recommends openssh-client"


@pytest.fixture
def fresh() -> Iterator[None]:
    """The checks are cached per run: forget them before and after a test that moves PATH (the
    namespace bed's too, else a later test's bed would be refused for a PATH long restored)."""
    caches = (_needs.check, _needs._script_check, _namespaces.missing_requirements)
    for cached in caches:
        cached.cache_clear()
    yield
    for cached in caches:
        cached.cache_clear()


@pytest.fixture
def bare_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None) -> Path:
    """PATH is one empty directory (tests put programs in it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def _program(bin_dir: Path, name: str, says: str = "") -> Path:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(0o755)
    return path


def test_every_requirement_says_what_it_is_and_how_to_get_it() -> None:
    kinds = {"apt", "script", "extra", "root", "none"}
    for name, need in testbed.NEEDS.items():
        assert need.name == name and need.what, name
        assert need.install.kind in kinds, name
        assert set(need.requires) <= set(testbed.NEEDS), name
        if need.install.kind == "apt":
            assert re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", need.install.target), name
        if need.install.kind == "script":
            script = REPO / need.install.target
            assert os.access(script, os.X_OK), f"{name}: {script} is not an executable script"
        if need.install.kind == "none":
            assert need.requires, f"{name}: nothing installs it and it requires nothing"


def test_a_missing_program_is_named_with_the_command_that_installs_it(bare_path: Path) -> None:
    said = _needs.check("ssh")
    assert said == (
        "ssh missing (the OpenSSH client): no `ssh` on PATH; install: "
        f"{SSH_HINT} (sudo ./scripts/test installs everything the suite needs)"
    )
    assert testbed.find("ssh") is None
    assert testbed.NEEDS["ssh-keygen"].install == testbed.NEEDS["ssh"].install


def test_a_present_program_is_handed_over_by_its_path(bare_path: Path) -> None:
    ssh = _program(bare_path, "ssh")
    found = testbed.find("ssh")
    assert found is not None and found.path == ssh


def test_open_mpi_is_known_by_what_its_mpirun_says(bare_path: Path) -> None:
    _program(bare_path, "mpirun", "HYDRA build details:")  # MPICH's mpirun
    said = _needs.check("openmpi4")
    assert isinstance(said, str) and "is not Open MPI" in said and "openmpi-bin" in said, said
    _needs.check.cache_clear()
    mpirun = _program(bare_path, "mpirun", "mpirun (Open MPI) 4.1.4")
    assert testbed.find("openmpi4") == testbed.Found("openmpi4", mpirun)


def test_a_lab_names_the_first_of_its_requirements_that_is_missing(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root, with ip and iptables found in /usr/sbin (looked at even when PATH lacks it): the
    # first on PATH only is what is missing.
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    said = _needs.check("netns")
    assert isinstance(said, str)
    assert said.startswith("netns (the multi-host test bed (network namespaces)) needs unshare")
    assert "sudo apt-get install -y --no-install-recommends util-linux" in said
    assert _needs.problem("netns", "ssh") == f"{said}; and {_needs.check('ssh')}"
    assert _needs.problem("root") is None


def test_require_skips_and_in_strict_mode_fails_with_the_same_sentence(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentence = _needs.check("ssh")
    assert isinstance(sentence, str)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("MPIWAIT_TEST_STRICT", "0")
    with pytest.raises(pytest.skip.Exception) as skipped:
        testbed.require("ssh")
    assert skipped.value.msg == sentence
    monkeypatch.setenv("MPIWAIT_TEST_STRICT", "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        testbed.require("ssh")
    assert failed.value.msg == f"strict mode (MPIWAIT_TEST_STRICT=1): {sentence}"
    monkeypatch.delenv("MPIWAIT_TEST_STRICT")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        testbed.require("ssh")
    assert failed.value.msg == f"strict mode (CI=true): {sentence}"


def test_an_unknown_requirement_fails_where_it_is_written() -> None:
    with pytest.raises(ValueError, match="unknown requirement 'openmpi': one of "):
        testbed.needs("openmpi")


MARKED = """
import pytest
import testbed

@testbed.needs("ssh")
def test_marked():
    pass

@pytest.mark.parametrize("x", [1, pytest.param(2, marks=testbed.needs("ssh", "root"))])
def test_param(x):
    pass

def test_in_the_body():
    testbed.require("ssh")

def test_needing_nothing():
    pass
"""


@pytest.mark.slow  # a pytest of its own with tests/conftest.py
@pytest.mark.parametrize("strict", ["0", "1"])
def test_the_mark_and_require_in_a_run_of_pytest(
    strict: str, bare_path: Path, tmp_path: Path
) -> None:
    """A pytest run with tests/conftest.py, where ssh is missing: the tests that ask for it skip
    with the sentence, or in strict mode fail with it; the others run."""
    (tmp_path / "test_marked.py").write_text(MARKED)
    env = {**os.environ, "PATH": str(bare_path), "MPIWAIT_TEST_STRICT": strict}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    cp = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-rsfE",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_marked.py")],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    out = cp.stdout + cp.stderr
    sentence = f"ssh missing (the OpenSSH client): no `ssh` on PATH; install: {SSH_HINT}"
    if strict == "0":
        assert cp.returncode == 0, out
        assert re.search(r"\b2 passed, 3 skipped\b", out), out
        assert re.search(rf"SKIPPED \[3\] .*: {re.escape(sentence)}", out), out
    else:
        assert cp.returncode == 1, out
        assert re.search(r"\b1 failed, 2 passed, 2 errors\b", out), out  # marks fail in setup
        assert out.count(f"strict mode (MPIWAIT_TEST_STRICT=1): {sentence}") >= 3, out


def test_install_test_deps_installs_what_the_table_says_is_missing(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script's list is the table's: with nothing on PATH but what the script itself runs,
    it names exactly the Debian packages the table's plan names."""
    for tool in ("bash", "env", "id", "cat", "dirname"):
        found = [Path(d, tool) for d in ("/usr/bin", "/bin") if Path(d, tool).exists()]
        (bare_path / tool).symlink_to(found[0])
    (bare_path / "python3").symlink_to(sys.executable)
    want = sorted({i.target for i in _needs.plan() if i.kind == "apt"})
    assert "openssh-client" in want and "openmpi-bin" in want
    env = {**os.environ, "MPIWAIT_TEST_INSTALL": "0", "PYTHON": sys.executable}
    cp = subprocess.run(
        [str(REPO / "scripts/install-test-deps")], capture_output=True, text=True, timeout=300,
        env=env, cwd=REPO, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    listed = re.search(r"(?:missing )?Debian packages: ([^\n(]+)", cp.stderr)
    assert listed, cp.stderr
    assert sorted(listed[1].split()) == want, cp.stderr


# What only the test bed's table may do: a test that checks the machine itself decides on its
# own whether it runs, and can skip in CI unseen by the table and scripts/install-test-deps.
FORBIDDEN = {
    "shutil" + ".which(": "testbed.find(name) / testbed.require(name)",
    "import" + "orskip(": "testbed.require(name), then import",
    "find" + "_spec(": "testbed.require(name)",
    "missing" + "_requirements(": 'testbed.needs("netns" | "loopback" | "containers")',
    "MPIWAIT" + "_TEST_MPIS": 'testbed.require("openmpi5").path (the venv)',
    "/var/cache/" + "mpiwait-tests": "testbed.require(name).path",
}


def test_no_test_checks_the_machine_outside_the_test_bed() -> None:
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        if "testbed" in path.relative_to(REPO / "tests").parts[:1] or path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, instead in FORBIDDEN.items():
                if pattern in line:
                    found.append(f"{path.relative_to(REPO)}:{n}: {pattern} (use {instead})")
    assert found == [], "\n".join(found)


def test_the_documented_listing_names_every_requirement() -> None:
    """CONTRIBUTING.md's `python -m testbed needs`: one line a requirement, present or not."""
    cp = subprocess.run(
        [sys.executable, "-m", "testbed", "needs"], capture_output=True, text=True,
        timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": "tests"},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    named = [re.match(r"[a-z0-9-]+", line)[0] for line in cp.stdout.splitlines()]  # type: ignore[index]
    assert named == sorted(testbed.NEEDS), cp.stdout
    for line in cp.stdout.splitlines():
        assert re.fullmatch(r"[a-z0-9-]+: \S.*|[a-z0-9-]+ (missing |\().*install: .+", line), line
