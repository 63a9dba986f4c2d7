"""Scenario 7: the seed issue's scene on a real single-node Kubernetes with mpi-operator v0.8.2
(testbed.cluster), the same MPIJob (initcontainer.yaml, 2 workers) gated five ways:

  mpiwait       (a) mpiwait as the launcher's initContainer (the example as documented)
  ready-gate    (b) launcherCreationPolicy: WaitForWorkersReady, workers without a readiness probe
  probe-1s      (c) WaitForWorkersReady, a tcpSocket readiness probe on the workers' sshd port,
  probe-10s         periodSeconds 1 and 10
  no-gate       (d) AtStartup (the default): the launcher Job's back-off retries mpirun

and two timings: ``worker-pull``: worker 1's image pull takes 20 s (an initContainer that sleeps
stands for it); ``both-pull``: the launcher's node lacks the image too (its pull 15 s, the
launcher's first initContainer). Reported per variant, median [min-max] of the runs: MPIJob
creation to mpirun's first rank (the first line a rank printed, by the kubelet's timestamp),
creation to the job's success (polled every 0.5 s), the gap from worker 1's sshd listening (its
"Server listening" line) to the first rank, and failed launches (mpirun's container restarted,
or a launcher pod failed). One MPIJob at a time: ten
side by side on this 2-CPU node took 100 s or more to start their pods, hiding the gates."""

from __future__ import annotations

import json
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed.cluster import Cluster
from testbed.cluster.mpijob import Jobs, as_deployed, hold_back, load_example, without_init

from benchmarks.common import log

VARIANTS = ("mpiwait", "ready-gate", "probe-1s", "probe-10s", "no-gate")
TIMINGS = ("worker-pull", "both-pull")
WORKER_PULL, LAUNCHER_PULL = 20, 15


def manifest(variant: str, timing: str, name: str) -> dict[str, Any]:
    doc = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, WORKER_PULL)
    doc["metadata"]["name"] = name
    doc["spec"]["runPolicy"]["cleanPodPolicy"] = "None"  # the workers' logs outlive the job
    doc["spec"]["runPolicy"]["backoffLimit"] = 6
    if variant != "mpiwait":
        doc = without_init(doc)
    if variant in ("ready-gate", "probe-1s", "probe-10s"):
        doc["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    if variant.startswith("probe-"):
        worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["readinessProbe"] = {
            "tcpSocket": {"port": 22},
            "periodSeconds": int(variant.removeprefix("probe-").removesuffix("s")),
        }
    if timing == "both-pull":
        launcher = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        image = launcher["containers"][0]["image"]
        launcher.setdefault("initContainers", []).insert(0, {
            "name": "image-pull", "image": image, "imagePullPolicy": "Never",
            "command": ["sleep", str(LAUNCHER_PULL)],
        })  # fmt: skip
    return doc


def _stamp(line: str) -> float:
    """The kubelet's RFC 3339 timestamp at the start of a ``kubectl logs --timestamps`` line."""
    text = line.split(" ", 1)[0].rstrip("Z")
    whole, _, frac = text.partition(".")
    t = datetime.fromisoformat(whole + "+00:00").timestamp()
    return t + float("0." + frac) if frac else t


def _first(jobs: Jobs, pod: str, container: str, match: Any) -> float | None:
    """The kubelet's time of the first line of ``pod``'s log for which ``match(text)`` holds."""
    out = jobs.kubectl("logs", "--timestamps", pod, "-c", container, check=False).stdout
    for line in out.splitlines():
        stamp, _, text = line.partition(" ")
        if stamp and match(text.strip()):
            return _stamp(stamp)
    return None


def measure(jobs: Jobs, name: str, created: float, succeeded: float | None) -> dict[str, Any]:
    worker_log = _first(
        jobs, f"{name}-worker-1", "tensorflow-benchmarks", lambda t: "Server listening" in t
    )
    ranks = {f"{name}-worker-0", f"{name}-worker-1"}  # what each rank prints: its host name
    first_rank = None
    launchers = jobs.launcher_pods(name)
    for pod in launchers:
        t = _first(jobs, pod["metadata"]["name"], "tensorflow-benchmarks", ranks.__contains__)
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
        "gap": None if first_rank is None or worker_log is None else first_rank - worker_log,
        "failed_launches": failed,
    }


def one_run(cluster: Cluster, variant: str, timing: str, rep: int) -> dict[str, Any]:
    """One MPIJob alone on the node: created, waited for, measured, its namespace deleted."""
    jobs = Jobs(cluster, f"bench-{variant}-{timing}-{rep}")
    name = f"{variant}-{timing}"
    try:
        created = time.time()
        jobs.create(manifest(variant, timing, name))
        succeeded = None
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            done = jobs.condition(name)
            if done:
                succeeded = time.time() if done == "Succeeded" else None
                break
            time.sleep(0.5)
        row = {"variant": variant, "timing": timing, "rep": rep}
        row |= measure(jobs, name, created, succeeded)
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
        "| timing | gate | to first rank | to success | gap after last sshd | failed launches |",
        "|---|---|---|---|---|---|",
    ]
    for timing in TIMINGS:
        for variant in VARIANTS:
            mine = [r for r in rows if r["variant"] == variant and r["timing"] == timing]
            out.append(
                f"| {timing} | {variant} | {_median([r['to_first_rank'] for r in mine])} | "
                f"{_median([r['to_success'] for r in mine])} | {_median([r['gap'] for r in mine])} "
                f"| {sum(r['failed_launches'] for r in mine)} in {len(mine)} |"
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
    for ax, timing in zip(axes, TIMINGS, strict=True):
        for i, variant in enumerate(VARIANTS):
            mine = [r for r in rows if r["variant"] == variant and r["timing"] == timing]
            for key, color, dx in (
                ("to_first_rank", "tab:blue", -0.12),
                ("to_success", "tab:orange", 0.12),
            ):
                ys = [r[key] for r in mine if r[key] is not None]
                ax.scatter([i + dx] * len(ys), ys, color=color, s=18,
                           label=key.replace("_", " ") if i == 0 else None)  # fmt: skip
        ax.set_xticks(range(len(VARIANTS)), VARIANTS, rotation=20)
        ax.set_title({"worker-pull": "one worker's pull 20 s",
                      "both-pull": "and the launcher's pull 15 s"}[timing])  # fmt: skip
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("seconds from MPIJob creation")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def run(cluster: Cluster, reps: int, out: Path) -> str:
    rows: list[dict[str, Any]] = []
    for rep in range(reps):
        for timing in TIMINGS:
            for variant in VARIANTS:
                rows.append(one_run(cluster, variant, timing, rep))
                (out / "cluster.json").write_text(json.dumps(rows, indent=1))
    md = table(rows)
    (out / "cluster.md").write_text(md + "\n")
    chart(rows, out / "cluster.png")
    return md
