"""The validated settings of one run, with every default and the reason for it.

This is the one place where mpiwait's numbers live; nothing else hard-codes a timeout.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from mpiwait.wait.policy import WaitPolicy


class Check(str, enum.Enum):
    """How far a host must get before it counts as ready; each stage includes the ones before."""

    DNS = "dns"
    TCP = "tcp"
    SSH = "ssh"


class LogFormat(str, enum.Enum):
    TEXT = "text"
    JSON = "json"


# mpi-operator mounts its ConfigMap here in the launcher (see mpi-operator.md); a default path
# that does not exist is skipped, so the same defaults work outside Kubernetes.
DEFAULT_HOSTFILE = Path("/etc/mpi/hostfile")
DEFAULT_DISCOVER_HOSTS = Path("/etc/mpi/discover_hosts.sh")

# Ten minutes: long enough for workers that pull a multi-GB image on a cold node, short enough
# to sit below a typical activeDeadlineSeconds so the launcher fails with our reason, not k8s's.
DEFAULT_TIMEOUT = 600.0

# Per stage of one attempt. A healthy pod network answers a TCP connect in milliseconds and an
# SSH login in tens of ms; 5 s tolerates a loaded sshd without letting one black-holed host pin a
# probe slot for long.
DEFAULT_CONNECT_TIMEOUT = 5.0

# The envelope of the retry schedule (wait/schedule.py): the first retry comes within 0.1 s, and no
# host goes untried longer than 0.5 s (unless the probe budget is saturated), since the time
# from "sshd accepts" to the next attempt is most of the launch gap. Within it, how often a
# host is actually tried follows the probe budget and the floors below. Given explicitly
# (--retry-initial/--retry-max), they are what they always were: a full-jitter backoff window
# doubling from the first to the cap, without the floors, for who wants to tune it by hand.
DEFAULT_RETRY_INITIAL = 0.1
DEFAULT_RETRY_MAX = 0.5

# The most often one unready host is tried, by the stage that failed; with few hosts missing
# (the end of every wait) these set the launch gap: a host that just became ready waits half a
# floor on average for its next attempt, plus ~20-40 ms of login and exec. Under the previous
# schedule (full jitter over a 0.5-s window, ~4 tries/s whatever the count) the launch gap was
# 0.17 s median for 8 workers and 0.35 s for 64; with these floors, 0.03 and 0.04 s, side by
# side in one run (benchmarks/, scenario 1; README, Performance).
# - tcp (refused, mostly): a refused connect costs the worker's kernel one SYN and one RST,
#   microseconds of work; 50 a second is nothing to a pod and far below any SYN-flood defence.
# - dns: an unresolvable name costs the cluster's DNS up to 8 queries (4 names of a pod's
#   search list x A and AAAA); 20 lookups/s is <= 160 queries/s for one missing host, a tenth
#   of what the probe budget already allows the whole job, and ~1% of one CoreDNS replica.
# - ssh (banner, handshake, remote command): each try costs the worker's sshd a fork and a key
#   exchange (milliseconds of CPU, a MaxStartups slot), so no more than 10 a second.
RETRY_FLOOR_TCP = 0.02
RETRY_FLOOR_DNS = 0.05
RETRY_FLOOR_SSH = 0.1

# A host away for longer than the grace period is not racing the others' start-up: it pulls a
# multi-GB image or is being rescheduled, and a few hundred ms of extra notice are nothing
# next to that. From then on its window doubles every BACKOFF_DOUBLING seconds up to the
# envelope, so after about a minute it costs what it cost under the previous schedule (~4
# tries/s), and a thousand absent workers are bounded by the probe budget as before. 20 s
# covers the spread of a normal start (scenario 1 spreads 8-64 workers over 10 s).
BACKOFF_GRACE = 20.0
BACKOFF_DOUBLING = 10.0

# Before the launch (and before exit 0 without COMMAND), hosts that passed longer ago than this
# are checked again, all at once: a worker restarted, evicted or preempted while the last one
# was still pulling its image would otherwise make mpirun fail on it. 30 s is three times the
# slowest normal start measured here (1000 hosts verified in ~10 s on 2 cores; a job of 8-64
# workers starting over 10 s), so a quick start never pays for a re-check; a wait that is long
# enough for a restart to happen in it (minutes of image pulling) always does. A host that
# passed within the last 30 s is left to mpirun's own ssh, which mpi-operator sets to retry a
# refused connect for 10 s (ConnectionAttempts=10).
DEFAULT_RECHECK_AFTER = 30.0

# A name whose address refused the SSH port is looked up again at most this often; the attempts
# in between connect to the address already known. A refused connect proves the address is
# there (the pod runs, its sshd does not listen yet, the common case when Ready comes before
# sshd); re-resolving it on every attempt only loaded the cluster's DNS: 50 such hosts for 30 s
# cost it ~120 lookups each, now ~7 (benchmarks/, scenario 4). 5 s is the TTL CoreDNS gives
# cluster records, so a caching resolver would not have looked again sooner either. A timeout
# or an unreachable address is looked up again on the next attempt (the pod may have moved).
REFUSED_ADDRESS_REUSE = 5.0

# OpenSSH 9.8+ sshd charges a source address 1 s for each connection that ends before
# authentication (PerSourcePenalties noauth:1), lets the charges run down in real time and
# refuses the address once more than 15 s are outstanding (min:15). mpiwait keeps the same
# account for the connections it closes before logging in (--check tcp, a handshake cut short)
# and holds it at or below the budget: a burst of 5 at once, then one a second per host. A
# third of the 15 s leaves the rest to other clients of the same address (docs/ssh-settings.md).
NOAUTH_CHARGE = 1.0
NOAUTH_BUDGET = 5.0

# How long a connection that sshd accepted is watched for the line sshd writes when it turns
# a connection away at once ("Not allowed at this time"); sshd sends that, or its banner,
# within milliseconds of accepting. A server that sends nothing by then is left to the
# handshake (or, for --check tcp, counts as accepting, as it always did).
DROP_NOTICE_WAIT = 0.25

# Probes in flight at once (and the burst the probe-rate budget allows at the start). The budget
# below needs rate x latency in flight: 200/s x a login of 20-100 ms is 4-20; 32 leaves room
# for slow hosts (a black-holed one holds its slot for the connect timeout). More only makes
# threads contend for the GIL: 64 cost ~2.8 ms of client CPU per host at 1000 hosts, 32 ~2.5 ms,
# in the same wall time (a login here is ~3 ms of paramiko CPU; benchmarks/, scenario 2).
DEFAULT_PARALLEL = 32

# Attempts started per second across all hosts (0: no limit). An attempt at a name that does not
# resolve yet is a lookup against the cluster's DNS: through a pod's search list (ndots:5) up to
# 4 names x A and AAAA, so 200 lookups/s is at most ~1600 queries/s, a few percent of what one
# CoreDNS replica serves, whatever the job's size: a 1000-worker job waits with each host
# probed every ~5 s instead of 4 times a second. Ready hosts are not slowed by it here (one
# sshd sharing the 2 cores manages ~110 logins/s); on a real cluster 1000 ready hosts take 5 s.
DEFAULT_PROBE_RATE = 200.0

# discover_hosts.sh is rewritten by the operator as workers start running, and reaches the pod
# only after the kubelet's ConfigMap sync; reading a small file once a second is free and keeps
# the lag ours adds well below the kubelet's.
SOURCE_REREAD_INTERVAL = 1.0

# While hosts are not ready, a line every 10 s says who and why, so `kubectl logs` never looks
# hung, without a line per failed attempt.
STATUS_INTERVAL = 10.0

# A host that answers but rejects our key may be racing its own start-up (authorized_keys
# mounted a moment late); three rejections in a row are a configuration error, not a race.
PERMANENT_FAILURES_BEFORE_EXIT = 3

# --discover-exec runs a user's script every round; a hung script must not stall the wait.
DISCOVER_EXEC_TIMEOUT = 10.0

# This machine's FQDN (to leave the launcher out of the hosts) comes from a name lookup, which
# asks DNS when the name is not in /etc/hosts; a slow resolver must not hold up the start, nor
# a SIGTERM (Python runs signal handlers between bytecodes, never inside getaddrinfo). In a pod
# the name is in /etc/hosts and the lookup takes microseconds.
SELF_LOOKUP_TIMEOUT = 2.0

# Name lookups outstanding at once, stuck ones included (mpiwait/probe/lookup.py). A lookup gets the
# connect timeout like every stage; one that a resolver keeps longer (Docker's embedded DNS took
# ~10 s for a container not started yet) goes on in the background on its own thread. As many as
# the default --parallel (or --parallel, when larger): a healthy resolver answers in milliseconds
# and never needs more, and a broken one costs at most this many threads; lookups past it report
# "resolver busy" and are retried like any other not-yet.
MAX_PENDING_LOOKUPS = 32

# --list-ready (horovodrun --host-discovery-script, run every second). A host that passed a
# login is logged into again 10 s to this long after it passed (spread per host and
# gathered into one call in five, modes/readycache.py, so that
# hosts that came up together do not all
# come due in the same call, and most calls need no SSH code at all); on the calls in between it
# is listed if its name still resolves to the addresses it had when it passed. A pod that is
# deleted, evicted or rescheduled loses its DNS record or changes address, so that check catches
# what matters at the cost of a name lookup instead of ~10 ms of sshd work per host per second;
# what it cannot see (sshd dying inside a pod that keeps its address) is caught within this
# bound. Horovod ssh's only into hosts new to it, so only a host coming back to the list within
# the bound could meet that case. 64 ready hosts: no login on four calls in five, ~20 on the
# fifth, instead of 64 on every call (benchmarks/s5_list_ready.py).
LIST_READY_RECHECK = 30.0

# Kubernetes shows this file's content in `kubectl describe pod` when the container fails.
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")


@dataclass(frozen=True)
class Settings:
    """The command line as given, validated (the CLI builds it; nothing else parses). The CLI
    resolves it into a Run; nothing past the CLI reads it."""

    command: tuple[str, ...] = ()
    hostfile: Path | None = DEFAULT_HOSTFILE
    hostfile_explicit: bool = False  # named by the user: missing is an error, not a skip
    discover_hosts: Path | None = DEFAULT_DISCOVER_HOSTS
    discover_explicit: bool = False
    discover_exec: bool = False
    hosts_option: str | None = None  # --hosts as given: when set, the files are not read
    include_self: bool = False
    check: Check = Check.SSH
    ssh_config: Path | None = None  # -F: only this file, as with ssh -F
    port: int | None = None
    user: str | None = None
    identity_files: tuple[Path, ...] = ()
    remote_command: str | None = None
    timeout: float = DEFAULT_TIMEOUT  # 0: wait forever
    connect_timeout: float | None = None  # None: ssh config's ConnectTimeout, else the default
    # None (neither given): the budget-following schedule under the default envelope; either
    # given: full-jitter backoff over that window, the schedule these options always meant
    retry_initial: float | None = None
    retry_max: float | None = None
    parallel: int = DEFAULT_PARALLEL
    probe_rate: float = DEFAULT_PROBE_RATE
    recheck_after: float = DEFAULT_RECHECK_AFTER  # 0: never re-check
    dry_run: bool = False
    list_ready: bool = False  # print the hosts that pass now, host[:slots] per line, and exit
    log_format: LogFormat = LogFormat.TEXT
    quiet: bool = False
    termination_log: Path | None = DEFAULT_TERMINATION_LOG
    termination_log_explicit: bool = False  # named by the user: created if it does not exist
    launch_env: bool = True  # hand the MPI launch what the wait learned (launch/handover.py)


class Mode(str, enum.Enum):
    WAIT = "wait"  # wait, then exec COMMAND or exit 0
    LIST_READY = "list-ready"
    DRY_RUN = "dry-run"


@dataclass(frozen=True)
class SourceOptions:
    """Where hosts come from (hosts/sources.py)."""

    hostfile: Path | None
    hostfile_explicit: bool  # named by the user: missing is an error, not a skip
    discover: Path | None
    discover_explicit: bool
    discover_exec: bool
    hosts_option: str | None  # --hosts as given: when set, the files are not read
    include_self: bool


@dataclass(frozen=True)
class ProbeOptions:
    """What one attempt checks and how (probe/), and the overrides of ssh_config (openssh/)."""

    check: Check = Check.SSH
    ssh_config: Path | None = None  # -F: only this file, as with ssh -F
    port: int | None = None  # -p: replaces the config's Port; None keeps it
    user: str | None = None  # -l: replaces the config's User; None keeps it
    identity_files: tuple[Path, ...] = ()  # -i: replace the config's and the defaults
    remote_command: str | None = None
    connect_timeout: float | None = None  # --connect-timeout; None: each host's ConnectTimeout

    def timeout(self, configured: float | None) -> float:
        """Seconds per stage: --connect-timeout, else ssh_config's ConnectTimeout for the host
        (``configured``), else the default."""
        if self.connect_timeout is not None:
            return self.connect_timeout
        return configured or DEFAULT_CONNECT_TIMEOUT


@dataclass(frozen=True)
class OutputOptions:
    log_format: LogFormat
    quiet: bool
    termination_log: Path | None
    create_termination_log: bool  # named by the user: created if it does not exist


@dataclass(frozen=True)
class Run:
    """One run, resolved: each part is what one consumer needs, every default applied."""

    mode: Mode
    command: tuple[str, ...]
    launch_env: bool  # hand the MPI launch what the wait learned (launch/handover.py)
    sources: SourceOptions
    probe: ProbeOptions
    wait: WaitPolicy  # its budget serves --list-ready too
    output: OutputOptions
