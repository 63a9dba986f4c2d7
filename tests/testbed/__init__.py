"""The test bed: worker hosts running real sshd on this machine, a launcher context to run
mpiwait (or an MPI) in, and everything a test needs to put hosts into fault states and to watch
what happens. Stdlib only (scripts/demo imports it with Debian's python3); importable without
pytest. The public names, all of them:

Labs (each a context manager; ``down()``/``close()`` leaves nothing behind):
    TestBed(n, workdir=...)   one network namespace per host (w1..wN on 10.123.<i>.11+), own sshd,
                              hostname and address; Open MPI and MPICH run across it
                              (``openmpi_argv``, ``mpich_argv``). Hosts are ``bed.hosts[i]``
                              (WorkerHost: name, addr, ns, veth, sshd_config, ...).
                              ``sshd="trixie"``: Debian 13's sshd 10.0p2 with its own defaults
                              (PerSourcePenalties on) instead of the machine's tuned one;
                              ``bed.penalties()`` lists its log's penalty activations.
    ManyHosts(n, workdir=...) hundreds of hosts as addresses of ONE namespace, one sshd; each
                              host "up", "refuse", "drop" or "stall" via set_states();
                              log_level="VERBOSE" makes sshd_log tell each connection's address.
                              own_listeners=True: a listening socket per host (16 per sshd);
                              split_cpus=True: sshds and launcher on separate CPUs (benchmarks).
    LoopBed(n, workdir)       thousands of hosts as 127.1.x.y of one namespace (benchmarks).
    Lab(root)                 sshd on 127.0.0.x:port in this namespace (lab.sshd() gives an Sshd;
                              lab.silent(), lab.banner_then_silence(), lab.key(); keygen,
                              public_key): no namespace needed.

A host's fault states (TestBed, by position i): stop_sshd/start_sshd(delay=), blackhole,
    link_down/link_up, start_silent_listener, start_banner_listener, set_max_startups,
    slow_link/unslow_link, publish/unpublish (its name in the launcher's hosts file), iptables;
    what reached it: syns(i) (SYNs counted by a rule), rule_packets(i), sshd_log, ns_pid(i).
    A host's own image: set_view(i, hide=[paths], add={dest: source}) (those paths gone, e.g. an
    MPI's daemon, and symlinks added, in read-only overlays of their folders that only worker
    i's sshd and sessions see; set_view(i) undoes it).

The launcher context (TestBed/ManyHosts): ``bed.popen``/``bed.run``/``bed.launcher_cmd`` run a
    command where the bed's names resolve (files only), ssh reads the bed's ssh_config, as the
    bed's user; ``bed.env()`` tags an environment as the bed's; ``write_etc_mpi``,
    ``write_discover_hosts``, ``write_ssh_auth`` lay out /etc/mpi and keys; ``wrap()`` adds bind
    mounts and a drop to another uid; ``dns_blackhole_files()`` a resolver that never answers.

A process: ``start(bed, args, command=...)`` runs ``python -m mpiwait`` there and returns a Proc
    (bed: a TestBed or ManyHosts; a Lab or None: here, in a session of its own; ``python=``
    interpreter options, ``wrapper=`` a prefix such as wrap()'s, ``read=`` (default True) read
    the output from the start), whose one synchronisation primitive is
    ``wait_for(regex, stream=)``: until a line appears;
    ``finish()`` gives a Result and fails on a traceback or any registered key material
    (register_key, register_secret, check_output_hygiene) and, for a JSON run, on any record
    that does not fit docs/events.schema.json (check_json_log, json_log_problems;
    json_log_seen counts the records validated). ``run()`` = start + finish.
    ``Proc(popen, argv, started)`` wraps any process. /proc readers: alive,
    related_pids, fd_count, thread_count, tcp_states, listening; kill_group; wait_until.

What a test needs from the machine (_needs: one table, which scripts/install-test-deps installs
    from): ``needs("openmpi4", "sshd", ...)`` a pytest mark (decorator, ``pytestmark``,
    ``pytest.param(marks=)``); ``require(name)`` in a test or fixture returns a Found (``.path``:
    the executable or venv) or skips, or in strict mode (``strict_mode()``: CI=true or
    MPIWAIT_TEST_STRICT=1) fails, naming what is missing and the command that installs it;
    ``find(name)`` a Found or None, without pytest; ``NEEDS`` the table; ``python -m testbed
    needs`` lists it with what is here (``needs plan``: what scripts/install-test-deps installs).

What tests build from or compare with: ``fake_install(root, *files, links=)`` (empty executables
    and links: an install to look at), ``ssh_target(**changes)`` (mpiwait's SSHTarget for w1),
    ``OPERATOR_OPENMPI`` (what mpi-operator sets in an Open MPI launcher's environment).

Housekeeping: missing_requirements(flavour), cleanup_stale(), bed_names(prefix), bed_owner(name),
    built_commit() (the commit scripts/build-dist and build-image stamp from here, or ""),
    write_in_place(path, text) (a bind-mounted file rewritten, never seen empty),
    unnamed_uid() (a uid with no passwd entry), BedError, ENV_TAG, STATE_ROOT, SSHD. Submodules
    ``containers`` (a private dockerd and Debian base images: Engine), ``releases`` (Debian's
    OpenSSH releases in cached debootstrap roots, run under chroot: openssh_root(suite),
    Release(suite).ssh(...); trixie's root has its sshd too), ``cluster`` (a real three-node
    Kubernetes with mpi-operator, built by scripts/build-cluster: Cluster; ``cluster.images``
    builds and imports the tier's images, ``cluster.mpijob`` runs the examples as MPIJobs in a
    namespace of a test's own: Jobs), ``pythons`` (a Debian root with another Python) and
    ``leaks`` (the session-end check of conftest.py).

Inside (private, one job a module): the labs _netns (TestBed), _manyhosts (ManyHosts),
    _loopbed (LoopBed), _lab (Lab); what the namespace labs share: _namespaces (namespaces,
    veths, up/down), _sshd (keys, sshd_config, ssh_config, starting sshd), _names (files-only
    names, the mount namespace command), _launcher (the launcher context), _registry (lab ids,
    stale cleanup); TestBed's parts _workers (processes in a worker), _faults, _mpi; _wrap,
    _proc, _sys; _unit (the unit tier's inputs).
"""

