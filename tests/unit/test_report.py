"""mpiwait.output: text and JSON lines for every event, -q, summaries at scale, termination log."""

from __future__ import annotations

import io
import json
import math
import os
import select
import tty
from pathlib import Path

import pytest
import testbed

from mpiwait.cli import parse
from mpiwait.modes.dry_run import host_plans
from mpiwait.output.groups import NAMES_PER_GROUP, group_not_ready
from mpiwait.output.plans import print_plan
from mpiwait.output.report import Reporter
from mpiwait.output.termination import TERMINATION_LOG_BYTES, write_termination_log
from mpiwait.output.text import PER_HOST_LINES_UP_TO, PREFIX, summary_lines
from mpiwait.probe.outcome import Outcome, Stage, Status
from mpiwait.settings import Budget, LogFormat, RetryPolicy, WaitPolicy
from mpiwait.wait.events import (
    End,
    HostChanged,
    HostReady,
    HostsAdded,
    HostState,
    StillWaiting,
    WaitResult,
    WaitStarted,
)
from mpiwait.wait.loop import wait_for_hosts


def reporter(log_format: LogFormat = LogFormat.TEXT, quiet: bool = False) -> Reporter:
    return Reporter(log_format, quiet, stream=io.StringIO())


def lines(rep: Reporter) -> list[str]:
    return rep.stream.getvalue().splitlines()  # type: ignore[attr-defined]


def records(rep: Reporter) -> list[dict]:
    testbed.check_json_log("", rep.stream.getvalue())  # type: ignore[attr-defined]
    return [json.loads(line) for line in lines(rep)]


def started(n: int, **kw) -> WaitStarted:
    fields = {
        "hosts": tuple(f"w{i}" for i in range(n)),
        "sources": ("/etc/mpi/hostfile (3 hosts)",),
        "skipped_self": (),
        "check": "ssh",
        "timeout": 600.0,
    }
    fields.update(kw)
    return WaitStarted(**fields)


def state(host: str, stage: Stage = Stage.TCP, reason: str = "refused", detail: str = ""):
    return HostState(host, stage, reason, detail, attempts=3)


# One of each event type the waiter emits.
EVENTS = [
    started(3, skipped_self=("launcher",), notes=("a note",)),
    HostsAdded(("w3", "w4"), 5, ("/etc/mpi/discover_hosts.sh (5 hosts)",)),
    HostChanged(state("w1", detail="10.0.0.2 port 22: refused"), 1.25),
    HostReady("w0", 1, 5, 2.5),
    StillWaiting(
        (HostState("w0", Stage.READY), state("w1"), state("w2", Stage.DNS, "unresolved")), 10
    ),
    WaitResult(End.TIMEOUT, (HostState("w0", Stage.READY), state("w1")), 600.0),
]


# --- text --------------------------------------------------------------------------------


def test_every_text_line_has_the_prefix() -> None:
    rep = reporter()
    for event in EVENTS:
        rep(event)
    rep.info("hello")
    rep.error("bad", "do this", exit_code=2)
    assert lines(rep)
    assert all(line.startswith(PREFIX) for line in lines(rep))


def test_text_wait_started() -> None:
    rep = reporter()
    rep(started(3, skipped_self=("launcher", "launcher.local"), notes=("note one", "note two")))
    assert lines(rep) == [
        "mpiwait: waiting for 3 hosts (/etc/mpi/hostfile (3 hosts)) to pass the ssh check; "
        "deadline 600s",
        "mpiwait: this machine: launcher, launcher.local (no login; only its name must "
        "resolve, as the MPI will resolve it)",
        "mpiwait: note one",
        "mpiwait: note two",
    ]


def test_text_wait_started_one_host_no_deadline_no_source() -> None:
    rep = reporter()
    rep(started(1, sources=(), timeout=0.0, check="tcp"))
    assert lines(rep) == [
        "mpiwait: waiting for 1 host (no source lists any host yet) to pass the tcp check; "
        "no deadline"
    ]


