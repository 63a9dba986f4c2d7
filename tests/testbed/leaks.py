"""What a test session left behind: namespaces, links, mounts, processes, and the containers and
dockerd of the container tests (see conftest.py).

A session is checked at its end against a baseline taken at its start. Only what is this
session's counts, so that concurrent sessions on the same machine (and their live beds) are left
alone: namespaces and links named like a bed (``<prefix><base-36 owner pid>-<n>...``, the
convention of TestBed, ManyHosts and scripts/demo) whose owner is this process or is gone,
mounts under this session's directories, and processes whose command line points into this
session's temporary directory (and that share this process's root or descend from it: a session
run under chroot, as tests/pythons runs one, has a /tmp/pytest-of-root/pytest-0 of its own, whose
name the host's session may have as well) or that carry the tag of one of this process's beds or
engines (containers.Engine tags its containerd and dockerd; the shims and the containers'
processes are their descendants). A dockerd of ours still running is asked for its containers,
so they are named; mounts under the engines' shared data root (containers.CACHE) count as ours
while no dockerd of another session uses it; iptables rules count as ours when their comment
carries the tag of one of this process's engines (containers.RULE_TAG), so a host's own rules
and chains (a stock Docker's DOCKER* chains, its DROP policy) and other sessions' rules are left
alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import _sys, cluster, containers
from ._registry import teardown_by_id
from ._sys import BedError

BED_PREFIXES = ("mw", "mh", "md")  # TestBed, ManyHosts, scripts/demo (TestBed(prefix="md"))
# containers.Engine's tag (never a namespace or link name)
ENGINE_PREFIX = containers.ENGINE_PREFIX
_BED_NAME = re.compile(r"^([a-z]{2})([0-9a-z]+)-(\d+)[bvn]\d*$")


@dataclass(frozen=True)
class Baseline:
    names: frozenset[str]  # namespaces and links present when the session started
    mounts: frozenset[str]
    roots: tuple[str, ...]  # this session's directories (pytest's base temp dir)


@dataclass(frozen=True)
class Leftovers:
    beds: tuple[str, ...]  # bed ids (namespace/link name without the [bvn]<i> tail)
    names: tuple[str, ...]
    mounts: tuple[str, ...]
    pids: tuple[tuple[int, str], ...]  # (pid, command line)
    containers: tuple[str, ...] = ()  # "name (image)" of a leaked dockerd's containers
    rules: tuple[str, ...] = ()  # `iptables -S` lines ("-A CHAIN ...") of this session's engines
    cluster: tuple[str, ...] = ()  # a test cluster's host state: "link X", "netns X", "cgroup P"

    def describe(self) -> list[str]:
        out = [f"container {c}" for c in self.containers]
        out += [f"cluster {c}" for c in self.cluster]
        out += [f"iptables rule {r}" for r in self.rules]
        out += [f"namespace or link {n}" for n in self.names]
        out += [f"mount {m}" for m in self.mounts]
        out += [f"process {pid}: {cmd}" for pid, cmd in self.pids]
        return out


def _names() -> set[str]:
    if os.geteuid() != 0:
        return set()
    try:
        return set(_sys.list_ns()) | set(_sys.list_links())
    except BedError:
        return set()


def _mounts() -> set[str]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    # field 5 is the mount point, with spaces and the like escaped as \040 etc.
    return {line.split()[4] for line in lines if len(line.split()) > 4}


def iptables_rules() -> list[str]:
    """The filter table as `iptables -S` lists it (chains, policies, rules); [] where it cannot
    be read (not root, no iptables)."""
    try:
        p = subprocess.run(
            ["iptables", "-w", "-S"], capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return p.stdout.splitlines() if p.returncode == 0 else []


def engine_rules(tag: str) -> list[str]:
    """The rules whose comment starts with containers.RULE_TAG + ``tag`` (an engine's tag, or
    the prefix of all of one process's engines)."""
    mark = f'"{containers.RULE_TAG}{tag}'
    plain = f" {containers.RULE_TAG}{tag}"  # iptables quotes a comment only when it must
    return [r for r in iptables_rules() if r.startswith("-A ") and (mark in r or plain in r)]


def baseline(roots: Sequence[Path]) -> Baseline:
    return Baseline(frozenset(_names()), frozenset(_mounts()), tuple(str(r) for r in roots))


def _b36(n: int) -> str:
    return _sys.b36(n)


def _ours(name: str, me: int) -> str | None:
    """The bed id of a namespace/link of this session (owner is us, or gone), else None."""
    m = _BED_NAME.match(name)
    if not m or m.group(1) not in BED_PREFIXES:
        return None
    try:
        owner = int(m.group(2), 36)
    except ValueError:
        return None
    if owner != me and Path(f"/proc/{owner}").exists():
        return None  # a live bed of another process (a concurrent session)
    return f"{m.group(1)}{m.group(2)}-{m.group(3)}"


def _proc_cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    if state == "Z" or not raw:
        return None
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def _root_of(pid: int) -> tuple[int, int] | None:
    """The (device, inode) of ``pid``'s root directory, None if it cannot be read."""
    try:
        st = os.stat(f"/proc/{pid}/root")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _proc_tagged(pid: int, tags: Sequence[bytes]) -> bool:
    try:
        env = b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(t in env for t in tags)


def find(base: Baseline, me: int | None = None) -> Leftovers:
    me = os.getpid() if me is None else me
    names = sorted(n for n in _names() - base.names if _ours(n, me))
    beds = sorted({b for n in names if (b := _ours(n, me))})
    roots = [r.rstrip("/") + "/" for r in base.roots]
    tags = [
        f"\0{_sys.ENV_TAG}={p}{_b36(me)}-".encode()
        for p in (*BED_PREFIXES, ENGINE_PREFIX, cluster.CLUSTER_PREFIX)
    ]
    tags += [f"\0{_sys.ENV_TAG}={b}".encode() for b in beds]
    protected = _sys.ancestors()
    my_root = _root_of(os.getpid())
    mine = set(_descendants({me}))  # what it started in roots of their own (Release.run)
    pids = []
    running: list[str] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in protected:
            continue
        pid = int(entry.name)
        cmd = _proc_cmdline(pid)
        if cmd is None:
            continue
        by_path = any(r in cmd + "/" for r in roots) and (pid in mine or _root_of(pid) == my_root)
        if by_path or _proc_tagged(pid, tags):
            pids.append((pid, cmd[:300]))
            running += _containers_of(cmd)  # the whole command line: --host may come late
    pids += [(pid, _proc_cmdline(pid) or "?") for pid in _descendants({p for p, _ in pids})]
    mount_roots = list(roots)
    if not _foreign_dockerd(tags, protected):
        mount_roots.append(str(containers.CACHE).rstrip("/") + "/")
    mounts = sorted(
        m for m in _mounts() - base.mounts if any((m + "/").startswith(r) for r in mount_roots)
    )
    rules = []
    if os.geteuid() == 0:
        for prefix in (ENGINE_PREFIX, cluster.CLUSTER_PREFIX):
            rules += engine_rules(f"{prefix}{_b36(me)}-")
    return Leftovers(
        tuple(beds), tuple(names), tuple(mounts), tuple(sorted(set(pids))), tuple(running),
        tuple(rules), tuple(_cluster_state(base, me)),
    )  # fmt: skip


def _cluster_state(base: Baseline, me: int) -> list[str]:
    """A test cluster's host state that testbed.cluster's Cluster.stop() removes: its cgroups
    (named with the owner's tag: this process's, or a dead owner's) and, unless another live
    process runs a cluster, the pods' bridge and network namespaces the session did not start
    with."""
    if os.geteuid() != 0:
        return []
    found = []
    prefix = f"{cluster.CGROUP_ROOT}-{cluster.CLUSTER_PREFIX}"
    for h in cluster.Cluster._cgroup_hierarchies():
        for d in sorted(h.glob(f"{prefix}*")):
            owner = d.name.removeprefix(prefix).split("-", 1)[0]
            with contextlib.suppress(ValueError):
                pid = int(owner, 36)
                if pid == me or not Path(f"/proc/{pid}").exists():
                    found.append(f"cgroup {d}")
    if not _foreign_cluster(me):
        now = _names() - base.names
        # the bridge, the nodes' veths (BRIDGE + v<i>) and namespaces (BRIDGE + n<i>)
        found += [f"link {n}" for n in sorted(now) if n.startswith(cluster.BRIDGE)]
        found += [f"netns {n}" for n in sorted(now) if n.startswith(("cni-", cluster.BRIDGE))]
    return found


def _foreign_cluster(me: int) -> bool:
    """Whether a live process other than ``me`` runs a test cluster (its kubelet is tagged)."""
    mine = f"{_sys.ENV_TAG}={cluster.CLUSTER_PREFIX}{_b36(me)}-".encode()
    theirs = f"\0{_sys.ENV_TAG}={cluster.CLUSTER_PREFIX}".encode()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _proc_tagged(int(entry.name), [theirs]):
            with contextlib.suppress(OSError):
                if mine not in Path(f"/proc/{entry.name}/environ").read_bytes():
                    return True
    return False


def _foreign_dockerd(tags: Sequence[bytes], protected: set[int]) -> bool:
    """Whether a dockerd that is not this session's runs (its mounts under the cache are its)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in protected:
            continue
        cmd = _proc_cmdline(int(entry.name))
        dockerd = cmd is not None and cmd.split(" ", 1)[0].endswith("dockerd")
        if dockerd and not _proc_tagged(int(entry.name), tags):
            return True
    return False


def _containers_of(cmd: str) -> list[str]:
    """The containers a (leaked) dockerd still holds, as "name (image)"; [] for anything else."""
    argv = cmd.split(" ")
    if not argv[0].endswith("dockerd") or "--host" not in argv[:-1]:
        return []
    host = argv[argv.index("--host") + 1]
    try:
        p = subprocess.run(
            ["docker", "-H", host, "ps", "-a", "--format", "{{.Names}} ({{.Image}})"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return p.stdout.split("\n")[:-1] if p.returncode == 0 else []


def _descendants(roots: set[int]) -> list[int]:
    """Children of ``roots``, theirs, and so on (a leaked shell's `sleep` names no tmp dir)."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry.name}/stat").read_text()
                parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        frontier = {c for c, p in parent.items() if p in frontier and c not in found} - roots
        found |= frontier
    return sorted(found)


def clean(left: Leftovers) -> None:
    """Remove what ``find`` found: processes first, then mounts, then beds."""
    for _ in range(3):
        if not _sys.kill_pids([pid for pid, _ in left.pids], signal.SIGKILL):
            break
        time.sleep(0.05)
    for rule in left.rules:  # "-A CHAIN spec" -> "-D CHAIN spec"
        argv = ["iptables", "-w", "-D", *shlex.split(rule)[1:]]
        subprocess.run(argv, capture_output=True, timeout=60, check=False)
    for m in sorted(left.mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=30, check=False)
    for item in left.cluster:
        kind, what = item.split(" ", 1)
        if kind == "link":
            subprocess.run(["ip", "link", "delete", what], capture_output=True, check=False)
        elif kind == "netns":
            subprocess.run(["ip", "netns", "delete", what], capture_output=True, check=False)
        else:
            for d in sorted((p for p in Path(what).rglob("*") if p.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                Path(what).rmdir()
    if left.beds and os.geteuid() == 0:
        with _sys.global_lock():
            for bed_id in left.beds:
                with contextlib.suppress(BedError, OSError):
                    teardown_by_id(bed_id)
