"""Scenario 3, start-up overhead: 4 worker hosts ready (TestBed namespaces with sshd).

Every command runs the same way, in the bed's launcher context (files-only names, the bed's
ssh_config as /etc/ssh/ssh_config), from the same interpreter, and is timed from spawn to exit:

- ``python -c pass``: the floor of any Python tool on this machine;
- ``python -c "import paramiko"``: what paramiko's import costs, which a wait that logs in pays
  (with invoke and importlib.metadata, which paramiko 4 imports);
- ``mpiwait --hosts w1,w2,w3,w4 -- true``: the whole wait for 4 ready hosts, then exec;
- the same with an Open MPI 4 COMMAND that runs nothing (``sh -c ': mpirun'``), with and without
  ``--no-daemon-check``: what the daemon check (ompi_info, one more round trip a host) costs;
- ``ssh w1 true``: one OpenSSH login with a command, for scale;
- ``mpiwait --version``, ``mpiwait --help`` and the worker role (``K_MPI_JOB_ROLE=worker
  mpiwait -- true``): paths that must not import paramiko. A separate ``-X importtime`` run of
  each tells whether it did.

These are short, so each is run 4x as often as ``--reps`` asks (interleaved).

Then what recognising the launch adds on the launcher path (launch/handover.py), in process: the
import of mpiwait.launch.handover and .interfaces (``-X importtime``), and one ``recognise()``
plus ``plan()`` for each MPI installed here (Debian's, and scripts/install-test-mpis's), and for
COMMAND a wrapper (``bash -c``, a script: the MPI looked for on its PATH). The worker path never
imports launch/handover.py nor recognises anything.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from benchmarks.common import PY, Stat, run_measured, stat_dict, testbed
from benchmarks.context import Context

HOSTS = 4
FACTOR = 4  # repetitions per --reps


def _commands(
    bed: testbed.TestBed, mpiwait_args: list[str], variants: list[str]
) -> dict[str, tuple[list[str], dict[str, str], str]]:
    """label -> (argv, extra environment, the mpiwait variant it runs)"""
    mw = [PY, "-m", "mpiwait"]
    hosts = ",".join(bed.names)
    waits = {
        f"{variant} --hosts (4 ready) -- true": (
            [*mw, "--hosts", hosts, *mpiwait_args, "--", "true"],
            {},
            variant,
        )
        for variant in variants
    }
    # An Open MPI 4 COMMAND that runs nothing (sh -c ': mpirun' names mpirun, as a wrapper's
    # words do), with and without the daemon check: what the check costs a wait for ready hosts.
    openmpi = ["--", "sh", "-c", ": mpirun"]
    daemons = {
        f"mpiwait --hosts (4 ready) -- sh -c ': mpirun'{flag}": (
            [*mw, "--hosts", hosts, *mpiwait_args, *([flag.strip()] if flag else []), *openmpi],
            {},
            "mpiwait",
        )
        for flag in ("", " --no-daemon-check")
    }
    return {
        "python -c pass": ([PY, "-c", "pass"], {}, ""),
        "python -c 'import paramiko'": ([PY, "-c", "import paramiko"], {}, ""),
        **waits,
        **daemons,
        "ssh w1 true": (["ssh", bed.names[0], "true"], {}, ""),
        "mpiwait --version": ([*mw, "--version"], {}, ""),
        "mpiwait --help": ([*mw, "--help"], {}, ""),
        "mpiwait (worker role) -- true": ([*mw, "--", "true"], {"K_MPI_JOB_ROLE": "worker"}, ""),
    }


def _imports_paramiko(
    ctx: Context, bed: testbed.TestBed, argv: list[str], extra, variant: str
) -> bool:
    r = bed.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=ctx.env(extra, method=variant), timeout=60
    )
    return any(" paramiko" in line for line in r.stderr.splitlines())


def run(ctx: Context) -> dict:
    reps = ctx.reps * FACTOR
    ctx.log(f"start-up: {HOSTS} ready hosts, {reps} runs of each command")
    runs: list[dict] = []
    with testbed.TestBed(HOSTS, workdir=ctx.workdir / "startbed") as bed:
        cmds = _commands(bed, ctx.mpiwait_args, ctx.mpiwait_variants())
        # warm-up: bytecode cache, page cache, sshd's first fork
        for argv, extra, variant in cmds.values():
            bed.run(argv, env=ctx.env(extra, method=variant), timeout=60)
        for rep in range(reps):
            for label, (argv, extra, variant) in cmds.items():
                r = run_measured(
                    bed.launcher_cmd(argv),
                    env=bed.env(ctx.env(extra, method=variant)),
                    timeout=60,
                )
                if r.rc != 0:
                    ctx.log(f"  {label} failed (rc {r.rc}): {r.stderr.strip()[-300:]}")
                runs.append(
                    {
                        "command": label,
                        "rep": rep,
                        "wall_s": r.wall,
                        "cpu_s": r.cpu,
                        "rc": r.rc,
                        "maxrss_mb": r.maxrss_kb / 1024,
                    }
                )
        paramiko = {
            label: _imports_paramiko(ctx, bed, argv, extra, variant)
            for label, (argv, extra, variant) in cmds.items()
            if label.startswith("mpiwait")
        }
    base = Stat.of(r["wall_s"] for r in runs if r["command"] == "python -c pass")
    rows = []
    for label in cmds:
        mine = [r for r in runs if r["command"] == label and r["rc"] == 0]
        wall = Stat.of(r["wall_s"] for r in mine)
        rows.append(
            {
                "command": label,
                "wall_s": wall.as_dict() if wall else None,
                "above_python_s": (wall.median - base.median) if wall and base else None,
                "cpu_s": stat_dict(r["cpu_s"] for r in mine),
                "maxrss_mb": stat_dict(r["maxrss_mb"] for r in mine),
                "imports_paramiko": paramiko.get(label),
                "failed": sum(1 for r in runs if r["command"] == label and r["rc"] != 0),
                "reps": len([r for r in runs if r["command"] == label]),
            }
        )
        ctx.log(f"  {label}: {wall.median * 1000:.0f} ms" if wall else f"  {label}: failed")
    rows += _recognise_rows(ctx, reps)
    return {"scenario": "startup", "hosts": HOSTS, "reps": reps, "rows": rows, "runs": runs}


MPIS = Path(os.environ.get("MPIWAIT_TEST_MPIS", "/var/cache/mpiwait-tests"))
LAUNCHERS = {
    "Open MPI 4 (Debian mpirun)": "mpirun",
    "MPICH 4 (Debian mpiexec.hydra)": "mpiexec.hydra",
    "Open MPI 5 (PyPI)": str(MPIS / "openmpi5/bin/mpirun"),
    "MPICH 5 (PyPI)": str(MPIS / "mpich5/bin/mpirun"),
    "Intel MPI (PyPI)": str(MPIS / "impi/bin/mpirun"),
}
# COMMAND a wrapper (issue 21): the MPI is looked for on PATH; (argv, PATH first or alone)
WRAPPERS = {
    "bash -c, Open MPI 5 (PyPI) first on PATH": (
        ["bash", "-c", "cd /tmp && mpirun -n 2 hostname"],
        str(MPIS / "openmpi5/bin") + os.pathsep + os.environ.get("PATH", os.defpath),
    ),
    "bash -c, Debian's mpirun on PATH": (
        ["bash", "-c", "cd /tmp && mpirun -n 2 hostname"],
        os.environ.get("PATH", os.defpath),
    ),
    "python3 train.py, no MPI on PATH": (
        ["python3", "train.py"],
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin",
    ),
}
CALLS = 50  # recognise() calls per repetition


def _recognise_rows(ctx: Context, reps: int) -> list[dict]:
    from mpiwait.launch.handover import Interface, plan, recognise

    rows = []
    # after mpiwait.modes.wait (which every start imports) and socket (which the probes import
    # before launch/interfaces.py is used, after the wait), so only what recognising adds
    # is counted
    code = "import mpiwait.modes.wait, socket, mpiwait.launch.handover, mpiwait.launch.interfaces"
    imports = []
    for rep in range(max(3, reps) + 1):  # the first writes the bytecode: not counted
        cp = subprocess.run(
            [PY, "-X", "importtime", "-c", code],
            capture_output=True, text=True, timeout=60, env=ctx.env({}),
        )  # fmt: skip
        imports += (
            []
            if rep == 0
            else [
                sum(
                    int(line.split("|")[1]) / 1e6
                    for line in cp.stderr.splitlines()
                    if line.rstrip().endswith(
                        ("mpiwait.launch.handover", "mpiwait.launch.interfaces")
                    )
                )
            ]
        )
    rows.append(_in_process_row("import mpiwait.launch.handover + interfaces", imports))
    ctx.log(
        f"  import mpiwait.launch.handover + interfaces: {Stat.of(imports).median * 1e6:.0f} µs"
    )
    env = dict(os.environ)
    eth0 = Interface("eth0", "benchmark")
    for label, launcher in LAUNCHERS.items():
        argv = [launcher, "-n", "2", "hostname"]
        if recognise(argv, env) is None:
            continue  # not installed here
        times = []
        for _ in range(reps * CALLS):
            t0 = time.perf_counter()
            plan(recognise(argv, env), argv, env, interface=eth0)
            times.append(time.perf_counter() - t0)
        rows.append(_in_process_row(f"recognise the launch: {label}", times))
        ctx.log(f"  recognise {label}: {Stat.of(times).median * 1e6:.0f} µs")
    for label, (argv, path) in WRAPPERS.items():
        wenv = {**env, "PATH": path}
        found = recognise(argv, wenv)
        if (found is None) != label.endswith("no MPI on PATH"):
            continue  # not installed here (or, for the last, an MPI is after all)
        times = []
        for _ in range(reps * CALLS):
            t0 = time.perf_counter()
            launch = recognise(argv, wenv)
            if launch is not None:
                plan(launch, argv, wenv, interface=eth0)
            times.append(time.perf_counter() - t0)
        rows.append(_in_process_row(f"recognise the launch: {label}", times))
        ctx.log(f"  recognise {label}: {Stat.of(times).median * 1e6:.0f} µs")
    return rows


def _in_process_row(label: str, seconds: list[float]) -> dict:
    return {
        "command": label,
        "wall_s": Stat.of(seconds).as_dict(),
        "above_python_s": None,
        "cpu_s": None,
        "maxrss_mb": None,
        "imports_paramiko": False,
        "failed": 0,
        "reps": len(seconds),
        "in_process": True,
    }
