"""End to end: the real CLI, as a subprocess, against real OpenSSH servers on 127.0.0.x.

Every test runs ``python -m mpiwait`` the way a container would and checks what its user sees:
the exit status, the lines on stdout and stderr, and what ran (or did not). The servers come
from the test bed library's Lab (tests/testbed/): sshd on loopback addresses with their own
keys, plus listeners that accept TCP but never speak SSH. Each test passes ``--ssh-config`` (so
~/.ssh and /etc/ssh never matter) and ``--hosts`` or ``--hostfile`` (so /etc/mpi is never read).

Every run is also checked for things that must never happen: a Python traceback on stderr,
and any line of any private key (client or host) in any output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import testbed
from testbed import Lab, Sshd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


pytestmark = testbed.needs("loopback")

A, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"

# Upper bounds only, and wide: "fast" means well before a deadline we set far away.
FAR_DEADLINE = "60"
QUICK = 15.0


def finish(proc: testbed.Proc, timeout: float = 90) -> testbed.Result:
    """Its Result, once it ended; no traceback and no key line of any lab in its output."""
    run = proc.finish(timeout)
    assert "Traceback" not in run.stderr, run
    return run


def mpiwait(
    lab: Lab, *args: str, env: dict[str, str] | None = None, python: Sequence[str] = ()
) -> testbed.Result:
    return finish(testbed.start(lab, list(args), env=env, python=python))


def progress(host: str, state: str) -> str:
    """A regex for mpiwait's progress line about a host, e.g. progress(B, "tcp refused")."""
    return rf"^mpiwait: \[\+[\d.]+s\] {re.escape(host)}: {state}"


def mpiwait_then(lab: Lab, *args: str, steps: Sequence[tuple[str, Callable[[], object]]]):
    """Run mpiwait; each ``(seen, action)`` step runs ``action`` once a stderr line matches the
    regex ``seen`` (searched from the first line: a later step's line must be one that only
    the earlier steps' actions bring about). So a host comes up (or a file appears) only after
    mpiwait has reported the state before it, however slowly the machine runs: the test cannot
    pass without that state having been seen. Fails if a step's line never came."""
    proc = testbed.start(lab, list(args))
    try:
        for seen, action in steps:
            proc.wait_for(seen, 90)
            action()
    except BaseException:
        testbed.kill_group(proc.proc)
        raise
    return finish(proc)


