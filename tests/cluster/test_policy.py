"""deploy/policy (and its v1beta1 variant) on the real cluster: mpiwait added to mpi-operator's
launcher pods by a MutatingAdmissionPolicy, without editing a job.

Each test runs under both variants, applied with ``kubectl apply -k`` as docs/deploy.md says.
What is checked is what an administrator would look at: the launcher pod's containers, the
job's result, ``kubectl logs`` and the warnings kubectl prints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_mpijobs import HELD_BACK, assert_one_clean_launch, assert_waited_for
from testbed.cluster import Cluster, images
from testbed.cluster.mpijob import (
    LATE_START,
    Jobs,
    as_deployed,
    hold_back,
    load_example,
    operator_example,
    restarts,
)

REPO = Path(__file__).resolve().parents[2]
PREVIEW = REPO / "deploy/preview-launcher.yaml"
ADDED = ["mpiwait-copy", "mpiwait"]


def _init_names(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers", [])]


def _opt_in(jobs: Jobs) -> Jobs:
    jobs.kubectl("label", "namespace", jobs.ns, "mpiwait.io/inject=enabled", namespaced=False)
    return jobs


def _preview(jobs: Jobs, *extra: str, doc: dict[str, Any] | None = None) -> Any:
    """docs/deploy.md's preview: the sample launcher pod created with --dry-run=server."""
    args = ["create", "--dry-run=server", "-o", "json", "-f"]
    if doc is None:
        return jobs.kubectl(*args, str(PREVIEW), *extra)
    return jobs.kubectl(*args, "-", *extra, input=json.dumps(doc))


@pytest.fixture(scope="module", params=["policy", "policy-v1beta1"])
def policy(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """The policy applied as docs/deploy.md says, in effect (the apiserver picks it up a moment
    after it is created), and deleted afterwards."""
    folder = str(REPO / "deploy" / request.param)
    cluster.kubectl("apply", "-k", folder)
    # As a cluster behind its own registry sets it: the same image, the registry host changed.
    image = images.registry_ref(images.MPIWAIT)
    cluster.kubectl("patch", "configmap", "-n", "mpiwait-system", "mpiwait-policy", "--type=merge",
                    "-p", json.dumps({"data": {"image": image}}))  # fmt: skip
    probe = _opt_in(Jobs(cluster, f"t-policy-probe-{request.param}"))
    try:

        def in_effect() -> bool:
            pod = json.loads(_preview(probe).stdout)
            return _init_names(pod) == ADDED

        probe.wait_for("the policy in effect", in_effect, timeout=60)
    finally:
        probe.close()
    try:
        yield request.param
    finally:
        cluster.kubectl("delete", "-k", folder, "--wait=true")


def test_the_policys_image_is_the_one_released(policy: str) -> None:
    """The parameter names this version's image (scripts/version keeps it in step), the one the
    tier built and the cluster has."""
    text = (REPO / "deploy/policy/params.yaml").read_text()
    assert f"image: {images.MPIWAIT}\n" in text


def test_operator_pi_example_waits_for_its_late_worker(policy: str, jobs: Jobs) -> None:
    """mpi-operator's own pi example, as its repository has it but for what a cluster without a
    registry needs, one worker 20 s late: one clean launch, mpiwait's log in ``kubectl logs``
    showing that it waited for that worker, and the workers untouched."""
    _opt_in(jobs)
    doc = hold_back(as_deployed(operator_example(jobs.cluster, "pi.yaml")), 1, HELD_BACK)
    job = jobs.create(doc)
    # The tier's pi prints "pi on HOST"; Open MPI 5 here runs every rank on the launcher (the
    # operator sets only OMPI_MCA_* names), so mpiwait's log is what shows the late worker.
    out = assert_one_clean_launch(jobs, job, [], "mpi-launcher")
    assert out.count("pi on ") == 2, out
    launcher = jobs.launcher_pods(job)[0]
    assert _init_names(launcher) == ADDED
    waited = jobs.logs(launcher["metadata"]["name"], "mpiwait")
    assert_waited_for(waited, f"{job}-worker-0", f"{job}-worker-1", HELD_BACK)
    for w in jobs.worker_pods(job):
        assert _init_names(w) == [LATE_START]  # hold_back's, nothing of the policy's
        assert restarts(w) == 0


def _launcher(jobs: Jobs, doc: dict[str, Any]) -> dict[str, Any]:
    """The first launcher pod of ``doc``'s job, as admitted."""
    job = jobs.create(doc)
    pods = jobs.wait_for("the launcher pod", lambda: jobs.launcher_pods(job), timeout=120)
    return dict(pods[0])


def test_a_namespace_without_the_label_is_unchanged(policy: str, jobs: Jobs) -> None:
    """The control of the pi test: the same job, the namespace not opted in."""
    launcher = _launcher(jobs, as_deployed(operator_example(jobs.cluster, "pi.yaml")))
    assert _init_names(launcher) == []


def test_the_opt_out_annotation_leaves_the_launcher_unchanged(policy: str, jobs: Jobs) -> None:
    _opt_in(jobs)
    doc = as_deployed(operator_example(jobs.cluster, "pi.yaml"))
    template = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})["mpiwait.io/inject"] = "false"
    launcher = _launcher(jobs, doc)
    assert _init_names(launcher) == []


