"""The cluster tier's pin table (tests/testbed/cluster/PINS) says what the wrapper modules build:
each Go component's version is the one its go.mod requires (and its go.sum verifies), and
Kubernetes' staging modules are all replaced by that release's published versions."""

from __future__ import annotations

import re

import pytest
from testbed import cluster
from testbed.cluster import corefile

MODULES = cluster.HERE / "modules"
GO = {  # pin name -> (module directory, the module it requires)
    "kubernetes": ("kube", "k8s.io/kubernetes"),
    "etcd": ("etcd", "go.etcd.io/etcd/server/v3"),
    "coredns": ("coredns", "github.com/coredns/coredns"),
    "mpi-operator": ("mpi-operator", "github.com/kubeflow/mpi-operator"),
    "jobset": ("jobset", "sigs.k8s.io/jobset"),
    "trainer": ("trainer", "github.com/kubeflow/trainer/v2"),
    "kueue": ("kueue", "sigs.k8s.io/kueue"),
    "registry": ("registry", "github.com/distribution/distribution/v3"),
}


def _pins() -> dict[str, str]:
    rows = (ln.split("\t") for ln in (cluster.HERE / "PINS").read_text().splitlines())
    return {r[0]: r[1] for r in rows if r[0] and not r[0].startswith("#")}


@pytest.mark.parametrize("name", sorted(GO))
def test_pin_is_what_go_mod_requires_and_go_sum_verifies(name: str) -> None:
    directory, module = GO[name]
    version = _pins()[name]
    gomod = (MODULES / directory / "go.mod").read_text()
    assert re.search(rf"^\s*(require\s+)?{re.escape(module)} {re.escape(version)}\b", gomod, re.M)
    gosum = (MODULES / directory / "go.sum").read_text()
    assert f"{module} {version} h1:" in gosum


def test_staging_modules_follow_the_kubernetes_pin() -> None:
    staging = "v0." + _pins()["kubernetes"].removeprefix("v1.")
    replaces = re.findall(r"^replace (k8s\.io/\S+) => (\S+) (\S+)$", (MODULES / "kube/go.mod")
                          .read_text(), re.M)  # fmt: skip
    assert len(replaces) > 25
    assert {(m, v) for _, m, v in replaces} == {(m, staging) for m, _, _ in replaces}


def test_trainer_runs_on_the_jobset_it_requires() -> None:
    """The JobSet pin is the version the Trainer release's go.mod requires (the Trainer's wrapper
    module resolves it so), so the controller and the CRD it talks to are one release."""
    gomod = (MODULES / "trainer/go.mod").read_text()
    assert re.search(rf"^\s*sigs\.k8s\.io/jobset {re.escape(_pins()['jobset'])}\b", gomod, re.M)


@pytest.mark.parametrize("dns", ["kubeadm", "old-kubeadm"])
def test_corefile_never_forwards_out_of_the_test_bed(dns: str) -> None:
    text = corefile(dns, cluster.HERE / "admin.kubeconfig")
    assert "forward" not in text and f"bind {cluster.CONTROL_IP}" in text and "ttl 30" in text
    assert "rcode NXDOMAIN" in text.split(".:53", 1)[1]  # every other name: no such name
    assert ("disable denial cluster.local" in text) == (dns == "kubeadm")
