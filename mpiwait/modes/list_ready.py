"""``mpiwait --list-ready``: the hosts that accept an SSH login now, as ``host[:slots]`` lines on
stdout, for ``horovodrun --host-discovery-script``, which blacklists a host whose ssh fails.

Reads the same sources and checks each host with the same probe as the wait. It must never
wait nor fail for hosts that are not ready (fewer lines, exit 0): only bad input exits non-zero.
Recent passes are remembered between calls (probe/readycache.py): a host stays listed while its
name resolves as when it passed, so a call where no login is due never loads the login code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

from mpiwait.hosts.sources import Host, HostSources, Snapshot
from mpiwait.openssh.localuser import LocalUser
from mpiwait.output.report import Reporter
from mpiwait.probe import readycache
from mpiwait.probe.cachedir import cache_dir
from mpiwait.probe.lookup import LookupPool, LookupTimeout, ResolverBusy, lookup_pool
from mpiwait.probe.outcome import Outcome, Status, unexpected
from mpiwait.probe.pace import Pacer
from mpiwait.settings import LIST_READY_RECHECK, ProbeOptions, Run
from mpiwait.wait.runner import run_all


def list_ready(run: Run, environ: Mapping[str, str], out: TextIO | None = None) -> int:
    """Print the ready hosts and return 0; raise MpiwaitError for bad input."""
    out = out if out is not None else sys.stdout
    reporter = Reporter(run.output.log_format, run.output.quiet)
    sources = HostSources.from_options(run.sources, environ)
    snapshot = sources.read()
    if sources.found_none(snapshot):
        raise sources.no_source_error()
    listed = _listable(snapshot, reporter)
    if not listed:
        _print(out, _self_hosts(snapshot))
        return 0

    lookups = lookup_pool(run.wait.budget.parallel)
    cache = readycache.ReadyCache.at(
        cache_dir(environ),
        _settings_key(run.probe, LocalUser.current(environ).home),
        LIST_READY_RECHECK,
    )
    remembered = _still_ready(cache, listed, lookups, run)
    to_probe = [h.name for h in listed if h.name not in remembered]
    outcomes: dict[str, tuple[Outcome, readycache.Entry | None]] = {}
    if to_probe:
        outcomes = _probe(run, lookups, to_probe, cache_dir(environ))

    ready = _ready(listed, remembered, outcomes, reporter)  # adds this call's passes to remembered
    cache.save(remembered)
    _print(out, [*_self_hosts(snapshot), *ready])
    return 0


def _still_ready(
    cache: readycache.ReadyCache, listed: list[Host], lookups: LookupPool, run: Run
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
    timeout = run.probe.timeout(None)

    def unchanged(name: str) -> bool:
        entry = recent[name]
        return _addresses(lookups, entry.address, entry.port, timeout) == entry.addresses

    same = run_all(
        unchanged,
        list(recent),
        parallel=run.wait.budget.parallel,
        rate=run.wait.budget.rate,
        budget=timeout,
        on_error=lambda _exc: False,
    )
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
    remembered: dict[str, readycache.Entry],
    outcomes: dict[str, tuple[Outcome, readycache.Entry | None]],
    reporter: Reporter,
) -> list[Host]:
    """The hosts to print, in the sources' order: remembered, or passed this call (added to
    ``remembered``); a host refused for good is named on stderr."""
    ready: list[Host] = []
    for host in listed:
        outcome, entry = outcomes.get(host.name, (None, None))
        if host.name in remembered:
            ready.append(host)
        elif outcome is not None and outcome.status is Status.READY:
            if entry is not None:
                remembered[host.name] = entry
            ready.append(host)
        elif outcome is not None and outcome.status is Status.FATAL:
            # Time will not fix it and Horovod would blacklist the host: say why, every call.
            reporter.info(f"warning: {host.name} not listed: {outcome.detail}")
    return ready


def _probe(
    run: Run, lookups: LookupPool, hosts: list[str], directory: str | None
) -> dict[str, tuple[Outcome, readycache.Entry | None]]:
    """One full attempt at each host, as the wait makes it; for a pass, what it resolved to.
    ``directory``: where connect-only attempts take their turns (probe/pace.py)."""
    # The login code only when a login is due: most of Horovod's calls every second need none.
    from mpiwait.probe.attempt import prober_for

    _, prober = prober_for(run.probe, lookups, Pacer(directory))
    prober.preflight(tuple(hosts))  # an unusable key file: exit 3, as for the wait

    def attempt(name: str) -> tuple[Outcome, readycache.Entry | None]:
        outcome = prober.attempt(name)
        reached = outcome.reached
        if outcome.status is not Status.READY or reached is None:
            return outcome, None
        addresses = tuple(sorted(set(reached.addresses)))  # as _addresses gives them
        entry = readycache.Entry(readycache.now(), reached.address, reached.port, addresses)
        return outcome, entry

    def on_error(exc: Exception) -> tuple[Outcome, readycache.Entry | None]:
        # A probe bug must not fail Horovod's discovery.
        return unexpected(str(exc)), None

    budget = max(prober.timeout_for(prober.target(h)) for h in hosts)
    return run_all(
        attempt,
        hosts,
        parallel=run.wait.budget.parallel,
        rate=run.wait.budget.rate,
        budget=budget,
        on_error=on_error,
    )


def _addresses(
    lookups: LookupPool, address: str, port: int, timeout: float
) -> tuple[str, ...] | None:
    try:
        infos = lookups.resolve(address, port, timeout)
    except (OSError, UnicodeError, LookupTimeout, ResolverBusy):
        return None
    return tuple(sorted({info[4][0] for info in infos}))


def _settings_key(probe: ProbeOptions, home: str) -> str:
    """Everything a pass depends on besides the host: options, and the files ssh would read
    (``home``: the local user's, as ssh finds it)."""
    if probe.ssh_config is not None:
        configs = [str(probe.ssh_config)]
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
    files = [*configs, *(str(p) for p in probe.identity_files), *own]
    return readycache.fingerprint(
        [
            probe.check.value,
            probe.port,
            probe.user,
            probe.remote_command,
            probe.connect_timeout,
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