def real_ssh(cfg: Path, host: str) -> subprocess.CompletedProcess[str]:
    """``ssh -F cfg host true`` as mpirun's ssh would make it (no prompts): what mpiwait's
    verdict is held against."""
    return subprocess.run(
        ["ssh", "-F", str(cfg), "-o", "BatchMode=yes", host, "true"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30,
    )  # fmt: skip


def ssh_config(
    lab: Lab,
    *,
    port: int | None = None,
    identity: Path | None = None,
    user: str | None = "root",
    strict: str = "no",
    known_hosts: str | Path = "/dev/null",
    before: str = "",
    name: str = "ssh_config",
) -> Path:
    """An ssh config like mpi-operator's images have, plus what the test needs."""
    lines = [before, "Host *"]
    if port is not None:
        lines.append(f"    Port {port}")
    if user is not None:
        lines.append(f"    User {user}")
    if identity is not None:
        lines.append(f"    IdentityFile {identity}")
    lines += [
        f"    StrictHostKeyChecking {strict}",
        f"    UserKnownHostsFile {known_hosts}",
        "    GlobalKnownHostsFile /dev/null",
    ]
    return lab.write(name, "\n".join(lines) + "\n", 0o600)


def logins(server: Sshd) -> int:
    return server.log().count("Accepted publickey for root")


def fingerprint(key: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{key}.pub"], capture_output=True, text=True, check=True
    ).stdout
    return out.split()[1]  # SHA256:...


@dataclass
class Cluster:
    key: Path
    port: int
    servers: list[Sshd]
    config: Path


def cluster(lab: Lab, *addresses: str, running: bool = True) -> Cluster:
    """sshds on ``addresses``, all on one port, all accepting one ed25519 key."""
    key = lab.key("id_ed25519")
    port = lab.free_port(*addresses)
    servers = [lab.sshd(a, port, authorized=[key], start=running) for a in addresses]
    return Cluster(key, port, servers, ssh_config(lab, port=port, identity=key))


def free_addr_port(lab: Lab, address: str = A) -> int:
    """A port nothing listens on (connections to it are refused)."""
    return lab.free_port(address)


# ---------------------------------------------------------------------------------------------
# 1-2: ready hosts, late hosts


def test_all_hosts_ready_without_command_exits_0(lab: Lab) -> None:
    c = cluster(lab, A, B, C)
    run = mpiwait(lab, "-F", str(c.config), "--hosts", f"{A},{B},{C}", "--timeout", FAR_DEADLINE)
    assert run.returncode == 0, run
    assert run.stdout == "", run
    assert "mpiwait: waiting for 3 hosts (--hosts (3 hosts)) to pass the ssh check" in run.stderr
    assert "all 3 hosts ready" in run.stderr, run
    assert run.elapsed < QUICK, run
    # Each host was really logged into, once.
    assert [logins(s) for s in c.servers] == [1, 1, 1]


def test_late_sshd_is_waited_for_then_command_runs_with_clean_stdout(lab: Lab) -> None:
    c = cluster(lab, A, B, running=False)
    c.servers[0].start()
    run = mpiwait_then(
        lab,
        "-F",
        str(c.config),
        "--hosts",
        f"{A},{B}",
        "--timeout",
        FAR_DEADLINE,
        "--retry-max",
        "0.5",
        "--",
        "sh",
        "-c",
        "echo command-output",
        steps=[(progress(B, "tcp refused"), c.servers[1].start)],  # B starts once seen down
    )
    assert run.returncode == 0, run
    # stdout is the COMMAND's alone: all of mpiwait's lines went to stderr.
    assert run.stdout == "command-output\n", run
    assert "all 2 hosts ready" in run.stderr, run
    assert run.elapsed < 40, run  # a hang guard only
    assert logins(c.servers[1]) == 1


# ---------------------------------------------------------------------------------------------
# 3-4: hosts that never get ready


def test_port_that_never_opens_times_out_with_124_and_command_not_run(lab: Lab) -> None:
    port = free_addr_port(lab)
    cfg = ssh_config(lab, port=port, identity=lab.key())
    marker = lab.path("command-ran")
    run = mpiwait(
        lab,
        "-F",
        str(cfg),
        "--hosts",
        A,
        "--timeout",
        "3",
        "--",
        "touch",
        str(marker),
    )
    assert run.returncode == 124, run
    assert not marker.exists(), "COMMAND ran although the wait failed"
    assert run.stdout == "", run
    assert 2.5 < run.elapsed < 30, run
    summary = [line for line in run.stderr.splitlines() if "timed out after" in line]
    assert len(summary) == 1, run
    assert re.search(rf"tcp refused \(1\): {re.escape(A)} \({re.escape(A)} port {port}", run.stderr)


def test_silent_listener_and_mute_sshd_stay_not_ready(lab: Lab) -> None:
    port = lab.free_port(A, B)
    silent = lab.silent(A, port)
    lab.banner_then_silence(B, port)
    cfg = ssh_config(lab, port=port, identity=lab.key())
    run = mpiwait(
        lab, "-F", str(cfg), "--hosts", f"{A},{B}", "--connect-timeout", "1", "--timeout", "3"
    )
    assert run.returncode == 124, run
    assert silent.accepted >= 1
    # Stable reasons: a port that never says a word, and one that stops after its banner.
    assert re.search(rf"^mpiwait:   ssh no-banner \(1\): {re.escape(A)} ", run.stderr, re.M), run
    assert re.search(rf"^mpiwait:   ssh handshake \(1\): {re.escape(B)} ", run.stderr, re.M), run
    assert "no SSH banner within 1s" in run.stderr
    assert run.elapsed < 30, run


def test_silent_listener_replaced_by_sshd_while_waiting(lab: Lab) -> None:
    key = lab.key()
    port = lab.free_port(A)
    silent = lab.silent(A, port)
    server = lab.sshd(A, port, authorized=[key], start=False)

    def swap() -> None:
        silent.stop()
        server.start()

    cfg = ssh_config(lab, port=port, identity=key)
    run = mpiwait_then(
        lab,
        "-F",
        str(cfg),
        "--hosts",
        A,
        "--connect-timeout",
        "1",
        "--retry-max",
        "0.5",
        "--timeout",
        FAR_DEADLINE,
        steps=[(progress(A, "ssh no-banner"), swap)],
    )
    assert run.returncode == 0, run
    assert "ready" in run.stderr.splitlines()[-1], run
    assert logins(server) == 1
    assert run.elapsed < 40, run


# ---------------------------------------------------------------------------------------------
# 5, 10, 12: keys


def test_wrong_key_exits_3_quickly_naming_host_user_and_key(lab: Lab) -> None:
    c = cluster(lab, A)
    wrong = lab.key("id_wrong")
    run = mpiwait(
        lab, "-F", str(c.config), "-i", str(wrong), "--hosts", A, "--timeout", FAR_DEADLINE
    )
    assert run.returncode == 3, run
    assert run.elapsed < QUICK, run
    assert f"root@{A}" in run.stderr, run
    assert str(wrong) in run.stderr, run
    assert fingerprint(wrong) in run.stderr, run
    assert "mpiwait: hint: " in run.stderr, run
    assert "Permission denied (publickey)" in run.stderr, run


def test_mpi_operator_key_ecdsa_p521_pem_named_id_rsa(lab: Lab) -> None:
    key = lab.key("id_rsa", "ecdsa521", pem=True)
    assert key.read_text().startswith("-----BEGIN EC PRIVATE KEY-----")
    port = lab.free_port(A)
    server = lab.sshd(A, port, authorized=[key])
    cfg = ssh_config(lab, port=port, identity=key)
    run = mpiwait(lab, "-F", str(cfg), "--hosts", A, "--timeout", FAR_DEADLINE)
    assert run.returncode == 0, run
    assert logins(server) == 1
    assert "Accepted publickey for root" in server.log() and "ECDSA" in server.log()


@pytest.mark.parametrize("problem", ["passphrase", "passphrase-pem", "mode-0644", "missing"])
def test_unusable_identity_file_exits_3_before_waiting(lab: Lab, problem: str) -> None:
    c = cluster(lab, A)
    if problem == "passphrase":
        key = lab.key("id_locked", passphrase="correct horse")
        expect = "passphrase"
    elif problem == "passphrase-pem":  # as mpi-operator's key would look, but encrypted
        key = lab.key("id_rsa", "ecdsa521", pem=True, passphrase="correct horse")
        expect = "passphrase"
    elif problem == "mode-0644":
        key = lab.key("id_open", mode=0o644)
        expect = f"chmod 600 {key}"
    else:
        key = lab.path("keys/id_absent")
        expect = "does not exist"
    run = mpiwait(lab, "-F", str(c.config), "-i", str(key), "--hosts", A, "--timeout", FAR_DEADLINE)
    assert run.returncode == 3, run
    assert run.elapsed < QUICK, run
    assert expect in run.stderr, run
    assert str(key) in run.stderr, run
    assert logins(c.servers[0]) == 0


# ---------------------------------------------------------------------------------------------
# 6-7: exec and the worker role


ODD_ARGS = ["a b", '"double"', "'single'", "--", "-x", "$HOME", "", "*", "tab\there"]


@pytest.mark.parametrize("separator", [True, False], ids=["with--", "without--"])
def test_command_replaces_the_process_with_arguments_untouched(lab: Lab, separator: bool) -> None:
    c = cluster(lab, A)
    script = 'echo "pid=$$"; for a in "$@"; do printf "<%s>\\n" "$a"; done'
    command = ["sh", "-c", script, "sh", *ODD_ARGS]
    args = ["-F", str(c.config), "--hosts", A, "--timeout", FAR_DEADLINE]
    run = mpiwait(lab, *args, *(["--"] if separator else []), *command)
    assert run.returncode == 0, run
    lines = run.stdout.splitlines()
    assert lines[0] == f"pid={run.pid}", run  # exec, not a child: the same process
    assert lines[1:] == [f"<{a}>" for a in ODD_ARGS], run
    assert "ready" in run.stderr


def test_command_exit_status_is_the_process_status(lab: Lab) -> None:
    c = cluster(lab, A)
    run = mpiwait(lab, "-F", str(c.config), "--hosts", A, "--", "sh", "-c", "exit 42")
    assert run.returncode == 42, run


def test_worker_role_execs_at_once_without_paramiko(lab: Lab) -> None:
    env = testbed.mpiwait_env(K_MPI_JOB_ROLE="worker")
    run = mpiwait(
        lab,
        "--hosts",
        "unreachable.invalid",
        "--timeout",
        FAR_DEADLINE,
        "--",
        "sh",
        "-c",
        'echo "hi $$"',
        env=env,
        python=["-X", "importtime"],
    )
    assert run.returncode == 0, run
    assert run.stdout == f"hi {run.pid}\n", run
    assert run.elapsed < QUICK, run
    imported = [line for line in run.stderr.splitlines() if line.startswith("import time:")]
    assert any("mpiwait.cli" in line for line in imported), run  # -X importtime did report
    assert not [line for line in imported if "paramiko" in line], run
    assert "waiting for" not in run.stderr


def test_worker_role_without_command_exits_0(lab: Lab) -> None:
    run = mpiwait(
        lab, "--hosts", "unreachable.invalid", env=testbed.mpiwait_env(K_MPI_JOB_ROLE="worker")
    )
    assert run.returncode == 0, run
    assert "K_MPI_JOB_ROLE=worker" in run.stderr, run
    assert run.elapsed < QUICK, run


def test_worker_role_dry_run_prints_what_it_would_exec(lab: Lab) -> None:
    marker = lab.path("ran")
    env = testbed.mpiwait_env(K_MPI_JOB_ROLE="worker")
    run = mpiwait(lab, "--dry-run", "--", "touch", str(marker), "it's", env=env)
    assert run.returncode == 0, run
    assert run.stdout == (
        f"# K_MPI_JOB_ROLE=worker: not waiting for any host\nexec touch {marker} 'it'\"'\"'s'\n"
    ), run
    assert not marker.exists()
    run = mpiwait(lab, "--dry-run", env=env)
    assert (run.returncode, run.stdout.splitlines()[-1]) == (0, "exit 0"), run


# ---------------------------------------------------------------------------------------------
# 8-9: configuration from the environment and from ssh config


def test_environment_configures_every_option(lab: Lab) -> None:
    c = cluster(lab, A, B)
    bare = ssh_config(lab, name="bare_config")  # no port, no key: those come from MPIWAIT_*
    env = testbed.mpiwait_env(
        MPIWAIT_HOSTS=f"{A},{B}",
        MPIWAIT_PORT=str(c.port),
        MPIWAIT_USER="root",
        MPIWAIT_IDENTITY_FILE=f"{lab.key('id_other')} {c.key}",
        MPIWAIT_SSH_CONFIG=str(bare),
        MPIWAIT_TIMEOUT="37",
        MPIWAIT_CONNECT_TIMEOUT="4",
        MPIWAIT_CHECK="ssh",
    )
    run = mpiwait(lab, env=env)
    assert run.returncode == 0, run
    assert "waiting for 2 hosts (--hosts (2 hosts)) to pass the ssh check; deadline 37s" in (
        run.stderr
    ), run
    assert "all 2 hosts ready" in run.stderr
    assert [logins(s) for s in c.servers] == [1, 1]

    env["MPIWAIT_DRY_RUN"] = "1"
    dry = mpiwait(lab, env=env)
    assert dry.returncode == 0, dry
    assert f"{A} address={A} port={c.port} user=root" in dry.stdout, dry
    assert "connect_timeout=4" in dry.stdout, dry


def test_flags_win_over_environment(lab: Lab) -> None:
    c = cluster(lab, A)
    closed = lab.free_port(A)
    env = testbed.mpiwait_env(
        MPIWAIT_HOSTS="unreachable.invalid",
        MPIWAIT_PORT=str(closed),
        MPIWAIT_IDENTITY_FILE=str(lab.path("keys/id_absent")),
        MPIWAIT_TIMEOUT="1",
        MPIWAIT_SSH_CONFIG=str(lab.path("no-such-config")),
    )
    run = mpiwait(
        lab,
        "-F",
        str(c.config),
        "--hosts",
        A,
        "-p",
        str(c.port),
        "-i",
        str(c.key),
        "--timeout",
        "45",
        env=env,
    )
    assert run.returncode == 0, run
    assert "deadline 45s" in run.stderr, run

    # And the environment alone, with a port nothing listens on, really is used.
    env.update(MPIWAIT_HOSTS=A, MPIWAIT_SSH_CONFIG=str(c.config))
    env.pop("MPIWAIT_IDENTITY_FILE")
    timed_out = mpiwait(lab, env=env)
    assert timed_out.returncode == 124, timed_out
    assert f"{A} port {closed}: refused" in timed_out.stderr, timed_out


def test_ssh_config_aliases_supply_address_port_user_and_key(lab: Lab) -> None:
    key = lab.key("id_rsa", "ecdsa521", pem=True)
    port_a, port_b = lab.free_port(A), lab.free_port(B)
    a = lab.sshd(A, port_a, authorized=[key])
    b = lab.sshd(B, port_b, authorized=[key])
    # mpi-operator style: `Host *` with the port and a lax host key policy, here plus aliases.
    cfg = ssh_config(
        lab,
        port=port_b,
        identity=key,
        before=f"Host launcher-worker-0\n    HostName {A}\n    Port {port_a}\n"
        f"Host launcher-worker-1\n    HostName {B}\n",
    )
    run = mpiwait(
        lab, "-F", str(cfg), "--hosts", "launcher-worker-0,launcher-worker-1", "--timeout", "30"
    )
    assert run.returncode == 0, run
    assert "all 2 hosts ready" in run.stderr
    assert (logins(a), logins(b)) == (1, 1)


# ---------------------------------------------------------------------------------------------
# 11: host key policy


HOST_KEY_CASES = {
    # policy, what known_hosts lists for the server, exit status, text on stderr
    "yes-listed": ("yes", "right", 0, "ready"),
    "yes-listed-hashed": ("yes", "right-hashed", 0, "ready"),
    "yes-other-key": ("yes", "other", 3, "does not match"),
    "yes-empty": ("yes", "empty", 3, "not in known_hosts"),
    "accept-new-other-key": ("accept-new", "other", 3, "does not match"),
    "accept-new-empty": ("accept-new", "empty", 0, "ready"),
    "no-other-key": ("no", "other", 0, "ready"),
}


@pytest.mark.parametrize("case", list(HOST_KEY_CASES))
def test_host_key_policy(lab: Lab, case: str) -> None:
    policy, listed, status, text = HOST_KEY_CASES[case]
    c = cluster(lab, A)
    server = c.servers[0]
    known = lab.path("known_hosts")
    if listed.startswith("right"):
        known.write_text(server.host_key_line() + "\n")
        assert server.host_key_line().startswith(f"[{A}]:{c.port} ssh-ed25519 ")
        if listed == "right-hashed":
            subprocess.run(["ssh-keygen", "-H", "-f", str(known)], capture_output=True, check=True)
            assert known.read_text().startswith("|1|")
    elif listed == "other":
        other = testbed.keygen(lab.path("other_host_key"), comment="other")
        lab.keys.append(other)
        kind, blob = testbed.public_key(other).split()[:2]
        known.write_text(f"[{A}]:{c.port} {kind} {blob}\n")
    else:
        known.write_text("")
    before = known.read_text()
    cfg = ssh_config(lab, port=c.port, identity=c.key, strict=policy, known_hosts=known)
    run = mpiwait(lab, "-F", str(cfg), "--hosts", A, "--timeout", FAR_DEADLINE)
    assert run.returncode == status, run
    assert text in run.stderr, run
    assert run.elapsed < QUICK, run
    assert known.read_text() == before, "mpiwait must never write known_hosts"
    if status == 3:
        assert "mpiwait: hint: " in run.stderr, run
        assert logins(server) == 0  # refused before authenticating


@pytest.mark.parametrize(
    ("policy", "listed", "status", "text"),
    [
        ("yes", "its-rsa-key", 0, "ready"),
        ("accept-new", "other-rsa-key", 3, "does not match"),
    ],
)
def test_host_key_type_listed_in_known_hosts_is_the_one_checked(
    lab: Lab, policy: str, listed: str, status: int, text: str
) -> None:
    """A server with ed25519 and RSA host keys, known_hosts listing only an RSA key: as ssh
    does, the probe must ask for the RSA key and check it (not take the ed25519 one)."""
    key = lab.key()
    rsa = lab.key("host_rsa", "rsa")
    port = lab.free_port(A)
    lab.sshd(A, port, authorized=[key], extra_config=f"HostKey {rsa}\n")
    shown = rsa if listed == "its-rsa-key" else lab.key("other_rsa", "rsa")
    kind, blob = testbed.public_key(shown).split()[:2]
    known = lab.write("known_hosts", f"[{A}]:{port} {kind} {blob}\n")
    cfg = ssh_config(lab, port=port, identity=key, strict=policy, known_hosts=known)
    ssh = real_ssh(cfg, A)
    assert (ssh.returncode == 0) == (status == 0), ssh.stderr  # what mpirun's ssh will do
    run = mpiwait(lab, "-F", str(cfg), "--hosts", A, "--timeout", FAR_DEADLINE)
    assert run.returncode == status, run
    assert text in run.stderr, run


@pytest.mark.parametrize(
    ("listed_as", "alias"),
    [("alias.mpi", "Alias.MPI"), ("{addr}:{port}", None)],
    ids=["HostKeyAlias", "address-and-port"],
)
def test_known_hosts_name_is_ssh_s(lab: Lab, listed_as: str, alias: str | None) -> None:
    """ssh looks the host key up under HostKeyAlias (lowercased, no port) when set, else under
    [address]:port; under StrictHostKeyChecking yes mpiwait must find the same entry."""
    c = cluster(lab, A)
    server = c.servers[0]
    _, kind, blob = server.host_key_line().split()[:3]
    name = listed_as.format(addr=f"[{A}]", port=c.port)
    known = lab.write("known_hosts", f"{name} {kind} {blob}\n")
    before = f"Host *\n    HostKeyAlias {alias}\n" if alias else ""
    cfg = ssh_config(
        lab, port=c.port, identity=c.key, strict="yes", known_hosts=known, before=before
    )
    ssh = real_ssh(cfg, A)
    assert ssh.returncode == 0, ssh.stderr  # what mpirun's ssh does
    run = mpiwait(lab, "-F", str(cfg), "--hosts", A, "--timeout", FAR_DEADLINE)
    assert run.returncode == 0, run


# ---------------------------------------------------------------------------------------------
# 13: --remote-command


def test_remote_command_true_is_ready(lab: Lab) -> None:
    c = cluster(lab, A, B)
    run = mpiwait(lab, "-F", str(c.config), "--hosts", f"{A},{B}", "--remote-command", "true")
    assert run.returncode == 0, run
    assert [s.log().count("Starting session: command for root") for s in c.servers] == [1, 1]


def test_failing_remote_command_keeps_host_not_ready(lab: Lab) -> None:
    c = cluster(lab, A)
    run = mpiwait(
        lab,
        "-F",
        str(c.config),
        "--hosts",
        A,
        "--remote-command",
        "exit 7",
        "--timeout",
        "2",
    )
    assert run.returncode == 124, run
    assert re.search(r"ssh remote-command \(1\): 127\.0\.0\.2 \(.*status 7", run.stderr), run


def test_remote_command_waits_for_a_file_that_appears_later(lab: Lab) -> None:
    c = cluster(lab, A)
    flag = lab.path("worker-is-set-up")
    run = mpiwait_then(
        lab,
        "-F",
        str(c.config),
        "--hosts",
        A,
        "--remote-command",
        f"test -e {flag}",
        "--timeout",
        FAR_DEADLINE,
        "--retry-max",
        "0.5",
        "--",
        "echo",
        "launched",
        steps=[(progress(A, "ssh remote-command"), flag.touch)],  # only once seen not ready
    )
    assert run.returncode == 0, run
    assert run.stdout == "launched\n", run


# ---------------------------------------------------------------------------------------------
# 14: signals


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["TERM", "INT"]
)
def test_signal_while_waiting_ends_with_one_summary(lab: Lab, signum: int, status: int) -> None:
    port = lab.free_port(A, B)
    cfg = ssh_config(lab, port=port, identity=lab.key())
    proc = testbed.start(lab, ["-F", str(cfg), "--hosts", f"{A},{B}", "--timeout", FAR_DEADLINE])
    try:
        # Both hosts were probed and reported down before the signal; the start line came
        # first, so the handlers were in place by then.
        proc.wait_for(progress(A, "tcp refused"))
        proc.wait_for(progress(B, "tcp refused"))
    except BaseException:
        testbed.kill_group(proc.proc)
        raise
    first = proc.lines()[0]
    assert "waiting for 2 hosts" in first, first
    sent = time.monotonic()
    proc.proc.send_signal(signum)
    run = finish(proc)
    assert time.monotonic() - sent < 5, run
    assert run.returncode == status, run
    name = signal.Signals(signum).name
    summaries = [line for line in run.stderr.splitlines() if "interrupted by" in line]
    assert len(summaries) == 1, run
    assert f"interrupted by {name}" in summaries[0]
    assert "2 of 2 hosts not ready" in summaries[0], run
    assert "tcp refused (2)" in run.stderr, run


