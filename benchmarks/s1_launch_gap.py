"""Scenario 1, launch gap: workers whose sshd start at staggered times over 10 s, their names
resolvable only from when they start (Kubernetes without publishNotReadyAddresses).

For every method, one run is: the launcher starts (its init step, then its container under the
Job's restart policy, ending in a real Open MPI ``mpirun`` over the workers); at the planned
offsets each worker's name is published, discover_hosts.sh gains it, and its sshd starts. The
harness notes when each sshd began accepting (its listening socket appears in the worker's
/proc/net/tcp, polled every millisecond), and the method notes when mpirun started and how each
launcher container ended. Gap = start of the mpirun that succeeded - when the last worker
began accepting; every mpirun that failed is a failed launch.

The start offsets are stratified (one worker per 10/N s slot, at a random point of its slot,
slots shuffled over the workers) and drawn per repetition from a fixed seed: every method of a
repetition meets the same schedule. Each method has a bed of its own. mpiwait runs alone; the
peers run side by side in one window per repetition: their gaps come from sleeps of 1-40 s,
which a busy machine lengthens by milliseconds, and it saves minutes (``--sequential`` runs
each alone).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import Measured, RunResult, launches, stat_dict, testbed
from benchmarks.context import Context
from benchmarks.peers import OPERATOR_ENV, base, launcher

SPREAD = 10.0  # seconds over which the workers' sshd start
LAB = "cluster"  # --gap-lab: "cluster", the workers' sshds on other CPUs than the launcher
RUN_TIMEOUT = 150.0  # worst peer: 10 s + 20 s + 40 s of Job back-off, plus mpirun


@dataclass
class GapRun:
    method: str
    workers: int
    rep: int
    gap: float | None  # None: no mpirun succeeded
    failed_launches: int
    launches: int
    last_accept: float  # seconds after the launcher started
    mpirun_start: float | None  # seconds after the launcher started (the one that succeeded)
    wall: float
    rc: int | None
    side_by_side: int  # methods running at the same time (1: alone)


@dataclass
class _Slot:
    method: str
    bed: testbed.TestBed
    etc_mpi: Path
    ns_ino: list[int] = field(default_factory=list)
    run_dir: Path | None = None
    proc: Measured | None = None
    accept: list[float | None] = field(default_factory=list)


def _offsets(ctx: Context, n: int, rep: int) -> list[float]:
    rng = ctx.rng("gap", n, rep)
    slots = [SPREAD * (k + rng.random()) / n for k in range(n)]
    rng.shuffle(slots)
    return slots


def _accepting(pid: int, ns_ino: int, port: int) -> bool:
    try:
        if os.stat(f"/proc/{pid}/ns/net").st_ino != ns_ino:
            return False  # not inside the worker's namespace yet: its table is not the worker's
    except OSError:
        return False
    return testbed.listening(pid, port) is True


def _reset(bed: testbed.TestBed, etc_mpi: Path) -> None:
    for i in range(bed.n):
        if bed.sshd_running(i):
            bed.stop_sshd(i, sessions=True)
        if bed.published(i):
            bed.unpublish(i)
    bed.write_etc_mpi(etc_mpi, running=[])


def _make_slot(ctx: Context, method: str, workers: int) -> _Slot:
    bed_dir = ctx.workdir / f"gapbed{workers}-{method.replace(' ', '_')}"
    bed = testbed.TestBed(
        workers, workdir=bed_dir, published=False, start=False, split_cpus=LAB == "cluster"
    )
    bed.up()
    slot = _Slot(method, bed, bed_dir / "etc-mpi")
    slot.ns_ino = [os.stat(f"/run/netns/{h.ns}").st_ino for h in bed.hosts]
    bed.write_etc_mpi(slot.etc_mpi, running=[])
    return slot


def _launch(ctx: Context, slot: _Slot, rep: int) -> None:
    bed = slot.bed
    _reset(bed, slot.etc_mpi)
    slot.run_dir = ctx.workdir / f"gap{bed.n}-{slot.method.replace(' ', '_')}-{rep}"
    slot.run_dir.mkdir(parents=True, exist_ok=True)
    for f in ("starts", "exits"):
        (slot.run_dir / f).write_text("")
    mpirun = [str(ctx.scripts / "rec.sh"), *bed.openmpi_argv(["true"])]
    argv, extra = launcher(ctx.scripts, slot.method, mpirun, ctx.mpiwait_args)
    env = bed.env(
        ctx.env(
            {
                "MW_STARTS": str(slot.run_dir / "starts"),
                "MW_EXITS": str(slot.run_dir / "exits"),
                **OPERATOR_ENV,
                **extra,
            },
            method=slot.method,
        )
    )
    slot.accept = [None] * bed.n
    slot.proc = Measured(bed.launcher_cmd(argv, etc_mpi=slot.etc_mpi), env=env)


def _drive(slots: list[_Slot], offsets: list[float], t0: float) -> None:
    """Start every slot's workers on the same schedule; note when each began accepting."""
    n = len(offsets)
    order = sorted(range(n), key=offsets.__getitem__)
    started: list[int] = []
    k = 0
    deadline = t0 + SPREAD + 20
    while time.time() < deadline and any(a is None for s in slots for a in s.accept):
        now = time.time()
        while k < n and t0 + offsets[order[k]] <= now:
            i = order[k]
            k += 1
            started.append(i)
            for s in slots:
                s.bed.publish(i)  # its "DNS record" appears as its container starts
                names = sorted(s.bed.hosts[j].name for j in started)
                s.bed.write_discover_hosts(s.etc_mpi, names)
                s.bed.start_sshd(i, wait=False)
        for s in slots:
            for i in started:
                if s.accept[i] is None:
                    pid = s.bed.sshd_pid(i)
                    if _accepting(pid, s.ns_ino[i], s.bed.hosts[i].port):
                        s.accept[i] = time.time()
        time.sleep(0.001)


