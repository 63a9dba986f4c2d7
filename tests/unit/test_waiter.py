"""The waiting loop against a fake clock: no network, no sleeps, hundreds of rounds in ms."""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable

import pytest

from mpiwait.errors import Interrupted
from mpiwait.probe.outcome import Outcome, Reason, Stage, Status
from mpiwait.settings import (
    BACKOFF_DOUBLING,
    BACKOFF_GRACE,
    RETRY_FLOOR_DNS,
    RETRY_FLOOR_SSH,
    RETRY_FLOOR_TCP,
    Budget,
    RetryPolicy,
    WaitPolicy,
)
from mpiwait.wait.events import (
    End,
    HostChanged,
    HostLost,
    HostReady,
    HostsAdded,
    Rechecking,
    StillWaiting,
)
from mpiwait.wait.loop import wait_for_hosts
from mpiwait.wait.runner import ConnectionLost
from mpiwait.wait.schedule import Schedule

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
        self.losses: list[tuple[float, str]] = []  # (when, host): its kept connection ends

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
        if not self.pending and not self.losses:
            self.clock = until
            return []
        first = min(t for t, _ in self.pending + self.losses)
        if first > until:
            self.clock = until
            return []
        self.clock = first
        lost = [ConnectionLost(h) for t, h in self.losses if t <= self.clock]
        self.losses = [(t, h) for t, h in self.losses if t > self.clock]
        done = [(t, h) for t, h in self.pending if t <= self.clock]
        self.pending = [(t, h) for t, h in self.pending if t > self.clock]
        return lost + [(h, self.probe(h, self.clock)) for _, h in done]


def policy(**kw) -> WaitPolicy:
    """A policy from flat keywords (the options' names), the rest as in a default run."""
    get = {
        "timeout": 60.0,
        "retry_initial": 0.1,
        "retry_max": 2.0,
        "parallel": 64,
        "probe_rate": 0,
        "reread_interval": 1.0,
        "permanent_after": 3,
        "status_interval": math.inf,
        "recheck_after": math.inf,
        "floor_dns": RETRY_FLOOR_DNS,
        "floor_tcp": RETRY_FLOOR_TCP,
        "floor_ssh": RETRY_FLOOR_SSH,
        "backoff_grace": BACKOFF_GRACE,
        "backoff_doubling": BACKOFF_DOUBLING,
        "follow_budget": True,
    }
    unknown = set(kw) - set(get)
    assert not unknown, unknown
    get.update(kw)
    return WaitPolicy(
        timeout=get["timeout"],
        budget=Budget(get["parallel"], get["probe_rate"]),
        retry=RetryPolicy(
            initial=get["retry_initial"],
            maximum=get["retry_max"],
            floor_dns=get["floor_dns"],
            floor_tcp=get["floor_tcp"],
            floor_ssh=get["floor_ssh"],
            grace=get["backoff_grace"],
            doubling=get["backoff_doubling"],
            follow_budget=get["follow_budget"],
        ),
        reread_interval=get["reread_interval"],
        permanent_after=get["permanent_after"],
        status_interval=get["status_interval"],
        recheck_after=get["recheck_after"],
    )


def run(
    hosts, probe, *, read=None, runner=None, seed=1, kept=lambda h: False, listeners=None, **kw
):
    runner = runner or FakeRunner(probe)
    events = []
    result = wait_for_hosts(
        first=tuple(hosts),
        read_hosts=read or (lambda: (tuple(hosts), ("test",))),
        runner=runner,
        policy=policy(**kw),
        emit=events.append,
        rng=random.Random(seed),
        holds_connection=kept,
        listeners=listeners or (lambda hosts: ()),
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


def test_a_lone_missing_host_is_tried_at_its_floor_then_backs_off_when_it_stays_away():
    # One host refusing for 120 s with a 2-s cap: tried every floor (20 ms + the attempt's
    # 10 ms) during the grace period, then the window doubles every 10 s up to the cap.
    _, _, runner = run(["a"], lambda h, t: REFUSED, timeout=120)
    times = [t for t, _ in runner.starts]
    gaps = [(a, b - a) for a, b in itertools.pairwise(times)]
    assert all(gap <= 2.0 + 0.01 + 1e-9 for _, gap in gaps)
    early = [gap for t, gap in gaps if 1 < t < 19]
    assert early and all(gap == pytest.approx(0.03) for gap in early)
    late = [gap for t, gap in gaps if t > 100]  # window at the 2-s cap: mean ~1 s
    assert 0.7 < sum(late) / len(late) < 1.3
    assert all(gap >= 0.02 for _, gap in gaps)  # never under the floor


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


def most_in_any_second(starts: list[tuple[float, str]]) -> int:
    """The most starts in any one-second window [t, t + 1)."""
    times = sorted(t for t, _ in starts)
    return max(bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times))


