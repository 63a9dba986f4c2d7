"""MPIJobs admitted by the real Kueue v0.17.0 and run by mpi-operator v0.8.2: Kueue's webhook
suspends an MPIJob labelled ``kueue.x-k8s.io/queue-name``, and Kueue resumes it once its
ClusterQueue has quota for it. mpiwait (initcontainer.yaml as deployed) against the operator's
own gate, ``launcherCreationPolicy: WaitForWorkersReady`` (the same example without mpiwait),
one worker held back, in two cases: admitted at once, and held back by quota until another job
of the same ClusterQueue finished.

The gate counts Ready workers only when it creates the launcher, and a suspended MPIJob has no
workers to count, so it gets its launcher at once (suspended); on resume the operator unsuspends
it in the sync that creates the workers (kubeflow/mpi-operator#615): its mpirun starts before
the workers can take it. What a user would see is what is checked: the MPIJob's and the
Workload's conditions, the launcher's pods and restarts, ``kubectl logs``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from test_mpijobs import HELD_BACK, assert_launch_failed, assert_one_clean_launch, assert_waited_for
from testbed.cluster import Cluster
from testbed.cluster.mpijob import Jobs, as_deployed, hold_back, load_example, without_init

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE = "kueue.x-k8s.io/v1beta2"
# The ClusterQueue's room: one MPIJob of the example's (a launcher and two workers) at a time.
PODS = 3
CONTAINER = "tensorflow-benchmarks"  # the example's launcher container, where mpirun runs
AT_ONCE = 10  # s: from a Workload's creation to its admission when its queue has room


@pytest.fixture
def queue(cluster: Cluster, jobs: Jobs) -> Iterator[str]:
    """A ClusterQueue of the test's own, with quota for ``PODS`` pods of the default flavor (and
    CPU and memory to spare: a job's every requested resource must be covered), and a
    LocalQueue for it in the test's namespace; yields the LocalQueue's name."""
    cluster.apply({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}})
    quota = {"cpu": "8", "memory": "16Gi", "pods": PODS}
    cluster.apply({
        "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": jobs.ns},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": list(quota),
            "flavors": [{"name": "default", "resources": [
                {"name": r, "nominalQuota": q} for r, q in quota.items()]}],
        }]},
    })  # fmt: skip
    jobs.create({
        "apiVersion": KUEUE, "kind": "LocalQueue",
        "metadata": {"name": "queue", "namespace": jobs.ns}, "spec": {"clusterQueue": jobs.ns},
    })  # fmt: skip
    try:
        yield "queue"
    finally:
        cluster.kubectl("delete", "clusterqueue", jobs.ns, "--wait=false", check=False)


def _job(launch: str, name: str, queue: str) -> dict[str, Any]:
    """initcontainer.yaml as deployed, queued in ``queue``, worker 1 ``HELD_BACK`` s late: with
    mpiwait, or (``gate``) without it and with the operator's WaitForWorkersReady."""
    doc = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, HELD_BACK)
    if launch == "gate":
        doc = without_init(doc)
        doc["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    doc["metadata"]["name"] = name
    doc["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue
    return doc


def _at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def _since(obj: dict[str, Any], condition: str) -> datetime | None:
    """When ``obj``'s ``condition`` became True, or None if it is not."""
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == condition and c["status"] == "True":
            return _at(c["lastTransitionTime"])
    return None


def _workload(jobs: Jobs, job: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the MPIJob ``job`` (it owns it)."""
    for w in jobs.get("workloads.kueue.x-k8s.io")["items"]:
        owners = w["metadata"].get("ownerReferences", [])
        if any(o["kind"] == "MPIJob" and o["name"] == job for o in owners):
            assert isinstance(w, dict)
            return w
    return None


def _wait_workload(jobs: Jobs, job: str, condition: str, timeout: float = 180) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        w = _workload(jobs, job)
        return w if w and _since(w, condition) else None

    got = jobs.wait_for(f"{job}'s Workload {condition}", done, timeout=timeout)
    assert isinstance(got, dict)
    return got


def _suspended_then_resumed(jobs: Jobs, job: str) -> bool:
    """The MPIJob's Suspended condition, as the operator sets it (``kubectl describe``): it
    was True, and is False now, resumed."""
    mpijob = jobs.get("mpijob", job)
    return (
        any(
            c["type"] == "Suspended"
            and c["status"] == "False"
            and c.get("reason") == "MPIJobResumed"
            for c in mpijob.get("status", {}).get("conditions", [])
        )
        and mpijob["spec"]["runPolicy"].get("suspend") is False
    )


def _assert_ran(jobs: Jobs, launch: str, job: str) -> None:
    """With mpiwait: one clean launch that reached both workers, mpiwait having waited for the
    late one. With the gate: #615, the launcher pod made before the late worker was Ready and
    its mpirun failed; or, if the launcher came after both workers were Ready, the operator
    never saw the job suspended."""
    workers = [f"{job}-worker-0", f"{job}-worker-1"]
    if launch == "mpiwait":
        assert_one_clean_launch(jobs, job, workers, CONTAINER)
        launcher = jobs.launcher_pods(job)[0]["metadata"]["name"]
        assert_waited_for(jobs.logs(launcher, "wait-for-workers"), *workers, HELD_BACK)
        return
    launchers = jobs.wait_for("the launcher pod", lambda: jobs.launcher_pods(job))
    made = _at(launchers[0]["metadata"]["creationTimestamp"])
    ready = [_since(w, "Ready") for w in jobs.worker_pods(job)]
    if len(ready) == 2 and None not in ready and made >= max(ready):  # type: ignore[type-var]
        # Possible when Kueue resumes the job before the operator syncs it (it syncs from its
        # cache, which may hold the resumed job already): the gate held, as without Kueue.
        assert not _suspended_then_resumed(jobs, job), jobs.get("mpijob", job).get("status")
        return
    # The launcher pod came before the late worker was Ready (or before any was): #615.
    assert_launch_failed(jobs, job, CONTAINER)


@pytest.mark.parametrize("launch", ["mpiwait", "gate"])
def test_admitted_at_once(jobs: Jobs, queue: str, launch: str) -> None:
    job = jobs.create(_job(launch, "pi", queue))
    admitted = _wait_workload(jobs, job, "Admitted")
    created, since = _at(admitted["metadata"]["creationTimestamp"]), _since(admitted, "Admitted")
    assert since and (since - created).total_seconds() < AT_ONCE, admitted["status"]
    _assert_ran(jobs, launch, job)


@pytest.mark.parametrize("launch", ["mpiwait", "gate"])
def test_admitted_after_another_job_finished(jobs: Jobs, queue: str, launch: str) -> None:
    """The queue's room taken by a first job (mpiwait's, which runs at least HELD_BACK s): the
    second waits, suspended, with no pod of its own, and is admitted only once the first has
    finished."""
    first = jobs.create(_job("mpiwait", "first", queue))
    _wait_workload(jobs, first, "Admitted")
    second = jobs.create(_job(launch, "second", queue))
    pending = jobs.wait_for("the second's Workload", lambda: _workload(jobs, second))
    assert not _since(pending, "QuotaReserved"), pending
    assert jobs.get("mpijob", second)["spec"]["runPolicy"]["suspend"] is True  # by Kueue
    assert not jobs.worker_pods(second) and not jobs.launcher_pods(second)

    admitted = _wait_workload(jobs, second, "Admitted", timeout=300)
    finished = _wait_workload(jobs, first, "Finished")
    assert jobs.condition(first) == jobs.SUCCEEDED, jobs.describe(first)
    queued = _at(admitted["metadata"]["creationTimestamp"])
    first_done, second_in = _since(finished, "Finished"), _since(admitted, "Admitted")
    assert first_done and second_in and queued < first_done <= second_in, (
        queued, first_done, second_in,
    )  # fmt: skip
    # Kueue's webhook made it suspended and its admission resumed it, as the operator saw.
    assert _suspended_then_resumed(jobs, second), jobs.get("mpijob", second).get("status")
    _assert_ran(jobs, launch, second)
    for pod in jobs.worker_pods(second) + jobs.launcher_pods(second):
        assert _at(pod["metadata"]["creationTimestamp"]) >= second_in, pod["metadata"]
