"""The same MPIJob with the cluster's CoreDNS configured as kubeadm did before 1.32: a plain
``cache 30`` over the kubernetes plugin's ``ttl 30``, so a worker's "no such name", asked for
while its pod was not Ready, is served for up to 30 s after the pod is Ready (the operator's
Service publishes a worker only once it is Ready). mpiwait keeps asking and launches once the
name resolves and the worker accepts a login; the launch still works the first time."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from test_mpijobs import HELD_BACK, assert_one_clean_launch
from testbed.cluster.mpijob import Jobs, as_deployed, hold_back, load_example


def _ready_at(pod: dict) -> float:
    for c in pod["status"]["conditions"]:
        if c["type"] == "Ready" and c["status"] == "True":
            return datetime.fromisoformat(
                c["lastTransitionTime"].replace("Z", "+00:00")
            ).timestamp()
    raise AssertionError(f"{pod['metadata']['name']} never Ready")


@pytest.mark.usefixtures("old_kubeadm_dns")
def test_initcontainer_example_through_a_stale_no_such_name(jobs: Jobs) -> None:
    doc = hold_back(as_deployed(load_example("initcontainer.yaml")), 1, HELD_BACK)
    doc["spec"]["runPolicy"]["cleanPodPolicy"] = "None"  # worker 1's Ready time, afterwards
    job = jobs.create(doc)
    w1 = f"{job}-worker-1"
    assert_one_clean_launch(jobs, job, [f"{job}-worker-0", w1], "tensorflow-benchmarks")
    launcher = jobs.launcher_pods(job)[0]["metadata"]["name"]
    waited = jobs.kubectl("logs", "--timestamps", launcher, "-c", "wait-for-workers").stdout
    passed = next(ln for ln in waited.splitlines() if re.search(rf"ready \({re.escape(w1)}\.", ln))
    stamp = datetime.fromisoformat(passed.split(" ", 1)[0].split(".")[0] + "+00:00").timestamp()
    # Never before the worker was Ready (its name was not published); the stale answer only
    # makes it later, which the log shows as "dns unresolved" after the pod is Ready.
    assert stamp >= _ready_at(jobs.get("pod", w1)) - 1, waited
