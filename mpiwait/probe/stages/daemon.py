"""The daemon check: on the session it already has, ask the worker where it finds the daemon
mpirun will start there (launch/daemons.py made the plan), and for a worker that spawns others
(Open MPI's tree spawn) whether its own ssh reaches one of them and finds it there too. Once a
worker passed, its later attempts skip the check: one extra round trip per worker."""

from __future__ import annotations

import threading

from mpiwait.probe import paramiko_adapter as adapter
from mpiwait.probe.daemon import MARK, DaemonPlan, missing, read, script
from mpiwait.probe.outcome import Outcome, Reason, Stage, Status, retry
from mpiwait.probe.stages.step import Session
from mpiwait.settings import DAEMON_CHECK_TIMEOUT

# What a worker's ssh says when it cannot log in to another, and waiting will not change it.
_FOR_GOOD = ("Permission denied", "Host key verification failed", "No user exists")
_TREE_HINT = (
    "every worker needs an ssh client, the job's key and the others' host keys for tree "
    "spawn; or turn it off: mpirun --mca plm_rsh_no_tree_spawn 1 (Open MPI 5: "
    "--prtemca plm_ssh_no_tree_spawn 1)"
)


class DaemonCheck:
    """The step: one command per worker on its session, until the worker passes once."""

    def __init__(self, plan: DaemonPlan) -> None:
        self._plan = plan
        self._passed: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, session: Session) -> Outcome | None:
        import paramiko  # here, not at the top: --check tcp imports this module, never logs in

        host = session.target.host
        with self._lock:
            if host in self._passed:
                return None
        child = (self._plan.tree or {}).get(host)
        # a spawning worker's own login to its child must fit in too
        timeout = DAEMON_CHECK_TIMEOUT + (session.timeout if child else 0)
        command = script(self._plan, child, session.timeout)
        try:
            status, text = adapter.run(session.transport, command, timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            return retry(Stage.SSH, Reason.DAEMON, f"the daemon check's session failed: {exc}")
        if status is None:
            return retry(Stage.SSH, Reason.DAEMON, f"the daemon check took over {timeout:g}s")
        outcome = judge(self._plan, host, child, text.splitlines())
        if outcome is None:
            with self._lock:
                self._passed.add(host)
        return outcome


def judge(plan: DaemonPlan, host: str, child: str | None, lines: list[str]) -> Outcome | None:
    """None when the daemon is where mpirun will look (on ``host``, and on ``child`` through
    ``host``'s ssh), else the outcome that says what is missing where."""
    own = [line for line in lines if not line.startswith(f"{MARK}:via")]
    found = read(plan, own)
    if not found.ran:
        return None  # a shell that did not run the script (csh, a ForceCommand): not ours to say
    if not found.where:
        return _fatal(*missing(plan, found))
    if child is None:
        return None
    via = [line.removeprefix(f"{MARK}:via:") for line in lines if line.startswith(f"{MARK}:via:")]
    agent = next((x for x in own if x.startswith(f"{MARK}:agent:")), "")
    if agent and not agent.removeprefix(f"{MARK}:agent:").strip():
        return _fatal(
            f"no {plan.agent[0]} on the non-interactive PATH, and the daemon here starts "
            f"{plan.daemon} on {child} with it (tree spawn)",
            _TREE_HINT,
        )
    reached = read(plan, via)
    if reached.ran:
        return None if reached.where else _fatal(*missing(plan, reached, via=child))
    said = "; ".join(x.strip() for x in via if x.strip() and not x.startswith(MARK)) or "no answer"
    detail = f"cannot log in to {child} as tree spawn will: {said}"
    if any(word in said for word in _FOR_GOOD):
        return _fatal(detail, _TREE_HINT)
    return retry(Stage.SSH, Reason.DAEMON, detail)  # not resolving or not listening yet


def _fatal(detail: str, hint: str) -> Outcome:
    return Outcome(Status.FATAL, Stage.SSH, Reason.DAEMON, detail, hint)
