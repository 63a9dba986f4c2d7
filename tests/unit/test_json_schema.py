"""The JSON log is an interface: docs/events.schema.json describes every record mpiwait emits,
each record says its schema version, and `--dry-run --log-format json` is one JSON object.
(Every JSON run of the suite through testbed.run/start is validated against the schema as well.)"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import get_args

import pytest
import testbed

from mpiwait.output.jsonl import JSON_SCHEMA_VERSION
from mpiwait.output.report import Reporter
from mpiwait.probe.outcome import Stage
from mpiwait.settings import LogFormat
from mpiwait.wait import events as ev

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs/events.schema.json").read_text())
REFUSED = ev.HostState("w1", Stage.TCP, "refused", "10.0.0.2 port 22: refused", 3)
EVERY_EVENT = [
    ev.WaitStarted(
        ("w1", "w2"), ("--hosts (2 hosts)",), ("l",), "ssh", 600.0, ("a note",), "MPICH"
    ),
    ev.HostsAdded(("w3",), 3, ("/etc/mpi/discover_hosts.sh (3 hosts)",)),
    ev.HostChanged(REFUSED, 1.25),
    ev.HostReady("w2", 1, 3, 2.5),
    ev.StillWaiting(
        (ev.HostState("w2", Stage.READY), REFUSED, ev.HostState("w3", Stage.DNS, "x")), 10
    ),
    ev.Rechecking(("w2",), 30.0, 41.0),
    ev.HostLost(REFUSED, 42.0),
    ev.WaitResult(ev.End.PERMANENT, (REFUSED,), 50.0, failed=REFUSED, hint="fix the key"),
]


def emitted() -> list[dict]:
    rep = Reporter(LogFormat.JSON, stream=io.StringIO())
    for event in EVERY_EVENT:
        rep(event)
    rep.info("hello")
    rep.error("bad", None, exit_code=2)
    return [json.loads(line) for line in rep.stream.getvalue().splitlines()]  # type: ignore[attr-defined]


def test_every_record_fits_the_schema_and_carries_its_version() -> None:
    assert sorted(type(e).__name__ for e in EVERY_EVENT) == sorted(
        t.__name__ for t in get_args(ev.Event)
    )  # one of each event the waiter emits
    records = emitted()
    for record in records:
        assert testbed.json_log_problems(record) == [], record
        assert record["schema_version"] == JSON_SCHEMA_VERSION
    # the schema's own list of events is exactly what mpiwait emits (plan: --dry-run, below;
    # version: --version, test_cli's test_version_json_is_one_object)
    kinds = {r["event"] for r in records} | {"plan", "version"}
    assert kinds == set(SCHEMA["properties"]["event"]["enum"])
    assert SCHEMA["properties"]["schema_version"]["const"] == JSON_SCHEMA_VERSION


@pytest.mark.parametrize(
    "change",
    [
        {"event": "progress"},  # an event the schema does not know
        {"schema_version": None},  # no version
        {"schema_version": 2},
        {"surprise": 1},  # a field the schema does not describe
        {"end": "gave up"},
        {"hosts": None},
    ],
    ids=["unknown-event", "no-version", "other-version", "unknown-field", "bad-end", "bad-hosts"],
)
def test_a_record_that_does_not_fit_fails(change: dict) -> None:
    record = next(r for r in emitted() if r["event"] == "result")
    record.update(change)
    record = {k: v for k, v in record.items() if v is not None or k in ("failed", "hint")}
    assert testbed.json_log_problems(record)
    with pytest.raises(AssertionError, match="does not fit"):
        testbed.check_json_log("", json.dumps(record) + "\n")


def _dry_run(*args: str, command: tuple[str, ...] = (), **env: str) -> dict:
    r = testbed.run(
        None, ["--dry-run", "--log-format", "json", *args], command=command,
        env=testbed.mpiwait_env(**env),
    )  # fmt: skip
    assert r.returncode == 0, r
    (line,) = r.stdout.splitlines()  # one object, on one line
    assert r.stderr == "", r
    return json.loads(line)


def test_dry_run_prints_the_plan_as_one_json_object() -> None:
    plan = _dry_run("--hosts", "192.0.2.1,192.0.2.2", "--port", "2222", "--user", "mpiuser")
    assert plan["event"] == "plan" and plan["role"] is None and plan["exec"] is None
    assert [(h["host"], h["port"], h["user"]) for h in plan["hosts"]] == [
        ("192.0.2.1", 2222, "mpiuser"),
        ("192.0.2.2", 2222, "mpiuser"),
    ]
    assert plan["sources"] == ["--hosts (2 hosts)"] and plan["launch"] is None


def test_dry_run_json_on_a_worker_says_what_it_would_exec() -> None:
    plan = _dry_run(command=("sshd", "-De"), K_MPI_JOB_ROLE="worker")
    assert (plan["role"], plan["exec"], plan["hosts"]) == (
        "K_MPI_JOB_ROLE=worker",
        ["sshd", "-De"],
        [],
    )


def test_dry_run_json_names_the_mpi_and_what_it_is_handed(tmp_path) -> None:
    bin_dir = tmp_path / "mpich/bin"
    bin_dir.mkdir(parents=True)
    for name in ("mpiexec.hydra", "hydra_pmi_proxy", "ssh"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    env = testbed.mpiwait_env()
    plan = _dry_run(
        "--hosts", "192.0.2.1", command=("mpiexec.hydra", "-n", "1", "true"),
        PATH=f"{bin_dir}:{env['PATH']}", HYDRA_LAUNCH_EXTRA_ARGS="-o ConnectionAttempts=10",
    )  # fmt: skip
    assert plan["launch"]["mpi"].startswith("MPICH"), plan
    assert any("HYDRA_LAUNCHER_EXTRA_ARGS" in c for c in plan["launch"]["changes"]), plan
