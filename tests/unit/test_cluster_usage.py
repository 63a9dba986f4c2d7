"""The cluster tier's usage watch (testbed.cluster.usage) reads a real process's CPU time and
peak memory from /proc, and passes over what it is not asked to watch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testbed.cluster.usage import Watch

# about 64 MiB held, then about half a second of CPU, then idle; a shebang with options, as
# the image's /opt/mpiwait/bin/mpiwait has
WORK = """#!{python} -ISB
import time
held = bytearray(64 * 1024 * 1024)
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
time.sleep(1.5)
"""


def _mpiwait_stand_in(tmp_path: Path) -> Path:
    script = tmp_path / "mpiwait"
    script.write_text(WORK.format(python=sys.executable))
    script.chmod(0o755)
    return script


def _run(script: Path, role: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "K_MPI_JOB_ROLE"}
    if role:
        env["K_MPI_JOB_ROLE"] = role
    subprocess.run([str(script)], env=env, check=True, timeout=60)


def test_a_launchers_mpiwait_is_measured(tmp_path: Path) -> None:
    script = _mpiwait_stand_in(tmp_path)
    counts = iter(range(1000))
    with Watch(counter=lambda: next(counts)) as watch:
        _run(script, "launcher")
    usage = watch.usage()
    assert usage is not None
    assert 0.4 <= usage.cpu_seconds < 5
    assert 64 <= usage.peak_rss_mib < 1024
    assert usage.counted is not None and usage.counted >= 1  # read while it lived


def test_a_workers_mpiwait_and_other_programs_are_not(tmp_path: Path) -> None:
    script = _mpiwait_stand_in(tmp_path)
    other = tmp_path / "not-mpiwait"
    other.write_text(script.read_text())
    other.chmod(0o755)
    with Watch() as watch:
        _run(script, "worker")
        _run(other, "launcher")
    assert watch.usage() is None
