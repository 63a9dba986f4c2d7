"""The waiting loop: which host to probe when, until all are ready or the deadline passes.

It knows nothing about what a probe does (it gets Outcome values back) nor how events are
shown (it hands them to ``emit``). Time and concurrency come in through a Runner, so the whole
loop runs in unit tests against a fake clock, hundreds of rounds in milliseconds.

Per host: a delay from the moment an attempt ends, chosen by a Schedule (wait/schedule.py) that
shares the probe budget among the hosts still missing. Across hosts: at most ``parallel``
attempts in flight and at most ``probe_rate`` started per second (a token bucket), so a thousand
unready workers do not turn into a flood of DNS queries.

A host that has passed is not probed again while others are missing; but before the wait ends
with every host ready, the hosts that passed longer than ``recheck_after`` ago are checked once
more (all at once, within the same limits and deadline), and one that fails goes back to
waiting: a worker restarted while the last one was still pulling its image would otherwise
fail the launch.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import tenacity

from mpiwait.errors import Interrupted
from mpiwait.probe.outcome import PENALTY, Outcome, Stage, Status
from mpiwait.wait.events import (
    End,
    Event,
    HostChanged,
    HostLost,
    HostReady,
    HostsAdded,
    HostState,
    Rechecking,
    StillWaiting,
    WaitResult,
)
from mpiwait.wait.policy import WaitPolicy
from mpiwait.wait.runner import TokenBucket
from mpiwait.wait.schedule import Schedule


class Runner(Protocol):
    """Where attempts run, and the clock they run against."""

    def now(self) -> float: ...

    def start(self, host: str) -> None:
        """Begin one attempt at ``host``; its outcome comes back through ``results``."""

    def results(self, timeout: float) -> list[tuple[str, Outcome]]:
        """Outcomes finished so far, waiting up to ``timeout`` seconds for the first."""


@dataclass
class _Track:
    host: str
    retry: tenacity.RetryCallState  # its state under the retry policy (wait/schedule.py)
    stage: Stage = Stage.PENDING
    reason: str = ""
    detail: str = ""
    attempts: int = 0
    fatal_streak: int = 0
    in_flight: bool = False
    hint: str | None = None
    since: float = 0.0  # when its current stretch of not being ready began
    passed_at: float = -math.inf  # when an attempt last passed
    rechecking: bool = False
    local_address: str = ""  # this machine's end of its last passing connection
    rejected: Outcome | None = None  # the last rejected login of the current streak

    def state(self) -> HostState:
        return HostState(
            self.host, self.stage, self.reason, self.detail, self.attempts, self.local_address
        )


@dataclass
class _Loop:
    policy: WaitPolicy
    runner: Runner
    emit: Callable[[Event], None]
    schedule: Schedule
    started: float
    tracks: dict[str, _Track] = field(default_factory=dict)
    due: list[tuple[float, int, str]] = field(default_factory=list)  # heap of idle hosts
    seq: int = 0
    ready: int = 0
    in_flight: int = 0
    # a re-check round ends the wait when nobody failed it; a host lost in it waits again, and
    # its return starts a new round (else a short bound would re-check the re-checked forever)
    round_clean: bool | None = None  # None: no round yet

    def add(self, hosts: tuple[str, ...], at: float) -> tuple[str, ...]:
        new = tuple(h for h in hosts if h not in self.tracks)
        for host in new:
            self.tracks[host] = _Track(host, self.schedule.state(at), since=at)
            self._schedule(host, at)
        return new

    def reread(
        self, read_hosts: Callable[[], tuple[tuple[str, ...], tuple[str, ...]]], now: float
    ) -> None:
        """Read the host sources again; hosts not listed before are waited for from ``now``."""
        hosts, sources = read_hosts()
        new = self.add(hosts, now)
        if new:
            self.emit(HostsAdded(new, len(self.tracks), sources))

    def start_due(self, now: float, bucket: TokenBucket) -> None:
        """Start the attempts due by ``now``, within the probe slots and the rate limit."""
        parallel = self.policy.budget.parallel
        due = self.due
        while due and due[0][0] <= now and self.in_flight < parallel and bucket.take():
            _, _, host = heapq.heappop(due)
            self.tracks[host].in_flight = True
            self.in_flight += 1
            self.runner.start(host)

    def _schedule(self, host: str, at: float) -> None:
        self.seq += 1
        heapq.heappush(self.due, (at, self.seq, host))

    def result(
        self, end: End, failed: _Track | None = None, signal: str | None = None
    ) -> WaitResult:
        return WaitResult(
            end=end,
            hosts=tuple(t.state() for t in self.tracks.values()),
            elapsed=self.runner.now() - self.started,
            failed=failed.state() if failed else None,
            hint=failed.hint if failed else None,
            signal_name=signal,
        )

    def record(self, host: str, outcome: Outcome, now: float) -> _Track | None:
        """Apply one outcome; returns the track when it ends the wait for good."""
        track = self.tracks[host]
        track.in_flight = False
        self.in_flight -= 1
        track.attempts += 1
        rechecked, track.rechecking = track.rechecking, False
        if track.rejected is not None and outcome.reason == PENALTY:
            # sshd penalises the address for the rejections themselves (PerSourcePenalties
            # authfail): its drops continue the streak instead of waiting the penalty out
            outcome = _penalised_after(track.rejected)
        changed = (outcome.stage, outcome.reason) != (track.stage, track.reason)
        track.stage, track.reason, track.detail = outcome.stage, outcome.reason, outcome.detail
        if outcome.status is Status.READY:
            track.passed_at = now
            if outcome.reached is not None:
                track.local_address = outcome.reached.local_address
            self.ready += 1
            if not rechecked:  # a re-check that passes changes nothing worth a line
                self.emit(HostReady(host, self.ready, len(self.tracks), now - self.started))
            return None
        if rechecked:
            self.round_clean = False
            track.since = now
            self.emit(HostLost(track.state(), now - self.started))
            changed = False
        if outcome.status is Status.FATAL:
            track.fatal_streak += 1
            track.hint = outcome.hint
            track.rejected = outcome if outcome.reason == "auth-rejected" else None
            if track.fatal_streak >= self.policy.permanent_after:
                return track
        else:
            track.fatal_streak = 0
            track.rejected = None
        if changed:
            self.emit(HostChanged(track.state(), now - self.started))
        wait = self.schedule.next_delay(
            track.retry,
            outcome,
            attempts=track.attempts,
            now=now,
            since=track.since,
            missing=len(self.tracks) - self.ready,
        )
        if wait is not None:  # None: the deadline comes first
            # an attempt that sshd charged to our address: no sooner than its account allows
            self._schedule(host, now + max(wait, outcome.pace))
        return None

    def recheck(self, now: float) -> bool:
        """Every host ready: send back the stale ones for another check; False if none."""
        if self.round_clean:
            return False
        horizon = now - self.policy.recheck_after
        stale = [t for t in self.tracks.values() if t.passed_at < horizon]
        if not stale:
            return False
        self.emit(
            Rechecking(tuple(t.host for t in stale), self.policy.recheck_after, now - self.started)
        )
        self.round_clean = True
        for track in stale:
            track.rechecking = True
            track.stage, track.reason, track.detail = Stage.PENDING, "re-checking", ""
            self.ready -= 1
            self._schedule(track.host, now)
        return True


def _penalised_after(rejected: Outcome) -> Outcome:
    """A rejected login's outcome, told that sshd now also turns the address away."""
    note = "; sshd now turns this address away (PerSourcePenalties, for the failed logins)"
    detail = rejected.detail if rejected.detail.endswith(note) else rejected.detail + note
    return replace(rejected, detail=detail)


