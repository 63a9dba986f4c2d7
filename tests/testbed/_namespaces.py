"""Network namespaces joined to the root namespace by a veth pair each (the worker end is
``eth0``): whether they can be made here, making them (onto a bridge or with an address of
their own on the root end), removing them with every process inside, and the up()/down()
lifecycle every namespace lab shares."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

from ._sys import BedError, kill_pids, list_ns, netns_pids, sh, tagged_pids

SSHD = "/usr/sbin/sshd"
_Lab = TypeVar("_Lab", bound="NamespaceLab")


@cache
def missing_requirements() -> str | None:
    """Why a namespace lab cannot run here (a sentence), or None when it can. Cached."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, bind mounts, sshd)"
    for tool in ("ip", "unshare", "setpriv", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} not found (install openssh-server)"
    try:
        cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
        if cp.returncode != 0:
            return f"`ip netns` does not work: {cp.stderr.strip()}"
        cp = subprocess.run(
            ["unshare", "-n", "-m", "--propagation", "private", "true"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if cp.returncode != 0:
            return f"cannot create namespaces: {cp.stderr.strip()}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"namespace probe failed: {e}"
    return None


class NamespaceLab:
    """The lifecycle of a lab of namespaces: a context manager, or up() and down()."""

    _is_up = False

    def up(self) -> None:
        """Create everything; on any failure, tear down what was made and raise BedError."""
        if self._is_up:
            return
        problem = missing_requirements()
        if problem:
            raise BedError(f"test bed unavailable: {problem}")
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        self._is_up = True

    def _up(self) -> None:
        raise NotImplementedError

    def down(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Lab) -> _Lab:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


@dataclass(frozen=True)
class Netns:
    ns: str
    veth: str  # root end of the pair
    cidrs: tuple[str, ...]  # addresses (with prefix length) of eth0 inside


def add_bridge(bridge: str, cidr: str) -> None:
    sh(
        ["ip", "-batch", "-"],
        input=(
            f"link add {bridge} type bridge\n"
            f"link set dev {bridge} addrgenmode none\n"
            f"addr add {cidr} dev {bridge}\n"
            f"link set {bridge} up\n"
        ),
    )


def add_namespaces(
    spaces: Iterable[Netns], *, bridge: str | None = None, root_cidr: str | None = None
) -> None:
    """Make each namespace and its veth pair; the root end joins ``bridge`` or gets
    ``root_cidr``. Inside: lo and eth0 up, eth0 with the namespace's addresses. No routes
    beyond the link's own subnet."""
    spaces = list(spaces)
    batch = []
    for s in spaces:
        batch += [
            f"netns add {s.ns}",
            f"link add {s.veth} type veth peer name eth0 netns {s.ns}",
            f"link set dev {s.veth} addrgenmode none",
        ]
        if root_cidr is not None:
            batch.append(f"addr add {root_cidr} dev {s.veth}")
        batch.append(f"link set {s.veth} master {bridge} up" if bridge else f"link set {s.veth} up")
    sh(["ip", "-batch", "-"], input="\n".join(batch) + "\n")
    for s in spaces:
        inside = ["link set lo up", "link set dev eth0 addrgenmode none"]
        inside += [f"addr add {c} dev eth0" for c in s.cidrs]
        inside.append("link set eth0 up")
        sh(["ip", "-n", s.ns, "-batch", "-"], input="\n".join(inside) + "\n")


def remove_namespaces(ns_names: Sequence[str], links: Sequence[str], *, tag: str) -> None:
    """Kill what runs in the namespaces or carries ``tag``, then delete the links (veths first,
    each taking its peer along; bridges, named ``...b``, last) and the namespaces."""
    present = set(list_ns())
    for _ in range(3):  # processes can fork while we kill; repeat until quiet
        pids = [p for ns in ns_names if ns in present for p in netns_pids(ns)] + tagged_pids(tag)
        if not kill_pids(pids):
            break
        time.sleep(0.05)
    batch = [f"link del {ln}" for ln in sorted(links, key=lambda s: s.endswith("b"))]
    batch += [f"netns del {ns}" for ns in ns_names]
    if batch:
        sh(["ip", "-force", "-batch", "-"], input="\n".join(batch) + "\n", check=False)
