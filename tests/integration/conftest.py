"""Fixtures the integration tier shares."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import testbed


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[testbed.Lab]:
    """A Lab (loopback sshd) of the test's own; a failed background action fails the test."""
    with testbed.Lab(tmp_path / "lab") as made:
        yield made
        problems = made.problems()
        assert not problems, f"background actions failed: {problems}"
