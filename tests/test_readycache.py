"""The memory of recent passes kept by ``mpiwait --list-ready`` between calls (pure file logic)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mpiwait import readycache
from mpiwait.readycache import Entry, ReadyCache


def _entry(at: float = 100.0) -> Entry:
    return Entry(at, "w1.job.ns.svc", 22, ("10.0.0.5",))


def test_saved_entries_load_back(tmp_path: Path) -> None:
    cache = ReadyCache.at(str(tmp_path), "key", 30.0)
    cache.save({"w1": _entry(), "w2": Entry(5.0, "10.0.0.6", 2222, ())})
    assert cache.load() == {"w1": _entry(), "w2": Entry(5.0, "10.0.0.6", 2222, ())}
    # Another settings key is another file: nothing of the first applies.
    assert ReadyCache.at(str(tmp_path), "other", 30.0).load() == {}


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
    found = readycache.cache_dir({"XDG_RUNTIME_DIR": str(tmp_path)})
    assert found == str(tmp_path / f"mpiwait-{os.getuid()}")
    assert os.stat(found).st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory of another uid")
def test_a_directory_someone_else_planted_is_not_used(tmp_path: Path) -> None:
    base = tmp_path / "shared"
    base.mkdir(mode=0o1777)
    planted = base / f"mpiwait-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    assert readycache._private_dir(str(base)) is None
    os.chown(planted, os.getuid(), os.getgid())
    planted.chmod(0o755)  # ours but open to others: refused as well
    assert readycache._private_dir(str(base)) is None
    planted.rmdir()
    (base / "elsewhere").mkdir(mode=0o700)
    planted.symlink_to(base / "elsewhere")
    assert readycache._private_dir(str(base)) is None


def test_a_file_of_another_owner_is_ignored(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
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
