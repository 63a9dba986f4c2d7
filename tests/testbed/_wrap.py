"""Extra bind mounts inside a launcher context and a drop to an unprivileged user (``wrap``)."""

from __future__ import annotations

import pwd
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ._names import write_nsswitch
from ._proc import REPO
from ._sys import drop_to

STAGE_DIR = Path("/run/mpiwait-testbed-stage")  # an empty mount point, used only inside mount ns
# Where the checkout and its venv stay reachable when a bind hides them (a clone under /tmp, with
# the test binding a private directory over /tmp). Also only ever mounted on inside a mount ns.
PY_STAGE_DIR = Path("/run/mpiwait-testbed-py")


# extra mounts and an unprivileged user, inside a launcher context


def _blocked_ancestor(path: Path) -> Path | None:
    """The outermost directory on the way to ``path`` that others cannot traverse."""
    parts = path.resolve().parts
    for n in range(1, len(parts) + 1):
        p = Path(*parts[:n])
        try:
            if not p.stat().st_mode & 0o001:
                return p
        except OSError:
            return None
    return None


def _python_paths() -> list[Path]:
    """What `python -m mpiwait` needs to read: the interpreter's trees, site-packages, repo."""
    wanted = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent, REPO}
    wanted |= {Path(p) for p in sys.path if p and Path(p).is_dir()}
    resolved = sorted({p.resolve() for p in wanted}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in resolved:
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out


def wrap(
    *,
    binds: Sequence[tuple[Path | str, Path | str]] = (),
    readonly: Sequence[Path | str] = (),
    user: str | None = None,
    cwd: Path | str | None = None,
    home: Path | str | None = None,
) -> list[str]:
    """argv prefix for a bed's ``run``/``popen`` (which run it as root in a private mount
    namespace): bind ``binds`` (src → dst, sources staged first, so a dst may hide another's
    source), remount ``readonly`` paths read-only, then ``cd cwd`` and, with ``user``, drop to
    that user (HOME ``home`` or theirs) after making the Python interpreter reachable for them."""
    lines = ["set -e", f"mount -t tmpfs -o mode=0700,size=1m mwstage {STAGE_DIR}"]
    staged: list[tuple[str, Path]] = []

    def stage(src: Path) -> str:
        slot = f"{STAGE_DIR}/s{len(staged)}"
        if src.is_dir():
            lines.append(f"mkdir -p {slot}")
        else:
            lines.append(f": > {slot}")
        lines.append(f"mount --bind {shlex.quote(str(src))} {slot}")
        staged.append((slot, src))
        return slot

    # The checkout (the source `-m mpiwait` runs) and the venv must survive the binds: where a bind
    # destination hides one of them, bind it first to a place of its own, and run from there.
    dsts = [Path(dst) for _, dst in binds]
    hidden = [
        p
        for p in sorted({REPO, Path(sys.prefix)}, key=lambda p: len(p.parts))
        if any(p == d or d in p.parents for d in dsts)
    ]
    hidden = [p for p in hidden if not any(q in p.parents for q in hidden)]
    moved: dict[Path, str] = {}
    if hidden:
        lines.append(f"mount -t tmpfs -o mode=0755,size=1m mwpy {PY_STAGE_DIR}")
        for k, p in enumerate(hidden):
            moved[p] = f"{PY_STAGE_DIR}/p{k}"
            lines.append(f"mkdir -p {moved[p]}")
            lines.append(f"mount --bind {shlex.quote(str(p))} {moved[p]}")

    def relocate(path: Path) -> str:
        for old, new in moved.items():
            if path == old or old in path.parents:
                return new + "/" + str(path.relative_to(old)) if path != old else new
        return str(path)

    reach: dict[Path, list[Path]] = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        for p in _python_paths():
            a = _blocked_ancestor(p)
            if a is not None and pw.pw_uid != a.stat().st_uid:
                reach.setdefault(a, []).append(p)
    reach_slots = {a: stage(a) for a in reach}
    bind_slots = [(stage(Path(src).resolve()), Path(dst)) for src, dst in binds]
    for a, paths in reach.items():
        lines.append(f"mount -t tmpfs -o mode=0755,size=1m mwreach {shlex.quote(str(a))}")
        for p in paths:
            rel = p.relative_to(a)
            lines.append(f"mkdir -p {shlex.quote(str(p))}")
            lines.append(
                f"mount --bind {reach_slots[a]}/{shlex.quote(str(rel))} {shlex.quote(str(p))}"
            )
    for slot, dst in bind_slots:
        lines.append(f"mount --bind {slot} {shlex.quote(str(dst))}")
    for p in readonly:
        q = shlex.quote(str(p))
        lines.append(f"mount --bind {q} {q}")
        lines.append(f"mount -o remount,bind,ro {q}")
    lines.append(f"umount -l {STAGE_DIR}")
    if moved:
        lines.append(
            f"export PYTHONPATH={shlex.quote(relocate(REPO))}${{PYTHONPATH:+:$PYTHONPATH}}"
        )
        old_python, new_python = (
            shlex.quote(sys.executable),
            shlex.quote(relocate(Path(sys.executable))),
        )
        lines.append(
            f'for a do shift; [ "$a" = {old_python} ] && a={new_python}; set -- "$@" "$a"; done'
        )
    if cwd is not None:
        lines.append(f"cd {shlex.quote(str(cwd))}")
    drop = drop_to(pwd.getpwnam(user), home) if user is not None else []
    lines.append('exec "$@"')
    STAGE_DIR.mkdir(mode=0o700, exist_ok=True)
    if moved:
        PY_STAGE_DIR.mkdir(mode=0o755, exist_ok=True)
    return ["sh", "-c", "\n".join(lines), "mpiwait-test-wrap", *drop]


def dns_blackhole_files(workdir: Path, nameserver: str, *, timeout: int = 30) -> list[tuple]:
    """Bind pairs for a launcher whose lookups of unknown names go to ``nameserver`` (an address
    in a namespace of ours that drops port 53) and hang ``timeout`` s there."""
    workdir.mkdir(parents=True, exist_ok=True)
    nsswitch = write_nsswitch(workdir / "nsswitch.dns.conf", "files dns")
    resolv = workdir / "resolv.blackhole.conf"
    resolv.write_text(f"nameserver {nameserver}\noptions timeout:{timeout} attempts:1\n")
    resolv.chmod(0o644)
    return [(nsswitch, "/etc/nsswitch.conf"), (resolv, "/etc/resolv.conf")]
