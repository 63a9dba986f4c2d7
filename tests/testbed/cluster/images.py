"""The cluster tier's images, built by the test bed's container engine (bases from debootstrap),
saved as one ``docker save`` archive and pushed into the cluster's registry under their names
with only the registry host changed (``registry_ref``), and under the examples' names
(``PUBLISHED``) too. Pods pull them from there (``imagePullPolicy: IfNotPresent``); at start
every node is given every image (``Cluster.preload``), and a test that wants a node to pull
takes them away from it first (``Cluster.forget``).

- ``PAUSE``: the pod sandbox (modules/pause, a static binary in an empty image).
- ``MPIWAIT``: this repository's Dockerfile, built as the release builds it (scripts/build-image).
- ``OPENMPI``: an Open MPI 4 image with mpi-operator's base-image ssh settings
  (``StrictHostKeyChecking no`` and ``UserKnownHostsFile /dev/null`` in ssh_config; Debian 12,
  OpenSSH 9.2), as root with sshd on port 22: what initcontainer.yaml's tensorflow-benchmarks
  image is to mpiwait and mpirun.
- ``MPICH_PI``: the operator's MPICH pi image (``mpioperator/mpi-pi:mpich``: trixie, MPICH,
  client and server on port 2222, mpiuser with its own sshd config), and ``PI_MPIWAIT``:
  examples/kubernetes/entrypoint.Dockerfile built unchanged on it.
- ``OPENMPI_PI``: the same with trixie's Open MPI 5 (``mpioperator/mpi-pi:openmpi``), and
  ``PI_OPENMPI_MPIWAIT``: examples/kubernetes/trainer-entrypoint.Dockerfile built unchanged on it.
- ``INTEL_PI``: the operator's Intel pi image (``mpioperator/mpi-pi:intel``: its base, trixie, with
  Intel MPI 2021.13 as the operator installs it from Intel's apt repository, here the same
  release from PyPI's ``impi-rt`` in ``/opt/intel/oneapi/mpi/2021.13``, ``latest`` linked to it),
  and ``PI_INTEL_MPIWAIT``: examples/kubernetes/intel-entrypoint.Dockerfile built unchanged on it.
- ``PI_OPENMPI_HIDDEN_PRTED``: ``PI_OPENMPI_MPIWAIT`` with Open MPI 5's daemon (prted) moved to
  /opt/openmpi/bin, which only interactive shells have on their PATH (added at the end of
  mpiuser's .bashrc, after Debian's early return for the non-interactive ones): a worker image
  where ``kubectl exec ... bash`` finds prted and mpirun's remote start does not.
``/home/mpiuser/pi`` and ``/usr/local/bin/pi`` print the host they ran on (no compiler in the
images): mpirun reaching every worker is what the tier checks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import containers
from . import NODES, Cluster, bin_dir
from .node import REGISTRY

REPO = Path(__file__).resolve().parents[3]


def _version() -> str:
    return subprocess.run(
        ["python3", str(REPO / "scripts/version")], capture_output=True, text=True, check=True
    ).stdout.strip()


VERSION = _version()
PAUSE = "docker.io/mpiwait-tests/pause:1"
MPIWAIT = f"ghcr.io/mpiwait/mpiwait:{VERSION}"
OPENMPI = "docker.io/mpiwait-tests/openmpi:bookworm"
MPICH_PI = "docker.io/mpioperator/mpi-pi:mpich"
PI_MPIWAIT = f"ghcr.io/mpiwait/pi-mpich-mpiwait:{VERSION}"
OPENMPI_PI = "docker.io/mpioperator/mpi-pi:openmpi"
PI_OPENMPI_MPIWAIT = f"ghcr.io/mpiwait/pi-openmpi-mpiwait:{VERSION}"
INTEL_PI = "docker.io/mpioperator/mpi-pi:intel"
PI_INTEL_MPIWAIT = f"ghcr.io/mpiwait/pi-intel-mpiwait:{VERSION}"
PI_OPENMPI_HIDDEN_PRTED = f"docker.io/mpiwait-tests/pi-openmpi-hidden-prted:{VERSION}"
ALL = (
    PAUSE, MPIWAIT, OPENMPI, MPICH_PI, PI_MPIWAIT, OPENMPI_PI, PI_OPENMPI_MPIWAIT, INTEL_PI,
    PI_INTEL_MPIWAIT, PI_OPENMPI_HIDDEN_PRTED,
)  # fmt: skip
# The examples' image names (what releases publish) -> the tier's image served under that name.
PUBLISHED = {
    "mpioperator/tensorflow-benchmarks:latest": OPENMPI,
    "horovod/horovod:0.28.1": OPENMPI,
    "mpioperator/mpi-pi:openmpi": OPENMPI_PI,
    "ghcr.io/mpiwait/mpiwait:0.1.0": MPIWAIT,
    "ghcr.io/mpiwait/pi-mpich-mpiwait:0.1.0": PI_MPIWAIT,
    "ghcr.io/mpiwait/pi-openmpi-mpiwait:0.1.0": PI_OPENMPI_MPIWAIT,
    "ghcr.io/mpiwait/pi-intel-mpiwait:0.1.0": PI_INTEL_MPIWAIT,
}


def registry_ref(ref: str) -> str:
    """``ref`` with its registry host replaced by the cluster's (docker's rule: a first part with
    a dot or a colon, or ``localhost``, is a host; none means Docker Hub)."""
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        ref = rest
    elif not rest:
        ref = f"library/{ref}"
    return f"{REGISTRY}/{ref}"


def pushes() -> dict[str, list[str]]:
    """Each tier image -> the names the registry serves it under."""
    names = {ref: [registry_ref(ref)] for ref in ALL}
    for published, ref in PUBLISHED.items():
        if registry_ref(published) not in names[ref]:
            names[ref].append(registry_ref(published))
    return names


# mpi-operator v0.8.2's build/base/Dockerfile's ssh settings with Open MPI 4 (Debian 12's 4.1,
# OpenSSH 9.2), as root on port 22: what the operator's tensorflow-benchmarks and Horovod images
# are (Open MPI 4, sshd as root on 22). trixie's Open MPI is 5, which ignores the operator's
# OMPI_MCA_orte_* variables and would run every rank on the launcher.
OPENMPI_DOCKERFILE = r"""
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openssh-server openssh-client openmpi-bin hostname \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/run/sshd \
    && sed -i "s/[ #]\(.*StrictHostKeyChecking \).*/ \1no/g" /etc/ssh/ssh_config \
    && echo "    UserKnownHostsFile /dev/null" >> /etc/ssh/ssh_config \
    && sed -i "s/#\(StrictModes \).*/\1no/g" /etc/ssh/sshd_config \
    && printf '#!/bin/sh\necho "pi on $(hostname)"\n' > /usr/local/bin/pi \
    && chmod 0755 /usr/local/bin/pi
