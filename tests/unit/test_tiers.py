"""The suite's layout as a contributor meets it: every folder of tests is a tier whose mark
pytest knows, the inner loop (scripts/test --fast) collects pure logic only, and
scripts/suite-times turns a run's JUnit XML into the table docs/testing.md shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
MARKS = {
    line.split(":")[0]
    for line in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]["markers"]
}


def _root_conftest(config: pytest.Config) -> object:
    """tests/conftest.py as pytest loaded it (``import conftest`` may give another folder's)."""
    path = REPO / "tests" / "conftest.py"
    for plugin in config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "").resolve() == path:
            return plugin
    raise AssertionError(f"pytest did not load {path}")


def test_every_folder_of_tests_is_a_tier_with_a_registered_mark(
    request: pytest.FixtureRequest,
) -> None:
    tiers = _root_conftest(request.config).TIERS  # type: ignore[attr-defined]
    folders = {p.parent.name for p in (REPO / "tests").glob("*/test_*.py")}
    assert folders - set(tiers) == set()
    assert set(tiers.values()) | {"slow"} <= MARKS


def test_the_fast_path_collects_the_unit_tier_without_its_slow_tests() -> None:
    done = subprocess.run(
        [str(REPO / "scripts/test"), "--fast", "--collect-only", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=300, cwd=REPO, stdin=subprocess.DEVNULL,
        env={**os.environ, "MPIWAIT_TEST_INSTALL": "0"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(ids) > 500, done.stdout[-2000:]
    assert all(i.startswith("tests/unit/") for i in ids), done.stdout[-2000:]
    assert not [i for i in ids if "test_the_mark_and_require_in_a_run_of_pytest" in i]
    assert "deselected" in done.stdout.splitlines()[-1]


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4"
 time="12.0" timestamp="2026-12-01T22:44:10.000000" hostname="h">
<testcase classname="tests.unit.test_cli" name="test_a" time="0.5"/>
<testcase classname="tests.unit.test_cli" name="test_b[x]" time="1.5"><skipped/></testcase>
<testcase classname="tests.integration.test_signals.TestKill" name="test_c" time="200.25">
<failure message="boom"/></testcase>
<testcase classname="tests.lint.test_lint" name="test_d" time="3"/>
</testsuite></testsuites>
"""


def test_suite_times_renders_a_row_per_tier_with_its_slowest_test(tmp_path: Path) -> None:
    xml = tmp_path / "junit.xml"
    xml.write_text(JUNIT)
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/suite-times"), str(xml), "--commit", "abc1234",
         "--slowest", "1"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines() == [
        "Run of 2026-12-01 22:44, commit abc1234:",
        "",
        "| tier | tests | passed | failed | skipped | time | slowest test |",
        "|---|---:|---:|---:|---:|---:|---|",
        "| unit | 2 | 1 | 0 | 1 | 2 s | `tests/unit/test_cli.py::test_b[x]` 1.5 s |",
        "| lint | 1 | 1 | 0 | 0 | 3 s | `tests/lint/test_lint.py::test_d` 3.0 s |",
        "| integration | 1 | 0 | 1 | 0 | 200 s (3.3 min) | "
        "`tests/integration/test_signals.py::TestKill::test_c` 200.2 s |",
        "| all | 4 | | | | 205 s (3.4 min) | |",
        "",
        "The 1 slowest tests:",
        "",
        "- 200.2 s `tests/integration/test_signals.py::TestKill::test_c`",
    ]