def test_parallel_limit_is_respected():
    hosts = [f"h{i}" for i in range(100)]
    _, _, runner = run(hosts, lambda h, t: READY, parallel=8)
    assert runner.max_in_flight == 8


def test_probe_rate_budget_bounds_starts_per_second():
    hosts = [f"h{i}" for i in range(50)]
    result, _, runner = run(hosts, lambda h, t: UNRESOLVED, probe_rate=20, timeout=10, parallel=5)
    assert result.end is End.TIMEOUT
    assert most_in_any_second(runner.starts) == 20  # the first second included
    assert len(runner.starts) <= 20 * 10


def test_a_probe_rate_under_one_a_second_spaces_single_starts():
    hosts = ["a", "b", "c"]
    _, _, runner = run(hosts, lambda h, t: REFUSED, probe_rate=0.5, timeout=20, parallel=5)
    times = [t for t, _ in runner.starts]
    assert len(times) == 10  # at 0, 2, ... 18: the first start takes no burst either
    assert all(b - a >= 2.0 for a, b in itertools.pairwise(times))


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


# --------------------------------------------------------------------------------------------
# the schedule: the fewer hosts missing, the more often each is tried, within the limits


def _schedule(seed: int = 1, missing: int = 1, **kw) -> Schedule:
    p = policy(**kw)
    return Schedule(p.retry, p.budget.rate, lambda: missing, random.Random(seed))


def _delay(s: Schedule, *, stage: Stage, status: Status, attempts: int, away: float) -> float:
    """The delay after a host's ``attempts``-th attempt, ``away`` seconds into its absence."""
    outcome = Outcome(status, stage, Reason.REFUSED)  # its reason is not read
    delay = s.next_delay(outcome, attempts=attempts, now=away, since=0.0)
    assert delay is not None
    return delay


def test_a_lone_missing_host_waits_exactly_its_stage_floor():
    s = _schedule(probe_rate=200)
    for stage, floor in [(Stage.TCP, 0.02), (Stage.DNS, 0.05), (Stage.SSH, 0.1)]:
        assert _delay(s, stage=stage, status=Status.RETRY, attempts=5, away=3) == floor


def test_many_missing_hosts_share_the_budget_under_the_envelope():
    s = _schedule(probe_rate=200, retry_max=2.0, missing=40)
    # 40 missing at 200/s: each may be tried every 0.2 s on average (a little less often:
    # together they never ask for more than the budget); the envelope after 5 tries is 1.6 s
    delays = [
        _delay(s, stage=Stage.TCP, status=Status.RETRY, attempts=5, away=3) for _ in range(2000)
    ]
    assert all(0.02 <= d <= 0.4 for d in delays)
    assert max(delays) > 0.38  # jittered over the whole window, not pinned to the floor
    assert 0.2 <= sum(delays) / len(delays) <= 0.22
    # 1000 missing: the share (5 s) is above the envelope, which caps the wait
    s = _schedule(probe_rate=200, retry_max=2.0, missing=1000)
    d = [_delay(s, stage=Stage.DNS, status=Status.RETRY, attempts=1, away=0) for _ in range(200)]
    assert all(0.05 <= x <= 0.1 for x in d)  # first retry within --retry-initial


def test_a_host_away_past_the_grace_period_backs_off_to_the_envelope():
    s = _schedule(probe_rate=200, retry_max=0.5)

    def window(away):
        return max(
            _delay(s, stage=Stage.TCP, status=Status.RETRY, attempts=50, away=away)
            for _ in range(300)
        )

    assert window(19) == pytest.approx(0.02)
    assert window(40) == pytest.approx(0.08, rel=0.05)  # grace 20 s, then x2 every 10 s
    assert window(600) == pytest.approx(0.5, rel=0.05)  # the envelope: capped at 0.5 s