"""

# mpi-operator v0.8.2's build/base/intel.Dockerfile installs intel-oneapi-mpi-2021.13 from Intel's
# apt repository (not reachable here); PyPI's impi-rt of the same release, laid out as apt does.
INTEL_MPI = r"""
RUN python3 -m venv /opt/intel/oneapi/mpi/2021.13 \
    && /opt/intel/oneapi/mpi/2021.13/bin/pip install --no-cache-dir --disable-pip-version-check \
        impi-rt==2021.13.1 \
    && ln -s 2021.13 /opt/intel/oneapi/mpi/latest
"""


# The MPI under a prefix of its own that only interactive shells put on PATH (the line after
# .bashrc's early return): prted, the daemon mpirun starts over ssh, moved there (the file itself,
# should /usr/bin/prted be a link), nothing left at /usr/bin/prted or on the non-interactive PATH.
HIDDEN_PRTED_DOCKERFILE = rf"""
FROM {PI_OPENMPI_MPIWAIT}
RUN prted=$(readlink -f /usr/bin/prted) && test -x "$prted" \
    && mkdir -p /opt/openmpi/bin && mv "$prted" /opt/openmpi/bin/prted && rm -f /usr/bin/prted \
    && echo 'export PATH=/opt/openmpi/bin:$PATH' >> /home/mpiuser/.bashrc \
    && ! su mpiuser -c 'command -v prted' \
    && su mpiuser -c 'bash -ic "command -v prted" 2>/dev/null' | grep -qx /opt/openmpi/bin/prted
