"""Freshness at the launch, against real sshd hosts (tests/testbed/, network namespaces).

A worker that passed, then died while another was still late, must not be launched on, however
long ago it passed: mpiwait keeps the connection of each login open and notices its end, and
checks again what it holds no connection to (``--recheck-after``). Every step is taken only
after mpiwait's own log line shows the state it depends on, except where the scene itself is a
schedule (a worker stopping 2 s before the last one arrives); what is asserted is the order of
events, never how long they took.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import testbed
from conftest import requires_root_netns

pytestmark = [pytest.mark.root, requires_root_netns]

BOUND = 0.5  # --recheck-after in these tests
RUN_TIMEOUT = 90.0

# COMMAND: log in to every host as mpirun's ssh would and print its hostname; any host that
# does not take the login makes it fail (exit 9), as the launch would.
EVERY_HOST = 'for h in "$@"; do ssh -o BatchMode=yes "$h" hostname || exit 9; done'


def _line(pattern: str) -> str:
    return rf"^mpiwait: \[\+[\d.]+s\] {pattern}"


def _index(r: testbed.Result, pattern: str) -> int:
    rx = re.compile(pattern)
    return next(k for k, line in enumerate(r.lines) if rx.search(line))


@pytest.mark.parametrize("with_command", [True, False], ids=["exec", "init-container"])
def test_a_worker_whose_sshd_stops_listening_is_waited_for_again_within_the_bound(
    bed, with_command
):
    # Its sessions live on (an sshd restarted outside a container): the connection mpiwait
    # keeps says nothing; the re-check every --recheck-after does.
    b = bed(3)
    w1, w2, w3 = b.names
    b.stop_sshd(2)  # w3 is late
    command = ["sh", "-c", EVERY_HOST, "sh", w1, w2, w3] if with_command else []
    args = ["--hosts", f"{w1},{w2},{w3}", "--timeout", "60", "--recheck-after", str(BOUND)]
    run = testbed.start(b, args, command=command)
    run.wait_for(_line(rf"{w3}: tcp refused"))
    run.wait_for(_line(r"2/3 ready"))
    b.stop_sshd(1, sessions=False)  # w2's listener stops after it passed
    run.wait_for(_line(rf"{w2} no longer ready: tcp refused"))
    b.start_sshd(2)  # the late one arrives
    run.wait_for(_line(rf"2/3 ready \({w3}\)"))
    assert run.proc.poll() is None, run  # nothing launched while w2 is down
    b.start_sshd(1)  # w2 is back
    r = run.finish(RUN_TIMEOUT)
    assert r.returncode == 0, r
    if with_command:
        assert sorted(r.stdout.split()) == sorted([w1, w2, w3]), r
    lost = _index(r, _line(rf"{w2} no longer ready"))
    last = _index(r, _line(rf"2/3 ready \({w3}\)"))
    back = _index(r, _line(rf"3/3 ready \({w2}\)"))
    done = _index(r, r"^mpiwait: all 3 hosts ready in ")
    assert lost < last < back < done, r


# Issue 22's scene, on a shorter clock: w1 and w2 pass at once, w1's sshd (and its sessions: a
# pod restarted, evicted or OOM-killed) stops early in the wait or 2 s before w3, the last one,
# arrives; w1 comes back 3 s after w3. Everything is well under the default --recheck-after.
SCENES = {"early": (1.5, 10.0, 13.0), "2s-before-the-last": (8.0, 10.0, 13.0)}


@pytest.mark.parametrize("scene", SCENES)
def test_a_worker_that_stops_before_the_last_one_arrives_is_waited_for(bed, scene):
    stop_at, last_at, back_at = SCENES[scene]
    b = bed(3)
    w1, w2, w3 = b.names
    b.stop_sshd(2)  # w3 is late
    run = testbed.start(
        b, ["--hosts", f"{w1},{w2},{w3}", "--timeout", "60"],  # default --recheck-after
        command=["sh", "-c", EVERY_HOST, "sh", w1, w2, w3],
    )  # fmt: skip
    began = run.started
    run.wait_for(_line(r"2/3 ready"))

    def at(t: float) -> None:
        time.sleep(max(0.0, began + t - time.monotonic()))

    at(stop_at)
    b.stop_sshd(0, sessions=True)
    at(last_at)
    b.start_sshd(2)
    run.wait_for(_line(rf"\d/3 ready \({w3}\)"))
    at(back_at - 0.5)
    assert run.proc.poll() is None, run.finish(5)  # nothing launched while w1 is down
    at(back_at)
    b.start_sshd(0)
    r = run.finish(RUN_TIMEOUT)
    assert r.returncode == 0, r
    assert sorted(r.stdout.split()) == sorted([w1, w2, w3]), r  # ssh got into every host
    lost = _index(r, _line(rf"{w1} no longer ready"))
    last = _index(r, _line(rf"\d/3 ready \({w3}\)"))
    back = _index(r, _line(rf"3/3 ready \({w1}\)"))
    done = _index(r, r"^mpiwait: all 3 hosts ready in ")
    assert lost < last < back < done, r


def test_a_worker_that_dies_for_good_after_passing_ends_in_timeout_naming_it(bed, tmp_path):
    b = bed(2)
    w1, w2 = b.names
    b.stop_sshd(1)  # w2 is late
    log = tmp_path / "termination-log"
    log.touch()
    args = ["--hosts", f"{w1},{w2}", "--timeout", "20", "--recheck-after", str(BOUND),
            "--termination-log", str(log)]  # fmt: skip
    run = testbed.start(b, args, command=["sh", "-c", EVERY_HOST, "sh", w1, w2])
    run.wait_for(_line(rf"{w2}: tcp refused"))
    run.wait_for(_line(rf"1/2 ready \({w1}\)"))
    seen = time.monotonic()
    b.stop_sshd(0, sessions=True)  # w1 dies for good
    time.sleep(max(0.0, seen + 2 * BOUND - time.monotonic()))
    b.start_sshd(1)
    run.wait_for(_line(rf"{w1} no longer ready: tcp refused"))
    r = run.finish(RUN_TIMEOUT)
    assert r.returncode == 124, r
    assert r.stdout == "", run  # COMMAND never ran
    summary = r.stderr[r.stderr.index(f"{w1} no longer ready") :]
    assert re.search(rf"^mpiwait: .*\b{w1}\b", summary.split("\n", 1)[1], re.M), r
    assert w1 in log.read_text()
    assert w2 not in re.sub(r"\d+/\d+", "", log.read_text()), log.read_text()


def test_a_quick_start_is_not_rechecked_and_logs_in_once_per_host(bed):
    b = bed(3)
    w1, w2, w3 = b.names
    b.stop_sshd(2)
    run = testbed.start(b, ["--hosts", f"{w1},{w2},{w3}", "--timeout", "60"])  # default bound
    run.wait_for(_line(rf"{w3}: tcp refused"))
    b.start_sshd(2)
    r = run.finish(RUN_TIMEOUT)
    assert r.returncode == 0, r
    assert "re-checking" not in r.stderr, r
    logins = [Path(h.sshd_log).read_text().count("Accepted publickey") for h in b.hosts]
    assert logins == [1, 1, 1], r