def test_text_hosts_added() -> None:
    rep = reporter()
    rep(HostsAdded(("w3", "w4"), 5, ()))
    rep(HostsAdded(("w5",), 6, ()))
    rep(HostsAdded(tuple(f"x{i}" for i in range(8)), 14, ()))
    assert lines(rep) == [
        "mpiwait: 2 more hosts listed: w3, w4 (5 in all)",
        "mpiwait: 1 more host listed: w5 (6 in all)",
        "mpiwait: 8 more hosts listed: x0, x1, x2, x3, x4 and 3 more (14 in all)",
    ]


def test_text_host_changed() -> None:
    rep = reporter()
    rep(started(3))
    rep(HostChanged(state("w1", detail="10.0.0.2 port 22: refused"), 1.25))
    rep(HostChanged(state("w2", Stage.DNS, "unresolved"), 0.04))
    assert lines(rep)[1:] == [
        "mpiwait: [+1.2s] w1: tcp refused (10.0.0.2 port 22: refused)",
        "mpiwait: [+0.0s] w2: dns unresolved",
    ]


def test_text_host_ready_names_each_host_when_few() -> None:
    rep = reporter()
    rep(started(3))
    for i in range(3):
        rep(HostReady(f"w{i}", i + 1, 3, 0.5 * (i + 1)))
    assert lines(rep)[1:] == [
        "mpiwait: [+0.5s] 1/3 ready (w0)",
        "mpiwait: [+1.0s] 2/3 ready (w1)",
        "mpiwait: [+1.5s] 3/3 ready (w2)",
    ]


def test_text_still_waiting_is_one_line() -> None:
    rep = reporter()
    hosts = (
        HostState("w0", Stage.READY),
        *(state(f"t{i}") for i in range(7)),
        state("d0", Stage.DNS, "unresolved"),
        HostState("p0", Stage.PENDING),
    )
    rep(StillWaiting(hosts, 10.2))
    assert lines(rep) == [
        "mpiwait: [+10s] 1/10 ready; tcp refused: t0, t1, t2, t3, t4 and 2 more; "
        "dns unresolved: d0; not probed yet: p0"
    ]


def test_text_result_is_the_summary() -> None:
    result = WaitResult(End.TIMEOUT, (state("w1"),), 5.0)
    rep = reporter()
    rep(result)
    assert lines(rep) == [PREFIX + line for line in summary_lines(result)]


def test_text_error_and_info() -> None:
    rep = reporter()
    rep.error("hostfile /x: does not exist", "mount it", exit_code=2)
    rep.error("no hint", exit_code=3)
    rep.info("K_MPI_JOB_ROLE=worker: nothing to wait for")
    assert lines(rep) == [
        "mpiwait: error: hostfile /x: does not exist",
        "mpiwait: hint: mount it",
        "mpiwait: error: no hint",
        "mpiwait: K_MPI_JOB_ROLE=worker: nothing to wait for",
    ]


def test_reporter_writes_to_stderr_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    Reporter().info("to stderr")
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "mpiwait: to stderr\n"


# --- many hosts: grouped, suppressed, throttled ----------------------------------------------


def test_host_changed_lines_suppressed_above_the_limit() -> None:
    rep = reporter()
    rep(started(PER_HOST_LINES_UP_TO))
    rep(HostChanged(state("w1"), 1.0))
    assert len(lines(rep)) == 2  # at the limit: still one line per host

    rep = reporter()
    rep(started(PER_HOST_LINES_UP_TO + 1))
    for i in range(PER_HOST_LINES_UP_TO + 1):
        rep(HostChanged(state(f"w{i}"), 1.0))
    assert len(lines(rep)) == 1


def test_host_changed_suppressed_once_added_hosts_pass_the_limit() -> None:
    rep = reporter()
    rep(started(2))
    rep(HostChanged(state("w0"), 1.0))
    rep(
        HostsAdded(
            tuple(f"x{i}" for i in range(PER_HOST_LINES_UP_TO)), 2 + PER_HOST_LINES_UP_TO, ()
        )
    )
    rep(HostChanged(state("w1"), 2.0))
    assert [line for line in lines(rep) if ": tcp refused" in line] == [
        "mpiwait: [+1.0s] w0: tcp refused"
    ]


