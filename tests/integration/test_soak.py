"""Soak: 200 hosts, 50 of them flapping for a minute; mpiwait's fds and threads stay bounded
and it completes once they settle.

Duration: CHURN = 60 s of flapping (the issue says 2 minutes). The resources are at their
ceiling within the first seconds (every probe slot busy) and a leak of one fd or thread per
attempt would cross the bound after a few dozen of the thousands of attempts made here, so a
second minute would add nothing but a minute to a CI suite that must stay under ten on 2 cores.

The 200 hosts are addresses of one namespace with one sshd (testbed.ManyHosts). Flapping is
per address, with iptables rules swapped every TICK: refused (RST), dropped (connect times out),
stalled (TCP connects, then nothing: no banner), and, for half of the flappers once their turn
has come, up (a login works). The other 25 never come up until the churn ends.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import testbed

pytestmark = [pytest.mark.root, pytest.mark.slow, testbed.needs("netns")]

N, FLAPPING = 200, 50
CHURN = 60.0
TICK = 0.5
PARALLEL = 32
CONNECT = 2.0
RETRY_MAX = 2.0
# Per probe in flight: one socket, one probe thread and (in the SSH stage) paramiko's transport
# thread; plus stdio and the main thread. A closed transport's thread is not joined: it ends by
# itself within 0.1 s (paramiko's socket poll), so during the first seconds, while the 150
# steady hosts log in at once, a dozen or so are still on their way out (up to 14 seen here):
# the burst gets PARALLEL more, the churn after it (few logins) only a small constant.
# Plus one fd for each host ready at the moment: the connection kept from its login
# (probe/kept.py), at most N, however long the churn lasts.
FD_BOUND = N + PARALLEL + 16
BURST = 5.0  # seconds
THREAD_BOUND_BURST = 3 * PARALLEL + 8
THREAD_BOUND = 2 * PARALLEL + 9  # + the one thread watching the kept connections


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def test_200_hosts_50_flapping_bounded_then_complete(tmp_path) -> None:
    rng = random.Random(20261129)
    flappers = list(range(N - FLAPPING, N))
    down = ["refuse", "drop", "stall"]
    with testbed.ManyHosts(N, workdir=tmp_path / "many") as m:
        m.set_states({i: rng.choice(down) for i in flappers})
        run = testbed.start(
            m,
            ["-F", str(m.ssh_config), "--hosts", ",".join(m.names), "--timeout", "300",
             "--connect-timeout", f"{CONNECT:g}", "--retry-max", f"{RETRY_MAX:g}",
             "--parallel", str(PARALLEL)],
            command=["echo", "soak-command-ran"],
        )  # fmt: skip
        run.wait_exec()
        began = time.monotonic()
        cpu0 = _cpu_seconds(run.pid)
        samples: list[tuple[float, int, int]] = []
        flips = 0
        while (elapsed := time.monotonic() - began) < CHURN:
            assert run.proc.poll() is None, run.finish(5)  # not done while 25 never came up
            samples.append((elapsed, testbed.fd_count(run.pid), testbed.thread_count(run.pid)))
            changes = {}
            for k, i in enumerate(flappers):
                if rng.random() < 0.5:
                    # flapper k may come up from k/25 of the churn on (only the first 25)
                    may_be_up = k < FLAPPING // 2 and elapsed > CHURN * k / (FLAPPING // 2)
                    changes[i] = rng.choice((["up"] if may_be_up else []) + down)
            m.set_states(changes)
            flips += len(changes)
            time.sleep(TICK)
        cpu = _cpu_seconds(run.pid) - cpu0
        settled = time.monotonic()
        m.set_states(["up"] * N)
        result = run.finish(timeout=60)
        took = time.monotonic() - settled

    fds = [s[1] for s in samples]
    threads = [s[2] for s in samples]
    steady = [s[2] for s in samples if s[0] >= BURST]
    report = (
        f"fds start {fds[0]} max {max(fds)} end {fds[-1]} (bound {FD_BOUND}); threads start "
        f"{threads[0]} max {max(threads)} (bound {THREAD_BOUND_BURST}) max after {BURST:g}s "
        f"{max(steady)} (bound {THREAD_BOUND}) end {threads[-1]}; {len(samples)} samples, "
        f"{flips} flips; cpu {cpu:.1f}s in {CHURN:g}s; done {took:.1f}s after settling"
    )
    print(report)
    assert max(fds) <= FD_BOUND, report
    assert max(threads) <= THREAD_BOUND_BURST, report
    assert max(steady) <= THREAD_BOUND, report
    assert max(threads) > PARALLEL // 2, report  # the churn really kept the probe slots busy
    assert cpu < 0.5 * CHURN, report  # waiting, not spinning
    assert result.returncode == 0, result
    assert result.stdout == "soak-command-ran\n", result
    assert f"all {N} hosts ready" in result.stderr, result
    assert took <= CONNECT + RETRY_MAX + 5.0, report  # one attempt's worth, and some slack
