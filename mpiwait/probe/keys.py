"""Private keys and host keys, vetted the way OpenSSH (and so mpirun's ssh) would vet them.

Everything here fails with PermanentError: a bad key file or a host key that does not match is
configuration, and no amount of waiting fixes it. paramiko is imported only when a key or a
known_hosts file is first read, so that --check tcp, --help and the worker role never load it.
"""

from __future__ import annotations

import os
import stat
import threading
import warnings
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpiwait.errors import PermanentError

if TYPE_CHECKING:  # annotations only: paramiko is imported where a key is read (see above)
    import paramiko


@dataclass(frozen=True, slots=True)
class Identity:
    path: str
    key: paramiko.PKey

    @property
    def label(self) -> str:
        # The fingerprint identifies the key in logs without revealing any of it.
        return f"{self.path} ({self.key.get_name()} {self.key.fingerprint})"


class UnsupportedKeyType(PermanentError):
    """A private key OpenSSH takes and paramiko cannot (ML-DSA, from OpenSSH 10.5)."""


def _check_mode(path: str) -> None:
    st = os.stat(path)
    # OpenSSH's sshkey_perm_ok: ssh ignores a key of ours that group or others may read, so
    # mpirun would fail where paramiko logs in; another user's key it does not check either.
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        raise PermanentError(
            f"identity file {path}: permissions {mode:04o} are too open; OpenSSH (and so "
            "mpirun) refuses to use it",
            hint=f"chmod 600 {path} (mpi-operator sets 0600 only when sshAuthMountPath is "
            "/root/.ssh; set defaultMode: 0600 on the ssh-auth volume)",
        )


def load_identity(path: str) -> Identity:
    """Load one private key of any type OpenSSH accepts, whatever the file is called."""
    # here, not at the top: only a login reads keys (--check tcp never loads paramiko)
    import paramiko
    from cryptography.exceptions import UnsupportedAlgorithm
    from paramiko.pkey import UnknownKeyType

    # paramiko 3 looks up cryptography's DSA class for every key it reads, and cryptography 51
    # warns on that lookup: a line in the user's log about a key type nobody gave it.
    warnings.filterwarnings("ignore", message="DSA is deprecated", module="paramiko")
    try:
        _check_mode(path)
        key = paramiko.PKey.from_path(path)
    except PermanentError:
        raise
    except (paramiko.PasswordRequiredException, TypeError) as exc:
        # PKey.from_path lets cryptography's TypeError (its message names the password) through
        # for an encrypted key, OpenSSH's format or PEM, instead of PasswordRequiredException.
        if isinstance(exc, TypeError) and "password" not in str(exc).lower():
            raise
        raise PermanentError(
            f"identity file {path} is protected by a passphrase; mpirun's ssh runs without a "
            "terminal and cannot ask for it",
            hint="use an unencrypted key, as mpi-operator's ssh-auth secret provides",
        ) from None
    except FileNotFoundError:
        raise PermanentError(
            f"identity file {path} does not exist",
            hint="mount the job's ssh-auth secret there, or pass -i PATH",
        ) from None
    except PermissionError:
        raise PermanentError(
            f"identity file {path} is not readable by uid {os.getuid()}",
            hint="check the volume's defaultMode and fsGroup, or run as the key's owner",
        ) from None
    except IsADirectoryError:
        raise PermanentError(f"identity file {path} is a directory") from None
    except (UnsupportedAlgorithm, UnknownKeyType) as exc:
        # cryptography names the key type, never the key's content; a cryptography that can
        # parse the key leaves paramiko to refuse it with the type's class, whose name we give.
        if isinstance(exc, UnknownKeyType):
            kind = getattr(exc.key_type, "__name__", str(exc.key_type))
            reason = f"Unsupported key type ({kind[:80]})"
        else:
            reason = str(exc)[:120]
        raise UnsupportedKeyType(
            f"identity file {path}: {reason}; OpenSSH logs in with it, but mpiwait "
            "(paramiko) cannot, so it cannot prove that login",
            hint="give the launcher an RSA, ECDSA or Ed25519 key as well (mpi-operator's "
            "ssh-auth secret holds one), or wait with --check tcp",
        ) from None
    except (paramiko.SSHException, ValueError, UnicodeDecodeError, OSError) as exc:
        # paramiko's message names the key type it could not parse, never the key's content.
        raise PermanentError(
            f"identity file {path} is not a private key paramiko can read "
            f"({type(exc).__name__}: {str(exc)[:120]})",
        ) from None
    return Identity(path=path, key=key)


