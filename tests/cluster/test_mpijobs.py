"""MPIJobs run by the real mpi-operator v0.8.2 on a real Kubernetes 1.37 of three nodes, with
mpiwait as users deploy it (the examples in examples/kubernetes/, images built here and pulled
from the cluster's registry, names aside).

What a user would see is what is checked: the MPIJob's condition, the launcher's pods (how many,
how often restarted, their exit), mpirun's output in ``kubectl logs`` and mpiwait's."""

from __future__ import annotations

import json
import re
import shlex
import time
from datetime import datetime
from typing import Any

import pytest
from testbed.cluster import images
from testbed.cluster.mpijob import (
    LATE_START,
    Jobs,
    as_deployed,
    hold_back,
    load_example,
    restarts,
    stamp,
    terminations,
    without_entrypoint,
    without_init,
    worker_image,
)

HELD_BACK = 20  # s: one worker's sshd starts this late (hold_back); real pulls: test_pulls.py
# The other examples' late worker: it need only be later than the launcher's first probe (about
# 3 s after the pod starts), which ``assert_waited_for`` checks in mpiwait's log.
LATE = 10


def _failed_launch(jobs: Jobs, job: str) -> dict | None:
    """A launcher pod whose mpirun failed: restarted in place (the operator's launcher pods
    restart on failure, in CrashLoopBackOff) or failed for good."""
    for pod in jobs.launcher_pods(job):
        if restarts(pod) >= 1 or pod["status"].get("phase") == "Failed":
            return pod
    return None


def assert_one_clean_launch(
    jobs: Jobs, job: str, seen: list[str], container: str, timeout: float = 300
) -> str:
    """The job (an MPIJob, or a TrainJob through TrainJobs) succeeded with one launcher pod,
    never restarted, whose ``container`` logged each of ``seen`` (the workers' names: mpirun
    reached them). Returns that log."""
    assert jobs.wait_finished(job, timeout) == jobs.SUCCEEDED, jobs.describe(job)
    launchers = jobs.launcher_pods(job)
    assert len(launchers) == 1, jobs.describe(job)
    assert launchers[0]["status"]["phase"] == "Succeeded"
    assert restarts(launchers[0]) == 0
    assert jobs.launcher_job(job)["status"].get("failed", 0) == 0
    out = jobs.logs(launchers[0]["metadata"]["name"], container)
    for s in seen:
        assert s in out, out
    return out


def assert_waited_for(log: str, early: str, late: str, late_by: int) -> None:
    """mpiwait's log: both workers passed, ``late`` (its sshd held back ``late_by`` s from its
    pod's start, about when the launcher's starts) no sooner than half that after mpiwait began,
    and only then did mpiwait say go. Not their order: a stall of the cluster's DNS longer than
    the hold-back (every name timing out) lets both pass in the same round."""
    first = re.search(rf"\] \d+/\d+ ready \({re.escape(early)}\.", log)
    last = re.search(rf"\[\+(\d+(?:\.\d)?)s\] \d+/\d+ ready \({re.escape(late)}\.", log)
    go = re.search(r"^(?:mpiwait: )?all \d+ hosts ready in ", log, re.M)
    assert first and last and go and max(first.start(), last.start()) < go.start(), log
    assert float(last.group(1)) >= late_by / 2, log


def test_initcontainer_example_one_worker_late(jobs: Jobs) -> None:
    doc = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, HELD_BACK)
    job = jobs.create(doc)
    workers = [f"{job}-worker-0", f"{job}-worker-1"]
    assert_one_clean_launch(jobs, job, workers, "tensorflow-benchmarks")
    launcher = jobs.launcher_pods(job)[0]["metadata"]["name"]
    waited = jobs.logs(launcher, "wait-for-workers")
    assert_waited_for(waited, f"{job}-worker-0", f"{job}-worker-1", HELD_BACK)


def assert_first_launch_fails(jobs: Jobs, doc: dict[str, Any], container: str) -> None:
    """``doc``'s mpirun (in ``container``) starts before a worker can take it and dies, saying
    so in ``kubectl logs`` (``assert_launch_failed``)."""
    assert_launch_failed(jobs, jobs.create(doc), container)


def assert_launch_failed(jobs: Jobs, job: str, container: str) -> dict[str, Any]:
    """``job``'s mpirun (in ``container``) died, saying so in ``kubectl logs``; the launcher
    restarts (the operator's launcher pods restart on failure: CrashLoopBackOff) or, once they
    give up, the Job counts a failed pod. Returns that launcher pod."""
    failure = ("ORTE", "resolve hostname", "daemon")

    def mpirun_said_why() -> str:
        # The log of the try that failed: the current container's or, once restarted, the
        # previous one's (read while the kubelet still has it).
        for pod in jobs.launcher_pods(job):
            for previous in (False, True):
                said = jobs.logs(pod["metadata"]["name"], container, previous=previous)
                if any(f in said for f in failure):
                    return said
        return ""

    said = jobs.wait_for("mpirun's failure in kubectl logs", mpirun_said_why, timeout=180)
    failed = jobs.wait_for("a failed launch", lambda: _failed_launch(jobs, job), timeout=120)
    assert isinstance(failed, dict), said
    return failed


