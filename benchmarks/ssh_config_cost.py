"""What resolving N hosts' ssh settings costs, the way mpiwait does it beside the way it was not
designed: asking the installed ``ssh -G`` for every host.

Three ways side by side, over the same config (mpi-operator's launcher config plus a per-host
block, in a temporary directory) and N host names:

- ``reader only``: mpiwait's reader with no ssh consulted (the initContainer case);
- ``reader + ssh -G once``: what mpiwait does where ssh is installed (``ssh -V`` once, ``ssh -G``
  for the first host; the reader for every host);
- ``ssh -G per host``: one ``ssh -G`` per host, 8 at a time (the alternative design).

Reported: wall time and CPU time (this process and its children) of each, and the ratios to the
first. Nothing is connected to. Run: ``.venv/bin/python -m benchmarks.ssh_config_cost
[--hosts 1000]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mpiwait.openssh.client import find_client
from mpiwait.openssh.config import NO_CLIENT, SSHConfig

CONFIG = (
    "Host *-worker-*\n  Port 2222\n  User mpiuser\n"
    "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
    "  IdentityFile ~/.ssh/id_rsa\n  SendEnv LANG LC_*\n"
)


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _measure(run: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    run()
    return time.perf_counter() - wall, _cpu() - cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=1000)
    args = ap.parse_args()
    ssh = shutil.which("ssh")
    if ssh is None:
        raise SystemExit("needs an OpenSSH client (ssh) to compare with")
    hosts = [f"pi-worker-{i}.pi.default.svc" for i in range(args.hosts)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp, "config")
        cfg.write_text(CONFIG)
        env = dict(os.environ)

        def reader(client_finder: Callable[[], object]) -> Callable[[], object]:
            def run() -> object:
                client = client_finder()
                r = SSHConfig(config_path=cfg, client=client)  # type: ignore[arg-type]
                return [r.resolve(h) for h in hosts]

            return run

        def per_host() -> object:
            def one(host: str) -> str:
                return subprocess.run(
                    [ssh, "-G", "-F", str(cfg), host],
                    capture_output=True,
                    text=True,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    check=True,
                ).stdout

            with ThreadPoolExecutor(8) as pool:
                return list(pool.map(one, hosts))

        rows = [
            ("reader only", _measure(reader(lambda: NO_CLIENT))),
            ("reader + ssh -G once", _measure(reader(find_client))),
            ("ssh -G per host (8 at a time)", _measure(per_host)),
        ]
    base_wall, base_cpu = rows[0][1]
    print(f"resolving {args.hosts} hosts; {find_client().banner}")
    print(f"{'':32} {'wall s':>8} {'CPU s':>8} {'wall x':>8} {'CPU x':>8}")
    for name, (wall, cpu) in rows:
        ratios = f"{wall / base_wall:8.1f} {cpu / max(base_cpu, 1e-6):8.1f}"
        print(f"{name:32} {wall:8.3f} {cpu:8.3f} {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
