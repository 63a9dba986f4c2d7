"""mpiwait.launch.command: role, COMMAND lookup (127/126 like a shell), ssh-client warning, exec.

Nothing here execs successfully in-process: every in-process exec_command call is one that
fails before the kernel replaces the process. Real execs run in a subprocess.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import testbed

from mpiwait.errors import ExitCode, LaunchError
from mpiwait.launch.command import (
    ROLE_VARIABLE,
    check_remote_agent,
    exec_command,
    find_command,
    worker_role,
)
from mpiwait.launch.launchers import launcher


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _plain(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(0o644)
    return path


def _worker_env() -> dict[str, str]:
    """A worker pod's: this environment minus mpiwait's settings, plus the operator's role."""
    return testbed.mpiwait_env(K_MPI_JOB_ROLE="worker")


# --- worker_role -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({ROLE_VARIABLE: ""}, None),
        ({ROLE_VARIABLE: "launcher"}, None),
        ({ROLE_VARIABLE: "worker"}, "worker"),
        ({ROLE_VARIABLE: "evaluator"}, "evaluator"),
        ({"OTHER": "worker"}, None),
    ],
)
def test_worker_role(environ: dict[str, str], expected: str | None) -> None:
    assert worker_role(environ) == expected


def test_role_variable_is_mpi_operators() -> None:
    assert ROLE_VARIABLE == "K_MPI_JOB_ROLE"


# --- find_command: a name looked up on PATH -----------------------------------------------


def test_find_command_on_path(tmp_path: Path) -> None:
    exe = _executable(tmp_path / "mpirun")
    assert find_command(["mpirun", "-np", "4"], path=str(tmp_path)) == str(exe)


def test_find_command_on_the_real_path() -> None:
    assert os.path.basename(find_command(["sh", "-c", "true"])) == "sh"


