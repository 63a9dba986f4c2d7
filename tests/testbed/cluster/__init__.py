"""A real Kubernetes of several nodes with the real mpi-operator, for tests/cluster/.

``Cluster(workdir, bins, nodes=3)`` runs, as processes of this machine: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, distribution's registry, CoreDNS (the kubernetes plugin,
configured as kubeadm 1.37 does, or with ``dns="old-kubeadm"`` as kubeadm did before 1.32:
``cache 30`` over ``ttl 30``) and mpi-operator v0.8.2 with its own CRD, all on the control
plane's address; and for each node (node.py), in a network namespace of its own: a containerd
(Debian's, with runc and the CNI plugins; its own image store), a kubelet and kube-proxy
(iptables mode: pods reach CoreDNS through the kube-dns Service, 10.96.0.10). Node 1 is the
launchers' (label ``mpiwait.test/role=launcher``), the others the workers'. With
``trainer=True`` (or ``start_trainer()`` once started) also JobSet v0.11.1 and Kubeflow Trainer
v2.2.0, and with ``kueue=True`` (or ``start_kueue()``) Kueue v0.17.0 admitting MPIJobs: their
CRDs and webhooks as upstream's manifests have them, the controllers as upstream builds them,
their webhook servers on the control plane's address. The binaries are built from
upstream's Go modules by scripts/build-cluster (``bin_dir()``); the pin table is
tests/testbed/cluster/PINS.

What it does to the host, and undoes in ``stop()``:
- a bridge ``BRIDGE`` (10.88.0.1/24, the control plane's address), one network namespace and
  veth pair per node on it, a route per node to its pods' subnet, and one iptables ACCEPT rule
  for ``POD_CIDR`` in FORWARD (a stock Docker's DROP policy would drop pod traffic between
  nodes), tagged like containers.Engine's rules; ``shape()`` puts a tbf qdisc on a node's veth;
- ``ip_forward`` and the sysctls the kubelet rewrites (``vm.overcommit_memory``, ``kernel.panic``
  ...), restored to their values before;
- cgroups under ``/<CGROUP_ROOT>-<tag>/<node>`` in every v1 hierarchy (the kubelets'
  cgroupRoot; the tag names the test process that owns it, so a leak check finds only its own);
- each kubelet's root directory is a shared bind mount of itself (``/`` is private here);
- the pods' network namespaces and mounts, removed with the pods.
Name lookups stay inside: CoreDNS has no ``forward`` (names outside cluster.local fail), the
kubelets' resolvConf is an empty file, a node has no route out of the test bed, and images come
from the cluster's registry only (images.py pushes them; containerd knows no other host).

Stdlib only; importable without pytest. Needs root, Go (for scripts/build-cluster), Debian's
containerd, runc, containernetworking-plugins, openssl, iptables and iproute2's tc.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._namespaces import Netns, add_bridge, add_namespaces, remove_namespaces
from .._sys import ENV_TAG, b36, kill_group, list_ns, root_and_tools, spawn, unmount_below
from ..containers import RULE_TAG
from . import host
from . import node as nodes_
from .node import (
    API_PORT,
    BRIDGE,
    CNI_BIN,
    CONTROL_IP,
    DNS_IP,
    POD_CIDR,
    REGISTRY,
    ROLE_LABEL,
    SERVICE_CIDR,
    Node,
)  # fmt: skip
from .registry import Pusher, config_yaml, zip_chain_ids

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CGROUP_ROOT = "mpiwait-k8s"  # + "-" + the cluster's tag + "/" + the node: a kubelet's cgroupRoot
CGROUP_V1 = Path("/sys/fs/cgroup")
ETCD_PORT, ETCD_PEER = 23790, 23800
NODES = 3  # the tier's: the launcher's node and two for the workers
RELOAD = "2s"  # CoreDNS's reload plugin: how often it checks its Corefile (minimum 2 s)
# JobSet's, Trainer's and Kueue's webhook servers (all 9443 upstream, each in its own pod) and
# health endpoints, on the host: one address, so a port each.
JOBSET_WEBHOOK, TRAINER_WEBHOOK, KUEUE_WEBHOOK = 9443, 9444, 9445
JOBSET_HEALTH, TRAINER_HEALTH, KUEUE_HEALTH = 18081, 18082, 18083
CERT_DIR = Path("/tmp/k8s-webhook-server")  # + /serving-certs: JobSet's and Trainer's, hard-coded
# One cluster at a time on a host (the bridge, its subnet and the ports are fixed): a second one
# waits for this lock instead of failing on an address in use.
LOCK = Path("/run/lock/mpiwait-test-cluster.lock")
# Free disk a start needs where its workdir is: the nodes' unpacked images and the tests' pulls
# (docs/testing.md, "The cluster tier's hosts").
DISK_NEEDED = 12 * 10**9
LOCK_WAIT = 3600.0
# The tag in a cluster's processes' environment and on its iptables rule (leaks.py looks for it).
CLUSTER_PREFIX = "kc"
TOOLS = ("containerd", "runc", "ctr", "openssl", "iptables", "ip", "mount", "nsenter", "tc")
SYSCTLS = (
    "net.ipv4.ip_forward",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)


class ClusterError(RuntimeError):
    pass


def missing_requirements() -> str | None:
    """Why a cluster cannot run here, or None."""
    need = "apt-get install containerd runc containernetworking-plugins openssl iptables"
    problem = root_and_tools("runs a kubelet and a containerd", TOOLS, need)
    if problem:
        return problem
    if not Path(CNI_BIN, "bridge").exists():
        return f"{CNI_BIN}/bridge not installed ({need})"
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        return "no Go toolchain (scripts/build-cluster builds the cluster from Go modules)"
    return host.problem(SYSCTLS)  # the kernel's and the mounts' part


def bin_dir(timeout: float = 3600) -> Path:
    """scripts/build-cluster's output (built on first use, then cached): bin/, the CRD, PINS."""
    p = subprocess.run(
        [str(REPO / "scripts/build-cluster")], stdout=subprocess.PIPE, stderr=None,
        text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if p.returncode != 0:
        raise ClusterError(f"scripts/build-cluster failed (exit {p.returncode})")
    return Path(p.stdout.strip().splitlines()[-1])


def _run(argv: Sequence[str], timeout: float = 120, check: bool = True, **kw: Any) -> str:
    p = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout,
        stdin=kw.pop("stdin", subprocess.DEVNULL), **kw,
    )  # fmt: skip
    if check and p.returncode != 0:
        raise ClusterError(
            f"{' '.join(map(str, argv))[:300]}: exit {p.returncode}: {p.stderr[-2000:]}"
        )
    return p.stdout


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def corefile(dns: str, kubeconfig: Path) -> str:
    """CoreDNS's configuration: kubeadm 1.37's (``cache 30`` with cluster.local's answers not
    cached, ``ttl 30``), or ``old-kubeadm``'s (plain ``cache 30``: a "no such name" for a worker
    is kept up to 30 s after its pod is Ready). Bound to the node's address; ``reload`` as
    kubeadm's, checked every ``RELOAD`` instead of 30 s so that ``Cluster.configure_dns`` (one
    cluster, both configurations) takes effect in seconds. Names outside the
    cluster's zones get "no such name" from a catch-all, as a cluster's upstream resolver would
    answer for a name like ``pi-worker-0.pi.default.svc.``: no query leaves the test bed."""
    if dns not in ("kubeadm", "old-kubeadm"):
        raise ValueError(f"dns: kubeadm or old-kubeadm, not {dns!r}")
    cache = (
        "    cache 30 {\n        disable success cluster.local\n"
        "        disable denial cluster.local\n    }\n"
        if dns == "kubeadm"
        else "    cache 30\n"
    )
    # log: one line a query, its client's address first (``Cluster.dns_queries_from``).
    return (
        f"cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{\n    bind {CONTROL_IP}\n    errors\n"
        f"    log\n"
        f"    health 127.0.0.1:18080\n"
        f"    kubernetes cluster.local in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n        pods insecure\n"
        f"        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }}\n"
        f"{cache}    loadbalance\n    reload {RELOAD}\n}}\n"
        f".:53 {{\n    bind {CONTROL_IP}\n    errors\n"
        "    template ANY ANY {\n        rcode NXDOMAIN\n    }\n}\n"
    )


