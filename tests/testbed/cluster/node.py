"""One node of the test cluster: its addresses and names, and the configuration of what runs on
it (containerd, the CNI bridge, the kubelet, kube-proxy). Pure values and text; the Cluster
(``__init__.py``) makes the namespaces and runs the processes.

Node ``i`` (1-based) lives in the network namespace ``<BRIDGE>n<i>``: its ``eth0`` at
``10.88.0.<10+i>`` on the host's bridge (where the control plane, CoreDNS and the registry
listen, at ``CONTROL_IP``), its pods on a bridge of its own in ``10.88.<i>.0/24``. The host
routes each node's pod subnet to that node; a node routes the rest of ``POD_CIDR`` to the host,
and nothing else (no default route: no packet of a pod leaves the test bed)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "mwk8s0"
CONTROL_IP = "10.88.0.1"
POD_CIDR = "10.88.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
DNS_IP = "10.96.0.10"  # the kube-dns Service, as kubeadm numbers it
API_PORT = 6443
REGISTRY = f"{CONTROL_IP}:5000"
CNI_BIN = "/usr/lib/cni"
PAUSE_IMAGE = f"{REGISTRY}/mpiwait-tests/pause:1"
ROLE_LABEL = "mpiwait.test/role"  # "launcher" on node 1, "worker" on the others
MAX_NODES = 20


@dataclass(frozen=True)
class Node:
    index: int  # 1-based

    def __post_init__(self) -> None:
        if not 1 <= self.index <= MAX_NODES:
            raise ValueError(f"node index 1..{MAX_NODES}, not {self.index}")

    @property
    def name(self) -> str:
        return f"mpiwait-node-{self.index}"

    @property
    def ip(self) -> str:
        return f"10.88.0.{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.88.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.88.{self.index}.1"

    @property
    def netns(self) -> str:
        return f"{BRIDGE}n{self.index}"

    @property
    def veth(self) -> str:  # the host's end: shaping it shapes what the node receives
        return f"{BRIDGE}v{self.index}"

    @property
    def role(self) -> str:
        return "launcher" if self.index == 1 else "worker"


def nodes(count: int) -> tuple[Node, ...]:
    if count < 1:
        raise ValueError(f"a cluster has at least one node, not {count}")
    return tuple(Node(i) for i in range(1, count + 1))


def cni_conflist(node: Node, ipam_dir: Path) -> str:
    return json.dumps({
        "cniVersion": "1.0.0", "name": "mpiwait-pods",
        "plugins": [{
            "type": "bridge", "bridge": "cbr0", "isGateway": True, "ipMasq": False,
            "hairpinMode": True,
            "ipam": {"type": "host-local",
                     "ranges": [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]],
                     # all through the node: Services are rewritten there, the rest of the
                     # pods' network routed, anything else unreachable
                     "routes": [{"dst": "0.0.0.0/0"}],
                     "dataDir": str(ipam_dir)},
        }],
    })  # fmt: skip


def registry_hosts_toml() -> str:
    """containerd's hosts.toml for the registry: plain HTTP, and nowhere else to go."""
    return (
        f'server = "http://{REGISTRY}"\n'
        f'[host."http://{REGISTRY}"]\n  capabilities = ["pull", "resolve"]\n'
    )


def containerd_toml(root: Path, sock: Path, cni_dir: Path, hosts_dir: Path) -> str:
    return (
        "version = 2\n"
        f'root = "{root}/root"\nstate = "{root}/state"\n'
        f'[grpc]\n  address = "{sock}"\n'
        f'[ttrpc]\n  address = "{sock}.ttrpc"\n'
        '[debug]\n  address = ""\n[metrics]\n  address = ""\n'
        '[plugins."io.containerd.grpc.v1.cri"]\n'
        f'  sandbox_image = "{PAUSE_IMAGE}"\n'
        "  enable_selinux = false\n"
        # This machine withholds CAP_SYS_RESOURCE even from root: the kubelet's -998 for the
        # sandbox (and -997 for Guaranteed pods) cannot be set; containerd clamps them.
        "  restrict_oom_score_adj = true\n"
        '  [plugins."io.containerd.grpc.v1.cri".containerd]\n'
        '    snapshotter = "overlayfs"\n    default_runtime_name = "runc"\n'
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '      runtime_type = "io.containerd.runc.v2"\n'
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "        SystemdCgroup = false\n"
        # runc's state in the node's own state directory, not /run/containerd/runc/k8s.io
        f'        Root = "{root}/state/runc"\n'
        '  [plugins."io.containerd.grpc.v1.cri".cni]\n'
        f'    bin_dir = "{CNI_BIN}"\n    conf_dir = "{cni_dir}"\n'
        '  [plugins."io.containerd.grpc.v1.cri".registry]\n'
        f'    config_path = "{hosts_dir}"\n'
    )


def kubelet_config(node: Node, cgroup_root: str, sock: Path, resolv: Path, logs: Path) -> str:
    """``logs``: the node's own pod log directory. In the shared /var/log/pods each kubelet's
    garbage collector would delete the other nodes' pods' logs as those of pods it lacks."""
    return json.dumps({
        "podLogsDir": str(logs),
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{sock}",
        "address": node.ip, "port": 10250, "healthzPort": 0, "readOnlyPort": 0,
        "clusterDomain": "cluster.local", "clusterDNS": [DNS_IP], "resolvConf": str(resolv),
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        # No disk eviction (as kind runs its nodes): the nodes share the host's disk, so one
        # test's peak would evict every node's pods; Cluster.start checks the free space.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "0%",
                         "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
        # Image GC off: a node keeps what it pulled until a test forgets it on purpose.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "registerNode": True,
        "maxPods": 110, "podPidsLimit": -1,
        "syncFrequency": "10s", "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "4s", "shutdownGracePeriod": "0s",
    })  # fmt: skip


def kube_proxy_config(node: Node, kubeconfig: Path) -> str:
    """iptables mode, as most clusters run it; nothing it would change outside the node's
    network namespace (the conntrack table's size is the host's, left alone)."""
    return json.dumps({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name, "bindAddress": node.ip, "clusterCIDR": POD_CIDR,
        "mode": "iptables",
        "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {"maxPerCore": 0, "min": 0,
                      "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "syncPeriod": "10s", "minSyncPeriod": "0s"},
    })  # fmt: skip