def test_initcontainer_example_without_mpiwait_fails_its_first_launch(jobs: Jobs) -> None:
    """The control: the seed issue's scene, the same job without mpiwait."""
    doc = hold_back(without_init(as_deployed(load_example("initcontainer.yaml"))), 1, HELD_BACK)
    assert_first_launch_fails(jobs, doc, "tensorflow-benchmarks")


def test_entrypoint_example_one_image_both_roles(jobs: Jobs) -> None:
    doc = hold_back(as_deployed(load_example("entrypoint.yaml")), 1, LATE)
    job = jobs.create(doc)
    out = assert_one_clean_launch(jobs, job, [f"{job}-worker-0", f"{job}-worker-1"], "mpi-launcher")
    assert "pi on" in out
    assert_waited_for(out, f"{job}-worker-0", f"{job}-worker-1", LATE)
    # Workers: mpiwait stepped aside (K_MPI_JOB_ROLE=worker) and sshd runs as the pod's process.
    for w in jobs.worker_pods(job):
        assert restarts(w) == 0


def test_intel_entrypoint_example_hydra_calls_back_by_address(jobs: Jobs) -> None:
    """intel-entrypoint.yaml: Intel MPI's hydra proxies on the workers call back to the launcher;
    mpiwait, the image's ENTRYPOINT, hands mpirun the interface the workers answered on, so the
    call-back goes to the launcher's address (its name resolves only once its pod is Ready)."""
    doc = hold_back(as_deployed(load_example("intel-entrypoint.yaml")), 1, LATE)
    job = jobs.create(doc)
    out = assert_one_clean_launch(jobs, job, [f"{job}-worker-0", f"{job}-worker-1"], "mpi-launcher")
    assert out.count("pi on") == 2, out
    assert_waited_for(out, f"{job}-worker-0", f"{job}-worker-1", LATE)
    assert "I_MPI_HYDRA_IFACE=eth0" in out, out
    for w in jobs.worker_pods(job):
        assert restarts(w) == 0


def test_run_launcher_as_worker_example(jobs: Jobs) -> None:
    """The launcher runs ranks too (listed first in the hostfile); mpiwait, an initContainer
    as uid 1000 on port 2222, waits for the two workers and not for its own pod."""
    doc = hold_back(as_deployed(load_example("run-launcher-as-worker.yaml")), 1, LATE)
    job = jobs.create(doc)
    hosts = [f"{job}-launcher", f"{job}-worker-0", f"{job}-worker-1"]
    out = assert_one_clean_launch(jobs, job, hosts, "mpi-launcher")
    assert out.count("pi on") == 3, out
    launcher = jobs.launcher_pods(job)[0]["metadata"]["name"]
    waited = jobs.logs(launcher, "wait-for-workers")
    assert_waited_for(waited, f"{job}-worker-0", f"{job}-worker-1", LATE)


def test_launcher_script_example(jobs: Jobs) -> None:
    """bash-entrypoint.yaml: COMMAND is a bash script that calls mpirun (Open MPI 5)."""
    doc = hold_back(as_deployed(load_example("bash-entrypoint.yaml")), 1, LATE)
    job = jobs.create(doc)
    out = assert_one_clean_launch(jobs, job, [f"{job}-worker-0", f"{job}-worker-1"], "mpi-launcher")
    assert "pi on 2 workers" in out, out
    assert_waited_for(out, f"{job}-worker-0", f"{job}-worker-1", LATE)


def _launcher_logs(jobs: Jobs, job: str, container: str) -> str:
    """Every run of ``container`` in the job's launcher pods the kubelet still has: the current
    one's log and, once restarted, the one before it."""
    return "".join(
        jobs.logs(pod["metadata"]["name"], container, previous=previous)
        for pod in jobs.launcher_pods(job)
        for previous in (True, False)
    )


def _at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