def test_a_rejected_key_keeps_the_full_jitter_backoff():
    s = _schedule(probe_rate=200, retry_initial=0.1, retry_max=2.0)
    for attempts, window in [(1, 0.1), (2, 0.2), (3, 0.4)]:
        d = [
            _delay(s, stage=Stage.SSH, status=Status.FATAL, attempts=attempts, away=1)
            for _ in range(300)
        ]
        assert all(0 <= x <= window for x in d)
        assert min(d) < 0.1 * window  # full jitter: not held at the ssh floor


def test_the_jitter_comes_from_the_injected_random_source():
    def starts(seed):
        probe = lambda h, t: READY if t > 3 + int(h[1:]) * 0.1 else REFUSED  # noqa: E731
        _, _, runner = run([f"h{i}" for i in range(20)], probe, probe_rate=200, seed=seed)
        return runner.starts

    assert starts(7) == starts(7)
    assert starts(7) != starts(8)


def test_the_last_missing_host_is_tried_far_more_often_than_when_all_were_missing():
    hosts = [f"h{i}" for i in range(64)]

    def probe(h, t):
        if h == "h0":
            return READY if t > 6.0 else REFUSED
        return READY if t > 2.0 else REFUSED

    result, _, runner = run(hosts, probe, probe_rate=200, retry_max=0.5, parallel=32)
    assert result.end is End.READY
    early = [t for t, h in runner.starts if h == "h0" and 0.5 < t < 2.0]
    late = [t for t, h in runner.starts if h == "h0" and 3.0 < t < 6.0]
    assert len(late) / 3.0 > 4 * len(early) / 1.5  # per second, alone vs among 64
    # once alone, it is tried every floor + attempt: the ready host is noticed within 30 ms
    assert result.elapsed - 6.0 <= 0.02 + 0.01 + 0.01 + 1e-9


def test_a_thousand_absent_hosts_cost_the_budget_and_no_more():
    hosts = [f"w{i}" for i in range(1000)]
    result, _, runner = run(
        hosts, lambda h, t: UNRESOLVED, probe_rate=200, parallel=32, timeout=60, retry_max=0.5
    )
    assert result.end is End.TIMEOUT
    assert most_in_any_second(runner.starts) <= 200  # no burst on top, in the first second
    assert 0.95 * 200 * 60 <= len(runner.starts) <= 200 * 60  # all of it, evenly
    tries = {h: 0 for h in hosts}
    for _, h in runner.starts:
        tries[h] += 1
    assert max(tries.values()) - min(tries.values()) <= 3  # shared fairly


def test_floors_hold_under_no_probe_budget():
    _, _, runner = run(["a", "b"], lambda h, t: UNRESOLVED, probe_rate=0, timeout=5)
    for host in ("a", "b"):
        times = [t for t, h in runner.starts if h == host]
        assert all(b - a >= 0.05 for a, b in itertools.pairwise(times))


# --------------------------------------------------------------------------------------------
# re-check before the end


def test_hosts_that_all_pass_within_the_bound_are_not_rechecked():
    result, events, runner = run(
        ["a", "b", "late"],
        lambda h, t: READY if h != "late" or t > 5 else REFUSED,
        recheck_after=30,
    )
    assert result.end is End.READY
    assert not [e for e in events if isinstance(e, Rechecking)]
    assert [h for _, h in runner.starts].count("a") == 1


def test_a_host_that_passed_is_checked_again_while_others_are_missing_not_at_the_end():
    result, events, runner = run(
        ["a", "b", "late"],
        lambda h, t: READY if h != "late" or t > 100 else REFUSED,
        recheck_after=30,
        timeout=200,
    )
    assert result.end is End.READY
    assert not [e for e in events if isinstance(e, Rechecking)]
    late = max(t for t, h in runner.starts if h == "late")
    assert result.elapsed == pytest.approx(late + 0.01)  # the end waited for nobody else
    for host in ("a", "b"):
        times = [t for t, h in runner.starts if h == host]
        gaps = [y - x for x, y in itertools.pairwise(times)]
        assert 3 <= len(gaps) <= 7 and all(15 <= g <= 30 + 0.02 for g in gaps), times
        assert late - times[-1] < 30  # its last pass is within the bound at the end
    # a re-check that passes says nothing more: each host was announced ready once
    assert sorted(e.host for e in events if isinstance(e, HostReady)) == ["a", "b", "late"]