@pytest.mark.parametrize(
    ("example", "inits"),
    [("initcontainer.yaml", ["wait-for-workers"]), ("entrypoint.yaml", [])],
)
def test_a_launcher_that_runs_mpiwait_is_not_given_it_twice(
    policy: str, jobs: Jobs, example: str, inits: list[str]
) -> None:
    """mpiwait as the launcher's initContainer, or as its image's ENTRYPOINT: left as it is."""
    _opt_in(jobs)
    launcher = _launcher(jobs, as_deployed(load_example(example)))
    assert _init_names(launcher) == inits


def test_annotations_override_the_parameters(policy: str, jobs: Jobs) -> None:
    """docs/deploy.md's preview, with one job's annotations: they win over the parameters; what
    neither sets is left to the launcher's own ssh (no option passed)."""
    _opt_in(jobs)
    plain = json.loads(_preview(jobs).stdout)
    (wait,) = [c for c in plain["spec"]["initContainers"] if c["name"] == "mpiwait"]
    assert wait["args"] == ["--timeout=600"]
    assert wait["image"] == plain["spec"]["containers"][0]["image"]
    assert wait["securityContext"] == {"runAsUser": 1000}
    mounts = {m["name"]: m["mountPath"] for m in wait["volumeMounts"]}
    assert mounts["ssh-auth"] == "/home/mpiuser/.ssh" and mounts["mpiwait"] == "/opt/mpiwait"

    import yaml  # a test extra

    doc = yaml.safe_load(PREVIEW.read_text())
    doc["metadata"]["annotations"] = {
        "mpiwait.io/port": "2022", "mpiwait.io/user": "mpi", "mpiwait.io/timeout": "90",
        "mpiwait.io/identity-file": "/home/mpiuser/.ssh/id_ed25519",
    }  # fmt: skip
    pod = json.loads(_preview(jobs, doc=doc).stdout)
    (wait,) = [c for c in pod["spec"]["initContainers"] if c["name"] == "mpiwait"]
    assert wait["args"] == [
        "--timeout=90", "--port=2022", "--user=mpi",
        "--identity-file=/home/mpiuser/.ssh/id_ed25519",
    ]  # fmt: skip


def test_what_keeps_mpiwait_out_is_said_as_a_warning(policy: str, jobs: Jobs) -> None:
    """No denials: a launcher the policy cannot change is created as it is, with a warning; so
    is an MPIJob whose mpiwait annotations would not be read or could not work."""
    import yaml  # a test extra

    _opt_in(jobs)
    doc = yaml.safe_load(PREVIEW.read_text())
    doc["spec"]["containers"][0]["volumeMounts"] = [{"name": "mpi-job-config", "mountPath": "/x"}]
    p = _preview(jobs, doc=doc)
    assert _init_names(json.loads(p.stdout)) == []
    assert "mpiwait was not added to this MPIJob launcher pod" in p.stderr, p.stderr
    assert "Warning" not in _preview(jobs).stderr  # the control: the layout as the operator's

    job = as_deployed(operator_example(jobs.cluster, "pi.yaml"))
    job["metadata"]["annotations"] = {"mpiwait.io/inject": "false"}
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher["metadata"] = {"annotations": {"mpiwait.io/port": "ssh"}}
    said = jobs.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(job)).stderr
    assert "annotations on the MPIJob are not read" in said, said
    assert "are numbers" in said, said
    fine = as_deployed(operator_example(jobs.cluster, "pi.yaml"))
    assert (
        "Warning"
        not in jobs.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(fine)).stderr
    )
