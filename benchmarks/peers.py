"""mpiwait and the peers it is measured against, as commands.

Each peer is a faithful re-implementation of what users run today (written here from the
descriptions in the reference notes, not copied): the same order of checks, the same sleeps and
retry counts, the same tools (ssh, a resolver lookup, mpirun). All of them get the same
environment: the bed's ssh_config as /etc/ssh/ssh_config (what an MPI image ships), /etc/mpi
with mpi-operator's hostfile and discover_hosts.sh, and mpi-operator's launcher variables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import PY

# Kubernetes restarts a failed launcher container (Job, restartPolicy OnFailure) after 10 s,
# 20 s, 40 s, ... (kubelet's crash-loop back-off), at most backoffLimit (default 6) times.
JOB_SH = r"""#!/bin/bash
# The launcher Job: run the container's command; when it fails, run it again after
# 10 s, 20 s, 40 s, ... (at most MW_BACKOFF_LIMIT times). Each container exit is logged.
delay=${MW_JOB_BACKOFF:-10}
failures=0
while true; do
    "$@"
    rc=$?
    printf '%s %s\n' "$EPOCHREALTIME" "$rc" >> "${MW_EXITS:-/dev/null}"
    [ "$rc" -eq 0 ] && exit 0
    failures=$((failures + 1))
    [ "$failures" -gt "${MW_BACKOFF_LIMIT:-6}" ] && exit "$rc"
    sleep "$delay"
    delay=$((delay * 2))
done
"""

# The "real command" of every method: note when it starts, then become it. With MW_GATE set
# (scenario 4), first wait until the harness has read its counters for this start.
REC_SH = r"""#!/bin/bash
printf '%s\n' "$EPOCHREALTIME" >> "${MW_STARTS:-/dev/null}"
if [ -n "$MW_GATE" ]; then
    n=$(wc -l < "$MW_STARTS")
    for _ in $(seq 3000); do [ -e "$MW_GATE/$n" ] && break; sleep 0.01; done
fi
exec "$@"
"""

SLEEP_LOOP_SH = r"""#!/bin/bash
# The initContainer pasted into mpi-operator issue #386: wait until discover_hosts.sh lists
# more than its first line, then `ssh HOST echo HOST` for each listed host in turn, sleeping
# 10 s after every failure. No overall deadline. Two kinder readings than the pasted original:
# it exits after its first sleep and relies on the kubelet restarting the initContainer (here
# it loops in place), and its ssh reads the loop's stdin, so it swallows the host list and
# checks only the first host (here ssh gets /dev/null, so every host is checked in turn).
discover=${MW_DISCOVER:-/etc/mpi/discover_hosts.sh}
until [ "$(wc -l < "$discover")" -gt 1 ]; do
    echo "not ready ..."
    sleep "${MW_SLEEP:-10}"
done
while read -r host; do
    while ! ssh "$host" echo "$host" < /dev/null; do
        echo "Pod $host is not up ..."
        sleep "${MW_SLEEP:-10}"
    done
    echo "Pod $host is ready"
done <<< "$("$discover")"
"""

DNS_ENTRYPOINT_SH = r"""#!/bin/bash
# mpi-operator's Intel/MPICH base-image entrypoint: for the launcher, resolve $HOSTNAME and
# then each hostfile host in turn, 10 tries each with a sleep doubling from 0.1 s; a host that
# never resolves is reported and skipped; then exec the command anyway. No TCP or SSH check.
# The original runs nslookup, which asks the DNS server itself; `getent ahosts` asks the same
# question through the resolver (here a hosts file: no DNS server is ever asked).
resolve_host() {
    host="$1"
    max_retry=10
    counter=0
    backoff=0.1
    until getent ahosts "$host" > /dev/null; do
        if [ $counter -eq $max_retry ]; then
            echo "Couldn't resolve $host"
            return
        fi
        sleep $backoff
        echo "Couldn't resolve $host... Retrying"
        ((counter++))
        backoff=$(echo - | awk "{print $backoff + $backoff}")
    done
    echo "Resolved $host"
}
if [ "$K_MPI_JOB_ROLE" == "launcher" ]; then
    resolve_host "$HOSTNAME"
    cut -d ' ' -f 1 "${MW_HOSTFILE:-/etc/mpi/hostfile}" | cut -d: -f1 | while read -r host; do
        resolve_host "$host"
    done
