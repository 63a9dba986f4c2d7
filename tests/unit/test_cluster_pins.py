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
    "etcd": ("shared", "go.etcd.io/etcd/server/v3"),
    "coredns": ("shared", "github.com/coredns/coredns"),
    "mpi-operator": ("shared", "github.com/kubeflow/mpi-operator"),
    "jobset": ("jobset", "sigs.k8s.io/jobset"),
    "trainer": ("shared", "github.com/kubeflow/trainer/v2"),
    "kueue": ("shared", "sigs.k8s.io/kueue"),
    "registry": ("shared", "github.com/distribution/distribution/v3"),
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
    """The JobSet pin is the version the Trainer release's go.mod requires (`go mod graph` in
    modules/shared), so the controller and the CRD it talks to are one release."""
    gomod = (MODULES / "shared/go.mod").read_text()
    assert re.search(rf"^\s*sigs\.k8s\.io/jobset {re.escape(_pins()['jobset'])}\b", gomod, re.M)


def _requires(directory: str) -> dict[str, str]:
    gomod = (MODULES / directory / "go.mod").read_text()
    return dict(re.findall(r"^\s+(\S+) (v\S+)", gomod, re.M))


def test_jobset_shares_every_library_but_controller_runtime_with_the_shared_module() -> None:
    """JobSet does not build on Trainer's and Kueue's controller-runtime, so it has a module of
    its own; every other library there is at the shared module's version, so the Go build
    compiles it once for both (part of the cold build's saving, docs/testing.md)."""
    shared, jobset = _requires("shared"), _requires("jobset")
    differ = {m for m in shared.keys() & jobset.keys() if shared[m] != jobset[m]}
    assert len(shared.keys() & jobset.keys()) > 50  # the control: the two do share libraries
    # cert-controller: the release that is on controller-runtime 0.22
    assert differ == {
        "sigs.k8s.io/controller-runtime",
        "github.com/open-policy-agent/cert-controller",
    }


@pytest.mark.parametrize("dns", ["kubeadm", "old-kubeadm"])
def test_corefile_never_forwards_out_of_the_test_bed(dns: str) -> None:
    text = corefile(dns, cluster.HERE / "admin.kubeconfig")
    assert "forward" not in text and f"bind {cluster.CONTROL_IP}" in text and "ttl 30" in text
    assert "rcode NXDOMAIN" in text.split(".:53", 1)[1]  # every other name: no such name
    assert ("disable denial cluster.local" in text) == (dns == "kubeadm")


@pytest.mark.parametrize("dns", ["kubeadm", "old-kubeadm"])
def test_coredns_is_built_with_every_plugin_the_corefile_uses(dns: str) -> None:
    """modules/shared/coredns imports only the plugins the tier's Corefile names; one missing
    would stop CoreDNS at the cluster's start ("unknown directive")."""
    main = (MODULES / "shared/coredns/main.go").read_text()
    built = set(re.findall(r'"github\.com/coredns/coredns/plugin/(\w+)"', main))
    text = corefile(dns, cluster.HERE / "admin.kubeconfig")
    used = set(re.findall(r"^    (\w+)", text, re.M))  # a server block's directives
    assert {"kubernetes", "cache", "template"} <= used  # the control: the parse finds them
    assert used <= built, used - built
