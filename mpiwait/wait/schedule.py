"""When to try a host again after an attempt that did not pass: tenacity's retry and wait.

The delay follows the probe budget: drawn between the floor of the stage that failed and twice
the host's share of --probe-rate, wider for a host away past a grace period, capped by the
--retry-initial/--retry-max envelope. A rejected key, and every host when the envelope is set by
hand, keep full-jitter backoff (docs/design-decisions.md: the retry floors, the retry policy).
Nothing here sleeps or keeps time: the waiting loop asks, and schedules the host itself.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import tenacity
from tenacity.wait import wait_base

from mpiwait.probe.outcome import Outcome, Stage, Status
from mpiwait.settings import RetryPolicy


class FullJitter(tenacity.wait_exponential):
    """tenacity's wait_random_exponential, drawing from an injected random source instead of
    the random module's, so that seeded tests repeat."""

    def __init__(self, initial: float, maximum: float, rng: random.Random) -> None:
        super().__init__(multiplier=initial, max=maximum)
        self._rng = rng

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self._rng.uniform(0.0, float(super().__call__(retry_state)))


class FollowBudget(wait_base):
    """The delay that follows the probe budget (the module's docstring), ``missing()`` being the
    hosts not ready in all; a FATAL outcome keeps full jitter."""

    def __init__(
        self,
        policy: RetryPolicy,
        probe_rate: float,
        rng: random.Random,
        missing: Callable[[], int],
    ) -> None:
        self._policy = policy
        self._rate = probe_rate
        self._rng = rng
        self._missing = missing
        self._envelope = tenacity.wait_exponential(multiplier=policy.initial, max=policy.maximum)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        p = self._policy
        envelope = float(self._envelope(retry_state))
        outcome = _outcome(retry_state)
        if outcome.status is Status.FATAL:
            return self._rng.uniform(0.0, envelope)
        lo = min(_floor(p, outcome.stage), envelope)
        share = self._missing() / self._rate if self._rate > 0 else 0.0
        over = (retry_state.seconds_since_start or 0.0) - p.grace
        aged = lo * 2.0 ** min(over / p.doubling, 64.0) if over > 0 else lo
        # uniform over [lo, 2 x share] averages a little more than the share: all missing hosts
        # together then ask for a little less than the budget, never more
        hi = min(envelope, max(lo, 2.0 * share, aged))
        return self._rng.uniform(lo, hi)


def _floor(policy: RetryPolicy, stage: Stage) -> float:
    """The most often one unready host is tried, by the stage it failed."""
    if stage is Stage.DNS:
        return policy.floor_dns
    if stage is Stage.TCP:
        return policy.floor_tcp
    return policy.floor_ssh


def _outcome(retry_state: tenacity.RetryCallState) -> Outcome:
    """The attempt's Outcome, as the loop set it on the call state."""
    assert retry_state.outcome is not None
    outcome = retry_state.outcome.result()
    assert isinstance(outcome, Outcome)
    return outcome


def _did_not_pass(outcome: Outcome) -> bool:
    """Not yet (RETRY), and refused (FATAL, until the wait ends on a streak of them)."""
    return outcome.status is not Status.READY


class Schedule:
    """Each host's next attempt, decided by tenacity's retry, wait and stop objects. The one
    waiting loop asks them: a Retrying run per host would sleep in a thread of its own."""

    def __init__(
        self,
        policy: RetryPolicy,
        probe_rate: float,
        missing: Callable[[], int],
        rng: random.Random,
    ) -> None:
        wait: wait_base = (
            FollowBudget(policy, probe_rate, rng, missing)
            if policy.follow_budget
            else FullJitter(policy.initial, policy.maximum, rng)
        )
        # never run, only asked; stop_never: the wait's deadline ends every host's retries, in
        # the loop, which also ends the attempts then in flight
        self._retrying = tenacity.Retrying(
            retry=tenacity.retry_if_result(_did_not_pass), wait=wait, stop=tenacity.stop_never
        )

    def next_delay(
        self, outcome: Outcome, *, attempts: int, now: float, since: float
    ) -> float | None:
        """Seconds until the next attempt at a host whose ``attempts``-th attempt ended with
        ``outcome`` at ``now``, not ready since ``since``; None when it is not tried again."""
        r = self._retrying
        state = tenacity.RetryCallState(r, None, (), {})
        state.attempt_number = attempts
        state.set_result(outcome)
        # the loop's clock (a fake one in tests), not tenacity's
        state.start_time, state.outcome_timestamp = since, now
        if not r.retry(state):
            return None
        state.upcoming_sleep = sleep = float(r.wait(state))
        if r.stop(state):
            return None
        return sleep
