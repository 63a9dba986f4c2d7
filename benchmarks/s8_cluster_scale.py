"""Scenario 8: the 64-worker jobs of issue 34 on the test cluster (testbed.cluster.scale): one
MPIJob of ``workers`` (default 65) workers over the two worker nodes, the second of which pulls
the image for real, so its workers arrive about ``PULL_SECONDS`` late. Two forms:

  openmpi4   initcontainer.yaml, Open MPI 4: at 65 daemons it spawns them through the workers
             (a tree: workers log in to workers, mpi-operator #501)
  mpich      entrypoint.yaml, MPICH's hydra (mpiwait the image's ENTRYPOINT): 65 proxies

Reported per run: whether the launch was clean (the job succeeded with one launcher pod never
restarted, and mpirun reached every worker), workers on the pulling node, time to the first
rank, the gaps from the last worker's sshd listening to mpiwait's go and to the first rank,
launcher restarts, mpiwait's CPU time and peak memory, and the DNS queries per worker that
CoreDNS logged for the job's names while mpiwait ran (and, for the initContainer form, from the
launcher pod over its whole life). tests/cluster/test_scale.py runs the same at 16 workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.cluster import Cluster
from testbed.cluster.mpijob import Jobs
from testbed.cluster.scale import FORMS, Outcome, run

from benchmarks.common import log

WORKERS = 65
COLUMNS = (
    ("late_workers", "pulling", ""),
    ("to_first_rank_s", "to first rank", " s"),
    ("last_sshd_to_go_s", "last sshd → go", " s"),
    ("last_sshd_to_first_rank_s", "last sshd → first rank", " s"),
    ("launcher_restarts", "launcher restarts", ""),
    ("mpiwait_cpu_s", "mpiwait CPU", " s"),
    ("mpiwait_peak_rss_mib", "peak RSS", " MiB"),
    ("mpiwait_dns_queries_per_worker", "DNS queries / worker (mpiwait)", ""),
    ("launcher_pod_dns_queries_per_worker", "(launcher pod)", ""),
)


def clean(got: Outcome) -> bool:
    """The launch a user wants: succeeded, one launcher pod never restarted, every worker
    reached."""
    return (
        got.finished == Jobs.SUCCEEDED
        and len(got.launchers) == 1
        and got.figures.get("launcher_restarts") == 0
        and got.launcher_job_failed == 0
        and all(w in got.log for w in got.workers)
    )


def one_run(cluster: Cluster, form: str, rep: int, workers: int) -> dict[str, Any]:
    jobs = Jobs(cluster, f"bench-scale-{form}-{rep}")
    try:
        got = run(jobs, FORMS[form], workers)
    finally:
        jobs.close()
    row = {"form": form, "rep": rep, "clean": clean(got), "finished": got.finished} | got.figures
    log(f"scale {form} rep {rep}: " + ", ".join(f"{k}={v}" for k, v in row.items()))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ["form", "workers", "clean", *(title for _, title, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["form"], str(r["workers"]), "yes" if r["clean"] else f"no ({r['finished']})"]
        for key, _, unit in COLUMNS:
            v = r.get(key)
            cells.append("-" if v is None else f"{v}{unit}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_all(cluster: Cluster, reps: int, out: Path, workers: int = WORKERS) -> str:
    rows: list[dict[str, Any]] = []
    for rep in range(reps):
        for form in FORMS:
            rows.append(one_run(cluster, form, rep, workers))
            (out / "cluster-scale.json").write_text(json.dumps(rows, indent=1))
    md = table(rows)
    (out / "cluster-scale.md").write_text(md + "\n")
    return md
