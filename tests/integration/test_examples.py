"""Keep the deployment artifacts true: Dockerfiles, examples/ (Kubernetes and Compose).

Offline checks: every YAML parses; the Compose file validates against the Compose specification
(check-jsonschema's vendored schema); every pod template validates against Kubernetes' OpenAPI
schemas (kubernetes-validate ships them); the MPIJob and Trainer structure is what mpi-operator
and Trainer expect; the Dockerfiles lint clean under hadolint.

Executable checks: each example's mpiwait invocation (the container's command and args resolved
against its image's ENTRYPOINT as Kubernetes does, its env, the env the operator injects) runs
for real against worker hosts with sshd (tests/testbed/), in a launcher laid out as that
container sees it: /etc/mpi as the operator's ConfigMap volume, the job key as its Secret
volume (symlinks into ..data, owner root, the operator's modes), /etc/ssh as the container's
image has it (nothing at all in mpiwait's own image), the container's uid with the image's
passwd entries only, and the pod's hostname. Only COMMAND is swapped for `echo COMMAND...`, so
the test sees that mpiwait waited and then exec'd exactly the example's command.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
import testbed  # (tests/ is on sys.path via conftest)

testbed.require("pyyaml")
import yaml  # noqa: E402

import mpiwait  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
K8S = EXAMPLES / "kubernetes"
COMPOSE_DIR = EXAMPLES / "docker-compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
DOCKERFILES = [
    REPO / "Dockerfile",
    K8S / "entrypoint.Dockerfile",
    K8S / "intel-entrypoint.Dockerfile",
    K8S / "trainer-entrypoint.Dockerfile",
    COMPOSE_DIR / "Dockerfile",
]
K8S_EXAMPLES = sorted(K8S.glob("*.yaml"))

MPIWAIT_IMAGE = f"ghcr.io/mpiwait/mpiwait:{mpiwait.__version__}"
MPIWAIT_IN_IMAGE = "/opt/mpiwait/bin/mpiwait"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Kubernetes releases whose schemas every pod template must satisfy: an older one still in use
# with mpi-operator, and the newest one kubernetes-validate knows.
K8S_VERSIONS = ("1.27", "latest")

# Debian 12's /etc/ssh/ssh_config without its comments.
DEBIAN_SSH_CONFIG = """\
Include /etc/ssh/ssh_config.d/*.conf
Host *
    SendEnv LANG LC_*
    HashKnownHosts yes
    GSSAPIAuthentication yes
"""
# mpi-operator's base images (build/base/Dockerfile: sed on Debian's file, port 2222).
OPERATOR_SSH_CONFIG = """\
Include /etc/ssh/ssh_config.d/*.conf
Host *
    StrictHostKeyChecking no
    Port 2222
    SendEnv LANG LC_*
    HashKnownHosts yes
    GSSAPIAuthentication yes
    UserKnownHostsFile /dev/null
"""


@dataclass(frozen=True)
class ImageFacts:
    """What a container of an example's image sees that its Dockerfile alone does not say."""

    dockerfile: Path | None  # where ENTRYPOINT/CMD/ENV/USER come from (None: not ours)
    users: dict[int, tuple[str, str]]  # passwd entries: uid -> (name, home)
    etc_ssh: dict[str, str]  # files under /etc/ssh


IMAGES: dict[str, ImageFacts] = {
    # FROM scratch: /opt/mpiwait and root's passwd entry, nothing else (no ssh, no shell).
    MPIWAIT_IMAGE: ImageFacts(REPO / "Dockerfile", {0: ("root", "/root")}, {}),
    # mpi-operator's mpi-pi:mpich (mpiuser is uid 1000, home /home/mpiuser) plus /opt/mpiwait.
    f"ghcr.io/mpiwait/pi-mpich-mpiwait:{mpiwait.__version__}": ImageFacts(
        K8S / "entrypoint.Dockerfile",
        {0: ("root", "/root"), 1000: ("mpiuser", "/home/mpiuser")},
        {"ssh_config": OPERATOR_SSH_CONFIG},
    ),
    # Horovod's image: root, sshd on port 22; its ssh_config is not relied upon.
    "horovod/horovod:0.28.1": ImageFacts(None, {0: ("root", "/root")}, {}),
    # mpi-operator's mpi-pi:intel (Intel MPI 2021) plus /opt/mpiwait, no entrypoint.sh.
    f"ghcr.io/mpiwait/pi-intel-mpiwait:{mpiwait.__version__}": ImageFacts(
        K8S / "intel-entrypoint.Dockerfile",
        {0: ("root", "/root"), 1000: ("mpiuser", "/home/mpiuser")},
        {"ssh_config": OPERATOR_SSH_CONFIG},
    ),
    # mpi-operator's mpi-pi:openmpi (Open MPI 5.0.7; Trainer's runtimes run it) plus /opt/mpiwait.
    f"ghcr.io/mpiwait/pi-openmpi-mpiwait:{mpiwait.__version__}": ImageFacts(
        K8S / "trainer-entrypoint.Dockerfile",
        {0: ("root", "/root"), 1000: ("mpiuser", "/home/mpiuser")},
        {"ssh_config": OPERATOR_SSH_CONFIG},
    ),
    "mpiwait-demo:latest": ImageFacts(
        COMPOSE_DIR / "Dockerfile",
        {0: ("root", "/root")},
        {
            "ssh_config": DEBIAN_SSH_CONFIG,
            "ssh_config.d/mpi.conf": (COMPOSE_DIR / "ssh_config").read_text(),
        },
    ),
}

# What the worker hosts of each example run (their sshd's port and login user) and how many
# seconds the last worker's sshd starts late in the executable test.
WORKERS = {
    "initcontainer.yaml": {"user": "root", "port": 22},
    "entrypoint.yaml": {"user": "mpiuser", "port": 2222},
    "run-launcher-as-worker.yaml": {"user": "mpiuser", "port": 2222},
    "trainer-v2.yaml": {"user": "mpiuser", "port": 2222},
    "intel-entrypoint.yaml": {"user": "mpiuser", "port": 2222},
    "trainer-v2-entrypoint.yaml": {"user": "mpiuser", "port": 2222},
    "compose.yaml": {"user": "root", "port": 22},
    "horovod-elastic.yaml": {"user": "root", "port": 22},
    "bash-entrypoint.yaml": {"user": "mpiuser", "port": 2222},
    "horovod.yaml": {"user": "root", "port": 22},
}


def load_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def all_yaml() -> list[Path]:
    return sorted([*EXAMPLES.rglob("*.yaml"), *EXAMPLES.rglob("*.yml")])


# --------------------------------------------------------------------------------------------
# Dockerfiles: a reader just good enough for our own files


def instructions(path: Path) -> list[tuple[str, str]]:
    """(KEYWORD, rest) per instruction: comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


@dataclass
class FinalStage:
    base: str
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    copies: list[list[str]] = field(default_factory=list)  # COPY arguments, flags included


def final_stage(path: Path) -> FinalStage:
    stage: FinalStage | None = None
    for keyword, rest in instructions(path):
        if keyword == "FROM":
            stage = FinalStage(base=rest.split()[0])
            continue
        if keyword == "ARG" and stage is None:  # global build arguments, e.g. BASE
            continue
        assert stage is not None, f"{path}: {keyword} before FROM"
        if keyword == "ENTRYPOINT":
            stage.entrypoint = json.loads(rest)
        elif keyword == "CMD":
            stage.cmd = json.loads(rest)
        elif keyword == "USER":
            stage.user = rest
        elif keyword == "COPY":
            stage.copies.append(rest.split())
        elif keyword == "ENV":
            for item in re.findall(r'(\w+)=("[^"]*"|\S+)', rest):
                value = item[1].strip('"').replace("$PATH", stage.env.get("PATH", DEFAULT_PATH))
                stage.env[item[0]] = value
    assert stage is not None, f"{path}: no FROM"
    return stage


def effective_argv(image: str, command: list[str] | None, args: list[str] | None) -> list[str]:
    """The process a container runs, as Kubernetes and Compose combine it with the image:
    command replaces ENTRYPOINT (and drops CMD), args replace CMD."""
    facts = IMAGES.get(image)
    stage = final_stage(facts.dockerfile) if facts and facts.dockerfile else FinalStage(base="")
    if command:
        return [*command, *(args or [])]
    return [*(stage.entrypoint or []), *(args if args is not None else (stage.cmd or []))]


def runs_mpiwait(argv: list[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) == "mpiwait"


def discovery_script(argv: list[str]) -> list[str] | None:
    """The mpiwait command a horovodrun line runs as its --host-discovery-script (through a
    shell, every second), split as that shell splits it; None when there is none."""
    import shlex

    if not argv or os.path.basename(argv[0]) != "horovodrun":
        return None
    for k, arg in enumerate(argv[:-1]):
        if arg == "--host-discovery-script":
            script = shlex.split(argv[k + 1])
            return script if runs_mpiwait(script) else None
    return None


# --------------------------------------------------------------------------------------------
# What each example runs


@dataclass
class Invocation:
    """One container of an example whose process is mpiwait, as that container would start it."""

    example: str  # file name
    what: str  # e.g. "Launcher initContainer wait-for-workers"
    image: str
    argv: list[str]
    env: dict[str, str]  # the container's env plus what the operator injects
    uid: int
    mounts: dict[str, str]  # mountPath -> volume name
    hostname: str  # the pod's
    hosts: list[str]  # the workers as the hostfile lists them (before self)
    hostfile: str  # the hostfile as the operator writes it
    discover: str | None  # discover_hosts.sh, or None when there is none (Trainer)
    key_mode: int  # mode of the private key in the ssh-auth volume
    ssh_auth_path: str  # sshAuthMountPath
    ssh_auth_volume: str
    config_volume: str
    role: str = "launcher"  # or "worker", or "discovery" (horovodrun's discovery script)

    def image_env(self) -> dict[str, str]:
        facts = IMAGES[self.image]
        env = {"PATH": DEFAULT_PATH}
        if facts.dockerfile:
            env.update(final_stage(facts.dockerfile).env)
        if "HOME" not in env:  # the runtime sets HOME from the image's passwd, else "/"
            env["HOME"] = facts.users.get(self.uid, ("", "/"))[1]
        env["HOSTNAME"] = self.hostname
        return {**env, **self.env}


def _env_list(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}


def _container_uid(container: dict[str, Any], pod_spec: dict[str, Any], image: str) -> int:
    for ctx in (container.get("securityContext") or {}, pod_spec.get("securityContext") or {}):
        if ctx.get("runAsUser") is not None:
            return int(ctx["runAsUser"])
    facts = IMAGES.get(image)
    user = final_stage(facts.dockerfile).user if facts and facts.dockerfile else None
    return int(user.split(":")[0]) if user else 0


OPERATOR_ENV = {
    "OpenMPI": {
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    },
    "Intel": {
        "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
    },
    "MPICH": {
        "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
        "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10",
    },
}


def mpijob_invocations(example: str, job: dict[str, Any]) -> list[Invocation]:
    """mpi-operator v2beta1: what newConfigMap, newLauncherPodTemplate and newWorker make."""
    name = job["metadata"]["name"]
    ns = job["metadata"].get("namespace", "default")
    spec = job["spec"]
    impl = spec.get("mpiImplementation", "OpenMPI")
    slots = int(spec.get("slotsPerWorker", 1))
    ssh_path = spec.get("sshAuthMountPath", "/root/.ssh")
    replicas = spec["mpiReplicaSpecs"]
    n = int(replicas["Worker"].get("replicas", 0))
    launcher = f"{name}-launcher.{name}.{ns}.svc"
    workers = [f"{name}-worker-{i}.{name}.{ns}.svc" for i in range(n)]
    listed = ([launcher] if spec.get("runLauncherAsWorker") else []) + workers
    line = "{} slots={}" if impl == "OpenMPI" else "{}:{}"
    hostfile = "".join(line.format(h, slots) + "\n" for h in listed)
    discover = "#!/bin/sh\n" + "".join(f"echo {h}\n" for h in listed)  # all Running
    common = dict(
        example=example,
        hosts=workers,
        hostfile=hostfile,
        discover=discover,
        key_mode=0o600 if ssh_path == "/root/.ssh" else 0o644,
        ssh_auth_path=ssh_path,
        ssh_auth_volume="ssh-auth",
        config_volume="mpi-job-config",
    )
    out: list[Invocation] = []
    for role, rspec in (("launcher", replicas["Launcher"]), ("worker", replicas["Worker"])):
        pod = rspec["template"]["spec"]
        hostname = f"{name}-launcher" if role == "launcher" else f"{name}-worker-0"
        containers = [("initContainer", c) for c in pod.get("initContainers") or []]
        containers += [("container", c) for c in pod["containers"]]
        for kind, c in containers:
            argv = effective_argv(c["image"], c.get("command"), c.get("args"))
            script = discovery_script(argv) if role == "launcher" else None
            if script is not None:
                argv = script
            elif not runs_mpiwait(argv):
                continue
            env = _env_list(c)
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
            if kind == "container" and c is pod["containers"][0]:
                # The operator's additions to the first container only.
                env["K_MPI_JOB_ROLE"] = role
                mounts[ssh_path] = "ssh-auth"
                if role == "launcher":
                    env.update(OPERATOR_ENV[impl])
                    mounts["/etc/mpi"] = "mpi-job-config"
            out.append(
                Invocation(
                    what=f"{role.title()} {kind} {c['name']}",
                    image=c["image"],
                    argv=argv,
                    env=env,
                    uid=_container_uid(c, pod, c["image"]),
                    mounts=mounts,
                    hostname=hostname,
                    role="discovery"
                    if script is not None
                    else role
                    if kind == "container"
                    else "launcher",
                    **common,
                )
            )
    return out


def trainer_node_count(runtime: dict[str, Any], job: dict[str, Any]) -> int:
    """How many node pods Trainer v2 makes: the TrainJob's trainer.numNodes (less the launcher
    with runLauncherAsNode), else the node replicatedJob's parallelism. The runtime's
    mlPolicy.numNodes is the pod count of the replicatedJob labelled
    trainjob-ancestor-step: trainer, the launcher here (Trainer v2.2.0's newRuntimeInfo)."""
    mpi = runtime["spec"]["mlPolicy"]["mpi"]
    asked = (job["spec"].get("trainer") or {}).get("numNodes")
    if asked is not None:
        return max(int(asked) - 1, 1) if mpi.get("runLauncherAsNode") else int(asked)
    rjobs = {r["name"]: r for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    return int(rjobs["node"]["template"]["spec"].get("parallelism", 1))


def trainer_invocations(
    example: str, runtime: dict[str, Any], job: dict[str, Any]
) -> list[Invocation]:
    """Kubeflow Trainer v2's MPI plugin: hostfile of the node pods, no discover_hosts.sh."""
    mpi = runtime["spec"]["mlPolicy"]["mpi"]
    job_name = job["metadata"]["name"]
    n = trainer_node_count(runtime, job)
    slots = int(mpi.get("numProcPerNode", 1))
    assert mpi.get("mpiImplementation", "OpenMPI") == "OpenMPI"  # the only one Trainer runs
    nodes = [f"{job_name}-node-0-{i}.{job_name}" for i in range(n)]
    ssh_path = mpi.get("sshAuthMountPath", "/root/.ssh")
    out = []
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        containers = [("initContainer", c) for c in pod.get("initContainers") or []]
        containers += [("container", c) for c in pod["containers"]]
        for kind, c in containers:
            argv = effective_argv(c["image"], c.get("command"), c.get("args"))
            if not runs_mpiwait(argv):
                continue
            env = _env_list(c)
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
            role = "launcher"
            if kind == "container" and c["name"] == "node":
                # The plugin's additions to containers named `node`: the key everywhere, the
                # hostfile and the OMPI_MCA_* variables on the launcher; no role variable.
                mounts[ssh_path] = "mpi-ssh-auth"
                if rjob["name"] == "launcher":
                    mounts["/etc/mpi"] = "mpi-hostfile"
                    env.update(OPERATOR_ENV["OpenMPI"])
                    env["OMPI_MCA_orte_set_default_slots"] = str(slots)
                else:
                    role = "worker"
            out.append(
                Invocation(
                    example=example,
                    what=f"{rjob['name']} {kind} {c['name']}",
                    image=c["image"],
                    argv=argv,
                    env=env,
                    uid=_container_uid(c, pod, c["image"]),
                    mounts=mounts,
                    role=role,
                    hostname=f"{job_name}-{rjob['name']}-0-0",
                    hosts=nodes,
                    hostfile="".join(f"{h} slots={slots}\n" for h in nodes),
                    discover=None,
                    key_mode=0o644,  # the plugin sets no defaultMode
                    ssh_auth_path=mpi.get("sshAuthMountPath", "/root/.ssh"),
                    ssh_auth_volume="mpi-ssh-auth",
                    config_volume="mpi-hostfile",
                )
            )
    return out


def k8s_invocations(path: Path) -> list[Invocation]:
    docs = load_all(path)
    out: list[Invocation] = []
    runtimes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "TrainingRuntime"}
    for doc in docs:
        if doc["kind"] == "MPIJob":
            out += mpijob_invocations(path.name, doc)
        elif doc["kind"] == "TrainJob":
            runtime = runtimes[doc["spec"]["runtimeRef"]["name"]]
            out += trainer_invocations(path.name, runtime, doc)
    return out


def compose_invocations() -> list[Invocation]:
    compose = load_all(COMPOSE_FILE)[0]
    services = compose["services"]
    launcher = services["launcher"]
    argv = effective_argv(launcher["image"], launcher.get("entrypoint"), launcher.get("command"))
    assert runs_mpiwait(argv)
    mounts = {}
    for volume in launcher["volumes"]:
        src, dst = volume.split(":")[:2]
        mounts[dst] = src
    hostfile = (COMPOSE_DIR / "hostfile").read_text()
    hosts = [ln.split()[0] for ln in hostfile.splitlines() if ln.strip() and ln[0] != "#"]
    return [
        Invocation(
            example="compose.yaml",
            what="service launcher",
            image=launcher["image"],
            argv=argv,
            env={str(k): str(v) for k, v in (launcher.get("environment") or {}).items()},
            uid=0,
            mounts=mounts,
            hostname="launcher",
            hosts=hosts,
            hostfile=hostfile,
            discover=None,
            key_mode=0o600,  # ssh-keygen's
            ssh_auth_path="/root/.ssh",
            ssh_auth_volume="ssh-auth",
            config_volume="./hostfile",
        )
    ]


def all_invocations() -> list[Invocation]:
    out = [inv for path in K8S_EXAMPLES for inv in k8s_invocations(path)]
    return out + compose_invocations()


# --------------------------------------------------------------------------------------------
# Offline checks


def test_every_yaml_parses():
    found = all_yaml()
    assert {p.name for p in found} >= set(WORKERS), "an example named in WORKERS is missing"
    for path in found:
        assert load_all(path), f"{path} is empty"


def test_compose_file_validates_against_the_compose_specification():
    tool = _tool("check-jsonschema")
    r = subprocess.run(
        [tool, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _pod_templates(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(where, kind to validate as, object) for every pod or job template of an example."""
    out = []
    for doc in load_all(path):
        if doc["kind"] == "MPIJob":
            for rname, rspec in doc["spec"]["mpiReplicaSpecs"].items():
                out.append((f"{rname} template", "PodTemplate", rspec["template"]))
        elif doc["kind"] in ("TrainingRuntime", "ClusterTrainingRuntime"):
            for rjob in doc["spec"]["template"]["spec"]["replicatedJobs"]:
                out.append((f"replicatedJob {rjob['name']}", "Job", rjob["template"]["spec"]))
    return out


@pytest.mark.parametrize("path", K8S_EXAMPLES, ids=lambda p: p.name)
def test_pod_templates_validate_against_kubernetes_schemas(path):
    testbed.require("kubernetes-validate")
    import kubernetes_validate as kv

    templates = _pod_templates(path)
    assert templates, f"{path.name}: no pod template found"
    for version in K8S_VERSIONS:
        if version == "latest":
            version = kv.latest_version()
        for where, kind, obj in templates:
            if kind == "PodTemplate":
                resource = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x"}}
                resource["template"] = obj
            else:
                resource = {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "x"}}
                resource["spec"] = obj
            try:
                kv.validate(resource, version, strict=True)
            except kv.ValidationError as exc:
                first = str(exc).splitlines()[0]
                pytest.fail(f"{path.name} {where} (Kubernetes {version}): {first}")


def _mpiwait_env_names() -> set[str]:
    """The variables click reads: an option's own envvar, else MPIWAIT_<PARAMETER NAME>."""
    from mpiwait.cli import CONTEXT, command_line

    names: set[str] = set()
    for param in command_line.params:
        if param.param_type_name != "option" or not param.name:
            continue
        if isinstance(param.envvar, str):
            names.add(param.envvar)
        elif param.envvar:
            names.update(param.envvar)
        else:
            names.add(f"{CONTEXT['auto_envvar_prefix']}_{param.name.upper()}")
    return names


def test_every_mpiwait_env_var_in_the_examples_is_an_option():
    # click ignores an MPIWAIT_* it does not know: a renamed option would silently stop working.
    known = _mpiwait_env_names()
    for inv in all_invocations():
        for name in inv.env:
            if name.startswith("MPIWAIT_"):
                assert name in known, f"{inv.example} {inv.what}: {name} is no mpiwait option"


@pytest.mark.parametrize("path", K8S_EXAMPLES, ids=lambda p: p.name)
def test_kubernetes_example_structure(path):
    docs = load_all(path)
    invocations = k8s_invocations(path)
    assert any(inv.role in ("launcher", "discovery") for inv in invocations), (
        f"{path.name}: no launcher-side mpiwait invocation found"
    )
    for doc in docs:
        if doc["kind"] == "MPIJob":
            _check_mpijob(path.name, doc)
        elif doc["kind"] in ("TrainingRuntime", "ClusterTrainingRuntime"):
            _check_trainer_runtime(path.name, doc)
        elif doc["kind"] == "TrainJob":
            assert doc["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
            ref = doc["spec"]["runtimeRef"]
            assert ref["apiGroup"] == "trainer.kubeflow.org"
            assert any(
                d["metadata"]["name"] == ref["name"] and d["kind"] == ref["kind"] for d in docs
            )
        else:
            pytest.fail(f"{path.name}: unexpected kind {doc['kind']}")
    for inv in invocations:
        _check_invocation(inv)


def _check_mpijob(example: str, job: dict[str, Any]) -> None:
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    spec = job["spec"]
    assert set(spec["mpiReplicaSpecs"]) == {"Launcher", "Worker"}, example
    assert spec["mpiReplicaSpecs"]["Launcher"].get("replicas", 1) == 1, example
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] >= 1, example
    assert spec.get("mpiImplementation", "OpenMPI") in OPERATOR_ENV, example
    assert str(spec.get("sshAuthMountPath", "/root/.ssh")).startswith("/"), example
    for rname, rspec in spec["mpiReplicaSpecs"].items():
        pod = rspec["template"]["spec"]
        # The operator appends these volumes: a template that declares them is rejected.
        own = {v["name"] for v in pod.get("volumes") or []}
        assert not own & {"mpi-job-config", "ssh-auth"}, f"{example} {rname}: declares {own}"
        for c in pod["containers"]:
            assert "K_MPI_JOB_ROLE" not in _env_list(c), f"{example}: the operator sets it"
            if rname == "Worker":
                _check_no_late_readiness(f"{example} {c['name']}", c.get("readinessProbe"))


def _check_no_late_readiness(where: str, probe: dict[str, Any] | None) -> None:
    """A worker's name resolves only once its pod is Ready: a probe that passes only a period
    after sshd listens holds mpiwait's go back by that period (docs/deploy.md, "Readiness
    probes on the workers")."""
    if probe is None:
        return
    assert probe.get("periodSeconds", 10) <= 1 and not probe.get("initialDelaySeconds"), (
        f"{where}: readinessProbe {probe} delays the worker's name up to its period"
    )


def test_the_operators_worker_probe_would_be_caught():
    """The control: mpi-operator's pi-mpich probe, the one entrypoint.yaml dropped."""
    with pytest.raises(AssertionError, match="delays the worker's name"):
        _check_no_late_readiness(
            "pi-mpich", {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 2}
        )
    _check_no_late_readiness("fast", {"tcpSocket": {"port": 2222}, "periodSeconds": 1})


def _check_trainer_runtime(example: str, runtime: dict[str, Any]) -> None:
    assert runtime["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    jobs = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    assert set(jobs) >= {"launcher", "node"}, example
    # numNodes is the launcher's pod count (it carries the trainer ancestor label): one launcher.
    labels = jobs["launcher"]["template"].get("metadata", {}).get("labels", {})
    if labels.get("trainer.kubeflow.org/trainjob-ancestor-step") == "trainer":
        assert runtime["spec"]["mlPolicy"]["numNodes"] == 1, f"{example}: two launchers"
    for j in jobs.values():
        pod = j["template"]["spec"]["template"]["spec"]
        # Trainer's MPI plugin mounts its volumes into containers named `node` only.
        assert pod["containers"][0]["name"] == "node", example
        own = {v["name"] for v in pod.get("volumes") or []}
        assert not own & {"mpi-hostfile", "mpi-ssh-auth"}, example


def _check_invocation(inv: Invocation) -> None:
    where = f"{inv.example} {inv.what}"
    if inv.role == "worker":
        return
    # The launcher side must see the hosts and the key where the operator puts them.
    assert inv.mounts.get("/etc/mpi") == inv.config_volume, f"{where}: /etc/mpi not mounted"
    assert inv.mounts.get(inv.ssh_auth_path) == inv.ssh_auth_volume, (
        f"{where}: {inv.ssh_auth_volume} not mounted at {inv.ssh_auth_path}"
    )
    facts = IMAGES[inv.image]
    if inv.key_mode == 0o600:
        # Only the key's owner (root) can read it: mpiwait must run as root, like mpirun.
        assert inv.uid == 0, f"{where}: the key is root's with mode 0600; run as root"
    if not facts.etc_ssh:
        # mpiwait's image has no ssh_config: port and user must come with the invocation.
        args, env = " ".join(inv.argv), inv.env
        assert re.search(r"(^| )(-p|--port)[ =]", args) or "MPIWAIT_PORT" in env, where
        if inv.uid not in facts.users:
            assert re.search(r"(^| )(-l|--user)[ =]", args) or "MPIWAIT_USER" in env, (
                f"{where}: uid {inv.uid} has no passwd entry in {inv.image}: pass --user"
            )


def test_images_run_mpiwait_the_documented_way():
    stage = final_stage(REPO / "Dockerfile")
    assert stage.entrypoint == [MPIWAIT_IN_IMAGE]
    assert stage.user is not None and stage.user.split(":")[0].isdigit() and stage.user != "0"
    assert stage.env.get("HOME") == "/home/mpiuser"
    assert stage.env["PATH"].startswith("/opt/mpiwait/bin:")
    # Nothing but the self-contained directory and a minimal /etc (root's passwd entry) and /tmp
    # from the builder, on an empty base: no shell, no pip, no compiler, no cache.
    assert stage.base == "scratch"
    # The bundle first: the classic builder's cache could otherwise hand an arm64 build the
    # amd64 layer of the same /rootfs/ copy (the Dockerfile says why).
    assert stage.copies == [
        ["--from=builder", "/opt/mpiwait", "/opt/mpiwait"],
        ["--from=builder", "/rootfs/", "/"],
    ]
    # The pattern for an MPI image copies the same directory and runs the same entrypoint.
    mpich = final_stage(K8S / "entrypoint.Dockerfile")
    assert mpich.copies == [["--from=mpiwait", "/opt/mpiwait", "/opt/mpiwait"]]
    assert mpich.entrypoint == [MPIWAIT_IN_IMAGE]
    froms = [rest for kw, rest in instructions(K8S / "entrypoint.Dockerfile") if kw == "FROM"]
    assert froms[0] == f"{MPIWAIT_IMAGE} AS mpiwait"
    # Intel MPI and Trainer's Open MPI: the same pattern, and no entrypoint.sh behind mpiwait
    # (its nslookup loop is what handing hydra the interface replaces).
    for name in ("intel-entrypoint.Dockerfile", "trainer-entrypoint.Dockerfile"):
        stage = final_stage(K8S / name)
        assert stage.copies == [["--from=mpiwait", "/opt/mpiwait", "/opt/mpiwait"]], name
        assert stage.entrypoint == [MPIWAIT_IN_IMAGE], name
    intel = final_stage(K8S / "intel-entrypoint.Dockerfile")
    assert intel.env["PATH"].startswith("/opt/intel/oneapi/mpi/latest/bin:")
    # The demo image installs ssh_config where the Compose test lays it out.
    demo = final_stage(COMPOSE_DIR / "Dockerfile")
    assert ["examples/docker-compose/ssh_config", "/etc/ssh/ssh_config.d/mpi.conf"] in demo.copies


def _dockerignored(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.strip("/")
        if any(fnmatch(c, pat) for c in candidates):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_what_the_builds_copy_and_nothing_else():
    patterns = [
        ln.strip()
        for ln in (REPO / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    for dockerfile in (REPO / "Dockerfile", COMPOSE_DIR / "Dockerfile"):  # built from the root
        for kw, rest in instructions(dockerfile):
            if kw != "COPY" or rest.startswith("--from"):
                continue
            for src in rest.split()[:-1]:
                assert not _dockerignored(patterns, src), f"{dockerfile.name} copies ignored {src}"
    assert not _dockerignored(patterns, "mpiwait/cli.py")
    ignored = (".git/HEAD", ".venv/bin/python", "tests/unit/test_cli.py", "mpiwait/a/__pycache__/b")
    for path in ignored:
        assert _dockerignored(patterns, path), f"{path} would be sent to the build"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_dockerfile_lints_clean(dockerfile):
    hadolint = _tool("hadolint")
    r = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _tool(name: str) -> str:
    """A console script of the test extra: next to this Python first, then on PATH."""
    return str(testbed.require(name).path)


# --------------------------------------------------------------------------------------------
# Executable checks

# Runs as root inside the bed's launcher context (a private mount namespace): makes the files a
# container would see, then becomes the container's process (its uid, env, hostname).
PODRUN = r"""
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
count = 0

def sh(*argv):
    subprocess.run(argv, check=True)

def shadow(d):
    # Replace directory d, in this namespace only, by a tmpfs that holds binds of its entries:
    # it becomes traversable by anyone and new entries can be made in it.
    global count
    count += 1
    keep = os.path.join(spec["stage"], str(count))
    os.mkdir(keep)
    sh("mount", "--rbind", d, keep)
    sh("mount", "-t", "tmpfs", "-o", "mode=755", "podrun", d)
    for name in os.listdir(keep):
        src, dst = os.path.join(keep, name), os.path.join(d, name)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
            continue
        if os.path.isdir(src):
            os.mkdir(dst)
        else:
            open(dst, "w").close()
        sh("mount", "--rbind", src, dst)

def make(path, is_dir):
    parent = path if is_dir else os.path.dirname(path)
    existing = parent
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    if existing != parent:
        shadow(existing)
        os.makedirs(parent)
    if not is_dir and not os.path.exists(path):
        if existing == parent:
            shadow(parent)
        open(path, "w").close()

for d in spec["traverse"]:
    shadow(d)
for src, dst in spec["binds"]:
    make(dst, os.path.isdir(src))
    sh("mount", "--bind", src, dst)
env = [f"{k}={v}" for k, v in spec["env"].items()]
os.execvp("unshare", [
    "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', spec["hostname"],
    "setpriv", f"--reuid={spec['uid']}", f"--regid={spec['gid']}", "--clear-groups",
    "env", "-i", *env, *spec["argv"],
])
"""


# How a run here is started: its output read by testbed.Proc, no terminal input.
PIPED: dict[str, Any] = dict(
    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
)


def _mpiwait_here() -> str:
    return str(testbed.require("mpiwait-script").path)


def _not_traversable(paths: list[str]) -> list[str]:
    """Ancestors of ``paths`` that others cannot pass through (e.g. /root holding pyenv)."""
    out: list[str] = []
    for p in paths:
        parts = Path(p).resolve().parts
        for i in range(2, len(parts)):
            d = str(Path(*parts[:i]))
            with contextlib.suppress(OSError):
                if not os.stat(d).st_mode & stat.S_IXOTH and d not in out:
                    out.append(d)
    return sorted(out, key=len)


def _kube_volume(dest: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    """A directory laid out as the kubelet's atomic writer leaves a Secret or ConfigMap volume:
    the files in a timestamped directory, ``..data`` pointing at it, each name a symlink."""
    dest.mkdir(parents=True)
    data = dest / "..2025_01_01_00_00_00.000000000"
    data.mkdir()
    for name, (content, mode) in files.items():
        (data / name).write_bytes(content)
        (data / name).chmod(mode)
        (dest / name).symlink_to(f"..data/{name}")
    (dest / "..data").symlink_to(data.name)
    dest.chmod(0o1777)
    return dest


def _passwd_file(dest: Path, inv: Invocation) -> tuple[Path, int, int]:
    """/etc/passwd with the image's accounts only; (file, uid, gid) to run as on this machine."""
    lines, uid, gid = [], inv.uid, 0
    for image_uid, (name, home) in sorted(IMAGES[inv.image].users.items()):
        if image_uid == 0:
            lines.append(f"root:x:0:0:root:{home}:/bin/sh")
            continue
        pw = pwd.getpwnam(name)  # made by the bed (its login user)
        lines.append(f"{name}:x:{pw.pw_uid}:{pw.pw_gid}::{home}:/bin/sh")
        if image_uid == inv.uid:
            uid, gid = pw.pw_uid, pw.pw_gid
    dest.write_text("\n".join(lines) + "\n")
    dest.chmod(0o644)
    return dest, uid, gid


def _swap_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv with COMMAND prefixed by echo, COMMAND), split by mpiwait's own parser."""
    from mpiwait.cli import parse
    from mpiwait.settings import Run

    run = parse(argv[1:])
    assert isinstance(run, Run), f"mpiwait rejects the example's arguments: {argv}"
    command = list(run.command)
    options = argv[: len(argv) - len(command)]
    return [*options, "echo", *command] if command else options, command


def run_in_pod(
    bed: testbed.TestBed,
    inv: Invocation,
    work: Path,
    *,
    extra: list[str] | None = None,
    timeout: float = 60,
) -> tuple[testbed.Result, list[str]]:
    """Run the invocation as its container would, on ``bed`` (``extra``: options added first);
    return the result (no traceback, no key material in it) and the example's COMMAND."""
    work.mkdir(parents=True)
    key = bed.key_path.read_bytes()
    pub = bed.pubkey_path.read_bytes()
    if inv.example == "compose.yaml":
        ssh_files = {"id_ed25519": (key, 0o600), "id_ed25519.pub": (pub, 0o644)}
        ssh_files["authorized_keys"] = (pub, 0o644)
        ssh_auth = work / "ssh-auth"
        ssh_auth.mkdir()
        for name, (content, mode) in ssh_files.items():  # a named volume: plain files
            (ssh_auth / name).write_bytes(content)
            (ssh_auth / name).chmod(mode)
        etc_mpi = work / "etc-mpi"
        etc_mpi.mkdir()
        (etc_mpi / "hostfile").write_text(inv.hostfile)
    else:
        ssh_auth = _kube_volume(
            work / "ssh-auth",
            {
                "id_rsa": (key, inv.key_mode),
                "id_rsa.pub": (pub, inv.key_mode),
                "authorized_keys": (pub, inv.key_mode),
            },
        )
        files = {"hostfile": (inv.hostfile.encode(), 0o444)}
        if inv.discover is not None:
            files["discover_hosts.sh"] = (inv.discover.encode(), 0o555)
        etc_mpi = _kube_volume(work / "etc-mpi", files)
    etc_ssh = work / "etc-ssh"
    for name, text in IMAGES[inv.image].etc_ssh.items():
        (etc_ssh / name).parent.mkdir(parents=True, exist_ok=True)
        (etc_ssh / name).write_text(text)
    etc_ssh.mkdir(exist_ok=True)
    passwd, uid, gid = _passwd_file(work / "passwd", inv)
    (work / "stage").mkdir()
    shm = work / "shm"
    shm.mkdir()
    shm.chmod(0o1777)

    argv, command = _swap_command(inv.argv)
    mpiwait = _mpiwait_here()
    argv = [mpiwait, *(extra or []), *argv[1:]]
    env = {**inv.image_env(), testbed.ENV_TAG: bed.bed_id}
    traverse = []
    if uid != 0:
        import mpiwait as package

        needed = [mpiwait, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix]
        needed += [str(Path(package.__file__).parent), inv.ssh_auth_path]
        traverse = _not_traversable(needed)
    spec = {
        "stage": str(work / "stage"),
        "traverse": traverse,
        "binds": [
            [str(ssh_auth), inv.ssh_auth_path],
            [str(etc_ssh), "/etc/ssh"],
            [str(passwd), "/etc/passwd"],
            [str(shm), "/dev/shm"],  # each pod has its own (mpiwait --list-ready writes there)
        ],
        "uid": uid,
        "gid": gid,
        "env": env,
        "hostname": inv.hostname,
        "argv": argv,
    }
    cmd = [sys.executable, "-c", PODRUN, json.dumps(spec)]
    testbed.register_key(bed.key_path)
    began = time.monotonic()
    p = bed.popen(cmd, etc_mpi=etc_mpi, ssh_config=False, **PIPED)
    return testbed.Proc(p, cmd, began).finish(timeout), command


def _bed_for(bed_factory, inv: Invocation) -> testbed.TestBed:
    workers = WORKERS[inv.example]
    return bed_factory(
        len(inv.hosts),
        names=inv.hosts,
        user=workers["user"],
        port=workers["port"],
        key_type="ecdsa-p521-pem",
    )


LAUNCHER_INVOCATIONS = [inv for inv in all_invocations() if inv.role == "launcher"]


@pytest.mark.root
@pytest.mark.parametrize(
    "inv", LAUNCHER_INVOCATIONS, ids=[f"{i.example}:{i.what}" for i in LAUNCHER_INVOCATIONS]
)
def test_example_waits_for_real_workers_then_runs_its_command(inv, bed, tmp_path):
    b = _bed_for(bed, inv)
    workers = WORKERS[inv.example]
    # The launcher's own entry (runLauncherAsWorker) resolves, to the launcher: the operator's
    # Service publishes not-ready addresses then, and mpiwait waits for that name to resolve.
    for line in inv.hostfile.splitlines():
        name = line.split()[0].split(":")[0] if line.strip() else ""
        if name and name not in inv.hosts:
            b.publish_name(name)

    # The plan: every worker (the launcher's own entry left out), with the port, user and key
    # that mpirun's ssh will use in that container.
    r, _ = run_in_pod(b, inv, tmp_path / "plan", extra=["--dry-run"])
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr}"
    plan = [ln.split() for ln in r.stdout.splitlines() if ln and not ln.startswith("#")]
    assert [row[0] for row in plan] == inv.hosts, r.stdout
    for row in plan:
        fields = dict(item.split("=", 1) for item in row[1:])
        assert fields["port"] == str(workers["port"]), r.stdout
        assert fields["user"] == workers["user"], r.stdout
        assert fields["identity"].startswith(inv.ssh_auth_path + "/id_"), r.stdout

    # For real, with one worker's sshd coming up late (as after a long image pull): only once
    # mpiwait has tried it (a SYN to it, refused), whatever the pod's set-up took.
    late = len(inv.hosts) - 1
    b.stop_sshd(late)
    b.syns(late)
    comes_up = threading.Thread(target=_start_once_tried, args=(b, late), daemon=True)
    comes_up.start()
    r, command = run_in_pod(b, inv, tmp_path / "pod")
    comes_up.join(30)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr}"
    assert "mpiwait: error" not in r.stderr, r.stderr
    # It saw the late worker down and waited for it (no COMMAND, no exit 0 before that).
    down = rf"^mpiwait: \[\+[\d.]+s\] {re.escape(inv.hosts[late])}: tcp refused"
    assert re.search(down, r.stderr, re.M), f"did not see {inv.hosts[late]} down\n{r.stderr}"
    # ...and logged into it once it was up, before it ended (the pod's only ssh client). sshd's
    # monitor writes the line its pre-auth child sends it, maybe after the client got in.
    accepted = f"Accepted publickey for {workers['user']} "
    log = b.hosts[late].sshd_log
    with contextlib.suppress(AssertionError):
        testbed.wait_until(lambda: accepted in log.read_text(errors="replace"), 10, accepted)
    assert accepted in log.read_text(errors="replace"), f"{r.stderr}\n{log.read_text()}"
    if command:
        # mpiwait became COMMAND, with the example's arguments untouched (echo joins them).
        assert r.stdout == " ".join(command) + "\n", r.stdout
    else:
        assert r.stdout == "", r.stdout


def _start_once_tried(b: testbed.TestBed, i: int) -> None:
    deadline = time.monotonic() + 60
    while b.syns(i) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    b.start_sshd(i)


DISCOVERY_INVOCATIONS = [inv for inv in all_invocations() if inv.role == "discovery"]


@pytest.mark.root
@pytest.mark.parametrize(
    "inv", DISCOVERY_INVOCATIONS, ids=[f"{i.example}:{i.what}" for i in DISCOVERY_INVOCATIONS]
)
def test_discovery_script_lists_only_workers_that_accept_a_login(inv, bed, tmp_path):
    b = _bed_for(bed, inv)
    slots = re.search(r"slots=(\d+)|:(\d+)", inv.hostfile)
    assert slots is not None, inv.hostfile
    count = slots.group(1) or slots.group(2)
    # One worker's sshd is not up yet: horovodrun must not be handed it.
    late = len(inv.hosts) - 1
    b.stop_sshd(late)
    r, command = run_in_pod(b, inv, tmp_path / "starting")
    assert command == [], f"{inv.example}: the discovery script takes no COMMAND"
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert sorted(r.stdout.splitlines()) == sorted(f"{h}:{count}" for h in inv.hosts[:late])
    b.start_sshd(late)
    r, _ = run_in_pod(b, inv, tmp_path / "all-up")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert sorted(r.stdout.splitlines()) == sorted(f"{h}:{count}" for h in inv.hosts)


def test_worker_role_steps_aside_at_once(tmp_path):
    workers = [inv for inv in all_invocations() if inv.role == "worker"]
    assert workers, "no example runs mpiwait on the workers (entrypoint.yaml should)"
    mpiwait = _mpiwait_here()
    for inv in workers:
        argv, command = _swap_command(inv.argv)
        env = {**inv.image_env(), "HOME": str(tmp_path)}
        cmd = [mpiwait, *argv[1:]]
        began = time.monotonic()
        p = subprocess.Popen(cmd, env=env, start_new_session=True, **PIPED)
        r = testbed.Proc(p, cmd, began).finish(30)
        assert r.returncode == 0, r
        assert r.stdout.split() == command, r
        assert r.elapsed < 10, r


def test_compose_keygen_makes_the_key_the_launcher_and_workers_use(tmp_path):
    # Run the keygen service's own command, with its volume at a scratch path.
    testbed.require("ssh-keygen")
    keygen = load_all(COMPOSE_FILE)[0]["services"]["keygen"]
    script = keygen["command"][-1].replace("/root/.ssh", str(tmp_path))
    for _ in range(2):  # the second run must leave the key alone
        r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    key = tmp_path / "id_ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    pub = (tmp_path / "id_ed25519.pub").read_text()
    assert (tmp_path / "authorized_keys").read_text() == pub
    launcher = load_all(COMPOSE_FILE)[0]["services"]["launcher"]
    assert [v for v in launcher["volumes"] if "ssh" in v] == ["ssh-auth:/root/.ssh:ro"]


def test_compose_workers_and_hostfile_agree():
    services = load_all(COMPOSE_FILE)[0]["services"]
    (inv,) = compose_invocations()
    assert sorted(inv.hosts) == sorted(s for s in services if s.startswith("worker"))
    for name in inv.hosts:
        assert services[name]["command"][-1].endswith("exec /usr/sbin/sshd -De")
        assert "ssh-auth:/root/.ssh:ro" in services[name]["volumes"]
    # `run launcher` starts the workers (depends_on), but waiting until they accept a login is
    # mpiwait's job: Compose only waits for them to be started.
    deps = services["launcher"]["depends_on"]
    assert deps["keygen"] == {"condition": "service_completed_successfully"}
    assert {n: deps[n] for n in inv.hosts} == {
        n: {"condition": "service_started"} for n in inv.hosts
    }
    for name in inv.hosts:
        assert services[name]["hostname"] == name  # what `mpirun ... hostname` prints
    # Debian 12's docker-compose 1.29 rejects a top-level `name:`.
    assert "name" not in load_all(COMPOSE_FILE)[0]
