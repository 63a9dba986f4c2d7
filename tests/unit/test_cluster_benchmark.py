"""Scenario 7 (benchmarks/s7_cluster.py) compares gates on one MPIJob: each gate's job must be
its documented example, scaled to the scene's workers, plus its gate, and nothing else."""

from __future__ import annotations

import dataclasses

import pytest
import testbed
from testbed.cluster import images
from testbed.cluster.mpijob import as_deployed, load_example
from testbed.cluster.scale import Outcome

from benchmarks import cli, s7_cluster, s8_cluster_scale

pytestmark = testbed.needs("pyyaml")


def _launcher(doc: dict) -> dict:
    return doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]


@pytest.mark.parametrize("workers", [4, 64])
@pytest.mark.parametrize("gate", s7_cluster.GATES)
def test_each_gate_is_its_example_and_its_gate(gate: str, workers: int) -> None:
    doc = s7_cluster.manifest(gate, "x", workers)
    example = "entrypoint.yaml" if gate == "entrypoint" else "initcontainer.yaml"
    base = as_deployed(load_example(example))
    inits = [c["name"] for c in _launcher(doc).get("initContainers", [])]
    assert ("wait-for-workers" in inits) == (gate == "init")
    policy = doc["spec"].get("launcherCreationPolicy", "AtStartup")
    assert (policy == "WaitForWorkersReady") == (gate in ("ready-gate", "ready-probe"))
    spec = doc["spec"]["mpiReplicaSpecs"]["Worker"]
    assert spec["replicas"] == workers
    worker = spec["template"]["spec"]
    if workers > s7_cluster.WORKERS:  # the workers' resources go at scale, nothing else
        for c in base["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]:
            c.pop("resources", None)
    base_worker = base["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    probe = worker["containers"][0].pop("readinessProbe", None)
    base_probe = base_worker["containers"][0].pop("readinessProbe", None)
    if gate == "ready-probe":
        assert probe == {"tcpSocket": {"port": 22}, "periodSeconds": 1}
    else:  # the example's own probe, if it has one, stays
        assert probe == base_probe
    # The workers (but for the probe) are the example's; the launcher's MPI container too, but
    # for its rank count.
    assert worker == base_worker
    (mine,), (theirs,) = _launcher(doc)["containers"], _launcher(base)["containers"]
    argv, base_argv = mine.get("command") or mine["args"], theirs.get("command") or theirs["args"]
    assert [a for a in argv if a != str(workers)] == [a for a in base_argv if a != "2"]
    assert str(workers) in argv


def test_each_gate_pulls_its_own_mpi_image() -> None:
    for gate in s7_cluster.GATES:
        doc = s7_cluster.manifest(gate, "x")
        worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        pulled = s7_cluster.form(gate).pulled
        assert worker["image"] in {r for i in pulled for r in images.pushes()[i]}


# Scenario 8 (benchmarks/s8_cluster_scale.py): a run counts as clean only as the tier's test
# would pass it.


def _outcome(**change: object) -> Outcome:
    workers = ["j-worker-0", "j-worker-1"]
    got = Outcome(
        job="j", workers=workers, created=0.0, finished="Succeeded",
        launchers=[{"metadata": {"name": "j-launcher-x"}}], launcher_job_failed=0,
        log="j-worker-0\nj-worker-1\n", waiter_log=None, late_node="n3", late_pulls={},
        figures={"launcher_restarts": 0},
    )  # fmt: skip
    return dataclasses.replace(got, **change)  # type: ignore[arg-type]


def test_scale_run_is_clean_only_when_every_worker_was_reached_without_a_restart() -> None:
    assert s8_cluster_scale.clean(_outcome())  # the control
    assert not s8_cluster_scale.clean(_outcome(log="j-worker-0\n"))
    assert not s8_cluster_scale.clean(_outcome(figures={"launcher_restarts": 1}))
    assert not s8_cluster_scale.clean(_outcome(launcher_job_failed=1))
    assert not s8_cluster_scale.clean(_outcome(finished="Failed"))
    assert not s8_cluster_scale.clean(_outcome(launchers=[]))


def test_scale_table_marks_unclean_runs_and_missing_figures() -> None:
    rows = [
        {"form": "openmpi4", "workers": 65, "clean": True, "to_first_rank_s": 61.3},
        {"form": "mpich", "workers": 65, "clean": False, "finished": "timeout"},
    ]
    lines = s8_cluster_scale.table(rows).splitlines()
    assert lines[2].startswith("| openmpi4 | 65 | yes | - | 61.3 s |")
    assert lines[3].startswith("| mpich | 65 | no (timeout) | - | - |")


@pytest.mark.parametrize("scenarios", [["clusterscale", "gap"], ["cluster", "clusterscale"]])
def test_cluster_scenarios_run_alone(
    scenarios: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--scenarios", ",".join(scenarios)]) == 2
    assert "runs alone" in capsys.readouterr().err
