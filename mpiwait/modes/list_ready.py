"""``mpiwait --list-ready``: the hosts that accept an SSH login now, for Horovod elastic.

``horovodrun --host-discovery-script`` runs its script every second and ssh's once into each
host new to it; a host whose sshd is not up yet fails that ssh and is blacklisted for the rest
of the job. mpi-operator's discover_hosts.sh lists Running pods, which may have no DNS record or
sshd yet. This mode reads the same sources as the wait, checks each host once with the same
probe (config, keys, host key policy), and prints only those that pass, one ``host[:slots]``
line each on stdout. It never waits for anyone: a source that lists nobody, or hosts that are
not ready, give fewer lines and exit 0 (a non-zero exit on Horovod's first call fails the job);
only bad input (no source, a malformed file, an unusable key) exits non-zero.

Recent passes are remembered between calls (modes/readycache.py): between logins, which come every
10-30 s per host (LIST_READY_RECHECK), a host stays listed while its name resolves to the
addresses it had when it passed. A steady state of 64 ready hosts then costs 64 name lookups and
a few logins a call, and no paramiko import at all on the calls where no login is due.
"""

from __future__ import annotations

import os
import pwd
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TextIO, TypeVar

from mpiwait.errors import InputError
from mpiwait.hosts.sources import Host, HostSources, Snapshot
from mpiwait.modes import readycache
from mpiwait.output.report import Reporter
from mpiwait.probe.lookup import LookupTimeout, Resolver, ResolverBusy, lookup_pool
from mpiwait.probe.outcome import Outcome, Stage, Status
from mpiwait.settings import (
    DEFAULT_CONNECT_TIMEOUT,
    LIST_READY_RECHECK,
    Settings,
)

T = TypeVar("T")


def list_ready(settings: Settings, environ: Mapping[str, str], out: TextIO | None = None) -> int:
    """Print the ready hosts and return 0; raise MpiwaitError for bad input."""
    out = out if out is not None else sys.stdout
    reporter = Reporter(settings.log_format, settings.quiet)
    sources = HostSources.from_settings(settings, environ)
    snapshot = sources.read()
    if settings.hosts_option is None and not snapshot.sources:
        raise InputError(
            f"no host source: neither {settings.hostfile} nor {settings.discover_hosts} exists "
            "and --hosts is not given",
            hint="mount the mpi-job-config volume at /etc/mpi, or pass --hostfile / --hosts",
        )
    listed = _listable(snapshot, reporter)
    if not listed:
        _print(out, _self_hosts(snapshot))
        return 0

    timeout = settings.connect_timeout or DEFAULT_CONNECT_TIMEOUT
    lookups = lookup_pool(settings.parallel)
    cache = readycache.ReadyCache.at(
        readycache.cache_dir(environ), _settings_key(settings, environ), LIST_READY_RECHECK
    )
    keep = _still_ready(cache, listed, lookups, settings, timeout)
    to_probe = [h.name for h in listed if h.name not in keep]
    outcomes: dict[str, tuple[Outcome, readycache.Entry | None]] = {}
    if to_probe:
        outcomes = _probe(settings, lookups, to_probe, readycache.cache_dir(environ))

    ready = _ready(listed, keep, outcomes, reporter)  # adds this call's passes to keep
    cache.save(keep)
    _print(out, [*_self_hosts(snapshot), *ready])
    return 0


def _still_ready(
    cache: readycache.ReadyCache,
    listed: list[Host],
    lookups: Resolver,
    settings: Settings,
    timeout: float,
) -> dict[str, readycache.Entry]:
    """The hosts that passed recently enough to be listed without a login: between logins a
    host stays listed while its name resolves as it did when it passed."""
    remembered = cache.load()
    now = readycache.now()
    recent = {
        h.name: remembered[h.name]
        for h in listed
        if cache.fresh(remembered.get(h.name), h.name, now)
    }

    def unchanged(name: str) -> bool:
        entry = recent[name]
        return _addresses(lookups, entry.address, entry.port, timeout) == entry.addresses

    same = _run_all(unchanged, list(recent), settings, timeout)
    return {name: recent[name] for name, ok in same.items() if ok}


def _listable(snapshot: Snapshot, reporter: Reporter) -> list[Host]:
    """The hosts Horovod can be given; entries naming this machine are not among them (they
    are listed as they are, without a login: Horovod starts those without ssh)."""
    listed: list[Host] = []
    for host in snapshot.hosts:
        if ":" in host.name:  # only an IPv6 literal has one, once hostfile_syntax has checked it
            # Horovod splits each line at ':' into exactly host and slots.
            reporter.info(f"warning: {host.name}: an IPv6 address cannot be given to Horovod")
        else:
            listed.append(host)
    return listed


def _ready(
    listed: list[Host],
    keep: dict[str, readycache.Entry],
    outcomes: dict[str, tuple[Outcome, readycache.Entry | None]],
    reporter: Reporter,
) -> list[Host]:
    """The hosts to print, in the sources' order: remembered, or passed this call (added to
    ``keep``); a host refused for good is named on stderr."""
    ready: list[Host] = []
    for host in listed:
        outcome, entry = outcomes.get(host.name, (None, None))
        if host.name in keep:
            ready.append(host)
        elif outcome is not None and outcome.status is Status.READY:
            if entry is not None:
                keep[host.name] = entry
            ready.append(host)
        elif outcome is not None and outcome.status is Status.FATAL:
            # Time will not fix it and Horovod would blacklist the host: say why, every call.
            reporter.info(f"warning: {host.name} not listed: {outcome.detail}")
    return ready