def test_a_host_that_fails_its_recheck_is_waited_for_again():
    # "a" passes at once, dies at t=20 and comes back at t=60; "late" arrives at t=40.
    def probe(h, t):
        if h == "a":
            return REFUSED if 20 < t < 60 else READY
        return READY if t > 40 else REFUSED

    result, events, _ = run(["a", "late"], probe, recheck_after=30, timeout=120)
    assert result.end is End.READY
    lost = [e for e in events if isinstance(e, HostLost)]
    assert [(e.state.host, e.state.stage, e.state.reason) for e in lost] == [
        ("a", Stage.TCP, "refused")
    ]
    assert 20 < lost[0].elapsed <= 20 + 30 + 0.02  # at its next re-check, within the bound
    assert 60 < result.elapsed < 60 + 0.5 + 0.1
    ready = [e.host for e in events if isinstance(e, HostReady)]
    assert ready == ["a", "late", "a"]
    assert all(h.stage is Stage.READY for h in result.hosts)


def test_a_host_that_dies_for_good_after_passing_ends_in_timeout_naming_it():
    def probe(h, t):
        if h == "a":
            return REFUSED if t > 20 else READY
        return READY if t > 40 else REFUSED

    result, events, _ = run(["a", "late"], probe, recheck_after=30, timeout=90)
    assert result.end is End.TIMEOUT
    assert result.elapsed == pytest.approx(90)
    assert [(h.host, h.stage, h.reason) for h in result.not_ready] == [("a", Stage.TCP, "refused")]
    assert len([e for e in events if isinstance(e, HostLost)]) == 1


def test_at_the_end_every_host_without_a_kept_connection_passed_within_the_bound():
    # attempts of 5 s: a re-check still under way when the last host passes may leave a pass
    # older than the bound, which the end then checks once more
    rounds = 0
    for seed in range(20):
        runner = FakeRunner(lambda h, t: READY if h == "a" or t > 40 else REFUSED, duration=5)
        result, events, _ = run(
            ["a", "late"], None, runner=runner, recheck_after=10, timeout=120, seed=seed
        )
        assert result.end is End.READY
        passed = [t + 5 for t, h in runner.starts if h == "a" and t + 5 <= result.elapsed]
        assert result.elapsed - max(passed) <= 10, seed
        rounds += len([e for e in events if isinstance(e, Rechecking)])
    assert rounds > 0  # the end's round was needed in some of them


def test_a_recheck_ended_by_the_deadline_shows_the_host_as_unconfirmed():
    runner = FakeRunner(lambda h, t: READY if h != "late" else REFUSED, duration=5)
    runner.losses = [(40.0, "a")]
    result, _, _ = run(["a", "late"], None, runner=runner, kept=lambda h: True, timeout=43)
    assert result.end is End.TIMEOUT
    assert [(h.host, h.stage, h.reason) for h in result.not_ready] == [
        ("a", Stage.PENDING, "re-checking"),
        ("late", Stage.TCP, "refused"),
    ]


def test_a_bound_shorter_than_one_attempt_ends_once_every_host_is_ready():
    hosts = ["a", "b", "c", "late"]
    result, events, _ = run(
        hosts, lambda h, t: READY if h != "late" or t > 3 else REFUSED, recheck_after=0.001
    )
    assert result.end is End.READY
    assert result.elapsed < 3 + 0.5
    assert len([e for e in events if isinstance(e, Rechecking)]) <= 1


# --------------------------------------------------------------------------------------------
# kept connections (the runner reports their end as a host event)


def _kept_run(probe, losses, **kw):
    runner = FakeRunner(probe)
    runner.losses = list(losses)
    kw.setdefault("recheck_after", math.inf)
    return run(["a", "b", "late"], None, runner=runner, kept=lambda h: True, **kw)


