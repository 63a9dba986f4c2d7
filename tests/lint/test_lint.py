"""The static checks run with the suite, so CI enforces them: ruff (lint and format) over the
repository, mypy --strict over mpiwait/, actionlint (with shellcheck for every run: script) over
the release workflow, each failing with the tool's own output. A tier of their own (tests/lint/,
the `lint` mark): they read files, not behaviour, and cost more than the unit tier's logic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import testbed

ROOT = Path(__file__).resolve().parents[2]

CHECKS = {
    "ruff check": ["ruff", "check", "."],
    "ruff format": ["ruff", "format", "--check", "."],
    "mypy --strict": ["mypy", "--strict", "mpiwait"],
}


@pytest.mark.parametrize("name", CHECKS)
def test_clean(name: str) -> None:
    tool = CHECKS[name][0]
    testbed.require(tool)
    done = subprocess.run(
        [sys.executable, "-m", *CHECKS[name]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{name} found problems:\n{done.stdout}{done.stderr}"


def test_release_workflow_passes_actionlint() -> None:
    """actionlint checks the workflow's syntax, expressions, action inputs and (through
    shellcheck) every run: script."""
    actionlint = testbed.require("actionlint").path
    shellcheck = testbed.require("shellcheck").path
    done = subprocess.run(
        [str(actionlint), "-shellcheck", str(shellcheck), ".github/workflows/release.yml"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
