"""scripts/check-commits, which .ci/run runs before the suite: commit messages follow git's
convention (CONTRIBUTING.md). Checked on a throwaway repository with a good and a bad commit
(the control), then on this one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import testbed

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check-commits"

GOOD = """Wait for every worker before exec

A body wrapped at 72 columns says why; a line that is one token may run
longer, as may an indented one (quoted output):
https://example.invalid/a/very/long/address/that/cannot/be/broken/anywhere/at/all
    mpiwait: all 3 hosts ready in 5.2 s (w1, w2, w3), then exec mpirun --host w1,w2,w3
"""
BAD = (
    "Wait for every worker before exec, which the CI run took 12 min 4 s to show on two cores\n"
    "and then a second line that is not blank\n"
)


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid",
    }  # fmt: skip
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def _check(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHECK), *args], cwd=repo, capture_output=True, text=True, timeout=60)


@pytest.fixture
def history(tmp_path: Path) -> dict[str, str]:
    """A throwaway repository: a root commit, then GOOD, then BAD; their full hashes."""
    testbed.require("git")
    _git(tmp_path, "init", "-q")
    made = {}
    for name, message in (("root", "Start\n"), ("good", GOOD), ("bad", BAD)):
        (tmp_path / "f").write_text(name)
        _git(tmp_path, "add", "f")
        _git(tmp_path, "commit", "-q", "-m", message)
        made[name] = _git(tmp_path, "rev-parse", "HEAD")
    return made


def test_a_conventional_commit_passes(history: dict[str, str], tmp_path: Path) -> None:
    done = _check(tmp_path, f"{history['root']}..{history['good']}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": 1 checked, none breaks" in done.stdout


def test_a_paragraph_subject_without_a_blank_line_fails(
    history: dict[str, str], tmp_path: Path
) -> None:
    done = _check(tmp_path, f"{history['root']}..{history['bad']}")
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()  # one line per bad commit, the good one not named
    assert line.startswith(history["bad"][:7]), line
    assert f"subject is {len(BAD.splitlines()[0])} characters" in line, line
    assert "line 2 is not blank" in line, line


def test_a_base_missing_from_a_shallow_history_fails_saying_to_fetch_it(
    history: dict[str, str], tmp_path: Path
) -> None:
    done = _check(tmp_path)  # the default base, 2cfe289, is not in the throwaway repository
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "2cfe289" in line and "fetch the full history" in line, line


def test_this_repository_follows_the_convention() -> None:
    testbed.require("git")
    done = _check(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