def test_progress_lines_throttled_for_many_hosts() -> None:
    total = 300
    rep = reporter()
    rep(started(total))
    for i in range(total):
        rep(HostReady(f"w{i}", i + 1, total, i * 0.01))
    progress = lines(rep)[1:]
    assert 8 <= len(progress) <= 11  # about one line per tenth
    assert progress[-1].endswith(f" {total}/{total} ready")  # the last one always, no names
    assert not any("(w" in line for line in progress)


def test_last_ready_always_reported_even_when_throttled() -> None:
    rep = reporter()
    total = 100
    rep(started(total))
    for i in range(total - 3, total):  # the first 97 came before (e.g. in another reporter)
        rep(HostReady(f"w{i}", i + 1, total, 1.0))
    assert lines(rep)[-1] == "mpiwait: [+1.0s] 100/100 ready"


def test_no_line_per_failed_attempt() -> None:
    """Through the real waiting loop: 40 refused attempts at one host make one line, not 40."""

    refused = Outcome(Status.RETRY, Stage.TCP, "refused", "port 22: refused")
    ready = Outcome(Status.READY, Stage.READY, "")

    class FakeRunner:
        def __init__(self) -> None:
            self.clock = 0.0
            self.started: list[str] = []
            self.attempts = {"a": 0, "b": 0}

        def now(self) -> float:
            return self.clock

        def start(self, host: str) -> None:
            self.started.append(host)

        def results(self, timeout: float) -> list[tuple[str, Outcome]]:
            if not self.started:
                self.clock += max(timeout, 0.001)
                return []
            out = []
            for host in self.started:
                self.attempts[host] += 1
                fails = host == "b" and self.attempts[host] <= 40
                out.append((host, refused if fails else ready))
            self.started.clear()
            self.clock += 0.01
            return out

    runner = FakeRunner()
    rep = reporter()
    rep(started(2))
    result = wait_for_hosts(
        first=("a", "b"),
        read_hosts=lambda: (("a", "b"), ()),
        runner=runner,
        policy=WaitPolicy(
            timeout=0,
            budget=Budget(parallel=4, rate=0),
            retry=RetryPolicy(0.01, 0.05, 0.05, 0.02, 0.1, 20.0, 10.0),
            reread_interval=1.0,
            permanent_after=3,
            status_interval=math.inf,
        ),
        emit=rep,
    )
    rep(result)
    assert result.end is End.READY
    assert runner.attempts["b"] == 41
    text = lines(rep)
    assert sum("b: tcp refused" in line for line in text) == 1
    assert len(text) == 1 + 1 + 2 + 1  # start, the one change, two ready lines, summary
    assert text[-1].startswith("mpiwait: all 2 hosts ready in ")


# --- quiet ---------------------------------------------------------------------------------


def test_quiet_text_keeps_only_errors_and_summary() -> None:
    rep = reporter(quiet=True)
    for event in EVENTS:
        rep(event)
    rep.info("chatter")
    rep.error("broken", "fix it", exit_code=3)
    summary = [PREFIX + line for line in summary_lines(EVENTS[-1])]  # type: ignore[arg-type]
    assert lines(rep) == [*summary, "mpiwait: error: broken", "mpiwait: hint: fix it"]


def test_quiet_json_keeps_only_errors_and_result() -> None:
    rep = reporter(LogFormat.JSON, quiet=True)
    for event in EVENTS:
        rep(event)
    rep.info("chatter")
    rep.error("broken", None, exit_code=3)
    assert [r["event"] for r in records(rep)] == ["result", "error"]


# --- JSON ----------------------------------------------------------------------------------


def test_json_one_parseable_line_per_event() -> None:
    rep = reporter(LogFormat.JSON)
    for event in EVENTS:
        rep(event)
    rep.info("hello")
    rep.error("bad", "hint", exit_code=2)
    got = records(rep)
    assert [r["event"] for r in got] == [
        "start",
        "hosts_added",
        "host",
        "ready",
        "waiting",
        "result",
        "info",
        "error",
    ]
    assert all(isinstance(r["time"], str) and r["time"][:2] == "20" for r in got)


