"""``mpiwait --list-ready``: the hosts that accept an SSH login now, for Horovod elastic.

``horovodrun --host-discovery-script`` runs its script every second and ssh's once into each
host new to it; a host whose sshd is not up yet fails that ssh and is blacklisted for the rest
of the job. mpi-operator's discover_hosts.sh lists Running pods, which may have no DNS record or
sshd yet. This mode reads the same sources as the wait, checks each host once with the same
probe (config, keys, host key policy), and prints only those that pass, one ``host[:slots]``
line each on stdout. It never waits for anyone: a source that lists nobody, or hosts that are
not ready, give fewer lines and exit 0 (a non-zero exit on Horovod's first call fails the job);
only bad input (no source, a malformed file, an unusable key) exits non-zero.

Recent passes are remembered between calls (readycache.py), so a steady state of 64 ready
hosts costs a fraction of 64 logins per second.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Mapping
from typing import TextIO

from mpiwait import readycache
from mpiwait.errors import InputError
from mpiwait.events import Outcome, Stage, Status
from mpiwait.hosts import Host, HostSources, SelfNames, Snapshot, _is_ipv6
from mpiwait.report import Reporter
from mpiwait.settings import DISCOVER_EXEC_TIMEOUT, LIST_READY_CACHE_TTL, Settings


def list_ready(settings: Settings, environ: Mapping[str, str], out: TextIO | None = None) -> int:
    """Print the ready hosts and return 0; raise MpiwaitError for bad input."""
    out = out if out is not None else sys.stdout
    reporter = Reporter(settings.log_format, settings.quiet)
    sources = HostSources(
        hostfile=settings.hostfile,
        hostfile_explicit=settings.hostfile_explicit,
        discover=settings.discover_hosts,
        discover_explicit=settings.discover_explicit,
        discover_exec=settings.discover_exec,
        hosts_option=settings.hosts_option,
        include_self=settings.include_self,
        self_names=SelfNames.from_system(environ),
        exec_timeout=DISCOVER_EXEC_TIMEOUT,
    )
    snapshot = sources.read()
    if settings.hosts_option is None and not snapshot.sources:
        raise InputError(
            f"no host source: neither {settings.hostfile} nor {settings.discover_hosts} exists "
            "and --hosts is not given",
            hint="mount the mpi-job-config volume at /etc/mpi, or pass --hostfile / --hosts",
        )
    # Horovod starts processes on its own machine without ssh (it compares addresses), so
    # entries naming this machine are listed as they are, without a login.
    listed: list[Host] = []
    for host in snapshot.hosts:
        if _is_ipv6(host.name):
            # Horovod splits each line at ':' into exactly host and slots.
            reporter.info(f"warning: {host.name}: an IPv6 address cannot be given to Horovod")
        else:
            listed.append(host)
    if not listed:
        _print(out, _self_hosts(snapshot))
        return 0

    sys.modules.setdefault("invoke", None)  # as in run.py: paramiko imports it for nothing
    from mpiwait.probes import ProbeConfig, Prober
    from mpiwait.sshconfig import SSHResolver

    resolver = SSHResolver(
        config_path=settings.ssh_config,
        port=settings.port,
        user=settings.user,
        identity_files=settings.identity_files,
    )
    prober = Prober(
        ProbeConfig(settings.check, settings.connect_timeout, settings.remote_command), resolver
    )
    cache = readycache.ReadyCache.at(
        readycache.cache_dir(environ), _settings_key(settings), LIST_READY_CACHE_TTL
    )
    remembered = cache.load()
    now = readycache.now()
    checks = {h.name: _what(prober, h.name) for h in listed}
    fresh = {
        name for name, what in checks.items() if cache.fresh(remembered.get(name), name, what, now)
    }
    to_probe = [name for name in checks if name not in fresh]
    if to_probe:
        prober.preflight(tuple(to_probe))  # an unusable key file: exit 3, as for the wait
    outcomes = _probe_all(prober, to_probe, settings)

    keep: dict[str, tuple[float, str]] = {n: remembered[n] for n in fresh}
    ready: list[Host] = []
    for host in listed:
        outcome = outcomes.get(host.name)
        if host.name in fresh:
            ready.append(host)
        elif outcome is not None and outcome.status is Status.READY:
            keep[host.name] = (readycache.now(), checks[host.name])
            ready.append(host)
        elif outcome is not None and outcome.status is Status.FATAL:
            # Time will not fix it and Horovod would blacklist the host: say why, every call.
            reporter.info(f"warning: {host.name} not listed: {outcome.detail}")
    cache.save(keep)
    _print(out, [*_self_hosts(snapshot), *ready])
    return 0


def _self_hosts(snapshot: Snapshot) -> list[Host]:
    # The snapshot keeps only the names of the entries it skipped, not their slots: Horovod
    # then applies its own --slots.
    return [Host(name, None, "self") for name in snapshot.skipped_self if not _is_ipv6(name)]


def _print(out: TextIO, hosts: list[Host]) -> None:
    out.write("".join(f"{h.name}:{h.slots}\n" if h.slots else f"{h.name}\n" for h in hosts))
    out.flush()


def _what(prober, host: str) -> str:
    """Everything a pass depends on for this host: a change of any of it means check again."""
    target = prober.target(host)
    return readycache.fingerprint(
        [
            target.address,
            target.port,
            target.user,
            target.identity_files,
            target.strict_host_key_checking,
            target.known_hosts_files,
        ]
    )


def _settings_key(settings: Settings) -> str:
    return readycache.fingerprint(
        [
            settings.check.value,
            settings.ssh_config,
            settings.remote_command,
            settings.hostfile if settings.hosts_option is None else "",
            settings.discover_hosts if settings.hosts_option is None else "",
        ]
    )


def _probe_all(prober, hosts: list[str], settings: Settings) -> dict[str, Outcome]:
    """One attempt at each host, ``--parallel`` at a time and at most ``--probe-rate`` started
    per second; whatever has not finished within the connect timeout is left out this time."""
    if not hosts:
        return {}
    budget = max(prober.timeout_for(prober.target(h)) for h in hosts)
    deadline = time.monotonic() + budget
    jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
    done: queue.SimpleQueue[tuple[str, Outcome]] = queue.SimpleQueue()

    def work() -> None:
        while True:
            host = jobs.get()
            try:
                outcome = prober.attempt(host)
            except Exception as exc:  # a probe bug must not fail Horovod's discovery
                outcome = Outcome(Status.RETRY, Stage.SSH, "unexpected", str(exc))
            done.put((host, outcome))

    for _ in range(min(settings.parallel, len(hosts))):
        # Daemon threads: one stuck in a connect must not keep the process alive after the
        # budget (the CLI leaves with os._exit anyway).
        threading.Thread(target=work, name="mpiwait-list", daemon=True).start()
    # The same budget as the wait's: a burst of --parallel, then --probe-rate per second.
    rate = settings.probe_rate
    burst = settings.parallel
    t0 = time.monotonic()
    outcomes: dict[str, Outcome] = {}
    started = 0
    while len(outcomes) < len(hosts):
        now = time.monotonic()
        if now >= deadline:
            break
        allowed = len(hosts) if rate <= 0 else burst + int((now - t0) * rate)
        while started < min(allowed, len(hosts)):
            jobs.put(hosts[started])
            started += 1
        wait = deadline - now
        if started < len(hosts):
            wait = min(wait, t0 + (started + 1 - burst) / rate - now)
        try:
            host, outcome = done.get(timeout=max(wait, 0.001))
        except queue.Empty:
            continue
        outcomes[host] = outcome
    return outcomes
