"""The fault states of a TestBed host (mixed into TestBed): sshd's port black-holed, the link
down or slow, a listener that never sends a banner or sends one and then nothing, a MaxStartups
limit; and what reached the host: SYNs counted by a rule, iptables rules of the test's own whose
packet counters say what arrived. (sshd stopped or started late: the worker processes module.)"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from ._sys import BedError, kill_group, kill_pids, netns_pids, sh
from ._workers import WorkerProcesses

SSH_BANNER = b"SSH-2.0-OpenSSH_9.2\r\n"
_SILENT_MARK = "# mpiwait-testbed silent listener"  # how an attached bed finds one
_SYN_MARK = "mpiwait-testbed-syns"

# argv: address, port, the bytes (hex) sent on every connection before it goes silent
_LISTENER_CODE = f"""{_SILENT_MARK}
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1024)
first = bytes.fromhex(sys.argv[3])
held = []
while True:
    c, _ = s.accept()
    if first:
        c.sendall(first)
    held.append(c)
"""


def ns_iptables(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh(["ip", "netns", "exec", ns, "iptables", "-w", *args], check=check)


class HostFaults(WorkerProcesses):
    """Fault states of host ``i`` (by its position in ``hosts``)."""

    def _iptables(self, i: int, op: str) -> None:
        rule = ["INPUT", "-p", "tcp", "--dport", str(self.hosts[i].port), "-j", "DROP"]
        present = self.iptables(i, "-C", *rule, check=False).returncode == 0
        if (op == "-A") != present:
            self.iptables(i, op, *rule)

    def blackhole(self, i: int) -> None:
        """Drop every packet to worker i's SSH port (connects time out). Idempotent."""
        self._iptables(i, "-A")

    def unblackhole(self, i: int) -> None:
        self._iptables(i, "-D")

    def syns(self, i: int) -> int:
        """Connection attempts (TCP SYNs) to worker i's SSH port since the first call, which
        installs a rule that only counts (first in INPUT, so blackhole() does not hide any)."""
        h = self.hosts[i]
        rule = ["-p", "tcp", "--dport", str(h.port), "--syn", "-m", "comment", "--comment"]
        rule.append(_SYN_MARK)
        if self.iptables(i, "-C", "INPUT", *rule, check=False).returncode != 0:
            self.iptables(i, "-I", "INPUT", "1", *rule)
        for line in self.iptables(i, "-L", "INPUT", "-vnx").stdout.splitlines():
            if f"/* {_SYN_MARK} */" in line:
                return int(line.split()[0])
        raise BedError(f"{h.name}: the SYN counting rule is missing")

    def link_down(self, i: int) -> None:
        """Take worker i's link down (root end of the veth): the host is unreachable."""
        sh(["ip", "link", "set", self.hosts[i].veth, "down"])

    def link_up(self, i: int) -> None:
        sh(["ip", "link", "set", self.hosts[i].veth, "up"])

    def start_silent_listener(self, i: int) -> None:
        """Accept TCP on worker i's SSH port and never send a banner (sshd must be stopped)."""
        if self.sshd_running(i):
            raise BedError(f"{self.hosts[i].name}: sshd holds the port; stop_sshd() first")
        if i in self._listeners and self._listeners[i].poll() is None:
            return
        self._listen(i, b"", "silent")

    def stop_silent_listener(self, i: int) -> None:
        p = self._listeners.pop(i, None)
        if p is not None:
            kill_group(p)
        else:  # attached bed: find it by its marker
            kill_pids(self._pids_in_ns(i, _SILENT_MARK.encode()))
        self._wait_not_listening(i)

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
        return self._listen(i, SSH_BANNER, "banner")

    def _listen(self, i: int, first: bytes, what: str) -> subprocess.Popen[Any]:
        h = self.hosts[i]
        argv = [sys.executable, "-c", _LISTENER_CODE, h.addr, str(h.port), first.hex()]
        p = self._spawn(self.ns_exec_cmd(i, argv), self.workdir / f"{what}.{i}.log")
        # so start_sshd refuses while it holds the port, and down() kills it
        self._listeners[i] = p
        self.wait_listening([i], timeout=10)
        return p

    def set_max_startups(self, i: int, value: str) -> None:
        """Restart worker i's sshd with ``MaxStartups value``."""
        cfg = self.hosts[i].sshd_config
        text = re.sub(r"(?m)^MaxStartups .*$", f"MaxStartups {value}", cfg.read_text())
        self.stop_sshd(i)
        cfg.write_text(text)
        self.start_sshd(i)

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
