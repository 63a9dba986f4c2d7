"""benchmarks/run: every scenario of the performance issue, every method, one table.

Scenarios (names for --scenarios):
  gap      1. launch gap: 8 workers whose sshd start over 10 s, every method
  gap64       the same with 64 workers, mpiwait only (the target covers jobs up to 64)
  scale    2. N = 10, 100, 300, 1000 ready hosts: wall, client CPU per host, peak RSS
  startup  3. start-up overhead with 4 ready hosts; --version, --help, the worker role
  load     4. 50 hosts down for 30 s then up: lookups, connects, logins, peak probes/s
  listready 5. mpiwait --list-ready over 64 ready hosts, called once a second as Horovod does
  gapscale 6. launch gap against job size: 8, 64, 400, 1000 workers, the last one 60 s late
              (past the re-check bound), mpiwait only; CPU and logins per ready worker while
              waiting
  cluster  7. on a real Kubernetes of three nodes with mpi-operator (tests/testbed/cluster):
              one MPIJob gated by mpiwait (initContainer or ENTRYPOINT), by the operator's
              WaitForWorkersReady (with and without a readiness probe) or not at all; the
              workers' nodes pull the image for real (25 s), and the launcher's node too (run
              alone: --scenarios cluster; one MPIJob at a time; --cluster-workers, default 4)
  clusterscale 8. on that cluster, one MPIJob of 65 workers over the two worker nodes, one of
              them pulling: Open MPI 4 (its daemons spawned through the workers) and MPICH;
              time to the first rank, gaps, restarts, mpiwait's CPU, memory and DNS queries
              (run alone: --scenarios clusterscale; --scale-workers, default 65)

Writes benchmarks/results/<date-time>/ (results.json, results.md, table.txt, and with --chart
launch-gap.png); --publish also copies the Markdown (and chart) to benchmarks/RESULTS.md.
Needs root, iproute2, openssh-server/client, Open MPI (gap, load), iptables and strace (load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import report
from benchmarks.common import PY, REPO, have_strace, log, testbed, uptime_load
from benchmarks.context import Context
from benchmarks.peers import ALL as ALL_METHODS
from benchmarks.peers import BEFORE
from benchmarks.peers import base as base_method

SCENARIOS = (
    "gap", "gap64", "scale", "startup", "load", "listready", "gapscale", "cluster", "clusterscale",
)  # fmt: skip
ALONE = ("cluster", "clusterscale")  # each brings a cluster up and runs alone
QUICK_GAP_METHODS = ("mpiwait", "dns-entrypoint", "parallel-openssh")  # no 10-s sleeps


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _csv_ints(value: str) -> list[int]:
    return [int(v) for v in _csv(value)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="benchmarks/run",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a short smoke run: 1 repetition, N = 10 and 50, 16 workers instead "
        "of 64, the launch gap without the peers that sleep 10 s, load for "
        "mpiwait only (about 2 minutes)",
    )
    ap.add_argument("--reps", type=int, help="repetitions per figure (default 5; --quick: 1)")
    ap.add_argument(
        "--scenarios",
        type=_csv,
        default=[s for s in SCENARIOS if s not in ("gapscale", *ALONE)],
        help=f"comma-separated, from {','.join(SCENARIOS)} (default: all but gapscale, "
        "which takes about 5 minutes a repetition and variant, and cluster and clusterscale, "
        "which run alone)",
    )
    ap.add_argument(
        "--methods",
        type=_csv,
        default=None,
        help=f"comma-separated, from {','.join(ALL_METHODS)} (default: all)",
    )
    ap.add_argument(
        "--sizes",
        type=_csv_ints,
        default=None,
        help="host counts for scale (default 10,100,300,1000; --quick: 10,50)",
    )
    ap.add_argument(
        "--slow-peer-max-n",
        type=int,
        default=100,
        help="largest N at which scale runs sleep-loop, which logs in to one host "
        "after another (default 100; 300 adds ~5 minutes)",
    )
    ap.add_argument("--gap-workers", type=int, default=8, help="workers in gap (default 8)")
    ap.add_argument(
        "--gap-large", type=int, default=None, help="workers in gap64 (default 64; --quick: 16)"
    )
    ap.add_argument(
        "--spread",
        type=float,
        default=10.0,
        help="seconds over which the workers of gap start (default 10)",
    )
    ap.add_argument(
        "--gap-sizes",
        type=_csv_ints,
        default=None,
        help="workers in gapscale (default 8,64,400,1000; --quick: 8,64)",
    )
    ap.add_argument(
        "--gap-late",
        type=float,
        default=60.0,
        help="seconds until the last worker of gapscale accepts (default 60)",
    )
    ap.add_argument(
        "--gap-lab",
        choices=("cluster", "shared"),
        default="cluster",
        help="gap, gap64, gapscale: the workers' sshds on other CPUs than mpiwait and (gapscale) "
        "each its own listening socket, as on a cluster (default); or all on the same CPUs "
        "(and gapscale's on one sshd socket)",
    )
    ap.add_argument(
        "--cluster-workers", type=int, default=4, help="workers of cluster's MPIJob (default 4)"
    )
    ap.add_argument(
        "--scale-workers", type=int, default=65,
        help="workers of clusterscale's MPIJobs (default 65)",
    )  # fmt: skip
    ap.add_argument("--load-hosts", type=int, default=50, help="hosts in load (default 50)")
    ap.add_argument(
        "--down", type=float, default=30.0, help="seconds the hosts of load stay down (default 30)"
    )
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="gap and load: run every method alone (default: the peers side by "
        "side, mpiwait alone; slower by ~5 minutes)",
    )
    ap.add_argument(
        "--chart", action="store_true", help="also draw launch-gap.png (needs matplotlib)"
    )
    ap.add_argument(
        "--out", type=Path, help="results directory (default benchmarks/results/<date-time>)"
    )
    ap.add_argument(
        "--publish",
        action="store_true",
        help="copy the Markdown report (and chart) to benchmarks/RESULTS.md",
    )
    ap.add_argument("--seed", type=int, default=1, help="seed of the start schedules")
    ap.add_argument(
        "--mpiwait-args",
        type=shlex.split,
        default=[],
        metavar="ARGS",
        help='extra mpiwait options for every wait, e.g. "--retry-max 2 --parallel 64" '
        "(to measure other settings than the defaults)",
    )
    ap.add_argument(
        "--mpiwait-path",
        type=Path,
        help="directory holding another mpiwait package (e.g. a git worktree of an older "
        "commit) to measure instead of this checkout's",
    )
    ap.add_argument(
        "--baseline-path",
        type=Path,
        help="directory holding another mpiwait package (e.g. a git worktree of the commit "
        "before a change) to measure side by side with this one, as method "
        f"'{BEFORE}', in every scenario mpiwait runs in",
    )
    args = ap.parse_args(argv)
    bad = [s for s in args.scenarios if s not in SCENARIOS]
    if bad:
        ap.error(f"unknown scenario(s): {', '.join(bad)}")
    if args.methods is not None:
        bad = [m for m in args.methods if m not in ALL_METHODS]
        if bad:
            ap.error(f"unknown method(s): {', '.join(bad)}")
    if args.reps is None:
        args.reps = 1 if args.quick else 5
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if args.sizes is None:
        args.sizes = [10, 50] if args.quick else [10, 100, 300, 1000]
    if args.gap_sizes is None:
        args.gap_sizes = [8, 64] if args.quick else [8, 64, 400, 1000]
    if args.gap_large is None:
        args.gap_large = 16 if args.quick else 64
    return args


def _version(argv: list[str], pattern: str) -> str:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    m = re.search(pattern, cp.stdout + cp.stderr)
    return m.group(1) if m else "?"


def _machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, AttributeError):
        pass
    openssh = _version(["ssh", "-V"], r"OpenSSH_([^ ,]+)")
    openmpi = _version(["mpirun", "--version"], r"Open MPI\) (\S+)")
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, OpenSSH {openssh}, Open MPI {openmpi}"
    )


def _git(where: Path) -> str:
    def git(*args: str) -> str:
        cp = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10
        )
        return cp.stdout.strip() if cp.returncode == 0 else ""

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "mpiwait")
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    if not head:
        return "?"
    return f"{head}{' + uncommitted changes to mpiwait/' if dirty else ''}"


def _settings(ctx: Context, method: str = "mpiwait") -> dict:
    """The defaults of the mpiwait being measured (read by the interpreter that runs it)."""
    code = (
        "import json, mpiwait, mpiwait.settings as s; print(json.dumps({n: getattr(s, n) for n "
        "in ('DEFAULT_RETRY_INITIAL', 'DEFAULT_RETRY_MAX', 'DEFAULT_PARALLEL', "
        "'DEFAULT_PROBE_RATE', 'DEFAULT_CONNECT_TIMEOUT', 'REFUSED_ADDRESS_REUSE', "
        "'RETRY_FLOOR_TCP', 'RETRY_FLOOR_DNS', 'RETRY_FLOOR_SSH', 'BACKOFF_GRACE', "
        "'BACKOFF_DOUBLING', 'DEFAULT_RECHECK_AFTER') "
        "if hasattr(s, n)} | {'version': mpiwait.__version__, 'path': mpiwait.__file__}))"
    )
    cp = subprocess.run(
        [PY, "-c", code],
        env=ctx.env(method=method),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(cp.stdout)


def _preflight(args: argparse.Namespace) -> str | None:
    problem = testbed.missing_requirements()
    if problem:
        return f"the test bed cannot run here: {problem}"
    if {"gap", "gap64", "load"} & set(args.scenarios) and shutil.which("mpirun") is None:
        return "Open MPI's mpirun is needed for gap and load (apt-get install openmpi-bin)"
    if {"load", "gapscale"} & set(args.scenarios) and shutil.which("iptables") is None:
        return "iptables is needed for load and gapscale (apt-get install iptables)"
    return None


def _warm(ctx: Context) -> None:
    """Fill the bytecode cache and the page cache before anything is timed."""
    mods = (
        "mpiwait.cli, mpiwait.modes.wait, mpiwait.probe.attempt, mpiwait.wait.loop, "
        "mpiwait.openssh.config"
    )
    for variant in ctx.mpiwait_variants():
        for argv in (
            [PY, "-c", f"import {mods}, paramiko, tenacity, click"],
            [PY, "-m", "mpiwait", "--version"],
        ):
            env = ctx.env(method=variant)
            subprocess.run(argv, env=env, capture_output=True, timeout=120, check=True)


def _cluster(args: argparse.Namespace) -> int:
    """Scenario 7 or 8 on its own: it brings a cluster up (building what is missing) and down."""
    import tempfile

    from testbed import cluster as kube
    from testbed.cluster.images import cluster_with_images

    from benchmarks import s7_cluster, s8_cluster_scale

    problem = kube.missing_requirements()
    if problem:
        sys.stderr.write(f"benchmarks: the cluster cannot run here: {problem}\n")
        return 2
    out = (args.out or REPO / "benchmarks" / "results" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (scenario,) = args.scenarios
    t0 = time.time()
    with (
        tempfile.TemporaryDirectory(prefix="mpiwait-bench-k8s-") as tmp,
        cluster_with_images(Path(tmp)) as c,
    ):
        if scenario == "cluster":
            name, workers, reps = "cluster", args.cluster_workers, args.reps or 3
            md = s7_cluster.run(c, reps, out, workers)
        else:
            name, workers, reps = "cluster-scale", args.scale_workers, args.reps
            md = s8_cluster_scale.run_all(c, reps, out, workers)
    number = 7 if scenario == "cluster" else 8
    head = (
        f"Scenario {number} ({time.strftime('%Y-%m-%d %H:%M %Z')}, {_machine()}, git "
        f"{_git(REPO)}, {workers} workers, {reps} repetitions, "
        f"{(time.time() - t0) / 60:.1f} min)\n\n"
    )
    (out / f"{name}.md").write_text(head + md + "\n")
    print(head + md)
    print(f"\nwritten: {out}/{name}.json, {name}.md" + (", cluster.png" if number == 7 else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    alone = [s for s in args.scenarios if s in ALONE]
    if alone:
        if len(args.scenarios) != 1:
            sys.stderr.write(
                f"benchmarks: scenario {alone[0]} runs alone (--scenarios {alone[0]})\n"
            )
            return 2
        return _cluster(args)
    problem = _preflight(args)
    if problem:
        sys.stderr.write(f"benchmarks: {problem}\n")
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = REPO / "benchmarks" / "results"
    out = (args.out or base / stamp).resolve()
    for path in (args.mpiwait_path, args.baseline_path):
        if path is not None and not (path / "mpiwait").is_dir():
            sys.stderr.write(f"benchmarks: no mpiwait package in {path}\n")
            return 2
    ctx = Context(
        results=out,
        cache=base / "pycache",
        reps=args.reps,
        quick=args.quick,
        seed=args.seed,
        mpiwait_path=args.mpiwait_path.resolve() if args.mpiwait_path else None,
        mpiwait_args=args.mpiwait_args,
        baseline_path=args.baseline_path.resolve() if args.baseline_path else None,
    )
    # Children start here, not in the checkout: `python -m mpiwait` puts its working directory
    # first on sys.path, which would shadow --mpiwait-path.
    os.chdir(ctx.workdir)
    methods = args.methods or list(ALL_METHODS)
    if ctx.baseline_path is not None and "mpiwait" in methods:
        methods.insert(methods.index("mpiwait") + 1, BEFORE)
    removed = testbed.cleanup_stale()
    if removed:
        log(f"removed leftovers of crashed beds: {', '.join(removed)}")
    _warm(ctx)
    load_before = uptime_load()
    settings = _settings(ctx)
    baseline = _settings(ctx, BEFORE) if ctx.baseline_path is not None else None
    log(f"results in {out}; load average {load_before}; mpiwait defaults {settings}")
    t_start = time.time()
    results: list[dict] = []

    def save() -> None:
        (out / "results.json").write_text(json.dumps({"scenarios": results}, indent=1))

    from benchmarks import (
        s1_launch_gap,
        s2_scale,
        s3_startup,
        s4_load,
        s5_list_ready,
        s6_gap_scale,
    )

    if "gap" in args.scenarios:
        s1_launch_gap.SPREAD, s1_launch_gap.LAB = args.spread, args.gap_lab
        gm = [
            m
            for m in methods
            if not args.quick or base_method(m) in QUICK_GAP_METHODS or args.methods is not None
        ]
        results.append(
            s1_launch_gap.run(ctx, workers=args.gap_workers, methods=gm, sequential=args.sequential)
        )
        save()
    if "gap64" in args.scenarios and "mpiwait" in methods:
        s1_launch_gap.SPREAD, s1_launch_gap.LAB = args.spread, args.gap_lab
        results.append(
            s1_launch_gap.run(ctx, workers=args.gap_large, methods=ctx.mpiwait_variants())
        )
        save()
    if "scale" in args.scenarios:
        s2_scale.SLOW_PEER_UP_TO = args.slow_peer_max_n
        results.append(s2_scale.run(ctx, sizes=args.sizes, methods=methods))
        save()
    if "startup" in args.scenarios and "mpiwait" in methods:
        results.append(s3_startup.run(ctx))
        save()
    if "load" in args.scenarios:
        s4_load.HOSTS, s4_load.DOWN = args.load_hosts, args.down
        lm = ctx.mpiwait_variants() if args.quick and args.methods is None else methods
        if not have_strace():
            log("warning: strace not found: lookups and peak probes/s are not counted")
        results.append(s4_load.run(ctx, methods=lm, sequential=args.sequential))
        save()
    if "listready" in args.scenarios and "mpiwait" in methods:
        results.append(s5_list_ready.run(ctx))
        save()
    if "gapscale" in args.scenarios and "mpiwait" in methods:
        s6_gap_scale.LATE, s6_gap_scale.LAB = args.gap_late, args.gap_lab
        results.append(s6_gap_scale.run(ctx, sizes=args.gap_sizes, methods=ctx.mpiwait_variants()))
        save()

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": _machine(),
        "load_before": load_before,
        "load_after": uptime_load(),
        "duration_s": time.time() - t_start,
        "command": "benchmarks/run " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "git": _git(args.mpiwait_path or REPO),
        "mpiwait_version": settings.pop("version"),
        "mpiwait_path": settings.pop("path"),
        "mpiwait_args": args.mpiwait_args,
        "settings": settings,
        "reps": args.reps,
    }
    if baseline is not None:
        meta["baseline"] = {
            "git": _git(ctx.baseline_path),
            "path": baseline.pop("path"),
            "version": baseline.pop("version"),
            "settings": baseline,
        }
    tg = report.targets(results, settings)
    chart = report.chart(results, out / "launch-gap.png") if args.chart else None
    if args.chart:
        report.chart_scale(results, out / "launch-gap-scale.png")
    if args.chart and chart is None:
        log("no chart: matplotlib is not installed (pip install matplotlib)")
    md = report.markdown(meta, results, tg, chart)
    (out / "results.md").write_text(md)
    table = report.text(results, tg)
    (out / "table.txt").write_text(table + "\n")
    (out / "results.json").write_text(
        json.dumps({"meta": meta, "targets": tg, "scenarios": results}, indent=1)
    )
    latest = base / "latest"
    if out.parent == base:
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(out.name)
    if args.publish:
        (REPO / "benchmarks" / "RESULTS.md").write_text(md)
        for drawn in (chart, out / "launch-gap-scale.png"):
            if drawn is not None and drawn.exists():
                shutil.copyfile(drawn, REPO / "benchmarks" / drawn.name)
    print(table)
    print(
        f"\nwritten: {out}/results.json, results.md, table.txt"
        + (", launch-gap.png" if chart else "")
    )
    log(f"done in {(time.time() - t_start) / 60:.1f} min; load average {meta['load_after']}")
    leftovers = [n for n in testbed.bed_names() if testbed.bed_owner(n) == os.getpid()]
    if leftovers:
        log(f"warning: namespaces left behind: {', '.join(leftovers)}")
    return 0
