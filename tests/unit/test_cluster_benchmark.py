"""Scenario 7 (benchmarks/s7_cluster.py) compares gates on one MPIJob: each gate's job must be
its documented example, scaled to the scene's workers, plus its gate, and nothing else."""

from __future__ import annotations

import pytest
import testbed
from testbed.cluster import images
from testbed.cluster.mpijob import as_deployed, load_example

from benchmarks import s7_cluster

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
