"""Real OpenSSH servers on loopback addresses, for integration tests (stdlib only).

Each server is ``/usr/sbin/sshd -D -e`` on ``127.0.0.x:PORT`` with a config, host key and
authorized_keys of its own in a temporary directory; it is our child, so stopping it is a kill.
Next to it, two fakes for hosts that are up but not serving SSH yet: a *silent listener*
(accepts TCP, never says a word) and a *banner-then-silence* listener (sends an SSH banner,
then nothing), plus key helpers (ed25519, ECDSA P-521 PEM in a file named ``id_rsa`` as
mpi-operator writes it, passphrase-protected keys).

Everything is owned by a ``Lab``; ``Lab.close()`` stops every server, listener and timer it
made, whatever state they are in, so a failing test leaves nothing running::

    with Lab(tmp_path) as lab:
        key = lab.key("id_ed25519")
        port = lab.free_port("127.0.0.2", "127.0.0.3")
        a = lab.sshd("127.0.0.2", port, authorized=[key])
        b = lab.sshd("127.0.0.3", port, authorized=[key], start=False)
        b.start_later(3.0)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ._proc import key_secret_lines
from ._sys import SSHD_KEY_LOGIN_ONLY, openssh_version

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "ssh-keygen"
# How long a server may take to come up before we call it broken (a loaded CI machine).
START_TIMEOUT = 10.0


class LoopbackError(RuntimeError):
    """A server could not be started or a key could not be made (the message says why)."""


def missing_requirements() -> str | None:
    """Why these helpers cannot run here, or None when they can."""
    if not os.path.isfile(SSHD) or not os.access(SSHD, os.X_OK):
        return f"{SSHD} not found (install openssh-server)"
    if shutil.which(SSH_KEYGEN) is None:
        return "ssh-keygen not found (install openssh-client)"
    if os.geteuid() != 0:
        # sshd needs root to switch to the logged-in user and for its privilege separation.
        return "sshd must run as root for logins to work"
    return loopback_problem()


def loopback_problem() -> str | None:
    """Why this machine cannot bind 127.0.0.2 (the loopback labs' first address), or None."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
    except OSError as exc:
        return f"cannot bind 127.0.0.2 ({exc})"
    return None


# ---------------------------------------------------------------------------------------------
# Keys


def keygen(
    path: Path,
    kind: str = "ed25519",
    *,
    passphrase: str = "",
    pem: bool = False,
    mode: int = 0o600,
    comment: str = "mpiwait-test",
) -> Path:
    """Make a key pair at ``path`` and ``path.pub``; ``kind`` is ed25519, ecdsa521 or rsa."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (path, path.with_name(path.name + ".pub")):
        stale.unlink(missing_ok=True)
    argv = [SSH_KEYGEN, "-q", "-N", passphrase, "-C", comment, "-f", str(path)]
    if kind == "ed25519":
        argv += ["-t", "ed25519"]
    elif kind == "ecdsa521":
        argv += ["-t", "ecdsa", "-b", "521"]
    elif kind == "rsa":
        argv += ["-t", "rsa", "-b", "2048"]
    else:
        raise ValueError(f"unknown key kind {kind!r}")
    if pem:
        argv += ["-m", "PEM"]
    result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise LoopbackError(f"ssh-keygen failed: {result.stderr.strip()}")
    os.chmod(path, mode)
    return path


def public_key(private: Path) -> str:
    """The ``type base64 comment`` line of a key made by keygen()."""
    return Path(str(private) + ".pub").read_text().strip()


# ---------------------------------------------------------------------------------------------
# Ports


def _bindable(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def free_port(*addresses: str) -> int:
    """A port nothing listens on at any of ``addresses`` right now (bind port 0, release)."""
    addresses = addresses or ("127.0.0.1",)
    for _ in range(200):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        if all(_bindable(a, port) for a in addresses[1:]):
            return port
    raise LoopbackError(f"no port free on all of {', '.join(addresses)}")


def _answers_ssh(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# sshd


class Sshd:
    """One sshd on ``address:port``; start(), stop(), start_later(delay), in any order."""

    def __init__(
        self,
        workdir: Path,
        address: str,
        port: int,
        *,
        authorized: Iterable[Path | str] = (),
        host_key_kind: str = "ed25519",
        extra_config: str = "",
    ) -> None:
        self.address = address
        self.port = port
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host_key = keygen(self.dir / "host_key", host_key_kind, comment="host")
        self.authorized_keys = self.dir / "authorized_keys"
        self.set_authorized(authorized)
        self.log_path = self.dir / "sshd.log"
        self.config_path = self.dir / "sshd_config"
        # Every client of a Lab comes from one address: OpenSSH 9.8+ would penalise it for the
        # connections a test ends early (as the namespace labs' sshd_config says too).
        penalties = "PerSourcePenalties no\n" if openssh_version() >= (9, 8) else ""
        self.config_path.write_text(
            f"ListenAddress {address}:{port}\n"
            f"HostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.authorized_keys}\n" + SSHD_KEY_LOGIN_ONLY + "PidFile none\n"
            "UseDNS no\n"
            "MaxStartups 100\n"
            "LogLevel VERBOSE\n" + penalties + extra_config
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.start_error: BaseException | None = None  # what a start_later() ran into

    def set_authorized(self, keys: Iterable[Path | str]) -> None:
        """Replace authorized_keys (paths of private keys or public key lines)."""
        lines = [public_key(Path(k)) if isinstance(k, Path) else str(k).strip() for k in keys]
        self.authorized_keys.write_text("".join(line + "\n" for line in lines))

    def host_key_line(self, name: str | None = None) -> str:
        """This server's known_hosts line, named as ssh names it (``[addr]:port`` off 22)."""
        if name is None:
            name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        kind, blob = public_key(self.host_key).split()[:2]
        return f"{name} {kind} {blob}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc else None

    def start(self) -> Sshd:
        """Start and wait until it answers with an SSH banner."""
        with self._lock:
            if self._closed:
                return self
            if self.running:
                return self
            # sshd wants its privilege separation directory as root; not as another user
            with contextlib.suppress(PermissionError):
                Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
            try:
                self._proc = subprocess.Popen(
                    [SSHD, "-D", "-e", "-f", str(self.config_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            finally:
                log.close()
            proc = self._proc
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LoopbackError(
                    f"sshd on {self.address}:{self.port} exited with {proc.returncode}: "
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            if _answers_ssh(self.address, self.port, 0.5):
                return self
            time.sleep(0.02)
        self.stop()
        raise LoopbackError(f"sshd on {self.address}:{self.port} did not answer in time")

    def start_later(self, delay: float) -> threading.Timer:
        """Start after ``delay`` seconds, from a timer thread (errors kept in start_error)."""

        def fire() -> None:
            try:
                self.start()
            except BaseException as exc:
                self.start_error = exc

        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(delay, fire)
            self._timer.daemon = True
            self._timer.start()
            return self._timer

    def stop(self) -> None:
        """Stop the listener (sessions already open end with their connections)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(3)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            timer.join(START_TIMEOUT + 5)
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# ---------------------------------------------------------------------------------------------
# Fake servers


class SilentListener:
    """Accepts TCP connections on ``address:port`` and never sends a byte."""

    greeting = b""

    def __init__(self, address: str, port: int) -> None:
        self.address = address
        self.port = port
        self.accepted = 0
        self._sock: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> SilentListener:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.address, self.port))
        sock.listen(64)
        sock.settimeout(0.1)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
        self._thread.start()
        return self

    def _serve(self, sock: socket.socket) -> None:
        while True:
            with self._lock:
                if self._sock is not sock:
                    return
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                if self._sock is not sock:
                    conn.close()
                    return
                self._conns.append(conn)
                self.accepted += 1
            if self.greeting:
                with contextlib.suppress(OSError):
                    conn.sendall(self.greeting)

    def stop(self) -> None:
        """Stop listening and drop every connection, freeing the port for a real server."""
        with self._lock:
            sock, self._sock = self._sock, None
            conns, self._conns = self._conns, []
        if sock is not None:
            sock.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()
        if self._thread is not None:
            self._thread.join(2)
            self._thread = None

    close = stop


class BannerThenSilence(SilentListener):
    """Accepts, sends an OpenSSH banner, then says nothing more (a wedged sshd)."""

    greeting = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"


# ---------------------------------------------------------------------------------------------
# The lab: owns everything


class Lab:
    """Makes keys, servers and listeners under ``root``; close() stops all of them."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.keys: list[Path] = []  # every private key made: none may leak into output
        self._things: list[Sshd | SilentListener] = []
        self._timers: list[threading.Timer] = []
        self.errors: list[BaseException] = []  # raised by later() actions, for the test to check
        self._count = 0

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path(self, name: str) -> Path:
        return self.root / name

    def key(self, name: str = "id_ed25519", kind: str = "ed25519", **kw: object) -> Path:
        path = keygen(self.root / "keys" / name, kind, **kw)  # type: ignore[arg-type]
        self.keys.append(path)
        return path

    def free_port(self, *addresses: str) -> int:
        return free_port(*addresses)

    def sshd(
        self,
        address: str,
        port: int | None = None,
        *,
        authorized: Sequence[Path | str] = (),
        start: bool = True,
        **kw: object,
    ) -> Sshd:
        """An sshd; with ``port`` None a free one is chosen (and retried if it was taken)."""
        for _ in range(5):
            self._count += 1
            chosen = port if port is not None else free_port(address)
            server = Sshd(
                self.root / f"sshd{self._count}-{address}",
                address,
                chosen,
                authorized=authorized,
                **kw,  # type: ignore[arg-type]
            )
            self._things.append(server)
            self.keys.append(server.host_key)
            if not start:
                return server
            try:
                return server.start()
            except LoopbackError:
                server.close()
                if port is not None or "Address already in use" not in server.log():
                    raise
        raise LoopbackError(f"could not start sshd on {address}")

    def silent(self, address: str, port: int) -> SilentListener:
        listener = SilentListener(address, port)
        self._things.append(listener)
        return listener.start()

    def banner_then_silence(self, address: str, port: int) -> BannerThenSilence:
        listener = BannerThenSilence(address, port)
        self._things.append(listener)
        listener.start()
        return listener

    def later(self, delay: float, action: Callable[[], object]) -> threading.Timer:
        """Run ``action`` after ``delay`` seconds on a timer thread; close() cancels it."""

        def fire() -> None:
            try:
                action()
            except BaseException as exc:
                self.errors.append(exc)

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        return timer

    def write(self, name: str, text: str, mode: int = 0o644) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.chmod(path, mode)
        return path

    def problems(self) -> list[BaseException]:
        """What went wrong in the background: later() actions and start_later() starts."""
        late = [t.start_error for t in self._things if isinstance(t, Sshd) and t.start_error]
        return [*self.errors, *late]

    def secret_lines(self) -> list[str]:
        return [line for key in self.keys if key.exists() for line in key_secret_lines(key)]

    def close(self) -> None:
        errors: list[BaseException] = []
        for timer in self._timers:
            timer.cancel()
        for timer in self._timers:
            timer.join(START_TIMEOUT + 5)  # one already running finishes before we stop things
        self._timers.clear()
        for thing in reversed(self._things):
            try:
                thing.close()
            except BaseException as exc:  # keep stopping the others
                errors.append(exc)
        self._things.clear()
        if errors:
            raise errors[0]
