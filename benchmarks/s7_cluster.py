"""Scenario 7: the seed issue's scene on a real Kubernetes of three nodes with mpi-operator v0.8.2
(testbed.cluster), with real image pulls from the cluster's registry (testbed.cluster.pulls:
the nodes that pull lack the image and fetch it over a link shaped to take ``PULL_SECONDS``).
One MPIJob of ``workers`` workers, the launcher on node 1 and the workers on the others, gated
five ways:

  init          mpiwait as the launcher's initContainer (initcontainer.yaml, Open MPI 4)
  entrypoint    mpiwait as the MPI image's ENTRYPOINT (entrypoint.yaml, MPICH)
  ready-gate    launcherCreationPolicy: WaitForWorkersReady (initcontainer.yaml without mpiwait)
  ready-probe   WaitForWorkersReady and a tcpSocket readiness probe on the workers' sshd
                (periodSeconds 1: the gate at its best)
  no-gate       AtStartup, the default: the launcher Job's back-off retries mpirun

in two scenes: ``original``, the launcher's node has the image and the workers' nodes pull it
(mpi-operator #386); ``both-pull``, the launcher's node pulls it too. Reported per gate, median
[min-max] of the runs: MPIJob creation to mpirun's first rank (the first line a rank printed,
by the kubelet's timestamp), creation to the job's success (polled every 0.5 s), the gap from
the last worker's sshd listening (its "Server listening" line) to the first rank, the workers'
pull as the kubelet timed it, and failed launches (mpirun's container restarted, or a launcher
pod failed). One MPIJob at a time: several side by side would share the shaped links."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.cluster import Cluster, images
from testbed.cluster.mpijob import (
    Jobs,
    as_deployed,
    from_a_rank,
    load_example,
    scaled,
    without_init,
)
from testbed.cluster.pulls import PULL_SECONDS, pulling, pulls

from benchmarks.common import log

GATES = ("init", "entrypoint", "ready-gate", "ready-probe", "no-gate")
SCENES = ("original", "both-pull")
WORKERS = 4


@dataclass(frozen=True)
class Form:
    """What a gate's MPIJob is built from: the example, the images its nodes pull (the tier's
    names), its containers' names and its sshd port."""

    example: str
    pulled: tuple[str, ...]
    launcher: str
    worker: str
    port: int


INIT = Form("initcontainer.yaml", (images.OPENMPI,), "tensorflow-benchmarks",
            "tensorflow-benchmarks", 22)  # fmt: skip
# entrypoint.yaml's image and the operator's image it is built on (the layers it shares)
ENTRYPOINT = Form("entrypoint.yaml", (images.PI_MPIWAIT, images.MPICH_PI), "mpi-launcher",
                  "mpi-worker", 2222)  # fmt: skip


def form(gate: str) -> Form:
    return ENTRYPOINT if gate == "entrypoint" else INIT


