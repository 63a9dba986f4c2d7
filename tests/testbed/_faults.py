"""More fault states for a TestBed host (mixed into TestBed): a listener that sends a banner and
then nothing, a MaxStartups limit, a slow link, and iptables rules of the test's own whose packet
counters say what reached the host."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from ._sys import BedError, netns_pids, sh

if TYPE_CHECKING:
    from ._netns import WorkerHost

SSH_BANNER = b"SSH-2.0-OpenSSH_9.2\r\n"

_BANNER_CODE = """# mpiwait-test banner-then-silence listener
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1024)
held = []
while True:
    c, _ = s.accept()
    c.sendall(BANNER)
    held.append(c)
""".replace("BANNER", repr(SSH_BANNER))


def ns_iptables(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh(["ip", "netns", "exec", ns, "iptables", "-w", *args], check=check)


class HostFaults:
    """Fault states of host ``i`` beyond TestBed's own (stop_sshd, blackhole, link_down, ...)."""

    hosts: list[WorkerHost]

    def iptables(self, i: int, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``iptables -w ARGS`` in worker i's namespace (rules there go with the namespace)."""
        return ns_iptables(self.hosts[i].ns, *args, check=check)

    def rule_packets(self, i: int, chain: str = "INPUT") -> list[int]:
        """Packet counters of ``chain``'s rules on worker i, in order."""
        out = self.iptables(i, "-L", chain, "-v", "-x", "-n").stdout.splitlines()[2:]
        return [int(line.split()[0]) for line in out if line.strip()]

    def ns_pid(self, i: int) -> int:
        """A process inside worker i's namespace (to read its /proc/PID/net)."""
        pids = netns_pids(self.hosts[i].ns)
        if not pids:
            raise BedError(f"nothing runs in {self.hosts[i].ns}")
        return pids[0]

    def start_banner_listener(self, i: int) -> subprocess.Popen[Any]:
        """On worker i (sshd stopped): accept, send an SSH banner, then say nothing more."""
        h = self.hosts[i]
        p = self._spawn(  # type: ignore[attr-defined]
            self.ns_exec_cmd(i, [sys.executable, "-c", _BANNER_CODE, h.addr, str(h.port)]),  # type: ignore[attr-defined]
            self.workdir / f"banner.{i}.log",  # type: ignore[attr-defined]
        )
        # so start_sshd refuses while it holds the port, and down() kills it
        self._listeners[i] = p  # type: ignore[attr-defined]
        self.wait_listening([i], timeout=10)  # type: ignore[attr-defined]
        return p

    def set_max_startups(self, i: int, value: str) -> None:
        """Restart worker i's sshd with ``MaxStartups value``."""
        cfg = self.hosts[i].sshd_config
        text = re.sub(r"(?m)^MaxStartups .*$", f"MaxStartups {value}", cfg.read_text())
        self.stop_sshd(i)  # type: ignore[attr-defined]
        cfg.write_text(text)
        self.start_sshd(i)  # type: ignore[attr-defined]

    def slow_link(self, i: int, rate: str = "8kbit") -> None:
        """Shape both directions of worker i's link to ``rate`` (an SSH handshake then takes s)."""
        h = self.hosts[i]
        tbf = ["tbf", "rate", rate, "burst", "1600", "latency", "30s"]
        sh(["tc", "qdisc", "replace", "dev", h.veth, "root", *tbf])
        sh(["ip", "netns", "exec", h.ns, "tc", "qdisc", "replace", "dev", "eth0", "root", *tbf])

    def unslow_link(self, i: int) -> None:
        h = self.hosts[i]
        sh(["tc", "qdisc", "del", "dev", h.veth, "root"], check=False)
        sh(["ip", "netns", "exec", h.ns, "tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
