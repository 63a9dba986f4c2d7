"""Kubeflow Trainer v2 TrainJobs on a test Cluster started with ``trainer=True``: the examples'
TrainingRuntime and TrainJob as users paste them, with only their images' registry host
changed (``as_deployed``), and what a user looks at afterwards (the TrainJob's condition,
the launcher's pod and restarts, ``kubectl logs``)."""

from __future__ import annotations

import copy
from typing import Any

from . import images
from .mpijob import EXAMPLES, LATE_START, Jobs

JOBSET = "jobset.sigs.k8s.io/jobset-name"
RJOB = "jobset.sigs.k8s.io/replicatedjob-name"


def load_runtime_and_job(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The example's TrainingRuntime and TrainJob (one file, two documents)."""
    import yaml  # a test extra

    docs = list(yaml.safe_load_all((EXAMPLES / name).read_text()))
    runtime = next(d for d in docs if d["kind"] == "TrainingRuntime")
    job = next(d for d in docs if d["kind"] == "TrainJob")
    return runtime, job


def _pod_specs(runtime: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """replicatedJob name -> its pod spec."""
    return {
        r["name"]: r["template"]["spec"]["template"]["spec"]
        for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }


def as_deployed(runtime: dict[str, Any]) -> dict[str, Any]:
    """``runtime`` with its images' registry host made the cluster's (``images.registry_ref``)
    and ``imagePullPolicy: IfNotPresent``; nothing else changed (the scheduler places the
    pods)."""
    runtime = copy.deepcopy(runtime)
    for pod in _pod_specs(runtime).values():
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            c["image"] = images.registry_ref(c["image"])
            c["imagePullPolicy"] = "IfNotPresent"
    return runtime


def hold_back(runtime: dict[str, Any], node: int, seconds: int) -> dict[str, Any]:
    """Node ``node`` starts its sshd ``seconds`` late, as a node whose setup runs before its sshd
    would (an initContainer that sleeps). The nodes are the pods of one Job
    (``<trainjob>-node-0-<i>``, one template), so it sleeps by the pod's hostname, as
    mpijob.hold_back does for MPIJob workers."""
    runtime = copy.deepcopy(runtime)
    pod = _pod_specs(runtime)["node"]
    image = pod["containers"][0]["image"]
    pod.setdefault("initContainers", []).insert(0, {
        "name": LATE_START,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", f'case "$(hostname)" in *-node-0-{node}) sleep {seconds};; esac'],
    })  # fmt: skip
    return runtime


class TrainJobs(Jobs):
    """One namespace of a Cluster running JobSet and Trainer, for one test."""

    KIND = "trainjob"
    SUCCEEDED = "Complete"
    LAUNCHER_PODS = f"{JOBSET}={{job}},{RJOB}=launcher"
    WORKER_PODS = f"{JOBSET}={{job}},{RJOB}=node"
    LAUNCHER_JOB = "{job}-launcher-0"

    def describe(self, job: str) -> str:
        said = [self.kubectl("get", "trainjob,jobset", "-o", "wide", check=False).stdout]
        said.append(self.kubectl("get", "trainjob", job, "-o", "yaml", check=False).stdout)
        for pod in self.worker_pods(job):
            name = pod["metadata"]["name"]
            said.append(f"--- {name}\n{self.logs(name, 'node')[-2000:]}")
        return "\n".join(said) + "\n" + super().describe(job)


__all__ = ["TrainJobs", "as_deployed", "hold_back", "load_runtime_and_job"]
