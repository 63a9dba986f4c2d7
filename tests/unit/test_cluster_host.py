"""The cluster tier's host checks (testbed.cluster.host) on trees of /proc, /sys and /dev made
here: each passes on a complete tree and fails with its one line when one piece is taken away;
and a component that dies at start is one line naming its log. The checks on this machine, and
the probes, run in the cluster tier (tests/cluster/test_host.py): they need root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from testbed.cluster import SYSCTLS, host

# This machine's (hybrid: v1 hierarchies on a tmpfs, cgroup2 beside them at unified/), with a
# read-only mount of its own below /proc/sys that the sysctls are not on.
MOUNTS = [
    "proc /proc proc rw,relatime 0 0",
    "sysfs /sys sysfs rw,relatime 0 0",
    "binfmt_misc /proc/sys/fs/binfmt_misc binfmt_misc ro,relatime 0 0",
    "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0",
    *(
        f"cgroup /sys/fs/cgroup/{s} cgroup rw,relatime,{s} 0 0"
        for s in ("cpu", "cpuacct", "cpuset", "memory", "devices", "pids")
    ),
    "cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0",
    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0",
]
FILESYSTEMS = "nodev\tsysfs\nnodev\tproc\nnodev\ttmpfs\n\text4\nnodev\toverlay\nnodev\tcgroup2\n"


def make_tree(root: Path, mounts: list[str] = MOUNTS) -> Path:
    (root / "proc").mkdir(parents=True)
    (root / "proc/mounts").write_text("".join(f"{m}\n" for m in mounts))
    (root / "proc/filesystems").write_text(FILESYSTEMS)
    (root / "proc/sys/net/bridge").mkdir(parents=True)
    (root / "proc/sys/net/bridge/bridge-nf-call-iptables").write_text("1\n")
    (root / "proc/sys/net/netfilter/nf_log").mkdir(parents=True)
    (root / "proc/sys/net/netfilter/nf_conntrack_max").write_text("262144\n")
    for name in SYSCTLS:
        f = root / "proc/sys" / name.replace(".", "/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("0\n")
    (root / "dev").mkdir()
    (root / "dev/kmsg").write_text("")
    return root


def check(root: Path) -> str | None:
    return host.tree_problem(SYSCTLS, root)


def test_a_complete_tree_passes(tmp_path: Path) -> None:
    assert check(make_tree(tmp_path)) is None


def test_systemds_co_mounted_cpu_and_cpuacct_pass(tmp_path: Path) -> None:
    mounts = [m for m in MOUNTS if "/cpu " not in m and "/cpuacct " not in m]
    mounts.append("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0")
    assert check(make_tree(tmp_path, mounts)) is None


def test_a_cgroup_v2_only_host_is_named_as_such(tmp_path: Path) -> None:
    root = make_tree(tmp_path, ["proc /proc proc rw 0 0", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0"])
    assert check(root) == (
        "cgroup v2 only (/sys/fs/cgroup is cgroup2): the cluster tier runs its kubelets on "
        "cgroup v1 hierarchies; run it on a host that mounts them (kernel command line "
        "systemd.unified_cgroup_hierarchy=0)"
    )


@pytest.mark.parametrize("subsystem", host.CGROUP_SUBSYSTEMS)
def test_each_cgroup_v1_hierarchy_the_kubelet_needs(tmp_path: Path, subsystem: str) -> None:
    root = make_tree(tmp_path, [m for m in MOUNTS if f"/{subsystem} " not in m])
    assert check(root) == (
        f"no cgroup v1 hierarchy for {subsystem} under /sys/fs/cgroup (the kubelet needs "
        f"cpu, cpuacct, cpuset, memory, pids): mount -t cgroup -o {subsystem} cgroup "
        f"/sys/fs/cgroup/{subsystem}"
    )


def test_a_hierarchy_outside_sys_fs_cgroup_does_not_count(tmp_path: Path) -> None:
    mounts = [m for m in MOUNTS if "/pids " not in m] + ["cgroup /mnt/pids cgroup rw,pids 0 0"]
    said = check(make_tree(tmp_path, mounts))
    assert said is not None and said.startswith("no cgroup v1 hierarchy for pids"), said


def test_a_read_only_hierarchy(tmp_path: Path) -> None:
    mounts = [m.replace("rw,", "ro,") if "/memory " in m else m for m in MOUNTS]
    assert check(make_tree(tmp_path, mounts)) == (
        "the cgroup v1 hierarchy for memory (/sys/fs/cgroup/memory) is mounted read-only: "
        "the kubelets make their cgroups there (in a container: --privileged)"
    )


def _no_overlay(root: Path) -> None:
    (root / "proc/filesystems").write_text(FILESYSTEMS.replace("nodev\toverlay\n", ""))


def _no_br_netfilter(root: Path) -> None:
    (root / "proc/sys/net/bridge/bridge-nf-call-iptables").unlink()
    (root / "proc/sys/net/bridge").rmdir()


def _no_conntrack(root: Path) -> None:  # netfilter's directory stays (nf_log has it)
    (root / "proc/sys/net/netfilter/nf_conntrack_max").unlink()


def _no_kmsg(root: Path) -> None:
    (root / "dev/kmsg").unlink()


def _no_keys(root: Path) -> None:
    (root / "proc/sys/kernel/keys/root_maxkeys").unlink()


def _read_only_proc_sys(root: Path) -> None:  # as an unprivileged Docker container has it
    with (root / "proc/mounts").open("a") as f:
        f.write("proc /proc/sys proc ro,nosuid,nodev,noexec,relatime 0 0\n")


@pytest.mark.parametrize(
    ("remove", "line"),
    [
        (_no_overlay, "no overlay filesystem in /proc/filesystems (containerd's snapshotter): "
         "modprobe overlay on the host"),
        (_no_br_netfilter, "no /proc/sys/net/bridge (br_netfilter not loaded: bridged pod "
         "traffic would skip kube-proxy's rules): modprobe br_netfilter on the host"),
        (_no_conntrack, "no /proc/sys/net/netfilter/nf_conntrack_max (netfilter conntrack, "
         "which kube-proxy's Service rules need): modprobe nf_conntrack on the host"),
        (_no_kmsg, "no /dev/kmsg (the kubelet's OOM watcher reads it and the kubelet exits "
         "without it): in a container, run it --privileged"),
        (_no_keys, "no /proc/sys/kernel/keys/root_maxkeys (the cluster sets "
         "kernel.keys.root_maxkeys): a kernel without it cannot run the tier"),
        (_read_only_proc_sys, "/proc/sys is read-only here (/proc/sys mounted ro; the cluster "
         "sets net.ipv4.ip_forward): in a container, run it --privileged"),
    ],
    ids=["overlay", "br_netfilter", "conntrack", "kmsg", "sysctl", "read-only-proc-sys"],
)  # fmt: skip
def test_each_piece_taken_away_is_named_in_one_line(
    tmp_path: Path, remove: Callable[[Path], None], line: str
) -> None:
    root = make_tree(tmp_path)
    assert check(root) is None
    remove(root)
    assert check(root) == line
    assert "\n" not in line


def test_a_mount_point_with_a_space_is_read_as_the_kernel_writes_it(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/mounts").write_text("cgroup /sys/fs/cgroup/my\\040pids cgroup rw,pids 0 0\n")
    assert host.mounts(tmp_path) == [
        host.Mount("/sys/fs/cgroup/my pids", "cgroup", frozenset({"rw", "pids"}))
    ]


# --- a component that dies at start -----------------------------------------------------------

KUBELET_DIED = """\
I1206 10:00:00.000000    4242 server.go:530] "Kubelet version" kubeletVersion="v1.37.2"
W1206 10:00:00.100000    4242 server.go:600] "cgroup v1 is deprecated"
E1206 10:00:00.200000    4242 run.go:72] "command failed" err="failed to run Kubelet: open /dev/kmsg: no such file or directory"
"""  # noqa: E501
PANIC = (
    "I1206 10:00:00.000000 1 server.go:1] starting\n"
    "panic: runtime error: invalid memory address or nil pointer dereference\n"
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x1]\n\n"
    + "".join(f"goroutine {i} [running]:\nk8s.io/kubernetes/pkg/x.f()\n\t/x.go:{i}\n"
              for i in range(200))
)  # fmt: skip


def test_the_reason_is_the_line_that_says_why() -> None:
    assert host.reason(KUBELET_DIED) == KUBELET_DIED.splitlines()[-1]
    assert host.reason(PANIC) == (
        "panic: runtime error: invalid memory address or nil pointer dereference"
    )
    assert host.reason("starting\nbind: address already in use\n") == (
        "bind: address already in use"
    )
    assert host.reason("") == "(its log is empty)"
    long = host.reason("Error: " + "x" * 1000)
    assert len(long) == host.LINE_MAX and long.endswith("...")


def test_a_component_that_exited_is_one_line_naming_its_log(tmp_path: Path) -> None:
    log = tmp_path / "kubelet-mpiwait-node-1.log"
    log.write_text(PANIC)
    said = host.exited("the nodes", "kubelet-mpiwait-node-1", log)
    assert said == (
        "the nodes: kubelet-mpiwait-node-1 exited: panic: runtime error: invalid memory "
        f"address or nil pointer dereference (its log: {log})"
    )
    assert len(PANIC) > 10_000 and "\n" not in said
    gone = host.exited("etcd", "etcd", tmp_path / "none.log")
    assert gone == f"etcd: etcd exited: (its log is empty) (its log: {tmp_path / 'none.log'})"


def test_too_little_disk_is_one_line_naming_what_is_free_and_needed(tmp_path: Path) -> None:
    said = host.disk_problem(tmp_path / "not" / "made" / "yet", needed=10**18)
    assert said is not None and "\n" not in said
    assert str(tmp_path) in said and "1000000000 GB" in said


def test_enough_disk_is_no_problem(tmp_path: Path) -> None:
    assert host.disk_problem(tmp_path, needed=1) is None
