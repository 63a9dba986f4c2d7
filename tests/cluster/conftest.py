"""The cluster tier: one real single-node Kubernetes with the real mpi-operator per session
(testbed.cluster), its images built by the test bed's container engine and imported, and one
namespace per test. The first run on a machine builds the cluster (scripts/build-cluster) and the
images; later runs reuse both."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import testbed
from testbed import containers
from testbed.cluster import Cluster, bin_dir, images

from testbed.cluster.mpijob import Jobs


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    testbed.require("cluster")
    bins = bin_dir()
    work = tmp_path_factory.mktemp("k8s")
    with containers.Engine(work / "engine") as engine:
        archive = images.build_all(engine, bins, work / "images")
    c = Cluster(work / "cluster", bins)
    c.start()
    try:
        c.import_image(archive)
        archive.unlink()
        yield c
    finally:
        c.stop()


@pytest.fixture
def jobs(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Jobs]:
    """A namespace of the test's own, deleted (with everything in it) afterwards."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:50].rstrip("-")
    j = Jobs(cluster, f"t-{name}")
    try:
        yield j
    finally:
        j.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)