def dns_answers(
    name: str, server: str = CONTROL_IP, timeout: float = 2.0
) -> tuple[int, int] | None:
    """(rcode, number of answers) of one A query for ``name`` to ``server``; None: no reply."""
    import socket
    import struct

    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    query = struct.pack(">HHHHHH", 0x4D57, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(query, (server, 53))
            reply = s.recv(512)
        except OSError:
            return None
    return reply[3] & 0x0F, struct.unpack(">H", reply[6:8])[0]


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


class Cluster:
    """``c = Cluster(workdir, bins); c.start(); c.kubectl("apply", "-f", ...); c.stop()``
    (``images.cluster_with_images`` does that with the tier's images imported). A Cluster made
    for a running cluster's workdir, never started, reaches it through ``kubectl``."""

    def __init__(
        self, workdir: Path, bins: Path, dns: str = "kubeadm", trainer: bool = False,
        kueue: bool = False, nodes: int = NODES, registry_storage: Path | None = None,
    ) -> None:  # fmt: skip
        self.workdir = workdir
        self.bins = bins
        self.dns = dns
        self.trainer = trainer
        self.kueue = kueue
        self.nodes = nodes_.nodes(nodes)
        self.registry_storage = registry_storage or workdir / "registry"
        self.tag = f"{CLUSTER_PREFIX}{b36(os.getpid())}-{id(self):x}"
        self._procs: dict[str, subprocess.Popen[Any]] = {}
        self._sysctls: dict[str, str] = {}
        self._rules: list[list[str]] = []
        self._netns_before: set[str] = set()
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.logs = workdir / "logs"
        self.cgroup_root = f"{CGROUP_ROOT}-{self.tag}"
        self.started = 0.0
        self.timings: dict[str, float] = {}  # what bringing it up cost, for scripts/cluster
        self._lock: int | None = None
        self._made_cert_dir = False

    # --- start --------------------------------------------------------------------------------

    def start(self) -> None:
        t0 = time.monotonic()
        self._take_lock()
        if time.monotonic() - t0 > 1:
            self.timings["waited for another cluster"] = time.monotonic() - t0
        t0 = time.monotonic()
        try:
            problem = host.disk_problem(self.workdir, DISK_NEEDED)
            if problem:
                raise ClusterError(problem)
            self._start()
        except BaseException:
            self.stop()
            raise
        self.started = time.monotonic() - t0
        self.timings["started"] = self.started

    def _take_lock(self) -> None:
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline, said = time.monotonic() + LOCK_WAIT, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise ClusterError(
                        f"another test cluster held {LOCK} for {LOCK_WAIT:.0f} s"
                    ) from None
                if not said:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                    print(f"waiting for the test cluster of pid {holder} to stop ({LOCK})",
                          flush=True)  # fmt: skip
                    said = True
                time.sleep(1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock = fd

    def node_dir(self, node: Node) -> Path:
        return self.workdir / "nodes" / node.name

    def ctr_sock(self, node: Node) -> Path:
        return self.node_dir(node) / "containerd/containerd.sock"

    def _start(self) -> None:
        for d in ("logs", "pki", "etcd", "registry-hosts"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        for n in self.nodes:
            for d in ("containerd", "cni", "kubelet", "kubelet-pki"):
                (self.node_dir(n) / d).mkdir(parents=True, exist_ok=True)
        self._netns_before = set(list_ns())
        self._host()
        self._pki()
        self._spawn("etcd", [
            "etcd", "--name", "k8s", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--advertise-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--listen-peer-urls", f"http://127.0.0.1:{ETCD_PEER}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{ETCD_PEER}",
            "--initial-cluster", f"k8s=http://127.0.0.1:{ETCD_PEER}",
            "--listen-metrics-urls", "", "--unsafe-no-fsync", "--log-level", "warn",
        ])  # fmt: skip
        pki = self.workdir / "pki"
        self._spawn("kube-apiserver", [
            "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            f"--secure-port={API_PORT}", f"--bind-address={CONTROL_IP}",
            f"--advertise-address={CONTROL_IP}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
            f"--token-auth-file={pki}/tokens.csv",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki}/sa.pub",
            f"--service-account-signing-key-file={pki}/sa.key",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--kubelet-preferred-address-types=InternalIP", "--profiling=false",
            "--enable-priority-and-fairness=false", "--v=1",
            # Webhooks served on the host (JobSet's, Trainer's) are reached through their
            # Services' EndpointSlices: kube-proxy runs in the nodes, not on the host.
            "--enable-aggregator-routing=true",
            # MutatingAdmissionPolicy is v1 here; v1beta1 too, for deploy/'s 1.34-1.35 variant.
            "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
        ])  # fmt: skip
        self._wait("the apiserver", lambda: self.kubectl("get", "--raw", "/readyz", check=False)
                   .returncode == 0, 120)  # fmt: skip
        self._spawn("kube-controller-manager", [
            "kube-controller-manager", f"--kubeconfig={self.workdir}/kcm.kubeconfig",
            "--use-service-account-credentials",
            f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
            "--controllers=*,-node-ipam-controller", "--v=1",
        ])  # fmt: skip
        self._spawn("kube-scheduler", [
            "kube-scheduler", f"--kubeconfig={self.workdir}/sched.kubeconfig",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1",
        ])  # fmt: skip
        self._dns_service()
        registry = self._write("registry.yml", config_yaml(REGISTRY, self.registry_storage))
        self._spawn("registry", ["registry", "serve", str(registry)])
        for n in self.nodes:
            self._containerd(n)
        for n in self.nodes:
            self._kubelet(n)
            self._kube_proxy(n)
        self._spawn("coredns", [
            "coredns", "-conf", str(self._write("Corefile", corefile(self.dns, self.kubeconfig))),
        ])  # fmt: skip
        self._wait("CoreDNS answering for the cluster", lambda: dns_answers(
            "kubernetes.default.svc.cluster.local") == (0, 1), 60)  # fmt: skip
        crd = self.bins / "kubeflow.org_mpijobs.yaml"
        self.kubectl("create", "-f", str(crd))
        self.kubectl("create", "namespace", "mpi-operator")
        self._wait("the MPIJob CRD", lambda: self.kubectl(
            "get", "crd", "mpijobs.kubeflow.org", "-o",
            "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False,
        ).stdout == "True", 60)  # fmt: skip
        self._spawn("mpi-operator", [
            "mpi-operator", f"--kubeConfig={self.kubeconfig}", "--lock-namespace=mpi-operator",
            "-alsologtostderr",
        ])  # fmt: skip
        if self.trainer:
            self.start_trainer()
        if self.kueue:
            self.start_kueue()
        self._wait("the nodes", lambda: self.kubectl(
            "get", "nodes", "-o",
            "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}", check=False,
        ).stdout.split() == ["True"] * len(self.nodes), 180)  # fmt: skip
        self._wait("the registry", lambda: _http_ok(f"http://{REGISTRY}/v2/"), 30)
        self._wait("the default ServiceAccount", lambda: self.kubectl(
            "get", "serviceaccount", "default", check=False).returncode == 0, 60)  # fmt: skip

    def start_trainer(self) -> None:
        """JobSet and Kubeflow Trainer v2 as upstream's manifests install them, but run here
        (``_install_for_host``); each controller with the admin kubeconfig, its own cert rotator
        (which fills the Secret and the configurations' caBundle for <service>.<namespace>.svc,
        the name the apiserver checks) and a private ``CERT_DIR`` (both write their
        certificates below it, a path they hard-code)."""
        self.trainer = True
        # Trainer's base leaves namespaces to its overlay: kubeflow-system, as the overlay sets.
        docs = self._manifests("jobset-manifests.yaml", "jobset-system") + self._manifests(
            "trainer-manifests.yaml", "kubeflow-system"
        )
        for d in docs:
            if d["kind"].endswith("WebhookConfiguration"):
                for w in d["webhooks"]:
                    svc = w["clientConfig"]["service"]
                    if svc["namespace"] == "system":
                        svc["namespace"] = "kubeflow-system"
        self._install_for_host([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow-system"}},
            # The Trainer overlay's secretGenerator: the rotator fills a Secret, never makes one.
            {"apiVersion": "v1", "kind": "Secret", "metadata": {
                "name": "kubeflow-trainer-webhook-cert", "namespace": "kubeflow-system"}},
            *docs,
        ], {"jobset-system": JOBSET_WEBHOOK, "kubeflow-system": TRAINER_WEBHOOK})  # fmt: skip
        jobset = self._write("jobset-config.json", json.dumps({
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True},
            "webhook": {"port": JOBSET_WEBHOOK, "host": CONTROL_IP},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{JOBSET_HEALTH}"},
        }))  # fmt: skip
        trainer = self._write("trainer-config.json", json.dumps({
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{TRAINER_HEALTH}",
                       "readinessEndpointName": "readyz", "livenessEndpointName": "healthz"},
            "metrics": {"bindAddress": "0", "secureServing": False},
            "webhook": {"port": TRAINER_WEBHOOK, "host": CONTROL_IP},
            "leaderElection": {"leaderElect": False, "resourceName": "trainer.kubeflow.org",
                               "resourceNamespace": "", "leaseDuration": "15s",
                               "renewDeadline": "10s", "retryPeriod": "2s"},
            "certManagement": {"enable": True,
                               "webhookServiceName": "kubeflow-trainer-controller-manager",
                               "webhookSecretName": "kubeflow-trainer-webhook-cert"},
            "clientConnection": {"qps": 50, "burst": 100},
        }))  # fmt: skip
        # Each its own CERT_DIR (a tmpfs over it in a mount namespace of the controller's) with
        # serving-certs bound to a directory here, where _sync_certs plays the kubelet's part.
        if not CERT_DIR.exists():
            CERT_DIR.mkdir(parents=True)
            self._made_cert_dir = True
        private = (
            f"d=$1; shift; mount -t tmpfs -o size=1m tmpfs {CERT_DIR} && mkdir {CERT_DIR}/"
            f'serving-certs && mount --bind "$d" {CERT_DIR}/serving-certs && exec "$@"'
        )
        controllers = (("jobset", "jobset", jobset),
                       ("trainer", "trainer-controller-manager", trainer))  # fmt: skip
        for name, binary, config in controllers:
            self._spawn(name, [
                "unshare", "--mount", "--propagation", "private", "sh", "-c", private, "sh",
                str(self._cert_dir(name)), str(self.bins / "bin" / binary), f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
            ], bins=False)  # fmt: skip
        self._wait_webhooks("JobSet's and Trainer's webhooks", {
            "jobset": ("jobset-system", "jobset-webhook-server-cert", JOBSET_HEALTH),
            "trainer": ("kubeflow-system", "kubeflow-trainer-webhook-cert", TRAINER_HEALTH),
        })  # fmt: skip

    def start_kueue(self) -> None:
        """Kueue as upstream's manifests install it, but run here (``_install_for_host``), with
        the ``kubeflow.org/mpijob`` and ``batch/job`` integrations and
        ``manageJobsWithoutQueueName: false`` (jobs without the ``kueue.x-k8s.io/queue-name``
        label run as without Kueue); the
        manager with the admin kubeconfig and its internal cert management, its webhook on the
        control plane's address. Its visibility API (an aggregated apiserver, served by the
        manager) is off and its APIServices not installed: one nobody answered would stall
        discovery, and with it namespace deletion."""
        self.kueue = True
        self._install_for_host(self._manifests("kueue-manifests.yaml"),
                               {"kueue-system": KUEUE_WEBHOOK})  # fmt: skip
        config = self._write("kueue-config.json", json.dumps({
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": "kueue-system",
            "manageJobsWithoutQueueName": False,
            # batch/job too, as Kueue's default has it: its Job webhook is registered either
            # way, and without the integration it panics on every Job (the launchers' too).
            "integrations": {"frameworks": ["batch/job", "kubeflow.org/mpijob"]},
            "featureGates": {"VisibilityOnDemand": False},
            "internalCertManagement": {"enable": True,
                                       "webhookServiceName": "kueue-webhook-service",
                                       "webhookSecretName": "kueue-webhook-server-cert"},
            # Its cert dir is configurable: no private mount namespace, unlike JobSet's.
            "webhook": {"port": KUEUE_WEBHOOK, "host": CONTROL_IP,
                        "certDir": str(self._cert_dir("kueue"))},
            "leaderElection": {"leaderElect": False},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{KUEUE_HEALTH}"},
            "clientConnection": {"qps": 50, "burst": 100},
        }))  # fmt: skip
        self._spawn("kueue", ["kueue", f"--config={config}", f"--kubeconfig={self.kubeconfig}"])
        self._wait_webhooks("Kueue's webhooks", {
            "kueue": ("kueue-system", "kueue-webhook-server-cert", KUEUE_HEALTH),
        })  # fmt: skip

    def _manifests(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The objects of scripts/build-cluster's ``name`` (kustomized upstream manifests),
        those without a namespace given ``namespace``."""
        ns = ["-n", namespace] if namespace else []
        out = self.kubectl("create", "--dry-run=client", "--validate=false", "-o", "json", *ns,
                           "-f", str(self.bins / name)).stdout  # fmt: skip
        docs: list[dict[str, Any]] = []
        at = 0  # one JSON object per document, one after the other
        while out[at:].strip():
            doc, at = json.JSONDecoder().raw_decode(out, len(out) - len(out[at:].lstrip()))
            docs += doc["items"] if doc.get("kind") == "List" else [doc]
        return docs

    def _install_for_host(self, docs: list[dict[str, Any]], ports: dict[str, int]) -> None:
        """Create what of ``docs`` a controller run on the host needs: namespaces, CRDs, Secrets
        and webhook configurations as shipped, and each webhook's Service (admission and CRD
        conversion) without selector, its EndpointSlice naming the control plane's address at
        ``ports[namespace]``; then wait for the CRDs. The rest (Deployments, RBAC, ConfigMaps,
        APIServices, metrics Services) is left out: the controllers run here, with the admin
        kubeconfig and configurations of ours."""
        refs = [w["clientConfig"] for d in docs if d["kind"].endswith("WebhookConfiguration")
                for w in d["webhooks"]]  # fmt: skip
        refs += [
            d["spec"]["conversion"]["webhook"]["clientConfig"] for d in docs
            if d["kind"] == "CustomResourceDefinition"
            and d["spec"].get("conversion", {}).get("strategy") == "Webhook"
        ]  # fmt: skip
        services = {(r["service"]["namespace"], r["service"]["name"]) for r in refs}
        objs: list[dict[str, Any]] = []
        for d in docs:
            kind, meta = d["kind"], d["metadata"]
            if kind == "Service":
                ns = meta["namespace"]
                if (ns, meta["name"]) not in services:
                    continue  # a metrics Service: nothing scrapes here
                d["spec"].pop("selector", None)  # no pod behind it: the EndpointSlice below
                port = next(p for p in d["spec"]["ports"] if p["port"] == 443)
                objs.append({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": f"{meta['name']}-host", "namespace": ns, "labels": {
                        "kubernetes.io/service-name": meta["name"],
                        "endpointslice.kubernetes.io/managed-by": "mpiwait-tests"}},
                    "addressType": "IPv4",
                    "ports": [{"name": port.get("name", ""), "port": ports[ns],
                               "protocol": "TCP"}],
                    "endpoints": [{"addresses": [CONTROL_IP], "conditions": {"ready": True}}],
                })  # fmt: skip
            elif kind not in ("Namespace", "CustomResourceDefinition", "Secret") and (
                not kind.endswith("WebhookConfiguration")
            ):
                continue
            objs.append(d)
        self.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "List",
            "items": sorted(objs, key=lambda o: o["kind"] != "Namespace")}))  # fmt: skip
        crds = [f"crd/{o['metadata']['name']}" for o in objs
                if o["kind"] == "CustomResourceDefinition"]  # fmt: skip
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds, timeout=90)

    def _wait_webhooks(self, what: str, controllers: dict[str, tuple[str, str, int]]) -> None:
        """Wait until each controller (name: its Secret's namespace and name, its health port)
        says ready, playing the kubelet's part for its cert dir meanwhile (``_sync_certs``)."""

        def ready() -> bool:
            up = True
            for name, (ns, secret, port) in controllers.items():
                self._sync_certs(ns, secret, self._cert_dir(name))
                up = _http_ok(f"http://127.0.0.1:{port}/readyz") and up
            return up

        self._wait(what, ready, 180)
        for name, (ns, secret, _) in controllers.items():  # in case a rotator rewrote it
            self._sync_certs(ns, secret, self._cert_dir(name))

    def _cert_dir(self, name: str) -> Path:
        d = self.workdir / f"{name}-certs"
        d.mkdir(exist_ok=True)
        return d

    def _sync_certs(self, namespace: str, secret: str, dest: Path) -> None:
        """The Secret's keys as files in ``dest``, as the kubelet's Secret volume at the cert
        dir of upstream's Deployment: the cert rotator fills the Secret and waits for them."""
        p = self.kubectl("get", "secret", "-n", namespace, secret, "-o", "json", check=False)
        data = (json.loads(p.stdout).get("data") or {}) if p.returncode == 0 else {}
        for key in sorted(data, key=lambda k: k == "tls.crt"):  # the cert, waited for, last
            value = base64.b64decode(data[key])
            f = dest / key
            if not f.exists() or f.read_bytes() != value:
                tmp = dest / f".{key}.tmp"
                tmp.write_bytes(value)
                tmp.chmod(0o600)
                tmp.replace(f)

    def _host(self) -> None:
        for name in SYSCTLS:
            self._sysctls[name] = _sysctl_path(name).read_text().strip()
        _sysctl_path("net.ipv4.ip_forward").write_text("1")
        add_bridge(BRIDGE, f"{CONTROL_IP}/24")
        add_namespaces([Netns(n.netns, n.veth, (f"{n.ip}/24",)) for n in self.nodes],
                       bridge=BRIDGE)  # fmt: skip
        for n in self.nodes:
            # The other nodes' pods through the host; no default route (nothing leaves).
            _run(["ip", "-n", n.netns, "route", "add", POD_CIDR, "via", CONTROL_IP])
            _run(["ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            _run(["ip", "route", "add", n.pod_cidr, "via", n.ip])
        rule = [
            "-s", POD_CIDR, "-d", POD_CIDR,
            "-m", "comment", "--comment", f"{RULE_TAG}{self.tag}", "-j", "ACCEPT",
        ]  # fmt: skip
        _run(["iptables", "-w", "-I", "FORWARD", "1", *rule])
        self._rules.append(rule)
        for hierarchy in self._cgroup_hierarchies():
            for n in self.nodes:
                (hierarchy / self.cgroup_root / n.name).mkdir(parents=True, exist_ok=True)
        # The kubelets' volumes must propagate into containers; this machine's / is private.
        for n in self.nodes:
            root = str(self.node_dir(n) / "kubelet")
            _run(["mount", "--bind", root, root])
            _run(["mount", "--make-rshared", root])

    @staticmethod
    def _cgroup_hierarchies() -> list[Path]:
        if not CGROUP_V1.is_dir():
            return []
        return [
            p for p in sorted(CGROUP_V1.iterdir())
            if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
        ]  # fmt: skip

    def _pki(self) -> None:
        pki = self.workdir / "pki"
        _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
              f"{pki}/ca.key", "-out", f"{pki}/ca.crt", "-days", "30",
              "-subj", "/CN=mpiwait-test-ca"])  # fmt: skip
        san = (
            "subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
            "DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:10.96.0.1,"
            f"IP:{CONTROL_IP}\nextendedKeyUsage=serverAuth\n"
        )
        (pki / "ext").write_text(san)
        _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{pki}/apiserver.key",
              "-out", f"{pki}/apiserver.csr", "-subj", "/CN=kube-apiserver"])  # fmt: skip
        _run(["openssl", "x509", "-req", "-in", f"{pki}/apiserver.csr", "-CA", f"{pki}/ca.crt",
              "-CAkey", f"{pki}/ca.key", "-CAcreateserial", "-days", "30",
              "-out", f"{pki}/apiserver.crt", "-extfile", f"{pki}/ext"])  # fmt: skip
        _run(["openssl", "genrsa", "-out", f"{pki}/sa.key", "2048"])
        _run(["openssl", "rsa", "-in", f"{pki}/sa.key", "-pubout", "-out", f"{pki}/sa.pub"])
        users = {  # kubeconfig name: (user, groups)
            "admin": ("admin", "system:masters"),
            "kcm": ("system:kube-controller-manager", ""),
            "sched": ("system:kube-scheduler", ""),
            # bound by the apiserver's bootstrap RBAC to system:node-proxier
            "kube-proxy": ("system:kube-proxy", ""),
        }
        for n in self.nodes:
            users[f"kubelet-{n.name}"] = (f"system:node:{n.name}", "system:nodes")
        rows = []
        ca = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
        for name, (user, groups) in users.items():
            token = secrets.token_hex(16)
            rows.append(f'{token},{user},{user},"{groups}"')
            self._write(f"{name}.kubeconfig", json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "c", "cluster": {
                    "server": f"https://{CONTROL_IP}:{API_PORT}",
                    "certificate-authority-data": ca}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u",
                                                        "namespace": "default"}}],
            }))  # fmt: skip
        (pki / "tokens.csv").write_text("\n".join(rows) + "\n")
        for f in pki.iterdir():
            f.chmod(0o600)

    def _dns_service(self) -> None:
        """kube-dns as kubeadm makes it (10.96.0.10, 53 over UDP and TCP), its one endpoint
        CoreDNS on the host: pods reach it through kube-proxy's rules, as in a real cluster."""
        ports = [{"name": "dns", "port": 53, "protocol": "UDP"},
                 {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]  # fmt: skip
        self.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": "kube-dns", "namespace": "kube-system",
                              "labels": {"k8s-app": "kube-dns"}},
                 "spec": {"clusterIP": DNS_IP, "ports": [{**p, "targetPort": 53} for p in ports]}},
                {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                 "metadata": {"name": "kube-dns-host", "namespace": "kube-system", "labels": {
                     "kubernetes.io/service-name": "kube-dns",
                     "endpointslice.kubernetes.io/managed-by": "mpiwait-tests"}},
                 "addressType": "IPv4", "ports": ports,
                 "endpoints": [{"addresses": [CONTROL_IP], "conditions": {"ready": True}}]},
            ]}))  # fmt: skip

    def _in_node(self, n: Node, name: str, argv: list[str], bins: bool = True) -> None:
        """A process of the node: in its network namespace, the host's mounts and cgroups."""
        binary = str(self.bins / "bin" / argv[0]) if bins else argv[0]
        self._spawn(f"{name}-{n.name}", ["nsenter", f"--net=/run/netns/{n.netns}", binary,
                                         *argv[1:]], bins=False)  # fmt: skip

    def _containerd(self, n: Node) -> None:
        d = self.node_dir(n)
        hosts = self.workdir / "registry-hosts" / REGISTRY
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts.toml").write_text(nodes_.registry_hosts_toml())
        (d / "cni/10-mpiwait.conflist").write_text(nodes_.cni_conflist(n, d / "cni-ipam"))
        config = d / "containerd/config.toml"
        config.write_text(
            nodes_.containerd_toml(
                d / "containerd", self.ctr_sock(n), d / "cni", self.workdir / "registry-hosts"
            )
        )
        self._in_node(n, "containerd", ["containerd", "--config", str(config)], bins=False)
        self._wait(f"containerd of {n.name}", self.ctr_sock(n).exists, 60)

    def _ctr(self, n: Node, *args: str, timeout: float = 600) -> str:
        return _run(["ctr", "-a", str(self.ctr_sock(n)), "-n", "k8s.io", *args], timeout=timeout)

    def push(self, archive: Path, names: dict[str, list[str]]) -> int:
        """``docker save`` archive -> the registry (registry.Pusher.push); bytes sent."""
        pusher = Pusher(REGISTRY)
        pusher.push(archive, names)
        return pusher.sent

    def preload(self, n: Node, refs: Sequence[str]) -> None:
        """``refs`` pulled from the registry into ``n``'s image store, past its link (as a node
        that already had them): ctr fetches on the host and hands the content to containerd.
        The layers' blobs are then dropped, as containerd's ``discard_unpacked_layers`` does:
        their snapshots are what containers run from, and three nodes' copies of every blob
        would double the tier's disk."""
        for ref in refs:
            self._ctr(n, "images", "pull", "--plain-http", ref)
        pusher = Pusher(REGISTRY)
        layers = {la["digest"] for r in refs for la in pusher.manifest(r)[1]["layers"]}
        held = layers & set(self._ctr(n, "content", "ls", "-q").split())
        if held:
            self._ctr(n, "content", "rm", *sorted(held))

    def forget(self, n: Node, refs: Sequence[str]) -> None:
        """``refs`` removed from ``n``'s image store, their layers with them (those no other
        image there holds): the next pod there pulls them over the node's link."""
        # Every record of the same manifest goes: CRI keeps one named by the image's ID too.
        records = [ln.split() for ln in self._ctr(n, "images", "ls").splitlines()[1:]]
        manifests = {Pusher(REGISTRY).manifest(r)[0] for r in refs}
        doomed = [r[0] for r in records if r[2] in manifests]
        # Exited containers of earlier tests' pods (the kubelet removes them only at its next
        # garbage collection) still hold the image's snapshots: a pull would fetch nothing.
        running = {ln.split()[0] for ln in self._ctr(n, "tasks", "ls").splitlines()[1:]}
        stale = [
            c[0] for c in (ln.split() for ln in self._ctr(n, "containers", "ls").splitlines()[1:])
            if c[1] in doomed and c[0] not in running
        ]  # fmt: skip
        if stale:
            self._ctr(n, "containers", "rm", *stale)
        if doomed:
            self._ctr(n, "images", "rm", "--sync", *doomed)

    def missing_bytes(self, n: Node, refs: Sequence[str]) -> int:
        """What pulling ``refs`` would fetch into ``n``: the layers it has not unpacked (a pull
        fetches only those whose snapshot, named by the layer's chain ID, is missing)."""
        have = {ln.split()[0] for ln in self._ctr(n, "snapshots", "ls").splitlines()[1:]}
        pusher = Pusher(REGISTRY)
        missing: dict[str, int] = {}
        for r in refs:
            for chain, layer in zip_chain_ids(pusher.manifest(r)[1]["layers"]):
                if chain not in have:
                    missing[layer["digest"]] = layer["size"]
        return sum(missing.values())

    def shape(self, n: Node, mbit: float | None) -> None:
        """What ``n`` receives (pulls among it) limited to ``mbit`` Mbit/s, or unlimited."""
        if mbit is None:
            subprocess.run(["tc", "qdisc", "del", "dev", n.veth, "root"], capture_output=True)
            return
        _run(["tc", "qdisc", "replace", "dev", n.veth, "root", "tbf", "rate", f"{mbit}mbit",
              "burst", "256kb", "latency", "500ms"])  # fmt: skip

    def node_of(self, role: str) -> list[Node]:
        return [n for n in self.nodes if n.role == role]

    def _kubelet(self, n: Node) -> None:
        d = self.node_dir(n)
        resolv = self._write("resolv.conf", "")
        config = d / "kubelet.yaml"
        config.write_text(
            nodes_.kubelet_config(
                n, f"/{self.cgroup_root}/{n.name}", self.ctr_sock(n), resolv, d / "pod-logs"
            )
        )
        self._in_node(n, "kubelet", [
            "kubelet", f"--config={config}",
            f"--kubeconfig={self.workdir}/kubelet-{n.name}.kubeconfig",
            f"--hostname-override={n.name}", f"--node-ip={n.ip}",
            f"--node-labels={ROLE_LABEL}={n.role}",
            f"--root-dir={d}/kubelet", f"--cert-dir={d}/kubelet-pki", "--v=1",
        ])  # fmt: skip

    def _kube_proxy(self, n: Node) -> None:
        config = self.node_dir(n) / "kube-proxy.yaml"
        config.write_text(nodes_.kube_proxy_config(n, self.workdir / "kube-proxy.kubeconfig"))
        self._in_node(n, "kube-proxy", ["kube-proxy", f"--config={config}", "--v=1"])

    # --- use ----------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            [str(self.bins / "bin/kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, timeout=timeout, input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )  # fmt: skip
        if check and p.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)[:300]}: exit {p.returncode}: {p.stderr[-2000:]}"
            )
        return p

    def get(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str | dict[str, Any]) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        self.kubectl("apply", "-f", "-", input=text)

    def configure_dns(self, dns: str, timeout: float = 60) -> None:
        """Rewrite CoreDNS's Corefile for ``dns`` (see ``corefile``) and wait until CoreDNS runs
        it: its reload plugin logs a line for each configuration it starts."""
        text = corefile(dns, self.kubeconfig)
        path = self.workdir / "Corefile"
        if path.read_text() == text:
            return
        started = "Running configuration SHA512"
        before = self.log("coredns").count(started)
        path.write_text(text)
        self._wait(f"CoreDNS reloaded as {dns}",
                   lambda: self.log("coredns").count(started) > before, timeout)  # fmt: skip

    def dns_queries_from(self, address: str) -> int:
        """How many queries CoreDNS has logged from ``address`` (a pod's IP) so far."""
        return self.log("coredns").count(f"] {address}:")

    def dns_queries_for(self, part: str) -> int:
        """How many queries CoreDNS has logged so far for names containing ``part``."""
        return sum(
            part in line.partition('"')[2].partition('"')[0]
            for line in self.log("coredns").splitlines()
            if line.startswith("[INFO] ")
        )

    def log(self, component: str) -> str:
        path = self.logs / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _spawn(self, name: str, argv: list[str], bins: bool = True) -> None:
        if bins:
            argv = [str(self.bins / "bin" / argv[0]), *argv[1:]]
        self._procs[name] = spawn(argv, self.logs / f"{name}.log", {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": "/root",
            ENV_TAG: self.tag,
        })  # fmt: skip

    def _write(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.write_text(text)
        return path

    def _wait(self, what: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self._procs.items() if p.poll() is not None]
            if dead:
                raise ClusterError(host.exited(what, dead[0], self.logs / f"{dead[0]}.log"))
            if time.monotonic() > deadline:
                raise ClusterError(f"{what} not ready within {timeout:.0f} s")
            time.sleep(0.2)

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values()]

    # --- stop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Pods first (so the kubelet unmounts their volumes and CNI removes their network), then
        the processes in reverse order, then what is left on the host; leaves nothing behind."""
        kubelets = [p for name, p in self._procs.items() if name.startswith("kubelet-")]
        if kubelets and all(p.poll() is None for p in kubelets):
            with contextlib.suppress(Exception):
                kinds = "mpijobs,trainjobs,jobsets" if self.trainer else "mpijobs"
                self.kubectl("delete", kinds, "--all", "--all-namespaces", "--wait=false",
                             check=False)  # fmt: skip
                self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=1",
                             "--wait=false", check=False)  # fmt: skip
                deadline = time.monotonic() + 60
                while (
                    time.monotonic() < deadline
                    and self.kubectl("get", "pods", "-A", "-o", "name", check=False).stdout.strip()
                ):
                    time.sleep(0.5)
        for name in reversed(list(self._procs)):
            kill_group(self._procs[name], grace=30)
        self._procs.clear()
        self._kill_pods_processes()
        unmount_below((str(self.workdir), "/run/netns/cni-", "/var/run/netns/cni-"))
        for ns in set(list_ns()) - self._netns_before:
            if ns.startswith("cni-"):
                subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        remove_namespaces([n.netns for n in self.nodes], [n.veth for n in self.nodes] + [BRIDGE],
                          tag=self.tag)  # fmt: skip
        while self._rules:
            subprocess.run(["iptables", "-w", "-D", "FORWARD", *self._rules.pop()],
                           capture_output=True)  # fmt: skip
        for hierarchy in self._cgroup_hierarchies():
            root = hierarchy / self.cgroup_root
            if root.is_dir():
                for d in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
                    with contextlib.suppress(OSError):
                        d.rmdir()
                with contextlib.suppress(OSError):
                    root.rmdir()
        if self._made_cert_dir:
            with contextlib.suppress(OSError):
                CERT_DIR.rmdir()
            self._made_cert_dir = False
        for name, value in self._sysctls.items():
            with contextlib.suppress(OSError):
                _sysctl_path(name).write_text(value)
        self._sysctls.clear()
        if self._lock is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None

    def _kill_pods_processes(self) -> None:
        """Shims and containers' processes (each in the cluster's cgroups or tagged)."""
        pids: set[int] = set()
        for hierarchy in self._cgroup_hierarchies():
            root = hierarchy / self.cgroup_root
            for procs in root.rglob("cgroup.procs") if root.is_dir() else ():
                with contextlib.suppress(OSError):
                    pids |= {int(x) for x in procs.read_text().split()}
        for pid_dir in Path("/proc").iterdir():
            if pid_dir.name.isdigit():
                with contextlib.suppress(OSError):
                    cmd = (pid_dir / "cmdline").read_bytes()
                    if (b"containerd-shim" in cmd and str(self.workdir).encode() in cmd) or (
                        f"{ENV_TAG}={self.tag}".encode() in (pid_dir / "environ").read_bytes()
                    ):
                        pids.add(int(pid_dir.name))
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)