def test_json_fields() -> None:
    rep = reporter(LogFormat.JSON)
    for event in EVENTS:
        rep(event)
    rep.info("hello")
    rep.error("bad", "hint", exit_code=2)
    start, added, host, ready, waiting, result, info, error = records(rep)
    assert start["hosts"] == ["w0", "w1", "w2"]
    assert start["sources"] == ["/etc/mpi/hostfile (3 hosts)"]
    assert start["skipped_self"] == ["launcher"]
    assert (start["check"], start["timeout"], start["notes"]) == ("ssh", 600.0, ["a note"])
    assert (added["hosts"], added["total"]) == (["w3", "w4"], 5)
    assert host == {
        "schema_version": 1,
        "time": host["time"],
        "event": "host",
        "elapsed": 1.25,
        "host": "w1",
        "stage": "tcp",
        "reason": "refused",
        "detail": "10.0.0.2 port 22: refused",
        "attempts": 3,
    }
    assert (ready["host"], ready["ready"], ready["total"], ready["elapsed"]) == ("w0", 1, 5, 2.5)
    # Counts per group and a sample, ready hosts left out; the full list is in "result".
    assert (waiting["ready"], waiting["total"], waiting["elapsed"]) == (1, 3, 10)
    assert [(g["stage"], g["reason"], g["count"]) for g in waiting["groups"]] == [
        ("tcp", "refused", 1),
        ("dns", "unresolved", 1),
    ]
    assert [[h["host"] for h in g["sample"]] for g in waiting["groups"]] == [["w1"], ["w2"]]
    assert (result["end"], result["elapsed"], result["failed"], result["hint"]) == (
        "timeout",
        600.0,
        None,
        None,
    )
    assert [h["stage"] for h in result["hosts"]] == ["ready", "tcp"]
    assert info["message"] == "hello"
    assert (error["message"], error["hint"], error["exit_code"]) == ("bad", "hint", 2)


def test_json_permanent_result_names_the_failed_host() -> None:
    failed = HostState("w1", Stage.SSH, "auth", "key rejected", 3)
    rep = reporter(LogFormat.JSON)
    rep(WaitResult(End.PERMANENT, (failed,), 1.23456, failed=failed, hint="check the key"))
    (result,) = records(rep)
    assert result["end"] == "permanent"
    assert result["elapsed"] == 1.235
    assert result["failed"]["host"] == "w1"
    assert result["hint"] == "check the key"


def test_json_lines_survive_odd_text() -> None:
    rep = reporter(LogFormat.JSON)
    odd = 'line\nbreak "quoted" \\ tab\t ünïcode'
    rep(HostChanged(HostState("w1", Stage.SSH, "banner", odd), 1.0))
    rep.info(odd)
    got = records(rep)
    assert len(got) == 2
    assert got[0]["detail"] == odd
    assert got[1]["message"] == odd


def test_json_progress_is_not_throttled() -> None:
    rep = reporter(LogFormat.JSON)
    for i in range(100):
        rep(HostReady(f"w{i}", i + 1, 100, 1.0))
    assert len(records(rep)) == 100


# --- group_not_ready and summary_lines --------------------------------------------------------


def test_group_not_ready() -> None:
    hosts = [
        HostState("r", Stage.READY),
        state("a"),
        HostState("p", Stage.PENDING),
        state("d1", Stage.DNS, "unresolved"),
        state("b"),
        state("d2", Stage.DNS, "unresolved"),
        state("c"),
    ]
    groups = group_not_ready(hosts)
    assert [(key, [h.host for h in members]) for key, members in groups] == [
        ("tcp refused", ["a", "b", "c"]),
        ("dns unresolved", ["d1", "d2"]),
        ("not probed yet", ["p"]),
    ]


def test_group_not_ready_all_ready_is_empty() -> None:
    assert group_not_ready([HostState("a", Stage.READY)]) == []