from __future__ import annotations

from . import _jsonlog, _lab, _namespaces, _needs, _registry, containers, leaks, releases
from ._lab import (
    Lab,
    Sshd,
    keygen,
    public_key,
)
from ._launcher import OPERATOR_OPENMPI
from ._loopbed import LoopBed
from ._manyhosts import ManyHosts
from ._namespaces import SSHD
from ._needs import Found, find, needs, require, strict_mode
from ._netns import TestBed, WorkerHost
from ._proc import (
    Proc,
    Result,
    alive,
    check_output_hygiene,
    fd_count,
    key_secret_lines,
    mpiwait_env,
    register_key,
    register_secret,
    related_pids,
    run,
    start,
    summary,
    tcp_states,
    thread_count,
    wait_until,
)
from ._registry import bed_names, bed_owner
from ._sys import (
    ENV_TAG,
    STATE_ROOT,
    BedError,
    built_commit,
    kill_group,
    listening,
    unnamed_uid,
    write_in_place,
)
from ._unit import fake_install, ssh_target
from ._wrap import dns_blackhole_files, wrap

NEEDS = _needs.TABLE
check_json_log = _jsonlog.check
json_log_problems = _jsonlog.problems
json_log_seen = _jsonlog.seen

__all__ = [
    "ENV_TAG",
    "NEEDS",
    "OPERATOR_OPENMPI",
    "SSHD",
    "STATE_ROOT",
    "BedError",
    "Found",
    "Lab",
    "LoopBed",
    "ManyHosts",
    "Proc",
    "Result",
    "Sshd",
    "TestBed",
    "WorkerHost",
    "alive",
    "bed_names",
    "bed_owner",
    "built_commit",
    "check_json_log",
    "check_output_hygiene",
    "cleanup_stale",
    "containers",
    "dns_blackhole_files",
    "fake_install",
    "fd_count",
    "find",
    "json_log_problems",
    "json_log_seen",
    "key_secret_lines",
    "keygen",
    "kill_group",
    "leaks",
    "listening",
    "missing_requirements",
    "mpiwait_env",
    "needs",
    "public_key",
    "register_key",
    "register_secret",
    "related_pids",
    "releases",
    "require",
    "run",
    "ssh_target",
    "start",
    "strict_mode",
    "summary",
    "tcp_states",
    "thread_count",
    "unnamed_uid",
    "wait_until",
    "wrap",
    "write_in_place",
]  # fmt: skip


def missing_requirements(flavour: str = "netns") -> str | None:
    """Why a lab of ``flavour`` cannot run here (a sentence), or None when it can: "netns"
    (TestBed, ManyHosts, LoopBed), "loopback" (Lab), "containers" (containers.Engine) or
    "releases" (releases.Release)."""
    if flavour == "netns":
        return _namespaces.missing_requirements()
    if flavour == "loopback":
        return _lab.missing_requirements()
    if flavour == "containers":
        return containers.missing_requirements()
    if flavour == "releases":
        return releases.missing_requirements()
    raise ValueError(f"unknown flavour {flavour!r}: netns, loopback, containers or releases")


def cleanup_stale(
    prefix: str | None = None, *, include_persistent: bool = False, force: bool = False
) -> list[str]:
    """Remove what labs left whose owner process is gone (a crashed run); return their ids.
    ``prefix`` None: TestBeds of PREFIX and ManyHosts sets; else TestBeds of ``prefix`` only.
    A live owner's bed stays unless ``force``; a persistent one (scripts/testbed) unless
    ``include_persistent``."""
    return _registry.cleanup_stale(prefix, include_persistent=include_persistent, force=force)
