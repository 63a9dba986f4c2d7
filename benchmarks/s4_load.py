"""Scenario 4, load while waiting: 50 workers whose pods run (names resolve, discover_hosts.sh
lists them) but whose sshd is down for 30 s (connects are refused), then comes up on all of them
at once. What the cluster's DNS and the workers see from each method, up to the moment the
method starts the mpirun that succeeds:

- name lookups: every open of /etc/hosts by the launcher's processes (strace, see
  common.strace_prefix), per host; peak probes per second is the most lookups in any 1-s
  window (every mpiwait attempt starts with one lookup, so for mpiwait lookups = probes);
- TCP connects: SYNs to port 22 counted by iptables inside each worker's namespace;
- SSH logins: "Accepted publickey" lines in each worker's sshd log.

Every method runs its whole launcher, as in scenario 1 (initContainer, the Job's restarts, real
mpirun): for crash-and-retry and dns-entrypoint the waiting *is* failed mpiruns. The real
command waits (rec.sh with MW_GATE) until the harness has read the counters, so the mpirun
that succeeds is not counted as waiting. An mpirun that started while the hosts were still down
and succeeded anyway (its ssh retries refused connects: ConnectionAttempts=10) waited until the
hosts came up: for it, the counters read just before sshd starts are the waiting.

mpiwait also runs a second variant, "names unresolvable while down" (Kubernetes' default,
without publishNotReadyAddresses: the names appear with sshd), where every attempt is a failed
lookup and only the probe budget bounds what the DNS sees. The two mpiwait variants run side by
side (each takes ~10% of a core), then the peers side by side, each against a bed of its own, in
one window per repetition (their schedules are fixed sleeps, so sharing the machine changes
their counts little; it saves minutes). ``--s4-sequential`` runs each alone.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import (
    LogTail,
    Measured,
    RunResult,
    SynCounter,
    connects,
    have_strace,
    hosts_opens,
    launches,
    peak_per_second,
    stat_dicts,
    strace_prefix,
    testbed,
)
from benchmarks.context import Context
from benchmarks.peers import OPERATOR_ENV, base, launcher

HOSTS = 50
DOWN = 30.0
RUN_TIMEOUT = 180.0


@dataclass
class _Counts:
    at: float
    syns: int
    logins: int
    per_host_logins: list[int]


@dataclass
class _Slot:
    """One method against one bed, during one repetition."""

    method: str
    bed: testbed.TestBed
    etc_mpi: Path
    syn: list[SynCounter]
    unresolved: bool  # names unpublished while sshd is down
    run_dir: Path = field(init=False)
    proc: Measured | None = None
    tails: list[LogTail] = field(default_factory=list)
    snapshots: dict[int, _Counts] = field(default_factory=dict)
    at_up: _Counts | None = None  # read just before its hosts come up
    up_done: float = 0.0  # when the last of its sshd was started
    result: RunResult | None = None

    def counts(self) -> _Counts:
        syns = sum(sum(c.read().values()) for c in self.syn)
        per = [t.read().count("Accepted publickey") for t in self.tails]
        return _Counts(time.time(), syns, sum(per), per)


UNRESOLVED = " (names unresolvable while down)"


def _make_slot(ctx: Context, method: str, k: int) -> _Slot:
    bed_dir = ctx.workdir / f"loadbed{k}"
    bed = testbed.TestBed(HOSTS, workdir=bed_dir, published=True, start=False)
    bed.up()
    etc_mpi = bed_dir / "etc-mpi"
    bed.write_etc_mpi(etc_mpi)  # every pod Running: discover_hosts.sh lists them all
    syn = [SynCounter(h.ns, [h.addr], port=h.port) for h in bed.hosts]
    for c in syn:
        c.install()
    return _Slot(method, bed, etc_mpi, syn, unresolved=method.endswith(UNRESOLVED))


def _start(ctx: Context, slot: _Slot, rep: int, t0: float) -> None:
    bed = slot.bed
    for i in range(bed.n):
        if bed.sshd_running(i):
            bed.stop_sshd(i, sessions=True)
    for i in range(bed.n):
        if bed.published(i) == slot.unresolved:
            (bed.unpublish if slot.unresolved else bed.publish)(i)
    for c in slot.syn:
        c.zero()
    slot.tails = [LogTail(h.sshd_log) for h in bed.hosts]
    slot.snapshots = {}
    slot.at_up = None
    slot.up_done = 0.0
    slot.run_dir = ctx.workdir / f"load-{slot.method.replace(' ', '_')}-{rep}"
    slot.run_dir.mkdir(parents=True, exist_ok=True)
    for f in ("starts", "exits"):
        (slot.run_dir / f).write_text("")
    (slot.run_dir / "gate").mkdir(exist_ok=True)
    for g in (slot.run_dir / "gate").iterdir():
        g.unlink()
    mpirun = [str(ctx.scripts / "rec.sh"), *bed.openmpi_argv(["true"])]
    argv, extra = launcher(
        ctx.scripts, slot.method.removesuffix(UNRESOLVED), mpirun, ctx.mpiwait_args
    )
    env = bed.env(
        ctx.env(
            {
                "MW_STARTS": str(slot.run_dir / "starts"),
                "MW_EXITS": str(slot.run_dir / "exits"),
                "MW_GATE": str(slot.run_dir / "gate"),
                **OPERATOR_ENV,
                **extra,
            },
            method=slot.method,
        )
    )
    trace = slot.run_dir / "trace"
    trace.unlink(missing_ok=True)
    slot.proc = Measured(
        bed.launcher_cmd([*strace_prefix(trace), *argv], etc_mpi=slot.etc_mpi), env=env
    )


def _service_gates(slot: _Slot) -> None:
    """Snapshot the counters at each start of the real command, then let it run."""
    starts = slot.run_dir / "starts"
    try:
        n = sum(1 for line in starts.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return
    for k in range(1, n + 1):
        if k not in slot.snapshots:
            slot.snapshots[k] = slot.counts()
            (slot.run_dir / "gate" / str(k)).touch()


def _bring_up(slot: _Slot) -> None:
    slot.at_up = slot.counts()
    for i in range(slot.bed.n):
        if slot.unresolved:
            slot.bed.publish(i)
        slot.bed.start_sshd(i, wait=False)
    slot.up_done = time.time()


def _run_group(ctx: Context, slots: list[_Slot], rep: int) -> list[dict]:
    t0 = time.time()
    for slot in slots:
        _start(ctx, slot, rep, t0)
    up_at = t0 + DOWN
    brought_up = False
    deadline = t0 + RUN_TIMEOUT
    while time.time() < deadline and not all(s.proc.done() for s in slots):  # type: ignore[union-attr]
        if not brought_up and time.time() >= up_at:
            threads = [threading.Thread(target=_bring_up, args=(s,)) for s in slots]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            up_at = time.time()  # when the last start was issued
            brought_up = True
        for slot in slots:
            _service_gates(slot)
        time.sleep(0.01)
    out = []
    for slot in slots:
        assert slot.proc is not None
        slot.result = slot.proc.wait(max(1.0, deadline - time.time()))
        _service_gates(slot)
        out.append(_summarize(ctx, slot, rep, t0, up_at))
    return out


def _summarize(ctx: Context, slot: _Slot, rep: int, t0: float, up_at: float) -> dict:
    assert slot.result is not None
    (slot.run_dir / "stderr").write_text(slot.result.stderr[-20000:])
    done = launches(slot.run_dir / "starts", slot.run_dir / "exits")
    ok = [(k, t) for k, (t, rc) in enumerate(done, start=1) if rc == 0]
    up = slot.at_up.at if slot.at_up is not None else up_at
    if ok and ok[0][1] >= up:
        k, launched = ok[0]
        waited = slot.snapshots.get(k) or slot.counts()
        cutoff = launched
    elif ok:  # started before the hosts were up; its own ssh retries waited for them
        launched = ok[0][1]
        waited = slot.at_up or slot.counts()
        cutoff = up
    else:  # never launched: everything it did was waiting
        launched = None
        waited = slot.counts()
        cutoff = float("inf")
    lookups = [t for t in hosts_opens(slot.run_dir / "trace") if t < cutoff]
    tcp = [t for t in connects(slot.run_dir / "trace", slot.bed.port) if t < cutoff]
    n = slot.bed.n
    row = {
        "method": slot.method,
        "rep": rep,
        "lookups_per_host": len(lookups) / n,
        "connects_per_host": waited.syns / n,
        "logins_per_host": waited.logins / n,
        "max_logins_one_host": max(waited.per_host_logins, default=0),
        "peak_lookups_per_s": peak_per_second(lookups),
        "peak_connects_per_s": peak_per_second(tcp),
        "failed_launches": sum(1 for _, rc in done if rc != 0),
        # from when its hosts were all started (spawning 50 sshd takes a moment)
        "launched_after_up_s": (launched - (slot.up_done or up)) if launched is not None else None,
        "client_cpu_s": slot.result.cpu,
        "rc": slot.result.rc,
    }
    ctx.log(
        f"  rep {rep} {slot.method}: {row['lookups_per_host']:.1f} lookups/host, "
        f"{row['connects_per_host']:.1f} connects/host, {row['logins_per_host']:.2f} "
        f"logins/host, peak {row['peak_lookups_per_s']} lookups/s and "
        f"{row['peak_connects_per_s']} connects/s, launched "
        + (f"{row['launched_after_up_s']:.2f} s after up" if launched is not None else "never")
    )
    return row


def run(
    ctx: Context, *, methods: list[str], sequential: bool = False, unresolved: bool = True
) -> dict:
    if not have_strace():
        ctx.log("load: strace not found (apt-get install strace): lookups are not counted")
    ctx.log(f"load: {HOSTS} hosts down for {DOWN:g} s then up, {ctx.reps} reps")
    variants = [m for m in methods if base(m) == "mpiwait"]
    peers = [m for m in methods if base(m) != "mpiwait"]
    # each variant with its unresolvable-names twin beside it (before and after in turn)
    pairs = [[m, m + UNRESOLVED] if unresolved else [m] for m in variants]
    solo = [m for pair in pairs for m in pair]
    groups = [[m] for m in solo] if sequential else pairs
    groups += [[p] for p in peers] if sequential else [peers] if peers else []
    methods = solo + peers
    slots = {m: _make_slot(ctx, m, k) for k, m in enumerate(methods)}
    runs: list[dict] = []
    try:
        for rep in range(ctx.reps):
            for group in groups:
                runs += _run_group(ctx, [slots[m] for m in group], rep)
    finally:
        for slot in slots.values():
            slot.bed.down()
    rows = []
    for m in methods:
        mine = [r for r in runs if r["method"] == m]
        rows.append(
            {
                "method": m,
                **stat_dicts(
                    mine,
                    (
                        "lookups_per_host",
                        "connects_per_host",
                        "logins_per_host",
                        "max_logins_one_host",
                        "peak_lookups_per_s",
                        "peak_connects_per_s",
                        "failed_launches",
                        "launched_after_up_s",
                        "client_cpu_s",
                    ),
                ),
                "never_launched": sum(1 for r in mine if r["launched_after_up_s"] is None),
                "reps": len(mine),
            }
        )
    return {
        "scenario": "load",
        "hosts": HOSTS,
        "down_s": DOWN,
        "side_by_side": not sequential,
        "reps": ctx.reps,
        "rows": rows,
        "runs": runs,
    }
