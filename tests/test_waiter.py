"""The waiting loop against a fake clock: no network, no sleeps, hundreds of rounds in ms."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from mpiwait.errors import Interrupted
from mpiwait.events import (
    End,
    HostChanged,
    HostReady,
    HostsAdded,
    Outcome,
    Stage,
    Status,
    StillWaiting,
)
from mpiwait.waiter import WaitPolicy, backoff, wait_for_hosts

READY = Outcome(Status.READY, Stage.READY, "ready")
REFUSED = Outcome(Status.RETRY, Stage.TCP, "refused", "refused")
UNRESOLVED = Outcome(Status.RETRY, Stage.DNS, "unresolved", "no such name")
REJECTED = Outcome(Status.FATAL, Stage.SSH, "auth-rejected", "Permission denied", "fix keys")


class FakeRunner:
    """Attempts finish ``duration`` after they start; time moves only when the loop waits."""

    def __init__(self, probe: Callable[[str, float], Outcome], duration: float = 0.01) -> None:
        self.clock = 0.0
        self.probe = probe
        self.duration = duration
        self.pending: list[tuple[float, str]] = []
        self.starts: list[tuple[float, str]] = []
        self.max_in_flight = 0
        self.interrupt_at = math.inf

    def now(self) -> float:
        return self.clock

    def start(self, host: str) -> None:
        self.starts.append((self.clock, host))
        self.pending.append((self.clock + self.duration, host))
        self.max_in_flight = max(self.max_in_flight, len(self.pending))

    def results(self, timeout: float):
        until = self.clock + timeout
        if self.interrupt_at <= until:
            self.clock = self.interrupt_at
            raise Interrupted(15, "SIGTERM")
        if not self.pending:
            self.clock = until
            return []
        first = min(t for t, _ in self.pending)
        if first > until:
            self.clock = until
            return []
        self.clock = first
        done = [(t, h) for t, h in self.pending if t <= self.clock]
        self.pending = [(t, h) for t, h in self.pending if t > self.clock]
        return [(h, self.probe(h, self.clock)) for _, h in done]


def policy(**kw) -> WaitPolicy:
    base = dict(
        timeout=60.0,
        retry_initial=0.1,
        retry_max=2.0,
        parallel=64,
        probe_rate=0,
        reread_interval=1.0,
        permanent_after=3,
    )
    base.update(kw)
    return WaitPolicy(**base)


def run(hosts, probe, *, read=None, runner=None, delay=None, **kw):
    runner = runner or FakeRunner(probe)
    events = []
    result = wait_for_hosts(
        first=tuple(hosts),
        read_hosts=read or (lambda: (tuple(hosts), ("test",))),
        runner=runner,
        policy=policy(**kw),
        emit=events.append,
        delay=delay,
    )
    return result, events, runner


def test_all_ready_at_once_probes_each_host_once():
    result, events, runner = run(["a", "b", "c"], lambda h, t: READY)
    assert result.end is End.READY
    assert sorted(h for _, h in runner.starts) == ["a", "b", "c"]
    assert [e.ready for e in events if isinstance(e, HostReady)] == [1, 2, 3]


def test_late_host_is_retried_until_ready_and_never_probed_after():
    result, _, runner = run(["a", "late"], lambda h, t: READY if h == "a" or t > 5 else REFUSED)
    assert result.end is End.READY
    assert 5 < result.elapsed < 5 + 2.0 + 0.1  # noticed within one backoff cap
    assert [h for _, h in runner.starts].count("a") == 1


def test_deadline_gives_timeout_with_each_host_stage():
    result, _, _ = run(
        ["up", "dns", "tcp"],
        lambda h, t: {"up": READY, "dns": UNRESOLVED, "tcp": REFUSED}[h],
        timeout=30,
    )
    assert result.end is End.TIMEOUT
    assert result.elapsed == pytest.approx(30)
    stages = {h.host: (h.stage, h.reason) for h in result.hosts}
    assert stages == {
        "up": (Stage.READY, "ready"),
        "dns": (Stage.DNS, "unresolved"),
        "tcp": (Stage.TCP, "refused"),
    }


def test_no_deadline_waits_as_long_as_it_takes():
    result, _, _ = run(["a"], lambda h, t: READY if t > 5000 else REFUSED, timeout=0)
    assert result.end is End.READY


def test_backoff_spacing_grows_and_is_capped():
    _, _, runner = run(["a"], lambda h, t: REFUSED, timeout=120)
    times = [t for t, _ in runner.starts]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap <= 2.0 + 0.01 + 1e-9 for gap in gaps)
    # ~120 s at a full-jitter cap of 2 s is about 120 attempts, not thousands.
    assert 60 < len(times) < 400


def test_backoff_is_full_jitter_exponential():
    delay = backoff(0.1, 2.0)
    for attempt, window in [(1, 0.1), (2, 0.2), (3, 0.4), (10, 2.0), (50, 2.0)]:
        samples = [delay(attempt) for _ in range(200)]
        assert all(0 <= s <= window + 1e-9 for s in samples)
        assert max(samples) > window / 2  # jitter spans the window


def test_permanent_failure_three_in_a_row_ends_the_wait():
    result, _, runner = run(["ok", "bad"], lambda h, t: READY if h == "ok" else REJECTED)
    assert result.end is End.PERMANENT
    assert result.failed.host == "bad"
    assert result.hint == "fix keys"
    assert [h for _, h in runner.starts].count("bad") == 3


def test_fatal_streak_resets_on_a_retryable_outcome():
    outcomes = iter([REJECTED, REJECTED, REFUSED, REJECTED, REJECTED, READY])
    result, _, _ = run(["h"], lambda h, t: next(outcomes))
    assert result.end is End.READY


def test_parallel_limit_is_respected():
    hosts = [f"h{i}" for i in range(100)]
    _, _, runner = run(hosts, lambda h, t: READY, parallel=8)
    assert runner.max_in_flight == 8


def test_probe_rate_budget_bounds_starts_per_second():
    hosts = [f"h{i}" for i in range(50)]
    result, _, runner = run(hosts, lambda h, t: UNRESOLVED, probe_rate=20, timeout=10, parallel=5)
    assert result.end is End.TIMEOUT
    per_second: dict[int, int] = {}
    for t, _ in runner.starts:
        per_second[int(t)] = per_second.get(int(t), 0) + 1
    assert max(per_second.values()) <= 20 + 5  # rate plus the initial burst
    assert len(runner.starts) <= 20 * 10 + 5


def test_hosts_listed_later_are_waited_for():
    runner = FakeRunner(lambda h, t: READY if (h == "a" and t > 3) or t > 6 else REFUSED)

    def read():
        return (("a", "b") if runner.clock > 2 else ("a",)), ("discover",)

    result, events, _ = run(["a"], None, read=read, runner=runner)
    assert result.end is End.READY
    assert result.elapsed > 6
    assert {h.host for h in result.hosts} == {"a", "b"}
    added = [e for e in events if isinstance(e, HostsAdded)]
    assert [e.hosts for e in added] == [("b",)]


def test_no_hosts_yet_keeps_waiting_until_some_appear():
    listing = {"hosts": ()}
    calls = {"n": 0}

    def read():
        calls["n"] += 1
        if calls["n"] >= 5:
            listing["hosts"] = ("w1",)
        return listing["hosts"], ("discover",)

    result, _, _ = run([], lambda h, t: READY, read=read)
    assert result.end is End.READY
    assert 4 <= result.elapsed <= 6


def test_no_hosts_ever_times_out():
    result, _, _ = run([], lambda h, t: READY, read=lambda: ((), ()), timeout=5)
    assert result.end is End.TIMEOUT
    assert result.hosts == ()


def test_a_host_that_vanishes_from_the_listing_is_still_waited_for():
    listing = {"hosts": ("a", "b")}

    def probe(h, t):
        listing["hosts"] = ("a",)
        return READY if h == "a" or t > 4 else REFUSED

    result, _, _ = run(["a", "b"], probe, read=lambda: (listing["hosts"], ()))
    assert result.end is End.READY
    assert result.elapsed > 4


def test_stage_changes_are_reported_once_not_per_attempt():
    def probe(h, t):
        if t < 3:
            return UNRESOLVED
        if t < 6:
            return REFUSED
        return READY

    _, events, runner = run(["h"], probe)
    changes = [(e.state.stage, e.state.reason) for e in events if isinstance(e, HostChanged)]
    assert changes == [(Stage.DNS, "unresolved"), (Stage.TCP, "refused")]
    assert len(runner.starts) > 5


def test_still_waiting_is_emitted_periodically():
    _, events, _ = run(["h"], lambda h, t: REFUSED, timeout=35, status_interval=10)
    assert len([e for e in events if isinstance(e, StillWaiting)]) == 3


def test_interrupt_returns_a_summary_of_who_was_not_ready():
    runner = FakeRunner(lambda h, t: REFUSED)
    runner.interrupt_at = 7.0
    result, _, _ = run(["a", "b"], None, runner=runner)
    assert result.end is End.INTERRUPTED
    assert result.signal_name == "SIGTERM"
    assert {h.stage for h in result.hosts} == {Stage.TCP}


def test_a_thousand_hosts_run_quickly_under_the_fake_clock():
    hosts = [f"w{i}" for i in range(1000)]
    result, _, runner = run(
        hosts, lambda h, t: READY if t > 3 else UNRESOLVED, probe_rate=200, timeout=60
    )
    assert result.end is End.READY
    assert len(runner.starts) < 1000 * 8
