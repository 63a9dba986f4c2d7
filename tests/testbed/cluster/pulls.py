"""Real image pulls on the test cluster: a node made to lack images and to pull them over a link
shaped so that the pull takes about as long as a test asks (``pulling``), and what the kubelet
said about each pull (``pulls``, from the pod's events)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from . import Cluster, images
from .mpijob import Jobs, stamp
from .node import Node

PULL_SECONDS = 25  # the worker pull: a real 20-30 s


@contextlib.contextmanager
def pulling(
    cluster: Cluster, nodes: Sequence[Node], tier_images: Sequence[str],
    seconds: float = PULL_SECONDS,
) -> Iterator[dict[str, float]]:  # fmt: skip
    """``nodes`` lack ``tier_images`` (under every name the registry serves them) and receive at
    a rate that makes fetching what they lack take ``seconds``; yields node name -> Mbit/s.
    Afterwards the links are unlimited and the images back (the tier's state for the next
    test)."""
    names = images.pushes()
    refs = [r for t in tier_images for r in names[t]]
    rates: dict[str, float] = {}
    try:
        for n in nodes:
            cluster.forget(n, refs)
            rates[n.name] = max(cluster.missing_bytes(n, refs) * 8 / seconds / 1e6, 1.0)
            cluster.shape(n, rates[n.name])
        yield rates
    finally:
        for n in nodes:
            cluster.shape(n, None)
        for n in nodes:
            cluster.preload(n, refs)


@dataclass(frozen=True)
class Pull:
    image: str
    seconds: float | None  # None: "already present on machine"
    at: float  # when the kubelet said it (the event's time), Unix time


def pulls(jobs: Jobs, pod: str) -> list[Pull]:
    """The kubelet's word on each image of ``pod``: pulled in so many seconds, or present."""
    events = jobs.get("events", "--field-selector", f"involvedObject.name={pod}")["items"]
    out = []
    for e in events:
        msg = e.get("message", "")
        if e.get("reason") != "Pulled":
            continue
        at = stamp(e.get("lastTimestamp") or e.get("eventTime"))
        took = re.search(r'Successfully pulled image "([^"]+)" in ([\d.]+)(ms|s)', msg)
        present = re.search(r'image "([^"]+)" already present on machine', msg)
        if took:
            value = float(took.group(2)) / (1000 if took.group(3) == "ms" else 1)
            out.append(Pull(took.group(1), value, at))
        elif present:
            out.append(Pull(present.group(1), None, at))
    return out
