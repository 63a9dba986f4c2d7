"""How the re-check before the launch reads in the log (text and JSON)."""

from __future__ import annotations

import io
import json

import testbed

from mpiwait.output.report import Reporter
from mpiwait.probe.outcome import Stage
from mpiwait.settings import LogFormat
from mpiwait.wait.events import HostLost, HostReady, HostState, Rechecking

LOST = HostLost(HostState("w2", Stage.TCP, "refused", "10.0.0.3 port 22: refused", 9), 41.25)


def _out(*events, log_format=LogFormat.TEXT, quiet=False) -> list[str]:
    rep = Reporter(log_format, quiet, stream=io.StringIO())
    for event in events:
        rep(event)
    testbed.check_json_log("", rep.stream.getvalue())  # type: ignore[attr-defined]
    return rep.stream.getvalue().splitlines()  # type: ignore[attr-defined]


def test_text_says_how_many_are_rechecked_and_why():
    (line,) = _out(Rechecking(("w1", "w2", "w3"), 30.0, 41.2))
    assert line == "mpiwait: [+41.2s] re-checking 3 hosts ready for more than 30s: w1, w2, w3"


def test_text_of_a_large_recheck_stays_one_short_line():
    hosts = tuple(f"worker-{i}" for i in range(1000))
    (line,) = _out(Rechecking(hosts, 30.0, 600))
    assert line.startswith("mpiwait: [+600.0s] re-checking 1000 hosts ready for more than 30s: ")
    assert line.endswith("and 995 more") and len(line) < 160


def test_text_names_a_host_that_failed_its_recheck():
    (line,) = _out(LOST)
    assert line == "mpiwait: [+41.2s] w2 no longer ready: tcp refused (10.0.0.3 port 22: refused)"


def test_a_host_ready_after_another_was_lost_gets_its_line():
    lines = _out(
        HostReady("w1", 1, 3, 0.1), HostReady("w2", 2, 3, 0.1), LOST, HostReady("w3", 2, 3, 50)
    )
    assert lines[-1] == "mpiwait: [+50.0s] 2/3 ready (w3)"


def test_json_records():
    recheck, lost = (
        json.loads(line)
        for line in _out(Rechecking(("w1",), 0.5, 3.0), LOST, log_format=LogFormat.JSON)
    )
    assert (recheck["event"], recheck["hosts"], recheck["older_than"]) == ("recheck", ["w1"], 0.5)
    assert (lost["event"], lost["host"], lost["stage"], lost["reason"]) == (
        "lost",
        "w2",
        "tcp",
        "refused",
    )


def test_quiet_leaves_them_out():
    assert _out(Rechecking(("w1",), 30.0, 41.2), LOST, quiet=True) == []
