"""Names that resolve from files only, for every lab: the hosts files, an nsswitch.conf whose
``hosts:`` line says where to look, and the one command prefix that bind-mounts them (and a
lab's ssh_config) over /etc inside a private mount namespace, optionally inside a network
namespace and under a hostname of its own."""

from __future__ import annotations

import os
import re
import shlex
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._sys import ENV_TAG, BedError, write_in_place

Mount = tuple[Path | str, Path | str]  # (source on this machine, destination in the namespace)


def nsswitch_text(hosts: str = "files") -> str:
    """The machine's nsswitch.conf with its ``hosts:`` line replaced by ``hosts: <hosts>``."""
    try:
        nss = Path("/etc/nsswitch.conf").read_text().splitlines()
    except OSError:
        nss = ["passwd: files", "group: files", "shadow: files"]
    nss = [ln for ln in nss if not re.match(r"^\s*hosts\s*:", ln)] + [f"hosts: {hosts}"]
    return "\n".join(nss) + "\n"


def write_nsswitch(path: Path, hosts: str = "files") -> Path:
    path.write_text(nsswitch_text(hosts))
    path.chmod(0o644)
    return path


def hosts_lines(entries: Iterable[tuple[str, str]], *, me_addr: str = "127.0.0.1") -> list[str]:
    """localhost, this machine's hostname (at ``me_addr``), then ``entries`` (address, names)."""
    me = socket.gethostname()
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    if me and me != "localhost":
        lines.append(f"{me_addr}\t{me}")
    return lines + [f"{addr}\t{names}" for addr, names in entries]


def write_hosts_file(
    path: Path, entries: Iterable[tuple[str, str]], *, header: str | None = None
) -> None:
    """(Re)write a launcher's hosts file: localhost, this machine's name, then ``entries``
    (address, names). In place, since running launchers have its inode bind-mounted, and never
    shorter than before (padded with a comment), so a concurrent reader sees the old or the new
    set of entries, never an empty file."""
    lines = ([f"# {header}"] if header else []) + hosts_lines(entries)
    write_in_place(path, "\n".join(lines) + "\n")


def published_entries(
    addrs: Sequence[str], names: Sequence[str], published: Sequence[bool]
) -> list[tuple[str, str]]:
    """The (address, name) of each host whose ``published`` flag is set: what a hosts file lists."""
    return [(a, nm) for a, nm, p in zip(addrs, names, published, strict=True) if p]


def mount_ns_cmd(
    mounts: Sequence[Mount],
    title: str,
    *,
    tag: str | None = None,
    netns: str | None = None,
    hostname: str | None = None,
    delay: float = 0,
    overlays: Sequence[Mount] = (),
) -> list[str]:
    """argv prefix: the rest runs in a private mount namespace with ``mounts`` bound (sources
    must exist), entered from network namespace ``netns`` if given, with UTS name ``hostname``
    if given, after ``delay`` s; ``tag`` (a bed id) marks it for down() and cleanup_stale().
    ``overlays`` (layer, folder), after the mounts: ``folder`` read-only with ``layer`` over it
    (its whiteouts hide, its entries add)."""
    for src, _ in [*mounts, *overlays]:
        if not Path(src).exists():
            raise BedError(f"bind-mount source {src} does not exist")
    steps = [f"hostname {shlex.quote(hostname)}"] if hostname is not None else []
    steps += [
        f"mount --bind {shlex.quote(str(Path(src).resolve()))} {shlex.quote(str(dst))}"
        for src, dst in mounts
    ]
    steps += [
        f"mount -t overlay overlay -o ro,lowerdir={shlex.quote(f'{layer}:{folder}')} "
        f"{shlex.quote(str(folder))}"
        for layer, folder in overlays
    ]
    script = (f"sleep {float(delay)!r}; " if delay > 0 else "") + " && ".join([*steps, 'exec "$@"'])
    return [
        *(["env", f"{ENV_TAG}={tag}"] if tag is not None else []),
        *(["ip", "netns", "exec", netns] if netns is not None else []),
        "unshare", *(["--uts"] if hostname is not None else []), "-m", "--propagation", "private",
        "sh", "-c", script, title,
    ]  # fmt: skip


def files_only_cmd(
    argv: Sequence[str | os.PathLike[str]],
    *,
    hosts_file: Path,
    nsswitch_file: Path,
    ssh_config: Path | None,
    tag: str,
    title: str,
    netns: str | None = None,
    more: Sequence[Mount] = (),
    prefix: Sequence[str] = (),
) -> list[str]:
    """argv that runs ``argv`` where the lab's names resolve from ``hosts_file`` only and ssh
    reads ``ssh_config`` (None: the machine's) as /etc/ssh/ssh_config: the launcher context of
    every lab. ``more`` mounts go after those; ``prefix`` (e.g. a drop to a user) before argv."""
    mounts: list[Mount] = [(hosts_file, "/etc/hosts"), (nsswitch_file, "/etc/nsswitch.conf")]
    if ssh_config is not None:
        mounts.append((ssh_config, "/etc/ssh/ssh_config"))
    return [
        *mount_ns_cmd([*mounts, *more], title, tag=tag, netns=netns),
        *prefix,
        *(os.fspath(a) for a in argv),
    ]