def manifest(gate: str, name: str, workers: int = WORKERS) -> dict[str, Any]:
    doc = scaled(as_deployed(load_example(form(gate).example)), workers)
    doc["metadata"]["name"] = name
    doc["spec"]["runPolicy"]["cleanPodPolicy"] = "None"  # the workers' logs outlive the job
    doc["spec"]["runPolicy"]["backoffLimit"] = 6
    if workers > WORKERS:  # entrypoint.yaml's 1 GiB a worker: 64 of them do not fit two nodes
        for c in doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]:
            c.pop("resources", None)
    if gate in ("ready-gate", "ready-probe", "no-gate"):
        doc = without_init(doc)
    if gate in ("ready-gate", "ready-probe"):
        doc["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    if gate == "ready-probe":
        worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["readinessProbe"] = {"tcpSocket": {"port": INIT.port}, "periodSeconds": 1}
    return doc


def measure(
    jobs: Jobs, gate: str, name: str, created: float, succeeded: float | None
) -> dict[str, Any]:
    f = form(gate)
    worker_pods = jobs.worker_pods(name)
    names = {p["metadata"]["name"] for p in worker_pods}
    last_sshd = jobs.last_sshd_at(names, f.worker)
    ref = images.registry_ref(load_example(f.example)["spec"]["mpiReplicaSpecs"]["Worker"][
        "template"]["spec"]["containers"][0]["image"])  # fmt: skip
    pulled = [p.seconds for w in sorted(names) for p in pulls(jobs, w) if p.image == ref]
    first_rank = None
    launchers = jobs.launcher_pods(name)
    for pod in launchers:
        t = jobs.first_line_at(pod["metadata"]["name"], f.launcher, from_a_rank(names))
        if t is not None and (first_rank is None or t < first_rank):
            first_rank = t
    # A failed launch: mpirun's container restarted in its pod (the operator's launcher pods
    # restart on failure), or a pod that failed for good.
    failed = sum(
        (p["status"].get("phase") == "Failed")
        + sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", []))
        for p in launchers
    )
    return {
        "to_first_rank": None if first_rank is None else first_rank - created,
        "to_success": None if succeeded is None else succeeded - created,
        "gap": None if first_rank is None or last_sshd is None else first_rank - last_sshd,
        "worker_pull": max((p for p in pulled if p is not None), default=None),
        "failed_launches": failed,
    }


def one_run(cluster: Cluster, gate: str, scene: str, rep: int, workers: int) -> dict[str, Any]:
    """One MPIJob alone on the cluster, its scene's nodes pulling: created, waited for,
    measured, its namespace deleted (and the nodes given the image back)."""
    jobs = Jobs(cluster, f"bench-{gate}-{scene}-{rep}")
    name = f"{gate}-{scene}"
    nodes = cluster.nodes if scene == "both-pull" else cluster.node_of("worker")
    try:
        with pulling(cluster, nodes, form(gate).pulled):
            created = time.time()
            jobs.create(manifest(gate, name, workers))
            succeeded = None
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                done = jobs.condition(name)
                if done:
                    succeeded = time.time() if done == "Succeeded" else None
                    break
                time.sleep(0.5)
            row = {"gate": gate, "scene": scene, "workers": workers, "rep": rep}
            row |= measure(jobs, gate, name, created, succeeded)
        log(f"cluster {name} rep {rep}: {row}")
        return row
    finally:
        jobs.close()


def _median(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    spread = f" [{min(got):.1f}-{max(got):.1f}]" if len(got) > 1 else ""
    missing = f" ({len(values) - len(got)} none)" if len(got) < len(values) else ""
    return f"{statistics.median(got):.1f} s{spread}{missing}"


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| scene | workers | gate | to first rank | to success | gap after last sshd "
        "| workers' pull | failed launches |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scene in SCENES:
        for workers in sorted({r["workers"] for r in rows}):
            for gate in GATES:
                mine = [r for r in rows if (r["gate"], r["scene"], r["workers"]) ==
                        (gate, scene, workers)]  # fmt: skip
                if not mine:
                    continue
                out.append(
                    f"| {scene} | {workers} | {gate} | "
                    f"{_median([r['to_first_rank'] for r in mine])} | "
                    f"{_median([r['to_success'] for r in mine])} | "
                    f"{_median([r['gap'] for r in mine])} | "
                    f"{_median([r['worker_pull'] for r in mine])} | "
                    f"{sum(r['failed_launches'] for r in mine)} in {len(mine)} |"
                )
    return "\n".join(out)


def chart(rows: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, scene in zip(axes, SCENES, strict=True):
        for i, gate in enumerate(GATES):
            mine = [r for r in rows if r["gate"] == gate and r["scene"] == scene]
            for key, color, dx in (
                ("to_first_rank", "tab:blue", -0.12),
                ("to_success", "tab:orange", 0.12),
            ):
                ys = [r[key] for r in mine if r[key] is not None]
                ax.scatter([i + dx] * len(ys), ys, color=color, s=18,
                           label=key.replace("_", " ") if i == 0 else None)  # fmt: skip
        ax.set_xticks(range(len(GATES)), GATES, rotation=20)
        ax.set_title({"original": f"the workers' nodes pull ({PULL_SECONDS} s)",
                      "both-pull": "and the launcher's node too"}[scene])  # fmt: skip
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("seconds from MPIJob creation")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def run(cluster: Cluster, reps: int, out: Path, workers: int = WORKERS) -> str:
    rows: list[dict[str, Any]] = []
    for rep in range(reps):
        for scene in SCENES:
            for gate in GATES:
                rows.append(one_run(cluster, gate, scene, rep, workers))
                (out / "cluster.json").write_text(json.dumps(rows, indent=1))
    md = table(rows)
    (out / "cluster.md").write_text(md + "\n")
    chart(rows, out / "cluster.png")
    return md
