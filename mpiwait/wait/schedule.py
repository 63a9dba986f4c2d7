"""When to try a host again after an attempt that did not pass: a delay that follows the budget.

The probe budget (``--probe-rate`` attempts a second, all hosts together) is what protects the
cluster; how often one host is tried is only a question of how that budget is shared. So the
delay after a failed attempt is drawn (uniformly, from an injectable random source) between:

- ``lo``, the per-host floor of the stage that failed (a refused connect is cheap for the worker,
  an unresolvable name costs the cluster DNS up to 8 queries, a failed handshake costs sshd a
  fork and a key exchange): the most often a single unready host is ever tried;
- ``hi``, the larger of the floor, twice the host's even share of the budget (hosts still
  missing / probe rate; the mean delay is then a little above the share) and an aged window
  that doubles while the host stays away past a grace period, all capped by the envelope of
  ``--retry-initial`` doubling to ``--retry-max``, which bounds how long any host goes untried
  (as before).

Few hosts missing: each is tried near its floor (the launch gap follows). Many missing: the
share exceeds the envelope, every host is tried as before and the start window in the loop
spends the same budget as before. A host missing for a minute is back on the old schedule.
A permanent-looking failure (key rejected) keeps the old full-jitter backoff: its repeats are a
race with a worker mounting its keys, and racing faster would only end the wait sooner. So does
every host when the user set the envelope by hand (``follow_budget`` off): the options keep the
meaning they always had.

tenacity carries the decisions, one call state per host asked by the one waiting loop (not a
``Retrying`` per host, which would sleep in a thread of its own: docs/design-decisions.md):
which outcomes are retried (a ``retry_base``: any that did not pass), how long to wait (a
``wait_base``: the budget-following one above, or full jitter), and when to stop (before a
next attempt that would come at or past the deadline, as ``stop_before_delay`` does). The call
state carries the attempt's Outcome as it is, not wrapped in a Future as tenacity's own
``retry_if_result`` wants it: building that Future was most of a decision's cost.
"""

from __future__ import annotations

import math
import random

import tenacity
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from mpiwait.probe.outcome import Outcome, Reason, Stage, Status
from mpiwait.settings import RetryPolicy


class HostRetryState(tenacity.RetryCallState):
    """One host's call state: tenacity's, with the last attempt's Outcome as it is."""

    last: Outcome


class FullJitter(tenacity.wait_exponential):
    """tenacity's wait_random_exponential (uniform over the doubling window), with the random
    source injected so that tests can seed it."""

    def __init__(self, initial: float, maximum: float, rng: random.Random) -> None:
        super().__init__(multiplier=initial, max=maximum)
        self._rng = rng

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self._rng.uniform(0.0, float(super().__call__(retry_state)))


class FollowBudget(wait_base):
    """The delay that follows the probe budget (the module's docstring); a FATAL outcome keeps
    full jitter. ``missing``, the hosts not ready in all, is set by the loop before each call."""

    def __init__(self, policy: RetryPolicy, probe_rate: float, rng: random.Random) -> None:
        self._policy = policy
        self._rate = probe_rate
        self._rng = rng
        self._envelope = tenacity.wait_exponential(multiplier=policy.initial, max=policy.maximum)
        self.missing = 1

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        p = self._policy
        envelope = float(self._envelope(retry_state))
        outcome = _last(retry_state)
        if outcome.status is Status.FATAL:
            return self._rng.uniform(0.0, envelope)
        lo = min(_floor(p, outcome.stage), envelope)
        share = self.missing / self._rate if self._rate > 0 else 0.0
        over = (retry_state.seconds_since_start or 0.0) - p.grace
        aged = lo * 2.0 ** min(over / p.doubling, 64.0) if over > 0 else lo
        # uniform over [lo, 2 x share] averages a little more than the share: all missing
        # hosts together then ask for a little less than the budget, never more (the start
        # window would cut an excess, but a smooth demand at the limit uses all of it: with
        # [lo, 2 x share - lo], 50 unresolvable hosts cost the DNS 8% more than before).
        hi = min(envelope, max(lo, 2.0 * share, aged))
        return self._rng.uniform(lo, hi)


class StopAtDeadline(stop_base):
    """Stop before a next attempt that would start at or past the deadline (which the loop
    never starts): stop_before_delay, against the wait's deadline rather than the host's
    first attempt."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        now = retry_state.outcome_timestamp or 0.0
        return now + retry_state.upcoming_sleep >= self._deadline


class RetryIfNotPassed(retry_base):
    """Retry whatever did not pass: not yet (RETRY) and refused (FATAL, until the wait ends on
    a streak of them)."""

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return _last(retry_state).status is not Status.READY


def _floor(policy: RetryPolicy, stage: Stage) -> float:
    """The most often one unready host is tried, by the stage it failed."""
    if stage is Stage.DNS:
        return policy.floor_dns
    if stage is Stage.TCP:
        return policy.floor_tcp
    return policy.floor_ssh


def _last(retry_state: tenacity.RetryCallState) -> Outcome:
    assert isinstance(retry_state, HostRetryState)
    return retry_state.last


class Schedule:
    """Each host's next attempt, asked of tenacity's strategies from the one waiting loop."""

    def __init__(
        self,
        policy: RetryPolicy,
        probe_rate: float,
        rng: random.Random | None = None,
        *,
        deadline: float = math.inf,
    ) -> None:
        self.policy = policy
        rng = rng or random.Random()
        self._retrying = tenacity.Retrying()  # the owner tenacity's call state requires
        self._retry = RetryIfNotPassed()
        self._budget = FollowBudget(policy, probe_rate, rng)
        self._wait: wait_base = (
            self._budget
            if policy.follow_budget
            else FullJitter(policy.initial, policy.maximum, rng)
        )
        self._stop: stop_base = (
            StopAtDeadline(deadline) if math.isfinite(deadline) else tenacity.stop_never
        )

    def state(self, since: float) -> HostRetryState:
        """A host's retry state, for a stretch of not being ready that began at ``since``."""
        state = HostRetryState(self._retrying, None, (), {})
        state.start_time = since
        return state

    def next_delay(
        self,
        state: HostRetryState,
        outcome: Outcome,
        *,
        attempts: int,
        now: float,
        since: float,
        missing: int,
    ) -> float | None:
        """Seconds until the next attempt at a host whose ``attempts``-th attempt just ended
        with ``outcome`` at ``now``, not ready since ``since``, with ``missing`` hosts not ready
        in all; None when it is not tried again (it passed, or the deadline comes first)."""
        state.attempt_number = attempts
        state.last = outcome
        state.outcome_timestamp = now
        state.start_time = since
        if not self._retry(state):
            return None
        self._budget.missing = missing
        state.upcoming_sleep = sleep = float(self._wait(state))
        if self._stop(state):
            return None
        return sleep

    def delay(
        self, *, stage: Stage, status: Status, attempts: int, away: float, missing: int
    ) -> float:
        """As ``next_delay``, for a host away ``away`` seconds, without a deadline."""
        outcome = Outcome(status, stage, Reason.READY)  # its reason is not read here
        state = self.state(0.0)
        delay = self.next_delay(
            state, outcome, attempts=attempts, now=away, since=0.0, missing=missing
        )
        assert delay is not None
        return delay
