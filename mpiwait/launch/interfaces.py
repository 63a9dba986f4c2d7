"""Which network interface holds a local address: the one the probes reached the workers from.

The kernel picked that address by routing to the workers, so on a multi-homed pod (a second NIC
for RDMA) it is the interface that routes to them. Read with ioctl and /proc, no subprocess.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
from collections import Counter
from collections.abc import Callable, Mapping

from mpiwait.launch.handover import Interface

_SIOCGIFADDR = 0x8915
_WHY = "the interface the workers answered on"


def address_table() -> dict[str, str]:
    """Local address (compressed text) -> interface name: each interface's primary IPv4
    address (SIOCGIFADDR) and every IPv6 address (/proc/net/if_inet6)."""
    table: dict[str, str] = {}
    with contextlib.suppress(OSError):
        names = [name for _, name in socket.if_nameindex()]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for name in names:
                request = struct.pack("256s", name.encode()[:15])
                try:
                    answer = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
                except OSError:
                    continue  # no IPv4 address on it
                table.setdefault(socket.inet_ntoa(answer[20:24]), name)
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and len(fields[0]) == 32:
                address = ipaddress.IPv6Address(bytes.fromhex(fields[0])).compressed
                table.setdefault(address, fields[5])
    return table


def interface_for(
    local_addresses: Mapping[str, str],
    table: Callable[[], dict[str, str]] = address_table,
) -> Interface:
    """The interface most workers were reached from (``local_addresses``: host -> the local
    address of its successful connect), or why none is known."""
    if not local_addresses:
        return Interface(None, "no worker was reached over TCP (--check dns), so the interface "
                         "that routes to them is not known")  # fmt: skip
    counts: Counter[str] = Counter()
    # Count the raw texts first: a pod reaches all workers from one address, so _plain (which
    # parses) runs once, not once per host.
    for raw, count in Counter(local_addresses.values()).items():
        counts[_plain(raw)] += count
    known = table()
    by_name: Counter[str] = Counter()
    for address, count in counts.items():
        name = known.get(address)
        if name is None:
            return Interface(None, f"no interface holds {address}, the address the workers "
                             "were reached from")  # fmt: skip
        by_name[name] += count
    (name, count), *others = by_name.most_common()
    if others:
        rest = ", ".join(f"{n} ({c})" for n, c in others)
        return Interface(name, f"{_WHY}: {count} of {sum(by_name.values())}; also {rest}")
    return Interface(name, _WHY)


def _plain(address: str) -> str:
    """Without an IPv6 scope, compressed, as address_table keys are."""
    if ":" not in address:
        return address  # IPv4 as getsockname gives it: dotted quad, already canonical
    text = address.partition("%")[0]
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(text).compressed
    return text
