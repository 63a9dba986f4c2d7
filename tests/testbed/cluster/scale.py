"""One MPIJob of many workers spread over the two worker nodes, one of which pulls the image for
real (its workers arrive about ``PULL_SECONDS`` late), and what it cost: ``run(jobs, FORMS[k],
workers)``. tests/cluster/test_scale.py runs it at 16 workers and asserts on the outcome;
benchmarks/s8_cluster_scale.py runs it at 65 (Open MPI 4 then starts 65 daemons and spawns them
through the workers, mpi-operator #501; MPICH's hydra starts 65 proxies) and reports it.

The figures: time to the first rank, the gap from the last worker's sshd listening to mpiwait's
go and to the first rank, launcher restarts, mpiwait's CPU time and peak memory
(``usage.Watch``), and the DNS queries per worker that CoreDNS logged for the job's names while
mpiwait ran (only mpiwait resolves them then: the workers' sshd resolve nothing, and mpirun has
not started); for the initContainer form also those from the launcher pod's address over its
whole life (mpiwait's wait and mpirun's start)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from . import ClusterError, images
from .mpijob import Jobs, as_deployed, from_a_rank, load_example, restarts, scaled
from .pulls import Pull, pulling, pulls
from .usage import Watch


@dataclass(frozen=True)
class Form:
    """An example as deployed at scale: its file, the published image its workers run (the
    late node pulls it), the tier images that node lacks, its containers' names."""

    example: str
    published: str
    pulled: tuple[str, ...]
    launcher: str
    worker: str


FORMS = {
    # initcontainer.yaml: Open MPI 4, mpiwait as the launcher's initContainer
    "openmpi4": Form(
        "initcontainer.yaml", "mpioperator/tensorflow-benchmarks:latest", (images.OPENMPI,),
        "tensorflow-benchmarks", "tensorflow-benchmarks",
    ),
    # entrypoint.yaml: MPICH, mpiwait the image's ENTRYPOINT
    "mpich": Form(
        "entrypoint.yaml", "ghcr.io/mpiwait/pi-mpich-mpiwait:0.1.0",
        (images.PI_MPIWAIT, images.MPICH_PI), "mpi-launcher", "mpi-worker",
    ),
}  # fmt: skip
WAITER = "wait-for-workers"  # initcontainer.yaml's initContainer


@dataclass(frozen=True)
class Outcome:
    """What one run showed: the job's end, its launcher pod(s) and log, each worker on the
    pulling node with the kubelet's word on its pull of the published image, the figures."""

    job: str
    workers: list[str]
    created: float
    finished: str  # Jobs.SUCCEEDED, Jobs.FAILED or "timeout"
    launchers: list[dict[str, Any]]
    launcher_job_failed: int
    log: str  # the launcher container's (mpirun's)
    waiter_log: str | None  # the initContainer's, for the initContainer form
    late_node: str
    late_pulls: dict[str, list[Pull]]  # pod on the pulling node -> its pulls of the image
    figures: dict[str, Any]


def at_scale(doc: dict[str, Any], workers: int) -> dict[str, Any]:
    """``doc`` with ``workers`` workers, its pods kept after the job (their logs are measured),
    and workers without resources: 65 of entrypoint.yaml's limits (half a CPU, 1 GiB, which are
    also the requests) do not fit two nodes of this machine."""
    doc = scaled(doc, workers)
    doc["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    for c in doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]:
        c.pop("resources", None)
    return doc


def run(jobs: Jobs, form: Form, workers: int, timeout: float = 600) -> Outcome:
    """One job of ``form`` with ``workers`` workers, the last worker node lacking its images and
    fetching them over a link shaped to take ``PULL_SECONDS``; the launcher's node and the other
    worker node have them."""
    doc = at_scale(as_deployed(load_example(form.example)), workers)
    late = jobs.cluster.node_of("worker")[-1]
    ref = images.registry_ref(form.published)
    with (
        pulling(jobs.cluster, [late], form.pulled),
        Watch(counter=lambda: jobs.cluster.dns_queries_for(f".{jobs.ns}.svc.")) as watch,
    ):
        created = time.time()
        job = jobs.create(doc)
        try:
            finished = jobs.wait_finished(job, timeout)
        except ClusterError:  # not finished within timeout
            finished = "timeout"
        late_pulls = {
            w["metadata"]["name"]: [p for p in pulls(jobs, w["metadata"]["name"]) if p.image == ref]
            for w in jobs.worker_pods(job)
            if w["spec"]["nodeName"] == late.name
        }  # fmt: skip
    launchers = jobs.launcher_pods(job)
    names = [f"{job}-worker-{i}" for i in range(workers)]
    log = ""
    waiter_log: str | None = None
    figures: dict[str, Any] = {"workers": workers, "late_workers": len(late_pulls)}
    if len(launchers) == 1:
        pod = launchers[0]["metadata"]["name"]
        log = jobs.logs(pod, form.launcher)
        inits = [c["name"] for c in launchers[0]["spec"].get("initContainers", [])]
        waiter = WAITER if WAITER in inits else form.launcher  # mpiwait's container
        waiter_log = jobs.logs(pod, WAITER) if waiter == WAITER else None
        figures |= _gaps(jobs, launchers[0], waiter, form, set(names), created)
        if waiter_log is not None:
            queries = jobs.cluster.dns_queries_from(launchers[0]["status"]["podIP"])
            figures["launcher_pod_dns_queries_per_worker"] = round(queries / workers, 1)
    usage = watch.usage()
    if usage is not None and usage.counted is not None:
        figures |= {
            "mpiwait_cpu_s": round(usage.cpu_seconds, 2),
            "mpiwait_peak_rss_mib": round(usage.peak_rss_mib, 1),
            "mpiwait_dns_queries_per_worker": round(usage.counted / workers, 1),
        }
    return Outcome(
        job=job, workers=names, created=created, finished=finished, launchers=launchers,
        launcher_job_failed=jobs.launcher_job(job)["status"].get("failed", 0), log=log,
        waiter_log=waiter_log, late_node=late.name,
        late_pulls=late_pulls, figures=figures,
    )  # fmt: skip


def _gaps(
    jobs: Jobs, launcher: dict[str, Any], waiter: str, form: Form, names: set[str],
    created: float,
) -> dict[str, Any]:  # fmt: skip
    """Creation to the first rank, and the last worker's sshd listening to mpiwait's go (in
    ``waiter``'s log) and to the first rank (each by the kubelet's timestamps); None where a
    line never came."""
    pod = launcher["metadata"]["name"]
    last_sshd = jobs.last_sshd_at(names, form.worker)
    go = jobs.first_line_at(pod, waiter, lambda t: bool(re.search(r"all \d+ hosts ready", t)))
    first_rank = jobs.first_line_at(pod, form.launcher, from_a_rank(names))

    def since(t: float | None, t0: float | None, digits: int) -> float | None:
        return None if t is None or t0 is None else round(t - t0, digits)

    return {
        "to_first_rank_s": since(first_rank, created, 1),
        "last_sshd_to_go_s": since(go, last_sshd, 2),
        "last_sshd_to_first_rank_s": since(first_rank, last_sshd, 2),
        "launcher_restarts": restarts(launcher),
    }