fi
exec "$@"
"""

PARALLEL_OPENSSH_SH = r"""#!/bin/bash
# The pdsh/Horovod-style check: `ssh -o BatchMode=yes HOST true` to every host at once
# (32 at a time), the whole round again each second until every host passes; then exec.
hosts=$(cut -d ' ' -f 1 "${MW_HOSTFILE:-/etc/mpi/hostfile}" | cut -d: -f1)
until printf '%s\n' $hosts | xargs -P 32 -I{} ssh -o BatchMode=yes {} true; do
    sleep 1
done
exec "$@"
"""

SCRIPTS = {
    "job.sh": JOB_SH,
    "rec.sh": REC_SH,
    "sleep-loop.sh": SLEEP_LOOP_SH,
    "dns-entrypoint.sh": DNS_ENTRYPOINT_SH,
    "parallel-openssh.sh": PARALLEL_OPENSSH_SH,
}


def write_scripts(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name, text in SCRIPTS.items():
        p = dest / name
        p.write_text(text)
        p.chmod(0o755)
    return dest


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    verifies_ssh: bool  # whether its wait ends on an SSH login to every host

    def init(self, scripts: Path) -> list[str] | None:
        """An initContainer's argv (run once, before the launcher container), or None."""
        if self.name == "sleep-loop":
            return [str(scripts / "sleep-loop.sh")]
        return None

    def container(
        self, scripts: Path, command: Sequence[str], mpiwait_args: Sequence[str] = ()
    ) -> list[str]:
        """The launcher container's argv: wait the method's way, then exec ``command``."""
        cmd = list(command)
        if self.name == "mpiwait":
            return [PY, "-m", "mpiwait", *mpiwait_args, *(["--", *cmd] if cmd else [])]
        if self.name == "dns-entrypoint":
            return [str(scripts / "dns-entrypoint.sh"), *(cmd or ["true"])]
        if self.name == "parallel-openssh":
            return [str(scripts / "parallel-openssh.sh"), *(cmd or ["true"])]
        # sleep-loop (the wait is its initContainer) and crash-and-retry: no wait at all
        return cmd or ["true"]


METHODS = {
    m.name: m
    for m in (
        Method("mpiwait", "mpiwait with its default settings", True),
        Method(
            "sleep-loop",
            "initContainer of issue #386: ssh each host in turn, sleep 10 s after a failure",
            True,
        ),
        Method(
            "dns-entrypoint",
            "operator's Intel/MPICH entrypoint: resolve each host, 10 tries, doubling sleep "
            "from 0.1 s, then exec anyway",
            False,
        ),
        Method(
            "crash-and-retry",
            "no wait: run mpirun, rerun after the Job back-off (10 s, 20 s, 40 s, ...)",
            False,
        ),
        Method(
            "parallel-openssh",
            "xargs -P 32 ssh -o BatchMode=yes HOST true over all hosts, each second until all pass",
            True,
        ),
    )
}
ALL = tuple(METHODS)

# With --baseline-path, the same mpiwait command run from another checkout (the environment
# differs, see Context.env), side by side with this one's in every scenario.
BEFORE = "mpiwait (before)"


def base(method: str) -> str:
    """The method a variant runs ("mpiwait (before) (names ...)" runs mpiwait)."""
    return "mpiwait" if method.startswith("mpiwait") else method


# mpi-operator's environment for an Open MPI launcher (K_MPI_JOB_ROLE and the OMPI_MCA_* that
# reach mpirun); every method gets it.
OPERATOR_ENV = {
    "K_MPI_JOB_ROLE": "launcher",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
}


def launcher(
    scripts: Path, method: str, command: Sequence[str], mpiwait_args: Sequence[str] = ()
) -> tuple[list[str], dict[str, str]]:
    """argv and extra environment of a launcher pod run the ``method`` way: its initContainer (if
    any) once, then its container under the Job's restart policy, ending in ``command``."""
    m = METHODS[base(method)]
    container = [str(scripts / "job.sh"), *m.container(scripts, command, mpiwait_args)]
    init = m.init(scripts)
    if init:
        return ["bash", "-c", '"$MW_INIT" && exec "$@"', "launcher-pod", *container], {
            "MW_INIT": init[0]
        }
    return container, {}
