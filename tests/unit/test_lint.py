"""The package's static checks run with the suite, so CI enforces them: ruff (lint and format)
over the repository and mypy --strict over mpiwait/, each failing with the tool's own output."""

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
