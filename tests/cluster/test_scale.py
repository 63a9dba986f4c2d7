"""Jobs of 65 workers spread over the two worker nodes, one of which pulls the image for real
(its workers arrive about ``PULL_SECONDS`` late): one clean launch in which mpirun reaches every
worker. Open MPI 4 starts 65 daemons, so it spawns them through the workers (a tree: workers
log in to workers, mpi-operator #501), and MPICH's hydra starts 65 proxies.

Each run also records what it cost (printed, and in the JUnit XML as properties): time to the
first rank, the gap from the last worker's sshd listening to mpiwait's go and to the first rank,
mpiwait's CPU time and peak memory (testbed.cluster.usage), and the DNS queries per worker that
CoreDNS logged for the job's names while mpiwait ran (only mpiwait resolves them then: the
workers' sshd resolve nothing, and mpirun has not started); for the initContainer form also
those from the launcher pod's address over its whole life (mpiwait's wait and mpirun's start).
docs/performance.md quotes them, naming the run."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from test_mpijobs import assert_one_clean_launch
from testbed.cluster import images
from testbed.cluster.mpijob import Jobs, as_deployed, from_a_rank, load_example, restarts, scaled
from testbed.cluster.pulls import PULL_SECONDS, pulling, pulls
from testbed.cluster.usage import Watch

WORKERS = 65  # Open MPI 4 spawns through the workers above 64 daemons
TIMEOUT = 600


def at_scale(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``WORKERS`` workers, its pods kept after the job (their logs are measured),
    and workers without resources: 65 of entrypoint.yaml's limits (half a CPU, 1 GiB, which are
    also the requests) do not fit two nodes of this machine."""
    doc = scaled(doc, WORKERS)
    doc["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    for c in doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]:
        c.pop("resources", None)
    return doc


@contextmanager
def _job_pulling_late(jobs: Jobs, pulled: list[str]) -> Iterator[tuple[Any, Watch]]:
    """The last worker node lacks ``pulled`` and fetches them over a link shaped to take
    ``PULL_SECONDS``; the launcher's node and the other worker node have them. Yields that node
    and a watch of the launcher's mpiwait, counting the DNS queries for the job's names."""
    late = jobs.cluster.node_of("worker")[-1]
    names = f".{jobs.ns}.svc."
    with (
        pulling(jobs.cluster, [late], pulled),
        Watch(counter=lambda: jobs.cluster.dns_queries_for(names)) as watch,
    ):
        yield late, watch


def _gaps(jobs: Jobs, job: str, launcher: str, worker: str, created: float) -> dict[str, float]:
    pods = jobs.worker_pods(job)
    names = {p["metadata"]["name"] for p in pods}
    last_sshd = jobs.last_sshd_at(names, worker)
    assert last_sshd is not None, "a worker's sshd never said it listens"
    (pod,) = jobs.launcher_pods(job)
    name = pod["metadata"]["name"]
    inits = [c["name"] for c in pod["spec"].get("initContainers", [])]
    waiter = "wait-for-workers" if "wait-for-workers" in inits else launcher
    go = jobs.first_line_at(name, waiter, lambda t: bool(re.search(r"all \d+ hosts ready", t)))
    first_rank = jobs.first_line_at(name, launcher, from_a_rank(names))
    assert go is not None and first_rank is not None, jobs.logs(name, launcher)[-3000:]
    return {
        "to_first_rank_s": round(first_rank - created, 1),
        "last_sshd_to_go_s": round(go - last_sshd, 2),
        "last_sshd_to_first_rank_s": round(first_rank - last_sshd, 2),
        "launcher_restarts": restarts(pod),
    }


def _late_workers(jobs: Jobs, job: str, late_node: str, ref: str, created: float) -> int:
    """How many workers ran on the pulling node, each having waited for a real pull: one pod's
    pull took the shaped link's time, and every pod's ended at least half of it after the job
    was created. A pod that joined the pull under way says only its own part of it."""
    late = [w for w in jobs.worker_pods(job) if w["spec"]["nodeName"] == late_node]
    took: list[float] = []
    for w in late:
        got = [p for p in pulls(jobs, w["metadata"]["name"]) if p.image == ref]
        assert got and all(p.at - created >= PULL_SECONDS / 2 for p in got), (w, got)
        took += [p.seconds for p in got if p.seconds is not None]
    assert took and max(took) >= PULL_SECONDS / 2, took
    return len(late)


def _cost(watch: Watch) -> dict[str, float]:
    usage = watch.usage()
    assert usage is not None and usage.counted is not None, "mpiwait was never seen running"
    return {
        "mpiwait_cpu_s": round(usage.cpu_seconds, 2),
        "mpiwait_peak_rss_mib": round(usage.peak_rss_mib, 1),
        "mpiwait_dns_queries_per_worker": round(usage.counted / WORKERS, 1),
    }


def _report(record: Callable[[str, object], None], what: str, figures: dict[str, Any]) -> None:
    for k, v in figures.items():
        record(k, v)
    print(f"\n{what}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def test_openmpi4_65_workers_tree_spawn_one_node_pulling(
    jobs: Jobs, record_property: Callable[[str, object], None]
) -> None:
    """initcontainer.yaml with 65 workers (Open MPI 4: 65 daemons, spawned as a tree)."""
    doc = at_scale(as_deployed(load_example("initcontainer.yaml")))
    ref = images.registry_ref("mpioperator/tensorflow-benchmarks:latest")
    with _job_pulling_late(jobs, [images.OPENMPI]) as (late, watch):
        created = time.time()
        job = jobs.create(doc)
        workers = [f"{job}-worker-{i}" for i in range(WORKERS)]
        out = assert_one_clean_launch(jobs, job, workers, "tensorflow-benchmarks", TIMEOUT)
        lines = out.splitlines()
        assert all(lines.count(w) == 1 for w in workers), out  # one rank on every worker
        late_workers = _late_workers(jobs, job, late.name, ref, created)
    assert 0 < late_workers < WORKERS
    (pod,) = jobs.launcher_pods(job)
    log = jobs.logs(pod["metadata"]["name"], "wait-for-workers")
    assert re.search(rf"all {WORKERS} hosts ready", log), log
    queries = jobs.cluster.dns_queries_from(pod["status"]["podIP"])
    figures = _gaps(jobs, job, "tensorflow-benchmarks", "tensorflow-benchmarks", created)
    figures |= {
        "workers": WORKERS, "late_workers": late_workers,
        "launcher_pod_dns_queries_per_worker": round(queries / WORKERS, 1),
    }  # fmt: skip
    figures |= _cost(watch)
    _report(record_property, "openmpi4 65 workers", figures)


def test_mpich_hydra_65_workers_one_node_pulling(
    jobs: Jobs, record_property: Callable[[str, object], None]
) -> None:
    """entrypoint.yaml (MPICH, mpiwait the image's ENTRYPOINT) with 65 workers."""
    doc = at_scale(as_deployed(load_example("entrypoint.yaml")))
    ref = images.registry_ref("ghcr.io/mpiwait/pi-mpich-mpiwait:0.1.0")
    with _job_pulling_late(jobs, [images.PI_MPIWAIT, images.MPICH_PI]) as (late, watch):
        created = time.time()
        job = jobs.create(doc)
        workers = [f"{job}-worker-{i}" for i in range(WORKERS)]
        assert_one_clean_launch(jobs, job, workers, "mpi-launcher", TIMEOUT)
        late_workers = _late_workers(jobs, job, late.name, ref, created)
    assert 0 < late_workers < WORKERS
    figures = _gaps(jobs, job, "mpi-launcher", "mpi-worker", created)
    figures |= {"workers": WORKERS, "late_workers": late_workers} | _cost(watch)
    _report(record_property, "mpich 65 workers", figures)