def test_summary_ready() -> None:
    hosts = tuple(HostState(f"w{i}", Stage.READY) for i in range(4))
    assert summary_lines(WaitResult(End.READY, hosts, 1.26)) == ["all 4 hosts ready in 1.3s"]
    assert summary_lines(WaitResult(End.READY, hosts[:1], 0.1)) == ["1 host ready in 0.1s"]


def test_summary_permanent() -> None:
    failed = HostState("w1", Stage.SSH, "auth", "publickey rejected for user mpi")
    result = WaitResult(End.PERMANENT, (failed,), 3.0, failed=failed, hint="check the key")
    assert summary_lines(result) == [
        "error: w1: publickey rejected for user mpi",
        "hint: check the key",
    ]
    no_hint = WaitResult(End.PERMANENT, (failed,), 3.0, failed=failed)
    assert summary_lines(no_hint) == ["error: w1: publickey rejected for user mpi"]


def test_summary_permanent_without_failed_host_is_not_called_an_interruption() -> None:
    result = WaitResult(End.PERMANENT, (state("w1"),), 3.0)
    head = summary_lines(result)[0]
    assert "interrupted" not in head
    assert "None" not in head


def test_summary_timeout_small() -> None:
    result = WaitResult(
        End.TIMEOUT,
        (HostState("w0", Stage.READY), state("w1", detail="10.0.0.2 port 22: refused")),
        600.04,
    )
    assert summary_lines(result) == [
        "timed out after 600.0s: 1 of 2 hosts not ready",
        "  tcp refused (1): w1 (10.0.0.2 port 22: refused)",
    ]


def test_summary_singular() -> None:
    result = WaitResult(End.TIMEOUT, (state("w1"),), 1.0)
    assert summary_lines(result)[0] == "timed out after 1.0s: 1 of 1 host not ready"


def test_summary_interrupted() -> None:
    result = WaitResult(End.INTERRUPTED, (state("w1"),), 2.5, signal_name="SIGTERM")
    assert summary_lines(result)[0] == "interrupted by SIGTERM after 2.5s: 1 of 1 host not ready"


def test_summary_no_hosts_listed() -> None:
    assert summary_lines(WaitResult(End.TIMEOUT, (), 60.0)) == [
        "timed out after 60.0s: no hosts were listed by any source"
    ]


def test_deadline_summary_for_300_hosts_fits_a_screen() -> None:
    hosts = (
        *(HostState(f"ready-{i}", Stage.READY) for i in range(50)),
        *(state(f"dns-{i}", Stage.DNS, "unresolved", "no such name") for i in range(120)),
        *(state(f"tcp-{i}", Stage.TCP, "refused", "port 22: refused") for i in range(80)),
        *(state(f"ssh-{i}", Stage.SSH, "no-banner", "no SSH banner") for i in range(50)),
    )
    assert len(hosts) == 300
    text = summary_lines(WaitResult(End.TIMEOUT, hosts, 600.0))
    assert len(text) <= 10
    assert text[0] == "timed out after 600.0s: 250 of 300 hosts not ready"
    assert len(text) == 4
    dns, tcp, ssh = text[1:]
    # largest group first, each names its first few and counts the rest
    # a detail every host of a group shares is said once
    assert (
        dns
        == "  dns unresolved (120; no such name): dns-0, dns-1, dns-2, dns-3, dns-4 and 115 more"
    )
    assert tcp.startswith("  tcp refused (80; port 22: refused): tcp-0, tcp-1")
    assert tcp.endswith("and 75 more")
    assert ssh.startswith("  ssh no-banner (50; no SSH banner): ssh-0")
    assert ssh.endswith("and 45 more")
    for line in text:
        assert len(line) < 300
        assert "ready-" not in line
    assert f"dns-{NAMES_PER_GROUP}" not in dns  # only the first few names


# --- termination log ---------------------------------------------------------------------


