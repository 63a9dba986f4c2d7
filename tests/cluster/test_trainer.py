"""Kubeflow Trainer v2 TrainJobs run by the real Trainer v2.2.0 and JobSet v0.11.1 controllers (with
their webhooks) on the tier's real Kubernetes 1.37, with mpiwait as the examples deploy it
(examples/kubernetes/trainer-v2*.yaml, images built here, names aside).

What a user would see is what is checked: the TrainJob's condition, the launcher's pod (one,
never restarted), mpirun's output in ``kubectl logs`` naming both nodes, and mpiwait's log
showing it waited for the node held back."""

from __future__ import annotations

from test_mpijobs import assert_one_clean_launch, assert_waited_for
from testbed.cluster.mpijob import restarts
from testbed.cluster.trainjob import TrainJobs, as_deployed, hold_back, load_runtime_and_job

# s: one node's image pull, stood in for by an initContainer that sleeps; it need only be later
# than the launcher's first probe, which assert_waited_for checks
HELD_BACK = 10


def _run(trainjobs: TrainJobs, example: str) -> tuple[str, str, str]:
    """The example's runtime and TrainJob, node 1 held back; returns (job, node 0, node 1)."""
    runtime, job = load_runtime_and_job(example)
    trainjobs.create(hold_back(as_deployed(runtime), 1, HELD_BACK))
    name = trainjobs.create(job)
    return name, f"{name}-node-0-0", f"{name}-node-0-1"


def test_trainer_v2_example_one_node_late(trainjobs: TrainJobs) -> None:
    """trainer-v2.yaml: mpiwait as the launcher's initContainer."""
    job, n0, n1 = _run(trainjobs, "trainer-v2.yaml")
    assert_one_clean_launch(trainjobs, job, [f"pi on {n0}", f"pi on {n1}"], "node")
    launcher = trainjobs.launcher_pods(job)[0]["metadata"]["name"]
    assert_waited_for(trainjobs.logs(launcher, "wait-for-nodes"), n0, n1, HELD_BACK)


def test_trainer_v2_entrypoint_example_one_node_late(trainjobs: TrainJobs) -> None:
    """trainer-v2-entrypoint.yaml: mpiwait as the image's ENTRYPOINT, on the launcher (waits,
    then execs mpirun with the PRRTE names added) and on the nodes (execs sshd at once)."""
    job, n0, n1 = _run(trainjobs, "trainer-v2-entrypoint.yaml")
    out = assert_one_clean_launch(trainjobs, job, [f"pi on {n0}", f"pi on {n1}"], "node")
    assert_waited_for(out, n0, n1, HELD_BACK)
    for pod in trainjobs.worker_pods(job):
        assert restarts(pod) == 0
