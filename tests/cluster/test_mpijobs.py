"""MPIJobs run by the real mpi-operator v0.8.2 on a real single-node Kubernetes 1.35, with mpiwait
as users deploy it (the examples in examples/kubernetes/, images built here, names aside).

What a user would see is what is checked: the MPIJob's condition, the launcher's pods (how many,
how often restarted, their exit), mpirun's output in ``kubectl logs`` and mpiwait's."""

from __future__ import annotations

import re
import time

from testbed.cluster.mpijob import (
    Jobs,
    as_deployed,
    hold_back,
    load_example,
    restarts,
    without_init,
)

HELD_BACK = 20  # s: one worker's image pull, stood in for by an initContainer that sleeps
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


def assert_one_clean_launch(jobs: Jobs, job: str, seen: list[str], container: str) -> str:
    """The job (an MPIJob, or a TrainJob through TrainJobs) succeeded with one launcher pod,
    never restarted, whose ``container`` logged each of ``seen`` (the workers' names: mpirun
    reached them). Returns that log."""
    assert jobs.wait_finished(job) == jobs.SUCCEEDED, jobs.describe(job)
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


def test_initcontainer_example_without_mpiwait_fails_its_first_launch(jobs: Jobs) -> None:
    """The control: the seed issue's scene. mpirun starts before worker 1 resolves and dies; the
    launcher restarts (the operator's launcher pods restart on failure: CrashLoopBackOff) or,
    once they give up, the Job counts a failed pod."""
    doc = hold_back(without_init(as_deployed(load_example("initcontainer.yaml"))), 1, HELD_BACK)
    job = jobs.create(doc)
    failure = ("ORTE", "resolve hostname", "daemon")

    def mpirun_said_why() -> str:
        # The log of the try that failed: the current container's or, once restarted, the
        # previous one's (read while the kubelet still has it).
        for pod in jobs.launcher_pods(job):
            for previous in ([], ["--previous"]):
                said = jobs.kubectl(
                    "logs", pod["metadata"]["name"], "-c", "tensorflow-benchmarks", *previous,
                    check=False,
                ).stdout  # fmt: skip
                if any(f in said for f in failure):
                    return str(said)
        return ""

    said = jobs.wait_for("mpirun's failure in kubectl logs", mpirun_said_why, timeout=180)
    assert jobs.wait_for("a failed launch", lambda: _failed_launch(jobs, job), timeout=120), said


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


def test_worker_replaced_after_it_passed(jobs: Jobs) -> None:
    """Worker 0 passes, then its pod is deleted before worker 1 arrives: the operator makes a new
    pod with the same name and a new address; mpiwait launches only once that one accepts
    logins, and mpirun reaches it."""
    doc = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, 45)
    job = jobs.create(doc)
    w0 = f"{job}-worker-0"

    def launcher_waiting() -> str:
        pods = jobs.launcher_pods(job)
        if not pods:
            return ""
        log = jobs.logs(pods[0]["metadata"]["name"], "wait-for-workers")
        return log if re.search(rf"\d+/2 ready \({re.escape(w0)}\.", log) else ""

    jobs.wait_for("worker 0 passed", launcher_waiting, timeout=120)
    old = jobs.get("pod", w0)
    jobs.kubectl("delete", "pod", w0, "--grace-period=1")

    def replaced() -> dict | None:
        if jobs.kubectl("get", "pod", w0, check=False).returncode != 0:
            return None
        pod = jobs.get("pod", w0)
        fresh = pod["metadata"]["uid"] != old["metadata"]["uid"] and pod["status"].get("podIP")
        return pod if fresh else None

    new = jobs.wait_for("worker 0 replaced", replaced, timeout=90)
    assert new["status"]["podIP"] != old["status"]["podIP"]
    assert_one_clean_launch(jobs, job, [w0, f"{job}-worker-1"], "tensorflow-benchmarks")


def test_suspended_then_resumed(jobs: Jobs) -> None:
    """As Kueue admits a job: created suspended, then resumed. The operator's own gate
    (WaitForWorkersReady) lets the launcher start before the workers (kubeflow/mpi-operator#615);
    with mpiwait the same job launches once."""
    base = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, HELD_BACK)
    base["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    base["spec"]["runPolicy"]["suspend"] = True
    gate_only = without_init(base)
    gate_only["metadata"]["name"] = "gate-only"
    with_mpiwait = base
    with_mpiwait["metadata"]["name"] = "with-mpiwait"
    for doc in (gate_only, with_mpiwait):
        jobs.create(doc)
    time.sleep(3)  # the operator has seen both while suspended
    for name in ("gate-only", "with-mpiwait"):
        jobs.patch("mpijob", name, {"spec": {"runPolicy": {"suspend": False}}})

    launcher = jobs.wait_for(
        "the gate-only launcher failed", lambda: _failed_launch(jobs, "gate-only"), timeout=180
    )
    started = launcher["metadata"]["creationTimestamp"]
    ready_at = []
    for w in jobs.worker_pods("gate-only"):
        for c in w["status"].get("conditions", []):
            if c["type"] == "Ready" and c["status"] == "True":
                ready_at.append(c["lastTransitionTime"])
    # The launcher pod existed before the last worker was Ready (or before any was).
    assert len(ready_at) < 2 or started < max(ready_at), (started, ready_at)

    assert_one_clean_launch(
        jobs, "with-mpiwait", ["with-mpiwait-worker-0", "with-mpiwait-worker-1"],
        "tensorflow-benchmarks",
    )  # fmt: skip


def test_list_ready_follows_discover_hosts_as_the_kubelet_updates_it(jobs: Jobs) -> None:
    """horovod-elastic.yaml's discovery (``mpiwait --list-ready``), called every second as
    horovodrun calls it, against the operator's discover_hosts.sh in the kubelet's volume: first
    worker 0 alone, then both once worker 1 runs and the ConfigMap's new ..data is swapped in."""
    doc = hold_back(as_deployed(load_example("horovod-elastic.yaml")), 1, HELD_BACK)
    doc["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2
    main = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    script = next(a for a in main["command"] if a.startswith("/opt/mpiwait/bin/mpiwait"))
    main["command"] = ["sh", "-c", (
        "end=$(($(date +%s) + 150)); while [ $(date +%s) -lt $end ]; do "
        f"out=$({script} | tr '\\n' ' '); echo \"$(date +%s) [$out]\"; "
        'case "$out" in *worker-0*worker-1*) exit 0;; esac; sleep 1; done; exit 1'
    )]  # fmt: skip
    job = jobs.create(doc)
    assert jobs.wait_finished(job, timeout=240) == "Succeeded", jobs.describe(job)
    launcher = jobs.launcher_pods(job)[0]["metadata"]["name"]
    lines = [ln for ln in jobs.logs(launcher, main["name"]).splitlines() if ln.strip()]
    seen = [ln.split(" ", 1)[1] for ln in lines]
    alone = [s for s in seen if "worker-0" in s and "worker-1" not in s]
    assert alone, lines  # worker 0 listed while worker 1 was still held back
    assert "worker-1" in seen[-1] and "worker-0" in seen[-1], lines
    assert all("worker-1" in s for s in seen[seen.index(seen[-1]) :]), lines
