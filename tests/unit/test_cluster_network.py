"""The cluster tier's nodes and registry as values: each node's addresses and names its own, the
images' names with only the registry host changed, and the pusher's reading of a ``docker save``
archive (digests, a layer stored once for two images)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
from testbed.cluster import images, node, registry

REPO = Path(__file__).resolve().parents[2]


def test_each_node_has_its_own_addresses_and_names() -> None:
    nodes = node.nodes(4)
    for attr in ("name", "ip", "pod_cidr", "pod_gateway", "netns", "veth"):
        assert len({getattr(n, attr) for n in nodes}) == 4, attr
    assert all(len(n.veth) <= 15 and len(n.netns) <= 15 for n in nodes)  # IFNAMSIZ
    assert [n.role for n in nodes] == ["launcher", "worker", "worker", "worker"]
    assert all(n.pod_gateway.startswith(n.pod_cidr.rsplit(".", 2)[0]) for n in nodes)


@pytest.mark.parametrize("bad", [0, node.MAX_NODES + 1])
def test_a_node_index_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError):
        node.Node(bad)


@pytest.mark.parametrize(
    ("ref", "served"),
    [
        ("mpioperator/tensorflow-benchmarks:latest", "mpioperator/tensorflow-benchmarks:latest"),
        ("ghcr.io/example/tool:1.2", "example/tool:1.2"),
        ("docker.io/mpioperator/mpi-pi:mpich", "mpioperator/mpi-pi:mpich"),
        ("localhost/x:1", "x:1"),
        ("debian:12", "library/debian:12"),
        ("registry.example:5000/a/b:c", "a/b:c"),
    ],
)
def test_only_the_registry_host_changes(ref: str, served: str) -> None:
    assert images.registry_ref(ref) == f"{node.REGISTRY}/{served}"


def test_every_image_the_examples_name_is_served() -> None:
    """What as_deployed asks the nodes to pull exists in the registry (the control: a name no
    example uses is not among them)."""
    served = {r for refs in images.pushes().values() for r in refs}
    named = set()
    for f in (REPO / "examples/kubernetes").glob("*.yaml"):
        named |= set(re.findall(r"^\s*-?\s*image:\s*(\S+)\s*$", f.read_text(), re.M))
    assert named and {images.registry_ref(r) for r in named} <= served
    assert images.registry_ref("mpioperator/not-in-the-tier:1") not in served


@pytest.mark.parametrize(
    ("ref", "repo"),
    [("10.88.0.1:5000/a/b:t", ("a/b", "t")), ("10.88.0.1:5000/a/b", ("a/b", "latest"))],
)
def test_repository_and_tag(ref: str, repo: tuple[str, str]) -> None:
    assert registry.repository(ref) == repo


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_a_docker_save_archive_is_read_with_its_digests(tmp_path: Path) -> None:
    """Two images sharing a layer, stored once and linked as docker does: the same blob."""
    shared, own = b"shared layer", b"own layer"
    path = tmp_path / "images.tar"
    with tarfile.open(path, "w") as tar:
        _member(tar, "a/layer.tar", shared)
        _member(tar, "b/layer.tar", own)
        link = tarfile.TarInfo("c/layer.tar")
        link.type, link.linkname = tarfile.SYMTYPE, "../a/layer.tar"
        tar.addfile(link)
        _member(tar, "one.json", b"{}")
        _member(tar, "two.json", b'{"x": 1}')
        _member(tar, "manifest.json", json.dumps([
            {"Config": "one.json", "RepoTags": ["x/one:1"], "Layers": ["a/layer.tar"]},
            {"Config": "two.json", "RepoTags": ["x/two:1"],
             "Layers": ["c/layer.tar", "b/layer.tar"]},
        ]).encode())  # fmt: skip
    with tarfile.open(path) as tar:
        one, two = registry.read_archive(tar)
    sha = f"sha256:{hashlib.sha256(shared).hexdigest()}"
    assert one.tags == ("x/one:1",) and one.layers[0].digest == sha
    assert two.layers[0].digest == sha and two.layers[0].member == "a/layer.tar"
    assert two.layers[1].digest == f"sha256:{hashlib.sha256(own).hexdigest()}"
    manifest = json.loads(two.manifest())
    assert [la["digest"] for la in manifest["layers"]] == [b.digest for b in two.layers]
    assert manifest["config"]["size"] == len(b'{"x": 1}')
