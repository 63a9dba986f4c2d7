"""Jobs of 16 workers spread over the two worker nodes, one of which pulls the image for real
(its workers arrive about ``PULL_SECONDS`` late): one clean launch in which mpirun reaches every
worker, with Open MPI 4 (initcontainer.yaml) and MPICH's hydra (entrypoint.yaml).

The same jobs at 65 workers, where Open MPI 4 spawns its daemons through the workers, are
benchmarks/s8_cluster_scale.py: with them the cold run exceeded CI's budget (docs/testing.md).
Each run here prints its figures too."""

from __future__ import annotations

import re
from collections.abc import Callable

from test_mpijobs import assert_one_clean_launch
from testbed.cluster.mpijob import Jobs
from testbed.cluster.pulls import PULL_SECONDS
from testbed.cluster.scale import FORMS, Outcome, run

WORKERS = 16


def assert_clean_at_scale(jobs: Jobs, got: Outcome, container: str) -> None:
    """One clean launch (``assert_one_clean_launch``: one launcher pod, never restarted, the job
    succeeded, mpirun reached every worker), and the pulling node's workers each waited for a
    real pull: one pod's pull took the shaped link's time, and every pod's ended at least half
    of it after the job was created (a pod that joined the pull under way says only its own part
    of it)."""
    assert got.finished == jobs.SUCCEEDED, jobs.describe(got.job)
    assert_one_clean_launch(jobs, got.job, got.workers, container)
    assert 0 < len(got.late_pulls) < len(got.workers), got.late_pulls
    took: list[float] = []
    for pod, pulled in got.late_pulls.items():
        assert pulled and all(p.at - got.created >= PULL_SECONDS / 2 for p in pulled), (pod, pulled)
        took += [p.seconds for p in pulled if p.seconds is not None]
    assert took and max(took) >= PULL_SECONDS / 2, took
    for key in ("to_first_rank_s", "last_sshd_to_go_s", "mpiwait_cpu_s"):
        assert got.figures.get(key) is not None, got.figures


def _report(record: Callable[[str, object], None], what: str, got: Outcome) -> None:
    for k, v in got.figures.items():
        record(k, v)
    print(f"\n{what}: " + ", ".join(f"{k}={v}" for k, v in got.figures.items()))


def test_openmpi4_16_workers_one_node_pulling(
    jobs: Jobs, record_property: Callable[[str, object], None]
) -> None:
    """initcontainer.yaml with 16 workers (Open MPI 4)."""
    got = run(jobs, FORMS["openmpi4"], WORKERS)
    assert_clean_at_scale(jobs, got, FORMS["openmpi4"].launcher)
    lines = got.log.splitlines()
    assert all(lines.count(w) == 1 for w in got.workers), got.log  # one rank on every worker
    assert got.waiter_log is not None
    assert re.search(rf"all {WORKERS} hosts ready", got.waiter_log), got.waiter_log
    _report(record_property, f"openmpi4 {WORKERS} workers", got)


def test_mpich_hydra_16_workers_one_node_pulling(
    jobs: Jobs, record_property: Callable[[str, object], None]
) -> None:
    """entrypoint.yaml (MPICH, mpiwait the image's ENTRYPOINT) with 16 workers."""
    got = run(jobs, FORMS["mpich"], WORKERS)
    assert_clean_at_scale(jobs, got, FORMS["mpich"].launcher)
    assert got.waiter_log is None and re.search(rf"all {WORKERS} hosts ready", got.log), got.log
    _report(record_property, f"mpich {WORKERS} workers", got)
