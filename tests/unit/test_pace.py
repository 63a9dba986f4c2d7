"""probe/pace.py: the account of connections closed before authentication, per SSH address,
as OpenSSH 9.8+ sshd keeps it (1 s each, running down in real time), against a fake clock."""

from __future__ import annotations

import os
from pathlib import Path

from mpiwait.probe.pace import Pacer
from mpiwait.settings import NOAUTH_BUDGET, NOAUTH_CHARGE

INFOS = [(2, 1, 6, "", ("10.0.0.7", 22))]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def sshd_account(times: list[float]) -> float:
    """The most sshd's account for the address ever held, charges at ``times``
    (srclimit_penalise: +noauth each, running down in real time)."""
    owed, last, worst = 0.0, None, 0.0
    for t in times:
        owed = max(0.0, owed - (t - last)) if last is not None else 0.0
        owed += NOAUTH_CHARGE
        last = t
        worst = max(worst, owed)
    return worst


def test_a_burst_goes_at_once_then_one_a_second():
    clock = Clock()
    pacer = Pacer(None, clock=clock, sleep=clock.sleep)
    waits = [pacer.charge("10.0.0.7-22") for _ in range(int(NOAUTH_BUDGET) + 3)]
    assert waits[: int(NOAUTH_BUDGET) - 1] == [0.0] * (int(NOAUTH_BUDGET) - 1)
    assert all(w > 0 for w in waits[int(NOAUTH_BUDGET) :])


def test_connections_that_honour_the_waits_never_near_the_penalty():
    clock = Clock()
    pacer = Pacer(None, clock=clock, sleep=clock.sleep)
    times = []
    for _ in range(300):  # every attempt fails at once before authenticating
        times.append(clock.t)
        clock.t += pacer.charge("10.0.0.7-22") + 0.001
    assert sshd_account(times) <= NOAUTH_BUDGET + 0.01  # sshd refuses above 15
    assert 300 / (times[-1] - times[0]) <= 1.05  # one a second, once the burst is spent


def test_accounts_are_per_address():
    pacer = Pacer(None, clock=Clock())
    for _ in range(10):
        pacer.charge("10.0.0.7-22")
    assert pacer.charge("10.0.0.8-22") == 0.0


def test_connect_only_runs_back_to_back_share_the_account_through_its_file(tmp_path: Path):
    clock = Clock()
    times = []
    for _ in range(30):  # thirty runs of --check tcp, each a new process with a new Pacer
        pacer = Pacer(str(tmp_path), clock=clock, sleep=clock.sleep)
        with pacer.turn(INFOS) as accepted:
            times.append(clock.t)
            accepted()
        clock.t += 0.05  # the next run starts at once
    assert sshd_account(times) <= NOAUTH_BUDGET + 0.01
    assert len(clock.slept) >= 30 - NOAUTH_BUDGET
    assert os.listdir(tmp_path) == ["pace-10.0.0.7-22"]


def test_without_a_directory_runs_do_not_wait_for_each_other(tmp_path: Path):
    clock = Clock()
    for _ in range(30):
        with Pacer(None, clock=clock, sleep=clock.sleep).turn(INFOS) as accepted:
            accepted()
    assert clock.slept == []


def test_a_file_from_before_a_reboot_never_stalls_a_run(tmp_path: Path):
    (tmp_path / "pace-10.0.0.7-22").write_text("999999999.000 999999.000\n")
    clock = Clock()
    for _ in range(int(NOAUTH_BUDGET)):  # a burst the budget allows at once
        with Pacer(str(tmp_path), clock=clock, sleep=clock.sleep).turn(INFOS) as accepted:
            accepted()
    assert clock.slept == []


def test_a_refused_connect_costs_the_account_nothing(tmp_path: Path):
    clock = Clock()
    for _ in range(30):  # sshd not listening yet: the body never reports an accept
        with Pacer(str(tmp_path), clock=clock, sleep=clock.sleep).turn(INFOS):
            pass
    assert clock.slept == []