def _probe(
    settings: Settings, lookups: Resolver, hosts: list[str], directory: str | None
) -> dict[str, tuple[Outcome, readycache.Entry | None]]:
    """One full attempt at each host, as the wait makes it; for a pass, what it resolved to.
    ``directory``: where connect-only attempts take their turns (probe/pace.py)."""
    from mpiwait.probe.attempt import prober_for
    from mpiwait.probe.pace import Pacer

    prober = prober_for(settings, lookups, Pacer(directory))
    prober.preflight(tuple(hosts))  # an unusable key file: exit 3, as for the wait

    def attempt(name: str) -> tuple[Outcome, readycache.Entry | None]:
        try:
            outcome = prober.attempt(name)
        except Exception as exc:  # a probe bug must not fail Horovod's discovery
            return Outcome(Status.RETRY, Stage.SSH, "unexpected", str(exc)), None
        if outcome.status is not Status.READY:
            return outcome, None
        target = prober.target(name)
        found = _addresses(lookups, target.address, target.port, prober.timeout_for(target))
        if found is None:
            return outcome, None
        return outcome, readycache.Entry(readycache.now(), target.address, target.port, found)

    budget = max(prober.timeout_for(prober.target(h)) for h in hosts)
    return _run_all(attempt, hosts, settings, budget)


def _addresses(
    lookups: Resolver, address: str, port: int, timeout: float
) -> tuple[str, ...] | None:
    try:
        infos = lookups.resolve(address, port, timeout)
    except (OSError, UnicodeError, LookupTimeout, ResolverBusy):
        return None
    return tuple(sorted({info[4][0] for info in infos}))


def _home(environ: Mapping[str, str]) -> str:
    # As ssh finds it: the passwd entry, else $HOME (an arbitrary uid without one).
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return environ.get("HOME", "/")


def _settings_key(settings: Settings, environ: Mapping[str, str]) -> str:
    """Everything a pass depends on besides the host: options, and the files ssh would read."""
    home = _home(environ)
    if settings.ssh_config is not None:
        configs = [str(settings.ssh_config)]
    else:
        configs = [f"{home}/.ssh/config", "/etc/ssh/ssh_config", "/etc/ssh/ssh_config.d"]
    # The keys in ~/.ssh, but not known_hosts: ssh adds to it whenever horovodrun reaches a new
    # worker, which would make every such call log into every host again.
    try:
        own = [
            f"{home}/.ssh/{name}"
            for name in sorted(os.listdir(f"{home}/.ssh"))
            if not name.startswith(("known_hosts", ".."))
        ]
    except OSError:
        own = []
    files = [*configs, *(str(p) for p in settings.identity_files), *own]
    return readycache.fingerprint(
        [
            settings.check.value,
            settings.port,
            settings.user,
            settings.remote_command,
            settings.connect_timeout,
            *readycache.file_signatures(files),
        ]
    )


def _self_hosts(snapshot: Snapshot) -> list[Host]:
    # The snapshot keeps only the names of the entries it skipped, not their slots: Horovod
    # then applies its own --slots.
    return [Host(name, None, "self") for name in snapshot.skipped_self if ":" not in name]


def _print(out: TextIO, hosts: list[Host]) -> None:
    out.write("".join(f"{h.name}:{h.slots}\n" if h.slots else f"{h.name}\n" for h in hosts))
    out.flush()


def _run_all(
    fn: Callable[[str], T], hosts: list[str], settings: Settings, budget: float
) -> dict[str, T]:
    """``fn`` of each host, ``--parallel`` at a time and at most ``--probe-rate`` started in any
    second; whatever has not finished within ``budget`` seconds is left out this time."""
    if not hosts:
        return {}
    deadline = time.monotonic() + budget
    jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
    done: queue.SimpleQueue[tuple[str, T]] = queue.SimpleQueue()

    def work() -> None:
        while True:
            host = jobs.get()
            done.put((host, fn(host)))

    for _ in range(min(settings.parallel, len(hosts))):
        # Daemon threads: one stuck in a connect must not keep the process alive after the
        # budget (the CLI leaves with os._exit anyway).
        threading.Thread(target=work, name="mpiwait-list", daemon=True).start()
    window = _StartWindow(settings.probe_rate)
    results: dict[str, T] = {}
    started = 0
    while len(results) < len(hosts):
        now = time.monotonic()
        if now >= deadline:
            break
        while started < len(hosts) and window.take(now):
            jobs.put(hosts[started])
            started += 1
        wait = deadline - now
        if started < len(hosts):
            wait = min(wait, window.next_free() - now)
        try:
            host, result = done.get(timeout=max(wait, 0.001))
        except queue.Empty:
            continue
        results[host] = result
    return results


class _StartWindow:
    """At most ``rate`` starts in any second, as README promises for --probe-rate.

    A sliding window rather than the wait's token bucket (a burst, then a steady rate): Horovod
    calls every second, and 64 known hosts re-checked at once are 64 starts in that second,
    within the budget; a bucket of 32 would spread them over 160 ms of every call for nothing.
    A rate under 1/s allows one start per 1/rate seconds.
    """

    def __init__(self, rate: float) -> None:
        self._limit = max(1, int(rate)) if rate > 0 else 0
        self._span = self._limit / rate if rate > 0 else 0.0
        self._starts: deque[float] = deque()

    def take(self, now: float) -> bool:
        if not self._limit:
            return True
        while self._starts and self._starts[0] <= now - self._span:
            self._starts.popleft()
        if len(self._starts) >= self._limit:
            return False
        self._starts.append(now)
        return True

    def next_free(self) -> float:
        """When ``take`` can next succeed (after a refusal)."""
        return self._starts[0] + self._span if self._starts else 0.0
