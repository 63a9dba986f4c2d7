"""The scene mpiwait exists for, with real pulls (mpi-operator #386): the launcher lands on a node
that has the image, the workers on nodes that pull it from the registry over links shaped to
take about ``PULL_SECONDS``; and the case where the launcher's node pulls too. No sleeping
initContainer stands for a pull here: the kubelet's own events say how long each one took."""

from __future__ import annotations

import re
from typing import Any

from test_mpijobs import assert_first_launch_fails, assert_one_clean_launch
from testbed.cluster import images
from testbed.cluster.mpijob import Jobs, as_deployed, load_example, without_init
from testbed.cluster.pulls import PULL_SECONDS, Pull, pulling, pulls

# initcontainer.yaml's MPI image (tensorflow-benchmarks, served by the tier's Open MPI 4 image)
MPI_IMAGE = images.OPENMPI
MPI_REF = images.registry_ref("mpioperator/tensorflow-benchmarks:latest")
# entrypoint.yaml's one image, and the operator's image it is built on (its layers too)
ENTRYPOINT_IMAGES = (images.PI_MPIWAIT, images.MPICH_PI)
ENTRYPOINT_REF = images.registry_ref("ghcr.io/mpiwait/pi-mpich-mpiwait:0.1.0")


def _pulled(jobs: Jobs, pod: dict[str, Any] | str, ref: str) -> Pull:
    """What the kubelet said of ``pod``'s pull of ``ref`` (its events outlive the pod)."""
    name = pod if isinstance(pod, str) else pod["metadata"]["name"]
    mine = [p for p in pulls(jobs, name) if p.image == ref]
    assert len(mine) == 1, (name, pulls(jobs, name))
    return mine[0]


def _assert_workers_pulled(jobs: Jobs, job: str, ref: str) -> float:
    """Each worker's kubelet pulled ``ref`` and it took most of ``PULL_SECONDS``; returns when
    the last of those pulls ended."""
    ends = []
    for w in (f"{job}-worker-0", f"{job}-worker-1"):  # cleanPodPolicy may have deleted them
        pulled = _pulled(jobs, w, ref)
        assert pulled.seconds is not None and pulled.seconds >= PULL_SECONDS / 2, pulled
        ends.append(pulled.at)
    return max(ends)


def _assert_waited_through_the_pull(log: str) -> None:
    ready = re.search(r"all 2 hosts ready in ([\d.]+)s", log)
    assert ready and float(ready.group(1)) >= PULL_SECONDS / 2, log


def test_what_a_node_would_fetch_is_what_it_has_not_unpacked(jobs: Jobs) -> None:
    """``pulling`` shapes a link by what the node lacks: nothing where the image is unpacked
    (its layers' blobs are dropped after the preload), the image's own layers once forgotten."""
    cluster = jobs.cluster
    refs = images.pushes()[MPI_IMAGE]
    (node,) = cluster.node_of("launcher")
    assert cluster.missing_bytes(node, refs) == 0
    with pulling(cluster, [node], [MPI_IMAGE]):
        lacks = cluster.missing_bytes(node, refs)
    assert lacks > 100e6, lacks  # the Open MPI layer at least, not only what no image shares
    assert cluster.missing_bytes(node, refs) == 0


def test_original_scene_workers_pull_and_the_launcher_waits(jobs: Jobs) -> None:
    """initcontainer.yaml: the launcher's node has the image, both workers pull it for about
    25 s; mpiwait holds mpirun until both accept, and the job launches once."""
    cluster = jobs.cluster
    with pulling(cluster, cluster.node_of("worker"), [MPI_IMAGE]):
        job = jobs.create(as_deployed(load_example("initcontainer.yaml")))
        assert_one_clean_launch(jobs, job, [f"{job}-worker-0", f"{job}-worker-1"],
                                      "tensorflow-benchmarks")  # fmt: skip
        _assert_workers_pulled(jobs, job, MPI_REF)
    (launcher,) = jobs.launcher_pods(job)
    assert _pulled(jobs, launcher, MPI_REF).seconds is None  # its node had it
    _assert_waited_through_the_pull(jobs.logs(launcher["metadata"]["name"], "wait-for-workers"))


def test_original_scene_without_mpiwait_fails_its_first_launch(jobs: Jobs) -> None:
    """The control: the same scene, the same job without its initContainer."""
    cluster = jobs.cluster
    with pulling(cluster, cluster.node_of("worker"), [MPI_IMAGE]):
        doc = without_init(as_deployed(load_example("initcontainer.yaml")))
        assert_first_launch_fails(jobs, doc, "tensorflow-benchmarks")


def test_both_pull_initcontainer_pulls_the_launchers_mpi_image_after_the_wait(
    jobs: Jobs,
) -> None:
    """The launcher's node pulls too. A kubelet runs a pod's initContainers before it pulls its
    containers' images, so initcontainer.yaml's launcher pulls its MPI image only after mpiwait
    returned: one pull after the other (its pull ends a pull's length after the workers'), and
    still one clean launch."""
    cluster = jobs.cluster
    with pulling(cluster, cluster.nodes, [MPI_IMAGE]):
        job = jobs.create(as_deployed(load_example("initcontainer.yaml")))
        assert_one_clean_launch(jobs, job, [f"{job}-worker-0", f"{job}-worker-1"],
                                "tensorflow-benchmarks")  # fmt: skip
        workers_pulled = _assert_workers_pulled(jobs, job, MPI_REF)
    (launcher,) = jobs.launcher_pods(job)
    pulled = _pulled(jobs, launcher, MPI_REF)
    assert pulled.seconds is not None and pulled.seconds >= PULL_SECONDS / 2, pulled
    assert pulled.at - workers_pulled >= PULL_SECONDS / 2, (pulled, workers_pulled)


def test_both_pull_entrypoint_pulls_side_by_side(jobs: Jobs) -> None:
    """entrypoint.yaml (mpiwait in the MPI image) on three nodes that all pull that image: the
    launcher's pull runs beside the workers' (their ends within half a pull of each other), and
    the job launches once."""
    cluster = jobs.cluster
    with pulling(cluster, cluster.nodes, list(ENTRYPOINT_IMAGES)):
        job = jobs.create(as_deployed(load_example("entrypoint.yaml")))
        assert_one_clean_launch(jobs, job, [f"{job}-worker-0", f"{job}-worker-1"], "mpi-launcher")
        workers_pulled = _assert_workers_pulled(jobs, job, ENTRYPOINT_REF)
    (launcher,) = jobs.launcher_pods(job)
    pulled = _pulled(jobs, launcher, ENTRYPOINT_REF)
    assert pulled.seconds is not None and pulled.seconds >= PULL_SECONDS / 2, pulled
    assert abs(pulled.at - workers_pulled) < PULL_SECONDS / 2, (pulled, workers_pulled)
