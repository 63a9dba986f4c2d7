"""The cluster tier: one real Kubernetes of three nodes with the real mpi-operator for the whole
tier (testbed.cluster), its images built by the test bed's container engine and pushed into the
cluster's registry, and one namespace per test. The first run on a machine builds the cluster
(scripts/build-cluster) and the images; later runs reuse both."""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import testbed
from testbed.cluster import Cluster, bin_dir, host
from testbed.cluster.mpijob import Jobs
from testbed.cluster.trainjob import TrainJobs

REPO = Path(__file__).resolve().parents[2]


HERE = Path(__file__).resolve().parent
STOP = pytest.StashKey[Callable[[], None]]()


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """The cluster as CONTRIBUTING brings it up by hand: ``scripts/cluster up --trainer
    --kueue`` (with JobSet and Kubeflow Trainer for tests/cluster/test_trainer.py, Kueue for
    tests/cluster/test_kueue.py), stopped as by
    Ctrl-C (SIGTERM), which must leave nothing behind. One for the whole tier (a start costs
    over a minute), stopped once the tier's last test is done (``pytest_runtest_teardown``
    below), not at the session's end: the rest of the suite runs without it."""
    testbed.require("cluster")
    bins = bin_dir()
    work = tmp_path_factory.mktemp("k8s")
    ready = work / "ready"
    log = work / "scripts-cluster.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(REPO / "scripts/cluster"), "up", "--trainer", "--kueue", "--workdir", str(work),
             "--ready-file", str(ready)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    stopped: list[int] = []

    def stop() -> None:
        if stopped:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            stopped.append(proc.wait(180))
        except subprocess.TimeoutExpired:
            proc.kill()
            stopped.append(proc.wait(30))
        said = log.read_text()
        assert stopped == [0] and said.rstrip().endswith("cluster: down"), said[-4000:]

    request.config.stash[STOP] = stop
    try:
        deadline = time.monotonic() + 1800
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                said = host.last_line(log.read_text(errors="replace"))  # scripts/cluster's why
                pytest.fail(f"scripts/cluster up did not come up: {said} (its log: {log})")
            time.sleep(0.5)
        yield Cluster(work / "cluster", bins, trainer=True, kueue=True)
    finally:
        stop()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The tier's last test done (its own fixtures torn down first: trylast): the cluster stops."""
    stop = item.config.stash.get(STOP, None)
    if stop is not None and (nextitem is None or HERE not in nextitem.path.parents):
        stop()


@pytest.fixture
def old_kubeadm_dns(cluster: Cluster) -> Iterator[None]:
    """CoreDNS configured as kubeadm did before 1.32 for one test, then as 1.37's again."""
    cluster.configure_dns("old-kubeadm")
    try:
        yield
    finally:
        cluster.configure_dns("kubeadm")


J = TypeVar("J", bound=Jobs)


def _own_namespace(kind: type[J], cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[J]:
    """A namespace named after the test, deleted (with everything in it) afterwards."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:50].rstrip("-")
    # Parametrized tests' names differ at the end: a short digest keeps each one's own.
    digest = hashlib.sha256(request.node.name.encode()).hexdigest()[:6]
    j = kind(cluster, f"t-{name}-{digest}")
    try:
        yield j
    finally:
        j.close()


@pytest.fixture
def jobs(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Jobs]:
    """MPIJobs in a namespace of the test's own."""
    yield from _own_namespace(Jobs, cluster, request)


@pytest.fixture
def trainjobs(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[TrainJobs]:
    """TrainJobs in a namespace of the test's own (the cluster runs JobSet and Trainer)."""
    yield from _own_namespace(TrainJobs, cluster, request)