# ---------------------------------------------------------------------------------------------
# 15-17: output


def test_dry_run_prints_the_plan_without_connecting(lab: Lab) -> None:
    key = lab.key("id_rsa", "ecdsa521", pem=True)
    port = lab.free_port(A, B)
    listeners = [lab.silent(A, port), lab.silent(B, port)]
    cfg = ssh_config(
        lab, port=port, identity=key, before=f"Host worker-0\n    HostName {A}\n    User mpiuser\n"
    )
    run = mpiwait(lab, "-F", str(cfg), "--hosts", f"worker-0,{B}", "--dry-run")
    assert run.returncode == 0, run
    lines = run.stdout.splitlines()
    assert f"worker-0 address={A} port={port} user=mpiuser identity={key} " in lines[1] + " ", run
    assert f"{B} address={B} port={port} user=root identity={key} " in lines[2] + " ", run
    assert len(lines) == 3, run
    assert [listener.accepted for listener in listeners] == [0, 0]


def test_json_log_lines_all_parse(lab: Lab) -> None:
    c = cluster(lab, A, B, running=False)
    c.servers[0].start()

    # a JSON record of B at the tcp stage, whatever the order of its keys
    fields = {"event": "host", "host": B, "stage": "tcp"}
    b_down = "".join(rf'(?=.*"{k}": "{re.escape(v)}")' for k, v in fields.items())

    run = mpiwait_then(
        lab,
        "-F",
        str(c.config),
        "--hosts",
        f"{A},{B}",
        "--log-format",
        "json",
        "--retry-max",
        "0.5",
        "--",
        "true",
        steps=[(b_down, c.servers[1].start)],
    )
    assert run.returncode == 0, run
    records = [json.loads(line) for line in run.stderr.splitlines()]
    events = [r["event"] for r in records]
    assert events[0] == "start" and events[-1] == "result", events
    assert events.count("result") == 1
    assert records[0]["hosts"] == [A, B]
    assert records[-1]["end"] == "ready"
    assert any(r["event"] == "host" and r["host"] == B and r["stage"] == "tcp" for r in records)
    assert {r["host"] for r in records if r["event"] == "ready"} == {A, B}


