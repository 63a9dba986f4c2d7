"""What one invocation of the harness shares with every scenario."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import bench_env, log
from benchmarks.peers import BEFORE, write_scripts


@dataclass
class Context:
    results: Path  # where this run writes (benchmarks/results/<stamp>/ unless --out)
    cache: Path  # bytecode cache shared by runs (benchmarks/results/pycache)
    reps: int
    quick: bool
    seed: int = 1
    mpiwait_path: Path | None = None  # another checkout's mpiwait package to measure
    mpiwait_args: list[str] = field(default_factory=list)  # extra options for every wait
    baseline_path: Path | None = None  # another checkout's mpiwait, measured side by side
    workdir: Path = field(init=False)
    scripts: Path = field(init=False)

    def __post_init__(self) -> None:
        self.results.mkdir(parents=True, exist_ok=True)
        self.workdir = self.results / "work"
        self.workdir.mkdir(exist_ok=True)
        self.scripts = write_scripts(self.results / "scripts")

    def env(self, extra: dict[str, str] | None = None, *, method: str = "") -> dict[str, str]:
        """The environment of a process under test; ``method`` names the variant it runs."""
        env = bench_env(self.cache, extra)
        path = self.mpiwait_path
        if method.startswith(BEFORE):
            path = self.baseline_path
        if path is not None:
            env["PYTHONPATH"] = f"{path}{os.pathsep}{env['PYTHONPATH']}"
        return env

    def mpiwait_variants(self) -> list[str]:
        """mpiwait as measured, and the baseline beside it when there is one."""
        return ["mpiwait", BEFORE] if self.baseline_path is not None else ["mpiwait"]

    def rng(self, *salt: object) -> random.Random:
        """A generator that gives the same numbers for the same salt in every run."""
        return random.Random("-".join(map(str, (self.seed, *salt))))

    def log(self, msg: str) -> None:
        log(msg)
