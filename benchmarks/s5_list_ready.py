"""Scenario 5, Horovod elastic discovery: ``mpiwait --list-ready`` over 64 ready hosts, run once
a second as horovodrun runs its --host-discovery-script. The target is <= 300 ms a call.

64 hosts on one sshd (testbed.LoopBed), each a name and an address of its own. Measured
from spawn to exit, in the clients' context (files-only names, the bed's ssh_config):

- ``python -c pass``: the floor of any Python program here;
- cold: the first call, nothing remembered yet (a fresh $XDG_RUNTIME_DIR): 64 logins;
- steady: calls one second apart after the first, as Horovod makes them (each host is checked
  again after 10-30 s, LIST_READY_RECHECK, and re-resolved on every call in between): wall
  per call and logins per call.

``benchmarks/run`` runs it as scenario ``listready``; or alone (root):
``.venv/bin/python -m benchmarks.s5_list_ready [--hosts 64] [--calls 30]``
prints a table and writes JSON next to the other results when ``--out DIR`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import PY, REPO, LogTail, Stat, bench_env, run_measured, sshd_logins, testbed
from benchmarks.context import Context

TARGET_S = 0.300


def run(ctx: Context) -> dict:
    """Scenario 5 inside ``benchmarks/run``: the checkout under test (--mpiwait-path); the
    baseline is not run, since versions before --list-ready do not have it."""
    quick = ctx.reps == 1
    return measure(
        64,
        5 if quick else 30,
        1 if quick else 5,
        ctx.workdir / "list-ready",
        pythonpath=ctx.env()["PYTHONPATH"],
    )


def measure(
    hosts: int, calls: int, colds: int, workdir: Path, pythonpath: str | None = None
) -> dict:
    cache = REPO / "benchmarks" / "results" / "pycache"
    with testbed.LoopBed(hosts, workdir / "bed") as lb:
        lb.bed.wait_listening([0])
        argv = [PY, "-m", "mpiwait", "--list-ready", "--hostfile", str(lb.hostfile)]

        def call(runtime: Path) -> tuple[float, float, int]:
            tail = LogTail(lb.sshd_log)
            env = bench_env(cache, {"XDG_RUNTIME_DIR": str(runtime)})
            if pythonpath is not None:
                env["PYTHONPATH"] = pythonpath
            r = run_measured(lb.client_cmd(argv), env=lb.bed.env(env), timeout=120)
            if r.rc != 0:
                raise SystemExit(f"mpiwait --list-ready failed ({r.rc}): {r.stderr[-500:]}")
            logins, _ = sshd_logins(tail.read())
            if len(r.stdout.splitlines()) != hosts:
                raise SystemExit(f"listed {len(r.stdout.splitlines())} of {hosts}: {r.stderr}")
            return r.wall, r.cpu, logins

        floor = [
            run_measured(lb.client_cmd([PY, "-c", "pass"]), env=lb.bed.env(bench_env(cache)),
                         timeout=60)
            for _ in range(5)
        ]  # fmt: skip
        call(Path(tempfile.mkdtemp(dir=workdir)))  # warm-up: bytecode and page cache
        cold = []
        for _ in range(colds):
            runtime = Path(tempfile.mkdtemp(dir=workdir))
            runtime.chmod(0o700)
            cold.append(call(runtime))
        runtime = Path(tempfile.mkdtemp(dir=workdir))
        runtime.chmod(0o700)
        steady = []
        for k in range(calls + 1):
            began = time.monotonic()
            result = call(runtime)
            if k:  # the first call of the series is a cold one
                steady.append(result)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    return {
        "scenario": "list-ready",
        "hosts": hosts,
        "python_pass_s": Stat.of(r.wall for r in floor).as_dict(),
        "python_pass_cpu_s": Stat.of(r.cpu for r in floor).as_dict(),
        "load_after": open("/proc/loadavg").read().split()[0],
        "cold_s": Stat.of(w for w, _, _ in cold).as_dict(),
        "cold_cpu_s": Stat.of(c for _, c, _ in cold).as_dict(),
        "cold_logins": Stat.of(lg for _, _, lg in cold).as_dict(),
        "steady_s": Stat.of(w for w, _, _ in steady).as_dict(),
        "steady_cpu_s": Stat.of(c for _, c, _ in steady).as_dict(),
        "steady_logins": Stat.of(lg for _, _, lg in steady).as_dict(),
        "target_s": TARGET_S,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.s5_list_ready")
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--calls", type=int, default=30, help="steady-state calls, 1 s apart")
    ap.add_argument("--colds", type=int, default=5, help="calls with nothing remembered")
    ap.add_argument("--out", type=Path, help="write list-ready.json here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mpiwait-bench-") as work:
        res = measure(args.hosts, args.calls, args.colds, Path(work))
    print(f"mpiwait --list-ready, {res['hosts']} ready hosts (target {TARGET_S * 1000:.0f} ms)")
    for label, key in (
        ("python -c pass", "python_pass_s"),
        ("cold (nothing remembered)", "cold_s"),
        ("steady (1 call/s)", "steady_s"),
    ):
        s = res[key]
        line = (
            f"  {label:27} wall median {s['median'] * 1000:4.0f} ms  p95 {s['p95'] * 1000:4.0f}"
            f"  max {s['max'] * 1000:4.0f} ms (n={s['n']})"
        )
        cpu = res[key.replace("_s", "_cpu_s")]
        line += f"; CPU median {cpu['median'] * 1000:3.0f} ms"
        if key != "python_pass_s":
            logins = res[key.replace("_s", "_logins")]
            line += f"; logins/call median {logins['median']:.0f} max {logins['max']:.0f}"
        print(line)
    print(f"  (load average after the run: {res['load_after']} on {os.cpu_count()} CPUs)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "list-ready.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
