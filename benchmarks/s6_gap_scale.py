"""Scenario 6, launch gap against job size: N workers, all but one ready from the start, the last
one's port refusing until ``LATE`` seconds in (an image still pulling), past mpiwait's re-check
bound (--recheck-after, 30 s), so that whatever freshness costs at the launch is paid.

The workers are addresses of one namespace (testbed.ManyHosts, LogLevel VERBOSE); the late one
refuses by an iptables rule until the harness swaps it out. By default (--gap-lab cluster) the
lab is built like a cluster where it matters to the gap: each worker has a listening socket of
its own (one sshd per 16 workers), and the sshds run on other CPUs than mpiwait, so what the
workers do when mpiwait tries their listeners or ends their sessions does not take mpiwait's
CPU (docs/performance.md has the figures that led here). --gap-lab shared is the earlier lab:
one sshd socket for all workers, on the same CPUs. mpiwait runs
in the launcher context with a hostfile of the N names and COMMAND ``rec.sh true``, which notes
when it starts. Gap = that start - the moment just before the rule swap (an upper bound: the
port accepts at some point during the swap). Each variant runs alone, interleaved rep by rep.

Also reported, for what freshness costs while waiting: the CPU of mpiwait (and its COMMAND,
which is ``true``) over the whole run, and from sshd's log, per ready worker, the connections
and logins it received per minute of waiting, and the connections closed before authenticating
(those an OpenSSH 9.8+ sshd penalises: 1 s of penalty each, the source refused once over 15 s).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.common import PY, LogTail, Measured, sshd_per_address, stat_dicts, testbed
from benchmarks.context import Context

LATE = 60.0  # seconds until the last worker accepts; --gap-late
LAB = "cluster"  # --gap-lab: "cluster" (own listeners, sshds on other CPUs) or "shared"
RUN_TIMEOUT = 300.0


def _run_one(ctx: Context, m: testbed.ManyHosts, method: str, rep: int, tail: LogTail) -> dict:
    n = m.n
    run_dir = ctx.workdir / f"gapscale{n}-{method.replace(' ', '_')}-{rep}"
    run_dir.mkdir(parents=True, exist_ok=True)
    starts = run_dir / "starts"
    starts.write_text("")
    hostfile = run_dir / "hostfile"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in m.names))
    m.set_states({n - 1: "refuse"})
    tail.mark()
    argv = [PY, "-m", "mpiwait", "--hostfile", str(hostfile), *ctx.mpiwait_args,
            "--", str(ctx.scripts / "rec.sh"), "true"]  # fmt: skip
    env = m.env(ctx.env({"MW_STARTS": str(starts)}, method=method))
    t0 = time.time()
    proc = Measured(m.launcher_cmd(argv), env=env)
    time.sleep(max(0.0, t0 + LATE - time.time()))
    up = time.time()
    m.set_states({n - 1: "up"})
    res = proc.wait(max(1.0, t0 + RUN_TIMEOUT - time.time()))
    (run_dir / "stderr").write_text(res.stderr[-20000:])
    started = [float(x) for x in starts.read_text().split()]
    tail.settle()  # the workers' sshds may still be logging the last connections
    connections, logins = sshd_per_address(tail.read())
    ready = m.addrs[: n - 1]
    minutes = (up - t0) / 60
    per_min = [logins.get(a, 0) / minutes for a in ready]
    if res.rc != 0 or not started:
        ctx.log(f"  N={n} {method} rep {rep} failed (rc {res.rc}): {res.stderr.strip()[-300:]}")
    return {
        "n": n,
        "method": method,
        "rep": rep,
        "rc": res.rc,
        "gap_s": (started[0] - up) if started else None,
        "wall_s": res.wall,
        "cpu_s": res.cpu,
        "waited_s": up - t0,
        "logins_per_ready_worker_per_min": statistics.mean(per_min),
        "max_logins_per_ready_worker_per_min": max(per_min),
        "connections_per_ready_worker_per_min": statistics.mean(
            connections.get(a, 0) / minutes for a in ready
        ),
        "closed_before_auth": sum(connections.get(a, 0) - logins.get(a, 0) for a in m.addrs),
    }


def run(ctx: Context, *, sizes: list[int], methods: list[str]) -> dict:
    ctx.log(
        f"launch gap against job size: N = {', '.join(map(str, sizes))}, the last worker "
        f"{LATE:g} s late, {ctx.reps} reps, methods {', '.join(methods)}"
    )
    runs: list[dict] = []
    like_cluster = LAB == "cluster"
    for n in sizes:
        with testbed.ManyHosts(
            n,
            workdir=ctx.workdir / f"gapscale{n}",
            log_level="VERBOSE",
            own_listeners=like_cluster,
            split_cpus=like_cluster,
        ) as m:
            tail = LogTail(Path(m.sshd_log))
            for rep in range(ctx.reps):
                for method in methods:  # interleaved: drift on a busy machine hits all alike
                    r = _run_one(ctx, m, method, rep, tail)
                    runs.append(r)
                    gap = f"{r['gap_s']:.3f} s" if r["gap_s"] is not None else "never launched"
                    ctx.log(
                        f"  N={n} rep {rep} {method}: gap {gap}, CPU {r['cpu_s']:.1f} s, "
                        f"{r['logins_per_ready_worker_per_min']:.2f} logins per ready worker "
                        f"per min, {r['closed_before_auth']} closed before auth"
                    )
    rows = []
    for n in sizes:
        for method in methods:
            mine = [r for r in runs if r["n"] == n and r["method"] == method]
            rows.append(
                {
                    "n": n,
                    "method": method,
                    "reps": len(mine),
                    "never_launched": sum(1 for r in mine if r["gap_s"] is None),
                    **stat_dicts(
                        mine,
                        (
                            "gap_s",
                            "cpu_s",
                            "waited_s",
                            "logins_per_ready_worker_per_min",
                            "max_logins_per_ready_worker_per_min",
                            "connections_per_ready_worker_per_min",
                            "closed_before_auth",
                        ),
                    ),
                }
            )
    return {
        "scenario": "gap-scale",
        "sizes": sizes,
        "late_s": LATE,
        "lab": LAB,
        "reps": ctx.reps,
        "rows": rows,
        "runs": runs,
    }