# Workers whose prted is not where mpirun starts it (/usr/bin/prted: Open MPI 5 passes its
# prefix), each with what mpiwait then says (the termination message's first line, after the
# worker's name, and its hint). "hidden": images.PI_OPENMPI_HIDDEN_PRTED as built, prted in
# /opt/openmpi/bin, on PATH for interactive shells only. "on-path": the same image with that
# folder put on the non-interactive PATH too (first in .bashrc, before its early return), as
# a PATH fix would: mpirun still runs /usr/bin/prted.
PRTED_MISPLACED = {
    "hidden": (
        "no prted at /usr/bin/prted (Open MPI 5's launch would fail: 'No such file or directory')",
        "install the MPI at the same path in the worker image as in the launcher's (mpirun "
        "starts prted as /usr/bin/prted), or point mpirun at the workers' install (--prefix)",
    ),
    "on-path": (
        "no prted at /usr/bin/prted; prted is at /opt/openmpi/bin/prted",
        "install the MPI at the same path in the launcher and worker images, or point mpirun "
        "at the workers' install (mpirun --prefix)",
    ),
}
# What Open MPI 5's mpirun says either way, on the launcher (from bash on the worker).
PRTED_NOT_FOUND = "bash: line 1: /usr/bin/prted: No such file or directory"


def _prted_misplaced(doc: dict[str, Any], case: str) -> dict[str, Any]:
    """``doc`` (bash-entrypoint.yaml) with its workers as PRTED_MISPLACED's ``case``; the
    launcher keeps the example's image."""
    doc = worker_image(doc, images.PI_OPENMPI_HIDDEN_PRTED)
    if case == "on-path":
        worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        line = "export PATH=/opt/openmpi/bin:$PATH"
        worker["args"] = [
            "sh",
            "-c",
            f"sed -i '1i {line}' ~/.bashrc && exec {shlex.join(worker['args'])}",
        ]
    return doc


@pytest.mark.parametrize("case", PRTED_MISPLACED)
def test_misplaced_prted_control_crash_loops(jobs: Jobs, case: str) -> None:
    """The control: bash-entrypoint.yaml with the workers' prted not at /usr/bin/prted, and
    the launcher's script run at once (mpiwait, the ENTRYPOINT, replaced; the PRRTE variables
    it would add set by hand). mpirun logs in to the workers (its first tries may fail before
    their names resolve), bash there finds no /usr/bin/prted, mpirun fails and the launcher
    crash-loops."""
    doc = without_entrypoint(
        _prted_misplaced(as_deployed(load_example("bash-entrypoint.yaml")), case)
    )
    job = jobs.create(doc)

    def said() -> str:
        out = _launcher_logs(jobs, job, "mpi-launcher")
        return out if PRTED_NOT_FOUND in out else ""

    out = jobs.wait_for(f"{PRTED_NOT_FOUND!r} in kubectl logs", said, timeout=180)
    assert "PRTE has lost communication with a remote daemon." in out, out
    assert "pi on 2 workers" in out, out  # the script ran, and mpirun after it
    assert jobs.wait_for("a failed launch", lambda: _failed_launch(jobs, job), timeout=120), out


@pytest.mark.parametrize("case", PRTED_MISPLACED)
def test_misplaced_prted_exits_3_and_says_why(jobs: Jobs, case: str) -> None:
    """bash-entrypoint.yaml as deployed, the workers' prted not at /usr/bin/prted: mpiwait
    logs in, finds no prted where mpirun will start it and exits 3 within seconds of the
    workers being up (not at MPIWAIT_TIMEOUT's 600 s), without running the script; the
    launcher's termination message (``kubectl describe pod``) names the worker, the daemon
    and the remedy."""
    doc = _prted_misplaced(as_deployed(load_example("bash-entrypoint.yaml")), case)
    job = jobs.create(doc)

    def first_end() -> dict[str, Any] | None:
        for pod in jobs.launcher_pods(job):
            for end in terminations(pod, "mpi-launcher"):
                return end
        return None

    end = jobs.wait_for("the launcher's first end", first_end, timeout=180)
    out = _launcher_logs(jobs, job, "mpi-launcher")
    assert end["exitCode"] == 3, (end, out)
    what, hint = PRTED_MISPLACED[case]
    worker = rf"{re.escape(job)}-worker-[01]\.\S+"
    message = end.get("message", "")
    assert re.fullmatch(
        rf"error: {worker}: {re.escape(what)}\nhint: {re.escape(hint)}\n", message
    ), message
    # mpiwait's own log says the same, and the script (which echoes before mpirun) never ran.
    assert (
        "mpiwait: daemon check: prted at /usr/bin/prted (Open MPI 5's mpirun passes its prefix)"
        in out
    ), out
    assert re.search(rf"^mpiwait: error: {worker}: {re.escape(what)}$", out, re.M), out
    assert "pi on" not in out, out
    # Within seconds of the workers being up: from the later of the launcher's start and the
    # last worker's Ready to mpiwait's exit.
    ready = [
        _at(c["lastTransitionTime"])
        for w in jobs.worker_pods(job)
        for c in w["status"].get("conditions", [])
        if c["type"] == "Ready" and c["status"] == "True"
    ]
    assert len(ready) == 2, jobs.describe(job)
    took = (_at(end["finishedAt"]) - max(_at(end["startedAt"]), *ready)).total_seconds()
    assert took < 30, (took, end, out)


