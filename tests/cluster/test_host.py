"""The cluster tier's host checks on the host it runs on (testbed.cluster.host; their trees of
/proc and /sys are tests/unit/test_cluster_host.py's): all of them pass here, and a probe the
kernel refuses fails with its own line. No cluster is started for these."""

from __future__ import annotations

import testbed
from testbed.cluster import SYSCTLS, host

pytestmark = testbed.needs("root", "unshare", "ip", "tc")


def test_this_host_passes_every_check() -> None:
    assert host.tree_problem(SYSCTLS) is None
    assert host.probe_problem() is None
    assert host.problem(SYSCTLS) is None


def test_a_link_the_kernel_does_not_know_fails_naming_the_fix() -> None:
    unknown = host.Probe(
        "a link of no kind", "ip link add mwprobe0 type nosuch", "use another kernel"
    )
    said = host.probe_problem([*host.PROBES, unknown])
    assert said is not None and said.startswith(
        "cannot make a link of no kind (ip link add mwprobe0 type nosuch: "
    ), said
    assert said.endswith("): use another kernel") and "\n" not in said