def test_a_host_whose_kept_connection_ends_is_waited_for_until_it_is_back():
    # "a" passes at once, its connection ends at t=18 (it is down until t=26); "late" at t=20
    def probe(h, t):
        if h == "a":
            return REFUSED if 18 <= t < 26 else READY
        return READY if h == "b" or t > 20 else REFUSED

    result, events, runner = _kept_run(probe, [(18.0, "a")], timeout=60)
    assert result.end is End.READY
    (lost,) = [e for e in events if isinstance(e, HostLost)]
    assert lost.state.host == "a" and lost.elapsed == pytest.approx(18.01)  # checked at once
    ready = [(e.host, round(e.elapsed)) for e in events if isinstance(e, HostReady)]
    assert [h for h, _ in ready] == ["a", "b", "late", "a"]
    assert ready[2][1] == 20 and 26 <= result.elapsed < 26.6
    assert max(t for t, h in runner.starts if h == "late") < 20.6


def test_a_kept_connection_that_ends_while_its_host_still_answers_says_nothing():
    probe = lambda h, t: READY if h != "late" or t > 20 else REFUSED  # noqa: E731
    result, events, runner = _kept_run(probe, [(10.0, "a")])
    assert result.end is End.READY
    assert not [e for e in events if isinstance(e, (HostLost, HostChanged)) and e.state.host == "a"]
    assert [t for t, h in runner.starts if h == "a"] == [0.0, 10.0]
    assert sorted(e.host for e in events if isinstance(e, HostReady)) == ["a", "b", "late"]


def test_kept_hosts_need_no_round_at_the_end_however_long_ago_they_passed():
    probe = lambda h, t: READY if h != "late" or t > 100 else REFUSED  # noqa: E731
    result, events, runner = _kept_run(probe, [], recheck_after=30, timeout=200)
    assert result.end is End.READY
    assert not [e for e in events if isinstance(e, Rechecking)]
    late = max(t for t, h in runner.starts if h == "late")
    assert result.elapsed == pytest.approx(late + 0.01)


def test_a_lost_report_for_a_host_already_waited_for_changes_nothing():
    def probe(h, t):
        if h == "a":
            return REFUSED if 5 <= t < 8 else READY
        return READY if h == "b" or t > 10 else REFUSED

    result, events, _ = _kept_run(probe, [(5.0, "a"), (6.0, "a")])
    assert result.end is End.READY
    assert len([e for e in events if isinstance(e, HostLost)]) == 1


# --- listeners tried at the end of the wait (an sshd that stops listening, sessions alive) ----


class FakeListeners:
    """The hosts' listeners: ``down[host]`` = (from, until) in which it refuses new connects."""

    def __init__(self, runner: FakeRunner, down: dict[str, tuple[float, float]]) -> None:
        self.runner = runner
        self.down = down
        self.calls: list[tuple[float, tuple[str, ...]]] = []

    def refusing(self, host: str, t: float) -> bool:
        start, end = self.down.get(host, (math.inf, math.inf))
        return start <= t < end

    def __call__(self, hosts):
        t = self.runner.clock
        self.calls.append((t, tuple(sorted(hosts))))
        return {h for h in hosts if self.refusing(h, t)}


def _listener_run(down, late_at, *, kept=lambda h: True, **kw):
    runner = FakeRunner(lambda h, t: REFUSED)
    listeners = FakeListeners(runner, down)

    def probe(h, t):  # a full login needs the listener
        if listeners.refusing(h, t) or (h == "late" and t < late_at):
            return REFUSED
        return READY

    runner.probe = probe
    kw.setdefault("recheck_after", math.inf)
    result, events, _ = run(
        ["a", "b", "late"], None, runner=runner, kept=kept, listeners=listeners, **kw
    )
    return result, events, runner, listeners


def test_a_listener_that_stopped_while_others_were_late_is_waited_for_until_it_is_back():
    # "a" passes at once; its listener stops at 18 (its sessions, so its kept connection, live
    # on) and is back at 26; "late" arrives at 20: no launch before 26
    result, events, _, listeners = _listener_run({"a": (18.0, 26.0)}, 20.0, timeout=60)
    assert result.end is End.READY
    (lost,) = [e for e in events if isinstance(e, HostLost)]
    assert lost.state.host == "a" and lost.state.reason == "refused"
    assert 20 <= lost.elapsed < 20.1  # noticed as the last one passed
    ready = [(e.host, e.elapsed) for e in events if isinstance(e, HostReady)]
    assert [h for h, _ in ready] == ["a", "b", "late", "a"]
    assert 26 <= ready[-1][1] <= result.elapsed < 28
    # tried at the end of each wait, only those not just passed or just tried
    (t1, first), (t2, second) = listeners.calls
    assert 20 <= t1 < 20.1 and first == ("a", "b")
    assert t2 == pytest.approx(result.elapsed) and second == ("b", "late")