REPLACED_LATE = 45  # s: worker 1's late start, long enough to replace worker 0 before it


def test_worker_replaced_after_it_passed(jobs: Jobs) -> None:
    """Worker 0 passes, then its pod is deleted about 2 s before worker 1 arrives: the operator
    makes a new pod with the same name and a new address. mpiwait's log says worker 0 was lost
    before worker 1 was ready, and ready again after the loss (the new pod, waited for), and
    mpirun reaches it."""
    doc = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, REPLACED_LATE)
    job = jobs.create(doc)
    w0, w1 = f"{job}-worker-0", f"{job}-worker-1"

    def launcher_log() -> str:
        pods = jobs.launcher_pods(job)
        return jobs.logs(pods[0]["metadata"]["name"], "wait-for-workers") if pods else ""

    def w0_passed() -> bool:
        return bool(re.search(rf"\d+/2 ready \({re.escape(w0)}\.", launcher_log()))

    def w1_sleeping() -> float | None:
        for s in jobs.get("pod", w1)["status"].get("initContainerStatuses", []):
            if s["name"] == LATE_START and "running" in s["state"]:
                return stamp(s["state"]["running"]["startedAt"])
        return None

    jobs.wait_for("worker 0 passed", w0_passed, timeout=120)
    arrives = jobs.wait_for("worker 1's late start", w1_sleeping, timeout=60) + REPLACED_LATE
    assert time.time() < arrives - 5, "worker 1 arrives too soon to replace worker 0 before it"
    time.sleep(arrives - 2 - time.time())
    old = jobs.get("pod", w0)
    jobs.kubectl("delete", "pod", w0, "--grace-period=1", "--wait=false")

    def replaced() -> dict | None:  # seen while it runs: cleanPodPolicy deletes it at the end
        pod = json.loads(jobs.kubectl("get", "pod", w0, "-o", "json", check=False).stdout or "{}")
        fresh = pod and pod["metadata"]["uid"] != old["metadata"]["uid"]
        return pod if fresh and pod["status"].get("podIP") else None

    new = jobs.wait_for("worker 0 replaced", replaced, timeout=90)
    assert new["status"]["podIP"] != old["status"]["podIP"]
    assert_one_clean_launch(jobs, job, [w0, w1], "tensorflow-benchmarks")
    log = launcher_log()
    lost = re.search(rf"^mpiwait: \[\+[\d.]+s\] {re.escape(w0)}\.\S* no longer ready", log, re.M)
    assert lost, log
    after = log[lost.end() :]
    assert re.search(rf"ready \({re.escape(w1)}\.", after), log  # lost before the last arrived
    assert re.search(rf"ready \({re.escape(w0)}\.", after), log  # the new pod, waited for


def test_list_ready_follows_discover_hosts_as_the_kubelet_updates_it(jobs: Jobs) -> None:
    """horovod-elastic.yaml's discovery (``mpiwait --list-ready``), called every second as
    horovodrun calls it, against the operator's discover_hosts.sh in the kubelet's volume. Worker
    1 runs (so the operator lists it in the file) but starts its sshd 20 s late: mpiwait lists
    worker 0 alone while the file, read beside it, already lists both; then both."""
    doc = as_deployed(load_example("horovod-elastic.yaml"))
    doc["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2
    worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["command"] = ["sh", "-c", (
        f'case "$(hostname)" in *-worker-1) sleep {HELD_BACK};; esac; exec /usr/sbin/sshd -De'
    )]  # fmt: skip
    main = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    script = next(a for a in main["command"] if a.startswith("/opt/mpiwait/bin/mpiwait"))
    main["command"] = ["sh", "-c", (
        "end=$(($(date +%s) + 150)); while [ $(date +%s) -lt $end ]; do "
        f"out=$({script} | tr '\\n' ' '); file=$(/etc/mpi/discover_hosts.sh | tr '\\n' ' '); "
        'echo "$(date +%s) [$out] [$file]"; '
        'case "$out" in *worker-0*worker-1*) exit 0;; esac; sleep 1; done; exit 1'
    )]  # fmt: skip
    job = jobs.create(doc)
    assert jobs.wait_finished(job, timeout=240) == "Succeeded", jobs.describe(job)
    launcher = jobs.launcher_pods(job)[0]["metadata"]["name"]
    lines = [ln for ln in jobs.logs(launcher, main["name"]).splitlines() if ln.strip()]
    seen = [re.fullmatch(r"\d+ \[(.*)\] \[(.*)\]", ln).groups() for ln in lines]  # type: ignore[union-attr]
    # The file listed worker 1 (Running) while mpiwait did not (its sshd not listening yet).
    assert [o for o, f in seen if "worker-1" in f and "worker-1" not in o and "worker-0" in o], (
        lines
    )
    out, _ = seen[-1]
    assert "worker-0" in out and "worker-1" in out, lines
