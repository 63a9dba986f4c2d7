"""The waiting loop: which host to probe when, until all are ready or the deadline passes.

It knows nothing of what a probe does (it gets Outcome values back) nor how events are shown
(it hands them to ``emit``). Time and concurrency come in through a Runner, so that the unit
tests run it on a fake clock. Per host, the next attempt is the Schedule's (wait/schedule.py);
across hosts, ``parallel`` in flight and ``probe_rate`` starts a second bound them all. A host
that passed is checked again while others are missing, and before the wait ends
(docs/how-it-works.md, "Fresh at the launch").
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from mpiwait.errors import Interrupted
from mpiwait.probe.outcome import Outcome, Reason, Stage, Status
from mpiwait.settings import LISTENER_CHECK_AFTER, WaitPolicy
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
from mpiwait.wait.runner import ConnectionLost, HostEvent, StartWindow
from mpiwait.wait.schedule import Schedule


class Runner(Protocol):
    """Where attempts run, and the clock they run against."""

    def now(self) -> float: ...

    def start(self, host: str) -> None:
        """Begin one attempt at ``host``; its outcome comes back through ``results``."""

    def results(self, timeout: float) -> list[tuple[str, Outcome] | HostEvent]:
        """Outcomes finished so far, and host events, waiting up to ``timeout`` seconds for the
        first."""


@dataclass
class _Track:
    host: str
    stage: Stage = Stage.PENDING
    reason: str = ""
    detail: str = ""
    attempts: int = 0
    fatal_streak: int = 0
    in_flight: bool = False
    hint: str | None = None
    since: float = 0.0  # when its current stretch of not being ready began
    passed_at: float = -math.inf  # when an attempt last passed
    listened_at: float = -math.inf  # when its listener was last tried at a wait's end
    counted: bool = False  # counted as ready (also while a refreshing attempt is in flight)
    rechecking: bool = False  # no longer counted, and its next outcome is a re-check's
    due_seq: int = 0  # its live entry in the heap (others are left behind by a reschedule)
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
    started: float
    rng: random.Random
    holds_connection: Callable[[str], bool]  # whether a host holds a kept connection
    # the listeners of these hosts tried: those that did not accept
    listeners: Callable[[Collection[str]], Collection[str]]
    tracks: dict[str, _Track] = field(default_factory=dict)
    schedule: Schedule = field(init=False)
    due: list[tuple[float, int, str]] = field(default_factory=list)  # heap of idle hosts
    seq: int = 0
    ready: int = 0
    in_flight: int = 0
    # a re-check round ends the wait when nobody failed it; a host lost in it waits again, and
    # its return starts a new round (else a short bound would re-check the re-checked forever)
    round_clean: bool | None = None  # None: no round yet

    def __post_init__(self) -> None:
        budget = self.policy.budget
        self.schedule = Schedule(self.policy.retry, budget.rate, self.missing, self.rng)

    def missing(self) -> int:
        """Hosts not counted as ready."""
        return len(self.tracks) - self.ready

    def add(self, hosts: tuple[str, ...], at: float) -> tuple[str, ...]:
        new = tuple(h for h in hosts if h not in self.tracks)
        for host in new:
            self.tracks[host] = _Track(host, since=at)
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

    def start_due(self, now: float, window: StartWindow) -> None:
        """Start the attempts due by ``now``, within the probe slots and the rate limit."""
        parallel, due, clock = self.policy.budget.parallel, self.due, self.runner.now
        while due and due[0][0] <= now and self.in_flight < parallel:
            _, seq, host = due[0]
            if seq != self.tracks[host].due_seq or self.tracks[host].in_flight:
                heapq.heappop(due)  # superseded
                continue
            # counted when it happens: starting a thread takes time of its own
            if not window.take(clock()):
                return
            heapq.heappop(due)
            self.tracks[host].in_flight = True
            self.in_flight += 1
            self.runner.start(host)

    def _schedule(self, host: str, at: float) -> None:
        self.seq += 1
        self.tracks[host].due_seq = self.seq
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
        rechecked, track.rechecking = track.rechecking or track.counted, False
        if track.rejected is not None and outcome.reason == Reason.PENALTY:
            # sshd penalises the address for the rejections themselves (PerSourcePenalties
            # authfail): its drops continue the streak instead of waiting the penalty out
            outcome = _penalised_after(track.rejected)
        changed = (outcome.stage, outcome.reason) != (track.stage, track.reason)
        track.stage, track.reason, track.detail = outcome.stage, outcome.reason, outcome.detail
        if outcome.status is Status.READY:
            track.passed_at = now
            if outcome.reached is not None:
                track.local_address = outcome.reached.local_address
            if not track.counted:
                track.counted = True
                self.ready += 1
            if not rechecked:  # a re-check that passes changes nothing worth a line
                self.emit(HostReady(host, self.ready, len(self.tracks), now - self.started))
            self._refresh(track, now)
            return None
        if track.counted:
            track.counted = False
            self.ready -= 1
        if rechecked:
            self.round_clean = False
            track.since = now
            self.emit(HostLost(track.state(), now - self.started))
            changed = False
        if outcome.status is Status.FATAL:
            track.fatal_streak += 1
            track.hint = outcome.hint
            track.rejected = outcome if outcome.reason == Reason.AUTH_REJECTED else None
            if track.fatal_streak >= self.policy.permanent_after:
                return track
        else:
            track.fatal_streak = 0
            track.rejected = None
        if changed:
            self.emit(HostChanged(track.state(), now - self.started))
        wait = self.schedule.next_delay(
            outcome, attempts=track.attempts, now=now, since=track.since
        )
        if wait is not None:  # None: tenacity's policy does not retry it
            # an attempt that sshd charged to our address: no sooner than its account allows
            self._schedule(host, now + max(wait, outcome.pace))
        return None

    def _refresh(self, track: _Track, now: float) -> None:
        """Check a host that passed again after a while, spread so that hosts that passed
        together do not all come due together; it counts as ready meanwhile."""
        bound = self.policy.recheck_after
        if math.isfinite(bound):
            self._schedule(track.host, now + self.rng.uniform(bound / 2, bound))

    def heard(self, event: HostEvent, now: float) -> None:
        """A host event: its kept connection ended."""
        self._lapse(self.tracks[event.host], now)

    def _lapse(self, track: _Track, now: float) -> None:
        """A passed host's kept connection ended: no longer ready until a check passes."""
        if not track.counted:
            return  # already waited for
        self._uncount(track)
        if not track.in_flight:  # else the attempt under way decides
            self._schedule(track.host, now)

    def _uncount(self, track: _Track) -> None:
        track.counted = False
        self.ready -= 1
        track.rechecking = True
        track.stage, track.reason, track.detail = Stage.PENDING, "re-checking", ""

    def recheck(self, now: float) -> bool:
        """Every host ready: send back the stale ones without a kept connection for another
        check; False if none."""
        if self.round_clean:
            return False
        horizon = now - self.policy.recheck_after
        stale = [
            t
            for t in self.tracks.values()
            if t.passed_at < horizon and not self.holds_connection(t.host)
        ]
        if not stale:
            return False
        self.emit(
            Rechecking(tuple(t.host for t in stale), self.policy.recheck_after, now - self.started)
        )
        self.round_clean = True
        for track in stale:
            self._uncount(track)
            if not track.in_flight:
                self._schedule(track.host, now)
        return True

    def may_end(self, now: float) -> bool:
        """Every host ready: whether the wait ends, once stale hosts and listeners are seen to."""
        return not self.recheck(now) and not self.listen(now)

    def listen(self, now: float) -> bool:
        """Every host ready: try the listeners of those held by a kept connection that did not
        pass nor have it tried lately; send back those that did not accept. False if none."""
        since = now - LISTENER_CHECK_AFTER
        due = [
            t
            for t in self.tracks.values()
            if max(t.passed_at, t.listened_at) <= since and self.holds_connection(t.host)
        ]
        if not due:
            return False
        failed = set(self.listeners([t.host for t in due]))
        for track in due:
            track.listened_at = now
            if track.host in failed:
                self._lapse(track, now)
        return bool(failed)


