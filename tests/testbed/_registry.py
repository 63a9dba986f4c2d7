"""The machine-wide registry of namespace labs: their names, state files and shared bind-mount
targets, and the removal of labs whose owner process is gone.

A lab's id is ``<prefix><owner pid, base 36>-<n>`` (TestBed: "mw", ManyHosts: "mh",
scripts/demo: "md"); its namespaces and links are the id followed by ``b``, ``v<i>`` or
``n<i>``, and its processes carry ``MPIWAIT_TESTBED=<id>``. A TestBed also keeps a state file
(beds/<id>.json), which says whether it is persistent (scripts/testbed) and who owns it."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._namespaces import remove_namespaces
from ._sys import STATE_ROOT, global_lock, list_links, list_ns, proc_starttime

PREFIX = "mw"  # TestBed's, unless TestBed(prefix=) says otherwise
MANY_PREFIX = "mh"  # ManyHosts'


def beds_dir() -> Path:
    return STATE_ROOT / "beds"


def pub_root() -> Path:
    return STATE_ROOT / "pub"


# Directories we had to create as bind-mount targets (/etc/mpi, ~user/.ssh) are shared by all
# beds on the machine: removing one while another bed's launcher has it mounted would detach
# that mount, so they are reference-counted (under the global lock).
def _shared_dirs_file() -> Path:
    return STATE_ROOT / "created-dirs.json"


def shared_dirs_load() -> dict[str, list[str]]:
    try:
        return json.loads(_shared_dirs_file().read_text())
    except (OSError, ValueError):
        return {}


def _shared_dirs_save(d: dict[str, list[str]]) -> None:
    _shared_dirs_file().write_text(json.dumps(d, indent=1))


def claim_dir(path: Path, bed_id: str, owner: pwd.struct_passwd | None = None) -> None:
    """Make a bind-mount target exist; if we create it, it is removed when no bed needs it."""
    with global_lock():
        created = not path.exists()
        if created:
            path.mkdir(parents=True, exist_ok=True)
            if owner is not None:
                os.chown(path, owner.pw_uid, owner.pw_gid)
                path.chmod(0o700)
        d = shared_dirs_load()
        if created or str(path) in d:
            users = d.setdefault(str(path), [])
            if bed_id not in users:
                users.append(bed_id)
            _shared_dirs_save(d)


def _release_shared_dirs(bed_id: str) -> None:
    d = shared_dirs_load()
    for path in list(d):
        users = [b for b in d[path] if b != bed_id]
        if users:
            d[path] = users
            continue
        del d[path]
        with contextlib.suppress(OSError):
            os.rmdir(path)  # only if still empty
    _shared_dirs_save(d)


def belongs(name: str, bed_id: str) -> bool:
    """Whether a namespace or link name is one of bed ``bed_id``'s (<id>b, <id>v<i>, <id>n<i>)."""
    return name.startswith(bed_id) and re.fullmatch(r"[bvn]\d*", name[len(bed_id) :]) is not None


def bed_of(name: str, prefix: str = PREFIX) -> str | None:
    m = re.match(rf"^({re.escape(prefix)}[0-9a-z]+-\d+)[bvn]\d*$", name)
    return m.group(1) if m else None


def bed_names(prefix: str = PREFIX) -> list[str]:
    """Namespaces and links named like a bed of ``prefix`` (of any owner, live or gone)."""
    return [n for n in list_ns() + list_links() if bed_of(n, prefix)]


def bed_owner(name: str, prefix: str = PREFIX) -> int | None:
    """The pid that made the bed of ``prefix`` a namespace or link name belongs to (it may be
    gone), or None when the name is not one of such a bed."""
    bed_id = bed_of(name, prefix)
    return int(bed_id[len(prefix) :].split("-")[0], 36) if bed_id else None


def teardown_by_id(bed_id: str, *, ns_names: Sequence[str] = (), links: Sequence[str] = ()) -> None:
    """Kill and remove everything named after ``bed_id``; no lab object needed."""
    ns_names = sorted({*ns_names, *(n for n in list_ns() if belongs(n, bed_id))})
    existing = set(list_links())
    links = sorted({*links, *(n for n in existing if belongs(n, bed_id))} & existing)
    remove_namespaces(ns_names, links, tag=bed_id)
    with contextlib.suppress(OSError):
        (beds_dir() / f"{bed_id}.json").unlink()
    shutil.rmtree(pub_root() / bed_id, ignore_errors=True)
    _release_shared_dirs(bed_id)


def teardown_until_gone(bed_id: str, timeout: float = 5.0, **known: Sequence[str]) -> None:
    """teardown_by_id, repeated until the namespaces and links (which vanish asynchronously)
    are really gone, or ``timeout`` s."""
    with global_lock():
        teardown_by_id(bed_id, **known)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [n for n in list_ns() + list_links() if belongs(n, bed_id)]:
            break
        teardown_by_id(bed_id)
        time.sleep(0.05)


def _alive(
    bed_id: str, state: dict[str, Any] | None, include_persistent: bool, prefix: str
) -> bool:
    if state is not None:
        if state.get("persistent") and not include_persistent:
            return True
        if state.get("persistent"):
            return False
        pid = int(state.get("pid", 0))
        return pid > 0 and proc_starttime(pid) == state.get("starttime")
    m = re.match(rf"^{re.escape(prefix)}([0-9a-z]+)-\d+$", bed_id)
    if not m:
        return True  # not ours to judge
    return Path(f"/proc/{int(m.group(1), 36)}").exists()


def cleanup_stale(
    prefix: str | None = None, *, include_persistent: bool = False, force: bool = False
) -> list[str]:
    """Remove leftovers of labs whose owner process is gone; return the ids removed.

    ``prefix`` None: TestBeds of PREFIX and ManyHosts sets (``force`` and
    ``include_persistent`` apply to the TestBeds only); else the labs of ``prefix`` only.
    Labs are found by name (namespaces and links starting with ``prefix``) and by their state
    files. One whose owner still runs is left alone unless ``force``; one made by
    ``scripts/testbed up`` (persistent) only with ``include_persistent`` (or ``force``).
    """
    if os.geteuid() != 0:
        return []
    with global_lock():
        removed = cleanup_stale_locked(
            PREFIX if prefix is None else prefix, include_persistent=include_persistent, force=force
        )
        # ManyHosts sets are never persistent, and a live owner's set is never ours to remove
        return removed + (cleanup_stale_locked(MANY_PREFIX) if prefix is None else [])


def cleanup_stale_locked(
    prefix: str, *, include_persistent: bool = False, force: bool = False
) -> list[str]:
    """cleanup_stale() for one prefix, under the global lock (held by the caller)."""
    all_ns, all_links = list_ns(), list_links()
    ids: set[str] = {b for n in all_ns + all_links if (b := bed_of(n, prefix))}
    states: dict[str, dict[str, Any]] = {}
    for f in beds_dir().glob(f"{prefix}*.json") if beds_dir().is_dir() else ():
        with contextlib.suppress(OSError, ValueError):
            states[f.stem] = json.loads(f.read_text())
        ids.add(f.stem)
    for d in pub_root().glob(f"{prefix}*") if pub_root().is_dir() else ():
        ids.add(d.name)
    removed = []
    for bed_id in sorted(ids):
        if not force and _alive(bed_id, states.get(bed_id), include_persistent, prefix):
            continue
        teardown_by_id(
            bed_id,
            ns_names=[n for n in all_ns if bed_of(n, prefix) == bed_id],
            links=[n for n in all_links if bed_of(n, prefix) == bed_id],
        )
        removed.append(bed_id)
    return removed
