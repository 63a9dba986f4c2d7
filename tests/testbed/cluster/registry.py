"""The cluster's image registry: distribution's ``registry`` (built by scripts/build-cluster) on
the control plane's address, and a pusher of ``docker save`` archives into it, so that the nodes'
kubelets pull the tier's images for real (``imagePullPolicy: IfNotPresent``).

The pusher speaks the distribution API over plain HTTP: each layer as the uncompressed tar the
archive holds (OCI's ``layer.v1.tar``, so its digest is its diff_id), a blob the registry has
already is not sent again (the storage lives in the test cache, so a warm run pushes only what
changed), then an OCI manifest per name. Stdlib only."""

from __future__ import annotations

import hashlib
import http.client
import json
import posixpath
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class RegistryError(RuntimeError):
    pass


def zip_chain_ids(layers: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each of a manifest's layers with its chain ID (OCI image spec), which names the snapshot
    containerd unpacks it to. The layers are uncompressed, so each digest is its diff_id."""
    out: list[tuple[str, dict[str, Any]]] = []
    chain = ""
    for layer in layers:
        chain = layer["digest"] if not chain else _sha256(f"{chain} {layer['digest']}".encode())
        out.append((chain, layer))
    return out


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def config_yaml(address: str, storage: Path) -> str:
    """distribution's configuration: filesystem storage, HTTP on ``address``, no auth."""
    return (
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n"
        "  maintenance:\n    uploadpurging:\n      enabled: false\n"
        f"http:\n  addr: {address}\n  relativeurls: true\n"
    )


def repository(ref: str) -> tuple[str, str]:
    """``host/name:tag`` -> (``name``, ``tag``), the host dropped."""
    name, _, tag = ref.rpartition(":")
    if "/" in tag or not name:
        name, tag = ref, "latest"
    return name.split("/", 1)[1], tag


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    member: str  # its path in the archive


@dataclass(frozen=True)
class Image:
    tags: tuple[str, ...]  # the archive's RepoTags
    config: Blob
    layers: tuple[Blob, ...]

    def manifest(self) -> bytes:
        return json.dumps({
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": self.config.digest,
                       "size": self.config.size},
            "layers": [{"mediaType": LAYER, "digest": b.digest, "size": b.size}
                       for b in self.layers],
        }).encode()  # fmt: skip


def _digest(f: IO[bytes]) -> str:
    h = hashlib.sha256()
    while chunk := f.read(1 << 20):
        h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def read_archive(tar: tarfile.TarFile) -> list[Image]:
    """The images of a ``docker save`` archive (manifest.json: Config, RepoTags, Layers)."""
    f = tar.extractfile("manifest.json")
    assert f is not None
    blobs: dict[str, Blob] = {}

    def blob(member: str) -> Blob:
        if member not in blobs:
            info = tar.getmember(member)
            if info.issym():  # docker stores a layer shared by two images once, linked
                info = tar.getmember(
                    posixpath.normpath(posixpath.join(posixpath.dirname(member), info.linkname))
                )
            data = tar.extractfile(info)
            assert data is not None
            blobs[member] = Blob(_digest(data), info.size, info.name)
        return blobs[member]

    return [
        Image(tuple(m.get("RepoTags") or ()), blob(m["Config"]),
              tuple(blob(layer) for layer in m["Layers"]))
        for m in json.load(f)
    ]  # fmt: skip


class Pusher:
    """``Pusher("10.88.0.1:5000").push(archive, {tier ref: [registry refs]})``."""

    def __init__(self, address: str, timeout: float = 600) -> None:
        host, _, port = address.partition(":")
        self.host, self.port, self.timeout = host, int(port or 80), timeout
        self.sent = 0  # bytes uploaded (what a warm run did not have to send)

    def _request(
        self, method: str, path: str, body: bytes | IO[bytes] | None = None,
        headers: dict[str, str] | None = None,
    ) -> http.client.HTTPResponse:  # fmt: skip
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        r.read()
        conn.close()
        return r

    def _has(self, repo: str, digest: str) -> bool:
        return self._request("HEAD", f"/v2/{repo}/blobs/{digest}").status == 200

    def _upload(self, tar: tarfile.TarFile, repo: str, blob: Blob, others: Iterable[str]) -> None:
        if self._has(repo, blob.digest):
            return
        for other in others:  # a blob another repository has: mounted, not sent
            r = self._request("POST", f"/v2/{repo}/blobs/uploads/?mount={blob.digest}&from={other}")
            if r.status == 201:
                return
        r = self._request("POST", f"/v2/{repo}/blobs/uploads/")
        location = r.getheader("Location")
        if r.status != 202 or not location:
            raise RegistryError(f"upload of {blob.digest} to {repo}: HTTP {r.status}")
        data = tar.extractfile(blob.member)
        assert data is not None
        sep = "&" if "?" in location else "?"
        r = self._request(
            "PUT",
            f"{location}{sep}digest={blob.digest}",
            body=data,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(blob.size)},
        )
        if r.status != 201:
            raise RegistryError(f"upload of {blob.digest} to {repo}: HTTP {r.status}")
        self.sent += blob.size

    def push(self, archive: Path, names: dict[str, list[str]]) -> None:
        """Each image of ``archive`` whose RepoTag is a key of ``names`` under each name listed
        there; an image ``names`` wants that the archive lacks is an error."""
        with tarfile.open(archive) as tar:
            images = {t: i for i in read_archive(tar) for t in i.tags}
            # docker writes Docker Hub's names short: docker.io/x/y:t as x/y:t
            images |= {f"docker.io/{t}": i for t, i in list(images.items())}
            missing = sorted(set(names) - set(images))
            if missing:
                raise RegistryError(f"{archive} lacks {', '.join(missing)}")
            pushed: list[str] = []
            for tag, refs in names.items():
                image = images[tag]
                for ref in refs:
                    repo, version = repository(ref)
                    for blob in (image.config, *image.layers):
                        self._upload(tar, repo, blob, pushed)
                    r = self._request("PUT", f"/v2/{repo}/manifests/{version}",
                                      body=image.manifest(),
                                      headers={"Content-Type": MANIFEST})  # fmt: skip
                    if r.status != 201:
                        raise RegistryError(f"manifest {ref}: HTTP {r.status}")
                    pushed.append(repo)

    def manifest(self, ref: str) -> tuple[str, dict[str, Any]]:
        """``ref``'s manifest: its digest and its content."""
        repo, version = repository(ref)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        conn.request("GET", f"/v2/{repo}/manifests/{version}", headers={"Accept": MANIFEST})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        if r.status != 200:
            raise RegistryError(f"manifest {ref}: HTTP {r.status}")
        return f"sha256:{hashlib.sha256(body).hexdigest()}", dict(json.loads(body))
