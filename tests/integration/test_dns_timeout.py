"""The dns stage is bounded by --connect-timeout, on a bounded number of threads.

A resolver that never answers, hermetically: mpiwait runs in a private network namespace (only
its own loopback) and mount namespace, where /etc/nsswitch.conf says ``hosts: files dns`` and
/etc/resolv.conf points at 127.0.0.1:53, on which a UDP socket is bound and never replies. No
query can leave the namespace. glibc then holds each getaddrinfo for its own timeout (30 s
here), as Docker's embedded DNS did for a container not started yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

import pytest
import testbed

from mpiwait.probe.lookup import LookupPool, LookupTimeout, ResolverBusy
from mpiwait.settings import MAX_PENDING_LOOKUPS

SILENT_DNS = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
open(sys.argv[1], "w").close()
while True:
    s.recv(4096)  # read and never answer
"""


def _threads(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@testbed.needs("root", "unshare", "ip", "mount")  # a private network and mount namespace
def test_stuck_lookups_time_out_per_attempt_on_bounded_threads(tmp_path: Path) -> None:
    (tmp_path / "nsswitch.conf").write_text("hosts: files dns\n")
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:30 attempts:1\n")
    (tmp_path / "hosts").write_text(f"127.0.0.1 localhost {socket.gethostname()}\n")
    ready = tmp_path / "dns-listening"
    hosts = [f"stuck{i}.example" for i in range(60)]
    parallel = 8
    script = (
        "ip link set lo up"
        + "".join(
            f" && mount --bind {tmp_path / name} /etc/{name}"
            for name in ("nsswitch.conf", "resolv.conf", "hosts")
        )
        + f" && {{ \"$0\" -c '{SILENT_DNS}' {ready} </dev/null >/dev/null 2>&1 & }}"
        + f" && while [ ! -e {ready} ]; do sleep 0.05; done"
        + ' && exec "$0" "$@"'
    )
    # A network and mount namespace of its own: the silent DNS server on its loopback, then
    # "$0" "$@" is python -m mpiwait ARGS.
    wrapper = ["unshare", "-n", "-m", "--propagation", "private", "sh", "-c", script]
    args = [
        "--hosts", ",".join(hosts), "--check", "dns", "--connect-timeout", "1", "--timeout", "6",
        "--parallel", str(parallel), "--log-format", "json",
        "--termination-log", str(tmp_path / "none"),
    ]  # fmt: skip
    proc = testbed.start(None, args, wrapper=wrapper, env=testbed.mpiwait_env())
    most = 0
    try:
        while proc.proc.poll() is None and time.monotonic() - proc.started < 60:
            most = max(most, _threads(proc.pid))
            time.sleep(0.02)
        run = proc.finish(30)
    finally:
        # The silent server outlives mpiwait in its process group; it goes with the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
    err, took = run.stderr, run.elapsed
    assert run.returncode == 124, run
    assert took < 6 + 10, f"took {took:.1f}s for a 6 s deadline\n{err}"
    records = [json.loads(line) for line in err.splitlines()]
    result = next(r for r in records if r["event"] == "result")
    seen = [r for r in records if r["event"] == "host"] + result["hosts"]
    reasons = {(h["stage"], h["reason"]) for h in seen}
    assert ("dns", "timeout") in reasons, reasons
    # More lookups were stuck than the pool holds: the rest were turned away, not queued.
    assert ("dns", "resolver-busy") in reasons, reasons
    # Each probe gave up after 1 s (the resolver would have held it 30 s): hosts were
    # attempted several times each within the 6 s.
    assert max(h["attempts"] for h in result["hosts"]) >= 3, result["hosts"]
    # main + probe threads + the resolver pool + the launcher's own-name lookup and slack;
    # not a thread per stuck lookup (60 hosts, several attempts each).
    assert most <= 1 + parallel + MAX_PENDING_LOOKUPS + 3, most


def test_resolver_gives_up_and_turns_lookups_away_when_all_threads_are_stuck() -> None:
    import threading

    release = threading.Event()
    calls: list[str] = []

    def lookup(host: str, port: int, **kw: object) -> list:
        calls.append(host)
        if host.startswith("stuck"):
            release.wait(10)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port))]

    resolver = LookupPool(2, lookup)
    assert resolver.resolve("fine", 22, 1.0)[0][4] == ("10.0.0.1", 22)
    for name in ("stuck1", "stuck2"):
        with pytest.raises(LookupTimeout):
            resolver.resolve(name, 22, 0.05)
    with pytest.raises(ResolverBusy):
        resolver.resolve("fine", 22, 1.0)
    assert resolver.threads == 2
    release.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            assert resolver.resolve("fine", 22, 1.0)
            break
        except ResolverBusy:
            time.sleep(0.01)
    else:
        pytest.fail("the pool never freed up after the stuck lookups finished")
    assert resolver.threads == 2  # reused, not replaced


def test_resolver_passes_errors_through() -> None:
    def lookup(host: str, port: int, **kw: object) -> list:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(socket.gaierror):
        LookupPool(1, lookup).resolve("nope", 22, 1.0)
