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
share exceeds the envelope, every host is tried as before and the token bucket in the loop
spends the same budget as before. A host missing for a minute is back on the old schedule.
A permanent-looking failure (key rejected) keeps the old full-jitter backoff: its repeats are a
race with a worker mounting its keys, and racing faster would only end the wait sooner. So does
every host when the user set the envelope by hand (``follow_budget`` off): the options keep the
meaning they always had.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mpiwait.probe.outcome import Stage, Status


@dataclass(frozen=True)
class RetryPolicy:
    initial: float  # first window of the envelope (--retry-initial)
    maximum: float  # the envelope's cap (--retry-max): no host goes untried longer
    probe_rate: float  # attempts per second, all hosts together; 0: no limit
    floor_dns: float
    floor_tcp: float
    floor_ssh: float
    grace: float  # seconds a host may stay away before its window starts to grow
    doubling: float  # then its window doubles every this many seconds, up to the envelope
    follow_budget: bool = True  # False: full jitter under the envelope (explicit --retry-*)

    def floor(self, stage: Stage) -> float:
        if stage is Stage.DNS:
            return self.floor_dns
        if stage is Stage.TCP:
            return self.floor_tcp
        return self.floor_ssh


class Schedule:
    """Delays for the waiting loop; pure arithmetic plus one random source."""

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        import tenacity

        self.policy = policy
        self._rng = rng or random.Random()
        self._wait = tenacity.wait_exponential(multiplier=policy.initial, max=policy.maximum)
        # tenacity's strategies read only attempt_number; one bare call state serves every host
        # from a single loop instead of a thread per host under Retrying.
        self._state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})

    def envelope(self, attempts: int) -> float:
        """The longest wait after the ``attempts``-th failed attempt (1-based)."""
        self._state.attempt_number = attempts
        return float(self._wait(self._state))

    def delay(
        self, *, stage: Stage, status: Status, attempts: int, away: float, missing: int
    ) -> float:
        """Seconds until the next attempt at a host whose ``attempts``-th attempt just failed
        at ``stage``, after ``away`` seconds of not being ready, with ``missing`` hosts not
        ready in all."""
        p = self.policy
        envelope = self.envelope(attempts)
        if status is Status.FATAL or not p.follow_budget:
            return self._rng.uniform(0.0, envelope)
        lo = min(p.floor(stage), envelope)
        share = missing / p.probe_rate if p.probe_rate > 0 else 0.0
        over = away - p.grace
        aged = lo * 2.0 ** min(over / p.doubling, 64.0) if over > 0 else lo
        # uniform over [lo, 2 x share] averages a little more than the share: all missing
        # hosts together then ask for a little less than the budget, never more (the token
        # bucket would cut an excess, but a smooth demand at the limit uses all of it: with
        # [lo, 2 x share - lo], 50 unresolvable hosts cost the DNS 8% more than before).
        hi = min(envelope, max(lo, 2.0 * share, aged))
        return self._rng.uniform(lo, hi)
