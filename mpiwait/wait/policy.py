"""The wait's policy as values, built once by the CLI from the options and settings.py's
defaults: the deadline, the probe budget, and how one host's retries are spaced."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from mpiwait.probe.outcome import Stage


class Budget(NamedTuple):
    """What the cluster is asked to bear, all hosts together (the wait and --list-ready)."""

    parallel: int  # attempts in flight at once
    rate: float  # attempts started per second; 0: no limit


@dataclass(frozen=True)
class RetryPolicy:
    """How long a host waits after an attempt that did not pass (wait/schedule.py)."""

    initial: float  # first window of the envelope (--retry-initial)
    maximum: float  # the envelope's cap (--retry-max): no host goes untried longer
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


@dataclass(frozen=True)
class WaitPolicy:
    timeout: float  # 0: no deadline
    budget: Budget
    retry: RetryPolicy
    reread_interval: float
    permanent_after: int
    status_interval: float = math.inf  # how often to emit StillWaiting while hosts are not ready
    recheck_after: float = math.inf  # the oldest a pass may be at the end (re-checked before)
