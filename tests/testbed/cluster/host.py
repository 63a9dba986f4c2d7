"""What the cluster tier needs from the host's kernel and mounts, checked before anything starts,
so that a host it cannot run on gets one line naming what is missing and what to do, not a
kubelet's stack trace. ``problem(sysctls)`` is the whole check; each part takes the root of the
``/proc``, ``/sys`` and ``/dev`` it reads, so the tests can hand it a tree of their own.

The file checks only read. The probes make a bridge, a veth pair and a tbf qdisc in a network
namespace of their own that vanishes with the probing process: nothing is left on the host but
the kernel modules loaded on demand, which the cluster would load anyway.

``disk_problem(path, needed)``: too little free space for the nodes' image stores.

Also ``exited(what, name, log)``: the one line for a component that died while the cluster
started, naming its log instead of quoting it.

Stdlib only; importable without pytest."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/")
CGROUP = "/sys/fs/cgroup"
# The kubelet on cgroup v1: validateSystemRequirements refuses to start without cpu, cpuacct,
# cpuset and memory mounted, and its cgroup manager without pids (pod PID limits, always on).
CGROUP_SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: frozenset[str]


def mounts(root: Path = ROOT) -> list[Mount]:
    """``root``'s /proc/mounts, in order (a later mount over the same point hides the earlier)."""
    out = []
    for line in (root / "proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
            out.append(Mount(point, fields[2], frozenset(fields[3].split(","))))
    return out


def _mount_of(path: str, table: Sequence[Mount]) -> Mount | None:
    """The mount ``path`` is on: the last of the longest mount points above it."""
    best: Mount | None = None
    for m in table:
        above = path == m.point or path.startswith(m.point.rstrip("/") + "/")
        if above and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def cgroup_problem(root: Path = ROOT) -> str | None:
    table = mounts(root)
    top = _mount_of(CGROUP, table)
    if top is not None and top.fstype == "cgroup2":
        # The kubelet would run in v2 mode, and Cluster makes and removes its cgroups per v1
        # hierarchy (its cgroupRoot in each): on v2 it would neither delegate nor clean up.
        return (
            f"cgroup v2 only ({CGROUP} is cgroup2): the cluster tier runs its kubelets on "
            "cgroup v1 hierarchies; run it on a host that mounts them (kernel command line "
            "systemd.unified_cgroup_hierarchy=0)"
        )
    for subsystem in CGROUP_SUBSYSTEMS:
        found = [
            m
            for m in table
            if m.fstype == "cgroup" and subsystem in m.options and m.point.startswith(CGROUP + "/")
        ]
        if not found:
            return (
                f"no cgroup v1 hierarchy for {subsystem} under {CGROUP} (the kubelet needs "
                f"{', '.join(CGROUP_SUBSYSTEMS)}): mount -t cgroup -o {subsystem} cgroup "
                f"{CGROUP}/{subsystem}"
            )
        if all("ro" in m.options for m in found):
            return (
                f"the cgroup v1 hierarchy for {subsystem} ({found[-1].point}) is mounted "
                "read-only: the kubelets make their cgroups there (in a container: --privileged)"
            )
    return None


def overlay_problem(root: Path = ROOT) -> str | None:
    if "\toverlay\n" not in (root / "proc/filesystems").read_text():
        return (
            "no overlay filesystem in /proc/filesystems (containerd's snapshotter): "
            "modprobe overlay on the host"
        )
    return None


def br_netfilter_problem(root: Path = ROOT) -> str | None:
    # Without it, pod-to-Service traffic bridged between two pods of a node skips kube-proxy's
    # rules (kube-proxy only warns: "proxy may not work as intended").
    if not (root / "proc/sys/net/bridge").is_dir():
        return (
            "no /proc/sys/net/bridge (br_netfilter not loaded: bridged pod traffic would "
            "skip kube-proxy's rules): modprobe br_netfilter on the host"
        )
    return None


def conntrack_problem(root: Path = ROOT) -> str | None:
    # /proc/sys/net/netfilter exists with netfilter alone (nf_log); the table is conntrack's.
    if not (root / "proc/sys/net/netfilter/nf_conntrack_max").is_file():
        return (
            "no /proc/sys/net/netfilter/nf_conntrack_max (netfilter conntrack, which kube-proxy's "
            "Service rules need): modprobe nf_conntrack on the host"
        )
    return None


def kmsg_problem(root: Path = ROOT) -> str | None:
    # The kubelet's OOM watcher opens it at start; without it the kubelet exits.
    if not (root / "dev/kmsg").exists():
        return (
            "no /dev/kmsg (the kubelet's OOM watcher reads it and the kubelet exits without "
            "it): in a container, run it --privileged"
        )
    return None


def sysctl_problem(sysctls: Sequence[str], root: Path = ROOT) -> str | None:
    """``sysctls`` (dotted names) present and on a writable mount: the cluster and its
    kubelets set them."""
    table = mounts(root)
    for name in sysctls:
        rel = "proc/sys/" + name.replace(".", "/")
        if not (root / rel).is_file():
            return f"no /{rel} (the cluster sets {name}): a kernel without it cannot run the tier"
        on = _mount_of("/" + rel, table)
        if on is not None and "ro" in on.options:
            return (
                f"/proc/sys is read-only here ({on.point} mounted ro; the cluster sets {name}): "
                "in a container, run it --privileged"
            )
    return None


def tree_problem(sysctls: Sequence[str], root: Path = ROOT) -> str | None:
    """The first of the file checks that fails, or None."""
    return (
        cgroup_problem(root)
        or overlay_problem(root)
        or br_netfilter_problem(root)
        or conntrack_problem(root)
        or kmsg_problem(root)
        or sysctl_problem(sysctls, root)
    )


@dataclass(frozen=True)
class Probe:
    """``command`` (words, no quoting) run in a network namespace of its own (``unshare
    --net``): it fails, and the tier cannot make ``what``; ``fix`` says what to do."""

    what: str
    command: str
    fix: str


PROBES = (
    Probe(
        "a network namespace",
        "true",
        "run as root where namespaces are allowed (in a container: --privileged)",
    ),
    Probe("a bridge", "ip link add mwprobe0 type bridge", "modprobe bridge"),
    Probe(
        "a veth pair",
        "ip link add mwprobe0 type veth peer name mwprobe1",
        "modprobe veth",
    ),
    Probe(
        "a tbf qdisc (a node's shaped link)",
        "tc qdisc add dev lo root tbf rate 1mbit burst 32kb latency 400ms",
        "modprobe sch_tbf",
    ),
)


def probe_problem(probes: Sequence[Probe] = PROBES) -> str | None:
    for p in probes:
        argv = ["unshare", "--net", *p.command.split()]
        try:
            cp = subprocess.run(
                argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"cannot make {p.what} ({' '.join(argv)}: {e}): {p.fix}"
        if cp.returncode != 0:
            said = last_line(cp.stderr) or f"exit {cp.returncode}"
            return f"cannot make {p.what} ({p.command}: {said}): {p.fix}"
    return None


def disk_problem(path: Path, needed: int) -> str | None:
    """Fewer than ``needed`` bytes free where ``path`` is (its nearest existing parent): the
    nodes run without disk eviction, so a full disk would fail pods one by one instead."""
    while not path.exists():
        path = path.parent
    free = shutil.disk_usage(path).free
    if free < needed:
        return (
            f"{free / 1e9:.1f} GB free on the filesystem of {path}; the cluster's nodes need "
            f"{needed / 1e9:.0f} GB there: free some, or point TMPDIR at a larger disk"
        )
    return None


def problem(sysctls: Sequence[str], root: Path = ROOT) -> str | None:
    """Why the cluster tier cannot run on this host's kernel and mounts (one line), or None."""
    return tree_problem(sysctls, root) or probe_problem()


# A line that says why a Go program stopped: a panic, a fatal error, cobra's "Error:", or a klog
# line of severity E or F ("E1206 10:00:00.000000 123 file.go:1] ...").
_REASON = re.compile(r"^(panic: |fatal error: |Error: |[EF]\d{4} )")
LINE_MAX = 300


def last_line(text: str) -> str:
    """The last line of ``text`` that is not blank, stripped ("" if none)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def reason(log_text: str) -> str:
    """The line of a component's log that says why it stopped (the last that looks like it,
    else the last line), cut to ``LINE_MAX`` characters."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    found = [line for line in lines if _REASON.match(line)]
    said = (found or lines or ["(its log is empty)"])[-1]
    return said if len(said) <= LINE_MAX else said[: LINE_MAX - 3] + "..."


def exited(what: str, name: str, log: Path) -> str:
    """One line for ``name`` having exited while waiting for ``what``: why, and where its whole
    log is (a kubelet's last words can be kilobytes of stack)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return f"{what}: {name} exited: {reason(text)} (its log: {log})"
