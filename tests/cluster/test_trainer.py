"""Kubeflow Trainer v2 TrainJobs run by the real Trainer v2.2.0 and JobSet v0.11.1 controllers (with
their webhooks) on the tier's real Kubernetes 1.35, with mpiwait as the examples deploy it
(examples/kubernetes/trainer-v2*.yaml, images built here, names aside).

What a user would see is what is checked: the TrainJob's condition, the launcher's pod (one,
never restarted), mpirun's output in ``kubectl logs`` naming both nodes, and mpiwait's log
showing it waited for the node held back."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from testbed.cluster import Cluster
from testbed.cluster.trainjob import TrainJobs, as_deployed, hold_back, load_runtime_and_job

# s: one node's image pull, stood in for by an initContainer that sleeps; it need only be later
# than the launcher's first probe, which _assert_waited_for checks
HELD_BACK = 10


@pytest.fixture
def trainjobs(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[TrainJobs]:
    """A namespace of the test's own (as the tier's ``jobs``), deleted afterwards."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:50].rstrip("-")
    t = TrainJobs(cluster, f"t-{name}")
    try:
        yield t
    finally:
        t.close()


def _restarts(pod: dict) -> int:
    statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get(
        "containerStatuses", []
    )
    return sum(s.get("restartCount", 0) for s in statuses)


def _run(trainjobs: TrainJobs, example: str) -> tuple[str, str, str]:
    """The example's runtime and TrainJob, node 1 held back; returns (job, node 0, node 1)."""
    runtime, job = load_runtime_and_job(example)
    trainjobs.create(hold_back(as_deployed(runtime), 1, HELD_BACK))
    name = trainjobs.create(job)
    return name, f"{name}-node-0-0", f"{name}-node-0-1"


def _assert_one_clean_launch(trainjobs: TrainJobs, job: str, nodes: list[str]) -> str:
    """The TrainJob completed with one launcher pod, never restarted; mpirun reached ``nodes``.
    Returns the launcher container's log (``kubectl logs``)."""
    assert trainjobs.wait_finished(job, timeout=300) == "Complete", trainjobs.describe(job)
    launchers = trainjobs.launcher_pods(job)
    assert len(launchers) == 1, trainjobs.describe(job)
    assert launchers[0]["status"]["phase"] == "Succeeded"
    assert _restarts(launchers[0]) == 0
    assert trainjobs.launcher_job(job)["status"].get("failed", 0) == 0
    out = trainjobs.logs(launchers[0]["metadata"]["name"], "node")
    for n in nodes:
        assert f"pi on {n}" in out, out
    return out


def _assert_waited_for(log: str, first: str, late: str) -> None:
    """mpiwait saw ``first`` ready, then ``late`` ready only after most of the hold-back."""
    assert re.search(rf"\] 1/2 ready \({re.escape(first)}\.", log), log
    m = re.search(rf"\[\+(\d+\.\d)s\] 2/2 ready \({re.escape(late)}\.", log)
    assert m and float(m.group(1)) >= HELD_BACK / 2, log


def test_trainer_v2_example_one_node_late(trainjobs: TrainJobs) -> None:
    """trainer-v2.yaml: mpiwait as the launcher's initContainer."""
    job, n0, n1 = _run(trainjobs, "trainer-v2.yaml")
    _assert_one_clean_launch(trainjobs, job, [n0, n1])
    launcher = trainjobs.launcher_pods(job)[0]["metadata"]["name"]
    _assert_waited_for(trainjobs.logs(launcher, "wait-for-nodes"), n0, n1)


def test_trainer_v2_entrypoint_example_one_node_late(trainjobs: TrainJobs) -> None:
    """trainer-v2-entrypoint.yaml: mpiwait as the image's ENTRYPOINT, on the launcher (waits,
    then execs mpirun with the PRRTE names added) and on the nodes (execs sshd at once)."""
    job, n0, n1 = _run(trainjobs, "trainer-v2-entrypoint.yaml")
    out = _assert_one_clean_launch(trainjobs, job, [n0, n1])
    _assert_waited_for(out, n0, n1)
    for pod in trainjobs.worker_pods(job):
        assert _restarts(pod) == 0