def test_json_log_on_permanent_failure(lab: Lab) -> None:
    c = cluster(lab, A)
    wrong = lab.key("id_wrong")
    run = mpiwait(lab, "-F", str(c.config), "-i", str(wrong), "--hosts", A, "--log-format", "json")
    assert run.returncode == 3, run
    records = [json.loads(line) for line in run.stderr.splitlines()]
    assert records[-1]["event"] == "result" and records[-1]["end"] == "permanent", records
    assert records[-1]["failed"]["host"] == A
    assert records[-1]["hint"]


def test_json_log_on_unusable_key(lab: Lab) -> None:
    c = cluster(lab, A)
    missing = lab.path("keys/id_absent")
    run = mpiwait(
        lab, "-F", str(c.config), "-i", str(missing), "--hosts", A, "--log-format", "json"
    )
    assert run.returncode == 3, run
    records = [json.loads(line) for line in run.stderr.splitlines()]
    assert records and records[-1]["event"] == "error", records
    assert "does not exist" in records[-1]["message"]


def test_termination_log_given_explicitly_is_written_even_when_absent(lab: Lab) -> None:
    port = lab.free_port(A)
    cfg = ssh_config(lab, port=port, identity=lab.key())
    existing = lab.write("termination-log", "")
    absent = lab.path("absent-dir-log")
    procs = [
        testbed.start(
            lab, ["-F", str(cfg), "--hosts", A, "--timeout", "1.5", "--termination-log", str(p)]
        )
        for p in (existing, absent)
    ]
    runs = [finish(p) for p in procs]
    assert [r.returncode for r in runs] == [124, 124], runs[0]
    message = existing.read_text()
    assert message.startswith("timed out after"), message
    assert f"tcp refused (1): {A}" in message, message
    # Named by the user (flag or MPIWAIT_TERMINATION_LOG): made for them, same content.
    assert absent.read_text() == message


