"""Instructions per host: scenario 2's question (what does one more ready host cost the client?)
counted by callgrind instead of timed, so that the answer does not depend on what else the
machine is doing.

On a shared machine CPU time per host moves by 10-20 % from run to run with the load (cache and
frequency effects, other processes' threads); instruction counts of the same code and inputs
move by well under 1 %. mpiwait runs under ``valgrind --tool=callgrind`` (all its threads) once
at a small N and once at a large N against the scale bed (testbed.LoopBed, one sshd, N
names and addresses); the difference divided by the difference in N is the cost of one host, the
small run is the start-up. With ``--baseline-path`` another checkout runs the same way, and the
ratio is reported.

What it cannot see: time spent waiting (sshd, the network) and the kernel's part (context
switches, syscalls); scenario 2's CPU per host includes both. Under valgrind mpiwait runs ~50x
slower, so the re-check (``--recheck-after``) is turned off through its environment variable,
which versions without it ignore: otherwise a long run would log into every host twice.

Run it (root): ``.venv/bin/python -m benchmarks.instructions [--hosts 20,200]
[--baseline-path DIR]`` (~2 min per run at 200 hosts).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import PY, REPO, bench_env, testbed


def _run(
    lb: testbed.LoopBed, checkout: Path, cache: Path, prefix: list[str]
) -> subprocess.CompletedProcess[str]:
    """One mpiwait run of ``checkout`` over every host of ``lb``, under ``prefix`` (a tool)."""
    env = lb.bed.env(
        bench_env(
            cache,
            {
                "K_MPI_JOB_ROLE": "launcher",
                "PYTHONPATH": str(checkout),
                "MPIWAIT_RECHECK_AFTER": "0",
            },
        )
    )
    argv = [*prefix, PY, "-m", "mpiwait", "--hostfile", str(lb.hostfile), "--timeout", "1200"]
    r = subprocess.run(lb.client_cmd(argv), env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"mpiwait from {checkout} exited {r.returncode}: {r.stderr[-500:]}")
    return r


def instructions(lb: testbed.LoopBed, checkout: Path, out: Path, cache: Path) -> int:
    """Instructions (callgrind's Ir, every thread) of one mpiwait run over every host of ``lb``."""
    _run(lb, checkout, cache, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
    found = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"no summary line in {out}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__)
    ap.add_argument("--hosts", default="20,200", help="small,large N (default 20,200)")
    ap.add_argument("--mpiwait-path", type=Path, default=REPO, help="checkout measured")
    ap.add_argument("--baseline-path", type=Path, help="another checkout, measured beside it")
    args = ap.parse_args(argv)
    small, large = (int(n) for n in args.hosts.split(","))
    if not 0 < small < large:
        ap.error("--hosts wants small,large with 0 < small < large")
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not installed (apt-get install valgrind)")
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces, sshd)")
    versions = {"mpiwait": args.mpiwait_path.resolve()}
    if args.baseline_path is not None:
        versions["mpiwait (before)"] = args.baseline_path.resolve()
    counts: dict[str, dict[int, int]] = {name: {} for name in versions}
    with tempfile.TemporaryDirectory(prefix="mw-instr-") as tmp:
        work = Path(tmp)
        cache = REPO / "benchmarks" / "results" / "pycache"
        for n in (small, large):
            with testbed.LoopBed(n, work / f"bed{n}") as lb:
                lb.bed.wait_listening([0])
                if n == small:
                    # A checkout's first run compiles every module it imports (~3 G
                    # instructions): once each, uncounted, so the small run is start-up only.
                    for checkout in versions.values():
                        _run(lb, checkout, cache, [])
                for name, checkout in versions.items():
                    out = work / f"callgrind.{n}.{len(counts[name])}.out"
                    counts[name][n] = instructions(lb, checkout, out, cache)
                    print(f"  {name}, N={n}: {counts[name][n]:,} instructions", file=sys.stderr)
    print(f"instructions, callgrind, N = {small} and {large} ready hosts")
    per = {}
    for name, c in counts.items():
        per[name] = (c[large] - c[small]) / (large - small)
        start = c[small] - small * per[name]
        print(f"  {name:18} per host {per[name] / 1e6:7.3f} M   start-up {start / 1e6:8.1f} M")
    if len(per) == 2:
        ratio = per["mpiwait"] / per["mpiwait (before)"]
        print(f"  per host, mpiwait / before: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
