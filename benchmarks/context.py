"""What one invocation of the harness shares with every scenario."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import bench_env, log
from benchmarks.peers import write_scripts


@dataclass
class Context:
    results: Path  # where this run writes (benchmarks/results/<stamp>/ unless --out)
    cache: Path  # bytecode cache shared by runs (benchmarks/results/pycache)
    reps: int
    quick: bool
    seed: int = 1
    mpiwait_path: Path | None = None  # another checkout's mpiwait package to measure
    mpiwait_args: list[str] = field(default_factory=list)  # extra options for every wait
    workdir: Path = field(init=False)
    scripts: Path = field(init=False)

    def __post_init__(self) -> None:
        self.results.mkdir(parents=True, exist_ok=True)
        self.workdir = self.results / "work"
        self.workdir.mkdir(exist_ok=True)
        self.scripts = write_scripts(self.results / "scripts")

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = bench_env(self.cache, extra)
        if self.mpiwait_path is not None:
            env["PYTHONPATH"] = f"{self.mpiwait_path}{os.pathsep}{env['PYTHONPATH']}"
        return env

    def rng(self, *salt: object) -> random.Random:
        """A generator that gives the same numbers for the same salt in every run."""
        return random.Random("-".join(map(str, (self.seed, *salt))))

    def log(self, msg: str) -> None:
        log(msg)
