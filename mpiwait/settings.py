"""The validated settings of one run, with every default and the reason for it.

This is the one place where mpiwait's numbers live; nothing else hard-codes a timeout.
"""

from __future__ import annotations

import enum
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

# Full-jitter exponential backoff per host. The first retries come quickly because most workers
# become ready within seconds of the launcher; the cap bounds how long a ready host can go
# unnoticed (the launch gap). Unready checks are cheap (a name lookup or a refused connect), so
# a short cap costs the cluster little; the probe-rate budget below bounds the total anyway.
DEFAULT_RETRY_INITIAL = 0.1
DEFAULT_RETRY_MAX = 2.0

# Probes in flight at once. SSH logins are I/O bound on the client (~3 ms CPU each); 64 keeps a
# 1000-worker job's verification near the rate a single sshd-sharing node sustains without
# turning into a thundering herd.
DEFAULT_PARALLEL = 64

# Attempts started per second across all hosts (0: no limit). Every attempt that is not yet
# past DNS is a lookup against the cluster's DNS (often several queries through the search
# list); this keeps a 1000-worker job from flooding it while it waits.
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

# Kubernetes shows this file's content in `kubectl describe pod` when the container fails.
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")


@dataclass(frozen=True)
class Settings:
    """Everything one run needs, already validated (the CLI builds it; nothing else parses)."""

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
    retry_initial: float = DEFAULT_RETRY_INITIAL
    retry_max: float = DEFAULT_RETRY_MAX
    parallel: int = DEFAULT_PARALLEL
    probe_rate: float = DEFAULT_PROBE_RATE
    dry_run: bool = False
    log_format: LogFormat = LogFormat.TEXT
    quiet: bool = False
    termination_log: Path | None = DEFAULT_TERMINATION_LOG
