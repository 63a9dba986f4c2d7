"""Re-check before exec, against real sshd hosts (tests/testbed.py, network namespaces).

A worker that passed, then died while another was still late, must not be launched on: mpiwait
checks again the hosts that passed longer ago than ``--recheck-after`` before it execs COMMAND
(or exits 0 without one), and waits for one that fails. Every step is taken only after
mpiwait's own log line shows the state it depends on; the one wait that is not on a line is
the age a pass must reach to count as stale, a lower bound that only time can give.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import testbed
from conftest import requires_root_netns

pytestmark = [pytest.mark.root, requires_root_netns]

REPO = Path(__file__).resolve().parent.parent
BOUND = 0.5  # --recheck-after in these tests
RUN_TIMEOUT = 90.0

# COMMAND: log in to every host as mpirun's ssh would and print its hostname; any host that
# does not take the login makes it fail (exit 9), as the launch would.
EVERY_HOST = 'for h in "$@"; do ssh -o BatchMode=yes "$h" hostname || exit 9; done'


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MPIWAIT_") and k != "K_MPI_JOB_ROLE"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


class Mpiwait:
    """mpiwait running in the bed's launcher context; its stderr is read as it comes."""

    def __init__(self, b: testbed.TestBed, args: list[str], command: list[str]) -> None:
        argv = [sys.executable, "-m", "mpiwait", *args, *(["--", *command] if command else [])]
        self.p = b.popen(
            argv,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self._new = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.p.stderr, self.err), daemon=True),
            threading.Thread(target=self._read, args=(self.p.stdout, self.out), daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read(self, stream, into: list[str]) -> None:
        for line in stream:
            with self._new:
                into.append(line)
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> float:
        """Block until a stderr line matches; returns when it was seen."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._new:
            while not any(rx.search(line) for line in self.err):
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._readers[0].is_alive()):
                    pytest.fail(f"no line matching {pattern!r}\n{self}")
                self._new.wait(min(left, 0.5))
        return time.monotonic()

    def finish(self) -> int:
        try:
            self.p.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            pytest.fail(f"mpiwait still running after {RUN_TIMEOUT}s\n{self}")
        for t in self._readers:
            t.join(10)
        assert "Traceback" not in self.stderr, self
        return self.p.returncode

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    def __str__(self) -> str:
        return f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


def _line(pattern: str) -> str:
    return rf"^mpiwait: \[\+[\d.]+s\] {pattern}"


def _index(run: Mpiwait, pattern: str) -> int:
    rx = re.compile(pattern)
    return next(k for k, line in enumerate(run.err) if rx.search(line))


@pytest.mark.parametrize("with_command", [True, False], ids=["exec", "init-container"])
def test_a_worker_that_dies_while_another_is_late_is_waited_for_again(bed, with_command):
    b = bed(3)
    w1, w2, w3 = b.names
    b.stop_sshd(2)  # w3 is late
    command = ["sh", "-c", EVERY_HOST, "sh", w1, w2, w3] if with_command else []
    args = ["--hosts", f"{w1},{w2},{w3}", "--timeout", "60", "--recheck-after", str(BOUND)]
    run = Mpiwait(b, args, command)
    run.wait_for(_line(rf"{w3}: tcp refused"))
    seen = run.wait_for(_line(r"2/3 ready"))
    b.stop_sshd(1, sessions=True)  # w2 dies after it passed
    time.sleep(max(0.0, seen + 2 * BOUND - time.monotonic()))  # its pass is now stale
    b.start_sshd(2)  # the late one arrives: all have passed once
    run.wait_for(_line(rf"{w2} no longer ready: tcp refused"))
    assert run.p.poll() is None, run  # nothing launched while w2 is down
    b.start_sshd(1)  # w2 is back
    assert run.finish() == 0, run
    if with_command:
        assert sorted(run.stdout.split()) == sorted([w1, w2, w3]), run
    recheck = _index(run, _line(rf"re-checking \d hosts ready for more than {BOUND:g}s: "))
    assert w2 in run.err[recheck], run
    lost = _index(run, _line(rf"{w2} no longer ready"))
    back = _index(run, _line(rf"3/3 ready \({w2}\)"))
    done = _index(run, r"^mpiwait: all 3 hosts ready in ")
    assert recheck < lost < back < done, run


def test_a_worker_that_dies_for_good_after_passing_ends_in_timeout_naming_it(bed, tmp_path):
    b = bed(2)
    w1, w2 = b.names
    b.stop_sshd(1)  # w2 is late
    log = tmp_path / "termination-log"
    log.touch()
    args = ["--hosts", f"{w1},{w2}", "--timeout", "20", "--recheck-after", str(BOUND),
            "--termination-log", str(log)]  # fmt: skip
    run = Mpiwait(b, args, ["sh", "-c", EVERY_HOST, "sh", w1, w2])
    run.wait_for(_line(rf"{w2}: tcp refused"))
    seen = run.wait_for(_line(rf"1/2 ready \({w1}\)"))
    b.stop_sshd(0, sessions=True)  # w1 dies for good
    time.sleep(max(0.0, seen + 2 * BOUND - time.monotonic()))
    b.start_sshd(1)
    run.wait_for(_line(rf"{w1} no longer ready: tcp refused"))
    assert run.finish() == 124, run
    assert run.stdout == "", run  # COMMAND never ran
    summary = run.stderr[run.stderr.index(f"{w1} no longer ready") :]
    assert re.search(rf"^mpiwait: .*\b{w1}\b", summary.split("\n", 1)[1], re.M), run
    assert w1 in log.read_text()
    assert w2 not in re.sub(r"\d+/\d+", "", log.read_text()), log.read_text()


def test_a_quick_start_is_not_rechecked_and_logs_in_once_per_host(bed):
    b = bed(3)
    w1, w2, w3 = b.names
    b.stop_sshd(2)
    run = Mpiwait(b, ["--hosts", f"{w1},{w2},{w3}", "--timeout", "60"], [])  # default bound
    run.wait_for(_line(rf"{w3}: tcp refused"))
    b.start_sshd(2)
    assert run.finish() == 0, run
    assert "re-checking" not in run.stderr, run
    logins = [Path(h.sshd_log).read_text().count("Accepted publickey") for h in b.hosts]
    assert logins == [1, 1, 1], run
