"""Scenario 7 (benchmarks/s7_cluster.py) compares gates on one MPIJob: each variant must be the
documented initcontainer.yaml plus its gate and timing, and nothing else."""

from __future__ import annotations

import pytest
import testbed
from testbed.cluster.mpijob import as_deployed, hold_back, load_example

from benchmarks import s7_cluster

pytestmark = testbed.needs("pyyaml")


def _launcher(doc: dict) -> dict:
    return doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]


@pytest.mark.parametrize("timing", s7_cluster.TIMINGS)
@pytest.mark.parametrize("variant", s7_cluster.VARIANTS)
def test_each_variant_is_the_example_and_its_gate(variant: str, timing: str) -> None:
    doc = s7_cluster.manifest(variant, timing, "x")
    base = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, s7_cluster.WORKER_PULL)
    inits = [c["name"] for c in _launcher(doc).get("initContainers", [])]
    assert ("wait-for-workers" in inits) == (variant == "mpiwait")
    assert ("image-pull" in inits) == (timing == "both-pull")
    policy = doc["spec"].get("launcherCreationPolicy", "AtStartup")
    assert (policy == "WaitForWorkersReady") == (variant in ("ready-gate", "probe-1s", "probe-10s"))
    worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    probe = worker["containers"][0].pop("readinessProbe", None)
    assert (probe is not None) == variant.startswith("probe-")
    if probe:
        assert probe["tcpSocket"]["port"] == 22
    # The workers (but for the probe) and the launcher's MPI container are the example's.
    assert worker == base["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert _launcher(doc)["containers"] == _launcher(base)["containers"]