# ---------------------------------------------------------------------------------------------
# 18: COMMAND that cannot run


def test_command_not_found_or_not_executable_fails_before_waiting(lab: Lab) -> None:
    port = lab.free_port(A)
    cfg = ssh_config(lab, port=port, identity=lab.key())
    args = ["-F", str(cfg), "--hosts", A, "--timeout", FAR_DEADLINE, "--"]
    not_exec = lab.write("bin/not-executable", "#!/bin/sh\necho no\n", 0o644)
    procs = {
        "missing": testbed.start(lab, [*args, "no-such-command-mpiwait-test", "x"]),
        "missing-path": testbed.start(lab, [*args, str(lab.path("bin/absent"))]),
        "not-exec-path": testbed.start(lab, [*args, str(not_exec)]),
        "not-exec-on-PATH": testbed.start(
            lab,
            [*args, "not-executable"],
            env=testbed.mpiwait_env(PATH=f"{not_exec.parent}:{os.environ['PATH']}"),
        ),
    }
    runs = {name: finish(proc) for name, proc in procs.items()}
    expected = {"missing": 127, "missing-path": 127, "not-exec-path": 126, "not-exec-on-PATH": 126}
    for name, run in runs.items():
        assert run.returncode == expected[name], run
        assert run.elapsed < QUICK, run
        assert "waiting for" not in run.stderr, run
        text = "command not found" if expected[name] == 127 else "not executable"
        assert text in run.stderr, run


