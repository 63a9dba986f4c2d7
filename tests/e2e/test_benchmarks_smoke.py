"""The benchmark harness (benchmarks/) runs end to end in its quickest form.

Only that it works: every scenario, mpiwait and a peer, against real sshd hosts of the test bed,
writing its JSON, Markdown and text table, leaving no namespace behind. No figure is asserted:
timings on a shared machine belong to benchmarks/RESULTS.md, not to a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import testbed

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]


def _harness(args: list[str], out: Path, timeout: float) -> dict:
    # Through the README's command, `benchmarks/run`, which picks the interpreter itself (the
    # checkout's .venv) when this suite runs from that venv, as `scripts/test` does: a harness
    # that ran mpiwait with a Python lacking its dependencies fails here (issue 12).
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    if os.path.abspath(sys.executable) != str(REPO / ".venv" / "bin" / "python"):
        env["PYTHON"] = sys.executable
    cp = subprocess.run(
        [str(REPO / "benchmarks" / "run"), *args, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert "Targets" in cp.stdout
    for name in ("results.json", "results.md", "table.txt"):
        assert (out / name).is_file(), name
    return json.loads((out / "results.json").read_text())


def _own_leftovers() -> list[str]:
    # beds of processes that are gone: the harness's, since it has exited
    return [n for n in testbed.bed_names() if not testbed.alive(testbed.bed_owner(n) or 0)]


@testbed.needs("openmpi4", "iptables", "strace")  # gap needs mpirun; load, iptables and strace
def test_quickest_run_of_every_scenario(tmp_path: Path) -> None:
    before = set(_own_leftovers())
    first = _harness(
        ["--quick", "--methods", "mpiwait,dns-entrypoint", "--scenarios",
         "gap,gap64,scale,startup,gapscale", "--sizes", "5", "--gap-workers", "3",
         "--gap-large", "4", "--spread", "2", "--gap-sizes", "3", "--gap-late", "2"],
        tmp_path / "a",
        timeout=120,
    )  # fmt: skip
    kinds = [s["scenario"] for s in first["scenarios"]]
    assert kinds == ["launch-gap", "launch-gap", "scale", "startup", "gap-scale"]
    gap = first["scenarios"][0]
    assert {r["method"] for r in gap["rows"]} == {"mpiwait", "dns-entrypoint"}
    assert all(r["rc"] is not None for r in gap["runs"])  # nothing hit the harness's timeout
    scale = first["scenarios"][2]["rows"]
    assert any(r["method"] == "mpiwait" and r.get("wall_s") for r in scale)
    assert {t["target"].split(" (")[0] for t in first["targets"]} >= {"launch gap median"}
    # own listeners (gapscale), the workers' sshds on other CPUs than mpiwait (both)
    assert first["scenarios"][0]["lab"] == first["scenarios"][4]["lab"] == "cluster"
    (gapscale,) = first["scenarios"][4]["rows"]
    assert (gapscale["n"], gapscale["method"], gapscale["never_launched"]) == (3, "mpiwait", 0)
    assert gapscale["gap_s"] and gapscale["logins_per_ready_worker_per_min"]

    # with a baseline (here this very checkout), measured side by side as "mpiwait (before)"
    second = _harness(
        ["--quick", "--scenarios", "load,listready", "--load-hosts", "4", "--down", "3",
         "--baseline-path", str(REPO)],
        tmp_path / "b",
        timeout=200,
    )  # fmt: skip
    load, listready = second["scenarios"]
    assert listready["scenario"] == "list-ready" and listready["steady_s"]["n"] == 5
    assert listready["cold_logins"]["median"] == 64  # the cold call logged into every host
    assert any(t["target"].startswith("--list-ready") and t["value"] for t in second["targets"])
    assert load["rows"][0]["method"] == "mpiwait"
    assert {r["method"] for r in load["rows"]} == {
        "mpiwait",
        "mpiwait (names unresolvable while down)",
        "mpiwait (before)",
        "mpiwait (before) (names unresolvable while down)",
    }
    assert any("not above before's" in t["target"] for t in second["targets"])
    assert all(r["logins_per_host"] for r in load["rows"])
    assert set(_own_leftovers()) <= before, "the harness left network namespaces behind"
    assert os.path.exists(tmp_path / "a" / "results.md")


def test_ssh_config_cost_runs() -> None:
    # docs/ssh-settings.md's command, in its quickest form: the three ways side by side.
    cp = subprocess.run(
        [sys.executable, "-m", "benchmarks.ssh_config_cost", "--hosts", "20"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert cp.returncode == 0, cp.stderr[-3000:]
    rows = [ln.split()[0] for ln in cp.stdout.splitlines()[2:]]
    assert rows == ["reader", "reader", "ssh"], cp.stdout


def test_baseline_path_is_the_package_measured(tmp_path: Path) -> None:
    # `python -m mpiwait` runs from the checkout (benchmarks/run cds there), and -m puts the
    # working directory first on sys.path: without PYTHONSAFEPATH the checkout's own package
    # was measured as the baseline too.
    other = tmp_path / "other" / "mpiwait"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "__main__.py").write_text("print('the other checkout')\n")
    code = (
        "import subprocess, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from benchmarks.common import PY, bench_env; "
        "env = bench_env(Path(sys.argv[2]), {'PYTHONPATH': sys.argv[3]}); "
        "print(subprocess.run([PY, '-m', 'mpiwait'], env=env, cwd=sys.argv[1], "
        "capture_output=True, text=True).stdout, end='')"
    )
    cp = subprocess.run(
        [sys.executable, "-c", code, str(REPO), str(tmp_path / "cache"), str(other.parent)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "the other checkout\n"
