"""The same MPIJob with the cluster's CoreDNS configured as kubeadm did before 1.32: a plain
``cache 30`` over the kubernetes plugin's ``ttl 30``, so a worker's "no such name", asked for
while its pod was not Ready, is served for up to 30 s after the pod is Ready (the operator's
Service publishes a worker only once it is Ready). mpiwait keeps asking and launches once the
name resolves and the worker accepts a login; the launch still works the first time."""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest
from test_mpijobs import HELD_BACK, assert_first_launch_fails, assert_one_clean_launch
from testbed.cluster import dns_answers
from testbed.cluster.mpijob import Jobs, as_deployed, hold_back, load_example, without_init

NXDOMAIN = 3
# Worker 1's sshd held back this long: its pod Ready well within the 30 s a cached "no such
# name" lasts.
PRIMED_BEFORE_READY = 10


def _ready_at(pod: dict) -> float:
    for c in pod["status"]["conditions"]:
        if c["type"] == "Ready" and c["status"] == "True":
            return datetime.fromisoformat(
                c["lastTransitionTime"].replace("Z", "+00:00")
            ).timestamp()
    raise AssertionError(f"{pod['metadata']['name']} never Ready")


def _stale_answers(jobs: Jobs, name: str, worker: str) -> list[float]:
    """The seconds after ``worker``'s pod turned Ready at which the cluster's DNS still said
    "no such name" for ``name``, asked every 0.2 s for 10 s from then."""
    ready = jobs.wait_for(f"{worker} Ready", lambda: _is_ready(jobs, worker), timeout=180)
    stale = []
    while time.time() < ready + 10:
        answer = dns_answers(name)
        if answer is not None and answer[0] == NXDOMAIN:
            stale.append(time.time() - ready)
        time.sleep(0.2)
    return stale


def _is_ready(jobs: Jobs, worker: str) -> float | None:
    if jobs.kubectl("get", "pod", worker, check=False).returncode != 0:
        return None
    try:
        return _ready_at(jobs.get("pod", worker))
    except AssertionError:
        return None


@pytest.mark.usefixtures("old_kubeadm_dns")
def test_initcontainer_example_through_a_stale_no_such_name(jobs: Jobs) -> None:
    doc = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, PRIMED_BEFORE_READY)
    doc["spec"]["runPolicy"]["cleanPodPolicy"] = "None"  # worker 1's Ready time, afterwards
    job = jobs.create(doc)
    w1 = f"{job}-worker-1"
    # Worker 1's name as the launcher's resolver asks it (the hostfile's NAME.JOB.NS.svc through
    # the search list), asked once now as any early lookup would: the "no such name" cached
    # now is served until 30 s from now, well after the pod is Ready (about 15 s from now).
    name = f"{w1}.{job}.{jobs.ns}.svc.cluster.local"
    assert dns_answers(name) == (NXDOMAIN, 0)
    stale = _stale_answers(jobs, name, w1)
    assert [t for t in stale if t > 1], stale  # 1 s: Ready's time is in whole seconds
    assert_one_clean_launch(jobs, job, [f"{job}-worker-0", w1], "tensorflow-benchmarks")
    launcher = jobs.launcher_pods(job)[0]["metadata"]["name"]
    waited = jobs.kubectl("logs", "--timestamps", launcher, "-c", "wait-for-workers").stdout
    passed = next(ln for ln in waited.splitlines() if re.search(rf"ready \({re.escape(w1)}\.", ln))
    stamp = datetime.fromisoformat(passed.split(" ", 1)[0].split(".")[0] + "+00:00").timestamp()
    # Not before the worker was Ready, nor while its name was still answered "no such name".
    assert stamp >= _ready_at(jobs.get("pod", w1)) + max(stale) - 1, (waited, stale)


@pytest.mark.usefixtures("old_kubeadm_dns")
def test_the_same_job_without_mpiwait_fails_its_first_launch(jobs: Jobs) -> None:
    """The control: under the same DNS, without mpiwait, mpirun starts before worker 1 resolves."""
    doc = hold_back(without_init(as_deployed(load_example("initcontainer.yaml"))), 1, HELD_BACK)
    assert_first_launch_fails(jobs, doc, "tensorflow-benchmarks")