def test_find_command_takes_the_first_executable_on_path(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _executable(first / "tool")
    _executable(second / "tool")
    path = os.pathsep.join([str(first), str(second)])
    assert find_command(["tool"], path=path) == str(first / "tool")


def test_find_command_skips_a_non_executable_file_before_an_executable_one(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _plain(first / "tool")
    _executable(second / "tool")
    path = os.pathsep.join([str(first), str(second)])
    assert find_command(["tool"], path=path) == str(second / "tool")


def test_find_command_not_found_is_127(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as info:
        find_command(["no-such-mpirun"], path=str(tmp_path))
    assert info.value.exit_code == ExitCode.NOT_FOUND == 127
    assert "command not found: no-such-mpirun" in info.value.message
    assert str(tmp_path) in info.value.message  # the PATH searched


def test_find_command_without_exec_bit_is_126(tmp_path: Path) -> None:
    script = _plain(tmp_path / "train.sh")
    with pytest.raises(LaunchError) as info:
        find_command(["train.sh"], path=str(tmp_path))
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE == 126
    assert info.value.message == f"command is not executable: {script}"


def test_find_command_directory_on_path_is_not_found(tmp_path: Path) -> None:
    # Like a shell: a directory of that name on PATH is no command at all.
    (tmp_path / "tool").mkdir()
    with pytest.raises(LaunchError) as info:
        find_command(["tool"], path=str(tmp_path))
    assert info.value.exit_code == ExitCode.NOT_FOUND


def test_find_command_empty_name_is_127() -> None:
    with pytest.raises(LaunchError) as info:
        find_command(["", "arg"])
    assert info.value.exit_code == ExitCode.NOT_FOUND
    assert "empty" in info.value.message


# --- find_command: a name with a slash is used as is ---------------------------------------


def test_find_command_absolute_path(tmp_path: Path) -> None:
    exe = _executable(tmp_path / "launch")
    # PATH is not consulted for a name with a slash.
    assert find_command([str(exe)], path="/nonexistent") == str(exe)


def test_find_command_absolute_path_missing_is_127(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "mpirun"
    with pytest.raises(LaunchError) as info:
        find_command([str(missing)])
    assert info.value.exit_code == ExitCode.NOT_FOUND
    assert info.value.message == f"command not found: {missing}"


def test_find_command_absolute_path_without_exec_bit_is_126(tmp_path: Path) -> None:
    script = _plain(tmp_path / "run.sh")
    with pytest.raises(LaunchError) as info:
        find_command([str(script)])
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE
    assert info.value.message == f"command is not executable: {script}"


def test_find_command_absolute_directory_is_126(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as info:
        find_command([str(tmp_path)])
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE


def test_find_command_relative_path_with_slash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _executable(tmp_path / "run")
    _plain(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    assert find_command(["./run"], path="/nonexistent") == "./run"
    with pytest.raises(LaunchError) as info:
        find_command(["./data"])
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE
    with pytest.raises(LaunchError) as info:
        find_command(["./missing"])
    assert info.value.exit_code == ExitCode.NOT_FOUND


def test_find_command_broken_symlink_is_127(tmp_path: Path) -> None:
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(LaunchError) as info:
        find_command([str(link)])
    assert info.value.exit_code == ExitCode.NOT_FOUND


# --- the ssh client an MPI launcher needs (check_remote_agent) -----------------------------


@pytest.mark.parametrize(
    "launcher", ["mpirun", "/opt/openmpi/bin/mpirun", "mpiexec.hydra", "horovodrun"]
)
def test_missing_ssh_client_for_a_launcher(tmp_path: Path, launcher: str) -> None:
    with pytest.raises(LaunchError) as info:
        check_remote_agent([launcher, "-np", "2"], {}, path=str(tmp_path))
    assert info.value.exit_code == ExitCode.NOT_FOUND
    _executable(tmp_path / "ssh")
    assert check_remote_agent([launcher, "-np", "2"], {}, path=str(tmp_path)) is None


@pytest.mark.parametrize("command", ["python", "/bin/sh", "mpirun-wrapper", "echo"])
def test_missing_ssh_client_ignores_other_commands(tmp_path: Path, command: str) -> None:
    assert check_remote_agent([command], {}, path=str(tmp_path)) is None


NO_ENTRY = testbed.unnamed_uid()


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["mpirun", "-np", "2"], {}),
        (["/opt/intel/bin/mpiexec.hydra"], {}),
        (["horovodrun", "-np", "2"], {}),
        (["mpirun"], {"OMPI_MCA_plm_rsh_agent": "ssh -F /etc/mpi/ssh_config"}),
        (["mpirun", "--mca", "plm_rsh_agent", "nosuch:ssh"], {}),
        (["mpiexec"], {"HYDRA_LAUNCHER": "ssh"}),
    ],
)
def test_an_ssh_launch_at_a_uid_without_passwd_entry_is_126(
    tmp_path: Path, argv: list[str], environ: dict[str, str]
) -> None:
    # The lookup is the real getpwuid of a uid this machine has no entry for.
    _executable(tmp_path / "ssh")
    with pytest.raises(LaunchError) as info:
        check_remote_agent(argv, environ, path=str(tmp_path), uid=NO_ENTRY)
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE
    assert f"No user exists for uid {NO_ENTRY}" in info.value.message
    assert "\n" not in info.value.message
    assert "passwd" in (info.value.hint or "") and "initContainer" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["mpirun"], {"OMPI_MCA_plm_rsh_agent": "kubexec.sh"}),  # not ssh: no passwd needed
        (["mpiexec", "-launcher", "fork"], {}),
        (["mpirun"], {"SLURM_JOB_ID": "7"}),  # the scheduler starts the processes
        (["sshd", "-D"], {}),  # no MPI launch at all
        (["python", "train.py"], {}),
    ],
)
def test_a_launch_without_ssh_at_a_uid_without_passwd_entry_is_allowed(
    tmp_path: Path, argv: list[str], environ: dict[str, str]
) -> None:
    _executable(tmp_path / "ssh")
    _executable(tmp_path / "kubexec.sh")
    assert check_remote_agent(argv, environ, path=str(tmp_path), uid=NO_ENTRY) is None


def test_an_ssh_launch_at_a_uid_with_a_passwd_entry_is_allowed(tmp_path: Path) -> None:
    _executable(tmp_path / "ssh")
    assert check_remote_agent(["mpirun"], {}, path=str(tmp_path), uid=0) is None


