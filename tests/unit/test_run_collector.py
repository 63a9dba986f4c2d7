"""The garbage collector's tuning for a wait (modes/wait.py's _collector_for_logins) is undone
afterwards: wait_and_exec() is also called in-process (the CLI tests do), where a frozen heap or
a changed threshold would outlive the wait. What it saves is measured in benchmarks/ (scenario
2's peak RSS), not here."""

from __future__ import annotations

import gc

import pytest

from mpiwait.modes.wait import _collector_for_logins


def test_collector_tuned_during_the_wait_and_restored_after() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with _collector_for_logins():
        assert gc.get_threshold() == (before[0], before[1], 1)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_collector_restored_when_the_wait_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(KeyboardInterrupt), _collector_for_logins():
        raise KeyboardInterrupt
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