def present_identity_files(paths: Iterable[str], *, defaults: bool) -> tuple[str, ...]:
    """The identity files ssh will try: OpenSSH skips a default one (no IdentityFile, no -i)
    that does not exist, while a file the user named stays, to be reported if it is missing."""
    return tuple(path for path in paths if not defaults or os.path.lexists(path))


class IdentityCache:
    """Loads each identity file once, however many hosts use it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[str, Identity | PermanentError] = {}

    def get(self, paths: Iterable[str], *, defaults: bool) -> tuple[Identity, ...]:
        """The usable identities among ``paths``.

        OpenSSH skips default identity files that do not exist; a file the user named must exist.
        Raises PermanentError when a file is unusable or when none is left.
        """
        paths = tuple(paths)
        found: list[Identity] = []
        unusable: list[UnsupportedKeyType] = []
        for path in present_identity_files(paths, defaults=defaults):
            with self._lock:
                cached = self._loaded.get(path)
                if cached is None:
                    try:
                        cached = load_identity(path)
                    except PermanentError as exc:
                        cached = exc
                    self._loaded[path] = cached
            if isinstance(cached, UnsupportedKeyType) and defaults:
                unusable.append(cached)  # ssh would try the others too: so does mpiwait
                continue
            if isinstance(cached, PermanentError):
                raise cached
            found.append(cached)
        if not found and unusable:
            raise unusable[0]
        if not found:
            raise PermanentError(
                "no identity file found (tried " + ", ".join(paths) + ")",
                hint="mount the job's ssh-auth secret at ~/.ssh, or pass -i PATH",
            )
        return tuple(found)


class HostKeyPolicy:
    """StrictHostKeyChecking as OpenSSH applies it, without ever writing known_hosts.

    "no": any key. "yes": the key must be listed. "accept-new" and "unset": an unlisted key is
    accepted (mpi-operator's images set "no"; an initContainer image has no ssh config at all,
    and a probe sends nothing secret), but a listed key that differs is refused. mpiwait writes
    no files it was not told to, so accept-new does not record the key: mpirun's ssh will.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[tuple[str, ...], paramiko.HostKeys] = {}

    def _known(self, files: tuple[str, ...]) -> paramiko.HostKeys:
        import paramiko  # here, not at the top: only a login reads known_hosts

        with self._lock:
            known = self._files.get(files)
            if known is None:
                known = paramiko.HostKeys()
                for path in files:
                    try:
                        known.load(path)
                    except (FileNotFoundError, NotADirectoryError):
                        continue
                    except (OSError, paramiko.SSHException) as exc:
                        raise PermanentError(
                            f"known hosts file {path} cannot be read ({exc})"
                        ) from None
                self._files[files] = known
            return known

    def _entry(
        self, address: str, port: int, files: tuple[str, ...]
    ) -> tuple[str, MutableMapping[str, paramiko.PKey] | None]:
        """known_hosts' name for this host (``[addr]:port`` off port 22) and its keys by type."""
        name = address if port == 22 else f"[{address}]:{port}"
        return name, self._known(files).lookup(name)

    def known_types(self, *, address: str, port: int, files: tuple[str, ...]) -> tuple[str, ...]:
        """The key types (``ssh-rsa``, ``ssh-ed25519``, ...) known_hosts lists for this host."""
        _, entry = self._entry(address, port, files)
        return tuple(entry.keys()) if entry is not None else ()

    def check(
        self,
        *,
        host: str,
        address: str,
        port: int,
        key: paramiko.PKey,
        strict: str,
        files: tuple[str, ...],
    ) -> None:
        """Raise PermanentError when the policy refuses ``key`` for this host."""
        if strict == "no":
            return
        name, entry = self._entry(address, port, files)
        listed = entry.get(key.get_name()) if entry is not None else None
        if listed is not None and listed == key:
            return
        if listed is not None:
            raise PermanentError(
                f"host key of {host} ({name}) does not match known_hosts: "
                f"offered {key.get_name()} {key.fingerprint}",
                hint="remove the stale entry (ssh-keygen -R) or set StrictHostKeyChecking no "
                "for the workers",
            )
        if strict == "yes":
            raise PermanentError(
                f"host key of {host} ({name}) is not in known_hosts "
                f"({', '.join(files) or 'no file'}) and StrictHostKeyChecking is yes",
                hint="add the workers' host keys, or set StrictHostKeyChecking no / accept-new",
            )