def _result(ctx: Context, slot: _Slot, res: RunResult, rep: int, t0: float, group: int) -> GapRun:
    assert slot.run_dir is not None
    (slot.run_dir / "stderr").write_text(res.stderr[-20000:])
    done = launches(slot.run_dir / "starts", slot.run_dir / "exits")
    failed = sum(1 for _, rc in done if rc != 0)
    ok = [t for t, rc in done if rc == 0]
    last = max((a for a in slot.accept if a is not None), default=float("nan"))
    if any(a is None for a in slot.accept):
        ctx.log(f"  warning: a worker never began accepting in {slot.method} rep {rep}")
    return GapRun(
        method=slot.method,
        workers=slot.bed.n,
        rep=rep,
        gap=(ok[0] - last) if ok else None,
        failed_launches=failed,
        launches=len(done),
        last_accept=last - t0,
        mpirun_start=(ok[0] - t0) if ok else None,
        wall=res.wall,
        rc=res.rc,
        side_by_side=group,
    )


def _run_group(ctx: Context, slots: list[_Slot], rep: int) -> list[GapRun]:
    t0 = time.time()
    for s in slots:
        _launch(ctx, s, rep)
    _drive(slots, _offsets(ctx, slots[0].bed.n, rep), t0)
    out = []
    for s in slots:
        assert s.proc is not None
        res = s.proc.wait(max(1.0, t0 + RUN_TIMEOUT - time.time()))
        out.append(_result(ctx, s, res, rep, t0, len(slots)))
    for s in slots:
        _reset(s.bed, s.etc_mpi)
    return out


def run(ctx: Context, *, workers: int, methods: list[str], sequential: bool = False) -> dict:
    ctx.log(
        f"launch gap: {workers} workers over {SPREAD:g} s, {ctx.reps} reps, "
        f"methods {', '.join(methods)}"
    )
    peers = [m for m in methods if base(m) != "mpiwait"]
    groups = [[m] for m in methods if base(m) == "mpiwait"]  # each alone
    groups += [[p] for p in peers] if sequential else ([peers] if peers else [])
    slots = {}
    runs: list[GapRun] = []
    try:
        for m in methods:
            slots[m] = _make_slot(ctx, m, workers)
        for rep in range(ctx.reps):
            for group in groups:  # interleaved: drift on a busy machine hits all alike
                for r in _run_group(ctx, [slots[m] for m in group], rep):
                    runs.append(r)
                    gap = f"{r.gap:.3f} s" if r.gap is not None else "never launched"
                    ctx.log(
                        f"  rep {rep} {r.method}: gap {gap}, failed launches {r.failed_launches}"
                    )
    finally:
        for s in slots.values():
            s.bed.down()
    rows = []
    for method in methods:
        mine = [r for r in runs if r.method == method]
        rows.append(
            {
                "method": method,
                "gap_s": stat_dict([r.gap for r in mine if r.gap is not None]),
                "failed_launches": stat_dict([r.failed_launches for r in mine]),
                "failed_launches_total": sum(r.failed_launches for r in mine),
                "never_launched": sum(1 for r in mine if r.gap is None),
                "mpirun_start_s": stat_dict(
                    [r.mpirun_start for r in mine if r.mpirun_start is not None]
                ),
                "reps": len(mine),
            }
        )
    return {
        "scenario": "launch-gap",
        "workers": workers,
        "spread_s": SPREAD,
        "lab": LAB,
        "reps": ctx.reps,
        "peers_side_by_side": not sequential and len(peers) > 1,
        "rows": rows,
        "runs": [r.__dict__ for r in runs],
    }