# ---------------------------------------------------------------------------------------------
# 19: host files


def test_open_mpi_hostfile_by_ip(lab: Lab) -> None:
    c = cluster(lab, A, B, C)
    hostfile = lab.write("hostfile", f"# Open MPI\n{A} slots=2\n{B} slots=2\n{C} slots=2\n")
    discover = lab.write("discover_hosts.sh", "#!/bin/sh\n", 0o555)
    run = mpiwait(
        lab,
        "-F",
        str(c.config),
        "--hostfile",
        str(hostfile),
        "--discover-hosts",
        str(discover),
        "--timeout",
        FAR_DEADLINE,
    )
    assert run.returncode == 0, run
    assert f"{hostfile} (3 hosts)" in run.stderr, run
    assert "all 3 hosts ready" in run.stderr
    assert [logins(s) for s in c.servers] == [1, 1, 1]


def test_discover_hosts_that_gains_a_host_while_waiting(lab: Lab) -> None:
    c = cluster(lab, A, B, running=False)
    c.servers[1].start()  # up from the start, but not listed yet
    hostfile = lab.write("hostfile", "")
    discover = lab.write("discover_hosts.sh", f"#!/bin/sh\necho {A}\n", 0o555)

    def grow() -> None:  # as the kubelet swaps a ConfigMap file: a new file, renamed over
        new = lab.write("discover_hosts.sh.new", f"#!/bin/sh\necho {A}\necho {B}\n", 0o555)
        new.replace(discover)

    run = mpiwait_then(
        lab,
        "-F",
        str(c.config),
        "--hostfile",
        str(hostfile),
        "--discover-hosts",
        str(discover),
        "--timeout",
        FAR_DEADLINE,
        "--retry-max",
        "0.5",
        # A (down) keeps the wait going while the list grows; it comes up once B was added.
        steps=[
            (progress(A, "tcp refused"), grow),
            (rf"1 more hosts? listed: {re.escape(B)} \(2 in all\)", c.servers[0].start),
        ],
    )
    assert run.returncode == 0, run
    assert "all 2 hosts ready" in run.stderr
    assert [logins(s) for s in c.servers] == [1, 1]