def test_a_listener_that_never_returns_ends_in_timeout_naming_it():
    result, events, _, _ = _listener_run({"a": (18.0, math.inf)}, 20.0, timeout=40)
    assert result.end is End.TIMEOUT
    (a,) = [h for h in result.hosts if h.host == "a"]
    assert (a.stage, a.reason) == (Stage.TCP, "refused")
    assert [e.state.host for e in events if isinstance(e, HostLost)] == ["a"]


def test_hosts_that_passed_within_the_last_second_or_hold_no_kept_connection_are_not_tried():
    # a quick start: everyone passes within 0.5 s; then a wait in which only "a" is kept
    _, _, _, listeners = _listener_run({}, 0.5)
    assert listeners.calls == []
    result, _, _, listeners = _listener_run({"b": (5.0, math.inf)}, 20.0, kept=lambda h: h == "a")
    assert result.end is End.READY  # "b" is not kept: its listener is --recheck-after's
    ((t, tried),) = listeners.calls
    assert 20 <= t < 20.1 and tried == ("a",)


def test_an_envelope_set_by_hand_is_plain_full_jitter_backoff_as_before():
    # --retry-initial/--retry-max given: no floors, no budget sharing; ~120 s at a full-jitter
    # cap of 2 s is about 120 attempts, not thousands.
    _, _, runner = run(["a"], lambda h, t: REFUSED, timeout=120, follow_budget=False)
    times = [t for t, _ in runner.starts]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap <= 2.0 + 0.01 + 1e-9 for gap in gaps)
    assert min(gaps) < 0.02  # full jitter reaches below the floors
    assert 60 < len(times) < 400


def test_the_schedule_retries_only_what_did_not_pass():
    s = _schedule(probe_rate=200)
    assert s.next_delay(READY, attempts=3, now=5.0, since=0.0) is None  # passed: not retried
    assert s.next_delay(REFUSED, attempts=3, now=5.0, since=0.0) == pytest.approx(0.02)  # floor


def test_no_attempt_starts_at_or_past_the_deadline():
    # tenacity never stops a host's retries: the loop's deadline ends them all
    result, _, runner = run(["a", "b"], lambda h, t: REFUSED, timeout=10)
    assert result.end is End.TIMEOUT
    assert runner.starts and max(t for t, _ in runner.starts) < 10.0


# --- per-source penalties (OpenSSH 9.8+) ----------------------------------------------------

PENALISED = Outcome(Status.RETRY, Stage.SSH, "penalty", "Not allowed at this time", pace=1.5)
ABORTED = Outcome(Status.RETRY, Stage.SSH, "no-banner", "no SSH banner", pace=1.5)


def test_an_attempt_ended_before_authentication_is_followed_no_sooner_than_its_pace():
    result, _, runner = run(["a"], lambda h, t: ABORTED, timeout=30)
    assert result.end is End.TIMEOUT
    times = [t for t, _ in runner.starts]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 1.5  # the floor alone (0.1 s) would try it ~10 times a second
    assert len(times) <= 30 / 1.5 + 1


def test_drops_after_a_rejected_key_continue_the_rejections_and_say_why():
    # rejected, then sshd refuses the address for the rejection (authfail): exit as for three
    # rejections, soon, instead of waiting the penalty (>= 15 s) out
    result, _, runner = run(["a"], lambda h, t: REJECTED if t < 0.02 else PENALISED)
    assert result.end is End.PERMANENT
    assert len(runner.starts) == 3
    assert result.elapsed < 15
    assert result.failed is not None and result.failed.reason == "auth-rejected"
    assert "Permission denied" in result.failed.detail
    assert "PerSourcePenalties" in result.failed.detail
    assert result.hint == "fix keys"


def test_drops_without_a_rejection_are_waited_out():
    # penalised by something else (another client, an earlier run): time fixes it
    result, _, _ = run(["a"], lambda h, t: READY if t > 20 else PENALISED)
    assert result.end is End.READY
    assert result.elapsed > 20