def test_termination_log_written_when_it_exists(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_text("old content that is longer than the new one\n" * 10)
    write_termination_log(log, ["timed out", "  tcp refused (1): w1"])
    assert log.read_text() == "timed out\n  tcp refused (1): w1\n"


def test_termination_log_not_created(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    write_termination_log(log, ["timed out"])
    assert not log.exists()
    write_termination_log(tmp_path / "no-dir" / "termination-log", ["timed out"])
    assert not (tmp_path / "no-dir").exists()


def test_termination_log_named_by_the_user_is_created(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    write_termination_log(log, ["timed out"], create=True)
    assert log.read_text() == "timed out\n"
    write_termination_log(tmp_path / "no-dir" / "log", ["timed out"], create=True)  # no error
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    write_termination_log(link, ["timed out"], create=True)
    assert not (tmp_path / "elsewhere").exists()


def test_termination_log_dangling_symlink_not_followed_into_a_new_file(tmp_path: Path) -> None:
    link = tmp_path / "termination-log"
    link.symlink_to(tmp_path / "target")
    write_termination_log(link, ["timed out"])
    assert not (tmp_path / "target").exists()


def test_termination_log_none_and_directory_are_ignored(tmp_path: Path) -> None:
    write_termination_log(None, ["x"])
    write_termination_log(tmp_path, ["x"])  # a directory: neither written nor an error
    assert list(tmp_path.iterdir()) == []


def test_termination_log_char_device_is_written() -> None:
    # A character device (what /dev/termination-log may be) is written like a file. A pty's
    # other end shows what arrived; the function swallows OSError, so only that proves it.
    master, slave = os.openpty()
    try:
        tty.setraw(slave)  # no "\n" -> "\r\n" on the way
        device = Path(os.ttyname(slave))
        assert device.is_char_device()
        write_termination_log(device, ["timed out", "  tcp refused (1): w1"])
        got = b""
        while select.select([master], [], [], 5)[0]:
            got += os.read(master, 4096)
            if got.endswith(b"w1\n"):
                break
        assert got == b"timed out\n  tcp refused (1): w1\n"
    finally:
        os.close(slave)
        os.close(master)


def test_termination_log_truncated_to_4096_bytes(tmp_path: Path) -> None:
    assert TERMINATION_LOG_BYTES == 4096
    log = tmp_path / "termination-log"
    log.touch()
    write_termination_log(log, [f"line {i:05d} " + "x" * 50 for i in range(1000)])
    data = log.read_bytes()
    assert len(data) == 4096
    assert data.startswith(b"line 00000 ")


def test_termination_log_truncation_counts_bytes_not_characters(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.touch()
    write_termination_log(log, ["é" * 3000])  # 6000 bytes in UTF-8
    data = log.read_bytes()
    assert len(data) <= 4096
    assert data.decode("utf-8") == "é" * 2048  # cut on a character boundary, still valid


def test_termination_log_short_message_untouched(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.touch()
    write_termination_log(log, ["ünï", "second"])
    assert log.read_text(encoding="utf-8") == "ünï\nsecond\n"


# --- lines stay readable at any scale --------------------------------------------------------


def _many(n: int, *, long_names: bool = False) -> tuple[HostState, ...]:
    name = (
        "pi-worker-{}.a-rather-long-job-name.some-namespace.svc.cluster.local"
        if long_names
        else "w{}"
    )
    return (
        *(state(name.format(i), Stage.DNS, "unresolved",
                f"{name.format(i)}: Name or service not known") for i in range(n // 2)),
        *(state(name.format(i), Stage.TCP, "refused", f"10.0.{i // 250}.{i % 250} port 22: refused")
          for i in range(n // 2, n - 3)),
        state("odd", Stage.SSH, "handshake", "SSH handshake failed: " + "x" * 300),
        state("odd2", Stage.SSH, "no-banner", "no SSH banner within 5s"),
        HostState("p", Stage.PENDING),
    )  # fmt: skip


def test_dns_detail_does_not_repeat_the_host_name() -> None:
    one = WaitResult(
        End.TIMEOUT, (state("w7", Stage.DNS, "unresolved", "w7: Name or service not known"),), 5.0
    )
    assert summary_lines(one)[1] == "  dns unresolved (1): w7 (Name or service not known)"
    # An address that differs from the name (ssh config's HostName) is worth keeping.
    other = WaitResult(
        End.TIMEOUT,
        (state("w7", Stage.DNS, "unresolved", "node7.internal: Name or service not known"),),
        5.0,
    )
    assert (
        summary_lines(other)[1]
        == "  dns unresolved (1): w7 (node7.internal: Name or service not known)"
    )


@pytest.mark.parametrize("n", [10, 1000, 10000])
@pytest.mark.parametrize("long_names", [False, True])
def test_summary_lines_fit_160_characters(n: int, long_names: bool) -> None:
    hosts = _many(n, long_names=long_names)
    text = summary_lines(WaitResult(End.TIMEOUT, hosts, 600.0))
    for line in text:
        assert len(line) <= 160, line
    dns = next(line for line in text if line.startswith("  dns unresolved"))
    assert dns.startswith(f"  dns unresolved ({n // 2}; Name or service not known): ")
    # As many names as fit, and the rest counted: nobody is left out silently.
    shown = dns.split("): ", 1)[1].split(" and ")[0].split(", ")
    rest = n // 2 - len(shown)
    assert shown and (dns.endswith(f" and {rest} more") if rest else " more" not in dns)


def test_json_waiting_record_is_bounded_at_1000_hosts() -> None:
    small, large = reporter(LogFormat.JSON), reporter(LogFormat.JSON)
    small(StillWaiting(_many(10), 10.0))
    large(StillWaiting(_many(1000), 10.0))
    (few,), (many,) = records(small), records(large)
    assert sum(g["count"] for g in many["groups"]) == many["total"] == 1000
    assert all(len(g["sample"]) <= NAMES_PER_GROUP for g in many["groups"])
    # The same groups (same size record, up to the digits of names and counts) at 100x hosts.
    assert len(json.dumps(many)) < 2 * len(json.dumps(few))


# --- the --dry-run plan (stdout) -------------------------------------------------------------


def plan(tmp_path: Path, config: str, *options: str) -> list[str]:

    cfg = tmp_path / "ssh_config"
    cfg.write_text(config)
    with pytest.MonkeyPatch.context() as env:  # the options given here, none from MPIWAIT_*
        for name in [n for n in os.environ if n.startswith("MPIWAIT_")]:
            env.delenv(name)
        run = parse(["-F", str(cfg), *options])
    assert not isinstance(run, int), run
    out = io.StringIO()
    print_plan(host_plans(run, ("w1",)), ("--hosts (2 hosts)",), ("launcher",), out)
    return out.getvalue().splitlines()


def test_plan_lists_only_the_config_keys_ssh_will_find(tmp_path: Path) -> None:
    # ssh passes over a config IdentityFile that does not exist: so does the plan.
    present = tmp_path / "id_present"
    present.write_text("not read by the plan\n")
    config = (
        f"Host w1\n  HostName 10.0.0.1\n  Port 2222\n  User mpiuser\n"
        f"  IdentityFile {tmp_path}/id_missing\n  IdentityFile {present}\n"
        "  StrictHostKeyChecking no\n  ConnectTimeout 7\n"
    )
    assert plan(tmp_path, config) == [
        "# 1 hosts from: --hosts (2 hosts)",
        "# this machine: launcher (no login; only its name must resolve)",
        f"w1 address=10.0.0.1 port=2222 user=mpiuser identity={present} "
        "strict_host_key_checking=no connect_timeout=7",
    ]


def test_plan_says_when_no_config_key_exists(tmp_path: Path) -> None:
    config = f"Host *\n  IdentityFile {tmp_path}/id_missing\n"
    assert "identity=(none found) " in plan(tmp_path, config)[-1]


def test_plan_shows_a_key_named_with_i_even_if_missing(tmp_path: Path) -> None:
    # A key the user named must exist; the plan shows it, and the run will say it is missing.
    missing = tmp_path / "id_named"
    assert f"identity={missing} " in plan(tmp_path, "", "-i", str(missing))[-1]
