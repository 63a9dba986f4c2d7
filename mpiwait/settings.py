"""mpiwait's defaults and timings (the one place its numbers live; nothing else hard-codes a
timeout), and the resolved values each part of a run gets (Run, and the wait's policy in it),
which the CLI builds once from the options. It imports nothing of mpiwait: every layer may
import it."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from pathlib import Path


class Check(str, enum.Enum):
    """How far a host must get before it counts as ready; each stage includes the ones before."""

    DNS = "dns"
    TCP = "tcp"
    SSH = "ssh"


class LogFormat(str, enum.Enum):
    TEXT = "text"
    JSON = "json"


# Each number's reason and the measurements behind it: docs/design-decisions.md.

# Where mpi-operator mounts its ConfigMap in the launcher; a missing default is skipped.
DEFAULT_HOSTFILE = Path("/etc/mpi/hostfile")
DEFAULT_DISCOVER_HOSTS = Path("/etc/mpi/discover_hosts.sh")

# Below a typical activeDeadlineSeconds, so the launcher fails with our reason, not k8s's.
DEFAULT_TIMEOUT = 600.0

# Per stage of one attempt: a loaded sshd passes, a black-holed host frees its slot soon.
DEFAULT_CONNECT_TIMEOUT = 5.0

# The retry envelope: no host goes untried longer than 0.5 s (the launch gap follows it).
DEFAULT_RETRY_INITIAL = 0.1
DEFAULT_RETRY_MAX = 0.5

# The most often one unready host is tried, by what one try costs the worker or the DNS.
RETRY_FLOOR_TCP = 0.02
RETRY_FLOOR_DNS = 0.05
RETRY_FLOOR_SSH = 0.1

# A host away longer than a normal start's spread backs off to the envelope within a minute.
BACKOFF_GRACE = 20.0
BACKOFF_DOUBLING = 10.0

# The oldest a host's last check may be at the launch: re-checked 15-30 s after each pass.
DEFAULT_RECHECK_AFTER = 30.0

# A refused address is reused this long instead of looked up again (CoreDNS's record TTL).
REFUSED_ADDRESS_REUSE = 5.0

# sshd's PerSourcePenalties charge for a connection closed before authenticating, and how much
# of its 15 s allowance mpiwait's probes may hold (a burst of 2, then one a second per host).
NOAUTH_CHARGE = 1.0
NOAUTH_BUDGET = 2.0

# How long an accepted connection is watched for sshd's "Not allowed at this time" line.
DROP_NOTICE_WAIT = 0.25

# Probes in flight: rate x login latency with room for slow hosts; more only fight for the GIL.
DEFAULT_PARALLEL = 32

# Attempts started per second, all hosts: bounds the cluster DNS's load whatever the job's size.
DEFAULT_PROBE_RATE = 200.0

# discover_hosts.sh changes as workers start; a read a second adds far less lag than the kubelet.
SOURCE_REREAD_INTERVAL = 1.0

# A line a while hosts are not ready, so `kubectl logs` never looks hung.
STATUS_INTERVAL = 10.0

# Key rejections in a row that are a configuration error rather than a start-up race.
PERMANENT_FAILURES_BEFORE_EXIT = 3

# --discover-exec runs a user's script every round; a hung one must not stall the wait.
DISCOVER_EXEC_TIMEOUT = 10.0

# This machine's FQDN lookup must not hold up the start (nor a SIGTERM) on a slow resolver.
SELF_LOOKUP_TIMEOUT = 2.0

# Name lookups outstanding at once, stuck ones included: a broken resolver costs this many threads.
MAX_PENDING_LOOKUPS = 32

# --list-ready logs into a passed host again within this bound; in between, DNS must agree.
LIST_READY_RECHECK = 30.0

# A listener that accepted a login this recently needs no try at the end of the wait.
LISTENER_CHECK_AFTER = 1.0

# Listener tries open at once at the wait's end: well under KEPT_FD_RESERVE.
LISTENER_WINDOW = 128
# A listener try unanswered this long is made again: a SYN dropped at a full accept queue
# would otherwise wait the kernel's first retransmission, 1 s.
LISTENER_RESEND = 0.2

# A kept connection's keepalives (idle s, s between, unanswered before the kernel drops it):
# a worker that vanished silently is noticed within 3 s.
KEEPALIVE = (1, 1, 2)
# File descriptors left for everything else (probe sockets, lookups, stdio) when keeping.
KEPT_FD_RESERVE = 256

# The daemon check's command on a worker: its login shell's start-up (conda, modules, a home
# on NFS) may take seconds, and mpirun waits for it too.
DAEMON_CHECK_TIMEOUT = 30.0

# ssh -G for one host: it reads every file a connection would, and exits.
SSH_ASK_TIMEOUT = 30.0

# --list-ready gathers the logins that come due into one call in this many seconds.
LIST_READY_DUE_EVERY = 5.0
# --list-ready's files of other settings not written this long are abandoned (Horovod rewrites
# a live one every second).
LIST_READY_ABANDONED_AFTER = 600.0

# Kubernetes shows this file's content in `kubectl describe pod` when the container fails.
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")


class Mode(str, enum.Enum):
    WAIT = "wait"  # wait, then exec COMMAND or exit 0
    LIST_READY = "list-ready"
    DRY_RUN = "dry-run"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Where hosts come from (hosts/sources.py)."""

    hostfile: Path | None
    hostfile_explicit: bool  # named by the user: missing is an error, not a skip
    discover_hosts: Path | None
    discover_explicit: bool
    discover_exec: bool  # run the discover file instead of parsing it
    hosts_option: str | None  # --hosts as given: when set, the files are not read
    include_self: bool


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class OutputOptions:
    log_format: LogFormat
    quiet: bool
    termination_log: Path | None
    create_termination_log: bool  # named by the user: created if it does not exist


@dataclass(frozen=True, slots=True)
class Run:
    """One run, resolved: each part is what one consumer needs, every default applied."""

    mode: Mode
    command: tuple[str, ...]
    launch_env: bool  # hand the MPI launch what the wait learned (launch/handover.py)
    daemon_check: bool  # check that mpirun's daemon will start on each worker (probe/daemon.py)
    sources: SourceOptions
    probe: ProbeOptions
    wait: WaitPolicy  # its budget serves --list-ready too
    output: OutputOptions


# The wait's policy, built once by the CLI from the options and the defaults above.


@dataclass(frozen=True, slots=True)
class Budget:
    """What the cluster is asked to bear, all hosts together (the wait and --list-ready)."""

    parallel: int  # attempts in flight at once
    rate: float  # attempts started per second; 0: no limit


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a host waits after an attempt that did not pass (wait/schedule.py)."""

    initial: float  # first window of the envelope (--retry-initial)
    maximum: float  # the envelope's cap (--retry-max): no host goes untried longer
    floor_dns: float
    floor_tcp: float
    floor_ssh: float
    grace: float  # seconds a host may stay away before its window starts to grow
    doubling: float  # then its window doubles every this many seconds, up to the envelope
    follow_budget: bool = True  # False: full jitter under the envelope (explicit --retry-*)


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    timeout: float  # 0: no deadline
    budget: Budget
    retry: RetryPolicy
    reread_interval: float
    permanent_after: int
    status_interval: float = math.inf  # how often to emit StillWaiting while hosts are not ready
    recheck_after: float = math.inf  # the oldest a pass may be at the end (re-checked before)