"""


def build_all(engine: containers.Engine, bins: Path, out: Path) -> Path:
    """Build every image of the tier with ``engine``; one ``docker save`` archive of them all
    (layers they share stored once), in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    ctx = out / "pause-ctx"
    ctx.mkdir(exist_ok=True)
    shutil.copy2(bins / "bin/pause", ctx / "pause")
    (ctx / "Dockerfile").write_text('FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n')
    engine.build(ctx, PAUSE)
    engine.debian_base("bookworm")
    engine.debian_base("trixie")
    p = subprocess.run(
        [str(REPO / "scripts/build-image"), "--tag", MPIWAIT, "--", "--network", "host"],
        env=engine.env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if p.returncode != 0:
        raise containers.EngineError(f"scripts/build-image: {p.stdout[-2000:]}{p.stderr[-2000:]}")
    for ref, dockerfile in (
        (OPENMPI, OPENMPI_DOCKERFILE),
        # mpi-operator v0.8.2's base (trixie) with mpich.Dockerfile's or openmpi.Dockerfile's MPI
        (MPICH_PI, containers.operator_pi_dockerfile("trixie", "mpich")),
        (OPENMPI_PI, containers.operator_pi_dockerfile("trixie", "openmpi-bin")),
        (INTEL_PI, containers.operator_pi_dockerfile("trixie", "python3-venv") + INTEL_MPI),
    ):
        ctx = out / ref.rsplit("/", 1)[-1].replace(":", "-")
        ctx.mkdir(exist_ok=True)
        (ctx / "Dockerfile").write_text(dockerfile)
        engine.build(ctx, ref)
    k8s = REPO / "examples/kubernetes"
    engine.build(k8s, PI_MPIWAIT, "-f", str(k8s / "entrypoint.Dockerfile"))
    engine.build(k8s, PI_OPENMPI_MPIWAIT, "-f", str(k8s / "trainer-entrypoint.Dockerfile"))
    engine.build(k8s, PI_INTEL_MPIWAIT, "-f", str(k8s / "intel-entrypoint.Dockerfile"))
    ctx = out / "pi-openmpi-hidden-prted"
    ctx.mkdir(exist_ok=True)
    (ctx / "Dockerfile").write_text(HIDDEN_PRTED_DOCKERFILE)
    engine.build(ctx, PI_OPENMPI_HIDDEN_PRTED)
    tar = out / "images.tar"
    engine.docker("save", "-o", str(tar), *ALL, timeout=900)
    return tar


def registry_storage() -> Path:
    """The registry's storage, kept in the test cache: a warm run pushes only what changed."""
    root = Path(os.environ.get("MPIWAIT_TEST_CACHE", "/var/cache/mpiwait-tests"))
    return root / "cluster-registry"


@contextlib.contextmanager
def cluster_with_images(
    work: Path,
    dns: str = "kubeadm",
    trainer: bool = False,
    kueue: bool = False,
    nodes: int = NODES,
) -> Iterator[Cluster]:
    """Build what is not built (scripts/build-cluster, the images), start a Cluster of ``nodes``
    in ``work``/cluster, push the images into its registry and give every node every image
    (and, with ``trainer``, start JobSet and Kubeflow Trainer meanwhile:
    ``Cluster.start_trainer``; with ``kueue``, Kueue: ``Cluster.start_kueue``); stopped on
    leaving."""
    bins = bin_dir()
    t0 = time.monotonic()
    with containers.Engine(work / "engine") as engine:
        archive = build_all(engine, bins, work / "images")
    c = Cluster(work / "cluster", bins, dns=dns, nodes=nodes, registry_storage=registry_storage())
    c.timings["images built and saved"] = time.monotonic() - t0
    try:
        c.start()

        def loaded() -> None:
            t0 = time.monotonic()
            names = pushes()
            sent = c.push(archive, names)
            archive.unlink()  # the nodes pull from the registry: its disk is theirs now
            c.timings[f"images pushed ({sent / 1e6:.0f} MB sent)"] = time.monotonic() - t0
            t0 = time.monotonic()
            refs = [r for rs in names.values() for r in rs]
            with ThreadPoolExecutor(len(c.nodes)) as pool:
                list(pool.map(lambda n: c.preload(n, refs), c.nodes))
            c.timings["images preloaded on every node"] = time.monotonic() - t0

        with ThreadPoolExecutor(1) as pool:  # the pushes are I/O, the controllers' start the API's
            loading = pool.submit(loaded)
            if trainer:
                t0 = time.monotonic()
                c.start_trainer()
                c.timings["JobSet and Trainer started"] = time.monotonic() - t0
            if kueue:
                t0 = time.monotonic()
                c.start_kueue()
                c.timings["Kueue started"] = time.monotonic() - t0
            loading.result()
        yield c
    finally:
        c.stop()
