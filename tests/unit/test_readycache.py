"""The memory of recent passes kept by ``mpiwait --list-ready`` between calls (pure file logic)."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

import pytest
import testbed

from mpiwait.modes import list_ready
from mpiwait.probe import cachedir, readycache
from mpiwait.probe.readycache import Entry, ReadyCache
from mpiwait.settings import ProbeOptions
from mpiwait.wait.runner import StartWindow, run_all


def _entry(at: float = 100.0) -> Entry:
    return Entry(at, "w1.job.ns.svc", 22, ("10.0.0.5",))


def test_saved_entries_load_back(tmp_path: Path) -> None:
    cache = ReadyCache.at(str(tmp_path), "key", 30.0)
    cache.save({"w1": _entry(), "w2": Entry(5.0, "10.0.0.6", 2222, ())})
    assert cache.load() == {"w1": _entry(), "w2": Entry(5.0, "10.0.0.6", 2222, ())}
    # Another settings key is another file: nothing of the first applies.
    assert ReadyCache.at(str(tmp_path), "other", 30.0).load() == {}


def test_abandoned_files_are_removed_when_a_call_saves(tmp_path: Path) -> None:
    """/dev/shm is memory: files of settings no call uses any more (an old key, a finished job
    of the same uid) go once they have not been written for 10 minutes; live ones stay."""
    old = tmp_path / "ready-0123456789abcdef.json"
    stray = tmp_path / ".ready-99-1"  # a temporary file of a call that was killed
    live = tmp_path / "ready-fedcba9876543210.json"
    other = tmp_path / "notes.txt"  # not ours by name: left alone
    for path in (old, stray, live, other):
        path.write_text("{}")
    past = os.stat(old).st_mtime - 601
    for path in (old, stray, other):
        os.utime(path, (past, past))
    cache = ReadyCache.at(str(tmp_path), "aaaaaaaaaaaaaaaa", 30.0)
    cache.save({"w1": Entry(1.0, "w1", 22, ("10.0.0.1",))})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt",
        "ready-aaaaaaaaaaaaaaaa.json",
        "ready-fedcba9876543210.json",
    ]


@pytest.mark.parametrize(
    "content", [b"", b"{", b"[]", b'{"version": 99, "hosts": {}}', b'{"version": 1, "hosts": 3}']
)
def test_a_damaged_file_is_an_empty_memory(tmp_path: Path, content: bytes) -> None:
    cache = ReadyCache.at(str(tmp_path), "key", 30.0)
    assert cache.path is not None
    Path(cache.path).write_bytes(content)
    assert cache.load() == {}


def test_freshness_is_bounded_and_spread_per_host() -> None:
    cache = ReadyCache("/nowhere/file", 30.0)
    assert not cache.fresh(None, "w1", 100.0)
    assert cache.fresh(_entry(100.0), "w1", 100.0)
    assert not cache.fresh(_entry(100.0), "w1", 130.0)  # never beyond the TTL
    assert not cache.fresh(_entry(100.0), "w1", 99.0)  # from another boot's clock
    periods = set()
    for k in range(64):
        host = f"h{k}"
        lasts = [t for t in range(0, 31) if cache.fresh(_entry(0.0), host, float(t))]
        assert 8 <= len(lasts) <= 30, (host, lasts)
        periods.add(len(lasts))
    assert len(periods) >= 3  # hosts that passed together do not all come due together


def test_no_directory_or_no_ttl_remembers_nothing(tmp_path: Path) -> None:
    for cache in (ReadyCache.at(None, "key", 30.0), ReadyCache.at(str(tmp_path), "key", 0)):
        cache.save({"w1": _entry()})
        assert cache.load() == {} and not cache.fresh(_entry(), "w1", 100.0)


def test_cache_dir_prefers_xdg_runtime_dir_and_makes_it_private(tmp_path: Path) -> None:
    found = cachedir.cache_dir({"XDG_RUNTIME_DIR": str(tmp_path)})
    assert found == str(tmp_path / f"mpiwait-{os.getuid()}")
    assert os.stat(found).st_mode & 0o777 == 0o700


@testbed.needs("root")  # to make a directory of another uid
def test_a_directory_someone_else_planted_is_not_used(tmp_path: Path) -> None:
    base = tmp_path / "shared"
    base.mkdir(mode=0o1777)
    planted = base / f"mpiwait-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    assert cachedir._private_dir(str(base)) is None
    os.chown(planted, os.getuid(), os.getgid())
    planted.chmod(0o755)  # ours but open to others: refused as well
    assert cachedir._private_dir(str(base)) is None
    planted.rmdir()
    (base / "elsewhere").mkdir(mode=0o700)
    planted.symlink_to(base / "elsewhere")
    assert cachedir._private_dir(str(base)) is None


def test_a_file_of_another_owner_is_ignored(tmp_path: Path) -> None:
    testbed.require("root")  # to chown
    cache = ReadyCache.at(str(tmp_path), "key", 30.0)
    cache.save({"w1": _entry()})
    assert cache.path is not None
    os.chown(cache.path, 65534, 65534)
    assert cache.load() == {}


def test_file_signatures_change_with_content(tmp_path: Path) -> None:
    key = tmp_path / "ssh" / "id_rsa"
    key.parent.mkdir()
    key.write_text("one")
    before = readycache.file_signatures([str(key.parent), str(tmp_path / "missing")])
    key.write_text("two, longer")
    assert readycache.file_signatures([str(key.parent), str(tmp_path / "missing")]) != before


def test_hosts_due_for_a_login_come_due_together() -> None:
    cache = ReadyCache("/nowhere/file", 30.0)
    due = set()
    for k in range(64):
        entry = Entry(1000.0, f"h{k}", 22, ())
        due.add(next(t for t in range(1000, 1031) if not cache.fresh(entry, f"h{k}", float(t))))
    # 64 hosts that passed at once come due in at most four calls (one each 5 s), not 15.
    assert len(due) <= 4, sorted(due)


def test_what_invalidates_the_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_rsa"
    key.write_text("key one")
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  Port 2222\n")

    def key_now(**options: object) -> str:
        probe = ProbeOptions(ssh_config=config, **options)  # type: ignore[arg-type]
        return list_ready._settings_key(probe, str(home))

    first = key_now()
    (home / ".ssh" / "known_hosts").write_text("w1 ssh-ed25519 AAAA\n")  # ssh's own writes
    assert key_now() == first
    key.write_text("key two, rotated")
    second = key_now()
    assert second != first
    config.write_text("Host *\n  Port 22\n")
    assert key_now() != second
    assert key_now(port=22) != key_now()


def test_list_ready_runs_hosts_in_parallel_and_leaves_out_the_slow_ones() -> None:
    release = threading.Event()
    running: list[int] = []
    most = [0]
    lock = threading.Lock()

    def check(host: str) -> str:
        with lock:
            running.append(1)
            most[0] = max(most[0], len(running))
        if host == "stuck":
            release.wait(10)
        time.sleep(0.01)
        with lock:
            running.pop()
        return host.upper()

    hosts = ["stuck", *(f"h{i}" for i in range(20))]
    began = time.monotonic()
    got = run_all(check, hosts, parallel=4, rate=0, budget=1.0, on_error=repr)
    took = time.monotonic() - began
    release.set()
    assert got == {h: h.upper() for h in hosts if h != "stuck"}  # the stuck one left out
    assert took < 5  # the budget, not the stuck check, ended the call
    assert most[0] <= 4  # never more than --parallel at once


def test_start_window_allows_probe_rate_starts_in_any_second() -> None:
    """--probe-rate as README states it: at most that many starts in any second (Horovod's
    64 known hosts start at once), never more, and a rate under 1/s spaces single starts."""
    w = StartWindow(200)
    assert w.next_free() == -math.inf  # room now
    assert all(w.take(10.0) for _ in range(200))  # 200 at once: within "200 per second"
    assert not w.take(10.5)  # the 201st within the same second waits
    assert w.next_free() == 11.0
    assert w.take(11.0)
    slow = StartWindow(0.5)
    assert slow.take(0.0)
    assert not slow.take(1.9)
    assert slow.next_free() == 2.0 and slow.take(2.0)
    fractional = StartWindow(2.5)  # at most 2.5 in any second: 2
    assert fractional.take(0.0) and fractional.take(0.3)
    assert not fractional.take(0.9) and fractional.next_free() == 1.0
    # a start woken at next_free() after many seconds of float arithmetic still gets its slot
    late = StartWindow(3)
    t = 0.1
    for _ in range(1000):
        while late.take(t):
            pass
        t = late.next_free()
    assert late.take(t)
    unlimited = StartWindow(0)
    assert all(unlimited.take(0.0) for _ in range(10_000))


def test_run_all_starts_no_more_than_probe_rate_in_a_second() -> None:
    starts: list[float] = []
    lock = threading.Lock()

    def check(host: str) -> str:
        with lock:
            starts.append(time.monotonic())
        return host

    hosts = [f"h{i}" for i in range(15)]
    began = time.monotonic()
    got = run_all(check, hosts, parallel=4, rate=10, budget=30.0, on_error=repr)
    assert got == {h: h for h in hosts}
    starts.sort()
    # The 11th is handed out a second after the first at the earliest (both after `began`).
    assert starts[10] - began >= 1.0
