"""Hundreds of "hosts" on one sshd: a network namespace of its own whose loopback (the whole
127.0.0.0/8) carries one address per host, 127.1.X.Y, all served by a single sshd on 0.0.0.0.

A TestBed namespace per host stops at 244 hosts and 1000 sshd would not fit on 2 cores anyway;
what a scale test needs is 1000 distinct names and addresses, each a separate TCP connection and
SSH login, as the client sees them. The namespace, sshd, keys and cleanup come from a one-host
TestBed, so a crashed run is cleaned by ``testbed.cleanup_stale()`` like any
bed. Clients (mpiwait and the peers) run inside the namespace with a hosts file of their own
over /etc/hosts, files-only name resolution and the bed's ssh_config over /etc/ssh/ssh_config.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ._names import files_only_cmd, published_entries, write_hosts_file
from ._netns import TestBed


class LoopBed:
    def __init__(self, n: int, workdir: Path, *, published: bool = True) -> None:
        if not 1 <= n <= 250 * 250:
            raise ValueError(f"n must be 1..62500, got {n}")
        self.n = n
        self.workdir = Path(workdir)
        self.names = [f"h{k + 1:04d}" for k in range(n)]
        self.addrs = [f"127.1.{k // 250}.{k % 250 + 1}" for k in range(n)]
        self._published = [published] * n
        self.bed = TestBed(1, workdir=self.workdir / "bed", names=["loopsshd"], start=False)

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> LoopBed:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self, *, start: bool = True) -> None:
        self.bed.up()
        h = self.bed.hosts[0]
        # VERBOSE: "Connection from A port P on DEST port 22" ties each login to its host
        h.sshd_config.write_text(
            self.bed._sshd_config_text(
                h, listen="0.0.0.0", log_level="VERBOSE", max_startups="4000:30:8000"
            )
        )
        self.hosts_file.touch()
        self.write_hosts()
        self.hostfile.write_text("".join(f"{nm} slots=1\n" for nm in self.names))
        if start:
            self.start_sshd()

    def down(self) -> None:
        self.bed.down()

    # ---- files -------------------------------------------------------------------------------

    @property
    def ns(self) -> str:
        return self.bed.hosts[0].ns

    @property
    def sshd_log(self) -> Path:
        return self.bed.hosts[0].sshd_log

    @property
    def ssh_config(self) -> Path:
        return self.bed.ssh_config

    @property
    def hosts_file(self) -> Path:
        return self.bed.client_dir / "loop-hosts"

    @property
    def hostfile(self) -> Path:
        """An Open MPI hostfile (``host slots=1``) listing every host."""
        return self.bed.client_dir / "loop-hostfile"

    def write_hosts(self) -> None:
        """(Re)write the clients' hosts file in place: running clients have its inode mounted.
        Never shorter than before (padded with a comment), so a reader never sees it empty."""
        write_hosts_file(
            self.hosts_file, published_entries(self.addrs, self.names, self._published)
        )

    def publish_all(self, value: bool = True) -> None:
        self._published = [value] * self.n
        self.write_hosts()

    # ---- sshd --------------------------------------------------------------------------------

    def start_sshd(self) -> None:
        self.bed.start_sshd(0)

    def stop_sshd(self) -> None:
        self.bed.stop_sshd(0)

    def listening(self) -> bool:
        return self.bed.listening(0)

    # ---- clients -----------------------------------------------------------------------------

    def client_cmd(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        """argv that runs ``argv`` as a client: inside the namespace, names from the bed's hosts
        file only, the bed's ssh_config as the system one."""
        return files_only_cmd(
            argv,
            hosts_file=self.hosts_file,
            nsswitch_file=self.bed.nsswitch_file,
            ssh_config=self.bed.ssh_config,
            tag=self.bed.bed_id,
            title="loopbed-client",
            netns=self.ns,
        )