def wait_for_hosts(
    *,
    first: tuple[str, ...],
    read_hosts: Callable[[], tuple[tuple[str, ...], tuple[str, ...]]],
    runner: Runner,
    policy: WaitPolicy,
    emit: Callable[[Event], None],
    rng: random.Random | None = None,
) -> WaitResult:
    """Wait until every listed host is ready, the deadline passes, or a host fails for good.

    ``first`` are the hosts known at the start; ``read_hosts`` re-reads the sources and returns
    (hosts, source descriptions); hosts once listed stay waited for, since a worker that
    disappears from discover_hosts.sh is restarting, not leaving the job. ``rng`` is the
    source of the retry jitter (tests pass a seeded one).
    """
    start = runner.now()
    deadline = start + policy.timeout if policy.timeout > 0 else math.inf
    schedule = Schedule(policy.retry, policy.budget.rate, rng, deadline=deadline)
    loop = _Loop(policy, runner, emit, schedule, start)
    loop.add(first, start)
    next_reread = start + policy.reread_interval
    next_status = start + policy.status_interval
    bucket = TokenBucket(policy.budget.rate, policy.budget.parallel, start)
    try:
        while True:
            now = runner.now()
            if now >= next_reread:
                loop.reread(read_hosts, now)
                next_reread = now + policy.reread_interval
            if loop.tracks and loop.ready == len(loop.tracks) and not loop.recheck(now):
                return loop.result(End.READY)
            if now >= deadline:
                return loop.result(End.TIMEOUT)
            if now >= next_status:
                emit(StillWaiting(tuple(t.state() for t in loop.tracks.values()), now - start))
                next_status = now + policy.status_interval
            bucket.refill(now)
            loop.start_due(now, bucket)
            wake = min(deadline, next_reread, next_status)
            if loop.due and loop.in_flight < policy.budget.parallel:
                wake = min(wake, max(loop.due[0][0], bucket.next_token(now)))
            for host, outcome in runner.results(max(0.0, wake - now)):
                failed = loop.record(host, outcome, runner.now())
                if failed is not None:
                    return loop.result(End.PERMANENT, failed)
    except Interrupted as signal:
        return loop.result(End.INTERRUPTED, signal=signal.name)
