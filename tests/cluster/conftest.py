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


def _dns(item: pytest.Item) -> str:
    return str(getattr(item.module, "DNS", "kubeadm"))  # the module's CoreDNS configuration


def _here(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(REPO / "tests/cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tier's modules that want the same CoreDNS configuration run one after another, so
    they share one cluster (its start and image import cost about a minute each)."""
    at = [i for i, item in enumerate(items) if _here(item)]
    first: dict[str, int] = {}
    for i in at:
        first.setdefault(_dns(items[i]), len(first))
    grouped = sorted((items[i] for i in at), key=lambda it: first[_dns(it)])
    for i, item in zip(at, grouped, strict=True):
        items[i] = item


class _Up:
    """The running ``scripts/cluster up`` (one at a time on a host), shared by adjacent modules
    with the same DNS; started with ``--trainer`` if any of them sets ``TRAINER = True``."""

    def __init__(self, work: Path, dns: str, trainer: bool, bins: Path) -> None:
        self.dns, self.trainer, self.work = dns, trainer, work
        self.log = work / "scripts-cluster.log"
        ready = work / "ready"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(REPO / "scripts/cluster"), "up", "--dns", dns, "--workdir", str(work),
                 "--ready-file", str(ready), *(["--trainer"] if trainer else [])],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + 1800
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(check=False)
                pytest.fail(f"scripts/cluster up did not come up:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.5)
        self.cluster = Cluster(work / "cluster", bins, dns=dns, trainer=trainer)

    def stop(self, check: bool = True) -> None:
        """As by Ctrl-C (SIGTERM), which must leave nothing behind."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(30)
        said = self.log.read_text()
        if check:
            assert rc == 0 and said.rstrip().endswith("cluster: down"), said[-4000:]


_up: list[_Up] = []  # the one running cluster, if any


def _stop_up(check: bool = True) -> None:
    while _up:
        _up.pop().stop(check)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """The cluster as CONTRIBUTING brings it up by hand: ``scripts/cluster up``, stopped as by
    Ctrl-C (SIGTERM) once the module's tests are done, unless the next module wants the same
    cluster (its ``DNS``; pytest_collection_modifyitems puts those next to each other); not at
    the session's end: the rest of the suite runs without it."""
    testbed.require("cluster")
    dns = str(getattr(request.module, "DNS", "kubeadm"))
    items = request.session.items
    trainer = any(
        getattr(it.module, "TRAINER", False) for it in items if _here(it) and _dns(it) == dns
    )
    if _up and (_up[0].dns, _up[0].trainer) != (dns, trainer):
        _stop_up()
    if not _up:
        request.config.add_cleanup(lambda: _stop_up(check=False))  # an interrupted session
        _up.append(_Up(tmp_path_factory.mktemp("k8s"), dns, trainer, bin_dir()))
    try:
        yield _up[0].cluster
    finally:
        mine = [i for i, it in enumerate(items) if getattr(it, "module", None) is request.module]
        after = items[mine[-1] + 1] if mine and mine[-1] + 1 < len(items) else None
        if after is None or not _here(after) or _dns(after) != dns:
            _stop_up()


@pytest.fixture
def jobs(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Jobs]:
    """A namespace of the test's own, deleted (with everything in it) afterwards."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:50].rstrip("-")
    j = Jobs(cluster, f"t-{name}")
    try:
        yield j
    finally:
        j.close()