def _penalised_after(rejected: Outcome) -> Outcome:
    """A rejected login's outcome, told that sshd now also turns the address away."""
    note = "; sshd now turns this address away (PerSourcePenalties, for the failed logins)"
    detail = rejected.detail if rejected.detail.endswith(note) else rejected.detail + note
    return Outcome(
        status=rejected.status,
        stage=rejected.stage,
        reason=rejected.reason,
        detail=detail,
        hint=rejected.hint,
        reached=rejected.reached,
        pace=rejected.pace,
    )


def wait_for_hosts(
    *,
    first: tuple[str, ...],
    read_hosts: Callable[[], tuple[tuple[str, ...], tuple[str, ...]]],
    runner: Runner,
    policy: WaitPolicy,
    emit: Callable[[Event], None],
    rng: random.Random | None = None,
    holds_connection: Callable[[str], bool] = lambda host: False,
    listeners: Callable[[Collection[str]], Collection[str]] = lambda hosts: (),
) -> WaitResult:
    """Wait until every listed host is ready, the deadline passes, or a host fails for good.

    ``first`` are the hosts known at the start; ``read_hosts`` re-reads the sources and returns
    (hosts, source descriptions); hosts once listed stay waited for, since a worker that
    disappears from discover_hosts.sh is restarting, not leaving the job. ``rng`` is the
    source of the retry jitter (tests pass a seeded one). ``holds_connection(host)``: whether the
    host holds a kept connection, whose end the runner reports as a host event;
    ``listeners(hosts)`` tries those hosts' listeners and returns the ones that did not accept.
    """
    start = runner.now()
    deadline = start + policy.timeout if policy.timeout > 0 else math.inf
    rng = rng or random.Random()
    loop = _Loop(policy, runner, emit, start, rng, holds_connection, listeners)
    loop.add(first, start)
    next_reread = start + policy.reread_interval
    next_status = start + policy.status_interval
    window = StartWindow(policy.budget.rate)
    try:
        while True:
            now = runner.now()
            if now >= next_reread:
                loop.reread(read_hosts, now)
                next_reread = now + policy.reread_interval
            if loop.tracks and loop.ready == len(loop.tracks) and loop.may_end(now):
                return loop.result(End.READY)
            if now >= deadline:
                return loop.result(End.TIMEOUT)
            if now >= next_status:
                emit(StillWaiting(tuple(t.state() for t in loop.tracks.values()), now - start))
                next_status = now + policy.status_interval
            loop.start_due(now, window)
            wake = min(deadline, next_reread, next_status)
            if loop.due and loop.in_flight < policy.budget.parallel:
                wake = min(wake, max(loop.due[0][0], window.next_free()))
            for item in runner.results(max(0.0, wake - now)):
                if isinstance(item, ConnectionLost):
                    loop.heard(item, runner.now())
                    continue
                failed = loop.record(item[0], item[1], runner.now())
                if failed is not None:
                    return loop.result(End.PERMANENT, failed)
    except Interrupted as signal:
        return loop.result(End.INTERRUPTED, signal=signal.name)