@pytest.mark.parametrize(
    ("command", "own", "ssh"),
    [
        ("mpirun", True, True),
        ("/usr/bin/mpiexec.hydra", True, True),
        ("prterun", True, True),
        ("mpiexec.slurm-like", True, True),  # any mpiexec.*: its install tells the MPI
        ("horovodrun", False, True),  # builds mpirun's command line, ssh's `true` first
        ("deepspeed", False, False),  # mpirun, mpiexec or pdsh: by --launcher
    ],
)
def test_the_launcher_table(command: str, own: bool, ssh: bool) -> None:
    entry = launcher(command)
    assert entry is not None and (entry.own, entry.ssh) == (own, ssh)


@pytest.mark.parametrize("command", ["bash", "python3", "/bin/sh", "sshd", "mpirun-wrapper"])
def test_any_other_command_is_a_wrapper(command: str) -> None:
    assert launcher(command) is None


# --- exec_command (only failing execs in-process) ------------------------------------------


def test_exec_missing_absolute_path_is_127(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-binary"
    with pytest.raises(LaunchError) as info:
        exec_command([str(missing), "arg"])
    assert info.value.exit_code == ExitCode.NOT_FOUND
    assert info.value.message == f"command not found: {missing}"


def test_exec_missing_name_is_127(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LaunchError) as info:
        exec_command(["mpiwait-no-such-command"])
    assert info.value.exit_code == ExitCode.NOT_FOUND


def test_exec_without_exec_bit_is_126(tmp_path: Path) -> None:
    script = _plain(tmp_path / "run.sh")
    with pytest.raises(LaunchError) as info:
        exec_command([str(script)])
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE
    assert info.value.message == f"command is not executable: {script}"


def test_exec_directory_is_126(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as info:
        exec_command([str(tmp_path)])
    assert info.value.exit_code == ExitCode.NOT_EXECUTABLE


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (FileNotFoundError(errno.ENOENT, "No such file"), 127, "command not found: x"),
        (PermissionError(errno.EACCES, "Permission denied"), 126, "command is not executable: x"),
        (OSError(errno.ENOEXEC, "Exec format error"), 126, "cannot run x: Exec format error"),
        (OSError(errno.E2BIG, "Argument list too long"), 126, "cannot run x: Argument list"),
    ],
)
def test_exec_error_mapping(
    monkeypatch: pytest.MonkeyPatch, error: OSError, code: int, message: str
) -> None:
    calls: list[tuple[str, list[str]]] = []

    def fake_execvp(file: str, args: list[str]) -> None:
        calls.append((file, args))
        raise error

    monkeypatch.setattr(os, "execvp", fake_execvp)
    with pytest.raises(LaunchError) as info:
        exec_command(("x", "-np", "4"))
    assert calls == [("x", ["x", "-np", "4"])]  # argv passed through whole, as a list
    assert info.value.exit_code == code
    assert info.value.message.startswith(message)
    assert info.value.__cause__ is None  # `from None`: no chained traceback to show


# --- real exec, in a subprocess -------------------------------------------------------------


def test_worker_exec_keeps_the_pid() -> None:
    # execvp replaces mpiwait: the COMMAND runs as the very process that was started.
    proc = testbed.run(None, ["sh", "-c", "echo $$"], env=_worker_env(), timeout=30)
    assert proc.returncode == 0, proc
    assert int(proc.stdout.strip()) == proc.pid, proc


def test_worker_exec_returns_the_commands_status() -> None:
    proc = testbed.run(None, ["sh", "-c", "exit 7"], env=_worker_env(), timeout=30)
    assert proc.returncode == 7, proc


def test_worker_exec_of_a_file_in_no_known_format_is_126(tmp_path: Path) -> None:
    # ENOEXEC: execvp (unlike a shell) does not fall back to sh; we say so in one line.
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01\x02\x03not a program\n")
    garbage.chmod(0o755)
    proc = testbed.run(None, [str(garbage)], env=_worker_env(), timeout=30)
    assert proc.returncode == 126, proc
    assert proc.stderr.splitlines() == [f"mpiwait: error: cannot run {garbage}: Exec format error"]
