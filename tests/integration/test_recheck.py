"""Re-check before exec, against real sshd hosts (tests/testbed/, network namespaces).

A worker that passed, then died while another was still late, must not be launched on: mpiwait
checks again the hosts that passed longer ago than ``--recheck-after`` before it execs COMMAND
(or exits 0 without one), and waits for one that fails. Every step is taken only after
mpiwait's own log line shows the state it depends on; the one wait that is not on a line is
the age a pass must reach to count as stale, a lower bound that only time can give.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import testbed

pytestmark = [pytest.mark.root, testbed.needs("netns")]

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
def test_a_worker_that_dies_while_another_is_late_is_waited_for_again(bed, with_command):
    b = bed(3)
    w1, w2, w3 = b.names
    b.stop_sshd(2)  # w3 is late
    command = ["sh", "-c", EVERY_HOST, "sh", w1, w2, w3] if with_command else []
    args = ["--hosts", f"{w1},{w2},{w3}", "--timeout", "60", "--recheck-after", str(BOUND)]
    run = testbed.start(b, args, command=command)
    run.wait_for(_line(rf"{w3}: tcp refused"))
    run.wait_for(_line(r"2/3 ready"))
    seen = time.monotonic()
    b.stop_sshd(1, sessions=True)  # w2 dies after it passed
    time.sleep(max(0.0, seen + 2 * BOUND - time.monotonic()))  # its pass is now stale
    b.start_sshd(2)  # the late one arrives: all have passed once
    run.wait_for(_line(rf"{w2} no longer ready: tcp refused"))
    assert run.proc.poll() is None, run  # nothing launched while w2 is down
    b.start_sshd(1)  # w2 is back
    r = run.finish(RUN_TIMEOUT)
    assert r.returncode == 0, r
    if with_command:
        assert sorted(r.stdout.split()) == sorted([w1, w2, w3]), r
    recheck = _index(r, _line(rf"re-checking \d hosts ready for more than {BOUND:g}s: "))
    assert w2 in r.lines[recheck], r
    lost = _index(r, _line(rf"{w2} no longer ready"))
    back = _index(r, _line(rf"3/3 ready \({w2}\)"))
    done = _index(r, r"^mpiwait: all 3 hosts ready in ")
    assert recheck < lost < back < done, r


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
