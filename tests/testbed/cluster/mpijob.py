"""MPIJobs on a test Cluster: the examples as users paste them, with only the registry host of
their images changed and each role placed on its nodes (``as_deployed``), and what a user would
look at afterwards (the job's conditions, the launcher's pods and restarts, ``kubectl logs``)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from . import Cluster, ClusterError, images
from .node import ROLE_LABEL

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples/kubernetes"
LAUNCHER = "training.kubeflow.org/job-role=launcher"
WORKER = "training.kubeflow.org/job-role=worker"


def load_example(name: str) -> dict[str, Any]:
    import yaml  # a test extra

    doc = yaml.safe_load((EXAMPLES / name).read_text())
    assert isinstance(doc, dict)
    return doc


def operator_example(cluster: Cluster, name: str) -> dict[str, Any]:
    """One of mpi-operator's own examples, as its module has it (scripts/build-cluster keeps
    examples/v2beta1/pi/pi.yaml beside the CRD, as operator-pi.yaml)."""
    import yaml  # a test extra

    doc = yaml.safe_load((cluster.bins / f"operator-{name}").read_text())
    assert isinstance(doc, dict)
    return doc


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    pod = spec["template"]["spec"]
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def as_deployed(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its images' registry host made the cluster's (``images.registry_ref``) and
    ``imagePullPolicy: IfNotPresent``, the launcher on the launcher's node and the workers on
    the others (a ``nodeSelector`` on the nodes' role label), and CPU limits of a whole CPU made
    half of one (a limit without a request is also the request, and the machine has 2 CPUs
    for every node); nothing else changed."""
    doc = copy.deepcopy(doc)
    for role, spec in doc["spec"]["mpiReplicaSpecs"].items():
        spec["template"].setdefault("spec", {}).setdefault("nodeSelector", {})[ROLE_LABEL] = (
            "launcher" if role == "Launcher" else "worker"
        )
        for c in _containers(spec):
            c["image"] = images.registry_ref(c["image"])
            c["imagePullPolicy"] = "IfNotPresent"
            limits = c.get("resources", {}).get("limits", {})
            if str(limits.get("cpu", "")) in ("1", "1000m"):
                limits["cpu"] = "500m"
    return doc


LATE_START = "late-start"  # hold_back's initContainer


def hold_back(doc: dict[str, Any], worker: int, seconds: int) -> dict[str, Any]:
    """Worker ``worker`` starts its sshd ``seconds`` late, as a worker whose setup runs before
    its sshd would (an initContainer that sleeps, by the pod's name: the template is every
    worker's). Real image pulls are ``pulls.pulling``'s."""
    doc = copy.deepcopy(doc)
    spec = doc["spec"]["mpiReplicaSpecs"]["Worker"]
    pod = spec["template"]["spec"]
    image = pod["containers"][0]["image"]
    pod.setdefault("initContainers", []).insert(0, {
        "name": LATE_START,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", f'case "$(hostname)" in *-worker-{worker}) sleep {seconds};; esac'],
    })  # fmt: skip
    return doc


