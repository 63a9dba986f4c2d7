"""The cluster tier: one real single-node Kubernetes with the real mpi-operator for the tier
(testbed.cluster), its images built by the test bed's container engine and imported, and one
namespace per test. The first run on a machine builds the cluster (scripts/build-cluster) and the
images; later runs reuse both."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import testbed
from testbed.cluster import Cluster, bin_dir
from testbed.cluster.mpijob import Jobs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """The cluster as CONTRIBUTING brings it up by hand: ``scripts/cluster up``, stopped as by
    Ctrl-C (SIGTERM) once the module's tests are done (not at the session's end: the rest of
    the suite runs without it; a module is one cluster, with CoreDNS configured as its ``DNS``
    says), which must leave nothing behind."""
    testbed.require("cluster")
    dns = getattr(request.module, "DNS", "kubeadm")  # a module's CoreDNS configuration
    bins = bin_dir()
    work = tmp_path_factory.mktemp("k8s")
    ready = work / "ready"
    log = work / "scripts-cluster.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(REPO / "scripts/cluster"), "up", "--dns", dns, "--workdir", str(work),
             "--ready-file", str(ready)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 1800
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"scripts/cluster up did not come up:\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
        yield Cluster(work / "cluster", bins)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(180)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait(30)
    said = log.read_text()
    assert rc == 0 and said.rstrip().endswith("cluster: down"), said[-4000:]


@pytest.fixture
def jobs(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Jobs]:
    """A namespace of the test's own, deleted (with everything in it) afterwards."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:50].rstrip("-")
    j = Jobs(cluster, f"t-{name}")
    try:
        yield j
    finally:
        j.close()