def scaled(doc: dict[str, Any], workers: int) -> dict[str, Any]:
    """``doc`` with ``workers`` workers and one rank on each (mpirun's -np or -n follows)."""
    doc = copy.deepcopy(doc)
    specs = doc["spec"]["mpiReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    argv = launcher.get("command") or launcher["args"]
    at = next(i for i, a in enumerate(argv) if a in ("-np", "-n")) + 1
    argv[at] = str(workers)
    return doc


def stamp(text: str) -> float:
    """The kubelet's RFC 3339 timestamp (``kubectl logs --timestamps``, a status's time) as Unix
    time."""
    text = text.rstrip("Z")
    whole, _, frac = text.partition(".")
    t = datetime.fromisoformat(whole + "+00:00").timestamp()
    return t + float("0." + frac) if frac else t


def from_a_rank(workers: set[str]) -> Callable[[str], bool]:
    """Whether a launcher's log line was printed by a rank: a worker's host name (``hostname``
    as the program), or the pi programs' lines ("pi on <host>", or "Workers:", "Rank ...")."""
    return lambda t: t in workers or t.startswith(("Workers:", "Rank ", "pi on "))


def restarts(pod: dict[str, Any]) -> int:
    """How often the pod's containers, its initContainers among them, were restarted."""
    statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get(
        "containerStatuses", []
    )
    return sum(s.get("restartCount", 0) for s in statuses)


def without_init(doc: dict[str, Any]) -> dict[str, Any]:
    """The launcher without its initContainers (the control: the same job without mpiwait)."""
    doc = copy.deepcopy(doc)
    doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"].pop("initContainers", None)
    return doc


def worker_image(doc: dict[str, Any], image: str) -> dict[str, Any]:
    """The workers' containers (initContainers too) run ``image``; the launcher keeps its own."""
    doc = copy.deepcopy(doc)
    for c in _containers(doc["spec"]["mpiReplicaSpecs"]["Worker"]):
        c["image"] = images.registry_ref(image)
    return doc


def without_entrypoint(doc: dict[str, Any]) -> dict[str, Any]:
    """The control for an example whose launcher image has mpiwait as its ENTRYPOINT: the
    launcher's main container runs its args at once (``command:``, which replaces the
    ENTRYPOINT), as an image without mpiwait would. For Open MPI 5 it also sets the PRRTE names
    of the operator's ``OMPI_MCA_orte_*`` variables, as a user without mpiwait must (what
    mpiwait would have added; without them Open MPI 5 ignores the operator's hostfile and runs
    every rank on the launcher, mpi-operator #842)."""
    doc = copy.deepcopy(doc)
    main = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    main["command"] = main.pop("args")
    if doc["spec"].get("mpiImplementation", "OpenMPI") == "OpenMPI":
        slots = str(doc["spec"].get("slotsPerWorker", 1))
        main.setdefault("env", []).extend([
            {"name": "PRTE_MCA_prte_default_hostfile", "value": "/etc/mpi/hostfile"},
            {"name": "PRTE_MCA_plm_ssh_args", "value": "-o ConnectionAttempts=10"},
            {"name": "PRTE_MCA_prte_keep_fqdn_hostnames", "value": "true"},
            {"name": "PRTE_MCA_prte_set_default_slots", "value": slots},
        ])  # fmt: skip
    return doc


def terminations(pod: dict[str, Any], container: str) -> list[dict[str, Any]]:
    """What Kubernetes keeps of ``container``'s ends (``kubectl describe pod``'s State and Last
    State: reason, exitCode, message, startedAt, finishedAt): the one before the current
    run, then the current run's if it has ended."""
    for s in pod["status"].get("containerStatuses", []):
        if s["name"] == container:
            ends = [s.get("lastState", {}).get("terminated"), s.get("state", {}).get("terminated")]
            return [t for t in ends if t]
    return []


class Jobs:
    """One namespace of a Cluster, for one test."""

    KIND = "mpijob"  # the job's resource, as kubectl names it
    SUCCEEDED = "Succeeded"  # the condition of a job that succeeded
    # A job's launcher and worker pods (label selectors) and its launcher's Job, for ``job``.
    LAUNCHER_PODS = f"{LAUNCHER},training.kubeflow.org/job-name={{job}}"
    WORKER_PODS = f"{WORKER},training.kubeflow.org/job-name={{job}}"
    LAUNCHER_JOB = "{job}-launcher"

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace
        self.kubectl("create", "namespace", namespace, namespaced=False)
        # --for=create: the ServiceAccount controller makes "default" a moment after the
        # namespace, and any other condition fails at once (NotFound) if it is not there yet.
        self.cluster.kubectl(
            "wait", "--for=create", "-n", namespace, "serviceaccount/default", "--timeout=60s",
        )  # fmt: skip

    def kubectl(self, *args: str, namespaced: bool = True, **kw: Any) -> Any:
        ns = ("-n", self.ns) if namespaced else ()
        return self.cluster.kubectl(*ns, *args, **kw)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def create(self, doc: dict[str, Any]) -> str:
        self.kubectl("create", "-f", "-", input=json.dumps(doc))
        name = doc["metadata"]["name"]
        assert isinstance(name, str)
        return name

    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        self.kubectl("patch", kind, name, "--type=merge", "-p", json.dumps(patch))

    def condition(self, job: str) -> str | None:
        """``SUCCEEDED`` or "Failed" once the job has finished, else None."""
        status = self.get(self.KIND, job).get("status", {})
        for c in status.get("conditions", []):
            if c["type"] in (self.SUCCEEDED, "Failed") and c["status"] == "True":
                return str(c["type"])
        return None

    def wait_finished(self, job: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.condition(job)
            if done:
                return done
            time.sleep(1)
        said = self.describe(job)
        raise ClusterError(f"{self.KIND} {job} not finished in {timeout:.0f} s:\n{said}")

    def wait_for(self, what: str, ready: Any, timeout: float = 180) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = ready()
            if got:
                return got
            time.sleep(0.5)
        raise ClusterError(f"{what}: not within {timeout:.0f} s")

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items = self.get("pods", "-l", selector)["items"]
        assert isinstance(items, list)
        return sorted(items, key=lambda p: p["metadata"]["creationTimestamp"])

    def launcher_pods(self, job: str) -> list[dict[str, Any]]:
        return self.pods(self.LAUNCHER_PODS.format(job=job))

    def worker_pods(self, job: str) -> list[dict[str, Any]]:
        return self.pods(self.WORKER_PODS.format(job=job))

    def launcher_job(self, job: str) -> dict[str, Any]:
        got = self.get("job", self.LAUNCHER_JOB.format(job=job))
        assert isinstance(got, dict)
        return got

    def logs(self, pod: str, container: str | None = None, previous: bool = False) -> str:
        """``kubectl logs``: the container's current run, or with ``previous`` the one before
        (while the kubelet still has it); "" when there is none."""
        args = ["logs", pod] + (["-c", container] if container else [])
        args += ["--previous"] if previous else []
        out = self.kubectl(*args, check=False).stdout
        assert isinstance(out, str)
        return out

    def first_line_at(self, pod: str, container: str, match: Any) -> float | None:
        """The kubelet's time of the first line of the container's log for which ``match(text)``
        holds, or None."""
        out = self.kubectl("logs", "--timestamps", pod, "-c", container, check=False).stdout
        for line in out.splitlines():
            at, _, text = line.partition(" ")
            if at and match(text.strip()):
                return stamp(at)
        return None

    def last_sshd_at(self, workers: set[str], container: str) -> float | None:
        """When the last of ``workers``' sshds said "Server listening" (the kubelet's time), or
        None if one of them has not."""
        said = [
            self.first_line_at(w, container, lambda t: "Server listening" in t)
            for w in sorted(workers)
        ]
        heard = [t for t in said if t is not None]
        return max(heard) if heard and len(heard) == len(said) else None

    def describe(self, job: str) -> str:
        out = [self.kubectl("get", "mpijob,job,pods", "-o", "wide", check=False).stdout]
        for pod in self.launcher_pods(job):
            name = pod["metadata"]["name"]
            for c in _containers({"template": {"spec": pod["spec"]}}):
                out.append(f"--- {name}/{c['name']}\n{self.logs(name, c['name'])[-3000:]}")
        out.append(
            self.kubectl("get", "events", "--sort-by=.lastTimestamp", check=False).stdout[-4000:]
        )
        return "\n".join(out)

    def close(self) -> None:
        self.cluster.kubectl("delete", "namespace", self.ns, "--wait=false", check=False)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if not self.kubectl("get", "pods", "-o", "name", check=False).stdout.strip():
                break
            time.sleep(0.5)
